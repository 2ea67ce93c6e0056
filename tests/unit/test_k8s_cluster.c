/* The Kubernetes client against a real API server: the test starts its own cluster
 * (tests/k8s/cluster.sh up, private STREAMBATCH_CLUSTER_DIR, bounded by SB_K8S_TEST_UP_TIMEOUT,
 * default 150 s) before all tests and always stops it afterwards (report hook and atexit).
 * Without the cluster binaries every test FAILS with a message saying to run `make k8s-build`.
 *
 * Covered: kubeconfig + TLS client certificates (GET /version); ConfigMap create/get/list/
 * patch/delete and the 404 message; a 409 on update retried through the re-apply callback; the
 * project's CRD applied with kubectl --server-side, a Pipeline created and its /status updated
 * (with a conflict); the informer's ADDED/MODIFIED/DELETED with a label selector, and a forced
 * relist after a watch from a too-old resourceVersion (410); in-cluster config with a real
 * service-account token from $SB_SERVICEACCOUNT_DIR (SelfSubjectReview names the account). */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "doc/doc.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/informer.h"
#include "testutil.h"
#include "../helpers/kube_cluster.h"

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    sb_kc_up("k8s-test", NULL);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    sb_kc_down();
}

/* ---- per-test helpers ---- */

static sb_k8s_config *g_cfg;
static sb_k8s_client *g_c;

static void setup(void)
{
    const char *e = getenv("SB_KC_ERROR");
    if (e != NULL)
        cr_assert_fail("no test cluster: %s", e);
    const char *st = getenv("SB_KC_STATE");
    cr_assert_not_null(st, "the PRE_ALL hook did not run");
    char kc[512];
    snprintf(kc, sizeof kc, "%s/kubeconfig", st);
    sb_err err = {0};
    g_cfg = sb_k8s_config_load_kubeconfig(kc, NULL, &err);
    cr_assert_not_null(g_cfg, "%s", err.msg);
    g_c = sb_k8s_client_new(g_cfg, &err);
    cr_assert_not_null(g_c, "%s", err.msg);
}

static void teardown(void)
{
    sb_k8s_client_free(g_c);
    sb_k8s_config_free(g_cfg);
    g_c = NULL;
    g_cfg = NULL;
}

TestSuite(k8s_cluster, .init = setup, .fini = teardown, .timeout = 90);

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b != NULL)
        x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static int kubectl(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "KUBECONFIG=%s/kubeconfig timeout 60 %s/bin/kubectl %s 2>&1",
             getenv("SB_KC_STATE"), getenv("SB_KC_STATE"), args);
    return sb_test_run(cmd, out);
}

static cJSON *configmap(const char *name, const char *label, const char *value)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON_AddStringToObject(o, "kind", "ConfigMap");
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    if (label != NULL)
        cJSON_AddStringToObject(cJSON_AddObjectToObject(md, "labels"), "sbtest", label);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "data"), "v", value);
    return o;
}

#define CM "/api/v1/namespaces/default/configmaps"

Test(k8s_cluster, version_over_tls_with_client_certificate)
{
    size_t n;
    cr_expect_not_null(sb_k8s_config_client_cert_pem(g_cfg, &n), "the admin kubeconfig uses certs");
    sb_err err = {0};
    long st = 0;
    cJSON *v = sb_k8s_get(g_c, "/version", &st, &err);
    cr_assert_not_null(v, "%s", err.msg);
    cr_expect_eq(st, 200);
    cr_expect_str_eq(str_at(v, "gitVersion", NULL), "v1.35.4");
    cJSON_Delete(v);
    /* The client certificate is what authenticates us: whoami via SelfSubjectReview. */
    cJSON *r = sb_k8s_json(g_c, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":"
                           "\"SelfSubjectReview\"}",
                           NULL, &st, &err);
    cr_assert_not_null(r, "%s", err.msg);
    const cJSON *ui = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "status"), "userInfo");
    cr_expect_str_eq(str_at(ui, "username", NULL), "streambatch-admin");
    cJSON_Delete(r);
}

