#include "controller/operator/operator_run.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/sched/autoscale.h"
#include "controller/engine/ctl.h"
#include "controller/operator/kube.h"
#include "controller/sched/ranges.h"
#include "core/log.h"
#include "doc/doc.h"
#include "spec/validate.h"

#define MAX_POOLS 4

typedef struct run_pool {
    sb_kube_pool spec;
    uint64_t idle_since_ms;
    uint32_t desired;
} run_pool;

struct sb_opr_run {
    sb_k8s_client *client;
    char key[300];
    char *json;  /* manifest handed to workers */
    cJSON *spec; /* the spec the run started with */
    char spec_hash[17];
    sb_pipeline p;
    sb_ctl *ctl;
    sb_kube *kube;
    pthread_mutex_t kube_mu; /* guards the kube pointer: on_pod (informer thread) vs stop */
    run_pool pools[MAX_POOLS];
    size_t npools;
    uint32_t epoch;
    size_t committed_at_start;
    uint64_t started_ms;
    uint64_t stall_ms;
    int stall_warned;
    int finished;
    /* the final storage job (commit or abort of the sink) runs on a worker: the run stays
     * Running until it ended or final_deadline_ms passed */
    sb_storage_kind final_kind;
    uint64_t final_deadline_ms, final_limit_ms;
    char final_reason[64];
    char final_message[SB_ERR_MAX + 512];
    void (*on_event)(void *ud, const char *type, const char *reason, const char *message);
    void *ud;
};

