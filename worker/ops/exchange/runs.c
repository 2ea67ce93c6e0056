/* runs.c — spilled sorted runs and their k-way merge (xchg.h), shared by every op that spills
 * under the memory budget: groupby's partials, sort's rows (reduce side), distinct's first rows
 * and sort's middle op (rows by range bucket). A run is a spill file (sb_op_spill_file: unnamed,
 * gone with its descriptor) of records "u32 key length, key, u32 record length, record", in the
 * order of the caller's comparator; the merge reads one record per run at a time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/exchange/xchg.h"

struct xruns {
    const char *op; /* for messages */
    FILE **f;       /* runs, oldest first; f[n] is the one being written (open) */
    size_t n, cap;
    int open;
    uint64_t spilled;
};

xruns *xruns_new(const char *op)
{
    xruns *rs = calloc(1, sizeof *rs);
    if (rs != NULL)
        rs->op = op;
    return rs;
}

size_t xruns_count(const xruns *rs)
{
    return rs != NULL ? rs->n : 0;
}

uint64_t xruns_spilled(const xruns *rs)
{
    return rs != NULL ? rs->spilled : 0;
}

static void close_files(xruns *rs)
{
    for (size_t i = 0; i < rs->n + (size_t)rs->open; i++)
        fclose(rs->f[i]);
    rs->n = 0;
    rs->open = 0;
}

void xruns_clear(xruns *rs)
{
    if (rs == NULL)
        return;
    close_files(rs);
    rs->spilled = 0;
}

void xruns_free(xruns *rs)
{
    if (rs == NULL)
        return;
    close_files(rs);
    free(rs->f);
    free(rs);
}

int xfiles_room(FILE ***f, size_t *cap, size_t n, sb_err *err)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 8;
    FILE **nf = realloc(*f, c * sizeof *nf);
    if (nf == NULL)
        return sb_err_set(err, "out of memory");
    *f = nf;
    *cap = c;
    return 0;
}

int xruns_begin(xruns *rs, sb_err *err)
{
    if (rs->open)
        return sb_err_set(err, "%s: a run begun twice", rs->op);
    if (xfiles_room(&rs->f, &rs->cap, rs->n + 1, err) != 0)
        return -1;
    if ((rs->f[rs->n] = sb_op_spill_file(err)) == NULL)
        return sb_err_wrap(err, "%s: spilling", rs->op);
    rs->open = 1;
    return 0;
}

static int put_u32(FILE *f, size_t v)
{
    uint32_t u = (uint32_t)v;
    return fwrite(&u, sizeof u, 1, f) == 1 ? 0 : -1;
}

int xruns_put(xruns *rs, const void *key, size_t kn, const void *rec, size_t rn, sb_err *err)
{
    FILE *f = rs->f[rs->n];
    if (kn > UINT32_MAX || rn > UINT32_MAX)
        return sb_err_permanent(err, "%s: a record of %zu bytes is too large to spill", rs->op, rn);
    if (put_u32(f, kn) || fwrite(key, 1, kn, f) != kn || put_u32(f, rn) ||
        fwrite(rec, 1, rn, f) != rn)
        return sb_err_set(err, "%s: writing a spill file: %s", rs->op, strerror(errno));
    rs->spilled += 8 + kn + rn;
    return 0;
}

int xruns_end(xruns *rs, sb_err *err)
{
    FILE *f = rs->f[rs->n];
    rs->open = 0;
    if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return sb_err_set(err, "%s: writing a spill file: %s", rs->op, strerror(errno));
    }
    rs->n++;
    return 0;
}

/* ---- the merge ------------------------------------------------------------------------------ */

typedef struct {
    FILE *f;
    xbuf key, rec;
    size_t run; /* its place among the runs: ties merge in this order */
} rhead;

typedef struct {
    const xruns *rs;
    xruns_cmp cmp;
    void *ctx;
} morder;

