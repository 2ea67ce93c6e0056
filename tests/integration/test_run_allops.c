/* The all-to-all ops end to end (`streambatch run`, real worker processes; issue 41): each op's
 * output checked against the Python reference tests/allops/check.py on generated data with
 * ties, nulls and keys of mixed types (1, 1.0, "1", true, null, missing), on an empty input, a
 * single partition and many tiny partitions; random_shuffle's order fixed by its seed; a
 * missing key as a data error; a worker SIGKILLed during the reduce phase; a reduce task that
 * starts while the last map task runs; `plan --profile` on a pipeline with an exchange stage. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"

#define ALL_AGGS                                                                                   \
    "[{op: count}, {op: sum, field: v}, {op: mean, field: v}, {op: std, field: v}, {op: min, "     \
    "field: s}, {op: max, field: v}, {op: first, field: s}, {op: last, field: n}, {op: collect, "  \
    "field: g, as: gs}]"
#define ALL_AGGS_JSON                                                                              \
    "[{\"op\":\"count\"},{\"op\":\"sum\",\"field\":\"v\"},{\"op\":\"mean\",\"field\":\"v\"},"      \
    "{\"op\":\"std\",\"field\":\"v\"},{\"op\":\"min\",\"field\":\"s\"},{\"op\":\"max\","           \
    "\"field\":\"v\"},{\"op\":\"first\",\"field\":\"s\"},{\"op\":\"last\",\"field\":\"n\"},"       \
    "{\"op\":\"collect\",\"field\":\"g\",\"as\":\"gs\"}]"

static void setup(void)
{
    itest_mkdtemp("sb-allops");
    setenv("TMPDIR", dir, 1); /* the runs' worker spill dirs: kill_worker finds ours only */
    sh("cd %s && python3 %s/tests/allops/check.py gen in 6 2000 11 && "
       "python3 %s/tests/allops/check.py gen one 1 300 12 && mkdir empty && : > empty/e.jsonl && "
       "python3 %s/tests/allops/check.py gen big 1 40000 13 && mkdir rep && python3 -c '"
       "import json\nwith open(\"rep/r.jsonl\", \"w\") as f:\n"
       "    for i in range(60000):\n"
       "        f.write(json.dumps({\"id\": i, \"k\": i * 7919 %% 10000, \"v\": i %% 97, \"pad\": "
       "\"p\" * 100}) + "
       "\"\\n\")'",
       dir, sb_test_root(), sb_test_root(), sb_test_root());
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(allops, .init = setup, .fini = teardown, .timeout = 240);

/* dir/NAME.yaml: from dir/IN/ in partitions of PSIZE through one stage `x` running OP with
 * ARGS (YAML flow map) and then STAGES ("" or more list items) to dir/out-NAME/. */
static void pipeline(const char *name, const char *in, const char *psize, const char *op,
                     const char *args, const char *stages, const char *extra)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/%s/', format: jsonl, partitionSize: %s}\n"
            "  stages:\n  - {name: x, op: %s, args: %s}\n%s"
            "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n%s",
            name, dir, in, psize, op, args, stages, dir, name, extra);
    fclose(f);
}

/* Runs NAME (must succeed) and checks its sink against the reference of OP with ARGS_JSON over
 * the input IN. */
static void run_and_check(const char *name, const char *in, const char *op, const char *args_json)
{
    char *out = NULL;
    int rc = run_cli(name, "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s failed:\n%s", name, out);
    free(out);
    sh("cd %s && python3 %s/tests/allops/check.py %s '%s' %s out-%s", dir, sb_test_root(), op,
       args_json, in, name);
}

Test(allops, groupby_every_aggregate_on_mixed_type_keys)
{
    pipeline("g1", "in", "64Ki", "groupby",
             "{keys: [k], missingKey: null, aggregates: " ALL_AGGS "}", "", "");
    run_and_check("g1", "in", "groupby",
                  "{\"keys\":[\"k\"],\"missingKey\":null,\"aggregates\":" ALL_AGGS_JSON "}");
    /* 1, 1.0, 1e0 are one key, "1" another, true a third: 16 values in the data, 12 keys */
    cr_expect_eq(num("cat %s/out-g1/part-* | wc -l", dir), 12);
}

