/* The placement planner (lib/plan/plan.h): hand-computed plans, infeasible targets with their
 * reasons, budget ceilings, capacity, workers.min/max, baselines, and a brute force over every
 * worker vector of small random pipelines that the planner's choice must equal. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/price.h"

static sb_plan_shape_in cpu_shape(double rate, double cores)
{
    return (sb_plan_shape_in){.allowed = true, .rate = rate, .cpu_cores = cores};
}

static sb_plan_shape_in gpu_shape(double rate, double cores, double gpus)
{
    return (sb_plan_shape_in){.allowed = true, .rate = rate, .cpu_cores = cores, .gpus = gpus};
}

static const sb_plan_capacity UNLIMITED = {-1, -1, -1};

static int near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1);
}
#define NEAR(a, b) near((a), (double)(b))

static sb_plan_result solve(const sb_plan_input *in)
{
    sb_plan_result r;
    sb_err err = {0};
    cr_assert_eq(sb_plan_solve(in, &r, &err), 0, "%s", err.msg);
    return r;
}

/* Two cpu stages, 100 and 50 rows/s per worker, 1 core each at 1/core-hour, target 120:
 * the floor is 1/100 + 1/50 = 0.03 per (row/s)h; X = 200 (2 + 4 workers) reaches it first. */
Test(plan, two_cpu_stages_meet_target_at_the_floor)
{
    sb_plan_stage_in st[2] = {
        {.name = "a", .shapes = {cpu_shape(100, 1)}, .min_workers = 1, .max_workers = 16},
        {.name = "b", .shapes = {cpu_shape(50, 1)}, .min_workers = 1, .max_workers = 16},
    };
    sb_plan_input in = {.stages = st,
                        .nstages = 2,
                        .prices = {.cpu_core_hour = 1},
                        .capacity = UNLIMITED,
                        .target = {.rows_per_second = 120}};
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[0].workers, 2);
    cr_expect_eq(r.stages[1].workers, 4);
    cr_expect(NEAR(r.rows_per_second, 200));
    cr_expect(NEAR(r.cost_per_hour, 6));
    cr_expect(NEAR(r.cost_per_million_rows, 6.0 / (200 * 3600) * 1e6), "%g",
              r.cost_per_million_rows);
    cr_expect(NEAR(r.cpu_cores, 6));
    cr_expect(NEAR(r.stages[0].rows_per_second, 200));
    cr_expect(NEAR(r.stages[1].cost_per_hour, 4));
}

/* pre: cpu only, 1000 rows/s, 1 core. mlp: cpu 100 rows/s on 2 cores, or gpu 2000 rows/s on
 * 4 cores + 1 GPU. Cores cost 0.05/h. */
static sb_plan_stage_in mlp_stages[2];
static sb_plan_input mlp_input(double gpu_price, double target)
{
    mlp_stages[0] = (sb_plan_stage_in){
        .name = "pre", .shapes = {cpu_shape(1000, 1)}, .min_workers = 1, .max_workers = 16};
    mlp_stages[1] = (sb_plan_stage_in){.name = "mlp",
                                       .shapes = {cpu_shape(100, 2), gpu_shape(2000, 4, 1)},
                                       .min_workers = 0,
                                       .max_workers = 16};
    return (sb_plan_input){.stages = mlp_stages,
                           .nstages = 2,
                           .prices = {.cpu_core_hour = 0.05, .gpu_hour = gpu_price},
                           .capacity = UNLIMITED,
                           .target = {.rows_per_second = target}};
}

/* GPU at 2/h: the gpu worker costs 2.2/h for 2000 rows/s (1.1e-3 per row/s), the cpu ones
 * 0.1/h for 100 (1e-3): cpu wins, 10 mlp workers + 1 pre = 1.05/h for 1000 rows/s. */
