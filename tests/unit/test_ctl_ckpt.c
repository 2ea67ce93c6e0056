/* The checkpoint log's storage jobs through the Control service over real gRPC (ctl.h
 * ckpt_load, sb_ctl_ckpt_start) and the operator's writer on top of them
 * (controller/operator/opckpt.h): the log is read by a worker before planning (in pieces, a
 * file cut across pieces, a retried piece harmless), a log that cannot be read leaves planning
 * to the caller without failing the pipeline, and the writer's files go out as one CKPT_PUT
 * job per write, the summary moving only once the worker reported it done; what the worker was
 * told to write reads back as the committed work; a failed write makes the next one a new
 * base; the status keeps a summary of a few hundred bytes at 200,000 parts; a split counts as
 * committed (sb_opckpt_committed, the status's count) only once a write holding it is durable;
 * a write too large for one job is refused by name. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "controller/operator/opckpt.h"
#include "ctl_fixture.h"

typedef ctl_fixture fixture;

static void setup(fixture *f, int ckpt_load, const sb_sched_resume *resume)
{
    sb_ctl_config cfg = {.pipeline_json = "{}",
                         .storage_on_workers = 1,
                         .ckpt_load = ckpt_load,
                         .resume = resume,
                         .heartbeat_timeout_ms = 5000};
    ctl_fixture_start(f, &cfg);
    sb_rpc_msg_free(&ctl_fixture_register(f, "w1", 2)->base);
}

static Streambatch__V1__PollTasksReply *do_poll(fixture *f, uint32_t wait_ms)
{
    return ctl_fixture_poll(f, "w1", wait_ms);
}

/* Reports job: ERROR with errmsg, or OK with res (may be NULL). Returns accepted. */
static int report(fixture *f, const Streambatch__V1__StorageJob *job, const char *errmsg,
                  Streambatch__V1__StorageResult *res)
{
    Streambatch__V1__CompleteTaskRequest c = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    c.worker_id = "w1";
    c.session = ctl_fixture_session("w1");
    c.task_id = job->job_id;
    c.attempt = job->attempt;
    c.status = errmsg ? STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR
                      : STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    c.message = (char *)(errmsg ? errmsg : "");
    c.storage = res;
    return ctl_fixture_send_complete(f, &c);
}

/* One LOAD result piece of chunks (name, text) pairs. */
static int load_piece(fixture *f, const Streambatch__V1__StorageJob *job, uint64_t offset,
                      const char *const *nt, size_t nchunks, int more)
{
    Streambatch__V1__CheckpointFile cf[4], *cp[4];
    for (size_t i = 0; i < nchunks; i++) {
        streambatch__v1__checkpoint_file__init(&cf[i]);
        cf[i].name = (char *)nt[2 * i];
        cf[i].data.data = (uint8_t *)nt[2 * i + 1];
        cf[i].data.len = strlen(nt[2 * i + 1]);
        cp[i] = &cf[i];
    }
    Streambatch__V1__StorageResult res = STREAMBATCH__V1__STORAGE_RESULT__INIT;
    res.offset = offset;
    res.n_files = nchunks;
    res.files = cp;
    res.more = more;
    return report(f, job, NULL, &res);
}

