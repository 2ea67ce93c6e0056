/* Unit tests of the batch rule (worker/ops/ops.h, sb_op_feed): an op with a batchSize gets
 * exactly that many rows per process() call across partitions, only the task's last call
 * shorter; every row arrives exactly once, in order; whole batches of a partition are
 * processed in place; a partition of other columns flushes the carried rows first. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/partition.h"
#include "worker/ops/ops.h"

TestSuite(op_feed, .timeout = 60);

/* A recording op: each call's row count, whether it read the pushed batch itself (in place),
 * and every row's int64 "v" (or, for other schemas, the row count only) in order. */
typedef struct {
    size_t calls[8192];
    bool in_place[8192];
    size_t ncalls;
    int64_t seen[100000];
    size_t nseen;
    const sb_batch *pushed; /* the batch of the current push */
} rec;

static int rec_init(const char *args, void **st, sb_err *err)
{
    (void)args;
    (void)err;
    *st = NULL;
    return 0;
}

static int rec_process(void *st, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                       sb_err *err)
{
    rec *r = st;
    cr_assert_lt(r->ncalls, 8192);
    r->in_place[r->ncalls] = in == r->pushed;
    r->calls[r->ncalls++] = n;
    int ci = sb_batch_find(in, "v");
    for (size_t i = 0; ci >= 0 && i < n; i++) {
        const sb_column *c = sb_batch_column(in, (size_t)ci);
        if (c->type == SB_TYPE_INT64) {
            cr_assert_lt(r->nseen, 100000);
            r->seen[r->nseen++] = sb_column_int64(c, first + i);
        }
    }
    return sb_op_out_append_rows(out, in, first, n, err);
}

static const sb_op_impl rec_impl = {.name = "rec", .init = rec_init, .process = rec_process};

static int drop(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)len;
    *(uint64_t *)ud += rows;
    sb_part_free(blob);
    return 0;
}

/* A partition of n rows of int64 "v" = start, start+1, ... (and, when `wide`, a utf8 "s"). */
static void *part(int64_t start, size_t n, bool wide, size_t *len)
{
    sb_field f[2] = {{.name = "v", .type = SB_TYPE_INT64}, {.name = "s", .type = SB_TYPE_UTF8}};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(f, wide ? 2 : 1, &e);
    cr_assert_not_null(b, "%s", e.msg);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(sb_batch_builder_append_int(b, 0, start + (int64_t)i, &e), 0, "%s", e.msg);
        if (wide)
            cr_assert_eq(sb_batch_builder_append_binary(b, 1, "xy", 2, &e), 0, "%s", e.msg);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    return blob;
}

/* Pushes partitions of sizes[i] rows through a feed of batch B and flushes it; the rows are
 * numbered 0, 1, ... across all partitions. */
