/* core.h — the scheduler core's own header (only the .c files beside it include it; every
 * other caller uses controller/sched/sched.h, which states the model). The core plans stages
 * into ops, keeps the lineage table of tasks and partitions, dispatches under the memory budget,
 * copies stragglers, drains sick workers, retries and recovers by lineage, and reports the
 * checkpoint and the figures. It owns every task, partition and worker record and the strings
 * they point to; it does no I/O.
 *
 * Its files, each one part of the model, over the one struct sb_sched defined here:
 *   lineage.c    the records: tasks, partitions, queues and FIFOs (helpers for the rest)
 *   plan.c       stages into ops, op 0's tasks, sb_sched_new and sb_sched_free
 *   workers.c    workers added and lost, attempts stopped, recovery by lineage, elasticity
 *   dispatch.c   tasks formed and found ready under the budget; early outputs; static mode
 *   early.c      the exchange's reduce tasks, and early reduces fed as map tasks finish
 *   stragglers.c drain, speculative copies, the earliest-finish rule
 *   poll.c       a worker's poll (sb_sched_assign, batches)
 *   complete.c   a task's report (sb_sched_complete, sb_sched_publish)
 *   report.c     stats, lists, the sink's parts in order, the scheduler's memory
 *   ckpt.c       the checkpoint
 *   stream.c     the stream sink's epochs and queues
 * Functions one file offers the others are named sc_<name> and declared at the end of this
 * header; the rest stay static in their file. */
#ifndef SB_SCHED_CORE_H
#define SB_SCHED_CORE_H

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

#define EARLY_MIN_BYTES (256u << 10) /* smallest partition target with early outputs */

/* A task: kept for the whole run (lineage), so kept small — issue 16 asks <= 256 bytes of
 * lineage per partition. Its id is not stored ("<pipeline_id>/s<op>-t<index>", sc_task_name);
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
    } in;               /* its input partitions (op > 0), sc_task_inputs() */
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
    uint8_t batched : 1;     /* its running attempt came in a batch (see poll.c) */
    uint8_t solo : 1;        /* its worker died while it was in a batch: never batched again */
    uint8_t made : 1;        /* a finished attempt's outputs are recorded (the rest: early ones) */
    uint8_t early_stale : 1; /* an attempt that published outputs early did not finish */
    uint8_t grants : 1;      /* its running attempt publishes early (see sc_early_wanted) */
    uint8_t chunked : 1;     /* ... charged one output at a time (sc_start_reserve) */
    uint8_t waiting : 1;     /* ... and waits for the next grant: it makes nothing until then */
    uint8_t pieces : 1;      /* its split's objects that errored alone were counted (once) */
    uint8_t open : 1;        /* an early reduce whose worker has not been told yet that its
                                inputs are closed (early.c); while its bucket's map
                                outputs may still come, it is in its op's xopens */
} task;

#define NO_COPY UINT32_MAX
#define NO_TASK UINT32_MAX /* a 32-bit task index that is none (sc_task_new stops below it) */

/* A speculative copy running beside its task (stragglers.c, "Speculative copies"). */
typedef struct {
    size_t task, worker;
    uint64_t reserved, started_ms; /* its reserved output estimate, when it started */
} copy_rec;