int sb_opr_decode(const cJSON *object, sb_pipeline *p, char **json, char *msg, size_t len)
{
    memset(p, 0, sizeof *p);
    if (len > 0)
        msg[0] = '\0';
    if (json != NULL)
        *json = NULL;
    /* The manifest workers get: no status, no managedFields. */
    cJSON *m = cJSON_CreateObject();
    if (m == NULL)
        return -1;
    cJSON_AddStringToObject(m, "apiVersion", SB_API_VERSION);
    cJSON_AddStringToObject(m, "kind", SB_KIND);
    cJSON *md = cJSON_AddObjectToObject(m, "metadata");
    const char *keys[] = {"name", "namespace", "uid"};
    for (size_t i = 0; i < 3; i++) {
        const char *v = sb_opr_str_at(object, "metadata", keys[i]);
        if (v != NULL)
            cJSON_AddStringToObject(md, keys[i], v);
    }
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(object, "spec");
    cJSON_AddItemToObject(m, "spec", spec ? cJSON_Duplicate(spec, 1) : cJSON_CreateObject());
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (text == NULL)
        return -1;
    sb_doc *d = sb_doc_parse_json(text, strlen(text), NULL);
    sb_diags dg = {0};
    if (d == NULL || sb_pipeline_decode(sb_doc_root(d, 0), p, &dg) != 0) {
        sb_doc_free(d);
        sb_diags_free(&dg);
        free(text);
        return -1;
    }
    sb_doc_free(d);
    char overlap[1200]; /* the operator has no working directory: compared as written */
    if (sb_validate_sink_vs_source(p->spec.source.uri, p->spec.sink.uri, NULL, overlap,
                                   sizeof overlap))
        sb_diags_add(&dg, "spec.sink.uri", 0, 0, "%s", overlap);
    size_t used = 0;
    for (size_t i = 0; i < dg.n && used < len; i++) {
        int n = snprintf(msg + used, len - used, "%s%s: %s", i ? "; " : "", dg.items[i].path,
                         dg.items[i].msg);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    int problems = (int)dg.n;
    sb_diags_free(&dg);
    if (problems > 0) {
        sb_pipeline_free(p);
        memset(p, 0, sizeof *p);
        free(text);
        return problems;
    }
    if (json != NULL)
        *json = text;
    else
        free(text);
    return 0;
}

static void on_exit_cb(void *ud, const char *worker_id, const char *why)
{
    sb_opr_run *r = ud;
    if (r->ctl != NULL)
        sb_ctl_worker_exited(r->ctl, worker_id, why);
}

static void on_event_cb(void *ud, const char *type, const char *reason, const char *message)
{
    sb_opr_run *r = ud;
    if (r->on_event != NULL)
        r->on_event(r->ud, type, reason, message);
}

static int can_remove_cb(void *ud, const char *worker_id)
{
    sb_opr_run *r = ud;
    return r->ctl != NULL && sb_ctl_worker_removable(r->ctl, worker_id);
}

static void run_free(sb_opr_run *r)
{
    if (r->kube != NULL)
        sb_kube_free(r->kube);
    if (r->ctl != NULL)
        sb_ctl_free(r->ctl);
    sb_pipeline_free(&r->p);
    cJSON_Delete(r->spec);
    free(r->json);
    pthread_mutex_destroy(&r->kube_mu);
    free(r);
}

sb_opr_run *sb_opr_run_start(const sb_opr_run_config *cfg, int *plan_error, sb_err *err)
{
    *plan_error = 0;
    sb_opr_run *r = calloc(1, sizeof *r);
    if (r == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->kube_mu, NULL);
    r->client = cfg->client;
    r->on_event = cfg->on_event;
    r->ud = cfg->ud;
    const char *ns = sb_opr_str_at(cfg->object, "metadata", "namespace");
    const char *name = sb_opr_str_at(cfg->object, "metadata", "name");
    const char *uid = sb_opr_str_at(cfg->object, "metadata", "uid");
    snprintf(r->key, sizeof r->key, "%s/%s", ns ? ns : "", name ? name : "");
    char msg[2048];
    int bad = sb_opr_decode(cfg->object, &r->p, &r->json, msg, sizeof msg);
    if (bad != 0) {
        *plan_error = bad > 0;
        sb_err_set(err, "%s", bad > 0 ? msg : "out of memory");
        free(r->json);
        pthread_mutex_destroy(&r->kube_mu);
        free(r);
        return NULL;
    }
    r->spec = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cfg->object, "spec"), 1);
    /* the source is planned and the sink prepared by a worker pod (storage jobs): the
     * controller has no access to user storage */
    /* resume state */
    sb_sched_resume resume;
    memset(&resume, 0, sizeof resume);
    sb_ckpt_spec_hash(r->spec, r->spec_hash);
    if (cfg->resume != NULL) {
        resume.epoch = cfg->resume->epoch + 1;
        /* committed parts are only valid for the spec that made them: after a change while
         * suspended (another source, stages or sink) the run starts over at the new epoch */
        int same =
            cfg->resume->spec_hash[0] == '\0' || strcmp(cfg->resume->spec_hash, r->spec_hash) == 0;
        if (same) {
            resume.committed_splits = cfg->resume->committed_splits;
            resume.parts = cfg->resume->parts;
            resume.nparts = cfg->resume->nparts;
            r->committed_at_start = cfg->resume->ncommitted;
        } else if (cfg->resume->ncommitted > 0 && cfg->on_event != NULL) {
            char m[200];
            snprintf(m, sizeof m,
                     "the spec changed since %zu splits were committed: they are run again with "
                     "the new spec",
                     cfg->resume->ncommitted);
            cfg->on_event(cfg->ud, "Warning", "CheckpointDiscarded", m);
        }
    }
    r->epoch = resume.epoch;
    char listen[300];
    snprintf(listen, sizeof listen, "%s:0", cfg->grpc_host ? cfg->grpc_host : "127.0.0.1");
    sb_ctl_config cc = {.pipeline = &r->p,
                        .pipeline_id = r->key,
                        .pipeline_json = r->json,
                        .storage_on_workers = 1,
                        .listen_addr = listen,
                        .heartbeat_timeout_ms = cfg->heartbeat_timeout_ms,
                        .resume = cfg->resume != NULL ? &resume : NULL,
                        .resume_plan_hash = cfg->resume != NULL && resume.committed_splits != NULL
                                                ? cfg->resume->plan_hash
                                                : NULL};
    r->ctl = sb_ctl_start(&cc, cfg->rpc, err);
    if (r->ctl == NULL) {
        sb_err_wrap(err, "starting the Control service on %s", listen);
        run_free(r);
        return NULL;
    }
    char caddr[300];
    snprintf(caddr, sizeof caddr, "%s:%d", cfg->grpc_host ? cfg->grpc_host : "127.0.0.1",
             sb_ctl_port(r->ctl));
    sb_kube_config kc;
    memset(&kc, 0, sizeof kc);
    kc.client = cfg->client;
    kc.namespace = ns;
    kc.pipeline = name;
    kc.pipeline_uid = uid;
    kc.controller_address = caddr;
    kc.epoch = r->epoch;
    kc.image = cfg->image;
    kc.gpu_image = cfg->gpu_image;
    const cJSON *wt = cJSON_GetObjectItemCaseSensitive(r->spec, "workerTemplate");
    kc.worker_template = cJSON_IsObject(wt) ? wt : NULL;
    kc.credentials_secret = sb_pipeline_credentials_secret(&r->p);
    kc.npools = sb_kube_pools_from_spec(&r->p, kc.pools, MAX_POOLS);
    /* store budget per worker: the pipeline's budget spread over its largest worker count,
     * at least two partitions (as `streambatch run` does) */
    uint64_t maxw = 0;
    for (size_t i = 0; i < kc.npools; i++)
        maxw += kc.pools[i].max;
    uint64_t part = (uint64_t)r->p.spec.source.partition_size;
    uint64_t sb = (uint64_t)r->p.spec.execution.memory_budget / (maxw ? maxw : 1);
    kc.store_budget = sb < 2 * part ? 2 * part : sb;
    kc.max_pending = cfg->max_pending;
    kc.rpc = cfg->rpc;
    kc.tls_secret = cfg->tls_secret;
    kc.tls_server_name = cfg->tls_server_name;
    kc.on_exit = on_exit_cb;
    kc.on_event = on_event_cb;
    kc.can_remove = can_remove_cb;
    kc.ud = r;
    r->npools = kc.npools;
    for (size_t i = 0; i < kc.npools; i++)
        r->pools[i].spec = kc.pools[i];
    r->kube = sb_kube_start(&kc, err);
    if (r->kube == NULL) {
        sb_err_wrap(err, "worker pods");
        run_free(r);
        return NULL;
    }
    /* pool names point into kc (stack): re-point them at static strings */
    for (size_t i = 0; i < r->npools; i++)
        r->pools[i].spec.pool = strcmp(kc.pools[i].pool, "gpu") == 0 ? "gpu" : "cpu";
    if (cfg->resume != NULL) {
        sb_err e2 = {0};
        int n = sb_kube_rebind(r->kube, &e2);
        if (n < 0)
            sb_log(SB_LOG_WARN, "rebinding worker pods failed", "pipeline", r->key, "error", e2.msg,
                   NULL);
        else {
            char nb[16];
            snprintf(nb, sizeof nb, "%d", n);
            sb_log(SB_LOG_INFO, "worker pods rebound", "pipeline", r->key, "pods", nb, NULL);
        }
    }
    r->stall_ms = (uint64_t)(r->p.spec.execution.stall_timeout_ns / 1000000);
    r->started_ms = sb_opr_mono_ms();
    sb_log(SB_LOG_INFO, "pipeline run started", "pipeline", r->key, "controller", caddr, NULL);
    return r;
}

