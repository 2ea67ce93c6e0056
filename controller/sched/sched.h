/* sched.h — the streaming-batch scheduler core: the plan, the lineage table, dispatch under a
 * memory budget, retries, and recovery by lineage. It decides; it does no I/O.
 *
 * The controller (embedded in `streambatch run`, or the operator) feeds it events — workers
 * joining and leaving, workers asking for tasks, tasks completing — and carries out what it
 * returns: tasks to send, partitions to release. Time is passed in (now_ms), so the core is
 * deterministic and tested without processes. Not thread-safe: the controller serialises calls.
 *
 * Plan. Stages become fused groups; in streaming mode adjacent stages of the same pool (cpu or
 * gpu) are fused into one group, whose tasks run the stages back to back with no transfer. The
 * API says "group" (sb_sched_group_stats); inside sched.c and in the wire's task ids a group is
 * still indexed as "op" (s<op>-t<task>-p<seq>), and "op" in this essay means such a group: not
 * a stage's function (worker/ops) and not the Kubernetes operator.
 * Op 0 also reads the source (one task per split); the last op also writes the sink. An op's
 * task reads input partitions of the previous op (coalesced up to the target partition size)
 * and yields output partitions "s<op>-t<task>-p<seq>" — the same ids when a task is re-run.
 *
 * Dispatch. A worker of a pool asks for up to N tasks; eligible ops of that pool are tried
 * downstream first (drain the pipeline before admitting more input). A task is admitted when
 * the bytes in flight (partitions held by workers and not yet consumed, plus the estimated
 * output of running tasks) plus its estimated output fit the memory budget; when nothing is
 * running at all, one task is admitted regardless, so the pipeline cannot deadlock on a full
 * budget. An op whose output/input ratio is not yet measured runs one probe task per worker
 * until it is (so a slow worker's probe does not hold the pipeline back): the first at ratio 1,
 * the others only when their whole input fits the budget on top (ratio 2); estimates then use
 * the largest ratio seen. So the bytes of partitions in flight stay within budget + one
 * partition (while an op's ratio is unmeasured, up to one partition more per probe beyond
 * ratio 2).
 *
 * Stragglers (sched.c): tail sizing (an op's last tasks sized by worker speed), earliest finish
 * at the tail (a slow worker leaves an op's last tasks to faster ones that would end them
 * sooner), speculative copies of slow tasks at an op's tail (sink-writing ones too) and of a
 * suspect (silent) worker's tasks at once, and draining of sick workers — a
 * worker persistently far slower than its pool gets no new tasks and is reported
 * (sb_sched_drains_take) so the controller retires it once it is removable and the backend replaces
 * it. Modes: `staged` runs an op only after the previous one finished (no budget: the stores
 * spill); `static` binds each slot of a pool to one op (to a group of ops, round robin, when the
 * pool has fewer slots than ops), bound again whenever a worker joins, is lost or is drained
 * (static_bind in sched.c).
 *
 * Recovery. When a worker is lost, its running tasks are re-queued, and every partition that
 * lived only there and is still needed is re-produced by re-running its producer task —
 * recursively up the lineage when that task's own inputs were already released (source tasks
 * re-read their split). Nothing else re-runs. Op errors are retried up to maxTaskRetries (data
 * errors, SB_SCHED_ERROR_DATA, are not: they would fail again; permanent ones,
 * SB_SCHED_ERROR_PERMANENT, are not either, and fail the pipeline at once); then the task's inputs
 * count as errored partitions (listed with stage, input and error by sb_sched_errored_list), and
 * more than maxErroredPartitions fails the pipeline with a message naming the stage, the task, its
 * input and the op's error.
 *
 * Checkpoint and resume (controller failover). A split is committed when every task that
 * descends from it is done (errored and skipped tasks count as done) and none of its
 * partitions still waits for a consumer, closed under coalescing: splits whose partitions met
 * in one task form one component, committed only as a whole. sb_sched_checkpoint() computes
 * that set on demand (union-find over the lineage) with the sink parts it produced; a new
 * leader passes it back as sb_sched_resume: committed splits' source tasks do not run again
 * (they count as done), their sink parts are part of the result, and tasks of ops > 0 are
 * numbered from epoch * SB_SCHED_EPOCH_STRIDE, so the new run's partition and sink part ids
 * ("s<op>-t<task>-p<seq>") never collide with those of an earlier leader.
 *
 * Memory: the scheduler owns everything it allocates; views it returns (tasks, stats) stay
 * valid until the next call that changes it. Strings passed in are copied.
 */
