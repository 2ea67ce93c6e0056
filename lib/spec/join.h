/* join.h — the join op's spec side (issue 41): what validate checks of its args beyond their
 * types (the right source, the key fields, broadcastBelow against the memory budget, a typed
 * source), and the two things the plan and the worker read from its args JSON: the right side as
 * a source spec and the broadcast threshold. Called by pipeline.c's stage and spec checks,
 * lib/storage/joinplan.c (the size check at plan), controller/sched (through the plan's sizes)
 * and worker/ops/exchange (join.c, exchange.c).
 *
 * A right side below broadcastBelow is broadcast (the join op loads it whole); at or above it the
 * join is exchanged by key (controller/sched/exchange.h).
 *
 * Memory: sb_spec_join_right's spec owns its strings (sb_spec_join_right_free); nothing else
 * allocates.
 */
#ifndef SB_SPEC_JOIN_H
#define SB_SPEC_JOIN_H

#include <stdint.h>

#include "core/err.h"
#include "doc/doc.h"
#include "spec/diag.h"
#include "spec/pipeline.h"

#define SB_JOIN_BROADCAST_DEFAULT ((int64_t)64 << 20) /* broadcastBelow when left out */

/* Checks a join stage's args (a map or NULL); path names the stage. */
void sb_spec_join_args_check(const sb_node *args, const sb_node *stage, const char *path,
                             sb_diags *d);

/* Checks join stage i (stage: its node; op_path "<...>.stages[i].op" and line/col: where its op
 * is) in the pipeline: records only (a parquet source is refused), broadcastBelow at most a
 * quarter of execution.memoryBudget. Called from allops.c's pass over the stages. */
void sb_spec_join_stage_check(const sb_pipeline_spec *sp, size_t i, const sb_node *stage,
                              const char *op_path, int line, int col, sb_diags *d);

/* broadcastBelow of a join stage's args JSON in bytes (the default when left out); 0 when it is
 * not a size (validate refused such args). */
int64_t sb_spec_join_broadcast_below(const char *args_json);

/* The right side of a join stage's args JSON as a source: uri, format (jsonl when left out),
 * args_json (its args, or NULL), partition_size the default. -1 + err when args.right is not
 * {uri, format: jsonl|csv}. */
int sb_spec_join_right(const char *args_json, sb_source_spec *out, sb_err *err);
void sb_spec_join_right_free(sb_source_spec *s);

#endif
