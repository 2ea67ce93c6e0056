/* streambatch-controller as a real process against a private test cluster (tests/k8s/cluster.sh,
 * via tests/helpers/kube_cluster.h): a Pipeline created with kubectl runs on worker pods (the
 * node agent runs bin/streambatch-worker) and reaches Succeeded with the same output as the
 * input, its pods deleted and its Events posted; a spec only the controller can reject gets
 * InvalidSpec; deleting a running Pipeline removes its pods, then its finalizer. The full
 * end-to-end suite (Helm chart, failover, GPU pools) is tests/k8s/operator-test.sh. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "../helpers/kube_cluster.h"
#include "itest.h"

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    sb_kc_up("op-test", NULL);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    sb_kc_down();
}

static pid_t ctl_pid;

/* The last occurrence of needle in s (NULL if none). */
static const char *strrstr_(const char *s, const char *needle)
{
    const char *last = NULL;
    for (const char *p = strstr(s, needle); p != NULL; p = strstr(p + 1, needle))
        last = p;
    return last;
}

/* Starts the controller, with one more flag (a test's). */
static void ctl_start(const char *extra)
{
    ctl_pid = itest_controller_start(extra);
}

/* check: its exit status must be 0 (not for one just started: SIGTERM may come before it
 * handles it) */
static void ctl_stop(int check)
{
    int st = itest_controller_stop(&ctl_pid);
    cr_expect(!check || st == -1 || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
              "the controller exits 0 on SIGTERM");
}

static void setup(void)
{
    const char *e = getenv("SB_KC_ERROR");
    if (e != NULL)
        cr_assert_fail("no test cluster: %s", e);
    itest_mkdtemp("sb-optest");
    free(sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json, os\nos.makedirs('in')\nfor f in range(6):\n"
        "  with open('in/f%%02d.jsonl' %% f, 'w') as o:\n    for i in range(2000):\n"
        "      o.write(json.dumps({'id': f*100000+i, 'pad': 'x'*50}) + '\\\\n')\n\"",
        dir));
    itest_crd_apply();
    ctl_start("--status-interval=1s");
}

static void teardown(void)
{
    ctl_stop(1);
    free(sb_test_sh_out("rm -rf %s", dir));
}

TestSuite(operator, .init = setup, .fini = teardown, .timeout = 180);

/* write_pipeline with one stage `a` of STAGE_ARGS on a pool of 1 to 2 workers */
static void write_op_pipeline(const char *name, const char *stage_args, const char *extra)
{
    char stages[512];
    snprintf(stages, sizeof stages, "  - {name: a, %s, workers: {min: 1, max: 2}}\n", stage_args);
    write_pipeline(name, stages, extra);
}

/* Waits until jsonpath gives one of the wanted values (space-separated); returns the last. */
static char *wait_for(const char *name, const char *jsonpath, const char *want, int secs)
{
    char *v = NULL;
    for (int i = 0; i < secs * 2; i++) {
        free(v);
        v = kubectl("get pipeline %s -o jsonpath='%s'", name, jsonpath);
        char w[256];
        snprintf(w, sizeof w, " %s ", want);
        char needle[300];
        snprintf(needle, sizeof needle, " %s ", v);
        if (*v && strstr(w, needle) != NULL)
            return v;
        usleep(500 * 1000);
    }
    return v;
}

/* Applies dir/NAME.yaml and waits up to secs for the Pipeline to succeed (else the test fails,
 * with the controller's log). */
static void run_to_success(const char *name, int secs)
{
    free(kubectl("apply -f %s/%s.yaml", dir, name));
    char *ph = wait_for(name, "{.status.phase}", "Succeeded Failed", secs);
    cr_assert_str_eq(ph, "Succeeded", "phase %s; controller log:\n%s", ph,
                     sb_test_sh_out("tail -30 %s/controller.log", dir));
    free(ph);
}