/* PLAN (two splits) and PREPARE, answered. */
static void plan_and_prepare(fixture *f)
{
    Streambatch__V1__PollTasksReply *r = do_poll(f, 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert_eq(r->storage_job->kind, STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_PLAN);
    char *splits[] = {"in\t0\t100", "in\t100\t200"};
    uint64_t bytes[] = {100, 100};
    Streambatch__V1__StorageResult res = STREAMBATCH__V1__STORAGE_RESULT__INIT;
    res.n_splits = 2;
    res.splits = splits;
    res.n_split_bytes = 2;
    res.split_bytes = bytes;
    cr_assert(report(f, r->storage_job, NULL, &res));
    sb_rpc_msg_free(&r->base);
    r = do_poll(f, 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert_eq(r->storage_job->kind, STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_PREPARE);
    cr_assert(report(f, r->storage_job, NULL, NULL));
    sb_rpc_msg_free(&r->base);
}

Test(ctl_ckpt, the_log_is_read_in_pieces_before_planning)
{
    fixture f;
    setup(&f, 1, NULL);
    Streambatch__V1__PollTasksReply *r = do_poll(&f, 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert_eq(r->storage_job->kind,
                 STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_CKPT_LOAD);
    const char *p0[] = {"base-00000001.sbck", "hello "},
               *p1[] = {"base-00000001.sbck", "world", "seg-00000001-00000001.sbck", "s1"};
    cr_assert(load_piece(&f, r->storage_job, 0, p0, 1, 1));
    cr_assert(load_piece(&f, r->storage_job, 0, p0, 1, 1), "a retried piece is accepted");
    sb_storage_files fs;
    char msg[512] = "";
    cr_expect_eq(sb_ctl_ckpt_loaded(f.ctl, &fs, msg, sizeof msg), 0, "not read yet");
    cr_assert(load_piece(&f, r->storage_job, 1, p1, 2, 0));
    sb_rpc_msg_free(&r->base);
    cr_assert_eq(sb_ctl_ckpt_loaded(f.ctl, &fs, msg, sizeof msg), 1);
    cr_assert_eq(fs.n, 2, "the retried piece was not appended twice");
    cr_expect_str_eq(fs.v[0].name, "base-00000001.sbck");
    cr_expect_str_eq(fs.v[0].data, "hello world", "a file cut across pieces is joined");
    cr_expect_eq(fs.v[0].len, 11);
    cr_expect_str_eq(fs.v[1].data, "s1");
    sb_storage_files_free(&fs);
    cr_expect_eq(sb_ctl_ckpt_loaded(f.ctl, &fs, msg, sizeof msg), 0, "answered once");
    /* planning waits for the caller's resume; then the committed split is not run again */
    r = do_poll(&f, 200);
    cr_expect_null(r->storage_job, "no PLAN before sb_ctl_plan_continue");
    sb_rpc_msg_free(&r->base);
    sb_storage_output parts[1] = {{"s0-t0-p0", 10, 1, 7, NULL}};
    sb_sched_resume res = {.epoch = 2, .committed_splits = "0", .parts = parts, .nparts = 1};
    sb_err err;
    cr_assert_eq(sb_ctl_plan_continue(f.ctl, &res, NULL, &err), 0, "%s", err.msg);
    cr_expect_eq(sb_ctl_plan_continue(f.ctl, &res, NULL, &err), -1, "only once");
    plan_and_prepare(&f);
    r = do_poll(&f, 2000);
    cr_assert_eq(r->n_tasks, 1, "only the split the log did not hold runs");
    cr_expect_str_eq(r->tasks[0]->source_split, "in\t100\t200");
    sb_rpc_msg_free(&r->base);
    ctl_fixture_stop(&f);
}

Test(ctl_ckpt, a_log_that_cannot_be_read_does_not_fail_the_pipeline)
{
    fixture f;
    setup(&f, 1, NULL);
    Streambatch__V1__PollTasksReply *r = do_poll(&f, 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert(report(&f, r->storage_job, "s3://b/out/_streambatch/checkpoint: AccessDenied", NULL));
    sb_rpc_msg_free(&r->base);
    sb_storage_files fs;
    char msg[512] = "";
    cr_assert_eq(sb_ctl_ckpt_loaded(f.ctl, &fs, msg, sizeof msg), -1);
    cr_expect(strstr(msg, "reading the checkpoint log on worker w1: ") != NULL, "%s", msg);
    cr_expect(strstr(msg, "AccessDenied") != NULL, "%s", msg);
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(f.ctl, &s);
    cr_expect_eq(s.state, SB_SCHED_RUNNING, "%s", s.failure);
    sb_err err;
    cr_assert_eq(sb_ctl_plan_continue(f.ctl, NULL, NULL, &err), 0, "%s", err.msg);
    plan_and_prepare(&f);
    r = do_poll(&f, 2000);
    cr_expect_eq(r->n_tasks, 2, "everything runs");
    sb_rpc_msg_free(&r->base);
    ctl_fixture_stop(&f);
}

/* The CKPT_PUT job a worker gets next: its files into *fs (copied). */
static Streambatch__V1__PollTasksReply *next_put(fixture *f, sb_storage_files *fs, int *prune)
{
    Streambatch__V1__PollTasksReply *r = do_poll(f, 2000);
    cr_assert_not_null(r->storage_job);
    cr_assert_eq(r->storage_job->kind,
                 STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_CKPT_PUT);
    memset(fs, 0, sizeof *fs);
    sb_err err;
    for (size_t i = 0; i < r->storage_job->n_files; i++)
        cr_assert_eq(sb_storage_files_add(fs, r->storage_job->files[i]->name,
                                          (const char *)r->storage_job->files[i]->data.data,
                                          r->storage_job->files[i]->data.len, &err),
                     0);
    *prune = r->storage_job->prune;
    return r;
}

/* The service resumed with split 0 (part s0-t0-p0) committed at epoch 3, and a writer k of
 * its log past generation gen. */
static void start_resumed(fixture *f, sb_opckpt *k, uint32_t gen)
{
    static sb_storage_output parts[1] = {{"s0-t0-p0", 10, 1, 7, NULL}};
    static sb_sched_resume res = {.epoch = 3, .committed_splits = "0", .parts = parts, .nparts = 1};
    setup(f, 0, &res);
    sb_err err;
    cr_assert_eq(sb_opckpt_init(k, "s3://b/out/_streambatch/checkpoint", NULL, 3, NULL, gen, &err),
                 0, "%s", err.msg);
}

Test(ctl_ckpt, the_operators_writes_go_to_a_worker_and_read_back)
{
    fixture f;
    sb_opckpt k;
    sb_err err;
    start_resumed(&f, &k, 4);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 1000, 1), 0, "nothing planned: nothing to write");
    cr_expect_eq(sb_ctl_ckpt_start(f.ctl, SB_STORAGE_CKPT_PUT, NULL, 0, 0, &err), -1,
                 "no write while planning");
    plan_and_prepare(&f);
    cr_expect_null(sb_opckpt_status_json(&k), "no summary before a durable write");
    cr_assert_eq(sb_opckpt_tick(&k, f.ctl, 2000, 1), 1, "the resumed split is written");
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 2100, 1), 1, "one write in flight at a time");
    sb_storage_files fs;
    int prune = 0;
    Streambatch__V1__PollTasksReply *r = next_put(&f, &fs, &prune);
    cr_assert_eq(fs.n, 1);
    cr_expect_str_eq(fs.v[0].name, "base-00000005.sbck", "past the generation announced");
    cr_expect(prune, "a new base prunes the log's other files");
    cr_expect(strstr(fs.v[0].data, "\ns0-t0-p0:1:10:7\n") != NULL, "%s", fs.v[0].data);
    cr_expect_null(sb_opckpt_status_json(&k), "not durable before the worker reported");
    cr_assert(report(&f, r->storage_job, NULL, NULL));
    sb_rpc_msg_free(&r->base);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 2200, 0), 0, "done; the interval not passed yet");
    cJSON *j = sb_opckpt_status_json(&k);
    cr_assert_not_null(j);
    sb_ckptlog_summary sum;
    cr_assert_eq(sb_ckptlog_summary_parse(j, "status.checkpoint", &sum, &err), 0, "%s", err.msg);
    cr_expect_eq(sum.generation, 5);
    cr_expect_eq(sum.parts, 1);
    cr_expect_eq(sum.splits, 1);
    cr_expect_str_eq(sum.location, "s3://b/out/_streambatch/checkpoint");
    cr_expect_not_null(cJSON_GetObjectItemCaseSensitive(j, "lastWrite"));
    cJSON_Delete(j);
    /* what the worker was told to write reads back as the committed work */
    sb_ckpt cp;
    sb_ckptlog_summary found;
    cr_assert_eq(sb_opckpt_resume(&sum, &fs, &cp, &found, &err), 0, "%s", err.msg);
    cr_expect_str_eq(cp.committed_splits, "0");
    cr_assert_eq(cp.nparts, 1);
    cr_expect_str_eq(cp.parts[0].id, "s0-t0-p0");
    cr_expect_eq(cp.parts[0].crc32c, 7);
    sb_ckpt_free(&cp);
    /* a torn file is refused, naming the location */
    fs.v[0].len -= 5;
    cr_expect_eq(sb_opckpt_resume(&sum, &fs, &cp, NULL, &err), -1);
    cr_expect(strstr(err.msg, "checkpoint s3://b/out/_streambatch/checkpoint/base-00000005.sbck") !=
                  NULL,
              "%s", err.msg);
    sb_storage_files_free(&fs);
    /* a write the worker failed: not durable, and the next write is a whole new base */
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 2300, 1), 0, "nothing new: nothing written");
    sb_ckptlog_forget(&k.w); /* as after a failure: force a rewrite */
    cr_assert_eq(sb_opckpt_tick(&k, f.ctl, 2400, 1), 1);
    r = next_put(&f, &fs, &prune);
    cr_expect_str_eq(fs.v[0].name, "base-00000006.sbck");
    cr_assert(report(&f, r->storage_job, "disk full", NULL));
    sb_rpc_msg_free(&r->base);
    sb_storage_files_free(&fs);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 2500, -1), 0);
    cr_expect_eq(k.failed, 1);
    j = sb_opckpt_status_json(&k);
    cr_assert_eq(sb_ckptlog_summary_parse(j, "s", &sum, &err), 0, "%s", err.msg);
    cr_expect_eq(sum.generation, 5, "the summary stays at the last durable write");
    cJSON_Delete(j);
    cr_assert_eq(sb_opckpt_tick(&k, f.ctl, 4000, 0), 1);
    r = next_put(&f, &fs, &prune);
    cr_expect_str_eq(fs.v[0].name, "base-00000007.sbck", "rewritten whole after the failure");
    cr_expect(prune);
    sb_storage_files_free(&fs);
    sb_rpc_msg_free(&r->base);
    cr_expect_eq(k.jobs, 1);
    cr_expect_eq(k.parts, 1);
    sb_opckpt_free(&k);
    ctl_fixture_stop(&f);
}