sb_sched_errored *sb_opr_run_errored(sb_opr_run *r, size_t *n)
{
    return sb_ctl_errored(r->ctl, n, NULL);
}

uint64_t sb_opr_run_recovered(sb_opr_run *r)
{
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(r->ctl, &s);
    return s.stats.partitions_recovered;
}

size_t sb_opr_run_committed_at_start(const sb_opr_run *r)
{
    return r->committed_at_start;
}

uint32_t sb_opr_run_epoch(const sb_opr_run *r)
{
    return r->epoch;
}

size_t sb_opr_run_splits(const sb_opr_run *r)
{
    return sb_ctl_nsplits(r->ctl);
}

const cJSON *sb_opr_run_spec(const sb_opr_run *r)
{
    return r->spec;
}

void sb_opr_run_set_bounds(sb_opr_run *r, const sb_pipeline *p)
{
    sb_kube_pool pools[MAX_POOLS];
    size_t n = sb_kube_pools_from_spec(p, pools, MAX_POOLS);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r->npools; k++)
            if (strcmp(pools[i].pool, r->pools[k].spec.pool) == 0) {
                r->pools[k].spec.min = pools[i].min;
                r->pools[k].spec.max = pools[i].max;
            }
}

static void autoscale(sb_opr_run *r, uint64_t t)
{
    for (size_t i = 0; i < r->npools; i++) {
        run_pool *pl = &r->pools[i];
        uint64_t queued = 0, running = 0;
        int active = 0;
        sb_ctl_pool_demand(r->ctl, pl->spec.pool, &queued, &running, &active);
        uint32_t desired = 0, ready = 0, pending = 0;
        char why[256];
        sb_kube_pool_status(r->kube, pl->spec.pool, &desired, &ready, &pending, why, sizeof why);
        uint32_t slots = pl->spec.slots ? pl->spec.slots : 1;
        uint64_t capacity = (uint64_t)ready * slots;
        if (queued + running >= capacity)
            pl->idle_since_ms = 0;
        else if (pl->idle_since_ms == 0)
            pl->idle_since_ms = t;
        sb_autoscale_in in = {.min = pl->spec.min,
                              .max = pl->spec.max,
                              .ready = ready,
                              .pending = pending,
                              .slots = slots,
                              .queued = queued,
                              .running = running,
                              .active = active,
                              .now_ms = t,
                              .idle_since_ms = pl->idle_since_ms,
                              .scale_down_delay_ms = 10000};
        uint32_t want = sb_autoscale_desired(&in);
        pl->desired = want;
        sb_backend be = sb_kube_backend(r->kube);
        if (be.set_pool_size(be.impl, pl->spec.pool, want) != 0)
            sb_log(SB_LOG_WARN, "syncing worker pods failed", "pipeline", r->key, "pool",
                   pl->spec.pool, NULL);
    }
}

