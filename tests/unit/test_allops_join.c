/* The join op (worker/ops/exchange/join.c, issue 41) on records, the exact rows it writes: the
 * right side read whole from a file at init; keys by value and type (1 = 1.0 = -0.0 + 1, "1" and
 * true apart, null meets null under missingKey: null); one row per right match in the right's
 * order; the key fields once (the left's); a right field the left has too as right_<name>, and
 * a data error when the left has right_<name> as well; how: left keeps unmatched rows as they
 * are; a left or right record without the key is an error unless missingKey: null; typed
 * columns are refused; the state serves a second task unchanged after reset. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "worker/ops/impls.h"
#include "worker/ops/ops.h"
#include "recs_coll.h"

static char tmp[256], args[1024];

static void write_right(const char *text)
{
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

/* Runs the op (state st) over records rows[0..n): 0 with the output in *out, or -1 + e. */
static int run(void *st, const char *const *rows, size_t n, coll *out, sb_err *e)
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
    sb_op_out *o = sb_op_out_new(1 << 20, collect, out, e);
    int rc = sb_op_join_impl.process(st, in, 0, n, o, e);
    if (rc == 0)
        rc = sb_op_join_impl.finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_op_out_free(o);
    sb_batch_close(in);
    sb_part_free(blob);
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
