/* ctl.c — the Control service (see ctl.h): the gRPC handlers workers call (register, poll for
 * tasks, complete, heartbeat), the storage jobs that plan the source and prepare and commit the
 * sink on workers, the timer thread that expires polls, loses silent workers and watches for
 * stalls, and the snapshots the backends read. Owns the scheduler, its mutex and the timer. */

#include "controller/ctl/ctl.h"
#include "controller/sched/stream/deal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/sched/strmap.h"
#include "io/split.h"
#include "core/log.h"
#include "core/redact.h"
#include "rpc/proto.h"

#define MAX_PENDING 1024

/* What a poll with batched completions is answered with beside its tasks (PollTasksReply
 * accepted + release). */
typedef struct {
    int batched; /* the request carried completions: the reply says accepted + release */
    protobuf_c_boolean *accepted; /* malloc'd, one per completion */
    size_t naccepted;
} poll_acks;

typedef struct {
    sb_rpc_call *call;
    char worker[128];
    uint32_t free_slots, batch;
    uint64_t deadline_ms;
    poll_acks acks;
} pending_poll;

typedef struct {
    char id[128];
    uint64_t last_seen_ms;
    int live;
    /* registered while planning (no scheduler yet): added to it when the plan is ready */
    int deferred;
    char pool[32], address[256];
    uint32_t slots;
    int early; /* RegisterRequest.early_outputs */
    sb_storage_output *held;
    size_t nheld;
    sb_ctl_worker_figures fig; /* from its latest heartbeat */
    int told_lost;             /* declared lost, it came back and was told to shut down (logged) */
    int retired;               /* drained, then retired: told to shut down, not lost */
    int suspect; /* silent for SUSPECT_BEATS heartbeat intervals (sb_sched_worker_suspect) */
    char session[SB_RPC_TOKEN_HEX + 1]; /* RegisterRequest.session of its latest registration */
} seen;

enum { JOB_NONE, JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED };

/* The storage job in flight (one at a time). */
typedef struct {
    sb_storage_kind kind;
    int state;
    uint32_t attempt;
    uint64_t seq;
    char id[400];
    char worker[128];
    sb_storage_output *parts; /* COMMIT: ids malloc'd */
    size_t nparts;
    sb_storage_files files; /* CKPT_PUT: the files to write (owned) */
    int prune;              /* CKPT_PUT: then remove the log's other files */
    uint64_t since_ms;      /* queued (or re-queued) at */
    char msg[SB_ERR_MAX + 256];
} storage_job;

struct sb_ctl {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    sb_sched *sched;
    sb_sched_config stream; /* its stream fields (sb_ctl_config.stream) */
    sb_deal *deal;          /* the stream's dealer, made at the first StreamNext */
    sb_rpc_server *srv;
    char *pipeline_id, *pipeline_json, *sink_tag;
    uint32_t hb_interval_ms, hb_timeout_ms;
    uint64_t stall_ms;
    pending_poll pending[MAX_PENDING];
    size_t npending;
    seen *workers;
    size_t nworkers, capworkers;
    sb_strmap worker_index; /* id -> index in workers (entries are never removed) */
    size_t registered, lost;
    size_t max_workers; /* live workers at most (sb_ctl_config.max_workers) */
    /* sick workers drained by the scheduler: notices not yet taken (sb_ctl_drains_take; the
     * oldest are dropped past SB_CTL_DRAIN_KEEP) and how many were retired */
    sb_ctl_drain drain_notes[SB_CTL_DRAIN_KEEP];
    size_t ndrain_notes;
    size_t retired;
    int shutdown_workers;
    int stop;
    pthread_t timer;
    int timer_started;
    /* storage jobs (storage_on_workers) */
    const sb_pipeline *pipeline;
    int no_fusion, no_fuse_choices;
    int no_tail_sizing, no_speculation, no_drain, no_eft, no_early,
        no_early_reduce; /* sb_ctl_config */
    int planning;        /* PLAN/PREPARE under way: sched is NULL */
    int failed;          /* a storage job failed the pipeline before the scheduler */
    char failure[SB_ERR_MAX + 256];
    sb_storage_pieces plan; /* the PLAN result being received */
    size_t nsplits;
    const char *job_pool; /* the pool whose demand a storage job counts in */
    storage_job job;
    int have_resume;
    sb_sched_resume resume; /* deep copy: ranges and parts malloc'd */
    char resume_plan_hash[17], plan_hash[17];
    int resume_dropped;
    /* the checkpoint log read before planning (sb_ctl_config.ckpt_load) */
    int load_state;          /* 0 reading, 1 read, -1 failed (load_msg), 2 taken */
    sb_storage_files loaded; /* the files read (pieces appended in order) */
    uint64_t load_pieces;    /* pieces received */
    char load_msg[SB_ERR_MAX + 256];
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void held_free(seen *w)
{
    for (size_t i = 0; i < w->nheld; i++)
        free((char *)w->held[i].id);
    free(w->held);
    w->held = NULL;
    w->nheld = 0;
    w->deferred = 0;
}

static sb_sched_state state_of(sb_ctl *c, const char **why)
{
    if (c->failed) {
        if (why != NULL)
            *why = c->failure;
        return SB_SCHED_FAILED;
    }
    if (c->sched == NULL) {
        if (why != NULL)
            *why = NULL;
        return SB_SCHED_RUNNING;
    }
    return sb_sched_state_get(c->sched, why);
}

static seen *worker_seen(sb_ctl *c, const char *id, int create)
{
    size_t i;
    if (sb_strmap_get(&c->worker_index, id, &i))
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
    seen *w = &c->workers[c->nworkers];
    memset(w, 0, sizeof *w);
    snprintf(w->id, sizeof w->id, "%s", id);
    if (sb_strmap_put(&c->worker_index, w->id, c->nworkers) != 0)
        return NULL;
    c->nworkers++;
    return w;
}

/* 1 when a and b are the same session (64 characters), compared in constant time. */
static int session_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL || strlen(a) != SB_RPC_TOKEN_HEX || strlen(b) != SB_RPC_TOKEN_HEX)
        return 0;
    unsigned char d = 0;
    for (int i = 0; i < SB_RPC_TOKEN_HEX; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* With c->mu held: 1 (and the call answered PERMISSION_DENIED) when worker `id` is known and
 * the call does not carry the session it registered with: another holder of the pipeline's
 * worker token speaking for it (a forged completion, a stolen poll). */
static int session_refused(sb_ctl *c, sb_rpc_call *call, const char *id, const char *session)
{
    seen *w = worker_seen(c, id, 0);
    if (w == NULL || w->session[0] == '\0' || session_eq(w->session, session))
        return 0;
    sb_log(SB_LOG_WARN, "call refused: not the registered worker's session", "worker", id, "method",
           sb_rpc_call_method(call), NULL);
    sb_rpc_call_finish(call, SB_RPC_PERMISSION_DENIED,
                       "worker %s: this call does not carry the session the worker registered "
                       "with",
                       id);
    return 1;
}

/* With c->mu held: the live workers. */
static size_t live_workers(const sb_ctl *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nworkers; i++)
        n += c->workers[i].live != 0;
    return n;
}

/* With c->mu held: 1 (and the call answered) when a registration must be refused: a session
 * that is not 64 hex characters, a live worker of that id registered with another session, or
 * a new worker past max_workers. */
static int register_refused(sb_ctl *c, sb_rpc_call *call, const Streambatch__V1__RegisterRequest *m)
{
    sb_err err;
    if (sb_rpc_hex64_check(m->session, "RegisterRequest.session", &err) != 0) {
        sb_rpc_call_finish(call, SB_RPC_INVALID_ARGUMENT, "%s", err.msg);
        return 1;
    }
    seen *w = worker_seen(c, m->worker_id, 0);
    if (w != NULL && w->live && w->session[0] && !session_eq(w->session, m->session)) {
        sb_log(SB_LOG_WARN, "registration refused: the worker id is live with another session",
               "worker", m->worker_id, NULL);
        sb_rpc_call_finish(call, SB_RPC_PERMISSION_DENIED,
                           "worker %s is registered and live with another session", m->worker_id);
        return 1;
    }
    if ((w == NULL || !w->live) && live_workers(c) >= c->max_workers) {
        char n[32];
        snprintf(n, sizeof n, "%zu", c->max_workers);
        sb_log(SB_LOG_WARN, "registration refused: too many workers", "worker", m->worker_id,
               "max_workers", n, NULL);
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED,
                           "pipeline %s has %zu live workers, the most it takes", c->pipeline_id,
                           c->max_workers);
        return 1;
    }
    return 0;
}

/* The worker if it is registered and live, with its last-seen time refreshed; else NULL. */
static seen *touch_worker(sb_ctl *c, const char *id)
{
    seen *w = worker_seen(c, id, 0);
    if (w == NULL || !w->live)
        return NULL;
    w->last_seen_ms = now_ms();
    if (w->suspect) { /* heard from again */
        w->suspect = 0;
        if (c->sched != NULL)
            sb_sched_worker_suspect(c->sched, w->id, 0);
    }
    return w;
}

/* A frozen worker (a stopped process, a stalled node) sends nothing: after SUSPECT_BEATS
 * heartbeat intervals of silence its running tasks may be copied at once (it is suspect), long
 * before the heartbeat timeout declares it lost; it is not lost, so nothing is re-made. */
#define SUSPECT_BEATS 3
static void suspect_tick(sb_ctl *c, seen *w, uint64_t now)
{
    if (w->suspect || c->sched == NULL ||
        now <= w->last_seen_ms + (uint64_t)SUSPECT_BEATS * c->hb_interval_ms)
        return;
    w->suspect = 1;
    sb_sched_worker_suspect(c->sched, w->id, 1);
    char ms[32];
    snprintf(ms, sizeof ms, "%" PRIu64, now - w->last_seen_ms);
    sb_log(SB_LOG_INFO, "worker silent: suspect, its tasks may be copied", "worker", w->id,
           "silent_ms", ms, NULL);
}

static void free_releases(char **rel, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(rel[i]);
    free(rel);
}

