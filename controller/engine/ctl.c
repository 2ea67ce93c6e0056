#include "controller/engine/ctl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "rpc/proto.h"

#define MAX_PENDING 1024

typedef struct {
    sb_rpc_call *call;
    char worker[128];
    uint32_t free_slots;
    uint64_t deadline_ms;
} pending_poll;

typedef struct {
    char id[128];
    uint64_t last_seen_ms;
    int live;
} seen;

struct sb_ctl {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    sb_sched *sched;
    sb_rpc_server *srv;
    char *pipeline_id, *pipeline_json;
    uint32_t hb_interval_ms, hb_timeout_ms;
    uint64_t stall_ms;
    pending_poll pending[MAX_PENDING];
    size_t npending;
    seen *workers;
    size_t nworkers, capworkers;
    size_t registered, lost;
    int shutdown_workers;
    int stop;
    pthread_t timer;
    int timer_started;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static seen *worker_seen(sb_ctl *c, const char *id, int create)
{
    for (size_t i = 0; i < c->nworkers; i++)
        if (strcmp(c->workers[i].id, id) == 0)
            return &c->workers[i];
    if (!create)
        return NULL;
    if (c->nworkers == c->capworkers) {
        size_t cap = c->capworkers ? c->capworkers * 2 : 16;
        seen *n = realloc(c->workers, cap * sizeof *n);
        if (n == NULL)
            return NULL;
        c->workers = n;
        c->capworkers = cap;
    }
    seen *w = &c->workers[c->nworkers++];
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    return w;
}

/* The worker if it is registered and live, with its last-seen time refreshed; else NULL. */
static seen *touch_worker(sb_ctl *c, const char *id)
{
    seen *w = worker_seen(c, id, 0);
    if (w == NULL || !w->live)
        return NULL;
    w->last_seen_ms = now_ms();
    return w;
}

static void free_releases(char **rel, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rel[i]);
    free(rel);
}

static void mark_lost(sb_ctl *c, seen *w, const char *why)
{
    if (!w->live)
        return;
    w->live = 0;
    c->lost++;
    sb_log(SB_LOG_WARN, "worker lost", "worker", w->id, "why", why, NULL);
    sb_sched_worker_lost(c->sched, w->id, now_ms());
}

/* ---- messages ---------------------------------------------------------------------------- */

/* Fills a PollTasksReply with the assigned tasks; everything allocated goes in one arena list
 * freed by reply_free. */
typedef struct {
    Streambatch__V1__PollTasksReply reply;
    Streambatch__V1__Task *tasks;
    Streambatch__V1__Task **task_ptrs;
    Streambatch__V1__OpArgs *ops;
    Streambatch__V1__OpArgs **op_ptrs;
    Streambatch__V1__PartitionRef *refs;
    Streambatch__V1__PartitionRef **ref_ptrs;
    char **strings;
    size_t nstrings;
} poll_reply;

static char *keep(poll_reply *r, const char *s)
{
    char *d = strdup(s ? s : "");
    if (d != NULL)
        r->strings[r->nstrings++] = d;
    return d;
}

static void poll_reply_free(poll_reply *r)
{
    for (size_t i = 0; i < r->nstrings; i++)
        free(r->strings[i]);
    free(r->strings);
    free(r->tasks);
    free(r->task_ptrs);
    free(r->ops);
    free(r->op_ptrs);
    free(r->refs);
    free(r->ref_ptrs);
}

