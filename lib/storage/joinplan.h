/* joinplan.h — the plan's check of join stages (issue 41): each join's right side is listed
 * (lib/io/split.h) and its bytes compared with the stage's broadcastBelow (lib/spec/join.h).
 * This build runs the broadcast join only, so a right side at or above the threshold is refused
 * here, before any task runs, with a message naming both sizes. Called by sb_storage_splits_make
 * (storage.c), so local runs and the operator's planning job refuse alike.
 *
 * Memory: nothing is kept.
 */
#ifndef SB_STORAGE_JOINPLAN_H
#define SB_STORAGE_JOINPLAN_H

#include "core/err.h"
#include "spec/pipeline.h"

/* 0 when every join stage's right side is below its broadcastBelow; -1 + err ("spec.stages[i]:
 * ...") for a right side at or above it, or one that cannot be listed. */
int sb_storage_join_check(const sb_pipeline *p, sb_err *err);

#endif
