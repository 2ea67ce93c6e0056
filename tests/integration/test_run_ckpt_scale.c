/* Checkpoints at scale (issue 38): a local run of many one-record input files (one split and one
 * sink part each; SB_ITEST_CKPT_FILES, default 20,000) whose driver is SIGKILLed once its
 * checkpoint log holds ~60% of the splits (each task sleeps so that the run lasts ~20 s), then
 * `--resume`: every split the log held is not
 * run again (tasks run = splits - committed), the output equals the input, the checkpoint file
 * stays a few hundred bytes however many parts the log holds, and the log's write cost per
 * committed part is printed ("figure: ..."). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"

static long g_files = 20000;

static void setup(void)
{
    const char *n = getenv("SB_ITEST_CKPT_FILES");
    if (n != NULL && atol(n) >= 10)
        g_files = atol(n);
    itest_mkdtemp("sb-ckscale");
    setenv("TMPDIR", dir, 1);
    sh("cd %s && mkdir in && python3 -c \"\nimport json\nfor f in range(%ld):\n"
       "  with open('in/f%%06d.jsonl' %% f, 'w') as o: "
       "o.write(json.dumps({'id': f, 'pad': 'x' * 600}) + '\\\\n')\n\"",
       dir, g_files);
    sh("cd %s && cat > p.yaml <<'EOF'\n"
       "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: ckscale}\n"
       "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 1Ki}\n  stages:\n"
       "  - {name: a, op: bench.sleep, args: {msPerRecord: %ld}}\n"
       "  sink: {uri: 'file://%s/out/', format: jsonl}\nEOF",
       dir, dir, 40000 / g_files > 1 ? 40000 / g_files : 1, dir);
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(ckscale, .init = setup, .fini = teardown, .timeout = 1200);

/* The splits (or with --parts the parts) the checkpoint log holds now, read independently of
 * the C reader; -1 without a checkpoint file. */
static long in_log(const char *what)
{
    return num("cd %s && python3 %s/tests/integration/ckpt_splits.py ck.json %s", dir,
               sb_test_root(), what);
}

Test(ckscale, sigkilled_at_scale_resumes_without_rerunning_a_committed_split)
{
    long want = g_files * 6 / 10;
    /* killed once the log holds ~60% of the splits (polled; the summary's own count says when) */
    sh("cd %s && { %s run p.yaml --cpus 2 --checkpoint ck.json > killed.log 2>&1 & pid=$!; "
       "max=0; for i in $(seq 6000); do sleep 0.1; "
       "s=$(python3 -c \"import json; print(json.load(open('ck.json'))['splits'])\" 2>/dev/null); "
       "b=$(wc -c < ck.json 2>/dev/null); test \"${b:-0}\" -gt $max && max=$b; "
       "test \"${s:-0}\" -ge %ld && break; done; kill -9 $pid; wait $pid; echo $max > maxck; "
       "true; }",
       dir, sb_test_bin("streambatch"), want);
    long committed = in_log(""), parts = in_log("--parts");
    long maxck = num("cat %s/maxck", dir);
    cr_assert_geq(committed, want / 2, "only %ld of %ld splits committed when killed", committed,
                  g_files);
    cr_assert_lt(committed, g_files, "the run finished before it was killed");
    cr_expect_eq(parts, committed, "one part per committed split (%ld parts, %ld splits)", parts,
                 committed);
    cr_expect_lt(maxck, 4096, "the checkpoint file grew to %ld bytes", maxck);
    /* part files the kill left; their modification times must not change for committed ones */
    sh("cd %s && ls out/ | grep -c '^part-' > before.n; "
       "python3 %s/tests/integration/ckpt_splits.py ck.json --list | cut -d: -f1 | sort | "
       "sed 's/^/part-/; s/$/.jsonl/' > names; "
       "(cd out && xargs stat -c '%%n %%y' < ../names) > mtimes.before",
       dir, sb_test_root());
    char *out;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && sleep 1.1 && timeout 900 %s run p.yaml --cpus 2 --checkpoint ck.json "
             "--resume --summary-json s.json 2>&1",
             dir, sb_test_bin("streambatch"));
    int rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    char wantline[128];
    snprintf(wantline, sizeof wantline, "%ld splits committed by earlier runs", committed);
    cr_expect(strstr(out, wantline) != NULL, "%s", out);
    long tasks = itest_json_num("s.json", "tasksRun");
    cr_expect_eq(tasks, g_files - committed, "%ld committed before the kill, %ld tasks run of %ld",
                 committed, tasks, g_files);
    cr_expect_eq(itest_json_num("s.json", "sinkRows"), g_files);
    /* no committed part was written again */
    long changed = num("cd %s/out && xargs stat -c '%%n %%y' < ../names | "
                       "diff - ../mtimes.before | grep -c '^>' ; true",
                       dir);
    cr_expect_eq(changed, 0, "%ld committed parts were written again", changed);
    expect_output_equals_input();
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out/_streambatch", dir);
    cr_expect_neq(stat(p, &st), 0, "the log is removed after the run succeeded");
    const char *cost = strstr(out, "checkpoint: ");
    char line[256] = "";
    if (cost != NULL)
        snprintf(line, sizeof line, "%.*s", (int)strcspn(cost, "\n"), cost);
    cr_expect(cost != NULL, "no checkpoint cost line: %s", out);
    fprintf(stderr,
            "figure: ckpt-scale files=%ld committed_at_kill=%ld tasks_rerun_of_committed=%ld "
            "max_checkpoint_file_bytes=%ld resumed_run %s\n",
            g_files, committed, tasks - (g_files - committed), maxck, line);
    free(out);
}
