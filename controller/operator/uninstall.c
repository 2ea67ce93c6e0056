/* uninstall.c — `streambatch-controller --uninstall` (see uninstall.h): stops the release's
 * controllers, then every Pipeline's worker pods, and takes the finalizer off every Pipeline,
 * so that nothing waits on a controller that is gone. Owns nothing past the call. */

#include "controller/operator/uninstall.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "controller/operator/operator_events.h"
#include "core/clock.h"
#include "k8s/client.h"
#include "k8s/config.h"

#define FINALIZER "streambatch.dev/finalizer"
#define PIPELINES_ALL "/apis/streambatch.dev/v1alpha1/pipelines"
#define PIPELINES_NS "/apis/streambatch.dev/v1alpha1/namespaces/%s/pipelines"

static const char *meta_str(const cJSON *obj, const char *field)
{
    return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(obj, "metadata"), field));
}

static void say(const sb_uninstall_opts *o, const char *fmt, const char *a, const char *b)
{
    if (o->out == NULL)
        return;
    fprintf(o->out, fmt, a, b);
    fputc('\n', o->out);
    fflush(o->out);
}

/* DELETE path; a 404 is success (already gone). */
static int delete_ok(sb_k8s_client *c, const char *path, sb_err *err)
{
    long st = 0;
    if (sb_k8s_delete(c, path, &st, err) != 0 && st != 404)
        return -1;
    return 0;
}

/* "k=v,k=v" of a Deployment's spec.selector.matchLabels; 0, or -1 when it has none. */
static int selector_of(const cJSON *dep, char *out, size_t n)
{
    const cJSON *ml = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(dep, "spec"), "selector"), "matchLabels");
    size_t len = 0;
    out[0] = '\0';
    const cJSON *l;
    cJSON_ArrayForEach(l, ml)
    {
        if (!cJSON_IsString(l))
            continue;
        int w = snprintf(out + len, n - len, "%s%s=%s", len ? "," : "", l->string, l->valuestring);
        if (w < 0 || (size_t)w >= n - len)
            return -1;
        len += (size_t)w;
    }
    return len > 0 ? 0 : -1;
}

/* Pods in ns matching selector: their count, or -1 (err set). */
static int count_pods(sb_k8s_client *c, const char *ns, const char *selector, sb_err *err)
{
    char path[512];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", ns);
    long st = 0;
    cJSON *l = sb_k8s_list(c, path, selector, &st, err);
    if (l == NULL)
        return -1;
    int n = cJSON_GetArraySize(cJSON_GetObjectItem(l, "items"));
    cJSON_Delete(l);
    return n;
}

/* Step 1: the Deployment to 0 replicas, then its pods gone (each controller ended on SIGTERM). */
static int stop_controllers(sb_k8s_client *c, const sb_uninstall_opts *o, const char *ns,
                            sb_err *err)
{
    char path[512], sel[512];
    snprintf(path, sizeof path, "/apis/apps/v1/namespaces/%s/deployments/%s", ns, o->deployment);
    long st = 0;
    cJSON *dep = sb_k8s_get(c, path, &st, err);
    if (dep == NULL && st == 404) {
        say(o, "Deployment %s/%s not found: no controller to stop", ns, o->deployment);
        return 0;
    }
    if (dep == NULL)
        return sb_err_wrap(err, "reading the controller Deployment");
    int have_sel = selector_of(dep, sel, sizeof sel) == 0;
    cJSON_Delete(dep);
    if (!have_sel)
        return sb_err_set(err, "Deployment %s/%s: no spec.selector.matchLabels", ns, o->deployment);
    cJSON *r = sb_k8s_patch(c, path, "{\"spec\":{\"replicas\":0}}", &st, err);
    if (r == NULL)
        return sb_err_wrap(err, "scaling the controller Deployment to 0");
    cJSON_Delete(r);
    say(o, "Deployment %s/%s scaled to 0; waiting for its pods to end", ns, o->deployment);
    long timeout = o->timeout_ms > 0 ? o->timeout_ms : 120000;
    for (long end = (long)sb_clock_mono_ms() + timeout;;) {
        int n = count_pods(c, ns, sel, err);
        if (n < 0)
            return sb_err_wrap(err, "listing the controller pods (%s)", sel);
        if (n == 0)
            return 0;
        if ((long)sb_clock_mono_ms() >= end)
            return sb_err_set(err, "%d controller pod(s) (%s) still there after %ld s", n, sel,
                              timeout / 1000);
        sb_clock_sleep_ms(500);
    }
}

