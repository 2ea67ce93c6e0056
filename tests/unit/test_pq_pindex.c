/* test_pq_pindex.c — the page index (lib/parquet/pindex.c): OffsetIndex and ColumnIndex built
 * by hand with the Thrift writer, decoded, and refused when out of the chunk's bounds, out of
 * row order, of the wrong length or cut short at every byte; a row selection read from one of
 * our files (no index: the chunks read whole and cut at the ranges' edges) yields exactly the
 * selected rows; and a chunk whose index points outside the file is read whole, not trusted. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "parquet/pindex.h"
#include "parquet/thrift.h"
#include "parquet/write.h"
#include "partition/partition.h"
#include "testpqmem.h"

/* An OffsetIndex of n pages: offsets, sizes, first rows. */
static void offidx_bytes(sb_tc_wbuf *w, size_t n, const int64_t *off, const int32_t *size,
                         const int64_t *first)
{
    memset(w, 0, sizeof *w);
    sb_tc_w_field(w, 1, SB_TC_LIST);
    sb_tc_w_list(w, SB_TC_STRUCT, n);
    for (size_t i = 0; i < n; i++) {
        sb_tc_w_struct_begin(w);
        sb_tc_w_i64(w, 1, off[i]);
        sb_tc_w_i32(w, 2, size[i]);
        sb_tc_w_i64(w, 3, first[i]);
        sb_tc_w_struct_end(w);
    }
    sb_tc_w_struct_end(w);
}

static const sb_pq_chunk CH = {.start = 100, .len = 300};

static int parse_off(size_t n, const int64_t *off, const int32_t *size, const int64_t *first,
                     int64_t rows, sb_pq_offidx *o, sb_err *e)
{
    sb_tc_wbuf w;
    offidx_bytes(&w, n, off, size, first);
    cr_assert(!w.oom);
    int rc = sb_pq_offidx_parse(w.p, w.len, &CH, rows, o, e);
    sb_tc_wbuf_free(&w);
    return rc;
}

Test(pq_pindex, offset_index_decodes_and_checks)
{
    int64_t off[3] = {120, 200, 300}, first[3] = {0, 40, 90};
    int32_t size[3] = {80, 100, 100};
    sb_pq_offidx o;
    sb_err e = {0};
    cr_assert_eq(parse_off(3, off, size, first, 100, &o, &e), 0, "%s", e.msg);
    cr_expect_eq(o.n, 3);
    cr_expect_eq(o.off[1], 200);
    cr_expect_eq(o.size[2], 100);
    cr_expect_eq(o.first[2], 90);
    sb_pq_offidx_free(&o);

    int64_t f1[3] = {1, 40, 90}; /* must start at row 0 */
    cr_expect_eq(parse_off(3, off, size, f1, 100, &o, &e), -1);
    cr_expect(strstr(e.msg, "row") != NULL, "%s", e.msg);
    int64_t f2[3] = {0, 40, 40}; /* rows must ascend */
    cr_expect_eq(parse_off(3, off, size, f2, 100, &o, &e), -1);
    cr_expect_eq(parse_off(3, off, size, first, 90, &o, &e), -1, "a page past the rows");
    int64_t o1[3] = {120, 190, 300}; /* overlaps the page before */
    cr_expect_eq(parse_off(3, o1, size, first, 100, &o, &e), -1);
    cr_expect(strstr(e.msg, "not inside") != NULL, "%s", e.msg);
    int32_t s1[3] = {80, 100, 101}; /* past the chunk's end (400) */
    cr_expect_eq(parse_off(3, off, s1, first, 100, &o, &e), -1);
    int64_t o2[3] = {99, 200, 300}; /* before the chunk */
    cr_expect_eq(parse_off(3, o2, size, first, 100, &o, &e), -1);
    int32_t s2[3] = {80, 0, 100}; /* an empty page */
    cr_expect_eq(parse_off(3, off, s2, first, 100, &o, &e), -1);
    cr_expect_eq(parse_off(0, off, size, first, 100, &o, &e), -1, "no page");
}

Test(pq_pindex, offset_index_cut_short_at_every_byte_is_refused)
{
    int64_t off[2] = {100, 250}, first[2] = {0, 7};
    int32_t size[2] = {150, 150};
    sb_tc_wbuf w;
    offidx_bytes(&w, 2, off, size, first);
    for (size_t n = 0; n < w.len; n++) {
        sb_pq_offidx o;
        sb_err e = {0};
        cr_expect_eq(sb_pq_offidx_parse(w.p, n, &CH, 10, &o, &e), -1, "cut at %zu", n);
    }
    sb_tc_wbuf_free(&w);
}

