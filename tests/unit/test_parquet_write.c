/* Tests of the Parquet writer's pieces (lib/parquet/write.h, records.h): the RLE / bit-packed
 * encoder against the reader's decoder for runs, mixed groups and every bit width; each codec
 * against its decompressor; whole files written from a partition (nulls, lists, several row
 * groups) read back by our reader; records typed by a schema, a schema inferred from records
 * (the rules, json texts kept exactly, the inferred types enforced), and what is refused.
 * (Against pyarrow and DuckDB: tests/parquet/writer.py.) */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/encoding.h"
#include "parquet/meta.h"
#include "parquet/parquet.h"
#include "parquet/records.h"
#include "parquet/write.h"
#include "partition/partition.h"
#include "testpqmem.h"

static void rle_round_trip(const uint32_t *v, size_t n, int bw)
{
    sb_pq_buf b = {0};
    sb_pq_rle_encode(v, n, bw, &b);
    cr_assert(!b.oom);
    uint32_t *out = calloc(n ? n : 1, sizeof *out);
    sb_err e = {0};
    size_t used = 0;
    cr_assert_eq(sb_pq_rle_decode(b.p, b.len, bw, out, n, &used, &e), 0, "bw %d: %s", bw, e.msg);
    cr_assert_eq(used, b.len, "bw %d: %zu of %zu bytes used", bw, used, b.len);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(out[i], v[i], "bw %d value %zu: %u, want %u", bw, i, out[i], v[i]);
    free(out);
    sb_pq_buf_free(&b);
}

Test(parquet_write, rle_every_width_runs_and_groups)
{
    enum { N = 1237 };
    uint32_t v[N];
    unsigned s = 12345;
    for (int bw = 1; bw <= 32; bw++) {
        uint32_t mask = bw == 32 ? 0xffffffffu : (1u << bw) - 1;
        for (size_t i = 0; i < N; i++) {
            s = s * 1103515245u + 12345u;
            /* stretches of long runs between random values: both run kinds, joined */
            v[i] = (i / 100) % 2 ? (uint32_t)(i / 100) & mask : (s >> 3) & mask;
        }
        rle_round_trip(v, N, bw);
        rle_round_trip(v, 7, bw); /* a single short bit-packed group */
    }
    uint32_t zeros[20] = {0};
    rle_round_trip(zeros, 20, 0);
}

Test(parquet_write, rle_long_run_is_compact)
{
    uint32_t v[10000];
    for (size_t i = 0; i < 10000; i++)
        v[i] = 1;
    sb_pq_buf b = {0};
    sb_pq_rle_encode(v, 10000, 1, &b);
    cr_assert_leq(b.len, 4, "a run of 10000 ones took %zu bytes", b.len);
    sb_pq_buf_free(&b);
}

Test(parquet_write, codecs_round_trip)
{
    const int codecs[] = {SB_PQ_UNCOMPRESSED, SB_PQ_SNAPPY, SB_PQ_GZIP, SB_PQ_ZSTD};
    size_t n = 100000;
    uint8_t *src = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (uint8_t)((i * 7) % 13 + (i % 1000 == 0 ? i : 0));
    for (size_t k = 0; k < 4; k++) {
        sb_pq_buf c = {0};
        sb_err e = {0};
        cr_assert_eq(sb_pq_compress(codecs[k], src, n, &c, &e), 0, "%s", e.msg);
        cr_assert_eq(sb_pq_decompress(codecs[k], c.p, c.len, back, n, &e), 0, "%s: %s",
                     sb_pq_codec_name(codecs[k]), e.msg);
        cr_assert_eq(memcmp(src, back, n), 0);
        if (codecs[k] != SB_PQ_UNCOMPRESSED)
            cr_assert_lt(c.len, n / 4, "%s: %zu bytes", sb_pq_codec_name(codecs[k]), c.len);
        sb_pq_buf_free(&c);
    }
    sb_pq_buf c = {0};
    sb_err e = {0};
    cr_assert_neq(sb_pq_compress(SB_PQ_LZO, src, n, &c, &e), 0);
    cr_assert(strstr(e.msg, "LZO") != NULL, "%s", e.msg);
    sb_pq_buf_free(&c);
    free(src);
    free(back);
    cr_assert_eq(sb_pq_codec_parse("zstd"), SB_PQ_ZSTD);
    cr_assert_eq(sb_pq_codec_parse("none"), SB_PQ_UNCOMPRESSED);
    cr_assert_eq(sb_pq_codec_parse("lz4"), -1);
}

typedef struct {
    sb_batch_builder *bb; /* every row group's rows appended here */
    sb_err *e;
} collect;

