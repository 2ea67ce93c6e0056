/* limit and join end to end (`streambatch run`, real worker processes; issue 41), each output
 * checked against the Python reference tests/allops/check_lj.py: limit gives exactly the
 * source's first N rows in order (N inside the first split, across many tiny splits, past the
 * input, an empty input) and drops the splits past them unrun; join matches a reference hash
 * join (inner and left, duplicate keys on both sides, keys of mixed types, missing keys, two
 * key fields, an empty right and an empty left), broadcast or, with the right side at or above
 * broadcastBelow, exchanged by key. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-limjoin");
    sh("cd %s && python3 %s/tests/allops/check.py gen in 6 2000 11 && mkdir empty && "
       ": > empty/e.jsonl && python3 %s/tests/allops/check_lj.py genjoin j 3000 5",
       dir, sb_test_root(), sb_test_root());
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(limit_join, .init = setup, .fini = teardown, .timeout = 120);

/* dir/NAME.yaml: dir/IN/ in partitions of PSIZE through STAGES (list items) to dir/out-NAME/. */
static void pipeline(const char *name, const char *in, const char *psize, const char *stages)
{
    write_pipeline_ps(name, psize, stages, "");
    sh("sed -i 's|file://%s/in/|file://%s/%s/|' %s/%s.yaml", dir, dir, in, dir, name);
}

static void run_ok(const char *name)
{
    char *out = NULL;
    int rc = run_cli(name, "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s failed:\n%s", name, out);
    free(out);
}

/* Runs a limit of ROWS over IN in partitions of PSIZE and checks the first rows came out. */
static void limit_run(const char *name, const char *in, const char *psize, long rows)
{
    char st[256];
    snprintf(st, sizeof st,
             "  - {name: x, op: limit, args: {rows: %ld}}\n"
             "  - {name: after, op: identity}\n",
             rows);
    pipeline(name, in, psize, st);
    run_ok(name);
    sh("cd %s && python3 %s/tests/allops/check_lj.py limit %ld %s out-%s", dir, sb_test_root(),
       rows, in, name);
}

/* The source tasks (splits) of run NAME, from its summary's first stage. */
static long splits_of(const char *name)
{
    return num("python3 -c \"import json; print(json.load(open('%s/%s.summary.json'))"
               "['stages'][0]['tasks'])\"",
               dir, name);
}

Test(limit_join, limit_inside_the_first_split)
{
    limit_run("l1", "in", "64Ki", 5);
    cr_expect_eq(summary_num("l1", "sinkRows"), 5);
}

/* ~780 splits of 1 KiB (~15 rows each); 2500 rows need the first ~170: the scheduler drops
 * the rest once the finished prefix holds 2500 rows, so most source tasks never run. */
Test(limit_join, limit_across_many_tiny_splits_stops_the_source)
{
    limit_run("l2", "in", "1Ki", 2500);
    cr_expect_eq(summary_num("l2", "sinkRows"), 2500);
    long splits = splits_of("l2"), run = summary_num("l2", "tasksRun");
    cr_expect_gt(splits, 700, "tiny splits");
    cr_expect_lt(run * 2, splits, "tasks run (%ld) << splits (%ld)", run, splits);
}

Test(limit_join, limit_past_the_input_and_on_an_empty_input)
{
    limit_run("l3", "in", "16Ki", 100000);
    cr_expect_eq(summary_num("l3", "sinkRows"), 12000);
    limit_run("l4", "empty", "64Ki", 10);
    cr_expect_eq(summary_num("l4", "sinkRows"), 0);
}

/* A join of dir/j/left (3000 rows, ~5% without k) with RIGHT_DIR (a dir under dir) by ARGS
 * (YAML flow map, right given here) in partitions of 8 KiB, checked against the reference with
 * ARGS_JSON. */