static int poll_reply_build(sb_ctl *c, poll_reply *r, const sb_sched_task *t, size_t n)
{
    memset(r, 0, sizeof *r);
    streambatch__v1__poll_tasks_reply__init(&r->reply);
    size_t nops = 0, nrefs = 0;
    for (size_t i = 0; i < n; i++) {
        nops += t[i].nstages;
        nrefs += t[i].ninputs;
    }
    r->tasks = calloc(n + 1, sizeof *r->tasks);
    r->task_ptrs = calloc(n + 1, sizeof *r->task_ptrs);
    r->ops = calloc(nops + 1, sizeof *r->ops);
    r->op_ptrs = calloc(nops + 1, sizeof *r->op_ptrs);
    r->refs = calloc(nrefs + 1, sizeof *r->refs);
    r->ref_ptrs = calloc(nrefs + 1, sizeof *r->ref_ptrs);
    r->strings = calloc(n * 4 + nops * 2 + nrefs * 2 + 1, sizeof *r->strings);
    if (!r->tasks || !r->task_ptrs || !r->ops || !r->op_ptrs || !r->refs || !r->ref_ptrs ||
        !r->strings)
        return -1;
    size_t oi = 0, ri = 0;
    for (size_t i = 0; i < n; i++) {
        Streambatch__V1__Task *m = &r->tasks[i];
        streambatch__v1__task__init(m);
        m->task_id = keep(r, t[i].task_id);
        m->pipeline = keep(r, c->pipeline_id);
        char stage[512] = "";
        for (size_t k = 0; k < t[i].nstages; k++)
            snprintf(stage + strlen(stage), sizeof stage - strlen(stage), "%s%s", k ? "+" : "",
                     t[i].stages[k]->name);
        m->stage = keep(r, stage);
        m->stage_index = t[i].op;
        m->task_index = t[i].index;
        m->attempt = t[i].attempt;
        m->target_partition_bytes = t[i].target_bytes;
        m->source_split = keep(r, t[i].split ? t[i].split : "");
        m->writes_sink = t[i].writes_sink;
        m->n_ops = t[i].nstages;
        m->ops = &r->op_ptrs[oi];
        for (size_t k = 0; k < t[i].nstages; k++, oi++) {
            streambatch__v1__op_args__init(&r->ops[oi]);
            r->ops[oi].op = keep(r, t[i].stages[k]->op);
            r->ops[oi].args_json =
                keep(r, t[i].stages[k]->args_json ? t[i].stages[k]->args_json : "{}");
            r->op_ptrs[oi] = &r->ops[oi];
        }
        m->n_inputs = t[i].ninputs;
        m->inputs = &r->ref_ptrs[ri];
        for (size_t k = 0; k < t[i].ninputs; k++, ri++) {
            streambatch__v1__partition_ref__init(&r->refs[ri]);
            r->refs[ri].id = keep(r, t[i].inputs[k].id);
            r->refs[ri].worker_address = keep(r, t[i].inputs[k].address);
            r->refs[ri].bytes = t[i].inputs[k].bytes;
            r->ref_ptrs[ri] = &r->refs[ri];
        }
        r->task_ptrs[i] = m;
    }
    for (size_t i = 0; i < r->nstrings; i++)
        if (r->strings[i] == NULL)
            return -1;
    r->reply.n_tasks = n;
    r->reply.tasks = r->task_ptrs;
    return 0;
}

static int terminal(sb_ctl *c)
{
    return sb_sched_state_get(c->sched, NULL) != SB_SCHED_RUNNING;
}

/* Tries to answer a poll: returns 1 if the call was ended. Lock held. */
static int try_answer(sb_ctl *c, sb_rpc_call *call, const char *worker, uint32_t free_slots,
                      int force)
{
    sb_sched_task tasks[64];
    size_t n = 0;
    seen *w = worker_seen(c, worker, 0);
    /* unknown: never registered here (a new leader after failover): it gets no tasks and is
     * not told to shut down; its heartbeat asks it to register. lost: declared lost here. */
    int unknown = w == NULL, dead = w != NULL && !w->live;
    if (!unknown && !dead && !c->shutdown_workers && !terminal(c))
        n = sb_sched_assign(c->sched, worker, free_slots > 64 ? 64 : free_slots, now_ms(), tasks);
    int shutdown = c->shutdown_workers || dead;
    if (n == 0 && !force && !shutdown && !terminal(c))
        return 0;
    poll_reply r;
    sb_err err;
    if (poll_reply_build(c, &r, tasks, n) != 0) {
        poll_reply_free(&r);
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "controller out of memory");
        return 1;
    }
    r.reply.shutdown = shutdown;
    r.reply.drain = terminal(c);
    if (sb_rpc_call_reply_msg(call, &r.reply.base, &err) != 0)
        sb_log(SB_LOG_WARN, "poll reply failed", "worker", worker, "error", err.msg, NULL);
    poll_reply_free(&r);
    return 1;
}

