/* The Kubernetes backend (controller/operator/kube.h) against a real API server, scheduler and node
 * agent: the test starts its own cluster (tests/helpers/kube_cluster.h) with two nodes without GPUs
 * (sb-kb-0, sb-kb-1; sb-kb-1 labelled streambatch.dev/test=yes) and always stops it. Each test
 * creates its own Pipeline object (for the owner uid) and feeds the backend from a pod informer
 * with the pipeline's label selector, as the operator does.
 *
 * Covered: real streambatch-worker pods register with an in-test controller (sb_ctl) and the
 * pool scales up and down (Pending pods first, Running ones only when can_remove allows); a
 * GPU pool in a cluster without GPUs stays at max_pending Pending pods with the scheduler's
 * message; a deleted pod and a killed one -> on_exit + WorkerPodFailed, and are replaced;
 * workerTemplate (image, nodeSelector, labels, annotations, env, tolerations) and the pod spec
 * read back from the API (owner reference, env with fieldRefs, requests = limits, port, name
 * length, the spill emptyDir and the security context); adoption after a "failover" + Rebind
 * against fake Worker.Rebind servers bound to the pod IPs (the real worker serves Rebind on
 * another branch); delete_all leaves no pod and no process. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/testutil.h"
#include "../helpers/kube_cluster.h"
#include "controller/ctl/ctl.h"
#include "controller/operator/kube.h"
#include "doc/doc.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/informer.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"
#include "spec/pipeline.h"
#include "io/split.h"
#include "../unit/testauth.h"

#define NODES                                                                                      \
    "name=sb-kb-0,cpu=4,memory=16Gi name=sb-kb-1,cpu=4,memory=16Gi,label:streambatch.dev/test=yes"
#define PODS "/api/v1/namespaces/default/pods"
#define PL "/apis/streambatch.dev/v1alpha1/namespaces/default/pipelines"

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    sb_kc_up("kube-backend-test", NODES);
    if (getenv("SB_KC_ERROR") != NULL)
        return;
    char args[1024], *out = NULL;
    snprintf(
        args, sizeof args,
        "apply --server-side --field-manager=sb-test -f %s/api/crd/pipelines.streambatch.dev.yaml"
        /* kubectl wait fails at once ("status.conditions accessor error") when it reads the CRD
         * before the API server has written its status: try again (as test_k8s_cluster) */
        " && for i in 1 2 3 4 5 6 7 8 9 10; do %s/bin/kubectl --kubeconfig %s/kubeconfig wait "
        "--for=condition=Established crd/pipelines.streambatch.dev --timeout=30s && break; "
        "sleep 1; false; done",
        sb_test_root(), getenv("SB_KC_STATE"), getenv("SB_KC_STATE"));
    if (sb_kc_kubectl(args, &out) != 0) {
        static char msg[4096];
        snprintf(msg, sizeof msg, "applying the CRD failed: %s", out);
        setenv("SB_KC_ERROR", msg, 1);
    }
    free(out);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    sb_kc_down();
}

/* ---- fixture: config, client, recorder, informer ---- */

static sb_k8s_config *g_cfg;
static sb_k8s_client *g_c;
static char g_dir[256];

typedef struct rec {
    pthread_mutex_t mu;
    char exits[64][160];
    size_t nexits;
    char events[64][400];
    size_t nevents;
    int allow_remove;
} rec;
static rec g_rec = {.mu = PTHREAD_MUTEX_INITIALIZER, .allow_remove = 1};

static void on_exit_cb(void *ud, const char *id, const char *why)
{
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    if (r->nexits < 64)
        snprintf(r->exits[r->nexits++], sizeof r->exits[0], "%s|%s", id, why);
    pthread_mutex_unlock(&r->mu);
}

static void on_event_cb(void *ud, const char *type, const char *reason, const char *msg)
{
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    if (r->nevents < 64)
        snprintf(r->events[r->nevents++], sizeof r->events[0], "%s|%s|%s", type, reason, msg);
    pthread_mutex_unlock(&r->mu);
}

static int can_remove_cb(void *ud, const char *id)
{
    (void)id;
    rec *r = ud;
    pthread_mutex_lock(&r->mu);
    int ok = r->allow_remove;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* Number of recorded exits/events whose text contains all of a and b (b may be NULL). */
static size_t count_exits(const char *a, const char *b)
{
    size_t n = 0;
    pthread_mutex_lock(&g_rec.mu);
    for (size_t i = 0; i < g_rec.nexits; i++)
        n += strstr(g_rec.exits[i], a) != NULL && (b == NULL || strstr(g_rec.exits[i], b));
    pthread_mutex_unlock(&g_rec.mu);
    return n;
}

static size_t count_events(const char *a, const char *b)
{
    size_t n = 0;
    pthread_mutex_lock(&g_rec.mu);
    for (size_t i = 0; i < g_rec.nevents; i++)
        n += strstr(g_rec.events[i], a) != NULL && (b == NULL || strstr(g_rec.events[i], b));
    pthread_mutex_unlock(&g_rec.mu);
    return n;
}

static void dump_rec(void)
{
    pthread_mutex_lock(&g_rec.mu);
    for (size_t i = 0; i < g_rec.nexits; i++)
        fprintf(stderr, "  exit: %s\n", g_rec.exits[i]);
    for (size_t i = 0; i < g_rec.nevents; i++)
        fprintf(stderr, "  event: %s\n", g_rec.events[i]);
    pthread_mutex_unlock(&g_rec.mu);
}

static sb_kube *volatile g_k;
static pthread_mutex_t g_kmu = PTHREAD_MUTEX_INITIALIZER;

static void inf_add(const cJSON *o, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_kmu);
    sb_kube_on_pod(g_k, o, 0);
    pthread_mutex_unlock(&g_kmu);
}

static void inf_update(const cJSON *old, const cJSON *o, void *arg)
{
    (void)old;
    inf_add(o, arg);
}

