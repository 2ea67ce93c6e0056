/* streambatch — the command-line tool: `run` (a pipeline on this machine, controller/local/run.h),
 * `plan` (controller/local/plancmd.h), `validate` and `version`. Owns the parsing of each
 * command's flags and the help text that lists them. Exit codes: 0 success, 1 invalid input or
 * failure, 2 usage error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/local/plancmd.h"
#include "controller/local/run.h"
#include "core/log.h"
#include "plan/plan.h"
#include "spec/quantity.h"
#include "spec/validate.h"
#include "version.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: streambatch <command> [args]\n"
            "\n"
            "commands:\n"
            "  run FILE [--cpus N] [--gpus N] [--memory-budget SIZE] [--set PATH=VALUE]...\n"
            "                     run a pipeline on this machine with local worker processes\n"
            "                     [--cpu-slots N] tasks each CPU worker runs at once, 1..64\n"
            "                     (overrides spec.execution.cpuSlotsPerWorker, default 1)\n"
            "                     [--metrics-addr HOST:PORT] serves Prometheus /metrics of the\n"
            "                     whole run (docs/metrics.md)\n"
            "                     [--resume] continues a run that did not finish from its\n"
            "                     checkpoint [--checkpoint FILE] (default under\n"
            "                     ~/.local/state/streambatch/checkpoints)\n"
            "                     [--plan] runs stages that allow cpu and gpu on the shape\n"
            "                     `streambatch plan` chooses from declared costs (else: the\n"
            "                     first listed in placement)\n"
            "                     [--tls-dir DIR] mutual TLS between the controller and the\n"
            "                     workers: DIR holds tls.crt, tls.key, ca.crt (SB_TLS_DIR)\n"
            "                     [--tls-server-name NAME] the name certificates are checked\n"
            "                     for, default streambatch (SB_TLS_SERVER_NAME)\n"
            "                     [--run-dir DIR] the workers' logs and spill files (default:\n"
            "                     a new directory under $TMPDIR, removed after a success)\n"
            "                     [--summary-json FILE] also writes the summary as JSON\n"
            "                     [--progress-interval-ms N] a progress line every N ms when\n"
            "                     stderr is not a terminal, 1..3600000, default 5000\n"
            "                     [--serve HOST:PORT] with sink stream://: serve the output to\n"
            "                     consumers (trainer ranks; docs/training.md), printing one\n"
            "                     JSON line {\"address\", \"tokenFile\"} on stdout, until every\n"
            "                     rank has ended every epoch [--epochs N] (1..100000, default 1)\n"
            "                     [--seed N] shuffles each epoch's source splits by (N, epoch)\n"
            "                     (--cpus: 1..4096, default the online CPUs; --gpus: 0..4096)\n"
            "  plan FILE [--profile] [-o json|text] [--capacity cpu=N,gpu=N,memory=SIZE]\n"
            "                     choose each stage's shape (cpu/gpu) and workers to meet\n"
            "                     spec.execution.target at the lowest cost per row; rates from\n"
            "                     bench.* costs, or measured with --profile on the first\n"
            "                     objects of the source [--profile-bytes SIZE] [--profile-cpus N]\n"
            "  validate FILE... [-q|--quiet]\n"
            "                     check Pipeline manifests (multi-document YAML; - = stdin);\n"
            "                     prints FILE:LINE:COL: FIELD.PATH: message per problem; -q\n"
            "                     leaves out the count of problems at the end\n"
            "  version            print the version (also --version)\n"
            "  help               this text (also -h, --help after any command)\n"
            "\n"
            "exit status: 0 ok, 1 invalid manifests or a failed pipeline, 2 usage error or\n"
            "invalid spec\n");
}

static int cmd_validate(int argc, char **argv)
{
    int quiet = 0, nfiles = 0, problems = 0;
    size_t docs_total = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "streambatch validate: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0)
            continue;
        nfiles++;
        size_t ndocs = 0;
        int rc = sb_validate_file(argv[i], stdout, &ndocs);
        if (rc < 0) {
            fprintf(stderr, "streambatch validate: out of memory on %s\n", argv[i]);
            return 1;
        }
        problems += rc;
        docs_total += ndocs;
    }
    if (nfiles == 0) {
        fprintf(stderr,
                "streambatch validate: no files given\nusage: streambatch validate FILE...\n");
        return 2;
    }
    if (!quiet)
        fprintf(stderr, "%d problem%s in %zu document%s of %d file%s\n", problems,
                problems == 1 ? "" : "s", docs_total, docs_total == 1 ? "" : "s", nfiles,
                nfiles == 1 ? "" : "s");
    return problems == 0 ? 0 : 1;
}

/* A whole decimal number in min..max: no sign, no spaces, nothing after it ("2x" is refused). */
static int parse_int(const char *flag, const char *v, long min, long max, int *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*v < '0' || *v > '9' || *end != '\0' || n < min || n > max) {
        fprintf(stderr, "streambatch run: %s must be a number %ld..%ld, got \"%s\"\n", flag, min,
                max, v);
        return -1;
    }
    *out = (int)n;
    return 0;
}

