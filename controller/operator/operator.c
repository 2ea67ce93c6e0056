/* operator.c — the Pipeline operator's main loop (see operator.h): informers on Pipelines and
 * their pods, the work queue and reconciler threads, finalizers, starting, ticking, suspending
 * and stopping runs, the event thread, leader election and shutdown. Owns the table of runs
 * (entry, under op.mu) and each entry's status as last built. */

#include "controller/operator/operator.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller/operator/leader.h"
#include "controller/operator/operator_events.h"
#include "controller/operator/operator_http.h"
#include "controller/operator/operator_run.h"
#include "controller/operator/operator_status.h"
#include "core/log.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/informer.h"
#include "k8s/queue.h"

#define FINALIZER "streambatch.dev/finalizer"
#define POD_LABEL "streambatch.dev/pipeline"
#define TICK_MS 500
#define MAX_NS 32

/* One pipeline the leader runs (or ran: the entry outlives nothing but the run). */
typedef struct entry {
    char key[300];
    char ns[128], name[256], uid[64];
    sb_operator_pipeline *run;
    cJSON *status;       /* what we keep writing (authoritative while we run it) */
    cJSON *written;      /* the last status written */
    uint64_t last_write; /* ms */
    int64_t refused_gen; /* generation a SpecChangeRefused event was posted for */
    int64_t gen;         /* generation last reconciled */
    uint64_t lost, recovered;
    size_t errored_posted; /* PartitionErrored events posted for this run */
    int done;              /* the run finished: status holds the terminal status (see reconcile) */
    int done_written;      /* ... and it was written */
    struct op *op;
    struct entry *next;
} entry;

typedef struct op {
    const sb_operator_config *cfg;
    sb_k8s_config *k8s;
    sb_k8s_client *shared; /* runs' client (thread-safe, serialised) */
    size_t nns;
    sb_k8s_informer *pipes[MAX_NS], *pods[MAX_NS];
    sb_k8s_queue *q;
    sb_operator_metrics *metrics;
    sb_operator_http *http;
    sb_leader *leader;
    atomic_int leading, lost, synced;
    pthread_mutex_t mu; /* runs */
    entry *runs;
    /* Events raised by runs (pod failures, rebinds, stalls) arrive on informer and tick threads,
     * sometimes under mu: they are queued here and posted by their own thread, so no API call
     * is made while a lock is held. */
    pthread_mutex_t evmu;
    pthread_cond_t evcv;
    struct ev_item *evh, *evt;
    int evstop, evthread_started;
    pthread_t evthread;
} op;

typedef struct ev_item {
    struct ev_item *next;
    char ns[128], name[256], uid[64], type[16], reason[64];
    char *msg;
} ev_item;

static void now_str(char *buf, size_t len)
{
    sb_operator_time_format(time(NULL), buf, len);
}

static size_t ns_index(const op *o, const char *ns)
{
    if (o->cfg->nnamespaces == 0)
        return 0;
    for (size_t i = 0; i < o->cfg->nnamespaces; i++)
        if (strcmp(o->cfg->namespaces[i], ns) == 0)
            return i;
    return SIZE_MAX;
}

static void split_key(const char *key, char *ns, size_t nl, char *name, size_t nml)
{
    const char *sl = strchr(key, '/');
    if (sl == NULL) {
        snprintf(ns, nl, "default");
        snprintf(name, nml, "%s", key);
        return;
    }
    snprintf(ns, nl, "%.*s", (int)(sl - key), key);
    snprintf(name, nml, "%s", sl + 1);
}

static void enqueue(op *o, const char *key)
{
    if (sb_k8s_queue_add(o->q, key) == 0)
        sb_operator_metrics_queue_add(o->metrics);
}

/* ---- the run table ---- */

