/* Mutual TLS between the controller and the workers (--tls-dir, rpc/tlsdir.h), with a CA and
 * certificates made by openssl in the test's own directory (and a second, unrelated CA):
 * `streambatch run --tls-dir` with 2 CPU workers and a GPU stage gives the input back; gRPC
 * clients without a certificate, with one from the other CA, or checking another server name are
 * refused by the controller's Control service and by a worker's Data service, while a client with
 * a certificate of the CA gets through; missing or broken files fail at start naming the file. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"
#include "rpc/rpc.h"
#include "rpc/tlsdir.h"

static pid_t run_pid;

/* A CA in DIR/<ca>/ and a leaf certificate for DNS name `name` signed by it: DIR/<ca>/leaf/
 * holds tls.crt, tls.key and ca.crt, as a cert-manager Secret does. */
static void make_ca(const char *ca, const char *name)
{
    sh("set -e; cd %s && mkdir -p %s/leaf && cd %s && "
       "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key "
       "-out leaf/ca.crt -days 2 -subj /CN=%s-ca 2>/dev/null && "
       "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout leaf/tls.key "
       "-out leaf.csr -subj /CN=%s 2>/dev/null && "
       "printf 'subjectAltName=DNS:%s\\nextendedKeyUsage=serverAuth,clientAuth\\n' > ext && "
       "openssl x509 -req -in leaf.csr -CA leaf/ca.crt -CAkey ca.key -set_serial 1 "
       "-out leaf/tls.crt -days 2 -extfile ext 2>/dev/null",
       dir, ca, ca, ca, name, name);
}

static void setup(void)
{
    itest_mkdtemp("sb-tls");
    /* run directories (the workers' --spill-dir) go under TMPDIR: in dir, only ours */
    setenv("TMPDIR", dir, 1);
    run_pid = 0;
    make_ca("a", "streambatch");
    make_ca("b", "streambatch");
    sh("cd %s && python3 -c \"\nimport json, os\nos.makedirs('in')\n"
       "for f in range(6):\n  with open('in/f%%d.jsonl' %% f, 'w') as o:\n"
       "    for i in range(1500):\n"
       "      o.write(json.dumps({'id': f*100000+i, 'pad': 'x'*(i%%97)}) + '\\\\n')\n\"",
       dir);
}

static void teardown(void)
{
    if (run_pid > 0) {
        kill(run_pid, SIGTERM);
        for (int i = 0; i < 100 && kill(run_pid, 0) == 0; i++)
            usleep(100000);
        if (kill(run_pid, 0) == 0)
            kill(run_pid, SIGKILL);
    }
    sh("rm -rf %s", dir);
}

/* identity on the CPU pool, then a GPU stage: partitions cross the data plane to the GPU worker */
static void write_tls_pipeline(const char *name, int gpu_ms_per_mb)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: {uri: 'file://%s/in/', format: jsonl, partitionSize: 32Ki}\n"
            "  stages:\n  - {name: a, op: identity}\n"
            "  - {name: g, op: bench.sleep, args: {msPerMB: %d}, resources: {gpu: 1}}\n"
            "  sink: {uri: 'file://%s/out-%s/', format: jsonl}\n"
            "  execution: {memoryBudget: 1Mi}\n",
            name, dir, gpu_ms_per_mb, dir, name);
    fclose(f);
}

TestSuite(tls, .init = setup, .fini = teardown, .timeout = 120);

Test(tls, run_with_tls_dir_gives_the_input_back)
{
    write_tls_pipeline("p", 1);
    char cmd[2048], *out;
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 90 %s run p.yaml --cpus 2 --gpus 1 --tls-dir %s/a/leaf 2>&1", dir,
             sb_test_bin("streambatch"), dir);
    int rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "p: Succeeded") != NULL, "%s", out);
    cr_expect(strstr(out, "3 worker processes started, 0 lost") != NULL, "%s", out);
    free(out);
    char *got = digest("out-p/part-*.jsonl"), *want = digest("in/*.jsonl");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
    /* the same through the environment (SB_TLS_DIR), as pods get it */
    write_tls_pipeline("e", 1);
    snprintf(cmd, sizeof cmd,
             "cd %s && SB_TLS_DIR=%s/a/leaf/ timeout 90 %s run e.yaml --cpus 2 --gpus 1 2>&1", dir,
             dir, sb_test_bin("streambatch"));
    rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    got = digest("out-e/part-*.jsonl");
    want = digest("in/*.jsonl");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
}

/* Certificates the run's own handshake refuses fail at start (exit 2, before any worker) with
 * what to check; a certificate for another name works with --tls-server-name. */
