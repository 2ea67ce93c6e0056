/* lineage.c — the records of the lineage table: arrays grown, tasks made, named
 * ("<pipeline>/s<op>-t<index>") and found by id, their input lists, partitions released where they
 * live, op queues and FIFOs, and the run's failure. Small helpers every other file of the core
 * uses. */

#include "controller/sched/core/core.h"

int sc_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*arr, ncap * elem);
    if (n == NULL)
        return -1;
    *arr = n;
    *cap = ncap;
    return 0;
}

void sc_set_failure(sb_sched *s, const char *fmt, ...)
{
    if (s->state == SB_SCHED_FAILED)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    s->failure = strdup(buf);
    s->state = SB_SCHED_FAILED;
}

void sc_add_release(sb_sched *s, size_t w, const char *id)
{
    if (w == NONE)
        return;
    worker *wk = &s->workers[w];
    if (GROW(s, wk->releases, wk->caprel, wk->nrel + 1) != 0)
        return;
    wk->releases[wk->nrel] = strdup(id);
    if (wk->releases[wk->nrel] == NULL) {
        s->oom = 1;
        return;
    }
    wk->nrel++;
}

/* Marks t's running attempt as waiting for a grant of early outputs (see sc_early_wanted), or not.
 */
void sc_set_waiting(sb_sched *s, task *t, int v)
{
    if (t->waiting == v)
        return;
    t->waiting = (uint8_t)v;
    if (v)
        s->waiting_total++;
    else
        s->waiting_total--;
}

void sc_part_drop_bytes(sb_sched *s, part *p)
{
    if (p->state == P_AVAILABLE && !p->parked)
        s->partition_bytes -= p->bytes;
    p->parked = 0;
}

/* The partition will not be read again: free it where it lives. */
void sc_part_release(sb_sched *s, size_t pi)
{
    part *p = &s->parts[pi];
    if (p->state == P_RELEASED)
        return;
    sc_part_drop_bytes(s, p);
    if (p->state == P_AVAILABLE)
        sc_add_release(s, p->worker, p->id);
    p->state = P_RELEASED;
    p->worker = NONE;
}

int sc_queue_push(sb_sched *s, op *o, size_t t)
{
    if (o->qhead > 0 && o->qhead + o->qlen == o->qcap) { /* compact */
        memmove(o->queue, o->queue + o->qhead, o->qlen * sizeof *o->queue);
        o->qhead = 0;
    }
    if (GROW(s, o->queue, o->qcap, o->qhead + o->qlen + 1) != 0)
        return -1;
    o->queue[o->qhead + o->qlen++] = t;
    s->tasks[t].queued = 1;
    s->tasks[t].state = T_QUEUED;
    return 0;
}

int sc_fifo_push(sb_sched *s, op *o, size_t pi)
{
    if (o->fhead > 0 && o->fhead + o->flen == o->fcap) {
        memmove(o->fifo, o->fifo + o->fhead, o->flen * sizeof *o->fifo);
        o->fhead = 0;
    }
    if (GROW(s, o->fifo, o->fcap, o->fhead + o->flen + 1) != 0)
        return -1;
    o->fifo[o->fhead + o->flen++] = pi;
    o->fifo_bytes += s->parts[pi].bytes;
    return 0;
}

size_t sc_task_new(sb_sched *s, uint32_t opi, uint64_t index)
{
    if (GROW(s, s->tasks, s->captasks, s->ntasks + 1) != 0)
        return NONE;
    task *t = &s->tasks[s->ntasks];
    memset(t, 0, sizeof *t);
    t->op = opi;
    t->index = index;
    t->worker = NONE;
    t->copy = NO_COPY;
    op *o = &s->ops[opi];
    if (s->ntasks >= UINT32_MAX - 1) { /* indexes are 32-bit in the lineage table */
        s->oom = 1;
        return NONE;
    }
    if (opi > 0) { /* op 0: tasks[index] (sb_sched_new makes them first, in split order) */
        if (index != o->first_index + o->ntis || GROW(s, o->tis, o->captis, o->ntis + 1) != 0) {
            s->oom = 1;
            return NONE;
        }
        o->tis[o->ntis++] = (uint32_t)s->ntasks;
    }
    o->tasks_total++;
    return s->ntasks++;
}

/* Writes the task's id, "<pipeline_id>/s<op>-t<index>", into buf (len bytes); returns buf. */
const char *sc_task_name(const sb_sched *s, const task *t, char *buf, size_t len)
{
    snprintf(buf, len, "%s/s%" PRIu32 "-t%" PRIu64, s->pipeline_id, t->op, t->index);
    return buf;
}

/* The task an id names (as sc_task_name writes it), or NONE. */
size_t sc_task_find(const sb_sched *s, const char *id)
{
    size_t plen = strlen(s->pipeline_id);
    if (strncmp(id, s->pipeline_id, plen) != 0 || id[plen] != '/' || id[plen + 1] != 's')
        return NONE;
    const char *p = id + plen + 2;
    uint64_t opi, index;
    if (sb_num_parse_dec(&p, UINT32_MAX, &opi) < 0 || *p++ != '-' || *p++ != 't' ||
        sb_num_parse_dec(&p, UINT64_MAX, &index) < 0 || *p != '\0' || opi >= s->nops)
        return NONE;
    size_t ti = NONE;
    if (opi == 0) {
        if (index < s->nsplits)
            ti = (size_t)index;
    } else {
        const op *o = &s->ops[opi];
        if (index >= o->first_index && index - o->first_index < o->ntis)
            ti = o->tis[index - o->first_index];
    }
    if (ti == NONE || s->tasks[ti].op != opi || s->tasks[ti].index != index)
        return NONE;
    /* the parse accepts what sc_task_name would not write (leading zeros): compare the whole id */
    char buf[TASK_NAME_MAX];
    return strcmp(sc_task_name(s, &s->tasks[ti], buf, sizeof buf), id) == 0 ? ti : NONE;
}

/* The task's input partitions (ninputs of them). */
const uint32_t *sc_task_inputs(const task *t)
{
    return t->ninputs > 1 ? t->in.many : &t->in.one;
}

/* The worker running the task's speculative copy, or NONE. */
size_t sc_copy_worker(const sb_sched *s, const task *t)
{
    return t->copy == NO_COPY ? NONE : s->copies[t->copy].worker;
}

/* Forgets the task's copy record (its slot and reserve were given back by the caller). */
void sc_copy_forget(sb_sched *s, task *t)
{
    size_t k = t->copy;
    s->copies[k] = s->copies[--s->ncopies];
    if (k < s->ncopies)
        s->tasks[s->copies[k].task].copy = (uint32_t)k;
    t->copy = NO_COPY;
}
