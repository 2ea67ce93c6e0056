/* streambatch-worker — runs tasks for a controller and serves its partitions to peers.
 * Started by the controller's backend (local processes for `streambatch run`, pods on
 * Kubernetes), not by hand. Every flag can also come from the environment (for pods).
 * Exit codes: 0 orderly shutdown, 1 failure, 2 usage error. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "rpc/rpc.h"
#include "spec/quantity.h"
#include "version.h"
#include "worker/runtime.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: streambatch-worker --controller HOST:PORT --id ID [options]\n"
            "\n"
            "  --controller ADDR   Control service of the controller   (SB_CONTROLLER)\n"
            "  --id ID             unique worker id                    (SB_WORKER_ID)\n"
            "  --pool POOL         cpu or gpu, default cpu             (SB_POOL)\n"
            "  --slots N           tasks at once, default 1            (SB_SLOTS)\n"
            "  --listen ADDR       Data service address, default 127.0.0.1:0 (SB_LISTEN)\n"
            "  --advertise HOST    host peers use to reach this worker (SB_ADVERTISE, POD_IP)\n"
            "  --store-budget SIZE partition bytes kept in memory, default 1Gi (SB_STORE_BUDGET)\n"
            "  --spill-dir DIR     where partitions spill, default /tmp (SB_SPILL_DIR)\n"
            "  --accelerators N    at most N slots run ops at once; the others fetch and write\n"
            "                      meanwhile (a GPU shared by the slots), default 0 = no limit\n"
            "                      (SB_ACCELERATORS)\n"
            "  --version, --help\n");
}

static void on_signal(int sig)
{
    (void)sig;
    sb_worker_request_stop();
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v != NULL && *v ? v : def;
}

int main(int argc, char **argv)
{
    sb_worker_config cfg = {0};
    cfg.controller = env_or("SB_CONTROLLER", NULL);
    cfg.id = env_or("SB_WORKER_ID", NULL);
    cfg.pool = env_or("SB_POOL", "cpu");
    cfg.listen = env_or("SB_LISTEN", NULL);
    cfg.advertise = env_or("SB_ADVERTISE", env_or("POD_IP", NULL));
    cfg.spill_dir = env_or("SB_SPILL_DIR", NULL);
    const char *slots = env_or("SB_SLOTS", "1"), *budget = env_or("SB_STORE_BUDGET", "1Gi");
    const char *accel = env_or("SB_ACCELERATORS", "0");
    static const struct option opts[] = {{"controller", required_argument, 0, 'c'},
                                         {"id", required_argument, 0, 'i'},
                                         {"pool", required_argument, 0, 'p'},
                                         {"slots", required_argument, 0, 's'},
                                         {"listen", required_argument, 0, 'l'},
                                         {"advertise", required_argument, 0, 'a'},
                                         {"store-budget", required_argument, 0, 'b'},
                                         {"spill-dir", required_argument, 0, 'd'},
                                         {"accelerators", required_argument, 0, 'A'},
                                         {"version", no_argument, 0, 'V'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            cfg.controller = optarg;
            break;
        case 'i':
            cfg.id = optarg;
            break;
        case 'p':
            cfg.pool = optarg;
            break;
        case 's':
            slots = optarg;
            break;
        case 'l':
            cfg.listen = optarg;
            break;
        case 'a':
            cfg.advertise = optarg;
            break;
        case 'b':
            budget = optarg;
            break;
        case 'd':
            cfg.spill_dir = optarg;
            break;
        case 'A':
            accel = optarg;
            break;
        case 'V':
            printf("streambatch-worker %s\n", SB_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || cfg.controller == NULL || cfg.id == NULL) {
        fprintf(stderr, "streambatch-worker: --controller and --id are required\n");
        usage(stderr);
        return 2;
    }
    char *end;
    long n = strtol(slots, &end, 10);
    if (*end != '\0' || n < 1 || n > 256) {
        fprintf(stderr, "streambatch-worker: --slots must be 1..256, got \"%s\"\n", slots);
        return 2;
    }
    cfg.slots = (uint32_t)n;
    n = strtol(accel, &end, 10);
    if (*end != '\0' || n < 0 || n > 256) {
        fprintf(stderr, "streambatch-worker: --accelerators must be 0..256, got \"%s\"\n", accel);
        return 2;
    }
    cfg.accelerators = (uint32_t)n;
    int64_t b;
    sb_err err;
    if (sb_quantity_value(budget, &b, &err) != 0 || b <= 0) {
        fprintf(stderr, "streambatch-worker: --store-budget: %s\n",
                b <= 0 ? "must be positive" : err.msg);
        return 2;
    }
    cfg.store_budget = (size_t)b;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sb_rpc_tune_malloc(0); /* keep freed receive buffers: ~40% less CPU per GiB fetched */
    if (sb_worker_run(&cfg, &err) != 0) {
        sb_log(SB_LOG_ERROR, "worker failed", "worker", cfg.id, "error", err.msg, NULL);
        return 1;
    }
    return 0;
}
