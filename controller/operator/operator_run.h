/* operator_run.h — one running Pipeline inside the operator: its plan (lib/storage/storage.h), its
 * Control service (ctl.h, listening on the controller's gRPC host, port 0) and its worker pods
 * (kube.h), driven by a periodic tick.
 *
 * A tick (about every 500 ms, from the reconciler) autoscales each pool (autoscale.h from the
 * pool's demand and its ready/pending pods), syncs the pods, runs the stall watchdog and, when
 * the scheduler finished, commits the sink (or aborts it) and reports the outcome. Stopping a
 * run shuts its workers down and deletes their pods (or, when the controller itself stops,
 * leaves them for the next leader to adopt).
 *
 * Resume: with a checkpoint (status.checkpoint of the Pipeline), the run starts at epoch
 * checkpoint.epoch + 1 with the committed splits and their sink parts, adopts the pods that
 * exist and rebinds them (Worker.Rebind) to its Control service. The checkpoint is a log beside
 * the sink (opckpt.h), written by worker pods while the run goes on; status.checkpoint is its
 * summary. The log is read before planning and removed once the sink is committed.
 *
 * Threads: one reconciler thread at a time calls tick/status/stop for a given run (the work
 * queue guarantees it); sb_operator_pipeline_on_pod() comes from the pod informer's thread.
 *
 * Memory: the run copies what it keeps from the config (the decoded pipeline, its JSON); the
 * client is borrowed and must outlive the run.
 */
#ifndef SB_CTL_OPERATOR_RUN_H
#define SB_CTL_OPERATOR_RUN_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "controller/ctl/ckptlog.h"
#include "controller/ctl/cmetrics.h"
#include "controller/operator/operator_plan.h"
#include "controller/operator/operator_status.h"
#include "core/err.h"
#include "k8s/client.h"
#include "rpc/rpc.h"
#include "spec/pipeline.h"

typedef struct sb_operator_pipeline sb_operator_pipeline;

typedef struct sb_operator_pipeline_config {
    sb_k8s_client *client; /* borrowed */
    const cJSON *object;   /* the Pipeline as read from the API (borrowed during start) */
    const char *grpc_host; /* where the Control service listens (port 0) */
    const char *image;     /* default worker image */
    const char *gpu_image; /* default worker image of pools with GPUs */
    uint32_t max_pending;  /* Pending pods per pool at most */
    uint32_t heartbeat_timeout_ms;
    const sb_rpc_opts *rpc;  /* mutual TLS of the Control service and Rebind (NULL: none) */
    const uint8_t *auth_key; /* the operator's key: the pipeline's tokens derive from it */
    size_t auth_key_len;
    const char *tls_secret; /* mounted into worker pods (kube.h); NULL: none */
    const char *tls_server_name;
    const sb_ckpt *resume; /* NULL: a fresh run at epoch 0 (or resume_log) */
    /* status.checkpoint as a summary of the checkpoint log beside the sink (opckpt.h): the run
     * starts at its epoch + 1, a worker reads the log before planning, and the committed work
     * in it is skipped; a log that cannot be read or checked posts InvalidCheckpoint and runs
     * everything again. NULL: none (then resume, if any) */
    const sb_ckptlog_summary *resume_log;
    /* cost-aware placement (operator_plan.h): prices, re-plan threshold and interval; NULL: no
     * planning. Borrowed: must outlive the run. */
    const sb_operator_plan_config *plan;
    void (*on_event)(void *ud, const char *type, const char *reason, const char *message);
    void *ud;
} sb_operator_pipeline_config;

typedef enum { SB_OPERATOR_RUNNING, SB_OPERATOR_SUCCEEDED, SB_OPERATOR_FAILED } sb_operator_outcome;

/* Decodes and validates the Pipeline object. Returns the number of problems (messages joined
 * "; " in msg, each "spec.stages[1].args.x: ..."), 0 when valid (p then filled; free it with
 * sb_pipeline_free), -1 when out of memory. *json (may be NULL) receives the manifest handed to
 * workers (apiVersion, kind, metadata name/namespace/uid, spec; malloc'd). */
