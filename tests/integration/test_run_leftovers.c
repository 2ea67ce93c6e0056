/* What a SIGKILLed `streambatch run` leaves behind (its run directory, its workers' spill dirs)
 * is removed by the next run of the same pipeline, and only when that run's process is really
 * gone (runckpt.h, "the run record"): a live run's files are never touched, and a second run
 * beside it is refused. The killed driver's workers exit with it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-leftovers");
    setenv("TMPDIR", dir, 1); /* the default run directories are made here */
    itest_slow_pipeline("leftovers");
}

static void teardown(void)
{
    /* what a failed test left running: only this test's processes, by pid */
    sh("cd %s && for f in live.pid sleep.pid; do test -e $f && kill -9 $(cat $f); done; true", dir);
    sh("rm -rf %s", dir);
}

TestSuite(leftovers, .init = setup, .fini = teardown, .timeout = 240);

/* `streambatch run p.yaml FLAGS` SIGKILLed secs seconds after its workers opened their spill
 * dirs (sbstore-*, under the run dir it prints) */
static void run_killed(const char *flags, double secs)
{
    sh("cd %s && { %s run p.yaml --cpus 2 --checkpoint ck.json %s > killed.log 2>&1 & "
       "pid=$!; for i in $(seq 600); do rd=$(sed -n 's/.*run dir \\(.*\\)$/\\1/p' killed.log); "
       "test -n \"$rd\" && ls -d \"$rd\"/*/sbstore-* > /dev/null 2>&1 && break; sleep 0.05; "
       "done; sleep %.2f; kill -9 $pid; wait $pid; true; }",
       dir, sb_test_bin("streambatch"), flags, secs);
}

static void expect_no_workers(void)
{
    long n = num("sleep 1; pgrep -f -- '--spill-[d]ir %s/' | wc -l", dir);
    cr_expect_eq(n, 0, "workers of the killed driver are still running");
}

Test(leftovers, killed_drivers_run_dir_is_removed_by_the_resumed_run)
{
    run_killed("", 1.0);
    expect_no_workers();
    /* the leftovers: the run directory with the workers' spill dirs (their partition stores) */
    cr_assert_eq(num("ls -d %s/streambatch-run-* | wc -l", dir), 1);
    cr_assert_geq(
        num("find %s/streambatch-run-*/ -mindepth 2 -maxdepth 2 -name 'sbstore-*' | wc -l", dir), 1,
        "no spill dirs left by the killed run's workers");
    cr_expect_eq(num("test -e %s/ck.json.run && echo 1 || echo 0", dir), 1, "run record kept");
    /* killed again while resuming: two dead runs' files, the first already removed */
    run_killed("--resume", 0.5);
    expect_no_workers();
    cr_expect_eq(num("ls -d %s/streambatch-run-* | wc -l", dir), 1,
                 "the first killed run's directory is still there");
    char *out;
    int rc = itest_run_p("--resume", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "died without cleaning up: removed") != NULL, "%s", out);
    free(out);
    cr_expect_eq(num("ls -d %s/streambatch-run-* 2>/dev/null | wc -l", dir), 0,
                 "run directories left behind");
    cr_expect_eq(num("test -e %s/ck.json.run && echo 1 || echo 0", dir), 0,
                 "run record removed at the end");
    expect_output_equals_input();
}

Test(leftovers, killed_drivers_spill_dirs_under_run_dir_are_removed_logs_kept)
{
    run_killed("--run-dir rd1", 0.5);
    expect_no_workers();
    cr_assert_geq(num("find %s/rd1 -mindepth 2 -maxdepth 2 -name 'sbstore-*' | wc -l", dir), 1);
    char *out;
    /* a plain run (no --resume) cleans too, into another run dir */
    int rc = itest_run_p("--run-dir rd2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(num("find %s/rd1 -mindepth 1 -type d | wc -l", dir), 0,
                 "the dead run's spill dirs are still there");
    cr_expect_geq(num("ls %s/rd1/*.log | wc -l", dir), 1, "the dead run's worker logs are kept");
    expect_output_equals_input();
}

Test(leftovers, a_live_runs_files_are_never_removed_and_a_second_run_is_refused)
{
    sh("cd %s || exit 1; { %s run p.yaml --cpus 2 --checkpoint ck.json > live.log 2>&1 & echo $! > "
       "live.pid; wait $!; echo $? > live.rc; rm live.pid; } > /dev/null 2>&1 &",
       dir, sb_test_bin("streambatch"));
    /* wait until it runs (its run dir is printed) and has checkpointed something */
    sh("cd %s && for i in $(seq 300); do grep -q 'run dir' live.log 2>/dev/null && test -e "
       "ck.json && break; sleep 0.1; done; grep -q 'run dir' live.log && test -e ck.json",
       dir);
    char *rd = sb_test_sh_out("cd %s && sed -n 's/.*run dir \\(.*\\)$/\\1/p' live.log", dir);
    long files = num("find %s | wc -l", rd);
    cr_assert_geq(files, 3);
    char *out;
    for (int resume = 0; resume < 2; resume++) {
        int rc = itest_run_p(resume ? "--resume" : "", &out);
        cr_expect_eq(rc, 2, "%s", out);
        cr_expect(strstr(out, "is running this pipeline into this sink") != NULL, "%s", out);
        free(out);
        cr_expect_geq(num("find %s | wc -l", rd), 1, "the live run's directory was removed");
        cr_expect_eq(num("test -e %s/ck.json && echo 1 || echo 0", dir), 1,
                     "the live run's checkpoint was removed");
    }
    sh("cd %s && for i in $(seq 600); do test -e live.rc && break; sleep 0.1; done; cat live.log; "
       "test \"$(cat live.rc)\" = 0",
       dir);
    free(rd);
    expect_output_equals_input();
}

Test(leftovers, a_record_is_dead_only_when_pid_and_start_time_are_gone)
{
    /* a live process that holds no lock, recorded with its real start time: alive */
    sh("cd %s && { sleep 300 > /dev/null 2>&1 & echo $! > sleep.pid; } && mkdir -p "
       "streambatch-run-a/cpu-0 && "
       "touch streambatch-run-a/cpu-0/spill && pid=$(cat sleep.pid) && "
       "start=$(sed 's/.*) //' /proc/$pid/stat | cut -d' ' -f20) && "
       "printf 'pid %%s\\nstart %%s\\nown 1\\nrundir %s/streambatch-run-a\\n' $pid $start > "
       "ck.json.run",
       dir, dir);
    char *out;
    int rc = itest_run_p("", &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "is running this pipeline into this sink") != NULL, "%s", out);
    free(out);
    cr_expect_eq(num("test -e %s/streambatch-run-a/cpu-0/spill && echo 1 || echo 0", dir), 1);
    /* the same pid with another start time: a reused pid, the recorded run is gone */
    sh("cd %s && sed -i 's/^start .*/start 1/' ck.json.run", dir);
    rc = itest_run_p("", &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "died without cleaning up: removed 3 of its files") != NULL, "%s", out);
    free(out);
    cr_expect_eq(num("test -e %s/streambatch-run-a && echo 1 || echo 0", dir), 0);
    sh("cd %s && kill $(cat sleep.pid) && rm sleep.pid", dir);
    expect_output_equals_input();
}
