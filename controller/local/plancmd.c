/* plancmd.c — `streambatch plan` (plancmd.h): the placement planner on a manifest. Owns the
 * stages' rates (declared bench costs, or --profile's local runs in child processes), the
 * printed and JSON plan, and the placement --set lines `streambatch run --plan` applies. */
#include "controller/local/plancmd.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "controller/local/run.h"
#include "core/log.h"
#include "doc/doc.h"
#include "io/split.h"
#include "plan/fromspec.h"
#include "plan/plan.h"
#include "plan/price.h"
#include "spec/pipeline.h"
#include "spec/validate.h"
#include "storage/joinplan.h"

typedef struct {
    char *buf;
    sb_doc *doc;
    const sb_node *root;
    sb_pipeline p;
    int have_p;
    sb_plan_stage_in st[SB_PLAN_MAX_STAGES];
    char why_missing[SB_PLAN_MAX_STAGES][SB_SHAPE_COUNT][SB_PLAN_WHY_MAX]; /* declared rates */
    sb_plan_input in;
    const char *gpu_type;
    const char *rates_from; /* "declared" or "measured" */
    char notes[4][512];
    size_t nnotes;
    double profiled_bytes, total_bytes, profiled_rows; /* with --profile */
    int sampled;
    /* the profiling run streams (stages fuse) instead of timing each stage alone: an exchanged
     * join after other stages needs them in its map tasks, which staged mode refuses */
    int profile_fused;
} plan_state;

static void plan_state_free(plan_state *s)
{
    if (s->have_p)
        sb_pipeline_free(&s->p);
    sb_doc_free(s->doc);
    free(s->buf);
}

static void note(plan_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(plan_state *s, const char *fmt, ...)
{
    if (s->nnotes == sizeof s->notes / sizeof *s->notes)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->notes[s->nnotes++], sizeof s->notes[0], fmt, ap);
    va_end(ap);
}

/* Reads and validates the manifest (problems to `out`, NULL = quiet); 0, or the exit code (2). */
static int load_to(const char *file, plan_state *s, FILE *out)
{
    size_t len, ndocs = 0;
    char msg[512];
    if (sb_spec_read_file_limited(file, SB_MANIFEST_MAX_BYTES, &s->buf, &len, msg, sizeof msg) !=
        0) {
        if (out != NULL)
            fprintf(out, "%s: %s\n", file, msg);
        return 2;
    }
    FILE *null = out == NULL ? fopen("/dev/null", "w") : NULL;
    int problems = sb_validate_buffer(file, s->buf, len, out != NULL ? out : null, &ndocs);
    if (null != NULL)
        fclose(null);
    if (problems != 0) {
        if (out != NULL)
            fprintf(out, "streambatch plan: %s is not a valid Pipeline (see above)\n", file);
        return 2;
    }
    if (ndocs != 1) {
        if (out != NULL)
            fprintf(out, "streambatch plan: %s has %zu Pipelines; plan takes exactly one\n", file,
                    ndocs);
        return 2;
    }
    s->doc = sb_doc_parse_yaml(s->buf, len, NULL);
    for (size_t i = 0; s->doc && i < sb_doc_count(s->doc) && s->root == NULL; i++) {
        const sb_node *n = sb_doc_root(s->doc, i);
        if (n != NULL && n->kind == SB_NODE_MAP)
            s->root = n;
    }
    sb_diags d = {0};
    if (s->root == NULL || sb_pipeline_decode(s->root, &s->p, &d) != 0 || d.n > 0) {
        if (out != NULL)
            fprintf(out, "streambatch plan: cannot read %s\n", file);
        sb_diags_free(&d);
        return 2;
    }
    s->have_p = 1;
    return 0;
}

static int load(const char *file, plan_state *s)
{
    return load_to(file, s, stderr);
}

static const char *shape_name(int k)
{
    return sb_shape_names[k];
}

/* Resources, bounds and allowed shapes of every stage (rates come later). */
static void fill_stages(plan_state *s)
{
    sb_plan_stages_from_spec(&s->p, s->st);
}

/* ---- declared rates ------------------------------------------------------------------------ */

