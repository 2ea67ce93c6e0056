/* The join op (worker/ops/exchange/join.c, issue 41) on records, the exact rows it writes: the
 * right side read whole from a file at init; keys by value and type (1 = 1.0 = -0.0 + 1, "1" and
 * true apart, null meets null under missingKey: null); one row per right match in the right's
 * order; the key fields once (the left's); a right field the left has too as right_<name>, and
 * a data error when the left has right_<name> as well; how: left keeps unmatched rows as they
 * are; a left or right record without the key is an error unless missingKey: null; typed
 * columns are refused; the state serves a second task unchanged after reset. The exchanged join's
 * halves (exchange.map and exchange.reduce with op join) give the same rows, with the left rows
 * spilled under a small memory, and with the right rows spilled too past the task's share (a grace
 * hash join; a hot key's part built in chunks). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "worker/ops/impls.h"
#include "worker/ops/ops.h"
#include "recs_coll.h"

static char tmp[256], args[1024];
static size_t right_bytes; /* the right side's bytes, as the plan would list them */

static void write_right(const char *text)
{
    right_bytes = strlen(text);
    snprintf(tmp, sizeof tmp, "/tmp/sb-join-unit-XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
    char path[300];
    snprintf(path, sizeof path, "%s/r.jsonl", tmp);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(text, f);
    fclose(f);
}

static void cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    cr_assert_eq(system(cmd), 0);
}

/* The join's args over the right file with the rest of the args REST ("on":...). */
static const char *join_args(const char *rest)
{
    snprintf(args, sizeof args, "{\"right\":{\"uri\":\"file://%s/r.jsonl\"},%s}", tmp, rest);
    return args;
}

/* Runs impl (state st) over records rows[0..n) into o (then flushed): 0, or -1 + e. */
static int run_op(const sb_op_impl *impl, void *st, const char *const *rows, size_t n, sb_op_out *o,
                  sb_err *e)
{
    sb_field f = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, e);
    cr_assert_not_null(bb);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sb_batch_builder_append_binary(bb, 0, rows[i], strlen(rows[i]), e), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, e), 0, "%s", e->msg);
    sb_batch_builder_free(bb);
    sb_batch *in;
    cr_assert_eq(sb_batch_open(blob, len, &in, e), 0, "%s", e->msg);
    int rc = impl->process(st, in, 0, n, o, e);
    if (rc == 0)
        rc = impl->finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_batch_close(in);
    sb_part_free(blob);
    return rc;
}

/* Runs the join op (state st) over records rows[0..n): 0 with the output in *out, or -1 + e. */
static int run(void *st, const char *const *rows, size_t n, coll *out, sb_err *e)
{
    sb_op_out *o = sb_op_out_new(1 << 20, collect, out, e);
    int rc = run_op(&sb_op_join_impl, st, rows, n, o, e);
    sb_op_out_free(o);
    return rc;
}

static const char *right_text = "{\"k\":1,\"w\":\"one\",\"id\":10}\n"
                                "{\"k\":\"1\",\"w\":\"str\"}\n"
                                "{\"k\":true,\"w\":\"t\"}\n"
                                "{\"k\":1.0,\"w\":\"one-again\"}\n"
                                "{\"k\":null,\"w\":\"nul\"}\n"
                                "{\"w\":\"missing\"}\n";

