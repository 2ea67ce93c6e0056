/* `streambatch run` whose own process dies: SIGKILLed at random points, then `--resume` from
 * the checkpoint file continues without redoing committed work, with output identical to the
 * input; the killed driver's workers exit with it. A changed spec refuses --resume, a changed
 * source runs everything again, a damaged checkpoint is named. Parts are not synced until the
 * commit, so a resume checks every part it carries over: one missing, cut short or changed
 * behind its back (what a machine crash can leave) is made again from its split. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-resume");
    /* run directories (the workers' --spill-dir) under dir: only this test's workers count */
    setenv("TMPDIR", dir, 1);
    itest_slow_pipeline("resumable");
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

TestSuite(resume, .init = setup, .fini = teardown, .timeout = 240);

/* Starts `streambatch run p.yaml FLAGS` and SIGKILLs it after `secs`; returns the log. */
static char *run_killed(const char *flags, double secs)
{
    sh("cd %s && { %s run p.yaml --cpus 2 --checkpoint ck.json %s > killed.log 2>&1 & "
       "pid=$!; sleep %.2f; kill -9 $pid; wait $pid; true; }",
       dir, sb_test_bin("streambatch"), flags, secs);
    return sb_test_sh_out("cat %s/killed.log", dir);
}

/* itest_run_p with its summary in s.json (resume_num) */
static int run_to_end(const char *flags, char **out)
{
    char f[1024];
    snprintf(f, sizeof f, "--summary-json s.json %s", flags);
    return itest_run_p(f, out);
}

/* a top-level number of run_to_end's summary */
static long resume_num(const char *key)
{
    return itest_json_num("s.json", key);
}

/* committed splits the checkpoint holds (-1: no file): its log read by ckpt_splits.py */
static long committed_in_checkpoint(void)
{
    char *v = sb_test_sh_out("cd %s && python3 %s/tests/integration/ckpt_splits.py ck.json", dir,
                             sb_test_root());
    long n = strtol(v, NULL, 10);
    free(v);
    return n;
}

/* expect_output_equals_input, and the checkpoint removed */
static void expect_resumed_output(void)
{
    expect_output_equals_input();
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/ck.json", dir);
    cr_expect_neq(stat(p, &st), 0, "the checkpoint is removed when the run succeeds");
    snprintf(p, sizeof p, "%s/out/_streambatch", dir);
    cr_expect_neq(stat(p, &st), 0, "the checkpoint's log is removed when the run succeeds");
}

static void expect_no_orphans(void)
{
    char *n = sb_test_sh_out("sleep 1; pgrep -f -- '--spill-[d]ir %s/' | wc -l", dir);
    cr_expect_str_eq(n, "0", "workers of the killed driver are still running");
    free(n);
}

Test(resume, sigkilled_driver_resumes_without_redoing_committed_work)
{
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    /* kill twice at random points (the second while resuming), then resume to the end */
    double t1 = 1.5 + (rand() % 2500) / 1000.0, t2 = 1.0 + (rand() % 2500) / 1000.0;
    char *log = run_killed("", t1);
    free(log);
    expect_no_orphans();
    long c1 = committed_in_checkpoint();
    cr_assert_geq(c1, 1, "seed %u: nothing checkpointed after %.2f s", seed, t1);
    cr_assert_lt(c1, 40, "seed %u: the run finished before it was killed at %.2f s", seed, t1);
    log = run_killed("--resume", t2);
    cr_expect(strstr(log, "resuming from") != NULL, "seed %u: %s", seed, log);
    free(log);
    expect_no_orphans();
    long c2 = committed_in_checkpoint();
    cr_assert_geq(c2, c1, "seed %u: the checkpoint went back (%ld after %ld)", seed, c2, c1);
    /* The first run's checkpoint is epoch 0, the second run's epoch 1, written with its first
     * commit; killed before that (t2 is 1-3.5 s and a loaded machine may start it slowly), the
     * checkpoint is still the first run's. The last run says the epoch it runs as (one more). */
    long e2 = itest_json_num("ck.json", "epoch");
    cr_assert(e2 == 1 || (e2 == 0 && c2 == c1), "seed %u: epoch %ld with %ld then %ld committed",
              seed, e2, c1, c2);
    char *out;
    int rc = run_to_end("--resume", &out);
    cr_assert_eq(rc, 0, "seed %u (kills at %.2f s, %.2f s): %s", seed, t1, t2, out);
    char want[128];
    snprintf(want, sizeof want, "%ld splits committed by earlier runs (epoch %ld)", c2, e2 + 1);
    cr_expect(strstr(out, want) != NULL, "seed %u: %s", seed, out);
    free(out);
    /* one fused task per split: the last run ran exactly the splits not committed */
    cr_expect_eq(resume_num("tasksRun"), 40 - c2, "seed %u: %ld committed, %ld tasks run", seed, c2,
                 resume_num("tasksRun"));
    cr_expect_eq(resume_num("sinkRows"), 8000);
    expect_resumed_output();
}

