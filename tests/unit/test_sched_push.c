/* The project that starts an op of another pool also runs at the end of the op before it
 * (core/plan.c, project_pushed): the partitions that cross between the pools hold only the columns
 * the project keeps. The op's own tasks still run it; fusion off, nothing is pushed. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "controller/sched/sched.h"
#include "spec_fixture.h"

static const char *yaml =
    "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: t}\n"
    "spec:\n  source: {uri: 'file:///in', format: jsonl, partitionSize: 64Mi}\n"
    "  stages:\n  - {name: load, op: identity}\n"
    "  - {name: m, op: identity, resources: {gpu: 1}}\n"
    "  - {name: p, op: project, args: {fields: [a]}}\n"
    "  - {name: q, op: identity}\n"
    "  sink: {uri: 'file:///out', format: jsonl}\n  execution: {}\n";

/* The stage names of the first task of op 1 (on the gpu worker) after op 0's one task, joined
 * with '+', into buf. */
static void gpu_task_stages(int no_fusion, char *buf, size_t cap)
{
    spec_holder h;
    spec_fixture_load(&h, yaml);
    char name[32] = "1000\tsplit-0";
    sb_storage_split sp = {.split = name, .bytes = 1000};
    sb_sched_config cfg = {.pipeline = &h.p, .pipeline_id = "ns/t", .no_fusion = no_fusion};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, &sp, 1, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_sched_worker_add(s, "c1", "cpu", "127.0.0.1:9001", 1, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "g1", "gpu", "127.0.0.1:9002", 1, NULL, 0, 0, NULL), 0);
    sb_sched_task t;
    cr_assert_eq(sb_sched_assign(s, "c1", 1, 1, &t), 1);
    cr_assert_eq(t.nstages, 1, "op 0 (load) is followed by m, not a project: nothing pushed");
    char tid[128];
    snprintf(tid, sizeof tid, "%s", t.task_id);
    sb_storage_output o = {.id = "s0-t0-p0", .bytes = 100, .rows = 1};
    cr_assert_eq(sb_sched_complete(s, "c1", tid, t.attempt, SB_SCHED_OK, NULL, &o, 1, NULL, 0, NULL,
                                   2, &err),
                 1, "%s", err.msg);
    cr_assert_eq(sb_sched_assign(s, "g1", 1, 3, &t), 1);
    size_t used = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < t.nstages; k++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s:%s", k ? "+" : "", t.stages[k]->name,
                                 t.stages[k]->op);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

Test(sched_push, the_project_after_a_pool_change_runs_in_the_task_before_it_too)
{
    char got[256];
    gpu_task_stages(0, got, sizeof got);
    cr_expect_str_eq(got, "m:identity+p:project");
    gpu_task_stages(1, got, sizeof got);
    cr_expect_str_eq(got, "m:identity", "fusion off: the op runs its own stages only");
}
