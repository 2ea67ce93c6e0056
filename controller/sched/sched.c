/* sched.c — the scheduler core (see sched.h for the model): planning stages into ops, the
 * lineage table of tasks and partitions, dispatch under the memory budget, speculation, drain,
 * retries and recovery by lineage, and the checkpoint and figures it reports.
 * Owns every task, partition and worker record and the strings they point to; it does no I/O. */

#include "controller/sched/sched.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/exchange.h"
#include "controller/sched/limit.h"
#include "controller/sched/ranges.h"
#include "controller/sched/strmap.h"
#include "core/idmap.h"
#include "core/num.h"
#include "core/redact.h"
#include "core/strpool.h"
#include "io/sink.h"
#include "io/split.h"
#include "metrics/metrics.h"
#include "spec/allops.h"

#define NONE ((size_t)-1)

typedef enum { P_AVAILABLE, P_LOST, P_RELEASED } part_state;
typedef enum { T_QUEUED, T_RUNNING, T_DONE, T_SKIPPED } task_state;

typedef struct {
    char *id;
    size_t producer; /* task */
    size_t worker;   /* NONE when lost or released */
    uint64_t bytes, rows;
    size_t consumer; /* task that reads it, NONE while waiting in the op's input FIFO */
    part_state state;
    uint32_t next_out; /* the producer's next output (task.out_first's list), NO_PART at the end */
    uint32_t uses;     /* stream_cache: epochs that have not released it yet */
    uint8_t parked;    /* stream_cache: released by an epoch, kept: its bytes not counted */
    uint8_t lost_reports; /* times a consumer reported it lost while it was available */
    uint16_t lost_from;   /* the worker that held it at the last such report (NO_HOLDER: none
                           * or an index past 16 bits): its loss explains that report */
} part;

#define NO_HOLDER UINT16_MAX

#define NO_PART UINT32_MAX
#define DEALT ((size_t)-2) /* part.consumer of a stream partition the dealer took */

/* Stream sink ("Stream sink" at the end of this file) */
struct sb_sched;
static int stream_setup(struct sb_sched *s, const sb_sched_config *cfg,
                        const sb_storage_split *splits, size_t nsplits, sb_storage_split **expanded,
                        sb_err *err);
static int stream_push(struct sb_sched *s, size_t ti, size_t pi);
static void stream_advance(struct sb_sched *s);
static int stream_gated(const struct sb_sched *s, size_t ti);
static int stream_finished(const struct sb_sched *s);
static int stream_holds(const struct sb_sched *s);
#define EARLY_MIN_BYTES (256u << 10) /* smallest partition target with early outputs */

/* A task: kept for the whole run (lineage), so kept small — issue 16 asks <= 256 bytes of
 * lineage per partition. Its id is not stored ("<pipeline_id>/s<op>-t<index>", task_name);
 * its split is its index (op 0's tasks are tasks[0..nsplits)); a speculative copy's worker,
 * reserve and start live in s->copies while it runs. */
typedef struct {
    uint64_t index;
    uint64_t in_bytes, in_rows;
    uint64_t reserved;   /* estimated output bytes while running */
    uint64_t pub_bytes;  /* bytes its running attempt published early (grants) */
    uint64_t started_ms; /* when its running attempt started */
    size_t worker;
    union {
        uint32_t one;   /* ninputs == 1 */
        uint32_t *many; /* ninputs > 1 */
    } in;               /* its input partitions (op > 0), task_inputs() */
    char *first_error;  /* the message of its first failed attempt */
    uint32_t op;
    uint32_t attempt;
    uint32_t ninputs;
    uint32_t out_first, nout; /* the partitions it made: a list through part.next_out (early
                                 outputs of a running attempt interleave with other tasks') */
    uint32_t retries;
    uint32_t deaths;       /* times its worker was lost while running it */
    uint32_t spec_attempt; /* attempt number of its latest speculative copy (0: none yet) */
    uint32_t copy;         /* its running copy in s->copies, NO_COPY when none */
    uint8_t state;         /* task_state */
    /* flags, one bit each (the lineage's size per partition, above) */
    uint8_t queued : 1;      /* in its op's queue */
    uint8_t batched : 1;     /* its running attempt came in a batch (see "Batched polls") */
    uint8_t solo : 1;        /* its worker died while it was in a batch: never batched again */
    uint8_t made : 1;        /* a finished attempt's outputs are recorded (the rest: early ones) */
    uint8_t early_stale : 1; /* an attempt that published outputs early did not finish */
    uint8_t grants : 1;      /* its running attempt publishes early (see early_wanted) */
    uint8_t chunked : 1;     /* ... charged one output at a time (start_reserve) */
    uint8_t waiting : 1;     /* ... and waits for the next grant: it makes nothing until then */
    uint8_t pieces : 1;      /* its split's objects that errored alone were counted (once) */
    uint8_t open : 1;        /* an early reduce whose worker has not been told yet that its
                                inputs are closed ("Early reduces"); while its bucket's map
                                outputs may still come, it is in its op's xopens */
} task;

#define NO_COPY UINT32_MAX
#define NO_TASK UINT32_MAX /* a 32-bit task index that is none (task_new stops below it) */

/* A speculative copy running beside its task (see "Speculative copies"). */
typedef struct {
    size_t task, worker;
    uint64_t reserved, started_ms; /* its reserved output estimate, when it started */
} copy_rec;

typedef struct {
    char *id, *pool, *address;
    uint32_t slots, running;
    int alive;
    uint32_t *op_slots;   /* static mode: its slots bound to the op's slot group (static_bind) */
    uint32_t *op_running; /* its running tasks per op */
    char **releases;
    size_t nrel, caprel;
    sb_sched_cancel *cancels; /* its attempts no longer counted, still running there (cancel_on) */
    size_t ncancel, capcancel;
    double *op_speed; /* per op: input bytes per ms of its successful tasks (EWMA); 0 unknown */
    size_t *run;      /* the tasks it runs (as the primary attempt or as a copy): for the
                         earliest-finish rule (eft_defer) */
    size_t nrun, caprun;
    /* gpu pool (slots sharing one accelerator, eft_defer): per op, input bytes per ms of the
     * accelerator's time (EWMA; a task's time counted from its start or the worker's previous
     * completion, whichever is later); 0 unknown. last_end_ms: its latest completion. */
    double *op_svc;
    uint64_t last_end_ms;
    /* sick-node drain (see "Draining sick workers"): its current run of slow tasks (count, when
     * the first started), and once drained the op, its speed and the pool's median then */
    uint32_t slow_n;
    uint64_t slow_since_ms;
    int draining;
    int suspect; /* silent for a while (sb_sched_worker_suspect): its tasks are copied at once */
    uint32_t drain_op;
    double drain_speed, drain_median;
    int early; /* it publishes outputs early and waits for grants (sb_sched_worker_set_early) */
} worker;

typedef struct {
    size_t first_stage, nstages;
    const char *pool;
    int pool_later; /* a later op runs in the same pool (ops_pool_later; chunk_wanted) */
    char *name;
    uint64_t target;
    uint64_t batch_rows; /* ops > 0: the largest batchSize of its stages, 0 for none (form_task) */
    double ratio;        /* largest output/input bytes ratio seen; 0 = not measured yet */
    size_t *queue;       /* FIFO of queued tasks (ring not needed: head index + compaction) */
    size_t qhead, qlen, qcap;
    size_t *fifo; /* input partitions not yet in a task */
    size_t fhead, flen, fcap;
    uint64_t fifo_bytes;
    uint64_t tasks_total, done, running, retries, recovered, errored, resumed;
    uint64_t rows_in, bytes_in, rows_out, bytes_out;
    uint64_t spilled_bytes;          /* by the ops of its successful attempts (sb_sched_metrics) */
    uint64_t outside, outside_bytes; /* their inputs read outside the budget (the same) */
    double task_seconds, cpu_seconds;
    uint64_t attempts, failed_attempts; /* task attempts started, ended without success */
    uint64_t timed;                     /* successful attempts with a reported wall time */
    uint64_t duration_buckets[SB_SCHED_DURATION_BUCKETS]; /* successful attempts' wall times */
    uint64_t backpressure_ms; /* time held by the budget with a task ready, closed spells */
    uint64_t held_since_ms;   /* start of the current spell; held: one is open */
    int held;
    uint64_t next_index;
    uint64_t first_index; /* ops > 0: the index of its first task this epoch */
    uint32_t *tis;        /* ops > 0: its tasks by index - first_index (task_find) */
    size_t ntis, captis;
    uint64_t ok_ms_sum, ok_n;      /* successful attempts' durations by the scheduler's clock */
    uint64_t speculated, spec_won; /* copies started; copies that finished first */
    uint64_t cancelled;            /* attempts the workers were told to stop (cancel_on) */
    uint64_t spec_scan_ms;         /* its last scan for a straggler to copy (spec_candidate) */
    int spec_scanned;
    uint32_t group;    /* static mode: its slot group within its pool (static_bind) */
    double speed_avg;  /* EWMA of every successful task's input bytes per ms (drain pre-filter) */
    uint64_t max_part; /* its largest output partition (the grant of early outputs) */
    sb_sched_pool_figures by_pool[2]; /* sb_sched_group_stats.by_pool */
    /* exchange stages (exchange.h): xmap, its last stage runs the map half; xreduce, its first
     * runs the reduce half over xbuckets buckets, formed once the op before is finished. An op
     * may be both: one exchange's reduce fused with the stages after it up to the next one's
     * map (groupby, then sort). xmiddle: sort's middle op, one stage that is both halves. */
    uint8_t xmap, xreduce, xmiddle;
    uint8_t xopen; /* a reduce half whose tasks may start early (sb_exchange_early) */
    uint32_t xbuckets;
    uint32_t *xopens; /* its open tasks ("Early reduces") */
    size_t nxopens, capxopens;
    uint32_t *xbucket; /* per bucket, its open task (NO_TASK: none); NULL before the first */
    uint64_t xsettled; /* s->gen at its last open_settle */
    uint64_t xlimit;   /* op 0 running a limit's map half: its rows (limit_cut); 0 for none */
    const sb_stage_spec **sp; /* the stages its tasks run (a half's spec in place of the stage) */
    uint8_t pushed;           /* sp[nstages] is the next op's leading project (project_pushed) */
} op;

/* A stream's queue of one epoch ("Stream sink" at the end of this file). */
typedef struct stream_q {
    size_t *q; /* partitions of the epoch not taken yet, in the order they were made */
    size_t head, len, cap;
} stream_q;

struct sb_sched {
    char *pipeline_id;
    sb_stage_spec *stages;  /* shallow copies of the spec's stages; name, op, args dup'ed */
    unsigned *stage_shapes; /* per stage, the shapes it allows (SB_SHAPE_BIT_*) */
    char *(*shape_args)[2]; /* per stage that allows two shapes: its args on cpu and on gpu
                               (sb_stage_args_for_shape; owned), for sb_sched_stage_move */
    const sb_stage_spec **stage_ptrs;
    size_t nstages;
    sb_stage_spec *xhalves; /* per op, its map and reduce halves' specs (op and args owned) */
    sb_exec_mode mode;
    uint64_t budget, target;
    uint64_t max_retries, max_errored;
    int preserve_order;  /* execution.preserveOrder: one input per task of op > 0, sink parts
                            listed in input order */
    int tail_sizing_off; /* sb_sched_config.no_tail_sizing */
    int spec_off;        /* sb_sched_config.no_speculation */
    int drain_off;       /* sb_sched_config.no_drain */
    int eft_off;         /* sb_sched_config.no_eft */
    int early_off;       /* sb_sched_config.no_early */
    uint64_t workers_drained;
    size_t ndraining;    /* alive workers that are draining */
    size_t nsuspect;     /* alive workers that are suspect (sb_sched_worker_suspect) */
    size_t *drain_notes; /* drained workers not yet taken by sb_sched_drains_take */
    size_t ndrain_notes, capdrain_notes;
    sb_storage_output *sink_ordered; /* sb_sched_sink_parts' view with preserve_order */
    int sort_sink; /* the last op is a sort's reduce (with stages fused after it): sink parts
                      listed by (task index, seq), the ranges' order (exchange.h) */
    op *ops;
    size_t nops;
    const char *pools[2];
    size_t npools;
    char **splits; /* in ids */
    size_t nsplits;
    uint8_t *resumed; /* per split: committed by an earlier leader (NULL: none was) */
    task *tasks;
    size_t ntasks, captasks;
    copy_rec *copies; /* running speculative copies */
    size_t ncopies, capcopies;
    char *names; /* the task ids of sb_sched_assign's views (task_name) */
    size_t names_cap;
    part *parts;
    size_t nparts, capparts;
    worker *workers;
    size_t nworkers, capworkers;
    sb_idmap part_ids, sink_ids; /* keys: parts[i].id, sink[i].id */
    sb_strmap worker_ids;
    sb_strpool ids; /* task, partition and sink part ids and the splits, kept to the end */
    uint64_t partition_bytes, reserved_bytes, peak_partition_bytes, max_partition_bytes;
    uint64_t tasks_batched;
    uint64_t early_outputs; /* sb_sched_stats.early_outputs */
    uint64_t waiting_total; /* running attempts waiting for a grant (task.waiting) */
    uint64_t tasks_run, tasks_rerun, partitions_recovered, partitions_lost, running_total,
        errored_total;
    sb_storage_errored *errored;
    size_t nerrored, caperrored;
    sb_storage_output *sink;
    size_t nsink, capsink;
    uint32_t *sink_task; /* producer of sink[i]; NO_TASK for parts carried over by a resume */
    size_t capsink_task;
    uint32_t epoch;
    uint64_t sink_rows, sink_bytes;
    sb_sched_metrics source; /* parquet pushdown counts of successful source tasks */
    sb_sched_state state;
    char *failure;
    uint64_t last_progress_ms;
    /* stream sink (sb_sched_config.stream; "Stream sink" at the end of this file) */
    int stream;
    uint32_t stream_epochs, stream_open; /* epochs planned; the latest one let in */
    size_t epoch_splits;                 /* splits per epoch (op 0's tasks e * this ..) */
    stream_q *sq;                        /* per epoch */
    uint64_t stream_taken;               /* taken and not released yet */
    int stream_starved; /* the dealer found its consumers stuck on pinned rows with nothing to deal
                         * (sb_sched_stream_starved): one task may pass the budget */
    int stream_cache;   /* sb_sched_config.stream_cache */
    uint64_t stream_seed; /* with stream_shuffle: later epochs' order */
    int stream_shuffle;
    size_t *cached; /* stream_cache: epoch 0's partitions, in the order they were made */
    size_t ncached, capcached;
    uint64_t now_ms; /* the latest clock a call brought (open backpressure spells end there) */
    /* a parquet sink's records schema inferred by the first sink task (sink_gated) */
    int infer_schema;  /* the run infers one (sb_io_sink_infers_schema) */
    char *sink_schema; /* the schema, once a sink task reported it; NULL before */
    size_t infer_ti;   /* the sink task inferring it (while running), or NONE */
    /* assignment scratch */
    sb_sched_input *in_scratch;
    size_t in_scratch_cap;
    sb_sched_input *more_scratch; /* sb_sched_more_inputs' views */
    size_t more_scratch_cap;
    uint64_t early_reduces; /* sb_sched_stats.early_reduces */
    uint64_t gen; /* bumped by each accepted report and each worker gone or come (open_settle) */
    size_t *pick_scratch; /* form_task's picks */
    size_t pick_cap;
    int oom;
};

/* ---- small helpers ------------------------------------------------------------------------ */

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*arr, ncap * elem);
    if (n == NULL)
        return -1;
    *arr = n;
    *cap = ncap;
    return 0;
}

#define GROW(s, arr, cap, need)                                                                    \
    (grow((void **)&(arr), &(cap), (need), sizeof *(arr)) == 0 ? 0 : ((s)->oom = 1, -1))

