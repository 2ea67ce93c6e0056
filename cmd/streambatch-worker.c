/* streambatch-worker — runs tasks for a controller and serves its partitions to peers; started
 * by the controller's backend (local processes, or pods), not by hand. Owns the flags, each also
 * an environment variable (a flag wins), and pod mode (SB_POD_IP, no --listen: listens on
 * $SB_POD_IP:$SB_WORKER_PORT). The same main is streambatch-worker-gpu, the CUDA build
 * (docs/architecture.md); --version says which. Exit codes: 0 orderly shutdown, 1 failure or
 * the controller lost past --controller-lost-timeout, 2 usage error. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    if (sig == SIGUSR1)
        sb_worker_request_calm_stop(); /* `streambatch run` ended: nothing here is needed */
    else
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

#define WORKER_GO -1 /* parsing went through: run (any other value is the exit status) */

/* The worker's settings while they are read: the environment first, then the flags; the raw
 * strings are checked and turned into cfg afterwards. The buffers live as long as cfg uses them. */
typedef struct {
    sb_worker_config cfg;
    const char *pod_ip;
    const char *slots, *budget, *accel, *port, *epoch, *lost, *tls_dir, *tls_name;
    uint64_t port_n; /* --worker-port, checked */
    char listen[160], adv[160];
    sb_rpc_opts rpc;
} worker_args;

static void worker_args_from_env(worker_args *a)
{
    sb_worker_config *cfg = &a->cfg;
    cfg->controller = env_or("SB_CONTROLLER", NULL);
    cfg->id = env_or("SB_WORKER_ID", NULL);
    cfg->pool = env_or("SB_POOL", "cpu");
    cfg->listen = env_or("SB_LISTEN", NULL);
    a->pod_ip = env_or("SB_POD_IP", NULL);
    cfg->advertise = env_or("SB_ADVERTISE", a->pod_ip ? a->pod_ip : env_or("POD_IP", NULL));
    cfg->spill_dir = env_or("SB_SPILL_DIR", NULL);
    cfg->pipeline = env_or("SB_PIPELINE", NULL);
    cfg->metrics_addr = env_or("SB_METRICS_ADDR", NULL);
    a->slots = env_or("SB_SLOTS", "1");
    a->budget = env_or("SB_STORE_BUDGET", "1Gi");
    a->accel = env_or("SB_ACCELERATORS", "0");
    a->port = env_or("SB_WORKER_PORT", "7070");
    a->epoch = env_or("SB_EPOCH", "0");
    a->lost = env_or("SB_CONTROLLER_LOST_TIMEOUT", "120s");
    a->tls_dir = env_or("SB_TLS_DIR", NULL);
    a->tls_name = env_or("SB_TLS_SERVER_NAME", NULL);
}

/* Where the value of the flag getopt_long returned as ch goes (NULL: a flag without one). */
static const char **worker_flag_slot(worker_args *a, int ch)
{
    sb_worker_config *cfg = &a->cfg;
    switch (ch) {
    case 'c':
        return &cfg->controller;
    case 'i':
        return &cfg->id;
    case 'p':
        return &cfg->pool;
    case 's':
        return &a->slots;
    case 'l':
        return &cfg->listen;
    case 'a':
        return &cfg->advertise;
    case 'b':
        return &a->budget;
    case 'd':
        return &cfg->spill_dir;
    case 'A':
        return &a->accel;
    case 'P':
        return &a->port;
    case 'n':
        return &cfg->pipeline;
    case 'e':
        return &a->epoch;
    case 'L':
        return &a->lost;
    case 'M':
        return &cfg->metrics_addr;
    case 'T':
        return &a->tls_dir;
    case 'N':
        return &a->tls_name;
    default:
        return NULL;
    }
}

/* The flags over the environment's values. Returns WORKER_GO, or the exit status (--help,
 * --version, a usage error). */
