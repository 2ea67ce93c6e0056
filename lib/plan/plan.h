/* plan.h — cost-aware placement (HeterPS in the streaming-batch model): which resource shape
 * (cpu or gpu) runs each stage and how many workers, so that the pipeline meets a throughput
 * target at the lowest cost per row.
 *
 * Model. Every stage has, per allowed shape, a measured or declared rate: the rows per second
 * *out of the pipeline* (into the sink) that one worker of that shape sustains for that stage
 * (a stage's own rows/s times the rows the stages after it make of each of its rows). A stage
 * with w workers sustains w * rate; the pipeline sustains the minimum over its stages. A worker
 * costs its resources (CPU cores, GiB of memory, GPUs) at the prices per hour. Dedicated workers
 * per stage are assumed: the engine's pools share slots between the stages of a pool, which can
 * only need fewer workers than the plan says.
 *
 * Search (exact). Over every placement (a shape per stage: at most SB_PLAN_MAX_CHOICES stages
 * may allow more than one shape, so at most 2^8 placements) and every achievable throughput X
 * (the pipeline's throughput is always w_b * rate_b for some stage b, so these breakpoints are
 * the only candidates), each stage gets the fewest workers that sustain X within
 * [max(min, 1), max]; the plan kept is the one with the lowest cost per row among those with
 * X >= target, cost per hour <= the ceiling, and the totals within the capacity. Ties: lower
 * cost per hour, then fewer GPUs, then the placement that is earlier in cpu-before-gpu order.
 *
 * No I/O, no allocation, no globals: plain structs in, plain structs out.
 */
#ifndef SB_PLAN_PLAN_H
#define SB_PLAN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum { SB_SHAPE_CPU = 0, SB_SHAPE_GPU = 1 } sb_shape;
#define SB_SHAPE_COUNT 2
extern const char *const sb_shape_names[]; /* indexed by sb_shape, NULL-terminated */

#define SB_PLAN_MAX_STAGES 64 /* as spec.stages */
#define SB_PLAN_MAX_CHOICES 8 /* stages with more than one allowed shape */
#define SB_PLAN_MAX_WORKERS 100000

/* Prices per hour. gpu_hour is the price of one GPU of the type the GPU workers run on. */
typedef struct sb_plan_prices {
    double cpu_core_hour;
    double mem_gib_hour;
    double gpu_hour;
} sb_plan_prices;

typedef struct sb_plan_shape_in {
    bool allowed;
    double rate;      /* pipeline output rows/s per worker; must be > 0 when allowed */
    double cpu_cores; /* resources of one worker of this shape */
    double mem_gib;
    double gpus;
} sb_plan_shape_in;

typedef struct sb_plan_stage_in {
    const char *name; /* not copied: must outlive the result's use of it */
    sb_plan_shape_in shapes[SB_SHAPE_COUNT];
    int64_t min_workers, max_workers; /* workers.min / workers.max */
} sb_plan_stage_in;

/* What the plan must fit. A negative value means unlimited. */
typedef struct sb_plan_capacity {
    double cpu_cores, mem_gib, gpus;
} sb_plan_capacity;

typedef struct sb_plan_target {
    double rows_per_second;   /* 0: none */
    double deadline_seconds;  /* 0: none; with total_rows gives a rows/s target */
    double total_rows;        /* rows out of the pipeline, for the deadline; 0 = unknown */
    double max_cost_per_hour; /* the budget ceiling; 0: none */
} sb_plan_target;

typedef struct sb_plan_input {
    const sb_plan_stage_in *stages;
    size_t nstages;
    sb_plan_prices prices;
    sb_plan_capacity capacity;
    sb_plan_target target;
} sb_plan_input;

typedef struct sb_plan_stage_out {
    sb_shape shape;
    int64_t workers;
    double rows_per_second; /* what this stage's workers sustain: workers * rate */
    double cost_per_hour;
} sb_plan_stage_out;

typedef struct sb_plan_result {
    bool feasible;
    char why[SB_ERR_MAX]; /* when not feasible: what cannot be met, naming stages and figures */
    size_t nstages;
    sb_plan_stage_out stages[SB_PLAN_MAX_STAGES];
    double rows_per_second; /* predicted: the slowest stage */
    double cost_per_hour;
    double cost_per_million_rows;
    double cpu_cores, mem_gib, gpus; /* totals of the plan */
} sb_plan_result;

/* The target in rows/s the input asks for (the larger of rows_per_second and total_rows /
 * deadline_seconds), 0 when none. */
double sb_plan_target_rate(const sb_plan_input *in);

/* Checks the input (stage count, bounds, rates and resources of allowed shapes, prices). -1 + err
 * naming the stage and the field when something is wrong (a caller's error, not infeasibility). */
int sb_plan_check(const sb_plan_input *in, sb_err *err);

/* The optimal plan (see above) into *out. Returns 0 when the input is usable (out->feasible says
 * whether a plan exists; out->why says why not), -1 + err when sb_plan_check() fails. */
int sb_plan_solve(const sb_plan_input *in, sb_plan_result *out, sb_err *err);

/* The same with the placement fixed: shapes[i] for stage i (pool sizes are still optimised).
 * A stage that does not allow its shape makes the result infeasible, naming it. */
int sb_plan_fixed(const sb_plan_input *in, const sb_shape *shapes, sb_plan_result *out,
                  sb_err *err);

/* Baselines: every stage on cpu, every stage on gpu, and greedy (each stage on its allowed shape
 * with the highest rate per worker; cpu on a tie). */
typedef enum { SB_BASE_ALL_CPU, SB_BASE_ALL_GPU, SB_BASE_GREEDY } sb_plan_baseline;
#define SB_BASE_COUNT 3
extern const char *const sb_plan_baseline_names[]; /* "all-cpu", "all-gpu", "greedy", NULL */
int sb_plan_baseline_solve(const sb_plan_input *in, sb_plan_baseline b, sb_plan_result *out,
                           sb_err *err);

#endif
