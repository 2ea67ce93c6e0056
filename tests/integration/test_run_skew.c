/* An exchange bucket larger than a worker's whole store budget (`streambatch run`, a real worker
 * process; issue 41): every row on one key, one of them a 3 MiB record, under a 1 MiB budget
 * with one worker, so the map output that the reduce reads from its own store cannot be loaded
 * within the budget. Before the fix the worker reported it lost, its producer made it again just
 * as large, and the run looped until killed; now it is read outside the budget (logged), and the
 * output is checked against the Python reference tests/allops/check.py. Each run is bounded. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-skew");
    setenv("TMPDIR", dir, 1); /* the workers' spill files land in the test's directory */
    /* 200 rows of ~1 KiB and one of 3 MiB (the 101st), all with k = 1 */
    sh("cd %s && mkdir in && python3 -c 'import json\n"
       "with open(\"in/a.jsonl\", \"w\") as f:\n"
       "    for i in range(201):\n"
       "        pad = \"y\" * (3 << 20) if i == 100 else \"x\" * 1000\n"
       "        f.write(json.dumps({\"k\": 1, \"i\": i, \"pad\": pad}) + \"\\n\")'",
       dir);
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(skew, .init = setup, .fini = teardown, .timeout = 120);

/* dir/NAME.yaml: dir/in/ through stage x (OP with ARGS) to dir/out-NAME/ under a 1 MiB
 * budget; records up to 8 MiB are allowed. */
static void skew_pipeline(const char *name, const char *op, const char *args)
{
    write_one_stage(name, "in", "256Ki", "{maxRecordSize: 8388608}", op, args, "1Mi");
}

/* The sum over NAME's stages of the summary's per-stage figure KEY. */
static long stages_sum(const char *name, const char *key)
{
    return num("python3 -c 'import json; print(sum(s[\"%s\"] for s in "
               "json.load(open(\"%s/%s.summary.json\"))[\"stages\"]))'",
               key, dir, name);
}

/* Runs NAME (one worker: the reduce reads the map outputs from its own store) within 60 s; it
 * must succeed without re-running anything for lost inputs, with every row, and its worker must
 * have logged the read outside the budget, which the run's summary says too (per stage in the
 * JSON, one line in the printed one). */
static void run_skewed(const char *name)
{
    char flags[512], *out = NULL;
    snprintf(flags, sizeof flags, "--cpus 1 --run-dir %s/run-%s", dir, name);
    int rc = run_cli_timeout(60, name, flags, &out);
    cr_assert_eq(rc, 0, "%s failed (124: it did not end):\n%s", name, out);
    cr_expect(strstr(out, "too large for the room in a worker's budget, read outside it: ") != NULL,
              "the summary does not say an input was read outside the budget:\n%s", out);
    free(out);
    cr_expect_geq(stages_sum(name, "inputsOutsideBudget"), 1);
    cr_expect_gt(stages_sum(name, "inputsOutsideBudgetBytes"), 3l << 20, "the 3 MiB record's");
    cr_expect_eq(summary_num(name, "sinkRows"), 201);
    cr_expect_eq(summary_num(name, "tasksRerun"), 0, "no input was reported lost");
    cr_expect_eq(summary_num(name, "partitionsLost"), 0);
    sh("grep -l 'input read outside the store.s budget' %s/run-%s/*.log", dir, name);
}

Test(skew, a_bucket_larger_than_the_store_budget_is_read_not_lost)
{
    long budget = 1l << 20;
    long big = num("stat -c %%s %s/in/a.jsonl", dir);
    cr_assert_gt(big, 3 * budget, "the input holds a record 3x the budget");
    /* repartition to one partition: the one bucket holds every row */
    skew_pipeline("rp", "repartition", "{partitions: 1}");
    run_skewed("rp");
    sh("cd %s && python3 %s/tests/allops/check.py repartition '{\"partitions\":1}' in out-rp", dir,
       sb_test_root());
    /* sort on a key every row has the same: one range holds them all */
    skew_pipeline("st", "sort", "{keys: [{field: k}], stable: true, partitions: 4}");
    run_skewed("st");
    sh("cd %s && python3 %s/tests/allops/check.py sort '{\"keys\":[{\"field\":\"k\"}],"
       "\"stable\":true}' in out-st",
       dir, sb_test_root());
}
