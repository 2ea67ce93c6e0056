/* engine.h — the pieces of running a pipeline that `streambatch run` and the operator share:
 * planning the source into the scheduler's splits, and the sink's life cycle (prepare at the
 * start, commit the finished pipeline's parts, abort on failure).
 *
 * Planning reads the source (file:// listing, see io/split.h), groups small whole files into
 * splits of about partitionSize (sb_io_plan_group) and encodes each split as the text a worker
 * decodes; the scheduler gets one sb_sched_split per split, in plan order,
 * so a split's index is stable across controllers for an unchanged source (what resume relies
 * on). Committing names each sink part "part-<id>.<ext>" (ext by the sink format: jsonl, bin,
 * csv, txt), the name workers write, then calls sb_io_sink_commit(), which checks the files,
 * removes orphans of earlier attempts, and writes _manifest.json and _SUCCESS.
 *
 * These functions open user storage, so only workers call them (through storage.h's storage
 * jobs); the controller process never does (it may have no access to the storage at all).
 *
 * Memory: sb_engine_plan owns its splits (and the encoded strings they point to) until
 * sb_engine_plan_free(); everything else is borrowed for the duration of the call.
 */
#ifndef SB_CTL_ENGINE_H
#define SB_CTL_ENGINE_H

#include <stddef.h>

#include "controller/sched/sched.h"
#include "core/err.h"
#include "spec/pipeline.h"

typedef struct sb_engine_plan {
    sb_sched_split *splits; /* nsplits entries (a non-NULL array even when nsplits is 0) */
    size_t nsplits;
    /* private */
    void *io; /* sb_io_split[npieces]: the files and ranges the splits group */
    size_t npieces;
    char **enc; /* the encoded splits that splits[i].split points to */
} sb_engine_plan;

/* Plans the source of p into *out (zeroed first). 0, or -1 + err ("spec.source: ..." for a
 * source that cannot be planned); *out is empty then and needs no free. */
int sb_engine_plan_make(const sb_pipeline *p, sb_engine_plan *out, sb_err *err);
/* Frees what the plan owns and zeroes it (a zeroed plan is fine). */
void sb_engine_plan_free(sb_engine_plan *pl);

/* Creates the sink directory if missing and removes a stale _SUCCESS/_manifest.json and
 * temporary files; part files of earlier attempts stay (a resumed run keeps its parts). */
int sb_engine_prepare(const sb_pipeline *p, sb_err *err);
/* Writes _manifest.json + _SUCCESS for the given sink parts (removes orphans; see
 * io/sink.h); the manifest's "errored" array lists errored[0..nerrored) (may be NULL/0: the
 * partitions skipped under maxErroredPartitions). 0, or -1 + err (no _SUCCESS then). */
int sb_engine_commit(const sb_pipeline *p, const sb_sched_output *parts, size_t n,
                     const sb_sched_errored *errored, size_t nerrored, sb_err *err);
/* Removes _SUCCESS, _manifest.json and temporary files (a failed run never looks done). */
int sb_engine_abort(const sb_pipeline *p, sb_err *err);

#endif
