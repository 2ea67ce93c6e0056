/* streambatch-controller — the Kubernetes operator: watches Pipeline resources and runs them
 * with worker pods (controller/operator/operator.h). Flags can also come from the environment (for
 * the Deployment). Exit codes: 0 orderly stop (SIGTERM/SIGINT; the leader lease is released), 1
 * failure or lost leader lease, 2 usage error. */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller/operator/objects/netpol.h"
#include "controller/operator/operator.h"
#include "controller/operator/testrun.h"
#include "controller/operator/uninstall.h"
#include "core/log.h"
#include "plan/price.h"
#include "rpc/tlsdir.h"
#include "spec/quantity.h"
#include "version.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: streambatch-controller [options]\n"
            "\n"
            "Watches Pipeline resources (streambatch.dev/v1alpha1) and runs them on the cluster:\n"
            "worker pods per pool, status, events, leader election. See docs/operator.md.\n"
            "\n"
            "  --kubeconfig PATH           kubeconfig file; default: in-cluster config when\n"
            "                              $KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG or\n"
            "                              ~/.kube/config                        (KUBECONFIG)\n"
            "  --context NAME              kubeconfig context, default the current one\n"
            "  --namespace NS              watch this namespace; repeatable or comma-separated;\n"
            "                              default all namespaces          (SB_WATCH_NAMESPACES)\n"
            "  --grpc-listen HOST:0        where each pipeline's Control service listens (port 0:\n"
            "                              one free port per pipeline); workers must reach HOST;\n"
            "                              default $SB_POD_IP or $POD_IP, else 127.0.0.1\n"
            "                                                                 (SB_GRPC_LISTEN)\n"
            "  --metrics-listen HOST:PORT  /metrics, /healthz, /readyz; HOST empty: the pod IP\n"
            "                              ($SB_POD_IP/$POD_IP) else 0.0.0.0; \"off\" disables;\n"
            "                              default :8080                   (SB_METRICS_LISTEN)\n"
            "  --leader-elect=true|false   compete for a Lease, only the leader reconciles;\n"
            "                              default true                       (SB_LEADER_ELECT)\n"
            "  --leader-election-id NAME   the Lease's name, default streambatch-controller\n"
            "                                                          (SB_LEADER_ELECTION_ID)\n"
            "  --leader-election-namespace NS  the Lease's namespace; default $POD_NAMESPACE,\n"
            "                              else the kubeconfig's/service account's namespace\n"
            "                                                   (SB_LEADER_ELECTION_NAMESPACE)\n"
            "  --lease-duration D          default 15s  (Go durations: 500ms, 15s, 1m)\n"
            "  --renew-deadline D          default 10s\n"
            "  --retry-period D            default 2s\n"
            "  --identity ID               this replica in the Lease; default <hostname>_<random>\n"
            "                                                                   (SB_IDENTITY)\n"
            "  --worker-image IMAGE        default worker image (spec.workerTemplate.image wins);\n"
            "                              default streambatch/worker:latest   (SB_WORKER_IMAGE)\n"
            "  --worker-gpu-image IMAGE    worker image of GPU pools (the CUDA build; the\n"
            "                              workerTemplate's image still wins); default\n"
            "                              streambatch/worker-gpu:latest   (SB_WORKER_GPU_IMAGE)\n"
            "  --max-pending-pods N        Pending pods per pool at most, default 2\n"
            "                                                            (SB_MAX_PENDING_PODS)\n"
            "  --status-interval D         at most one status write per pipeline per D (plus one\n"
            "                              per phase change), default 2s    (SB_STATUS_INTERVAL)\n"
            "  --workers N                 reconcile threads, default 4           (SB_WORKERS)\n"
            "  --heartbeat-timeout D       a silent worker is lost after D, default 5s\n"
            "                                                           (SB_HEARTBEAT_TIMEOUT)\n"
            "  --tls-dir DIR               mutual TLS for every Control service and the calls to\n"
            "                              workers: DIR holds tls.crt, tls.key, ca.crt (the\n"
            "                              Secret mounted); needs --tls-secret     (SB_TLS_DIR)\n"
            "  --tls-secret NAME           Secret (same layout, same CA) that worker pods mount\n"
            "                              at /etc/streambatch/tls; it must exist in each\n"
            "                              pipeline's namespace                 (SB_TLS_SECRET)\n"
            "  --tls-server-name NAME      the name certificates are checked for (peers are\n"
            "                              dialled by IP), default streambatch\n"
            "                                                             (SB_TLS_SERVER_NAME)\n"
            "  environment SB_AUTH_KEY     the operator's key (32 to 256 characters, the same in\n"
            "                              every replica): each Pipeline's credentials derive\n"
            "                              from it (the Helm chart keeps one in a Secret)\n"
            "                              /metrics, /healthz and /readyz stay plain HTTP\n"
            "  --worker-network-policy JSON  a NetworkPolicy per Pipeline, owned by it, letting\n"
            "                              into its worker pods only 7070 from its own workers\n"
            "                              and the controller pods, and 9102 from metricsFrom:\n"
            "                              {\"controllerNamespace\": NS, \"controllerLabels\":\n"
            "                              {...}, \"metricsFrom\": [...]}; default off (the\n"
            "                              chart sets it: networkPolicy.perPipeline)\n"
            "  --price-cpu-core-hour P     prices a plan is costed with (docs/scheduling.md),\n"
            "  --price-memory-gib-hour P   per hour; a Pipeline's spec.execution.pricing\n"
            "                              overrides each; default the built-in table\n"
            "                     (SB_PRICE_CPU_CORE_HOUR, SB_PRICE_MEMORY_GIB_HOUR)\n"
            "  --gpu-type NAME             GPU type of the GPU pools' nodes, priced from\n"
            "                              --price-gpu-hour or the table   (SB_GPU_TYPE)\n"
            "  --price-gpu-hour TYPE=P     price of one GPU of TYPE per hour; repeatable\n"
            "                              (SB_PRICE_GPU_HOUR: comma-separated)\n"
            "  --replan-threshold F        re-plan when a stage's measured rate differs from\n"
            "                              the planned one by more than F (relative),\n"
            "                              default 0.25                (SB_REPLAN_THRESHOLD)\n"
            "  --replan-interval D         at most one plan per pipeline per D, default 60s\n"
            "                                                           (SB_REPLAN_INTERVAL)\n"
            "  --test-pipeline FILE        instead of running the operator: create the Pipeline\n"
            "                              in FILE, follow it to its end, delete it when it\n"
            "                              Succeeded; exit 0 only then (the chart's helm test)\n"
            "  --test-timeout D            for --test-pipeline, default 5m\n"
            "  --uninstall DEPLOYMENT      instead of running the operator: scale the controller\n"
            "                              Deployment (in --leader-election-namespace) to 0,\n"
            "                              wait for its pods, delete the worker pods of every\n"
            "                              Pipeline (of --namespace) and remove its finalizer,\n"
            "                              delete the Lease --leader-election-id (the chart's\n"
            "                              pre-delete hook; the Pipelines are kept)\n"
            "  --uninstall-test-pod NAME   for --uninstall: also delete this pod (helm test's)\n"
            "  --uninstall-timeout D       for --uninstall: wait for the controller pods at most\n"
            "                              D, default 2m\n"
            "  --version, --help\n"
            "  --checkpoint-max-bytes      removed, refused: a Pipeline's checkpoint is a log\n"
            "                              beside its sink, status.checkpoint its summary\n"
            "\n"
            "Exit status: 0 after SIGTERM/SIGINT (lease released), 1 on failure or when the\n"
            "leader lease is lost (a restarted process competes again), 2 on bad flags.\n");
}

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v != NULL && *v ? v : def;
}

