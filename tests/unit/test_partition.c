/* Tests of lib/partition/partition.h: builder, blob layout, reader and the validation of
 * corrupt or lying blobs. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partition/crc32c.h"
#include "partition/partition.h"

/* Layout constants from the format description in partition.h. */
enum { H_TOTAL = 8, H_ROWS = 16, H_NCOLS = 24, H_NBUF = 28, H_DATA_OFF = 32, H_HCRC = 48 };

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static uint8_t *col_entry(uint8_t *blob, size_t i)
{
    return blob + 64 + 32 * i;
}
static uint8_t *buf_entry(uint8_t *blob, size_t bi)
{
    uint32_t ncols;
    memcpy(&ncols, blob + H_NCOLS, 4);
    return blob + 64 + 32 * ncols + 16 * bi;
}

/* A small batch with every type:
 *   0 id int64            (no nulls)        values i*1000-7
 *   1 score float64       nullable, row%3==1 null, else i/4.0
 *   2 flag bool           nullable, row 5 null, else i%2==0
 *   3 name utf8           nullable, row%4==3 null, else "név-<i>"
 *   4 raw binary          values of i%50 bytes 0..i%50-1
 *   5 vec fixed_list<float32,3>  nullable, row 2 null, else {i, i+0.5, -i}
 *   6 small int8          i%100-5
 *   7 big uint64          UINT64_MAX - i
 *   8 f float32           i*0.25
 * Buffers in order: 0:v 1:val 2:v 3:val 4:v 5:val 6:v 7:off 8:data 9:v 10:off 11:data 12:v
 * 13:val 14:v 15:val 16:v 17:val 18:v 19:val */
#define ROWS 10
static const sb_field all_fields[] = {
    {.name = "id", .type = SB_TYPE_INT64},
    {.name = "score", .type = SB_TYPE_FLOAT64, .nullable = true},
    {.name = "flag", .type = SB_TYPE_BOOL, .nullable = true},
    {.name = "name", .type = SB_TYPE_UTF8, .nullable = true},
    {.name = "raw", .type = SB_TYPE_BINARY},
    {.name = "vec",
     .type = SB_TYPE_FIXED_LIST,
     .child_type = SB_TYPE_FLOAT32,
     .list_size = 3,
     .nullable = true},
    {.name = "small", .type = SB_TYPE_INT8},
    {.name = "big", .type = SB_TYPE_UINT64},
    {.name = "f", .type = SB_TYPE_FLOAT32},
};
#define NF (sizeof all_fields / sizeof all_fields[0])

