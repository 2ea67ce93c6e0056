/* stragglers.c — slow workers and slow tasks: sick workers drained, speculative copies of
 * stragglers, and the earliest-finish rule of a pool whose slots share one accelerator. */

#include "controller/sched/core/core.h"

/* Draining sick workers. A worker persistently far slower than the rest of its pool — a sick
 * node: throttled, stolen CPU, a failing disk — is drained: it gets no new task (unless it is
 * the last of its pool that is not draining), its running tasks finish or are copied (see
 * "Speculative copies"), and once it holds nothing still needed (sb_sched_worker_removable) the
 * controller retires it and the backend starts a replacement. The rule, checked at each of its
 * successful tasks: the task's speed (input bytes per ms, by the scheduler's clock) is below
 * 1/DRAIN_SLOWER of the median speed of the other live, non-draining workers of its pool on that
 * op (their EWMAs); DRAIN_MIN_TASKS such tasks in a row (a task at normal speed resets the run)
 * spanning at least DRAIN_MIN_MS; the pool has at least two workers that are not draining; and
 * the op has work left for a full round of the pool's slots (queued tasks, waiting input, or an
 * upstream still producing) — in the tail, tail sizing and copies do better than a new worker
 * that first has to start. A cheap pre-filter (the task slower than half the op's mean speed)
 * keeps the O(workers) median off the path of healthy completions. */
#define DRAIN_SLOWER 3
#define DRAIN_MIN_TASKS 3
#define DRAIN_MIN_MS 3000

/* Live workers of the pool that are not draining. */
size_t sc_pool_healthy(const sb_sched *s, const char *pool)
{
    size_t n = 0;
    for (size_t k = 0; k < s->nworkers; k++)
        n +=
            s->workers[k].alive && !s->workers[k].draining && strcmp(s->workers[k].pool, pool) == 0;
    return n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void sc_drain_check(sb_sched *s, size_t w, size_t i, double v, uint64_t started_ms, uint64_t now_ms)
{
    worker *wk = &s->workers[w];
    op *o = &s->ops[i];
    double avg = o->speed_avg;
    o->speed_avg = avg > 0 ? 0.9 * avg + 0.1 * v : v;
    if (s->drain_off || wk->draining || !wk->alive)
        return;
    if (avg <= 0 || v * 2 >= avg) { /* not far slower than the op's mean: healthy */
        wk->slow_n = 0;
        return;
    }
    double *sp = malloc((s->nworkers + 1) * sizeof *sp);
    if (sp == NULL)
        return;
    size_t n = 0, healthy = 0;
    uint64_t slots = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (!x->alive || x->draining || strcmp(x->pool, wk->pool) != 0)
            continue;
        healthy++;
        slots += x->slots;
        if (k != w && x->op_speed[i] > 0)
            sp[n++] = x->op_speed[i];
    }
    double median = 0;
    if (n > 0) {
        qsort(sp, n, sizeof *sp, cmp_double);
        median = n % 2 ? sp[n / 2] : (sp[n / 2 - 1] + sp[n / 2]) / 2;
    }
    free(sp);
    if (n == 0)
        return; /* nothing to compare with yet */
    if (v * DRAIN_SLOWER >= median) {
        wk->slow_n = 0;
        return;
    }
    if (wk->slow_n++ == 0)
        wk->slow_since_ms = started_ms;
    if (wk->slow_n < DRAIN_MIN_TASKS || now_ms < wk->slow_since_ms + DRAIN_MIN_MS || healthy < 2)
        return;
    uint64_t left = o->qlen + (o->target ? (o->fifo_bytes + o->target - 1) / o->target : o->flen);
    if (i > 0 && !sc_op_finished(s, i - 1))
        left += slots; /* upstream still producing */
    if (left < slots)
        return;
    if (GROW(s, s->drain_notes, s->capdrain_notes, s->ndrain_notes + 1) != 0)
        return;
    s->drain_notes[s->ndrain_notes++] = w;
    wk->draining = 1;
    s->ndraining++;
    sc_static_bind(s, wk->pool); /* it takes no new task: the healthy workers cover every op */
    wk->drain_op = (uint32_t)i;
    wk->drain_speed = v * 1000.0;
    wk->drain_median = median * 1000.0;
    s->workers_drained++;
}

