/* The all-to-all ops' internals (worker/ops/exchange/xchg.h): keys compare by value and type
 * (1, 1.0, 1e0 and -0.0 == 0 meet; "1", true and null do not; escapes decoded; object members in
 * any order), groupby's map-side combine gives what one table over all the rows gives,
 * however the rows are split among map tasks, and the map half writes one partition per bucket. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/ops/exchange/xchg.h"
#include "recs_coll.h"

/* The canonical encoding of JSON text v (caller frees buf.p). */
static xbuf enc(const char *v)
{
    xbuf b = {0};
    cr_assert_eq(xkey_encode(v, strlen(v), &b), 0);
    return b;
}

static int same(const char *a, const char *b)
{
    xbuf x = enc(a), y = enc(b);
    int eq = x.n == y.n && memcmp(x.p, y.p, x.n) == 0;
    xbuf_free(&x);
    xbuf_free(&y);
    return eq;
}

Test(allops_keys, values_compare_by_value_and_type)
{
    const char *alike[][2] = {{"1", "1.0"},
                              {"1", "1e0"},
                              {"0", "-0.0"},
                              {"10", "1e1"},
                              {"\"A\"", "\"\\u0041\""},
                              {"[1, 2]", "[1.0,2]"},
                              {"{\"a\":1,\"b\":[true]}", "{ \"b\" : [true] , \"a\" : 1.0 }"},
                              {"null", " null "},
                              {"-3.25", "-325e-2"}};
    for (size_t i = 0; i < sizeof alike / sizeof *alike; i++)
        cr_expect(same(alike[i][0], alike[i][1]), "%s and %s", alike[i][0], alike[i][1]);
    const char *apart[][2] = {{"1", "\"1\""},         {"1", "true"},
                              {"0", "false"},         {"0", "null"},
                              {"\"\"", "null"},       {"[1,2]", "[2,1]"},
                              {"1.5", "1"},           {"{\"a\":1}", "{\"a\":1,\"b\":1}"},
                              {"[[1],2]", "[1,[2]]"}, {"9007199254740993", "9007199254740992"},
                              {"\"ab\"", "\"a\""}};
    for (size_t i = 0; i < sizeof apart / sizeof *apart; i++)
        cr_expect(!same(apart[i][0], apart[i][1]), "%s and %s", apart[i][0], apart[i][1]);
}

static sb_batch *batch_of(const char *const *recs, size_t n, void **blob)
{
    sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    sb_err e;
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &e);
    cr_assert_not_null(b, "%s", e.msg);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, recs[i], strlen(recs[i]), &e), 0);
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    sb_batch *out;
    cr_assert_eq(sb_batch_open(*blob, len, &out, &e), 0, "%s", e.msg);
    return out;
}

/* put callback of xgroupby_emit_partials: the partial records, in one list */
static int keep_partial(void *ud, uint32_t bucket, const char *rec, size_t len, sb_err *err)
{
    (void)bucket;
    (void)err;
    coll_add(ud, rec, len);
    return 0;
}

