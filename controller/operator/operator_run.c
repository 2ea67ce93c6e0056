/* operator_run.c — one running Pipeline inside the operator (see operator_run.h): starting its
 * Control service and worker pods (resuming from a checkpoint), the periodic tick (autoscaling,
 * pod sync, stall watchdog, re-planning), its status and its stop. Owns the run: its decoded
 * spec, its ctl and kube handles, its pools and its plan. */

#include "controller/operator/operator_run.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/sched/autoscale.h"
#include "controller/ctl/ctl.h"
#include "controller/operator/kube.h"
#include "controller/operator/objects/netpol.h"
#include "controller/operator/objects/streamsvc.h"
#include "controller/operator/opckpt.h"
#include "controller/operator/operator_events.h"
#include "controller/operator/podstate.h"
#include "core/clock.h"
#include "core/log.h"
#include "doc/doc.h"
#include "io/sink.h"
#include "plan/fromspec.h"
#include "spec/validate.h"

#define MAX_POOLS 4

typedef struct run_pool {
    sb_kube_pool spec;
    uint64_t idle_since_ms;
    uint32_t desired;
    uint32_t plan_max;         /* pods the plan sizes the pool to (0: the spec's bounds) */
    uint64_t failing_since_ms; /* every pod of the pool failing to start since (podstate.h) */
} run_pool;

#define PLAN_OPS 16 /* as sb_ctl_snapshot.ops */

/* Cost-aware placement of a run (operator_plan.h). */
typedef struct run_plan {
    sb_operator_plan_config cfg;
    sb_plan_prices prices;
    const char *gpu_type;
    sb_plan_stage_in declared[SB_PLAN_MAX_STAGES]; /* declared rates (0: none) */
    int all_declared;
    sb_plan_stage_in st[SB_PLAN_MAX_STAGES]; /* the input of the current plan */
    sb_plan_input in;
    sb_plan_result out; /* the plan applied */
    int have;           /* a plan was made */
    uint32_t replans;
    uint64_t planned_ms, checked_ms;
    char planned_at[32];
    const char *rates_from;
    double used[SB_PLAN_MAX_STAGES];         /* rates of the running shapes the plan used */
    sb_sched_pool_figures base[PLAN_OPS][2]; /* op figures per pool when the window opened */
    size_t nbase;
    int pools_sized;
    char note[512];
    /* the shape each stage runs on now (a re-plan may move a stage that is an op of its own:
     * sb_ctl_stage_move), and the rates measured on each shape so far (0: none) */
    sb_shape running[SB_PLAN_MAX_STAGES];
    double measured[SB_PLAN_MAX_STAGES][SB_SHAPE_COUNT];
    uint32_t moves;
    char moved[256]; /* the latest plan's moves, for the event and the status */
    /* profiling: a stage moved to a shape without a rate runs there until measured */
    int probing[SB_PLAN_MAX_STAGES];
    sb_shape probe_from[SB_PLAN_MAX_STAGES]; /* the shape it came from */
    uint64_t probe_ms;                       /* when the latest probe started */
    int unmeasurable[SB_PLAN_MAX_STAGES];    /* its probe expired: not probed again */
    /* the cluster's capacity as seen (plan_capacity): unlimited (< 0) until pods of the run
     * stay Pending for a resource; then what the run's running pods hold (never lowered) */
    sb_plan_capacity cap;
    char cause[400]; /* why the latest plan was made, when not a drift (the event says it) */
} run_plan;

struct sb_operator_pipeline {
    sb_k8s_client *client;
    char key[300];
    char *json;  /* manifest handed to workers */
    cJSON *spec; /* the spec the run started with */
    char spec_hash[17];
    sb_pipeline p;
    sb_ctl *ctl;
    sb_kube *kube;
    /* the pipeline's credentials (rpc/auth.h), derived from the operator's key and the uid */
    sb_rpc_creds creds;
    sb_rpc_opts rpc; /* cfg->rpc (TLS) + creds: the Control service and the Rebind calls */
    char worker_token[SB_RPC_TOKEN_HEX + 1], controller_sha256[SB_RPC_DIGEST_HEX + 1];
    char auth_secret[96];    /* "sb-auth-<uid>-<key id>": the Secret the pods take the token from */
    int stream;              /* a stream:// sink: served until its consumers end every epoch */
    uint32_t stream_first;   /* a stream's first epoch this leader serves (run_stream_ended) */
    char address[300];       /* the Control service's HOST:PORT (workers and consumers call it) */
    char service[300];       /* a stream's Service ("<name>.<ns>.svc:7070", streamsvc.h), or "" */
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
    run_plan *plan; /* NULL: not planned */
    /* the checkpoint log beside the sink (opckpt.h) */
    sb_opckpt ck;
    int ck_ok;                     /* ck is initialised (it may fail: then status has none) */
    int ck_refused_said;           /* the CheckpointTooLarge Event was posted */
    int loading;                   /* a worker reads the log before planning (ckpt_load) */
    sb_ckptlog_summary resume_sum; /* the summary it is checked against */
};

int sb_operator_decode(const cJSON *object, sb_pipeline *p, char **json, char *msg, size_t len)
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
        const char *v = sb_operator_str_at(object, "metadata", keys[i]);
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
    sb_operator_pipeline *r = ud;
    if (r->ctl != NULL)
        sb_ctl_worker_exited(r->ctl, worker_id, why);
}

static void on_event_cb(void *ud, const char *type, const char *reason, const char *message)
{
    sb_operator_pipeline *r = ud;
    if (r->on_event != NULL)
        r->on_event(r->ud, type, reason, message);
}

static int can_remove_cb(void *ud, const char *worker_id)
{
    sb_operator_pipeline *r = ud;
    return r->ctl != NULL && sb_ctl_worker_removable(r->ctl, worker_id);
}

static void run_free(sb_operator_pipeline *r)
{
    if (r->ck_ok)
        sb_opckpt_free(&r->ck);
    if (r->kube != NULL)
        sb_kube_free(r->kube);
    if (r->ctl != NULL)
        sb_ctl_free(r->ctl);
    sb_pipeline_free(&r->p);
    cJSON_Delete(r->spec);
    free(r->json);
    free(r->plan);
    pthread_mutex_destroy(&r->kube_mu);
    free(r);
}

/* ---- cost-aware placement (operator_plan.h) ----------------------------------------------- */

static sb_shape stage_shape(const sb_stage_spec *st)
{
    return strcmp(sb_stage_pool(st), "gpu") == 0 ? SB_SHAPE_GPU : SB_SHAPE_CPU;
}

static sb_operator_plan_view plan_view(const run_plan *pl)
{
    return (sb_operator_plan_view){.in = &pl->in,
                                   .out = &pl->out,
                                   .gpu_type = pl->gpu_type,
                                   .rates_from = pl->rates_from,
                                   .planned_at = pl->planned_at,
                                   .replans = pl->replans,
                                   .pools_sized = pl->pools_sized,
                                   .note = pl->note,
                                   .moves = pl->moves,
                                   .moved = pl->moved,
                                   .cause = pl->cause,
                                   .capacity = &pl->cap};
}

/* The planner's input from the run's pipeline with the declared rates; target from the spec
 * (a deadline only with remaining_rows > 0). */
static void plan_input(sb_operator_pipeline *r, double remaining_rows, double remaining_s)
{
    run_plan *pl = r->plan;
    const sb_pipeline_spec *sp = &r->p.spec;
    sb_plan_stages_from_spec(&r->p, pl->st);
    for (size_t i = 0; i < sp->nstages; i++)
        for (int k = 0; k < SB_SHAPE_COUNT; k++)
            pl->st[i].shapes[k].rate = pl->declared[i].shapes[k].rate;
    memset(&pl->in, 0, sizeof pl->in);
    pl->in.stages = pl->st;
    pl->in.nstages = sp->nstages;
    pl->in.prices = pl->prices;
    pl->in.capacity = pl->cap;
    const sb_target_spec *t = &sp->execution.target;
    pl->in.target.rows_per_second = t->rows_per_second_set ? t->rows_per_second : 0;
    pl->in.target.max_cost_per_hour = t->max_cost_per_hour_set ? t->max_cost_per_hour : 0;
    if (t->deadline_set && remaining_rows > 0) {
        pl->in.target.total_rows = remaining_rows;
        pl->in.target.deadline_seconds = remaining_s > 1 ? remaining_s : 1;
    }
}