Test(allops, groupby_two_keys_many_tiny_partitions)
{
    pipeline(
        "g2", "in", "1Ki", "groupby",
        "{keys: [k, n], partitions: 7, aggregates: [{op: count, as: c}, {op: sum, field: n, as: "
        "sn}, {op: mean, field: v}]}",
        "", "");
    run_and_check("g2", "in", "groupby",
                  "{\"keys\":[\"k\",\"n\"],\"aggregates\":[{\"op\":\"count\",\"as\":\"c\"},{\"op\":"
                  "\"sum\",\"field\":\"n\",\"as\":\"sn\"},{\"op\":\"mean\",\"field\":\"v\"}]}");
    cr_expect_gt(summary_num("g2", "tasksRun"), 100, "many tiny map tasks");
}

/* Keys that barely repeat within a map task: past its first rows the map half stops combining
 * and passes rows on; the reduce side merges the partial records and the rows alike. */
Test(allops, groupby_keys_that_barely_repeat)
{
    /* one split of 40,000 rows, every id once: a map task past the two windows of 16,384 rows
     * it combines before judging */
    pipeline("g6", "big", "16Mi", "groupby",
             "{keys: [id], aggregates: [{op: count}, {op: collect, field: g}, {op: first, field: "
             "s}, {op: std, field: v}, {op: min, field: v}]}",
             "", "");
    run_and_check("g6", "big", "groupby",
                  "{\"keys\":[\"id\"],\"aggregates\":[{\"op\":\"count\"},{\"op\":\"collect\","
                  "\"field\":\"g\"},{\"op\":\"first\",\"field\":\"s\"},{\"op\":\"std\",\"field\":"
                  "\"v\"},{\"op\":\"min\",\"field\":\"v\"}]}");
    cr_expect_eq(summary_num("g6", "sinkRows"), 40000);
}

/* 10,000 keys, each met once in every 10,000 rows of one map task of 60,000 (rows of ~150
 * bytes: the source hands the op ~7,000 a call): the task's first rows are all new keys, but
 * combining pays, and its map half sends on one partial record per key. The old rule (more than
 * half of the rows distinct after the first call of 4,096 or more: stop combining) sent nearly
 * all 60,000 rows on as they were. */
Test(allops, groupby_combines_keys_that_repeat_later_in_a_task)
{
    pipeline("g7", "rep", "16Mi", "groupby",
             "{keys: [k], aggregates: [{op: count}, {op: sum, field: v}, {op: mean, field: v}]}",
             "", "");
    run_and_check("g7", "rep", "groupby",
                  "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"count\"},{\"op\":\"sum\","
                  "\"field\":\"v\"},{\"op\":\"mean\",\"field\":\"v\"}]}");
    cr_expect_eq(summary_num("g7", "sinkRows"), 10000);
    long map_rows = num("python3 -c 'import json; print(sum(s[\"rowsOut\"] for s in "
                        "json.load(open(\"%s/g7.summary.json\"))[\"stages\"] if s[\"name\"] == "
                        "\"x.map\"))'",
                        dir);
    cr_expect_eq(map_rows, 10000, "the map half sent on %ld records for 10,000 keys", map_rows);
}

Test(allops, groupby_single_partition_and_empty_input)
{
    pipeline("g3", "one", "64Ki", "groupby", "{keys: [g], aggregates: " ALL_AGGS "}", "", "");
    run_and_check("g3", "one", "groupby", "{\"keys\":[\"g\"],\"aggregates\":" ALL_AGGS_JSON "}");
    pipeline("g4", "empty", "64Ki", "groupby", "{keys: [k], aggregates: [{op: count}]}", "", "");
    run_and_check("g4", "empty", "groupby",
                  "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"count\"}]}");
    cr_expect_eq(summary_num("g4", "sinkRows"), 0);
}

Test(allops, a_missing_key_is_a_data_error)
{
    pipeline("g5", "in", "64Ki", "groupby", "{keys: [nokey]}", "", "");
    char *out = NULL;
    int rc = run_cli("g5", "--cpus 2", &out);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "has no field nokey (missingKey: null") != NULL, "%s", out);
    free(out);
}

