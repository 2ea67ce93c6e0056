/* kube.c — the Kubernetes backend of a run (see kube.h): the worker pods of each pool, their
 * manifests (sb_kube_pod_json), creation, scaling, deletion and rebinding after a failover, and
 * the pod events that tell the controller a worker ended. Owns the pod and pool tables (under
 * its mutex); the API client is the caller's. */

#include "controller/operator/kube.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "controller/operator/operator_status.h"
#include "controller/operator/podstate.h"
#include "core/log.h"
#include "rpc/proto.h"
#include "rpc/rpc.h"

#define LABEL_PIPELINE "streambatch.dev/pipeline"
#define LABEL_POOL "streambatch.dev/pool"

typedef struct kpod {
    char name[64];
    char pool[16];
    char phase[16]; /* "" = created by us, not seen yet */
    char ip[64];
    sb_podstate ps;      /* Unschedulable message; a container failing to start (podstate.h) */
    unsigned warned;     /* podstate classes a WorkerPodFailing event was posted for */
    char end[512];       /* why it ended (Failed: reason, exit code) */
    int by_us;           /* we deleted it (scale down, cleanup, rebind failure) */
    int terminating;     /* deletionTimestamp seen */
    int ran;             /* was Running at some point */
    uint64_t running_ms; /* when first seen Running (sb_operator_mono_ms; 0: never) */
    int reported;        /* on_exit already called */
    int adopted;
    int gone; /* DELETED seen: remove from the table */
    uint64_t seq;
} kpod;

typedef struct kpool {
    sb_kube_pool p;
    char name[16], cpu[32], memory[32];
    uint32_t desired;
    sb_podstate_churn churn; /* pods ending at start, in a row (podstate.h) */
    int churn_warned;        /* the streak's WorkerPodFailing event was posted */
    uint64_t churn_next_ms;  /* while churning: no new pod before (a back-off) */
} kpool;

struct sb_kube {
    sb_kube_config cfg;
    char *ns, *pipeline, *uid, *controller, *image, *gpu_image, *pipeline_id, *secret;
    cJSON *tmpl;
    kpool pools[4];
    size_t npools;
    pthread_mutex_t mu;      /* the pod table and sizes; never held across a call out */
    pthread_mutex_t sync_mu; /* one sync at a time (so two cannot both fill max_pending) */
    kpod *pods;
    size_t npods, cap;
    uint64_t seq;
    int stopping;
    long grace_s; /* for deletes; -1 = the pod's own */
};

typedef struct report {
    char id[64];
    char why[600];
    int event; /* also a Warning WorkerPodFailed */
} report;

/* ---- small helpers ------------------------------------------------------------------------ */

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static const cJSON *jobj(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static void fmt_cpu(int64_t milli, char *buf, size_t n)
{
    if (milli % 1000 == 0)
        snprintf(buf, n, "%" PRId64, milli / 1000);
    else
        snprintf(buf, n, "%" PRId64 "m", milli);
}

static void fmt_bytes(int64_t b, char *buf, size_t n)
{
    const char *u[] = {"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"};
    for (int i = 0; i < 6; i++) {
        int64_t unit = (int64_t)1 << (10 * (6 - i));
        if (b >= unit && b % unit == 0) {
            snprintf(buf, n, "%" PRId64 "%s", b / unit, u[i]);
            return;
        }
    }
    snprintf(buf, n, "%" PRId64, b);
}

size_t sb_kube_pools_from_spec(const sb_pipeline *p, sb_kube_pool *out, size_t cap)
{
    return sb_kube_pools_placed(p, NULL, 0, out, cap);
}

/* The pool index of name in out[0..*n), added (bounds 0) when missing; cap reached: -1. */
static int pool_slot(const sb_pipeline *p, const char *pool, sb_kube_pool *out, size_t *n,
                     size_t cap)
{
    size_t j = 0;
    while (j < *n && strcmp(out[j].pool, pool) != 0)
        j++;
    if (j < *n)
        return (int)j;
    if (*n == cap || *n == 4)
        return -1;
    memset(&out[j], 0, sizeof out[j]);
    int gpu = strcmp(pool, "gpu") == 0;
    out[j].pool = gpu ? "gpu" : "cpu";
    int64_t cs = p->spec.execution.cpu_slots_per_worker; /* 0: a spec built in C */
    out[j].slots = gpu ? 2 : cs > 0 ? (uint32_t)cs : 1;
    out[j].accelerators = gpu ? 1 : 0;
    (*n)++;
    return (int)j;
}

size_t sb_kube_pools_placed(const sb_pipeline *p, const char *const *placed, int also_allowed,
                            sb_kube_pool *out, size_t cap)
{
    size_t n = 0;
    int64_t cpu[4] = {0}, mem[4] = {0};
    for (int pass = 0; pass < 2 && p != NULL; pass++) {
        /* pass 0: the pools the stages run in; pass 1: the other shapes they allow */
        for (size_t i = 0; i < p->spec.nstages; i++) {
            const sb_stage_spec *st = &p->spec.stages[i];
            const char *at = placed != NULL && placed[i] != NULL ? placed[i] : sb_stage_pool(st);
            unsigned shapes = sb_stage_shapes(st);
            for (int g = 0; g < 2; g++) {
                const char *pool = g ? "gpu" : "cpu";
                int here = strcmp(at, pool) == 0;
                if (pass == 0 ? !here
                              : here || !also_allowed ||
                                    !(shapes & (g ? SB_SHAPE_BIT_GPU : SB_SHAPE_BIT_CPU)))
                    continue;
                int j = pool_slot(p, pool, out, &n, cap);
                if (j < 0)
                    continue;
                sb_kube_pool *o = &out[j];
                if (here && st->workers.min > (int64_t)o->min)
                    o->min = (uint32_t)st->workers.min; /* a pool it may move to starts empty */
                if (st->workers.max > (int64_t)o->max)
                    o->max = (uint32_t)st->workers.max;
                /* a gpu worker takes the stage's GPUs whichever shape it was declared for */
                int64_t gpus = !g                      ? 0
                               : st->resources.gpu > 0 ? st->resources.gpu
                                                       : st->gpu_shape_gpus;
                if (gpus > (int64_t)o->gpus)
                    o->gpus = (uint32_t)gpus;
                if (st->resources.cpu_milli > cpu[j])
                    cpu[j] = st->resources.cpu_milli;
                if (st->resources.memory_bytes > mem[j])
                    mem[j] = st->resources.memory_bytes;
            }
        }
    }
    for (size_t j = 0; j < n; j++) {
        out[j].cpu = out[j].memory = NULL;
        out[j].cpu_milli = cpu[j];
        out[j].memory_bytes = mem[j];
        if (cpu[j] > 0) {
            fmt_cpu(cpu[j], out[j].cpu_buf, sizeof out[j].cpu_buf);
            out[j].cpu = out[j].cpu_buf;
        }
        if (mem[j] > 0) {
            fmt_bytes(mem[j], out[j].memory_buf, sizeof out[j].memory_buf);
            out[j].memory = out[j].memory_buf;
        }
    }
    return n;
}

static kpool *pool_find(sb_kube *k, const char *name)
{
    for (size_t i = 0; name != NULL && i < k->npools; i++)
        if (strcmp(k->pools[i].name, name) == 0)
            return &k->pools[i];
    return NULL;
}

static kpod *pod_find(sb_kube *k, const char *name)
{
    for (size_t i = 0; i < k->npods; i++)
        if (strcmp(k->pods[i].name, name) == 0)
            return &k->pods[i];
    return NULL;
}

static kpod *pod_add(sb_kube *k, const char *name, const char *pool)
{
    if (k->npods == k->cap) {
        size_t nc = k->cap ? k->cap * 2 : 16;
        kpod *np = realloc(k->pods, nc * sizeof *np);
        if (np == NULL)
            return NULL;
        k->pods = np;
        k->cap = nc;
    }
    kpod *p = &k->pods[k->npods++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->pool, sizeof p->pool, "%s", pool);
    p->seq = ++k->seq;
    return p;
}

static void pod_remove(sb_kube *k, kpod *p)
{
    size_t i = (size_t)(p - k->pods);
    k->pods[i] = k->pods[--k->npods];
}

/* A pod that still is, or will be, a worker of the pool. */
static int alive(const kpod *p)
{
    return !p->by_us && !p->terminating && !p->gone && strcmp(p->phase, "Failed") != 0 &&
           strcmp(p->phase, "Succeeded") != 0;
}

static int is_running(const kpod *p)
{
    return alive(p) && strcmp(p->phase, "Running") == 0;
}

static int is_pending(const kpod *p)
{
    return alive(p) && strcmp(p->phase, "Running") != 0;
}

static void emit(sb_kube *k, const char *type, const char *reason, const char *msg)
{
    sb_log(strcmp(type, "Warning") == 0 ? SB_LOG_WARN : SB_LOG_INFO, msg, "pipeline",
           k->pipeline_id, "reason", reason, NULL);
    if (k->cfg.on_event != NULL)
        k->cfg.on_event(k->cfg.ud, type, reason, msg);
}

static void fire(sb_kube *k, const report *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (r[i].event) {
            char msg[800];
            snprintf(msg, sizeof msg, "worker pod %s: %s", r[i].id, r[i].why);
            emit(k, "Warning", "WorkerPodFailed", msg);
        }
        if (k->cfg.on_exit != NULL)
            k->cfg.on_exit(k->cfg.ud, r[i].id, r[i].why);
    }
}

