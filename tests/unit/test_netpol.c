/* The per-Pipeline NetworkPolicy (controller/operator/objects/netpol.h): the flag's settings
 * (errors name the key), the object built for a Pipeline (selector, the 7070 and 9102 rules, owner
 * reference), and sb_netpol_ensure against a scripted API server (libmicrohttpd, plain http):
 * create, keep our own on 409, replace a stale one of the controller's, never delete one that
 * is not the controller's, no request when disabled. The live cluster (ownership and garbage
 * collection) is checked in tests/k8s/operator-test.sh. */
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/operator/objects/netpol.h"

#define SETTINGS                                                                                   \
    "{\"controllerNamespace\": \"sb-system\", \"controllerLabels\": "                              \
    "{\"app.kubernetes.io/name\": \"streambatch-controller\", \"app.kubernetes.io/instance\": "    \
    "\"sb\"}, \"metricsFrom\": [{\"namespaceSelector\": {\"matchLabels\": "                        \
    "{\"kubernetes.io/metadata.name\": \"monitoring\"}}}]}"
#define PIPELINE                                                                                   \
    "{\"metadata\": {\"name\": \"etl\", \"namespace\": \"team-a\", \"uid\": \"u-1\"}, \"spec\": "  \
    "{}}"

static const char *sget(const cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *save = NULL, *t = strtok_r(buf, "/", &save); t != NULL && v != NULL;
         t = strtok_r(NULL, "/", &save)) {
        if (cJSON_IsArray(v))
            v = cJSON_GetArrayItem(v, atoi(t));
        else
            v = cJSON_GetObjectItemCaseSensitive(v, t);
    }
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double nget(const cJSON *o, const char *a, int i, const char *b, int j, const char *c)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, a), i), b),
                           j),
        c);
    cr_assert(cJSON_IsNumber(v), "%s[%d].%s[%d].%s is not a number", a, i, b, j, c);
    return v->valuedouble;
}