/* Pool max pods from the plan when a target is set (else the spec's bounds stay). */
static void plan_size_pools(sb_operator_pipeline *r)
{
    run_plan *pl = r->plan;
    const sb_target_spec *t = &r->p.spec.execution.target;
    pl->pools_sized = pl->out.feasible && (t->rows_per_second_set || t->deadline_set);
    for (size_t k = 0; k < r->npools; k++) {
        uint64_t sum = 0;
        for (size_t i = 0; pl->pools_sized && i < pl->out.nstages; i++)
            if (strcmp(sb_shape_names[pl->out.stages[i].shape], r->pools[k].spec.pool) == 0)
                sum += (uint64_t)pl->out.stages[i].workers;
        r->pools[k].plan_max = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    }
}

static void plan_event(sb_operator_pipeline *r, const char *drift_stage, double drift)
{
    run_plan *pl = r->plan;
    char m[1024];
    sb_operator_plan_view v = plan_view(pl);
    sb_operator_plan_event_message(&v, drift_stage, drift, m, sizeof m);
    if (r->on_event != NULL)
        r->on_event(r->ud, pl->out.feasible ? "Normal" : "Warning",
                    pl->replans > 0 ? "Replanned" : "Planned", m);
    sb_log(SB_LOG_INFO, pl->replans > 0 ? "pipeline re-planned" : "pipeline planned", "pipeline",
           r->key, "plan", m, NULL);
}

static void plan_stamp(run_plan *pl, uint64_t t)
{
    if (pl->have)
        pl->replans++;
    pl->have = 1;
    pl->planned_ms = t;
    sb_operator_time_format(time(NULL), pl->planned_at, sizeof pl->planned_at);
}

/* The shapes the stages run on as the manifest places them. */
static void plan_running_from_spec(run_plan *pl, const sb_pipeline *p)
{
    for (size_t i = 0; i < p->spec.nstages && i < SB_PLAN_MAX_STAGES; i++)
        pl->running[i] = stage_shape(&p->spec.stages[i]);
}

/* Task slots of a pod of a shape's pool (as sb_kube_pools_from_spec: cpu
 * execution.cpuSlotsPerWorker, gpu 2). */
static double shape_slots(const sb_pipeline *p, int shape)
{
    int64_t cs = p->spec.execution.cpu_slots_per_worker;
    return shape == SB_SHAPE_GPU ? 2 : cs > 0 ? (double)cs : 1;
}

/* The declared rates (per task slot, as `streambatch plan` gives them) per worker pod. Returns
 * the number of stages with an allowed shape without one. */
static int declared_per_pod(sb_operator_pipeline *r)
{
    run_plan *pl = r->plan;
    sb_plan_stages_from_spec(&r->p, pl->declared);
    int missing = sb_plan_declared_rates(&r->p, pl->declared, NULL);
    for (size_t i = 0; i < r->p.spec.nstages; i++)
        for (int k = 0; k < SB_SHAPE_COUNT; k++)
            pl->declared[i].shapes[k].rate *= shape_slots(&r->p, k);
    return missing;
}

/* At start: prices, declared rates, and a plan from them when every allowed shape has one (the
 * placement it chooses is written into the manifest: r->p and r->json are decoded again).
 * Returns 0, or -1 when out of memory or the reordered manifest does not decode. */
static int plan_start(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg, sb_err *err)
{
    if (cfg->plan == NULL || !sb_operator_plan_wanted(&r->p) ||
        r->p.spec.nstages > SB_PLAN_MAX_STAGES)
        return 0;
    run_plan *pl = calloc(1, sizeof *pl);
    if (pl == NULL)
        return sb_err_set(err, "out of memory");
    pl->cfg = *cfg->plan;
    if (!(pl->cfg.replan_threshold > 0))
        pl->cfg.replan_threshold = SB_OPERATOR_REPLAN_THRESHOLD;
    if (pl->cfg.replan_interval_ms == 0)
        pl->cfg.replan_interval_ms = SB_OPERATOR_REPLAN_INTERVAL_MS;
    sb_err pe = {0};
    if (sb_price_resolve_with(pl->cfg.prices, &r->p.spec.execution.pricing, &pl->prices,
                              &pl->gpu_type, &pe) != 0) {
        if (r->on_event != NULL)
            r->on_event(r->ud, "Warning", "NotPlanned", pe.msg);
        free(pl);
        return 0;
    }
    r->plan = pl;
    pl->cap = (sb_plan_capacity){-1, -1, -1};
    plan_running_from_spec(pl, &r->p);
    pl->all_declared = declared_per_pod(r) == 0;
    const sb_target_spec *t = &r->p.spec.execution.target;
    if (!pl->all_declared || (t->deadline_set && !t->rows_per_second_set))
        return 0; /* planned once rates are measured */
    plan_input(r, 0, 0);
    sb_plan_result best;
    if (sb_plan_solve(&pl->in, &best, &pe) != 0) {
        if (r->on_event != NULL)
            r->on_event(r->ud, "Warning", "NotPlanned", pe.msg);
        r->plan = NULL;
        free(pl);
        return 0;
    }
    cJSON *moved = best.feasible ? sb_operator_plan_reorder(cfg->object, &r->p, &best) : NULL;
    if (moved != NULL) {
        /* the manifest workers get runs each stage on the plan's shape (its shapeArgs) */
        sb_pipeline np;
        char *json = NULL, msg[512];
        int bad = sb_operator_decode(moved, &np, &json, msg, sizeof msg);
        cJSON_Delete(moved);
        if (bad != 0)
            return sb_err_set(err, "the planned placement: %s", bad > 0 ? msg : "out of memory");
        sb_pipeline_free(&r->p);
        free(r->json);
        r->p = np;
        r->json = json;
        plan_running_from_spec(pl, &r->p);
        /* names point into the new pipeline; later stages' row counts may follow their shape */
        declared_per_pod(r);
        plan_input(r, 0, 0);
        sb_shape shapes[SB_PLAN_MAX_STAGES];
        for (size_t i = 0; i < r->p.spec.nstages; i++)
            shapes[i] = best.stages[i].shape;
        if (sb_plan_fixed(&pl->in, shapes, &pl->out, &pe) != 0)
            pl->out = best;
    } else {
        pl->out = best;
    }
    pl->rates_from = "declared";
    for (size_t i = 0; i < r->p.spec.nstages; i++)
        pl->used[i] = pl->st[i].shapes[pl->running[i]].rate;
    plan_stamp(pl, sb_operator_mono_ms());
    plan_event(r, NULL, 0);
    return 0;
}

/* Moves stage i to shape `to` while the run goes on (sb_ctl_stage_move) and adds it to the
 * plan's moves ("b cpu->gpu" + what, may be ""); *mo: the length of pl->moved so far.
 * Returns 1 moved, 0 when the scheduler refused (logged). */
static int stage_move(sb_operator_pipeline *r, size_t i, sb_shape to, const char *what, size_t *mo)
{
    run_plan *pl = r->plan;
    sb_err me = {0};
    const char *from = sb_shape_names[pl->running[i]], *dest = sb_shape_names[to];
    if (sb_ctl_stage_move(r->ctl, i, dest, &me) < 0) {
        sb_log(SB_LOG_WARN, "stage not moved", "pipeline", r->key, "stage", pl->st[i].name, "to",
               dest, "why", me.msg, NULL);
        return 0;
    }
    if (*mo < sizeof pl->moved)
        *mo += (size_t)snprintf(pl->moved + *mo, sizeof pl->moved - *mo, "%s%s %s->%s%s",
                                *mo ? ", " : "", pl->st[i].name, from, dest, what);
    sb_log(SB_LOG_INFO, "stage moved", "pipeline", r->key, "stage", pl->st[i].name, "from", from,
           "to", dest, "why", *what ? what + 1 : "cheaper", NULL);
    pl->running[i] = to;
    pl->moves++;
    return 1;
}

/* A plan from rates m[] of the shapes the stages run on (fresh: measured in the window that
 * just closed; 0: the rates the current plan used, for a re-plan the capacity asks for; another
 * shape keeps the rate measured when the stage ran there, else its declared rate). A stage the plan
 * places elsewhere moves there while the run goes on (stage_move; it is an op of its own:
 * no_fuse_choices); one the scheduler refuses to move is only noted, for when the pipeline starts
 * again. A stage with an allowed shape that has no rate at all is then moved there to be measured
 * (profiling is part of the run): the plan is made again as soon as that shape's tasks measured it
 * (plan_tick). */
