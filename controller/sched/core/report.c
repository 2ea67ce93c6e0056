/* report.c — what the scheduler tells its callers: errored rows, releases and cancels to send,
 * stats and per-op figures, drains, suspects, the sink's parts in order, a stall's
 * description, and the scheduler's own memory (sb_sched_memory_get). */

#include "controller/sched/core/core.h"

const sb_storage_errored *sb_sched_errored_list(const sb_sched *s, size_t *n, uint64_t *total)
{
    *n = s->nerrored;
    if (total != NULL)
        *total = s->errored_total;
    return s->errored;
}

size_t sb_sched_take_releases(sb_sched *s, const char *worker_id, char ***ids)
{
    size_t w = sc_worker_find(s, worker_id);
    *ids = NULL;
    if (w == NONE || s->workers[w].nrel == 0)
        return 0;
    worker *wk = &s->workers[w];
    size_t n = wk->nrel;
    *ids = wk->releases;
    wk->releases = NULL;
    wk->nrel = wk->caprel = 0;
    return n;
}

size_t sb_sched_take_cancels(sb_sched *s, const char *worker_id, sb_sched_cancel **out)
{
    size_t w = sc_worker_find(s, worker_id);
    *out = NULL;
    if (w == NONE || s->workers[w].ncancel == 0)
        return 0;
    worker *wk = &s->workers[w];
    size_t n = wk->ncancel;
    *out = wk->cancels;
    wk->cancels = NULL;
    wk->ncancel = wk->capcancel = 0;
    return n;
}

int sb_sched_cancels_pending(const sb_sched *s, const char *worker_id)
{
    size_t w = sc_worker_find(s, worker_id);
    return w != NONE && s->workers[w].ncancel > 0;
}

void sb_sched_cancels_free(sb_sched_cancel *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].task_id);
    free(v);
}

sb_sched_state sb_sched_state_get(const sb_sched *s, const char **failure)
{
    if (failure != NULL)
        *failure = s->failure;
    return s->state;
}

void sb_sched_get_stats(const sb_sched *s, sb_sched_stats *out)
{
    memset(out, 0, sizeof *out);
    out->budget = s->budget;
    out->partition_bytes = s->partition_bytes;
    out->in_flight_bytes = s->partition_bytes + s->reserved_bytes;
    out->peak_partition_bytes = s->peak_partition_bytes;
    out->max_partition_bytes = s->max_partition_bytes;
    out->tasks_run = s->tasks_run;
    out->tasks_batched = s->tasks_batched;
    out->tasks_rerun = s->tasks_rerun;
    out->early_outputs = s->early_outputs;
    out->early_reduces = s->early_reduces;
    out->partitions_recovered = s->partitions_recovered;
    out->partitions_lost = s->partitions_lost;
    out->sink_parts = s->nsink;
    out->sink_rows = s->sink_rows;
    out->sink_bytes = s->sink_bytes;
    out->source_bytes_read = s->source.source_bytes_read;
    out->row_groups_read = s->source.row_groups_read;
    out->row_groups_skipped = s->source.row_groups_skipped;
    out->source_bytes_skipped = s->source.source_bytes_skipped;
    out->pages_read = s->source.pages_read;
    out->pages_skipped = s->source.pages_skipped;
    out->workers_drained = s->workers_drained;
    for (size_t i = 0; i < s->nworkers; i++)
        out->workers += s->workers[i].alive;
}

size_t sb_sched_drains_take(sb_sched *s, sb_sched_drain *out, size_t max)
{
    size_t n = s->ndrain_notes < max ? s->ndrain_notes : max;
    if (n == 0)
        return 0; /* no notes yet (the array may not exist) */
    for (size_t i = 0; i < n; i++) {
        const worker *wk = &s->workers[s->drain_notes[i]];
        out[i] = (sb_sched_drain){.worker_id = wk->id,
                                  .pool = wk->pool,
                                  .op = s->ops[wk->drain_op].name,
                                  .speed = wk->drain_speed,
                                  .median = wk->drain_median};
    }
    memmove(s->drain_notes, s->drain_notes + n, (s->ndrain_notes - n) * sizeof *s->drain_notes);
    s->ndrain_notes -= n;
    return n;
}