/* The Pipeline's worker pods (label streambatch.dev/pipeline, owned by its uid): deleted. */
static int delete_worker_pods(sb_k8s_client *c, const cJSON *p, int *deleted, sb_err *err)
{
    const char *ns = meta_str(p, "namespace"), *name = meta_str(p, "name");
    const char *uid = meta_str(p, "uid");
    char path[512], sel[400];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", ns);
    snprintf(sel, sizeof sel, "streambatch.dev/pipeline=%s", name);
    long st = 0;
    cJSON *l = sb_k8s_list(c, path, sel, &st, err);
    if (l == NULL)
        return sb_err_wrap(err, "listing the worker pods of Pipeline %s/%s", ns, name);
    int rc = 0;
    const cJSON *pod;
    cJSON_ArrayForEach(pod, cJSON_GetObjectItem(l, "items"))
    {
        int owned = 0;
        const cJSON *ref;
        cJSON_ArrayForEach(
            ref, cJSON_GetObjectItem(cJSON_GetObjectItem(pod, "metadata"), "ownerReferences"))
        {
            const char *u = cJSON_GetStringValue(cJSON_GetObjectItem(ref, "uid"));
            owned |= u != NULL && uid != NULL && strcmp(u, uid) == 0;
        }
        if (!owned) /* a pod that only carries the label is not ours to delete */
            continue;
        char pp[700];
        snprintf(pp, sizeof pp, "%s/%s", path, meta_str(pod, "name"));
        if (delete_ok(c, pp, err) != 0) {
            rc = sb_err_wrap(err, "deleting worker pod %s/%s", ns, meta_str(pod, "name"));
            break;
        }
        (*deleted)++;
    }
    cJSON_Delete(l);
    return rc;
}

/* The merge patch that leaves every finalizer but ours, guarded by the object's
 * resourceVersion; NULL when ours is not there (nothing to do). Caller frees. */
static char *finalizer_patch(const cJSON *p)
{
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(p, "metadata"), "finalizers");
    cJSON *patch = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(patch, "metadata");
    cJSON *list = cJSON_AddArrayToObject(md, "finalizers");
    int ours = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, f)
    {
        if (cJSON_IsString(x) && strcmp(x->valuestring, FINALIZER) == 0)
            ours = 1;
        else if (cJSON_IsString(x))
            cJSON_AddItemToArray(list, cJSON_CreateString(x->valuestring));
    }
    const char *rv = meta_str(p, "resourceVersion");
    if (rv != NULL)
        cJSON_AddStringToObject(md, "resourceVersion", rv);
    char *body = ours ? cJSON_PrintUnformatted(patch) : NULL;
    cJSON_Delete(patch);
    return body;
}

/* Our finalizer off the Pipeline; on a conflict (it changed since it was read) read it again
 * and retry, at most 5 times. 1 removed, 0 not there (or the Pipeline is gone), -1 failed. */
static int remove_finalizer(sb_k8s_client *c, const char *path, sb_err *err)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        long st = 0;
        cJSON *p = sb_k8s_get(c, path, &st, err);
        if (p == NULL)
            return st == 404 ? 0 : -1;
        char *body = finalizer_patch(p);
        cJSON_Delete(p);
        if (body == NULL)
            return 0;
        cJSON *r = sb_k8s_patch(c, path, body, &st, err);
        free(body);
        if (r != NULL) {
            cJSON_Delete(r);
            return 1;
        }
        if (st == 404)
            return 0;
        if (st != 409)
            return -1;
    }
    return sb_err_set(err, "%s: still conflicting after 5 attempts", path);
}