static void set_failure(sb_sched *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_failure(sb_sched *s, const char *fmt, ...)
{
    if (s->state == SB_SCHED_FAILED)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    s->failure = strdup(buf);
    s->state = SB_SCHED_FAILED;
}

static void add_release(sb_sched *s, size_t w, const char *id)
{
    if (w == NONE)
        return;
    worker *wk = &s->workers[w];
    if (GROW(s, wk->releases, wk->caprel, wk->nrel + 1) != 0)
        return;
    wk->releases[wk->nrel] = strdup(id);
    if (wk->releases[wk->nrel] == NULL) {
        s->oom = 1;
        return;
    }
    wk->nrel++;
}

/* Marks t's running attempt as waiting for a grant of early outputs (see early_wanted), or not. */
static void set_waiting(sb_sched *s, task *t, int v)
{
    if (t->waiting == v)
        return;
    t->waiting = (uint8_t)v;
    if (v)
        s->waiting_total++;
    else
        s->waiting_total--;
}

static void part_drop_bytes(sb_sched *s, part *p)
{
    if (p->state == P_AVAILABLE && !p->parked)
        s->partition_bytes -= p->bytes;
    p->parked = 0;
}

/* The partition will not be read again: free it where it lives. */
static void part_release(sb_sched *s, size_t pi)
{
    part *p = &s->parts[pi];
    if (p->state == P_RELEASED)
        return;
    part_drop_bytes(s, p);
    if (p->state == P_AVAILABLE)
        add_release(s, p->worker, p->id);
    p->state = P_RELEASED;
    p->worker = NONE;
}

static int queue_push(sb_sched *s, op *o, size_t t)
{
    if (o->qhead > 0 && o->qhead + o->qlen == o->qcap) { /* compact */
        memmove(o->queue, o->queue + o->qhead, o->qlen * sizeof *o->queue);
        o->qhead = 0;
    }
    if (GROW(s, o->queue, o->qcap, o->qhead + o->qlen + 1) != 0)
        return -1;
    o->queue[o->qhead + o->qlen++] = t;
    s->tasks[t].queued = 1;
    s->tasks[t].state = T_QUEUED;
    return 0;
}

static int fifo_push(sb_sched *s, op *o, size_t pi)
{
    if (o->fhead > 0 && o->fhead + o->flen == o->fcap) {
        memmove(o->fifo, o->fifo + o->fhead, o->flen * sizeof *o->fifo);
        o->fhead = 0;
    }
    if (GROW(s, o->fifo, o->fcap, o->fhead + o->flen + 1) != 0)
        return -1;
    o->fifo[o->fhead + o->flen++] = pi;
    o->fifo_bytes += s->parts[pi].bytes;
    return 0;
}

static size_t task_new(sb_sched *s, uint32_t opi, uint64_t index)
{
    if (GROW(s, s->tasks, s->captasks, s->ntasks + 1) != 0)
        return NONE;
    task *t = &s->tasks[s->ntasks];
    memset(t, 0, sizeof *t);
    t->op = opi;
    t->index = index;
    t->worker = NONE;
    t->copy = NO_COPY;
    op *o = &s->ops[opi];
    if (s->ntasks >= UINT32_MAX - 1) { /* indexes are 32-bit in the lineage table */
        s->oom = 1;
        return NONE;
    }
    if (opi > 0) { /* op 0: tasks[index] (sb_sched_new makes them first, in split order) */
        if (index != o->first_index + o->ntis || GROW(s, o->tis, o->captis, o->ntis + 1) != 0) {
            s->oom = 1;
            return NONE;
        }
        o->tis[o->ntis++] = (uint32_t)s->ntasks;
    }
    o->tasks_total++;
    return s->ntasks++;
}

/* Writes the task's id, "<pipeline_id>/s<op>-t<index>", into buf (len bytes); returns buf. */
static const char *task_name(const sb_sched *s, const task *t, char *buf, size_t len)
{
    snprintf(buf, len, "%s/s%" PRIu32 "-t%" PRIu64, s->pipeline_id, t->op, t->index);
    return buf;
}

#define TASK_NAME_SUFFIX 36                    /* "/s" u32 "-t" u64 and the NUL */
#define TASK_NAME_MAX (512 + TASK_NAME_SUFFIX) /* pipeline_id is at most 512 bytes */

/* The task an id names (as task_name writes it), or NONE. */
static size_t task_find(const sb_sched *s, const char *id)
{
    size_t plen = strlen(s->pipeline_id);
    if (strncmp(id, s->pipeline_id, plen) != 0 || id[plen] != '/' || id[plen + 1] != 's')
        return NONE;
    const char *p = id + plen + 2;
    uint64_t opi, index;
    if (sb_num_parse_dec(&p, UINT32_MAX, &opi) < 0 || *p++ != '-' || *p++ != 't' ||
        sb_num_parse_dec(&p, UINT64_MAX, &index) < 0 || *p != '\0' || opi >= s->nops)
        return NONE;
    size_t ti = NONE;
    if (opi == 0) {
        if (index < s->nsplits)
            ti = (size_t)index;
    } else {
        const op *o = &s->ops[opi];
        if (index >= o->first_index && index - o->first_index < o->ntis)
            ti = o->tis[index - o->first_index];
    }
    if (ti == NONE || s->tasks[ti].op != opi || s->tasks[ti].index != index)
        return NONE;
    /* the parse accepts what task_name would not write (leading zeros): compare the whole id */
    char buf[TASK_NAME_MAX];
    return strcmp(task_name(s, &s->tasks[ti], buf, sizeof buf), id) == 0 ? ti : NONE;
}

/* The task's input partitions (ninputs of them). */
static const uint32_t *task_inputs(const task *t)
{
    return t->ninputs > 1 ? t->in.many : &t->in.one;
}

/* The worker running the task's speculative copy, or NONE. */
static size_t copy_worker(const sb_sched *s, const task *t)
{
    return t->copy == NO_COPY ? NONE : s->copies[t->copy].worker;
}

/* Forgets the task's copy record (its slot and reserve were given back by the caller). */
static void copy_forget(sb_sched *s, task *t)
{
    size_t k = t->copy;
    s->copies[k] = s->copies[--s->ncopies];
    if (k < s->ncopies)
        s->tasks[s->copies[k].task].copy = (uint32_t)k;
    t->copy = NO_COPY;
}

/* ---- plan ----------------------------------------------------------------------------------- */

static const char *pool_of(const sb_stage_spec *st)
{
    return sb_stage_pool(st);
}

/* Parses "s<op>-t<task>-p<seq>" (decimal fields); 0 or -1. */
static int parse_part_id(const char *id, uint64_t *opi, uint64_t *tix)
{
    const char *p = id;
    uint64_t v[3];
    const char tag[3] = {'s', 't', 'p'};
    for (int k = 0; k < 3; k++) {
        if (*p++ != tag[k] || *p < '0' || *p > '9')
            return -1;
        uint64_t x = 0;
        while (*p >= '0' && *p <= '9') {
            uint64_t d = (uint64_t)(*p++ - '0');
            if (x > (UINT64_MAX - d) / 10)
                return -1;
            x = x * 10 + d;
        }
        v[k] = x;
        if (k < 2 && *p++ != '-')
            return -1;
    }
    if (*p != '\0')
        return -1;
    *opi = v[0];
    *tix = v[1];
    return 0;
}

/* Reads a resume: the committed splits into committed[], the sink parts into s->sink. */
static int order_key_valid(const char *key, size_t nops);

static int resume_load(sb_sched *s, const sb_sched_resume *r, uint8_t *committed, sb_err *err)
{
    if (sb_ranges_parse(r->committed_splits, committed, s->nsplits, err) != 0)
        return sb_err_wrap(err, "scheduler: resume");
    s->epoch = r->epoch;
    int any = 0;
    for (size_t i = 0; i < s->nsplits && !any; i++)
        any = committed[i];
    if (r->epoch == 0 && (any || r->nparts > 0))
        return sb_err_set(err, "scheduler: resume: epoch 0 with committed work (a leader that "
                               "resumes a run takes the next epoch, >= 1)");
    if (r->nparts > 0 && r->parts == NULL)
        return sb_err_set(err, "scheduler: resume: %zu parts but no array", r->nparts);
    uint64_t first_new = (uint64_t)r->epoch * SB_SCHED_EPOCH_STRIDE;
    for (size_t i = 0; i < r->nparts; i++) {
        const sb_storage_output *o = &r->parts[i];
        uint64_t opi, tix;
        if (o->id == NULL || parse_part_id(o->id, &opi, &tix) != 0)
            return sb_err_set(err,
                              "scheduler: resume: part %zu: id \"%.64s\" is not "
                              "s<op>-t<task>-p<seq>",
                              i, o->id ? o->id : "(null)");
        if (opi >= s->nops)
            return sb_err_set(err,
                              "scheduler: resume: part %s: op %" PRIu64 " does not exist "
                              "(%zu ops)",
                              o->id, opi, s->nops);
        if (opi == 0 && (tix >= s->nsplits || !committed[tix]))
            return sb_err_set(err,
                              "scheduler: resume: part %s: split %" PRIu64 " is not "
                              "committed",
                              o->id, tix);
        if (opi > 0 && tix >= first_new)
            return sb_err_set(err,
                              "scheduler: resume: part %s: task index not below epoch %u's "
                              "first (%" PRIu64 "); it would collide with this run's parts",
                              o->id, r->epoch, first_new);
        if (sb_idmap_get(&s->sink_ids, o->id, NULL))
            continue; /* listed twice */
        if (GROW(s, s->sink, s->capsink, s->nsink + 1) != 0 ||
            GROW(s, s->sink_task, s->capsink_task, s->nsink + 1) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        if (o->order != NULL && s->preserve_order && !order_key_valid(o->order, s->nops))
            return sb_err_set(err,
                              "scheduler: resume: part %s: order key \"%.80s\" is not %zu "
                              "decimal numbers joined by '.'",
                              o->id, o->order, s->nops + 1);
        s->sink[s->nsink] = *o;
        s->sink[s->nsink].id = sb_strpool_dup(&s->ids, o->id);
        s->sink[s->nsink].order = o->order != NULL && s->preserve_order ? strdup(o->order) : NULL;
        if (s->sink[s->nsink].id == NULL ||
            (o->order != NULL && s->preserve_order && s->sink[s->nsink].order == NULL) ||
            sb_idmap_put(&s->sink_ids, o->id, s->nsink) != 0) {
            free((char *)s->sink[s->nsink].order);
            return sb_err_set(err, "scheduler: out of memory");
        }
        s->sink_task[s->nsink] = NO_TASK;
        s->nsink++;
        s->sink_rows += o->rows;
        s->sink_bytes += o->bytes;
    }
    return 0;
}

/* The ids the maps index (sb_idmap reads them back instead of keeping copies). */
static const char *part_key(const void *ctx, size_t i)
{
    return ((const sb_sched *)ctx)->parts[i].id;
}

static const char *sink_key(const void *ctx, size_t i)
{
    return ((const sb_sched *)ctx)->sink[i].id;
}

/* Sets each op's pool_later: whether a later op runs in its pool (at the start and after a
 * stage moved). */
static void ops_pool_later(sb_sched *s)
{
    for (size_t i = 0; i < s->nops; i++) {
        s->ops[i].pool_later = 0;
        for (size_t k = i + 1; k < s->nops && !s->ops[i].pool_later; k++)
            s->ops[i].pool_later = strcmp(s->ops[k].pool, s->ops[i].pool) == 0;
    }
}

/* Copies the pipeline's stages into the scheduler (it outlives the spec) with each stage's
 * shapes, and its per-shape args when it may run on either pool. -1: out of memory. */
static int sched_copy_stages(sb_sched *s, const sb_pipeline *p)
{
    s->nstages = p->spec.nstages;
    s->stages = calloc(s->nstages, sizeof *s->stages);
    s->stage_ptrs = calloc(s->nstages, sizeof *s->stage_ptrs);
    s->stage_shapes = calloc(s->nstages ? s->nstages : 1, sizeof *s->stage_shapes);
    s->shape_args = calloc(s->nstages ? s->nstages : 1, sizeof *s->shape_args);
    if (s->stages == NULL || s->stage_ptrs == NULL || s->stage_shapes == NULL ||
        s->shape_args == NULL)
        return -1;
    for (size_t i = 0; i < s->nstages; i++) {
        const sb_stage_spec *src = &p->spec.stages[i];
        sb_stage_spec *d = &s->stages[i];
        *d = *src;
        d->name = strdup(src->name ? src->name : "");
        d->op = strdup(src->op ? src->op : "");
        d->args_json = src->args_json ? strdup(src->args_json) : NULL;
        if (d->name == NULL || d->op == NULL || (src->args_json && d->args_json == NULL))
            return -1;
        s->stage_ptrs[i] = d;
        s->stage_shapes[i] = sb_stage_shapes(src);
        if (s->stage_shapes[i] == (SB_SHAPE_BIT_CPU | SB_SHAPE_BIT_GPU)) {
            s->shape_args[i][0] = sb_stage_args_for_shape(src, "cpu");
            s->shape_args[i][1] = sb_stage_args_for_shape(src, "gpu");
            if (s->shape_args[i][0] == NULL || s->shape_args[i][1] == NULL)
                return -1;
        }
    }
    return 0;
}

static op *plan_op_new(sb_sched *s, size_t stage, const char *pool)
{
    op *o = &s->ops[s->nops++];
    o->first_stage = stage;
    o->nstages = 1;
    o->pool = pool;
    o->target = s->target;
    int known = 0;
    for (size_t k = 0; k < s->npools; k++)
        known |= strcmp(s->pools[k], pool) == 0;
    if (!known)
        s->pools[s->npools++] = pool;
    return o;
}

/* Stage i's right side bytes when it is a join the plan exchanges by key (exchange.h), else 0. */
static uint64_t join_exchanged(const sb_sched *s, const sb_sched_config *cfg, size_t i)
{
    if (cfg->join_right == NULL || i >= cfg->njoin_right || strcmp(s->stage_ptrs[i]->op, "join"))
        return 0;
    return cfg->join_right[i];
}

/* Groups the stages into ops: in streaming mode adjacent stages of one pool fuse into one op, so
 * their tasks run back to back with no transfer; each op is named "a+b+...". -1: out of memory. */
static int sched_plan_ops(sb_sched *s, const sb_sched_config *cfg)
{
    int fuse = s->mode == SB_MODE_STREAMING && !cfg->no_fusion;
    s->ops = calloc(3 * s->nstages, sizeof *s->ops); /* an exchange stage makes two, sort 3 */
    if (s->ops == NULL)
        return -1;
    int prev_alone = 0;
    for (size_t i = 0; i < s->nstages; i++) {
        const char *pool = pool_of(s->stage_ptrs[i]);
        /* a stage that may move to another shape while running is an op of its own, except
         * after a sort: there it must run in the sort's reduce tasks, or it would take the
         * ranges in no order (validate accepts it because its pool is the sort's) */
        int alone = cfg->no_fuse_choices && s->shape_args[i][0] != NULL && !s->sort_sink;
        int join = fuse && !alone && !prev_alone && s->nops > 0;
        prev_alone = alone;
        if (join && strcmp(s->ops[s->nops - 1].pool, pool) == 0) {
            s->ops[s->nops - 1].nstages++;
        } else {
            plan_op_new(s, i, pool);
        }
        if (sb_spec_allop(s->stage_ptrs[i]->op) || join_exchanged(s, cfg, i) > 0) {
            /* map half ends this op, reduce starts one */
            s->ops[s->nops - 1].xmap = 1;
            plan_op_new(s, i, pool)->xreduce = 1;
            if (sb_exchange_rounds(s->stage_ptrs[i]->op) == 2) { /* sort: a middle op, "x.range" */
                s->ops[s->nops - 1].xmap = 1;
                s->ops[s->nops - 1].xmiddle = 1;
                plan_op_new(s, i, pool)->xreduce = 1;
                s->sort_sink = 1;
            } else if (s->sort_sink) {
                s->sort_sink = 0; /* an exchange after the sort: its order is not kept */
            }
        } else if (s->sort_sink && (!join || strcmp(s->ops[s->nops - 1].pool, pool) != 0)) {
            s->sort_sink = 0; /* a stage not fused with the sort's reduce: validate refuses it */
        }
    }
    ops_pool_later(s);
    for (size_t i = 0; i < s->nops; i++) {
        op *o = &s->ops[i];
        size_t len = 1;
        for (size_t k = 0; k < o->nstages; k++)
            len += strlen(s->stages[o->first_stage + k].name) + 1;
        o->name = malloc(len + 6);
        if (o->name == NULL)
            return -1;
        o->name[0] = '\0';
        for (size_t k = 0; k < o->nstages; k++) {
            int64_t b = s->stages[o->first_stage + k].batch_size;
            if (b > 0 && (uint64_t)b > o->batch_rows)
                o->batch_rows = (uint64_t)b; /* rows mostly pass 1:1 through a fused chain */
            if (k)
                strcat(o->name, "+");
            strcat(o->name, s->stages[o->first_stage + k].name);
        }
        if (o->xmap) /* the stage's map half: its reduce half's op has the stage's name */
            strcat(o->name, o->xmiddle ? ".range" : ".map");
    }
    return 0;
}

/* Does op i's task also run a copy of the project that starts op i + 1? Ops of two pools meet at
 * a transfer, and a project right after it keeps only some columns: run there first, the
 * partitions that cross and wait in the store are those columns only. The headline job's GPU
 * stage kept each row's 48 KiB input image beside its logits for a CPU project to drop (issue
 * 36). Its own op still runs it (a project of projected columns changes nothing), so its
 * metrics and lineage stay its own; an error of the copy (a missing column) fails the task
 * before it, naming op project. Only where stages fuse (streaming mode, fusion on); not after a
 * map half (its outputs are buckets), nor for a stage whose args depend on its shape. */
static int project_pushed(const sb_sched *s, const sb_sched_config *cfg, size_t i)
{
    if (s->mode != SB_MODE_STREAMING || cfg->no_fusion || i + 1 >= s->nops || s->ops[i].xmap ||
        s->ops[i + 1].xreduce)
        return 0;
    size_t k = s->ops[i + 1].first_stage;
    return strcmp(s->stage_ptrs[k]->op, "project") == 0 && s->shape_args[k][0] == NULL;
}

/* Every op's stage list (op.sp), where an exchange stage's place holds the spec of its half:
 * op SB_EXCHANGE_MAP_OP or SB_EXCHANGE_REDUCE_OP with the wrapped args (exchange.h), both
 * halves with the stage's buckets (from the splits). -1: out of memory. */
static int sched_exchange_setup(sb_sched *s, const sb_sched_config *cfg,
                                const sb_storage_split *splits, size_t nsplits)
{
    s->xhalves = calloc(2 * s->nops, sizeof *s->xhalves);
    if (s->xhalves == NULL)
        return -1;
    for (size_t i = 0; i < s->nops; i++) {
        op *o = &s->ops[i];
        if ((o->sp = malloc((o->nstages + 1) * sizeof *o->sp)) == NULL)
            return -1;
        memcpy(o->sp, s->stage_ptrs + o->first_stage, o->nstages * sizeof *o->sp);
        if ((o->pushed = project_pushed(s, cfg, i)) != 0)
            o->sp[o->nstages] = s->stage_ptrs[s->ops[i + 1].first_stage];
        if (o->xmiddle) { /* sort's middle op: one stage, the exchange's round 1 */
            const sb_stage_spec *st = s->stage_ptrs[o->first_stage];
            s->ops[i + 1].xbuckets = o->xbuckets;
            sb_stage_spec *h = &s->xhalves[2 * i];
            *h = *st;
            h->op = strdup(SB_EXCHANGE_REDUCE_OP);
            h->args_json = sb_exchange_args_round(st, o->xbuckets, s->budget, 1);
            if (h->op == NULL || h->args_json == NULL)
                return -1;
            o->sp[0] = h;
            continue;
        }
        for (int half = 0; half < 2; half++) {
            if (!(half ? o->xreduce : o->xmap))
                continue;
            size_t k = half ? 0 : o->nstages - 1, rop = half ? i : i + 1;
            const sb_stage_spec *st = s->stage_ptrs[o->first_stage + k];
            uint64_t right = join_exchanged(s, cfg, o->first_stage + k);
            if (s->ops[rop].xbuckets == 0)
                s->ops[rop].xbuckets = sb_exchange_buckets(st, splits, nsplits);
            if (right > 0 && !half) /* once: the map half comes first */
                s->ops[rop].xbuckets =
                    sb_exchange_join_buckets(s->ops[rop].xbuckets, right, s->budget);
            sb_stage_spec *h = &s->xhalves[2 * i + half];
            *h = *st;
            h->op = strdup(half ? SB_EXCHANGE_REDUCE_OP : SB_EXCHANGE_MAP_OP);
            h->args_json = right > 0 ? sb_exchange_join_args(st, s->ops[rop].xbuckets, s->budget,
                                                             nsplits, right)
                                     : sb_exchange_args(st, s->ops[rop].xbuckets, s->budget);
            if (h->op == NULL || h->args_json == NULL)
                return -1;
            o->sp[k] = h;
            if (half && right == 0 && !cfg->no_early_reduce && s->mode == SB_MODE_STREAMING &&
                sb_exchange_early(st))
                o->xopen = 1;
        }
    }
    return 0;
}

/* Creates op 0's tasks, one per split, and queues those an earlier leader did not commit (from
 * cfg->resume); later ops number their tasks from this epoch's first index, so they cannot
 * collide with a resumed run's parts. -1 with err set. */
static int sched_seed_tasks(sb_sched *s, const sb_sched_config *cfg, const sb_storage_split *splits,
                            size_t nsplits, sb_err *err)
{
    s->nsplits = nsplits;
    s->splits = calloc(nsplits ? nsplits : 1, sizeof *s->splits);
    /* op 0's tasks, one per split, in an array of their exact size (later tasks grow it) */
    s->tasks = malloc((nsplits ? nsplits : 1) * sizeof *s->tasks);
    if (s->splits == NULL || s->tasks == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    s->captasks = nsplits ? nsplits : 1;
    uint8_t *committed = calloc(nsplits ? nsplits : 1, 1);
    if (committed == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    if (cfg->resume != NULL && resume_load(s, cfg->resume, committed, err) != 0)
        goto fail;
    for (size_t i = 0; i < nsplits; i++) {
        s->splits[i] = sb_strpool_dup(&s->ids, splits[i].split);
        if (s->splits[i] == NULL)
            goto oom;
        size_t t = task_new(s, 0, i);
        if (t == NONE)
            goto oom;
        s->tasks[t].in_bytes = splits[i].bytes;
        if (committed[i]) { /* an earlier leader committed it: not run again */
            s->tasks[t].state = T_SKIPPED;
            s->ops[0].done++;
            s->ops[0].resumed++;
            continue;
        }
        if (queue_push(s, &s->ops[0], t) != 0)
            goto oom;
    }
    if (s->ops[0].resumed > 0) /* kept for sb_sched_checkpoint_within */
        s->resumed = committed;
    else
        free(committed);
    s->ops[0].next_index = nsplits;
    for (size_t i = 1; i < s->nops; i++)
        s->ops[i].next_index = s->ops[i].first_index = (uint64_t)s->epoch * SB_SCHED_EPOCH_STRIDE;
    return 0;
oom:
    sb_err_set(err, "scheduler: out of memory");
fail:
    free(committed);
    return -1;
}

static size_t sched_op0_last(const sb_sched *s);

/* An exchanged join's map tasks read the right side in shares by task index (exchange.h), so
 * they must be op 0's, one per split, each run to its end: refused otherwise, before any task
 * runs, as a right side that cannot be exchanged here. */
static int sched_join_check(const sb_sched *s, const sb_sched_config *cfg, sb_err *err)
{
    for (size_t i = 0; i < s->nstages; i++) {
        if (join_exchanged(s, cfg, i) == 0)
            continue;
        const char *why = NULL;
        uint64_t right = join_exchanged(s, cfg, i), maps = s->nsplits;
        if (sched_op0_last(s) != i)
            why = "its map tasks must read the source: no all-to-all stage before it, and every "
                  "stage before it on cpu in streaming mode";
        else if (cfg->stream)
            why = "it cannot feed a stream:// sink";
        else if (s->max_errored > 0)
            why = "execution.maxErroredPartitions must be 0 (a map task dropped for its left rows "
                  "would drop its share of the right side too)";
        else if (s->preserve_order)
            why = "execution.preserveOrder cannot hold across an exchange";
        else if (s->ops[0].resumed > 0)
            why = "it cannot resume a run whose source splits were committed";
        else if (maps > 0 && s->budget > 0 && (right + maps - 1) / maps > s->budget / 4)
            why = "each map task would hold its share of it (the right side over the source's "
                  "splits) past a quarter of execution.memoryBudget: give the source more splits "
                  "(a smaller partitionSize) or a larger memoryBudget";
        if (why != NULL)
            return sb_err_set(err,
                              "stage %s (join): the right side is %llu bytes, at or above "
                              "broadcastBelow, so it is exchanged by key, but %s; or raise "
                              "broadcastBelow (at most a quarter of execution.memoryBudget)",
                              s->stages[i].name, (unsigned long long)right, why);
    }
    return 0;
}

/* The stage op 0's map half runs when op 0 ends in an exchange stage's map half, else NONE
 * (sb_exchange_limit_setup: a limit's map half must be op 0's). */
static size_t sched_op0_last(const sb_sched *s)
{
    return s->nops > 0 && s->ops[0].xmap ? s->ops[0].first_stage + s->ops[0].nstages - 1 : NONE;
}

/* limit (exchange.h): once the source tasks of splits 0..k are finished and their map outputs
 * hold at least xlimit rows, no later split can contribute, so its queued tasks are dropped
 * (skipped, never run). Running ones finish; the reduce side takes only the first rows. */
static void limit_cut(sb_sched *s)
{
    op *o = &s->ops[0];
    uint64_t rows = 0;
    size_t k = 0;
    for (; k < s->nsplits && rows < o->xlimit; k++) {
        const task *t = &s->tasks[k];
        if (t->state != T_DONE && t->state != T_SKIPPED) /* errored or dropped: no rows */
            return;
        for (uint32_t pi = t->nout > 0 ? t->out_first : NO_PART; pi != NO_PART;
             pi = s->parts[pi].next_out)
            rows += s->parts[pi].rows;
    }
    if (rows < o->xlimit)
        return;
    size_t kept = 0;
    for (size_t q = 0; q < o->qlen; q++) {
        size_t ti = o->queue[o->qhead + q];
        if (ti >= k && ti < s->nsplits) {
            s->tasks[ti].queued = 0;
            s->tasks[ti].state = T_SKIPPED;
            o->done++;
        } else {
            o->queue[o->qhead + kept++] = ti;
        }
    }
    o->qlen = kept;
}

sb_sched *sb_sched_new(const sb_sched_config *cfg, const sb_storage_split *splits, size_t nsplits,
                       sb_err *err)
{
    const sb_pipeline *p = cfg->pipeline;
    if (p == NULL || p->spec.nstages == 0) {
        sb_err_set(err, "scheduler: the pipeline has no stages");
        return NULL;
    }
    sb_sched *s = calloc(1, sizeof *s);
    if (s == NULL)
        goto oom;
    sb_idmap_init(&s->part_ids, part_key, s);
    sb_idmap_init(&s->sink_ids, sink_key, s);
    if (cfg->pipeline_id != NULL && strlen(cfg->pipeline_id) > 512) {
        sb_err_set(err, "scheduler: the pipeline id is longer than 512 bytes");
        goto fail;
    }
    s->pipeline_id = strdup(cfg->pipeline_id ? cfg->pipeline_id : "pipeline");
    if (s->pipeline_id == NULL || sched_copy_stages(s, p) != 0)
        goto oom;
    s->mode = p->spec.execution.mode;
    s->budget = (uint64_t)p->spec.execution.memory_budget;
    s->target = (uint64_t)p->spec.source.partition_size;
    s->max_retries = (uint64_t)p->spec.execution.max_task_retries;
    s->max_errored = (uint64_t)p->spec.execution.max_errored_partitions;
    s->preserve_order = p->spec.execution.preserve_order;
    s->tail_sizing_off = cfg->no_tail_sizing;
    s->spec_off = cfg->no_speculation;
    s->drain_off = cfg->no_drain;
    s->eft_off = cfg->no_eft;
    s->early_off = cfg->no_early;
    s->infer_schema = !cfg->stream && sb_io_sink_infers_schema(p);
    s->infer_ti = NONE;
    if (cfg->resume != NULL && cfg->resume->sink_schema != NULL && cfg->resume->sink_schema[0] &&
        (s->sink_schema = strdup(cfg->resume->sink_schema)) == NULL)
        goto oom;
    if (sched_plan_ops(s, cfg) != 0)
        goto oom;
    sb_storage_split *expanded = NULL;
    if (cfg->stream) {
        if (stream_setup(s, cfg, splits, nsplits, &expanded, err) != 0)
            goto fail;
        splits = expanded;
        nsplits *= s->stream_cache ? 1 : s->stream_epochs; /* cached: the source is read once */
    }
    int seeded = sched_seed_tasks(s, cfg, splits, nsplits, err);
    free(expanded);
    if (seeded != 0)
        goto fail;
    if (sched_exchange_setup(s, cfg, splits, nsplits) != 0)
        goto oom;
    if (sched_join_check(s, cfg, err) != 0)
        goto fail;
    if (sb_exchange_limit_setup(s->stage_ptrs, s->nstages, sched_op0_last(s), &s->ops[0].xlimit,
                                err) != 0)
        goto fail;
    s->state = s->ops[0].qlen == 0 ? SB_SCHED_SUCCEEDED : SB_SCHED_RUNNING;
    s->last_progress_ms = cfg->start_ms;
    return s;
oom:
    sb_err_set(err, "scheduler: out of memory");
fail:
    sb_sched_free(s);
    return NULL;
}

void sb_sched_free(sb_sched *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->nstages && s->stages; i++) {
        free(s->stages[i].name);
        free(s->stages[i].op);
        free(s->stages[i].args_json);
        if (s->shape_args != NULL) {
            free(s->shape_args[i][0]);
            free(s->shape_args[i][1]);
        }
    }
    free(s->stages);
    free(s->stage_shapes);
    free(s->shape_args);
    free(s->stage_ptrs);
    for (size_t i = 0; i < s->nops; i++) {
        free(s->ops[i].name);
        free(s->ops[i].queue);
        free(s->ops[i].fifo);
        free(s->ops[i].tis);
        free(s->ops[i].xopens);
        free(s->ops[i].xbucket);
        free(s->ops[i].sp);
    }
    for (size_t i = 0; s->xhalves != NULL && i < 2 * s->nops; i++) {
        free(s->xhalves[i].op);
        free(s->xhalves[i].args_json);
    }
    free(s->xhalves);
    free(s->ops);
    free(s->splits);
    free(s->resumed);
    for (size_t i = 0; i < s->ntasks; i++) {
        if (s->tasks[i].ninputs > 1)
            free(s->tasks[i].in.many);
        free(s->tasks[i].first_error);
    }
    free(s->tasks);
    free(s->copies);
    free(s->names);
    free(s->sink_ordered);
    for (size_t i = 0; i < s->nerrored; i++) {
        free((char *)s->errored[i].task_id);
        free((char *)s->errored[i].input);
        free((char *)s->errored[i].error);
    }
    free(s->errored);
    for (uint32_t e = 0; s->sq != NULL && e < s->stream_epochs; e++)
        free(s->sq[e].q);
    free(s->sq);
    free(s->cached);
    free(s->parts);
    for (size_t i = 0; i < s->nworkers; i++) {
        worker *w = &s->workers[i];
        free(w->id);
        free(w->address);
        free(w->pool);
        free(w->op_slots);
        free(w->op_running);
        free(w->op_speed);
        free(w->op_svc);
        free(w->run);
        for (size_t k = 0; k < w->nrel; k++)
            free(w->releases[k]);
        free(w->releases);
        for (size_t k = 0; k < w->ncancel; k++)
            free(w->cancels[k].task_id);
        free(w->cancels);
    }
    free(s->workers);
    free(s->drain_notes);
    for (size_t i = 0; i < s->nsink; i++)
        free((char *)s->sink[i].order);
    free(s->sink);
    free(s->sink_task);
    sb_idmap_free(&s->part_ids);
    sb_strmap_free(&s->worker_ids);
    sb_idmap_free(&s->sink_ids);
    sb_strpool_free(&s->ids);
    free(s->failure);
    free(s->sink_schema);
    free(s->in_scratch);
    free(s->more_scratch);
    free(s->pick_scratch);
    free(s->pipeline_id);
    free(s);
}

size_t sb_sched_group_count(const sb_sched *s)
{
    return s->nops;
}

const char *const *sb_sched_pools(const sb_sched *s, size_t *n)
{
    *n = s->npools;
    return s->pools;
}

const char *sb_sched_group_pool(const sb_sched *s, uint32_t opi)
{
    return opi < s->nops ? s->ops[opi].pool : NULL;
}

static void static_bind(sb_sched *s, const char *pool);

int sb_sched_stage_move(sb_sched *s, size_t stage, const char *pool, sb_err *err)
{
    if (stage >= s->nstages)
        return sb_err_set(err, "scheduler: no stage %zu to move", stage);
    sb_stage_spec *st = &s->stages[stage];
    unsigned bit = pool == NULL               ? 0
                   : strcmp(pool, "cpu") == 0 ? SB_SHAPE_BIT_CPU
                   : strcmp(pool, "gpu") == 0 ? SB_SHAPE_BIT_GPU
                                              : 0;
    if (bit == 0)
        return sb_err_set(err, "scheduler: stage %s cannot move to pool '%s': not cpu or gpu",
                          st->name, pool ? pool : "(null)");
    if ((s->stage_shapes[stage] & bit) == 0)
        return sb_err_set(err, "scheduler: stage %s does not allow shape %s (its placement)",
                          st->name, pool);
    size_t i = 0;
    while (i + 1 < s->nops && s->ops[i + 1].first_stage <= stage)
        i++;
    op *o = &s->ops[i];
    if (o->nstages != 1)
        return sb_err_set(err,
                          "scheduler: stage %s runs fused with other stages as op %s: it "
                          "cannot move alone",
                          st->name, o->name);
    const char *to = bit == SB_SHAPE_BIT_GPU ? "gpu" : "cpu"; /* static: outlives the spec */
    if (strcmp(o->pool, to) == 0)
        return 0;
    /* its tasks run with the new shape's args (shapeArgs) */
    char *args = s->shape_args[stage][0] != NULL
                     ? strdup(s->shape_args[stage][bit == SB_SHAPE_BIT_GPU ? 1 : 0])
                     : NULL;
    if (s->shape_args[stage][0] != NULL && args == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    if (args != NULL) {
        free(st->args_json);
        st->args_json = args;
    }
    const char *from = o->pool;
    o->pool = to;
    ops_pool_later(s);
    int known = 0;
    for (size_t k = 0; k < s->npools; k++)
        known |= strcmp(s->pools[k], to) == 0;
    if (!known && s->npools < sizeof s->pools / sizeof s->pools[0])
        s->pools[s->npools++] = to;
    if (s->mode == SB_MODE_STATIC) { /* both pools' slots cover their ops again */
        static_bind(s, from);
        static_bind(s, to);
    }
    return 1;
}

/* ---- workers -------------------------------------------------------------------------------- */

static void static_bind(sb_sched *s, const char *pool);
static int static_full(const sb_sched *s, const worker *wk, size_t i);

static size_t worker_find(const sb_sched *s, const char *id)
{
    size_t w;
    return sb_strmap_get(&s->worker_ids, id, &w) ? w : NONE;
}

void sb_sched_worker_set_early(sb_sched *s, const char *id, int on)
{
    size_t w = worker_find(s, id ? id : "");
    if (w != NONE)
        s->workers[w].early = on != 0;
}

int sb_sched_worker_add(sb_sched *s, const char *id, const char *pool, const char *address,
                        uint32_t slots, const sb_storage_output *held, size_t nheld,
                        uint64_t now_ms, sb_err *err)
{
    if (id == NULL || *id == '\0' || pool == NULL || address == NULL || slots == 0)
        return sb_err_set(err, "scheduler: a worker needs an id, a pool, an address and slots");
    s->gen++; /* (the partitions it holds may be available again) */
    size_t w = worker_find(s, id);
    if (w != NONE && s->workers[w].alive)
        sb_sched_worker_lost(s, id, "it registered again: restarted",
                             now_ms); /* a restarted worker with the same id */
    if (w == NONE) {
        if (GROW(s, s->workers, s->capworkers, s->nworkers + 1) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        w = s->nworkers++;
        memset(&s->workers[w], 0, sizeof s->workers[w]);
        if (sb_strmap_put(&s->worker_ids, id, w) != 0)
            return sb_err_set(err, "scheduler: out of memory");
    }
    worker *wk = &s->workers[w];
    free(wk->id);
    free(wk->pool);
    free(wk->address);
    free(wk->op_slots);
    free(wk->op_running);
    free(wk->op_speed);
    free(wk->op_svc);
    wk->id = strdup(id);
    wk->pool = strdup(pool);
    wk->address = strdup(address);
    wk->op_slots = calloc(s->nops, sizeof *wk->op_slots);
    wk->op_running = calloc(s->nops, sizeof *wk->op_running);
    wk->op_speed = calloc(s->nops, sizeof *wk->op_speed);
    wk->op_svc = calloc(s->nops, sizeof *wk->op_svc);
    wk->last_end_ms = 0;
    if (!wk->id || !wk->pool || !wk->address || !wk->op_slots || !wk->op_running || !wk->op_speed ||
        !wk->op_svc)
        return sb_err_set(err, "scheduler: out of memory");
    wk->slots = slots;
    wk->running = 0;
    wk->nrun = 0;
    wk->alive = 1;
    wk->draining = 0; /* a new incarnation under the same id starts healthy */
    wk->suspect = 0;
    wk->slow_n = 0;
    static_bind(s, pool); /* the pool's slots changed: bind them again */
    for (size_t i = 0; i < nheld; i++) {
        size_t pi;
        if (!sb_idmap_get(&s->part_ids, held[i].id, &pi) || s->parts[pi].state == P_RELEASED ||
            s->parts[pi].state == P_AVAILABLE) {
            add_release(s, w, held[i].id); /* not needed (or held elsewhere) */
            continue;
        }
        part *p = &s->parts[pi]; /* lost, and this worker still has it */
        p->state = P_AVAILABLE;
        p->worker = w;
        s->partition_bytes += p->bytes;
    }
    s->last_progress_ms = now_ms;
    return 0;
}

/* Makes partition pi available again: re-queues its producer, and recursively the producers of
 * that task's inputs that are gone. */
static void recover_partition(sb_sched *s, size_t pi, int depth);
static void task_stop_running(sb_sched *s, task *t);
static void task_errored(sb_sched *s, size_t ti, uint32_t times, const char *message);

/* The worker's list of running tasks (worker.run): ti starts there, or ends (no-op when it is not
 * listed). Out of memory, a task goes unlisted: the list only feeds an estimate (eft_defer). */
static void run_add(sb_sched *s, size_t w, size_t ti)
{
    worker *wk = &s->workers[w];
    if (grow((void **)&wk->run, &wk->caprun, wk->nrun + 1, sizeof *wk->run) == 0)
        wk->run[wk->nrun++] = ti;
}

static void run_del(sb_sched *s, size_t w, size_t ti)
{
    worker *wk = &s->workers[w];
    for (size_t k = 0; k < wk->nrun; k++)
        if (wk->run[k] == ti) {
            wk->run[k] = wk->run[--wk->nrun];
            return;
        }
}

/* Worker w's attempt `attempt` of task t no longer counts while it may still run there (it lost
 * to a copy, or the task was handed out again): the worker is told to stop it
 * (sb_sched_take_cancels), which frees its slot and ends its work at once instead of when it is
 * done. A lost worker is told nothing (it is shut down). */
static void cancel_on(sb_sched *s, size_t w, const task *t, uint32_t attempt)
{
    if (w == NONE || !s->workers[w].alive)
        return;
    worker *wk = &s->workers[w];
    char name[TASK_NAME_MAX];
    if (GROW(s, wk->cancels, wk->capcancel, wk->ncancel + 1) != 0)
        return;
    sb_sched_cancel *c = &wk->cancels[wk->ncancel];
    c->task_id = strdup(task_name(s, t, name, sizeof name));
    if (c->task_id == NULL) {
        s->oom = 1;
        return;
    }
    c->attempt = attempt;
    wk->ncancel++;
    s->ops[t->op].cancelled++;
}

/* The task's speculative copy, if any, is told to stop (cancel_on) before it is dropped. */
static void cancel_copy(sb_sched *s, const task *t)
{
    if (t->copy != NO_COPY)
        cancel_on(s, s->copies[t->copy].worker, t, t->spec_attempt);
}

/* Abandons the task's speculative copy, if any: its slot and reserve are given back, and its
 * completion, when it comes, is stale (the worker drops what it made). */
static void drop_copy(sb_sched *s, task *t)
{
    if (t->copy == NO_COPY)
        return;
    copy_rec *c = &s->copies[t->copy];
    worker *w = &s->workers[c->worker];
    run_del(s, c->worker, (size_t)(t - s->tasks));
    w->running--;
    w->op_running[t->op]--;
    s->ops[t->op].running--;
    s->running_total--;
    s->reserved_bytes -= c->reserved;
    copy_forget(s, t);
}

/* The copy takes over from the primary attempt (which failed, or whose worker is gone, or
 * which the copy beat): the primary's slot and reserve are given back, the copy's worker and
 * attempt become the task's. */
static void promote_copy(sb_sched *s, task *t)
{
    worker *w = &s->workers[t->worker];
    run_del(s, t->worker, (size_t)(t - s->tasks));
    w->running--;
    w->op_running[t->op]--;
    s->ops[t->op].running--;
    s->running_total--;
    s->reserved_bytes -= t->reserved;
    if (!t->made && t->nout > 0) /* the primary published outputs early */
        t->early_stale = 1;
    set_waiting(s, t, 0); /* a copy publishes nothing early */
    t->grants = 0;
    t->chunked = 0;
    const copy_rec *c = &s->copies[t->copy];
    t->reserved = c->reserved;
    t->worker = c->worker;
    t->attempt = t->spec_attempt;
    t->batched = 0; /* a copy runs alone */
    t->started_ms = c->started_ms;
    copy_forget(s, t);
}

static void requeue_task(sb_sched *s, size_t ti, int rerun)
{
    task *t = &s->tasks[ti];
    if (t->state == T_QUEUED || t->state == T_SKIPPED)
        return;
    cancel_copy(s, t);
    drop_copy(s, t);
    if (!t->made && t->nout > 0) /* the attempt published outputs early */
        t->early_stale = 1;
    if (t->state == T_RUNNING) {
        cancel_on(s, t->worker, t, t->attempt); /* (one that just reported ignores it) */
        worker *w = &s->workers[t->worker];
        run_del(s, t->worker, ti);
        w->running--;
        if (w->op_running)
            w->op_running[t->op]--;
        s->ops[t->op].running--;
        s->running_total--;
        s->reserved_bytes -= t->reserved;
        t->reserved = 0;
        set_waiting(s, t, 0);
    } else if (t->state == T_DONE) {
        s->ops[t->op].done--;
        s->ops[t->op].recovered++;
    }
    t->worker = NONE;
    t->attempt = (t->spec_attempt > t->attempt ? t->spec_attempt : t->attempt) + 1;
    if (rerun)
        s->tasks_rerun++;
    queue_push(s, &s->ops[t->op], ti);
    const uint32_t *ins = task_inputs(t);
    for (size_t i = 0; i < t->ninputs; i++) {
        part *in = &s->parts[ins[i]];
        if (in->state != P_AVAILABLE)
            recover_partition(s, ins[i], 0);
    }
}

static void recover_partition(sb_sched *s, size_t pi, int depth)
{
    part *p = &s->parts[pi];
    if (p->state == P_AVAILABLE || depth > 1000)
        return;
    p->state = P_LOST; /* also when it was released: it is needed again */
    p->worker = NONE;
    task *prod = &s->tasks[p->producer];
    if (prod->state == T_DONE) {
        s->partitions_recovered++;
        requeue_task(s, p->producer, 1);
    }
}

void sb_sched_worker_lost(sb_sched *s, const char *id, const char *why, uint64_t now_ms)
{
    size_t w = worker_find(s, id);
    if (w == NONE || !s->workers[w].alive)
        return;
    s->gen++;
    worker *wk = &s->workers[w];
    wk->alive = 0;
    if (wk->draining)
        s->ndraining--;
    if (wk->suspect)
        s->nsuspect--;
    wk->suspect = 0;
    static_bind(s, wk->pool); /* its slots are gone: the others cover every op */
    for (size_t k = 0; k < wk->nrel; k++)
        free(wk->releases[k]);
    wk->nrel = 0;
    for (size_t k = 0; k < wk->ncancel; k++) /* it is shut down: nothing to stop there */
        free(wk->cancels[k].task_id);
    wk->ncancel = 0;
    /* 1. partitions that lived there (lost_here: which; NULL when out of memory) */
    unsigned char *lost_here = calloc(s->nparts + 1, 1);
    for (size_t pi = 0; pi < s->nparts; pi++) {
        part *p = &s->parts[pi];
        /* a consumer that reported it lost before this worker was found dead was right: that
         * report does not count towards lost_reports_max (a partition lost to several killed
         * workers is recovered every time, as before) */
        if (p->lost_from == w && p->lost_reports > 0) {
            p->lost_reports--;
            p->lost_from = NO_HOLDER;
        }
        if (p->worker != w || p->state != P_AVAILABLE)
            continue;
        if (lost_here != NULL)
            lost_here[pi] = 1;
        part_drop_bytes(s, p);
        p->state = P_LOST;
        p->worker = NONE;
        s->partitions_lost++;
    }
    /* 2. tasks running there go back to their queue. A worker dying under a task is a failed
     * attempt of that task and counts against maxTaskRetries: a task that kills its worker (a
     * plugin that crashes, a UDF the kernel kills for memory) would otherwise loop forever. */
    for (size_t ti = 0; ti < s->ntasks; ti++) {
        task *t = &s->tasks[ti];
        if (t->state == T_RUNNING && copy_worker(s, t) == w)
            drop_copy(s, t); /* the primary goes on */
        if (t->state != T_RUNNING || t->worker != w)
            continue;
        /* in a batch, which task killed it is not known: none is charged, and each runs alone
         * from now on, where a death counts */
        if (t->batched)
            t->solo = 1;
        else
            t->deaths++;
        s->ops[t->op].failed_attempts++;
        if (t->copy != NO_COPY && t->retries + t->deaths <= s->max_retries) {
            promote_copy(s, t); /* its copy is already running it elsewhere */
            s->tasks_rerun++;
            continue;
        }
        if (t->retries + t->deaths <= s->max_retries) {
            requeue_task(s, ti, 1);
            continue;
        }
        char msg[512];
        snprintf(msg, sizeof msg, "its worker was lost while running it (worker %.100s: %.200s)",
                 wk->id, why && *why ? why : "lost");
        if (t->first_error == NULL)
            t->first_error = strdup(msg);
        task_stop_running(s, t);
        task_errored(s, ti, t->retries + t->deaths, msg);
    }
    /* 3. lost partitions that are still needed get re-produced. A consumer running elsewhere
     * read (or is reading) its input from the lost worker: it goes back to its queue too (a new
     * attempt, so the old one's report is stale), because a worker declared lost is fenced — what
     * it serves after that (it may only be cut off, and come back) must not be used. Except a
     * consumer that writes the sink: two attempts must not both write its part file (as with
     * speculative copies); it keeps running, and reports the input lost if its fetch fails. */
    for (size_t pi = 0; pi < s->nparts; pi++) {
        part *p = &s->parts[pi];
        if (p->state != P_LOST)
            continue;
        size_t c = p->consumer;
        if (c == DEALT) /* taken by a consumer: see "Stream sink" */
            continue;
        if (c != NONE && s->tasks[c].state == T_RUNNING && lost_here != NULL && lost_here[pi] &&
            s->tasks[c].op != s->nops - 1)
            requeue_task(s, c, 1); /* also re-produces its inputs that are not available */
        else if (c == NONE || s->tasks[c].state == T_QUEUED || s->tasks[c].state == T_RUNNING)
            recover_partition(s, pi, 0);
    }
    free(lost_here);
    s->last_progress_ms = now_ms;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static int op_finished(const sb_sched *s, size_t i)
{
    for (size_t k = 0; k <= i; k++) {
        const op *o = &s->ops[k];
        if (o->qlen > 0 || o->running > 0 || o->flen > 0)
            return 0;
    }
    return 1;
}

static int inputs_available(const sb_sched *s, const task *t)
{
    const uint32_t *ins = task_inputs(t);
    for (size_t i = 0; i < t->ninputs; i++)
        if (s->parts[ins[i]].state != P_AVAILABLE)
            return 0;
    return 1;
}

static uint64_t estimate(const sb_sched *s, const op *o, uint64_t in_bytes, size_t opi)
{
    if (opi == s->nops - 1 && !s->stream)
        return 0; /* writes the sink: nothing stays in flight */
    double r = o->ratio > 0 ? o->ratio : 1.0;
    double e = r * (double)in_bytes;
    return e > 0 ? (uint64_t)e : 0;
}

/* Tail sizing (LB-BSP at the partition boundary). Once nothing more will come into op i
 * (everything upstream is done) and what waits is less than a full task per slot of its pool,
 * the task formed for worker w takes a share of the waiting bytes in proportion to w's measured
 * speed on the op (input bytes per ms, an EWMA over its successful tasks), so that every
 * worker's last task ends at about the same time instead of a slow worker taking a full-size
 * last task. Workers whose speed is not measured yet count at the mean of the others; with
 * fewer than two measured workers, or tail_sizing off, the target stands. */
static uint64_t task_target(const sb_sched *s, size_t i, size_t w)
{
    const op *o = &s->ops[i];
    if (s->tail_sizing_off || w == NONE || !op_finished(s, i - 1))
        return o->target;
    double sum = 0, known = 0;
    uint64_t slots = 0, nknown = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (!x->alive || strcmp(x->pool, o->pool) != 0)
            continue;
        slots += x->slots;
        if (x->op_speed[i] > 0) {
            known += x->op_speed[i] * x->slots;
            nknown += x->slots;
        }
    }
    if (nknown < 2 || o->fifo_bytes >= o->target * slots)
        return o->target;
    double mean = known / (double)nknown;
    sum = known + mean * (double)(slots - nknown);
    double mine = s->workers[w].op_speed[i] > 0 ? s->workers[w].op_speed[i] : mean;
    double share = (double)o->fifo_bytes * mine / sum;
    uint64_t cap = share < 1 ? 1 : (uint64_t)share;
    return cap < o->target ? cap : o->target;
}

/* Inputs per task: each is a PartitionRef in the task's message (a poll's batch of tasks must
 * fit one reply) that the task fetches one by one. 64, as always, for an op without a batchSize;
 * an op with one takes up to a batch of one-row partitions (an image source's), at most
 * TASK_INPUTS_MAX. */
#define TASK_INPUTS_MIN 64
#define TASK_INPUTS_MAX 4096

/* What pick_inputs chose: n FIFO positions in s->pick_scratch, the entries it looked at. */
typedef struct {
    size_t n, scanned;
    uint64_t bytes, rows;
} picked;

/* Picks op i's available input partitions for a task, in FIFO order, stepping over lost ones:
 * up to `target` bytes, and with a batchSize (o->batch_rows: tasks of whole batches, so that
 * only a task's last op call is short) at least that many rows whatever their bytes, ending at
 * the last whole batch when there is one. preserveOrder: one input per task. */
static picked pick_inputs(sb_sched *s, size_t i, uint64_t target)
{
    op *o = &s->ops[i];
    uint64_t batch = s->preserve_order ? 0 : o->batch_rows;
    size_t cap = batch <= TASK_INPUTS_MIN  ? TASK_INPUTS_MIN
                 : batch < TASK_INPUTS_MAX ? (size_t)batch
                                           : TASK_INPUTS_MAX;
    picked r = {0}, whole = {0};
    if (GROW(s, s->pick_scratch, s->pick_cap, cap) != 0)
        return r;
    size_t *pick = s->pick_scratch;
    for (; r.scanned < o->flen && r.n < cap; r.scanned++) {
        part *p = &s->parts[o->fifo[o->fhead + r.scanned]];
        if (p->state != P_AVAILABLE)
            continue;
        if (r.n > 0 && r.rows >= batch && r.bytes + p->bytes > target)
            break;
        pick[r.n++] = r.scanned;
        r.bytes += p->bytes;
        r.rows += p->rows;
        if (batch > 0 && r.rows >= batch && r.rows % batch == 0)
            whole = r, whole.scanned++;
        if ((r.bytes >= target && r.rows >= batch) || s->preserve_order) {
            r.scanned++;
            break;
        }
    }
    /* past the last whole batch: those rows wait for the next task (or end the last one) */
    return whole.n > 0 && whole.n < r.n ? whole : r;
}

/* Forms a new task for op i > 0 from its input FIFO for worker w (NONE: any), or returns NONE.
 * Takes available partitions in FIFO order (pick_inputs: up to the target size, task_target,
 * and whole batches), stepping over lost ones (they stay queued until their producer has
 * re-run), so a lost partition never blocks the ones behind it. While upstream still produces,
 * a task waits for more small partitions (force 0: until half the target; with a batchSize,
 * until a batch is full, at force 2 too while upstream_can_start); force 2 (nothing else runs)
 * forms it at once, and once upstream is done the remainder goes out. */
/* Does an op before i have a task that can start within the budget? Then nothing running is
 * only a moment between tasks (the workers that run it have not polled yet), not a stall: a
 * short batch of op i is not formed at force 2, since that task brings more rows. Only when
 * the budget holds no room for upstream work does a short batch go out to free memory. */
static int upstream_can_start(sb_sched *s, size_t i)
{
    uint64_t used = s->partition_bytes + s->reserved_bytes;
    for (size_t k = 0; k < i; k++) {
        op *o = &s->ops[k];
        if (o->qlen == 0)
            continue;
        const task *t = &s->tasks[o->queue[o->qhead]];
        if (used + estimate(s, o, t->in_bytes, k) <= s->budget)
            return 1;
    }
    return 0;
}

/* ---- exchange: the reduce half of an all-to-all stage (exchange.h) -------------------------- */

static uint64_t id_seq(const char *id);

/* Op i (a reduce half) may form its tasks: the map op and every op before it are finished (a
 * barrier: a bucket is complete only then) and no map output waits for its producer's re-run. */
static int exchange_ready(const sb_sched *s, size_t i)
{
    const op *o = &s->ops[i];
    if (!op_finished(s, i - 1))
        return 0;
    for (size_t k = 0; k < o->flen; k++)
        if (s->parts[o->fifo[o->fhead + k]].state != P_AVAILABLE)
            return 0;
    return 1;
}

typedef struct {
    uint64_t key; /* the producing map task's index */
    size_t pos;   /* the partition's position in the FIFO */
} xpick;

static int xpick_cmp(const void *a, const void *b)
{
    const xpick *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : (x->pos > y->pos) - (x->pos < y->pos);
}

/* ---- early reduces ----------------------------------------------------------------------------
 * A reduce task of an op that allows it (o->xopen: exchange.h, sb_exchange_early) may start
 * before the barrier, once every map task still to end is running and nothing else upstream
 * waits (early_room): a slot that would idle in the map op's tail then takes it with the map
 * outputs of its bucket made so far, and the task is open: its worker, having read them, asks
 * for the rest (sb_sched_more_inputs), which the task absorbs as their map tasks finish, and it
 * closes once the map op has finished and no output of its bucket waits. Only then may its ops
 * finish. Why only in the tail: an open task holds its slot while it waits, and with reduce
 * tasks started at the first map output (Hadoop's "slowstart" of 5%) the reduces fill the slots
 * the remaining map tasks need. Should map work wait for a slot again later (a map task re-run
 * after a lost worker), an open task of the same pool is handed back at its next ask (it is
 * queued again, its attempt stopped) and starts again only when there is room. Inputs are taken
 * in the order their map tasks finish (in map task order among those taken together), so only ops
 * whose output does not depend on that order start early. An open task is never copied
 * (speculation) nor batched. */

/* A map output op i's open task may take now: available, and its map task finished (an early
 * output of a running map task may be made again if that attempt fails). */
static int part_ready(const sb_sched *s, const part *p)
{
    return p->state == P_AVAILABLE && s->tasks[p->producer].state == T_DONE;
}

/* Op i's reduce tasks may start early: it allows it, and upstream only map tasks of op i - 1 are
 * left, all running (none queued, no input waiting for one, every op before finished). */
static int early_room(const sb_sched *s, size_t i)
{
    const op *o = &s->ops[i], *m = &s->ops[i - 1];
    if (!o->xopen || m->running == 0 || m->qlen > 0 || m->flen > 0)
        return 0;
    return i < 2 || op_finished(s, i - 2);
}

/* Whether op i's open task may be handed out now (early_room, or the barrier passed: the task
 * then closes as it starts). */
static int open_ready(const sb_sched *s, size_t i)
{
    return early_room(s, i) || exchange_ready(s, i);
}

/* Free slots of the live, not draining workers of a pool. */
static uint64_t pool_free(const sb_sched *s, const char *pool)
{
    uint64_t n = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (x->alive && !x->draining && strcmp(x->pool, pool) == 0 && x->slots > x->running)
            n += x->slots - x->running;
    }
    return n;
}

/* Work upstream of op i in its pool waits for a slot and none is free: its open tasks give
 * theirs back. */
static int upstream_starved(const sb_sched *s, size_t i)
{
    for (size_t k = 0; k < i; k++) {
        const op *o = &s->ops[k];
        if ((o->qlen > 0 || o->flen > 0) && strcmp(o->pool, s->ops[i].pool) == 0)
            return pool_free(s, o->pool) == 0;
    }
    return 0;
}

/* Appends op i's FIFO entries at pk[0..n) (in pk's order) to task ti's inputs. The caller
 * removes them from the FIFO (fifo_drop). -1 out of memory (nothing changed). */
static int task_take(sb_sched *s, size_t ti, const xpick *pk, size_t n)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    size_t have = t->ninputs, total = have + n;
    if (n == 0)
        return 0;
    if (total > 1) {
        uint32_t *many = malloc(total * sizeof *many);
        if (many == NULL)
            return -1;
        if (have > 0)
            memcpy(many, task_inputs(t), have * sizeof *many);
        if (have > 1)
            free(t->in.many);
        t->in.many = many;
    }
    uint32_t *ins = total > 1 ? t->in.many : &t->in.one;
    uint64_t bytes = 0;
    for (size_t k = 0; k < n; k++) {
        size_t pi = o->fifo[o->fhead + pk[k].pos];
        ins[have + k] = (uint32_t)pi;
        s->parts[pi].consumer = ti;
        bytes += s->parts[pi].bytes;
        t->in_rows += s->parts[pi].rows;
    }
    t->in_bytes += bytes;
    t->ninputs = (uint32_t)total;
    o->fifo_bytes -= bytes;
    if (t->state == T_RUNNING && have > 0 && !t->chunked) { /* its output grows with them */
        uint64_t e = estimate(s, o, bytes, t->op);
        t->reserved += e;
        s->reserved_bytes += e;
    }
    return 0;
}

/* Removes from op o's FIFO the entries a task took (their consumer set), the others kept in
 * order. */
static void fifo_drop(sb_sched *s, op *o)
{
    size_t kept = 0;
    for (size_t k = 0; k < o->flen; k++) {
        size_t pi = o->fifo[o->fhead + k];
        if (s->parts[pi].consumer == NONE)
            o->fifo[o->fhead + kept++] = pi;
    }
    o->flen = kept;
}

/* The bucket of reduce task t: its first input's sequence number (a map output p<b>). */
static uint64_t task_bucket(const sb_sched *s, const task *t)
{
    return id_seq(s->parts[task_inputs(t)[0]].id);
}

/* Open task ti's bucket may still get map outputs (it is in its op's xopens). */
static int absorbing(const sb_sched *s, size_t ti)
{
    const task *t = &s->tasks[ti];
    const op *o = &s->ops[t->op];
    return t->open && o->xbucket != NULL && o->xbucket[task_bucket(s, t)] == ti;
}

/* Every open task of op i takes the finished map outputs of its bucket, and closes when none can
 * come: one pass over the FIFO, and none while nothing changed since the last (s->gen: a report
 * accepted, a worker gone or come). Out of memory: s->oom. */
static void open_settle(sb_sched *s, size_t i)
{
    op *o = &s->ops[i];
    if (o->nxopens == 0 || o->xsettled == s->gen)
        return;
    xpick *pk = malloc((o->flen + 1) * sizeof *pk);
    uint32_t *left = calloc(o->xbuckets, sizeof *left); /* per bucket: outputs still to come */
    if (pk == NULL || left == NULL) {
        free(pk);
        free(left);
        s->oom = 1;
        return;
    }
    size_t n = 0;
    for (size_t k = 0; k < o->flen; k++) {
        const part *p = &s->parts[o->fifo[o->fhead + k]];
        uint64_t b = id_seq(p->id);
        if (b >= o->xbuckets || o->xbucket[b] == NO_TASK)
            continue;
        if (part_ready(s, p)) /* key: its task, then its map task's index */
            pk[n++] = (xpick){((uint64_t)o->xbucket[b] << 32) | s->tasks[p->producer].index, k};
        else
            left[b]++;
    }
    qsort(pk, n, sizeof *pk, xpick_cmp);
    for (size_t a = 0, z; a < n; a = z) {
        for (z = a; z < n && pk[z].key >> 32 == pk[a].key >> 32; z++)
            ;
        if (task_take(s, (size_t)(pk[a].key >> 32), pk + a, z - a) != 0)
            s->oom = 1;
    }
    fifo_drop(s, o);
    int closing = op_finished(s, i - 1);
    for (size_t k = o->nxopens; k-- > 0;) { /* (each task is told at its next ask) */
        uint64_t b = task_bucket(s, &s->tasks[o->xopens[k]]);
        if (!closing || left[b] > 0)
            continue;
        o->xbucket[b] = NO_TASK;
        o->xopens[k] = o->xopens[--o->nxopens];
    }
    o->xsettled = s->gen;
    free(pk);
    free(left);
}

/* The task of the lowest bucket still waiting: every map output of that bucket (a map task's
 * output p<b> is bucket b), in map task order, so a reduce task reads the same rows in the same
 * order on every run of the same map tasks. NONE before the barrier or when none waits. Before
 * the barrier, where early_room allows, an open task instead: the bucket's finished map outputs
 * so far ("Early reduces"). A bucket with an open task gets no other. */
static size_t exchange_form(sb_sched *s, size_t i)
{
    op *o = &s->ops[i];
    open_settle(s, i);
    if (o->flen == 0)
        return NONE;
    int early = !exchange_ready(s, i);
    if (early && !early_room(s, i))
        return NONE;
    uint64_t b = UINT64_MAX;
    for (size_t k = 0; k < o->flen; k++) {
        const part *p = &s->parts[o->fifo[o->fhead + k]];
        uint64_t seq = id_seq(p->id);
        if (seq >= o->xbuckets) {
            set_failure(s, "exchange stage %s: map output %s is not one of its %" PRIu32 " buckets",
                        o->name, p->id, o->xbuckets);
            return NONE;
        }
        if (seq < b && (!early || part_ready(s, p)) &&
            (o->xbucket == NULL || o->xbucket[seq] == NO_TASK))
            b = seq;
    }
    if (b == UINT64_MAX)
        return NONE; /* (early: no map task finished yet) */
    if (early && o->xbucket == NULL) {
        if ((o->xbucket = malloc(o->xbuckets * sizeof *o->xbucket)) == NULL) {
            s->oom = 1;
            return NONE;
        }
        for (uint32_t k = 0; k < o->xbuckets; k++)
            o->xbucket[k] = NO_TASK;
    }
    xpick *pk = malloc(o->flen * sizeof *pk);
    size_t ti = pk != NULL ? task_new(s, (uint32_t)i, o->next_index) : NONE;
    if (ti == NONE || (early && GROW(s, o->xopens, o->capxopens, o->nxopens + 1) != 0)) {
        free(pk);
        s->oom = 1;
        return NONE;
    }
    o->next_index++;
    size_t n = 0;
    for (size_t k = 0; k < o->flen; k++) {
        const part *p = &s->parts[o->fifo[o->fhead + k]];
        if (id_seq(p->id) == b && (!early || part_ready(s, p)))
            pk[n++] = (xpick){s->tasks[p->producer].index, k};
    }
    qsort(pk, n, sizeof *pk, xpick_cmp);
    int rc = task_take(s, ti, pk, n);
    free(pk);
    if (rc != 0) {
        s->oom = 1;
        return NONE;
    }
    fifo_drop(s, o);
    if (early) {
        s->tasks[ti].open = 1;
        o->xopens[o->nxopens++] = (uint32_t)ti;
        o->xbucket[b] = (uint32_t)ti;
        o->xsettled = s->gen - 1; /* its bucket's other outputs: taken at the next settle */
        s->early_reduces++;
    }
    queue_push(s, o, ti);
    return ti;
}

static size_t form_task(sb_sched *s, size_t i, int force, size_t w)
{
    op *o = &s->ops[i];
    if (o->xreduce)
        return exchange_form(s, i);
    if (o->flen == 0)
        return NONE;
    picked pk = pick_inputs(s, i, task_target(s, i, w));
    size_t n = pk.n, scanned = pk.scanned, *pick = s->pick_scratch;
    uint64_t sum = pk.bytes;
    if (n == 0)
        return NONE;
    int more = scanned == o->flen && !s->preserve_order && !op_finished(s, i - 1);
    uint64_t batch = o->batch_rows;
    if (more && batch > 0 && pk.rows < batch && (force < 2 || upstream_can_start(s, i)))
        return NONE;
    if (more && !force && (batch == 0 || pk.rows < batch) && sum < o->target / 2)
        return NONE;
    size_t ti = task_new(s, (uint32_t)i, o->next_index);
    if (ti == NONE)
        return NONE;
    o->next_index++;
    task *t = &s->tasks[ti];
    uint32_t *ins = &t->in.one;
    if (n > 1 && (ins = t->in.many = malloc(n * sizeof *ins)) == NULL) {
        s->oom = 1;
        return NONE;
    }
    for (size_t k = 0; k < n; k++) {
        size_t pi = o->fifo[o->fhead + pick[k]];
        ins[k] = (uint32_t)pi;
        s->parts[pi].consumer = ti;
        t->in_bytes += s->parts[pi].bytes;
        t->in_rows += s->parts[pi].rows;
    }
    t->ninputs = (uint32_t)n;
    /* remove the picked entries, keeping the skipped (lost) ones in order at the front */
    size_t kept = 0;
    for (size_t k = 0, q = 0; k < scanned; k++) {
        if (q < n && pick[q] == k) {
            q++;
            continue;
        }
        o->fifo[o->fhead + kept++] = o->fifo[o->fhead + k];
    }
    memmove(o->fifo + o->fhead + kept, o->fifo + o->fhead + scanned,
            (o->flen - scanned) * sizeof *o->fifo);
    o->flen -= n;
    o->fifo_bytes -= sum;
    queue_push(s, o, ti);
    return ti;
}

/* Queued task ti may run now: its inputs are there, a stream lets it in, and an open one has
 * its room ("Early reduces"). */
static int task_ready(const sb_sched *s, size_t ti)
{
    const task *t = &s->tasks[ti];
    return inputs_available(s, t) && !stream_gated(s, ti) &&
           (!absorbing(s, ti) || open_ready(s, t->op));
}

/* The first runnable queued task of op i (removed from the queue), or NONE. */
static size_t pop_ready(sb_sched *s, size_t i)
{
    op *o = &s->ops[i];
    if (i == 0)
        stream_advance(s);
    for (size_t k = 0; k < o->qlen; k++) {
        size_t ti = o->queue[o->qhead + k];
        if (!task_ready(s, ti))
            continue;
        /* close the gap from the head side: O(k), and k is 0 unless inputs were lost */
        memmove(o->queue + o->qhead + 1, o->queue + o->qhead, k * sizeof *o->queue);
        o->qhead++;
        o->qlen--;
        s->tasks[ti].queued = 0;
        return ti;
    }
    return NONE;
}

static size_t peek_ready(sb_sched *s, size_t i, uint64_t *in_bytes)
{
    op *o = &s->ops[i];
    if (i == 0)
        stream_advance(s);
    for (size_t k = 0; k < o->qlen; k++) {
        size_t ti = o->queue[o->qhead + k];
        if (task_ready(s, ti)) {
            *in_bytes = s->tasks[ti].in_bytes;
            return ti;
        }
    }
    return NONE;
}

static int op_eligible(sb_sched *s, const worker *wk, size_t i)
{
    const op *o = &s->ops[i];
    if (strcmp(o->pool, wk->pool) != 0)
        return 0;
    if (s->mode == SB_MODE_STAGED && i > 0 && !op_finished(s, i - 1))
        return 0;
    if (s->mode == SB_MODE_STATIC && static_full(s, wk, i))
        return 0;
    if (o->ratio == 0 && wk->op_running[i] > 0 && i + 1 < s->nops && s->mode == SB_MODE_STREAMING)
        return 0; /* ratio unknown: one probe per worker until measured */
    return 1;
}

/* Whether task t's running attempt may publish outputs early (sb_sched_publish): a first run of
 * an op that feeds another, where an errored task's published rows cannot reach the sink (no
 * maxErroredPartitions: the run fails) and the sink does not keep input order. */
static int early_safe(const sb_sched *s, const task *t)
{
    return !s->early_off && !t->made && t->op + 1 < s->nops && s->max_errored == 0 &&
           !s->preserve_order;
}

/* Early outputs. A task expected to write two or more partitions of at least EARLY_MIN_BYTES
 * publishes each as it is made (fill_task_view: publish_early). Where no later op runs in its
 * pool, it is also charged one output partition at a time instead of its whole estimated output
 * (the op's largest partition so far; its whole estimate while none was made): it starts when
 * that fits, and with each output it publishes it asks for the next (sb_sched_publish: *wait),
 * making nothing until it gets it. So with a budget of a few partitions an expanding op's next
 * task starts while the one before still runs. A waiting task keeps its slot, which a later op
 * of the same pool may need to drain the budget: there it is charged its whole estimate as
 * before (a chain cpu -> gpu -> cpu ran 1.1-1.2x longer in the simulation with grants there).
 * When every running attempt waits, the most downstream one gets its grant past the budget (the
 * assign loop's pass 1 likewise treats waiting attempts as not running). Not in staged mode:
 * the next op starts only when this one has finished and the budget is not enforced, so a
 * grant would only hold the task back (microbenchmark at 4 MiB: 1.62x -> 2.11x). */
static int early_wanted(const sb_sched *s, const task *t, uint64_t est, size_t w)
{
    const op *o = &s->ops[t->op];
    return s->workers[w].early && early_safe(s, t) && s->mode != SB_MODE_STAGED &&
           o->target >= EARLY_MIN_BYTES && est >= 2 * o->target;
}

/* Whether task t (early_wanted) is charged one output at a time (see above). */
static int chunk_wanted(const sb_sched *s, const task *t, uint64_t est)
{
    const op *o = &s->ops[t->op];
    return o->max_part != 0 && o->max_part < est && !o->pool_later;
}

/* The reserve task t starts with on worker w: its estimate, or one grant (see above); *grants
 * and *chunked (either may be NULL) say whether it publishes early and is charged one output at
 * a time. The assign loop asks before choosing a task, start_task when it starts one. */
static uint64_t start_reserve(const sb_sched *s, const task *t, uint64_t est, size_t w, int *grants,
                              int *chunked)
{
    int g = early_wanted(s, t, est, w), c = g && chunk_wanted(s, t, est);
    if (grants != NULL)
        *grants = g;
    if (chunked != NULL)
        *chunked = c;
    return c ? s->ops[t->op].max_part : est;
}

/* Whether waiting task ti gets its grant past the budget: every running attempt waits and none
 * of them is of a later op. */
static int grant_forced(const sb_sched *s, size_t ti)
{
    if (s->running_total > s->waiting_total + !s->tasks[ti].waiting || stream_holds(s))
        return 0;
    for (size_t w = 0; w < s->nworkers; w++)
        for (size_t k = 0; k < s->workers[w].nrun; k++) {
            const task *x = &s->tasks[s->workers[w].run[k]];
            if (x->waiting && x->op > s->tasks[ti].op)
                return 0;
        }
    return 1;
}

static void start_task(sb_sched *s, size_t ti, size_t w, uint64_t now_ms)
{
    s->stream_starved = 0; /* one task for a starved stream is enough: it brings new rows */
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    worker *wk = &s->workers[w];
    if (t->open) { /* what came since it was formed or handed back; all, when all came */
        open_settle(s, t->op);
        t->open = (uint8_t)absorbing(s, ti);
    }
    t->state = T_RUNNING;
    t->worker = w;
    t->started_ms = now_ms;
    uint64_t est = estimate(s, o, t->in_bytes, t->op);
    int grants, chunked;
    t->reserved = start_reserve(s, t, est, w, &grants, &chunked);
    t->grants = (uint8_t)grants;
    t->chunked = (uint8_t)chunked;
    t->pub_bytes = 0;
    set_waiting(s, t, 0);
    s->reserved_bytes += t->reserved;
    run_add(s, w, ti);
    wk->running++;
    wk->op_running[t->op]++;
    o->running++;
    o->attempts++;
    if (o->held) { /* the budget let it run: the spell of backpressure ends */
        o->backpressure_ms += now_ms > o->held_since_ms ? now_ms - o->held_since_ms : 0;
        o->held = 0;
    }
    s->running_total++;
    s->tasks_run++;
    s->last_progress_ms = now_ms;
    if (s->infer_schema && s->sink_schema == NULL && t->op == s->nops - 1 &&
        (s->infer_ti == NONE || s->tasks[s->infer_ti].state != T_RUNNING))
        s->infer_ti = ti; /* it infers the records schema; sink_gated holds the others */
}

/* Whether the sink op's tasks wait: the run infers a records schema and a sink task is inferring
 * it now. Every part must be written by one schema, so the others start once it is reported
 * (sb_sched_sink_schema_set); if that task ends without one (failed, lost, no output), the next
 * sink task to start infers it instead. */
static int sink_gated(const sb_sched *s, size_t k)
{
    return k == s->nops - 1 && s->infer_schema && s->sink_schema == NULL && s->infer_ti != NONE &&
           s->tasks[s->infer_ti].state == T_RUNNING;
}

static void fill_task_view(sb_sched *s, size_t ti, int copy, sb_sched_task *out,
                           size_t *scratch_used, size_t *names_used)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    out->task_id =
        task_name(s, t, s->names + *names_used, strlen(s->pipeline_id) + TASK_NAME_SUFFIX);
    *names_used += strlen(out->task_id) + 1;
    out->op = t->op;
    out->index = t->index;
    out->attempt = copy ? t->spec_attempt : t->attempt;
    out->stages = o->sp;
    out->nstages = o->nstages + o->pushed;
    out->split = t->op == 0 ? s->splits[t->index] : NULL;
    out->writes_sink = t->op == s->nops - 1 && !s->stream;
    out->sink_schema = out->writes_sink ? s->sink_schema : NULL;
    out->infer_sink_schema = out->writes_sink && s->sink_schema == NULL && ti == s->infer_ti;
    out->target_bytes = o->target;
    /* early outputs (start_task, early_wanted): not for a speculative copy */
    out->publish_early = !copy && t->grants;
    out->inputs_open = t->open;
    out->ninputs = t->ninputs;
    out->inputs = NULL;
    if (t->ninputs > 0) {
        sb_sched_input *in = s->in_scratch + *scratch_used;
        const uint32_t *ins = task_inputs(t);
        for (size_t k = 0; k < t->ninputs; k++) {
            part *p = &s->parts[ins[k]];
            in[k].id = p->id;
            in[k].bytes = p->bytes;
            in[k].worker_id = s->workers[p->worker].id;
            in[k].address = s->workers[p->worker].address;
        }
        out->inputs = in;
        *scratch_used += t->ninputs;
    }
}

/* The most downstream op after the first that can run now — a queued task whose inputs are
 * all there, or an available partition waiting for a task — or 0 if none: then that work goes
 * first (it consumes partitions), and with nothing running only it is forced past the budget
 * (sb_sched_assign, pass 1). Work whose inputs are lost does not count: their producers must be
 * allowed to re-run (also past a full budget), or the pipeline would wait forever. Work for a
 * pool without a worker does count: admitting more input would only grow memory (the watchdog
 * reports the missing worker). */
static size_t downstream_work(const sb_sched *s)
{
    for (size_t i = s->nops; i-- > 1;) {
        const op *o = &s->ops[i];
        /* its map outputs wait for the barrier (again, after a loss in the reduce phase): no
         * task forms from them, the map op must go on */
        int barrier = o->xreduce && !exchange_ready(s, i);
        if (barrier && o->qlen == 0)
            continue;
        for (size_t k = 0; k < o->qlen; k++) {
            const task *t = &s->tasks[o->queue[o->qhead + k]];
            if (inputs_available(s, t) &&
                (!absorbing(s, (size_t)(t - s->tasks)) || open_ready(s, i)))
                return i;
        }
        if (barrier)
            continue;
        for (size_t k = 0; k < o->flen; k++)
            if (s->parts[o->fifo[o->fhead + k]].state == P_AVAILABLE)
                return i;
    }
    return 0;
}

/* Draining sick workers. A worker persistently far slower than the rest of its pool — a sick
 * node: throttled, stolen CPU, a failing disk — is drained: it gets no new task (unless it is
 * the last of its pool that is not draining), its running tasks finish or are copied (see
 * "Speculative copies"), and once it holds nothing still needed (sb_sched_worker_removable) the
 * controller retires it and the backend starts a replacement. The rule, checked at each of its
 * successful tasks: the task's speed (input bytes per ms, by the scheduler's clock) is below
 * 1/DRAIN_SLOWER of the median speed of the other live, non-draining workers of its pool on that
 * op (their EWMAs); DRAIN_MIN_TASKS such tasks in a row (a task at normal speed resets the run)
 * spanning at least DRAIN_MIN_MS; the pool has at least two workers that are not draining; and
 * the op has work left for a full round of the pool's slots (queued tasks, waiting input, or an
 * upstream still producing) — in the tail, tail sizing and copies do better than a new worker
 * that first has to start. A cheap pre-filter (the task slower than half the op's mean speed)
 * keeps the O(workers) median off the path of healthy completions. */
#define DRAIN_SLOWER 3
#define DRAIN_MIN_TASKS 3
#define DRAIN_MIN_MS 3000

/* Live workers of the pool that are not draining. */
static size_t pool_healthy(const sb_sched *s, const char *pool)
{
    size_t n = 0;
    for (size_t k = 0; k < s->nworkers; k++)
        n +=
            s->workers[k].alive && !s->workers[k].draining && strcmp(s->workers[k].pool, pool) == 0;
    return n;
}

/* Static mode. Every slot of a pool is bound to one slot group of the pool's ops, and a task of
 * an op starts only in a free slot of its group: the fixed stage-to-slot placement of a classic
 * stream system. With S slots for the pool's n ops there are G = min(S, n) groups: the pool's
 * p-th op is in group p mod G, and its j-th slot (live workers in index order, slot by slot;
 * drained workers left out while the pool has a healthy one) is bound to group j mod G. So with
 * S >= n every op has slots of its own (S/n each, the first S mod n ops one more), and with
 * S < n ops share slots round robin (op p with ops p+G, p+2G, ...; downstream first, as
 * always), so no op is left without a slot while its pool has one. The binding is computed
 * again whenever the pool's slots change — a worker joins (a respawned or replacement worker
 * has a new index), is lost, or is drained — and tasks already running keep their slot until
 * they end. */
static void static_bind(sb_sched *s, const char *pool)
{
    if (s->mode != SB_MODE_STATIC)
        return;
    uint32_t n = 0;
    for (size_t i = 0; i < s->nops; i++)
        if (strcmp(s->ops[i].pool, pool) == 0)
            s->ops[i].group = n++; /* its index in the pool, for now */
    int healthy = pool_healthy(s, pool) > 0;
    uint64_t nslots = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (x->alive && (!healthy || !x->draining) && strcmp(x->pool, pool) == 0)
            nslots += x->slots;
    }
    uint32_t groups = nslots < n ? (uint32_t)nslots : n;
    for (size_t i = 0; i < s->nops; i++)
        if (strcmp(s->ops[i].pool, pool) == 0)
            s->ops[i].group = groups > 0 ? s->ops[i].group % groups : 0;
    uint64_t j = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        worker *x = &s->workers[k];
        if (x->pool == NULL || x->op_slots == NULL || strcmp(x->pool, pool) != 0)
            continue; /* (an entry whose registration ran out of memory) */
        for (size_t i = 0; i < s->nops; i++)
            if (strcmp(s->ops[i].pool, pool) == 0)
                x->op_slots[i] = 0;
        if (!x->alive || (healthy && x->draining) || groups == 0)
            continue;
        for (uint32_t q = 0; q < x->slots; q++, j++)
            for (size_t i = 0; i < s->nops; i++)
                if (strcmp(s->ops[i].pool, pool) == 0 && s->ops[i].group == j % groups)
                    x->op_slots[i]++;
    }
}

