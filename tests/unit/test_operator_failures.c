/* Failures that speak (issue 38): what a worker pod's status says is wrong (podstate.h) — a
 * missing Secret, an image that cannot be pulled, a crash loop, the scheduler's Unschedulable —
 * the once-per-class events, the pool failure rule after the stall timeout, the WorkersFailing
 * condition with the Reason column, and the printer-column cells every phase fills. Pods are
 * written as the kubelet and the scheduler write them. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "controller/ctl/ctl.h"
#include "controller/operator/operator_status.h"
#include "controller/operator/podstate.h"

static const char *sget(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static const char *cond_str(const cJSON *st, const char *type, const char *k)
{
    return sget(sb_operator_condition_get(st, type), k);
}

/* A Pending pod, scheduled (PodScheduled True), whose container "worker" waits with reason and
 * message; reason NULL: no container status yet. */
static cJSON *waiting_pod(const char *phase, const char *reason, const char *message)
{
    char buf[2048];
    if (reason == NULL)
        snprintf(buf, sizeof buf,
                 "{\"metadata\":{\"name\":\"sb-x-cpu-0\"},\"status\":{\"phase\":\"%s\","
                 "\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"}]}}",
                 phase);
    else
        snprintf(buf, sizeof buf,
                 "{\"metadata\":{\"name\":\"sb-x-cpu-0\"},\"status\":{\"phase\":\"%s\","
                 "\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"},"
                 "{\"type\":\"Ready\",\"status\":\"False\",\"reason\":\"ContainersNotReady\"}],"
                 "\"containerStatuses\":[{\"name\":\"worker\",\"ready\":false,\"restartCount\":0,"
                 "\"state\":{\"waiting\":{\"reason\":\"%s\",\"message\":\"%s\"}}}]}}",
                 phase, reason, message);
    cJSON *p = cJSON_Parse(buf);
    cr_assert_not_null(p, "test pod JSON: %s", buf);
    return p;
}

Test(podstate, missing_secret_is_named_with_the_kubelets_reason)
{
    cJSON *pod =
        waiting_pod("Pending", "CreateContainerConfigError", "secret \\\"s3-creds\\\" not found");
    sb_podstate s;
    sb_podstate_read(pod, &s);
    cr_expect_str_eq(s.unschedulable, "", "scheduled: not Unschedulable");
    cr_expect_str_eq(s.reason, "CreateContainerConfigError");
    cr_expect_str_eq(s.message, "secret \"s3-creds\" not found");
    cr_expect_str_eq(s.container, "worker");
    cr_expect_eq(s.cls, SB_PODSTATE_CONFIG);
    char d[256];
    sb_podstate_describe("sb-x-cpu-0", &s, d, sizeof d);
    cr_expect_str_eq(d,
                     "pod sb-x-cpu-0: CreateContainerConfigError: secret \"s3-creds\" not found");
    cJSON_Delete(pod);
}

