/* jobs.h — storage jobs: the work on user storage that is not a task (listing the source
 * into splits, and the sink's prepare/commit/abort), run ON A WORKER, never in the controller.
 *
 * The controller (ctl.c) queues one job at a time and hands it to the next live worker that
 * polls (PollTasksReply.storage_job); the worker runs it with sb_storage_run() and reports with
 * CompleteTask. A PLAN result can be large (up to SB_IO_MAX_SPLITS splits of up to
 * SB_IO_SPLIT_ENCODED_MAX bytes each), so the worker sends it in pieces cut by
 * sb_storage_piece() (each under SB_STORAGE_PIECE_BYTES, far below the gRPC message limit) and
 * the controller appends them in plan order with sb_storage_pieces_add(), which accepts a piece
 * exactly once (a retried report of a piece it already has is a harmless duplicate).
 *
 * This module is pure except sb_storage_run() (which does the storage I/O through engine.h).
 * Memory: an sb_storage_pieces owns its strings and arrays until sb_storage_pieces_free();
 * sb_storage_run() fills an sb_storage_splits the caller frees with sb_storage_splits_free().
 */
#ifndef SB_STORAGE_JOBS_H
#define SB_STORAGE_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "storage/storage.h"
#include "core/err.h"

typedef enum {
    SB_STORAGE_NONE = 0,
    SB_STORAGE_PLAN = 1,    /* the source's splits, in plan order */
    SB_STORAGE_PREPARE = 2, /* sb_storage_prepare */
    SB_STORAGE_COMMIT = 3,  /* sb_storage_commit with the sink parts */
    SB_STORAGE_ABORT = 4,   /* sb_storage_abort */
    /* the checkpoint log beside the sink (ckptjob.h): run with sb_storage_ckpt_* */
    SB_STORAGE_CKPT_PUT = 5,
    SB_STORAGE_CKPT_LOAD = 6,
    SB_STORAGE_CKPT_REMOVE = 7,
} sb_storage_kind;

/* Bytes of split text per PLAN report (the encoded splits plus 16 bytes each for framing). */
#define SB_STORAGE_PIECE_BYTES ((size_t)4 << 20)

/* What a job does, for messages: "planning the source", "preparing the sink", ... */
const char *sb_storage_kind_what(sb_storage_kind k);

/* How many splits, starting at enc[from], go into one piece of at most max_bytes (each split
 * counts strlen + 16): at least 1 while from < n (a single split is far below any limit), 0
 * when from >= n. */
size_t sb_storage_piece(const char *const *enc, size_t n, size_t from, size_t max_bytes);

/* A PLAN result being received. */
typedef struct sb_storage_pieces {
    char **enc;
    uint64_t *bytes;
    size_t n, cap;
    uint64_t *join_right; /* the plan's exchanged joins (sb_storage_splits.join_right); NULL */
    size_t njoin_right;
} sb_storage_pieces;

/* Keeps a copy of the plan's join_right[0..n) (n == 0: none). -1 + err out of memory. */
int sb_storage_pieces_joins(sb_storage_pieces *p, const uint64_t *join_right, size_t n,
                            sb_err *err);

/* Appends the piece enc[0..k) (bytes[0..k)) that starts at plan index `offset`: 1 appended, 0
 * an exact re-send of splits already held (ignored), -1 + err when it does not continue the
 * plan (a gap, or a re-send that overlaps the end), the plan would exceed SB_IO_MAX_SPLITS,
 * a split is empty, or out of memory. Nothing is appended on -1. */
int sb_storage_pieces_add(sb_storage_pieces *p, uint64_t offset, const char *const *enc,
                          const uint64_t *bytes, size_t k, sb_err *err);
/* Frees what the plan owns and zeroes it. */
void sb_storage_pieces_free(sb_storage_pieces *p);

/* Runs a job on this process's storage (a worker). PLAN fills *plan (zeroed first; free with
 * sb_storage_splits_free); COMMIT commits parts[0..nparts). 0, or -1 + err (the callee's
 * message). */
int sb_storage_run(const sb_pipeline *p, sb_storage_kind k, const sb_storage_output *parts,
                   size_t nparts, const sb_storage_errored *errored, size_t nerrored,
                   sb_storage_splits *plan, sb_err *err);

#endif