static int bad(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, "streambatch-controller: %s %s: %s (try --help)\n", flag, value, why);
    return 2;
}

static int parse_ms(const char *flag, const char *v, long *out)
{
    int64_t ns;
    sb_err err;
    if (sb_duration_parse(v, &ns, &err) != 0)
        return bad(flag, v, err.msg);
    if (ns <= 0)
        return bad(flag, v, "must be positive");
    *out = (long)(ns / 1000000);
    if (*out == 0)
        *out = 1;
    return 0;
}

static int parse_uint(const char *flag, const char *v, long min, long max, long *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    /* digits only: strtol alone would take " 4" and "+4" */
    if (*v < '0' || *v > '9' || *end != '\0' || n < min || n > max) {
        char why[64];
        snprintf(why, sizeof why, "must be an integer in [%ld, %ld]", min, max);
        return bad(flag, v, why);
    }
    *out = n;
    return 0;
}

static int parse_bool(const char *flag, const char *v, int *out)
{
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *out = 1;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *out = 0;
    else
        return bad(flag, v, "must be true or false");
    return 0;
}

/* "HOST:PORT" (HOST may be empty) into host and port. */
static int split_hostport(const char *flag, const char *v, char *host, size_t hl, long *port)
{
    const char *c = strrchr(v, ':');
    if (c == NULL)
        return bad(flag, v, "expected HOST:PORT");
    if ((size_t)(c - v) >= hl)
        return bad(flag, v, "host too long");
    snprintf(host, hl, "%.*s", (int)(c - v), v);
    return parse_uint(flag, c + 1, 0, 65535, port);
}

