/* The worker Pod object the Kubernetes backend creates (sb_kube_pod_json, no API server):
 * credentials as secretKeyRef env, the spill emptyDir and the security context, and the
 * workerTemplate's env, envFrom, volumes, volumeMounts and serviceAccountName merged with ours.
 * The spec that feeds it comes through the validator, as in the operator. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "controller/operator/kube.h"
#include "doc/doc.h"
#include "spec/pipeline.h"

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *x = get(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* The env entry named name, and its index (-1 when absent). */
static const cJSON *env_entry(const cJSON *env, const char *name, int *at)
{
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, env)
    {
        const char *n = str(e, "name");
        if (n != NULL && strcmp(n, name) == 0) {
            if (at != NULL)
                *at = i;
            return e;
        }
        i++;
    }
    if (at != NULL)
        *at = -1;
    return NULL;
}

static const cJSON *named(const cJSON *list, const char *name)
{
    return env_entry(list, name, NULL);
}

typedef struct built {
    sb_doc *doc;
    sb_pipeline p;
    cJSON *spec_json, *pod;
} built;

static const char *g_tls_secret, *g_tls_name; /* set by a test before build() */

/* Validates the pipeline (YAML), then builds the pod of its first pool as the operator would. */
static void build(const char *yaml, built *b)
{
    memset(b, 0, sizeof *b);
    b->doc = sb_doc_parse_yaml(yaml, strlen(yaml), NULL);
    cr_assert_not_null(b->doc);
    sb_diags d = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(b->doc, 0), &b->p, &d), 0);
    cr_assert_eq(d.n, 0, "invalid test pipeline: %s: %s", d.n ? d.items[0].path : "",
                 d.n ? d.items[0].msg : "");
    sb_diags_free(&d);
    if (b->p.spec.worker_template_json != NULL) {
        b->spec_json = cJSON_Parse(b->p.spec.worker_template_json);
        cr_assert_not_null(b->spec_json);
    }
    sb_kube_config kc = {.namespace = "team-a",
                         .pipeline = "p",
                         .pipeline_uid = "uid-1",
                         .controller_address = "10.0.0.5:4000",
                         .epoch = 3,
                         .image = "streambatch/worker:1",
                         .worker_template = b->spec_json,
                         .credentials_secret = sb_pipeline_credentials_secret(&b->p),
                         .store_budget = 1 << 20,
                         .tls_secret = g_tls_secret,
                         .tls_server_name = g_tls_name,
                         .auth_secret = "sb-auth-uid-1-0123abcd",
                         .auth_worker_token = "not read by the pod JSON",
                         .auth_controller_sha256 = "c0ffee",
                         .spill_limit = 3u << 30};
    kc.npools = sb_kube_pools_from_spec(&b->p, kc.pools, 4);
    cr_assert_geq(kc.npools, 1);
    b->pod = sb_kube_pod_json(&kc, &kc.pools[0], "p-cpu-abcde");
    cr_assert_not_null(b->pod);
}

static void built_free(built *b)
{
    cJSON_Delete(b->pod);
    cJSON_Delete(b->spec_json);
    sb_pipeline_free(&b->p);
    sb_doc_free(b->doc);
}

static const cJSON *container(const built *b)
{
    const cJSON *c = cJSON_GetArrayItem(get(get(b->pod, "spec"), "containers"), 0);
    cr_assert_not_null(c);
    return c;
}

#define HEAD                                                                                       \
    "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n"           \
    "  stages: [{name: a, op: identity, resources: {cpu: 500m, memory: 1Gi}}]\n"

Test(kube_pod, credentials_secret_becomes_secret_key_refs)
{
    built b;
    build(HEAD "  source: {uri: 's3://in-b/x/', format: jsonl, credentialsSecret: s3-creds}\n"
               "  sink: {uri: 's3://out-b/y/', format: jsonl}\n",
          &b);
    const cJSON *env = get(container(&b), "env");
    static const struct {
        const char *name;
        int optional;
    } want[] = {{"AWS_ACCESS_KEY_ID", 0}, {"AWS_SECRET_ACCESS_KEY", 0}, {"AWS_SESSION_TOKEN", 1},
                {"AWS_REGION", 1},        {"AWS_ENDPOINT_URL", 1},      {"AWS_ENDPOINT_URL_S3", 1}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const cJSON *e = named(env, want[i].name);
        cr_assert_not_null(e, "no %s", want[i].name);
        cr_expect_null(get(e, "value"), "%s: a value, not a reference", want[i].name);
        const cJSON *r = get(get(e, "valueFrom"), "secretKeyRef");
        cr_assert_not_null(r, "%s: no secretKeyRef", want[i].name);
        cr_expect_str_eq(str(r, "name"), "s3-creds");
        cr_expect_str_eq(str(r, "key"), want[i].name);
        const cJSON *opt = get(r, "optional");
        cr_assert(cJSON_IsBool(opt), "%s: optional not a bool", want[i].name);
        cr_expect_eq(cJSON_IsTrue(opt), want[i].optional, "%s: optional", want[i].name);
    }
    built_free(&b);
}