/* Static mode: whether the worker's slots bound to op i's group are all taken (by tasks of any
 * op of the group). */
static int static_full(const sb_sched *s, const worker *wk, size_t i)
{
    uint32_t busy = 0;
    for (size_t k = 0; k < s->nops; k++)
        if (s->ops[k].group == s->ops[i].group && strcmp(s->ops[k].pool, s->ops[i].pool) == 0)
            busy += wk->op_running[k];
    return busy >= wk->op_slots[i];
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void drain_check(sb_sched *s, size_t w, size_t i, double v, uint64_t started_ms,
                        uint64_t now_ms)
{
    worker *wk = &s->workers[w];
    op *o = &s->ops[i];
    double avg = o->speed_avg;
    o->speed_avg = avg > 0 ? 0.9 * avg + 0.1 * v : v;
    if (s->drain_off || wk->draining || !wk->alive)
        return;
    if (avg <= 0 || v * 2 >= avg) { /* not far slower than the op's mean: healthy */
        wk->slow_n = 0;
        return;
    }
    double *sp = malloc((s->nworkers + 1) * sizeof *sp);
    if (sp == NULL)
        return;
    size_t n = 0, healthy = 0;
    uint64_t slots = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (!x->alive || x->draining || strcmp(x->pool, wk->pool) != 0)
            continue;
        healthy++;
        slots += x->slots;
        if (k != w && x->op_speed[i] > 0)
            sp[n++] = x->op_speed[i];
    }
    double median = 0;
    if (n > 0) {
        qsort(sp, n, sizeof *sp, cmp_double);
        median = n % 2 ? sp[n / 2] : (sp[n / 2 - 1] + sp[n / 2]) / 2;
    }
    free(sp);
    if (n == 0)
        return; /* nothing to compare with yet */
    if (v * DRAIN_SLOWER >= median) {
        wk->slow_n = 0;
        return;
    }
    if (wk->slow_n++ == 0)
        wk->slow_since_ms = started_ms;
    if (wk->slow_n < DRAIN_MIN_TASKS || now_ms < wk->slow_since_ms + DRAIN_MIN_MS || healthy < 2)
        return;
    uint64_t left = o->qlen + (o->target ? (o->fifo_bytes + o->target - 1) / o->target : o->flen);
    if (i > 0 && !op_finished(s, i - 1))
        left += slots; /* upstream still producing */
    if (left < slots)
        return;
    if (GROW(s, s->drain_notes, s->capdrain_notes, s->ndrain_notes + 1) != 0)
        return;
    s->drain_notes[s->ndrain_notes++] = w;
    wk->draining = 1;
    s->ndraining++;
    static_bind(s, wk->pool); /* it takes no new task: the healthy workers cover every op */
    wk->drain_op = (uint32_t)i;
    wk->drain_speed = v * 1000.0;
    wk->drain_median = median * 1000.0;
    s->workers_drained++;
}