#ifndef SB_SCHED_SCHED_H
#define SB_SCHED_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "metrics/metrics.h"
#include "spec/pipeline.h"
#include "storage/storage.h"

typedef struct sb_sched sb_sched;

#define SB_SCHED_EPOCH_STRIDE 1000000000ULL /* task indices of ops > 0 start at epoch * stride */

/* Where an earlier leader left the pipeline (see "Checkpoint and resume" above). Borrowed
 * during sb_sched_new() only. */
typedef struct sb_sched_resume {
    uint32_t epoch;               /* 0 on a first run; +1 at every leader that resumes it */
    const char *committed_splits; /* split indices already committed, as ranges "0-41,45";
                                     NULL/"" none */
    const sb_storage_output
        *parts; /* the sink parts those splits produced (kept in the manifest) */
    size_t nparts;
    const char *sink_schema; /* the records schema those parts were written by, NULL/"" none */
} sb_sched_resume;

typedef struct sb_sched_config {
    const sb_pipeline *pipeline;   /* read during sb_sched_new() only */
    const char *pipeline_id;       /* prefix of task ids, e.g. "default/wordcount" */
    int no_fusion;                 /* 1: one op per stage even in streaming mode */
    int no_tail_sizing;            /* 1: an op's last tasks are not sized by worker speed
                                      (task_target in sched.c; for ablations and tests) */
    int no_speculation;            /* 1: no speculative copies (ablations) */
    int no_drain;                  /* 1: slow workers are never drained (ablations) */
    int no_eft;                    /* 1: at an op's tail a slow worker takes a task even when a
                                      faster one would finish it sooner (ablations) */
    int no_early;                  /* 1: no early outputs (sb_sched_publish; ablations) */
    int no_early_reduce;           /* 1: an exchange's reduce tasks wait for the barrier even
                                      where they may start early (sb_sched_more_inputs) */
    int no_fuse_choices;           /* 1: a stage that allows more than one shape (placement) is
                                      an op of its own, so sb_sched_stage_move can move it */
    uint64_t start_ms;             /* the clock at creation (the stall watchdog starts there) */
    const sb_sched_resume *resume; /* NULL: a fresh run */
    /* A stream:// sink (see "Stream sink" below): the last op's outputs stay in the workers'
     * stores for consumers instead of being written out. stream_epochs: how many times the
     * source is read (0 is 1); stream_seed: with stream_shuffle, each epoch's splits are
     * shuffled by (seed, epoch). Not with resume. stream_cache (sink.args.cacheEpochs): the
     * source is read once; epoch 0's partitions are kept and dealt again in every later epoch,
     * in an order shuffled by (seed, epoch) with stream_shuffle. stream_first: the epochs before
     * it are not run (a new operator leader's: every rank ended them under the one before, as
     * status.stream.epochsEnded says); they count as done, and the first epoch run reads the
     * source (and fills the cache) in their stead. */
    int stream;
    int stream_cache;
    uint32_t stream_epochs;
    uint32_t stream_first;
    int stream_shuffle;
    uint64_t stream_seed;
    /* per stage (njoin_right entries; NULL: none), a join's right side bytes when the plan
     * found it at or above broadcastBelow: that join is exchanged by key (exchange.h) */
    const uint64_t *join_right;
    size_t njoin_right;
} sb_sched_config;

/* A partition a task reads. */
typedef struct sb_sched_input {
    const char *id;
    const char *address; /* Data service of the worker that holds it */
    const char *worker_id;
    uint64_t bytes;
} sb_sched_input;

