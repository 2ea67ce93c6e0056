/* Tests of lib/parquet: the Thrift compact codec (writer and reader with each other, and
 * hostile bytes), the level and value decoders against encodings built by hand from the format
 * specification, the codecs' size checks, and a whole file built with the Thrift writer, read
 * and then cut at every length. (Against pyarrow and DuckDB: tests/parquet/; random bytes:
 * tests/fuzz/fuzz_parquet.c.) */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "parquet/encoding.h"
#include "parquet/meta.h"
#include "parquet/parquet.h"
#include "parquet/thrift.h"
#include "partition/partition.h"
#include "testpqmem.h"

Test(parquet_thrift, round_trip)
{
    sb_tc_wbuf w = {0};
    sb_tc_w_i32(&w, 1, -5);
    sb_tc_w_i64(&w, 3, (int64_t)1 << 40);
    sb_tc_w_str(&w, 4, "hello", 5);
    sb_tc_w_bool(&w, 5, true);
    sb_tc_w_field(&w, 40, SB_TC_STRUCT); /* a jump past 15: the long field header */
    sb_tc_w_struct_begin(&w);
    sb_tc_w_i32(&w, 2, 77);
    sb_tc_w_struct_end(&w);
    sb_tc_w_field(&w, 41, SB_TC_LIST);
    sb_tc_w_list(&w, SB_TC_I32, 20); /* a count past 14: the long list header */
    for (int i = 0; i < 20; i++)
        sb_tc_w_zigzag(&w, i - 10);
    sb_tc_w_struct_end(&w);
    cr_assert(!w.oom);

    sb_tc_reader r;
    sb_tc_init(&r, w.p, w.len);
    int16_t last = 0, id;
    uint8_t t;
    int64_t v;
    cr_assert(sb_tc_field(&r, &last, &id, &t) && id == 1 && t == SB_TC_I32);
    cr_assert_eq(sb_tc_i32(&r), -5);
    cr_assert(sb_tc_field(&r, &last, &id, &t) && id == 3);
    cr_assert_eq(sb_tc_i64(&r), (int64_t)1 << 40);
    cr_assert(sb_tc_field(&r, &last, &id, &t) && id == 4 && t == SB_TC_BINARY);
    size_t n;
    const uint8_t *s = sb_tc_binary(&r, &n);
    cr_assert(n == 5 && memcmp(s, "hello", 5) == 0);
    cr_assert(sb_tc_field(&r, &last, &id, &t) && id == 5);
    cr_assert(sb_tc_int_field(&r, t, &v) && v == 1);
    cr_assert(sb_tc_field(&r, &last, &id, &t) && id == 40 && t == SB_TC_STRUCT);
    cr_assert(sb_tc_skip(&r, t)); /* an unknown struct is skipped whole */
    cr_assert(sb_tc_field(&r, &last, &id, &t) && id == 41 && t == SB_TC_LIST);
    uint8_t et;
    cr_assert(sb_tc_list(&r, &et, &n) && et == SB_TC_I32 && n == 20);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(sb_tc_i32(&r), i - 10);
    cr_assert(sb_tc_field(&r, &last, &id, &t) && t == SB_TC_STOP);
    cr_assert(!r.bad);
    cr_assert_eq(sb_tc_pos(&r), w.len);

    /* every cut of the bytes is an error when read as a whole struct, never a crash */
    for (size_t cut = 0; cut < w.len; cut++) {
        sb_tc_init(&r, w.p, cut);
        cr_assert(!sb_tc_skip_struct(&r), "cut at %zu accepted", cut);
        cr_assert(r.bad);
    }
    sb_tc_wbuf_free(&w);
}

Test(parquet_thrift, hostile)
{
    sb_tc_reader r;
    /* a binary whose length runs past the end */
    const uint8_t b1[] = {0x18, 0x7f, 'a'};
    sb_tc_init(&r, b1, sizeof b1);
    cr_assert(!sb_tc_skip_struct(&r));
    cr_assert(strstr(r.msg, "binary length") != NULL, "%s", r.msg);
    /* a varint of 11 bytes */
    uint8_t b2[12];
    memset(b2, 0xff, sizeof b2);
    sb_tc_init(&r, b2, sizeof b2);
    sb_tc_varint(&r);
    cr_assert(r.bad);
    /* structs nested past the limit */
    uint8_t b3[200];
    memset(b3, 0x1c, sizeof b3); /* field 1, struct, again and again */
    sb_tc_init(&r, b3, sizeof b3);
    cr_assert(!sb_tc_skip_struct(&r));
    cr_assert(strstr(r.msg, "nesting") != NULL, "%s", r.msg);
    /* a list that claims more elements than bytes */
    const uint8_t b4[] = {0x19, 0xf5, 0xff, 0xff, 0x03, 0};
    sb_tc_init(&r, b4, sizeof b4);
    cr_assert(!sb_tc_skip_struct(&r));
    /* an i32 field holding a 64-bit value */
    const uint8_t b5[] = {0xfe, 0xff, 0xff, 0xff, 0x7f};
    sb_tc_init(&r, b5, sizeof b5);
    sb_tc_i32(&r);
    cr_assert(r.bad);
}

