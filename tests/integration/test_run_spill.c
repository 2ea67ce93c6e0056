/* sort and distinct past the memory budget (`streambatch run`, real worker processes; issue 41):
 * ~79 MiB of ~1 KiB jsonl rows under a 4 MiB budget (19x; a task's share is 1 MiB, and each of
 * the 16 middle and reduce tasks holds ~5 MiB), so sort's middle op and reduce and distinct's
 * reduce spill sorted runs and merge them (worker/ops/exchange/runs.c). Each output is checked
 * against the Python reference tests/allops/check.py (stable: the exact order; otherwise the
 * rows kept and in order), the stages report spilled bytes, and the workers' peak RSS stays
 * within that of an identity pipeline over the same input and budget plus SPILL_RSS_SLACK (the
 * documented per-worker constant: docs/pipeline-api.md; an empty input under a spilling
 * budget: test_allops_spill.c). Before the spilling these runs failed:
 * "sort does not spill yet", "distinct does not spill yet". */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

/* What a worker's RSS may rise above the identity run's while it spills (the goal is
 * the budget plus 40 MiB per worker): two slots' chunks, sort arrays and run read buffers, the
 * partitions a middle task hands on (one per bucket) and allocator slack; measured -7 to +13 MiB
 * on the shared 2-core test machine (5 to 29 before the exchange ops trimmed the heap after
 * each task), -15 to +5 with the exchange ops' rows reserved in the store and the heap trimmed
 * when partitions are released (identity ~73 MiB). */
#define SPILL_RSS_SLACK (40l << 20)

static void setup(void)
{
    itest_mkdtemp("sb-spill");
    setenv("TMPDIR", dir, 1); /* the workers' spill files land in the test's directory */
    /* 8 files of 10,000 rows; distinct's key pad takes 20,000 values */
    sh("cd %s && python3 %s/tests/allops/check.py genpad in 8 10000 5 20000", dir, sb_test_root());
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(spill, .init = setup, .fini = teardown, .timeout = 240);

/* dir/NAME.yaml: dir/IN/ in 1 MiB partitions through stage x (OP with ARGS, a YAML flow map)
 * to dir/out-NAME/, under a 4 MiB memory budget. */
static void spill_pipeline(const char *name, const char *in, const char *op, const char *args)
{
    write_one_stage(name, in, "1Mi", NULL, op, args, "4Mi");
}

static void run_ok(const char *name)
{
    char *out = NULL;
    int rc = run_cli(name, "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s failed:\n%s", name, out);
    free(out);
}

/* opSpilledBytes of NAME's stage STAGE (x.range: sort's middle op; x: the reduce). */
static long stage_spilled(const char *name, const char *stage)
{
    return num("python3 -c 'import json; print(sum(s[\"opSpilledBytes\"] for s in "
               "json.load(open(\"%s/%s.summary.json\"))[\"stages\"] if s[\"name\"] == \"%s\"))'",
               dir, name, stage);
}

/* NAME's peak worker RSS within the identity run's plus the slack. */
static void rss_within(const char *name)
{
    long base = summary_num("ident", "peakWorkerRss"), peak = summary_num(name, "peakWorkerRss");
    printf("spill: %s peak worker RSS %.1f MiB, identity %.1f MiB\n", name, peak / 1048576.0,
           base / 1048576.0);
    cr_expect_gt(base, 0);
    cr_expect_leq(peak, base + SPILL_RSS_SLACK, "%s: peak RSS %ld > identity's %ld + %ld", name,
                  peak, base, SPILL_RSS_SLACK);
}

/* One test for sort and distinct: the input is made once (seconds). */
Test(spill, sort_and_distinct_nineteen_times_the_budget)
{
    long input = num("du -cb %s/in/*.jsonl | tail -1 | cut -f1", dir);
    cr_assert_geq(input, 19l << 22, "input %ld is 19x the 4 MiB budget", input);
    spill_pipeline("ident", "in", "identity", "{}");
    run_ok("ident");
    /* stable, ties on g across the runs, v descending with its nulls (missing) first */
    spill_pipeline("st", "in", "sort",
                   "{keys: [{field: g}, {field: v, descending: true}], stable: true, nulls: first, "
                   "missingKey: null, partitions: 16}");
    run_ok("st");
    sh("cd %s && python3 %s/tests/allops/check.py sort '{\"keys\":[{\"field\":\"g\"},{\"field\":"
       "\"v\",\"descending\":true}],\"stable\":true,\"nulls\":\"first\",\"missingKey\":null}' in "
       "out-st",
       dir, sb_test_root());
    cr_expect_eq(summary_num("st", "sinkRows"), 80000);
    cr_expect_gt(stage_spilled("st", "x.range"), 0, "the middle op spilled");
    cr_expect_gt(stage_spilled("st", "x"), 0, "the reduce spilled");
    rss_within("st");
    /* not stable, nulls last: the order checked, ties in any order */
    spill_pipeline("nl", "in", "sort",
                   "{keys: [{field: v}, {field: g, descending: true}], nulls: last, "
                   "missingKey: null, partitions: 16}");
    run_ok("nl");
    sh("cd %s && python3 %s/tests/allops/check.py sort '{\"keys\":[{\"field\":\"v\"},{\"field\":"
       "\"g\",\"descending\":true}],\"nulls\":\"last\",\"missingKey\":null}' in out-nl",
       dir, sb_test_root());
    cr_expect_gt(stage_spilled("nl", "x"), 0);
    rss_within("nl");
    /* the key is ~1 KiB, ~19,600 of them over 80,000 rows: a reduce task's keys alone are
     * ~1.2 MiB; every key once, with a row that had it */
    spill_pipeline("d", "in", "distinct", "{fields: [pad], partitions: 16}");
    run_ok("d");
    sh("cd %s && python3 %s/tests/allops/check.py distinct '{\"fields\":[\"pad\"]}' in out-d", dir,
       sb_test_root());
    cr_expect_eq(summary_num("d", "sinkRows"),
                 num("cat %s/in/*.jsonl | python3 -c 'import json, sys; "
                     "print(len({json.loads(l)[\"pad\"] for l in sys.stdin}))'",
                     dir));
    cr_expect_gt(stage_spilled("d", "x"), 0, "the reduce spilled");
    rss_within("d");
}
