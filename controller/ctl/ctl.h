/* ctl.h — the controller's Control service: the scheduler core (sched/sched.h) behind gRPC.
 *
 * Workers register, long-poll for tasks (PollTasks is held open until there is work or its
 * wait elapses), report completions and heartbeat. A timer thread expires polls, declares
 * workers lost when they fall silent for heartbeat_timeout_ms (a stopped process counts), and
 * watches for stalls. The same service runs embedded in `streambatch run` and in the operator;
 * only the backend that starts workers differs.
 *
 * Storage jobs (lib/storage/jobs.h). With storage_on_workers the controller never opens user
 * storage: it starts without a plan, queues a PLAN job and then a PREPARE job for the first live
 * worker that polls, and creates the scheduler from the splits the worker reported (in plan order,
 * with the resume) only when both succeeded; workers that register meanwhile are added then.
 * A job whose worker is lost goes to the next worker (attempt + 1); a job that fails fails the
 * pipeline with "<what> on worker <id>: <error>". The final COMMIT or ABORT is queued the same
 * way by the caller (sb_ctl_storage_start/poll/run) before it shuts the workers down.
 *
 * Who may call. sb_ctl_start() refuses options without credentials (rpc/auth.h): every call
 * must carry the pipeline's worker token. Each worker registers with a session it drew
 * (RegisterRequest.session); its polls, completions and heartbeats must carry it, so another
 * holder of the token cannot complete or poll for it (PERMISSION_DENIED), and a live worker's
 * id cannot be registered again under another session. At most max_workers are live at once.
 *
 * Threads: gRPC handlers and the timer thread share one mutex around the scheduler. Backends
 * report process exits with sb_ctl_worker_exited(). Memory: the controller copies what it
 * keeps from the config; snapshots are written into caller-provided structs.
 */
#ifndef SB_CTL_CTL_H
#define SB_CTL_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "storage/ckptjob.h"
#include "storage/jobs.h"
#include "controller/sched/stream/deal.h"
#include "controller/sched/sched.h"
#include "core/err.h"
#include "rpc/rpc.h"

typedef struct sb_ctl sb_ctl;

#define SB_CTL_DEFAULT_MAX_WORKERS 1024

typedef struct sb_ctl_config {
    const sb_pipeline *pipeline;
    const char *pipeline_id;   /* "namespace/name" */
    const char *pipeline_json; /* the manifest as JSON, handed to workers at registration */
    const char *sink_tag;      /* sink.mode append: the run's part tag (sinkmode.h); NULL: none */
    const sb_storage_split *splits;
    size_t nsplits;
    const char *listen_addr;        /* default "127.0.0.1:0" */
    uint32_t heartbeat_interval_ms; /* default 500 */
    uint32_t heartbeat_timeout_ms;  /* default 5000 */
    int no_fusion;
    int no_fuse_choices; /* sb_sched_config.no_fuse_choices (the operator, when it plans) */
    int no_tail_sizing, no_speculation, no_drain,
        no_eft,          /* sb_sched_config's straggler switches (ablations; run.h: SB_SCHED_OFF) */
        no_early;        /* sb_sched_config.no_early (ablations) */
    int no_early_reduce; /* sb_sched_config.no_early_reduce (ablations) */
    const sb_sched_resume *resume; /* NULL: a fresh run; else passed to sb_sched_new() (copied
                                      when storage_on_workers defers it) */
    int storage_on_workers;        /* 1: ignore splits; plan the source and prepare the sink on a
                                      worker (the pipeline must then outlive the controller) */
    uint32_t max_workers;          /* live workers at most: a registration past it is refused
                                      RESOURCE_EXHAUSTED (0: SB_CTL_DEFAULT_MAX_WORKERS) */
    int stream;                    /* a stream:// sink: consumers read it (Control.StreamNext,
                                      sched/stream/deal.h); epochs, and each epoch's splits shuffled
                                      by the seed when stream_shuffle (sb_sched_config) */
    uint32_t stream_epochs;
    uint32_t stream_first; /* the epochs before it ended under an earlier leader: not run */
    int stream_shuffle;
    uint64_t stream_seed;
    const char *resume_plan_hash; /* with resume: the plan hash its checkpoint was taken against
                                     (NULL/"": unknown); a plan that hashes otherwise (the
                                     source changed, so split indices name other data) runs
                                     everything again at the resume's epoch */
    int ckpt_load; /* with storage_on_workers: read the checkpoint log first (a CKPT_LOAD job),
                      then wait for sb_ctl_plan_continue with the resume made from it */
} sb_ctl_config;