/* A price per hour (NULL: not set). */
static int parse_price(const char *flag, const char *v, double *out, bool *set)
{
    if (v == NULL)
        return 0;
    char *end = NULL;
    double d = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || !(d >= 0) || d > 1e9)
        return bad(flag, v, "must be a price per hour >= 0");
    *out = d;
    *set = true;
    return 0;
}

#define MAX_NAMESPACES 32

/* --test-pipeline: what the chart's helm test runs (controller/operator/testrun.h). */
static int run_test(const sb_operator_config *cfg, const char *path, const char *timeout)
{
    sb_testrun_opts o = {.path = path,
                         .kubeconfig = cfg->kubeconfig,
                         .context = cfg->context,
                         .out = stdout,
                         .stop = &g_stop};
    int rc = parse_ms("--test-timeout", timeout, &o.timeout_ms);
    if (rc != 0)
        return rc;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sb_err err = {0};
    rc = sb_testrun_run(&o, &err);
    if (rc != 0)
        fprintf(stderr, "streambatch-controller: --test-pipeline %s: %s\n", path, err.msg);
    return rc == 0 ? 0 : 1;
}

/* --uninstall: what the chart's pre-delete hook runs (controller/operator/uninstall.h). */
static int run_uninstall(const sb_operator_config *cfg, const char *deployment,
                         const char *test_pod, const char *timeout)
{
    sb_uninstall_opts o = {.kubeconfig = cfg->kubeconfig,
                           .context = cfg->context,
                           .namespace = cfg->lease_namespace,
                           .deployment = deployment,
                           .lease = cfg->lease_name,
                           .test_pod = test_pod,
                           .namespaces = cfg->namespaces,
                           .nnamespaces = cfg->nnamespaces,
                           .out = stdout};
    int rc = parse_ms("--uninstall-timeout", timeout, &o.timeout_ms);
    if (rc != 0)
        return rc;
    sb_err err = {0};
    if (sb_uninstall_run(&o, &err) != 0) {
        fprintf(stderr, "streambatch-controller: --uninstall %s: %s\n", deployment, err.msg);
        return 1;
    }
    return 0;
}

#define CTL_GO -1 /* parsing went through: go on (any other value is the exit status) */

/* The controller's settings while they are read: the environment first, then the flags; the
 * raw strings are checked and turned into cfg afterwards. One per process (static in main):
 * cfg points into its buffers for the whole run. */
typedef struct {
    sb_operator_config cfg;
    const char *pod_ip, *grpc, *metrics, *leader_elect, *ns_env;
    const char *lease_d, *renew_d, *retry_d, *status_d, *hb_d;
    const char *max_pending, *workers, *tls_dir;
    const char *price_cpu, *price_mem, *replan_t, *replan_d;
    const char *test_pipeline, *test_timeout;
    const char *uninstall, *uninstall_test_pod, *uninstall_timeout;
    sb_price_defaults prices;
    const char *gpu_prices[SB_PRICE_MAX_GPU_TYPES + 1];
    size_t ngpu_prices;
    int gpu_flag; /* a --price-gpu-hour was given: the flags replace SB_PRICE_GPU_HOUR's list */
    char gpu_env[1024];
    const char *namespaces[MAX_NAMESPACES];
    size_t nns;
    int ns_flag; /* a --namespace was given: SB_WATCH_NAMESPACES is not read */
    char ns_buf[4096];
    sb_rpc_tlsdir tls;
    sb_rpc_opts rpc;
    char grpc_host[256], metrics_host[256], identity[300];
} ctl_args;