/* ---- pod events --------------------------------------------------------------------------- */

/* Whether the pod belongs to this pipeline (label, namespace, and owner uid when both known). */
static int ours(const sb_kube *k, const cJSON *pod)
{
    const cJSON *md = jobj(pod, "metadata");
    const char *ns = jstr(md, "namespace");
    const char *pl = jstr(jobj(md, "labels"), LABEL_PIPELINE);
    if (pl == NULL || strcmp(pl, k->pipeline) != 0 || (ns != NULL && strcmp(ns, k->ns) != 0))
        return 0;
    const cJSON *refs = jobj(md, "ownerReferences");
    if (k->uid == NULL || !cJSON_IsArray(refs) || cJSON_GetArraySize(refs) == 0)
        return 1;
    const cJSON *r;
    cJSON_ArrayForEach(r, refs)
    {
        const char *kind = jstr(r, "kind"), *uid = jstr(r, "uid");
        if (kind != NULL && strcmp(kind, "Pipeline") == 0 && uid != NULL)
            return strcmp(uid, k->uid) == 0;
    }
    return 1;
}

/* Reads phase, IP, what is wrong with it (podstate.h) and end reason of a pod into p. */
static void read_pod(kpod *p, const cJSON *pod)
{
    const cJSON *md = jobj(pod, "metadata"), *st = jobj(pod, "status");
    const char *phase = jstr(st, "phase");
    snprintf(p->phase, sizeof p->phase, "%s", phase ? phase : "Pending");
    const char *ip = jstr(st, "podIP");
    snprintf(p->ip, sizeof p->ip, "%s", ip ? ip : "");
    if (jobj(md, "deletionTimestamp") != NULL && !cJSON_IsNull(jobj(md, "deletionTimestamp")))
        p->terminating = 1;
    if (strcmp(p->phase, "Running") == 0) {
        p->ran = 1;
        if (p->running_ms == 0)
            p->running_ms = sb_operator_mono_ms();
    }
    sb_podstate_read(pod, &p->ps);
    const cJSON *c;
    cJSON_ArrayForEach(c, jobj(st, "containerStatuses"))
    {
        const cJSON *t = jobj(jobj(c, "state"), "terminated");
        if (t != NULL) {
            const cJSON *code = jobj(t, "exitCode");
            const char *r = jstr(t, "reason");
            snprintf(p->end, sizeof p->end, "container exited with code %d%s%s%s",
                     cJSON_IsNumber(code) ? code->valueint : -1, r ? " (" : "", r ? r : "",
                     r ? ")" : "");
        }
    }
    if (p->end[0] == '\0' && strcmp(p->phase, "Failed") == 0) {
        const char *r = jstr(st, "reason"), *m = jstr(st, "message");
        snprintf(p->end, sizeof p->end, "%s%s%s", r ? r : "failed", m ? ": " : "", m ? m : "");
    }
}

/* Decides whether the pod's change must be reported; fills r. Called under the lock. */
static int judge(sb_kube *k, kpod *p, report *r)
{
    if (p->reported || k->stopping)
        return 0;
    const char *why = NULL;
    int event = 1;
    char buf[600];
    if (p->by_us) {
        if (!p->ran || !(p->gone || p->terminating || strcmp(p->phase, "Failed") == 0 ||
                         strcmp(p->phase, "Succeeded") == 0))
            return 0;
        why = "pod deleted by the controller (scale down)";
        event = 0;
    } else if (strcmp(p->phase, "Failed") == 0) {
        snprintf(buf, sizeof buf, "pod failed: %s", p->end[0] ? p->end : "no reason given");
        why = buf;
        kpool *kp = pool_find(k, p->pool);
        uint64_t now = sb_operator_mono_ms();
        if (kp != NULL) /* a crash at start makes new pods, not a CrashLoopBackOff */
            sb_podstate_churn_exit(&kp->churn, p->name, buf,
                                   p->running_ms != 0 ? now - p->running_ms : 0, now);
    } else if (strcmp(p->phase, "Succeeded") == 0) {
        /* the worker was told to shut down: normal, nothing to recover */
        p->reported = 1;
        return 0;
    } else if (p->terminating || p->gone) {
        why = p->gone ? "pod deleted" : "pod is being deleted";
    } else {
        return 0;
    }
    p->reported = 1;
    snprintf(r->id, sizeof r->id, "%s", p->name);
    snprintf(r->why, sizeof r->why, "%s", why);
    r->event = event;
    return 1;
}

void sb_kube_on_pod(sb_kube *k, const cJSON *pod, int deleted)
{
    if (k == NULL || pod == NULL || !ours(k, pod))
        return;
    const cJSON *md = jobj(pod, "metadata");
    const char *name = jstr(md, "name");
    const char *pool = jstr(jobj(md, "labels"), LABEL_POOL);
    if (name == NULL)
        return;
    report r;
    int fire_it = 0, warn = 0;
    char wmsg[700];
    pthread_mutex_lock(&k->mu);
    kpod *p = pod_find(k, name);
    if (p == NULL && !deleted && pool != NULL && pool_find(k, pool) != NULL)
        p = pod_add(k, name, pool); /* created by an earlier leader, or seen before the POST
                                       answered */
    if (p != NULL) {
        read_pod(p, pod);
        if (deleted)
            p->gone = 1;
        fire_it = judge(k, p, &r);
        /* a pod that will not start by itself: one Warning per pod and class (podstate.h) */
        if (!k->stopping && alive(p) && sb_podstate_warn(&p->warned, &p->ps)) {
            warn = 1;
            sb_podstate_describe(p->name, &p->ps, wmsg, sizeof wmsg);
        }
        /* pods that keep ending at start: one Warning per streak */
        kpool *kp = pool_find(k, p->pool);
        if (!warn && !k->stopping && kp != NULL && !kp->churn_warned &&
            sb_podstate_churning(&kp->churn, wmsg, sizeof wmsg)) {
            kp->churn_warned = 1;
            warn = 1;
        }
        if (p->gone)
            pod_remove(k, p);
    }
    pthread_mutex_unlock(&k->mu);
    if (warn)
        emit(k, "Warning", "WorkerPodFailing", wmsg);
    if (fire_it)
        fire(k, &r, 1);
}

