/* cmetrics.h — the Prometheus figures of the pipelines a controller runs (docs/metrics.md,
 * "Controller figures"), made from controller snapshots (sb_ctl_snapshot): per stage the
 * partitions total/committed/running/queued, recovered and errored partitions, task re-runs by
 * cause, rows and bytes out, queued input bytes and backpressure time; per pipeline the memory
 * budget and its use; per pool the workers desired/ready/pending.
 *
 * With worker families on (`streambatch run --metrics-addr`: one endpoint for a local run) it
 * also makes the worker families of docs/metrics.md, summed per pool: per-stage task counters,
 * rows, bytes and durations from the scheduler's accounting of attempts and completions, and
 * the store, spill, fetch, accelerator and process figures from the workers' heartbeats.
 *
 * Use: register on a registry once (sb_cmetrics_new), then in a collect callback (metrics.h)
 * call sb_cmetrics_clear() and sb_cmetrics_add() for every pipeline the process runs now (the
 * operator: only while it leads). Counters come from the snapshot, so they restart from 0 with a
 * new leader or a new run (Prometheus' rate() handles resets).
 *
 * Memory: sb_cmetrics borrows the registry (it must outlive it); free with sb_cmetrics_free().
 */
#ifndef SB_CONTROLLER_METRICS_PIPELINE_H
#define SB_CONTROLLER_METRICS_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "controller/ctl/ctl.h"
#include "core/err.h"
#include "metrics/metrics.h"

typedef struct sb_cmetrics sb_cmetrics;

/* Workers of one pool as the backend sees them. */
typedef struct sb_cmetrics_pool {
    const char *pool;
    uint64_t desired, ready, pending;
} sb_cmetrics_pool;

/* NULL + err when a family cannot be registered (a name already taken, out of memory). */
sb_cmetrics *sb_cmetrics_new(sb_metrics *reg, int worker_families, sb_err *err);
void sb_cmetrics_free(sb_cmetrics *m);

/* Drops every pipeline series (the start of a collect). */
void sb_cmetrics_clear(sb_cmetrics *m);

/* Adds the series of one pipeline from its snapshot and its pools (npools may be 0). */
void sb_cmetrics_add(sb_cmetrics *m, const char *namespace_, const char *pipeline,
                     const sb_ctl_snapshot *s, const sb_cmetrics_pool *pools, size_t npools);

#endif
