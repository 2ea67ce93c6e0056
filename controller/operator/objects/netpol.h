/* netpol.h — the NetworkPolicy the operator creates for each Pipeline's worker pods.
 *
 * A cluster-wide controller cannot ship chart objects into every namespace, so when
 * --worker-network-policy is set (the chart's networkPolicy.perPipeline) each run creates, in
 * the Pipeline's namespace, NetworkPolicy "streambatch-<pipeline>": it selects the pods labelled
 * streambatch.dev/pipeline=<pipeline> and app.kubernetes.io/name=streambatch-worker (kube.h) and
 * lets in only
 *   - the Data and Worker port (SB_NETPOL_WORKER_PORT, 7070) from the same pipeline's worker
 *     pods and from the controller pods (controllerLabels in controllerNamespace);
 *   - with a stream:// sink, that port also from the pods labelled SB_NETPOL_CONSUMER_LABEL=
 *     <pipeline> in its namespace: the trainers that consume the stream (docs/training.md);
 *   - the metrics port (SB_KUBE_METRICS_PORT, 9102) from the metricsFrom peers (none: nobody).
 * Every other ingress is denied; egress is not restricted (workers reach storage, the
 * controller and each other). The policy is owned by the Pipeline (controller and
 * blockOwnerDeletion, like its pods), so deleting the Pipeline garbage-collects it.
 *
 * Settings: the flag's value, parsed once by sb_netpol_configure() before the operator starts
 * any thread, is process-wide and read-only afterwards (sb_netpol_ensure reads it without a
 * lock). Ownership: sb_netpol_build returns a tree the caller frees; settings own their cJSON.
 */
#ifndef SB_CTL_NETPOL_H
#define SB_CTL_NETPOL_H

#include <cjson/cJSON.h>

#include "core/err.h"
#include "k8s/client.h"

/* The worker pods' Data and Worker gRPC port (kube.h's default worker_port). */
#define SB_NETPOL_WORKER_PORT 7070

typedef struct sb_netpol_settings {
    int enabled;
    char controller_namespace[64];
    cJSON *controller_labels; /* object: label -> value (owned) */
    cJSON *metrics_from;      /* array of NetworkPolicyPeer objects (owned; may be empty) */
} sb_netpol_settings;

/* Parses the flag's value: "off" (or empty) -> disabled, or a JSON object
 *   {"controllerNamespace": NS, "controllerLabels": {LABEL: VALUE, ...},
 *    "metricsFrom": [NetworkPolicyPeer, ...]}
 * (metricsFrom optional). 0, or -1 with err naming the key that is wrong. On success free the
 * settings with sb_netpol_settings_free. */
int sb_netpol_parse(const char *spec, sb_netpol_settings *out, sb_err *err);
void sb_netpol_settings_free(sb_netpol_settings *s);

/* Parses spec into the process-wide settings (replacing earlier ones). 0 or -1 with err. */
int sb_netpol_configure(const char *spec, sb_err *err);

/* The NetworkPolicy for a Pipeline object (its metadata name, namespace and uid; no uid: no
 * ownerReference). NULL with err when name or namespace is missing. */
cJSON *sb_netpol_build(const sb_netpol_settings *s, const cJSON *pipeline, sb_err *err);

/* The label of a stream's consumer pods: SB_NETPOL_CONSUMER_LABEL=<pipeline> lets them reach the
 * pipeline's workers (this policy) and the controller's Control services (the chart's). */
#define SB_NETPOL_CONSUMER_LABEL "streambatch.dev/stream-consumer"

/* "streambatch.dev/stream-consumer=<pipeline>" into out (n >= 100 holds every valid name). */
void sb_netpol_consumer_label(const char *pipeline, char *out, size_t n);

/* "streambatch-<pipeline>" into out (n >= 80 holds every valid name). */
void sb_netpol_name(const char *pipeline, char *out, size_t n);

/* With the process-wide settings enabled: creates the Pipeline's NetworkPolicy. One that
 * exists already is kept when it is this Pipeline's (same owner uid) with the same spec; one of
 * an earlier Pipeline of that name or with an older spec, labelled as the controller's, is
 * deleted and created again; one that is not the controller's is an error (never deleted).
 * Disabled: 0 at once. 0 or -1 with err ("NetworkPolicy ns/name: ..."). */
int sb_netpol_ensure(sb_k8s_client *c, const cJSON *pipeline, sb_err *err);

#endif