static void plan_measured(sb_operator_pipeline *r, const double *m, int fresh,
                          const sb_ctl_snapshot *s, uint64_t t)
{
    run_plan *pl = r->plan;
    const sb_pipeline_spec *sp = &r->p.spec;
    double remaining_rows = 0, remaining_s = 0;
    const sb_target_spec *tg = &sp->execution.target;
    if (tg->deadline_set && s->nops > 0 && s->ops[0].tasks_done > 0) {
        double done = (double)s->ops[0].tasks_done, total = (double)s->ops[0].tasks_total;
        double rows = (double)s->ops[s->nops - 1].rows_out;
        remaining_rows = total > done ? rows * (total - done) / done : 0;
        remaining_s = (double)tg->deadline_ns / 1e9 - (double)(t - r->started_ms) / 1000.0;
    }
    plan_input(r, remaining_rows, remaining_s);
    sb_shape *running = pl->running;
    int unrated[SB_PLAN_MAX_STAGES];
    for (size_t i = 0; i < sp->nstages; i++) {
        pl->probing[i] = 0; /* measured now */
        if (fresh)
            pl->measured[i][running[i]] = m[i];
        pl->st[i].shapes[running[i]].allowed = true;
        pl->st[i].shapes[running[i]].rate = m[i];
        sb_plan_shape_in *other = &pl->st[i].shapes[1 - (int)running[i]];
        if (other->allowed && pl->measured[i][1 - (int)running[i]] > 0)
            other->rate = pl->measured[i][1 - (int)running[i]];
        unrated[i] = other->allowed && other->rate <= 0 && !pl->unmeasurable[i];
        if (other->rate <= 0)
            other->allowed = false;
    }
    sb_plan_result best;
    sb_err pe = {0};
    if (sb_plan_solve(&pl->in, &best, &pe) != 0) {
        sb_log(SB_LOG_WARN, "planning failed", "pipeline", r->key, "error", pe.msg, NULL);
        return;
    }
    pl->note[0] = '\0';
    pl->moved[0] = '\0';
    int unmoved = 0; /* a stage the plan places elsewhere stays where it is */
    size_t mo = 0;
    for (size_t i = 0; best.feasible && i < sp->nstages; i++)
        if (best.stages[i].shape != running[i] && !stage_move(r, i, best.stages[i].shape, "", &mo))
            unmoved = 1;
    if (unmoved) {
        size_t o = (size_t)snprintf(pl->note, sizeof pl->note, "placement");
        for (size_t i = 0; i < sp->nstages && o < sizeof pl->note; i++)
            o += (size_t)snprintf(pl->note + o, sizeof pl->note - o, " %s=%s", pl->st[i].name,
                                  sb_shape_names[best.stages[i].shape]);
        if (o < sizeof pl->note)
            snprintf(pl->note + o, sizeof pl->note - o,
                     " would cost %.4g per million rows; it applies when the pipeline starts "
                     "again (suspend and resume)",
                     best.cost_per_million_rows);
        if (sb_plan_fixed(&pl->in, running, &pl->out, &pe) != 0)
            pl->out = best;
    } else {
        pl->out = best;
    }
    if (fresh)
        pl->rates_from = "measured";
    /* the rates the plan used for the shapes the stages run on now */
    for (size_t i = 0; i < sp->nstages; i++)
        pl->used[i] = pl->st[i].shapes[running[i]].rate;
    /* then the shapes not measured yet: the stage runs there until they are */
    for (size_t i = 0; i < sp->nstages; i++)
        if (unrated[i] && (!best.feasible || best.stages[i].shape == running[i]) &&
            stage_move(r, i, (sb_shape)(1 - (int)running[i]), " (to measure it)", &mo)) {
            pl->probing[i] = 1;
            pl->probe_from[i] = (sb_shape)(1 - (int)running[i]);
            pl->probe_ms = t;
            pl->used[i] = 0;
        }
    if (mo > 0) /* a moved stage takes its workers.min to its new pool */
        sb_operator_pipeline_set_bounds(r, &r->p);
}

/* A shape being measured (plan_measured) that got no measurement within the re-plan interval
 * (its pods cannot be scheduled, or too few tasks were left): the stage goes back and that
 * shape is left out of its plans for the run, with a Warning event. Returns 1 when a stage went
 * back. */
static int probe_expired(sb_operator_pipeline *r, uint64_t t)
{
    run_plan *pl = r->plan;
    uint64_t limit = pl->cfg.replan_interval_ms;
    int back = 0;
    size_t mo = 0;
    pl->moved[0] = '\0';
    for (size_t i = 0; i < r->p.spec.nstages; i++) {
        if (!pl->probing[i] || t - pl->probe_ms < limit)
            continue;
        sb_shape shape = pl->running[i];
        pl->probing[i] = 0;
        pl->unmeasurable[i] = 1;
        if (!stage_move(r, i, pl->probe_from[i], " (not measured)", &mo))
            continue;
        back = 1;
        char m[400];
        snprintf(m, sizeof m,
                 "stage %s completed too few tasks on %s to measure it within %.0f s (see the "
                 "WorkersPending condition): back on %s; %s is left out of its plans",
                 pl->st[i].name, sb_shape_names[shape], (double)limit / 1000.0,
                 sb_shape_names[pl->running[i]], sb_shape_names[shape]);
        if (r->on_event != NULL)
            r->on_event(r->ud, "Warning", "NotMeasured", m);
    }
    if (back)
        sb_operator_pipeline_set_bounds(r, &r->p);
    return back;
}

/* The cluster's capacity as the run sees it (issue: "Pending pods are not capacity"): a resource
 * that a pool's pods stay Pending for (the scheduler's "Insufficient cpu", "Insufficient
 * memory", "Insufficient nvidia.com/gpu"; for another reason: GPUs for a gpu pool, CPU for a cpu
 * pool) is capped at what the run's running pods hold, and stays capped (raised when the run
 * holds more). Returns 1 when a cap was set or raised now; *why names the pool and the reason. */
static int plan_capacity(sb_operator_pipeline *r, char *why, size_t len)
{
    run_plan *pl = r->plan;
    double held[3] = {0, 0, 0};
    int capped[3] = {0, 0, 0};
    why[0] = '\0';
    for (size_t k = 0; k < r->npools; k++) {
        const sb_kube_pool *sp = &r->pools[k].spec;
        uint32_t desired = 0, ready = 0, pending = 0;
        char w[256];
        sb_kube_pool_status(r->kube, sp->pool, &desired, &ready, &pending, w, sizeof w);
        held[0] += (double)ready * (double)sp->cpu_milli / 1000.0;
        held[1] += (double)ready * (double)sp->memory_bytes / (double)(1ll << 30);
        held[2] += (double)ready * (double)sp->gpus;
        if (pending == 0 || w[0] == '\0')
            continue;
        int named = 0;
        if (strstr(w, "Insufficient cpu") != NULL)
            capped[0] = named = 1;
        if (strstr(w, "Insufficient memory") != NULL)
            capped[1] = named = 1;
        if (strstr(w, "Insufficient nvidia.com/gpu") != NULL)
            capped[2] = named = 1;
        if (!named)
            capped[sp->gpus > 0 ? 2 : 0] = 1;
        if (why[0] == '\0')
            snprintf(why, len, "pool %s: %u pod%s Pending (%s)", sp->pool, pending,
                     pending == 1 ? "" : "s", w);
    }
    double *cap[3] = {&pl->cap.cpu_cores, &pl->cap.mem_gib, &pl->cap.gpus};
    int changed = 0;
    for (int d = 0; d < 3; d++)
        if (capped[d] && (*cap[d] < 0 || held[d] > *cap[d] + 1e-9)) {
            *cap[d] = held[d];
            changed = 1;
        }
    return changed;
}

/* pl->cause for a plan made again because it did not fit: the Pending pods plan_capacity saw
 * (why) and the capacity now known, e.g. "pool gpu: 1 pod Pending (...); room for 1 GPUs". */
static void plan_capacity_cause(run_plan *pl, const char *why)
{
    size_t o = (size_t)snprintf(pl->cause, sizeof pl->cause, "%s; room for", why);
    const double c[3] = {pl->cap.cpu_cores, pl->cap.mem_gib, pl->cap.gpus};
    const char *unit[3] = {"CPU cores", "GiB", "GPUs"};
    for (int d = 0, n = 0; d < 3; d++)
        if (c[d] >= 0 && o < sizeof pl->cause)
            o += (size_t)snprintf(pl->cause + o, sizeof pl->cause - o, "%s %.4g %s", n++ ? "," : "",
                                  c[d], unit[d]);
}

/* 1 when the applied plan needs more than the capacity (plan_capacity). */
static int plan_exceeds(const run_plan *pl)
{
    const sb_plan_result *o = &pl->out;
    const sb_plan_capacity *c = &pl->cap;
    return pl->have && o->feasible &&
           ((c->cpu_cores >= 0 && o->cpu_cores > c->cpu_cores + 1e-9) ||
            (c->mem_gib >= 0 && o->mem_gib > c->mem_gib + 1e-9) ||
            (c->gpus >= 0 && o->gpus > c->gpus + 1e-9));
}

