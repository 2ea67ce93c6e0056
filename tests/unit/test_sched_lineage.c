/* The lineage table's size (issue 16: <= 256 bytes per partition, counted by
 * sb_sched_memory_get) on the shapes bench_ctl_load and bench_sched run, and the task ids it
 * no longer stores: completions name tasks by id, and an id the scheduler did not hand out
 * (another pipeline, leading zeros, an op or index that does not exist) matches no task. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sched/sched.h"
#include "spec_fixture.h"

static const char *one_op = "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
                            "metadata: {name: l}\nspec:\n"
                            "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
                            "  stages:\n  - {name: a, op: identity}\n"
                            "  sink: {uri: 'file:///out/', format: jsonl}\n"
                            "  execution: {memoryBudget: 1Ti}\n";

static const char *two_ops = "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
                             "metadata: {name: l}\nspec:\n"
                             "  source: {uri: 'file:///in/', format: jsonl, partitionSize: 1Ki}\n"
                             "  stages:\n  - {name: a, op: identity}\n"
                             "  - {name: g, op: identity, resources: {gpu: 1}}\n"
                             "  sink: {uri: 'file:///out/', format: jsonl}\n"
                             "  execution: {memoryBudget: 1Ti}\n";

/* Splits encoded as lib/io encodes a file's (offset, size, object size, path). */
static sb_sched *make(spec_holder *h, const char *yaml, size_t n, char (**names)[64])
{
    spec_fixture_load(h, yaml);
    sb_storage_split *sp = calloc(n, sizeof *sp);
    *names = calloc(n, sizeof **names);
    cr_assert(sp != NULL && *names != NULL);
    for (size_t i = 0; i < n; i++) {
        snprintf((*names)[i], 64, "0\t1024\t1024\t/load/in/f%07zu.jsonl", i);
        sp[i].split = (*names)[i];
        sp[i].bytes = 1024;
    }
    sb_sched_config cfg = {.pipeline = &h->p, .pipeline_id = "load/p"};
    sb_err err;
    sb_sched *s = sb_sched_new(&cfg, sp, n, &err);
    cr_assert_not_null(s, "%s", err.msg);
    free(sp);
    cr_assert_eq(sb_sched_worker_add(s, "c", "cpu", "127.0.0.1:1", 8, NULL, 0, 0, NULL), 0);
    cr_assert_eq(sb_sched_worker_add(s, "g", "gpu", "127.0.0.1:2", 8, NULL, 0, 0, NULL), 0);
    return s;
}

/* Runs the pipeline to the end: every task completes at once with one 1 KiB output. */
static void run_all(sb_sched *s)
{
    sb_sched_task t[8];
    uint64_t now = 1;
    while (sb_sched_state_get(s, NULL) == SB_SCHED_RUNNING) {
        size_t progressed = 0;
        const char *ws[2] = {"c", "g"};
        for (int w = 0; w < 2; w++) {
            size_t k = sb_sched_assign(s, ws[w], 8, now, t);
            char ids[8][128], out[8][64];
            uint32_t att[8];
            for (size_t i = 0; i < k; i++) {
                snprintf(ids[i], sizeof ids[i], "%s", t[i].task_id);
                snprintf(out[i], sizeof out[i], "s%" PRIu32 "-t%" PRIu64 "-p0", t[i].op,
                         t[i].index);
                att[i] = t[i].attempt;
            }
            for (size_t i = 0; i < k; i++) {
                sb_storage_output o = {.id = out[i], .bytes = 1024, .rows = 10};
                sb_err err;
                cr_assert_eq(sb_sched_complete(s, ws[w], ids[i], att[i], SB_SCHED_OK, NULL, &o, 1,
                                               NULL, 0, NULL, now, &err),
                             1, "%s", err.msg);
                char **rel;
                size_t nr = sb_sched_take_releases(s, ws[w], &rel);
                for (size_t r = 0; r < nr; r++)
                    free(rel[r]);
                free(rel);
            }
            progressed += k;
            now++;
        }
        cr_assert_gt(progressed, 0, "the pipeline stalled");
    }
    cr_assert_eq(sb_sched_state_get(s, NULL), SB_SCHED_SUCCEEDED);
}

