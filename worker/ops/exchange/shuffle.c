/* shuffle.c — random_shuffle's reduce side (xchg.h): a task's rows put in the order of their
 * seeded hashes, and, when its rows outgrow the task's memory, runs of them so ordered, spilled
 * to unnamed files and merged at the end. A run is a sequence of partition blobs of about
 * RUN_CHUNK bytes (each after its u64 length) whose rows are in (hash, input order) order, so the
 * merge, which takes the smallest hash and for equal ones the older run first, gives exactly the
 * order one in-memory sort gives. Chunks, not one blob per run: the spill writes its rows as it
 * orders them instead of making a sorted copy first, and the merge holds one chunk of each run
 * instead of mapping every run whole (a mapped page read counts in the worker's memory). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/exchange/xchg.h"

#define RUN_CHUNK ((size_t)4 << 20)

/* The hash that orders the rows: the stage's seed, apart from the buckets' (map side) hash. */
static uint64_t order_hash(const sb_batch *b, size_t row, uint64_t seed)
{
    return xrow_hash(b, row, seed ^ 0x5DEECE66DULL);
}

typedef struct {
    uint64_t h;
    size_t row;
} shuf;

static int shuf_cmp(const void *a, const void *b)
{
    const shuf *x = a, *y = b;
    if (x->h != y->h)
        return x->h < y->h ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

int xshuffle_emit_sorted(const sb_batch *b, uint64_t seed, sb_op_out *out, sb_err *err)
{
    size_t n = sb_batch_rows(b);
    shuf *o = calloc(n + 1, sizeof *o);
    if (o == NULL)
        return sb_err_set(err, "out of memory");
    for (size_t r = 0; r < n; r++)
        o[r] = (shuf){order_hash(b, r, seed), r};
    qsort(o, n, sizeof *o, shuf_cmp);
    int rc = n == 0 ? sb_op_out_set_schema_like(out, b, err) : 0;
    for (size_t k = 0; rc == 0 && k < n; k += 1024) {
        size_t m = n - k < 1024 ? n - k : 1024, ones[1024], firsts[1024];
        for (size_t i = 0; i < m; i++) {
            firsts[i] = o[k + i].row;
            ones[i] = 1;
        }
        rc = sb_op_out_append_runs(out, b, firsts, ones, m, err);
    }
    free(o);
    return rc;
}

struct xshuffle_runs {
    FILE **f;
    size_t n, cap;
    uint64_t bytes;
};

/* emit callback of a spill: each chunk of the run, after its length, into the run's file */
typedef struct {
    FILE *f;
    uint64_t bytes;
    int werr; /* errno of a failed write (0: none) */
} run_writer;

static int write_chunk(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    run_writer *w = ud;
    uint64_t n = len;
    errno = 0;
    int ok = fwrite(&n, sizeof n, 1, w->f) == 1 && fwrite(blob, 1, len, w->f) == len;
    sb_part_free(blob);
    w->bytes += sizeof n + len;
    if (!ok)
        w->werr = errno != 0 ? errno : EIO;
    return ok ? 0 : -1;
}

/* blob's rows in hash order into the run file w->f, in chunks. */
static int write_run(const void *blob, size_t len, uint64_t seed, run_writer *w, sb_err *err)
{
    sb_batch *b = NULL;
    if (sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, &b,
                         err) != 0)
        return -1;
    sb_op_out *o = sb_op_out_new(RUN_CHUNK, write_chunk, w, err);
    int rc = o == NULL ? -1 : xshuffle_emit_sorted(b, seed, o, err);
    /* the last chunk; a run of no rows gets one empty chunk (its schema) */
    if (rc == 0 && (sb_batch_builder_rows(sb_op_out_builder(o)) > 0 || w->bytes == 0))
        rc = sb_op_out_cut(o, err);
    sb_op_out_free(o);
    sb_batch_close(b);
    if (w->werr == 0 && rc == 0 && fflush(w->f) != 0)
        w->werr = errno != 0 ? errno : EIO;
    if (w->werr != 0)
        return sb_err_set(err, "random_shuffle: writing a spill file: %s", strerror(w->werr));
    return rc;
}

int xshuffle_spill(xshuffle_runs **rsp, const void *blob, size_t len, uint64_t seed, sb_err *err)
{
    xshuffle_runs *rs = *rsp;
    if (rs == NULL && (rs = *rsp = calloc(1, sizeof *rs)) == NULL)
        return sb_err_set(err, "out of memory");
    if (xfiles_room(&rs->f, &rs->cap, rs->n, err) != 0)
        return -1;
    run_writer w = {sb_op_spill_file(err), 0, 0};
    int rc = w.f == NULL ? -1 : write_run(blob, len, seed, &w, err);
    if (rc != 0) {
        if (w.f != NULL)
            fclose(w.f);
        return sb_err_wrap(err, "random_shuffle: spilling its rows");
    }
    rewind(w.f);
    rs->f[rs->n++] = w.f;
    rs->bytes += w.bytes;
    return 0;
}

