/* Tests of lib/arrow/ipc.h: the Arrow IPC stream writer and reader, with each other. (Against
 * pyarrow, both ways and for every type: tests/sdk/test-arrow-ipc.py; random bytes:
 * tests/fuzz/fuzz_arrow_ipc.c.) */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrow/ipc.h"
#include "partition/partition.h"

static const sb_field fields[] = {
    {.name = "id", .type = SB_TYPE_INT64},
    {.name = "text", .type = SB_TYPE_UTF8, .nullable = true},
    {.name = "ok", .type = SB_TYPE_BOOL, .nullable = true},
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

static sb_batch *make_batch(void **blob)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(fields, NF, &err);
    cr_assert_not_null(b, "%s", err.msg);
    for (size_t i = 0; i < ROWS; i++) {
        char s[16];
        int n = snprintf(s, sizeof s, "row%zu", i);
        float v[4] = {(float)i, 1, 2, 3};
        cr_assert_eq(sb_batch_builder_append_int(b, 0, (int64_t)i * 1000003, &err), 0);
        if (i % 5 == 0)
            cr_assert_eq(sb_batch_builder_append_null(b, 1, &err), 0);
        else
            cr_assert_eq(sb_batch_builder_append_binary(b, 1, s, (size_t)n, &err), 0);
        if (i % 7 == 3)
            cr_assert_eq(sb_batch_builder_append_null(b, 2, &err), 0);
        else
            cr_assert_eq(sb_batch_builder_append_bool(b, 2, i & 1, &err), 0);
        if (i == 7)
            cr_assert_eq(sb_batch_builder_append_null(b, 3, &err), 0);
        else
            cr_assert_eq(sb_batch_builder_append_list(b, 3, v, 4, &err), 0);
        cr_assert_eq(sb_batch_builder_append_uint(b, 4, 65535 - i, &err), 0);
        cr_assert_eq(sb_batch_builder_append_binary(b, 5, "\0\1\2\3", i % 4, &err), 0);
    }
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, blob, &len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(*blob, len, &bt, &err), 0, "%s", err.msg);
    return bt;
}

static bool valid(const sb_column *c, size_t i)
{
    return c->validity == NULL || ((c->validity[i >> 3] >> (i & 7)) & 1);
}

/* Row i of a and row j of b hold the same value. */
static void same_row(const sb_column *a, size_t i, const sb_column *b, size_t j)
{
    cr_assert_eq(valid(a, i), valid(b, j), "%s row %zu: validity", a->name, i);
    if (!valid(a, i))
        return;
    switch (a->type) {
    case SB_TYPE_BOOL: {
        bool x = (((const uint8_t *)a->values)[i >> 3] >> (i & 7)) & 1;
        bool y = (((const uint8_t *)b->values)[j >> 3] >> (j & 7)) & 1;
        cr_assert_eq(x, y, "%s row %zu", a->name, i);
        break;
    }
    case SB_TYPE_UTF8:
    case SB_TYPE_BINARY: {
        size_t na = (size_t)(a->offsets[i + 1] - a->offsets[i]);
        size_t nb = (size_t)(b->offsets[j + 1] - b->offsets[j]);
        cr_assert_eq(na, nb, "%s row %zu: length", a->name, i);
        cr_assert(na == 0 || memcmp((const char *)a->values + a->offsets[i],
                                    (const char *)b->values + b->offsets[j], na) == 0);
        break;
    }
    default: {
        size_t w = a->type == SB_TYPE_FIXED_LIST ? a->list_size * sb_type_width(a->child_type)
                                                 : sb_type_width(a->type);
        cr_assert(
            memcmp((const uint8_t *)a->values + i * w, (const uint8_t *)b->values + j * w, w) == 0,
            "%s row %zu", a->name, i);
    }
    }
}

/* Reads the whole stream in buf; returns the reader (caller frees) after checking each batch's
 * rows against cols starting at the rows listed in firsts. */
