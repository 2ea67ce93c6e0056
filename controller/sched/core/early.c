/* early.c — early reduces: a reduce task started in the map op's tail and fed its bucket's map
 * outputs as their map tasks finish (sb_sched_more_inputs); the exchange's task forming. */

#include "controller/sched/core/core.h"

/* ---- exchange: the reduce half of an all-to-all stage (exchange.h) -------------------------- */

/* Op i (a reduce half) may form its tasks: the map op and every op before it are finished (a
 * barrier: a bucket is complete only then) and no map output waits for its producer's re-run. */
int sc_exchange_ready(const sb_sched *s, size_t i)
{
    const op *o = &s->ops[i];
    if (!sc_op_finished(s, i - 1))
        return 0;
    for (size_t k = 0; k < o->flen; k++)
        if (s->parts[o->fifo[o->fhead + k]].state != P_AVAILABLE)
            return 0;
    return 1;
}

typedef struct {
    uint64_t key; /* the producing map task's index */
    size_t pos;   /* the partition's position in the FIFO */
} xpick;

static int xpick_cmp(const void *a, const void *b)
{
    const xpick *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : (x->pos > y->pos) - (x->pos < y->pos);
}

/* ---- early reduces ----------------------------------------------------------------------------
 * A reduce task of an op that allows it (o->xopen: exchange.h, sb_exchange_early) may start
 * before the barrier, once every map task still to end is running and nothing else upstream
 * waits (early_room): a slot that would idle in the map op's tail then takes it with the map
 * outputs of its bucket made so far, and the task is open: its worker, having read them, asks
 * for the rest (sb_sched_more_inputs), which the task absorbs as their map tasks finish, and it
 * closes once the map op has finished and no output of its bucket waits. Only then may its ops
 * finish. Why only in the tail: an open task holds its slot while it waits, and with reduce
 * tasks started at the first map output (Hadoop's "slowstart" of 5%) the reduces fill the slots
 * the remaining map tasks need. Should map work wait for a slot again later (a map task re-run
 * after a lost worker), an open task of the same pool is handed back at its next ask (it is
 * queued again, its attempt stopped) and starts again only when there is room. Inputs are taken
 * in the order their map tasks finish (in map task order among those taken together), so only ops
 * whose output does not depend on that order start early. An open task is never copied
 * (speculation) nor batched. */

/* A map output op i's open task may take now: available, and its map task finished (an early
 * output of a running map task may be made again if that attempt fails). */
static int part_ready(const sb_sched *s, const part *p)
{
    return p->state == P_AVAILABLE && s->tasks[p->producer].state == T_DONE;
}

/* Op i's reduce tasks may start early: it allows it, and upstream only map tasks of op i - 1 are
 * left, all running (none queued, no input waiting for one, every op before finished). */
static int early_room(const sb_sched *s, size_t i)
{
    const op *o = &s->ops[i], *m = &s->ops[i - 1];
    if (!o->xopen || m->running == 0 || m->qlen > 0 || m->flen > 0)
        return 0;
    return i < 2 || sc_op_finished(s, i - 2);
}

/* Whether op i's open task may be handed out now (early_room, or the barrier passed: the task
 * then closes as it starts). */
int sc_open_ready(const sb_sched *s, size_t i)
{
    return early_room(s, i) || sc_exchange_ready(s, i);
}

/* Free slots of the live, not draining workers of a pool. */
static uint64_t pool_free(const sb_sched *s, const char *pool)
{
    uint64_t n = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (x->alive && !x->draining && strcmp(x->pool, pool) == 0 && x->slots > x->running)
            n += x->slots - x->running;
    }
    return n;
}

/* Work upstream of op i in its pool waits for a slot and none is free: its open tasks give
 * theirs back. */
static int upstream_starved(const sb_sched *s, size_t i)
{
    for (size_t k = 0; k < i; k++) {
        const op *o = &s->ops[k];
        if ((o->qlen > 0 || o->flen > 0) && strcmp(o->pool, s->ops[i].pool) == 0)
            return pool_free(s, o->pool) == 0;
    }
    return 0;
}

/* Appends op i's FIFO entries at pk[0..n) (in pk's order) to task ti's inputs. The caller
 * removes them from the FIFO (fifo_drop). -1 out of memory (nothing changed). */