static int keep(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    collect *c = ud;
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, c->e), 0, "%s", c->e->msg);
    for (size_t r = 0; r < sb_batch_rows(b); r++) {
        const sb_column *i64 = sb_batch_column(b, 0), *s = sb_batch_column(b, 1),
                        *v = sb_batch_column(b, 2);
        size_t n;
        const void *p = sb_column_binary(s, r, &n);
        if (sb_column_valid(i64, r))
            sb_batch_builder_append_int(c->bb, 0, sb_column_int64(i64, r), c->e);
        else
            sb_batch_builder_append_null(c->bb, 0, c->e);
        if (sb_column_valid(s, r))
            sb_batch_builder_append_binary(c->bb, 1, p, n, c->e);
        else
            sb_batch_builder_append_null(c->bb, 1, c->e);
        sb_batch_builder_append_list(c->bb, 2, sb_column_list(v, r), 3, c->e);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

static const sb_field fields[] = {
    {.name = "i", .type = SB_TYPE_INT64, .nullable = true},
    {.name = "s", .type = SB_TYPE_UTF8, .nullable = true},
    {.name = "v", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = 3},
};

static size_t distinct = 77; /* distinct strings: few (dictionary) or all (PLAIN fallback) */

static void *make_batch(size_t rows, size_t *len)
{
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(fields, 3, &e);
    char s[32];
    for (size_t r = 0; r < rows; r++) {
        float v[3] = {(float)r, -(float)r, 0.5f};
        if (r % 5 == 2)
            sb_batch_builder_append_null(bb, 0, &e);
        else
            sb_batch_builder_append_int(bb, 0, (int64_t)r * 1000003 - 7, &e);
        snprintf(s, sizeof s, "row-%zu", r % distinct);
        if (r % 3 == 1)
            sb_batch_builder_append_null(bb, 1, &e);
        else
            sb_batch_builder_append_binary(bb, 1, s, strlen(s), &e);
        sb_batch_builder_append_list(bb, 2, v, 3, &e);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    return blob;
}

static void write_and_read_back(void);

Test(parquet_write, file_reads_back_with_our_reader)
{
    distinct = 77;
    write_and_read_back();
}

Test(parquet_write, distinct_strings_fall_back_to_plain)
{
    distinct = 1000000;
    write_and_read_back();
}

static void write_and_read_back(void)
{
    size_t len, rows = 20000;
    void *blob = make_batch(rows, &len);
    sb_batch *b;
    sb_err e = {0};
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
    sb_pq_buf f = {0};
    sb_pq_write_opts o = {.codec = SB_PQ_ZSTD, .row_group_bytes = len / 4};
    cr_assert_eq(sb_pq_write_batch(b, &o, sb_test_pq_to_buf, &f, &e), 0, "%s", e.msg);
    cr_assert(memcmp(f.p, "PAR1", 4) == 0 && memcmp(f.p + f.len - 4, "PAR1", 4) == 0);

    sb_test_pq_mem m = {f.p, f.len};
    sb_pq_file pf;
    sb_pq_plan plan = {0};
    cr_assert_eq(sb_pq_open(&pf, "t.parquet", f.len, sb_test_pq_mem_read, &m, &e), 0, "%s", e.msg);
    cr_assert_geq(pf.meta.nrgs, 4, "%zu row groups", pf.meta.nrgs);
    cr_assert_eq(pf.meta.num_rows, (int64_t)rows);
    const sb_pq_stats *st = &pf.meta.rgs[0].cols[0].stats;
    cr_assert(st->has_null_count && st->has_min && st->has_max);
    int64_t mn;
    memcpy(&mn, st->min, 8);
    cr_assert_eq(mn, -7, "row group 0's min is %lld", (long long)mn);
    cr_assert_eq(sb_pq_plan_make(&pf, NULL, 0, &plan, &e), 0, "%s", e.msg);
    cr_assert_eq(plan.cols[2].field.type, SB_TYPE_FIXED_LIST);
    collect c = {.bb = sb_batch_builder_new(fields, 3, &e), .e = &e};
    sb_pq_read_opts ro = {.target_bytes = 1 << 20};
    for (size_t g = 0; g < pf.meta.nrgs; g++)
        cr_assert_eq(sb_pq_read_row_group(&pf, &plan, g, &ro, keep, &c, &e), 0, "%s", e.msg);
    void *back;
    size_t blen;
    cr_assert_eq(sb_batch_builder_finish(c.bb, &back, &blen, &e), 0, "%s", e.msg);
    sb_batch *bb;
    cr_assert_eq(sb_batch_open(back, blen, &bb, &e), 0);
    cr_assert_eq(sb_batch_rows(bb), rows);
    for (size_t k = 0; k < 3; k++) {
        const sb_column *x = sb_batch_column(b, k), *y = sb_batch_column(bb, k);
        cr_assert_eq(x->null_count, y->null_count, "column %zu", k);
        cr_assert_eq(x->values_len, y->values_len, "column %zu", k);
        for (size_t r = 0; r < rows; r++)
            cr_assert_eq(sb_column_valid(x, r), sb_column_valid(y, r), "column %zu row %zu", k, r);
    }
    cr_assert_eq(memcmp(sb_batch_column(b, 1)->values, sb_batch_column(bb, 1)->values,
                        sb_batch_column(b, 1)->values_len),
                 0);
    cr_assert_eq(memcmp(sb_batch_column(b, 2)->values, sb_batch_column(bb, 2)->values,
                        rows * 3 * sizeof(float)),
                 0);
    for (size_t r = 0; r < rows; r++)
        if (sb_column_valid(sb_batch_column(b, 0), r))
            cr_assert_eq(sb_column_int64(sb_batch_column(b, 0), r),
                         sb_column_int64(sb_batch_column(bb, 0), r));
    sb_batch_close(bb);
    sb_part_free(back);
    sb_batch_builder_free(c.bb);
    sb_pq_plan_free(&plan);
    sb_pq_close(&pf);
    sb_pq_buf_free(&f);
    sb_batch_close(b);
    sb_part_free(blob);
}

static void *records_blob(const char *const *recs, size_t n, size_t *len)
{
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    for (size_t i = 0; i < n; i++)
        sb_batch_builder_append_binary(bb, 0, recs[i], strlen(recs[i]), &e);
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, len, &e), 0);
    sb_batch_builder_free(bb);
    return blob;
}

