/* runtime.c — the worker process (see runtime.h): its main loop (registration, heartbeats,
 * Rebind), the slot threads that poll for tasks and run them (read inputs, run the fused ops,
 * store or sink the outputs, report; or stop an attempt that is cancelled), and storage jobs.
 * Owns the worker struct: the store, the servers, the controller channel and the pipeline it
 * registered for, and the list of running attempts. */
#include "worker/runtime.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "doc/doc.h"
#include "partition/partition.h"
#include "rpc/proto.h"
#include "spec/pipeline.h"
#include "worker/data/fetch.h"
#include "worker/data/service.h"
#include "worker/heap.h"
#include "worker/wmetrics.h"
#include "worker/slice.h"
#include "metrics/serve.h"
#include "io/imgread.h"
#include "io/pqread.h"
#include "io/reader.h"
#include "io/sink.h"
#include "io/split.h"
#include "worker/ops/json.h"
#include "storage/ckptjob.h"
#include "storage/jobs.h"
#include "worker/ops/ops.h"
#include "worker/ops/statecache.h"
#include "worker/store/store.h"

static volatile sig_atomic_t g_stop;
static volatile sig_atomic_t g_calm; /* the stop came from a parent that needs nothing here */

/* How long a stopping worker waits for its slot threads once their attempts are cancelled,
 * before it leaves them (worker_abandon): an op that checks its flag ends in microseconds, one
 * that does not at its next input partition. */
#ifndef SLOTS_EXIT_MS
#define SLOTS_EXIT_MS 1000
#endif

/* Bytes per partition handed from the source reader to a task's first op, and from one op to
 * the next inside a task (see task_inputs and task_setup). */
#define SOURCE_CHUNK ((size_t)1 << 20)

void sb_worker_request_stop(void)
{
    g_stop = 1;
}

void sb_worker_request_calm_stop(void)
{
    g_calm = 1;
    g_stop = 1;
}

/* A Control channel. The current one is referenced by the worker itself (refs 1) and by every
 * call in flight on it; a Rebind replaces it, and the last user of the old one frees it. */
typedef struct ctl_chan {
    sb_rpc_channel *ch;
    int refs;     /* under worker.mu */
    uint64_t gen; /* the worker's gen when it became current */
    int batched;  /* its controller takes completions in polls (set at registration, mu) */
    char addr[256];
} ctl_chan;

/* An attempt a slot runs now (worker.att): a cancel from the controller names it by task id and
 * attempt, and sets its flag (the task's task_ctx.cancel, read by the runtime and the ops). */
typedef struct {
    const char *task_id; /* the Task message's, valid while the attempt runs */
    uint32_t attempt;
    int *cancel;
} running_attempt;

typedef struct {
    sb_worker_config cfg;
    char address[128];
    char session[SB_RPC_TOKEN_HEX + 1]; /* RegisterRequest.session: drawn at start, never logged */
    sb_store *store;
    sb_data_server *data;
    sb_rpc_server *srv;
    ctl_chan *chan;      /* current Control channel (mu) */
    uint64_t gen;        /* bumped by every accepted Rebind (mu) */
    uint64_t epoch;      /* last accepted epoch (mu) */
    int need_register;   /* polls and heartbeats wait until a (re-)registration succeeded (mu) */
    double last_contact; /* mono_s() of the last call that reached the current controller (mu) */
    sb_doc *doc;
    sb_pipeline pipeline;
    int have_pipeline;
    uint32_t hb_ms;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* broadcast when shutdown is set: the main loop's nap ends (mu) */
    sem_t accel;
    int have_accel;
    int slice_warned; /* slot_short_slice said why the slice is not set (once) */
    int shutdown;
    int told_to_exit; /* the controller said so: no partition here is still needed (mu) */
    int running_tasks;
    running_attempt *att; /* the attempts the slots run now, cfg.slots at most (mu) */
    size_t natt;
    size_t slots_live; /* slot threads not ended yet (mu; wake is broadcast as one ends) */
    uint64_t bytes_received;
    sb_wmetrics *metrics;    /* always kept (the heartbeat carries its totals) */
    sb_metrics_server *msrv; /* when cfg.metrics_addr is set */
    char fatal[512];
} worker;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int stopping(worker *w)
{
    pthread_mutex_lock(&w->mu);
    int s = w->shutdown || g_stop;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Sets every running attempt's cancel flag (mu held): a worker that stops reports nothing of
 * them, so they end now instead of running out (a loser of a copy's race would hold the worker's
 * exit, and the run's end, for as long as it had left). */
static void cancel_all_locked(worker *w)
{
    for (size_t i = 0; i < w->natt; i++)
        __atomic_store_n(w->att[i].cancel, 1, __ATOMIC_RELAXED);
}

static void set_shutdown(worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->shutdown = 1;
    cancel_all_locked(w);
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

/* The controller's reply said shutdown: it sends that only when no partition this worker holds
 * is still needed (the pipeline ended, the worker is idle and removable, or it was declared
 * lost and its partitions are being made elsewhere), so no reader is left to linger for. */
static void set_told_to_exit(worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->shutdown = 1;
    w->told_to_exit = 1;
    cancel_all_locked(w);
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->mu);
}

/* Released partitions leave holes between the ones still held (a stream's consumers free them
 * in their order, not the order they were made), and malloc keeps free heap (up to 64 MiB per
 * arena, sb_rpc_tune_malloc): the worker's memory grew with the tasks run, not with what it
 * holds (bench-ingest's 5,120 images: 18 MiB more anonymous memory over 2 workers than 2,000
 * images, at the same 64 MiB of partitions). A trim hands the free pages back; at most every
 * RELEASE_TRIM_MS, since releases come with every poll. */
#define RELEASE_TRIM_MS 100

static void apply_releases(worker *w, char **ids, size_t n)
{
    static _Atomic uint64_t last_trim_ms;
    for (size_t i = 0; i < n; i++)
        sb_store_release(w->store, ids[i], NULL); /* unknown ids are fine */
    uint64_t now = sb_clock_mono_ms(), last = atomic_load(&last_trim_ms);
    if (n > 0 && now - last >= RELEASE_TRIM_MS &&
        atomic_compare_exchange_strong(&last_trim_ms, &last, now))
        malloc_trim(0);
}

/* An attempt starts on a slot (its flag is set at once when the worker is stopping already). */
static void attempt_begin(worker *w, const Streambatch__V1__Task *task, int *cancel)
{
    pthread_mutex_lock(&w->mu);
    if (w->natt < w->cfg.slots) /* one per slot: always room */
        w->att[w->natt++] = (running_attempt){task->task_id, task->attempt, cancel};
    if (w->shutdown || g_stop)
        __atomic_store_n(cancel, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&w->mu);
}

static void attempt_end(worker *w, const int *cancel)
{
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->natt; i++)
        if (w->att[i].cancel == cancel) {
            w->att[i] = w->att[--w->natt];
            break;
        }
    pthread_mutex_unlock(&w->mu);
}

/* The controller's cancels (PollTasksReply.cancel, HeartbeatReply.cancel): attempts it no
 * longer needs (a copy won, or the task was handed out again). One that is no longer running
 * here (it ended, or never came) is ignored. */
static void apply_cancels(worker *w, Streambatch__V1__TaskAttempt **v, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        int found = 0;
        pthread_mutex_lock(&w->mu);
        for (size_t i = 0; i < w->natt; i++)
            if (w->att[i].attempt == v[k]->attempt && v[k]->task_id != NULL &&
                strcmp(w->att[i].task_id, v[k]->task_id) == 0) {
                __atomic_store_n(w->att[i].cancel, 1, __ATOMIC_RELAXED);
                found = 1;
            }
        pthread_mutex_unlock(&w->mu);
        char a[16];
        snprintf(a, sizeof a, "%u", (unsigned)v[k]->attempt);
        sb_log(found ? SB_LOG_INFO : SB_LOG_DEBUG,
               found ? "attempt cancelled (no longer needed)" : "cancel of an attempt not running",
               "task", v[k]->task_id, "attempt", a, NULL);
    }
}

/* ---- the Control channel ----------------------------------------------------------------- */

#define BACKOFF_FIRST_MS 200
#define BACKOFF_MAX_MS 2000
#ifndef REGISTER_ATTEMPT_MS
#define REGISTER_ATTEMPT_MS 5000 /* one attempt of the first registration (see sb_worker_run) */
#endif

static int backoff_next(int ms)
{
    return ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms * 2;
}

static ctl_chan *chan_new(const char *addr, const sb_rpc_opts *rpc, sb_err *err)
{
    ctl_chan *c = calloc(1, sizeof *c);
    if (c == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    /* the controller's replies may be larger than any request (a COMMIT lists every sink
     * part): this channel, to the controller only, takes them */
    sb_rpc_opts o = rpc != NULL ? *rpc : (sb_rpc_opts){0};
    if (o.max_receive_bytes < SB_RPC_CONTROL_MAX_REPLY)
        o.max_receive_bytes = SB_RPC_CONTROL_MAX_REPLY;
    c->ch = sb_rpc_channel_new(addr, &o, err);
    if (c->ch == NULL) {
        free(c);
        return NULL;
    }
    c->refs = 1;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    return c;
}

/* The current channel with a reference taken (give it back with ctl_put). NULL while a
 * (re-)registration is pending, unless `registering`. */
static ctl_chan *ctl_get(worker *w, int registering)
{
    pthread_mutex_lock(&w->mu);
    ctl_chan *c = w->chan;
    if (c != NULL && (registering || !w->need_register))
        c->refs++;
    else
        c = NULL;
    pthread_mutex_unlock(&w->mu);
    return c;
}

static void ctl_put(worker *w, ctl_chan *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last) {
        sb_rpc_channel_free(c->ch);
        free(c);
    }
}

/* A call on c got an answer: 1 (and the loss clock restarts) if c is still the current channel,
 * 0 if a Rebind replaced it meanwhile (the answer is stale: ignore it). */
static int ctl_ok(worker *w, const ctl_chan *c)
{
    pthread_mutex_lock(&w->mu);
    int cur = c == w->chan && c->gen == w->gen;
    if (cur)
        w->last_contact = mono_s();
    pthread_mutex_unlock(&w->mu);
    return cur;
}

/* One call on the current channel (no retry). SB_RPC_UNAVAILABLE without a call while a
 * (re-)registration is pending. *resp (free with sb_rpc_msg_free) is set when the call was
 * answered; *cur says whether the answer came from the channel that is still current (else it
 * is stale: a Rebind replaced it meanwhile). */
static sb_rpc_code ctl_call(worker *w, const char *method, const ProtobufCMessage *req,
                            int timeout_ms, ProtobufCMessage **resp, int *cur, sb_err *err)
{
    *resp = NULL;
    *cur = 0;
    ctl_chan *c = ctl_get(w, 0);
    if (c == NULL) {
        sb_err_set(err, "re-registering");
        return SB_RPC_UNAVAILABLE;
    }
    sb_rpc_code code = sb_rpc_call_msg(c->ch, method, req, timeout_ms, 0, resp, err);
    *cur = code == SB_RPC_OK && ctl_ok(w, c);
    ctl_put(w, c);
    return code;
}

static uint64_t cur_gen(worker *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t g = w->gen;
    pthread_mutex_unlock(&w->mu);
    return g;
}

/* Sleeps up to ms; returns early when the worker stops or a Rebind moved past gen. */
static void nap(worker *w, int ms, uint64_t gen)
{
    for (int slept = 0; slept < ms && !stopping(w) && cur_gen(w) == gen; slept += 20)
        usleep(20000);
}

/* The controller did not answer (as opposed to answering with an error). */
static int unreachable(sb_rpc_code c)
{
    return c == SB_RPC_UNAVAILABLE || c == SB_RPC_DEADLINE_EXCEEDED || c == SB_RPC_CANCELLED ||
           c == SB_RPC_UNKNOWN;
}

/* ---- a task ------------------------------------------------------------------------------- */

typedef struct {
    char *id;
    uint64_t bytes, rows;
    uint32_t crc;
    int published; /* the controller took it as an early output (publish_part) */
} out_part;

typedef struct task_ctx task_ctx;

typedef struct {
    task_ctx *t;
    size_t k; /* stage index within the fused chain */
} emit_ud;

/* What keys op k's state in the worker's cache of op states (worker/ops/statecache.h). */
typedef struct {
    char *stage;      /* the op's stage name */
    const char *args; /* the task's args JSON, or NULL */
    int absorbed;     /* the op took over the next op's state: freed at the end, never kept */
} op_key;

struct task_ctx {
    worker *w;
    sb_store_resv *hold_resv; /* the ops' held rows, reserved in the store (task_reserve_holds) */
    const Streambatch__V1__Task *task;
    op_key *key; /* task->n_ops of them (the chain may be shorter after absorb_next) */
    int reuse;   /* the task succeeded: its states go back to the cache */
    size_t n;
    const sb_op_impl **impl;
    void **state;
    sb_op_out **out;
    size_t *batch;     /* the stage's batchSize, 0 for none (the op's default_batch cut) */
    sb_op_feed **feed; /* per op with a batchSize: its carried rows (feed_stage), or NULL */
    emit_ud *ud;
    out_part *parts;
    size_t nparts, capparts;
    struct pending_out {
        void *blob;
        size_t len;
        uint64_t rows;
    } * pending;
    size_t npending, cappending;
    uint32_t seq;
    uint64_t rows_in, bytes_in;
    uint64_t outside, outside_bytes; /* inputs read outside the store's budget (TaskMetrics) */
    sb_pq_scan_stats scan;           /* a parquet source's row groups read and skipped (pushdown) */
    int from_source;                 /* op 0 reads a source split (its rows are counted as read) */
    int check_json;  /* the source's jsonl records are validated as read (source_check_json) */
    int emit_failed; /* source_emit: the chain (or the JSON check) refused a partition */
    /* an image source's objects that could not be decoded, skipped (read_images) */
    Streambatch__V1__ErroredPiece *bad;
    size_t nbad;
    sb_err err;
    int failed;
    int finishing; /* the ops' finish: its outputs are the task's last (no grant to wait for) */
    int *cancel;   /* run_task's flag, set by another thread (atomic): no longer needed */
    /* the accelerator, kept from the last input's run through the ops' finish (run_chain) */
    int accel_held;
    double accel_since;
    /* a parquet sink's records schema this task inferred (Task.infer_sink_schema): its first
     * output's, used for the rest and reported */
    char *sink_schema;
    /* its inputs: the task's, then those an early reduce's asks added (inputs_more); capin 0:
     * `in` is the task's own array. in_open: more may come (Task.inputs_open) until a reply
     * says inputs_closed. replies: the asks' replies, which own the added refs */
    Streambatch__V1__PartitionRef **in;
    size_t nin, capin;
    int in_open;
    ProtobufCMessage **replies;
    size_t nreplies, capreplies;
};

