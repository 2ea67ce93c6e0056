/* ops.c — the operator registry, the batch-size loop, the "op NAME: " prefix of task
 * errors, the ops' spill files and the running attempt's cancel flag (see ops.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/ops/impls.h"
#include "worker/ops/ops.h"
#include "worker/ops/statecache.h"

static const sb_op_impl *const registry[] = {
    &sb_op_identity_impl,     &sb_op_spin_impl,
    &sb_op_sleep_impl,        &sb_op_filter_impl,
    &sb_op_project_impl,      &sb_op_exec_impl,
    &sb_op_plugin_impl,       &sb_op_mlp_impl,
    &sb_op_image_resize_impl, &sb_op_image_normalize_impl,
    &sb_op_exchange_map_impl, &sb_op_exchange_reduce_impl,
    &sb_op_join_impl,
};

/* The worker's idle op states, then every op's shutdown hook, in registry order (a cached
 * tensor.mlp state points at a model its shutdown frees). */
void sb_op_shutdown(void)
{
    sb_op_cache_clear(sb_op_cache_worker());
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (registry[i]->shutdown != NULL)
            registry[i]->shutdown();
}

static char spill_dir[4096] = "/tmp";

void sb_op_set_spill_dir(const char *dir)
{
    if (dir != NULL && *dir != '\0')
        snprintf(spill_dir, sizeof spill_dir, "%s", dir);
}

