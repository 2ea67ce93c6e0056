/* opckpt.c — a Pipeline's checkpoint log on Kubernetes (see opckpt.h): the writer's files go
 * out as CKPT_PUT storage jobs, a CKPT_LOAD job's files are read back through an in-memory
 * directory, and the status keeps the summary. */
#include "controller/operator/opckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/sched/ranges.h"
#include "core/log.h"

/* The writer's put: the file is collected for the job (ud: the sb_opckpt). */
static int collect_put(void *ud, const char *dir, const char *name, const char *data, size_t n,
                       sb_err *err)
{
    (void)dir;
    sb_opckpt *k = ud;
    return sb_storage_files_add(&k->collected, name, data, n, err);
}

int sb_opckpt_init(sb_opckpt *k, const char *dir, const char *id, uint32_t epoch,
                   const char *spec_hash, uint32_t generation, sb_err *err)
{
    memset(k, 0, sizeof *k);
    k->io = (sb_ckptlog_io){.ud = k, .put = collect_put};
    if (sb_ckptlog_init_io(&k->w, &k->io, dir, id, epoch, spec_hash, err) != 0)
        return -1;
    k->w.sum.generation = generation; /* the next compaction goes past it */
    k->max_job_bytes = SB_OPCKPT_MAX_JOB_BYTES;
    if (k->w.chunk_bytes > k->max_job_bytes / 2)
        k->w.chunk_bytes = k->max_job_bytes / 2;
    return 0;
}

void sb_opckpt_free(sb_opckpt *k)
{
    sb_ckptlog_free(&k->w);
    sb_storage_files_free(&k->collected);
    sb_storage_files_free(&k->queue);
    memset(k, 0, sizeof *k);
}

static void wall_now(char out[32])
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The job in flight ended (r 1 done, -1 failed with msg), the last of its write or not. */
static void job_end(sb_opckpt *k, int r, const char *msg, uint64_t now_ms)
{
    k->inflight = 0;
    sb_storage_files_free(&k->queue);
    k->qpos = 0;
    if (r == 1) {
        k->durable = k->sent;
        wall_now(k->last_write);
        k->jobs++;
        k->bytes += k->pend_bytes;
        k->parts += k->pend_parts;
        k->seconds += (double)(now_ms - k->started_ms) / 1000.0;
        if (k->jobs % 10 == 0) /* now and then: a killed leader's cost is in its log too */
            sb_opckpt_log_cost(k, NULL);
        return;
    }
    /* not durable: the next write rewrites everything as a new base */
    k->failed++;
    sb_ckptlog_forget(&k->w);
    sb_log(SB_LOG_WARN, "writing the checkpoint log failed; the next write compacts", "location",
           k->w.sum.location, "error", msg, NULL);
}

/* Sends the queued write's next files, as many as fit in one job (the manifest of a chunked
 * base comes last, with the prune). 1 sent, 0 not (the write is dropped and the next one
 * compacts). */
static int send_next(sb_opckpt *k, sb_ctl *ctl, uint64_t now_ms)
{
    size_t end = k->qpos, total = 0;
    while (end < k->queue.n &&
           (end == k->qpos ||
            total + k->queue.v[end].len + strlen(k->queue.v[end].name) <= k->max_job_bytes)) {
        total += k->queue.v[end].len + strlen(k->queue.v[end].name);
        end++;
    }
    sb_err err = {0};
    int prune = k->qprune && end == k->queue.n;
    if (sb_ctl_ckpt_start(ctl, SB_STORAGE_CKPT_PUT, k->queue.v + k->qpos, end - k->qpos, prune,
                          &err) != 0) {
        sb_ckptlog_forget(&k->w);
        sb_storage_files_free(&k->queue);
        k->qpos = 0;
        return 0;
    }
    k->qpos = end;
    k->inflight = 1;
    k->last_ms = now_ms;
    return 1;
}

