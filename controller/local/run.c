/* run.c — `streambatch run` (run.h): one pipeline on this machine. Owns the run's phases, from
 * the manifest (--set overrides applied) through the embedded controller and the local worker
 * processes to the sink's commit, the progress display, the summary and the run's checkpoint
 * file (runckpt.h); the scheduling itself is the controller's (controller/ctl). */
#include "controller/local/run.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/ctl/ctl.h"
#include "controller/local/workers.h"
#include "controller/local/runckpt.h"
#include "controller/ctl/cmetrics.h"
#include "core/clock.h"
#include "core/log.h"
#include "io/sink.h"
#include "doc/doc.h"
#include "metrics/serve.h"
#include "rpc/tlsdir.h"
#include "spec/allops.h"
#include "spec/pipeline.h"
#include "spec/quantity.h"
#include "spec/validate.h"

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    g_interrupted = sig;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *human_bytes(uint64_t b, char *buf, size_t len)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
    return buf;
}

/* ---- --set overrides ----------------------------------------------------------------------- */

/* Applies "a.b[2].c=value" to a cJSON tree. The value is read as YAML (so 3 is a number,
 * true a boolean, {a: 1} an object). */
static int apply_set(cJSON *root, const char *set, char *msg, size_t msglen)
{
    const char *eq = strchr(set, '=');
    if (eq == NULL || eq == set) {
        snprintf(msg, msglen, "--set %s: expected PATH=VALUE", set);
        return -1;
    }
    char path[512];
    snprintf(path, sizeof path, "%.*s", (int)(eq - set), set);
    const char *value = eq + 1;
    sb_doc *vd = sb_doc_parse_yaml(value, strlen(value), NULL);
    const sb_node *vn = vd ? sb_doc_root(vd, 0) : NULL;
    cJSON *v = NULL;
    if (vn == NULL || sb_doc_error(vd, NULL, NULL) != NULL) {
        v = cJSON_CreateString(value);
    } else {
        char *js = sb_node_to_json(vn);
        v = js ? cJSON_Parse(js) : NULL;
        free(js);
    }
    sb_doc_free(vd);
    if (v == NULL) {
        snprintf(msg, msglen, "--set %s: cannot read the value", set);
        return -1;
    }
    cJSON *cur = root;
    char *save = NULL;
    char *tok = strtok_r(path, ".", &save);
    while (tok != NULL) {
        char *next = strtok_r(NULL, ".", &save);
        char *br = strchr(tok, '[');
        long idx = -1;
        if (br != NULL) {
            char *end;
            idx = strtol(br + 1, &end, 10);
            if (*end != ']' || end[1] != '\0' || idx < 0) {
                snprintf(msg, msglen, "--set %s: bad index in \"%s\"", set, tok);
                cJSON_Delete(v);
                return -1;
            }
            *br = '\0';
        }
        cJSON *child = cJSON_GetObjectItemCaseSensitive(cur, tok);
        if (br != NULL) {
            cJSON *item = cJSON_IsArray(child) ? cJSON_GetArrayItem(child, (int)idx) : NULL;
            if (item == NULL) {
                snprintf(msg, msglen, "--set %s: %s has no item %ld", set, tok, idx);
                cJSON_Delete(v);
                return -1;
            }
            if (next == NULL) {
                cJSON_ReplaceItemInArray(child, (int)idx, v);
                return 0;
            }
            cur = item;
        } else if (next == NULL) {
            if (!cJSON_IsObject(cur)) {
                snprintf(msg, msglen, "--set %s: the parent of \"%s\" is not an object", set, tok);
                cJSON_Delete(v);
                return -1;
            }
            if (child != NULL)
                cJSON_ReplaceItemInObjectCaseSensitive(cur, tok, v);
            else
                cJSON_AddItemToObject(cur, tok, v);
            return 0;
        } else {
            if (child == NULL) {
                child = cJSON_AddObjectToObject(cur, tok);
                if (child == NULL) {
                    snprintf(msg, msglen, "--set %s: \"%s\" is not an object", set, tok);
                    cJSON_Delete(v);
                    return -1;
                }
            }
            cur = child;
        }
        tok = next;
    }
    cJSON_Delete(v);
    snprintf(msg, msglen, "--set %s: empty path", set);
    return -1;
}

/* ---- progress and summary ------------------------------------------------------------------ */

/* ---- --metrics-addr: one endpoint for the whole run (controller/ctl/cmetrics.h) ---- */

typedef struct {
    sb_ctl *ctl;
    int ncpu, ngpu;
    const char *name;
    sb_metrics *reg;
    sb_cmetrics *cm;
    sb_metrics_server *srv;
} run_metrics;

static void run_metrics_collect(void *ud, sb_metrics *reg)
{
    (void)reg;
    run_metrics *m = ud;
    static sb_ctl_snapshot s; /* large; collects run one at a time on the server's thread */
    sb_ctl_snapshot_get(m->ctl, &s);
    sb_cmetrics_pool pools[2];
    size_t np = 0;
    const char *names[2] = {"cpu", "gpu"};
    const int want[2] = {m->ncpu, m->ngpu};
    for (int k = 0; k < 2; k++) {
        if (want[k] <= 0)
            continue;
        uint64_t ready = 0;
        for (size_t i = 0; i < s.npools; i++)
            if (strcmp(s.pools[i].pool, names[k]) == 0)
                ready = s.pools[i].workers;
        uint64_t desired = (uint64_t)want[k];
        pools[np++] =
            (sb_cmetrics_pool){names[k], desired, ready, ready < desired ? desired - ready : 0};
    }
    sb_cmetrics_clear(m->cm);
    sb_cmetrics_add(m->cm, "default", m->name, &s, pools, np);
}

static int run_metrics_start(run_metrics *m, const char *addr, sb_err *err)
{
    m->reg = sb_metrics_new();
    if (m->reg == NULL)
        return sb_err_set(err, "out of memory");
    m->cm = sb_cmetrics_new(m->reg, 1, err);
    if (m->cm == NULL || sb_metrics_add_process(m->reg, err) != 0 ||
        sb_metrics_on_collect(m->reg, run_metrics_collect, m, err) != 0)
        return -1;
    sb_metrics_serve_config mc = {.addr = addr, .metrics = m->reg};
    m->srv = sb_metrics_serve(&mc, err);
    if (m->srv == NULL)
        return -1;
    fprintf(stderr, "serving metrics on %s (http://%s/metrics)\n", addr, addr);
    return 0;
}

static void run_metrics_stop(run_metrics *m)
{
    sb_metrics_serve_stop(m->srv);
    sb_cmetrics_free(m->cm);
    sb_metrics_free(m->reg);
    m->srv = NULL;
    m->cm = NULL;
    m->reg = NULL;
}

static void print_progress(const sb_ctl_snapshot *s, double elapsed, int tty, int *lines)
{
    char a[32], b[32];
    if (tty && *lines > 0)
        fprintf(stderr, "\033[%dA", *lines);
    int n = 0;
    if (tty) {
        fprintf(stderr, "\033[2K%-24s %7s %7s %7s %12s %10s\n", "stage", "done", "running",
                "queued", "rows/s", "rows");
        n++;
        for (size_t i = 0; i < s->nops; i++) {
            const sb_sched_group_stats *o = &s->ops[i];
            fprintf(stderr,
                    "\033[2K%-24.24s %3" PRIu64 "/%-3" PRIu64 " %7" PRIu64 " %7" PRIu64
                    " %12.0f %10" PRIu64 "%s\n",
                    o->name, o->tasks_done, o->tasks_total, o->tasks_running, o->tasks_queued,
                    elapsed > 0 ? (double)o->rows_out / elapsed : 0.0, o->rows_out,
                    o->held ? " [backpressure]" : "");
            n++;
        }
        fprintf(stderr, "\033[2Kin flight %s of %s budget, %zu workers, %.1f s\n",
                human_bytes(s->stats.in_flight_bytes, a, sizeof a),
                human_bytes(s->stats.budget, b, sizeof b), s->stats.workers, elapsed);
        n++;
        *lines = n;
        return;
    }
    fprintf(stderr, "progress %.0fs:", elapsed);
    for (size_t i = 0; i < s->nops; i++)
        fprintf(stderr, " %s %" PRIu64 "/%" PRIu64 " done %" PRIu64 " running%s;", s->ops[i].name,
                s->ops[i].tasks_done, s->ops[i].tasks_total, s->ops[i].tasks_running,
                s->ops[i].held ? " [backpressure]" : "");
    fprintf(stderr, " in flight %s of %s\n", human_bytes(s->stats.in_flight_bytes, a, sizeof a),
            human_bytes(s->stats.budget, b, sizeof b));
}