static void check_lineage(const char *yaml, size_t n, uint64_t want_parts)
{
    spec_holder h;
    char(*names)[64];
    sb_sched *s = make(&h, yaml, n, &names);
    run_all(s);
    sb_sched_memory m;
    sb_sched_memory_get(s, &m);
    cr_assert_eq(m.parts + m.sink_parts, want_parts);
    double per = (double)m.total_bytes / (double)(m.parts + m.sink_parts);
    cr_expect_leq(per, 256.0,
                  "%.1f B per partition (tasks %" PRIu64 ", parts %" PRIu64 ", sink %" PRIu64
                  ", maps %" PRIu64 ", splits %" PRIu64 ", pool %" PRIu64 ")",
                  per, m.task_bytes, m.part_bytes, m.sink_bytes, m.map_bytes, m.split_bytes,
                  m.pool_bytes);
    cr_expect_gt(per, 100.0, "the count misses something: %.1f B per partition", per);
    sb_sched_free(s);
    free(names);
    spec_fixture_free(&h);
}

Test(sched_lineage, source_to_sink_stays_within_256_bytes_per_partition)
{
    check_lineage(one_op, 50000, 50000);
}

Test(sched_lineage, two_ops_stay_within_256_bytes_per_partition)
{
    check_lineage(two_ops, 50000, 100000);
}

Test(sched_lineage, an_id_it_did_not_hand_out_matches_no_task)
{
    spec_holder h;
    char(*names)[64];
    sb_sched *s = make(&h, two_ops, 4, &names);
    sb_sched_task t[8];
    size_t k = sb_sched_assign(s, "c", 8, 1, t); /* one probe: op 0's ratio is not known */
    cr_assert_eq(k, 1);
    cr_expect_str_eq(t[0].task_id, "load/p/s0-t0");
    cr_expect_str_eq(t[0].split, names[0]);
    const char *bad[] = {
        "load/p/s0-t00", "load/p/s0-t4",  "load/p/s1-t0", "load/p/s2-t0", "load/q/s0-t0",
        "load/p/s0-t",   "load/p/s0-t0x", "load/p/",      "load/ps0-t0",  "",
        "load/p/s00-t0", "load/p/s0-t-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sb_storage_output o = {.id = "s0-t0-p0", .bytes = 1, .rows = 1};
        sb_err err;
        cr_assert_eq(sb_sched_complete(s, "c", bad[i], t[0].attempt, SB_SCHED_OK, NULL, &o, 1, NULL,
                                       0, NULL, 2, &err),
                     0, "%s: %s", bad[i], err.msg);
        sb_sched_stats st;
        sb_sched_get_stats(s, &st);
        cr_expect_eq(st.partition_bytes, 0, "%s was taken for a task: its output was kept", bad[i]);
        cr_expect_eq(st.tasks_run, 1);
        char **rel;
        size_t nr = sb_sched_take_releases(s, "c", &rel);
        cr_expect_eq(nr, 1, "%s: its output is released as stale", bad[i]);
        for (size_t r = 0; r < nr; r++)
            free(rel[r]);
        free(rel);
    }
    /* the real id completes the task, and the op-1 task it feeds gets an id of its own */
    sb_storage_output o = {.id = "s0-t0-p0", .bytes = 1024, .rows = 1};
    cr_assert_eq(sb_sched_complete(s, "c", "load/p/s0-t0", t[0].attempt, SB_SCHED_OK, NULL, &o, 1,
                                   NULL, 0, NULL, 3, NULL),
                 1);
    k = sb_sched_assign(s, "g", 8, 4, t);
    cr_assert_geq(k, 1);
    cr_expect_str_eq(t[0].task_id, "load/p/s1-t0");
    cr_expect_eq(t[0].ninputs, 1);
    cr_expect_str_eq(t[0].inputs[0].id, "s0-t0-p0");
    sb_sched_free(s);
    free(names);
    spec_fixture_free(&h);
}