Test(resume, carried_over_parts_that_are_missing_cut_or_changed_are_made_again)
{
    /* killed once the checkpoint holds 3 committed splits (polled: the machine may be slow) */
    sh("cd %s && { %s run p.yaml --cpus 2 --checkpoint ck.json > killed.log 2>&1 & pid=$!; "
       "for i in $(seq 600); do sleep 0.1; n=$(python3 %s/tests/integration/ckpt_splits.py "
       "ck.json 2>/dev/null); test \"${n:-0}\" -ge 3 && break; done; kill -9 $pid; wait $pid; "
       "true; }",
       dir, sb_test_bin("streambatch"), sb_test_root());
    expect_no_orphans();
    long c = committed_in_checkpoint();
    cr_assert_geq(c, 3, "only %ld splits checkpointed", c);
    cr_assert_lt(c, 40, "the run finished before it was killed");
    /* three parts of three committed splits, each damaged in its own way (one byte changed
     * keeps the size: only the CRC-32C tells) */
    char *damaged = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json, os\n"
        "ps = os.popen('python3 %s/tests/integration/ckpt_splits.py ck.json --list').read()"
        ".split()\n"
        "seen = []\nfor p in ps:\n  i = p.split(':')[0]\n  t = i.split('-')[1]\n"
        "  if all(s.split('-')[1] != t for s in seen): seen.append(i)\n"
        "a, b, d = ['out/part-%%s.jsonl' %% i for i in seen[:3]]\n"
        "os.truncate(a, os.path.getsize(a) // 2)\n"
        "with open(b, 'r+b') as f:\n  f.seek(2); x = f.read(1); f.seek(2); "
        "f.write(b'7' if x != b'7' else b'8')\n"
        "os.remove(d)\nprint(len(seen[:3]))\n\"",
        dir, sb_test_root());
    cr_assert_str_eq(damaged, "3");
    free(damaged);
    char *out;
    int rc = run_to_end("--resume", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "3 sink parts carried over by the checkpoint are missing or differ from "
                          "what it recorded") != NULL &&
                  strstr(out, "3 committed splits run again") != NULL,
              "%s", out);
    free(out);
    /* one fused task per split: the splits not committed, plus the three made again */
    cr_expect_eq(resume_num("tasksRun"), 40 - c + 3, "%ld committed, %ld tasks run", c,
                 resume_num("tasksRun"));
    cr_expect_eq(resume_num("sinkRows"), 8000);
    expect_resumed_output();
}

Test(resume, changed_spec_refuses_resume_and_a_plain_run_starts_over)
{
    char *log = run_killed("", 2.5);
    free(log);
    cr_assert_geq(committed_in_checkpoint(), 1);
    sh("cd %s && sed -i 's/{name: b, op: identity}/{name: b, op: bench.spin, args: {msPerRecord: "
       "0}}/' p.yaml",
       dir);
    char *out;
    int rc = run_to_end("--resume", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--resume: the pipeline changed since") != NULL &&
                  strstr(out, "run without --resume to start over") != NULL,
              "%s", out);
    free(out);
    rc = run_to_end("", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "held the checkpoint of an earlier run that did not finish; starting "
                          "over") != NULL,
              "%s", out);
    free(out);
    cr_expect_eq(resume_num("tasksRun"), 40, "a plain run starts over");
    expect_resumed_output();
}