Test(podstate, unschedulable_only_from_the_scheduler)
{
    cJSON *pod =
        cJSON_Parse("{\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"PodScheduled\","
                    "\"status\":\"False\",\"reason\":\"Unschedulable\",\"message\":\"0/2 nodes are "
                    "available: 2 Insufficient nvidia.com/gpu.\"}]}}");
    sb_podstate s;
    sb_podstate_read(pod, &s);
    cr_expect_str_eq(s.unschedulable, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");
    cr_expect_eq(s.cls, 0, "not failing: nothing waits yet");
    char d[64] = "x";
    sb_podstate_describe("p", &s, d, sizeof d);
    cr_expect_str_eq(d, "", "a pod that is not failing describes as nothing");
    cJSON_Delete(pod);

    /* a gated pod is not "cannot fit"; without a message the reason stands in */
    pod = cJSON_Parse("{\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":"
                      "\"False\",\"reason\":\"SchedulingGated\",\"message\":\"gated\"}]}}");
    sb_podstate_read(pod, &s);
    cr_expect_str_eq(s.unschedulable, "");
    cJSON_Delete(pod);
    pod = cJSON_Parse("{\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":"
                      "\"False\",\"reason\":\"Unschedulable\"}]}}");
    sb_podstate_read(pod, &s);
    cr_expect_str_eq(s.unschedulable, "Unschedulable");
    cJSON_Delete(pod);

    /* the bug of issue 38: a pod stuck in CreateContainerConfigError is scheduled */
    pod = waiting_pod("Pending", "CreateContainerConfigError", "secret \\\"a\\\" not found");
    sb_podstate_read(pod, &s);
    cr_expect_str_eq(s.unschedulable, "");
    cJSON_Delete(pod);
}

Test(podstate, normal_waiting_is_not_failing)
{
    const char *normal[] = {"ContainerCreating", "PodInitializing", "SomethingNew"};
    for (size_t i = 0; i < 3; i++) {
        cJSON *pod = waiting_pod("Pending", normal[i], "");
        sb_podstate s;
        sb_podstate_read(pod, &s);
        cr_expect_eq(s.cls, 0, "%s", normal[i]);
        cr_expect_str_eq(s.reason, "", "%s", normal[i]);
        cJSON_Delete(pod);
    }
    cJSON *pod = waiting_pod("Pending", NULL, NULL);
    sb_podstate s;
    sb_podstate_read(pod, &s);
    cr_expect_eq(s.cls, 0);
    cJSON_Delete(pod);
}

Test(podstate, classes)
{
    static const struct {
        const char *reason;
        unsigned cls;
    } c[] = {
        {"CreateContainerConfigError", SB_PODSTATE_CONFIG},
        {"ErrImagePull", SB_PODSTATE_IMAGE},
        {"ImagePullBackOff", SB_PODSTATE_IMAGE},
        {"InvalidImageName", SB_PODSTATE_IMAGE},
        {"CrashLoopBackOff", SB_PODSTATE_CRASH},
        {"CreateContainerError", SB_PODSTATE_CREATE},
        {"RunContainerError", SB_PODSTATE_CREATE},
        {"ContainerCreating", 0},
        {"PodInitializing", 0},
        {"crashloopbackoff", 0}, /* the kubelet's reasons are exact */
        {"", 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        cr_expect_eq(sb_podstate_class(c[i].reason), c[i].cls, "%s", c[i].reason);
    cr_expect_eq(sb_podstate_class(NULL), 0);
}

Test(podstate, crash_loop_in_a_running_pod_and_init_containers_first)
{
    cJSON *pod = waiting_pod("Running", "CrashLoopBackOff",
                             "back-off 10s restarting failed container=worker pod=sb-x-cpu-0_ns");
    sb_podstate s;
    sb_podstate_read(pod, &s);
    cr_expect_eq(s.cls, SB_PODSTATE_CRASH);
    cr_expect_str_eq(s.reason, "CrashLoopBackOff");
    cJSON_Delete(pod);

    pod = cJSON_Parse(
        "{\"status\":{\"phase\":\"Pending\",\"initContainerStatuses\":[{\"name\":\"fetch\","
        "\"state\":{\"waiting\":{\"reason\":\"ImagePullBackOff\",\"message\":\"Back-off pulling "
        "image \\\"nope:1\\\"\"}}}],\"containerStatuses\":[{\"name\":\"worker\",\"state\":"
        "{\"waiting\":{\"reason\":\"PodInitializing\"}}}]}}");
    sb_podstate_read(pod, &s);
    cr_expect_str_eq(s.container, "fetch");
    cr_expect_str_eq(s.reason, "ImagePullBackOff");
    cr_expect_str_eq(s.message, "Back-off pulling image \"nope:1\"");
    char d[256];
    sb_podstate_describe("p", &s, d, sizeof d);
    cr_expect_str_eq(d, "pod p: ImagePullBackOff: Back-off pulling image \"nope:1\"");
    cJSON_Delete(pod);

    /* no message: the reason alone */
    pod = waiting_pod("Pending", "InvalidImageName", "");
    sb_podstate_read(pod, &s);
    sb_podstate_describe("p", &s, d, sizeof d);
    cr_expect_str_eq(d, "pod p: InvalidImageName");
    cJSON_Delete(pod);
}

Test(podstate, malformed_pods_read_as_nothing_wrong)
{
    const char *bad[] = {
        "{}",
        "{\"status\":7}",
        "{\"status\":{\"containerStatuses\":\"worker\"}}",
        "{\"status\":{\"containerStatuses\":[7,{\"state\":null},{\"state\":{\"waiting\":{"
        "\"reason\":5}}}]}}",
        "{\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":false}]}}",
        "[]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *pod = cJSON_Parse(bad[i]);
        cr_assert_not_null(pod, "%s", bad[i]);
        sb_podstate s;
        memset(&s, 'x', sizeof s);
        sb_podstate_read(pod, &s);
        cr_expect_eq(s.cls, 0, "%s", bad[i]);
        cr_expect_str_eq(s.unschedulable, "", "%s", bad[i]);
        cr_expect_str_eq(s.reason, "", "%s", bad[i]);
        cJSON_Delete(pod);
    }
    sb_podstate s;
    sb_podstate_read(NULL, &s);
    cr_expect_eq(s.cls, 0);
    /* a message past the buffer is cut, never overflows */
    char longmsg[1000];
    memset(longmsg, 'm', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = '\0';
    cJSON *pod = waiting_pod("Pending", "CreateContainerError", longmsg);
    sb_podstate_read(pod, &s);
    cr_expect_eq(strlen(s.message), sizeof s.message - 1);
    char d[100];
    sb_podstate_describe("p", &s, d, sizeof d);
    cr_expect_eq(strlen(d), sizeof d - 1);
    cr_expect_eq(strncmp(d, "pod p: CreateContainerError: mmm", 32), 0);
    cJSON_Delete(pod);
}