/* Starts the final storage job (SB_STORAGE_NONE: none); the failure to report once it ended is
 * kept in final_reason/final_message. */
static void final_start(sb_opr_run *r, sb_storage_kind kind, const sb_sched_output *parts, size_t n,
                        const char *reason, const char *message, uint64_t t)
{
    snprintf(r->final_reason, sizeof r->final_reason, "%s", reason ? reason : "");
    snprintf(r->final_message, sizeof r->final_message, "%s", message ? message : "");
    sb_err e2 = {0};
    if (kind == SB_STORAGE_NONE) {
        r->final_kind = SB_STORAGE_NONE;
        return;
    }
    if (sb_ctl_storage_start(r->ctl, kind, parts, n, &e2) != 0) {
        sb_log(SB_LOG_WARN, "starting a storage job failed", "pipeline", r->key, "error", e2.msg,
               NULL);
        r->final_kind = SB_STORAGE_NONE;
        r->final_deadline_ms = 0;
        return;
    }
    r->final_kind = kind;
    uint64_t limit = kind == SB_STORAGE_COMMIT ? (r->stall_ms ? r->stall_ms : 300000) : 30000;
    r->final_limit_ms = limit;
    r->final_deadline_ms = t + limit;
}

static sb_opr_outcome finish(sb_opr_run *r, sb_opr_outcome o, char *reason, size_t rlen,
                             char *message, size_t mlen)
{
    sb_ctl_shutdown_workers(r->ctl);
    if (o == SB_OPR_FAILED) {
        snprintf(reason, rlen, "%s", r->final_reason);
        snprintf(message, mlen, "%s", r->final_message);
    }
    r->final_kind = SB_STORAGE_NONE;
    r->finished = o;
    return o;
}

/* A failure: the sink is aborted on a worker first (unless the failure was planning or
 * preparing it: then the sink was never touched, or cannot be). */
static sb_opr_outcome fail(sb_opr_run *r, const char *why, const char *msg, int touch_sink,
                           uint64_t t, char *reason, size_t rlen, char *message, size_t mlen)
{
    final_start(r, touch_sink ? SB_STORAGE_ABORT : SB_STORAGE_NONE, NULL, 0, why, msg, t);
    if (r->final_kind == SB_STORAGE_NONE)
        return finish(r, SB_OPR_FAILED, reason, rlen, message, mlen);
    return SB_OPR_RUNNING;
}

