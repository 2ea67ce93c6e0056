/* `streambatch plan` and `streambatch run --plan` through the real binaries: declared rates
 * (bench.* costs) give an exact plan in text and JSON, stages without a rate are named, an
 * unreachable target exits 1 with its reason, --profile measures with real local runs, and
 * run --plan runs the stage on the shape the plan chose. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static char dir[256];

/* parse: cpu only, 0.01 ms/row (100000 rows/s); embed: cpu 0.5 ms/row (2000 rows/s) on 2 cores
 * and 4Gi, or gpu 0.02 ms/row (50000 rows/s) with one GPU; post: 0.005 ms/row. Prices: cores
 * 0.04/h, GiB 0.005/h, nvidia-l4 0.8/h. */
static const char *PIPELINE =
    "apiVersion: streambatch.dev/v1alpha1\n"
    "kind: Pipeline\n"
    "metadata: {name: embed-bench}\n"
    "spec:\n"
    "  source: {uri: file://%s/in.jsonl, format: jsonl, partitionSize: 64Ki}\n"
    "  stages:\n"
    "  - name: parse\n"
    "    op: bench.spin\n"
    "    args: {msPerRecord: 0.01}\n"
    "    workers: {max: 8}\n"
    "  - name: embed\n"
    "    op: bench.spin\n"
    "    args: {msPerRecord: 0.5}\n"
    "    placement: [cpu, gpu]\n"
    "    shapeArgs: {gpu: {msPerRecord: 0.02}}\n"
    "    resources: {cpu: \"2\", memory: 4Gi}\n"
    "    workers: {min: 0, max: 32}\n"
    "  - name: post\n"
    "    op: %s\n"
    "    args: %s\n"
    "    workers: {max: 4}\n"
    "  sink: {uri: file://%s/out/, format: jsonl}\n"
    "  execution:\n"
    "    target: {%s}\n"
    "    pricing: {gpuType: nvidia-l4}\n";

static void write_pipeline(const char *name, const char *post_op, const char *post_args,
                           const char *target)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, PIPELINE, dir, post_op, post_args, dir, target);
    fclose(f);
}

static void setup(void)
{
    sb_test_tmpl(dir, sizeof dir, "plan-cli");
    cr_assert_not_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/in.jsonl", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "{\"id\":%d,\"text\":\"%040d\"}\n", i, i);
    fclose(f);
}

static void teardown(void)
{
    char *out = sb_test_sh_out("rm -rf '%s'", dir);
    free(out);
}

static char *plan(int *rc, const char *file, const char *extra)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd %s && %s plan %s %s 2>&1", dir, sb_test_bin("streambatch"), file,
             extra);
    *rc = sb_test_run(cmd, &out);
    return out;
}

/* Hand-computed: a gpu embed worker costs 2*0.04 + 4*0.005 + 0.8 = 0.9/h for 50000 rows/s
 * (1.8e-5 per row/s), a cpu one 0.1/h for 2000 (5e-5): gpu. Cost per row is lowest at 200000
 * rows/s: parse 2, embed 4, post 1 = 0.08 + 3.6 + 0.04 = 3.72/h. */
Test(plan_cli, declared_rates_text, .init = setup, .fini = teardown)
{
    write_pipeline("p.yaml", "bench.sleep", "{msPerRecord: 0.005}", "rowsPerSecond: 20000");
    int rc;
    char *out = plan(&rc, "p.yaml", "");
    cr_expect_eq(rc, 0, "%s", out);
    const char *want[] = {
        "plan for embed-bench (rates declared by bench.* costs)",
        "target: 20000 rows/s",
        "prices per hour: 0.04 per CPU core, 0.005 per GiB, 0.8 per GPU (nvidia-l4)",
        "parse                cpu          2         100000       200000       0.08",
        "embed                cpu          -           2000              (not chosen)",
        "embed                gpu          4          50000       200000      3.600",
        "chosen         200000      3.720     0.005167  parse=cpu:2 embed=gpu:4 post=cpu:1",
        "all-cpu         64000      3.280      0.01424  parse=cpu:1 embed=cpu:32 post=cpu:1",
        "all-gpu             -          -            -  none: stage parse does not allow shape gpu",
        "greedy         200000      3.720     0.005167  parse=cpu:2 embed=gpu:4 post=cpu:1",
        "chosen: 200000 rows/s for 3.720 per hour, 0.005167 per million rows (11 CPU cores, 16 "
        "GiB, 4 GPUs)",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(sb_test_has_line(out, want[i]), "missing line\n  %s\ngot:\n%s", want[i], out);
    free(out);
}

Test(plan_cli, declared_rates_json_and_capacity, .init = setup, .fini = teardown)
{
    write_pipeline("p.yaml", "bench.sleep", "{msPerRecord: 0.005}", "rowsPerSecond: 20000");
    int rc;
    /* no GPU in the capacity: embed on cpu, and 32 cpu workers reach only 64000 rows/s */
    char *out = plan(&rc, "p.yaml", "-o json --capacity cpu=100,gpu=0 2>/dev/null");
    cr_expect_eq(rc, 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "not JSON:\n%s", out);
    const cJSON *p = cJSON_GetObjectItem(j, "plan");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(p, "feasible")));
    const cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "stages"), 1);
    cr_expect_str_eq(cJSON_GetObjectItem(st, "shape")->valuestring, "cpu");
    /* 0.04 + 32 * 0.1 + 0.04 = 3.28/h at 64000 rows/s */
    cr_expect_eq(cJSON_GetObjectItem(st, "workers")->valuedouble, 32);
    cr_expect_float_eq(cJSON_GetObjectItem(p, "rowsPerSecond")->valuedouble, 64000, 1e-6);
    cr_expect_float_eq(cJSON_GetObjectItem(p, "costPerHour")->valuedouble, 3.28, 1e-9);
    cr_expect_float_eq(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "capacity"), "cpuCores")->valuedouble, 100,
        1e-9);
    const cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "baselines"), "greedy");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(g, "feasible")));
    cr_expect_str_eq(cJSON_GetObjectItem(g, "why")->valuestring,
                     "no plan fits the capacity (100 CPU cores, 0 GPUs): the cheapest needs 4 CPU "
                     "cores, 4 GiB and 1 GPUs (workers.min of each stage, at least one worker)");
    cJSON_Delete(j);
    free(out);
}