/* Reads n bytes of run r into b (b->n = n). 0, or -1 + err. */
static int rhead_read(const xruns *rs, rhead *r, xbuf *b, uint32_t n, sb_err *err)
{
    b->n = 0;
    if (xbuf_reserve(b, n) != 0)
        return sb_err_set(err, "out of memory");
    if (fread(b->p, 1, n, r->f) != n)
        return sb_err_set(err, "%s: a spill file ends inside a record", rs->op);
    b->n = n;
    return 0;
}

/* Reads run r's next record into its head: 1 read, 0 at the end, -1 + err. */
static int rhead_next(const xruns *rs, rhead *r, sb_err *err)
{
    uint32_t n;
    if (fread(&n, sizeof n, 1, r->f) != 1)
        return ferror(r->f)
                   ? sb_err_set(err, "%s: reading a spill file: %s", rs->op, strerror(errno))
                   : 0;
    if (rhead_read(rs, r, &r->key, n, err) != 0)
        return -1;
    if (fread(&n, sizeof n, 1, r->f) != 1)
        return sb_err_set(err, "%s: a spill file ends inside a record", rs->op);
    return rhead_read(rs, r, &r->rec, n, err) != 0 ? -1 : 1;
}

int xruns_bytes_cmp(void *ctx, const char *a, size_t an, const char *b, size_t bn)
{
    (void)ctx;
    size_t n = an < bn ? an : bn;
    int c = n > 0 ? memcmp(a, b, n) : 0; /* an empty key may have no buffer (NULL) */
    return c != 0 ? c : (an > bn) - (an < bn);
}

/* Heap order: the smaller key first, then the older run. */
static int rhead_less(const morder *o, const rhead *a, const rhead *b)
{
    int c = o->cmp(o->ctx, a->key.p, a->key.n, b->key.p, b->key.n);
    return c != 0 ? c < 0 : a->run < b->run;
}

void xheap_down(void **h, size_t n, size_t i, xheap_less less, const void *ctx)
{
    for (;;) {
        size_t m = i, l = 2 * i + 1, r = l + 1;
        if (l < n && less(ctx, h[l], h[m]))
            m = l;
        if (r < n && less(ctx, h[r], h[m]))
            m = r;
        if (m == i)
            return;
        void *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static int rhead_less_v(const void *o, const void *a, const void *b)
{
    return rhead_less(o, a, b);
}

static void heap_down(const morder *o, rhead **h, size_t n, size_t i)
{
    xheap_down((void **)h, n, i, rhead_less_v, o);
}

/* Every run's records in one order (cmp on the keys, then the run's age, then the order within
 * the run), handed to fn one at a time; the runs are closed after (xruns_spilled stays). */
int xruns_merge(xruns *rs, xruns_cmp cmp, void *ctx, xruns_fn fn, void *fctx, sb_err *err)
{
    morder o = {rs, cmp != NULL ? cmp : xruns_bytes_cmp, ctx};
    size_t nr = rs->n, n = 0;
    rhead *heads = calloc(nr + 1, sizeof *heads);
    rhead **h = calloc(nr + 1, sizeof *h);
    int rc = heads == NULL || h == NULL ? sb_err_set(err, "out of memory") : 0;
    for (size_t i = 0; rc == 0 && i < nr; i++) {
        heads[i].f = rs->f[i];
        heads[i].run = i;
        int more = rhead_next(rs, &heads[i], err);
        if (more < 0)
            rc = -1;
        else if (more > 0)
            h[n++] = &heads[i];
    }
    for (size_t i = n / 2; rc == 0 && i-- > 0;)
        heap_down(&o, h, n, i);
    while (rc == 0 && n > 0) {
        rhead *r = h[0];
        xruns_item it = {r->key.p, r->key.n, r->rec.p, r->rec.n, r->run};
        rc = fn(fctx, &it, err);
        int more = rc == 0 ? rhead_next(rs, r, err) : 0;
        if (more < 0)
            rc = -1;
        else if (more == 0)
            h[0] = h[--n];
        heap_down(&o, h, n, 0);
    }
    for (size_t i = 0; heads != NULL && i < nr; i++) {
        xbuf_free(&heads[i].key);
        xbuf_free(&heads[i].rec);
    }
    free(heads);
    free(h);
    close_files(rs);
    return rc;
}