static entry *entry_find(op *o, const char *key)
{
    for (entry *e = o->runs; e != NULL; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void entry_remove(op *o, entry *e)
{
    pthread_mutex_lock(&o->mu);
    for (entry **p = &o->runs; *p != NULL; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    pthread_mutex_unlock(&o->mu);
}

/* Takes the run out of the entry under the table lock (so no pod event reaches it any more). */
static sb_operator_pipeline *detach_run(op *o, entry *e)
{
    pthread_mutex_lock(&o->mu);
    sb_operator_pipeline *r = e->run;
    e->run = NULL;
    pthread_mutex_unlock(&o->mu);
    return r;
}

static void entry_free(entry *e)
{
    if (e == NULL)
        return;
    cJSON_Delete(e->status);
    cJSON_Delete(e->written);
    free(e);
}

/* ---- informer callbacks ---- */

static void pipe_event(const cJSON *obj, op *o)
{
    char key[400];
    snprintf(key, sizeof key, "%s/%s", sb_operator_str_at(obj, "metadata", "namespace") ?: "",
             sb_operator_str_at(obj, "metadata", "name") ?: "");
    if (atomic_load(&o->leading))
        enqueue(o, key);
}

static void pipe_add(const cJSON *obj, void *arg)
{
    pipe_event(obj, arg);
}

static void pipe_update(const cJSON *old, const cJSON *obj, void *arg)
{
    (void)old;
    pipe_event(obj, arg);
}

static void pod_event(const cJSON *pod, int deleted, op *o)
{
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(pod, "metadata"), "labels");
    const char *pl = sb_operator_str_at(labels, POD_LABEL, NULL);
    const char *ns = sb_operator_str_at(pod, "metadata", "namespace");
    if (pl == NULL || ns == NULL)
        return;
    char key[400];
    snprintf(key, sizeof key, "%s/%s", ns, pl);
    pthread_mutex_lock(&o->mu);
    entry *e = entry_find(o, key);
    if (e != NULL && e->run != NULL)
        sb_operator_pipeline_on_pod(e->run, pod, deleted);
    pthread_mutex_unlock(&o->mu);
    if (deleted && atomic_load(&o->leading))
        enqueue(o, key); /* a deletion may be waiting for its pods */
}

static void pod_add(const cJSON *obj, void *arg)
{
    pod_event(obj, 0, arg);
}

static void pod_update(const cJSON *old, const cJSON *obj, void *arg)
{
    (void)old;
    pod_event(obj, 0, arg);
}

static void pod_delete(const cJSON *obj, void *arg)
{
    pod_event(obj, 1, arg);
}

/* ---- API helpers ---- */

static void pipeline_path(char *buf, size_t len, const char *ns, const char *name)
{
    snprintf(buf, len, "/apis/streambatch.dev/v1alpha1/namespaces/%s/pipelines/%s", ns, name);
}

static void post_event(op *o, sb_k8s_client *c, const char *ns, const char *name, const char *uid,
                       const char *type, const char *reason, const char *msg)
{
    sb_operator_event_ref ref = {ns, name, uid, NULL};
    sb_operator_event_post(c, &ref, type, reason, msg, o->cfg->identity, NULL);
}

static void run_event_cb(void *ud, const char *type, const char *reason, const char *message)
{
    entry *e = ud;
    op *o = e->op;
    ev_item *it = calloc(1, sizeof *it);
    if (it == NULL || (it->msg = strdup(message != NULL ? message : "")) == NULL) {
        free(it);
        return; /* events are best effort */
    }
    snprintf(it->ns, sizeof it->ns, "%s", e->ns);
    snprintf(it->name, sizeof it->name, "%s", e->name);
    snprintf(it->uid, sizeof it->uid, "%s", e->uid);
    snprintf(it->type, sizeof it->type, "%s", type);
    snprintf(it->reason, sizeof it->reason, "%s", reason);
    pthread_mutex_lock(&o->evmu);
    if (o->evt != NULL)
        o->evt->next = it;
    else
        o->evh = it;
    o->evt = it;
    pthread_cond_signal(&o->evcv);
    pthread_mutex_unlock(&o->evmu);
}

/* Posts queued events in order; after evstop it drains what is left and returns. */
static void *event_main(void *arg)
{
    op *o = arg;
    pthread_mutex_lock(&o->evmu);
    for (;;) {
        while (o->evh == NULL && !o->evstop)
            pthread_cond_wait(&o->evcv, &o->evmu);
        ev_item *it = o->evh;
        if (it == NULL)
            break; /* stopping and drained */
        o->evh = it->next;
        if (o->evh == NULL)
            o->evt = NULL;
        pthread_mutex_unlock(&o->evmu);
        post_event(o, o->shared, it->ns, it->name, it->uid, it->type, it->reason, it->msg);
        free(it->msg);
        free(it);
        pthread_mutex_lock(&o->evmu);
    }
    pthread_mutex_unlock(&o->evmu);
    return NULL;
}

static int reapply_status(cJSON *latest, void *arg, sb_err *err)
{
    cJSON *st = cJSON_Duplicate(arg, 1);
    if (st == NULL)
        return sb_err_set(err, "out of memory");
    if (cJSON_GetObjectItemCaseSensitive(latest, "status") != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(latest, "status", st);
    else
        cJSON_AddItemToObject(latest, "status", st);
    return 0;
}

/* PUT status, every string redacted (no secret a message quotes: core/redact.h); 409 re-read +
 * re-applied by the client. 0, or -1 (404 counts as done). */
static int write_status(sb_k8s_client *c, const cJSON *obj, const cJSON *status)
{
    char path[600];
    pipeline_path(path, sizeof path, sb_operator_str_at(obj, "metadata", "namespace"),
                  sb_operator_str_at(obj, "metadata", "name"));
    cJSON *shown = cJSON_Duplicate(status, 1);
    cJSON *copy = cJSON_Duplicate(obj, 1);
    /* no phase leaves a printer-column cell blank (sb_operator_status_cells) */
    if (shown == NULL || sb_operator_status_redact(shown) < 0 ||
        sb_operator_status_cells(shown) < 0 || copy == NULL ||
        reapply_status(copy, shown, NULL) != 0) {
        cJSON_Delete(shown);
        cJSON_Delete(copy);
        return -1;
    }
    long st = 0;
    sb_err err = {0};
    cJSON *r = sb_k8s_update_status(c, path, copy, reapply_status, shown, &st, &err);
    cJSON_Delete(copy);
    cJSON_Delete(shown);
    if (r == NULL && st != 404) {
        sb_log(SB_LOG_WARN, "status write failed", "pipeline", path, "error", err.msg, NULL);
        return -1;
    }
    cJSON_Delete(r);
    return 0;
}

static int has_finalizer(const cJSON *obj)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "finalizers");
    const cJSON *x;
    cJSON_ArrayForEach(x, f)
    {
        if (cJSON_IsString(x) && strcmp(x->valuestring, FINALIZER) == 0)
            return 1;
    }
    return 0;
}

/* Adds (add=1) or removes our finalizer with a merge patch guarded by resourceVersion. */
static int patch_finalizer(sb_k8s_client *c, const cJSON *obj, int add)
{
    cJSON *p = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(p, "metadata");
    cJSON *list = cJSON_AddArrayToObject(md, "finalizers");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "finalizers");
    const cJSON *x;
    cJSON_ArrayForEach(x, f)
    {
        if (cJSON_IsString(x) && strcmp(x->valuestring, FINALIZER) != 0)
            cJSON_AddItemToArray(list, cJSON_CreateString(x->valuestring));
    }
    if (add)
        cJSON_AddItemToArray(list, cJSON_CreateString(FINALIZER));
    const char *rv = sb_operator_str_at(obj, "metadata", "resourceVersion");
    if (rv != NULL)
        cJSON_AddStringToObject(md, "resourceVersion", rv);
    char *body = cJSON_PrintUnformatted(p);
    cJSON_Delete(p);
    if (body == NULL)
        return -1;
    char path[600];
    pipeline_path(path, sizeof path, sb_operator_str_at(obj, "metadata", "namespace"),
                  sb_operator_str_at(obj, "metadata", "name"));
    long st = 0;
    sb_err err = {0};
    cJSON *r = sb_k8s_patch(c, path, body, &st, &err);
    free(body);
    if (r == NULL) {
        if (st == 404)
            return 0;
        sb_log(SB_LOG_WARN, "finalizer patch failed", "pipeline", path, "error", err.msg, NULL);
        return -1;
    }
    cJSON_Delete(r);
    return 0;
}

/* A Pipeline seen for the first time is accepted: phase Pending until its run starts (a merge
 * patch of /status, so it never overwrites a status someone else wrote). Best effort. */
static void mark_pending(sb_k8s_client *c, const char *ns, const char *name, int64_t gen)
{
    char path[700], body[256];
    pipeline_path(path, sizeof path, ns, name);
    strncat(path, "/status", sizeof path - strlen(path) - 1);
    /* the printer-column cells as every phase fills them (sb_operator_status_cells) */
    snprintf(body, sizeof body,
             "{\"status\":{\"phase\":\"Pending\",\"observedGeneration\":%lld,\"progress\":\"%s\","
             "\"workers\":\"0/0\",\"throughput\":\"%s\"}}",
             (long long)gen, SB_OPERATOR_CELL_UNKNOWN, SB_OPERATOR_CELL_UNKNOWN);
    long st = 0;
    sb_err err = {0};
    cJSON *r = sb_k8s_patch(c, path, body, &st, &err);
    if (r == NULL && st != 404)
        sb_log(SB_LOG_WARN, "status patch failed", "pipeline", path, "error", err.msg, NULL);
    cJSON_Delete(r);
}

