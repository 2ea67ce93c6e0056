/* The hostile-peer suite (issue 37) in local mode: a real controller (sb_ctl, in this process,
 * with a pipeline's credentials) and a real streambatch-worker process, attacked by a gRPC
 * client this test builds:
 *   - Register, PollTasks, CompleteTask, Heartbeat, Data.Fetch and Worker.Rebind without a token,
 *     and with another pipeline's tokens: UNAUTHENTICATED, before any handler;
 *   - Rebind with the pipeline's worker token (a worker, or exec code in a worker pod, posing as
 *     the controller): PERMISSION_DENIED; a Rebind to an attacker's address is never followed;
 *   - a holder of the worker token speaking for another worker (register, poll, heartbeat and a
 *     forged completion under its id, without its session): PERMISSION_DENIED;
 *   - a replayed completion and one for a task never assigned: not accepted.
 * After the attacks the real worker still serves the controller and the pipeline succeeds. A
 * second test runs `streambatch run` with an exec stage that dumps its environment: it finds
 * no credential. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "controller/ctl/ctl.h"
#include "core/log.h"
#include "doc/doc.h"
#include "io/split.h"
#include "rpc/proto.h"
#include "spec/pipeline.h"
#include "itest.h"
#include "../unit/testauth.h"

/* Another pipeline's tokens: valid format, wrong pipeline. */
#define OTHER_WORKER "0e0e000000000000000000000000000000000000000000000000000000000001"
#define OTHER_CONTROLLER "0e0e000000000000000000000000000000000000000000000000000000000002"
#define SESSION_A "5e55000000000000000000000000000000000000000000000000000000000001"

static sb_ctl *g_ctl;
static sb_doc *g_doc;
static sb_pipeline g_p;
static sb_storage_split *g_ss;
static size_t g_n;
static pid_t g_worker;
static char g_caddr[64], g_waddr[64];

/* A client channel sending `token` (NULL: none). */
static sb_rpc_channel *chan(const char *addr, const char *token)
{
    static sb_rpc_creds c[4];
    static int next;
    sb_rpc_opts o = {.max_receive_bytes = SB_RPC_CONTROL_MAX_REPLY};
    if (token != NULL) {
        sb_rpc_creds *cr = &c[next++ % 4];
        memset(cr, 0, sizeof *cr);
        snprintf(cr->token, sizeof cr->token, "%s", token);
        o.auth = cr;
    }
    sb_err err;
    sb_rpc_channel *ch = sb_rpc_channel_new(addr, &o, &err);
    cr_assert_not_null(ch, "%s", err.msg);
    return ch;
}

/* One call; returns its code, the reply in *resp (NULL: freed here). */
static sb_rpc_code call(const char *addr, const char *token, const char *method,
                        const ProtobufCMessage *req, ProtobufCMessage **resp, char *msg, size_t len)
{
    sb_rpc_channel *ch = chan(addr, token);
    ProtobufCMessage *r = NULL;
    sb_err err = {0};
    sb_rpc_code code = sb_rpc_call_msg(ch, method, req, 10000, SB_RPC_WAIT_FOR_READY, &r, &err);
    if (msg != NULL)
        snprintf(msg, len, "%s", err.msg);
    sb_rpc_channel_free(ch);
    if (resp != NULL)
        *resp = r;
    else if (r != NULL)
        sb_rpc_msg_free(r);
    return code;
}

/* Data.Fetch of `id`: the stream's status. */
static sb_rpc_code fetch(const char *token, const char *id, char *msg, size_t len)
{
    sb_rpc_channel *ch = chan(g_waddr, token);
    Streambatch__V1__FetchRequest req = STREAMBATCH__V1__FETCH_REQUEST__INIT;
    req.partition_id = (char *)id;
    uint8_t buf[512];
    size_t n = protobuf_c_message_pack(&req.base, buf);
    sb_err err = {0};
    sb_rpc_reader *r =
        sb_rpc_stream_open(ch, SB_RPC_DATA_FETCH, buf, n, 10000, SB_RPC_WAIT_FOR_READY, &err);
    cr_assert_not_null(r, "%s", err.msg);
    const sb_rpc_piece *pieces;
    size_t np, total;
    while (sb_rpc_reader_next(r, &pieces, &np, &total, &err) > 0)
        ;
    sb_rpc_code code = sb_rpc_reader_code(r);
    snprintf(msg, len, "%s", err.msg);
    sb_rpc_reader_close(r);
    sb_rpc_channel_free(ch);
    return code;
}

