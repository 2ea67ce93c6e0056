/* dispatch.c — what runs next: an op's tasks formed from its input FIFO under the budget (tail
 * sizing, whole batches), the exchange's barrier, ready tasks found, early outputs' reserves,
 * a started task's view for its worker, and static mode's binding of slots to ops. */

#include "controller/sched/core/core.h"

int sc_op_finished(const sb_sched *s, size_t i)
{
    for (size_t k = 0; k <= i; k++) {
        const op *o = &s->ops[k];
        if (o->qlen > 0 || o->running > 0 || o->flen > 0)
            return 0;
    }
    return 1;
}

int sc_inputs_available(const sb_sched *s, const task *t)
{
    const uint32_t *ins = sc_task_inputs(t);
    for (size_t i = 0; i < t->ninputs; i++)
        if (s->parts[ins[i]].state != P_AVAILABLE)
            return 0;
    return 1;
}

uint64_t sc_estimate(const sb_sched *s, const op *o, uint64_t in_bytes, size_t opi)
{
    if (opi == s->nops - 1 && !s->stream)
        return 0; /* writes the sink: nothing stays in flight */
    double r = o->ratio > 0 ? o->ratio : 1.0;
    double e = r * (double)in_bytes;
    return e > 0 ? (uint64_t)e : 0;
}

/* Tail sizing (LB-BSP at the partition boundary). Once nothing more will come into op i
 * (everything upstream is done) and what waits is less than a full task per slot of its pool,
 * the task formed for worker w takes a share of the waiting bytes in proportion to w's measured
 * speed on the op (input bytes per ms, an EWMA over its successful tasks), so that every
 * worker's last task ends at about the same time instead of a slow worker taking a full-size
 * last task. Workers whose speed is not measured yet count at the mean of the others; with
 * fewer than two measured workers, or tail_sizing off, the target stands. */
static uint64_t task_target(const sb_sched *s, size_t i, size_t w)
{
    const op *o = &s->ops[i];
    if (s->tail_sizing_off || w == NONE || !sc_op_finished(s, i - 1))
        return o->target;
    double sum = 0, known = 0;
    uint64_t slots = 0, nknown = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (!x->alive || strcmp(x->pool, o->pool) != 0)
            continue;
        slots += x->slots;
        if (x->op_speed[i] > 0) {
            known += x->op_speed[i] * x->slots;
            nknown += x->slots;
        }
    }
    if (nknown < 2 || o->fifo_bytes >= o->target * slots)
        return o->target;
    double mean = known / (double)nknown;
    sum = known + mean * (double)(slots - nknown);
    double mine = s->workers[w].op_speed[i] > 0 ? s->workers[w].op_speed[i] : mean;
    double share = (double)o->fifo_bytes * mine / sum;
    uint64_t cap = share < 1 ? 1 : (uint64_t)share;
    return cap < o->target ? cap : o->target;
}

/* Inputs per task: each is a PartitionRef in the task's message (a poll's batch of tasks must
 * fit one reply) that the task fetches one by one. 64, as always, for an op without a batchSize;
 * an op with one takes up to a batch of one-row partitions (an image source's), at most
 * TASK_INPUTS_MAX. */
#define TASK_INPUTS_MIN 64
#define TASK_INPUTS_MAX 4096

/* What pick_inputs chose: n FIFO positions in s->pick_scratch, the entries it looked at. */
typedef struct {
    size_t n, scanned;
    uint64_t bytes, rows;
} picked;

/* Picks op i's available input partitions for a task, in FIFO order, stepping over lost ones:
 * up to `target` bytes, and with a batchSize (o->batch_rows: tasks of whole batches, so that
 * only a task's last op call is short) at least that many rows whatever their bytes, ending at
 * the last whole batch when there is one. preserveOrder: one input per task. */
static picked pick_inputs(sb_sched *s, size_t i, uint64_t target)
{
    op *o = &s->ops[i];
    uint64_t batch = s->preserve_order ? 0 : o->batch_rows;
    size_t cap = batch <= TASK_INPUTS_MIN  ? TASK_INPUTS_MIN
                 : batch < TASK_INPUTS_MAX ? (size_t)batch
                                           : TASK_INPUTS_MAX;
    picked r = {0}, whole = {0};
    if (GROW(s, s->pick_scratch, s->pick_cap, cap) != 0)
        return r;
    size_t *pick = s->pick_scratch;
    for (; r.scanned < o->flen && r.n < cap; r.scanned++) {
        part *p = &s->parts[o->fifo[o->fhead + r.scanned]];
        if (p->state != P_AVAILABLE)
            continue;
        if (r.n > 0 && r.rows >= batch && r.bytes + p->bytes > target)
            break;
        pick[r.n++] = r.scanned;
        r.bytes += p->bytes;
        r.rows += p->rows;
        if (batch > 0 && r.rows >= batch && r.rows % batch == 0)
            whole = r, whole.scanned++;
        if ((r.bytes >= target && r.rows >= batch) || s->preserve_order) {
            r.scanned++;
            break;
        }
    }
    /* past the last whole batch: those rows wait for the next task (or end the last one) */
    return whole.n > 0 && whole.n < r.n ? whole : r;
}