static void fill_row(sb_batch_builder *b, size_t i)
{
    sb_err err = {0};
    cr_assert_eq(sb_batch_builder_append_int(b, 0, (int64_t)i * 1000 - 7, &err), 0, "%s", err.msg);
    if (i % 3 == 1)
        cr_assert_eq(sb_batch_builder_append_null(b, 1, &err), 0, "%s", err.msg);
    else
        cr_assert_eq(sb_batch_builder_append_double(b, 1, (double)i / 4.0, &err), 0, "%s", err.msg);
    if (i == 5)
        cr_assert_eq(sb_batch_builder_append_null(b, 2, &err), 0, "%s", err.msg);
    else
        cr_assert_eq(sb_batch_builder_append_bool(b, 2, i % 2 == 0, &err), 0, "%s", err.msg);
    if (i % 4 == 3) {
        cr_assert_eq(sb_batch_builder_append_null(b, 3, &err), 0, "%s", err.msg);
    } else {
        char s[32];
        int n = snprintf(s, sizeof s, "n\xc3\xa9v-%zu", i);
        cr_assert_eq(sb_batch_builder_append_binary(b, 3, s, (size_t)n, &err), 0, "%s", err.msg);
    }
    uint8_t raw[64];
    for (size_t k = 0; k < i % 50; k++)
        raw[k] = (uint8_t)k;
    cr_assert_eq(sb_batch_builder_append_binary(b, 4, raw, i % 50, &err), 0, "%s", err.msg);
    if (i == 2) {
        cr_assert_eq(sb_batch_builder_append_null(b, 5, &err), 0, "%s", err.msg);
    } else {
        float v[3] = {(float)i, (float)i + 0.5f, -(float)i};
        cr_assert_eq(sb_batch_builder_append_list(b, 5, v, 3, &err), 0, "%s", err.msg);
    }
    cr_assert_eq(sb_batch_builder_append_int(b, 6, (int64_t)(i % 100) - 5, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_append_uint(b, 7, UINT64_MAX - i, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_append_double(b, 8, (double)i * 0.25, &err), 0, "%s", err.msg);
}

static uint8_t *make_blob(size_t rows, size_t *len)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(all_fields, NF, &err);
    cr_assert_not_null(b, "%s", err.msg);
    for (size_t i = 0; i < rows; i++)
        fill_row(b, i);
    void *blob = NULL;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    return blob;
}

static void check_batch(const sb_batch *bt, size_t rows)
{
    cr_assert_eq(sb_batch_rows(bt), rows);
    cr_assert_eq(sb_batch_ncols(bt), NF);
    for (size_t c = 0; c < NF; c++) {
        const sb_column *col = sb_batch_column(bt, c);
        cr_assert_str_eq(col->name, all_fields[c].name);
        cr_assert_eq(col->type, all_fields[c].type);
        cr_assert_eq(col->nullable, all_fields[c].nullable);
        cr_assert_eq(col->length, rows);
        cr_assert_eq((uintptr_t)col->values % 64, 0, "column %zu values not 64-aligned", c);
        if (col->validity != NULL)
            cr_assert_eq((uintptr_t)col->validity % 64, 0);
    }
    const sb_column *id = sb_batch_column(bt, 0), *score = sb_batch_column(bt, 1),
                    *flag = sb_batch_column(bt, 2), *name = sb_batch_column(bt, 3),
                    *raw = sb_batch_column(bt, 4), *vec = sb_batch_column(bt, 5),
                    *small = sb_batch_column(bt, 6), *big = sb_batch_column(bt, 7),
                    *f = sb_batch_column(bt, 8);
    cr_assert_null(id->validity, "a column without nulls has no bitmap");
    cr_assert_eq(score->null_count, rows / 3 + (rows % 3 == 2));
    cr_assert_eq(vec->list_size, 3);
    cr_assert_eq(vec->child_type, SB_TYPE_FLOAT32);
    cr_assert_eq(vec->values_len, rows * 3 * sizeof(float));
    for (size_t i = 0; i < rows; i++) {
        cr_assert_eq(sb_column_int64(id, i), (int64_t)i * 1000 - 7);
        cr_assert_eq(sb_column_valid(score, i), i % 3 != 1, "row %zu", i);
        if (i % 3 != 1)
            cr_assert_eq(sb_column_float64(score, i), (double)i / 4.0);
        cr_assert_eq(sb_column_valid(flag, i), i != 5);
        if (i != 5)
            cr_assert_eq(sb_column_bool(flag, i), i % 2 == 0);
        size_t n;
        const char *s = sb_column_binary(name, i, &n);
        if (i % 4 == 3) {
            cr_assert(!sb_column_valid(name, i));
            cr_assert_eq(n, 0);
        } else {
            char want[32];
            int wn = snprintf(want, sizeof want, "n\xc3\xa9v-%zu", i);
            cr_assert(sb_column_valid(name, i));
            cr_assert_eq(n, (size_t)wn);
            cr_assert_eq(memcmp(s, want, n), 0);
        }
        const uint8_t *r = sb_column_binary(raw, i, &n);
        cr_assert_eq(n, i % 50);
        for (size_t k = 0; k < n; k++)
            cr_assert_eq(r[k], k);
        cr_assert_eq(sb_column_valid(vec, i), i != 2);
        const float *v = sb_column_list(vec, i);
        if (i == 2) {
            cr_assert(v[0] == 0 && v[1] == 0 && v[2] == 0, "a null list is zero-filled");
        } else {
            cr_assert(v[0] == (float)i && v[1] == (float)i + 0.5f && v[2] == -(float)i);
        }
        cr_assert_eq(sb_column_int(small, i), (int64_t)(i % 100) - 5);
        cr_assert_eq(((const uint64_t *)big->values)[i], UINT64_MAX - i);
        cr_assert_eq(sb_column_float32(f, i), (float)i * 0.25f);
        cr_assert_eq(sb_column_double(f, i), (double)i * 0.25);
    }
}

Test(partition_types, names_widths_parse)
{
    for (int t = SB_TYPE_BOOL; t <= SB_TYPE_FIXED_LIST; t++)
        cr_assert_eq(sb_type_parse(sb_type_name((sb_type)t)), t);
    cr_assert_str_eq(sb_type_name(SB_TYPE_FIXED_LIST), "fixed_list");
    cr_assert_str_eq(sb_type_name((sb_type)99), "?");
    cr_assert_eq(sb_type_parse("int65"), 0);
    cr_assert_eq(sb_type_width(SB_TYPE_INT16), 2);
    cr_assert_eq(sb_type_width(SB_TYPE_FLOAT32), 4);
    cr_assert_eq(sb_type_width(SB_TYPE_UINT64), 8);
    cr_assert_eq(sb_type_width(SB_TYPE_UTF8), 0);
    cr_assert_eq(sb_type_width(SB_TYPE_BOOL), 0);
}

Test(partition_roundtrip, all_types)
{
    size_t len;
    uint8_t *blob = make_blob(ROWS, &len);
    cr_assert_eq((uintptr_t)blob % 64, 0);
    cr_assert_eq(len % 64, 0);
    cr_assert_eq(memcmp(blob, "SBPT", 4), 0);
    cr_assert_eq(get64(blob + H_TOTAL), len);
    cr_assert_eq(get64(blob + H_ROWS), ROWS);
    sb_batch *bt;
    sb_err err = {0};
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    check_batch(bt, ROWS);
    cr_assert_eq(sb_batch_find(bt, "vec"), 5);
    cr_assert_eq(sb_batch_find(bt, "nope"), -1);
    cr_assert_null(sb_batch_column(bt, NF));
    cr_assert_eq(sb_batch_blob(bt), blob);
    cr_assert_eq(sb_batch_blob_len(bt), len);
    /* Zero copy: the views point into the blob. */
    const sb_column *name = sb_batch_column(bt, 3);
    cr_assert((const uint8_t *)name->values > blob && (const uint8_t *)name->values < blob + len);
    cr_assert((const uint8_t *)name->name > blob && (const uint8_t *)name->name < blob + len);
    sb_batch_close(bt);
    sb_part_free(blob);
}

Test(partition_roundtrip, many_rows_and_bitmap_tail)
{
    /* 1003 rows: bitmaps end in a partial byte whose spare bits must be zero. */
    size_t len;
    uint8_t *blob = make_blob(1003, &len);
    sb_batch *bt;
    sb_err err = {0};
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    check_batch(bt, 1003);
    const sb_column *score = sb_batch_column(bt, 1);
    cr_assert_eq(score->validity[1002 / 8] >> (1003 % 8), 0, "spare validity bits are zero");
    const sb_column *flag = sb_batch_column(bt, 2);
    cr_assert_eq(((const uint8_t *)flag->values)[1002 / 8] >> (1003 % 8), 0);
    sb_batch_close(bt);
    sb_part_free(blob);
}

Test(partition_roundtrip, empty_batch)
{
    size_t len;
    uint8_t *blob = make_blob(0, &len);
    sb_batch *bt;
    sb_err err = {0};
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    check_batch(bt, 0);
    cr_assert_eq(sb_batch_column(bt, 3)->offsets[0], 0);
    sb_batch_close(bt);
    sb_part_free(blob);
}

Test(partition_roundtrip, zero_columns)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(NULL, 0, &err);
    cr_assert_not_null(b, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_bytes(b), 64);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    cr_assert_eq(len, 64);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_rows(bt), 0);
    cr_assert_eq(sb_batch_ncols(bt), 0);
    sb_batch_close(bt);
    /* A zero-column batch claiming rows is rejected. */
    put64((uint8_t *)blob + H_ROWS, 5);
    cr_assert_eq(sb_part_seal(blob, len, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), -1);
    cr_assert_str_eq(err.msg, "partition blob: row count 5 is impossible for 0 columns");
    sb_part_free(blob);
    sb_batch_builder_free(b);
}