/* A worker's figures from its latest heartbeat (WorkerMetrics). */
typedef struct sb_ctl_worker_figures {
    uint64_t store_memory_bytes, store_spilled_bytes, spill_bytes_total, fetch_bytes_total,
        fetch_errors_total, rss_bytes;
    double accelerator_seconds, cpu_seconds;
} sb_ctl_worker_figures;

/* The live workers of one pool and their figures summed. */
typedef struct sb_ctl_pool_figures {
    char pool[32];
    size_t workers;
    sb_ctl_worker_figures sum;
} sb_ctl_pool_figures;

/* A worker the scheduler drained as a sick node (sb_sched_drain, copied). */
typedef struct sb_ctl_drain {
    char worker_id[128], pool[32], stage[128];
    double speed, median; /* its input bytes per second; the rest of its pool's median */
} sb_ctl_drain;

#define SB_CTL_DRAIN_KEEP 32 /* drain notices kept until taken (the oldest are dropped) */

typedef struct sb_ctl_snapshot {
    sb_sched_state state;
    sb_sched_stats stats;
    size_t nops;
    sb_sched_group_stats ops[16]; /* names point into the controller: valid until sb_ctl_free */
    size_t workers_registered, workers_lost;
    size_t workers_retired; /* drained (stats.workers_drained) and then retired */
    char failure[1024];
    char stall[1024];   /* non-empty while the watchdog sees no progress */
    int planning;       /* 1 while the PLAN/PREPARE storage jobs run (no scheduler yet) */
    int storage_failed; /* 1 when `failure` is a storage job's (planning, preparing) */
    size_t nsplits;     /* splits of the plan (0 while planning) */
    size_t npools;
    sb_ctl_pool_figures pools[4]; /* live workers per pool (heartbeat figures summed) */
    size_t nranks;
    sb_deal_rank ranks[16];       /* a stream's trainer ranks (the first 16): batch, step time */
    uint32_t stream_epochs_ended; /* a stream's consumers (sb_deal_progress): epochs ended, */
    uint64_t stream_rows;         /* and rows sent of the epoch after them */
    size_t nholders; /* a stream's backlog by worker (the first 16 workers holding any) */
    struct {
        char worker_id[128];
        uint64_t parts;
    } holders[16];
} sb_ctl_snapshot;

sb_ctl *sb_ctl_start(const sb_ctl_config *cfg, const sb_rpc_opts *opts, sb_err *err);
/* The port the Control service listens on. */
int sb_ctl_port(const sb_ctl *c);
/* A backend saw a worker process end (or a pod vanish): recovery starts now, without waiting
 * for missed heartbeats. */
void sb_ctl_worker_exited(sb_ctl *c, const char *worker_id, const char *why);
/* Waits up to timeout_ms for the pipeline to end; returns the state. */
sb_sched_state sb_ctl_wait(sb_ctl *c, int timeout_ms);
void sb_ctl_snapshot_get(sb_ctl *c, sb_ctl_snapshot *out);
/* 1 with a report in buf when nothing progressed for stall_ms (the no-progress watchdog). */
int sb_ctl_stalled(sb_ctl *c, uint64_t stall_ms, char *buf, size_t len);
/* The sink parts committed (copied into a malloc'd array of `*n` entries whose ids are
 * malloc'd too; free with sb_ctl_parts_free). */
sb_storage_output *sb_ctl_sink_parts(sb_ctl *c, size_t *n);
void sb_ctl_parts_free(sb_storage_output *parts, size_t n);
/* The errored partitions (sb_sched_errored_list), copied under the lock: a malloc'd array of
 * *n entries whose strings are malloc'd (free with sb_ctl_errored_free); *total (may be NULL)
 * counts them all, also beyond the SB_SCHED_ERRORED_KEEP listed. NULL with *n 0 when there are
 * none (or out of memory). */
sb_storage_errored *sb_ctl_errored(sb_ctl *c, size_t *n, uint64_t *total);
void sb_ctl_errored_free(sb_storage_errored *e, size_t n);
/* The scheduler's checkpoint (sb_sched_checkpoint), taken under the controller's lock: ranges
 * and parts are malloc'd (free ranges with free(), parts with sb_ctl_parts_free). 0 or -1 +
 * err. */
int sb_ctl_checkpoint(sb_ctl *c, char **ranges, sb_storage_output **parts, size_t *n, sb_err *err);
/* The same within about max_bytes (sb_sched_checkpoint_within; 0: no limit); *omitted (may be
 * NULL): committed splits left out. */