static double json_num(const cJSON *o, const char *k, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* 0 when every allowed shape of every stage has a declared rate (lib/plan/fromspec.h); else the
 * number of stages without one (their reasons in why_missing). */
static int declared_rates(plan_state *s)
{
    return sb_plan_declared_rates(&s->p, s->st, s->why_missing);
}

/* ---- profiling ----------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path);
}

static void self_dir(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(buf, len, ".");
        return;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    snprintf(buf, len, "%s", self);
}

/* The first objects of the source, about `want` bytes: a `uris` list (NULL when the whole
 * source is that small, or is one object). Sets the profiled and total bytes. */
static cJSON *sample_uris(plan_state *s, int64_t want, sb_err *err)
{
    sb_io_split *sp = NULL;
    size_t n = 0;
    if (sb_io_plan_splits(&s->p.spec.source, &sp, &n, err) != 0)
        return NULL;
    double total = 0, taken = 0;
    size_t objects = 0, taken_objects = 0;
    const char *last = NULL;
    cJSON *uris = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        if (last != NULL && strcmp(last, sp[i].path) == 0)
            continue;
        last = sp[i].path;
        objects++;
        total += (double)sp[i].file_size;
        if (taken < (double)want || taken_objects == 0) {
            char u[PATH_MAX + 16];
            snprintf(u, sizeof u, "%s%s", sp[i].path[0] == '/' ? "file://" : "", sp[i].path);
            cJSON_AddItemToArray(uris, cJSON_CreateString(u));
            taken += (double)sp[i].file_size;
            taken_objects++;
        }
    }
    sb_io_splits_free(sp, n);
    s->total_bytes = total;
    s->profiled_bytes = taken;
    if (taken_objects == objects) {
        cJSON_Delete(uris);
        cJSON *none = cJSON_CreateNull();
        return none; /* the whole source */
    }
    s->sampled = 1;
    return uris;
}

/* Adds one op of a profiling run's summary (`stages[]` entry) to its stages' task seconds. Its
 * name is its stages' joined with '+' (fused: they share its time evenly), each maybe with its
 * half's suffix: an all-to-all stage runs as "<stage>.map" and "<stage>" (its reduce half), a
 * sort as three ("<stage>.range" between), and its cost is all of them. */
static void op_seconds(const plan_state *s, const cJSON *e, double *secs, int *found)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    if (!cJSON_IsString(name))
        return;
    const char *nm = name->valuestring;
    size_t k = 1;
    for (const char *c = nm; *c; c++)
        k += *c == '+';
    double t = json_num(e, "taskSeconds", 0) / (double)k;
    for (const char *part = nm; part != NULL;) {
        const char *plus = strchr(part, '+');
        int half;
        long i = sb_plan_op_stage(&s->p, part, plus ? (size_t)(plus - part) : strlen(part), &half);
        if (i >= 0) {
            secs[i] += t;
            found[i] = 1;
        }
        part = plus ? plus + 1 : NULL;
    }
}

/* The pipeline as a profiling run takes it: stage i on shapes[i] first, staged mode (streaming
 * with s->profile_fused), the sink in dir, the source cut to `uris` (when not null). */