/* Reports task t done by w1 with one sink part s0-t<i>-p0. */
static void complete_task(fixture *f, const Streambatch__V1__Task *t, size_t i)
{
    char id[32];
    snprintf(id, sizeof id, "s0-t%zu-p0", i);
    cr_assert(ctl_fixture_complete(f, "w1", t, id));
}

/* What the status counts committed now: the log's durable count (none carried). */
static size_t status_committed(fixture *f, const sb_opckpt *k, size_t *finished)
{
    sb_err err;
    cr_assert_eq(sb_opckpt_finished(f->ctl, finished, &err), 0, "%s", err.msg);
    return sb_opckpt_committed(k, 0, *finished);
}

/* Issue 38: a new leader re-ran the splits finished after the last durable write, which the
 * status had already counted committed (2,110 counted, 2,050 in the log). */
Test(ctl_ckpt, a_split_counts_as_committed_only_once_its_write_is_durable)
{
    fixture f;
    setup(&f, 0, NULL);
    sb_opckpt k;
    sb_err err;
    cr_assert_eq(sb_opckpt_init(&k, "s3://b/out/_streambatch/checkpoint", NULL, 1, NULL, 0, &err),
                 0, "%s", err.msg);
    plan_and_prepare(&f);
    Streambatch__V1__PollTasksReply *r = do_poll(&f, 2000);
    cr_assert_eq(r->n_tasks, 2);
    size_t fin = 0;
    complete_task(&f, r->tasks[0], 0);
    cr_expect_eq(status_committed(&f, &k, &fin), 0, "finished, not in the log yet");
    cr_expect_eq(fin, 1);
    cr_assert_eq(sb_opckpt_tick(&k, f.ctl, 1000, 1), 1, "split 0 is written");
    cr_expect_eq(status_committed(&f, &k, &fin), 0, "its write is in flight");
    complete_task(&f, r->tasks[1], 1);
    cr_expect_eq(status_committed(&f, &k, &fin), 0, "a second one finished meanwhile");
    cr_expect_eq(fin, 2);
    sb_storage_files fs;
    int prune = 0;
    Streambatch__V1__PollTasksReply *put = next_put(&f, &fs, &prune);
    sb_storage_files_free(&fs);
    cr_expect_eq(status_committed(&f, &k, &fin), 0, "a worker took the write, not done yet");
    cr_assert(report(&f, put->storage_job, NULL, NULL));
    sb_rpc_msg_free(&put->base);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 1100, 0), 0, "done");
    cr_expect_eq(status_committed(&f, &k, &fin), 1, "the write held split 0 only");
    /* a failed write counts nothing more */
    cr_assert_eq(sb_opckpt_tick(&k, f.ctl, 2200, 0), 1, "split 1 is written");
    put = next_put(&f, &fs, &prune);
    sb_storage_files_free(&fs);
    cr_assert(report(&f, put->storage_job, "disk full", NULL));
    sb_rpc_msg_free(&put->base);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 2300, -1), 0);
    cr_expect_eq(status_committed(&f, &k, &fin), 1, "split 1's write failed");
    cr_assert_eq(sb_opckpt_tick(&k, f.ctl, 3400, 0), 1, "rewritten as a new base");
    put = next_put(&f, &fs, &prune);
    sb_storage_files_free(&fs);
    cr_assert(report(&f, put->storage_job, NULL, NULL));
    sb_rpc_msg_free(&put->base);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 3500, -1), 0);
    cr_expect_eq(status_committed(&f, &k, &fin), 2);
    /* before this writer's first durable write: what was read from the log; without a log:
     * what the scheduler finished */
    sb_opckpt fresh;
    cr_assert_eq(sb_opckpt_init(&fresh, "s3://b/x", NULL, 2, NULL, 0, &err), 0, "%s", err.msg);
    cr_expect_eq(sb_opckpt_committed(&fresh, 1, 2), 1);
    cr_expect_eq(sb_opckpt_committed(&fresh, 3, 2), 2, "never more than the scheduler holds");
    cr_expect_eq(sb_opckpt_committed(NULL, 0, 2), 2);
    sb_opckpt_free(&fresh);
    sb_rpc_msg_free(&r->base);
    sb_opckpt_free(&k);
    ctl_fixture_stop(&f);
}