/* A task to run (a view, valid until the next mutating call). */
typedef struct sb_sched_task {
    const char *task_id; /* "<pipeline_id>/s<op>-t<index>" */
    uint32_t op;
    uint64_t index;
    uint32_t attempt;
    const sb_stage_spec *const *stages; /* the fused stages, in order */
    size_t nstages;
    const sb_sched_input *inputs;
    size_t ninputs;
    const char *split; /* op 0: the split to read, else NULL */
    int writes_sink;   /* last op: outputs go to the sink */
    uint64_t target_bytes;
    int publish_early; /* report each output when written (sb_sched_publish) */
    /* a parquet sink of records (sb_sched_sink_schema_set): the run's records schema, NULL while
     * unknown; infer_sink_schema: this task infers it (the other sink tasks wait meanwhile) */
    const char *sink_schema;
    int infer_sink_schema;
    int inputs_open; /* an early reduce: more inputs come (sb_sched_more_inputs) */
} sb_sched_task;

/* What a task attempt cost, as the worker measured it (may be NULL). */
typedef struct sb_sched_metrics {
    double wall_seconds, cpu_seconds;
    uint64_t rows_in; /* records the task read (a source task's only count of its input) */
    /* a parquet source task: bytes fetched, row groups read and skipped by pushdown, and the
     * chunk bytes skipped (pqread.h sb_pq_scan_stats) */
    uint64_t source_bytes_read, row_groups_read, row_groups_skipped, source_bytes_skipped;
    uint64_t spilled_bytes;             /* written by the task's ops to their own spill files */
    uint64_t pages_read, pages_skipped; /* parquet: pages fetched / skipped by the page index */
    uint64_t outside, outside_bytes;    /* inputs too large for the worker's room in its budget,
                                           read outside it, and their bytes */
} sb_sched_metrics;

typedef enum {
    SB_SCHED_OK,
    SB_SCHED_ERROR,           /* the op failed: retried up to maxTaskRetries */
    SB_SCHED_INPUT_LOST,      /* an input could not be fetched: recovered, then re-run */
    SB_SCHED_ERROR_DATA,      /* the op failed on its data (invalid JSON or UTF-8, a record too
                                 large): a retry would fail the same way, so the partition is
                                 errored at once, without retries */
    SB_SCHED_ERROR_PERMANENT, /* the failure does not depend on the data and can only recur (a
                                 bad argument found at op init, a plugin ABI mismatch, an op
                                 this build lacks): no retries, and the pipeline fails at once */
} sb_sched_status;

#define SB_SCHED_ERRORED_KEEP 100 /* errored partitions listed (the count goes on) */

typedef enum { SB_SCHED_RUNNING, SB_SCHED_SUCCEEDED, SB_SCHED_FAILED } sb_sched_state;

#define SB_SCHED_DURATION_BUCKETS SB_METRICS_TASK_NBUCKETS

/* An op's figures from the tasks that ran in one pool (a stage a re-plan moved to another
 * shape is measured there from its own tasks). */
typedef struct sb_sched_pool_figures {
    uint64_t rows_in, rows_out;
    uint64_t timed_tasks; /* successful attempts with a wall time */
    double task_seconds;  /* their wall times */
} sb_sched_pool_figures;

typedef struct sb_sched_group_stats {
    const char *name;                 /* stage names joined with '+' */
    const char *pool;                 /* the pool it runs on now */
    sb_sched_pool_figures by_pool[2]; /* successful attempts on cpu [0] and gpu [1] workers */
    uint64_t tasks_total, tasks_done, tasks_running, tasks_queued;
    uint64_t retries, recovered, errored;
    uint64_t resumed; /* source tasks of committed splits a resume skipped (in tasks_done) */
    uint64_t rows_in, bytes_in, rows_out, bytes_out;
    uint64_t spilled_bytes;          /* successful attempts' ops wrote to their spill files */
    uint64_t outside, outside_bytes; /* successful attempts' inputs read outside the budget */
    uint64_t queued_input_bytes;     /* produced upstream, not yet in a task */
    double task_seconds;             /* sum of completed task wall times reported */
    double cpu_seconds;              /* sum of completed task CPU times reported */
    uint64_t attempts;               /* task attempts started (re-runs included) */
    uint64_t failed_attempts;        /* attempts that ended with an error or a lost input */
    uint64_t speculated;             /* speculative copies of stragglers started (sched.c) */
    uint64_t spec_won;               /* of those, copies that finished before the original */
    uint64_t cancelled;              /* losing or stale attempts their workers were told to stop */
    uint64_t timed_tasks;            /* successful attempts with a wall time (duration_buckets) */
    /* successful attempts' wall times per bucket: bucket b counts those <= the b-th bound of
     * sb_metrics_task_buckets (lib/metrics/metrics.h) and > the one before */
    uint64_t duration_buckets[SB_SCHED_DURATION_BUCKETS];
    double backpressure_seconds; /* time a task of this op was ready but the memory budget held
                                    it back (up to the latest call's clock) */
    int held;                    /* held back by the budget right now */
} sb_sched_group_stats;

