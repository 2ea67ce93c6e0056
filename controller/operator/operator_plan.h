/* operator_plan.h — cost-aware placement in the operator: the pure parts (no I/O, no clock) of
 * planning a running Pipeline with lib/plan (plan.h, price.h, fromspec.h).
 *
 * A Pipeline is planned when a stage allows more than one shape (placement) or it has an
 * execution.target. Rates are pipeline output rows/s per worker pod:
 *   - declared (lib/plan/fromspec.h, bench.* costs) at start, when every allowed shape has one;
 *   - measured once every op has completed tasks: per op, its input rows per task-second times
 *     the rows the ops from it to the end make of each row (rows out / rows in), split evenly
 *     over the stages fused into the op, times the slots of the stage's pool (a pod runs that
 *     many tasks at once), from the op's tasks in the pool it runs in now. A shape keeps the
 *     rate measured there once it ran there; a shape with neither rate is measured by moving the
 *     stage there (operator_run.c) and is left out of the plans until then.
 * The plan is re-made when a stage's measured rate differs from the rate the current plan used
 * by more than the threshold (relative), and no sooner than the interval after the last plan.
 *
 * Memory: plain structs; sb_operator_plan_status_json returns a new cJSON the caller frees.
 */
#ifndef SB_CTL_OPERATOR_PLAN_H
#define SB_CTL_OPERATOR_PLAN_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "plan/plan.h"
#include "plan/price.h"
#include "spec/pipeline.h"

#define SB_OPERATOR_REPLAN_THRESHOLD 0.25    /* default --replan-threshold */
#define SB_OPERATOR_REPLAN_INTERVAL_MS 60000 /* default --replan-interval */
#define SB_OPERATOR_PLAN_MIN_TASKS 2         /* completed tasks per op in a measuring window */

/* The controller's planner settings (borrowed by the runs). */
typedef struct sb_operator_plan_config {
    const sb_price_defaults *prices; /* Helm `pricing` (NULL: the built-in table) */
    double replan_threshold;         /* relative drift that re-plans; 0: the default */
    uint64_t replan_interval_ms;     /* at least this long between two plans; 0: the default */
} sb_operator_plan_config;

/* 1 when the operator plans this pipeline (a stage with a placement choice, or a target). */
int sb_operator_plan_wanted(const sb_pipeline *p);

/* Per op figures of the scheduler (sb_sched_group_stats), cumulative since the run started. */
typedef struct sb_operator_plan_op {
    const char *name; /* stage names joined with '+' */
    uint64_t rows_in, rows_out, tasks;
    double task_seconds;
} sb_operator_plan_op;

/* Measured rates of the window between base (the figures when the window opened; NULL: the
 * start) and cur: rates[i] for stage i of p (rows/s out of the pipeline per pod of its pool,
 * slots[i] tasks per pod; an op's task time counts as at least 1 us). Returns 1 when every op
 * completed at least min_tasks tasks with rows in the window and the pipeline put rows out, else
 * 0 (rates untouched). */
int sb_operator_plan_measure(const sb_pipeline *p, const uint32_t *slots,
                             const sb_operator_plan_op *base, const sb_operator_plan_op *cur,
                             size_t nops, uint64_t min_tasks, double *rates);

/* The drift rule. planned[i] / measured[i]: the rate of stage i the plan used and the one now
 * measured (a stage where either is <= 0 is not compared). Returns 1 when the last plan was at
 * least interval_ms ago (now_ms - planned_ms) and some stage's |measured / planned - 1| exceeds
 * threshold; *stage and *drift (may be NULL) receive the stage that drifted most and its
 * relative drift (signed: negative = slower than planned), also when 0 is returned. */
int sb_operator_plan_drifted(const double *planned, const double *measured, size_t n,
                             double threshold, uint64_t now_ms, uint64_t planned_ms,
                             uint64_t interval_ms, size_t *stage, double *drift);

/* A copy of the Pipeline object whose spec.stages[i].placement lists out->stages[i].shape first
 * for every stage of p with a choice (decoded again, each such stage runs on the plan's shape
 * with its shapeArgs: this is the manifest the workers get), or NULL when every stage runs on
 * its planned shape already (or out of memory). */
cJSON *sb_operator_plan_reorder(const cJSON *object, const sb_pipeline *p,
                                const sb_plan_result *out);

/* What a plan was made from, for the status and the events. */
typedef struct sb_operator_plan_view {
    const sb_plan_input *in;          /* stages (names, rates), prices, target */
    const sb_plan_result *out;        /* the plan applied */
    const char *gpu_type;             /* priced GPU type */
    const char *rates_from;           /* "declared" | "measured" */
    const char *planned_at;           /* RFC 3339 */
    uint32_t replans;                 /* plans made after the first */
    int pools_sized;                  /* 1: the pools' max follows the plan (a target is set) */
    const char *note;                 /* a cheaper placement for the next start, or NULL */
    uint32_t moves;                   /* stages moved to another shape while running, in all */
    const char *moved;                /* the latest plan's moves ("infer cpu->gpu"), or NULL */
    const char *cause;                /* why it was planned, when not a drift (capacity), or NULL */
    const sb_plan_capacity *capacity; /* what the plans fit (< 0: unlimited; NULL: all) */
} sb_operator_plan_view;

/* status.plan: {plannedAt, rates, replans, moves, [moved], [cause], [capacity: {cpuCores,
 * memoryGiB, gpus}: the capped ones], feasible, [why], stages: [{name,
 * shape, workers, rowsPerSecondPerWorker, rowsPerSecond, costPerHour}], rowsPerSecond, costPerHour,
 * costPerMillionRows, target: {rowsPerSecond, maxCostPerHour}, prices: {cpuCoreHour,
 * memoryGiBHour, gpuHour, gpuType}, poolsSized, [note]}. NULL when out of memory. */
cJSON *sb_operator_plan_status_json(const sb_operator_plan_view *v);

/* The message of a Planned / Replanned event: "stage=shape:workers ...; 1.2k rows/s for 0.345
 * per hour (0.0789 per million rows), rates declared" (+ the drift that caused a re-plan when
 * drift_stage is not NULL, or the view's cause before it), or "no plan: <why>". */
void sb_operator_plan_event_message(const sb_operator_plan_view *v, const char *drift_stage,
                                    double drift, char *buf, size_t len);

#endif