static void start_ctl(void)
{
    sh("mkdir -p %s/in && cd %s/in && for f in 0 1 2 3; do for i in $(seq 1 200); do "
       "echo \"{\\\"f\\\": $f, \\\"i\\\": $i}\"; done > f$f.jsonl; done",
       dir, dir);
    static char json[2048];
    snprintf(json, sizeof json,
             "{\"apiVersion\":\"streambatch.dev/v1alpha1\",\"kind\":\"Pipeline\","
             "\"metadata\":{\"name\":\"au\"},\"spec\":{\"source\":{\"uri\":\"file://%s/in/\","
             "\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\",\"op\":\"identity\"}],"
             "\"sink\":{\"uri\":\"file://%s/out/\",\"format\":\"jsonl\"}}}",
             dir, dir);
    g_doc = sb_doc_parse_json(json, strlen(json), NULL);
    sb_diags d = {0};
    cr_assert_not_null(g_doc);
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(g_doc, 0), &g_p, &d), 0);
    cr_assert_eq(d.n, 0);
    sb_io_split *splits = NULL;
    sb_err err;
    cr_assert_eq(sb_io_plan_splits(&g_p.spec.source, &splits, &g_n, &err), 0, "%s", err.msg);
    g_ss = calloc(g_n, sizeof *g_ss);
    for (size_t i = 0; i < g_n; i++) {
        g_ss[i].split = sb_io_split_encode(&splits[i], &err);
        g_ss[i].bytes = splits[i].end - splits[i].start;
    }
    sb_io_splits_free(splits, g_n);
    sb_ctl_config cfg = {.pipeline = &g_p,
                         .pipeline_id = "default/au",
                         .pipeline_json = json,
                         .splits = g_ss,
                         .nsplits = g_n,
                         .heartbeat_interval_ms = 200,
                         .heartbeat_timeout_ms = 5000,
                         .max_workers = 3};
    g_ctl = sb_ctl_start(&cfg, sb_test_ctl_opts(NULL), &err);
    cr_assert_not_null(g_ctl, "%s", err.msg);
    snprintf(g_caddr, sizeof g_caddr, "127.0.0.1:%d", sb_ctl_port(g_ctl));
}

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

static void start_worker(void)
{
    snprintf(g_waddr, sizeof g_waddr, "127.0.0.1:%d", free_port());
    char log[512];
    snprintf(log, sizeof log, "%s/worker.log", dir);
    sb_test_worker_env();
    g_worker = fork();
    cr_assert_geq(g_worker, 0);
    if (g_worker == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (freopen(log, "w", stdout) == NULL)
            _exit(126);
        dup2(1, 2);
        execl(sb_test_bin("streambatch-worker"), "streambatch-worker", "--controller", g_caddr,
              "--id", "w1", "--listen", g_waddr, "--pipeline", "default/au", (char *)NULL);
        _exit(127);
    }
}

static void setup(void)
{
    sb_log_set_level(SB_LOG_ERROR);
    itest_mkdtemp("sb-auth");
    start_ctl();
}

static void teardown(void)
{
    if (g_worker > 0) {
        kill(g_worker, SIGKILL);
        waitpid(g_worker, NULL, 0);
        g_worker = 0;
    }
    sb_ctl_free(g_ctl);
    g_ctl = NULL;
    sb_pipeline_free(&g_p);
    sb_doc_free(g_doc);
    for (size_t i = 0; i < g_n; i++)
        free((char *)g_ss[i].split);
    free(g_ss);
}

TestSuite(auth, .init = setup, .fini = teardown, .timeout = 120);