static void emit_all(xgroupby *g, coll *out)
{
    sb_err e;
    sb_op_out *o = sb_op_out_new(1 << 20, collect, out, &e);
    sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    cr_assert_eq(sb_op_out_set_schema(o, &f, 1, &e), 0);
    cr_assert_eq(xgroupby_emit(g, o, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_op_out_flush(o, &e), 0, "%s", e.msg);
    sb_op_out_free(o);
}

/* The output of one table over rows [0, n) of b (what combined partials must equal). */
static xgroupby *one_table(const char *args, sb_batch *b, size_t n, coll *want)
{
    sb_err e;
    xgroupby *whole = xgroupby_new(args, 0, &e);
    cr_assert_not_null(whole, "%s", e.msg);
    cr_assert_eq(xgroupby_add(whole, b, 0, 0, n, &e), 0, "%s", e.msg);
    emit_all(whole, want);
    return whole;
}

Test(allops_keys, combined_partials_equal_one_table)
{
    static const char *rows[] = {
        "{\"k\":1,\"v\":3,\"s\":\"b\"}",
        "{\"k\":\"1\",\"v\":2.5,\"s\":\"a\"}",
        "{\"k\":1.0,\"v\":-4,\"s\":\"c\"}",
        "{\"k\":true,\"v\":null,\"s\":\"z\"}",
        "{\"k\":1,\"s\":\"a\"}",
        "{\"k\":\"1\",\"v\":7,\"s\":\"q\"}",
        "{\"k\":1e0,\"v\":10,\"s\":\"d\"}",
        "{\"v\":1,\"s\":\"m\"}",
        "{\"k\":true,\"v\":2,\"s\":\"y\"}",
        "{\"k\":1,\"v\":5,\"s\":\"\\u0061\"}",
    };
    const size_t n = sizeof rows / sizeof *rows;
    const char *args = "{\"keys\":[\"k\"],\"missingKey\":null,\"aggregates\":[{\"op\":\"count\"},"
                       "{\"op\":\"sum\",\"field\":\"v\"},{\"op\":\"min\",\"field\":\"s\"},"
                       "{\"op\":\"max\",\"field\":\"v\"},{\"op\":\"first\",\"field\":\"s\"},"
                       "{\"op\":\"last\",\"field\":\"v\"},{\"op\":\"collect\",\"field\":\"s\"},"
                       "{\"op\":\"std\",\"field\":\"v\"},{\"op\":\"mean\",\"field\":\"v\"}]}";
    sb_err e;
    void *blob;
    sb_batch *b = batch_of(rows, n, &blob);
    coll want = {0};
    xgroupby *whole = one_table(args, b, n, &want);
    /* three map tasks (rows 0-2, 3-6, 7-9) combined, their partials merged in task order */
    xgroupby *map = xgroupby_new(args, 0, &e), *red = xgroupby_new(args, 0, &e);
    coll partials = {0};
    size_t cuts[4] = {0, 3, 7, n};
    for (int t = 0; t < 3; t++) {
        cr_assert_eq(xgroupby_add(map, b, 0, cuts[t], cuts[t + 1] - cuts[t], &e), 0, "%s", e.msg);
        cr_assert_eq(xgroupby_emit_partials(map, 4, keep_partial, &partials, &e), 0, "%s", e.msg);
    }
    void *pblob;
    sb_batch *pb = batch_of((const char *const *)partials.recs, partials.n, &pblob);
    cr_assert_eq(xgroupby_add_partials(red, pb, 0, 0, partials.n, &e), 0, "%s", e.msg);
    coll got = {0};
    emit_all(red, &got);
    cr_assert_eq(got.n, want.n);
    cr_expect_eq(want.n, 4, "keys 1 (1, 1.0, 1e0), \"1\", true, null");
    for (size_t i = 0; i < want.n; i++)
        cr_expect_str_eq(got.recs[i], want.recs[i]);
    /* the key 1 (met first as 1): its rows 0, 2, 4, 6, 9 (row 4 has no v) */
    const char *one = NULL;
    for (size_t i = 0; i < want.n; i++)
        if (strncmp(want.recs[i], "{\"k\":1,", 7) == 0)
            one = want.recs[i];
    cr_assert_not_null(one);
    cr_expect(strstr(one,
                     "\"count\":5,\"sum_v\":14,\"min_s\":\"a\",\"max_v\":10,\"first_s\":"
                     "\"b\",\"last_v\":5,\"collect_s\":[\"b\",\"c\",\"a\",\"d\",\"\\u0061\"]") !=
                  NULL,
              "%s", one);
    coll_free(&want);
    coll_free(&got);
    coll_free(&partials);
    xgroupby_free(whole);
    xgroupby_free(map);
    xgroupby_free(red);
    sb_batch_close(b);
    sb_batch_close(pb);
    sb_part_free(blob);
    sb_part_free(pblob);
}

/* Partials carry sums and means as their doubles' bits (groupby.c, put_bits): merged in any
 * split, they give exactly the output of one table, for values whose decimal text is long or
 * extreme (a third, 0.1, tiny and huge magnitudes, a negative zero). (std merges by Chan's
 * update, which may differ from one table's Welford in the last bits: not compared here.) */
Test(allops_keys, partials_carry_doubles_exactly)
{
    static const char *rows[] = {
        "{\"k\":\"a\",\"v\":0.1}",     "{\"k\":\"a\",\"v\":0.3333333333333333}",
        "{\"k\":\"b\",\"v\":1e-300}",  "{\"k\":\"a\",\"v\":-0.0}",
        "{\"k\":\"b\",\"v\":1e150}",   "{\"k\":\"a\",\"v\":123456789.12345679}",
        "{\"k\":\"b\",\"v\":-2.5e-7}", "{\"k\":\"a\",\"v\":7}",
        "{\"k\":\"b\",\"v\":3}",
    };
    const size_t n = sizeof rows / sizeof *rows;
    const char *args = "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"sum\",\"field\":\"v\"},"
                       "{\"op\":\"mean\",\"field\":\"v\"}]}";
    sb_err e;
    void *blob;
    sb_batch *b = batch_of(rows, n, &blob);
    coll want = {0};
    xgroupby *whole = one_table(args, b, n, &want);
    for (size_t split = 1; split < n; split++) { /* two map tasks: rows [0, split), [split, n) */
        xgroupby *map = xgroupby_new(args, 0, &e), *red = xgroupby_new(args, 0, &e);
        coll partials = {0}, got = {0};
        cr_assert_eq(xgroupby_add(map, b, 0, 0, split, &e), 0, "%s", e.msg);
        cr_assert_eq(xgroupby_emit_partials(map, 2, keep_partial, &partials, &e), 0, "%s", e.msg);
        cr_assert_eq(xgroupby_add(map, b, 0, split, n - split, &e), 0, "%s", e.msg);
        cr_assert_eq(xgroupby_emit_partials(map, 2, keep_partial, &partials, &e), 0, "%s", e.msg);
        void *pblob;
        sb_batch *pb = batch_of((const char *const *)partials.recs, partials.n, &pblob);
        cr_assert_eq(xgroupby_add_partials(red, pb, 0, 0, partials.n, &e), 0, "%s", e.msg);
        emit_all(red, &got);
        cr_assert_eq(got.n, want.n);
        for (size_t i = 0; i < want.n; i++)
            cr_expect_str_eq(got.recs[i], want.recs[i], "split at %zu: %s vs %s", split,
                             got.recs[i], want.recs[i]);
        coll_free(&partials);
        coll_free(&got);
        xgroupby_free(map);
        xgroupby_free(red);
        sb_batch_close(pb);
        sb_part_free(pblob);
    }
    coll_free(&want);
    xgroupby_free(whole);
    sb_batch_close(b);
    sb_part_free(blob);
}

/* emit callback: each partition's row count, in order */
typedef struct {
    uint64_t rows[16];
    size_t n;
} parts;

static int count_part(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)len;
    parts *p = ud;
    cr_assert_lt(p->n, 16);
    p->rows[p->n++] = rows;
    sb_part_free(blob);
    return 0;
}