Test(k8s_cluster, configmap_create_get_list_patch_delete)
{
    sb_err err = {0};
    long st = 0;
    cJSON *o = configmap("crud-a", "crud", "1");
    cJSON *made = sb_k8s_create(g_c, CM, o, &st, &err);
    cr_assert_not_null(made, "%s", err.msg);
    cr_expect_eq(st, 201);
    cJSON_Delete(made);
    cJSON_Delete(o);
    o = configmap("crud-b", NULL, "2");
    cJSON_Delete(sb_k8s_create(g_c, CM, o, &st, &err));
    cr_expect_eq(st, 201, "%s", err.msg);
    /* Creating it again: 409 AlreadyExists with the server's message. */
    cr_expect_null(sb_k8s_create(g_c, CM, o, &st, &err));
    cr_expect_eq(st, 409);
    cr_expect(strstr(err.msg, "configmaps \"crud-b\" already exists") != NULL, "%s", err.msg);
    cJSON_Delete(o);

    cJSON *g = sb_k8s_get(g_c, CM "/crud-a", &st, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_expect_str_eq(str_at(g, "data", "v"), "1");
    cJSON_Delete(g);

    cJSON *l = sb_k8s_list(g_c, CM, "sbtest=crud", &st, &err);
    cr_assert_not_null(l, "%s", err.msg);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(l, "items")), 1,
                 "the label selector must keep only crud-a");
    cr_expect_not_null(str_at(l, "metadata", "resourceVersion"));
    cJSON_Delete(l);

    cJSON *p = sb_k8s_patch(g_c, CM "/crud-a", "{\"data\":{\"w\":\"new\"}}", &st, &err);
    cr_assert_not_null(p, "%s", err.msg);
    cr_expect_str_eq(str_at(p, "data", "v"), "1", "merge patch keeps other keys");
    cr_expect_str_eq(str_at(p, "data", "w"), "new");
    cJSON_Delete(p);

    cr_expect_eq(sb_k8s_delete(g_c, CM "/crud-a", &st, &err), 0, "%s", err.msg);
    cr_expect_eq(sb_k8s_delete(g_c, CM "/crud-b", &st, &err), 0, "%s", err.msg);
    cr_expect_null(sb_k8s_get(g_c, CM "/crud-a", &st, &err));
    cr_expect_eq(st, 404);
    cr_expect(strstr(err.msg, "GET " CM "/crud-a: 404 NotFound: configmaps \"crud-a\" not found") !=
                  NULL,
              "unclear 404 message: %s", err.msg);
    cr_expect_eq(sb_k8s_delete(g_c, CM "/crud-a", &st, &err), -1);
    cr_expect_eq(st, 404);
}

typedef struct reapply_arg {
    int calls;
    const char *value;
} reapply_arg;

static int reapply_data(cJSON *latest, void *arg, sb_err *err)
{
    reapply_arg *a = arg;
    a->calls++;
    cJSON *data = cJSON_GetObjectItem(latest, "data");
    if (data == NULL)
        return sb_err_set(err, "no data");
    cJSON_DeleteItemFromObject(data, "mine");
    cJSON_AddStringToObject(data, "mine", a->value);
    return 0;
}

Test(k8s_cluster, conflict_on_update_is_retried_via_callback)
{
    sb_err err = {0};
    long st = 0;
    cJSON *o = configmap("conflict", NULL, "1");
    cJSON *stale = sb_k8s_create(g_c, CM, o, &st, &err);
    cJSON_Delete(o);
    cr_assert_not_null(stale, "%s", err.msg);
    /* Someone else changes it: our copy's resourceVersion is now stale. */
    cJSON_Delete(sb_k8s_patch(g_c, CM "/conflict", "{\"data\":{\"theirs\":\"x\"}}", &st, &err));
    cr_assert_eq(st, 200, "%s", err.msg);
    cJSON_AddStringToObject(cJSON_GetObjectItem(stale, "data"), "mine", "y");
    /* Without a callback: the 409 is reported. */
    cr_expect_null(sb_k8s_update_retry(g_c, CM "/conflict", NULL, stale, NULL, NULL, 3, &st, &err));
    cr_expect_eq(st, 409);
    cr_expect(strstr(err.msg, "409 Conflict") != NULL, "%s", err.msg);
    reapply_arg a = {0, "y"};
    cJSON *done =
        sb_k8s_update_retry(g_c, CM "/conflict", NULL, stale, reapply_data, &a, 3, &st, &err);
    cr_assert_not_null(done, "%s", err.msg);
    cr_expect_eq(a.calls, 1, "one conflict, one re-apply (got %d)", a.calls);
    cr_expect_str_eq(str_at(done, "data", "mine"), "y");
    cr_expect_str_eq(str_at(done, "data", "theirs"), "x", "the other writer's change survives");
    cJSON_Delete(done);
    cJSON_Delete(stale);
    sb_k8s_delete(g_c, CM "/conflict", NULL, NULL);
}