/* Step 2 for the Pipelines of one collection path. */
static int stop_pipelines_at(sb_k8s_client *c, const sb_uninstall_opts *o, const char *coll,
                             int *npipes, int *npods, int *nfin, sb_err *err)
{
    long st = 0;
    cJSON *l = sb_k8s_list(c, coll, NULL, &st, err);
    if (l == NULL && st == 404) /* no CRD (crd.install=false and removed): nothing to stop */
        return 0;
    if (l == NULL)
        return sb_err_wrap(err, "listing Pipelines");
    int rc = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(l, "items"))
    {
        const char *ns = meta_str(p, "namespace"), *name = meta_str(p, "name");
        if (ns == NULL || name == NULL)
            continue;
        (*npipes)++;
        int pods = 0;
        if ((rc = delete_worker_pods(c, p, &pods, err)) != 0)
            break;
        *npods += pods;
        char path[600];
        snprintf(path, sizeof path, PIPELINES_NS "/%s", ns, name);
        int r = remove_finalizer(c, path, err);
        if (r < 0) {
            rc = sb_err_wrap(err, "removing the finalizer of Pipeline %s/%s", ns, name);
            break;
        }
        *nfin += r;
        /* what `kubectl describe` shows later: why a Running Pipeline has no pods (best
         * effort: a failed post is only logged) */
        char msg[512];
        snprintf(msg, sizeof msg,
                 "the operator was uninstalled (Deployment %s): %d worker pod(s) deleted, the "
                 "finalizer removed; the Pipeline keeps its status and checkpoint, and a new "
                 "install resumes it",
                 o->deployment, pods);
        sb_operator_event_ref ref = {ns, name, meta_str(p, "uid"), NULL};
        sb_err eerr = {0};
        sb_operator_event_post(c, &ref, "Normal", "Uninstalled", msg, NULL, &eerr);
        say(o, "Pipeline %s/%s stopped", ns, name);
    }
    cJSON_Delete(l);
    return rc;
}

static int stop_pipelines(sb_k8s_client *c, const sb_uninstall_opts *o, sb_err *err)
{
    int npipes = 0, npods = 0, nfin = 0;
    if (o->nnamespaces == 0) {
        if (stop_pipelines_at(c, o, PIPELINES_ALL, &npipes, &npods, &nfin, err) != 0)
            return -1;
    }
    for (size_t i = 0; i < o->nnamespaces; i++) {
        char coll[512];
        snprintf(coll, sizeof coll, PIPELINES_NS, o->namespaces[i]);
        if (stop_pipelines_at(c, o, coll, &npipes, &npods, &nfin, err) != 0)
            return -1;
    }
    if (o->out != NULL) {
        fprintf(o->out,
                "%d Pipeline(s): %d worker pod(s) deleted, the finalizer removed from %d; the "
                "Pipelines are kept (a new install resumes them)\n",
                npipes, npods, nfin);
        fflush(o->out);
    }
    return 0;
}

int sb_uninstall_run(const sb_uninstall_opts *o, sb_err *err)
{
    if (o->deployment == NULL || o->deployment[0] == '\0')
        return sb_err_set(err, "--uninstall: the controller Deployment's name is required");
    sb_k8s_config *cfg = o->kubeconfig != NULL || o->context != NULL
                             ? sb_k8s_config_load_kubeconfig(o->kubeconfig, o->context, err)
                             : sb_k8s_config_load_default(err);
    if (cfg == NULL)
        return sb_err_wrap(err, "--uninstall: no cluster configuration");
    sb_k8s_client *c = sb_k8s_client_new(cfg, err);
    if (c == NULL) {
        sb_k8s_config_free(cfg);
        return -1;
    }
    const char *ns = o->namespace;
    if (ns == NULL || ns[0] == '\0')
        ns = sb_k8s_config_namespace(cfg) ? sb_k8s_config_namespace(cfg) : "default";
    int rc = stop_controllers(c, o, ns, err);
    if (rc == 0)
        rc = stop_pipelines(c, o, err);
    char path[600];
    if (rc == 0 && o->lease != NULL && o->lease[0] != '\0') {
        snprintf(path, sizeof path, "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns,
                 o->lease);
        if ((rc = delete_ok(c, path, err)) != 0)
            sb_err_wrap(err, "deleting Lease %s/%s", ns, o->lease);
        else
            say(o, "Lease %s/%s deleted", ns, o->lease);
    }
    if (rc == 0 && o->test_pod != NULL && o->test_pod[0] != '\0') {
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, o->test_pod);
        if ((rc = delete_ok(c, path, err)) != 0)
            sb_err_wrap(err, "deleting the helm test pod %s/%s", ns, o->test_pod);
        else
            say(o, "helm test pod %s/%s deleted", ns, o->test_pod);
    }
    sb_k8s_client_free(c);
    sb_k8s_config_free(cfg);
    return rc;
}