/* The map half's contract with the scheduler: exactly one partition per bucket, in bucket
 * order, an empty bucket too (its place is its number); nothing when it saw no input at all. */
Test(allops_keys, map_half_writes_one_partition_per_bucket)
{
    static const char *rows[] = {"{\"k\":1}", "{\"k\":1.0}", "{\"k\":\"1\"}"};
    const sb_op_impl *op = sb_op_find("exchange.map");
    cr_assert_not_null(op);
    const char *args = "{\"op\":\"groupby\",\"buckets\":5,\"memory\":0,\"args\":{\"keys\":[\"k\"],"
                       "\"aggregates\":[{\"op\":\"count\"}]}}";
    sb_err e;
    void *st, *blob;
    cr_assert_eq(op->init(args, &st, &e), 0, "%s", e.msg);
    sb_batch *b = batch_of(rows, 3, &blob);
    parts p = {0};
    sb_op_out *out = sb_op_out_new(1 << 20, count_part, &p, &e);
    cr_assert_eq(op->process(st, b, 0, 3, out, &e), 0, "%s", e.msg);
    cr_assert_eq(op->finish(st, out, &e), 0, "%s", e.msg);
    cr_assert_eq(p.n, 5, "one partition per bucket");
    uint64_t total = 0, empty = 0;
    for (size_t i = 0; i < p.n; i++) {
        total += p.rows[i];
        empty += p.rows[i] == 0;
    }
    cr_expect_eq(total, 2, "two partial records: key 1 (1 and 1.0) and key \"1\"");
    cr_expect_geq(empty, 3);
    /* the next task of the same state (reset) that gets no input makes no partition */
    cr_assert_eq(op->reset(st, &e), 0);
    parts none = {0};
    sb_op_out *out2 = sb_op_out_new(1 << 20, count_part, &none, &e);
    cr_assert_eq(op->finish(st, out2, &e), 0, "%s", e.msg);
    cr_expect_eq(none.n, 0);
    sb_op_out_free(out);
    sb_op_out_free(out2);
    op->free(st);
    sb_batch_close(b);
    sb_part_free(blob);
}

