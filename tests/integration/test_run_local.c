/* `streambatch run` end to end with real worker processes: output correctness against an
 * independent computation, workers killed with SIGKILL and stopped with SIGSTOP mid-run,
 * a deterministic op failure, a dataset 10x the memory budget, and Ctrl-C. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"

static void setup(void)
{
    itest_mkdtemp("sb-itest");
    /* runs make their run directory (the workers' --spill-dir) under TMPDIR: in dir, so the
     * tests find, stop and count only their own workers (other runs may go on here) */
    setenv("TMPDIR", dir, 1);
    /* 24 files of JSON lines, ~6 MiB in all */
    sh("cd %s && python3 -c \"\nimport json, random\nrandom.seed(3)\nimport os\nos.makedirs('in')\n"
       "for f in range(24):\n  with open('in/f%%02d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(2500):\n"
       "      o.write(json.dumps({'id': f*100000+i, 'n': random.randint(0, 99),"
       " 'pad': 'x'*random.randint(10, 150)}) + '\\\\n')\n\"",
       dir);
}

static void teardown(void)
{
    sh("rm -rf %s", dir);
}

/* Starts `streambatch run NAME.yaml FLAGS` in the background (at most 150 s): its output in
 * NAME.log, its summary in NAME.summary.json and, once it ended, its exit status in NAME.rc.
 * ENV ("" for none) goes before the command: variables of this run only. */
static void run_bg(const char *name, const char *env, const char *flags)
{
    sh("cd %s && (%s timeout 150 %s run %s.yaml %s --summary-json %s.summary.json > %s.log 2>&1; "
       "echo $? > %s.rc) >/dev/null 2>&1 &",
       dir, env, sb_test_bin("streambatch"), name, flags, name, name, name);
}

/* Waits (up to 140 s) for the background run NAME of run_bg() to end and asserts that it
 * succeeded, showing its log's last `lines` lines if not. Returns those lines (caller frees). */
static char *wait_bg_ok(const char *name, int lines)
{
    sh("for i in $(seq 1 1400); do [ -f %s/%s.rc ] && break; sleep 0.1; done", dir, name);
    char *rc = sb_test_sh_out("cat %s/%s.rc", dir, name);
    char *log = sb_test_sh_out("tail -%d %s/%s.log", lines, dir, name);
    cr_assert_str_eq(rc, "0", "run failed:\n%s", log);
    free(rc);
    return log;
}

/* SIGKILLs one of this test's worker processes (by their spill directories under dir) chosen
 * at random: 1, or 0 when none was running. */
static int kill_random_worker(void)
{
    return itest_kill_worker();
}

/* kill_random_worker() `rounds` times, every `ms`: how many were killed */
static int kill_workers_every(int ms, int rounds)
{
    int kills = 0;
    for (int round = 0; round < rounds; round++) {
        usleep((useconds_t)ms * 1000);
        kills += kill_random_worker();
    }
    return kills;
}

/* stages[0].retries of the run's summary */
static long first_stage_retries(const char *name)
{
    char *v = sb_test_sh_out("python3 -c \"import json; print(json.load(open('%s/%s.summary.json'))"
                             "['stages'][0]['retries'])\"",
                             dir, name);
    long n = strtol(v, NULL, 10);
    free(v);
    return n;
}

/* sorted multiset of output lines, as a digest */
static char *output_digest(const char *name)
{
    return sb_test_sh_out("cat %s/out-%s/part-*.jsonl | sort | md5sum | cut -d' ' -f1", dir, name);
}

/* the digest of the input lines that pass filter_py, each `times` times */
static char *expected_digest_times(const char *filter_py, int times)
{
    return sb_test_sh_out("cd %s && python3 -c \"\nimport json, glob, hashlib\nlines=[]\n"
                          "for p in sorted(glob.glob('in/*.jsonl')):\n  for l in open(p):\n"
                          "    r=json.loads(l)\n    if %s: lines.extend([l] * %d)\n"
                          "print(hashlib.md5(''.join(sorted(lines)).encode()).hexdigest())\n\"",
                          dir, filter_py, times);
}

static char *expected_digest(const char *filter_py)
{
    return expected_digest_times(filter_py, 1);
}

TestSuite(run, .init = setup, .fini = teardown, .timeout = 180);

Test(run, identity_and_spin_keep_every_record)
{
    write_pipeline("keep",
                   "  - {name: a, op: identity}\n"
                   "  - {name: b, op: bench.spin, args: {msPerMB: 1}}\n",
                   "  execution: {memoryBudget: 1Mi}\n");
    char *out;
    int rc = run_cli("keep", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "keep: Succeeded") != NULL, "%s", out);
    free(out);
    char *got = output_digest("keep"), *want = expected_digest("True");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out-keep/_SUCCESS", dir);
    cr_expect_eq(stat(p, &st), 0, "_SUCCESS written");
    cr_expect_eq(summary_num("keep", "sinkRows"), 24 * 2500);
}

Test(run, staged_and_static_modes_give_the_same_output)
{
    const char *stages =
        "  - {name: a, op: identity}\n"
        "  - {name: g, op: bench.sleep, args: {msPerMB: 5}, resources: {gpu: 1}}\n";
    write_pipeline("staged", stages, "  execution: {mode: staged, memoryBudget: 1Mi}\n");
    write_pipeline("static", stages, "  execution: {mode: static, memoryBudget: 1Mi}\n");
    char *want = expected_digest("True");
    const char *names[] = {"staged", "static"};
    for (int i = 0; i < 2; i++) {
        char *out;
        int rc = run_cli(names[i], "--cpus 2 --gpus 1", &out);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        char *got = output_digest(names[i]);
        cr_expect_str_eq(got, want, "mode %s", names[i]);
        free(got);
    }
    /* staged materialises the whole first stage before the second starts */
    char *du = sb_test_sh_out("du -cb %s/in/*.jsonl | tail -1 | cut -f1", dir);
    cr_expect_geq(summary_num("staged", "peakPartitionBytes"), atol(du) * 9 / 10);
    free(du);
    free(want);
}

/* Row by row: the expected rows (filter n < 70, then project [id, n], computed here from the
 * input) against the rows of every part file, parsed, field order included, as multisets.
 * Returns "<expected> <got> <lost> <extra>" (extra: duplicated or unexpected rows). */
static char *check_filter_project(const char *name)
{
    FILE *f = itest_create("check_rows.py");
    fputs("import collections, glob, json, sys\n"
          "want, got = collections.Counter(), collections.Counter()\n"
          "for p in sorted(glob.glob('in/*.jsonl')):\n"
          "    for l in open(p):\n"
          "        r = json.loads(l)\n"
          "        if r['n'] < 70:\n"
          "            want[json.dumps([['id', r['id']], ['n', r['n']]])] += 1\n"
          "for p in glob.glob('out-%s/part-*' % sys.argv[1]):\n"
          "    for l in open(p):\n"
          "        got[json.dumps([list(kv) for kv in json.loads(l).items()])] += 1\n"
          "print(sum(want.values()), sum(got.values()), sum((want - got).values()),\n"
          "      sum((got - want).values()))\n",
          f);
    fclose(f);
    return sb_test_sh_out("cd %s && python3 check_rows.py %s", dir, name);
}