Test(netpol, settings_parse_and_errors_name_the_key)
{
    sb_netpol_settings s;
    sb_err e = {0};
    cr_assert_eq(sb_netpol_parse("off", &s, &e), 0);
    cr_assert_not(s.enabled);
    cr_assert_eq(sb_netpol_parse("", &s, &e), 0);
    cr_assert_not(s.enabled);
    cr_assert_eq(sb_netpol_parse(SETTINGS, &s, &e), 0, "%s", e.msg);
    cr_assert(s.enabled);
    cr_assert_str_eq(s.controller_namespace, "sb-system");
    cr_assert_eq(cJSON_GetArraySize(s.controller_labels), 2);
    cr_assert_eq(cJSON_GetArraySize(s.metrics_from), 1);
    sb_netpol_settings_free(&s);
    static const struct {
        const char *in, *want;
    } bad[] = {
        {"yes", "want \"off\" or a JSON object"},
        {"{\"controllerNamespace\": \"a\", \"controllerLabels\": {\"x\": \"y\"}, \"extra\": 1}",
         "extra: unknown key"},
        {"{\"controllerNamespace\": \"Not_A_Label\", \"controllerLabels\": {\"x\": \"y\"}}",
         "controllerNamespace:"},
        {"{\"controllerLabels\": {\"x\": \"y\"}}", "controllerNamespace:"},
        {"{\"controllerNamespace\": \"a\", \"controllerLabels\": {}}", "controllerLabels:"},
        {"{\"controllerNamespace\": \"a\", \"controllerLabels\": {\"x\": 3}}",
         "controllerLabels.x: want a string"},
        {"{\"controllerNamespace\": \"a\", \"controllerLabels\": {\"x\": \"y\"}, \"metricsFrom\": "
         "{}}",
         "metricsFrom: want a list"},
        {"{\"controllerNamespace\": \"a\", \"controllerLabels\": {\"x\": \"y\"}, \"metricsFrom\": "
         "[{\"ipBlock\": {\"cidr\": \"10.0.0.0/8\"}}, 5]}",
         "metricsFrom[1]: want a NetworkPolicyPeer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = '\0';
        cr_assert_eq(sb_netpol_parse(bad[i].in, &s, &e), -1, "accepted %s", bad[i].in);
        cr_assert_not(s.enabled);
        cr_assert_not_null(strstr(e.msg, bad[i].want), "%s: got \"%s\", want \"%s\"", bad[i].in,
                           e.msg, bad[i].want);
    }
}

Test(netpol, object_selects_the_pipeline_and_lets_in_only_its_peers)
{
    sb_netpol_settings s;
    sb_err e = {0};
    cr_assert_eq(sb_netpol_parse(SETTINGS, &s, &e), 0, "%s", e.msg);
    cJSON *p = cJSON_Parse(PIPELINE);
    cJSON *o = sb_netpol_build(&s, p, &e);
    cr_assert_not_null(o, "%s", e.msg);
    cr_assert_str_eq(sget(o, "apiVersion"), "networking.k8s.io/v1");
    cr_assert_str_eq(sget(o, "kind"), "NetworkPolicy");
    cr_assert_str_eq(sget(o, "metadata/name"), "streambatch-etl");
    cr_assert_str_eq(sget(o, "metadata/namespace"), "team-a");
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(labels, "streambatch.dev/pipeline")->valuestring, "etl");
    cr_assert_str_eq(
        cJSON_GetObjectItemCaseSensitive(labels, "app.kubernetes.io/managed-by")->valuestring,
        "streambatch-controller");
    /* owned by the Pipeline like its pods: garbage-collected with it */
    const cJSON *refs = cJSON_GetObjectItemCaseSensitive(md, "ownerReferences");
    cr_assert_eq(cJSON_GetArraySize(refs), 1);
    cr_assert_str_eq(sget(refs, "0/kind"), "Pipeline");
    cr_assert_str_eq(sget(refs, "0/apiVersion"), "streambatch.dev/v1alpha1");
    cr_assert_str_eq(sget(refs, "0/name"), "etl");
    cr_assert_str_eq(sget(refs, "0/uid"), "u-1");
    cr_assert(
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(refs, 0), "controller")));
    cr_assert(cJSON_IsTrue(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(refs, 0), "blockOwnerDeletion")));
    /* the whole spec, exactly */
    const char *want_spec =
        "{\"podSelector\": {\"matchLabels\": {\"streambatch.dev/pipeline\": \"etl\", "
        "\"app.kubernetes.io/name\": \"streambatch-worker\"}}, \"policyTypes\": [\"Ingress\"], "
        "\"ingress\": [{\"ports\": [{\"port\": 7070, \"protocol\": \"TCP\"}], \"from\": ["
        "{\"podSelector\": {\"matchLabels\": {\"streambatch.dev/pipeline\": \"etl\", "
        "\"app.kubernetes.io/name\": \"streambatch-worker\"}}}, "
        "{\"namespaceSelector\": {\"matchLabels\": {\"kubernetes.io/metadata.name\": "
        "\"sb-system\"}}, \"podSelector\": {\"matchLabels\": {\"app.kubernetes.io/name\": "
        "\"streambatch-controller\", \"app.kubernetes.io/instance\": \"sb\"}}}]}, "
        "{\"ports\": [{\"port\": 9102, \"protocol\": \"TCP\"}], \"from\": [{\"namespaceSelector\": "
        "{\"matchLabels\": {\"kubernetes.io/metadata.name\": \"monitoring\"}}}]}]}";
    cJSON *ws = cJSON_Parse(want_spec);
    cr_assert_not_null(ws);
    char *got = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o, "spec"));
    cr_assert(cJSON_Compare(ws, cJSON_GetObjectItemCaseSensitive(o, "spec"), 1), "spec: %s", got);
    cr_assert_eq(
        nget(cJSON_GetObjectItemCaseSensitive(o, "spec"), "ingress", 0, "ports", 0, "port"), 7070);
    free(got);
    cJSON_Delete(ws);
    cJSON_Delete(o);
    sb_netpol_settings_free(&s);

    /* no metricsFrom: no 9102 rule (nobody scrapes); no uid: no owner reference */
    cr_assert_eq(sb_netpol_parse("{\"controllerNamespace\": \"x\", \"controllerLabels\": "
                                 "{\"a\": \"b\"}}",
                                 &s, &e),
                 0, "%s", e.msg);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"), "uid");
    o = sb_netpol_build(&s, p, &e);
    cr_assert_not_null(o, "%s", e.msg);
    const cJSON *ing =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "spec"), "ingress");
    cr_assert_eq(cJSON_GetArraySize(ing), 1);
    cr_assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"),
                                                    "ownerReferences"));
    cJSON_Delete(o);
    /* a Pipeline without a namespace: an error naming it */
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "metadata"),
                                            "namespace");
    cr_assert_null(sb_netpol_build(&s, p, &e));
    cr_assert_not_null(strstr(e.msg, "metadata.namespace"), "%s", e.msg);
    sb_netpol_settings_free(&s);
    cJSON_Delete(p);
}

/* A stream:// sink's consumers (trainer pods labelled streambatch.dev/stream-consumer=<name>)
 * read the workers' Data service: the policy lets them in, in the Pipeline's namespace only, and
 * only for a stream (a file sink's workers stay closed to them). */