/* Encodes what ctl committed since the last write and queues it. 1 queued, 0 nothing new. */
static int queue_write(sb_opckpt *k, sb_ctl *ctl, uint64_t now_ms)
{
    char *ranges = NULL, plan_hash[17];
    sb_storage_output *parts = NULL;
    size_t nparts = 0, nsplits = sb_ctl_nsplits(ctl);
    sb_err err = {0};
    if (nsplits == 0 || sb_ctl_checkpoint(ctl, &ranges, &parts, &nparts, &err) != 0)
        return 0;
    sb_ctl_plan_hash(ctl, plan_hash);
    uint64_t before = k->w.parts_written, bytes0 = k->w.bytes;
    int wrote = 0;
    sb_storage_files_free(&k->collected);
    int rc = sb_ckptlog_update(&k->w, plan_hash, nsplits, ranges, parts, nparts, &wrote, &err);
    free(ranges);
    sb_sched_parts_free(parts, nparts);
    if (rc != 0 || !wrote || k->collected.n == 0) {
        if (rc != 0)
            sb_log(SB_LOG_WARN, "encoding the checkpoint failed", "location", k->w.sum.location,
                   "error", err.msg, NULL);
        sb_storage_files_free(&k->collected);
        return 0;
    }
    size_t big = 0;
    for (size_t i = 0; i < k->collected.n; i++)
        if (k->collected.v[i].len + strlen(k->collected.v[i].name) > big)
            big = k->collected.v[i].len + strlen(k->collected.v[i].name);
    if (big > k->max_job_bytes) { /* it would not reach a worker: stop, and say why */
        k->refused_bytes = big;
        k->refused_parts = k->w.sum.parts;
        sb_ckptlog_forget(&k->w);
        sb_storage_files_free(&k->collected);
        char m[512];
        sb_opckpt_refused(k, m, sizeof m);
        sb_log(SB_LOG_WARN, "checkpoint log write refused", "location", k->w.sum.location, "error",
               m, NULL);
        return 0;
    }
    /* a compaction wrote a base (its chunks first): the log's other files go once it is
     * durable, with its last job */
    k->qprune = strncmp(k->collected.v[0].name, "base-", 5) == 0;
    k->queue = k->collected;
    memset(&k->collected, 0, sizeof k->collected);
    k->qpos = 0;
    k->sent = k->w.sum;
    k->started_ms = now_ms;
    k->pend_parts = k->w.parts_written - before;
    k->pend_bytes = k->w.bytes - bytes0;
    return send_next(k, ctl, now_ms);
}

int sb_opckpt_tick(sb_opckpt *k, sb_ctl *ctl, uint64_t now_ms, int force)
{
    if (k->inflight) {
        char msg[SB_ERR_MAX + 256] = "";
        int r = sb_ctl_storage_poll(ctl, msg, sizeof msg);
        if (r == 0)
            return 1;
        if (r == 1 && k->qpos < k->queue.n) { /* the write's next files */
            k->inflight = 0;
            if (send_next(k, ctl, now_ms))
                return 1;
            return 0;
        }
        job_end(k, r, msg, now_ms);
    }
    if (force < 0 || k->refused_bytes > 0 ||
        (!force && now_ms < k->last_ms + SB_OPCKPT_INTERVAL_MS))
        return 0;
    return queue_write(k, ctl, now_ms);
}

int sb_opckpt_refused(const sb_opckpt *k, char *msg, size_t len)
{
    if (k->refused_bytes == 0)
        return 0;
    snprintf(msg, len,
             "the checkpoint log's next write (%llu parts, %llu bytes) is past the %zu bytes a "
             "storage job can carry to a worker: the log stays at its last durable write (%llu "
             "splits), and a failover or resume runs the splits committed since again",
             (unsigned long long)k->refused_parts, (unsigned long long)k->refused_bytes,
             k->max_job_bytes, (unsigned long long)k->durable.splits);
    return 1;
}