/* ---- decoders ------------------------------------------------------------------------- */

Test(parquet_decode, rle_hybrid)
{
    /* an RLE run of 5 x value 3 (width 2), then a bit-packed group of 8: 0..7 at width 3 */
    const uint8_t p[] = {5 << 1, 3, (1 << 1) | 1, 0x88, 0xc6, 0xfa};
    uint32_t out[13];
    size_t used;
    sb_err e = {0};
    cr_assert_eq(sb_pq_rle_decode(p, sizeof p, 3, out, 13, &used, &e), 0, "%s", e.msg);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(out[i], 3);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(out[5 + i], (uint32_t)i, "value %d: %u", i, out[5 + i]);
    cr_assert_eq(used, sizeof p);
    /* one value more than the runs hold */
    uint32_t big[14];
    cr_assert_eq(sb_pq_rle_decode(p, sizeof p, 3, big, 14, NULL, &e), -1);
    /* a run value wider than the bit width */
    const uint8_t q[] = {2 << 1, 9};
    cr_assert_eq(sb_pq_rle_decode(q, sizeof q, 3, out, 2, NULL, &e), -1);
    /* a bit-packed run past the data */
    const uint8_t r[] = {(9 << 1) | 1, 0};
    cr_assert_eq(sb_pq_rle_decode(r, sizeof r, 3, out, 8, NULL, &e), -1);
    cr_assert_eq(sb_pq_rle_decode(p, sizeof p, 33, out, 1, NULL, &e), -1);
}

Test(parquet_decode, delta_binary_packed)
{
    /* the specification's example: 7, 5, 3, 1, 2, 3, 4, 5 (deltas -2,-2,-2,1,1,1,1; min -2;
     * relative 0,0,0,3,3,3,3 at width 2 in the first of 4 miniblocks of 32) */
    uint8_t p[64] = {0x80, 0x01, 4, 8, 14, 3, 2, 0, 0, 0, 0xc0, 0x3f};
    size_t len = 10 + 8;
    uint64_t out[8];
    size_t used;
    sb_err e = {0};
    cr_assert_eq(sb_pq_delta_decode(p, len, out, 8, &used, &e), 0, "%s", e.msg);
    const int64_t want[] = {7, 5, 3, 1, 2, 3, 4, 5};
    for (int i = 0; i < 8; i++)
        cr_assert_eq((int64_t)out[i], want[i], "value %d: %lld", i, (long long)out[i]);
    cr_assert_eq(used, len);
    cr_assert_eq(sb_pq_delta_count(p, len, &e), 8);
    /* a count that is not the page's */
    cr_assert_eq(sb_pq_delta_decode(p, len, out, 7, &used, &e), -1);
    /* the miniblock cut short */
    cr_assert_eq(sb_pq_delta_decode(p, len - 1, out, 8, &used, &e), -1);
    /* a block size that is not a multiple of 128 */
    uint8_t bad[] = {0x40, 4, 8, 14};
    cr_assert_eq(sb_pq_delta_decode(bad, sizeof bad, out, 8, &used, &e), -1);
}

Test(parquet_decode, byte_stream_split)
{
    const float v[3] = {1.5f, -2.25f, 1e10f};
    uint8_t split[12], out[12];
    const uint8_t *b = (const uint8_t *)v;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 3; i++)
            split[k * 3 + i] = b[i * 4 + k];
    sb_err e = {0};
    cr_assert_eq(sb_pq_bss_decode(split, 12, 4, out, 3, &e), 0);
    cr_assert(memcmp(out, v, 12) == 0);
    cr_assert_eq(sb_pq_bss_decode(split, 11, 4, out, 3, &e), -1);
}

Test(parquet_decode, codec_sizes)
{
    uint8_t src[4096], z[8192], out[4097];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i % 7);
    size_t zn = ZSTD_compress(z, sizeof z, src, sizeof src, 3);
    cr_assert(!ZSTD_isError(zn));
    sb_err e = {0};
    cr_assert_eq(sb_pq_decompress(SB_PQ_ZSTD, z, zn, out, sizeof src, &e), 0, "%s", e.msg);
    cr_assert(memcmp(out, src, sizeof src) == 0);
    /* declared smaller than the data (a bomb): refused, nothing written past the buffer */
    cr_assert_eq(sb_pq_decompress(SB_PQ_ZSTD, z, zn, out, 100, &e), -1);
    /* declared larger */
    cr_assert_eq(sb_pq_decompress(SB_PQ_ZSTD, z, zn, out, sizeof out, &e), -1);
    cr_assert_eq(sb_pq_decompress(SB_PQ_LZO, z, zn, out, 10, &e), -1);
    cr_assert(strstr(e.msg, "LZO") != NULL, "%s", e.msg);
    cr_assert_eq(sb_pq_decompress(SB_PQ_UNCOMPRESSED, src, 10, out, 11, &e), -1);
}