static size_t registered(void)
{
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(g_ctl, &s);
    return s.workers_registered;
}

/* Every Control call without a token, and with another pipeline's: UNAUTHENTICATED, and no
 * worker registered by them. */
static void control_refuses_strangers(void)
{
    Streambatch__V1__RegisterRequest reg = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
    reg.worker_id = "evil";
    reg.pool = "cpu";
    reg.address = "127.0.0.1:1";
    reg.slots = 1;
    reg.session = SESSION_A;
    Streambatch__V1__PollTasksRequest poll = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    poll.worker_id = "evil";
    poll.free_slots = 1;
    Streambatch__V1__CompleteTaskRequest comp = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    comp.worker_id = "evil";
    comp.task_id = "default/au/s0-t0";
    Streambatch__V1__HeartbeatRequest hb = STREAMBATCH__V1__HEARTBEAT_REQUEST__INIT;
    hb.worker_id = "evil";
    const struct {
        const char *method;
        const ProtobufCMessage *req;
    } calls[] = {{SB_RPC_CONTROL_REGISTER, &reg.base},
                 {SB_RPC_CONTROL_POLL_TASKS, &poll.base},
                 {SB_RPC_CONTROL_COMPLETE_TASK, &comp.base},
                 {SB_RPC_CONTROL_HEARTBEAT, &hb.base}};
    const char *tokens[] = {NULL, OTHER_WORKER, OTHER_CONTROLLER, SB_TEST_CONTROLLER_TOKEN};
    for (size_t t = 0; t < 4; t++)
        for (size_t i = 0; i < 4; i++) {
            char msg[SB_ERR_MAX];
            sb_rpc_code c =
                call(g_caddr, tokens[t], calls[i].method, calls[i].req, NULL, msg, sizeof msg);
            cr_expect_eq(c, SB_RPC_UNAUTHENTICATED, "%s with token %s: %s %s", calls[i].method,
                         tokens[t] ? tokens[t] : "(none)", sb_rpc_code_name(c), msg);
        }
    cr_expect_eq(registered(), 0, "a stranger registered");
}