Test(partition_builder, bytes_is_exact_and_finish_resets)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(all_fields, NF, &err);
    cr_assert_not_null(b);
    size_t prev = sb_batch_builder_bytes(b);
    for (size_t i = 0; i < 50; i++) {
        fill_row(b, i);
        size_t now = sb_batch_builder_bytes(b);
        cr_assert_geq(now, prev);
        prev = now;
    }
    cr_assert_eq(sb_batch_builder_rows(b), 50);
    void *blob1, *blob2;
    size_t len1, len2;
    cr_assert_eq(sb_batch_builder_finish(b, &blob1, &len1, &err), 0, "%s", err.msg);
    cr_assert_eq(len1, prev, "bytes() predicted %zu, finish produced %zu", prev, len1);
    cr_assert_eq(sb_batch_builder_rows(b), 0, "finish resets the builder");
    /* The reused builder produces the identical blob for the same rows. */
    for (size_t i = 0; i < 50; i++)
        fill_row(b, i);
    cr_assert_eq(sb_batch_builder_finish(b, &blob2, &len2, &err), 0, "%s", err.msg);
    cr_assert_eq(len1, len2);
    cr_assert_eq(memcmp(blob1, blob2, len1), 0);
    /* finish_into a buffer that is too small fails and leaves the builder as it was. */
    fill_row(b, 0);
    size_t need = sb_batch_builder_bytes(b);
    void *small = sb_part_alloc(need);
    size_t got;
    cr_assert_eq(sb_batch_builder_finish_into(b, small, need - 64, &got, &err), -1);
    char want[128];
    snprintf(want, sizeof want, "partition builder: output buffer of %zu bytes, %zu needed",
             need - 64, need);
    cr_assert_str_eq(err.msg, want);
    cr_assert_eq(sb_batch_builder_rows(b), 1);
    cr_assert_eq(sb_batch_builder_finish_into(b, small, need, &got, &err), 0, "%s", err.msg);
    cr_assert_eq(got, need);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(small, got, &bt, &err), 0, "%s", err.msg);
    check_batch(bt, 1);
    sb_batch_close(bt);
    sb_part_free(small);
    sb_part_free(blob1);
    sb_part_free(blob2);
    sb_batch_builder_free(b);
}

Test(partition_builder, column_length_mismatch)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(all_fields, NF, &err);
    fill_row(b, 0);
    cr_assert_eq(sb_batch_builder_append_int(b, 0, 1, &err), 0);
    cr_assert_eq(sb_batch_builder_rows(b), 1);
    cr_assert_eq(sb_batch_builder_col_length(b, 0), 2);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), -1);
    cr_assert_str_eq(
        err.msg, "partition builder: column 1 \"score\" has 1 values but column 0 \"id\" has 2");
    sb_batch_builder_free(b);
}