static void read_back(const sb_ipc_buf *buf, const sb_column *cols, const size_t *firsts,
                      const size_t *counts, size_t nb)
{
    sb_ipc_reader r;
    sb_ipc_reader_init(&r);
    sb_err err = {0};
    size_t at = 0, batch = 0;
    for (;;) {
        size_t total;
        cr_assert_eq(sb_ipc_frame(buf->p + at, buf->len - at, buf->len, &total, &err), 0, "%s",
                     err.msg);
        uint8_t *m = malloc(total);
        memcpy(m, buf->p + at, total);
        sb_ipc_kind kind;
        cr_assert_eq(sb_ipc_read(&r, m, total, &kind, &err), 0, "%s", err.msg);
        at += total;
        if (kind == SB_IPC_BATCH) {
            cr_assert_lt(batch, nb);
            cr_assert_eq(r.rows, counts[batch]);
            cr_assert_eq(r.ncols, NF);
            for (size_t c = 0; c < NF; c++) {
                cr_assert_str_eq(r.fields[c].name, fields[c].name);
                cr_assert_eq(r.fields[c].type, fields[c].type);
                cr_assert_eq(r.fields[c].nullable, fields[c].nullable);
                for (size_t i = 0; i < r.rows; i++)
                    same_row(&cols[c], firsts[batch] + i, &r.cols[c], i);
            }
            batch++;
        }
        free(m);
        if (kind == SB_IPC_EOS)
            break;
    }
    cr_assert_eq(batch, nb);
    cr_assert_eq(at, buf->len);
    sb_ipc_reader_free(&r);
}

Test(arrow_ipc, round_trip_of_every_slice_shape)
{
    void *blob;
    sb_batch *bt = make_batch(&blob);
    sb_column cols[NF];
    for (size_t i = 0; i < NF; i++)
        cols[i] = *sb_batch_column(bt, i);
    sb_err err = {0};
    /* slices starting on and off byte boundaries, a single row and an empty batch */
    size_t firsts[] = {0, 3, 8, 11, 36, 37}, counts[] = {3, 5, 3, 25, 1, 0};
    sb_ipc_buf buf = {0};
    cr_assert_eq(sb_ipc_write_schema(&buf, fields, NF, &err), 0, "%s", err.msg);
    for (size_t k = 0; k < 6; k++)
        cr_assert_eq(sb_ipc_write_batch(&buf, cols, NF, firsts[k], counts[k], &err), 0, "%s",
                     err.msg);
    cr_assert_eq(sb_ipc_write_eos(&buf, &err), 0);
    cr_assert_eq(buf.len % 8, 0, "every message is a multiple of 8 bytes");
    read_back(&buf, cols, firsts, counts, 6);
    cr_assert_neq(sb_ipc_write_batch(&buf, cols, NF, 30, 8, &err), 0, "rows past the end");
    sb_ipc_buf_free(&buf);
    sb_batch_close(bt);
    sb_part_free(blob);
}

Test(arrow_ipc, frame_needs_every_byte)
{
    void *blob;
    sb_batch *bt = make_batch(&blob);
    sb_column cols[NF];
    for (size_t i = 0; i < NF; i++)
        cols[i] = *sb_batch_column(bt, i);
    sb_err err = {0};
    sb_ipc_buf buf = {0};
    cr_assert_eq(sb_ipc_write_schema(&buf, fields, NF, &err), 0);
    size_t schema_len = buf.len;
    cr_assert_eq(sb_ipc_write_batch(&buf, cols, NF, 0, ROWS, &err), 0);
    size_t total;
    for (size_t n = 0; n < schema_len; n++)
        cr_assert_eq(sb_ipc_frame(buf.p, n, 1 << 20, &total, &err), 1, "prefix of %zu bytes", n);
    cr_assert_eq(sb_ipc_frame(buf.p, buf.len, 1 << 20, &total, &err), 0);
    cr_assert_eq(total, schema_len);
    size_t blen = buf.len - schema_len;
    for (size_t n = 0; n < blen; n++)
        cr_assert_eq(sb_ipc_frame(buf.p + schema_len, n, 1 << 20, &total, &err), 1);
    cr_assert_eq(sb_ipc_frame(buf.p + schema_len, blen, 1 << 20, &total, &err), 0);
    cr_assert_eq(total, blen);
    /* a limit smaller than the message is an error, not a wait for more */
    cr_assert_eq(sb_ipc_frame(buf.p + schema_len, blen, 64, &total, &err), -1);
    cr_assert(strstr(err.msg, "limit") != NULL, "%s", err.msg);
    sb_ipc_buf_free(&buf);
    sb_batch_close(bt);
    sb_part_free(blob);
}

