/* poll.c — a worker's poll: sb_sched_assign and sb_sched_assign_batch choose its tasks (downstream
 * first, under the budget, copies where they pay), several at once where tasks are short. */

#include "controller/sched/core/core.h"

/* ---- batched polls ----------------------------------------------------------------------
 *
 * A poll and its reply cost the controller and the worker far more than a short task itself
 * (an empty task on a tiny file: ~0.1 ms of work against ~0.2 ms of RPC, thread hand-offs and
 * wake-ups). A slot that asks for a batch (sb_sched_assign_batch) gets, after its first task,
 * more ready tasks of an op whose tasks are short — measured: at least BATCH_MIN_TIMED done, a
 * mean wall time (the workers' own report, so that queueing in a batch does not count) under
 * BATCH_SHORT_MS — about BATCH_WORK_MS of work in all; it runs them one after another and
 * reports them on its next poll. Only tasks already queued are batched, and only while the
 * op's queue holds a whole batch more: the tail goes out one task at a time, so a batch can
 * leave a slot at most ~BATCH_WORK_MS behind the others. Tasks of a batch are running, reserve
 * their output in the budget and are recovered like any other; their durations (op_speed,
 * the speculation bar, op_svc) are the reported wall times, not the time since assignment.
 * A worker lost while it holds a batch charges none of its tasks a retry (which one killed it
 * is not known: charging all would error the neighbours of a task that crashes its worker);
 * each of them runs alone from then on (task.solo), where a death is charged as always. */
#define BATCH_SHORT_MS 5.0
#define BATCH_WORK_MS 10.0
#define BATCH_MIN_TIMED 4

/* How many of op k's tasks one slot takes in a poll that allows `batch`: 1 unless they are
 * short. */
static size_t batch_len(const sb_sched *s, size_t k, size_t batch)
{
    const op *o = &s->ops[k];
    if (batch <= 1 || s->mode != SB_MODE_STREAMING || o->timed < BATCH_MIN_TIMED ||
        (o->ratio == 0 && k + 1 < s->nops))
        return 1;
    double mean = o->task_seconds * 1000.0 / (double)o->timed;
    if (mean >= BATCH_SHORT_MS)
        return 1;
    double n = BATCH_WORK_MS / (mean > 0.01 ? mean : 0.01);
    return n >= (double)batch ? batch : n < 1 ? 1 : (size_t)n;
}

size_t sb_sched_assign(sb_sched *s, const char *worker_id, size_t max, uint64_t now_ms,
                       sb_sched_task *out)
{
    return sb_sched_assign_batch(s, worker_id, max, 1, now_ms, out);
}

/* The op whose next task worker w takes now, or NONE: the most downstream op with a ready
 * task (or one it can form) that fits the budget, else, when nothing runs anywhere, one task
 * past it. extra: past the worker's free slots, only a batch of short queued tasks; got tasks
 * are chosen so far of max slots, batch per slot. */
