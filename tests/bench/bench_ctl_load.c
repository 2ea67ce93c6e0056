/* bench_ctl_load — one controller under the load of many simulated workers (issue 16, goal 6).
 *
 * The controller (controller/ctl/ctl.h, the same service `streambatch run` embeds) runs in a
 * forked child process, so its CPU time and memory are its own: the child reads its CPU clock
 * and RSS when the load starts and when the pipeline ends, and counts the scheduler's lineage
 * memory from its structures (sb_ctl_memory). The parent simulates N workers over real gRPC
 * (lib/rpc client calls, the generated protobuf-c messages): register, heartbeat every interval
 * with the running task ids, long-poll with their free slots, complete each task at once (or
 * after --task-ms) with a fake output partition — reported on the worker's next poll, as the
 * worker runtime does when the controller's RegisterReply says batched_completions, or with
 * one CompleteTask call each under --batched 0 — and answer the storage jobs (PLAN with M
 * synthetic splits in pieces of SB_STORAGE_PIECE_BYTES as the worker runtime does, PREPARE and
 * COMMIT succeed). --lose K silences K workers (no heartbeat, poll or completion) once
 * --lose-at of the tasks are done, so the controller must detect and recover them.
 *
 * Few OS threads: --poll-threads threads take (register, poll, complete) actions of every
 * worker from one time-ordered queue, and --hb-threads threads send the heartbeats, each for a
 * fixed share of the workers. A blocking call holds a thread, so at most --poll-threads polls
 * are open at once (a real fleet of N workers holds up to N): with many idle workers (a
 * pool waiting for upstream output) set --idle-ms so that their held polls do not take every
 * thread. Workers share --channels connections (a real worker has its own).
 *
 * Assignment latency: the time from sending a cpu-pool poll while source tasks were still
 * unassigned to the reply, for replies that carried tasks.
 *
 * Prints a summary and one line "RESULT ctl_load key=value ...". Usage: see usage().
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controller/ctl/ctl.h"
#include "storage/jobs.h"
#include "core/log.h"
#include "doc/doc.h"
#include "rpc/proto.h"
#include "spec/pipeline.h"
#include "../unit/testauth.h"

/* ---- options ----------------------------------------------------------------------------- */

static struct {
    size_t workers, splits, lose;
    uint32_t slots, hb_ms, hb_timeout_ms, wait_ms, task_ms, out_bytes, idle_ms, poll_batch;
    int stages, poll_threads, hb_threads, channels, plan_on_workers, commit, batched;
    double gpu_frac, lose_at, limit_s, commit_s;
} O = {.workers = 1000,
       .splits = 100000,
       .slots = 4,
       .hb_ms = 500,
       .hb_timeout_ms = 5000,
       .wait_ms = 1000,
       .out_bytes = 1024,
       .stages = 1,
       .poll_threads = 32,
       .hb_threads = 4,
       .channels = 8,
       .plan_on_workers = 1,
       .commit = 1,
       .batched = 1,
       .poll_batch = 1,
       .gpu_frac = 0.25,
       .lose_at = 0.5,
       .limit_s = 100,
       .commit_s = 30};

static void usage(void)
{
    fprintf(stderr,
            "usage: bench_ctl_load [--workers N] [--tasks SPLITS] [--slots S] [--stages 1|2]\n"
            "  [--gpu-frac F] [--heartbeat-ms MS] [--heartbeat-timeout-ms MS] [--wait-ms MS]\n"
            "  [--task-ms MS] [--idle-ms MS] [--out-bytes B] [--poll-threads T] [--hb-threads T]\n"
            "  [--channels C] [--lose K] [--lose-at FRACTION] [--plan-on-workers 0|1]\n"
            "  [--commit 0|1] [--commit-seconds S] [--limit-seconds S] [--batched 0|1]\n"
            "  [--poll-batch B]\n");
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (strcmp(a, "--workers") == 0)
            O.workers = strtoull(v, NULL, 10);
        else if (strcmp(a, "--tasks") == 0)
            O.splits = strtoull(v, NULL, 10);
        else if (strcmp(a, "--slots") == 0)
            O.slots = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--stages") == 0)
            O.stages = atoi(v);
        else if (strcmp(a, "--gpu-frac") == 0)
            O.gpu_frac = atof(v);
        else if (strcmp(a, "--heartbeat-ms") == 0)
            O.hb_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--heartbeat-timeout-ms") == 0)
            O.hb_timeout_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--wait-ms") == 0)
            O.wait_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--idle-ms") == 0)
            O.idle_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--task-ms") == 0)
            O.task_ms = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--out-bytes") == 0)
            O.out_bytes = (uint32_t)strtoul(v, NULL, 10);
        else if (strcmp(a, "--poll-threads") == 0)
            O.poll_threads = atoi(v);
        else if (strcmp(a, "--hb-threads") == 0)
            O.hb_threads = atoi(v);
        else if (strcmp(a, "--channels") == 0)
            O.channels = atoi(v);
        else if (strcmp(a, "--lose") == 0)
            O.lose = strtoull(v, NULL, 10);
        else if (strcmp(a, "--lose-at") == 0)
            O.lose_at = atof(v);
        else if (strcmp(a, "--plan-on-workers") == 0)
            O.plan_on_workers = atoi(v);
        else if (strcmp(a, "--commit") == 0)
            O.commit = atoi(v);
        else if (strcmp(a, "--commit-seconds") == 0)
            O.commit_s = atof(v);
        else if (strcmp(a, "--limit-seconds") == 0)
            O.limit_s = atof(v);
        else if (strcmp(a, "--batched") == 0)
            O.batched = atoi(v);
        else if (strcmp(a, "--poll-batch") == 0)
            O.poll_batch = (uint32_t)strtoul(v, NULL, 10);
        else
            usage();
    }
    if (O.workers == 0 || O.splits == 0 || O.slots == 0 || O.stages < 1 || O.stages > 2 ||
        O.poll_batch < 1 || O.slots * O.poll_batch > 64 || O.poll_threads < 1 || O.hb_threads < 1 ||
        O.channels < 1)
        usage();
    if (O.stages == 1)
        O.gpu_frac = 0;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static double cpu_self_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* VmRSS or VmHWM of this process, bytes. */