/* Op k's feed (its batchSize's carried rows), made at its first input. NULL + t->err. */
static sb_op_feed *stage_feed(task_ctx *t, size_t k)
{
    if (t->feed == NULL && (t->feed = calloc(t->n, sizeof *t->feed)) == NULL) {
        sb_err_set(&t->err, "out of memory");
        return NULL;
    }
    if (t->feed[k] == NULL)
        t->feed[k] = sb_op_feed_new(t->impl[k], t->state[k], t->batch[k], t->out[k], &t->err);
    return t->feed[k];
}

/* The task's end for op k: its carried rows (the short last batch), its finish, its output's
 * last partition (which the next op's feed takes next). */
static int finish_stage(task_ctx *t, size_t k)
{
    if (t->feed != NULL && sb_op_feed_flush(t->feed[k], &t->err) != 0)
        return sb_op_err_context(&t->err, t->impl[k]->name);
    if (t->impl[k]->finish != NULL && t->impl[k]->finish(t->state[k], t->out[k], &t->err) != 0)
        return sb_op_err_context(&t->err, t->impl[k]->name);
    return sb_op_out_flush(t->out[k], &t->err);
}

/* Runs op k over one partition. `built_here`: the blob was just made by this process's
 * partition builder (the source reader, or the previous op's output) and has not left memory:
 * it is unsealed (no checksums were computed) and its UTF-8 was checked as it was built, so
 * only its structure is verified. Blobs from the store or another worker are verified in full. */
static int feed_stage(task_ctx *t, size_t k, const void *blob, size_t len, bool built_here)
{
    sb_batch *b = NULL;
    unsigned flags = built_here ? SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8 : 0;
    if (sb_batch_open_ex(blob, len, flags, &b, &t->err) != 0)
        return -1;
    if (k == 0 && !t->from_source)
        t->rows_in += sb_batch_rows(b);
    int rc;
    if (t->batch[k] == 0) {
        rc = sb_op_run(t->impl[k], t->state[k], b, t->impl[k]->default_batch, t->out[k], &t->err);
    } else if (stage_feed(t, k) == NULL) {
        rc = -1;
    } else {
        rc = sb_op_feed_push(t->feed[k], b, &t->err); /* exactly batchSize rows per call */
    }
    sb_batch_close(b);
    if (rc != 0)
        sb_op_err_context(&t->err, t->impl[k]->name); /* fused: the first op */
    return rc;
}

static int add_part(task_ctx *t, const char *id, uint64_t bytes, uint64_t rows, uint32_t crc)
{
    if (t->nparts == t->capparts) {
        size_t cap = t->capparts ? t->capparts * 2 : 8;
        out_part *np = realloc(t->parts, cap * sizeof *np);
        if (np == NULL)
            return sb_err_set(&t->err, "out of memory");
        t->parts = np;
        t->capparts = cap;
    }
    out_part *p = &t->parts[t->nparts];
    p->id = strdup(id);
    if (p->id == NULL)
        return sb_err_set(&t->err, "out of memory");
    p->bytes = bytes;
    p->rows = rows;
    p->crc = crc;
    p->published = 0;
    t->nparts++;
    return 0;
}

/* A partial report (CompleteTaskRequest.partial) of task t's running attempt, nothing in it yet:
 * early outputs (partial_report) and an early reduce's asks for inputs (inputs_ask). */
static Streambatch__V1__CompleteTaskRequest partial_req(const task_ctx *t)
{
    Streambatch__V1__CompleteTaskRequest req = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    req.worker_id = (char *)t->w->cfg.id;
    req.session = t->w->session;
    req.task_id = t->task->task_id;
    req.attempt = t->task->attempt;
    req.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    req.partial = 1;
    return req;
}

/* One partial report of a running task: output p, or none (asking
 * for the grant of its next output again). 1 answered "wait for budget", else 0; sets
 * p->published when the controller took it. */
static int partial_report(task_ctx *t, out_part *p)
{
    worker *w = t->w;
    Streambatch__V1__PartitionInfo info = STREAMBATCH__V1__PARTITION_INFO__INIT,
                                   *infos[1] = {&info};
    Streambatch__V1__CompleteTaskRequest req = partial_req(t);
    if (p != NULL) {
        info.id = p->id;
        info.bytes = p->bytes;
        info.rows = p->rows;
        req.n_outputs = 1;
        req.outputs = infos;
    }
    ProtobufCMessage *resp;
    sb_err err;
    int cur, wait = 0;
    sb_rpc_code code =
        ctl_call(w, SB_RPC_CONTROL_COMPLETE_TASK, &req.base, 5000, &resp, &cur, &err);
    if (cur) {
        Streambatch__V1__CompleteTaskReply *r = (Streambatch__V1__CompleteTaskReply *)resp;
        if (p != NULL)
            p->published = r->accepted;
        wait = r->accepted && r->wait;
        apply_releases(w, r->release, r->n_release);
    } else if (code != SB_RPC_OK) {
        sb_log(SB_LOG_DEBUG, "early output not published", "task", t->task->task_id, "error",
               err.msg, NULL);
    }
    sb_rpc_msg_free(resp);
    return wait;
}

/* Early outputs (Task.publish_early): reports the output just written to the store as one of a
 * running task's, so the next op can take it now, and then waits, making nothing more, while the
 * controller says the memory budget has no room for the next one (asked again after 2, 4, 8,
 * then every 10 ms: a few calls per wait where budget frees at the next op's task ends, and no
 * storm of calls from many waiting workers; not after the ops' finish, whose outputs are the
 * last). When a report is not answered or not accepted, the task goes on and its final report,
 * which lists every output, decides. */
#define WAIT_FIRST_MS 2
#define WAIT_MAX_MS 10
static void publish_part(task_ctx *t, out_part *p)
{
    int wait = partial_report(t, p);
    for (int ms = WAIT_FIRST_MS;
         wait && !t->finishing && !stopping(t->w) && !__atomic_load_n(t->cancel, __ATOMIC_RELAXED);
         ms = ms * 2 < WAIT_MAX_MS ? ms * 2 : WAIT_MAX_MS) {
        usleep((useconds_t)ms * 1000);
        wait = partial_report(t, NULL);
    }
}

/* The last stage's output: into the store, or to the sink. Owns blob. */
static int write_final(task_ctx *t, void *blob, size_t len, uint64_t rows)
{
    char id[SB_PART_ID_MAX];
    sb_part_id_format(id, sizeof id, t->task->stage_index, t->task->task_index, t->seq++);
    if (t->task->writes_sink) {
        sb_io_part_info info;
        sb_sink_spec sink = t->w->pipeline.spec.sink; /* with this task's records schema */
        sink.schema_json = t->sink_schema                                    ? t->sink_schema
                           : t->task->sink_schema && t->task->sink_schema[0] ? t->task->sink_schema
                                                                             : NULL;
        sink.infer_out = t->task->infer_sink_schema ? &t->sink_schema : NULL;
        /* staged: a speculative copy of this task may be writing the same parts */
        int rc = sb_io_sink_write_staged(&sink, id, t->task->attempt, blob, len, &info, &t->err);
        sb_part_free(blob);
        if (rc != 0)
            return -1;
        return add_part(t, id, info.bytes, info.rows, info.crc32c);
    }
    sb_store_hints h = {.next_needed = t->task->task_index};
    sb_store_release(t->w->store, id, NULL); /* a re-run here replaces an earlier copy */
    int rc = sb_store_put(t->w->store, id, blob, len, &h, &t->err);
    if (rc != 0 || add_part(t, id, len, rows, 0) != 0)
        return -1;
    if (t->task->publish_early)
        publish_part(t, &t->parts[t->nparts - 1]);
    return 0;
}

/* With an accelerator, outputs are queued while the ops run and written after (outside the
 * accelerator); without one they are written (early ones published) as they come. Queued there
 * too, a sort's reduce held its whole range's output until its finish returned: ~100 MiB per
 * worker above its budget in a 512 MiB sort under 512Mi (issue 41). */
static int emit_final(task_ctx *t, void *blob, size_t len, uint64_t rows)
{
    if (!t->w->have_accel)
        return write_final(t, blob, len, rows);
    if (t->npending == t->cappending) {
        size_t cap = t->cappending ? t->cappending * 2 : 8;
        struct pending_out *np = realloc(t->pending, cap * sizeof *np);
        if (np == NULL) {
            sb_part_free(blob);
            return sb_err_set(&t->err, "out of memory");
        }
        t->pending = np;
        t->cappending = cap;
    }
    t->pending[t->npending++] = (struct pending_out){blob, len, rows};
    return 0;
}

static int drain_pending(task_ctx *t)
{
    int rc = 0;
    for (size_t i = 0; i < t->npending; i++) {
        if (rc == 0)
            rc = write_final(t, t->pending[i].blob, t->pending[i].len, t->pending[i].rows);
        else
            sb_part_free(t->pending[i].blob);
    }
    t->npending = 0;
    return rc;
}

/* Takes an accelerator slot (when the worker has some); returns when it got it. */
static double accel_acquire(worker *w)
{
    if (w->have_accel)
        while (sem_wait(&w->accel) != 0 && errno == EINTR)
            ;
    return mono_s();
}

static void accel_release(worker *w, double since)
{
    if (w->have_accel) {
        sb_wmetrics_accel_busy(w->metrics, mono_s() - since);
        sem_post(&w->accel);
    }
}

/* Runs the op chain over one input partition, holding an accelerator, then writes what the
 * last op emitted. `last`: the task's last input — the accelerator stays held (and the outputs
 * queued) for the ops' finish, which run_task does next: released in between, the worker's
 * other slot took it for a whole task of its own while this one, done but for its finish,
 * waited (both slots then polled and fetched at once, leaving the accelerator idle: 2.5 ms per
 * task of the memory microbenchmark's 25). */
static int run_chain(task_ctx *t, const void *blob, size_t len, bool built_here, bool last)
{
    if (__atomic_load_n(t->cancel, __ATOMIC_RELAXED)) /* ops that never check stop here */
        return sb_op_cancel_err(&t->err, t->task->stage ? t->task->stage : "?");
    double t0 = accel_acquire(t->w);
    int rc = feed_stage(t, 0, blob, len, built_here);
    if (rc == 0 && last && t->w->have_accel) {
        t->accel_held = 1;
        t->accel_since = t0;
        return 0;
    }
    accel_release(t->w, t0);
    int rc2 = drain_pending(t);
    return rc != 0 ? rc : rc2;
}

static int emit_cb(void *blob, size_t len, uint64_t rows, void *ud_)
{
    emit_ud *ud = ud_;
    task_ctx *t = ud->t;
    if (ud->k + 1 == t->n)
        return emit_final(t, blob, len, rows);
    int rc = feed_stage(t, ud->k + 1, blob, len, true);
    sb_part_free(blob);
    return rc;
}

/* A jsonl source's records are JSON texts: checked here, once, unless the first op validates
 * its input itself (filter, project). Without it an identity stage wrote a non-JSON line or a
 * truncated last line to a jsonl sink. A bad record is a data error naming the split and the
 * record's row in the task's read (counted from 0). */
static int source_check_json(task_ctx *t, const void *blob, size_t len)
{
    sb_batch *b = NULL;
    if (sb_batch_open_ex(blob, len, SB_BATCH_OPEN_SKIP_CHECKSUM | SB_BATCH_OPEN_SKIP_UTF8, &b,
                         &t->err) != 0)
        return -1;
    int ci = sb_op_record_column(b, "source", &t->err);
    int rc = ci < 0 ? -1 : 0;
    const sb_column *c = ci < 0 ? NULL : sb_batch_column(b, (size_t)ci);
    for (size_t r = 0; rc == 0 && r < sb_batch_rows(b); r++) {
        size_t n = 0;
        const char *p = sb_column_binary(c, r, &n);
        char msg[160], ex[64], label[200];
        if (sb_op_json_scan(p, n, NULL, 0, NULL, NULL, msg, sizeof msg) != 0)
            rc = sb_err_data(&t->err,
                             "source split %s: record %" PRIu64 " is not valid JSON (%s): %s",
                             sb_io_split_describe(t->task->source_split, label, sizeof label),
                             t->rows_in + r, msg, sb_op_excerpt(p, n, ex, sizeof ex));
    }
    sb_batch_close(b);
    return rc;
}

static int source_emit(void *blob, size_t len, uint64_t rows, void *ud)
{
    task_ctx *t = ud;
    if (t->check_json && source_check_json(t, blob, len) != 0) {
        sb_part_free(blob);
        t->emit_failed = 1;
        return -1;
    }
    t->rows_in += rows;
    t->bytes_in += len;
    int rc = run_chain(t, blob, len, true, false);
    sb_part_free(blob);
    if (rc != 0)
        t->emit_failed = 1;
    return rc;
}

/* An image source's split of several objects (split.h groups small ones): each is read alone,
 * and one the reader cannot decode (a data error: truncated, corrupt, not an image, too large)
 * is noted and skipped, so that it does not take the split's good images with it; the report
 * lists it (errored_pieces) and the controller counts it as an errored partition. Any other
 * failure (an unreadable object, an op's error) fails the task as before. */
static int read_images(task_ctx *t, const sb_io_split *sp, size_t np, size_t target)
{
    const char *args = t->w->pipeline.spec.source.args_json;
    for (size_t i = 0; i < np; i++) {
        t->emit_failed = 0;
        if (sb_io_read_image(&sp[i], args, target, source_emit, t, &t->err) == 0)
            continue;
        if (t->emit_failed || !t->err.data)
            return -1;
        Streambatch__V1__ErroredPiece *nb = realloc(t->bad, (t->nbad + 1) * sizeof *nb);
        if (nb == NULL)
            return sb_err_set(&t->err, "out of memory");
        t->bad = nb;
        streambatch__v1__errored_piece__init(&nb[t->nbad]);
        nb[t->nbad].path = strdup(sp[i].path);
        nb[t->nbad].error = strdup(t->err.msg);
        if (nb[t->nbad++].path == NULL || nb[t->nbad - 1].error == NULL)
            return sb_err_set(&t->err, "out of memory");
        sb_log(SB_LOG_WARN, "image skipped", "task", t->task->task_id, "error", t->err.msg, NULL);
        sb_err_clear(&t->err);
    }
    return 0;
}