Test(kube_pod, the_sink_secret_alone_is_used_and_no_secret_means_no_aws_env)
{
    built b;
    build(HEAD "  source: {uri: 'file:///in/', format: jsonl}\n"
               "  sink: {uri: 's3://out-b/y/', format: jsonl, credentialsSecret: sink-creds}\n",
          &b);
    const cJSON *r = get(get(named(get(container(&b), "env"), "AWS_ACCESS_KEY_ID"), "valueFrom"),
                         "secretKeyRef");
    cr_expect_str_eq(str(r, "name"), "sink-creds");
    built_free(&b);
    build(HEAD "  source: {uri: 'file:///in/', format: jsonl}\n"
               "  sink: {uri: 'file:///out/', format: jsonl}\n",
          &b);
    const cJSON *e;
    cJSON_ArrayForEach(e, get(container(&b), "env"))
    {
        cr_expect_neq(strncmp(str(e, "name"), "AWS_", 4), 0, "%s without a Secret", str(e, "name"));
        if (strcmp(str(e, "name"), "SB_AUTH_TOKEN") != 0) /* the pipeline's own credentials */
            cr_expect_null(get(get(e, "valueFrom"), "secretKeyRef"), "%s refers to a Secret",
                           str(e, "name"));
    }
    built_free(&b);
}

Test(kube_pod, spill_emptydir_and_security_context)
{
    built b;
    build(HEAD "  source: {uri: 'file:///in/', format: jsonl}\n"
               "  sink: {uri: 'file:///out/', format: jsonl}\n",
          &b);
    const cJSON *spec = get(b.pod, "spec"), *c = container(&b);
    const cJSON *vol = named(get(spec, "volumes"), SB_WORKER_SPILL_VOLUME);
    cr_assert_not_null(vol, "no spill volume");
    cr_expect(cJSON_IsObject(get(vol, "emptyDir")));
    cr_expect_str_eq(str(get(vol, "emptyDir"), "sizeLimit"), "3221225472", "spill_limit");
    const cJSON *m = named(get(c, "volumeMounts"), SB_WORKER_SPILL_VOLUME);
    cr_assert_not_null(m);
    cr_expect_str_eq(str(m, "mountPath"), "/tmp");
    cr_expect_null(get(m, "readOnly"));
    const cJSON *env = get(c, "env");
    cr_expect_str_eq(str(named(env, "SB_SPILL_DIR"), "value"), "/tmp");
    cr_expect_str_eq(str(named(env, "TMPDIR"), "value"), "/tmp");
    const cJSON *psc = get(spec, "securityContext");
    cr_expect(cJSON_IsTrue(get(psc, "runAsNonRoot")));
    cr_expect_eq(get(psc, "runAsUser")->valueint, 65532);
    cr_expect_eq(get(psc, "runAsGroup")->valueint, 65532);
    cr_expect_eq(get(psc, "fsGroup")->valueint, 65532, "the emptyDir is writable by the user");
    cr_expect_str_eq(str(get(psc, "seccompProfile"), "type"), "RuntimeDefault");
    const cJSON *csc = get(c, "securityContext");
    cr_expect(cJSON_IsTrue(get(csc, "readOnlyRootFilesystem")));
    cr_expect(cJSON_IsFalse(get(csc, "allowPrivilegeEscalation")));
    cr_expect_str_eq(cJSON_GetArrayItem(get(get(csc, "capabilities"), "drop"), 0)->valuestring,
                     "ALL");
    cr_expect_null(get(spec, "serviceAccountName"), "none unless the template names one");
    cr_expect(cJSON_IsFalse(get(spec, "automountServiceAccountToken")),
              "workers never call the API: no token unless the template asks");
    cr_expect_null(get(c, "envFrom"));
    /* what was there before stays */
    cr_expect_str_eq(str(spec, "restartPolicy"), "Never");
    cr_expect_str_eq(str(c, "image"), "streambatch/worker:1");
    cr_expect_str_eq(str(named(env, "SB_CONTROLLER"), "value"), "10.0.0.5:4000");
    cr_expect_str_eq(str(named(env, "SB_PIPELINE"), "value"), "team-a/p");
    cr_expect_str_eq(str(named(env, "SB_EPOCH"), "value"), "3");
    cr_expect_str_eq(str(named(env, "SB_STORE_BUDGET"), "value"), "1048576");
    /* the pipeline's credentials: the worker token only by reference to its Secret */
    const cJSON *tok = get(get(named(env, "SB_AUTH_TOKEN"), "valueFrom"), "secretKeyRef");
    cr_expect_str_eq(str(tok, "name"), "sb-auth-uid-1-0123abcd");
    cr_expect_str_eq(str(tok, "key"), "token");
    cr_expect_null(get(named(env, "SB_AUTH_TOKEN"), "value"), "never the token itself");
    cr_expect_str_eq(str(named(env, "SB_AUTH_CONTROLLER_SHA256"), "value"), "c0ffee");
    char *text = cJSON_PrintUnformatted(b.pod);
    cr_expect(strstr(text, "not read by the pod JSON") == NULL, "the token is in the pod");
    free(text);
    cr_expect_str_eq(str(get(get(c, "resources"), "limits"), "memory"), "1Gi");
    cr_expect_str_eq(str(get(get(c, "resources"), "requests"), "cpu"), "500m");
    cr_expect_str_eq(str(get(get(b.pod, "metadata"), "labels"), "streambatch.dev/pool"), "cpu");
    built_free(&b);
}

