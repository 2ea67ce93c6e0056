/* The scheduler's tasks of whole batches (core/dispatch.c, pick_inputs/sc_form_task): a stage with
 * a batchSize gets tasks of at least that many rows, many small partitions per task, ending at a
 * whole batch; while upstream still produces, fewer rows wait; once it is done the remainder
 * goes out. Every input partition goes to exactly one task, in order. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/sched.h"
#include "spec_fixture.h"

static char *spec_text(const char *gpu_stage)
{
    static char buf[2048];
    snprintf(buf, sizeof buf,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: t}\n"
             "spec:\n  source: {uri: 'file:///in', format: jsonl, partitionSize: 64Mi}\n"
             "  stages:\n  - {name: load, op: identity}\n%s"
             "  sink: {uri: 'file:///out', format: jsonl}\n  execution: {}\n",
             gpu_stage);
    return buf;
}

static sb_sched *new_sched(spec_holder *h, const char *gpu_stage, size_t nsplits)
{
    spec_fixture_load(h, spec_text(gpu_stage));
    sb_storage_split *sp = calloc(nsplits, sizeof *sp);
    char(*names)[32] = calloc(nsplits, 32);
    for (size_t i = 0; i < nsplits; i++) {
        snprintf(names[i], 32, "1000\tsplit-%zu", i);
        sp[i].split = names[i];
        sp[i].bytes = 1000;
    }
    sb_sched_config cfg = {.pipeline = &h->p, .pipeline_id = "ns/t"};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, sp, nsplits, &err);
    cr_assert_not_null(s, "%s", err.msg);
    free(sp);
    free(names);
    cr_assert_eq(sb_sched_worker_add(s, "c1", "cpu", "127.0.0.1:9001", 1, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "g1", "gpu", "127.0.0.1:9002", 1, NULL, 0, 0, NULL), 0);
    return s;
}

/* Starts op 0's next task on c1 (its id into tid). */
static void start_source_task(sb_sched *s, uint64_t *now, char *tid, size_t cap)
{
    sb_sched_task t;
    cr_assert_eq(sb_sched_assign(s, "c1", 1, (*now)++, &t), 1);
    cr_assert_eq(t.attempt, 0);
    snprintf(tid, cap, "%s", t.task_id);
}

/* Completes op 0's task tid with `nout` outputs of `rows` rows (200 bytes per row). */
static void end_source_task(sb_sched *s, uint64_t *now, const char *tid, size_t nout, uint64_t rows)
{
    const char *slash = strrchr(tid, '/');
    sb_storage_output *o = calloc(nout, sizeof *o);
    char(*ids)[64] = calloc(nout, 64);
    for (size_t k = 0; k < nout; k++) {
        snprintf(ids[k], 64, "%s-p%zu", slash + 1, k);
        o[k] = (sb_storage_output){.id = ids[k], .bytes = 200 * rows, .rows = rows};
    }
    cr_assert_eq(sb_sched_complete(s, "c1", tid, 0, SB_SCHED_OK, NULL, o, nout, NULL, 0, NULL,
                                   (*now)++, NULL),
                 1);
    free(o);
    free(ids);
}

/* Runs op 0's tasks one after the other: the next one starts (upstream still runs) before the
 * previous one's outputs are taken, except after the last. */
typedef struct {
    char tid[128];
    int running;
} src;

static void source_step(sb_sched *s, uint64_t *now, src *c, size_t nout, uint64_t rows, int last)
{
    if (!c->running)
        start_source_task(s, now, c->tid, sizeof c->tid);
    end_source_task(s, now, c->tid, nout, rows);
    c->running = 0;
    if (!last) {
        start_source_task(s, now, c->tid, sizeof c->tid);
        c->running = 1;
    }
}

/* Takes op 1's tasks on g1 while it gets them: their input counts into sizes[], completing
 * each (nothing to report: a sink stage); every input id is checked to come in order. */
static size_t take_batches(sb_sched *s, uint64_t *now, size_t *sizes, size_t max, size_t *next_in,
                           size_t per_task_out)
{
    size_t n = 0;
    sb_sched_task t;
    while (n < max && sb_sched_assign(s, "g1", 1, (*now)++, &t) == 1) {
        sizes[n++] = t.ninputs;
        for (size_t k = 0; k < t.ninputs; k++) {
            char want[64];
            snprintf(want, sizeof want, "s0-t%zu-p%zu", *next_in / per_task_out,
                     *next_in % per_task_out);
            cr_assert_str_eq(t.inputs[k].id, want);
            (*next_in)++;
        }
        char tid[128];
        snprintf(tid, sizeof tid, "%s", t.task_id);
        char part[64];
        snprintf(part, sizeof part, "%s-p0", strrchr(tid, '/') + 1);
        sb_storage_output o = {.id = part, .bytes = 10, .rows = 1};
        cr_assert_eq(sb_sched_complete(s, "g1", tid, t.attempt, SB_SCHED_OK, NULL, &o, 1, NULL, 0,
                                       NULL, (*now)++, NULL),
                     1);
    }
    return n;
}

