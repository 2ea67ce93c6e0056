/* Tests of lib/arrow/cdata.h: the Arrow C Data Interface export of an opened batch. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "arrow/cdata.h"
#include "partition/partition.h"

static const sb_field fields[] = {
    {.name = "id", .type = SB_TYPE_INT64},
    {.name = "text", .type = SB_TYPE_UTF8, .nullable = true},
    {.name = "ok", .type = SB_TYPE_BOOL},
    {.name = "t",
     .type = SB_TYPE_FIXED_LIST,
     .child_type = SB_TYPE_FLOAT32,
     .list_size = 4,
     .nullable = true},
    {.name = "u16", .type = SB_TYPE_UINT16},
    {.name = "bin", .type = SB_TYPE_BINARY},
};
#define NF 6
#define ROWS 37

static void *make_blob(size_t *len)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(fields, NF, &err);
    cr_assert_not_null(b, "%s", err.msg);
    for (size_t i = 0; i < ROWS; i++) {
        char s[16];
        int n = snprintf(s, sizeof s, "row%zu", i);
        float v[4] = {(float)i, 1, 2, 3};
        cr_assert_eq(sb_batch_builder_append_int(b, 0, (int64_t)i, &err), 0);
        if (i % 5 == 0)
            cr_assert_eq(sb_batch_builder_append_null(b, 1, &err), 0);
        else
            cr_assert_eq(sb_batch_builder_append_binary(b, 1, s, (size_t)n, &err), 0);
        cr_assert_eq(sb_batch_builder_append_bool(b, 2, i & 1, &err), 0);
        if (i == 7)
            cr_assert_eq(sb_batch_builder_append_null(b, 3, &err), 0);
        else
            cr_assert_eq(sb_batch_builder_append_list(b, 3, v, 4, &err), 0);
        cr_assert_eq(sb_batch_builder_append_uint(b, 4, 65535 - i, &err), 0);
        cr_assert_eq(sb_batch_builder_append_binary(b, 5, s, 2, &err), 0);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    return blob;
}

Test(arrow, formats)
{
    char buf[16];
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_INT64, 0, buf), "l");
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_UINT8, 0, buf), "C");
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_FLOAT32, 0, buf), "f");
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_FLOAT64, 0, buf), "g");
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_BOOL, 0, buf), "b");
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_BINARY, 0, buf), "z");
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_UTF8, 0, buf), "u");
    cr_assert_str_eq(sb_arrow_format(SB_TYPE_FIXED_LIST, 224, buf), "+w:224");
    cr_assert_null(sb_arrow_format((sb_type)0, 0, buf));
}

Test(arrow, export_struct_of_columns)
{
    size_t len;
    void *blob = make_blob(&len);
    sb_batch *bt;
    sb_err err = {0};
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    struct ArrowSchema s;
    struct ArrowArray a;
    cr_assert_eq(sb_batch_export(bt, &s, &a, &err), 0, "%s", err.msg);
    /* Column views for comparison, then the batch is closed: the export stands alone. */
    sb_column cols[NF];
    for (size_t i = 0; i < NF; i++)
        cols[i] = *sb_batch_column(bt, i);
    sb_batch_close(bt);

    cr_assert_str_eq(s.format, "+s");
    cr_assert_eq(s.n_children, NF);
    cr_assert_not_null(s.release);
    const char *want_fmt[NF] = {"l", "u", "b", "+w:4", "S", "z"};
    for (size_t i = 0; i < NF; i++) {
        cr_assert_str_eq(s.children[i]->format, want_fmt[i]);
        cr_assert_str_eq(s.children[i]->name, fields[i].name);
        cr_assert_eq(s.children[i]->flags, fields[i].nullable ? ARROW_FLAG_NULLABLE : 0);
        cr_assert_null(s.children[i]->dictionary);
    }
    cr_assert_eq(s.children[3]->n_children, 1);
    cr_assert_str_eq(s.children[3]->children[0]->format, "f");
    cr_assert_str_eq(s.children[3]->children[0]->name, "item");

    cr_assert_eq(a.length, ROWS);
    cr_assert_eq(a.null_count, 0);
    cr_assert_eq(a.offset, 0);
    cr_assert_eq(a.n_buffers, 1);
    cr_assert_null(a.buffers[0]);
    cr_assert_eq(a.n_children, NF);
    struct ArrowArray *id = a.children[0], *text = a.children[1], *ok = a.children[2],
                      *t = a.children[3];
    cr_assert_eq(id->length, ROWS);
    cr_assert_eq(id->n_buffers, 2);
    cr_assert_null(id->buffers[0], "no nulls: no bitmap");
    cr_assert_eq(id->buffers[1], cols[0].values, "zero copy");
    cr_assert_eq(((const int64_t *)id->buffers[1])[36], 36);
    cr_assert_eq(text->n_buffers, 3);
    cr_assert_eq(text->null_count, 8);
    cr_assert_eq(text->buffers[0], cols[1].validity);
    cr_assert_eq(text->buffers[1], (const void *)cols[1].offsets);
    cr_assert_eq(text->buffers[2], cols[1].values);
    const int32_t *off = text->buffers[1];
    cr_assert_eq(memcmp((const char *)text->buffers[2] + off[12], "row12", 5), 0);
    cr_assert_eq(ok->n_buffers, 2);
    cr_assert_eq(((const uint8_t *)ok->buffers[1])[0], 0xAA, "bools are bit-packed LSB first");
    cr_assert_eq(t->n_buffers, 1);
    cr_assert_eq(t->null_count, 1);
    cr_assert_eq(t->n_children, 1);
    cr_assert_eq(t->children[0]->length, ROWS * 4);
    cr_assert_eq(t->children[0]->n_buffers, 2);
    cr_assert_eq(t->children[0]->buffers[1], cols[3].values);
    cr_assert_eq(((const float *)t->children[0]->buffers[1])[4 * 9], 9.0f);

    /* The consumer moves one child out (as the spec allows), releases the parent, then the
     * child: nothing leaks or is freed twice (ASan/valgrind check this). */
    struct ArrowArray moved = *a.children[1];
    a.children[1]->release = NULL;
    struct ArrowSchema moved_s = *s.children[3];
    s.children[3]->release = NULL;
    a.release(&a);
    cr_assert_null(a.release);
    s.release(&s);
    cr_assert_null(s.release);
    cr_assert_eq(moved.length, ROWS);
    cr_assert_str_eq(moved_s.children[0]->name, "item");
    moved.release(&moved);
    cr_assert_null(moved.release);
    moved_s.release(&moved_s);
    sb_part_free(blob);
}