/* ---- pod spec ----------------------------------------------------------------------------- */

static void rand_suffix(char *out)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char b[5];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned v = (unsigned)ts.tv_nsec ^ (unsigned)getpid();
        for (int i = 0; i < 5; i++)
            b[i] = (unsigned char)(rand_r(&v) & 0xff);
    }
    for (int i = 0; i < 5; i++)
        out[i] = alnum[b[i] % 36];
    out[5] = '\0';
}

static void pod_name(const sb_kube *k, const char *pool, char *out, size_t n)
{
    char sfx[6];
    rand_suffix(sfx);
    size_t room = 63 - (strlen(pool) + 7); /* "-<pool>-xxxxx" */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%.*s", (int)room, k->pipeline);
    size_t pl = strlen(prefix);
    while (pl > 0 && (prefix[pl - 1] == '-' || prefix[pl - 1] == '.'))
        prefix[--pl] = '\0';
    snprintf(out, n, "%s-%s-%s", prefix, pool, sfx);
}

static void add_env(cJSON *env, const char *name, const char *value)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "value", value);
    cJSON_AddItemToArray(env, e);
}

static void add_env_field(cJSON *env, const char *name, const char *field)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON *fr = cJSON_AddObjectToObject(cJSON_AddObjectToObject(e, "valueFrom"), "fieldRef");
    cJSON_AddStringToObject(fr, "fieldPath", field);
    cJSON_AddItemToArray(env, e);
}

static void merge_strings(cJSON *dst, const cJSON *src)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, src)
    {
        if (!cJSON_IsString(e) || e->string == NULL)
            continue;
        cJSON_DeleteItemFromObjectCaseSensitive(dst, e->string);
        cJSON_AddStringToObject(dst, e->string, e->valuestring);
    }
}

static void copy_str(cJSON *dst, const char *key, const cJSON *tmpl)
{
    const char *v = jstr(tmpl, key);
    if (v != NULL)
        cJSON_AddStringToObject(dst, key, v);
}

static void add_env_secret_key(cJSON *env, const char *name, const char *secret, const char *key,
                               int optional)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON *r = cJSON_AddObjectToObject(cJSON_AddObjectToObject(e, "valueFrom"), "secretKeyRef");
    cJSON_AddStringToObject(r, "name", secret);
    cJSON_AddStringToObject(r, "key", key);
    cJSON_AddBoolToObject(r, "optional", optional);
    cJSON_AddItemToArray(env, e);
}

static void add_env_secret(cJSON *env, const char *name, const char *secret, int optional)
{
    add_env_secret_key(env, name, secret, name, optional);
}

/* Appends a copy of every object item of the template's list `key` to dst. */
static void append_items(cJSON *dst, const cJSON *tmpl, const char *key)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, jobj(tmpl, key))
    {
        if (cJSON_IsObject(e))
            cJSON_AddItemToArray(dst, cJSON_Duplicate(e, 1));
    }
}

static int nonempty_list(const cJSON *tmpl, const char *key)
{
    const cJSON *l = jobj(tmpl, key);
    return cJSON_IsArray(l) && cJSON_GetArraySize(l) > 0;
}

/* The Pipeline as the owner of an object (garbage collection deletes the object with it);
 * block: blockOwnerDeletion, which needs update on pipelines/finalizers. Nothing without a uid. */
static void add_owner(cJSON *md, const sb_kube_config *cfg, int block)
{
    if (cfg->pipeline_uid == NULL || cfg->pipeline_uid[0] == '\0')
        return;
    cJSON *ref = cJSON_CreateObject();
    cJSON_AddStringToObject(ref, "apiVersion", "streambatch.dev/v1alpha1");
    cJSON_AddStringToObject(ref, "kind", "Pipeline");
    cJSON_AddStringToObject(ref, "name", cfg->pipeline);
    cJSON_AddStringToObject(ref, "uid", cfg->pipeline_uid);
    cJSON_AddBoolToObject(ref, "controller", 1);
    if (block)
        cJSON_AddBoolToObject(ref, "blockOwnerDeletion", 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"), ref);
}

/* The pod's metadata: its name, the template's labels and annotations under ours (ours win, so
 * the operator always finds its pods), and the Pipeline as owner (garbage collection deletes the
 * pod with it). Returns the metadata object, NULL when out of memory. */
static cJSON *pod_metadata(cJSON *o, const sb_kube_config *cfg, const sb_kube_pool *pool,
                           const char *name, const cJSON *t)
{
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "namespace", cfg->namespace);
    cJSON *labels = cJSON_AddObjectToObject(md, "labels");
    merge_strings(labels, jobj(t, "labels"));
    cJSON *own = cJSON_CreateObject();
    cJSON_AddStringToObject(own, LABEL_PIPELINE, cfg->pipeline);
    cJSON_AddStringToObject(own, LABEL_POOL, pool->pool);
    cJSON_AddStringToObject(own, "app.kubernetes.io/name", "streambatch-worker");
    cJSON_AddStringToObject(own, "app.kubernetes.io/managed-by", "streambatch-controller");
    merge_strings(labels, own);
    cJSON_Delete(own);
    const cJSON *ann = jobj(t, "annotations");
    if (cJSON_IsObject(ann) && cJSON_GetArraySize(ann) > 0)
        merge_strings(cJSON_AddObjectToObject(md, "annotations"), ann);
    add_owner(md, cfg, 1);
    return md;
}

/* The pod-level spec fields before volumes and containers: never restarted by the kubelet, no
 * API token, the image's non-root user, and the template's placement (node selector,
 * tolerations). */
static void pod_spec_base(cJSON *spec, const cJSON *t)
{
    cJSON_AddStringToObject(spec, "restartPolicy", "Never");
    copy_str(spec, "serviceAccountName", t);
    /* workers never call the API: no token in the pod unless the template asks for one */
    const cJSON *am = jobj(t, "automountServiceAccountToken");
    cJSON_AddBoolToObject(spec, "automountServiceAccountToken", cJSON_IsTrue(am));
    copy_str(spec, "priorityClassName", t);
    /* the image's user (deploy/docker/Dockerfile.worker); fsGroup makes the emptyDir its own */
    cJSON *psc = cJSON_AddObjectToObject(spec, "securityContext");
    cJSON_AddBoolToObject(psc, "runAsNonRoot", 1);
    cJSON_AddNumberToObject(psc, "runAsUser", 65532);
    cJSON_AddNumberToObject(psc, "runAsGroup", 65532);
    cJSON_AddNumberToObject(psc, "fsGroup", 65532);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(psc, "seccompProfile"), "type",
                            "RuntimeDefault");
    const cJSON *ns = jobj(t, "nodeSelector");
    if (cJSON_IsObject(ns) && cJSON_GetArraySize(ns) > 0)
        merge_strings(cJSON_AddObjectToObject(spec, "nodeSelector"), ns);
    const cJSON *tol = jobj(t, "tolerations");
    if (cJSON_IsArray(tol) && cJSON_GetArraySize(tol) > 0)
        cJSON_AddItemToObject(spec, "tolerations", cJSON_Duplicate(tol, 1));
}

/* The pod's volumes: the spill emptyDir, the TLS secret when the run uses TLS, then the
 * template's. Returns the array, NULL when out of memory. */