static char *profile_json(const plan_state *s, const sb_shape *shapes, const cJSON *uris,
                          const char *sink_dir)
{
    char *js = sb_node_to_json(s->root);
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    free(js);
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(root, "spec");
    if (spec == NULL) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON *ex = cJSON_GetObjectItemCaseSensitive(spec, "execution");
    if (!cJSON_IsObject(ex)) {
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "execution");
        ex = cJSON_AddObjectToObject(spec, "execution");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(ex, "mode");
    cJSON_AddStringToObject(ex, "mode", s->profile_fused ? "streaming" : "staged");
    cJSON *sink = cJSON_GetObjectItemCaseSensitive(spec, "sink");
    char u[PATH_MAX + 16];
    snprintf(u, sizeof u, "file://%s/", sink_dir);
    cJSON_DeleteItemFromObjectCaseSensitive(sink, "uri");
    cJSON_DeleteItemFromObjectCaseSensitive(sink, "credentialsSecret");
    cJSON_AddStringToObject(sink, "uri", u);
    if (cJSON_IsArray(uris)) {
        cJSON *src = cJSON_GetObjectItemCaseSensitive(spec, "source");
        cJSON_DeleteItemFromObjectCaseSensitive(src, "uri");
        cJSON_DeleteItemFromObjectCaseSensitive(src, "uris");
        cJSON_AddItemToObject(src, "uris", cJSON_Duplicate(uris, 1));
    }
    cJSON *stages = cJSON_GetObjectItemCaseSensitive(spec, "stages");
    for (size_t i = 0; i < s->p.spec.nstages; i++) {
        const sb_plan_stage_in *in = &s->st[i];
        if (!(in->shapes[0].allowed && in->shapes[1].allowed))
            continue;
        cJSON *st = cJSON_GetArrayItem(stages, (int)i);
        cJSON *pl = cJSON_CreateArray();
        cJSON_AddItemToArray(pl, cJSON_CreateString(shape_name(shapes[i])));
        cJSON_AddItemToArray(pl, cJSON_CreateString(shape_name(1 - (int)shapes[i])));
        cJSON_DeleteItemFromObjectCaseSensitive(st, "placement");
        cJSON_AddItemToObject(st, "placement", pl);
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int rc = fputs(text, f) < 0 ? -1 : 0;
    return fclose(f) != 0 ? -1 : rc;
}

/* One profiling run in a child process; the summary's stages into rates[i] for shapes[i]. */
static int profile_run(plan_state *s, const sb_local_plan_opts *o, const char *dir,
                       const sb_shape *shapes, const cJSON *uris, const char *tag,
                       double *rows_last, double *rates, sb_err *err)
{
    char sink[PATH_MAX], file[PATH_MAX], summary[PATH_MAX], log[PATH_MAX], run_dir[PATH_MAX],
        ckpt[PATH_MAX];
    snprintf(sink, sizeof sink, "%s/out-%s", dir, tag);
    snprintf(file, sizeof file, "%s/pipeline-%s.json", dir, tag);
    snprintf(summary, sizeof summary, "%s/summary-%s.json", dir, tag);
    snprintf(log, sizeof log, "%s/run-%s.log", dir, tag);
    snprintf(run_dir, sizeof run_dir, "%s/run-%s", dir, tag);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-%s.json", dir, tag);
    char *js = profile_json(s, shapes, uris, sink);
    if (js == NULL || write_text(file, js) != 0 || mkdir(run_dir, 0755) != 0) {
        free(js);
        return sb_err_set(err, "profiling: cannot write %s: %s", file, strerror(errno));
    }
    free(js);
    int gpus = 0;
    for (size_t i = 0; i < s->p.spec.nstages; i++)
        gpus |= shapes[i] == SB_SHAPE_GPU;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return sb_err_set(err, "profiling: fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        sb_log_set_level(SB_LOG_WARN);
        sb_run_opts ro = {.file = file,
                          .cpus = o->profile_cpus,
                          .gpus = gpus ? 1 : 0,
                          .worker_bin = o->worker_bin,
                          .run_dir = run_dir,
                          .summary_json = summary,
                          .checkpoint = ckpt,
                          .progress_interval_ms = 60000};
        _exit(sb_run(&ro));
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    char *text = NULL, msg[256];
    size_t len;
    cJSON *j = NULL;
    if (sb_spec_read_file_limited(summary, 16u << 20, &text, &len, msg, sizeof msg) == 0)
        j = cJSON_Parse(text);
    free(text);
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(j, "state");
    if (!cJSON_IsString(state) || strcmp(state->valuestring, "Succeeded") != 0) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "failure");
        sb_err_set(err, "profiling run on %s failed%s%s (its output: %s, worker logs: %s)", tag,
                   cJSON_IsString(f) && f->valuestring[0] ? ": " : "",
                   cJSON_IsString(f) ? f->valuestring : "", log, run_dir);
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
    int n = cJSON_GetArraySize(stages);
    const cJSON *last = cJSON_GetArrayItem(stages, n - 1);
    *rows_last = json_num(last, "rowsOut", 0);
    if (*rows_last <= 0) {
        cJSON_Delete(j);
        return sb_err_set(err,
                          "profiling run on %s: the profiled part of the source gave no rows "
                          "out of the pipeline, so there is no rate to measure",
                          tag);
    }
    double secs[SB_PLAN_MAX_STAGES] = {0};
    int found[SB_PLAN_MAX_STAGES] = {0};
    for (int k = 0; k < n; k++)
        op_seconds(s, cJSON_GetArrayItem(stages, k), secs, found);
    for (size_t i = 0; i < s->p.spec.nstages; i++) {
        rates[i] = found[i] ? *rows_last / (secs[i] > 1e-6 ? secs[i] : 1e-6) : 0;
        if (rates[i] <= 0) {
            cJSON_Delete(j);
            return sb_err_set(err, "profiling run on %s: no figures for stage %s in %s", tag,
                              s->p.spec.stages[i].name, summary);
        }
    }
    cJSON_Delete(j);
    return 0;
}

/* An exchanged join after another stage (the right side at or above broadcastBelow): its map
 * tasks must run the stages before it, which staged mode refuses. 1 yes, 0 no, -1 + err (the
 * right side could not be listed). */
static int needs_fusing(const plan_state *s, sb_err *err)
{
    uint64_t *right = NULL;
    if (sb_storage_join_plan(&s->p, &right, err) != 0) {
        sb_err_wrap(err, "profiling");
        return -1;
    }
    int yes = 0;
    for (size_t i = 1; right != NULL && i < s->p.spec.nstages; i++)
        yes |= right[i] > 0;
    free(right);
    return yes;
}

static int profile(plan_state *s, const sb_local_plan_opts *o, sb_err *err)
{
    size_t n = s->p.spec.nstages;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/streambatch-plan-XXXXXX", tmp);
    if (mkdtemp(dir) == NULL)
        return sb_err_set(err, "profiling: cannot create a directory in %s: %s", tmp,
                          strerror(errno));
    int64_t want = o->profile_bytes > 0 ? o->profile_bytes : 8 * s->p.spec.source.partition_size;
    cJSON *uris = sample_uris(s, want, err);
    if (uris == NULL) {
        sb_err_wrap(err, "profiling: listing the source");
        return -1;
    }
    int fuse = needs_fusing(s, err);
    if (fuse < 0) {
        cJSON_Delete(uris);
        return -1;
    }
    s->profile_fused = fuse;
    int choice = 0, gpu_used = 0;
    for (size_t i = 0; i < n; i++)
        choice |= s->st[i].shapes[0].allowed && s->st[i].shapes[1].allowed;
    int rc = 0;
    for (int pass = 0; pass < (choice ? 2 : 1) && rc == 0; pass++) {
        sb_shape shapes[SB_PLAN_MAX_STAGES];
        for (size_t i = 0; i < n; i++) {
            sb_shape pref = pass == 0 ? SB_SHAPE_CPU : SB_SHAPE_GPU;
            shapes[i] = s->st[i].shapes[pref].allowed ? pref : (sb_shape)(1 - (int)pref);
            gpu_used |= shapes[i] == SB_SHAPE_GPU;
        }
        double rows = 0, rates[SB_PLAN_MAX_STAGES];
        rc = profile_run(s, o, dir, shapes, uris, pass == 0 ? "cpu" : "gpu", &rows, rates, err);
        for (size_t i = 0; rc == 0 && i < n; i++)
            if (pass == 0 || shapes[i] == SB_SHAPE_GPU)
                s->st[i].shapes[shapes[i]].rate = rates[i];
        if (rc == 0 && pass == 0)
            s->profiled_rows = rows;
    }
    cJSON_Delete(uris);
    if (rc != 0)
        return -1; /* the directory stays, with the logs the message names */
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        note(s, "could not remove %s", dir);
    if (gpu_used) {
        char bin[PATH_MAX], gb[PATH_MAX + 32];
        self_dir(bin, sizeof bin);
        snprintf(gb, sizeof gb, "%s/streambatch-worker-gpu", bin);
        int have_bin = o->worker_bin == NULL && access(gb, X_OK) == 0;
        int have_dev = access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
        if (!have_bin)
            note(s,
                 "gpu rates were measured with streambatch-worker (%s): ops with a CUDA "
                 "implementation (tensor.mlp) ran their CPU code, so a gpu rate is the CPU "
                 "fallback's",
                 o->worker_bin != NULL ? "--worker-bin"
                                       : "no streambatch-worker-gpu next to streambatch");
        else if (!have_dev)
            note(s, "this machine has no GPU (/dev/nvidiactl): streambatch-worker-gpu fell back to "
                    "the CPU, so a gpu rate is the CPU fallback's");
        else
            note(s, "gpu rates were measured with streambatch-worker-gpu on this machine's GPU");
    }
    note(s,
         "rates measured on %s of the source (%.0f of %.0f bytes, %.0f rows out), %s; one "
         "worker = one task slot",
         s->sampled ? "the first objects" : "the whole", s->profiled_bytes, s->total_bytes,
         s->profiled_rows,
         s->profile_fused ? "in streaming mode (an exchanged join reads the stages before it in "
                            "its map tasks: stages that fused share their op's time evenly; the "
                            "whole right side was read for this part of the source)"
                          : "each stage timed alone (mode staged)");
    return 0;
}

/* ---- output -------------------------------------------------------------------------------- */

static const char *money(double v, char *buf, size_t len)
{
    snprintf(buf, len, v >= 100 ? "%.1f" : v >= 1 ? "%.3f" : "%.4g", v);
    return buf;
}

static void placement_text(const plan_state *s, const sb_plan_result *r, char *buf, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < r->nstages && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s=%s:%lld", i ? " " : "", s->st[i].name,
                              shape_name(r->stages[i].shape), (long long)r->stages[i].workers);
}

