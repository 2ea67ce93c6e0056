/* operator_events.c — core/v1 Events about Pipelines (see operator_events.h): building an Event
 * object (its message redacted), posting it through the API client, and the messages of
 * PartitionErrored and WorkerDrained. Owns nothing past a call. */

#include "controller/operator/operator_events.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/operator/operator_status.h"
#include "core/log.h"
#include "core/redact.h"

cJSON *sb_operator_event_build(const sb_operator_event_ref *ref, const char *type,
                               const char *reason, const char *message, const char *host,
                               uint64_t now_ns)
{
    cJSON *e = cJSON_CreateObject();
    if (e == NULL)
        return NULL;
    char name[320], ts[32], micro[48];
    snprintf(name, sizeof name, "%.240s.%" PRIx64, ref->name, now_ns);
    time_t t = (time_t)(now_ns / 1000000000ULL);
    sb_operator_time_format(t, ts, sizeof ts);
    /* eventTime is a MicroTime: seconds with six fractional digits */
    snprintf(micro, sizeof micro, "%.19s.%06uZ", ts, (unsigned)(now_ns / 1000 % 1000000));
    cJSON_AddStringToObject(e, "apiVersion", "v1");
    cJSON_AddStringToObject(e, "kind", "Event");
    cJSON *md = cJSON_AddObjectToObject(e, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", ref->namespace);
    cJSON *io = cJSON_AddObjectToObject(e, "involvedObject");
    cJSON_AddStringToObject(io, "apiVersion", "streambatch.dev/v1alpha1");
    cJSON_AddStringToObject(io, "kind", "Pipeline");
    cJSON_AddStringToObject(io, "namespace", ref->namespace);
    cJSON_AddStringToObject(io, "name", ref->name);
    if (ref->uid != NULL)
        cJSON_AddStringToObject(io, "uid", ref->uid);
    if (ref->resource_version != NULL)
        cJSON_AddStringToObject(io, "resourceVersion", ref->resource_version);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddStringToObject(e, "reason", reason);
    char shown[4096]; /* no secret a message quotes reaches an Event (core/redact.h) */
    sb_redact_text(message != NULL ? message : "", shown, sizeof shown);
    cJSON_AddStringToObject(e, "message", shown);
    cJSON *src = cJSON_AddObjectToObject(e, "source");
    cJSON_AddStringToObject(src, "component", SB_OPERATOR_COMPONENT);
    if (host != NULL && *host)
        cJSON_AddStringToObject(src, "host", host);
    cJSON_AddStringToObject(e, "firstTimestamp", ts);
    cJSON_AddStringToObject(e, "lastTimestamp", ts);
    cJSON_AddStringToObject(e, "eventTime", micro);
    cJSON_AddNumberToObject(e, "count", 1);
    cJSON_AddStringToObject(e, "action", reason);
    cJSON_AddStringToObject(e, "reportingComponent", SB_OPERATOR_COMPONENT);
    cJSON_AddStringToObject(e, "reportingInstance",
                            host != NULL && *host ? host : SB_OPERATOR_COMPONENT);
    return e;
}

int sb_operator_event_post(sb_k8s_client *c, const sb_operator_event_ref *ref, const char *type,
                           const char *reason, const char *message, const char *host, sb_err *err)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t ns = (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
    cJSON *e = sb_operator_event_build(ref, type, reason, message, host, ns);
    if (e == NULL)
        return sb_err_set(err, "out of memory");
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/events", ref->namespace);
    long st = 0;
    sb_err e2 = {0};
    cJSON *made = sb_k8s_create(c, path, e, &st, &e2);
    cJSON_Delete(e);
    sb_log(strcmp(type, "Warning") == 0 ? SB_LOG_WARN : SB_LOG_INFO, "event", "pipeline", ref->name,
           "namespace", ref->namespace, "reason", reason, "message", message != NULL ? message : "",
           NULL);
    if (made == NULL) {
        sb_log(SB_LOG_WARN, "posting an event failed", "reason", reason, "error", e2.msg, NULL);
        if (err != NULL)
            *err = e2;
        return -1;
    }
    cJSON_Delete(made);
    return 0;
}

void sb_operator_event_errored_message(const char *stage, const char *input, const char *error,
                                       char *buf, size_t len)
{
    snprintf(buf, len, "stage %s: %.300s: %.600s; its records are not in the output",
             stage ? stage : "?", input ? input : "?", error ? error : "(no message)");
}

void sb_operator_event_drained_message(const char *pod, const char *pool, const char *stage,
                                       double speed, double median, char *buf, size_t len)
{
    snprintf(buf, len,
             "worker pod %.100s (pool %.16s) drained: stage %.100s ran at %.3f MB/s there, the "
             "pool's median is %.3f MB/s; once its work is handed over the pod is deleted and a "
             "new one replaces it",
             pod ? pod : "?", pool ? pool : "?", stage ? stage : "?", speed / 1e6, median / 1e6);
}
