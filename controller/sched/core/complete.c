/* complete.c — a task's report: outputs recorded (sink parts, early outputs published), errors
 * counted and retried, inputs reported lost, timing and rows, and the run's end
 * (sb_sched_complete, sb_sched_complete_pieces, sb_sched_publish). */

#include "controller/sched/core/core.h"

void sc_task_stop_running(sb_sched *s, task *t)
{
    worker *wk = &s->workers[t->worker];
    sc_run_del(s, t->worker, (size_t)(t - s->tasks));
    wk->running--;
    wk->op_running[t->op]--;
    s->ops[t->op].running--;
    s->running_total--;
    s->reserved_bytes -= t->reserved;
    t->reserved = 0;
    sc_set_waiting(s, t, 0);
}

/* Records one output of task ti (op not the last) that its attempt on worker w wrote, at its
 * completion or published early (sb_sched_publish). A new partition joins the next op's FIFO and
 * the task's list. One known before is a re-run's copy: made again where it was lost and is
 * still needed, released where another copy is available or nobody needs it, kept where the
 * scheduler already holds it on w (this attempt's early output, listed again in its final
 * report, or a re-run on the worker that holds the earlier copy: the worker replaced it). -1 out
 * of memory. */
int sc_record_part(sb_sched *s, size_t ti, size_t w, const sb_storage_output *out, sb_err *err)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    if (out->bytes > o->max_part)
        o->max_part = out->bytes;
    char name[TASK_NAME_MAX];
    size_t pi;
    if (sb_idmap_get(&s->part_ids, out->id, &pi)) { /* re-produced, or published early */
        part *p = &s->parts[pi];
        if (p->producer == ti && (out->rows != p->rows || out->bytes != p->bytes)) {
            sc_set_failure(s,
                           "re-made partition %s of op %s has %" PRIu64 " rows / %" PRIu64
                           " bytes, the %s one had %" PRIu64 " / %" PRIu64
                           ": its producer is not deterministic (a lineage re-run must cut "
                           "its output as the first attempt did); the run stops rather than "
                           "lose or duplicate rows",
                           out->id, o->name, out->rows, out->bytes,
                           p->state == P_AVAILABLE ? "first" : "lost", p->rows, p->bytes);
            if (p->state != P_AVAILABLE || p->worker != w)
                sc_add_release(s, w, out->id);
            return 0;
        }
        if (p->state == P_AVAILABLE) { /* held here already, or available elsewhere */
            if (p->worker != w)
                sc_add_release(s, w, out->id);
            return 0;
        }
        int needed = p->state == P_LOST && p->consumer != DEALT &&
                     (p->consumer == NONE || s->tasks[p->consumer].state == T_QUEUED ||
                      s->tasks[p->consumer].state == T_RUNNING);
        if (!needed) {
            sc_add_release(s, w, out->id);
            return 0;
        }
        p->state = P_AVAILABLE;
        p->worker = w;
        p->bytes = out->bytes;
        p->rows = out->rows;
        s->partition_bytes += p->bytes;
    } else if (t->made) {
        sc_set_failure(s,
                       "a re-run of task %s of op %s made partition %s (%" PRIu64 " rows / %" PRIu64
                       " bytes), which its first attempt did not: its producer is not "
                       "deterministic; the run stops rather than duplicate rows",
                       sc_task_name(s, t, name, sizeof name), o->name, out->id, out->rows,
                       out->bytes);
        sc_add_release(s, w, out->id);
        return 0;
    } else {
        if (s->nparts >= UINT32_MAX - 1 || GROW(s, s->parts, s->capparts, s->nparts + 1) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        pi = s->nparts;
        part *p = &s->parts[pi];
        memset(p, 0, sizeof *p);
        p->lost_from = NO_HOLDER;
        p->id = sb_strpool_dup(&s->ids, out->id);
        if (p->id == NULL || sb_idmap_put(&s->part_ids, out->id, pi) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        s->nparts++;
        p->next_out = t->nout > 0 ? t->out_first : NO_PART;
        t->out_first = (uint32_t)pi;
        t->nout++;
        p->producer = ti;
        p->worker = w;
        p->bytes = out->bytes;
        p->rows = out->rows;
        p->consumer = NONE;
        p->state = P_AVAILABLE;
        s->partition_bytes += p->bytes;
        if ((t->op + 1 == s->nops ? sc_stream_push(s, ti, pi)
                                  : sc_fifo_push(s, &s->ops[t->op + 1], pi)) != 0)
            return sb_err_set(err, "scheduler: out of memory");
    }
    if (out->bytes > s->max_partition_bytes)
        s->max_partition_bytes = out->bytes;
    if (s->partition_bytes > s->peak_partition_bytes)
        s->peak_partition_bytes = s->partition_bytes;
    return 0;
}

static int record_sink_part(sb_sched *s, size_t ti, const sb_storage_output *out, sb_err *err)
{
    if (sb_idmap_get(&s->sink_ids, out->id, NULL))
        return 0; /* a re-run rewrote the same part */
    if (GROW(s, s->sink, s->capsink, s->nsink + 1) != 0 ||
        GROW(s, s->sink_task, s->capsink_task, s->nsink + 1) != 0 ||
        (s->sink[s->nsink].id = sb_strpool_dup(&s->ids, out->id)) == NULL ||
        sb_idmap_put(&s->sink_ids, out->id, s->nsink) != 0)
        return sb_err_set(err, "scheduler: out of memory");
    s->sink_task[s->nsink] = (uint32_t)ti;
    s->sink[s->nsink].bytes = out->bytes;
    s->sink[s->nsink].rows = out->rows;
    s->sink[s->nsink].crc32c = out->crc32c;
    s->sink[s->nsink].order = NULL;
    s->nsink++;
    s->sink_rows += out->rows;
    s->sink_bytes += out->bytes;
    return 0;
}

/* The outputs of task ti's finished attempt on worker w: all of them, also those it published
 * early. A partition the task made in an earlier attempt must be made again, equal to the last
 * row: keeping a lost one (or an early one of a failed attempt) beside the others would lose or
 * duplicate the rows near a cut that moved. */
static int record_outputs(sb_sched *s, size_t ti, size_t w, const sb_storage_output *outs,
                          size_t nouts, sb_err *err)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    int last = t->op == s->nops - 1 && !s->stream; /* writes the sink */
    uint64_t bytes = 0;
    int was_made = t->made, check = !last && (t->made || t->early_stale);
    char name[TASK_NAME_MAX];
    for (size_t i = 0; i < nouts; i++) {
        bytes += outs[i].bytes;
        o->rows_out += outs[i].rows;
        o->bytes_out += outs[i].bytes;
        if ((last ? record_sink_part(s, ti, &outs[i], err)
                  : sc_record_part(s, ti, w, &outs[i], err)) != 0)
            return -1;
    }
    uint32_t pi = t->nout > 0 ? t->out_first : NO_PART;
    for (size_t k = 0; check && k < t->nout; k++, pi = s->parts[pi].next_out) {
        const part *p = &s->parts[pi];
        int made = 0;
        for (size_t i = 0; i < nouts && !made; i++)
            made = strcmp(outs[i].id, p->id) == 0;
        if (!made && (!was_made || p->state == P_LOST))
            sc_set_failure(s,
                           "a re-run of task %s of op %s did not make partition %s again (the "
                           "%s one had %" PRIu64 " rows / %" PRIu64 " bytes): its producer is not "
                           "deterministic; the run stops rather than lose or duplicate rows",
                           sc_task_name(s, t, name, sizeof name), o->name, p->id,
                           was_made ? "lost" : "early", p->rows, p->bytes);
    }
    if (!last) {
        t->made = 1;
        t->early_stale = 0;
    }
    if (!last && t->in_bytes > 0) {
        double r = (double)bytes / (double)t->in_bytes;
        if (r > o->ratio)
            o->ratio = r;
        if (o->ratio == 0)
            o->ratio = 1e-9; /* measured: it produces (almost) nothing */
    } else if (!last && o->ratio == 0) {
        o->ratio = 1e-9;
    }
    return 0;
}