typedef struct sb_sched_stats {
    uint64_t budget;
    uint64_t in_flight_bytes;      /* partitions held for consumers + running estimates */
    uint64_t partition_bytes;      /* partitions held for consumers (actual bytes) */
    uint64_t peak_partition_bytes; /* highest partition_bytes seen */
    uint64_t max_partition_bytes;  /* largest partition produced */
    uint64_t tasks_run;            /* task attempts started */
    uint64_t tasks_rerun;          /* attempts caused by lost workers or lost inputs */
    uint64_t tasks_batched;        /* tasks given past a slot's first in a poll (batched polls) */
    uint64_t early_outputs;        /* outputs taken while their task ran (sb_sched_publish) */
    uint64_t early_reduces;        /* reduce tasks started before their map op finished
                                      (sb_sched_more_inputs) */
    uint64_t partitions_recovered; /* producer re-runs queued to re-make lost partitions */
    uint64_t partitions_lost;      /* still-needed partitions lost with a worker or a fetch */
    uint64_t sink_parts, sink_rows, sink_bytes;
    /* parquet sources, over successful source tasks (sb_sched_metrics) */
    uint64_t source_bytes_read, row_groups_read, row_groups_skipped, source_bytes_skipped;
    uint64_t pages_read, pages_skipped; /* pages of read row groups, by the page index */
    size_t workers;
    uint64_t workers_drained; /* workers drained as persistently slow (sick nodes) */
} sb_sched_stats;

/* NULL + err on an invalid config, including a resume whose ranges do not parse (the message
 * names the bad piece), that has committed splits at epoch 0, or whose parts are not
 * "s<op>-t<task>-p<seq>" ids of committed splits and earlier epochs. */
sb_sched *sb_sched_new(const sb_sched_config *cfg, const sb_storage_split *splits, size_t nsplits,
                       sb_err *err);
void sb_sched_free(sb_sched *s);

size_t sb_sched_group_count(const sb_sched *s);
/* Pools that have ops ("cpu", "gpu"); *n set. */
const char *const *sb_sched_pools(const sb_sched *s, size_t *n);

/* The pool ("cpu" / "gpu") op runs on now, or NULL when there is no such op. */
const char *sb_sched_group_pool(const sb_sched *s, uint32_t op);

/* Moves a stage of a running pipeline to another pool (a re-plan placed it there): its op's
 * queued and later tasks, re-runs and speculative copies go to workers of that pool, whose
 * tasks name it (sb_sched_task.pool); attempts running on the old pool finish there and count
 * (partition ids are the same whoever makes them). The stage must allow the shape (its
 * placement) and be an op of its own (sb_sched_config.no_fuse_choices). Returns 1 when moved,
 * 0 when it runs there already, -1 with err when it cannot move (nothing changed). */
int sb_sched_stage_move(sb_sched *s, size_t stage, const char *pool, sb_err *err);

/* Worker `id` publishes outputs early and waits for grants when a task asks it to
 * (RegisterRequest.early_outputs): only its tasks are charged one output at a time, since a
 * worker that ignores Task.publish_early would make a task's whole output on one grant. */
void sb_sched_worker_set_early(sb_sched *s, const char *id, int on);

