/* A real streambatch-worker process across a controller failover: it registers at controller A
 * (a real sb_ctl running a pipeline whose second stage cannot run, so stage-0 partitions stay
 * in the worker's store), A goes away, the worker keeps running, and a Worker.Rebind to
 * controller B (a fake Control service in this test that records what it is told) makes it
 * register at B with the partitions it holds. Rebinds with a lower epoch or for another
 * pipeline are refused; without a Rebind the worker exits non-zero after the loss timeout;
 * pod mode (SB_POD_IP + SB_WORKER_PORT) listens where it is told. Every process is bounded and
 * killed at the end. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "controller/ctl/ctl.h"
#include "core/log.h"
#include "doc/doc.h"
#include "rpc/proto.h"
#include "spec/pipeline.h"
#include "io/split.h"
#include "../unit/testauth.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

/* ---- a fake Control service ------------------------------------------------------------- */

typedef struct fake {
    sb_rpc_server *srv;
    int port;
    char addr[64];
    pthread_mutex_t mu;
    pthread_t th;
    int stop;
    int shutdown; /* answer shutdown to polls and heartbeats */
    int registrations, polls, heartbeats;
    char reg_id[64], reg_addr[128];
    size_t reg_nparts;
    char reg_parts[256][SB_PART_ID_MAX];
    sb_rpc_call *held[64]; /* polls held open, answered by the thread */
    size_t nheld;
} fake;

static const char *g_pipeline_json;