/* A report whose outputs do not count (stale, failed, or a copy that lost): the worker frees them,
 * except those the scheduler holds on that worker (its early outputs: see sc_record_part). */
static void release_outs(sb_sched *s, size_t w, const sb_storage_output *outs, size_t nouts)
{
    for (size_t i = 0; i < nouts; i++) {
        size_t pi;
        if (!sb_idmap_get(&s->part_ids, outs[i].id, &pi) || s->parts[pi].state != P_AVAILABLE ||
            s->parts[pi].worker != w)
            sc_add_release(s, w, outs[i].id);
    }
}

static void consume_inputs(sb_sched *s, task *t)
{
    const uint32_t *ins = sc_task_inputs(t);
    for (size_t i = 0; i < t->ninputs; i++)
        sc_part_release(s, ins[i]);
}

void sc_check_finished(sb_sched *s)
{
    if (s->state == SB_SCHED_RUNNING && sc_op_finished(s, s->nops - 1) &&
        (!s->stream || sc_stream_finished(s)))
        s->state = SB_SCHED_SUCCEEDED;
}

/* Lists an errored partition (the first SB_SCHED_ERRORED_KEEP are kept). */
static void errored_list(sb_sched *s, const op *o, const char *task_name, const char *what,
                         const char *error)
{
    if (s->nerrored >= SB_SCHED_ERRORED_KEEP ||
        GROW(s, s->errored, s->caperrored, s->nerrored + 1) != 0)
        return;
    sb_storage_errored *e = &s->errored[s->nerrored];
    e->stage = o->name;
    e->task_id = strdup(task_name);
    e->input = strdup(what);
    e->error = strdup(error);
    if (e->task_id == NULL || e->input == NULL || e->error == NULL) {
        free((char *)e->task_id);
        free((char *)e->input);
        free((char *)e->error);
        s->oom = 1;
    } else {
        s->nerrored++;
    }
}