static size_t assign_pick(sb_sched *s, size_t w, int extra, size_t got, size_t max, size_t batch,
                          uint64_t now_ms)
{
    worker *wk = &s->workers[w];
    size_t pick = NONE;
    uint64_t in_flight = s->partition_bytes + s->reserved_bytes;
    for (size_t pass = 0; pass < 2 && pick == NONE; pass++) {
        /* pass 0: within budget; pass 1: nothing runs anywhere, take the most downstream —
         * only the most downstream op with work when there is work after the first op: an
         * expanding op's task may not fit a budget its own inputs fill (static mode: another
         * slot's upstream task took the room), and nothing else would ever free it. One task
         * alone, past the budget by at most its output (docs/testing.md, chaos 8869762-56) */
        size_t only = 0;
        if (pass == 1 && (s->running_total > s->waiting_total || extra ||
                          (sc_stream_holds(s) && !s->stream_starved)))
            break; /* (a stream's consumers free the budget: nothing is forced past it,
                    * unless they cannot: sb_sched_stream_starved) */
        if (pass == 1)
            only = sc_downstream_work(s);
        for (size_t k = s->nops; k-- > 0 && pick == NONE;) {
            if (!sc_op_eligible(s, wk, k) || (only > 0 && k != only) || sc_sink_gated(s, k))
                continue;
            if (extra) { /* a batch: short tasks already queued, a batch's worth left */
                size_t n = batch_len(s, k, batch);
                if (n <= 1 || got >= max * n || s->ops[k].qlen < n)
                    continue;
            }
            uint64_t in_bytes = 0;
            size_t ti = sc_peek_ready(s, k, &in_bytes);
            if (ti == NONE && k > 0 && !extra)
                ti = sc_form_task(s, k,
                                  pass == 1 || s->running_total == 0 ? 2
                                  : s->mode != SB_MODE_STREAMING     ? 1
                                                                     : 0,
                                  w);
            if (ti == NONE || (extra && (s->tasks[ti].solo || s->tasks[ti].open)))
                continue;
            in_bytes = s->tasks[ti].in_bytes;
            uint64_t est = sc_start_reserve(s, &s->tasks[ti],
                                            sc_estimate(s, &s->ops[k], in_bytes, k), w, NULL, NULL);
            /* a downstream task frees its inputs when it finishes: only growth counts */
            uint64_t grow = k == 0 ? est : est > in_bytes ? est - in_bytes : 0;
            /* a second probe of an unmeasured op (another already runs): its whole output
             * counts as growth, so probes beyond the first fit the budget at ratio 2 */
            if (s->ops[k].ratio == 0 && s->ops[k].running > 0 && k + 1 < s->nops && grow < in_bytes)
                grow = in_bytes;
            if (pass == 0 && s->mode != SB_MODE_STAGED && grow > 0 &&
                in_flight + grow > s->budget) {
                op *ho = &s->ops[k]; /* a task ready, held back by the budget */
                if (!ho->held) {
                    ho->held = 1;
                    ho->held_since_ms = now_ms;
                }
                continue;
            }
            if (pass == 0 && sc_eft_defer(s, w, k, ti, now_ms))
                continue; /* a faster worker of the pool finishes it sooner */
            pick = k;
        }
    }
    return pick;
}

size_t sb_sched_assign_batch(sb_sched *s, const char *worker_id, size_t max, size_t batch,
                             uint64_t now_ms, sb_sched_task *out)
{
    size_t w = sc_worker_find(s, worker_id);
    if (w == NONE || !s->workers[w].alive || s->state != SB_SCHED_RUNNING)
        return 0;
    worker *wk = &s->workers[w];
    if (wk->draining && sc_pool_healthy(s, wk->pool) > 0)
        return 0; /* drained: no new work while a healthy worker of its pool is there */
    size_t got = 0;
    size_t chosen[256] = {0};
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    if (max > 256)
        max = 256;
    if (batch < 1)
        batch = 1;
    size_t limit = max * batch > 256 ? 256 : max * batch;
    int solo = 0; /* a task that must run alone was given: no batch */
    while (got < limit) {
        /* past the free slots: only more short tasks, in a batch */
        int extra = got >= max || wk->running >= wk->slots;
        if (extra && (batch <= 1 || got == 0 || solo))
            break;
        size_t pick = assign_pick(s, w, extra, got, max, batch, now_ms);
        if (pick == NONE)
            break;
        size_t ti = sc_pop_ready(s, pick);
        if (ti == NONE)
            break;
        sc_start_task(s, ti, w, now_ms);
        solo |= s->tasks[ti].solo;
        chosen[got++] = ti;
    }
    for (size_t i = 0; i < got; i++) /* all reported together, on the next poll */
        s->tasks[chosen[i]].batched = got > max;
    if (got > max)
        s->tasks_batched += got - max;
    size_t copy = NONE; /* nothing else to do here: a copy of a straggler */
    if (got == 0 && max > 0 && wk->running < wk->slots && s->mode == SB_MODE_STREAMING &&
        (copy = sc_spec_candidate(s, w, now_ms)) != NONE && !sc_start_copy(s, copy, w, now_ms))
        copy = NONE;
    size_t need = copy != NONE ? s->tasks[copy].ninputs : 0;
    for (size_t i = 0; i < got; i++)
        need += s->tasks[chosen[i]].ninputs;
    size_t name_len = strlen(s->pipeline_id) + TASK_NAME_SUFFIX;
    if (GROW(s, s->in_scratch, s->in_scratch_cap, need + 1) != 0 ||
        GROW(s, s->names, s->names_cap, (got + 1) * name_len) != 0) {
        for (size_t i = 0; i < got; i++)
            sc_requeue_task(s, chosen[i], 0);
        if (copy != NONE)
            sc_drop_copy(s, &s->tasks[copy]);
        return 0;
    }
    size_t used = 0, names_used = 0;
    for (size_t i = 0; i < got; i++)
        sc_fill_task_view(s, chosen[i], 0, &out[i], &used, &names_used);
    if (copy != NONE)
        sc_fill_task_view(s, copy, 1, &out[got++], &used, &names_used);
    return got;
}