static void job_queue(sb_ctl *c, sb_storage_kind kind)
{
    storage_job *j = &c->job;
    j->kind = kind;
    j->state = JOB_QUEUED;
    j->attempt = 0;
    j->seq++;
    snprintf(j->id, sizeof j->id, "%s/storage-%llu", c->pipeline_id, (unsigned long long)j->seq);
    j->worker[0] = '\0';
    j->msg[0] = '\0';
    j->since_ms = now_ms();
    if (kind == SB_STORAGE_PLAN)
        sb_storage_pieces_free(&c->plan);
    if (kind == SB_STORAGE_CKPT_LOAD) {
        sb_storage_files_free(&c->loaded);
        c->load_pieces = 0;
    }
}

/* The worker is gone for this controller: lost (counted, logged as a warning) or retired after a
 * drain. Either way its next poll or heartbeat is answered shutdown. */
static void worker_end(sb_ctl *c, seen *w, const char *why, int lost)
{
    if (!w->live)
        return;
    w->live = 0;
    if (lost) {
        c->lost++;
        sb_log(SB_LOG_WARN, "worker lost", "worker", w->id, "why", why, NULL);
    } else {
        c->retired++;
        w->retired = 1;
        sb_log(SB_LOG_INFO, "worker retired", "worker", w->id, "why", why, NULL);
    }
    held_free(w);
    if (c->sched != NULL)
        sb_sched_worker_lost(c->sched, w->id, why, now_ms());
    storage_job *j = &c->job;
    if (j->state == JOB_RUNNING && strcmp(j->worker, w->id) == 0) {
        /* storage jobs are idempotent: the next worker that polls runs it again */
        j->state = JOB_QUEUED;
        j->attempt++;
        j->worker[0] = '\0';
        j->since_ms = now_ms();
        if (j->kind == SB_STORAGE_PLAN)
            sb_storage_pieces_free(&c->plan);
        if (j->kind == SB_STORAGE_CKPT_LOAD) {
            sb_storage_files_free(&c->loaded);
            c->load_pieces = 0;
        }
        sb_log(SB_LOG_WARN, "storage job re-queued: its worker was lost", "job", j->id, "worker",
               w->id, "what", sb_storage_kind_what(j->kind), NULL);
    }
}

static void mark_lost(sb_ctl *c, seen *w, const char *why)
{
    worker_end(c, w, why, 1);
}

/* Sick workers (sched.c, "Draining sick workers"): the scheduler's new drain notices are logged
 * and kept for sb_ctl_drains_take; a drained worker that holds nothing still needed is retired
 * (told to shut down; the backend replaces the process or pod that ends). Lock held. */
static void drain_tick(sb_ctl *c)
{
    if (c->sched == NULL)
        return;
    sb_sched_drain d[8];
    size_t n;
    while ((n = sb_sched_drains_take(c->sched, d, 8)) > 0) {
        for (size_t i = 0; i < n; i++) {
            char speed[64], median[64];
            snprintf(speed, sizeof speed, "%.0f", d[i].speed);
            snprintf(median, sizeof median, "%.0f", d[i].median);
            sb_log(SB_LOG_WARN, "worker drained: persistently far slower than its pool", "worker",
                   d[i].worker_id, "stage", d[i].op, "bytes_per_s", speed, "pool_median", median,
                   NULL);
            if (c->ndrain_notes == SB_CTL_DRAIN_KEEP) {
                memmove(c->drain_notes, c->drain_notes + 1,
                        (SB_CTL_DRAIN_KEEP - 1) * sizeof *c->drain_notes);
                c->ndrain_notes--;
            }
            sb_ctl_drain *o = &c->drain_notes[c->ndrain_notes++];
            snprintf(o->worker_id, sizeof o->worker_id, "%s", d[i].worker_id);
            snprintf(o->pool, sizeof o->pool, "%s", d[i].pool);
            snprintf(o->stage, sizeof o->stage, "%s", d[i].op);
            o->speed = d[i].speed;
            o->median = d[i].median;
        }
    }
    for (size_t i = 0; i < c->nworkers && sb_sched_draining_count(c->sched) > 0; i++) {
        seen *w = &c->workers[i];
        if (w->live && sb_sched_worker_draining(c->sched, w->id) &&
            sb_sched_worker_removable(c->sched, w->id))
            worker_end(c, w, "drained: persistently far slower than its pool", 0);
    }
}

/* The plan is complete and the sink prepared: the scheduler starts, with every worker that
 * registered meanwhile. Lock held. */
static void plan_ready(sb_ctl *c)
{
    sb_storage_split *ss = calloc(c->plan.n + 1, sizeof *ss);
    sb_err err = {0};
    if (ss == NULL) {
        snprintf(c->failure, sizeof c->failure, "starting the scheduler: out of memory");
        c->failed = 1;
        return;
    }
    uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 of the encoded splits, NUL-separated */
    for (size_t i = 0; i < c->plan.n; i++) {
        ss[i].split = c->plan.enc[i];
        ss[i].bytes = c->plan.bytes[i];
        for (const unsigned char *p = (const unsigned char *)c->plan.enc[i];; p++) {
            h = (h ^ *p) * 1099511628211ULL;
            if (*p == '\0')
                break;
        }
    }
    snprintf(c->plan_hash, sizeof c->plan_hash, "%016llx", (unsigned long long)h);
    if (c->have_resume && c->resume_plan_hash[0] != '\0' &&
        strcmp(c->resume_plan_hash, c->plan_hash) != 0) {
        sb_log(SB_LOG_WARN, "the source changed since the checkpoint: every split runs again",
               "pipeline", c->pipeline_id, "checkpoint_plan", c->resume_plan_hash, "plan",
               c->plan_hash, NULL);
        free((char *)c->resume.committed_splits);
        sb_sched_parts_free((sb_storage_output *)c->resume.parts, c->resume.nparts);
        c->resume.committed_splits = strdup("");
        c->resume.parts = NULL;
        c->resume.nparts = 0;
        c->resume_dropped = 1;
        if (c->resume.committed_splits == NULL) {
            free(ss);
            snprintf(c->failure, sizeof c->failure, "starting the scheduler: out of memory");
            c->failed = 1;
            return;
        }
    }
    sb_sched_config sc = {.pipeline = c->pipeline,
                          .pipeline_id = c->pipeline_id,
                          .no_fusion = c->no_fusion,
                          .no_fuse_choices = c->no_fuse_choices,
                          .no_tail_sizing = c->no_tail_sizing,
                          .no_speculation = c->no_speculation,
                          .no_drain = c->no_drain,
                          .no_eft = c->no_eft,
                          .no_early = c->no_early,
                          .no_early_reduce = c->no_early_reduce,
                          .start_ms = now_ms(),
                          .resume = c->have_resume ? &c->resume : NULL,
                          .stream = c->stream.stream,
                          .stream_cache =
                              c->stream.stream && sb_sink_stream_cache(&c->pipeline->spec.sink),
                          .stream_epochs = c->stream.stream_epochs,
                          .stream_first = c->stream.stream_first,
                          .stream_shuffle = c->stream.stream_shuffle,
                          .stream_seed = c->stream.stream_seed,
                          .join_right = c->plan.join_right,
                          .njoin_right = c->plan.njoin_right};
    c->sched = sb_sched_new(&sc, ss, c->plan.n, &err);
    free(ss);
    c->nsplits = c->plan.n;
    sb_storage_pieces_free(&c->plan);
    c->planning = 0;
    if (c->sched == NULL) {
        snprintf(c->failure, sizeof c->failure, "starting the scheduler: %s", err.msg);
        c->failed = 1;
        return;
    }
    char n[32];
    snprintf(n, sizeof n, "%zu", c->nsplits);
    sb_log(SB_LOG_INFO, "source planned on a worker", "pipeline", c->pipeline_id, "splits", n,
           NULL);
    for (size_t i = 0; i < c->nworkers; i++) {
        seen *w = &c->workers[i];
        if (!w->live || !w->deferred)
            continue;
        if (sb_sched_worker_add(c->sched, w->id, w->pool, w->address, w->slots, w->held, w->nheld,
                                now_ms(), &err) != 0) {
            sb_log(SB_LOG_WARN, "adding a worker to the scheduler failed", "worker", w->id, "error",
                   err.msg, NULL);
            w->live = 0;
        } else {
            sb_sched_worker_set_early(c->sched, w->id, w->early);
        }
        held_free(w);
    }
}

/* The job in flight ended (ok, or failed with c->job.msg). Lock held. */
static void job_ended(sb_ctl *c, int ok, const char *msg)
{
    storage_job *j = &c->job;
    char full[sizeof j->msg];
    if (!ok) {
        snprintf(full, sizeof full, "%s on worker %s: %s", sb_storage_kind_what(j->kind), j->worker,
                 msg && msg[0] ? msg : "failed");
        /* a worker's message may quote a URI: it becomes the pipeline's failure, its status */
        sb_redact_text(full, j->msg, sizeof j->msg);
        sb_log(SB_LOG_WARN, "storage job failed", "job", j->id, "error", j->msg, NULL);
    }
    j->state = ok ? JOB_DONE : JOB_FAILED;
    if (c->planning && j->kind == SB_STORAGE_CKPT_LOAD) {
        /* a log that cannot be read is the caller's to report: planning waits for
         * sb_ctl_plan_continue either way */
        c->load_state = ok ? 1 : -1;
        snprintf(c->load_msg, sizeof c->load_msg, "%s", ok ? "" : j->msg);
    } else if (c->planning) {
        if (!ok) {
            snprintf(c->failure, sizeof c->failure, "%s", j->msg);
            c->failed = 1;
            c->planning = 0;
        } else if (j->kind == SB_STORAGE_PLAN) {
            job_queue(c, SB_STORAGE_PREPARE);
        } else {
            plan_ready(c);
        }
    }
    pthread_cond_broadcast(&c->changed);
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
    r->strings = calloc(n * 5 + nops * 2 + nrefs * 2 + 1, sizeof *r->strings);
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
        m->publish_early = t[i].publish_early;
        m->sink_schema = keep(r, t[i].sink_schema);
        m->infer_sink_schema = t[i].infer_sink_schema;
        m->inputs_open = t[i].inputs_open;
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
    return state_of(c, NULL) != SB_SCHED_RUNNING;
}

/* Puts a batched poll's acks into its reply: accepted, and the worker's releases taken from the
 * scheduler (as a CompleteTaskReply does; a live worker only). Returns the releases to free
 * with free_releases(rel, rep->n_release) after the reply was sent. Lock held. */
