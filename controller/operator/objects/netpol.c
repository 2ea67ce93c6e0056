/* netpol.c — the per-Pipeline NetworkPolicy of the worker pods (see netpol.h): parsing the
 * --worker-network-policy settings, building the object, and creating it (or replacing a stale
 * one of the controller's) through the API client. Owns the process-wide settings. */

#include "controller/operator/objects/netpol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/operator/kube.h"
#include "controller/operator/objects/owned.h"

#define NETPOL_API "/apis/networking.k8s.io/v1/namespaces"

static sb_netpol_settings g_settings;

void sb_netpol_settings_free(sb_netpol_settings *s)
{
    cJSON_Delete(s->controller_labels);
    cJSON_Delete(s->metrics_from);
    memset(s, 0, sizeof *s);
}

/* A DNS-1123 label (a namespace name). */
static int dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

static int parse_labels(const cJSON *v, sb_netpol_settings *out, sb_err *err)
{
    if (!cJSON_IsObject(v) || cJSON_GetArraySize(v) == 0)
        return sb_err_set(err, "controllerLabels: want a non-empty object of label: value "
                               "(the controller pods' selector labels)");
    const cJSON *l;
    cJSON_ArrayForEach(l, v)
    {
        if (!cJSON_IsString(l) || l->string[0] == '\0')
            return sb_err_set(err, "controllerLabels.%s: want a string value", l->string);
    }
    out->controller_labels = cJSON_Duplicate(v, 1);
    return out->controller_labels ? 0 : sb_err_set(err, "out of memory");
}

static int parse_peers(const cJSON *v, sb_netpol_settings *out, sb_err *err)
{
    if (v != NULL && !cJSON_IsArray(v) && !cJSON_IsNull(v))
        return sb_err_set(err, "metricsFrom: want a list of NetworkPolicyPeer objects");
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, v)
    {
        if (!cJSON_IsObject(p) || cJSON_GetArraySize(p) == 0)
            return sb_err_set(err,
                              "metricsFrom[%d]: want a NetworkPolicyPeer (podSelector, "
                              "namespaceSelector or ipBlock)",
                              i);
        i++;
    }
    out->metrics_from = cJSON_IsArray(v) ? cJSON_Duplicate(v, 1) : cJSON_CreateArray();
    return out->metrics_from ? 0 : sb_err_set(err, "out of memory");
}

static int parse_object(const cJSON *o, sb_netpol_settings *out, sb_err *err)
{
    const cJSON *k;
    cJSON_ArrayForEach(k, o)
    {
        if (strcmp(k->string, "controllerNamespace") != 0 &&
            strcmp(k->string, "controllerLabels") != 0 && strcmp(k->string, "metricsFrom") != 0)
            return sb_err_set(err,
                              "%s: unknown key (known: controllerNamespace, controllerLabels, "
                              "metricsFrom)",
                              k->string);
    }
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(o, "controllerNamespace");
    if (!cJSON_IsString(ns) || !dns_label(ns->valuestring))
        return sb_err_set(err, "controllerNamespace: want the controller's namespace (a "
                               "DNS-1123 label)");
    snprintf(out->controller_namespace, sizeof out->controller_namespace, "%s", ns->valuestring);
    if (parse_labels(cJSON_GetObjectItemCaseSensitive(o, "controllerLabels"), out, err) != 0)
        return -1;
    return parse_peers(cJSON_GetObjectItemCaseSensitive(o, "metricsFrom"), out, err);
}

int sb_netpol_parse(const char *spec, sb_netpol_settings *out, sb_err *err)
{
    memset(out, 0, sizeof *out);
    if (spec == NULL || spec[0] == '\0' || strcmp(spec, "off") == 0)
        return 0;
    cJSON *o = cJSON_Parse(spec);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return sb_err_set(err, "want \"off\" or a JSON object {\"controllerNamespace\": ..., "
                               "\"controllerLabels\": {...}, \"metricsFrom\": [...]}");
    }
    int rc = parse_object(o, out, err);
    cJSON_Delete(o);
    if (rc != 0) {
        sb_netpol_settings_free(out);
        return -1;
    }
    out->enabled = 1;
    return 0;
}

int sb_netpol_configure(const char *spec, sb_err *err)
{
    sb_netpol_settings s;
    if (sb_netpol_parse(spec, &s, err) != 0)
        return -1;
    sb_netpol_settings_free(&g_settings);
    g_settings = s;
    return 0;
}

void sb_netpol_name(const char *pipeline, char *out, size_t n)
{
    snprintf(out, n, "streambatch-%s", pipeline);
}

void sb_netpol_consumer_label(const char *pipeline, char *out, size_t n)
{
    snprintf(out, n, "%s=%s", SB_NETPOL_CONSUMER_LABEL, pipeline);
}

static void add_port(cJSON *rule, int port)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "port", port);
    cJSON_AddStringToObject(p, "protocol", "TCP");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(rule, "ports"), p);
}