/* Speculative copies. A worker of the pool that asks for work and gets none may run a copy
 * of the op's slowest running task when the op is in its tail (nothing queued or waiting for
 * it, everything upstream done), at least SPEC_MIN_DONE of its tasks succeeded, and that task
 * has run SPEC_FACTOR times their mean duration and at least SPEC_MIN_MS — or sooner, as soon as
 * what the task has left is more than SPEC_GAIN times what the whole task would take at the
 * asking worker's speed (a task on a worker 4 times slower is copied at once). What it has left
 * (spec_left): at its worker's measured speed on the op (the EWMAs of tail sizing), or, when its
 * worker has finished none of the op's tasks, at the op's mean speed over every worker; a task
 * already late by d at that speed is expected to take d more (the rule of eft_defer), so a slow
 * attempt is judged whether or not its worker ever finished a task. Outside the tail, the tasks
 * of a drained (sick) worker are copied after SPEC_MIN_MS and those of a suspect (silent) worker
 * at once. The copy runs on another worker, with the task's inputs still there; the task with the
 * most to gain goes first. The copy gets an attempt number of its own; the first attempt to
 * finish is the task's result, the other one's completion is stale and its outputs are released.
 * Ops that write the sink are copied too: workers write sink parts under the attempt's staged
 * name and publish them only once their report is accepted (lib/io/sink.h), so the loser's parts
 * are never visible and the manifest lists one part per id. One copy per task; a copy counts
 * against the memory budget like a task. */