static void ctl_args_from_env(ctl_args *a)
{
    sb_operator_config *cfg = &a->cfg;
    a->pod_ip = env_or("SB_POD_IP", env_or("POD_IP", NULL));
    a->grpc = env_or("SB_GRPC_LISTEN", NULL);
    a->metrics = env_or("SB_METRICS_LISTEN", ":8080");
    a->leader_elect = env_or("SB_LEADER_ELECT", "true");
    a->ns_env = env_or("SB_WATCH_NAMESPACES", NULL);
    a->lease_d = "15s";
    a->renew_d = "10s";
    a->retry_d = "2s";
    a->status_d = env_or("SB_STATUS_INTERVAL", "2s");
    a->hb_d = env_or("SB_HEARTBEAT_TIMEOUT", "5s");
    a->max_pending = env_or("SB_MAX_PENDING_PODS", "2");
    a->workers = env_or("SB_WORKERS", "4");
    a->tls_dir = env_or("SB_TLS_DIR", NULL);
    a->price_cpu = env_or("SB_PRICE_CPU_CORE_HOUR", NULL);
    a->price_mem = env_or("SB_PRICE_MEMORY_GIB_HOUR", NULL);
    a->replan_t = env_or("SB_REPLAN_THRESHOLD", "0.25");
    a->replan_d = env_or("SB_REPLAN_INTERVAL", "60s");
    a->test_timeout = "5m";
    a->uninstall_timeout = "2m";
    a->prices.gpu_type = env_or("SB_GPU_TYPE", NULL);
    if (env_or("SB_PRICE_GPU_HOUR", NULL) != NULL) {
        snprintf(a->gpu_env, sizeof a->gpu_env, "%s", getenv("SB_PRICE_GPU_HOUR"));
        char *save = NULL;
        for (char *t = strtok_r(a->gpu_env, ",", &save);
             t != NULL && a->ngpu_prices <= SB_PRICE_MAX_GPU_TYPES; t = strtok_r(NULL, ",", &save))
            a->gpu_prices[a->ngpu_prices++] = t;
    }
    cfg->tls_secret = env_or("SB_TLS_SECRET", NULL);
    cfg->tls_server_name = env_or("SB_TLS_SERVER_NAME", NULL);
    cfg->lease_name = env_or("SB_LEADER_ELECTION_ID", "streambatch-controller");
    cfg->lease_namespace = env_or("SB_LEADER_ELECTION_NAMESPACE",
                                  env_or("POD_NAMESPACE", env_or("SB_POD_NAMESPACE", NULL)));
    cfg->identity = env_or("SB_IDENTITY", NULL);
    cfg->worker_image = env_or("SB_WORKER_IMAGE", "streambatch/worker:latest");
    cfg->worker_gpu_image = env_or("SB_WORKER_GPU_IMAGE", "streambatch/worker-gpu:latest");
}

enum {
    O_KUBECONFIG = 256,
    O_CONTEXT,
    O_NAMESPACE,
    O_GRPC,
    O_METRICS,
    O_LEADER,
    O_LEASE_ID,
    O_LEASE_NS,
    O_LEASE_D,
    O_RENEW_D,
    O_RETRY_D,
    O_IDENTITY,
    O_IMAGE,
    O_GPU_IMAGE,
    O_PENDING,
    O_CKPT_MAX,
    O_STATUS,
    O_WORKERS,
    O_HB,
    O_TLS_DIR,
    O_TLS_SECRET,
    O_TLS_NAME,
    O_NETPOL,
    O_PRICE_CPU,
    O_PRICE_MEM,
    O_GPU_TYPE,
    O_PRICE_GPU,
    O_REPLAN_T,
    O_REPLAN_D,
    O_VERSION,
    O_HELP,
    O_TEST,
    O_TEST_TIMEOUT,
    O_UNINSTALL,
    O_UNINSTALL_POD,
    O_UNINSTALL_TIMEOUT
};

