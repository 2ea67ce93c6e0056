/* proto.c — the streambatch.v1 protocol on top of rpc.h (see proto.h): the method table,
 * checked decoding of every message (partition ids, tokens, counts, no unknown fields), and
 * encoding, replying and calling with protobuf-c messages. Allocates only the messages and
 * buffers it returns. */

#include "rpc/proto.h"
#include "core/num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX 512

static const sb_rpc_method_info methods[] = {
    {SB_RPC_CONTROL_REGISTER, 0, &streambatch__v1__register_request__descriptor,
     &streambatch__v1__register_reply__descriptor},
    {SB_RPC_CONTROL_POLL_TASKS, 0, &streambatch__v1__poll_tasks_request__descriptor,
     &streambatch__v1__poll_tasks_reply__descriptor},
    {SB_RPC_CONTROL_COMPLETE_TASK, 0, &streambatch__v1__complete_task_request__descriptor,
     &streambatch__v1__complete_task_reply__descriptor},
    {SB_RPC_CONTROL_HEARTBEAT, 0, &streambatch__v1__heartbeat_request__descriptor,
     &streambatch__v1__heartbeat_reply__descriptor},
    {SB_RPC_CONTROL_STREAM_NEXT, 0, &streambatch__v1__stream_next_request__descriptor,
     &streambatch__v1__stream_next_reply__descriptor},
    {SB_RPC_DATA_FETCH, 1, &streambatch__v1__fetch_request__descriptor,
     &streambatch__v1__chunk__descriptor},
    {SB_RPC_WORKER_REBIND, 0, &streambatch__v1__rebind_request__descriptor,
     &streambatch__v1__rebind_reply__descriptor},
};

const sb_rpc_method_info *sb_rpc_methods(size_t *n)
{
    *n = sizeof methods / sizeof methods[0];
    return methods;
}

const sb_rpc_method_info *sb_rpc_method_find(const char *path)
{
    if (!path)
        return NULL;
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (!strcmp(methods[i].path, path))
            return &methods[i];
    return NULL;
}

/* ------------------------------------------------------------------------------ validation */

/* A non-empty run of printable, non-space ASCII (ids, addresses, names). */
static int check_token(const char *s, const char *what, sb_err *err)
{
    if (!s || !*s)
        return sb_err_set(err, "%s is missing", what);
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++, n++) {
        if (n >= TOKEN_MAX)
            return sb_err_set(err, "%s is longer than %d bytes", what, TOKEN_MAX);
        if (*p <= 0x20 || *p >= 0x7f)
            return sb_err_set(err, "%s contains a space or non-printable byte 0x%02x", what, *p);
    }
    return 0;
}

static int check_pid(const char *id, const char *what, size_t i, sb_err *err)
{
    if (sb_part_id_parse(id, NULL, NULL, NULL, err) < 0)
        return sb_err_wrap(err, "%s[%zu]", what, i);
    return 0;
}

static int check_pids(char **ids, size_t n, const char *what, sb_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (check_pid(ids[i], what, i, err) < 0)
            return -1;
    return 0;
}

static int check_seconds(double v, const char *what, sb_err *err)
{
    if (!isfinite(v) || v < 0)
        return sb_err_set(err, "%s must be a finite, non-negative number", what);
    return 0;
}

static int v_partition_info(const Streambatch__V1__PartitionInfo *m, const char *what, size_t i,
                            sb_err *err)
{
    if (!m)
        return sb_err_set(err, "%s[%zu] is missing", what, i);
    return check_pid(m->id, what, i, err);
}

static int v_partition_ref(const Streambatch__V1__PartitionRef *m, size_t i, sb_err *err)
{
    if (!m)
        return sb_err_set(err, "inputs[%zu] is missing", i);
    if (check_pid(m->id, "inputs", i, err) < 0)
        return -1;
    if (check_token(m->worker_address, "worker_address", err) < 0)
        return sb_err_wrap(err, "inputs[%zu]", i);
    return 0;
}