#define SPEC_FACTOR 2
#define SPEC_MIN_DONE 3
#define SPEC_MIN_MS 1000
#define SPEC_SCAN_MS 100
#define SPEC_GAIN 1.5

/* Whether a worker of the pool other than w is draining or suspect (its tasks may be copied any
 * time). */
static int pool_draining(const sb_sched *s, const char *pool, size_t w)
{
    for (size_t k = 0; k < s->nworkers; k++)
        if (k != w && s->workers[k].alive && (s->workers[k].draining || s->workers[k].suspect) &&
            strcmp(s->workers[k].pool, pool) == 0)
            return 1;
    return 0;
}

/* What task t (of op k, on worker x) has left, in ms, after running `ran` ms: at x's measured
 * speed on the op, else at the op's mean speed; a task late by d is expected to take d more,
 * judged from SPEC_MIN_MS on (short tasks are not copied on a guess). Negative when there is
 * nothing to judge by. */
static double spec_left(const op *o, const worker *x, const task *t, size_t k, double ran)
{
    double v = x->op_speed[k] > 0 ? x->op_speed[k] : o->speed_avg;
    if (v <= 0 || t->in_bytes == 0)
        return -1;
    double whole = (double)t->in_bytes / v;
    if (whole > ran)
        return x->op_speed[k] > 0 ? whole - ran : -1; /* not late at the op's speed */
    return ran >= SPEC_MIN_MS ? ran - whole : -1;
}

static size_t spec_candidate(sb_sched *s, size_t w, uint64_t now_ms)
{
    const worker *wk = &s->workers[w];
    size_t best = NONE;
    double best_gain = 0;
    if (s->spec_off)
        return NONE;
    int drains = -1; /* computed once, when an op is not in its tail */
    for (size_t k = 0; k < s->nops; k++) {
        op *o = &s->ops[k];
        if (strcmp(o->pool, wk->pool) != 0 || o->running == 0 ||
            (s->mode == SB_MODE_STATIC && static_full(s, wk, k)))
            continue;
        /* outside the tail only the tasks of a drained (sick) worker are copied */
        int tail = o->qlen == 0 && o->flen == 0 && o->ok_n >= SPEC_MIN_DONE &&
                   (k == 0 || op_finished(s, k - 1));
        if (!tail && drains < 0) /* O(workers): only while some worker drains */
            drains = s->ndraining + s->nsuspect > 0 && pool_draining(s, wk->pool, w);
        if (!tail && !drains)
            continue;
        /* the scan is over every task: at most one per op every SPEC_SCAN_MS, however many
         * workers are idle */
        if (o->spec_scanned && now_ms < o->spec_scan_ms + SPEC_SCAN_MS)
            continue;
        o->spec_scanned = 1;
        o->spec_scan_ms = now_ms;
        uint64_t mean = o->ok_n > 0 ? o->ok_ms_sum / o->ok_n : 0;
        uint64_t bar = mean * SPEC_FACTOR > SPEC_MIN_MS ? mean * SPEC_FACTOR : SPEC_MIN_MS;
        for (size_t ti = 0; ti < s->ntasks; ti++) {
            const task *t = &s->tasks[ti];
            if (t->op != k || t->state != T_RUNNING || t->copy != NO_COPY || t->worker == w ||
                t->open || !inputs_available(s, t))
                continue;
            const worker *x = &s->workers[t->worker];
            int sick = x->draining || x->suspect;
            if (!tail && !sick)
                continue;
            double ran = now_ms > t->started_ms ? (double)(now_ms - t->started_ms) : 0;
            /* ms past the bar; a suspect worker's tasks have none */
            double gain = ran - (x->suspect ? 0 : (double)(sick ? SPEC_MIN_MS : bar));
            double left = spec_left(o, x, t, k, ran);
            if (left >= 0 && wk->op_speed[k] > 0) {
                double mine = (double)t->in_bytes / wk->op_speed[k];
                if (left > SPEC_GAIN * mine && left - mine > gain)
                    gain = left - mine; /* a copy here ends that much sooner */
            }
            if (gain < 0)
                continue;
            if (best == NONE || gain > best_gain) {
                best = ti;
                best_gain = gain;
            }
        }
    }
    return best;
}

/* Starts a copy of task ti on worker w if the budget has room (see above); 1 if it did. */
static int start_copy(sb_sched *s, size_t ti, size_t w, uint64_t now_ms)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    uint64_t est = estimate(s, o, t->in_bytes, t->op);
    if (est > 0 && s->partition_bytes + s->reserved_bytes + est > s->budget)
        return 0;
    worker *wk = &s->workers[w];
    if (GROW(s, s->copies, s->capcopies, s->ncopies + 1) != 0)
        return 0;
    s->copies[s->ncopies] =
        (copy_rec){.task = ti, .worker = w, .reserved = est, .started_ms = now_ms};
    t->copy = (uint32_t)s->ncopies++;
    /* past every earlier copy's number too: a dropped copy (it failed, or its worker was lost)
     * may still be winding down on its worker, and its staged sink parts and cancel are named
     * by its attempt number */
    t->spec_attempt = (t->spec_attempt > t->attempt ? t->spec_attempt : t->attempt) + 1;
    s->reserved_bytes += est;
    run_add(s, w, ti);
    wk->running++;
    wk->op_running[t->op]++;
    o->running++;
    o->attempts++;
    o->speculated++;
    s->running_total++;
    s->tasks_run++;
    return 1;
}

/* Earliest finish at the tail (LB-BSP / earliest-finish-time list scheduling). Once nothing more
 * will come into op i (everything upstream done), worker w does not take task ti when the other
 * workers of its pool would finish all of the op's waiting work, ti included, clearly sooner than
 * w would finish ti: then ti waits for one of them. Tail sizing cannot help when a task is one
 * partition (partitions are the unit of lineage and are not cut), and a copy helps only once the
 * slow attempt has started; this keeps a slow worker from taking a coarse last task at all.
 *
 * The model of a worker: a gpu-pool worker's slots share one accelerator (both backends give it
 * 2 slots and 1 accelerator), so it is one server: its tasks run one after the other at its
 * accelerator speed (op_svc), and its running tasks' remaining time adds up before a new one;
 * a cpu-pool worker's slots run at once, each at its per-slot speed (op_speed, wall time), free
 * now or when its running task is expected to end. A running task already late by d is expected
 * to take d more (a worker that stopped answering soon counts as slow). w's time for ti is when
 * its server or slot would end it; the others' time is that of dealing the op's queued tasks and
 * waiting input (in target-size pieces), in queue order, to whichever of their servers or slots
 * is free first. w defers when its time exceeds EFT_SLACK times the others' (the slack keeps
 * workers of about equal speed from deferring to each other).
 *
 * Only the other live, non-draining workers of the pool measured on the op count. Never when w
 * is not measured on the op, when no other worker is (a pool of one worker, the others lost or
 * draining: w works as before), in sb_sched_assign's forced pass (nothing runs anywhere), in
 * static mode, or with no_eft; nor while more than EFT_MAX tasks wait (not the tail yet) or the
 * others have more than EFT_MAX servers or slots. A cheap bound first (the waiting bytes over the
 * others' summed speed: no more than their time) settles most calls; the deal (O(waiting tasks x
 * servers)) is done only when w is far slower. */
#define EFT_SLACK 1.25
#define EFT_MAX 256

static int eft_shared(const worker *x)
{
    return strcmp(x->pool, "gpu") == 0;
}

/* ms from now until ms (a time already past by d: d, see above) */
static double eft_after(double ms, uint64_t now_ms)
{
    double d = ms - (double)now_ms;
    return d < 0 ? -d : d;
}

/* Worker k's servers (1 when its slots share an accelerator, else its slots) on op i: when each
 * is free (ms from now) and its speed (bytes per ms), up to max; returns how many, 0 when k is
 * not measured on op i. */
static size_t eft_servers(const sb_sched *s, size_t k, size_t i, uint64_t now_ms, double *free_at,
                          double *speed, size_t max)
{
    const worker *x = &s->workers[k];
    if (eft_shared(x) && x->op_svc[i] > 0) {
        if (max < 1)
            return 0;
        uint64_t first = UINT64_MAX; /* the server works since the earliest start it still runs */
        double work = 0;
        for (size_t r = 0; r < x->nrun; r++) {
            const task *u = &s->tasks[x->run[r]];
            uint64_t st = u->worker == k ? u->started_ms : s->copies[u->copy].started_ms;
            if (st < first)
                first = st;
            double v = x->op_svc[u->op] > 0 ? x->op_svc[u->op] : x->op_svc[i];
            work += (double)u->in_bytes / v;
        }
        free_at[0] = 0;
        if (x->nrun > 0) {
            uint64_t from = first > x->last_end_ms ? first : x->last_end_ms;
            free_at[0] = eft_after((double)from + work, now_ms);
        }
        speed[0] = x->op_svc[i];
        return 1;
    }
    if (x->op_speed[i] <= 0 || x->slots > max)
        return 0;
    size_t n = 0;
    for (size_t r = 0; r < x->nrun && n < x->slots; r++) {
        const task *u = &s->tasks[x->run[r]];
        uint64_t st = u->worker == k ? u->started_ms : s->copies[u->copy].started_ms;
        double v = x->op_speed[u->op];
        free_at[n] = v > 0 ? eft_after((double)st + (double)u->in_bytes / v, now_ms) : 0;
        speed[n++] = x->op_speed[i];
    }
    for (; n < x->slots; n++) {
        free_at[n] = 0;
        speed[n] = x->op_speed[i];
    }
    return n;
}

static int eft_defer(const sb_sched *s, size_t w, size_t i, size_t ti, uint64_t now_ms)
{
    const worker *wk = &s->workers[w];
    const op *o = &s->ops[i];
    const task *t = &s->tasks[ti];
    if (s->eft_off || s->mode == SB_MODE_STATIC || t->in_bytes == 0 ||
        (i > 0 && !op_finished(s, i - 1)))
        return 0;
    uint64_t pieces = o->target ? (o->fifo_bytes + o->target - 1) / o->target : o->flen;
    if (o->qlen + pieces > EFT_MAX)
        return 0; /* not the tail yet */
    double free_at[EFT_MAX], speed[EFT_MAX];
    /* w's time for ti: on its one server after what it runs, or on a free slot */
    size_t nw = eft_servers(s, w, i, now_ms, free_at, speed, EFT_MAX);
    if (nw == 0)
        return 0;
    double mine = free_at[0];
    for (size_t q = 1; q < nw; q++)
        if (free_at[q] < mine)
            mine = free_at[q];
    mine += (double)t->in_bytes / speed[0];
    double rate = 0; /* the others' bytes per ms */
    size_t n = 0;
    for (size_t k = 0; k < s->nworkers; k++) {
        const worker *x = &s->workers[k];
        if (k == w || !x->alive || x->draining || strcmp(x->pool, wk->pool) != 0)
            continue;
        size_t got = eft_servers(s, k, i, now_ms, free_at + n, speed + n, EFT_MAX - n);
        if (got == 0 && (x->op_speed[i] > 0 || x->op_svc[i] > 0))
            return 0; /* more servers than EFT_MAX: not estimated */
        for (size_t q = 0; q < got; q++)
            rate += speed[n + q];
        n += got;
    }
    if (n == 0)
        return 0;
    uint64_t waiting = o->fifo_bytes;
    for (size_t k = 0; k < o->qlen; k++)
        waiting += s->tasks[o->queue[o->qhead + k]].in_bytes;
    if (mine <= EFT_SLACK * ((double)waiting / rate))
        return 0;
    double last = 0;
    for (uint64_t k = 0; k < o->qlen + pieces; k++) {
        uint64_t bytes;
        if (k < o->qlen)
            bytes = s->tasks[o->queue[o->qhead + k]].in_bytes;
        else if (k + 1 < o->qlen + pieces)
            bytes = o->target;
        else
            bytes = o->fifo_bytes - (pieces - 1) * o->target;
        size_t j = 0;
        for (size_t q = 1; q < n; q++)
            if (free_at[q] < free_at[j])
                j = q;
        free_at[j] += (double)bytes / speed[j];
        if (free_at[j] > last)
            last = free_at[j];
    }
    return mine > EFT_SLACK * last;
}

/* ---- batched polls ----------------------------------------------------------------------
 *
 * A poll and its reply cost the controller and the worker far more than a short task itself
 * (an empty task on a tiny file: ~0.1 ms of work against ~0.2 ms of RPC, thread hand-offs and
 * wake-ups). A slot that asks for a batch (sb_sched_assign_batch) gets, after its first task,
 * more ready tasks of an op whose tasks are short — measured: at least BATCH_MIN_TIMED done, a
 * mean wall time (the workers' own report, so that queueing in a batch does not count) under
 * BATCH_SHORT_MS — about BATCH_WORK_MS of work in all; it runs them one after another and
 * reports them on its next poll. Only tasks already queued are batched, and only while the
 * op's queue holds a whole batch more: the tail goes out one task at a time, so a batch can
 * leave a slot at most ~BATCH_WORK_MS behind the others. Tasks of a batch are running, reserve
 * their output in the budget and are recovered like any other; their durations (op_speed,
 * the speculation bar, op_svc) are the reported wall times, not the time since assignment.
 * A worker lost while it holds a batch charges none of its tasks a retry (which one killed it
 * is not known: charging all would error the neighbours of a task that crashes its worker);
 * each of them runs alone from then on (task.solo), where a death is charged as always. */
#define BATCH_SHORT_MS 5.0
#define BATCH_WORK_MS 10.0
#define BATCH_MIN_TIMED 4

/* How many of op k's tasks one slot takes in a poll that allows `batch`: 1 unless they are
 * short. */
static size_t batch_len(const sb_sched *s, size_t k, size_t batch)
{
    const op *o = &s->ops[k];
    if (batch <= 1 || s->mode != SB_MODE_STREAMING || o->timed < BATCH_MIN_TIMED ||
        (o->ratio == 0 && k + 1 < s->nops))
        return 1;
    double mean = o->task_seconds * 1000.0 / (double)o->timed;
    if (mean >= BATCH_SHORT_MS)
        return 1;
    double n = BATCH_WORK_MS / (mean > 0.01 ? mean : 0.01);
    return n >= (double)batch ? batch : n < 1 ? 1 : (size_t)n;
}

size_t sb_sched_assign(sb_sched *s, const char *worker_id, size_t max, uint64_t now_ms,
                       sb_sched_task *out)
{
    return sb_sched_assign_batch(s, worker_id, max, 1, now_ms, out);
}

/* The op whose next task worker w takes now, or NONE: the most downstream op with a ready
 * task (or one it can form) that fits the budget, else, when nothing runs anywhere, one task
 * past it. extra: past the worker's free slots, only a batch of short queued tasks; got tasks
 * are chosen so far of max slots, batch per slot. */
static size_t assign_pick(sb_sched *s, size_t w, int extra, size_t got, size_t max, size_t batch,
                          uint64_t now_ms)
{
    worker *wk = &s->workers[w];
    size_t pick = NONE;
    uint64_t in_flight = s->partition_bytes + s->reserved_bytes;
    for (size_t pass = 0; pass < 2 && pick == NONE; pass++) {
        /* pass 0: within budget; pass 1: nothing runs anywhere, take the most downstream —
         * only the most downstream op with work when there is work after the first op: an
         * expanding op's task may not fit a budget its own inputs fill (static mode: another
         * slot's upstream task took the room), and nothing else would ever free it. One task
         * alone, past the budget by at most its output (docs/testing.md, chaos 8869762-56) */
        size_t only = 0;
        if (pass == 1 && (s->running_total > s->waiting_total || extra ||
                          (stream_holds(s) && !s->stream_starved)))
            break; /* (a stream's consumers free the budget: nothing is forced past it,
                    * unless they cannot: sb_sched_stream_starved) */
        if (pass == 1)
            only = downstream_work(s);
        for (size_t k = s->nops; k-- > 0 && pick == NONE;) {
            if (!op_eligible(s, wk, k) || (only > 0 && k != only) || sink_gated(s, k))
                continue;
            if (extra) { /* a batch: short tasks already queued, a batch's worth left */
                size_t n = batch_len(s, k, batch);
                if (n <= 1 || got >= max * n || s->ops[k].qlen < n)
                    continue;
            }
            uint64_t in_bytes = 0;
            size_t ti = peek_ready(s, k, &in_bytes);
            if (ti == NONE && k > 0 && !extra)
                ti = form_task(s, k,
                               pass == 1 || s->running_total == 0 ? 2
                               : s->mode != SB_MODE_STREAMING     ? 1
                                                                  : 0,
                               w);
            if (ti == NONE || (extra && (s->tasks[ti].solo || s->tasks[ti].open)))
                continue;
            in_bytes = s->tasks[ti].in_bytes;
            uint64_t est = start_reserve(s, &s->tasks[ti], estimate(s, &s->ops[k], in_bytes, k), w,
                                         NULL, NULL);
            /* a downstream task frees its inputs when it finishes: only growth counts */
            uint64_t grow = k == 0 ? est : est > in_bytes ? est - in_bytes : 0;
            /* a second probe of an unmeasured op (another already runs): its whole output
             * counts as growth, so probes beyond the first fit the budget at ratio 2 */
            if (s->ops[k].ratio == 0 && s->ops[k].running > 0 && k + 1 < s->nops && grow < in_bytes)
                grow = in_bytes;
            if (pass == 0 && s->mode != SB_MODE_STAGED && grow > 0 &&
                in_flight + grow > s->budget) {
                op *ho = &s->ops[k]; /* a task ready, held back by the budget */
                if (!ho->held) {
                    ho->held = 1;
                    ho->held_since_ms = now_ms;
                }
                continue;
            }
            if (pass == 0 && eft_defer(s, w, k, ti, now_ms))
                continue; /* a faster worker of the pool finishes it sooner */
            pick = k;
        }
    }
    return pick;
}