static int task_take(sb_sched *s, size_t ti, const xpick *pk, size_t n)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    size_t have = t->ninputs, total = have + n;
    if (n == 0)
        return 0;
    if (total > 1) {
        uint32_t *many = malloc(total * sizeof *many);
        if (many == NULL)
            return -1;
        if (have > 0)
            memcpy(many, sc_task_inputs(t), have * sizeof *many);
        if (have > 1)
            free(t->in.many);
        t->in.many = many;
    }
    uint32_t *ins = total > 1 ? t->in.many : &t->in.one;
    uint64_t bytes = 0;
    for (size_t k = 0; k < n; k++) {
        size_t pi = o->fifo[o->fhead + pk[k].pos];
        ins[have + k] = (uint32_t)pi;
        s->parts[pi].consumer = ti;
        bytes += s->parts[pi].bytes;
        t->in_rows += s->parts[pi].rows;
    }
    t->in_bytes += bytes;
    t->ninputs = (uint32_t)total;
    o->fifo_bytes -= bytes;
    if (t->state == T_RUNNING && have > 0 && !t->chunked) { /* its output grows with them */
        uint64_t e = sc_estimate(s, o, bytes, t->op);
        t->reserved += e;
        s->reserved_bytes += e;
    }
    return 0;
}

/* Removes from op o's FIFO the entries a task took (their consumer set), the others kept in
 * order. */
static void fifo_drop(sb_sched *s, op *o)
{
    size_t kept = 0;
    for (size_t k = 0; k < o->flen; k++) {
        size_t pi = o->fifo[o->fhead + k];
        if (s->parts[pi].consumer == NONE)
            o->fifo[o->fhead + kept++] = pi;
    }
    o->flen = kept;
}

/* The bucket of reduce task t: its first input's sequence number (a map output p<b>). */
static uint64_t task_bucket(const sb_sched *s, const task *t)
{
    return sc_id_seq(s->parts[sc_task_inputs(t)[0]].id);
}

/* Open task ti's bucket may still get map outputs (it is in its op's xopens). */
int sc_absorbing(const sb_sched *s, size_t ti)
{
    const task *t = &s->tasks[ti];
    const op *o = &s->ops[t->op];
    return t->open && o->xbucket != NULL && o->xbucket[task_bucket(s, t)] == ti;
}

/* Every open task of op i takes the finished map outputs of its bucket, and closes when none can
 * come: one pass over the FIFO, and none while nothing changed since the last (s->gen: a report
 * accepted, a worker gone or come). Out of memory: s->oom. */
void sc_open_settle(sb_sched *s, size_t i)
{
    op *o = &s->ops[i];
    if (o->nxopens == 0 || o->xsettled == s->gen)
        return;
    xpick *pk = malloc((o->flen + 1) * sizeof *pk);
    uint32_t *left = calloc(o->xbuckets, sizeof *left); /* per bucket: outputs still to come */
    if (pk == NULL || left == NULL) {
        free(pk);
        free(left);
        s->oom = 1;
        return;
    }
    size_t n = 0;
    for (size_t k = 0; k < o->flen; k++) {
        const part *p = &s->parts[o->fifo[o->fhead + k]];
        uint64_t b = sc_id_seq(p->id);
        if (b >= o->xbuckets || o->xbucket[b] == NO_TASK)
            continue;
        if (part_ready(s, p)) /* key: its task, then its map task's index */
            pk[n++] = (xpick){((uint64_t)o->xbucket[b] << 32) | s->tasks[p->producer].index, k};
        else
            left[b]++;
    }
    qsort(pk, n, sizeof *pk, xpick_cmp);
    for (size_t a = 0, z; a < n; a = z) {
        for (z = a; z < n && pk[z].key >> 32 == pk[a].key >> 32; z++)
            ;
        if (task_take(s, (size_t)(pk[a].key >> 32), pk + a, z - a) != 0)
            s->oom = 1;
    }
    fifo_drop(s, o);
    int closing = sc_op_finished(s, i - 1);
    for (size_t k = o->nxopens; k-- > 0;) { /* (each task is told at its next ask) */
        uint64_t b = task_bucket(s, &s->tasks[o->xopens[k]]);
        if (!closing || left[b] > 0)
            continue;
        o->xbucket[b] = NO_TASK;
        o->xopens[k] = o->xopens[--o->nxopens];
    }
    o->xsettled = s->gen;
    free(pk);
    free(left);
}

/* The task of the lowest bucket still waiting: every map output of that bucket (a map task's
 * output p<b> is bucket b), in map task order, so a reduce task reads the same rows in the same
 * order on every run of the same map tasks. NONE before the barrier or when none waits. Before
 * the barrier, where early_room allows, an open task instead: the bucket's finished map outputs
 * so far ("Early reduces"). A bucket with an open task gets no other. */
