/* The Control service over real gRPC on loopback: a fake worker registers, long-polls for tasks,
 * completes them; silence past the heartbeat timeout makes a worker lost. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl_fixture.h"

typedef ctl_fixture fixture;

static void setup(fixture *f, uint32_t hb_timeout_ms)
{
    sb_storage_split splits[2] = {{"in\t0\t100", 100}, {"in\t100\t200", 100}};
    sb_ctl_config cfg = {.pipeline_json = "{\"kind\":\"Pipeline\"}",
                         .splits = splits,
                         .nsplits = 2,
                         .heartbeat_timeout_ms = hb_timeout_ms};
    ctl_fixture_start(f, &cfg);
}

static void teardown(fixture *f)
{
    ctl_fixture_stop(f);
}

static void do_register(fixture *f, const char *id)
{
    Streambatch__V1__RegisterReply *r = ctl_fixture_register(f, id, 2);
    cr_expect_str_eq(r->pipeline_json, "{\"kind\":\"Pipeline\"}");
    cr_expect_gt(r->heartbeat_interval_ms, 0);
    sb_rpc_msg_free(&r->base);
}

static Streambatch__V1__PollTasksReply *do_poll(fixture *f, const char *id, uint32_t wait_ms)
{
    return ctl_fixture_poll(f, id, wait_ms);
}

/* Reports every task of r done by w1, each with one output s0-t<i>-p0 (100 bytes, 10 rows). */
static void complete_all(fixture *f, const Streambatch__V1__PollTasksReply *r)
{
    for (size_t i = 0; i < r->n_tasks; i++) {
        char id[32];
        snprintf(id, sizeof id, "s0-t%zu-p0", i);
        cr_expect(ctl_fixture_complete(f, "w1", r->tasks[i], id));
    }
}

Test(ctl, register_poll_complete_to_success)
{
    fixture f;
    setup(&f, 5000);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 100);
    cr_assert_eq(r->n_tasks, 2);
    cr_expect_str_eq(r->tasks[0]->task_id, "default/c/s0-t0");
    cr_expect_str_eq(r->tasks[0]->source_split, "in\t0\t100");
    cr_expect(r->tasks[0]->writes_sink);
    cr_expect_eq(r->tasks[0]->n_ops, 1);
    cr_expect_str_eq(r->tasks[0]->ops[0]->op, "identity");
    complete_all(&f, r);
    sb_rpc_msg_free(&r->base);
    cr_expect_eq(sb_ctl_wait(f.ctl, 2000), SB_SCHED_SUCCEEDED);
    size_t n;
    sb_storage_output *parts = sb_ctl_sink_parts(f.ctl, &n);
    cr_expect_eq(n, 2);
    sb_ctl_parts_free(parts, n);
    /* the pipeline is over: the poll is held for its wait (a sink commit could still come as a
     * storage job), not answered at once, so that idle slots do not spin until the shutdown */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    r = do_poll(&f, "w1", 300);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    cr_expect_eq(r->n_tasks, 0);
    cr_expect(r->drain);
    cr_expect_geq(ms, 250, "a poll after the end was answered after %.0f ms", ms);
    sb_rpc_msg_free(&r->base);
    teardown(&f);
}

/* A poll held after the end of the pipeline is answered as soon as the workers are shut
 * down, not when its wait ends. */
typedef struct {
    fixture *f;
    double ms;
    int shutdown, ntasks;
} held_poll;

static void *held_poll_main(void *arg)
{
    held_poll *h = arg;
    Streambatch__V1__PollTasksRequest req = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    req.worker_id = "w1";
    req.session = ctl_fixture_session("w1");
    req.free_slots = 1;
    req.wait_ms = 5000;
    ProtobufCMessage *resp = NULL;
    sb_err err;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    h->ntasks = -1;
    if (sb_rpc_call_msg(h->f->ch, SB_RPC_CONTROL_POLL_TASKS, &req.base, 10000, 0, &resp, &err) ==
        SB_RPC_OK) {
        Streambatch__V1__PollTasksReply *r = (Streambatch__V1__PollTasksReply *)resp;
        h->shutdown = r->shutdown;
        h->ntasks = (int)r->n_tasks;
        sb_rpc_msg_free(resp);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    h->ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    return NULL;
}

Test(ctl, a_poll_held_after_the_end_is_answered_by_the_shutdown)
{
    fixture f;
    setup(&f, 5000);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 100);
    cr_assert_eq(r->n_tasks, 2);
    complete_all(&f, r);
    sb_rpc_msg_free(&r->base);
    cr_assert_eq(sb_ctl_wait(f.ctl, 2000), SB_SCHED_SUCCEEDED);
    held_poll h = {.f = &f};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, held_poll_main, &h), 0);
    usleep(300000);
    sb_ctl_shutdown_workers(f.ctl);
    pthread_join(t, NULL);
    cr_expect_eq(h.ntasks, 0);
    cr_expect(h.shutdown, "the held poll says shut down");
    cr_expect_geq(h.ms, 250, "answered after %.0f ms: not held", h.ms);
    cr_expect_lt(h.ms, 3000, "answered after %.0f ms: the shutdown did not answer it", h.ms);
    teardown(&f);
}

Test(ctl, long_poll_is_held_then_answered_empty)
{
    fixture f;
    setup(&f, 5000);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 100);
    cr_assert_eq(r->n_tasks, 2);
    sb_rpc_msg_free(&r->base);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    r = do_poll(&f, "w1", 300); /* no slot work left: held ~300 ms, then empty */
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    cr_expect_eq(r->n_tasks, 0);
    cr_expect_geq(ms, 250, "held %.0f ms", ms);
    cr_expect_lt(ms, 3000, "held %.0f ms", ms);
    sb_rpc_msg_free(&r->base);
    teardown(&f);
}

