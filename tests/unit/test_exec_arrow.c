/* Tests of the exec operator's framing "arrow" (worker/ops/exec/arrow.c) with real child
 * processes: tests/helpers/sb_arrow_ipc echo (our IPC code on the other side, with switches for
 * misbehaving) and, where a shell is the point, sh. Python's side (pyarrow and the kit) is
 * tested by tests/sdk/. */
#include <criterion/criterion.h>

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partition/partition.h"
#include "partition/rowjson.h"
#include "worker/ops/ops.h"

TestSuite(exec_arrow, .timeout = 60);

static const char *helper(void)
{
    static char path[4096];
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert_gt(n, 0);
    exe[n] = '\0';
    snprintf(path, sizeof path, "%s/helpers/sb_arrow_ipc", dirname(exe));
    cr_assert_eq(access(path, X_OK), 0, "%s is missing (make check builds it)", path);
    return path;
}

/* Every output row as JSON text, in order. */
typedef struct {
    char **rows;
    size_t n, cap;
} rows;

static void rows_add_batch(rows *r, const sb_batch *b)
{
    void *jb;
    size_t jl;
    sb_err e = {0};
    cr_assert_eq(sb_batch_rows_json(b, &jb, &jl, &e), 0, "%s", e.msg);
    sb_batch *j;
    cr_assert_eq(sb_batch_open(jb, jl, &j, &e), 0);
    const sb_column *c = sb_batch_column(j, 0);
    for (size_t i = 0; i < c->length; i++) {
        if (r->n == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 64;
            r->rows = realloc(r->rows, r->cap * sizeof *r->rows);
        }
        size_t n;
        const char *p = sb_column_binary(c, i, &n);
        r->rows[r->n++] = strndup(p, n);
    }
    sb_batch_close(j);
    sb_part_free(jb);
}

static void rows_free(rows *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->rows[i]);
    free(r->rows);
    *r = (rows){0};
}

static int collect(void *blob, size_t len, uint64_t nrows, void *ud)
{
    (void)nrows;
    sb_batch *b;
    sb_err err;
    cr_assert_eq(sb_batch_open(blob, len, &b, &err), 0, "%s", err.msg);
    rows_add_batch(ud, b);
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* A partition of every column type, with nulls; `tag` changes the values. */
static void *make_part(int tag, size_t nrows, bool extra_col, size_t *len)
{
    sb_field f[] = {
        {.name = "id", .type = SB_TYPE_INT64},
        {.name = "text", .type = SB_TYPE_UTF8, .nullable = true},
        {.name = "ok", .type = SB_TYPE_BOOL, .nullable = true},
        {.name = "vec",
         .type = SB_TYPE_FIXED_LIST,
         .child_type = SB_TYPE_FLOAT32,
         .list_size = 3,
         .nullable = true},
        {.name = "u8", .type = SB_TYPE_UINT8},
        {.name = "bin", .type = SB_TYPE_BINARY},
        {.name = "x", .type = SB_TYPE_FLOAT64},
    };
    size_t nf = extra_col ? 7 : 6;
    sb_err e = {0};
    sb_batch_builder *b = sb_batch_builder_new(f, nf, &e);
    cr_assert_not_null(b, "%s", e.msg);
    for (size_t i = 0; i < nrows; i++) {
        char s[32];
        int n = snprintf(s, sizeof s, "t%d-%zu\"\\", tag, i);
        float v[3] = {(float)i, (float)tag, 0.5f};
        cr_assert_eq(sb_batch_builder_append_int(b, 0, (int64_t)(tag * 1000 + (int)i), &e), 0);
        cr_assert_eq(i % 4 == 1 ? sb_batch_builder_append_null(b, 1, &e)
                                : sb_batch_builder_append_binary(b, 1, s, (size_t)n, &e),
                     0);
        cr_assert_eq(i % 3 == 2 ? sb_batch_builder_append_null(b, 2, &e)
                                : sb_batch_builder_append_bool(b, 2, i & 1, &e),
                     0);
        cr_assert_eq(i == 4 ? sb_batch_builder_append_null(b, 3, &e)
                            : sb_batch_builder_append_list(b, 3, v, 3, &e),
                     0);
        cr_assert_eq(sb_batch_builder_append_uint(b, 4, i % 256, &e), 0);
        cr_assert_eq(sb_batch_builder_append_binary(b, 5, "ab", i % 3, &e), 0);
        if (extra_col)
            cr_assert_eq(sb_batch_builder_append_double(b, 6, (double)i / 8, &e), 0);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(b);
    return blob;
}

/* args for `sb_arrow_ipc echo <opts...>` with extra members. */
static char *echo_args(const char *opts, const char *extra)
{
    char *s;
    cr_assert(asprintf(&s, "{\"command\":[\"%s\",\"echo\"%s%s],\"framing\":\"arrow\"%s%s}",
                       helper(), opts[0] ? "," : "", opts, extra[0] ? "," : "", extra) > 0);
    return s;
}

/* Runs exec over one partition (tag, nrows); output rows in *out. */
static int run(const char *args, int tag, size_t nrows, bool extra_col, rows *out, sb_err *e)
{
    const sb_op_impl *op = sb_op_find("exec");
    void *st;
    if (op->init(args, &st, e) != 0)
        return -1;
    sb_op_out *o = sb_op_out_new(1 << 20, collect, out, e);
    size_t len;
    void *blob = make_part(tag, nrows, extra_col, &len);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, e), 0);
    int rc = sb_op_run(op, st, b, 0, o, e);
    if (rc == 0)
        rc = op->finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_batch_close(b);
    sb_part_free(blob);
    sb_op_out_free(o);
    op->free(st);
    return rc;
}