/* One event per pod and class: ErrImagePull and ImagePullBackOff alternate at every back-off and
 * must not post one each time; a different trouble later is news. */
Test(podstate, events_once_per_class)
{
    unsigned warned = 0;
    sb_podstate s;
    const char *seq[] = {"ContainerCreating", "ErrImagePull",     "ImagePullBackOff",
                         "ErrImagePull",      "ImagePullBackOff", "ContainerCreating",
                         "CrashLoopBackOff",  "CrashLoopBackOff", "ErrImagePull"};
    int want[] = {0, 1, 0, 0, 0, 0, 1, 0, 0};
    int posted = 0;
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        cJSON *pod = waiting_pod("Pending", seq[i], "m");
        sb_podstate_read(pod, &s);
        int w = sb_podstate_warn(&warned, &s);
        cr_expect_eq(w, want[i], "step %zu (%s): %d", i, seq[i], w);
        posted += w;
        cJSON_Delete(pod);
    }
    cr_expect_eq(posted, 2);
    cr_expect_eq(warned, SB_PODSTATE_IMAGE | SB_PODSTATE_CRASH);
}

/* Every live pod of the pool failing for the stall timeout fails the run; one pod that works,
 * or a recovery, resets the clock. */
Test(podstate, pool_rule_after_the_stall_timeout)
{
    uint64_t since = 0, T = 20000;
    cr_expect_eq(sb_podstate_pool_rule(&since, 0, 0, 1000, T), 0, "no pod: nothing to say");
    cr_expect_eq(sb_podstate_pool_rule(&since, 2, 1, 1000, T), 0, "one pod still fine");
    cr_expect_eq(since, 0);
    cr_expect_eq(sb_podstate_pool_rule(&since, 2, 2, 5000, T), 1);
    cr_expect_eq(since, 5000, "the clock starts when the last pod fails");
    cr_expect_eq(sb_podstate_pool_rule(&since, 2, 2, 5000 + T - 1, T), 1);
    cr_expect_eq(sb_podstate_pool_rule(&since, 2, 2, 5000 + T, T), 2, "timed out");
    /* the Secret appears: a pod starts, the clock resets */
    cr_expect_eq(sb_podstate_pool_rule(&since, 2, 1, 5000 + T + 1, T), 0);
    cr_expect_eq(since, 0);
    cr_expect_eq(sb_podstate_pool_rule(&since, 1, 1, 90000, T), 1, "failing again: a new clock");
    cr_expect_eq(sb_podstate_pool_rule(&since, 1, 1, 90000 + T - 1, T), 1);
    /* the stall timeout off: never fails */
    since = 0;
    cr_expect_eq(sb_podstate_pool_rule(&since, 1, 1, 1, 0), 1);
    cr_expect_eq(sb_podstate_pool_rule(&since, 1, 1, 1000000000, 0), 1);
    /* a clock at 0 still starts (0 means "not failing") */
    since = 0;
    cr_expect_eq(sb_podstate_pool_rule(&since, 1, 1, 0, T), 1);
    cr_expect_neq(since, 0);
}