static void f_register(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    fake *f = ud;
    Streambatch__V1__RegisterRequest *m = (Streambatch__V1__RegisterRequest *)sb_rpc_call_decode(
        call, &streambatch__v1__register_request__descriptor, req, len);
    if (m == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->registrations++;
    snprintf(f->reg_id, sizeof f->reg_id, "%s", m->worker_id);
    snprintf(f->reg_addr, sizeof f->reg_addr, "%s", m->address);
    f->reg_nparts = 0;
    for (size_t i = 0; i < m->n_partitions && i < 256; i++)
        snprintf(f->reg_parts[f->reg_nparts++], SB_PART_ID_MAX, "%s", m->partitions[i]->id);
    pthread_mutex_unlock(&f->mu);
    Streambatch__V1__RegisterReply r = STREAMBATCH__V1__REGISTER_REPLY__INIT;
    r.heartbeat_interval_ms = 200;
    r.controller_id = "fake";
    r.pipeline_json = (char *)g_pipeline_json;
    sb_rpc_call_reply_msg(call, &r.base, NULL);
    sb_rpc_msg_free(&m->base);
}

static void poll_answer(fake *f, sb_rpc_call *call)
{
    Streambatch__V1__PollTasksReply r = STREAMBATCH__V1__POLL_TASKS_REPLY__INIT;
    r.shutdown = f->shutdown;
    sb_rpc_call_reply_msg(call, &r.base, NULL);
}

static void f_poll(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    fake *f = ud;
    ProtobufCMessage *m =
        sb_rpc_call_decode(call, &streambatch__v1__poll_tasks_request__descriptor, req, len);
    if (m == NULL)
        return;
    sb_rpc_msg_free(m);
    pthread_mutex_lock(&f->mu);
    f->polls++;
    if (f->shutdown || f->nheld == 64)
        poll_answer(f, call);
    else
        f->held[f->nheld++] = call;
    pthread_mutex_unlock(&f->mu);
}

static void f_heartbeat(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    fake *f = ud;
    ProtobufCMessage *m =
        sb_rpc_call_decode(call, &streambatch__v1__heartbeat_request__descriptor, req, len);
    if (m == NULL)
        return;
    sb_rpc_msg_free(m);
    pthread_mutex_lock(&f->mu);
    f->heartbeats++;
    Streambatch__V1__HeartbeatReply r = STREAMBATCH__V1__HEARTBEAT_REPLY__INIT;
    r.shutdown = f->shutdown;
    pthread_mutex_unlock(&f->mu);
    sb_rpc_call_reply_msg(call, &r.base, NULL);
}

static void f_complete(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    ProtobufCMessage *m =
        sb_rpc_call_decode(call, &streambatch__v1__complete_task_request__descriptor, req, len);
    if (m == NULL)
        return;
    sb_rpc_msg_free(m);
    Streambatch__V1__CompleteTaskReply r = STREAMBATCH__V1__COMPLETE_TASK_REPLY__INIT;
    r.accepted = 1;
    sb_rpc_call_reply_msg(call, &r.base, NULL);
}

/* Answers the held polls (empty) every 200 ms: a long-poll without work. */
static void *fake_thread(void *arg)
{
    fake *f = arg;
    for (;;) {
        sleep_ms(200);
        pthread_mutex_lock(&f->mu);
        if (f->stop) {
            pthread_mutex_unlock(&f->mu);
            return NULL;
        }
        for (size_t i = 0; i < f->nheld; i++)
            poll_answer(f, f->held[i]);
        f->nheld = 0;
        pthread_mutex_unlock(&f->mu);
    }
}

static fake *fake_start(void)
{
    fake *f = calloc(1, sizeof *f);
    cr_assert_not_null(f);
    pthread_mutex_init(&f->mu, NULL);
    sb_err err;
    f->srv = sb_rpc_server_new(NULL, &err);
    cr_assert_not_null(f->srv, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_add_unary(f->srv, SB_RPC_CONTROL_REGISTER, f_register, f, &err), 0);
    cr_assert_eq(sb_rpc_server_add_unary(f->srv, SB_RPC_CONTROL_POLL_TASKS, f_poll, f, &err), 0);
    cr_assert_eq(sb_rpc_server_add_unary(f->srv, SB_RPC_CONTROL_HEARTBEAT, f_heartbeat, f, &err),
                 0);
    cr_assert_eq(sb_rpc_server_add_unary(f->srv, SB_RPC_CONTROL_COMPLETE_TASK, f_complete, f, &err),
                 0);
    f->port = sb_rpc_server_listen(f->srv, "127.0.0.1:0", &err);
    cr_assert_gt(f->port, 0, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_start(f->srv, &err), 0, "%s", err.msg);
    snprintf(f->addr, sizeof f->addr, "127.0.0.1:%d", f->port);
    cr_assert_eq(pthread_create(&f->th, NULL, fake_thread, f), 0);
    return f;
}

/* "Kills" the controller: its port closes and held polls end CANCELLED. */
static void fake_stop(fake *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->th, NULL);
    sb_rpc_server_shutdown(f->srv, 0);
    for (size_t i = 0; i < f->nheld; i++)
        sb_rpc_call_finish(f->held[i], SB_RPC_CANCELLED, "controller gone");
    sb_rpc_server_free(f->srv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static int fake_count(fake *f, const int *field)
{
    pthread_mutex_lock(&f->mu);
    int n = *field;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Waits up to timeout_ms for *field >= n. */
static int fake_wait(fake *f, const int *field, int n, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    while (fake_count(f, field) < n && now_ms() < end)
        sleep_ms(20);
    return fake_count(f, field) >= n;
}

/* ---- worker processes ------------------------------------------------------------------- */

static char dir[256];
static pid_t g_pids[8];
static int g_npids;

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(s, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &l), 0);
    close(s);
    return ntohs(a.sin_port);
}

/* Starts bin/streambatch-worker with args (NULL-terminated) and env ("K=V", NULL-terminated),
 * its output into <dir>/<log>. */
static pid_t worker_start(const char *log, const char *const *args, const char *const *env)
{
    const char *bin = sb_test_bin("streambatch-worker");
    const char *argv[40];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, log);
    cr_assert_lt(g_npids, 8);
    sb_test_worker_env(); /* the pipeline's credentials, inherited */
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *o = freopen(path, "w", stdout);
        if (o == NULL)
            _exit(126);
        dup2(1, 2);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    g_pids[g_npids++] = pid;
    return pid;
}

/* Waits up to timeout_ms for the process to exit: its status (128+sig if killed), -2 if it
 * was still running (then it is killed). */
static int worker_reap(pid_t pid, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -1;
        if (now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -2;
            break;
        }
        sleep_ms(20);
    }
    for (int i = 0; i < g_npids; i++)
        if (g_pids[i] == pid)
            g_pids[i] = 0;
    if (st == -2)
        return -2;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int alive(pid_t pid)
{
    return waitpid(pid, NULL, WNOHANG) == 0;
}

