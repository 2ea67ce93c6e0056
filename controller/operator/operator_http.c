/* operator_http.c — the controller's /metrics, /healthz and /readyz endpoints (see
 * operator_http.h): the work-queue, reconcile and leader metrics and the pipelines' figures,
 * served with lib/metrics. Owns the metrics registry and the server. */

#include "controller/operator/operator_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/serve.h"

const char *const sb_operator_phase_names[SB_OPERATOR_NPHASES] = {
    "Pending", "Running", "Succeeded", "Failed", "Suspended", ""};

static const double k_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define NBUCKETS (sizeof k_buckets / sizeof *k_buckets)
static const char *const k_results[] = {"success", "error", "requeue"};
#define NRESULTS 3

/* The registry (lib/metrics) with the operator's families; the pipeline families
 * (controller/ctl/cmetrics.h) are filled at each render, by the leader only. */
struct sb_operator_metrics {
    sb_metrics *reg;
    sb_metric *depth, *adds, *reconciles, *reconcile_time, *pipelines, *leader;
    sb_cmetrics *pipes;
    sb_operator_pipelines_fn fn;
    void *ud;
};

sb_operator_metrics *sb_operator_metrics_new(void)
{
    sb_operator_metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->reg = sb_metrics_new();
    sb_err e = {0};
    static const char *const name[] = {"name", NULL}, *const ctl[] = {"controller", NULL},
                             *const ctl_res[] = {"controller", "result", NULL},
                             *const phase[] = {"phase", NULL};
    if (m->reg == NULL ||
        (m->depth = sb_metrics_add(m->reg, SB_METRIC_GAUGE, "workqueue_depth",
                                   "Current depth of the workqueue.", name, NULL, 0, &e)) == NULL ||
        (m->adds = sb_metrics_add(m->reg, SB_METRIC_COUNTER, "workqueue_adds_total",
                                  "Total number of adds handled by the workqueue.", name, NULL, 0,
                                  &e)) == NULL ||
        (m->reconciles = sb_metrics_add(
             m->reg, SB_METRIC_COUNTER, "controller_runtime_reconcile_total",
             "Total number of reconciliations per controller.", ctl_res, NULL, 0, &e)) == NULL ||
        (m->reconcile_time = sb_metrics_add(m->reg, SB_METRIC_HISTOGRAM,
                                            "controller_runtime_reconcile_time_seconds",
                                            "Length of time per reconciliation per controller.",
                                            ctl, k_buckets, NBUCKETS, &e)) == NULL ||
        (m->pipelines = sb_metrics_add(m->reg, SB_METRIC_GAUGE, "streambatch_pipelines",
                                       "Pipelines by status.phase (\"\" before the first status).",
                                       phase, NULL, 0, &e)) == NULL ||
        (m->leader = sb_metrics_add(m->reg, SB_METRIC_GAUGE, "streambatch_leader",
                                    "1 when this controller holds the leader lease, 0 for a "
                                    "standby (which reports no pipelines).",
                                    NULL, NULL, 0, &e)) == NULL ||
        (m->pipes = sb_cmetrics_new(m->reg, 0, &e)) == NULL ||
        sb_metrics_add_process(m->reg, &e) != 0) {
        sb_operator_metrics_free(m);
        return NULL;
    }
    static const char *const pl[] = {"pipeline"};
    sb_metric_inc(m->adds, pl, 0);
    for (size_t i = 0; i < NRESULTS; i++)
        sb_metric_inc(m->reconciles, (const char *const[]){"pipeline", k_results[i]}, 0);
    sb_metric_set_histogram(m->reconcile_time, (const char *const[]){"pipeline"},
                            (const uint64_t[NBUCKETS]){0}, NBUCKETS, 0, 0);
    return m;
}

void sb_operator_metrics_free(sb_operator_metrics *m)
{
    if (m == NULL)
        return;
    sb_cmetrics_free(m->pipes);
    sb_metrics_free(m->reg);
    free(m);
}

void sb_operator_metrics_on_pipelines(sb_operator_metrics *m, sb_operator_pipelines_fn fn, void *ud)
{
    m->fn = fn;
    m->ud = ud;
}

void sb_operator_metrics_queue_add(sb_operator_metrics *m)
{
    if (m != NULL)
        sb_metric_inc(m->adds, (const char *const[]){"pipeline"}, 1);
}

void sb_operator_metrics_reconcile(sb_operator_metrics *m, const char *result, double seconds)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < NRESULTS; i++)
        if (strcmp(result, k_results[i]) == 0)
            sb_metric_inc(m->reconciles, (const char *const[]){"pipeline", k_results[i]}, 1);
    sb_metric_observe(m->reconcile_time, (const char *const[]){"pipeline"}, seconds);
}

static void apply(sb_operator_metrics *m, const sb_operator_gauges *g)
{
    sb_metric_set(m->depth, (const char *const[]){"pipeline"}, (double)g->queue_depth);
    for (size_t i = 0; i < SB_OPERATOR_NPHASES; i++)
        sb_metric_set(m->pipelines, (const char *const[]){sb_operator_phase_names[i]},
                      (double)g->pipelines[i]);
    sb_metric_set(m->leader, NULL, g->leader ? 1 : 0);
    sb_cmetrics_clear(m->pipes);
    if (g->leader && m->fn != NULL) /* a standby reports no pipeline: sums over replicas hold */
        m->fn(m->ud, m->pipes);
}

char *sb_operator_metrics_render(sb_operator_metrics *m, const sb_operator_gauges *g)
{
    apply(m, g);
    return sb_metrics_render(m->reg);
}

/* ---- HTTP (lib/metrics/serve.h) ---- */

struct sb_operator_http {
    sb_metrics_server *srv;
    sb_operator_http_config cfg;
};

static void gauges_of(const sb_operator_http *h, sb_operator_gauges *g)
{
    memset(g, 0, sizeof *g);
    if (h->cfg.gauges != NULL)
        h->cfg.gauges(h->cfg.ud, g);
}

/* Before each scrape: the gauges and, on the leader, the pipelines. */
static void collect(void *ud, sb_metrics *reg)
{
    (void)reg;
    sb_operator_http *h = ud;
    sb_operator_gauges g;
    gauges_of(h, &g);
    apply(h->cfg.metrics, &g);
}

static int ready(void *ud)
{
    sb_operator_gauges g;
    gauges_of(ud, &g);
    return g.ready;
}

sb_operator_http *sb_operator_http_start(const sb_operator_http_config *cfg, sb_err *err)
{
    sb_operator_http *h = calloc(1, sizeof *h);
    if (h == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    h->cfg = *cfg;
    const char *host = cfg->host != NULL && *cfg->host ? cfg->host : "0.0.0.0";
    char addr[128];
    snprintf(addr, sizeof addr, "%s:%u", host, (unsigned)cfg->port);
    sb_metrics_serve_config sc = {.addr = addr,
                                  .metrics = cfg->metrics->reg,
                                  .ready = ready,
                                  .not_ready = "informers not synced\n",
                                  .ud = h};
    h->srv = sb_metrics_serve(&sc, err);
    if (h->srv == NULL || sb_metrics_on_collect(cfg->metrics->reg, collect, h, err) != 0) {
        sb_metrics_serve_stop(h->srv);
        free(h);
        return NULL;
    }
    return h;
}

int sb_operator_http_port(const sb_operator_http *h)
{
    return sb_metrics_serve_port(h->srv);
}

void sb_operator_http_stop(sb_operator_http *h)
{
    if (h == NULL)
        return;
    sb_metrics_serve_stop(h->srv);
    free(h);
}