Test(plan, expensive_gpu_keeps_mlp_on_cpu)
{
    sb_plan_input in = mlp_input(2.0, 1000);
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[0].shape, SB_SHAPE_CPU);
    cr_expect_eq(r.stages[0].workers, 1);
    cr_expect_eq(r.stages[1].shape, SB_SHAPE_CPU);
    cr_expect_eq(r.stages[1].workers, 10);
    cr_expect(NEAR(r.rows_per_second, 1000));
    cr_expect(NEAR(r.cost_per_hour, 1.05), "%g", r.cost_per_hour);
    cr_expect(NEAR(r.gpus, 0));
}

/* GPU at 1/h: 1.2/h for 2000 rows/s; with 2 pre workers 1.3/h for 2000 rows/s (6.5e-4 per
 * row/s) beats cpu's 1.05e-3; 4000 rows/s costs the same per row but more per hour. */
Test(plan, cheaper_gpu_moves_mlp_to_gpu)
{
    sb_plan_input in = mlp_input(1.0, 1000);
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[0].workers, 2);
    cr_expect_eq(r.stages[1].shape, SB_SHAPE_GPU);
    cr_expect_eq(r.stages[1].workers, 1);
    cr_expect(NEAR(r.rows_per_second, 2000));
    cr_expect(NEAR(r.cost_per_hour, 1.3), "%g", r.cost_per_hour);
    cr_expect(NEAR(r.cost_per_million_rows, 1.3 / (2000 * 3600.0) * 1e6));
    cr_expect(NEAR(r.gpus, 1));
    cr_expect(NEAR(r.cpu_cores, 6));
}

Test(plan, baselines)
{
    sb_plan_input in = mlp_input(1.0, 1000);
    sb_plan_result r;
    sb_err err = {0};
    cr_assert_eq(sb_plan_baseline_solve(&in, SB_BASE_ALL_CPU, &r, &err), 0, "%s", err.msg);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[1].shape, SB_SHAPE_CPU);
    cr_expect_eq(r.stages[1].workers, 10);
    cr_expect(NEAR(r.cost_per_hour, 1.05));
    cr_assert_eq(sb_plan_baseline_solve(&in, SB_BASE_ALL_GPU, &r, &err), 0, "%s", err.msg);
    cr_expect_not(r.feasible);
    cr_expect_str_eq(r.why, "stage pre does not allow shape gpu");
    cr_assert_eq(sb_plan_baseline_solve(&in, SB_BASE_GREEDY, &r, &err), 0, "%s", err.msg);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[0].shape, SB_SHAPE_CPU);
    cr_expect_eq(r.stages[1].shape, SB_SHAPE_GPU);
    cr_expect(NEAR(r.cost_per_hour, 1.3));
    /* greedy is not always optimal: with GPUs at 2/h it still takes the gpu (faster per worker) */
    in = mlp_input(2.0, 1000);
    cr_assert_eq(sb_plan_baseline_solve(&in, SB_BASE_GREEDY, &r, &err), 0, "%s", err.msg);
    cr_expect_eq(r.stages[1].shape, SB_SHAPE_GPU);
    cr_expect(NEAR(r.cost_per_hour, 2.3), "%g", r.cost_per_hour);
    sb_plan_result best = solve(&in);
    cr_expect(best.cost_per_million_rows < r.cost_per_million_rows);
}

Test(plan, target_beyond_workers_max_names_the_bottleneck)
{
    sb_plan_stage_in st[2] = {
        {.name = "parse", .shapes = {cpu_shape(1000, 1)}, .min_workers = 1, .max_workers = 16},
        {.name = "score", .shapes = {cpu_shape(100, 1)}, .min_workers = 1, .max_workers = 4},
    };
    sb_plan_input in = {.stages = st,
                        .nstages = 2,
                        .prices = {.cpu_core_hour = 1},
                        .capacity = UNLIMITED,
                        .target = {.rows_per_second = 1000}};
    sb_plan_result r = solve(&in);
    cr_expect_not(r.feasible);
    cr_expect_str_eq(r.why, "target 1000 rows/s cannot be met within workers.max: at most 400 "
                            "rows/s, stage score is the bottleneck (4 cpu workers x 100 rows/s "
                            "each)");
}