/* The op figures of the window's measure: each op's from the tasks that ran in the pool it runs
 * in now (a stage moved to another shape is measured there from its own tasks), from the
 * snapshot, or from the window's base when base is not NULL. */
static void plan_figures(const sb_ctl_snapshot *s, const sb_sched_pool_figures (*base)[2],
                         sb_operator_plan_op *out)
{
    for (size_t j = 0; j < s->nops; j++) {
        int g = strcmp(s->ops[j].pool, "gpu") == 0;
        const sb_sched_pool_figures *x = base != NULL ? &base[j][g] : &s->ops[j].by_pool[g];
        out[j] = (sb_operator_plan_op){.name = s->ops[j].name,
                                       .rows_in = x->rows_in,
                                       .rows_out = x->rows_out,
                                       .tasks = x->timed_tasks,
                                       .task_seconds = x->task_seconds};
    }
}

/* Opens the next measuring window now. */
static void plan_window(run_plan *pl, const sb_ctl_snapshot *s)
{
    for (size_t j = 0; j < s->nops; j++)
        memcpy(pl->base[j], s->ops[j].by_pool, sizeof pl->base[j]);
    pl->nbase = s->nops;
}

/* Every few seconds while running: measure, plan when there is no plan yet, re-plan on drift
 * (operator_plan.h) or once a shape being measured was (plan_measured), size the pools. */
static void plan_tick(sb_operator_pipeline *r, uint64_t t)
{
    run_plan *pl = r->plan;
    if (pl == NULL || t - pl->checked_ms < 2000)
        return;
    pl->checked_ms = t;
    static __thread sb_ctl_snapshot s; /* large: off the stack */
    const sb_pipeline_spec *sp = &r->p.spec;
    int probing = 0;
    for (size_t i = 0; i < sp->nstages; i++)
        probing |= pl->probing[i];
    if (probing && probe_expired(r, t)) {
        sb_ctl_snapshot_get(r->ctl, &s);
        plan_window(pl, &s); /* measure the stages where they are again */
        plan_event(r, NULL, 0);
        return;
    }
    char why[320];
    if (plan_capacity(r, why, sizeof why) && !probing && plan_exceeds(pl)) {
        /* the plan does not fit what the cluster has room for: planned again at once, from the
         * rates the plan used */
        sb_ctl_snapshot_get(r->ctl, &s);
        double m[SB_PLAN_MAX_STAGES];
        for (size_t i = 0; i < sp->nstages; i++)
            m[i] = pl->used[i];
        plan_capacity_cause(pl, why);
        plan_measured(r, m, 0, &s, t);
        plan_stamp(pl, t);
        plan_size_pools(r);
        plan_event(r, NULL, 0);
        return;
    }
    /* a declared plan gives way to measured rates as soon as they drift (no interval): the
     * interval keeps measured plans from flapping */
    int measured = pl->have && strcmp(pl->rates_from, "measured") == 0;
    uint64_t interval = measured && !probing ? pl->cfg.replan_interval_ms : 0;
    if (pl->have && t - pl->planned_ms < interval)
        return;
    sb_ctl_snapshot_get(r->ctl, &s);
    if (s.planning || s.nops == 0 || s.nops > PLAN_OPS)
        return;
    sb_operator_plan_op cur[PLAN_OPS], base[PLAN_OPS];
    plan_figures(&s, NULL, cur);
    uint32_t slots[SB_PLAN_MAX_STAGES];
    for (size_t i = 0; i < sp->nstages; i++) {
        slots[i] = 1;
        for (size_t k = 0; k < r->npools; k++)
            if (strcmp(r->pools[k].spec.pool, sb_shape_names[pl->running[i]]) == 0 &&
                r->pools[k].spec.slots > 0)
                slots[i] = r->pools[k].spec.slots;
    }
    const sb_operator_plan_op *bp = NULL; /* NULL: the window opened at the start */
    if (pl->nbase == s.nops) {
        plan_figures(&s, (const sb_sched_pool_figures(*)[2])pl->base, base);
        bp = base;
    }
    double m[SB_PLAN_MAX_STAGES];
    if (!sb_operator_plan_measure(&r->p, slots, bp, cur, s.nops, SB_OPERATOR_PLAN_MIN_TASKS, m))
        return;
    size_t ds = 0;
    double drift = 0;
    int first = !pl->have;
    if (!first && !probing &&
        !sb_operator_plan_drifted(pl->used, m, sp->nstages, pl->cfg.replan_threshold, t,
                                  pl->planned_ms, interval, &ds, &drift))
        return;
    pl->cause[0] = '\0';
    plan_measured(r, m, 1, &s, t);
    plan_stamp(pl, t);
    plan_size_pools(r);
    plan_window(pl, &s); /* the next window starts now */
    plan_event(r, first || probing ? NULL : sp->stages[ds].name, drift);
}

/* status.plan (replaced), when the run has a plan. */
static int plan_status(sb_operator_pipeline *r, cJSON *status)
{
    if (r->plan == NULL || !r->plan->have)
        return 0;
    sb_operator_plan_view v = plan_view(r->plan);
    cJSON *j = sb_operator_plan_status_json(&v);
    if (j == NULL)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(status, "plan") != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(status, "plan", j);
    else
        cJSON_AddItemToObject(status, "plan", j);
    return 0;
}

/* The scheduler's resume state from cfg->resume (a checkpoint): the next epoch, and the committed
 * splits and parts when the spec that made them is this one. A spec changed while suspended
 * starts over at the new epoch, with a CheckpointDiscarded event. */
