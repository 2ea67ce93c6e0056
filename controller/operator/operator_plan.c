/* operator_plan.c — the pure parts of planning a running Pipeline (see operator_plan.h): whether
 * it is planned, measured rates per stage, drift against the plan, status.plan and the event
 * message, and the spec re-ordered for a new placement. No I/O, no clock, no state. */

#include "controller/operator/operator_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "controller/operator/operator_status.h"
#include "plan/fromspec.h"

int sb_operator_plan_wanted(const sb_pipeline *p)
{
    const sb_target_spec *t = &p->spec.execution.target;
    if (t->rows_per_second_set || t->deadline_set)
        return 1;
    for (size_t i = 0; i < p->spec.nstages; i++)
        if (p->spec.stages[i].nplacement > 1)
            return 1;
    return 0;
}

/* Index of the stage named by the `len` bytes at name, or -1. */
int sb_operator_plan_measure(const sb_pipeline *p, const uint32_t *slots,
                             const sb_operator_plan_op *base, const sb_operator_plan_op *cur,
                             size_t nops, uint64_t min_tasks, double *rates)
{
    if (nops == 0 || nops > SB_PLAN_MAX_STAGES || p->spec.nstages > SB_PLAN_MAX_STAGES)
        return 0;
    double in[SB_PLAN_MAX_STAGES], out[SB_PLAN_MAX_STAGES], secs[SB_PLAN_MAX_STAGES];
    for (size_t j = 0; j < nops; j++) {
        const sb_operator_plan_op *b = base != NULL ? &base[j] : NULL;
        if (b != NULL && (cur[j].tasks < b->tasks || cur[j].rows_in < b->rows_in ||
                          cur[j].rows_out < b->rows_out || cur[j].task_seconds < b->task_seconds))
            return 0; /* figures that went back (another run's): no window */
        uint64_t tasks = cur[j].tasks - (b ? b->tasks : 0);
        in[j] = (double)(cur[j].rows_in - (b ? b->rows_in : 0));
        out[j] = (double)(cur[j].rows_out - (b ? b->rows_out : 0));
        secs[j] = cur[j].task_seconds - (b ? b->task_seconds : 0);
        if (tasks < min_tasks || tasks == 0 || in[j] <= 0)
            return 0;
        if (secs[j] < 1e-6) /* tasks too quick to time (as `streambatch plan --profile`) */
            secs[j] = 1e-6;
    }
    if (out[nops - 1] <= 0)
        return 0;
    double r[SB_PLAN_MAX_STAGES];
    for (size_t i = 0; i < p->spec.nstages; i++)
        r[i] = 0;
    double mult = 1; /* rows out of the pipeline per row into op j */
    for (size_t j = nops; j-- > 0;) {
        mult *= out[j] / in[j];
        double op_rate = in[j] / secs[j] * mult; /* output rows per task-second of op j */
        size_t k = 1;
        for (const char *c = cur[j].name; *c; c++)
            k += *c == '+';
        for (const char *s = cur[j].name; s != NULL && *s;) {
            const char *plus = strchr(s, '+');
            size_t len = plus ? (size_t)(plus - s) : strlen(s);
            /* an all-to-all stage's map half ("<stage>.map", and a sort's middle op
             * "<stage>.range"): its task time adds to that of the stage's reduce half (an op
             * after it, so measured first) */
            int map;
            long i = sb_plan_op_stage(p, s, len, &map);
            if (i >= 0) { /* fused stages share the op's task time evenly */
                double v = op_rate * (double)k * (double)(slots != NULL && slots[i] ? slots[i] : 1);
                r[i] = map && r[i] > 0 ? 1 / (1 / r[i] + 1 / v) : v;
            }
            s = plus ? plus + 1 : NULL;
        }
    }
    for (size_t i = 0; i < p->spec.nstages; i++)
        if (!(r[i] > 0) || !isfinite(r[i]))
            return 0; /* a stage no op names: not measurable */
    for (size_t i = 0; i < p->spec.nstages; i++)
        rates[i] = r[i];
    return 1;
}