Test(plan, capacity_limits_the_plan)
{
    sb_plan_input in = mlp_input(1.0, 1000);
    in.capacity = (sb_plan_capacity){.cpu_cores = 32, .mem_gib = -1, .gpus = 0};
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[1].shape, SB_SHAPE_CPU, "no GPU in the capacity");
    cr_expect_eq(r.stages[1].workers, 10);
    cr_expect(NEAR(r.cpu_cores, 21));
    /* 16 cores: 1 pre + 7 mlp (15 cores) give 700 rows/s, 8 mlp would need 17 */
    in.capacity.cpu_cores = 16;
    r = solve(&in);
    cr_expect_not(r.feasible);
    cr_expect_str_eq(r.why, "target 1000 rows/s cannot be met within the capacity (16 CPU cores, "
                            "0 GPUs): at most 700 rows/s fit");
}

Test(plan, workers_min_beyond_capacity)
{
    sb_plan_stage_in st[1] = {
        {.name = "a", .shapes = {cpu_shape(10, 1)}, .min_workers = 10, .max_workers = 12}};
    sb_plan_input in = {.stages = st,
                        .nstages = 1,
                        .prices = {.cpu_core_hour = 1},
                        .capacity = {.cpu_cores = 8, .mem_gib = -1, .gpus = -1}};
    sb_plan_result r = solve(&in);
    cr_expect_not(r.feasible);
    cr_expect_str_eq(r.why, "no plan fits the capacity (8 CPU cores): the cheapest needs 10 CPU "
                            "cores, 0 GiB and 0 GPUs (workers.min of each stage, at least one "
                            "worker)");
}

/* The ceiling rules the gpu plan out (1.3/h, and 1.25/h at 1000 rows/s), so the cpu plan wins
 * although it costs more per row; a lower ceiling leaves nothing. */
Test(plan, budget_ceiling)
{
    sb_plan_input in = mlp_input(1.0, 1000);
    in.target.max_cost_per_hour = 1.2;
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[1].shape, SB_SHAPE_CPU);
    cr_expect(NEAR(r.cost_per_hour, 1.05));
    in.target.max_cost_per_hour = 1.0;
    r = solve(&in);
    cr_expect_not(r.feasible);
    cr_expect_str_eq(r.why, "target 1000 rows/s costs at least 1.05 per hour, above the budget "
                            "ceiling maxCostPerHour 1");
    /* without a target: the cheapest plan is 1 pre + 1 cpu mlp = 0.15/h */
    in.target.rows_per_second = 0;
    in.target.max_cost_per_hour = 0.1;
    r = solve(&in);
    cr_expect_not(r.feasible);
    cr_expect_str_eq(r.why, "the cheapest plan costs 0.15 per hour, above the budget ceiling "
                            "maxCostPerHour 0.1");
}

/* No target: lowest cost per row. a (100 rows/s, min 3, max 5) with b (1000 rows/s, min 0):
 * 3+1 workers give 300 rows/s for 4/h, 5+1 give 500 for 6/h: 5+1 is cheaper per row. */
Test(plan, min_workers_and_scale)
{
    sb_plan_stage_in st[2] = {
        {.name = "a", .shapes = {cpu_shape(100, 1)}, .min_workers = 3, .max_workers = 5},
        {.name = "b", .shapes = {cpu_shape(1000, 1)}, .min_workers = 0, .max_workers = 2},
    };
    sb_plan_input in = {
        .stages = st, .nstages = 2, .prices = {.cpu_core_hour = 1}, .capacity = UNLIMITED};
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_eq(r.stages[0].workers, 5);
    cr_expect_eq(r.stages[1].workers, 1);
    cr_expect(NEAR(r.rows_per_second, 500));
    cr_expect(NEAR(r.cost_per_million_rows, 6.0 / (500 * 3600) * 1e6));
    /* a minimum above what the throughput needs is kept: b at min 2 */
    st[1].min_workers = 2;
    r = solve(&in);
    cr_expect_eq(r.stages[1].workers, 2);
    cr_expect(NEAR(r.cost_per_hour, 7));
}

