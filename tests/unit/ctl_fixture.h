/* A Control service (controller/ctl/ctl.h) over real gRPC on loopback, for the unit tests of
 * the Control protocol (test_ctl, test_ctl_batch, test_ctl_storage): a one-stage pipeline, the
 * service started from a config the test fills in, a channel to it, and a fake worker's
 * registration. Header-only; the fixture owns what it starts and ctl_fixture_stop frees it. */
#ifndef SB_TEST_CTL_FIXTURE_H
#define SB_TEST_CTL_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "controller/ctl/ctl.h"
#include "doc/doc.h"
#include "rpc/proto.h"
#include "spec/pipeline.h"
#include "testauth.h"

static const char *CTL_FIXTURE_YAML =
    "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: c}\n"
    "spec:\n  source: {uri: 'file:///in', format: text, partitionSize: 1Mi}\n"
    "  stages: [{name: a, op: identity}]\n  sink: {uri: 'file:///out', format: text}\n"
    "  execution: {memoryBudget: 8Mi}\n";

typedef struct {
    sb_doc *doc;
    sb_pipeline p;
    sb_ctl *ctl;
    sb_rpc_channel *ch;
} ctl_fixture;

/* Decodes the pipeline into f->p, sets cfg->pipeline and cfg->pipeline_id ("default/c"),
 * starts the service with the rest of cfg and opens f->ch to it. */
static inline void ctl_fixture_start(ctl_fixture *f, sb_ctl_config *cfg)
{
    f->doc = sb_doc_parse_yaml(CTL_FIXTURE_YAML, strlen(CTL_FIXTURE_YAML), NULL);
    sb_diags d = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(f->doc, 0), &f->p, &d), 0);
    cr_assert_eq(d.n, 0);
    cfg->pipeline = &f->p;
    cfg->pipeline_id = "default/c";
    sb_err err;
    f->ctl = sb_ctl_start(cfg, sb_test_ctl_opts(NULL), &err);
    cr_assert_not_null(f->ctl, "%s", err.msg);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", sb_ctl_port(f->ctl));
    f->ch = sb_rpc_channel_new(target, sb_test_worker_opts(NULL), &err);
    cr_assert_not_null(f->ch, "%s", err.msg);
}

static inline void ctl_fixture_stop(ctl_fixture *f)
{
    sb_rpc_channel_free(f->ch);
    sb_ctl_free(f->ctl);
    sb_pipeline_free(&f->p);
    sb_doc_free(f->doc);
}

/* The session worker `id` registers with and carries on its later calls (the SHA-256 of the id
 * in hex; a ring of 8 buffers, so a few can be live at once). */
static inline char *ctl_fixture_session(const char *id)
{
    static char ring[8][SB_RPC_DIGEST_HEX + 1];
    static int k;
    char *s = ring[k++ % 8];
    sb_rpc_token_digest_hex(id, s);
    return s;
}

/* Registers worker `id` of pool cpu with `slots` slots; returns the reply, which the caller
 * frees with sb_rpc_msg_free(&reply->base). */
static inline Streambatch__V1__RegisterReply *ctl_fixture_register(ctl_fixture *f, const char *id,
                                                                   uint32_t slots)
{
    Streambatch__V1__RegisterRequest req = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
    req.worker_id = (char *)id;
    req.session = ctl_fixture_session(id);
    req.pool = "cpu";
    req.address = "127.0.0.1:1";
    req.slots = slots;
    ProtobufCMessage *resp = NULL;
    sb_err err;
    cr_assert_eq(sb_rpc_call_msg(f->ch, SB_RPC_CONTROL_REGISTER, &req.base, 5000,
                                 SB_RPC_WAIT_FOR_READY, &resp, &err),
                 SB_RPC_OK, "%s", err.msg);
    return (Streambatch__V1__RegisterReply *)resp;
}

/* One PollTasks of worker `id` with 2 free slots, held up to wait_ms; the reply, which the
 * caller frees with sb_rpc_msg_free(&reply->base). */
static inline Streambatch__V1__PollTasksReply *ctl_fixture_poll(ctl_fixture *f, const char *id,
                                                                uint32_t wait_ms)
{
    Streambatch__V1__PollTasksRequest req = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    req.worker_id = (char *)id;
    req.session = ctl_fixture_session(id);
    req.free_slots = 2;
    req.wait_ms = wait_ms;
    ProtobufCMessage *resp = NULL;
    sb_err err;
    cr_assert_eq(
        sb_rpc_call_msg(f->ch, SB_RPC_CONTROL_POLL_TASKS, &req.base, 10000, 0, &resp, &err),
        SB_RPC_OK, "%s", err.msg);
    return (Streambatch__V1__PollTasksReply *)resp;
}

/* Sends c (CompleteTask); whether the service accepted it. */
static inline int ctl_fixture_send_complete(ctl_fixture *f,
                                            const Streambatch__V1__CompleteTaskRequest *c)
{
    ProtobufCMessage *resp = NULL;
    sb_err err;
    cr_assert_eq(
        sb_rpc_call_msg(f->ch, SB_RPC_CONTROL_COMPLETE_TASK, &c->base, 5000, 0, &resp, &err),
        SB_RPC_OK, "%s", err.msg);
    int acc = ((Streambatch__V1__CompleteTaskReply *)resp)->accepted;
    sb_rpc_msg_free(resp);
    return acc;
}

/* Reports task t done by worker `id` with one output part_id (100 bytes, 10 rows). Returns
 * whether the service accepted it. */
static inline int ctl_fixture_complete(ctl_fixture *f, const char *id,
                                       const Streambatch__V1__Task *t, const char *part_id)
{
    Streambatch__V1__CompleteTaskRequest c = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    Streambatch__V1__PartitionInfo out = STREAMBATCH__V1__PARTITION_INFO__INIT;
    Streambatch__V1__PartitionInfo *outs[] = {&out};
    out.id = (char *)part_id;
    out.bytes = 100;
    out.rows = 10;
    c.worker_id = (char *)id;
    c.session = ctl_fixture_session(id);
    c.task_id = t->task_id;
    c.attempt = t->attempt;
    c.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    c.n_outputs = 1;
    c.outputs = outs;
    return ctl_fixture_send_complete(f, &c);
}

#endif
