/* operator_status.h — the pure parts of the Pipeline status the operator writes: conditions in
 * metav1.Condition style, progress/partitions/stages from a controller snapshot, RFC 3339 times,
 * and the comparison of a running spec with a new one (which changes cannot be applied live).
 *
 * No I/O here: everything works on cJSON trees, so it is unit tested without an API server.
 * The checkpoint (committed splits and the sink parts they produced) is
 * controller/ctl/checkpoint.h, shared with `streambatch run`.
 *
 * Memory: functions that return cJSON or strings return new objects the caller frees
 * (cJSON_Delete / free).
 */
#ifndef SB_CTL_OPERATOR_STATUS_H
#define SB_CTL_OPERATOR_STATUS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "controller/ctl/checkpoint.h"
#include "controller/ctl/ctl.h"
#include "controller/sched/sched.h"
#include "core/err.h"

/* ---- times ---- */
/* "2024-05-01T12:00:00Z" (UTC) into buf (at least 21 bytes). */
void sb_operator_time_format(time_t t, char *buf, size_t len);
/* Parses an RFC 3339 UTC time ("...Z", optional fractional seconds). 0, or -1. */
int sb_operator_time_parse(const char *s, time_t *out);

/* ---- conditions (status.conditions, a list keyed by type) ---- */
/* Sets condition `type` to status True (truth != 0) or False with reason and message;
 * lastTransitionTime (now) changes only when the status flips or the condition is new.
 * Returns 1 when anything changed, 0 when it was already so, -1 when out of memory. */
int sb_operator_condition_set(cJSON *status, const char *type, int truth, const char *reason,
                              const char *message, int64_t generation, const char *now);
/* The condition of that type, or NULL. */
const cJSON *sb_operator_condition_get(const cJSON *status, const char *type);
/* 1 when the condition exists with status "True". */
int sb_operator_condition_true(const cJSON *status, const char *type);
/* Every sb_operator_condition_set also keeps three printer-column fields in step with the
 * conditions: status.failingCondition is "<reason>: <message>" (just the reason when the message
 * is empty; at most SB_OPERATOR_FAILING_MAX bytes, cut at a character boundary with "...") of the
 * first condition, in list order, that is True and of a type whose True means trouble
 * (InvalidSpec, Failed, WorkersPending, WorkersFailing, SpecChangeRefused), and status.reason its
 * reason alone (the default Reason column); both are removed when there is none;
 * status.workers becomes "0/0" when the Running condition is False (suspended or finished: no
 * worker pods). */
#define SB_OPERATOR_FAILING_MAX 256

/* ---- checkpoint: controller/ctl/checkpoint.h (shared with `streambatch run`) ---- */

/* ---- after a run finished ---- */
/* This controller finished the run of Pipeline uid done_uid and wrote its terminal phase; the
 * informer cache now shows uid with phase. 1: the cache has caught up (terminal phase) or the
 * name now holds another Pipeline: forget the finished run. 0: the cache is stale — the run must
 * not be started again (that would re-prepare the sink and remove its _SUCCESS); wait. */
int sb_operator_finished_seen(const char *done_uid, const char *uid, const char *phase);

/* ---- small helpers shared by the operator's modules ---- */
/* obj[a] (or obj[a][b] when b is not NULL) if it is a string, else NULL (borrowed). */
const char *sb_operator_str_at(const cJSON *obj, const char *a, const char *b);
/* CLOCK_MONOTONIC in milliseconds. */
uint64_t sb_operator_mono_ms(void);

/* ---- progress ---- */
typedef struct sb_operator_pool_view {
    const char *pool;
    uint32_t desired, ready, pending;
} sb_operator_pool_view;

/* Sets status.mode, the execution model the run uses (the -o wide Mode column: the spec's
 * mode may be absent, meaning streaming). */
int sb_operator_status_mode(cJSON *status, sb_exec_mode mode);

/* What the Partitions and Throughput cells show when the split count is not known (Pending,
 * InvalidSpec, while planning, PlanFailed): every phase fills them, the same way. */
#define SB_OPERATOR_CELL_UNKNOWN "-"

/* Fills the printer-column fields a status lacks: progress and throughput
 * SB_OPERATOR_CELL_UNKNOWN, workers "0/0" (so no phase leaves a cell blank). Called on every
 * status the operator writes. 1 when it added any, 0 when not, -1 when out of memory. */
int sb_operator_status_cells(cJSON *status);

/* Sets progress ("committed/total"; SB_OPERATOR_CELL_UNKNOWN while s->planning or after a plan
 * failed, when the split count is not known), partitions {total, committed, inFlight, recovered,
 * errored} and stages[] (name, pool, workersDesired, workersReady, tasksRunning, rowsOut,
 * bytesOut, rowsPerSecond over elapsed_s) in status from a controller snapshot, and the
 * printer-column fields workers ("ready/desired" summed over pools[0..npools), e.g. "3/4") and
 * throughput (the last stage's rowsOut over elapsed_s, sb_operator_rate_format: "1.2k rows/s";
 * SB_OPERATOR_CELL_UNKNOWN as progress while no row came out). */
int sb_operator_status_progress(cJSON *status, const sb_ctl_snapshot *s, size_t total_splits,
                                size_t committed_splits, const sb_operator_pool_view *pools,
                                size_t npools, double elapsed_s);

/* rows_per_s as at most 3 significant digits with a k/M/G/T/P/E suffix and " rows/s": "0 rows/s",
 * "0.5 rows/s", "850 rows/s", "1.23k rows/s", "12.3M rows/s" (below 0.001, negative or NaN:
 * "0 rows/s"). */
void sb_operator_rate_format(double rows_per_s, char *buf, size_t len);

/* Sets status.erroredPartitions to [{stage, split, error}] for errored[0..n) (the scheduler
 * keeps the first SB_SCHED_ERRORED_KEEP; status.partitions.errored has the count), or removes
 * it when n is 0. 0, or -1 when out of memory. */
int sb_operator_status_errored(cJSON *status, const sb_storage_errored *errored, size_t n);

/* Redacts every string in the tree at node (core/redact.h: URIs' userinfo and query values,
 * signing parameters, Authorization headers), in place, so that no secret a message quotes
 * reaches status.message, conditions or status.erroredPartitions. Called on the status before
 * each write. Idempotent. Returns how many strings changed, or -1 when out of memory. */
int sb_operator_status_redact(cJSON *node);

/* ---- spec changes ---- */
/* Compares two spec objects, ignoring what applies live (suspend, ttlSecondsAfterFinished,
 * stages[].workers). Writes the changed fields, "spec.sink, spec.stages[1].op", into buf
 * (truncated with "..."). Returns how many differ. */
int sb_operator_spec_diff(const cJSON *old_spec, const cJSON *new_spec, char *buf, size_t len);

#endif