Test(podstate, failure_message)
{
    static const struct {
        uint64_t ms;
        const char *d;
    } c[] = {{20000, "20s"}, {300000, "5m"}, {90000, "1m30s"}, {1500, "1500ms"}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char m[400], want[400];
        sb_podstate_failure_message("cpu", c[i].ms,
                                    "pod p: CreateContainerConfigError: secret \"s\" not found", m,
                                    sizeof m);
        snprintf(want, sizeof want,
                 "pool cpu: every worker pod has been failing for %s "
                 "(spec.execution.stallTimeout): pod p: CreateContainerConfigError: secret \"s\" "
                 "not found",
                 c[i].d);
        cr_expect_str_eq(m, want);
    }
}

/* The WorkersFailing condition, the failingCondition and the Reason column follow the pods: set
 * while a pod fails, cleared (False) when it recovers; the scheduler's WorkersPending is apart. */
Test(podstate, condition_and_reason_column)
{
    cJSON *st = cJSON_CreateObject();
    sb_operator_condition_set(st, "Running", 1, "Running", "", 1, "T1");
    sb_operator_condition_set(st, "WorkersPending", 0, "WorkersScheduled", "", 1, "T1");
    cr_expect_eq(sb_podstate_condition(st, "", "", 1, "T1"), 0);
    cr_expect_null(sb_operator_condition_get(st, "WorkersFailing"), "never failed: no condition");
    cr_expect_null(sget(st, "reason"));
    const char *m = "pod sb-x-cpu-0: CreateContainerConfigError: secret \"s3-creds\" not found";
    cr_expect_eq(sb_podstate_condition(st, "CreateContainerConfigError", m, 1, "T2"), 1);
    cr_expect_str_eq(cond_str(st, "WorkersFailing", "status"), "True");
    cr_expect_str_eq(cond_str(st, "WorkersFailing", "reason"), "CreateContainerConfigError");
    cr_expect_str_eq(cond_str(st, "WorkersFailing", "message"), m);
    cr_expect_str_eq(sget(st, "reason"), "CreateContainerConfigError");
    char fc[400];
    snprintf(fc, sizeof fc, "CreateContainerConfigError: %s", m);
    cr_expect_str_eq(sget(st, "failingCondition"), fc);
    cr_expect_eq(sb_podstate_condition(st, "CreateContainerConfigError", m, 1, "T3"), 0,
                 "the same again: no change, no write");
    /* the Secret appears, the pod starts */
    cr_expect_eq(sb_podstate_condition(st, "", "", 1, "T4"), 1);
    cr_expect_str_eq(cond_str(st, "WorkersFailing", "status"), "False");
    cr_expect_str_eq(cond_str(st, "WorkersFailing", "reason"), "NoPodFailing");
    cr_expect_str_eq(cond_str(st, "WorkersFailing", "lastTransitionTime"), "T4");
    cr_expect_null(sget(st, "reason"), "nothing wrong: no Reason");
    cr_expect_null(sget(st, "failingCondition"));
    /* the scheduler's verdict comes first in the list: its reason shows */
    sb_operator_condition_set(st, "WorkersPending", 1, "Unschedulable", "pool gpu: 0/2", 1, "T5");
    sb_podstate_condition(st, "ErrImagePull", "pod q: ErrImagePull", 1, "T5");
    cr_expect_str_eq(sget(st, "reason"), "Unschedulable");
    /* the run fails: Failed True, the rest False */
    sb_operator_condition_set(st, "WorkersPending", 0, "Finished", "", 1, "T6");
    sb_operator_condition_set(st, "WorkersFailing", 0, "Finished", "", 1, "T6");
    sb_operator_condition_set(st, "Failed", 1, "WorkersFailing", "pool cpu: ...", 1, "T6");
    cr_expect_str_eq(sget(st, "reason"), "WorkersFailing");
    cr_expect_str_eq(sget(st, "failingCondition"), "WorkersFailing: pool cpu: ...");
    cJSON_Delete(st);
}

