/* The controller's scheduler passthroughs for failover and elasticity: a resume handed to
 * sb_ctl_start, the checkpoint, worker removability and pool demand (all under the
 * controller's lock), and the stall watchdog's clock starting at creation. Real gRPC server on
 * loopback, no workers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/ctl/ctl.h"
#include "doc/doc.h"
#include "spec/pipeline.h"
#include "testauth.h"

static const char *YAML =
    "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: c}\n"
    "spec:\n  source: {uri: 'file:///in', format: text, partitionSize: 1Mi}\n"
    "  stages: [{name: a, op: identity}]\n  sink: {uri: 'file:///out', format: text}\n"
    "  execution: {memoryBudget: 8Mi}\n";

typedef struct {
    sb_doc *doc;
    sb_pipeline p;
} spec_holder;

static void load(spec_holder *h)
{
    h->doc = sb_doc_parse_yaml(YAML, strlen(YAML), NULL);
    sb_diags d = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(h->doc, 0), &h->p, &d), 0);
    cr_assert_eq(d.n, 0);
}

static void unload(spec_holder *h)
{
    sb_pipeline_free(&h->p);
    sb_doc_free(h->doc);
}

static sb_ctl *start(spec_holder *h, const sb_sched_resume *resume, sb_err *err)
{
    static sb_storage_split splits[3] = {
        {"in\t0\t100", 100}, {"in\t100\t200", 100}, {"in\t200\t300", 100}};
    sb_ctl_config cfg = {.pipeline = &h->p,
                         .pipeline_id = "default/c",
                         .splits = splits,
                         .nsplits = 3,
                         .resume = resume};
    return sb_ctl_start(&cfg, sb_test_ctl_opts(NULL), err);
}

Test(sched_ctl, resume_checkpoint_and_demand)
{
    spec_holder h;
    load(&h);
    sb_storage_output kept[] = {{"s0-t1-p0", 100, 10, 5, NULL}};
    sb_sched_resume r = {.epoch = 1, .committed_splits = "1", .parts = kept, .nparts = 1};
    sb_err err;
    sb_ctl *c = start(&h, &r, &err);
    cr_assert_not_null(c, "%s", err.msg);
    char *ranges;
    sb_storage_output *parts;
    size_t n;
    cr_assert_eq(sb_ctl_checkpoint(c, &ranges, &parts, &n, &err), 0, "%s", err.msg);
    cr_expect_str_eq(ranges, "1");
    cr_assert_eq(n, 1);
    cr_expect_str_eq(parts[0].id, "s0-t1-p0");
    cr_expect_eq(parts[0].crc32c, 5);
    free(ranges);
    sb_ctl_parts_free(parts, n);
    uint64_t q, run;
    int act;
    sb_ctl_pool_demand(c, "cpu", &q, &run, &act);
    cr_expect(q == 2 && run == 0 && act == 1, "the two uncommitted splits");
    sb_ctl_pool_demand(c, "gpu", &q, &run, &act);
    cr_expect(q == 0 && run == 0 && act == 0);
    cr_expect_eq(sb_ctl_worker_removable(c, "w1"), 0, "unknown worker");
    char stall[256];
    cr_expect_eq(sb_ctl_stalled(c, 5000, stall, sizeof stall), 0,
                 "no stall report right after the start: %s", stall);
    sb_ctl_snapshot s;
    sb_ctl_snapshot_get(c, &s);
    cr_expect_eq(s.stats.sink_parts, 1);
    cr_expect_eq(s.ops[0].resumed, 1);
    sb_ctl_free(c);
    unload(&h);
}

Test(sched_ctl, bad_resume_fails_the_start)
{
    spec_holder h;
    load(&h);
    sb_sched_resume r = {.epoch = 1, .committed_splits = "2,0"};
    sb_err err = {0};
    cr_expect_null(start(&h, &r, &err));
    cr_expect(strstr(err.msg, "resume: split ranges: piece \"0\" is out of order") != NULL, "%s",
              err.msg);
    unload(&h);
}