Test(arrow, export_schema_only_and_empty_batch)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(fields, NF, &err);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    struct ArrowSchema s;
    cr_assert_eq(sb_batch_export(bt, &s, NULL, &err), 0);
    cr_assert_eq(s.n_children, NF);
    s.release(&s);
    struct ArrowArray a;
    cr_assert_eq(sb_batch_export(bt, NULL, &a, &err), 0);
    cr_assert_eq(a.length, 0);
    cr_assert_eq(a.children[1]->length, 0);
    cr_assert_eq(((const int32_t *)a.children[1]->buffers[1])[0], 0);
    a.release(&a);
    cr_assert_eq(sb_batch_export(NULL, &s, &a, &err), -1);
    cr_assert_str_eq(err.msg, "arrow export: NULL batch");
    sb_batch_close(bt);
    sb_part_free(blob);
    sb_batch_builder_free(b);
}

/* DATE and TIMESTAMP columns export as date32 ("tdD") and time-zone-less timestamps ("tsm:",
 * "tsu:", "tsn:"), and a view of the export (or of a timestamp with a time zone, which is
 * dropped) has the same logical types. */
Test(arrow, date_and_timestamp_formats_both_ways)
{
    const sb_field lf[] = {{.name = "d", .type = SB_TYPE_INT32, .logical = SB_LOGICAL_DATE},
                           {.name = "ms", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_MILLIS},
                           {.name = "us", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_MICROS},
                           {.name = "ns", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_NANOS},
                           {.name = "n", .type = SB_TYPE_INT64}};
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(lf, 5, &err);
    cr_assert_not_null(b, "%s", err.msg);
    for (int64_t i = 0; i < 3; i++)
        for (size_t c = 0; c < 5; c++)
            cr_assert_eq(sb_batch_builder_append_int(b, c, i * 1000 - (int64_t)c, &err), 0, "%s",
                         err.msg);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    struct ArrowSchema s;
    struct ArrowArray a;
    cr_assert_eq(sb_batch_export(bt, &s, &a, &err), 0, "%s", err.msg);
    const char *want[] = {"tdD", "tsm:", "tsu:", "tsn:", "l"};
    for (size_t c = 0; c < 5; c++)
        cr_assert_str_eq(s.children[c]->format, want[c]);
    sb_arrow_view v;
    cr_assert_eq(sb_arrow_view_open(&s, &a, &v, &err), 0, "%s", err.msg);
    for (size_t c = 0; c < 5; c++) {
        cr_assert_eq(v.fields[c].type, lf[c].type, "%s", lf[c].name);
        cr_assert_eq(v.fields[c].logical, lf[c].logical, "%s", lf[c].name);
        cr_assert_eq(v.cols[c].logical, lf[c].logical, "%s", lf[c].name);
        cr_assert_eq(
            memcmp(v.cols[c].values, sb_batch_column(bt, c)->values, 3 * sb_type_width(lf[c].type)),
            0);
    }
    sb_arrow_view_close(&v);
    /* a producer's timestamp with a time zone: the unit is kept, the zone dropped */
    const char *fmt = s.children[1]->format;
    s.children[1]->format = "tsm:Europe/Paris";
    cr_assert_eq(sb_arrow_view_open(&s, &a, &v, &err), 0, "%s", err.msg);
    cr_assert_eq(v.fields[1].logical, SB_LOGICAL_TS_MILLIS);
    sb_arrow_view_close(&v);
    s.children[1]->format = "tdm"; /* date64 has no column type here */
    cr_assert_neq(sb_arrow_view_open(&s, &a, &v, &err), 0);
    cr_assert(strstr(err.msg, "unsupported format \"tdm\"") != NULL, "%s", err.msg);
    s.children[1]->format = fmt;
    s.release(&s);
    a.release(&a);
    sb_batch_close(bt);
    sb_part_free(blob);
}