static void serve_pending(sb_ctl *c, int force_all)
{
    uint64_t now = now_ms();
    for (size_t i = 0; i < c->npending;) {
        pending_poll *p = &c->pending[i];
        int force = force_all || now >= p->deadline_ms;
        if (try_answer(c, p->call, p->worker, p->free_slots, force)) {
            c->pending[i] = c->pending[--c->npending];
            continue;
        }
        i++;
    }
    pthread_cond_broadcast(&c->changed);
}

static void on_poll_cancel(sb_rpc_call *call, void *ud)
{
    sb_ctl *c = ud;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->npending; i++)
        if (c->pending[i].call == call) {
            c->pending[i] = c->pending[--c->npending];
            sb_rpc_call_finish(call, SB_RPC_CANCELLED, "poll cancelled");
            break;
        }
    pthread_mutex_unlock(&c->mu);
}

static void h_register(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_ctl *c = ud;
    Streambatch__V1__RegisterRequest *m = (Streambatch__V1__RegisterRequest *)sb_rpc_call_decode(
        call, &streambatch__v1__register_request__descriptor, req, len);
    if (m == NULL)
        return;
    sb_sched_output *held = calloc(m->n_partitions + 1, sizeof *held);
    for (size_t i = 0; held && i < m->n_partitions; i++) {
        held[i].id = m->partitions[i]->id;
        held[i].bytes = m->partitions[i]->bytes;
        held[i].rows = m->partitions[i]->rows;
    }
    sb_err err;
    pthread_mutex_lock(&c->mu);
    int rc = held == NULL ? -1
                          : sb_sched_worker_add(c->sched, m->worker_id, m->pool, m->address,
                                                m->slots, held, m->n_partitions, now_ms(), &err);
    if (held == NULL)
        snprintf(err.msg, sizeof err.msg, "out of memory");
    if (rc == 0) {
        seen *w = worker_seen(c, m->worker_id, 1);
        if (w != NULL) {
            w->live = 1;
            w->last_seen_ms = now_ms();
        }
        c->registered++;
        Streambatch__V1__RegisterReply rep = STREAMBATCH__V1__REGISTER_REPLY__INIT;
        rep.heartbeat_interval_ms = c->hb_interval_ms;
        rep.controller_id = c->pipeline_id;
        rep.pipeline_json = c->pipeline_json;
        char **rel = NULL;
        rep.n_release = sb_sched_take_releases(c->sched, m->worker_id, &rel);
        rep.release = rel;
        sb_rpc_call_reply_msg(call, &rep.base, NULL);
        free_releases(rel, rep.n_release);
        sb_log(SB_LOG_INFO, "worker registered", "worker", m->worker_id, "pool", m->pool, "address",
               m->address, NULL);
        serve_pending(c, 0);
    } else {
        sb_rpc_call_finish(call, SB_RPC_INVALID_ARGUMENT, "%s", err.msg);
    }
    pthread_mutex_unlock(&c->mu);
    free(held);
    sb_rpc_msg_free(&m->base);
}