static int v_task_metrics(const Streambatch__V1__TaskMetrics *m, sb_err *err)
{
    if (!m)
        return 0;
    if (check_seconds(m->cpu_seconds, "metrics.cpu_seconds", err) < 0 ||
        check_seconds(m->wall_seconds, "metrics.wall_seconds", err) < 0 ||
        check_seconds(m->fetch_seconds, "metrics.fetch_seconds", err) < 0)
        return -1;
    return 0;
}

static int v_worker_metrics(const Streambatch__V1__WorkerMetrics *m, sb_err *err)
{
    if (!m)
        return 0;
    if (check_seconds(m->cpu_seconds, "metrics.cpu_seconds", err) < 0 ||
        check_seconds(m->gpu_busy_seconds, "metrics.gpu_busy_seconds", err) < 0)
        return -1;
    return 0;
}

static int v_task(const Streambatch__V1__Task *t, size_t i, sb_err *err)
{
    if (!t)
        return sb_err_set(err, "tasks[%zu] is missing", i);
    if (check_token(t->task_id, "task_id", err) < 0 ||
        check_token(t->pipeline, "pipeline", err) < 0)
        goto bad;
    if (t->n_ops == 0) {
        sb_err_set(err, "ops is empty");
        goto bad;
    }
    for (size_t k = 0; k < t->n_ops; k++) {
        if (!t->ops[k] || check_token(t->ops[k]->op, "op", err) < 0) {
            if (!t->ops[k])
                sb_err_set(err, "ops[%zu] is missing", k);
            goto bad;
        }
    }
    for (size_t k = 0; k < t->n_inputs; k++)
        if (v_partition_ref(t->inputs[k], k, err) < 0)
            goto bad;
    return 0;
bad:
    return sb_err_wrap(err, "tasks[%zu]", i);
}

static int task_status_ok(int s)
{
    return s == STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK ||
           s == STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR ||
           s == STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_INPUT_LOST;
}

static int v_complete(const Streambatch__V1__CompleteTaskRequest *m, sb_err *err)
{
    int rc = 0;
    if (check_token(m->worker_id, "worker_id", err) < 0 ||
        check_token(m->task_id, "task_id", err) < 0)
        rc = -1;
    else if (!task_status_ok((int)m->status))
        rc = sb_err_set(err, "status %d is not a known TaskStatus", (int)m->status);
    else if (m->partial && m->status != STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK)
        rc = sb_err_set(err, "partial: a report of a running task's outputs has status OK, not %d",
                        (int)m->status);
    else if (m->want_inputs && !m->partial)
        rc = sb_err_set(err, "want_inputs: only a partial report asks for a task's inputs");
    for (size_t i = 0; rc == 0 && i < m->n_outputs; i++)
        rc = v_partition_info(m->outputs[i], "outputs", i, err);
    if (rc == 0)
        rc = check_pids(m->lost_inputs, m->n_lost_inputs, "lost_inputs", err);
    if (rc == 0)
        rc = v_task_metrics(m->metrics, err);
    return rc;
}

/* A poll's batched completions: each a valid CompleteTaskRequest of the polling worker. */
static int v_completions(const Streambatch__V1__PollTasksRequest *m, sb_err *err)
{
    if (m->n_completions > SB_RPC_MAX_COMPLETIONS)
        return sb_err_set(err, "completions: %zu reports, at most %d in one poll", m->n_completions,
                          SB_RPC_MAX_COMPLETIONS);
    for (size_t i = 0; i < m->n_completions; i++) {
        const Streambatch__V1__CompleteTaskRequest *c = m->completions[i];
        if (c == NULL)
            return sb_err_set(err, "completions[%zu] is missing", i);
        if (v_complete(c, err) < 0)
            return sb_err_wrap(err, "completions[%zu]", i);
        if (c->partial) /* its answer (CompleteTaskReply.wait) has no place in a poll's reply */
            return sb_err_set(err, "completions[%zu]: a partial report goes by CompleteTask", i);
        if (strcmp(c->worker_id, m->worker_id) != 0)
            return sb_err_set(err,
                              "completions[%zu]: worker_id \"%.128s\" is not the polling worker", i,
                              c->worker_id);
    }
    return 0;
}

