/* A sick worker pod (issue 15) on the private test cluster (tests/k8s/cluster.sh, as
 * test_operator.c): one worker process of a Pipeline's pool duty-cycled from outside (SIGSTOP
 * 150 ms of every 200 ms) is drained by the controller, an Event WorkerDrained names its pod,
 * the pod goes away, and the Pipeline still succeeds with every record once. */
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
    sb_kc_up("op-drain", NULL);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    sb_kc_down();
}

static pid_t ctl_pid;

static void setup(void)
{
    const char *e = getenv("SB_KC_ERROR");
    if (e != NULL)
        cr_assert_fail("no test cluster: %s", e);
    itest_mkdtemp("sb-opdrain");
    free(sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json, os\nos.makedirs('in')\nfor f in range(24):\n"
        "  with open('in/f%%02d.jsonl' %% f, 'w') as o:\n    for i in range(2500):\n"
        "      o.write(json.dumps({'id': f*100000+i, 'pad': 'x'*80}) + '\\\\n')\n\"",
        dir));
    itest_crd_apply();
    ctl_pid = itest_controller_start(NULL);
}

static void teardown(void)
{
    itest_controller_stop(&ctl_pid);
    free(sb_test_sh_out("rm -rf %s", dir));
}

TestSuite(operator_drain, .init = setup, .fini = teardown, .timeout = 240);

Test(operator_drain, a_sick_worker_pod_is_drained_replaced_and_named_in_an_event)
{
    FILE *f = itest_create("sickpod.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: sickpod}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 64Ki}\n"
            "  stages:\n  - {name: a, op: bench.spin, args: {msPerMB: 4000}, "
            "workers: {min: 3, max: 3}}\n"
            "  sink: {uri: 'file://%s/out/', format: jsonl}\n",
            dir, dir);
    fclose(f);
    free(kubectl("apply -f %s/sickpod.yaml", dir));
    /* a worker process of this pipeline, by its environment (the node agent runs pods as
     * processes); its pod name is its SB_WORKER_ID */
    char *victim = NULL;
    for (int i = 0; i < 120; i++) {
        free(victim);
        victim = sb_test_sh_out(
            "for p in $(pgrep -f -- streambatch-worker); do tr '\\0' '\\n' < /proc/$p/environ "
            "2>/dev/null | grep -qx 'SB_PIPELINE=default/sickpod' && "
            "{ echo $p $(tr '\\0' '\\n' < /proc/$p/environ | sed -n 's/^SB_WORKER_ID=//p'); "
            "break; }; done");
        if (*victim)
            break;
        usleep(500 * 1000);
    }
    long pid = 0;
    char pod[128] = "";
    cr_assert_eq(sscanf(victim, "%ld %127s", &pid, pod), 2, "no worker process found: %s", victim);
    free(victim);
    char *bg = sb_test_sh_out("(while kill -STOP %ld 2>/dev/null; do sleep 0.15; kill -CONT %ld; "
                              "sleep 0.05; done) >/dev/null 2>&1 & echo $!",
                              pid, pid);
    long duty = strtol(bg, NULL, 10);
    free(bg);
    char *ph = NULL;
    for (int i = 0; i < 360; i++) {
        free(ph);
        ph = kubectl("get pipeline sickpod -o jsonpath='{.status.phase}'");
        free(kubectl("get pods -l streambatch.dev/pipeline=sickpod -o name >> %s/pods.seen", dir));
        if (strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0)
            break;
        usleep(500 * 1000);
    }
    if (duty > 0)
        kill((pid_t)duty, SIGTERM);
    kill((pid_t)pid, SIGCONT);
    cr_assert_str_eq(ph, "Succeeded", "phase %s; controller log:\n%s", ph,
                     sb_test_sh_out("tail -30 %s/controller.log", dir));
    free(ph);
    char *ev =
        kubectl("get events --field-selector involvedObject.name=sickpod,reason=WorkerDrained"
                " -o jsonpath='{range .items[*]}{.type} {.message}{\"\\n\"}{end}'");
    cr_expect(strstr(ev, pod) != NULL && strstr(ev, "Warning worker pod ") != NULL,
              "a WorkerDrained event names the throttled pod %s: %s", pod, ev);
    cr_expect(strstr(ev, "the pool's median is") != NULL, "%s", ev);
    free(ev);
    /* a new pod replaced the drained one: more pods than the pool's 3 were seen */
    char *seen = sb_test_sh_out("grep '^pod/' %s/pods.seen | sort -u | wc -l", dir);
    cr_expect_geq(strtol(seen, NULL, 10), 4, "distinct pods seen: %s", seen);
    free(seen);
    char *v = sb_test_sh_out(
        "cat %s/out/part-*.jsonl | sort | md5sum; cat %s/in/*.jsonl | sort | md5sum", dir, dir);
    cr_expect(strlen(v) > 40 && strncmp(v, v + strcspn(v, "\n") + 1, 32) == 0,
              "output differs from input: %s", v);
    free(v);
    free(kubectl("delete pipeline sickpod --timeout=30s"));
}
