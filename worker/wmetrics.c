/* wmetrics.c — a worker's Prometheus figures (see wmetrics.h): per-stage task counters and
 * durations updated by the runtime as tasks start and end, and store, spill, fetch, accelerator
 * and process figures sampled through a callback at every scrape. Owns the worker's registry. */

#include "worker/wmetrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/families.h"
#include "worker/ops/ops.h"
#include "worker/ops/tensor/mlp_cuda.h"

struct sb_wmetrics {
    sb_metrics *reg;
    sb_metric *f[SB_WF_COUNT];
    sb_metric *cuda;    /* this worker's own figure: not summed per pool by `streambatch run` */
    sb_metric *outside; /* the same: bytes of local inputs read outside the store's budget */
    pthread_mutex_t mu; /* label values, counters below */
    char ns[256], pipeline[256], pool[64];
    uint64_t fetch_errors;
    double accel_seconds;
    sb_wmetrics_sample_fn sample;
    void *ud;
};

void sb_wmetrics_process(double *cpu_seconds, uint64_t *rss_bytes)
{
    sb_metrics_process_read(cpu_seconds, rss_bytes);
    *rss_bytes += sb_op_children_rss(); /* exec's processes are the worker's memory */
}

/* The constant labels (and stage) of this worker, under m->mu. */
static void labels(sb_wmetrics *m, const char *stage, char *ns, char *pl, char *pool)
{
    pthread_mutex_lock(&m->mu);
    memcpy(ns, m->ns, sizeof m->ns);
    memcpy(pl, m->pipeline, sizeof m->pipeline);
    memcpy(pool, m->pool, sizeof m->pool);
    pthread_mutex_unlock(&m->mu);
    (void)stage;
}

static void collect(void *ud, sb_metrics *reg)
{
    (void)reg;
    sb_wmetrics *m = ud;
    char ns[256], pl[256], pool[64];
    labels(m, NULL, ns, pl, pool);
    const char *v[] = {ns, pl, pool};
    sb_wmetrics_sample s = {0};
    if (m->sample != NULL)
        m->sample(m->ud, &s);
    double cpu;
    uint64_t rss;
    sb_wmetrics_process(&cpu, &rss);
    pthread_mutex_lock(&m->mu);
    double errors = (double)m->fetch_errors, accel = m->accel_seconds;
    pthread_mutex_unlock(&m->mu);
    /* one series per family: the pipeline label may have changed since the last scrape */
    for (int i = SB_WF_STORE_MEMORY; i < SB_WF_COUNT; i++)
        sb_metric_clear(m->f[i]);
    sb_metric_set(m->f[SB_WF_STORE_MEMORY], v, (double)s.store_memory_bytes);
    sb_metric_set(m->f[SB_WF_STORE_SPILLED], v, (double)s.store_spilled_bytes);
    sb_metric_set(m->f[SB_WF_SPILL_TOTAL], v, (double)s.spill_bytes_total);
    sb_metric_set(m->f[SB_WF_FETCH_BYTES], v, (double)s.fetch_bytes_total);
    sb_metric_set(m->f[SB_WF_FETCH_ERRORS], v, errors);
    sb_metric_set(m->f[SB_WF_ACCELERATOR], v, accel);
    sb_metric_set(m->f[SB_WF_CPU], v, cpu);
    sb_metric_set(m->f[SB_WF_RSS], v, (double)rss);
    sb_metric_set(m->f[SB_WF_WORKERS], v, 1);
    sb_metric_clear(m->outside);
    sb_metric_set(m->outside, v, (double)s.store_outside_bytes_total);
    /* present once a tensor.mlp stage asked for CUDA devices (0: none usable) */
    int cuda = sb_op_mlp_cuda_devices();
    sb_metric_clear(m->cuda);
    if (cuda >= 0)
        sb_metric_set(m->cuda, v, cuda);
}

