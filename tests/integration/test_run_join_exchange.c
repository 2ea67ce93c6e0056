/* The exchanged join end to end (`streambatch run`, real worker processes; issue 41): the same
 * joins run with broadcastBelow above the right side's size (broadcast) and below it (both sides
 * exchanged by key), inner and left, over keys of mixed types (1, 1.0, -0.0, "1", true, null,
 * lists, objects, missing under missingKey: null), duplicate keys on both sides and a right side
 * in many small files; each output matches the Python reference tests/allops/check_lj.py and the
 * exchanged one holds the broadcast one's rows. A worker SIGKILLed during the reduce phase gives
 * the same output (the map outputs of both sides re-made by lineage), a hot right key past the
 * budget spills the build side, and the shapes the exchanged join cannot run in are refused
 * before any task runs. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-joinx");
    setenv("TMPDIR", dir, 1); /* the runs' worker spill dirs: itest_kill_worker finds ours only */
    /* the right side in 30 files of 2 rows */
    sh("cd %s && python3 %s/tests/allops/check_lj.py genjoin j 3000 5 && mkdir rm && "
       "split -l 2 -d -a 3 --additional-suffix=.jsonl j/right/r.jsonl rm/r",
       dir, sb_test_root());
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(join_exchange, .init = setup, .fini = teardown, .timeout = 240);

/* dir/NAME.yaml: the left side dir/j/left/ in partitions of 8 KiB joined (stage x) with dir/rm/
 * under ARGS (YAML flow map members), then STAGES, with EXTRA after the sink. */
static void pipeline(const char *name, const char *args, const char *stages, const char *extra)
{
    char st[1024];
    snprintf(
        st, sizeof st,
        "  - {name: x, op: join, args: {right: {uri: 'file://%s/rm/', format: jsonl}, %s}}\n%s",
        dir, args, stages);
    write_pipeline_ps(name, "8Ki", st, extra);
    sh("sed -i 's|file://%s/in/|file://%s/j/left/|' %s/%s.yaml", dir, dir, dir, name);
}

/* The ops of run NAME, from its summary. */
static long ops_of(const char *name)
{
    return num("python3 -c \"import json; print(len(json.load(open('%s/%s.summary.json'))"
               "['stages']))\"",
               dir, name);
}

/* Runs NAME (must succeed) and checks it against the reference join under ARGS_JSON with the
 * right side in dir/RIGHT. */
static void run_check_right(const char *name, const char *args_json, const char *right)
{
    char *out = NULL;
    int rc = run_cli(name, "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s failed:\n%s", name, out);
    free(out);
    sh("cd %s && python3 %s/tests/allops/check_lj.py join '%s' j/left %s out-%s", dir,
       sb_test_root(), args_json, right, name);
}

/* The same with the right side dir/rm. */
static void run_check(const char *name, const char *args_json)
{
    run_check_right(name, args_json, "rm");
}

/* HOW joined both ways: broadcast (the default broadcastBelow, 64Mi, is above the right side's
 * ~4 KiB) and exchanged (broadcastBelow: 1Ki); both match the reference and each other. */
static void both_ways(const char *how)
{
    char args[256], json[256], b[32], x[32];
    snprintf(args, sizeof args, "on: [k], how: %s, missingKey: null", how);
    snprintf(json, sizeof json, "{\"on\":[\"k\"],\"how\":\"%s\",\"missingKey\":null}", how);
    snprintf(b, sizeof b, "b-%s", how);
    snprintf(x, sizeof x, "x-%s", how);
    pipeline(b, args, "", "");
    run_check(b, json);
    snprintf(args, sizeof args, "on: [k], how: %s, missingKey: null, broadcastBelow: 1Ki", how);
    pipeline(x, args, "", "");
    run_check(x, json);
    sh("cd %s && python3 %s/tests/allops/check_lj.py same out-%s out-%s", dir, sb_test_root(), b,
       x);
    cr_expect_eq(ops_of(b), 1, "broadcast: the join runs in the source's tasks");
    cr_expect_eq(ops_of(x), 2, "exchanged: a map and a reduce op");
    cr_expect_eq(summary_num(b, "sinkRows"), summary_num(x, "sinkRows"));
}

