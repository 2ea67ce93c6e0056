/* Unit tests of where sb_op_out cuts partitions: the same rows must give the same partitions
 * (rows and bytes of each) however they are split into input batches and whichever append path
 * they take, since a lineage re-run remakes a lost partition by running its producer again on
 * inputs that may arrive in other pieces (chaos seed 8869762-56 lost a row that way). And each
 * cut is exact: right after the first row that brings the partition to the target. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/partition.h"
#include "worker/ops/ops.h"

TestSuite(op_out_cuts, .timeout = 60);

#define NROWS 3000
#define MAXP 4096

typedef struct {
    size_t n;
    size_t rows[MAXP];
    size_t bytes[MAXP];
    uint64_t first_id[MAXP];
} cuts;

static int keep(void *blob, size_t len, uint64_t rows, void *ud)
{
    cuts *c = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    cr_assert_lt(c->n, MAXP);
    c->rows[c->n] = rows;
    c->bytes[c->n] = len;
    const sb_column *id = sb_batch_column(b, 1);
    c->first_id[c->n] = ((const uint64_t *)id->values)[0];
    c->n++;
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

static const sb_field fields[] = {
    {.name = "s", .type = SB_TYPE_UTF8},
    {.name = "id", .type = SB_TYPE_UINT64},
    {.name = "v", .type = SB_TYPE_INT32, .nullable = true},
    {.name = "flag", .type = SB_TYPE_BOOL},
};

/* Row i's string: 1..180 bytes, lengths scattered so that batches have different averages. */
static size_t slen(size_t i)
{
    return (i * 7919u + (i / 100) * 131u) % 180u + 1;
}

/* Rows [a, b) as one opened batch (blob in *blob). */
static sb_batch *rows_batch(size_t a, size_t b, void **blob)
{
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(fields, 4, &e);
    cr_assert_not_null(bb, "%s", e.msg);
    char s[200];
    for (size_t i = a; i < b; i++) {
        memset(s, 'a' + (int)(i % 26), sizeof s);
        cr_assert_eq(sb_batch_builder_append_binary(bb, 0, s, slen(i), &e), 0, "%s", e.msg);
        cr_assert_eq(sb_batch_builder_append_uint(bb, 1, i, &e), 0, "%s", e.msg);
        int rc = i % 7 == 3 ? sb_batch_builder_append_null(bb, 2, &e)
                            : sb_batch_builder_append_int(bb, 2, (int64_t)(i * 3), &e);
        cr_assert_eq(rc, 0, "%s", e.msg);
        cr_assert_eq(sb_batch_builder_append_bool(bb, 3, i % 3 == 0, &e), 0, "%s", e.msg);
    }
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    sb_batch *out;
    cr_assert_eq(sb_batch_open(*blob, len, &out, &e), 0, "%s", e.msg);
    return out;
}

typedef enum { VIA_ROWS, VIA_RUNS, VIA_COLUMNS, VIA_COLUMNS_AT, VIA_COLUMNS_OF } via;

/* Feeds rows [0, NROWS) to a fresh sb_op_out of `target` bytes in input batches whose sizes
 * come from `sizes` (cycled; 0 = all rows in one batch), through `how`. */
