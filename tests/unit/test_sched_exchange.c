/* The scheduler's exchange (controller/sched/exchange.h, issue 41): an all-to-all stage planned
 * as a map op that ends its op group and a reduce op that starts the next; the reduce tasks
 * formed only after the map op finished (a barrier), task b reading bucket b (the map outputs
 * p<b>) of every map task in map task order; a worker lost in the reduce phase re-runs the map
 * tasks whose outputs it held (lineage), and the reduce tasks then read the re-made buckets; a
 * sort planned as three ops, its sink listed in range order. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/exchange.h"
#include "controller/sched/sched.h"
#include "spec_fixture.h"

static const char *yaml = "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
                          "metadata: {name: x}\nspec:\n"
                          "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
                          "  stages:\n  - {name: a, op: identity}\n"
                          "  - {name: g, op: groupby, args: {keys: [k], partitions: 3}}\n"
                          "  - {name: b, op: identity}\n"
                          "  sink: {uri: 'file:///out/', format: jsonl}\n"
                          "  execution: {memoryBudget: 1Ti}\n";

#define NSPLITS 4
#define NB 3

static spec_holder h;
static char names[NSPLITS][64];
static int g_no_fuse_choices; /* sb_sched_config.no_fuse_choices (the operator, when it plans) */
static int g_no_early_reduce; /* sb_sched_config.no_early_reduce */

static sb_sched *make_from(const char *y)
{
    spec_fixture_load(&h, y);
    sb_storage_split sp[NSPLITS];
    for (size_t i = 0; i < NSPLITS; i++) {
        snprintf(names[i], sizeof names[i], "0\t1024\t1024\t/in/f%zu.jsonl", i);
        sp[i].split = names[i];
        sp[i].bytes = 1024;
    }
    sb_sched_config cfg = {.pipeline = &h.p,
                           .pipeline_id = "ns/x",
                           .no_fuse_choices = g_no_fuse_choices,
                           .no_early_reduce = g_no_early_reduce};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, sp, NSPLITS, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_sched_worker_add(s, "w1", "cpu", "127.0.0.1:1", 8, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "w2", "cpu", "127.0.0.1:2", 8, NULL, 0, 0, NULL), 0);
    return s;
}

static sb_sched *make(void)
{
    return make_from(yaml);
}

static void drop_releases(sb_sched *s, const char *w)
{
    char **rel;
    size_t n = sb_sched_take_releases(s, w, &rel);
    for (size_t i = 0; i < n; i++)
        free(rel[i]);
    free(rel);
}

static uint64_t out_bytes = 100; /* a completed task's first output's bytes */

/* Completes task t on worker w: a task that writes the sink makes one output, others NB (their
 * buckets). */
static void complete(sb_sched *s, const char *w, const sb_sched_task *t, uint64_t now)
{
    char ids[NB][64];
    sb_storage_output o[NB];
    size_t n = t->writes_sink ? 1 : NB;
    for (size_t b = 0; b < n; b++) {
        snprintf(ids[b], sizeof ids[b], "s%" PRIu32 "-t%" PRIu64 "-p%zu", t->op, t->index, b);
        o[b] = (sb_storage_output){.id = ids[b], .bytes = out_bytes + b, .rows = 1 + b};
    }
    char id[128];
    snprintf(id, sizeof id, "%s", t->task_id);
    sb_err err;
    cr_assert_eq(
        sb_sched_complete(s, w, id, t->attempt, SB_SCHED_OK, NULL, o, n, NULL, 0, NULL, now, &err),
        1, "%s", err.msg);
    drop_releases(s, w);
}

