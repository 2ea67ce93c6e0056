/* plan.c — cost-aware placement (see plan.h): checking a plan input, and the search over each
 * stage's shape and worker count for the cheapest cost per row that meets the target (or the
 * most throughput within capacity), with the explanation of what bound it. Pure: no I/O. */

#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const sb_shape_names[] = {"cpu", "gpu", NULL};
const char *const sb_plan_baseline_names[] = {"all-cpu", "all-gpu", "greedy", NULL};

#define REL_EPS 1e-9

double sb_plan_target_rate(const sb_plan_input *in)
{
    double t = in->target.rows_per_second > 0 ? in->target.rows_per_second : 0;
    if (in->target.deadline_seconds > 0 && in->target.total_rows > 0) {
        double d = in->target.total_rows / in->target.deadline_seconds;
        if (d > t)
            t = d;
    }
    return t;
}

static int bad_number(double v)
{
    return !isfinite(v) || v < 0;
}

int sb_plan_check(const sb_plan_input *in, sb_err *err)
{
    if (in->nstages == 0 || in->stages == NULL)
        return sb_err_set(err, "plan: no stages");
    if (in->nstages > SB_PLAN_MAX_STAGES)
        return sb_err_set(err, "plan: %zu stages, at most %d", in->nstages, SB_PLAN_MAX_STAGES);
    if (bad_number(in->prices.cpu_core_hour) || bad_number(in->prices.mem_gib_hour) ||
        bad_number(in->prices.gpu_hour))
        return sb_err_set(err, "plan: prices must be finite and not negative");
    const sb_plan_target *t = &in->target;
    if (bad_number(t->rows_per_second) || bad_number(t->deadline_seconds) ||
        bad_number(t->total_rows) || bad_number(t->max_cost_per_hour))
        return sb_err_set(err, "plan: the target must be finite and not negative");
    if (t->deadline_seconds > 0 && t->total_rows <= 0)
        return sb_err_set(err, "plan: a deadline needs the number of rows the pipeline writes "
                               "(total_rows), which is not known");
    size_t choices = 0;
    for (size_t i = 0; i < in->nstages; i++) {
        const sb_plan_stage_in *s = &in->stages[i];
        const char *name = s->name != NULL ? s->name : "?";
        if (s->min_workers < 0 || s->max_workers < 1 || s->min_workers > s->max_workers)
            return sb_err_set(err,
                              "plan: stage %s: workers min %lld and max %lld (need 0 <= min <= "
                              "max, max >= 1)",
                              name, (long long)s->min_workers, (long long)s->max_workers);
        size_t allowed = 0;
        for (int k = 0; k < SB_SHAPE_COUNT; k++) {
            const sb_plan_shape_in *sh = &s->shapes[k];
            if (!sh->allowed)
                continue;
            allowed++;
            if (!isfinite(sh->rate) || sh->rate <= 0)
                return sb_err_set(err, "plan: stage %s: no rate for shape %s (rows/s per worker)",
                                  name, sb_shape_names[k]);
            if (bad_number(sh->cpu_cores) || bad_number(sh->mem_gib) || bad_number(sh->gpus))
                return sb_err_set(err,
                                  "plan: stage %s: resources of shape %s must be finite "
                                  "and not negative",
                                  name, sb_shape_names[k]);
        }
        if (allowed == 0)
            return sb_err_set(err, "plan: stage %s allows no shape", name);
        choices += allowed > 1;
    }
    if (choices > SB_PLAN_MAX_CHOICES)
        return sb_err_set(err,
                          "plan: %zu stages allow more than one shape; at most %d may (the search "
                          "is over every placement)",
                          choices, SB_PLAN_MAX_CHOICES);
    return 0;
}

/* ---- search -------------------------------------------------------------------------------- */

typedef struct {
    double target;
    sb_plan_result best;
    int have_best;
    /* for the reason when nothing fits */
    double x_bounds; /* highest throughput with every stage at workers.max */
    size_t xb_stage; /* its bottleneck */
    sb_shape xb_shape;
    int64_t xb_workers;
    double xb_rate;
    int any_cap;          /* a candidate fitted the capacity */
    double x_cap;         /* highest throughput within the capacity */
    double min_cost_meet; /* lowest cost/h of a candidate meeting the target within capacity */
    int any_meet;
    double min_res[3]; /* resources of the cheapest candidate (cpu, mem, gpu) */
    double min_cost;
    int any_candidate;
} search;

