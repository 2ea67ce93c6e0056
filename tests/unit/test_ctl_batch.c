/* Batched completions (issue 16): a worker reports the tasks it finished in its next PollTasks
 * (PollTasksRequest.completions) instead of one CompleteTask each. Over real gRPC on loopback:
 * a batch is accounted exactly like the same completions sent one by one, duplicates and stale
 * attempts in a batch are ignored as before, and malformed batches are refused whole. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ctl_fixture.h"

#define NSPLITS 3

typedef ctl_fixture fixture;

static void setup(fixture *f)
{
    sb_storage_split splits[NSPLITS] = {
        {"in\t0\t100", 100}, {"in\t100\t200", 100}, {"in\t200\t300", 100}};
    sb_ctl_config cfg = {.pipeline_json = "{\"kind\":\"Pipeline\"}",
                         .splits = splits,
                         .nsplits = NSPLITS,
                         .heartbeat_timeout_ms = 5000};
    ctl_fixture_start(f, &cfg);
}

static void teardown(fixture *f)
{
    ctl_fixture_stop(f);
}

static void do_register(fixture *f, const char *id)
{
    Streambatch__V1__RegisterReply *r = ctl_fixture_register(f, id, NSPLITS);
    /* the controller says it takes completions in polls (a worker batches only then) */
    cr_expect(r->batched_completions);
    sb_rpc_msg_free(&r->base);
}

/* One completion report: task `task_id` attempt `attempt` OK, one output `out_id` of
 * (bytes, rows) = (100 * (k + 1), 10 * (k + 1)). Strings must outlive the report. */
typedef struct {
    Streambatch__V1__CompleteTaskRequest req;
    Streambatch__V1__PartitionInfo out;
    Streambatch__V1__PartitionInfo *outs[1];
    char out_id[32];
} report;

static void report_init(report *r, const char *worker, const char *task_id, uint32_t attempt,
                        const char *out_id, size_t k)
{
    streambatch__v1__complete_task_request__init(&r->req);
    streambatch__v1__partition_info__init(&r->out);
    snprintf(r->out_id, sizeof r->out_id, "%s", out_id);
    r->out.id = r->out_id;
    r->out.bytes = 100 * (k + 1);
    r->out.rows = 10 * (k + 1);
    r->outs[0] = &r->out;
    r->req.worker_id = (char *)worker;
    r->req.session = ctl_fixture_session(worker);
    r->req.task_id = (char *)task_id;
    r->req.attempt = attempt;
    r->req.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    r->req.n_outputs = 1;
    r->req.outputs = r->outs;
}

/* A poll carrying `n` reports; the call's code, *out the reply (OK only), err its message. */
static sb_rpc_code poll_with(fixture *f, const char *worker, uint32_t free_slots, uint32_t wait_ms,
                             report *reps, size_t n, Streambatch__V1__PollTasksReply **out,
                             sb_err *err)
{
    Streambatch__V1__CompleteTaskRequest *ptrs[8];
    cr_assert_leq(n, 8);
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &reps[i].req;
    Streambatch__V1__PollTasksRequest req = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    req.worker_id = (char *)worker;
    req.session = ctl_fixture_session(worker);
    req.free_slots = free_slots;
    req.wait_ms = wait_ms;
    req.n_completions = n;
    req.completions = n ? ptrs : NULL;
    ProtobufCMessage *resp = NULL;
    sb_rpc_code code =
        sb_rpc_call_msg(f->ch, SB_RPC_CONTROL_POLL_TASKS, &req.base, 10000, 0, &resp, err);
    *out = (Streambatch__V1__PollTasksReply *)resp;
    return code;
}

static Streambatch__V1__PollTasksReply *poll_ok(fixture *f, const char *worker, uint32_t slots,
                                                uint32_t wait_ms, report *reps, size_t n)
{
    Streambatch__V1__PollTasksReply *r = NULL;
    sb_err err;
    cr_assert_eq(poll_with(f, worker, slots, wait_ms, reps, n, &r, &err), SB_RPC_OK, "%s", err.msg);
    return r;
}

/* The sink parts sorted by id, as "id:bytes:rows" lines. */
static void parts_text(sb_ctl *ctl, char *buf, size_t len)
{
    size_t n;
    sb_storage_output *parts = sb_ctl_sink_parts(ctl, &n);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) /* few parts: selection by id */
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(parts[j].id, parts[i].id) < 0) {
                sb_storage_output t = parts[i];
                parts[i] = parts[j];
                parts[j] = t;
            }
    for (size_t i = 0; i < n; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s:%llu:%llu\n", parts[i].id,
                 (unsigned long long)parts[i].bytes, (unsigned long long)parts[i].rows);
    sb_ctl_parts_free(parts, n);
}