static void run(rec *r, size_t B, const size_t *sizes, size_t nparts, uint64_t *emitted)
{
    sb_err e;
    sb_op_out *out = sb_op_out_new((size_t)1 << 30, drop, emitted, &e);
    cr_assert_not_null(out);
    sb_op_feed *f = sb_op_feed_new(&rec_impl, r, B, out, &e);
    cr_assert_not_null(f, "%s", e.msg);
    int64_t next = 0;
    for (size_t i = 0; i < nparts; i++) {
        size_t len;
        void *blob = part(next, sizes[i], false, &len);
        next += (int64_t)sizes[i];
        sb_batch *b;
        cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
        r->pushed = b;
        cr_assert_eq(sb_op_feed_push(f, b, &e), 0, "%s", e.msg);
        cr_assert_lt(sb_op_feed_carried(f), B);
        r->pushed = NULL;
        sb_batch_close(b);
        sb_part_free(blob);
    }
    cr_assert_eq(sb_op_feed_flush(f, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_op_feed_carried(f), 0);
    sb_op_feed_free(f);
    cr_assert_eq(sb_op_out_flush(out, &e), 0, "%s", e.msg);
    sb_op_out_free(out);
}

/* Every row 0..total-1 exactly once, in order. */
static void every_row_once(const rec *r, size_t total)
{
    cr_assert_eq(r->nseen, total, "%zu rows seen of %zu", r->nseen, total);
    for (size_t i = 0; i < total; i++)
        cr_assert_eq(r->seen[i], (int64_t)i, "row %zu is %lld", i, (long long)r->seen[i]);
}

Test(op_feed, one_row_partitions_give_exact_batches)
{
    static rec r;
    memset(&r, 0, sizeof r);
    size_t sizes[1500];
    for (size_t i = 0; i < 1500; i++)
        sizes[i] = 1;
    uint64_t emitted = 0;
    run(&r, 512, sizes, 1500, &emitted);
    cr_assert_eq(r.ncalls, 3);
    cr_assert_eq(r.calls[0], 512);
    cr_assert_eq(r.calls[1], 512);
    cr_assert_eq(r.calls[2], 1500 - 1024);
    every_row_once(&r, 1500);
    cr_assert_eq(emitted, 1500);
}

Test(op_feed, uneven_partitions_carry_the_remainder)
{
    /* the case: batchSize 16 over partitions of 26 rows (calls were 16, 10, 16, 10) */
    static rec r;
    memset(&r, 0, sizeof r);
    size_t sizes[] = {26, 26, 26, 3, 0, 40, 1, 7};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        total += sizes[i];
    uint64_t emitted = 0;
    run(&r, 16, sizes, sizeof sizes / sizeof *sizes, &emitted);
    for (size_t i = 0; i + 1 < r.ncalls; i++)
        cr_assert_eq(r.calls[i], 16, "call %zu had %zu rows", i, r.calls[i]);
    cr_assert_eq(r.ncalls, (total + 15) / 16);
    cr_assert_eq(r.calls[r.ncalls - 1], total % 16 ? total % 16 : 16);
    every_row_once(&r, total);
    cr_assert_eq(emitted, total);
}

Test(op_feed, whole_batches_are_processed_in_place)
{
    static rec r;
    memset(&r, 0, sizeof r);
    size_t sizes[] = {30, 10}; /* 10 in place, 10 in place, 10 carried; then carried+0 -> 20 */
    uint64_t emitted = 0;
    run(&r, 10, sizes, 2, &emitted);
    cr_assert_eq(r.ncalls, 4);
    cr_assert(r.in_place[0] && r.in_place[1] && r.in_place[2]);
    cr_assert(r.in_place[3]); /* the second partition is a whole batch: nothing was carried */
    every_row_once(&r, 40);

    memset(&r, 0, sizeof r);
    size_t odd[] = {5, 22, 3};
    emitted = 0;
    run(&r, 10, odd, 3, &emitted);
    /* 5 carried, +5 -> carry call; 10 in place; 7 carried, +3 -> carry call */
    cr_assert_eq(r.ncalls, 3);
    cr_assert(!r.in_place[0]);
    cr_assert(r.in_place[1]);
    cr_assert(!r.in_place[2]);
    every_row_once(&r, 30);
}

/* An op that only counts (no output): the carry of one schema is handed over short when a
 * partition of other columns comes, and the new one starts a carry of its own. */
static int count_process(void *st, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                         sb_err *err)
{
    (void)out;
    (void)err;
    rec *r = st;
    r->in_place[r->ncalls] = sb_batch_ncols(in) == 2; /* here: "wide" */
    r->calls[r->ncalls++] = n;
    const sb_column *c = sb_batch_column(in, 0);
    for (size_t i = 0; i < n; i++)
        r->seen[r->nseen++] = sb_column_int64(c, first + i);
    return 0;
}

static const sb_op_impl count_impl = {.name = "count", .init = rec_init, .process = count_process};

Test(op_feed, a_schema_change_flushes_the_carry_as_a_short_batch)
{
    static rec r;
    memset(&r, 0, sizeof r);
    sb_err e;
    uint64_t emitted = 0;
    sb_op_out *out = sb_op_out_new(1 << 20, drop, &emitted, &e);
    sb_op_feed *f = sb_op_feed_new(&count_impl, &r, 8, out, &e);
    cr_assert_not_null(f);
    size_t sizes[] = {5, 6, 4, 3};
    bool wide[] = {false, true, true, false};
    int64_t next = 0;
    for (size_t i = 0; i < 4; i++) {
        size_t len;
        void *blob = part(next, sizes[i], wide[i], &len);
        next += (int64_t)sizes[i];
        sb_batch *b;
        cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
        cr_assert_eq(sb_op_feed_push(f, b, &e), 0, "%s", e.msg);
        sb_batch_close(b);
        sb_part_free(blob);
    }
    cr_assert_eq(sb_op_feed_flush(f, &e), 0, "%s", e.msg);
    sb_op_feed_free(f);
    sb_op_out_free(out);
    /* 5 narrow (flushed by the wide), 8 wide, 2 wide (flushed by the narrow), 3 narrow */
    cr_assert_eq(r.ncalls, 4);
    cr_assert_eq(r.calls[0], 5);
    cr_assert(!r.in_place[0]);
    cr_assert_eq(r.calls[1], 8);
    cr_assert(r.in_place[1]);
    cr_assert_eq(r.calls[2], 2);
    cr_assert_eq(r.calls[3], 3);
    every_row_once(&r, 18);
}

Test(op_feed, empty_input_reaches_the_op_when_nothing_is_carried)
{
    static rec r;
    memset(&r, 0, sizeof r);
    size_t sizes[] = {0};
    uint64_t emitted = 0;
    run(&r, 4, sizes, 1, &emitted);
    cr_assert_eq(r.ncalls, 1);
    cr_assert_eq(r.calls[0], 0);
}

/* An op that keeps its last batch "in flight" (as tensor.mlp on CUDA does): it must be told
 * (input_end) before a partition whose last row it did not get goes away, and never holds a
 * batch of another partition than the one it is called with. */
typedef struct {
    const sb_batch *held; /* the batch of the call in flight, NULL when none */
    size_t held_end;      /* the row after its rows */
    size_t ends, calls;
} holder;

static int hold_process(void *st, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                        sb_err *err)
{
    (void)out;
    (void)err;
    holder *h = st;
    h->calls++;
    cr_assert(h->held == NULL || h->held == in, "a batch of another partition is still held");
    h->held = in;
    h->held_end = first + n;
    if (first + n >= sb_batch_rows(in))
        h->held = NULL; /* the partition's last rows: completed at once */
    return 0;
}

static int hold_end(void *st, const sb_batch *in, sb_op_out *out, sb_err *err)
{
    (void)out;
    (void)err;
    holder *h = st;
    cr_assert_eq(h->held, in, "input_end names the held partition");
    cr_assert_lt(h->held_end, sb_batch_rows(in));
    h->held = NULL;
    h->ends++;
    return 0;
}

static const sb_op_impl hold_impl = {
    .name = "hold", .init = rec_init, .process = hold_process, .input_end = hold_end};

Test(op_feed, an_op_holding_its_input_is_told_when_a_partition_ends_early)
{
    holder h = {0};
    sb_err e;
    uint64_t emitted = 0;
    sb_op_out *out = sb_op_out_new(1 << 20, drop, &emitted, &e);
    sb_op_feed *f = sb_op_feed_new(&hold_impl, &h, 10, out, &e);
    size_t sizes[] = {25, 5, 40, 13, 7};
    int64_t next = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t len;
        void *blob = part(next, sizes[i], false, &len);
        next += (int64_t)sizes[i];
        sb_batch *b;
        cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
        cr_assert_eq(sb_op_feed_push(f, b, &e), 0, "%s", e.msg);
        cr_assert_null(h.held, "partition %zu is still held after its push", i);
        sb_batch_close(b);
        sb_part_free(blob);
    }
    cr_assert_eq(sb_op_feed_flush(f, &e), 0);
    cr_assert_null(h.held);
    /* 25: 2 in place, 5 carried (ends early: told); +5: a carry batch; 40: 4 in place, to its
     * end; 13: 1 in place, 3 carried (told); +7: a carry batch */
    cr_expect_eq(h.ends, 2);
    cr_expect_eq(h.calls, 9);
    sb_op_feed_free(f);
    sb_op_out_free(out);
}