/* {podSelector: {matchLabels: {pipeline label: name, app.kubernetes.io/name: worker}}} */
static cJSON *worker_selector(const char *pipeline)
{
    cJSON *sel = cJSON_CreateObject();
    cJSON *ml = cJSON_AddObjectToObject(sel, "matchLabels");
    cJSON_AddStringToObject(ml, "streambatch.dev/pipeline", pipeline);
    cJSON_AddStringToObject(ml, "app.kubernetes.io/name", "streambatch-worker");
    return sel;
}

static cJSON *build_spec(const sb_netpol_settings *s, const char *pipeline, int stream)
{
    cJSON *spec = cJSON_CreateObject();
    cJSON_AddItemToObject(spec, "podSelector", worker_selector(pipeline));
    cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "policyTypes"),
                         cJSON_CreateString("Ingress"));
    cJSON *ingress = cJSON_AddArrayToObject(spec, "ingress");
    /* 7070 from the pipeline's own workers and from the controller pods */
    cJSON *data = cJSON_CreateObject();
    add_port(data, SB_NETPOL_WORKER_PORT);
    cJSON *from = cJSON_AddArrayToObject(data, "from");
    cJSON *peer = cJSON_CreateObject();
    cJSON_AddItemToObject(peer, "podSelector", worker_selector(pipeline));
    cJSON_AddItemToArray(from, peer);
    peer = cJSON_CreateObject();
    cJSON *nsl =
        cJSON_AddObjectToObject(cJSON_AddObjectToObject(peer, "namespaceSelector"), "matchLabels");
    cJSON_AddStringToObject(nsl, "kubernetes.io/metadata.name", s->controller_namespace);
    cJSON_AddItemToObject(cJSON_AddObjectToObject(peer, "podSelector"), "matchLabels",
                          cJSON_Duplicate(s->controller_labels, 1));
    cJSON_AddItemToArray(from, peer);
    if (stream) { /* the stream's consumers, in the Pipeline's namespace */
        peer = cJSON_CreateObject();
        cJSON *ml =
            cJSON_AddObjectToObject(cJSON_AddObjectToObject(peer, "podSelector"), "matchLabels");
        cJSON_AddStringToObject(ml, SB_NETPOL_CONSUMER_LABEL, pipeline);
        cJSON_AddItemToArray(from, peer);
    }
    cJSON_AddItemToArray(ingress, data);
    /* 9102 from the configured peers only */
    if (cJSON_GetArraySize(s->metrics_from) > 0) {
        cJSON *metrics = cJSON_CreateObject();
        add_port(metrics, SB_KUBE_METRICS_PORT);
        cJSON_AddItemToObject(metrics, "from", cJSON_Duplicate(s->metrics_from, 1));
        cJSON_AddItemToArray(ingress, metrics);
    }
    return spec;
}

cJSON *sb_netpol_build(const sb_netpol_settings *s, const cJSON *pipeline, sb_err *err)
{
    const char *name = sb_owned_str(pipeline, "metadata", "name");
    const char *ns = sb_owned_str(pipeline, "metadata", "namespace");
    if (name == NULL || ns == NULL) {
        sb_err_set(err, "NetworkPolicy: the Pipeline has no metadata.%s",
                   name == NULL ? "name" : "namespace");
        return NULL;
    }
    if (!s->enabled || s->controller_labels == NULL) {
        sb_err_set(err, "NetworkPolicy: not configured (--worker-network-policy)");
        return NULL;
    }
    char np[300];
    sb_netpol_name(name, np, sizeof np);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "networking.k8s.io/v1");
    cJSON_AddStringToObject(o, "kind", "NetworkPolicy");
    sb_owned_metadata(o, np, ns, name, sb_owned_str(pipeline, "metadata", "uid"));
    const char *uri =
        sb_owned_str(cJSON_GetObjectItemCaseSensitive(pipeline, "spec"), "sink", "uri");
    int stream = uri != NULL && strcmp(uri, "stream://") == 0;
    cJSON_AddItemToObject(o, "spec", build_spec(s, name, stream));
    return o;
}

int sb_netpol_ensure(sb_k8s_client *c, const cJSON *pipeline, sb_err *err)
{
    static const char *const fields[] = {"spec", NULL};
    if (!g_settings.enabled)
        return 0;
    cJSON *want = sb_netpol_build(&g_settings, pipeline, err);
    if (want == NULL)
        return -1;
    const char *ns = sb_owned_str(pipeline, "metadata", "namespace");
    const char *name = sb_owned_str(want, "metadata", "name");
    char coll[300];
    snprintf(coll, sizeof coll, NETPOL_API "/%s/networkpolicies", ns);
    sb_err e = {0};
    int rc = sb_owned_ensure(c, coll, want, fields, &e);
    if (rc != 0)
        sb_err_set(err, "NetworkPolicy %s/%s: %s", ns, name, e.msg);
    cJSON_Delete(want);
    return rc;
}
