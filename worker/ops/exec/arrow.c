/* arrow.c — the exec operator's framing "arrow" (docs/exec.md): the child reads one Arrow IPC
 * stream on stdin (a schema, then record batches of the task's rows, all columns) and writes one
 * on stdout.
 *
 *  - mode filter: one process per task; the input stream ends (end-of-stream marker, then stdin
 *    closes) when the task's input does; every batch the process writes is output, until its
 *    end-of-stream marker or end of file, and it must exit with status 0.
 *  - mode batches: a long-lived process; after each input batch it writes exactly one output
 *    batch (zero rows for none), which ends that batch. Its streams go on across tasks, so a
 *    pooled process is only reused for inputs with the same schema (the schema is part of the
 *    pool key).
 * An output stream may end (end-of-stream marker) and a new one with another schema begin: that
 * is how a process changes its output schema, or answers before it knows one (a batch of no
 * columns and no rows). The rows of one task must all have one schema.
 *
 * The process starts at the first batch of a task (a task without rows starts none). Input
 * batches are encoded into one reusable buffer per task (rows copied once, never a whole
 * partition); output messages are decoded in the process's read buffer and copied into the op's
 * output.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/exec/exec.h"

/* The pool key: the args, then each input column's name and type. */
static char *schema_key(const char *args, const sb_field *f, size_t n)
{
    size_t cap = strlen(args) + 2;
    for (size_t i = 0; i < n; i++)
        cap += strlen(f[i].name) + 56;
    char *k = malloc(cap);
    if (k == NULL)
        return NULL;
    size_t at = (size_t)snprintf(k, cap, "%s\n", args);
    for (size_t i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(k + at, cap - at, "%s\x1f%d.%d.%u.%d.%d\x1e", f[i].name,
                               (int)f[i].type, (int)f[i].child_type, (unsigned)f[i].list_size,
                               (int)f[i].nullable, (int)f[i].logical);
    return k;
}

static size_t fill(void *ud, struct iovec *iov, size_t max)
{
    sb_exec_state *s = ud;
    if (max == 0 || s->msg_at >= s->msg.len)
        return 0;
    iov[0] = (struct iovec){s->msg.p + s->msg_at, s->msg.len - s->msg_at};
    s->msg_at = s->msg.len;
    return 1;
}

/* One whole output message: a schema (kept), a batch (copied into the op's output; in mode
 * batches it ends the pump), or the end of the stream. */
static int on_message(void *ud, const uint8_t *p, size_t n, size_t *used, sb_err *err)
{
    sb_exec_state *s = ud;
    sb_exec_child *c = s->c;
    size_t total;
    *used = 0;
    int fr = sb_ipc_frame(p, n, SB_EXEC_MAX_OUTPUT, &total, err);
    if (fr < 0)
        return sb_err_wrap(err, "its output is not an Arrow IPC stream");
    if (fr > 0)
        return 0;
    *used = total;
    sb_ipc_kind kind;
    if (sb_ipc_read(&c->rd, p, total, &kind, err) != 0)
        return sb_err_wrap(err, "its output stream");
    if (kind == SB_IPC_EOS) { /* a new stream (a new schema) may follow */
        sb_ipc_reader_free(&c->rd);
        sb_ipc_reader_init(&c->rd);
        return 0;
    }
    if (kind != SB_IPC_BATCH)
        return 0;
    sb_ipc_reader *r = &c->rd;
    if (r->ncols == 0 && r->rows > 0)
        return sb_err_set(err, "its output batch has rows but no columns");
    if (r->rows > 0) {
        size_t bytes = 0;
        for (size_t i = 0; i < r->ncols; i++)
            bytes += r->cols[i].values_len + (r->cols[i].offsets ? 4 * r->rows : 0);
        if (sb_op_out_append_columns(s->out, r->fields, r->cols, r->ncols, 0, r->rows,
                                     bytes / r->rows + 1, err) != 0)
            return sb_err_wrap(err, "its output batch %llu",
                               (unsigned long long)r->batches); /* may run the next op */
    }
    if (s->cfg.mode == SB_EXEC_BATCHES) {
        s->delim_seen = true;
        return 1;
    }
    return 0;
}

/* Takes a pooled process for this input schema or starts one. */
static int take_child(sb_exec_state *s, const sb_field *f, size_t n, sb_err *err)
{
    char *key = schema_key(s->cfg.key, f, n);
    if (key == NULL)
        return sb_err_set(err, "out of memory");
    if (s->cfg.mode == SB_EXEC_BATCHES)
        s->c = sb_exec_pool_take(key);
    int rc = 0;
    if (s->c == NULL)
        rc = sb_exec_child_start(&s->cfg, key, &s->c, err);
    free(key);
    if (rc == 0)
        s->cpu0 = sb_proc_cpu_seconds(s->c->p);
    return rc;
}

static int send_batch(sb_exec_state *s, const sb_field *f, const sb_column *cols, size_t ncols,
                      size_t first, size_t n, sb_err *err)
{
    s->msg.len = 0;
    s->msg_at = 0;
    if (!s->c->schema_sent && sb_ipc_write_schema(&s->msg, f, ncols, err) != 0)
        return -1;
    s->c->schema_sent = true;
    if (sb_ipc_write_batch(&s->msg, cols, ncols, first, n, err) != 0)
        return -1;
    sb_proc_io io = {.fill = fill, .bytes = on_message, .ud = s};
    int64_t deadline = sb_proc_now_ms() + s->cfg.timeout_ms;
    s->clean = false;
    s->delim_seen = false;
    if (s->cfg.mode == SB_EXEC_FILTER) {
        if (s->cut)
            return 0; /* it took no more input */
        if (sb_proc_pump(s->c->p, &io, SB_PROC_UNTIL_WRITTEN, deadline, SB_EXEC_MAX_OUTPUT, err) !=
            0)
            return -1;
        s->cut = io.epipe;
        s->clean = true;
        return 0;
    }
    if (sb_proc_pump(s->c->p, &io, SB_PROC_UNTIL_LINE_OR_EOF, deadline, SB_EXEC_MAX_OUTPUT, err) !=
        0)
        return -1;
    if (!s->delim_seen) {
        int64_t dl = sb_proc_now_ms() + 2000;
        if (sb_proc_wait(s->c->p, dl, err) == 0)
            sb_err_set(err, "exited with status 0");
        return sb_err_wrap(err, "the process ended before answering the batch");
    }
    s->clean = true;
    return 0;
}

int sb_exec_arrow_process(sb_exec_state *s, const sb_batch *in, size_t first, size_t n,
                          sb_op_out *out, sb_err *err)
{
    if (n == 0)
        return 0;
    size_t ncols = sb_batch_ncols(in);
    sb_field *f = calloc(ncols ? ncols : 1, sizeof *f);
    sb_column *cols = calloc(ncols ? ncols : 1, sizeof *cols);
    int rc = -1;
    if (f == NULL || cols == NULL) {
        sb_err_set(err, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < ncols; i++) {
        cols[i] = *sb_batch_column(in, i);
        f[i] = sb_field_of(&cols[i]);
    }
    if (s->c == NULL && take_child(s, f, ncols, err) != 0)
        goto done;
    s->out = out;
    size_t step = s->cfg.batch ? s->cfg.batch : n;
    for (size_t at = first; at < first + n; at += step) {
        size_t k = first + n - at < step ? first + n - at : step;
        if (send_batch(s, f, cols, ncols, at, k, err) != 0) {
            sb_err_wrap(err, "exec (batch of records %zu-%zu)", at, at + k - 1);
            goto done;
        }
    }
    rc = 0;
done:
    free(f);
    free(cols);
    return rc;
}

int sb_exec_arrow_finish(sb_exec_state *s, sb_op_out *out, sb_err *err)
{
    if (s->c == NULL)
        return 0; /* no rows, no process */
    if (s->cfg.mode == SB_EXEC_BATCHES) {
        if (sb_proc_has_output(s->c->p)) {
            s->clean = false;
            return sb_err_set(err, "exec: the process wrote output after answering its last "
                                   "batch (one output batch per input batch)");
        }
        return 0;
    }
    s->out = out;
    s->clean = false;
    s->msg.len = 0;
    s->msg_at = 0;
    if (sb_ipc_write_eos(&s->msg, err) != 0)
        return -1;
    sb_proc_io io = {.fill = s->cut ? NULL : fill, .bytes = on_message, .ud = s};
    int64_t deadline = sb_proc_now_ms() + s->cfg.timeout_ms;
    if (sb_proc_pump(s->c->p, &io, SB_PROC_UNTIL_WRITTEN, deadline, SB_EXEC_MAX_OUTPUT, err) != 0)
        return sb_err_wrap(err, "exec");
    sb_proc_close_stdin(s->c->p);
    io.fill = NULL;
    if (sb_proc_pump(s->c->p, &io, SB_PROC_UNTIL_LINE_OR_EOF, deadline, SB_EXEC_MAX_OUTPUT, err) !=
            0 ||
        sb_proc_wait(s->c->p, deadline, err) != 0)
        return sb_err_wrap(err, "exec");
    return 0;
}