/* Forms a new task for op i > 0 from its input FIFO for worker w (NONE: any), or returns NONE.
 * Takes available partitions in FIFO order (pick_inputs: up to the target size, task_target,
 * and whole batches), stepping over lost ones (they stay queued until their producer has
 * re-run), so a lost partition never blocks the ones behind it. While upstream still produces,
 * a task waits for more small partitions (force 0: until half the target; with a batchSize,
 * until a batch is full, at force 2 too while upstream_can_start); force 2 (nothing else runs)
 * forms it at once, and once upstream is done the remainder goes out. */
/* Does an op before i have a task that can start within the budget? Then nothing running is
 * only a moment between tasks (the workers that run it have not polled yet), not a stall: a
 * short batch of op i is not formed at force 2, since that task brings more rows. Only when
 * the budget holds no room for upstream work does a short batch go out to free memory. */
static int upstream_can_start(sb_sched *s, size_t i)
{
    uint64_t used = s->partition_bytes + s->reserved_bytes;
    for (size_t k = 0; k < i; k++) {
        op *o = &s->ops[k];
        if (o->qlen == 0)
            continue;
        const task *t = &s->tasks[o->queue[o->qhead]];
        if (used + sc_estimate(s, o, t->in_bytes, k) <= s->budget)
            return 1;
    }
    return 0;
}

size_t sc_form_task(sb_sched *s, size_t i, int force, size_t w)
{
    op *o = &s->ops[i];
    if (o->xreduce)
        return sc_exchange_form(s, i);
    if (o->flen == 0)
        return NONE;
    picked pk = pick_inputs(s, i, task_target(s, i, w));
    size_t n = pk.n, scanned = pk.scanned, *pick = s->pick_scratch;
    uint64_t sum = pk.bytes;
    if (n == 0)
        return NONE;
    int more = scanned == o->flen && !s->preserve_order && !sc_op_finished(s, i - 1);
    uint64_t batch = o->batch_rows;
    if (more && batch > 0 && pk.rows < batch && (force < 2 || upstream_can_start(s, i)))
        return NONE;
    if (more && !force && (batch == 0 || pk.rows < batch) && sum < o->target / 2)
        return NONE;
    size_t ti = sc_task_new(s, (uint32_t)i, o->next_index);
    if (ti == NONE)
        return NONE;
    o->next_index++;
    task *t = &s->tasks[ti];
    uint32_t *ins = &t->in.one;
    if (n > 1 && (ins = t->in.many = malloc(n * sizeof *ins)) == NULL) {
        s->oom = 1;
        return NONE;
    }
    for (size_t k = 0; k < n; k++) {
        size_t pi = o->fifo[o->fhead + pick[k]];
        ins[k] = (uint32_t)pi;
        s->parts[pi].consumer = ti;
        t->in_bytes += s->parts[pi].bytes;
        t->in_rows += s->parts[pi].rows;
    }
    t->ninputs = (uint32_t)n;
    /* remove the picked entries, keeping the skipped (lost) ones in order at the front */
    size_t kept = 0;
    for (size_t k = 0, q = 0; k < scanned; k++) {
        if (q < n && pick[q] == k) {
            q++;
            continue;
        }
        o->fifo[o->fhead + kept++] = o->fifo[o->fhead + k];
    }
    memmove(o->fifo + o->fhead + kept, o->fifo + o->fhead + scanned,
            (o->flen - scanned) * sizeof *o->fifo);
    o->flen -= n;
    o->fifo_bytes -= sum;
    sc_queue_push(s, o, ti);
    return ti;
}

/* Queued task ti may run now: its inputs are there, a stream lets it in, and an open one has
 * its room (early.c). */
static int task_ready(const sb_sched *s, size_t ti)
{
    const task *t = &s->tasks[ti];
    return sc_inputs_available(s, t) && !sc_stream_gated(s, ti) &&
           (!sc_absorbing(s, ti) || sc_open_ready(s, t->op));
}