sb_opr_outcome sb_opr_run_tick(sb_opr_run *r, char *reason, size_t rlen, char *message, size_t mlen)
{
    if (r->finished)
        return (sb_opr_outcome)r->finished;
    uint64_t t = sb_opr_mono_ms();
    if (r->final_kind != SB_STORAGE_NONE) {
        autoscale(r, t); /* the job's pool keeps a worker (its demand counts the job) */
        char m[SB_ERR_MAX + 512] = "";
        int jr = sb_ctl_storage_poll(r->ctl, m, sizeof m);
        if (jr == 0 && t < r->final_deadline_ms)
            return SB_OPR_RUNNING;
        if (jr == 0)
            snprintf(m, sizeof m, "%s: not done within %llu s", sb_storage_kind_what(r->final_kind),
                     (unsigned long long)(r->final_limit_ms / 1000));
        if (r->final_kind == SB_STORAGE_COMMIT) {
            if (jr == 1)
                return finish(r, SB_OPR_SUCCEEDED, reason, rlen, message, mlen);
            return fail(r, "CommitFailed", m, 1, t, reason, rlen, message, mlen);
        }
        if (jr != 1) /* the abort is best effort: the failed run never wrote _SUCCESS */
            sb_log(SB_LOG_WARN, "aborting the sink failed", "pipeline", r->key, "error", m, NULL);
        return finish(r, SB_OPR_FAILED, reason, rlen, message, mlen);
    }
    sb_sched_state st = sb_ctl_wait(r->ctl, 0);
    if (st == SB_SCHED_RUNNING) {
        autoscale(r, t); /* set_pool_size syncs the pods */
        char stall[1024];
        if (r->stall_ms > 0 && sb_ctl_stalled(r->ctl, r->stall_ms, stall, sizeof stall)) {
            if (!r->stall_warned && r->on_event != NULL)
                r->on_event(r->ud, "Warning", "Stalled", stall);
            r->stall_warned = 1;
            if (sb_ctl_stalled(r->ctl, 3 * r->stall_ms, stall, sizeof stall)) {
                char m[1100];
                snprintf(m, sizeof m, "stalled: %s", stall);
                sb_ctl_snapshot s;
                sb_ctl_snapshot_get(r->ctl, &s);
                /* stalled while planning: the job never ended, and nobody may take an abort */
                return fail(r, "Stalled", m, !s.planning, t, reason, rlen, message, mlen);
            }
        } else {
            r->stall_warned = 0;
        }
        return SB_OPR_RUNNING;
    }
    if (st == SB_SCHED_SUCCEEDED) {
        /* the commit runs on a worker pod; the workers are shut down when it ended */
        size_t n = 0;
        sb_sched_output *parts = sb_ctl_sink_parts(r->ctl, &n);
        if (parts == NULL)
            return fail(r, "CommitFailed", "committing the sink: out of memory", 1, t, reason, rlen,
                        message, mlen);
        final_start(r, SB_STORAGE_COMMIT, parts, n, "CommitFailed", "", t);
        sb_ctl_parts_free(parts, n);
        if (r->final_kind == SB_STORAGE_NONE)
            return fail(r, "CommitFailed", "committing the sink: could not start the job", 1, t,
                        reason, rlen, message, mlen);
        return SB_OPR_RUNNING;
    }
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(r->ctl, &s);
    return fail(r, s.storage_failed ? "PlanFailed" : "TaskFailed",
                s.failure[0] ? s.failure : "the pipeline failed", !s.storage_failed, t, reason,
                rlen, message, mlen);
}

void sb_opr_run_metrics(sb_opr_run *r, sb_cmetrics *cm, const char *ns, const char *name)
{
    static __thread sb_ctl_snapshot s; /* large: off the stack */
    sb_ctl_snapshot_get(r->ctl, &s);
    sb_cmetrics_pool pools[MAX_POOLS];
    for (size_t i = 0; i < r->npools; i++) {
        uint32_t d = 0, rd = 0, p = 0;
        sb_kube_pool_status(r->kube, r->pools[i].spec.pool, &d, &rd, &p, NULL, 0);
        pools[i] = (sb_cmetrics_pool){r->pools[i].spec.pool, d, rd, p};
    }
    sb_cmetrics_add(cm, ns, name, &s, pools, r->npools);
}