Test(operator, pipeline_succeeds_on_worker_pods)
{
    write_op_pipeline("wc", "op: identity", "");
    run_to_success("wc", 90);
    char *v = kubectl("get pipeline wc -o jsonpath='{.status.progress} "
                      "{.status.conditions[?(@.type==\"Complete\")].status} "
                      "{.status.checkpoint.parts} {.metadata.finalizers[0]}'");
    /* the checkpoint log beside the sink is removed once the sink is committed, and the
     * status keeps no checkpoint of a finished run */
    cr_expect_str_eq(v, "18/18 True  streambatch.dev/finalizer");
    free(v);
    v = sb_test_sh_out("test -e %s/out-wc/_streambatch && echo left || echo gone", dir);
    cr_expect_str_eq(v, "gone");
    free(v);
    v = sb_test_sh_out(
        "cat %s/out-wc/part-*.jsonl | sort | md5sum; cat %s/in/*.jsonl | sort | md5sum", dir, dir);
    cr_expect(strlen(v) > 40 && strncmp(v, v + strcspn(v, "\n") + 1, 32) == 0,
              "output differs from input: %s", v);
    free(v);
    v = sb_test_sh_out("test -f %s/out-wc/_SUCCESS && echo yes", dir);
    cr_expect_str_eq(v, "yes");
    free(v);
    /* pods go away */
    for (int i = 0; i < 40; i++) {
        v = kubectl("get pods -l streambatch.dev/pipeline=wc -o name");
        int none = *v == '\0' || strstr(v, "No resources") != NULL;
        free(v);
        if (none)
            break;
        usleep(500 * 1000);
    }
    v = kubectl("get pods -l streambatch.dev/pipeline=wc -o name");
    cr_expect(*v == '\0' || strstr(v, "No resources") != NULL, "pods left: %s", v);
    free(v);
    v = kubectl("get events --field-selector involvedObject.name=wc "
                "-o jsonpath='{range .items[*]}{.reason} {end}'");
    cr_expect(strstr(v, "Started") && strstr(v, "WorkerPodsCreated") && strstr(v, "Succeeded"),
              "events: %s", v);
    cr_expect(strstr(v, "Started") == strrstr_(v, "Started"),
              "started more than once (a stale cache restarted the finished run): %s", v);
    free(v);
    free(kubectl("delete pipeline wc --timeout=30s"));
}

/* Cost-aware placement: a stage with a placement choice and a target is planned at start from
 * its declared cost (bench.spin msPerRecord): status.plan records the shape, workers, predicted
 * rows/s and cost, and a Planned event names the plan; the run still succeeds. */
Test(operator, placement_plan_in_status_and_event)
{
    write_op_pipeline("pl",
                      "op: bench.spin, args: {msPerRecord: 0.05}, placement: [cpu, gpu], "
                      "resources: {cpu: 500m}",
                      "  execution: {target: {rowsPerSecond: 5000}}\n");
    run_to_success("pl", 90);
    /* cpu: 20000 rows/s per pod for 0.02/h; gpu (the table's 2.50/h) costs far more per row */
    char *v = kubectl("get events --field-selector involvedObject.name=pl,reason=Planned "
                      "-o jsonpath='{.items[0].message}'");
    cr_expect_str_eq(v, "a=cpu:1; 20k rows/s for 0.02 per hour (0.0002778 per million rows), "
                        "rates declared");
    free(v);
    v = kubectl("get pipeline pl -o jsonpath='{.status.plan.feasible} "
                "{.status.plan.stages[0].name} {.status.plan.stages[0].shape} "
                "{.status.plan.poolsSized} {.status.plan.prices.gpuType} "
                "{.status.plan.target.rowsPerSecond}'");
    cr_expect_str_eq(v, "true a cpu true default 5000");
    free(v);
    /* the measured rate (parsing included) may differ from the declared one by more than 25%:
     * then the declared plan was replaced at once, with a Replanned event */
    char *rates = kubectl("get pipeline pl -o jsonpath='{.status.plan.rates} "
                          "{.status.plan.replans}'");
    char *w = kubectl("get pipeline pl -o jsonpath='{.status.plan.stages[0].workers} "
                      "{.status.plan.costPerHour}'");
    v = kubectl("get events --field-selector involvedObject.name=pl,reason=Replanned "
                "-o jsonpath='{range .items[*]}{.message}{end}'");
    if (strncmp(rates, "measured ", 9) == 0) {
        cr_expect(strcmp(rates, "measured 0") != 0, "a measured plan is a re-plan: %s", rates);
        cr_expect(strncmp(v, "stage a runs at ", 16) == 0 && strstr(v, "rates measured"),
                  "Replanned event: %s", v);
    } else {
        cr_expect_str_eq(rates, "declared 0");
        cr_expect_str_eq(w, "1 0.02");
    }
    free(w);
    free(v);
    free(rates);
    free(kubectl("delete pipeline pl --timeout=30s"));
}