/* Deletes the pods of a pipeline the pod cache knows; returns how many are left. */
static int delete_pods(op *o, sb_k8s_client *c, const char *ns, const char *name)
{
    size_t i = ns_index(o, ns);
    if (i == SIZE_MAX)
        return 0;
    cJSON *list = sb_k8s_informer_list(o->pods[i]);
    int left = 0;
    const cJSON *pod;
    cJSON_ArrayForEach(pod, list)
    {
        const cJSON *labels = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(pod, "metadata"), "labels");
        const char *pl = sb_operator_str_at(labels, POD_LABEL, NULL);
        const char *pns = sb_operator_str_at(pod, "metadata", "namespace");
        if (pl == NULL || pns == NULL || strcmp(pl, name) != 0 || strcmp(pns, ns) != 0)
            continue;
        left++;
        if (sb_operator_str_at(pod, "metadata", "deletionTimestamp") != NULL)
            continue;
        char path[600];
        snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns,
                 sb_operator_str_at(pod, "metadata", "name"));
        long st = 0;
        sb_k8s_delete(c, path, &st, NULL);
    }
    cJSON_Delete(list);
    return left;
}

static const char *phase_of(const cJSON *status)
{
    const char *p = sb_operator_str_at(status, "phase", NULL);
    return p != NULL ? p : "";
}

static void set_str(cJSON *o, const char *k, const char *v)
{
    cJSON *n = cJSON_CreateString(v);
    if (cJSON_GetObjectItemCaseSensitive(o, k) != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, n);
    else
        cJSON_AddItemToObject(o, k, n);
}

static void set_num(cJSON *o, const char *k, double v)
{
    cJSON *n = cJSON_CreateNumber(v);
    if (cJSON_GetObjectItemCaseSensitive(o, k) != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(o, k, n);
    else
        cJSON_AddItemToObject(o, k, n);
}

/* Writes status when it differs from what the object has. */
static int sync_status(sb_k8s_client *c, const cJSON *obj, const cJSON *status)
{
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(obj, "status");
    /* compared as written: with the cells write_status fills */
    cJSON *shown = cJSON_Duplicate(status, 1);
    int same = cur != NULL && shown != NULL && sb_operator_status_redact(shown) >= 0 &&
               sb_operator_status_cells(shown) >= 0 && cJSON_Compare(cur, shown, 1);
    cJSON_Delete(shown);
    if (same)
        return 0;
    return write_status(c, obj, status);
}

/* ---- reconcile ---- */

typedef enum { RC_OK, RC_ERROR } rresult;

static void finish_conditions(cJSON *st, int ok, const char *reason, const char *msg, int64_t gen,
                              const char *now)
{
    set_str(st, "phase", ok ? "Succeeded" : "Failed");
    set_str(st, "message", msg);
    if (sb_operator_str_at(st, "completionTime", NULL) == NULL)
        set_str(st, "completionTime", now);
    sb_operator_condition_set(st, "Running", 0, ok ? "Succeeded" : "Failed", "", gen, now);
    if (ok)
        sb_operator_condition_set(st, "Complete", 1, "Succeeded", msg, gen, now);
    else
        sb_operator_condition_set(st, "Failed", 1, reason, msg, gen, now);
    if (sb_operator_condition_get(st, "SpecChangeRefused") != NULL)
        sb_operator_condition_set(st, "SpecChangeRefused", 0, "Finished", "", gen, now);
    if (sb_operator_condition_get(st, "WorkersPending") != NULL)
        sb_operator_condition_set(st, "WorkersPending", 0, "Finished", "", gen, now);
    if (sb_operator_condition_get(st, "WorkersFailing") != NULL)
        sb_operator_condition_set(st, "WorkersFailing", 0, "Finished", "", gen, now);
}

/* A finished pipeline: TTL, leftover pods. */
static rresult reconcile_finished(op *o, sb_k8s_client *c, const cJSON *obj, const char *ns,
                                  const char *name, long *requeue)
{
    if (delete_pods(o, c, ns, name) > 0)
        *requeue = 2000;
    const cJSON *ttl = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "spec"), "ttlSecondsAfterFinished");
    time_t done;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
    if (cJSON_IsNumber(ttl) &&
        sb_operator_time_parse(sb_operator_str_at(st, "completionTime", NULL), &done) == 0) {
        time_t due = done + (time_t)ttl->valuedouble;
        time_t now = time(NULL);
        if (now >= due) {
            char path[600];
            pipeline_path(path, sizeof path, ns, name);
            long hs = 0;
            sb_err err = {0};
            if (sb_k8s_delete(c, path, &hs, &err) != 0 && hs != 404) {
                sb_log(SB_LOG_WARN, "ttl delete failed", "pipeline", path, "error", err.msg, NULL);
                return RC_ERROR;
            }
            sb_log(SB_LOG_INFO, "deleted after ttlSecondsAfterFinished", "pipeline", path, NULL);
        } else {
            long ms = (long)(due - now) * 1000 + 100;
            if (*requeue == 0 || ms < *requeue)
                *requeue = ms;
        }
    }
    return RC_OK;
}

/* Spec changes to a running Pipeline: none can be applied (the running spec goes on), so a
 * change sets SpecChangeRefused naming the fields (one Event per generation), and a spec back
 * at the running one clears it. The number of changed fields. */
static int running_spec_diff(op *o, sb_k8s_client *c, entry *e, const cJSON *spec, int64_t gen,
                             const char *now)
{
    char fields[1024], msg[2048];
    cJSON *st = e->status;
    int nd = sb_operator_spec_diff(sb_operator_pipeline_spec(e->run), spec, fields, sizeof fields);
    if (nd > 0) {
        snprintf(msg, sizeof msg,
                 "changed fields cannot be applied to a running pipeline: %s (the running spec "
                 "goes on; suspend and resume, or delete and re-create, to apply them)",
                 fields);
        sb_operator_condition_set(st, "SpecChangeRefused", 1, "SpecChangeRefused", msg, gen, now);
        if (e->refused_gen != gen) {
            e->refused_gen = gen;
            post_event(o, c, e->ns, e->name, e->uid, "Warning", "SpecChangeRefused", msg);
        }
    } else if (sb_operator_condition_get(st, "SpecChangeRefused") != NULL) {
        sb_operator_condition_set(st, "SpecChangeRefused", 0, "SpecApplied", "", gen, now);
    }
    return nd;
}

/* spec.suspend on a running Pipeline: its workers stop, its progress (the checkpoint) stays in
 * the status it writes, phase Suspended; the entry goes. */