Test(partition_builder, append_errors)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(all_fields, NF, &err);
    cr_assert_eq(sb_batch_builder_append_int(b, 9, 1, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 9 out of range (the batch has 9)");
    cr_assert_eq(sb_batch_builder_append_int(b, 3, 1, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 3 \"name\" is utf8, cannot append an "
                              "integer");
    cr_assert_eq(sb_batch_builder_append_double(b, 0, 1.5, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 0 \"id\" is int64, cannot append a "
                              "floating-point value");
    cr_assert_eq(sb_batch_builder_append_null(b, 0, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 0 \"id\" is not nullable");
    cr_assert_eq(sb_batch_builder_append_int(b, 6, 128, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 6 \"small\": 128 is out of int8 range");
    cr_assert_eq(sb_batch_builder_append_int(b, 6, -129, &err), -1);
    cr_assert_eq(sb_batch_builder_append_int(b, 7, -1, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 7 \"big\": -1 is out of uint64 range");
    cr_assert_eq(sb_batch_builder_append_uint(b, 6, UINT64_MAX, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 6 \"small\": 18446744073709551615 is out "
                              "of int8 range");
    float v[4] = {1, 2, 3, 4};
    cr_assert_eq(sb_batch_builder_append_list(b, 5, v, 4, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 5 \"vec\": list of 4 values, the "
                              "column's fixed width is 3");
    cr_assert_eq(sb_batch_builder_append_binary(b, 3, "ok\xff", 3, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 3 \"name\" (utf8): value for row 0 is "
                              "not valid UTF-8 (byte 2)");
    cr_assert_eq(sb_batch_builder_append_bool(b, 0, true, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 0 \"id\" is int64, cannot append a bool");
    cr_assert_eq(sb_batch_builder_append_values(b, 3, "x", 1, NULL, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 3 \"name\" is utf8, cannot append "
                              "fixed-width values");
    uint8_t valid = 0x5; /* rows 1 null */
    int64_t vals[3] = {1, 2, 3};
    cr_assert_eq(sb_batch_builder_append_values(b, 0, vals, 3, &valid, &err), -1);
    cr_assert_str_eq(err.msg, "partition builder: column 0 \"id\" is not nullable but 1 of the "
                              "values are null");
    /* Nothing was appended by the failed calls. */
    for (size_t c = 0; c < NF; c++)
        cr_assert_eq(sb_batch_builder_col_length(b, c), 0, "column %zu", c);
    sb_batch_builder_free(b);
}

Test(partition_builder, field_validation)
{
    sb_err err = {0};
    struct {
        sb_field f;
        const char *msg;
    } cases[] = {
        {{.name = "t", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = 0},
         "partition builder: field 0 \"t\" (fixed_list): fixed-size list width must be between 1 "
         "and 2147483647"},
        {{.name = "t", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_BOOL, .list_size = 2},
         "partition builder: field 0 \"t\" (fixed_list): fixed-size list child type must be "
         "numeric (int8..float64)"},
        {{.name = "t", .type = SB_TYPE_INT32, .list_size = 2},
         "partition builder: field 0 \"t\" (int32): child type and list width are only for "
         "fixed-size lists"},
        {{.name = "t", .type = (sb_type)0}, "partition builder: field 0 \"t\" (?): unknown type"},
        {{.name = "bad\xc0\xaf", .type = SB_TYPE_INT32},
         "partition builder: field 0: name is not valid UTF-8"},
        {{.name = NULL, .type = SB_TYPE_INT32}, "partition builder: field 0 has no name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_null(sb_batch_builder_new(&cases[i].f, 1, &err), "case %zu", i);
        cr_assert_str_eq(err.msg, cases[i].msg, "case %zu", i);
    }
    char longname[SB_PART_MAX_NAME + 2];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    sb_field f = {.name = longname, .type = SB_TYPE_INT8};
    cr_assert_null(sb_batch_builder_new(&f, 1, &err));
    cr_assert_str_eq(err.msg, "partition builder: field 0: name is 1025 bytes, at most 1024 "
                              "allowed");
    cr_assert_null(sb_batch_builder_new(&f, SB_PART_MAX_COLUMNS + 1, &err));
    cr_assert_str_eq(err.msg, "partition builder: 4097 columns, at most 4096 are allowed");
}

Test(partition_builder, bulk_values_with_validity)
{
    sb_err err = {0};
    sb_field fs[] = {
        {.name = "x", .type = SB_TYPE_INT32, .nullable = true},
        {.name = "b", .type = SB_TYPE_BOOL},
        {.name = "t", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_UINT8, .list_size = 2}};
    sb_batch_builder *b = sb_batch_builder_new(fs, 3, &err);
    int32_t xs[20];
    uint8_t bs[20], ts[40];
    for (int i = 0; i < 20; i++) {
        xs[i] = i * i;
        bs[i] = (uint8_t)(i % 3 == 0 ? 7 : 0);
        ts[2 * i] = (uint8_t)i, ts[2 * i + 1] = (uint8_t)(255 - i);
    }
    /* Row-at-a-time first, so the bulk append lands at an unaligned bit position. */
    cr_assert_eq(sb_batch_builder_append_int(b, 0, -1, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_append_bool(b, 1, true, &err), 0);
    cr_assert_eq(sb_batch_builder_append_list(b, 2, "\x01\x02", 2, &err), 0);
    uint8_t valid[3] = {0xff, 0xfe, 0x0f}; /* row 8 of the run (batch row 9) is null */
    cr_assert_eq(sb_batch_builder_append_values(b, 0, xs, 20, valid, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_append_values(b, 1, bs, 20, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_append_values(b, 2, ts, 20, NULL, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_append_values(b, 0, xs, 0, NULL, &err), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_rows(bt), 21);
    const sb_column *x = sb_batch_column(bt, 0), *bo = sb_batch_column(bt, 1),
                    *t = sb_batch_column(bt, 2);
    cr_assert_eq(x->null_count, 1);
    cr_assert_eq(sb_column_int(x, 0), -1);
    for (size_t i = 0; i < 20; i++) {
        cr_assert_eq(sb_column_valid(x, i + 1), i != 8, "row %zu", i + 1);
        cr_assert_eq(sb_column_int(x, i + 1), (int64_t)(i * i));
        cr_assert_eq(sb_column_bool(bo, i + 1), i % 3 == 0);
        const uint8_t *l = sb_column_list(t, i + 1);
        cr_assert(l[0] == i && l[1] == 255 - i);
    }
    sb_batch_close(bt);
    sb_part_free(blob);
    sb_batch_builder_free(b);
}

Test(partition_builder, lines_fast_path)
{
    sb_err err = {0};
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &err);
    const char *in1 = "{\"a\":1}\r\n{\"b\":2}\n\npart";
    size_t used;
    cr_assert_eq(sb_batch_builder_append_lines(b, 0, in1, strlen(in1), true, false, &used, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(used, strlen(in1) - 4, "the partial line is left over");
    cr_assert_eq(sb_batch_builder_rows(b), 3);
    /* The caller carries "part" over into the next buffer. */
    const char *in2 = "partial\nlast";
    cr_assert_eq(sb_batch_builder_append_lines(b, 0, in2, strlen(in2), true, false, &used, &err),
                 0);
    cr_assert_eq(used, 8);
    cr_assert_eq(sb_batch_builder_append_lines(b, 0, "last", 4, true, false, &used, &err), 0);
    cr_assert_eq(used, 0);
    cr_assert_eq(sb_batch_builder_append_lines(b, 0, "last", 4, true, true, &used, &err), 0);
    cr_assert_eq(used, 4);
    /* Invalid UTF-8 on the third line: nothing of the buffer is appended. */
    const char *bad = "ok\nfine\nbro\xc3\x28ken\nmore\n";
    cr_assert_eq(sb_batch_builder_append_lines(b, 0, bad, strlen(bad), false, false, &used, &err),
                 -1);
    cr_assert_str_eq(err.msg, "partition builder: column 0 \"record\" (utf8): line 3 of the "
                              "buffer is not valid UTF-8 (buffer byte 11)");
    cr_assert_eq(used, 0);
    cr_assert_eq(sb_batch_builder_rows(b), 5);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    const char *want[] = {"{\"a\":1}", "{\"b\":2}", "", "partial", "last"};
    const sb_column *c = sb_batch_column(bt, 0);
    for (size_t i = 0; i < 5; i++) {
        size_t n;
        const char *s = sb_column_binary(c, i, &n);
        cr_assert_eq(n, strlen(want[i]), "row %zu", i);
        cr_assert_eq(memcmp(s, want[i], n), 0, "row %zu", i);
    }
    sb_batch_close(bt);
    sb_part_free(blob);
    sb_batch_builder_free(b);
}

Test(partition_builder, truncate_undoes_half_rows)
{
    sb_err err = {0};
    sb_batch_builder *b = sb_batch_builder_new(all_fields, NF, &err);
    for (size_t i = 0; i < 12; i++)
        fill_row(b, i);
    /* Half a row: the first four columns only, with nulls. */
    cr_assert_eq(sb_batch_builder_append_int(b, 0, 5, &err), 0);
    cr_assert_eq(sb_batch_builder_append_null(b, 1, &err), 0);
    cr_assert_eq(sb_batch_builder_append_null(b, 2, &err), 0);
    cr_assert_eq(sb_batch_builder_append_binary(b, 3, "zz", 2, &err), 0);
    cr_assert_eq(sb_batch_builder_rows(b), 12);
    sb_batch_builder_truncate(b, 10);
    cr_assert_eq(sb_batch_builder_col_length(b, 0), 10);
    cr_assert_eq(sb_batch_builder_col_length(b, 8), 10);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    /* Identical to a blob built from the first ten rows only. */
    size_t len2;
    uint8_t *blob2 = make_blob(10, &len2);
    cr_assert_eq(len, len2);
    cr_assert_eq(memcmp(blob, blob2, len), 0);
    sb_part_free(blob);
    sb_part_free(blob2);
    sb_batch_builder_free(b);
}

/* One row of integers (19000 + the column's index) in every column of b, finished; b freed. */
static void *one_row_blob(sb_batch_builder *b, size_t *len)
{
    sb_err err = {0};
    cr_assert_not_null(b);
    for (size_t c = 0; c < sb_batch_builder_ncols(b); c++)
        cr_assert_eq(sb_batch_builder_append_int(b, c, 19000 + (int64_t)c, &err), 0, "%s", err.msg);
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, len, &err), 0, "%s", err.msg);
    sb_batch_builder_free(b);
    return blob;
}

/* DATE and the three TIMESTAMP units survive builder -> blob -> open -> new_like -> blob (the
 * byte at offset 3 of the column entry), and the builder refuses a logical type on the wrong
 * physical type, naming the field. */
Test(partition_builder, logical_types_round_trip)
{
    const sb_field f[] = {
        {.name = "d", .type = SB_TYPE_INT32, .logical = SB_LOGICAL_DATE},
        {.name = "ms", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_MILLIS},
        {.name = "us", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_TS_MICROS},
        {.name = "ns", .type = SB_TYPE_INT64, .nullable = true, .logical = SB_LOGICAL_TS_NANOS},
        {.name = "plain", .type = SB_TYPE_INT64}};
    sb_err err = {0};
    size_t len;
    void *blob = one_row_blob(sb_batch_builder_new(f, 5, &err), &len);
    cr_assert_eq(((uint8_t *)blob)[SB_PART_HEADER_SIZE + 32 * 1 + 3], SB_LOGICAL_TS_MILLIS);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    for (size_t c = 0; c < 5; c++) {
        cr_assert_eq(sb_batch_column(bt, c)->logical, f[c].logical, "column %zu", c);
        cr_assert_eq(sb_field_of(sb_batch_column(bt, c)).logical, f[c].logical);
    }
    cr_assert_str_eq(sb_logical_name(sb_batch_column(bt, 2)->logical), "timestamp[us]");
    size_t len2;
    void *blob2 = one_row_blob(sb_batch_builder_new_like(bt, &err), &len2);
    cr_assert_eq(len2, len);
    cr_assert_eq(memcmp(blob, blob2, len), 0, "new_like keeps every logical byte");
    sb_part_free(blob2);
    sb_batch_close(bt);
    sb_part_free(blob);

    const sb_field bad[] = {{.name = "x", .type = SB_TYPE_INT64, .logical = SB_LOGICAL_DATE}};
    cr_assert_null(sb_batch_builder_new(bad, 1, &err));
    cr_assert_str_eq(err.msg, "partition builder: field 0 \"x\" (int64): logical type date needs "
                              "physical type int32");
    const sb_field bad2[] = {{.name = "y", .type = SB_TYPE_UINT64, .logical = 9}};
    cr_assert_null(sb_batch_builder_new(bad2, 1, &err));
    cr_assert_str_eq(err.msg, "partition builder: field 0 \"y\" (uint64): unknown logical type");
}

Test(partition_builder, new_like_copies_schema)
{
    size_t len;
    uint8_t *blob = make_blob(3, &len);
    sb_batch *bt;
    sb_err err = {0};
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    sb_batch_builder *b = sb_batch_builder_new_like(bt, &err);
    cr_assert_not_null(b, "%s", err.msg);
    cr_assert_eq(sb_batch_builder_ncols(b), NF);
    cr_assert_eq(sb_batch_builder_find(b, "raw"), 4);
    for (size_t i = 0; i < 3; i++)
        fill_row(b, i);
    void *blob2;
    size_t len2;
    cr_assert_eq(sb_batch_builder_finish(b, &blob2, &len2, &err), 0, "%s", err.msg);
    cr_assert_eq(len, len2);
    cr_assert_eq(memcmp(blob, blob2, len), 0);
    sb_part_free(blob2);
    sb_batch_builder_free(b);
    sb_batch_close(bt);
    sb_part_free(blob);
}

Test(partition_builder, record_column_reserve)
{
    sb_err err = {0};
    sb_field f = {.name = "record", .type = SB_TYPE_BINARY, .nullable = true};
    sb_batch_builder *b = sb_batch_builder_new(&f, 1, &err);
    cr_assert_eq(sb_batch_builder_reserve(b, 0, 100000, 1 << 20, &err), 0);
    char line[40];
    size_t total = 0;
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(line, sizeof line, "{\"i\":%d}", i);
        total += (size_t)n;
        cr_assert_eq(sb_batch_builder_append_binary(b, 0, line, (size_t)n, &err), 0);
    }
    cr_assert_eq(sb_batch_builder_append_null(b, 0, &err), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0, "%s", err.msg);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    const sb_column *c = sb_batch_column(bt, 0);
    cr_assert_eq(c->length, 100001);
    cr_assert_eq(c->values_len, total);
    cr_assert_eq(c->null_count, 1);
    size_t n;
    const char *s = sb_column_binary(c, 99999, &n);
    cr_assert_eq(n, strlen("{\"i\":99999}"));
    cr_assert_eq(memcmp(s, "{\"i\":99999}", n), 0);
    sb_batch_close(bt);
    sb_part_free(blob);
    sb_batch_builder_free(b);
}

/* ---- validation of corrupt blobs ------------------------------------------------------ */

/* Opens a modified copy of the standard 10-row blob and returns the error message ("" when it
 * opened). `edit` changes the copy; reseal recomputes the checksums afterwards so that the
 * structural checks are what is tested. */
typedef void (*edit_fn)(uint8_t *blob, size_t *len);

static char open_msg[SB_ERR_MAX];

static const char *open_edited(edit_fn edit, bool reseal, unsigned flags)
{
    size_t len;
    uint8_t *blob = make_blob(ROWS, &len);
    edit(blob, &len);
    if (reseal) {
        sb_err e = {0};
        cr_assert_eq(sb_part_seal(blob, len, &e), 0, "%s", e.msg);
    }
    sb_batch *bt = NULL;
    sb_err err = {0};
    int rc = sb_batch_open_ex(blob, len, flags, &bt, &err);
    if (rc == 0) {
        cr_assert_not_null(bt);
        sb_batch_close(bt);
        open_msg[0] = 0;
    } else {
        cr_assert_null(bt);
        cr_assert_neq(err.msg[0], 0, "a failure always has a message");
        memcpy(open_msg, err.msg, sizeof open_msg);
    }
    sb_part_free(blob);
    return open_msg;
}

static void e_none(uint8_t *b, size_t *len)
{
    (void)b, (void)len;
}
static void e_magic(uint8_t *b, size_t *len)
{
    (void)len;
    b[0] = 'X';
}
static void e_version(uint8_t *b, size_t *len)
{
    (void)len;
    b[4] = 2;
}
static void e_total(uint8_t *b, size_t *len)
{
    (void)len;
    put64(b + H_TOTAL, get64(b + H_TOTAL) + 64);
}
static void e_short(uint8_t *b, size_t *len)
{
    (void)b;
    *len -= 64;
}
static void e_name_byte(uint8_t *b, size_t *len)
{
    (void)len;
    uint32_t off;
    memcpy(&off, col_entry(b, 0) + 16, 4);
    b[off] = 'X'; /* "id" -> "Xd": only the header checksum notices */
}
static void e_data_byte(uint8_t *b, size_t *len)
{
    b[*len - 65] ^= 1;
}
static void e_buf_past_end(uint8_t *b, size_t *len)
{
    put64(buf_entry(b, 19) + 8, *len); /* f values: length of the whole blob */
}
static void e_buf_overlap(uint8_t *b, size_t *len)
{
    (void)len;
    /* raw offsets moved back onto the name data */
    put64(buf_entry(b, 10), get64(buf_entry(b, 8)));
}
static void e_buf_unaligned(uint8_t *b, size_t *len)
{
    (void)len;
    put64(buf_entry(b, 11), get64(buf_entry(b, 11)) + 8);
}
static void e_rows_more(uint8_t *b, size_t *len)
{
    (void)len;
    put64(b + H_ROWS, ROWS + 1);
}
static void e_rows_less(uint8_t *b, size_t *len)
{
    (void)len;
    put64(b + H_ROWS, ROWS - 1);
}
static void e_rows_huge(uint8_t *b, size_t *len)
{
    (void)len;
    put64(b + H_ROWS, UINT64_MAX / 2);
}
static int32_t *name_offsets(uint8_t *b)
{
    return (int32_t *)(void *)(b + get64(buf_entry(b, 7)));
}
static void e_offsets_backwards(uint8_t *b, size_t *len)
{
    (void)len;
    int32_t *o = name_offsets(b);
    o[5] = o[4] - 1;
}
static void e_offsets_start(uint8_t *b, size_t *len)
{
    (void)len;
    name_offsets(b)[0] = 1;
}
static void e_offsets_end(uint8_t *b, size_t *len)
{
    (void)len;
    name_offsets(b)[ROWS] -= 1;
}
static void e_offsets_negative(uint8_t *b, size_t *len)
{
    (void)len;
    name_offsets(b)[1] = -5;
}
static void e_utf8_byte(uint8_t *b, size_t *len)
{
    (void)len;
    uint8_t *data = b + get64(buf_entry(b, 8));
    int32_t *o = name_offsets(b);
    data[o[2] + 1] = 0xff; /* row 2 "név-2": the 'é' lead byte */
}
static void e_utf8_split(uint8_t *b, size_t *len)
{
    (void)len;
    int32_t *o = name_offsets(b);
    o[2] = o[1] + 2; /* ends row 1 in the middle of its 'é' */
}
static void e_nulls_lie(uint8_t *b, size_t *len)
{
    (void)len;
    put64(col_entry(b, 1) + 8, 2); /* score has 3 nulls in 10 rows */
}
static void e_nulls_not_nullable(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 1)[2] = 0; /* score loses its nullable flag but keeps nulls */
}
static void e_bitmap_lie(uint8_t *b, size_t *len)
{
    (void)len;
    b[get64(buf_entry(b, 2))] |= 0x2; /* score row 1 marked valid; null count still 4 */
}
static void e_list_width(uint8_t *b, size_t *len)
{
    (void)len;
    put32(col_entry(b, 5) + 4, 4);
}
static void e_type_unknown(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 6)[0] = 77;
}
static void e_type_var(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 0)[0] = SB_TYPE_UTF8; /* needs a third buffer */
}
static void e_nbuf(uint8_t *b, size_t *len)
{
    (void)len;
    put32(b + H_NBUF, 19);
}
static void e_name_off(uint8_t *b, size_t *len)
{
    (void)len;
    put32(col_entry(b, 2) + 16, 70); /* into the column table */
}
static void e_name_nul(uint8_t *b, size_t *len)
{
    (void)len;
    put32(col_entry(b, 2) + 20, 3); /* "flag" is 4 bytes: no NUL at 3 */
}
static void e_data_off(uint8_t *b, size_t *len)
{
    (void)len;
    put32(b + H_DATA_OFF, 64);
}
static void e_ncols(uint8_t *b, size_t *len)
{
    (void)len;
    put32(b + H_NCOLS, 5000);
}
static void e_reserved(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 3)[24] = 1;
}
/* The logical byte (offset 3 of a column entry): a timestamp on the int64 "id" is a schema;
 * a date on it, a timestamp on the utf8 "name" and an unknown value are not. */
static void e_logical_ts(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 0)[3] = SB_LOGICAL_TS_NANOS;
}
static void e_logical_date_on_int64(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 0)[3] = SB_LOGICAL_DATE;
}
static void e_logical_ts_on_utf8(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 3)[3] = SB_LOGICAL_TS_MILLIS;
}
static void e_logical_unknown(uint8_t *b, size_t *len)
{
    (void)len;
    col_entry(b, 0)[3] = 5;
}
static void e_bool_values(uint8_t *b, size_t *len)
{
    (void)len;
    put64(buf_entry(b, 5) + 8, 1);
}

Test(partition_open, intact_blob_opens)
{
    cr_assert_str_eq(open_edited(e_none, false, 0), "");
}

Test(partition_open, header_checks)
{
    cr_assert_str_eq(open_edited(e_magic, false, 0),
                     "partition blob: bad magic (not a partition blob)");
    cr_assert_str_eq(open_edited(e_version, false, 0),
                     "partition blob: unsupported version 2 (this build reads 1)");
    size_t len;
    uint8_t *blob = make_blob(ROWS, &len);
    char want[160];
    snprintf(want, sizeof want,
             "partition blob: header says the blob is %zu bytes but %zu were given", len + 64, len);
    cr_assert_str_eq(open_edited(e_total, false, 0), want);
    snprintf(want, sizeof want,
             "partition blob: header says the blob is %zu bytes but %zu were given", len, len - 64);
    cr_assert_str_eq(open_edited(e_short, false, 0), want);
    sb_part_free(blob);
    cr_assert_str_eq(open_edited(e_data_off, false, 0),
                     "partition blob: data offset 64 is invalid (must be a multiple of 64 between "
                     "the 672-byte header tables and the 1984-byte blob end)");
    cr_assert_str_eq(open_edited(e_ncols, false, 0),
                     "partition blob: header claims 5000 columns, at most 4096");
}

Test(partition_open, checksums)
{
    cr_assert(strncmp(open_edited(e_name_byte, false, 0),
                      "partition blob: header checksum mismatch (stored 0x", 51) == 0,
              "%s", open_msg);
    cr_assert(strncmp(open_edited(e_data_byte, false, 0),
                      "partition blob: data checksum mismatch (stored 0x", 49) == 0,
              "%s", open_msg);
    /* With the checksums skipped, both changes are structurally fine. */
    cr_assert_str_eq(open_edited(e_name_byte, false, SB_BATCH_OPEN_SKIP_CHECKSUM), "");
    cr_assert_str_eq(open_edited(e_data_byte, false, SB_BATCH_OPEN_SKIP_CHECKSUM), "");
    /* Resealed, the renamed column opens. */
    cr_assert_str_eq(open_edited(e_name_byte, true, 0), "");
}

Test(partition_open, buffer_table_lies)
{
    cr_assert_str_eq(open_edited(e_buf_past_end, true, 0),
                     "partition blob: column 8 \"f\" (float32): values buffer (buffer 19) at "
                     "offset 1920, 1984 bytes: not 64-aligned, overlapping the previous buffer "
                     "(which ends at 1920) or past the blob end (1984)");
    cr_assert_str_eq(open_edited(e_buf_overlap, true, 0),
                     "partition blob: column 4 \"raw\" (binary): offsets buffer (buffer 10) at "
                     "offset 1344, 44 bytes: not 64-aligned, overlapping the previous buffer "
                     "(which ends at 1408) or past the blob end (1984)");
    cr_assert_str_eq(open_edited(e_buf_unaligned, true, 0),
                     "partition blob: column 4 \"raw\" (binary): data buffer (buffer 11) at "
                     "offset 1480, 45 bytes: not 64-aligned, overlapping the previous buffer "
                     "(which ends at 1452) or past the blob end (1984)");
    cr_assert_str_eq(open_edited(e_nbuf, true, 0),
                     "partition blob: header lists 19 buffers, the columns need 20");
    cr_assert_str_eq(open_edited(e_bool_values, true, 0),
                     "partition blob: column 2 \"flag\" (bool): values buffer is 1 bytes, 10 rows "
                     "need 2");
}

Test(partition_open, row_count_lies)
{
    cr_assert_str_eq(open_edited(e_rows_more, true, 0),
                     "partition blob: column 0 \"id\" (int64): values buffer is 80 bytes, 11 rows "
                     "need 88");
    cr_assert_str_eq(open_edited(e_rows_less, true, 0),
                     "partition blob: column 0 \"id\" (int64): values buffer is 80 bytes, 9 rows "
                     "need 72");
    cr_assert_str_eq(open_edited(e_rows_huge, true, 0),
                     "partition blob: column 0 \"id\" (int64): values buffer is 80 bytes, "
                     "9223372036854775807 rows need more than 18446744073709551615");
}

Test(partition_open, offsets_lies)
{
    cr_assert_str_eq(open_edited(e_offsets_backwards, true, 0),
                     "partition blob: column 3 \"name\" (utf8): offset[5]=17 is less than "
                     "offset[4]=18");
    cr_assert_str_eq(open_edited(e_offsets_start, true, 0),
                     "partition blob: column 3 \"name\" (utf8): offset[0] is 1, must be 0");
    cr_assert_str_eq(open_edited(e_offsets_end, true, 0),
                     "partition blob: column 3 \"name\" (utf8): last offset (row 10) is 47 but "
                     "the data buffer has 48 bytes");
    cr_assert_str_eq(open_edited(e_offsets_negative, true, 0),
                     "partition blob: column 3 \"name\" (utf8): offset[1]=-5 is less than "
                     "offset[0]=0");
}

Test(partition_open, utf8_checks)
{
    cr_assert_str_eq(open_edited(e_utf8_byte, true, 0),
                     "partition blob: column 3 \"name\" (utf8): row 2 is not valid UTF-8 (data "
                     "byte 13)");
    cr_assert_str_eq(open_edited(e_utf8_split, true, 0),
                     "partition blob: column 3 \"name\" (utf8): offset[2]=8 splits a UTF-8 "
                     "character (row 1 is not valid UTF-8)");
    cr_assert_str_eq(open_edited(e_utf8_byte, true, SB_BATCH_OPEN_SKIP_UTF8), "");
}

Test(partition_open, column_table_lies)
{
    cr_assert_str_eq(open_edited(e_nulls_lie, true, 0),
                     "partition blob: column 1 \"score\" (float64): validity bitmap has 3 nulls, "
                     "the header says 2");
    cr_assert_str_eq(open_edited(e_nulls_not_nullable, true, 0),
                     "partition blob: column 1 \"score\" (float64): null count 3 is impossible "
                     "(10 rows, not nullable)");
    cr_assert_str_eq(open_edited(e_bitmap_lie, true, 0),
                     "partition blob: column 1 \"score\" (float64): validity bitmap has 2 nulls, "
                     "the header says 3");
    cr_assert_str_eq(open_edited(e_list_width, true, 0),
                     "partition blob: column 5 \"vec\" (fixed_list): values buffer is 120 bytes, "
                     "10 rows of 4 float32 values need 160");
    cr_assert_str_eq(open_edited(e_type_unknown, true, 0),
                     "partition blob: column 6 \"small\": unknown type 77");
    cr_assert_str_eq(open_edited(e_type_var, true, 0),
                     "partition blob: header lists 20 buffers, the columns need 21");
    cr_assert_str_eq(open_edited(e_name_off, true, 0),
                     "partition blob: column 2: name at 70 (4 bytes) lies outside the name area "
                     "[672, 768) or lacks its NUL");
    cr_assert_str_eq(open_edited(e_name_nul, true, 0),
                     "partition blob: column 2: name at 681 (3 bytes) lies outside the name area "
                     "[672, 768) or lacks its NUL");
    cr_assert_str_eq(open_edited(e_reserved, true, 0),
                     "partition blob: column 3 \"name\" (utf8): nonzero reserved bits in the "
                     "column entry");
}

Test(partition_open, logical_byte_must_fit_the_physical_type)
{
    cr_assert_str_eq(open_edited(e_logical_ts, true, 0), "");
    cr_assert_str_eq(open_edited(e_logical_date_on_int64, true, 0),
                     "partition blob: column 0 \"id\" (int64): logical type date needs physical "
                     "type int32 (logical byte 1)");
    cr_assert_str_eq(open_edited(e_logical_ts_on_utf8, true, 0),
                     "partition blob: column 3 \"name\" (utf8): logical type timestamp needs "
                     "physical type int64 (logical byte 2)");
    cr_assert_str_eq(open_edited(e_logical_unknown, true, 0),
                     "partition blob: column 0 \"id\" (int64): unknown logical type (logical "
                     "byte 5)");
}

Test(partition_open, short_unaligned_and_null)
{
    size_t len;
    uint8_t *blob = make_blob(ROWS, &len);
    sb_batch *bt = (sb_batch *)1;
    sb_err err = {0};
    cr_assert_eq(sb_batch_open(blob, 10, &bt, &err), -1);
    cr_assert_null(bt);
    cr_assert_str_eq(err.msg, "partition blob: 10 bytes is shorter than the 64-byte fixed header");
    /* Every strict prefix is rejected. */
    for (size_t n = 0; n < len; n++)
        cr_assert_eq(sb_batch_open(blob, n, &bt, &err), -1, "prefix %zu", n);
    uint8_t *copy = sb_part_alloc(len + 8);
    memcpy(copy + 4, blob, len);
    cr_assert_eq(sb_batch_open(copy + 4, len, &bt, &err), -1);
    cr_assert(strstr(err.msg, "is not 8-byte aligned") != NULL, "%s", err.msg);
    cr_assert_eq(sb_batch_open(NULL, 0, &bt, &err), -1);
    cr_assert_str_eq(err.msg, "partition blob: NULL blob");
    sb_part_free(copy);
    sb_part_free(blob);
}

Test(partition_open, every_single_bit_flip_is_caught)
{
    size_t len;
    uint8_t *blob = make_blob(ROWS, &len);
    sb_err err;
    size_t opened_without_crc = 0;
    for (size_t bit = 0; bit < len * 8; bit++) {
        blob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        sb_batch *bt = NULL;
        cr_assert_eq(sb_batch_open(blob, len, &bt, &err), -1, "flip of bit %zu not caught", bit);
        /* Without checksums the structural checks must still never read out of bounds (ASan
         * and valgrind run this test); a flip in a value may legitimately open. */
        if (sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM, &bt, &err) == 0) {
            opened_without_crc++;
            for (size_t c = 0; c < sb_batch_ncols(bt); c++) {
                const sb_column *col = sb_batch_column(bt, c);
                volatile uint8_t sink = 0;
                for (size_t k = 0; k < col->values_len; k++)
                    sink ^= ((const uint8_t *)col->values)[k];
                (void)sink;
            }
            sb_batch_close(bt);
        }
        blob[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    cr_assert_gt(opened_without_crc, 0);
    cr_assert_lt(opened_without_crc, len * 8);
    sb_part_free(blob);
}

Test(partition_open, seal_and_peek)
{
    size_t len;
    uint8_t *blob = make_blob(ROWS, &len);
    uint64_t total, rows;
    sb_err err = {0};
    cr_assert_eq(sb_part_peek(blob, 24, &total, &rows, &err), 0, "%s", err.msg);
    cr_assert_eq(total, len);
    cr_assert_eq(rows, ROWS);
    cr_assert_eq(sb_part_peek(blob, 16, &total, &rows, &err), -1);
    cr_assert_str_eq(err.msg, "partition blob: 16 bytes are too few to read the row count");
    cr_assert_eq(sb_part_peek(blob, 15, &total, NULL, &err), -1);
    cr_assert_str_eq(err.msg, "partition blob: 15 bytes are too few to read the header");
    /* An operator scales the int64 column in place and reseals. */
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    int64_t *ids = (int64_t *)(uintptr_t)sb_batch_column(bt, 0)->values;
    for (size_t i = 0; i < ROWS; i++)
        ids[i] *= 2;
    sb_batch_close(bt);
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), -1);
    cr_assert_eq(sb_part_seal(blob, len, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_column_int64(sb_batch_column(bt, 0), 3), 2 * (3 * 1000 - 7));
    sb_batch_close(bt);
    /* The stored header checksum covers [0,48) and [64,data_off). */
    uint32_t data_off, stored;
    memcpy(&data_off, blob + H_DATA_OFF, 4);
    memcpy(&stored, blob + H_HCRC, 4);
    uint32_t crc = sb_crc32c(sb_crc32c(0, blob, 48), blob + 64, data_off - 64);
    cr_assert_eq(stored, crc);
    sb_part_free(blob);
}

Test(partition_open, float_nan_and_extremes_roundtrip)
{
    sb_err err = {0};
    sb_field fs[] = {{.name = "d", .type = SB_TYPE_FLOAT64},
                     {.name = "i", .type = SB_TYPE_INT64},
                     {.name = "u32", .type = SB_TYPE_UINT32},
                     {.name = "i16", .type = SB_TYPE_INT16}};
    sb_batch_builder *b = sb_batch_builder_new(fs, 4, &err);
    double ds[] = {NAN, INFINITY, -0.0, 1e308};
    int64_t is[] = {INT64_MIN, INT64_MAX, 0, -1};
    for (int k = 0; k < 4; k++) {
        cr_assert_eq(sb_batch_builder_append_double(b, 0, ds[k], &err), 0);
        cr_assert_eq(sb_batch_builder_append_int(b, 1, is[k], &err), 0);
        cr_assert_eq(sb_batch_builder_append_uint(b, 2, k == 0 ? UINT32_MAX : (uint64_t)k, &err), 0,
                     "%s", err.msg);
        cr_assert_eq(sb_batch_builder_append_int(b, 3, k == 0 ? INT16_MIN : INT16_MAX, &err), 0);
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(b, &blob, &len, &err), 0);
    sb_batch *bt;
    cr_assert_eq(sb_batch_open(blob, len, &bt, &err), 0, "%s", err.msg);
    const sb_column *d = sb_batch_column(bt, 0);
    cr_assert(isnan(sb_column_float64(d, 0)));
    cr_assert(isinf(sb_column_float64(d, 1)));
    cr_assert(signbit(sb_column_float64(d, 2)));
    for (int k = 0; k < 4; k++)
        cr_assert_eq(sb_column_int64(sb_batch_column(bt, 1), (size_t)k), is[k]);
    cr_assert_eq(sb_column_int(sb_batch_column(bt, 2), 0), (int64_t)UINT32_MAX);
    cr_assert_eq(sb_column_int(sb_batch_column(bt, 3), 0), INT16_MIN);
    cr_assert_eq(sb_column_int(sb_batch_column(bt, 3), 1), INT16_MAX);
    sb_batch_close(bt);
    sb_part_free(blob);
    sb_batch_builder_free(b);
}

/* Lent values (sb_batch_builder_lend_values) are read at finish, not copied before: the blob
 * holds them; a later append to that column copies them in first (the lender may change its
 * memory afterwards); a reset forgets them; a non-empty column takes a copy as append_values. */
Test(partition_builder, lent_values_are_copied_once_into_the_blob)
{
    sb_field f[2] = {{.name = "a", .type = SB_TYPE_INT64, .nullable = true},
                     {.name = "b", .type = SB_TYPE_FLOAT64}};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(f, 2, &e);
    cr_assert_not_null(bb);
    int64_t a[4] = {1, 2, 3, 4};
    double d[4] = {0.5, 1.5, 2.5, 3.5};
    uint8_t valid = 0x0b; /* row 2 is null */
    cr_assert_eq(sb_batch_builder_lend_values(bb, 0, a, 4, &valid, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_builder_lend_values(bb, 1, d, 3, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_builder_append_double(bb, 1, 9.5, &e), 0); /* copies d in first */
    d[0] = -1; /* the lender's memory changes after the copy: not seen */
    cr_assert_eq(sb_batch_builder_bytes(bb) > 0, 1);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *ca = sb_batch_column(b, 0), *cb = sb_batch_column(b, 1);
    cr_assert_eq(sb_column_int64(ca, 3), 4);
    cr_assert(!sb_column_valid(ca, 2) && sb_column_valid(ca, 1));
    cr_assert_eq(ca->null_count, 1);
    cr_assert(sb_column_float64(cb, 0) == 0.5 && sb_column_float64(cb, 3) == 9.5);
    sb_batch_close(b);
    sb_part_free(blob);
    /* finished: the builder forgot the lent values; it builds the next batch from scratch */
    cr_assert_eq(sb_batch_builder_rows(bb), 0);
    cr_assert_eq(sb_batch_builder_lend_values(bb, 0, a + 1, 2, NULL, &e), 0);
    cr_assert_eq(sb_batch_builder_append_values(bb, 0, a, 1, NULL, &e), 0); /* after a lend */
    cr_assert_eq(sb_batch_builder_append_values(bb, 1, d + 1, 3, NULL, &e), 0);
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    ca = sb_batch_column(b, 0);
    cr_assert(sb_column_int64(ca, 0) == 2 && sb_column_int64(ca, 1) == 3 &&
              sb_column_int64(ca, 2) == 1);
    sb_batch_close(b);
    sb_part_free(blob);
    sb_batch_builder_free(bb);
}