static const struct option ctl_opts[] = {
    {"kubeconfig", required_argument, 0, O_KUBECONFIG},
    {"context", required_argument, 0, O_CONTEXT},
    {"namespace", required_argument, 0, O_NAMESPACE},
    {"grpc-listen", required_argument, 0, O_GRPC},
    {"metrics-listen", required_argument, 0, O_METRICS},
    {"leader-elect", required_argument, 0, O_LEADER},
    {"leader-election-id", required_argument, 0, O_LEASE_ID},
    {"leader-election-namespace", required_argument, 0, O_LEASE_NS},
    {"lease-duration", required_argument, 0, O_LEASE_D},
    {"renew-deadline", required_argument, 0, O_RENEW_D},
    {"retry-period", required_argument, 0, O_RETRY_D},
    {"identity", required_argument, 0, O_IDENTITY},
    {"worker-image", required_argument, 0, O_IMAGE},
    {"worker-gpu-image", required_argument, 0, O_GPU_IMAGE},
    {"max-pending-pods", required_argument, 0, O_PENDING},
    {"status-interval", required_argument, 0, O_STATUS},
    {"checkpoint-max-bytes", required_argument, 0, O_CKPT_MAX}, /* removed: refused */
    {"workers", required_argument, 0, O_WORKERS},
    {"heartbeat-timeout", required_argument, 0, O_HB},
    {"tls-dir", required_argument, 0, O_TLS_DIR},
    {"tls-secret", required_argument, 0, O_TLS_SECRET},
    {"tls-server-name", required_argument, 0, O_TLS_NAME},
    {"worker-network-policy", required_argument, 0, O_NETPOL},
    {"price-cpu-core-hour", required_argument, 0, O_PRICE_CPU},
    {"price-memory-gib-hour", required_argument, 0, O_PRICE_MEM},
    {"gpu-type", required_argument, 0, O_GPU_TYPE},
    {"price-gpu-hour", required_argument, 0, O_PRICE_GPU},
    {"replan-threshold", required_argument, 0, O_REPLAN_T},
    {"replan-interval", required_argument, 0, O_REPLAN_D},
    {"version", no_argument, 0, O_VERSION},
    {"help", no_argument, 0, O_HELP},
    {"test-pipeline", required_argument, 0, O_TEST},
    {"test-timeout", required_argument, 0, O_TEST_TIMEOUT},
    {"uninstall", required_argument, 0, O_UNINSTALL},
    {"uninstall-test-pod", required_argument, 0, O_UNINSTALL_POD},
    {"uninstall-timeout", required_argument, 0, O_UNINSTALL_TIMEOUT},
    {0, 0, 0, 0}};

/* Where the value of a flag that is one string goes (NULL: a flag that needs more). */
static const char **ctl_flag_slot(ctl_args *a, int c)
{
    sb_operator_config *cfg = &a->cfg;
    switch (c) {
    case O_KUBECONFIG:
        return &cfg->kubeconfig;
    case O_CONTEXT:
        return &cfg->context;
    case O_GRPC:
        return &a->grpc;
    case O_METRICS:
        return &a->metrics;
    case O_LEADER:
        return &a->leader_elect;
    case O_LEASE_ID:
        return &cfg->lease_name;
    case O_LEASE_NS:
        return &cfg->lease_namespace;
    case O_LEASE_D:
        return &a->lease_d;
    case O_RENEW_D:
        return &a->renew_d;
    case O_RETRY_D:
        return &a->retry_d;
    case O_IDENTITY:
        return &cfg->identity;
    case O_IMAGE:
        return &cfg->worker_image;
    case O_GPU_IMAGE:
        return &cfg->worker_gpu_image;
    case O_PENDING:
        return &a->max_pending;
    case O_STATUS:
        return &a->status_d;
    case O_WORKERS:
        return &a->workers;
    case O_HB:
        return &a->hb_d;
    case O_TLS_DIR:
        return &a->tls_dir;
    case O_TLS_SECRET:
        return &cfg->tls_secret;
    case O_TLS_NAME:
        return &cfg->tls_server_name;
    case O_PRICE_CPU:
        return &a->price_cpu;
    case O_PRICE_MEM:
        return &a->price_mem;
    case O_GPU_TYPE:
        return &a->prices.gpu_type;
    case O_REPLAN_T:
        return &a->replan_t;
    case O_REPLAN_D:
        return &a->replan_d;
    case O_TEST:
        return &a->test_pipeline;
    case O_TEST_TIMEOUT:
        return &a->test_timeout;
    case O_UNINSTALL:
        return &a->uninstall;
    case O_UNINSTALL_POD:
        return &a->uninstall_test_pod;
    case O_UNINSTALL_TIMEOUT:
        return &a->uninstall_timeout;
    default:
        return NULL;
    }
}

/* --namespace v (repeatable, comma-separated): the first one replaces SB_WATCH_NAMESPACES. */
static int ctl_add_namespaces(ctl_args *a, const char *v)
{
    if (!a->ns_flag) {
        a->nns = 0;
        a->ns_flag = 1;
    }
    char *copy = strdup(v), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (a->nns >= MAX_NAMESPACES) {
            free(copy);
            return bad("--namespace", v, "at most 32 namespaces");
        }
        a->namespaces[a->nns++] = strdup(t);
    }
    free(copy);
    return CTL_GO;
}