static void inf_delete(const cJSON *o, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_kmu);
    sb_kube_on_pod(g_k, o, 1);
    pthread_mutex_unlock(&g_kmu);
}

static sb_k8s_informer *start_informer(const char *pipeline)
{
    char sel[128];
    snprintf(sel, sizeof sel, "streambatch.dev/pipeline=%s", pipeline);
    sb_k8s_informer_handlers h = {inf_add, inf_update, inf_delete, NULL};
    sb_err err = {0};
    sb_k8s_informer *inf = sb_k8s_informer_new(g_cfg, PODS, sel, &h, &err);
    cr_assert_not_null(inf, "%s", err.msg);
    cr_assert_eq(sb_k8s_informer_start(inf, &err), 0, "%s", err.msg);
    cr_assert(sb_k8s_informer_wait_synced(inf, 15000), "the pod informer did not sync");
    return inf;
}

static void set_kube(sb_kube *k)
{
    pthread_mutex_lock(&g_kmu);
    g_k = k;
    pthread_mutex_unlock(&g_kmu);
}

static void setup(void)
{
    char kc[512];
    SB_KC_REQUIRE(kc);
    sb_err err = {0};
    g_cfg = sb_k8s_config_load_kubeconfig(kc, NULL, &err);
    cr_assert_not_null(g_cfg, "%s", err.msg);
    g_c = sb_k8s_client_new(g_cfg, &err);
    cr_assert_not_null(g_c, "%s", err.msg);
    sb_test_tmpl(g_dir, sizeof g_dir, "sb-kb");
    cr_assert_not_null(mkdtemp(g_dir));
    char cmd[1024], *out = NULL;
    /* 200 records; bench.sleep keeps the workers busy (sleeping, not burning CPU) */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/in && for i in $(seq 1 200); do echo \"{\\\"id\\\": $i}\"; done > "
             "%s/in/a.jsonl",
             g_dir, g_dir);
    cr_assert_eq(sb_test_run(cmd, &out), 0, "%s", out);
    free(out);
}

static void teardown(void)
{
    set_kube(NULL);
    sb_k8s_client_free(g_c);
    sb_k8s_config_free(g_cfg);
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    sb_test_run(cmd, &out);
    free(out);
}

TestSuite(kube, .init = setup, .fini = teardown, .timeout = 150);

/* ---- pipelines ---- */

/* The Pipeline object (JSON) with one stage; gpu > 0 makes it a GPU stage; tmpl (JSON text or
 * NULL) is the workerTemplate. */
static cJSON *pipeline_obj(const char *name, int gpu, const char *tmpl)
{
    char text[4096];
    snprintf(text, sizeof text,
             "{\"apiVersion\":\"streambatch.dev/v1alpha1\",\"kind\":\"Pipeline\","
             "\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\"},"
             "\"spec\":{\"source\":{\"uri\":\"file://%s/in/\",\"format\":\"jsonl\"},"
             "\"stages\":[{\"name\":\"slow\",\"op\":\"bench.sleep\","
             "\"args\":{\"msPerRecord\":1000},"
             "\"resources\":{\"cpu\":\"100m\",\"memory\":\"64Mi\"%s},"
             "\"workers\":{\"min\":1,\"max\":4}}],"
             "\"sink\":{\"uri\":\"file://%s/out/\",\"format\":\"jsonl\"}%s%s}}",
             name, g_dir, gpu ? ",\"gpu\":1" : "", g_dir, tmpl ? ",\"workerTemplate\":" : "",
             tmpl ? tmpl : "");
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o, "bad test JSON: %s", text);
    return o;
}

/* Creates the Pipeline in the API server; returns its uid (static buffer). */
static const char *create_pipeline(const cJSON *obj)
{
    static char uid[64];
    sb_err err = {0};
    long st = 0;
    cJSON *made = NULL;
    for (int i = 0; i < 40 && made == NULL; i++) {
        made = sb_k8s_create(g_c, PL, obj, &st, &err);
        if (made == NULL && st != 404)
            break;
        if (made == NULL)
            usleep(250 * 1000);
    }
    cr_assert_not_null(made, "creating the Pipeline: %s", err.msg);
    const cJSON *u = cJSON_GetObjectItem(cJSON_GetObjectItem(made, "metadata"), "uid");
    cr_assert(cJSON_IsString(u));
    snprintf(uid, sizeof uid, "%s", u->valuestring);
    cJSON_Delete(made);
    return uid;
}

typedef struct decoded {
    sb_doc *doc;
    sb_pipeline p;
    char *json;
} decoded;

static void decode(const cJSON *obj, decoded *d)
{
    memset(d, 0, sizeof *d);
    d->json = cJSON_PrintUnformatted(obj);
    d->doc = sb_doc_parse_json(d->json, strlen(d->json), NULL);
    cr_assert_not_null(d->doc);
    sb_diags dg = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(d->doc, 0), &d->p, &dg), 0);
    cr_assert_eq(dg.n, 0, "invalid test pipeline: %s: %s", dg.n ? dg.items[0].path : "",
                 dg.n ? dg.items[0].msg : "");
    sb_diags_free(&dg);
}

static void decoded_free(decoded *d)
{
    sb_pipeline_free(&d->p);
    sb_doc_free(d->doc);
    free(d->json);
}

static sb_kube *start_kube(const char *name, const char *uid, const sb_pipeline *p,
                           const char *controller, uint64_t epoch, const cJSON *tmpl)
{
    static char secret[128], ctl_sha[SB_RPC_DIGEST_HEX + 1];
    snprintf(secret, sizeof secret, "sb-auth-%s", name);
    sb_rpc_token_digest_hex(SB_TEST_CONTROLLER_TOKEN, ctl_sha);
    sb_kube_config kc = {.client = g_c,
                         .namespace = "default",
                         .pipeline = name,
                         .rpc = sb_test_ctl_opts(NULL),
                         .auth_secret = secret,
                         .auth_worker_token = SB_TEST_WORKER_TOKEN,
                         .auth_controller_sha256 = ctl_sha,
                         .pipeline_uid = uid,
                         .controller_address = controller,
                         .epoch = epoch,
                         .image = "streambatch/worker:test",
                         .worker_template = tmpl,
                         .store_budget = 64u << 20,
                         .on_exit = on_exit_cb,
                         .on_event = on_event_cb,
                         .can_remove = can_remove_cb,
                         .ud = &g_rec};
    kc.npools = sb_kube_pools_from_spec(p, kc.pools, 4);
    sb_err err = {0};
    sb_kube *k = sb_kube_start(&kc, &err);
    cr_assert_not_null(k, "%s", err.msg);
    return k;
}