Test(allops, distinct_by_fields_whole_records_one_partition)
{
    pipeline("d1", "in", "4Ki", "distinct", "{fields: [k, n]}", "", "");
    run_and_check("d1", "in", "distinct", "{\"fields\":[\"k\",\"n\"]}");
    pipeline("d2", "in", "64Ki", "distinct", "{}", "", "");
    run_and_check("d2", "in", "distinct", "{}");
    /* records that differ only in key order or number spelling are one record */
    sh("mkdir -p %s/dup && printf '%%s\\n' '{\"a\":1,\"b\":\"x\"}' '{\"b\":\"x\",\"a\":1.0}' "
       "'{\"a\":\"1\",\"b\":\"x\"}' '{\"a\":1,\"b\":\"\\u0078\"}' > %s/dup/d.jsonl",
       dir, dir);
    pipeline("d3", "dup", "64Ki", "distinct", "{}", "", "");
    run_and_check("d3", "dup", "distinct", "{}");
    cr_expect_eq(summary_num("d3", "sinkRows"), 2);
    pipeline("d4", "one", "64Ki", "distinct", "{fields: [s]}", "", "");
    run_and_check("d4", "one", "distinct", "{\"fields\":[\"s\"]}");
}

Test(allops, repartition_spreads_rows_evenly)
{
    pipeline("r1", "in", "2Ki", "repartition", "{partitions: 5}", "", "");
    run_and_check("r1", "in", "repartition", "{\"partitions\":5}");
    pipeline("r2", "in", "2Ki", "repartition", "{bytes: 300Ki}", "", "");
    run_and_check("r2", "in", "repartition", "{}");
    pipeline("r3", "empty", "64Ki", "repartition", "{partitions: 3}", "", "");
    run_and_check("r3", "empty", "repartition", "{\"partitions\":3}");
}

Test(allops, random_shuffle_order_follows_the_seed)
{
    /* the same seed over differently split input: the same order; another seed: another */
    pipeline("s1", "in", "64Ki", "random_shuffle", "{seed: 7, partitions: 4}", "", "");
    run_and_check("s1", "in", "random_shuffle", "{}");
    pipeline("s2", "in", "3Ki", "random_shuffle", "{seed: 7, partitions: 4}", "", "");
    run_and_check("s2", "in", "random_shuffle", "{}");
    pipeline("s3", "in", "64Ki", "random_shuffle", "{seed: 8, partitions: 4}", "", "");
    run_and_check("s3", "in", "random_shuffle", "{}");
    const char *ck = sb_test_root();
    sh("cd %s && for s in s1 s2 s3; do python3 %s/tests/allops/check.py order out-$s > $s.order; "
       "done && cat in/*.jsonl | python3 -c 'import json,sys; "
       "[print(json.dumps(json.loads(l), sort_keys=True)) for l in sys.stdin]' > in.order",
       dir, ck);
    sh("cmp %s/s1.order %s/s2.order", dir, dir);
    cr_expect_neq(num("cmp -s %s/s1.order %s/s3.order; echo $?", dir, dir), 0, "seeds 7 and 8");
    cr_expect_neq(num("cmp -s %s/s1.order %s/in.order; echo $?", dir, dir), 0, "not the input");
    /* a permutation, not a rotation: the first input row lands anywhere, neighbours part */
    cr_expect_gt(num("cd %s && python3 -c \"\nimport sys\na=open('in.order').read().split('\\n')\n"
                     "b=open('s1.order').read().split('\\n')\npos={r:i for i,r in enumerate(b)}\n"
                     "print(sum(1 for i in range(len(a)-2) if abs(pos[a[i]]-pos[a[i+1]])>1))\"",
                     dir),
                 11000, "consecutive input rows stay apart");
}

/* A worker killed once every map task is done and the reduce tasks run: the map outputs it held
 * are made again by lineage, and the output is the reference's. */
Test(allops, kill_during_reduce_gives_the_same_output)
{
    pipeline("k1", "in", "16Ki", "groupby",
             "{keys: [id], partitions: 4, aggregates: [{op: count}, {op: sum, field: v}]}",
             "  - {name: slow, op: bench.sleep, args: {msPerRecord: 0.5}}\n", "");
    /* the reduce phase: every map task done, reduce tasks running, none done */
    itest_run_kill_when("k1", "x.map ([0-9]+)/\\1 done 0 running; x\\+slow 0/[0-9]+ done [1-9]");
    sh("cd %s && python3 %s/tests/allops/check.py groupby '{\"keys\":[\"id\"],\"aggregates\":"
       "[{\"op\":\"count\"},{\"op\":\"sum\",\"field\":\"v\"}]}' in out-k1",
       dir, sb_test_root());
    cr_expect_gt(summary_num("k1", "partitionsRecovered"), 0, "map outputs re-made by lineage");
}