static char **acks_put(sb_ctl *c, Streambatch__V1__PollTasksReply *rep, const char *worker,
                       const poll_acks *acks)
{
    if (acks == NULL || !acks->batched)
        return NULL;
    rep->n_accepted = acks->naccepted;
    rep->accepted = acks->accepted;
    char **rel = NULL;
    seen *w = worker_seen(c, worker, 0);
    if (w != NULL && w->live && c->sched != NULL)
        rep->n_release = sb_sched_take_releases(c->sched, worker, &rel);
    rep->release = rel;
    return rel;
}

/* Hands the queued storage job to the worker in a poll reply. Lock held. */
static void answer_job(sb_ctl *c, sb_rpc_call *call, const char *worker, const poll_acks *acks)
{
    storage_job *j = &c->job;
    Streambatch__V1__PollTasksReply rep = STREAMBATCH__V1__POLL_TASKS_REPLY__INIT;
    Streambatch__V1__StorageJob m = STREAMBATCH__V1__STORAGE_JOB__INIT;
    Streambatch__V1__PartitionInfo *infos = calloc(j->nparts + 1, sizeof *infos);
    Streambatch__V1__PartitionInfo **ptrs = calloc(j->nparts + 1, sizeof *ptrs);
    if (infos == NULL || ptrs == NULL) {
        free(infos);
        free(ptrs);
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "controller out of memory");
        return;
    }
    m.job_id = j->id;
    m.kind = (Streambatch__V1__StorageJobKind)j->kind;
    m.attempt = j->attempt;
    for (size_t i = 0; i < j->nparts; i++) {
        streambatch__v1__partition_info__init(&infos[i]);
        infos[i].id = (char *)j->parts[i].id;
        infos[i].bytes = j->parts[i].bytes;
        infos[i].rows = j->parts[i].rows;
        infos[i].crc32c = j->parts[i].crc32c;
        ptrs[i] = &infos[i];
    }
    m.n_parts = j->nparts;
    m.parts = ptrs;
    /* COMMIT lists the partitions skipped under maxErroredPartitions (for _manifest.json). */
    size_t nerr = 0;
    const sb_storage_errored *errs = j->kind == SB_STORAGE_COMMIT && c->sched != NULL
                                         ? sb_sched_errored_list(c->sched, &nerr, NULL)
                                         : NULL;
    Streambatch__V1__ErroredPartition *einfos = calloc(nerr + 1, sizeof *einfos);
    Streambatch__V1__ErroredPartition **eptrs = calloc(nerr + 1, sizeof *eptrs);
    if (einfos == NULL || eptrs == NULL) {
        free(einfos);
        free(eptrs);
        free(infos);
        free(ptrs);
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "controller out of memory");
        return;
    }
    for (size_t i = 0; i < nerr; i++) {
        streambatch__v1__errored_partition__init(&einfos[i]);
        einfos[i].stage = (char *)errs[i].stage;
        einfos[i].task_id = (char *)errs[i].task_id;
        einfos[i].input = (char *)errs[i].input;
        einfos[i].error = (char *)errs[i].error;
        eptrs[i] = &einfos[i];
    }
    m.n_errored = nerr;
    m.errored = eptrs;
    Streambatch__V1__CheckpointFile *cf = calloc(j->files.n + 1, sizeof *cf);
    Streambatch__V1__CheckpointFile **cfp = calloc(j->files.n + 1, sizeof *cfp);
    for (size_t i = 0; cf != NULL && cfp != NULL && i < j->files.n; i++) {
        streambatch__v1__checkpoint_file__init(&cf[i]);
        cf[i].name = j->files.v[i].name;
        cf[i].data.data = (uint8_t *)j->files.v[i].data;
        cf[i].data.len = j->files.v[i].len;
        cfp[i] = &cf[i];
    }
    m.n_files = cf != NULL && cfp != NULL ? j->files.n : 0;
    m.files = cfp;
    m.prune = j->prune;
    rep.storage_job = &m;
    char **rel = acks_put(c, &rep, worker, acks);
    sb_err err;
    int sent = sb_rpc_call_reply_msg(call, &rep.base, &err);
    free_releases(rel, rep.n_release);
    if (sent != 0) {
        /* not delivered: the job stays queued for the next poll */
        sb_log(SB_LOG_WARN, "poll reply failed", "worker", worker, "error", err.msg, NULL);
    } else {
        j->state = JOB_RUNNING;
        snprintf(j->worker, sizeof j->worker, "%s", worker);
        sb_log(SB_LOG_INFO, "storage job started", "job", j->id, "what",
               sb_storage_kind_what(j->kind), "worker", worker, NULL);
    }
    free(infos);
    free(ptrs);
    free(einfos);
    free(eptrs);
    free(cf);
    free(cfp);
}

/* A live worker's queued cancels (sb_sched_take_cancels) as a reply's cancel list. */
typedef struct {
    sb_sched_cancel *v;
    size_t n;
    Streambatch__V1__TaskAttempt *m, **p;
} cancel_list;

static void cancels_free(cancel_list *cl)
{
    sb_sched_cancels_free(cl->v, cl->n);
    free(cl->m);
    free(cl->p);
    memset(cl, 0, sizeof *cl);
}

/* Takes the worker's cancels into cl (free with cancels_free once the reply went out). Out of
 * memory they are dropped: those attempts run out, as before cancels. Lock held. */
static void cancels_take(sb_ctl *c, const seen *w, cancel_list *cl)
{
    memset(cl, 0, sizeof *cl);
    if (w == NULL || !w->live || c->sched == NULL ||
        (cl->n = sb_sched_take_cancels(c->sched, w->id, &cl->v)) == 0)
        return;
    cl->m = calloc(cl->n, sizeof *cl->m);
    cl->p = calloc(cl->n, sizeof *cl->p);
    if (cl->m == NULL || cl->p == NULL) {
        cancels_free(cl);
        return;
    }
    for (size_t i = 0; i < cl->n; i++) {
        streambatch__v1__task_attempt__init(&cl->m[i]);
        cl->m[i].task_id = cl->v[i].task_id;
        cl->m[i].attempt = cl->v[i].attempt;
        cl->p[i] = &cl->m[i];
    }
}

/* A worker declared lost called again (its network came back): it is told to shut down (said
 * once). Lock held. */
static void told_lost(seen *w)
{
    if (!w->told_lost && !w->retired)
        sb_log(SB_LOG_WARN, "a worker declared lost came back: told to shut down", "worker", w->id,
               NULL);
    w->told_lost = 1;
}

/* Tries to answer a poll: returns 1 if the call was ended. `acks` (may be NULL): the poll's
 * batched completions were handled; the reply says so (accepted, and the releases taken now).
 * Lock held. */
static int try_answer(sb_ctl *c, sb_rpc_call *call, const char *worker, uint32_t free_slots,
                      uint32_t batch, int force, const poll_acks *acks)
{
    sb_sched_task tasks[64];
    size_t n = 0;
    seen *w = worker_seen(c, worker, 0);
    /* unknown: never registered here (a new leader after failover): it gets no tasks and is
     * not told to shut down; its heartbeat asks it to register. lost: declared lost here. */
    int unknown = w == NULL, dead = w != NULL && !w->live;
    if (!unknown && !dead && !c->shutdown_workers && c->job.state == JOB_QUEUED) {
        answer_job(c, call, worker, acks);
        return 1;
    }
    if (!unknown && !dead && !c->shutdown_workers && !terminal(c) && c->sched != NULL) {
        size_t slots = free_slots > 64 ? 64 : free_slots;
        size_t per = 64 / (slots ? slots : 1); /* tasks[] holds 64 */
        n = sb_sched_assign_batch(c->sched, worker, slots, batch < per ? batch : per, now_ms(),
                                  tasks);
    }
    int shutdown = c->shutdown_workers || dead;
    /* Nothing to hand out: hold the poll (until its wait ends, a task or a storage job is
     * ready, the workers are shut down, or an attempt of this worker is to be cancelled), also
     * once the pipeline is over (drain): its sink commit still comes to a worker as a storage
     * job, so workers poll on; answering at once made every idle slot spin between the last
     * task and the shutdown (with 100 Pipelines on one operator: thousands of polls a second,
     * and runs slowed tenfold) */
    if (n == 0 && !force && !shutdown &&
        (unknown || dead || c->sched == NULL || !sb_sched_cancels_pending(c->sched, worker)))
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
    if (dead && !c->shutdown_workers)
        told_lost(w);
    char **rel = acks_put(c, &r.reply, worker, acks);
    cancel_list cl;
    cancels_take(c, w, &cl);
    r.reply.n_cancel = cl.n;
    r.reply.cancel = cl.p;
    if (sb_rpc_call_reply_msg(call, &r.reply.base, &err) != 0)
        sb_log(SB_LOG_WARN, "poll reply failed", "worker", worker, "error", err.msg, NULL);
    free_releases(rel, r.reply.n_release);
    cancels_free(&cl);
    poll_reply_free(&r);
    return 1;
}

static void serve_pending(sb_ctl *c, int force_all)
{
    uint64_t now = now_ms();
    for (size_t i = 0; i < c->npending;) {
        pending_poll *p = &c->pending[i];
        int force = force_all || now >= p->deadline_ms;
        if (try_answer(c, p->call, p->worker, p->free_slots, p->batch, force, &p->acks)) {
            free(p->acks.accepted);
            c->pending[i] = c->pending[--c->npending];
            continue;
        }
        i++;
    }
    /* Only the end of the pipeline concerns the waiters (sb_ctl_wait; storage jobs broadcast
     * in job_ended, the timer needs no wake-up): a broadcast per call woke two threads per task,
     * and they poll every 20 ms anyway. */
    if (terminal(c))
        pthread_cond_broadcast(&c->changed);
}