/* ---- observations ---- */

/* Pods of the pipeline in the API: total, and how many in each phase. */
static int api_pods(const char *pipeline, int *running, int *pending)
{
    char sel[128];
    snprintf(sel, sizeof sel, "streambatch.dev/pipeline=%s", pipeline);
    sb_err err = {0};
    long st = 0;
    cJSON *l = sb_k8s_list(g_c, PODS, sel, &st, &err);
    cr_assert_not_null(l, "%s", err.msg);
    int n = 0, r = 0, p = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(l, "items"))
    {
        n++;
        const cJSON *ph = cJSON_GetObjectItem(cJSON_GetObjectItem(it, "status"), "phase");
        if (cJSON_IsString(ph) && strcmp(ph->valuestring, "Running") == 0)
            r++;
        if (cJSON_IsString(ph) && strcmp(ph->valuestring, "Pending") == 0)
            p++;
    }
    cJSON_Delete(l);
    if (running != NULL)
        *running = r;
    if (pending != NULL)
        *pending = p;
    return n;
}

/* Processes of the cluster whose environment says they run a pod of this pipeline. */
static int pod_processes(const char *pipeline)
{
    char want[256];
    snprintf(want, sizeof want, "SB_PIPELINE=default/%s", pipeline);
    char want2[256];
    snprintf(want2, sizeof want2, "SB_CLUSTER_DIR=%s", getenv("SB_KC_STATE"));
    DIR *d = opendir("/proc");
    cr_assert_not_null(d);
    struct dirent *e;
    int n = 0;
    static char buf[65536];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        int a = 0, b = 0;
        for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
            buf[len] = '\0';
            a |= strcmp(buf + i, want) == 0;
            b |= strcmp(buf + i, want2) == 0;
        }
        n += a && b;
    }
    closedir(d);
    return n;
}

static uint32_t ready_of(sb_kube *k, const char *pool, uint32_t *pending, char *why, size_t wl)
{
    uint32_t r = 0;
    sb_kube_pool_status(k, pool, NULL, &r, pending, why, wl);
    return r;
}

/* Waits until the pool has `ready` Running pods (and pending Pending ones when >= 0). */
static int wait_pool(sb_kube *k, const char *pool, uint32_t ready, int pending, long limit_ms)
{
    long t0 = sb_kc_now_ms();
    while (sb_kc_now_ms() - t0 < limit_ms) {
        uint32_t p = 0;
        if (ready_of(k, pool, &p, NULL, 0) == ready && (pending < 0 || p == (uint32_t)pending))
            return 1;
        usleep(100 * 1000);
    }
    return 0;
}

static int wait_api_pods(const char *pipeline, int want, long limit_ms)
{
    long t0 = sb_kc_now_ms();
    while (sb_kc_now_ms() - t0 < limit_ms) {
        if (api_pods(pipeline, NULL, NULL) == want)
            return 1;
        usleep(200 * 1000);
    }
    return 0;
}

/* Deletes everything and checks that no pod and no process is left. */
static void delete_all_and_check(sb_kube *k, const char *pipeline)
{
    sb_err err = {0};
    int left = -1;
    long t0 = sb_kc_now_ms();
    while (sb_kc_now_ms() - t0 < 40000) {
        left = sb_kube_delete_all(k, &err);
        cr_assert_geq(left, 0, "%s", err.msg);
        if (left == 0)
            break;
        usleep(200 * 1000);
    }
    cr_expect_eq(left, 0, "pods left after delete_all");
    cr_expect_eq(api_pods(pipeline, NULL, NULL), 0);
    int procs = -1;
    for (int i = 0; i < 50 && (procs = pod_processes(pipeline)) != 0; i++)
        usleep(100 * 1000);
    cr_expect_eq(procs, 0, "worker processes left after delete_all");
}

/* ---- tests ---- */

Test(kube, pools_from_spec)
{
    cJSON *o = pipeline_obj("x", 0, NULL);
    cJSON *stages = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "spec"), "stages");
    cJSON_AddItemToArray(stages,
                         cJSON_Parse("{\"name\":\"g\",\"op\":\"identity\",\"resources\":{\"cpu\":"
                                     "\"2\",\"memory\":\"1Gi\",\"gpu\":2},\"workers\":{\"min\":0,"
                                     "\"max\":3}}"));
    cJSON_AddItemToArray(stages, cJSON_Parse("{\"name\":\"c2\",\"op\":\"identity\",\"resources\":"
                                             "{\"cpu\":\"1500m\"},\"workers\":{\"min\":2,"
                                             "\"max\":2}}"));
    decoded d;
    decode(o, &d);
    sb_kube_pool pools[4];
    size_t n = sb_kube_pools_from_spec(&d.p, pools, 4);
    cr_assert_eq(n, 2);
    cr_expect_str_eq(pools[0].pool, "cpu");
    cr_expect_eq(pools[0].min, 2);
    cr_expect_eq(pools[0].max, 4);
    cr_expect_str_eq(pools[0].cpu, "1500m", "max over the pool's stages");
    cr_expect_str_eq(pools[0].memory, "64Mi");
    cr_expect_eq(pools[0].gpus, 0);
    cr_expect_eq(pools[0].slots, 1);
    cr_expect_eq(pools[0].accelerators, 0);
    cr_expect_str_eq(pools[1].pool, "gpu");
    cr_expect_eq(pools[1].min, 0);
    cr_expect_eq(pools[1].max, 3);
    cr_expect_str_eq(pools[1].cpu, "2");
    cr_expect_str_eq(pools[1].memory, "1Gi");
    cr_expect_eq(pools[1].gpus, 2);
    cr_expect_eq(pools[1].slots, 2);
    cr_expect_eq(pools[1].accelerators, 1);
    /* the pool a stage gets is the scheduler's rule */
    cr_expect_str_eq(sb_stage_pool(&d.p.spec.stages[1]), "gpu");
    cr_expect_eq(sb_kube_pools_from_spec(&d.p, pools, 1), 1);
    decoded_free(&d);
    cJSON_Delete(o);
}