size_t sb_sched_assign_batch(sb_sched *s, const char *worker_id, size_t max, size_t batch,
                             uint64_t now_ms, sb_sched_task *out)
{
    size_t w = worker_find(s, worker_id);
    if (w == NONE || !s->workers[w].alive || s->state != SB_SCHED_RUNNING)
        return 0;
    worker *wk = &s->workers[w];
    if (wk->draining && pool_healthy(s, wk->pool) > 0)
        return 0; /* drained: no new work while a healthy worker of its pool is there */
    size_t got = 0;
    size_t chosen[256] = {0};
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    if (max > 256)
        max = 256;
    if (batch < 1)
        batch = 1;
    size_t limit = max * batch > 256 ? 256 : max * batch;
    int solo = 0; /* a task that must run alone was given: no batch */
    while (got < limit) {
        /* past the free slots: only more short tasks, in a batch */
        int extra = got >= max || wk->running >= wk->slots;
        if (extra && (batch <= 1 || got == 0 || solo))
            break;
        size_t pick = assign_pick(s, w, extra, got, max, batch, now_ms);
        if (pick == NONE)
            break;
        size_t ti = pop_ready(s, pick);
        if (ti == NONE)
            break;
        start_task(s, ti, w, now_ms);
        solo |= s->tasks[ti].solo;
        chosen[got++] = ti;
    }
    for (size_t i = 0; i < got; i++) /* all reported together, on the next poll */
        s->tasks[chosen[i]].batched = got > max;
    if (got > max)
        s->tasks_batched += got - max;
    size_t copy = NONE; /* nothing else to do here: a copy of a straggler */
    if (got == 0 && max > 0 && wk->running < wk->slots && s->mode == SB_MODE_STREAMING &&
        (copy = spec_candidate(s, w, now_ms)) != NONE && !start_copy(s, copy, w, now_ms))
        copy = NONE;
    size_t need = copy != NONE ? s->tasks[copy].ninputs : 0;
    for (size_t i = 0; i < got; i++)
        need += s->tasks[chosen[i]].ninputs;
    size_t name_len = strlen(s->pipeline_id) + TASK_NAME_SUFFIX;
    if (GROW(s, s->in_scratch, s->in_scratch_cap, need + 1) != 0 ||
        GROW(s, s->names, s->names_cap, (got + 1) * name_len) != 0) {
        for (size_t i = 0; i < got; i++)
            requeue_task(s, chosen[i], 0);
        if (copy != NONE)
            drop_copy(s, &s->tasks[copy]);
        return 0;
    }
    size_t used = 0, names_used = 0;
    for (size_t i = 0; i < got; i++)
        fill_task_view(s, chosen[i], 0, &out[i], &used, &names_used);
    if (copy != NONE)
        fill_task_view(s, copy, 1, &out[got++], &used, &names_used);
    return got;
}

/* ---- completion ----------------------------------------------------------------------------- */

static void task_stop_running(sb_sched *s, task *t)
{
    worker *wk = &s->workers[t->worker];
    run_del(s, t->worker, (size_t)(t - s->tasks));
    wk->running--;
    wk->op_running[t->op]--;
    s->ops[t->op].running--;
    s->running_total--;
    s->reserved_bytes -= t->reserved;
    t->reserved = 0;
    set_waiting(s, t, 0);
}

/* Records one output of task ti (op not the last) that its attempt on worker w wrote, at its
 * completion or published early (sb_sched_publish). A new partition joins the next op's FIFO and
 * the task's list. One known before is a re-run's copy: made again where it was lost and is
 * still needed, released where another copy is available or nobody needs it, kept where the
 * scheduler already holds it on w (this attempt's early output, listed again in its final
 * report, or a re-run on the worker that holds the earlier copy: the worker replaced it). -1 out
 * of memory. */
static int record_part(sb_sched *s, size_t ti, size_t w, const sb_storage_output *out, sb_err *err)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    if (out->bytes > o->max_part)
        o->max_part = out->bytes;
    char name[TASK_NAME_MAX];
    size_t pi;
    if (sb_idmap_get(&s->part_ids, out->id, &pi)) { /* re-produced, or published early */
        part *p = &s->parts[pi];
        if (p->producer == ti && (out->rows != p->rows || out->bytes != p->bytes)) {
            set_failure(s,
                        "re-made partition %s of op %s has %" PRIu64 " rows / %" PRIu64
                        " bytes, the %s one had %" PRIu64 " / %" PRIu64
                        ": its producer is not deterministic (a lineage re-run must cut "
                        "its output as the first attempt did); the run stops rather than "
                        "lose or duplicate rows",
                        out->id, o->name, out->rows, out->bytes,
                        p->state == P_AVAILABLE ? "first" : "lost", p->rows, p->bytes);
            if (p->state != P_AVAILABLE || p->worker != w)
                add_release(s, w, out->id);
            return 0;
        }
        if (p->state == P_AVAILABLE) { /* held here already, or available elsewhere */
            if (p->worker != w)
                add_release(s, w, out->id);
            return 0;
        }
        int needed = p->state == P_LOST && p->consumer != DEALT &&
                     (p->consumer == NONE || s->tasks[p->consumer].state == T_QUEUED ||
                      s->tasks[p->consumer].state == T_RUNNING);
        if (!needed) {
            add_release(s, w, out->id);
            return 0;
        }
        p->state = P_AVAILABLE;
        p->worker = w;
        p->bytes = out->bytes;
        p->rows = out->rows;
        s->partition_bytes += p->bytes;
    } else if (t->made) {
        set_failure(s,
                    "a re-run of task %s of op %s made partition %s (%" PRIu64 " rows / %" PRIu64
                    " bytes), which its first attempt did not: its producer is not "
                    "deterministic; the run stops rather than duplicate rows",
                    task_name(s, t, name, sizeof name), o->name, out->id, out->rows, out->bytes);
        add_release(s, w, out->id);
        return 0;
    } else {
        if (s->nparts >= UINT32_MAX - 1 || GROW(s, s->parts, s->capparts, s->nparts + 1) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        pi = s->nparts;
        part *p = &s->parts[pi];
        memset(p, 0, sizeof *p);
        p->lost_from = NO_HOLDER;
        p->id = sb_strpool_dup(&s->ids, out->id);
        if (p->id == NULL || sb_idmap_put(&s->part_ids, out->id, pi) != 0)
            return sb_err_set(err, "scheduler: out of memory");
        s->nparts++;
        p->next_out = t->nout > 0 ? t->out_first : NO_PART;
        t->out_first = (uint32_t)pi;
        t->nout++;
        p->producer = ti;
        p->worker = w;
        p->bytes = out->bytes;
        p->rows = out->rows;
        p->consumer = NONE;
        p->state = P_AVAILABLE;
        s->partition_bytes += p->bytes;
        if ((t->op + 1 == s->nops ? stream_push(s, ti, pi)
                                  : fifo_push(s, &s->ops[t->op + 1], pi)) != 0)
            return sb_err_set(err, "scheduler: out of memory");
    }
    if (out->bytes > s->max_partition_bytes)
        s->max_partition_bytes = out->bytes;
    if (s->partition_bytes > s->peak_partition_bytes)
        s->peak_partition_bytes = s->partition_bytes;
    return 0;
}

static int record_sink_part(sb_sched *s, size_t ti, const sb_storage_output *out, sb_err *err)
{
    if (sb_idmap_get(&s->sink_ids, out->id, NULL))
        return 0; /* a re-run rewrote the same part */
    if (GROW(s, s->sink, s->capsink, s->nsink + 1) != 0 ||
        GROW(s, s->sink_task, s->capsink_task, s->nsink + 1) != 0 ||
        (s->sink[s->nsink].id = sb_strpool_dup(&s->ids, out->id)) == NULL ||
        sb_idmap_put(&s->sink_ids, out->id, s->nsink) != 0)
        return sb_err_set(err, "scheduler: out of memory");
    s->sink_task[s->nsink] = (uint32_t)ti;
    s->sink[s->nsink].bytes = out->bytes;
    s->sink[s->nsink].rows = out->rows;
    s->sink[s->nsink].crc32c = out->crc32c;
    s->sink[s->nsink].order = NULL;
    s->nsink++;
    s->sink_rows += out->rows;
    s->sink_bytes += out->bytes;
    return 0;
}

/* The outputs of task ti's finished attempt on worker w: all of them, also those it published
 * early. A partition the task made in an earlier attempt must be made again, equal to the last
 * row: keeping a lost one (or an early one of a failed attempt) beside the others would lose or
 * duplicate the rows near a cut that moved. */
static int record_outputs(sb_sched *s, size_t ti, size_t w, const sb_storage_output *outs,
                          size_t nouts, sb_err *err)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    int last = t->op == s->nops - 1 && !s->stream; /* writes the sink */
    uint64_t bytes = 0;
    int was_made = t->made, check = !last && (t->made || t->early_stale);
    char name[TASK_NAME_MAX];
    for (size_t i = 0; i < nouts; i++) {
        bytes += outs[i].bytes;
        o->rows_out += outs[i].rows;
        o->bytes_out += outs[i].bytes;
        if ((last ? record_sink_part(s, ti, &outs[i], err)
                  : record_part(s, ti, w, &outs[i], err)) != 0)
            return -1;
    }
    uint32_t pi = t->nout > 0 ? t->out_first : NO_PART;
    for (size_t k = 0; check && k < t->nout; k++, pi = s->parts[pi].next_out) {
        const part *p = &s->parts[pi];
        int made = 0;
        for (size_t i = 0; i < nouts && !made; i++)
            made = strcmp(outs[i].id, p->id) == 0;
        if (!made && (!was_made || p->state == P_LOST))
            set_failure(s,
                        "a re-run of task %s of op %s did not make partition %s again (the "
                        "%s one had %" PRIu64 " rows / %" PRIu64 " bytes): its producer is not "
                        "deterministic; the run stops rather than lose or duplicate rows",
                        task_name(s, t, name, sizeof name), o->name, p->id,
                        was_made ? "lost" : "early", p->rows, p->bytes);
    }
    if (!last) {
        t->made = 1;
        t->early_stale = 0;
    }
    if (!last && t->in_bytes > 0) {
        double r = (double)bytes / (double)t->in_bytes;
        if (r > o->ratio)
            o->ratio = r;
        if (o->ratio == 0)
            o->ratio = 1e-9; /* measured: it produces (almost) nothing */
    } else if (!last && o->ratio == 0) {
        o->ratio = 1e-9;
    }
    return 0;
}

/* A report whose outputs do not count (stale, failed, or a copy that lost): the worker frees them,
 * except those the scheduler holds on that worker (its early outputs: see record_part). */
static void release_outs(sb_sched *s, size_t w, const sb_storage_output *outs, size_t nouts)
{
    for (size_t i = 0; i < nouts; i++) {
        size_t pi;
        if (!sb_idmap_get(&s->part_ids, outs[i].id, &pi) || s->parts[pi].state != P_AVAILABLE ||
            s->parts[pi].worker != w)
            add_release(s, w, outs[i].id);
    }
}

static void consume_inputs(sb_sched *s, task *t)
{
    const uint32_t *ins = task_inputs(t);
    for (size_t i = 0; i < t->ninputs; i++)
        part_release(s, ins[i]);
}

static void check_finished(sb_sched *s)
{
    if (s->state == SB_SCHED_RUNNING && op_finished(s, s->nops - 1) &&
        (!s->stream || stream_finished(s)))
        s->state = SB_SCHED_SUCCEEDED;
}

/* Lists an errored partition (the first SB_SCHED_ERRORED_KEEP are kept). */
static void errored_list(sb_sched *s, const op *o, const char *task_name, const char *what,
                         const char *error)
{
    if (s->nerrored >= SB_SCHED_ERRORED_KEEP ||
        GROW(s, s->errored, s->caperrored, s->nerrored + 1) != 0)
        return;
    sb_storage_errored *e = &s->errored[s->nerrored];
    e->stage = o->name;
    e->task_id = strdup(task_name);
    e->input = strdup(what);
    e->error = strdup(error);
    if (e->task_id == NULL || e->input == NULL || e->error == NULL) {
        free((char *)e->task_id);
        free((char *)e->input);
        free((char *)e->error);
        s->oom = 1;
    } else {
        s->nerrored++;
    }
}

/* Done task ti's split had objects that errored alone (an image source's grouped split): each
 * is an errored partition, counted once whatever attempts or lineage re-runs report them again,
 * and the pipeline fails past maxErroredPartitions. */
static void pieces_errored(sb_sched *s, size_t ti, const sb_sched_piece *pieces, size_t n)
{
    task *t = &s->tasks[ti];
    if (n == 0 || t->pieces)
        return;
    t->pieces = 1;
    op *o = &s->ops[t->op];
    char name[TASK_NAME_MAX], what[256], shown[1024];
    task_name(s, t, name, sizeof name);
    for (size_t i = 0; i < n; i++) {
        s->errored_total++;
        snprintf(what, sizeof what, "split %" PRIu64 " object %.200s", t->index,
                 pieces[i].path ? pieces[i].path : "");
        sb_redact_text(pieces[i].error ? pieces[i].error : "(no message)", shown, sizeof shown);
        errored_list(s, o, name, what, shown);
    }
    o->errored += n;
    if (s->errored_total > s->max_errored)
        set_failure(s,
                    "stage %s failed: task %s: %s: %s (%" PRIu64 " errored partition%s, "
                    "maxErroredPartitions is %" PRIu64 ")",
                    o->name, name, what, shown, s->errored_total, s->errored_total == 1 ? "" : "s",
                    s->max_errored);
}

/* Task ti (no longer running) failed for good after `times` attempts: its partition is errored,
 * and the pipeline fails past maxErroredPartitions. */
static void task_errored(sb_sched *s, size_t ti, uint32_t times, const char *message)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    cancel_copy(s, t);
    drop_copy(s, t);
    t->state = T_SKIPPED;
    o->errored++;
    s->errored_total += t->ninputs > 0 ? t->ninputs : 1;
    char what[256], label[200], name[TASK_NAME_MAX];
    task_name(s, t, name, sizeof name);
    if (t->op == 0)
        snprintf(what, sizeof what, "split %" PRIu64 " (%s)", t->index,
                 sb_io_split_describe(s->splits[t->index], label, sizeof label));
    else if (t->ninputs > 0)
        snprintf(what, sizeof what, "input partition %s%s", s->parts[task_inputs(t)[0]].id,
                 t->ninputs > 1 ? " (and more)" : "");
    else
        snprintf(what, sizeof what, "no input");
    errored_list(s, o, name, what,
                 t->first_error        ? t->first_error
                 : message && *message ? message
                                       : "(no message)");
    if (s->errored_total > s->max_errored)
        set_failure(s,
                    "stage %s failed: task %s (%s) failed %u time%s, last error: %s "
                    "(%" PRIu64 " errored partition%s, maxErroredPartitions is %" PRIu64 ")",
                    o->name, name, what, times, times > 1 ? "s" : "",
                    message && *message ? message : "(no message)", s->errored_total,
                    s->errored_total == 1 ? "" : "s", s->max_errored);
    consume_inputs(s, t);
    check_finished(s);
}

/* A report from the primary or its speculative copy decides between the two. Returns 1 when the
 * report is settled here (a failed copy; a failed primary whose copy goes on as the task), 0 when
 * it is the task's result and sb_sched_complete goes on with it. */
static int settle_copy(sb_sched *s, size_t w, task *t, int copy, sb_sched_status status,
                       const char *message, const sb_storage_output *outs, size_t nouts)
{
    op *o = &s->ops[t->op];
    if (copy && status != SB_SCHED_OK) { /* a failed copy: the primary goes on */
        release_outs(s, w, outs, nouts);
        drop_copy(s, t);
        o->failed_attempts++;
        return 1;
    }
    if (copy) { /* the copy finished first: it is the task's result */
        cancel_on(s, t->worker, t, t->attempt); /* the primary still runs */
        promote_copy(s, t);
        o->spec_won++;
    } else if (t->copy != NO_COPY && status == SB_SCHED_ERROR && t->retries < s->max_retries) {
        release_outs(s, w, outs, nouts); /* a failed primary: its copy goes on as the task */
        o->failed_attempts++;
        if (t->first_error == NULL)
            t->first_error = strdup(message && *message ? message : "(no message)");
        t->retries++;
        o->retries++;
        promote_copy(s, t);
        return 1;
    } else {
        cancel_copy(s, t); /* the primary's result (or failure) stands; a copy is stale now */
        drop_copy(s, t);
    }
    return 0;
}

/* A partition its consumers report lost this many times, though it was made again after each
 * report, is not lost: reading it fails (issue 41: one larger than a worker's store budget was
 * reported lost and made again for ever). maxTaskRetries + 1 reports, and never fewer than 2,
 * so that a worker lost between two reads under maxTaskRetries: 0 is still recovered from. */
static uint32_t lost_reports_max(const sb_sched *s)
{
    uint64_t m = s->max_retries + 1 > 2 ? s->max_retries + 1 : 2;
    return m > UINT8_MAX - 1 ? UINT8_MAX - 1 : (uint32_t)m;
}

/* Task ti's inputs reported lost again and again (lost_reports_max): the pipeline fails naming
 * the partition and the consumer's last error, rather than make it once more. */
static void lost_for_good(sb_sched *s, size_t ti, const part *p, const char *message)
{
    task *t = &s->tasks[ti];
    char name[TASK_NAME_MAX];
    task_name(s, t, name, sizeof name);
    task_stop_running(s, t);
    set_failure(s,
                "stage %s failed: task %s reported its input partition %s (%" PRIu64
                " bytes) lost %u times, though it was made again after each report: last error: "
                "%s",
                s->ops[t->op].name, name, p->id, p->bytes, (unsigned)p->lost_reports,
                message && *message ? message : "(no message)");
    if (t->first_error == NULL)
        t->first_error = strdup(message && *message ? message : "(no message)");
    task_errored(s, ti, t->retries + 1, message);
}

/* Task ti could not read some inputs: they are lost, and the task waits for them to be made
 * again, unless one of them was reported lost too often already (lost_for_good). */
static void complete_input_lost(sb_sched *s, size_t w, size_t ti, const char *message,
                                const sb_storage_output *outs, size_t nouts,
                                const char *const *lost, size_t nlost)
{
    size_t again = NONE;
    for (size_t i = 0; i < nlost; i++) {
        size_t pi;
        if (!sb_idmap_get(&s->part_ids, lost[i], &pi) || s->parts[pi].state != P_AVAILABLE)
            continue;
        part *p = &s->parts[pi];
        if (p->lost_reports < UINT8_MAX)
            p->lost_reports++;
        p->lost_from = p->worker < NO_HOLDER ? (uint16_t)p->worker : NO_HOLDER;
        if (p->lost_reports >= lost_reports_max(s))
            again = pi;
        part_drop_bytes(s, p);
        p->state = P_LOST;
        p->worker = NONE;
        s->partitions_lost++;
    }
    release_outs(s, w, outs, nouts); /* partial outputs are dropped */
    if (again != NONE)
        lost_for_good(s, ti, &s->parts[again], message);
    else
        requeue_task(s, ti, 1); /* re-queues the producers of the lost inputs too */
}

/* Task ti failed: retried while it has retries left (an error on its data is not: it would fail
 * again), else its partition is errored; a permanent error fails the pipeline at once. */
static void complete_error(sb_sched *s, size_t w, size_t ti, sb_sched_status status,
                           const char *message, const sb_storage_output *outs, size_t nouts)
{
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    release_outs(s, w, outs, nouts);
    if (t->first_error == NULL) /* NULL when out of memory: the last message is used */
        t->first_error = strdup(message && *message ? message : "(no message)");
    if (status == SB_SCHED_ERROR && t->retries < s->max_retries) {
        t->retries++;
        o->retries++;
        requeue_task(s, ti, 0);
        return;
    }
    task_stop_running(s, t);
    if (status == SB_SCHED_ERROR_PERMANENT) { /* every task would fail so: no partition skipped */
        char name[TASK_NAME_MAX];
        task_name(s, t, name, sizeof name);
        set_failure(s,
                    "stage %s failed: task %s failed with an error that a retry would repeat: %s",
                    o->name, name, message && *message ? message : "(no message)");
    }
    task_errored(s, ti, t->retries + 1, message);
}

/* Records how long a successful task took: the op's task times and duration histogram, the
 * worker's speed on the op (dispatch and drain use it) and its accelerator's service rate
 * (eft_defer uses it). */
static void complete_timing(sb_sched *s, task *t, const sb_sched_metrics *metrics, uint64_t now_ms)
{
    op *o = &s->ops[t->op];
    uint64_t took = now_ms > t->started_ms ? now_ms - t->started_ms : 0;
    int batched = t->batched && metrics != NULL && metrics->wall_seconds > 0;
    if (batched) /* it waited for the tasks before it in the batch: its own time */
        took = (uint64_t)(metrics->wall_seconds * 1000.0 + 0.5);
    o->ok_ms_sum += took;
    o->ok_n++;
    if (took > 0 && t->in_bytes > 0) { /* the worker's speed on this op: EWMA, weight 1/2 */
        double v = (double)t->in_bytes / (double)took, *sp = &s->workers[t->worker].op_speed[t->op];
        *sp = *sp > 0 ? 0.5 * *sp + 0.5 * v : v;
        drain_check(s, t->worker, t->op, v, t->started_ms, now_ms);
    }
    worker *ew = &s->workers[t->worker]; /* its accelerator's time on the task (eft_defer) */
    uint64_t from = t->started_ms > ew->last_end_ms ? t->started_ms : ew->last_end_ms;
    if (batched) /* a batch's reports arrive together: its own time, as above */
        from = now_ms > took ? now_ms - took : 0;
    if (now_ms > from && t->in_bytes > 0) {
        double v = (double)t->in_bytes / (double)(now_ms - from), *sp = &ew->op_svc[t->op];
        *sp = *sp > 0 ? 0.5 * *sp + 0.5 * v : v;
    }
    if (now_ms > ew->last_end_ms)
        ew->last_end_ms = now_ms;
    if (metrics != NULL) {
        o->task_seconds += metrics->wall_seconds;
        o->cpu_seconds += metrics->cpu_seconds;
        size_t b = 0;
        while (b < SB_SCHED_DURATION_BUCKETS && metrics->wall_seconds > sb_metrics_task_buckets[b])
            b++;
        if (b < SB_SCHED_DURATION_BUCKETS)
            o->duration_buckets[b]++;
        o->timed++;
    }
}

/* Adds a successful task's rows and bytes to its op's figures, in total and by the pool of the
 * worker (w) that ran it. */
static void complete_rows(sb_sched *s, size_t w, task *t, const sb_storage_output *outs,
                          size_t nouts, const sb_sched_metrics *metrics)
{
    op *o = &s->ops[t->op];
    /* a source task's input rows are known only to the worker that read its split */
    uint64_t rows_in = t->op == 0 && metrics != NULL ? metrics->rows_in : t->in_rows;
    o->rows_in += rows_in;
    if (metrics != NULL) {
        o->spilled_bytes += metrics->spilled_bytes;
        o->outside += metrics->outside;
        o->outside_bytes += metrics->outside_bytes;
    }
    if (t->op == 0 && metrics != NULL) {
        s->source.source_bytes_read += metrics->source_bytes_read;
        s->source.row_groups_read += metrics->row_groups_read;
        s->source.row_groups_skipped += metrics->row_groups_skipped;
        s->source.source_bytes_skipped += metrics->source_bytes_skipped;
        s->source.pages_read += metrics->pages_read;
        s->source.pages_skipped += metrics->pages_skipped;
    }
    sb_sched_pool_figures *pf = &o->by_pool[strcmp(s->workers[w].pool, "gpu") == 0];
    pf->rows_in += rows_in;
    for (size_t i = 0; i < nouts; i++)
        pf->rows_out += outs[i].rows;
    if (metrics != NULL) {
        pf->timed_tasks++;
        pf->task_seconds += metrics->wall_seconds;
    }
    o->bytes_in += t->in_bytes;
}

