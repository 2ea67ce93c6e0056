/* split.h — source splits: the units of work of a pipeline's source stage. A split is a byte
 * range [start, end) of one input object; sb_io_read_split() (reader.h) turns it into partitions.
 *
 * Planning lists the source through the storage interface (store.h: file://, s3://, http(s)://;
 * an S3 prefix behaves like a directory). For file:// the source URI names a single file, a
 * directory (every regular file in it, not recursive, sorted by name, skipping names that start
 * with '.' or '_' such as _SUCCESS and hidden files), or a glob(3) pattern (matches that are
 * regular files, sorted by path; the '.'/'_' rule applies too unless the pattern's last component
 * itself starts with that character). A relative path ("file://data/x.jsonl") is resolved against
 * the current working directory, and split paths are always absolute. Files larger than the
 * source's partitionSize are cut into ceil(size / partitionSize) ranges of nearly equal size
 * (never an image, or a csv file with multiline records: one split per file);
 * for the binary format every boundary is a multiple of recordSize (args.recordSize) and a file
 * whose size is not a multiple of it is an error. Empty files produce no split (no records), so
 * a source of only empty files plans zero splits successfully; no matching file at all (an
 * empty directory, a glob without matches) is an error naming the URI.
 *
 * For text and jsonl, range boundaries are plain byte offsets: the reader applies the line
 * ownership rule (a line belongs to the split that holds its first byte), so every line is read
 * exactly once whatever the boundaries.
 *
 * Encoding (what travels to workers in a task): "<start>\t<end>\t<file_size>\t<path>", three
 * canonical unsigned decimals (no sign, no leading zeros) then the absolute path or URI, which is
 * last so that it may contain any byte but NUL. The decoder is strict because the text
 * arrives over the network.
 *
 * Memory: an sb_io_split owns its `path` (malloc'd). sb_io_plan_splits() returns a malloc'd
 * array the caller frees with sb_io_splits_free(); sb_io_split_decode() fills a caller struct
 * the caller clears with sb_io_split_clear(); sb_io_split_encode() returns a malloc'd string
 * the caller frees with free().
 */
#ifndef SB_IO_SPLIT_H
#define SB_IO_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "spec/pipeline.h"

/* A plan never has more splits than this (a tiny partitionSize on a large input is an error
 * rather than millions of tasks). */
#define SB_IO_MAX_SPLITS ((size_t)1000000)

/* Longest encoded split accepted by the decoder (path included). */
#define SB_IO_SPLIT_ENCODED_MAX 4200

typedef struct sb_io_split {
    char *path;         /* absolute local path, or an s3:// / http(s):// URI; owned */
    uint64_t start;     /* first byte of the range */
    uint64_t end;       /* one past the last byte; start < end <= file_size */
    uint64_t file_size; /* size at planning time; the reader fails if the file changed size */
} sb_io_split;

/* Plans the splits of `src` (see above). On success *out (NULL when *n == 0) and *n are set.
 * -1 + err for an unsupported scheme or format, a path that does not exist or is not a regular
 * file or directory, no input files, a ragged binary file, too many splits, or an I/O error. */
int sb_io_plan_splits(const sb_source_spec *src, sb_io_split **out, size_t *n, sb_err *err);

/* Frees an array from sb_io_plan_splits() (NULL is fine). */
void sb_io_splits_free(sb_io_split *s, size_t n);

/* Frees s->path and zeroes the struct. */
void sb_io_split_clear(sb_io_split *s);

/* The encoded form (see above): malloc'd, NUL-terminated; NULL + err on an invalid split or
 * out of memory. */
char *sb_io_split_encode(const sb_io_split *s, sb_err *err);

/* Parses s[0..len) into *out (which must not own a path; on failure *out is left zeroed).
 * -1 + err naming the problem and its byte offset for anything malformed: missing fields,
 * non-canonical numbers, overflow, start >= end, end > file_size, a path that is empty, not
 * absolute, longer than PATH_MAX or containing NUL. */
int sb_io_split_decode(const char *s, size_t len, sb_io_split *out, sb_err *err);

/* ---- coalescing small files ----------------------------------------------------------------
 * A task that reads one tiny file costs a scheduling round trip, a partition and a sink part
 * for a few bytes; so consecutive whole files smaller than partitionSize share one split while
 * their sizes sum to at most partitionSize (and at most SB_IO_MAX_FILES_PER_SPLIT files). The
 * split then reads them in listing order into the same partitions. Image sources group at most
 * SB_IO_MAX_IMAGES_PER_SPLIT images, each still its own partition: one task per image cost the
 * scheduler and the data plane more than the decode (issue 40), and 64 keep a few thousand
 * images spread over 16 workers. A corrupt image does not take good ones with it: the worker
 * skips it and reports it with the task's rows (CompleteTaskRequest.errored_pieces), and the
 * controller counts it as one errored partition.
 *
 * Encoding of a split of several pieces (what travels in a task): "m\t<n>\t" then, n times,
 * "<len>\t" and a piece's encoding (above) of exactly len bytes. One piece encodes exactly as
 * sb_io_split_encode() does, so single-file splits are unchanged. */
#define SB_IO_MAX_FILES_PER_SPLIT 256
#define SB_IO_MAX_IMAGES_PER_SPLIT 64
#define SB_IO_SPLITS_ENCODED_MAX                                                                   \
    ((size_t)SB_IO_MAX_FILES_PER_SPLIT * (SB_IO_SPLIT_ENCODED_MAX + 8) + 32)

/* Groups pieces[0..n) (sb_io_plan_splits() order) into splits as above: *first (malloc'd,
 * *ngroups entries) receives each split's first piece; split g is pieces [first[g], first[g+1])
 * (the last ends at n). 0, or -1 + err (out of memory). */
int sb_io_plan_group(const sb_source_spec *src, const sb_io_split *pieces, size_t n, size_t **first,
                     size_t *ngroups, sb_err *err);

/* The encoding of a split of pieces[0..n) (n >= 1), malloc'd; NULL + err. */
char *sb_io_splits_encode(const sb_io_split *pieces, size_t n, sb_err *err);

/* Writes a human-readable label of an encoded split (either form) into buf[0..cap) (always
 * NUL-terminated, truncated to fit): "<file> bytes <start>-<end>" for a range of a file
 * ("<file>" alone when the range is the whole file), "<first file> and N more files" for a
 * split of several, each path cut to a bounded length. Text that does not decode is shown as
 * itself, bounded, with control characters as spaces. Returns buf. For messages: the encoding's
 * tabs and sizes are internals. */
const char *sb_io_split_describe(const char *enc, char *buf, size_t cap);

/* Parses either form into *out (malloc'd array of *n pieces, free with sb_io_splits_free()).
 * -1 + err naming the problem and its byte offset; *out is NULL then. */
int sb_io_splits_decode(const char *s, size_t len, sb_io_split **out, size_t *n, sb_err *err);

#endif