Test(kube, worker_pods_register_and_the_pool_scales)
{
    const char *name = "kb-scale";
    cJSON *o = pipeline_obj(name, 0, NULL);
    const char *uid = create_pipeline(o);
    decoded d;
    decode(o, &d);
    sb_io_split *splits = NULL;
    size_t nsplits = 0;
    sb_err err = {0};
    cr_assert_eq(sb_io_plan_splits(&d.p.spec.source, &splits, &nsplits, &err), 0, "%s", err.msg);
    sb_storage_split ss[16];
    char *enc[16];
    cr_assert_leq(nsplits, 16);
    for (size_t i = 0; i < nsplits; i++) {
        enc[i] = sb_io_split_encode(&splits[i], &err);
        ss[i].split = enc[i];
        ss[i].bytes = splits[i].end - splits[i].start;
    }
    sb_ctl_config cc = {.pipeline = &d.p,
                        .pipeline_id = "default/kb-scale",
                        .pipeline_json = d.json,
                        .splits = ss,
                        .nsplits = nsplits,
                        .listen_addr = "127.0.0.1:0"};
    sb_ctl *ctl = sb_ctl_start(&cc, sb_test_ctl_opts(NULL), &err);
    cr_assert_not_null(ctl, "%s", err.msg);
    char caddr[64];
    snprintf(caddr, sizeof caddr, "127.0.0.1:%d", sb_ctl_port(ctl));

    sb_kube *k = start_kube(name, uid, &d.p, caddr, 0, NULL);
    set_kube(k);
    sb_k8s_informer *inf = start_informer(name);
    sb_backend be = sb_kube_backend(k);

    /* up to 2: two real workers register with the controller */
    long t0 = sb_kc_now_ms();
    cr_assert_eq(be.set_pool_size(be.impl, "cpu", 2), 0);
    cr_expect_eq(count_events("Normal|WorkerPodsCreated", "created 2 worker pods in pool cpu"), 1);
    cr_assert(wait_pool(k, "cpu", 2, 0, 60000), "2 Running pods not reached");
    long running_ms = sb_kc_now_ms() - t0;
    sb_ctl_snapshot s;
    for (int i = 0; i < 100; i++) {
        sb_ctl_snapshot_get(ctl, &s);
        if (s.workers_registered >= 2)
            break;
        usleep(100 * 1000);
    }
    cr_assert_geq(s.workers_registered, 2, "worker pods did not register with the controller");
    fprintf(stderr, "kube: 2 pods Running after %ld ms, registered after %ld ms\n", running_ms,
            sb_kc_now_ms() - t0);
    cr_expect_eq(be.pool_size(be.impl, "cpu"), 2);
    cr_expect_eq(pod_processes(name), 2, "one worker process per pod");

    /* up to 3 */
    cr_assert_eq(be.set_pool_size(be.impl, "cpu", 3), 0);
    cr_assert(wait_pool(k, "cpu", 3, 0, 60000));
    for (int i = 0; i < 100; i++) {
        sb_ctl_snapshot_get(ctl, &s);
        if (s.workers_registered >= 3)
            break;
        usleep(100 * 1000);
    }
    cr_expect_geq(s.workers_registered, 3);

    /* down to 1 while can_remove refuses: nothing Running is deleted */
    pthread_mutex_lock(&g_rec.mu);
    g_rec.allow_remove = 0;
    pthread_mutex_unlock(&g_rec.mu);
    cr_assert_eq(be.set_pool_size(be.impl, "cpu", 1), 0);
    usleep(1500 * 1000);
    cr_expect_eq(be.pool_size(be.impl, "cpu"), 3, "can_remove said no");
    cr_expect_eq(api_pods(name, NULL, NULL), 3);
    /* allowed now: the next sync removes two, and reports them (no Warning) */
    pthread_mutex_lock(&g_rec.mu);
    g_rec.allow_remove = 1;
    pthread_mutex_unlock(&g_rec.mu);
    cr_assert_eq(sb_kube_sync(k, &err), 0, "%s", err.msg);
    cr_expect_eq(be.pool_size(be.impl, "cpu"), 1, "deleted pods are no capacity at once");
    cr_assert(wait_api_pods(name, 1, 40000), "scaled-down pods did not go away");
    for (int i = 0; i < 50 && count_exits("scale down", NULL) < 2; i++)
        usleep(100 * 1000);
    cr_expect_eq(count_exits("scale down", NULL), 2);
    cr_expect_eq(count_events("WorkerPodFailed", NULL), 0);

    /* scale up beyond max_pending at once: at most 2 Pending at any time */
    cr_assert_eq(be.set_pool_size(be.impl, "cpu", 4), 0);
    uint32_t pend = 0;
    ready_of(k, "cpu", &pend, NULL, 0);
    cr_expect_leq(pend, 2, "max_pending bounds the pods created in one sync");
    cr_expect_eq(api_pods(name, NULL, NULL), 3, "1 running + 2 new");
    for (int i = 0; i < 200 && be.pool_size(be.impl, "cpu") < 4; i++) {
        cr_assert_eq(sb_kube_sync(k, &err), 0, "%s", err.msg);
        ready_of(k, "cpu", &pend, NULL, 0);
        cr_assert_leq(pend, 2);
        usleep(200 * 1000);
    }
    cr_expect_eq(be.pool_size(be.impl, "cpu"), 4);

    delete_all_and_check(k, name);
    cr_expect_eq(count_events("WorkerPodFailed", NULL), 0, "delete_all reports nothing");
    dump_rec();
    sb_k8s_informer_free(inf);
    set_kube(NULL);
    sb_kube_free(k);
    sb_ctl_free(ctl);
    for (size_t i = 0; i < nsplits; i++)
        free(enc[i]);
    sb_io_splits_free(splits, nsplits);
    decoded_free(&d);
    cJSON_Delete(o);
}

