/* Unit tests of which columns sb_op_out_append_columns_of() checks for UTF-8: a column an op or
 * plugin passed through from its input (the input's values buffer, offsets inside the input
 * column's) is copied as it is; any other column is checked, even one that reuses the input's
 * values buffer with offsets of its own (a plugin that re-slices the bytes may cut a character
 * in two). */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "partition/partition.h"
#include "worker/ops/ops.h"

TestSuite(op_out_utf8, .timeout = 30);

static const sb_field field = {.name = "s", .type = SB_TYPE_UTF8};

typedef struct {
    size_t parts, rows;
    char text[256]; /* the output's values, concatenated */
} got;

static int keep(void *blob, size_t len, uint64_t rows, void *ud)
{
    got *g = ud;
    sb_batch *b;
    sb_err e;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, 0);
    for (size_t r = 0; r < c->length; r++) {
        size_t n;
        const void *p = sb_column_binary(c, r, &n);
        cr_assert_lt(strlen(g->text) + n, sizeof g->text);
        strncat(g->text, p, n);
    }
    g->parts++;
    g->rows += rows;
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* "é", "ab", "çé": an opened batch of one utf8 column. */
static sb_batch *input(void **blob)
{
    sb_err e;
    sb_batch_builder *bb = sb_batch_builder_new(&field, 1, &e);
    cr_assert_not_null(bb, "%s", e.msg);
    const char *vals[] = {"\xc3\xa9", "ab", "\xc3\xa7\xc3\xa9"};
    for (size_t i = 0; i < 3; i++)
        cr_assert_eq(sb_batch_builder_append_binary(bb, 0, vals[i], strlen(vals[i]), &e), 0, "%s",
                     e.msg);
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(*blob, len, &b, &e), 0, "%s", e.msg);
    return b;
}

/* Appends col (rows [first, first+n)) through append_columns_of(in); 0 or -1, the message in e. */
static int append(const sb_batch *in, const sb_column *col, size_t first, size_t n, got *g,
                  sb_err *e)
{
    memset(g, 0, sizeof *g);
    sb_op_out *o = sb_op_out_new(1 << 20, keep, g, e);
    cr_assert_not_null(o, "%s", e->msg);
    int rc = sb_op_out_append_columns_of(o, in, &field, col, 1, first, n, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_op_out_free(o);
    return rc;
}

Test(op_out_utf8, a_column_passed_through_whole_or_in_part_is_copied_as_it_is)
{
    void *blob;
    sb_batch *in = input(&blob);
    sb_column c = *sb_batch_column(in, 0);
    got g;
    sb_err e;
    cr_assert_eq(append(in, &c, 0, 3, &g, &e), 0, "%s", e.msg);
    cr_expect_eq(g.rows, 3);
    cr_expect_str_eq(g.text, "\xc3\xa9"
                             "ab\xc3\xa7\xc3\xa9");
    /* a slice of it, as a plugin returns when it takes rows 1..2 (offsets start inside) */
    sb_column s = c;
    s.offsets = c.offsets + 1;
    s.length = 2;
    cr_assert_eq(append(in, &s, 0, 2, &g, &e), 0, "%s", e.msg);
    cr_expect_eq(g.rows, 2);
    cr_expect_str_eq(g.text, "ab\xc3\xa7\xc3\xa9");
    sb_batch_close(in);
    sb_part_free(blob);
}

Test(op_out_utf8, the_input_bytes_cut_by_offsets_of_its_own_are_checked)
{
    void *blob;
    sb_batch *in = input(&blob);
    const sb_column *c = sb_batch_column(in, 0);
    /* the same values buffer, offsets the plugin made: row 0 is the first byte of "é" */
    int32_t off[3] = {c->offsets[0], c->offsets[0] + 1, c->offsets[0] + 2};
    sb_column bad = *c;
    bad.offsets = off;
    bad.length = 2;
    bad.values_len = 2;
    got g;
    sb_err e;
    cr_assert_neq(append(in, &bad, 0, 2, &g, &e), 0, "a cut character must not pass");
    cr_expect(strstr(e.msg, "not valid UTF-8") != NULL, "%s", e.msg);
    cr_expect_eq(g.rows, 0, "nothing emitted");
    /* and without the input to compare with, a pass-through is checked like any column */
    cr_assert_eq(append(NULL, c, 0, 3, &g, &e), 0, "%s", e.msg);
    cr_expect_eq(g.rows, 3);
    sb_batch_close(in);
    sb_part_free(blob);
}