static rresult running_suspend(op *o, sb_k8s_client *c, entry *e, const cJSON *obj, int64_t gen,
                               const char *now)
{
    cJSON *st = e->status;
    sb_operator_pipeline_status(e->run, st, gen, now);
    sb_operator_pipeline_stop(detach_run(o, e), 1);
    set_str(st, "phase", "Suspended");
    sb_operator_condition_set(st, "Suspended", 1, "Suspended", "workers stopped; progress kept",
                              gen, now);
    sb_operator_condition_set(st, "Running", 0, "Suspended", "", gen, now);
    sb_operator_condition_set(st, "WorkersPending", 0, "Suspended", "", gen, now);
    if (sb_operator_condition_get(st, "WorkersFailing") != NULL)
        sb_operator_condition_set(st, "WorkersFailing", 0, "Suspended", "", gen, now);
    if (sb_operator_condition_get(st, "SpecChangeRefused") != NULL)
        sb_operator_condition_set(st, "SpecChangeRefused", 0, "Suspended", "", gen, now);
    int rc = write_status(c, obj, st);
    post_event(o, c, e->ns, e->name, e->uid, "Normal", "Suspended",
               "workers stopped; the checkpoint is kept in status");
    entry_remove(o, e);
    entry_free(e);
    return rc == 0 ? RC_OK : RC_ERROR;
}

/* The Events of every tick: Recovered when the controller's count of partitions re-made by
 * lineage rose, and one PartitionErrored per errored partition (bounded: the scheduler lists
 * the first SB_SCHED_ERRORED_KEEP). */
static void running_events(op *o, sb_k8s_client *c, entry *e)
{
    uint64_t recovered = sb_operator_pipeline_recovered(e->run);
    if (recovered > e->recovered) {
        char m[128];
        snprintf(m, sizeof m, "%llu partitions re-produced from lineage after worker loss",
                 (unsigned long long)recovered);
        post_event(o, c, e->ns, e->name, e->uid, "Normal", "Recovered", m);
        e->recovered = recovered;
    }
    size_t nerr = 0;
    sb_storage_errored *errs = sb_operator_pipeline_errored(e->run, &nerr);
    for (; e->errored_posted < nerr; e->errored_posted++) {
        const sb_storage_errored *x = &errs[e->errored_posted];
        char m[1024];
        sb_operator_event_errored_message(x->stage, x->input, x->error, m, sizeof m);
        post_event(o, c, e->ns, e->name, e->uid, "Warning", "PartitionErrored", m);
    }
    sb_ctl_errored_free(errs, nerr);
}

static rresult reconcile_running(op *o, sb_k8s_client *c, entry *e, const cJSON *obj, int64_t gen,
                                 long *requeue)
{
    char now[32], reason[64], msg[2048];
    now_str(now, sizeof now);
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
    cJSON *st = e->status;
    e->gen = gen;
    int nd = running_spec_diff(o, c, e, spec, gen, now);
    sb_pipeline p;
    int bad = sb_operator_decode(obj, &p, NULL, msg, sizeof msg);
    int suspend = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "suspend"));
    if (bad == 0) {
        if (nd == 0)
            sb_operator_pipeline_set_bounds(e->run, &p);
        sb_pipeline_free(&p);
    }
    if (nd == 0 || suspend)
        set_num(st, "observedGeneration", (double)gen);
    const char *old_phase = phase_of(cJSON_GetObjectItemCaseSensitive(obj, "status"));
    if (suspend)
        return running_suspend(o, c, e, obj, gen, now);
    sb_operator_outcome out =
        sb_operator_pipeline_tick(e->run, reason, sizeof reason, msg, sizeof msg);
    running_events(o, c, e);
    /* the status (with its checkpoint, computed under the controller's lock) is built only
     * when it is written: at the status interval, a phase change, or the end */
    uint64_t t = sb_operator_mono_ms();
    int phase_change = strcmp(old_phase, "Running") != 0 && e->written == NULL;
    if (out == SB_OPERATOR_RUNNING && !phase_change &&
        t - e->last_write < (uint64_t)o->cfg->status_interval_ms) {
        *requeue = TICK_MS;
        return RC_OK;
    }
    sb_operator_pipeline_status(e->run, st, gen, now);
    if (out == SB_OPERATOR_RUNNING) {
        if (e->written == NULL || !cJSON_Compare(e->written, st, 1)) {
            if (write_status(c, obj, st) == 0) {
                cJSON_Delete(e->written);
                e->written = cJSON_Duplicate(st, 1);
            }
        }
        e->last_write = t;
        *requeue = TICK_MS;
        return RC_OK;
    }
    int ok = out == SB_OPERATOR_SUCCEEDED;
    if (ok)
        snprintf(msg, sizeof msg, "all %zu splits committed", sb_operator_pipeline_splits(e->run));
    finish_conditions(st, ok, reason, msg, gen, now);
    sb_operator_pipeline_stop(detach_run(o, e), 1);
    int rc = write_status(c, obj, st);
    post_event(o, c, e->ns, e->name, e->uid, ok ? "Normal" : "Warning", ok ? "Succeeded" : "Failed",
               msg);
    /* The entry stays until the cache shows the terminal phase: a reconcile from a stale cache
     * (still "Running") must not start the finished pipeline again. */
    e->done = 1;
    e->done_written = rc == 0;
    *requeue = rc == 0 ? 500 : 1000;
    return rc == 0 ? RC_OK : RC_ERROR;
}

/* What reconcile_start's phases share: the Pipeline, who it is, and the status being built. */
typedef struct {
    op *o;
    sb_k8s_client *c;
    const cJSON *obj;
    const char *key, *ns, *name, *uid;
    const char *phase; /* the phase in the current status */
    int64_t gen;
    char now[32];
    cJSON *st; /* the status to write: a copy of the current one */
} start_ctx;

/* The spec does not decode: the Pipeline fails with InvalidSpec; the event is posted once per
 * generation. */
static rresult start_invalid(start_ctx *x, const char *msg)
{
    cJSON *st = x->st;
    int first =
        !sb_operator_condition_true(st, "InvalidSpec") ||
        cJSON_GetObjectItemCaseSensitive(st, "observedGeneration") == NULL ||
        cJSON_GetObjectItemCaseSensitive(st, "observedGeneration")->valuedouble != (double)x->gen;
    set_str(st, "phase", "Failed");
    set_str(st, "message", msg);
    set_num(st, "observedGeneration", (double)x->gen);
    sb_operator_condition_set(st, "InvalidSpec", 1, "InvalidSpec", msg, x->gen, x->now);
    sb_operator_condition_set(st, "Failed", 1, "InvalidSpec", msg, x->gen, x->now);
    sb_operator_condition_set(st, "Running", 0, "Failed", "", x->gen, x->now);
    if (sb_operator_str_at(st, "completionTime", NULL) == NULL)
        set_str(st, "completionTime", x->now);
    int rc = sync_status(x->c, x->obj, st);
    if (first && rc == 0)
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Warning", "InvalidSpec", msg);
    return rc == 0 ? RC_OK : RC_ERROR;
}