/* Done task ti's split had objects that errored alone (an image source's grouped split): each
 * is an errored partition, counted once whatever attempts or lineage re-runs report them again,
 * and the pipeline fails past maxErroredPartitions. */
static void pieces_errored(sb_sched *s, size_t ti, const sb_sched_piece *pieces, size_t n)
{
    task *t = &s->tasks[ti];
    if (n == 0 || t->pieces)
        return;
    t->pieces = 1;
    op *o = &s->ops[t->op];
    char name[TASK_NAME_MAX], what[256], shown[1024];
    sc_task_name(s, t, name, sizeof name);
    for (size_t i = 0; i < n; i++) {
        s->errored_total++;
        snprintf(what, sizeof what, "split %" PRIu64 " object %.200s", t->index,
                 pieces[i].path ? pieces[i].path : "");
        sb_redact_text(pieces[i].error ? pieces[i].error : "(no message)", shown, sizeof shown);
        errored_list(s, o, name, what, shown);
    }
    o->errored += n;
    if (s->errored_total > s->max_errored)
        sc_set_failure(s,
                       "stage %s failed: task %s: %s: %s (%" PRIu64 " errored partition%s, "
                       "maxErroredPartitions is %" PRIu64 ")",
                       o->name, name, what, shown, s->errored_total,
                       s->errored_total == 1 ? "" : "s", s->max_errored);
}

/* Task ti (no longer running) failed for good after `times` attempts: its partition is errored,
 * and the pipeline fails past maxErroredPartitions. */