static char *slurp(const char *log)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cat %s/%s", dir, log);
    char *out;
    sb_test_run(cmd, &out);
    return out;
}

/* Sends Worker.Rebind to the worker at addr; *accepted and msg set from the reply. */
static void rebind(const char *addr, const char *controller, uint64_t epoch, const char *pipeline,
                   int *accepted, char *msg, size_t msglen)
{
    sb_err err;
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, sb_test_ctl_opts(NULL), &err);
    cr_assert_not_null(ch, "%s", err.msg);
    Streambatch__V1__RebindRequest req = STREAMBATCH__V1__REBIND_REQUEST__INIT;
    req.controller_address = (char *)controller;
    req.epoch = epoch;
    req.pipeline = (char *)pipeline;
    ProtobufCMessage *resp = NULL;
    sb_rpc_code c = sb_rpc_call_msg(ch, SB_RPC_WORKER_REBIND, &req.base, 10000,
                                    SB_RPC_WAIT_FOR_READY, &resp, &err);
    sb_rpc_channel_free(ch);
    cr_assert_eq(c, SB_RPC_OK, "Rebind: %s", err.msg);
    Streambatch__V1__RebindReply *r = (Streambatch__V1__RebindReply *)resp;
    *accepted = r->accepted;
    snprintf(msg, msglen, "%s", r->message ? r->message : "");
    cr_expect_str_eq(r->worker_id, "w1");
    sb_rpc_msg_free(resp);
}

static void setup(void)
{
    sb_test_tmpl(dir, sizeof dir, "sb-rebind");
    cr_assert_not_null(mkdtemp(dir));
    g_npids = 0;
    g_pipeline_json = "{\"apiVersion\":\"streambatch.dev/v1alpha1\",\"kind\":\"Pipeline\","
                      "\"metadata\":{\"name\":\"rb\"},\"spec\":{\"source\":{\"uri\":"
                      "\"file:///tmp/in/\",\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\","
                      "\"op\":\"identity\"}],\"sink\":{\"uri\":\"file:///tmp/out/\","
                      "\"format\":\"jsonl\"}}}";
}

static void teardown(void)
{
    for (int i = 0; i < g_npids; i++)
        if (g_pids[i] > 0) {
            kill(g_pids[i], SIGKILL);
            waitpid(g_pids[i], NULL, 0);
        }
    g_npids = 0;
    char cmd[300], *out;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    sb_test_run(cmd, &out);
    free(out);
}

TestSuite(rebind, .init = setup, .fini = teardown, .timeout = 120);

/* ---- controller A: a real sb_ctl in a child process (so it can be SIGKILLed) ------------- */

/* Child side: stage a (cpu) runs; stage g needs a GPU worker that never comes, so a's outputs
 * stay in the worker's store. Writes "port P", then "done N NOPS" once stage a finished, to fd;
 * then waits to be killed. Never returns. */
