/* pqread.h — the `parquet` source format on the storage layer: one split (a byte range of a
 * Parquet file, split.h) read through lib/io's ranged reads into partitions of typed columns
 * (parquet.h says which types and which row groups a range owns).
 *
 * Format args (args_json, optional): columns, a list of top-level column names to read (only
 * their column chunks are fetched), in the order given.
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

/* Reads the row groups `split` owns. -1 + err naming the file, row group, column and page. */
int sb_io_read_parquet(const sb_io_split *split, const char *args_json, size_t target_bytes,
                       bool unsealed, sb_pq_emit_fn emit, void *ud, sb_err *err);

/* Parses args.columns: *names (malloc'd array of malloc'd strings, *n of them; NULL/0 when
 * absent). Free with sb_io_parquet_names_free(). */
int sb_io_parquet_columns(const char *args_json, char ***names, size_t *n, sb_err *err);
void sb_io_parquet_names_free(char **names, size_t n);

#endif