/* ---- groupby within its memory: the map side sends partials on early, the reduce side spills
 * sorted runs and merges them; either way the output is the unbounded table's ------------- */

typedef struct {
    xgroupby *g;
    coll *partials;
} map_side;

static int map_full(void *ud, sb_err *err)
{
    map_side *m = ud;
    return xgroupby_emit_partials(m->g, 4, keep_partial, m->partials, err);
}

/* Records equal but for the trailing "std_v":X}, whose values agree to 1e-12 relative (a merge
 * of partial states adds in another order than one pass over the rows). */
static void expect_same_groups(const coll *got, const coll *want)
{
    cr_assert_eq(got->n, want->n);
    for (size_t i = 0; i < want->n; i++) {
        const char *gs = strstr(got->recs[i], "\"std_v\":"),
                   *ws = strstr(want->recs[i], "\"std_v\":");
        cr_assert(gs != NULL && ws != NULL);
        cr_assert_eq(gs - got->recs[i], ws - want->recs[i], "%s\n%s", got->recs[i], want->recs[i]);
        cr_assert_eq(memcmp(got->recs[i], want->recs[i], (size_t)(ws - want->recs[i])), 0,
                     "record %zu: %s\nwant %s", i, got->recs[i], want->recs[i]);
        if (strncmp(ws, "\"std_v\":null", 12) == 0) {
            cr_assert_str_eq(gs, ws);
            continue;
        }
        double a = strtod(gs + 8, NULL), b = strtod(ws + 8, NULL);
        cr_assert(fabs(a - b) <= 1e-12 * fabs(b) + 1e-300, "record %zu: std %.17g, want %.17g", i,
                  a, b);
    }
}