static int worker_parse_flags(int argc, char **argv, worker_args *a)
{
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
        const char **slot = worker_flag_slot(a, ch);
        if (slot != NULL) {
            *slot = optarg;
        } else if (ch == 'V') {
            printf("%s %s\n",
                   sb_mlp_cuda_probe != NULL ? "streambatch-worker-gpu" : "streambatch-worker",
                   SB_VERSION);
            return 0;
        } else if (ch == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || a->cfg.controller == NULL || a->cfg.id == NULL) {
        fprintf(stderr, "streambatch-worker: --controller and --id are required\n");
        usage(stderr);
        return 2;
    }
    return WORKER_GO;
}

/* A count in min..max: digits only (strtol alone would take "", " 2" or "+2"). */
static int parse_count(const char *s, long min, long max, uint32_t *out)
{
    uint64_t v;
    if (parse_u64(s, &v) != 0 || v < (uint64_t)min || v > (uint64_t)max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* The counts and sizes: slots, accelerators, store budget, the pod-mode port. Returns
 * WORKER_GO, or 2. */
static int worker_check_numbers(worker_args *a)
{
    sb_worker_config *cfg = &a->cfg;
    if (parse_count(a->slots, 1, 256, &cfg->slots) != 0) {
        fprintf(stderr, "streambatch-worker: --slots must be 1..256, got \"%s\"\n", a->slots);
        return 2;
    }
    if (parse_count(a->accel, 0, 256, &cfg->accelerators) != 0) {
        fprintf(stderr, "streambatch-worker: --accelerators must be 0..256, got \"%s\"\n",
                a->accel);
        return 2;
    }
    int64_t b = 0;
    sb_err err;
    if (sb_quantity_value(a->budget, &b, &err) != 0) { /* (b is not set then) */
        fprintf(stderr, "streambatch-worker: --store-budget: %s\n", err.msg);
        return 2;
    }
    if (b <= 0) {
        fprintf(stderr, "streambatch-worker: --store-budget: must be positive\n");
        return 2;
    }
    cfg->store_budget = (size_t)b;
    if (parse_u64(a->port, &a->port_n) != 0 || a->port_n < 1 || a->port_n > 65535)
        return bad("worker-port", "SB_WORKER_PORT", "must be a port number 1..65535", a->port);
    return WORKER_GO;
}

/* What binds the worker: its addresses (pod mode's listen address, an IPv6 advertised host in
 * brackets), the controller epoch and the pipeline it accepts, and how long it waits for a lost
 * controller. Returns WORKER_GO, or 2. */
static int worker_check_binding(worker_args *a)
{
    sb_worker_config *cfg = &a->cfg;
    /* Pod mode: the pod IP (IPv6 in brackets) and the fixed port the pod spec declares. */
    if (cfg->listen == NULL && a->pod_ip != NULL) {
        int v6 = strchr(a->pod_ip, ':') != NULL && a->pod_ip[0] != '[';
        snprintf(a->listen, sizeof a->listen, "%s%s%s:%" PRIu64, v6 ? "[" : "", a->pod_ip,
                 v6 ? "]" : "", a->port_n);
        cfg->listen = a->listen;
    }
    if (cfg->advertise != NULL && strchr(cfg->advertise, ':') != NULL && cfg->advertise[0] != '[') {
        snprintf(a->adv, sizeof a->adv, "[%s]", cfg->advertise); /* an IPv6 host */
        cfg->advertise = a->adv;
    }
    if (parse_u64(a->epoch, &cfg->epoch) != 0)
        return bad("epoch", "SB_EPOCH", "must be a non-negative integer", a->epoch);
    if (cfg->pipeline != NULL && !pipeline_ok(cfg->pipeline))
        return bad("pipeline", "SB_PIPELINE", "must be NAMESPACE/NAME", cfg->pipeline);
    int64_t ns;
    sb_err err;
    if (sb_duration_parse(a->lost, &ns, &err) != 0)
        return bad("controller-lost-timeout", "SB_CONTROLLER_LOST_TIMEOUT",
                   "must be a duration such as 90s, 2m or 500ms", a->lost);
    if (ns < 1000000 || ns / 1000000 > 24LL * 3600 * 1000)
        return bad("controller-lost-timeout", "SB_CONTROLLER_LOST_TIMEOUT",
                   "must be between 1ms and 24h", a->lost);
    cfg->controller_lost_timeout_ms = (int)(ns / 1000000);
    return WORKER_GO;
}

/* --tls-dir: loaded and tried (a handshake with itself) before the worker dials anyone, so a
 * bad Secret fails at start with its reason. Returns WORKER_GO, or 2. */
static int worker_load_tls(worker_args *a)
{
    static sb_rpc_tlsdir tls;
    sb_err err;
    if (a->tls_dir == NULL)
        return WORKER_GO;
    if (sb_rpc_tlsdir_load(&tls, a->tls_dir, a->tls_name, &err) != 0 ||
        sb_rpc_tlsdir_selftest(&tls, 5000, &err) != 0) {
        fprintf(stderr, "streambatch-worker: %s\n", err.msg);
        return 2;
    }
    sb_rpc_tlsdir_apply(&tls, &a->rpc);
    a->cfg.rpc = &a->rpc;
    return WORKER_GO;
}

/* The pipeline's credentials (rpc/auth.h) from the environment, which the controller sets (a
 * Secret owned by the Pipeline in Kubernetes, a per-run token in `streambatch run`); removed
 * from the environment once read, so that no child process inherits them. Returns WORKER_GO,
 * or 2: a worker without them would serve anyone. */
static int worker_load_auth(worker_args *a)
{
    static sb_rpc_creds creds;
    const char *tok = getenv(SB_AUTH_ENV_TOKEN), *ctl = getenv(SB_AUTH_ENV_CONTROLLER_SHA256);
    sb_err err;
    if (tok == NULL || ctl == NULL) {
        fprintf(stderr,
                "streambatch-worker: %s is not set: a worker needs its pipeline's credentials "
                "(%s, %s), which the controller gives the workers it starts\n",
                tok == NULL ? SB_AUTH_ENV_TOKEN : SB_AUTH_ENV_CONTROLLER_SHA256, SB_AUTH_ENV_TOKEN,
                SB_AUTH_ENV_CONTROLLER_SHA256);
        return 2;
    }
    if (sb_rpc_creds_worker(&creds, tok, ctl, &err) != 0) {
        fprintf(stderr, "streambatch-worker: %s\n", err.msg);
        return 2;
    }
    unsetenv(SB_AUTH_ENV_TOKEN);
    unsetenv(SB_AUTH_ENV_CONTROLLER_SHA256);
    a->rpc.auth = &creds;
    a->cfg.rpc = &a->rpc;
    return WORKER_GO;
}

/* Runs until the controller says stop, a signal, or the controller is lost. Returns 0 or 1. */
static int worker_serve(const worker_args *a)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    sb_rpc_tune_malloc(0); /* keep freed receive buffers: ~40% less CPU per GiB fetched */
    sb_err err;
    int rc = sb_worker_run(&a->cfg, &err);
    if (sb_worker_abandoned()) { /* slots still run: no cleanup may race them */
        if (rc != 0)
            sb_log(SB_LOG_ERROR, "worker failed", "worker", a->cfg.id, "error", err.msg, NULL);
        fflush(NULL);
        _exit(rc != 0);
    }
    sb_op_shutdown(); /* exec's long-lived processes */
    if (rc != 0) {
        sb_log(SB_LOG_ERROR, "worker failed", "worker", a->cfg.id, "error", err.msg, NULL);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static worker_args a;
    worker_args_from_env(&a);
    int rc = worker_parse_flags(argc, argv, &a);
    if (rc == WORKER_GO)
        rc = worker_check_numbers(&a);
    if (rc == WORKER_GO)
        rc = worker_check_binding(&a);
    if (rc == WORKER_GO)
        rc = worker_load_tls(&a);
    if (rc == WORKER_GO)
        rc = worker_load_auth(&a);
    return rc == WORKER_GO ? worker_serve(&a) : rc;
}