/* A write past what one storage job can carry to a worker (the gRPC message limit; a base of
 * ~500,000 parts at the default) is refused by name, never sent, and not retried. */
Test(ctl_ckpt, a_write_too_large_for_a_job_is_refused_clearly)
{
    fixture f;
    sb_opckpt k;
    start_resumed(&f, &k, 0);
    cr_expect_eq(k.max_job_bytes, SB_OPCKPT_MAX_JOB_BYTES);
    k.max_job_bytes = 64;
    plan_and_prepare(&f);
    char m[600] = "";
    cr_expect_eq(sb_opckpt_refused(&k, m, sizeof m), 0);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 1000, 1), 0, "not queued");
    cr_assert_eq(sb_opckpt_refused(&k, m, sizeof m), 1);
    cr_expect(strstr(m, "(1 parts, ") != NULL && strstr(m, "past the 64 bytes") != NULL &&
                  strstr(m, "failover or resume runs the splits committed since again") != NULL,
              "%s", m);
    cr_expect_eq(sb_opckpt_tick(&k, f.ctl, 5000, 1), 0, "not tried again");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, 200);
    cr_expect_null(r->storage_job, "no job went to the worker");
    sb_rpc_msg_free(&r->base);
    cr_expect_null(sb_opckpt_status_json(&k), "nothing durable");
    size_t fin = 0;
    cr_expect_eq(status_committed(&f, &k, &fin), 0);
    cr_expect_eq(fin, 1);
    sb_opckpt_free(&k);
    ctl_fixture_stop(&f);
}