static cJSON *example_pipeline(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/api/examples/filter-english.yaml", sb_test_root());
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    static char text[65536];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    sb_doc *d = sb_doc_parse_yaml(text, n, NULL);
    cr_assert(d != NULL && sb_doc_error(d, NULL, NULL) == NULL && sb_doc_count(d) == 1);
    char *json = sb_node_to_json(sb_doc_root(d, 0));
    sb_doc_free(d);
    cJSON *o = cJSON_Parse(json);
    free(json);
    cr_assert_not_null(o);
    cJSON *md = cJSON_GetObjectItem(o, "metadata");
    cJSON_DeleteItemFromObject(md, "name");
    cJSON_AddStringToObject(md, "name", name);
    return o;
}

static int reapply_phase(cJSON *latest, void *arg, sb_err *err)
{
    (void)err;
    reapply_arg *a = arg;
    a->calls++;
    cJSON_DeleteItemFromObject(latest, "status");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(latest, "status"), "phase", a->value);
    return 0;
}

#define PL "/apis/streambatch.dev/v1alpha1/namespaces/default/pipelines"

Test(k8s_cluster, crd_then_pipeline_status_subresource)
{
    char args[1024], *out = NULL;
    snprintf(
        args, sizeof args,
        "apply --server-side --field-manager=sb-test -f %s/api/crd/pipelines.streambatch.dev.yaml"
        /* kubectl wait fails at once ("status.conditions accessor error") when it reads the CRD
         * before the API server has written its status: try again */
        " && for i in 1 2 3 4 5 6 7 8 9 10; do %s/bin/kubectl --kubeconfig %s/kubeconfig wait "
        "--for=condition=Established crd/pipelines.streambatch.dev --timeout=30s && break; "
        "sleep 1; false; done",
        sb_test_root(), getenv("SB_KC_STATE"), getenv("SB_KC_STATE"));
    int rc = kubectl(args, &out);
    cr_assert_eq(rc, 0, "applying the CRD failed: %s", out);
    free(out);
    sb_err err = {0};
    long st = 0;
    cJSON *p = example_pipeline("status-test");
    cJSON *made = NULL;
    /* Discovery of a new CRD can lag Established by a moment: retry the create briefly. */
    for (int i = 0; i < 40 && made == NULL; i++) {
        made = sb_k8s_create(g_c, PL, p, &st, &err);
        if (made == NULL && st != 404)
            break;
        if (made == NULL)
            usleep(250 * 1000);
    }
    cJSON_Delete(p);
    cr_assert_not_null(made, "creating a Pipeline: %s", err.msg);
    cr_expect_eq(st, 201);
    cr_expect_null(cJSON_GetObjectItem(made, "status"));

    /* An update of /status changes the status only. */
    cJSON *want = cJSON_Duplicate(made, 1);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(want, "status"), "phase", "Running");
    cJSON *got = sb_k8s_update_status(g_c, PL "/status-test", want, NULL, NULL, &st, &err);
    cr_assert_not_null(got, "%s", err.msg);
    cr_expect_str_eq(str_at(got, "status", "phase"), "Running");
    cJSON_Delete(got);
    /* `made` is now stale: the conflict goes through the callback. */
    cJSON_Delete(want);
    want = cJSON_Duplicate(made, 1);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(want, "status"), "phase", "Succeeded");
    reapply_arg a = {0, "Succeeded"};
    got = sb_k8s_update_status(g_c, PL "/status-test", want, reapply_phase, &a, &st, &err);
    cr_assert_not_null(got, "%s", err.msg);
    cr_expect_eq(a.calls, 1);
    cr_expect_str_eq(str_at(got, "status", "phase"), "Succeeded");
    cJSON_Delete(got);
    cJSON_Delete(want);
    cJSON_Delete(made);
    cJSON *g = sb_k8s_get(g_c, PL "/status-test", &st, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_expect_str_eq(str_at(g, "status", "phase"), "Succeeded");
    cJSON_Delete(g);
    /* Unknown pipeline: the Status message names the resource. */
    cr_expect_null(sb_k8s_get(g_c, PL "/x", &st, &err));
    cr_expect(strstr(err.msg, "pipelines.streambatch.dev \"x\" not found") != NULL, "%s", err.msg);
    cr_expect_eq(sb_k8s_delete(g_c, PL "/status-test", &st, &err), 0, "%s", err.msg);
}

