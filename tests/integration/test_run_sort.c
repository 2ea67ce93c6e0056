/* sort end to end (`streambatch run`, real worker processes; issue 41): the rows of the parts in
 * _manifest.json's order checked against the Python reference tests/allops/check.py (the input's
 * rows, in order, part i's keys no greater than part i+1's) on generated data with ties, nulls
 * and keys of mixed types (1, 1.0, "1", true, null, lists, objects); descending and nulls first;
 * two keys; stable: true giving exactly the stable sort of the input in source order; a missing
 * key as a data error or null; an empty input, a single partition, many tiny partitions and many
 * output parts; a budget below the data (spilled with one partition: test_run_spill.c has the
 * large case); a worker SIGKILLed during the reduce phase. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-sort");
    setenv("TMPDIR", dir, 1); /* the runs' worker spill dirs: kill_worker finds ours only */
    sh("cd %s && python3 %s/tests/allops/check.py gen in 6 2000 11 && "
       "python3 %s/tests/allops/check.py gen one 1 300 12 && mkdir empty && : > empty/e.jsonl",
       dir, sb_test_root(), sb_test_root());
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(sort, .init = setup, .fini = teardown, .timeout = 240);

/* dir/NAME.yaml: from dir/IN/ in partitions of PSIZE through a sort `x` with ARGS (YAML flow
 * map), then STAGES ("" or more list items), to dir/out-NAME/; EXTRA: more spec lines. */
static void sort_pipeline(const char *name, const char *in, const char *psize, const char *args,
                          const char *stages, const char *extra)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/%s/', format: jsonl, partitionSize: %s}\n"
            "  stages:\n  - {name: x, op: sort, args: %s}\n%s"
            "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n%s",
            name, dir, in, psize, args, stages, dir, name, extra);
    fclose(f);
}

/* Checks NAME's sink against the sort reference with ARGS_JSON over the input IN. */
static void check_sorted(const char *name, const char *in, const char *args_json)
{
    sh("cd %s && python3 %s/tests/allops/check.py sort '%s' %s out-%s", dir, sb_test_root(),
       args_json, in, name);
}

static void run_sorted(const char *name, const char *in, const char *args_json)
{
    char *out = NULL;
    int rc = run_cli(name, "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s failed:\n%s", name, out);
    free(out);
    check_sorted(name, in, args_json);
}

/* The reduce tasks that wrote NAME's parts (part-s<op>-t<task>-p<seq>). */
static long reduce_tasks(const char *name)
{
    return num("ls %s/out-%s | sed -n 's/^part-s[0-9]*-t\\([0-9]*\\)-p.*/\\1/p' | sort -u | wc -l",
               dir, name);
}

Test(sort, mixed_type_keys_with_ties_and_nulls_last)
{
    /* k: 16 values of 8 types, 1 = 1.0 = 1e0 and -0.0 = 0 tie; id breaks ties, descending */
    sort_pipeline("t1", "in", "64Ki",
                  "{keys: [{field: k}, {field: id, descending: true}], missingKey: null, "
                  "partitions: 4}",
                  "", "");
    run_sorted("t1", "in",
               "{\"keys\":[{\"field\":\"k\"},{\"field\":\"id\",\"descending\":true}],"
               "\"missingKey\":null}");
    cr_expect_eq(summary_num("t1", "sinkRows"), 12000);
    cr_expect_eq(reduce_tasks("t1"), 4);
}

Test(sort, descending_nulls_first_many_tiny_partitions)
{
    /* v: ints and floats, missing in a third of the rows (null under missingKey: null) */
    sort_pipeline("t2", "in", "2Ki",
                  "{keys: [{field: v, descending: true}, {field: s}], nulls: first, "
                  "missingKey: null, partitions: 5}",
                  "", "");
    run_sorted("t2", "in",
               "{\"keys\":[{\"field\":\"v\",\"descending\":true},{\"field\":\"s\"}],\"nulls\":"
               "\"first\",\"missingKey\":null}");
    cr_expect_gt(summary_num("t2", "tasksRun"), 100, "many tiny map tasks");
    /* a record with null first: the first part's first row has no v */
    cr_expect_eq(num("cd %s/out-t2 && head -1 $(python3 -c \"import json; "
                     "print(json.load(open('_manifest.json'))['parts'][0]['name'])\") | "
                     "grep -c '\"v\"'",
                     dir),
                 0);
}

/* stable: true: ties (41 values of g over 12,000 rows) keep the source order, so the output is
 * exactly the stable sort of the input, and so again over differently cut input */
Test(sort, stable_keeps_source_order_among_ties)
{
    sort_pipeline("t3", "in", "8Ki", "{keys: [{field: g}], stable: true, partitions: 3}", "", "");
    run_sorted("t3", "in", "{\"keys\":[{\"field\":\"g\"}],\"stable\":true}");
    sort_pipeline("t4", "in", "64Ki",
                  "{keys: [{field: k, descending: true}], stable: true, missingKey: null}", "", "");
    run_sorted("t4", "in",
               "{\"keys\":[{\"field\":\"k\",\"descending\":true}],\"stable\":true,"
               "\"missingKey\":null}");
}