static const char *FILTER_PROJECT_STAGES =
    "  - {name: keep, op: filter, args: {field: n, op: lt, value: 70}}\n"
    "  - {name: proj, op: project, args: {fields: [id, n]}}\n"
    "  - {name: same, op: identity}\n";

/* Static mode binds CPU slots to stages; with 3 stages on 2 CPUs the stages share the slots
 * round robin. Before, the third stage had no slot and the run always ended "stalled" (after
 * 3 x stallTimeout: 15 minutes by default). */
Test(run, static_mode_with_more_stages_than_cpus_finishes)
{
    write_pipeline("st3", FILTER_PROJECT_STAGES, "  execution: {mode: static, stallTimeout: 3s}\n");
    char *out;
    /* (the checkpoint, kept when a run fails, stays in the test's directory) */
    int rc = run_cli("st3", "--cpus 2 --checkpoint st3.ckpt.json", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "st3: Succeeded") != NULL, "%s", out);
    cr_expect(strstr(out, "2 cpu + 0 gpu workers") != NULL, "%s", out);
    free(out);
    char *rows = check_filter_project("st3");
    long want = -1, got = -1, lost = -1, extra = -1;
    cr_assert_eq(sscanf(rows, "%ld %ld %ld %ld", &want, &got, &lost, &extra), 4, "%s", rows);
    free(rows);
    cr_expect_gt(want, 0);
    cr_expect_eq(got, want, "rows written %ld, expected %ld", got, want);
    cr_expect_eq(lost, 0, "rows lost");
    cr_expect_eq(extra, 0, "rows duplicated or unexpected");
    cr_expect_eq(summary_num("st3", "sinkRows"), want);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out-st3/_SUCCESS", dir);
    cr_expect_eq(stat(p, &st), 0, "_SUCCESS written");
}

/* Static mode, one CPU per stage (3 workers, 1 slot each); the worker of the second stage
 * (cpu-1) is SIGKILLed while the first stage still runs, and `streambatch run` respawns it as
 * cpu-1-r1, a new worker: the slots are bound again, so the second stage gets one. Before, a
 * worker's binding came from its registration index, so cpu-1-r1 was bound to the first stage,
 * the second had no slot and the run ended "stalled". */
Test(run, static_mode_binds_slots_again_after_a_worker_is_respawned)
{
    const char *stages = "  - {name: slow, op: bench.spin, args: {msPerMB: 800}}\n"
                         "  - {name: keep, op: filter, args: {field: n, op: lt, value: 70}}\n"
                         "  - {name: proj, op: project, args: {fields: [id, n]}}\n";
    write_pipeline("st3k", stages, "  execution: {mode: static, stallTimeout: 3s}\n");
    char flags[1024];
    snprintf(flags, sizeof flags, "--cpus 3 --checkpoint st3k.ckpt.json --run-dir %s/st3k-run",
             dir);
    sh("mkdir -p %s/st3k-run", dir);
    run_bg("st3k", "", flags);
    /* cpu-1 once it is up, while the first stage still has seconds of work */
    sh("for i in $(seq 1 100); do grep -q 'worker ready' %s/st3k-run/cpu-1.log 2>/dev/null && "
       "break; sleep 0.05; done; sleep 1",
       dir);
    char *victim = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/st3k-run/cpu-1$' | head -1", dir);
    cr_assert(*victim, "no worker to kill");
    sh("kill -9 %s", victim);
    free(victim);
    free(wait_bg_ok("st3k", 20));
    char *repl = sb_test_sh_out("test -d %s/st3k-run/cpu-1-r1 && echo yes || echo no", dir);
    cr_expect_str_eq(repl, "yes", "the killed worker was respawned");
    free(repl);
    cr_expect_geq(summary_num("st3k", "workersLost"), 1);
    char *rows = check_filter_project("st3k");
    long want = -1, got = -1, lost = -1, extra = -1;
    cr_assert_eq(sscanf(rows, "%ld %ld %ld %ld", &want, &got, &lost, &extra), 4, "%s", rows);
    free(rows);
    cr_expect_gt(want, 0);
    cr_expect_eq(got, want, "rows written %ld, expected %ld", got, want);
    cr_expect_eq(lost, 0, "rows lost");
    cr_expect_eq(extra, 0, "rows duplicated or unexpected");
    char *orphans = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/' | wc -l", dir);
    cr_expect_str_eq(orphans, "0");
    free(orphans);
}