Test(sched_exchange, plan_splits_the_stage_in_two_ops)
{
    sb_sched *s = make();
    cr_assert_eq(sb_sched_group_count(s), 2);
    sb_sched_group_stats st;
    sb_sched_get_group_stats(s, 0, &st);
    cr_expect_str_eq(st.name, "a+g.map");
    sb_sched_get_group_stats(s, 1, &st);
    cr_expect_str_eq(st.name, "g+b");
    /* the map op's tasks run the map half with the stage's buckets; the source's stage as is */
    sb_sched_task t[8];
    size_t n = sb_sched_assign(s, "w1", 1, 1, t);
    cr_assert_eq(n, 1);
    cr_assert_eq(t[0].nstages, 2);
    cr_expect_str_eq(t[0].stages[0]->op, "identity");
    cr_expect_str_eq(t[0].stages[1]->op, "exchange.map");
    cr_expect_str_eq(t[0].stages[1]->name, "g");
    cr_expect(strstr(t[0].stages[1]->args_json, "\"op\":\"groupby\",\"buckets\":3,") != NULL, "%s",
              t[0].stages[1]->args_json);
    cr_expect(strstr(t[0].stages[1]->args_json, "\"args\":{") != NULL, "%s",
              t[0].stages[1]->args_json);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* Runs every map task but the last, the odd ones on w2 and the others on w1; returns the last
 * one's view (its task id copied into id), still running on w2. */
static void run_maps_but_one(sb_sched *s, uint64_t *now, sb_sched_task *last, char *id, size_t len)
{
    sb_sched_task t[8];
    for (size_t seen = 0; seen < NSPLITS;) {
        const char *w = seen % 2 ? "w2" : "w1";
        size_t n = sb_sched_assign(s, w, 1, (*now)++, t);
        cr_assert_eq(n, 1, "map task %zu is ready", seen);
        cr_assert_eq(t[0].op, 0, "a map task");
        if (++seen == NSPLITS) {
            *last = t[0];
            snprintf(id, len, "%s", t[0].task_id);
            last->task_id = id;
            return;
        }
        complete(s, w, &t[0], (*now)++);
    }
}

Test(sched_exchange, reduce_waits_for_every_map_task_then_reads_its_bucket)
{
    g_no_early_reduce = 1; /* (the early reduces are below) */
    sb_sched *s = make();
    uint64_t now = 1;
    sb_sched_task last, t[8];
    char id[128];
    run_maps_but_one(s, &now, &last, id, sizeof id);
    /* the other map outputs wait: no reduce task before the barrier */
    cr_expect_eq(sb_sched_assign(s, "w2", 8, now++, t), 0, "a reduce task before the barrier");
    /* the autoscaler's demand: the map task running, and a reduce task per bucket to come
     * (not the few the waiting bytes would make at the partition size) */
    uint64_t q = 0, r = 0;
    int act = 0;
    sb_sched_pool_demand(s, "cpu", &q, &r, &act);
    cr_expect_eq(q, NB, "queued: %" PRIu64, q);
    cr_expect_eq(r, 1);
    cr_expect_eq(act, 1);
    complete(s, "w2", &last, now++);
    size_t n = sb_sched_assign(s, "w2", 8, now++, t);
    cr_assert_eq(n, NB);
    for (size_t b = 0; b < n; b++) {
        cr_expect_eq(t[b].op, 1);
        cr_expect_str_eq(t[b].stages[0]->op, "exchange.reduce");
        cr_expect_str_eq(t[b].stages[1]->op, "identity");
        cr_assert_eq(t[b].ninputs, NSPLITS, "bucket %zu: %zu inputs", b, t[b].ninputs);
        for (size_t k = 0; k < NSPLITS; k++) { /* bucket b of map task k, in map task order */
            char want[64];
            snprintf(want, sizeof want, "s0-t%zu-p%zu", k, b);
            cr_expect_str_eq(t[b].inputs[k].id, want);
        }
        cr_expect_eq(t[b].inputs[0].bytes, 100 + b);
    }
    for (size_t b = 0; b < n; b++)
        complete(s, "w2", &t[b], now++);
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    sb_sched_stats st;
    sb_sched_get_stats(s, &st);
    cr_expect_eq(st.sink_parts, NB);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* Asks for task t's inputs past `have` (sb_sched_more_inputs): returns how many came, the first
 * one's id in first (when any), and whether they are closed. */
static size_t ask(sb_sched *s, const char *w, const sb_sched_task *t, uint32_t have, uint64_t now,
                  char *first, int *closed)
{
    const sb_sched_input *in;
    size_t n;
    sb_err err;
    cr_assert_eq(
        sb_sched_more_inputs(s, w, t->task_id, t->attempt, have, now, &in, &n, closed, &err), 1,
        "%s", err.msg);
    if (n > 0)
        snprintf(first, 64, "%s", in[0].id);
    return n;
}

/* Early reduces (controller/sched/core/early.c): with every map task but the last finished and that
 * one running, a worker with free slots gets the reduce tasks at once, open, each with its bucket
 * of the finished map tasks in map task order; asked again while the last map task runs they get
 * nothing more and stay open; once it finished each gets its bucket of it and is closed. A
 * reduce task that reports success before its inputs closed is failed and run again, whole. */
Test(sched_exchange, early_reduces_start_in_the_map_tail_and_take_their_bucket_as_it_comes)
{
    sb_sched *s = make();
    uint64_t now = 1;
    sb_sched_task last, t[8];
    char id[128], ids[NB][128], first[64];
    run_maps_but_one(s, &now, &last, id, sizeof id);
    size_t n = sb_sched_assign(s, "w1", 8, now++, t);
    cr_assert_eq(n, NB, "the reduce tasks start before the last map task ends");
    for (size_t b = 0; b < n; b++) {
        cr_expect_eq(t[b].op, 1);
        cr_expect(t[b].inputs_open, "bucket %zu: open", b);
        cr_assert_eq(t[b].ninputs, NSPLITS - 1, "bucket %zu: %zu inputs", b, t[b].ninputs);
        for (size_t k = 0; k + 1 < NSPLITS; k++) {
            char want[64];
            snprintf(want, sizeof want, "s0-t%zu-p%zu", k, b);
            cr_expect_str_eq(t[b].inputs[k].id, want);
        }
        snprintf(ids[b], sizeof ids[b], "%s", t[b].task_id);
        t[b].task_id = ids[b];
    }
    int closed = -1;
    cr_expect_eq(ask(s, "w1", &t[0], NSPLITS - 1, now++, first, &closed), 0);
    cr_expect_eq(closed, 0, "open while a map task runs");
    complete(s, "w2", &last, now++);
    cr_assert_eq(ask(s, "w1", &t[0], NSPLITS - 1, now++, first, &closed), 1);
    cr_expect_str_eq(first, "s0-t3-p0");
    cr_expect_eq(closed, 1);
    cr_expect_eq(ask(s, "w1", &t[0], NSPLITS, now++, first, &closed), 0, "asked again: nothing");
    cr_expect_eq(closed, 1);
    complete(s, "w1", &t[0], now++);
    /* bucket 1 reports success without asking: its output lacks map task 3's rows */
    sb_err err;
    cr_assert_eq(sb_sched_complete(s, "w1", t[1].task_id, t[1].attempt, SB_SCHED_OK, NULL, NULL, 0,
                                   NULL, 0, NULL, now++, &err),
                 1, "%s", err.msg);
    cr_assert_eq(ask(s, "w1", &t[2], NSPLITS - 1, now++, first, &closed), 1);
    cr_expect_str_eq(first, "s0-t3-p2");
    complete(s, "w1", &t[2], now++);
    cr_assert_eq(sb_sched_assign(s, "w1", 8, now++, t), 1, "bucket 1 runs again");
    cr_expect_eq(t[0].index, 1);
    cr_expect_eq(t[0].attempt, 1);
    cr_expect(!t[0].inputs_open, "closed: its bucket is whole");
    cr_expect_eq(t[0].ninputs, NSPLITS);
    complete(s, "w1", &t[0], now++);
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    sb_sched_stats st;
    sb_sched_get_stats(s, &st);
    cr_expect_eq(st.sink_parts, NB);
    cr_expect_eq(st.early_reduces, NB);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* An early reduce holds a slot the map op needs again (a worker holding map outputs was lost, so
 * a map task must run again, and the pool has no free slot): at its next ask the reduce task is
 * handed back (its attempt cancelled) and the slot goes to the map task; the reduce task starts
 * again once there is room and reads its whole bucket. */
Test(sched_exchange, an_early_reduce_gives_its_slot_back_to_a_map_task_that_must_run_again)
{
    spec_fixture_load(&h, yaml);
    sb_storage_split sp[NSPLITS];
    for (size_t i = 0; i < NSPLITS; i++) {
        snprintf(names[i], sizeof names[i], "0\t1024\t1024\t/in/f%zu.jsonl", i);
        sp[i] = (sb_storage_split){.split = names[i], .bytes = 1024};
    }
    /* (no_eft: the idle w2 would take the reduce task, w1 being busy) */
    sb_sched_config cfg = {.pipeline = &h.p, .pipeline_id = "ns/x", .no_eft = 1};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, sp, NSPLITS, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_sched_worker_add(s, "w1", "cpu", "127.0.0.1:1", 2, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "w2", "cpu", "127.0.0.1:2", 1, NULL, 0, 0, NULL), 0);
    uint64_t now = 1;
    sb_sched_task t[8], m[4], r;
    char mid[4][128], rid[128];
    for (size_t k = 0; k < 3; k++) { /* map task 0 on w2, 1 and 2 on w1 */
        cr_assert_eq(sb_sched_assign(s, k == 0 ? "w2" : "w1", 1, now++, t), 1);
        m[k] = t[0];
        snprintf(mid[k], sizeof mid[k], "%s", m[k].task_id);
        m[k].task_id = mid[k];
        complete(s, k == 0 ? "w2" : "w1", &m[k], now++);
    }
    cr_assert_eq(sb_sched_assign(s, "w1", 2, now++, t), 2, "map task 3 and an early reduce");
    cr_assert_eq(t[0].op, 0);
    m[3] = t[0];
    snprintf(mid[3], sizeof mid[3], "%s", m[3].task_id);
    m[3].task_id = mid[3];
    cr_assert_eq(t[1].op, 1);
    cr_assert(t[1].inputs_open);
    r = t[1];
    snprintf(rid, sizeof rid, "%s", r.task_id);
    r.task_id = rid;
    sb_sched_worker_lost(s, "w2", "killed", now++); /* map task 0's outputs with it */
    const sb_sched_input *in;
    size_t n;
    int closed;
    cr_expect_eq(sb_sched_more_inputs(s, "w1", r.task_id, r.attempt, r.ninputs, now++, &in, &n,
                                      &closed, &err),
                 0, "handed back: map task 0 needs the slot");
    sb_sched_cancel *c = NULL;
    size_t nc = sb_sched_take_cancels(s, "w1", &c);
    cr_expect_eq(nc, 1);
    if (nc == 1)
        cr_expect_str_eq(c[0].task_id, rid);
    sb_sched_cancels_free(c, nc);
    cr_assert_eq(sb_sched_assign(s, "w1", 2, now++, t), 1);
    cr_expect_eq(t[0].op, 0, "the slot goes to the map task");
    cr_expect_eq(t[0].index, 0);
    m[0] = t[0];
    m[0].task_id = mid[0];
    complete(s, "w1", &m[0], now++);
    complete(s, "w1", &m[3], now++);
    size_t reduces = 0;
    for (int guard = 0; sb_sched_state_get(s, NULL) == SB_SCHED_RUNNING && guard < 20; guard++) {
        size_t k = sb_sched_assign(s, "w1", 2, now++, t);
        char ids[8][128];
        for (size_t i = 0; i < k; i++) {
            snprintf(ids[i], sizeof ids[i], "%s", t[i].task_id);
            t[i].task_id = ids[i];
            cr_expect(!t[i].inputs_open, "the map op is finished: closed");
            cr_expect_eq(t[i].ninputs, NSPLITS, "each reads its whole bucket");
            reduces++;
        }
        for (size_t i = 0; i < k; i++)
            complete(s, "w1", &t[i], now++);
    }
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    cr_expect_eq(reduces, NB);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* Which ops start their reduces early (exchange.h): not sort, limit, or a groupby with an
 * order-bound aggregate. */
Test(sched_exchange, only_ops_that_ignore_input_order_start_early)
{
    static const struct {
        const char *op, *args;
        int early;
    } cases[] = {
        {"repartition", "{\"partitions\":2}", 1},
        {"random_shuffle", "{\"seed\":1}", 1},
        {"distinct", "{}", 1},
        {"groupby",
         "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"count\"},{\"op\":\"std\","
         "\"field\":\"v\"}]}",
         1},
        {"groupby",
         "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"sum\",\"field\":\"v\"},"
         "{\"op\":\"first\",\"field\":\"v\"}]}",
         0},
        {"groupby", "{\"keys\":[\"k\"],\"aggregates\":[{\"op\":\"collect\",\"field\":\"v\"}]}", 0},
        {"sort", "{\"keys\":[{\"field\":\"k\"}]}", 0},
        {"limit", "{\"rows\":3}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sb_stage_spec st = {
            .name = "x", .op = (char *)cases[i].op, .args_json = (char *)cases[i].args};
        cr_expect_eq(sb_exchange_early(&st), cases[i].early, "%s %s", cases[i].op, cases[i].args);
    }
}

/* A worker that held map outputs dies while the reduce tasks run: the reduce task that could
 * not fetch them reports them lost, the map task that made them runs again (lineage), and every
 * reduce task then reads all map tasks' buckets; the pipeline succeeds. */
/* Runs the map tasks, one reduce task, loses w2 (map tasks 1 and 3) and runs to the end on w1:
 * only those map tasks run again, then every reduce task. */
static void lost_map_outputs_rerun(const char *y)
{
    g_no_early_reduce = 1; /* the barrier's lineage (an early reduce's: below) */
    sb_sched *s = make_from(y);
    uint64_t now = 1;
    sb_sched_task last, t[8];
    char id[128], rid[128];
    run_maps_but_one(s, &now, &last, id, sizeof id); /* map tasks 1 and 3 on w2 */
    complete(s, "w2", &last, now++);
    cr_assert_eq(sb_sched_assign(s, "w1", 1, now++, t), 1); /* one reduce task runs on w1 */
    snprintf(rid, sizeof rid, "%s", t[0].task_id);
    uint32_t ratt = t[0].attempt;
    sb_sched_worker_lost(s, "w2", "killed", now++);
    sb_sched_stats st;
    sb_sched_get_stats(s, &st);
    cr_expect_gt(st.partitions_recovered, 0, "the map task re-queued to re-make w2's buckets");
    const char *lost[1] = {"s0-t1-p0"};
    sb_err err;
    cr_assert_geq(sb_sched_complete(s, "w1", rid, ratt, SB_SCHED_INPUT_LOST, "fetch failed", NULL,
                                    0, lost, 1, NULL, now++, &err),
                  0, "%s", err.msg);
    drop_releases(s, "w1");
    size_t maps = 0, reduces = 0;
    for (int guard = 0; sb_sched_state_get(s, NULL) == SB_SCHED_RUNNING && guard < 50; guard++) {
        size_t k = sb_sched_assign(s, "w1", 8, now++, t);
        sb_sched_task copy[8];
        char ids[8][128];
        for (size_t i = 0; i < k; i++) {
            copy[i] = t[i];
            snprintf(ids[i], sizeof ids[i], "%s", t[i].task_id);
            copy[i].task_id = ids[i];
            maps += copy[i].op == 0;
            reduces += copy[i].op == 1;
            if (copy[i].op == 1)
                cr_expect_eq(copy[i].ninputs, NSPLITS, "a reduce task reads every map task");
        }
        for (size_t i = 0; i < k; i++)
            complete(s, "w1", &copy[i], now++);
    }
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    cr_expect_eq(maps, 2, "only the map tasks w2 ran (1 and 3) ran again: %zu", maps);
    cr_expect_eq(reduces, NB, "every reduce task ran (the one that lost its input again)");
    sb_sched_get_stats(s, &st);
    cr_expect_eq(st.sink_parts, NB);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

Test(sched_exchange, lost_map_outputs_rerun_by_lineage)
{
    lost_map_outputs_rerun(yaml);
}

/* The same with the surviving map outputs past the budget (chaos seed 4242-5: a repartition
 * under memoryBudget 64Ki, a worker SIGKILLed in the reduce phase): nothing runs, the map
 * re-runs are held by the budget, the reduce task waits for their outputs, and the buckets not
 * yet taken by a reduce task wait for the barrier. The map re-runs must be forced past the
 * budget; they were not (the bucket partitions waiting made the reduce op look runnable), and
 * the run stalled. */
Test(sched_exchange, lost_map_outputs_rerun_past_a_full_budget)
{
    char y[1024];
    const char *at = strstr(yaml, "memoryBudget: 1Ti");
    cr_assert_not_null(at);
    snprintf(y, sizeof y, "%.*smemoryBudget: 1Ki}\n", (int)(at - yaml), yaml);
    out_bytes = 400; /* each map task's 3 buckets: more than the budget */
    lost_map_outputs_rerun(y);
}

static const char *sort_yaml =
    "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
    "metadata: {name: x}\nspec:\n"
    "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
    "  stages:\n  - {name: a, op: identity}\n"
    "  - {name: o, op: sort, args: {keys: [{field: k}], partitions: 3}}\n"
    "  - {name: b, op: identity}\n"
    "  sink: {uri: 'file:///out/', format: jsonl}\n"
    "  execution: {memoryBudget: 1Ti}\n";

/* Checks task t of op 1 or 2 reading bucket b of each of the n tasks of the op before. */
static void check_bucket_inputs(const sb_sched_task *t, size_t n)
{
    cr_assert_eq(t->ninputs, n);
    uint64_t b = strtoull(strrchr(t->inputs[0].id, 'p') + 1, NULL, 10);
    for (size_t k = 0; k < n; k++) {
        char w[16];
        snprintf(w, sizeof w, "s%" PRIu32 "-t", t->op - 1);
        cr_expect(strncmp(t->inputs[k].id, w, strlen(w)) == 0, "%s", t->inputs[k].id);
        cr_expect_eq(strtoull(strrchr(t->inputs[k].id, 'p') + 1, NULL, 10), b, "one bucket");
    }
}

/* A sort: three ops (the map half, the middle op "<stage>.range" reading bucket b of every map
 * output with round 1 in its args, the reduce), each formed after the one before finished; the
 * sink's parts listed in reduce task order (the ranges' order) whatever order they finished in */
Test(sched_exchange, sort_runs_three_ops_and_lists_its_sink_in_range_order)
{
    sb_sched *s = make_from(sort_yaml);
    cr_assert_eq(sb_sched_group_count(s), 3);
    sb_sched_group_stats st;
    const char *want[3] = {"a+o.map", "o.range", "o+b"};
    for (size_t i = 0; i < 3; i++) {
        sb_sched_get_group_stats(s, i, &st);
        cr_expect_str_eq(st.name, want[i]);
    }
    uint64_t now = 1;
    size_t done[3] = {0}, nred = 0;
    sb_sched_task red[NB];
    char rids[NB][128];
    for (int guard = 0; sb_sched_state_get(s, NULL) == SB_SCHED_RUNNING && guard < 100; guard++) {
        sb_sched_task t[8];
        size_t n = sb_sched_assign(s, "w1", 8, now++, t);
        if (n == 0 && nred == NB) { /* the last range finishes first: the sink keeps range order */
            for (size_t b = NB; b-- > 0;)
                complete(s, "w1", &red[b], now++);
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            const char *args = t[i].stages[t[i].op == 0 ? 1 : 0]->args_json;
            if (t[i].op == 0) {
                cr_expect_str_eq(t[i].stages[1]->op, "exchange.map");
                cr_expect(strstr(args, "\"op\":\"sort\",\"buckets\":3,") != NULL, "%s", args);
            } else if (t[i].op == 1) { /* after the barrier: every map task done */
                cr_expect_eq(done[0], NSPLITS);
                cr_assert_eq(t[i].nstages, 1);
                cr_expect_str_eq(t[i].stages[0]->op, "exchange.reduce");
                cr_expect(strstr(args, "\"round\":1,") != NULL, "%s", args);
                check_bucket_inputs(&t[i], NSPLITS);
            } else {
                cr_expect_eq(done[1], NB);
                cr_expect(t[i].writes_sink);
                cr_expect(strstr(args, "\"round\"") == NULL, "%s", args);
                cr_expect_str_eq(t[i].stages[1]->op, "identity");
                check_bucket_inputs(&t[i], NB);
                cr_assert_lt(nred, NB);
                red[nred] = t[i];
                snprintf(rids[nred], sizeof rids[nred], "%s", t[i].task_id);
                red[nred].task_id = rids[nred];
                nred++;
                continue;
            }
            done[t[i].op]++;
            complete(s, "w1", &t[i], now++);
        }
    }
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    size_t np = 0;
    const sb_storage_output *p = sb_sched_sink_parts(s, &np);
    cr_assert_eq(np, NB);
    for (size_t b = 0; b < np; b++) {
        char w[64];
        snprintf(w, sizeof w, "s2-t%" PRIu64 "-p0", red[b].index);
        cr_expect_str_eq(p[b].id, w, "part %zu", b);
        /* range b's task: formed in bucket order, so its index is the range's place */
        cr_expect_eq(strtoull(strrchr(red[b].inputs[0].id, 'p') + 1, NULL, 10), b);
        if (b > 0)
            cr_expect_lt(red[b - 1].index, red[b].index);
    }
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* Two exchanges in a row (groupby, then sort): the groupby's reduce half and the sort's map half
 * run in the same tasks (op "g+o.map"), then the sort's middle op and its reduce. Before the fix
 * that op was taken for a sort's middle op (both halves in one op), named "g+o.range" and given
 * the sort's stage as is: every such pipeline failed ("op sort is not available"). */
Test(sched_exchange, an_exchange_right_after_another_runs_both_halves_in_one_op)
{
    g_no_early_reduce = 1; /* each op formed after the one before finished */
    sb_sched *s = make_from("apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
                            "metadata: {name: x}\nspec:\n"
                            "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
                            "  stages:\n  - {name: a, op: identity}\n"
                            "  - {name: g, op: groupby, args: {keys: [k], partitions: 3}}\n"
                            "  - {name: o, op: sort, args: {keys: [{field: n}], partitions: 3}}\n"
                            "  sink: {uri: 'file:///out/', format: jsonl}\n"
                            "  execution: {memoryBudget: 1Ti}\n");
    cr_assert_eq(sb_sched_group_count(s), 4);
    sb_sched_group_stats st;
    const char *want[4] = {"a+g.map", "g+o.map", "o.range", "o"};
    for (size_t i = 0; i < 4; i++) {
        sb_sched_get_group_stats(s, i, &st);
        cr_expect_str_eq(st.name, want[i]);
    }
    uint64_t now = 1;
    size_t done[4] = {0};
    for (int guard = 0; sb_sched_state_get(s, NULL) == SB_SCHED_RUNNING && guard < 100; guard++) {
        sb_sched_task t[8];
        size_t n = sb_sched_assign(s, "w1", 8, now++, t);
        for (size_t i = 0; i < n; i++) {
            cr_assert_lt(t[i].op, 4);
            for (uint32_t k = 0; k < t[i].op; k++) /* each op after the one before finished */
                cr_expect_eq(done[k], k == 0 ? NSPLITS : NB, "op %u before op %u", k, t[i].op);
            if (t[i].op == 1) {
                cr_assert_eq(t[i].nstages, 2);
                cr_expect_str_eq(t[i].stages[0]->op, "exchange.reduce");
                cr_expect(strstr(t[i].stages[0]->args_json, "\"op\":\"groupby\"") != NULL, "%s",
                          t[i].stages[0]->args_json);
                cr_expect_str_eq(t[i].stages[1]->op, "exchange.map");
                cr_expect(strstr(t[i].stages[1]->args_json, "\"op\":\"sort\",\"buckets\":3,") !=
                              NULL,
                          "%s", t[i].stages[1]->args_json);
                check_bucket_inputs(&t[i], NSPLITS);
            } else if (t[i].op == 2) {
                cr_assert_eq(t[i].nstages, 1);
                cr_expect(strstr(t[i].stages[0]->args_json, "\"round\":1,") != NULL, "%s",
                          t[i].stages[0]->args_json);
            }
            done[t[i].op]++;
            complete(s, "w1", &t[i], now++);
        }
    }
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    cr_expect_eq(done[3], NB);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* A stage after a sort that may run on two shapes stays in the sort's reduce op even where the
 * operator plans (no_fuse_choices makes such a stage an op of its own elsewhere): in tasks of its
 * own it would take the ranges in no order, and the sink's parts would lose the sort's order
 * (before the fix: four ops, the last "b" alone). It cannot move to the other shape. */
Test(sched_exchange, a_stage_with_a_shape_choice_after_a_sort_stays_in_its_reduce)
{
    g_no_fuse_choices = 1;
    sb_sched *s = make_from("apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
                            "metadata: {name: x}\nspec:\n"
                            "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
                            "  stages:\n"
                            "  - {name: o, op: sort, args: {keys: [{field: k}], partitions: 3}}\n"
                            "  - {name: b, op: bench.sleep, placement: [cpu, gpu],\n"
                            "     args: {msPerRecord: 0}}\n"
                            "  sink: {uri: 'file:///out/', format: jsonl}\n"
                            "  execution: {memoryBudget: 1Ti}\n");
    g_no_fuse_choices = 0;
    cr_assert_eq(sb_sched_group_count(s), 3);
    sb_sched_group_stats st;
    sb_sched_get_group_stats(s, 2, &st);
    cr_expect_str_eq(st.name, "o+b");
    sb_err err = {0};
    cr_expect_eq(sb_sched_stage_move(s, 1, "gpu", &err), -1);
    cr_expect(strstr(err.msg, "fused") != NULL, "%s", err.msg);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* A join whose right side the plan found at or above broadcastBelow (cfg.join_right): planned
 * as an exchange whose map half has op 0's task count ("maps") and the right side's bytes, with
 * enough buckets that a bucket's right rows (four times their bytes in the table) fit a reduce
 * task's share of the budget; 0 for the stage keeps the broadcast join (one op). */
static const char *join_yaml =
    "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: x}\nspec:\n"
    "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
    "  stages:\n  - {name: a, op: identity}\n"
    "  - {name: j, op: join, args: {right: {uri: 'file:///r/'}, on: [k], broadcastBelow: 1Ki}}\n"
    "  sink: {uri: 'file:///out/', format: jsonl}\n"
    "  execution: {memoryBudget: %s%s}\n";

/* The scheduler of join_yaml with budget and extra execution settings, the join's right side
 * `right` bytes; NULL with the error in *err when it refuses. */
static sb_sched *make_join(const char *budget, const char *extra, uint64_t right, sb_err *err)
{
    static char y[1024];
    snprintf(y, sizeof y, join_yaml, budget, extra);
    spec_fixture_load(&h, y);
    sb_storage_split sp[NSPLITS];
    for (size_t i = 0; i < NSPLITS; i++) {
        snprintf(names[i], sizeof names[i], "0\t1024\t1024\t/in/f%zu.jsonl", i);
        sp[i] = (sb_storage_split){names[i], 1024};
    }
    uint64_t jr[2] = {0, right};
    sb_sched_config cfg = {
        .pipeline = &h.p, .pipeline_id = "ns/x", .join_right = jr, .njoin_right = 2};
    return sb_sched_new(&cfg, sp, NSPLITS, err);
}

Test(sched_exchange, an_exchanged_join_plans_a_map_and_a_reduce_op)
{
    sb_err err;
    sb_sched *s = make_join("1Gi", "", 1 << 20, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_assert_eq(sb_sched_group_count(s), 2);
    sb_sched_group_stats st;
    sb_sched_get_group_stats(s, 0, &st);
    cr_expect_str_eq(st.name, "a+j.map");
    cr_assert_eq(sb_sched_worker_add(s, "w1", "cpu", "127.0.0.1:1", 8, NULL, 0, 0, NULL), 0);
    sb_sched_task t[8];
    cr_assert_eq(sb_sched_assign(s, "w1", 1, 1, t), 1);
    cr_expect_str_eq(t[0].stages[1]->op, "exchange.map");
    /* buckets: one per split (4); the 1 MiB right side fits 1 GiB / 4 */
    cr_expect(strstr(t[0].stages[1]->args_json,
                     "{\"op\":\"join\",\"buckets\":4,\"memory\":1073741824,\"maps\":4,"
                     "\"rightBytes\":1048576,\"args\":{") != NULL,
              "%s", t[0].stages[1]->args_json);
    sb_sched_free(s);
    spec_fixture_free(&h);
    /* 64 MiB of right side under a 256 MiB budget: 4 x 64Mi / (256Mi / 4) = 4 buckets ... */
    cr_expect_eq(sb_exchange_join_buckets(4, 64 << 20, 256 << 20), 4);
    /* ... 1 GiB needs 64, and the bound holds */
    cr_expect_eq(sb_exchange_join_buckets(4, 1 << 30, 256 << 20), 64);
    cr_expect_eq(sb_exchange_join_buckets(4, (uint64_t)1 << 40, 256 << 20),
                 SB_EXCHANGE_MAX_BUCKETS);
    cr_expect_eq(sb_exchange_join_buckets(7, 1 << 20, 0), 7, "no budget: the stage's buckets");
    /* a right side below broadcastBelow (0 here): the join op, fused with the stage before */
    s = make_join("1Gi", "", 0, &err);
    cr_assert_not_null(s, "%s", err.msg);
    cr_expect_eq(sb_sched_group_count(s), 1);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* The map tasks must be the source's, one per split, each run whole, and hold their share of the
 * right side within a quarter of the budget: a join after another exchange, under
 * maxErroredPartitions, or with too few splits for its right side, is refused, saying why. */
Test(sched_exchange, an_exchanged_join_refuses_what_it_cannot_run)
{
    sb_err err;
    cr_expect_null(make_join("1Gi", ", maxErroredPartitions: 2", 1 << 20, &err));
    cr_expect(strstr(err.msg, "stage j (join): the right side is 1048576 bytes, at or above "
                              "broadcastBelow, so it is exchanged by key, but "
                              "execution.maxErroredPartitions must be 0") != NULL,
              "%s", err.msg);
    spec_fixture_free(&h);
    /* 2 GiB over 4 splits: each map task would hold 512 MiB, past a quarter of 1 GiB */
    cr_expect_null(make_join("1Gi", "", (uint64_t)2 << 30, &err));
    cr_expect(strstr(err.msg, "each map task would hold its share of it") != NULL, "%s", err.msg);
    spec_fixture_free(&h);
    /* 1 GiB over 4 splits: 256 MiB each, a quarter: planned */
    sb_sched *s = make_join("1Gi", "", (uint64_t)1 << 30, &err);
    cr_expect_not_null(s, "%s", err.msg);
    sb_sched_free(s);
    spec_fixture_free(&h);
    const char *y = "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: x}\n"
                    "spec:\n  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
                    "  stages:\n  - {name: d, op: distinct}\n"
                    "  - {name: j, op: join, args: {right: {uri: 'file:///r/'}, on: [k]}}\n"
                    "  sink: {uri: 'file:///out/', format: jsonl}\n";
    spec_fixture_load(&h, y);
    sb_storage_split sp = {"0\t1024\t1024\t/in/f0.jsonl", 1024};
    uint64_t jr[2] = {0, 5};
    sb_sched_config cfg = {
        .pipeline = &h.p, .pipeline_id = "ns/x", .join_right = jr, .njoin_right = 2};
    cr_expect_null(sb_sched_new(&cfg, &sp, 1, &err));
    cr_expect(strstr(err.msg, "its map tasks must read the source") != NULL, "%s", err.msg);
    spec_fixture_free(&h);
    /* into a stream:// sink (docs/training.md): refused at start, naming the stage; below
     * broadcastBelow the same join streams (one op, no exchange) */
    y = "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: x}\n"
        "spec:\n  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
        "  stages:\n  - {name: j, op: join, args: {right: {uri: 'file:///r/'}, on: [k], "
        "broadcastBelow: 1Ki}}\n  sink: {uri: 'stream://', format: jsonl}\n";
    for (int exchanged = 1; exchanged >= 0; exchanged--) {
        spec_fixture_load(&h, y);
        uint64_t sr[1] = {exchanged ? 1 << 20 : 0};
        sb_sched_config sc = {.pipeline = &h.p,
                              .pipeline_id = "ns/x",
                              .join_right = sr,
                              .njoin_right = 1,
                              .stream = 1};
        sb_sched *st = sb_sched_new(&sc, &sp, 1, &err);
        if (exchanged) {
            cr_expect_null(st, "an exchanged join into a stream");
            cr_expect(strstr(err.msg, "stage j (join)") && strstr(err.msg, "stream:// sink"), "%s",
                      err.msg);
        } else {
            cr_expect_not_null(st, "a broadcast join into a stream: %s", err.msg);
        }
        sb_sched_free(st);
        spec_fixture_free(&h);
    }
}