/* Issue 38: a base past what one job carries (a 1,000,000-part base is ~40 MiB; a job ~15 MiB)
 * was refused, so a failover lost the checkpoint. Now the base is chunked and its files go as
 * several jobs, one after the other, the list of chunks last with the prune; the status moves
 * only when the last is durable, and the files read back. */
Test(ctl_ckpt, a_base_too_large_for_one_job_goes_as_chunks_in_several_jobs)
{
    fixture f;
    sb_opckpt k;
    sb_err err;
    start_resumed(&f, &k, 0);
    k.max_job_bytes = 260;
    k.w.chunk_bytes = 100;
    plan_and_prepare(&f);
    cr_assert_eq(sb_opckpt_tick(&k, f.ctl, 1000, 1), 1, "queued");
    sb_storage_files all = {0};
    int prune = 0, jobs = 0;
    for (;;) {
        sb_storage_files fs;
        Streambatch__V1__PollTasksReply *r = next_put(&f, &fs, &prune);
        jobs++;
        size_t bytes = 0;
        for (size_t i = 0; i < fs.n; i++) {
            bytes += fs.v[i].len + strlen(fs.v[i].name);
            cr_assert_eq(sb_storage_files_add(&all, fs.v[i].name, fs.v[i].data, fs.v[i].len, &err),
                         0);
        }
        cr_expect_leq(bytes, 260, "job %d carries %zu bytes", jobs, bytes);
        int last = fs.n > 0 && strcmp(fs.v[fs.n - 1].name, "base-00000001.sbck") == 0;
        cr_expect_eq(prune, last, "only the last job prunes");
        cr_expect_null(sb_opckpt_status_json(&k), "nothing durable before the last job");
        sb_storage_files_free(&fs);
        cr_assert(report(&f, r->storage_job, NULL, NULL));
        sb_rpc_msg_free(&r->base);
        int t = sb_opckpt_tick(&k, f.ctl, 1000 + (uint64_t)jobs, 0);
        if (last) {
            cr_expect_eq(t, 0, "the write is done");
            break;
        }
        cr_assert_eq(t, 1, "the next job of the write went out");
        cr_assert_lt(jobs, 20);
    }
    cr_expect_geq(jobs, 2, "%d jobs", jobs);
    cr_expect_geq(all.n, 3, "a list and its chunks: %zu files", all.n);
    cr_expect_str_eq(all.v[0].name, "base-00000001-00000001.sbck", "chunks first");
    cJSON *j = sb_opckpt_status_json(&k);
    cr_assert_not_null(j);
    sb_ckptlog_summary sum;
    cr_assert_eq(sb_ckptlog_summary_parse(j, "status.checkpoint", &sum, &err), 0, "%s", err.msg);
    cJSON_Delete(j);
    sb_ckpt cp;
    cr_assert_eq(sb_opckpt_resume(&sum, &all, &cp, NULL, &err), 0, "%s", err.msg);
    cr_expect_str_eq(cp.committed_splits, "0");
    cr_assert_eq(cp.nparts, 1);
    cr_expect_str_eq(cp.parts[0].id, "s0-t0-p0");
    sb_ckpt_free(&cp);
    sb_storage_files_free(&all);
    sb_opckpt_free(&k);
    ctl_fixture_stop(&f);
}

