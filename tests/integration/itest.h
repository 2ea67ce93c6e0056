/* itest.h — what the integration tests (tests/integration/test_*.c) share: the test's own
 * directory, running shell commands that must succeed, running `streambatch run` on a pipeline
 * file in that directory, writing such a file and reading numbers back from its summary.
 * Header-only like testutil.h (one test binary per file, and the Makefile links each test from
 * its own object only); every function is static inline, so a test that uses few of them does
 * not trip -Wunused-function.
 *
 *   itest_mkdtemp("sb-x");                  dir = a fresh $TMPDIR/sb-x-XXXXXX
 *   sh("cd %s && ...", dir);                a command that must exit 0 (else the test fails)
 *   write_pipeline("p", stages, extra);     dir/p.yaml: dir/in/ (jsonl) -> stages -> dir/out-p/
 *   run_cli("p", flags, &out);              `streambatch run p.yaml` in dir, with its summary
 *   summary_num("p", "records");            a number of dir/p.summary.json
 * and for the operator tests on the private test cluster (tests/helpers/kube_cluster.h):
 *   kubectl("get pipeline p");              kubectl's output
 *   itest_crd_apply();                      the Pipeline CRD, Established
 *   pid = itest_controller_start(flag);     streambatch-controller, its log in dir */
#ifndef SB_ITEST_H
#define SB_ITEST_H

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/testutil.h"

/* The test's own directory (itest_mkdtemp): inputs, pipeline files, outputs and logs. */
static char dir[256] __attribute__((unused));

/* Called (when set) before sh() fails the test: a failed .init gets no .fini, so a test that
 * started a server in its .init stops it here rather than leave it running. */
static void (*itest_sh_failed)(void) __attribute__((unused));

/* dir := a new directory $TMPDIR/<name>-XXXXXX. */
static inline void itest_mkdtemp(const char *name)
{
    sb_test_tmpl(dir, sizeof dir, name);
    cr_assert_not_null(mkdtemp(dir));
}

/* Runs a shell command that must succeed: otherwise the test fails, showing its output. */
static inline void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *out = NULL;
    int rc = sb_test_run(cmd, &out);
    if (rc != 0 && itest_sh_failed != NULL)
        itest_sh_failed();
    cr_assert_eq(rc, 0, "command failed (%d): %s\n%s", rc, cmd, out);
    free(out);
}

/* The number a shell command prints (0 if none). */
static inline long num(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline long num(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char *v = sb_test_sh_out("%s", cmd);
    long n = strtol(v, NULL, 10);
    free(v);
    return n;
}

/* int(json[key]) of the JSON file dir/<file>. */
static inline long itest_json_num(const char *file, const char *key)
{
    return num("python3 -c \"import json; print(int(json.load(open('%s/%s'))['%s']))\"", dir, file,
               key);
}

/* A top-level number of the summary of the run of NAME.yaml (run_cli's --summary-json). */
static inline long summary_num(const char *name, const char *key)
{
    char file[256];
    snprintf(file, sizeof file, "%s.summary.json", name);
    return itest_json_num(file, key);
}

/* A new file dir/<FMT...> open for writing (the test fails if it cannot be made). */
static inline FILE *itest_create(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline FILE *itest_create(const char *fmt, ...)
{
    char file[512], path[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(file, sizeof file, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    return f;
}

/* dir/NAME.yaml: pipeline NAME from dir/in/ (JSON lines, partitions of psize) through STAGES
 * (YAML list items, each line ending in \n) to dir/out-NAME/; EXTRA ("" for none) follows. */
static inline void write_pipeline_ps(const char *name, const char *psize, const char *stages,
                                     const char *extra)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: %s}\n"
            "  stages:\n%s  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n%s",
            name, dir, psize, stages, dir, name, extra);
    fclose(f);
}

/* write_pipeline_ps with partitions of 64 KiB */
static inline void write_pipeline(const char *name, const char *stages, const char *extra)
{
    write_pipeline_ps(name, "64Ki", stages, extra);
}

/* dir/NAME.yaml: dir/IN/ (JSON lines, partitions of PSIZE; SRC_ARGS the source's args as a
 * YAML flow map, or NULL) through one stage x (OP with ARGS, a YAML flow map) to dir/out-NAME/,
 * under execution.memoryBudget BUDGET: the budget tests' pipelines. */
static inline void write_one_stage(const char *name, const char *in, const char *psize,
                                   const char *src_args, const char *op, const char *args,
                                   const char *budget)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/%s/', format: jsonl, partitionSize: %s%s%s}\n"
            "  stages:\n  - {name: x, op: %s, args: %s}\n"
            "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n"
            "  execution: {memoryBudget: %s}\n",
            name, dir, in, psize, src_args ? ", args: " : "", src_args ? src_args : "", op, args,
            dir, name, budget);
    fclose(f);
}