/* Runs the pipeline with one worker that gets all tasks in one poll and reports them either by
 * CompleteTask each (batched = 0) or in one poll (batched = 1); fills the final snapshot and
 * the sink parts as text. */
static void run_once(int batched, sb_ctl_snapshot *snap, char *parts, size_t len)
{
    fixture f;
    setup(&f);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = poll_ok(&f, "w1", NSPLITS, 100, NULL, 0);
    cr_assert_eq(r->n_tasks, NSPLITS);
    cr_expect_eq(r->n_accepted, 0, "a poll without completions acknowledges none");
    report reps[NSPLITS];
    for (size_t i = 0; i < NSPLITS; i++) {
        char id[32];
        snprintf(id, sizeof id, "s0-t%llu-p0", (unsigned long long)r->tasks[i]->task_index);
        report_init(&reps[i], "w1", r->tasks[i]->task_id, r->tasks[i]->attempt, id, i);
    }
    if (batched) {
        Streambatch__V1__PollTasksReply *b = poll_ok(&f, "w1", 1, 0, reps, NSPLITS);
        cr_expect_eq(b->n_tasks, 0);
        cr_assert_eq(b->n_accepted, NSPLITS);
        for (size_t i = 0; i < NSPLITS; i++)
            cr_expect(b->accepted[i], "completion %zu not accepted", i);
        sb_rpc_msg_free(&b->base);
    } else {
        for (size_t i = 0; i < NSPLITS; i++) {
            ProtobufCMessage *resp = NULL;
            sb_err err;
            cr_assert_eq(sb_rpc_call_msg(f.ch, SB_RPC_CONTROL_COMPLETE_TASK, &reps[i].req.base,
                                         5000, 0, &resp, &err),
                         SB_RPC_OK, "%s", err.msg);
            cr_expect(((Streambatch__V1__CompleteTaskReply *)resp)->accepted);
            sb_rpc_msg_free(resp);
        }
    }
    sb_rpc_msg_free(&r->base);
    cr_expect_eq(sb_ctl_wait(f.ctl, 2000), SB_SCHED_SUCCEEDED);
    sb_ctl_snapshot_get(f.ctl, snap);
    parts_text(f.ctl, parts, len);
    teardown(&f);
}

Test(ctl_batch, a_batch_is_accounted_exactly_like_single_completions)
{
    sb_ctl_snapshot one, batch;
    char parts_one[512], parts_batch[512];
    run_once(0, &one, parts_one, sizeof parts_one);
    run_once(1, &batch, parts_batch, sizeof parts_batch);
    cr_expect_eq(batch.state, SB_SCHED_SUCCEEDED);
    cr_expect_str_eq(parts_batch, parts_one);
    cr_expect_str_eq(parts_one, "s0-t0-p0:100:10\ns0-t1-p0:200:20\ns0-t2-p0:300:30\n");
    cr_expect_eq(batch.stats.tasks_run, one.stats.tasks_run);
    cr_expect_eq(batch.stats.tasks_run, NSPLITS);
    cr_expect_eq(batch.stats.tasks_rerun, one.stats.tasks_rerun);
    cr_expect_eq(batch.stats.sink_parts, one.stats.sink_parts);
    cr_expect_eq(batch.stats.sink_rows, one.stats.sink_rows);
    cr_expect_eq(batch.stats.sink_bytes, one.stats.sink_bytes);
    cr_expect_eq(batch.stats.sink_rows, 60);
    cr_assert_eq(batch.nops, one.nops);
    for (size_t i = 0; i < one.nops; i++) {
        cr_expect_eq(batch.ops[i].tasks_done, one.ops[i].tasks_done);
        cr_expect_eq(batch.ops[i].tasks_done, NSPLITS);
        cr_expect_eq(batch.ops[i].failed_attempts, one.ops[i].failed_attempts);
        cr_expect_eq(batch.ops[i].rows_out, one.ops[i].rows_out);
        cr_expect_eq(batch.ops[i].bytes_out, one.ops[i].bytes_out);
    }
}