Test(allops_join, rows_by_value_and_type_with_clashes_renamed)
{
    write_right(right_text);
    void *st = NULL;
    sb_err e;
    cr_assert_eq(sb_op_join_impl.init(join_args("\"on\":[\"k\"],\"how\":\"left\","
                                                "\"missingKey\":null"),
                                      &st, &e),
                 0, "%s", e.msg);
    static const char *rows[] = {"{\"k\":1e0,\"id\":1}",
                                 "{\"k\":\"1\"}",
                                 "{\"k\":2, \"x\":[1]}",
                                 "{\"id\":4}",
                                 "{\"k\":-0.0}",
                                 " { \"k\" : true } ",
                                 "{\"k\":1,\"id\":5,\"right_id\":0}"};
    coll out = {0};
    cr_assert_eq(run(st, rows, 6, &out, &e), 0, "%s", e.msg);
    static const char *want[] = {
        "{\"k\":1e0,\"id\":1,\"w\":\"one\",\"right_id\":10}", /* 1e0 = 1 = 1.0: both, in order */
        "{\"k\":1e0,\"id\":1,\"w\":\"one-again\"}",
        "{\"k\":\"1\",\"w\":\"str\"}",
        "{\"k\":2, \"x\":[1]}",     /* no match, kept as it is (how: left) */
        "{\"id\":4,\"w\":\"nul\"}", /* missing: null, meets the right's null and missing */
        "{\"id\":4,\"w\":\"missing\"}",
        "{\"k\":-0.0}", /* 0 has no right row */
        " { \"k\" : true ,\"w\":\"t\"}"};
    cr_assert_eq(out.n, sizeof want / sizeof *want);
    for (size_t i = 0; i < out.n; i++)
        cr_expect_str_eq(out.recs[i], want[i], "row %zu", i);
    coll_free(&out);
    /* the left has both id and right_id: the right's id has no name left, a data error */
    cr_expect_neq(run(st, rows + 6, 1, &out, &e), 0);
    cr_expect(e.data, "a data error");
    cr_expect(strstr(e.msg, "has both id and right_id") != NULL, "%s", e.msg);
    coll_free(&out);
    /* the state is kept between tasks: after reset it joins the same */
    cr_assert_eq(sb_op_join_impl.reset(st, &e), 0);
    cr_assert_eq(run(st, rows + 1, 1, &out, &e), 0, "%s", e.msg);
    cr_assert_eq(out.n, 1);
    cr_expect_str_eq(out.recs[0], "{\"k\":\"1\",\"w\":\"str\"}");
    coll_free(&out);
    sb_op_join_impl.free(st);
    cleanup();
}

Test(allops_join, inner_drops_unmatched_and_missing_keys_are_errors)
{
    write_right("{\"a\":1,\"b\":\"x\",\"v\":1}\n{\"a\":1,\"b\":\"y\",\"v\":2}\n"
                "{\"a\":1,\"b\":\"x\",\"v\":3}\n");
    void *st = NULL;
    sb_err e;
    cr_assert_eq(sb_op_join_impl.init(join_args("\"on\":[\"a\",\"b\"]"), &st, &e), 0, "%s", e.msg);
    static const char *rows[] = {"{\"b\":\"x\",\"a\":1.0}", "{\"a\":1,\"b\":\"z\"}", "{}",
                                 "{\"a\":1}"};
    coll out = {0};
    cr_assert_eq(run(st, rows, 2, &out, &e), 0, "%s", e.msg);
    cr_assert_eq(out.n, 2, "two right rows of (1, \"x\"); (1, \"z\") has none");
    cr_expect_str_eq(out.recs[0], "{\"b\":\"x\",\"a\":1.0,\"v\":1}");
    cr_expect_str_eq(out.recs[1], "{\"b\":\"x\",\"a\":1.0,\"v\":3}");
    coll_free(&out);
    cr_expect_neq(run(st, rows + 3, 1, &out, &e), 0);
    cr_expect(e.data && strstr(e.msg, "has no field b (missingKey: null") != NULL, "%s", e.msg);
    coll_free(&out);
    sb_op_join_impl.free(st);
    /* a right record without the key fails the op's init for good (every task would) */
    st = NULL;
    cr_expect_neq(sb_op_join_impl.init(join_args("\"on\":[\"c\"]"), &st, &e), 0);
    cr_expect(e.permanent && strstr(e.msg, "right record 0 of") != NULL, "%s", e.msg);
    cleanup();
}