Test(join_exchange, left_join_exchanged_equals_broadcast)
{
    both_ways("left");
    cr_expect_gt(summary_num("x-left", "sinkRows"), 3000, "duplicate right keys multiply rows");
    cr_expect_gt(num("grep -l right_v %s/out-x-left/part-* | wc -l", dir), 0, "clashes renamed");
}

Test(join_exchange, inner_join_exchanged_equals_broadcast)
{
    both_ways("inner");
}

/* The exchanged join followed at once by another exchange (repartition): the join's reduce and
 * the repartition's map half run in the same tasks. Before the fix that op was taken for a
 * sort's middle op and the run failed ("op repartition is not available in this worker
 * build"). */
Test(join_exchange, an_exchange_right_after_the_join)
{
    pipeline("xr", "on: [k], how: left, missingKey: null, broadcastBelow: 1Ki",
             "  - {name: r, op: repartition, args: {partitions: 3}}\n", "");
    run_check("xr", "{\"on\":[\"k\"],\"how\":\"left\",\"missingKey\":null}");
    cr_expect_eq(ops_of("xr"), 3,
                 "the join's map, its reduce with the repartition's map, the "
                 "repartition's reduce");
}

/* `plan --profile` of an exchanged join after another stage: its map tasks must run that stage,
 * which a profile's staged mode refuses, so the profile streams (the stages fuse and share their
 * op's time). Before the fix: "profiling run on cpu failed: ... its map tasks must read the
 * source". */
Test(join_exchange, plan_profiles_a_join_after_another_stage)
{
    pipeline("pf", "on: [k], how: inner, missingKey: null, broadcastBelow: 1Ki", "", "");
    sh("sed -i 's|^  stages:$|  stages:\\n  - {name: f, op: identity}|' %s/pf.yaml", dir);
    char *out = sb_test_sh_out("cd %s && timeout 120 %s plan --profile pf.yaml 2>&1; echo rc=$?",
                               dir, sb_test_bin("streambatch"));
    cr_expect(strstr(out, "rc=0") != NULL, "%s", out);
    cr_expect(strstr(out, "\nf ") != NULL && strstr(out, "\nx ") != NULL, "%s", out);
    cr_expect(strstr(out, "in streaming mode") != NULL, "%s", out);
    free(out);
}

/* A worker killed once every map task is done and the reduce tasks run: the map outputs it held
 * (left rows and right rows) are made again by lineage, and the output is the reference's. A
 * slow stage before the join spreads the map tasks over both workers. */
Test(join_exchange, kill_during_reduce_gives_the_same_output)
{
    FILE *f = itest_create("k1.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: k1}\n"
            "spec:\n  source: {uri: 'file://%s/j/left/', format: jsonl, partitionSize: 8Ki}\n"
            "  stages:\n  - {name: pre, op: bench.sleep, args: {msPerRecord: 0.2}}\n"
            "  - {name: x, op: join, args: {right: {uri: 'file://%s/rm/'}, on: [k], how: left, "
            "missingKey: null, broadcastBelow: 1Ki}}\n"
            "  - {name: slow, op: bench.sleep, args: {msPerRecord: 0.3}}\n"
            "  sink: {uri: 'file://%s/out-k1/', format: jsonl}\n",
            dir, dir, dir);
    fclose(f);
    /* the reduce phase: every map task done, reduce tasks running (buckets without keys are done
     * at once: the data has 13 distinct keys) */
    itest_run_kill_when("k1",
                        "x.map ([0-9]+)/\\1 done 0 running; x\\+slow [0-9]+/[0-9]+ done [1-9]");
    sh("cd %s && python3 %s/tests/allops/check_lj.py join "
       "'{\"on\":[\"k\"],\"how\":\"left\",\"missingKey\":null}' j/left rm out-k1",
       dir, sb_test_root());
    cr_expect_gt(summary_num("k1", "partitionsRecovered"), 0, "map outputs re-made by lineage");
}