size_t sb_sched_draining_count(const sb_sched *s)
{
    return s->ndraining;
}

void sb_sched_worker_suspect(sb_sched *s, const char *worker_id, int on)
{
    size_t w = sc_worker_find(s, worker_id);
    if (w == NONE || !s->workers[w].alive || s->workers[w].suspect == (on != 0))
        return;
    s->workers[w].suspect = on != 0;
    if (on)
        s->nsuspect++;
    else
        s->nsuspect--;
}

int sb_sched_worker_suspect_get(const sb_sched *s, const char *worker_id)
{
    size_t w = sc_worker_find(s, worker_id);
    return w != NONE && s->workers[w].alive && s->workers[w].suspect;
}

int sb_sched_worker_draining(const sb_sched *s, const char *worker_id)
{
    size_t w = sc_worker_find(s, worker_id ? worker_id : "");
    return w != NONE && s->workers[w].alive && s->workers[w].draining;
}

void sb_sched_get_group_stats(const sb_sched *s, size_t i, sb_sched_group_stats *out)
{
    memset(out, 0, sizeof *out);
    if (i >= s->nops)
        return;
    const op *o = &s->ops[i];
    out->name = o->name;
    out->pool = o->pool;
    out->tasks_total = o->tasks_total;
    out->tasks_done = o->done;
    out->tasks_running = o->running;
    out->tasks_queued = o->qlen;
    out->retries = o->retries;
    out->recovered = o->recovered;
    out->errored = o->errored;
    out->resumed = o->resumed;
    out->rows_in = o->rows_in;
    out->bytes_in = o->bytes_in;
    out->rows_out = o->rows_out;
    out->bytes_out = o->bytes_out;
    out->spilled_bytes = o->spilled_bytes;
    out->outside = o->outside;
    out->outside_bytes = o->outside_bytes;
    out->queued_input_bytes = o->fifo_bytes;
    out->task_seconds = o->task_seconds;
    out->cpu_seconds = o->cpu_seconds;
    out->attempts = o->attempts;
    out->speculated = o->speculated;
    out->spec_won = o->spec_won;
    out->cancelled = o->cancelled;
    out->failed_attempts = o->failed_attempts;
    out->timed_tasks = o->timed;
    memcpy(out->by_pool, o->by_pool, sizeof out->by_pool);
    memcpy(out->duration_buckets, o->duration_buckets, sizeof out->duration_buckets);
    uint64_t bp = o->backpressure_ms;
    if (o->held && s->now_ms > o->held_since_ms)
        bp += s->now_ms - o->held_since_ms;
    out->backpressure_seconds = (double)bp / 1000.0;
    out->held = o->held;
}

/* The output sequence number of a partition id "s<op>-t<task>-p<seq>" (0 if none). */
uint64_t sc_id_seq(const char *id)
{
    const char *p = strrchr(id, 'p');
    return p != NULL && p > id && p[-1] == '-' ? strtoull(p + 1, NULL, 10) : 0;
}