sb_wmetrics *sb_wmetrics_new(const char *pool, sb_wmetrics_sample_fn sample, void *ud, sb_err *err)
{
    sb_wmetrics *m = calloc(1, sizeof *m);
    if (m == NULL) {
        sb_err_set(err, "worker metrics: out of memory");
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    snprintf(m->pool, sizeof m->pool, "%s", pool ? pool : "");
    m->sample = sample;
    m->ud = ud;
    m->reg = sb_metrics_new();
    if (m->reg == NULL) {
        sb_wmetrics_free(m);
        sb_err_set(err, "worker metrics: out of memory");
        return NULL;
    }
    if (sb_metrics_add_worker_families(m->reg, m->f, err) != 0) {
        sb_wmetrics_free(m);
        return NULL;
    }
    static const char *const base[] = {"namespace", "pipeline", "pool", NULL};
    m->cuda = sb_metrics_add(m->reg, SB_METRIC_GAUGE, "streambatch_worker_cuda_devices",
                             "CUDA devices tensor.mlp can use (0: it runs on the CPU).", base, NULL,
                             0, err);
    if (m->cuda != NULL)
        m->outside = sb_metrics_add(
            m->reg, SB_METRIC_COUNTER, "streambatch_worker_store_outside_bytes_total",
            "Bytes of partitions a task read from this worker's store outside its budget (larger "
            "than the budget could give).",
            base, NULL, 0, err);
    if (m->cuda == NULL || m->outside == NULL ||
        sb_metrics_on_collect(m->reg, collect, m, err) != 0 ||
        sb_metrics_add_process(m->reg, err) != 0) {
        sb_wmetrics_free(m);
        return NULL;
    }
    return m;
}

void sb_wmetrics_free(sb_wmetrics *m)
{
    if (m == NULL)
        return;
    sb_metrics_free(m->reg);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

sb_metrics *sb_wmetrics_registry(sb_wmetrics *m)
{
    return m->reg;
}

void sb_wmetrics_set_pipeline(sb_wmetrics *m, const char *namespace_, const char *pipeline)
{
    pthread_mutex_lock(&m->mu);
    /* no namespace (local runs): Kubernetes' default, as the controller names the run */
    snprintf(m->ns, sizeof m->ns, "%s", namespace_ && *namespace_ ? namespace_ : "default");
    snprintf(m->pipeline, sizeof m->pipeline, "%s", pipeline ? pipeline : "");
    pthread_mutex_unlock(&m->mu);
}

void sb_wmetrics_task_started(sb_wmetrics *m, const char *stage)
{
    if (m == NULL)
        return;
    char ns[256], pl[256], pool[64];
    labels(m, stage, ns, pl, pool);
    const char *const v[] = {ns, pl, pool, stage};
    sb_metric_inc(m->f[SB_WF_TASKS_STARTED], v, 1);
    /* every series of the stage exists from its first task (0 until it counts something), so
     * rate() over failures has data before the first failure */
    for (int f = SB_WF_TASKS_FINISHED; f <= SB_WF_BYTES_OUT; f++)
        sb_metric_inc(m->f[f], v, 0);
}

void sb_wmetrics_task_ended(sb_wmetrics *m, const char *stage, int ok, double seconds,
                            uint64_t rows_in, uint64_t bytes_in, uint64_t rows_out,
                            uint64_t bytes_out)
{
    if (m == NULL)
        return;
    char ns[256], pl[256], pool[64];
    labels(m, stage, ns, pl, pool);
    const char *const v[] = {ns, pl, pool, stage};
    sb_metric_inc(m->f[ok ? SB_WF_TASKS_FINISHED : SB_WF_TASKS_FAILED], v, 1);
    sb_metric_inc(m->f[SB_WF_ROWS_IN], v, (double)rows_in);
    sb_metric_inc(m->f[SB_WF_BYTES_IN], v, (double)bytes_in);
    if (ok) {
        sb_metric_inc(m->f[SB_WF_ROWS_OUT], v, (double)rows_out);
        sb_metric_inc(m->f[SB_WF_BYTES_OUT], v, (double)bytes_out);
        sb_metric_observe(m->f[SB_WF_DURATION], v, seconds);
    }
}

void sb_wmetrics_fetch_error(sb_wmetrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->fetch_errors++;
    pthread_mutex_unlock(&m->mu);
}

void sb_wmetrics_accel_busy(sb_wmetrics *m, double seconds)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->mu);
    m->accel_seconds += seconds;
    pthread_mutex_unlock(&m->mu);
}

uint64_t sb_wmetrics_fetch_errors(sb_wmetrics *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t v = m->fetch_errors;
    pthread_mutex_unlock(&m->mu);
    return v;
}

double sb_wmetrics_accel_seconds(sb_wmetrics *m)
{
    pthread_mutex_lock(&m->mu);
    double v = m->accel_seconds;
    pthread_mutex_unlock(&m->mu);
    return v;
}