static void print_text(const plan_state *s, const sb_plan_result *best, const sb_plan_result *base)
{
    const sb_plan_input *in = &s->in;
    char a[32], b[32], c[32];
    printf("plan for %s (rates %s)\n", s->p.metadata.name, s->rates_from);
    double t = sb_plan_target_rate(in);
    printf("target: %s", t > 0 ? "" : "none (lowest cost per row)");
    if (t > 0)
        printf("%.6g rows/s%s", t, in->target.deadline_seconds > 0 ? " (from the deadline)" : "");
    if (in->target.max_cost_per_hour > 0)
        printf(", at most %s per hour", money(in->target.max_cost_per_hour, a, sizeof a));
    printf("\nprices per hour: %s per CPU core, %s per GiB, %s per GPU (%s)\n",
           money(in->prices.cpu_core_hour, a, sizeof a),
           money(in->prices.mem_gib_hour, b, sizeof b), money(in->prices.gpu_hour, c, sizeof c),
           s->gpu_type);
    printf("\n%-20s %-5s %8s %14s %12s %10s\n", "stage", "shape", "workers", "rows/s/worker",
           "rows/s", "cost/h");
    for (size_t i = 0; i < s->in.nstages; i++) {
        const sb_plan_stage_in *st = &s->st[i];
        for (int k = 0; k < SB_SHAPE_COUNT; k++) {
            if (!st->shapes[k].allowed)
                continue;
            int chosen = best->feasible && (int)best->stages[i].shape == k;
            if (chosen)
                printf("%-20.20s %-5s %8lld %14.6g %12.6g %10s\n", st->name, shape_name(k),
                       (long long)best->stages[i].workers, st->shapes[k].rate,
                       best->stages[i].rows_per_second,
                       money(best->stages[i].cost_per_hour, a, sizeof a));
            else
                printf("%-20.20s %-5s %8s %14.6g %12s %10s\n", st->name, shape_name(k), "-",
                       st->shapes[k].rate, "", "(not chosen)");
        }
    }
    printf("\n%-8s %12s %10s %12s  %s\n", "plan", "rows/s", "cost/h", "per 1M rows",
           "placement (stage=shape:workers)");
    const sb_plan_result *all[1 + SB_BASE_COUNT] = {best, &base[0], &base[1], &base[2]};
    const char *names[1 + SB_BASE_COUNT] = {"chosen", sb_plan_baseline_names[0],
                                            sb_plan_baseline_names[1], sb_plan_baseline_names[2]};
    for (int k = 0; k < 1 + SB_BASE_COUNT; k++) {
        const sb_plan_result *r = all[k];
        if (!r->feasible) {
            printf("%-8s %12s %10s %12s  none: %s\n", names[k], "-", "-", "-", r->why);
            continue;
        }
        char pl[1024];
        placement_text(s, r, pl, sizeof pl);
        printf("%-8s %12.6g %10s %12s  %s\n", names[k], r->rows_per_second,
               money(r->cost_per_hour, a, sizeof a), money(r->cost_per_million_rows, b, sizeof b),
               pl);
    }
    if (best->feasible)
        printf("\nchosen: %.6g rows/s for %s per hour, %s per million rows (%g CPU cores, %g GiB, "
               "%g GPUs)\n",
               best->rows_per_second, money(best->cost_per_hour, a, sizeof a),
               money(best->cost_per_million_rows, b, sizeof b), best->cpu_cores, best->mem_gib,
               best->gpus);
    else
        printf("\nno plan: %s\n", best->why);
    for (size_t i = 0; i < s->nnotes; i++)
        printf("note: %s\n", s->notes[i]);
}