static void ctl_a_child(int fd)
{
    sb_log_set_level(SB_LOG_WARN);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"apiVersion\":\"streambatch.dev/v1alpha1\",\"kind\":\"Pipeline\","
             "\"metadata\":{\"name\":\"rb\"},\"spec\":{\"source\":{\"uri\":\"file://%s/in/\","
             "\"format\":\"jsonl\",\"partitionSize\":\"8Ki\"},\"stages\":["
             "{\"name\":\"a\",\"op\":\"identity\"},"
             "{\"name\":\"g\",\"op\":\"bench.sleep\",\"args\":{\"msPerMB\":1},"
             "\"resources\":{\"gpu\":1}}],"
             "\"sink\":{\"uri\":\"file://%s/out/\",\"format\":\"jsonl\"},"
             "\"execution\":{\"memoryBudget\":\"64Mi\"}}}",
             dir, dir);
    sb_doc *doc = sb_doc_parse_json(json, strlen(json), NULL);
    sb_pipeline p;
    sb_diags d = {0};
    sb_err err;
    sb_io_split *splits = NULL;
    size_t n = 0;
    if (doc == NULL || sb_pipeline_decode(sb_doc_root(doc, 0), &p, &d) != 0 || d.n > 0) {
        dprintf(fd, "error pipeline: %s\n", d.n ? d.items[0].msg : "?");
        _exit(1);
    }
    if (sb_io_plan_splits(&p.spec.source, &splits, &n, &err) != 0) {
        dprintf(fd, "error splits: %s\n", err.msg);
        _exit(1);
    }
    sb_storage_split *ss = calloc(n, sizeof *ss);
    for (size_t i = 0; i < n; i++) {
        ss[i].split = sb_io_split_encode(&splits[i], &err);
        ss[i].bytes = splits[i].end - splits[i].start;
    }
    sb_ctl_config cfg = {.pipeline = &p,
                         .pipeline_id = "default/rb",
                         .pipeline_json = json,
                         .splits = ss,
                         .nsplits = n,
                         .heartbeat_interval_ms = 200,
                         .heartbeat_timeout_ms = 5000};
    sb_ctl *c = sb_ctl_start(&cfg, sb_test_ctl_opts(NULL), &err);
    if (c == NULL) {
        dprintf(fd, "error ctl: %s\n", err.msg);
        _exit(1);
    }
    dprintf(fd, "port %d\n", sb_ctl_port(c));
    static sb_ctl_snapshot s;
    for (int i = 0; i < 1200; i++) {
        sleep_ms(50);
        sb_ctl_snapshot_get(c, &s);
        if (s.nops > 0 && s.ops[0].tasks_done == n)
            break;
    }
    dprintf(fd, "done %llu %zu %zu\n", (unsigned long long)s.ops[0].tasks_done, n, s.nops);
    for (;;)
        pause();
}

/* Reads one line from fd within timeout_ms; 0 on timeout/EOF. */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    int64_t end = now_ms() + timeout_ms;
    while (n + 1 < cap) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            return 0;
        char ch;
        if (read(fd, &ch, 1) != 1)
            return 0;
        if (ch == '\n')
            break;
        buf[n++] = ch;
    }
    buf[n] = '\0';
    return 1;
}

/* Starts controller A; *port set. Returns its pid; *fd is the pipe it reports on. */
static pid_t ctl_a_start(int *port, int *fd)
{
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/in && cd %s/in && for f in 0 1 2; do for i in $(seq 1 300); do "
             "echo \"{\\\"f\\\": $f, \\\"i\\\": $i, \\\"pad\\\": \\\"xxxxxxxxxxxxxxxxxxxx\\\"}\"; "
             "done > f$f.jsonl; done",
             dir, dir);
    cr_assert_eq(sb_test_run(cmd, &out), 0, "%s", out);
    free(out);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_lt(g_npids, 8);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        ctl_a_child(fds[1]);
    }
    g_pids[g_npids++] = pid;
    close(fds[1]);
    *fd = fds[0];
    char line[512];
    cr_assert(read_line(*fd, line, sizeof line, 30000), "controller A did not start");
    cr_assert(sscanf(line, "port %d", port) == 1, "controller A: %s", line);
    return pid;
}

