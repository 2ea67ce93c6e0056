/* The operator's /metrics, /healthz and /readyz (a real libmicrohttpd server on a free port,
 * queried with libcurl) and the Event object it posts. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/operator/operator_events.h"
#include "controller/operator/operator_http.h"
#include "controller/ctl/cmetrics.h"

Test(opr_http, render_counters_and_histogram)
{
    sb_operator_metrics *m = sb_operator_metrics_new();
    sb_operator_metrics_queue_add(m);
    sb_operator_metrics_queue_add(m);
    sb_operator_metrics_reconcile(m, "success", 0.003);
    sb_operator_metrics_reconcile(m, "success", 0.2);
    sb_operator_metrics_reconcile(m, "error", 100);
    sb_operator_gauges g = {.queue_depth = 4, .leader = 1};
    g.pipelines[1] = 2;
    char *t = sb_operator_metrics_render(m, &g);
    cr_assert_not_null(t);
    const char *want[] = {
        "workqueue_depth{name=\"pipeline\"} 4\n",
        "workqueue_adds_total{name=\"pipeline\"} 2\n",
        "controller_runtime_reconcile_total{controller=\"pipeline\",result=\"success\"} 2\n",
        "controller_runtime_reconcile_total{controller=\"pipeline\",result=\"error\"} 1\n",
        "controller_runtime_reconcile_total{controller=\"pipeline\",result=\"requeue\"} 0\n",
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"pipeline\",le=\"0.005\"} "
        "1\n",
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"pipeline\",le=\"0.25\"} 2\n",
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"pipeline\",le=\"30\"} 2\n",
        "controller_runtime_reconcile_time_seconds_bucket{controller=\"pipeline\",le=\"+Inf\"} 3\n",
        "controller_runtime_reconcile_time_seconds_count{controller=\"pipeline\"} 3\n",
        "streambatch_pipelines{phase=\"Running\"} 2\n",
        "streambatch_pipelines{phase=\"Failed\"} 0\n",
        "streambatch_leader 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(t, want[i]) != NULL, "missing %s in:\n%s", want[i], t);
    free(t);
    sb_operator_metrics_free(m);
}

static size_t collect(char *p, size_t sz, size_t n, void *ud)
{
    char **b = ud;
    size_t old = *b ? strlen(*b) : 0;
    char *nb = realloc(*b, old + sz * n + 1);
    memcpy(nb + old, p, sz * n);
    nb[old + sz * n] = '\0';
    *b = nb;
    return sz * n;
}

static long get(int port, const char *path, char **body)
{
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    *body = NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    return code;
}

static int g_ready;
static void gauges(void *ud, sb_operator_gauges *out)
{
    (void)ud;
    out->ready = g_ready;
    out->queue_depth = 7;
}

Test(opr_http, endpoints)
{
    sb_operator_metrics *m = sb_operator_metrics_new();
    sb_operator_http_config cfg = {.host = "127.0.0.1", .port = 0, .metrics = m, .gauges = gauges};
    sb_err err;
    sb_operator_http *h = sb_operator_http_start(&cfg, &err);
    cr_assert_not_null(h, "%s", err.msg);
    int port = sb_operator_http_port(h);
    cr_assert_gt(port, 0);
    char *b;
    cr_expect_eq(get(port, "/healthz", &b), 200);
    free(b);
    g_ready = 0;
    cr_expect_eq(get(port, "/readyz", &b), 503);
    free(b);
    g_ready = 1;
    cr_expect_eq(get(port, "/readyz", &b), 200);
    free(b);
    cr_expect_eq(get(port, "/metrics", &b), 200);
    cr_expect(b && strstr(b, "workqueue_depth{name=\"pipeline\"} 7\n"), "%s", b);
    free(b);
    cr_expect_eq(get(port, "/nope", &b), 404);
    free(b);
    sb_operator_http_stop(h);
    sb_operator_metrics_free(m);
    cfg.host = "not-an-ip";
    cr_expect_null(sb_operator_http_start(&cfg, &err));
    cr_expect(strstr(err.msg, "not-an-ip") != NULL, "%s", err.msg);
}

Test(opr_http, event_object)
{
    sb_operator_event_ref ref = {"ns1", "wc", "uid-1", "42"};
    cJSON *e = sb_operator_event_build(&ref, "Warning", "WorkerPodFailed", "pod x failed", "ctl-0",
                                       1714564800123456789ULL);
    cr_assert_not_null(e);
    char *t = cJSON_PrintUnformatted(e);
    const char *want[] = {"\"name\":\"wc.17cb5b99ffbf4d15\"",
                          "\"namespace\":\"ns1\"",
                          "\"kind\":\"Pipeline\"",
                          "\"uid\":\"uid-1\"",
                          "\"type\":\"Warning\"",
                          "\"reason\":\"WorkerPodFailed\"",
                          "\"message\":\"pod x failed\"",
                          "\"component\":\"streambatch-controller\"",
                          "\"host\":\"ctl-0\"",
                          "\"firstTimestamp\":\"2024-05-01T12:00:00Z\"",
                          "\"eventTime\":\"2024-05-01T12:00:00.123456Z\""};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(t, want[i]) != NULL, "missing %s in %s", want[i], t);
    free(t);
    cJSON_Delete(e);
}

/* Only the leader reports pipelines; a standby says it is one (streambatch_leader 0) and has
 * no pipeline series, so sums over replicas count each pipeline once. promtool finds nothing
 * wrong with either text. */