Test(tls, run_checks_its_own_certificate_and_takes_another_server_name)
{
    write_tls_pipeline("n", 1);
    make_ca("c", "sb.internal");
    sh("cd %s && mkdir mixed && cp a/leaf/ca.crt b/leaf/tls.crt b/leaf/tls.key mixed/", dir);
    char cmd[2048], *out;
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 60 %s run n.yaml --cpus 2 --gpus 1 --tls-dir mixed 2>&1", dir,
             sb_test_bin("streambatch"));
    int rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "check that tls.crt is signed by ca.crt") != NULL, "%s", out);
    cr_expect(strstr(out, "worker processes started") == NULL, "no run: %s", out);
    free(out);
    /* the worker and the controller check theirs at start too */
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 20 %s --controller 127.0.0.1:1 --id w --tls-dir mixed 2>&1; "
             "echo rc=$?; KUBECONFIG=/nonexistent timeout 20 %s --tls-dir mixed --tls-secret s "
             "2>&1; echo rc=$?",
             dir, sb_test_bin("streambatch-worker"), sb_test_bin("streambatch-controller"));
    sb_test_run(cmd, &out);
    cr_expect(strstr(out, "streambatch-worker: --tls-dir mixed: a TLS connection") != NULL, "%s",
              out);
    cr_expect(strstr(out, "streambatch-controller: --tls-dir mixed: a TLS connection") != NULL,
              "%s", out);
    const char *first = strstr(out, "rc=2\n");
    cr_expect(first != NULL && strstr(first + 1, "rc=2\n") != NULL, "both exit 2: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 60 %s run n.yaml --cpus 2 --gpus 1 --tls-dir c/leaf 2>&1", dir,
             sb_test_bin("streambatch"));
    rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "the DNS name \"streambatch\" (--tls-server-name)") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 90 %s run n.yaml --cpus 2 --gpus 1 --tls-dir c/leaf "
             "--tls-server-name sb.internal 2>&1",
             dir, sb_test_bin("streambatch"));
    rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *got = digest("out-n/part-*.jsonl"), *want = digest("in/*.jsonl");
    cr_expect_str_eq(got, want);
    free(got);
    free(want);
}

/* A unary call to a method no service has: UNIMPLEMENTED means the call got through TLS to the
 * server; a refused handshake ends it before any handler. */
static sb_rpc_code probe(const char *addr, const char *ca, const char *cert_dir,
                         const char *server_name, char *msg, size_t len)
{
    char c[512], k[512], a[512];
    sb_rpc_opts o = {0};
    if (ca != NULL) {
        snprintf(a, sizeof a, "%s/%s/leaf/ca.crt", dir, ca);
        o.tls_ca_file = a;
        o.tls_server_name = server_name ? server_name : SB_RPC_TLS_DEFAULT_SERVER_NAME;
    }
    if (cert_dir != NULL) {
        snprintf(c, sizeof c, "%s/%s/leaf/tls.crt", dir, cert_dir);
        snprintf(k, sizeof k, "%s/%s/leaf/tls.key", dir, cert_dir);
        o.tls_cert_file = c;
        o.tls_key_file = k;
    }
    sb_err err = {0};
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, ca != NULL ? &o : NULL, &err);
    cr_assert_not_null(ch, "%s", err.msg);
    uint8_t *resp = NULL;
    size_t rlen = 0;
    sb_rpc_code code =
        sb_rpc_unary(ch, "/streambatch.v1.Test/NoSuchMethod", "", 0, 5000, 0, &resp, &rlen, &err);
    free(resp);
    snprintf(msg, len, "%s", err.msg);
    sb_rpc_channel_free(ch);
    return code;
}