/* Every phase fills the Partitions, Workers and Throughput cells the same way: InvalidSpec left
 * them blank, PlanFailed showed 0/0 and "0 rows/s". */
Test(podstate, cells_in_every_phase)
{
    /* InvalidSpec / Pending: a status with none of them */
    cJSON *st = cJSON_CreateObject();
    cJSON_AddStringToObject(st, "phase", "Failed");
    cr_expect_eq(sb_operator_status_cells(st), 1);
    cr_expect_str_eq(sget(st, "progress"), SB_OPERATOR_CELL_UNKNOWN);
    cr_expect_str_eq(sget(st, "workers"), "0/0");
    cr_expect_str_eq(sget(st, "throughput"), SB_OPERATOR_CELL_UNKNOWN);
    cr_expect_eq(sb_operator_status_cells(st), 0, "filled once");
    cJSON_Delete(st);
    /* a run's own figures are kept */
    st = cJSON_Parse("{\"progress\":\"3/10\",\"workers\":\"2/2\",\"throughput\":\"5 rows/s\"}");
    cr_expect_eq(sb_operator_status_cells(st), 0);
    cr_expect_str_eq(sget(st, "progress"), "3/10");
    cJSON_Delete(st);

    /* planning, and a plan that failed: the split count is not known */
    sb_ctl_snapshot s;
    memset(&s, 0, sizeof s);
    s.planning = 1;
    st = cJSON_CreateObject();
    cr_assert_eq(sb_operator_status_progress(st, &s, 0, 0, NULL, 0, 3.0), 0);
    cr_expect_str_eq(sget(st, "progress"), SB_OPERATOR_CELL_UNKNOWN);
    cr_expect_str_eq(sget(st, "throughput"), SB_OPERATOR_CELL_UNKNOWN);
    s.planning = 0;
    s.storage_failed = 1;
    cr_assert_eq(sb_operator_status_progress(st, &s, 0, 0, NULL, 0, 3.0), 0);
    cr_expect_str_eq(sget(st, "progress"), SB_OPERATOR_CELL_UNKNOWN, "PlanFailed: not 0/0");
    cr_expect_str_eq(sget(st, "throughput"), SB_OPERATOR_CELL_UNKNOWN);
    /* planned: the figures, also for an empty source */
    s.storage_failed = 0;
    cr_assert_eq(sb_operator_status_progress(st, &s, 0, 0, NULL, 0, 3.0), 0);
    cr_expect_str_eq(sget(st, "progress"), "0/0", "a source of no split is 0/0, truly");
    cr_expect_str_eq(sget(st, "throughput"), "0 rows/s");
    cr_assert_eq(sb_operator_status_progress(st, &s, 8, 2, NULL, 0, 3.0), 0);
    cr_expect_str_eq(sget(st, "progress"), "2/8");
    cJSON_Delete(st);
}