static uint64_t proc_status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, kl) == 0 && line[kl] == ':')
            v = strtoull(line + kl + 1, NULL, 10);
    if (f != NULL)
        fclose(f);
    return v * 1024;
}

/* ---- the controller (child process) -------------------------------------------------------- */

static void wr(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k <= 0 && errno != EINTR)
            return;
        if (k > 0) {
            s += k;
            n -= (size_t)k;
        }
    }
}

/* 1 when the parent wrote something (or closed the pipe) within ms. */
static int parent_said(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) > 0;
}

static int controller_main(int to_parent, int from_parent)
{
    sb_log_set_level(SB_LOG_WARN);
    char y[1024];
    snprintf(y, sizeof y,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: load}\n"
             "spec:\n  source: {uri: 'file:///load/in/', format: jsonl, partitionSize: 1Ki}\n"
             "  stages:\n  - {name: prep, op: identity}\n%s"
             "  sink: {uri: 'file:///load/out/', format: jsonl}\n"
             "  execution: {memoryBudget: 1Ti}\n",
             O.stages == 2 ? "  - {name: infer, op: identity, resources: {gpu: 1}}\n" : "");
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    sb_pipeline p;
    sb_diags dg = {0};
    if (d == NULL || sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg) != 0) {
        fprintf(stderr, "controller: the pipeline does not decode\n");
        return 1;
    }
    sb_storage_split *sp = NULL;
    char(*names)[64] = NULL;
    if (!O.plan_on_workers) {
        sp = calloc(O.splits, sizeof *sp);
        names = calloc(O.splits, sizeof *names);
        for (size_t i = 0; sp && names && i < O.splits; i++) {
            snprintf(names[i], sizeof names[i], "0\t1024\t1024\t/load/in/f%07zu.jsonl", i);
            sp[i].split = names[i];
            sp[i].bytes = 1024;
        }
    }
    sb_ctl_config cfg = {.pipeline = &p,
                         .pipeline_id = "load/p",
                         .pipeline_json = "{}",
                         .splits = sp,
                         .nsplits = O.plan_on_workers ? 0 : O.splits,
                         .heartbeat_interval_ms = O.hb_ms,
                         .heartbeat_timeout_ms = O.hb_timeout_ms,
                         .storage_on_workers = O.plan_on_workers};
    sb_err err;
    uint64_t rss0 = proc_status_kb("VmRSS");
    sb_ctl *c = sb_ctl_start(&cfg, sb_test_ctl_opts(NULL), &err);
    if (c == NULL) {
        fprintf(stderr, "controller: %s\n", err.msg);
        return 1;
    }
    free(sp);
    free(names);
    char line[1024];
    snprintf(line, sizeof line, "READY %d\n", sb_ctl_port(c));
    wr(to_parent, line);
    double cpu0 = cpu_self_s();
    uint64_t t0 = now_us();
    sb_sched_state st = SB_SCHED_RUNNING;
    uint64_t limit_us = (uint64_t)(O.limit_s * 1e6);
    while (st == SB_SCHED_RUNNING && now_us() - t0 < limit_us && !parent_said(from_parent, 0))
        st = sb_ctl_wait(c, 100);
    double cpu1 = cpu_self_s();
    uint64_t t1 = now_us();
    uint64_t rss1 = proc_status_kb("VmRSS"), hwm = proc_status_kb("VmHWM");
    sb_sched_memory mem;
    sb_ctl_memory(c, &mem);
    sb_ctl_snapshot snap;
    sb_ctl_snapshot_get(c, &snap);
    snprintf(line, sizeof line,
             "DONE state=%d seconds=%.3f cpu_s=%.4f rss0=%" PRIu64 " rss=%" PRIu64 " hwm=%" PRIu64
             " tasks=%" PRIu64 " parts=%" PRIu64 " sink=%" PRIu64 " lineage=%" PRIu64
             " task_b=%" PRIu64 " part_b=%" PRIu64 " sink_b=%" PRIu64 " map_b=%" PRIu64
             " split_b=%" PRIu64 " tasks_run=%" PRIu64 " rerun=%" PRIu64
             " lost=%zu registered=%zu failure=%.200s\n",
             (int)st, (double)(t1 - t0) / 1e6, cpu1 - cpu0, rss0, rss1, hwm, mem.tasks, mem.parts,
             mem.sink_parts, mem.total_bytes, mem.task_bytes, mem.part_bytes, mem.sink_bytes,
             mem.map_bytes, mem.split_bytes, snap.stats.tasks_run, snap.stats.tasks_rerun,
             snap.workers_lost, snap.workers_registered, snap.failure[0] ? snap.failure : "-");
    for (char *q = line; *q; q++)
        if (*q == '\n' && q[1] != '\0')
            *q = ' ';
    wr(to_parent, line);
    if (st == SB_SCHED_SUCCEEDED && O.commit) {
        size_t n = 0;
        sb_storage_output *parts = sb_ctl_sink_parts(c, &n);
        char msg[1024] = "";
        double cc0 = cpu_self_s();
        uint64_t ct0 = now_us();
        int rc = sb_ctl_storage_run(c, SB_STORAGE_COMMIT, parts, n, (int)(O.commit_s * 1000), NULL,
                                    msg, sizeof msg);
        for (char *q = msg; *q; q++)
            if (*q == '\n')
                *q = ' ';
        snprintf(line, sizeof line, "COMMIT rc=%d parts=%zu seconds=%.3f cpu_s=%.4f msg=%.300s\n",
                 rc, n, (double)(now_us() - ct0) / 1e6, cpu_self_s() - cc0, msg[0] ? msg : "-");
        wr(to_parent, line);
        sb_ctl_parts_free(parts, n);
    } else {
        wr(to_parent, "COMMIT rc=0 parts=0 seconds=0 cpu_s=0 msg=skipped\n");
    }
    sb_ctl_shutdown_workers(c);
    parent_said(from_parent, 30000); /* until the parent stopped its workers */
    sb_ctl_free(c);
    sb_pipeline_free(&p);
    sb_diags_free(&dg);
    sb_doc_free(d);
    return 0;
}

