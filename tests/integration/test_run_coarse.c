/* Issue 42 end to end: coarse tasks (one per file, nothing to cut) with a sick worker, real
 * `streambatch run` processes. The only op reads the source, spins and writes the sink, so the
 * copy of the sick worker's task writes sink parts beside the original: the output must be every
 * record exactly once, one part per task, nothing visible but the parts, manifest and _SUCCESS. The
 * ratio to the speed-weighted bound is reported (the machine is shared: it is asserted in the
 * simulation, test_sched). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"

#define NFILES 8

static void setup(void)
{
    itest_mkdtemp("sb-itest-coarse");
    setenv("TMPDIR", dir, 1); /* the runs' worker spill dirs: this test's own workers only */
    /* 8 files of ~0.34 MiB: with msPerMB 3000, about a second of spin each */
    sh("cd %s && python3 -c \"\nimport json, random, os\nrandom.seed(7)\nos.makedirs('in')\n"
       "for f in range(%d):\n  with open('in/f%%02d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(2400):\n"
       "      o.write(json.dumps({'id': f*100000+i, 'pad': 'x'*random.randint(50, 200)}) + "
       "'\\\\n')\n\"",
       dir, NFILES);
}

static void teardown(void)
{
    sh("pgrep -f -- '--spill-[d]ir %s/' | xargs -r kill -CONT 2>/dev/null; rm -rf %s || true", dir,
       dir);
}

TestSuite(coarse, .init = setup, .fini = teardown, .timeout = 240);

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* Stops run NAME's worker cpu-0 for stop_s of every stop_s + cont_s seconds until the run ends
 * (a sick node, from outside). */
static void throttle_cpu0(const char *name, const char *stop_s, const char *cont_s)
{
    char *victim =
        sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/%s-run/cpu-0$' | head -1", dir, name);
    cr_assert(*victim, "no worker to throttle");
    sh("(while [ ! -f %s/%s.rc ] && kill -STOP %s 2>/dev/null; do sleep %s; kill -CONT %s; "
       "sleep %s; done; kill -CONT %s) >/dev/null 2>&1 &",
       dir, name, victim, stop_s, victim, cont_s, victim);
    free(victim);
}

/* Starts run NAME in the background: dir/IN/'s files (a task each) through bench.spin (msPerMB
 * 1000) to dir/out-NAME/, --cpus 2, its run dir dir/NAME-run, its exit status in dir/NAME.rc. */
static void spin_run_start(const char *name, const char *in)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/%s/', format: jsonl, partitionSize: 400Ki}\n"
            "  stages:\n  - {name: work, op: bench.spin, args: {msPerMB: 1000}}\n"
            "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n",
            name, dir, in, dir, name);
    fclose(f);
    sh("cd %s && (timeout 100 %s run %s.yaml --cpus 2 --run-dir %s/%s-run --summary-json "
       "%s.summary.json > %s.log 2>&1; echo $? > %s.rc) >/dev/null 2>&1 &",
       dir, sb_test_bin("streambatch"), name, dir, name, name, name, name);
}

/* Runs NAME (msPerMB ms_per_mb) on `cpus` workers; throttle: the first worker is stopped 180 ms
 * of every 200 ms from its start, a 10x slower node. Returns the run's wall time in seconds. */
static double run_coarse(const char *name, int ms_per_mb, int cpus, int throttle)
{
    char stages[256];
    snprintf(stages, sizeof stages, "  - {name: work, op: bench.spin, args: {msPerMB: %d}}\n",
             ms_per_mb);
    write_pipeline_ps(name, "400Ki", stages, ""); /* a file each: two do not fit */
    sh("mkdir -p %s/%s-run", dir, name);
    double t0 = now_s();
    sh("cd %s && (timeout 150 %s run %s.yaml --cpus %d --run-dir %s/%s-run --summary-json "
       "%s.summary.json > %s.log 2>&1; echo $? > %s.rc) >/dev/null 2>&1 &",
       dir, sb_test_bin("streambatch"), name, cpus, dir, name, name, name, name);
    if (throttle) {
        sh("for i in $(seq 1 500); do pgrep -f -- '--spill-[d]ir %s/%s-run/cpu-0$' >/dev/null && "
           "break; sleep 0.01; done",
           dir, name);
        throttle_cpu0(name, "0.18", "0.02");
    }
    sh("for i in $(seq 1 1400); do [ -f %s/%s.rc ] && break; sleep 0.05; done", dir, name);
    double t1 = now_s();
    char *rc = sb_test_sh_out("cat %s/%s.rc", dir, name);
    char *log = sb_test_sh_out("tail -20 %s/%s.log", dir, name);
    cr_assert_str_eq(rc, "0", "run %s failed:\n%s", name, log);
    free(rc);
    free(log);
    return t1 - t0;
}