/* A worker joined (or re-registered with `held` partitions it still has). */
int sb_sched_worker_add(sb_sched *s, const char *id, const char *pool, const char *address,
                        uint32_t slots, const sb_storage_output *held, size_t nheld,
                        uint64_t now_ms, sb_err *err);
/* A worker is gone (exited, unreachable, missed heartbeats; `why` says so in messages, NULL
 * is fine): recovery starts. Its running tasks are re-queued, each losing one of its
 * maxTaskRetries; a task out of retries errors with the worker and why. Unknown ids are
 * ignored. */
void sb_sched_worker_lost(sb_sched *s, const char *id, const char *why, uint64_t now_ms);

/* Up to max tasks for the worker (its free slots), written to out[]. Returns how many. */
size_t sb_sched_assign(sb_sched *s, const char *worker_id, size_t max, uint64_t now_ms,
                       sb_sched_task *out);
/* The same for a worker that runs up to `batch` tasks per free slot one after another and
 * reports them on its next poll (PollTasksRequest.batch): past the first task per slot, only
 * queued tasks of an op measured short (mean wall time < 5 ms), about 10 ms of work per slot,
 * and only while a batch's worth more is queued (sched.c, "batched polls"). out[] holds
 * min(256, max * batch). batch <= 1 is sb_sched_assign. */
size_t sb_sched_assign_batch(sb_sched *s, const char *worker_id, size_t max, size_t batch,
                             uint64_t now_ms, sb_sched_task *out);

/* Outputs of a task that still runs (sb_sched_task.publish_early): each becomes a partition the
 * next op can take now, and leaves the task's reserve for the budget. The final report
 * (sb_sched_complete) lists them again with the rest. Such a task is charged one output
 * partition at a time: *wait = 1 says the budget has no room for its next one yet, so it must
 * make nothing more and ask again (nouts may be 0) until *wait = 0. 1 accepted (held as
 * available on that worker); 0 not (a stale or speculative attempt, or a task that may not
 * publish early: its final report decides; *wait = 0); -1 with err for an unknown worker or
 * out of memory. */
int sb_sched_publish(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                     const sb_storage_output *outs, size_t nouts, uint64_t now_ms, int *wait,
                     sb_err *err);

/* Early reduces. A reduce task of an exchange stage whose op allows it (exchange.h,
 * sb_exchange_early) may start before its map op finished: when every map task still to end is
 * already running, a slot that would idle takes it with its bucket's map outputs made so far
 * (sb_sched_task.inputs_open). Its worker, once it has read the `have` inputs it was given, asks
 * here for the rest: *more (nmore views, valid until the next mutating call) are the map outputs
 * of its bucket finished since (in the order they finished; in map task order among those
 * taken together); *closed = 1 once no more can come (the map op
 * finished), and only then may the task's ops finish. 1 answered (nmore may be 0: ask again);
 * 0 the attempt no longer counts (stale, or handed back because map work waits for a slot it
 * holds, or `have` is past its inputs: it is queued again, and the worker stops it without a
 * report); -1 with err (an unknown worker, out of memory). */
int sb_sched_more_inputs(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                         uint32_t have, uint64_t now_ms, const sb_sched_input **more, size_t *nmore,
                         int *closed, sb_err *err);

/* A task finished. Returns 1 if accepted, 0 if stale (unknown task, old attempt, or not running
 * on that worker: the worker should drop its outputs, which are queued for release), -1 with
 * err on bad input. lost/nlost: with SB_SCHED_INPUT_LOST, the inputs that could not be read. */
int sb_sched_complete(sb_sched *s, const char *worker_id, const char *task_id, uint32_t attempt,
                      sb_sched_status status, const char *message, const sb_storage_output *outs,
                      size_t nouts, const char *const *lost, size_t nlost,
                      const sb_sched_metrics *metrics, uint64_t now_ms, sb_err *err);

/* An object of a source split that errored alone: an image source groups several small images
 * per split, and one the reader cannot decode is skipped by the worker and reported with the
 * task's rows (CompleteTaskRequest.errored_pieces) rather than taking the good ones with it. */
typedef struct sb_sched_piece {
    const char *path;  /* the object's path or URI */
    const char *error; /* the reader's message (redacted here before it is shown) */
} sb_sched_piece;