static void on_poll_cancel(sb_rpc_call *call, void *ud)
{
    sb_ctl *c = ud;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->npending; i++)
        if (c->pending[i].call == call) {
            free(c->pending[i].acks.accepted);
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
    sb_storage_output *held = calloc(m->n_partitions + 1, sizeof *held);
    for (size_t i = 0; held && i < m->n_partitions; i++) {
        held[i].id = m->partitions[i]->id;
        held[i].bytes = m->partitions[i]->bytes;
        held[i].rows = m->partitions[i]->rows;
    }
    sb_err err;
    pthread_mutex_lock(&c->mu);
    if (register_refused(c, call, m)) {
        pthread_mutex_unlock(&c->mu);
        free(held);
        sb_rpc_msg_free(&m->base);
        return;
    }
    int rc = -1;
    if (held == NULL)
        snprintf(err.msg, sizeof err.msg, "out of memory");
    else if (c->sched != NULL)
        rc = sb_sched_worker_add(c->sched, m->worker_id, m->pool, m->address, m->slots, held,
                                 m->n_partitions, now_ms(), &err);
    if (rc == 0 && c->sched != NULL)
        sb_sched_worker_set_early(c->sched, m->worker_id, m->early_outputs);
    else
        rc = 0; /* planning (or it failed): added to the scheduler when the plan is ready */
    if (rc == 0) {
        seen *w = worker_seen(c, m->worker_id, 1);
        if (w != NULL) {
            memcpy(w->session, m->session, sizeof w->session);
            w->live = 1;
            w->told_lost = 0;
            w->retired = 0;
            w->last_seen_ms = now_ms();
            /* the per-pool figures (sb_ctl_snapshot_get) group by it, whenever it registers */
            snprintf(w->pool, sizeof w->pool, "%s", m->pool);
            snprintf(w->address, sizeof w->address, "%s", m->address);
            w->slots = m->slots;
        }
        if (w != NULL && c->sched == NULL) {
            held_free(w);
            w->deferred = 1;
            w->early = m->early_outputs;
            w->held = calloc(m->n_partitions + 1, sizeof *w->held);
            for (size_t i = 0; w->held != NULL && i < m->n_partitions; i++) {
                w->held[i] = held[i];
                w->held[i].id = strdup(held[i].id);
                if (w->held[i].id != NULL)
                    w->nheld++;
            }
        }
        c->registered++;
        Streambatch__V1__RegisterReply rep = STREAMBATCH__V1__REGISTER_REPLY__INIT;
        rep.heartbeat_interval_ms = c->hb_interval_ms;
        rep.controller_id = c->pipeline_id;
        rep.pipeline_json = c->pipeline_json;
        rep.sink_tag = c->sink_tag;
        rep.batched_completions = 1;
        char **rel = NULL;
        if (c->sched != NULL)
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

static int complete_one(sb_ctl *c, const Streambatch__V1__CompleteTaskRequest *m,
                        sb_storage_output *outs, int *live, int *wait);

static void h_poll(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_ctl *c = ud;
    Streambatch__V1__PollTasksRequest *m = (Streambatch__V1__PollTasksRequest *)sb_rpc_call_decode(
        call, &streambatch__v1__poll_tasks_request__descriptor, req, len);
    if (m == NULL)
        return;
    /* batched completions (validated by the decoder: each one of this worker's) */
    poll_acks acks = {.batched = m->n_completions > 0};
    size_t nouts = 0;
    for (size_t i = 0; i < m->n_completions; i++)
        nouts = m->completions[i]->n_outputs > nouts ? m->completions[i]->n_outputs : nouts;
    sb_storage_output *outs = acks.batched ? calloc(nouts + 1, sizeof *outs) : NULL;
    acks.accepted = acks.batched ? calloc(m->n_completions, sizeof *acks.accepted) : NULL;
    if (acks.batched && (outs == NULL || acks.accepted == NULL)) {
        free(outs);
        free(acks.accepted);
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "controller out of memory");
        sb_rpc_msg_free(&m->base);
        return;
    }
    acks.naccepted = m->n_completions;
    pthread_mutex_lock(&c->mu);
    if (session_refused(c, call, m->worker_id, m->session)) {
        pthread_mutex_unlock(&c->mu);
        free(outs);
        free(acks.accepted);
        sb_rpc_msg_free(&m->base);
        return;
    }
    for (size_t i = 0; i < m->n_completions; i++) {
        int live = 0, wait; /* (no partial reports here: lib/rpc refuses them in a poll) */
        acks.accepted[i] = complete_one(c, m->completions[i], outs, &live, &wait) == 1;
    }
    free(outs);
    if (acks.batched)
        serve_pending(c, 0); /* what the completions freed goes to the polls held first */
    touch_worker(c, m->worker_id);
    uint32_t slots = m->free_slots ? m->free_slots : 1;
    if (try_answer(c, call, m->worker_id, slots, m->batch, m->wait_ms == 0, &acks)) {
        free(acks.accepted);
    } else if (c->npending == MAX_PENDING) {
        try_answer(c, call, m->worker_id, slots, m->batch, 1, &acks);
        free(acks.accepted);
    } else {
        pending_poll *p = &c->pending[c->npending++];
        p->call = call;
        snprintf(p->worker, sizeof p->worker, "%s", m->worker_id);
        p->free_slots = slots;
        p->batch = m->batch;
        p->deadline_ms = now_ms() + (m->wait_ms > 30000 ? 30000 : m->wait_ms);
        p->acks = acks; /* the pending poll owns acks.accepted now */
        sb_rpc_call_set_cancel_cb(call, on_poll_cancel, c);
    }
    pthread_mutex_unlock(&c->mu);
    sb_rpc_msg_free(&m->base);
}

static sb_sched_status status_of(Streambatch__V1__TaskStatus s, int deterministic, int permanent)
{
    switch (s) {
    case STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK:
        return SB_SCHED_OK;
    case STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_INPUT_LOST:
        return SB_SCHED_INPUT_LOST;
    default:
        return permanent       ? SB_SCHED_ERROR_PERMANENT
               : deterministic ? SB_SCHED_ERROR_DATA
                               : SB_SCHED_ERROR;
    }
}

/* A piece of a CKPT_LOAD result: its chunks appended in order (a chunk that names the file
 * before continues it). 1 (accepted). Lock held. */
static int load_report(sb_ctl *c, const Streambatch__V1__StorageResult *r)
{
    sb_err err = {0};
    if (r == NULL) {
        job_ended(c, 0, "the worker reported no checkpoint files");
        return 1;
    }
    if (r->offset < c->load_pieces)
        return 1; /* a retried report of a piece already appended */
    if (r->offset > c->load_pieces) {
        sb_err_set(&err, "checkpoint piece %llu came before piece %llu",
                   (unsigned long long)r->offset, (unsigned long long)c->load_pieces);
        job_ended(c, 0, err.msg);
        return 1;
    }
    sb_storage_files *fs = &c->loaded;
    for (size_t i = 0; i < r->n_files; i++) {
        const Streambatch__V1__CheckpointFile *f = r->files[i];
        size_t total = 0;
        for (size_t k = 0; k < fs->n; k++)
            total += fs->v[k].len;
        if (f->data.len > SB_STORAGE_CKPT_MAX_BYTES - total) {
            job_ended(c, 0, "the checkpoint log is larger than 1 GiB");
            return 1;
        }
        sb_storage_file *last = fs->n > 0 ? &fs->v[fs->n - 1] : NULL;
        if (last != NULL && strcmp(last->name, f->name ? f->name : "") == 0) {
            char *d = realloc(last->data, last->len + f->data.len + 1);
            if (d == NULL) {
                job_ended(c, 0, "out of memory");
                return 1;
            }
            memcpy(d + last->len, f->data.data, f->data.len);
            last->data = d;
            last->len += f->data.len;
            d[last->len] = '\0';
        } else if (sb_storage_files_add(fs, f->name ? f->name : "", (const char *)f->data.data,
                                        f->data.len, &err) != 0) {
            job_ended(c, 0, err.msg);
            return 1;
        }
    }
    c->load_pieces++;
    if (!r->more)
        job_ended(c, 1, NULL);
    return 1;
}

/* A storage job's report: 1 accepted, 0 stale (another attempt or worker, or no such job).
 * Lock held. */
static int storage_report(sb_ctl *c, const Streambatch__V1__CompleteTaskRequest *m)
{
    storage_job *j = &c->job;
    if (j->state != JOB_RUNNING || strcmp(m->task_id, j->id) != 0 || m->attempt != j->attempt ||
        strcmp(m->worker_id, j->worker) != 0)
        return 0;
    if (m->status != STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK) {
        job_ended(c, 0, m->message);
        return 1;
    }
    if (j->kind == SB_STORAGE_CKPT_LOAD)
        return load_report(c, m->storage);
    if (j->kind != SB_STORAGE_PLAN) {
        job_ended(c, 1, NULL);
        return 1;
    }
    const Streambatch__V1__StorageResult *r = m->storage;
    sb_err err = {0};
    if (r == NULL) {
        job_ended(c, 0, "the worker reported no plan");
        return 1;
    }
    if (r->n_splits != r->n_split_bytes) {
        sb_err_set(&err, "the worker reported %zu splits with %zu sizes", r->n_splits,
                   r->n_split_bytes);
        job_ended(c, 0, err.msg);
        return 1;
    }
    if ((r->offset == 0 && r->n_join_right_bytes > 0 &&
         sb_storage_pieces_joins(&c->plan, r->join_right_bytes, r->n_join_right_bytes, &err) !=
             0) ||
        sb_storage_pieces_add(&c->plan, r->offset, (const char *const *)r->splits, r->split_bytes,
                              r->n_splits, &err) < 0) {
        job_ended(c, 0, err.msg);
        return 1;
    }
    if (!r->more)
        job_ended(c, 1, NULL);
    return 1;
}

/* The reply's more_inputs (more_inputs), freed after it is sent. */
typedef struct {
    Streambatch__V1__PartitionRef *refs, **ptrs;
} more_refs;

/* A running early reduce task asks for its inputs past inputs_have (sb_sched_more_inputs): the
 * reply lists them (pointing at the scheduler's views: sent before the lock is released) and
 * says whether they are the last. 1 answered, 0 not (the attempt no longer counts). Lock held. */
static int more_inputs(sb_ctl *c, const Streambatch__V1__CompleteTaskRequest *m,
                       Streambatch__V1__CompleteTaskReply *rep, more_refs *mr, int *live)
{
    *live = touch_worker(c, m->worker_id) != NULL;
    if (!*live || c->sched == NULL)
        return 0;
    const sb_sched_input *in;
    size_t n;
    int closed;
    sb_err err = {0};
    int rc = sb_sched_more_inputs(c->sched, m->worker_id, m->task_id, m->attempt, m->inputs_have,
                                  now_ms(), &in, &n, &closed, &err);
    if (rc < 0)
        sb_log(SB_LOG_WARN, "inputs request refused", "task", m->task_id, "error", err.msg, NULL);
    if (rc != 1)
        return rc < 0 ? 0 : rc;
    if (n > 0 && ((mr->refs = calloc(n, sizeof *mr->refs)) == NULL ||
                  (mr->ptrs = calloc(n, sizeof *mr->ptrs)) == NULL))
        return 1; /* out of memory: nothing yet, not closed (the worker asks again) */
    for (size_t k = 0; k < n; k++) {
        streambatch__v1__partition_ref__init(&mr->refs[k]);
        mr->refs[k].id = (char *)in[k].id;
        mr->refs[k].worker_address = (char *)in[k].address;
        mr->refs[k].bytes = in[k].bytes;
        mr->ptrs[k] = &mr->refs[k];
    }
    rep->n_more_inputs = n;
    rep->more_inputs = mr->ptrs;
    rep->inputs_closed = closed;
    return 1;
}

/* Handles one task completion or storage job report (a CompleteTask call, or one of a poll's
 * batched completions: both go through here, so they are accounted alike). *live: the worker is
 * registered and live. 1 accepted, 0 stale (ignored), -1 refused (logged). Lock held. */
static int complete_one(sb_ctl *c, const Streambatch__V1__CompleteTaskRequest *m,
                        sb_storage_output *outs, int *live, int *wait)
{
    *wait = 0;
    for (size_t i = 0; i < m->n_outputs; i++) {
        outs[i].id = m->outputs[i]->id;
        outs[i].bytes = m->outputs[i]->bytes;
        outs[i].rows = m->outputs[i]->rows;
        outs[i].crc32c = m->outputs[i]->crc32c;
    }
    seen *w = touch_worker(c, m->worker_id);
    *live = w != NULL;
    int rc = 0;
    sb_err err = {0};
    if (w != NULL && c->job.state != JOB_NONE && strcmp(m->task_id, c->job.id) == 0) {
        rc = storage_report(c, m);
    } else if (w != NULL && c->sched != NULL && m->partial) { /* early outputs */
        rc = sb_sched_publish(c->sched, m->worker_id, m->task_id, m->attempt, outs, m->n_outputs,
                              now_ms(), wait, &err);
        if (rc == 0)
            return 0; /* not published: its final report lists them */
    } else if (w != NULL && c->sched != NULL) {
        sb_sched_metrics met = {0};
        if (m->metrics != NULL)
            met = (sb_sched_metrics){m->metrics->wall_seconds,
                                     m->metrics->cpu_seconds,
                                     m->metrics->rows_in,
                                     m->metrics->source_bytes_read,
                                     m->metrics->row_groups_read,
                                     m->metrics->row_groups_skipped,
                                     m->metrics->source_bytes_skipped,
                                     m->metrics->op_spilled_bytes,
                                     m->metrics->pages_read,
                                     m->metrics->pages_skipped,
                                     m->metrics->inputs_outside_budget,
                                     m->metrics->inputs_outside_budget_bytes};
        /* an image source's objects that errored alone (a bounded list: at most the split's
         * SB_IO_MAX_FILES_PER_SPLIT objects) */
        sb_sched_piece pieces[SB_IO_MAX_FILES_PER_SPLIT];
        size_t np = m->n_errored_pieces < SB_IO_MAX_FILES_PER_SPLIT ? m->n_errored_pieces
                                                                    : SB_IO_MAX_FILES_PER_SPLIT;
        for (size_t i = 0; i < np; i++)
            pieces[i] = (sb_sched_piece){m->errored_pieces[i]->path, m->errored_pieces[i]->error};
        rc = sb_sched_complete_pieces(c->sched, m->worker_id, m->task_id, m->attempt,
                                      status_of(m->status, m->deterministic, m->permanent),
                                      m->message, outs, m->n_outputs,
                                      (const char *const *)m->lost_inputs, m->n_lost_inputs, &met,
                                      pieces, np, now_ms(), &err);
        if (rc == 1 && m->status == STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK &&
            sb_sched_sink_schema_set(c->sched, m->sink_schema) > 0) /* the records schema */
            sb_log(SB_LOG_INFO, "parquet sink schema inferred", "task", m->task_id, "schema",
                   m->sink_schema, NULL);
        if (m->status != STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK)
            sb_log(SB_LOG_WARN, "task failed", "task", m->task_id, "worker", m->worker_id, "error",
                   m->message, NULL);
        drain_tick(c);
    } else if (w == NULL && worker_seen(c, m->worker_id, 0) != NULL) {
        /* fenced: its tasks and partitions were given to others when it was declared lost */
        sb_log(SB_LOG_WARN, "report from a worker declared lost ignored", "worker", m->worker_id,
               "task", m->task_id, NULL);
    }
    if (rc < 0)
        sb_log(SB_LOG_WARN, "completion rejected", "task", m->task_id, "error", err.msg, NULL);
    else if (rc == 0 && w != NULL)
        sb_log(SB_LOG_INFO, "stale report ignored (an older attempt)", "task", m->task_id, "worker",
               m->worker_id, NULL);
    return rc;
}

static void h_complete(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_ctl *c = ud;
    Streambatch__V1__CompleteTaskRequest *m =
        (Streambatch__V1__CompleteTaskRequest *)sb_rpc_call_decode(
            call, &streambatch__v1__complete_task_request__descriptor, req, len);
    if (m == NULL)
        return;
    sb_storage_output *outs = calloc(m->n_outputs + 1, sizeof *outs);
    if (outs == NULL) {
        sb_rpc_call_finish(call, SB_RPC_RESOURCE_EXHAUSTED, "controller out of memory");
        sb_rpc_msg_free(&m->base);
        return;
    }
    pthread_mutex_lock(&c->mu);
    if (session_refused(c, call, m->worker_id, m->session)) {
        pthread_mutex_unlock(&c->mu);
        free(outs);
        sb_rpc_msg_free(&m->base);
        return;
    }
    int live = 0, wait = 0, rc;
    Streambatch__V1__CompleteTaskReply rep = STREAMBATCH__V1__COMPLETE_TASK_REPLY__INIT;
    more_refs more = {0};
    if (m->partial && m->want_inputs)
        rc = more_inputs(c, m, &rep, &more, &live);
    else
        rc = complete_one(c, m, outs, &live, &wait);
    rep.accepted = rc == 1;
    rep.wait = wait;
    char **rel = NULL;
    if (live && c->sched != NULL)
        rep.n_release = sb_sched_take_releases(c->sched, m->worker_id, &rel);
    rep.release = rel;
    sb_rpc_call_reply_msg(call, &rep.base, NULL);
    free_releases(rel, rep.n_release);
    free(more.refs);
    free(more.ptrs);
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
    if (session_refused(c, call, m->worker_id, m->session)) {
        pthread_mutex_unlock(&c->mu);
        sb_rpc_msg_free(&m->base);
        return;
    }
    seen *w = touch_worker(c, m->worker_id);
    Streambatch__V1__HeartbeatReply rep = STREAMBATCH__V1__HEARTBEAT_REPLY__INIT;
    char **rel = NULL;
    if (w != NULL) {
        const Streambatch__V1__WorkerMetrics *wm = m->metrics;
        if (wm != NULL)
            w->fig = (sb_ctl_worker_figures){
                .store_memory_bytes = wm->store_memory_bytes,
                .store_spilled_bytes = wm->store_disk_bytes,
                .spill_bytes_total = wm->spill_bytes_total,
                .fetch_bytes_total = wm->bytes_received,
                .fetch_errors_total = wm->fetch_errors_total,
                .accelerator_seconds = wm->gpu_busy_seconds,
                .cpu_seconds = wm->cpu_seconds,
                .rss_bytes = wm->rss_bytes,
            };
        if (c->sched != NULL)
            rep.n_release = sb_sched_take_releases(c->sched, m->worker_id, &rel);
        rep.release = rel;
    } else if (worker_seen(c, m->worker_id, 0) == NULL) {
        rep.reregister = 1; /* unknown here (a new leader): register again with what it holds */
    } else {
        rep.shutdown = 1; /* declared lost: its partitions are being recomputed elsewhere */
        told_lost(worker_seen(c, m->worker_id, 0));
    }
    rep.shutdown |= c->shutdown_workers;
    rep.drain = terminal(c);
    cancel_list cl; /* a worker whose every slot is busy (a loser among them) does not poll */
    cancels_take(c, w, &cl);
    rep.n_cancel = cl.n;
    rep.cancel = cl.p;
    sb_rpc_call_reply_msg(call, &rep.base, NULL);
    free_releases(rel, rep.n_release);
    cancels_free(&cl);
    pthread_mutex_unlock(&c->mu);
    sb_rpc_msg_free(&m->base);
}

/* The slices of one StreamNext reply past its first, with copies of every slice's strings (the
 * dealer's are valid only until its next call). */
typedef struct {
    Streambatch__V1__StreamSlice *slices, **slicep;
    size_t n;
    char *first_id, *first_addr;
} stream_slices;

#define STREAM_MORE_MAX 255 /* a reply's slices past the first: a bounded reply */

static void stream_more_free(stream_slices *x)
{
    for (size_t i = 0; i < x->n; i++) {
        free(x->slices[i].partition_id);
        free(x->slices[i].address);
    }
    free(x->slices);
    free(x->slicep);
    free(x->first_id);
    free(x->first_addr);
    *x = (stream_slices){0};
}

/* Deals the rank more slices after the first in *dr (its strings copied into x first) while
 * their rows are under max_rows; *dr's floor, dealt rows and LB-BSP sizes become the last
 * slice's. 0, or -1 out of memory. Under c->mu. */
static int stream_more(sb_ctl *c, const sb_deal_request *dq, uint64_t max_rows, sb_deal_reply *dr,
                       stream_slices *x)
{
    x->first_id = strdup(dr->part_id ? dr->part_id : "");
    x->first_addr = strdup(dr->address ? dr->address : "");
    x->slices = calloc(STREAM_MORE_MAX, sizeof *x->slices);
    x->slicep = calloc(STREAM_MORE_MAX, sizeof *x->slicep);
    sb_deal_reply *r = malloc(sizeof *r);
    if (x->first_id == NULL || x->first_addr == NULL || x->slices == NULL || x->slicep == NULL ||
        r == NULL) {
        free(r);
        return -1;
    }
    uint64_t rows = dr->row_hi - dr->row_lo;
    while (rows < max_rows && x->n < STREAM_MORE_MAX) {
        sb_deal_more(c->deal, c->sched, dq, now_ms(), r);
        if (r->kind != SB_DEAL_SLICE)
            break;
        Streambatch__V1__StreamSlice *sl = &x->slices[x->n];
        *sl = (Streambatch__V1__StreamSlice)STREAMBATCH__V1__STREAM_SLICE__INIT;
        sl->partition_id = strdup(r->part_id ? r->part_id : "");
        sl->address = strdup(r->address ? r->address : "");
        x->slicep[x->n++] = sl;
        if (sl->partition_id == NULL || sl->address == NULL) {
            free(r);
            return -1; /* (its rows are in the rank's log: a restart of it gets them) */
        }
        sl->bytes = r->bytes;
        sl->rows = r->rows;
        sl->row_lo = r->row_lo;
        sl->row_hi = r->row_hi;
        sl->seq = r->seq;
        rows += r->row_hi - r->row_lo;
        dr->floor_rows = r->floor_rows;
        dr->dealt_rows = r->dealt_rows;
        if (r->nsizes > 0) {
            memcpy(dr->sizes, r->sizes, r->nsizes * sizeof r->sizes[0]);
            dr->nsizes = r->nsizes;
        }
    }
    free(r);
    return 0;
}

/* A consumer of the stream sink asks for its next slice (sched/stream/deal.h). */
static void h_stream_next(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    sb_ctl *c = ud;
    Streambatch__V1__StreamNextRequest *m =
        (Streambatch__V1__StreamNextRequest *)sb_rpc_call_decode(
            call, &streambatch__v1__stream_next_request__descriptor, req, len);
    if (m == NULL)
        return;
    Streambatch__V1__StreamNextReply rep = STREAMBATCH__V1__STREAM_NEXT_REPLY__INIT;
    sb_deal_reply dr = {.kind = SB_DEAL_WAIT};
    stream_slices more = {0};
    pthread_mutex_lock(&c->mu);
    const char *failure = NULL;
    if (state_of(c, &failure) == SB_SCHED_FAILED) {
        dr.kind = SB_DEAL_ERROR;
        snprintf(dr.message, sizeof dr.message, "the pipeline failed: %s",
                 failure ? failure : "(no message)");
    } else if (c->sched != NULL && c->deal == NULL && (c->deal = sb_deal_new(c->sched)) == NULL) {
        dr.kind = SB_DEAL_ERROR;
        snprintf(dr.message, sizeof dr.message, "the controller is out of memory");
    } else if (c->sched != NULL) { /* (none yet: planning, so the consumer waits) */
        sb_deal_lost lost[64];
        size_t nlost = m->n_lost < 64 ? m->n_lost : 64; /* the rest: reported again */
        for (size_t i = 0; i < nlost; i++)
            lost[i] = (sb_deal_lost){
                .id = m->lost[i]->partition_id, .lo = m->lost[i]->row_lo, .hi = m->lost[i]->row_hi};
        sb_deal_request dq = {.rank = m->rank,
                              .world = m->world_size,
                              .epoch = m->epoch,
                              .batch = m->batch_size,
                              .session = m->session,
                              .consumed_base = m->consumed_base,
                              .consumed_bits = m->consumed_bits.data,
                              .nconsumed_bits = m->consumed_bits.len,
                              .consumed_batches = m->consumed_batches,
                              .ack_only = m->ack_only,
                              .lost = lost,
                              .nlost = nlost,
                              .balance = m->balance,
                              .iteration = m->iteration,
                              .step_rows = m->step_rows,
                              .step_us = m->step_us,
                              .steps = m->steps};
        sb_deal_next(c->deal, c->sched, &dq, now_ms(), &dr);
        if (dr.kind == SB_DEAL_SLICE && m->max_rows > dr.row_hi - dr.row_lo &&
            stream_more(c, &dq, m->max_rows, &dr, &more) != 0) {
            dr.kind = SB_DEAL_ERROR;
            snprintf(dr.message, sizeof dr.message, "the controller is out of memory");
        }
    }
    static const Streambatch__V1__StreamNextReply__Kind kinds[] = {
        STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__SLICE,
        STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__WAIT,
        STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__END,
        STREAMBATCH__V1__STREAM_NEXT_REPLY__KIND__ERROR};
    rep.kind = kinds[dr.kind];
    rep.partition_id = (char *)(dr.part_id ? dr.part_id : "");
    rep.address = (char *)(dr.address ? dr.address : "");
    rep.bytes = dr.bytes;
    rep.rows = dr.rows;
    rep.row_lo = dr.row_lo;
    rep.row_hi = dr.row_hi;
    rep.floor_rows = dr.floor_rows;
    rep.dealt_rows = dr.dealt_rows;
    rep.end_rows = dr.end_rows;
    rep.retry_ms = dr.kind == SB_DEAL_WAIT ? 5 : 0;
    rep.message = dr.message;
    rep.batch_sizes = dr.sizes;
    rep.n_batch_sizes = dr.nsizes;
    rep.seq = dr.seq;
    rep.restarted = dr.restarted;
    rep.resume_rows = dr.resume_rows;
    rep.resume_batches = dr.resume_batches;
    rep.budget_full = dr.budget_full;
    rep.at_cap = dr.at_cap;
    if (dr.kind == SB_DEAL_SLICE && more.first_id != NULL) {
        rep.partition_id = more.first_id;
        rep.address = more.first_addr;
        rep.more = more.slicep;
        rep.n_more = more.n;
    }
    sb_rpc_call_reply_msg(call, &rep.base, NULL);
    stream_more_free(&more);
    if (m->consumed_base > 0 || m->consumed_bits.len > 0 || dr.restarted)
        serve_pending(c, 0); /* acks may have freed budget: waiting polls may get tasks now */
    pthread_cond_broadcast(&c->changed); /* acks may have ended the run */
    pthread_mutex_unlock(&c->mu);
    sb_rpc_msg_free(&m->base);
}

int sb_ctl_stream_ended(sb_ctl *c)
{
    pthread_mutex_lock(&c->mu);
    int ended = c->deal != NULL && sb_deal_all_ended(c->deal);
    pthread_mutex_unlock(&c->mu);
    return ended;
}

static void *timer_main(void *arg)
{
    sb_ctl *c = arg;
    pthread_mutex_lock(&c->mu);
    /* every 50 ms: `changed` is broadcast after every call (serve_pending), and a scan of every
     * worker per wake-up would cost O(workers) per call */
    while (!c->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        while (!c->stop && pthread_cond_timedwait(&c->changed, &c->mu, &ts) != ETIMEDOUT) {
        }
        if (c->stop)
            break;
        uint64_t now = now_ms();
        for (size_t i = 0; i < c->nworkers; i++)
            if (c->workers[i].live && now > c->workers[i].last_seen_ms + c->hb_timeout_ms)
                mark_lost(c, &c->workers[i], "missed heartbeats");
            else if (c->workers[i].live)
                suspect_tick(c, &c->workers[i], now);
        drain_tick(c);
        serve_pending(c, 0);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Copies r (and its plan hash) as the resume the scheduler starts with. 0, or -1 + err. */
static int resume_set(sb_ctl *c, const sb_sched_resume *r, const char *plan_hash, sb_err *err)
{
    c->have_resume = 1;
    snprintf(c->resume_plan_hash, sizeof c->resume_plan_hash, "%s", plan_hash ? plan_hash : "");
    c->resume.epoch = r->epoch;
    c->resume.committed_splits = strdup(r->committed_splits ? r->committed_splits : "");
    sb_storage_output *parts = calloc(r->nparts + 1, sizeof *parts);
    c->resume.parts = parts;
    if (c->resume.committed_splits == NULL || parts == NULL)
        return sb_err_set(err, "controller: out of memory");
    for (size_t i = 0; i < r->nparts; i++) {
        parts[i] = r->parts[i];
        parts[i].id = strdup(r->parts[i].id ? r->parts[i].id : "");
        parts[i].order = r->parts[i].order ? strdup(r->parts[i].order) : NULL;
        if (parts[i].id == NULL || (r->parts[i].order && parts[i].order == NULL)) {
            free((char *)parts[i].id);
            free((char *)parts[i].order);
            return sb_err_set(err, "controller: out of memory");
        }
        c->resume.nparts++;
    }
    return 0;
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
    c->max_workers = cfg->max_workers ? cfg->max_workers : SB_CTL_DEFAULT_MAX_WORKERS;
    c->pipeline_id = strdup(cfg->pipeline_id ? cfg->pipeline_id : "pipeline");
    c->pipeline_json = strdup(cfg->pipeline_json ? cfg->pipeline_json : "{}");
    c->sink_tag = strdup(cfg->sink_tag ? cfg->sink_tag : "");
    sb_sched_config sc = {.pipeline = cfg->pipeline,
                          .pipeline_id = c->pipeline_id,
                          .no_fusion = cfg->no_fusion,
                          .no_fuse_choices = cfg->no_fuse_choices,
                          .no_tail_sizing = cfg->no_tail_sizing,
                          .no_speculation = cfg->no_speculation,
                          .no_drain = cfg->no_drain,
                          .no_eft = cfg->no_eft,
                          .no_early = cfg->no_early,
                          .no_early_reduce = cfg->no_early_reduce,
                          .start_ms = now_ms(),
                          .resume = cfg->resume,
                          .stream = cfg->stream,
                          .stream_epochs = cfg->stream_epochs,
                          .stream_first = cfg->stream_first,
                          .stream_shuffle = cfg->stream_shuffle,
                          .stream_seed = cfg->stream_seed};
    c->stream = sc;
    if (c->pipeline_id == NULL || c->pipeline_json == NULL || c->sink_tag == NULL)
        goto fail;
    c->pipeline = cfg->pipeline;
    c->no_fusion = cfg->no_fusion;
    c->no_fuse_choices = cfg->no_fuse_choices;
    c->no_tail_sizing = cfg->no_tail_sizing;
    c->no_speculation = cfg->no_speculation;
    c->no_drain = cfg->no_drain;
    c->no_eft = cfg->no_eft;
    c->no_early = cfg->no_early;
    c->no_early_reduce = cfg->no_early_reduce;
    c->job_pool = "cpu";
    if (cfg->pipeline != NULL && cfg->pipeline->spec.nstages > 0) {
        int any_cpu = 0;
        for (size_t i = 0; i < cfg->pipeline->spec.nstages; i++)
            any_cpu |= cfg->pipeline->spec.stages[i].resources.gpu <= 0;
        c->job_pool = any_cpu ? "cpu" : "gpu";
    }
    if (cfg->storage_on_workers) {
        if (cfg->pipeline == NULL || cfg->pipeline->spec.nstages == 0) {
            sb_err_set(err, "scheduler: the pipeline has no stages");
            goto fail;
        }
        if (cfg->resume != NULL && resume_set(c, cfg->resume, cfg->resume_plan_hash, err) != 0)
            goto fail;
        c->planning = 1;
        job_queue(c, cfg->ckpt_load ? SB_STORAGE_CKPT_LOAD : SB_STORAGE_PLAN);
    } else {
        c->sched = sb_sched_new(&sc, cfg->splits, cfg->nsplits, err);
        if (c->sched == NULL)
            goto fail;
        c->nsplits = cfg->nsplits;
    }
    /* replies may be larger than requests: a COMMIT lists every sink part */
    if (opts == NULL || opts->auth == NULL || opts->auth->nkeys == 0) {
        sb_err_set(err, "the controller needs the pipeline's credentials (rpc/auth.h): without "
                        "them anyone who reaches its port could register as a worker");
        goto fail;
    }
    sb_rpc_opts o = *opts;
    if (o.max_send_bytes < SB_RPC_CONTROL_MAX_REPLY)
        o.max_send_bytes = SB_RPC_CONTROL_MAX_REPLY;
    c->srv = sb_rpc_server_new(&o, err);
    if (c->srv == NULL ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_REGISTER, h_register, c, err) != 0 ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_POLL_TASKS, h_poll, c, err) != 0 ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_COMPLETE_TASK, h_complete, c, err) != 0 ||
        sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_HEARTBEAT, h_heartbeat, c, err) != 0 ||
        (cfg->stream &&
         sb_rpc_server_add_unary(c->srv, SB_RPC_CONTROL_STREAM_NEXT, h_stream_next, c, err) != 0) ||
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
    while ((st = state_of(c, NULL)) == SB_SCHED_RUNNING && now_ms() < end) {
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
    out->state = state_of(c, &why);
    if (why != NULL)
        snprintf(out->failure, sizeof out->failure, "%s", why);
    out->planning = c->planning;
    out->storage_failed = c->failed;
    out->nsplits = c->nsplits;
    if (c->sched != NULL) {
        sb_sched_get_stats(c->sched, &out->stats);
        out->nops = sb_sched_group_count(c->sched);
    } else if (c->pipeline != NULL) {
        out->stats.budget = (uint64_t)c->pipeline->spec.execution.memory_budget;
    }
    if (out->nops > 16)
        out->nops = 16;
    for (size_t i = 0; i < out->nops; i++)
        sb_sched_get_group_stats(c->sched, i, &out->ops[i]);
    if (c->deal != NULL) {
        out->nranks = sb_deal_ranks(c->deal, out->ranks, 16);
        sb_deal_progress(c->deal, &out->stream_epochs_ended, &out->stream_rows);
    } else if (c->stream.stream) { /* no rank asked yet: the epochs ended under earlier leaders
                                      (the status must not go back to 0 meanwhile) */
        out->stream_epochs_ended = c->stream.stream_first;
    }
    if (c->sched != NULL) {
        sb_sched_stream_holder h[16];
        out->nholders = sb_sched_stream_waiting(c->sched, h, 16);
        for (size_t i = 0; i < out->nholders; i++) {
            snprintf(out->holders[i].worker_id, sizeof out->holders[i].worker_id, "%s",
                     h[i].worker_id);
            out->holders[i].parts = h[i].parts;
        }
    }
    out->workers_registered = c->registered;
    out->workers_lost = c->lost;
    out->workers_retired = c->retired;
    /* live workers per pool, their latest heartbeat figures summed */
    for (size_t i = 0; i < c->nworkers; i++) {
        const seen *w = &c->workers[i];
        if (!w->live)
            continue;
        size_t k = 0;
        while (k < out->npools && strcmp(out->pools[k].pool, w->pool) != 0)
            k++;
        if (k == out->npools) {
            if (k == sizeof out->pools / sizeof out->pools[0])
                continue;
            snprintf(out->pools[k].pool, sizeof out->pools[k].pool, "%s", w->pool);
            out->npools++;
        }
        sb_ctl_pool_figures *p = &out->pools[k];
        p->workers++;
        p->sum.store_memory_bytes += w->fig.store_memory_bytes;
        p->sum.store_spilled_bytes += w->fig.store_spilled_bytes;
        p->sum.spill_bytes_total += w->fig.spill_bytes_total;
        p->sum.fetch_bytes_total += w->fig.fetch_bytes_total;
        p->sum.fetch_errors_total += w->fig.fetch_errors_total;
        p->sum.accelerator_seconds += w->fig.accelerator_seconds;
        p->sum.cpu_seconds += w->fig.cpu_seconds;
        p->sum.rss_bytes += w->fig.rss_bytes;
    }
    pthread_mutex_unlock(&c->mu);
}

int sb_ctl_stalled(sb_ctl *c, uint64_t stall_ms, char *buf, size_t len)
{
    pthread_mutex_lock(&c->mu);
    int r = 0;
    uint64_t now = now_ms();
    storage_job *j = &c->job;
    if (j->state == JOB_QUEUED || j->state == JOB_RUNNING) {
        /* a storage job in flight is the progress to watch */
        if (now >= j->since_ms + stall_ms) {
            r = 1;
            if (j->state == JOB_QUEUED)
                snprintf(buf, len, "%s: no worker took the job for %llu s",
                         sb_storage_kind_what(j->kind),
                         (unsigned long long)((now - j->since_ms) / 1000));
            else
                snprintf(buf, len, "%s: running on worker %s for %llu s",
                         sb_storage_kind_what(j->kind), j->worker,
                         (unsigned long long)((now - j->since_ms) / 1000));
        }
    } else if (c->sched != NULL) {
        r = sb_sched_stalled(c->sched, now, stall_ms, buf, len);
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

sb_storage_output *sb_ctl_sink_parts(sb_ctl *c, size_t *n)
{
    pthread_mutex_lock(&c->mu);
    size_t k = 0;
    const sb_storage_output *p = c->sched ? sb_sched_sink_parts(c->sched, &k) : NULL;
    sb_storage_output *out = calloc(k + 1, sizeof *out);
    for (size_t i = 0; out != NULL && i < k; i++) {
        out[i] = p[i];
        out[i].id = strdup(p[i].id);
        out[i].order = NULL; /* the manifest needs no order key */
    }
    pthread_mutex_unlock(&c->mu);
    *n = out ? k : 0;
    return out;
}

void sb_ctl_parts_free(sb_storage_output *parts, size_t n)
{
    sb_sched_parts_free(parts, n); /* ids and order keys */
}

sb_storage_errored *sb_ctl_errored(sb_ctl *c, size_t *n, uint64_t *total)
{
    pthread_mutex_lock(&c->mu);
    size_t k = 0;
    if (total != NULL)
        *total = 0;
    /* no scheduler yet: the source was never planned, nothing errored */
    const sb_storage_errored *e =
        c->sched != NULL ? sb_sched_errored_list(c->sched, &k, total) : NULL;
    sb_storage_errored *out = k > 0 ? calloc(k, sizeof *out) : NULL;
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

void sb_ctl_errored_free(sb_storage_errored *e, size_t n)
{
    for (size_t i = 0; e != NULL && i < n; i++) {
        free((char *)e[i].stage);
        free((char *)e[i].task_id);
        free((char *)e[i].input);
        free((char *)e[i].error);
    }
    free(e);
}

void sb_ctl_plan_hash(sb_ctl *c, char out[17])
{
    pthread_mutex_lock(&c->mu);
    memcpy(out, c->plan_hash, 17);
    pthread_mutex_unlock(&c->mu);
}

int sb_ctl_resume_dropped(sb_ctl *c)
{
    pthread_mutex_lock(&c->mu);
    int d = c->resume_dropped;
    pthread_mutex_unlock(&c->mu);
    return d;
}

int sb_ctl_checkpoint(sb_ctl *c, char **ranges, sb_storage_output **parts, size_t *n, sb_err *err)
{
    return sb_ctl_checkpoint_within(c, 0, NULL, NULL, ranges, parts, n, NULL, err);
}

/* How many indices "0-41,45" names (ranges the resume already checked). */
static size_t ranges_count(const char *r)
{
    size_t n = 0;
    while (r != NULL && *r) {
        char *e;
        unsigned long long a = strtoull(r, &e, 10), b = a;
        if (*e == '-')
            b = strtoull(e + 1, &e, 10);
        n += b >= a ? (size_t)(b - a + 1) : 0;
        r = *e == ',' ? e + 1 : e + strlen(e);
    }
    return n;
}

int sb_ctl_checkpoint_within(sb_ctl *c, uint64_t max_bytes, sb_sched_part_bytes_fn part_bytes,
                             void *ctx, char **ranges, sb_storage_output **parts, size_t *n,
                             size_t *omitted, sb_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc;
    if (omitted != NULL)
        *omitted = 0;
    if (c->sched != NULL) {
        rc = sb_sched_checkpoint_within(c->sched, max_bytes, part_bytes, ctx, ranges, parts, n,
                                        omitted, err);
    } else {
        /* no plan yet: the checkpoint is still the one the run resumed from (all of it, or
         * nothing when it does not fit: sb_sched_checkpoint_within keeps it as one block) */
        const sb_sched_resume *r = c->have_resume ? &c->resume : NULL;
        size_t k = r ? r->nparts : 0;
        if (r != NULL && max_bytes > 0) {
            uint64_t cost = r->committed_splits ? strlen(r->committed_splits) : 0;
            for (size_t i = 0; i < k && part_bytes != NULL; i++)
                cost += part_bytes(&r->parts[i], ctx);
            if (cost > max_bytes) {
                r = NULL;
                k = 0;
                if (omitted != NULL)
                    *omitted = ranges_count(c->resume.committed_splits);
            }
        }
        *ranges = strdup(r && r->committed_splits ? r->committed_splits : "");
        *parts = calloc(k + 1, sizeof **parts);
        *n = 0;
        rc = *ranges != NULL && *parts != NULL ? 0 : -1;
        for (size_t i = 0; rc == 0 && i < k; i++) {
            (*parts)[i] = r->parts[i];
            (*parts)[i].id = strdup(r->parts[i].id);
            (*parts)[i].order = r->parts[i].order ? strdup(r->parts[i].order) : NULL;
            if ((*parts)[i].id == NULL || (r->parts[i].order && (*parts)[i].order == NULL)) {
                free((char *)(*parts)[i].id);
                free((char *)(*parts)[i].order);
                rc = -1;
            } else
                (*n)++;
        }
        if (rc != 0) {
            free(*ranges);
            sb_sched_parts_free(*parts, *n);
            *ranges = NULL;
            *parts = NULL;
            *n = 0;
            sb_err_set(err, "checkpoint: out of memory");
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int sb_ctl_worker_removable(sb_ctl *c, const char *worker_id)
{
    pthread_mutex_lock(&c->mu);
    int r;
    if (c->sched != NULL) {
        r = sb_sched_worker_removable(c->sched, worker_id);
    } else {
        seen *w = worker_seen(c, worker_id, 0);
        r = w != NULL && w->live && w->nheld == 0;
    }
    if (r && c->job.state == JOB_RUNNING && strcmp(c->job.worker, worker_id) == 0)
        r = 0;
    pthread_mutex_unlock(&c->mu);
    return r;
}

int sb_ctl_stage_move(sb_ctl *c, size_t stage, const char *pool, sb_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->sched != NULL ? sb_sched_stage_move(c->sched, stage, pool, err)
                              : sb_err_set(err, "the source is not planned yet");
    if (rc > 0)
        pthread_cond_broadcast(&c->changed); /* held polls of the new pool may get its tasks */
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void sb_ctl_pool_demand(sb_ctl *c, const char *pool, uint64_t *queued, uint64_t *running,
                        int *active)
{
    pthread_mutex_lock(&c->mu);
    *queued = *running = 0;
    *active = 0;
    if (c->sched != NULL)
        sb_sched_pool_demand(c->sched, pool, queued, running, active);
    else if (c->planning) /* every pool a stage runs in gets work once the plan is ready (a
                             pool a re-plan may move a stage to has none yet) */
        for (size_t i = 0; i < c->pipeline->spec.nstages; i++)
            *active |= strcmp(sb_stage_pool(&c->pipeline->spec.stages[i]), pool) == 0;
    /* a storage job needs one worker of job_pool */
    if ((c->job.state == JOB_QUEUED || c->job.state == JOB_RUNNING) &&
        strcmp(pool, c->job_pool) == 0) {
        if (c->job.state == JOB_QUEUED)
            *queued += 1;
        else
            *running += 1;
        *active = 1;
    }
    pthread_mutex_unlock(&c->mu);
}

static void job_parts_free(storage_job *j)
{
    for (size_t i = 0; i < j->nparts; i++)
        free((char *)j->parts[i].id);
    free(j->parts);
    j->parts = NULL;
    j->nparts = 0;
}

int sb_ctl_storage_start(sb_ctl *c, sb_storage_kind kind, const sb_storage_output *parts, size_t n,
                         sb_err *err)
{
    if (kind != SB_STORAGE_PREPARE && kind != SB_STORAGE_COMMIT && kind != SB_STORAGE_ABORT)
        return sb_err_set(err, "storage job kind %d cannot be queued by the caller", (int)kind);
    pthread_mutex_lock(&c->mu);
    if (c->job.state == JOB_QUEUED || c->job.state == JOB_RUNNING) {
        pthread_mutex_unlock(&c->mu);
        return sb_err_set(err, "%s is still in flight", sb_storage_kind_what(c->job.kind));
    }
    job_parts_free(&c->job);
    c->job.parts = calloc(n + 1, sizeof *c->job.parts);
    for (size_t i = 0; c->job.parts != NULL && i < n; i++) {
        c->job.parts[i] = parts[i];
        c->job.parts[i].id = strdup(parts[i].id ? parts[i].id : "");
        c->job.parts[i].order = NULL; /* a COMMIT needs no order key */
        if (c->job.parts[i].id == NULL)
            break;
        c->job.nparts++;
    }
    if (c->job.parts == NULL || c->job.nparts != n) {
        job_parts_free(&c->job);
        pthread_mutex_unlock(&c->mu);
        return sb_err_set(err, "%s: out of memory", sb_storage_kind_what(kind));
    }
    job_queue(c, kind);
    serve_pending(c, 0);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int sb_ctl_ckpt_start(sb_ctl *c, sb_storage_kind kind, const sb_storage_file *files, size_t n,
                      int prune, sb_err *err)
{
    if (kind != SB_STORAGE_CKPT_PUT && kind != SB_STORAGE_CKPT_REMOVE)
        return sb_err_set(err, "storage job kind %d is not a checkpoint write", (int)kind);
    pthread_mutex_lock(&c->mu);
    if (c->job.state == JOB_QUEUED || c->job.state == JOB_RUNNING || c->planning) {
        pthread_mutex_unlock(&c->mu);
        return sb_err_set(err, "%s is still in flight", sb_storage_kind_what(c->job.kind));
    }
    job_parts_free(&c->job);
    sb_storage_files_free(&c->job.files);
    int rc = 0;
    for (size_t i = 0; rc == 0 && kind == SB_STORAGE_CKPT_PUT && i < n; i++)
        rc = sb_storage_files_add(&c->job.files, files[i].name, files[i].data, files[i].len, err);
    if (rc != 0) {
        sb_storage_files_free(&c->job.files);
    } else {
        c->job.prune = prune;
        job_queue(c, kind);
        serve_pending(c, 0);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int sb_ctl_ckpt_loaded(sb_ctl *c, sb_storage_files *out, char *msg, size_t len)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    int st = c->load_state;
    if (st == 1) {
        *out = c->loaded;
        memset(&c->loaded, 0, sizeof c->loaded);
        c->load_state = 2;
    } else if (st == -1) {
        snprintf(msg, len, "%s", c->load_msg);
        c->load_state = 2;
    }
    pthread_mutex_unlock(&c->mu);
    return st == 1 ? 1 : st == -1 ? -1 : 0;
}

int sb_ctl_plan_continue(sb_ctl *c, const sb_sched_resume *resume, const char *plan_hash,
                         sb_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    if (!c->planning || c->job.kind != SB_STORAGE_CKPT_LOAD || c->load_state != 2)
        rc = sb_err_set(err, "the controller is not waiting for its resume");
    else if (resume != NULL && resume_set(c, resume, plan_hash, err) != 0)
        rc = -1;
    if (rc == 0) {
        job_queue(c, SB_STORAGE_PLAN);
        serve_pending(c, 0);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int sb_ctl_storage_poll(sb_ctl *c, char *msg, size_t len)
{
    pthread_mutex_lock(&c->mu);
    int st = c->job.state;
    if (st == JOB_FAILED && len > 0)
        snprintf(msg, len, "%s", c->job.msg);
    pthread_mutex_unlock(&c->mu);
    return st == JOB_DONE ? 1 : st == JOB_FAILED ? -1 : 0;
}

int sb_ctl_storage_run(sb_ctl *c, sb_storage_kind kind, const sb_storage_output *parts, size_t n,
                       int timeout_ms, const volatile int *cancel, char *msg, size_t len)
{
    sb_err err;
    if (sb_ctl_storage_start(c, kind, parts, n, &err) != 0) {
        snprintf(msg, len, "%s", err.msg);
        return -1;
    }
    uint64_t end = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
        int r = sb_ctl_storage_poll(c, msg, len);
        if (r != 0)
            return r;
        if (cancel != NULL && *cancel) {
            snprintf(msg, len, "%s: interrupted", sb_storage_kind_what(kind));
            return 0;
        }
        if (now_ms() >= end) {
            pthread_mutex_lock(&c->mu);
            if (c->job.state == JOB_QUEUED)
                snprintf(msg, len, "%s: no worker took the job within %d ms",
                         sb_storage_kind_what(kind), timeout_ms);
            else
                snprintf(msg, len, "%s: not done on worker %s within %d ms",
                         sb_storage_kind_what(kind), c->job.worker, timeout_ms);
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
        pthread_mutex_lock(&c->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&c->changed, &c->mu, &ts);
        pthread_mutex_unlock(&c->mu);
    }
}

int sb_ctl_memory(sb_ctl *c, sb_sched_memory *out)
{
    pthread_mutex_lock(&c->mu);
    int rc = -1;
    if (c->sched != NULL) {
        sb_sched_memory_get(c->sched, out);
        rc = 0;
    } else {
        memset(out, 0, sizeof *out);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

size_t sb_ctl_nsplits(sb_ctl *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->nsplits;
    pthread_mutex_unlock(&c->mu);
    return n;
}

size_t sb_ctl_drains_take(sb_ctl *c, sb_ctl_drain *out, size_t max)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->ndrain_notes < max ? c->ndrain_notes : max;
    memcpy(out, c->drain_notes, n * sizeof *out);
    memmove(c->drain_notes, c->drain_notes + n, (c->ndrain_notes - n) * sizeof *c->drain_notes);
    c->ndrain_notes -= n;
    pthread_mutex_unlock(&c->mu);
    return n;
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
    if (c->srv != NULL)
        serve_pending(c, 1);
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
    if (c->timer_started)
        pthread_join(c->timer, NULL);
    sb_rpc_server_free(c->srv);
    sb_deal_free(c->deal);
    sb_sched_free(c->sched);
    for (size_t i = 0; i < c->nworkers; i++)
        held_free(&c->workers[i]);
    free(c->workers);
    sb_strmap_free(&c->worker_index);
    sb_storage_pieces_free(&c->plan);
    job_parts_free(&c->job);
    sb_storage_files_free(&c->job.files);
    sb_storage_files_free(&c->loaded);
    free((char *)c->resume.committed_splits);
    sb_sched_parts_free((sb_storage_output *)c->resume.parts, c->resume.nparts);
    free(c->pipeline_id);
    free(c->pipeline_json);
    free(c->sink_tag);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->changed);
    free(c);
}