/* Speculative copies. A worker of the pool that asks for work and gets none may run a copy
 * of the op's slowest running task when the op is in its tail (nothing queued or waiting for
 * it, everything upstream done), at least SPEC_MIN_DONE of its tasks succeeded, and that task
 * has run SPEC_FACTOR times their mean duration and at least SPEC_MIN_MS — or sooner, as soon as
 * what the task has left is more than SPEC_GAIN times what the whole task would take at the
 * asking worker's speed (a task on a worker 4 times slower is copied at once). What it has left
 * (spec_left): at its worker's measured speed on the op (the EWMAs of tail sizing), or, when its
 * worker has finished none of the op's tasks, at the op's mean speed over every worker; a task
 * already late by d at that speed is expected to take d more (the rule of sc_eft_defer), so a slow
 * attempt is judged whether or not its worker ever finished a task. Outside the tail, the tasks
 * of a drained (sick) worker are copied after SPEC_MIN_MS and those of a suspect (silent) worker
 * at once. The copy runs on another worker, with the task's inputs still there; the task with the
 * most to gain goes first. The copy gets an attempt number of its own; the first attempt to
 * finish is the task's result, the other one's completion is stale and its outputs are released.
 * Ops that write the sink are copied too: workers write sink parts under the attempt's staged
 * name and publish them only once their report is accepted (lib/io/sink.h), so the loser's parts
 * are never visible and the manifest lists one part per id. One copy per task; a copy counts
 * against the memory budget like a task. */
#define SPEC_FACTOR 2
#define SPEC_MIN_DONE 3
#define SPEC_MIN_MS 1000
#define SPEC_SCAN_MS 100
#define SPEC_GAIN 1.5

/* Whether a worker of the pool other than w is draining or suspect (its tasks may be copied any
 * time). */
static int pool_draining(const sb_sched *s, const char *pool, size_t w)
{
    for (size_t k = 0; k < s->nworkers; k++)
        if (k != w && s->workers[k].alive && (s->workers[k].draining || s->workers[k].suspect) &&
            strcmp(s->workers[k].pool, pool) == 0)
            return 1;
    return 0;
}

/* What task t (of op k, on worker x) has left, in ms, after running `ran` ms: at x's measured
 * speed on the op, else at the op's mean speed; a task late by d is expected to take d more,
 * judged from SPEC_MIN_MS on (short tasks are not copied on a guess). Negative when there is
 * nothing to judge by. */
static double spec_left(const op *o, const worker *x, const task *t, size_t k, double ran)
{
    double v = x->op_speed[k] > 0 ? x->op_speed[k] : o->speed_avg;
    if (v <= 0 || t->in_bytes == 0)
        return -1;
    double whole = (double)t->in_bytes / v;
    if (whole > ran)
        return x->op_speed[k] > 0 ? whole - ran : -1; /* not late at the op's speed */
    return ran >= SPEC_MIN_MS ? ran - whole : -1;
}

size_t sc_spec_candidate(sb_sched *s, size_t w, uint64_t now_ms)
{
    const worker *wk = &s->workers[w];
    size_t best = NONE;
    double best_gain = 0;
    if (s->spec_off)
        return NONE;
    int drains = -1; /* computed once, when an op is not in its tail */
    for (size_t k = 0; k < s->nops; k++) {
        op *o = &s->ops[k];
        if (strcmp(o->pool, wk->pool) != 0 || o->running == 0 ||
            (s->mode == SB_MODE_STATIC && sc_static_full(s, wk, k)))
            continue;
        /* outside the tail only the tasks of a drained (sick) worker are copied */
        int tail = o->qlen == 0 && o->flen == 0 && o->ok_n >= SPEC_MIN_DONE &&
                   (k == 0 || sc_op_finished(s, k - 1));
        if (!tail && drains < 0) /* O(workers): only while some worker drains */
            drains = s->ndraining + s->nsuspect > 0 && pool_draining(s, wk->pool, w);
        if (!tail && !drains)
            continue;
        /* the scan is over every task: at most one per op every SPEC_SCAN_MS, however many
         * workers are idle */
        if (o->spec_scanned && now_ms < o->spec_scan_ms + SPEC_SCAN_MS)
            continue;
        o->spec_scanned = 1;
        o->spec_scan_ms = now_ms;
        uint64_t mean = o->ok_n > 0 ? o->ok_ms_sum / o->ok_n : 0;
        uint64_t bar = mean * SPEC_FACTOR > SPEC_MIN_MS ? mean * SPEC_FACTOR : SPEC_MIN_MS;
        for (size_t ti = 0; ti < s->ntasks; ti++) {
            const task *t = &s->tasks[ti];
            if (t->op != k || t->state != T_RUNNING || t->copy != NO_COPY || t->worker == w ||
                t->open || !sc_inputs_available(s, t))
                continue;
            const worker *x = &s->workers[t->worker];
            int sick = x->draining || x->suspect;
            if (!tail && !sick)
                continue;
            double ran = now_ms > t->started_ms ? (double)(now_ms - t->started_ms) : 0;
            /* ms past the bar; a suspect worker's tasks have none */
            double gain = ran - (x->suspect ? 0 : (double)(sick ? SPEC_MIN_MS : bar));
            double left = spec_left(o, x, t, k, ran);
            if (left >= 0 && wk->op_speed[k] > 0) {
                double mine = (double)t->in_bytes / wk->op_speed[k];
                if (left > SPEC_GAIN * mine && left - mine > gain)
                    gain = left - mine; /* a copy here ends that much sooner */
            }
            if (gain < 0)
                continue;
            if (best == NONE || gain > best_gain) {
                best = ti;
                best_gain = gain;
            }
        }
    }
    return best;
}