/* ---- simulated workers (parent) ------------------------------------------------------------ */

/* Tasks a simulated worker may hold: its slots, times --poll-batch (PollTasksRequest.batch: a
 * slot may take several short tasks; with --task-ms they complete together, as if run in
 * parallel, which only matters for timing). */
static uint32_t cap(void)
{
    return O.slots * O.poll_batch;
}

typedef struct {
    char task_id[128];
    uint32_t attempt, op;
    uint64_t index;
    int used;
} sim_task;

typedef struct {
    pthread_mutex_t mu;
    char id[32];
    char session[SB_RPC_TOKEN_HEX + 1]; /* RegisterRequest.session */
    int gpu;
    uint32_t running;
    sim_task *tasks; /* cap(): O.slots, times O.poll_batch */
    sim_task *done;  /* cap(): finished, reported on the next poll (batched completions) */
    uint32_t ndone;
    int poll_queued; /* a poll is queued or in flight */
    int registered;
    atomic_int silent, stopped;
    uint64_t next_hb_us;
    sb_rpc_channel *ch;
} sim_worker;

enum { A_REGISTER, A_POLL, A_COMPLETE };

typedef struct {
    uint64_t due_us, seq;
    uint32_t w, slot;
    int kind;
} action;

static sim_worker *W;
static sb_rpc_channel **CH;
static atomic_int batched; /* O.batched and the controller takes completions on polls */

/* the action queue: a binary heap by (due, seq) */
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcv = PTHREAD_COND_INITIALIZER;
static action *Q;
static size_t qn, qcap;
static uint64_t qseq;
static atomic_int stop_all;

static int act_less(const action *a, const action *b)
{
    return a->due_us != b->due_us ? a->due_us < b->due_us : a->seq < b->seq;
}

static void push(int kind, uint32_t w, uint32_t slot, uint64_t due)
{
    pthread_mutex_lock(&qmu);
    if (qn == qcap) {
        qcap = qcap ? qcap * 2 : 4096;
        Q = realloc(Q, qcap * sizeof *Q);
        if (Q == NULL) {
            fprintf(stderr, "out of memory\n");
            abort();
        }
    }
    size_t i = qn++;
    Q[i] = (action){.due_us = due, .seq = qseq++, .w = w, .slot = slot, .kind = kind};
    while (i > 0 && act_less(&Q[i], &Q[(i - 1) / 2])) {
        action t = Q[i];
        Q[i] = Q[(i - 1) / 2];
        Q[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
    pthread_cond_signal(&qcv);
    pthread_mutex_unlock(&qmu);
}

/* The next due action (0), or -1 once stop_all is set. */
static int pop(action *out)
{
    pthread_mutex_lock(&qmu);
    for (;;) {
        if (atomic_load(&stop_all)) {
            pthread_mutex_unlock(&qmu);
            return -1;
        }
        uint64_t now = now_us();
        if (qn > 0 && Q[0].due_us <= now)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t wait = qn > 0 ? Q[0].due_us - now : 50000;
        if (wait > 50000)
            wait = 50000;
        ts.tv_nsec += (long)(wait * 1000);
        while (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&qcv, &qmu, &ts);
    }
    *out = Q[0];
    Q[0] = Q[--qn];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < qn && act_less(&Q[l], &Q[m]))
            m = l;
        if (r < qn && act_less(&Q[r], &Q[m]))
            m = r;
        if (m == i)
            break;
        action t = Q[i];
        Q[i] = Q[m];
        Q[m] = t;
        i = m;
    }
    pthread_mutex_unlock(&qmu);
    return 0;
}

/* ---- counters ------------------------------------------------------------------------------ */

static atomic_ullong n_done, n_rejected, n_polls, n_polls_empty, n_hb, n_register, n_rpc_errors,
    n_released, n_op0_assigned, n_abandoned, n_plan_pieces, n_jobs;
static atomic_ullong hb_lag_max_us;
static uint64_t plan_us;

/* assignment latencies (us), cpu-pool polls sent while source tasks were unassigned */
static pthread_mutex_t lat_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *lat;
static size_t nlat, caplat;