Test(coarse, a_sick_workers_sink_task_is_copied_and_the_output_is_exact)
{
    double fixed = run_coarse("zero", 0, 2, 0);   /* the fixed cost: no work */
    double one = run_coarse("one", 3000, 1, 0);   /* one healthy worker: the work W + fixed */
    double sick = run_coarse("sick", 3000, 2, 1); /* a healthy one and a 10x slower one */
    double bound = fixed + (one - fixed) / 1.1;   /* W at 1 + 1/10 of one worker's speed */
    cr_log_info("coarse: fixed %.2f s, one worker %.2f s, sick run %.2f s = %.3fx the bound "
                "%.2f s",
                fixed, one, sick, sick / bound, bound);
    FILE *f = itest_create("ratio.txt"); /* kept in the log for the report */
    fprintf(f, "%.3f\n", sick / bound);
    fclose(f);
    char *want = sb_test_sh_out("cat %s/in/*.jsonl | sort | md5sum | cut -d' ' -f1", dir);
    char *got = sb_test_sh_out("cat %s/out-sick/part-*.jsonl | sort | md5sum | cut -d' ' -f1", dir);
    cr_expect_str_eq(got, want, "every record exactly once");
    free(got);
    free(want);
    cr_expect_eq(num("ls %s/out-sick/ | grep -c '^part-'", dir), NFILES, "one part per task");
    /* the loser may still be writing when the run commits and stops its workers: it leaves at
     * most hidden files (a staged part, a temporary one), which readers skip and the next
     * commit or abort into the sink removes; nothing else */
    cr_expect_eq(num("ls -A %s/out-sick/ | grep -v '^part-' | grep -v '^_SUCCESS$' | "
                     "grep -v '^_manifest.json$' | grep -c -v '^\\.sb\\(att\\|tmp\\)-' || true",
                     dir),
                 0, "only parts, the manifest, _SUCCESS and hidden leftovers");
    char *hidden = sb_test_sh_out("ls -A %s/out-sick/ | grep -c '^\\.' || true", dir);
    cr_log_info("coarse: %s hidden leftover(s) of the losing attempt", hidden);
    free(hidden);
    cr_expect_eq(num("python3 -c \"import json; print(len(json.load(open('%s/out-sick/"
                     "_manifest.json'))['parts']))\"",
                     dir),
                 NFILES, "the manifest lists one part per task");
    cr_expect_eq(num("test -f %s/out-sick/_SUCCESS && echo 1", dir), 1);
    char *copies = sb_test_sh_out("python3 -c \"import json; s=json.load(open('%s/sick.summary."
                                  "json')); print(sum(x.get('speculated', 0) for x in "
                                  "s['stages']))\"",
                                  dir);
    /* not asserted: on a loaded machine (load 16 on 2 CPUs, seen once) the healthy worker is as
     * slow as the throttled one and nothing is worth copying; the simulation asserts the rule.
     * Logged as info: a Criterion warning makes the binary exit 1, which run-tests.sh counts as
     * a failed suite. */
    if (strtol(copies, NULL, 10) < 1)
        cr_log_info("coarse: no copy was made (a loaded machine?), the sink's exactly-once was not "
                    "exercised this time");
    cr_log_info("coarse: %s copies", copies);
    free(copies);
    cr_expect_eq(summary_num("sick", "workersLost"), 0, "slow, not lost");
}

/* The loser of a copy's race is cancelled (issue 42's remaining cost: the run waited for it).
 * Four of the files (about 0.35 s of spin each); once the first worker is registered it is
 * stopped 195 ms of every 200 ms (40x slower): it holds one task and crawls (about 14 s), the
 * healthy one runs the other three and then the copy of the crawling task, which wins with most
 * of the loser's work left. Before cancels the run ended only when `streambatch run` SIGKILLed
 * that worker, 3 s after its stop began (its SIGTERM waited for the task); now the worker stops
 * the attempt as soon as it hears (the cancel, or the shutdown, rides on its next heartbeat
 * reply) and exits. Asserted: the run's exit within 2.5 s of the last part's publication, the
 * worker's log saying it stopped the attempt, the output exact, and nothing of the loser in the
 * sink. */
