/* sink.h — the local (file://) sink: one part file per partition, then a manifest and a
 * _SUCCESS marker when the pipeline commits.
 *
 * Layout of a sink directory:
 *   part-<partition id>.<ext>   one per partition; ext is jsonl, txt or bin by format. Named by
 *                               the partition id, so re-running a task overwrites its output
 *                               instead of duplicating it. In append mode
 *                               "part-<run tag>-<partition id>.<ext>" (sinkmode.h).
 *   _manifest.json              written by commit: every part (name, rows, bytes, crc32c) and
 *                               the totals.
 *   _SUCCESS                    written by commit after the manifest; only a fully committed
 *                               pipeline has one.
 *   .sbatt-<attempt>-part-...   a task attempt's staged part (sb_io_sink_write_staged), hidden
 *                               from readers until published under the part's name.
 *   .sbtmp-*                    files being written (temporary names in the same directory,
 *                               renamed into place, not synced); prepare, abort and commit
 *                               remove leftovers: those no live writer holds (file.c).
 *                               Readers skip them (and _*) like any source listing.
 *
 * Record encoding: the partition's "record" column (or its only binary/utf8 column) is written
 * as one line per record ending in "\n" for jsonl and text (a record containing '\n' is an
 * error, as is one that is not UTF-8), and as the records' bytes back to back for binary (each
 * exactly args.recordSize bytes when the sink sets it).
 *
 * Life cycle (the controller or the CLI drives it), as in the default mode, overwrite; sink.mode
 * append, errorIfExists and ignore change prepare, abort and commit as sinkmode.h says:
 *   sb_io_sink_prepare()     at the start: creates the directory (and parents) if missing,
 *                            removes a stale _SUCCESS and _manifest.json and leftover temporary
 *                            files. Part files of earlier attempts are kept (a resumed pipeline
 *                            does not redo committed partitions).
 *   sb_io_sink_write_part()  by any worker, concurrently, one call per output partition.
 *   sb_io_sink_write_staged() the same under the attempt's staged name (what workers do: two
 *                            attempts of one task, a speculative copy beside its original, may
 *                            run at once); then sb_io_sink_publish_staged() once the controller
 *                            accepted that attempt's report (it was first), or
 *                            sb_io_sink_discard_staged() when it refused it (it was late).
 *   sb_io_sink_commit()      once, with the parts of the finished pipeline: checks each part
 *                            file exists with the reported size, deletes part files of this
 *                            format that are not in the list (output of attempts the list no
 *                            longer includes), publishes a listed part still staged (its
 *                            worker had not published it yet, or died after its report was
 *                            accepted: the staged file with the listed size and CRC-32C), removes
 *                            the other staged files, writes _manifest.json atomically, syncs the
 *                            directory (every part and the manifest durable: one syncfs on
 *                            file sinks, nothing on S3), then writes and syncs _SUCCESS.
 *   sb_io_sink_abort()       on failure or cancel: removes _SUCCESS, _manifest.json and
 *                            temporary files (a failed or interrupted pipeline never leaves
 *                            _SUCCESS).
 *
 * Memory: the caller owns the spec, the blob and the info structs; nothing returned needs
 * freeing.
 */
#ifndef SB_IO_SINK_H
#define SB_IO_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "spec/pipeline.h"

#define SB_IO_PART_NAME_MAX 256 /* bytes of a part file name, NUL included */
#define SB_IO_PART_ID_MAX 200   /* bytes of a partition id */
#define SB_IO_SUCCESS_NAME "_SUCCESS"
#define SB_IO_MANIFEST_NAME "_manifest.json"

/* What was written for one partition. */
typedef struct sb_io_part_info {
    char name[SB_IO_PART_NAME_MAX]; /* file name inside the sink directory */
    uint64_t rows;
    uint64_t bytes;  /* size of the part file */
    uint32_t crc32c; /* CRC-32C (sb_crc32c) of the part file's bytes */
} sb_io_part_info;

/* Creates the sink directory if missing and removes a stale _SUCCESS, _manifest.json and
 * leftover temporary files. 0, or -1 + err. */
int sb_io_sink_prepare(const sb_sink_spec *sink, sb_err *err);

/* Whether the run infers a records schema for its parquet sink (lib/parquet/records.h): the
 * sink has no args.schema, and args.inferSchema is true, or absent with a source whose
 * partitions are JSON records (jsonl, csv). Bad args: 0 (prepare refuses them). */
int sb_io_sink_infers_schema(const sb_pipeline *p);