static void run_resume(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg,
                       sb_sched_resume *resume)
{
    memset(resume, 0, sizeof *resume);
    if (cfg->resume_log != NULL) {
        resume->epoch = cfg->resume_log->epoch + 1;
        const char *h = cfg->resume_log->spec_hash;
        if (h[0] == '\0' || strcmp(h, r->spec_hash) == 0) {
            r->loading = 1; /* a worker reads the log before planning */
            r->resume_sum = *cfg->resume_log;
        } else if (cfg->resume_log->splits > 0 && cfg->on_event != NULL) {
            char m[200];
            snprintf(m, sizeof m,
                     "the spec changed since %llu splits were committed: they are run again "
                     "with the new spec",
                     (unsigned long long)cfg->resume_log->splits);
            cfg->on_event(cfg->ud, "Warning", "CheckpointDiscarded", m);
        }
        return;
    }
    if (cfg->resume == NULL)
        return;
    resume->epoch = cfg->resume->epoch + 1;
    /* committed parts are only valid for the spec that made them: after a change while
     * suspended (another source, stages or sink) the run starts over at the new epoch */
    int same =
        cfg->resume->spec_hash[0] == '\0' || strcmp(cfg->resume->spec_hash, r->spec_hash) == 0;
    if (same) {
        resume->committed_splits = cfg->resume->committed_splits;
        resume->parts = cfg->resume->parts;
        resume->nparts = cfg->resume->nparts;
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

/* The worker pods' configuration: the Pipeline's identity, the controller's address (caddr),
 * images, template and credentials, its pools (one per shape a re-plan may move a stage to) and
 * each worker's store budget. Strings point into cfg, r and caddr. */
static void run_kube_config(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg,
                            const char *caddr, sb_kube_config *kc)
{
    memset(kc, 0, sizeof *kc);
    kc->client = cfg->client;
    kc->namespace = sb_operator_str_at(cfg->object, "metadata", "namespace");
    kc->pipeline = sb_operator_str_at(cfg->object, "metadata", "name");
    kc->pipeline_uid = sb_operator_str_at(cfg->object, "metadata", "uid");
    kc->controller_address = caddr;
    kc->epoch = r->epoch;
    kc->image = cfg->image;
    kc->gpu_image = cfg->gpu_image;
    const cJSON *wt = cJSON_GetObjectItemCaseSensitive(r->spec, "workerTemplate");
    kc->worker_template = cJSON_IsObject(wt) ? wt : NULL;
    kc->credentials_secret = sb_pipeline_credentials_secret(&r->p);
    kc->npools = sb_kube_pools_from_spec(&r->p, kc->pools, MAX_POOLS);
    /* store budget per worker: the pipeline's budget spread over its largest worker count,
     * at least two partitions (as `streambatch run` does) */
    uint64_t maxw = 0;
    for (size_t i = 0; i < kc->npools; i++)
        maxw += kc->pools[i].max;
    if (r->plan != NULL) /* also a pool for each shape a re-plan may move a stage to */
        kc->npools = sb_kube_pools_placed(&r->p, NULL, 1, kc->pools, MAX_POOLS);
    uint64_t part = (uint64_t)r->p.spec.source.partition_size;
    uint64_t sb = (uint64_t)r->p.spec.execution.memory_budget / (maxw ? maxw : 1);
    kc->store_budget = sb < 2 * part ? 2 * part : sb;
    kc->max_pending = cfg->max_pending;
    kc->rpc = &r->rpc;
    kc->auth_secret = r->auth_secret;
    kc->auth_worker_token = r->worker_token;
    kc->auth_controller_sha256 = r->controller_sha256;
    /* the spill volume: at most the pipeline's whole memory budget twice (a worker spills what
     * its store cannot hold of the partitions in flight, which the budget bounds), 1 GiB least */
    uint64_t mb = (uint64_t)r->p.spec.execution.memory_budget;
    kc->spill_limit = 2 * mb > (1ull << 30) ? 2 * mb : (1ull << 30);
    kc->tls_secret = cfg->tls_secret;
    kc->tls_server_name = cfg->tls_server_name;
    kc->on_exit = on_exit_cb;
    kc->on_event = on_event_cb;
    kc->can_remove = can_remove_cb;
    kc->ud = r;
}

/* sink.mode append: the run's part tag from the Pipeline's uid, the same for its resumes and
 * a new leader's run of it (lib/io/sink.h). */
static int run_sink_tag(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg,
                        sb_err *err)
{
    if (r->p.spec.sink.mode != SB_SINK_APPEND)
        return 0;
    return sb_io_sink_tag_from_uid(sb_operator_str_at(cfg->object, "metadata", "uid"),
                                   r->p.spec.sink.part_tag, err);
}

/* The pipeline's tokens, derived from the operator's key and the Pipeline's uid (the same for
 * every leader with that key), and the Secret name the pods read the worker token from. 0, or
 * -1 with err. */
static int run_credentials(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg,
                           sb_err *err)
{
    const char *uid = sb_operator_str_at(cfg->object, "metadata", "uid");
    if (cfg->auth_key == NULL || cfg->auth_key_len < 16)
        return sb_err_set(err, "the operator has no key to derive the pipeline's credentials "
                               "from (SB_AUTH_KEY, at least 16 bytes)");
    if (uid == NULL || uid[0] == '\0' || strlen(uid) > 64)
        return sb_err_set(err, "the Pipeline has no metadata.uid to bind its credentials to");
    char ctl_token[SB_RPC_TOKEN_HEX + 1], key_id[SB_RPC_DIGEST_HEX + 1];
    sb_rpc_token_derive(cfg->auth_key, cfg->auth_key_len, SB_RPC_ROLE_WORKER, uid, r->worker_token);
    sb_rpc_token_derive(cfg->auth_key, cfg->auth_key_len, SB_RPC_ROLE_CONTROLLER, uid, ctl_token);
    sb_rpc_token_digest_hex(ctl_token, r->controller_sha256);
    /* the key's id: a Secret made with another key has another name, never a stale token */
    sb_rpc_token_derive(cfg->auth_key, cfg->auth_key_len, SB_RPC_ROLE_WORKER, "key id", key_id);
    snprintf(r->auth_secret, sizeof r->auth_secret, "sb-auth-%s-%.8s", uid, key_id);
    if (sb_rpc_creds_controller(&r->creds, r->worker_token, ctl_token, err) != 0)
        return -1;
    r->rpc = cfg->rpc != NULL ? *cfg->rpc : (sb_rpc_opts){0};
    r->rpc.auth = &r->creds;
    return 0;
}

/* A resumed run adopts the worker pods an earlier leader left (their partitions are still
 * there); a failure is logged, not fatal: the run goes on with new pods. */
static void run_rebind(sb_operator_pipeline *r)
{
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

/* The writer of the run's checkpoint log (opckpt.h), continuing log id (NULL: a new one) past
 * generation gen. A failure is logged: the run goes on without a checkpoint. */
static void run_ckpt_init(sb_operator_pipeline *r, const char *id, uint32_t gen)
{
    sb_err e2 = {0};
    char *dir = sb_storage_ckpt_dir(&r->p, &e2);
    r->ck_ok =
        dir != NULL && sb_opckpt_init(&r->ck, dir, id, r->epoch, r->spec_hash, gen, &e2) == 0;
    free(dir);
    if (!r->ck_ok)
        sb_log(SB_LOG_WARN, "no checkpoint log for this run", "pipeline", r->key, "error", e2.msg,
               NULL);
}

/* A stream's Service and EndpointSlice pointing at this leader (streamsvc.h). Without them the
 * stream still serves at r->address, so a refusal (RBAC of an older chart, an address the API
 * refuses) is logged and status.stream leaves `service` out. */
static void run_stream_service(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg)
{
    sb_err e = {0};
    r->service[0] = '\0';
    if (sb_streamsvc_ensure(cfg->client, cfg->object,
                            cfg->grpc_host != NULL ? cfg->grpc_host : "127.0.0.1",
                            sb_ctl_port(r->ctl), r->service, sizeof r->service, &e) != 0) {
        r->service[0] = '\0';
        sb_log(SB_LOG_WARN, "stream Service not made; consumers use status.stream.address",
               "pipeline", r->key, "error", e.msg, NULL);
    }
}

/* The log a worker read before planning: its committed work becomes the resume (or, refused,
 * an InvalidCheckpoint event and a run of everything at the new epoch), then planning goes
 * on. Called from the tick while r->loading. */
static void run_loaded(sb_operator_pipeline *r)
{
    sb_storage_files fs;
    char msg[SB_ERR_MAX + 256] = "";
    int lr = sb_ctl_ckpt_loaded(r->ctl, &fs, msg, sizeof msg);
    if (lr == 0)
        return;
    r->loading = 0;
    sb_ckpt cp;
    memset(&cp, 0, sizeof cp);
    sb_ckptlog_summary found = r->resume_sum;
    sb_err e2 = {0};
    int ok = lr == 1 && sb_opckpt_resume(&r->resume_sum, &fs, &cp, &found, &e2) == 0;
    sb_storage_files_free(&fs);
    char m[SB_ERR_MAX + 600];
    sb_sched_resume res = {.epoch = r->epoch, .committed_splits = ""};
    if (ok) {
        res.committed_splits = cp.committed_splits;
        res.parts = cp.parts;
        res.nparts = cp.nparts;
        r->committed_at_start = cp.ncommitted;
        snprintf(m, sizeof m, "read %s: %zu splits and %zu sink parts committed are skipped",
                 r->resume_sum.location, cp.ncommitted, cp.nparts);
    } else {
        snprintf(m, sizeof m, "checkpoint %s cannot be used (%s): the uncommitted work runs again",
                 r->resume_sum.location, lr == 1 ? e2.msg : msg);
    }
    if (r->on_event != NULL)
        r->on_event(r->ud, ok ? "Normal" : "Warning", ok ? "CheckpointLoaded" : "InvalidCheckpoint",
                    m);
    sb_log(ok ? SB_LOG_INFO : SB_LOG_WARN, "checkpoint log read", "pipeline", r->key, "result", m,
           NULL);
    run_ckpt_init(r, ok ? found.id : NULL,
                  found.generation > r->resume_sum.generation ? found.generation
                                                              : r->resume_sum.generation);
    if (sb_ctl_plan_continue(r->ctl, &res, ok ? cp.plan_hash : NULL, &e2) != 0)
        sb_log(SB_LOG_WARN, "planning after the checkpoint failed to start", "pipeline", r->key,
               "error", e2.msg, NULL);
    sb_ckpt_free(&cp);
}

/* The epochs of a stream that every rank ended under an earlier leader (status.stream's
 * epochsEnded: the status is written after the fact, so it may lag, never lead), at most epochs;
 * 0 for a Pipeline that has not served yet. */
static uint32_t run_stream_ended(const cJSON *object, uint32_t epochs)
{
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(object, "status");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(st, "stream"), "epochsEnded");
    if (!cJSON_IsNumber(n) || !(n->valuedouble >= 1))
        return 0;
    return n->valuedouble >= epochs ? epochs : (uint32_t)n->valuedouble;
}

/* Starts the run's Control service (the scheduler, resumed from the checkpoint where cfg
 * has one; a stream keeps none, and starts at the first epoch some rank had not ended) and records
 * its address in r->address. 0, or -1 (err set; the caller frees r). */
static int run_ctl_start(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg,
                         sb_err *err)
{
    /* the source is planned and the sink prepared by a worker pod (storage jobs): the
     * controller has no access to user storage */
    sb_sched_resume resume;
    sb_ckpt_spec_hash(r->spec, r->spec_hash);
    run_resume(r, cfg, &resume);
    r->epoch = resume.epoch;
    char listen[300];
    snprintf(listen, sizeof listen, "%s:0", cfg->grpc_host ? cfg->grpc_host : "127.0.0.1");
    sb_ctl_config cc = {.pipeline = &r->p,
                        .pipeline_id = r->key,
                        .pipeline_json = r->json,
                        .storage_on_workers = 1,
                        /* a stage with a choice stays an op of its own, so a re-plan can move it */
                        .no_fuse_choices = r->plan != NULL,
                        .listen_addr = listen,
                        .heartbeat_timeout_ms = cfg->heartbeat_timeout_ms,
                        .resume = cfg->resume != NULL || cfg->resume_log != NULL ? &resume : NULL,
                        .ckpt_load = r->loading,
                        .resume_plan_hash = cfg->resume != NULL && resume.committed_splits != NULL
                                                ? cfg->resume->plan_hash
                                                : NULL};
    if (run_credentials(r, cfg, err) != 0 || run_sink_tag(r, cfg, err) != 0)
        return -1;
    if (!r->loading && !r->stream) /* else once the log is read (run_loaded) */
        run_ckpt_init(r, NULL, cfg->resume_log ? cfg->resume_log->generation : 0);
    cc.sink_tag = r->p.spec.sink.part_tag;
    if (r->stream) { /* sink.args: the operator has no flags per run (validate checked them) */
        uint32_t ep = sb_sink_stream_epochs(&r->p.spec.sink);
        cc.stream = 1;
        cc.stream_epochs = ep > 0 ? ep : 1;
        cc.stream_shuffle = sb_sink_stream_seed(&r->p.spec.sink, &cc.stream_seed);
        cc.stream_first = r->stream_first = run_stream_ended(cfg->object, cc.stream_epochs);
        if (cc.stream_first > 0) {
            char nb[16];
            snprintf(nb, sizeof nb, "%u", cc.stream_first);
            sb_log(SB_LOG_INFO,
                   "stream taken over: the epochs every rank ended are not served "
                   "again",
                   "pipeline", r->key, "epochsEnded", nb, NULL);
        }
    }
    uint64_t maxw = 0; /* the pools' largest sizes, twice: pods being replaced overlap */
    for (size_t i = 0; i < r->p.spec.nstages; i++)
        maxw += r->p.spec.stages[i].workers.max;
    cc.max_workers = maxw * 2 + 8 < SB_CTL_DEFAULT_MAX_WORKERS ? (uint32_t)(maxw * 2 + 8)
                                                               : SB_CTL_DEFAULT_MAX_WORKERS;
    r->ctl = sb_ctl_start(&cc, &r->rpc, err);
    if (r->ctl == NULL)
        return sb_err_wrap(err, "starting the Control service on %s", listen);
    snprintf(r->address, sizeof r->address, "%s:%d", cfg->grpc_host ? cfg->grpc_host : "127.0.0.1",
             sb_ctl_port(r->ctl));
    return 0;
}

/* Makes what the run's worker pods need (the NetworkPolicies before any pod, a stream's
 * Service), then the kube backend that makes the pods, its pools sized by the plan. 0, or -1
 * (err set; the caller frees r). */
static int run_pods_start(sb_operator_pipeline *r, const sb_operator_pipeline_config *cfg,
                          sb_err *err)
{
    if (sb_netpol_ensure(cfg->client, cfg->object, err) != 0) /* before any worker pod */
        return -1;
    if (r->stream)
        run_stream_service(r, cfg);
    sb_kube_config kc;
    run_kube_config(r, cfg, r->address, &kc);
    r->npools = kc.npools;
    for (size_t i = 0; i < kc.npools; i++)
        r->pools[i].spec = kc.pools[i];
    if (r->plan != NULL && r->plan->have)
        plan_size_pools(r);
    r->kube = sb_kube_start(&kc, err);
    if (r->kube == NULL)
        return sb_err_wrap(err, "worker pods");
    /* pool names point into kc (stack): re-point them at static strings */
    for (size_t i = 0; i < r->npools; i++)
        r->pools[i].spec.pool = strcmp(kc.pools[i].pool, "gpu") == 0 ? "gpu" : "cpu";
    return 0;
}

sb_operator_pipeline *sb_operator_pipeline_start(const sb_operator_pipeline_config *cfg,
                                                 int *plan_error, sb_err *err)
{
    *plan_error = 0;
    sb_operator_pipeline *r = calloc(1, sizeof *r);
    if (r == NULL) {
        sb_err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->kube_mu, NULL);
    r->client = cfg->client;
    r->on_event = cfg->on_event;
    r->ud = cfg->ud;
    const char *ns = sb_operator_str_at(cfg->object, "metadata", "namespace");
    const char *name = sb_operator_str_at(cfg->object, "metadata", "name");
    snprintf(r->key, sizeof r->key, "%s/%s", ns ? ns : "", name ? name : "");
    char msg[2048];
    int bad = sb_operator_decode(cfg->object, &r->p, &r->json, msg, sizeof msg);
    if (bad != 0) {
        *plan_error = bad > 0;
        sb_err_set(err, "%s", bad > 0 ? msg : "out of memory");
        free(r->json);
        pthread_mutex_destroy(&r->kube_mu);
        free(r);
        return NULL;
    }
    r->spec = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(cfg->object, "spec"), 1);
    r->started_ms = sb_operator_mono_ms();
    if (plan_start(r, cfg, err) != 0) {
        *plan_error = 1;
        run_free(r);
        return NULL;
    }
    /* a stream keeps no checkpoint: a new leader serves it from the first epoch some rank had
     * not ended (its status says which: run_stream_ended) */
    r->stream = r->p.spec.sink.uri != NULL && strcmp(r->p.spec.sink.uri, "stream://") == 0;
    sb_operator_pipeline_config nockpt;
    if (r->stream) {
        nockpt = *cfg;
        nockpt.resume = NULL;
        nockpt.resume_log = NULL;
        cfg = &nockpt;
    }
    if (run_ctl_start(r, cfg, err) != 0 || run_pods_start(r, cfg, err) != 0) {
        run_free(r);
        return NULL;
    }
    if (cfg->resume != NULL || cfg->resume_log != NULL)
        run_rebind(r);
    else if (r->stream && r->kube != NULL &&
             sb_kube_replace_adopted(r->kube, "a new leader serves the stream from the first "
                                              "epoch some rank had not ended; this pod's "
                                              "partitions are of the run before") > 0)
        sb_log(SB_LOG_INFO, "a stream's worker pods replaced", "pipeline", r->key, NULL);
    r->stall_ms = (uint64_t)(r->p.spec.execution.stall_timeout_ns / 1000000);
    r->started_ms = sb_operator_mono_ms();
    sb_log(SB_LOG_INFO, "pipeline run started", "pipeline", r->key, "controller", r->address, NULL);
    return r;
}

sb_storage_errored *sb_operator_pipeline_errored(sb_operator_pipeline *r, size_t *n)
{
    return sb_ctl_errored(r->ctl, n, NULL);
}

uint64_t sb_operator_pipeline_recovered(sb_operator_pipeline *r)
{
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(r->ctl, &s);
    return s.stats.partitions_recovered;
}

size_t sb_operator_pipeline_committed_at_start(const sb_operator_pipeline *r)
{
    return r->committed_at_start;
}

uint32_t sb_operator_pipeline_epoch(const sb_operator_pipeline *r)
{
    return r->epoch;
}

int sb_operator_pipeline_stream(const sb_operator_pipeline *r, uint32_t *first)
{
    *first = r->stream_first;
    return r->stream;
}

size_t sb_operator_pipeline_splits(const sb_operator_pipeline *r)
{
    return sb_ctl_nsplits(r->ctl);
}

const cJSON *sb_operator_pipeline_spec(const sb_operator_pipeline *r)
{
    return r->spec;
}

void sb_operator_pipeline_set_bounds(sb_operator_pipeline *r, const sb_pipeline *p)
{
    sb_kube_pool pools[MAX_POOLS];
    const char *placed[SB_PLAN_MAX_STAGES];
    int plan = r->plan != NULL && p->spec.nstages <= SB_PLAN_MAX_STAGES;
    for (size_t i = 0; plan && i < p->spec.nstages; i++) /* where the stages run now */
        placed[i] = i < r->p.spec.nstages ? sb_shape_names[r->plan->running[i]] : NULL;
    size_t n = plan ? sb_kube_pools_placed(p, placed, 1, pools, MAX_POOLS)
                    : sb_kube_pools_from_spec(p, pools, MAX_POOLS);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r->npools; k++)
            if (strcmp(pools[i].pool, r->pools[k].spec.pool) == 0) {
                r->pools[k].spec.min = pools[i].min;
                r->pools[k].spec.max = pools[i].max;
            }
}

