/* parquet.h — the Parquet source format: a file's footer, the plan of which columns are read
 * and as what partition types, and the reading of one row group into partitions (the typed
 * column format of partition.h, the same that Arrow IPC decodes into).
 *
 * Types read (a top-level column of the schema becomes one partition column of the same name):
 *   BOOLEAN -> bool; INT32 -> int32 (INT(8|16|32, signed) -> int8/16/32, unsigned ->
 *   uint8/16/32, DATE -> int32 days); INT64 -> int64 (INT(64, unsigned) -> uint64, TIMESTAMP
 *   millis/micros/nanos -> int64 in that unit, the unit kept as the field's logical type,
 *   like DATE's); FLOAT ->
 *   float32; DOUBLE -> float64; BYTE_ARRAY -> binary, or utf8 when STRING/UTF8/ENUM/JSON
 *   (validated); FIXED_LEN_BYTE_ARRAY -> binary. A LIST of a numeric type whose rows all have
 *   the same length, without nulls -> fixed-size list (a tensor column). Required and optional
 *   columns. Refused, naming the column and its type: DECIMAL, INT96, other logical types
 *   (TIME, FLOAT16, ...), MAP, structs, other lists, and anything not in `columns` is not
 *   looked at at all.
 *
 * Splits: a reader given the byte range [start, end) of a file reads the row groups whose
 * midpoint (the middle of their chunks' byte span) lies in it, so ranges that tile a file read
 * every row group once, and a large file spreads over tasks by row groups.
 *
 * Memory: sb_pq_file owns its metadata (sb_pq_close). I/O goes through the caller's read_at
 * callback; a row group's selected chunks are read whole (or, given a row selection, only the
 * pages of each chunk that hold its rows, pindex.h), decoded, cut into partitions of about
 * target_bytes, then freed. Emitted blobs belong to the callback, as with reader.h.
 */
#ifndef SB_PARQUET_PARQUET_H
#define SB_PARQUET_PARQUET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "parquet/meta.h"
#include "partition/partition.h"

#define SB_PQ_DEFAULT_MAX_DECODED ((size_t)2 << 30) /* decoded bytes of one column chunk */

/* Reads n bytes at offset off into buf (exactly, or -1 + err). */
typedef int (*sb_pq_read_fn)(void *ud, uint64_t off, void *buf, size_t n, sb_err *err);
/* Receives a partition blob (owned from now on); nonzero stops the read. */
typedef int (*sb_pq_emit_fn)(void *blob, size_t len, uint64_t rows, void *ud);

typedef struct sb_pq_file {
    const char *name; /* for messages; not owned */
    uint64_t size;
    sb_pq_read_fn read;
    void *ud;
    sb_pq_meta meta;
} sb_pq_file;

/* Reads and checks the magic at both ends and the footer. -1 + err naming the file. */
int sb_pq_open(sb_pq_file *f, const char *name, uint64_t size, sb_pq_read_fn read, void *ud,
               sb_err *err);
void sb_pq_close(sb_pq_file *f);

typedef struct sb_pq_out {
    sb_field field; /* name points into the metadata */
    int leaf;       /* the leaf column read */
    bool as_list;
} sb_pq_out;

typedef struct sb_pq_plan {
    sb_pq_out *cols;
    size_t ncols;
} sb_pq_plan;

/* The output columns: every top-level column, or those named in columns[0..n) in that order
 * (a name the file lacks is an error). A column of a type that is not read is an error naming
 * it and its type. */
int sb_pq_plan_make(const sb_pq_file *f, const char *const *columns, size_t n, sb_pq_plan *p,
                    sb_err *err);
void sb_pq_plan_free(sb_pq_plan *p);

/* Rows of a row group to read: n ranges [first[i], first[i] + count[i]), ascending and
 * disjoint (pindex.h makes them from a filter column's page index). Owns its arrays. */
typedef struct sb_pq_rowsel {
    size_t n;
    int64_t *first, *count;
} sb_pq_rowsel;

void sb_pq_rowsel_free(sb_pq_rowsel *s);

/* Pages of the selected column chunks read and skipped through their offset index, and the
 * bytes of the skipped ones (added to). */
typedef struct sb_pq_page_stats {
    uint64_t pages_read, pages_skipped, bytes_skipped;
} sb_pq_page_stats;

typedef struct sb_pq_read_opts {
    size_t target_bytes; /* partition size (> 0) */
    bool unsealed;       /* sb_batch_builder_finish_unsealed instead of finish */
    size_t max_decoded;  /* 0: SB_PQ_DEFAULT_MAX_DECODED */
    /* NULL: every row. Otherwise only these rows are emitted, and of each column chunk with a
     * usable offset index only the pages that hold them are fetched (a chunk without one is
     * read whole and cut). */
    const sb_pq_rowsel *sel;
    sb_pq_page_stats *pages; /* counted into when not NULL */
} sb_pq_read_opts;

/* Reads row group rg (o->sel's rows of it) into partitions. -1 + err naming the file, row
 * group, column, page. */
int sb_pq_read_row_group(const sb_pq_file *f, const sb_pq_plan *p, size_t rg,
                         const sb_pq_read_opts *o, sb_pq_emit_fn emit, void *ud, sb_err *err);

/* Whether the split [start, end) owns row group rg (its midpoint lies in the range). */
bool sb_pq_owns(const sb_pq_file *f, size_t rg, uint64_t start, uint64_t end);

#endif