void sb_opckpt_log_cost(const sb_opckpt *k, const char *pipeline)
{
    char w[24], p[24], b[24], sec[32], f[24];
    snprintf(w, sizeof w, "%llu", (unsigned long long)k->jobs);
    snprintf(p, sizeof p, "%llu", (unsigned long long)k->parts);
    snprintf(b, sizeof b, "%llu", (unsigned long long)k->bytes);
    snprintf(sec, sizeof sec, "%.3f", k->seconds);
    snprintf(f, sizeof f, "%llu", (unsigned long long)k->failed);
    sb_log(SB_LOG_INFO, "checkpoint log written", "pipeline", pipeline ? pipeline : "-", "location",
           k->w.sum.location, "writes", w, "parts", p, "bytes", b, "seconds", sec, "failed", f,
           NULL);
}

cJSON *sb_opckpt_status_json(const sb_opckpt *k)
{
    if (k->durable.generation == 0)
        return NULL;
    cJSON *j = sb_ckptlog_summary_json(&k->durable);
    if (j != NULL && cJSON_AddStringToObject(j, "lastWrite", k->last_write) == NULL) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int sb_opckpt_finished(sb_ctl *ctl, size_t *out, sb_err *err)
{
    char *ranges = NULL;
    sb_storage_output *parts = NULL;
    size_t nparts = 0, n = sb_ctl_nsplits(ctl);
    *out = 0;
    if (sb_ctl_checkpoint(ctl, &ranges, &parts, &nparts, err) != 0)
        return -1;
    sb_sched_parts_free(parts, nparts);
    uint8_t *set = calloc(n + 1, 1);
    if (set == NULL) {
        free(ranges);
        return sb_err_set(err, "out of memory");
    }
    if (sb_ranges_parse(ranges, set, n, NULL) == 0)
        for (size_t i = 0; i < n; i++)
            *out += set[i] != 0;
    free(set);
    free(ranges);
    return 0;
}

size_t sb_opckpt_committed(const sb_opckpt *k, size_t carried, size_t finished)
{
    if (k == NULL)
        return finished;
    /* a write in flight (k->sent) does not count until the worker reported it done */
    size_t held = k->durable.generation != 0 ? (size_t)k->durable.splits : carried;
    return held < finished ? held : finished;
}

/* ---- reading a loaded log ---------------------------------------------------------------- */

static int mem_list(void *ud, const char *dir, char ***names, size_t *n, sb_err *err)
{
    (void)dir;
    const sb_storage_files *fs = ud;
    *names = calloc(fs->n + 1, sizeof **names);
    *n = 0;
    if (*names == NULL)
        return sb_err_set(err, "out of memory");
    for (size_t i = 0; i < fs->n; i++) {
        (*names)[i] = strdup(fs->v[i].name);
        if ((*names)[i] == NULL) {
            for (size_t j = 0; j < i; j++)
                free((*names)[j]);
            free(*names);
            *names = NULL;
            return sb_err_set(err, "out of memory");
        }
    }
    *n = fs->n;
    return 0;
}

static int mem_read(void *ud, const char *dir, const char *name, char **data, size_t *n,
                    sb_err *err)
{
    (void)dir;
    const sb_storage_files *fs = ud;
    for (size_t i = 0; i < fs->n; i++) {
        if (strcmp(fs->v[i].name, name) != 0)
            continue;
        *data = malloc(fs->v[i].len + 1);
        if (*data == NULL)
            return sb_err_set(err, "out of memory");
        memcpy(*data, fs->v[i].data, fs->v[i].len);
        (*data)[fs->v[i].len] = '\0';
        *n = fs->v[i].len;
        return 1;
    }
    return 0;
}

int sb_opckpt_resume(const sb_ckptlog_summary *expect, const sb_storage_files *files, sb_ckpt *out,
                     sb_ckptlog_summary *found, sb_err *err)
{
    sb_ckptlog_io io = {.ud = (void *)files, .list = mem_list, .read = mem_read};
    return sb_ckptlog_load_io(expect, &io, out, found, err);
}