/* SIGKILLs one of this test's worker processes (by their spill directories under dir, so
 * TMPDIR must be dir) chosen at random: 1, or 0 when none was running. */
static inline int itest_kill_worker(void)
{
    /* (the gpu pool runs streambatch-worker-gpu when it is built) */
    char *victim = sb_test_sh_out("pgrep -f -- '--spill-[d]ir %s/' | shuf -n 1", dir);
    int killed = *victim != '\0';
    if (killed)
        sh("kill -9 %s", victim);
    free(victim);
    return killed;
}

/* Runs `streambatch run NAME.yaml --cpus 2` in dir in the background (log NAME.log, summary
 * NAME.summary.json), SIGKILLs one of its workers once the log matches the extended regex
 * PATTERN, and waits for the run to end: the test fails unless it succeeded. */
static inline void itest_run_kill_when(const char *name, const char *pattern)
{
    sh("cd %s && (timeout 150 %s run %s.yaml --cpus 2 --progress-interval-ms 50 --summary-json "
       "%s.summary.json > %s.log 2>&1; echo $? > %s.rc) >/dev/null 2>&1 &",
       dir, sb_test_bin("streambatch"), name, name, name, name);
    sh("for i in $(seq 1 600); do grep -Eq '%s' %s/%s.log && exit 0; sleep 0.05; done; "
       "cat %s/%s.log; exit 1",
       pattern, dir, name, dir, name);
    cr_assert_eq(itest_kill_worker(), 1);
    sh("for i in $(seq 1 1400); do [ -f %s/%s.rc ] && break; sleep 0.1; done", dir, name);
    char *rc = sb_test_sh_out("cat %s/%s.rc; tail -5 %s/%s.log", dir, name, dir, name);
    cr_assert(strncmp(rc, "0\n", 2) == 0, "run failed: %s", rc);
    free(rc);
}

/* Runs `streambatch run NAME.yaml FLAGS --summary-json NAME.summary.json` in dir in the
 * foreground, for at most SECS; returns its exit status and (in *out) its output. */
static inline int run_cli_timeout(int secs, const char *name, const char *flags, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout %d %s run %s.yaml %s --summary-json %s.summary.json 2>&1", dir, secs,
             sb_test_bin("streambatch"), name, flags, name);
    return sb_test_run(cmd, out);
}

/* run_cli_timeout for at most 120 s */
static inline int run_cli(const char *name, const char *flags, char **out)
{
    return run_cli_timeout(120, name, flags, out);
}

/* The md5 of the sorted lines of the files dir/GLOB (caller frees). */
static inline char *digest(const char *glob)
{
    return sb_test_sh_out("cat %s/%s | sort | md5sum | cut -d' ' -f1", dir, glob);
}

/* The input and pipeline of the tests that kill `streambatch run` (test_run_resume,
 * test_run_leftovers): 40 files of 200 records in dir/in/, and dir/p.yaml (pipeline NAME) whose
 * first stage sleeps 2 ms a record: ~8 s of work on 2 slots, output in dir/out/. */