typedef struct {
    char *id, *pool, *address;
    uint32_t slots, running;
    int alive;
    uint32_t *op_slots;   /* static mode: its slots bound to the op's slot group (sc_static_bind) */
    uint32_t *op_running; /* its running tasks per op */
    char **releases;
    size_t nrel, caprel;
    sb_sched_cancel
        *cancels; /* its attempts no longer counted, still running there (sc_cancel_on) */
    size_t ncancel, capcancel;
    double *op_speed; /* per op: input bytes per ms of its successful tasks (EWMA); 0 unknown */
    size_t *run;      /* the tasks it runs (as the primary attempt or as a copy): for the
                         earliest-finish rule (sc_eft_defer) */
    size_t nrun, caprun;
    /* gpu pool (slots sharing one accelerator, sc_eft_defer): per op, input bytes per ms of the
     * accelerator's time (EWMA; a task's time counted from its start or the worker's previous
     * completion, whichever is later); 0 unknown. last_end_ms: its latest completion. */
    double *op_svc;
    uint64_t last_end_ms;
    /* sick-node drain (stragglers.c): its current run of slow tasks (count, when
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
    uint64_t
        batch_rows; /* ops > 0: the largest batchSize of its stages, 0 for none (sc_form_task) */
    double ratio;   /* largest output/input bytes ratio seen; 0 = not measured yet */
    size_t *queue;  /* FIFO of queued tasks (ring not needed: head index + compaction) */
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
    uint32_t *tis;        /* ops > 0: its tasks by index - first_index (sc_task_find) */
    size_t ntis, captis;
    uint64_t ok_ms_sum, ok_n;      /* successful attempts' durations by the scheduler's clock */
    uint64_t speculated, spec_won; /* copies started; copies that finished first */
    uint64_t cancelled;            /* attempts the workers were told to stop (sc_cancel_on) */
    uint64_t spec_scan_ms;         /* its last scan for a straggler to copy (sc_spec_candidate) */
    int spec_scanned;
    uint32_t group;    /* static mode: its slot group within its pool (sc_static_bind) */
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
    uint32_t *xopens; /* its open tasks (early.c) */
    size_t nxopens, capxopens;
    uint32_t *xbucket; /* per bucket, its open task (NO_TASK: none); NULL before the first */
    uint64_t xsettled; /* s->gen at its last sc_open_settle */
    uint64_t xlimit;   /* op 0 running a limit's map half: its rows (sc_limit_cut); 0 for none */
    const sb_stage_spec **sp; /* the stages its tasks run (a half's spec in place of the stage) */
    uint8_t pushed;           /* sp[nstages] is the next op's leading project (project_pushed) */
} op;

/* A stream's queue of one epoch (stream.c). */
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
    char *names; /* the task ids of sb_sched_assign's views (sc_task_name) */
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
    /* stream sink (sb_sched_config.stream; stream.c) */
    int stream;
    uint32_t stream_epochs, stream_open; /* epochs planned; the latest one let in */
    uint32_t stream_first;               /* the first epoch run (those before: not run) */
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
    /* a parquet sink's records schema inferred by the first sink task (sc_sink_gated) */
    int infer_schema;  /* the run infers one (sb_io_sink_infers_schema) */
    char *sink_schema; /* the schema, once a sink task reported it; NULL before */
    size_t infer_ti;   /* the sink task inferring it (while running), or NONE */
    /* assignment scratch */
    sb_sched_input *in_scratch;
    size_t in_scratch_cap;
    sb_sched_input *more_scratch; /* sb_sched_more_inputs' views */
    size_t more_scratch_cap;
    uint64_t early_reduces; /* sb_sched_stats.early_reduces */
    uint64_t gen; /* bumped by each accepted report and each worker gone or come (sc_open_settle) */
    size_t *pick_scratch; /* sc_form_task's picks */
    size_t pick_cap;
    int oom;
};

/* ---- functions the core's files share (by the file that defines them) ---- */

/* lineage.c */
/* sc_grow on an array member of s: 0, or -1 with s->oom set */
#define GROW(s, arr, cap, need)                                                                    \
    (sc_grow((void **)&(arr), &(cap), (need), sizeof *(arr)) == 0 ? 0 : ((s)->oom = 1, -1))