Test(netpol, a_stream_lets_in_its_labelled_consumer_pods_and_only_a_stream)
{
    sb_netpol_settings s;
    sb_err e = {0};
    cr_assert_eq(sb_netpol_parse(SETTINGS, &s, &e), 0, "%s", e.msg);
    cJSON *p = cJSON_Parse("{\"metadata\": {\"name\": \"train\", \"namespace\": \"ml\", "
                           "\"uid\": \"u-2\"}, \"spec\": {\"sink\": {\"uri\": \"stream://\", "
                           "\"format\": \"jsonl\"}}}");
    cJSON *o = sb_netpol_build(&s, p, &e);
    cr_assert_not_null(o, "%s", e.msg);
    const cJSON *from = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetObjectItemCaseSensitive(o, "spec"), "ingress"),
                           0),
        "from");
    cr_assert_eq(cJSON_GetArraySize(from), 3);
    cJSON *want = cJSON_Parse(
        "{\"podSelector\": {\"matchLabels\": {\"streambatch.dev/stream-consumer\": \"train\"}}}");
    char *got = cJSON_PrintUnformatted(cJSON_GetArrayItem(from, 2));
    cr_assert(cJSON_Compare(want, cJSON_GetArrayItem(from, 2), 1), "third peer: %s", got);
    free(got);
    cJSON_Delete(want);
    cJSON_Delete(o);
    char label[128];
    sb_netpol_consumer_label("train", label, sizeof label);
    cr_assert_str_eq(label, "streambatch.dev/stream-consumer=train");
    /* the same Pipeline writing files: no consumer peer */
    cJSON *sink =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "spec"), "sink");
    cJSON_ReplaceItemInObjectCaseSensitive(sink, "uri", cJSON_CreateString("s3://b/out/"));
    o = sb_netpol_build(&s, p, &e);
    cr_assert_not_null(o, "%s", e.msg);
    from = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                               cJSON_GetObjectItemCaseSensitive(o, "spec"), "ingress"),
                           0),
        "from");
    cr_assert_eq(cJSON_GetArraySize(from), 2);
    cJSON_Delete(o);
    cJSON_Delete(p);
    sb_netpol_settings_free(&s);
}

/* ---- sb_netpol_ensure against a scripted API server ---- */

typedef struct reply {
    int status;
    const char *body; /* "@want": the object the last POST sent */
} reply;