/* PollTasksReply.cancel, HeartbeatReply.cancel: each names a task. */
static int v_cancels(Streambatch__V1__TaskAttempt *const *v, size_t n, sb_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == NULL || check_token(v[i]->task_id, "cancel.task_id", err) < 0)
            return v[i] == NULL ? sb_err_set(err, "cancel[%zu] is missing", i)
                                : sb_err_wrap(err, "[%zu]", i);
    return 0;
}

static int v_register(const Streambatch__V1__RegisterRequest *m, sb_err *err)
{
    if (check_token(m->worker_id, "worker_id", err) < 0 || check_token(m->pool, "pool", err) < 0 ||
        check_token(m->address, "address", err) < 0)
        return -1;
    if (m->slots == 0)
        return sb_err_set(err, "slots must be at least 1");
    for (size_t i = 0; i < m->n_partitions; i++)
        if (v_partition_info(m->partitions[i], "partitions", i, err) < 0)
            return -1;
    return 0;
}

static int v_heartbeat(const Streambatch__V1__HeartbeatRequest *m, sb_err *err)
{
    if (check_token(m->worker_id, "worker_id", err) < 0 || v_worker_metrics(m->metrics, err) < 0)
        return -1;
    for (size_t i = 0; i < m->n_running_task_ids; i++)
        if (check_token(m->running_task_ids[i], "running_task_ids", err) < 0)
            return sb_err_wrap(err, "[%zu]", i);
    return 0;
}

static int v_stream_next(const Streambatch__V1__StreamNextRequest *m, sb_err *err)
{
    if (m->world_size == 0)
        return sb_err_set(err, "world_size is missing");
    if (m->batch_size == 0)
        return sb_err_set(err, "batch_size is missing");
    if (m->rank >= m->world_size)
        return sb_err_set(err, "rank %u is not below world_size %u", m->rank, m->world_size);
    if (m->consumed_bits.len > (1u << 20))
        return sb_err_set(err, "consumed_bits: %zu bytes, over 1 MiB", m->consumed_bits.len);
    for (size_t i = 0; i < m->n_lost; i++) {
        const Streambatch__V1__LostSlice *l = m->lost[i];
        if (l == NULL)
            return sb_err_set(err, "lost[%zu] is missing", i);
        if (check_pid(l->partition_id, "lost", i, err) < 0)
            return -1;
        if (l->row_lo >= l->row_hi)
            return sb_err_set(err, "lost[%zu]: an empty row range", i);
    }
    return 0;
}

/* A StreamNextReply: only a SLICE names a partition, its holder and a row range. */
static int v_stream_slice(const Streambatch__V1__StreamNextReply *m, sb_err *err)
{
    if (m->kind != STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__SLICE)
        return 0;
    if (check_pid(m->partition_id, "partition_id", 0, err) < 0 ||
        check_token(m->address, "address", err) < 0)
        return -1;
    if (m->row_lo >= m->row_hi || m->row_hi > m->rows)
        return sb_err_set(err, "rows [%llu, %llu) outside the partition's %llu",
                          (unsigned long long)m->row_lo, (unsigned long long)m->row_hi,
                          (unsigned long long)m->rows);
    return 0;
}