/* One flag getopt_long returned as c. Returns CTL_GO, or the exit status. */
static int ctl_parse_flag(ctl_args *a, int c, char **argv)
{
    const char **slot = ctl_flag_slot(a, c);
    if (slot != NULL) {
        *slot = optarg;
        return CTL_GO;
    }
    switch (c) {
    case O_NAMESPACE:
        return ctl_add_namespaces(a, optarg);
    case O_CKPT_MAX: /* removed: said plainly rather than "unrecognized option" */
        fprintf(stderr, "streambatch-controller: --checkpoint-max-bytes was removed: a "
                        "Pipeline's checkpoint is a log beside its sink and status.checkpoint "
                        "only its summary, small at any size (docs/operator.md, "
                        "\"Checkpoints\")\n");
        return 2;
    case O_PRICE_GPU:
        if (!a->gpu_flag) { /* flags replace the environment's list */
            a->ngpu_prices = 0;
            a->gpu_flag = 1;
        }
        if (a->ngpu_prices > SB_PRICE_MAX_GPU_TYPES)
            return bad("--price-gpu-hour", optarg, "too many GPU types");
        a->gpu_prices[a->ngpu_prices++] = optarg;
        return CTL_GO;
    case O_NETPOL: {
        sb_err nerr = {0};
        if (sb_netpol_configure(optarg, &nerr) != 0)
            return bad("--worker-network-policy", "", nerr.msg);
        return CTL_GO;
    }
    case O_VERSION:
        printf("streambatch-controller %s\n", SB_VERSION);
        return 0;
    case O_HELP:
    case 'h':
        usage(stdout);
        return 0;
    default:
        if (optopt != 0)
            fprintf(stderr, "streambatch-controller: option --%s needs a value (try --help)\n",
                    argv[optind - 1] + 2);
        else
            fprintf(stderr, "streambatch-controller: unknown option %s (try --help)\n",
                    argv[optind - 1]);
        return 2;
    }
}

static int ctl_parse_flags(int argc, char **argv, ctl_args *a)
{
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", ctl_opts, NULL)) != -1) {
        int rc = ctl_parse_flag(a, c, argv);
        if (rc != CTL_GO)
            return rc;
    }
    if (optind < argc) {
        fprintf(stderr, "streambatch-controller: unexpected argument %s (try --help)\n",
                argv[optind]);
        return 2;
    }
    return CTL_GO;
}

/* Leader election, status and heartbeat timing, and the per-pipeline limits. Returns CTL_GO, or
 * 2. */
static int ctl_check_limits(ctl_args *a)
{
    sb_operator_config *cfg = &a->cfg;
    int rc;
    long v;
    if ((rc = parse_bool("--leader-elect", a->leader_elect, &cfg->leader_elect)) != 0 ||
        (rc = parse_ms("--lease-duration", a->lease_d, &cfg->lease_ms)) != 0 ||
        (rc = parse_ms("--renew-deadline", a->renew_d, &cfg->renew_ms)) != 0 ||
        (rc = parse_ms("--retry-period", a->retry_d, &cfg->retry_ms)) != 0 ||
        (rc = parse_ms("--status-interval", a->status_d, &cfg->status_interval_ms)) != 0)
        return rc;
    if (!(cfg->lease_ms > cfg->renew_ms && cfg->renew_ms > cfg->retry_ms)) {
        fprintf(stderr, "streambatch-controller: need --lease-duration > --renew-deadline > "
                        "--retry-period (try --help)\n");
        return 2;
    }
    if ((rc = parse_ms("--heartbeat-timeout", a->hb_d, &v)) != 0)
        return rc;
    cfg->heartbeat_timeout_ms = (uint32_t)v;
    if ((rc = parse_uint("--max-pending-pods", a->max_pending, 1, 1000, &v)) != 0)
        return rc;
    cfg->max_pending = (uint32_t)v;
    if ((rc = parse_uint("--workers", a->workers, 1, 64, &v)) != 0)
        return rc;
    cfg->workers = (int)v;
    return CTL_GO;
}