/* Types the records by the schema: 0 with the typed batch's blob, or -1 + e. */
static int typed(const char *args, const char *const *recs, size_t n, void **out, size_t *olen,
                 sb_err *e)
{
    sb_pq_sink_opts o;
    if (sb_pq_sink_opts_parse(args, &o, e) != 0)
        return -1;
    size_t len;
    void *blob = records_blob(recs, n, &len);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, e), 0);
    int rc = sb_pq_records_batch(&o, sb_batch_column(b, 0), out, olen, e);
    sb_batch_close(b);
    sb_part_free(blob);
    sb_pq_sink_opts_free(&o);
    return rc;
}

static const char *schema_args =
    "{\"schema\":[{\"name\":\"a\",\"type\":\"int64\",\"nullable\":false},"
    "{\"name\":\"b\",\"type\":\"string\"},{\"name\":\"c\",\"type\":\"double\"},"
    "{\"name\":\"d\",\"type\":\"bool\"}],\"compression\":\"gzip\",\"rowGroupSize\":1000}";

Test(parquet_write, records_by_schema)
{
    const char *recs[] = {"{\"a\":1,\"b\":\"x\",\"c\":2.5,\"d\":true,\"z\":{}}",
                          "{\"a\":-2,\"b\":null}"};
    void *blob;
    size_t len;
    sb_err e = {0};
    cr_assert_eq(typed(schema_args, recs, 2, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
    cr_assert_eq(sb_batch_ncols(b), 4);
    cr_assert_eq(sb_column_int64(sb_batch_column(b, 0), 1), -2);
    cr_assert(!sb_batch_column(b, 0)->nullable);
    cr_assert(!sb_column_valid(sb_batch_column(b, 1), 1));
    cr_assert(!sb_column_valid(sb_batch_column(b, 2), 1)); /* absent: null */
    cr_assert(sb_column_bool(sb_batch_column(b, 3), 0));
    sb_batch_close(b);
    sb_part_free(blob);
}

Test(parquet_write, records_that_do_not_fit)
{
    const struct {
        const char *rec, *want;
    } bad[] = {{"{\"a\":1.5}", "field \"a\""},
               {"{\"a\":\"1\"}", "field \"a\""},
               {"{\"b\":\"x\"}", "field \"a\" is absent and not nullable"},
               {"{\"a\":1,\"c\":\"x\"}", "field \"c\" is not a number"},
               {"{\"a\":1,\"d\":1}", "field \"d\" is not a boolean"},
               {"{\"a\":1e300}", "field \"a\""},
               /* parses to 2^53 as a double: refused by its digits, not written as 2^53 */
               {"{\"a\":9007199254740993}", "field \"a\": the number is not an int64"},
               {"{\"a\":-9007199254740993}", "field \"a\": the number is not an int64"},
               {"[1]", "not a JSON object"},
               {"{\"a\":", "not a JSON object"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *recs[] = {"{\"a\":0}", bad[i].rec};
        void *blob = NULL;
        size_t len;
        sb_err e = {0};
        cr_assert_neq(typed(schema_args, recs, 2, &blob, &len, &e), 0, "%s", bad[i].rec);
        cr_assert(strstr(e.msg, "record 1") != NULL && strstr(e.msg, bad[i].want) != NULL, "%s: %s",
                  bad[i].rec, e.msg);
        cr_assert(e.data, "%s is a data error", bad[i].rec);
    }
}

Test(parquet_write, bad_sink_args)
{
    const char *bad[] = {"{\"compression\":\"lz4\"}",
                         "{\"rowGroupSize\":0}",
                         "{\"schema\":[]}",
                         "{\"schema\":[{\"name\":\"a\",\"type\":\"int8\"}]}",
                         "{\"schema\":[{\"name\":\"a\",\"type\":\"bool\"},{\"name\":\"a\","
                         "\"type\":\"bool\"}]}",
                         "[1]"};
    const char *want[] = {"compression", "rowGroupSize", "schema",
                          "schema[0]",   "named twice",  "not a JSON object"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sb_pq_sink_opts o;
        sb_err e = {0};
        cr_assert_neq(sb_pq_sink_opts_parse(bad[i], &o, &e), 0, "%s", bad[i]);
        cr_assert(strstr(e.msg, want[i]) != NULL, "%s: %s", bad[i], e.msg);
    }
    sb_pq_sink_opts o;
    sb_err e = {0};
    cr_assert_eq(sb_pq_sink_opts_parse(NULL, &o, &e), 0);
    cr_assert_eq(o.w.codec, SB_PQ_ZSTD);
    cr_assert_null(o.schema);
}

/* The schema inferred from these records, as sb_pq_schema_json writes it (or the error). */
static char *inferred(const char *const *recs, size_t n, sb_err *e)
{
    size_t len;
    void *blob = records_blob(recs, n, &len);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, e), 0);
    sb_pq_sink_opts o;
    cr_assert_eq(sb_pq_sink_opts_parse(NULL, &o, e), 0);
    char *out = NULL;
    if (sb_pq_infer_schema(sb_batch_column(b, 0), &o, e) == 0)
        out = sb_pq_schema_json(&o);
    sb_pq_sink_opts_free(&o);
    sb_batch_close(b);
    sb_part_free(blob);
    return out;
}

#define F(n, t) "{\"name\":\"" n "\",\"type\":\"" t "\",\"nullable\":true}"

Test(parquet_write, a_schema_is_inferred_by_the_rules)
{
    /* order of first appearance; int, then a double -> double; 1.0 is a double by its text;
     * only nulls -> string; objects, arrays, mixed kinds and integers past 2^53 -> json */
    const char *recs[] = {
        "{\"i\":1,\"d\":2,\"s\":\"x\",\"b\":true,\"n\":null,\"o\":{\"k\":[1]},\"m\":1,"
        "\"big\":9007199254740993,\"f\":1.0}",
        "{\"d\":2.5,\"a\":[1,2],\"m\":\"one\",\"i\":-3,\"late\":false,\"e\":1e3}",
        "{\"i\":null,\"d\":-1,\"x\\\"y\":\"esc\",\"edge\":9007199254740992}"};
    sb_err e = {0};
    char *got = inferred(recs, 3, &e);
    cr_assert_not_null(got, "%s", e.msg);
    cr_assert_str_eq(
        got,
        "[" F("i", "int64") "," F("d", "double") "," F("s", "string") "," F("b", "bool") "," F("n", "string") "," F("o", "json") "," F(
            "m",
            "json") "," F("big",
                          "json") "," F("f",
                                        "double") "," F("a",
                                                        "json") "," F("late",
                                                                      "bool") "," F("e",
                                                                                    "double") "," F("x\\\"y",
                                                                                                    "string") "," F("edge",
                                                                                                                    "int64") "]");
    /* the text reads back as the same schema */
    sb_pq_sink_opts o;
    cr_assert_eq(sb_pq_sink_opts_parse(NULL, &o, &e), 0);
    cr_assert_eq(sb_pq_schema_parse(got, &o, &e), 0, "%s", e.msg);
    cr_assert_eq(o.nschema, 14);
    char *again = sb_pq_schema_json(&o);
    cr_assert_str_eq(again, got);
    free(again);
    sb_pq_sink_opts_free(&o);
    free(got);
}

Test(parquet_write, inference_refuses_what_has_no_schema)
{
    const struct {
        const char *rec, *want;
    } bad[] = {{"[1]", "record 1: the record is not a JSON object"},
               {"{\"a\":", "record 1: the record is not a JSON object"},
               {"{\"\":1}", "record 1: field name of 0 bytes"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *recs[] = {"{\"a\":0}", bad[i].rec};
        sb_err e = {0};
        cr_assert_null(inferred(recs, 2, &e), "%s", bad[i].rec);
        cr_assert(strstr(e.msg, bad[i].want) != NULL && e.data, "%s: %s", bad[i].rec, e.msg);
    }
    const char *empty[] = {"{}", "{ }"};
    sb_err e = {0};
    cr_assert_null(inferred(empty, 2, &e));
    cr_assert(strstr(e.msg, "no fields") != NULL && e.data, "%s", e.msg);
}

/* A json field keeps each value's text exactly; the inferred types are enforced on later
 * records like a given schema (a wrong kind is a data error naming the record and the field). */
Test(parquet_write, json_fields_keep_the_text_and_inferred_types_are_enforced)
{
    const char *args = "{\"schema\":[" F("j", "json") "," F("i", "int64") "]}";
    const char *recs[] = {"{\"i\":1, \"j\" : {\"a\": [1, \"}\"]} }",
                          "{\"j\":12345678901234567890,\"i\":2}", "{\"j\":\"s\\\"q\"}",
                          "{\"j\":null}"};
    void *blob;
    size_t len;
    sb_err e = {0};
    cr_assert_eq(typed(args, recs, 4, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
    const sb_column *j = sb_batch_column(b, 0);
    const char *want[] = {"{\"a\": [1, \"}\"]}", "12345678901234567890", "\"s\\\"q\""};
    for (size_t r = 0; r < 3; r++) {
        size_t n;
        const char *p = sb_column_binary(j, r, &n);
        cr_assert(n == strlen(want[r]) && memcmp(p, want[r], n) == 0, "row %zu: %.*s", r, (int)n,
                  p);
    }
    cr_assert(!sb_column_valid(j, 3));
    sb_batch_close(b);
    sb_part_free(blob);
    const char *later[] = {"{\"j\":1,\"i\":2}", "{\"j\":1,\"i\":\"2\"}"};
    cr_assert_neq(typed(args, later, 2, &blob, &len, &e), 0);
    cr_assert(strstr(e.msg, "record 1") != NULL && strstr(e.msg, "field \"i\"") != NULL && e.data,
              "%s", e.msg);
    /* a closed (inferred) schema: a field it lacks does not fit; a given one ignores it */
    const char *extra[] = {"{\"j\":1}", "{\"i\":2,\"k\":3}"};
    cr_assert_eq(typed(args, extra, 2, &blob, &len, &e), 0, "%s", e.msg);
    sb_part_free(blob);
    sb_pq_sink_opts o;
    cr_assert_eq(sb_pq_sink_opts_parse(NULL, &o, &e), 0);
    cr_assert_eq(sb_pq_schema_parse("[" F("j", "json") "," F("i", "int64") "]", &o, &e), 0);
    o.closed = true;
    void *rb = records_blob(extra, 2, &len);
    cr_assert_eq(sb_batch_open(rb, len, &b, &e), 0);
    cr_assert_neq(sb_pq_records_batch(&o, sb_batch_column(b, 0), &blob, &len, &e), 0);
    cr_assert(strstr(e.msg, "record 1: field \"k\" is not in the schema inferred") != NULL &&
                  e.data,
              "%s", e.msg);
    sb_batch_close(b);
    sb_part_free(rb);
    sb_pq_sink_opts_free(&o);
}

Test(parquet_write, infer_schema_args)
{
    const char *bad[] = {"{\"inferSchema\":1}",
                         "{\"inferSchema\":true,\"schema\":[" F("a", "int64") "]}"};
    for (size_t i = 0; i < 2; i++) {
        sb_pq_sink_opts o;
        sb_err e = {0};
        cr_assert_neq(sb_pq_sink_opts_parse(bad[i], &o, &e), 0, "%s", bad[i]);
        cr_assert(strstr(e.msg, "inferSchema") != NULL, "%s", e.msg);
    }
    sb_pq_sink_opts o;
    sb_err e = {0};
    cr_assert_eq(sb_pq_sink_opts_parse("{\"inferSchema\":false}", &o, &e), 0);
    cr_assert_eq(o.infer, 0);
    sb_pq_sink_opts_free(&o);
}