/* The first runnable queued task of op i (removed from the queue), or NONE. */
size_t sc_pop_ready(sb_sched *s, size_t i)
{
    op *o = &s->ops[i];
    if (i == 0)
        sc_stream_advance(s);
    for (size_t k = 0; k < o->qlen; k++) {
        size_t ti = o->queue[o->qhead + k];
        if (!task_ready(s, ti))
            continue;
        /* close the gap from the head side: O(k), and k is 0 unless inputs were lost */
        memmove(o->queue + o->qhead + 1, o->queue + o->qhead, k * sizeof *o->queue);
        o->qhead++;
        o->qlen--;
        s->tasks[ti].queued = 0;
        return ti;
    }
    return NONE;
}

size_t sc_peek_ready(sb_sched *s, size_t i, uint64_t *in_bytes)
{
    op *o = &s->ops[i];
    if (i == 0)
        sc_stream_advance(s);
    for (size_t k = 0; k < o->qlen; k++) {
        size_t ti = o->queue[o->qhead + k];
        if (task_ready(s, ti)) {
            *in_bytes = s->tasks[ti].in_bytes;
            return ti;
        }
    }
    return NONE;
}

int sc_op_eligible(sb_sched *s, const worker *wk, size_t i)
{
    const op *o = &s->ops[i];
    if (strcmp(o->pool, wk->pool) != 0)
        return 0;
    if (s->mode == SB_MODE_STAGED && i > 0 && !sc_op_finished(s, i - 1))
        return 0;
    if (s->mode == SB_MODE_STATIC && sc_static_full(s, wk, i))
        return 0;
    if (o->ratio == 0 && wk->op_running[i] > 0 && i + 1 < s->nops && s->mode == SB_MODE_STREAMING)
        return 0; /* ratio unknown: one probe per worker until measured */
    return 1;
}

/* Whether task t's running attempt may publish outputs early (sb_sched_publish): a first run of
 * an op that feeds another, where an errored task's published rows cannot reach the sink (no
 * maxErroredPartitions: the run fails) and the sink does not keep input order. */
int sc_early_safe(const sb_sched *s, const task *t)
{
    return !s->early_off && !t->made && t->op + 1 < s->nops && s->max_errored == 0 &&
           !s->preserve_order;
}

/* Early outputs. A task expected to write two or more partitions of at least EARLY_MIN_BYTES
 * publishes each as it is made (sc_fill_task_view: publish_early). Where no later op runs in its
 * pool, it is also charged one output partition at a time instead of its whole estimated output
 * (the op's largest partition so far; its whole estimate while none was made): it starts when
 * that fits, and with each output it publishes it asks for the next (sb_sched_publish: *wait),
 * making nothing until it gets it. So with a budget of a few partitions an expanding op's next
 * task starts while the one before still runs. A waiting task keeps its slot, which a later op
 * of the same pool may need to drain the budget: there it is charged its whole estimate as
 * before (a chain cpu -> gpu -> cpu ran 1.1-1.2x longer in the simulation with grants there).
 * When every running attempt waits, the most downstream one gets its grant past the budget (the
 * assign loop's pass 1 likewise treats waiting attempts as not running). Not in staged mode:
 * the next op starts only when this one has finished and the budget is not enforced, so a
 * grant would only hold the task back (microbenchmark at 4 MiB: 1.62x -> 2.11x). */
int sc_early_wanted(const sb_sched *s, const task *t, uint64_t est, size_t w)
{
    const op *o = &s->ops[t->op];
    return s->workers[w].early && sc_early_safe(s, t) && s->mode != SB_MODE_STAGED &&
           o->target >= EARLY_MIN_BYTES && est >= 2 * o->target;
}

/* Whether task t (sc_early_wanted) is charged one output at a time (see above). */
static int chunk_wanted(const sb_sched *s, const task *t, uint64_t est)
{
    const op *o = &s->ops[t->op];
    return o->max_part != 0 && o->max_part < est && !o->pool_later;
}

/* The reserve task t starts with on worker w: its estimate, or one grant (see above); *grants
 * and *chunked (either may be NULL) say whether it publishes early and is charged one output at
 * a time. The assign loop asks before choosing a task, sc_start_task when it starts one. */
uint64_t sc_start_reserve(const sb_sched *s, const task *t, uint64_t est, size_t w, int *grants,
                          int *chunked)
{
    int g = sc_early_wanted(s, t, est, w), c = g && chunk_wanted(s, t, est);
    if (grants != NULL)
        *grants = g;
    if (chunked != NULL)
        *chunked = c;
    return c ? s->ops[t->op].max_part : est;
}