static cJSON *result_json(const plan_state *s, const sb_plan_result *r)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "feasible", r->feasible);
    if (!r->feasible) {
        cJSON_AddStringToObject(j, "why", r->why);
        return j;
    }
    cJSON_AddNumberToObject(j, "rowsPerSecond", r->rows_per_second);
    cJSON_AddNumberToObject(j, "costPerHour", r->cost_per_hour);
    cJSON_AddNumberToObject(j, "costPerMillionRows", r->cost_per_million_rows);
    cJSON_AddNumberToObject(j, "cpuCores", r->cpu_cores);
    cJSON_AddNumberToObject(j, "memoryGiB", r->mem_gib);
    cJSON_AddNumberToObject(j, "gpus", r->gpus);
    cJSON *st = cJSON_AddArrayToObject(j, "stages");
    for (size_t i = 0; i < r->nstages; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", s->st[i].name);
        cJSON_AddStringToObject(e, "shape", shape_name(r->stages[i].shape));
        cJSON_AddNumberToObject(e, "workers", (double)r->stages[i].workers);
        cJSON_AddNumberToObject(e, "rowsPerSecondPerWorker",
                                s->st[i].shapes[r->stages[i].shape].rate);
        cJSON_AddNumberToObject(e, "rowsPerSecond", r->stages[i].rows_per_second);
        cJSON_AddNumberToObject(e, "costPerHour", r->stages[i].cost_per_hour);
        cJSON_AddItemToArray(st, e);
    }
    return j;
}