static void feed(cuts *c, size_t target, const size_t *sizes, size_t nsizes, via how, bool unsealed)
{
    memset(c, 0, sizeof *c);
    sb_err e;
    sb_op_out *o = sb_op_out_new(target, keep, c, &e);
    cr_assert_not_null(o, "%s", e.msg);
    if (unsealed)
        sb_op_out_set_unsealed(o);
    size_t at = 0, si = 0;
    while (at < NROWS) {
        size_t n = sizes[si++ % nsizes];
        if (n == 0 || n > NROWS - at)
            n = NROWS - at;
        void *blob;
        sb_batch *in = rows_batch(at, at + n, &blob);
        int rc = 0;
        switch (how) {
        case VIA_ROWS:
            rc = sb_op_out_append_rows(o, in, 0, n, &e);
            break;
        case VIA_RUNS: { /* runs of 1, 2, 3, ... rows */
            size_t first[NROWS], len[NROWS], nr = 0;
            for (size_t r = 0, l = 1; r < n; r += l, l++) {
                first[nr] = r;
                len[nr++] = r + l <= n ? l : n - r;
            }
            rc = sb_op_out_append_runs(o, in, first, len, nr, &e);
            break;
        }
        case VIA_COLUMNS:
        case VIA_COLUMNS_AT:
        case VIA_COLUMNS_OF: {
            sb_column cols[4];
            size_t firsts[4] = {0};
            for (size_t ci = 0; ci < 4; ci++)
                cols[ci] = *sb_batch_column(in, ci);
            rc = how == VIA_COLUMNS ? sb_op_out_append_columns(o, fields, cols, 4, 0, n, 1, &e)
                 : how == VIA_COLUMNS_OF
                     ? sb_op_out_append_columns_of(o, in, fields, cols, 4, 0, n, &e)
                     : sb_op_out_append_columns_at(o, fields, cols, firsts, 4, n, 999999, &e);
            break;
        }
        }
        cr_assert_eq(rc, 0, "%s", e.msg);
        sb_batch_close(in);
        sb_part_free(blob);
        at += n;
    }
    cr_assert_eq(sb_op_out_flush(o, &e), 0, "%s", e.msg);
    sb_op_out_free(o);
    size_t total = 0;
    for (size_t p = 0; p < c->n; p++)
        total += c->rows[p];
    cr_assert_eq(total, NROWS);
}

static void assert_same(const cuts *a, const cuts *b, const char *what)
{
    cr_assert_eq(a->n, b->n, "%s: %zu partitions, then %zu", what, a->n, b->n);
    for (size_t p = 0; p < a->n; p++) {
        cr_assert_eq(a->rows[p], b->rows[p], "%s: partition %zu has %zu rows, then %zu", what, p,
                     a->rows[p], b->rows[p]);
        cr_assert_eq(a->bytes[p], b->bytes[p], "%s: partition %zu has %zu bytes, then %zu", what, p,
                     a->bytes[p], b->bytes[p]);
    }
}

/* Each cut is right after the first row that brings the builder to the target: every
 * partition but the last reaches it, and the same rows without the last one do not. */
static void assert_exact(const cuts *c, size_t target)
{
    sb_err e;
    for (size_t p = 0; p + 1 < c->n; p++) {
        cr_assert_geq(c->bytes[p], target, "partition %zu: %zu bytes", p, c->bytes[p]);
        if (c->rows[p] < 2)
            continue;
        void *blob;
        size_t first = (size_t)c->first_id[p];
        sb_batch *in = rows_batch(first, first + c->rows[p] - 1, &blob);
        sb_batch_builder *bb = sb_batch_builder_new_like(in, &e);
        cr_assert_not_null(bb, "%s", e.msg);
        for (size_t ci = 0; ci < 4; ci++) {
            const sb_column *col = sb_batch_column(in, ci);
            int rc;
            if (col->type == SB_TYPE_UTF8)
                rc = sb_batch_builder_append_range(bb, ci, col, 0, col->length, false, &e);
            else if (col->type == SB_TYPE_BOOL) {
                rc = 0;
                for (size_t r = 0; r < col->length && rc == 0; r++)
                    rc = sb_batch_builder_append_bool(bb, ci, sb_column_bool(col, r), &e);
            } else if (col->type == SB_TYPE_UINT64) {
                rc = 0;
                for (size_t r = 0; r < col->length && rc == 0; r++)
                    rc = sb_batch_builder_append_uint(bb, ci, ((const uint64_t *)col->values)[r],
                                                      &e);
            } else {
                rc = 0;
                for (size_t r = 0; r < col->length && rc == 0; r++)
                    rc = !sb_column_valid(col, r)
                             ? sb_batch_builder_append_null(bb, ci, &e)
                             : sb_batch_builder_append_int(bb, ci,
                                                           ((const int32_t *)col->values)[r], &e);
            }
            cr_assert_eq(rc, 0, "%s", e.msg);
        }
        cr_assert_lt(sb_batch_builder_bytes(bb), target,
                     "partition %zu (%zu rows, %zu bytes) was already full a row earlier", p,
                     c->rows[p], c->bytes[p]);
        sb_batch_builder_free(bb);
        sb_batch_close(in);
        sb_part_free(blob);
    }
}

static const size_t all[] = {0};
static const size_t odd[] = {1, 97, 13, 250, 2, 511, 64, 3, 1000, 7};
static const size_t ones[] = {1};
static const size_t halves[] = {1500};