int sb_sched_complete(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                      sb_sched_status status, const char *message, const sb_storage_output *outs,
                      size_t nouts, const char *const *lost, size_t nlost,
                      const sb_sched_metrics *metrics, uint64_t now_ms, sb_err *err)
{
    return sb_sched_complete_pieces(s, worker_id, task_id, attempt, status, message, outs, nouts,
                                    lost, nlost, metrics, NULL, 0, now_ms, err);
}

int sb_sched_complete_pieces(sb_sched *s, const char *worker_id, const char *task_id,
                             uint32_t attempt, sb_sched_status status, const char *message,
                             const sb_storage_output *outs, size_t nouts, const char *const *lost,
                             size_t nlost, const sb_sched_metrics *metrics,
                             const sb_sched_piece *pieces, size_t npieces, uint64_t now_ms,
                             sb_err *err)
{
    size_t w = worker_find(s, worker_id ? worker_id : "");
    size_t ti;
    if (w == NONE)
        return sb_err_set(err, "scheduler: completion from unknown worker \"%s\"",
                          worker_id ? worker_id : "");
    int primary = 0, copy = 0;
    if ((ti = task_find(s, task_id ? task_id : "")) != NONE && s->tasks[ti].state == T_RUNNING) {
        primary = s->tasks[ti].attempt == attempt && s->tasks[ti].worker == w;
        copy = copy_worker(s, &s->tasks[ti]) == w && s->tasks[ti].spec_attempt == attempt;
    }
    if (!primary && !copy) {
        release_outs(s, w, outs, nouts);        /* stale: the worker drops what it made */
        if (now_ms > s->workers[w].last_end_ms) /* its accelerator was busy with it till now */
            s->workers[w].last_end_ms = now_ms;
        return 0;
    }
    char shown[1024]; /* the worker's message as every output shows it: redacted */
    if (message != NULL) {
        sb_redact_text(message, shown, sizeof shown);
        message = shown;
    }
    task *t = &s->tasks[ti];
    op *o = &s->ops[t->op];
    s->gen++; /* (open_settle: map outputs finished, or an op may have) */
    if (settle_copy(s, w, t, copy, status, message, outs, nouts))
        return 1;
    if (status == SB_SCHED_OK && t->open) { /* its output would lack the rows still to come */
        status = SB_SCHED_ERROR;
        message = "the worker ended an early reduce task before its inputs were closed "
                  "(Task.inputs_open)";
    }
    s->last_progress_ms = now_ms;
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    if (status != SB_SCHED_OK)
        o->failed_attempts++;
    if (status == SB_SCHED_INPUT_LOST) {
        complete_input_lost(s, w, ti, message, outs, nouts, lost, nlost);
        return 1;
    }
    if (status == SB_SCHED_ERROR || status == SB_SCHED_ERROR_DATA ||
        status == SB_SCHED_ERROR_PERMANENT) {
        complete_error(s, w, ti, status, message, outs, nouts);
        return 1;
    }
    task_stop_running(s, t);
    complete_timing(s, t, metrics, now_ms);
    complete_rows(s, w, t, outs, nouts, metrics);
    if (record_outputs(s, ti, w, outs, nouts, err) != 0)
        return -1;
    t->state = T_DONE;
    o->done++;
    pieces_errored(s, ti, pieces, npieces);
    consume_inputs(s, t);
    if (t->op == 0 && o->xlimit > 0)
        limit_cut(s);
    check_finished(s);
    return 1;
}

int sb_sched_sink_schema_set(sb_sched *s, const char *schema)
{
    if (!s->infer_schema || s->sink_schema != NULL || schema == NULL || schema[0] == '\0')
        return 0;
    return (s->sink_schema = strdup(schema)) != NULL ? 1 : -1;
}

const char *sb_sched_sink_schema(const sb_sched *s)
{
    return s->sink_schema;
}

int sb_sched_more_inputs(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                         uint32_t have, uint64_t now_ms, const sb_sched_input **more, size_t *nmore,
                         int *closed, sb_err *err)
{
    *more = NULL;
    *nmore = 0;
    *closed = 0;
    size_t w = worker_find(s, worker_id ? worker_id : "");
    if (w == NONE)
        return sb_err_set(err, "scheduler: inputs asked by unknown worker \"%s\"",
                          worker_id ? worker_id : "");
    size_t ti = task_find(s, task_id ? task_id : "");
    if (ti == NONE)
        return 0;
    task *t = &s->tasks[ti];
    if (t->state != T_RUNNING || t->attempt != attempt || t->worker != w)
        return 0;
    if (have > t->ninputs) { /* (a worker's bug: the attempt cannot go on) */
        requeue_task(s, ti, 0);
        return 0;
    }
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    if (absorbing(s, ti) && !open_ready(s, t->op) && upstream_starved(s, t->op)) {
        requeue_task(s, ti, 0); /* map work needs its slot: it starts again later */
        return 0;
    }
    if (t->open)
        open_settle(s, t->op);
    size_t n = t->ninputs - have;
    if (GROW(s, s->more_scratch, s->more_scratch_cap, n + 1) != 0)
        return sb_err_set(err, "scheduler: out of memory");
    const uint32_t *ins = task_inputs(t);
    for (size_t k = 0; k < n; k++) {
        const part *p = &s->parts[ins[have + k]];
        size_t holder = p->worker != NONE ? p->worker : w; /* (lost: its fetch reports it) */
        s->more_scratch[k] =
            (sb_sched_input){p->id, s->workers[holder].address, s->workers[holder].id, p->bytes};
    }
    *more = s->more_scratch;
    *nmore = n;
    *closed = !absorbing(s, ti);
    if (*closed)
        t->open = 0; /* told: it may finish once it has read them */
    return 1;
}

int sb_sched_publish(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                     const sb_storage_output *outs, size_t nouts, uint64_t now_ms, int *wait,
                     sb_err *err)
{
    *wait = 0;
    size_t w = worker_find(s, worker_id ? worker_id : "");
    if (w == NONE)
        return sb_err_set(err, "scheduler: early outputs from unknown worker \"%s\"",
                          worker_id ? worker_id : "");
    size_t ti = task_find(s, task_id ? task_id : "");
    if (ti == NONE)
        return 0;
    task *t = &s->tasks[ti];
    /* the primary attempt, where early outputs are safe (as fill_task_view asks); anything else
     * waits for its final report */
    if (t->state != T_RUNNING || t->attempt != attempt || t->worker != w || !early_safe(s, t))
        return 0;
    for (size_t i = 0; i < nouts; i++) {
        if (record_part(s, ti, w, &outs[i], err) != 0)
            return -1;
        uint64_t b = outs[i].bytes < t->reserved ? outs[i].bytes : t->reserved;
        t->reserved -= b; /* what it made is in flight now, no longer an estimate */
        s->reserved_bytes -= b;
        t->pub_bytes += outs[i].bytes;
    }
    s->early_outputs += nouts;
    if (t->chunked) { /* the grant for its next output (see early_wanted) */
        const op *o = &s->ops[t->op];
        uint64_t est = estimate(s, o, t->in_bytes, t->op);
        uint64_t left = est > t->pub_bytes ? est - t->pub_bytes : 0;
        uint64_t want = o->max_part > 0 && o->max_part < left ? o->max_part : left;
        if (want > t->reserved) {
            uint64_t need = want - t->reserved;
            if (s->partition_bytes + s->reserved_bytes + need <= s->budget || grant_forced(s, ti)) {
                t->reserved += need;
                s->reserved_bytes += need;
            } else {
                *wait = 1;
            }
        }
        set_waiting(s, t, *wait);
    }
    s->last_progress_ms = now_ms;
    if (now_ms > s->now_ms)
        s->now_ms = now_ms;
    return 1;
}

const sb_storage_errored *sb_sched_errored_list(const sb_sched *s, size_t *n, uint64_t *total)
{
    *n = s->nerrored;
    if (total != NULL)
        *total = s->errored_total;
    return s->errored;
}

size_t sb_sched_take_releases(sb_sched *s, const char *worker_id, char ***ids)
{
    size_t w = worker_find(s, worker_id);
    *ids = NULL;
    if (w == NONE || s->workers[w].nrel == 0)
        return 0;
    worker *wk = &s->workers[w];
    size_t n = wk->nrel;
    *ids = wk->releases;
    wk->releases = NULL;
    wk->nrel = wk->caprel = 0;
    return n;
}

size_t sb_sched_take_cancels(sb_sched *s, const char *worker_id, sb_sched_cancel **out)
{
    size_t w = worker_find(s, worker_id);
    *out = NULL;
    if (w == NONE || s->workers[w].ncancel == 0)
        return 0;
    worker *wk = &s->workers[w];
    size_t n = wk->ncancel;
    *out = wk->cancels;
    wk->cancels = NULL;
    wk->ncancel = wk->capcancel = 0;
    return n;
}

int sb_sched_cancels_pending(const sb_sched *s, const char *worker_id)
{
    size_t w = worker_find(s, worker_id);
    return w != NONE && s->workers[w].ncancel > 0;
}

void sb_sched_cancels_free(sb_sched_cancel *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].task_id);
    free(v);
}

sb_sched_state sb_sched_state_get(const sb_sched *s, const char **failure)
{
    if (failure != NULL)
        *failure = s->failure;
    return s->state;
}

void sb_sched_get_stats(const sb_sched *s, sb_sched_stats *out)
{
    memset(out, 0, sizeof *out);
    out->budget = s->budget;
    out->partition_bytes = s->partition_bytes;
    out->in_flight_bytes = s->partition_bytes + s->reserved_bytes;
    out->peak_partition_bytes = s->peak_partition_bytes;
    out->max_partition_bytes = s->max_partition_bytes;
    out->tasks_run = s->tasks_run;
    out->tasks_batched = s->tasks_batched;
    out->tasks_rerun = s->tasks_rerun;
    out->early_outputs = s->early_outputs;
    out->early_reduces = s->early_reduces;
    out->partitions_recovered = s->partitions_recovered;
    out->partitions_lost = s->partitions_lost;
    out->sink_parts = s->nsink;
    out->sink_rows = s->sink_rows;
    out->sink_bytes = s->sink_bytes;
    out->source_bytes_read = s->source.source_bytes_read;
    out->row_groups_read = s->source.row_groups_read;
    out->row_groups_skipped = s->source.row_groups_skipped;
    out->source_bytes_skipped = s->source.source_bytes_skipped;
    out->pages_read = s->source.pages_read;
    out->pages_skipped = s->source.pages_skipped;
    out->workers_drained = s->workers_drained;
    for (size_t i = 0; i < s->nworkers; i++)
        out->workers += s->workers[i].alive;
}

size_t sb_sched_drains_take(sb_sched *s, sb_sched_drain *out, size_t max)
{
    size_t n = s->ndrain_notes < max ? s->ndrain_notes : max;
    if (n == 0)
        return 0; /* no notes yet (the array may not exist) */
    for (size_t i = 0; i < n; i++) {
        const worker *wk = &s->workers[s->drain_notes[i]];
        out[i] = (sb_sched_drain){.worker_id = wk->id,
                                  .pool = wk->pool,
                                  .op = s->ops[wk->drain_op].name,
                                  .speed = wk->drain_speed,
                                  .median = wk->drain_median};
    }
    memmove(s->drain_notes, s->drain_notes + n, (s->ndrain_notes - n) * sizeof *s->drain_notes);
    s->ndrain_notes -= n;
    return n;
}

size_t sb_sched_draining_count(const sb_sched *s)
{
    return s->ndraining;
}

void sb_sched_worker_suspect(sb_sched *s, const char *worker_id, int on)
{
    size_t w = worker_find(s, worker_id);
    if (w == NONE || !s->workers[w].alive || s->workers[w].suspect == (on != 0))
        return;
    s->workers[w].suspect = on != 0;
    if (on)
        s->nsuspect++;
    else
        s->nsuspect--;
}

int sb_sched_worker_suspect_get(const sb_sched *s, const char *worker_id)
{
    size_t w = worker_find(s, worker_id);
    return w != NONE && s->workers[w].alive && s->workers[w].suspect;
}

int sb_sched_worker_draining(const sb_sched *s, const char *worker_id)
{
    size_t w = worker_find(s, worker_id ? worker_id : "");
    return w != NONE && s->workers[w].alive && s->workers[w].draining;
}

void sb_sched_get_group_stats(const sb_sched *s, size_t i, sb_sched_group_stats *out)
{
    memset(out, 0, sizeof *out);
    if (i >= s->nops)
        return;
    const op *o = &s->ops[i];
    out->name = o->name;
    out->pool = o->pool;
    out->tasks_total = o->tasks_total;
    out->tasks_done = o->done;
    out->tasks_running = o->running;
    out->tasks_queued = o->qlen;
    out->retries = o->retries;
    out->recovered = o->recovered;
    out->errored = o->errored;
    out->resumed = o->resumed;
    out->rows_in = o->rows_in;
    out->bytes_in = o->bytes_in;
    out->rows_out = o->rows_out;
    out->bytes_out = o->bytes_out;
    out->spilled_bytes = o->spilled_bytes;
    out->outside = o->outside;
    out->outside_bytes = o->outside_bytes;
    out->queued_input_bytes = o->fifo_bytes;
    out->task_seconds = o->task_seconds;
    out->cpu_seconds = o->cpu_seconds;
    out->attempts = o->attempts;
    out->speculated = o->speculated;
    out->spec_won = o->spec_won;
    out->cancelled = o->cancelled;
    out->failed_attempts = o->failed_attempts;
    out->timed_tasks = o->timed;
    memcpy(out->by_pool, o->by_pool, sizeof out->by_pool);
    memcpy(out->duration_buckets, o->duration_buckets, sizeof out->duration_buckets);
    uint64_t bp = o->backpressure_ms;
    if (o->held && s->now_ms > o->held_since_ms)
        bp += s->now_ms - o->held_since_ms;
    out->backpressure_seconds = (double)bp / 1000.0;
    out->held = o->held;
}

/* The output sequence number of a partition id "s<op>-t<task>-p<seq>" (0 if none). */
static uint64_t id_seq(const char *id)
{
    const char *p = strrchr(id, 'p');
    return p != NULL && p > id && p[-1] == '-' ? strtoull(p + 1, NULL, 10) : 0;
}

/* 1 if key is nops + 1 decimal numbers joined by '.' (a checkpoint's order key). */
static int order_key_valid(const char *key, size_t nops)
{
    size_t n = 0;
    const char *p = key;
    for (;;) {
        if (*p < '0' || *p > '9')
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
        n++;
        if (*p == '\0')
            return n == nops + 1;
        if (*p++ != '.')
            return 0;
    }
}

static void order_key(const sb_sched *s, size_t i, uint64_t *key);

/* The order key of sink part k as a checkpoint keeps it ("a.b.c"), malloc'd; NULL when out of
 * memory. */
static char *order_key_format(const sb_sched *s, size_t k)
{
    uint64_t *key = malloc((s->nops + 1) * sizeof *key);
    size_t len = (s->nops + 1) * 21 + 1;
    char *out = key != NULL ? malloc(len) : NULL, *p = out;
    if (out != NULL)
        order_key(s, k, key);
    for (size_t i = 0; out != NULL && i <= s->nops; i++)
        p += snprintf(p, len - (size_t)(p - out), "%s%" PRIu64, i ? "." : "", key[i]);
    free(key);
    return out;
}

/* The input-order key of sink part i: (source split, seq at op 0, seq at op 1, ...), written
 * into key[0..nops] (unused tail 0). With preserve_order every task of op > 0 has one input,
 * so the producer chain is a path back to one split. Parts carried over by a resume have no
 * producer here: keyed by their id when it is an op-0 id, else first. */
static void order_key(const sb_sched *s, size_t i, uint64_t *key)
{
    memset(key, 0, (s->nops + 1) * sizeof *key);
    size_t ti = s->sink_task[i] == NO_TASK ? NONE : s->sink_task[i];
    if (ti == NONE && s->sink[i].order != NULL) { /* kept by the checkpoint (checked at resume) */
        const char *p = s->sink[i].order;
        for (size_t k = 0; k <= s->nops && *p; k++) {
            key[k] = strtoull(p, (char **)&p, 10);
            if (*p == '.')
                p++;
        }
        return;
    }
    if (ti == NONE) {
        unsigned opi;
        unsigned long long t, q;
        if (sscanf(s->sink[i].id, "s%u-t%llu-p%llu", &opi, &t, &q) == 3 && opi == 0) {
            key[0] = t;
            key[1] = q;
        }
        return;
    }
    uint64_t seq = id_seq(s->sink[i].id);
    for (;;) {
        const task *t = &s->tasks[ti];
        key[1 + t->op] = seq;
        if (t->op == 0 || t->ninputs == 0) {
            key[0] = t->op == 0 ? t->index : 0;
            return;
        }
        const part *p = &s->parts[task_inputs(t)[0]];
        seq = id_seq(p->id);
        ti = p->producer;
    }
}

static int key_cmp(const uint64_t *a, const uint64_t *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (a[k] != b[k])
            return a[k] < b[k] ? -1 : 1;
    return 0;
}

typedef struct {
    uint64_t task, seq;
    size_t i;
} sink_rank;

static int sink_rank_cmp(const void *a, const void *b)
{
    const sink_rank *x = a, *y = b;
    if (x->task != y->task)
        return x->task < y->task ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* A sort's output: the parts of its reduce tasks in task order (the ranges' order: exchange_form
 * forms them by bucket), each task's parts by their number. */
static const sb_storage_output *sink_sorted(const sb_sched *s)
{
    size_t m = s->nsink;
    sink_rank *rk = malloc(m * sizeof *rk);
    sb_storage_output *ord = realloc(s->sink_ordered, m * sizeof *ord);
    if (ord != NULL)
        ((sb_sched *)s)->sink_ordered = ord;
    if (rk == NULL || ord == NULL) {
        free(rk);
        return s->sink; /* out of memory: completion order */
    }
    for (size_t i = 0; i < m; i++) {
        size_t ti = s->sink_task[i] == NO_TASK ? NONE : s->sink_task[i];
        uint64_t opi = 0, tix = 0; /* a part carried over by a resume: its id names its task */
        if (ti == NONE)
            parse_part_id(s->sink[i].id, &opi, &tix);
        rk[i] = (sink_rank){ti == NONE ? tix : s->tasks[ti].index, id_seq(s->sink[i].id), i};
    }
    qsort(rk, m, sizeof *rk, sink_rank_cmp);
    for (size_t i = 0; i < m; i++)
        ord[i] = s->sink[rk[i].i];
    free(rk);
    return ord;
}

const sb_storage_output *sb_sched_sink_parts(const sb_sched *s, size_t *n)
{
    *n = s->nsink;
    if (s->sort_sink && s->nsink >= 2)
        return sink_sorted(s);
    if (!s->preserve_order || s->nsink < 2)
        return s->sink;
    /* input order: a merge sort of part indices by their lineage keys (stable) */
    size_t w = s->nops + 1, m = s->nsink;
    uint64_t *keys = malloc(m * w * sizeof *keys);
    size_t *idx = malloc(m * sizeof *idx), *tmp = malloc(m * sizeof *tmp);
    sb_storage_output *ord = realloc(s->sink_ordered, m * sizeof *ord);
    if (keys == NULL || idx == NULL || tmp == NULL || ord == NULL) {
        free(keys);
        free(idx);
        free(tmp);
        if (ord != NULL)
            ((sb_sched *)s)->sink_ordered = ord;
        return s->sink; /* out of memory: completion order */
    }
    ((sb_sched *)s)->sink_ordered = ord;
    for (size_t i = 0; i < m; i++) {
        order_key(s, i, keys + i * w);
        idx[i] = i;
    }
    for (size_t width = 1; width < m; width *= 2) {
        for (size_t lo = 0; lo < m; lo += 2 * width) {
            size_t mid = lo + width < m ? lo + width : m,
                   hi = lo + 2 * width < m ? lo + 2 * width : m;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] =
                    key_cmp(keys + idx[b] * w, keys + idx[a] * w, w) < 0 ? idx[b++] : idx[a++];
            while (a < mid)
                tmp[k++] = idx[a++];
            while (b < hi)
                tmp[k++] = idx[b++];
        }
        size_t *sw = idx;
        idx = tmp;
        tmp = sw;
    }
    for (size_t i = 0; i < m; i++)
        ord[i] = s->sink[idx[i]];
    free(keys);
    free(idx);
    free(tmp);
    return ord;
}

int sb_sched_stalled(const sb_sched *s, uint64_t now_ms, uint64_t stall_ms, char *buf, size_t len)
{
    if (s->state != SB_SCHED_RUNNING || now_ms < s->last_progress_ms + stall_ms)
        return 0;
    size_t o = (size_t)snprintf(
        buf, len, "no progress for %" PRIu64 " s:", (now_ms - s->last_progress_ms) / 1000);
    for (size_t i = 0; i < s->nops && o < len; i++) {
        const op *op_ = &s->ops[i];
        if (op_->qlen == 0 && op_->running == 0 && op_->flen == 0)
            continue;
        const char *why;
        size_t alive = 0, free_slots = 0, bound = 0;
        for (size_t w = 0; w < s->nworkers; w++) {
            const worker *wk = &s->workers[w];
            if (!wk->alive || strcmp(wk->pool, op_->pool) != 0)
                continue;
            alive++;
            free_slots += wk->slots - wk->running;
            bound += wk->op_slots[i];
        }
        int lost_inputs = 0;
        for (size_t k = 0; k < op_->qlen && !lost_inputs; k++)
            lost_inputs = !inputs_available(s, &s->tasks[op_->queue[op_->qhead + k]]);
        if (alive == 0)
            why = "no worker in its pool";
        else if (op_->running > 0)
            why = "tasks running without finishing (slow op, or waiting on a fetch)";
        else if (lost_inputs)
            why = "inputs lost, waiting for them to be recomputed";
        else if (s->mode == SB_MODE_STATIC && bound == 0)
            why = "no slot bound to it (static mode)";
        else if (free_slots == 0)
            why = "no free slot in its pool";
        else if (op_->held || s->partition_bytes + s->reserved_bytes >= s->budget)
            why = "memory budget full"; /* (held: its next task's output does not fit) */
        else
            why = "waiting for upstream output";
        o += (size_t)snprintf(buf + o, len - o,
                              " stage %s (%s pool): %zu queued, %" PRIu64 " running, %zu input "
                              "partitions waiting — %s;",
                              op_->name, op_->pool, op_->qlen, op_->running, op_->flen, why);
    }
    if (o < len)
        snprintf(buf + o, len - o, " in flight %" PRIu64 " of %" PRIu64 " bytes",
                 s->partition_bytes + s->reserved_bytes, s->budget);
    return 1;
}

/* ---- checkpoint ----------------------------------------------------------------------------- */

static size_t uf_find(size_t *parent, size_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static void uf_union(size_t *parent, size_t a, size_t b)
{
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a != b)
        parent[a < b ? b : a] = a < b ? a : b;
}

int sb_sched_checkpoint(const sb_sched *s, char **ranges, sb_storage_output **parts, size_t *nparts,
                        sb_err *err)
{
    return sb_sched_checkpoint_within(s, 0, NULL, NULL, ranges, parts, nparts, NULL, err);
}