/* 1 if key is nops + 1 decimal numbers joined by '.' (a checkpoint's order key). */
int sc_order_key_valid(const char *key, size_t nops)
{
    size_t n = 0;
    const char *p = key;
    for (;;) {
        if (*p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
        n++;
        if (*p == '\0')
            return n == nops + 1;
        if (*p++ != '.')
            return 0;
    }
}

static void order_key(const sb_sched *s, size_t i, uint64_t *key);

/* The order key of sink part k as a checkpoint keeps it ("a.b.c"), malloc'd; NULL when out of
 * memory. */
char *sc_order_key_format(const sb_sched *s, size_t k)
{
    uint64_t *key = malloc((s->nops + 1) * sizeof *key);
    size_t len = (s->nops + 1) * 21 + 1;
    char *out = key != NULL ? malloc(len) : NULL, *p = out;
    if (out != NULL)
        order_key(s, k, key);
    for (size_t i = 0; out != NULL && i <= s->nops; i++)
        p += snprintf(p, len - (size_t)(p - out), "%s%" PRIu64, i ? "." : "", key[i]);
    free(key);
    return out;
}

/* The input-order key of sink part i: (source split, seq at op 0, seq at op 1, ...), written
 * into key[0..nops] (unused tail 0). With preserve_order every task of op > 0 has one input,
 * so the producer chain is a path back to one split. Parts carried over by a resume have no
 * producer here: keyed by their id when it is an op-0 id, else first. */
static void order_key(const sb_sched *s, size_t i, uint64_t *key)
{
    memset(key, 0, (s->nops + 1) * sizeof *key);
    size_t ti = s->sink_task[i] == NO_TASK ? NONE : s->sink_task[i];
    if (ti == NONE && s->sink[i].order != NULL) { /* kept by the checkpoint (checked at resume) */
        const char *p = s->sink[i].order;
        for (size_t k = 0; k <= s->nops && *p; k++) {
            key[k] = strtoull(p, (char **)&p, 10);
            if (*p == '.')
                p++;
        }
        return;
    }
    if (ti == NONE) {
        unsigned opi;
        unsigned long long t, q;
        if (sscanf(s->sink[i].id, "s%u-t%llu-p%llu", &opi, &t, &q) == 3 && opi == 0) {
            key[0] = t;
            key[1] = q;
        }
        return;
    }
    uint64_t seq = sc_id_seq(s->sink[i].id);
    for (;;) {
        const task *t = &s->tasks[ti];
        key[1 + t->op] = seq;
        if (t->op == 0 || t->ninputs == 0) {
            key[0] = t->op == 0 ? t->index : 0;
            return;
        }
        const part *p = &s->parts[sc_task_inputs(t)[0]];
        seq = sc_id_seq(p->id);
        ti = p->producer;
    }
}

static int key_cmp(const uint64_t *a, const uint64_t *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (a[k] != b[k])
            return a[k] < b[k] ? -1 : 1;
    return 0;
}

typedef struct {
    uint64_t task, seq;
    size_t i;
} sink_rank;

static int sink_rank_cmp(const void *a, const void *b)
{
    const sink_rank *x = a, *y = b;
    if (x->task != y->task)
        return x->task < y->task ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* A sort's output: the parts of its reduce tasks in task order (the ranges' order: sc_exchange_form
 * forms them by bucket), each task's parts by their number. */
static const sb_storage_output *sink_sorted(const sb_sched *s)
{
    size_t m = s->nsink;
    sink_rank *rk = malloc(m * sizeof *rk);
    sb_storage_output *ord = realloc(s->sink_ordered, m * sizeof *ord);
    if (ord != NULL)
        ((sb_sched *)s)->sink_ordered = ord;
    if (rk == NULL || ord == NULL) {
        free(rk);
        return s->sink; /* out of memory: completion order */
    }
    for (size_t i = 0; i < m; i++) {
        size_t ti = s->sink_task[i] == NO_TASK ? NONE : s->sink_task[i];
        uint64_t opi = 0, tix = 0; /* a part carried over by a resume: its id names its task */
        if (ti == NONE)
            sc_parse_part_id(s->sink[i].id, &opi, &tix);
        rk[i] = (sink_rank){ti == NONE ? tix : s->tasks[ti].index, sc_id_seq(s->sink[i].id), i};
    }
    qsort(rk, m, sizeof *rk, sink_rank_cmp);
    for (size_t i = 0; i < m; i++)
        ord[i] = s->sink[rk[i].i];
    free(rk);
    return ord;
}

const sb_storage_output *sb_sched_sink_parts(const sb_sched *s, size_t *n)
{
    *n = s->nsink;
    if (s->sort_sink && s->nsink >= 2)
        return sink_sorted(s);
    if (!s->preserve_order || s->nsink < 2)
        return s->sink;
    /* input order: a merge sort of part indices by their lineage keys (stable) */
    size_t w = s->nops + 1, m = s->nsink;
    uint64_t *keys = malloc(m * w * sizeof *keys);
    size_t *idx = malloc(m * sizeof *idx), *tmp = malloc(m * sizeof *tmp);
    sb_storage_output *ord = realloc(s->sink_ordered, m * sizeof *ord);
    if (keys == NULL || idx == NULL || tmp == NULL || ord == NULL) {
        free(keys);
        free(idx);
        free(tmp);
        if (ord != NULL)
            ((sb_sched *)s)->sink_ordered = ord;
        return s->sink; /* out of memory: completion order */
    }
    ((sb_sched *)s)->sink_ordered = ord;
    for (size_t i = 0; i < m; i++) {
        order_key(s, i, keys + i * w);
        idx[i] = i;
    }
    for (size_t width = 1; width < m; width *= 2) {
        for (size_t lo = 0; lo < m; lo += 2 * width) {
            size_t mid = lo + width < m ? lo + width : m,
                   hi = lo + 2 * width < m ? lo + 2 * width : m;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] =
                    key_cmp(keys + idx[b] * w, keys + idx[a] * w, w) < 0 ? idx[b++] : idx[a++];
            while (a < mid)
                tmp[k++] = idx[a++];
            while (b < hi)
                tmp[k++] = idx[b++];
        }
        size_t *sw = idx;
        idx = tmp;
        tmp = sw;
    }
    for (size_t i = 0; i < m; i++)
        ord[i] = s->sink[idx[i]];
    free(keys);
    free(idx);
    free(tmp);
    return ord;
}

