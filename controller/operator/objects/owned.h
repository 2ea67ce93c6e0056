/* owned.h — objects the controller keeps in a Pipeline's namespace on its behalf.
 *
 * Besides worker pods and the credentials Secret, a run may need a NetworkPolicy for its workers
 * (netpol.h) and, for a stream:// sink, a Service with its EndpointSlice (streamsvc.h). Each is
 * named after the Pipeline, labelled app.kubernetes.io/managed-by=SB_OWNED_MANAGED_BY and
 * streambatch.dev/pipeline=<name>, and owned by the Pipeline (controller and blockOwnerDeletion,
 * like its pods), so deleting the Pipeline garbage-collects it. sb_owned_ensure creates one, or
 * settles a name already taken: an object of this Pipeline with the same content is kept; one of
 * the controller's that differs (an earlier Pipeline of that name, an older spec, a former
 * leader's endpoints) is deleted and created again; one that is not the controller's is an error
 * and never touched.
 *
 * Stateless; the caller owns every cJSON it passes and gets.
 */
#ifndef SB_CTL_OWNED_H
#define SB_CTL_OWNED_H

#include <cjson/cJSON.h>

#include "core/err.h"
#include "k8s/client.h"

#define SB_OWNED_MANAGED_BY "streambatch-controller"

/* obj.a.b (b NULL: obj.a) as a non-empty string, or NULL. */
const char *sb_owned_str(const cJSON *obj, const char *a, const char *b);

/* Adds metadata {name, namespace, labels, ownerReferences} to o for Pipeline `pipeline` (no uid:
 * no ownerReference). */
void sb_owned_metadata(cJSON *o, const char *name, const char *ns, const char *pipeline,
                       const char *uid);

/* Creates `want` in collection path `coll` (".../namespaces/NS/KIND"), settling a name already
 * taken as above; `fields` (NULL-terminated) names the top-level members whose equality makes an
 * existing object the same ("spec"; an EndpointSlice's "endpoints" and "ports"). 0, or -1 with
 * err (without the object's kind and name: the caller says them). */
int sb_owned_ensure(sb_k8s_client *c, const char *coll, const cJSON *want,
                    const char *const *fields, sb_err *err);

#endif