static const sb_stage_spec *stage_by_name(const sb_pipeline *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->spec.nstages; i++)
        if (strlen(p->spec.stages[i].name) == len &&
            strncmp(p->spec.stages[i].name, name, len) == 0)
            return &p->spec.stages[i];
    return NULL;
}

/* A successful task's op states go back to the worker's cache (reset, kept for its next task
 * of the stage); a failed task's are freed: they may be half-way through anything. */
static void task_ctx_free(task_ctx *t)
{
    sb_store_unreserve(t->hold_resv);
    t->hold_resv = NULL;
    /* the chain's ops, then the states borrowed by an op of it (past its end: chain_drop_next),
     * after their borrower's reset has forgotten them */
    size_t nstates = t->task != NULL && t->key != NULL ? t->task->n_ops : t->n;
    for (size_t k = 0; k < nstates; k++) {
        if (t->impl == NULL || t->impl[k] == NULL || t->state == NULL || t->state[k] == NULL)
            continue;
        if (t->reuse && t->key && !t->key[k].absorbed)
            sb_op_cache_put(sb_op_cache_worker(), t->impl[k], t->key[k].stage, t->key[k].args,
                            t->state[k]);
        else if (t->impl[k]->free)
            t->impl[k]->free(t->state[k]);
    }
    for (size_t k = 0; t->out != NULL && k < t->n; k++)
        sb_op_out_free(t->out[k]);
    for (size_t k = 0; t->key != NULL && k < t->task->n_ops; k++)
        free(t->key[k].stage);
    free(t->key);
    free(t->impl);
    free(t->state);
    free(t->out);
    free(t->batch);
    for (size_t k = 0; t->feed != NULL && k < t->n; k++)
        sb_op_feed_free(t->feed[k]);
    free(t->feed);
    free(t->ud);
    for (size_t i = 0; i < t->nparts; i++)
        free(t->parts[i].id);
    free(t->parts);
    for (size_t i = 0; i < t->npending; i++)
        sb_part_free(t->pending[i].blob);
    free(t->pending);
    free(t->sink_schema);
    for (size_t i = 0; i < t->nbad; i++) {
        free(t->bad[i].path);
        free(t->bad[i].error);
    }
    free(t->bad);
    if (t->capin > 0)
        free(t->in);
    for (size_t i = 0; i < t->nreplies; i++)
        sb_rpc_msg_free(t->replies[i]);
    free(t->replies);
}

/* Drops op k+1 from the chain once op k absorbed it. An op that owns what it absorbed makes the
 * two states one, never kept; one that borrows it (absorb_borrows) leaves the dropped state
 * here, past the chain's end, so that task_ctx_free keeps or frees each on its own (ops.h). */
static void chain_drop_next(task_ctx *t, size_t k)
{
    op_key dropped = t->key[k + 1];
    const sb_op_impl *dimpl = t->impl[k + 1];
    void *dstate = t->state[k + 1];
    bool borrowed = t->impl[k]->absorb_borrows;
    if (!borrowed)
        t->key[k].absorbed = 1;
    for (size_t i = k + 1; i + 1 < t->n; i++) {
        t->impl[i] = t->impl[i + 1];
        t->state[i] = t->state[i + 1];
        t->batch[i] = t->batch[i + 1];
        t->key[i] = t->key[i + 1];
    }
    t->n--;
    t->key[t->n] = dropped; /* its name is freed with the others */
    t->state[t->n] = borrowed ? dstate : NULL;
    t->impl[t->n] = borrowed ? dimpl : NULL;
}

/* The rows the task's ops hold (sb_op_impl.hold) are reserved in the store until the task ends:
 * the store spills its partitions to make room, so a worker's partitions and its tasks' tables
 * share one budget instead of adding up. Room: the store budget over twice the slots (a slot's
 * task, its inputs and outputs beside the others'). Best effort: when the store cannot make
 * room in a second (everything pinned or reserved), the task runs on uncounted, as before. */
static void task_reserve_holds(task_ctx *t)
{
    size_t slots = t->w->cfg.slots > 0 ? t->w->cfg.slots : 1;
    uint64_t room = t->w->cfg.store_budget / (2 * slots), held = 0;
    for (size_t k = 0; k < t->n; k++)
        if (t->impl[k]->hold != NULL && held < room)
            held += t->impl[k]->hold(t->state[k], room - held);
    if (held > 0 && sb_store_reserve(t->w->store, (size_t)held, 1000, &t->hold_resv, NULL) != 0)
        sb_log(SB_LOG_DEBUG, "task runs with its ops' memory not reserved", "task",
               t->task->task_id, NULL);
}

static int task_setup(task_ctx *t)
{
    const Streambatch__V1__Task *task = t->task;
    t->n = task->n_ops;
    if (t->n == 0)
        return sb_err_set(&t->err, "task %s has no ops", task->task_id);
    t->impl = calloc(t->n, sizeof *t->impl);
    t->state = calloc(t->n, sizeof *t->state);
    t->out = calloc(t->n, sizeof *t->out);
    t->batch = calloc(t->n, sizeof *t->batch);
    t->ud = calloc(t->n, sizeof *t->ud);
    t->key = calloc(t->n, sizeof *t->key);
    if (!t->impl || !t->state || !t->out || !t->batch || !t->ud || !t->key)
        return sb_err_set(&t->err, "out of memory");
    const char *names = task->stage;
    for (size_t k = 0; k < t->n; k++) {
        const char *name = task->ops[k]->op;
        t->impl[k] = sb_op_find(name);
        if (t->impl[k] == NULL)
            return sb_err_permanent(&t->err, "op %s is not available in this worker build", name);
        const char *plus = strchr(names, '+');
        size_t nl = plus ? (size_t)(plus - names) : strlen(names);
        const sb_stage_spec *st = stage_by_name(&t->w->pipeline, names, nl);
        if ((t->key[k].stage = strndup(names, nl)) == NULL)
            return sb_err_set(&t->err, "out of memory");
        t->batch[k] = st && st->batch_size > 0 ? (size_t)st->batch_size : 0;
        names = plus ? plus + 1 : names + nl;
        const char *args =
            task->ops[k]->args_json && *task->ops[k]->args_json ? task->ops[k]->args_json : NULL;
        t->key[k].args = args;
        /* the worker's idle state of this stage and args, else init (ops.h: its lifetime) */
        if (sb_op_cache_get(sb_op_cache_worker(), t->impl[k], t->key[k].stage, args, &t->state[k],
                            &t->err) != 0) {
            /* init checks the args (the same on every retry); an op whose init does I/O that may
             * pass later says so (init_may_recover: tensor.mlp loads its weights) */
            if (!t->impl[k]->init_may_recover)
                t->err.permanent = 1;
            return sb_op_err_context(&t->err, name);
        }
    }
    /* an op that takes over the next one's work (filter then project: one scan per record) */
    for (size_t k = 0; k + 1 < t->n; k++)
        if (t->impl[k]->absorb_next != NULL &&
            t->impl[k]->absorb_next(t->state[k], t->impl[k + 1], t->state[k + 1]))
            chain_drop_next(t, k);
    for (size_t k = 0; k < t->n; k++) {
        t->ud[k].t = t;
        t->ud[k].k = k;
        /* The last op's output is what the task stores or writes: partitions of the target.
         * An op before it feeds the next op of this chain, which re-cuts its own output, so it
         * hands on chunks (as the source does) that stay in cache and reuse heap memory. */
        size_t target =
            task->target_partition_bytes ? task->target_partition_bytes : (size_t)64 << 20;
        if (k + 1 < t->n && target > SOURCE_CHUNK)
            target = SOURCE_CHUNK;
        t->out[k] = sb_op_out_new(target, emit_cb, &t->ud[k], &t->err);
        if (t->out[k] == NULL)
            return -1;
        if (k + 1 < t->n)
            sb_op_out_set_unsealed(t->out[k]); /* opened by feed_stage without checksums */
        /* op k reads only what op k-1 emits: records op k-1 validated need no second check */
        if (k > 0 && t->impl[k - 1]->emits_valid_json && t->impl[k]->input_valid_json != NULL)
            t->impl[k]->input_valid_json(t->state[k]);
        if (t->impl[k]->task_begin != NULL)
            t->impl[k]->task_begin(t->state[k], task->task_index);
    }
    task_reserve_holds(t);
    return 0;
}

/* Inputs of a few KiB each come in one stream per peer (sb_data_fetch_many): a stream per
 * one-record partition cost most of such a task's CPU (issue 36). A window is the task's next
 * inputs held by other workers, each of known size up to SB_DATA_FETCH_MANY_PART, together up
 * to SB_DATA_FETCH_MANY_BYTES (held until the window has come: no more than one large
 * partition's fetch holds), at most MANY_COUNT of them, whatever peers hold them (a task's
 * inputs alternate between the workers that made them); each peer's share comes in one
 * stream, then the chain runs over the window in the task's order. Larger inputs are fetched
 * one at a time as before. A window is held outside the store's budget, so it is no more than
 * a quarter of a slot's share of the store (many_bytes): at 64Mi over 2 workers, 8 MiB instead
 * of 16 (issue 41). */
#define MANY_COUNT 1024

static uint64_t many_bytes(const task_ctx *t)
{
    size_t slots = t->w->cfg.slots > 0 ? t->w->cfg.slots : 1;
    uint64_t b = t->w->cfg.store_budget / (4 * slots);
    return b > SB_DATA_FETCH_MANY_BYTES  ? SB_DATA_FETCH_MANY_BYTES
           : b < SB_DATA_FETCH_MANY_PART ? SB_DATA_FETCH_MANY_PART
                                         : b;
}

/* Input i is the task's last: its inputs are all known and i ends them (the accelerator is then
 * kept for the ops' finish: run_chain). */
static bool last_input(const task_ctx *t, size_t i)
{
    return !t->in_open && i + 1 == t->nin;
}

/* One ask of an early reduce (Task.inputs_open) for its inputs past those it has (a partial
 * report with want_inputs): the reply's inputs are added, and in_open cleared once it says
 * inputs_closed. 1 answered, 0 not (the controller unreachable: ask again), -1 the attempt no
 * longer counts (the reply not accepted) or out of memory (t->err). */
static int inputs_ask(task_ctx *t)
{
    worker *w = t->w;
    Streambatch__V1__CompleteTaskRequest req = partial_req(t);
    req.want_inputs = 1;
    req.inputs_have = (uint32_t)t->nin;
    ProtobufCMessage *resp;
    sb_err err;
    int cur;
    ctl_call(w, SB_RPC_CONTROL_COMPLETE_TASK, &req.base, 5000, &resp, &cur, &err);
    if (!cur) {
        sb_rpc_msg_free(resp);
        return 0;
    }
    Streambatch__V1__CompleteTaskReply *r = (Streambatch__V1__CompleteTaskReply *)resp;
    apply_releases(w, r->release, r->n_release);
    size_t n = r->n_more_inputs;
    if (!r->accepted) {
        sb_rpc_msg_free(resp);
        return sb_err_set(&t->err, "the controller took the task back (its map op needs the slot)");
    }
    if (n > 0 && t->capin < t->nin + n) { /* the task's own array first, then a copy */
        size_t cap = (t->nin + n) * 2;
        Streambatch__V1__PartitionRef **in = malloc(cap * sizeof *in);
        if (in == NULL) {
            sb_rpc_msg_free(resp);
            return sb_err_set(&t->err, "out of memory");
        }
        if (t->nin > 0)
            memcpy(in, t->in, t->nin * sizeof *in);
        if (t->capin > 0)
            free(t->in);
        t->in = in;
        t->capin = cap;
    }
    if (t->nreplies == t->capreplies) {
        size_t cap = t->capreplies ? 2 * t->capreplies : 8;
        ProtobufCMessage **rs = realloc(t->replies, cap * sizeof *rs);
        if (rs == NULL) {
            sb_rpc_msg_free(resp);
            return sb_err_set(&t->err, "out of memory");
        }
        t->replies = rs;
        t->capreplies = cap;
    }
    t->replies[t->nreplies++] = resp;
    if (n > 0)
        memcpy(t->in + t->nin, r->more_inputs, n * sizeof *t->in);
    t->nin += n;
    t->in_open = !r->inputs_closed;
    return 1;
}

/* An early reduce has read every input it knows: asks for more after 2, 4, 8, 16, then every 20
 * ms until some come or none can (in_open cleared). 0 then; -1 (t->err) when the attempt is
 * cancelled, no longer counts, or the worker stops: it ends without a report, as a cancelled
 * one. Why 20 ms and not a grant's 10 (publish_part): every open task of a wide stage asks at
 * that rate for as long as the map op's tail lasts, and each ask costs the controller a call,
 * while a map task takes far longer than the 20 ms its output may wait. */
#define INPUTS_WAIT_MAX_MS 20
static int inputs_more(task_ctx *t)
{
    size_t had = t->nin;
    for (int ms = WAIT_FIRST_MS;; ms = ms * 2 < INPUTS_WAIT_MAX_MS ? ms * 2 : INPUTS_WAIT_MAX_MS) {
        int rc = __atomic_load_n(t->cancel, __ATOMIC_RELAXED) || stopping(t->w)
                     ? sb_op_cancel_err(&t->err, t->task->stage ? t->task->stage : "?")
                     : inputs_ask(t);
        if (rc < 0) {
            __atomic_store_n(t->cancel, 1, __ATOMIC_RELAXED); /* no report: as cancelled */
            return -1;
        }
        if (t->nin > had || !t->in_open)
            return 0;
        usleep((useconds_t)ms * 1000);
    }
}

/* Runs the chain over input i, held by this worker's store. As task_inputs. Only a partition
 * that is gone (or whose spill file is bad) is lost: one that is here but does not fit in the
 * budget is read outside it (sb_store_load_whole), as a peer's would be fetched. Before, such a
 * partition was reported lost, its producer made it again just as large, and the run never
 * ended (issue 41). */