Test(run, filter_keeps_exactly_the_matching_records)
{
    write_pipeline("filt", "  - {name: small, op: filter, args: {field: n, op: lt, value: 30}}\n",
                   "");
    char *out;
    int rc = run_cli("filt", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    /* the summary's wall time ends at the last task; the commit's own time is shown after it */
    cr_expect(strstr(out, ", committed in ") != NULL, "%s", out);
    free(out);
    char *cs = sb_test_sh_out("python3 -c \"import json; c=json.load(open('%s/filt.summary.json'))"
                              "['commitSeconds']; print('ok' if 0 <= c < 60 else c)\"",
                              dir);
    cr_expect_str_eq(cs, "ok", "commitSeconds");
    free(cs);
    char *got = output_digest("filt"), *want = expected_digest("r['n'] < 30");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
}

/* Kills (SIGKILL) a random worker three times while the pipeline runs. */
Test(run, killed_workers_are_recovered_with_identical_output)
{
    const char *stages = "  - {name: a, op: bench.spin, args: {msPerMB: 1500}}\n"
                         "  - {name: g, op: bench.sleep, args: {msPerMB: 1000}, "
                         "resources: {gpu: 1}}\n";
    write_pipeline("kill", stages, "  execution: {memoryBudget: 2Mi}\n");
    run_bg("kill", "", "--cpus 2 --gpus 1");
    int kills = kill_workers_every(1500, 3);
    free(wait_bg_ok("kill", 20));
    cr_expect_geq(kills, 2, "workers were running to be killed");
    char *got = output_digest("kill"), *want = expected_digest("True");
    cr_expect_str_eq(got, want, "output differs from a failure-free computation");
    free(got);
    free(want);
    long rerun = summary_num("kill", "tasksRerun"), lostp = summary_num("kill", "partitionsLost");
    long lost = summary_num("kill", "workersLost"), run = summary_num("kill", "tasksRun");
    cr_expect_geq(lost, kills);
    /* Re-runs are bounded by what was lost: each lost partition's producer (the source tasks
     * have no upstream to re-run: they re-read their split), each consumer whose fetch of a
     * lost partition failed, and the tasks running on the killed workers (at most 2 slots
     * each). In particular far fewer than the failure-free run's own tasks. */
    cr_expect_leq(rerun, 2 * lostp + 2 * lost,
                  "re-ran %ld tasks for %ld lost partitions and %ld lost workers", rerun, lostp,
                  lost);
    cr_expect_lt(rerun, (run - rerun) / 2, "re-ran %ld of %ld tasks", rerun, run - rerun);
    char *orphans = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/' | wc -l", dir);
    cr_expect_str_eq(orphans, "0");
    free(orphans);
}

Test(run, stopped_worker_is_detected_and_recovered)
{
    const char *stages = "  - {name: a, op: bench.spin, args: {msPerMB: 1500}}\n";
    write_pipeline("stop", stages, "");
    run_bg("stop", "", "--cpus 2");
    usleep(1500 * 1000);
    char *victim = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/.*/cpu-0$' | head -1", dir);
    cr_assert(*victim, "no worker to stop");
    sh("kill -STOP %s", victim);
    free(victim);
    free(wait_bg_ok("stop", 20));
    cr_expect_geq(summary_num("stop", "workersLost"), 1);
    char *got = output_digest("stop"), *want = expected_digest("True");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
    char *orphans = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/' | wc -l", dir);
    cr_expect_str_eq(orphans, "0");
    free(orphans);
}

/* A throttled worker (stopped 0.9 s of every second, so its heartbeats still get through: slow,
 * not lost) holds tasks of the CPU stage at its tail: the idle worker runs copies of them, the
 * first attempt to finish counts, and the output is exactly the input. Drain is off here
 * (SB_SCHED_OFF=drain): on a loaded machine the run lasts long enough for this worker to be
 * drained as sick and replaced before the tail (a_sick_worker_is_drained_and_replaced); so is
 * the earliest-finish rule (earliest-finish), which would leave the tail to the idle worker and
 * nothing to copy. */
Test(run, stragglers_get_speculative_copies)
{
    const char *stages = "  - {name: a, op: bench.spin, args: {msPerMB: 1500}}\n"
                         "  - {name: b, op: identity, resources: {gpu: 1}}\n";
    write_pipeline("spec", stages, "");
    char flags[1024];
    snprintf(flags, sizeof flags,
             "--cpus 2 --gpus 1 --set spec.source.partitionSize=256Ki --run-dir %s/spec-run", dir);
    sh("mkdir -p %s/spec-run", dir);
    run_bg("spec", "SB_SCHED_OFF=drain,earliest-finish", flags);
    usleep(1000 * 1000);
    /* this run's worker (by its spill directory: other runs may be going on here) */
    char *victim = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/spec-run/cpu-0' | head -1", dir);
    cr_assert(*victim, "no worker to throttle");
    sh("(while [ ! -f %s/spec.rc ] && kill -STOP %s 2>/dev/null; do sleep 0.9; "
       "kill -CONT %s; sleep 0.1; done; kill -CONT %s) >/dev/null 2>&1 &",
       dir, victim, victim, victim);
    free(victim);
    char *log = wait_bg_ok("spec", 20);
    cr_expect(strstr(log, "speculative cop") != NULL, "the summary says so:\n%s", log);
    free(log);
    char *spec =
        sb_test_sh_out("python3 -c \"import json; s=json.load(open('%s/spec.summary.json'));"
                       " print(s['stages'][0]['speculated'], s['workersLost'])\"",
                       dir);
    long copies = 0, lost = -1;
    cr_assert_eq(sscanf(spec, "%ld %ld", &copies, &lost), 2, "%s", spec);
    free(spec);
    cr_expect_geq(copies, 1, "copies of the throttled worker's tasks");
    cr_expect_eq(lost, 0, "throttled, not lost");
    char *got = output_digest("spec"), *want = expected_digest("True");
    cr_expect_str_eq(got, want, "every record exactly once");
    free(got);
    free(want);
}

/* A sick node: one worker duty-cycled from outside (SIGSTOP for 150 ms of every 200 ms, so it
 * runs at about a quarter of the others' speed) is drained — no new task, retired once its task
 * ended — and `streambatch run` starts a replacement process (cpu-0-r1); every record once. */
Test(run, a_sick_worker_is_drained_and_replaced)
{
    const char *stages = "  - {name: a, op: bench.spin, args: {msPerMB: 4000}}\n";
    write_pipeline("sick", stages, "");
    char flags[1024];
    snprintf(flags, sizeof flags, "--cpus 3 --run-dir %s/sick-run", dir);
    sh("mkdir -p %s/sick-run", dir);
    run_bg("sick", "", flags);
    usleep(1000 * 1000);
    char *victim = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/sick-run/cpu-0$' | head -1", dir);
    cr_assert(*victim, "no worker to throttle");
    sh("(while [ ! -f %s/sick.rc ] && kill -STOP %s 2>/dev/null; do sleep 0.15; "
       "kill -CONT %s; sleep 0.05; done; kill -CONT %s) >/dev/null 2>&1 &",
       dir, victim, victim, victim);
    char *log = wait_bg_ok("sick", 12);
    cr_expect(strstr(log, "sick workers: ") != NULL, "the summary says so:\n%s", log);
    free(log);
    /* the throttled process ended before the run did (retired), and cpu-0-r1 replaced it */
    char *gone = sb_test_sh_out("kill -0 %s 2>/dev/null && echo alive || echo gone", victim);
    cr_expect_str_eq(gone, "gone");
    free(gone);
    free(victim);
    char *repl = sb_test_sh_out("test -d %s/sick-run/cpu-0-r1 && echo yes || echo no", dir);
    cr_expect_str_eq(repl, "yes", "a replacement worker was started");
    free(repl);
    cr_expect_geq(summary_num("sick", "workersDrained"), 1);
    cr_expect_geq(summary_num("sick", "workersRetired"), 1);
    cr_expect_geq(summary_num("sick", "workersStarted"), 4, "3 workers and a replacement");
    cr_expect_eq(summary_num("sick", "workersLost"), 0, "retired, not lost");
    char *got = output_digest("sick"), *want = expected_digest("True");
    cr_expect_str_eq(got, want, "every record exactly once");
    free(got);
    free(want);
}

/* The same sick node made slow the other way a real one is: its process confined by a cgroup
 * CPU quota (5% of one CPU; tests/helpers/cpu-quota.sh), so it keeps answering heartbeats and
 * polls, only slowly. Drained and replaced as under SIGSTOP; every record once. Skipped where
 * no cgroup cpu controller can be used (not root). */
Test(run, a_worker_confined_by_a_cpu_quota_is_drained_and_replaced)
{
    const char *stages = "  - {name: a, op: bench.spin, args: {msPerMB: 4000}}\n";
    write_pipeline("quota", stages, "");
    char flags[1024];
    snprintf(flags, sizeof flags,
             "--cpus 3 --set spec.source.partitionSize=16Ki --run-dir %s/quota-run", dir);
    sh("mkdir -p %s/quota-run", dir);
    run_bg("quota", "", flags);
    char *victim = sb_test_sh_out("for i in $(seq 100); do p=$(pgrep -f -- '--spill-[d]ir "
                                  "%s/quota-run/cpu-0$' | head -1); [ -n \"$p\" ] && break; "
                                  "sleep 0.05; done; echo $p",
                                  dir);
    cr_assert(*victim, "no worker to throttle");
    char *cg = sb_test_sh_out("%s/tests/helpers/cpu-quota.sh add sb-test-quota-%d 5 %s 2>&1; "
                              "echo rc=$?",
                              sb_test_root(), (int)getpid(), victim);
    if (strstr(cg, "rc=3") != NULL) {
        sh("kill %s; for i in $(seq 100); do [ -f %s/quota.rc ] && break; sleep 0.1; done", victim,
           dir);
        free(victim);
        cr_skip_test("no cgroup CPU quota here: %s", cg);
    }
    cr_assert(strstr(cg, "rc=0") != NULL, "cpu-quota.sh: %s", cg);
    char *nl = strchr(cg, '\n');
    if (nl != NULL)
        *nl = '\0'; /* the cgroup's directory */
    sh("for i in $(seq 1 1400); do [ -f %s/quota.rc ] && break; sleep 0.1; done", dir);
    sh("%s/tests/helpers/cpu-quota.sh remove %s", sb_test_root(), cg);
    free(cg);
    char *rc = sb_test_sh_out("cat %s/quota.rc", dir);
    char *log = sb_test_sh_out("tail -12 %s/quota.log", dir);
    cr_assert_str_eq(rc, "0", "run failed:\n%s", log);
    cr_expect(strstr(log, "sick workers: ") != NULL, "the summary says so:\n%s", log);
    free(rc);
    free(log);
    char *repl = sb_test_sh_out("test -d %s/quota-run/cpu-0-r1 && echo yes || echo no", dir);
    cr_expect_str_eq(repl, "yes", "a replacement worker was started");
    free(repl);
    free(victim);
    cr_expect_geq(summary_num("quota", "workersDrained"), 1);
    cr_expect_geq(summary_num("quota", "workersRetired"), 1);
    cr_expect_eq(summary_num("quota", "workersLost"), 0, "retired, not lost");
    char *got = output_digest("quota"), *want = expected_digest("True");
    cr_expect_str_eq(got, want, "every record exactly once");
    free(got);
    free(want);
}

/* Invalid JSON is a data error: not retried (a retry would fail the same way), the pipeline
 * fails at once naming the input. */
Test(run, deterministic_op_failure_is_not_retried_and_fails)
{
    sh("cd %s && printf '{\"n\": 1}\\nnot json at all\\n' > in/zz-bad.jsonl", dir);
    write_pipeline("fail", "  - {name: pick, op: filter, args: {field: n, op: eq, value: 1}}\n",
                   "  execution: {maxTaskRetries: 2}\n");
    char *out;
    int rc = run_cli("fail", "--cpus 2", &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "pipeline failed: stage pick failed: task default/fail/s0-t") != NULL,
              "%s", out);
    cr_expect(strstr(out, "zz-bad.jsonl") != NULL, "names the input: %s", out);
    cr_expect(strstr(out, "failed 1 time, last error: ") != NULL, "%s", out);
    cr_expect(strstr(out, "record 1 is not valid JSON") != NULL, "the cause is kept: %s", out);
    /* the reason on the verdict, the last line too: a log's tail shows why */
    const char *last = out + strlen(out);
    while (last > out && last[-1] == '\n')
        last--;
    while (last > out && last[-1] != '\n')
        last--;
    cr_expect(strncmp(last, "fail: Failed in ", 16) == 0 &&
                  strstr(last, "s: stage pick failed: task default/fail/s0-t") != NULL,
              "the last line: %s", last);
    free(out);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out-fail/_SUCCESS", dir);
    cr_expect_neq(stat(p, &st), 0, "a failed pipeline leaves no _SUCCESS");
}