/* Reads a schema then one batch message; returns the batch's rc and err. */
static int read_two(const sb_ipc_buf *buf, sb_err *err)
{
    sb_ipc_reader r;
    sb_ipc_reader_init(&r);
    size_t t1, t2;
    sb_ipc_kind kind;
    cr_assert_eq(sb_ipc_frame(buf->p, buf->len, buf->len, &t1, err), 0);
    cr_assert_eq(sb_ipc_read(&r, buf->p, t1, &kind, err), 0, "%s", err->msg);
    int rc = sb_ipc_frame(buf->p + t1, buf->len - t1, buf->len, &t2, err);
    if (rc >= 0) /* a stream cut short: the reader must refuse what it was given */
        rc = sb_ipc_read(&r, buf->p + t1, rc == 0 ? t2 : buf->len - t1, &kind, err);
    sb_ipc_reader_free(&r);
    return rc;
}

/* One int64 + one utf8 column, 4 rows; *body is where the body starts in buf. */
static void small_stream(sb_ipc_buf *buf, size_t *body, const char *const *text, bool nullable)
{
    sb_field f[2] = {{.name = "n", .type = SB_TYPE_INT64},
                     {.name = "s", .type = SB_TYPE_UTF8, .nullable = nullable}};
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(f, 2, &err);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(sb_batch_builder_append_int(b, 0, i, &err), 0);
        if (text[i] == NULL)
            cr_assert_eq(sb_batch_builder_append_null(b, 1, &err), 0);
        else
            cr_assert_eq(sb_batch_builder_append_binary(b, 1, text[i], strlen(text[i]), &err), 0);
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0);
    sb_batch_builder_free(b);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0);
    sb_column c[2] = {*sb_batch_column(bt, 0), *sb_batch_column(bt, 1)};
    cr_assert_eq(sb_ipc_write_schema(buf, f, 2, &err), 0);
    size_t start = buf->len;
    cr_assert_eq(sb_ipc_write_batch(buf, c, 2, 0, 4, &err), 0);
    uint32_t meta;
    memcpy(&meta, buf->p + start + 4, 4);
    *body = start + 8 + meta;
    sb_batch_close(bt);
    sb_part_free(blob);
}

Test(arrow_ipc, damaged_batches_are_errors_that_say_what)
{
    const char *text[4] = {"ab", "cde", NULL, "f"};
    sb_ipc_buf buf = {0};
    size_t body;
    small_stream(&buf, &body, text, true);
    sb_err err = {0};
    cr_assert_eq(read_two(&buf, &err), 0, "%s", err.msg);

    /* body: n values (32 bytes) | s validity (8) | s offsets (5 x 4 -> 24) | s data */
    sb_ipc_buf bad = {0};
    bad = (sb_ipc_buf){malloc(buf.len), buf.len, buf.len};
    memcpy(bad.p, buf.p, buf.len);
    int32_t down = 1; /* offsets[2] below offsets[1] */
    memcpy(bad.p + body + 40 + 8, &down, 4);
    cr_assert_eq(read_two(&bad, &err), -1);
    cr_assert(strstr(err.msg, "column \"s\": offset 2 is 1") != NULL, "%s", err.msg);

    memcpy(bad.p, buf.p, buf.len);
    bad.p[body + 64] = 0xff; /* not UTF-8 in row 0's text */
    cr_assert_eq(read_two(&bad, &err), -1);
    cr_assert(strstr(err.msg, "column \"s\", row 0: not valid UTF-8") != NULL, "%s", err.msg);

    memcpy(bad.p, buf.p, buf.len);
    cr_assert_eq(read_two(&(sb_ipc_buf){bad.p, body + 16, body + 16}, &err), -1,
                 "a body cut short");
    cr_assert(strstr(err.msg, "truncated message body") != NULL, "%s", err.msg);
    sb_ipc_buf_free(&bad);
    sb_ipc_buf_free(&buf);

    /* nulls in a column the schema says is not nullable */
    sb_ipc_buf a = {0}, b2 = {0};
    size_t body_a, body_b;
    small_stream(&a, &body_a, text, true);
    const char *full[4] = {"ab", "cde", "x", "f"};
    small_stream(&b2, &body_b, full, false);
    /* b2's schema with a's batch */
    size_t t1;
    cr_assert_eq(sb_ipc_frame(b2.p, b2.len, b2.len, &t1, &err), 0);
    size_t ta;
    cr_assert_eq(sb_ipc_frame(a.p, a.len, a.len, &ta, &err), 0);
    sb_ipc_buf mix = {malloc(t1 + a.len - ta), t1 + a.len - ta, t1 + a.len - ta};
    memcpy(mix.p, b2.p, t1);
    memcpy(mix.p + t1, a.p + ta, a.len - ta);
    cr_assert_eq(read_two(&mix, &err), -1);
    cr_assert(strstr(err.msg, "column \"s\" is not nullable but holds 1 nulls") != NULL, "%s",
              err.msg);
    sb_ipc_buf_free(&mix);
    sb_ipc_buf_free(&a);
    sb_ipc_buf_free(&b2);
}