/* Without declared rates (identity has no declared cost) the first plan waits for measured
 * ones: once each op has completed tasks, status.plan has rates "measured" and a Planned event
 * says so. bench.sleep keeps the run going for several seconds (12000 rows x 1 ms over at most
 * 2 pods). */
Test(operator, placement_plan_from_measured_rates)
{
    write_op_pipeline("plm",
                      "op: identity, workers: {min: 1, max: 2}}\n"
                      "  - {name: b, op: bench.sleep, args: {msPerRecord: 1}",
                      "  execution: {target: {rowsPerSecond: 1000}}\n");
    run_to_success("plm", 120);
    char *v = kubectl("get pipeline plm -o jsonpath='{.status.plan.rates} "
                      "{.status.plan.stages[0].name} {.status.plan.stages[1].name} "
                      "{.status.plan.stages[1].shape} {.status.plan.target.rowsPerSecond}'");
    cr_expect_str_eq(v, "measured a b cpu 1000");
    free(v);
    v = kubectl("get pipeline plm -o jsonpath='{.status.plan.stages[1].rowsPerSecondPerWorker}'");
    double rate = atof(v);
    /* 1 ms per record: at most about 1000 rows/s per task slot; a and b run fused as one op
     * (one pool), whose time the model splits evenly over them: up to 2000 per stage */
    cr_expect(rate > 200 && rate < 2200, "measured rate of b per pod: %s", v);
    free(v);
    v = kubectl("get events --field-selector involvedObject.name=plm,reason=Planned "
                "-o jsonpath='{.items[0].message}'");
    cr_expect(strstr(v, "rates measured") != NULL, "event: %s", v);
    free(v);
    free(kubectl("delete pipeline plm --timeout=30s"));
}

/* A re-plan moves a running stage to another shape. b (bench.spin, placement [cpu, gpu]) is
 * planned on cpu from the declared rates: 2 ms per record on each of a cpu pod's task slots (4
 * per core of this machine) against 1/cores ms on each of a gpu pod's 2 slots, the gpu pod
 * costing 3x a cpu pod, makes b on cpu 2x cheaper per row. Measured, the cpu slots share this
 * machine's cores (at most cores / 2 ms rows/s per pod: a quarter of the declared rate), which
 * makes b on gpu 2x cheaper: the re-plan (at once, the drift is -75% or more) moves b while it
 * runs (an op of its own, its tasks then go to a gpu worker pod the pool's autoscaler starts),
 * and the output is every input row exactly once. The gpu pool has no pod before the move. */
/* A pipeline of a cpu stage a (one pod) and a stage b that allows cpu and gpu (b_max pods at
 * most); exec_more: more of execution (", target: {...}" or ""). */
static void write_choice_pipeline_more(const char *name, const char *a_args, const char *b_args,
                                       const char *b_gpu_args, const char *b_gpus, int b_max,
                                       long slots, const char *pricing, const char *exec_more)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(
        f,
        "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
        "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 16Ki}\n"
        "  stages:\n  - {name: a, %s, resources: {cpu: '1'}, workers: {min: 1, max: 1}}\n"
        "  - {name: b, op: bench.spin, args: {%s}, placement: [cpu, gpu],\n"
        "     shapeArgs: {gpu: {%s}}, resources: {cpu: '1', gpu: %s}, workers: {min: 1, max: %d}}\n"
        "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n"
        "  execution: {cpuSlotsPerWorker: %ld, pricing: {%s}%s}\n",
        name, dir, a_args, b_args, b_gpu_args, b_gpus, b_max, dir, name, slots, pricing, exec_more);
    fclose(f);
}

static void write_choice_pipeline(const char *name, const char *a_args, const char *b_args,
                                  const char *b_gpu_args, const char *b_gpus, long slots,
                                  const char *pricing)
{
    write_choice_pipeline_more(name, a_args, b_args, b_gpu_args, b_gpus, 1, slots, pricing, "");
}

/* Line numbers in the controller's log of the first "stage moved" and of the first gpu pod. */
static void moved_then_gpu_pod(long *moved_at, long *gpu_at)
{
    char *v = sb_test_sh_out("grep -n -m1 'stage moved' %s/controller.log | cut -d: -f1; "
                             "grep -n -m1 'worker pod in pool gpu' %s/controller.log | cut -d: -f1",
                             dir, dir);
    *moved_at = *gpu_at = 0;
    cr_expect_eq(sscanf(v, "%ld %ld", moved_at, gpu_at), 2, "%s", v);
    free(v);
}