/* spec.suspend before the run started: no workers; the status says Suspended. */
static rresult start_suspended(start_ctx *x)
{
    cJSON *st = x->st;
    set_str(st, "phase", "Suspended");
    sb_operator_condition_set(st, "Suspended", 1, "Suspended", "workers stopped; progress kept",
                              x->gen, x->now);
    sb_operator_condition_set(st, "Running", 0, "Suspended", "", x->gen, x->now);
    int was = strcmp(x->phase, "Suspended") == 0;
    int rc = sync_status(x->c, x->obj, st);
    if (!was && rc == 0)
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Normal", "Suspended",
                   "suspended before it started");
    return rc == 0 ? RC_OK : RC_ERROR;
}

/* The checkpoint to resume from when the Pipeline was Running (a new leader takes over) or
 * Suspended: the status's, either the summary of the log beside the sink (*sum, read by a worker
 * once the run starts: opckpt.h) or, from an operator before the log, every part inline (*cp);
 * none committed when a leader died before its first; an unreadable one is reported and
 * everything re-runs at a new epoch. Returns 0 none, 1 *cp, 2 *sum. */
static int start_checkpoint(const start_ctx *x, const cJSON *cur, sb_ckpt *cp,
                            sb_ckptlog_summary *sum)
{
    const cJSON *cpj = cJSON_GetObjectItemCaseSensitive(cur, "checkpoint");
    int resuming = strcmp(x->phase, "Running") == 0 || strcmp(x->phase, "Suspended") == 0;
    if (resuming && cpj != NULL) {
        sb_err err = {0};
        if (sb_ckptlog_is_summary(cpj)) {
            if (sb_ckptlog_summary_parse(cpj, "status.checkpoint", sum, &err) == 0)
                return 2;
        } else if (sb_ckpt_parse(cpj, (size_t)1 << 24, "status.checkpoint", cp, &err) == 0) {
            /* the split count is only known after planning: parsed with a generous bound,
             * the scheduler checks the ranges against the plan again */
            return 1;
        }
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Warning", "InvalidCheckpoint", err.msg);
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(cpj, "epoch");
        memset(cp, 0, sizeof *cp);
        cp->epoch = cJSON_IsNumber(ep) && ep->valuedouble >= 0 && ep->valuedouble < 4e9
                        ? (uint32_t)ep->valuedouble
                        : 0;
        cp->committed_splits = strdup("");
        return 1; /* re-run everything at a new epoch (sink writes are idempotent) */
    }
    if (resuming) {
        cp->committed_splits = strdup(""); /* a leader died before its first checkpoint */
        return 1;
    }
    return 0;
}

/* A new table entry for the run, owning the status x->st. NULL when out of memory. */
static entry *start_entry(const start_ctx *x)
{
    entry *e = calloc(1, sizeof *e);
    if (e == NULL)
        return NULL;
    snprintf(e->key, sizeof e->key, "%s", x->key);
    snprintf(e->ns, sizeof e->ns, "%s", x->ns);
    snprintf(e->name, sizeof e->name, "%s", x->name);
    snprintf(e->uid, sizeof e->uid, "%s", x->uid ? x->uid : "");
    e->op = x->o;
    e->refused_gen = -1;
    e->gen = x->gen;
    e->status = x->st;
    return e;
}

/* The run did not start (e is out of the table): a plan error fails the Pipeline with
 * InvalidSpec; any other error is retried. */
static rresult start_failed(start_ctx *x, entry *e, int plan_error, const sb_err *err)
{
    cJSON *st = x->st;
    if (!plan_error) {
        sb_log(SB_LOG_WARN, "starting a run failed", "pipeline", x->key, "error", err->msg, NULL);
        entry_free(e);
        return RC_ERROR;
    }
    set_str(st, "phase", "Failed");
    set_str(st, "message", err->msg);
    sb_operator_condition_set(st, "InvalidSpec", 1, "InvalidSpec", err->msg, x->gen, x->now);
    sb_operator_condition_set(st, "Failed", 1, "InvalidSpec", err->msg, x->gen, x->now);
    sb_operator_condition_set(st, "Running", 0, "Failed", "", x->gen, x->now);
    if (sb_operator_str_at(st, "completionTime", NULL) == NULL)
        set_str(st, "completionTime", x->now);
    int wr = write_status(x->c, x->obj, st);
    post_event(x->o, x->c, x->ns, x->name, x->uid, "Warning", "InvalidSpec", err->msg);
    entry_free(e);
    return wr == 0 ? RC_OK : RC_ERROR;
}

/* The run started: the status says Running (with this leader), an event says how (Started,
 * Resumed or TookOver), and the first status write is remembered for the ticks. */
static void start_running(start_ctx *x, entry *e, sb_operator_pipeline *run, int have_cp)
{
    cJSON *st = x->st;
    pthread_mutex_lock(&x->o->mu);
    e->run = run;
    pthread_mutex_unlock(&x->o->mu);
    set_str(st, "phase", "Running");
    set_str(st, "leader", x->o->cfg->identity);
    cJSON_DeleteItemFromObjectCaseSensitive(st, "completionTime");
    if (sb_operator_str_at(st, "startTime", NULL) == NULL)
        set_str(st, "startTime", x->now);
    sb_operator_condition_set(st, "Running", 1, "Running", "", x->gen, x->now);
    if (sb_operator_condition_get(st, "Suspended") != NULL)
        sb_operator_condition_set(st, "Suspended", 0, "Resumed", "", x->gen, x->now);
    sb_operator_pipeline_status(run, st, x->gen, x->now);
    char m[256];
    uint32_t first = 0;
    if (have_cp && sb_operator_pipeline_stream(run, &first)) {
        /* a stream keeps no checkpoint: its status says how far the consumers came */
        if (first > 0)
            snprintf(m, sizeof m,
                     "a stream: epochs 0 to %u ended under the leader before; "
                     "serving from epoch %u",
                     first - 1, first);
        else
            snprintf(m, sizeof m, "a stream: no epoch had ended; serving from epoch 0");
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Normal",
                   strcmp(x->phase, "Running") == 0 ? "TookOver" : "Resumed", m);
    } else if (have_cp == 2) {
        /* the log's committed work is known once a worker read it (CheckpointLoaded) */
        snprintf(m, sizeof m, "epoch %u; a worker reads the checkpoint log beside the sink",
                 sb_operator_pipeline_epoch(run));
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Normal",
                   strcmp(x->phase, "Running") == 0 ? "TookOver" : "Resumed", m);
    } else if (have_cp && strcmp(x->phase, "Running") == 0) {
        /* The split count is known only once a worker has planned the source. */
        snprintf(m, sizeof m, "epoch %u, %zu splits already committed",
                 sb_operator_pipeline_epoch(run), sb_operator_pipeline_committed_at_start(run));
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Normal", "TookOver", m);
    } else if (have_cp) {
        snprintf(m, sizeof m, "epoch %u, %zu splits already committed",
                 sb_operator_pipeline_epoch(run), sb_operator_pipeline_committed_at_start(run));
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Normal", "Resumed", m);
    } else {
        snprintf(m, sizeof m, "worker pods requested; a worker plans the source");
        post_event(x->o, x->c, x->ns, x->name, x->uid, "Normal", "Started", m);
    }
}