Test(kube, gpu_pool_without_gpus_stays_bounded_with_the_scheduler_message)
{
    const char *name = "kb-gpu";
    cJSON *o = pipeline_obj(name, 1, NULL);
    const char *uid = create_pipeline(o);
    decoded d;
    decode(o, &d);
    sb_kube *k = start_kube(name, uid, &d.p, "127.0.0.1:1", 0, NULL);
    set_kube(k);
    sb_k8s_informer *inf = start_informer(name);
    sb_backend be = sb_kube_backend(k);
    cr_assert_eq(be.set_pool_size(be.impl, "gpu", 5), 0);
    char why[512] = "";
    uint32_t pending = 0, desired = 0, ready = 0;
    long t0 = sb_kc_now_ms();
    while (sb_kc_now_ms() - t0 < 20000) {
        sb_err err = {0};
        cr_assert_eq(sb_kube_sync(k, &err), 0, "%s", err.msg);
        sb_kube_pool_status(k, "gpu", &desired, &ready, &pending, why, sizeof why);
        cr_assert_leq(pending, 2);
        cr_assert_leq(api_pods(name, NULL, NULL), 2, "more than max_pending pods created");
        if (why[0] != '\0')
            break;
        usleep(250 * 1000);
    }
    fprintf(stderr, "kube: gpu pool: desired %u ready %u pending %u why \"%s\"\n", desired, ready,
            pending, why);
    cr_expect_eq(desired, 5);
    cr_expect_eq(ready, 0);
    cr_expect_eq(pending, 2);
    cr_expect(strstr(why, "0/2 nodes are available") != NULL, "why: %s", why);
    cr_expect(strstr(why, "Insufficient nvidia.com/gpu") != NULL, "why: %s", why);
    /* more syncs later still do not pile up pods */
    for (int i = 0; i < 5; i++) {
        sb_err err = {0};
        cr_assert_eq(sb_kube_sync(k, &err), 0, "%s", err.msg);
        usleep(200 * 1000);
    }
    cr_expect_eq(api_pods(name, NULL, NULL), 2);
    cr_expect_eq(be.pool_size(be.impl, "gpu"), 0, "Pending pods are no capacity");
    /* scale down deletes Pending pods first (can_remove is only asked about Running ones) */
    pthread_mutex_lock(&g_rec.mu);
    g_rec.allow_remove = 0;
    pthread_mutex_unlock(&g_rec.mu);
    cr_assert_eq(be.set_pool_size(be.impl, "gpu", 1), 0);
    sb_kube_pool_status(k, "gpu", &desired, &ready, &pending, NULL, 0);
    cr_expect_eq(pending, 1);
    cr_expect(wait_api_pods(name, 1, 20000));
    cr_expect_eq(count_exits(name, NULL), 0, "Pending pods deleted by us are not worker exits");
    delete_all_and_check(k, name);
    sb_k8s_informer_free(inf);
    set_kube(NULL);
    sb_kube_free(k);
    decoded_free(&d);
    cJSON_Delete(o);
}

/* The pid of a pod's container process (from the agent's pod dir). */
static int pod_pid(const char *pod)
{
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd, "cat %s/pods/default_%s_*/worker.pid 2>/dev/null | head -1",
             getenv("SB_KC_STATE"), pod);
    sb_test_run(cmd, &out);
    int pid = atoi(out);
    free(out);
    return pid;
}

/* Names of the Running pods the backend knows, via the API. */
static int running_names(const char *pipeline, char names[][64], int cap)
{
    char sel[128];
    snprintf(sel, sizeof sel, "streambatch.dev/pipeline=%s", pipeline);
    sb_err err = {0};
    long st = 0;
    cJSON *l = sb_k8s_list(g_c, PODS, sel, &st, &err);
    cr_assert_not_null(l, "%s", err.msg);
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(l, "items"))
    {
        const cJSON *ph = cJSON_GetObjectItem(cJSON_GetObjectItem(it, "status"), "phase");
        const cJSON *md = cJSON_GetObjectItem(it, "metadata");
        if (n < cap && cJSON_IsString(ph) && strcmp(ph->valuestring, "Running") == 0 &&
            cJSON_GetObjectItem(md, "deletionTimestamp") == NULL)
            snprintf(names[n++], 64, "%s", cJSON_GetObjectItem(md, "name")->valuestring);
    }
    cJSON_Delete(l);
    return n;
}