static int run_local_input(task_ctx *t, size_t i, char **lost)
{
    const Streambatch__V1__PartitionRef *ref = t->in[i];
    size_t held = t->hold_resv != NULL ? sb_store_resv_left(t->hold_resv) : 0;
    sb_store_whole in;
    int rc = sb_store_load_whole(t->w->store, ref->id, held, 60000, &in, &t->err);
    if (rc == SB_STORE_ENOTFOUND || rc == SB_STORE_ECORRUPT) {
        *lost = ref->id;
        return -2;
    }
    if (rc != 0) {
        char m[sizeof t->err.msg];
        snprintf(m, sizeof m, "%s", t->err.msg);
        sb_err_set(&t->err,
                   "%s (the worker's store budget is %zu bytes: give the pipeline a larger "
                   "execution.memoryBudget, or smaller partitions: source partitionSize, more "
                   "partitions for an exchange)",
                   m, t->w->cfg.store_budget);
        return -1;
    }
    if (in.own != NULL) {
        char len[32], budget[32];
        snprintf(len, sizeof len, "%zu", in.len);
        snprintf(budget, sizeof budget, "%zu", t->w->cfg.store_budget);
        sb_log(SB_LOG_WARN, "input read outside the store's budget", "task", t->task->task_id,
               "partition", ref->id, "bytes", len, "budget", budget, NULL);
        t->outside++;
        t->outside_bytes += in.len;
    }
    t->bytes_in += in.len;
    rc = run_chain(t, in.data, in.len, false, last_input(t, i));
    sb_store_whole_done(&in);
    return rc != 0 ? -1 : 0;
}

static bool is_local(const task_ctx *t, size_t i)
{
    return strcmp(t->in[i]->worker_address, t->w->address) == 0;
}

/* How many inputs from i on form a window (0 or 1: fetch input i alone). Inputs held here may
 * sit between the others (a worker's own outputs among its peers'): they are read from the
 * store in their turn. */
static size_t many_window(const task_ctx *t, size_t i)
{
    uint64_t bytes = 0, most = many_bytes(t);
    size_t j = i, remote = 0;
    while (j < t->nin && j - i < MANY_COUNT) {
        const Streambatch__V1__PartitionRef *r = t->in[j];
        if (!is_local(t, j)) {
            if (r->bytes == 0 || r->bytes > SB_DATA_FETCH_MANY_PART || bytes + r->bytes > most)
                break;
            bytes += r->bytes;
            remote++;
        }
        j++;
    }
    return remote > 1 ? j - i : 0;
}

/* Fetches the window's inputs of the peer of input i + first (those not fetched yet, in order)
 * in one stream into blobs/lens. As task_inputs. */
static int many_fetch_peer(task_ctx *t, size_t i, size_t n, size_t first, const char **ids,
                           size_t *expected, size_t *at, void **blobs, size_t *lens, char **lost)
{
    const char *addr = t->in[i + first]->worker_address;
    size_t m = 0;
    for (size_t k = first; k < n; k++)
        if (blobs[k] == NULL && !is_local(t, i + k) &&
            strcmp(t->in[i + k]->worker_address, addr) == 0) {
            ids[m] = t->in[i + k]->id;
            expected[m] = (size_t)t->in[i + k]->bytes;
            at[m++] = k;
        }
    void **got = blobs + n; /* scratch: the second half */
    size_t *glens = lens + n, failed = 0;
    sb_data_fetch_opts fo = {
        .requester_id = t->w->cfg.id, .rpc = t->w->cfg.rpc, .cancel = t->cancel};
    if (sb_data_fetch_many_addr(addr, ids, expected, m, 0, 60000, &fo, got, glens, &failed, NULL,
                                &t->err) != 0) {
        sb_wmetrics_fetch_error(t->w->metrics);
        *lost = t->in[i + at[failed]]->id;
        return -2;
    }
    for (size_t k = 0; k < m; k++) {
        blobs[at[k]] = got[k];
        lens[at[k]] = glens[k];
        got[k] = NULL;
    }
    return 0;
}

/* Fetches inputs [i, i + n) (one stream per peer) and runs the chain over each, in order. As
 * task_inputs. */
static int task_inputs_many(task_ctx *t, size_t i, size_t n, char **lost)
{
    worker *w = t->w;
    const char **ids = calloc(n, sizeof *ids);
    size_t *expected = calloc(n, sizeof *expected), *at = calloc(n, sizeof *at);
    size_t *lens = calloc(2 * n, sizeof *lens);
    void **blobs = calloc(2 * n, sizeof *blobs);
    int rc = 0;
    if (!ids || !expected || !at || !lens || !blobs)
        rc = sb_err_set(&t->err, "out of memory");
    for (size_t k = 0; rc == 0 && k < n; k++)
        if (blobs[k] == NULL && !is_local(t, i + k))
            rc = many_fetch_peer(t, i, n, k, ids, expected, at, blobs, lens, lost);
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (is_local(t, i + k)) {
            rc = run_local_input(t, i + k, lost);
            continue;
        }
        t->bytes_in += lens[k];
        pthread_mutex_lock(&w->mu);
        w->bytes_received += lens[k];
        pthread_mutex_unlock(&w->mu);
        if (run_chain(t, blobs[k], lens[k], false, last_input(t, i + k)) != 0)
            rc = -1;
    }
    for (size_t k = 0; blobs && k < 2 * n; k++)
        sb_part_free(blobs[k]);
    free(ids);
    free(expected);
    free(at);
    free(lens);
    free(blobs);
    return rc;
}