Test(plan, deadline_sets_the_target_and_memory_is_priced)
{
    sb_plan_stage_in st[1] = {
        {.name = "a",
         .shapes = {{.allowed = true, .rate = 100, .cpu_cores = 1, .mem_gib = 2}},
         .min_workers = 1,
         .max_workers = 5}};
    sb_plan_input in = {.stages = st,
                        .nstages = 1,
                        .prices = {.cpu_core_hour = 1, .mem_gib_hour = 0.5},
                        .capacity = UNLIMITED,
                        .target = {.deadline_seconds = 100, .total_rows = 40000}};
    cr_expect(NEAR(sb_plan_target_rate(&in), 400));
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    /* every count costs 2/h per 100 rows/s: the fewest that meet 400 rows/s */
    cr_expect_eq(r.stages[0].workers, 4);
    cr_expect(NEAR(r.cost_per_hour, 8));
    cr_expect(NEAR(r.mem_gib, 8));
    in.target.total_rows = 0;
    sb_err err = {0};
    cr_expect_eq(sb_plan_solve(&in, &r, &err), -1);
    cr_expect_str_eq(err.msg, "plan: a deadline needs the number of rows the pipeline writes "
                              "(total_rows), which is not known");
}

Test(plan, input_errors_name_the_stage)
{
    sb_plan_stage_in st[1] = {
        {.name = "mlp", .shapes = {cpu_shape(10, 1), {.allowed = true}}, .max_workers = 2}};
    sb_plan_input in = {.stages = st, .nstages = 1, .capacity = UNLIMITED};
    sb_plan_result r;
    sb_err err = {0};
    cr_expect_eq(sb_plan_solve(&in, &r, &err), -1);
    cr_expect_str_eq(err.msg, "plan: stage mlp: no rate for shape gpu (rows/s per worker)");
    st[0].shapes[1].rate = 5;
    st[0].min_workers = 3;
    cr_expect_eq(sb_plan_solve(&in, &r, &err), -1);
    cr_expect_str_eq(err.msg,
                     "plan: stage mlp: workers min 3 and max 2 (need 0 <= min <= max, max >= 1)");
    sb_plan_stage_in many[9];
    for (int i = 0; i < 9; i++)
        many[i] = (sb_plan_stage_in){
            .name = "s", .shapes = {cpu_shape(1, 1), gpu_shape(2, 1, 1)}, .max_workers = 1};
    in.stages = many;
    in.nstages = 9;
    cr_expect_eq(sb_plan_solve(&in, &r, &err), -1);
    cr_expect_str_eq(err.msg, "plan: 9 stages allow more than one shape; at most 8 may (the "
                              "search is over every placement)");
    in.nstages = 8;
    cr_expect_eq(sb_plan_solve(&in, &r, &err), 0, "%s", err.msg);
    cr_expect(r.feasible);
}