/* Early reduces (controller/sched/core/early.c): nine splits of 50 records at 2 ms each before the
 * groupby's map half, on two workers of one slot, so one worker finishes its last map task while
 * the other still runs the ninth; its free slot then takes a reduce task, open, which reads the
 * buckets of the finished map tasks and the last one's once it ends. The output is the
 * reference's, as with the mechanism switched off (SB_SCHED_OFF=early-reduces: none starts
 * early). */
Test(allops, a_reduce_task_starts_while_the_last_map_task_runs)
{
    sh("cd %s && mkdir early && python3 -c '"
       "import json\n"
       "for f in range(9):\n"
       "    with open(\"early/f%%d.jsonl\" %% f, \"w\") as o:\n"
       "        for i in range(50):\n"
       "            o.write(json.dumps({\"k\": (f * 7 + i) %% 13, \"v\": i}) + \"\\n\")'",
       dir);
    const char *args = "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"count\"},{\"op\":"
                       "\"sum\",\"field\":\"v\"}]}";
    for (int off = 0; off < 2; off++) {
        const char *name = off ? "eo" : "ee";
        FILE *f = itest_create("%s.yaml", name);
        fprintf(f,
                "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
                "spec:\n  source: {uri: 'file://%s/early/', format: jsonl, partitionSize: 1Ki}\n"
                "  stages:\n"
                "  - {name: slow, op: bench.sleep, args: {msPerRecord: 2}}\n"
                "  - {name: x, op: groupby, args: {keys: [k], partitions: 3, aggregates: "
                "[{op: count}, {op: sum, field: v}]}}\n"
                "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n",
                name, dir, dir, name);
        fclose(f);
        if (off)
            setenv("SB_SCHED_OFF", "early-reduces", 1);
        char *out = NULL;
        int rc = run_cli(name, "--cpus 2", &out);
        unsetenv("SB_SCHED_OFF");
        cr_assert_eq(rc, 0, "%s failed:\n%s", name, out);
        free(out);
        sh("cd %s && python3 %s/tests/allops/check.py groupby '%s' early out-%s", dir,
           sb_test_root(), args, name);
        if (off)
            cr_expect_eq(summary_num(name, "earlyReduces"), 0, "switched off");
        else
            cr_expect_geq(summary_num(name, "earlyReduces"), 1, "a reduce task started early");
        cr_expect_eq(summary_num(name, "tasksRerun"), 0);
    }
}

/* Two exchanges in a row: a groupby, then a sort by its counts and a distinct of them (the
 * groupby's reduce runs in the same tasks as the next stage's map half). Before the fix both
 * failed: "stage x+s.range failed: ... op sort is not available in this worker build". */
Test(allops, an_exchange_right_after_a_groupby)
{
    const char *gb = "{keys: [k], aggregates: [{op: count, as: n}, {op: sum, field: v}]}";
    pipeline("gs", "in", "8Ki", "groupby", gb,
             "  - {name: s, op: sort, args: {keys: [{field: n, descending: true}]}}\n", "");
    run_and_check("gs", "in", "groupby",
                  "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"count\",\"as\":\"n\"},"
                  "{\"op\":\"sum\",\"field\":\"v\"}]}");
    /* the same rows, in order across the parts the manifest lists */
    sh("cd %s && python3 %s/tests/allops/check.py sort "
       "'{\"keys\":[{\"field\":\"n\",\"descending\":true}]}' out-gs out-gs",
       dir, sb_test_root());
    pipeline("gd", "in", "8Ki", "groupby", gb, "  - {name: d, op: distinct, args: {fields: [n]}}\n",
             "");
    run_and_check("gd", "out-gs", "distinct", "{\"fields\":[\"n\"]}");
}

Test(allops, plan_profiles_an_exchange_stage)
{
    pipeline("p1", "in", "64Ki", "groupby", "{keys: [k], aggregates: [{op: count}]}",
             "  - {name: after, op: identity}\n", "");
    char *out = sb_test_sh_out("cd %s && timeout 120 %s plan --profile p1.yaml 2>&1; echo rc=$?",
                               dir, sb_test_bin("streambatch"));
    cr_expect(strstr(out, "rc=0") != NULL, "%s", out);
    cr_expect(strstr(out, "\nx ") != NULL && strstr(out, "\nafter ") != NULL, "%s", out);
    free(out);
}