Test(ctl, silent_worker_is_lost_and_its_tasks_requeued)
{
    fixture f;
    setup(&f, 400);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 100);
    cr_assert_eq(r->n_tasks, 2);
    sb_rpc_msg_free(&r->base);
    usleep(900 * 1000); /* w1 stops talking */
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_eq(s.workers_lost, 1);
    cr_expect_eq(s.ops[0].tasks_queued, 2, "its running tasks went back to the queue");
    do_register(&f, "w2");
    r = do_poll(&f, "w2", 100);
    cr_expect_eq(r->n_tasks, 2);
    cr_expect_eq(r->tasks[0]->attempt, 1);
    sb_rpc_msg_free(&r->base);
    teardown(&f);
}

Test(ctl, malformed_requests_get_invalid_argument)
{
    fixture f;
    setup(&f, 5000);
    uint8_t junk[] = {0xff, 0xff, 0xff, 0x01};
    uint8_t *resp = NULL;
    size_t len;
    sb_err err;
    cr_expect_eq(sb_rpc_unary(f.ch, SB_RPC_CONTROL_REGISTER, junk, sizeof junk, 5000,
                              SB_RPC_WAIT_FOR_READY, &resp, &len, &err),
                 SB_RPC_INVALID_ARGUMENT);
    Streambatch__V1__RegisterRequest req = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
    req.worker_id = "w";
    req.session = ctl_fixture_session("w");
    req.pool = "cpu";
    req.address = "a:1";
    req.slots = 0;
    ProtobufCMessage *rm = NULL;
    cr_expect_neq(sb_rpc_call_msg(f.ch, SB_RPC_CONTROL_REGISTER, &req.base, 5000, 0, &rm, &err),
                  SB_RPC_OK);
    teardown(&f);
}

static Streambatch__V1__HeartbeatReply *do_heartbeat(fixture *f, const char *id)
{
    Streambatch__V1__HeartbeatRequest req = STREAMBATCH__V1__HEARTBEAT_REQUEST__INIT;
    req.worker_id = (char *)id;
    req.session = ctl_fixture_session(id);
    ProtobufCMessage *resp = NULL;
    sb_err err;
    cr_assert_eq(sb_rpc_call_msg(f->ch, SB_RPC_CONTROL_HEARTBEAT, &req.base, 5000, 0, &resp, &err),
                 SB_RPC_OK, "%s", err.msg);
    return (Streambatch__V1__HeartbeatReply *)resp;
}

/* After a controller failover the new leader does not know the workers yet: one that reaches it
 * without a Rebind must be asked to register again, not told to shut down (only a worker this
 * controller declared lost is told that). */
Test(ctl, unknown_worker_is_asked_to_reregister_lost_one_to_shut_down)
{
    fixture f;
    setup(&f, 400);
    Streambatch__V1__HeartbeatReply *h = do_heartbeat(&f, "stranger");
    cr_expect_eq(h->reregister, 1);
    cr_expect_eq(h->shutdown, 0);
    sb_rpc_msg_free(&h->base);
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "stranger", 0);
    cr_expect_eq(r->n_tasks, 0, "no tasks before it registers");
    cr_expect_eq(r->shutdown, 0);
    sb_rpc_msg_free(&r->base);
    do_register(&f, "w1");
    usleep(900 * 1000); /* w1 falls silent and is declared lost */
    h = do_heartbeat(&f, "w1");
    cr_expect_eq(h->shutdown, 1);
    cr_expect_eq(h->reregister, 0);
    sb_rpc_msg_free(&h->base);
    teardown(&f);
}

/* Workers are looked up by id on every call (an index, not a scan): with hundreds of them, each
 * is still found, a re-registration keeps one entry, and lost and unknown ids answer as before. */
Test(ctl, many_workers_are_each_found_by_id)
{
    fixture f;
    setup(&f, 5000);
    char id[32];
    for (int i = 0; i < 300; i++) {
        snprintf(id, sizeof id, "w%d", i);
        do_register(&f, id);
    }
    for (int i = 0; i < 300; i += 7) {
        snprintf(id, sizeof id, "w%d", i);
        Streambatch__V1__HeartbeatReply *h = do_heartbeat(&f, id);
        cr_expect_eq(h->reregister, 0, "%s", id);
        cr_expect_eq(h->shutdown, 0, "%s", id);
        sb_rpc_msg_free(&h->base);
    }
    do_register(&f, "w7"); /* again: the same entry */
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_eq(s.npools, 1);
    /* workers that register once the plan is made are counted under their pool too (they were
     * under pool "": streambatch_workers{pool=""} on `run --metrics-addr`) */
    cr_expect_str_eq(s.pools[0].pool, "cpu");
    cr_expect_eq(s.pools[0].workers, 300);
    cr_expect_eq(s.workers_registered, 301);
    sb_ctl_worker_exited(f.ctl, "w150", "test");
    Streambatch__V1__HeartbeatReply *h = do_heartbeat(&f, "w150");
    cr_expect_eq(h->shutdown, 1);
    sb_rpc_msg_free(&h->base);
    h = do_heartbeat(&f, "w300");
    cr_expect_eq(h->reregister, 1);
    sb_rpc_msg_free(&h->base);
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w299", 100);
    cr_expect_eq(r->n_tasks, 2);
    sb_rpc_msg_free(&r->base);
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_eq(s.workers_lost, 1);
    cr_expect_eq(s.pools[0].workers, 299);
    sb_sched_memory m;
    cr_expect_eq(sb_ctl_memory(f.ctl, &m), 0);
    cr_expect_eq(m.tasks, 2);
    cr_expect_gt(m.total_bytes, m.task_bytes);
    teardown(&f);
}
