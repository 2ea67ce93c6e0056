/* stream.c — the stream sink's side of the scheduler: epochs let in one after another, each
 * epoch's partitions queued for the dealer, taken, released, cached or lost
 * (sb_sched_stream_*). */

#include "controller/sched/core/core.h"

/* ---- Stream sink ----------------------------------------------------------------------------
 * sb_sched_config.stream (sched.h, "Stream sink"): the last op's outputs wait in a queue per
 * epoch for the dealer. Epoch e is op 0's tasks [(e - first) * epoch_splits, (e - first + 1) *
 * epoch_splits) (first: stream_first, the epochs before it are done and empty), let in
 * (sc_stream_gated) only once everything of the epochs before has been made, so a task of a later
 * op never coalesces rows of two epochs. */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* n elements of size sz in an order shuffled by (seed, epoch) when on (a pure function of the
 * two: Fisher-Yates over splitmix64). */
static void stream_shuffle(int on, uint64_t seed, uint32_t epoch, void *base, size_t n, size_t sz)
{
    uint64_t x = seed ^ ((uint64_t)epoch * 0xd1b54a32d192ed03ULL);
    unsigned char tmp[sizeof(sb_storage_split)], *a = base;
    if (sz > sizeof tmp)
        return;
    for (size_t i = n; on && i > 1; i--) {
        size_t j = (size_t)(splitmix64(&x) % i);
        memcpy(tmp, a + (i - 1) * sz, sz);
        memcpy(a + (i - 1) * sz, a + j * sz, sz);
        memcpy(a + j * sz, tmp, sz);
    }
}

/* The plan's splits once per epoch (once in all with stream_cache), each epoch's in its own
 * order when shuffled. */