/* filter then project in one task run as one op (filter absorbs project): every kept record
 * projected, checked against Python; and project's error comes from the filter's task op
 * without an intermediate partition in between (two ops would say "op filter: output
 * partition N: op project: ..."). */
Test(run, filter_then_project_run_as_one_op)
{
    write_pipeline("fp",
                   "  - {name: keep, op: filter, args: {field: n, op: lt, value: 70}}\n"
                   "  - {name: proj, op: project, args: {fields: [id, n]}}\n",
                   "");
    char *out;
    int rc = run_cli("fp", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *rows = check_filter_project("fp");
    char *want = sb_test_sh_out("cd %s && cat in/*.jsonl | python3 -c \"import sys, json; "
                                "print(sum(json.loads(l)['n'] < 70 for l in sys.stdin))\"",
                                dir);
    char expect[128];
    snprintf(expect, sizeof expect, "%s %s 0 0", want, want);
    cr_expect_str_eq(rows, expect, "wanted, got, missing, extra");
    free(rows);
    free(want);
    sh("cd %s && printf '{\"n\": 1}\\n[1, 2]\\n' > in/zz-arr.jsonl", dir);
    write_pipeline("fpa",
                   "  - {name: keep, op: filter, args: {field: n, op: ne, value: 1}}\n"
                   "  - {name: proj, op: project, args: {fields: [id, n]}}\n",
                   "  execution: {maxTaskRetries: 2}\n");
    rc = run_cli("fpa", "--cpus 2", &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "zz-arr.jsonl") != NULL, "names the input: %s", out);
    cr_expect(strstr(out, "op filter: project: record ") != NULL &&
                  strstr(out, " is a JSON array, not an object: [1, 2]") != NULL,
              "%s", out);
    cr_expect(strstr(out, "op project") == NULL, "one op: %s", out);
    free(out);
}

/* A source file that is not valid UTF-8 fails in the reader, before any op: a data error as
 * well, so the task is not retried and the error names the file and byte offset. */
Test(run, invalid_utf8_in_the_source_is_not_retried)
{
    sh("cd %s && printf '{\"n\": 1}\\n{\"n\": \"\\303\\050\"}\\n' > in/zz-utf8.jsonl", dir);
    write_pipeline("utf8", "  - {name: pick, op: filter, args: {field: n, op: ge, value: 0}}\n",
                   "  execution: {maxTaskRetries: 3, maxErroredPartitions: 1}\n");
    char *out;
    int rc = run_cli("utf8", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "utf8: Succeeded with 1 errored partition in ") != NULL, "%s", out);
    cr_expect(strstr(out, "zz-utf8.jsonl: byte offset 16") != NULL &&
                  strstr(out, "is not valid UTF-8") != NULL,
              "names file and byte: %s", out);
    free(out);
    cr_expect_eq(first_stage_retries("utf8"), 0, "a data error in the source is not retried");
}

/* maxErroredPartitions >= 1: a malformed line errors its partition (at once: invalid JSON is a
 * data error, no retry), and the run says so everywhere instead of a bare "Succeeded": the
 * summary lists stage, input and first error, the last line counts the errored partitions, and
 * _manifest.json has an "errored" array. */
Test(run, errored_partitions_are_reported)
{
    sh("cd %s && printf '{\"n\": 1}\\nnot json at all\\n' > in/zz-bad.jsonl", dir);
    write_pipeline("skip", "  - {name: pick, op: filter, args: {field: n, op: ge, value: 0}}\n",
                   "  execution: {maxTaskRetries: 3, maxErroredPartitions: 1}\n");
    char *out;
    int rc = run_cli("skip", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "skip: Succeeded with 1 errored partition in ") != NULL, "%s", out);
    cr_expect(strstr(out, "errored partitions (stage, input, first error):") != NULL, "%s", out);
    cr_expect(strstr(out, "pick") != NULL && strstr(out, "zz-bad.jsonl") != NULL &&
                  strstr(out, "is not valid JSON") != NULL,
              "%s", out);
    cr_expect(strstr(out, "the consumer refused") == NULL, "the cause is kept: %s", out);
    free(out);
    cr_expect_eq(summary_num("skip", "erroredPartitions"), 1);
    char *m = sb_test_sh_out(
        "python3 -c \"import json; e=json.load(open('%s/out-skip/_manifest.json'))['errored'];"
        "print(len(e), e[0]['stage'], 'zz-bad.jsonl' in e[0]['split'], "
        "'not valid JSON' in e[0]['error'])\"",
        dir);
    cr_expect_str_eq(m, "1 pick True True");
    free(m);
    cr_expect_eq(first_stage_retries("skip"), 0, "a data error is not retried");
}