static void expect_output_is_input(const char *name)
{
    char *v = sb_test_sh_out("cat %s/out-%s/part-*.jsonl | sort | md5sum; "
                             "cat %s/in/*.jsonl | sort | md5sum",
                             dir, name, dir);
    cr_expect(strlen(v) > 40 && strncmp(v, v + strcspn(v, "\n") + 1, 32) == 0,
              "output differs from input: %s", v);
    free(v);
}

Test(operator, a_replan_moves_a_running_stage_to_the_gpu_pool)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long slots = cores * 4 > 64 ? 64 : cores * 4;
    char gpu_args[64];
    snprintf(gpu_args, sizeof gpu_args, "msPerRecord: %.4f", 4.0 / (double)slots);
    write_choice_pipeline("mv", "op: bench.spin, args: {msPerRecord: 0.01}", "msPerRecord: 2",
                          gpu_args, "1", slots, "cpuCoreHour: 1, memoryGiBHour: 0, gpuHour: 2");
    run_to_success("mv", 150);
    char *v = kubectl("get events --field-selector involvedObject.name=mv,reason=Planned "
                      "-o jsonpath='{.items[0].message}'");
    cr_expect(strncmp(v, "a=cpu:1 b=cpu:1; ", 17) == 0 && strstr(v, "rates declared"),
              "Planned: %s", v);
    free(v);
    v = kubectl("get events --field-selector involvedObject.name=mv,reason=Replanned "
                "-o jsonpath='{range .items[*]}{.message}|{end}'");
    cr_expect(strstr(v, "b=gpu:1") && strstr(v, "; moved b cpu->gpu while running"),
              "Replanned: %s", v);
    free(v);
    v = kubectl("get pipeline mv -o jsonpath='{.status.plan.moves} {.status.plan.moved} "
                "{.status.plan.stages[1].shape} {.status.plan.rates} {.status.stages[0].name} "
                "{.status.stages[0].pool} {.status.stages[1].name} {.status.stages[1].pool}'");
    cr_expect_str_eq(v, "1 b cpu->gpu gpu measured a cpu b gpu");
    free(v);
    /* b's tasks ran on the gpu worker pod after the move */
    v = sb_test_sh_out("grep -c 'stage moved' %s/controller.log; "
                       "grep 'worker registered' %s/controller.log | grep -c 'pool=gpu'",
                       dir, dir);
    cr_expect_str_eq(v, "1\n1", "moves, gpu workers registered: %s\n%s", v,
                     sb_test_sh_out("grep -E 'registered|moved|lost|pod' %s/controller.log", dir));
    free(v);
    long moved_at, gpu_at;
    moved_then_gpu_pod(&moved_at, &gpu_at);
    cr_expect_lt(moved_at, gpu_at, "a gpu pod before the move (log lines %ld, %ld)", moved_at,
                 gpu_at);
    expect_output_is_input("mv");
    free(kubectl("delete pipeline mv --timeout=30s"));
}

/* Profiling is part of the run: b declares no rate on either shape (bench.spin msPerMB), so it
 * is first measured on cpu, then moved to the gpu pool to be measured there (the first plan,
 * made when every op completed tasks), then placed by both measured rates: the gpu pod costs
 * 100x a cpu pod for about the same speed, so b goes back to cpu. Every input row once. */
Test(operator, a_shape_without_a_rate_is_measured_by_moving_the_stage_there)
{
    write_choice_pipeline("pr", "op: identity", "msPerMB: 20000", "msPerMB: 20000", "1", 2,
                          "cpuCoreHour: 1, memoryGiBHour: 0, gpuHour: 100");
    run_to_success("pr", 150);
    char *v = kubectl("get events --field-selector involvedObject.name=pr,reason=Planned "
                      "-o jsonpath='{.items[0].message}'");
    cr_expect(strncmp(v, "a=cpu:1 b=cpu:1; ", 17) == 0 && strstr(v, "rates measured") &&
                  strstr(v, "; moved b cpu->gpu (to measure it) while running"),
              "Planned: %s", v);
    free(v);
    v = kubectl("get events --field-selector involvedObject.name=pr,reason=Replanned "
                "-o jsonpath='{range .items[*]}{.message}|{end}'");
    cr_expect(strncmp(v, "a=cpu:1 b=cpu:1; ", 17) == 0 &&
                  strstr(v, "; moved b gpu->cpu while running|") != NULL,
              "Replanned: %s", v);
    free(v);
    v = kubectl("get pipeline pr -o jsonpath='{.status.plan.moves} {.status.plan.replans} "
                "{.status.plan.stages[1].shape} {.status.stages[1].name} "
                "{.status.stages[1].pool}'");
    cr_expect_str_eq(v, "2 1 cpu b cpu");
    free(v);
    long moved_at, gpu_at;
    moved_then_gpu_pod(&moved_at, &gpu_at);
    cr_expect_lt(moved_at, gpu_at, "a gpu pod before the move (log lines %ld, %ld)", moved_at,
                 gpu_at);
    v = sb_test_sh_out("grep 'stage moved' %s/controller.log | grep -o 'from=[a-z]* to=[a-z]*'",
                       dir);
    cr_expect_str_eq(v, "from=cpu to=gpu\nfrom=gpu to=cpu");
    free(v);
    expect_output_is_input("pr");
    free(kubectl("delete pipeline pr --timeout=30s"));
}