Test(allops_keys, groupby_beyond_its_memory_spills_and_merges_to_the_same_output)
{
    enum { ROWS = 6000, KEYS = 1500, CHUNK = 500 };
    char **rows = calloc(ROWS, sizeof *rows);
    for (int i = 0; i < ROWS; i++) {
        char r[160];
        int k = (i * 7919) % KEYS;
        if (k % 3 == 0)
            snprintf(r, sizeof r, "{\"k\":\"s%d\",\"v\":%d,\"s\":\"x%d\"}", k, (i * 37) % 101, i);
        else
            snprintf(r, sizeof r, "{\"k\":%d,\"v\":%d.5,\"s\":\"y%d\"}", k, (i * 13) % 97, i % 50);
        rows[i] = strdup(r);
    }
    const char *args = "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"count\"},"
                       "{\"op\":\"sum\",\"field\":\"v\"},{\"op\":\"min\",\"field\":\"s\"},"
                       "{\"op\":\"max\",\"field\":\"v\"},{\"op\":\"first\",\"field\":\"s\"},"
                       "{\"op\":\"last\",\"field\":\"v\"},{\"op\":\"collect\",\"field\":\"s\"},"
                       "{\"op\":\"mean\",\"field\":\"v\"},{\"op\":\"std\",\"field\":\"v\"}]}";
    sb_err e;
    void *blob;
    sb_batch *b = batch_of((const char *const *)rows, ROWS, &blob);
    xgroupby *whole = xgroupby_new(args, 0, &e);
    cr_assert_eq(xgroupby_add(whole, b, 0, 0, ROWS, &e), 0, "%s", e.msg);
    coll want = {0};
    emit_all(whole, &want);
    cr_assert_eq(want.n, KEYS);
    /* the reduce side alone, 16 KiB: it spills runs and merges them */
    xgroupby *red = xgroupby_new(args, 16384, &e);
    for (int s = 0; s < ROWS; s += CHUNK)
        cr_assert_eq(xgroupby_add(red, b, 0, (size_t)s, CHUNK, &e), 0, "%s", e.msg);
    coll got = {0};
    emit_all(red, &got);
    cr_expect_gt(xgroupby_spilled(red), 0, "the table spilled");
    expect_same_groups(&got, &want);
    /* the map side, 16 KiB: partials go on whenever the table is full, so keys repeat among
     * them; the bounded reduce side merges them (spilling too) into the same groups */
    coll partials = {0};
    map_side m = {.g = xgroupby_new(args, 16384, &e), .partials = &partials};
    xgroupby_on_full(m.g, map_full, &m);
    cr_assert_eq(xgroupby_add(m.g, b, 0, 0, ROWS, &e), 0, "%s", e.msg);
    cr_assert_eq(xgroupby_emit_partials(m.g, 4, keep_partial, &partials, &e), 0, "%s", e.msg);
    cr_expect_gt(partials.n, KEYS, "%zu partials for %d keys: sent on early", partials.n, KEYS);
    void *pblob;
    sb_batch *pb = batch_of((const char *const *)partials.recs, partials.n, &pblob);
    xgroupby_reset(red);
    cr_expect_eq(xgroupby_spilled(red), 0);
    cr_assert_eq(xgroupby_add_partials(red, pb, 0, 0, partials.n, &e), 0, "%s", e.msg);
    coll got2 = {0};
    emit_all(red, &got2);
    cr_expect_gt(xgroupby_spilled(red), 0);
    expect_same_groups(&got2, &want);
    /* one group bigger than the memory (a collect of 6000 strings in 2 KiB): a clear error */
    xgroupby *tiny = xgroupby_new("{\"keys\":[\"z\"],\"missingKey\":null,\"aggregates\":"
                                  "[{\"op\":\"collect\",\"field\":\"s\"}]}",
                                  2048, &e);
    cr_assert_eq(xgroupby_add(tiny, b, 0, 0, ROWS, &e), -1);
    cr_expect(strstr(e.msg, "one group's aggregates take more than 2Ki,") != NULL, "%s", e.msg);
    xgroupby_free(tiny);
    coll_free(&want);
    coll_free(&got);
    coll_free(&got2);
    coll_free(&partials);
    xgroupby_free(whole);
    xgroupby_free(red);
    xgroupby_free(m.g);
    sb_batch_close(b);
    sb_batch_close(pb);
    sb_part_free(blob);
    sb_part_free(pblob);
    for (int i = 0; i < ROWS; i++)
        free(rows[i]);
    free(rows);
}

/* distinct's map side only drops duplicates early: past its memory it forgets the keys met so
 * far instead of failing (the reduce side drops what comes again), and never drops a key's
 * first row. Before, the map task failed ("distinct does not spill yet"). */