static void join_run(const char *name, const char *left, const char *right, const char *args,
                     const char *args_json)
{
    char st[768];
    snprintf(st, sizeof st,
             "  - {name: x, op: join, args: {right: {uri: 'file://%s/%s/', format: jsonl}, %s}}\n",
             dir, right, args);
    pipeline(name, left, "8Ki", st);
    run_ok(name);
    sh("cd %s && python3 %s/tests/allops/check_lj.py join '%s' %s %s out-%s", dir, sb_test_root(),
       args_json, left, right, name);
}

/* Keys 1, 1.0, -0.0/0, "1", true, null, lists and objects on both sides, each right key about
 * 4 times (so a left row gets one row per match), two left keys with no right row, missing
 * keys taken as null; right fields named like the left's come out as right_<name>. */
Test(limit_join, join_inner_and_left_on_mixed_type_duplicate_keys)
{
    join_run("j1", "j/left", "j/right", "on: [k], how: left, missingKey: null",
             "{\"on\":[\"k\"],\"how\":\"left\",\"missingKey\":null}");
    join_run("j2", "j/left", "j/right", "on: [k], missingKey: null",
             "{\"on\":[\"k\"],\"missingKey\":null}");
    cr_expect_gt(summary_num("j1", "sinkRows"), summary_num("j2", "sinkRows"),
                 "left keeps the unmatched rows");
    cr_expect_gt(summary_num("j2", "sinkRows"), 3000, "duplicate right keys multiply rows");
    cr_expect_gt(num("grep -l right_v %s/out-j2/part-* | wc -l", dir), 0, "clashes renamed");
}

Test(limit_join, join_on_two_fields)
{
    join_run("j3", "j/left", "j/right", "on: [k, k2], how: left, missingKey: null",
             "{\"on\":[\"k\",\"k2\"],\"how\":\"left\",\"missingKey\":null}");
}

Test(limit_join, join_with_an_empty_right_and_an_empty_left)
{
    sh("mkdir -p %s/er && : > %s/er/e.jsonl", dir, dir);
    join_run("j4", "j/left", "er", "on: [k], how: left, missingKey: null",
             "{\"on\":[\"k\"],\"how\":\"left\",\"missingKey\":null}");
    cr_expect_eq(summary_num("j4", "sinkRows"), 3000);
    join_run("j5", "j/left", "er", "on: [k], missingKey: null",
             "{\"on\":[\"k\"],\"missingKey\":null}");
    cr_expect_eq(summary_num("j5", "sinkRows"), 0);
    join_run("j6", "empty", "j/right", "on: [k], missingKey: null",
             "{\"on\":[\"k\"],\"missingKey\":null}");
    cr_expect_eq(summary_num("j6", "sinkRows"), 0);
}

/* Without missingKey: null a left record without the key is a data error naming it; a right
 * side at or above broadcastBelow is exchanged by key (test_run_join_exchange.c has more), here
 * on two key fields, and matches the reference. */
Test(limit_join, join_missing_key_and_a_right_side_exchanged)
{
    sh("mkdir -p %s/rk && printf '%%s\\n' '{\"k\":1,\"w\":1}' '{\"k\":\"a\",\"w\":2}' > "
       "%s/rk/r.jsonl",
       dir, dir);
    pipeline("j7", "j/left", "8Ki",
             "  - {name: x, op: join, args: {right: {uri: 'rk/r.jsonl'}, on: [k]}}\n");
    sh("cd %s && sed -i \"s|'rk/r.jsonl'|'file://%s/rk/r.jsonl'|\" j7.yaml", dir, dir);
    char *out = NULL;
    cr_expect_neq(run_cli("j7", "--cpus 2", &out), 0);
    cr_expect(strstr(out, "has no field k (missingKey: null") != NULL, "%s", out);
    free(out);
    join_run("j8", "j/left", "j/right",
             "on: [k, k2], how: left, missingKey: null, broadcastBelow: 1Ki",
             "{\"on\":[\"k\",\"k2\"],\"how\":\"left\",\"missingKey\":null}");
    cr_expect_eq(num("python3 -c \"import json; print(len(json.load(open('%s/j8.summary.json'))"
                     "['stages']))\"",
                     dir),
                 2, "exchanged: a map and a reduce op");
}