/* Whether waiting task ti gets its grant past the budget: every running attempt waits and none
 * of them is of a later op. */
int sc_grant_forced(const sb_sched *s, size_t ti)
{
    if (s->running_total > s->waiting_total + !s->tasks[ti].waiting || sc_stream_holds(s))
        return 0;
    for (size_t w = 0; w < s->nworkers; w++)
        for (size_t k = 0; k < s->workers[w].nrun; k++) {
            const task *x = &s->tasks[s->workers[w].run[k]];
            if (x->waiting && x->op > s->tasks[ti].op)
                return 0;
        }
    return 1;
}

void sc_start_task(sb_sched *s, size_t ti, size_t w, uint64_t now_ms)
{
    s->stream_starved = 0; /* one task for a starved stream is enough: it brings new rows */
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    worker *wk = &s->workers[w];
    if (t->open) { /* what came since it was formed or handed back; all, when all came */
        sc_open_settle(s, t->op);
        t->open = (uint8_t)sc_absorbing(s, ti);
    }
    t->state = T_RUNNING;
    t->worker = w;
    t->started_ms = now_ms;
    uint64_t est = sc_estimate(s, o, t->in_bytes, t->op);
    int grants, chunked;
    t->reserved = sc_start_reserve(s, t, est, w, &grants, &chunked);
    t->grants = (uint8_t)grants;
    t->chunked = (uint8_t)chunked;
    t->pub_bytes = 0;
    sc_set_waiting(s, t, 0);
    s->reserved_bytes += t->reserved;
    sc_run_add(s, w, ti);
    wk->running++;
    wk->op_running[t->op]++;
    o->running++;
    o->attempts++;
    if (o->held) { /* the budget let it run: the spell of backpressure ends */
        o->backpressure_ms += now_ms > o->held_since_ms ? now_ms - o->held_since_ms : 0;
        o->held = 0;
    }
    s->running_total++;
    s->tasks_run++;
    s->last_progress_ms = now_ms;
    if (s->infer_schema && s->sink_schema == NULL && t->op == s->nops - 1 &&
        (s->infer_ti == NONE || s->tasks[s->infer_ti].state != T_RUNNING))
        s->infer_ti = ti; /* it infers the records schema; sc_sink_gated holds the others */
}

/* Whether the sink op's tasks wait: the run infers a records schema and a sink task is inferring
 * it now. Every part must be written by one schema, so the others start once it is reported
 * (sb_sched_sink_schema_set); if that task ends without one (failed, lost, no output), the next
 * sink task to start infers it instead. */
int sc_sink_gated(const sb_sched *s, size_t k)
{
    return k == s->nops - 1 && s->infer_schema && s->sink_schema == NULL && s->infer_ti != NONE &&
           s->tasks[s->infer_ti].state == T_RUNNING;
}

void sc_fill_task_view(sb_sched *s, size_t ti, int copy, sb_sched_task *out, size_t *scratch_used,
                       size_t *names_used)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    out->task_id =
        sc_task_name(s, t, s->names + *names_used, strlen(s->pipeline_id) + TASK_NAME_SUFFIX);
    *names_used += strlen(out->task_id) + 1;
    out->op = t->op;
    out->index = t->index;
    out->attempt = copy ? t->spec_attempt : t->attempt;
    out->stages = o->sp;
    out->nstages = o->nstages + o->pushed;
    out->split = t->op == 0 ? s->splits[t->index] : NULL;
    out->writes_sink = t->op == s->nops - 1 && !s->stream;
    out->sink_schema = out->writes_sink ? s->sink_schema : NULL;
    out->infer_sink_schema = out->writes_sink && s->sink_schema == NULL && ti == s->infer_ti;
    out->target_bytes = o->target;
    /* early outputs (sc_start_task, sc_early_wanted): not for a speculative copy */
    out->publish_early = !copy && t->grants;
    out->inputs_open = t->open;
    out->ninputs = t->ninputs;
    out->inputs = NULL;
    if (t->ninputs > 0) {
        sb_sched_input *in = s->in_scratch + *scratch_used;
        const uint32_t *ins = sc_task_inputs(t);
        for (size_t k = 0; k < t->ninputs; k++) {
            part *p = &s->parts[ins[k]];
            in[k].id = p->id;
            in[k].bytes = p->bytes;
            in[k].worker_id = s->workers[p->worker].id;
            in[k].address = s->workers[p->worker].address;
        }
        out->inputs = in;
        *scratch_used += t->ninputs;
    }
}