/* A shape that cannot be measured: b's gpu pod asks for 2 GPUs, and the test cluster's gpu node
 * has 1, so the pod stays Pending. b goes there to be measured (as above), gets no measurement
 * within the re-plan interval (4 s here), and goes back to cpu with a NotMeasured Warning; gpu
 * is then left out of its plans, and the run ends with every input row once. */
Test(operator, a_shape_that_cannot_be_measured_is_given_up)
{
    ctl_stop(0); /* again, with a short re-plan interval */
    ctl_start("--replan-interval=4s");
    write_choice_pipeline("nm", "op: identity", "msPerMB: 20000", "msPerMB: 20000", "2", 2,
                          "cpuCoreHour: 1, memoryGiBHour: 0, gpuHour: 1");
    run_to_success("nm", 150);
    char *v = kubectl("get events --field-selector involvedObject.name=nm,reason=NotMeasured "
                      "-o jsonpath='{.items[0].type} {.items[0].message}'");
    cr_expect_str_eq(v, "Warning stage b completed too few tasks on gpu to measure it within 4 s "
                        "(see the WorkersPending condition): back on cpu; gpu is left out of its "
                        "plans");
    free(v);
    v = sb_test_sh_out("grep 'stage moved' %s/controller.log | grep -o 'from=[a-z]* to=[a-z]*'",
                       dir);
    cr_expect_str_eq(v, "from=cpu to=gpu\nfrom=gpu to=cpu", "moved once each way: %s", v);
    free(v);
    v = kubectl("get pipeline nm -o jsonpath='{.status.stages[1].name} {.status.stages[1].pool}'");
    cr_expect_str_eq(v, "b cpu");
    free(v);
    expect_output_is_input("nm");
    free(kubectl("delete pipeline nm --timeout=30s"));
}

/* Pending pods are not capacity. With a target of 1500 rows/s, b is planned on gpu pods (1000
 * rows/s each for 1.25/h against 500 rows/s for 1/h on cpu), but the test cluster has 1 GPU:
 * the other gpu pods stay Pending ("Insufficient nvidia.com/gpu"), so the plan is made again at
 * once within the GPUs the running pods hold (1: 1000 rows/s on gpu, short of the target) and b
 * moves to cpu pods while it runs. The status records the capacity; the output is whole. */
Test(operator, pending_pods_are_not_capacity)
{
    write_choice_pipeline_more(
        "cp", "op: bench.spin, args: {msPerRecord: 0.01}", "msPerRecord: 2", "msPerRecord: 2", "1",
        4, 1, "cpuCoreHour: 1, memoryGiBHour: 0, gpuHour: 0.25", ", target: {rowsPerSecond: 1500}");
    run_to_success("cp", 150);
    char *v = kubectl("get events --field-selector involvedObject.name=cp,reason=Planned "
                      "-o jsonpath='{.items[0].message}'");
    cr_expect(strncmp(v, "a=cpu:1 b=gpu:", 14) == 0 && strstr(v, "rates declared"), "Planned: %s",
              v);
    free(v);
    v = kubectl("get events --field-selector involvedObject.name=cp,reason=Replanned "
                "-o jsonpath='{.items[0].message}'");
    cr_expect(strncmp(v, "pool gpu: ", 10) == 0 && strstr(v, " Pending (") &&
                  strstr(v, "Insufficient nvidia.com/gpu") && strstr(v, "; room for 1 GPUs; ") &&
                  strstr(v, "; a=cpu:1 b=cpu:") &&
                  strstr(v, "rates declared; moved b gpu->cpu while running"),
              "Replanned: %s", v);
    free(v);
    v = kubectl("get pipeline cp -o jsonpath='{.status.plan.capacity.gpus} "
                "{.status.plan.capacity.cpuCores} {.status.stages[1].name} "
                "{.status.stages[1].pool}'");
    cr_expect_str_eq(v, "1  b cpu", "the GPUs capped, the CPUs not");
    free(v);
    expect_output_is_input("cp");
    free(kubectl("delete pipeline cp --timeout=30s"));
}