/* A ColumnIndex of 2 pages; `nmax` max values (2 when well-formed). */
static void colidx_bytes(sb_tc_wbuf *w, size_t nmax, bool nulls)
{
    memset(w, 0, sizeof *w);
    sb_tc_w_field(w, 1, SB_TC_LIST);
    sb_tc_w_list(w, SB_TC_TRUE, 2);
    sb_tc_w_varint(w, 2); /* false */
    sb_tc_w_varint(w, 1); /* true: page 1 is all null */
    sb_tc_w_field(w, 2, SB_TC_LIST);
    sb_tc_w_list(w, SB_TC_BINARY, 2);
    sb_tc_w_binary(w, "a", 1);
    sb_tc_w_binary(w, "", 0);
    sb_tc_w_field(w, 3, SB_TC_LIST);
    sb_tc_w_list(w, SB_TC_BINARY, nmax);
    for (size_t i = 0; i < nmax; i++)
        sb_tc_w_binary(w, i == 0 ? "m" : "", i == 0 ? 1 : 0);
    sb_tc_w_i32(w, 4, 1); /* boundary order: ascending (not relied on) */
    if (nulls) {
        sb_tc_w_field(w, 5, SB_TC_LIST);
        sb_tc_w_list(w, SB_TC_I64, 2);
        sb_tc_w_zigzag(w, 3);
        sb_tc_w_zigzag(w, 10);
    }
    sb_tc_w_struct_end(w);
}

Test(pq_pindex, column_index_decodes_and_checks)
{
    sb_tc_wbuf w;
    sb_pq_colidx c;
    sb_err e = {0};
    colidx_bytes(&w, 2, true);
    cr_assert_eq(sb_pq_colidx_parse(w.p, w.len, 2, &c, &e), 0, "%s", e.msg);
    cr_expect(!c.null_pages[0]);
    cr_expect(c.null_pages[1]);
    cr_expect_eq(c.min_len[0], 1);
    cr_expect_eq(c.min[0][0], 'a');
    cr_expect_eq(c.max[0][0], 'm');
    cr_assert_not_null(c.nulls);
    cr_expect_eq(c.nulls[1], 10);
    sb_pq_colidx_free(&c);
    cr_expect_eq(sb_pq_colidx_parse(w.p, w.len, 3, &c, &e), -1, "3 pages, lists of 2");
    for (size_t n = 0; n < w.len; n++)
        cr_expect_eq(sb_pq_colidx_parse(w.p, n, 2, &c, &e), -1, "cut at %zu", n);
    sb_tc_wbuf_free(&w);
    colidx_bytes(&w, 1, false);
    cr_expect_eq(sb_pq_colidx_parse(w.p, w.len, 2, &c, &e), -1, "max_values of the wrong length");
    sb_tc_wbuf_free(&w);
    colidx_bytes(&w, 2, false);
    cr_assert_eq(sb_pq_colidx_parse(w.p, w.len, 2, &c, &e), 0, "%s", e.msg);
    cr_expect_null(c.nulls, "null_counts are optional");
    sb_pq_colidx_free(&c);
    sb_tc_wbuf_free(&w);
}

/* ---- a row selection read from one of our files ------------------------------------------ */