Test(kube, deleted_or_failed_pod_is_reported_and_replaced)
{
    const char *name = "kb-fail";
    cJSON *o = pipeline_obj(name, 0, "{\"image\":\"sleeper\"}");
    const char *uid = create_pipeline(o);
    decoded d;
    decode(o, &d);
    const cJSON *tmpl = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "spec"), "workerTemplate");
    sb_kube *k = start_kube(name, uid, &d.p, "127.0.0.1:1", 0, tmpl);
    set_kube(k);
    sb_k8s_informer *inf = start_informer(name);
    sb_backend be = sb_kube_backend(k);
    cr_assert_eq(be.set_pool_size(be.impl, "cpu", 2), 0);
    cr_assert(wait_pool(k, "cpu", 2, 0, 60000));
    char names[4][64];
    cr_assert_eq(running_names(name, names, 4), 2);

    /* someone deletes a pod: reported at once (on_exit + Warning), then replaced by sync */
    char args[256], *out = NULL;
    snprintf(args, sizeof args, "delete pod %s --wait=false", names[0]);
    cr_assert_eq(sb_kc_kubectl(args, &out), 0, "%s", out);
    free(out);
    long t0 = sb_kc_now_ms();
    while (count_exits(names[0], NULL) == 0 && sb_kc_now_ms() - t0 < 10000)
        usleep(50 * 1000);
    fprintf(stderr, "kube: deleted pod reported after %ld ms\n", sb_kc_now_ms() - t0);
    cr_expect_eq(count_exits(names[0], "deleted"), 1);
    cr_expect_eq(count_events("Warning|WorkerPodFailed", names[0]), 1);
    cr_expect_eq(be.pool_size(be.impl, "cpu"), 1);
    sb_err err = {0};
    cr_assert_eq(sb_kube_sync(k, &err), 0, "%s", err.msg);
    cr_assert(wait_pool(k, "cpu", 2, 0, 60000), "the deleted pod was not replaced");

    /* a worker process is killed: the pod turns Failed (exit 137) -> reported, then the sync
     * deletes it and creates a replacement */
    int pid = pod_pid(names[1]);
    cr_assert_gt(pid, 0, "no pid for %s", names[1]);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    t0 = sb_kc_now_ms();
    while (count_exits(names[1], NULL) == 0 && sb_kc_now_ms() - t0 < 15000)
        usleep(50 * 1000);
    fprintf(stderr, "kube: failed pod reported after %ld ms\n", sb_kc_now_ms() - t0);
    cr_expect_eq(count_exits(names[1], "pod failed: container exited with code 137"), 1);
    cr_expect_eq(count_events("Warning|WorkerPodFailed", names[1]), 1);
    cr_assert_eq(sb_kube_sync(k, &err), 0, "%s", err.msg);
    cr_assert(wait_pool(k, "cpu", 2, 0, 60000), "the failed pod was not replaced");
    cr_expect(wait_api_pods(name, 2, 30000), "the Failed pod was not deleted");
    cr_expect_eq(count_exits(name, NULL), 2, "nothing else reported");
    delete_all_and_check(k, name);
    dump_rec();
    sb_k8s_informer_free(inf);
    set_kube(NULL);
    sb_kube_free(k);
    decoded_free(&d);
    cJSON_Delete(o);
}

static const char *env_value(const cJSON *env, const char *name, int *index)
{
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, env)
    {
        const cJSON *n = cJSON_GetObjectItem(e, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0) {
            if (index != NULL)
                *index = i;
            const cJSON *v = cJSON_GetObjectItem(e, "value");
            if (cJSON_IsString(v))
                return v->valuestring;
            const cJSON *fr = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "valueFrom"), "fieldRef");
            const cJSON *fp = cJSON_GetObjectItem(fr, "fieldPath");
            return cJSON_IsString(fp) ? fp->valuestring : "";
        }
        i++;
    }
    return NULL;
}

