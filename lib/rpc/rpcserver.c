/* rpcserver.c — the gRPC server of lib/rpc: N threads, each polling its own completion queue with
 * request "slots" pre-posted for every registered method (plus unregistered calls, answered
 * UNIMPLEMENTED), per-call contexts whose tags carry an explicit kind, one SEND_MESSAGE in flight
 * per call, and a graceful-then-forced shutdown.
 *
 * Call context lifetime: `refs` counts the application's handle (dropped when it ends the call)
 * plus one per gRPC batch in flight (RECV_CLOSE, the current SEND, the STATUS batch) plus
 * short-lived references held while a server thread runs callbacks or a writer waits. The
 * grpc_call itself is released as soon as it is closed (status sent, or cancelled) and no batch
 * is in flight — independently of the application — so server shutdown never waits for a
 * handle the application forgot; the context memory goes when refs reaches zero.
 */
#include "rpc/rpc_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "core/log.h"
#include "rpc/chunkmsg.h"

#define MAX_METHODS 64
#define SLOTS_PER_METHOD 8
#define UNREG_SLOTS 2
#define STATUS_MSG_MAX 1024

#define OWNER(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

enum tag_kind { TAG_SLOT = 1, TAG_CLOSE, TAG_SEND, TAG_STATUS, TAG_UNIMPL, TAG_SHUTDOWN };

typedef struct tag {
    int kind;
} tag;

typedef struct method {
    char *path;
    int streaming;
    sb_rpc_handler_fn fn;
    void *ud;
    void *handle;
    unsigned roles; /* a call needs a credential with one of these (rpc/auth.h) */
} rpc_method;

typedef struct sthread {
    sb_rpc_server *srv;
    grpc_completion_queue *cq;
    pthread_t tid;
    int running;
} sthread;

typedef struct slot {
    tag t;
    sb_rpc_server *srv;
    sthread *st;
    int method; /* index into srv->methods, or -1 for unregistered calls */
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details;
} slot;

typedef struct unimpl {
    tag t;
    grpc_call *call;
    int cancelled;
    grpc_slice details;
} unimpl;

struct sb_rpc_call {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    sb_rpc_server *srv; /* used only while `call` is set */
    grpc_call *call;    /* NULL once released to gRPC */
    const rpc_method *m;
    gpr_timespec deadline;
    unsigned roles; /* of the caller's credential */
    tag t_close, t_send, t_status;
    int md_sent;
    int send_busy;
    int status_busy;
    int finished;  /* the application ended the call */
    int closed;    /* RECV_CLOSE_ON_SERVER completed */
    int cancelled; /* ... and said the call was cancelled */
    int send_failed;
    int close_cancelled; /* RECV_CLOSE_ON_SERVER output */
    int status_pending;  /* finish() while a SEND was in flight */
    sb_rpc_code pend_code;
    char *pend_msg;
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *status_bb;
    grpc_slice status_details;
    int have_details;
    sb_rpc_call_cb ready_cb, cancel_cb;
    void *ready_ud, *cancel_ud;
    int cancel_notified;
    int refused;                     /* answered UNAVAILABLE: the server was shutting down */
    int64_t progress_ms;             /* last SEND/STATUS batch started or completed (monotonic) */
    struct sb_rpc_call *prev, *next; /* srv->calls while `call` is set; under srv->mu */
};

struct sb_rpc_server {
    grpc_server *server;
    grpc_server_credentials *creds;
    rpc_method methods[MAX_METHODS];
    int nmethods;
    sb_rpc_key keys[SB_RPC_AUTH_MAX_KEYS]; /* accepted credentials (rpc/auth.h) */
    size_t nkeys;                          /* 0: no authentication */
    sthread *threads;
    int nthreads;
    int port;
    int started;
    int shutdown_started;
    int draining;      /* shutting down: new calls are answered UNAVAILABLE */
    int shutdown_done; /* gRPC's shutdown notification arrived */
    int stopped;       /* everything joined and destroyed */
    int cancelled_calls;
    int64_t last_stream_end_ms; /* when the last streaming call ended (monotonic ms) */
    int live_calls;             /* grpc_calls not yet released */
    int live_refused;           /* ... of which refused (answered UNAVAILABLE while draining) */
    sb_rpc_call *calls;         /* ... their contexts (the stall sweep walks them) */
    int stall_ms;               /* send stall timeout (0 = none) */
    int64_t last_sweep_ms;
    tag t_shutdown;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* The batch gate (see start_batch): a leaf lock, taken with or without a call's mu held;
     * nothing is locked while holding it. */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int gate_busy;   /* batches being started now */
    int gate_closed; /* the completion queues are about to shut down: no batch starts */
};

static __thread int tls_on_server_thread;

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* ------------------------------------------------------------------------------ call refs */

static void call_free(sb_rpc_call *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->pend_msg);
    free(c);
}

/* With c->mu held: detaches the grpc_call when nothing more can happen on it. The caller
 * unrefs the returned call after unlocking. */
static grpc_call *take_releasable_locked(sb_rpc_call *c)
{
    if (c->call && c->closed && !c->send_busy && !c->status_busy) {
        grpc_call *gc = c->call;
        c->call = NULL;
        return gc;
    }
    return NULL;
}

#define SB_RPC_SHUTDOWN_LINGER_MS 2000
/* After a drain that left nothing running, how long gRPC's own graceful shutdown may take before
 * the connections are closed by force (GOAWAY and its PING round trip: milliseconds). */