Test(allops_keys, distinct_map_side_forgets_past_its_memory)
{
    enum { ROWS = 3000, KEYS = 1500 };
    char **rows = calloc(ROWS, sizeof *rows);
    for (int i = 0; i < ROWS; i++) {
        char r[64];
        snprintf(r, sizeof r, "{\"k\":%d}", i % KEYS);
        rows[i] = strdup(r);
    }
    const sb_op_impl *op = sb_op_find("exchange.map");
    sb_err e;
    void *st, *blob;
    /* memory 16384: the map side's share is a quarter, 4 KiB, far below 1,500 keys */
    cr_assert_eq(op->init("{\"op\":\"distinct\",\"buckets\":3,\"memory\":16384,\"args\":"
                          "{\"fields\":[\"k\"]}}",
                          &st, &e),
                 0, "%s", e.msg);
    sb_batch *b = batch_of((const char *const *)rows, ROWS, &blob);
    coll got = {0};
    sb_op_out *out = sb_op_out_new(1 << 20, collect, &got, &e);
    cr_assert_eq(op->process(st, b, 0, ROWS, out, &e), 0, "%s", e.msg);
    cr_assert_eq(op->finish(st, out, &e), 0, "%s", e.msg);
    cr_expect(got.n > KEYS && got.n <= ROWS, "%zu rows sent for %d keys", got.n, KEYS);
    char *seen = calloc(KEYS, 1);
    for (size_t i = 0; i < got.n; i++)
        seen[atoi(strchr(got.recs[i], ':') + 1)] = 1;
    for (int k = 0; k < KEYS; k++)
        cr_expect(seen[k], "key %d never sent", k);
    free(seen);
    coll_free(&got);
    sb_op_out_free(out);
    op->free(st);
    sb_batch_close(b);
    sb_part_free(blob);
    for (int i = 0; i < ROWS; i++)
        free(rows[i]);
    free(rows);
}

/* random_shuffle's reduce task past its memory spills runs sorted by the rows' hashes and
 * merges them: the same permutation as the task sorting every row in memory. Before, the task
 * failed ("random_shuffle does not spill yet"). */