/* Inputs too large for the room their worker's store could make, read outside the budget (the
 * store's sb_store_load_whole): the run went over its budget by up to their size, which only the
 * workers' logs said before. One line, per stage, only when there were some. */
static void print_outside(FILE *f, const sb_ctl_snapshot *s)
{
    uint64_t n = 0, bytes = 0;
    for (size_t i = 0; i < s->nops; i++) {
        n += s->ops[i].outside;
        bytes += s->ops[i].outside_bytes;
    }
    if (n == 0)
        return;
    char a[32];
    fprintf(f,
            "memory: %" PRIu64 " input%s (%s) too large for the room in a worker's budget, "
            "read outside it:",
            n, n == 1 ? "" : "s", human_bytes(bytes, a, sizeof a));
    const char *sep = " ";
    for (size_t i = 0; i < s->nops; i++) {
        if (s->ops[i].outside == 0)
            continue;
        fprintf(f, "%s%s %" PRIu64 " (%s)", sep, s->ops[i].name, s->ops[i].outside,
                human_bytes(s->ops[i].outside_bytes, a, sizeof a));
        sep = ", ";
    }
    fputc('\n', f);
}

static void print_summary(FILE *f, const sb_ctl_snapshot *s, double wall, double commit_s,
                          double cpu_total, uint64_t peak_rss, uint64_t started)
{
    char a[32], b[32], c[32];
    fprintf(f, "\n%-24s %7s %12s %10s %9s %9s %12s %7s %9s\n", "stage", "tasks", "rows", "bytes",
            "task-s", "cpu-s", "rows/s", "retries", "recovered");
    for (size_t i = 0; i < s->nops; i++) {
        const sb_sched_group_stats *o = &s->ops[i];
        fprintf(f,
                "%-24.24s %7" PRIu64 " %12" PRIu64 " %10s %9.1f %9.1f %12.0f %7" PRIu64 " %9" PRIu64
                "\n",
                o->name, o->tasks_done, o->rows_out, human_bytes(o->bytes_out, a, sizeof a),
                o->task_seconds, o->cpu_seconds, wall > 0 ? (double)o->rows_out / wall : 0.0,
                o->retries, o->recovered);
    }
    fprintf(f,
            "\nwall %.2f s, cpu %.2f s (all processes), sink %" PRIu64 " parts %" PRIu64 " rows %s",
            wall, cpu_total, s->stats.sink_parts, s->stats.sink_rows,
            human_bytes(s->stats.sink_bytes, a, sizeof a));
    if (commit_s >= 0) /* the wall time ends at the last task; the commit follows it */
        fprintf(f, ", committed in %.2f s", commit_s);
    fputc('\n', f);
    fprintf(f,
            "memory: partitions in flight peaked at %s (budget %s); "
            "peak worker RSS %s (the workers summed); %" PRIu64
            " worker processes started, %zu lost; %" PRIu64 " task attempts, %" PRIu64
            " re-run for recovery\n",
            human_bytes(s->stats.peak_partition_bytes, a, sizeof a),
            human_bytes(s->stats.budget, b, sizeof b), human_bytes(peak_rss, c, sizeof c), started,
            s->workers_lost, s->stats.tasks_run, s->stats.tasks_rerun);
    print_outside(f, s);
    uint64_t spec = 0, won = 0, cancelled = 0;
    for (size_t i = 0; i < s->nops; i++) {
        spec += s->ops[i].speculated;
        won += s->ops[i].spec_won;
        cancelled += s->ops[i].cancelled;
    }
    if (spec > 0)
        fprintf(f,
                "stragglers: %" PRIu64 " speculative cop%s started, %" PRIu64
                " finished before the original, %" PRIu64 " losing attempt%s cancelled\n",
                spec, spec == 1 ? "y" : "ies", won, cancelled, cancelled == 1 ? "" : "s");
    if (s->stats.row_groups_read + s->stats.row_groups_skipped > 0)
        fprintf(f,
                "parquet: %" PRIu64 " row groups read, %" PRIu64
                " skipped by the filter's pushdown, %" PRIu64 " of %" PRIu64
                " pages skipped by the page index (%s of column chunks not read); %s fetched\n",
                s->stats.row_groups_read, s->stats.row_groups_skipped, s->stats.pages_skipped,
                s->stats.pages_read + s->stats.pages_skipped,
                human_bytes(s->stats.source_bytes_skipped, a, sizeof a),
                human_bytes(s->stats.source_bytes_read, b, sizeof b));
    if (s->stats.workers_drained > 0)
        fprintf(f,
                "sick workers: %" PRIu64 " drained (persistently far slower than their pool), "
                "%zu retired and replaced\n",
                s->stats.workers_drained, s->workers_retired);
}

/* Every errored partition (the records of its input are not in the output): stage, input and
 * the first error of the task, so a "Succeeded" run never hides skipped rows. */
static void print_errored(FILE *f, const sb_storage_errored *e, size_t n, uint64_t total)
{
    if (total == 0)
        return;
    fprintf(f, "\nerrored partitions (stage, input, first error): %" PRIu64 "%s\n", total,
            total > n ? " (the first listed)" : "");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "  %s  %s  %s\n", e[i].stage, e[i].input, e[i].error);
}

static double self_cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void write_summary_json(const char *path, const sb_ctl_snapshot *s, const char *state,
                               double wall, double commit_s, double cpu_total, uint64_t peak_rss,
                               uint64_t started, const sb_storage_errored *errs, size_t nerr,
                               uint64_t errored_total)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "erroredPartitions", (double)errored_total);
    cJSON *ea = cJSON_AddArrayToObject(j, "errored");
    for (size_t i = 0; ea != NULL && i < nerr; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "stage", errs[i].stage);
        cJSON_AddStringToObject(e, "split", errs[i].input);
        cJSON_AddStringToObject(e, "error", errs[i].error);
        cJSON_AddItemToArray(ea, e);
    }
    cJSON_AddNumberToObject(j, "controllerCpuSeconds", self_cpu_seconds());
    cJSON_AddStringToObject(j, "state", state);
    cJSON_AddNumberToObject(j, "wallSeconds", wall);
    if (commit_s >= 0)
        cJSON_AddNumberToObject(j, "commitSeconds", commit_s);
    cJSON_AddNumberToObject(j, "cpuSeconds", cpu_total);
    cJSON_AddNumberToObject(j, "budget", (double)s->stats.budget);
    cJSON_AddNumberToObject(j, "peakPartitionBytes", (double)s->stats.peak_partition_bytes);
    cJSON_AddNumberToObject(j, "maxPartitionBytes", (double)s->stats.max_partition_bytes);
    cJSON_AddNumberToObject(j, "tasksRun", (double)s->stats.tasks_run);
    cJSON_AddNumberToObject(j, "tasksRerun", (double)s->stats.tasks_rerun);
    cJSON_AddNumberToObject(j, "tasksBatched", (double)s->stats.tasks_batched);
    cJSON_AddNumberToObject(j, "earlyOutputs", (double)s->stats.early_outputs);
    cJSON_AddNumberToObject(j, "earlyReduces", (double)s->stats.early_reduces);
    cJSON_AddNumberToObject(j, "partitionsRecovered", (double)s->stats.partitions_recovered);
    cJSON_AddNumberToObject(j, "partitionsLost", (double)s->stats.partitions_lost);
    cJSON_AddNumberToObject(j, "sinkParts", (double)s->stats.sink_parts);
    cJSON_AddNumberToObject(j, "sinkRows", (double)s->stats.sink_rows);
    cJSON_AddNumberToObject(j, "sourceBytesRead", (double)s->stats.source_bytes_read);
    cJSON_AddNumberToObject(j, "rowGroupsRead", (double)s->stats.row_groups_read);
    cJSON_AddNumberToObject(j, "rowGroupsSkipped", (double)s->stats.row_groups_skipped);
    cJSON_AddNumberToObject(j, "sourceBytesSkipped", (double)s->stats.source_bytes_skipped);
    cJSON_AddNumberToObject(j, "pagesRead", (double)s->stats.pages_read);
    cJSON_AddNumberToObject(j, "pagesSkipped", (double)s->stats.pages_skipped);
    cJSON_AddNumberToObject(j, "peakWorkerRss", (double)peak_rss);
    cJSON_AddNumberToObject(j, "workersStarted", (double)started);
    cJSON_AddNumberToObject(j, "workersLost", (double)s->workers_lost);
    cJSON_AddNumberToObject(j, "workersDrained", (double)s->stats.workers_drained);
    cJSON_AddNumberToObject(j, "workersRetired", (double)s->workers_retired);
    cJSON_AddStringToObject(j, "failure", s->failure);
    cJSON *st = cJSON_AddArrayToObject(j, "stages");
    for (size_t i = 0; i < s->nops; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->ops[i].name);
        cJSON_AddNumberToObject(o, "tasks", (double)s->ops[i].tasks_done);
        cJSON_AddNumberToObject(o, "rowsOut", (double)s->ops[i].rows_out);
        cJSON_AddNumberToObject(o, "bytesOut", (double)s->ops[i].bytes_out);
        cJSON_AddNumberToObject(o, "opSpilledBytes", (double)s->ops[i].spilled_bytes);
        cJSON_AddNumberToObject(o, "inputsOutsideBudget", (double)s->ops[i].outside);
        cJSON_AddNumberToObject(o, "inputsOutsideBudgetBytes", (double)s->ops[i].outside_bytes);
        cJSON_AddNumberToObject(o, "retries", (double)s->ops[i].retries);
        cJSON_AddNumberToObject(o, "recovered", (double)s->ops[i].recovered);
        cJSON_AddNumberToObject(o, "speculated", (double)s->ops[i].speculated);
        cJSON_AddNumberToObject(o, "speculativeWins", (double)s->ops[i].spec_won);
        cJSON_AddNumberToObject(o, "cancelled", (double)s->ops[i].cancelled);
        cJSON_AddNumberToObject(o, "taskSeconds", s->ops[i].task_seconds);
        cJSON_AddNumberToObject(o, "cpuSeconds", s->ops[i].cpu_seconds);
        cJSON_AddItemToArray(st, o);
    }
    char *text = cJSON_Print(j);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
    free(text);
    cJSON_Delete(j);
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

