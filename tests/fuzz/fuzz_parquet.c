/* libFuzzer target for lib/parquet: a Parquet file comes from whoever wrote the source data, so
 * no file may make the reader read out of bounds, leak, hang, allocate without bound or emit a
 * partition that breaks the partition format's invariants.
 *
 * Each input is a whole file read from memory: open (footer), plan (every top-level column),
 * then every row group, decoded with a small bound on decoded bytes; every emitted partition
 * must open (sb_batch_open checks every size, offset and UTF-8 value). Each row group's
 * statistics are also judged by filter pushdown (prune.h) for every column and a value of each
 * kind: hostile min/max bytes, lengths and null counts must not be read out of bounds. Where
 * a column has a page index (pindex.h), the rows it selects are read through it, and every
 * emitted row must lie in the selection; the input is also decoded whole as an OffsetIndex and
 * a ColumnIndex, to reach their parsers without a footer pointing at them.
 * Seeds: tests/fuzz/corpus/parquet/ (small pyarrow files: each codec, encoding, page version,
 * nulls, lists; pindex-* with a page index). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parquet/parquet.h"
#include "parquet/pindex.h"
#include "parquet/prune.h"
#include "partition/partition.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__ubsan_default_options(void);

const char *__ubsan_default_options(void)
{
    return "halt_on_error=1:print_stacktrace=1";
}

typedef struct {
    const uint8_t *p;
    size_t n;
} mem;

static int mem_read(void *ud, uint64_t off, void *buf, size_t n, sb_err *err)
{
    const mem *m = ud;
    if (off > m->n || n > m->n - off)
        return sb_err_set(err, "read past the end");
    memcpy(buf, m->p + off, n);
    return 0;
}

static int check(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)ud;
    sb_err e = {0};
    sb_batch *b = NULL;
    if (sb_batch_open(blob, len, &b, &e) != 0 || sb_batch_rows(b) != rows)
        __builtin_trap();
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* Pushdown's verdict on every column of row group g, for a number, a string and a bool. */
static void prune_all(const sb_pq_file *f, const sb_pq_plan *p, size_t g)
{
    sb_pq_pred pr[3] = {
        {.op = SB_PQ_LT, .kind = SB_PQ_VNUMBER, .i = 7, .is_int = true, .d = 7},
        {.op = SB_PQ_EQ, .kind = SB_PQ_VSTRING, .str = "m", .str_len = 1},
        {.op = SB_PQ_NE, .kind = SB_PQ_VBOOL, .b = true},
    };
    for (size_t c = 0; c < p->ncols; c++)
        for (size_t k = 0; k < 3; k++) {
            pr[k].column = p->cols[c].field.name;
            (void)sb_pq_rg_excluded(&f->meta, p, sb_pq_pred_column(p, &pr[k]), g, &pr[k]);
        }
}

/* Rows emitted by a read under a selection: at most the selection's. */
static uint64_t sel_rows;

static int check_sel(void *blob, size_t len, uint64_t rows, void *ud)
{
    uint64_t most = *(const uint64_t *)ud;
    sel_rows += rows;
    if (sel_rows > most)
        __builtin_trap();
    return check(blob, len, rows, NULL);
}

/* The page index of every column of row group g judged for a number and a string, and the
 * selected rows read through the other columns' offset indexes. */
static void pages_all(const sb_pq_file *f, const sb_pq_plan *p, size_t g, const sb_pq_read_opts *o)
{
    sb_pq_pred pr[2] = {
        {.op = SB_PQ_GE, .kind = SB_PQ_VNUMBER, .i = 100, .is_int = true, .d = 100},
        {.op = SB_PQ_LT, .kind = SB_PQ_VSTRING, .str = "k", .str_len = 1},
    };
    for (size_t c = 0; c < p->ncols; c++)
        for (size_t k = 0; k < 2; k++) {
            pr[k].column = p->cols[c].field.name;
            sb_pq_rowsel sel;
            sb_err e = {0};
            if (sb_pq_select_rows(f, p, sb_pq_pred_column(p, &pr[k]), g, &pr[k], &sel, &e) != 1)
                continue;
            uint64_t most = 0;
            for (size_t j = 0; j < sel.n; j++)
                most += (uint64_t)sel.count[j];
            sb_pq_read_opts so = *o;
            sb_pq_page_stats ps = {0};
            so.sel = &sel;
            so.pages = &ps;
            sel_rows = 0;
            sb_pq_read_row_group(f, p, g, &so, check_sel, &most, &e);
            sb_pq_rowsel_free(&sel);
        }
}

/* The input as an OffsetIndex of a chunk spanning it and as a ColumnIndex of a few pages. */
static void index_parsers(const uint8_t *data, size_t size)
{
    sb_pq_chunk ch = {.start = 4, .len = size > 4 ? size - 4 : 0};
    sb_pq_offidx oi;
    sb_err e = {0};
    if (sb_pq_offidx_parse(data, size, &ch, 1000, &oi, &e) == 0)
        sb_pq_offidx_free(&oi);
    for (size_t n = 1; n <= 4; n++) {
        sb_pq_colidx ci;
        if (sb_pq_colidx_parse(data, size, n, &ci, &e) == 0)
            sb_pq_colidx_free(&ci);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    index_parsers(data, size);
    mem m = {data, size};
    sb_pq_file f;
    sb_err e = {0};
    if (sb_pq_open(&f, "fuzz.parquet", size, mem_read, &m, &e) != 0)
        return 0;
    sb_pq_plan plan;
    if (sb_pq_plan_make(&f, NULL, 0, &plan, &e) == 0) {
        sb_pq_read_opts o = {.target_bytes = 64 << 10, .max_decoded = 16 << 20};
        for (size_t g = 0; g < f.meta.nrgs && g < 64; g++) {
            prune_all(&f, &plan, g);
            pages_all(&f, &plan, g, &o);
            sb_pq_read_row_group(&f, &plan, g, &o, check, NULL, &e);
        }
        sb_pq_plan_free(&plan);
    }
    sb_pq_close(&f);
    return 0;
}