uint64_t xshuffle_spilled(const xshuffle_runs *rs)
{
    return rs != NULL ? rs->bytes : 0;
}

void xshuffle_runs_free(xshuffle_runs *rs)
{
    if (rs == NULL)
        return;
    for (size_t i = 0; i < rs->n; i++)
        fclose(rs->f[i]);
    free(rs->f);
    free(rs);
}

/* One run being merged: its file, the chunk read from it (opened as a batch), its next row. */
typedef struct {
    FILE *f;
    void *chunk;
    sb_batch *b;
    size_t row, rows;
    uint64_t h;
    size_t run;
} mrun;

static int mrun_less(const void *ctx, const void *pa, const void *pb)
{
    (void)ctx;
    const mrun *a = pa, *b = pb;
    return a->h != b->h ? a->h < b->h : a->run < b->run;
}

static void heap_down(mrun **h, size_t n, size_t i)
{
    xheap_down((void **)h, n, i, mrun_less, NULL);
}

static void mrun_drop(mrun *m)
{
    sb_batch_close(m->b);
    sb_part_free(m->chunk);
    m->b = NULL;
    m->chunk = NULL;
    m->row = m->rows = 0;
}

/* Reads the run's next chunk into m (opened as a batch): 1, 0 at the run's end, -1 + err. */
static int chunk_read(mrun *m, sb_err *err)
{
    mrun_drop(m);
    uint64_t len;
    if (fread(&len, sizeof len, 1, m->f) != 1)
        return ferror(m->f)
                   ? sb_err_set(err, "random_shuffle: reading a spill file: %s", strerror(errno))
                   : 0;
    if (len == 0 || len > ((uint64_t)1 << 40) || (m->chunk = sb_part_alloc(len)) == NULL)
        return sb_err_set(err, "random_shuffle: a spill file's chunk of %llu bytes",
                          (unsigned long long)len);
    if (fread(m->chunk, 1, len, m->f) != len)
        return sb_err_set(err, "random_shuffle: a spill file ends inside a chunk");
    if (sb_batch_open_ex(m->chunk, len, SB_BATCH_OPEN_SKIP_UTF8, &m->b, err) != 0)
        return sb_err_wrap(err, "random_shuffle: a spill file");
    m->rows = sb_batch_rows(m->b);
    return 1;
}

/* The run's next chunk that has rows: 1, 0 at the run's end, -1 + err. */
static int mrun_next(mrun *m, sb_err *err)
{
    int rc;
    while ((rc = chunk_read(m, err)) > 0 && m->rows == 0)
        ;
    return rc;
}

/* Opens run m at its first chunk (whose schema out takes when it has none; every run has one);
 * 1 when it has a row, 0 when empty, -1 + err. */
static int mrun_open(mrun *m, FILE *f, size_t run, sb_op_out *out, sb_err *err)
{
    m->f = f;
    m->run = run;
    int rc = chunk_read(m, err);
    if (rc == 0)
        return sb_err_set(err, "random_shuffle: a spill file is empty");
    if (rc < 0 || (!sb_op_out_has_schema(out) && sb_op_out_set_schema_like(out, m->b, err) != 0))
        return -1;
    return m->rows > 0 ? 1 : mrun_next(m, err);
}

int xshuffle_merge(xshuffle_runs *rs, uint64_t seed, sb_op_out *out, sb_err *err)
{
    mrun *m = calloc(rs->n + 1, sizeof *m);
    mrun **h = calloc(rs->n + 1, sizeof *h);
    size_t n = 0;
    int rc = m == NULL || h == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t i = 0; rc == 0 && i < rs->n; i++) {
        int more = mrun_open(&m[i], rs->f[i], i, out, err);
        if (more < 0)
            rc = -1;
        else if (more > 0) {
            m[i].h = order_hash(m[i].b, 0, seed);
            h[n++] = &m[i];
        }
    }
    for (size_t i = n / 2; rc == 0 && i-- > 0;)
        heap_down(h, n, i);
    while (rc == 0 && n > 0) {
        mrun *t = h[0];
        rc = sb_op_out_append_rows(out, t->b, t->row, 1, err);
        int more = 1;
        if (rc == 0 && ++t->row == t->rows && (more = mrun_next(t, err)) < 0)
            rc = -1;
        if (more > 0)
            t->h = order_hash(t->b, t->row, seed);
        else
            h[0] = h[--n];
        heap_down(h, n, 0);
    }
    for (size_t i = 0; m != NULL && i < rs->n; i++)
        mrun_drop(&m[i]);
    free(m);
    free(h);
    return rc;
}