static struct {
    pthread_mutex_t mu;
    reply script[8];
    int nscript, next;
    char log[2048];  /* "METHOD URL\n" per request */
    char body[8192]; /* the last request body */
    char posted[8192];
    size_t body_n;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct MHD_Daemon *g_d;
static sb_k8s_config *g_cfg;
static sb_k8s_client *g_c;

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **state)
{
    (void)cls, (void)version;
    if (*state == NULL) {
        *state = conn;
        pthread_mutex_lock(&g.mu);
        g.body_n = 0;
        g.body[0] = '\0';
        pthread_mutex_unlock(&g.mu);
        return MHD_YES;
    }
    pthread_mutex_lock(&g.mu);
    if (*upload_size > 0) {
        size_t n = *upload_size;
        if (g.body_n + n >= sizeof g.body)
            n = sizeof g.body - 1 - g.body_n;
        memcpy(g.body + g.body_n, upload, n);
        g.body_n += n;
        g.body[g.body_n] = '\0';
        *upload_size = 0;
        pthread_mutex_unlock(&g.mu);
        return MHD_YES;
    }
    size_t l = strlen(g.log);
    snprintf(g.log + l, sizeof g.log - l, "%s %s\n", method, url);
    if (strcmp(method, "POST") == 0)
        snprintf(g.posted, sizeof g.posted, "%s", g.body);
    reply r = {404, "{}"};
    if (g.next < g.nscript)
        r = g.script[g.next++];
    char *body = strdup(r.body);
    pthread_mutex_unlock(&g.mu);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    enum MHD_Result rc = MHD_queue_response(conn, (unsigned)r.status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static void script(int n, const reply *r)
{
    pthread_mutex_lock(&g.mu);
    memcpy(g.script, r, (size_t)n * sizeof *r);
    g.nscript = n;
    g.next = 0;
    g.log[0] = '\0';
    g.posted[0] = '\0';
    pthread_mutex_unlock(&g.mu);
}

static void setup(void)
{
    g_d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL,
                           NULL, handler, NULL, MHD_OPTION_END);
    cr_assert_not_null(g_d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(g_d, MHD_DAEMON_INFO_BIND_PORT);
    char kc[1024];
    snprintf(kc, sizeof kc,
             "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:%u'}}]\n"
             "users: [{name: u, user: {token: t}}]\n"
             "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
             "current-context: x\n",
             (unsigned)info->port);
    sb_err err = {0};
    g_cfg = sb_k8s_config_parse_kubeconfig(kc, strlen(kc), "mock", NULL, NULL, &err);
    cr_assert_not_null(g_cfg, "%s", err.msg);
    g_c = sb_k8s_client_new(g_cfg, &err);
    cr_assert_not_null(g_c, "%s", err.msg);
    sb_k8s_client_set_retry(g_c, 1, 10);
    cr_assert_eq(sb_netpol_configure(SETTINGS, &err), 0, "%s", err.msg);
}

static void teardown(void)
{
    sb_netpol_configure("off", &(sb_err){0});
    sb_k8s_client_free(g_c);
    sb_k8s_config_free(g_cfg);
    MHD_stop_daemon(g_d);
}

#define COLL "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies"

/* The object ensure() would create, as the API would answer it, with the owner uid and the
 * managed-by label replaced. */
static char *existing(const char *uid, const char *managed_by)
{
    sb_netpol_settings s;
    sb_err e = {0};
    cr_assert_eq(sb_netpol_parse(SETTINGS, &s, &e), 0);
    cJSON *p = cJSON_Parse(PIPELINE);
    cJSON *o = sb_netpol_build(&s, p, &e);
    cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    cJSON *ref = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(md, "ownerReferences"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(ref, "uid", cJSON_CreateString(uid));
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(md, "labels"),
                                           "app.kubernetes.io/managed-by",
                                           cJSON_CreateString(managed_by));
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cJSON_Delete(p);
    sb_netpol_settings_free(&s);
    return out;
}

TestSuite(netpol_ensure, .init = setup, .fini = teardown, .timeout = 30);

Test(netpol_ensure, creates_the_policy_in_the_pipeline_namespace)
{
    script(1, (reply[]){{201, "{}"}});
    cJSON *p = cJSON_Parse(PIPELINE);
    sb_err e = {0};
    cr_assert_eq(sb_netpol_ensure(g_c, p, &e), 0, "%s", e.msg);
    cr_assert_str_eq(g.log, "POST " COLL "\n");
    cJSON *sent = cJSON_Parse(g.posted);
    cr_assert_not_null(sent, "%s", g.posted);
    cr_assert_str_eq(sget(sent, "metadata/name"), "streambatch-etl");
    cr_assert_str_eq(sget(sent, "metadata/ownerReferences/0/uid"), "u-1");
    cJSON_Delete(sent);
    cJSON_Delete(p);
}

Test(netpol_ensure, keeps_its_own_and_replaces_a_stale_one)
{
    cJSON *p = cJSON_Parse(PIPELINE);
    sb_err e = {0};
    char *mine = existing("u-1", "streambatch-controller");
    script(2, (reply[]){{409, "{\"reason\": \"AlreadyExists\"}"}, {200, mine}});
    cr_assert_eq(sb_netpol_ensure(g_c, p, &e), 0, "%s", e.msg);
    cr_assert_str_eq(g.log, "POST " COLL "\nGET " COLL "/streambatch-etl\n");
    /* an earlier Pipeline of the same name (another uid): deleted and created again */
    char *old = existing("u-0", "streambatch-controller");
    script(4, (reply[]){{409, "{}"}, {200, old}, {200, "{}"}, {201, "{}"}});
    cr_assert_eq(sb_netpol_ensure(g_c, p, &e), 0, "%s", e.msg);
    cr_assert_str_eq(g.log, "POST " COLL "\nGET " COLL "/streambatch-etl\nDELETE " COLL
                            "/streambatch-etl\nPOST " COLL "\n");
    free(mine);
    free(old);
    cJSON_Delete(p);
}

Test(netpol_ensure, never_deletes_one_that_is_not_the_controllers)
{
    cJSON *p = cJSON_Parse(PIPELINE);
    sb_err e = {0};
    char *theirs = existing("u-0", "someone-else");
    script(2, (reply[]){{409, "{}"}, {200, theirs}});
    cr_assert_eq(sb_netpol_ensure(g_c, p, &e), -1);
    cr_assert_str_eq(g.log, "POST " COLL "\nGET " COLL "/streambatch-etl\n");
    cr_assert_not_null(strstr(e.msg, "NetworkPolicy team-a/streambatch-etl: exists and is not the "
                                     "controller's"),
                       "%s", e.msg);
    /* an API error is reported with the object's name */
    script(1, (reply[]){{403, "{\"kind\": \"Status\", \"message\": \"forbidden: no create\"}"}});
    cr_assert_eq(sb_netpol_ensure(g_c, p, &e), -1);
    cr_assert_not_null(strstr(e.msg, "NetworkPolicy team-a/streambatch-etl:"), "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "forbidden"), "%s", e.msg);
    free(theirs);
    cJSON_Delete(p);
}

Test(netpol_ensure, disabled_makes_no_request)
{
    sb_err e = {0};
    cr_assert_eq(sb_netpol_configure("off", &e), 0);
    script(1, (reply[]){{500, "{}"}});
    cJSON *p = cJSON_Parse(PIPELINE);
    cr_assert_eq(sb_netpol_ensure(g_c, p, &e), 0, "%s", e.msg);
    cr_assert_str_eq(g.log, "");
    cJSON_Delete(p);
}