/* Worker pods never restart: a worker that crashes as it starts makes a stream of new pods. From
 * SB_PODSTATE_CHURN_MIN in a row the pool is failing; a pod that ran a while, or one that has run
 * SB_PODSTATE_EARLY_MS, ends the streak. */
Test(podstate, pods_ending_at_start)
{
    sb_podstate_churn c;
    memset(&c, 0, sizeof c);
    char d[800];
    const char *why = "pod failed: container exited with code 127 (Error)";
    cr_expect_eq(sb_podstate_churning(&c, d, sizeof d), 0);
    sb_podstate_churn_exit(&c, "w-1", why, 0, 1000);
    sb_podstate_churn_exit(&c, "w-2", why, 300, 2000);
    cr_expect_eq(sb_podstate_churning(&c, d, sizeof d), 0, "two are not yet a pattern");
    cr_expect_eq(c.since_ms, 1000, "the streak counts from its first exit");
    sb_podstate_churn_exit(&c, "w-3", why, 0, 3000);
    cr_expect_eq(sb_podstate_churning(&c, d, sizeof d), 1);
    cr_expect_str_eq(d, "pod w-3: exited at start: pod failed: container exited with code 127 "
                        "(Error) (3 pods in a row)");
    uint64_t since = c.since_ms;
    cr_expect_eq(sb_podstate_pool_rule(&since, 1, 1, 1000 + 20000, 20000), 2,
                 "the failure rule counts from the streak's first exit");
    /* a pod that worked a while before it failed is a lost worker, not a crash at start */
    sb_podstate_churn_exit(&c, "w-4", why, SB_PODSTATE_EARLY_MS, 4000);
    cr_expect_eq(sb_podstate_churning(&c, NULL, 0), 0);
    cr_expect_eq(c.streak, 0);
    cr_expect_eq(c.since_ms, 0);
    for (int i = 0; i < 5; i++)
        sb_podstate_churn_exit(&c, "w", NULL, 0, 5000 + (uint64_t)i);
    cr_expect_eq(sb_podstate_churning(&c, d, sizeof d), 1);
    cr_expect_str_eq(d, "pod w: exited at start: no reason given (5 pods in a row)");
    sb_podstate_churn_healthy(&c);
    cr_expect_eq(sb_podstate_churning(&c, d, sizeof d), 0, "a pod runs: over");
}

/* While a pool's pods keep ending at start, new ones come at the kubelet's back-off (10 s
 * doubling to 5 min), not a pod a second. */
Test(podstate, back_off_between_pods_that_end_at_start)
{
    cr_expect_eq(sb_podstate_churn_backoff_ms(0), 0);
    cr_expect_eq(sb_podstate_churn_backoff_ms(SB_PODSTATE_CHURN_MIN - 1), 0, "not churning");
    uint64_t prev = 0;
    for (uint32_t s = SB_PODSTATE_CHURN_MIN; s < SB_PODSTATE_CHURN_MIN + 12; s++) {
        uint64_t b = sb_podstate_churn_backoff_ms(s);
        cr_expect_geq(b, 10000, "streak %u: %llu ms", s, (unsigned long long)b);
        cr_expect_leq(b, 300000, "streak %u: %llu ms", s, (unsigned long long)b);
        cr_expect_geq(b, prev, "never shorter");
        prev = b;
    }
    cr_expect_eq(sb_podstate_churn_backoff_ms(SB_PODSTATE_CHURN_MIN), 10000);
    cr_expect_eq(sb_podstate_churn_backoff_ms(SB_PODSTATE_CHURN_MIN + 1), 20000);
    cr_expect_eq(sb_podstate_churn_backoff_ms(UINT32_MAX), 300000, "capped, no overflow");
}