/* What `streambatch run`'s command line says, before --plan and --cpu-slots become overrides. */
typedef struct {
    sb_run_opts o;
    const char *sets[SB_RUN_MAX_SETS]; /* --set, then plan choices, then --cpu-slots */
    int plan, user_placement, cpu_slots;
} run_args;

#define RUN_GO -1 /* parsing went through: run (any other value is the exit status) */

static int run_flag_takes_value(const char *a)
{
    static const char *const with_value[] = {
        "--cpus",         "--gpus",         "--cpu-slots", "--memory-budget",
        "--set",          "--summary-json", "--run-dir",   "--progress-interval-ms",
        "--metrics-addr", "--checkpoint",   "--tls-dir",   "--tls-server-name",
        "--serve",        "--epochs",       "--seed"};
    for (size_t i = 0; i < sizeof with_value / sizeof *with_value; i++)
        if (strcmp(a, with_value[i]) == 0)
            return 1;
    return 0;
}

/* Flags with a number: CPU workers are at least one (0 used to mean "all CPUs" silently, which
 * the default already is), GPU slots may be none, and a progress interval of 0 ms would mean
 * nothing (the default, 5 s, must be reachable: up to an hour). */
static int run_parse_number(run_args *r, const char *a, const char *v)
{
    if (strcmp(a, "--cpus") == 0)
        return parse_int(a, v, 1, 4096, &r->o.cpus) != 0 ? 2 : RUN_GO;
    if (strcmp(a, "--gpus") == 0)
        return parse_int(a, v, 0, 4096, &r->o.gpus) != 0 ? 2 : RUN_GO;
    if (strcmp(a, "--progress-interval-ms") == 0)
        return parse_int(a, v, 1, 3600000, &r->o.progress_interval_ms) != 0 ? 2 : RUN_GO;
    /* --cpu-slots */
    if (parse_int(a, v, 0, 4096, &r->cpu_slots) != 0)
        return 2;
    if (r->cpu_slots < 1 || r->cpu_slots > 64) {
        fprintf(stderr, "streambatch run: --cpu-slots must be 1..64, got %s\n", v);
        return 2;
    }
    return RUN_GO;
}