static inline void itest_slow_pipeline(const char *name)
{
    sh("cd %s && mkdir in && python3 -c \"\nimport json\nfor f in range(40):\n"
       "  with open('in/f%%02d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(200): o.write(json.dumps({'id': f * 1000 + i}) + '\\\\n')\n\"",
       dir);
    sh("cd %s && cat > p.yaml <<'EOF'\n"
       "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
       "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 3000}\n  stages:\n"
       "  - {name: a, op: bench.sleep, args: {msPerRecord: 2}}\n  - {name: b, op: identity}\n"
       "  sink: {uri: 'file://%s/out/', format: jsonl}\nEOF",
       dir, name, dir, dir);
}

/* `streambatch run p.yaml --cpus 2 --checkpoint ck.json FLAGS` in dir to its end (at most
 * 120 s): its exit status and output (itest_slow_pipeline's tests). */
static inline int itest_run_p(const char *flags, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 120 %s run p.yaml --cpus 2 --checkpoint ck.json %s 2>&1", dir,
             sb_test_bin("streambatch"), flags);
    return sb_test_run(cmd, out);
}

/* dir/out/ holds exactly the records of dir/in/ (as multisets) and _SUCCESS. */
static inline void expect_output_equals_input(void)
{
    /* find, not a glob: 200,000 files pass the argument limit, and a failed cat of both sides
     * would compare two empty inputs */
    char *got = sb_test_sh_out(
        "find %s/out -maxdepth 1 -name 'part-*.jsonl' -exec cat {} + | sort | md5sum", dir);
    char *want = sb_test_sh_out(
        "find %s/in -maxdepth 1 -name '*.jsonl' -exec cat {} + | sort | md5sum", dir);
    cr_expect_str_eq(got, want, "output differs from the input (lost or duplicated records)");
    free(got);
    free(want);
    struct stat st;
    char p[512];
    snprintf(p, sizeof p, "%s/out/_SUCCESS", dir);
    cr_expect_eq(stat(p, &st), 0, "_SUCCESS written");
}

/* kubectl ARGS against the private test cluster (tests/helpers/kube_cluster.h), at most 60 s:
 * its output with stderr (caller frees). */
static inline char *kubectl(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline char *kubectl(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *st = getenv("SB_KC_STATE");
    return sb_test_sh_out("KUBECONFIG=%s/kubeconfig timeout 60 %s/bin/kubectl %s 2>&1", st, st,
                          args);
}

/* The Pipeline CRD of api/crd/ applied to the test cluster, and Established. */
static inline void itest_crd_apply(void)
{
    free(kubectl("apply --server-side -f %s/api/crd/pipelines.streambatch.dev.yaml",
                 sb_test_root()));
    free(kubectl("wait --for=condition=Established crd/pipelines.streambatch.dev --timeout=30s"));
}

/* Starts streambatch-controller against the test cluster (no leader election, status every
 * second, up to two more flags: extra, then extra2, each when not NULL; a later flag overrides),
 * its stderr in dir/controller.log. Its pid. */
static inline pid_t itest_controller_start2(const char *extra, const char *extra2)
{
    if (extra == NULL) {
        extra = extra2;
        extra2 = NULL;
    }
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char kc[512], log[512];
        snprintf(kc, sizeof kc, "%s/kubeconfig", getenv("SB_KC_STATE"));
        snprintf(log, sizeof log, "%s/controller.log", dir);
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execl(sb_test_bin("streambatch-controller"), "streambatch-controller", "--kubeconfig", kc,
              "--leader-elect=false", "--metrics-listen", "127.0.0.1:0", "--status-interval", "1s",
              extra, extra2, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static inline pid_t itest_controller_start(const char *extra)
{
    return itest_controller_start2(extra, NULL);
}

/* SIGTERM to the controller (*pid > 0) and its exit status (-1: none); *pid becomes 0. */
static inline int itest_controller_stop(pid_t *pid)
{
    int st = -1;
    if (*pid > 0) {
        kill(*pid, SIGTERM);
        waitpid(*pid, &st, 0);
        *pid = 0;
    }
    return st;
}

#endif
