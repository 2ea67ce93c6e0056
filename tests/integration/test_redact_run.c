/* No secret in any output of `streambatch run` (issue 37, "Done when"): runs that fail on a
 * presigned-looking URL (X-Amz-Credential, X-Amz-Signature, X-Amz-Security-Token in the query,
 * and userinfo), served by a local HTTP server that answers 403, and one whose S3 sink is refused
 * with SB_S3_VERBOSE=1 and a session token set. Every file the run leaves (stdout, stderr, the
 * workers' logs, the checkpoint, the summary) is searched for the secret values: none may be
 * there, while the errors still name the host, port and path that failed. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "itest.h"

/* ---- a local HTTP server that refuses ----------------------------------------------------- */

static int srv_fd = -1;
static int srv_port;
static volatile int srv_stop;
static pthread_t srv_thread;

/* /plan403/...: 403 to everything (the planner's HEAD fails); /read403/...: HEAD says 100
 * bytes with ranges, GET is refused (the task's read fails); anything else (the S3 sink's
 * bucket): 403 with an S3 error body. */
static void answer(int c)
{
    char req[8192];
    size_t n = 0;
    req[0] = '\0';
    while (n < sizeof req - 1 && strstr(req, "\r\n\r\n") == NULL) {
        ssize_t r = read(c, req + n, sizeof req - 1 - n);
        if (r <= 0)
            return;
        n += (size_t)r;
        req[n] = '\0';
    }
    int head = strncmp(req, "HEAD ", 5) == 0;
    const char *path = strchr(req, ' ');
    char resp[512];
    int len;
    if (path != NULL && strncmp(path + 1, "/read403/", 9) == 0 && head)
        len = snprintf(resp, sizeof resp,
                       "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nAccept-Ranges: bytes\r\n"
                       "Connection: close\r\n\r\n");
    else {
        const char *body = "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code>"
                           "<Message>Access Denied</Message></Error>";
        len = snprintf(resp, sizeof resp,
                       "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\n"
                       "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                       strlen(body), head ? "" : body);
    }
    ssize_t w = write(c, resp, (size_t)len);
    (void)w;
}

static void *serve(void *arg)
{
    (void)arg;
    while (!srv_stop) {
        struct pollfd p = {.fd = srv_fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept(srv_fd, NULL, NULL);
        if (c < 0)
            continue;
        answer(c);
        close(c);
    }
    return NULL;
}

static void srv_start(void)
{
    srv_fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(srv_fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(srv_fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(srv_fd, 64), 0);
    socklen_t l = sizeof a;
    cr_assert_eq(getsockname(srv_fd, (struct sockaddr *)&a, &l), 0);
    srv_port = ntohs(a.sin_port);
    srv_stop = 0;
    cr_assert_eq(pthread_create(&srv_thread, NULL, serve, NULL), 0);
}

static void srv_stop_now(void)
{
    if (srv_fd < 0)
        return;
    srv_stop = 1;
    pthread_join(srv_thread, NULL);
    close(srv_fd);
    srv_fd = -1;
}

static void setup(void)
{
    itest_mkdtemp("sb-itest-redact");
    setenv("TMPDIR", dir, 1);
    itest_sh_failed = srv_stop_now;
    srv_start();
}

static void teardown(void)
{
    srv_stop_now();
    sh("rm -rf %s", dir);
}

TestSuite(redact_run, .init = setup, .fini = teardown, .timeout = 240);

/* ---- the runs ----------------------------------------------------------------------------- */

#define QUERY "X-Amz-Credential=SECRETCRED&X-Amz-Signature=SECRETSIG&X-Amz-Security-Token=SECRETTOK"
static const char *const secrets[] = {"SECRETCRED", "SECRETSIG",     "SECRETTOK",
                                      "SECRETUSER", "SECRETPASS",    "AKIDSECRETID",
                                      "SECRETKEY",  "SECRETSESSION", NULL};

/* dir/NAME.yaml: SOURCE (a YAML flow map) through identity to SINK. */
static void write_p(const char *name, const char *source, const char *sink)
{
    FILE *f = itest_create("%s.yaml", name);
    fprintf(f,
            "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: %s}\n"
            "spec:\n  source: %s\n  stages:\n  - {name: a, op: identity}\n  sink: %s\n"
            "  execution: {maxTaskRetries: 1}\n",
            name, source, sink);
    fclose(f);
}

/* Runs NAME.yaml with ENV (assignments) and SB_S3_VERBOSE=1, every output into dir: NAME.out,
 * NAME.err, the run dir rd-NAME/, ck-NAME.json, NAME.summary.json. Returns the exit status. */
static int run_p(const char *name, const char *env)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && env SB_S3_VERBOSE=1 %s timeout 120 %s run %s.yaml --cpus 1 --run-dir rd-%s "
             "--checkpoint ck-%s.json --summary-json %s.summary.json >%s.out 2>%s.err",
             dir, env, sb_test_bin("streambatch"), name, name, name, name, name, name);
    char *out = NULL;
    int rc = sb_test_run(cmd, &out);
    free(out);
    return rc;
}

/* No secret in any file under dir but the pipeline files, and the files that must be there
 * are (so the search is not over nothing): NAME.err and the workers' logs. */
static void expect_no_secret(const char *name)
{
    cr_assert_gt(num("wc -c < %s/%s.err", dir, name), 0, "%s.err is empty", name);
    cr_assert_gt(num("cat %s/rd-%s/*.log | wc -c", dir, name), 0, "no worker log for %s", name);
    for (size_t i = 0; secrets[i] != NULL; i++) {
        char *hits =
            sb_test_sh_out("cd %s && grep -rl --exclude='*.yaml' '%s' . || true", dir, secrets[i]);
        cr_expect_str_eq(hits, "", "%s: %s found in\n%s", name, secrets[i], hits);
        free(hits);
    }
}

static char *file_text(const char *name, const char *ext)
{
    return sb_test_sh_out("cat %s/%s.%s", dir, name, ext);
}

/* The planner's HEAD is refused: the run fails naming the URL, with its query values gone. */
Test(redact_run, a_presigned_url_refused_at_planning)
{
    char src[512];
    snprintf(src, sizeof src,
             "{uri: 'http://127.0.0.1:%d/plan403/obj.jsonl?" QUERY "', format: "
             "jsonl}",
             srv_port);
    char sink[512];
    snprintf(sink, sizeof sink, "{uri: 'file://%s/out-plan/', format: jsonl}", dir);
    write_p("plan", src, sink);
    cr_assert_neq(run_p("plan", ""), 0, "the run should fail");
    expect_no_secret("plan");
    char *err = file_text("plan", "err");
    char want[128];
    snprintf(want, sizeof want, "127.0.0.1:%d/plan403/obj.jsonl?X-Amz-Credential=REDACTED",
             srv_port);
    cr_expect(strstr(err, want) != NULL, "the error names host and path: %s", err);
    cr_expect(strstr(err, "HTTP 403") != NULL, "%s", err);
    free(err);
}

/* The planner sees 100 bytes, the task's GET is refused: task errors, the errored partition's
 * split label and error, the failure and the summary name the URL without its userinfo and
 * query values. */
Test(redact_run, a_presigned_url_with_userinfo_refused_when_read)
{
    char src[512];
    snprintf(src, sizeof src,
             "{uri: 'http://SECRETUSER:SECRETPASS@127.0.0.1:%d/read403/obj.jsonl?" QUERY
             "', format: jsonl}",
             srv_port);
    char sink[512];
    snprintf(sink, sizeof sink, "{uri: 'file://%s/out-read/', format: jsonl}", dir);
    write_p("read", src, sink);
    cr_assert_neq(run_p("read", ""), 0, "the run should fail");
    expect_no_secret("read");
    char *err = file_text("read", "err");
    char want[128];
    snprintf(want, sizeof want, "http://***@127.0.0.1:%d/read403/obj.jsonl", srv_port);
    cr_expect(strstr(err, want) != NULL, "the error names host and path: %s", err);
    cr_expect(strstr(err, "HTTP 403") != NULL, "%s", err);
    free(err);
    char *sum = file_text("read", "summary.json");
    cr_expect(strstr(sum, want) != NULL, "the summary names host and path: %s", sum);
    free(sum);
}

/* An S3 sink whose endpoint refuses, with SB_S3_VERBOSE=1 and a session token: the trace is
 * there (redacted), the token, the key id and the secret are not. */
Test(redact_run, s3_verbose_trace_is_redacted)
{
    char src[512];
    sh("mkdir -p %s/in && echo '{\"a\":1}' > %s/in/a.jsonl", dir, dir);
    snprintf(src, sizeof src, "{uri: 'file://%s/in/', format: jsonl}", dir);
    write_p("s3", src, "{uri: 's3://bucket/out/', format: jsonl}");
    char env[512];
    snprintf(env, sizeof env,
             "AWS_ACCESS_KEY_ID=AKIDSECRETID AWS_SECRET_ACCESS_KEY=SECRETKEY "
             "AWS_SESSION_TOKEN=SECRETSESSION AWS_REGION=us-east-1 SB_IO_RETRIES=1 "
             "AWS_ENDPOINT_URL_S3=http://127.0.0.1:%d",
             srv_port);
    cr_assert_neq(run_p("s3", env), 0, "the run should fail");
    expect_no_secret("s3");
    long traced = num("cat %s/s3.err %s/rd-s3/*.log | grep -c 's3 trace > ' || true", dir, dir);
    cr_expect_gt(traced, 0, "SB_S3_VERBOSE=1 traced no request");
    long redacted = num("cat %s/s3.err %s/rd-s3/*.log | grep -ci 's3 trace > authorization: "
                        "REDACTED' || true",
                        dir, dir);
    cr_expect_gt(redacted, 0, "no redacted Authorization header in the trace");
}
