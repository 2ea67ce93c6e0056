/* shuffle.c — random_shuffle's reduce side (xchg.h): a task's rows put in the order of their
 * seeded hashes, and, when its rows outgrow the task's memory, runs of them so ordered, spilled
 * to unnamed files and merged at the end. A run is a whole partition blob whose rows are in
 * (hash, input order) order, so the merge, which takes the smallest hash and for equal ones the
 * older run first, gives exactly the order one in-memory sort gives. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "worker/ops/exchange/xchg.h"

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

/* emit callback of the sorted copy: the one blob it makes */
typedef struct {
    void *blob;
    size_t len;
} caught;

static int catch_blob(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    caught *c = ud;
    sb_part_free(c->blob);
    c->blob = blob;
    c->len = len;
    return 0;
}

/* blob's rows in hash order into one new blob (*sorted, *len). */
static int sort_blob(const void *blob, size_t len, uint64_t seed, caught *c, sb_err *err)
{
    sb_batch *b = NULL;
    if (sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, &b,
                         err) != 0)
        return -1;
    sb_op_out *o = sb_op_out_new(SIZE_MAX / 4, catch_blob, c, err);
    int rc = o == NULL ? -1 : xshuffle_emit_sorted(b, seed, o, err);
    if (rc == 0)
        rc = sb_op_out_cut(o, err);
    sb_op_out_free(o);
    sb_batch_close(b);
    return rc;
}

int xshuffle_spill(xshuffle_runs **rsp, const void *blob, size_t len, uint64_t seed, sb_err *err)
{
    xshuffle_runs *rs = *rsp;
    if (rs == NULL && (rs = *rsp = calloc(1, sizeof *rs)) == NULL)
        return sb_err_set(err, "out of memory");
    if (xfiles_room(&rs->f, &rs->cap, rs->n, err) != 0)
        return -1;
    caught c = {0};
    if (sort_blob(blob, len, seed, &c, err) != 0) {
        sb_part_free(c.blob);
        return -1;
    }
    FILE *f = sb_op_spill_file(err);
    int rc = f == NULL ? -1 : 0;
    if (rc == 0 && (fwrite(c.blob, 1, c.len, f) != c.len || fflush(f) != 0))
        rc = sb_err_set(err, "random_shuffle: writing a spill file: %s", strerror(errno));
    sb_part_free(c.blob);
    if (rc != 0) {
        if (f != NULL)
            fclose(f);
        return sb_err_wrap(err, "random_shuffle: spilling its rows");
    }
    rs->f[rs->n++] = f;
    rs->bytes += c.len;
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

/* One run being merged: its file mapped, opened as a batch, and its next row. */
typedef struct {
    void *map;
    size_t len;
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

static int mrun_open(mrun *m, FILE *f, size_t run, sb_err *err)
{
    struct stat st;
    m->run = run;
    if (fstat(fileno(f), &st) != 0 || st.st_size <= 0)
        return sb_err_set(err, "random_shuffle: a spill file cannot be read: %s", strerror(errno));
    m->len = (size_t)st.st_size;
    m->map = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        return sb_err_set(err, "random_shuffle: mapping a spill file: %s", strerror(errno));
    }
    if (sb_batch_open_ex(m->map, m->len, SB_BATCH_OPEN_SKIP_UTF8, &m->b, err) != 0)
        return sb_err_wrap(err, "random_shuffle: a spill file");
    m->rows = sb_batch_rows(m->b);
    return 0;
}

int xshuffle_merge(xshuffle_runs *rs, uint64_t seed, sb_op_out *out, sb_err *err)
{
    mrun *m = calloc(rs->n + 1, sizeof *m);
    mrun **h = calloc(rs->n + 1, sizeof *h);
    size_t n = 0;
    int rc = m == NULL || h == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t i = 0; rc == 0 && i < rs->n; i++) {
        rc = mrun_open(&m[i], rs->f[i], i, err);
        if (rc == 0 && i == 0)
            rc = sb_op_out_has_schema(out) ? 0 : sb_op_out_set_schema_like(out, m[i].b, err);
        if (rc == 0 && m[i].rows > 0) {
            m[i].h = order_hash(m[i].b, 0, seed);
            h[n++] = &m[i];
        }
    }
    for (size_t i = n / 2; rc == 0 && i-- > 0;)
        heap_down(h, n, i);
    while (rc == 0 && n > 0) {
        mrun *t = h[0];
        rc = sb_op_out_append_rows(out, t->b, t->row, 1, err);
        if (++t->row < t->rows)
            t->h = order_hash(t->b, t->row, seed);
        else
            h[0] = h[--n];
        heap_down(h, n, 0);
    }
    for (size_t i = 0; m != NULL && i < rs->n; i++) {
        sb_batch_close(m[i].b);
        if (m[i].map != NULL)
            munmap(m[i].map, m[i].len);
    }
    free(m);
    free(h);
    return rc;
}
