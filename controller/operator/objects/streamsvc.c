/* streamsvc.c — a stream Pipeline's Service and EndpointSlice (streamsvc.h): their names, the
 * objects, and creating them or moving the endpoints to this leader (owned.c's rules). */
#include "controller/operator/objects/streamsvc.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "controller/operator/objects/owned.h"

#define PREFIX "sb-stream-"

/* A DNS-1035 label: a lowercase letter, then letters, digits and '-', not ending in '-'. */
static int dns1035(const char *s, size_t n)
{
    if (n == 0 || n > 63 || s[0] < 'a' || s[0] > 'z' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

void sb_streamsvc_name(const char *pipeline, char *out, size_t n)
{
    snprintf(out, n, PREFIX "%s", pipeline);
    if (dns1035(out, strlen(out)))
        return;
    uint64_t h = 1469598103934665603ull; /* FNV-1a: stable across versions and machines */
    for (const char *p = pipeline; *p != '\0'; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    snprintf(out, n, PREFIX "%016llx", (unsigned long long)h);
}

/* name and ns of the Pipeline, and the objects' name; -1 + err when one is missing. */
static int names(const cJSON *pipeline, const char **name, const char **ns, char *svc, size_t n,
                 sb_err *err)
{
    *name = sb_owned_str(pipeline, "metadata", "name");
    *ns = sb_owned_str(pipeline, "metadata", "namespace");
    if (*name == NULL || *ns == NULL)
        return sb_err_set(err, "stream Service: the Pipeline has no metadata.%s",
                          *name == NULL ? "name" : "namespace");
    sb_streamsvc_name(*name, svc, n);
    return 0;
}

static cJSON *port_entry(int port, int is_service)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", "control");
    cJSON_AddNumberToObject(p, "port", port);
    cJSON_AddStringToObject(p, "protocol", "TCP");
    if (is_service) /* without a selector the slice's port is the one used */
        cJSON_AddNumberToObject(p, "targetPort", port);
    return p;
}

cJSON *sb_streamsvc_build_service(const cJSON *pipeline, sb_err *err)
{
    const char *name, *ns;
    char svc[80];
    if (names(pipeline, &name, &ns, svc, sizeof svc, err) != 0)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON_AddStringToObject(o, "kind", "Service");
    sb_owned_metadata(o, svc, ns, name, sb_owned_str(pipeline, "metadata", "uid"));
    cJSON *spec = cJSON_AddObjectToObject(o, "spec");
    cJSON_AddStringToObject(spec, "type", "ClusterIP");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "ports"), port_entry(SB_STREAMSVC_PORT, 1));
    return o;
}

cJSON *sb_streamsvc_build_slice(const cJSON *pipeline, const char *ip, int port, sb_err *err)
{
    const char *name, *ns;
    char svc[80];
    unsigned char buf[16];
    if (names(pipeline, &name, &ns, svc, sizeof svc, err) != 0)
        return NULL;
    int v6 = ip != NULL && strchr(ip, ':') != NULL;
    if (ip == NULL || inet_pton(v6 ? AF_INET6 : AF_INET, ip, buf) != 1 || port <= 0 ||
        port > 65535) {
        sb_err_set(err, "EndpointSlice %s/%s: %s:%d is not an IP address and port", ns, svc,
                   ip != NULL ? ip : "(none)", port);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "discovery.k8s.io/v1");
    cJSON_AddStringToObject(o, "kind", "EndpointSlice");
    sb_owned_metadata(o, svc, ns, name, sb_owned_str(pipeline, "metadata", "uid"));
    cJSON *labels =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), "labels");
    cJSON_AddStringToObject(labels, "kubernetes.io/service-name", svc);
    cJSON_AddStringToObject(labels, "endpointslice.kubernetes.io/managed-by",
                            SB_STREAMSVC_SLICE_MANAGER);
    cJSON_AddStringToObject(o, "addressType", v6 ? "IPv6" : "IPv4");
    cJSON *ep = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(ep, "addresses"), cJSON_CreateString(ip));
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(ep, "conditions"), "ready", 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "endpoints"), ep);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "ports"), port_entry(port, 0));
    return o;
}

int sb_streamsvc_ensure(sb_k8s_client *c, const cJSON *pipeline, const char *ip, int port,
                        char *addr, size_t n, sb_err *err)
{
    static const char *const svc_fields[] = {NULL}; /* ours: kept (its ClusterIP with it) */
    static const char *const slice_fields[] = {"endpoints", "ports", NULL};
    cJSON *svc = sb_streamsvc_build_service(pipeline, err);
    cJSON *slice = svc != NULL ? sb_streamsvc_build_slice(pipeline, ip, port, err) : NULL;
    const char *ns = sb_owned_str(pipeline, "metadata", "namespace");
    const char *name = sb_owned_str(svc, "metadata", "name");
    char coll[300];
    sb_err e = {0};
    int rc = slice != NULL ? 0 : -1;
    if (rc == 0) {
        snprintf(coll, sizeof coll, "/api/v1/namespaces/%s/services", ns);
        if ((rc = sb_owned_ensure(c, coll, svc, svc_fields, &e)) != 0)
            sb_err_set(err, "Service %s/%s: %s", ns, name, e.msg);
    }
    if (rc == 0) {
        snprintf(coll, sizeof coll, "/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices", ns);
        if ((rc = sb_owned_ensure(c, coll, slice, slice_fields, &e)) != 0)
            sb_err_set(err, "EndpointSlice %s/%s: %s", ns, name, e.msg);
    }
    if (rc == 0)
        snprintf(addr, n, "%s.%s.svc:%d", name, ns, SB_STREAMSVC_PORT);
    cJSON_Delete(svc);
    cJSON_Delete(slice);
    return rc;
}
