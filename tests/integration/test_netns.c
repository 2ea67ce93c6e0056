/* Several hosts on one machine: `streambatch run` (the controller) and each of its workers in a
 * network namespace of its own, joined by veth pairs to a bridge (netns.h), with faults injected
 * per link while a pipeline runs:
 *   - a worker's link goes down mid-run: the controller declares it lost within the heartbeat
 *     bound, its partitions are re-made from lineage, and when the link comes back the worker is
 *     fenced (its late reports are ignored, it is told to shut down and a worker with a new
 *     identity takes its place);
 *   - two workers cut off from each other only (both still reach the controller): the consumer's
 *     fetches fail, it reports the input lost, the input is re-made;
 *   - every link lossy and slow (5% loss, 50 ms +- 10 ms) for a whole run, against the same run
 *     on a healthy network: the throughput cost is printed.
 * Each run's output is checked against an independent computation of the input (python), and
 * the sink against its manifest (every part listed once, no stray part, rows as listed). Real
 * processes; every test bounds its time and tears down namespaces, bridge and processes (also
 * when it fails: netns.h's guardian). Needs root: without it the tests fail, they do not skip.
 * Measured values are printed as "figure:" lines. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"
#include "netns.h"

static sb_netns *net;
static char prefix[16];

#define HEARTBEAT_TIMEOUT_MS 3000 /* streambatch run's default (run.h) */

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* FILES files of ROWS JSON lines (~110 bytes each) in dir/in */
static void make_input(int files, int rows)
{
    sh("cd %s && python3 -c \"\nimport json, random, os\nrandom.seed(7)\nos.makedirs('in')\n"
       "for f in range(%d):\n  with open('in/f%%02d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(%d):\n"
       "      o.write(json.dumps({'id': f*100000+i, 'pad': 'x'*random.randint(40, 120)}) + "
       "'\\\\n')\n\"",
       dir, files, rows);
}

static void setup(void)
{
    itest_mkdtemp("sb-netns");
    chmod(dir, 0755);
    net = NULL;
    prefix[0] = '\0';
}

static void teardown(void)
{
    sb_netns_free(net); /* every process it started, then namespaces, veths, bridge */
    net = NULL;
    if (prefix[0]) {
        char *left = sb_netns_leftovers(prefix);
        if (*left)
            fprintf(stderr, "test_netns: left behind: %s\n", left);
        free(left);
    }
    if (getenv("SB_NETNS_KEEP") != NULL) { /* debugging: keep the logs and outputs */
        fprintf(stderr, "test_netns: kept %s\n", dir);
        return;
    }
    char *out = NULL;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    sb_test_run(cmd, &out);
    free(out);
}

/* The network: the controller's node and one per worker; fails the test when this machine does
 * not allow network namespaces. */
static void net_up(int nworkers)
{
    char why[512];
    net = sb_netns_new(why, sizeof why);
    cr_assert_not_null(net, "network namespaces are needed (run as root): %s", why);
    snprintf(prefix, sizeof prefix, "%s", net->prefix);
    cr_assert_not_null(sb_netns_add(net, "ctl", why, sizeof why), "%s", why);
    for (int i = 0; i < nworkers; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        cr_assert_not_null(sb_netns_add(net, name, why, sizeof why), "%s", why);
    }
}

/* The worker program `streambatch run` starts (SB_RUN_WORKER_BIN): the real worker, in the node
 * its id maps to (a respawned worker, <id>-r<N>, in the same node: a restarted process on the
 * same host), listening on that node's address. map: "cpu-0=w0 cpu-1=w1 gpu-0=w2". */
