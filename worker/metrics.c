/* metrics.c — a worker's Prometheus figures (see metrics.h). */
#include "worker/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum {
    F_STARTED,
    F_FINISHED,
    F_FAILED,
    F_ROWS_IN,
    F_ROWS_OUT,
    F_BYTES_IN,
    F_BYTES_OUT,
    F_DURATION,
    F_STORE_MEM,
    F_STORE_SPILLED,
    F_SPILL_TOTAL,
    F_FETCH_BYTES,
    F_FETCH_ERRORS,
    F_ACCEL,
    F_CPU,
    F_RSS,
    F_WORKERS,
    NF
};

struct sb_wmetrics {
    sb_metrics *reg;
    sb_metric *f[NF];
    pthread_mutex_t mu; /* label values, counters below */
    char ns[256], pipeline[256], pool[64];
    uint64_t fetch_errors;
    double accel_seconds;
    sb_wmetrics_sample_fn sample;
    void *ud;
};

static const struct {
    sb_metric_type type;
    const char *name, *help;
    int stage;
} defs[NF] = {
    {SB_METRIC_COUNTER, "streambatch_worker_tasks_started_total", "Task attempts started.", 1},
    {SB_METRIC_COUNTER, "streambatch_worker_tasks_finished_total",
     "Task attempts that completed successfully.", 1},
    {SB_METRIC_COUNTER, "streambatch_worker_tasks_failed_total",
     "Task attempts that failed (op error, data error, lost input).", 1},
    {SB_METRIC_COUNTER, "streambatch_worker_rows_in_total",
     "Records read by tasks (source records or input partitions).", 1},
    {SB_METRIC_COUNTER, "streambatch_worker_rows_out_total",
     "Records in the partitions or sink parts tasks produced.", 1},
    {SB_METRIC_COUNTER, "streambatch_worker_bytes_in_total",
     "Bytes of task input (source bytes read, partitions fetched or loaded).", 1},
    {SB_METRIC_COUNTER, "streambatch_worker_bytes_out_total",
     "Bytes of the partitions or sink parts tasks produced.", 1},
    {SB_METRIC_HISTOGRAM, "streambatch_worker_task_duration_seconds",
     "Wall time of successful task attempts.", 1},
    {SB_METRIC_GAUGE, "streambatch_worker_store_memory_bytes", "Partition bytes held in memory.",
     0},
    {SB_METRIC_GAUGE, "streambatch_worker_store_spilled_bytes",
     "Partition bytes held on local disk (spilled).", 0},
    {SB_METRIC_COUNTER, "streambatch_worker_spill_bytes_total",
     "Bytes written to the spill directory.", 0},
    {SB_METRIC_COUNTER, "streambatch_worker_fetch_bytes_total",
     "Partition bytes received from other workers.", 0},
    {SB_METRIC_COUNTER, "streambatch_worker_fetch_errors_total",
     "Fetches from other workers that failed.", 0},
    {SB_METRIC_COUNTER, "streambatch_worker_accelerator_busy_seconds_total",
     "Time tasks held the accelerator.", 0},
    {SB_METRIC_COUNTER, "streambatch_worker_cpu_seconds_total", "Process CPU time (user + system).",
     0},
    {SB_METRIC_GAUGE, "streambatch_worker_resident_memory_bytes", "Process resident memory.", 0},
    {SB_METRIC_GAUGE, "streambatch_workers", "Worker processes behind these figures.", 0},
};

void sb_wmetrics_process(double *cpu_seconds, uint64_t *rss_bytes)
{
    struct rusage ru;
    *cpu_seconds = 0;
    *rss_bytes = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        *cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        unsigned long long size, rss;
        if (fscanf(f, "%llu %llu", &size, &rss) == 2)
            *rss_bytes = (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
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
    for (int i = F_STORE_MEM; i < NF; i++)
        sb_metric_clear(m->f[i]);
    sb_metric_set(m->f[F_STORE_MEM], v, (double)s.store_memory_bytes);
    sb_metric_set(m->f[F_STORE_SPILLED], v, (double)s.store_spilled_bytes);
    sb_metric_set(m->f[F_SPILL_TOTAL], v, (double)s.spill_bytes_total);
    sb_metric_set(m->f[F_FETCH_BYTES], v, (double)s.fetch_bytes_total);
    sb_metric_set(m->f[F_FETCH_ERRORS], v, errors);
    sb_metric_set(m->f[F_ACCEL], v, accel);
    sb_metric_set(m->f[F_CPU], v, cpu);
    sb_metric_set(m->f[F_RSS], v, (double)rss);
    sb_metric_set(m->f[F_WORKERS], v, 1);
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
    static const char *const base[] = {"namespace", "pipeline", "pool", NULL};
    static const char *const staged[] = {"namespace", "pipeline", "pool", "stage", NULL};
    for (int i = 0; i < NF; i++) {
        m->f[i] =
            sb_metrics_add(m->reg, defs[i].type, defs[i].name, defs[i].help,
                           defs[i].stage ? staged : base, sb_metrics_task_buckets,
                           defs[i].type == SB_METRIC_HISTOGRAM ? sb_metrics_task_nbuckets : 0, err);
        if (m->f[i] == NULL) {
            sb_wmetrics_free(m);
            return NULL;
        }
    }
    if (sb_metrics_on_collect(m->reg, collect, m, err) != 0 ||
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
    sb_metric_inc(m->f[F_STARTED], (const char *const[]){ns, pl, pool, stage}, 1);
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
    sb_metric_inc(m->f[ok ? F_FINISHED : F_FAILED], v, 1);
    sb_metric_inc(m->f[F_ROWS_IN], v, (double)rows_in);
    sb_metric_inc(m->f[F_BYTES_IN], v, (double)bytes_in);
    if (ok) {
        sb_metric_inc(m->f[F_ROWS_OUT], v, (double)rows_out);
        sb_metric_inc(m->f[F_BYTES_OUT], v, (double)bytes_out);
        sb_metric_observe(m->f[F_DURATION], v, seconds);
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