FILE *sb_op_spill_file(sb_err *err)
{
    int fd = open(spill_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        char path[4200]; /* a file system without O_TMPFILE: a name removed at once */
        snprintf(path, sizeof path, "%s/sb-op-spill-XXXXXX", spill_dir);
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0)
            unlink(path);
    }
    FILE *f = fd >= 0 ? fdopen(fd, "w+b") : NULL;
    if (f == NULL) {
        sb_err_set(err, "cannot make a spill file in %s: %s", spill_dir, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

/* The running attempt's cancel flag (see ops.h "Cancel"): the runtime's int, read atomically. */
static _Thread_local int *cancel_flag;

void sb_op_cancel_bind(int *flag)
{
    cancel_flag = flag;
}

bool sb_op_cancelled(void)
{
    return cancel_flag != NULL && __atomic_load_n(cancel_flag, __ATOMIC_RELAXED) != 0;
}

int sb_op_cancel_err(sb_err *err, const char *op)
{
    return sb_err_set(err, "op %s: cancelled (the attempt is no longer needed)", op);
}

const sb_op_impl *sb_op_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

int sb_op_run(const sb_op_impl *op, void *state, const sb_batch *in, size_t batch_size,
              sb_op_out *out, sb_err *err)
{
    size_t rows = sb_batch_rows(in);
    if (rows == 0)
        return op->process(state, in, 0, 0, out, err);
    size_t step = batch_size == 0 ? rows : batch_size;
    for (size_t first = 0; first < rows; first += step) {
        size_t n = rows - first < step ? rows - first : step;
        if (op->process(state, in, first, n, out, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- batches of exactly batchSize rows across a task's inputs ------------------------------ */

/* The carry is an sb_op_out that never cuts by size (its target is out of reach): rows are
 * appended to it with the same column copies an op's output uses, and sb_op_feed_flush() emits
 * them as one blob to carry_emit, which hands them to the op. A quarter of SIZE_MAX keeps
 * append_columns' room arithmetic from overflowing. */
#define CARRY_TARGET (SIZE_MAX / 4)

struct sb_op_feed {
    const sb_op_impl *op;
    void *state;
    size_t batch; /* > 0 */
    sb_op_out *out;
    sb_op_out *carry;   /* rows waiting for a full batch; NULL until the first remainder */
    size_t carried;     /* its rows */
    sb_err *err;        /* the push's or flush's, for carry_emit */
    sb_op_spare *spare; /* this thread's (thread_spare): the carry finishes into it */
};

/* One spare per thread (a worker's slot runs one task at a time), kept across its tasks: the
 * carry of every batch a slot gathers is finished into the same buffer (sb_op_spare). Freed
 * when the thread ends. */
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static int spare_key_ok;

static void spare_free(void *p)
{
    sb_op_spare *s = p;
    if (!s->lent)
        sb_part_free(s->p);
    free(s);
}

static void spare_key_make(void)
{
    spare_key_ok = pthread_key_create(&spare_key, spare_free) == 0;
}

static sb_op_spare *thread_spare(void)
{
    pthread_once(&spare_once, spare_key_make);
    if (!spare_key_ok)
        return NULL;
    sb_op_spare *s = pthread_getspecific(spare_key);
    if (s == NULL && (s = calloc(1, sizeof *s)) != NULL && pthread_setspecific(spare_key, s) != 0) {
        free(s);
        s = NULL;
    }
    return s;
}

sb_op_feed *sb_op_feed_new(const sb_op_impl *op, void *state, size_t batch_size, sb_op_out *out,
                           sb_err *err)
{
    if (op == NULL || out == NULL || batch_size == 0) {
        sb_err_set(err, "op feed: an op, an output and a batch size > 0 are needed");
        return NULL;
    }
    sb_op_feed *f = calloc(1, sizeof *f);
    if (f == NULL) {
        sb_err_set(err, "op feed: out of memory");
        return NULL;
    }
    *f = (sb_op_feed){.op = op, .state = state, .batch = batch_size, .out = out};
    return f;
}

void sb_op_feed_free(sb_op_feed *f)
{
    if (f == NULL)
        return;
    sb_op_out_free(f->carry);
    free(f);
}

size_t sb_op_feed_carried(const sb_op_feed *f)
{
    return f == NULL ? 0 : f->carried;
}

/* The carry's rows, one blob: one process() call over all of them. The blob was made here, and
 * its values were checked when they were first opened, so only its structure is verified. */
static int carry_emit(void *blob, size_t len, uint64_t rows, void *ud)
{
    sb_op_feed *f = ud;
    sb_batch *b = NULL;
    int rc = sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, &b,
                              f->err);
    if (rc == 0)
        rc = f->op->process(f->state, b, 0, (size_t)rows, f->out, f->err);
    sb_batch_close(b);
    if (f->spare != NULL && f->spare->lent && blob == f->spare->p)
        f->spare->lent = false; /* given back: the next batch is finished into it */
    else
        sb_part_free(blob);
    f->carried = 0;
    return rc;
}

int sb_op_feed_flush(sb_op_feed *f, sb_err *err)
{
    if (f == NULL || f->carry == NULL || f->carried == 0)
        return 0;
    f->err = err;
    return sb_op_out_flush(f->carry, err);
}

/* Makes the carry take in's schema: a carry of other columns is flushed first (a short batch)
 * and replaced. Only list widths differing (images of other sizes) is flushed by
 * sb_op_out_set_schema itself. */
static int carry_schema(sb_op_feed *f, const sb_batch *in, sb_err *err)
{
    if (f->carry != NULL && sb_op_out_set_schema_like(f->carry, in, err) == 0)
        return 0;
    sb_err_clear(err); /* other columns: not an error, a new carry */
    if (sb_op_feed_flush(f, err) != 0)
        return -1;
    sb_op_out_free(f->carry);
    f->carry = sb_op_out_new(CARRY_TARGET, carry_emit, f, err);
    if (f->carry == NULL)
        return -1;
    f->spare = thread_spare();
    sb_op_out_set_spare(f->carry, f->spare);
    return sb_op_out_set_schema_like(f->carry, in, err);
}

/* Appends rows [first, first+n) of in to the carry. */
static int carry_add(sb_op_feed *f, const sb_batch *in, size_t first, size_t n, sb_err *err)
{
    f->err = err;
    if (sb_op_out_append_rows(f->carry, in, first, n, err) != 0)
        return -1;
    f->carried += n;
    return 0;
}

int sb_op_feed_push(sb_op_feed *f, const sb_batch *in, sb_err *err)
{
    size_t rows = sb_batch_rows(in), first = 0;
    if (rows == 0 && f->carried == 0) /* as sb_op_run: the op sees the (empty) input's schema */
        return f->op->process(f->state, in, 0, 0, f->out, err);
    if (rows == 0)
        return 0;
    if (f->carried > 0) {
        if (carry_schema(f, in, err) != 0)
            return -1;
    }
    if (f->carried > 0) { /* fill the carry up to a batch, then hand it over */
        size_t need = f->batch - f->carried;
        first = rows < need ? rows : need;
        if (carry_add(f, in, 0, first, err) != 0)
            return -1;
        if (f->carried == f->batch && sb_op_feed_flush(f, err) != 0)
            return -1;
    }
    bool in_place = rows - first >= f->batch;
    for (; rows - first >= f->batch; first += f->batch) /* whole batches: in place */
        if (f->op->process(f->state, in, first, f->batch, f->out, err) != 0)
            return -1;
    if (first == rows)
        return 0;
    /* the op's last call on `in` ended before its last row: what it holds of `in` ends now */
    if (in_place && f->op->input_end != NULL && f->op->input_end(f->state, in, f->out, err) != 0)
        return -1;
    if (carry_schema(f, in, err) != 0)
        return -1;
    return carry_add(f, in, first, rows - first, err);
}

int sb_op_err_context(sb_err *err, const char *name)
{
    if (err == NULL || name == NULL)
        return -1;
    size_t nl = strlen(name);
    const char *m = err->msg;
    if (strncmp(m, "op ", 3) == 0 && strncmp(m + 3, name, nl) == 0 && m[3 + nl] == ':')
        return -1; /* the op said it already */
    int data = err->data;
    if (strncmp(m, name, nl) == 0 && (m[nl] == ':' || m[nl] == ' ')) {
        /* the op named itself ("exec: ...", "plugin libx: ..."): say once that it is an op */
        char joined[SB_ERR_MAX + 4];
        snprintf(joined, sizeof joined, "op %s", m);
        memcpy(err->msg, joined, SB_ERR_MAX - 1);
        err->msg[SB_ERR_MAX - 1] = '\0';
        err->data = data;
        return -1;
    }
    return sb_err_wrap(err, "op %s", name);
}

int sb_op_record_column(const sb_batch *in, const char *op, sb_err *err)
{
    int i = sb_batch_find(in, SB_OP_RECORD_COLUMN);
    if (i < 0) {
        for (size_t c = 0; c < sb_batch_ncols(in); c++) {
            sb_type t = sb_batch_column(in, c)->type;
            if (t != SB_TYPE_BINARY && t != SB_TYPE_UTF8)
                continue;
            if (i >= 0) {
                return sb_err_data(err,
                                   "%s: the input has no \"record\" column and several "
                                   "binary/utf8 columns",
                                   op);
            }
            i = (int)c;
        }
        if (i < 0) {
            return sb_err_data(err, "%s: the input has no \"record\" column (jsonl records)", op);
        }
    }
    const sb_column *c = sb_batch_column(in, (size_t)i);
    if (c->type != SB_TYPE_BINARY && c->type != SB_TYPE_UTF8) {
        return sb_err_data(err, "%s: column \"%.64s\" is %s, not utf8 records", op, c->name,
                           sb_type_name(c->type));
    }
    return i;
}

const char *sb_op_excerpt(const char *p, size_t n, char *buf, size_t cap)
{
    size_t max = cap - 4;
    size_t k = n < max ? n : max;
    if (k < n)
        while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80)
            k--;
    for (size_t i = 0; i < k; i++)
        buf[i] = (unsigned char)p[i] < 0x20 || p[i] == 0x7f ? '?' : p[i];
    if (k < n) {
        memcpy(buf + k, "...", 4);
    } else {
        buf[k] = '\0';
    }
    return buf;
}