/* The part files concatenated in _manifest.json order, against the input lines in input order
 * (files by name, lines in file order): 0 when identical. */
static int ordered_output_matches(const char *name)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "cd %s && python3 -c \"\nimport json, glob\n"
             "want=''.join(open(p).read() for p in sorted(glob.glob('in/*.jsonl')))\n"
             "m=json.load(open('out-%s/_manifest.json'))\n"
             "got=''.join(open('out-%s/'+p['name']).read() for p in m['parts'])\n"
             "w=want.splitlines(); g=got.splitlines()\n"
             "inv=next((k for k,(a,b) in enumerate(zip(w,g)) if a!=b), -1)\n"
             "print(len(w), len(g), inv)\n"
             "raise SystemExit(0 if got==want else 1)\n\"",
             dir, name, name);
    int rc = sb_test_run(cmd, &out);
    if (rc != 0)
        cr_log_error(
            "%s: output not in input order (input lines, output lines, first different line): %s",
            name, out);
    free(out);
    return rc;
}

/* preserveOrder: with several workers, files of very different sizes (fast and slow tasks), a
 * fused op and an unfused chain (static mode: two ops, the second would coalesce), the parts in
 * manifest order hold exactly the input, in input order. */
Test(run, preserve_order_keeps_input_order)
{
    sh("cd %s && python3 -c \"\nimport json\nfor f in range(6):\n"
       "  with open('in/g%%02d.jsonl' %% f, 'w') as o:\n"
       "    for i in range([9000, 300, 4000, 50, 7000, 1][f]):\n"
       "      o.write(json.dumps({'g': f, 'i': i}) + '\\\\n')\n\"",
       dir);
    const char *stages = "  - {name: a, op: identity}\n"
                         "  - {name: b, op: bench.sleep, args: {msPerMB: 40}}\n";
    write_pipeline("ord", stages, "  execution: {preserveOrder: true}\n");
    write_pipeline("ords", stages, "  execution: {preserveOrder: true, mode: static}\n");
    const char *names[] = {"ord", "ords"};
    for (size_t i = 0; i < 2; i++) {
        char *out;
        int rc = run_cli(names[i], "--cpus 4", &out);
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        cr_expect_eq(ordered_output_matches(names[i]), 0, "%s", names[i]);
    }
}

Test(run, dataset_ten_times_the_budget_stays_within_it)
{
    write_pipeline("big",
                   "  - {name: a, op: identity}\n"
                   "  - {name: g, op: bench.sleep, args: {msPerMB: 20}, resources: {gpu: 1}}\n",
                   "  execution: {memoryBudget: 512Ki}\n");
    char *out;
    int rc = run_cli("big", "--cpus 2 --gpus 1", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "peak worker RSS") != NULL, "%s", out);
    free(out);
    long peak = summary_num("big", "peakPartitionBytes"), budget = summary_num("big", "budget");
    long maxp = summary_num("big", "maxPartitionBytes");
    char *du = sb_test_sh_out("du -cb %s/in/*.jsonl | tail -1 | cut -f1", dir);
    long input = atol(du);
    free(du);
    cr_expect_geq(input, 10 * budget, "input %ld is 10x the budget %ld", input, budget);
    cr_expect_leq(peak, budget + maxp, "peak %ld > budget %ld + one partition %ld", peak, budget,
                  maxp);
    cr_expect_gt(summary_num("big", "peakWorkerRss"), 0);
}

Test(run, interrupt_stops_workers_and_leaves_no_success)
{
    write_pipeline("intr", "  - {name: a, op: bench.spin, args: {msPerMB: 2000}}\n", "");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && { %s run intr.yaml --cpus 2 > intr.log 2>&1 & pid=$!; sleep 1.5; "
             "kill -INT $pid; wait $pid; echo $?; }",
             dir, sb_test_bin("streambatch"));
    char *rc = sb_test_sh_out("%s", cmd);
    char *log = sb_test_sh_out("cat %s/intr.log", dir);
    cr_expect_str_eq(rc, "1", "%s", log);
    cr_expect(strstr(log, "interrupted by signal 2") != NULL, "%s", log);
    cr_expect(strstr(log, "the sink has no _SUCCESS") != NULL, "%s", log);
    free(rc);
    free(log);
    char *orphans = sb_test_sh_out("sleep 0.5; pgrep -f -- '--spill-[d]ir %s/' | wc -l", dir);
    cr_expect_str_eq(orphans, "0");
    free(orphans);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out-intr/_SUCCESS", dir);
    cr_expect_neq(stat(p, &st), 0);
}

/* Storage jobs (listing the source, committing the sink) run on a worker; the worker that runs
 * one dies (a test hook kills the first one, before it reports): the job goes to another
 * worker and the run succeeds with every record, once. */
static void storage_job_worker_killed(const char *name, const char *kind)
{
    write_pipeline(name, "  - {name: a, op: identity}\n", "  execution: {memoryBudget: 1Mi}\n");
    const char *flags = "--cpus 2";
    char *out;
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && SB_WORKER_TEST_DIE_IN_STORAGE_JOB=%s:%s/%s.marker timeout 120 %s run "
             "%s.yaml %s --summary-json %s.summary.json 2>&1",
             dir, kind, dir, name, sb_test_bin("streambatch"), name, flags, name);
    int rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "Succeeded") != NULL, "%s", out);
    cr_expect(strstr(out, "storage job re-queued: its worker was lost") != NULL, "%s", out);
    free(out);
    char m[512];
    struct stat st;
    snprintf(m, sizeof m, "%s/%s.marker", dir, name);
    cr_expect_eq(stat(m, &st), 0, "the hook fired");
    cr_expect_geq(summary_num(name, "workersLost"), 1);
    cr_expect_eq(summary_num(name, "sinkRows"), 24 * 2500);
    char *got = output_digest(name), *want = expected_digest("True");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
    snprintf(m, sizeof m, "%s/out-%s/_SUCCESS", dir, name);
    cr_expect_eq(stat(m, &st), 0, "_SUCCESS written");
}

Test(run, worker_killed_while_planning_the_source_run_succeeds)
{
    storage_job_worker_killed("plankill", "plan");
}

Test(run, worker_killed_while_committing_the_sink_run_succeeds)
{
    storage_job_worker_killed("commitkill", "commit");
}

