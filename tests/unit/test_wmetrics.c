/* worker/metrics: the worker's families with their labels, failed vs finished tasks (a failed
 * attempt counts its input but no output and no duration), fetch errors and accelerator time
 * in the render and in the heartbeat totals, and the sampled store figures. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/wmetrics.h"
#include "worker/ops/ops.h"
#include "testutil.h"

static void sample(void *ud, sb_wmetrics_sample *out)
{
    (void)ud;
    out->store_memory_bytes = 1000;
    out->store_spilled_bytes = 20;
    out->spill_bytes_total = 300;
    out->fetch_bytes_total = 4000;
    out->store_outside_bytes_total = 5000;
}

static int has(const char *text, const char *line)
{
    return strstr(text, line) != NULL;
}

Test(wmetrics, tasks_fetch_errors_accelerator_and_samples)
{
    sb_err e = {0};
    sb_wmetrics *m = sb_wmetrics_new("gpu", sample, NULL, &e);
    cr_assert_not_null(m, "%s", e.msg);
    sb_wmetrics_set_pipeline(m, "team", "infer");
    sb_wmetrics_task_started(m, "decode+embed");
    sb_wmetrics_task_ended(m, "decode+embed", 1, 0.2, 10, 1000, 10, 4000);
    sb_wmetrics_task_started(m, "decode+embed");
    sb_wmetrics_task_ended(m, "decode+embed", 0, 9.0, 5, 500, 99, 99);
    sb_wmetrics_fetch_error(m);
    sb_wmetrics_fetch_error(m);
    sb_wmetrics_accel_busy(m, 1.5);
    cr_assert_eq(sb_wmetrics_fetch_errors(m), 2);
    cr_assert_float_eq(sb_wmetrics_accel_seconds(m), 1.5, 1e-9);
    char *t = sb_metrics_render(sb_wmetrics_registry(m));
    cr_assert_not_null(t);
#define L "namespace=\"team\",pipeline=\"infer\",pool=\"gpu\""
#define S L ",stage=\"decode+embed\""
    const char *want[] = {
        "streambatch_worker_tasks_started_total{" S "} 2\n",
        "streambatch_worker_tasks_finished_total{" S "} 1\n",
        "streambatch_worker_tasks_failed_total{" S "} 1\n",
        "streambatch_worker_rows_in_total{" S "} 15\n",
        "streambatch_worker_bytes_in_total{" S "} 1500\n",
        "streambatch_worker_rows_out_total{" S "} 10\n",
        "streambatch_worker_bytes_out_total{" S "} 4000\n",
        "streambatch_worker_task_duration_seconds_bucket{" S ",le=\"0.25\"} 1\n",
        "streambatch_worker_task_duration_seconds_count{" S "} 1\n",
        "streambatch_worker_store_memory_bytes{" L "} 1000\n",
        "streambatch_worker_store_spilled_bytes{" L "} 20\n",
        "streambatch_worker_spill_bytes_total{" L "} 300\n",
        "streambatch_worker_fetch_bytes_total{" L "} 4000\n",
        "streambatch_worker_store_outside_bytes_total{" L "} 5000\n",
        "streambatch_worker_fetch_errors_total{" L "} 2\n",
        "streambatch_worker_accelerator_busy_seconds_total{" L "} 1.5\n",
        "streambatch_workers{" L "} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(has(t, want[i]), "missing %s", want[i]);
    cr_expect(has(t, "streambatch_worker_resident_memory_bytes{" L "} "));
    free(t);
    /* a stage's series exist from its first task: rate() over failures has data at once */
    sb_wmetrics_task_started(m, "x");
    t = sb_metrics_render(sb_wmetrics_registry(m));
    cr_expect(has(t, "streambatch_worker_tasks_failed_total{" L ",stage=\"x\"} 0\n"), "%s", t);
    cr_expect(has(t, "streambatch_worker_bytes_out_total{" L ",stage=\"x\"} 0\n"));
    free(t);
    /* a local run has no namespace: Kubernetes' default, as the controller names it */
    sb_wmetrics_set_pipeline(m, NULL, "local");
    t = sb_metrics_render(sb_wmetrics_registry(m));
    cr_expect(
        has(t, "streambatch_workers{namespace=\"default\",pipeline=\"local\",pool=\"gpu\"} 1\n"),
        "%s", t);
    cr_expect(!has(t, "streambatch_workers{" L "}"), "sampled series follow the pipeline");
    free(t);
    sb_wmetrics_free(m);
}

/* streambatch_worker_cuda_devices: absent until a tensor.mlp stage asks for CUDA, then the devices
 * found (0 here: the tests link the archive, which has no CUDA). */
Test(wmetrics, cuda_devices_once_a_tensor_mlp_stage_asked)
{
    sb_err e = {0};
    sb_wmetrics *m = sb_wmetrics_new("gpu", NULL, NULL, &e);
    cr_assert_not_null(m, "%s", e.msg);
    sb_wmetrics_set_pipeline(m, "team", "infer");
    char *t = sb_metrics_render(sb_wmetrics_registry(m));
    cr_expect(!has(t, "streambatch_worker_cuda_devices{"), "%s", t);
    free(t);
    /* a one-layer model: 0.weight [1, 1] */
    char dir[128], path[256];
    sb_test_tmpl(dir, sizeof dir, "sb-test-wmetrics");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    const char *h = "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]}}";
    uint64_t hl = strlen(h);
    float one = 1;
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, hl, f);
    fwrite(&one, 4, 1, f);
    fclose(f);
    char args[400];
    snprintf(args, sizeof args, "{\"weights\":\"%s\",\"field\":\"x\"}", path);
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    void *st = NULL;
    cr_assert_eq(op->init(args, &st, &e), 0, "%s", e.msg);
    op->free(st);
    t = sb_metrics_render(sb_wmetrics_registry(m));
    cr_expect(has(t, "streambatch_worker_cuda_devices{" L "} 0\n"), "%s", t);
    free(t);
    sb_op_shutdown();
    sb_wmetrics_free(m);
}