Test(allops_join, an_empty_left_object_and_typed_columns)
{
    write_right("{\"k\":1,\"w\":2}\n");
    void *st = NULL;
    sb_err e;
    cr_assert_eq(sb_op_join_impl.init(join_args("\"on\":[\"k\"],\"missingKey\":null"), &st, &e), 0,
                 "%s", e.msg);
    static const char *rows[] = {"{}"};
    coll out = {0};
    cr_assert_eq(run(st, rows, 1, &out, &e), 0, "%s", e.msg);
    cr_assert_eq(out.n, 0, "null has no right row");
    /* typed columns: refused */
    sb_field f = {.name = "x", .type = SB_TYPE_INT64};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    sb_batch *in;
    cr_assert_eq(sb_batch_open(blob, len, &in, &e), 0, "%s", e.msg);
    sb_op_out *o = sb_op_out_new(1 << 20, collect, &out, &e);
    cr_expect_neq(sb_op_join_impl.process(st, in, 0, 0, o, &e), 0);
    cr_expect(strstr(e.msg, "not on typed columns") != NULL, "%s", e.msg);
    sb_op_out_free(o);
    sb_batch_close(in);
    sb_part_free(blob);
    sb_op_join_impl.free(st);
    cleanup();
}

/* ---- the exchanged join's halves (worker/ops/exchange/exchange.c) ---------------------------- */

#define XMAPS 2
#define XBUCKETS 3
#define XROWS 2000

typedef struct {
    void *blob[XMAPS][XBUCKETS];
    size_t len[XMAPS][XBUCKETS], n;
    int task;
} parts;