static cJSON *pod_volumes(cJSON *spec, const sb_kube_config *cfg, const cJSON *t)
{
    cJSON *vols = cJSON_AddArrayToObject(spec, "volumes");
    cJSON *spill = cJSON_CreateObject();
    cJSON_AddStringToObject(spill, "name", SB_WORKER_SPILL_VOLUME);
    cJSON *ed = cJSON_AddObjectToObject(spill, "emptyDir");
    if (cfg->spill_limit > 0) {
        char q[32];
        snprintf(q, sizeof q, "%" PRIu64, cfg->spill_limit);
        cJSON_AddStringToObject(ed, "sizeLimit", q);
    }
    cJSON_AddItemToArray(vols, spill);
    if (cfg->tls_secret != NULL && cfg->tls_secret[0] != '\0') {
        cJSON *tv = cJSON_CreateObject();
        cJSON_AddStringToObject(tv, "name", SB_WORKER_TLS_VOLUME);
        cJSON *sec = cJSON_AddObjectToObject(tv, "secret");
        cJSON_AddStringToObject(sec, "secretName", cfg->tls_secret);
        cJSON_AddNumberToObject(sec, "defaultMode", 0440); /* group: fsGroup 65532 */
        cJSON_AddItemToArray(vols, tv);
    }
    append_items(vols, t, "volumes");
    return vols;
}

/* The worker container's name, image (the template's, else the GPU or CPU default), ports (data
 * and metrics) and a locked-down security context. Returns the container, NULL when out of
 * memory. */
static cJSON *pod_container(cJSON *spec, const sb_kube_config *cfg, const sb_kube_pool *pool,
                            const cJSON *t, unsigned port_no)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(spec, "containers"), c);
    cJSON_AddStringToObject(c, "name", "worker");
    const char *image = jstr(t, "image");
    if (image == NULL && pool->gpus > 0)
        image = cfg->gpu_image != NULL ? cfg->gpu_image : "streambatch/worker-gpu:latest";
    cJSON_AddStringToObject(c, "image",
                            image != NULL        ? image
                            : cfg->image != NULL ? cfg->image
                                                 : "streambatch/worker:latest");
    copy_str(c, "imagePullPolicy", t);
    cJSON *port = cJSON_CreateObject();
    cJSON_AddStringToObject(port, "name", "data");
    cJSON_AddNumberToObject(port, "containerPort", port_no);
    cJSON_AddStringToObject(port, "protocol", "TCP");
    cJSON *ports = cJSON_AddArrayToObject(c, "ports");
    cJSON_AddItemToArray(ports, port);
    /* Prometheus /metrics on a fixed port, so a PodMonitor can name it (docs/metrics.md) */
    cJSON *mport = cJSON_CreateObject();
    cJSON_AddStringToObject(mport, "name", "metrics");
    cJSON_AddNumberToObject(mport, "containerPort", SB_KUBE_METRICS_PORT);
    cJSON_AddStringToObject(mport, "protocol", "TCP");
    cJSON_AddItemToArray(ports, mport);
    cJSON *csc = cJSON_AddObjectToObject(c, "securityContext");
    cJSON_AddBoolToObject(csc, "readOnlyRootFilesystem", 1);
    cJSON_AddBoolToObject(csc, "allowPrivilegeEscalation", 0);
    cJSON_AddItemToArray(
        cJSON_AddArrayToObject(cJSON_AddObjectToObject(csc, "capabilities"), "drop"),
        cJSON_CreateString("ALL"));
    return c;
}

/* The worker's environment (its configuration: cmd/streambatch-worker.c reads these), then the
 * credentials secret's keys and the template's variables. Returns the array, NULL when out of
 * memory. */
static cJSON *pod_env(cJSON *c, const sb_kube_config *cfg, const sb_kube_pool *pool, const cJSON *t,
                      unsigned port_no)
{
    if (nonempty_list(t, "envFrom"))
        append_items(cJSON_AddArrayToObject(c, "envFrom"), t, "envFrom");
    cJSON *env = cJSON_AddArrayToObject(c, "env");
    char num[32];
    add_env(env, "SB_CONTROLLER", cfg->controller_address);
    add_env_field(env, "SB_WORKER_ID", "metadata.name");
    add_env_field(env, "SB_POD_IP", "status.podIP");
    snprintf(num, sizeof num, "%u", port_no);
    add_env(env, "SB_WORKER_PORT", num);
    snprintf(num, sizeof num, "$(SB_POD_IP):%d", SB_KUBE_METRICS_PORT);
    add_env(env, "SB_METRICS_ADDR", num); /* $(VAR): expanded by the kubelet */
    add_env(env, "SB_POOL", pool->pool);
    snprintf(num, sizeof num, "%u", pool->slots ? pool->slots : 1);
    add_env(env, "SB_SLOTS", num);
    snprintf(num, sizeof num, "%u", pool->accelerators);
    add_env(env, "SB_ACCELERATORS", num);
    if (cfg->store_budget > 0) {
        snprintf(num, sizeof num, "%" PRIu64, cfg->store_budget);
        add_env(env, "SB_STORE_BUDGET", num);
    }
    char pid[300];
    snprintf(pid, sizeof pid, "%s/%s", cfg->namespace, cfg->pipeline);
    add_env(env, "SB_PIPELINE", pid);
    snprintf(num, sizeof num, "%" PRIu64, cfg->epoch);
    add_env(env, "SB_EPOCH", num);
    add_env(env, "SB_SPILL_DIR", SB_WORKER_SPILL_MOUNT);
    add_env(env, "TMPDIR", SB_WORKER_SPILL_MOUNT);
    if (cfg->auth_secret != NULL && cfg->auth_secret[0] != '\0') {
        add_env_secret_key(env, SB_AUTH_ENV_TOKEN, cfg->auth_secret, "token", 0);
        add_env(env, SB_AUTH_ENV_CONTROLLER_SHA256, cfg->auth_controller_sha256);
    }
    if (cfg->tls_secret != NULL && cfg->tls_secret[0] != '\0') {
        add_env(env, "SB_TLS_DIR", SB_WORKER_TLS_MOUNT); /* = --tls-dir */
        if (cfg->tls_server_name != NULL && cfg->tls_server_name[0] != '\0')
            add_env(env, "SB_TLS_SERVER_NAME", cfg->tls_server_name);
    }
    if (cfg->credentials_secret != NULL && cfg->credentials_secret[0] != '\0')
        for (size_t i = 0; sb_credentials_keys[i] != NULL; i++)
            add_env_secret(env, sb_credentials_keys[i], cfg->credentials_secret,
                           i >= sb_credentials_required);
    const cJSON *e;
    cJSON_ArrayForEach(e, jobj(t, "env"))
    {
        if (jstr(e, "name") != NULL)
            cJSON_AddItemToArray(env, cJSON_Duplicate(e, 1));
    }
    return env;
}

/* The container's mounts (spill, TLS, the template's) and its resources: requests equal to
 * limits, from the pool's cpu, memory and GPUs. 0, or -1 when out of memory. */
static int pod_mounts_resources(cJSON *c, const sb_kube_config *cfg, const sb_kube_pool *pool,
                                const cJSON *t)
{
    const char *cpu = pool->cpu_buf[0] ? pool->cpu_buf : pool->cpu;
    const char *mem = pool->memory_buf[0] ? pool->memory_buf : pool->memory;
    cJSON *mounts = cJSON_AddArrayToObject(c, "volumeMounts");
    cJSON *sm = cJSON_CreateObject();
    cJSON_AddStringToObject(sm, "name", SB_WORKER_SPILL_VOLUME);
    cJSON_AddStringToObject(sm, "mountPath", SB_WORKER_SPILL_MOUNT);
    cJSON_AddItemToArray(mounts, sm);
    if (cfg->tls_secret != NULL && cfg->tls_secret[0] != '\0') {
        cJSON *tm = cJSON_CreateObject();
        cJSON_AddStringToObject(tm, "name", SB_WORKER_TLS_VOLUME);
        cJSON_AddStringToObject(tm, "mountPath", SB_WORKER_TLS_MOUNT);
        cJSON_AddBoolToObject(tm, "readOnly", 1);
        cJSON_AddItemToArray(mounts, tm);
    }
    append_items(mounts, t, "volumeMounts");
    cJSON *res = cJSON_AddObjectToObject(c, "resources");
    cJSON *req = cJSON_AddObjectToObject(res, "requests");
    cJSON *lim = cJSON_AddObjectToObject(res, "limits");
    if (cpu != NULL && cpu[0] != '\0') {
        cJSON_AddStringToObject(req, "cpu", cpu);
        cJSON_AddStringToObject(lim, "cpu", cpu);
    }
    if (mem != NULL && mem[0] != '\0') {
        cJSON_AddStringToObject(req, "memory", mem);
        cJSON_AddStringToObject(lim, "memory", mem);
    }
    if (pool->gpus > 0) {
        char num[32];
        snprintf(num, sizeof num, "%u", pool->gpus);
        cJSON_AddStringToObject(req, "nvidia.com/gpu", num);
        cJSON_AddStringToObject(lim, "nvidia.com/gpu", num);
    }
    return mounts == NULL || req == NULL || lim == NULL ? -1 : 0;
}