/* sb_sched_complete for a task whose split's objects pieces[0..npieces) errored alone (status
 * OK; ignored otherwise): once the report is accepted each counts as one errored partition,
 * listed by sb_sched_errored_list as "split N object PATH", once per task whatever attempts or
 * lineage re-runs report them again; past maxErroredPartitions the pipeline fails. */
int sb_sched_complete_pieces(sb_sched *s, const char *worker_id, const char *task_id,
                             uint32_t attempt, sb_sched_status status, const char *message,
                             const sb_storage_output *outs, size_t nouts, const char *const *lost,
                             size_t nlost, const sb_sched_metrics *metrics,
                             const sb_sched_piece *pieces, size_t npieces, uint64_t now_ms,
                             sb_err *err);

/* Records schema inference for a parquet sink (lib/parquet/records.h; the run infers one when
 * sb_io_sink_infers_schema says so): the first sink task to start gets infer_sink_schema and the
 * other sink tasks wait until its accepted report brings the schema (a JSON list; "[]" when its
 * partitions were typed), which the controller passes here after sb_sched_complete accepted it;
 * every later sink task carries it (sb_sched_task.sink_schema). 1 set, 0 ignored (no inference,
 * already set, empty), -1 out of memory. The checkpoint keeps it (sb_sched_sink_schema). */
int sb_sched_sink_schema_set(sb_sched *s, const char *schema);
const char *sb_sched_sink_schema(const sb_sched *s);

/* Partition ids the worker may free now (the list is handed over: the caller frees each string
 * and the array). */
size_t sb_sched_take_releases(sb_sched *s, const char *worker_id, char ***ids);

/* Cancels. An attempt that no longer counts but may still run on a live worker — the loser of a
 * speculative copy's race (the primary when its copy finished first, the copy when the primary
 * did), a copy whose task errored for good, a running attempt of a task handed out again — is
 * queued for its worker, which stops it (PollTasksReply.cancel): its slot was given back here
 * already, and its report, should one come, is stale as before. */
typedef struct sb_sched_cancel {
    char *task_id; /* malloc'd */
    uint32_t attempt;
} sb_sched_cancel;
/* The worker's queued cancels, handed over (free with sb_sched_cancels_free); *out NULL when
 * none. */
size_t sb_sched_take_cancels(sb_sched *s, const char *worker_id, sb_sched_cancel **out);
/* 1 when the worker has cancels queued (a held poll of its is answered for them). */
int sb_sched_cancels_pending(const sb_sched *s, const char *worker_id);
void sb_sched_cancels_free(sb_sched_cancel *v, size_t n);

sb_sched_state sb_sched_state_get(const sb_sched *s, const char **failure);

void sb_sched_get_stats(const sb_sched *s, sb_sched_stats *out);
/* Per-op statistics; i < sb_sched_group_count(). */
void sb_sched_get_group_stats(const sb_sched *s, size_t i, sb_sched_group_stats *out);

/* The errored partitions so far, in the order they errored: at most SB_SCHED_ERRORED_KEEP are
 * listed (*n), *total counts them all (may be NULL). A view, valid until the next mutating call. */
const sb_storage_errored *sb_sched_errored_list(const sb_sched *s, size_t *n, uint64_t *total);

/* The sink parts committed so far, in order of completion; with execution.preserveOrder in
 * input order instead (by lineage: source split, then each op's output sequence number; every
 * task of op > 0 then reads exactly one partition, so a part holds the records of one input
 * partition, in order); *n set. */
const sb_storage_output *sb_sched_sink_parts(const sb_sched *s, size_t *n);

/* The checkpoint now: the largest set S of splits whose every descendant task is done, closed
 * under coalescing (a sink part whose lineage reaches a split outside S makes that whole
 * connected component uncommitted), as ranges (malloc'd string), and every sink part that
 * descends from S (malloc'd array, ids malloc'd; free with sb_sched_parts_free). Resumed
 * splits/parts are part of it. 0, or -1 + err (out of memory; nothing to free then). */
