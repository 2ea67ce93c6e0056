/* pqread.h — the `parquet` source format on the storage layer: one split (a byte range of a
 * Parquet file, split.h) read through lib/io's ranged reads into partitions of typed columns
 * (parquet.h says which types and which row groups a range owns).
 *
 * Format args (args_json, optional): columns, a list of top-level column names to read (only
 * their column chunks are fetched), in the order given. A filter predicate given by the caller
 * skips the row groups its column's statistics exclude (prune.h) and,
 * in the others, the pages its column's page index excludes (pindex.h).
 *
 * Memory: nothing outlives the call except the emitted blobs, which belong to the callback.
 */
#ifndef SB_IO_PQREAD_H
#define SB_IO_PQREAD_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "io/split.h"
#include "parquet/parquet.h"
#include "parquet/prune.h"

/* What a read fetched and what pushdown spared it (added to, across calls). */
typedef struct sb_pq_scan_stats {
    uint64_t rgs_read, rgs_skipped;     /* owned row groups read / skipped by their statistics */
    uint64_t bytes_read;                /* bytes fetched: footers and column chunks */
    uint64_t bytes_skipped;             /* the selected column chunks of skipped row groups, and
                                           the pages the page index spared in the row groups read */
    uint64_t pages_read, pages_skipped; /* pages of chunks read through their offset index */
} sb_pq_scan_stats;

/* Reads the row groups `split` owns, less those whose statistics prove that no row satisfies
 * pred (a filter that follows the source; NULL: none), and of the others only the rows of the
 * pages that the page index (where the file has one) lets match, counting into *scan (NULL:
 * not counted). -1 + err naming the file, row group, column and page. */
int sb_io_read_parquet(const sb_io_split *split, const char *args_json, size_t target_bytes,
                       bool unsealed, const sb_pq_pred *pred, sb_pq_scan_stats *scan,
                       sb_pq_emit_fn emit, void *ud, sb_err *err);

/* Parses args.columns: *names (malloc'd array of malloc'd strings, *n of them; NULL/0 when
 * absent). Free with sb_io_parquet_names_free(). */
int sb_io_parquet_columns(const char *args_json, char ***names, size_t *n, sb_err *err);
void sb_io_parquet_names_free(char **names, size_t n);

#endif