cJSON *sb_kube_pod_json(const sb_kube_config *cfg, const sb_kube_pool *pool, const char *name)
{
    if (cfg == NULL || pool == NULL || name == NULL || cfg->namespace == NULL ||
        cfg->pipeline == NULL || cfg->controller_address == NULL || pool->pool == NULL)
        return NULL;
    const cJSON *t = cfg->worker_template;
    unsigned port_no = cfg->worker_port ? cfg->worker_port : 7070;
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON_AddStringToObject(o, "kind", "Pod");
    cJSON *md = pod_metadata(o, cfg, pool, name, t);
    cJSON *spec = cJSON_AddObjectToObject(o, "spec");
    pod_spec_base(spec, t);
    cJSON *vols = pod_volumes(spec, cfg, t);
    cJSON *c = pod_container(spec, cfg, pool, t, port_no);
    cJSON *env = pod_env(c, cfg, pool, t, port_no);
    int rest = pod_mounts_resources(c, cfg, pool, t);
    /* cJSON_Add* return NULL when out of memory: a pod without its parts must not be sent */
    if (md == NULL || spec == NULL || c == NULL || env == NULL || vols == NULL || rest != 0) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *pod_spec(const sb_kube *k, const kpool *kp, const char *name)
{
    sb_kube_config c = k->cfg;
    c.namespace = k->ns;
    c.pipeline = k->pipeline;
    c.pipeline_uid = k->uid;
    c.controller_address = k->controller;
    c.image = k->image;
    c.gpu_image = k->gpu_image;
    c.worker_template = k->tmpl;
    c.credentials_secret = k->secret;
    return sb_kube_pod_json(&c, &kp->p, name);
}

/* ---- API calls ---------------------------------------------------------------------------- */

static int delete_pod(sb_kube *k, const char *name, sb_err *err)
{
    char path[512];
    if (k->grace_s >= 0)
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=%ld", k->ns,
                 name, k->grace_s);
    else
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", k->ns, name);
    long st = 0;
    if (sb_k8s_delete(k->cfg.client, path, &st, err) == 0 || st == 404)
        return 0;
    return -1;
}

static cJSON *list_pods(sb_kube *k, sb_err *err)
{
    char path[300], sel[300];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", k->ns);
    snprintf(sel, sizeof sel, LABEL_PIPELINE "=%s", k->pipeline);
    long st = 0;
    return sb_k8s_list(k->cfg.client, path, sel, &st, err);
}

/* ---- sync --------------------------------------------------------------------------------- */

typedef struct victim {
    char name[64];
    int running;
} victim;

static int create_pods(sb_kube *k, kpool *kp, uint32_t n, sb_err *err)
{
    char names[16][64];
    uint32_t made = 0;
    int rc = 0;
    if (n > 16)
        n = 16;
    for (uint32_t i = 0; i < n; i++) {
        char name[64];
        pthread_mutex_lock(&k->mu);
        int stopping = k->stopping;
        kpod *p = NULL;
        if (!stopping) {
            do
                pod_name(k, kp->name, name, sizeof name);
            while (pod_find(k, name) != NULL);
            p = pod_add(k, name, kp->name); /* before the POST: its events find it */
        }
        pthread_mutex_unlock(&k->mu);
        if (stopping)
            break;
        if (p == NULL) {
            rc = sb_err_set(err, "out of memory");
            break;
        }
        cJSON *spec = pod_spec(k, kp, name);
        char path[300];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", k->ns);
        long st = 0;
        sb_err e = {0};
        cJSON *got = spec ? sb_k8s_create(k->cfg.client, path, spec, &st, &e) : NULL;
        cJSON_Delete(spec);
        pthread_mutex_lock(&k->mu);
        p = pod_find(k, name);
        if (got == NULL) {
            if (p != NULL)
                pod_remove(k, p);
        } else if (p != NULL && p->phase[0] == '\0') {
            read_pod(p, got);
        }
        pthread_mutex_unlock(&k->mu);
        if (got == NULL) {
            char msg[SB_ERR_MAX + 64];
            snprintf(msg, sizeof msg, "creating a worker pod in pool %s failed: %s", kp->name,
                     e.msg);
            emit(k, "Warning", "WorkerPodCreateFailed", msg);
            rc = sb_err_set(err, "%s", msg);
            break;
        }
        cJSON_Delete(got);
        snprintf(names[made++], sizeof names[0], "%s", name);
    }
    if (made > 0) {
        char msg[1200];
        int off = snprintf(msg, sizeof msg, "created %u worker pod%s in pool %s:", made,
                           made == 1 ? "" : "s", kp->name);
        for (uint32_t i = 0; i < made && off > 0 && (size_t)off < sizeof msg; i++)
            off += snprintf(msg + off, sizeof msg - (size_t)off, " %s", names[i]);
        emit(k, "Normal", "WorkerPodsCreated", msg);
    }
    return rc;
}

/* One pool's pods as a sync sees them (under k->mu): running and pending counts, the ended pods
 * it takes to delete (at most 32 a pass), and, when the pool has more than it wants, the
 * victims in the order they go: Pending first, then Running, newest first in each (*v, *nv;
 * NULL when out of memory: nothing is removed this pass). */
typedef struct pool_survey {
    uint32_t running, pending, desired;
    char ended[32][64];
    size_t nended;
    victim *v;
    size_t nv;
} pool_survey;

static void survey_victims(sb_kube *k, const kpool *kp, pool_survey *ps)
{
    ps->v = calloc(ps->running + ps->pending, sizeof *ps->v);
    for (int pass = 0; ps->v != NULL && pass < 2; pass++) {
        size_t start = ps->nv;
        for (size_t i = 0; i < k->npods; i++) {
            kpod *p = &k->pods[i];
            if (strcmp(p->pool, kp->name) != 0 || !(pass == 0 ? is_pending(p) : is_running(p)))
                continue;
            snprintf(ps->v[ps->nv].name, sizeof ps->v[ps->nv].name, "%s", p->name);
            ps->v[ps->nv].running = pass;
            ps->nv++;
        }
        /* newest first: sort this pass by seq, descending */
        for (size_t a = start; a < ps->nv; a++)
            for (size_t b = a + 1; b < ps->nv; b++) {
                kpod *pa = pod_find(k, ps->v[a].name), *pb = pod_find(k, ps->v[b].name);
                if (pa != NULL && pb != NULL && pb->seq > pa->seq) {
                    victim t = ps->v[a];
                    ps->v[a] = ps->v[b];
                    ps->v[b] = t;
                }
            }
    }
}