Test(coarse, the_losing_attempt_is_cancelled_and_the_run_does_not_wait_for_it)
{
    const char *name = "cancel";
    sh("mkdir -p %s/in4 %s/%s-run && cp %s/in/f0[0-3].jsonl %s/in4/", dir, dir, name, dir, dir);
    spin_run_start(name, "in4");
    /* registered (its first poll follows at once): from then on 40x slower */
    sh("for i in $(seq 1 3000); do grep -q 'worker ready' %s/%s-run/cpu-0.log 2>/dev/null && "
       "break; sleep 0.01; done",
       dir, name);
    throttle_cpu0(name, "0.195", "0.005");
    /* the last part published (the copy's, accepted), then the run's exit */
    sh("for i in $(seq 1 6000); do [ \"$(ls %s/out-%s/ 2>/dev/null | grep -c '^part-')\" -ge 4 ] "
       "&& break; [ -f %s/%s.rc ] && break; sleep 0.01; done",
       dir, name, dir, name);
    double published = now_s();
    sh("for i in $(seq 1 3000); do [ -f %s/%s.rc ] && break; sleep 0.01; done", dir, name);
    double ended = now_s();
    char *rc = sb_test_sh_out("cat %s/%s.rc", dir, name);
    char *log = sb_test_sh_out("tail -20 %s/%s.log", dir, name);
    cr_assert_str_eq(rc, "0", "run failed:\n%s", log);
    free(rc);
    free(log);
    cr_log_info("cancel: the run ended %.2f s after the last part was published",
                ended - published);
    cr_assert_eq(summary_num(name, "workersLost"), 0, "slow, not lost");
    char *won =
        sb_test_sh_out("python3 -c \"import json; s=json.load(open('%s/%s.summary."
                       "json')); print(sum(x.get('speculativeWins', 0) for x in s['stages']))\"",
                       dir, name);
    cr_assert_eq(strtol(won, NULL, 10), 1, "the copy of the crawling worker's task won");
    free(won);
    cr_expect_lt(ended - published, 2.5,
                 "the run does not wait for the losing attempt (%.2f s after the last part)",
                 ended - published);
    cr_expect_eq(num("grep -c 'attempt stopped: cancelled' %s/%s-run/cpu-0.log || true", dir, name),
                 1, "the throttled worker stopped its losing attempt");
    cr_expect_eq(num("grep -c 'exiting without waiting' %s/%s-run/cpu-0.log || true", dir, name), 0,
                 "the cancelled attempt ended: nothing was abandoned");
    char *want = sb_test_sh_out("cat %s/in4/*.jsonl | sort | md5sum | cut -d' ' -f1", dir);
    char *got =
        sb_test_sh_out("cat %s/out-%s/part-*.jsonl | sort | md5sum | cut -d' ' -f1", dir, name);
    cr_expect_str_eq(got, want, "every record exactly once");
    free(got);
    free(want);
    cr_expect_eq(num("ls -A %s/out-%s/ | grep -c -v '^part-\\|^_SUCCESS$\\|^_manifest.json$' || "
                     "true",
                     dir, name),
                 0, "nothing but the parts, the manifest and _SUCCESS (no .sbatt- file)");
    cr_expect_eq(num("ls %s/out-%s/ | grep -c '^part-'", dir, name), 4);
}

/* A stopping worker whose op does not check the cancel (exec: a program that sleeps) waits a
 * second for it, then exits leaving the slot: the program and what it started are killed (their
 * process group), the store's spill directory is removed, and the run ends at once. Two workers:
 * the idle one runs the sink's abort (with one, the abort waits 5 s for a free slot). */
