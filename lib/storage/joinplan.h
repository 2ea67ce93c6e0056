/* joinplan.h — the plan's sizing of join stages (issue 41): each join's right side is listed
 * (lib/io/split.h) and its bytes compared with the stage's broadcastBelow (lib/spec/join.h). A
 * right side below the threshold is broadcast (the join op loads it whole in every task); one at
 * or above it is exchanged by key, which the scheduler plans from the bytes reported here
 * (controller/sched/exchange.h). Called by sb_storage_splits_make (storage.c), so local runs and
 * the operator's planning job decide alike; the plan's StorageResult carries the bytes to the
 * controller.
 *
 * Memory: *right is malloc'd (the caller frees it).
 */
#ifndef SB_STORAGE_JOINPLAN_H
#define SB_STORAGE_JOINPLAN_H

#include <stdint.h>

#include "core/err.h"
#include "spec/pipeline.h"

/* *right: per stage of p (p->spec.nstages entries), a join's right side bytes when the join is
 * exchanged (at or above its broadcastBelow), else 0; NULL when no join is exchanged. 0, or -1 +
 * err ("spec.stages[i]: ...") for a right side that cannot be listed. */
int sb_storage_join_plan(const sb_pipeline *p, uint64_t **right, sb_err *err);

#endif