static void h_poll(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_ctl *c = ud;
    Streambatch__V1__PollTasksRequest *m = (Streambatch__V1__PollTasksRequest *)sb_rpc_call_decode(
        call, &streambatch__v1__poll_tasks_request__descriptor, req, len);
    if (m == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    touch_worker(c, m->worker_id);
    uint32_t slots = m->free_slots ? m->free_slots : 1;
    if (!try_answer(c, call, m->worker_id, slots, m->wait_ms == 0)) {
        if (c->npending == MAX_PENDING) {
            try_answer(c, call, m->worker_id, slots, 1);
        } else {
            pending_poll *p = &c->pending[c->npending++];
            p->call = call;
            snprintf(p->worker, sizeof p->worker, "%s", m->worker_id);
            p->free_slots = slots;
            p->deadline_ms = now_ms() + (m->wait_ms > 30000 ? 30000 : m->wait_ms);
            sb_rpc_call_set_cancel_cb(call, on_poll_cancel, c);
        }
    }
    pthread_mutex_unlock(&c->mu);
    sb_rpc_msg_free(&m->base);
}

static sb_sched_status status_of(Streambatch__V1__TaskStatus s, int deterministic)
{
    switch (s) {
    case STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK:
        return SB_SCHED_OK;
    case STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_INPUT_LOST:
        return SB_SCHED_INPUT_LOST;
    default:
        return deterministic ? SB_SCHED_ERROR_DATA : SB_SCHED_ERROR;
    }
}

static void h_complete(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_ctl *c = ud;
    Streambatch__V1__CompleteTaskRequest *m =
        (Streambatch__V1__CompleteTaskRequest *)sb_rpc_call_decode(
            call, &streambatch__v1__complete_task_request__descriptor, req, len);
    if (m == NULL)
        return;
    sb_sched_output *outs = calloc(m->n_outputs + 1, sizeof *outs);
    if (outs == NULL) {
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "controller out of memory");
        sb_rpc_msg_free(&m->base);
        return;
    }
    for (size_t i = 0; i < m->n_outputs; i++) {
        outs[i].id = m->outputs[i]->id;
        outs[i].bytes = m->outputs[i]->bytes;
        outs[i].rows = m->outputs[i]->rows;
        outs[i].crc32c = m->outputs[i]->crc32c;
    }
    pthread_mutex_lock(&c->mu);
    seen *w = touch_worker(c, m->worker_id);
    int rc = 0;
    sb_err err = {{0}};
    if (w != NULL) {
        sb_sched_metrics met = {m->metrics ? m->metrics->wall_seconds : 0,
                                m->metrics ? m->metrics->cpu_seconds : 0};
        rc = sb_sched_complete(c->sched, m->worker_id, m->task_id, m->attempt,
                               status_of(m->status, m->deterministic), m->message, outs,
                               m->n_outputs, (const char *const *)m->lost_inputs, m->n_lost_inputs,
                               &met, now_ms(), &err);
        if (m->status != STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK)
            sb_log(SB_LOG_WARN, "task failed", "task", m->task_id, "worker", m->worker_id, "error",
                   m->message, NULL);
    }
    Streambatch__V1__CompleteTaskReply rep = STREAMBATCH__V1__COMPLETE_TASK_REPLY__INIT;
    rep.accepted = rc == 1;
    char **rel = NULL;
    if (w != NULL)
        rep.n_release = sb_sched_take_releases(c->sched, m->worker_id, &rel);
    rep.release = rel;
    sb_rpc_call_reply_msg(call, &rep.base, NULL);
    free_releases(rel, rep.n_release);
    if (rc < 0)
        sb_log(SB_LOG_WARN, "completion rejected", "task", m->task_id, "error", err.msg, NULL);
    serve_pending(c, 0);
    pthread_mutex_unlock(&c->mu);
    free(outs);
    sb_rpc_msg_free(&m->base);
}