static int64_t seen[4096];
static size_t nseen;

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)ud;
    sb_batch *b;
    sb_err e = {0};
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_rows(b), rows);
    const sb_column *id = sb_batch_column(b, 0), *s = sb_batch_column(b, 1);
    for (size_t r = 0; r < rows; r++) {
        cr_assert_lt(nseen, 4096);
        int64_t v = sb_column_int64(id, r);
        size_t n;
        const uint8_t *p = sb_column_binary(s, r, &n);
        char want[32];
        snprintf(want, sizeof want, "s%lld", (long long)v);
        cr_expect(n == strlen(want) && memcmp(p, want, n) == 0,
                  "row %lld: the string column "
                  "is cut at the same rows",
                  (long long)v);
        seen[nseen++] = v;
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* Our writer's file of `rows` rows (id, "s<id>") in one row group, open in *pf. */
static void our_file(size_t rows, sb_pq_buf *buf, sb_test_pq_mem *m, sb_pq_file *pf,
                     sb_pq_plan *plan)
{
    sb_field fl[2] = {{.name = "id", .type = SB_TYPE_INT64}, {.name = "s", .type = SB_TYPE_UTF8}};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(fl, 2, &e);
    for (size_t r = 0; r < rows; r++) {
        char s[32];
        int n = snprintf(s, sizeof s, "s%zu", r);
        sb_batch_builder_append_int(bb, 0, (int64_t)r, &e);
        sb_batch_builder_append_binary(bb, 1, s, (size_t)n, &e);
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
    memset(buf, 0, sizeof *buf);
    sb_pq_write_opts o = {.codec = SB_PQ_ZSTD, .row_group_bytes = 1 << 30};
    cr_assert_eq(sb_pq_write_batch(b, &o, sb_test_pq_to_buf, buf, &e), 0, "%s", e.msg);
    sb_batch_close(b);
    sb_part_free(blob);
    *m = (sb_test_pq_mem){buf->p, buf->len};
    cr_assert_eq(sb_pq_open(pf, "t.parquet", buf->len, sb_test_pq_mem_read, m, &e), 0, "%s", e.msg);
    cr_assert_eq(pf->meta.nrgs, 1);
    cr_assert_eq(sb_pq_plan_make(pf, NULL, 0, plan, &e), 0, "%s", e.msg);
}

Test(pq_pindex, a_selection_yields_exactly_its_rows)
{
    sb_pq_buf buf;
    sb_test_pq_mem m;
    sb_pq_file pf;
    sb_pq_plan plan;
    our_file(1000, &buf, &m, &pf, &plan);
    int64_t first[3] = {0, 17, 990}, count[3] = {3, 400, 10};
    sb_pq_rowsel sel = {.n = 3, .first = first, .count = count};
    sb_pq_page_stats ps = {0};
    /* small partitions: a partition spans two ranges, a range several partitions */
    sb_pq_read_opts ro = {.target_bytes = 1000, .sel = &sel, .pages = &ps};
    sb_err e = {0};
    nseen = 0;
    cr_assert_eq(sb_pq_read_row_group(&pf, &plan, 0, &ro, collect, NULL, &e), 0, "%s", e.msg);
    size_t k = 0;
    for (size_t j = 0; j < 3; j++)
        for (int64_t r = first[j]; r < first[j] + count[j]; r++, k++)
            cr_assert(k < nseen && seen[k] == r, "row %zu: %lld, want %lld", k,
                      (long long)(k < nseen ? seen[k] : -1), (long long)r);
    cr_expect_eq(nseen, k, "%zu rows, the selection has %zu", nseen, k);
    cr_expect_eq(ps.pages_read + ps.pages_skipped, 0, "no offset index: nothing counted");

    sb_pq_rowsel none = {0};
    ro.sel = &none;
    nseen = 0;
    cr_assert_eq(sb_pq_read_row_group(&pf, &plan, 0, &ro, collect, NULL, &e), 0, "%s", e.msg);
    cr_expect_eq(nseen, 0, "an empty selection emits nothing");

    int64_t bf[2] = {10, 5}, bc[2] = {5, 5}; /* not ascending */
    sb_pq_rowsel bad = {.n = 2, .first = bf, .count = bc};
    ro.sel = &bad;
    cr_expect_eq(sb_pq_read_row_group(&pf, &plan, 0, &ro, collect, NULL, &e), -1);
    int64_t of[1] = {995}, oc[1] = {10}; /* past the row group */
    sb_pq_rowsel past = {.n = 1, .first = of, .count = oc};
    ro.sel = &past;
    cr_expect_eq(sb_pq_read_row_group(&pf, &plan, 0, &ro, collect, NULL, &e), -1);
    sb_pq_plan_free(&plan);
    sb_pq_close(&pf);
    sb_pq_buf_free(&buf);
}

Test(pq_pindex, an_index_outside_the_file_is_not_used)
{
    sb_pq_buf buf;
    sb_test_pq_mem m;
    sb_pq_file pf;
    sb_pq_plan plan;
    our_file(100, &buf, &m, &pf, &plan);
    sb_pq_chunk *ch = &pf.meta.rgs[0].cols[0];
    ch->oi_off = (int64_t)buf.len + 100; /* an index past the end of the file */
    ch->oi_len = 50;
    ch->ci_off = 4;
    ch->ci_len = 20;
    sb_pq_pred pr = {
        .column = "id", .op = SB_PQ_EQ, .kind = SB_PQ_VNUMBER, .i = 5, .is_int = true, .d = 5};
    sb_pq_rowsel sel;
    sb_err e = {0};
    cr_expect_eq(sb_pq_select_rows(&pf, &plan, 0, 0, &pr, &sel, &e), -1);
    cr_expect(strstr(e.msg, "not inside the file") != NULL, "%s", e.msg);
    sb_pq_offidx o;
    cr_expect_eq(sb_pq_offidx_read(&pf, 0, 0, &o, &e), -1);
    /* the reader given a selection reads such a chunk whole and still cuts the rows */
    int64_t first[1] = {40}, count[1] = {2};
    sb_pq_rowsel s2 = {.n = 1, .first = first, .count = count};
    sb_pq_read_opts ro = {.target_bytes = 1 << 20, .sel = &s2};
    nseen = 0;
    cr_assert_eq(sb_pq_read_row_group(&pf, &plan, 0, &ro, collect, NULL, &e), 0, "%s", e.msg);
    cr_expect_eq(nseen, 2);
    cr_expect(nseen == 2 && seen[0] == 40 && seen[1] == 41);
    sb_pq_plan_free(&plan);
    sb_pq_close(&pf);
    sb_pq_buf_free(&buf);
}