static void exit_cb(void *ud, const char *worker_id, const char *why)
{
    sb_ctl_worker_exited(ud, worker_id, why);
}

/* ---- the run ------------------------------------------------------------------------------- */

typedef struct {
    char *buf, *json;
    sb_doc *doc, *jdoc;
    sb_pipeline p;
    int have_p;
} run_state;

static void run_state_free(run_state *r)
{
    if (r->have_p)
        sb_pipeline_free(&r->p);
    sb_doc_free(r->doc);
    sb_doc_free(r->jdoc);
    free(r->json);
    free(r->buf);
}

/* Reads, validates and applies overrides. Returns 0, or the exit code (2). */
static int load(const sb_run_opts *o, run_state *r)
{
    size_t len;
    char msg[512];
    if (sb_spec_read_file_limited(o->file, SB_MANIFEST_MAX_BYTES, &r->buf, &len, msg, sizeof msg) !=
        0) {
        fprintf(stderr, "%s: %s\n", o->file, msg);
        return 2;
    }
    size_t ndocs = 0;
    int problems = sb_validate_buffer(o->file, r->buf, len, stderr, &ndocs);
    if (problems != 0) {
        fprintf(stderr, "streambatch run: %s is not a valid Pipeline (see above)\n", o->file);
        return 2;
    }
    if (ndocs != 1) {
        fprintf(stderr, "streambatch run: %s has %zu Pipelines; run takes exactly one\n", o->file,
                ndocs);
        return 2;
    }
    r->doc = sb_doc_parse_yaml(r->buf, len, NULL);
    const sb_node *root = NULL;
    for (size_t i = 0; r->doc && i < sb_doc_count(r->doc) && root == NULL; i++) {
        const sb_node *n = sb_doc_root(r->doc, i);
        if (n != NULL && n->kind == SB_NODE_MAP)
            root = n;
    }
    char *js = root ? sb_node_to_json(root) : NULL;
    cJSON *cj = js ? cJSON_Parse(js) : NULL;
    /* integers past 2^53 (a filter value) would come out of cJSON rounded */
    if (cj != NULL && sb_doc_cjson_keep_ints(cj, js) != 0) {
        cJSON_Delete(cj);
        cj = NULL;
    }
    free(js);
    if (cj == NULL) {
        fprintf(stderr, "streambatch run: out of memory\n");
        return 2;
    }
    char setbuf[128];
    const char *sets[SB_RUN_MAX_SETS + 1];
    size_t nsets = 0;
    if (o->nsets > SB_RUN_MAX_SETS) {
        fprintf(stderr, "streambatch run: %zu overrides, at most %d\n", o->nsets, SB_RUN_MAX_SETS);
        cJSON_Delete(cj);
        return 2;
    }
    if (o->memory_budget != NULL) {
        snprintf(setbuf, sizeof setbuf, "spec.execution.memoryBudget=\"%s\"", o->memory_budget);
        sets[nsets++] = setbuf;
    }
    for (size_t i = 0; i < o->nsets; i++)
        sets[nsets++] = o->sets[i];
    for (size_t i = 0; i < nsets; i++)
        if (apply_set(cj, sets[i], msg, sizeof msg) != 0) {
            fprintf(stderr, "streambatch run: %s\n", msg);
            cJSON_Delete(cj);
            return 2;
        }
    r->json = cJSON_PrintUnformatted(cj);
    cJSON_Delete(cj);
    r->jdoc = r->json ? sb_doc_parse_json(r->json, strlen(r->json), NULL) : NULL;
    sb_diags d = {0};
    if (r->jdoc == NULL || sb_pipeline_decode(sb_doc_root(r->jdoc, 0), &r->p, &d) != 0) {
        fprintf(stderr, "streambatch run: out of memory\n");
        sb_diags_free(&d);
        return 2;
    }
    r->have_p = 1;
    for (size_t i = 0; i < d.n; i++)
        fprintf(stderr, "%s (after --set): %s: %s\n", o->file, d.items[i].path, d.items[i].msg);
    int bad = d.n > 0;
    sb_diags_free(&d);
    return bad ? 2 : 0;
}

/* `name` next to this binary (just `name` when /proc/self/exe cannot be read). */
static void default_worker_bin(char *buf, size_t len, const char *name)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(buf, len, "%s", name);
        return;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    snprintf(buf, len, "%s/%s", self, name);
}

/* The sink's final storage jobs run on a worker (lib/storage/jobs.h), like planning: commit waits
 * as long as the stall timeout allows, abort a few seconds (best effort: a failed run never wrote
 * _SUCCESS, so an abort that cannot run leaves nothing that looks done). */
static int commit_sink(sb_ctl *ctl, uint64_t stall_ms, char *msg, size_t msglen)
{
    size_t n;
    sb_storage_output *parts = sb_ctl_sink_parts(ctl, &n);
    if (parts == NULL) {
        snprintf(msg, msglen, "out of memory");
        return -1;
    }
    int rc = sb_ctl_storage_run(ctl, SB_STORAGE_COMMIT, parts, n,
                                (int)(stall_ms > 0 && stall_ms < 3600000 ? stall_ms : 3600000),
                                (const volatile int *)&g_interrupted, msg, msglen);
    sb_ctl_parts_free(parts, n);
    return rc == 1 ? 0 : -1;
}

static void abort_sink(sb_ctl *ctl)
{
    char msg[SB_ERR_MAX + 256];
    if (sb_ctl_storage_run(ctl, SB_STORAGE_ABORT, NULL, 0, 5000, NULL, msg, sizeof msg) != 1)
        fprintf(stderr, "cleaning the sink up: %s\n", msg);
}

#define CKPT_COST_FACTOR 20 /* checkpoint writes at most every 20x the time one takes */

