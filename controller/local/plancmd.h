/* plancmd.h — `streambatch plan FILE [--profile] [-o json]`: the placement planner
 * (lib/plan/plan.h) on a Pipeline manifest. Prints, per stage, the chosen shape and workers,
 * predicted rows/s, cost per hour and per million rows, and the same for the baselines all-cpu,
 * all-gpu and greedy.
 *
 * Rates (rows/s out of the pipeline per worker, one worker being one task slot with the stage's
 * resources) come from:
 *   - without --profile: the declared costs of bench.spin / bench.sleep stages (msPerRecord, per
 *     shape with shapeArgs, and the expand of later stages); any other stage makes the command
 *     name it and ask for --profile (exit 2);
 *   - with --profile: local runs of the pipeline (`streambatch run`'s engine, in a child process,
 *     mode staged so that no stages are fused and each is timed alone) on the first objects of
 *     the source (about 8 partitions' worth), once with every stage on its cpu shape where it
 *     has one and, when a stage has a choice, once on gpu; the gpu pool runs
 *     streambatch-worker-gpu when it is next to this binary. The output says when the gpu
 *     shape was measured without a GPU (the CPU fallback). The sink is a temporary directory.
 *
 * Exit codes: 0 a plan was found, 1 no plan meets the target (the reason is printed) or
 * profiling failed, 2 usage, invalid spec or missing rates.
 */
#ifndef SB_CTL_PLANCMD_H
#define SB_CTL_PLANCMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sb_local_plan_opts {
    const char *file;
    int profile;
    int json;                      /* -o json */
    double cpus, gpus, memory_gib; /* capacity; < 0 = unlimited */
    int profile_cpus;              /* CPU workers of the profiling runs; 0 = online CPUs */
    int64_t profile_bytes;         /* source bytes to profile; 0 = 8 x partitionSize */
    const char *worker_bin;        /* every pool's worker (tests); NULL = next to the binary */
} sb_local_plan_opts;

int sb_local_plan_main(const sb_local_plan_opts *o);

/* For `streambatch run --plan`: the plan of `file` from declared rates (no profiling), as --set
 * overrides that list each multi-shape stage's chosen shape first
 * ("spec.stages[1].placement=[gpu, cpu]"), written into sets[0..max) (each up to
 * SB_PLAN_SET_MAX bytes); *n receives the count, chosen[i] (SB_PLAN_MAX_STAGES entries, may be
 * NULL) the shape (sb_shape) of stage i, -1 for stages without a choice. Returns 0, or -1 with msg
 * saying why (missing rates: use `streambatch plan --profile` and reorder placement; no plan meets
 * the target). */
#define SB_PLAN_SET_MAX 96
int sb_plan_placement_sets(const char *file, char (*sets)[SB_PLAN_SET_MAX], size_t max, size_t *n,
                           int *chosen, char *msg, size_t msglen);

/* `streambatch run`'s line per stage that allows more than one shape: which one it runs on
 * (chosen[i] from sb_plan_placement_sets, or with chosen NULL placement[0], "the first listed").
 * Nothing for an invalid file (sb_run reports it). */
void sb_local_plan_notice(const char *file, FILE *out, const int *chosen);

#endif