Test(arrow_ipc, message_order)
{
    const char *text[4] = {"a", "b", "c", "d"};
    sb_ipc_buf buf = {0};
    size_t body;
    small_stream(&buf, &body, text, false);
    sb_err err = {0};
    size_t t1, t2;
    sb_ipc_kind kind;
    cr_assert_eq(sb_ipc_frame(buf.p, buf.len, buf.len, &t1, &err), 0);
    cr_assert_eq(sb_ipc_frame(buf.p + t1, buf.len - t1, buf.len, &t2, &err), 0);
    sb_ipc_reader r;
    sb_ipc_reader_init(&r);
    cr_assert_eq(sb_ipc_read(&r, buf.p + t1, t2, &kind, &err), -1);
    cr_assert(strstr(err.msg, "before the schema") != NULL, "%s", err.msg);
    cr_assert_eq(sb_ipc_read(&r, buf.p, t1, &kind, &err), 0);
    cr_assert_eq(kind, SB_IPC_SCHEMA);
    cr_assert_eq(sb_ipc_read(&r, buf.p, t1, &kind, &err), -1);
    cr_assert(strstr(err.msg, "second schema") != NULL, "%s", err.msg);
    sb_ipc_reader_free(&r);
    sb_ipc_buf_free(&buf);
}

/* DATE and TIMESTAMP columns go out as Arrow's Date(DAY) and Timestamp(unit) and come back as
 * int32/int64 with the same logical type and values. */
Test(arrow_ipc, date_and_timestamp_keep_their_logical_type)
{
    const sb_field lf[] = {{.name = "d", .type = SB_TYPE_INT32, .logical = SB_LOGICAL_DATE},
                           {.name = "ms", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_MILLIS},
                           {.name = "us", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_MICROS},
                           {.name = "ns", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_NANOS}};
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(lf, 4, &err);
    cr_assert_not_null(b, "%s", err.msg);
    for (int64_t i = 0; i < 5; i++)
        for (size_t c = 0; c < 4; c++)
            cr_assert_eq(sb_batch_builder_append_int(b, c, (i - 2) * 86400 + (int64_t)c, &err), 0,
                         "%s", err.msg);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    sb_column cols[4];
    for (size_t c = 0; c < 4; c++)
        cols[c] = *sb_batch_column(bt, c);
    sb_ipc_buf buf = {0};
    cr_assert_eq(sb_ipc_write_schema(&buf, lf, 4, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_ipc_write_batch(&buf, cols, 4, 0, 5, &err), 0, "%s", err.msg);
    sb_ipc_reader r;
    sb_ipc_reader_init(&r);
    size_t at = 0;
    for (int k = 0; k < 2; k++) {
        size_t total;
        cr_assert_eq(sb_ipc_frame(buf.p + at, buf.len - at, buf.len, &total, &err), 0, "%s",
                     err.msg);
        sb_ipc_kind kind;
        cr_assert_eq(sb_ipc_read(&r, buf.p + at, total, &kind, &err), 0, "%s", err.msg);
        cr_assert_eq(kind, k == 0 ? SB_IPC_SCHEMA : SB_IPC_BATCH);
        at += total;
    }
    cr_assert_eq(r.ncols, 4);
    for (size_t c = 0; c < 4; c++) {
        cr_assert_eq(r.fields[c].type, lf[c].type, "%s", lf[c].name);
        cr_assert_eq(r.fields[c].logical, lf[c].logical, "%s", lf[c].name);
        cr_assert_eq(r.cols[c].logical, lf[c].logical, "%s", lf[c].name);
        for (size_t i = 0; i < 5; i++)
            same_row(&cols[c], i, &r.cols[c], i);
    }
    sb_ipc_reader_free(&r);
    sb_ipc_buf_free(&buf);
    sb_batch_close(bt);
    sb_part_free(blob);
}