/* The most downstream op after the first that can run now — a queued task whose inputs are
 * all there, or an available partition waiting for a task — or 0 if none: then that work goes
 * first (it consumes partitions), and with nothing running only it is forced past the budget
 * (sb_sched_assign, pass 1). Work whose inputs are lost does not count: their producers must be
 * allowed to re-run (also past a full budget), or the pipeline would wait forever. Work for a
 * pool without a worker does count: admitting more input would only grow memory (the watchdog
 * reports the missing worker). */
size_t sc_downstream_work(const sb_sched *s)
{
    for (size_t i = s->nops; i-- > 1;) {
        const op *o = &s->ops[i];
        /* its map outputs wait for the barrier (again, after a loss in the reduce phase): no
         * task forms from them, the map op must go on */
        int barrier = o->xreduce && !sc_exchange_ready(s, i);
        if (barrier && o->qlen == 0)
            continue;
        for (size_t k = 0; k < o->qlen; k++) {
            const task *t = &s->tasks[o->queue[o->qhead + k]];
            if (sc_inputs_available(s, t) &&
                (!sc_absorbing(s, (size_t)(t - s->tasks)) || sc_open_ready(s, i)))
                return i;
        }
        if (barrier)
            continue;
        for (size_t k = 0; k < o->flen; k++)
            if (s->parts[o->fifo[o->fhead + k]].state == P_AVAILABLE)
                return i;
    }
    return 0;
}

/* Static mode. Every slot of a pool is bound to one slot group of the pool's ops, and a task of
 * an op starts only in a free slot of its group: the fixed stage-to-slot placement of a classic
 * stream system. With S slots for the pool's n ops there are G = min(S, n) groups: the pool's
 * p-th op is in group p mod G, and its j-th slot (live workers in index order, slot by slot;
 * drained workers left out while the pool has a healthy one) is bound to group j mod G. So with
 * S >= n every op has slots of its own (S/n each, the first S mod n ops one more), and with
 * S < n ops share slots round robin (op p with ops p+G, p+2G, ...; downstream first, as
 * always), so no op is left without a slot while its pool has one. The binding is computed
 * again whenever the pool's slots change — a worker joins (a respawned or replacement worker
 * has a new index), is lost, or is drained — and tasks already running keep their slot until
 * they end. */
void sc_static_bind(sb_sched *s, const char *pool)
{
    if (s->mode != SB_MODE_STATIC)
        return;
    uint32_t n = 0;
    for (size_t i = 0; i < s->nops; i++)
        if (strcmp(s->ops[i].pool, pool) == 0)
            s->ops[i].group = n++; /* its index in the pool, for now */
    int healthy = sc_pool_healthy(s, pool) > 0;
    uint64_t nslots = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (x->alive && (!healthy || !x->draining) && strcmp(x->pool, pool) == 0)
            nslots += x->slots;
    }
    uint32_t groups = nslots < n ? (uint32_t)nslots : n;
    for (size_t i = 0; i < s->nops; i++)
        if (strcmp(s->ops[i].pool, pool) == 0)
            s->ops[i].group = groups > 0 ? s->ops[i].group % groups : 0;
    uint64_t j = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        worker *x = &s->workers[k];
        if (x->pool == NULL || x->op_slots == NULL || strcmp(x->pool, pool) != 0)
            continue; /* (an entry whose registration ran out of memory) */
        for (size_t i = 0; i < s->nops; i++)
            if (strcmp(s->ops[i].pool, pool) == 0)
                x->op_slots[i] = 0;
        if (!x->alive || (healthy && x->draining) || groups == 0)
            continue;
        for (uint32_t q = 0; q < x->slots; q++, j++)
            for (size_t i = 0; i < s->nops; i++)
                if (strcmp(s->ops[i].pool, pool) == 0 && s->ops[i].group == j % groups)
                    x->op_slots[i]++;
    }
}

/* Static mode: whether the worker's slots bound to op i's group are all taken (by tasks of any
 * op of the group). */
int sc_static_full(const sb_sched *s, const worker *wk, size_t i)
{
    uint32_t busy = 0;
    for (size_t k = 0; k < s->nops; k++)
        if (s->ops[k].group == s->ops[i].group && strcmp(s->ops[k].pool, s->ops[i].pool) == 0)
            busy += wk->op_running[k];
    return busy >= wk->op_slots[i];
}