void sc_task_errored(sb_sched *s, size_t ti, uint32_t times, const char *message)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    sc_cancel_copy(s, t);
    sc_drop_copy(s, t);
    t->state = T_SKIPPED;
    o->errored++;
    s->errored_total += t->ninputs > 0 ? t->ninputs : 1;
    char what[256], label[200], name[TASK_NAME_MAX];
    sc_task_name(s, t, name, sizeof name);
    if (t->op == 0)
        snprintf(what, sizeof what, "split %" PRIu64 " (%s)", t->index,
                 sb_io_split_describe(s->splits[t->index], label, sizeof label));
    else if (t->ninputs > 0)
        snprintf(what, sizeof what, "input partition %s%s", s->parts[sc_task_inputs(t)[0]].id,
                 t->ninputs > 1 ? " (and more)" : "");
    else
        snprintf(what, sizeof what, "no input");
    errored_list(s, o, name, what,
                 t->first_error        ? t->first_error
                 : message && *message ? message
                                       : "(no message)");
    if (s->errored_total > s->max_errored)
        sc_set_failure(s,
                       "stage %s failed: task %s (%s) failed %u time%s, last error: %s "
                       "(%" PRIu64 " errored partition%s, maxErroredPartitions is %" PRIu64 ")",
                       o->name, name, what, times, times > 1 ? "s" : "",
                       message && *message ? message : "(no message)", s->errored_total,
                       s->errored_total == 1 ? "" : "s", s->max_errored);
    consume_inputs(s, t);
    sc_check_finished(s);
}

/* A report from the primary or its speculative copy decides between the two. Returns 1 when the
 * report is settled here (a failed copy; a failed primary whose copy goes on as the task), 0 when
 * it is the task's result and sb_sched_complete goes on with it. */
static int settle_copy(sb_sched *s, size_t w, task *t, int copy, sb_sched_status status,
                       const char *message, const sb_storage_output *outs, size_t nouts)
{
    op *o = &s->ops[t->op];
    if (copy && status != SB_SCHED_OK) { /* a failed copy: the primary goes on */
        release_outs(s, w, outs, nouts);
        sc_drop_copy(s, t);
        o->failed_attempts++;
        return 1;
    }
    if (copy) { /* the copy finished first: it is the task's result */
        sc_cancel_on(s, t->worker, t, t->attempt); /* the primary still runs */
        sc_promote_copy(s, t);
        o->spec_won++;
    } else if (t->copy != NO_COPY && status == SB_SCHED_ERROR && t->retries < s->max_retries) {
        release_outs(s, w, outs, nouts); /* a failed primary: its copy goes on as the task */
        o->failed_attempts++;
        if (t->first_error == NULL)
            t->first_error = strdup(message && *message ? message : "(no message)");
        t->retries++;
        o->retries++;
        sc_promote_copy(s, t);
        return 1;
    } else {
        sc_cancel_copy(s, t); /* the primary's result (or failure) stands; a copy is stale now */
        sc_drop_copy(s, t);
    }
    return 0;
}

/* A partition its consumers report lost this many times, though it was made again after each
 * report, is not lost: reading it fails (issue 41: one larger than a worker's store budget was
 * reported lost and made again for ever). maxTaskRetries + 1 reports, and never fewer than 2,
 * so that a worker lost between two reads under maxTaskRetries: 0 is still recovered from. */
uint32_t sc_lost_reports_max(const sb_sched *s)
{
    uint64_t m = s->max_retries + 1 > 2 ? s->max_retries + 1 : 2;
    return m > UINT8_MAX - 1 ? UINT8_MAX - 1 : (uint32_t)m;
}

/* Task ti's inputs reported lost again and again (sc_lost_reports_max): the pipeline fails naming
 * the partition and the consumer's last error, rather than make it once more. */
static void lost_for_good(sb_sched *s, size_t ti, const part *p, const char *message)
{
    task *t = &s->tasks[ti];
    char name[TASK_NAME_MAX];
    sc_task_name(s, t, name, sizeof name);
    sc_task_stop_running(s, t);
    sc_set_failure(s,
                   "stage %s failed: task %s reported its input partition %s (%" PRIu64
                   " bytes) lost %u times, though it was made again after each report: last error: "
                   "%s",
                   s->ops[t->op].name, name, p->id, p->bytes, (unsigned)p->lost_reports,
                   message && *message ? message : "(no message)");
    if (t->first_error == NULL)
        t->first_error = strdup(message && *message ? message : "(no message)");
    sc_task_errored(s, ti, t->retries + 1, message);
}

