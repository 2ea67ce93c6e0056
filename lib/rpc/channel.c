/* channel.c — channels, blocking unary calls and consumer-paced stream readers.
 *
 * Every call gets its own completion queue, polled only by the thread making the call. The
 * RECV_STATUS_ON_CLIENT op always runs in a batch of its own (so a failed send cannot hide the
 * status), and a stream reader starts RECV_MESSAGE only when the caller asks for the next
 * message: that is the backpressure towards the server.
 */
#include "rpc/rpc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

struct sb_rpc_channel {
    grpc_channel *ch;
    char *target;
    grpc_metadata auth_md; /* "authorization: Bearer <token>", sent on every call (rpc/auth.h) */
    int has_auth;
};

/* A tag whose completion is recorded by cq_wait(). */
typedef struct ctag {
    int started;
    int done;
    int ok;
} ctag;

/* Polls cq until t has completed (other tags completing meanwhile are recorded too). */
static void cq_wait(grpc_completion_queue *cq, ctag *t)
{
    while (t->started && !t->done) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            ctag *x = ev.tag;
            x->done = 1;
            x->ok = ev.success;
        } else if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            break;
        }
    }
}

static void cq_free(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

sb_rpc_channel *sb_rpc_channel_new(const char *target, const sb_rpc_opts *opts, sb_err *err)
{
    if (!target || !*target) {
        sb_err_set(err, "rpc channel: empty target");
        return NULL;
    }
    sb_rpc_channel *c = calloc(1, sizeof *c);
    if (!c || !(c->target = strdup(target))) {
        free(c);
        sb_err_set(err, "rpc channel: out of memory");
        return NULL;
    }
    sb_rpc__acquire();
    grpc_channel_credentials *creds = sb_rpc__client_creds(opts, err);
    if (!creds) {
        sb_err_wrap(err, "rpc channel to %s", target);
        free(c->target);
        free(c);
        sb_rpc__release();
        return NULL;
    }
    sb_rpc_args a;
    sb_rpc__client_args(&a, opts);
    if (opts && opts->auth && opts->auth->token[0]) {
        char bearer[16 + SB_RPC_TOKEN_HEX];
        snprintf(bearer, sizeof bearer, "Bearer %s", opts->auth->token);
        c->auth_md.key = grpc_slice_from_static_string("authorization");
        c->auth_md.value = grpc_slice_from_copied_string(bearer);
        c->has_auth = 1;
    }
    c->ch = grpc_channel_create(target, creds, &a.args);
    grpc_channel_credentials_release(creds);
    if (!c->ch) {
        sb_err_set(err, "rpc channel: cannot create a channel to %s", target);
        if (c->has_auth)
            grpc_slice_unref(c->auth_md.value);
        free(c->target);
        free(c);
        sb_rpc__release();
        return NULL;
    }
    return c;
}

void sb_rpc_channel_free(sb_rpc_channel *ch)
{
    if (!ch)
        return;
    grpc_channel_destroy(ch->ch);
    if (ch->has_auth)
        grpc_slice_unref(ch->auth_md.value);
    free(ch->target);
    free(ch);
    sb_rpc__release();
}

static const char *state_name(grpc_connectivity_state s)
{
    switch (s) {
    case GRPC_CHANNEL_IDLE:
        return "IDLE";
    case GRPC_CHANNEL_CONNECTING:
        return "CONNECTING";
    case GRPC_CHANNEL_READY:
        return "READY";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
        return "TRANSIENT_FAILURE";
    case GRPC_CHANNEL_SHUTDOWN:
        return "SHUTDOWN";
    }
    return "?";
}

int sb_rpc_channel_wait_ready(sb_rpc_channel *ch, int timeout_ms, sb_err *err)
{
    gpr_timespec deadline = sb_rpc__deadline(timeout_ms);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    int rc = -1;
    for (;;) {
        grpc_connectivity_state st = grpc_channel_check_connectivity_state(ch->ch, 1);
        if (st == GRPC_CHANNEL_READY) {
            rc = 0;
            break;
        }
        if (st == GRPC_CHANNEL_SHUTDOWN || sb_rpc__ms_until(deadline) <= 0) {
            sb_err_set(err, "rpc channel to %s: not ready after %d ms (state %s)", ch->target,
                       timeout_ms, state_name(st));
            break;
        }
        ctag t = {.started = 1};
        grpc_channel_watch_connectivity_state(ch->ch, st, deadline, cq, &t);
        cq_wait(cq, &t);
    }
    cq_free(cq);
    return rc;
}

int sb_rpc_channel_is_ready(sb_rpc_channel *ch)
{
    return grpc_channel_check_connectivity_state(ch->ch, 0) == GRPC_CHANNEL_READY;
}

/* Fills ops[0] (SEND_INITIAL_METADATA, with the channel's credential), [1] SEND_MESSAGE,
 * [2] SEND_CLOSE_FROM_CLIENT, [3] RECV_INITIAL_METADATA. */
static void client_send_ops(sb_rpc_channel *ch, grpc_op *ops, unsigned flags, grpc_byte_buffer *bb,
                            grpc_metadata_array *md)
{
    memset(ops, 0, 4 * sizeof *ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (ch->has_auth) {
        ops[0].data.send_initial_metadata.count = 1;
        ops[0].data.send_initial_metadata.metadata = &ch->auth_md;
    }
    if (flags & SB_RPC_WAIT_FOR_READY)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                       GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = md;
}

static grpc_byte_buffer *bb_from(const void *p, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer(p ? (const char *)p : "", len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static grpc_call *make_call(sb_rpc_channel *ch, grpc_completion_queue *cq, const char *method,
                            int timeout_ms)
{
    grpc_slice m = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                               sb_rpc__deadline(timeout_ms), NULL);
    grpc_slice_unref(m);
    return call;
}

static void set_status_err(sb_err *err, const char *method, grpc_status_code code,
                           grpc_slice details)
{
    char msg[SB_ERR_MAX];
    sb_rpc__slice_str(details, msg, sizeof msg);
    sb_err_set(err, "%s: %s: %s", method, sb_rpc_code_name(code), msg[0] ? msg : "(no message)");
}

sb_rpc_code sb_rpc_unary(sb_rpc_channel *ch, const char *method, const void *req, size_t req_len,
                         int timeout_ms, unsigned flags, uint8_t **resp, size_t *resp_len,
                         sb_err *err)
{
    *resp = NULL;
    *resp_len = 0;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_call *call = make_call(ch, cq, method, timeout_ms);
    if (!call) {
        cq_free(cq);
        sb_err_set(err, "%s: cannot create the call", method);
        return SB_RPC_INTERNAL;
    }
    grpc_byte_buffer *bb = bb_from(req, req_len), *rbb = NULL;
    grpc_metadata_array md, trail;
    grpc_metadata_array_init(&md);
    grpc_metadata_array_init(&trail);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    ctag t_main = {0}, t_status = {0};
    sb_rpc_code code;

    grpc_op ops[5];
    memset(ops, 0, sizeof ops);
    client_send_ops(ch, ops, flags, bb, &md);
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &rbb;
    grpc_call_error e = grpc_call_start_batch(call, ops, 5, &t_main, NULL);
    if (e == GRPC_CALL_OK) {
        t_main.started = 1;
        grpc_op sop;
        memset(&sop, 0, sizeof sop);
        sop.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        sop.data.recv_status_on_client.trailing_metadata = &trail;
        sop.data.recv_status_on_client.status = &status;
        sop.data.recv_status_on_client.status_details = &details;
        e = grpc_call_start_batch(call, &sop, 1, &t_status, NULL);
        if (e == GRPC_CALL_OK)
            t_status.started = 1;
        else
            grpc_call_cancel(call, NULL);
    }
    cq_wait(cq, &t_main);
    cq_wait(cq, &t_status);
    if (e != GRPC_CALL_OK) {
        code = SB_RPC_INTERNAL;
        sb_err_set(err, "%s: cannot start the call: %s", method, grpc_call_error_to_string(e));
    } else if (status != GRPC_STATUS_OK) {
        code = (sb_rpc_code)status;
        set_status_err(err, method, status, details);
    } else if (!rbb) {
        code = SB_RPC_INTERNAL;
        sb_err_set(err, "%s: INTERNAL: status OK but no response message", method);
    } else if (sb_rpc__bb_flatten(rbb, resp, resp_len) < 0) {
        code = SB_RPC_RESOURCE_EXHAUSTED;
        sb_err_set(err, "%s: out of memory for the response", method);
    } else {
        code = SB_RPC_OK;
        if (*resp_len == 0) {
            free(*resp);
            *resp = NULL;
        }
    }
    grpc_byte_buffer_destroy(bb);
    if (rbb)
        grpc_byte_buffer_destroy(rbb);
    grpc_metadata_array_destroy(&md);
    grpc_metadata_array_destroy(&trail);
    grpc_slice_unref(details);
    grpc_call_unref(call);
    cq_free(cq);
    return code;
}

/* ------------------------------------------------------------------------------ readers */

struct sb_rpc_reader {
    grpc_completion_queue *cq;
    grpc_call *call;
    char *method;
    ctag t_start, t_msg, t_status;
    grpc_metadata_array md, trail;
    grpc_status_code status;
    grpc_slice details;
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *bb; /* current message */
    grpc_byte_buffer_reader rd;
    int rd_init;
    sb_rpc_piece *pieces;
    size_t cap;
    int state; /* 0 streaming, 1 ended OK, 2 failed */
    sb_rpc_code code;
    char msg[SB_ERR_MAX];
};

static void reader_drop_msg(sb_rpc_reader *r)
{
    if (r->rd_init) {
        grpc_byte_buffer_reader_destroy(&r->rd);
        r->rd_init = 0;
    }
    if (r->bb) {
        grpc_byte_buffer_destroy(r->bb);
        r->bb = NULL;
    }
}

static void reader_free(sb_rpc_reader *r)
{
    reader_drop_msg(r);
    if (r->send_bb)
        grpc_byte_buffer_destroy(r->send_bb);
    grpc_metadata_array_destroy(&r->md);
    grpc_metadata_array_destroy(&r->trail);
    grpc_slice_unref(r->details);
    if (r->call)
        grpc_call_unref(r->call);
    if (r->cq)
        cq_free(r->cq);
    free(r->pieces);
    free(r->method);
    free(r);
}

sb_rpc_reader *sb_rpc_stream_open(sb_rpc_channel *ch, const char *method, const void *req,
                                  size_t req_len, int timeout_ms, unsigned flags, sb_err *err)
{
    sb_rpc_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->method = strdup(method))) {
        free(r);
        sb_err_set(err, "%s: out of memory", method);
        return NULL;
    }
    grpc_metadata_array_init(&r->md);
    grpc_metadata_array_init(&r->trail);
    r->details = grpc_empty_slice();
    r->status = GRPC_STATUS_UNKNOWN;
    r->cq = grpc_completion_queue_create_for_next(NULL);
    r->call = make_call(ch, r->cq, method, timeout_ms);
    if (!r->call) {
        sb_err_set(err, "%s: cannot create the call", method);
        reader_free(r);
        return NULL;
    }
    r->send_bb = bb_from(req, req_len);
    grpc_op ops[4];
    client_send_ops(ch, ops, flags, r->send_bb, &r->md);
    grpc_call_error e = grpc_call_start_batch(r->call, ops, 4, &r->t_start, NULL);
    if (e == GRPC_CALL_OK) {
        r->t_start.started = 1;
        grpc_op sop;
        memset(&sop, 0, sizeof sop);
        sop.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        sop.data.recv_status_on_client.trailing_metadata = &r->trail;
        sop.data.recv_status_on_client.status = &r->status;
        sop.data.recv_status_on_client.status_details = &r->details;
        e = grpc_call_start_batch(r->call, &sop, 1, &r->t_status, NULL);
        if (e == GRPC_CALL_OK)
            r->t_status.started = 1;
    }
    if (e != GRPC_CALL_OK) {
        sb_err_set(err, "%s: cannot start the call: %s", method, grpc_call_error_to_string(e));
        grpc_call_cancel(r->call, NULL);
        cq_wait(r->cq, &r->t_start);
        reader_free(r);
        return NULL;
    }
    return r;
}

/* Collects the final status once no more messages will come. */
static int reader_end(sb_rpc_reader *r, int msg_ok, sb_err *err)
{
    cq_wait(r->cq, &r->t_start);
    cq_wait(r->cq, &r->t_status);
    if (r->status == GRPC_STATUS_OK && msg_ok) {
        r->state = 1;
        r->code = SB_RPC_OK;
        return 0;
    }
    r->state = 2;
    if (r->status == GRPC_STATUS_OK) {
        r->code = SB_RPC_INTERNAL;
        snprintf(r->msg, sizeof r->msg, "%s: INTERNAL: receiving a message failed", r->method);
    } else {
        r->code = (sb_rpc_code)r->status;
        sb_err tmp;
        set_status_err(&tmp, r->method, r->status, r->details);
        snprintf(r->msg, sizeof r->msg, "%s", tmp.msg);
    }
    sb_err_set(err, "%s", r->msg);
    return -1;
}

int sb_rpc_reader_next(sb_rpc_reader *r, const sb_rpc_piece **pieces, size_t *npieces, size_t *len,
                       sb_err *err)
{
    *pieces = NULL;
    *npieces = 0;
    *len = 0;
    reader_drop_msg(r);
    if (r->state == 1)
        return 0;
    if (r->state == 2) {
        sb_err_set(err, "%s", r->msg);
        return -1;
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &r->bb;
    r->t_msg = (ctag){0};
    grpc_call_error e = grpc_call_start_batch(r->call, &op, 1, &r->t_msg, NULL);
    if (e != GRPC_CALL_OK) {
        grpc_call_cancel(r->call, NULL);
        return reader_end(r, 0, err);
    }
    r->t_msg.started = 1;
    cq_wait(r->cq, &r->t_msg);
    if (!r->t_msg.ok || !r->bb)
        return reader_end(r, r->t_msg.ok, err);
    if (!grpc_byte_buffer_reader_init(&r->rd, r->bb)) {
        grpc_call_cancel(r->call, NULL);
        return reader_end(r, 0, err);
    }
    r->rd_init = 1;
    size_t n = 0, total = 0;
    grpc_slice *s;
    while (grpc_byte_buffer_reader_peek(&r->rd, &s)) {
        if (n == r->cap) {
            size_t nc = r->cap ? r->cap * 2 : 64;
            sb_rpc_piece *np = realloc(r->pieces, nc * sizeof *np);
            if (!np) {
                grpc_call_cancel(r->call, NULL);
                reader_end(r, 0, NULL);
                r->code = SB_RPC_RESOURCE_EXHAUSTED;
                snprintf(r->msg, sizeof r->msg, "%s: out of memory", r->method);
                return sb_err_set(err, "%s", r->msg);
            }
            r->pieces = np;
            r->cap = nc;
        }
        r->pieces[n].ptr = GRPC_SLICE_START_PTR(*s);
        r->pieces[n].len = GRPC_SLICE_LENGTH(*s);
        total += r->pieces[n].len;
        n++;
    }
    *pieces = r->pieces;
    *npieces = n;
    *len = total;
    return 1;
}

sb_rpc_code sb_rpc_reader_code(const sb_rpc_reader *r)
{
    return r->state == 0 ? SB_RPC_OK : r->code;
}

void sb_rpc_reader_close(sb_rpc_reader *r)
{
    if (!r)
        return;
    reader_drop_msg(r);
    if (r->t_status.started && !r->t_status.done)
        grpc_call_cancel(r->call, NULL);
    cq_wait(r->cq, &r->t_start);
    cq_wait(r->cq, &r->t_status);
    reader_free(r);
}
