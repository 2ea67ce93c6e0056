/* operator_http.h — the controller's metrics and health endpoints (libmicrohttpd):
 *   GET /metrics  Prometheus text (lib/metrics): workqueue_depth, workqueue_adds_total,
 *                 controller_runtime_reconcile_total{result}, controller_runtime_reconcile_
 *                 time_seconds (histogram), streambatch_pipelines{phase}, streambatch_leader,
 *                 process_*, and, on the leader only, the figures of the pipelines it runs
 *                 (controller/ctl/cmetrics.h; docs/metrics.md)
 *   GET /healthz  200 "ok" while the process serves
 *   GET /readyz   200 once the informers synced (a standby is ready too), else 503
 *
 * The metrics are counters kept here (thread-safe: one mutex) plus gauges read at scrape time
 * through a callback. Rendering is a pure function over the counters, unit tested.
 *
 * Memory: sb_operator_metrics and sb_operator_http are owned by the caller (free/stop them); the
 * HTTP server borrows the metrics, which must outlive it.
 */
#ifndef SB_CTL_OPERATOR_HTTP_H
#define SB_CTL_OPERATOR_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "controller/ctl/cmetrics.h"
#include "core/err.h"

/* Phases in streambatch_pipelines{phase}; index SB_OPERATOR_PHASE_NONE counts those with no phase.
 */
enum { SB_OPERATOR_NPHASES = 6 };
extern const char *const sb_operator_phase_names[SB_OPERATOR_NPHASES];

typedef struct sb_operator_gauges {
    size_t queue_depth;
    size_t pipelines[SB_OPERATOR_NPHASES]; /* by sb_operator_phase_names */
    int leader;                            /* 1 when this process leads */
    int ready;                             /* informers synced */
} sb_operator_gauges;

typedef struct sb_operator_metrics sb_operator_metrics;

sb_operator_metrics *sb_operator_metrics_new(void);
void sb_operator_metrics_free(sb_operator_metrics *m);
void sb_operator_metrics_queue_add(sb_operator_metrics *m);
/* result: "success" | "error" | "requeue" */
void sb_operator_metrics_reconcile(sb_operator_metrics *m, const char *result, double seconds);
/* Called at each render of a leader: adds the pipelines it runs (sb_cmetrics_add). */
typedef void (*sb_operator_pipelines_fn)(void *ud, sb_cmetrics *cm);
void sb_operator_metrics_on_pipelines(sb_operator_metrics *m, sb_operator_pipelines_fn fn,
                                      void *ud);
/* The Prometheus text (malloc'd), with the gauges given; NULL on out of memory. */
char *sb_operator_metrics_render(sb_operator_metrics *m, const sb_operator_gauges *g);

typedef struct sb_operator_http_config {
    const char *host; /* IPv4 address to bind ("0.0.0.0": all) */
    uint16_t port;    /* 0: any free port */
    sb_operator_metrics *metrics;
    void (*gauges)(void *ud, sb_operator_gauges *out); /* called per request */
    void *ud;
} sb_operator_http_config;

typedef struct sb_operator_http sb_operator_http;

sb_operator_http *sb_operator_http_start(const sb_operator_http_config *cfg, sb_err *err);
int sb_operator_http_port(const sb_operator_http *h);
void sb_operator_http_stop(sb_operator_http *h);

#endif