Test(rebind, worker_survives_controller_death_and_registers_at_the_new_one)
{
    int aport, afd;
    pid_t apid = ctl_a_start(&aport, &afd);
    char ctl[64], listen[64];
    snprintf(ctl, sizeof ctl, "127.0.0.1:%d", aport);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", free_port());
    const char *args[] = {"--controller",
                          ctl,
                          "--id",
                          "w1",
                          "--listen",
                          listen,
                          "--pipeline",
                          "default/rb",
                          "--epoch",
                          "3",
                          "--controller-lost-timeout",
                          "30s",
                          NULL};
    const char *env[] = {"SB_LOG_LEVEL=info", NULL};
    pid_t pid = worker_start("w1.log", args, env);

    /* stage a finishes on the worker; its outputs stay in the worker's store */
    char line[512];
    cr_assert(read_line(afd, line, sizeof line, 60000), "controller A said nothing:\n%s",
              slurp("w1.log"));
    unsigned long long held;
    size_t nsplits, nops;
    cr_assert_eq(sscanf(line, "done %llu %zu %zu", &held, &nsplits, &nops), 3, "%s", line);
    cr_assert_eq(held, nsplits, "stage a done: %s", line);
    cr_assert_gt(nops, 1, "stage g is its own op");
    cr_assert_geq(held, 3);
    close(afd);

    kill(apid, SIGKILL); /* controller A dies */
    worker_reap(apid, 5000);
    sleep_ms(2500);
    cr_assert(alive(pid), "the worker must outlive its controller:\n%s", slurp("w1.log"));

    fake *b = fake_start();
    int ok;
    char msg[512];
    rebind(listen, b->addr, 4, "default/rb", &ok, msg, sizeof msg);
    cr_assert(ok, "Rebind refused: %s", msg);
    cr_assert(fake_wait(b, &b->registrations, 1, 15000), "no registration at B:\n%s",
              slurp("w1.log"));
    pthread_mutex_lock(&b->mu);
    cr_expect_str_eq(b->reg_id, "w1");
    cr_expect_str_eq(b->reg_addr, listen);
    cr_expect_geq(b->reg_nparts, held, "B was told of %zu partitions, stage a made >= %llu",
                  b->reg_nparts, (unsigned long long)held);
    for (size_t i = 0; i < b->reg_nparts; i++)
        cr_expect(strncmp(b->reg_parts[i], "s0-t", 4) == 0, "held %s", b->reg_parts[i]);
    pthread_mutex_unlock(&b->mu);
    int polls = fake_count(b, &b->polls);
    cr_expect(fake_wait(b, &b->polls, polls + 2, 10000), "the worker polls B");
    cr_expect(fake_wait(b, &b->heartbeats, 1, 10000), "the worker heartbeats B");

    /* a deposed leader (lower epoch) and another pipeline's controller are refused */
    rebind(listen, ctl, 3, "default/rb", &ok, msg, sizeof msg);
    cr_expect(!ok, "a lower epoch must be refused");
    cr_expect(strstr(msg, "lower") != NULL, "message: %s", msg);
    rebind(listen, ctl, 9, "other/x", &ok, msg, sizeof msg);
    cr_expect(!ok, "another pipeline must be refused");
    cr_expect(strstr(msg, "other/x") != NULL && strstr(msg, "default/rb") != NULL, "message: %s",
              msg);
    /* still bound to B: it keeps polling there */
    polls = fake_count(b, &b->polls);
    cr_expect(fake_wait(b, &b->polls, polls + 2, 10000), "still polling B after refusals");
    cr_expect(alive(pid));

    /* a Rebind naming no pipeline is refused, whatever its epoch (it used to be taken) */
    rebind(listen, ctl, UINT64_MAX, "", &ok, msg, sizeof msg);
    cr_expect(!ok, "a Rebind without a pipeline must be refused");
    cr_expect(strstr(msg, "(none)") != NULL, "message: %s", msg);
    /* the same epoch again (a leader that restarted its service) is accepted */
    fake *c = fake_start();
    rebind(listen, c->addr, 4, "default/rb", &ok, msg, sizeof msg);
    cr_expect(ok, "same epoch: %s", msg);
    cr_expect(fake_wait(c, &c->registrations, 1, 15000), "no registration at C");

    /* the controller says shutdown: exit 0 */
    pthread_mutex_lock(&c->mu);
    c->shutdown = 1;
    pthread_mutex_unlock(&c->mu);
    int st = worker_reap(pid, 20000);
    cr_expect_eq(st, 0, "exit status %d:\n%s", st, slurp("w1.log"));
    char *log = slurp("w1.log");
    cr_expect(strstr(log, "Rebind refused") != NULL, "%s", log);
    free(log);
    fake_stop(c);
    fake_stop(b);
}