int sb_sched_checkpoint(const sb_sched *s, char **ranges, sb_storage_output **parts, size_t *nparts,
                        sb_err *err);
/* How many bytes part p takes in the caller's encoding of a checkpoint. */
typedef uint64_t (*sb_sched_part_bytes_fn)(const sb_storage_output *p, void *ctx);
/* The same, at most about max_bytes long (0: no limit) — the operator keeps it in the Pipeline's
 * status, which the API server refuses past ~1.5 MiB: parts cost part_bytes(p, ctx), a split
 * its index and a separator in the ranges. The splits an earlier leader committed are kept as
 * one block, first (when that block alone does not fit, nothing is committed); then whole
 * components in order of their first split, up to the first that does not fit. A split left
 * out is run again by a leader that resumes from this checkpoint (its parts are written again:
 * the sink's writes are idempotent), so progress past the limit is redone, nothing is lost.
 * *omitted (may be NULL): committed splits left out. */
int sb_sched_checkpoint_within(const sb_sched *s, uint64_t max_bytes,
                               sb_sched_part_bytes_fn part_bytes, void *ctx, char **ranges,
                               sb_storage_output **parts, size_t *nparts, size_t *omitted,
                               sb_err *err);
void sb_sched_parts_free(sb_storage_output *parts, size_t n);

/* 1 if the worker may be removed now: alive, no running task, holds no partition still needed
 * (unknown or lost workers: 0). */
int sb_sched_worker_removable(const sb_sched *s, const char *worker_id);

/* A worker drained as a sick node (sched.c, "Draining sick workers"): a view, valid until the
 * scheduler is freed. */
typedef struct sb_sched_drain {
    const char *worker_id, *pool;
    const char *op; /* the stage(s) it was slow on */
    double speed;   /* its last slow task's input bytes per second */
    double median;  /* the median speed of the rest of its pool then (bytes per second) */
} sb_sched_drain;

/* Workers drained since the last call, in order, once each: up to max written to out[]. */
size_t sb_sched_drains_take(sb_sched *s, sb_sched_drain *out, size_t max);
/* Alive workers that are draining now (0: nothing to retire; O(1)). */
size_t sb_sched_draining_count(const sb_sched *s);
/* 1 if the worker is alive and draining (retire it when sb_sched_worker_removable says so). */
int sb_sched_worker_draining(const sb_sched *s, const char *worker_id);

/* A worker gone silent (no heartbeat, poll or report for a while; the controller decides, see
 * docs/scheduling.md "Frozen workers") is suspect (on=1) until it is heard from again (on=0):
 * its running tasks may be copied at once, in the tail or not. Suspect is not lost: nothing is
 * re-queued or re-made by lineage, and its attempts still count when they finish first. Unknown
 * or lost ids are ignored. */
void sb_sched_worker_suspect(sb_sched *s, const char *worker_id, int on);
/* 1 if the worker is alive and suspect. */
int sb_sched_worker_suspect_get(const sb_sched *s, const char *worker_id);

/* Demand of a pool: tasks queued (ready to run, plus the tasks the partitions waiting in its
 * ops' input queues will form, at least one when any waits) and running for its ops, and
 * whether its ops can still get work (1) or are all finished, or the pipeline ended (0). */
void sb_sched_pool_demand(const sb_sched *s, const char *pool, uint64_t *queued, uint64_t *running,
                          int *active);

/* What the lineage table holds (tasks, partitions, their ids and index maps, the splits and the
 * sink list), counted from the structures with an estimate of malloc's per-block overhead.
 * O(tasks + partitions): for reports and benchmarks, not for every call. */
typedef struct sb_sched_memory {
    uint64_t tasks, parts, sink_parts; /* entries */
    uint64_t task_bytes;  /* task array, ids, input/output index arrays, error messages */
    uint64_t part_bytes;  /* partition array and ids */
    uint64_t sink_bytes;  /* sink part list, ids, producer index */
    uint64_t map_bytes;   /* id -> index hash maps (tasks, partitions, sink parts, workers) */
    uint64_t split_bytes; /* the plan's encoded splits */
    uint64_t pool_bytes;  /* the pool the ids and splits are packed in: its block headers and
                             the room not filled yet (the strings count above) */
    uint64_t total_bytes; /* all of the above */
} sb_sched_memory;
void sb_sched_memory_get(const sb_sched *s, sb_sched_memory *out);

