/* limit.h — the plan's side of `limit {rows: N}` (issue 41): the stage runs as an exchange of
 * one bucket (exchange.h) whose map half keeps each source task's first N rows and whose reduce
 * half keeps the first N of those in map-task (split) order. For that order to be the source's,
 * the map half must run in op 0 (fused with the source: one task per split, in split order);
 * the scheduler then stops upstream work once the finished prefix of splits holds N rows
 * (sched.c, limit_cut).
 *
 * Memory: nothing is kept.
 */
#ifndef SB_SCHED_LIMIT_H
#define SB_SCHED_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "spec/pipeline.h"

/* *rows = the rows of the limit stage whose map half op 0 runs (op0_last: that op's last stage,
 * (size_t)-1 when op 0 runs no map half), else 0. -1 + err when a limit stage's map half runs
 * in a later op (after a stage in another pool, or unfused in staged mode), where its tasks'
 * order is not the source's. */
int sb_exchange_limit_setup(const sb_stage_spec *const *stages, size_t nstages, size_t op0_last,
                            uint64_t *rows, sb_err *err);

#endif