static void one_pipeline(void *ud, sb_cmetrics *cm)
{
    (void)ud;
    static sb_ctl_snapshot s;
    memset(&s, 0, sizeof s);
    s.nops = 1;
    s.ops[0] = (sb_sched_group_stats){.name = "parse",
                                      .pool = "cpu",
                                      .tasks_total = 10,
                                      .tasks_done = 4,
                                      .rows_out = 400,
                                      .backpressure_seconds = 1.5};
    s.stats.budget = 1 << 20;
    s.stats.row_groups_read = 3; /* a parquet source: its pushdown figures */
    s.stats.row_groups_skipped = 97;
    s.stats.source_bytes_read = 2000;
    s.stats.source_bytes_skipped = 98000;
    s.stats.pages_read = 12; /* and its page index's */
    s.stats.pages_skipped = 88;
    sb_cmetrics_pool p = {"cpu", 3, 2, 1};
    sb_cmetrics_add(cm, "team", "logs", &s, &p, 1);
}

static int promtool_ok(const char *text)
{
    FILE *f = popen("promtool check metrics >/dev/null 2>&1", "w");
    cr_assert_not_null(f);
    fputs(text, f);
    return pclose(f) == 0;
}

Test(opr_http, only_the_leader_reports_pipelines)
{
    sb_operator_metrics *m = sb_operator_metrics_new();
    cr_assert_not_null(m);
    sb_operator_metrics_on_pipelines(m, one_pipeline, NULL);
    sb_operator_gauges g = {.leader = 1};
    char *t = sb_operator_metrics_render(m, &g);
    const char *want[] = {
        "streambatch_leader 1\n",
        "streambatch_stage_partitions{namespace=\"team\",pipeline=\"logs\",stage=\"parse\","
        "state=\"committed\"} 4\n",
        "streambatch_stage_rows_out_total{namespace=\"team\",pipeline=\"logs\",stage=\"parse\"} "
        "400\n",
        "streambatch_stage_backpressure_seconds_total{namespace=\"team\",pipeline=\"logs\","
        "stage=\"parse\"} 1.5\n",
        "streambatch_pool_workers{namespace=\"team\",pipeline=\"logs\",pool=\"cpu\",state="
        "\"pending\"} "
        "1\n",
        "streambatch_pipeline_memory_budget_bytes{namespace=\"team\",pipeline=\"logs\"} 1048576\n",
        "streambatch_pipeline_parquet_row_groups_total{namespace=\"team\",pipeline=\"logs\","
        "state=\"skipped\"} 97\n",
        "streambatch_pipeline_parquet_source_bytes_total{namespace=\"team\",pipeline=\"logs\","
        "state=\"read\"} 2000\n",
        "streambatch_pipeline_parquet_pages_total{namespace=\"team\",pipeline=\"logs\","
        "state=\"skipped\"} 88\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(strstr(t, want[i]) != NULL, "missing %s in:\n%s", want[i], t);
    cr_expect(promtool_ok(t), "promtool check metrics:\n%s", t);
    free(t);
    g.leader = 0;
    t = sb_operator_metrics_render(m, &g);
    cr_expect(strstr(t, "streambatch_leader 0\n") != NULL);
    cr_expect(strstr(t, "pipeline=\"logs\"") == NULL, "a standby reports no pipeline:\n%s", t);
    cr_expect(promtool_ok(t));
    free(t);
    sb_operator_metrics_free(m);
}