Test(ctl_batch, duplicates_and_stale_attempts_in_a_batch_are_ignored)
{
    fixture f;
    setup(&f);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = poll_ok(&f, "w1", NSPLITS, 100, NULL, 0);
    cr_assert_eq(r->n_tasks, NSPLITS);
    const Streambatch__V1__Task *t0 = r->tasks[0], *t1 = r->tasks[1], *t2 = r->tasks[2];
    report reps[4];
    report_init(&reps[0], "w1", t0->task_id, t0->attempt, "s0-t0-p0", 0);
    report_init(&reps[1], "w1", t0->task_id, t0->attempt, "s0-t0-p0", 0);     /* duplicate */
    report_init(&reps[2], "w1", t1->task_id, t1->attempt + 7, "s0-t1-p0", 1); /* stale */
    report_init(&reps[3], "w1", "default/c/s0-t99", 0, "s0-t99-p0", 3);       /* no such task */
    Streambatch__V1__PollTasksReply *b = poll_ok(&f, "w1", 1, 0, reps, 4);
    cr_assert_eq(b->n_accepted, 4);
    cr_expect(b->accepted[0]);
    cr_expect_not(b->accepted[1], "a duplicate is not accepted twice");
    cr_expect_not(b->accepted[2], "a stale attempt is refused");
    cr_expect_not(b->accepted[3], "an unknown task is refused");
    /* the refused reports' outputs are released, like CompleteTask's */
    int rel_t1 = 0, rel_t0 = 0;
    for (size_t i = 0; i < b->n_release; i++) {
        rel_t1 += strcmp(b->release[i], "s0-t1-p0") == 0;
        rel_t0 += strcmp(b->release[i], "s0-t0-p0") == 0;
    }
    cr_expect_eq(rel_t1, 1, "the stale attempt's output is released");
    /* a duplicate's outputs are released too, as sb_sched_complete does for any report it
     * does not accept (the same for a duplicate CompleteTask) */
    cr_expect_eq(rel_t0, 1);
    sb_rpc_msg_free(&b->base);
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_eq(s.state, SB_SCHED_RUNNING, "t1 and t2 are still running");
    cr_assert_eq(s.nops, 1);
    cr_expect_eq(s.ops[0].tasks_done, 1);
    cr_expect_eq(s.ops[0].tasks_running, 2);
    /* the real reports of t1 and t2, in a poll that is then held (nothing left to assign): the
     * completions count at once, the reply comes when the wait ends */
    report last[2];
    report_init(&last[0], "w1", t1->task_id, t1->attempt, "s0-t1-p0", 1);
    report_init(&last[1], "w1", t2->task_id, t2->attempt, "s0-t2-p0", 2);
    struct timespec a, z;
    clock_gettime(CLOCK_MONOTONIC, &a);
    b = poll_ok(&f, "w1", 1, 300, last, 2);
    clock_gettime(CLOCK_MONOTONIC, &z);
    double ms = (double)(z.tv_sec - a.tv_sec) * 1e3 + (double)(z.tv_nsec - a.tv_nsec) / 1e6;
    cr_expect_geq(ms, 250, "the poll was held %.0f ms", ms);
    cr_assert_eq(b->n_accepted, 2);
    cr_expect(b->accepted[0]);
    cr_expect(b->accepted[1]);
    cr_expect(b->drain);
    sb_rpc_msg_free(&b->base);
    cr_expect_eq(sb_ctl_wait(f.ctl, 2000), SB_SCHED_SUCCEEDED);
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_eq(s.ops[0].tasks_done, NSPLITS);
    cr_expect_eq(s.stats.tasks_run, NSPLITS, "no attempt was added");
    cr_expect_eq(s.stats.sink_rows, 60);
    sb_rpc_msg_free(&r->base);
    teardown(&f);
}