/* One flag a (v: its value, when it takes one). Returns RUN_GO, or the exit status. */
static int run_parse_flag(run_args *r, const char *a, const char *v)
{
    sb_run_opts *o = &r->o;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
        usage(stdout);
        return 0;
    } else if (strcmp(a, "--cpus") == 0 || strcmp(a, "--gpus") == 0 ||
               strcmp(a, "--cpu-slots") == 0 || strcmp(a, "--progress-interval-ms") == 0) {
        return run_parse_number(r, a, v);
    } else if (strcmp(a, "--memory-budget") == 0) {
        o->memory_budget = v;
    } else if (strcmp(a, "--summary-json") == 0) {
        o->summary_json = v;
    } else if (strcmp(a, "--run-dir") == 0) {
        o->run_dir = v;
    } else if (strcmp(a, "--metrics-addr") == 0) {
        o->metrics_addr = v;
    } else if (strcmp(a, "--checkpoint") == 0) {
        o->checkpoint = v;
    } else if (strcmp(a, "--tls-dir") == 0) {
        o->tls_dir = v;
    } else if (strcmp(a, "--tls-server-name") == 0) {
        o->tls_server_name = v;
    } else if (strcmp(a, "--resume") == 0) {
        o->resume = 1;
    } else if (strcmp(a, "--serve") == 0) {
        o->serve = v;
    } else if (strcmp(a, "--epochs") == 0) {
        return parse_int(a, v, 1, 100000, &o->epochs) != 0 ? 2 : RUN_GO;
    } else if (strcmp(a, "--seed") == 0) {
        char *end = NULL;
        errno = 0;
        unsigned long long seed = strtoull(v, &end, 10);
        if (errno != 0 || end == v || *end != '\0' || *v == '-') {
            fprintf(stderr, "streambatch run: --seed wants a number 0..2^64-1, got %s\n", v);
            return 2;
        }
        o->seed = (uint64_t)seed;
        o->seed_set = 1;
    } else if (strcmp(a, "--plan") == 0) {
        r->plan = 1;
    } else if (strcmp(a, "--set") == 0) {
        if (o->nsets == 64) {
            fprintf(stderr, "streambatch run: at most 64 --set\n");
            return 2;
        }
        r->sets[o->nsets++] = v;
        r->user_placement |= strstr(v, "placement") != NULL;
    } else {
        fprintf(stderr, "streambatch run: unknown option %s\n", a);
        return 2;
    }
    return RUN_GO;
}

/* The command line into r. Returns RUN_GO, or the exit status (--help, a usage error). */
static int run_parse(int argc, char **argv, run_args *r)
{
    r->o.tls_dir = getenv("SB_TLS_DIR");
    r->o.tls_server_name = getenv("SB_TLS_SERVER_NAME");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = run_flag_takes_value(a);
        if (takes && v == NULL) {
            fprintf(stderr, "streambatch run: %s needs a value\n", a);
            return 2;
        }
        if (a[0] == '-' && a[1] != '\0') {
            int rc = run_parse_flag(r, a, v);
            if (rc != RUN_GO)
                return rc;
            i += takes;
        } else if (r->o.file != NULL) {
            fprintf(stderr, "streambatch run: one pipeline file at a time (got %s and %s)\n",
                    r->o.file, a);
            return 2;
        } else {
            r->o.file = a;
        }
    }
    if (r->o.file == NULL) {
        fprintf(stderr, "streambatch run: no pipeline file given\nusage: streambatch run FILE "
                        "[--cpus N] [--gpus N] [--memory-budget SIZE] [--set PATH=VALUE]\n");
        return 2;
    }
    return RUN_GO;
}

/* Stages that allow several shapes run on their first; --plan puts the plan's choice first
 * (after the user's --set, so a --set placement still wins). Returns RUN_GO, or 2. */
static int run_add_plan_sets(run_args *r)
{
    static char plan_sets[SB_PLAN_MAX_STAGES][SB_PLAN_SET_MAX];
    static int chosen[SB_PLAN_MAX_STAGES];
    size_t nplan = 0;
    if (r->plan) {
        char msg[1024];
        if (sb_plan_placement_sets(r->o.file, plan_sets, SB_PLAN_MAX_STAGES, &nplan, chosen, msg,
                                   sizeof msg) != 0) {
            fprintf(stderr, "streambatch run: %s\n", msg);
            return 2;
        }
        if (r->o.nsets + nplan + 1 > SB_RUN_MAX_SETS) {
            fprintf(stderr, "streambatch run: too many --set with --plan (at most %d in all)\n",
                    SB_RUN_MAX_SETS - 1);
            return 2;
        }
        for (size_t i = 0; i < nplan; i++)
            r->sets[r->o.nsets++] = plan_sets[i];
    }
    if (!r->user_placement)
        sb_local_plan_notice(r->o.file, stderr, r->plan ? chosen : NULL);
    return RUN_GO;
}