static const char *sget(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItem(o, a);
    if (b != NULL)
        x = cJSON_GetObjectItem(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

Test(kube, worker_template_and_pod_spec)
{
    /* 63 characters: the pod name keeps <= 63 by shortening the pipeline part */
    const char *name = "kb-template-with-a-rather-long-name-that-fills-all-63-character";
    cr_assert_eq(strlen(name), 63);
    const char *tmpl_json =
        "{\"image\":\"sleeper\",\"imagePullPolicy\":\"IfNotPresent\","
        "\"nodeSelector\":{\"streambatch.dev/test\":\"yes\"},"
        "\"labels\":{\"team\":\"data\",\"streambatch.dev/pool\":\"not-mine\"},"
        "\"annotations\":{\"example.com/note\":\"hello\"},"
        "\"env\":[{\"name\":\"EXTRA\",\"value\":\"42\"}],"
        "\"tolerations\":[{\"key\":\"dedicated\",\"operator\":\"Equal\",\"value\":\"sb\","
        "\"effect\":\"NoSchedule\"}]}";
    cJSON *o = pipeline_obj(name, 0, tmpl_json);
    const char *uid = create_pipeline(o);
    decoded d;
    decode(o, &d);
    const cJSON *tmpl = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "spec"), "workerTemplate");
    sb_kube *k = start_kube(name, uid, &d.p, "127.0.0.1:9", 7, tmpl);
    set_kube(k);
    sb_k8s_informer *inf = start_informer(name);
    sb_backend be = sb_kube_backend(k);
    cr_assert_eq(be.set_pool_size(be.impl, "cpu", 1), 0);
    cr_assert(wait_pool(k, "cpu", 1, 0, 60000));
    char names[2][64];
    cr_assert_eq(running_names(name, names, 2), 1);
    const char *pn = names[0];
    cr_expect_leq(strlen(pn), 63);
    cr_expect_eq(strncmp(pn, name, 40), 0, "name %s", pn);
    cr_expect(strstr(pn, "-cpu-") != NULL && strlen(strstr(pn, "-cpu-")) == 10, "name %s", pn);

    char path[300];
    snprintf(path, sizeof path, PODS "/%s", pn);
    sb_err err = {0};
    long st = 0;
    cJSON *pod = sb_k8s_get(g_c, path, &st, &err);
    cr_assert_not_null(pod, "%s", err.msg);
    const cJSON *md = cJSON_GetObjectItem(pod, "metadata");
    const cJSON *labels = cJSON_GetObjectItem(md, "labels");
    cr_expect_str_eq(sget(labels, "streambatch.dev/pipeline", NULL), name);
    cr_expect_str_eq(sget(labels, "streambatch.dev/pool", NULL), "cpu", "our labels win");
    cr_expect_str_eq(sget(labels, "app.kubernetes.io/name", NULL), "streambatch-worker");
    cr_expect_str_eq(sget(labels, "app.kubernetes.io/managed-by", NULL), "streambatch-controller");
    cr_expect_str_eq(sget(labels, "team", NULL), "data");
    cr_expect_str_eq(sget(md, "annotations", "example.com/note"), "hello");
    const cJSON *ref = cJSON_GetArrayItem(cJSON_GetObjectItem(md, "ownerReferences"), 0);
    cr_expect_str_eq(sget(ref, "kind", NULL), "Pipeline");
    cr_expect_str_eq(sget(ref, "uid", NULL), uid);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(ref, "controller")));
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(ref, "blockOwnerDeletion")));
    const cJSON *spec = cJSON_GetObjectItem(pod, "spec");
    cr_expect_str_eq(sget(spec, "restartPolicy", NULL), "Never");
    cr_expect_str_eq(sget(spec, "nodeName", NULL), "sb-kb-1", "nodeSelector applied");
    cr_expect_str_eq(sget(spec, "nodeSelector", "streambatch.dev/test"), "yes");
    int found_tol = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(spec, "tolerations"))
    {
        const char *key = sget(t, "key", NULL);
        found_tol |= key != NULL && strcmp(key, "dedicated") == 0;
    }
    cr_expect(found_tol, "toleration applied");
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(spec, "containers"), 0);
    cr_expect_str_eq(sget(c, "name", NULL), "worker");
    cr_expect_str_eq(sget(c, "image", NULL), "sleeper", "workerTemplate.image wins");
    cr_expect_str_eq(sget(c, "imagePullPolicy", NULL), "IfNotPresent");
    const cJSON *port = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "ports"), 0);
    cr_expect_str_eq(sget(port, "name", NULL), "data");
    cr_expect_eq(cJSON_GetObjectItem(port, "containerPort")->valueint, 7070);
    const cJSON *env = cJSON_GetObjectItem(c, "env");
    int extra_at = -1, epoch_at = -1;
    cr_expect_str_eq(env_value(env, "SB_CONTROLLER", NULL), "127.0.0.1:9");
    cr_expect_str_eq(env_value(env, "SB_WORKER_ID", NULL), "metadata.name");
    cr_expect_str_eq(env_value(env, "SB_POD_IP", NULL), "status.podIP");
    cr_expect_str_eq(env_value(env, "SB_POOL", NULL), "cpu");
    cr_expect_str_eq(env_value(env, "SB_SLOTS", NULL), "1");
    cr_expect_str_eq(env_value(env, "SB_ACCELERATORS", NULL), "0");
    cr_expect_str_eq(env_value(env, "SB_STORE_BUDGET", NULL), "67108864");
    char pid_s[128];
    snprintf(pid_s, sizeof pid_s, "default/%s", name);
    cr_expect_str_eq(env_value(env, "SB_PIPELINE", NULL), pid_s);
    cr_expect_str_eq(env_value(env, "SB_EPOCH", &epoch_at), "7");
    cr_expect_str_eq(env_value(env, "EXTRA", &extra_at), "42");
    cr_expect_gt(extra_at, epoch_at, "template env is appended");
    /* the spill emptyDir, the variables that point at it, and the non-root security context
     * survive the API server (the test node agent runs the process on the host: /tmp) */
    cr_expect_str_eq(env_value(env, "SB_SPILL_DIR", NULL), "/tmp");
    cr_expect_str_eq(env_value(env, "TMPDIR", NULL), "/tmp");
    int spill_vol = 0, spill_mount = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(spec, "volumes"))
    {
        const char *vn = sget(v, "name", NULL);
        spill_vol |= vn != NULL && strcmp(vn, "streambatch-spill") == 0 &&
                     cJSON_IsObject(cJSON_GetObjectItem(v, "emptyDir"));
    }
    cJSON_ArrayForEach(v, cJSON_GetObjectItem(c, "volumeMounts"))
    {
        const char *vn = sget(v, "name", NULL), *mp = sget(v, "mountPath", NULL);
        spill_mount |= vn != NULL && mp != NULL && strcmp(vn, "streambatch-spill") == 0 &&
                       strcmp(mp, "/tmp") == 0;
    }
    cr_expect(spill_vol && spill_mount, "spill emptyDir volume %d, mount at /tmp %d", spill_vol,
              spill_mount);
    const cJSON *psc = cJSON_GetObjectItem(spec, "securityContext");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(psc, "runAsNonRoot")));
    cr_expect_eq(cJSON_GetObjectItem(psc, "fsGroup")->valueint, 65532);
    cr_expect(cJSON_IsTrue(
        cJSON_GetObjectItem(cJSON_GetObjectItem(c, "securityContext"), "readOnlyRootFilesystem")));
    const cJSON *res = cJSON_GetObjectItem(c, "resources");
    cr_expect_str_eq(sget(res, "requests", "cpu"), "100m");
    cr_expect_str_eq(sget(res, "limits", "cpu"), "100m");
    cr_expect_str_eq(sget(res, "requests", "memory"), "64Mi");
    cr_expect_str_eq(sget(res, "limits", "memory"), "64Mi");
    cr_expect_null(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "requests"), "nvidia.com/gpu"));
    cJSON_Delete(pod);
    /* the process sees the downward-API values: its own name and pod IP */
    int pid = pod_pid(pn);
    cr_assert_gt(pid, 0);
    char cmd[256], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "tr '\\0' '\\n' < /proc/%d/environ | grep -E '^(SB_WORKER_ID|EXTRA)='", pid);
    sb_test_run(cmd, &out);
    char want[128];
    snprintf(want, sizeof want, "SB_WORKER_ID=%s", pn);
    cr_expect(sb_test_has_line(out, want), "%s", out);
    cr_expect(sb_test_has_line(out, "EXTRA=42"), "%s", out);
    free(out);
    delete_all_and_check(k, name);
    sb_k8s_informer_free(inf);
    set_kube(NULL);
    sb_kube_free(k);
    decoded_free(&d);
    cJSON_Delete(o);
}

/* ---- a fake Worker.Rebind server on a pod IP ---- */

typedef struct fake_worker {
    int accept;
    char pod[64];
    pthread_mutex_t mu;
    int calls;
    char controller[64], pipeline[128];
    uint64_t epoch;
} fake_worker;