static int keep_part(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    parts *p = ud;
    cr_assert_lt(p->n, XBUCKETS, "one partition per bucket");
    p->blob[p->task][p->n] = blob;
    p->len[p->task][p->n++] = len;
    return 0;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Left rows: keys 1, 1.0, "1", missing, and one of their own (mostly no right row). */
static char **left_rows(void)
{
    char **rows = calloc(XROWS, sizeof *rows);
    for (size_t i = 0; i < XROWS; i++) {
        rows[i] = malloc(64);
        const char *k[] = {"\"k\":1,", "\"k\":1.0,", "\"k\":\"1\",", "", "\"k\":7,"};
        snprintf(rows[i], 64, "{%s\"id\":%zu}", k[i % 5], i);
    }
    return rows;
}

/* Runs the exchanged join (how: HOW) over XROWS left rows with the right side in dir tmp under
 * wrapper memory MEMORY: the map half as XMAPS tasks (task i: its half of the rows and its share
 * of the right side's files), then the reduce half per bucket; its rows into *out. 0, or -1 + e
 * (the reduce's). *spilled: the reduce tasks' spilled bytes. */
static int run_exchanged_how(char **rows, const char *how, uint64_t memory, coll *out,
                             uint64_t *spilled, sb_err *e)
{
    char w[1024];
    snprintf(w, sizeof w,
             "{\"op\":\"join\",\"buckets\":%d,\"memory\":%llu,\"maps\":%d,\"rightBytes\":%zu,"
             "\"args\":{\"right\":{\"uri\":\"file://%s/\"},\"on\":[\"k\"],\"how\":\"%s\","
             "\"missingKey\":null}}",
             XBUCKETS, (unsigned long long)memory, XMAPS, right_bytes, tmp, how);
    void *ms = NULL, *rs = NULL;
    cr_assert_eq(sb_op_exchange_map_impl.init(w, &ms, e), 0, "%s", e->msg);
    cr_assert_eq(sb_op_exchange_reduce_impl.init(w, &rs, e), 0, "%s", e->msg);
    parts p = {0};
    for (int t = 0; t < XMAPS; t++) {
        p.task = t;
        p.n = 0;
        cr_assert_eq(sb_op_exchange_map_impl.reset(ms, e), 0);
        sb_op_exchange_map_impl.task_begin(ms, (uint64_t)t);
        sb_op_out *o = sb_op_out_new(1 << 20, keep_part, &p, e);
        size_t half = XROWS / XMAPS;
        cr_assert_eq(
            run_op(&sb_op_exchange_map_impl, ms, (const char *const *)rows + t * half, half, o, e),
            0, "%s", e->msg);
        sb_op_out_free(o);
        cr_assert_eq(p.n, XBUCKETS);
    }
    int rc = 0;
    *spilled = 0;
    for (int b = 0; b < XBUCKETS && rc == 0; b++) {
        cr_assert_eq(sb_op_exchange_reduce_impl.reset(rs, e), 0);
        sb_op_out *o = sb_op_out_new(1 << 20, collect, out, e);
        for (int t = 0; t < XMAPS && rc == 0; t++) {
            sb_batch *in;
            cr_assert_eq(sb_batch_open(p.blob[t][b], p.len[t][b], &in, e), 0, "%s", e->msg);
            rc = sb_op_exchange_reduce_impl.process(rs, in, 0, sb_batch_rows(in), o, e);
            sb_batch_close(in);
        }
        if (rc == 0 && (rc = sb_op_exchange_reduce_impl.finish(rs, o, e)) == 0)
            rc = sb_op_out_flush(o, e);
        *spilled += sb_op_exchange_reduce_impl.spilled(rs);
        sb_op_out_free(o);
    }
    for (int t = 0; t < XMAPS; t++)
        for (int b = 0; b < XBUCKETS; b++)
            sb_part_free(p.blob[t][b]);
    sb_op_exchange_map_impl.free(ms);
    sb_op_exchange_reduce_impl.free(rs);
    return rc;
}

/* The same with how: left. */
static int run_exchanged(char **rows, uint64_t memory, coll *out, uint64_t *spilled, sb_err *e)
{
    return run_exchanged_how(rows, "left", memory, out, spilled, e);
}

/* The right side as 3 files of 2 rows. */
static void write_right_files(void)
{
    write_right(right_text);
    char cmd[400];
    snprintf(cmd, sizeof cmd,
             "cd %s && split -l 2 -d --additional-suffix=.jsonl r.jsonl p && rm r.jsonl", tmp);
    cr_assert_eq(system(cmd), 0);
}

/* The exchanged join gives the broadcast join's rows (in another order): keys 1 = 1.0, "1"
 * apart, missing as null meeting the right's null and missing, duplicate keys on both sides;
 * with a small memory the left rows wait in spill files and the rows are the same. */
Test(allops_join, exchanged_halves_give_the_broadcast_rows)
{
    write_right_files();
    char **rows = left_rows();
    sb_err e;
    void *st = NULL;
    char a[512];
    snprintf(a, sizeof a,
             "{\"right\":{\"uri\":\"file://%s/\"},\"on\":[\"k\"],\"how\":\"left\","
             "\"missingKey\":null}",
             tmp);
    cr_assert_eq(sb_op_join_impl.init(a, &st, &e), 0, "%s", e.msg);
    coll want = {0}, got = {0}, small = {0};
    cr_assert_eq(run(st, (const char *const *)rows, XROWS, &want, &e), 0, "%s", e.msg);
    sb_op_join_impl.free(st);
    uint64_t spilled;
    cr_assert_eq(run_exchanged(rows, 1 << 30, &got, &spilled, &e), 0, "%s", e.msg);
    cr_expect_eq(spilled, 0);
    /* 256 KiB: a reduce task's share 64 KiB, left rows past 8 KiB spilled */
    cr_assert_eq(run_exchanged(rows, 256 << 10, &small, &spilled, &e), 0, "%s", e.msg);
    cr_expect_gt(spilled, 0, "the left rows waited in spill files");
    /* 2000 rows: 400 of each of 1 and 1.0 meet 2 right rows, "1" 1, missing 2, 7 none */
    cr_assert_eq(want.n, 400 * 2 * 2 + 400 + 400 * 2 + 400);
    cr_assert_eq(got.n, want.n);
    cr_assert_eq(small.n, want.n);
    qsort(want.recs, want.n, sizeof *want.recs, str_cmp);
    qsort(got.recs, got.n, sizeof *got.recs, str_cmp);
    qsort(small.recs, small.n, sizeof *small.recs, str_cmp);
    for (size_t i = 0; i < want.n; i++) {
        cr_assert_str_eq(got.recs[i], want.recs[i], "row %zu", i);
        cr_assert_str_eq(small.recs[i], want.recs[i], "row %zu (spilled)", i);
    }
    coll_free(&got);
    coll_free(&small);
    /* a bucket's right rows past the task's share (1 KiB of 4 KiB): the build side spills too
     * (before, the task failed: "the right rows of one bucket take more than 1Ki") */
    cr_assert_eq(run_exchanged(rows, 4 << 10, &got, &spilled, &e), 0, "%s", e.msg);
    cr_expect_gt(spilled, 0);
    cr_assert_eq(got.n, want.n);
    qsort(got.recs, got.n, sizeof *got.recs, str_cmp);
    for (size_t i = 0; i < want.n; i++)
        cr_assert_str_eq(got.recs[i], want.recs[i], "row %zu (build side spilled)", i);
    coll_free(&got);
    coll_free(&want);
    for (size_t i = 0; i < XROWS; i++)
        free(rows[i]);
    free(rows);
    cleanup();
}

/* One key repeated past the task's share: the build side spills as a grace hash join and the part
 * holding that key is built in chunks, each probed by all of its left rows; how: left keeps the
 * rows no chunk met once. Both hows give the broadcast join's rows. */
Test(allops_join, a_hot_key_past_the_share_is_joined_in_chunks)
{
    char *text = malloc(64 << 10), *p = text;
    for (int i = 0; i < 500; i++) /* 400 rows of key 1, then keys 2..51 */
        p += sprintf(p, "{\"k\":%d,\"r\":%d,\"pad\":\"%s\"}\n", i < 400 ? 1 : 2 + i % 50, i,
                     "abcdefghijklmnopqrstuvwxyz");
    write_right(text);
    free(text);
    char **rows = calloc(XROWS, sizeof *rows);
    for (size_t i = 0; i < XROWS; i++) { /* keys 0..59: 0 and 52..59 meet no right row */
        rows[i] = malloc(64);
        snprintf(rows[i], 64, "{\"k\":%zu,\"id\":%zu}", i % 60, i);
    }
    const char *hows[] = {"inner", "left"};
    for (int h = 0; h < 2; h++) {
        sb_err e;
        void *st = NULL;
        char a[512];
        snprintf(a, sizeof a, "{\"right\":{\"uri\":\"file://%s/\"},\"on\":[\"k\"],\"how\":\"%s\"}",
                 tmp, hows[h]);
        cr_assert_eq(sb_op_join_impl.init(a, &st, &e), 0, "%s", e.msg);
        coll want = {0}, got = {0};
        cr_assert_eq(run(st, (const char *const *)rows, XROWS, &want, &e), 0, "%s", e.msg);
        sb_op_join_impl.free(st);
        uint64_t spilled;
        /* 32 KiB: a reduce task's share 8 KiB, key 1's right rows ~20 KB */
        cr_assert_eq(run_exchanged_how(rows, hows[h], 32 << 10, &got, &spilled, &e), 0, "%s",
                     e.msg);
        cr_expect_gt(spilled, 20000, "%s: both sides spilled", hows[h]);
        /* key 1: 34 left rows x 400; keys 2..51: 33 or 34 x 2; how: left adds 9 keys' rows */
        cr_assert_eq(got.n, want.n, "%s", hows[h]);
        cr_assert_gt(want.n, 34 * 400, "%s", hows[h]);
        qsort(want.recs, want.n, sizeof *want.recs, str_cmp);
        qsort(got.recs, got.n, sizeof *got.recs, str_cmp);
        for (size_t i = 0; i < want.n; i++)
            cr_assert_str_eq(got.recs[i], want.recs[i], "%s: row %zu", hows[h], i);
        coll_free(&want);
        coll_free(&got);
    }
    for (size_t i = 0; i < XROWS; i++)
        free(rows[i]);
    free(rows);
    cleanup();
}