Test(coarse, a_worker_that_leaves_a_running_op_leaves_nothing_behind)
{
    sh("mkdir -p %s/ab-in %s/ab-run && echo '{\"a\": 1}' > %s/ab-in/f.jsonl", dir, dir, dir);
    FILE *f = itest_create("ab.yaml");
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: ab}\n"
            "spec:\n  source: {uri: 'file://%s/ab-in/', format: jsonl}\n"
            "  stages:\n  - {name: slow, op: exec, args: {command: [sh, -c, 'sleep 41.5; cat']}}\n"
            "  sink: {uri: 'file://%s/out-ab/', format: jsonl}\n",
            dir, dir);
    fclose(f);
    sh("cd %s && (timeout 60 %s run ab.yaml --cpus 2 --run-dir %s/ab-run > ab.log 2>&1 & "
       "echo $! > ab.pid; wait $!; echo $? > ab.rc) >/dev/null 2>&1 &",
       dir, sb_test_bin("streambatch"), dir);
    sh("for i in $(seq 1 3000); do pgrep -f '^sleep 41[.]5$' >/dev/null && break; sleep 0.01; "
       "done");
    cr_assert_eq(num("pgrep -f '^sleep 41[.]5$' | wc -l"), 1, "the op's program runs");
    cr_assert_eq(num("ls -d %s/ab-run/cpu-*/sbstore-* | wc -l", dir), 2, "spill directories");
    double t0 = now_s();
    sh("kill -TERM $(cat %s/ab.pid)", dir); /* Ctrl-C: the run stops its workers */
    sh("for i in $(seq 1 1000); do [ -f %s/ab.rc ] && break; sleep 0.01; done", dir);
    double took = now_s() - t0;
    cr_log_info("abandon: the run ended %.2f s after its SIGTERM", took);
    cr_expect_lt(took, 2.9, "the worker left the slot after 1 s (the run SIGKILLs at 3 s)");
    long left =
        num("cat %s/ab-run/cpu-*.log | grep -c 'exiting without waiting for slots' || true", dir);
    cr_expect_eq(left, 1, "the worker running the op said it left the slot (%ld said so)", left);
    cr_expect_eq(num("pgrep -f '^sleep 41[.]5$' | wc -l"), 0, "nothing of the op runs on");
    cr_expect_eq(num("ls -d %s/ab-run/cpu-*/sbstore-* 2>/dev/null | wc -l", dir), 0,
                 "no spill directory left");
}

/* The run's end does not wait for a worker that cannot hear the controller: one worker is frozen
 * (SIGSTOP) once registered, the other does the work, and when the pipeline ends `streambatch
 * run` tells every worker at once that nothing of theirs is needed (SIGCONT, then SIGUSR1: leave
 * as if told to exit, without lingering). Before, the run waited a second for workers to leave on
 * their own (a busy or frozen one hears the controller's "exit" only at a heartbeat), then
 * SIGTERMed them, which lingers for late readers: its exit came >= 1 s after the pipeline's end,
 * the whole gap issue 42's coarse shape measured between 1.13x and 1.18x of the bound. */
Test(coarse, a_frozen_worker_does_not_hold_the_runs_exit)
{
    const char *name = "frozen";
    sh("mkdir -p %s/in2 %s/%s-run && cp %s/in/f0[0-1].jsonl %s/in2/", dir, dir, name, dir, dir);
    double t0 = now_s();
    spin_run_start(name, "in2");
    sh("for i in $(seq 1 3000); do grep -q 'worker ready' %s/%s-run/cpu-1.log 2>/dev/null && "
       "break; sleep 0.01; done; pgrep -f -- '--spill-[d]ir %s/%s-run/cpu-1$' | xargs -r kill "
       "-STOP",
       dir, name, dir, name);
    sh("for i in $(seq 1 9000); do [ -f %s/%s.rc ] && break; sleep 0.01; done", dir, name);
    double elapsed = now_s() - t0;
    char *rc = sb_test_sh_out("cat %s/%s.rc", dir, name);
    char *log = sb_test_sh_out("tail -20 %s/%s.log", dir, name);
    cr_assert_str_eq(rc, "0", "run failed:\n%s", log);
    free(rc);
    free(log);
    char *wall = sb_test_sh_out(
        "python3 -c \"import json; print(json.load(open('%s/%s.summary.json'))['wallSeconds'])\"",
        dir, name);
    double gap = elapsed - strtod(wall, NULL);
    free(wall);
    cr_log_info("frozen: the process ended %.2f s after its pipeline (%.2f s in all)", gap,
                elapsed);
    cr_expect_lt(gap, 0.6, "the run's exit waited %.2f s past its pipeline for a frozen worker",
                 gap);
    char *want = sb_test_sh_out("cat %s/in2/*.jsonl | sort | md5sum | cut -d' ' -f1", dir);
    char *got =
        sb_test_sh_out("cat %s/out-%s/part-*.jsonl | sort | md5sum | cut -d' ' -f1", dir, name);
    cr_expect_str_eq(got, want, "every record exactly once");
    free(got);
    free(want);
}
