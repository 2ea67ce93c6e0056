/* test_pq_prune.c — row-group pruning by statistics (lib/parquet/prune.c): each comparison at
 * and around the bounds, nulls and all-null groups, missing and malformed statistics, NaN
 * bounds, unsigned and string sort orders with and without the file's column_orders, the
 * deprecated min/max, values the filter cannot compare, and a file from our own writer whose
 * skipped row groups are read anyway to check that none of their rows passes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "parquet/meta.h"
#include "parquet/parquet.h"
#include "parquet/prune.h"
#include "parquet/write.h"
#include "partition/partition.h"
#include "testpqmem.h"

/* One leaf column in one row group of `rows` rows, read as type t. */
typedef struct {
    sb_pq_meta m;
    sb_pq_schema_el el[2];
    int leaves[1];
    sb_pq_row_group rg;
    sb_pq_chunk ch;
    sb_pq_out o;
    sb_pq_plan p;
    bool order;
    uint8_t min[16], max[16];
} fx;

static void fx_init(fx *f, int phys, sb_type t, int64_t rows)
{
    memset(f, 0, sizeof *f);
    f->el[1] = (sb_pq_schema_el){.name = "c", .type = phys, .leaf = 0};
    f->leaves[0] = 1;
    f->ch.type = phys;
    f->rg = (sb_pq_row_group){.num_rows = rows, .cols = &f->ch};
    f->order = true;
    f->m = (sb_pq_meta){.num_rows = rows,
                        .schema = f->el,
                        .nschema = 2,
                        .leaves = f->leaves,
                        .nleaves = 1,
                        .rgs = &f->rg,
                        .nrgs = 1,
                        .type_order = &f->order};
    f->o = (sb_pq_out){.field = {.name = "c", .type = t, .nullable = true}, .leaf = 0};
    f->p = (sb_pq_plan){.cols = &f->o, .ncols = 1};
}

static void set_bounds(fx *f, const void *lo, const void *hi, size_t n)
{
    memcpy(f->min, lo, n);
    memcpy(f->max, hi, n);
    f->ch.stats.min = f->min;
    f->ch.stats.max = f->max;
    f->ch.stats.min_len = f->ch.stats.max_len = n;
    f->ch.stats.has_min = f->ch.stats.has_max = true;
}

static void set_nulls(fx *f, int64_t n)
{
    f->ch.stats.has_null_count = true;
    f->ch.stats.null_count = n;
}

static sb_pq_pred num(sb_pq_cmp op, int64_t i)
{
    return (sb_pq_pred){
        .column = "c", .op = op, .kind = SB_PQ_VNUMBER, .i = i, .is_int = true, .d = (double)i};
}

static sb_pq_pred dbl(sb_pq_cmp op, double d)
{
    return (sb_pq_pred){.column = "c", .op = op, .kind = SB_PQ_VNUMBER, .d = d};
}

static sb_pq_pred str(sb_pq_cmp op, const char *s)
{
    return (sb_pq_pred){
        .column = "c", .op = op, .kind = SB_PQ_VSTRING, .str = s, .str_len = strlen(s)};
}

static bool excl(const fx *f, sb_pq_pred p)
{
    return sb_pq_rg_excluded(&f->m, &f->p, 0, 0, &p);
}

static void int64_bounds(fx *f, int64_t lo, int64_t hi)
{
    fx_init(f, SB_PQ_INT64, SB_TYPE_INT64, 100);
    set_bounds(f, &lo, &hi, 8); /* little-endian host, as the PLAIN encoding */
}

Test(pq_prune, each_comparison_at_and_around_the_bounds)
{
    fx f;
    int64_bounds(&f, 10, 20);
    cr_expect(excl(&f, num(SB_PQ_EQ, 9)));
    cr_expect(!excl(&f, num(SB_PQ_EQ, 10)));
    cr_expect(!excl(&f, num(SB_PQ_EQ, 20)));
    cr_expect(excl(&f, num(SB_PQ_EQ, 21)));
    cr_expect(excl(&f, num(SB_PQ_LT, 10)));
    cr_expect(!excl(&f, num(SB_PQ_LT, 11)));
    cr_expect(excl(&f, num(SB_PQ_LE, 9)));
    cr_expect(!excl(&f, num(SB_PQ_LE, 10)));
    cr_expect(excl(&f, num(SB_PQ_GT, 20)));
    cr_expect(!excl(&f, num(SB_PQ_GT, 19)));
    cr_expect(excl(&f, num(SB_PQ_GE, 21)));
    cr_expect(!excl(&f, num(SB_PQ_GE, 20)));
    /* a fractional value compares as a double, as the filter does */
    cr_expect(excl(&f, dbl(SB_PQ_GT, 20.5)));
    cr_expect(!excl(&f, dbl(SB_PQ_GT, 19.5)));
    cr_expect(excl(&f, dbl(SB_PQ_EQ, 15.5)) == false, "15.5 lies inside [10, 20]: read");
    /* ne: only a group of one value and no nulls is excluded */
    cr_expect(!excl(&f, num(SB_PQ_NE, 10)));
}