static void fake_rebind(sb_rpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    fake_worker *f = ud;
    Streambatch__V1__RebindRequest *r = (Streambatch__V1__RebindRequest *)sb_rpc_call_decode(
        call, &streambatch__v1__rebind_request__descriptor, req, len);
    if (r == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->calls++;
    snprintf(f->controller, sizeof f->controller, "%s", r->controller_address);
    snprintf(f->pipeline, sizeof f->pipeline, "%s", r->pipeline);
    f->epoch = r->epoch;
    pthread_mutex_unlock(&f->mu);
    sb_rpc_msg_free(&r->base);
    Streambatch__V1__RebindReply rep = STREAMBATCH__V1__REBIND_REPLY__INIT;
    rep.accepted = f->accept;
    rep.worker_id = f->pod;
    rep.message = f->accept ? "" : "epoch 5 is lower than 9";
    sb_rpc_call_reply_msg(call, &rep.base, NULL);
}

static sb_rpc_server *fake_server(const char *ip, fake_worker *f)
{
    sb_err err = {0};
    sb_rpc_server *s = sb_rpc_server_new(NULL, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_add_unary(s, SB_RPC_WORKER_REBIND, fake_rebind, f, &err), 0);
    char addr[96];
    snprintf(addr, sizeof addr, "%s:7070", ip);
    cr_assert_gt(sb_rpc_server_listen(s, addr, &err), 0, "%s", err.msg);
    cr_assert_eq(sb_rpc_server_start(s, &err), 0, "%s", err.msg);
    return s;
}

static void pod_ip(const char *pod, char *ip, size_t n)
{
    char path[300];
    snprintf(path, sizeof path, PODS "/%s", pod);
    sb_err err = {0};
    long st = 0;
    cJSON *p = sb_k8s_get(g_c, path, &st, &err);
    cr_assert_not_null(p, "%s", err.msg);
    const char *v = sget(cJSON_GetObjectItem(p, "status"), "podIP", NULL);
    cr_assert_not_null(v);
    snprintf(ip, n, "%s", v);
    cJSON_Delete(p);
}

Test(kube, adoption_after_failover_and_rebind)
{
    const char *name = "kb-rebind";
    cJSON *o = pipeline_obj(name, 0, "{\"image\":\"sleeper\"}");
    const char *uid = create_pipeline(o);
    decoded d;
    decode(o, &d);
    const cJSON *tmpl = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "spec"), "workerTemplate");
    /* the first leader's backend makes three pods */
    sb_kube *a = start_kube(name, uid, &d.p, "127.0.0.1:1", 4, tmpl);
    set_kube(a);
    sb_k8s_informer *inf = start_informer(name);
    sb_backend be = sb_kube_backend(a);
    cr_assert_eq(be.set_pool_size(be.impl, "cpu", 2), 0);
    for (int i = 0; i < 300 && be.pool_size(be.impl, "cpu") < 3; i++) {
        be.set_pool_size(be.impl, "cpu", 3);
        usleep(200 * 1000);
    }
    cr_assert_eq(be.pool_size(be.impl, "cpu"), 3);
    /* ... and the leader goes away (its pods stay) */
    sb_k8s_informer_free(inf);
    set_kube(NULL);
    sb_kube_free(a);

    char names[4][64], ips[3][64];
    cr_assert_eq(running_names(name, names, 4), 3);
    fake_worker fw[2] = {{.accept = 1, .mu = PTHREAD_MUTEX_INITIALIZER},
                         {.accept = 0, .mu = PTHREAD_MUTEX_INITIALIZER}};
    sb_rpc_server *srv[2];
    for (int i = 0; i < 3; i++)
        pod_ip(names[i], ips[i], sizeof ips[i]);
    for (int i = 0; i < 2; i++) {
        snprintf(fw[i].pod, sizeof fw[i].pod, "%s", names[i]);
        srv[i] = fake_server(ips[i], &fw[i]);
    }
    /* names[2] serves nothing on its IP: unreachable */

    /* the new leader adopts the three pods and rebinds them */
    sb_kube *b = start_kube(name, uid, &d.p, "127.0.0.1:4242", 5, tmpl);
    set_kube(b);
    inf = start_informer(name);
    uint32_t desired = 0, ready = 0;
    sb_kube_pool_status(b, "cpu", &desired, &ready, NULL, NULL, 0);
    cr_expect_eq(desired, 3, "adopted pods keep the pool's size");
    cr_expect_eq(ready, 3);
    sb_err err = {0};
    long t0 = sb_kc_now_ms();
    int n = sb_kube_rebind(b, &err);
    fprintf(stderr, "kube: rebind of 3 adopted pods took %ld ms\n", sb_kc_now_ms() - t0);
    cr_expect_eq(n, 1, "one pod accepted (%s)", err.msg);
    cr_expect_eq(fw[0].calls, 1);
    cr_expect_str_eq(fw[0].controller, "127.0.0.1:4242");
    cr_expect_str_eq(fw[0].pipeline, "default/kb-rebind");
    cr_expect_eq(fw[0].epoch, 5);
    cr_expect_eq(fw[1].calls, 1);
    cr_expect_eq(count_events("Warning|WorkerRebindFailed", names[1]), 1);
    cr_expect_eq(count_events("Warning|WorkerRebindFailed", names[2]), 1);
    cr_expect_eq(count_events("WorkerRebindFailed", "epoch 5 is lower than 9"), 1);
    cr_expect(wait_api_pods(name, 1, 30000), "the refusing and unreachable pods were not deleted");
    cr_expect_eq(ready_of(b, "cpu", NULL, NULL, 0), 1);
    cr_expect_eq(count_exits(name, NULL), 0, "pods that never joined this leader are no exits");
    for (int i = 0; i < 2; i++)
        sb_rpc_server_free(srv[i]);
    delete_all_and_check(b, name);
    dump_rec();
    sb_k8s_informer_free(inf);
    set_kube(NULL);
    sb_kube_free(b);
    decoded_free(&d);
    cJSON_Delete(o);
}