/* An op recording the blob each call reads, and its length. */
typedef struct {
    const void *blob[16];
    size_t len;
    size_t n;
} blobs_seen;

static int blob_process(void *st, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                        sb_err *err)
{
    blobs_seen *s = st;
    cr_assert_lt(s->n, 16);
    s->blob[s->n++] = sb_batch_blob(in);
    s->len = sb_batch_blob_len(in);
    return sb_op_out_append_rows(out, in, first, n, err);
}

static const sb_op_impl blob_impl = {.name = "blob", .init = rec_init, .process = blob_process};

/* A task's gathered batches are finished into this thread's one buffer (sb_op_spare), across
 * feeds (tasks), not into a new blob each: a batch of 1,024 images is 48 MiB, and a fresh blob
 * per batch cost the GPU worker the zeroing of its pages. The test takes the memory each blob
 * leaves behind after every push, so that a new blob per batch could not land on the old one. */
Test(op_feed, gathered_batches_reuse_one_buffer_per_thread)
{
    static blobs_seen s;
    memset(&s, 0, sizeof s);
    sb_err e;
    uint64_t emitted = 0;
    void *taken[16];
    size_t ntaken = 0;
    for (int task = 0; task < 2; task++) {
        sb_op_out *out = sb_op_out_new((size_t)1 << 30, drop, &emitted, &e);
        sb_op_feed *f = sb_op_feed_new(&blob_impl, &s, 64, out, &e);
        cr_assert_not_null(f, "%s", e.msg);
        for (int64_t i = 0; i < 128; i++) { /* two batches of 64 one-row partitions */
            size_t len;
            void *blob = part(i, 1, true, &len);
            sb_batch *b;
            cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
            size_t before = s.n;
            cr_assert_eq(sb_op_feed_push(f, b, &e), 0, "%s", e.msg);
            sb_batch_close(b);
            sb_part_free(blob);
            if (s.n > before && ntaken < 16) /* a batch went by: hold what it may have freed */
                cr_assert_not_null(taken[ntaken++] = sb_part_alloc(s.len));
        }
        cr_assert_eq(sb_op_feed_flush(f, &e), 0, "%s", e.msg);
        sb_op_feed_free(f);
        cr_assert_eq(sb_op_out_flush(out, &e), 0, "%s", e.msg);
        sb_op_out_free(out);
    }
    cr_assert_eq(s.n, 4, "%zu batches", s.n);
    for (size_t i = 1; i < s.n; i++)
        cr_assert_eq(s.blob[i], s.blob[0], "batch %zu was read from another buffer", i);
    cr_assert_eq(emitted, 256);
    for (size_t i = 0; i < ntaken; i++)
        sb_part_free(taken[i]);
}