/* If nothing progressed for stall_ms, writes which op is stuck and why into buf and returns 1;
 * else 0. */
int sb_sched_stalled(const sb_sched *s, uint64_t now_ms, uint64_t stall_ms, char *buf, size_t len);

/* ---- Stream sink (sb_sched_config.stream) --------------------------------------------------
 * The last op's outputs are partitions like any other: held by a worker, counted against the
 * memory budget until released, re-made by lineage while nobody has taken them. They wait in a
 * queue per epoch, in the order they were made, until the controller's dealer (stream/deal.h) takes
 * them for the consumers. Epoch e is the plan's splits read once more (op 0's tasks
 * e * nsplits ..); its source tasks start only when everything of epoch e - 1 has been made, so
 * no task mixes rows of two epochs. The run succeeds once every epoch has been made and every
 * partition released (sb_sched_stream_release). A partition taken and then lost with its worker
 * is re-made only when its consumer says it could not read it (sb_sched_stream_lost): one that
 * read it first needs nothing more.
 *
 * With stream_cache, epoch 0 alone runs the pipeline; once all of it has been made, every later
 * epoch's queue is those partitions again (shuffled per epoch with a seed). A partition is then
 * released by its last epoch only: an epoch that releases it before leaves it with its worker,
 * no longer counted against the memory budget (the worker's store spills it to disk under its
 * own budget), and a worker lost with kept partitions has them re-made by lineage at once. */

/* A partition of the stream (a view, valid until the next mutating call). */
typedef struct sb_sched_stream_part {
    const char *id, *address;
    uint64_t bytes, rows;
} sb_sched_stream_part;

/* Takes the oldest partition of epoch `epoch` that is available: 1 (filled in), 0 none now. */
int sb_sched_stream_take(sb_sched *s, uint32_t epoch, sb_sched_stream_part *out);
/* 1 when nothing more will come for the epoch (every partition of it made and taken), 0 not
 * yet, -1 not a stream or no such epoch. */
int sb_sched_stream_done(sb_sched *s, uint32_t epoch);
/* A taken partition has been consumed: its worker frees it. 1 released, 0 unknown id or not
 * taken. */
int sb_sched_stream_release(sb_sched *s, const char *id, uint64_t now_ms);
/* The dealer's consumers are stuck: every row of the partitions taken is dealt, a rank asks for
 * more, and the budget is full of partitions its consumers pin with rows in their shuffle
 * windows (a few unconsumed rows hold a whole partition), which they cannot yield without more.
 * Then one task runs past the budget, as when nothing runs anywhere, instead of a deadlock. */
void sb_sched_stream_starved(sb_sched *s);
/* A taken partition could not be read by its consumer (its worker was lost): it is re-made by
 * lineage where it is gone, and sb_sched_stream_get answers it once it is there again. 1, or 0
 * for an unknown id or one not taken. */
int sb_sched_stream_lost(sb_sched *s, const char *id);
/* A taken partition, when it is available (re-made after sb_sched_stream_lost): 1 (filled in),
 * 0 not (yet). */
int sb_sched_stream_get(sb_sched *s, const char *id, sb_sched_stream_part *out);
/* Epochs of the stream (0 when the sink is not a stream). */
uint32_t sb_sched_stream_epochs(const sb_sched *s);
/* The first epoch this run makes (sb_sched_config.stream_first, at most the epochs). */
uint32_t sb_sched_stream_first(const sb_sched *s);
/* The stream's backlog by the worker holding it: partitions made and not taken yet (a worker
 * lost with them means re-making them by lineage). */
typedef struct sb_sched_stream_holder {
    const char *worker_id; /* valid until the next mutating call */
    uint64_t parts, bytes;
} sb_sched_stream_holder;
/* Fills up to max holders (workers with at least one such partition); returns how many. */
size_t sb_sched_stream_waiting(const sb_sched *s, sb_sched_stream_holder *out, size_t max);

#endif