static void print_json(const plan_state *s, const sb_plan_result *best, const sb_plan_result *base)
{
    const sb_plan_input *in = &s->in;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "pipeline", s->p.metadata.name);
    cJSON_AddStringToObject(j, "rates", s->rates_from);
    cJSON *t = cJSON_AddObjectToObject(j, "target");
    cJSON_AddNumberToObject(t, "rowsPerSecond", sb_plan_target_rate(in));
    if (in->target.deadline_seconds > 0) {
        cJSON_AddNumberToObject(t, "deadlineSeconds", in->target.deadline_seconds);
        cJSON_AddNumberToObject(t, "estimatedRows", in->target.total_rows);
    }
    if (in->target.max_cost_per_hour > 0)
        cJSON_AddNumberToObject(t, "maxCostPerHour", in->target.max_cost_per_hour);
    cJSON *p = cJSON_AddObjectToObject(j, "prices");
    cJSON_AddNumberToObject(p, "cpuCoreHour", in->prices.cpu_core_hour);
    cJSON_AddNumberToObject(p, "memoryGiBHour", in->prices.mem_gib_hour);
    cJSON_AddNumberToObject(p, "gpuHour", in->prices.gpu_hour);
    cJSON_AddStringToObject(p, "gpuType", s->gpu_type);
    cJSON *c = cJSON_AddObjectToObject(j, "capacity");
    const double cap[3] = {in->capacity.cpu_cores, in->capacity.mem_gib, in->capacity.gpus};
    const char *ck[3] = {"cpuCores", "memoryGiB", "gpus"};
    for (int k = 0; k < 3; k++)
        if (cap[k] >= 0)
            cJSON_AddNumberToObject(c, ck[k], cap[k]);
    cJSON *rates = cJSON_AddArrayToObject(j, "stages");
    for (size_t i = 0; i < in->nstages; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", s->st[i].name);
        cJSON_AddStringToObject(e, "op", s->p.spec.stages[i].op);
        cJSON *sh = cJSON_AddObjectToObject(e, "rowsPerSecondPerWorker");
        for (int k = 0; k < SB_SHAPE_COUNT; k++)
            if (s->st[i].shapes[k].allowed)
                cJSON_AddNumberToObject(sh, shape_name(k), s->st[i].shapes[k].rate);
        cJSON_AddItemToArray(rates, e);
    }
    cJSON_AddItemToObject(j, "plan", result_json(s, best));
    cJSON *b = cJSON_AddObjectToObject(j, "baselines");
    for (int k = 0; k < SB_BASE_COUNT; k++)
        cJSON_AddItemToObject(b, sb_plan_baseline_names[k], result_json(s, &base[k]));
    cJSON *notes = cJSON_AddArrayToObject(j, "notes");
    for (size_t i = 0; i < s->nnotes; i++)
        cJSON_AddItemToArray(notes, cJSON_CreateString(s->notes[i]));
    char *text = cJSON_Print(j);
    if (text != NULL)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(j);
}