Test(rebind, controller_lost_timeout_exits_non_zero)
{
    fake *a = fake_start();
    const char *args[] = {"--controller", a->addr, "--id", "w1", "--controller-lost-timeout",
                          "2s",           NULL};
    const char *env[] = {"SB_LOG_LEVEL=info", NULL};
    pid_t pid = worker_start("lost.log", args, env);
    cr_assert(fake_wait(a, &a->registrations, 1, 15000), "no registration:\n%s", slurp("lost.log"));
    cr_assert(fake_wait(a, &a->heartbeats, 1, 10000));
    int64_t t0 = now_ms();
    fake_stop(a);
    int st = worker_reap(pid, 20000);
    int64_t took = now_ms() - t0;
    char *log = slurp("lost.log");
    cr_expect_eq(st, 1, "exit status %d (expected 1):\n%s", st, log);
    cr_expect_geq(took, 1800, "exited after %lld ms, before the timeout", (long long)took);
    cr_expect_leq(took, 15000, "exited after %lld ms", (long long)took);
    cr_expect(strstr(log, "controller lost") != NULL, "%s", log);
    free(log);
}

Test(rebind, a_rebind_restarts_the_loss_clock)
{
    fake *a = fake_start();
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", free_port());
    const char *args[] = {"--controller", a->addr,      "--id",
                          "w1",           "--listen",   listen,
                          "--pipeline",   "default/rb", "--controller-lost-timeout",
                          "3s",           NULL};
    pid_t pid = worker_start("clock.log", args, NULL);
    cr_assert(fake_wait(a, &a->registrations, 1, 15000), "%s", slurp("clock.log"));
    fake_stop(a);
    sleep_ms(2000);
    /* B is not up yet: the Rebind alone must keep the worker alive another 3 s */
    int port = free_port();
    char baddr[64];
    snprintf(baddr, sizeof baddr, "127.0.0.1:%d", port);
    int ok;
    char msg[512];
    rebind(listen, baddr, 1, "default/rb", &ok, msg, sizeof msg);
    cr_assert(ok, "%s", msg);
    sleep_ms(2000); /* 4 s after A died: past the first deadline */
    cr_assert(alive(pid), "the Rebind must restart the clock:\n%s", slurp("clock.log"));
    int st = worker_reap(pid, 15000); /* nobody listens at B: lost again */
    cr_expect_eq(st, 1, "exit status %d:\n%s", st, slurp("clock.log"));
}

/* The pod was made by a controller that died before the worker first registered (its start,
 * an image unpack, outlasted the controller): the successor's Rebind must end the wait for the
 * dead address. The first registration used to be one call of register_timeout_ms (60 s)
 * whatever came meanwhile: the worker registered at the new controller a minute late. */
Test(rebind, a_rebind_during_the_first_registration_is_followed_at_once)
{
    char dead[64], listen[64];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", free_port()); /* nobody listens there */
    snprintf(listen, sizeof listen, "127.0.0.1:%d", free_port());
    const char *args[] = {"--controller", dead,         "--id",       "w1", "--listen",
                          listen,         "--pipeline", "default/rb", NULL};
    const char *env[] = {"SB_LOG_LEVEL=info", NULL};
    pid_t pid = worker_start("first.log", args, env);
    fake *b = fake_start();
    int ok = 0;
    char msg[512];
    for (int i = 0; i < 100 && !ok; i++) { /* until its Worker service is up */
        sb_err err;
        sb_rpc_channel *ch = sb_rpc_channel_new(listen, sb_test_ctl_opts(NULL), &err);
        cr_assert_not_null(ch, "%s", err.msg);
        Streambatch__V1__RebindRequest req = STREAMBATCH__V1__REBIND_REQUEST__INIT;
        req.controller_address = b->addr;
        req.epoch = 1;
        req.pipeline = "default/rb";
        ProtobufCMessage *resp = NULL;
        if (sb_rpc_call_msg(ch, SB_RPC_WORKER_REBIND, &req.base, 500, SB_RPC_WAIT_FOR_READY, &resp,
                            &err) == SB_RPC_OK) {
            Streambatch__V1__RebindReply *r = (Streambatch__V1__RebindReply *)resp;
            ok = r->accepted;
            snprintf(msg, sizeof msg, "%s", r->message ? r->message : "");
            sb_rpc_msg_free(resp);
            cr_assert(ok, "Rebind refused: %s", msg);
        }
        sb_rpc_channel_free(ch);
    }
    cr_assert(ok, "the worker's Worker service never answered:\n%s", slurp("first.log"));
    int64_t t0 = now_ms();
    cr_assert(fake_wait(b, &b->registrations, 1, 20000),
              "no registration at the new controller within 20 s:\n%s", slurp("first.log"));
    int64_t took = now_ms() - t0;
    cr_expect_leq(took, 8000, "registered at the new controller %lld ms after the Rebind",
                  (long long)took);
    cr_expect(alive(pid), "%s", slurp("first.log"));
    pthread_mutex_lock(&b->mu);
    b->shutdown = 1;
    pthread_mutex_unlock(&b->mu);
    int st = worker_reap(pid, 20000);
    cr_expect_eq(st, 0, "exit status %d:\n%s", st, slurp("first.log"));
    fake_stop(b);
}

