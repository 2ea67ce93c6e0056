/* The memory bound of the spilling ops (issue 41: "no heap outside the budget beyond a
 * documented constant per task"): a sort and a groupby of ~12 MiB of ~1 KiB jsonl rows under a
 * 2 MiB budget, 2 workers of one slot, both spilling; each output checked exact against the
 * Python reference (tests/allops/check.py), and the workers' peak RSS (summed over the workers,
 * as the run's summary reports it) within an identity run's over the same input and budget (the
 * libraries, the data plane, the reader and sink) plus the budget plus SPILL_TASK_CONST per
 * worker of one slot (docs/pipeline-api.md). At this
 * size (1 MiB partitions) the runs before the exchange ops' rows were reserved in the store
 * (sb_op_impl.hold) measured +9 to +11 MiB and pass too: the larger figures are in
 * docs/benchmarks.md (scripts/bench-memory.sh sort). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

/* What one task may hold outside its share of the budget beyond what an identity task holds:
 * the merge's read buffers and key arrays, a middle task's range partition being built, and
 * allocator slack. The summed peaks measured +5 to +9 MiB over the identity run's here on the
 * shared 2-core machine (the 2 MiB budget included) while the worker mapped blocks of 1 MiB and
 * more on their own (reverted: it cost the identity pipeline a third of its wall time); with
 * the heap trimmed when partitions are released instead, -9 to +5 MiB (two runs). */
#define SPILL_TASK_CONST (8l << 20)
#define BUDGET (2l << 20)
#define WORKERS 2

static void setup(void)
{
    itest_mkdtemp("sb-spillrss");
    setenv("TMPDIR", dir, 1); /* the workers' spill files land in the test's directory */
    sh("cd %s && python3 %s/tests/allops/check.py genpad in 4 3000 5 20000", dir, sb_test_root());
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(spillrss, .init = setup, .fini = teardown, .timeout = 120);

/* dir/NAME.yaml: dir/IN/ in PSIZE partitions through stage x (OP with ARGS) under BUDGET_Q. */
static void pipeline_of(const char *name, const char *in, const char *psize, const char *op,
                        const char *args, const char *budget_q)
{
    write_one_stage(name, in, psize, NULL, op, args, budget_q);
    char *out = NULL;
    int rc = run_cli(name, "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s failed:\n%s", name, out);
    free(out);
    cr_assert_eq(summary_num(name, "workersStarted"), WORKERS);
}

/* dir/in/ in 1 MiB partitions through stage x (OP with ARGS) under BUDGET. */
static void pipeline(const char *name, const char *op, const char *args)
{
    pipeline_of(name, "in", "1Mi", op, args, "2Mi");
}

static long reduce_spilled(const char *name)
{
    return num("python3 -c 'import json; print(sum(s[\"opSpilledBytes\"] for s in "
               "json.load(open(\"%s/%s.summary.json\"))[\"stages\"] if s[\"name\"] == \"x\"))'",
               dir, name);
}

static void rss_bound(const char *name)
{
    long base = summary_num("ident", "peakWorkerRss"), peak = summary_num(name, "peakWorkerRss");
    long bound = base + BUDGET + WORKERS * SPILL_TASK_CONST;
    printf("spillrss: %s peak worker RSS %.1f MiB, identity %.1f MiB, bound %.1f MiB\n", name,
           peak / 1048576.0, base / 1048576.0, bound / 1048576.0);
    cr_expect_gt(base, 0);
    cr_expect_leq(peak, bound, "%s: peak worker RSS %ld > identity's %ld + budget + consts", name,
                  peak, base);
}

Test(spillrss, sort_and_groupby_within_identity_plus_share_plus_constant)
{
    long input = num("du -cb %s/in/*.jsonl | tail -1 | cut -f1", dir);
    cr_assert_geq(input, 5 * BUDGET, "input %ld is at least 5x the budget", input);
    pipeline("ident", "identity", "{}");
    pipeline("st", "sort",
             "{keys: [{field: g}, {field: v, descending: true}], stable: true, missingKey: null, "
             "partitions: 8}");
    sh("cd %s && python3 %s/tests/allops/check.py sort '{\"keys\":[{\"field\":\"g\"},{\"field\":"
       "\"v\",\"descending\":true}],\"stable\":true,\"missingKey\":null}' in out-st",
       dir, sb_test_root());
    cr_expect_eq(summary_num("st", "sinkRows"), 12000);
    cr_expect_gt(reduce_spilled("st"), 0, "the sort's reduce spilled");
    rss_bound("st");
    pipeline("gb", "groupby",
             "{keys: [g], aggregates: [{op: count, as: n}, {op: sum, field: id, as: s}, "
             "{op: collect, field: pad, as: pads}], partitions: 8}");
    sh("cd %s && python3 %s/tests/allops/check.py groupby '{\"keys\":[\"g\"],\"aggregates\":["
       "{\"op\":\"count\",\"as\":\"n\"},{\"op\":\"sum\",\"field\":\"id\",\"as\":\"s\"},"
       "{\"op\":\"collect\",\"field\":\"pad\",\"as\":\"pads\"}]}' in out-gb",
       dir, sb_test_root());
    cr_expect_gt(reduce_spilled("gb"), 0, "the groupby's reduce spilled");
    rss_bound("gb");
}

Test(spillrss, a_task_writes_its_output_as_it_makes_it)
{
    /* One groupby reduce task (partitions: 1) makes its whole output, ~62 MiB (a collect per
     * row), in its finish. A worker without an accelerator queued a task's outputs until the
     * op call returned, so that task held them all: its worker's peak RSS was ~95 MiB above an
     * identity run's over the same input and budget (216 and 223 MiB summed against 123). Now
     * they are written as they come, and the peak is the identity's (124-126 against 123-127). */
    sh("cd %s && python3 %s/tests/allops/check.py genpad big 4 16000 5 20000", dir, sb_test_root());
    long input = num("du -cb %s/big/*.jsonl | tail -1 | cut -f1", dir);
    cr_assert_geq(input, 60l << 20, "input %ld", input);
    pipeline_of("bident", "big", "4Mi", "identity", "{}", "64Mi");
    pipeline_of("bgb", "big", "4Mi", "groupby",
                "{keys: [id], aggregates: [{op: collect, field: pad, as: pads}], partitions: 1}",
                "64Mi");
    cr_assert_eq(summary_num("bgb", "sinkRows"), 64000);
    long base = summary_num("bident", "peakWorkerRss"), peak = summary_num("bgb", "peakWorkerRss");
    printf("spillrss: groupby of one task: peak worker RSS %.1f MiB, identity %.1f MiB\n",
           peak / 1048576.0, base / 1048576.0);
    cr_expect_gt(base, 0);
    cr_expect_leq(peak, base + (32l << 20),
                  "peak worker RSS %ld > identity's %ld + 32 MiB: the task held its output", peak,
                  base);
}