/* ---- the command --------------------------------------------------------------------------- */

int sb_local_plan_main(const sb_local_plan_opts *o)
{
    static plan_state s; /* large (the planner's fixed arrays); one command per process */
    memset(&s, 0, sizeof s);
    sb_err err = {0};
    int code = load(o->file, &s);
    if (code != 0) {
        plan_state_free(&s);
        return code;
    }
    const sb_pipeline_spec *sp = &s.p.spec;
    if (sb_price_resolve(&sp->execution.pricing, &s.in.prices, &s.gpu_type, &err) != 0) {
        fprintf(stderr, "streambatch plan: %s: %s\n", o->file, err.msg);
        plan_state_free(&s);
        return 2;
    }
    fill_stages(&s);
    s.in.stages = s.st;
    s.in.nstages = sp->nstages;
    s.in.capacity = (sb_plan_capacity){o->cpus, o->memory_gib, o->gpus};
    const sb_target_spec *t = &sp->execution.target;
    s.in.target.rows_per_second = t->rows_per_second_set ? t->rows_per_second : 0;
    s.in.target.deadline_seconds = t->deadline_set ? (double)t->deadline_ns / 1e9 : 0;
    s.in.target.max_cost_per_hour = t->max_cost_per_hour_set ? t->max_cost_per_hour : 0;
    if (o->profile) {
        s.rates_from = "measured with --profile";
        if (profile(&s, o, &err) != 0) {
            fprintf(stderr, "streambatch plan: %s\n", err.msg);
            plan_state_free(&s);
            return 1;
        }
        if (s.profiled_bytes > 0)
            s.in.target.total_rows = s.profiled_rows * s.total_bytes / s.profiled_bytes;
        if (t->deadline_set)
            note(&s,
                 "the deadline's rows (%.0f) are estimated from the profiled part: %.0f rows "
                 "out of %.0f of %.0f source bytes",
                 s.in.target.total_rows, s.profiled_rows, s.profiled_bytes, s.total_bytes);
    } else {
        s.rates_from = "declared by bench.* costs";
        if (declared_rates(&s) != 0) {
            fprintf(stderr,
                    "streambatch plan: %s: these stages have no declared rate; run "
                    "`streambatch plan --profile` to measure them:\n",
                    o->file);
            for (size_t i = 0; i < sp->nstages; i++)
                for (int k = 0; k < SB_SHAPE_COUNT; k++)
                    if (s.st[i].shapes[k].allowed && s.st[i].shapes[k].rate <= 0)
                        fprintf(stderr, "  spec.stages[%zu] (%s) on %s: %s\n", i,
                                sp->stages[i].name, shape_name(k), s.why_missing[i][k]);
            plan_state_free(&s);
            return 2;
        }
        if (t->deadline_set) {
            fprintf(stderr,
                    "streambatch plan: %s: spec.execution.target.deadline needs the number of rows "
                    "the input gives, which only --profile estimates (or set "
                    "spec.execution.target.rowsPerSecond)\n",
                    o->file);
            plan_state_free(&s);
            return 2;
        }
    }
    sb_plan_result best, base[SB_BASE_COUNT];
    if (sb_plan_solve(&s.in, &best, &err) != 0) {
        fprintf(stderr, "streambatch plan: %s: %s\n", o->file, err.msg);
        plan_state_free(&s);
        return 2;
    }
    for (int k = 0; k < SB_BASE_COUNT; k++)
        sb_plan_baseline_solve(&s.in, (sb_plan_baseline)k, &base[k], NULL);
    if (o->json)
        print_json(&s, &best, base);
    else
        print_text(&s, &best, base);
    code = best.feasible ? 0 : 1;
    plan_state_free(&s);
    return code;
}

