/* Storage jobs through the Control service over real gRPC (controller/ctl/ctl.h with
 * storage_on_workers): a fake worker gets PLAN then PREPARE through PollTasks, reports the plan
 * in pieces, and only then gets tasks, in plan order; a lost worker's job goes to another one;
 * a failed job fails the pipeline with the worker named; COMMIT carries the sink parts. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl_fixture.h"

typedef ctl_fixture fixture;

static void setup(fixture *f, uint32_t hb_timeout_ms, const sb_sched_resume *resume)
{
    sb_ctl_config cfg = {.pipeline_json = "{}",
                         .storage_on_workers = 1,
                         .resume = resume,
                         .heartbeat_timeout_ms = hb_timeout_ms};
    ctl_fixture_start(f, &cfg);
}

static void teardown(fixture *f)
{
    ctl_fixture_stop(f);
}

static void do_register(fixture *f, const char *id)
{
    sb_rpc_msg_free(&ctl_fixture_register(f, id, 2)->base);
}

static Streambatch__V1__PollTasksReply *do_poll(fixture *f, const char *id, uint32_t wait_ms)
{
    return ctl_fixture_poll(f, id, wait_ms);
}

/* Reports a storage job: OK with an optional plan piece, or ERROR with msg. Returns accepted. */
static int report(fixture *f, const char *worker, const Streambatch__V1__StorageJob *job,
                  const char *errmsg, uint64_t offset, char **splits, size_t n, int more)
{
    Streambatch__V1__CompleteTaskRequest c = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    Streambatch__V1__StorageResult res = STREAMBATCH__V1__STORAGE_RESULT__INIT;
    uint64_t bytes[8];
    c.worker_id = (char *)worker;
    c.session = ctl_fixture_session(worker);
    c.task_id = job->job_id;
    c.attempt = job->attempt;
    c.status = errmsg ? STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR
                      : STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    c.message = (char *)(errmsg ? errmsg : "");
    if (job->kind == STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_PLAN && !errmsg) {
        for (size_t i = 0; i < n; i++)
            bytes[i] = 100 + offset + i;
        res.offset = offset;
        res.n_splits = n;
        res.splits = splits;
        res.n_split_bytes = n;
        res.split_bytes = bytes;
        res.more = more;
        c.storage = &res;
    }
    return ctl_fixture_send_complete(f, &c);
}