static int64_t lo_of(const sb_plan_stage_in *s)
{
    return s->min_workers > 1 ? s->min_workers : 1;
}

static int64_t hi_of(const sb_plan_stage_in *s)
{
    return s->max_workers < SB_PLAN_MAX_WORKERS ? s->max_workers : SB_PLAN_MAX_WORKERS;
}

static double worker_cost(const sb_plan_prices *p, const sb_plan_shape_in *sh)
{
    return sh->cpu_cores * p->cpu_core_hour + sh->mem_gib * p->mem_gib_hour +
           sh->gpus * p->gpu_hour;
}

static int fits(double used, double cap)
{
    return cap < 0 || used <= cap * (1 + REL_EPS) + 1e-12;
}

/* Is a better than b? cost per row, then cost per hour, then GPUs; equal: no. */
static int better(const sb_plan_result *a, const sb_plan_result *b)
{
    double ca = a->cost_per_million_rows, cb = b->cost_per_million_rows;
    double tol = REL_EPS * (fabs(ca) > fabs(cb) ? fabs(ca) : fabs(cb)) + 1e-15;
    if (ca < cb - tol)
        return 1;
    if (ca > cb + tol)
        return 0;
    tol = REL_EPS * (a->cost_per_hour > b->cost_per_hour ? a->cost_per_hour : b->cost_per_hour) +
          1e-15;
    if (a->cost_per_hour < b->cost_per_hour - tol)
        return 1;
    if (a->cost_per_hour > b->cost_per_hour + tol)
        return 0;
    return a->gpus < b->gpus - 1e-9;
}

/* One candidate: stage b at w workers sets the throughput; the others get the fewest workers that
 * sustain it. */
static void eval_candidate(const sb_plan_input *in, const sb_shape *sh, size_t b, int64_t w,
                           search *s)
{
    const sb_plan_stage_in *st = in->stages;
    double x = (double)w * st[b].shapes[sh[b]].rate;
    sb_plan_result r;
    memset(&r, 0, sizeof r);
    r.nstages = in->nstages;
    double thr = INFINITY;
    for (size_t i = 0; i < in->nstages; i++) {
        const sb_plan_shape_in *sp = &st[i].shapes[sh[i]];
        int64_t wi = w;
        if (i != b) {
            double need = ceil(x / sp->rate * (1 - REL_EPS));
            wi = need > (double)lo_of(&st[i]) ? (int64_t)need : lo_of(&st[i]);
            if (wi > hi_of(&st[i]))
                return; /* another stage caps below x: that stage's breakpoints cover it */
        }
        r.stages[i].shape = sh[i];
        r.stages[i].workers = wi;
        r.stages[i].rows_per_second = (double)wi * sp->rate;
        r.stages[i].cost_per_hour = (double)wi * worker_cost(&in->prices, sp);
        if (r.stages[i].rows_per_second < thr)
            thr = r.stages[i].rows_per_second;
        r.cost_per_hour += r.stages[i].cost_per_hour;
        r.cpu_cores += (double)wi * sp->cpu_cores;
        r.mem_gib += (double)wi * sp->mem_gib;
        r.gpus += (double)wi * sp->gpus;
    }
    r.rows_per_second = thr;
    r.cost_per_million_rows = r.cost_per_hour / (thr * 3600.0) * 1e6;
    r.feasible = true;
    if (!s->any_candidate || r.cost_per_hour < s->min_cost) {
        s->min_cost = r.cost_per_hour;
        s->min_res[0] = r.cpu_cores;
        s->min_res[1] = r.mem_gib;
        s->min_res[2] = r.gpus;
    }
    s->any_candidate = 1;
    const sb_plan_capacity *c = &in->capacity;
    if (!fits(r.cpu_cores, c->cpu_cores) || !fits(r.mem_gib, c->mem_gib) || !fits(r.gpus, c->gpus))
        return;
    if (!s->any_cap || thr > s->x_cap)
        s->x_cap = thr;
    s->any_cap = 1;
    if (thr < s->target * (1 - REL_EPS))
        return;
    if (!s->any_meet || r.cost_per_hour < s->min_cost_meet)
        s->min_cost_meet = r.cost_per_hour;
    s->any_meet = 1;
    double ceiling = in->target.max_cost_per_hour;
    if (ceiling > 0 && r.cost_per_hour > ceiling * (1 + REL_EPS))
        return;
    if (!s->have_best || better(&r, &s->best)) {
        s->best = r;
        s->have_best = 1;
    }
}