int sb_sched_stalled(const sb_sched *s, uint64_t now_ms, uint64_t stall_ms, char *buf, size_t len)
{
    if (s->state != SB_SCHED_RUNNING || now_ms < s->last_progress_ms + stall_ms)
        return 0;
    size_t o = (size_t)snprintf(
        buf, len, "no progress for %" PRIu64 " s:", (now_ms - s->last_progress_ms) / 1000);
    for (size_t i = 0; i < s->nops && o < len; i++) {
        const op *op_ = &s->ops[i];
        if (op_->qlen == 0 && op_->running == 0 && op_->flen == 0)
            continue;
        const char *why;
        size_t alive = 0, free_slots = 0, bound = 0;
        for (size_t w = 0; w < s->nworkers; w++) {
            const worker *wk = &s->workers[w];
            if (!wk->alive || strcmp(wk->pool, op_->pool) != 0)
                continue;
            alive++;
            free_slots += wk->slots - wk->running;
            bound += wk->op_slots[i];
        }
        int lost_inputs = 0;
        for (size_t k = 0; k < op_->qlen && !lost_inputs; k++)
            lost_inputs = !sc_inputs_available(s, &s->tasks[op_->queue[op_->qhead + k]]);
        if (alive == 0)
            why = "no worker in its pool";
        else if (op_->running > 0)
            why = "tasks running without finishing (slow op, or waiting on a fetch)";
        else if (lost_inputs)
            why = "inputs lost, waiting for them to be recomputed";
        else if (s->mode == SB_MODE_STATIC && bound == 0)
            why = "no slot bound to it (static mode)";
        else if (free_slots == 0)
            why = "no free slot in its pool";
        else if (op_->held || s->partition_bytes + s->reserved_bytes >= s->budget)
            why = "memory budget full"; /* (held: its next task's output does not fit) */
        else
            why = "waiting for upstream output";
        o += (size_t)snprintf(buf + o, len - o,
                              " stage %s (%s pool): %zu queued, %" PRIu64 " running, %zu input "
                              "partitions waiting — %s;",
                              op_->name, op_->pool, op_->qlen, op_->running, op_->flen, why);
    }
    if (o < len)
        snprintf(buf + o, len - o, " in flight %" PRIu64 " of %" PRIu64 " bytes",
                 s->partition_bytes + s->reserved_bytes, s->budget);
    return 1;
}