Test(kube_pod, template_env_volumes_and_service_account_are_merged)
{
    built b;
    build(HEAD "  source: {uri: 's3://in-b/x/', format: jsonl, credentialsSecret: s3-creds}\n"
               "  sink: {uri: 'file:///data/out/', format: jsonl}\n"
               "  workerTemplate:\n"
               "    serviceAccountName: s3-reader\n"
               "    automountServiceAccountToken: true\n"
               "    env:\n"
               "    - {name: POOL_COPY, value: '$(SB_POOL)'}\n"
               "    - {name: TOKEN, valueFrom: {secretKeyRef: {name: tok, key: t}}}\n"
               "    envFrom: [{prefix: CFG_, configMapRef: {name: settings}}]\n"
               "    volumes:\n"
               "    - {name: data, persistentVolumeClaim: {claimName: shared}}\n"
               "    - {name: certs, secret: {secretName: ca, defaultMode: 292}}\n"
               "    volumeMounts:\n"
               "    - {name: data, mountPath: /data}\n"
               "    - {name: certs, mountPath: /etc/certs, readOnly: true}\n",
          &b);
    const cJSON *spec = get(b.pod, "spec"), *c = container(&b);
    cr_expect_str_eq(str(spec, "serviceAccountName"), "s3-reader");
    cr_expect(cJSON_IsTrue(get(spec, "automountServiceAccountToken")), "the template asked");
    const cJSON *env = get(c, "env");
    int ours = -1, secret = -1, user = -1, tok = -1;
    env_entry(env, "SB_EPOCH", &ours);
    env_entry(env, "AWS_SECRET_ACCESS_KEY", &secret);
    cr_expect_str_eq(str(env_entry(env, "POOL_COPY", &user), "value"), "$(SB_POOL)");
    const cJSON *t = env_entry(env, "TOKEN", &tok);
    cr_expect_str_eq(str(get(get(t, "valueFrom"), "secretKeyRef"), "name"), "tok");
    cr_expect(ours >= 0 && secret > ours && user > secret && tok > user,
              "order: ours %d, credentials %d, user %d, %d", ours, secret, user, tok);
    const cJSON *ef = cJSON_GetArrayItem(get(c, "envFrom"), 0);
    cr_expect_str_eq(str(ef, "prefix"), "CFG_");
    cr_expect_str_eq(str(get(ef, "configMapRef"), "name"), "settings");
    const cJSON *vols = get(spec, "volumes");
    cr_expect_eq(cJSON_GetArraySize(vols), 3, "ours + two");
    cr_expect_str_eq(str(cJSON_GetArrayItem(vols, 0), "name"), SB_WORKER_SPILL_VOLUME);
    cr_expect_str_eq(str(get(named(vols, "data"), "persistentVolumeClaim"), "claimName"), "shared");
    cr_expect_eq(get(get(named(vols, "certs"), "secret"), "defaultMode")->valueint, 292,
                 "volume sources pass through whole");
    const cJSON *mounts = get(c, "volumeMounts");
    cr_expect_eq(cJSON_GetArraySize(mounts), 3);
    cr_expect_str_eq(str(named(mounts, "data"), "mountPath"), "/data");
    cr_expect(cJSON_IsTrue(get(named(mounts, "certs"), "readOnly")));
    built_free(&b);
}