static void shuffle_reduce(const char *args, sb_batch *b, size_t rows, coll *got)
{
    const sb_op_impl *op = sb_op_find("exchange.reduce");
    sb_err e;
    void *st;
    cr_assert_eq(op->init(args, &st, &e), 0, "%s", e.msg);
    sb_op_out *out = sb_op_out_new(1 << 16, collect, got, &e);
    for (size_t s = 0; s < rows; s += 250)
        cr_assert_eq(op->process(st, b, s, 250, out, &e), 0, "%s", e.msg);
    cr_assert_eq(op->finish(st, out, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_op_out_flush(out, &e), 0, "%s", e.msg);
    sb_op_out_free(out);
    op->free(st);
}

/* nrows rows of pad bytes or more, shuffled in memory and under memory bytes: the same order. */
static void shuffle_spilled_equals_in_memory(int nrows, int pad, long memory)
{
    char **rows = calloc((size_t)nrows, sizeof *rows);
    for (int i = 0; i < nrows; i++) {
        char r[2200];
        snprintf(r, sizeof r, "{\"id\":%d,\"pad\":\"%0*d\"}", i % 4000, pad + i % 30, i);
        rows[i] = strdup(r);
    }
    void *blob;
    sb_batch *b = batch_of((const char *const *)rows, (size_t)nrows, &blob);
    coll want = {0}, got = {0};
    shuffle_reduce("{\"op\":\"random_shuffle\",\"buckets\":1,\"memory\":0,\"args\":{\"seed\":7}}",
                   b, (size_t)nrows, &want);
    char args[160];
    snprintf(args, sizeof args,
             "{\"op\":\"random_shuffle\",\"buckets\":1,\"memory\":%ld,\"args\":{\"seed\":7}}",
             memory);
    shuffle_reduce(args, b, (size_t)nrows, &got);
    cr_assert_eq(want.n, (size_t)nrows);
    cr_assert_eq(got.n, (size_t)nrows);
    size_t moved = 0;
    for (size_t i = 0; i < (size_t)nrows; i++) {
        cr_assert_str_eq(got.recs[i], want.recs[i], "row %zu", i);
        moved += strcmp(want.recs[i], rows[i]) != 0;
    }
    cr_expect_gt(moved, (size_t)nrows * 9 / 10, "a permutation: %zu of %d rows moved", moved,
                 nrows);
    coll_free(&want);
    coll_free(&got);
    sb_batch_close(b);
    sb_part_free(blob);
    for (int i = 0; i < nrows; i++)
        free(rows[i]);
    free(rows);
}

Test(allops_keys, random_shuffle_beyond_its_memory_spills_the_same_permutation)
{
    /* 64 KiB: a quarter is the task's, and it spills at half of that, ~8 KiB of ~300 KiB */
    shuffle_spilled_equals_in_memory(5000, 20, 65536);
}

/* Runs larger than a spill's chunk (4 MiB, shuffle.c): ~50 MiB of rows under 48 MiB, a quarter
 * the task's, spilled at half of that: runs of ~6 MiB, two chunks each, merged chunk by chunk. */
Test(allops_keys, random_shuffle_runs_of_many_chunks_merge_to_the_same_permutation)
{
    shuffle_spilled_equals_in_memory(24000, 2000, 48L << 20);
}

/* missingKey as the string "null" means what null means: client-side `kubectl apply` deletes a
 * field whose value is null, so on the operator only the string survives (the chaos cluster run
 * found a distinct failing "has no field k" under `missingKey: null`). Anything else is no. */
Test(allops_keys, missing_key_as_the_string_null_keys_missing_fields_as_null)
{
    cJSON *v[] = {cJSON_CreateNull(),         cJSON_CreateString("null"),
                  cJSON_CreateString("NULL"), cJSON_CreateString("skip"),
                  cJSON_CreateNumber(0),      cJSON_CreateFalse()};
    const int want[] = {1, 1, 0, 0, 0, 0};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        cr_expect_eq(xkeys_missing_null(v[i]), want[i], "value %zu", i);
        cJSON_Delete(v[i]);
    }
    cr_expect_eq(xkeys_missing_null(NULL), 0, "left out");
    const char *rows[] = {"{\"k\":1,\"v\":2}", "{\"v\":3}", "{\"k\":null,\"v\":4}"};
    void *blob;
    sb_batch *b = batch_of(rows, 3, &blob);
    const char *args[] = {
        "{\"keys\":[\"k\"],\"missingKey\":null,\"aggregates\":[{\"op\":\"sum\",\"field\":\"v\"}]}",
        "{\"keys\":[\"k\"],\"missingKey\":\"null\",\"aggregates\":[{\"op\":\"sum\",\"field\":\"v\"}"
        "]}",
    };
    coll got[2] = {{0}, {0}};
    for (size_t a = 0; a < 2; a++) {
        sb_err e;
        xgroupby *g = xgroupby_new(args[a], 0, &e);
        cr_assert_not_null(g, "%s", e.msg);
        cr_assert_eq(xgroupby_add(g, b, 0, 0, 3, &e), 0, "%s: %s", args[a], e.msg);
        emit_all(g, &got[a]);
        xgroupby_free(g);
    }
    cr_assert_eq(got[0].n, 2, "keys 1 and null (the missing field and the null one together)");
    cr_assert_eq(got[1].n, got[0].n);
    for (size_t i = 0; i < got[0].n; i++)
        cr_expect_str_eq(got[1].recs[i], got[0].recs[i]);
    sb_batch_close(b);
    sb_part_free(blob);
    coll_free(&got[0]);
    coll_free(&got[1]);
}