Test(auth, strangers_and_impostors_are_refused_and_the_pipeline_still_runs)
{
    control_refuses_strangers();
    char msg[SB_ERR_MAX];

    /* the worker token, but not the session of the worker it claims to be */
    Streambatch__V1__RegisterRequest reg = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
    reg.worker_id = "fake-1";
    reg.pool = "cpu";
    reg.address = "127.0.0.1:1";
    reg.slots = 1;
    reg.session = SESSION_A;
    cr_assert_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_REGISTER, &reg.base, NULL, msg,
                      sizeof msg),
                 SB_RPC_OK, "%s", msg);
    reg.session = "not hex";
    cr_expect_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_REGISTER, &reg.base, NULL, msg,
                      sizeof msg),
                 SB_RPC_INVALID_ARGUMENT, "a session that is not 64 hex: %s", msg);
    reg.session = OTHER_WORKER; /* hex, but not fake-1's */
    cr_expect_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_REGISTER, &reg.base, NULL, msg,
                      sizeof msg),
                 SB_RPC_PERMISSION_DENIED, "fake-1 taken over: %s", msg);

    /* fake-1 polls a task with its session, completes it, and the completion is replayed */
    Streambatch__V1__PollTasksRequest poll = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    poll.worker_id = "fake-1";
    poll.free_slots = 1;
    poll.session = OTHER_WORKER;
    cr_expect_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_POLL_TASKS, &poll.base, NULL,
                      msg, sizeof msg),
                 SB_RPC_PERMISSION_DENIED, "a poll for fake-1 without its session: %s", msg);
    poll.session = SESSION_A;
    ProtobufCMessage *r = NULL;
    cr_assert_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_POLL_TASKS, &poll.base, &r, msg,
                      sizeof msg),
                 SB_RPC_OK, "%s", msg);
    Streambatch__V1__PollTasksReply *pr = (Streambatch__V1__PollTasksReply *)r;
    cr_assert_eq(pr->n_tasks, 1, "fake-1 got %zu tasks", pr->n_tasks);
    char task[256];
    snprintf(task, sizeof task, "%s", pr->tasks[0]->task_id);
    uint32_t attempt = pr->tasks[0]->attempt;
    sb_rpc_msg_free(r);

    Streambatch__V1__CompleteTaskRequest comp = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    comp.worker_id = "fake-1";
    comp.task_id = task;
    comp.attempt = attempt;
    comp.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    comp.session = OTHER_WORKER;
    cr_expect_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_COMPLETE_TASK, &comp.base, NULL,
                      msg, sizeof msg),
                 SB_RPC_PERMISSION_DENIED, "a forged completion for fake-1: %s", msg);
    Streambatch__V1__HeartbeatRequest hb = STREAMBATCH__V1__HEARTBEAT_REQUEST__INIT;
    hb.worker_id = "fake-1";
    cr_expect_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_HEARTBEAT, &hb.base, NULL, msg,
                      sizeof msg),
                 SB_RPC_PERMISSION_DENIED, "a heartbeat for fake-1 without a session: %s", msg);
    /* fake-1 itself fails the task (a retry goes to the real worker) ... */
    comp.session = SESSION_A;
    comp.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR;
    comp.message = "fake-1 gives it back";
    cr_assert_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_COMPLETE_TASK, &comp.base, &r,
                      msg, sizeof msg),
                 SB_RPC_OK, "%s", msg);
    cr_expect(((Streambatch__V1__CompleteTaskReply *)r)->accepted, "the first report");
    sb_rpc_msg_free(r);
    /* ... and the replay of that report is not accepted (stale attempt) */
    cr_assert_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_COMPLETE_TASK, &comp.base, &r,
                      msg, sizeof msg),
                 SB_RPC_OK, "%s", msg);
    cr_expect(!((Streambatch__V1__CompleteTaskReply *)r)->accepted, "a replayed report accepted");
    sb_rpc_msg_free(r);
    /* a report for a task fake-1 was never given: not accepted */
    comp.task_id = "default/au/s0-t999";
    comp.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    cr_assert_eq(call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_COMPLETE_TASK, &comp.base, &r,
                      msg, sizeof msg),
                 SB_RPC_OK, "%s", msg);
    cr_expect(!((Streambatch__V1__CompleteTaskReply *)r)->accepted, "a made-up task accepted");
    sb_rpc_msg_free(r);
    sb_ctl_worker_exited(g_ctl, "fake-1", "the test is done with it");

    /* the real worker registers and runs every task */
    start_worker();
    sb_ctl_snapshot s;
    for (int i = 0; i < 600; i++) {
        usleep(50 * 1000);
        sb_ctl_snapshot_get(g_ctl, &s);
        if (s.nops > 0 && s.ops[0].tasks_done == g_n)
            break;
    }
    cr_assert(s.nops > 0 && s.ops[0].tasks_done == g_n, "%zu of %zu tasks done",
              s.nops ? (size_t)s.ops[0].tasks_done : 0, g_n);

    /* the worker's Data and Worker services: strangers refused, the worker token too weak for
     * Rebind, the worker token enough for Fetch (an unknown partition: NOT_FOUND) */
    const char *strangers[] = {NULL, OTHER_WORKER, OTHER_CONTROLLER};
    for (size_t t = 0; t < 3; t++) {
        sb_rpc_code c = fetch(strangers[t], "s0-t0-p0", msg, sizeof msg);
        cr_expect_eq(c, SB_RPC_UNAUTHENTICATED, "Fetch with %s: %s %s",
                     strangers[t] ? strangers[t] : "(none)", sb_rpc_code_name(c), msg);
    }
    cr_expect_eq(fetch(SB_TEST_WORKER_TOKEN, "s0-t999-p0", msg, sizeof msg), SB_RPC_NOT_FOUND, "%s",
                 msg);
    Streambatch__V1__RebindRequest rb = STREAMBATCH__V1__REBIND_REQUEST__INIT;
    rb.controller_address = "127.0.0.1:9"; /* the attacker's */
    rb.epoch = UINT64_MAX;
    rb.pipeline = "default/au";
    for (size_t t = 0; t < 3; t++) {
        sb_rpc_code c =
            call(g_waddr, strangers[t], SB_RPC_WORKER_REBIND, &rb.base, NULL, msg, sizeof msg);
        cr_expect_eq(c, SB_RPC_UNAUTHENTICATED, "Rebind with %s: %s %s",
                     strangers[t] ? strangers[t] : "(none)", sb_rpc_code_name(c), msg);
    }
    sb_rpc_code c =
        call(g_waddr, SB_TEST_WORKER_TOKEN, SB_RPC_WORKER_REBIND, &rb.base, NULL, msg, sizeof msg);
    cr_expect_eq(c, SB_RPC_PERMISSION_DENIED, "Rebind with the worker token: %s %s",
                 sb_rpc_code_name(c), msg);
    /* the worker still answers its own controller: no loss in the next 2 heartbeat timeouts */
    usleep(2500 * 1000);
    sb_ctl_snapshot_get(g_ctl, &s);
    cr_expect_eq(s.workers_lost, 1, "only fake-1 is lost: %zu", s.workers_lost);
    cr_expect_eq(waitpid(g_worker, NULL, WNOHANG), 0, "the worker process ended");
    char *log = NULL;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cat %s/worker.log", dir);
    sb_test_run(cmd, &log);
    cr_expect(strstr(log, "rebound") == NULL, "the worker followed a Rebind:\n%s", log);
    cr_expect(strstr(log, SB_TEST_WORKER_TOKEN) == NULL, "the token is in the log:\n%s", log);
    free(log);
}