static void plan_and_prepare(fixture *f, const char *w)
{
    Streambatch__V1__PollTasksReply *r = do_poll(f, w, 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert_eq(r->storage_job->kind, STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_PLAN);
    char *a[] = {"in\t0\t100"}, *b[] = {"in\t100\t200"};
    cr_assert(report(f, w, r->storage_job, NULL, 0, a, 1, 1));
    cr_assert(report(f, w, r->storage_job, NULL, 0, a, 1, 1), "a re-sent piece is accepted");
    cr_assert(report(f, w, r->storage_job, NULL, 1, b, 1, 0));
    sb_rpc_msg_free(&r->base);
    r = do_poll(f, w, 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert_eq(r->storage_job->kind, STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_PREPARE);
    cr_assert(report(f, w, r->storage_job, NULL, 0, NULL, 0, 0));
    sb_rpc_msg_free(&r->base);
}

Test(ctl_storage, plan_and_prepare_run_on_a_worker_before_any_task)
{
    fixture f;
    setup(&f, 5000, NULL);
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect(s.planning);
    cr_expect_eq(s.state, SB_SCHED_RUNNING);
    do_register(&f, "w1");
    plan_and_prepare(&f, "w1");
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_not(s.planning);
    cr_expect_eq(s.nsplits, 2);
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 2000);
    cr_assert_null(r->storage_job);
    cr_assert_eq(r->n_tasks, 2, "the worker registered while planning gets tasks");
    cr_expect_str_eq(r->tasks[0]->source_split, "in\t0\t100");
    cr_expect_str_eq(r->tasks[1]->source_split, "in\t100\t200");
    sb_rpc_msg_free(&r->base);
    teardown(&f);
}

Test(ctl_storage, a_lost_workers_job_goes_to_another_worker)
{
    fixture f;
    setup(&f, 300, NULL);
    do_register(&f, "w1");
    do_register(&f, "w2");
    Streambatch__V1__PollTasksReply *r1 = do_poll(&f, "w1", 2000);
    cr_assert_not_null(r1->storage_job);
    cr_expect_eq(r1->storage_job->attempt, 0);
    /* w1 falls silent; w2 keeps polling and gets the job once w1 is declared lost */
    Streambatch__V1__PollTasksReply *r2 = NULL;
    for (int i = 0; i < 50 && (r2 == NULL || r2->storage_job == NULL); i++) {
        if (r2 != NULL)
            sb_rpc_msg_free(&r2->base);
        r2 = do_poll(&f, "w2", 100);
    }
    cr_assert_not_null(r2->storage_job);
    cr_expect_eq(r2->storage_job->attempt, 1);
    cr_expect_str_eq(r2->storage_job->job_id, r1->storage_job->job_id);
    char *a[] = {"in\t0\t100"};
    cr_expect_not(report(&f, "w1", r1->storage_job, NULL, 0, a, 1, 0), "the lost one is refused");
    cr_assert(report(&f, "w2", r2->storage_job, NULL, 0, a, 1, 0));
    sb_rpc_msg_free(&r1->base);
    sb_rpc_msg_free(&r2->base);
    r2 = do_poll(&f, "w2", 2000);
    cr_assert_not_null(r2->storage_job);
    cr_expect_eq(r2->storage_job->kind,
                 STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_PREPARE);
    sb_rpc_msg_free(&r2->base);
    teardown(&f);
}

Test(ctl_storage, a_plan_error_fails_the_pipeline_naming_the_worker)
{
    fixture f;
    setup(&f, 5000, NULL);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert(report(&f, "w1", r->storage_job,
                     "spec.source: source uri \"file:///in\": No such file or directory", 0, NULL,
                     0, 0));
    sb_rpc_msg_free(&r->base);
    cr_assert_eq(sb_ctl_wait(f.ctl, 2000), SB_SCHED_FAILED);
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_str_eq(s.failure, "planning the source on worker w1: spec.source: source uri "
                                "\"file:///in\": No such file or directory");
    cr_expect(s.storage_failed);
    cr_expect_eq(s.stats.tasks_run, 0);
    teardown(&f);
}

/* A worker whose report quotes a presigned URL (an older or foreign worker build that did not
 * redact it): the pipeline's failure, which becomes its status, holds no signature. */
Test(ctl_storage, a_plan_error_quoting_a_presigned_url_is_redacted)
{
    fixture f;
    setup(&f, 5000, NULL);
    do_register(&f, "w1");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert(report(&f, "w1", r->storage_job,
                     "GET https://u:SECRETPASS@h/b/o?X-Amz-Signature=SECRETSIG: HTTP 403", 0, NULL,
                     0, 0));
    sb_rpc_msg_free(&r->base);
    cr_assert_eq(sb_ctl_wait(f.ctl, 2000), SB_SCHED_FAILED);
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect(strstr(s.failure, "SECRET") == NULL, "%s", s.failure);
    cr_expect(strstr(s.failure, "planning the source on worker w1: GET https://") != NULL &&
                  strstr(s.failure, "h/b/o") != NULL,
              "%s", s.failure);
    teardown(&f);
}

Test(ctl_storage, commit_carries_the_parts_and_its_error_is_wrapped)
{
    fixture f;
    setup(&f, 5000, NULL);
    do_register(&f, "w1");
    plan_and_prepare(&f, "w1");
    sb_storage_output parts[2] = {{"s0-t0-p0", 10, 1, 7, NULL}, {"s0-t1-p0", 20, 2, 8, NULL}};
    sb_err err;
    cr_assert_eq(sb_ctl_storage_start(f.ctl, SB_STORAGE_COMMIT, parts, 2, &err), 0, "%s", err.msg);
    cr_expect_eq(sb_ctl_storage_start(f.ctl, SB_STORAGE_ABORT, NULL, 0, &err), -1,
                 "one job at a time");
    char msg[512];
    cr_expect_eq(sb_ctl_storage_poll(f.ctl, msg, sizeof msg), 0);
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 2000);
    cr_assert_not_null(r->storage_job, "the queued job goes before tasks");
    cr_assert_eq(r->storage_job->kind, STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_COMMIT);
    cr_assert_eq(r->storage_job->n_parts, 2);
    cr_expect_str_eq(r->storage_job->parts[1]->id, "s0-t1-p0");
    cr_expect_eq(r->storage_job->parts[1]->rows, 2);
    cr_expect_eq(r->storage_job->parts[1]->crc32c, 8);
    cr_assert(report(&f, "w1", r->storage_job, "part-s0-t1-p0.txt: missing", 0, NULL, 0, 0));
    sb_rpc_msg_free(&r->base);
    cr_expect_eq(sb_ctl_storage_poll(f.ctl, msg, sizeof msg), -1);
    cr_expect_str_eq(msg, "committing the sink on worker w1: part-s0-t1-p0.txt: missing");
    /* ABORT through the blocking helper, answered by a polling thread-less worker: time out */
    cr_expect_eq(sb_ctl_storage_run(f.ctl, SB_STORAGE_ABORT, NULL, 0, 100, NULL, msg, sizeof msg),
                 0);
    cr_expect(strstr(msg, "aborting the sink: no worker took the job") != NULL, "%s", msg);
    teardown(&f);
}

Test(ctl_storage, the_checkpoint_while_planning_is_the_resumed_one)
{
    fixture f;
    sb_storage_output parts[1] = {{"s0-t0-p0", 10, 1, 7, NULL}};
    sb_sched_resume res = {.epoch = 1, .committed_splits = "0", .parts = parts, .nparts = 1};
    setup(&f, 5000, &res);
    char *ranges = NULL;
    sb_storage_output *got = NULL;
    size_t n = 0;
    sb_err err;
    cr_assert_eq(sb_ctl_checkpoint(f.ctl, &ranges, &got, &n, &err), 0, "%s", err.msg);
    cr_expect_str_eq(ranges, "0");
    cr_assert_eq(n, 1);
    cr_expect_str_eq(got[0].id, "s0-t0-p0");
    free(ranges);
    sb_sched_parts_free(got, n);
    /* after the plan, the scheduler starts from that resume: split 0 is done, split 1 runs */
    do_register(&f, "w1");
    plan_and_prepare(&f, "w1");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, "w1", 2000);
    cr_assert_eq(r->n_tasks, 1);
    cr_expect_str_eq(r->tasks[0]->source_split, "in\t100\t200");
    sb_rpc_msg_free(&r->base);
    teardown(&f);
}