Test(resume, changed_source_runs_every_split_again)
{
    char *log = run_killed("", 2.5);
    free(log);
    cr_assert_geq(committed_in_checkpoint(), 1);
    /* a file sorted first shifts every split index: committed indices would name other data
     * (2,900 bytes: too large to share a split with f00 under partitionSize 3000) */
    sh("cd %s && python3 -c \"\nimport json\nwith open('in/a00.jsonl', 'w') as o:\n"
       "  o.write(json.dumps({'id': -1, 'p': 'x' * 2880}) + '\\\\n')\n\" && "
       "test $(stat -c %%s in/a00.jsonl) -eq 2900",
       dir);
    char *out;
    int rc = run_to_end("--resume", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "the source changed since the checkpoint was written: every split runs "
                          "again") != NULL,
              "%s", out);
    free(out);
    cr_expect_eq(resume_num("tasksRun"), 41);
    expect_resumed_output();
}

Test(resume, damaged_checkpoint_is_named_and_replaced_by_a_plain_run)
{
    sh("cd %s && printf '{\"epoch\": 1, \"committedSplits\": \"0-3\", \"parts\": [\"bad part\"]}' "
       "> ck.json",
       dir);
    char *out;
    int rc = run_to_end("--resume", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ck.json.parts[0]") != NULL, "%s", out);
    free(out);
    sh("cd %s && printf '{\"epoch\": 1, \"commi' > ck.json", dir);
    rc = run_to_end("--resume", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "not JSON (a file cut short? remove it to start over)") != NULL, "%s",
              out);
    free(out);
    rc = run_to_end("", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    expect_resumed_output();
}

Test(resume, a_damaged_or_foreign_log_is_refused_and_the_run_starts_over)
{
    char *log = run_killed("", 2.5);
    free(log);
    long c = committed_in_checkpoint();
    cr_assert_geq(c, 1);
    cr_assert_lt(c, 40, "the run finished before it was killed");
    /* the last file of the log loses its end: what a torn write would leave without the rename */
    sh("cd %s && f=$(ls out/_streambatch/checkpoint/*.sbck | sort | tail -1) && "
       "head -c 100 \"$f\" > t && mv t \"$f\"",
       dir);
    char *out;
    int rc = run_to_end("--resume", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "ck.json is refused: checkpoint ") != NULL &&
                  strstr(out, "/out/_streambatch/checkpoint/") != NULL &&
                  strstr(out, "cut short") != NULL && strstr(out, "starting over") != NULL,
              "%s", out);
    free(out);
    cr_expect_eq(resume_num("tasksRun"), 40, "a refused checkpoint starts over");
    expect_resumed_output();
    /* a log of another run (another id) under this summary: foreign */
    log = run_killed("", 2.5);
    free(log);
    cr_assert_geq(committed_in_checkpoint(), 1);
    sh("cd %s && sed -i 's/\"id\":\"[0-9a-f]*\"/\"id\":\"00000000000000aa\"/' ck.json", dir);
    rc = run_to_end("--resume", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "is foreign: its log id is") != NULL, "%s", out);
    free(out);
    cr_expect_eq(resume_num("tasksRun"), 40);
    expect_resumed_output();
}

Test(resume, default_path_is_per_pipeline_and_sink_under_the_state_directory)
{
    char cmd[2048], *out;
    snprintf(cmd, sizeof cmd,
             "cd %s && { XDG_STATE_HOME=%s/state %s run p.yaml --cpus 2 > k.log 2>&1 & pid=$!; "
             "sleep 2.5; kill -9 $pid; wait $pid; ls state/streambatch/checkpoints; }",
             dir, dir, sb_test_bin("streambatch"));
    char *ls = sb_test_sh_out("%s", cmd);
    cr_expect(strncmp(ls, "resumable-", 10) == 0 && strstr(ls, ".json") != NULL, "%s", ls);
    free(ls);
    snprintf(cmd, sizeof cmd,
             "cd %s && XDG_STATE_HOME=%s/state timeout 120 %s run p.yaml --cpus 2 --resume 2>&1; "
             "ls state/streambatch/checkpoints | wc -l",
             dir, dir, sb_test_bin("streambatch"));
    int rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 0);
    cr_expect(strstr(out, "resuming from") != NULL && strstr(out, "resumable: Succeeded") != NULL,
              "%s", out);
    cr_expect(out[strlen(out) - 2] == '0', "checkpoint removed: %s", out);
    free(out);
}