static uint64_t digits(uint64_t v)
{
    uint64_t d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Within max_bytes (see sched.h): which committed splits the checkpoint keeps. The splits an
 * earlier leader committed (with every part carried over) come first, as one block; then whole
 * components in order of their first split, up to the first that does not fit. A split costs
 * its index and a separator in the ranges, a part what part_bytes says. Clears committed[] of
 * the others; returns whether the carried block is kept, and counts the splits left out. */
static int ckpt_fit(const sb_sched *s, uint64_t max_bytes, sb_sched_part_bytes_fn part_bytes,
                    void *ctx, const size_t *rep, size_t *parent, uint8_t *committed,
                    size_t *omitted)
{
    size_t ns = s->nsplits;
    uint64_t *cost = calloc(ns ? ns : 1, sizeof *cost); /* per component root */
    uint8_t *keep = calloc(ns ? ns : 1, 1);             /* per root: 0 undecided, 1 keep, 2 drop */
    if (cost == NULL || keep == NULL) {
        free(cost);
        free(keep);
        return -1;
    }
    uint64_t carried = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!committed[i])
            continue;
        if (s->resumed != NULL && s->resumed[i])
            carried += digits(i) + 1;
        else
            cost[uf_find(parent, i)] += digits(i) + 1;
    }
    for (size_t k = 0; k < s->nsink; k++) {
        uint64_t b = part_bytes != NULL ? part_bytes(&s->sink[k], ctx) : 0;
        if (s->sink_task[k] == NO_TASK) {
            carried += b;
            continue;
        }
        size_t ti = s->sink_task[k];
        if (rep[ti] != NONE && committed[uf_find(parent, rep[ti])])
            cost[uf_find(parent, rep[ti])] += b;
    }
    int carry = carried <= max_bytes;
    uint64_t used = carry ? carried : 0;
    int full = !carry; /* once one does not fit, none after it is kept */
    *omitted = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!committed[i])
            continue;
        if (s->resumed != NULL && s->resumed[i]) {
            committed[i] = (uint8_t)carry;
        } else {
            size_t r = uf_find(parent, i);
            if (keep[r] == 0) {
                keep[r] = !full && used + cost[r] <= max_bytes ? 1 : 2;
                if (keep[r] == 1)
                    used += cost[r];
                else
                    full = 1;
            }
            committed[i] = keep[r] == 1;
        }
        *omitted += !committed[i];
    }
    free(cost);
    free(keep);
    return carry;
}

int sb_sched_checkpoint_within(const sb_sched *s, uint64_t max_bytes,
                               sb_sched_part_bytes_fn part_bytes, void *ctx, char **ranges,
                               sb_storage_output **parts, size_t *nparts, size_t *omitted,
                               sb_err *err)
{
    *ranges = NULL;
    *parts = NULL;
    *nparts = 0;
    size_t left_out = 0;
    if (omitted != NULL)
        *omitted = 0;
    size_t ns = s->nsplits;
    size_t *parent = malloc((ns ? ns : 1) * sizeof *parent);
    size_t *rep = malloc((s->ntasks ? s->ntasks : 1) * sizeof *rep); /* a split of each task */
    uint8_t *bad = calloc(ns ? ns : 1, 1);
    uint8_t *committed = calloc(ns ? ns : 1, 1);
    sb_storage_output *out = calloc(s->nsink + 1, sizeof *out);
    size_t n = 0;
    if (parent == NULL || rep == NULL || bad == NULL || committed == NULL || out == NULL)
        goto oom;
    for (size_t i = 0; i < ns; i++)
        parent[i] = i;
    /* 1. components: a task's inputs were made by tasks created before it, so one pass in
     * creation order joins every split a task descends from */
    for (size_t ti = 0; ti < s->ntasks; ti++) {
        const task *t = &s->tasks[ti];
        rep[ti] = t->op == 0 ? (size_t)t->index : NONE;
        for (size_t k = 0; k < t->ninputs; k++) {
            size_t r = rep[s->parts[task_inputs(t)[k]].producer];
            if (r == NONE)
                continue;
            if (rep[ti] == NONE)
                rep[ti] = r;
            else
                uf_union(parent, rep[ti], r);
        }
    }
    /* 2. a component with unfinished work anywhere in it is not committed */
    for (size_t ti = 0; ti < s->ntasks; ti++) {
        const task *t = &s->tasks[ti];
        if (t->state != T_DONE && t->state != T_SKIPPED && rep[ti] != NONE)
            bad[uf_find(parent, rep[ti])] = 1;
    }
    for (size_t pi = 0; pi < s->nparts; pi++) { /* partitions waiting for a consumer */
        const part *p = &s->parts[pi];
        if (p->consumer == NONE && p->state != P_RELEASED && rep[p->producer] != NONE)
            bad[uf_find(parent, rep[p->producer])] = 1;
    }
    for (size_t i = 0; i < ns; i++)
        committed[i] = !bad[uf_find(parent, i)];
    int carry = 1; /* the parts an earlier leader committed */
    if (max_bytes > 0 &&
        (carry = ckpt_fit(s, max_bytes, part_bytes, ctx, rep, parent, committed, &left_out)) < 0)
        goto oom;
    /* 3. the sink parts of committed components (and every resumed part) */
    for (size_t k = 0; k < s->nsink; k++) {
        size_t ti = s->sink_task[k] == NO_TASK ? NONE : s->sink_task[k];
        if (ti == NONE ? !carry : rep[ti] == NONE || !committed[uf_find(parent, rep[ti])])
            continue;
        out[n] = s->sink[k];
        out[n].id = strdup(s->sink[k].id);
        out[n].order = s->preserve_order ? order_key_format(s, k) : NULL;
        if (out[n].id == NULL || (s->preserve_order && out[n].order == NULL))
            goto oom;
        n++;
    }
    *ranges = sb_ranges_format(committed, ns);
    if (*ranges == NULL)
        goto oom;
    *parts = out;
    *nparts = n;
    if (omitted != NULL)
        *omitted = left_out;
    free(parent);
    free(rep);
    free(bad);
    free(committed);
    return 0;
oom:
    sb_sched_parts_free(out, n);
    free(parent);
    free(rep);
    free(bad);
    free(committed);
    return sb_err_set(err, "scheduler: checkpoint: out of memory");
}

void sb_sched_parts_free(sb_storage_output *parts, size_t n)
{
    for (size_t i = 0; parts != NULL && i < n; i++) {
        free((char *)parts[i].id);
        free((char *)parts[i].order);
    }
    free(parts);
}

/* ---- elasticity ----------------------------------------------------------------------------- */

int sb_sched_worker_removable(const sb_sched *s, const char *worker_id)
{
    size_t w = worker_find(s, worker_id ? worker_id : "");
    if (w == NONE || !s->workers[w].alive || s->workers[w].running > 0)
        return 0;
    for (size_t pi = 0; pi < s->nparts; pi++) /* available = not yet consumed: still needed */
        if (s->parts[pi].worker == w && s->parts[pi].state == P_AVAILABLE)
            return 0;
    return 1;
}

void sb_sched_pool_demand(const sb_sched *s, const char *pool, uint64_t *queued, uint64_t *running,
                          int *active)
{
    uint64_t q = 0, r = 0;
    int act = 0;
    for (size_t i = 0; pool != NULL && i < s->nops; i++) {
        const op *o = &s->ops[i];
        if (strcmp(o->pool, pool) != 0)
            continue;
        q += o->qlen;
        if (o->flen > 0) { /* tasks these partitions will form (a reduce op: one per bucket) */
            uint64_t unformed = o->xbuckets > o->ntis ? o->xbuckets - o->ntis : 0;
            uint64_t t = o->xreduce  ? (o->flen < unformed ? o->flen : unformed)
                         : o->target ? (o->fifo_bytes + o->target - 1) / o->target
                                     : o->flen;
            q += t > 0 || o->xreduce ? t : 1; /* (a reduce: buckets whose task waits for them) */
        }
        r += o->running;
        if (s->state == SB_SCHED_RUNNING && !op_finished(s, i))
            act = 1;
    }
    if (queued != NULL)
        *queued = q;
    if (running != NULL)
        *running = r;
    if (active != NULL)
        *active = act;
}

/* ---- memory accounting ---------------------------------------------------------------------- */

/* glibc's footprint of one malloc(n): 8 bytes of header, 16-byte granules, 32 bytes at least. */
static uint64_t blk(size_t n)
{
    size_t b = (n + 8 + 15) & ~(size_t)15;
    return b < 32 ? 32 : b;
}

static uint64_t str_blk(const char *p)
{
    return p != NULL ? blk(strlen(p) + 1) : 0;
}

/* A string in the pool: its bytes alone (the pool's headers and unused room: pool_bytes) */
static uint64_t pool_str(const char *p)
{
    return p != NULL ? strlen(p) + 1 : 0;
}

static uint64_t map_blk(const sb_strmap *m)
{
    if (m->cap == 0)
        return 0;
    uint64_t b = blk(m->cap * sizeof *m->keys) + blk(m->cap * sizeof *m->vals);
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != NULL && m->keys[i][0] != '\0')
            b += blk(strlen(m->keys[i]) + 1);
    return b;
}

void sb_sched_memory_get(const sb_sched *s, sb_sched_memory *out)
{
    memset(out, 0, sizeof *out);
    uint64_t pooled = 0;
    out->tasks = s->ntasks;
    out->parts = s->nparts;
    out->sink_parts = s->nsink;
    out->task_bytes = s->captasks ? blk(s->captasks * sizeof *s->tasks) : 0;
    for (size_t i = 0; i < s->ntasks; i++) {
        const task *t = &s->tasks[i];
        out->task_bytes += str_blk(t->first_error);
        if (t->ninputs > 1)
            out->task_bytes += blk(t->ninputs * sizeof *t->in.many);
    }
    out->part_bytes = s->capparts ? blk(s->capparts * sizeof *s->parts) : 0;
    for (size_t i = 0; i < s->nparts; i++) {
        out->part_bytes += pool_str(s->parts[i].id);
        pooled += pool_str(s->parts[i].id);
    }
    out->sink_bytes = (s->capsink ? blk(s->capsink * sizeof *s->sink) : 0) +
                      (s->capsink_task ? blk(s->capsink_task * sizeof *s->sink_task) : 0);
    for (size_t i = 0; i < s->nsink; i++) {
        out->sink_bytes += pool_str(s->sink[i].id) + str_blk(s->sink[i].order);
        pooled += pool_str(s->sink[i].id);
    }
    for (size_t i = 1; i < s->nops; i++) /* ops > 0: their tasks by index */
        out->task_bytes += s->ops[i].captis ? blk(s->ops[i].captis * sizeof *s->ops[i].tis) : 0;
    out->task_bytes += s->capcopies ? blk(s->capcopies * sizeof *s->copies) : 0;
    out->map_bytes = blk(sb_idmap_bytes(&s->part_ids)) + map_blk(&s->worker_ids) +
                     blk(sb_idmap_bytes(&s->sink_ids));
    out->split_bytes = blk((s->nsplits ? s->nsplits : 1) * sizeof *s->splits);
    for (size_t i = 0; i < s->nsplits; i++) {
        out->split_bytes += pool_str(s->splits[i]);
        pooled += pool_str(s->splits[i]);
    }
    out->pool_bytes = s->ids.bytes > pooled ? s->ids.bytes - pooled : 0;
    out->total_bytes = out->task_bytes + out->part_bytes + out->sink_bytes + out->map_bytes +
                       out->split_bytes + out->pool_bytes;
}

/* ---- Stream sink ----------------------------------------------------------------------------
 * sb_sched_config.stream (sched.h, "Stream sink"): the last op's outputs wait in a queue per
 * epoch for the dealer. Epoch e is op 0's tasks [e * epoch_splits, (e + 1) * epoch_splits),
 * let in (stream_gated) only once everything of the epochs before has been made, so a task of
 * a later op never coalesces rows of two epochs. */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* n elements of size sz in an order shuffled by (seed, epoch) when on (a pure function of the
 * two: Fisher-Yates over splitmix64). */
static void stream_shuffle(int on, uint64_t seed, uint32_t epoch, void *base, size_t n, size_t sz)
{
    uint64_t x = seed ^ ((uint64_t)epoch * 0xd1b54a32d192ed03ULL);
    unsigned char tmp[sizeof(sb_storage_split)], *a = base;
    if (sz > sizeof tmp)
        return;
    for (size_t i = n; on && i > 1; i--) {
        size_t j = (size_t)(splitmix64(&x) % i);
        memcpy(tmp, a + (i - 1) * sz, sz);
        memcpy(a + (i - 1) * sz, a + j * sz, sz);
        memcpy(a + j * sz, tmp, sz);
    }
}

/* The plan's splits once per epoch (once in all with stream_cache), each epoch's in its own
 * order when shuffled. */
static int stream_setup(sb_sched *s, const sb_sched_config *cfg, const sb_storage_split *splits,
                        size_t nsplits, sb_storage_split **expanded, sb_err *err)
{
    if (cfg->resume != NULL)
        return sb_err_set(err, "scheduler: a stream sink does not resume from a checkpoint");
    uint32_t epochs = cfg->stream_epochs ? cfg->stream_epochs : 1;
    if (nsplits > 0 && epochs > SIZE_MAX / 2 / sizeof **expanded / nsplits)
        return sb_err_set(err, "scheduler: %u epochs of %zu splits are too many", epochs, nsplits);
    /* an exchange is planned once over every split it is given: with each epoch reading the
     * source again, its reduce would wait for map tasks of epochs not let in yet (a hang) */
    for (size_t k = 0; epochs > 1 && cfg->stream_cache == 0 && k < s->nops; k++)
        if (s->ops[k].xmap)
            return sb_err_set(err,
                              "scheduler: stage %s exchanges rows, and an exchange is planned "
                              "once for the whole run, not per epoch: %u epochs need "
                              "sink.args.cacheEpochs: true (the pipeline runs once)",
                              s->stage_ptrs[s->ops[k].first_stage + s->ops[k].nstages - 1]->name,
                              epochs);
    s->stream = 1;
    s->stream_epochs = epochs;
    s->stream_cache = cfg->stream_cache != 0;
    s->stream_shuffle = cfg->stream_shuffle;
    s->stream_seed = cfg->stream_seed;
    s->epoch_splits = nsplits;
    uint32_t read = s->stream_cache ? 1 : epochs; /* the epochs that read the source */
    s->sq = calloc(epochs, sizeof *s->sq);
    *expanded = malloc((nsplits > 0 ? nsplits * read : 1) * sizeof **expanded);
    if (s->sq == NULL || *expanded == NULL)
        return sb_err_set(err, "scheduler: out of memory");
    for (uint32_t e = 0; e < read; e++) {
        sb_storage_split *ep = *expanded + (size_t)e * nsplits;
        memcpy(ep, splits, nsplits * sizeof *ep);
        stream_shuffle(cfg->stream_shuffle, cfg->stream_seed, e, ep, nsplits, sizeof *ep);
    }
    return 0;
}

/* The epoch a task's rows belong to: its source split's, up the lineage. */
static uint32_t task_epoch(const sb_sched *s, size_t ti)
{
    for (int depth = 0; depth < 64; depth++) {
        const task *t = &s->tasks[ti];
        if (t->op == 0)
            return s->epoch_splits ? (uint32_t)(t->index / s->epoch_splits) : 0;
        if (t->ninputs == 0)
            break;
        ti = s->parts[task_inputs(t)[0]].producer;
    }
    return 0;
}

static int q_push(sb_sched *s, stream_q *q, size_t pi);

static int stream_push(sb_sched *s, size_t ti, size_t pi)
{
    s->parts[pi].consumer = NONE;
    if (s->stream_cache) { /* kept for the later epochs (stream_advance queues it again) */
        if (GROW(s, s->cached, s->capcached, s->ncached + 1) != 0)
            return -1;
        s->cached[s->ncached++] = pi;
        s->parts[pi].uses = s->stream_epochs;
    }
    return q_push(s, &s->sq[task_epoch(s, ti)], pi);
}

static int q_push(sb_sched *s, stream_q *q, size_t pi)
{
    if (q->head > 0 && q->head + q->len == q->cap) { /* compact before growing */
        memmove(q->q, q->q + q->head, q->len * sizeof *q->q);
        q->head = 0;
    }
    if (GROW(s, q->q, q->cap, q->head + q->len + 1) != 0)
        return -1;
    q->q[q->head + q->len++] = pi;
    return 0;
}

/* Everything of the epochs let in so far has been made: nothing runs, no partition waits for
 * a later op, no queued task but source tasks of later epochs. */
static int stream_made(const sb_sched *s)
{
    for (size_t k = 0; k < s->nops; k++) {
        const op *o = &s->ops[k];
        if (o->running > 0 || o->flen > 0 || (k > 0 && o->qlen > 0))
            return 0;
    }
    const op *o0 = &s->ops[0];
    for (size_t k = 0; k < o0->qlen; k++)
        if (s->tasks[o0->queue[o0->qhead + k]].index / (s->epoch_splits ? s->epoch_splits : 1) <=
            s->stream_open)
            return 0;
    return 1;
}

/* Lets the next epochs in once everything before has been made. With stream_cache an epoch
 * let in is epoch 0's partitions queued again, in the epoch's order. */
static void stream_advance(sb_sched *s)
{
    while (s->stream && s->stream_open + 1 < s->stream_epochs && stream_made(s)) {
        uint32_t e = s->stream_open + 1;
        if (s->stream_cache) {
            stream_q *q = &s->sq[e];
            if (GROW(s, q->q, q->cap, s->ncached) != 0)
                return; /* out of memory (GROW sets s->oom): tried again on the next call */
            memcpy(q->q, s->cached, s->ncached * sizeof *q->q);
            q->head = 0;
            q->len = s->ncached;
            stream_shuffle(s->stream_shuffle, s->stream_seed, e, q->q, q->len, sizeof *q->q);
        }
        s->stream_open = e;
    }
}

/* Op 0's task ti belongs to an epoch not let in yet (op 0's tasks are tasks[0..), by index). */
static int stream_gated(const sb_sched *s, size_t ti)
{
    return s->stream && s->tasks[ti].op == 0 && s->epoch_splits > 0 &&
           s->tasks[ti].index / s->epoch_splits > s->stream_open;
}

/* Stream partitions hold part of the budget: the consumers will free it, so nothing is forced
 * past the budget meanwhile (a slow consumer holds the pipeline back). */
static int stream_holds(const sb_sched *s)
{
    if (!s->stream)
        return 0;
    if (s->stream_taken > 0)
        return 1;
    for (uint32_t e = 0; e <= s->stream_open && e < s->stream_epochs; e++)
        for (size_t k = 0; k < s->sq[e].len; k++)
            if (s->parts[s->sq[e].q[s->sq[e].head + k]].state == P_AVAILABLE)
                return 1;
    return 0;
}

static int stream_finished(const sb_sched *s)
{
    if (s->stream_taken > 0 || s->stream_open + 1 < s->stream_epochs || !stream_made(s))
        return 0;
    for (uint32_t e = 0; e < s->stream_epochs; e++)
        if (s->sq[e].len > 0)
            return 0;
    return 1;
}

int sb_sched_stream_take(sb_sched *s, uint32_t epoch, sb_sched_stream_part *out)
{
    if (!s->stream || epoch >= s->stream_epochs)
        return 0;
    stream_q *q = &s->sq[epoch];
    for (size_t k = 0; k < q->len; k++) {
        size_t pi = q->q[q->head + k];
        part *p = &s->parts[pi];
        if (p->state != P_AVAILABLE)
            continue; /* lost: its producer re-runs */
        memmove(q->q + q->head + 1, q->q + q->head, k * sizeof *q->q);
        q->head++;
        q->len--;
        if (!s->stream_cache) /* (kept ones stay NONE: needed, re-made whenever lost) */
            p->consumer = DEALT;
        s->stream_taken++;
        *out = (sb_sched_stream_part){.id = p->id,
                                      .address = s->workers[p->worker].address,
                                      .bytes = p->bytes,
                                      .rows = p->rows};
        return 1;
    }
    return 0;
}

int sb_sched_stream_done(sb_sched *s, uint32_t epoch)
{
    if (!s->stream || epoch >= s->stream_epochs)
        return -1;
    stream_advance(s);
    if (s->sq[epoch].len > 0 || epoch > s->stream_open)
        return 0;
    return epoch < s->stream_open || stream_made(s);
}

/* stream_cache: an epoch is done with a kept partition; the last one releases it. */
static int cache_release(sb_sched *s, size_t pi, uint64_t now_ms)
{
    part *p = &s->parts[pi];
    if (p->state == P_RELEASED || p->uses == 0 || s->stream_taken == 0)
        return 0;
    if (--p->uses == 0) {
        part_release(s, pi);
    } else if (p->state == P_AVAILABLE && !p->parked) {
        s->partition_bytes -= p->bytes; /* its worker's store keeps it (and may spill it) */
        p->parked = 1;
    }
    s->stream_taken--;
    s->last_progress_ms = now_ms;
    check_finished(s);
    return 1;
}

void sb_sched_stream_starved(sb_sched *s)
{
    if (s->stream)
        s->stream_starved = 1;
}

int sb_sched_stream_release(sb_sched *s, const char *id, uint64_t now_ms)
{
    size_t pi;
    if (s->stream && s->stream_cache && sb_idmap_get(&s->part_ids, id, &pi))
        return cache_release(s, pi, now_ms);
    if (!s->stream || !sb_idmap_get(&s->part_ids, id, &pi) || s->parts[pi].consumer != DEALT ||
        s->parts[pi].state == P_RELEASED)
        return 0;
    part_release(s, pi);
    s->stream_taken--;
    s->last_progress_ms = now_ms;
    check_finished(s);
    return 1;
}

int sb_sched_stream_lost(sb_sched *s, const char *id)
{
    size_t pi;
    if (s->stream && s->stream_cache && sb_idmap_get(&s->part_ids, id, &pi)) {
        if (s->parts[pi].state == P_RELEASED || s->parts[pi].uses == 0)
            return 0;
        if (s->parts[pi].state != P_AVAILABLE) /* (mostly re-made already: worker_lost) */
            recover_partition(s, pi, 0);
        return 1;
    }
    if (!s->stream || !sb_idmap_get(&s->part_ids, id, &pi) || s->parts[pi].consumer != DEALT ||
        s->parts[pi].state == P_RELEASED)
        return 0;
    part *p = &s->parts[pi];
    p->consumer = NONE;          /* needed again: a re-run's copy is kept (record_part) */
    if (p->state != P_AVAILABLE) /* (still taken: the run has not succeeded) */
        recover_partition(s, pi, 0);
    return 1;
}

int sb_sched_stream_get(sb_sched *s, const char *id, sb_sched_stream_part *out)
{
    size_t pi;
    if (!s->stream || !sb_idmap_get(&s->part_ids, id, &pi) || s->parts[pi].state != P_AVAILABLE ||
        (s->parts[pi].consumer != NONE && s->parts[pi].consumer != DEALT) ||
        (s->stream_cache && s->parts[pi].uses == 0))
        return 0;
    part *p = &s->parts[pi];
    if (!s->stream_cache)
        p->consumer = DEALT;
    *out = (sb_sched_stream_part){
        .id = p->id, .address = s->workers[p->worker].address, .bytes = p->bytes, .rows = p->rows};
    return 1;
}

uint32_t sb_sched_stream_epochs(const sb_sched *s)
{
    return s->stream ? s->stream_epochs : 0;
}

size_t sb_sched_stream_waiting(const sb_sched *s, sb_sched_stream_holder *out, size_t max)
{
    size_t n = 0;
    for (uint32_t e = 0; s->stream && e < s->stream_epochs; e++)
        for (size_t k = 0; k < s->sq[e].len; k++) {
            const part *p = &s->parts[s->sq[e].q[s->sq[e].head + k]];
            if (p->state != P_AVAILABLE || p->worker == NONE)
                continue;
            const char *id = s->workers[p->worker].id;
            size_t i = 0;
            while (i < n && strcmp(out[i].worker_id, id) != 0)
                i++;
            if (i == n) {
                if (n == max)
                    continue;
                out[n++] = (sb_sched_stream_holder){.worker_id = id};
            }
            out[i].parts++;
            out[i].bytes += p->bytes;
        }
    return n;
}