static rresult reconcile_start(op *o, sb_k8s_client *c, const cJSON *obj, const char *key,
                               const char *ns, const char *name, int64_t gen, long *requeue)
{
    start_ctx x = {.o = o, .c = c, .obj = obj, .key = key, .ns = ns, .name = name, .gen = gen};
    char msg[4096];
    now_str(x.now, sizeof x.now);
    const cJSON *cur = cJSON_GetObjectItemCaseSensitive(obj, "status");
    x.st = cur != NULL ? cJSON_Duplicate(cur, 1) : cJSON_CreateObject();
    x.uid = sb_operator_str_at(obj, "metadata", "uid");
    x.phase = phase_of(cur);
    sb_pipeline p;
    int bad = sb_operator_decode(obj, &p, NULL, msg, sizeof msg);
    if (bad != 0) {
        rresult r = bad < 0 ? RC_ERROR : start_invalid(&x, msg);
        cJSON_Delete(x.st);
        return r;
    }
    int suspend = p.spec.suspend;
    sb_pipeline_free(&p);
    set_num(x.st, "observedGeneration", (double)gen);
    if (suspend) {
        rresult r = start_suspended(&x);
        cJSON_Delete(x.st);
        return r;
    }
    /* start or resume */
    sb_ckpt cp;
    memset(&cp, 0, sizeof cp);
    static __thread sb_ckptlog_summary sum; /* large (a path): off the stack */
    memset(&sum, 0, sizeof sum);
    int have_cp = start_checkpoint(&x, cur, &cp, &sum);
    entry *e = start_entry(&x);
    if (e == NULL) {
        sb_ckpt_free(&cp);
        cJSON_Delete(x.st);
        return RC_ERROR;
    }
    sb_operator_pipeline_config rc = {.client = o->shared,
                                      .object = obj,
                                      .grpc_host = o->cfg->grpc_host,
                                      .image = o->cfg->worker_image,
                                      .gpu_image = o->cfg->worker_gpu_image,
                                      .max_pending = o->cfg->max_pending,
                                      .heartbeat_timeout_ms = o->cfg->heartbeat_timeout_ms,
                                      .rpc = o->cfg->rpc,
                                      .auth_key = o->cfg->auth_key,
                                      .auth_key_len = o->cfg->auth_key_len,
                                      .tls_secret = o->cfg->tls_secret,
                                      .tls_server_name = o->cfg->tls_server_name,
                                      .resume = have_cp == 1 ? &cp : NULL,
                                      .resume_log = have_cp == 2 ? &sum : NULL,
                                      .plan = &o->cfg->plan,
                                      .on_event = run_event_cb,
                                      .ud = e};
    int plan_error = 0;
    sb_err err = {0};
    /* in the table before start: pod events of adopted pods find it */
    pthread_mutex_lock(&o->mu);
    e->next = o->runs;
    o->runs = e;
    pthread_mutex_unlock(&o->mu);
    sb_operator_pipeline *run = sb_operator_pipeline_start(&rc, &plan_error, &err);
    if (run == NULL) {
        entry_remove(o, e);
        sb_ckpt_free(&cp);
        return start_failed(&x, e, plan_error, &err);
    }
    start_running(&x, e, run, have_cp);
    sb_ckpt_free(&cp);
    if (write_status(c, obj, x.st) == 0) {
        e->written = cJSON_Duplicate(x.st, 1);
        e->last_write = sb_operator_mono_ms();
    }
    *requeue = TICK_MS;
    return RC_OK;
}

static rresult reconcile(op *o, sb_k8s_client *c, const char *key, long *requeue)
{
    *requeue = 0;
    char ns[128], name[256];
    split_key(key, ns, sizeof ns, name, sizeof name);
    size_t i = ns_index(o, ns);
    cJSON *obj = i == SIZE_MAX ? NULL : sb_k8s_informer_get(o->pipes[i], key);
    pthread_mutex_lock(&o->mu);
    entry *e = entry_find(o, key);
    pthread_mutex_unlock(&o->mu);
    if (obj == NULL) { /* gone (deleted without our finalizer) */
        if (e != NULL) {
            sb_operator_pipeline_stop(detach_run(o, e), 1);
            entry_remove(o, e);
            entry_free(e);
        }
        return RC_OK;
    }
    const cJSON *gj = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "generation");
    int64_t gen = cJSON_IsNumber(gj) ? (int64_t)gj->valuedouble : 0;
    rresult res = RC_OK;
    if (sb_operator_str_at(obj, "metadata", "deletionTimestamp") != NULL) {
        if (e != NULL) {
            sb_operator_pipeline_stop(detach_run(o, e), 1);
            entry_remove(o, e);
            entry_free(e);
        }
        if (has_finalizer(obj)) {
            int left = delete_pods(o, c, ns, name);
            if (left > 0) {
                *requeue = 500;
            } else if (patch_finalizer(c, obj, 0) != 0) {
                res = RC_ERROR;
            } else {
                post_event(o, c, ns, name, sb_operator_str_at(obj, "metadata", "uid"), "Normal",
                           "Deleted", "worker pods deleted, finalizer removed");
            }
        }
        cJSON_Delete(obj);
        return res;
    }
    if (e != NULL && e->done) {
        const cJSON *cst = cJSON_GetObjectItemCaseSensitive(obj, "status");
        if (sb_operator_finished_seen(e->uid, sb_operator_str_at(obj, "metadata", "uid"),
                                      phase_of(cst))) {
            entry_remove(o, e);
            entry_free(e);
            e = NULL; /* on to the finished Pipeline's handling (pods, TTL) below */
        } else {
            if (!e->done_written)
                e->done_written = write_status(c, obj, e->status) == 0;
            *requeue = 500;
            cJSON_Delete(obj);
            return e->done_written ? RC_OK : RC_ERROR;
        }
    }
    if (!has_finalizer(obj)) {
        res = patch_finalizer(c, obj, 1) == 0 ? RC_OK : RC_ERROR;
        if (res == RC_OK && cJSON_GetObjectItemCaseSensitive(obj, "status") == NULL)
            mark_pending(c, ns, name, gen);
        cJSON_Delete(obj); /* the update event brings the key back */
        return res;
    }
    if (e != NULL && e->run != NULL) {
        res = reconcile_running(o, c, e, obj, gen, requeue);
    } else {
        const char *phase = phase_of(cJSON_GetObjectItemCaseSensitive(obj, "status"));
        if (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)
            res = reconcile_finished(o, c, obj, ns, name, requeue);
        else
            res = reconcile_start(o, c, obj, key, ns, name, gen, requeue);
    }
    cJSON_Delete(obj);
    return res;
}