static void write_wrapper(const char *map)
{
    char path[512];
    snprintf(path, sizeof path, "%s/worker.sh", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "#!/bin/sh\nid=; prev=\nfor a in \"$@\"; do [ \"$prev\" = --id ] && id=$a; "
               "prev=$a; done\ncase \"$id\" in\n");
    char m[256];
    snprintf(m, sizeof m, "%s", map);
    for (char *save = NULL, *tok = strtok_r(m, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        cr_assert_not_null(eq);
        *eq = '\0';
        sb_netns_node *nd = sb_netns_node_get(net, eq + 1);
        cr_assert_not_null(nd);
        fprintf(f, "  %s|%s-r*) ns=%s; ip=%s;;\n", tok, tok, nd->ns, nd->ip);
    }
    fprintf(f,
            "  *) echo \"worker.sh: no node for worker '$id'\" >&2; exit 1;;\nesac\n"
            "exec nsenter --net=/run/netns/$ns -- env SB_POD_IP=$ip %s \"$@\"\n",
            sb_test_bin("streambatch-worker"));
    fclose(f);
    chmod(path, 0755);
}

/* write_pipeline with spec.execution {EXEC} */
static void write_pipeline_exec(const char *name, const char *stages, const char *exec)
{
    char extra[512];
    snprintf(extra, sizeof extra, "  execution: {%s}\n", exec);
    write_pipeline(name, stages, extra);
}

/* Starts `streambatch run NAME.yaml FLAGS` in the controller's node; log in dir/NAME.log. */
static pid_t run_start(const char *name, const char *flags)
{
    sb_netns_node *c = sb_netns_node_get(net, "ctl");
    char cmd[4096], log[512];
    snprintf(cmd, sizeof cmd,
             "cd %s && exec env SB_RUN_CONTROLLER_HOST=%s SB_RUN_WORKER_BIN=%s/worker.sh "
             "SB_LOG_LEVEL=info %s run %s.yaml %s --run-dir %s/run-%s --progress-interval-ms 1000 "
             "--summary-json %s.summary.json",
             dir, c->ip, dir, sb_test_bin("streambatch"), name, flags, dir, name, name);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    pid_t pid = sb_netns_spawn(net, "ctl", cmd, log);
    cr_assert_gt(pid, 0);
    return pid;
}

static char *log_tail(const char *name)
{
    return sb_test_sh_out("tail -n 30 %s/%s.log; for f in %s/run-%s/*.log; do echo \"== $f\"; "
                          "tail -n 8 $f; done",
                          dir, name, dir, name);
}

/* Waits for the run to end within deadline (monotonic ms); asserts it succeeded. */
static void run_finish(const char *name, pid_t pid, int64_t deadline)
{
    int rc = sb_netns_wait(net, pid, (int)(deadline - mono_ms() > 0 ? deadline - mono_ms() : 0));
    if (rc < 0) {
        char *t = log_tail(name);
        sb_netns_stop(net, pid, 5000);
        cr_assert_fail("run %s did not finish in time:\n%s", name, t);
    }
    char *t = log_tail(name);
    cr_assert_eq(rc, 0, "run %s exited %d:\n%s", name, rc, t);
    free(t);
}

/* The first log line of dir/NAME.log containing every needle ("" when none). */
static char *log_line(const char *name, const char *needle1, const char *needle2)
{
    return sb_test_sh_out("grep -F -- '%s' %s/%s.log | grep -F -- '%s' | head -n 1", needle1, dir,
                          name, needle2);
}

static int log_count(const char *file, const char *needle1, const char *needle2)
{
    char *n = sb_test_sh_out("grep -F -- '%s' %s 2>/dev/null | grep -F -c -- '%s'", needle1, file,
                             needle2);
    int k = atoi(n);
    free(n);
    return k;
}

/* Waits until a line with both needles is in the log (or deadline); its ts= in wall ms, 0. */
static int64_t wait_line(const char *name, const char *n1, const char *n2, int64_t deadline)
{
    for (;;) {
        char *l = log_line(name, n1, n2);
        if (*l) {
            int y, mo, d, h, mi, s, ms;
            const char *ts = strstr(l, "ts=");
            int64_t at = -1;
            if (ts && sscanf(ts, "ts=%d-%d-%dT%d:%d:%d.%dZ", &y, &mo, &d, &h, &mi, &s, &ms) == 7) {
                struct tm tm = {.tm_year = y - 1900,
                                .tm_mon = mo - 1,
                                .tm_mday = d,
                                .tm_hour = h,
                                .tm_min = mi,
                                .tm_sec = s};
                at = (int64_t)timegm(&tm) * 1000 + ms;
            }
            free(l);
            return at;
        }
        free(l);
        if (mono_ms() > deadline)
            return 0;
        usleep(50000);
    }
}

static double summary_wall(const char *name)
{
    char *v = sb_test_sh_out("python3 -c \"import json; print(json.load(open('%s/%s.summary.json'))"
                             "['wallSeconds'])\"",
                             dir, name);
    double d = strtod(v, NULL);
    free(v);
    return d;
}

/* The sink of run NAME against the input (identity ops: the same multiset of lines) and against
 * its manifest: "ok" or what is wrong. */
static char *check_output(const char *name)
{
    return sb_test_sh_out(
        "cd %s && python3 -c \"\nimport glob, json, os, collections\nwant = []\n"
        "for p in sorted(glob.glob('in/*.jsonl')): want += open(p).read().splitlines()\n"
        "out = 'out-%s'\nm = json.load(open(out + '/_manifest.json'))\n"
        "names = [p['name'] for p in m['parts']]\n"
        "files = sorted(os.path.basename(p) for p in glob.glob(out + '/part-*'))\n"
        "got = []\nbad = []\n"
        "if len(set(names)) != len(names): bad.append('a part listed twice')\n"
        "if sorted(names) != files: bad.append('parts on disk %%s != manifest %%s' %% "
        "(len(files), len(names)))\n"
        "for p in m['parts']:\n  lines = open(out + '/' + p['name']).read().splitlines()\n"
        "  if len(lines) != p['rows']: bad.append(p['name'] + ' rows')\n  got += lines\n"
        "if not os.path.exists(out + '/_SUCCESS'): bad.append('no _SUCCESS')\n"
        "cw, cg = collections.Counter(want), collections.Counter(got)\n"
        "if cw != cg: bad.append('%%d records missing, %%d extra or duplicated (of %%d)' %% "
        "(sum((cw - cg).values()), sum((cg - cw).values()), len(want)))\n"
        "print('; '.join(bad) or 'ok')\n\"",
        dir, name);
}

static int input_rows(void)
{
    char *n = sb_test_sh_out("cat %s/in/*.jsonl | wc -l", dir);
    int k = atoi(n);
    free(n);
    return k;
}

TestSuite(netns, .init = setup, .fini = teardown, .timeout = 150);

/* How cpu-0 is cut off from the controller. */
enum fault { LINK_DOWN, ONE_WAY };

static void fault_set(enum fault f, int on)
{
    if (f == LINK_DOWN)
        cr_assert_eq(sb_netns_link(net, "w0", !on), 0);
    else /* what the controller sends never reaches the worker; the other way works */
        cr_assert_eq(sb_netns_block(net, "ctl", "w0", on), 0);
}

static void worker_cut_off(enum fault f, int64_t detect_max_ms)
{
    int64_t t0 = mono_ms(), deadline = t0 + 55000;
    make_input(32, 1200);
    net_up(3);
    write_wrapper("cpu-0=w0 cpu-1=w1 gpu-0=w2");
    /* ~4 MiB in 64 KiB tasks. Stage a (~0.45 s a task) is the bottleneck, so both cpu workers
     * are nearly always inside one of its tasks; gpu-0 reads their outputs as they come (the
     * device runs one g task at a time) */
    write_pipeline_exec(
        "cut",
        "  - {name: a, op: bench.sleep, args: {msPerMB: 7000}}\n"
        "  - {name: g, op: bench.sleep, args: {msPerMB: 2500}, resources: {gpu: 1}}\n"
        "  - {name: c, op: identity}\n",
        "memoryBudget: 8Mi");
    pid_t pid = run_start("cut", "--cpus 2 --gpus 1");
    cr_assert_neq(wait_line("cut", "planned", "", deadline), 0, "no plan");
    usleep(1500 * 1000);
    int64_t cut = wall_ms(), cut_mono = mono_ms();
    fault_set(f, 1);
    const char *what = f == LINK_DOWN ? "link down" : "one-way partition controller -> worker";
    int64_t lost = wait_line("cut", "worker lost", "worker=cpu-0", cut_mono + 20000);
    cr_assert_gt(lost, 0, "cpu-0 not declared lost 20 s after the fault (%s)", what);
    int64_t detect = lost - cut;
    printf("figure: %s -> worker declared lost in %lld ms (heartbeat timeout %d ms)\n", what,
           (long long)detect, HEARTBEAT_TIMEOUT_MS);
    cr_expect_geq(detect, HEARTBEAT_TIMEOUT_MS - 600, "declared lost too early: %lld ms",
                  (long long)detect);
    cr_expect_leq(detect, detect_max_ms, "declared lost late: %lld ms", (long long)detect);
    usleep(1500 * 1000); /* its last task ends meanwhile: its report waits for the link */
    int64_t up_mono = mono_ms();
    fault_set(f, 0);
    int64_t back = wait_line("cut", "declared lost came back", "worker=cpu-0", up_mono + 20000);
    cr_expect_gt(back, 0, "the fenced worker was not told to shut down after the link came back");
    run_finish("cut", pid, deadline);
    if (back > 0)
        printf("figure: link back -> fenced worker told to shut down after %lld ms\n",
               (long long)(back - (cut + (up_mono - cut_mono))));

    char *ok = check_output("cut");
    cr_expect_str_eq(ok, "ok", "output of the run with a worker cut off: %s", ok);
    free(ok);
    cr_expect_eq(summary_num("cut", "sinkRows"), input_rows());
    long rerun = summary_num("cut", "tasksRerun"), lostw = summary_num("cut", "workersLost");
    long lostp = summary_num("cut", "partitionsLost");
    printf("figure: cut run: %.2f s, %ld tasks re-run, %ld partitions lost, %ld workers lost\n",
           summary_wall("cut"), rerun, lostp, lostw);
    cr_expect_geq(lostw, 1);
    if (f == LINK_DOWN) /* it was inside a task (see below) */
        cr_expect_geq(rerun, 1, "the cut worker's work was re-made");
    /* the fenced worker exited when told to; its slot came back under a new identity */
    char clog[600], path[600];
    snprintf(clog, sizeof clog, "%s/cut.log", dir);
    snprintf(path, sizeof path, "%s/run-cut/cpu-0-r1.log", dir);
    cr_expect_eq(log_count(clog, "worker process ended", "worker=cpu-0 "), 1,
                 "the fenced worker exited");
    struct stat st;
    cr_expect_eq(stat(path, &st), 0, "no replacement worker cpu-0-r1");
    cr_expect_eq(log_count(clog, "worker registered", "worker=cpu-0-r1 "), 1,
                 "the replacement registered under its new identity");
    cr_expect_eq(log_count(clog, "worker registered", "worker=cpu-0 "), 1,
                 "cpu-0 registered once (fenced: never again)");
    /* reports the cut worker sent after it was declared lost */
    int ignored = log_count(clog, "report from a worker declared lost ignored", "worker=cpu-0 ");
    /* gpu-0's tasks that were reading cpu-0's partitions ran again: their reports were stale */
    int stale = log_count(clog, "stale report ignored", "worker=gpu-0 ");
    printf("figure: late reports of the fenced worker ignored: %d; stale reports of tasks that "
           "read from it: %d\n",
           ignored, stale);
    /* with its link down, the worker is nearly always inside a task (stage a is the
     * bottleneck): it finishes meanwhile and reports after the link is back. (With a one-way
     * partition its report can still reach the controller before the worker is declared lost.) */
    if (f == LINK_DOWN)
        cr_expect_geq(ignored, 1, "the fenced worker's late report was not refused");
}

/* A worker's link goes down mid-run and comes back after the worker was declared lost. The
 * heartbeat bound: the timeout after the last heartbeat (every 500 ms), checked every 50 ms;
 * 1 s of slack for a loaded machine. */
Test(netns, worker_cut_off_from_the_controller_is_fenced_and_recovered)
{
    worker_cut_off(LINK_DOWN, HEARTBEAT_TIMEOUT_MS + 1000);
}

/* The same with a one-way partition: the worker's packets reach the controller, the
 * controller's never reach the worker. Its TCP connection stalls without acknowledgements
 * (within a few hundred ms here), then the heartbeat timeout runs. */
Test(netns, one_way_partition_from_the_controller_is_detected_and_fenced)
{
    worker_cut_off(ONE_WAY, HEARTBEAT_TIMEOUT_MS + 5000);
}

/* Two workers cannot reach each other (both reach the controller): the consumer's fetch fails,
 * it reports the input lost, the input is re-made; healed once that was reported. */
Test(netns, workers_cut_off_from_each_other_report_lost_inputs_and_recover)
{
    int64_t deadline = mono_ms() + 75000;
    make_input(8, 1200);
    net_up(2);
    write_wrapper("cpu-0=w0 gpu-0=w1");
    /* every partition goes from cpu-0 (stage a) to gpu-0 (stage g) over the network */
    write_pipeline_exec(
        "split",
        "  - {name: a, op: bench.sleep, args: {msPerMB: 2000}}\n"
        "  - {name: g, op: bench.sleep, args: {msPerMB: 500}, resources: {gpu: 1}}\n",
        "memoryBudget: 4Mi");
    pid_t pid = run_start("split", "--cpus 1 --gpus 1");
    cr_assert_neq(wait_line("split", "planned", "", deadline), 0, "no plan");
    usleep(800 * 1000);
    int64_t cut = wall_ms(), cut_mono = mono_ms();
    cr_assert_eq(sb_netns_block(net, "w0", "w1", 1), 0);
    cr_assert_eq(sb_netns_block(net, "w1", "w0", 1), 0);
    int64_t lost = wait_line("split", "task failed", "worker=gpu-0", cut_mono + 50000);
    int64_t heal_mono = mono_ms();
    sb_netns_block(net, "w0", "w1", 0);
    sb_netns_block(net, "w1", "w0", 0);
    cr_assert_gt(lost, 0, "gpu-0 reported no lost input within 50 s of the partition");
    printf("figure: workers partitioned -> consumer reported its input lost after %lld ms\n",
           (long long)(lost - cut));
    run_finish("split", pid, deadline);
    printf("figure: partition healed %lld ms after it began; run %.2f s\n",
           (long long)(heal_mono - cut_mono), summary_wall("split"));
    char *l = log_line("split", "task failed", "worker=gpu-0");
    printf("  %s\n", l);
    cr_expect(strstr(l, "fetch") != NULL, "the failure is a failed fetch: %s", l);
    free(l);
    char *ok = check_output("split");
    cr_expect_str_eq(ok, "ok", "output of the run with partitioned workers: %s", ok);
    free(ok);
    cr_expect_eq(summary_num("split", "sinkRows"), input_rows());
    cr_expect_eq(summary_num("split", "workersLost"), 0, "both workers kept their controller");
    cr_expect_geq(summary_num("split", "partitionsLost"), 1, "the unreachable input was lost");
    cr_expect_geq(summary_num("split", "tasksRerun"), 1, "and re-made");
}

/* Every link with 5% loss and 50 +- 10 ms delay (each packet impaired once, where it arrives)
 * for a whole run, against the same run on the healthy network. */
Test(netns, lossy_slow_network_gives_identical_output_at_a_measured_cost)
{
    int64_t deadline = mono_ms() + 80000;
    make_input(8, 1200);
    net_up(3);
    write_wrapper("cpu-0=w0 cpu-1=w1 gpu-0=w2");
    /* some work in stage a (~1 s in all), every partition moves from a cpu worker to gpu-0 */
    const char *stages = "  - {name: a, op: bench.sleep, args: {msPerMB: 1000}}\n"
                         "  - {name: g, op: identity, resources: {gpu: 1}}\n";
    write_pipeline_exec("healthy", stages, "memoryBudget: 8Mi");
    write_pipeline_exec("lossy", stages, "memoryBudget: 8Mi");
    pid_t pid = run_start("healthy", "--cpus 2 --gpus 1");
    run_finish("healthy", pid, deadline);
    char why[512];
    const char *nodes[] = {"ctl", "w0", "w1", "w2"};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(sb_netns_impair(net, nodes[i], 5, 50, 10, why, sizeof why), 0, "%s", why);
    printf("impairment: %s\n", net->impair_how);
    pid = run_start("lossy", "--cpus 2 --gpus 1");
    run_finish("lossy", pid, deadline);
    for (int i = 0; i < 4; i++)
        sb_netns_impair(net, nodes[i], 0, 0, 0, why, sizeof why);
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "lossy" : "healthy";
        char *ok = check_output(name);
        cr_expect_str_eq(ok, "ok", "output of the %s run: %s", name, ok);
        free(ok);
    }
    int rows = input_rows();
    double h = summary_wall("healthy"), l = summary_wall("lossy");
    char *bytes = sb_test_sh_out("cat %s/in/*.jsonl | wc -c", dir);
    double mb = atof(bytes) / 1048576.0;
    free(bytes);
    printf("figure: healthy network: %.2f s, %.0f rows/s, %.2f MB/s\n", h, rows / h, mb / h);
    printf("figure: 5%% loss, 50+-10 ms on every link: %.2f s, %.0f rows/s, %.2f MB/s "
           "(%.1fx the time; workers lost %ld, tasks re-run %ld)\n",
           l, rows / l, mb / l, l / h, summary_num("lossy", "workersLost"),
           summary_num("lossy", "tasksRerun"));
    if (net->netem_packets > 0) {
        printf("figure: sb_netem: %llu packets, %llu dropped (%.1f%%)\n", net->netem_packets,
               net->netem_dropped, 100.0 * (double)net->netem_dropped / (double)net->netem_packets);
        cr_expect(net->netem_dropped * 100 > net->netem_packets * 3 &&
                      net->netem_dropped * 100 < net->netem_packets * 8,
                  "about 5%% of the packets dropped");
    }
}