Test(kube_pod, missing_inputs_give_null)
{
    sb_kube_pool pool = {.pool = "cpu", .slots = 1};
    sb_kube_config kc = {.namespace = "ns", .pipeline = "p"};
    cr_expect_null(sb_kube_pod_json(&kc, &pool, "x"), "no controller address");
    kc.controller_address = "1.2.3.4:5";
    cr_expect_null(sb_kube_pod_json(&kc, &pool, NULL));
    cJSON *pod = sb_kube_pod_json(&kc, &pool, "x");
    cr_assert_not_null(pod);
    const cJSON *c = cJSON_GetArrayItem(get(get(pod, "spec"), "containers"), 0);
    cr_expect_str_eq(str(c, "image"), "streambatch/worker:latest");
    cr_expect_eq(get(cJSON_GetArrayItem(get(c, "ports"), 0), "containerPort")->valueint, 7070);
    /* /metrics on the pod IP, port 9102 named "metrics" (a PodMonitor selects it by name) */
    const cJSON *mp = cJSON_GetArrayItem(get(c, "ports"), 1);
    cr_expect_str_eq(str(mp, "name"), "metrics");
    cr_expect_eq(get(mp, "containerPort")->valueint, 9102);
    int user = 0;
    cr_expect_str_eq(str(env_entry(get(c, "env"), "SB_METRICS_ADDR", &user), "value"),
                     "$(SB_POD_IP):9102");
    cr_expect_null(get(get(pod, "metadata"), "ownerReferences"), "no uid, no owner");
    cJSON_Delete(pod);
}

/* GPU pools run the CUDA build: gpu_image (default streambatch/worker-gpu:latest); CPU pools the
 * worker image; spec.workerTemplate.image wins for every pool. */