/* The checkpoint of a run: the small file (the log's summary) and the log (ckptlog.h). */
typedef struct {
    char path[PATH_MAX];
    char logdir[PATH_MAX];  /* where this run writes its log */
    char prevdir[PATH_MAX]; /* where the log it resumed from was ("": none) */
    char spec_hash[17];
    uint32_t epoch;
    sb_ckptlog log;
    int log_open;
    int saved_any;
    sb_runckpt_claim claim; /* the run record beside it (runckpt.h), held for the run */
} run_ckpt;

/* Appends what was committed since the last write to the log, then rewrites the summary. */
static void ckpt_save(sb_ctl *ctl, run_ckpt *ck)
{
    char *ranges = NULL;
    sb_storage_output *parts = NULL;
    size_t nparts = 0;
    sb_err err = {0};
    if (!ck->log_open || sb_ctl_checkpoint(ctl, &ranges, &parts, &nparts, &err) != 0)
        return;
    char plan_hash[17];
    sb_ctl_plan_hash(ctl, plan_hash);
    int wrote = 0;
    int rc = sb_ckptlog_update(&ck->log, plan_hash, sb_ctl_nsplits(ctl), ranges, parts, nparts,
                               &wrote, &err);
    free(ranges);
    sb_ctl_parts_free(parts, nparts);
    if (rc != 0) {
        fprintf(stderr, "streambatch run: %s\n", err.msg);
        return;
    }
    if (!wrote)
        return;
    cJSON *j = sb_ckptlog_summary_json(&ck->log.sum);
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (text == NULL || sb_runckpt_save(ck->path, text, &err) != 0)
        fprintf(stderr, "streambatch run: %s\n", text ? err.msg : "checkpoint: out of memory");
    else
        ck->saved_any = 1;
    free(text);
}

/* Removes this run's log and the one it resumed from, when that was elsewhere. */
static int ckpt_remove_logs(const run_ckpt *ck, sb_err *err)
{
    if (sb_ckptlog_remove(ck->logdir, err) != 0)
        return -1;
    if (ck->prevdir[0] != '\0' && strcmp(ck->prevdir, ck->logdir) != 0)
        return sb_ckptlog_remove(ck->prevdir, err);
    return 0;
}

/* Claims the checkpoint for this run before it is read or removed: a live run of this
 * pipeline keeps both (-1, said on stderr), and what a killed one left (its run dir, its
 * workers' spill files) is removed. 0 when this run may go on. */
static int ckpt_claim(run_ckpt *ck)
{
    sb_err err = {0};
    sb_runckpt_owner owner;
    int had_owner = 0;
    int cl = sb_runckpt_claim_take(ck->path, &ck->claim, &owner, &had_owner, &err);
    if (cl == 1) {
        fprintf(stderr,
                "streambatch run: another `streambatch run` (pid %ld, run dir %s) is running this "
                "pipeline into this sink (checkpoint %s); its files are left alone: wait for it "
                "or stop it\n",
                owner.pid, owner.run_dir[0] ? owner.run_dir : "not yet made", ck->path);
        return -1;
    }
    if (cl < 0)
        fprintf(stderr, "streambatch run: %s (what a killed earlier run left is not removed)\n",
                err.msg);
    if (had_owner) {
        long removed = 0;
        if (sb_runckpt_clean_dead(&owner, &removed, &err) != 0)
            fprintf(stderr, "streambatch run: cleaning after the dead run (pid %ld): %s\n",
                    owner.pid, err.msg);
        fprintf(stderr,
                "an earlier run (pid %ld) died without cleaning up: removed %ld of its files and "
                "directories (%s%s)\n",
                owner.pid, removed, owner.run_dir,
                owner.own_dir ? "" : ": the workers' spill dirs");
    }
    return 0;
}

/* Prepares the checkpoint: its path, the spec's hash, and with --resume the checkpoint to
 * continue (*have set). Returns 0, or the exit code (2). */
static int ckpt_open(const sb_run_opts *o, const run_state *r, run_ckpt *ck, sb_ckpt *prev,
                     int *have)
{
    sb_err err = {0};
    *have = 0;
    memset(prev, 0, sizeof *prev);
    if (o->checkpoint != NULL)
        snprintf(ck->path, sizeof ck->path, "%s", o->checkpoint);
    else if (sb_runckpt_default_path(&r->p, ck->path, sizeof ck->path, &err) != 0) {
        fprintf(stderr, "streambatch run: %s\n", err.msg);
        return 2;
    }
    if (ckpt_claim(ck) != 0)
        return 2;
    cJSON *j = cJSON_Parse(r->json);
    sb_ckpt_spec_hash(cJSON_GetObjectItemCaseSensitive(j, "spec"), ck->spec_hash);
    cJSON_Delete(j);
    int exists = 0;
    sb_ckptlog_summary sum;
    if (sb_runckpt_log_dir(&r->p, ck->path, ck->logdir, sizeof ck->logdir, &err) != 0) {
        fprintf(stderr, "streambatch run: %s\n", err.msg);
        return 2;
    }
    int lr = sb_runckpt_load(ck->path, prev, &sum, &exists, &err);
    if (sum.generation > 0)
        snprintf(ck->prevdir, sizeof ck->prevdir, "%s", sum.location);
    if (lr == -2) {
        /* the log is gone, damaged or another run's: its parts cannot be trusted, and the sink's
         * writes are idempotent, so starting over loses nothing */
        fprintf(stderr,
                "streambatch run: the checkpoint %s is refused: %s; starting over from the "
                "beginning\n",
                ck->path, err.msg);
        exists = 1; /* replaced below */
    } else if (lr != 0) {
        if (o->resume) {
            fprintf(stderr, "streambatch run: --resume: %s\n", err.msg);
            return 2;
        }
        exists = 1; /* an unreadable one is replaced below */
    } else if (exists && o->resume && prev->spec_hash[0] != '\0' &&
               strcmp(prev->spec_hash, ck->spec_hash) != 0) {
        fprintf(stderr,
                "streambatch run: --resume: the pipeline changed since %s was written (its "
                "source, stages or sink differ: spec hash %s, now %s); run without --resume to "
                "start over\n",
                ck->path, prev->spec_hash, ck->spec_hash);
        sb_ckpt_free(prev);
        return 2;
    }
    if (o->resume && exists && lr == 0) {
        *have = 1;
        ck->epoch = prev->epoch + 1;
        fprintf(stderr, "resuming from %s: %zu splits committed by earlier runs (epoch %u)\n",
                ck->path, prev->ncommitted, ck->epoch);
    } else if (o->resume && lr == 0) {
        fprintf(stderr, "no checkpoint at %s: starting from the beginning\n", ck->path);
    } else if (exists && lr != -2) {
        /* removed now: a run killed before its first checkpoint must not leave the old one
         * for a later --resume, whose parts this run may rewrite */
        fprintf(stderr,
                "%s held the checkpoint of an earlier run that did not finish; starting over "
                "(--resume would have continued it)\n",
                ck->path);
    }
    if (exists && !*have) {
        sb_ckpt_free(prev);
        if (sb_runckpt_remove(ck->path, &err) != 0 || ckpt_remove_logs(ck, &err) != 0) {
            fprintf(stderr, "streambatch run: %s\n", err.msg);
            return 2;
        }
    }
    if (sb_ckptlog_init(&ck->log, ck->logdir, *have ? sum.id : NULL, ck->epoch, ck->spec_hash,
                        &err) != 0) {
        fprintf(stderr, "streambatch run: %s\n", err.msg);
        return 2;
    }
    /* the log read is whole and this run's (the dead run wrote synchronously: nothing of it
     * can still land): append to it rather than rewrite it; when it cannot be continued (it
     * is elsewhere), the first write compacts */
    if (*have && sb_ckptlog_continue(&ck->log, &sum, prev, &err) != 0)
        err.msg[0] = '\0';
    ck->log_open = 1;
    return 0;
}

/* Checks the sink parts a resume carries over (sb_runckpt_verify_parts: file sinks write them
 * without a sync, so after a machine crash one may be missing or cut short) and takes the
 * splits of bad ones out of prev, to be made again. 0, or -1 (the checkpoint cannot be
 * read against the sink: named on stderr). */