size_t sc_exchange_form(sb_sched *s, size_t i)
{
    op *o = &s->ops[i];
    sc_open_settle(s, i);
    if (o->flen == 0)
        return NONE;
    int early = !sc_exchange_ready(s, i);
    if (early && !early_room(s, i))
        return NONE;
    uint64_t b = UINT64_MAX;
    for (size_t k = 0; k < o->flen; k++) {
        const part *p = &s->parts[o->fifo[o->fhead + k]];
        uint64_t seq = sc_id_seq(p->id);
        if (seq >= o->xbuckets) {
            sc_set_failure(s,
                           "exchange stage %s: map output %s is not one of its %" PRIu32 " buckets",
                           o->name, p->id, o->xbuckets);
            return NONE;
        }
        if (seq < b && (!early || part_ready(s, p)) &&
            (o->xbucket == NULL || o->xbucket[seq] == NO_TASK))
            b = seq;
    }
    if (b == UINT64_MAX)
        return NONE; /* (early: no map task finished yet) */
    if (early && o->xbucket == NULL) {
        if ((o->xbucket = malloc(o->xbuckets * sizeof *o->xbucket)) == NULL) {
            s->oom = 1;
            return NONE;
        }
        for (uint32_t k = 0; k < o->xbuckets; k++)
            o->xbucket[k] = NO_TASK;
    }
    xpick *pk = malloc(o->flen * sizeof *pk);
    size_t ti = pk != NULL ? sc_task_new(s, (uint32_t)i, o->next_index) : NONE;
    if (ti == NONE || (early && GROW(s, o->xopens, o->capxopens, o->nxopens + 1) != 0)) {
        free(pk);
        s->oom = 1;
        return NONE;
    }
    o->next_index++;
    size_t n = 0;
    for (size_t k = 0; k < o->flen; k++) {
        const part *p = &s->parts[o->fifo[o->fhead + k]];
        if (sc_id_seq(p->id) == b && (!early || part_ready(s, p)))
            pk[n++] = (xpick){s->tasks[p->producer].index, k};
    }
    qsort(pk, n, sizeof *pk, xpick_cmp);
    int rc = task_take(s, ti, pk, n);
    free(pk);
    if (rc != 0) {
        s->oom = 1;
        return NONE;
    }
    fifo_drop(s, o);
    if (early) {
        s->tasks[ti].open = 1;
        o->xopens[o->nxopens++] = (uint32_t)ti;
        o->xbucket[b] = (uint32_t)ti;
        o->xsettled = s->gen - 1; /* its bucket's other outputs: taken at the next settle */
        s->early_reduces++;
    }
    sc_queue_push(s, o, ti);
    return ti;
}

int sb_sched_more_inputs(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                         uint32_t have, uint64_t now_ms, const sb_sched_input **more, size_t *nmore,
                         int *closed, sb_err *err)
{
    *more = NULL;
    *nmore = 0;
    *closed = 0;
    size_t w, ti;
    int found = sc_attempt_find(s, worker_id, task_id, attempt, "inputs asked by", &w, &ti, err);
    if (found <= 0)
        return found;
    task *t = &s->tasks[ti];
    if (have > t->ninputs) { /* (a worker's bug: the attempt cannot go on) */
        sc_requeue_task(s, ti, 0);
        return 0;
    }
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    if (sc_absorbing(s, ti) && !sc_open_ready(s, t->op) && upstream_starved(s, t->op)) {
        sc_requeue_task(s, ti, 0); /* map work needs its slot: it starts again later */
        return 0;
    }
    if (t->open)
        sc_open_settle(s, t->op);
    size_t n = t->ninputs - have;
    if (GROW(s, s->more_scratch, s->more_scratch_cap, n + 1) != 0)
        return sb_err_set(err, "scheduler: out of memory");
    const uint32_t *ins = sc_task_inputs(t);
    for (size_t k = 0; k < n; k++) {
        const part *p = &s->parts[ins[have + k]];
        size_t holder = p->worker != NONE ? p->worker : w; /* (lost: its fetch reports it) */
        s->more_scratch[k] =
            (sb_sched_input){p->id, s->workers[holder].address, s->workers[holder].id, p->bytes};
    }
    *more = s->more_scratch;
    *nmore = n;
    *closed = !sc_absorbing(s, ti);
    if (*closed)
        t->open = 0; /* told: it may finish once it has read them */
    return 1;
}