/* Task ti could not read some inputs: they are lost, and the task waits for them to be made
 * again, unless one of them was reported lost too often already (lost_for_good). */
static void complete_input_lost(sb_sched *s, size_t w, size_t ti, const char *message,
                                const sb_storage_output *outs, size_t nouts,
                                const char *const *lost, size_t nlost)
{
    size_t again = NONE;
    for (size_t i = 0; i < nlost; i++) {
        size_t pi;
        if (!sb_idmap_get(&s->part_ids, lost[i], &pi) || s->parts[pi].state != P_AVAILABLE)
            continue;
        part *p = &s->parts[pi];
        if (p->lost_reports < UINT8_MAX)
            p->lost_reports++;
        p->lost_from = p->worker < NO_HOLDER ? (uint16_t)p->worker : NO_HOLDER;
        if (p->lost_reports >= sc_lost_reports_max(s))
            again = pi;
        sc_part_drop_bytes(s, p);
        p->state = P_LOST;
        p->worker = NONE;
        s->partitions_lost++;
    }
    release_outs(s, w, outs, nouts); /* partial outputs are dropped */
    if (again != NONE)
        lost_for_good(s, ti, &s->parts[again], message);
    else
        sc_requeue_task(s, ti, 1); /* re-queues the producers of the lost inputs too */
}

/* Task ti failed: retried while it has retries left (an error on its data is not: it would fail
 * again), else its partition is errored; a permanent error fails the pipeline at once. */
static void complete_error(sb_sched *s, size_t w, size_t ti, sb_sched_status status,
                           const char *message, const sb_storage_output *outs, size_t nouts)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    release_outs(s, w, outs, nouts);
    if (t->first_error == NULL) /* NULL when out of memory: the last message is used */
        t->first_error = strdup(message && *message ? message : "(no message)");
    if (status == SB_SCHED_ERROR && t->retries < s->max_retries) {
        t->retries++;
        o->retries++;
        sc_requeue_task(s, ti, 0);
        return;
    }
    sc_task_stop_running(s, t);
    if (status == SB_SCHED_ERROR_PERMANENT) { /* every task would fail so: no partition skipped */
        char name[TASK_NAME_MAX];
        sc_task_name(s, t, name, sizeof name);
        sc_set_failure(
            s, "stage %s failed: task %s failed with an error that a retry would repeat: %s",
            o->name, name, message && *message ? message : "(no message)");
    }
    sc_task_errored(s, ti, t->retries + 1, message);
}

/* Records how long a successful task took: the op's task times and duration histogram, the
 * worker's speed on the op (dispatch and drain use it) and its accelerator's service rate
 * (sc_eft_defer uses it). */
static void complete_timing(sb_sched *s, task *t, const sb_sched_metrics *metrics, uint64_t now_ms)
{
    op *o = &s->ops[t->op];
    uint64_t took = now_ms > t->started_ms ? now_ms - t->started_ms : 0;
    int batched = t->batched && metrics != NULL && metrics->wall_seconds > 0;
    if (batched) /* it waited for the tasks before it in the batch: its own time */
        took = (uint64_t)(metrics->wall_seconds * 1000.0 + 0.5);
    o->ok_ms_sum += took;
    o->ok_n++;
    if (took > 0 && t->in_bytes > 0) { /* the worker's speed on this op: EWMA, weight 1/2 */
        double v = (double)t->in_bytes / (double)took, *sp = &s->workers[t->worker].op_speed[t->op];
        *sp = *sp > 0 ? 0.5 * *sp + 0.5 * v : v;
        sc_drain_check(s, t->worker, t->op, v, t->started_ms, now_ms);
    }
    worker *ew = &s->workers[t->worker]; /* its accelerator's time on the task (sc_eft_defer) */
    uint64_t from = t->started_ms > ew->last_end_ms ? t->started_ms : ew->last_end_ms;
    if (batched) /* a batch's reports arrive together: its own time, as above */
        from = now_ms > took ? now_ms - took : 0;
    if (now_ms > from && t->in_bytes > 0) {
        double v = (double)t->in_bytes / (double)(now_ms - from), *sp = &ew->op_svc[t->op];
        *sp = *sp > 0 ? 0.5 * *sp + 0.5 * v : v;
    }
    if (now_ms > ew->last_end_ms)
        ew->last_end_ms = now_ms;
    if (metrics != NULL) {
        o->task_seconds += metrics->wall_seconds;
        o->cpu_seconds += metrics->cpu_seconds;
        size_t b = 0;
        while (b < SB_SCHED_DURATION_BUCKETS && metrics->wall_seconds > sb_metrics_task_buckets[b])
            b++;
        if (b < SB_SCHED_DURATION_BUCKETS)
            o->duration_buckets[b]++;
        o->timed++;
    }
}