Test(pq_prune, nulls_and_all_null_groups)
{
    fx f;
    int64_bounds(&f, 7, 7);
    cr_expect(!excl(&f, num(SB_PQ_NE, 7)), "null count unknown: a null may pass ne");
    set_nulls(&f, 1);
    cr_expect(!excl(&f, num(SB_PQ_NE, 7)), "a null passes ne");
    set_nulls(&f, 0);
    cr_expect(excl(&f, num(SB_PQ_NE, 7)), "every row is 7");
    cr_expect(!excl(&f, num(SB_PQ_NE, 8)));
    /* all null, no bounds (what writers write): nothing but ne passes */
    fx_init(&f, SB_PQ_INT64, SB_TYPE_INT64, 100);
    set_nulls(&f, 100);
    cr_expect(excl(&f, num(SB_PQ_EQ, 1)));
    cr_expect(excl(&f, num(SB_PQ_GE, INT64_MIN)));
    cr_expect(!excl(&f, num(SB_PQ_NE, 1)));
    set_nulls(&f, 99);
    cr_expect(!excl(&f, num(SB_PQ_EQ, 1)), "one row may be 1");
    set_nulls(&f, 101);
    cr_expect(!excl(&f, num(SB_PQ_EQ, 1)), "a null count above the rows is not believed");
}

Test(pq_prune, missing_or_malformed_statistics_read_the_group)
{
    fx f;
    fx_init(&f, SB_PQ_INT64, SB_TYPE_INT64, 100);
    cr_expect(!excl(&f, num(SB_PQ_EQ, 1)));
    int64_bounds(&f, 10, 20);
    f.ch.stats.has_max = false;
    cr_expect(!excl(&f, num(SB_PQ_LT, 5)), "a min alone is not used");
    int64_bounds(&f, 10, 20);
    f.ch.stats.min_len = 4;
    cr_expect(!excl(&f, num(SB_PQ_LT, 5)), "a 4-byte INT64 bound");
    int64_bounds(&f, 20, 10);
    cr_expect(!excl(&f, num(SB_PQ_EQ, 15)), "min above max: wrong statistics");
    cr_expect(!excl(&f, num(SB_PQ_EQ, 30)));
    int64_bounds(&f, 10, 20);
    f.rg.num_rows = 0;
    cr_expect(!excl(&f, num(SB_PQ_EQ, 30)), "an empty group is not counted as skipped");
}

Test(pq_prune, nan_bounds_are_ignored_and_floats_may_hold_nan)
{
    fx f;
    fx_init(&f, SB_PQ_DOUBLE, SB_TYPE_FLOAT64, 10);
    double lo = NAN, hi = 5;
    set_bounds(&f, &lo, &hi, 8);
    cr_expect(!excl(&f, dbl(SB_PQ_GT, 6)), "a NaN min is no bound");
    lo = 1;
    set_bounds(&f, &lo, &hi, 8);
    cr_expect(excl(&f, dbl(SB_PQ_GT, 6)));
    cr_expect(excl(&f, num(SB_PQ_LT, 1)));
    cr_expect(!excl(&f, num(SB_PQ_LE, 1)));
    lo = hi = 2;
    set_bounds(&f, &lo, &hi, 8);
    set_nulls(&f, 0);
    cr_expect(!excl(&f, dbl(SB_PQ_NE, 2)), "NaNs are not in the bounds and pass ne");
    /* FLOAT: 4-byte bounds, -0 equal to +0 */
    fx_init(&f, SB_PQ_FLOAT, SB_TYPE_FLOAT32, 10);
    float a = -0.0f, b = 0.0f;
    set_bounds(&f, &a, &b, 4);
    cr_expect(!excl(&f, dbl(SB_PQ_EQ, 0)));
    cr_expect(excl(&f, dbl(SB_PQ_GT, 0)));
}