static int resume_verify(const sb_sink_spec *sink, sb_ckpt *prev)
{
    size_t bad = 0, splits = 0;
    char first[1024];
    sb_err err = {0};
    if (sb_runckpt_verify_parts(prev, sink, &bad, &splits, first, sizeof first, &err) != 0) {
        fprintf(stderr, "streambatch run: --resume: %s\n", err.msg);
        return -1;
    }
    if (bad > 0)
        fprintf(stderr,
                "%zu sink part%s carried over by the checkpoint %s missing or differ%s from what "
                "it recorded (%s): %zu committed split%s run again, %zu remain\n",
                bad, bad == 1 ? "" : "s", bad == 1 ? "is" : "are", bad == 1 ? "s" : "", first,
                splits, splits == 1 ? "" : "s", prev->ncommitted);
    return 0;
}

/* Scheduler mechanisms SB_SCHED_OFF switches off (sched_off_parse). */
typedef struct {
    int tail, spec, drain, eft, early, early_reduce;
} run_sched_off;

/* SB_SCHED_OFF: the scheduler mechanisms to switch off, comma-separated words of
 * "tail-sizing", "speculation", "drain", "earliest-finish", "early-outputs", "early-reduces"
 * (ablations: scripts/bench-stragglers.sh, bench-engine.sh). 0, or -1 with the bad word in
 * bad. */
static int sched_off_parse(const char *v, run_sched_off *off, char *bad, size_t len)
{
    const struct {
        const char *word;
        int *flag;
    } words[] = {{"tail-sizing", &off->tail},    {"speculation", &off->spec},
                 {"drain", &off->drain},         {"earliest-finish", &off->eft},
                 {"early-outputs", &off->early}, {"early-reduces", &off->early_reduce}};
    memset(off, 0, sizeof *off);
    while (v != NULL && *v) {
        size_t n = strcspn(v, ","), k = 0;
        while (k < sizeof words / sizeof *words &&
               (strlen(words[k].word) != n || strncmp(v, words[k].word, n) != 0))
            k++;
        if (k < sizeof words / sizeof *words) {
            *words[k].flag = 1;
        } else if (n > 0) {
            snprintf(bad, len, "%.*s", (int)n, v);
            return -1;
        }
        v += n + (v[n] == ',');
    }
    return 0;
}

/* ---- sb_run's phases --------------------------------------------------------------------- */

/* Everything one run holds, from the manifest to the workers. The phases below fill it in
 * order and run_teardown releases it; it lives for the whole of sb_run because the controller
 * and the local backend keep pointers into it (the pipeline, the run dir, the worker binaries,
 * the controller's address). */
typedef struct {
    const sb_run_opts *o;
    run_sched_off off;
    sb_rpc_tlsdir *tls; /* --tls-dir, loaded (use_tls) */
    sb_rpc_opts rpc;
    sb_rpc_creds creds; /* this run's: a worker token and a controller token (rpc/auth.h) */
    char worker_token[SB_RPC_TOKEN_HEX + 1], controller_sha256[SB_RPC_DIGEST_HEX + 1];
    int use_tls;
    run_state r;
    int ncpu, ngpu;                /* workers per pool: the flags, capped by the stages' needs */
    uint64_t budget, store_budget; /* the run's memory budget, and each worker's share */
    run_ckpt ck;
    sb_ckpt prev; /* the checkpoint --resume continues (have_prev) */
    int have_prev, prev_owned;
    sb_sched_resume resume;
    char run_dir[PATH_MAX];
    int own_dir; /* run_dir was made here (no --run-dir): removed after a success */
    char worker_bin[PATH_MAX], worker_gpu_bin[PATH_MAX];
    const char *chost; /* the Control service's host */
    char pid_s[300], listen[64], caddr[64];
    sb_ctl_config cc;
    sb_ctl *ctl;
    run_metrics rm;
    int rm_live; /* run_metrics_stop is owed (as in every path after --metrics-addr started) */
    sb_local_config lc;
    sb_local *loc;
    sb_backend be;  /* loc's */
    int tty, lines; /* stderr is a terminal: a live display of `lines` lines */
    /* what the wait loop saw */
    double t0;
    int planned, stalled_out;
    uint64_t stall_ms, peak_rss;
    sb_sched_state st;
    char stall[1024];
} run_ctx;

/* Checks what must hold before anything is read or started: SB_SCHED_OFF and --tls-dir (the
 * controller and every worker use it). Returns 0, or the exit code (2). */
static int run_check_env(run_ctx *c)
{
    static sb_rpc_tlsdir tls;
    char bad[64];
    if (sched_off_parse(getenv("SB_SCHED_OFF"), &c->off, bad, sizeof bad) != 0) {
        fprintf(stderr,
                "streambatch run: SB_SCHED_OFF: unknown \"%s\" (comma-separated: tail-sizing, "
                "speculation, drain, earliest-finish, early-outputs, early-reduces)\n",
                bad);
        return 2;
    }
    /* Per-run credentials: only this run's workers (given the worker token in their
     * environment) can call its controller or each other. */
    char ctl_token[SB_RPC_TOKEN_HEX + 1];
    sb_err aerr;
    if (sb_rpc_token_new(c->worker_token, &aerr) != 0 || sb_rpc_token_new(ctl_token, &aerr) != 0 ||
        sb_rpc_creds_controller(&c->creds, c->worker_token, ctl_token, &aerr) != 0) {
        fprintf(stderr, "streambatch run: %s\n", aerr.msg);
        return 2;
    }
    sb_rpc_token_digest_hex(ctl_token, c->controller_sha256);
    c->rpc.auth = &c->creds;
    c->use_tls = c->o->tls_dir != NULL && *c->o->tls_dir;
    if (c->use_tls) {
        sb_err terr;
        if (sb_rpc_tlsdir_load(&tls, c->o->tls_dir, c->o->tls_server_name, &terr) != 0) {
            fprintf(stderr, "streambatch run: %s\n", terr.msg);
            return 2;
        }
        sb_rpc_tlsdir_apply(&tls, &c->rpc);
        c->tls = &tls;
    }
    return 0;
}

/* Loads the manifest and sizes the pools: no more workers of a pool than its stages can use
 * (the sum of their workers.max), CPU workers default to the online CPUs, and a GPU stage
 * needs --gpus. Returns 0, or the exit code (2). */
static int run_load_and_size(run_ctx *c)
{
    const sb_run_opts *o = c->o;
    int code = load(o, &c->r);
    if (code != 0)
        return code;
    const sb_pipeline_spec *spec = &c->r.p.spec;
    int cpus = o->cpus > 0 ? o->cpus : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    int64_t cpu_max = 0, gpu_max = 0;
    for (size_t i = 0; i < spec->nstages; i++) {
        if (spec->stages[i].resources.gpu > 0)
            gpu_max += spec->stages[i].workers.max;
        else
            cpu_max += spec->stages[i].workers.max;
    }
    if (gpu_max > 0 && o->gpus <= 0) {
        for (size_t i = 0; i < spec->nstages; i++)
            if (spec->stages[i].resources.gpu > 0) {
                fprintf(stderr,
                        "streambatch run: stage %s needs a GPU (resources.gpu > 0); run with "
                        "--gpus N to give it N accelerator slots\n",
                        spec->stages[i].name);
                break;
            }
        return 2;
    }
    c->ncpu = (int)(cpu_max < cpus ? cpu_max : cpus);
    c->ngpu = (int)(gpu_max < o->gpus ? gpu_max : o->gpus);
    /* each worker's store gets an equal share of the budget, but room for two partitions */
    c->budget = (uint64_t)spec->execution.memory_budget;
    uint64_t part = (uint64_t)spec->source.partition_size;
    int nworkers = c->ncpu + c->ngpu;
    c->store_budget = c->budget / (uint64_t)(nworkers > 0 ? nworkers : 1);
    if (c->store_budget < 2 * part)
        c->store_budget = 2 * part;
    return 0;
}

/* Opens the checkpoint (and with --resume the one to continue, its sink parts checked) and
 * fills in what the scheduler resumes from. Returns 0, or the exit code (2). */