int sb_operator_decode(const cJSON *object, sb_pipeline *p, char **json, char *msg, size_t len);

/* Starts a run (plan, sink prepare, Control service, pods). NULL with err; *plan_error is set
 * to 1 when the spec cannot be planned (a source that does not exist...), so the caller fails
 * the pipeline instead of retrying. */
sb_operator_pipeline *sb_operator_pipeline_start(const sb_operator_pipeline_config *cfg,
                                                 int *plan_error, sb_err *err);

/* One tick. Returns the outcome; on SB_OPERATOR_FAILED, reason ("TaskFailed" | "Stalled" |
 * "CommitFailed" | "PlanFailed" | "WorkersFailing": every pod of a pool failing to start for
 * spec.execution.stallTimeout, podstate.h) and message are filled. On a finished run the workers
 * are shut down already (their pods still need sb_operator_pipeline_stop). */
sb_operator_outcome sb_operator_pipeline_tick(sb_operator_pipeline *r, char *reason, size_t rlen,
                                              char *message, size_t mlen);

/* Live changes: the stages' workers min/max of a new spec (same stages), counted in the pools
 * the stages run in now (a stage a re-plan moved counts in its new pool). */
void sb_operator_pipeline_set_bounds(sb_operator_pipeline *r, const sb_pipeline *p);

/* Planning (operator_plan.h), when cfg->plan is set and the Pipeline has a placement choice or
 * a target: at start from declared rates (a multi-shape stage then runs on the plan's shape:
 * the manifest workers get lists it first), later from measured rates; each plan posts a
 * Planned (first) or Replanned event, and with a target the pools' max pods follow the plan.
 * status.plan is written by sb_operator_pipeline_status. */

/* Writes progress, partitions, stages, checkpoint and the WorkersPending (pods Unschedulable)
 * and WorkersFailing (pods failing to start, podstate.h) conditions into status
 * (now: RFC 3339 time for condition transitions), and status.plan when the run has a plan.
 * Returns 0, or -1 when out of memory. */
int sb_operator_pipeline_status(sb_operator_pipeline *r, cJSON *status, int64_t generation,
                                const char *now);
/* Adds the run's Prometheus figures (controller/ctl/cmetrics.h) for namespace/name. */
void sb_operator_pipeline_metrics(sb_operator_pipeline *r, sb_cmetrics *cm, const char *ns,
                                  const char *name);

/* The errored partitions (sb_ctl_errored: a copy, free with sb_ctl_errored_free); *n set. */
sb_storage_errored *sb_operator_pipeline_errored(sb_operator_pipeline *r, size_t *n);

/* Partitions re-produced from lineage so far (the controller's counter; cheap). */
uint64_t sb_operator_pipeline_recovered(sb_operator_pipeline *r);

/* The epoch of this run, the number of splits, and how many were already committed at start
 * (the resumed checkpoint's; 0 when it was discarded because the spec changed). */
size_t sb_operator_pipeline_committed_at_start(const sb_operator_pipeline *r);
uint32_t sb_operator_pipeline_epoch(const sb_operator_pipeline *r);
size_t sb_operator_pipeline_splits(const sb_operator_pipeline *r);
/* 1 for a stream:// sink, *first its first epoch served by this leader (the ones before ended
 * under an earlier leader); 0 otherwise. */
int sb_operator_pipeline_stream(const sb_operator_pipeline *r, uint32_t *first);

/* The spec the run was started with (borrowed). */
const cJSON *sb_operator_pipeline_spec(const sb_operator_pipeline *r);

/* A pod of this pipeline changed (pod informer). */
void sb_operator_pipeline_on_pod(sb_operator_pipeline *r, const cJSON *pod, int deleted);

/* Stops the run and frees it. delete_pods=1: tell workers to shut down and delete every pod
 * (waits for the deletes to be accepted); 0: leave the pods for the next leader (controller
 * shutdown). */
void sb_operator_pipeline_stop(sb_operator_pipeline *r, int delete_pods);

#endif