/* ---- brute force ---------------------------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct {
    int feasible;
    double cost_per_row, cost_per_hour;
} brute_best;

/* Every placement and every worker vector in the bounds. */
static brute_best brute(const sb_plan_input *in)
{
    brute_best b = {0, INFINITY, INFINITY};
    size_t n = in->nstages;
    double t = sb_plan_target_rate(in);
    int sh[8], w[8];
    for (uint32_t m = 0; m < (1u << n); m++) {
        int ok = 1;
        for (size_t i = 0; i < n; i++) {
            sh[i] = (int)((m >> i) & 1u);
            ok &= in->stages[i].shapes[sh[i]].allowed;
        }
        if (!ok)
            continue;
        for (size_t i = 0; i < n; i++)
            w[i] = in->stages[i].min_workers > 1 ? (int)in->stages[i].min_workers : 1;
        for (;;) {
            double thr = INFINITY, cost = 0, cpu = 0, mem = 0, gpu = 0;
            for (size_t i = 0; i < n; i++) {
                const sb_plan_shape_in *s = &in->stages[i].shapes[sh[i]];
                thr = fmin(thr, w[i] * s->rate);
                cost +=
                    w[i] * (s->cpu_cores * in->prices.cpu_core_hour +
                            s->mem_gib * in->prices.mem_gib_hour + s->gpus * in->prices.gpu_hour);
                cpu += w[i] * s->cpu_cores;
                mem += w[i] * s->mem_gib;
                gpu += w[i] * s->gpus;
            }
            const sb_plan_capacity *c = &in->capacity;
            int fit = (c->cpu_cores < 0 || cpu <= c->cpu_cores + 1e-9) &&
                      (c->mem_gib < 0 || mem <= c->mem_gib + 1e-9) &&
                      (c->gpus < 0 || gpu <= c->gpus + 1e-9) && thr >= t * (1 - 1e-9) &&
                      (in->target.max_cost_per_hour <= 0 ||
                       cost <= in->target.max_cost_per_hour * (1 + 1e-9));
            double cpr = cost / thr;
            if (fit && (cpr < b.cost_per_row * (1 - 1e-9) ||
                        (cpr <= b.cost_per_row * (1 + 1e-9) && cost < b.cost_per_hour))) {
                b.feasible = 1;
                b.cost_per_row = cpr;
                b.cost_per_hour = cost;
            }
            size_t i = 0;
            while (i < n && w[i] == in->stages[i].max_workers) {
                w[i] = in->stages[i].min_workers > 1 ? (int)in->stages[i].min_workers : 1;
                i++;
            }
            if (i == n)
                break;
            w[i]++;
        }
    }
    return b;
}

Test(plan, equals_brute_force_on_random_pipelines)
{
    sb_plan_stage_in st[4];
    int agree = 0, feasible = 0;
    for (int iter = 0; iter < 400; iter++) {
        size_t n = 1 + (size_t)(urand() * 4);
        for (size_t i = 0; i < n; i++) {
            int mode = (int)(urand() * 3); /* cpu only, gpu only, both */
            st[i] = (sb_plan_stage_in){.name = "s"};
            if (mode != 1)
                st[i].shapes[0] = cpu_shape(1 + floor(urand() * 200), 1 + floor(urand() * 4));
            if (mode != 0)
                st[i].shapes[1] = gpu_shape(50 + floor(urand() * 2000), 1 + floor(urand() * 8), 1);
            st[i].shapes[0].mem_gib = floor(urand() * 4);
            st[i].min_workers = (int64_t)(urand() * 3);
            st[i].max_workers = st[i].min_workers + 1 + (int64_t)(urand() * 4);
        }
        sb_plan_input in = {.stages = st,
                            .nstages = n,
                            .prices = {.cpu_core_hour = 0.01 + urand(),
                                       .mem_gib_hour = urand() * 0.1,
                                       .gpu_hour = urand() * 5},
                            .capacity = {urand() < 0.5 ? -1 : 4 + floor(urand() * 40), -1,
                                         urand() < 0.5 ? -1 : floor(urand() * 6)},
                            .target = {.rows_per_second = urand() < 0.3 ? 0 : urand() * 2000,
                                       .max_cost_per_hour = urand() < 0.7 ? 0 : urand() * 60}};
        brute_best b = brute(&in);
        sb_plan_result r = solve(&in);
        cr_assert_eq(r.feasible, b.feasible, "iteration %d: planner %s, brute force %s (%s)", iter,
                     r.feasible ? "feasible" : "infeasible", b.feasible ? "feasible" : "infeasible",
                     r.why);
        if (!b.feasible) {
            cr_assert(r.why[0] != '\0');
            continue;
        }
        feasible++;
        double got = r.cost_per_hour / r.rows_per_second;
        cr_assert(fabs(got - b.cost_per_row) <= 1e-9 * b.cost_per_row,
                  "iteration %d: planner %.12g per row/s, brute force %.12g", iter, got,
                  b.cost_per_row);
        cr_assert(fabs(r.cost_per_hour - b.cost_per_hour) <= 1e-9 * b.cost_per_hour + 1e-12,
                  "iteration %d: planner %.12g/h, brute force %.12g/h", iter, r.cost_per_hour,
                  b.cost_per_hour);
        agree++;
    }
    cr_expect_gt(feasible, 100, "the random pipelines must mostly be feasible (%d)", feasible);
    cr_expect_eq(agree, feasible);
}