/* Starts a copy of task ti on worker w if the budget has room (see above); 1 if it did. */
int sc_start_copy(sb_sched *s, size_t ti, size_t w, uint64_t now_ms)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    uint64_t est = sc_estimate(s, o, t->in_bytes, t->op);
    if (est > 0 && s->partition_bytes + s->reserved_bytes + est > s->budget)
        return 0;
    worker *wk = &s->workers[w];
    if (GROW(s, s->copies, s->capcopies, s->ncopies + 1) != 0)
        return 0;
    s->copies[s->ncopies] =
        (copy_rec){.task = ti, .worker = w, .reserved = est, .started_ms = now_ms};
    t->copy = (uint32_t)s->ncopies++;
    /* past every earlier copy's number too: a dropped copy (it failed, or its worker was lost)
     * may still be winding down on its worker, and its staged sink parts and cancel are named
     * by its attempt number */
    t->spec_attempt = (t->spec_attempt > t->attempt ? t->spec_attempt : t->attempt) + 1;
    s->reserved_bytes += est;
    sc_run_add(s, w, ti);
    wk->running++;
    wk->op_running[t->op]++;
    o->running++;
    o->attempts++;
    o->speculated++;
    s->running_total++;
    s->tasks_run++;
    return 1;
}

/* Earliest finish at the tail (LB-BSP / earliest-finish-time list scheduling). Once nothing more
 * will come into op i (everything upstream done), worker w does not take task ti when the other
 * workers of its pool would finish all of the op's waiting work, ti included, clearly sooner than
 * w would finish ti: then ti waits for one of them. Tail sizing cannot help when a task is one
 * partition (partitions are the unit of lineage and are not cut), and a copy helps only once the
 * slow attempt has started; this keeps a slow worker from taking a coarse last task at all.
 *
 * The model of a worker: a gpu-pool worker's slots share one accelerator (both backends give it
 * 2 slots and 1 accelerator), so it is one server: its tasks run one after the other at its
 * accelerator speed (op_svc), and its running tasks' remaining time adds up before a new one;
 * a cpu-pool worker's slots run at once, each at its per-slot speed (op_speed, wall time), free
 * now or when its running task is expected to end. A running task already late by d is expected
 * to take d more (a worker that stopped answering soon counts as slow). w's time for ti is when
 * its server or slot would end it; the others' time is that of dealing the op's queued tasks and
 * waiting input (in target-size pieces), in queue order, to whichever of their servers or slots
 * is free first. w defers when its time exceeds EFT_SLACK times the others' (the slack keeps
 * workers of about equal speed from deferring to each other).
 *
 * Only the other live, non-draining workers of the pool measured on the op count. Never when w
 * is not measured on the op, when no other worker is (a pool of one worker, the others lost or
 * draining: w works as before), in sb_sched_assign's forced pass (nothing runs anywhere), in
 * static mode, or with no_eft; nor while more than EFT_MAX tasks wait (not the tail yet) or the
 * others have more than EFT_MAX servers or slots. A cheap bound first (the waiting bytes over the
 * others' summed speed: no more than their time) settles most calls; the deal (O(waiting tasks x
 * servers)) is done only when w is far slower. */
#define EFT_SLACK 1.25
#define EFT_MAX 256

static int eft_shared(const worker *x)
{
    return strcmp(x->pool, "gpu") == 0;
}

/* ms from now until ms (a time already past by d: d, see above) */
static double eft_after(double ms, uint64_t now_ms)
{
    double d = ms - (double)now_ms;
    return d < 0 ? -d : d;
}

