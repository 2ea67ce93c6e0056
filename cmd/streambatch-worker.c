/* streambatch-worker — runs tasks for a controller and serves its partitions to peers.
 * Started by the controller's backend (local processes for `streambatch run`, pods on
 * Kubernetes), not by hand. Every flag can also come from the environment (for pods); a flag
 * wins over its variable. Pod mode: with SB_POD_IP set and no --listen/SB_LISTEN it listens on
 * $SB_POD_IP:$SB_WORKER_PORT (default 7070) and advertises $SB_POD_IP.
 * Exit codes: 0 orderly shutdown (also when the controller says so), 1 failure (the controller
 * lost past --controller-lost-timeout included), 2 usage error.
 * The same main is streambatch-worker-gpu, the CUDA build (linked with the CUDA objects of
 * worker/ops/tensor: docs/architecture.md, "The CUDA build"); --version says which. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "rpc/rpc.h"
#include "rpc/tlsdir.h"
#include "spec/quantity.h"
#include "version.h"
#include "worker/ops/ops.h"
#include "worker/ops/tensor/mlp_cuda.h"
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
            "  --advertise HOST    host peers use to reach this worker, default the listen host\n"
            "                      (SB_ADVERTISE, else SB_POD_IP, else POD_IP)\n"
            "  --worker-port PORT  port of the Data service in pod mode, 1..65535, default 7070\n"
            "                      (SB_WORKER_PORT; used when SB_POD_IP is set and no --listen:\n"
            "                      listens on SB_POD_IP:PORT and advertises SB_POD_IP)\n"
            "  --store-budget SIZE partition bytes kept in memory, default 1Gi (SB_STORE_BUDGET)\n"
            "  --spill-dir DIR     where partitions spill, default $TMPDIR or /tmp (SB_SPILL_DIR)\n"
            "  --accelerators N    at most N slots run ops at once; the others fetch and write\n"
            "                      meanwhile (a GPU shared by the slots), default 0 = no limit\n"
            "                      (SB_ACCELERATORS)\n"
            "  --pipeline NS/NAME  the pipeline this worker runs for; a Rebind for another one\n"
            "                      is refused, default any (SB_PIPELINE)\n"
            "  --epoch N           controller epoch accepted at start; a Rebind with a lower\n"
            "                      epoch is refused, default 0 (SB_EPOCH)\n"
            "  --controller-lost-timeout DURATION\n"
            "                      exit with status 1 when the controller stayed unreachable this\n"
            "                      long (Go duration: 90s, 2m, 500ms); a Rebind restarts the\n"
            "                      clock, default 120s (SB_CONTROLLER_LOST_TIMEOUT)\n"
            "  --metrics-addr ADDR serve Prometheus /metrics on HOST:PORT (docs/metrics.md),\n"
            "                      default none (SB_METRICS_ADDR)\n"
            "  --tls-dir DIR       mutual TLS on every gRPC connection: DIR holds tls.crt,\n"
            "                      tls.key and ca.crt (a cert-manager Secret); the Data and\n"
            "                      Worker services require a client certificate signed by\n"
            "                      ca.crt; default plaintext (SB_TLS_DIR). /metrics stays plain\n"
            "  --tls-server-name NAME  name the peers' certificates are checked for (peers are\n"
            "                      dialled by IP), default streambatch (SB_TLS_SERVER_NAME)\n"
            "  --version, --help\n"
            "\n"
            "Environment only: SB_POD_IP (pod mode, see --worker-port), POD_IP (advertised host\n"
            "when neither --advertise, SB_ADVERTISE nor SB_POD_IP is set), SB_LOG_LEVEL.\n"
            "The worker serves Data.Fetch and Worker.Rebind on its listen address.\n"
            "Exit status: 0 orderly shutdown, 1 failure or controller lost, 2 usage error.\n");
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

/* A usage error naming the flag and its variable. Returns 2 (the exit status). */
static int bad(const char *flag, const char *env, const char *what, const char *value)
{
    fprintf(stderr, "streambatch-worker: --%s (%s) %s, got \"%s\"\n", flag, env, what, value);
    return 2;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* "ns/name": two non-empty parts without spaces. */
static int pipeline_ok(const char *s)
{
    const char *slash = strchr(s, '/');
    if (slash == NULL || slash == s || slash[1] == '\0' || strchr(slash + 1, '/') != NULL)
        return 0;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return 0;
    return 1;
}

int main(int argc, char **argv)
{
    sb_worker_config cfg = {0};
    cfg.controller = env_or("SB_CONTROLLER", NULL);
    cfg.id = env_or("SB_WORKER_ID", NULL);
    cfg.pool = env_or("SB_POOL", "cpu");
    cfg.listen = env_or("SB_LISTEN", NULL);
    const char *pod_ip = env_or("SB_POD_IP", NULL);
    cfg.advertise = env_or("SB_ADVERTISE", pod_ip ? pod_ip : env_or("POD_IP", NULL));
    cfg.spill_dir = env_or("SB_SPILL_DIR", NULL);
    cfg.pipeline = env_or("SB_PIPELINE", NULL);
    cfg.metrics_addr = env_or("SB_METRICS_ADDR", NULL);
    const char *slots = env_or("SB_SLOTS", "1"), *budget = env_or("SB_STORE_BUDGET", "1Gi");
    const char *accel = env_or("SB_ACCELERATORS", "0");
    const char *port = env_or("SB_WORKER_PORT", "7070"), *epoch = env_or("SB_EPOCH", "0");
    const char *lost = env_or("SB_CONTROLLER_LOST_TIMEOUT", "120s");
    const char *tls_dir = env_or("SB_TLS_DIR", NULL);
    const char *tls_name = env_or("SB_TLS_SERVER_NAME", NULL);
    static const struct option opts[] = {{"controller", required_argument, 0, 'c'},
                                         {"id", required_argument, 0, 'i'},
                                         {"pool", required_argument, 0, 'p'},
                                         {"slots", required_argument, 0, 's'},
                                         {"listen", required_argument, 0, 'l'},
                                         {"advertise", required_argument, 0, 'a'},
                                         {"store-budget", required_argument, 0, 'b'},
                                         {"spill-dir", required_argument, 0, 'd'},
                                         {"accelerators", required_argument, 0, 'A'},
                                         {"worker-port", required_argument, 0, 'P'},
                                         {"pipeline", required_argument, 0, 'n'},
                                         {"epoch", required_argument, 0, 'e'},
                                         {"controller-lost-timeout", required_argument, 0, 'L'},
                                         {"metrics-addr", required_argument, 0, 'M'},
                                         {"tls-dir", required_argument, 0, 'T'},
                                         {"tls-server-name", required_argument, 0, 'N'},
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
        case 'P':
            port = optarg;
            break;
        case 'n':
            cfg.pipeline = optarg;
            break;
        case 'e':
            epoch = optarg;
            break;
        case 'L':
            lost = optarg;
            break;
        case 'M':
            cfg.metrics_addr = optarg;
            break;
        case 'T':
            tls_dir = optarg;
            break;
        case 'N':
            tls_name = optarg;
            break;
        case 'V':
            printf("%s %s\n",
                   sb_mlp_cuda_probe != NULL ? "streambatch-worker-gpu" : "streambatch-worker",
                   SB_VERSION);
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
    uint64_t u;
    if (parse_u64(port, &u) != 0 || u < 1 || u > 65535)
        return bad("worker-port", "SB_WORKER_PORT", "must be a port number 1..65535", port);
    /* Pod mode: the pod IP (IPv6 in brackets) and the fixed port the pod spec declares. */
    char listen[160];
    if (cfg.listen == NULL && pod_ip != NULL) {
        int v6 = strchr(pod_ip, ':') != NULL && pod_ip[0] != '[';
        snprintf(listen, sizeof listen, "%s%s%s:%" PRIu64, v6 ? "[" : "", pod_ip, v6 ? "]" : "", u);
        cfg.listen = listen;
    }
    char adv[160];
    if (cfg.advertise != NULL && strchr(cfg.advertise, ':') != NULL && cfg.advertise[0] != '[') {
        snprintf(adv, sizeof adv, "[%s]", cfg.advertise); /* an IPv6 host */
        cfg.advertise = adv;
    }
    if (parse_u64(epoch, &cfg.epoch) != 0)
        return bad("epoch", "SB_EPOCH", "must be a non-negative integer", epoch);
    if (cfg.pipeline != NULL && !pipeline_ok(cfg.pipeline))
        return bad("pipeline", "SB_PIPELINE", "must be NAMESPACE/NAME", cfg.pipeline);
    int64_t ns;
    if (sb_duration_parse(lost, &ns, &err) != 0)
        return bad("controller-lost-timeout", "SB_CONTROLLER_LOST_TIMEOUT",
                   "must be a duration such as 90s, 2m or 500ms", lost);
    if (ns < 1000000 || ns / 1000000 > 24LL * 3600 * 1000)
        return bad("controller-lost-timeout", "SB_CONTROLLER_LOST_TIMEOUT",
                   "must be between 1ms and 24h", lost);
    cfg.controller_lost_timeout_ms = (int)(ns / 1000000);
    static sb_rpc_tlsdir tls;
    sb_rpc_opts rpc = {0};
    if (tls_dir != NULL) {
        if (sb_rpc_tlsdir_load(&tls, tls_dir, tls_name, &err) != 0) {
            fprintf(stderr, "streambatch-worker: %s\n", err.msg);
            return 2;
        }
        if (sb_rpc_tlsdir_selftest(&tls, 5000, &err) != 0) {
            fprintf(stderr, "streambatch-worker: %s\n", err.msg);
            return 2;
        }
        sb_rpc_tlsdir_apply(&tls, &rpc);
        cfg.rpc = &rpc;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sb_rpc_tune_malloc(0); /* keep freed receive buffers: ~40% less CPU per GiB fetched */
    int rc = sb_worker_run(&cfg, &err);
    sb_op_shutdown(); /* exec's long-lived processes */
    if (rc != 0) {
        sb_log(SB_LOG_ERROR, "worker failed", "worker", cfg.id, "error", err.msg, NULL);
        return 1;
    }
    return 0;
}