Test(operator, invalid_spec_fails_with_the_field_named)
{
    write_op_pipeline("bad", "op: identity", "  execution: {memoryBudget: 32Ki}\n");
    free(kubectl("apply -f %s/bad.yaml", dir));
    char *ph = wait_for("bad", "{.status.phase}", "Failed Succeeded", 30);
    cr_expect_str_eq(ph, "Failed");
    free(ph);
    char *v =
        kubectl("get pipeline bad -o jsonpath='{.status.conditions[?(@.type==\"InvalidSpec\")]"
                ".status} {.status.conditions[?(@.type==\"InvalidSpec\")].message}'");
    cr_expect(strncmp(v, "True spec.execution.memoryBudget: ", 34) == 0, "%s", v);
    free(v);
    v = kubectl("get events --field-selector involvedObject.name=bad,reason=InvalidSpec "
                "-o jsonpath='{.items[0].type}'");
    cr_expect_str_eq(v, "Warning");
    free(v);
    free(kubectl("delete pipeline bad --timeout=30s"));
}

Test(operator, delete_mid_run_removes_pods_then_finalizer)
{
    write_op_pipeline("del", "op: bench.sleep, args: {msPerMB: 60000}", "");
    free(kubectl("apply -f %s/del.yaml", dir));
    char *ph = wait_for("del", "{.status.phase}", "Running", 30);
    cr_expect_str_eq(ph, "Running");
    free(ph);
    char *v = NULL;
    for (int i = 0; i < 40; i++) {
        free(v);
        v = kubectl("get pods -l streambatch.dev/pipeline=del -o name");
        if (strstr(v, "pod/") != NULL)
            break;
        usleep(250 * 1000);
    }
    cr_expect(strstr(v, "pod/del-cpu-") != NULL, "no worker pods: %s", v);
    free(v);
    v = kubectl("delete pipeline del --timeout=60s");
    cr_expect(strstr(v, "deleted") != NULL, "%s", v);
    free(v);
    v = kubectl("get pods -l streambatch.dev/pipeline=del -o name");
    cr_expect(*v == '\0' || strstr(v, "No resources") != NULL, "pods left after delete: %s", v);
    free(v);
    v = sb_test_sh_out("test -f %s/out-del/_SUCCESS && echo yes || echo no", dir);
    cr_expect_str_eq(v, "no");
    free(v);
}

Test(operator, ttl_deletes_the_finished_pipeline_and_metrics_count_it)
{
    write_op_pipeline("ttl", "op: identity", "  ttlSecondsAfterFinished: 2\n");
    free(kubectl("apply -f %s/ttl.yaml", dir));
    char *ph = wait_for("ttl", "{.status.phase}", "Succeeded Failed", 90);
    cr_expect_str_eq(ph, "Succeeded");
    free(ph);
    char *v = NULL;
    int gone = 0;
    for (int i = 0; i < 60 && !gone; i++) { /* 2 s after completionTime, plus a requeue */
        free(v);
        v = kubectl("get pipeline ttl -o name");
        gone = strstr(v, "NotFound") != NULL;
        if (!gone)
            usleep(500 * 1000);
    }
    cr_expect(gone, "still there 30 s after finishing: %s", v);
    free(v);
    /* the live /metrics endpoint (port from the controller's log line) */
    v = sb_test_sh_out(
        "port=$(grep -o 'msg=\\\"metrics and health endpoints\\\".*port=[0-9]*' %s/controller.log"
        " | grep -o '[0-9]*$'); curl -s --max-time 5 http://127.0.0.1:$port/metrics; "
        "curl -s --max-time 5 -o /dev/null -w 'healthz=%%{http_code}\\n' "
        "http://127.0.0.1:$port/healthz",
        dir);
    cr_expect(strstr(v, "controller_runtime_reconcile_total{") != NULL, "%s", v);
    cr_expect(strstr(v, "workqueue_adds_total") != NULL, "%s", v);
    cr_expect(strstr(v, "healthz=200") != NULL, "%s", v);
    free(v);
}