/* Writes the records of blob[0..len) (a partition blob, fully validated here) as the part file
 * of `partition_id` (1..SB_IO_PART_ID_MAX bytes of [A-Za-z0-9._-], not starting with '.'),
 * replacing an earlier one atomically. The directory is created if missing. `info` (may be
 * NULL) receives the file name, rows, bytes and CRC. 0, or -1 + err; on failure no temporary
 * file is left behind and an existing part file is unchanged. */
int sb_io_sink_write_part(const sb_sink_spec *sink, const char *partition_id, const void *blob,
                          size_t len, sb_io_part_info *info, sb_err *err);

/* sb_io_sink_write_part() under the staged name of attempt `attempt` (".sbatt-<attempt>-" and
 * the part's name), which readers skip; info names the part's final name. */
int sb_io_sink_write_staged(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                            const void *blob, size_t len, sb_io_part_info *info, sb_err *err);
/* Publishes attempt's staged part under the part's name (file: a rename; S3: a server-side
 * CopyObject, then the staged object deleted), replacing a file there. 0, 1 when the staged part is
 * absent (the commit published it already, or it was never written), -1 + err. */
int sb_io_sink_publish_staged(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                              sb_err *err);
/* Removes attempt's staged part (an absent one is fine). 0, or -1 + err. */
int sb_io_sink_discard_staged(const sb_sink_spec *sink, const char *partition_id, uint32_t attempt,
                              sb_err *err);

/* An errored partition whose records are missing from the output (listed in the manifest's
 * "errored" array as {stage, split, error}). */
typedef struct sb_io_errored {
    const char *stage, *split, *error;
} sb_io_errored;

/* Commits the output: parts[0..n) are the partitions of the finished pipeline, in output
 * order. Duplicate names are allowed when their info is identical (counted once).
 * errored[0..nerrored) (may be NULL/0) are the partitions skipped under maxErroredPartitions.
 * 0, or -1 + err (no _SUCCESS is written then). */
int sb_io_sink_commit(const sb_sink_spec *sink, const sb_io_part_info *parts, size_t n,
                      const sb_io_errored *errored, size_t nerrored, sb_err *err);

/* The part file name of `partition_id` in this sink (its format's extension, append mode's tag)
 * into out. 0, or -1 + err (an invalid id, a name too long). */
int sb_io_sink_part_name(const sb_sink_spec *sink, const char *partition_id,
                         char out[SB_IO_PART_NAME_MAX], sb_err *err);

/* Append mode's run tag (sinkmode.h), 12 lowercase hex digits: random for a new local run
 * (getrandom), or taken from a Kubernetes uid (the Pipeline's: the same for its resumes and a
 * new leader's). 0, or -1 + err. */
int sb_io_sink_tag_new(char out[SB_SINK_PART_TAG_MAX], sb_err *err);
int sb_io_sink_tag_from_uid(const char *uid, char out[SB_SINK_PART_TAG_MAX], sb_err *err);
/* A tag received from elsewhere (the controller, a checkpoint): in append mode 1 to 16
 * lowercase hex digits, in the other modes empty or NULL. 0, or -1 + err. */
int sb_io_sink_tag_check(const char *tag, sb_sink_mode mode, sb_err *err);

/* A file:// sink must not be the directory a file:// source lists, also when a symbolic link
 * leads there (validate compares the URIs as written; this compares the real paths where the
 * files are, on a worker, before any task). 0, or -1 + err (permanent). */
int sb_io_sink_check_not_source(const sb_sink_spec *sink, const sb_source_spec *src, sb_err *err);

/* Does the sink hold _SUCCESS (a committed run)? 0 with *yes set, or -1 + err. */
int sb_io_sink_committed(const sb_sink_spec *sink, int *yes, sb_err *err);

/* Checks the part file of `partition_id` against what a checkpoint recorded for it (bytes and
 * CRC-32C of the file): 1 when it matches, 0 when it is missing, unreadable or differs (`why`,
 * len bytes, says how), -1 + err for an invalid sink spec or id. Parts are written without a
 * sync (only sb_io_sink_commit() makes them durable), so after a machine crash a part a
 * checkpoint recorded may be gone or cut short: a resume checks each part it carries over.
 * Reads the whole file on file sinks; on other backends (S3) a written part is durable and
 * this returns 1 without a request. */
int sb_io_sink_verify_part(const sb_sink_spec *sink, const char *partition_id, uint64_t bytes,
                           uint32_t crc32c, char *why, size_t len, sb_err *err);

/* Removes _SUCCESS, _manifest.json and temporary files; a missing directory is fine. 0, or -1
 * + err naming the first file that could not be removed. */
int sb_io_sink_abort(const sb_sink_spec *sink, sb_err *err);

#endif