/* ---- a whole file ---------------------------------------------------------------------- */

/* A file of one optional INT32 column "x" with rows 10, null, 30, 40 in one PLAIN data page v1
 * (definition levels: an RLE run), written with the Thrift writer. */
static uint8_t *make_file(size_t *len)
{
    sb_tc_wbuf page = {0};
    /* levels: 4-byte length, then runs: 1 x 1, 1 x 0, 2 x 1 (width 1) */
    const uint8_t levels[] = {6, 0, 0, 0, 1 << 1, 1, 1 << 1, 0, 2 << 1, 1};
    const int32_t vals[] = {10, 30, 40};
    size_t body = sizeof levels + sizeof vals;
    sb_tc_w_i32(&page, 1, SB_PQ_DATA_PAGE);
    sb_tc_w_i32(&page, 2, (int32_t)body);
    sb_tc_w_i32(&page, 3, (int32_t)body);
    sb_tc_w_field(&page, 5, SB_TC_STRUCT);
    sb_tc_w_struct_begin(&page);
    sb_tc_w_i32(&page, 1, 4);
    sb_tc_w_i32(&page, 2, SB_PQ_ENC_PLAIN);
    sb_tc_w_i32(&page, 3, SB_PQ_ENC_RLE);
    sb_tc_w_i32(&page, 4, SB_PQ_ENC_RLE);
    sb_tc_w_struct_end(&page);
    sb_tc_w_struct_end(&page);
    size_t chunk = page.len + body;

    sb_tc_wbuf m = {0};
    sb_tc_w_i32(&m, 1, 1);
    sb_tc_w_field(&m, 2, SB_TC_LIST);
    sb_tc_w_list(&m, SB_TC_STRUCT, 2);
    sb_tc_w_struct_begin(&m);
    sb_tc_w_str(&m, 4, "schema", 6);
    sb_tc_w_i32(&m, 5, 1);
    sb_tc_w_struct_end(&m);
    sb_tc_w_struct_begin(&m);
    sb_tc_w_i32(&m, 1, SB_PQ_INT32);
    sb_tc_w_i32(&m, 3, 1);
    sb_tc_w_str(&m, 4, "x", 1);
    sb_tc_w_struct_end(&m);
    sb_tc_w_i64(&m, 3, 4);
    sb_tc_w_field(&m, 4, SB_TC_LIST);
    sb_tc_w_list(&m, SB_TC_STRUCT, 1);
    sb_tc_w_struct_begin(&m); /* RowGroup */
    sb_tc_w_field(&m, 1, SB_TC_LIST);
    sb_tc_w_list(&m, SB_TC_STRUCT, 1);
    sb_tc_w_struct_begin(&m); /* ColumnChunk */
    sb_tc_w_i64(&m, 2, 4);
    sb_tc_w_field(&m, 3, SB_TC_STRUCT);
    sb_tc_w_struct_begin(&m); /* ColumnMetaData */
    sb_tc_w_i32(&m, 1, SB_PQ_INT32);
    sb_tc_w_field(&m, 2, SB_TC_LIST);
    sb_tc_w_list(&m, SB_TC_I32, 1);
    sb_tc_w_zigzag(&m, SB_PQ_ENC_PLAIN);
    sb_tc_w_field(&m, 3, SB_TC_LIST);
    sb_tc_w_list(&m, SB_TC_BINARY, 1);
    sb_tc_w_binary(&m, "x", 1);
    sb_tc_w_i32(&m, 4, SB_PQ_UNCOMPRESSED);
    sb_tc_w_i64(&m, 5, 4);
    sb_tc_w_i64(&m, 6, (int64_t)chunk);
    sb_tc_w_i64(&m, 7, (int64_t)chunk);
    sb_tc_w_i64(&m, 9, 4);
    sb_tc_w_struct_end(&m);
    sb_tc_w_struct_end(&m);
    sb_tc_w_i64(&m, 2, (int64_t)chunk);
    sb_tc_w_i64(&m, 3, 4);
    sb_tc_w_struct_end(&m);
    sb_tc_w_struct_end(&m);
    cr_assert(!m.oom && !page.oom);

    *len = 4 + chunk + m.len + 8;
    uint8_t *f = malloc(*len), *p = f;
    memcpy(p, "PAR1", 4);
    p += 4;
    memcpy(p, page.p, page.len);
    p += page.len;
    memcpy(p, levels, sizeof levels);
    p += sizeof levels;
    memcpy(p, vals, sizeof vals);
    p += sizeof vals;
    memcpy(p, m.p, m.len);
    p += m.len;
    uint32_t fl = (uint32_t)m.len;
    memcpy(p, &fl, 4);
    memcpy(p + 4, "PAR1", 4);
    sb_tc_wbuf_free(&page);
    sb_tc_wbuf_free(&m);
    return f;
}