int sb_plan_placement_sets(const char *file, char (*sets)[SB_PLAN_SET_MAX], size_t max, size_t *n,
                           int *chosen, char *msg, size_t msglen)
{
    static plan_state s;
    memset(&s, 0, sizeof s);
    sb_err err = {0};
    *n = 0;
    int rc = -1;
    if (load_to(file, &s, NULL) != 0) {
        snprintf(msg, msglen, "%s is not a valid Pipeline (streambatch validate %s)", file, file);
        plan_state_free(&s);
        return -1;
    }
    const sb_pipeline_spec *sp = &s.p.spec;
    sb_plan_result best;
    fill_stages(&s);
    s.in.stages = s.st;
    s.in.nstages = sp->nstages;
    s.in.capacity = (sb_plan_capacity){-1, -1, -1};
    const sb_target_spec *t = &sp->execution.target;
    s.in.target.rows_per_second = t->rows_per_second_set ? t->rows_per_second : 0;
    s.in.target.max_cost_per_hour = t->max_cost_per_hour_set ? t->max_cost_per_hour : 0;
    if (sb_price_resolve(&sp->execution.pricing, &s.in.prices, &s.gpu_type, &err) != 0) {
        snprintf(msg, msglen, "%s", err.msg);
    } else if (t->deadline_set) {
        snprintf(msg, msglen,
                 "--plan: spec.execution.target.deadline needs the input's row count, which only "
                 "`streambatch plan --profile` estimates; list the shape it chooses first in "
                 "placement");
    } else if (declared_rates(&s) != 0) {
        snprintf(msg, msglen,
                 "--plan uses declared rates (bench.* costs) and some stages have none; run "
                 "`streambatch plan %s --profile` and list the shape it chooses first in each "
                 "stage's placement",
                 file);
    } else if (sb_plan_solve(&s.in, &best, &err) != 0) {
        snprintf(msg, msglen, "%s", err.msg);
    } else if (!best.feasible) {
        snprintf(msg, msglen, "--plan: no plan: %s", best.why);
    } else {
        rc = 0;
        for (size_t i = 0; i < sp->nstages && *n < max; i++) {
            if (chosen != NULL)
                chosen[i] = -1;
            if (!(s.st[i].shapes[0].allowed && s.st[i].shapes[1].allowed))
                continue;
            int k = (int)best.stages[i].shape;
            if (chosen != NULL)
                chosen[i] = k;
            snprintf(sets[(*n)++], SB_PLAN_SET_MAX, "spec.stages[%zu].placement=[%s, %s]", i,
                     shape_name(k), shape_name(1 - k));
        }
    }
    plan_state_free(&s);
    return rc;
}

void sb_local_plan_notice(const char *file, FILE *out, const int *chosen)
{
    static plan_state s;
    memset(&s, 0, sizeof s);
    if (load_to(file, &s, NULL) != 0) {
        plan_state_free(&s);
        return; /* sb_run reports it */
    }
    for (size_t i = 0; i < s.p.spec.nstages; i++) {
        const sb_stage_spec *st = &s.p.spec.stages[i];
        if (st->nplacement < 2)
            continue;
        if (chosen != NULL && chosen[i] >= 0)
            fprintf(out, "stage %s allows %s, %s: runs on %s, the plan's choice (--plan)\n",
                    st->name, st->placement[0], st->placement[1], shape_name(chosen[i]));
        else
            fprintf(out,
                    "stage %s allows %s, %s: runs on %s, the first listed (run --plan to take "
                    "the plan's choice, or reorder placement)\n",
                    st->name, st->placement[0], st->placement[1], sb_stage_pool(st));
    }
    plan_state_free(&s);
}