int sb_opr_run_status(sb_opr_run *r, cJSON *status, int64_t generation, const char *now)
{
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(r->ctl, &s);
    sb_opr_pool_view views[MAX_POOLS];
    char why[MAX_POOLS][512];
    int pending_unschedulable = 0;
    char pmsg[1200] = "";
    size_t used = 0;
    for (size_t i = 0; i < r->npools; i++) {
        views[i].pool = r->pools[i].spec.pool;
        why[i][0] = '\0';
        sb_kube_pool_status(r->kube, views[i].pool, &views[i].desired, &views[i].ready,
                            &views[i].pending, why[i], sizeof why[i]);
        if (views[i].pending > 0 && why[i][0] != '\0' && used < sizeof pmsg) {
            int n = snprintf(pmsg + used, sizeof pmsg - used, "%spool %s: %s", used ? "; " : "",
                             views[i].pool, why[i]);
            if (n > 0)
                used += (size_t)n < sizeof pmsg - used ? (size_t)n : sizeof pmsg - used;
            pending_unschedulable = 1;
        }
    }
    char *ranges = NULL;
    sb_sched_output *parts = NULL;
    size_t nparts = 0;
    sb_err e2 = {0};
    if (sb_ctl_checkpoint(r->ctl, &ranges, &parts, &nparts, &e2) != 0) {
        sb_log(SB_LOG_WARN, "checkpoint failed", "pipeline", r->key, "error", e2.msg, NULL);
        return -1;
    }
    size_t committed = 0, nsplits = sb_ctl_nsplits(r->ctl);
    uint8_t *set = calloc(nsplits + 1, 1);
    if (set != NULL && sb_ranges_parse(ranges, set, nsplits, NULL) == 0)
        for (size_t i = 0; i < nsplits; i++)
            committed += set[i] != 0;
    free(set);
    double elapsed = (double)(sb_opr_mono_ms() - r->started_ms) / 1000.0;
    int rc = sb_opr_status_progress(status, &s, nsplits, committed, views, r->npools, elapsed);
    if (rc == 0)
        rc = sb_opr_status_mode(status, r->p.spec.execution.mode);
    size_t nerr = 0;
    sb_sched_errored *errs = sb_ctl_errored(r->ctl, &nerr, NULL);
    if (rc == 0)
        rc = sb_opr_status_errored(status, errs, nerr);
    sb_ctl_errored_free(errs, nerr);
    char plan_hash[17];
    sb_ctl_plan_hash(r->ctl, plan_hash);
    cJSON *cp = sb_ckpt_json(r->epoch, r->spec_hash, plan_hash, ranges, parts, nparts);
    free(ranges);
    sb_sched_parts_free(parts, nparts);
    if (cp == NULL || rc != 0) {
        cJSON_Delete(cp);
        return -1;
    }
    if (cJSON_GetObjectItemCaseSensitive(status, "checkpoint") != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(status, "checkpoint", cp);
    else
        cJSON_AddItemToObject(status, "checkpoint", cp);
    if (sb_opr_condition_set(status, "WorkersPending", pending_unschedulable,
                             pending_unschedulable ? "Unschedulable" : "WorkersScheduled", pmsg,
                             generation, now) < 0)
        return -1;
    return 0;
}

void sb_opr_run_on_pod(sb_opr_run *r, const cJSON *pod, int deleted)
{
    pthread_mutex_lock(&r->kube_mu);
    if (r->kube != NULL)
        sb_kube_on_pod(r->kube, pod, deleted);
    pthread_mutex_unlock(&r->kube_mu);
}

void sb_opr_run_stop(sb_opr_run *r, int delete_pods)
{
    if (r == NULL)
        return;
    if (delete_pods) {
        sb_ctl_shutdown_workers(r->ctl);
        sb_err e2 = {0};
        if (sb_kube_delete_all(r->kube, &e2) < 0)
            sb_log(SB_LOG_WARN, "deleting worker pods failed", "pipeline", r->key, "error", e2.msg,
                   NULL);
    }
    pthread_mutex_lock(&r->kube_mu);
    sb_kube *k = r->kube;
    r->kube = NULL;
    pthread_mutex_unlock(&r->kube_mu);
    if (k != NULL)
        sb_kube_free(k);
    run_free(r);
}
