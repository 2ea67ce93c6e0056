/* operator_http.h — the controller's metrics and health endpoints (libmicrohttpd):
 *   GET /metrics  Prometheus text (lib/metrics): workqueue_depth, workqueue_adds_total,
 *                 controller_runtime_reconcile_total{result}, controller_runtime_reconcile_
 *                 time_seconds (histogram), streambatch_pipelines{phase}, streambatch_leader,
 *                 process_*, and, on the leader only, the figures of the pipelines it runs
 *                 (controller/metrics/pipeline.h; docs/metrics.md)
 *   GET /healthz  200 "ok" while the process serves
 *   GET /readyz   200 once the informers synced (a standby is ready too), else 503
 *
 * The metrics are counters kept here (thread-safe: one mutex) plus gauges read at scrape time
 * through a callback. Rendering is a pure function over the counters, unit tested.
 *
 * Memory: sb_opr_metrics and sb_opr_http are owned by the caller (free/stop them); the HTTP
 * server borrows the metrics, which must outlive it.
 */
#ifndef SB_CTL_OPERATOR_HTTP_H
#define SB_CTL_OPERATOR_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "controller/metrics/pipeline.h"
#include "core/err.h"

/* Phases in streambatch_pipelines{phase}; index SB_OPR_PHASE_NONE counts those with no phase. */
enum { SB_OPR_NPHASES = 6 };
extern const char *const sb_opr_phase_names[SB_OPR_NPHASES];

typedef struct sb_opr_gauges {
    size_t queue_depth;
    size_t pipelines[SB_OPR_NPHASES]; /* by sb_opr_phase_names */
    int leader;                       /* 1 when this process leads */
    int ready;                        /* informers synced */
} sb_opr_gauges;

typedef struct sb_opr_metrics sb_opr_metrics;

sb_opr_metrics *sb_opr_metrics_new(void);
void sb_opr_metrics_free(sb_opr_metrics *m);
void sb_opr_metrics_queue_add(sb_opr_metrics *m);
/* result: "success" | "error" | "requeue" */
void sb_opr_metrics_reconcile(sb_opr_metrics *m, const char *result, double seconds);
/* Called at each render of a leader: adds the pipelines it runs (sb_cmetrics_add). */
typedef void (*sb_opr_pipelines_fn)(void *ud, sb_cmetrics *cm);
void sb_opr_metrics_on_pipelines(sb_opr_metrics *m, sb_opr_pipelines_fn fn, void *ud);
/* The Prometheus text (malloc'd), with the gauges given; NULL on out of memory. */
char *sb_opr_metrics_render(sb_opr_metrics *m, const sb_opr_gauges *g);

typedef struct sb_opr_http_config {
    const char *host; /* IPv4 address to bind ("0.0.0.0": all) */
    uint16_t port;    /* 0: any free port */
    sb_opr_metrics *metrics;
    void (*gauges)(void *ud, sb_opr_gauges *out); /* called per request */
    void *ud;
} sb_opr_http_config;

typedef struct sb_opr_http sb_opr_http;

sb_opr_http *sb_opr_http_start(const sb_opr_http_config *cfg, sb_err *err);
int sb_opr_http_port(const sb_opr_http *h);
void sb_opr_http_stop(sb_opr_http *h);

#endif