Test(pq_prune, unsigned_order_needs_the_type_order)
{
    fx f;
    fx_init(&f, SB_PQ_INT32, SB_TYPE_UINT32, 10);
    uint32_t lo = 3000000000u, hi = 4000000000u;
    set_bounds(&f, &lo, &hi, 4);
    cr_expect(excl(&f, num(SB_PQ_LT, 0)), "read as unsigned, not as negative int32");
    cr_expect(excl(&f, num(SB_PQ_EQ, 2999999999)));
    cr_expect(!excl(&f, num(SB_PQ_EQ, 3500000000)));
    f.m.type_order = NULL;
    cr_expect(!excl(&f, num(SB_PQ_LT, 0)), "no column_orders: the order is unknown");
    f.m.type_order = &f.order;
    f.ch.stats.deprecated = true;
    cr_expect(!excl(&f, num(SB_PQ_LT, 0)), "deprecated min/max are signed");
    /* uint64 above INT64_MAX is greater than any value a filter holds */
    fx_init(&f, SB_PQ_INT64, SB_TYPE_UINT64, 10);
    uint64_t ulo = (uint64_t)INT64_MAX + 2, uhi = UINT64_MAX;
    set_bounds(&f, &ulo, &uhi, 8);
    cr_expect(excl(&f, num(SB_PQ_LT, INT64_MAX)));
    cr_expect(excl(&f, num(SB_PQ_EQ, -1)));
    cr_expect(!excl(&f, num(SB_PQ_GT, 0)));
    /* signed types keep their deprecated bounds and those of files without column_orders */
    int64_bounds(&f, 10, 20);
    f.ch.stats.deprecated = true;
    f.m.type_order = NULL;
    cr_expect(excl(&f, num(SB_PQ_GT, 20)));
}

Test(pq_prune, strings_compare_by_unsigned_bytes)
{
    fx f;
    fx_init(&f, SB_PQ_BYTE_ARRAY, SB_TYPE_UTF8, 10);
    set_bounds(&f, "apple\0", "banana", 6);
    f.ch.stats.min_len = 5;
    cr_expect(excl(&f, str(SB_PQ_EQ, "cherry")));
    cr_expect(!excl(&f, str(SB_PQ_EQ, "b")));
    cr_expect(excl(&f, str(SB_PQ_EQ, "appl")), "a prefix sorts before the min");
    cr_expect(!excl(&f, str(SB_PQ_EQ, "apple")));
    cr_expect(excl(&f, str(SB_PQ_LT, "apple")));
    cr_expect(excl(&f, str(SB_PQ_GT, "banana")));
    cr_expect(!excl(&f, str(SB_PQ_GE, "banana")));
    cr_expect(excl(&f, str(SB_PQ_EQ, "\xc3\xa9t\xc3\xa9")), "0xC3 sorts after 'b' unsigned");
    cr_expect(excl(&f, str(SB_PQ_EQ, "")), "the empty string sorts before the min");
    cr_expect(excl(&f, str(SB_PQ_LT, "")), "nothing is below the empty string");
    f.m.type_order = NULL;
    cr_expect(!excl(&f, str(SB_PQ_EQ, "cherry")), "no column_orders");
    f.m.type_order = &f.order;
    f.ch.stats.deprecated = true;
    cr_expect(!excl(&f, str(SB_PQ_EQ, "cherry")), "deprecated byte-array bounds are signed");
}

Test(pq_prune, values_the_filter_cannot_compare)
{
    fx f;
    int64_bounds(&f, 10, 20);
    cr_expect(excl(&f, str(SB_PQ_EQ, "15")), "a string never equals an integer column");
    cr_expect(!excl(&f, str(SB_PQ_NE, "15")), "and so every row passes ne");
    fx_init(&f, SB_PQ_BOOLEAN, SB_TYPE_BOOL, 10);
    uint8_t lo = 0, hi = 0;
    set_bounds(&f, &lo, &hi, 1);
    sb_pq_pred t = {.column = "c", .op = SB_PQ_EQ, .kind = SB_PQ_VBOOL, .b = true};
    cr_expect(excl(&f, t), "all false");
    t.b = false;
    cr_expect(!excl(&f, t));
    t.op = SB_PQ_NE;
    cr_expect(!excl(&f, t), "null count unknown");
    set_nulls(&f, 0);
    cr_expect(excl(&f, t), "all false, none null: nothing is ne false");
    hi = 1;
    set_bounds(&f, &lo, &hi, 1);
    cr_expect(!excl(&f, t));
    cr_expect(excl(&f, num(SB_PQ_EQ, 1)), "a number never equals a bool column");
    /* a tensor column compares with nothing */
    fx_init(&f, SB_PQ_FLOAT, SB_TYPE_FLOAT32, 10);
    f.o.as_list = true;
    cr_expect(excl(&f, num(SB_PQ_EQ, 1)));
    cr_expect(!excl(&f, num(SB_PQ_NE, 1)));
}