Test(plan_cli, unreachable_target_exits_1, .init = setup, .fini = teardown)
{
    write_pipeline("p.yaml", "bench.sleep", "{msPerRecord: 0.005}", "rowsPerSecond: 1000000");
    int rc;
    char *out = plan(&rc, "p.yaml", "");
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(sb_test_has_line(out, "no plan: target 1e+06 rows/s cannot be met within "
                                    "workers.max: at most 800000 rows/s, stage parse is the "
                                    "bottleneck (8 cpu workers x 100000 rows/s each)"),
              "%s", out);
    free(out);
}

Test(plan_cli, stages_without_rates_need_profile, .init = setup, .fini = teardown)
{
    write_pipeline("p.yaml", "filter", "{field: id, op: ge, value: 0}", "rowsPerSecond: 100");
    int rc;
    char *out = plan(&rc, "p.yaml", "");
    cr_expect_eq(rc, 2, "%s", out);
    const char *want[] = {
        "streambatch plan: p.yaml: these stages have no declared rate; run `streambatch plan "
        "--profile` to measure them:",
        "  spec.stages[0] (parse) on cpu: the rows of later stage post (op filter) depend on the "
        "data",
        "  spec.stages[1] (embed) on gpu: the rows of later stage post (op filter) depend on the "
        "data",
        "  spec.stages[2] (post) on cpu: op filter has no declared cost",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(sb_test_has_line(out, want[i]), "missing line\n  %s\ngot:\n%s", want[i], out);
    free(out);
}

/* Real local runs: the rates are measured (not the declared ones), embed's gpu rate is above its
 * cpu rate (0.02 vs 0.5 ms a row), the plan is costed with them, and the output says the gpu
 * shape ran without a GPU. */
Test(plan_cli, profile_measures_each_shape, .init = setup, .fini = teardown, .timeout = 120)
{
    write_pipeline("p.yaml", "filter", "{field: id, op: ge, value: 0}", "rowsPerSecond: 100");
    int rc;
    char *out = plan(&rc, "p.yaml", "--profile --profile-cpus 2 -o json 2>/dev/null");
    cr_assert_eq(rc, 0, "%s", out);
    cJSON *j = cJSON_Parse(out);
    cr_assert_not_null(j, "not JSON:\n%s", out);
    cr_expect_str_eq(cJSON_GetObjectItem(j, "rates")->valuestring, "measured with --profile");
    const cJSON *embed = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stages"), 1);
    const cJSON *r = cJSON_GetObjectItem(embed, "rowsPerSecondPerWorker");
    double cpu = cJSON_GetObjectItem(r, "cpu")->valuedouble,
           gpu = cJSON_GetObjectItem(r, "gpu")->valuedouble;
    /* 0.5 ms a row spun: at most 2000 rows/s a worker, and more than 200 on any machine; the
     * gpu shape spins 25 times less (the margin is for task overheads on a loaded machine) */
    cr_expect(cpu > 200 && cpu <= 2000, "cpu rate %g", cpu);
    cr_expect(gpu > 1.5 * cpu, "gpu rate %g vs cpu %g", gpu, cpu);
    /* the plan is costed with the measured rates and is never worse per row than a baseline */
    const cJSON *p = cJSON_GetObjectItem(j, "plan");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(p, "feasible")), "%s", out);
    const cJSON *pe = cJSON_GetArrayItem(cJSON_GetObjectItem(p, "stages"), 1);
    const char *shape = cJSON_GetObjectItem(pe, "shape")->valuestring;
    cr_expect_float_eq(cJSON_GetObjectItem(pe, "rowsPerSecondPerWorker")->valuedouble,
                       strcmp(shape, "gpu") == 0 ? gpu : cpu, 1e-9);
    double best = cJSON_GetObjectItem(p, "costPerMillionRows")->valuedouble;
    const cJSON *bl = cJSON_GetObjectItem(j, "baselines");
    for (const cJSON *b = bl ? bl->child : NULL; b != NULL; b = b->next)
        if (cJSON_IsTrue(cJSON_GetObjectItem(b, "feasible")))
            cr_expect_leq(best,
                          cJSON_GetObjectItem(b, "costPerMillionRows")->valuedouble * 1.000001,
                          "baseline %s is cheaper per row", b->string);
    const cJSON *notes = cJSON_GetObjectItem(j, "notes");
    int fallback = 0;
    for (int i = 0; i < cJSON_GetArraySize(notes); i++)
        fallback |= strstr(cJSON_GetArrayItem(notes, i)->valuestring, "CPU fallback") != NULL;
    cr_expect(fallback, "no note about the CPU fallback:\n%s", out);
    cJSON_Delete(j);
    free(out);
    char path[512];
    snprintf(path, sizeof path, "%s/out/_SUCCESS", dir);
    cr_expect_neq(access(path, F_OK), 0, "profiling must not write the pipeline's sink");
}