/* ---- memory accounting ---------------------------------------------------------------------- */

/* glibc's footprint of one malloc(n): 8 bytes of header, 16-byte granules, 32 bytes at least. */
static uint64_t blk(size_t n)
{
    size_t b = (n + 8 + 15) & ~(size_t)15;
    return b < 32 ? 32 : b;
}

static uint64_t str_blk(const char *p)
{
    return p != NULL ? blk(strlen(p) + 1) : 0;
}

/* A string in the pool: its bytes alone (the pool's headers and unused room: pool_bytes) */
static uint64_t pool_str(const char *p)
{
    return p != NULL ? strlen(p) + 1 : 0;
}

static uint64_t map_blk(const sb_strmap *m)
{
    if (m->cap == 0)
        return 0;
    uint64_t b = blk(m->cap * sizeof *m->keys) + blk(m->cap * sizeof *m->vals);
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != NULL && m->keys[i][0] != '\0')
            b += blk(strlen(m->keys[i]) + 1);
    return b;
}

void sb_sched_memory_get(const sb_sched *s, sb_sched_memory *out)
{
    memset(out, 0, sizeof *out);
    uint64_t pooled = 0;
    out->tasks = s->ntasks;
    out->parts = s->nparts;
    out->sink_parts = s->nsink;
    out->task_bytes = s->captasks ? blk(s->captasks * sizeof *s->tasks) : 0;
    for (size_t i = 0; i < s->ntasks; i++) {
        const task *t = &s->tasks[i];
        out->task_bytes += str_blk(t->first_error);
        if (t->ninputs > 1)
            out->task_bytes += blk(t->ninputs * sizeof *t->in.many);
    }
    out->part_bytes = s->capparts ? blk(s->capparts * sizeof *s->parts) : 0;
    for (size_t i = 0; i < s->nparts; i++) {
        out->part_bytes += pool_str(s->parts[i].id);
        pooled += pool_str(s->parts[i].id);
    }
    out->sink_bytes = (s->capsink ? blk(s->capsink * sizeof *s->sink) : 0) +
                      (s->capsink_task ? blk(s->capsink_task * sizeof *s->sink_task) : 0);
    for (size_t i = 0; i < s->nsink; i++) {
        out->sink_bytes += pool_str(s->sink[i].id) + str_blk(s->sink[i].order);
        pooled += pool_str(s->sink[i].id);
    }
    for (size_t i = 1; i < s->nops; i++) /* ops > 0: their tasks by index */
        out->task_bytes += s->ops[i].captis ? blk(s->ops[i].captis * sizeof *s->ops[i].tis) : 0;
    out->task_bytes += s->capcopies ? blk(s->capcopies * sizeof *s->copies) : 0;
    out->map_bytes = blk(sb_idmap_bytes(&s->part_ids)) + map_blk(&s->worker_ids) +
                     blk(sb_idmap_bytes(&s->sink_ids));
    out->split_bytes = blk((s->nsplits ? s->nsplits : 1) * sizeof *s->splits);
    for (size_t i = 0; i < s->nsplits; i++) {
        out->split_bytes += pool_str(s->splits[i]);
        pooled += pool_str(s->splits[i]);
    }
    out->pool_bytes = s->ids.bytes > pooled ? s->ids.bytes - pooled : 0;
    out->total_bytes = out->task_bytes + out->part_bytes + out->sink_bytes + out->map_bytes +
                       out->split_bytes + out->pool_bytes;
}