Test(pq_prune, which_plan_column_the_filter_compares)
{
    sb_pq_out cols[2] = {{.field = {.name = "a", .type = SB_TYPE_INT64}},
                         {.field = {.name = "s", .type = SB_TYPE_UTF8}}};
    sb_pq_plan p = {.cols = cols, .ncols = 2};
    sb_pq_pred pr = num(SB_PQ_EQ, 1);
    pr.column = "s";
    cr_expect_eq(sb_pq_pred_column(&p, &pr), 1);
    pr.column = "x";
    cr_expect_eq(sb_pq_pred_column(&p, &pr), -1, "not read: the filter looks in JSON");
    p.cols = &cols[1];
    p.ncols = 1;
    pr.column = "s";
    cr_expect_eq(sb_pq_pred_column(&p, &pr), -1, "a single string column stands for records");
    cols[0].field.name = "record";
    p.cols = cols;
    p.ncols = 2;
    cr_expect_eq(sb_pq_pred_column(&p, &pr), -1, "a record column: records");
}

static int64_t max_seen;

static int track_max(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    (void)ud;
    sb_batch *b;
    sb_err e = {0};
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, 0);
    for (size_t r = 0; r < sb_batch_rows(b); r++)
        if (sb_column_valid(c, r) && sb_column_int64(c, r) > max_seen)
            max_seen = sb_column_int64(c, r);
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

Test(pq_prune, our_files_skip_exactly_the_groups_without_a_match)
{
    sb_field fl[2] = {{.name = "i", .type = SB_TYPE_INT64, .nullable = true},
                      {.name = "s", .type = SB_TYPE_UTF8}};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(fl, 2, &e);
    size_t rows = 40000;
    for (size_t r = 0; r < rows; r++) { /* rising, with nulls */
        if (r % 7 == 3)
            sb_batch_builder_append_null(bb, 0, &e);
        else
            sb_batch_builder_append_int(bb, 0, (int64_t)r, &e);
        sb_batch_builder_append_binary(bb, 1, "x", 1, &e);
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0, "%s", e.msg);
    sb_batch_builder_free(bb);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0);
    sb_pq_buf f = {0};
    sb_pq_write_opts o = {.codec = SB_PQ_ZSTD, .row_group_bytes = len / 8};
    cr_assert_eq(sb_pq_write_batch(b, &o, sb_test_pq_to_buf, &f, &e), 0, "%s", e.msg);
    sb_test_pq_mem m = {f.p, f.len};
    sb_pq_file pf;
    sb_pq_plan plan = {0};
    cr_assert_eq(sb_pq_open(&pf, "t.parquet", f.len, sb_test_pq_mem_read, &m, &e), 0, "%s", e.msg);
    cr_assert_geq(pf.meta.nrgs, 6, "%zu row groups", pf.meta.nrgs);
    cr_assert_not_null(pf.meta.type_order, "our writer writes column_orders");
    cr_assert_eq(sb_pq_plan_make(&pf, NULL, 0, &plan, &e), 0, "%s", e.msg);
    sb_pq_pred pr = num(SB_PQ_GT, 30000);
    pr.column = "i";
    int col = sb_pq_pred_column(&plan, &pr);
    cr_assert_eq(col, 0);
    sb_pq_read_opts ro = {.target_bytes = 1 << 20};
    size_t skipped = 0;
    for (size_t g = 0; g < pf.meta.nrgs; g++) {
        max_seen = INT64_MIN;
        cr_assert_eq(sb_pq_read_row_group(&pf, &plan, g, &ro, track_max, NULL, &e), 0, "%s", e.msg);
        bool x = sb_pq_rg_excluded(&pf.meta, &plan, col, g, &pr);
        cr_expect_eq(x, max_seen <= 30000, "row group %zu: max %lld, excluded %d", g,
                     (long long)max_seen, x);
        skipped += x;
    }
    cr_expect_geq(skipped, pf.meta.nrgs / 2, "%zu of %zu skipped", skipped, pf.meta.nrgs);
    sb_pq_plan_free(&plan);
    sb_pq_close(&pf);
    sb_pq_buf_free(&f);
    sb_batch_close(b);
    sb_part_free(blob);
}