Test(rebind, pod_mode_listens_on_the_pod_ip_and_port)
{
    fake *a = fake_start();
    int port = free_port();
    char penv[64], want[64], cenv[96];
    snprintf(penv, sizeof penv, "SB_WORKER_PORT=%d", port);
    snprintf(want, sizeof want, "127.0.0.1:%d", port);
    snprintf(cenv, sizeof cenv, "SB_CONTROLLER=%s", a->addr);
    const char *args[] = {NULL};
    const char *env[] = {"SB_POD_IP=127.0.0.1",    penv,         cenv, "SB_WORKER_ID=w1",
                         "SB_PIPELINE=default/rb", "SB_EPOCH=7", NULL};
    pid_t pid = worker_start("pod.log", args, env);
    cr_assert(fake_wait(a, &a->registrations, 1, 15000), "%s", slurp("pod.log"));
    pthread_mutex_lock(&a->mu);
    cr_expect_str_eq(a->reg_addr, want);
    pthread_mutex_unlock(&a->mu);
    /* Rebind reaches it on that port; SB_EPOCH and SB_PIPELINE are in force */
    int ok;
    char msg[512];
    rebind(want, a->addr, 6, "default/rb", &ok, msg, sizeof msg);
    cr_expect(!ok, "epoch 6 < SB_EPOCH 7 must be refused");
    rebind(want, a->addr, 7, "default/other", &ok, msg, sizeof msg);
    cr_expect(!ok, "SB_PIPELINE must be in force");
    rebind(want, a->addr, 7, "default/rb", &ok, msg, sizeof msg);
    cr_expect(ok, "%s", msg);
    cr_expect(fake_wait(a, &a->registrations, 2, 15000), "registers again after the Rebind");
    pthread_mutex_lock(&a->mu);
    a->shutdown = 1;
    pthread_mutex_unlock(&a->mu);
    int st = worker_reap(pid, 20000);
    cr_expect_eq(st, 0, "exit status %d:\n%s", st, slurp("pod.log"));
    fake_stop(a);
}