Test(op_out_cuts, same_rows_same_partitions_whatever_the_batches)
{
    static const size_t targets[] = {4096, 16384, 32768, 100};
    static cuts ref, got;
    for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
        feed(&ref, targets[t], all, 1, VIA_ROWS, false);
        cr_assert_gt(ref.n, targets[t] >= 32768 ? 8u : 20u);
        if (targets[t] >= 4096)
            assert_exact(&ref, targets[t]);
        const size_t *splits[] = {odd, ones, halves};
        const size_t nsplit[] = {10, 1, 1};
        for (size_t s = 0; s < 3; s++) {
            for (via how = VIA_ROWS; how <= VIA_COLUMNS_OF; how++) {
                char what[96];
                snprintf(what, sizeof what, "target %zu, split %zu, path %d", targets[t], s,
                         (int)how);
                feed(&got, targets[t], splits[s], nsplit[s], how, false);
                assert_same(&ref, &got, what);
            }
        }
    }
}

/* One utf8 column for the next op of the task (unsealed: built in place): one value at a time
 * (sb_op_out_append_binary) and in batches cut the same. */
typedef struct {
    size_t n, rows[MAXP], bytes[MAXP];
} cuts1;

static int keep1(void *blob, size_t len, uint64_t rows, void *ud)
{
    cuts1 *c = ud;
    cr_assert_lt(c->n, MAXP);
    c->rows[c->n] = rows;
    c->bytes[c->n++] = len;
    sb_part_free(blob);
    return 0;
}

Test(op_out_cuts, one_column_in_place_values_or_batches)
{
    static const sb_field f1 = {.name = "record", .type = SB_TYPE_UTF8};
    static cuts1 a, b;
    sb_err e;
    char s[200];
    for (int unsealed = 0; unsealed < 2; unsealed++) {
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        sb_op_out *oa = sb_op_out_new(16384, keep1, &a, &e);
        sb_op_out *ob = sb_op_out_new(16384, keep1, &b, &e);
        cr_assert(oa != NULL && ob != NULL);
        if (unsealed) {
            sb_op_out_set_unsealed(oa);
            sb_op_out_set_unsealed(ob);
        }
        cr_assert_eq(sb_op_out_set_schema(oa, &f1, 1, &e), 0, "%s", e.msg);
        for (size_t i = 0; i < NROWS; i++) {
            memset(s, 'x', sizeof s);
            cr_assert_eq(sb_op_out_append_binary(oa, s, slen(i) % 90, &e), 0, "%s", e.msg);
        }
        size_t at = 0, si = 0;
        while (at < NROWS) {
            size_t n = odd[si++ % 10];
            if (n > NROWS - at)
                n = NROWS - at;
            sb_batch_builder *bb = sb_batch_builder_new(&f1, 1, &e);
            for (size_t i = at; i < at + n; i++)
                cr_assert_eq(sb_batch_builder_append_binary(bb, 0, s, slen(i) % 90, &e), 0);
            void *blob;
            size_t len;
            sb_batch *in;
            cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0, "%s", e.msg);
            cr_assert_eq(sb_batch_open(blob, len, &in, &e), 0, "%s", e.msg);
            cr_assert_eq(sb_op_out_append_rows(ob, in, 0, n, &e), 0, "%s", e.msg);
            sb_batch_close(in);
            sb_part_free(blob);
            sb_batch_builder_free(bb);
            at += n;
        }
        cr_assert_eq(sb_op_out_flush(oa, &e), 0, "%s", e.msg);
        cr_assert_eq(sb_op_out_flush(ob, &e), 0, "%s", e.msg);
        sb_op_out_free(oa);
        sb_op_out_free(ob);
        cr_assert_gt(a.n, 5u);
        cr_assert_eq(a.n, b.n, "unsealed %d: %zu partitions, then %zu", unsealed, a.n, b.n);
        for (size_t p = 0; p < a.n; p++) {
            cr_assert_eq(a.rows[p], b.rows[p], "unsealed %d: partition %zu: %zu rows, then %zu",
                         unsealed, p, a.rows[p], b.rows[p]);
            cr_assert_eq(a.bytes[p], b.bytes[p], "unsealed %d: partition %zu: %zu bytes, then %zu",
                         unsealed, p, a.bytes[p], b.bytes[p]);
        }
    }
}