static int cmd_run(int argc, char **argv)
{
    static run_args r; /* the overrides it points to must outlive the run */
    memset(&r, 0, sizeof r);
    int rc = run_parse(argc, argv, &r);
    if (rc == RUN_GO)
        rc = run_add_plan_sets(&r);
    if (rc != RUN_GO)
        return rc;
    static char slots_set[64];
    if (r.cpu_slots > 0) { /* last: it wins over the manifest and any --set */
        snprintf(slots_set, sizeof slots_set, "spec.execution.cpuSlotsPerWorker=%d", r.cpu_slots);
        r.sets[r.o.nsets++] = slots_set;
    }
    r.o.sets = r.sets;
    if (getenv("SB_LOG_LEVEL") == NULL) /* the progress display and summary say what matters */
        sb_log_set_level(SB_LOG_WARN);
    return sb_run(&r.o);
}

/* "cpu=64,gpu=4,memory=256Gi": the capacity a plan must fit (absent = unlimited). */
static int parse_capacity(const char *v, sb_local_plan_opts *o)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv != NULL; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int64_t n = 0;
        if (eq == NULL || sb_quantity_value(eq + 1, &n, NULL) != 0 || n < 0) {
            fprintf(stderr,
                    "streambatch plan: --capacity: \"%s\" is not KEY=QUANTITY (cpu=64, gpu=4, "
                    "memory=256Gi)\n",
                    kv);
            return -1;
        }
        *eq = '\0';
        if (strcmp(kv, "cpu") == 0) {
            o->cpus = (double)n;
        } else if (strcmp(kv, "gpu") == 0) {
            o->gpus = (double)n;
        } else if (strcmp(kv, "memory") == 0) {
            o->memory_gib = (double)n / (double)(1ll << 30);
        } else {
            fprintf(stderr, "streambatch plan: --capacity: unknown key \"%s\" (cpu, gpu, memory)\n",
                    kv);
            return -1;
        }
    }
    return 0;
}

static int cmd_plan(int argc, char **argv)
{
    sb_local_plan_opts o = {.cpus = -1, .gpus = -1, .memory_gib = -1};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = strcmp(a, "-o") == 0 || strcmp(a, "--capacity") == 0 ||
                    strcmp(a, "--profile-bytes") == 0 || strcmp(a, "--profile-cpus") == 0;
        if (takes && v == NULL) {
            fprintf(stderr, "streambatch plan: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--profile") == 0) {
            o.profile = 1;
        } else if (strcmp(a, "-o") == 0) {
            if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0) {
                fprintf(stderr, "streambatch plan: -o takes json or text, got \"%s\"\n", v);
                return 2;
            }
            o.json = strcmp(v, "json") == 0;
        } else if (strcmp(a, "--capacity") == 0) {
            if (parse_capacity(v, &o) != 0)
                return 2;
        } else if (strcmp(a, "--profile-bytes") == 0) {
            if (sb_quantity_value(v, &o.profile_bytes, NULL) != 0 || o.profile_bytes <= 0) {
                fprintf(stderr,
                        "streambatch plan: --profile-bytes takes a size such as 256Mi, "
                        "got \"%s\"\n",
                        v);
                return 2;
            }
        } else if (strcmp(a, "--profile-cpus") == 0) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || n < 1 || n > 4096) {
                fprintf(stderr,
                        "streambatch plan: --profile-cpus must be a number 1..4096, got "
                        "\"%s\"\n",
                        v);
                return 2;
            }
            o.profile_cpus = (int)n;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "streambatch plan: unknown option %s\n", a);
            return 2;
        } else if (o.file != NULL) {
            fprintf(stderr, "streambatch plan: one pipeline file at a time (got %s and %s)\n",
                    o.file, a);
            return 2;
        } else {
            o.file = a;
            continue;
        }
        i += takes;
    }
    if (o.file == NULL) {
        fprintf(stderr, "streambatch plan: no pipeline file given\nusage: streambatch plan FILE "
                        "[--profile] [-o json] [--capacity cpu=N,gpu=N,memory=SIZE]\n");
        return 2;
    }
    if (getenv("SB_LOG_LEVEL") == NULL)
        sb_log_set_level(SB_LOG_WARN);
    return sb_local_plan_main(&o);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "validate") == 0)
        return cmd_validate(argc - 2, argv + 2);
    if (strcmp(cmd, "plan") == 0)
        return cmd_plan(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("streambatch %s\n", SB_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "streambatch: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}