Test(plan_cli, run_plan_takes_the_chosen_shape, .init = setup, .fini = teardown, .timeout = 120)
{
    write_pipeline("p.yaml", "bench.sleep", "{msPerRecord: 0.005}", "rowsPerSecond: 20000");
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cd %s && %s run p.yaml --cpus 2 --gpus 1 --plan 2>&1", dir,
             sb_test_bin("streambatch"));
    int rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(sb_test_has_line(out, "stage embed allows cpu, gpu: runs on gpu, the plan's choice "
                                    "(--plan)"),
              "%s", out);
    cr_expect(strstr(out, "parts 2000 rows") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd %s && %s run p.yaml --cpus 2 2>&1", dir,
             sb_test_bin("streambatch"));
    rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(sb_test_has_line(out, "stage embed allows cpu, gpu: runs on cpu, the first listed "
                                    "(run --plan to take the plan's choice, or reorder "
                                    "placement)"),
              "%s", out);
    free(out);
}

/* 64 --set took every slot of the overrides: --plan's choice was dropped without a word and the
 * stage ran on its first listed shape. Now they all fit (or the run is refused). */
Test(plan_cli, run_plan_with_64_sets_still_takes_the_chosen_shape, .init = setup, .fini = teardown,
     .timeout = 120)
{
    write_pipeline("p.yaml", "bench.sleep", "{msPerRecord: 0.005}", "rowsPerSecond: 20000");
    char cmd[8192], *out = NULL;
    int n = snprintf(cmd, sizeof cmd, "cd %s && %s run p.yaml --cpus 2 --gpus 1 --plan", dir,
                     sb_test_bin("streambatch"));
    for (int i = 0; i < 64; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --set metadata.labels.k%d=v", i);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>&1");
    int rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(sb_test_has_line(out, "stage embed allows cpu, gpu: runs on gpu, the plan's choice "
                                    "(--plan)"),
              "%s", out);
    /* on cpu the three stages would fuse into one op of the cpu pool */
    cr_expect(strstr(out, "parse+embed+post") == NULL, "%s", out);
    free(out);
}

Test(plan_cli, usage_errors_exit_2)
{
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"", "streambatch plan: no pipeline file given"},
        {"p.yaml -o yaml", "streambatch plan: -o takes json or text, got \"yaml\""},
        {"p.yaml --capacity tpu=4", "streambatch plan: --capacity: unknown key \"tpu\" (cpu, gpu, "
                                    "memory)"},
        {"p.yaml --capacity cpu", "streambatch plan: --capacity: \"cpu\" is not KEY=QUANTITY "
                                  "(cpu=64, gpu=4, memory=256Gi)"},
        {"p.yaml --bogus", "streambatch plan: unknown option --bogus"},
        {"/nonexistent/p.yaml", "/nonexistent/p.yaml: "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[1024], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s plan %s 2>&1", sb_test_bin("streambatch"), cases[i].args);
        int rc = sb_test_run(cmd, &out);
        cr_expect_eq(rc, 2, "%s: exit %d\n%s", cases[i].args, rc, out);
        cr_expect(strstr(out, cases[i].says) != NULL, "%s: want \"%s\", got:\n%s", cases[i].args,
                  cases[i].says, out);
        free(out);
    }
}