int sb_operator_plan_drifted(const double *planned, const double *measured, size_t n,
                             double threshold, uint64_t now_ms, uint64_t planned_ms,
                             uint64_t interval_ms, size_t *stage, double *drift)
{
    double worst = 0;
    size_t ws = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(planned[i] > 0) || !(measured[i] > 0))
            continue;
        double d = measured[i] / planned[i] - 1;
        if (fabs(d) > fabs(worst)) {
            worst = d;
            ws = i;
        }
    }
    if (stage != NULL)
        *stage = ws;
    if (drift != NULL)
        *drift = worst;
    if (now_ms < planned_ms || now_ms - planned_ms < interval_ms)
        return 0;
    return fabs(worst) > threshold;
}

cJSON *sb_operator_plan_status_json(const sb_operator_plan_view *v)
{
    const sb_plan_input *in = v->in;
    const sb_plan_result *r = v->out;
    cJSON *j = cJSON_CreateObject();
    if (j == NULL)
        return NULL;
    int ok = 1;
    ok &= cJSON_AddStringToObject(j, "plannedAt", v->planned_at ? v->planned_at : "") != NULL;
    ok &= cJSON_AddStringToObject(j, "rates", v->rates_from ? v->rates_from : "") != NULL;
    ok &= cJSON_AddNumberToObject(j, "replans", v->replans) != NULL;
    ok &= cJSON_AddNumberToObject(j, "moves", v->moves) != NULL;
    if (v->cause != NULL && v->cause[0] != '\0')
        ok &= cJSON_AddStringToObject(j, "cause", v->cause) != NULL;
    const sb_plan_capacity none = {-1, -1, -1}, *c = v->capacity ? v->capacity : &none;
    const double cap[3] = {c->cpu_cores, c->mem_gib, c->gpus};
    const char *cap_key[3] = {"cpuCores", "memoryGiB", "gpus"};
    cJSON *cj = NULL;
    for (int d = 0; d < 3; d++)
        if (cap[d] >= 0) {
            if (cj == NULL)
                ok &= (cj = cJSON_AddObjectToObject(j, "capacity")) != NULL;
            ok &= cj != NULL && cJSON_AddNumberToObject(cj, cap_key[d], cap[d]) != NULL;
        }
    if (v->moved != NULL && v->moved[0] != '\0')
        ok &= cJSON_AddStringToObject(j, "moved", v->moved) != NULL;
    ok &= cJSON_AddBoolToObject(j, "feasible", r->feasible) != NULL;
    if (!r->feasible)
        ok &= cJSON_AddStringToObject(j, "why", r->why) != NULL;
    cJSON *st = cJSON_AddArrayToObject(j, "stages");
    ok &= st != NULL;
    for (size_t i = 0; ok && r->feasible && i < r->nstages && i < in->nstages; i++) {
        const sb_plan_stage_out *o = &r->stages[i];
        cJSON *e = cJSON_CreateObject();
        if (e == NULL || !cJSON_AddItemToArray(st, e)) {
            cJSON_Delete(e);
            ok = 0;
            break;
        }
        ok &= cJSON_AddStringToObject(e, "name", in->stages[i].name) != NULL;
        ok &= cJSON_AddStringToObject(e, "shape", sb_shape_names[o->shape]) != NULL;
        ok &= cJSON_AddNumberToObject(e, "workers", (double)o->workers) != NULL;
        ok &= cJSON_AddNumberToObject(e, "rowsPerSecondPerWorker",
                                      in->stages[i].shapes[o->shape].rate) != NULL;
        ok &= cJSON_AddNumberToObject(e, "rowsPerSecond", o->rows_per_second) != NULL;
        ok &= cJSON_AddNumberToObject(e, "costPerHour", o->cost_per_hour) != NULL;
    }
    if (r->feasible) {
        ok &= cJSON_AddNumberToObject(j, "rowsPerSecond", r->rows_per_second) != NULL;
        ok &= cJSON_AddNumberToObject(j, "costPerHour", r->cost_per_hour) != NULL;
        ok &= cJSON_AddNumberToObject(j, "costPerMillionRows", r->cost_per_million_rows) != NULL;
    }
    cJSON *t = cJSON_AddObjectToObject(j, "target");
    ok &= t != NULL && cJSON_AddNumberToObject(t, "rowsPerSecond", sb_plan_target_rate(in)) != NULL;
    if (ok && in->target.max_cost_per_hour > 0)
        ok &= cJSON_AddNumberToObject(t, "maxCostPerHour", in->target.max_cost_per_hour) != NULL;
    cJSON *pr = cJSON_AddObjectToObject(j, "prices");
    ok &= pr != NULL &&
          cJSON_AddNumberToObject(pr, "cpuCoreHour", in->prices.cpu_core_hour) != NULL &&
          cJSON_AddNumberToObject(pr, "memoryGiBHour", in->prices.mem_gib_hour) != NULL &&
          cJSON_AddNumberToObject(pr, "gpuHour", in->prices.gpu_hour) != NULL &&
          cJSON_AddStringToObject(pr, "gpuType", v->gpu_type ? v->gpu_type : "default") != NULL;
    ok &= cJSON_AddBoolToObject(j, "poolsSized", v->pools_sized != 0) != NULL;
    if (v->note != NULL && v->note[0] != '\0')
        ok &= cJSON_AddStringToObject(j, "note", v->note) != NULL;
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* The object with spec.stages[i].placement listing shapes[i] first for every stage with a
 * choice (a new tree), or NULL when that is the order already or out of memory. */
cJSON *sb_operator_plan_reorder(const cJSON *object, const sb_pipeline *p,
                                const sb_plan_result *out)
{
    int change = 0;
    for (size_t i = 0; i < p->spec.nstages; i++)
        change |= p->spec.stages[i].nplacement > 1 &&
                  out->stages[i].shape != (strcmp(sb_stage_pool(&p->spec.stages[i]), "gpu") == 0
                                               ? SB_SHAPE_GPU
                                               : SB_SHAPE_CPU);
    if (!change)
        return NULL;
    cJSON *o = cJSON_Duplicate(object, 1);
    cJSON *stages =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "spec"), "stages");
    for (size_t i = 0; o != NULL && i < p->spec.nstages; i++) {
        if (p->spec.stages[i].nplacement < 2)
            continue;
        cJSON *st = cJSON_GetArrayItem(stages, (int)i);
        cJSON *pl = cJSON_CreateArray();
        int k = (int)out->stages[i].shape;
        cJSON_AddItemToArray(pl, cJSON_CreateString(sb_shape_names[k]));
        cJSON_AddItemToArray(pl, cJSON_CreateString(sb_shape_names[1 - k]));
        cJSON_DeleteItemFromObjectCaseSensitive(st, "placement");
        cJSON_AddItemToObject(st, "placement", pl);
    }
    return o;
}