static void eval_placement(const sb_plan_input *in, const sb_shape *sh, search *s)
{
    const sb_plan_stage_in *st = in->stages;
    double xhi = INFINITY;
    size_t bott = 0;
    for (size_t i = 0; i < in->nstages; i++) {
        double x = (double)hi_of(&st[i]) * st[i].shapes[sh[i]].rate;
        if (x < xhi) {
            xhi = x;
            bott = i;
        }
    }
    if (xhi > s->x_bounds) {
        s->x_bounds = xhi;
        s->xb_stage = bott;
        s->xb_shape = sh[bott];
        s->xb_workers = hi_of(&st[bott]);
        s->xb_rate = st[bott].shapes[sh[bott]].rate;
    }
    for (size_t b = 0; b < in->nstages; b++) {
        double rate = st[b].shapes[sh[b]].rate;
        /* from the lowest count, not from the target: the reasons need the throughput that
         * fits the capacity */
        for (int64_t w = lo_of(&st[b]); w <= hi_of(&st[b]); w++) {
            if ((double)w * rate > xhi * (1 + REL_EPS))
                break;
            eval_candidate(in, sh, b, w, s);
        }
    }
}

static const char *cap_text(const sb_plan_capacity *c, char *buf, size_t len)
{
    size_t o = 0;
    const double v[3] = {c->cpu_cores, c->mem_gib, c->gpus};
    const char *u[3] = {"CPU cores", "GiB", "GPUs"};
    for (int k = 0; k < 3; k++)
        if (v[k] >= 0 && o < len)
            o += (size_t)snprintf(buf + o, len - o, "%s%g %s", o ? ", " : "", v[k], u[k]);
    if (o == 0)
        snprintf(buf, len, "unlimited");
    return buf;
}

static void explain(const sb_plan_input *in, const search *s, sb_plan_result *out)
{
    char cap[128];
    double t = s->target;
    const char *name = in->stages[s->xb_stage].name ? in->stages[s->xb_stage].name : "?";
    if (t > 0 && s->x_bounds < t * (1 - REL_EPS)) {
        snprintf(out->why, sizeof out->why,
                 "target %.6g rows/s cannot be met within workers.max: at most %.6g rows/s, "
                 "stage %s is the bottleneck (%lld %s workers x %.6g rows/s each)",
                 t, s->x_bounds, name, (long long)s->xb_workers, sb_shape_names[s->xb_shape],
                 s->xb_rate);
    } else if (!s->any_cap) {
        snprintf(out->why, sizeof out->why,
                 "no plan fits the capacity (%s): the cheapest needs %g CPU cores, %g GiB and %g "
                 "GPUs (workers.min of each stage, at least one worker)",
                 cap_text(&in->capacity, cap, sizeof cap), s->min_res[0], s->min_res[1],
                 s->min_res[2]);
    } else if (t > 0 && !s->any_meet) {
        snprintf(out->why, sizeof out->why,
                 "target %.6g rows/s cannot be met within the capacity (%s): at most %.6g rows/s "
                 "fit",
                 t, cap_text(&in->capacity, cap, sizeof cap), s->x_cap);
    } else if (t > 0) {
        snprintf(out->why, sizeof out->why,
                 "target %.6g rows/s costs at least %.6g per hour, above the budget ceiling "
                 "maxCostPerHour %.6g",
                 t, s->min_cost_meet, in->target.max_cost_per_hour);
    } else {
        snprintf(out->why, sizeof out->why,
                 "the cheapest plan costs %.6g per hour, above the budget ceiling maxCostPerHour "
                 "%.6g",
                 s->min_cost_meet, in->target.max_cost_per_hour);
    }
}

static void search_init(const sb_plan_input *in, search *s)
{
    memset(s, 0, sizeof *s);
    s->target = sb_plan_target_rate(in);
    s->x_bounds = -1;
}