static void h_heartbeat(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_ctl *c = ud;
    Streambatch__V1__HeartbeatRequest *m = (Streambatch__V1__HeartbeatRequest *)sb_rpc_call_decode(
        call, &streambatch__v1__heartbeat_request__descriptor, req, len);
    if (m == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    seen *w = touch_worker(c, m->worker_id);
    Streambatch__V1__HeartbeatReply rep = STREAMBATCH__V1__HEARTBEAT_REPLY__INIT;
    char **rel = NULL;
    if (w != NULL) {
        rep.n_release = sb_sched_take_releases(c->sched, m->worker_id, &rel);
        rep.release = rel;
    } else if (worker_seen(c, m->worker_id, 0) == NULL) {
        rep.reregister = 1; /* unknown here (a new leader): register again with what it holds */
    } else {
        rep.shutdown = 1; /* declared lost: its partitions are being recomputed elsewhere */
    }
    rep.shutdown |= c->shutdown_workers;
    rep.drain = terminal(c);
    sb_rpc_call_reply_msg(call, &rep.base, NULL);
    free_releases(rel, rep.n_release);
    pthread_mutex_unlock(&c->mu);
    sb_rpc_msg_free(&m->base);
}

static void *timer_main(void *arg)
{
    sb_ctl *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->changed, &c->mu, &ts);
        uint64_t now = now_ms();
        for (size_t i = 0; i < c->nworkers; i++)
            if (c->workers[i].live && now > c->workers[i].last_seen_ms + c->hb_timeout_ms)
                mark_lost(c, &c->workers[i], "missed heartbeats");
        serve_pending(c, 0);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

sb_ctl *sb_ctl_start(const sb_ctl_config *cfg, const sb_rpc_opts *opts, sb_err *err)
{
    sb_ctl *c = calloc(1, sizeof *c);
    if (c == NULL) {
        sb_err_set(err, "controller: out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->changed, NULL);
    c->hb_interval_ms = cfg->heartbeat_interval_ms ? cfg->heartbeat_interval_ms : 500;
    c->hb_timeout_ms = cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms : 5000;
    c->pipeline_id = strdup(cfg->pipeline_id ? cfg->pipeline_id : "pipeline");
    c->pipeline_json = strdup(cfg->pipeline_json ? cfg->pipeline_json : "{}");
    sb_sched_config sc = {.pipeline = cfg->pipeline,
                          .pipeline_id = c->pipeline_id,
                          .no_fusion = cfg->no_fusion,
                          .start_ms = now_ms(),
                          .resume = cfg->resume};
    if (c->pipeline_id == NULL || c->pipeline_json == NULL)
        goto fail;
    c->sched = sb_sched_new(&sc, cfg->splits, cfg->nsplits, err);
    if (c->sched == NULL)
        goto fail;
    c->srv = sb_rpc_server_new(opts, err);
    if (c->srv == NULL ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_REGISTER, h_register, c, err) != 0 ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_POLL_TASKS, h_poll, c, err) != 0 ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_COMPLETE_TASK, h_complete, c, err) != 0 ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_HEARTBEAT, h_heartbeat, c, err) != 0 ||
        sb_rpc_server_listen(c->srv, cfg->listen_addr ? cfg->listen_addr : "127.0.0.1:0", err) <
            0 ||
        sb_rpc_server_start(c->srv, err) != 0)
        goto fail;
    if (pthread_create(&c->timer, NULL, timer_main, c) != 0) {
        sb_err_set(err, "controller: cannot start the timer thread");
        goto fail;
    }
    c->timer_started = 1;
    return c;
fail:
    sb_ctl_free(c);
    return NULL;
}

int sb_ctl_port(const sb_ctl *c)
{
    return sb_rpc_server_port(c->srv);
}

void sb_ctl_worker_exited(sb_ctl *c, const char *worker_id, const char *why)
{
    pthread_mutex_lock(&c->mu);
    seen *w = worker_seen(c, worker_id, 0);
    if (w != NULL)
        mark_lost(c, w, why);
    serve_pending(c, 0);
    pthread_mutex_unlock(&c->mu);
}