static const char *money(double v, char *buf, size_t len)
{
    snprintf(buf, len, v >= 100 ? "%.1f" : v >= 1 ? "%.3f" : "%.4g", v);
    return buf;
}

void sb_operator_plan_event_message(const sb_operator_plan_view *v, const char *drift_stage,
                                    double drift, char *buf, size_t len)
{
    const sb_plan_result *r = v->out;
    if (len == 0)
        return;
    buf[0] = '\0';
    size_t o = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (o < len) {                                                                             \
            int n_ = snprintf(buf + o, len - o, __VA_ARGS__);                                      \
            o = n_ < 0 ? len : o + (size_t)n_;                                                     \
        }                                                                                          \
    } while (0)
    if (drift_stage != NULL)
        PUT("stage %s runs at %+.0f%% of its planned rate; ", drift_stage, drift * 100);
    else if (v->cause != NULL && v->cause[0] != '\0')
        PUT("%s; ", v->cause);
    if (!r->feasible) {
        PUT("no plan: %s", r->why);
        return;
    }
    for (size_t i = 0; i < r->nstages; i++)
        PUT("%s%s=%s:%lld", i ? " " : "", v->in->stages[i].name, sb_shape_names[r->stages[i].shape],
            (long long)r->stages[i].workers);
    char rate[32], a[32], b[32];
    sb_operator_rate_format(r->rows_per_second, rate, sizeof rate);
    PUT("; %s for %s per hour (%s per million rows), rates %s", rate,
        money(r->cost_per_hour, a, sizeof a), money(r->cost_per_million_rows, b, sizeof b),
        v->rates_from ? v->rates_from : "");
    if (v->moved != NULL && v->moved[0] != '\0')
        PUT("; moved %s while running", v->moved);
    if (v->note != NULL && v->note[0] != '\0')
        PUT("; %s", v->note);
#undef PUT
}