static void autoscale(sb_operator_pipeline *r, uint64_t t)
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
        uint32_t max = pl->spec.max;
        if (pl->plan_max > 0) /* the plan's pods, not below the pool's min */
            max = pl->plan_max > pl->spec.min ? pl->plan_max : pl->spec.min;
        sb_autoscale_in in = {.min = pl->spec.min,
                              .max = max,
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
static void final_start(sb_operator_pipeline *r, sb_storage_kind kind,
                        const sb_storage_output *parts, size_t n, const char *reason,
                        const char *message, uint64_t t)
{
    snprintf(r->final_reason, sizeof r->final_reason, "%s", reason ? reason : "");
    snprintf(r->final_message, sizeof r->final_message, "%s", message ? message : "");
    sb_err e2 = {0};
    if (kind == SB_STORAGE_NONE) {
        r->final_kind = SB_STORAGE_NONE;
        return;
    }
    /* one storage job at a time: a checkpoint write in flight ends first (a worker takes it
     * at its next poll; bounded, then the job start below reports it) */
    for (int i = 0;
         r->ck_ok && i < 500 && sb_opckpt_tick(&r->ck, r->ctl, sb_operator_mono_ms(), -1); i++)
        sb_clock_sleep_ms(20);
    int started = kind == SB_STORAGE_CKPT_REMOVE
                      ? sb_ctl_ckpt_start(r->ctl, kind, NULL, 0, 0, &e2)
                      : sb_ctl_storage_start(r->ctl, kind, parts, n, &e2);
    if (started != 0) {
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

static sb_operator_outcome finish(sb_operator_pipeline *r, sb_operator_outcome o, char *reason,
                                  size_t rlen, char *message, size_t mlen)
{
    sb_ctl_shutdown_workers(r->ctl);
    if (r->ck_ok)
        sb_opckpt_log_cost(&r->ck, r->key);
    if (o == SB_OPERATOR_FAILED) {
        snprintf(reason, rlen, "%s", r->final_reason);
        snprintf(message, mlen, "%s", r->final_message);
    }
    r->final_kind = SB_STORAGE_NONE;
    r->finished = o;
    return o;
}

/* A failure: the sink is aborted on a worker first (unless the failure was planning or
 * preparing it: then the sink was never touched, or cannot be). */
static sb_operator_outcome fail(sb_operator_pipeline *r, const char *why, const char *msg,
                                int touch_sink, uint64_t t, char *reason, size_t rlen,
                                char *message, size_t mlen)
{
    final_start(r, touch_sink ? SB_STORAGE_ABORT : SB_STORAGE_NONE, NULL, 0, why, msg, t);
    if (r->final_kind == SB_STORAGE_NONE)
        return finish(r, SB_OPERATOR_FAILED, reason, rlen, message, mlen);
    return SB_OPERATOR_RUNNING;
}

/* The failure rule (podstate.h): a pool whose every live pod has been failing to start (a
 * missing Secret, an image that cannot be pulled, a crash loop) for the stall timeout fails the
 * run with the kubelet's reason. 1 (message filled) when a pool reached it. */
static int pods_failing(sb_operator_pipeline *r, uint64_t t, char *m, size_t mlen)
{
    for (size_t i = 0; i < r->npools; i++) {
        run_pool *pl = &r->pools[i];
        uint32_t alive = 0, failing = 0;
        char first[700];
        sb_kube_pool_failing(r->kube, pl->spec.pool, &alive, &failing, NULL, 0, first,
                             sizeof first);
        if (sb_podstate_pool_rule(&pl->failing_since_ms, alive, failing, t, r->stall_ms) == 2) {
            sb_podstate_failure_message(pl->spec.pool, r->stall_ms, first, m, mlen);
            return 1;
        }
        uint64_t since = 0;
        if (r->stall_ms > 0 &&
            sb_kube_pool_churn(r->kube, pl->spec.pool, &since, first, sizeof first) && t >= since &&
            t - since >= r->stall_ms) {
            sb_podstate_failure_message(pl->spec.pool, r->stall_ms, first, m, mlen);
            return 1;
        }
    }
    return 0;
}

/* Sick workers the scheduler drained (sched.c, "Draining sick workers"): an Event WorkerDrained
 * each. The controller retires a drained worker once it holds nothing still needed; its pod
 * then ends (Succeeded), and the next sync deletes it and creates a new pod toward the pool's
 * desired count. */
static void drain_events(sb_operator_pipeline *r)
{
    sb_ctl_drain d[8];
    size_t n;
    while ((n = sb_ctl_drains_take(r->ctl, d, 8)) > 0)
        for (size_t i = 0; i < n; i++) {
            char m[768];
            sb_operator_event_drained_message(d[i].worker_id, d[i].pool, d[i].stage, d[i].speed,
                                              d[i].median, m, sizeof m);
            sb_log(SB_LOG_WARN, "worker pod drained", "pipeline", r->key, "pod", d[i].worker_id,
                   NULL);
            if (r->on_event != NULL)
                r->on_event(r->ud, "Warning", "WorkerDrained", m);
        }
}

sb_operator_outcome sb_operator_pipeline_tick(sb_operator_pipeline *r, char *reason, size_t rlen,
                                              char *message, size_t mlen)
{
    if (r->finished)
        return (sb_operator_outcome)r->finished;
    uint64_t t = sb_operator_mono_ms();
    if (r->final_kind != SB_STORAGE_NONE) {
        autoscale(r, t); /* the job's pool keeps a worker (its demand counts the job) */
        char m[SB_ERR_MAX + 512] = "";
        int jr = sb_ctl_storage_poll(r->ctl, m, sizeof m);
        if (jr == 0 && t < r->final_deadline_ms)
            return SB_OPERATOR_RUNNING;
        if (jr == 0)
            snprintf(m, sizeof m, "%s: not done within %llu s", sb_storage_kind_what(r->final_kind),
                     (unsigned long long)(r->final_limit_ms / 1000));
        if (r->final_kind == SB_STORAGE_COMMIT) {
            if (jr == 1 && r->ck_ok) { /* the log is not needed any more */
                final_start(r, SB_STORAGE_CKPT_REMOVE, NULL, 0, "", "", t);
                if (r->final_kind != SB_STORAGE_NONE)
                    return SB_OPERATOR_RUNNING;
            }
            if (jr == 1)
                return finish(r, SB_OPERATOR_SUCCEEDED, reason, rlen, message, mlen);
            return fail(r, "CommitFailed", m, 1, t, reason, rlen, message, mlen);
        }
        if (r->final_kind == SB_STORAGE_CKPT_REMOVE) {
            if (jr != 1) /* the sink is committed: a log left behind is only litter */
                sb_log(SB_LOG_WARN, "removing the checkpoint log failed", "pipeline", r->key,
                       "error", m, NULL);
            return finish(r, SB_OPERATOR_SUCCEEDED, reason, rlen, message, mlen);
        }
        if (jr != 1) /* the abort is best effort: the failed run never wrote _SUCCESS */
            sb_log(SB_LOG_WARN, "aborting the sink failed", "pipeline", r->key, "error", m, NULL);
        return finish(r, SB_OPERATOR_FAILED, reason, rlen, message, mlen);
    }
    sb_sched_state st = sb_ctl_wait(r->ctl, 0);
    if (r->loading)
        run_loaded(r);
    else if (st == SB_SCHED_RUNNING && r->ck_ok) {
        sb_opckpt_tick(&r->ck, r->ctl, t, 0); /* batched: one write a second at most */
        char m[600];
        if (!r->ck_refused_said && sb_opckpt_refused(&r->ck, m, sizeof m) && r->on_event != NULL) {
            r->ck_refused_said = 1;
            r->on_event(r->ud, "Warning", "CheckpointTooLarge", m);
        }
    }
    if (st == SB_SCHED_RUNNING) {
        plan_tick(r, t);
        drain_events(r);
        autoscale(r, t); /* set_pool_size syncs the pods */
        char pm[1200];
        if (pods_failing(r, t, pm, sizeof pm)) {
            sb_ctl_snapshot s;
            sb_ctl_snapshot_get(r->ctl, &s);
            /* no pod ran the planning: nobody may take an abort (as a stall while planning) */
            return fail(r, "WorkersFailing", pm, !s.planning, t, reason, rlen, message, mlen);
        }
        char stall[1024];
        /* (a stream waits for its consumers as long as they take: no watchdog) */
        if (!r->stream && r->stall_ms > 0 &&
            sb_ctl_stalled(r->ctl, r->stall_ms, stall, sizeof stall)) {
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
        return SB_OPERATOR_RUNNING;
    }
    if (st == SB_SCHED_SUCCEEDED && r->stream && !sb_ctl_stream_ended(r->ctl)) {
        /* every partition is made: the stream is served until every rank of every epoch was
         * told its epoch ended (a rank that waits for its turn has not heard yet) */
        autoscale(r, t);
        return SB_OPERATOR_RUNNING;
    }
    if (st == SB_SCHED_SUCCEEDED) {
        /* the commit runs on a worker pod; the workers are shut down when it ended */
        size_t n = 0;
        sb_storage_output *parts = sb_ctl_sink_parts(r->ctl, &n);
        if (parts == NULL)
            return fail(r, "CommitFailed", "committing the sink: out of memory", 1, t, reason, rlen,
                        message, mlen);
        final_start(r, SB_STORAGE_COMMIT, parts, n, "CommitFailed", "", t);
        sb_ctl_parts_free(parts, n);
        if (r->final_kind == SB_STORAGE_NONE)
            return fail(r, "CommitFailed", "committing the sink: could not start the job", 1, t,
                        reason, rlen, message, mlen);
        return SB_OPERATOR_RUNNING;
    }
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(r->ctl, &s);
    return fail(r, s.storage_failed ? "PlanFailed" : "TaskFailed",
                s.failure[0] ? s.failure : "the pipeline failed", !s.storage_failed, t, reason,
                rlen, message, mlen);
}

void sb_operator_pipeline_metrics(sb_operator_pipeline *r, sb_cmetrics *cm, const char *ns,
                                  const char *name)
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

/* The WorkersFailing condition (podstate.h): the kubelet's reason of the first pool's failing
 * pod, and every pool's oldest failing pod described. 0, or -1 when out of memory. */
static int failing_condition(sb_operator_pipeline *r, cJSON *status, int64_t generation,
                             const char *now)
{
    char reason[64] = "", msg[1400] = "";
    size_t used = 0;
    for (size_t i = 0; i < r->npools; i++) {
        uint32_t failing = 0;
        char rs[64], first[700];
        sb_kube_pool_failing(r->kube, r->pools[i].spec.pool, NULL, &failing, rs, sizeof rs, first,
                             sizeof first);
        if (failing == 0 &&
            sb_kube_pool_churn(r->kube, r->pools[i].spec.pool, NULL, first, sizeof first)) {
            failing = 1; /* its pods keep ending at start */
            snprintf(rs, sizeof rs, "%s", SB_PODSTATE_CHURN_REASON);
        }
        if (failing == 0 || used >= sizeof msg)
            continue;
        if (reason[0] == '\0')
            snprintf(reason, sizeof reason, "%s", rs);
        int n = snprintf(msg + used, sizeof msg - used, "%s%s", used ? "; " : "", first);
        if (n > 0 && failing > 1 && (size_t)n < sizeof msg - used)
            n += snprintf(msg + used + n, sizeof msg - used - (size_t)n,
                          " (%u pods of pool %s failing)", failing, r->pools[i].spec.pool);
        if (n > 0)
            used += (size_t)n < sizeof msg - used ? (size_t)n : sizeof msg - used;
    }
    return sb_podstate_condition(status, reason, msg, generation, now) < 0 ? -1 : 0;
}

/* status.checkpoint: the log's summary once this run wrote it durably; until then the one
 * there stays (an earlier leader's: what a next leader must read). A succeeded run removed its
 * log: no checkpoint. */
static void run_ckpt_status(sb_operator_pipeline *r, cJSON *status)
{
    if (r->finished == SB_OPERATOR_SUCCEEDED) {
        cJSON_DeleteItemFromObjectCaseSensitive(status, "checkpoint");
        return;
    }
    cJSON *cp = r->ck_ok ? sb_opckpt_status_json(&r->ck) : NULL;
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(status, "checkpoint");
    if (cp == NULL && old != NULL && !sb_ckptlog_is_summary(old)) {
        /* the older inline format (read at start): the CRD now admits only the summary */
        cJSON_DeleteItemFromObjectCaseSensitive(status, "checkpoint");
        return;
    }
    if (cp == NULL)
        return;
    if (cJSON_GetObjectItemCaseSensitive(status, "checkpoint") != NULL)
        cJSON_ReplaceItemInObjectCaseSensitive(status, "checkpoint", cp);
    else
        cJSON_AddItemToObject(status, "checkpoint", cp);
}

/* status.stream of a stream:// sink: the address its consumers call (this leader's Control
 * service: a new leader serves at its own), the Secret with their token, its epochs and the
 * label that lets a consumer pod through the NetworkPolicies (netpol.h), and how far the
 * consumers are (epochs every rank ended, rows sent of the next: the progress cell counts
 * splits committed to a sink, none for a stream). 0, or -1. */
static int run_stream_status(sb_operator_pipeline *r, const sb_ctl_snapshot *s, cJSON *status)
{
    cJSON_DeleteItemFromObjectCaseSensitive(status, "stream");
    if (!r->stream)
        return 0;
    cJSON *st = cJSON_AddObjectToObject(status, "stream");
    if (st == NULL)
        return -1;
    uint32_t ep = sb_sink_stream_epochs(&r->p.spec.sink);
    char label[300];
    sb_netpol_consumer_label(r->p.metadata.name, label, sizeof label);
    int ok = cJSON_AddStringToObject(st, "address", r->address) != NULL &&
             cJSON_AddNumberToObject(st, "epochs", ep > 0 ? ep : 1) != NULL &&
             cJSON_AddStringToObject(st, "consumerLabel", label) != NULL &&
             cJSON_AddNumberToObject(st, "epochsEnded", s->stream_epochs_ended) != NULL &&
             cJSON_AddNumberToObject(st, "rowsSent", (double)s->stream_rows) != NULL;
    if (ok && r->auth_secret[0] != '\0')
        ok = cJSON_AddStringToObject(st, "tokenSecret", r->auth_secret) != NULL;
    if (ok && r->service[0] != '\0')
        ok = cJSON_AddStringToObject(st, "service", r->service) != NULL;
    return ok ? 0 : -1;
}

int sb_operator_pipeline_status(sb_operator_pipeline *r, cJSON *status, int64_t generation,
                                const char *now)
{
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(r->ctl, &s);
    sb_operator_pool_view views[MAX_POOLS];
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
    size_t finished = 0, nsplits = sb_ctl_nsplits(r->ctl);
    sb_err e2 = {0};
    if (sb_opckpt_finished(r->ctl, &finished, &e2) != 0) {
        sb_log(SB_LOG_WARN, "checkpoint failed", "pipeline", r->key, "error", e2.msg, NULL);
        return -1;
    }
    /* committed: what the checkpoint log holds (opckpt.h, "Counting"), all once the sink is; a
     * stream commits nothing to a sink (its checkpoint is empty): none while it serves, every
     * split once its consumers have ended every epoch */
    size_t committed =
        r->finished == SB_OPERATOR_SUCCEEDED
            ? (r->stream ? nsplits : finished)
            : sb_opckpt_committed(r->ck_ok ? &r->ck : NULL, r->committed_at_start, finished);
    double elapsed = (double)(sb_operator_mono_ms() - r->started_ms) / 1000.0;
    int rc = sb_operator_status_progress(status, &s, nsplits, committed, views, r->npools, elapsed);
    if (rc == 0)
        rc = sb_operator_status_mode(status, r->p.spec.execution.mode);
    size_t nerr = 0;
    sb_storage_errored *errs = sb_ctl_errored(r->ctl, &nerr, NULL);
    if (rc == 0)
        rc = sb_operator_status_errored(status, errs, nerr);
    sb_ctl_errored_free(errs, nerr);
    if (rc == 0)
        rc = plan_status(r, status);
    if (rc == 0)
        rc = run_stream_status(r, &s, status);
    if (rc != 0)
        return -1;
    run_ckpt_status(r, status);
    if (sb_operator_condition_set(status, "WorkersPending", pending_unschedulable,
                                  pending_unschedulable ? "Unschedulable" : "WorkersScheduled",
                                  pmsg, generation, now) < 0)
        return -1;
    return failing_condition(r, status, generation, now);
}

void sb_operator_pipeline_on_pod(sb_operator_pipeline *r, const cJSON *pod, int deleted)
{
    pthread_mutex_lock(&r->kube_mu);
    if (r->kube != NULL)
        sb_kube_on_pod(r->kube, pod, deleted);
    pthread_mutex_unlock(&r->kube_mu);
}

void sb_operator_pipeline_stop(sb_operator_pipeline *r, int delete_pods)
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