/* Fills ps for pool kp under k->mu; 0, or -1 when the backend is stopping. */
static int survey_pool(sb_kube *k, kpool *kp, pool_survey *ps)
{
    memset(ps, 0, sizeof *ps);
    pthread_mutex_lock(&k->mu);
    if (k->stopping) {
        pthread_mutex_unlock(&k->mu);
        return -1;
    }
    ps->desired = kp->desired;
    for (size_t i = 0; i < k->npods; i++) {
        kpod *p = &k->pods[i];
        if (strcmp(p->pool, kp->name) != 0)
            continue;
        ps->running += is_running(p);
        ps->pending += is_pending(p);
        /* ended pods (Failed/Succeeded) are removed so they do not linger */
        if (!p->by_us && !p->terminating && ps->nended < 32 &&
            (strcmp(p->phase, "Failed") == 0 || strcmp(p->phase, "Succeeded") == 0)) {
            p->by_us = 1;
            snprintf(ps->ended[ps->nended++], sizeof ps->ended[0], "%s", p->name);
        }
    }
    if (ps->running + ps->pending > ps->desired)
        survey_victims(k, kp, ps);
    pthread_mutex_unlock(&k->mu);
    return 0;
}

/* Deletes pods of a pool with more than it wants, in the survey's order, skipping Running
 * ones the controller still needs (cfg.can_remove). 0, or -1 (err set; the rest still go). */
static int pool_scale_down(sb_kube *k, const kpool *kp, const pool_survey *ps, sb_err *err)
{
    int rc = 0;
    uint32_t excess = ps->running + ps->pending - ps->desired, removed = 0;
    for (size_t i = 0; i < ps->nv && removed < excess; i++) {
        const victim *v = &ps->v[i];
        if (v->running && k->cfg.can_remove != NULL && !k->cfg.can_remove(k->cfg.ud, v->name))
            continue;
        pthread_mutex_lock(&k->mu);
        kpod *p = pod_find(k, v->name);
        int ok = p != NULL && alive(p) && !k->stopping;
        if (ok)
            p->by_us = 1;
        pthread_mutex_unlock(&k->mu);
        if (!ok)
            continue;
        sb_err e = {0};
        if (delete_pod(k, v->name, &e) != 0) {
            rc = sb_err_set(err, "%s", e.msg);
            pthread_mutex_lock(&k->mu);
            p = pod_find(k, v->name);
            if (p != NULL)
                p->by_us = 0;
            pthread_mutex_unlock(&k->mu);
            continue;
        }
        sb_log(SB_LOG_INFO, "worker pod deleted (scale down)", "pipeline", k->pipeline_id, "pod",
               v->name, "pool", kp->name, NULL);
        removed++;
    }
    return rc;
}

/* Creates pods for a pool with fewer than it wants, at most cfg.max_pending pending at once;
 * pods that keep ending as they start get one new pod per back-off, as the kubelet restarts
 * a crashing container, not a pod a second (podstate.h). 0, or -1. */
static int pool_scale_up(sb_kube *k, kpool *kp, const pool_survey *ps, sb_err *err)
{
    uint32_t have = ps->running + ps->pending;
    uint32_t room = ps->pending < k->cfg.max_pending ? k->cfg.max_pending - ps->pending : 0;
    uint32_t n = ps->desired - have < room ? ps->desired - have : room;
    pthread_mutex_lock(&k->mu);
    uint64_t now = sb_operator_mono_ms();
    if (n > 0 && sb_podstate_churning(&kp->churn, NULL, 0)) {
        if (now < kp->churn_next_ms) {
            n = 0;
        } else {
            n = 1;
            kp->churn_next_ms = now + sb_podstate_churn_backoff_ms(kp->churn.streak);
        }
    }
    pthread_mutex_unlock(&k->mu);
    return n > 0 ? create_pods(k, kp, n, err) : 0;
}

int sb_kube_sync(sb_kube *k, sb_err *err)
{
    if (k == NULL)
        return sb_err_set(err, "no backend");
    int rc = 0;
    pthread_mutex_lock(&k->sync_mu);
    for (size_t pi = 0; pi < k->npools; pi++) {
        kpool *kp = &k->pools[pi];
        pool_survey ps;
        if (survey_pool(k, kp, &ps) != 0)
            break;
        for (size_t i = 0; i < ps.nended; i++) {
            sb_err e = {0};
            if (delete_pod(k, ps.ended[i], &e) != 0)
                rc = sb_err_set(err, "%s", e.msg);
        }
        uint32_t have = ps.running + ps.pending;
        if (have > ps.desired && pool_scale_down(k, kp, &ps, err) != 0)
            rc = -1;
        else if (have < ps.desired && pool_scale_up(k, kp, &ps, err) != 0)
            rc = -1;
        free(ps.v);
    }
    pthread_mutex_unlock(&k->sync_mu);
    return rc;
}

/* ---- status, adoption, rebind ------------------------------------------------------------- */

void sb_kube_pool_status(sb_kube *k, const char *pool, uint32_t *desired, uint32_t *ready,
                         uint32_t *pending, char *why, size_t whylen)
{
    uint32_t d = 0, r = 0, p = 0;
    if (why != NULL && whylen > 0)
        why[0] = '\0';
    if (k == NULL)
        return;
    pthread_mutex_lock(&k->mu);
    kpool *kp = pool_find(k, pool);
    d = kp != NULL ? kp->desired : 0;
    for (size_t i = 0; i < k->npods; i++) {
        kpod *x = &k->pods[i];
        if (pool == NULL || strcmp(x->pool, pool) != 0)
            continue;
        r += is_running(x);
        if (is_pending(x)) {
            p++;
            if (why != NULL && whylen > 0 && why[0] == '\0' && x->ps.unschedulable[0] != '\0')
                snprintf(why, whylen, "%s", x->ps.unschedulable);
        }
    }
    pthread_mutex_unlock(&k->mu);
    if (desired != NULL)
        *desired = d;
    if (ready != NULL)
        *ready = r;
    if (pending != NULL)
        *pending = p;
}

void sb_kube_pool_failing(sb_kube *k, const char *pool, uint32_t *alive_n, uint32_t *failing,
                          char *reason, size_t rlen, char *first, size_t flen)
{
    uint32_t a = 0, f = 0;
    uint64_t oldest = UINT64_MAX;
    if (reason != NULL && rlen > 0)
        reason[0] = '\0';
    if (first != NULL && flen > 0)
        first[0] = '\0';
    if (k != NULL && pool != NULL) {
        pthread_mutex_lock(&k->mu);
        for (size_t i = 0; i < k->npods; i++) {
            kpod *x = &k->pods[i];
            if (strcmp(x->pool, pool) != 0 || !alive(x))
                continue;
            a++;
            if (x->ps.cls == 0)
                continue;
            f++;
            if (x->seq < oldest) { /* the oldest: the same pod named tick after tick */
                oldest = x->seq;
                if (reason != NULL && rlen > 0)
                    snprintf(reason, rlen, "%s", x->ps.reason);
                if (first != NULL && flen > 0)
                    sb_podstate_describe(x->name, &x->ps, first, flen);
            }
        }
        pthread_mutex_unlock(&k->mu);
    }
    if (alive_n != NULL)
        *alive_n = a;
    if (failing != NULL)
        *failing = f;
}

int sb_kube_pool_churn(sb_kube *k, const char *pool, uint64_t *since_ms, char *desc, size_t len)
{
    int churning = 0;
    if (desc != NULL && len > 0)
        desc[0] = '\0';
    if (k == NULL || pool == NULL)
        return 0;
    uint64_t now = sb_operator_mono_ms();
    pthread_mutex_lock(&k->mu);
    kpool *kp = pool_find(k, pool);
    for (size_t i = 0; kp != NULL && i < k->npods; i++) {
        kpod *x = &k->pods[i];
        if (strcmp(x->pool, pool) == 0 && alive(x) && x->running_ms != 0 &&
            now - x->running_ms >= SB_PODSTATE_EARLY_MS) {
            sb_podstate_churn_healthy(&kp->churn); /* a pod works: the streak is over */
            kp->churn_warned = 0;
        }
    }
    if (kp != NULL && sb_podstate_churning(&kp->churn, desc, len)) {
        churning = 1;
        if (since_ms != NULL)
            *since_ms = kp->churn.since_ms;
    }
    pthread_mutex_unlock(&k->mu);
    return churning;
}