/* Returns 0 ok, -1 op/io error (t->err), -2 an input was lost (its id in *lost). */
static int task_inputs(task_ctx *t, char **lost)
{
    const Streambatch__V1__Task *task = t->task;
    worker *w = t->w;
    if (task->source_split != NULL && task->source_split[0] != '\0') {
        t->from_source = 1;
        t->check_json = w->pipeline.spec.source.format == SB_FMT_JSONL &&
                        t->impl[0]->input_valid_json == NULL; /* else op 0 scans them */
        sb_io_split *sp = NULL;
        size_t np = 0;
        if (sb_io_splits_decode(task->source_split, strlen(task->source_split), &sp, &np,
                                &t->err) != 0)
            return -1;
        /* a split holds about partitionSize bytes of records; their offsets add a little, so
         * read into partitions 1/16 larger rather than emit a full one plus a tiny tail */
        size_t target = task->target_partition_bytes ? task->target_partition_bytes : 64u << 20;
        /* The first op re-cuts its output at the target (sb_op_out), so the reader hands the
         * chain chunks of SOURCE_CHUNK: blobs of that size are reused from the heap instead of
         * faulting in fresh zeroed pages for every partition, and are still in cache when the
         * op reads them (issue 16: 13% of an ETL run's CPU was zeroing pages). */
        /* a filter first in the chain lets a parquet source skip row groups (prune.h) */
        sb_pq_pred pred;
        bool pd = w->pipeline.spec.source.format == SB_FMT_PARQUET &&
                  t->impl[0]->pushdown != NULL && t->impl[0]->pushdown(t->state[0], &pred);
        int rc = w->pipeline.spec.source.format == SB_FMT_IMAGE && np > 1
                     ? read_images(t, sp, np, target + target / 16)
                     : sb_io_read_splits_pushdown(
                           sp, np, w->pipeline.spec.source.format,
                           w->pipeline.spec.source.args_json, target + target / 16, SOURCE_CHUNK,
                           pd ? &pred : NULL, &t->scan, source_emit, t, &t->err);
        sb_io_splits_free(sp, np);
        return rc;
    }
    for (size_t i = 0; i < t->nin || t->in_open; i++) {
        if (i == t->nin && (inputs_more(t) != 0 || i == t->nin))
            return i == t->nin && !t->in_open ? 0 : -1; /* closed with nothing more, or not */
        const Streambatch__V1__PartitionRef *ref = t->in[i];
        size_t group = many_window(t, i);
        if (group == 0 && strcmp(ref->worker_address, w->address) == 0) {
            int rc = run_local_input(t, i, lost);
            if (rc != 0)
                return rc;
            continue;
        }
        if (group > 0) {
            int rc = task_inputs_many(t, i, group, lost);
            if (rc != 0)
                return rc;
            i += group - 1;
            continue;
        }
        void *blob = NULL;
        size_t len = 0;
        sb_data_fetch_opts fo = {.requester_id = w->cfg.id, .rpc = w->cfg.rpc, .cancel = t->cancel};
        int rc = sb_data_fetch_addr(ref->worker_address, ref->id, (size_t)ref->bytes, 0, 60000, &fo,
                                    &blob, &len, NULL, &t->err);
        if (rc != 0) {
            sb_wmetrics_fetch_error(w->metrics);
            *lost = ref->id;
            return -2;
        }
        t->bytes_in += len;
        pthread_mutex_lock(&w->mu);
        w->bytes_received += len;
        pthread_mutex_unlock(&w->mu);
        rc = run_chain(t, blob, len, false, last_input(t, i));
        sb_part_free(blob);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* A finished task's completion report, kept (with the outputs it names) until it is delivered:
 * at once by CompleteTask, or with the slot's next poll (PollTasksRequest.completions) when the
 * controller takes batched completions. Owns everything it points to. */
typedef struct task_done {
    Streambatch__V1__CompleteTaskRequest req;
    Streambatch__V1__TaskMetrics met;
    Streambatch__V1__PartitionInfo *infos;
    Streambatch__V1__PartitionInfo **ptrs;
    char *task_id, *lost, *sink_schema;
    out_part *parts;
    size_t nparts;
    Streambatch__V1__ErroredPiece *bad; /* and bad_ptrs: the task's errored_pieces */
    Streambatch__V1__ErroredPiece **bad_ptrs;
    size_t nbad;
    int writes_sink;
    char msg[SB_ERR_MAX + 128];
} task_done;

static void task_done_free(task_done *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->nparts; i++)
        free(d->parts[i].id);
    free(d->parts);
    free(d->infos);
    free(d->ptrs);
    free(d->task_id);
    free(d->lost);
    free(d->sink_schema);
    for (size_t i = 0; i < d->nbad; i++) {
        free(d->bad[i].path);
        free(d->bad[i].error);
    }
    free(d->bad);
    free(d->bad_ptrs);
    free(d);
}

/* A sink task's staged parts once the controller answered: the accepted attempt (the first to
 * finish) publishes them under the parts' names, a refused one (a speculative copy's loser)
 * removes them. A failure is logged only: the commit publishes a listed part still staged and
 * removes the others (sink.h). */
static void sink_parts_settle(worker *w, task_done *d, int accepted)
{
    /* a failed attempt's parts are never published (its retry makes them again) */
    accepted = accepted && d->req.status == STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    for (size_t i = 0; i < d->nparts; i++) {
        sb_err err = {0};
        int rc = accepted ? sb_io_sink_publish_staged(&w->pipeline.spec.sink, d->parts[i].id,
                                                      d->req.attempt, &err)
                          : sb_io_sink_discard_staged(&w->pipeline.spec.sink, d->parts[i].id,
                                                      d->req.attempt, &err);
        if (rc < 0)
            sb_log(SB_LOG_WARN, accepted ? "sink part not published" : "sink part not discarded",
                   "task", d->task_id, "error", err.msg, NULL);
    }
}

/* The controller answered the report: a refused (stale) one's store outputs are dropped,
 * nobody will read them. Frees d. */
static void task_done_acked(worker *w, task_done *d, int accepted)
{
    if (d->writes_sink)
        sink_parts_settle(w, d, accepted);
    else if (!accepted) /* early outputs: the controller says (release list) */
        for (size_t i = 0; i < d->nparts; i++)
            if (!d->parts[i].published)
                sb_store_release(w->store, d->parts[i].id, NULL);
    task_done_free(d);
}

/* The report could not be delivered: its store outputs are released (nobody knows of them).
 * Staged sink parts stay: a controller may have accepted the report all the same (its answer
 * lost, or a new leader's checkpoint lists them), and the commit publishes or removes them.
 * Frees d. */
static void task_done_dropped(worker *w, task_done *d, const char *why)
{
    sb_log(SB_LOG_WARN, "completion report dropped", "task", d->task_id, "why", why, NULL);
    if (d->writes_sink)
        task_done_free(d);
    else
        task_done_acked(w, d, 0);
}

/* What an attempt that reports nothing made is removed: its staged sink parts (nobody publishes
 * them), its store outputs not published early (those the controller took are its to release).
 * Frees t. */
static void task_discard(worker *w, task_ctx *t)
{
    for (size_t i = 0; i < t->nparts; i++)
        if (t->task->writes_sink)
            sb_io_sink_discard_staged(&w->pipeline.spec.sink, t->parts[i].id, t->task->attempt,
                                      &t->err);
        else if (!t->parts[i].published)
            sb_store_release(w->store, t->parts[i].id, NULL);
    task_ctx_free(t);
}

/* A cancelled attempt (the controller cancelled it, or the worker stops): what it made goes, and
 * it is not reported (the controller counts it out already, or re-runs what a stopped worker
 * had). Frees t. */
static void task_cancelled(worker *w, task_ctx *t, double wall0)
{
    char a[16], s[32];
    snprintf(a, sizeof a, "%u", (unsigned)t->task->attempt);
    snprintf(s, sizeof s, "%.3f", mono_s() - wall0);
    sb_log(SB_LOG_INFO, "attempt stopped: cancelled", "task", t->task->task_id, "attempt", a,
           "ran_s", s, NULL);
    sb_wmetrics_task_ended(w->metrics, t->task->stage ? t->task->stage : "", 0, mono_s() - wall0,
                           t->rows_in, t->bytes_in, 0, 0);
    task_discard(w, t);
}

/* Runs the attempt's ops over its inputs, then drains the chain front to back. 0, -2 when an
 * input is lost (*lost names it), or -1 (t->err says why). */
static int attempt_run_ops(task_ctx *t, char **lost)
{
    worker *w = t->w;
    int rc = task_setup(t);
    if (rc == 0)
        rc = task_inputs(t, lost);
    if (rc != 0 && t->accel_held) { /* (nothing fails after the last input's run today) */
        accel_release(w, t->accel_since);
        t->accel_held = 0;
        drain_pending(t);
    }
    if (rc == 0) {
        t->finishing = 1;
        double a0 = t->accel_held ? t->accel_since : accel_acquire(w);
        for (size_t k = 0; rc == 0 && k < t->n; k++) /* drain the chain front to back */
            rc = finish_stage(t, k);
        accel_release(w, a0);
        int rc2 = drain_pending(t);
        if (rc == 0)
            rc = rc2;
    }
    return rc;
}

/* The report's TaskMetrics: times since (wall0, cpu0), bytes and rows in, the scan's counts,
 * inputs read outside the budget, and what the ops spilled and their programs spent. */
static void report_metrics(task_done *d, const task_ctx *t, double wall0, double cpu0)
{
    Streambatch__V1__TaskMetrics *met = &d->met;
    met->wall_seconds = mono_s() - wall0;
    met->cpu_seconds = thread_cpu_s() - cpu0;
    met->bytes_in = t->bytes_in;
    met->rows_in = t->rows_in;
    met->source_bytes_read = t->scan.bytes_read;
    met->row_groups_read = t->scan.rgs_read;
    met->row_groups_skipped = t->scan.rgs_skipped;
    met->source_bytes_skipped = t->scan.bytes_skipped;
    met->pages_read = t->scan.pages_read;
    met->pages_skipped = t->scan.pages_skipped;
    met->inputs_outside_budget = (uint32_t)t->outside;
    met->inputs_outside_budget_bytes = t->outside_bytes;
    for (size_t k = 0; k < t->n && t->impl != NULL && t->state != NULL; k++) {
        if (t->impl[k] == NULL || t->state[k] == NULL)
            continue;
        if (t->impl[k]->child_cpu != NULL)
            met->cpu_seconds += t->impl[k]->child_cpu(t->state[k]); /* exec's program */
        if (t->impl[k]->spilled != NULL)
            met->op_spilled_bytes += t->impl[k]->spilled(t->state[k]);
    }
}

/* The report's status and message from rc (0, -2: d->lost is gone, -1: t->err), and its
 * outputs when it has room to list them (have). */
static void report_status(task_done *d, const task_ctx *t, int rc, int have)
{
    Streambatch__V1__CompleteTaskRequest *req = &d->req;
    if (rc == 0 && have) {
        req->status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    } else if (rc == -2) {
        req->status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_INPUT_LOST;
        req->n_lost_inputs = 1;
        req->lost_inputs = &d->lost;
        snprintf(d->msg, sizeof d->msg, "input %s could not be fetched: %s", d->lost, t->err.msg);
        req->message = d->msg;
    } else {
        req->status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR;
        /* the source or an op failed on the records themselves: a retry would fail the same
         * way */
        req->deterministic = t->err.data != 0 || t->err.permanent != 0;
        req->permanent = t->err.permanent != 0; /* nothing to retry: the pipeline fails */
        snprintf(d->msg, sizeof d->msg, "%s", have ? t->err.msg : "out of memory");
        req->message = d->msg;
    }
    for (size_t i = 0; have && i < t->nparts; i++) {
        streambatch__v1__partition_info__init(&d->infos[i]);
        d->infos[i].id = t->parts[i].id;
        d->infos[i].bytes = t->parts[i].bytes;
        d->infos[i].rows = t->parts[i].rows;
        d->infos[i].crc32c = t->parts[i].crc;
        d->ptrs[i] = &d->infos[i];
    }
    if (have) {
        req->n_outputs = t->nparts;
        req->outputs = d->ptrs;
    }
}

/* What an OK report carries beyond its outputs: the sink schema the task inferred, and the
 * pieces (images) that errored, whose list the report takes from t. Out of memory for that
 * list, the task fails (retried) rather than drop the images silently. */
static void report_extras(task_done *d, task_ctx *t)
{
    Streambatch__V1__CompleteTaskRequest *req = &d->req;
    if (t->sink_schema != NULL && t->task->infer_sink_schema) { /* the schema it inferred */
        d->sink_schema = t->sink_schema;
        t->sink_schema = NULL;
        req->sink_schema = d->sink_schema;
    }
    if (req->status != STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK || t->nbad == 0)
        return;
    if ((d->bad_ptrs = calloc(t->nbad, sizeof *d->bad_ptrs)) == NULL) {
        req->status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR;
        snprintf(d->msg, sizeof d->msg, "out of memory listing the images that errored");
        req->message = d->msg;
        return;
    }
    d->bad = t->bad; /* the report owns them now */
    d->nbad = t->nbad;
    t->bad = NULL;
    t->nbad = 0;
    for (size_t i = 0; i < d->nbad; i++)
        d->bad_ptrs[i] = &d->bad[i];
    req->errored_pieces = d->bad_ptrs;
    req->n_errored_pieces = d->nbad;
}

/* Runs a task attempt and builds its report; NULL when it was cancelled or the worker stops
 * (nothing is reported then: the controller re-runs what a stopped worker had). */
static task_done *run_attempt(worker *w, const Streambatch__V1__Task *task, int *cancel)
{
    task_ctx t;
    memset(&t, 0, sizeof t);
    t.w = w;
    t.task = task;
    t.cancel = cancel;
    t.in = task->inputs;
    t.nin = task->n_inputs;
    t.in_open = task->inputs_open;
    double wall0 = mono_s(), cpu0 = thread_cpu_s();
    char *lost = NULL;
    const char *stage = task->stage ? task->stage : "";
    sb_wmetrics_task_started(w->metrics, stage);
    int rc = attempt_run_ops(&t, &lost);
    if (__atomic_load_n(cancel, __ATOMIC_RELAXED)) { /* also one that ended meanwhile */
        task_cancelled(w, &t, wall0);
        return NULL;
    }
    /* every task is reported (the controller would wait for it forever): out of memory, the
     * report waits for memory rather than being lost */
    task_done *d;
    while ((d = calloc(1, sizeof *d)) == NULL || (d->task_id = strdup(task->task_id)) == NULL ||
           (rc == -2 && (d->lost = strdup(lost ? lost : "")) == NULL)) {
        task_done_free(d);
        if (stopping(w)) { /* the task is re-run elsewhere: nobody publishes it */
            task_discard(w, &t);
            return NULL;
        }
        usleep(10000);
    }
    Streambatch__V1__CompleteTaskRequest *req = &d->req;
    streambatch__v1__complete_task_request__init(req);
    streambatch__v1__task_metrics__init(&d->met);
    d->writes_sink = task->writes_sink;
    req->worker_id = (char *)w->cfg.id;
    req->session = w->session;
    req->task_id = d->task_id;
    req->attempt = task->attempt;
    req->metrics = &d->met;
    report_metrics(d, &t, wall0, cpu0);
    d->infos = calloc(t.nparts + 1, sizeof *d->infos);
    d->ptrs = calloc(t.nparts + 1, sizeof *d->ptrs);
    report_status(d, &t, rc, d->infos != NULL && d->ptrs != NULL);
    uint64_t rows_out = 0, bytes_out = 0;
    for (size_t i = 0; i < t.nparts; i++) {
        rows_out += t.parts[i].rows;
        bytes_out += t.parts[i].bytes;
    }
    sb_wmetrics_task_ended(w->metrics, stage,
                           req->status == STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK,
                           d->met.wall_seconds, t.rows_in, t.bytes_in, rows_out, bytes_out);
    if (req->status != STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK)
        sb_log(SB_LOG_WARN, "task failed", "task", task->task_id, "error", req->message, NULL);
    report_extras(d, &t);
    /* the report owns the outputs' ids now */
    d->parts = t.parts;
    d->nparts = t.nparts;
    t.parts = NULL;
    t.nparts = 0;
    t.reuse = req->status == STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    task_ctx_free(&t);
    return d;
}

/* run_attempt with the attempt's cancel flag listed (apply_cancels finds it) and bound to this
 * thread for the ops (sb_op_cancelled). */
static task_done *run_task(worker *w, const Streambatch__V1__Task *task)
{
    int cancel = 0;
    attempt_begin(w, task, &cancel);
    sb_op_cancel_bind(&cancel);
    task_done *d = run_attempt(w, task, &cancel);
    sb_op_cancel_bind(NULL);
    attempt_end(w, &cancel);
    return d;
}

/* Sends the report by CompleteTask and frees it. Retried while the controller is unreachable;
 * given up when the worker stops (the loss timeout included), when a Rebind replaced that
 * controller, or after 5 answers that were errors. */
static void report_single(worker *w, task_done *d, uint64_t gen)
{
    ProtobufCMessage *resp = NULL;
    sb_err err;
    const char *dropped = "the worker is stopping";
    int backoff = BACKOFF_FIRST_MS;
    for (int errors = 0; !stopping(w);) {
        if (cur_gen(w) != gen) {
            dropped = "the controller changed (Rebind)";
            break;
        }
        ctl_chan *c = ctl_get(w, 0);
        if (c == NULL) { /* a re-registration is pending */
            nap(w, 20, gen);
            continue;
        }
        sb_rpc_code code = sb_rpc_call_msg(c->ch, SB_RPC_CONTROL_COMPLETE_TASK, &d->req.base, 10000,
                                           0, &resp, &err);
        int cur = code == SB_RPC_OK && ctl_ok(w, c);
        ctl_put(w, c);
        if (code == SB_RPC_OK && !cur) {
            sb_rpc_msg_free(resp);
            resp = NULL;
            dropped = "the controller changed (Rebind)";
            break;
        }
        if (code == SB_RPC_OK)
            break;
        if (backoff == BACKOFF_FIRST_MS || !unreachable(code))
            sb_log(SB_LOG_WARN, "CompleteTask failed, retrying", "task", d->task_id, "error",
                   err.msg, NULL);
        if (!unreachable(code) && ++errors >= 5) {
            dropped = "the controller kept refusing it";
            break;
        }
        nap(w, backoff, gen);
        backoff = backoff_next(backoff);
    }
    if (resp != NULL) {
        Streambatch__V1__CompleteTaskReply *r = (Streambatch__V1__CompleteTaskReply *)resp;
        apply_releases(w, r->release, r->n_release);
        task_done_acked(w, d, r->accepted);
        sb_rpc_msg_free(resp);
    } else {
        task_done_dropped(w, d, dropped);
    }
}

/* ---- storage jobs -------------------------------------------------------------------------- */

/* Sends one storage job report, retried like a task's completion report. The reply (to free
 * with sb_rpc_msg_free), or NULL when it was given up (*why says why). */
static ProtobufCMessage *storage_report(worker *w, Streambatch__V1__CompleteTaskRequest *req,
                                        uint64_t gen, const char **why)
{
    ProtobufCMessage *resp = NULL;
    sb_err err;
    *why = "the worker is stopping";
    int backoff = BACKOFF_FIRST_MS;
    for (int errors = 0; !stopping(w);) {
        if (cur_gen(w) != gen) {
            *why = "the controller changed (Rebind)";
            return NULL;
        }
        ctl_chan *c = ctl_get(w, 0);
        if (c == NULL) {
            nap(w, 20, gen);
            continue;
        }
        sb_rpc_code code =
            sb_rpc_call_msg(c->ch, SB_RPC_CONTROL_COMPLETE_TASK, &req->base, 30000, 0, &resp, &err);
        int cur = code == SB_RPC_OK && ctl_ok(w, c);
        ctl_put(w, c);
        if (code == SB_RPC_OK && !cur) {
            sb_rpc_msg_free(resp);
            *why = "the controller changed (Rebind)";
            return NULL;
        }
        if (code == SB_RPC_OK)
            return resp;
        sb_log(SB_LOG_WARN, "storage job report failed, retrying", "job", req->task_id, "error",
               err.msg, NULL);
        if (!unreachable(code) && ++errors >= 5) {
            *why = "the controller kept refusing it";
            return NULL;
        }
        nap(w, backoff, gen);
        backoff = backoff_next(backoff);
    }
    return NULL;
}

/* Test hook: SB_WORKER_TEST_DIE_IN_STORAGE_JOB="<kind>:<marker path>" (kind plan, prepare,
 * commit or abort) kills this worker in the first job of that kind, before it reports, if it
 * can create the marker file (so exactly one worker dies, and the retry succeeds). */
static void test_die_hook(sb_storage_kind kind)
{
    const char *v = getenv("SB_WORKER_TEST_DIE_IN_STORAGE_JOB");
    static const char *names[] = {"", "plan", "prepare", "commit", "abort"};
    if (v == NULL || kind < SB_STORAGE_PLAN || kind > SB_STORAGE_ABORT)
        return;
    size_t k = strlen(names[kind]);
    if (strncmp(v, names[kind], k) != 0 || v[k] != ':')
        return;
    FILE *f = fopen(v + k + 1, "wx");
    if (f == NULL)
        return;
    fclose(f);
    sb_log(SB_LOG_WARN, "test hook: dying in a storage job", "kind", names[kind], NULL);
    raise(SIGKILL);
}

/* The report of a storage job, without its status. */
static Streambatch__V1__CompleteTaskRequest storage_req(worker *w,
                                                        const Streambatch__V1__StorageJob *job)
{
    Streambatch__V1__CompleteTaskRequest req = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    req.worker_id = (char *)w->cfg.id;
    req.session = w->session;
    req.task_id = job->job_id;
    req.attempt = job->attempt;
    return req;
}

/* Runs a checkpoint log job (storage/ckptjob.h) into *files (LOAD). 0, or -1 + err. */
static int ckpt_job(worker *w, const Streambatch__V1__StorageJob *job, sb_storage_files *files,
                    sb_err *err)
{
    sb_storage_kind kind = (sb_storage_kind)job->kind;
    if (kind == SB_STORAGE_CKPT_LOAD)
        return sb_storage_ckpt_load(&w->pipeline, files, err);
    if (kind == SB_STORAGE_CKPT_REMOVE)
        return sb_storage_ckpt_remove(&w->pipeline, err);
    sb_storage_file *v = calloc(job->n_files + 1, sizeof *v);
    if (v == NULL)
        return sb_err_set(err, "out of memory");
    for (size_t i = 0; i < job->n_files; i++) /* borrowed from the message */
        v[i] = (sb_storage_file){job->files[i]->name, (char *)job->files[i]->data.data,
                                 job->files[i]->data.len};
    int rc = sb_storage_ckpt_put(&w->pipeline, v, job->n_files, job->prune, err);
    free(v);
    return rc;
}

/* The next LOAD result piece from files, starting at file *fi, byte *off: chunks of at most
 * SB_STORAGE_PIECE_BYTES in all, into chunks[0..max) (pointing into files). The count. */
static size_t ckpt_piece(const sb_storage_files *fs, size_t *fi, size_t *off,
                         Streambatch__V1__CheckpointFile *chunks, size_t max)
{
    size_t k = 0, used = 0;
    while (*fi < fs->n && k < max && used < SB_STORAGE_PIECE_BYTES) {
        const sb_storage_file *f = &fs->v[*fi];
        size_t take = f->len - *off;
        if (take > SB_STORAGE_PIECE_BYTES - used)
            take = SB_STORAGE_PIECE_BYTES - used;
        Streambatch__V1__CheckpointFile c = STREAMBATCH__V1__CHECKPOINT_FILE__INIT;
        c.name = f->name;
        c.data.data = (uint8_t *)f->data + *off;
        c.data.len = take;
        chunks[k++] = c;
        used += take + 64;
        *off += take;
        if (*off == f->len) {
            (*fi)++;
            *off = 0;
        }
    }
    return k;
}

/* Runs a checkpoint log job and reports it; LOAD's files in pieces (StorageResult.files,
 * offset = the piece's number), the last with more = false. */
static void run_ckpt_job(worker *w, const Streambatch__V1__StorageJob *job, uint64_t gen)
{
    sb_err err = {0};
    sb_storage_files files = {0};
    int rc = w->have_pipeline ? ckpt_job(w, job, &files, &err)
                              : sb_err_set(&err, "the worker has no pipeline");
    Streambatch__V1__CompleteTaskRequest req = storage_req(w, job);
    Streambatch__V1__StorageResult res = STREAMBATCH__V1__STORAGE_RESULT__INIT;
    req.status = rc == 0 ? STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK
                         : STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR;
    char msg[SB_ERR_MAX + 64];
    if (rc != 0) {
        snprintf(msg, sizeof msg, "%s", err.msg);
        req.message = msg;
        sb_log(SB_LOG_WARN, "storage job failed", "job", job->job_id, "error", msg, NULL);
    }
    enum { MAXC = 256 };
    Streambatch__V1__CheckpointFile chunks[MAXC], *ptrs[MAXC];
    for (size_t i = 0; i < MAXC; i++)
        ptrs[i] = &chunks[i];
    if (rc == 0 && job->kind == STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_CKPT_LOAD)
        req.storage = &res;
    size_t fi = 0, off = 0;
    for (uint64_t piece = 0;; piece++) {
        if (req.storage != NULL) {
            res.offset = piece;
            res.n_files = ckpt_piece(&files, &fi, &off, chunks, MAXC);
            res.files = ptrs;
            res.more = fi < files.n;
        }
        const char *why = NULL;
        ProtobufCMessage *resp = storage_report(w, &req, gen, &why);
        if (resp == NULL) {
            sb_log(SB_LOG_WARN, "storage job report dropped", "job", job->job_id, "why", why, NULL);
            break;
        }
        int accepted = ((Streambatch__V1__CompleteTaskReply *)resp)->accepted;
        sb_rpc_msg_free(resp);
        if (!accepted || req.storage == NULL || !res.more)
            break;
    }
    sb_storage_files_free(&files);
}

/* Runs a storage job (see storage/jobs.h) and reports it: PLAN in pieces of at
 * most SB_STORAGE_PIECE_BYTES, in plan order. */
static void run_storage_job(worker *w, const Streambatch__V1__StorageJob *job, uint64_t gen)
{
    sb_storage_kind kind = (sb_storage_kind)job->kind;
    if (kind >= SB_STORAGE_CKPT_PUT && kind <= SB_STORAGE_CKPT_REMOVE) {
        run_ckpt_job(w, job, gen);
        return;
    }
    sb_err err = {0};
    sb_storage_splits plan;
    memset(&plan, 0, sizeof plan);
    sb_storage_output *parts = calloc(job->n_parts + 1, sizeof *parts);
    sb_storage_errored *errs = calloc(job->n_errored + 1, sizeof *errs);
    int rc;
    if (parts == NULL || errs == NULL) {
        rc = sb_err_set(&err, "out of memory");
    } else if (!w->have_pipeline) {
        rc = sb_err_set(&err, "the worker has no pipeline");
    } else {
        for (size_t i = 0; i < job->n_parts; i++) {
            parts[i].id = job->parts[i]->id;
            parts[i].bytes = job->parts[i]->bytes;
            parts[i].rows = job->parts[i]->rows;
            parts[i].crc32c = job->parts[i]->crc32c;
        }
        for (size_t i = 0; i < job->n_errored; i++)
            errs[i] = (sb_storage_errored){job->errored[i]->stage, job->errored[i]->task_id,
                                           job->errored[i]->input, job->errored[i]->error};
        rc = sb_storage_run(&w->pipeline, kind, parts, job->n_parts, errs, job->n_errored, &plan,
                            &err);
    }
    free(parts);
    free(errs);
    test_die_hook(kind);
    Streambatch__V1__CompleteTaskRequest req = storage_req(w, job);
    Streambatch__V1__StorageResult res = STREAMBATCH__V1__STORAGE_RESULT__INIT;
    uint64_t *bytes = NULL;
    if (rc == 0 && kind == SB_STORAGE_PLAN) {
        bytes = calloc(plan.nsplits + 1, sizeof *bytes);
        if (bytes == NULL)
            rc = sb_err_set(&err, "out of memory");
        for (size_t i = 0; bytes != NULL && i < plan.nsplits; i++)
            bytes[i] = plan.splits[i].bytes;
    }
    char msg[SB_ERR_MAX + 64];
    if (rc != 0) {
        req.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_ERROR;
        snprintf(msg, sizeof msg, "%s", err.msg);
        req.message = msg;
        sb_log(SB_LOG_WARN, "storage job failed", "job", job->job_id, "error", msg, NULL);
    } else {
        req.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    }
    if (rc == 0 && kind == SB_STORAGE_PLAN)
        req.storage = &res;
    size_t from = 0;
    do {
        size_t k = 0;
        if (req.storage != NULL) {
            k = sb_storage_piece((const char *const *)plan.enc, plan.nsplits, from,
                                 SB_STORAGE_PIECE_BYTES);
            res.offset = from;
            res.n_splits = k;
            res.splits = plan.enc + from;
            res.n_split_bytes = k;
            res.split_bytes = bytes + from;
            res.more = from + k < plan.nsplits;
            res.n_join_right_bytes = from == 0 && plan.join_right ? w->pipeline.spec.nstages : 0;
            res.join_right_bytes = plan.join_right;
        }
        const char *why = NULL;
        ProtobufCMessage *resp = storage_report(w, &req, gen, &why);
        if (resp == NULL) {
            sb_log(SB_LOG_WARN, "storage job report dropped", "job", job->job_id, "why", why, NULL);
            break;
        }
        Streambatch__V1__CompleteTaskReply *r = (Streambatch__V1__CompleteTaskReply *)resp;
        int accepted = r->accepted;
        sb_rpc_msg_free(resp);
        if (!accepted) {
            sb_log(SB_LOG_INFO, "storage job report refused (another attempt owns the job)", "job",
                   job->job_id, NULL);
            break;
        }
        from += k;
    } while (req.storage != NULL && from < plan.nsplits);
    free(bytes);
    sb_storage_splits_free(&plan);
}

/* ---- loops ------------------------------------------------------------------------------- */

/* 1 if the controller behind c takes completions in polls (RegisterReply.batched_completions). */
static int chan_batched(worker *w, const ctl_chan *c)
{
    pthread_mutex_lock(&w->mu);
    int b = c->batched;
    pthread_mutex_unlock(&w->mu);
    return b;
}

/* Reports a slot holds until its next poll (one per task it ran since; a poll brings one task,
 * or up to SLOT_BATCH short ones; the array only bounds a misbehaving controller). */
#define SLOT_DONE_MAX 64
/* Short tasks a slot takes in one poll and runs one after another (PollTasksRequest.batch:
 * the controller decides which are short and how many, about 10 ms of work): SLOT_BATCH, or
 * SB_POLL_BATCH from the environment (1 turns batches off: benchmarks compare the two). */
#define SLOT_BATCH 32

static uint32_t slot_batch(void)
{
    const char *v = getenv("SB_POLL_BATCH");
    char *end;
    unsigned long n = v != NULL && *v ? strtoul(v, &end, 10) : 0;
    if (v == NULL || !*v)
        return SLOT_BATCH;
    if (*end != '\0' || n < 1 || n > SLOT_DONE_MAX) {
        sb_log(SB_LOG_WARN, "SB_POLL_BATCH is not a number from 1 to 64: the default is used",
               "value", v, NULL);
        return SLOT_BATCH;
    }
    return (uint32_t)n;
}

typedef struct {
    task_done *d[SLOT_DONE_MAX];
    size_t n;
    uint64_t gen; /* the controller generation the tasks came from */
} slot_reports;

static void reports_drop(worker *w, slot_reports *sr, const char *why)
{
    for (size_t i = 0; i < sr->n; i++)
        task_done_dropped(w, sr->d[i], why);
    sr->n = 0;
}

/* A slot of a worker with an accelerator asks for the shortest scheduler slice, so that when the
 * accelerator (or its result) is ready the slot runs at once rather than after the slice of a
 * CPU-bound thread on the same core: 0.7-1 ms per accelerator task on two cores kept busy by CPU
 * workers, 1.06x -> 1.03x of the CPU -> accelerator pipeline's bound (docs/benchmarks.md).
 * ACCEL_SLICE_US, or SB_ACCEL_SLICE_US from the environment (0 keeps the kernel's default:
 * benchmarks compare the two). */
#define ACCEL_SLICE_US 100

static void slot_short_slice(worker *w)
{
    const char *v = getenv("SB_ACCEL_SLICE_US");
    char *end = NULL;
    unsigned long us = v != NULL && *v ? strtoul(v, &end, 10) : ACCEL_SLICE_US;
    if (end != NULL && (*end != '\0' || us > 100000)) {
        if (!__atomic_exchange_n(&w->slice_warned, 1, __ATOMIC_RELAXED))
            sb_log(SB_LOG_WARN, "SB_ACCEL_SLICE_US is not a number from 0 to 100000: 100 is used",
                   "value", v, NULL);
        us = ACCEL_SLICE_US;
    }
    sb_err err = {0};
    if (us > 0 && sb_slice_set((uint32_t)us, &err) < 0 &&
        !__atomic_exchange_n(&w->slice_warned, 1, __ATOMIC_RELAXED)) /* once per worker */
        sb_log(SB_LOG_WARN, "accelerator slots keep the default scheduler slice", "error", err.msg,
               NULL);
}

/* running_tasks counts the slots inside a task or storage job (what a drain waits for). */
static void running_add(worker *w, int delta)
{
    pthread_mutex_lock(&w->mu);
    w->running_tasks += delta;
    pthread_mutex_unlock(&w->mu);
}

/* What a slot does with a poll reply r of controller generation gen (cur: the controller is
 * still the one this slot's channel reached): the answers to the reports it carried, the
 * releases and cancels, then the storage job or the tasks it holds, run here; their reports
 * join sr (batched) or go at once. */
static void slot_apply_reply(worker *w, slot_reports *sr, Streambatch__V1__PollTasksReply *r,
                             int cur, int batched, uint64_t gen)
{
    if (sr->n > 0 && !cur) {
        reports_drop(w, sr, "the controller changed (Rebind)");
    } else if (sr->n > 0) {
        if (r->n_accepted != sr->n)
            sb_log(SB_LOG_WARN, "poll reply acknowledged another number of completions", "worker",
                   w->cfg.id, NULL);
        /* a missing answer counts as accepted: its outputs are kept (dropping outputs the
         * controller took would lose them) */
        for (size_t i = 0; i < sr->n; i++)
            task_done_acked(w, sr->d[i], i < r->n_accepted ? r->accepted[i] : 1);
        sr->n = 0;
        apply_releases(w, r->release, r->n_release);
    }
    if (cur)
        apply_cancels(w, r->cancel, r->n_cancel);
    if (cur && r->storage_job != NULL && !stopping(w) && cur_gen(w) == gen) {
        running_add(w, 1);
        run_storage_job(w, r->storage_job, gen);
        running_add(w, -1);
    }
    for (size_t i = 0; cur && i < r->n_tasks && !stopping(w) && cur_gen(w) == gen; i++) {
        running_add(w, 1);
        task_done *d = run_task(w, r->tasks[i]);
        running_add(w, -1);
        if (d == NULL)
            continue;
        if (batched && sr->n < SLOT_DONE_MAX) {
            sr->d[sr->n++] = d;
            sr->gen = gen;
        } else {
            report_single(w, d, gen);
        }
    }
    if (cur && r->shutdown && cur_gen(w) == gen)
        set_told_to_exit(w);
}

/* Polls for tasks and runs them. A task's report rides on the slot's next poll when the
 * controller takes batched completions (one call per task instead of two), else it is sent by
 * CompleteTask at once. A controller that cannot be reached is retried with backoff (the main
 * loop gives up after the loss timeout), the reports with it; answers from a controller that a
 * Rebind replaced meanwhile are ignored (tasks included: the new leader hands out its own) and
 * reports for it are dropped. */
static void *slot_main(void *arg)
{
    worker *w = arg;
    if (w->have_accel)
        slot_short_slice(w);
    int backoff = BACKOFF_FIRST_MS;
    int errors = 0; /* answers that were errors while reports rode along */
    slot_reports sr = {.n = 0};
    uint32_t batch = slot_batch();
    while (!stopping(w)) {
        ctl_chan *c = ctl_get(w, 0);
        if (c == NULL) { /* a (re-)registration is pending */
            usleep(20000);
            continue;
        }
        uint64_t gen = c->gen;
        if (sr.n > 0 && sr.gen != gen) {
            reports_drop(w, &sr, "the controller changed (Rebind)");
        } else if (sr.n > 0 && !chan_batched(w, c)) {
            /* registered again with a controller that does not batch: one call each */
            ctl_put(w, c);
            for (size_t i = 0; i < sr.n; i++)
                report_single(w, sr.d[i], gen);
            sr.n = 0;
            continue;
        }
        Streambatch__V1__CompleteTaskRequest *creqs[SLOT_DONE_MAX];
        for (size_t i = 0; i < sr.n; i++)
            creqs[i] = &sr.d[i]->req;
        Streambatch__V1__PollTasksRequest req = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
        req.worker_id = (char *)w->cfg.id;
        req.session = w->session;
        req.free_slots = 1;
        req.batch = batch;
        req.wait_ms = 1000;
        req.n_completions = sr.n;
        req.completions = sr.n > 0 ? creqs : NULL;
        ProtobufCMessage *resp = NULL;
        sb_err err;
        /* with reports: CompleteTask's deadline, so that after a network cut a report still
         * queued in the connection arrives as it did on its own (before later heartbeats) */
        sb_rpc_code code = sb_rpc_call_msg(c->ch, SB_RPC_CONTROL_POLL_TASKS, &req.base,
                                           sr.n > 0 ? 10000 : 5000, 0, &resp, &err);
        int cur = code == SB_RPC_OK && ctl_ok(w, c);
        int batched = chan_batched(w, c);
        ctl_put(w, c);
        if (code != SB_RPC_OK) {
            if (backoff == BACKOFF_FIRST_MS || (sr.n > 0 && !unreachable(code)))
                sb_log(SB_LOG_WARN, "PollTasks failed, retrying with backoff", "worker", w->cfg.id,
                       "error", err.msg, NULL);
            if (sr.n > 0 && !unreachable(code) && ++errors >= 5) {
                reports_drop(w, &sr, "the controller kept refusing it");
                errors = 0;
            }
            nap(w, backoff, gen);
            backoff = backoff_next(backoff);
            continue;
        }
        backoff = BACKOFF_FIRST_MS;
        errors = 0;
        slot_apply_reply(w, &sr, (Streambatch__V1__PollTasksReply *)resp, cur, batched, gen);
        sb_rpc_msg_free(resp);
    }
    reports_drop(w, &sr, "the worker is stopping");
    pthread_mutex_lock(&w->mu);
    w->slots_live--;
    pthread_cond_broadcast(&w->wake); /* sb_worker_run waits for the slots (slots_wait) */
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* 0 when the controller answered, -1 when it could not be reached (or must be registered with
 * first). */
static int heartbeat_once(worker *w)
{
    sb_store_stats ss;
    sb_store_get_stats(w->store, &ss);
    Streambatch__V1__HeartbeatRequest req = STREAMBATCH__V1__HEARTBEAT_REQUEST__INIT;
    Streambatch__V1__WorkerMetrics m = STREAMBATCH__V1__WORKER_METRICS__INIT;
    req.worker_id = (char *)w->cfg.id;
    req.session = w->session;
    req.metrics = &m;
    m.store_memory_bytes = ss.mem_bytes;
    m.store_disk_bytes = ss.disk_bytes;
    pthread_mutex_lock(&w->mu);
    m.tasks_running = (uint32_t)w->running_tasks;
    m.bytes_received = w->bytes_received;
    pthread_mutex_unlock(&w->mu);
    m.spill_bytes_total = ss.spilled_bytes;
    m.fetch_errors_total = sb_wmetrics_fetch_errors(w->metrics);
    m.gpu_busy_seconds = sb_wmetrics_accel_seconds(w->metrics);
    sb_wmetrics_process(&m.cpu_seconds, &m.rss_bytes);
    ProtobufCMessage *resp;
    sb_err err;
    int cur;
    sb_rpc_code code = ctl_call(w, SB_RPC_CONTROL_HEARTBEAT, &req.base, 3000, &resp, &cur, &err);
    if (code != SB_RPC_OK) {
        sb_log(SB_LOG_DEBUG, "Heartbeat failed", "worker", w->cfg.id, "error", err.msg, NULL);
        return -1;
    }
    Streambatch__V1__HeartbeatReply *r = (Streambatch__V1__HeartbeatReply *)resp;
    if (cur) {
        apply_releases(w, r->release, r->n_release);
        apply_cancels(w, r->cancel, r->n_cancel);
        if (r->shutdown)
            set_told_to_exit(w);
        if (r->reregister && !r->shutdown) { /* a new leader that does not know this worker */
            pthread_mutex_lock(&w->mu);
            w->need_register = 1;
            pthread_mutex_unlock(&w->mu);
        }
    }
    sb_rpc_msg_free(resp);
    return 0;
}

/* Registers on channel c with every partition the store holds; *code (may be NULL) is the
 * call's status: SB_RPC_OK, or why it failed. */
static int do_register(worker *w, ctl_chan *c, int timeout_ms, size_t *nheld, sb_rpc_code *code,
                       sb_err *err)
{
    if (code != NULL)
        *code = SB_RPC_UNKNOWN;
    sb_store_item *items = NULL;
    size_t n = 0;
    if (sb_store_list(w->store, &items, &n, err) != 0)
        return -1;
    Streambatch__V1__PartitionInfo *infos = calloc(n + 1, sizeof *infos);
    Streambatch__V1__PartitionInfo **ptrs = calloc(n + 1, sizeof *ptrs);
    if (infos == NULL || ptrs == NULL) {
        free(items);
        free(infos);
        free(ptrs);
        return sb_err_set(err, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        streambatch__v1__partition_info__init(&infos[i]);
        infos[i].id = (char *)items[i].id;
        infos[i].bytes = items[i].len;
        ptrs[i] = &infos[i];
    }
    *nheld = n;
    Streambatch__V1__RegisterRequest req = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
    req.worker_id = (char *)w->cfg.id;
    req.session = w->session;
    req.pool = (char *)w->cfg.pool;
    req.address = w->address;
    req.slots = w->cfg.slots;
    req.n_partitions = n;
    req.partitions = ptrs;
    req.memory_budget_bytes = w->cfg.store_budget;
    req.early_outputs = 1; /* Task.publish_early: reported as stored, waits when told to */
    ProtobufCMessage *resp = NULL;
    sb_rpc_code rc_call = sb_rpc_call_msg(c->ch, SB_RPC_CONTROL_REGISTER, &req.base, timeout_ms,
                                          SB_RPC_WAIT_FOR_READY, &resp, err);
    if (code != NULL)
        *code = rc_call;
    free(items);
    free(infos);
    free(ptrs);
    if (rc_call != SB_RPC_OK)
        return sb_err_wrap(err, "registering with %s", c->addr);
    Streambatch__V1__RegisterReply *r = (Streambatch__V1__RegisterReply *)resp;
    w->hb_ms = r->heartbeat_interval_ms ? (uint32_t)r->heartbeat_interval_ms : 1000;
    pthread_mutex_lock(&w->mu);
    c->batched = r->batched_completions;
    pthread_mutex_unlock(&w->mu);
    if (ctl_ok(w, c))
        apply_releases(w, r->release, r->n_release);
    int rc = 0;
    if (!w->have_pipeline) {
        const char *js = r->pipeline_json ? r->pipeline_json : "";
        w->doc = sb_doc_parse_json(js, strlen(js), NULL);
        sb_diags d = {0};
        if (w->doc == NULL || sb_doc_error(w->doc, NULL, NULL) != NULL ||
            sb_pipeline_decode(sb_doc_root(w->doc, 0), &w->pipeline, &d) != 0 || d.n > 0) {
            rc = sb_err_set(err, "the controller sent an invalid pipeline: %s",
                            d.n ? d.items[0].msg : "not JSON");
        } else if (sb_io_sink_tag_check(r->sink_tag, w->pipeline.spec.sink.mode, err) != 0) {
            rc = sb_err_wrap(err, "the controller sent an invalid sink tag");
        } else {
            snprintf(w->pipeline.spec.sink.part_tag, sizeof w->pipeline.spec.sink.part_tag, "%s",
                     r->sink_tag ? r->sink_tag : "");
            w->have_pipeline = 1;
            sb_wmetrics_set_pipeline(w->metrics, w->pipeline.metadata.namespace_,
                                     w->pipeline.metadata.name);
        }
        sb_diags_free(&d);
    }
    sb_rpc_msg_free(resp);
    return rc;
}

/* ---- Worker.Rebind ------------------------------------------------------------------------ */

/* Runs on a server thread: only swaps the channel (no blocking call); the main loop registers
 * at the new controller and the slots wait for that before they poll again. */
static void h_rebind(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    worker *w = ud;
    Streambatch__V1__RebindRequest *m = (Streambatch__V1__RebindRequest *)sb_rpc_call_decode(
        call, &streambatch__v1__rebind_request__descriptor, req, len);
    if (m == NULL)
        return;
    Streambatch__V1__RebindReply rep = STREAMBATCH__V1__REBIND_REPLY__INIT;
    rep.worker_id = (char *)w->cfg.id;
    char msg[SB_ERR_MAX + 256] = "";
    const char *mine = w->cfg.pipeline;
    ctl_chan *nc = NULL, *old = NULL;
    uint64_t accepted_epoch = 0;
    /* The caller holds this pipeline's controller token (the server checked the role); it must
     * also name this worker's pipeline: a worker serves one pipeline for its whole life. */
    if (mine == NULL || *mine == '\0')
        snprintf(msg, sizeof msg, "worker %s was started without a pipeline: it takes no Rebind",
                 w->cfg.id);
    else if (m->pipeline == NULL || strcmp(mine, m->pipeline) != 0)
        snprintf(msg, sizeof msg, "worker %s belongs to pipeline %s, not %s", w->cfg.id, mine,
                 m->pipeline != NULL && *m->pipeline ? m->pipeline : "(none)");
    else {
        sb_err err;
        nc = chan_new(m->controller_address, w->cfg.rpc, &err);
        if (nc == NULL)
            snprintf(msg, sizeof msg, "cannot use controller address %s: %s", m->controller_address,
                     err.msg);
    }
    if (nc != NULL) {
        pthread_mutex_lock(&w->mu);
        if (w->shutdown || g_stop) {
            snprintf(msg, sizeof msg, "worker %s is shutting down", w->cfg.id);
        } else if (m->epoch < w->epoch) {
            snprintf(msg, sizeof msg, "epoch %" PRIu64 " is lower than the accepted epoch %" PRIu64,
                     (uint64_t)m->epoch, w->epoch);
        } else {
            old = w->chan;
            nc->gen = ++w->gen;
            w->chan = nc;
            nc = NULL;
            w->epoch = m->epoch;
            w->need_register = 1;
            w->last_contact = mono_s(); /* the loss clock starts again */
            rep.accepted = 1;
        }
        accepted_epoch = w->epoch;
        pthread_mutex_unlock(&w->mu);
    }
    char ep[32], acc[32];
    snprintf(ep, sizeof ep, "%" PRIu64, (uint64_t)m->epoch);
    snprintf(acc, sizeof acc, "%" PRIu64, accepted_epoch);
    if (rep.accepted)
        sb_log(SB_LOG_INFO, "rebound to a new controller", "worker", w->cfg.id, "controller",
               m->controller_address, "epoch", ep, NULL);
    else
        sb_log(SB_LOG_WARN, "Rebind refused", "worker", w->cfg.id, "controller",
               m->controller_address, "epoch", ep, "accepted_epoch", acc, "why", msg, NULL);
    rep.message = msg;
    sb_err err;
    if (sb_rpc_call_reply_msg(call, &rep.base, &err) != 0)
        sb_log(SB_LOG_WARN, "Rebind reply failed", "error", err.msg, NULL);
    sb_rpc_msg_free(&m->base);
    ctl_put(w, nc);  /* refused: never used */
    ctl_put(w, old); /* freed here, or by the last call still in flight on it */
}

/* The monotonic clock ms from now (for pthread_cond_timedwait on wake). */
static struct timespec deadline_in(int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    return until;
}

/* Waits ms, or until shutdown is set by another thread (the controller's "exit" in a poll
 * reply): a worker told to exit leaves at once, not at the next tick. A signal's g_stop is
 * seen at the next tick. */
static void main_nap(worker *w, int ms)
{
    struct timespec until = deadline_in(ms);
    pthread_mutex_lock(&w->mu);
    while (!w->shutdown && !g_stop)
        if (pthread_cond_timedwait(&w->wake, &w->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&w->mu);
}

/* How often the main thread looks for resident freed heap (heap.h). What the process holds
 * outside the store is read at every pass of the loop, and the store makes room for its peak
 * over the last two seconds (sb_heap_peak). */
#define HEAP_CHECK_MS 250

static void heap_tick(worker *w, sb_heap_peak *peak, bool check)
{
    size_t anon = sb_heap_anon();
    if (anon == 0)
        return; /* statm could not be read: the store keeps what it was told */
    sb_store_stats st;
    sb_store_get_stats(w->store, &st);
    size_t outside = sb_heap_outside(anon, st.mem_bytes, SB_HEAP_ALLOWANCE);
    if (check && sb_heap_check(anon, outside, sb_heap_keep(w->cfg.store_budget)) == 1 &&
        (anon = sb_heap_anon()) != 0) /* the trim returned pages: read what is left */
        outside = sb_heap_outside(anon, st.mem_bytes, SB_HEAP_ALLOWANCE);
    sb_store_set_outside(w->store, sb_heap_peak_add(peak, (uint64_t)(mono_s() * 1000), outside));
}

/* The main thread: (re-)registration, heartbeats, and the controller-loss timeout. */
static void main_loop(worker *w)
{
    double next_hb = mono_s(), next_reg = 0, next_heap = 0;
    sb_heap_peak peak = {0};
    int hb_backoff = BACKOFF_FIRST_MS, reg_backoff = BACKOFF_FIRST_MS;
    uint64_t seen_gen = cur_gen(w);
    while (!stopping(w)) {
        double now = mono_s();
        pthread_mutex_lock(&w->mu);
        int need = w->need_register;
        double silent_ms = (now - w->last_contact) * 1000;
        uint64_t gen = w->gen;
        char addr[256];
        snprintf(addr, sizeof addr, "%s", w->chan->addr);
        pthread_mutex_unlock(&w->mu);
        if (gen != seen_gen) { /* a Rebind: register at once */
            seen_gen = gen;
            next_reg = 0;
            reg_backoff = BACKOFF_FIRST_MS;
        }
        if (silent_ms > w->cfg.controller_lost_timeout_ms) {
            char t[32];
            snprintf(t, sizeof t, "%d", w->cfg.controller_lost_timeout_ms);
            sb_log(SB_LOG_ERROR, "controller lost: unreachable past the timeout, exiting", "worker",
                   w->cfg.id, "controller", addr, "controller_lost_timeout_ms", t, NULL);
            pthread_mutex_lock(&w->mu);
            snprintf(w->fatal, sizeof w->fatal,
                     "controller %s unreachable for %d ms (controller lost timeout); no Rebind "
                     "came",
                     addr, w->cfg.controller_lost_timeout_ms);
            w->shutdown = 1;
            pthread_mutex_unlock(&w->mu);
            break;
        }
        if (need && now >= next_reg) {
            ctl_chan *c = ctl_get(w, 1);
            sb_err err;
            size_t held = 0;
            if (do_register(w, c, REGISTER_ATTEMPT_MS, &held, NULL, &err) == 0) {
                pthread_mutex_lock(&w->mu);
                if (c == w->chan)
                    w->need_register = 0;
                pthread_mutex_unlock(&w->mu);
                char h[32];
                snprintf(h, sizeof h, "%zu", held);
                sb_log(SB_LOG_INFO, "registered again", "worker", w->cfg.id, "controller", c->addr,
                       "partitions", h, NULL);
                reg_backoff = BACKOFF_FIRST_MS;
                next_hb = mono_s() + w->hb_ms / 1000.0;
            } else {
                sb_log(SB_LOG_WARN, "re-registration failed, retrying", "worker", w->cfg.id,
                       "error", err.msg, NULL);
                next_reg = mono_s() + reg_backoff / 1000.0;
                reg_backoff = backoff_next(reg_backoff);
            }
            ctl_put(w, c);
        } else if (!need && now >= next_hb) {
            if (heartbeat_once(w) == 0) {
                hb_backoff = BACKOFF_FIRST_MS;
                next_hb = mono_s() + w->hb_ms / 1000.0;
            } else {
                next_hb = mono_s() + hb_backoff / 1000.0;
                hb_backoff = backoff_next(hb_backoff);
            }
        }
        bool check = now >= next_heap;
        heap_tick(w, &peak, check);
        if (check)
            next_heap = now + HEAP_CHECK_MS / 1000.0;
        main_nap(w, 20);
    }
}

/* The sampled worker figures, at every scrape. */
static void metrics_sample(void *ud, sb_wmetrics_sample *out)
{
    worker *w = ud;
    sb_store_stats ss;
    sb_store_get_stats(w->store, &ss);
    out->store_memory_bytes = ss.mem_bytes;
    out->store_spilled_bytes = ss.disk_bytes;
    out->spill_bytes_total = ss.spilled_bytes;
    out->store_outside_bytes_total = ss.outside_bytes;
    pthread_mutex_lock(&w->mu);
    out->fetch_bytes_total = w->bytes_received;
    pthread_mutex_unlock(&w->mu);
}

/* A worker with cfg_in's settings and their defaults filled in; nothing started yet. NULL when
 * out of memory. */
static worker *worker_new(const sb_worker_config *cfg_in)
{
    worker *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    w->cfg = *cfg_in;
    if (w->cfg.slots == 0)
        w->cfg.slots = 1;
    if (w->cfg.listen == NULL)
        w->cfg.listen = "127.0.0.1:0";
    if (w->cfg.store_budget == 0)
        w->cfg.store_budget = (size_t)1 << 30;
    if (w->cfg.spill_dir == NULL) {
        const char *t = getenv("TMPDIR");
        w->cfg.spill_dir = t != NULL && *t ? t : "/tmp";
    }
    sb_op_set_spill_dir(w->cfg.spill_dir);
    if (w->cfg.register_timeout_ms <= 0)
        w->cfg.register_timeout_ms = 60000;
    if (w->cfg.controller_lost_timeout_ms <= 0)
        w->cfg.controller_lost_timeout_ms = 120000;
    w->epoch = w->cfg.epoch;
    w->need_register = 1;
    w->last_contact = mono_s();
    if (w->cfg.accelerators > 0 && sem_init(&w->accel, 0, w->cfg.accelerators) == 0)
        w->have_accel = 1;
    return w;
}

/* The partition store, the metrics endpoint (when asked), the controller channel, and the gRPC
 * server with the Data service and Worker.Rebind, listening; w->address is what peers dial.
 * 0, or -1 + err with whatever started left for worker_free(). */
static int worker_serve(worker *w, sb_err *err)
{
    if (w->cfg.rpc == NULL || w->cfg.rpc->auth == NULL || w->cfg.rpc->auth->nkeys == 0)
        return sb_err_set(err,
                          "worker %s has no credentials (" SB_AUTH_ENV_TOKEN
                          " and " SB_AUTH_ENV_CONTROLLER_SHA256 "): it would serve anyone",
                          w->cfg.id);
    if (sb_rpc_token_new(w->session, err) != 0)
        return -1;
    sb_store_config sc = {.memory_budget = w->cfg.store_budget, .spill_dir = w->cfg.spill_dir};
    if (sb_store_open(&sc, &w->store, err) != 0)
        return -1;
    w->metrics = sb_wmetrics_new(w->cfg.pool, metrics_sample, w, err);
    if (w->metrics == NULL)
        return -1;
    if (w->cfg.metrics_addr != NULL && w->cfg.metrics_addr[0] != '\0') {
        sb_metrics_serve_config mc = {.addr = w->cfg.metrics_addr,
                                      .metrics = sb_wmetrics_registry(w->metrics)};
        w->msrv = sb_metrics_serve(&mc, err);
        if (w->msrv == NULL)
            return sb_err_wrap(err, "worker metrics");
        char port[16];
        snprintf(port, sizeof port, "%d", sb_metrics_serve_port(w->msrv));
        sb_log(SB_LOG_INFO, "serving metrics", "address", w->cfg.metrics_addr, "port", port, NULL);
    }
    /* before the server: Rebind may come at once */
    w->chan = chan_new(w->cfg.controller, w->cfg.rpc, err);
    if (w->chan == NULL)
        return -1;
    sb_data_server_config dc = {.store = w->store};
    if (sb_data_server_new(&dc, &w->data, err) != 0)
        return -1;
    w->srv = sb_rpc_server_new(w->cfg.rpc, err);
    if (w->srv == NULL || sb_data_server_register(w->data, w->srv, err) != 0 ||
        sb_rpc_server_add_unary(w->srv, SB_RPC_WORKER_REBIND, h_rebind, w, err) != 0 ||
        sb_rpc_server_require_role(w->srv, SB_RPC_WORKER_REBIND, SB_RPC_ROLE_CONTROLLER, err) != 0)
        return -1;
    int port = sb_rpc_server_listen(w->srv, w->cfg.listen, err);
    if (port < 0 || sb_rpc_server_start(w->srv, err) != 0)
        return -1;
    char host[96];
    snprintf(host, sizeof host, "%s", w->cfg.advertise ? w->cfg.advertise : w->cfg.listen);
    char *colon = strrchr(host, ':');
    if (colon != NULL && w->cfg.advertise == NULL)
        *colon = '\0';
    snprintf(w->address, sizeof w->address, "%s:%d", host, port);
    return 0;
}

/* The first registration, in attempts of at most REGISTER_ATTEMPT_MS until
 * register_timeout_ms: a Rebind that comes meanwhile (the controller that made this pod died,
 * its successor adopted the pod) ends the wait for the old address at the end of the attempt,
 * and the main loop registers at the new one at once. One call for the whole timeout kept
 * waiting for the dead controller: 60 s per failover on the test cluster. 0 when registered or
 * rebound, -1 + err otherwise. */
static int worker_register_first(worker *w, sb_err *err)
{
    int reg = -1, rebound = 0;
    double reg_end = mono_s() + w->cfg.register_timeout_ms / 1000.0;
    for (;;) {
        ctl_chan *c = ctl_get(w, 1);
        size_t held = 0;
        int left_ms = (int)((reg_end - mono_s()) * 1000);
        int attempt_ms = left_ms < REGISTER_ATTEMPT_MS ? left_ms : REGISTER_ATTEMPT_MS;
        sb_rpc_code code;
        reg = do_register(w, c, attempt_ms > 0 ? attempt_ms : 1, &held, &code, err);
        pthread_mutex_lock(&w->mu);
        rebound = c != w->chan; /* a Rebind came meanwhile: the main loop registers there */
        if (reg == 0 && !rebound)
            w->need_register = 0;
        pthread_mutex_unlock(&w->mu);
        ctl_put(w, c);
        /* only an unreachable controller is waited for; a refusal is final */
        if (reg == 0 || rebound || stopping(w) || mono_s() >= reg_end || !unreachable(code))
            break;
        if (code != SB_RPC_DEADLINE_EXCEEDED)
            usleep(BACKOFF_FIRST_MS * 1000); /* failed at once (UNKNOWN, CANCELLED): no spin */
    }
    return reg != 0 && !rebound ? -1 : 0;
}

/* Stops what worker_serve() started, in order (the slot threads are joined already), and frees
 * the worker. */
static void worker_free(worker *w)
{
    /* Let peers finish the fetches they started. Told to exit by the controller, nobody still
     * needs this worker's partitions: wait for fetches in flight, but do not linger for late
     * readers (a run's end would otherwise wait ~2 s for every worker that served a fetch). */
    pthread_mutex_lock(&w->mu);
    int calm = (w->told_to_exit && !g_stop) || g_calm;
    pthread_mutex_unlock(&w->mu);
    if (w->data != NULL)
        sb_data_server_drain(w->data, 2000, calm ? 0 : 200);
    if (w->srv != NULL)
        sb_rpc_server_shutdown_linger(w->srv, 2000, calm ? 0 : 2000);
    sb_data_server_free(w->data);
    sb_rpc_server_free(w->srv);
    ctl_put(w, w->chan); /* every call on it has ended: the slots are joined, the server is down */
    sb_metrics_serve_stop(w->msrv);
    sb_wmetrics_free(w->metrics);
    if (w->store != NULL) { /* what the budget bounded at its peak, beside the process's RSS */
        sb_store_stats ss;
        sb_store_get_stats(w->store, &ss);
        char pk[32], bd[32];
        snprintf(pk, sizeof pk, "%zu", ss.peak_mem_bytes);
        snprintf(bd, sizeof bd, "%zu", w->cfg.store_budget);
        sb_log(SB_LOG_INFO, "store closed", "worker", w->cfg.id, "peak_mem_bytes", pk, "budget", bd,
               NULL);
    }
    sb_store_close(w->store);
    if (w->have_pipeline)
        sb_pipeline_free(&w->pipeline);
    sb_doc_free(w->doc);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->wake);
    if (w->have_accel)
        sem_destroy(&w->accel);
    free(w);
}

/* Idle op states a worker keeps per slot (ops.h, "Lifetime of an op state"): one for the stage
 * a slot runs now and one for another stage of the pipeline, so fused and unfused tasks of two
 * stages alternating on a slot still find theirs. */
#define OP_STATES_PER_SLOT 2

/* Frees the idle op states at the worker's exit (the slots are joined), saying how many states
 * its tasks made and how many tasks found one kept (what the state cache saved). */
static void op_states_release(void)
{
    sb_op_cache_stats cs;
    sb_op_cache_stats_get(sb_op_cache_worker(), &cs);
    sb_op_cache_clear(sb_op_cache_worker());
    char created[24], reused[24], evicted[24];
    snprintf(created, sizeof created, "%" PRIu64, cs.created);
    snprintf(reused, sizeof reused, "%" PRIu64, cs.reused);
    snprintf(evicted, sizeof evicted, "%" PRIu64, cs.evicted);
    sb_log(SB_LOG_INFO, "op states", "created", created, "reused", reused, "evicted", evicted,
           NULL);
}

/* Waits up to ms for the slot threads to end (their attempts are cancelled: ops that check end at
 * once, the others at their next input). 1 when they all ended, or when none of those left runs
 * an attempt (a storage job, a call to the controller: they end on their own and are joined, as
 * before cancels). */
static int slots_wait(worker *w, int ms)
{
    struct timespec until = deadline_in(ms);
    pthread_mutex_lock(&w->mu);
    while (w->slots_live > 0)
        if (pthread_cond_timedwait(&w->wake, &w->mu, &until) != 0)
            break;
    int all = w->slots_live == 0 || w->natt == 0;
    pthread_mutex_unlock(&w->mu);
    return all;
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

/* The worker leaves slot threads running (a cancelled attempt whose op does not check its flag
 * and has not reached its next input): nothing they use is freed, and the process is to end at once
 * (sb_worker_abandoned). What would outlive it goes now: the store's spill directory (its files
 * too; a spill in flight then fails, which nobody sees) and exec's children with their process
 * groups (PR_SET_PDEATHSIG alone kills a child, not the programs it started). */
static worker *g_abandoned; /* keeps the worker reachable: not a leak */

static void worker_abandon(worker *w)
{
    pthread_mutex_lock(&w->mu);
    char n[24];
    snprintf(n, sizeof n, "%zu", w->slots_live);
    pthread_mutex_unlock(&w->mu);
    sb_log(SB_LOG_WARN,
           "exiting without waiting for slots still running (their attempts were "
           "cancelled and are not reported)",
           "worker", w->cfg.id, "slots", n, NULL);
    sb_op_kill_children(); /* exec's programs, and what they started */
    const char *dir = sb_store_spill_path(w->store);
    if (dir != NULL)
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    g_abandoned = w;
}

int sb_worker_abandoned(void)
{
    return g_abandoned != NULL;
}

int sb_worker_run(const sb_worker_config *cfg_in, sb_err *err)
{
    worker *w = worker_new(cfg_in);
    if (w == NULL)
        return sb_err_set(err, "out of memory");
    int rc = -1;
    pthread_t *slots = calloc(w->cfg.slots, sizeof *slots);
    w->att = calloc(w->cfg.slots, sizeof *w->att);
    size_t started = 0;
    if (slots == NULL || w->att == NULL) {
        sb_err_set(err, "out of memory");
        goto out;
    }
    if (worker_serve(w, err) != 0 || worker_register_first(w, err) != 0)
        goto out;
    sb_log(SB_LOG_INFO, "worker ready", "worker", w->cfg.id, "address", w->address, "pool",
           w->cfg.pool, NULL);
    sb_op_cache_set_limit(sb_op_cache_worker(), OP_STATES_PER_SLOT * w->cfg.slots);
    for (; started < w->cfg.slots; started++) {
        pthread_mutex_lock(&w->mu);
        w->slots_live++;
        pthread_mutex_unlock(&w->mu);
        if (pthread_create(&slots[started], NULL, slot_main, w) != 0) {
            pthread_mutex_lock(&w->mu);
            w->slots_live--;
            pthread_mutex_unlock(&w->mu);
            break;
        }
    }
    main_loop(w);
    set_shutdown(w);
    rc = 0;
    if (w->fatal[0] != '\0')
        rc = sb_err_set(err, "%s", w->fatal);
out:
    set_shutdown(w); /* cancels the running attempts */
    if (started > 0 && !slots_wait(w, SLOTS_EXIT_MS)) {
        free(slots);
        worker_abandon(w);
        return rc;
    }
    for (size_t i = 0; i < started; i++)
        pthread_join(slots[i], NULL);
    free(slots);
    op_states_release();
    free(w->att);
    worker_free(w);
    return rc;
}