int sb_rpc_msg_validate(const ProtobufCMessage *msg, sb_err *err)
{
    if (!msg)
        return sb_err_set(err, "message is missing");
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    int rc = 0;
    if (d == &streambatch__v1__register_request__descriptor) {
        rc = v_register((const void *)msg, err);
    } else if (d == &streambatch__v1__register_reply__descriptor) {
        const Streambatch__V1__RegisterReply *m = (const void *)msg;
        rc = check_pids(m->release, m->n_release, "release", err);
    } else if (d == &streambatch__v1__poll_tasks_request__descriptor) {
        const Streambatch__V1__PollTasksRequest *m = (const void *)msg;
        rc = check_token(m->worker_id, "worker_id", err);
        if (rc == 0)
            rc = v_completions(m, err);
    } else if (d == &streambatch__v1__poll_tasks_reply__descriptor) {
        const Streambatch__V1__PollTasksReply *m = (const void *)msg;
        for (size_t i = 0; rc == 0 && i < m->n_tasks; i++)
            rc = v_task(m->tasks[i], i, err);
        if (rc == 0)
            rc = check_pids(m->release, m->n_release, "release", err);
        if (rc == 0)
            rc = v_cancels(m->cancel, m->n_cancel, err);
    } else if (d == &streambatch__v1__task__descriptor) {
        rc = v_task((const Streambatch__V1__Task *)(const void *)msg, 0, err);
    } else if (d == &streambatch__v1__complete_task_request__descriptor) {
        rc = v_complete((const void *)msg, err);
    } else if (d == &streambatch__v1__complete_task_reply__descriptor) {
        const Streambatch__V1__CompleteTaskReply *m = (const void *)msg;
        rc = check_pids(m->release, m->n_release, "release", err);
        for (size_t i = 0; rc == 0 && i < m->n_more_inputs; i++)
            rc = v_partition_ref(m->more_inputs[i], i, err);
    } else if (d == &streambatch__v1__heartbeat_request__descriptor) {
        rc = v_heartbeat((const void *)msg, err);
    } else if (d == &streambatch__v1__heartbeat_reply__descriptor) {
        const Streambatch__V1__HeartbeatReply *m = (const void *)msg;
        rc = check_pids(m->release, m->n_release, "release", err);
        if (rc == 0)
            rc = v_cancels(m->cancel, m->n_cancel, err);
    } else if (d == &streambatch__v1__stream_next_request__descriptor) {
        rc = v_stream_next((const void *)msg, err);
    } else if (d == &streambatch__v1__stream_next_reply__descriptor) {
        rc = v_stream_slice((const void *)msg, err);
    } else if (d == &streambatch__v1__fetch_request__descriptor) {
        const Streambatch__V1__FetchRequest *m = (const void *)msg;
        rc = check_pid(m->partition_id, "partition_id", 0, err);
        if (rc == 0)
            rc = check_pids(m->next_partition_ids, m->n_next_partition_ids, "next_partition_ids",
                            err);
    } else if (d == &streambatch__v1__chunk__descriptor) {
        const Streambatch__V1__Chunk *m = (const void *)msg;
        if (m->total_length &&
            (m->offset > m->total_length || m->data.len > m->total_length - m->offset))
            rc = sb_err_set(err, "chunk [%llu, +%zu) lies outside total_length %llu",
                            (unsigned long long)m->offset, m->data.len,
                            (unsigned long long)m->total_length);
    } else if (d == &streambatch__v1__rebind_request__descriptor) {
        const Streambatch__V1__RebindRequest *m = (const void *)msg;
        rc = check_token(m->controller_address, "controller_address", err);
    } else if (d == &streambatch__v1__partition_info__descriptor) {
        rc = v_partition_info((const void *)msg, "partition", 0, err);
    } else if (d == &streambatch__v1__partition_ref__descriptor) {
        rc = v_partition_ref((const void *)msg, 0, err);
    } else if (d == &streambatch__v1__task_metrics__descriptor) {
        rc = v_task_metrics((const void *)msg, err);
    } else if (d == &streambatch__v1__worker_metrics__descriptor) {
        rc = v_worker_metrics((const void *)msg, err);
    }
    /* OpArgs has nothing to check on its own. */
    if (rc < 0)
        return sb_err_wrap(err, "%s", d->name);
    return 0;
}

/* protobuf-c keeps fields it does not know (forward compatibility: a newer peer may send more),
 * but it also lets through field numbers the protobuf spec forbids (0 in an over-long encoding,
 * above 2^29-1), which it would then re-encode as a message it cannot read back. */