/* A live worker is capped: max_workers (3) live at once, the fourth refused. */
Test(auth, registrations_past_max_workers_are_refused)
{
    char msg[SB_ERR_MAX], id[16], sess[SB_RPC_TOKEN_HEX + 1];
    for (int i = 0; i < 4; i++) {
        Streambatch__V1__RegisterRequest reg = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
        snprintf(id, sizeof id, "w%d", i);
        snprintf(sess, sizeof sess, "%064x", i + 1);
        reg.worker_id = id;
        reg.pool = "cpu";
        reg.address = "127.0.0.1:1";
        reg.slots = 1;
        reg.session = sess;
        sb_rpc_code c = call(g_caddr, SB_TEST_WORKER_TOKEN, SB_RPC_CONTROL_REGISTER, &reg.base,
                             NULL, msg, sizeof msg);
        cr_expect_eq(c, i < 3 ? SB_RPC_OK : SB_RPC_RESOURCE_EXHAUSTED, "worker %d: %s %s", i,
                     sb_rpc_code_name(c), msg);
    }
    cr_expect_eq(registered(), 3);
}

/* exec code finds no credential in its environment: the worker removed them from its own at
 * start (they are never on its command line either). */
Test(auth, exec_code_finds_no_credentials)
{
    sh("mkdir -p %s/in && printf '{\"a\": 1}\\n' > %s/in/x.jsonl", dir, dir);
    FILE *f = itest_create("envdump.py");
    fprintf(f, "import json, os, sys\n"
               "for line in sys.stdin:\n"
               "    pass\n"
               "for k, v in sorted(os.environ.items()):\n"
               "    print(json.dumps({'k': k, 'v': v}))\n");
    fclose(f);
    char stages[512];
    snprintf(stages, sizeof stages,
             "  - {name: e, op: exec, args: {command: [python3, %s/envdump.py]}}\n", dir);
    write_pipeline("envdump", stages, "");
    char *out = NULL;
    int rc = run_cli("envdump", "--cpus 1", &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *env = sb_test_sh_out("cat %s/out-envdump/*", dir);
    cr_assert(strstr(env, "\"PATH\"") != NULL, "the exec stage printed no environment:\n%s", env);
    cr_expect(strstr(env, "SB_AUTH") == NULL, "a credential in exec's environment:\n%s", env);
    free(env);
}