/* The rows of a partition as JSON, for comparisons. */
static void expected(int tag, size_t nrows, bool extra_col, rows *r)
{
    size_t len;
    void *blob = make_part(tag, nrows, extra_col, &len);
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
    rows_add_batch(r, b);
    sb_batch_close(b);
    sb_part_free(blob);
}

Test(exec_arrow, filter_mode_carries_every_column_type_both_ways)
{
    char *args = echo_args("", "\"batchSize\":5");
    rows got = {0}, want = {0};
    sb_err e = {0};
    cr_assert_eq(run(args, 1, 13, true, &got, &e), 0, "%s", e.msg);
    expected(1, 13, true, &want);
    cr_assert_eq(got.n, 13);
    for (size_t i = 0; i < 13; i++)
        cr_assert_str_eq(got.rows[i], want.rows[i], "row %zu", i);
    cr_expect(strstr(got.rows[1], "\"text\":null") != NULL, "%s", got.rows[1]);
    cr_expect(strstr(got.rows[4], "\"vec\":null") != NULL, "%s", got.rows[4]);
    rows_free(&got);
    rows_free(&want);
    free(args);
}

Test(exec_arrow, batches_mode_keeps_its_process_and_streams_across_tasks)
{
    char *args = echo_args("\"--seen\"", "\"mode\":\"batches\",\"batchSize\":5");
    rows got = {0};
    sb_err e = {0};
    cr_assert_eq(run(args, 1, 13, false, &got, &e), 0, "%s", e.msg);
    cr_assert_eq(got.n, 13);
    cr_expect(strstr(got.rows[0], "\"seen\":1}") != NULL, "%s", got.rows[0]);
    cr_expect(strstr(got.rows[12], "\"seen\":3}") != NULL, "%s", got.rows[12]);
    rows_free(&got);
    /* the next task of this stage continues the same process and streams */
    cr_assert_eq(run(args, 2, 4, false, &got, &e), 0, "%s", e.msg);
    cr_assert_eq(got.n, 4);
    cr_expect(strstr(got.rows[0], "\"id\":2000,") != NULL, "%s", got.rows[0]);
    cr_expect(strstr(got.rows[0], "\"seen\":4}") != NULL, "the same process: %s", got.rows[0]);
    rows_free(&got);
    /* an input with another schema gets a process of its own (a stream has one schema) */
    cr_assert_eq(run(args, 3, 2, true, &got, &e), 0, "%s", e.msg);
    cr_assert_eq(got.n, 2);
    cr_expect(strstr(got.rows[0], "\"x\":0,\"seen\":1}") != NULL, "%s", got.rows[0]);
    rows_free(&got);
    cr_expect_gt(sb_op_children_rss(), 0, "two pooled processes count as the worker's memory");
    sb_op_shutdown();
    cr_expect_eq(sb_op_children_rss(), 0);
    free(args);
}

