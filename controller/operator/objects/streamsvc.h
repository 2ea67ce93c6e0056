/* streamsvc.h — the Service through which a stream:// Pipeline's consumers reach its leader.
 *
 * A stream is served by the Control service of the controller that leads, at that pod's IP and a
 * port it picked (a fixed port cannot be shared by the Pipelines one controller runs). Trainers
 * want one name that outlives a failover, so each run of a stream creates, in the Pipeline's
 * namespace:
 *   - Service sb_streamsvc_name(<pipeline>): ClusterIP, port SB_STREAMSVC_PORT ("control"), no
 *     selector (the leader is not a pod a label can pick: the other replicas carry the same
 *     labels);
 *   - an EndpointSlice of the same name for that Service (label kubernetes.io/service-name, and
 *     endpointslice.kubernetes.io/managed-by=SB_STREAMSVC_SLICE_MANAGER so that Kubernetes' own
 *     EndpointSlice controller leaves it alone) holding this leader's address and port. A new
 *     leader replaces it with its own.
 * Both are owned by the Pipeline (owned.h): deleting it garbage-collects them. The consumers'
 * address is then "<service>.<namespace>.svc:SB_STREAMSVC_PORT"; status.stream.service says it.
 *
 * Stateless; sb_streamsvc_build_* return trees the caller frees.
 */
#ifndef SB_CTL_STREAMSVC_H
#define SB_CTL_STREAMSVC_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "core/err.h"
#include "k8s/client.h"

/* The Service's port (the Data port's number, 7070, so that one number serves both). */
#define SB_STREAMSVC_PORT 7070
#define SB_STREAMSVC_SLICE_MANAGER "streambatch-controller" /* a label value: no slash */

/* The Service's name into out (n >= 64): "sb-stream-<pipeline>" when that is a DNS-1035 label of
 * at most 63 characters; else "sb-stream-" and 16 hex digits of a hash of the name (a Pipeline
 * name may be a 253-character subdomain with dots; a Service name may not). */
void sb_streamsvc_name(const char *pipeline, char *out, size_t n);

/* The Service and the EndpointSlice for Pipeline object `pipeline` served at ip:port. NULL with
 * err when the Pipeline lacks a name or namespace, or ip is not an IP address. */
cJSON *sb_streamsvc_build_service(const cJSON *pipeline, sb_err *err);
cJSON *sb_streamsvc_build_slice(const cJSON *pipeline, const char *ip, int port, sb_err *err);

/* Creates or settles both (owned.h's rules: a Service of this Pipeline is kept as it is, an
 * EndpointSlice with other endpoints is replaced) and writes the consumers' address
 * ("<service>.<ns>.svc:7070") into addr. 0, or -1 with err naming the object. */
int sb_streamsvc_ensure(sb_k8s_client *c, const cJSON *pipeline, const char *ip, int port,
                        char *addr, size_t n, sb_err *err);

#endif