int sb_ctl_checkpoint_within(sb_ctl *c, uint64_t max_bytes, sb_sched_part_bytes_fn part_bytes,
                             void *ctx, char **ranges, sb_storage_output **parts, size_t *n,
                             size_t *omitted, sb_err *err);
/* The plan's fingerprint (FNV-1a 64 of every encoded split, in order: paths, ranges, sizes) as
 * 16 hex digits, "" before the plan is known; and 1 when a resume was dropped because the plan
 * differs from resume_plan_hash. */
void sb_ctl_plan_hash(sb_ctl *c, char out[17]);
int sb_ctl_resume_dropped(sb_ctl *c);
/* 1 if the worker may be removed now (sb_sched_worker_removable), under the lock. */
int sb_ctl_worker_removable(sb_ctl *c, const char *worker_id);
/* Moves stage `stage` to pool ("cpu" / "gpu") while the run goes on (sb_sched_stage_move),
 * under the lock. 1 moved, 0 already there, -1 + err (no scheduler yet, or it cannot move). */
int sb_ctl_stage_move(sb_ctl *c, size_t stage, const char *pool, sb_err *err);
/* The pool's demand (sb_sched_pool_demand), under the lock. */
void sb_ctl_pool_demand(sb_ctl *c, const char *pool, uint64_t *queued, uint64_t *running,
                        int *active);
/* Queues a COMMIT (with the sink parts), ABORT or PREPARE storage job for the next worker
 * that polls. 0, or -1 + err (another job is in flight, or out of memory). */
int sb_ctl_storage_start(sb_ctl *c, sb_storage_kind kind, const sb_storage_output *parts, size_t n,
                         sb_err *err);
/* Queues a CKPT_PUT (files copied; prune: then remove the log's other files) or CKPT_REMOVE
 * job (storage/ckptjob.h). Its end is read with sb_ctl_storage_poll. 0, or -1 + err (another
 * job is in flight, the source is being planned, or out of memory). */
int sb_ctl_ckpt_start(sb_ctl *c, sb_storage_kind kind, const sb_storage_file *files, size_t n,
                      int prune, sb_err *err);
/* With ckpt_load: 0 while the log is being read; 1 read (its files moved into *out, free with
 * sb_storage_files_free); -1 it could not be read (msg says why). 1 and -1 are answered once. */
int sb_ctl_ckpt_loaded(sb_ctl *c, sb_storage_files *out, char *msg, size_t len);
/* With ckpt_load, after sb_ctl_ckpt_loaded answered 1 or -1: plans the source (and prepares
 * the sink) with resume (copied; NULL: none) taken against plan_hash. 0, or -1 + err. */
int sb_ctl_plan_continue(sb_ctl *c, const sb_sched_resume *resume, const char *plan_hash,
                         sb_err *err);
/* The job queued last: 0 still queued or running, 1 done, -1 failed with msg ("committing the
 * sink on worker cpu-0: ..."). */
int sb_ctl_storage_poll(sb_ctl *c, char *msg, size_t len);
/* sb_ctl_storage_start, then waits up to timeout_ms, or until *cancel becomes non-zero (cancel
 * may be NULL): 1 done, -1 failed or could not start, 0 not done in time (msg says why). */
int sb_ctl_storage_run(sb_ctl *c, sb_storage_kind kind, const sb_storage_output *parts, size_t n,
                       int timeout_ms, const volatile int *cancel, char *msg, size_t len);
/* The scheduler's lineage memory (sb_sched_memory_get), under the lock: 0, or -1 (zeroed)
 * while there is no scheduler yet. */
int sb_ctl_memory(sb_ctl *c, sb_sched_memory *out);
/* Splits of the plan (0 while planning). */
size_t sb_ctl_nsplits(sb_ctl *c);
/* Workers drained since the last call (oldest first, once each): up to max copied into out.
 * A drained worker gets no new task; once it holds nothing still needed it is retired (its
 * next poll or heartbeat answers shutdown), and the backend replaces the process or pod. */
size_t sb_ctl_drains_take(sb_ctl *c, sb_ctl_drain *out, size_t max);
/* With a stream sink: 1 once every rank of every epoch was told its epoch is over. */
int sb_ctl_stream_ended(sb_ctl *c);
/* From now on every poll and heartbeat answers shutdown. */
void sb_ctl_shutdown_workers(sb_ctl *c);
/* Stops the service (calls in flight are cancelled) and frees everything. */
void sb_ctl_free(sb_ctl *c);

#endif