Test(ctl_ckpt, the_status_summary_stays_small_at_200000_parts)
{
    sb_opckpt k;
    sb_err err;
    cr_assert_eq(sb_opckpt_init(&k, "s3://bucket/a/long/prefix/out/_streambatch/checkpoint", NULL,
                                7, "0123456789abcdef", 0, &err),
                 0, "%s", err.msg);
    cr_expect_null(sb_opckpt_status_json(&k));
    k.durable = k.w.sum;
    k.durable.generation = 3;
    k.durable.segments = 64;
    k.durable.parts = 200000;
    k.durable.splits = 200000;
    memcpy(k.durable.hash, "00000000deadbeef", 17);
    memcpy(k.durable.plan_hash, "fedcba9876543210", 17);
    snprintf(k.last_write, sizeof k.last_write, "2026-11-29T05:00:00Z");
    cJSON *j = sb_opckpt_status_json(&k);
    cr_assert_not_null(j);
    char *t = cJSON_PrintUnformatted(j);
    cr_expect_lt(strlen(t), 600, "%zu bytes: %s", strlen(t), t);
    cr_expect(strstr(t, "\"parts\":200000") != NULL, "%s", t);
    cr_expect(strstr(t, "\"lastWrite\":\"2026-11-29T05:00:00Z\"") != NULL, "%s", t);
    sb_ckptlog_summary back;
    cr_assert_eq(sb_ckptlog_summary_parse(j, "status.checkpoint", &back, &err), 0, "%s", err.msg);
    cr_expect_eq(back.parts, 200000);
    cr_expect_str_eq(back.location, "s3://bucket/a/long/prefix/out/_streambatch/checkpoint");
    free(t);
    cJSON_Delete(j);
    sb_opckpt_free(&k);
}

Test(ctl_ckpt, only_checkpoint_writes_are_queued_here)
{
    fixture f;
    setup(&f, 0, NULL);
    plan_and_prepare(&f);
    sb_err err;
    cr_expect_eq(sb_ctl_ckpt_start(f.ctl, SB_STORAGE_COMMIT, NULL, 0, 0, &err), -1);
    cr_expect(strstr(err.msg, "not a checkpoint write") != NULL, "%s", err.msg);
    cr_assert_eq(sb_ctl_ckpt_start(f.ctl, SB_STORAGE_CKPT_REMOVE, NULL, 0, 0, &err), 0, "%s",
                 err.msg);
    cr_expect_eq(sb_ctl_storage_start(f.ctl, SB_STORAGE_COMMIT, NULL, 0, &err), -1,
                 "one job at a time");
    Streambatch__V1__PollTasksReply *r = do_poll(&f, 2000);
    cr_assert_not_null(r->storage_job);
    cr_expect_eq(r->storage_job->kind,
                 STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_CKPT_REMOVE);
    cr_assert(report(&f, r->storage_job, NULL, NULL));
    sb_rpc_msg_free(&r->base);
    char msg[256];
    cr_expect_eq(sb_ctl_storage_poll(f.ctl, msg, sizeof msg), 1);
    ctl_fixture_stop(&f);
}