/* Deletes adopted pod `name`, which never worked for this leader (so its exit is not a worker's
 * exit), with an Event (type, reason) saying why. */
static void drop_adopted(sb_kube *k, const char *name, const char *type, const char *reason,
                         const char *why)
{
    pthread_mutex_lock(&k->mu);
    kpod *p = pod_find(k, name);
    if (p != NULL) {
        p->by_us = 1;
        p->reported = 1; /* it never worked for this leader: not a worker exit */
    }
    pthread_mutex_unlock(&k->mu);
    char msg[SB_ERR_MAX + 256];
    snprintf(msg, sizeof msg, "worker pod %s deleted: %s", name, why);
    emit(k, type, reason, msg);
    sb_err de = {0};
    if (delete_pod(k, name, &de) != 0)
        sb_log(SB_LOG_WARN, "deleting a worker pod failed", "pod", name, "error", de.msg, NULL);
}

int sb_kube_rebind(sb_kube *k, sb_err *err)
{
    if (k == NULL)
        return sb_err_set(err, "no backend");
    size_t n = 0;
    victim *v = NULL;
    char(*ips)[64] = NULL;
    pthread_mutex_lock(&k->mu);
    v = calloc(k->npods + 1, sizeof *v);
    ips = calloc(k->npods + 1, sizeof *ips);
    for (size_t i = 0; v != NULL && ips != NULL && i < k->npods; i++) {
        kpod *p = &k->pods[i];
        if (!p->adopted || !is_running(p) || p->ip[0] == '\0')
            continue;
        snprintf(v[n].name, sizeof v[n].name, "%s", p->name);
        snprintf(ips[n], sizeof ips[n], "%s", p->ip);
        n++;
    }
    pthread_mutex_unlock(&k->mu);
    if (v == NULL || ips == NULL) {
        free(v);
        free(ips);
        return sb_err_set(err, "out of memory");
    }
    int rebound = 0;
    for (size_t i = 0; i < n; i++) {
        char target[128], why[SB_ERR_MAX + 64] = "";
        if (strchr(ips[i], ':') != NULL)
            snprintf(target, sizeof target, "[%s]:%u", ips[i], (unsigned)k->cfg.worker_port);
        else
            snprintf(target, sizeof target, "%s:%u", ips[i], (unsigned)k->cfg.worker_port);
        sb_err e = {0};
        sb_rpc_channel *ch = sb_rpc_channel_new(target, k->cfg.rpc, &e);
        int ok = 0;
        if (ch == NULL) {
            snprintf(why, sizeof why, "%s", e.msg);
        } else {
            Streambatch__V1__RebindRequest req = STREAMBATCH__V1__REBIND_REQUEST__INIT;
            req.controller_address = k->controller;
            req.epoch = k->cfg.epoch;
            req.pipeline = k->pipeline_id;
            ProtobufCMessage *resp = NULL;
            sb_rpc_code code =
                sb_rpc_call_msg(ch, SB_RPC_WORKER_REBIND, &req.base, 3000, 0, &resp, &e);
            if (code != SB_RPC_OK) {
                snprintf(why, sizeof why, "Rebind at %s failed: %s", target, e.msg);
            } else {
                Streambatch__V1__RebindReply *rep = (Streambatch__V1__RebindReply *)resp;
                if (rep->accepted)
                    ok = 1;
                else
                    snprintf(why, sizeof why, "Rebind refused: %s",
                             rep->message && rep->message[0] ? rep->message : "no reason given");
            }
            sb_rpc_msg_free(resp);
            sb_rpc_channel_free(ch);
        }
        if (ok) {
            rebound++;
            sb_log(SB_LOG_INFO, "worker pod rebound", "pipeline", k->pipeline_id, "pod", v[i].name,
                   "controller", k->controller, NULL);
            continue;
        }
        drop_adopted(k, v[i].name, "Warning", "WorkerRebindFailed", why);
    }
    free(v);
    free(ips);
    return rebound;
}

int sb_kube_replace_adopted(sb_kube *k, const char *why)
{
    size_t n = 0;
    victim *v = NULL;
    pthread_mutex_lock(&k->mu);
    v = calloc(k->npods + 1, sizeof *v);
    for (size_t i = 0; v != NULL && i < k->npods; i++)
        if (k->pods[i].adopted && !k->pods[i].by_us)
            snprintf(v[n++].name, sizeof v[0].name, "%s", k->pods[i].name);
    pthread_mutex_unlock(&k->mu);
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        drop_adopted(k, v[i].name, "Normal", "WorkerPodReplaced", why);
    free(v);
    return (int)n;
}

int sb_kube_delete_all(sb_kube *k, sb_err *err)
{
    if (k == NULL)
        return 0;
    pthread_mutex_lock(&k->mu);
    k->stopping = 1;
    for (size_t i = 0; i < k->npods; i++)
        k->pods[i].by_us = 1;
    pthread_mutex_unlock(&k->mu);
    cJSON *l = list_pods(k, err);
    if (l == NULL)
        return -1;
    int left = 0, rc = 0;
    const cJSON *pod;
    cJSON_ArrayForEach(pod, jobj(l, "items"))
    {
        if (!ours(k, pod))
            continue;
        const cJSON *md = jobj(pod, "metadata");
        const char *name = jstr(md, "name");
        if (name == NULL)
            continue;
        left++;
        const cJSON *dt = jobj(md, "deletionTimestamp");
        if (dt != NULL && !cJSON_IsNull(dt))
            continue; /* already terminating */
        if (delete_pod(k, name, err) != 0)
            rc = -1;
    }
    cJSON_Delete(l);
    return rc != 0 ? -1 : left;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

void sb_kube_free(sb_kube *k)
{
    if (k == NULL)
        return;
    pthread_mutex_destroy(&k->mu);
    pthread_mutex_destroy(&k->sync_mu);
    free(k->pods);
    cJSON_Delete(k->tmpl);
    free(k->ns);
    free(k->pipeline);
    free(k->uid);
    free(k->controller);
    free(k->image);
    free(k->gpu_image);
    free(k->pipeline_id);
    free(k->secret);
    free(k);
}

/* Creates the Secret that gives the pods the pipeline's worker token (see kube.h), owned by
 * the Pipeline. One that exists already was made by an earlier leader: its name carries the
 * operator key's id, so it holds the same token. 0, or -1 with err. */
static int auth_secret_create(const sb_kube_config *cfg, sb_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON_AddStringToObject(o, "kind", "Secret");
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", cfg->auth_secret);
    cJSON_AddStringToObject(md, "namespace", cfg->namespace);
    cJSON *labels = cJSON_AddObjectToObject(md, "labels");
    cJSON_AddStringToObject(labels, LABEL_PIPELINE, cfg->pipeline);
    cJSON_AddStringToObject(labels, "app.kubernetes.io/managed-by", "streambatch-controller");
    add_owner(md, cfg, 0);
    cJSON_AddStringToObject(o, "type", "Opaque");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "stringData"), "token",
                            cfg->auth_worker_token ? cfg->auth_worker_token : "");
    char path[300];
    snprintf(path, sizeof path, "/api/v1/namespaces/%s/secrets", cfg->namespace);
    long st = 0;
    sb_err e = {0};
    cJSON *got = sb_k8s_create(cfg->client, path, o, &st, &e);
    cJSON_Delete(o);
    if (got == NULL && st != 409)
        return sb_err_set(err, "creating the Secret %s/%s (the workers' credentials): %s",
                          cfg->namespace, cfg->auth_secret, e.msg);
    cJSON_Delete(got);
    return 0;
}