static int check_unknown(const ProtobufCMessage *m, int depth, sb_err *err)
{
    if (depth > 16)
        return sb_err_set(err, "%s: messages nested too deeply", m->descriptor->name);
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0 || m->unknown_fields[i].tag > 0x1fffffff)
            return sb_err_set(err, "%s: invalid field number %u", m->descriptor->name,
                              (unsigned)m->unknown_fields[i].tag);
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned f = 0; f < d->n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = &d->fields[f];
        if (fd->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *at = (const char *)m + fd->offset;
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(const void *)((const char *)m + fd->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(const void *)at;
            for (size_t k = 0; k < n; k++)
                if (v[k] && check_unknown(v[k], depth + 1, err) < 0)
                    return -1;
        } else {
            const ProtobufCMessage *v = *(const ProtobufCMessage *const *)(const void *)at;
            if (v && check_unknown(v, depth + 1, err) < 0)
                return -1;
        }
    }
    return 0;
}

ProtobufCMessage *sb_rpc_msg_decode(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
                                    size_t len, sb_err *err)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, buf);
    if (!m) {
        sb_err_set(err, "%s: malformed or truncated protobuf (%zu bytes)", d->name, len);
        return NULL;
    }
    if (check_unknown(m, 0, err) < 0) {
        sb_err_wrap(err, "malformed protobuf");
        protobuf_c_message_free_unpacked(m, NULL);
        return NULL;
    }
    if (sb_rpc_msg_validate(m, err) < 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return NULL;
    }
    return m;
}

void sb_rpc_msg_free(ProtobufCMessage *m)
{
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
}

uint8_t *sb_rpc_msg_encode(const ProtobufCMessage *m, size_t *len, sb_err *err)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        sb_err_set(err, "%s: out of memory packing %zu bytes", m->descriptor->name, n);
        return NULL;
    }
    *len = protobuf_c_message_pack(m, buf);
    return buf;
}

/* ------------------------------------------------------------------------------ rpc glue */

ProtobufCMessage *sb_rpc_call_decode(sb_rpc_call *call, const ProtobufCMessageDescriptor *d,
                                     const uint8_t *req, size_t len)
{
    sb_err err;
    ProtobufCMessage *m = sb_rpc_msg_decode(d, req, len, &err);
    if (!m)
        sb_rpc_call_finish(call, SB_RPC_INVALID_ARGUMENT, "%s", err.msg);
    return m;
}

int sb_rpc_call_reply_msg(sb_rpc_call *call, const ProtobufCMessage *m, sb_err *err)
{
    size_t len;
    uint8_t *buf = sb_rpc_msg_encode(m, &len, err);
    if (!buf) {
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "out of memory for the reply");
        return -1;
    }
    int rc = sb_rpc_call_reply(call, buf, len, err);
    free(buf);
    return rc;
}

sb_rpc_code sb_rpc_call_msg(sb_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                            int timeout_ms, unsigned flags, ProtobufCMessage **resp, sb_err *err)
{
    *resp = NULL;
    const sb_rpc_method_info *mi = sb_rpc_method_find(method);
    if (!mi || mi->server_streaming) {
        sb_err_set(err, "%s: not a unary method of streambatch.v1", method);
        return SB_RPC_INTERNAL;
    }
    if (req->descriptor != mi->request) {
        sb_err_set(err, "%s: request is a %s, want %s", method, req->descriptor->name,
                   mi->request->name);
        return SB_RPC_INTERNAL;
    }
    size_t len, rlen;
    uint8_t *buf = sb_rpc_msg_encode(req, &len, err), *rbuf = NULL;
    if (!buf)
        return SB_RPC_RESOURCE_EXHAUSTED;
    sb_rpc_code code = sb_rpc_unary(ch, method, buf, len, timeout_ms, flags, &rbuf, &rlen, err);
    free(buf);
    if (code != SB_RPC_OK)
        return code;
    *resp = sb_rpc_msg_decode(mi->response, rbuf, rlen, err);
    free(rbuf);
    if (!*resp) {
        sb_err_wrap(err, "%s: bad reply", method);
        return SB_RPC_INTERNAL;
    }
    return SB_RPC_OK;
}