Test(run, commit_failure_fails_the_run_with_the_worker_and_file_named)
{
    /* a part file vanishes from the sink after it was written and reported: the commit (on a
     * worker) refuses to write _SUCCESS, and the run fails with its message */
    write_pipeline("cfail", "  - {name: a, op: bench.sleep, args: {msPerMB: 400}}\n", "");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && { (while [ ! -f cfail.done ]; do rm -f out-cfail/part-s0-t0-p0.jsonl; "
             "sleep 0.02; done) & timeout 120 %s run cfail.yaml --cpus 2 > cfail.log 2>&1; "
             "echo $?; touch cfail.done; wait; }",
             dir, sb_test_bin("streambatch"));
    char *rc = sb_test_sh_out("%s", cmd);
    char *log = sb_test_sh_out("cat %s/cfail.log", dir);
    cr_expect_str_eq(rc, "1", "%s", log);
    cr_expect(strstr(log, "pipeline failed: committing the sink on worker cpu-") != NULL, "%s",
              log);
    cr_expect(strstr(log, "part-s0-t0-p0.jsonl: No such file or directory") != NULL, "%s", log);
    free(rc);
    free(log);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out-cfail/_SUCCESS", dir);
    cr_expect_neq(stat(p, &st), 0, "no _SUCCESS");
}

Test(run, missing_input_fails_before_any_task_naming_the_uri)
{
    char path[512];
    snprintf(path, sizeof path, "%s/missing.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: missing}\n"
            "spec:\n  source: {uri: 'file://%s/nope/', format: jsonl}\n"
            "  stages: [{name: a, op: identity}]\n"
            "  sink: {uri: 'file://%s/out-missing/', format: jsonl}\n",
            dir, dir);
    fclose(f);
    char *out;
    cr_assert_eq(run_cli("missing", "--cpus 2", &out), 1, "%s", out);
    char want[600];
    cr_expect(strstr(out, "pipeline failed: planning the source on worker cpu-") != NULL, "%s",
              out);
    snprintf(want, sizeof want, "spec.source: \"file://%s/nope/\"", dir);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
    cr_expect_eq(summary_num("missing", "tasksRun"), 0, "no task ran");
    struct stat st;
    snprintf(path, sizeof path, "%s/out-missing", dir);
    cr_expect_neq(stat(path, &st), 0, "the sink was not touched");
}

Test(run, invalid_spec_and_usage_exit_2)
{
    char *out;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s/tests/invalid && %s run unknown-op.yaml 2>&1", sb_test_root(),
             sb_test_bin("streambatch"));
    cr_expect_eq(sb_test_run(cmd, &out), 2);
    cr_expect(strstr(out, "unknown-op.yaml:11:9: spec.stages[0].op: unknown op") != NULL, "%s",
              out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s run 2>&1", sb_test_bin("streambatch"));
    cr_expect_eq(sb_test_run(cmd, &out), 2);
    free(out);
    write_pipeline("gpu", "  - {name: g, op: identity, resources: {gpu: 1}}\n", "");
    cr_expect_eq(run_cli("gpu", "", &out), 2);
    cr_expect(strstr(out, "stage g needs a GPU") != NULL, "%s", out);
    free(out);
    write_pipeline("set", "  - {name: a, op: identity}\n", "");
    cr_expect_eq(run_cli("set", "--set spec.execution.mode=fast", &out), 2);
    cr_expect(strstr(out, "spec.execution.mode: unknown value \"fast\"") != NULL, "%s", out);
    free(out);
}

/* ---- exec: user code as real child processes ---------------------------------------------- */

static void write_file(const char *name, const char *text)
{
    FILE *f = itest_create("%s", name);
    fputs(text, f);
    fclose(f);
}

/* a plain filter (reads to end of file) and a long-lived "model" (mode batches) that tags each
 * record with its pid, and fails on id `SB_FAIL_ID` when that is set */
static void write_udfs(void)
{
    write_file("clean.py", "import sys, json\n"
                           "for line in sys.stdin:\n"
                           "    r = json.loads(line)\n"
                           "    if r['n'] < 50:\n"
                           "        r['m'] = r['n'] * 2\n"
                           "        print(json.dumps(r))\n");
    write_file("embed.py", "import os, sys, json\n"
                           "fail = int(os.environ.get('SB_FAIL_ID', '-1'))\n"
                           "model = b'w' * (int(os.environ.get('SB_MODEL_MB', '0')) << 20)\n"
                           "for line in sys.stdin:\n"
                           "    if line == '\\x1e\\n':\n"
                           "        sys.stdout.write('\\x1e\\n'); sys.stdout.flush(); continue\n"
                           "    r = json.loads(line)\n"
                           "    if r['id'] == fail:\n"
                           "        raise ValueError('cannot embed record %d' % fail)\n"
                           "    r['pid'] = os.getpid()\n"
                           "    sys.stdout.write(json.dumps(r) + '\\n')\n");
}

Test(run, exec_stages_run_user_code_with_the_model_loaded_once_per_slot)
{
    write_udfs();
    char stages[1024];
    snprintf(stages, sizeof stages,
             "  - {name: clean, op: exec, args: {command: [python3, %s/clean.py]}}\n"
             "  - {name: embed, op: exec, args: {command: [python3, %s/embed.py], mode: batches, "
             "batchSize: 100, env: {SB_MODEL_MB: '200'}}}\n",
             dir, dir);
    write_pipeline("udf", stages, "");
    char *out;
    int rc = run_cli("udf", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    /* the output is the input filtered and transformed, every record once; the pids show how
     * many model processes served the ~100 tasks */
    char *check = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json, glob\nwant=[]\n"
        "for p in sorted(glob.glob('in/*.jsonl')):\n  for l in open(p):\n    r=json.loads(l)\n"
        "    if r['n'] < 50: r['m'] = r['n']*2; want.append(json.dumps(r, sort_keys=True))\n"
        "got=[]; pids=set()\n"
        "for p in glob.glob('out-udf/part-*.jsonl'):\n  for l in open(p):\n    r=json.loads(l)\n"
        "    pids.add(r.pop('pid')); got.append(json.dumps(r, sort_keys=True))\n"
        "print(sorted(got) == sorted(want), len(got), len(pids))\n\"",
        dir);
    int same = strncmp(check, "True ", 5) == 0;
    long rows = 0, pids = 0;
    sscanf(check + 5, "%ld %ld", &rows, &pids);
    cr_expect(same, "output differs from the expected records: %s", check);
    cr_expect_gt(rows, 24 * 2500 / 3, "%s", check);
    cr_expect(pids >= 1 && pids <= 2, "one model process per worker slot, not per task: %s", check);
    free(check);
    cr_expect_eq(summary_num("udf", "sinkRows"), rows);
    cr_expect_eq(first_stage_retries("udf"), 0, "no task failed");
    cr_expect_gt(summary_num("udf", "peakWorkerRss"), 200l << 20,
                 "the model process's 200 MiB count as the worker's memory");
    char *cpu =
        sb_test_sh_out("python3 -c \"import json; print(json.load(open('%s/udf.summary.json'))"
                       "['stages'][0]['cpuSeconds'])\"",
                       dir);
    cr_expect_gt(strtod(cpu, NULL), 2.0,
                 "the Python processes' CPU counts in the stage's (%s s; 0.7 s without)", cpu);
    free(cpu);
}

Test(run, exec_udf_that_raises_fails_the_run_with_its_traceback)
{
    write_udfs();
    char stages[1024];
    snprintf(stages, sizeof stages,
             "  - {name: pre, op: identity}\n"
             "  - {name: embed, op: exec, args: {command: [python3, %s/embed.py], mode: batches, "
             "env: {SB_FAIL_ID: '700017'}}}\n",
             dir);
    write_pipeline("raise", stages, "  execution: {maxTaskRetries: 1}\n");
    char *out;
    int rc = run_cli("raise", "--cpus 2", &out);
    cr_expect_eq(rc, 1, "%s", out);
    /* identity and exec run fused in one task: the exec's failure is the task's cause */
    cr_expect(strstr(out, "pipeline failed: stage pre+embed failed") != NULL, "%s", out);
    cr_expect(strstr(out, "ValueError: cannot embed record 700017") != NULL,
              "the traceback's last line is in the error: %s", out);
    cr_expect(strstr(out, "exited with status 1") != NULL, "%s", out);
    free(out);
    cr_expect_eq(first_stage_retries("raise"), 1, "retried maxTaskRetries times");
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out-raise/_SUCCESS", dir);
    cr_expect_neq(stat(p, &st), 0, "a failed pipeline leaves no _SUCCESS");
}

/* ---- plugin: native user code inside the worker ------------------------------------------ */

Test(run, plugin_stage_runs_the_example_plugin_on_every_record)
{
    char stages[1024];
    snprintf(stages, sizeof stages,
             "  - {name: tag, op: plugin, args: {path: '%s', config: {field: len}}}\n",
             sb_test_plugin("tag"));
    write_pipeline("plug", stages, "");
    char *out;
    int rc = run_cli("plug", "--cpus 2", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *check = sb_test_sh_out(
        "cd %s && python3 -c \"\nimport json, glob\nwant=[]\n"
        "for p in glob.glob('in/*.jsonl'):\n  for l in open(p):\n    l=l.rstrip('\\\\n')\n"
        "    want.append('{\\\\\\\"len\\\\\\\":%%d,%%s' %% (len(l.encode()), l[1:]))\n"
        "got=[l.rstrip('\\\\n') for p in glob.glob('out-plug/part-*.jsonl') for l in open(p)]\n"
        "print(sorted(got) == sorted(want), len(got))\n\"",
        dir);
    cr_expect_str_eq(check, "True 60000", "the plugin's output is every record with its length");
    free(check);
}

/* A plugin that segfaults kills its worker: the task is re-run on a new worker, and after
 * maxTaskRetries the pipeline fails naming the signal, instead of crashing workers forever. */
Test(run, plugin_that_crashes_its_worker_fails_after_max_task_retries)
{
    /* Under ASan the worker would catch its SIGSEGV, print a report and exit 1: what this test
     * checks is how the engine handles a worker that dies of a signal, so the worker (and the
     * driver: the environment is inherited) keep the default SIGSEGV disposition. Without ASan
     * the option is ignored. Criterion runs each test in its own process. */
    const char *asan = getenv("ASAN_OPTIONS");
    char opts[1024];
    snprintf(opts, sizeof opts, "%s%shandle_segv=0", asan ? asan : "", asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    sh("cd %s && printf '{\"n\": 1, \"x\": \"CRASH\"}\\n' > in/zz-crash.jsonl", dir);
    char stages[1024];
    snprintf(stages, sizeof stages, "  - {name: native, op: plugin, args: {path: '%s'}}\n",
             sb_test_plugin("crash"));
    write_pipeline("crash", stages, "  execution: {maxTaskRetries: 1}\n");
    char *out;
    int rc = run_cli("crash", "--cpus 2", &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "pipeline failed: stage native failed") != NULL, "%s", out);
    cr_expect(strstr(out, "zz-crash.jsonl") != NULL, "names the input: %s", out);
    cr_expect(strstr(out, "failed 2 times") != NULL, "%s", out);
    cr_expect(strstr(out, "its worker was lost while running it") != NULL &&
                  strstr(out, "killed by signal 11") != NULL,
              "the cause is named: %s", out);
    free(out);
    cr_expect_eq(summary_num("crash", "workersLost"), 2, "one worker per attempt");
}

/* sum(stages[].taskSeconds) / wallSeconds of a run's summary: above 1 with a single worker
 * process only when its tasks ran at the same time. */
static double task_to_wall(const char *name)
{
    char *v = sb_test_sh_out("python3 -c \"import json; j = json.load(open('%s/%s.summary.json'));"
                             " print(sum(s['taskSeconds'] for s in j['stages']) / j['wallSeconds'])"
                             "\"",
                             dir, name);
    double r = strtod(v, NULL);
    free(v);
    return r;
}

/* execution.cpuSlotsPerWorker: one CPU worker with 4 slots runs 4 tasks at once (a sleeping op,
 * as tasks waiting on I/O): its tasks' time adds up to well over the run's wall time, which one
 * slot cannot do; --cpu-slots overrides the manifest. Every record comes out once. */
Test(run, cpu_slots_per_worker_overlap_tasks_on_one_worker)
{
    char *want = expected_digest("True");
    /* 64 KiB partitions of ~6 MiB: ~100 tasks of ~60 ms sleep each */
    const char *stages = "  - {name: wait, op: bench.sleep, args: {msPerMB: 1000}}\n";
    write_pipeline("slots4", stages, "  execution: {cpuSlotsPerWorker: 4}\n");
    write_pipeline("slots1", stages, "  execution: {cpuSlotsPerWorker: 4}\n");
    char *out;
    int rc = run_cli("slots4", "--cpus 1", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "1 cpu (4 task slots each) + 0 gpu workers") != NULL, "%s", out);
    free(out);
    rc = run_cli("slots1", "--cpus 1 --cpu-slots 1", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "1 cpu + 0 gpu workers") != NULL, "--cpu-slots 1 wins: %s", out);
    free(out);
    const char *names[] = {"slots4", "slots1"};
    for (int i = 0; i < 2; i++) {
        char *got = output_digest(names[i]);
        cr_expect_str_eq(got, want, "%s: every record once", names[i]);
        free(got);
        cr_expect_eq(summary_num(names[i], "workersStarted"), 1, "%s", names[i]);
        cr_expect_eq(summary_num(names[i], "tasksRerun"), 0, "%s", names[i]);
    }
    double r4 = task_to_wall("slots4"), r1 = task_to_wall("slots1");
    cr_expect_gt(r4, 1.8, "4 slots: task time / wall time %.2f (1 slot: %.2f)", r4, r1);
    cr_expect_leq(r1, 1.0, "1 slot: task time / wall time %.2f", r1);
    free(want);

    /* more slots, same memory bound: partitions between stages (static mode: no fusion) stay
     * within a small budget with 8 slots asking for work */
    write_pipeline("slots8",
                   "  - {name: wait, op: bench.sleep, args: {msPerMB: 300}}\n"
                   "  - {name: keep, op: filter, args: {field: n, op: lt, value: 70}}\n",
                   "  execution: {cpuSlotsPerWorker: 8, memoryBudget: 256Ki, mode: static}\n");
    rc = run_cli("slots8", "--cpus 1", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    want = expected_digest("r['n'] < 70");
    char *got = output_digest("slots8");
    cr_expect_str_eq(got, want, "slots8: the filtered records, once");
    free(got);
    free(want);
    long peak = summary_num("slots8", "peakPartitionBytes");
    cr_expect_gt(peak, 0);
    cr_expect_leq(peak, 256 << 10, "partitions in flight %ld over the 256 KiB budget", peak);
}

/* Batched polls: ~6,000 tasks of 1 KiB of JSON lines each (measured short at once) go out in
 * batches (summary tasksBatched), and every record arrives exactly once; the same run with
 * batches turned off (SB_POLL_BATCH=1 in the workers' environment) gives none and the same
 * output. */
Test(run, short_tasks_go_out_in_batches_and_every_record_arrives_once)
{
    char *want = expected_digest("True");
    const char *names[] = {"batched", "single"};
    for (int i = 0; i < 2; i++) {
        write_pipeline(names[i], "  - {name: a, op: identity}\n", "");
        sh("sed -i 's/partitionSize: 64Ki/partitionSize: 1Ki/' %s/%s.yaml", dir, names[i]);
        if (i == 1)
            setenv("SB_POLL_BATCH", "1", 1);
        char *out;
        int rc = run_cli(names[i], "--cpus 2", &out);
        unsetenv("SB_POLL_BATCH");
        cr_assert_eq(rc, 0, "%s", out);
        free(out);
        char *got = output_digest(names[i]);
        cr_expect_str_eq(got, want, "%s: every record once", names[i]);
        free(got);
        long run = summary_num(names[i], "tasksRun"),
             batched = summary_num(names[i], "tasksBatched");
        cr_expect_gt(run, 5000, "%s: %ld tasks", names[i], run);
        cr_expect_eq(summary_num(names[i], "tasksRerun"), 0, "%s", names[i]);
        if (i == 0)
            cr_expect_gt(batched, run / 2, "%ld of %ld tasks came in batches", batched, run);
        else
            cr_expect_eq(batched, 0, "SB_POLL_BATCH=1: %ld tasks came in batches", batched);
        cr_expect_eq(summary_num(names[i], "sinkRows"), 24 * 2500, "%s", names[i]);
    }
    free(want);
}

/* Two slots sharing one accelerator (--gpus 1): a task keeps the accelerator from its last
 * input through its ops' finish. Released in between, the other slot took it for a whole task
 * while this one, done but for its finish, waited: tasks then ended in pairs, both slots polled
 * and fetched at once, and the accelerator stood idle meanwhile (the memory microbenchmark ran
 * 1.16x its bound, 1.10x after). Four 300 ms accelerator tasks: their sink parts are written
 * one accelerator task apart, not two at a time. */
Test(run, accelerator_tasks_end_one_by_one_not_in_pairs)
{
    char path[512];
    snprintf(path, sizeof path, "%s/gin", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    for (int k = 0; k < 4; k++) { /* ~41 KiB each: one partition, too big to share a task */
        snprintf(path, sizeof path, "%s/gin/f%d.jsonl", dir, k);
        FILE *g = fopen(path, "w");
        cr_assert_not_null(g);
        for (int i = 0; i < 100; i++)
            fprintf(g, "{\"f\": %d, \"i\": %d, \"pad\": \"%0400d\"}\n", k, i, 0);
        fclose(g);
    }
    snprintf(path, sizeof path, "%s/pairs.yaml", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: pairs}\n"
            "spec:\n  source: {uri: 'file://%s/gin/', format: jsonl, partitionSize: 64Ki}\n"
            "  stages:\n  - {name: a, op: identity}\n"
            "  - {name: g, op: bench.sleep, args: {msPerRecord: 3}, resources: {gpu: 1}}\n"
            "  sink: {uri: 'file://%s/out-pairs/', format: jsonl}\n",
            dir, dir);
    fclose(f);
    char *out;
    int rc = run_cli("pairs", "--cpus 1 --gpus 1", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(summary_num("pairs", "sinkRows"), 400);
    /* the parts' modification times, in order, as gaps in ms */
    char *gaps = sb_test_sh_out(
        "cd %s/out-pairs && stat -c %%.Y part-*.jsonl | sort -n | awk 'NR > 1 { printf \"%%d "
        "\", ($1 - p) * 1000 } { p = $1 }'",
        dir);
    int n = 0, min = 1 << 30;
    for (char *p = gaps, *e; *p; p = e) {
        long v = strtol(p, &e, 10);
        if (e == p)
            break;
        n++;
        min = v < min ? (int)v : min;
    }
    cr_expect_eq(n, 3, "4 parts: %s", gaps);
    cr_expect_geq(min, 150, "two parts written within %d ms of each other (gaps ms: %s)", min,
                  gaps);
    free(gaps);
}

/* Workers SIGKILLed while they hold batches of short tasks (~6,800 tasks of 1 KiB of jsonl, a
 * filter): the lost batches run again elsewhere and every kept record arrives exactly once. */
Test(run, workers_killed_while_holding_batches_lose_and_duplicate_nothing)
{
    write_pipeline("kbatch", "  - {name: a, op: filter, args: {field: n, op: lt, value: 50}}\n",
                   "");
    sh("sed -i 's/partitionSize: 64Ki/partitionSize: 1Ki/' %s/kbatch.yaml", dir);
    run_bg("kbatch", "", "--cpus 2");
    usleep(50 * 1000);
    int kills = kill_workers_every(250, 3); /* at 0.3, 0.55 and 0.8 s */
    free(wait_bg_ok("kbatch", 20));
    char *got = output_digest("kbatch"), *want = expected_digest("r['n'] < 50");
    cr_expect_str_eq(got, want, "output differs from a failure-free computation");
    free(got);
    free(want);
    long batched = summary_num("kbatch", "tasksBatched"),
         lost = summary_num("kbatch", "workersLost");
    cr_expect_gt(batched, 0, "tasks came in batches");
    if (kills > 0) /* a fast machine may finish before the first kill: then nothing to check */
        cr_expect_geq(lost, 1, "%d kills, %ld workers lost", kills, lost);
    printf("figure: %d kills, %ld workers lost, %ld tasks re-run, %ld batched\n", kills, lost,
           summary_num("kbatch", "tasksRerun"), batched);
}

/* Early outputs (docs/architecture.md): a CPU op that makes four of each record hands each output
 * partition to the accelerator op while it still makes the next, and workers are killed
 * meanwhile: every record arrives exactly four times. */
Test(run, early_outputs_with_killed_workers_lose_and_duplicate_nothing)
{
    const char *stages = "  - {name: a, op: bench.spin, args: {msPerMB: 1500, expand: 4}, "
                         "batchSize: 250}\n"
                         "  - {name: g, op: bench.sleep, args: {msPerMB: 200}, "
                         "resources: {gpu: 1}}\n";
    write_pipeline_ps("early", "256Ki", stages, "  execution: {memoryBudget: 2Mi}\n");
    run_bg("early", "", "--cpus 2 --gpus 1");
    int kills = kill_workers_every(1500, 3);
    free(wait_bg_ok("early", 20));
    cr_expect_geq(kills, 2, "workers were running to be killed");
    char *got = output_digest("early"), *want = expected_digest_times("True", 4);
    cr_expect_str_eq(got, want, "output differs from a failure-free computation");
    free(got);
    free(want);
    cr_expect_gt(summary_num("early", "earlyOutputs"), 10, "outputs were published early");
    cr_expect_geq(summary_num("early", "workersLost"), kills);
    cr_expect_eq(summary_num("early", "sinkRows"), 4 * 24 * 2500);
}