Test(rebind, bad_flag_values_name_the_flag_and_exit_2)
{
    struct {
        const char *cmd, *want;
    } cases[] = {
        {"--worker-port 70000", "--worker-port"},
        {"--worker-port 0", "--worker-port"},
        {"--epoch -1", "--epoch"},
        {"--epoch 12x", "--epoch"},
        {"--controller-lost-timeout 5x", "--controller-lost-timeout"},
        {"--controller-lost-timeout 0s", "--controller-lost-timeout"},
        {"--pipeline nonamespace", "--pipeline"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[512], *out;
        snprintf(cmd, sizeof cmd, "timeout 10 %s --controller 127.0.0.1:1 --id w %s 2>&1",
                 sb_test_bin("streambatch-worker"), cases[i].cmd);
        int rc = sb_test_run(cmd, &out);
        cr_expect_eq(rc, 2, "%s: exit %d\n%s", cases[i].cmd, rc, out);
        cr_expect(strstr(out, cases[i].want) != NULL, "%s: %s", cases[i].cmd, out);
        free(out);
    }
    char cmd[512], *out;
    snprintf(cmd, sizeof cmd,
             "SB_WORKER_PORT=abc timeout 10 %s --controller 127.0.0.1:1 --id w 2>&1",
             sb_test_bin("streambatch-worker"));
    cr_expect_eq(sb_test_run(cmd, &out), 2, "%s", out);
    cr_expect(strstr(out, "SB_WORKER_PORT") != NULL, "%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s --help", sb_test_bin("streambatch-worker"));
    cr_expect_eq(sb_test_run(cmd, &out), 0);
    const char *words[] = {"--controller-lost-timeout",
                           "SB_CONTROLLER_LOST_TIMEOUT",
                           "--pipeline",
                           "SB_PIPELINE",
                           "--epoch",
                           "SB_EPOCH",
                           "SB_POD_IP",
                           "SB_WORKER_PORT",
                           "POD_IP",
                           "SB_LISTEN",
                           "SB_CONTROLLER",
                           "SB_WORKER_ID"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        cr_expect(strstr(out, words[i]) != NULL, "--help lacks %s", words[i]);
    free(out);
}

/* The worker's own /metrics (--metrics-addr): after stage a ran its tasks on it, the per-stage
 * counters, rows, bytes and the duration histogram carry the pipeline's labels, the sampled
 * store figures are there, and promtool finds nothing wrong with the text. */
Test(rebind, worker_serves_its_metrics)
{
    int aport, afd;
    pid_t apid = ctl_a_start(&aport, &afd);
    char ctl[64], listen[64], maddr[64];
    snprintf(ctl, sizeof ctl, "127.0.0.1:%d", aport);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", free_port());
    int mport = free_port();
    snprintf(maddr, sizeof maddr, "127.0.0.1:%d", mport);
    const char *args[] = {"--controller", ctl, "--id", "wm", "--listen", listen, NULL};
    const char *env[] = {"SB_LOG_LEVEL=info", NULL};
    char menv[96];
    snprintf(menv, sizeof menv, "SB_METRICS_ADDR=%s", maddr); /* the variable pods use */
    env[0] = menv;
    pid_t pid = worker_start("wm.log", args, env);
    char line[512];
    cr_assert(read_line(afd, line, sizeof line, 60000), "controller A said nothing:\n%s",
              slurp("wm.log"));
    unsigned long long done;
    size_t nsplits, nops;
    cr_assert_eq(sscanf(line, "done %llu %zu %zu", &done, &nsplits, &nops), 3, "%s", line);
    close(afd);
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.txt", dir);
    char cmd[1024], *out;
    snprintf(cmd, sizeof cmd, "curl -fsS http://%s/metrics -o %s", maddr, path);
    cr_assert_eq(sb_test_run(cmd, &out), 0, "%s\n%s", out, slurp("wm.log"));
    free(out);
    const char *lab = "namespace=\"default\",pipeline=\"rb\",pool=\"cpu\"";
    char want[256];
    snprintf(cmd, sizeof cmd,
             "grep -E '^streambatch_worker_tasks_finished_total\\{%s,stage=\"a\"\\} ' %s | "
             "awk '{print $2}'",
             lab, path);
    char *v = sb_test_sh_out("%s", cmd);
    cr_expect_eq(strtoull(v, NULL, 10), done, "tasks finished of stage a: %s", v);
    free(v);
    snprintf(
        cmd, sizeof cmd,
        "grep -E '^streambatch_worker_rows_in_total\\{%s,stage=\"a\"\\} ' %s | awk '{print $2}'",
        lab, path);
    v = sb_test_sh_out("%s", cmd);
    cr_expect_eq(strtoull(v, NULL, 10), 900, "rows read by stage a (3 files x 300): %s", v);
    free(v);
    const char *present[] = {"streambatch_worker_task_duration_seconds_count{%s,stage=\"a\"} ",
                             "streambatch_worker_store_memory_bytes{%s} ",
                             "streambatch_worker_bytes_out_total{%s,stage=\"a\"} ",
                             "streambatch_workers{%s} 1", "process_resident_memory_bytes "};
    char *text = slurp("metrics.txt");
    for (size_t i = 0; i < sizeof present / sizeof *present; i++) {
        snprintf(want, sizeof want, present[i], lab);
        cr_expect(strstr(text, want) != NULL, "missing \"%s\" in:\n%s", want, text);
    }
    free(text);
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
    int rc = sb_test_run(cmd, &out);
    cr_expect_eq(rc, 0, "promtool: %s", out);
    free(out);
    kill(pid, SIGTERM);
    worker_reap(pid, 10000);
    kill(apid, SIGKILL);
    worker_reap(apid, 5000);
}