#define SB_RPC_SHUTDOWN_IDLE_MS 1000

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void release_grpc_call(sb_rpc_server *srv, sb_rpc_call *c, grpc_call *gc, int streaming,
                              int refused)
{
    if (!gc)
        return;
    /* Count first: once the last call is unref'd, shutdown may complete and free srv (this can
     * run on an application thread that ended the call). */
    pthread_mutex_lock(&srv->mu);
    srv->live_calls--;
    if (refused)
        srv->live_refused--;
    if (c->prev)
        c->prev->next = c->next;
    else if (srv->calls == c)
        srv->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    if (streaming && !refused)
        srv->last_stream_end_ms = mono_ms();
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    grpc_call_unref(gc);
}

/* Drops one reference; with c->mu held on entry (released on return). */
static void call_unref_locked(sb_rpc_call *c)
{
    sb_rpc_server *srv = c->srv;
    grpc_call *gc = take_releasable_locked(c);
    int gone = --c->refs == 0;
    int streaming = c->m != NULL && c->m->streaming; /* read before unlocking: c may go then */
    int refused = c->refused;
    pthread_mutex_unlock(&c->mu);
    release_grpc_call(srv, c, gc, streaming, refused);
    if (gone)
        call_free(c);
}

static void call_unref(sb_rpc_call *c)
{
    pthread_mutex_lock(&c->mu);
    call_unref_locked(c);
}

/* ------------------------------------------------------------------------------ batches */

/* Every batch on a server call goes through here. gRPC asserts (aborting the process) when a
 * batch starts on a completion queue that is shut down, and gRPC's shutdown notification can
 * arrive while a call it already handed us is still queued or being dispatched: its channel
 * leaves the server's list before the call ends. So before the queues shut down, the gate
 * closes (gate_close) and waits for the batches being started; a batch refused here fails like
 * any batch gRPC refuses, and the caller's error path releases the call. */
static grpc_call_error start_batch(sb_rpc_server *srv, grpc_call *gc, const grpc_op *ops, size_t n,
                                   void *t)
{
    pthread_mutex_lock(&srv->gate_mu);
    if (srv->gate_closed) {
        pthread_mutex_unlock(&srv->gate_mu);
        return GRPC_CALL_ERROR_COMPLETION_QUEUE_SHUTDOWN;
    }
    srv->gate_busy++;
    pthread_mutex_unlock(&srv->gate_mu);
    grpc_call_error e = grpc_call_start_batch(gc, ops, n, t, NULL);
    pthread_mutex_lock(&srv->gate_mu);
    if (--srv->gate_busy == 0 && srv->gate_closed)
        pthread_cond_broadcast(&srv->gate_cv);
    pthread_mutex_unlock(&srv->gate_mu);
    return e;
}

static void gate_close(sb_rpc_server *srv)
{
    pthread_mutex_lock(&srv->gate_mu);
    srv->gate_closed = 1;
    while (srv->gate_busy > 0)
        pthread_cond_wait(&srv->gate_cv, &srv->gate_mu);
    pthread_mutex_unlock(&srv->gate_mu);
}

/* Starts the final batch: [initial metadata] [message] status. c->mu held. */
static void start_status_locked(sb_rpc_call *c, sb_rpc_code code, const char *msg,
                                grpc_byte_buffer *bb)
{
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = 1;
    }
    if (bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)code;
    if (msg && *msg) {
        c->status_details = grpc_slice_from_copied_string(msg);
        c->have_details = 1;
        ops[n].data.send_status_from_server.status_details = &c->status_details;
    }
    n++;
    c->status_bb = bb;
    c->status_busy = 1;
    c->progress_ms = mono_ms();
    c->refs++;
    grpc_call_error e = start_batch(c->srv, c->call, ops, n, &c->t_status);
    if (e != GRPC_CALL_OK) {
        sb_log(SB_LOG_ERROR, "rpc: cannot send status", "method", c->m->path, "error",
               grpc_call_error_to_string(e), (char *)NULL);
        c->status_busy = 0;
        c->status_bb = NULL;
        c->refs--;
        if (bb)
            grpc_byte_buffer_destroy(bb);
        if (c->have_details) {
            grpc_slice_unref(c->status_details);
            c->have_details = 0;
        }
        grpc_call_cancel(c->call, NULL); /* so RECV_CLOSE completes and the call is released */
    }
}