Test(ctl_batch, a_malformed_batch_is_refused_whole)
{
    fixture f;
    setup(&f);
    do_register(&f, "w1");
    do_register(&f, "w2");
    Streambatch__V1__PollTasksReply *r = poll_ok(&f, "w1", NSPLITS, 100, NULL, 0);
    cr_assert_eq(r->n_tasks, NSPLITS);
    report reps[2];
    report_init(&reps[0], "w1", r->tasks[0]->task_id, r->tasks[0]->attempt, "s0-t0-p0", 0);
    report_init(&reps[1], "w1", r->tasks[1]->task_id, r->tasks[1]->attempt, "s0-t1-p0", 1);
    Streambatch__V1__PollTasksReply *b = NULL;
    sb_err err;
    /* a report without a task id */
    reps[1].req.task_id = "";
    cr_expect_eq(poll_with(&f, "w1", 1, 0, reps, 2, &b, &err), SB_RPC_INVALID_ARGUMENT);
    cr_expect(strstr(err.msg, "completions[1]") && strstr(err.msg, "task_id is missing"), "%s",
              err.msg);
    /* a malformed output id */
    reps[1].req.task_id = r->tasks[1]->task_id;
    snprintf(reps[1].out_id, sizeof reps[1].out_id, "t1-p0");
    cr_expect_eq(poll_with(&f, "w1", 1, 0, reps, 2, &b, &err), SB_RPC_INVALID_ARGUMENT);
    cr_expect(strstr(err.msg, "completions[1]") && strstr(err.msg, "outputs[0]"), "%s", err.msg);
    snprintf(reps[1].out_id, sizeof reps[1].out_id, "s0-t1-p0");
    /* another worker's report in w2's poll */
    cr_expect_eq(poll_with(&f, "w2", 1, 0, reps, 2, &b, &err), SB_RPC_INVALID_ARGUMENT);
    cr_expect(strstr(err.msg, "not the polling worker"), "%s", err.msg);
    /* an unknown status */
    reps[0].req.status = 9;
    cr_expect_eq(poll_with(&f, "w1", 1, 0, reps, 2, &b, &err), SB_RPC_INVALID_ARGUMENT);
    cr_expect(strstr(err.msg, "completions[0]") && strstr(err.msg, "TaskStatus"), "%s", err.msg);
    reps[0].req.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    /* none of the refused batches counted, not even their valid first report */
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_assert_eq(s.nops, 1);
    cr_expect_eq(s.ops[0].tasks_done, 0);
    /* the same reports, well formed, are all accepted */
    b = poll_ok(&f, "w1", 1, 0, reps, 2);
    cr_assert_eq(b->n_accepted, 2);
    cr_expect(b->accepted[0] && b->accepted[1]);
    sb_rpc_msg_free(&b->base);
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_eq(s.ops[0].tasks_done, 2);
    sb_rpc_msg_free(&r->base);
    teardown(&f);
}

/* lib/rpc's decoder, without a server: the limits on a batch and the reply's release ids. */
Test(ctl_batch, decoding_checks_the_batch_size_and_release_ids)
{
    static report reps[SB_RPC_MAX_COMPLETIONS + 1];
    static Streambatch__V1__CompleteTaskRequest *ptrs[SB_RPC_MAX_COMPLETIONS + 1];
    for (size_t i = 0; i <= SB_RPC_MAX_COMPLETIONS; i++) {
        char oid[32]; /* copied by report_init */
        snprintf(oid, sizeof oid, "s0-t%zu-p0", i);
        report_init(&reps[i], "w1", "p/s0-t0", 0, oid, 0);
        ptrs[i] = &reps[i].req;
    }
    Streambatch__V1__PollTasksRequest req = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    req.worker_id = "w1";
    req.session = ctl_fixture_session("w1");
    req.completions = ptrs;
    sb_err err;
    for (int over = 0; over <= 1; over++) {
        req.n_completions = SB_RPC_MAX_COMPLETIONS + (size_t)over;
        size_t len = 0;
        uint8_t *buf = sb_rpc_msg_encode(&req.base, &len, &err);
        cr_assert_not_null(buf);
        ProtobufCMessage *m =
            sb_rpc_msg_decode(&streambatch__v1__poll_tasks_request__descriptor, buf, len, &err);
        if (over) {
            cr_expect_null(m);
            cr_expect(strstr(err.msg, "at most 1024"), "%s", err.msg);
        } else {
            cr_expect_not_null(m, "%s", err.msg);
            if (m != NULL)
                cr_expect_eq(((Streambatch__V1__PollTasksRequest *)m)->n_completions,
                             SB_RPC_MAX_COMPLETIONS);
        }
        sb_rpc_msg_free(m);
        free(buf);
    }
    Streambatch__V1__PollTasksReply rep = STREAMBATCH__V1__POLL_TASKS_REPLY__INIT;
    char *rel[] = {"s0-t1-p0", "bogus"};
    protobuf_c_boolean acc[] = {1, 0};
    rep.n_release = 2;
    rep.release = rel;
    rep.n_accepted = 2;
    rep.accepted = acc;
    size_t len = 0;
    uint8_t *buf = sb_rpc_msg_encode(&rep.base, &len, &err);
    cr_assert_not_null(buf);
    ProtobufCMessage *m =
        sb_rpc_msg_decode(&streambatch__v1__poll_tasks_reply__descriptor, buf, len, &err);
    cr_expect_null(m);
    cr_expect(strstr(err.msg, "release[1]"), "%s", err.msg);
    sb_rpc_msg_free(m);
    free(buf);
}