#define TASK_NAME_SUFFIX 36                    /* "/s" u32 "-t" u64 and the NUL */
#define TASK_NAME_MAX (512 + TASK_NAME_SUFFIX) /* pipeline_id is at most 512 bytes */
int sc_grow(void **arr, size_t *cap, size_t need, size_t elem);
void sc_set_failure(sb_sched *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sc_add_release(sb_sched *s, size_t w, const char *id);
void sc_set_waiting(sb_sched *s, task *t, int v);
void sc_part_drop_bytes(sb_sched *s, part *p);
void sc_part_release(sb_sched *s, size_t pi);
int sc_queue_push(sb_sched *s, op *o, size_t t);
int sc_fifo_push(sb_sched *s, op *o, size_t pi);
size_t sc_task_new(sb_sched *s, uint32_t opi, uint64_t index);
const char *sc_task_name(const sb_sched *s, const task *t, char *buf, size_t len);
size_t sc_task_find(const sb_sched *s, const char *id);
const uint32_t *sc_task_inputs(const task *t);
size_t sc_copy_worker(const sb_sched *s, const task *t);
void sc_copy_forget(sb_sched *s, task *t);

/* plan.c */
int sc_parse_part_id(const char *id, uint64_t *opi, uint64_t *tix);
void sc_limit_cut(sb_sched *s);

/* workers.c */
size_t sc_worker_find(const sb_sched *s, const char *id);
/* The running primary attempt `attempt` of task_id on worker_id (a call the worker makes while
 * it runs it): 1 with *w and *ti set; 0 when it is not that (an unknown task, a stale attempt,
 * another worker's: the call is ignored); -1 for an unknown worker (err names it, after
 * "scheduler: " and what, e.g. "early outputs from"). */
int sc_attempt_find(const sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                    const char *what, size_t *w, size_t *ti, sb_err *err);
void sc_run_add(sb_sched *s, size_t w, size_t ti);
void sc_run_del(sb_sched *s, size_t w, size_t ti);
void sc_cancel_on(sb_sched *s, size_t w, const task *t, uint32_t attempt);
void sc_cancel_copy(sb_sched *s, const task *t);
void sc_drop_copy(sb_sched *s, task *t);
void sc_promote_copy(sb_sched *s, task *t);
void sc_requeue_task(sb_sched *s, size_t ti, int rerun);
void sc_recover_partition(sb_sched *s, size_t pi, int depth);

/* dispatch.c */
int sc_op_finished(const sb_sched *s, size_t i);
int sc_inputs_available(const sb_sched *s, const task *t);
uint64_t sc_estimate(const sb_sched *s, const op *o, uint64_t in_bytes, size_t opi);
size_t sc_form_task(sb_sched *s, size_t i, int force, size_t w);
size_t sc_pop_ready(sb_sched *s, size_t i);
size_t sc_peek_ready(sb_sched *s, size_t i, uint64_t *in_bytes);
int sc_op_eligible(sb_sched *s, const worker *wk, size_t i);
int sc_early_safe(const sb_sched *s, const task *t);
int sc_early_wanted(const sb_sched *s, const task *t, uint64_t est, size_t w);
uint64_t sc_start_reserve(const sb_sched *s, const task *t, uint64_t est, size_t w, int *grants,
                          int *chunked);
int sc_grant_forced(const sb_sched *s, size_t ti);
void sc_start_task(sb_sched *s, size_t ti, size_t w, uint64_t now_ms);
int sc_sink_gated(const sb_sched *s, size_t k);
void sc_fill_task_view(sb_sched *s, size_t ti, int copy, sb_sched_task *out, size_t *scratch_used,
                       size_t *names_used);
size_t sc_downstream_work(const sb_sched *s);
void sc_static_bind(sb_sched *s, const char *pool);
int sc_static_full(const sb_sched *s, const worker *wk, size_t i);

/* early.c */
int sc_exchange_ready(const sb_sched *s, size_t i);
int sc_open_ready(const sb_sched *s, size_t i);
int sc_absorbing(const sb_sched *s, size_t ti);
void sc_open_settle(sb_sched *s, size_t i);
size_t sc_exchange_form(sb_sched *s, size_t i);

/* stragglers.c */
size_t sc_pool_healthy(const sb_sched *s, const char *pool);
void sc_drain_check(sb_sched *s, size_t w, size_t i, double v, uint64_t started_ms,
                    uint64_t now_ms);
size_t sc_spec_candidate(sb_sched *s, size_t w, uint64_t now_ms);
int sc_start_copy(sb_sched *s, size_t ti, size_t w, uint64_t now_ms);
int sc_eft_defer(const sb_sched *s, size_t w, size_t i, size_t ti, uint64_t now_ms);

/* complete.c */
void sc_task_stop_running(sb_sched *s, task *t);
int sc_record_part(sb_sched *s, size_t ti, size_t w, const sb_storage_output *out, sb_err *err);
void sc_check_finished(sb_sched *s);
void sc_task_errored(sb_sched *s, size_t ti, uint32_t times, const char *message);
uint32_t sc_lost_reports_max(const sb_sched *s);

/* report.c */
uint64_t sc_id_seq(const char *id);
int sc_order_key_valid(const char *key, size_t nops);
char *sc_order_key_format(const sb_sched *s, size_t k);

/* stream.c */
int sc_stream_setup(sb_sched *s, const sb_sched_config *cfg, const sb_storage_split *splits,
                    size_t nsplits, sb_storage_split **expanded, sb_err *err);
int sc_stream_push(sb_sched *s, size_t ti, size_t pi);
/* The epochs whose splits this run reads from the source (0 when none is left to run). */
uint32_t sc_stream_reads(const sb_sched *s);
void sc_stream_advance(sb_sched *s);
int sc_stream_gated(const sb_sched *s, size_t ti);
int sc_stream_holds(const sb_sched *s);
int sc_stream_finished(const sb_sched *s);

#endif
