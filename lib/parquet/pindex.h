/* pindex.h — the Parquet page index (ColumnIndex and OffsetIndex, written after the row groups
 * and pointed at by each ColumnChunk): decoding and checking it, choosing the rows of a row
 * group that a filter can match from the filter column's per-page min/max, and reading of every
 * other column only the pages that hold those rows.
 *
 * Pages begin at different rows in different columns, so the standard way is followed: the
 * filter column's index gives row ranges (the rows of its pages that may match), each read
 * column fetches the pages of its OffsetIndex that overlap a range (the dictionary page
 * always), and the reader (parquet.c) cuts every column at the ranges' edges, so all columns
 * yield the same rows. The filter still runs on them; the ranges only leave out rows that no
 * page's statistics let match. An index that is absent, malformed or out of the chunk's bounds
 * is not used (the row group or the column chunk is read whole), never trusted.
 *
 * Memory: sb_pq_offidx owns its arrays (sb_pq_offidx_free); a column index borrows the bytes it
 * was decoded from (the caller keeps them), and owns its arrays (sb_pq_colidx_free).
 */
#ifndef SB_PARQUET_PINDEX_H
#define SB_PARQUET_PINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "parquet/column.h"
#include "parquet/meta.h"
#include "parquet/parquet.h"
#include "parquet/prune.h"

#define SB_PQ_MAX_INDEX (16u << 20) /* bytes of one column's ColumnIndex or OffsetIndex */

/* OffsetIndex: page i's bytes [off[i], off[i] + size[i]) in the file (header included) hold
 * rows [first[i], first[i+1]) of the row group (the last one up to its row count). */
typedef struct sb_pq_offidx {
    size_t n;
    int64_t *off, *first;
    int32_t *size;
} sb_pq_offidx;

/* ColumnIndex of a chunk of npages pages: whether each page is all null, its min and max (raw
 * bytes as in Statistics.min_value/max_value) and, when the file gives them, its null count. */
typedef struct sb_pq_colidx {
    size_t n;
    bool *null_pages;
    const uint8_t **min, **max;
    size_t *min_len, *max_len;
    int64_t *nulls; /* NULL when absent */
} sb_pq_colidx;

/* Decodes an OffsetIndex and checks it against chunk ch of a row group of `rows` rows: at least
 * one page, the first at row 0, rows strictly ascending and below `rows`, pages in order, not
 * overlapping, inside the chunk's bytes. -1 + err naming what is wrong. */
int sb_pq_offidx_parse(const uint8_t *p, size_t n, const sb_pq_chunk *ch, int64_t rows,
                       sb_pq_offidx *o, sb_err *err);
void sb_pq_offidx_free(sb_pq_offidx *o);

/* Decodes a ColumnIndex whose lists must each have npages entries. -1 + err. */
int sb_pq_colidx_parse(const uint8_t *p, size_t n, size_t npages, sb_pq_colidx *c, sb_err *err);
void sb_pq_colidx_free(sb_pq_colidx *c);

/* Fetches and decodes the OffsetIndex of chunk (rg, leaf): 0, 1 when the file has none, -1 +
 * err (a bad range or index, or the read failing). */
int sb_pq_offidx_read(const sb_pq_file *f, size_t rg, size_t leaf, sb_pq_offidx *o, sb_err *err);

/* The rows of row group rg that pred may match by the page index of plan column col
 * (sb_pq_pred_column): 1 with *sel (owned, sb_pq_rowsel_free; possibly no range at all) when
 * some page is excluded, 0 when none is or the chunk has no index, -1 + err when the index is
 * unusable (the caller reads the row group whole and says so). */
int sb_pq_select_rows(const sb_pq_file *f, const sb_pq_plan *p, int col, size_t rg,
                      const sb_pq_pred *pred, sb_pq_rowsel *sel, sb_err *err);

/* Decodes the pages of chunk cx that hold rows of sel into out, pos[j] = the row of out where
 * range j begins, counting into ps (may be NULL): 0. 1 when the chunk has no offset index or a
 * bad one, or its pages do not decode to the rows the index promises (logged as a warning): the
 * caller then reads it whole. -1 + err only for what a whole read would not cure (memory). */
int sb_pq_read_pages(const sb_pq_file *f, const sb_pq_chunk_ctx *cx, const sb_pq_rowsel *sel,
                     sb_pq_colbuf *out, size_t *pos, sb_pq_page_stats *ps, sb_err *err);

#endif