/* The prices plans are costed with and when a pipeline is re-planned. Returns CTL_GO, or 2. */
static int ctl_check_planning(ctl_args *a)
{
    sb_price_defaults *prices = &a->prices;
    int rc;
    if ((rc = parse_price("--price-cpu-core-hour", a->price_cpu, &prices->cpu_core_hour,
                          &prices->cpu_core_hour_set)) != 0 ||
        (rc = parse_price("--price-memory-gib-hour", a->price_mem, &prices->memory_gib_hour,
                          &prices->memory_gib_hour_set)) != 0)
        return rc;
    for (size_t i = 0; i < a->ngpu_prices; i++) {
        sb_err perr;
        if (sb_price_defaults_add_gpu(prices, a->gpu_prices[i], &perr) != 0)
            return bad("--price-gpu-hour", a->gpu_prices[i], perr.msg);
    }
    if (prices->gpu_type != NULL) {
        sb_plan_prices probe;
        sb_err perr;
        if (sb_price_resolve_with(prices, NULL, &probe, NULL, &perr) != 0)
            return bad("--gpu-type", prices->gpu_type,
                       "no price for this type: give --price-gpu-hour TYPE=PRICE");
    }
    a->cfg.plan.prices = prices;
    char *end = NULL;
    double th = strtod(a->replan_t, &end);
    if (*a->replan_t == '\0' || *end != '\0' || !(th > 0) || th > 100)
        return bad("--replan-threshold", a->replan_t, "must be a number in (0, 100], e.g. 0.25");
    a->cfg.plan.replan_threshold = th;
    long ms;
    if ((rc = parse_ms("--replan-interval", a->replan_d, &ms)) != 0)
        return rc;
    a->cfg.plan.replan_interval_ms = (uint64_t)ms;
    return CTL_GO;
}

/* --tls-dir with --tls-secret: loaded and tried (a handshake with itself) before any pipeline
 * depends on it. Returns CTL_GO, or 2. */
static int ctl_load_tls(ctl_args *a)
{
    sb_operator_config *cfg = &a->cfg;
    if ((a->tls_dir != NULL) != (cfg->tls_secret != NULL)) {
        fprintf(stderr, "streambatch-controller: --tls-dir and --tls-secret go together: the "
                        "controller's certificate directory and the Secret worker pods mount "
                        "(try --help)\n");
        return 2;
    }
    if (a->tls_dir == NULL)
        return CTL_GO;
    sb_err terr;
    if (sb_rpc_tlsdir_load(&a->tls, a->tls_dir, cfg->tls_server_name, &terr) != 0 ||
        sb_rpc_tlsdir_selftest(&a->tls, 5000, &terr) != 0) {
        fprintf(stderr, "streambatch-controller: %s\n", terr.msg);
        return 2;
    }
    sb_rpc_tlsdir_apply(&a->tls, &a->rpc);
    cfg->rpc = &a->rpc;
    cfg->tls_server_name = a->tls.server_name;
    return CTL_GO;
}

/* The operator's key (SB_AUTH_KEY; the chart makes it once and keeps it in a Secret of the
 * release): every Pipeline's credentials derive from it, so all replicas must share it. Without
 * it this process draws one of its own: after a failover its successor then derives other
 * credentials, and the worker pods it adopts refuse it and are replaced. Removed from the
 * environment once read. Returns CTL_GO, or 2. */
static int ctl_load_auth(ctl_args *a)
{
    static uint8_t key[256];
    const char *k = getenv("SB_AUTH_KEY");
    size_t n = k ? strlen(k) : 0;
    if (k != NULL && (n < 32 || n > sizeof key)) {
        fprintf(stderr,
                "streambatch-controller: SB_AUTH_KEY must be 32 to %zu characters, got "
                "%zu\n",
                sizeof key, n);
        return 2;
    }
    if (k != NULL) {
        memcpy(key, k, n);
        unsetenv("SB_AUTH_KEY");
    } else {
        char hex[SB_RPC_TOKEN_HEX + 1];
        sb_err err;
        if (sb_rpc_token_new(hex, &err) != 0) {
            fprintf(stderr, "streambatch-controller: %s\n", err.msg);
            return 2;
        }
        n = SB_RPC_TOKEN_HEX;
        memcpy(key, hex, n);
        sb_log(SB_LOG_WARN,
               "SB_AUTH_KEY is not set: this replica drew a key of its own, so a "
               "successor cannot adopt its worker pods (they are replaced)",
               NULL);
    }
    a->cfg.auth_key = key;
    a->cfg.auth_key_len = n;
    return CTL_GO;
}

/* The Control services' host, the /metrics address, and this replica's identity in the Lease
 * (<hostname>_<random> by default: two replicas on one host still differ). Returns CTL_GO, or
 * 2. */