/* Adds a successful task's rows and bytes to its op's figures, in total and by the pool of the
 * worker (w) that ran it. */
static void complete_rows(sb_sched *s, size_t w, task *t, const sb_storage_output *outs,
                          size_t nouts, const sb_sched_metrics *metrics)
{
    op *o = &s->ops[t->op];
    /* a source task's input rows are known only to the worker that read its split */
    uint64_t rows_in = t->op == 0 && metrics != NULL ? metrics->rows_in : t->in_rows;
    o->rows_in += rows_in;
    if (metrics != NULL) {
        o->spilled_bytes += metrics->spilled_bytes;
        o->outside += metrics->outside;
        o->outside_bytes += metrics->outside_bytes;
    }
    if (t->op == 0 && metrics != NULL) {
        s->source.source_bytes_read += metrics->source_bytes_read;
        s->source.row_groups_read += metrics->row_groups_read;
        s->source.row_groups_skipped += metrics->row_groups_skipped;
        s->source.source_bytes_skipped += metrics->source_bytes_skipped;
        s->source.pages_read += metrics->pages_read;
        s->source.pages_skipped += metrics->pages_skipped;
    }
    sb_sched_pool_figures *pf = &o->by_pool[strcmp(s->workers[w].pool, "gpu") == 0];
    pf->rows_in += rows_in;
    for (size_t i = 0; i < nouts; i++)
        pf->rows_out += outs[i].rows;
    if (metrics != NULL) {
        pf->timed_tasks++;
        pf->task_seconds += metrics->wall_seconds;
    }
    o->bytes_in += t->in_bytes;
}

int sb_sched_complete(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                      sb_sched_status status, const char *message, const sb_storage_output *outs,
                      size_t nouts, const char *const *lost, size_t nlost,
                      const sb_sched_metrics *metrics, uint64_t now_ms, sb_err *err)
{
    return sb_sched_complete_pieces(s, worker_id, task_id, attempt, status, message, outs, nouts,
                                    lost, nlost, metrics, NULL, 0, now_ms, err);
}