/* Copies cfg's pools into k (names, cpu and memory requests into k's own buffers; slots at
 * least 1). 0, or -1 naming the pool without a valid name. */
static int kube_pools_copy(sb_kube *k, const sb_kube_config *cfg, sb_err *err)
{
    for (size_t i = 0; i < cfg->npools; i++) {
        const sb_kube_pool *src = &cfg->pools[i];
        kpool *kp = &k->pools[i];
        kp->p = *src;
        if (src->pool == NULL || src->pool[0] == '\0' || strlen(src->pool) >= sizeof kp->name)
            return sb_err_set(err, "kube backend: pool %zu has no valid name", i);
        snprintf(kp->name, sizeof kp->name, "%s", src->pool);
        const char *cpu = src->cpu_buf[0] ? src->cpu_buf : src->cpu;
        const char *mem = src->memory_buf[0] ? src->memory_buf : src->memory;
        snprintf(kp->cpu, sizeof kp->cpu, "%s", cpu ? cpu : "");
        snprintf(kp->memory, sizeof kp->memory, "%s", mem ? mem : "");
        kp->p.pool = kp->name;
        kp->p.cpu = kp->cpu[0] ? kp->cpu : NULL;
        kp->p.memory = kp->memory[0] ? kp->memory : NULL;
        if (kp->p.slots == 0)
            kp->p.slots = 1;
    }
    return 0;
}

/* Adopts this Pipeline's worker pods that already run (a new leader's, or a restarted
 * controller's): each live one counts toward its pool's desired size. 0, or -1 when the list
 * failed (err set). */
static int kube_adopt_pods(sb_kube *k, sb_err *err)
{
    cJSON *l = list_pods(k, err);
    if (l == NULL)
        return -1;
    const cJSON *pod;
    size_t adopted = 0;
    cJSON_ArrayForEach(pod, jobj(l, "items"))
    {
        if (!ours(k, pod))
            continue;
        const cJSON *md = jobj(pod, "metadata");
        const char *name = jstr(md, "name");
        const char *pool = jstr(jobj(md, "labels"), LABEL_POOL);
        kpool *kp = pool_find(k, pool);
        if (name == NULL || kp == NULL || strlen(name) >= sizeof k->pods[0].name)
            continue;
        kpod *p = pod_add(k, name, pool);
        if (p == NULL)
            break;
        read_pod(p, pod);
        p->adopted = 1;
        if (alive(p)) {
            kp->desired++;
            adopted++;
        }
    }
    cJSON_Delete(l);
    if (adopted > 0) {
        char n[16];
        snprintf(n, sizeof n, "%zu", adopted);
        sb_log(SB_LOG_INFO, "adopted existing worker pods", "pipeline", k->pipeline_id, "pods", n,
               NULL);
    }
    return 0;
}

sb_kube *sb_kube_start(const sb_kube_config *cfg, sb_err *err)
{
    if (cfg == NULL || cfg->client == NULL || cfg->namespace == NULL || cfg->pipeline == NULL ||
        cfg->controller_address == NULL) {
        sb_err_set(err, "kube backend: client, namespace, pipeline and controller address are "
                        "required");
        return NULL;
    }
    if (cfg->npools == 0 || cfg->npools > 4) {
        sb_err_set(err, "kube backend: 1 to 4 pools, got %zu", cfg->npools);
        return NULL;
    }
    if (cfg->auth_secret != NULL && cfg->auth_secret[0] != '\0' &&
        auth_secret_create(cfg, err) != 0)
        return NULL;
    sb_kube *k = calloc(1, sizeof *k);
    if (k == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->sync_mu, NULL);
    k->cfg = *cfg;
    k->cfg.worker_template = NULL;
    if (k->cfg.max_pending == 0)
        k->cfg.max_pending = 2;
    if (k->cfg.worker_port == 0)
        k->cfg.worker_port = 7070;
    k->grace_s = -1;
    k->ns = strdup(cfg->namespace);
    k->pipeline = strdup(cfg->pipeline);
    k->uid = cfg->pipeline_uid && cfg->pipeline_uid[0] ? strdup(cfg->pipeline_uid) : NULL;
    k->controller = strdup(cfg->controller_address);
    k->image = strdup(cfg->image != NULL ? cfg->image : "streambatch/worker:latest");
    k->gpu_image =
        strdup(cfg->gpu_image != NULL ? cfg->gpu_image : "streambatch/worker-gpu:latest");
    size_t idl = strlen(cfg->namespace) + strlen(cfg->pipeline) + 2;
    k->pipeline_id = malloc(idl);
    k->tmpl = cfg->worker_template ? cJSON_Duplicate(cfg->worker_template, 1) : NULL;
    int want_secret = cfg->credentials_secret != NULL && cfg->credentials_secret[0] != '\0';
    k->secret = want_secret ? strdup(cfg->credentials_secret) : NULL;
    k->cfg.credentials_secret = NULL;
    if ((want_secret && k->secret == NULL) || k->ns == NULL || k->pipeline == NULL ||
        k->controller == NULL || k->image == NULL || k->gpu_image == NULL ||
        k->pipeline_id == NULL || (cfg->worker_template != NULL && k->tmpl == NULL) ||
        (cfg->pipeline_uid && cfg->pipeline_uid[0] && k->uid == NULL)) {
        sb_kube_free(k);
        sb_err_set(err, "out of memory");
        return NULL;
    }
    snprintf(k->pipeline_id, idl, "%s/%s", cfg->namespace, cfg->pipeline);
    if (kube_pools_copy(k, cfg, err) != 0) {
        sb_kube_free(k);
        return NULL;
    }
    k->npools = cfg->npools;
    if (kube_adopt_pods(k, err) != 0) {
        sb_kube_free(k);
        return NULL;
    }
    return k;
}

/* ---- backend interface -------------------------------------------------------------------- */

static int kube_set_pool_size(void *impl, const char *pool, uint32_t workers)
{
    sb_kube *k = impl;
    pthread_mutex_lock(&k->mu);
    kpool *kp = pool_find(k, pool);
    if (kp != NULL)
        kp->desired = workers;
    pthread_mutex_unlock(&k->mu);
    if (kp == NULL)
        return -1;
    sb_err err = {0};
    if (sb_kube_sync(k, &err) != 0) {
        sb_log(SB_LOG_WARN, "worker pods: sync failed", "pipeline", k->pipeline_id, "error",
               err.msg, NULL);
        return -1;
    }
    return 0;
}

static uint32_t kube_pool_size(void *impl, const char *pool)
{
    uint32_t ready = 0;
    sb_kube_pool_status(impl, pool, NULL, &ready, NULL, NULL, 0);
    return ready;
}

static uint64_t kube_rss(void *impl)
{
    (void)impl;
    return 0;
}

static void kube_stop(void *impl, int grace_ms)
{
    sb_kube *k = impl;
    k->grace_s = grace_ms <= 0 ? 0 : (grace_ms + 999) / 1000;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        sb_err err = {0};
        int left = sb_kube_delete_all(k, &err);
        if (left == 0)
            break;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms > (long)(grace_ms > 0 ? grace_ms : 0) + 10000) {
            sb_log(SB_LOG_WARN, "worker pods still present after stop", "pipeline", k->pipeline_id,
                   "error", left < 0 ? err.msg : "terminating", NULL);
            break;
        }
        usleep(200 * 1000);
    }
    sb_kube_free(k);
}

sb_backend sb_kube_backend(sb_kube *k)
{
    sb_backend b = {.impl = k,
                    .set_pool_size = kube_set_pool_size,
                    .pool_size = kube_pool_size,
                    .rss = kube_rss,
                    .stop = kube_stop};
    return b;
}
