/* The scheduler's side of limit (controller/sched/limit.h, issue 41): the stage is an exchange of
 * one bucket whose map half runs in op 0; once the finished prefix of splits holds the limit's
 * rows, the queued source tasks past it are dropped unrun, running ones finish, and the one
 * reduce task reads the map outputs in split order. A limit whose map half would run in a later
 * op (staged mode, after another stage) is refused when the scheduler is made. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/sched.h"
#include "spec_fixture.h"

#define NSPLITS 10

static spec_holder h;
static char names[NSPLITS][64];

static sb_sched *make(const char *stages, const char *mode, sb_err *err)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: x}\nspec:\n"
             "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
             "  stages:\n%s  sink: {uri: 'file:///out/', format: jsonl}\n"
             "  execution: {memoryBudget: 1Ti, mode: %s}\n",
             stages, mode);
    spec_fixture_load(&h, yaml);
    sb_storage_split sp[NSPLITS];
    for (size_t i = 0; i < NSPLITS; i++) {
        snprintf(names[i], sizeof names[i], "0\t1024\t1024\t/in/f%zu.jsonl", i);
        sp[i].split = names[i];
        sp[i].bytes = 1024;
    }
    sb_sched_config cfg = {.pipeline = &h.p, .pipeline_id = "ns/x", .no_eft = 1};
    sb_sched *s = sb_sched_new(&cfg, sp, NSPLITS, err);
    for (int w = 0; s != NULL && w < 3; w++) { /* one probe per worker while unmeasured */
        char id[8], addr[32];
        snprintf(id, sizeof id, "w%d", w);
        snprintf(addr, sizeof addr, "127.0.0.1:%d", w + 1);
        cr_assert_eq(sb_sched_worker_add(s, id, "cpu", addr, 2, NULL, 0, 0, NULL), 0);
    }
    return s;
}

/* Completes task (op, index) on worker w<index % 3> with one output of `rows` rows (bucket 0). */
static void complete(sb_sched *s, uint32_t op, uint64_t index, uint32_t attempt, uint64_t rows)
{
    char w[8];
    snprintf(w, sizeof w, "w%d", (int)(index % 3));
    char id[64], tid[128];
    snprintf(id, sizeof id, "s%" PRIu32 "-t%" PRIu64 "-p0", op, index);
    snprintf(tid, sizeof tid, "ns/x/s%" PRIu32 "-t%" PRIu64, op, index);
    sb_storage_output o = {.id = id, .bytes = 100, .rows = rows};
    sb_err err;
    cr_assert_eq(
        sb_sched_complete(s, w, tid, attempt, SB_SCHED_OK, NULL, &o, 1, NULL, 0, NULL, 10, &err), 1,
        "%s", err.msg);
    char **rel;
    size_t n = sb_sched_take_releases(s, w, &rel);
    for (size_t i = 0; i < n; i++)
        free(rel[i]);
    free(rel);
}

Test(sched_limit, the_finished_prefix_drops_the_later_splits)
{
    sb_err err;
    sb_sched *s = make("  - {name: f, op: identity}\n  - {name: l, op: limit, args: {rows: 5}}\n",
                       "streaming", &err);
    cr_assert_not_null(s, "%s", err.msg);
    sb_sched_task t[3];
    uint32_t att[3];
    for (size_t i = 0; i < 3; i++) {
        char w[8];
        snprintf(w, sizeof w, "w%zu", i);
        cr_assert_eq(sb_sched_assign(s, w, 1, 1, t), 1, "split %zu runs", i);
        cr_assert_eq(t[0].index, i);
        att[i] = t[0].attempt;
    }
    cr_expect(strstr(t[0].stages[1]->args_json, "\"op\":\"limit\",\"buckets\":1,") != NULL, "%s",
              t[0].stages[1]->args_json);
    complete(s, 0, 1, att[1], 10); /* split 1 alone: split 0 may still hold fewer rows */
    sb_sched_group_stats st;
    sb_sched_get_group_stats(s, 0, &st);
    cr_expect_eq(st.tasks_queued, 7, "nothing dropped before the prefix is known");
    complete(s, 0, 0, att[0], 2); /* splits 0 and 1 hold 12 rows >= 5 */
    sb_sched_get_group_stats(s, 0, &st);
    cr_expect_eq(st.tasks_queued, 0, "splits 3..9 dropped");
    cr_expect_eq(st.tasks_running, 1, "split 2 still runs");
    cr_expect_eq(sb_sched_assign(s, "w0", 2, 2, t), 0, "no source task left, no reduce yet");
    complete(s, 0, 2, att[2], 4);
    cr_assert_eq(sb_sched_assign(s, "w0", 2, 3, t), 1, "the one reduce task");
    cr_assert_eq(t[0].op, 1);
    cr_assert_eq(t[0].ninputs, 3);
    for (size_t i = 0; i < 3; i++) { /* in split order */
        char want[32];
        snprintf(want, sizeof want, "s0-t%zu-p0", i);
        cr_expect(strstr(t[0].inputs[i].id, want) != NULL, "input %zu: %s", i, t[0].inputs[i].id);
    }
    cr_assert_eq(t[0].index % 3, 0, "complete() reports it from w0");
    complete(s, 1, t[0].index, t[0].attempt, 5);
    cr_expect_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
    sb_sched_stats ss;
    sb_sched_get_stats(s, &ss);
    cr_expect_eq(ss.tasks_run, 4, "3 source tasks and the reduce of 10 splits");
    sb_sched_free(s);
    spec_fixture_free(&h);
}

Test(sched_limit, a_limit_past_op_0_is_refused)
{
    sb_err err;
    sb_sched *s = make("  - {name: f, op: identity}\n  - {name: l, op: limit, args: {rows: 5}}\n",
                       "staged", &err);
    cr_expect_null(s);
    cr_expect(strstr(err.msg, "stage l: limit takes the source's first rows, so it must run in "
                              "the source's tasks") != NULL,
              "%s", err.msg);
    spec_fixture_free(&h);
}