/* One right key repeated past a reduce task's share (500 rows of ~70 bytes under a share of
 * 16 KiB): the build side spills (both sides by key into spill files, the hot key's part built in
 * chunks) and the output is the reference's, inner and left. Before, the stage failed: "the
 * right rows of one bucket take more than 16Ki". */
Test(join_exchange, a_hot_right_key_past_the_budget_spills_the_build_side)
{
    sh("mkdir -p %s/hot && python3 -c \"import json\n"
       "with open('%s/hot/r.jsonl', 'w') as o:\n"
       "  for i in range(600): o.write(json.dumps({'k': 'a' if i < 500 else i %% 9, 'rid': i, "
       "'pad': 'p' * 40}) + '\\n')\"",
       dir, dir);
    const char *hows[] = {"inner", "left"};
    for (int h = 0; h < 2; h++) {
        char name[16], args[160], json[160];
        snprintf(name, sizeof name, "hot-%s", hows[h]);
        snprintf(args, sizeof args, "on: [k], how: %s, missingKey: null, broadcastBelow: 1Ki",
                 hows[h]);
        snprintf(json, sizeof json, "{\"on\":[\"k\"],\"how\":\"%s\",\"missingKey\":null}", hows[h]);
        pipeline(name, args, "", "  execution: {memoryBudget: 64Ki}\n");
        sh("sed -i 's|file://%s/rm/|file://%s/hot/|' %s/%s.yaml", dir, dir, dir, name);
        run_check_right(name, json, "hot");
        cr_expect_gt(summary_num(name, "sinkRows"), 100 * 500, "%s: key a's rows multiply",
                     hows[h]);
        cr_expect_gt(num("python3 -c 'import json; print(sum(s[\"opSpilledBytes\"] for s in "
                         "json.load(open(\"%s/%s.summary.json\"))[\"stages\"] if s[\"name\"] "
                         "== \"x\"))'",
                         dir, name),
                     30000, "%s: the reduce spilled both sides", hows[h]);
    }
}

/* Runs NAME, which must be refused at plan with WHY, nothing written. */
static void refused(const char *name, const char *why)
{
    char *out = NULL;
    cr_expect_neq(run_cli(name, "--cpus 2", &out), 0);
    cr_expect(strstr(out, "(join): the right side is ") != NULL &&
                  strstr(out, "so it is exchanged by key, but") != NULL && strstr(out, why),
              "%s", out);
    cr_expect_eq(num("ls %s/out-%s 2>/dev/null | grep -c part- || true", dir, name), 0);
    free(out);
}

/* The exchanged join's map tasks must be the source's (each reads its share of the right side):
 * after another exchange, or with partitions that may be dropped, it is refused. */
Test(join_exchange, shapes_it_cannot_run_in_are_refused)
{
    FILE *f = itest_create("r1.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: r1}\n"
            "spec:\n  source: {uri: 'file://%s/j/left/', format: jsonl, partitionSize: 8Ki}\n"
            "  stages:\n  - {name: d, op: distinct}\n"
            "  - {name: x, op: join, args: {right: {uri: 'file://%s/rm/'}, on: [k], missingKey: "
            "null, broadcastBelow: 1Ki}}\n"
            "  sink: {uri: 'file://%s/out-r1/', format: jsonl}\n",
            dir, dir, dir);
    fclose(f);
    refused("r1", "its map tasks must read the source");
    pipeline("r2", "on: [k], missingKey: null, broadcastBelow: 1Ki", "",
             "  execution: {maxErroredPartitions: 1}\n");
    refused("r2", "maxErroredPartitions must be 0");
}