Test(kube_pod, gpu_pools_use_the_worker_gpu_image)
{
    sb_kube_pool cpu = {.pool = "cpu", .slots = 1};
    sb_kube_pool gpu = {.pool = "gpu", .slots = 2, .accelerators = 1, .gpus = 1};
    sb_kube_config kc = {.namespace = "ns", .pipeline = "p", .controller_address = "1.2.3.4:5"};
    struct {
        const char *image, *gpu_image, *tmpl, *want_cpu, *want_gpu;
    } cases[] = {
        {NULL, NULL, NULL, "streambatch/worker:latest", "streambatch/worker-gpu:latest"},
        {"r/worker:1", "r/worker-gpu:1", NULL, "r/worker:1", "r/worker-gpu:1"},
        {"r/worker:1", "r/worker-gpu:1", "{\"image\":\"mine:2\"}", "mine:2", "mine:2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kc.image = cases[i].image;
        kc.gpu_image = cases[i].gpu_image;
        cJSON *t = cases[i].tmpl ? cJSON_Parse(cases[i].tmpl) : NULL;
        kc.worker_template = t;
        cJSON *pc = sb_kube_pod_json(&kc, &cpu, "p-cpu-x"),
              *pg = sb_kube_pod_json(&kc, &gpu, "p-gpu-x");
        cr_assert(pc != NULL && pg != NULL);
        const cJSON *cc = cJSON_GetArrayItem(get(get(pc, "spec"), "containers"), 0);
        const cJSON *cg = cJSON_GetArrayItem(get(get(pg, "spec"), "containers"), 0);
        cr_expect_str_eq(str(cc, "image"), cases[i].want_cpu, "case %zu", i);
        cr_expect_str_eq(str(cg, "image"), cases[i].want_gpu, "case %zu", i);
        cr_expect_str_eq(str(get(get(cg, "resources"), "limits"), "nvidia.com/gpu"), "1");
        cJSON_Delete(pc);
        cJSON_Delete(pg);
        cJSON_Delete(t);
    }
}

Test(kube_pod, tls_secret_is_mounted_read_only_and_named_in_sb_tls_dir)
{
    built b;
    g_tls_secret = "streambatch-tls";
    g_tls_name = "sb.internal";
    build(HEAD "  source: {uri: 'file:///in/', format: jsonl}\n"
               "  sink: {uri: 'file:///out/', format: jsonl}\n"
               "  workerTemplate:\n"
               "    volumes: [{name: models, emptyDir: {}}]\n"
               "    volumeMounts: [{name: models, mountPath: /models}]\n",
          &b);
    g_tls_secret = g_tls_name = NULL;
    const cJSON *spec = get(b.pod, "spec"), *c = container(&b);
    const cJSON *vol = named(get(spec, "volumes"), SB_WORKER_TLS_VOLUME);
    cr_assert_not_null(vol, "no TLS volume");
    const cJSON *sec = get(vol, "secret");
    cr_expect_str_eq(str(sec, "secretName"), "streambatch-tls");
    cr_expect_eq(get(sec, "defaultMode")->valueint, 0440, "readable by fsGroup, not by others");
    const cJSON *m = named(get(c, "volumeMounts"), SB_WORKER_TLS_VOLUME);
    cr_assert_not_null(m, "no TLS mount");
    cr_expect_str_eq(str(m, "mountPath"), "/etc/streambatch/tls");
    cr_expect(cJSON_IsTrue(get(m, "readOnly")));
    const cJSON *env = get(c, "env");
    cr_expect_str_eq(str(named(env, "SB_TLS_DIR"), "value"), "/etc/streambatch/tls");
    cr_expect_str_eq(str(named(env, "SB_TLS_SERVER_NAME"), "value"), "sb.internal");
    /* the template's volumes and the security rules stay */
    cr_expect_not_null(named(get(spec, "volumes"), "models"));
    cr_expect_not_null(named(get(c, "volumeMounts"), "models"));
    cr_expect_not_null(named(get(spec, "volumes"), SB_WORKER_SPILL_VOLUME));
    cr_expect(cJSON_IsTrue(get(get(c, "securityContext"), "readOnlyRootFilesystem")));
    cr_expect(cJSON_IsTrue(get(get(spec, "securityContext"), "runAsNonRoot")));
    built_free(&b);
}

Test(kube_pod, no_tls_secret_means_no_tls_volume_or_env)
{
    built b;
    build(HEAD "  source: {uri: 'file:///in/', format: jsonl}\n"
               "  sink: {uri: 'file:///out/', format: jsonl}\n",
          &b);
    const cJSON *c = container(&b);
    cr_expect_null(named(get(get(b.pod, "spec"), "volumes"), SB_WORKER_TLS_VOLUME));
    cr_expect_null(named(get(c, "volumeMounts"), SB_WORKER_TLS_VOLUME));
    cr_expect_null(named(get(c, "env"), "SB_TLS_DIR"));
    cr_expect_null(named(get(c, "env"), "SB_TLS_SERVER_NAME"));
    built_free(&b);
}

/* execution.cpuSlotsPerWorker is the CPU pool's slots, passed to the worker as SB_SLOTS (default
 * 1); the GPU pool keeps 2 slots and 1 accelerator whatever it says. */
Test(kube_pod, cpu_slots_per_worker_becomes_sb_slots)
{
    static const char *tail = "  source: {uri: 'file:///in/', format: jsonl}\n"
                              "  sink: {uri: 'file:///out/', format: jsonl}\n";
    char yaml[1024];
    const char *want[] = {"1", "4"};
    for (int i = 0; i < 2; i++) {
        built b;
        snprintf(yaml, sizeof yaml, HEAD "%s%s", tail,
                 i ? "  execution: {cpuSlotsPerWorker: 4}\n" : "");
        build(yaml, &b);
        const cJSON *e = named(get(container(&b), "env"), "SB_SLOTS");
        cr_assert_not_null(e, "no SB_SLOTS");
        cr_expect_str_eq(str(e, "value"), want[i]);
        built_free(&b);
    }
    snprintf(yaml, sizeof yaml,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n"
             "  stages: [{name: a, op: identity}, {name: g, op: identity, resources: {gpu: 1}}]\n"
             "%s  execution: {cpuSlotsPerWorker: 3}\n",
             tail);
    sb_doc *d = sb_doc_parse_yaml(yaml, strlen(yaml), NULL);
    sb_pipeline p;
    sb_diags dg = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg), 0);
    cr_assert_eq(dg.n, 0, "%s", dg.n ? dg.items[0].msg : "");
    sb_kube_pool pools[4];
    cr_assert_eq(sb_kube_pools_from_spec(&p, pools, 4), 2);
    cr_expect_str_eq(pools[0].pool, "cpu");
    cr_expect_eq(pools[0].slots, 3);
    cr_expect_eq(pools[0].accelerators, 0);
    cr_expect_str_eq(pools[1].pool, "gpu");
    cr_expect_eq(pools[1].slots, 2);
    cr_expect_eq(pools[1].accelerators, 1);
    sb_kube_config kc = {.namespace = "ns", .pipeline = "p", .controller_address = "1.2.3.4:5"};
    cJSON *pod = sb_kube_pod_json(&kc, &pools[0], "p-cpu-x");
    cr_assert_not_null(pod);
    const cJSON *c = cJSON_GetArrayItem(get(get(pod, "spec"), "containers"), 0);
    cr_expect_str_eq(str(named(get(c, "env"), "SB_SLOTS"), "value"), "3");
    cJSON_Delete(pod);
    sb_pipeline_free(&p);
    sb_diags_free(&dg);
    sb_doc_free(d);
}

