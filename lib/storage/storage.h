/* storage.h — the work on user storage that `streambatch run` and the operator share:
 * planning the source into the scheduler's splits, and the sink's life cycle (prepare at the
 * start, commit the finished pipeline's parts, abort on failure).
 *
 * Planning reads the source (file:// listing, see io/split.h), groups small whole files into
 * splits of about partitionSize (sb_io_plan_group) and encodes each split as the text a worker
 * decodes; the scheduler gets one sb_storage_split per split, in plan order,
 * so a split's index is stable across controllers for an unchanged source (what resume relies
 * on). Committing names each sink part "part-<id>.<ext>" (ext by the sink format: jsonl, bin,
 * csv, txt), the name workers write, then calls sb_io_sink_commit(), which checks the files,
 * removes orphans of earlier attempts, and writes _manifest.json and _SUCCESS.
 *
 * These functions open user storage, so only workers call them (through jobs.h's storage
 * jobs); the controller process never does (it may have no access to the storage at all).
 *
 * Memory: sb_storage_splits owns its splits (and the encoded strings they point to) until
 * sb_storage_splits_free(); everything else is borrowed for the duration of the call.
 */
#ifndef SB_STORAGE_STORAGE_H
#define SB_STORAGE_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "spec/pipeline.h"

/* A split of the source: the text a worker decodes (lib/io/split.h encodes it) and its size.
 * The scheduler treats the text as opaque. */
typedef struct sb_storage_split {
    const char *split; /* opaque to the scheduler (lib/io encodes it) */
    uint64_t bytes;
} sb_storage_split;

/* What a task attempt wrote: an intermediate partition, or a sink part (a file). */
typedef struct sb_storage_output {
    const char *id;
    uint64_t bytes, rows;
    uint32_t crc32c;   /* sink parts: checksum of the part file */
    const char *order; /* preserveOrder sink parts in a checkpoint or resume: the part's place in
                          input order, "<split>.<seq at op 0>.<seq at op 1>..." (one number per
                          op after the split), so parts carried over by a resume sort among the
                          new ones; NULL elsewhere (then owned like id where id is) */
} sb_storage_output;

/* An errored partition: a task that failed for good (after its retries, or at once on a data
 * error) and whose input was skipped. */
typedef struct sb_storage_errored {
    const char *stage; /* the op's stage names joined with '+' */
    const char *task_id;
    const char *input; /* "split <index> (<sb_io_split_describe>)" (op 0) or "input partition
                          <id>[ (and more)]" */
    const char *error; /* the message of the task's first failed attempt */
} sb_storage_errored;

typedef struct sb_storage_splits {
    sb_storage_split *splits; /* nsplits entries (a non-NULL array even when nsplits is 0) */
    size_t nsplits;
    /* per stage (the pipeline's nstages): a join's right side bytes when it is exchanged, else
     * 0; NULL when no join is (storage/joinplan.h) */
    uint64_t *join_right;
    /* private */
    void *io; /* sb_io_split[npieces]: the files and ranges the splits group */
    size_t npieces;
    char **enc; /* the encoded splits that splits[i].split points to */
} sb_storage_splits;

/* Plans the source of p into *out (zeroed first). 0, or -1 + err ("spec.source: ..." for a
 * source that cannot be planned); *out is empty then and needs no free. */
int sb_storage_splits_make(const sb_pipeline *p, sb_storage_splits *out, sb_err *err);
/* Frees what the plan owns and zeroes it (a zeroed plan is fine). */
void sb_storage_splits_free(sb_storage_splits *pl);

/* Creates the sink directory if missing and removes a stale _SUCCESS/_manifest.json and
 * temporary files; part files of earlier attempts stay (a resumed run keeps its parts). */
int sb_storage_prepare(const sb_pipeline *p, sb_err *err);
/* Writes _manifest.json + _SUCCESS for the given sink parts (removes orphans; see
 * io/sink.h); the manifest's "errored" array lists errored[0..nerrored) (may be NULL/0: the
 * partitions skipped under maxErroredPartitions). 0, or -1 + err (no _SUCCESS then). */
int sb_storage_commit(const sb_pipeline *p, const sb_storage_output *parts, size_t n,
                      const sb_storage_errored *errored, size_t nerrored, sb_err *err);
/* Removes _SUCCESS, _manifest.json and temporary files (a failed run never looks done). */
int sb_storage_abort(const sb_pipeline *p, sb_err *err);

#endif