static void expect_refusals(const char *what, const char *addr)
{
    char msg[SB_ERR_MAX];
    sb_rpc_code code = probe(addr, "a", "a", NULL, msg, sizeof msg);
    cr_expect_eq(code, SB_RPC_UNIMPLEMENTED, "%s %s: a certificate of the CA must get through: %s",
                 what, addr, msg);
    static const struct {
        const char *why, *ca, *cert, *name;
    } bad[] = {{"plaintext client", NULL, NULL, NULL},
               {"TLS client without a certificate", "a", NULL, NULL},
               {"client certificate from another CA", "a", "b", NULL},
               {"server certificate checked for another name", "a", "a", "not-streambatch"},
               {"server checked against another CA", "b", "b", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        code = probe(addr, bad[i].ca, bad[i].cert, bad[i].name, msg, sizeof msg);
        cr_expect(code != SB_RPC_OK && code != SB_RPC_UNIMPLEMENTED,
                  "%s %s: %s got through (%s: %s)", what, addr, bad[i].why, sb_rpc_code_name(code),
                  msg);
        cr_expect(code == SB_RPC_UNAVAILABLE || code == SB_RPC_UNAUTHENTICATED, "%s: %s: %s %s",
                  what, bad[i].why, sb_rpc_code_name(code), msg);
    }
}

Test(tls, controller_and_worker_refuse_clients_without_a_valid_certificate)
{
    /* a run slow enough to probe while it goes: ~3 s per 32 KiB task */
    write_tls_pipeline("slow", 100000);
    char *pid_s = sb_test_sh_out("cd %s && %s run slow.yaml --cpus 1 --gpus 1 --tls-dir a/leaf "
                                 "--run-dir %s/rd >run.log 2>&1 & echo $!",
                                 dir, sb_test_bin("streambatch"), dir);
    run_pid = (pid_t)strtol(pid_s, NULL, 10);
    free(pid_s);
    cr_assert_gt(run_pid, 0);
    /* the worker says where its Data service is; its command line where the controller is */
    char *waddr = NULL;
    for (int i = 0; i < 300; i++) {
        waddr = sb_test_sh_out("sed -n 's/.*msg=\"worker ready\".* address=\\([^ ]*\\).*/\\1/p' "
                               "%s/rd/cpu-0.log 2>/dev/null | head -1",
                               dir);
        if (waddr[0] != '\0')
            break;
        free(waddr);
        waddr = NULL;
        usleep(100000);
    }
    cr_assert_not_null(waddr, "no worker ready: %s",
                       sb_test_sh_out("cat %s/run.log %s/rd/*.log", dir, dir));
    char *caddr = sb_test_sh_out("for p in $(cat /proc/[0-9]*/stat 2>/dev/null | "
                                 "awk '$4 == %d {print $1}'); do "
                                 "tr '\\0' '\\n' </proc/$p/cmdline | grep -A1 -x -- --controller "
                                 "| tail -1; done | head -1",
                                 (int)run_pid);
    cr_assert(caddr[0] != '\0', "controller address not found");
    expect_refusals("controller", caddr);
    expect_refusals("worker Data service", waddr);
    free(caddr);
    free(waddr);
    /* the run itself was not disturbed: still going */
    cr_expect_eq(kill(run_pid, 0), 0);
}

static int run_out(const char *cmd_fmt, const char *arg, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, cmd_fmt, dir, arg);
    return sb_test_run(cmd, out);
}

/* streambatch run, streambatch-worker and streambatch-controller with the given --tls-dir:
 * each exits 2 naming `file` and `why`. */
static void expect_bad_dir(const char *tdir, const char *file, const char *why)
{
    write_tls_pipeline("bad", 1);
    char run[1024], wk[1024], ctl[1024];
    snprintf(run, sizeof run,
             "cd %%s && timeout 20 %s run bad.yaml --cpus 1 --gpus 1 --tls-dir %%s 2>&1",
             sb_test_bin("streambatch"));
    snprintf(wk, sizeof wk,
             "cd %%s && timeout 20 %s --controller 127.0.0.1:1 --id w --tls-dir %%s 2>&1",
             sb_test_bin("streambatch-worker"));
    snprintf(ctl, sizeof ctl,
             "cd %%s && KUBECONFIG=/nonexistent timeout 20 %s --tls-dir %%s --tls-secret s 2>&1",
             sb_test_bin("streambatch-controller"));
    const char *cmds[] = {run, wk, ctl};
    for (int i = 0; i < 3; i++) {
        char *out;
        int rc = run_out(cmds[i], tdir, &out);
        cr_expect_eq(rc, 2, "%s: exit %d: %s", cmds[i], rc, out);
        cr_expect(strstr(out, file) != NULL && strstr(out, why) != NULL,
                  "%s: wants %s and \"%s\" in: %s", cmds[i], file, why, out);
        free(out);
    }
}

Test(tls, missing_or_broken_files_fail_at_start_naming_the_file)
{
    expect_bad_dir("nowhere", "nowhere/tls.crt", "No such file");
    sh("cd %s && mkdir c && cp a/leaf/tls.crt a/leaf/tls.key c/", dir);
    expect_bad_dir("c", "c/ca.crt", "No such file");
    sh("cd %s && cp a/leaf/ca.crt c/ && echo garbage > c/tls.key", dir);
    expect_bad_dir("c", "c/tls.key", "is not PEM");
    sh("cd %s && cp a/leaf/tls.key c/ && chmod 000 c/ca.crt", dir);
    if (geteuid() != 0) /* root reads it anyway */
        expect_bad_dir("c", "c/ca.crt", "Permission denied");
    /* the controller needs both the directory and the Secret for its workers */
    char *out;
    int rc =
        run_out("cd %s && %s --tls-dir a/leaf 2>&1", sb_test_bin("streambatch-controller"), &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--tls-secret") != NULL, "%s", out);
    free(out);
}