/* A memory budget far below the data: the map outputs wait in the workers' stores (spilled) and
 * the groupby still matches the reference; a groupby on a unique id, whose keys need far more
 * than a task's share of the budget (16Ki of 64Ki), spills sorted runs on the reduce side and
 * sends partials on early on the map side, and still matches it (before issue 41's spilling,
 * that run failed: "the groups of one task take more than 16Ki"). */
Test(allops, budget_below_the_data)
{
    pipeline("m1", "in", "4Ki", "groupby",
             "{keys: [k], partitions: 2, aggregates: [{op: count}, {op: sum, field: v}]}", "",
             "  execution: {memoryBudget: 64Ki}\n");
    run_and_check("m1", "in", "groupby",
                  "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"count\"},{\"op\":\"sum\",\"field\":"
                  "\"v\"}]}");
    pipeline("m2", "in", "4Ki", "groupby",
             "{keys: [id], partitions: 2, aggregates: [{op: count}, {op: collect, field: v}, "
             "{op: first, field: k}]}",
             "", "  execution: {memoryBudget: 64Ki}\n");
    run_and_check("m2", "in", "groupby",
                  "{\"keys\":[\"id\"],\"aggregates\":[{\"op\":\"count\"},{\"op\":\"collect\","
                  "\"field\":\"v\"},{\"op\":\"first\",\"field\":\"k\"}]}");
    /* the summary's stages report what the ops spilled (and the metric of the same name) */
    cr_expect_gt(num("python3 -c 'import json; print(sum(s[\"opSpilledBytes\"] for s in "
                     "json.load(open(\"%s/m2.summary.json\"))[\"stages\"]))'",
                     dir),
                 0);
}

/* groupby and distinct over a parquet source's typed columns: the rows reach them as records
 * (one JSON object per row), so the groupby of the parquet copy of `in` matches the reference
 * computed on `in` itself (before, validate refused a parquet source with these ops). */
Test(allops, groupby_and_distinct_on_typed_columns)
{
    FILE *f = itest_create("topq.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: topq}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl}\n"
            "  stages:\n  - {name: keep, op: project, args: {fields: [id, g, v, s, n]}}\n"
            "  sink: {uri: 'file://%s/pq/', format: parquet, args: {schema: [{name: id, type: "
            "int64}, {name: g, type: int64}, {name: v, type: double}, {name: s, type: string}, "
            "{name: n, type: int64}]}}\n",
            dir, dir);
    fclose(f);
    char *out = NULL;
    cr_assert_eq(run_cli("topq", "--cpus 2", &out), 0, "%s", out);
    free(out);
    static const char *const ops[][3] = {
        {"t1", "groupby",
         "{keys: [g], aggregates: [{op: count}, {op: sum, field: v}, {op: mean, field: v}, {op: "
         "min, field: s}, {op: max, field: n}]}"},
        {"t2", "distinct", "{fields: [n], partitions: 3}"},
    };
    for (size_t i = 0; i < 2; i++) {
        f = itest_create("%s.yaml", ops[i][0]);
        fprintf(f,
                "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
                "spec:\n  source: {uri: 'file://%s/pq/', format: parquet}\n"
                "  stages:\n  - {name: x, op: %s, args: %s}\n"
                "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n",
                ops[i][0], dir, ops[i][1], ops[i][2], dir, ops[i][0]);
        fclose(f);
        cr_assert_eq(run_cli(ops[i][0], "--cpus 2", &out), 0, "%s:\n%s", ops[i][0], out);
        free(out);
    }
    sh("cd %s && python3 %s/tests/allops/check.py groupby '{\"keys\":[\"g\"],\"aggregates\":"
       "[{\"op\":\"count\"},{\"op\":\"sum\",\"field\":\"v\"},{\"op\":\"mean\",\"field\":\"v\"},"
       "{\"op\":\"min\",\"field\":\"s\"},{\"op\":\"max\",\"field\":\"n\"}]}' in out-t1",
       dir, sb_test_root());
    /* n runs over -5..5: one record per value, each a whole row of the source */
    cr_expect_eq(num("cat %s/out-t2/part-* | wc -l", dir), 11);
    cr_expect_eq(num("cat %s/out-t2/part-* | python3 -c 'import json,sys; "
                     "print(len({json.loads(l)[\"n\"] for l in sys.stdin if set(json.loads(l)) "
                     ">= {\"id\", \"g\", \"v\", \"s\", \"n\"}}))'",
                     dir),
                 11);
}
