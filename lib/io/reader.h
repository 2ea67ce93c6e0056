/* reader.h — reads one source split (split.h) of a local file and emits its records as
 * partitions (lib/partition blobs) of about `target_bytes` each.
 *
 * Format parquet: the row groups a split owns, as typed columns (lib/parquet/parquet.h).
 * Format image: one partition per object, decoded into typed columns (imgread.h). Every
 * other format's partitions have ONE column named "record" (SB_IO_RECORD_COLUMN):
 *   jsonl  utf8, one line per record without its line terminator ("\n" or "\r\n"); blank lines
 *          (empty or only spaces/tabs) are skipped; a UTF-8 byte order mark at the start of the
 *          file is dropped. Lines are not parsed as JSON here.
 *   text   utf8, one line per record without its terminator; empty lines are kept as empty
 *          records. A final line without '\n' is a record too (for both formats).
 *   binary binary, each value exactly recordSize bytes (args_json {"recordSize": N}).
 * A line that is not valid UTF-8 is an error naming the file and the byte offset.
 *
 * Record size: a line longer than sb_io_max_record() (args.maxRecordSize, default 4x the
 * target partition size, at least 1 MiB) is an error naming the file and byte offset; the read
 * buffer never grows past it, so memory the budget does not see stays bounded.
 *
 * Storage: the split's path is a local path or a URI of any backend (store.h); the split is read
 * as one sequential stream, never buffered whole.
 *
 * Line ownership (text and jsonl): a line belongs to the split that contains its first byte.
 * A split [s, e) with s > 0 skips everything up to and including the first '\n' at or after
 * byte s-1 (the tail of a line owned by an earlier split), then reads every line that starts
 * before e, reading past e to finish the last one. So splits that tile a file read every line
 * exactly once, wherever their boundaries fall. A split may own no line at all (e.g. inside one
 * long line); it then emits nothing.
 *
 * Partitions: a partition is flushed as soon as the builder's blob size reaches target_bytes
 * (so it exceeds the target by less than one record), and the rest at the end. The file is
 * read with large positioned reads (4 MiB buffers, grown only for longer lines); records go
 * into the builder in bulk, with no per-record system call or allocation. A backend that
 * receives into buffers of its own (s3: libcurl's) pushes them instead (sb_io_read_push): whole
 * lines go from there into the builder and only a line cut by a buffer's end is copied aside,
 * which saves a copy of every byte (issue 10: a third of the source's CPU on S3); both ways
 * apply the same line ownership, byte order mark and record-limit rules.
 *
 * Memory: the emit callback takes ownership of every blob (free with sb_part_free()), also
 * when it returns nonzero, which stops the read (-1 with a message). Nothing else outlives the
 * call.
 */
#ifndef SB_IO_READER_H
#define SB_IO_READER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "spec/pipeline.h"
#include "io/common.h"
#include "io/split.h"

#define SB_IO_RECORD_COLUMN "record"

/* Receives one partition: blob[0..len) with `rows` records. Owns blob from now on. Nonzero
 * stops the read. */
typedef int (*sb_io_emit_fn)(void *blob, size_t len, uint64_t rows, void *ud);

/* Reads `split` in format `fmt` (jsonl, text, csv, binary or image; args_json carries the format
 * args, e.g. binary's recordSize)
 * and emits partitions of about target_bytes (> 0). 0 when the whole split was read; -1 + err
 * (naming the file and byte offset) for an unreadable file, a directory, a file whose size
 * changed since planning, a binary split not aligned to recordSize, invalid UTF-8, a line
 * longer than the record limit, or a refusing callback. Partitions emitted before a failure stay
 * emitted. */
int sb_io_read_split(const sb_io_split *split, sb_format fmt, const char *args_json,
                     size_t target_bytes, sb_io_emit_fn emit, void *ud, sb_err *err);

/* Reads the pieces of one split (split.h: whole small files grouped, or one file's range) in
 * order into the same partitions (a partition may hold records of several files); errors name
 * the file. Image sources read each piece as its own image. */
int sb_io_read_splits(const sb_io_split *pieces, size_t n, sb_format fmt, const char *args_json,
                      size_t target_bytes, sb_io_emit_fn emit, void *ud, sb_err *err);

/* Like sb_io_read_splits(), for a consumer in this process that re-cuts the partitions at the
 * target anyway (the worker feeding a task's op chain): partitions of about chunk_bytes when that
 * is smaller than target_bytes (0: target_bytes), so their blobs are reused from the heap and
 * still in cache when the first op reads them, and unsealed (sb_batch_builder_finish_unsealed:
 * checksums 0, open with SB_BATCH_OPEN_SKIP_CHECKSUM). Everything else derived from the target
 * (the default record limit, 4x target_bytes) stays as sb_io_read_splits() has it; image sources
 * ignore chunk_bytes (their partitions are sealed). */
int sb_io_read_splits_chunked(const sb_io_split *pieces, size_t n, sb_format fmt,
                              const char *args_json, size_t target_bytes, size_t chunk_bytes,
                              sb_io_emit_fn emit, void *ud, sb_err *err);

/* sb_io_read_splits_chunked() with the filter that follows the source: a parquet source skips
 * the row groups whose statistics prove that no row satisfies pred (NULL: none; other formats
 * ignore it) and counts into *scan (NULL: not counted; pqread.h). */
struct sb_pq_pred;
struct sb_pq_scan_stats;
int sb_io_read_splits_pushdown(const sb_io_split *pieces, size_t n, sb_format fmt,
                               const char *args_json, size_t target_bytes, size_t chunk_bytes,
                               const struct sb_pq_pred *pred, struct sb_pq_scan_stats *scan,
                               sb_io_emit_fn emit, void *ud, sb_err *err);

#endif