Test(sort, single_partition_empty_input_and_many_parts)
{
    sort_pipeline("t5", "one", "64Ki", "{keys: [{field: s}, {field: n}]}", "", "");
    run_sorted("t5", "one", "{\"keys\":[{\"field\":\"s\"},{\"field\":\"n\"}]}");
    sort_pipeline("t6", "empty", "64Ki", "{keys: [{field: k}], partitions: 3}", "", "");
    run_sorted("t6", "empty", "{\"keys\":[{\"field\":\"k\"}]}");
    cr_expect_eq(summary_num("t6", "sinkRows"), 0);
    /* 40 ranges over distinct ids: every range gets rows, the parts in range order */
    sort_pipeline("t7", "in", "16Ki", "{keys: [{field: id}], partitions: 40}",
                  "  - {name: after, op: identity}\n", "");
    run_sorted("t7", "in", "{\"keys\":[{\"field\":\"id\"}]}");
    cr_expect_eq(reduce_tasks("t7"), 40);
    cr_expect_eq(num("cd %s/out-t7 && for f in part-*; do [ -s $f ] || echo $f; done | wc -l", dir),
                 0, "no empty range");
}

Test(sort, a_missing_key_is_a_data_error)
{
    sort_pipeline("t8", "in", "64Ki", "{keys: [{field: v}]}", "", "");
    char *out = NULL;
    cr_expect_neq(run_cli("t8", "--cpus 2", &out), 0);
    cr_expect(strstr(out, "has no field v (missingKey: null") != NULL, "%s", out);
    free(out);
}

/* A memory budget far below the data (775 KiB): with enough partitions each task holds its
 * share and the sort matches the reference; with one partition the middle op and the reduce
 * spill sorted runs and merge them, and it matches it too (before sort spilled, that run failed:
 * "the rows of one task take more than 64Ki"). */
Test(sort, budget_below_the_data)
{
    sort_pipeline("m1", "in", "4Ki", "{keys: [{field: id}], partitions: 32}", "",
                  "  execution: {memoryBudget: 256Ki}\n");
    run_sorted("m1", "in", "{\"keys\":[{\"field\":\"id\"}]}");
    sort_pipeline("m2", "in", "4Ki", "{keys: [{field: id}], partitions: 1}", "",
                  "  execution: {memoryBudget: 256Ki}\n");
    run_sorted("m2", "in", "{\"keys\":[{\"field\":\"id\"}]}");
    cr_expect_gt(num("python3 -c 'import json; print(sum(s[\"opSpilledBytes\"] for s in "
                     "json.load(open(\"%s/m2.summary.json\"))[\"stages\"]))'",
                     dir),
                 0);
}

/* A worker killed while the reduce tasks run (every map and middle task done): the outputs it
 * held are made again by lineage, and the output is the reference's. 8 ranges: the middle op's
 * tasks, whose outputs the queued reduce tasks need, ran on both workers. */
Test(sort, kill_during_reduce_gives_the_same_output)
{
    sort_pipeline("k1", "in", "16Ki", "{keys: [{field: k}, {field: id}], partitions: 8}",
                  "  - {name: slow, op: bench.sleep, args: {msPerRecord: 0.5}}\n", "");
    /* every map and middle task done, reduce tasks running, none done */
    itest_run_kill_when("k1", "x.range ([0-9]+)/\\1 done 0 running; x\\+slow 0/[0-9]+ done [1-9]");
    check_sorted("k1", "in", "{\"keys\":[{\"field\":\"k\"},{\"field\":\"id\"}]}");
    cr_expect_gt(summary_num("k1", "partitionsRecovered"), 0, "outputs re-made by lineage");
}

/* A parquet source's typed columns reach sort as records (one JSON object per row): the sort of
 * the parquet copy of `in` is the sort of the same projection written as jsonl. */
Test(sort, typed_columns_sort_as_records)
{
    static const char *const sinks[][2] = {
        {"pq", "format: parquet, args: {schema: [{name: id, type: int64}, {name: g, type: "
               "int64}, {name: s, type: string}, {name: n, type: int64}]}"},
        {"inp", "format: jsonl"},
    };
    for (size_t i = 0; i < 2; i++) {
        FILE *f = itest_create("to%s.yaml", sinks[i][0]);
        fprintf(f,
                "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: to%s}\n"
                "spec:\n  source: {uri: 'file://%s/in/', format: jsonl}\n"
                "  stages:\n  - {name: keep, op: project, args: {fields: [id, g, s, n]}}\n"
                "  sink: {uri: 'file://%s/%s/', %s}\n",
                sinks[i][0], dir, dir, sinks[i][0], sinks[i][1]);
        fclose(f);
        char name[16], *out = NULL;
        snprintf(name, sizeof name, "to%s", sinks[i][0]);
        cr_assert_eq(run_cli(name, "--cpus 2", &out), 0, "%s", out);
        free(out);
    }
    FILE *f = itest_create("t9.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: t9}\n"
            "spec:\n  source: {uri: 'file://%s/pq/', format: parquet}\n"
            "  stages:\n  - {name: x, op: sort, args: {keys: [{field: s}, {field: n, "
            "descending: true}], partitions: 3}}\n"
            "  sink: {uri: 'file://%s/out-t9/', format: jsonl}\n",
            dir, dir);
    fclose(f);
    run_sorted("t9", "inp", "{\"keys\":[{\"field\":\"s\"},{\"field\":\"n\",\"descending\":true}]}");
    cr_expect_eq(summary_num("t9", "sinkRows"), 12000);
}