static int run_open_checkpoint(run_ctx *c)
{
    int code = ckpt_open(c->o, &c->r, &c->ck, &c->prev, &c->have_prev);
    if (code != 0)
        return code;
    c->prev_owned = 1;
    /* sink.mode append: the run's part tag (lib/io/sink.h) is its checkpoint log's id, drawn
     * when the run starts from nothing and kept by --resume, so a resumed run names (and
     * verifies) the parts it carries over as it wrote them; without a log, a tag of its own */
    sb_sink_spec *sink = &c->r.p.spec.sink;
    if (sink->mode == SB_SINK_APPEND) {
        sb_err err;
        if (c->ck.log_open && strlen(c->ck.log.sum.id) >= 12)
            snprintf(sink->part_tag, sizeof sink->part_tag, "%.12s", c->ck.log.sum.id);
        else if (sb_io_sink_tag_new(sink->part_tag, &err) != 0) {
            fprintf(stderr, "streambatch run: %s\n", err.msg);
            return 1;
        }
    }
    if (c->have_prev && resume_verify(&c->r.p.spec.sink, &c->prev) != 0)
        return 2;
    c->resume =
        (sb_sched_resume){.epoch = c->ck.epoch,
                          .committed_splits = c->have_prev ? c->prev.committed_splits : NULL,
                          .parts = c->have_prev ? c->prev.parts : NULL,
                          .nparts = c->have_prev ? c->prev.nparts : 0};
    return 0;
}

/* Makes the run directory (unless --run-dir names one), records it in the run record (a later
 * run removes it if this process dies) and picks the worker binaries. Returns 0, or the exit
 * code (1). */
static int run_make_dir(run_ctx *c)
{
    const sb_run_opts *o = c->o;
    sb_err err;
    c->own_dir = o->run_dir == NULL;
    if (c->own_dir) {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(c->run_dir, sizeof c->run_dir, "%s/streambatch-run-XXXXXX", tmp);
        if (mkdtemp(c->run_dir) == NULL) {
            fprintf(stderr, "streambatch run: cannot create a run directory in %s: %s\n", tmp,
                    strerror(errno));
            return 1;
        }
    } else {
        snprintf(c->run_dir, sizeof c->run_dir, "%s", o->run_dir);
    }
    if (c->ck.claim.fd >= 0 &&
        sb_runckpt_claim_record(&c->ck.claim, c->run_dir, c->own_dir, &err) != 0)
        fprintf(stderr, "streambatch run: %s\n", err.msg);
    /* the gpu pool runs the CUDA build when it is next to this binary (and no --worker-bin
     * names one worker for every pool) */
    c->worker_gpu_bin[0] = '\0';
    /* Test hook (tests/integration/netns.h): SB_RUN_WORKER_BIN is the program every pool runs,
     * e.g. a wrapper that starts the worker in a network namespace of its own. */
    const char *env_worker = getenv("SB_RUN_WORKER_BIN");
    if (o->worker_bin == NULL && env_worker != NULL && *env_worker) {
        snprintf(c->worker_bin, sizeof c->worker_bin, "%s", env_worker);
    } else if (o->worker_bin != NULL) {
        snprintf(c->worker_bin, sizeof c->worker_bin, "%s", o->worker_bin);
    } else {
        default_worker_bin(c->worker_bin, sizeof c->worker_bin, "streambatch-worker");
        default_worker_bin(c->worker_gpu_bin, sizeof c->worker_gpu_bin, "streambatch-worker-gpu");
        if (access(c->worker_gpu_bin, X_OK) != 0)
            c->worker_gpu_bin[0] = '\0';
    }
    return 0;
}

/* ---- --serve: a stream:// sink served to consumers (docs/training.md) ---------------------- */

/* The stream's epochs and seed: the flags, else sink.args (validate checked those). */
static uint32_t serve_epochs(const run_ctx *c)
{
    uint32_t spec = sb_sink_stream_epochs(&c->r.p.spec.sink);
    return c->o->epochs > 0 ? (uint32_t)c->o->epochs : spec > 0 ? spec : 1;
}

static int serve_seed(const run_ctx *c, uint64_t *seed)
{
    uint64_t s = 0;
    int set = c->o->seed_set ? (s = c->o->seed, 1) : sb_sink_stream_seed(&c->r.p.spec.sink, &s);
    if (seed != NULL)
        *seed = s;
    return set;
}

/* --serve goes with a stream:// sink, and the sink with it; a stream keeps no checkpoint; the
 * stream's epochs run its plan (sb_spec_stream_plan_check). Returns 0, or the exit code (2). */
static int serve_check(run_ctx *c)
{
    const sb_run_opts *o = c->o;
    const char *uri = c->r.p.spec.sink.uri;
    int stream = uri != NULL && strcmp(uri, "stream://") == 0;
    const char *bad = NULL;
    if (stream && o->serve == NULL)
        bad = "spec.sink.uri is stream://: serve it with --serve HOST:PORT";
    else if (!stream && o->serve != NULL)
        bad = "--serve serves a stream:// sink; this pipeline's sink is not one";
    else if (o->serve != NULL && o->resume)
        bad = "--resume: a stream:// sink keeps no checkpoint to resume from";
    else if (o->serve == NULL && (o->epochs > 0 || o->seed_set))
        bad = "--epochs and --seed go with --serve";
    static char why[512];
    if (bad == NULL && stream)
        bad = sb_spec_stream_plan_check(&c->r.p.spec, serve_epochs(c), serve_seed(c, NULL), NULL,
                                        why, sizeof why);
    if (bad == NULL)
        return 0;
    fprintf(stderr, "streambatch run: %s\n", bad);
    return 2;
}

/* The Control service listens at --serve (consumers and workers both call it there). */
static int serve_listen(run_ctx *c)
{
    const char *colon = strrchr(c->o->serve, ':');
    size_t hl = colon ? (size_t)(colon - c->o->serve) : 0;
    static char host[46];
    if (colon == NULL || hl == 0 || hl >= sizeof host || colon[1] == '\0' ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1) || strlen(colon + 1) > 5) {
        fprintf(stderr, "streambatch run: --serve wants HOST:PORT (PORT 0: any free one), got %s\n",
                c->o->serve);
        return 2;
    }
    memcpy(host, c->o->serve, hl);
    host[hl] = '\0';
    c->chost = host;
    snprintf(c->listen, sizeof c->listen, "%s", c->o->serve);
    return 0;
}

/* Writes the token consumers present (the pipeline's worker token: a consumer reads partitions
 * from the workers' Data services as a worker does) to a file only this user can read, and
 * prints the one line a launcher reads: {"address": ..., "tokenFile": ...}. Returns 0, or 1. */
