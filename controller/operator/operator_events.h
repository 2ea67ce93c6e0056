/* operator_events.h — core/v1 Events about Pipelines (what `kubectl describe pipeline` shows):
 * Started, WorkerPodsCreated, WorkerPodFailed, Recovered, PartitionErrored (Warning, one per
 * errored partition, at most SB_SCHED_ERRORED_KEEP per run), Suspended, Resumed, TookOver,
 * Succeeded, Failed, InvalidSpec, SpecChangeRefused, Deleted, WorkerDrained (Warning: a worker
 * persistently far slower than its pool, a sick node, is drained and its pod replaced).
 *
 * Events are best effort: a failed post is logged and never fails a reconcile. The object is
 * built by a pure function (unit tested); the name is "<pipeline>.<hex nanoseconds>" as
 * client-go names them, so two events never collide.
 *
 * Memory: the builder returns a new cJSON the caller deletes; nothing is kept.
 */
#ifndef SB_CTL_OPERATOR_EVENTS_H
#define SB_CTL_OPERATOR_EVENTS_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "core/err.h"
#include "k8s/client.h"

#define SB_OPERATOR_COMPONENT "streambatch-controller"

typedef struct sb_operator_event_ref {
    const char *namespace, *name, *uid, *resource_version;
} sb_operator_event_ref;

/* The Event object for a Pipeline. type: "Normal" or "Warning"; host: the controller's identity
 * (source.host / reportingInstance; may be NULL); now_ns: wall clock in nanoseconds. The
 * message is redacted (core/redact.h: no URI userinfo or query value, no signing parameter). */
cJSON *sb_operator_event_build(const sb_operator_event_ref *ref, const char *type,
                               const char *reason, const char *message, const char *host,
                               uint64_t now_ns);

/* The message of a PartitionErrored event: "stage S: <input>: <error>; its records are not in
 * the output", truncated to len. */
void sb_operator_event_errored_message(const char *stage, const char *input, const char *error,
                                       char *buf, size_t len);

/* The message of a WorkerDrained event (Warning): the worker's pod, its pool, the stage it was
 * slow on, its speed and the median of the rest of its pool (bytes per second, shown in MB/s),
 * truncated to len. */
void sb_operator_event_drained_message(const char *pod, const char *pool, const char *stage,
                                       double speed, double median, char *buf, size_t len);

/* Posts an Event (best effort: logs a failure and returns -1 with err). */
int sb_operator_event_post(sb_k8s_client *c, const sb_operator_event_ref *ref, const char *type,
                           const char *reason, const char *message, const char *host, sb_err *err);

#endif