typedef struct {
    void *blob;
    size_t len;
    int parts;
} got;

static int keep(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    got *g = ud;
    if (g->blob != NULL)
        sb_part_free(g->blob);
    g->blob = blob;
    g->len = len;
    g->parts++;
    return 0;
}

/* Opens, plans and reads every row group; 0 or -1 + err. */
static int read_all(const uint8_t *p, size_t n, got *g, sb_err *e)
{
    sb_test_pq_mem m = {p, n};
    sb_pq_file f;
    sb_pq_plan plan = {0};
    int rc = sb_pq_open(&f, "t.parquet", n, sb_test_pq_mem_read, &m, e);
    if (rc == 0)
        rc = sb_pq_plan_make(&f, NULL, 0, &plan, e);
    sb_pq_read_opts o = {.target_bytes = 1 << 20, .max_decoded = 1 << 20};
    for (size_t i = 0; rc == 0 && i < f.meta.nrgs; i++)
        rc = sb_pq_read_row_group(&f, &plan, i, &o, keep, g, e);
    sb_pq_plan_free(&plan);
    sb_pq_close(&f);
    return rc;
}

Test(parquet_file, reads_a_handmade_file)
{
    size_t n;
    uint8_t *f = make_file(&n);
    got g = {0};
    sb_err e = {0};
    cr_assert_eq(read_all(f, n, &g, &e), 0, "%s", e.msg);
    cr_assert_eq(g.parts, 1);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(g.blob, g.len, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, 0);
    cr_assert_str_eq(c->name, "x");
    cr_assert_eq(c->type, SB_TYPE_INT32);
    cr_assert_eq(c->length, 4);
    cr_assert_eq(c->null_count, 1);
    const int32_t *v = c->values;
    cr_assert(v[0] == 10 && v[2] == 30 && v[3] == 40);
    cr_assert_eq(c->validity[0] & 0x0f, 0x0d);
    sb_batch_close(b);
    sb_part_free(g.blob);
    free(f);
}

Test(parquet_file, every_cut_and_every_flipped_byte_is_an_error_or_a_valid_read)
{
    size_t n;
    uint8_t *f = make_file(&n);
    sb_err e = {0};
    for (size_t cut = 0; cut < n; cut++) {
        got g = {0};
        cr_assert_eq(read_all(f, cut, &g, &e), -1, "cut at %zu accepted", cut);
        cr_assert(strstr(e.msg, "t.parquet") != NULL, "cut at %zu: %s", cut, e.msg);
        sb_part_free(g.blob);
    }
    uint8_t *m = malloc(n);
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(m, f, n);
            m[i] ^= (uint8_t)(1u << bit);
            got g = {0};
            if (read_all(m, n, &g, &e) != 0) {
                cr_assert(strstr(e.msg, "t.parquet") != NULL, "byte %zu: %s", i, e.msg);
            } else if (g.blob != NULL) { /* accepted: the partition must be valid */
                sb_batch *b;
                cr_assert_eq(sb_batch_open(g.blob, g.len, &b, &e), 0, "byte %zu: %s", i, e.msg);
                sb_batch_close(b);
            }
            sb_part_free(g.blob);
        }
    free(m);
    free(f);
}

Test(parquet_file, names_the_missing_column)
{
    size_t n;
    uint8_t *f = make_file(&n);
    sb_test_pq_mem m = {f, n};
    sb_pq_file pf;
    sb_err e = {0};
    cr_assert_eq(sb_pq_open(&pf, "t.parquet", n, sb_test_pq_mem_read, &m, &e), 0, "%s", e.msg);
    sb_pq_plan plan;
    const char *cols[] = {"nope"};
    cr_assert_eq(sb_pq_plan_make(&pf, cols, 1, &plan, &e), -1);
    cr_assert(strstr(e.msg, "\"nope\"") != NULL, "%s", e.msg);
    const char *ok[] = {"x"};
    cr_assert_eq(sb_pq_plan_make(&pf, ok, 1, &plan, &e), 0, "%s", e.msg);
    cr_assert_eq(plan.ncols, 1);
    cr_assert(plan.cols[0].field.nullable);
    sb_pq_plan_free(&plan);
    sb_pq_close(&pf);
    free(f);
}