Test(exec_arrow, an_output_stream_may_restart_with_a_new_schema)
{
    /* batch 1 answered by an empty stream of no columns, then the real schema */
    char *args = echo_args("\"--empty-first\"", "\"mode\":\"batches\",\"batchSize\":5");
    rows got = {0}, want = {0};
    sb_err e = {0};
    cr_assert_eq(run(args, 1, 13, false, &got, &e), 0, "%s", e.msg);
    expected(1, 13, false, &want);
    cr_assert_eq(got.n, 8, "rows of batches 2 and 3");
    for (size_t i = 0; i < 8; i++)
        cr_assert_str_eq(got.rows[i], want.rows[5 + i]);
    rows_free(&got);
    rows_free(&want);
    sb_op_shutdown();
    free(args);
}

Test(exec_arrow, output_may_expand_in_filter_mode)
{
    char *args = echo_args("\"--times\",\"10\"", "");
    rows got = {0};
    sb_err e = {0};
    cr_assert_eq(run(args, 1, 13, false, &got, &e), 0, "%s", e.msg);
    cr_assert_eq(got.n, 130);
    rows_free(&got);
    free(args);
}

Test(exec_arrow, misbehaving_processes_are_clear_errors)
{
    sb_err e = {0};
    rows got = {0};
    struct {
        const char *opts, *extra, *want;
    } cases[] = {
        {"\"--garbage\"", "", "its output is not an Arrow IPC stream"},
        {"\"--garbage\"", "\"mode\":\"batches\"", "its output is not an Arrow IPC stream"},
        {"\"--exit-after\",\"2\"", "\"mode\":\"batches\",\"batchSize\":5",
         "the process ended before answering the batch: "},
        {"\"--times\",\"0\"", "\"mode\":\"batches\",\"batchSize\":5,\"timeout\":\"1s\"",
         "no answer before the timeout; killed"},
        {"\"--hang-at\",\"1\"", "\"mode\":\"batches\",\"timeout\":\"500ms\"",
         "no answer before the timeout; killed"},
        {"\"--stderr\",\"Traceback: ValueError: bad row 7\"", "",
         "exited with status 3; stderr: Traceback: ValueError: bad row 7"},
        {"\"--times\",\"2\"", "\"mode\":\"batches\",\"batchSize\":100",
         "after answering its last batch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *args = echo_args(cases[i].opts, cases[i].extra);
        cr_expect_eq(run(args, 1, 13, false, &got, &e), -1, "case %zu", i);
        cr_expect(strstr(e.msg, cases[i].want) != NULL, "case %zu: %s", i, e.msg);
        rows_free(&got);
        free(args);
        sb_op_shutdown();
    }
}

Test(exec_arrow, a_task_without_rows_starts_no_process)
{
    char *args;
    cr_assert(asprintf(&args, "{\"command\":[\"/nonexistent/prog\"],\"framing\":\"arrow\"}") > 0);
    rows got = {0};
    sb_err e = {0};
    cr_assert_eq(run(args, 1, 0, false, &got, &e), 0, "%s", e.msg);
    cr_assert_eq(got.n, 0);
    cr_assert_eq(run(args, 1, 3, false, &got, &e), -1);
    cr_expect(strstr(e.msg, "/nonexistent/prog") != NULL, "%s", e.msg);
    free(args);
}