static int ctl_check_addresses(ctl_args *a)
{
    sb_operator_config *cfg = &a->cfg;
    int rc;
    if (a->grpc != NULL) {
        long port;
        if ((rc = split_hostport("--grpc-listen", a->grpc, a->grpc_host, sizeof a->grpc_host,
                                 &port)) != 0)
            return rc;
        if (port != 0)
            return bad("--grpc-listen", a->grpc, "the port must be 0 (one port per pipeline)");
        if (a->grpc_host[0] == '\0')
            return bad("--grpc-listen", a->grpc, "needs a host workers can reach");
    } else {
        snprintf(a->grpc_host, sizeof a->grpc_host, "%s", a->pod_ip ? a->pod_ip : "127.0.0.1");
    }
    cfg->grpc_host = a->grpc_host;
    if (strcmp(a->metrics, "off") != 0) {
        long port;
        if ((rc = split_hostport("--metrics-listen", a->metrics, a->metrics_host,
                                 sizeof a->metrics_host, &port)) != 0)
            return rc;
        if (a->metrics_host[0] == '\0')
            snprintf(a->metrics_host, sizeof a->metrics_host, "%s",
                     a->pod_ip ? a->pod_ip : "0.0.0.0");
        cfg->metrics_host = a->metrics_host;
        cfg->metrics_port = (uint16_t)port;
    }
    if (cfg->identity == NULL) {
        char host[HOST_NAME_MAX + 1] = "controller";
        gethostname(host, sizeof host);
        host[HOST_NAME_MAX] = '\0';
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        srand((unsigned)(ts.tv_nsec ^ getpid()));
        snprintf(a->identity, sizeof a->identity, "%s_%08x", env_or("SB_POD_NAME", host),
                 (unsigned)rand());
        cfg->identity = a->identity;
    }
    return CTL_GO;
}

/* Runs the operator until SIGTERM/SIGINT (0) or a failure or the lost lease (1). */
static int ctl_serve(ctl_args *a)
{
    sb_operator_config *cfg = &a->cfg;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    cfg->stop = &g_stop;
    sb_log(SB_LOG_INFO, "streambatch-controller starting", "version", SB_VERSION, "identity",
           cfg->identity, "grpc", a->grpc_host, "leaderElect", cfg->leader_elect ? "true" : "false",
           "tls", cfg->rpc != NULL ? "mutual" : "off", NULL);
    sb_err err = {0};
    int rc = sb_operator_run(cfg, &err);
    if (rc < 0) {
        fprintf(stderr, "streambatch-controller: %s\n", err.msg);
        return 1;
    }
    if (rc > 0) {
        fprintf(stderr, "streambatch-controller: %s; exiting so a new process competes again\n",
                err.msg[0] ? err.msg : "lost the leader lease");
        return 1;
    }
    sb_log(SB_LOG_INFO, "streambatch-controller stopped", NULL);
    return 0;
}

int main(int argc, char **argv)
{
    static ctl_args a;
    ctl_args_from_env(&a);
    int rc = ctl_parse_flags(argc, argv, &a);
    if (rc != CTL_GO)
        return rc;
    if (a.test_pipeline != NULL) /* the helm test: no operator, so none of its flags matter */
        return run_test(&a.cfg, a.test_pipeline, a.test_timeout);
    if (!a.ns_flag && a.ns_env != NULL) {
        snprintf(a.ns_buf, sizeof a.ns_buf, "%s", a.ns_env);
        char *save = NULL;
        for (char *t = strtok_r(a.ns_buf, ",", &save); t != NULL && a.nns < MAX_NAMESPACES;
             t = strtok_r(NULL, ",", &save))
            a.namespaces[a.nns++] = t;
    }
    a.cfg.namespaces = a.namespaces;
    a.cfg.nnamespaces = a.nns;
    if (a.uninstall != NULL) /* the pre-delete hook: no operator either */
        return run_uninstall(&a.cfg, a.uninstall, a.uninstall_test_pod, a.uninstall_timeout);
    if ((rc = ctl_check_limits(&a)) == CTL_GO && (rc = ctl_check_planning(&a)) == CTL_GO &&
        (rc = ctl_load_tls(&a)) == CTL_GO && (rc = ctl_load_auth(&a)) == CTL_GO &&
        (rc = ctl_check_addresses(&a)) == CTL_GO)
        rc = ctl_serve(&a);
    return rc;
}