/* Worker k's servers (1 when its slots share an accelerator, else its slots) on op i: when each
 * is free (ms from now) and its speed (bytes per ms), up to max; returns how many, 0 when k is
 * not measured on op i. */
static size_t eft_servers(const sb_sched *s, size_t k, size_t i, uint64_t now_ms, double *free_at,
                          double *speed, size_t max)
{
    const worker *x = &s->workers[k];
    if (eft_shared(x) && x->op_svc[i] > 0) {
        if (max < 1)
            return 0;
        uint64_t first = UINT64_MAX; /* the server works since the earliest start it still runs */
        double work = 0;
        for (size_t r = 0; r < x->nrun; r++) {
            const task *u = &s->tasks[x->run[r]];
            uint64_t st = u->worker == k ? u->started_ms : s->copies[u->copy].started_ms;
            if (st < first)
                first = st;
            double v = x->op_svc[u->op] > 0 ? x->op_svc[u->op] : x->op_svc[i];
            work += (double)u->in_bytes / v;
        }
        free_at[0] = 0;
        if (x->nrun > 0) {
            uint64_t from = first > x->last_end_ms ? first : x->last_end_ms;
            free_at[0] = eft_after((double)from + work, now_ms);
        }
        speed[0] = x->op_svc[i];
        return 1;
    }
    if (x->op_speed[i] <= 0 || x->slots > max)
        return 0;
    size_t n = 0;
    for (size_t r = 0; r < x->nrun && n < x->slots; r++) {
        const task *u = &s->tasks[x->run[r]];
        uint64_t st = u->worker == k ? u->started_ms : s->copies[u->copy].started_ms;
        double v = x->op_speed[u->op];
        free_at[n] = v > 0 ? eft_after((double)st + (double)u->in_bytes / v, now_ms) : 0;
        speed[n++] = x->op_speed[i];
    }
    for (; n < x->slots; n++) {
        free_at[n] = 0;
        speed[n] = x->op_speed[i];
    }
    return n;
}

int sc_eft_defer(const sb_sched *s, size_t w, size_t i, size_t ti, uint64_t now_ms)
{
    const worker *wk = &s->workers[w];
    const op *o = &s->ops[i];
    const task *t = &s->tasks[ti];
    if (s->eft_off || s->mode == SB_MODE_STATIC || t->in_bytes == 0 ||
        (i > 0 && !sc_op_finished(s, i - 1)))
        return 0;
    uint64_t pieces = o->target ? (o->fifo_bytes + o->target - 1) / o->target : o->flen;
    if (o->qlen + pieces > EFT_MAX)
        return 0; /* not the tail yet */
    double free_at[EFT_MAX], speed[EFT_MAX];
    /* w's time for ti: on its one server after what it runs, or on a free slot */
    size_t nw = eft_servers(s, w, i, now_ms, free_at, speed, EFT_MAX);
    if (nw == 0)
        return 0;
    double mine = free_at[0];
    for (size_t q = 1; q < nw; q++)
        if (free_at[q] < mine)
            mine = free_at[q];
    mine += (double)t->in_bytes / speed[0];
    double rate = 0; /* the others' bytes per ms */
    size_t n = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (k == w || !x->alive || x->draining || strcmp(x->pool, wk->pool) != 0)
            continue;
        size_t got = eft_servers(s, k, i, now_ms, free_at + n, speed + n, EFT_MAX - n);
        if (got == 0 && (x->op_speed[i] > 0 || x->op_svc[i] > 0))
            return 0; /* more servers than EFT_MAX: not estimated */
        for (size_t q = 0; q < got; q++)
            rate += speed[n + q];
        n += got;
    }
    if (n == 0)
        return 0;
    uint64_t waiting = o->fifo_bytes;
    for (size_t k = 0; k < o->qlen; k++)
        waiting += s->tasks[o->queue[o->qhead + k]].in_bytes;
    if (mine <= EFT_SLACK * ((double)waiting / rate))
        return 0;
    double last = 0;
    for (uint64_t k = 0; k < o->qlen + pieces; k++) {
        uint64_t bytes;
        if (k < o->qlen)
            bytes = s->tasks[o->queue[o->qhead + k]].in_bytes;
        else if (k + 1 < o->qlen + pieces)
            bytes = o->target;
        else
            bytes = o->fifo_bytes - (pieces - 1) * o->target;
        size_t j = 0;
        for (size_t q = 1; q < n; q++)
            if (free_at[q] < free_at[j])
                j = q;
        free_at[j] += (double)bytes / speed[j];
        if (free_at[j] > last)
            last = free_at[j];
    }
    return mine > EFT_SLACK * last;
}