/* 16 stages, 8 of them with a choice, up to 1000 workers each: the exact search stays fast. */
Test(plan, large_search_is_fast, .timeout = 20)
{
    sb_plan_stage_in st[16];
    for (int i = 0; i < 16; i++) {
        st[i] = (sb_plan_stage_in){.name = "s", .min_workers = 0, .max_workers = 1000};
        st[i].shapes[0] = cpu_shape(100 + 37 * i, 1 + i % 3);
        if (i % 2 == 0)
            st[i].shapes[1] = gpu_shape(3000 + 101 * i, 4, 1);
    }
    sb_plan_input in = {.stages = st,
                        .nstages = 16,
                        .prices = {.cpu_core_hour = 0.05, .gpu_hour = 1.5},
                        .capacity = UNLIMITED,
                        .target = {.rows_per_second = 5000}};
    sb_plan_result r = solve(&in);
    cr_assert(r.feasible, "%s", r.why);
    cr_expect_geq(r.rows_per_second, 5000);
}

/* Prices, field by field: the Pipeline's spec.execution.pricing, else the controller's (Helm
 * `pricing`), else the built-in table; the controller's per GPU type prices come before the
 * table's. */
Test(price, defaults_and_override_merge)
{
    sb_plan_prices pr;
    const char *type = NULL;
    sb_err err = {0};
    /* nothing set: the table */
    cr_assert_eq(sb_price_resolve_with(NULL, NULL, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.cpu_core_hour, sb_price_cpu_core_hour));
    cr_expect(NEAR(pr.mem_gib_hour, sb_price_memory_gib_hour));
    cr_expect(NEAR(pr.gpu_hour, 2.50));
    cr_expect_str_eq(type, "default");
    /* the controller's defaults: cpu price, a GPU type the table has, another only it has */
    sb_price_defaults d;
    memset(&d, 0, sizeof d);
    d.cpu_core_hour = 0.03;
    d.cpu_core_hour_set = true;
    d.gpu_type = "nvidia-l4";
    cr_assert_eq(sb_price_defaults_add_gpu(&d, "acme-x1=1.25", &err), 0, "%s", err.msg);
    cr_assert_eq(sb_price_resolve_with(&d, NULL, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.cpu_core_hour, 0.03), "controller's cpu price: %g", pr.cpu_core_hour);
    cr_expect(NEAR(pr.mem_gib_hour, sb_price_memory_gib_hour), "unset: the table's");
    cr_expect(NEAR(pr.gpu_hour, 0.80), "controller's GPU type priced by the table");
    cr_expect_str_eq(type, "nvidia-l4");
    /* the controller prices its own type; a later entry replaces an earlier one */
    cr_assert_eq(sb_price_defaults_add_gpu(&d, "nvidia-l4=0.7", &err), 0, "%s", err.msg);
    cr_assert_eq(sb_price_defaults_add_gpu(&d, "nvidia-l4=0.6", &err), 0, "%s", err.msg);
    cr_expect_eq(d.ngpus, 2);
    cr_assert_eq(sb_price_resolve_with(&d, NULL, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.gpu_hour, 0.6), "the controller's table before the built-in: %g",
              pr.gpu_hour);
    /* a Pipeline overrides field by field: memory only; then its own GPU type */
    sb_pricing_spec over = {.memory_gib_hour = 0.01, .memory_gib_hour_set = true};
    cr_assert_eq(sb_price_resolve_with(&d, &over, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.cpu_core_hour, 0.03), "cpu still the controller's");
    cr_expect(NEAR(pr.mem_gib_hour, 0.01), "memory the Pipeline's");
    cr_expect(NEAR(pr.gpu_hour, 0.6));
    over.gpu_type = "acme-x1";
    cr_assert_eq(sb_price_resolve_with(&d, &over, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.gpu_hour, 1.25), "the Pipeline's type priced by the controller");
    cr_expect_str_eq(type, "acme-x1");
    over.gpu_type = "nvidia-h100";
    cr_assert_eq(sb_price_resolve_with(&d, &over, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.gpu_hour, 4.0), "a type only the table has");
    over.gpu_hour = 3.3;
    over.gpu_hour_set = true;
    over.cpu_core_hour = 0.05;
    over.cpu_core_hour_set = true;
    cr_assert_eq(sb_price_resolve_with(&d, &over, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.gpu_hour, 3.3) && NEAR(pr.cpu_core_hour, 0.05), "the Pipeline's wins");
    /* a type nobody prices: an error naming both tables, unless gpuHour is given */
    sb_pricing_spec unknown = {.gpu_type = "acme-z9"};
    cr_expect_neq(sb_price_resolve_with(&d, &unknown, &pr, &type, &err), 0);
    cr_expect(strstr(err.msg, "\"acme-z9\"") && strstr(err.msg, "acme-x1") &&
                  strstr(err.msg, "nvidia-t4") && strstr(err.msg, "gpuHour"),
              "%s", err.msg);
    unknown.gpu_hour = 0.5;
    unknown.gpu_hour_set = true;
    cr_expect_eq(sb_price_resolve_with(&d, &unknown, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.gpu_hour, 0.5));
    /* sb_price_resolve is the same without the controller's prices */
    over = (sb_pricing_spec){.gpu_type = "nvidia-t4"};
    cr_assert_eq(sb_price_resolve(&over, &pr, &type, &err), 0, "%s", err.msg);
    cr_expect(NEAR(pr.gpu_hour, 0.35) && NEAR(pr.cpu_core_hour, sb_price_cpu_core_hour));
}