/* ---- informer ---- */

typedef struct seen {
    pthread_mutex_t mu;
    char log[8192];
} seen;

static void seen_add(seen *s, const char *what, const cJSON *o)
{
    pthread_mutex_lock(&s->mu);
    size_t n = strlen(s->log);
    const char *v = str_at(o, "data", "v") ? str_at(o, "data", "v") : str_at(o, "message", NULL);
    snprintf(s->log + n, sizeof s->log - n, "%s %s=%s;", what, str_at(o, "metadata", "name"),
             v != NULL ? v : "-");
    pthread_mutex_unlock(&s->mu);
}
static void s_add(const cJSON *o, void *a)
{
    seen_add(a, "ADDED", o);
}
static void s_upd(const cJSON *old, const cJSON *o, void *a)
{
    (void)old;
    seen_add(a, "MODIFIED", o);
}
static void s_del(const cJSON *o, void *a)
{
    seen_add(a, "DELETED", o);
}

/* Waits until the log contains want (at most 20 s). */
static int wait_for(seen *s, const char *want)
{
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&s->mu);
        int ok = strstr(s->log, want) != NULL;
        pthread_mutex_unlock(&s->mu);
        if (ok)
            return 1;
        usleep(100 * 1000);
    }
    return 0;
}

Test(k8s_cluster, informer_sees_labelled_configmaps_only)
{
    seen s = {PTHREAD_MUTEX_INITIALIZER, {0}};
    sb_k8s_informer_handlers h = {s_add, s_upd, s_del, &s};
    sb_err err = {0};
    long st;
    cJSON *pre = configmap("inf-pre", "watch", "0");
    cJSON_Delete(sb_k8s_create(g_c, CM, pre, &st, &err));
    cJSON_Delete(pre);
    sb_k8s_informer *inf = sb_k8s_informer_new(g_cfg, CM, "sbtest=watch", &h, &err);
    cr_assert_not_null(inf, "%s", err.msg);
    cr_assert_eq(sb_k8s_informer_start(inf, &err), 0, "%s", err.msg);
    cr_assert(sb_k8s_informer_wait_synced(inf, 20000), "informer did not sync");
    cr_expect(wait_for(&s, "ADDED inf-pre=0;"), "the initial list must add inf-pre: %s", s.log);

    cJSON *a = configmap("inf-a", "watch", "1"), *u = configmap("inf-unlabelled", NULL, "1");
    cJSON_Delete(sb_k8s_create(g_c, CM, u, &st, &err));
    cJSON_Delete(sb_k8s_create(g_c, CM, a, &st, &err));
    cr_expect_eq(st, 201, "%s", err.msg);
    cr_expect(wait_for(&s, "ADDED inf-a=1;"), "no ADDED: %s", s.log);
    cJSON_Delete(sb_k8s_patch(g_c, CM "/inf-a", "{\"data\":{\"v\":\"2\"}}", &st, &err));
    cr_expect(wait_for(&s, "MODIFIED inf-a=2;"), "no MODIFIED: %s", s.log);
    cJSON *c = sb_k8s_informer_get(inf, "default/inf-a");
    cr_assert_not_null(c, "cache lacks default/inf-a");
    cr_expect_str_eq(str_at(c, "data", "v"), "2");
    cJSON_Delete(c);
    sb_k8s_delete(g_c, CM "/inf-a", &st, &err);
    cr_expect(wait_for(&s, "DELETED inf-a=2;"), "no DELETED: %s", s.log);
    cr_expect_null(sb_k8s_informer_get(inf, "default/inf-a"));
    cr_expect_null(strstr(s.log, "inf-unlabelled"), "unlabelled object seen: %s", s.log);
    cr_expect_eq(sb_k8s_informer_count(inf), 1, "only inf-pre left");

    /* Stop must end the blocked watch quickly. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sb_k8s_informer_stop(inf);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_expect(dt < 3.0, "stop took %.2f s", dt);
    sb_k8s_informer_free(inf);
    cJSON_Delete(a);
    cJSON_Delete(u);
    sb_k8s_delete(g_c, CM "/inf-unlabelled", NULL, NULL);
    sb_k8s_delete(g_c, CM "/inf-pre", NULL, NULL);
}

#define EVENTS "/api/v1/namespaces/default/events"

static cJSON *event(const char *name, const char *msg)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"apiVersion\":\"v1\",\"kind\":\"Event\",\"metadata\":{\"name\":\"%s\","
             "\"labels\":{\"sbtest\":\"gone\"}},\"involvedObject\":{\"kind\":\"ConfigMap\","
             "\"namespace\":\"default\",\"name\":\"x\"},\"reason\":\"Test\",\"message\":\"%s\","
             "\"type\":\"Normal\"}",
             name, msg);
    return cJSON_Parse(text);
}

/* A forced relist: Events are not served from the API server's watch cache, so after an etcd
 * compaction a watch from resourceVersion 1 gets a real 410 (an ERROR event with a Status). */
Test(k8s_cluster, informer_relists_after_410_gone)
{
    seen s = {PTHREAD_MUTEX_INITIALIZER, {0}};
    sb_k8s_informer_handlers h = {s_add, s_upd, s_del, &s};
    sb_err err = {0};
    long st;
    cJSON *o = event("gone-real", "m1");
    cJSON_Delete(sb_k8s_create(g_c, EVENTS, o, &st, &err));
    cr_assert_eq(st, 201, "%s", err.msg);
    cJSON_Delete(o);
    /* Compact etcd up to now (the API server does it every 5 min), so resourceVersion 1 is
     * gone for good. */
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "set -e; pid=$(cut -d' ' -f1 %s/pids/etcd.pid); "
             "url=$(tr '\\0' '\\n' </proc/$pid/cmdline | grep -A1 -x -- --advertise-client-urls "
             "| tail -n 1); "
             "rev=$(curl -fsS -X POST $url/v3/kv/range -d '{\"key\":\"AA==\"}' | python3 -c "
             "'import json,sys; print(json.load(sys.stdin)[\"header\"][\"revision\"])'); "
             "curl -fsS -X POST $url/v3/kv/compaction -d \"{\\\"revision\\\":\\\"$rev\\\","
             "\\\"physical\\\":true}\"; echo; echo compacted to $rev",
             getenv("SB_KC_STATE"));
    int rc = sb_test_run(cmd, &out);
    cr_assert_eq(rc, 0, "etcd compaction failed: %s", out);
    free(out);
    sb_k8s_informer *inf = sb_k8s_informer_new(g_cfg, EVENTS, "sbtest=gone", &h, &err);
    cr_assert_not_null(inf, "%s", err.msg);
    /* Pretend a list happened at resourceVersion 1 with an object that no longer exists: the
     * watch gets 410, the informer relists, adds the real object and deletes the ghost. */
    cJSON *fake = cJSON_Parse("{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[{\"metadata\":"
                              "{\"name\":\"ghost\",\"namespace\":\"default\","
                              "\"resourceVersion\":\"1\"}}]}");
    cr_assert_eq(sb_k8s_informer_replace(inf, fake, &err), 0, "%s", err.msg);
    cJSON_Delete(fake);
    s.log[0] = '\0';
    cr_assert_eq(sb_k8s_informer_start(inf, &err), 0, "%s", err.msg);
    cr_expect(wait_for(&s, "ADDED gone-real=m1;"), "no relist: %s", s.log);
    cr_expect(wait_for(&s, "DELETED ghost=-;"), "ghost not deleted by the relist: %s", s.log);
    sb_k8s_informer_stats stats;
    sb_k8s_informer_stats_get(inf, &stats);
    cr_expect_geq(stats.gone, 1, "410 not seen");
    cr_expect_geq(stats.lists, 2, "fake list + relist, got %ld", stats.lists);
    /* It keeps watching after the relist. */
    cJSON_Delete(sb_k8s_patch(g_c, EVENTS "/gone-real", "{\"message\":\"m2\"}", &st, &err));
    cr_expect_eq(st, 200, "%s", err.msg);
    cr_expect(wait_for(&s, "MODIFIED gone-real=m2;"), "not watching after relist: %s", s.log);
    sb_k8s_informer_free(inf);
    sb_k8s_delete(g_c, EVENTS "/gone-real", NULL, NULL);
}