static void on_status(sb_rpc_call *c, int ok)
{
    (void)ok;
    pthread_mutex_lock(&c->mu);
    grpc_byte_buffer *bb = c->status_bb;
    c->status_bb = NULL;
    c->status_busy = 0;
    c->progress_ms = mono_ms();
    if (c->have_details) {
        grpc_slice_unref(c->status_details);
        c->have_details = 0;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (bb)
        grpc_byte_buffer_destroy(bb);
    call_unref(c);
}

static void on_send(sb_rpc_call *c, int ok)
{
    pthread_mutex_lock(&c->mu);
    grpc_byte_buffer *bb = c->send_bb;
    c->send_bb = NULL;
    c->send_busy = 0;
    c->progress_ms = mono_ms();
    if (!ok)
        c->send_failed = 1;
    if (c->status_pending && c->call && !c->closed) {
        c->status_pending = 0;
        start_status_locked(c, c->pend_code, c->pend_msg, NULL);
    }
    sb_rpc_call_cb cb = NULL;
    void *ud = NULL;
    if (c->ready_cb && !c->finished) {
        cb = c->ready_cb;
        ud = c->ready_ud;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (bb)
        grpc_byte_buffer_destroy(bb);
    if (cb)
        cb(c, ud);
    call_unref(c);
}

static void on_close(sb_rpc_call *c, int ok)
{
    pthread_mutex_lock(&c->mu);
    c->closed = 1;
    c->cancelled = c->close_cancelled || !ok;
    sb_rpc_call_cb cb = NULL;
    void *ud = NULL;
    if (c->cancelled && !c->finished && c->cancel_cb && !c->cancel_notified) {
        c->cancel_notified = 1;
        cb = c->cancel_cb;
        ud = c->cancel_ud;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (cb)
        cb(c, ud);
    /* A ready-callback writer learns about the cancellation from its next (failing) write. */
    pthread_mutex_lock(&c->mu);
    cb = NULL;
    if (c->cancelled && !c->finished && c->ready_cb && !c->send_busy) {
        cb = c->ready_cb;
        ud = c->ready_ud;
    }
    pthread_mutex_unlock(&c->mu);
    if (cb)
        cb(c, ud);
    call_unref(c);
}

/* Runs the ready callback after the handler returned, if a write would not block. */
static void kick_ready(sb_rpc_call *c)
{
    pthread_mutex_lock(&c->mu);
    sb_rpc_call_cb cb = NULL;
    void *ud = NULL;
    if (c->ready_cb && !c->finished && !c->send_busy) {
        cb = c->ready_cb;
        ud = c->ready_ud;
    }
    pthread_mutex_unlock(&c->mu);
    if (cb)
        cb(c, ud);
}

/* ------------------------------------------------------------------------------ calls */

static void new_call(sb_rpc_server *srv, const rpc_method *m, grpc_call *gc, gpr_timespec deadline,
                     grpc_byte_buffer *payload, unsigned roles)
{
    sb_rpc_call *c = calloc(1, sizeof *c);
    if (!c) {
        sb_log(SB_LOG_ERROR, "rpc: out of memory for a call", "method", m->path, (char *)NULL);
        if (payload)
            grpc_byte_buffer_destroy(payload);
        grpc_call_cancel_with_status(gc, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL);
        grpc_call_unref(gc);
        return;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->srv = srv;
    c->call = gc;
    c->m = m;
    c->deadline = deadline;
    c->roles = roles;
    c->t_close.kind = TAG_CLOSE;
    c->t_send.kind = TAG_SEND;
    c->t_status.kind = TAG_STATUS;
    c->refs = 3; /* application handle + RECV_CLOSE batch + this dispatch */
    c->progress_ms = mono_ms();
    pthread_mutex_lock(&srv->mu);
    srv->live_calls++;
    c->next = srv->calls;
    if (c->next)
        c->next->prev = c;
    srv->calls = c;
    int refuse = srv->draining;
    c->refused = refuse; /* before anyone else sees c */
    srv->live_refused += refuse;
    pthread_mutex_unlock(&srv->mu);

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    grpc_call_error e = start_batch(srv, gc, &op, 1, &c->t_close);
    if (e != GRPC_CALL_OK) {
        sb_log(SB_LOG_ERROR, "rpc: cannot start RECV_CLOSE", "method", m->path, "error",
               grpc_call_error_to_string(e), (char *)NULL);
        pthread_mutex_lock(&c->mu);
        c->closed = 1;
        c->cancelled = 1;
        c->refs--;
        pthread_mutex_unlock(&c->mu);
    }

    uint8_t *buf = NULL;
    size_t len = 0;
    if (refuse) {
        if (payload)
            grpc_byte_buffer_destroy(payload);
        sb_rpc_call_finish(c, SB_RPC_UNAVAILABLE, "%s: the server is shutting down", m->path);
    } else if (srv->nkeys > 0 && roles == 0) {
        grpc_byte_buffer_destroy(payload);
        sb_rpc_call_finish(c, SB_RPC_UNAUTHENTICATED,
                           "%s: no valid credential (an \"authorization: Bearer\" token of this "
                           "pipeline)",
                           m->path);
    } else if (srv->nkeys > 0 && (roles & m->roles) == 0) {
        grpc_byte_buffer_destroy(payload);
        sb_rpc_call_finish(c, SB_RPC_PERMISSION_DENIED,
                           "%s: this credential's role may not call this method", m->path);
    } else if (!payload) {
        sb_rpc_call_finish(c, SB_RPC_INVALID_ARGUMENT, "%s: request message missing", m->path);
    } else if (sb_rpc__bb_flatten(payload, &buf, &len) < 0) {
        grpc_byte_buffer_destroy(payload);
        sb_rpc_call_finish(c, SB_RPC_RESOURCE_EXHAUSTED, "%s: cannot read the request", m->path);
    } else {
        grpc_byte_buffer_destroy(payload);
        m->fn(c, buf ? buf : (const uint8_t *)"", len, m->ud);
        free(buf);
        if (m->streaming)
            kick_ready(c);
    }
    call_unref(c); /* the dispatch reference */
}

static void start_unimplemented(sb_rpc_server *srv, grpc_call *gc, const char *path)
{
    unimpl *u = calloc(1, sizeof *u);
    if (!u) {
        grpc_call_cancel_with_status(gc, GRPC_STATUS_UNIMPLEMENTED, "unknown method", NULL);
        grpc_call_unref(gc);
        return;
    }
    u->t.kind = TAG_UNIMPL;
    u->call = gc;
    char msg[STATUS_MSG_MAX];
    snprintf(msg, sizeof msg, "unknown method %s", path);
    u->details = grpc_slice_from_copied_string(msg);
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = GRPC_STATUS_UNIMPLEMENTED;
    ops[1].data.send_status_from_server.status_details = &u->details;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &u->cancelled;
    if (start_batch(srv, gc, ops, 3, &u->t) != GRPC_CALL_OK) {
        grpc_call_unref(gc);
        grpc_slice_unref(u->details);
        free(u);
        return;
    }
    sb_log(SB_LOG_DEBUG, "rpc: unknown method", "method", path, (char *)NULL);
}

static void on_unimpl(unimpl *u)
{
    grpc_call_unref(u->call);
    grpc_slice_unref(u->details);
    free(u);
}

/* ------------------------------------------------------------------------------ slots */

static void slot_free(slot *s)
{
    grpc_metadata_array_destroy(&s->md);
    grpc_call_details_destroy(&s->details);
    free(s);
}

static void slot_post(slot *s)
{
    sb_rpc_server *srv = s->srv;
    grpc_metadata_array_destroy(&s->md);
    grpc_metadata_array_init(&s->md);
    grpc_call_details_destroy(&s->details);
    grpc_call_details_init(&s->details);
    s->call = NULL;
    s->payload = NULL;
    grpc_call_error e;
    if (s->method >= 0)
        e = grpc_server_request_registered_call(srv->server, srv->methods[s->method].handle,
                                                &s->call, &s->deadline, &s->md, &s->payload,
                                                s->st->cq, s->st->cq, &s->t);
    else
        e = grpc_server_request_call(srv->server, &s->call, &s->details, &s->md, s->st->cq,
                                     s->st->cq, &s->t);
    if (e != GRPC_CALL_OK) {
        sb_log(SB_LOG_WARN, "rpc: cannot request calls", "error", grpc_call_error_to_string(e),
               (char *)NULL);
        slot_free(s);
    }
}

static int slot_new(sb_rpc_server *srv, sthread *st, int method)
{
    slot *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->t.kind = TAG_SLOT;
    s->srv = srv;
    s->st = st;
    s->method = method;
    grpc_metadata_array_init(&s->md);
    grpc_call_details_init(&s->details);
    slot_post(s);
    return 0;
}

/* The roles the call's "authorization: Bearer <token>" grants among srv->keys (0: none). */
static unsigned call_roles(const sb_rpc_server *srv, const grpc_metadata_array *md)
{
    if (srv->nkeys == 0)
        return 0;
    static const char bearer[] = "Bearer ";
    unsigned roles = 0;
    for (size_t i = 0; i < md->count; i++) {
        const grpc_slice k = md->metadata[i].key, v = md->metadata[i].value;
        if (GRPC_SLICE_LENGTH(k) != 13 || memcmp(GRPC_SLICE_START_PTR(k), "authorization", 13))
            continue;
        size_t n = GRPC_SLICE_LENGTH(v);
        const char *p = (const char *)GRPC_SLICE_START_PTR(v);
        if (n <= sizeof bearer - 1 || memcmp(p, bearer, sizeof bearer - 1) != 0)
            continue;
        roles |= sb_rpc_keys_match(srv->keys, srv->nkeys, p + sizeof bearer - 1,
                                   n - (sizeof bearer - 1));
    }
    return roles;
}

static void on_slot(slot *s, int ok)
{
    if (!ok) { /* server shutting down: the request is withdrawn */
        if (s->call)
            grpc_call_unref(s->call);
        if (s->payload)
            grpc_byte_buffer_destroy(s->payload);
        slot_free(s);
        return;
    }
    sb_rpc_server *srv = s->srv;
    grpc_call *gc = s->call;
    if (s->method < 0) {
        char path[256];
        sb_rpc__slice_str(s->details.method, path, sizeof path);
        slot_post(s);
        start_unimplemented(srv, gc, path);
        return;
    }
    const rpc_method *m = &srv->methods[s->method];
    gpr_timespec deadline = s->deadline;
    grpc_byte_buffer *payload = s->payload;
    unsigned roles = call_roles(srv, &s->md);
    slot_post(s); /* accept the next call before running this one */
    new_call(srv, m, gc, deadline, payload, roles);
}

/* ------------------------------------------------------------------------------ threads */

static void dispatch(sb_rpc_server *srv, void *t, int ok)
{
    switch (((tag *)t)->kind) {
    case TAG_SLOT:
        on_slot(OWNER(t, slot, t), ok);
        break;
    case TAG_CLOSE:
        on_close(OWNER(t, sb_rpc_call, t_close), ok);
        break;
    case TAG_SEND:
        on_send(OWNER(t, sb_rpc_call, t_send), ok);
        break;
    case TAG_STATUS:
        on_status(OWNER(t, sb_rpc_call, t_status), ok);
        break;
    case TAG_UNIMPL:
        on_unimpl(OWNER(t, unimpl, t));
        break;
    case TAG_SHUTDOWN:
        pthread_mutex_lock(&srv->mu);
        srv->shutdown_done = 1;
        pthread_cond_broadcast(&srv->cv);
        pthread_mutex_unlock(&srv->mu);
        break;
    default:
        sb_log(SB_LOG_ERROR, "rpc: unknown completion tag", (char *)NULL);
    }
}

/* The send stall timeout (sb_rpc_opts.stream_stall_ms): cancels every call whose answer has
 * made no progress for stall_ms — a SEND or the STATUS batch in flight (not accepted by HTTP/2
 * flow control), or the call ended by the application but not closed (its last messages and
 * status still queued behind a window the peer never opens). Cancelling makes gRPC fail the
 * pending batches and drop the queued messages, so zero-copy payloads are released (their unpin
 * runs) and the cancel callback fires if the application had not ended the call. A call with
 * nothing to send (a handler still working, an idle stream) is never stalled. Runs on server
 * thread 0 at most every stall_ms / 4 (at least every second); lock order srv->mu, then c->mu
 * (nothing takes srv->mu while holding a call's mu). */
static void sweep_stalled(sb_rpc_server *srv)
{
    int64_t now = mono_ms();
    pthread_mutex_lock(&srv->mu);
    int period = srv->stall_ms / 4 < 1000 ? srv->stall_ms / 4 : 1000;
    if (now - srv->last_sweep_ms < period) {
        pthread_mutex_unlock(&srv->mu);
        return;
    }
    srv->last_sweep_ms = now;
    for (sb_rpc_call *c = srv->calls; c; c = c->next) {
        pthread_mutex_lock(&c->mu);
        int waiting = c->send_busy || c->status_busy || c->status_pending || c->finished;
        if (c->call && !c->closed && waiting && now - c->progress_ms > srv->stall_ms) {
            char ms[24];
            snprintf(ms, sizeof ms, "%d", srv->stall_ms);
            sb_log(SB_LOG_WARN, "rpc: cancelling a call whose peer reads nothing", "method",
                   c->m->path, "stall_ms", ms, (char *)NULL);
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED,
                                         "no flow-control progress: the peer reads nothing", NULL);
            c->progress_ms = now; /* once per stall_ms at most */
        }
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&srv->mu);
}

static void *sthread_main(void *arg)
{
    sthread *st = arg;
    sb_rpc_server *srv = st->srv;
    int sweeper = st == &srv->threads[0] && srv->stall_ms > 0;
    tls_on_server_thread = 1;
    for (;;) {
        gpr_timespec dl = sweeper ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                 gpr_time_from_millis(250, GPR_TIMESPAN))
                                  : gpr_inf_future(GPR_CLOCK_MONOTONIC);
        grpc_event ev = grpc_completion_queue_next(st->cq, dl, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE)
            dispatch(srv, ev.tag, ev.success);
        if (sweeper)
            sweep_stalled(srv);
    }
    return NULL;
}

/* ------------------------------------------------------------------------------ server API */

sb_rpc_server *sb_rpc_server_new(const sb_rpc_opts *opts, sb_err *err)
{
    sb_rpc_server *srv = calloc(1, sizeof *srv);
    if (!srv) {
        sb_err_set(err, "rpc server: out of memory");
        return NULL;
    }
    pthread_mutex_init(&srv->mu, NULL);
    pthread_mutex_init(&srv->gate_mu, NULL);
    pthread_cond_init(&srv->gate_cv, NULL);
    cond_init_mono(&srv->cv);
    srv->t_shutdown.kind = TAG_SHUTDOWN;
    srv->nthreads = opts && opts->threads > 0 ? opts->threads : 2;
    srv->stall_ms = opts ? opts->stream_stall_ms : 0;
    if (opts && opts->auth) {
        srv->nkeys = opts->auth->nkeys;
        memcpy(srv->keys, opts->auth->keys, sizeof srv->keys);
    }
    if (srv->stall_ms == 0) {
        const char *v = getenv("SB_RPC_STREAM_STALL_MS");
        srv->stall_ms = v && *v ? atoi(v) : SB_RPC_DEFAULT_STREAM_STALL_MS;
    }
    if (srv->stall_ms < 0)
        srv->stall_ms = 0;
    sb_rpc__acquire();
    srv->creds = sb_rpc__server_creds(opts, err);
    if (!srv->creds)
        goto fail;
    sb_rpc_args a;
    sb_rpc__server_args(&a, opts);
    /* A memory quota of its own for the server's transports (see "SERVER LIMITS" in rpc.h): gRPC
     * checks the receive limit only once a whole message has arrived, and grants flow-control
     * window for all of it, so without a quota one peer announcing a huge message makes the
     * server buffer all of it, and N peers N times that. Once the quota is spent gRPC cancels
     * the streams that hold buffers. (10 args at most: within SB_RPC_MAX_ARGS.) */
    grpc_resource_quota *quota = grpc_resource_quota_create("sb-rpc-server");
    grpc_resource_quota_resize(quota, sb_rpc__server_quota(a.max_message));
    grpc_arg *qa = &a.arg[a.args.num_args++];
    qa->type = GRPC_ARG_POINTER;
    qa->key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    qa->value.pointer.p = quota;
    qa->value.pointer.vtable = grpc_resource_quota_arg_vtable();
    srv->server = grpc_server_create(&a.args, NULL);
    grpc_resource_quota_unref(quota); /* the server holds its own reference */
    srv->threads = calloc((size_t)srv->nthreads, sizeof *srv->threads);
    if (!srv->server || !srv->threads) {
        sb_err_set(err, "rpc server: cannot create the gRPC server");
        goto fail;
    }
    for (int i = 0; i < srv->nthreads; i++) {
        srv->threads[i].srv = srv;
        srv->threads[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(srv->server, srv->threads[i].cq, NULL);
    }
    return srv;
fail:
    sb_rpc_server_free(srv);
    return NULL;
}

static int add_method(sb_rpc_server *srv, const char *path, int streaming, sb_rpc_handler_fn fn,
                      void *ud, sb_err *err)
{
    if (!path || path[0] != '/' || !fn)
        return sb_err_set(err, "rpc server: method must be a \"/pkg.Service/Method\" path "
                               "with a handler");
    if (srv->started)
        return sb_err_set(err, "rpc server: cannot add %s after start", path);
    if (srv->nmethods == MAX_METHODS)
        return sb_err_set(err, "rpc server: more than %d methods", MAX_METHODS);
    for (int i = 0; i < srv->nmethods; i++)
        if (!strcmp(srv->methods[i].path, path))
            return sb_err_set(err, "rpc server: method %s registered twice", path);
    rpc_method *m = &srv->methods[srv->nmethods];
    m->path = strdup(path);
    if (!m->path)
        return sb_err_set(err, "rpc server: out of memory");
    m->handle = grpc_server_register_method(srv->server, path, NULL,
                                            GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    if (!m->handle) {
        free(m->path);
        m->path = NULL;
        return sb_err_set(err, "rpc server: gRPC refused method %s", path);
    }
    m->streaming = streaming;
    m->fn = fn;
    m->ud = ud;
    m->roles = SB_RPC_ROLE_ANY;
    srv->nmethods++;
    return 0;
}

int sb_rpc_server_require_role(sb_rpc_server *srv, const char *method, unsigned roles, sb_err *err)
{
    for (int i = 0; i < srv->nmethods; i++)
        if (!strcmp(srv->methods[i].path, method)) {
            srv->methods[i].roles = roles;
            return 0;
        }
    return sb_err_set(err, "rpc server: method %s is not registered", method);
}

int sb_rpc_server_add_unary(sb_rpc_server *srv, const char *method, sb_rpc_handler_fn fn, void *ud,
                            sb_err *err)
{
    return add_method(srv, method, 0, fn, ud, err);
}

int sb_rpc_server_add_stream(sb_rpc_server *srv, const char *method, sb_rpc_handler_fn fn, void *ud,
                             sb_err *err)
{
    return add_method(srv, method, 1, fn, ud, err);
}

int sb_rpc_server_listen(sb_rpc_server *srv, const char *addr, sb_err *err)
{
    if (srv->started)
        return sb_err_set(err, "rpc server: cannot listen on %s after start", addr);
    int port = grpc_server_add_http2_port(srv->server, addr, srv->creds);
    if (port <= 0)
        return sb_err_set(err, "rpc server: cannot listen on %s (address in use or invalid)", addr);
    srv->port = port;
    return port;
}

int sb_rpc_server_port(const sb_rpc_server *srv)
{
    return srv->port;
}

int sb_rpc_server_start(sb_rpc_server *srv, sb_err *err)
{
    if (srv->started)
        return sb_err_set(err, "rpc server: already started");
    if (!srv->port)
        return sb_err_set(err, "rpc server: no listening port (call sb_rpc_server_listen)");
    grpc_server_start(srv->server);
    srv->started = 1;
    for (int t = 0; t < srv->nthreads; t++) {
        sthread *st = &srv->threads[t];
        for (int i = 0; i < srv->nmethods; i++)
            for (int k = 0; k < SLOTS_PER_METHOD; k++)
                if (slot_new(srv, st, i) < 0)
                    return sb_err_set(err, "rpc server: out of memory");
        for (int k = 0; k < UNREG_SLOTS; k++)
            if (slot_new(srv, st, -1) < 0)
                return sb_err_set(err, "rpc server: out of memory");
    }
    for (int t = 0; t < srv->nthreads; t++) {
        if (pthread_create(&srv->threads[t].tid, NULL, sthread_main, &srv->threads[t]) != 0)
            return sb_err_set(err, "rpc server: cannot start thread %d", t);
        srv->threads[t].running = 1;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", srv->port);
    sb_log(SB_LOG_DEBUG, "rpc server started", "port", port, (char *)NULL);
    return 0;
}

static void deadline_at(struct timespec *ts, int64_t at_ms)
{
    ts->tv_sec = (time_t)(at_ms / 1000);
    ts->tv_nsec = (long)(at_ms % 1000) * 1000000L;
}

/* With srv->mu held: waits until *flag is set or the monotonic clock reaches at_ms. */
static void wait_flag_until(sb_rpc_server *srv, const int *flag, int64_t at_ms)
{
    struct timespec dl;
    deadline_at(&dl, at_ms);
    while (!*flag)
        if (pthread_cond_timedwait(&srv->cv, &srv->mu, &dl) != 0)
            break;
}

/* With srv->mu held: waits until no call is in flight (calls refused meanwhile aside) or the
 * clock reaches at_ms. */
static void wait_no_calls_until(sb_rpc_server *srv, int64_t at_ms)
{
    struct timespec dl;
    deadline_at(&dl, at_ms);
    while (srv->live_calls - srv->live_refused > 0)
        if (pthread_cond_timedwait(&srv->cv, &srv->mu, &dl) != 0)
            break;
}

int sb_rpc_server_shutdown(sb_rpc_server *srv, int grace_ms)
{
    return sb_rpc_server_shutdown_linger(
        srv, grace_ms, grace_ms < SB_RPC_SHUTDOWN_LINGER_MS ? grace_ms : SB_RPC_SHUTDOWN_LINGER_MS);
}

/* The order matters. gRPC's own graceful shutdown (grpc_server_shutdown_and_notify) closes each
 * connection as soon as its last stream has handed its last bytes to the socket, and closing a
 * socket whose peer is still sending (the reader's WINDOW_UPDATEs, its PING acks) resets it: the
 * peer's kernel drops what the reader had not read yet, and a slow reader loses the tail of a
 * stream that ended OK on our side ("UNAVAILABLE: recvmsg: Connection reset by peer", or "Broken
 * pipe"). So the linger has to come before gRPC's shutdown, while the connections are still up:
 *   1. drain: new calls are answered UNAVAILABLE; the calls in flight get up to grace_ms to end;
 *   2. linger: if they all ended, the connections stay up until linger_ms after the last stream
 *      ended, so its reader can take the tail (a reader done earlier closes its connection);
 *   3. gRPC's shutdown (GOAWAY, listeners closed) — quick, nothing is left running — and, if
 *      calls are still in flight when the grace is spent, cancelling them. */
int sb_rpc_server_shutdown_linger(sb_rpc_server *srv, int grace_ms, int linger_ms)
{
    pthread_mutex_lock(&srv->mu);
    if (srv->shutdown_started) {
        while (!srv->stopped)
            pthread_cond_wait(&srv->cv, &srv->mu);
        int n = srv->cancelled_calls;
        pthread_mutex_unlock(&srv->mu);
        return n;
    }
    srv->shutdown_started = 1;
    srv->draining = 1;
    pthread_mutex_unlock(&srv->mu);
    if (!srv->server)
        goto done;
    if (grace_ms < 0)
        grace_ms = 0;
    int64_t grace_end = mono_ms() + grace_ms;
    if (srv->started && grace_ms > 0) {
        pthread_mutex_lock(&srv->mu);
        wait_no_calls_until(srv, grace_end);
        int drained = srv->live_calls - srv->live_refused == 0;
        int64_t last_end = srv->last_stream_end_ms;
        pthread_mutex_unlock(&srv->mu);
        if (drained && linger_ms > 0 && last_end > 0) {
            int64_t left = last_end + linger_ms - mono_ms();
            if (left > 0) {
                struct timespec ts = {(time_t)(left / 1000), (long)(left % 1000) * 1000000L};
                while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                    ;
            }
        }
        /* Nothing is running any more: gRPC's graceful part (GOAWAY, then each idle connection
         * closes) takes milliseconds; calls refused meanwhile end at once. */
        if (drained && grace_end < mono_ms() + SB_RPC_SHUTDOWN_IDLE_MS)
            grace_end = mono_ms() + SB_RPC_SHUTDOWN_IDLE_MS;
    }
    grpc_server_shutdown_and_notify(srv->server, srv->threads[0].cq, &srv->t_shutdown);
    if (!srv->started) {
        /* No threads: collect the notification here. */
        for (;;) {
            grpc_event ev = grpc_completion_queue_next(srv->threads[0].cq,
                                                       gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            if (ev.type == GRPC_OP_COMPLETE && ev.tag == &srv->t_shutdown)
                break;
        }
    } else {
        pthread_mutex_lock(&srv->mu);
        wait_flag_until(srv, &srv->shutdown_done, grace_end);
        if (!srv->shutdown_done) {
            srv->cancelled_calls = srv->live_calls - srv->live_refused;
            pthread_mutex_unlock(&srv->mu);
            grpc_server_cancel_all_calls(srv->server);
            pthread_mutex_lock(&srv->mu);
            while (!srv->shutdown_done) {
                wait_flag_until(srv, &srv->shutdown_done, mono_ms() + 5000);
                if (!srv->shutdown_done) {
                    char n[16];
                    snprintf(n, sizeof n, "%d", srv->live_calls);
                    sb_log(SB_LOG_WARN, "rpc server: still waiting for calls to end", "calls", n,
                           (char *)NULL);
                }
            }
        }
        pthread_mutex_unlock(&srv->mu);
    }
    gate_close(srv);
    for (int t = 0; t < srv->nthreads; t++)
        grpc_completion_queue_shutdown(srv->threads[t].cq);
    for (int t = 0; t < srv->nthreads; t++) {
        if (srv->threads[t].running) {
            pthread_join(srv->threads[t].tid, NULL);
            srv->threads[t].running = 0;
        } else {
            while (grpc_completion_queue_next(srv->threads[t].cq,
                                              gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                       .type != GRPC_QUEUE_SHUTDOWN)
                ;
        }
    }
    grpc_server_destroy(srv->server);
    srv->server = NULL;
    for (int t = 0; t < srv->nthreads; t++) {
        grpc_completion_queue_destroy(srv->threads[t].cq);
        srv->threads[t].cq = NULL;
    }
done:
    pthread_mutex_lock(&srv->mu);
    srv->stopped = 1;
    pthread_cond_broadcast(&srv->cv);
    int n = srv->cancelled_calls;
    pthread_mutex_unlock(&srv->mu);
    return n;
}

void sb_rpc_server_free(sb_rpc_server *srv)
{
    if (!srv)
        return;
    if (srv->server)
        sb_rpc_server_shutdown(srv, 0);
    else if (srv->threads) /* created but never got a server: only queues to destroy */
        for (int t = 0; t < srv->nthreads; t++)
            if (srv->threads[t].cq)
                grpc_completion_queue_destroy(srv->threads[t].cq);
    if (srv->creds)
        grpc_server_credentials_release(srv->creds);
    for (int i = 0; i < srv->nmethods; i++)
        free(srv->methods[i].path);
    free(srv->threads);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    pthread_mutex_destroy(&srv->gate_mu);
    pthread_cond_destroy(&srv->gate_cv);
    free(srv);
    sb_rpc__release();
}

/* ------------------------------------------------------------------------------ call API */

unsigned sb_rpc_call_roles(const sb_rpc_call *call)
{
    return call->roles;
}

const char *sb_rpc_call_method(const sb_rpc_call *call)
{
    return call->m->path;
}

int64_t sb_rpc_call_deadline_left_ms(const sb_rpc_call *call)
{
    return sb_rpc__ms_until(call->deadline);
}

int sb_rpc_call_is_cancelled(sb_rpc_call *call)
{
    pthread_mutex_lock(&call->mu);
    int c = call->cancelled;
    pthread_mutex_unlock(&call->mu);
    return c;
}

void sb_rpc_call_set_cancel_cb(sb_rpc_call *call, sb_rpc_call_cb fn, void *ud)
{
    pthread_mutex_lock(&call->mu);
    call->cancel_cb = fn;
    call->cancel_ud = ud;
    /* Already cancelled (the callback is set late, from another thread): run it now, or it
     * would never run and the handle would never be ended. */
    int now = fn && call->cancelled && !call->finished && !call->cancel_notified;
    if (now)
        call->cancel_notified = 1;
    pthread_mutex_unlock(&call->mu);
    if (now)
        fn(call, ud);
}

void sb_rpc_stream_set_ready_cb(sb_rpc_call *call, sb_rpc_call_cb fn, void *ud)
{
    pthread_mutex_lock(&call->mu);
    call->ready_cb = fn;
    call->ready_ud = ud;
    pthread_mutex_unlock(&call->mu);
}

void sb_rpc_call_finish(sb_rpc_call *c, sb_rpc_code code, const char *fmt, ...)
{
    char msg[STATUS_MSG_MAX] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_lock(&c->mu);
    if (c->finished) {
        pthread_mutex_unlock(&c->mu);
        sb_log(SB_LOG_ERROR, "rpc: call ended twice (bug in the caller)", "method", c->m->path,
               (char *)NULL);
        return;
    }
    c->finished = 1;
    if (c->call && !c->closed) {
        if (c->send_busy) {
            c->status_pending = 1;
            c->pend_code = code;
            c->pend_msg = strdup(msg);
        } else {
            start_status_locked(c, code, msg, NULL);
        }
    }
    pthread_cond_broadcast(&c->cv);
    call_unref_locked(c);
}

int sb_rpc_call_reply(sb_rpc_call *c, const void *msg, size_t len, sb_err *err)
{
    grpc_slice s = grpc_slice_from_copied_buffer(msg ? (const char *)msg : "", len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->finished) {
        pthread_mutex_unlock(&c->mu);
        grpc_byte_buffer_destroy(bb);
        return sb_err_set(err, "rpc %s: reply after the call was ended", c->m->path);
    }
    c->finished = 1;
    if (c->m->streaming) {
        rc = sb_err_set(err, "rpc %s: reply on a stream (write + finish instead)", c->m->path);
        if (c->call && !c->closed && !c->send_busy)
            start_status_locked(c, SB_RPC_INTERNAL, "server replied to a stream", NULL);
        grpc_byte_buffer_destroy(bb);
    } else if (!c->call || c->closed) {
        rc = sb_err_set(err, "rpc %s: call cancelled before the reply (deadline or peer gone)",
                        c->m->path);
        grpc_byte_buffer_destroy(bb);
    } else {
        start_status_locked(c, SB_RPC_OK, NULL, bb);
    }
    pthread_cond_broadcast(&c->cv);
    call_unref_locked(c);
    return rc;
}

/* Sends bb as the next stream message; consumes bb in every case. */
static int stream_send(sb_rpc_call *c, grpc_byte_buffer *bb, sb_err *err)
{
    int rc = -1;
    pthread_mutex_lock(&c->mu);
    c->refs++; /* a waiting writer keeps the context alive */
    if (!c->m->streaming) {
        sb_err_set(err, "rpc %s: write on a unary call", c->m->path);
        goto out;
    }
    for (;;) {
        if (c->finished) {
            sb_err_set(err, "rpc %s: write after the call was ended", c->m->path);
            goto out;
        }
        if (!c->call || c->closed) {
            sb_err_set(err, "rpc %s: stream cancelled (deadline, peer gone or shutdown)",
                       c->m->path);
            goto out;
        }
        if (c->send_failed) {
            sb_err_set(err, "rpc %s: stream broken (a previous write failed)", c->m->path);
            goto out;
        }
        if (!c->send_busy)
            break;
        if (tls_on_server_thread) {
            sb_err_set(err,
                       "rpc %s: write would block on a server thread (write from the ready "
                       "callback or another thread)",
                       c->m->path);
            goto out;
        }
        pthread_cond_wait(&c->cv, &c->mu);
    }
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    }
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    c->send_busy = 1;
    c->send_bb = bb;
    c->progress_ms = mono_ms();
    c->refs++;
    grpc_call_error e = start_batch(c->srv, c->call, ops, n, &c->t_send);
    if (e != GRPC_CALL_OK) {
        c->send_busy = 0;
        c->send_bb = NULL;
        c->refs--;
        sb_err_set(err, "rpc %s: cannot send: %s", c->m->path, grpc_call_error_to_string(e));
        goto out;
    }
    c->md_sent = 1;
    bb = NULL;
    rc = 0;
out:
    call_unref_locked(c);
    if (bb)
        grpc_byte_buffer_destroy(bb);
    return rc;
}

int sb_rpc_stream_write(sb_rpc_call *call, const void *msg, size_t len, sb_err *err)
{
    grpc_slice s = grpc_slice_from_copied_buffer(msg ? (const char *)msg : "", len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return stream_send(call, bb, err);
}

int sb_rpc_stream_write_zc(sb_rpc_call *call, const sb_rpc_zc_msg *m, sb_err *err)
{
    grpc_slice s[3];
    size_t n = 0;
    int unpin_now = 0;
    if (m->head_len)
        s[n++] = grpc_slice_from_copied_buffer(m->head, m->head_len);
    if (m->payload_len) {
        if (m->unpin)
            s[n++] = grpc_slice_new_with_user_data((void *)m->payload, m->payload_len, m->unpin,
                                                   m->unpin_ud);
        else
            s[n++] = grpc_slice_from_static_buffer(m->payload, m->payload_len);
    } else if (m->unpin) {
        unpin_now = 1;
    }
    if (m->tail_len)
        s[n++] = grpc_slice_from_copied_buffer(m->tail, m->tail_len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(s, n);
    for (size_t i = 0; i < n; i++)
        grpc_slice_unref(s[i]); /* the byte buffer holds its own references */
    if (unpin_now)
        m->unpin(m->unpin_ud);
    return stream_send(call, bb, err);
}

int sb_rpc_stream_write_chunk(sb_rpc_call *call, uint64_t offset, const void *data, size_t len,
                              uint32_t crc32c, uint64_t total_length, sb_rpc_unpin_fn unpin,
                              void *unpin_ud, sb_err *err)
{
    sb_rpc_chunk_frame f;
    sb_rpc_chunk_frame_encode(&f, offset, len, crc32c, total_length);
    sb_rpc_zc_msg m = {.head = f.head,
                       .head_len = f.head_len,
                       .payload = data,
                       .payload_len = len,
                       .tail = f.tail,
                       .tail_len = f.tail_len,
                       .unpin = unpin,
                       .unpin_ud = unpin_ud};
    return sb_rpc_stream_write_zc(call, &m, err);
}