sb_sched_state sb_ctl_wait(sb_ctl *c, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    pthread_mutex_lock(&c->mu);
    sb_sched_state st;
    while ((st = sb_sched_state_get(c->sched, NULL)) == SB_SCHED_RUNNING && now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->changed, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

void sb_ctl_snapshot_get(sb_ctl *c, sb_ctl_snapshot *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    const char *why = NULL;
    out->state = sb_sched_state_get(c->sched, &why);
    if (why != NULL)
        snprintf(out->failure, sizeof out->failure, "%s", why);
    sb_sched_get_stats(c->sched, &out->stats);
    out->nops = sb_sched_op_count(c->sched);
    if (out->nops > 16)
        out->nops = 16;
    for (size_t i = 0; i < out->nops; i++)
        sb_sched_get_op_stats(c->sched, i, &out->ops[i]);
    out->workers_registered = c->registered;
    out->workers_lost = c->lost;
    pthread_mutex_unlock(&c->mu);
}

int sb_ctl_stalled(sb_ctl *c, uint64_t stall_ms, char *buf, size_t len)
{
    pthread_mutex_lock(&c->mu);
    int r = sb_sched_stalled(c->sched, now_ms(), stall_ms, buf, len);
    pthread_mutex_unlock(&c->mu);
    return r;
}

sb_sched_output *sb_ctl_sink_parts(sb_ctl *c, size_t *n)
{
    pthread_mutex_lock(&c->mu);
    size_t k;
    const sb_sched_output *p = sb_sched_sink_parts(c->sched, &k);
    sb_sched_output *out = calloc(k + 1, sizeof *out);
    for (size_t i = 0; out != NULL && i < k; i++) {
        out[i] = p[i];
        out[i].id = strdup(p[i].id);
    }
    pthread_mutex_unlock(&c->mu);
    *n = out ? k : 0;
    return out;
}

void sb_ctl_parts_free(sb_sched_output *parts, size_t n)
{
    for (size_t i = 0; parts != NULL && i < n; i++)
        free((char *)parts[i].id);
    free(parts);
}

sb_sched_errored *sb_ctl_errored(sb_ctl *c, size_t *n, uint64_t *total)
{
    pthread_mutex_lock(&c->mu);
    size_t k;
    const sb_sched_errored *e = sb_sched_errored_list(c->sched, &k, total);
    sb_sched_errored *out = k > 0 ? calloc(k, sizeof *out) : NULL;
    size_t got = 0;
    for (size_t i = 0; out != NULL && i < k; i++, got++) {
        out[i].stage = strdup(e[i].stage);
        out[i].task_id = strdup(e[i].task_id);
        out[i].input = strdup(e[i].input);
        out[i].error = strdup(e[i].error);
        if (!out[i].stage || !out[i].task_id || !out[i].input || !out[i].error) {
            sb_ctl_errored_free(out, i + 1);
            out = NULL;
            got = 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    *n = got;
    return out;
}

void sb_ctl_errored_free(sb_sched_errored *e, size_t n)
{
    for (size_t i = 0; e != NULL && i < n; i++) {
        free((char *)e[i].stage);
        free((char *)e[i].task_id);
        free((char *)e[i].input);
        free((char *)e[i].error);
    }
    free(e);
}

int sb_ctl_checkpoint(sb_ctl *c, char **ranges, sb_sched_output **parts, size_t *n, sb_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc = sb_sched_checkpoint(c->sched, ranges, parts, n, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int sb_ctl_worker_removable(sb_ctl *c, const char *worker_id)
{
    pthread_mutex_lock(&c->mu);
    int r = sb_sched_worker_removable(c->sched, worker_id);
    pthread_mutex_unlock(&c->mu);
    return r;
}

void sb_ctl_pool_demand(sb_ctl *c, const char *pool, uint64_t *queued, uint64_t *running,
                        int *active)
{
    pthread_mutex_lock(&c->mu);
    sb_sched_pool_demand(c->sched, pool, queued, running, active);
    pthread_mutex_unlock(&c->mu);
}

void sb_ctl_shutdown_workers(sb_ctl *c)
{
    pthread_mutex_lock(&c->mu);
    c->shutdown_workers = 1;
    serve_pending(c, 1);
    pthread_mutex_unlock(&c->mu);
}

void sb_ctl_free(sb_ctl *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    c->shutdown_workers = 1;
    if (c->sched != NULL)
        serve_pending(c, 1);
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
    if (c->timer_started)
        pthread_join(c->timer, NULL);
    sb_rpc_server_free(c->srv);
    sb_sched_free(c->sched);
    free(c->workers);
    free(c->pipeline_id);
    free(c->pipeline_json);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->changed);
    free(c);
}