static int serve_announce(run_ctx *c)
{
    static char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/stream.token", c->run_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 ||
        write(fd, c->worker_token, strlen(c->worker_token)) != (ssize_t)strlen(c->worker_token)) {
        fprintf(stderr, "streambatch run: writing %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    close(fd);
    printf("{\"address\": \"%s\", \"tokenFile\": \"%s\"}\n", c->caddr, path);
    fflush(stdout);
    return 0;
}

/* Starts the embedded controller (the Control service), then --metrics-addr, and with TLS
 * checks that the certificates work against it before any worker depends on them. Returns 0,
 * or the exit code (1 the controller did not start, 2 a bad flag). */
static int run_start_controller(run_ctx *c)
{
    const sb_run_opts *o = c->o;
    sb_err err;
    snprintf(c->pid_s, sizeof c->pid_s, "default/%s", c->r.p.metadata.name);
    /* Test hook: SB_RUN_CONTROLLER_HOST is the address the Control service listens on and the
     * workers are given (default 127.0.0.1), for workers on other (network namespace) hosts. */
    c->chost = getenv("SB_RUN_CONTROLLER_HOST");
    if (c->chost == NULL || *c->chost == '\0' || strlen(c->chost) > 45)
        c->chost = "127.0.0.1";
    snprintf(c->listen, sizeof c->listen, "%s:0", c->chost);
    if (o->serve != NULL && serve_listen(c) != 0)
        return 2;
    uint64_t seed = 0;
    int shuffle = serve_seed(c, &seed);
    c->cc = (sb_ctl_config){
        .sink_tag = c->r.p.spec.sink.part_tag,
        .pipeline = &c->r.p,
        .pipeline_id = c->pid_s,
        .pipeline_json = c->r.json,
        .storage_on_workers = 1, /* the source is planned and the sink prepared on a worker */
        .heartbeat_timeout_ms =
            (uint32_t)(o->heartbeat_timeout_ms > 0 ? o->heartbeat_timeout_ms : 3000),
        .resume = c->have_prev ? &c->resume : NULL,
        .resume_plan_hash = c->have_prev ? c->prev.plan_hash : NULL,
        .no_tail_sizing = c->off.tail,
        .no_speculation = c->off.spec,
        .no_drain = c->off.drain,
        .no_eft = c->off.eft,
        .no_early = c->off.early,
        .no_early_reduce = c->off.early_reduce,
        .stream = o->serve != NULL,
        .stream_epochs = serve_epochs(c),
        .stream_shuffle = shuffle,
        .stream_seed = seed,
        .listen_addr = c->listen};
    c->ctl = sb_ctl_start(&c->cc, &c->rpc, &err);
    sb_ckpt_free(&c->prev); /* the controller copied it */
    if (c->ctl == NULL) {
        fprintf(stderr, "streambatch run: controller: %s\n", err.msg);
        return 1;
    }
    c->rm = (run_metrics){
        .ctl = c->ctl, .ncpu = c->ncpu, .ngpu = c->ngpu, .name = c->r.p.metadata.name};
    if (o->metrics_addr != NULL && run_metrics_start(&c->rm, o->metrics_addr, &err) != 0) {
        fprintf(stderr, "streambatch run: --metrics-addr: %s\n", err.msg);
        return 2;
    }
    c->rm_live = 1;
    snprintf(c->caddr, sizeof c->caddr, "%s:%d", c->chost, sb_ctl_port(c->ctl));
    if (c->use_tls && sb_rpc_tlsdir_check(c->tls, c->caddr, 5000, &err) != 0) {
        fprintf(stderr, "streambatch run: %s\n", err.msg);
        return 2;
    }
    return o->serve != NULL ? serve_announce(c) : 0;
}

/* Installs the Ctrl-C / SIGTERM handler and starts the worker processes (a cpu and a gpu
 * pool). Returns 0, or the exit code (1). */
static int run_start_workers(run_ctx *c)
{
    sb_err err;
    const sb_pipeline_spec *spec = &c->r.p.spec;
    c->lc = (sb_local_config){.worker_bin = c->worker_bin,
                              .worker_gpu_bin = c->worker_gpu_bin[0] ? c->worker_gpu_bin : NULL,
                              .controller = c->caddr,
                              .run_dir = c->run_dir,
                              .store_budget = c->store_budget,
                              .respawn = 1,
                              .tls_dir = c->use_tls ? c->tls->dir : NULL,
                              .tls_server_name = c->use_tls ? c->tls->server_name : NULL,
                              .auth_token = c->worker_token,
                              .auth_controller_sha256 = c->controller_sha256,
                              .on_exit = exit_cb,
                              .ud = c->ctl};
    if (c->ncpu > 0)
        c->lc.pools[c->lc.npools++] = (sb_local_pool){
            "cpu", (uint32_t)c->ncpu, (uint32_t)spec->execution.cpu_slots_per_worker, 0};
    if (c->ngpu > 0)
        /* two slots share the device: one task's fetch and write overlap the other's ops */
        c->lc.pools[c->lc.npools++] = (sb_local_pool){"gpu", (uint32_t)c->ngpu, 2, 1};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    g_interrupted = 0;
    c->t0 = mono_s();
    c->loc = sb_local_start(&c->lc, &err);
    if (c->loc == NULL) {
        fprintf(stderr, "streambatch run: starting workers: %s\n", err.msg);
        return 1;
    }
    char slots_note[48] = ""; /* execution.cpuSlotsPerWorker, when more than 1 */
    if (c->ncpu > 0 && spec->execution.cpu_slots_per_worker > 1)
        snprintf(slots_note, sizeof slots_note, " (%d task slots each)",
                 (int)spec->execution.cpu_slots_per_worker);
    fprintf(stderr,
            "running %s: %d cpu%s + %d gpu workers, memory budget %s, mode %s, run dir %s\n",
            c->r.p.metadata.name, c->ncpu, slots_note, c->ngpu,
            human_bytes(c->budget, (char[32]){0}, 32), sb_exec_mode_names[spec->execution.mode],
            c->run_dir);
    return 0;
}

/* Waits for the scheduler to end (or a signal, or the watchdog): meanwhile tracks the workers'
 * peak RSS, writes the checkpoint, shows progress and reports stalls. */
static void run_wait(run_ctx *c)
{
    double next_ckpt = 0;
    c->be = sb_local_backend(c->loc);
    c->tty = isatty(STDERR_FILENO);
    int interval = c->o->progress_interval_ms > 0 ? c->o->progress_interval_ms : 5000;
    double next_progress = mono_s() + (c->tty ? 0.2 : interval / 1000.0);
    c->stall_ms = (uint64_t)(c->r.p.spec.execution.stall_timeout_ns / 1000000);
    double next_stall_report = 0;
    c->st = SB_SCHED_RUNNING;
    while (!g_interrupted) {
        c->st = sb_ctl_wait(c->ctl, 100);
        uint64_t rss = c->be.rss(c->be.impl); /* every worker process, summed */
        if (rss > c->peak_rss)
            c->peak_rss = rss;
        /* serving: the run is over when every rank was told its last epoch ended, too (a
         * rank that waits for its turn has not heard yet) */
        if (c->st != SB_SCHED_RUNNING &&
            (c->o->serve == NULL || c->st != SB_SCHED_SUCCEEDED || sb_ctl_stream_ended(c->ctl)))
            break;
        if (c->st == SB_SCHED_SUCCEEDED)
            sb_clock_sleep_ms(20); /* (sb_ctl_wait returns at once now: no spinning) */
        double now = mono_s();
        if (!c->planned && sb_ctl_nsplits(c->ctl) > 0) {
            fprintf(stderr, "planned %zu splits\n", sb_ctl_nsplits(c->ctl));
            if (sb_ctl_resume_dropped(c->ctl))
                fprintf(stderr, "the source changed since the checkpoint was written: every "
                                "split runs again\n");
            c->planned = 1;
        }
        if (c->planned && now >= next_ckpt && c->o->serve == NULL) {
            /* every second, or less often when writing it takes long: at most ~5% of this
             * thread (a million parts take ~0.5 s: the lineage pass, the JSON, the write) */
            ckpt_save(c->ctl, &c->ck);
            double took = mono_s() - now;
            next_ckpt = now + (took * CKPT_COST_FACTOR > 1.0 ? took * CKPT_COST_FACTOR : 1.0);
        }
        if (now >= next_progress) {
            sb_ctl_snapshot s;
            sb_ctl_snapshot_get(c->ctl, &s);
            print_progress(&s, now - c->t0, c->tty, &c->lines);
            next_progress = now + (c->tty ? 0.2 : interval / 1000.0);
        }
        /* (a stream waits for its consumers as long as they take: no watchdog) */
        if (c->o->serve == NULL && sb_ctl_stalled(c->ctl, c->stall_ms, c->stall, sizeof c->stall) &&
            now >= next_stall_report) {
            fprintf(stderr, "watchdog: %s\n", c->stall);
            next_stall_report = now + (double)c->stall_ms / 1000.0;
            if (sb_ctl_stalled(c->ctl, 3 * c->stall_ms, c->stall, sizeof c->stall)) {
                c->stalled_out = 1;
                break;
            }
        }
    }
}

/* The sink's commit (the run succeeded) or abort (it did not) runs on a worker: before the
 * workers are shut down. s: the snapshot taken when the wait ended. Returns 1 when the commit
 * failed (why in msg), with *commit_s the commit job's seconds when it ran. */
static int run_end_sink(run_ctx *c, const sb_ctl_snapshot *s, char *msg, size_t msglen,
                        double *commit_s)
{
    int commit_failed = 0;
    if (!g_interrupted && !c->stalled_out && c->st == SB_SCHED_SUCCEEDED) {
        double c0 = mono_s();
        commit_failed = commit_sink(c->ctl, c->stall_ms, msg, msglen) != 0;
        *commit_s = mono_s() - c0;
    }
    /* (a run that failed or stopped while planning or preparing never touched the sink, or
     * cannot: leave it alone) */
    if ((g_interrupted || c->stalled_out || c->st != SB_SCHED_SUCCEEDED || commit_failed) &&
        !s->storage_failed && !s->planning)
        abort_sink(c->ctl);
    return commit_failed;
}

/* CPU seconds of this process and its (waited-for) workers. */
static double run_cpu_seconds(void)
{
    struct rusage ru_self, ru_kids;
    getrusage(RUSAGE_SELF, &ru_self);
    getrusage(RUSAGE_CHILDREN, &ru_kids);
    return (double)(ru_self.ru_utime.tv_sec + ru_self.ru_stime.tv_sec + ru_kids.ru_utime.tv_sec +
                    ru_kids.ru_stime.tv_sec) +
           (double)(ru_self.ru_utime.tv_usec + ru_self.ru_stime.tv_usec + ru_kids.ru_utime.tv_usec +
                    ru_kids.ru_stime.tv_usec) /
               1e6;
}

/* Says how the run ended (on stderr, and in s->failure for the summary). Returns the state the
 * summary names; *code becomes 1 unless the run succeeded. */
static const char *run_outcome(const run_ctx *c, sb_ctl_snapshot *s, double wall, int commit_failed,
                               const char *commit_msg, int *code)
{
    if (g_interrupted) {
        *code = 1;
        fprintf(stderr,
                "\ninterrupted by signal %d after %.1f s: %" PRIu64 " of %zu"
                " sink parts written, workers stopped; the sink has no _SUCCESS\n",
                (int)g_interrupted, wall, s->stats.sink_parts, s->nsplits);
        return "Interrupted";
    }
    if (c->stalled_out) {
        *code = 1;
        fprintf(stderr, "\npipeline failed: stalled: %s\n", c->stall);
        snprintf(s->failure, sizeof s->failure, "stalled: %s", c->stall);
        return "Failed";
    }
    if (c->st == SB_SCHED_SUCCEEDED) {
        if (!commit_failed)
            return "Succeeded";
        *code = 1;
        fprintf(stderr, "\npipeline failed: %s\n", commit_msg);
        snprintf(s->failure, sizeof s->failure, "%s", commit_msg);
        return "Failed";
    }
    *code = 1;
    fprintf(stderr, "\npipeline failed: %s\n", s->failure);
    return "Failed";
}

/* The summary: per stage on stdout, the errored partitions, the one-line verdict, and with
 * --summary-json the same as JSON. */
static void run_report(const run_ctx *c, const sb_ctl_snapshot *s, const char *state, double wall,
                       double commit_s, double cpu_total, uint64_t started)
{
    size_t nerr = 0;
    uint64_t errored_total = 0;
    sb_storage_errored *errs = sb_ctl_errored(c->ctl, &nerr, &errored_total);
    const char *name = c->r.p.metadata.name;
    print_summary(stdout, s, wall, commit_s, cpu_total, c->peak_rss, started);
    print_errored(stdout, errs, nerr, errored_total);
    if (errored_total > 0 && strcmp(state, "Succeeded") == 0)
        printf("%s: Succeeded with %" PRIu64 " errored partition%s in %.2f s\n", name,
               errored_total, errored_total == 1 ? "" : "s", wall);
    else if (strcmp(state, "Failed") == 0 && s->failure[0] != '\0')
        /* the reason again on the last line, where a reader of the output's tail looks (it is
         * on stderr first, which comes before the buffered summary when both are piped) */
        printf("%s: %s in %.2f s: %.400s\n", name, state, wall, s->failure);
    else
        printf("%s: %s in %.2f s\n", name, state, wall);
    if (c->o->summary_json != NULL)
        write_summary_json(c->o->summary_json, s, state, wall, commit_s, cpu_total, c->peak_rss,
                           started, errs, nerr, errored_total);
    sb_ctl_errored_free(errs, nerr);
}

/* A finished run needs no checkpoint; one that did not finish keeps its committed work there
 * for --resume (written once more: what was committed since the last write). */
static void run_settle_checkpoint(run_ctx *c, int code)
{
    sb_err err;
    if (c->o->serve != NULL)
        return; /* a stream keeps no checkpoint */
    if (c->ck.log.writes > 0)
        fprintf(stderr,
                "checkpoint: %" PRIu64 " writes, %" PRIu64 " parts, %" PRIu64
                " bytes, %.3f s (%.1f us per part written)\n",
                c->ck.log.writes, c->ck.log.parts_written, c->ck.log.bytes, c->ck.log.seconds,
                c->ck.log.parts_written ? c->ck.log.seconds * 1e6 / (double)c->ck.log.parts_written
                                        : 0.0);
    if (code == 0) {
        if (sb_runckpt_remove(c->ck.path, &err) != 0 || ckpt_remove_logs(&c->ck, &err) != 0)
            fprintf(stderr, "streambatch run: %s\n", err.msg);
        return;
    }
    if (c->planned)
        ckpt_save(c->ctl, &c->ck);
    if (c->ck.saved_any || c->have_prev)
        fprintf(stderr,
                "the committed work is in %s (its log in %s): `streambatch run %s --resume` "
                "continues from it\n",
                c->ck.path, c->ck.log.sum.location, c->o->file);
}

/* Ends the run once the wait is over: the sink committed or aborted, the workers stopped, the
 * outcome and summary printed, the checkpoint settled. Returns the exit code (0 or 1). */
static int run_finish(run_ctx *c)
{
    int code = 0;
    double wall = mono_s() - c->t0;
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(c->ctl, &s);
    if (c->tty) /* the live display's last frame */
        print_progress(&s, wall, c->tty, &c->lines);
    char msg[SB_ERR_MAX + 512];
    double commit_s = -1; /* the sink's commit job, when it ran: after `wall` */
    int commit_failed = run_end_sink(c, &s, msg, sizeof msg, &commit_s);
    sb_ctl_snapshot_get(c->ctl, &s); /* with the workers lost during the final job */
    sb_ctl_shutdown_workers(c->ctl);
    uint64_t started = sb_local_started(c->loc);
    sb_backend_stop(&c->be, 3000);
    double cpu_total = run_cpu_seconds();
    const char *state = run_outcome(c, &s, wall, commit_failed, msg, &code);
    run_report(c, &s, state, wall, commit_s, cpu_total, started);
    run_settle_checkpoint(c, code);
    return code;
}

/* Releases what the phases set up, in reverse. ran: the workers ran (run_finish came), so the
 * run dir is removed after a success, or named for its worker logs after a failure. */
static void run_teardown(run_ctx *c, int code, int ran)
{
    sb_ckptlog_free(&c->ck.log);
    if (c->rm_live)
        run_metrics_stop(&c->rm);
    if (c->ctl != NULL)
        sb_ctl_free(c->ctl);
    if (ran && c->own_dir && code == 0) {
        if (nftw(c->run_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
            fprintf(stderr, "could not remove %s: %s\n", c->run_dir, strerror(errno));
    } else if (ran && code != 0) {
        fprintf(stderr, "worker logs are in %s\n", c->run_dir);
    }
    if (c->prev_owned)
        sb_ckpt_free(&c->prev);
    sb_runckpt_claim_release(&c->ck.claim);
    run_state_free(&c->r);
}

int sb_run(const sb_run_opts *o)
{
    /* static: large (paths, the controller's and backend's configs), and one run per process */
    static run_ctx ctx;
    run_ctx *c = &ctx;
    memset(c, 0, sizeof *c);
    c->o = o;
    c->ck.claim.fd = -1;
    int code = run_check_env(c);
    if (code != 0)
        return code;
    if ((code = run_load_and_size(c)) != 0 || (code = serve_check(c)) != 0 ||
        (c->o->serve == NULL && (code = run_open_checkpoint(c)) != 0) ||
        (code = run_make_dir(c)) != 0 || (code = run_start_controller(c)) != 0 ||
        (code = run_start_workers(c)) != 0) {
        run_teardown(c, code, 0);
        return code;
    }
    run_wait(c);
    code = run_finish(c);
    run_teardown(c, code, 1);
    return code;
}
