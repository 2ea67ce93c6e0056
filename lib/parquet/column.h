/* column.h — decodes one column chunk of a row group (all its pages: dictionary, data v1 and
 * v2, every supported encoding and codec) into a flat in-memory column: one value slot per row
 * (nulls as zero slots and a per-row validity byte), or for a fixed-size list the rows' values
 * back to back. The file reader (parquet.h) turns these into partitions.
 *
 * Every page header, size, level run, bit width and dictionary index is checked before use;
 * a page decompresses into a buffer of exactly its declared size; the decoded column is bounded
 * by `max_decoded` bytes. Errors name the row group, the column and the page (the caller adds
 * the file).
 *
 * Memory: sb_pq_colbuf owns its buffers (free with sb_pq_colbuf_free). The chunk bytes are the
 * caller's and are not retained.
 */
#ifndef SB_PARQUET_COLUMN_H
#define SB_PARQUET_COLUMN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "parquet/meta.h"

typedef struct sb_pq_colbuf {
    int ptype;      /* physical type */
    size_t width;   /* bytes per value: fixed types (BOOLEAN: 1 byte per value); 0 binary */
    bool binary;    /* BYTE_ARRAY or FIXED_LEN_BYTE_ARRAY: offs + vals */
    size_t rows;    /* rows decoded */
    uint8_t *valid; /* one byte per row (1 = value), NULL when the column is required */
    size_t nulls;   /* rows without a value */
    uint8_t *vals;  /* fixed: rows*width bytes (list: rows*list_len values); binary: data */
    size_t vals_len, vals_cap;
    int64_t *offs; /* binary: rows+1 offsets into vals */
    size_t offs_cap, valid_cap;
    uint32_t list_len; /* list columns: values per row (0 until the first row ends) */
} sb_pq_colbuf;

/* A byte range of the chunk buffer. */
typedef struct sb_pq_span {
    size_t off, len;
} sb_pq_span;

typedef struct sb_pq_chunk_ctx {
    const sb_pq_meta *m;
    size_t rg, leaf;
    bool as_list;       /* the leaf is the element of a LIST read as a fixed-size list */
    size_t max_decoded; /* bound on the decoded column's bytes */
    /* Some pages only (the page index, pindex.h): NULL reads every page up to the chunk's value
     * count. Otherwise spans[0] holds the pages before the first data page (a dictionary page,
     * or nothing; a data page there is an error) and each further span exactly one data page
     * (header and body); the decoded rows are those of these pages, in order. */
    const sb_pq_span *spans;
    size_t nspans;
} sb_pq_chunk_ctx;

/* Decodes the chunk's bytes chunk[0..len) (the range the metadata gives) into out. */
int sb_pq_read_chunk(const sb_pq_chunk_ctx *cx, const uint8_t *chunk, size_t len, sb_pq_colbuf *out,
                     sb_err *err);

void sb_pq_colbuf_free(sb_pq_colbuf *c);

#endif