/* ---- held rows (sb_op_out_set_held): a cut copies the offsets, not the rows ---------------- */

/* This process's resident memory now, in bytes (/proc/self/statm's second field). */
static size_t rss_now(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert_not_null(f);
    unsigned long size = 0, res = 0;
    cr_assert_eq(fscanf(f, "%lu %lu", &size, &res), 2);
    fclose(f);
    return (size_t)res * 4096;
}

typedef struct {
    size_t rss_before; /* before the cut */
    size_t grew;       /* resident memory the cut added, seen from its emit callback */
    void *blob;
    size_t len;
    uint64_t rows;
} held_cut;

static int catch_held(void *blob, size_t len, uint64_t rows, void *ud)
{
    held_cut *h = ud;
    size_t now = rss_now();
    h->grew = now > h->rss_before ? now - h->rss_before : 0;
    h->blob = blob;
    h->len = len;
    h->rows = rows;
    return 0;
}

/* Row i of the held tests: `size` bytes, its first 8 the row number. */
static void held_row(char *s, size_t i, size_t size)
{
    memset(s, 'a' + (int)(i % 26), size);
    memcpy(s, &i, sizeof i);
}

/* rows rows of `size` bytes into a whole output (held or not), cut once; returns what the cut
 * added to the resident memory, and checks the blob holds exactly the rows, in order. */
static size_t held_cut_rows(int held, size_t rows, size_t size)
{
    static const sb_field f1 = {.name = "record", .type = SB_TYPE_BINARY};
    held_cut h = {0};
    sb_err e;
    sb_op_out *o = sb_op_out_new(SIZE_MAX / 4, catch_held, &h, &e);
    cr_assert_not_null(o, "%s", e.msg);
    if (held)
        sb_op_out_set_held(o, rows * size);
    cr_assert_eq(sb_op_out_set_schema(o, &f1, 1, &e), 0, "%s", e.msg);
    char s[4096];
    cr_assert_leq(size, sizeof s);
    for (size_t i = 0; i < rows; i++) {
        held_row(s, i, size);
        cr_assert_eq(sb_op_out_append_binary(o, s, size, &e), 0, "%s", e.msg);
    }
    h.rss_before = rss_now();
    cr_assert_eq(sb_op_out_cut(o, &e), 0, "%s", e.msg);
    cr_assert_not_null(h.blob);
    cr_assert_eq(h.rows, rows);
    sb_batch *b;
    unsigned flags = held ? SB_BATCH_OPEN_SKIP_CHECKSUM : 0;
    cr_assert_eq(sb_batch_open_ex(h.blob, h.len, flags, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, 0);
    for (size_t i = 0; i < rows; i++) {
        size_t len;
        const char *p = sb_column_binary(c, i, &len);
        held_row(s, i, size);
        cr_assert(len == size && memcmp(p, s, size) == 0, "held %d: row %zu differs", held, i);
    }
    sb_batch_close(b);
    sb_part_free(h.blob);
    sb_op_out_free(o);
    return h.grew;
}

/* The sort's and random_shuffle's held rows are cut to be sorted or spilled (worker/ops/exchange):
 * a copy there held every row twice while it was sorted (a 1 GiB sort's reduce tasks peaked at
 * 2.7x their rows). 32 MiB of 512-byte rows: the plain whole output's cut adds the rows to the
 * resident memory (the check sees a copy), the held one only its offsets (4 bytes a row). */
Test(op_out_cuts, a_held_output_cut_copies_no_rows)
{
    size_t rows = 65536, size = 512, bytes = rows * size;
    size_t plain = held_cut_rows(0, rows, size);
    size_t held = held_cut_rows(1, rows, size);
    cr_assert_geq(plain, bytes * 3 / 4, "the plain cut added %zu bytes for %zu of rows", plain,
                  bytes);
    cr_assert_lt(held, bytes / 8, "the held cut added %zu bytes for %zu of rows", held, bytes);
}

/* More rows than a held output has room for offsets of (records under 64 bytes on average)
 * still come out whole: the cut copies them, as an output not held does. */
Test(op_out_cuts, a_held_output_of_tiny_rows_comes_out_whole)
{
    held_cut_rows(1, 200000, 8);
    held_cut_rows(1, 1, 8);
}