Test(sched_batch, one_row_partitions_go_in_tasks_of_whole_batches)
{
    spec_holder h;
    /* 3 source tasks of 500 one-row partitions: 1,500 rows, batchSize 512 */
    sb_sched *s = new_sched(&h,
                            "  - {name: infer, op: identity, batchSize: 512, "
                            "resources: {gpu: 1}}\n",
                            3);
    uint64_t now = 1;
    size_t sizes[64], n = 0, next_in = 0;
    src c = {0};
    source_step(s, &now, &c, 500, 1, 0);
    /* 500 rows: less than a batch while upstream still runs: it waits */
    n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 500);
    cr_expect_eq(n, 0, "a task of %zu rows went out before a batch was full",
                 n ? sizes[0] : (size_t)0);
    source_step(s, &now, &c, 500, 1, 0);
    n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 500);
    cr_expect_eq(n, 1);
    cr_expect_eq(sizes[0], 512, "the first task has %zu rows", sizes[0]);
    source_step(s, &now, &c, 500, 1, 1); /* upstream done: the rest goes out */
    n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 500);
    cr_expect_eq(n, 3);
    cr_expect_eq(sizes[1], 512);
    cr_expect_eq(sizes[2], 1500 - 1024);
    cr_expect_eq(next_in, 1500, "every partition once: %zu", next_in);
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

Test(sched_batch, uneven_partitions_end_at_a_whole_batch)
{
    spec_holder h;
    /* partitions of 4 rows, batchSize 100: tasks end where the rows are a multiple of 100 */
    sb_sched *s = new_sched(&h,
                            "  - {name: infer, op: identity, batchSize: 100, "
                            "resources: {gpu: 1}}\n",
                            2);
    uint64_t now = 1;
    size_t sizes[64], n = 0, next_in = 0;
    src c = {0};
    source_step(s, &now, &c, 70, 4, 0); /* 280 rows: 100 rows = 25 partitions per batch */
    n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 70);
    cr_assert_eq(n, 1);
    cr_expect_eq(sizes[0], 50, "%zu inputs: 200 rows, two whole batches", sizes[0]);
    source_step(s, &now, &c, 70, 4, 1);
    n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 70);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += sizes[i];
        if (i + 1 < n)
            cr_expect_eq(sizes[i] % 25, 0, "task %zu: %zu inputs", i, sizes[i]);
    }
    cr_expect_eq(total, 140);
    cr_expect_eq(next_in, 140);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

Test(sched_batch, without_a_batch_size_tasks_stay_by_bytes)
{
    spec_holder h;
    sb_sched *s = new_sched(&h, "  - {name: infer, op: identity, resources: {gpu: 1}}\n", 2);
    uint64_t now = 1;
    size_t sizes[64], n = 0, next_in = 0;
    src c = {0};
    source_step(s, &now, &c, 500, 1, 0);
    source_step(s, &now, &c, 500, 1, 1);
    n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 500);
    for (size_t i = 0; i < n; i++)
        cr_expect_leq(sizes[i], 64, "at most 64 inputs per task without a batchSize");
    cr_expect_eq(next_in, 1000);
    sb_sched_free(s);
    spec_fixture_free(&h);
}

/* Regression (test_run_batch failed about 1 run in 5 with a second short call): the moment
 * between two source tasks, when nothing runs anywhere because the cpu worker has not polled
 * again yet, made the scheduler's "nothing runs" rule form a short batch for the gpu worker.
 * While an upstream task can still start within the budget, a short batch waits. */
Test(sched_batch, no_short_batch_between_upstream_tasks)
{
    spec_holder h;
    sb_sched *s = new_sched(&h,
                            "  - {name: infer, op: identity, batchSize: 512, "
                            "resources: {gpu: 1}}\n",
                            3);
    uint64_t now = 1;
    size_t sizes[64], n = 0, next_in = 0;
    char tid[128];
    start_source_task(s, &now, tid, sizeof tid);
    end_source_task(s, &now, tid, 500, 1); /* nothing runs now; 2 source tasks still queued */
    n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 500);
    cr_expect_eq(n, 0, "a short batch of %zu rows went out while upstream could start",
                 n ? sizes[0] : (size_t)0);
    for (int k = 0; k < 2; k++) {
        start_source_task(s, &now, tid, sizeof tid);
        end_source_task(s, &now, tid, 500, 1);
        n += take_batches(s, &now, sizes + n, 64 - n, &next_in, 500);
    }
    cr_assert_eq(n, 3);
    cr_expect(sizes[0] == 512 && sizes[1] == 512 && sizes[2] == 476, "%zu %zu %zu", sizes[0],
              sizes[1], sizes[2]);
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    sb_sched_free(s);
    spec_fixture_free(&h);
}