Test(price, gpu_price_flag_parse)
{
    sb_price_defaults d;
    memset(&d, 0, sizeof d);
    sb_err err = {0};
    const char *bad[] = {"nvidia-h100",    "=4", "nvidia-h100=", "nvidia-h100=-1", "nvidia-h100=4x",
                         "nvidia-h100=nan"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err.msg[0] = '\0';
        cr_expect_neq(sb_price_defaults_add_gpu(&d, bad[i], &err), 0, "%s accepted", bad[i]);
        cr_expect(strstr(err.msg, "TYPE=PRICE") || strstr(err.msg, ">= 0"), "%s: %s", bad[i],
                  err.msg);
    }
    cr_expect_eq(d.ngpus, 0);
    char buf[32];
    for (int i = 0; i < SB_PRICE_MAX_GPU_TYPES; i++) {
        snprintf(buf, sizeof buf, "t%d=%d", i, i);
        cr_assert_eq(sb_price_defaults_add_gpu(&d, buf, &err), 0, "%s", err.msg);
    }
    cr_expect_str_eq(d.gpus[3].type, "t3", "the type is copied, not borrowed from the text");
    cr_expect_neq(sb_price_defaults_add_gpu(&d, "one-more=1", &err), 0, "table full");
    cr_expect(strstr(err.msg, "at most"), "%s", err.msg);
}
