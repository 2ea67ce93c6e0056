/* wmetrics.h — a worker's Prometheus figures (docs/metrics.md, "Worker figures"): per-stage task
 * counters and durations updated by the runtime as tasks start and end, and store, spill, fetch,
 * accelerator and process figures sampled at every scrape, with the CUDA devices tensor.mlp found
 * (worker/ops/tensor/mlp_cuda.h; a figure of the worker's own endpoint only). Served by the worker
 * itself when it has a metrics address (lib/metrics/serve.h); the cumulative figures also travel in
 * heartbeats so that `streambatch run` can sum them per pool.
 *
 * Labels: namespace, pipeline (from the pipeline the worker registered for; empty before), pool;
 * `stage` on the per-stage families (a task's stage names joined with '+').
 *
 * Thread safety: every function may be called from any thread.
 * Memory: sb_wmetrics owns its registry and copies of the label values; free with
 * sb_wmetrics_free() after stopping any server that borrows the registry.
 */
#ifndef SB_WORKER_METRICS_H
#define SB_WORKER_METRICS_H

#include <stdint.h>

#include "core/err.h"
#include "metrics/metrics.h"

typedef struct sb_wmetrics sb_wmetrics;

/* What the runtime reports at each scrape (sample callback). */
typedef struct sb_wmetrics_sample {
    uint64_t store_memory_bytes, store_spilled_bytes; /* now */
    uint64_t spill_bytes_total, fetch_bytes_total;    /* since start */
    uint64_t store_outside_bytes_total; /* since start: local inputs read outside the budget */
} sb_wmetrics_sample;
typedef void (*sb_wmetrics_sample_fn)(void *ud, sb_wmetrics_sample *out);

/* NULL + err on out of memory. sample (may be NULL) fills the sampled figures at scrape time. */
sb_wmetrics *sb_wmetrics_new(const char *pool, sb_wmetrics_sample_fn sample, void *ud, sb_err *err);
void sb_wmetrics_free(sb_wmetrics *m);
sb_metrics *sb_wmetrics_registry(sb_wmetrics *m);

/* The pipeline the worker serves (label values of later updates). */
void sb_wmetrics_set_pipeline(sb_wmetrics *m, const char *namespace_, const char *pipeline);

void sb_wmetrics_task_started(sb_wmetrics *m, const char *stage);
/* ok: finished successfully (its duration is observed); else failed. */
void sb_wmetrics_task_ended(sb_wmetrics *m, const char *stage, int ok, double seconds,
                            uint64_t rows_in, uint64_t bytes_in, uint64_t rows_out,
                            uint64_t bytes_out);
void sb_wmetrics_fetch_error(sb_wmetrics *m);
void sb_wmetrics_accel_busy(sb_wmetrics *m, double seconds);

/* Cumulative figures for the heartbeat. */
uint64_t sb_wmetrics_fetch_errors(sb_wmetrics *m);
double sb_wmetrics_accel_seconds(sb_wmetrics *m);
/* Process CPU seconds (user + system) and resident bytes (with exec's child processes), read
 * now. */
void sb_wmetrics_process(double *cpu_seconds, uint64_t *rss_bytes);

#endif
