/* metrics.h — Prometheus metrics for every streambatch process: a registry of metric families
 * (counter, gauge, histogram), each with fixed label names and one series per distinct tuple of
 * label values, rendered in the Prometheus text exposition format (version 0.0.4).
 *
 * Conventions (docs/metrics.md): names start with "streambatch_" (or are the standard
 * process_/workqueue_/controller_runtime_ ones), counters end in "_total", base units
 * ("_seconds", "_bytes"), labels are bounded (namespace, pipeline, stage, pool, state, cause;
 * never task or partition ids).
 *
 * Collect callbacks: a value that lives elsewhere (the scheduler's stats, a store's bytes) is
 * copied into the registry by a callback registered with sb_metrics_on_collect(), which
 * sb_metrics_render() calls first, outside the registry's lock (the callback sets gauges and
 * counters with the functions below). A callback may sb_metric_clear() a family first so that
 * series of things that are gone (a finished pipeline) disappear.
 *
 * Thread safety: every function may be called from any thread; one mutex per registry.
 *
 * Memory: the registry owns its families and series; sb_metric pointers stay valid until
 * sb_metrics_free(). Label values are copied. sb_metrics_render() returns a malloc'd string the
 * caller frees.
 */
#ifndef SB_METRICS_METRICS_H
#define SB_METRICS_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct sb_metrics sb_metrics;
typedef struct sb_metric sb_metric;

typedef enum { SB_METRIC_COUNTER, SB_METRIC_GAUGE, SB_METRIC_HISTOGRAM } sb_metric_type;

/* Most label names a family may have. */
#define SB_METRIC_MAX_LABELS 8

sb_metrics *sb_metrics_new(void);
void sb_metrics_free(sb_metrics *m);

/* Registers a family. `labels` is a NULL-terminated list of label names (NULL: none);
 * `buckets` (histograms only) are nb ascending upper bounds (+Inf is implied). Returns the
 * family, or NULL + err for an invalid name or label, a name already registered, too many
 * labels, bad buckets, or out of memory. Registering the same name twice is an error. */
sb_metric *sb_metrics_add(sb_metrics *m, sb_metric_type type, const char *name, const char *help,
                          const char *const *labels, const double *buckets, size_t nb, sb_err *err);

/* Series operations. `values` holds one value per label name, in order (NULL when the family
 * has no labels). A series is created on first use. Out of memory drops the update (metrics
 * never fail the caller). */
void sb_metric_inc(sb_metric *f, const char *const *values, double v);     /* counter, gauge */
void sb_metric_set(sb_metric *f, const char *const *values, double v);     /* gauge, counter */
void sb_metric_observe(sb_metric *f, const char *const *values, double v); /* histogram */

/* Sets a histogram series from figures counted elsewhere: counts[i] observations in bucket i
 * (not cumulative; nb must equal the family's bucket count), count in all (those above the
 * last bound included) and their sum. */
void sb_metric_set_histogram(sb_metric *f, const char *const *values, const uint64_t *counts,
                             size_t nb, uint64_t count, double sum);

/* Drops every series of the family (collect callbacks that rebuild a family). */
void sb_metric_clear(sb_metric *f);

/* The current value of a counter or gauge series (0 if it does not exist); histograms: the
 * count of observations. For tests and for callers that read back their own figures. */
double sb_metric_value(sb_metric *f, const char *const *values);

typedef void (*sb_metrics_collect_fn)(void *ud, sb_metrics *m);
/* Adds a callback run at the start of every render (at most 8). 0, or -1 + err. */
int sb_metrics_on_collect(sb_metrics *m, sb_metrics_collect_fn fn, void *ud, sb_err *err);

/* Registers process_cpu_seconds_total, process_resident_memory_bytes,
 * process_start_time_seconds, process_open_fds and process_max_fds, read from /proc at every
 * render. 0, or -1 + err. */
int sb_metrics_add_process(sb_metrics *m, sb_err *err);

/* This process's CPU seconds (user + system) and resident bytes, read now. */
void sb_metrics_process_read(double *cpu_seconds, uint64_t *rss_bytes);

/* The text exposition of every family, families in registration order, series sorted by
 * their label values (so output is stable). NULL on out of memory. */
char *sb_metrics_render(sb_metrics *m);

/* Duration histogram buckets for task times: 1 ms .. 10 min. */
#define SB_METRICS_TASK_NBUCKETS 17
extern const double sb_metrics_task_buckets[SB_METRICS_TASK_NBUCKETS];
extern const size_t sb_metrics_task_nbuckets; /* = SB_METRICS_TASK_NBUCKETS */

#endif
