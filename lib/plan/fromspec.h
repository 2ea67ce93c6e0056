/* fromspec.h — the planner's input (plan.h) from a decoded Pipeline: per stage its allowed shapes
 * (placement), workers bounds and the resources of one worker of each shape, and the rates the
 * spec declares (bench.spin / bench.sleep msPerRecord, per shape with shapeArgs, times the expand
 * of later stages). Shared by `streambatch plan` (controller/local/plancmd.c) and the operator
 * (controller/operator/operator_plan.h).
 *
 * Memory: stage names point into the pipeline, which must outlive the stages' use.
 */
#ifndef SB_PLAN_FROMSPEC_H
#define SB_PLAN_FROMSPEC_H

#include "plan/plan.h"
#include "spec/pipeline.h"

/* Fills st[0..p->spec.nstages) (at most SB_PLAN_MAX_STAGES; the caller checks) with names,
 * bounds, allowed shapes and resources; every rate 0. */
void sb_plan_stages_from_spec(const sb_pipeline *p, sb_plan_stage_in *st);

/* The declared rates into st[i].shapes[k].rate for every allowed shape that has one. Returns the
 * number of stages with an allowed shape that has none (0: all declared); why (may be NULL;
 * SB_PLAN_MAX_STAGES entries) receives, per stage and shape, why it has none. */
#define SB_PLAN_WHY_MAX 160
int sb_plan_declared_rates(const sb_pipeline *p, sb_plan_stage_in *st,
                           char (*why)[SB_SHAPE_COUNT][SB_PLAN_WHY_MAX]);

/* The stage one part of an op's name names (an op's name is its stages' joined with '+'): the
 * stage itself, or an all-to-all stage's map half "<stage>.map" or a sort's middle op
 * "<stage>.range" (*half set to 1; else 0). -1 when none. Both the profile's and the operator's
 * measured rates read run summaries by it. */
long sb_plan_op_stage(const sb_pipeline *p, const char *part, size_t len, int *half);

#endif