/* In-cluster config the way the node agent gives it to pods: a bound service-account token,
 * ca.crt and namespace in $SB_SERVICEACCOUNT_DIR, KUBERNETES_SERVICE_HOST/PORT. */
Test(k8s_cluster, in_cluster_config_with_serviceaccount_token)
{
    const char *state = getenv("SB_KC_STATE");
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "create serviceaccount sb-incluster");
    int rc = kubectl(args, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/sa-test", state);
    mkdir(dir, 0700);
    snprintf(args, sizeof args,
             "create token sb-incluster --duration=10m > %s/token.raw; rc=$?; "
             "tr -d '\\n' < %s/token.raw > %s/token; cp %s/pki/ca.crt %s/ca.crt; "
             "printf default > %s/namespace; exit $rc",
             dir, dir, dir, state, dir, dir);
    rc = kubectl(args, &out);
    cr_assert_eq(rc, 0, "kubectl create token: %s", out);
    free(out);
    char port[32] = {0}, pf[600];
    snprintf(pf, sizeof pf, "%s/apiserver.port", state);
    FILE *f = fopen(pf, "r");
    cr_assert_not_null(f, "%s", pf);
    cr_assert_not_null(fgets(port, sizeof port, f));
    fclose(f);
    port[strcspn(port, "\r\n")] = '\0';
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", port, 1);
    setenv("SB_SERVICEACCOUNT_DIR", dir, 1);
    sb_err err = {0};
    sb_k8s_config *cfg = sb_k8s_config_load_default(&err);
    cr_assert_not_null(cfg, "%s", err.msg);
    sb_k8s_client *c = sb_k8s_client_new(cfg, &err);
    cr_assert_not_null(c, "%s", err.msg);
    long st = 0;
    cJSON *r = sb_k8s_json(c, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":"
                           "\"SelfSubjectReview\"}",
                           NULL, &st, &err);
    cr_assert_not_null(r, "%s", err.msg);
    const cJSON *ui = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "status"), "userInfo");
    cr_expect_str_eq(str_at(ui, "username", NULL), "system:serviceaccount:default:sb-incluster");
    cJSON_Delete(r);
    /* RBAC applies: the account may not list secrets; the message says so. */
    cr_expect_null(sb_k8s_get(c, "/api/v1/namespaces/default/secrets", &st, &err));
    cr_expect_eq(st, 403);
    cr_expect(strstr(err.msg, "403 Forbidden") && strstr(err.msg, "sb-incluster"), "%s", err.msg);
    /* A rotated (here: garbage) token is picked up at the next refresh: 401. */
    char tp[700];
    snprintf(tp, sizeof tp, "%s/token", dir);
    f = fopen(tp, "w");
    fputs("not-a-valid-token", f);
    fclose(f);
    sb_k8s_config_set_token_refresh(cfg, 0);
    cr_expect_null(sb_k8s_get(c, "/api/v1/namespaces/default/configmaps", &st, &err));
    cr_expect_eq(st, 401, "the re-read token must be used (status %ld)", st);
    sb_k8s_client_free(c);
    sb_k8s_config_free(cfg);
}