static void *worker_main(void *arg)
{
    op *o = arg;
    sb_err err = {0};
    sb_k8s_client *c = sb_k8s_client_new(o->k8s, &err);
    if (c == NULL) {
        sb_log(SB_LOG_ERROR, "reconciler client", "error", err.msg, NULL);
        return NULL;
    }
    char *key;
    while ((key = sb_k8s_queue_get(o->q, -1)) != NULL) {
        if (!atomic_load(&o->leading) || atomic_load(&o->lost)) {
            sb_k8s_queue_done(o->q, key);
            free(key);
            continue;
        }
        uint64_t t0 = sb_operator_mono_ms();
        long requeue = 0;
        rresult r = reconcile(o, c, key, &requeue);
        double secs = (double)(sb_operator_mono_ms() - t0) / 1000.0;
        if (r == RC_ERROR) {
            sb_operator_metrics_reconcile(o->metrics, "error", secs);
            sb_k8s_queue_add_rate_limited(o->q, key);
        } else {
            sb_operator_metrics_reconcile(o->metrics, requeue > 0 ? "requeue" : "success", secs);
            sb_k8s_queue_forget(o->q, key);
            if (requeue > 0)
                sb_k8s_queue_add_after(o->q, key, requeue);
        }
        sb_k8s_queue_done(o->q, key);
        free(key);
    }
    sb_k8s_client_free(c);
    return NULL;
}

/* ---- leader hooks, gauges ---- */

static void enqueue_all(op *o)
{
    for (size_t i = 0; i < o->nns; i++) {
        cJSON *list = sb_k8s_informer_list(o->pipes[i]);
        const cJSON *x;
        cJSON_ArrayForEach(x, list)
        {
            pipe_event(x, o);
        }
        cJSON_Delete(list);
    }
}

static void on_started(void *ud)
{
    op *o = ud;
    sb_log(SB_LOG_INFO, "became the leader", "identity", o->cfg->identity, NULL);
    atomic_store(&o->leading, 1);
    enqueue_all(o);
}

static void on_stopped(void *ud)
{
    op *o = ud;
    sb_log(SB_LOG_ERROR, "lost the leader lease: stopping", "identity", o->cfg->identity, NULL);
    atomic_store(&o->leading, 0);
    atomic_store(&o->lost, 1);
}

static void gauges(void *ud, sb_operator_gauges *g)
{
    op *o = ud;
    g->queue_depth = sb_k8s_queue_len(o->q);
    g->leader = atomic_load(&o->leading);
    g->ready = atomic_load(&o->synced);
    for (size_t i = 0; i < o->nns; i++) {
        cJSON *list = sb_k8s_informer_list(o->pipes[i]);
        const cJSON *x;
        cJSON_ArrayForEach(x, list)
        {
            const char *ph = phase_of(cJSON_GetObjectItemCaseSensitive(x, "status"));
            size_t k = SB_OPERATOR_NPHASES - 1;
            for (size_t j = 0; j < SB_OPERATOR_NPHASES - 1; j++)
                if (strcmp(ph, sb_operator_phase_names[j]) == 0)
                    k = j;
            g->pipelines[k]++;
        }
        cJSON_Delete(list);
    }
}

/* The figures of every pipeline this leader runs (operator_http calls it on the leader only).
 * Under the table lock, as pod events are: the run cannot be stopped meanwhile. */
static void pipeline_metrics(void *ud, sb_cmetrics *cm)
{
    op *o = ud;
    pthread_mutex_lock(&o->mu);
    for (entry *e = o->runs; e != NULL; e = e->next)
        if (e->run != NULL)
            sb_operator_pipeline_metrics(e->run, cm, e->ns, e->name);
    pthread_mutex_unlock(&o->mu);
}

/* ---- the run loop ---- */

static int start_informers(op *o, sb_err *err)
{
    static const sb_k8s_informer_handlers ph0 = {pipe_add, pipe_update, NULL, NULL};
    static const sb_k8s_informer_handlers pd0 = {pod_add, pod_update, pod_delete, NULL};
    o->nns = o->cfg->nnamespaces ? o->cfg->nnamespaces : 1;
    if (o->nns > MAX_NS)
        return sb_err_set(err, "at most %d namespaces can be watched", MAX_NS);
    for (size_t i = 0; i < o->nns; i++) {
        char pp[300], dp[300];
        if (o->cfg->nnamespaces == 0) {
            snprintf(pp, sizeof pp, "/apis/streambatch.dev/v1alpha1/pipelines");
            snprintf(dp, sizeof dp, "/api/v1/pods");
        } else {
            snprintf(pp, sizeof pp, "/apis/streambatch.dev/v1alpha1/namespaces/%s/pipelines",
                     o->cfg->namespaces[i]);
            snprintf(dp, sizeof dp, "/api/v1/namespaces/%s/pods", o->cfg->namespaces[i]);
        }
        sb_k8s_informer_handlers ph = ph0, pd = pd0;
        ph.arg = o;
        pd.arg = o;
        o->pipes[i] = sb_k8s_informer_new(o->k8s, pp, NULL, &ph, err);
        o->pods[i] = o->pipes[i] ? sb_k8s_informer_new(o->k8s, dp, POD_LABEL, &pd, err) : NULL;
        if (o->pods[i] == NULL || sb_k8s_informer_start(o->pipes[i], err) != 0 ||
            sb_k8s_informer_start(o->pods[i], err) != 0)
            return -1;
    }
    return 0;
}

/* The operator's connections and helpers, before any informer: the Kubernetes config and shared
 * client, the metrics, the work queue, the event thread, and the metrics/health endpoint when
 * asked for. -1 with err set; what was made is freed by operator_shutdown. */
