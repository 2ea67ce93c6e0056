/* A stream Pipeline's Service and EndpointSlice (controller/operator/objects/streamsvc.h): the
 * Service's name (a DNS-1035 label whatever the Pipeline's name), the Service (no selector, port
 * 7070 named control, owned by the Pipeline) and the EndpointSlice (the leader's address and
 * port, the labels that tie it to the Service and keep Kubernetes' own controller off it, IPv4
 * or IPv6), and what is refused. Making them on a live API server, with the address the status
 * gives, is checked by itests/test_operator_stream. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "controller/operator/objects/streamsvc.h"

#define PIPELINE "{\"metadata\": {\"name\": \"train\", \"namespace\": \"ml\", \"uid\": \"u-7\"}}"

static const char *at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, a), b);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

static const cJSON *first(const cJSON *o, const char *arr)
{
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, arr), 0);
}

static int num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

Test(streamsvc, the_name_is_a_dns_label_whatever_the_pipeline_is_called)
{
    char n[64], m[64];
    sb_streamsvc_name("train", n, sizeof n);
    cr_expect_str_eq(n, "sb-stream-train");
    /* dots (a subdomain), and a name that would pass 63 characters: hashed, stable, distinct */
    sb_streamsvc_name("train.v2", n, sizeof n);
    cr_expect_eq(strlen(n), strlen("sb-stream-") + 16, "%s", n);
    cr_expect_eq(strncmp(n, "sb-stream-", 10), 0);
    sb_streamsvc_name("train.v2", m, sizeof m);
    cr_expect_str_eq(n, m, "the same name every time (a new leader finds the Service)");
    sb_streamsvc_name("train.v3", m, sizeof m);
    cr_expect_str_neq(n, m);
    char longname[80];
    memset(longname, 'a', 60);
    longname[60] = '\0';
    sb_streamsvc_name(longname, n, sizeof n);
    cr_expect_leq(strlen(n), 63, "%s", n);
    memset(longname, 'a', 53); /* 10 + 53 = 63: still the plain name */
    longname[53] = '\0';
    sb_streamsvc_name(longname, n, sizeof n);
    cr_expect_eq(strlen(n), 63);
    cr_expect_eq(strncmp(n + 10, longname, 53), 0);
}

Test(streamsvc, a_service_without_selector_and_a_slice_with_the_leaders_address)
{
    cJSON *p = cJSON_Parse(PIPELINE);
    sb_err e = {0};
    cJSON *svc = sb_streamsvc_build_service(p, &e);
    cr_assert_not_null(svc, "%s", e.msg);
    cr_expect_str_eq(at(svc, "metadata", "name"), "sb-stream-train");
    cr_expect_str_eq(at(svc, "metadata", "namespace"), "ml");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(svc, "spec");
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(spec, "selector"),
                   "no selector: the leader is not a pod a label picks");
    const cJSON *port = first(spec, "ports");
    cr_expect_eq(num(port, "port"), SB_STREAMSVC_PORT);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(port, "name")->valuestring, "control");
    const cJSON *ref = first(cJSON_GetObjectItemCaseSensitive(svc, "metadata"), "ownerReferences");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(ref, "uid")->valuestring, "u-7");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(ref, "kind")->valuestring, "Pipeline");

    cJSON *sl = sb_streamsvc_build_slice(p, "10.244.1.7", 41233, &e);
    cr_assert_not_null(sl, "%s", e.msg);
    cr_expect_str_eq(at(sl, "metadata", "name"), "sb-stream-train");
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(sl, "metadata"), "labels");
    cr_expect_str_eq(
        cJSON_GetObjectItemCaseSensitive(labels, "kubernetes.io/service-name")->valuestring,
        "sb-stream-train");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(labels, "endpointslice.kubernetes.io/"
                                                              "managed-by")
                         ->valuestring,
                     SB_STREAMSVC_SLICE_MANAGER);
    cr_expect_str_neq(SB_STREAMSVC_SLICE_MANAGER, "endpointslice-controller.k8s.io");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(sl, "addressType")->valuestring, "IPv4");
    const cJSON *ep = first(sl, "endpoints");
    cr_expect_str_eq(first(ep, "addresses")->valuestring, "10.244.1.7");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(ep, "conditions"), "ready")));
    const cJSON *sp = first(sl, "ports");
    cr_expect_eq(num(sp, "port"), 41233, "the slice carries the port the leader picked");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(sp, "name")->valuestring, "control");
    cJSON_Delete(sl);
    sl = sb_streamsvc_build_slice(p, "fd00::2", 7, &e);
    cr_assert_not_null(sl, "%s", e.msg);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(sl, "addressType")->valuestring, "IPv6");
    cJSON_Delete(sl);
    cJSON_Delete(svc);
    cJSON_Delete(p);
}

Test(streamsvc, refuses_what_the_api_would)
{
    cJSON *p = cJSON_Parse(PIPELINE);
    sb_err e = {0};
    cr_expect_null(sb_streamsvc_build_slice(p, "leader.example", 7070, &e));
    cr_expect(strstr(e.msg, "leader.example:7070 is not an IP address") != NULL, "%s", e.msg);
    cr_expect_null(sb_streamsvc_build_slice(p, "10.0.0.1", 0, &e));
    cr_expect_null(sb_streamsvc_build_slice(p, NULL, 7070, &e));
    cJSON *nons = cJSON_Parse("{\"metadata\": {\"name\": \"train\"}}");
    cr_expect_null(sb_streamsvc_build_service(nons, &e));
    cr_expect(strstr(e.msg, "no metadata.namespace") != NULL, "%s", e.msg);
    cJSON_Delete(nons);
    cJSON_Delete(p);
}