int sb_sched_complete_pieces(sb_sched *s, const char *worker_id, const char *task_id,
                             uint32_t attempt, sb_sched_status status, const char *message,
                             const sb_storage_output *outs, size_t nouts, const char *const *lost,
                             size_t nlost, const sb_sched_metrics *metrics,
                             const sb_sched_piece *pieces, size_t npieces, uint64_t now_ms,
                             sb_err *err)
{
    size_t w = sc_worker_find(s, worker_id ? worker_id : "");
    size_t ti;
    if (w == NONE)
        return sb_err_set(err, "scheduler: completion from unknown worker \"%s\"",
                          worker_id ? worker_id : "");
    int primary = 0, copy = 0;
    if ((ti = sc_task_find(s, task_id ? task_id : "")) != NONE && s->tasks[ti].state == T_RUNNING) {
        primary = s->tasks[ti].attempt == attempt && s->tasks[ti].worker == w;
        copy = sc_copy_worker(s, &s->tasks[ti]) == w && s->tasks[ti].spec_attempt == attempt;
    }
    if (!primary && !copy) {
        release_outs(s, w, outs, nouts);        /* stale: the worker drops what it made */
        if (now_ms > s->workers[w].last_end_ms) /* its accelerator was busy with it till now */
            s->workers[w].last_end_ms = now_ms;
        return 0;
    }
    char shown[1024]; /* the worker's message as every output shows it: redacted */
    if (message != NULL) {
        sb_redact_text(message, shown, sizeof shown);
        message = shown;
    }
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    s->gen++; /* (sc_open_settle: map outputs finished, or an op may have) */
    if (settle_copy(s, w, t, copy, status, message, outs, nouts))
        return 1;
    if (status == SB_SCHED_OK && t->open) { /* its output would lack the rows still to come */
        status = SB_SCHED_ERROR;
        message = "the worker ended an early reduce task before its inputs were closed "
                  "(Task.inputs_open)";
    }
    s->last_progress_ms = now_ms;
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    if (status != SB_SCHED_OK)
        o->failed_attempts++;
    if (status == SB_SCHED_INPUT_LOST) {
        complete_input_lost(s, w, ti, message, outs, nouts, lost, nlost);
        return 1;
    }
    if (status == SB_SCHED_ERROR || status == SB_SCHED_ERROR_DATA ||
        status == SB_SCHED_ERROR_PERMANENT) {
        complete_error(s, w, ti, status, message, outs, nouts);
        return 1;
    }
    sc_task_stop_running(s, t);
    complete_timing(s, t, metrics, now_ms);
    complete_rows(s, w, t, outs, nouts, metrics);
    if (record_outputs(s, ti, w, outs, nouts, err) != 0)
        return -1;
    t->state = T_DONE;
    o->done++;
    pieces_errored(s, ti, pieces, npieces);
    consume_inputs(s, t);
    if (t->op == 0 && o->xlimit > 0)
        sc_limit_cut(s);
    sc_check_finished(s);
    return 1;
}

int sb_sched_sink_schema_set(sb_sched *s, const char *schema)
{
    if (!s->infer_schema || s->sink_schema != NULL || schema == NULL || schema[0] == '\0')
        return 0;
    return (s->sink_schema = strdup(schema)) != NULL ? 1 : -1;
}

const char *sb_sched_sink_schema(const sb_sched *s)
{
    return s->sink_schema;
}

int sb_sched_publish(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                     const sb_storage_output *outs, size_t nouts, uint64_t now_ms, int *wait,
                     sb_err *err)
{
    *wait = 0;
    size_t w, ti;
    int found = sc_attempt_find(s, worker_id, task_id, attempt, "early outputs from", &w, &ti, err);
    if (found <= 0)
        return found;
    task *t = &s->tasks[ti];
    /* where early outputs are safe (as sc_fill_task_view asks); anything else waits for its
     * final report */
    if (!sc_early_safe(s, t))
        return 0;
    for (size_t i = 0; i < nouts; i++) {
        if (sc_record_part(s, ti, w, &outs[i], err) != 0)
            return -1;
        uint64_t b = outs[i].bytes < t->reserved ? outs[i].bytes : t->reserved;
        t->reserved -= b; /* what it made is in flight now, no longer an estimate */
        s->reserved_bytes -= b;
        t->pub_bytes += outs[i].bytes;
    }
    s->early_outputs += nouts;
    if (t->chunked) { /* the grant for its next output (see sc_early_wanted) */
        const op *o = &s->ops[t->op];
        uint64_t est = sc_estimate(s, o, t->in_bytes, t->op);
        uint64_t left = est > t->pub_bytes ? est - t->pub_bytes : 0;
        uint64_t want = o->max_part > 0 && o->max_part < left ? o->max_part : left;
        if (want > t->reserved) {
            uint64_t need = want - t->reserved;
            if (s->partition_bytes + s->reserved_bytes + need <= s->budget ||
                sc_grant_forced(s, ti)) {
                t->reserved += need;
                s->reserved_bytes += need;
            } else {
                *wait = 1;
            }
        }
        sc_set_waiting(s, t, *wait);
    }
    s->last_progress_ms = now_ms;
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    return 1;
}