static int operator_open(op *o, const sb_operator_config *cfg, sb_err *err)
{
    if (cfg->kubeconfig != NULL || cfg->context != NULL)
        o->k8s = sb_k8s_config_load_kubeconfig(cfg->kubeconfig, cfg->context, err);
    else
        o->k8s = sb_k8s_config_load_default(err);
    if (o->k8s == NULL)
        return -1;
    o->shared = sb_k8s_client_new(o->k8s, err);
    o->metrics = sb_operator_metrics_new();
    if (o->metrics != NULL)
        sb_operator_metrics_on_pipelines(o->metrics, pipeline_metrics, o);
    sb_k8s_queue_opts qo = {.base_delay_s = 0.05, .max_delay_s = 60};
    o->q = sb_k8s_queue_new(&qo, err);
    if (o->shared == NULL || o->metrics == NULL || o->q == NULL)
        return -1;
    if (pthread_create(&o->evthread, NULL, event_main, o) != 0)
        return sb_err_set(err, "cannot start the event thread");
    o->evthread_started = 1;
    if (cfg->metrics_host != NULL) {
        sb_operator_http_config hc = {.host = cfg->metrics_host,
                                      .port = cfg->metrics_port,
                                      .metrics = o->metrics,
                                      .gauges = gauges,
                                      .ud = o};
        o->http = sb_operator_http_start(&hc, err);
        if (o->http == NULL)
            return -1;
        char port[16];
        snprintf(port, sizeof port, "%d", sb_operator_http_port(o->http));
        sb_log(SB_LOG_INFO, "metrics and health endpoints", "host", cfg->metrics_host, "port", port,
               NULL);
    }
    return 0;
}

/* Waits until every namespace's informers have listed their objects (reconciling before would
 * act on an empty cache). Returns 1 when asked to stop first. */
static int operator_wait_synced(op *o)
{
    for (size_t i = 0; i < o->nns; i++)
        while (!sb_k8s_informer_wait_synced(o->pipes[i], 1000) ||
               !sb_k8s_informer_wait_synced(o->pods[i], 1000))
            if (*o->cfg->stop)
                return 1;
    atomic_store(&o->synced, 1);
    sb_log(SB_LOG_INFO, "informers synced", "identity", o->cfg->identity, NULL);
    return 0;
}

/* Runs pipelines only while leading: with leader election, on_started and on_stopped follow the
 * lease; without, this operator leads from now on. -1 with err set. */
static int operator_lead(op *o, sb_err *err)
{
    const sb_operator_config *cfg = o->cfg;
    if (!cfg->leader_elect) {
        on_started(o);
        return 0;
    }
    sb_leader_config lc = {.k8s = o->k8s,
                           .namespace = cfg->lease_namespace != NULL
                                            ? cfg->lease_namespace
                                            : sb_k8s_config_namespace(o->k8s),
                           .name = cfg->lease_name,
                           .identity = cfg->identity,
                           .lease_ms = cfg->lease_ms,
                           .renew_ms = cfg->renew_ms,
                           .retry_ms = cfg->retry_ms,
                           .on_started = on_started,
                           .on_stopped = on_stopped,
                           .ud = o};
    o->leader = sb_leader_start(&lc, err);
    return o->leader == NULL ? -1 : 0;
}

/* Stops everything sb_operator_run started, in an order that keeps each part's users alive:
 * queue and reconcile workers, pod informers, runs (a last status with the checkpoint when
 * stopping cleanly, rc 0; their pods stay for the next leader), events, then the rest. */
static void operator_shutdown(op *o, pthread_t *threads, int nthreads, int rc)
{
    if (o->q != NULL)
        sb_k8s_queue_shutdown(o->q);
    for (int i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);
    /* stop the informers before the runs, so no pod event reaches a freed run */
    for (size_t i = 0; i < o->nns; i++) {
        sb_k8s_informer_free(o->pods[i]);
        o->pods[i] = NULL;
    }
    /* leave the pods for the next leader; a last status carries the checkpoint */
    while (o->runs != NULL) {
        entry *e = o->runs;
        o->runs = e->next;
        if (rc == 0 && e->run != NULL) {
            char now[32];
            now_str(now, sizeof now);
            cJSON *obj = sb_k8s_informer_get(o->pipes[ns_index(o, e->ns)], e->key);
            if (obj != NULL && sb_operator_pipeline_status(e->run, e->status, e->gen, now) == 0)
                write_status(o->shared, obj, e->status);
            cJSON_Delete(obj);
        }
        sb_operator_pipeline_stop(e->run, 0);
        entry_free(e);
    }
    for (size_t i = 0; i < o->nns; i++)
        sb_k8s_informer_free(o->pipes[i]);
    if (o->evthread_started) { /* runs are stopped: post what they raised, then end */
        pthread_mutex_lock(&o->evmu);
        o->evstop = 1;
        pthread_cond_signal(&o->evcv);
        pthread_mutex_unlock(&o->evmu);
        pthread_join(o->evthread, NULL);
    }
    sb_leader_stop(o->leader, rc == 0);
    sb_operator_http_stop(o->http);
    sb_k8s_queue_free(o->q);
    sb_operator_metrics_free(o->metrics);
    sb_k8s_client_free(o->shared);
    sb_k8s_config_free(o->k8s);
    pthread_cond_destroy(&o->evcv);
    pthread_mutex_destroy(&o->evmu);
    pthread_mutex_destroy(&o->mu);
}

int sb_operator_run(const sb_operator_config *cfg, sb_err *err)
{
    op o;
    memset(&o, 0, sizeof o);
    o.cfg = cfg;
    pthread_mutex_init(&o.mu, NULL);
    pthread_mutex_init(&o.evmu, NULL);
    pthread_cond_init(&o.evcv, NULL);
    int rc = -1;
    pthread_t threads[64];
    int nthreads = 0;
    if (operator_open(&o, cfg, err) != 0 || start_informers(&o, err) != 0)
        goto out;
    if (operator_wait_synced(&o)) {
        rc = 0;
        goto out;
    }
    int nw = cfg->workers > 0 ? (cfg->workers < 64 ? cfg->workers : 64) : 4;
    for (int i = 0; i < nw; i++)
        if (pthread_create(&threads[nthreads], NULL, worker_main, &o) == 0)
            nthreads++;
    if (operator_lead(&o, err) != 0)
        goto out;
    while (!*cfg->stop && !atomic_load(&o.lost))
        usleep(100 * 1000);
    rc = atomic_load(&o.lost) ? 1 : 0;
    if (rc == 1)
        sb_err_set(err, "lost the leader lease");
out:
    operator_shutdown(&o, threads, nthreads, rc);
    return rc;
}