/* A stage that allows cpu and gpu, planned by the operator: its other shape gets a pool too (no
 * pod at start), with the stage's GPUs and resources, so that a re-plan can move it there; the
 * pool it runs in keeps its min, and moving it takes its min along. */
Test(kube_pod, a_pool_for_every_shape_a_stage_may_move_to)
{
    const char *yaml =
        "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n"
        "  source: {uri: 'file:///in', format: jsonl}\n"
        "  stages:\n"
        "  - {name: a, op: identity, resources: {cpu: 250m}, workers: {min: 1, max: 3}}\n"
        "  - {name: b, op: bench.spin, args: {msPerRecord: 1}, placement: [cpu, gpu],\n"
        "     resources: {cpu: '2', memory: 1Gi, gpu: 2}, workers: {min: 2, max: 5}}\n"
        "  sink: {uri: 'file:///out', format: jsonl}\n";
    built b;
    build(yaml, &b);
    const sb_pipeline *p = &b.p;
    sb_kube_pool pools[4];
    cr_assert_eq(sb_kube_pools_from_spec(p, pools, 4), 1, "as placed: cpu only");
    cr_assert_eq(sb_kube_pools_placed(p, NULL, 1, pools, 4), 2);
    cr_expect_str_eq(pools[0].pool, "cpu");
    cr_expect_eq(pools[0].min, 2);
    cr_expect_eq(pools[0].max, 5);
    cr_expect_eq(pools[0].gpus, 0);
    cr_expect_str_eq(pools[0].cpu, "2");
    cr_expect_eq(pools[0].cpu_milli, 2000, "the same quantity as a number");
    cr_expect_eq(pools[0].memory_bytes, 1ll << 30);
    cr_expect_str_eq(pools[1].pool, "gpu");
    cr_expect_eq(pools[1].min, 0, "no gpu pod until b moves there");
    cr_expect_eq(pools[1].max, 5);
    cr_expect_eq(pools[1].gpus, 2, "b's GPUs");
    cr_expect_eq(pools[1].accelerators, 1);
    cr_expect_str_eq(pools[1].memory, "1Gi");
    const char *moved[] = {"cpu", "gpu"};
    cr_assert_eq(sb_kube_pools_placed(p, moved, 1, pools, 4), 2);
    cr_expect_str_eq(pools[0].pool, "cpu");
    cr_expect_eq(pools[0].min, 1, "a's min only");
    cr_expect_eq(pools[0].max, 5, "b may come back");
    cr_expect_str_eq(pools[1].pool, "gpu");
    cr_expect_eq(pools[1].min, 2, "b took its min along");
    cr_expect_eq(pools[1].gpus, 2);
    built_free(&b);
}
