/* workers.c — workers come, go and are lost: their records, the attempts they run and were told
 * to stop, speculative copies promoted or dropped, partitions re-made by lineage when a worker
 * is lost, and the autoscaler's questions (sb_sched_worker_removable, sb_sched_pool_demand). */

#include "controller/sched/core/core.h"

size_t sc_worker_find(const sb_sched *s, const char *id)
{
    size_t w;
    return sb_strmap_get(&s->worker_ids, id, &w) ? w : NONE;
}

int sc_attempt_find(const sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                    const char *what, size_t *w, size_t *ti, sb_err *err)
{
    *w = sc_worker_find(s, worker_id ? worker_id : "");
    if (*w == NONE)
        return sb_err_set(err, "scheduler: %s unknown worker \"%s\"", what,
                          worker_id ? worker_id : "");
    *ti = sc_task_find(s, task_id ? task_id : "");
    if (*ti == NONE)
        return 0;
    const task *t = &s->tasks[*ti];
    return t->state == T_RUNNING && t->attempt == attempt && t->worker == *w;
}

void sb_sched_worker_set_early(sb_sched *s, const char *id, int on)
{
    size_t w = sc_worker_find(s, id ? id : "");
    if (w != NONE)
        s->workers[w].early = on != 0;
}

int sb_sched_worker_add(sb_sched *s, const char *id, const char *pool, const char *address,
                        uint32_t slots, const sb_storage_output *held, size_t nheld,
                        uint64_t now_ms, sb_err *err)
{
    if (id == NULL || *id == '\0' || pool == NULL || address == NULL || slots == 0)
        return sb_err_set(err, "scheduler: a worker needs an id, a pool, an address and slots");
    s->gen++; /* (the partitions it holds may be available again) */
    size_t w = sc_worker_find(s, id);
    if (w != NONE && s->workers[w].alive)
        sb_sched_worker_lost(s, id, "it registered again: restarted",
                             now_ms); /* a restarted worker with the same id */
    if (w == NONE) {
        if (GROW(s, s->workers, s->capworkers, s->nworkers + 1) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        w = s->nworkers++;
        memset(&s->workers[w], 0, sizeof s->workers[w]);
        if (sb_strmap_put(&s->worker_ids, id, w) != 0)
            return sb_err_set(err, "scheduler: out of memory");
    }
    worker *wk = &s->workers[w];
    free(wk->id);
    free(wk->pool);
    free(wk->address);
    free(wk->op_slots);
    free(wk->op_running);
    free(wk->op_speed);
    free(wk->op_svc);
    wk->id = strdup(id);
    wk->pool = strdup(pool);
    wk->address = strdup(address);
    wk->op_slots = calloc(s->nops, sizeof *wk->op_slots);
    wk->op_running = calloc(s->nops, sizeof *wk->op_running);
    wk->op_speed = calloc(s->nops, sizeof *wk->op_speed);
    wk->op_svc = calloc(s->nops, sizeof *wk->op_svc);
    wk->last_end_ms = 0;
    if (!wk->id || !wk->pool || !wk->address || !wk->op_slots || !wk->op_running || !wk->op_speed ||
        !wk->op_svc)
        return sb_err_set(err, "scheduler: out of memory");
    wk->slots = slots;
    wk->running = 0;
    wk->nrun = 0;
    wk->alive = 1;
    wk->draining = 0; /* a new incarnation under the same id starts healthy */
    wk->suspect = 0;
    wk->slow_n = 0;
    sc_static_bind(s, pool); /* the pool's slots changed: bind them again */
    for (size_t i = 0; i < nheld; i++) {
        size_t pi;
        if (!sb_idmap_get(&s->part_ids, held[i].id, &pi) || s->parts[pi].state == P_RELEASED ||
            s->parts[pi].state == P_AVAILABLE) {
            sc_add_release(s, w, held[i].id); /* not needed (or held elsewhere) */
            continue;
        }
        part *p = &s->parts[pi]; /* lost, and this worker still has it */
        p->state = P_AVAILABLE;
        p->worker = w;
        s->partition_bytes += p->bytes;
    }
    s->last_progress_ms = now_ms;
    return 0;
}

/* Makes partition pi available again: re-queues its producer, and recursively the producers of
 * that task's inputs that are gone. */

/* The worker's list of running tasks (worker.run): ti starts there, or ends (no-op when it is not
 * listed). Out of memory, a task goes unlisted: the list only feeds an estimate (sc_eft_defer). */
void sc_run_add(sb_sched *s, size_t w, size_t ti)
{
    worker *wk = &s->workers[w];
    if (sc_grow((void **)&wk->run, &wk->caprun, wk->nrun + 1, sizeof *wk->run) == 0)
        wk->run[wk->nrun++] = ti;
}

void sc_run_del(sb_sched *s, size_t w, size_t ti)
{
    worker *wk = &s->workers[w];
    for (size_t k = 0; k < wk->nrun; k++)
        if (wk->run[k] == ti) {
            wk->run[k] = wk->run[--wk->nrun];
            return;
        }
}

/* Worker w's attempt `attempt` of task t no longer counts while it may still run there (it lost
 * to a copy, or the task was handed out again): the worker is told to stop it
 * (sb_sched_take_cancels), which frees its slot and ends its work at once instead of when it is
 * done. A lost worker is told nothing (it is shut down). */
void sc_cancel_on(sb_sched *s, size_t w, const task *t, uint32_t attempt)
{
    if (w == NONE || !s->workers[w].alive)
        return;
    worker *wk = &s->workers[w];
    char name[TASK_NAME_MAX];
    if (GROW(s, wk->cancels, wk->capcancel, wk->ncancel + 1) != 0)
        return;
    sb_sched_cancel *c = &wk->cancels[wk->ncancel];
    c->task_id = strdup(sc_task_name(s, t, name, sizeof name));
    if (c->task_id == NULL) {
        s->oom = 1;
        return;
    }
    c->attempt = attempt;
    wk->ncancel++;
    s->ops[t->op].cancelled++;
}

/* The task's speculative copy, if any, is told to stop (sc_cancel_on) before it is dropped. */
void sc_cancel_copy(sb_sched *s, const task *t)
{
    if (t->copy != NO_COPY)
        sc_cancel_on(s, s->copies[t->copy].worker, t, t->spec_attempt);
}

/* Abandons the task's speculative copy, if any: its slot and reserve are given back, and its
 * completion, when it comes, is stale (the worker drops what it made). */
void sc_drop_copy(sb_sched *s, task *t)
{
    if (t->copy == NO_COPY)
        return;
    copy_rec *c = &s->copies[t->copy];
    worker *w = &s->workers[c->worker];
    sc_run_del(s, c->worker, (size_t)(t - s->tasks));
    w->running--;
    w->op_running[t->op]--;
    s->ops[t->op].running--;
    s->running_total--;
    s->reserved_bytes -= c->reserved;
    sc_copy_forget(s, t);
}

/* The copy takes over from the primary attempt (which failed, or whose worker is gone, or
 * which the copy beat): the primary's slot and reserve are given back, the copy's worker and
 * attempt become the task's. */
void sc_promote_copy(sb_sched *s, task *t)
{
    worker *w = &s->workers[t->worker];
    sc_run_del(s, t->worker, (size_t)(t - s->tasks));
    w->running--;
    w->op_running[t->op]--;
    s->ops[t->op].running--;
    s->running_total--;
    s->reserved_bytes -= t->reserved;
    if (!t->made && t->nout > 0) /* the primary published outputs early */
        t->early_stale = 1;
    sc_set_waiting(s, t, 0); /* a copy publishes nothing early */
    t->grants = 0;
    t->chunked = 0;
    const copy_rec *c = &s->copies[t->copy];
    t->reserved = c->reserved;
    t->worker = c->worker;
    t->attempt = t->spec_attempt;
    t->batched = 0; /* a copy runs alone */
    t->started_ms = c->started_ms;
    sc_copy_forget(s, t);
}

void sc_requeue_task(sb_sched *s, size_t ti, int rerun)
{
    task *t = &s->tasks[ti];
    if (t->state == T_QUEUED || t->state == T_SKIPPED)
        return;
    sc_cancel_copy(s, t);
    sc_drop_copy(s, t);
    if (!t->made && t->nout > 0) /* the attempt published outputs early */
        t->early_stale = 1;
    if (t->state == T_RUNNING) {
        sc_cancel_on(s, t->worker, t, t->attempt); /* (one that just reported ignores it) */
        worker *w = &s->workers[t->worker];
        sc_run_del(s, t->worker, ti);
        w->running--;
        if (w->op_running)
            w->op_running[t->op]--;
        s->ops[t->op].running--;
        s->running_total--;
        s->reserved_bytes -= t->reserved;
        t->reserved = 0;
        sc_set_waiting(s, t, 0);
    } else if (t->state == T_DONE) {
        s->ops[t->op].done--;
        s->ops[t->op].recovered++;
    }
    t->worker = NONE;
    t->attempt = (t->spec_attempt > t->attempt ? t->spec_attempt : t->attempt) + 1;
    if (rerun)
        s->tasks_rerun++;
    sc_queue_push(s, &s->ops[t->op], ti);
    const uint32_t *ins = sc_task_inputs(t);
    for (size_t i = 0; i < t->ninputs; i++) {
        part *in = &s->parts[ins[i]];
        if (in->state != P_AVAILABLE)
            sc_recover_partition(s, ins[i], 0);
    }
}

void sc_recover_partition(sb_sched *s, size_t pi, int depth)
{
    part *p = &s->parts[pi];
    if (p->state == P_AVAILABLE || depth > 1000)
        return;
    p->state = P_LOST; /* also when it was released: it is needed again */
    p->worker = NONE;
    task *prod = &s->tasks[p->producer];
    if (prod->state == T_DONE) {
        s->partitions_recovered++;
        sc_requeue_task(s, p->producer, 1);
    }
}

void sb_sched_worker_lost(sb_sched *s, const char *id, const char *why, uint64_t now_ms)
{
    size_t w = sc_worker_find(s, id);
    if (w == NONE || !s->workers[w].alive)
        return;
    s->gen++;
    worker *wk = &s->workers[w];
    wk->alive = 0;
    if (wk->draining)
        s->ndraining--;
    if (wk->suspect)
        s->nsuspect--;
    wk->suspect = 0;
    sc_static_bind(s, wk->pool); /* its slots are gone: the others cover every op */
    for (size_t k = 0; k < wk->nrel; k++)
        free(wk->releases[k]);
    wk->nrel = 0;
    for (size_t k = 0; k < wk->ncancel; k++) /* it is shut down: nothing to stop there */
        free(wk->cancels[k].task_id);
    wk->ncancel = 0;
    /* 1. partitions that lived there (lost_here: which; NULL when out of memory) */
    unsigned char *lost_here = calloc(s->nparts + 1, 1);
    for (size_t pi = 0; pi < s->nparts; pi++) {
        part *p = &s->parts[pi];
        /* a consumer that reported it lost before this worker was found dead was right: that
         * report does not count towards sc_lost_reports_max (a partition lost to several killed
         * workers is recovered every time, as before) */
        if (p->lost_from == w && p->lost_reports > 0) {
            p->lost_reports--;
            p->lost_from = NO_HOLDER;
        }
        if (p->worker != w || p->state != P_AVAILABLE)
            continue;
        if (lost_here != NULL)
            lost_here[pi] = 1;
        sc_part_drop_bytes(s, p);
        p->state = P_LOST;
        p->worker = NONE;
        s->partitions_lost++;
    }
    /* 2. tasks running there go back to their queue. A worker dying under a task is a failed
     * attempt of that task and counts against maxTaskRetries: a task that kills its worker (a
     * plugin that crashes, a UDF the kernel kills for memory) would otherwise loop forever. */
    for (size_t ti = 0; ti < s->ntasks; ti++) {
        task *t = &s->tasks[ti];
        if (t->state == T_RUNNING && sc_copy_worker(s, t) == w)
            sc_drop_copy(s, t); /* the primary goes on */
        if (t->state != T_RUNNING || t->worker != w)
            continue;
        /* in a batch, which task killed it is not known: none is charged, and each runs alone
         * from now on, where a death counts */
        if (t->batched)
            t->solo = 1;
        else
            t->deaths++;
        s->ops[t->op].failed_attempts++;
        if (t->copy != NO_COPY && t->retries + t->deaths <= s->max_retries) {
            sc_promote_copy(s, t); /* its copy is already running it elsewhere */
            s->tasks_rerun++;
            continue;
        }
        if (t->retries + t->deaths <= s->max_retries) {
            sc_requeue_task(s, ti, 1);
            continue;
        }
        char msg[512];
        snprintf(msg, sizeof msg, "its worker was lost while running it (worker %.100s: %.200s)",
                 wk->id, why && *why ? why : "lost");
        if (t->first_error == NULL)
            t->first_error = strdup(msg);
        sc_task_stop_running(s, t);
        sc_task_errored(s, ti, t->retries + t->deaths, msg);
    }
    /* 3. lost partitions that are still needed get re-produced. A consumer running elsewhere
     * read (or is reading) its input from the lost worker: it goes back to its queue too (a new
     * attempt, so the old one's report is stale), because a worker declared lost is fenced — what
     * it serves after that (it may only be cut off, and come back) must not be used. Except a
     * consumer that writes the sink: two attempts must not both write its part file (as with
     * speculative copies); it keeps running, and reports the input lost if its fetch fails. */
    for (size_t pi = 0; pi < s->nparts; pi++) {
        part *p = &s->parts[pi];
        if (p->state != P_LOST)
            continue;
        size_t c = p->consumer;
        if (c == DEALT) /* taken by a consumer: see stream.c */
            continue;
        if (c != NONE && s->tasks[c].state == T_RUNNING && lost_here != NULL && lost_here[pi] &&
            s->tasks[c].op != s->nops - 1)
            sc_requeue_task(s, c, 1); /* also re-produces its inputs that are not available */
        else if (c == NONE || s->tasks[c].state == T_QUEUED || s->tasks[c].state == T_RUNNING)
            sc_recover_partition(s, pi, 0);
    }
    free(lost_here);
    s->last_progress_ms = now_ms;
}

/* ---- elasticity ----------------------------------------------------------------------------- */

int sb_sched_worker_removable(const sb_sched *s, const char *worker_id)
{
    size_t w = sc_worker_find(s, worker_id ? worker_id : "");
    if (w == NONE || !s->workers[w].alive || s->workers[w].running > 0)
        return 0;
    for (size_t pi = 0; pi < s->nparts; pi++) /* available = not yet consumed: still needed */
        if (s->parts[pi].worker == w && s->parts[pi].state == P_AVAILABLE)
            return 0;
    return 1;
}

void sb_sched_pool_demand(const sb_sched *s, const char *pool, uint64_t *queued, uint64_t *running,
                          int *active)
{
    uint64_t q = 0, r = 0;
    int act = 0;
    for (size_t i = 0; pool != NULL && i < s->nops; i++) {
        const op *o = &s->ops[i];
        if (strcmp(o->pool, pool) != 0)
            continue;
        q += o->qlen;
        if (o->flen > 0) { /* tasks these partitions will form (a reduce op: one per bucket) */
            uint64_t unformed = o->xbuckets > o->ntis ? o->xbuckets - o->ntis : 0;
            uint64_t t = o->xreduce  ? (o->flen < unformed ? o->flen : unformed)
                         : o->target ? (o->fifo_bytes + o->target - 1) / o->target
                                     : o->flen;
            q += t > 0 || o->xreduce ? t : 1; /* (a reduce: buckets whose task waits for them) */
        }
        r += o->running;
        if (s->state == SB_SCHED_RUNNING && !sc_op_finished(s, i))
            act = 1;
    }
    if (queued != NULL)
        *queued = q;
    if (running != NULL)
        *running = r;
    if (active != NULL)
        *active = act;
}