static void search_finish(const sb_plan_input *in, search *s, sb_plan_result *out)
{
    if (s->have_best) {
        *out = s->best;
        return;
    }
    memset(out, 0, sizeof *out);
    out->nstages = in->nstages;
    explain(in, s, out);
}

int sb_plan_fixed(const sb_plan_input *in, const sb_shape *shapes, sb_plan_result *out, sb_err *err)
{
    if (sb_plan_check(in, err) != 0)
        return -1;
    for (size_t i = 0; i < in->nstages; i++) {
        if ((int)shapes[i] < 0 || (int)shapes[i] >= SB_SHAPE_COUNT ||
            !in->stages[i].shapes[shapes[i]].allowed) {
            memset(out, 0, sizeof *out);
            out->nstages = in->nstages;
            snprintf(out->why, sizeof out->why, "stage %s does not allow shape %s",
                     in->stages[i].name ? in->stages[i].name : "?",
                     (int)shapes[i] >= 0 && (int)shapes[i] < SB_SHAPE_COUNT
                         ? sb_shape_names[shapes[i]]
                         : "?");
            return 0;
        }
    }
    search s;
    search_init(in, &s);
    eval_placement(in, shapes, &s);
    search_finish(in, &s, out);
    return 0;
}

int sb_plan_solve(const sb_plan_input *in, sb_plan_result *out, sb_err *err)
{
    if (sb_plan_check(in, err) != 0)
        return -1;
    size_t idx[SB_PLAN_MAX_CHOICES], nidx = 0;
    sb_shape sh[SB_PLAN_MAX_STAGES];
    for (size_t i = 0; i < in->nstages; i++) {
        const sb_plan_stage_in *st = &in->stages[i];
        sh[i] = st->shapes[SB_SHAPE_CPU].allowed ? SB_SHAPE_CPU : SB_SHAPE_GPU;
        if (st->shapes[SB_SHAPE_CPU].allowed && st->shapes[SB_SHAPE_GPU].allowed)
            idx[nidx++] = i;
    }
    search s;
    search_init(in, &s);
    /* placement m: bit j (from the first stage with a choice) set = that stage on gpu; counting
     * in this order visits placements with cpu before gpu, stage by stage */
    for (uint32_t m = 0; m < (1u << nidx); m++) {
        for (size_t j = 0; j < nidx; j++)
            sh[idx[j]] = (m >> (nidx - 1 - j)) & 1u ? SB_SHAPE_GPU : SB_SHAPE_CPU;
        /* no throughput makes a placement cheaper per row than the sum of its stages' cost per
         * (row/s) of one worker: skip those that cannot beat the best so far */
        double floor_cost = 0;
        for (size_t i = 0; i < in->nstages; i++)
            floor_cost += worker_cost(&in->prices, &in->stages[i].shapes[sh[i]]) /
                          in->stages[i].shapes[sh[i]].rate;
        if (s.have_best &&
            floor_cost > s.best.cost_per_hour / s.best.rows_per_second * (1 + REL_EPS))
            continue;
        eval_placement(in, sh, &s);
    }
    search_finish(in, &s, out);
    return 0;
}

int sb_plan_baseline_solve(const sb_plan_input *in, sb_plan_baseline b, sb_plan_result *out,
                           sb_err *err)
{
    if (sb_plan_check(in, err) != 0)
        return -1;
    sb_shape sh[SB_PLAN_MAX_STAGES];
    for (size_t i = 0; i < in->nstages; i++) {
        const sb_plan_stage_in *st = &in->stages[i];
        switch (b) {
        case SB_BASE_ALL_CPU:
            sh[i] = SB_SHAPE_CPU;
            break;
        case SB_BASE_ALL_GPU:
            sh[i] = SB_SHAPE_GPU;
            break;
        default: {
            const sb_plan_shape_in *c = &st->shapes[SB_SHAPE_CPU], *g = &st->shapes[SB_SHAPE_GPU];
            sh[i] = !c->allowed || (g->allowed && g->rate > c->rate) ? SB_SHAPE_GPU : SB_SHAPE_CPU;
        }
        }
    }
    return sb_plan_fixed(in, sh, out, err);
}