static void lat_add(uint64_t us)
{
    pthread_mutex_lock(&lat_mu);
    if (nlat == caplat) {
        caplat = caplat ? caplat * 2 : 65536;
        uint32_t *n = realloc(lat, caplat * sizeof *lat);
        if (n == NULL) {
            pthread_mutex_unlock(&lat_mu);
            return;
        }
        lat = n;
    }
    lat[nlat++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    pthread_mutex_unlock(&lat_mu);
}

static void atomic_max(atomic_ullong *a, unsigned long long v)
{
    unsigned long long cur = atomic_load(a);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

/* ---- the calls ------------------------------------------------------------------------------ */

static int call(sim_worker *w, const char *method, const ProtobufCMessage *req, int timeout_ms,
                ProtobufCMessage **resp)
{
    sb_err err;
    sb_rpc_code rc = sb_rpc_call_msg(w->ch, method, req, timeout_ms, 0, resp, &err);
    if (rc != SB_RPC_OK) {
        unsigned long long k = atomic_fetch_add(&n_rpc_errors, 1);
        if (k < 5)
            fprintf(stderr, "bench_ctl_load: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void do_register(uint32_t wi)
{
    sim_worker *w = &W[wi];
    Streambatch__V1__RegisterRequest req = STREAMBATCH__V1__REGISTER_REQUEST__INIT;
    req.worker_id = w->id;
    req.session = w->session;
    req.pool = w->gpu ? "gpu" : "cpu";
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", 20000 + wi);
    req.address = addr;
    req.slots = O.slots;
    ProtobufCMessage *resp = NULL;
    if (call(w, SB_RPC_CONTROL_REGISTER, &req.base, 10000, &resp) != 0) {
        if (!atomic_load(&stop_all))
            push(A_REGISTER, wi, 0, now_us() + 200000);
        return;
    }
    if (O.batched && ((Streambatch__V1__RegisterReply *)resp)->batched_completions)
        atomic_store(&batched, 1);
    sb_rpc_msg_free(resp);
    atomic_fetch_add(&n_register, 1);
    pthread_mutex_lock(&w->mu);
    w->registered = 1;
    /* heartbeats spread over one interval */
    w->next_hb_us = now_us() + (uint64_t)O.hb_ms * 1000u * (wi % 97 + 1) / 97;
    w->poll_queued = 1;
    pthread_mutex_unlock(&w->mu);
    push(A_POLL, wi, 0, now_us());
}

/* Reports a storage job: PLAN in pieces (synthetic splits), the others succeed. */
static void do_storage(sim_worker *w, const Streambatch__V1__StorageJob *job)
{
    atomic_fetch_add(&n_jobs, 1);
    Streambatch__V1__CompleteTaskRequest req = STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    Streambatch__V1__StorageResult res = STREAMBATCH__V1__STORAGE_RESULT__INIT;
    req.worker_id = w->id;
    req.session = w->session;
    req.task_id = job->job_id;
    req.attempt = job->attempt;
    req.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    if (job->kind != STREAMBATCH__V1__STORAGE_JOB_KIND__STORAGE_JOB_KIND_PLAN) {
        ProtobufCMessage *resp = NULL;
        if (call(w, SB_RPC_CONTROL_COMPLETE_TASK, &req.base, 30000, &resp) == 0)
            sb_rpc_msg_free(resp);
        return;
    }
    uint64_t t0 = now_us();
    size_t n = O.splits;
    char **enc = calloc(n, sizeof *enc);
    uint64_t *bytes = calloc(n, sizeof *bytes);
    for (size_t i = 0; enc && bytes && i < n; i++) {
        char b[96];
        snprintf(b, sizeof b, "0\t1024\t1024\t/load/in/f%07zu.jsonl", i);
        enc[i] = strdup(b);
        bytes[i] = 1024;
    }
    req.storage = &res;
    for (size_t from = 0; enc && bytes && from < n;) {
        size_t k = sb_storage_piece((const char *const *)enc, n, from, SB_STORAGE_PIECE_BYTES);
        res.offset = from;
        res.n_splits = k;
        res.splits = enc + from;
        res.n_split_bytes = k;
        res.split_bytes = bytes + from;
        res.more = from + k < n;
        ProtobufCMessage *resp = NULL;
        if (call(w, SB_RPC_CONTROL_COMPLETE_TASK, &req.base, 30000, &resp) != 0)
            break;
        int ok = ((Streambatch__V1__CompleteTaskReply *)resp)->accepted;
        sb_rpc_msg_free(resp);
        atomic_fetch_add(&n_plan_pieces, 1);
        if (!ok)
            break;
        from += k;
    }
    for (size_t i = 0; enc && i < n; i++)
        free(enc[i]);
    free(enc);
    free(bytes);
    plan_us = now_us() - t0;
}

/* One task's completion report: a fake output partition and its metrics. */
typedef struct {
    char pid[64];
    Streambatch__V1__PartitionInfo out, *outs[1];
    Streambatch__V1__TaskMetrics met;
    Streambatch__V1__CompleteTaskRequest req;
} completion;

static void completion_fill(completion *c, sim_worker *w, sim_task *t)
{
    snprintf(c->pid, sizeof c->pid, "s%u-t%" PRIu64 "-p0", t->op, t->index);
    c->out = (Streambatch__V1__PartitionInfo)STREAMBATCH__V1__PARTITION_INFO__INIT;
    c->outs[0] = &c->out;
    c->out.id = c->pid;
    c->out.bytes = O.out_bytes;
    c->out.rows = 10;
    c->met = (Streambatch__V1__TaskMetrics)STREAMBATCH__V1__TASK_METRICS__INIT;
    c->met.wall_seconds = O.task_ms / 1000.0;
    c->met.cpu_seconds = O.task_ms / 1000.0;
    c->met.rows_in = 10;
    c->met.bytes_in = 1024;
    c->req = (Streambatch__V1__CompleteTaskRequest)STREAMBATCH__V1__COMPLETE_TASK_REQUEST__INIT;
    c->req.worker_id = w->id;
    c->req.session = w->session;
    c->req.task_id = t->task_id;
    c->req.attempt = t->attempt;
    c->req.status = STREAMBATCH__V1__TASK_STATUS__TASK_STATUS_OK;
    c->req.n_outputs = 1;
    c->req.outputs = c->outs;
    c->req.metrics = &c->met;
}

static void do_complete(uint32_t wi, uint32_t slot)
{
    sim_worker *w = &W[wi];
    if (atomic_load(&w->silent)) {
        atomic_fetch_add(&n_abandoned, 1);
        return;
    }
    pthread_mutex_lock(&w->mu);
    sim_task t = w->tasks[slot];
    if (atomic_load(&batched)) { /* reported on the next poll */
        w->done[w->ndone++] = t;
        w->tasks[slot].used = 0;
        w->running--;
        int repoll = !w->poll_queued && !atomic_load(&w->stopped);
        if (repoll)
            w->poll_queued = 1;
        pthread_mutex_unlock(&w->mu);
        if (repoll)
            push(A_POLL, wi, 0, now_us());
        return;
    }
    pthread_mutex_unlock(&w->mu);
    completion c;
    completion_fill(&c, w, &t);
    ProtobufCMessage *resp = NULL;
    if (call(w, SB_RPC_CONTROL_COMPLETE_TASK, &c.req.base, 30000, &resp) == 0) {
        Streambatch__V1__CompleteTaskReply *r = (Streambatch__V1__CompleteTaskReply *)resp;
        atomic_fetch_add(r->accepted ? &n_done : &n_rejected, 1);
        atomic_fetch_add(&n_released, r->n_release);
        sb_rpc_msg_free(resp);
    }
    pthread_mutex_lock(&w->mu);
    w->tasks[slot].used = 0;
    w->running--;
    int repoll = !w->poll_queued && !atomic_load(&w->stopped) && !atomic_load(&w->silent);
    if (repoll)
        w->poll_queued = 1;
    pthread_mutex_unlock(&w->mu);
    if (repoll)
        push(A_POLL, wi, 0, now_us());
}

/* Before the next poll of a worker whose poll brought n tasks after took_us: none after an
 * answer with tasks; --idle-ms after an empty one (a real worker polls again at once, but a
 * held poll holds one of our threads); at least 20 ms after an empty answer that came at once. */
static uint64_t idle_delay(size_t n, uint64_t took_us)
{
    if (n > 0)
        return 0;
    uint64_t d = (uint64_t)O.idle_ms * 1000u;
    return took_us < 20000 && d < 20000 ? 20000 : d;
}

static void do_poll(uint32_t wi)
{
    sim_worker *w = &W[wi];
    pthread_mutex_lock(&w->mu);
    uint32_t free_slots = w->running < O.slots ? O.slots - w->running : 0;
    if (atomic_load(&w->silent) ||
        (w->ndone == 0 && (free_slots == 0 || atomic_load(&w->stopped)))) {
        w->poll_queued = 0;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    /* the tasks finished since the last poll ride on this one */
    sim_task *fin = w->ndone ? malloc(w->ndone * sizeof *fin) : NULL;
    size_t nfin = fin ? w->ndone : 0;
    if (nfin)
        memcpy(fin, w->done, nfin * sizeof *fin);
    w->ndone -= (uint32_t)nfin;
    pthread_mutex_unlock(&w->mu);
    completion *cs = nfin ? calloc(nfin, sizeof *cs) : NULL;
    Streambatch__V1__CompleteTaskRequest **creq = nfin ? calloc(nfin, sizeof *creq) : NULL;
    if (nfin && (cs == NULL || creq == NULL)) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    for (size_t i = 0; i < nfin; i++) {
        completion_fill(&cs[i], w, &fin[i]);
        creq[i] = &cs[i].req;
    }
    Streambatch__V1__PollTasksRequest req = STREAMBATCH__V1__POLL_TASKS_REQUEST__INIT;
    req.worker_id = w->id;
    req.session = w->session;
    req.free_slots = atomic_load(&w->stopped) ? 0 : free_slots;
    req.batch = O.poll_batch;
    /* A poll carrying completions is answered at once (wait 0), not held: a held poll holds one
     * of our few threads, and completions queued behind held polls would wait for a thread,
     * which a real worker (its own threads) never does. An idle worker then sends one more,
     * held, poll without completions: a call a real worker would not make, so this overstates
     * the controller's cost per task a little. */
    req.wait_ms = nfin ? 0 : O.wait_ms;
    req.n_completions = nfin;
    req.completions = creq;
    int queued = !w->gpu && atomic_load(&n_op0_assigned) < O.splits;
    uint64_t t0 = now_us();
    ProtobufCMessage *resp = NULL;
    atomic_fetch_add(&n_polls, 1);
    int failed = call(w, SB_RPC_CONTROL_POLL_TASKS, &req.base, (int)O.wait_ms + 30000, &resp);
    free(creq);
    free(cs);
    if (failed != 0) {
        pthread_mutex_lock(&w->mu); /* reported again on the next poll */
        for (size_t i = 0; i < nfin; i++)
            w->done[w->ndone++] = fin[i];
        pthread_mutex_unlock(&w->mu);
        free(fin);
        if (!atomic_load(&stop_all))
            push(A_POLL, wi, 0, now_us() + 100000);
        return;
    }
    free(fin);
    uint64_t t1 = now_us();
    Streambatch__V1__PollTasksReply *r = (Streambatch__V1__PollTasksReply *)resp;
    if (nfin) {
        size_t acc = 0;
        for (size_t i = 0; i < r->n_accepted && i < nfin; i++)
            acc += r->accepted[i] != 0;
        if (r->n_accepted != nfin) {
            unsigned long long k = atomic_fetch_add(&n_rpc_errors, 1);
            if (k < 5)
                fprintf(stderr, "bench_ctl_load: %zu completions, %zu accepted flags back\n", nfin,
                        r->n_accepted);
        }
        atomic_fetch_add(&n_done, acc);
        atomic_fetch_add(&n_rejected, nfin - acc);
        atomic_fetch_add(&n_released, r->n_release);
    }
    if (r->shutdown) /* drain: the worker runtime keeps polling (storage jobs come that way) */
        atomic_store(&w->stopped, 1);
    if (r->storage_job != NULL) {
        do_storage(w, r->storage_job);
        sb_rpc_msg_free(resp);
        push(A_POLL, wi, 0, now_us());
        return;
    }
    size_t n = r->n_tasks;
    if (n > 0 && queued)
        lat_add(t1 - t0);
    if (n == 0)
        atomic_fetch_add(&n_polls_empty, 1);
    uint32_t slots[64];
    size_t k = 0;
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < n && k < 64; i++) {
        const Streambatch__V1__Task *t = r->tasks[i];
        uint32_t s = 0;
        while (s < cap() && w->tasks[s].used)
            s++;
        if (s == cap())
            break; /* more than its free slots (times --poll-batch): cannot happen */
        sim_task *st = &w->tasks[s];
        snprintf(st->task_id, sizeof st->task_id, "%s", t->task_id);
        st->attempt = t->attempt;
        st->op = t->stage_index;
        st->index = t->task_index;
        st->used = 1;
        w->running++;
        slots[k++] = s;
        if (t->stage_index == 0 && t->attempt == 0)
            atomic_fetch_add(&n_op0_assigned, 1);
    }
    int more = w->running < O.slots && !atomic_load(&w->stopped);
    /* with task-ms, the poll goes on while slots are free; else the completions re-poll */
    w->poll_queued = O.task_ms > 0 ? more : 1;
    pthread_mutex_unlock(&w->mu);
    sb_rpc_msg_free(resp);
    if (O.task_ms > 0) {
        for (size_t i = 0; i < k; i++)
            push(A_COMPLETE, wi, slots[i], t1 + (uint64_t)O.task_ms * 1000u);
        if (more)
            push(A_POLL, wi, 0, now_us() + idle_delay(n, t1 - t0));
        return;
    }
    pthread_mutex_lock(&w->mu);
    w->poll_queued = 1; /* completions below must not queue a second poll */
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < k; i++)
        do_complete(wi, slots[i]);
    pthread_mutex_lock(&w->mu);
    int again = !atomic_load(&w->silent) && (!atomic_load(&w->stopped) || w->ndone > 0);
    w->poll_queued = again;
    pthread_mutex_unlock(&w->mu);
    if (again)
        push(A_POLL, wi, 0, now_us() + idle_delay(n, t1 - t0));
}

static void *poll_thread(void *arg)
{
    (void)arg;
    action a;
    while (pop(&a) == 0) {
        switch (a.kind) {
        case A_REGISTER:
            do_register(a.w);
            break;
        case A_POLL:
            do_poll(a.w);
            break;
        default:
            do_complete(a.w, a.slot);
            break;
        }
    }
    return NULL;
}

static void *hb_thread(void *arg)
{
    size_t h = (size_t)(uintptr_t)arg;
    char *ids[64];
    while (!atomic_load(&stop_all)) {
        uint64_t now = now_us(), next = now + 20000;
        for (size_t wi = h; wi < O.workers && !atomic_load(&stop_all); wi += (size_t)O.hb_threads) {
            sim_worker *w = &W[wi];
            pthread_mutex_lock(&w->mu);
            if (!w->registered || atomic_load(&w->silent) || atomic_load(&w->stopped)) {
                pthread_mutex_unlock(&w->mu);
                continue;
            }
            uint64_t due = w->next_hb_us;
            if (due > now) {
                if (due < next)
                    next = due;
                pthread_mutex_unlock(&w->mu);
                continue;
            }
            size_t n = 0;
            for (uint32_t s = 0; s < cap() && n < 64; s++)
                if (w->tasks[s].used)
                    ids[n++] = strdup(w->tasks[s].task_id);
            w->next_hb_us = due + (uint64_t)O.hb_ms * 1000u;
            if (w->next_hb_us < now)
                w->next_hb_us = now + (uint64_t)O.hb_ms * 1000u;
            pthread_mutex_unlock(&w->mu);
            atomic_max(&hb_lag_max_us, now - due);
            Streambatch__V1__WorkerMetrics wm = STREAMBATCH__V1__WORKER_METRICS__INIT;
            wm.tasks_running = (uint32_t)n;
            Streambatch__V1__HeartbeatRequest req = STREAMBATCH__V1__HEARTBEAT_REQUEST__INIT;
            req.worker_id = w->id;
            req.session = w->session;
            req.metrics = &wm;
            req.n_running_task_ids = n;
            req.running_task_ids = ids;
            ProtobufCMessage *resp = NULL;
            if (call(w, SB_RPC_CONTROL_HEARTBEAT, &req.base, 10000, &resp) == 0) {
                Streambatch__V1__HeartbeatReply *r = (Streambatch__V1__HeartbeatReply *)resp;
                atomic_fetch_add(&n_hb, 1);
                atomic_fetch_add(&n_released, r->n_release);
                if (r->shutdown)
                    atomic_store(&w->stopped, 1);
                sb_rpc_msg_free(resp);
            }
            for (size_t i = 0; i < n; i++)
                free(ids[i]);
            now = now_us();
        }
        uint64_t t = now_us();
        if (next > t)
            usleep((useconds_t)(next - t > 20000 ? 20000 : next - t));
    }
    return NULL;
}

/* ---- main ---------------------------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Reads one line from fd within ms (0 with the line, -1 on timeout or EOF). A line read in
 * part when the time runs out is kept for the next call. */
static int read_line(int fd, char *buf, size_t cap, int ms)
{
    static char acc[4096];
    static size_t n;
    uint64_t end = now_us() + (uint64_t)ms * 1000u;
    for (;;) {
        char *nl = memchr(acc, '\n', n);
        if (nl != NULL) {
            size_t len = (size_t)(nl - acc);
            snprintf(buf, cap, "%.*s", (int)len, acc);
            memmove(acc, nl + 1, n - len - 1);
            n -= len + 1;
            return 0;
        }
        uint64_t now = now_us();
        if (now >= end || n == sizeof acc)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)((end - now) / 1000) + 1) <= 0)
            continue;
        ssize_t k = read(fd, acc + n, sizeof acc - n);
        if (k <= 0)
            return -1;
        n += (size_t)k;
    }
}

static double kv(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, " %s=", key);
    const char *p = strstr(line, k);
    return p ? atof(p + strlen(k)) : -1;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0)
        return 1;
    fflush(NULL);
    pid_t pid = fork(); /* before any gRPC in this process */
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        _exit(controller_main(up[1], down[0]));
    }
    close(down[0]);
    close(up[1]);
    char line[2048];
    if (read_line(up[0], line, sizeof line, 30000) != 0 || strncmp(line, "READY ", 6) != 0) {
        fprintf(stderr, "bench_ctl_load: the controller did not start\n");
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 1;
    }
    int port = atoi(line + 6);
    fprintf(stderr,
            "bench_ctl_load: controller pid %d port %d; %zu workers (%zu gpu), %u slots, %zu "
            "splits, %d op(s), heartbeat %u ms, poll wait %u ms, task %u ms\n",
            (int)pid, port, O.workers, (size_t)((double)O.workers * O.gpu_frac), O.slots, O.splits,
            O.stages, O.hb_ms, O.wait_ms, O.task_ms);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    CH = calloc((size_t)O.channels, sizeof *CH);
    for (int i = 0; i < O.channels; i++) {
        sb_err err;
        sb_rpc_opts ro = {.max_receive_bytes = SB_RPC_CONTROL_MAX_REPLY}; /* as a worker's */
        CH[i] = sb_rpc_channel_new(target, sb_test_worker_opts(&ro), &err);
        if (CH[i] == NULL) {
            fprintf(stderr, "bench_ctl_load: %s\n", err.msg);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            return 1;
        }
    }
    size_t ngpu = (size_t)((double)O.workers * O.gpu_frac);
    if (O.stages == 2 && ngpu == 0)
        ngpu = 1;
    W = calloc(O.workers, sizeof *W);
    for (size_t i = 0; i < O.workers; i++) {
        sim_worker *w = &W[i];
        pthread_mutex_init(&w->mu, NULL);
        w->gpu = i >= O.workers - ngpu;
        snprintf(w->id, sizeof w->id, "%s-%zu", w->gpu ? "gpu" : "cpu", i);
        snprintf(w->session, sizeof w->session, "%064zx", i);
        w->tasks = calloc(cap(), sizeof *w->tasks);
        w->done = calloc(cap(), sizeof *w->done);
        w->ch = CH[i % (size_t)O.channels];
    }
    uint64_t t_start = now_us();
    /* registrations spread over the first 100 ms */
    for (size_t i = 0; i < O.workers; i++)
        push(A_REGISTER, (uint32_t)i, 0, t_start + 100000u * i / O.workers);
    pthread_t *th = calloc((size_t)(O.poll_threads + O.hb_threads), sizeof *th);
    pthread_attr_t attr; /* small stacks: many threads mostly wait in a blocking call */
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < O.poll_threads; i++)
        pthread_create(&th[i], &attr, poll_thread, NULL);
    for (int i = 0; i < O.hb_threads; i++)
        pthread_create(&th[O.poll_threads + i], &attr, hb_thread, (void *)(uintptr_t)i);
    pthread_attr_destroy(&attr);
    double cli_cpu0 = cpu_self_s();
    uint64_t total = O.splits * (uint64_t)O.stages, lost_at = 0, last_print = t_start;
    int have_done = 0;
    char done_line[2048] = "", commit_line[1024] = "";
    uint64_t t_done = 0;
    while (!have_done) {
        if (read_line(up[0], line, sizeof line, 100) == 0) {
            if (strncmp(line, "DONE ", 5) == 0) {
                snprintf(done_line, sizeof done_line, " %s", line + 5);
                t_done = now_us();
                have_done = 1;
            }
            continue;
        }
        uint64_t now = now_us();
        if (O.lose > 0 && lost_at == 0 && atomic_load(&n_done) >= (uint64_t)(O.lose_at * total)) {
            size_t ncpu = O.workers - ngpu, step = ncpu / O.lose ? ncpu / O.lose : 1;
            for (size_t k = 0, wi = 0; k < O.lose && wi < ncpu; k++, wi += step)
                atomic_store(&W[wi].silent, 1);
            lost_at = now;
            fprintf(stderr, "bench_ctl_load: %zu workers fell silent at %.1f s\n", O.lose,
                    (double)(now - t_start) / 1e6);
        }
        if (now - last_print >= 5000000) {
            last_print = now;
            fprintf(stderr, "bench_ctl_load: %.0f s: %llu/%" PRIu64 " tasks done, %llu polls\n",
                    (double)(now - t_start) / 1e6, (unsigned long long)atomic_load(&n_done), total,
                    (unsigned long long)atomic_load(&n_polls));
        }
        if (now - t_start > (uint64_t)((O.limit_s + 30) * 1e6)) {
            fprintf(stderr, "bench_ctl_load: the controller did not answer in time\n");
            break;
        }
    }
    double cli_cpu1 = cpu_self_s();
    if (have_done && read_line(up[0], line, sizeof line, (int)(O.commit_s * 1000) + 10000) == 0 &&
        strncmp(line, "COMMIT ", 7) == 0)
        snprintf(commit_line, sizeof commit_line, " %s", line + 7);
    /* stop the workers: the controller answers the open polls with shutdown */
    atomic_store(&stop_all, 1);
    pthread_mutex_lock(&qmu);
    pthread_cond_broadcast(&qcv);
    pthread_mutex_unlock(&qmu);
    for (int i = 0; i < O.poll_threads + O.hb_threads; i++)
        pthread_join(th[i], NULL);
    wr(down[1], "EXIT\n");
    int status = 0, exited = 0;
    for (int i = 0; i < 200 && !exited; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            exited = 1;
        else
            usleep(50000);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    for (int i = 0; i < O.channels; i++)
        sb_rpc_channel_free(CH[i]);

    /* ---- report */
    double seconds = kv(done_line, "seconds"), cpu_s = kv(done_line, "cpu_s");
    uint64_t done = atomic_load(&n_done);
    double tasks_run = kv(done_line, "tasks_run");
    double parts = kv(done_line, "parts") + kv(done_line, "sink");
    double lineage = kv(done_line, "lineage");
    double rss_growth = kv(done_line, "rss") - kv(done_line, "rss0");
    qsort(lat, nlat, sizeof *lat, cmp_u32);
    double p50 = nlat ? lat[nlat / 2] / 1000.0 : -1,
           p99 = nlat ? lat[nlat * 99 / 100] / 1000.0 : -1,
           pmax = nlat ? lat[nlat - 1] / 1000.0 : -1;
    int state = (int)kv(done_line, "state");
    printf("workers %zu (%zu gpu), slots %u, splits %zu, ops %d, heartbeat %u ms, task %u ms, "
           "lose %zu, completions %s, up to %u tasks per free slot\n",
           O.workers, ngpu, O.slots, O.splits, O.stages, O.hb_ms, O.task_ms, O.lose,
           atomic_load(&batched) ? "on polls" : "CompleteTask calls", O.poll_batch);
    printf("  pipeline: %s after %.2f s; %" PRIu64 " completions accepted (%llu stale), %.0f "
           "attempts started\n",
           state == 1   ? "SUCCEEDED"
           : state == 2 ? "FAILED"
                        : "NOT FINISHED",
           seconds, done, (unsigned long long)atomic_load(&n_rejected), tasks_run);
    printf("  throughput: %.0f tasks/s; controller CPU %.2f s = %.1f us per task\n",
           seconds > 0 ? (double)done / seconds : 0, cpu_s, done ? cpu_s * 1e6 / (double)done : 0);
    printf("  assignment latency (cpu polls with tasks queued, %zu): p50 %.2f ms, p99 %.2f ms, "
           "max %.2f ms\n",
           nlat, p50, p99, pmax);
    printf("  lineage: %.0f bytes for %.0f partitions = %.0f B/partition (RSS growth %.0f "
           "B/partition, peak RSS %.1f MiB)\n",
           lineage, parts, parts > 0 ? lineage / parts : 0, parts > 0 ? rss_growth / parts : 0,
           kv(done_line, "hwm") / 1048576.0);
    printf("  calls: %llu polls (%llu empty), %llu heartbeats (max lag %.0f ms), %llu registers, "
           "%llu rpc errors, %llu plan pieces (%.2f s), %llu releases, %llu tasks abandoned by "
           "silent workers\n",
           (unsigned long long)atomic_load(&n_polls),
           (unsigned long long)atomic_load(&n_polls_empty), (unsigned long long)atomic_load(&n_hb),
           atomic_load(&hb_lag_max_us) / 1000.0, (unsigned long long)atomic_load(&n_register),
           (unsigned long long)atomic_load(&n_rpc_errors),
           (unsigned long long)atomic_load(&n_plan_pieces), (double)plan_us / 1e6,
           (unsigned long long)atomic_load(&n_released),
           (unsigned long long)atomic_load(&n_abandoned));
    printf("  controller:%s\n  commit:%s\n  load generator CPU %.2f s\n", done_line,
           commit_line[0] ? commit_line : " (none)", cli_cpu1 - cli_cpu0);
    printf("RESULT ctl_load workers=%zu gpu=%zu slots=%u splits=%zu ops=%d hb_ms=%u task_ms=%u "
           "batched=%d poll_batch=%u lose=%zu state=%d seconds=%.3f done=%" PRIu64
           " tasks_per_s=%.0f cpu_s=%.4f "
           "cpu_us_per_task=%.2f lat_n=%zu lat_p50_ms=%.3f lat_p99_ms=%.3f lat_max_ms=%.3f "
           "lineage_b=%.0f partitions=%.0f lineage_b_per_part=%.1f rss_b_per_part=%.1f "
           "peak_rss_mib=%.1f hb_lag_max_ms=%.0f rpc_errors=%llu lost=%.0f rerun=%.0f "
           "commit_rc=%.0f commit_s=%.3f\n",
           O.workers, ngpu, O.slots, O.splits, O.stages, O.hb_ms, O.task_ms, atomic_load(&batched),
           O.poll_batch, O.lose, state, seconds, done, seconds > 0 ? (double)done / seconds : 0,
           cpu_s, done ? cpu_s * 1e6 / (double)done : 0, nlat, p50, p99, pmax, lineage, parts,
           parts > 0 ? lineage / parts : 0, parts > 0 ? rss_growth / parts : 0,
           kv(done_line, "hwm") / 1048576.0, atomic_load(&hb_lag_max_us) / 1000.0,
           (unsigned long long)atomic_load(&n_rpc_errors), kv(done_line, "lost"),
           kv(done_line, "rerun"), commit_line[0] ? kv(commit_line, "rc") : -9,
           commit_line[0] ? kv(commit_line, "seconds") : -1);
    (void)t_done;
    for (size_t i = 0; i < O.workers; i++) {
        free(W[i].tasks);
        free(W[i].done);
        pthread_mutex_destroy(&W[i].mu);
    }
    free(W);
    free(CH);
    free(th);
    free(Q);
    free(lat);
    return state == 1 ? 0 : 1;
}