int sc_stream_setup(sb_sched *s, const sb_sched_config *cfg, const sb_storage_split *splits,
                    size_t nsplits, sb_storage_split **expanded, sb_err *err)
{
    if (cfg->resume != NULL)
        return sb_err_set(err, "scheduler: a stream sink does not resume from a checkpoint");
    uint32_t epochs = cfg->stream_epochs ? cfg->stream_epochs : 1;
    if (nsplits > 0 && epochs > SIZE_MAX / 2 / sizeof **expanded / nsplits)
        return sb_err_set(err, "scheduler: %u epochs of %zu splits are too many", epochs, nsplits);
    /* an exchange is planned once over every split it is given: with each epoch reading the
     * source again, its reduce would wait for map tasks of epochs not let in yet (a hang) */
    for (size_t k = 0; epochs > 1 && cfg->stream_cache == 0 && k < s->nops; k++)
        if (s->ops[k].xmap)
            return sb_err_set(err,
                              "scheduler: stage %s exchanges rows, and an exchange is planned "
                              "once for the whole run, not per epoch: %u epochs need "
                              "sink.args.cacheEpochs: true (the pipeline runs once)",
                              s->stage_ptrs[s->ops[k].first_stage + s->ops[k].nstages - 1]->name,
                              epochs);
    s->stream = 1;
    s->stream_epochs = epochs;
    s->stream_cache = cfg->stream_cache != 0;
    s->stream_shuffle = cfg->stream_shuffle;
    s->stream_seed = cfg->stream_seed;
    s->epoch_splits = nsplits;
    /* the epochs before the first are let in already, empty: done */
    s->stream_first = s->stream_open = cfg->stream_first < epochs ? cfg->stream_first : epochs;
    uint32_t read = sc_stream_reads(s); /* the epochs that read the source */
    s->sq = calloc(epochs, sizeof *s->sq);
    *expanded = malloc((nsplits > 0 && read > 0 ? nsplits * read : 1) * sizeof **expanded);
    if (s->sq == NULL || *expanded == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    for (uint32_t e = 0; e < read; e++) {
        sb_storage_split *ep = *expanded + (size_t)e * nsplits;
        memcpy(ep, splits, nsplits * sizeof *ep);
        stream_shuffle(cfg->stream_shuffle, cfg->stream_seed, s->stream_first + e, ep, nsplits,
                       sizeof *ep);
    }
    return 0;
}

uint32_t sc_stream_reads(const sb_sched *s)
{
    if (s->stream_first >= s->stream_epochs)
        return 0;
    return s->stream_cache ? 1 : s->stream_epochs - s->stream_first;
}

/* The epoch of op 0's task index (epochs before the first have no tasks). */
static uint32_t index_epoch(const sb_sched *s, size_t index)
{
    return s->stream_first + (s->epoch_splits ? (uint32_t)(index / s->epoch_splits) : 0);
}

/* The epoch a task's rows belong to: its source split's, up the lineage. */
static uint32_t task_epoch(const sb_sched *s, size_t ti)
{
    for (int depth = 0; depth < 64; depth++) {
        const task *t = &s->tasks[ti];
        if (t->op == 0)
            return index_epoch(s, t->index);
        if (t->ninputs == 0)
            break;
        ti = s->parts[sc_task_inputs(t)[0]].producer;
    }
    return 0;
}

static int q_push(sb_sched *s, stream_q *q, size_t pi);

int sc_stream_push(sb_sched *s, size_t ti, size_t pi)
{
    s->parts[pi].consumer = NONE;
    if (s->stream_cache) { /* kept for the later epochs (sc_stream_advance queues it again) */
        if (GROW(s, s->cached, s->capcached, s->ncached + 1) != 0)
            return -1;
        s->cached[s->ncached++] = pi;
        s->parts[pi].uses = s->stream_epochs - s->stream_first;
    }
    return q_push(s, &s->sq[task_epoch(s, ti)], pi);
}

static int q_push(sb_sched *s, stream_q *q, size_t pi)
{
    if (q->head > 0 && q->head + q->len == q->cap) { /* compact before growing */
        memmove(q->q, q->q + q->head, q->len * sizeof *q->q);
        q->head = 0;
    }
    if (GROW(s, q->q, q->cap, q->head + q->len + 1) != 0)
        return -1;
    q->q[q->head + q->len++] = pi;
    return 0;
}

/* Everything of the epochs let in so far has been made: nothing runs, no partition waits for
 * a later op, no queued task but source tasks of later epochs. */
static int stream_made(const sb_sched *s)
{
    for (size_t k = 0; k < s->nops; k++) {
        const op *o = &s->ops[k];
        if (o->running > 0 || o->flen > 0 || (k > 0 && o->qlen > 0))
            return 0;
    }
    const op *o0 = &s->ops[0];
    for (size_t k = 0; k < o0->qlen; k++)
        if (index_epoch(s, s->tasks[o0->queue[o0->qhead + k]].index) <= s->stream_open)
            return 0;
    return 1;
}

/* Lets the next epochs in once everything before has been made. With stream_cache an epoch
 * let in is epoch 0's partitions queued again, in the epoch's order. */
void sc_stream_advance(sb_sched *s)
{
    while (s->stream && s->stream_open + 1 < s->stream_epochs && stream_made(s)) {
        uint32_t e = s->stream_open + 1;
        if (s->stream_cache) {
            stream_q *q = &s->sq[e];
            if (GROW(s, q->q, q->cap, s->ncached) != 0)
                return; /* out of memory (GROW sets s->oom): tried again on the next call */
            memcpy(q->q, s->cached, s->ncached * sizeof *q->q);
            q->head = 0;
            q->len = s->ncached;
            stream_shuffle(s->stream_shuffle, s->stream_seed, e, q->q, q->len, sizeof *q->q);
        }
        s->stream_open = e;
    }
}

/* Op 0's task ti belongs to an epoch not let in yet (op 0's tasks are tasks[0..), by index). */
int sc_stream_gated(const sb_sched *s, size_t ti)
{
    return s->stream && s->tasks[ti].op == 0 && s->epoch_splits > 0 &&
           index_epoch(s, s->tasks[ti].index) > s->stream_open;
}

/* Stream partitions hold part of the budget: the consumers will free it, so nothing is forced
 * past the budget meanwhile (a slow consumer holds the pipeline back). */
int sc_stream_holds(const sb_sched *s)
{
    if (!s->stream)
        return 0;
    if (s->stream_taken > 0)
        return 1;
    for (uint32_t e = 0; e <= s->stream_open && e < s->stream_epochs; e++)
        for (size_t k = 0; k < s->sq[e].len; k++)
            if (s->parts[s->sq[e].q[s->sq[e].head + k]].state == P_AVAILABLE)
                return 1;
    return 0;
}

int sc_stream_finished(const sb_sched *s)
{
    if (s->stream_taken > 0 || s->stream_open + 1 < s->stream_epochs || !stream_made(s))
        return 0;
    for (uint32_t e = 0; e < s->stream_epochs; e++)
        if (s->sq[e].len > 0)
            return 0;
    return 1;
}

int sb_sched_stream_take(sb_sched *s, uint32_t epoch, sb_sched_stream_part *out)
{
    if (!s->stream || epoch >= s->stream_epochs)
        return 0;
    stream_q *q = &s->sq[epoch];
    for (size_t k = 0; k < q->len; k++) {
        size_t pi = q->q[q->head + k];
        part *p = &s->parts[pi];
        if (p->state != P_AVAILABLE)
            continue; /* lost: its producer re-runs */
        memmove(q->q + q->head + 1, q->q + q->head, k * sizeof *q->q);
        q->head++;
        q->len--;
        if (!s->stream_cache) /* (kept ones stay NONE: needed, re-made whenever lost) */
            p->consumer = DEALT;
        s->stream_taken++;
        *out = (sb_sched_stream_part){.id = p->id,
                                      .address = s->workers[p->worker].address,
                                      .bytes = p->bytes,
                                      .rows = p->rows};
        return 1;
    }
    return 0;
}

int sb_sched_stream_done(sb_sched *s, uint32_t epoch)
{
    if (!s->stream || epoch >= s->stream_epochs)
        return -1;
    sc_stream_advance(s);
    if (s->sq[epoch].len > 0 || epoch > s->stream_open)
        return 0;
    return epoch < s->stream_open || stream_made(s);
}

/* stream_cache: an epoch is done with a kept partition; the last one releases it. */
static int cache_release(sb_sched *s, size_t pi, uint64_t now_ms)
{
    part *p = &s->parts[pi];
    if (p->state == P_RELEASED || p->uses == 0 || s->stream_taken == 0)
        return 0;
    if (--p->uses == 0) {
        sc_part_release(s, pi);
    } else if (p->state == P_AVAILABLE && !p->parked) {
        s->partition_bytes -= p->bytes; /* its worker's store keeps it (and may spill it) */
        p->parked = 1;
    }
    s->stream_taken--;
    s->last_progress_ms = now_ms;
    sc_check_finished(s);
    return 1;
}

void sb_sched_stream_starved(sb_sched *s)
{
    if (s->stream)
        s->stream_starved = 1;
}

int sb_sched_stream_release(sb_sched *s, const char *id, uint64_t now_ms)
{
    size_t pi;
    if (s->stream && s->stream_cache && sb_idmap_get(&s->part_ids, id, &pi))
        return cache_release(s, pi, now_ms);
    if (!s->stream || !sb_idmap_get(&s->part_ids, id, &pi) || s->parts[pi].consumer != DEALT ||
        s->parts[pi].state == P_RELEASED)
        return 0;
    sc_part_release(s, pi);
    s->stream_taken--;
    s->last_progress_ms = now_ms;
    sc_check_finished(s);
    return 1;
}

int sb_sched_stream_lost(sb_sched *s, const char *id)
{
    size_t pi;
    if (s->stream && s->stream_cache && sb_idmap_get(&s->part_ids, id, &pi)) {
        if (s->parts[pi].state == P_RELEASED || s->parts[pi].uses == 0)
            return 0;
        if (s->parts[pi].state != P_AVAILABLE) /* (mostly re-made already: worker_lost) */
            sc_recover_partition(s, pi, 0);
        return 1;
    }
    if (!s->stream || !sb_idmap_get(&s->part_ids, id, &pi) || s->parts[pi].consumer != DEALT ||
        s->parts[pi].state == P_RELEASED)
        return 0;
    part *p = &s->parts[pi];
    p->consumer = NONE;          /* needed again: a re-run's copy is kept (sc_record_part) */
    if (p->state != P_AVAILABLE) /* (still taken: the run has not succeeded) */
        sc_recover_partition(s, pi, 0);
    return 1;
}

int sb_sched_stream_get(sb_sched *s, const char *id, sb_sched_stream_part *out)
{
    size_t pi;
    if (!s->stream || !sb_idmap_get(&s->part_ids, id, &pi) || s->parts[pi].state != P_AVAILABLE ||
        (s->parts[pi].consumer != NONE && s->parts[pi].consumer != DEALT) ||
        (s->stream_cache && s->parts[pi].uses == 0))
        return 0;
    part *p = &s->parts[pi];
    if (!s->stream_cache)
        p->consumer = DEALT;
    *out = (sb_sched_stream_part){
        .id = p->id, .address = s->workers[p->worker].address, .bytes = p->bytes, .rows = p->rows};
    return 1;
}

uint32_t sb_sched_stream_epochs(const sb_sched *s)
{
    return s->stream ? s->stream_epochs : 0;
}

uint32_t sb_sched_stream_first(const sb_sched *s)
{
    return s->stream ? s->stream_first : 0;
}

size_t sb_sched_stream_waiting(const sb_sched *s, sb_sched_stream_holder *out, size_t max)
{
    size_t n = 0;
    for (uint32_t e = 0; s->stream && e < s->stream_epochs; e++)
        for (size_t k = 0; k < s->sq[e].len; k++) {
            const part *p = &s->parts[s->sq[e].q[s->sq[e].head + k]];
            if (p->state != P_AVAILABLE || p->worker == NONE)
                continue;
            const char *id = s->workers[p->worker].id;
            size_t i = 0;
            while (i < n && strcmp(out[i].worker_id, id) != 0)
                i++;
            if (i == n) {
                if (n == max)
                    continue;
                out[n++] = (sb_sched_stream_holder){.worker_id = id};
            }
            out[i].parts++;
            out[i].bytes += p->bytes;
        }
    return n;
}
