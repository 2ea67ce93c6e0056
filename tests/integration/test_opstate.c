/* Op states live per worker, not per task (ops.h, "Lifetime of an op state"): `streambatch run`
 * with one worker process, and the worker's exit line "op states" (created, reused) read from
 * its log. Many tasks of a stage make its state once per slot; an absorbed filter+project chain
 * is made per task (not kept), tensor.mlp+project (borrowed) is kept; the output is right either
 * way. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-opstate");
    setenv("TMPDIR", dir, 1);
    /* 4 files of 2500 JSON lines (~250 KiB): 32 KiB partitions make ~30 tasks */
    sh("cd %s && python3 -c \"\nimport json, os\nos.makedirs('in')\nfor f in range(4):\n"
       "  with open('in/f%%d.jsonl' %% f, 'w') as o:\n    for i in range(2500):\n"
       "      o.write(json.dumps({'id': f*10000+i, 'n': i %% 100, 'pad': 'x'*60, "
       "'x': [i %% 100 / 100, f]}) + '\\\\n')\n\"",
       dir);
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(opstate, .init = setup, .fini = teardown, .timeout = 120);

/* Runs pipeline NAME (STAGES) on one worker with SLOTS slots, keeping its logs in rd-NAME;
 * returns the tasks run. */
static long run_one_worker(const char *name, const char *stages, int slots)
{
    write_pipeline_ps(name, "32Ki", stages, "");
    char flags[512];
    snprintf(flags, sizeof flags, "--cpus 1 --cpu-slots %d --run-dir %s/rd-%s", slots, dir, name);
    char *out = NULL;
    int rc = run_cli(name, flags, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(summary_num(name, "workersStarted"), 1);
    return summary_num(name, "tasksRun");
}

/* KEY=N of the worker's "op states" line (-1 when there is none). */
static long op_states(const char *name, const char *key)
{
    return num("grep -h 'msg=\"op states\"' %s/rd-%s/*.log | grep -o ' %s=[0-9]*' | cut -d= -f2 "
               "| grep . || echo -1",
               dir, name, key);
}

/* The output's records and how many of them have n < 50 (the filter's). */
static long records(const char *name, const char *cond)
{
    return num("cat %s/out-%s/*.jsonl | python3 -c \"import sys, json\n"
               "print(sum(1 for l in sys.stdin if l.strip() and (%s)))\"",
               dir, name, cond);
}

Test(opstate, one_state_per_worker_and_stage_not_per_task)
{
    long tasks =
        run_one_worker("sleep", "  - {name: wait, op: bench.sleep, args: {msPerMB: 1}}\n", 1);
    cr_assert_gt(tasks, 8, "many tasks: %ld", tasks);
    cr_expect_eq(op_states("sleep", "created"), 1, "one init for %ld tasks", tasks);
    cr_expect_eq(op_states("sleep", "reused"), tasks - 1);
    cr_expect_eq(records("sleep", "True"), 10000, "every record once");
}

Test(opstate, fused_stages_keep_a_state_each)
{
    long tasks =
        run_one_worker("fused",
                       "  - {name: wait, op: bench.sleep, args: {msPerMB: 1}}\n"
                       "  - {name: keep, op: filter, args: {field: n, op: lt, value: 50}}\n",
                       1);
    cr_assert_gt(tasks, 8);
    cr_expect_eq(op_states("fused", "created"), 2, "one per stage");
    cr_expect_eq(op_states("fused", "reused"), 2 * (tasks - 1));
    cr_expect_eq(records("fused", "True"), 5000, "the filter's records, once");
    cr_expect_eq(records("fused", "json.loads(l)['n'] < 50"), 5000);
}

/* filter absorbs the project after it (one state owning the other): such a chain is freed at
 * each task's end, never kept; the stage before it still is. */
Test(opstate, absorbed_chains_are_not_kept)
{
    long tasks =
        run_one_worker("absorb",
                       "  - {name: wait, op: bench.sleep, args: {msPerMB: 1}}\n"
                       "  - {name: keep, op: filter, args: {field: n, op: lt, value: 50}}\n"
                       "  - {name: cut, op: project, args: {fields: [id, n]}}\n",
                       1);
    cr_assert_gt(tasks, 8);
    cr_expect_eq(op_states("absorb", "created"), 1 + 2 * tasks);
    cr_expect_eq(op_states("absorb", "reused"), tasks - 1);
    cr_expect_eq(records("absorb", "json.loads(l)['n'] < 50 and 'pad' not in json.loads(l)"), 5000);
}

/* tensor.mlp absorbs the project after it but only borrows its state (absorb_borrows): unlike
 * filter's chain, both states are kept per worker, one each, and reused by every later task. */
Test(opstate, an_mlp_that_absorbs_a_project_keeps_both_states)
{
    sh("cd %s && python3 -c \"\nimport json, struct, array\n"
       "w = array.array('f', [0.5, -1, 1, 2, -0.25, 0.75]).tobytes()\n"
       "b = array.array('f', [0.1, 0, -0.1]).tobytes()\n"
       "h = json.dumps({'0.weight': {'dtype': 'F32', 'shape': [3, 2], 'data_offsets': [0, 24]},"
       " '0.bias': {'dtype': 'F32', 'shape': [3], 'data_offsets': [24, 36]}}).encode()\n"
       "open('model.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + w + b)\n\"",
       dir);
    char stages[512];
    snprintf(stages, sizeof stages,
             "  - {name: m, op: tensor.mlp, args: {weights: 'file://%s/model.safetensors', "
             "field: x, topK: 1}}\n"
             "  - {name: cut, op: project, args: {fields: [id, yTopK]}}\n",
             dir);
    long tasks = run_one_worker("mlpp", stages, 1);
    cr_assert_gt(tasks, 8);
    cr_expect_eq(op_states("mlpp", "created"), 2, "one per stage, for %ld tasks", tasks);
    cr_expect_eq(op_states("mlpp", "reused"), 2 * (tasks - 1));
    cr_expect_eq(records("mlpp", "sorted(json.loads(l)) == ['id', 'yTopK'] and "
                                 "len(json.loads(l)['yTopK']) == 1"),
                 10000);
}

/* Two slots: at most one state per slot (two tasks never share one), reused all the same. */
Test(opstate, slots_take_a_state_each)
{
    long tasks =
        run_one_worker("slots2", "  - {name: wait, op: bench.sleep, args: {msPerMB: 1}}\n", 2);
    long created = op_states("slots2", "created");
    cr_expect(created >= 1 && created <= 2, "created %ld", created);
    cr_expect_eq(op_states("slots2", "reused"), tasks - created);
    cr_expect_eq(records("slots2", "True"), 10000);
}

/* A failed task's states are freed, not kept (they may be half-way through anything): the task
 * after it makes its own. A data error in the first split's records fails one task (errored
 * partitions allowed); the others still share one state. */
Test(opstate, a_failed_task_frees_its_states)
{
    sh("cd %s && (echo '{\"n\": 1, \"id\"'; cat in/f0.jsonl) > f0 && mv f0 in/f0.jsonl", dir);
    write_pipeline_ps("failed", "32Ki",
                      "  - {name: keep, op: filter, args: {field: n, op: lt, value: 50}}\n",
                      "  execution: {maxErroredPartitions: 1}\n");
    char flags[512];
    snprintf(flags, sizeof flags, "--cpus 1 --cpu-slots 1 --run-dir %s/rd-failed", dir);
    char *out = NULL;
    int rc = run_cli("failed", flags, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "errored partition") != NULL, "%s", out);
    free(out);
    long tasks = summary_num("failed", "tasksRun");
    cr_assert_gt(tasks, 8);
    long created = op_states("failed", "created"), reused = op_states("failed", "reused");
    cr_expect_eq(created, 2, "the first state, and one after the failed task");
    cr_expect_eq(created + reused, tasks);
}
