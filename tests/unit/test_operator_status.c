/* The operator's pure status code: conditions (transition times kept when nothing flips),
 * checkpoint encoding and its strict parser (the status may be edited by anyone), progress and
 * stages from a snapshot, and the spec comparison that refuses changes a running pipeline
 * cannot take. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/operator/operator_events.h"
#include "controller/operator/operator_plan.h"
#include "controller/operator/operator_run.h"
#include "plan/fromspec.h"
#include "controller/operator/operator_status.h"

static const char *sget(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

Test(opr_status, time_round_trip)
{
    char b[32];
    sb_operator_time_format(1714564800, b, sizeof b);
    cr_expect_str_eq(b, "2024-05-01T12:00:00Z");
    time_t t = 0;
    cr_expect_eq(sb_operator_time_parse(b, &t), 0);
    cr_expect_eq(t, 1714564800);
    cr_expect_eq(sb_operator_time_parse("2024-05-01T12:00:00.123456Z", &t), 0);
    cr_expect_eq(t, 1714564800);
    cr_expect_neq(sb_operator_time_parse("2024-05-01T12:00:00+02:00", &t), 0);
    cr_expect_neq(sb_operator_time_parse("yesterday", &t), 0);
    cr_expect_neq(sb_operator_time_parse(NULL, &t), 0);
}

Test(opr_status, condition_transition_time_only_on_flip)
{
    cJSON *st = cJSON_CreateObject();
    cr_expect_eq(sb_operator_condition_set(st, "Running", 1, "Running", "", 1, "T1"), 1);
    cr_expect_eq(sb_operator_condition_set(st, "Running", 1, "Running", "", 1, "T2"), 0,
                 "same condition again is no change");
    const cJSON *c = sb_operator_condition_get(st, "Running");
    cr_assert_not_null(c);
    cr_expect_str_eq(sget(c, "lastTransitionTime"), "T1");
    cr_expect_eq(sb_operator_condition_set(st, "Running", 1, "Running", "msg", 2, "T3"), 1);
    cr_expect_str_eq(sget(c, "lastTransitionTime"), "T1", "message change is no transition");
    cr_expect_eq(cJSON_GetObjectItem(c, "observedGeneration")->valuedouble, 2);
    cr_expect_eq(sb_operator_condition_set(st, "Running", 0, "Succeeded", "", 2, "T4"), 1);
    cr_expect_str_eq(sget(c, "lastTransitionTime"), "T4");
    cr_expect_str_eq(sget(c, "status"), "False");
    cr_expect_eq(sb_operator_condition_true(st, "Running"), 0);
    sb_operator_condition_set(st, "Complete", 1, "Succeeded", "", 2, "T4");
    cr_expect(sb_operator_condition_true(st, "Complete"));
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(st, "conditions")), 2);
    cr_expect_null(sb_operator_condition_get(st, "Failed"));
    cJSON_Delete(st);
}

Test(opr_status, part_format_and_strict_parse)
{
    sb_storage_output p = {.id = "s1-t2-p0", .rows = 10, .bytes = 1234, .crc32c = 4294967295u};
    char *s = sb_ckpt_part_format(&p);
    cr_expect_str_eq(s, "s1-t2-p0:10:1234:4294967295");
    sb_storage_output q;
    sb_err err;
    cr_assert_eq(sb_ckpt_part_parse(s, &q, &err), 0, "%s", err.msg);
    cr_expect_str_eq(q.id, "s1-t2-p0");
    cr_expect_eq(q.rows, 10);
    cr_expect_eq(q.bytes, 1234);
    cr_expect_eq(q.crc32c, 4294967295u);
    cr_expect_null(q.order);
    free((char *)q.id);
    free(s);
    /* preserveOrder parts carry their order key */
    p.order = "7.0.12";
    s = sb_ckpt_part_format(&p);
    cr_expect_str_eq(s, "s1-t2-p0:10:1234:4294967295:7.0.12");
    cr_assert_eq(sb_ckpt_part_parse(s, &q, &err), 0, "%s", err.msg);
    cr_expect_str_eq(q.order, "7.0.12");
    free((char *)q.id);
    free((char *)q.order);
    free(s);
    const char *bad[] = {"",
                         ":1:2:3",
                         "a:1:2",
                         "a:1:2:3:",
                         "a:1:2:3:4.",
                         "a:1:2:3:.4",
                         "a:1:2:3:4..5",
                         "a:1:2:3:x",
                         "a:1:2:3:4:5",
                         "a:01:2:3",
                         "a:-1:2:3",
                         "a:+1:2:3",
                         "a:1:2:4294967296",
                         "a:1:99999999999999999999:3",
                         "a b:1:2:3",
                         "a:1: 2:3",
                         "a:1:2:3 ",
                         "a/b:1:2:3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_neq(sb_ckpt_part_parse(bad[i], &q, &err), 0, "accepted \"%s\"", bad[i]);
    cr_expect_neq(sb_ckpt_part_parse(NULL, &q, &err), 0);
}

Test(opr_status, checkpoint_round_trip)
{
    sb_storage_output parts[2] = {{.id = "s0-t0-p0", .rows = 3, .bytes = 30, .crc32c = 7},
                                  {.id = "s0-t1-p0", .rows = 4, .bytes = 40, .crc32c = 8}};
    cJSON *j = sb_ckpt_json(3, "00ff00ff00ff00ff", "0123456789abcdef", "0-1", parts, 2);
    char *txt = cJSON_PrintUnformatted(j);
    cr_expect_str_eq(txt, "{\"epoch\":3,\"specHash\":\"00ff00ff00ff00ff\",\"planHash\":"
                          "\"0123456789abcdef\",\"committedSplits\":\"0-1\",\"parts\":["
                          "\"s0-t0-p0:3:30:7\",\"s0-t1-p0:4:40:8\"]}");
    sb_ckpt cp;
    sb_err err;
    cr_assert_eq(sb_ckpt_parse(j, 5, "status.checkpoint", &cp, &err), 0, "%s", err.msg);
    cr_expect_eq(cp.epoch, 3);
    cr_expect_str_eq(cp.committed_splits, "0-1");
    cr_expect_eq(cp.ncommitted, 2);
    cr_expect_eq(cp.nparts, 2);
    cr_expect_str_eq(cp.parts[1].id, "s0-t1-p0");
    cr_expect_eq(cp.parts[1].crc32c, 8);
    cr_expect_str_eq(cp.spec_hash, "00ff00ff00ff00ff");
    cr_expect_str_eq(cp.plan_hash, "0123456789abcdef");
    sb_ckpt_free(&cp);
    /* hashes are optional */
    cJSON *k = sb_ckpt_json(0, NULL, "", "", NULL, 0);
    char *kt = cJSON_PrintUnformatted(k);
    cr_expect_str_eq(kt, "{\"epoch\":0,\"committedSplits\":\"\",\"parts\":[]}");
    free(kt);
    cJSON_Delete(k);
    /* an index beyond the plan is refused, with the field named */
    cr_expect_neq(sb_ckpt_parse(j, 1, "status.checkpoint", &cp, &err), 0);
    cr_expect(strstr(err.msg, "status.checkpoint.committedSplits") != NULL, "%s", err.msg);
    cJSON_Delete(j);
    free(txt);
}

Test(opr_status, checkpoint_rejects_edited_status)
{
    struct {
        const char *json, *needle;
    } cases[] = {
        {"[]", "must be an object"},
        {"{\"committedSplits\":\"\"}", "status.checkpoint.epoch"},
        {"{\"epoch\":-1}", "status.checkpoint.epoch"},
        {"{\"epoch\":1.5}", "status.checkpoint.epoch"},
        {"{\"epoch\":1,\"committedSplits\":3}", "committedSplits: must be a string"},
        {"{\"epoch\":1,\"committedSplits\":\"3-1\"}", "status.checkpoint.committedSplits"},
        {"{\"epoch\":1,\"parts\":\"x\"}", "status.checkpoint.parts"},
        {"{\"epoch\":1,\"parts\":[\"a:1:2:3\",5]}", "status.checkpoint.parts[1]"},
        {"{\"epoch\":1,\"parts\":[\"a:1:2:3\",\"a:1:2:3\"]}", "listed twice"},
        {"{\"epoch\":1,\"parts\":[\"a:1:2:3\",\"b:1:2:3\",\"c:1:2:3\",\"b:1:2:3\"]}",
         "status.checkpoint.parts[3]: part b is listed twice"},
        {"{\"epoch\":1,\"specHash\":\"ABCDEF0123456789\"}", "status.checkpoint.specHash"},
        {"{\"epoch\":1,\"specHash\":\"0123\"}", "status.checkpoint.specHash"},
        {"{\"epoch\":1,\"specHash\":7}", "status.checkpoint.specHash"},
        {"{\"epoch\":1,\"planHash\":\"xyz\"}", "status.checkpoint.planHash"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *j = cJSON_Parse(cases[i].json);
        cr_assert_not_null(j);
        sb_ckpt cp;
        sb_err err = {0};
        cr_expect_neq(sb_ckpt_parse(j, 10, "status.checkpoint", &cp, &err), 0, "accepted %s",
                      cases[i].json);
        cr_expect(strstr(err.msg, cases[i].needle) != NULL, "%s: %s", cases[i].json, err.msg);
        cr_expect_null(cp.parts);
        cr_expect_null(cp.committed_splits);
        cJSON_Delete(j);
    }
    /* an empty checkpoint is fine */
    cJSON *j = cJSON_Parse("{\"epoch\":0}");
    sb_ckpt cp;
    sb_err err;
    cr_expect_eq(sb_ckpt_parse(j, 4, "status.checkpoint", &cp, &err), 0, "%s", err.msg);
    cr_expect_eq(cp.ncommitted, 0);
    cr_expect_str_eq(cp.committed_splits, "");
    sb_ckpt_free(&cp);
    cJSON_Delete(j);
}

Test(opr_status, progress_and_stages)
{
    sb_ctl_snapshot s;
    memset(&s, 0, sizeof s);
    s.nops = 2;
    s.ops[0] = (sb_sched_group_stats){.name = "read+parse",
                                      .pool = "cpu",
                                      .tasks_running = 2,
                                      .rows_out = 100,
                                      .bytes_out = 1000};
    s.ops[1] = (sb_sched_group_stats){
        .name = "embed", .pool = "gpu", .tasks_running = 1, .rows_out = 50, .errored = 1};
    s.stats.partitions_recovered = 3;
    sb_operator_pool_view pools[2] = {{"cpu", 3, 2, 1}, {"gpu", 1, 0, 1}};
    cJSON *st = cJSON_CreateObject();
    cr_assert_eq(sb_operator_status_progress(st, &s, 10, 4, pools, 2, 10.0), 0);
    cr_expect_str_eq(sget(st, "progress"), "4/10");
    cJSON *pt = cJSON_GetObjectItem(st, "partitions");
    cr_expect_eq(cJSON_GetObjectItem(pt, "total")->valuedouble, 10);
    cr_expect_eq(cJSON_GetObjectItem(pt, "committed")->valuedouble, 4);
    cr_expect_eq(cJSON_GetObjectItem(pt, "inFlight")->valuedouble, 3);
    cr_expect_eq(cJSON_GetObjectItem(pt, "recovered")->valuedouble, 3);
    cr_expect_eq(cJSON_GetObjectItem(pt, "errored")->valuedouble, 1);
    cJSON *stages = cJSON_GetObjectItem(st, "stages");
    cr_assert_eq(cJSON_GetArraySize(stages), 2);
    cJSON *s0 = cJSON_GetArrayItem(stages, 0), *s1 = cJSON_GetArrayItem(stages, 1);
    cr_expect_str_eq(sget(s0, "name"), "read+parse");
    cr_expect_str_eq(sget(s0, "pool"), "cpu");
    cr_expect_eq(cJSON_GetObjectItem(s0, "workersDesired")->valuedouble, 3);
    cr_expect_eq(cJSON_GetObjectItem(s0, "workersReady")->valuedouble, 2);
    cr_expect_eq(cJSON_GetObjectItem(s0, "rowsPerSecond")->valuedouble, 10);
    cr_expect_str_eq(sget(s1, "pool"), "gpu");
    cr_expect_eq(cJSON_GetObjectItem(s1, "workersReady")->valuedouble, 0);
    /* a second call replaces, not appends */
    cr_assert_eq(sb_operator_status_progress(st, &s, 10, 5, pools, 2, 10.0), 0);
    cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItem(st, "stages")), 2);
    cr_expect_str_eq(sget(st, "progress"), "5/10");
    cJSON_Delete(st);
}

static int diff(const char *a, const char *b, char *buf, size_t len)
{
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    cr_assert(x != NULL && y != NULL);
    int n = sb_operator_spec_diff(x, y, buf, len);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return n;
}

Test(opr_status, spec_diff_ignores_live_fields)
{
    char buf[256];
    const char *base = "{\"source\":{\"uri\":\"file:///a\"},\"stages\":[{\"name\":\"a\",\"op\":"
                       "\"identity\",\"workers\":{\"min\":1,\"max\":2}}],\"suspend\":false}";
    cr_expect_eq(diff(base, base, buf, sizeof buf), 0);
    cr_expect_str_eq(buf, "");
    cr_expect_eq(diff(base,
                      "{\"source\":{\"uri\":\"file:///a\"},\"stages\":[{\"name\":\"a\",\"op\":"
                      "\"identity\",\"workers\":{\"min\":3,\"max\":9}}],\"suspend\":true,"
                      "\"ttlSecondsAfterFinished\":5}",
                      buf, sizeof buf),
                 0, "workers, suspend and ttl apply live: %s", buf);
    cr_expect_eq(diff(base,
                      "{\"source\":{\"uri\":\"file:///b\"},\"stages\":[{\"name\":\"a\",\"op\":"
                      "\"upper\",\"workers\":{\"min\":1,\"max\":2}}],\"sink\":{}}",
                      buf, sizeof buf),
                 3);
    cr_expect_str_eq(buf, "spec.source, spec.stages[0].op, spec.sink");
    cr_expect_eq(diff(base, "{\"source\":{\"uri\":\"file:///a\"},\"stages\":[]}", buf, sizeof buf),
                 1);
    cr_expect_str_eq(buf, "spec.stages");
    /* truncation keeps the buffer terminated */
    char small[12];
    cr_expect_eq(diff(base, "{\"x\":1,\"y\":2,\"z\":3}", small, sizeof small), 5);
    cr_expect_eq(strlen(small), sizeof small - 1);
    cr_expect(strstr(small, "...") != NULL, "%s", small);
}

static void hash_of(const char *json, char out[17])
{
    cJSON *j = cJSON_Parse(json);
    cr_assert_not_null(j, "%s", json);
    sb_ckpt_spec_hash(j, out);
    cJSON_Delete(j);
    cr_assert_eq(strlen(out), 16);
    cr_assert_eq(strspn(out, "0123456789abcdef"), 16, "%s", out);
}

/* A checkpoint is kept across suspend/resume only for the spec that made it: the hash ignores
 * key order and what applies live, and changes with anything else. */
Test(opr_status, spec_hash_ignores_order_and_live_fields_only)
{
    char a[17], b[17];
    hash_of("{\"source\":{\"uri\":\"file:///a\",\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\","
            "\"op\":\"identity\",\"workers\":{\"min\":1,\"max\":2}}],\"suspend\":false}",
            a);
    hash_of("{\"suspend\":true,\"ttlSecondsAfterFinished\":9,\"stages\":[{\"workers\":{\"max\":7},"
            "\"op\":\"identity\",\"name\":\"a\"}],\"source\":{\"format\":\"jsonl\",\"uri\":"
            "\"file:///a\"}}",
            b);
    cr_expect_str_eq(a, b, "order, suspend, ttl and workers must not change it");
    const char *changed[] = {
        "{\"source\":{\"uri\":\"file:///b\",\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\","
        "\"op\":\"identity\"}]}",
        "{\"source\":{\"uri\":\"file:///a\",\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\","
        "\"op\":\"filter\"}]}",
        "{\"source\":{\"uri\":\"file:///a\",\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\","
        "\"op\":\"identity\"}],\"sink\":{\"uri\":\"file:///o\"}}",
        /* a string "1" and a number 1 differ; so does a key moved into another object */
        "{\"source\":{\"uri\":\"file:///a\",\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\","
        "\"op\":\"identity\",\"args\":{\"n\":\"1\"}}]}",
        "{\"source\":{\"uri\":\"file:///a\",\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\","
        "\"op\":\"identity\",\"args\":{\"n\":1}}]}",
        /* workers is live only inside a stage */
        "{\"source\":{\"uri\":\"file:///a\",\"format\":\"jsonl\",\"workers\":1},\"stages\":[{"
        "\"name\":\"a\",\"op\":\"identity\"}]}",
    };
    char seen[8][17];
    for (size_t i = 0; i < sizeof changed / sizeof *changed; i++) {
        hash_of(changed[i], seen[i]);
        cr_expect_str_neq(seen[i], a, "%s", changed[i]);
        for (size_t k = 0; k < i; k++)
            cr_expect_str_neq(seen[i], seen[k], "%s", changed[i]);
    }
    /* parsed back from a checkpoint */
    cJSON *j = cJSON_Parse("{\"epoch\":2,\"specHash\":\"00ff00ff00ff00ff\"}");
    sb_ckpt cp;
    sb_err err;
    cr_assert_eq(sb_ckpt_parse(j, 4, "status.checkpoint", &cp, &err), 0, "%s", err.msg);
    cr_expect_str_eq(cp.spec_hash, "00ff00ff00ff00ff");
    sb_ckpt_free(&cp);
    cJSON_Delete(j);
}

/* Regression: after a run finished, a reconcile from a stale cache (phase still Running) started
 * the pipeline again, whose sink preparation removed the committed _SUCCESS. The finished run is
 * remembered until the cache shows the terminal phase of the same Pipeline. */
Test(opr_status, finished_run_is_remembered_until_the_cache_catches_up)
{
    cr_expect_eq(sb_operator_finished_seen("u1", "u1", "Running"), 0, "stale cache: must wait");
    cr_expect_eq(sb_operator_finished_seen("u1", "u1", ""), 0, "no phase yet: must wait");
    cr_expect_eq(sb_operator_finished_seen("u1", "u1", NULL), 0);
    cr_expect_eq(sb_operator_finished_seen("u1", "u1", "Succeeded"), 1);
    cr_expect_eq(sb_operator_finished_seen("u1", "u1", "Failed"), 1);
    cr_expect_eq(sb_operator_finished_seen("u1", "u2", "Running"), 1,
                 "re-created under the same name");
    cr_expect_eq(sb_operator_finished_seen("u1", NULL, "Running"), 1);
}

/* Every errored partition is in status.erroredPartitions (stage, split, error) and has its
 * PartitionErrored event message; none: the list is absent. */
Test(opr_status, errored_partitions_are_listed)
{
    sb_storage_errored e[2] = {
        {"pick", "ns/p/s0-t4", "split in/bad.jsonl",
         "reading in/bad.jsonl: record 1 is not valid JSON"},
        {"a+b", "ns/p/s1-t2", "input partition s0-t3-p0", "op b: boom"},
    };
    cJSON *st = cJSON_CreateObject();
    cr_assert_eq(sb_operator_status_errored(st, e, 2), 0);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(st, "erroredPartitions");
    cr_assert(cJSON_IsArray(arr));
    cr_assert_eq(cJSON_GetArraySize(arr), 2);
    const cJSON *x = cJSON_GetArrayItem(arr, 0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(x, "stage")->valuestring, "pick");
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(x, "split")->valuestring,
                     "split in/bad.jsonl");
    cr_expect(strstr(cJSON_GetObjectItemCaseSensitive(x, "error")->valuestring, "not valid JSON"));
    cr_assert_eq(sb_operator_status_errored(st, e, 0), 0);
    cr_expect_null(cJSON_GetObjectItemCaseSensitive(st, "erroredPartitions"));
    cJSON_Delete(st);
    char m[1024];
    sb_operator_event_errored_message(e[0].stage, e[0].input, e[0].error, m, sizeof m);
    cr_expect_str_eq(m, "stage pick: split in/bad.jsonl: reading in/bad.jsonl: record 1 is not "
                        "valid JSON; its records are not in the output");
}

/* The printer columns Workers and Throughput show status.workers and status.throughput. */
Test(opr_status, workers_and_throughput_columns)
{
    sb_ctl_snapshot s;
    memset(&s, 0, sizeof s);
    s.nops = 2;
    s.ops[0] = (sb_sched_group_stats){.name = "read+parse", .pool = "cpu", .rows_out = 100000};
    s.ops[1] = (sb_sched_group_stats){.name = "embed", .pool = "gpu", .rows_out = 12345};
    sb_operator_pool_view pools[2] = {{"cpu", 3, 2, 1}, {"gpu", 1, 1, 0}};
    cJSON *st = cJSON_CreateObject();
    cr_assert_eq(sb_operator_status_progress(st, &s, 10, 4, pools, 2, 10.0), 0);
    cr_expect_str_eq(sget(st, "workers"), "3/4", "ready/desired summed over the pools");
    cr_expect_str_eq(sget(st, "throughput"), "1.23k rows/s", "the last stage's rows per second");
    cr_assert_eq(sb_operator_status_progress(st, &s, 10, 4, NULL, 0, 0.0), 0);
    cr_expect_str_eq(sget(st, "workers"), "0/0");
    cr_expect_str_eq(sget(st, "throughput"), "0 rows/s", "no time elapsed yet");
    cJSON_Delete(st);

    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {0, "0 rows/s"},          {-5, "0 rows/s"},        {0.0004, "0 rows/s"},
        {0.5, "0.5 rows/s"},      {12.34, "12.3 rows/s"},  {850, "850 rows/s"},
        {999.4, "999 rows/s"},    {999.6, "1k rows/s"},    {1200, "1.2k rows/s"},
        {1234, "1.23k rows/s"},   {123456, "123k rows/s"}, {999999, "1M rows/s"},
        {12.3e6, "12.3M rows/s"}, {4.5e9, "4.5G rows/s"},  {7e15, "7P rows/s"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char b[48];
        sb_operator_rate_format(cases[i].v, b, sizeof b);
        cr_expect_str_eq(b, cases[i].want, "%g rows/s", cases[i].v);
    }
    char nan_buf[48];
    sb_operator_rate_format(0.0 / 0.0, nan_buf, sizeof nan_buf);
    cr_expect_str_eq(nan_buf, "0 rows/s");
}

/* status.failingCondition (the -o wide column) follows the conditions: the first True one of
 * a type that means trouble, "<reason>: <message>"; status.workers is 0/0 once Running is False. */
Test(opr_status, failing_condition_column)
{
    cJSON *st = cJSON_CreateObject();
    sb_operator_condition_set(st, "Running", 1, "Running", "", 1, "T1");
    sb_operator_condition_set(st, "Suspended", 0, "Resumed", "", 1, "T1");
    cr_expect_null(cJSON_GetObjectItem(st, "failingCondition"), "nothing wrong: no field");
    cr_expect_eq(sb_operator_condition_set(st, "WorkersPending", 1, "Unschedulable",
                                           "pool gpu: 0/2 nodes are available", 1, "T2"),
                 1);
    cr_expect_str_eq(sget(st, "failingCondition"),
                     "Unschedulable: pool gpu: 0/2 nodes are available");
    sb_operator_condition_set(st, "SpecChangeRefused", 1, "SpecChangeRefused", "spec.sink", 2,
                              "T3");
    cr_expect_str_eq(sget(st, "failingCondition"),
                     "Unschedulable: pool gpu: 0/2 nodes are available", "the first one wins");
    sb_operator_condition_set(st, "WorkersPending", 0, "WorkersScheduled", "", 2, "T4");
    cr_expect_str_eq(sget(st, "failingCondition"), "SpecChangeRefused: spec.sink");
    cJSON *w = cJSON_CreateString("3/4");
    cJSON_AddItemToObject(st, "workers", w);
    sb_operator_condition_set(st, "SpecChangeRefused", 0, "Finished", "", 2, "T5");
    cr_expect_null(cJSON_GetObjectItem(st, "failingCondition"), "False conditions never fail");
    cr_expect_str_eq(sget(st, "workers"), "3/4", "Running is still True");
    /* the finish path: Running False, then Failed True with an empty message */
    sb_operator_condition_set(st, "Running", 0, "Failed", "", 2, "T6");
    cr_expect_str_eq(sget(st, "workers"), "0/0", "no worker pods once Running is False");
    cr_expect_null(cJSON_GetObjectItem(st, "failingCondition"), "Running False is not trouble");
    sb_operator_condition_set(st, "Failed", 1, "Stalled", "", 2, "T6");
    cr_expect_str_eq(sget(st, "failingCondition"), "Stalled");
    cJSON_Delete(st);

    /* a long message is cut at a character boundary, with "..." */
    st = cJSON_CreateObject();
    char msg[600];
    memset(msg, 'a', sizeof msg);
    memcpy(msg + 239, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 14);
    msg[sizeof msg - 1] = '\0';
    sb_operator_condition_set(st, "InvalidSpec", 1, "InvalidSpec", msg, 1, "T1");
    const char *fc = sget(st, "failingCondition");
    cr_assert_not_null(fc);
    size_t n = strlen(fc);
    cr_expect_leq(n, SB_OPERATOR_FAILING_MAX);
    cr_expect_str_eq(fc + n - 3, "...");
    cr_expect_eq(strncmp(fc, "InvalidSpec: aaa", 16), 0);
    /* "InvalidSpec: " is 13 bytes, so the é's start at byte 252: the cut at 253 (256 less
     * "...") falls inside one, which is dropped whole */
    cr_expect_eq(n, 252 + 3, "cut before the character at byte 252: %zu", n);
    cr_expect_eq((unsigned char)fc[251], 'a');
    cJSON_Delete(st);
}

/* The -o wide Mode column reads status.mode: written for every run, also when spec.execution
 * (and so spec.execution.mode) is absent, where the printer column showed nothing before. */
Test(opr_status, mode_column)
{
    cJSON *st = cJSON_CreateObject();
    cr_assert_eq(sb_operator_status_mode(st, SB_MODE_STREAMING), 0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(st, "mode")->valuestring, "streaming");
    cr_assert_eq(sb_operator_status_mode(st, SB_MODE_STATIC), 0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(st, "mode")->valuestring, "static");
    cr_assert_eq(sb_operator_status_mode(st, SB_MODE_STAGED), 0);
    cr_expect_str_eq(cJSON_GetObjectItemCaseSensitive(st, "mode")->valuestring, "staged");
    cJSON_Delete(st);
}

/* ---- cost-aware placement (operator_plan.h) ---- */

/* A Pipeline object: stages a (cpu), b+c fused or not, b with a placement choice; `extra` goes
 * into spec.execution. */
static cJSON *plan_object(const char *b_placement, const char *execution)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"metadata\": {\"name\": \"p\", \"namespace\": \"ns\", \"uid\": \"u\"},"
             " \"spec\": {\"source\": {\"uri\": \"s3://bucket-in/\", \"format\": \"jsonl\"},"
             " \"stages\": ["
             "  {\"name\": \"a\", \"op\": \"bench.spin\", \"args\": {\"msPerRecord\": 1}},"
             "  {\"name\": \"b\", \"op\": \"bench.spin\", \"args\": {\"msPerRecord\": 4},"
             "   \"resources\": {\"cpu\": \"1\"},"
             "   \"placement\": %s%s},"
             "  {\"name\": \"c\", \"op\": \"bench.spin\", \"args\": {\"msPerRecord\": 0.1}}],"
             " \"sink\": {\"uri\": \"s3://bucket-out/\", \"format\": \"jsonl\"},"
             " \"execution\": {%s}}}",
             b_placement,
             strstr(b_placement, "gpu") ? ", \"shapeArgs\": {\"gpu\": {\"msPerRecord\": 0.5}}" : "",
             execution);
    cJSON *o = cJSON_Parse(text);
    cr_assert_not_null(o);
    return o;
}

static void plan_pipeline(sb_pipeline *p, const char *b_placement, const char *execution)
{
    cJSON *o = plan_object(b_placement, execution);
    char msg[1024];
    int bad = sb_operator_decode(o, p, NULL, msg, sizeof msg);
    cJSON_Delete(o);
    cr_assert_eq(bad, 0, "%s", msg);
}

Test(opr_plan, wanted_with_a_choice_or_a_target)
{
    sb_pipeline p;
    plan_pipeline(&p, "[\"cpu\", \"gpu\"]", "");
    cr_expect_eq(sb_operator_plan_wanted(&p), 1, "placement choice");
    sb_pipeline_free(&p);
    plan_pipeline(&p, "[\"cpu\"]", "");
    cr_expect_eq(sb_operator_plan_wanted(&p), 0, "one shape each, no target");
    sb_pipeline_free(&p);
    plan_pipeline(&p, "[\"cpu\"]", "\"target\": {\"rowsPerSecond\": 100}");
    cr_expect_eq(sb_operator_plan_wanted(&p), 1, "a target");
    sb_pipeline_free(&p);
}

/* An all-to-all stage runs as two ops, "<stage>.map" and "<stage>" (controller/sched/exchange.h):
 * its rate counts the task time of both halves, not the reduce half's alone. */
Test(opr_plan, measure_all_to_all_stage_counts_both_halves)
{
    sb_pipeline p;
    plan_pipeline(&p, "[\"cpu\", \"gpu\"]", "");
    uint32_t slots[3] = {1, 2, 2};
    /* a's map half: 1000 rows in 10 task-s; its reduce half: 1000 in, 500 out in 10 task-s */
    sb_operator_plan_op cur[3] = {
        {"a.map", 1000, 1000, 4, 10.0}, {"a", 1000, 500, 4, 10.0}, {"b+c", 500, 500, 4, 5.0}};
    double r[3] = {0};
    cr_assert_eq(sb_operator_plan_measure(&p, slots, NULL, cur, 3, 2, r), 1);
    /* each half alone: 100 rows/task-s in, half reach the sink: 50; both: 1 / (1/50 + 1/50) */
    cr_expect(fabs(r[0] - 25) < 1e-9, "a: %g", r[0]);
    cr_expect(fabs(r[1] - 400) < 1e-9, "b: %g", r[1]);
    sb_pipeline_free(&p);
}

/* Rates per pod from the scheduler's op figures: input rows per task-second times the rows the
 * rest of the pipeline makes of each, split over fused stages, times the pool's slots. */
Test(opr_plan, measure_from_op_figures)
{
    sb_pipeline p;
    plan_pipeline(&p, "[\"cpu\", \"gpu\"]", "");
    uint32_t slots[3] = {1, 2, 2};
    /* op a: 1000 rows in, 500 out (a filter) in 10 task-seconds; op b+c: 500 in, 500 out in 5 */
    sb_operator_plan_op cur[2] = {{"a", 1000, 500, 4, 10.0}, {"b+c", 500, 500, 4, 5.0}};
    double r[3] = {0};
    cr_assert_eq(sb_operator_plan_measure(&p, slots, NULL, cur, 2, 2, r), 1);
    /* a: 100 rows/task-s in, half reach the sink: 50 per pod (1 slot) */
    cr_expect(fabs(r[0] - 50) < 1e-9, "a: %g", r[0]);
    /* b+c: 100 rows/task-s, two stages share the time (x2), two slots per pod (x2) */
    cr_expect(fabs(r[1] - 400) < 1e-9, "b: %g", r[1]);
    cr_expect(fabs(r[2] - 400) < 1e-9, "c: %g", r[2]);
    /* a window: the figures since base */
    sb_operator_plan_op later[2] = {{"a", 3000, 1500, 8, 50.0}, {"b+c", 1500, 1500, 8, 10.0}};
    cr_assert_eq(sb_operator_plan_measure(&p, slots, cur, later, 2, 2, r), 1);
    cr_expect(fabs(r[0] - 25) < 1e-9, "a slowed down to 2000 rows in 40 s: %g", r[0]);
    /* too few tasks in the window, no rows out, or an op without time: no measurement */
    double keep[3] = {7, 7, 7};
    sb_operator_plan_op few[2] = {{"a", 3100, 1550, 9, 51.0}, {"b+c", 1550, 1550, 9, 10.5}};
    cr_expect_eq(sb_operator_plan_measure(&p, slots, later, few, 2, 2, keep), 0);
    sb_operator_plan_op none_out[2] = {{"a", 1000, 0, 4, 10.0}, {"b+c", 0, 0, 0, 0}};
    cr_expect_eq(sb_operator_plan_measure(&p, slots, NULL, none_out, 2, 2, keep), 0);
    cr_expect(keep[0] == 7 && keep[1] == 7 && keep[2] == 7, "rates untouched");
    /* an op too quick to time (0 task-seconds) is measured, as taking 1 us */
    sb_operator_plan_op quick[2] = {{"a", 1000, 1000, 4, 0.0}, {"b+c", 1000, 1000, 4, 10.0}};
    cr_assert_eq(sb_operator_plan_measure(&p, slots, NULL, quick, 2, 2, r), 1);
    cr_expect(fabs(r[0] - 1e9) < 1, "a: %g", r[0]);
    /* figures below the base (counters of another run) give no window */
    cr_expect_eq(sb_operator_plan_measure(&p, slots, later, cur, 2, 2, keep), 0);
    /* an op that names no stage of the pipeline leaves a stage unmeasured */
    sb_operator_plan_op other[2] = {{"a", 1000, 500, 4, 10.0}, {"x+y", 500, 500, 4, 5.0}};
    cr_expect_eq(sb_operator_plan_measure(&p, slots, NULL, other, 2, 2, keep), 0);
    sb_pipeline_free(&p);
}

/* Re-plan only past the threshold and the minimum interval. */
Test(opr_plan, drift_rule)
{
    double planned[3] = {100, 50, 0};
    double m[3] = {110, 45, 999}; /* +10%, -10%; stage 2 has no planned rate: not compared */
    size_t st = 9;
    double d = 0;
    cr_expect_eq(sb_operator_plan_drifted(planned, m, 3, 0.25, 200000, 100000, 60000, &st, &d), 0);
    cr_expect(st == 0 && fabs(d - 0.10) < 1e-9, "largest drift: stage %zu %g", st, d);
    m[1] = 30; /* -40% */
    cr_expect_eq(sb_operator_plan_drifted(planned, m, 3, 0.25, 200000, 100000, 60000, &st, &d), 1);
    cr_expect(st == 1 && fabs(d + 0.40) < 1e-9, "stage %zu %g", st, d);
    /* same drift, but the last plan is younger than the interval */
    cr_expect_eq(sb_operator_plan_drifted(planned, m, 3, 0.25, 159999, 100000, 60000, &st, &d), 0);
    cr_expect_eq(sb_operator_plan_drifted(planned, m, 3, 0.25, 160000, 100000, 60000, &st, &d), 1);
    /* a clock before the plan (never re-plans), a larger threshold, exactly at the threshold */
    cr_expect_eq(sb_operator_plan_drifted(planned, m, 3, 0.25, 50000, 100000, 0, &st, &d), 0);
    cr_expect_eq(sb_operator_plan_drifted(planned, m, 3, 0.5, 200000, 100000, 60000, &st, &d), 0);
    double at[3] = {125, 50, 0};
    cr_expect_eq(sb_operator_plan_drifted(planned, at, 3, 0.25, 200000, 100000, 60000, NULL, NULL),
                 0, "exactly 25%% is not more than 25%%");
    at[0] = 126;
    cr_expect_eq(sb_operator_plan_drifted(planned, at, 3, 0.25, 200000, 100000, 60000, NULL, NULL),
                 1);
}

static const cJSON *jget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

Test(opr_plan, status_json_and_event_message)
{
    sb_plan_stage_in st[2] = {
        {.name = "a",
         .shapes = {{.allowed = true, .rate = 100, .cpu_cores = 1}},
         .min_workers = 1,
         .max_workers = 10},
        {.name = "b",
         .shapes = {{.allowed = true, .rate = 20, .cpu_cores = 1},
                    {.allowed = true, .rate = 400, .cpu_cores = 1, .gpus = 1}},
         .min_workers = 1,
         .max_workers = 10},
    };
    sb_plan_input in = {.stages = st,
                        .nstages = 2,
                        .prices = {.cpu_core_hour = 0.04, .mem_gib_hour = 0.005, .gpu_hour = 0.8},
                        .capacity = {-1, -1, -1},
                        .target = {.rows_per_second = 300, .max_cost_per_hour = 10}};
    sb_plan_result out;
    sb_err err = {0};
    cr_assert_eq(sb_plan_solve(&in, &out, &err), 0, "%s", err.msg);
    cr_assert(out.feasible, "%s", out.why);
    sb_operator_plan_view v = {.in = &in,
                               .out = &out,
                               .gpu_type = "nvidia-l4",
                               .rates_from = "measured",
                               .planned_at = "2026-01-01T00:00:00Z",
                               .replans = 2,
                               .pools_sized = 1,
                               .note = NULL};
    cJSON *j = sb_operator_plan_status_json(&v);
    cr_assert_not_null(j);
    cr_expect_str_eq(sget(j, "plannedAt"), "2026-01-01T00:00:00Z");
    cr_expect_str_eq(sget(j, "rates"), "measured");
    cr_expect_eq(jget(j, "replans")->valuedouble, 2);
    cr_expect(cJSON_IsTrue(jget(j, "feasible")));
    cr_expect(cJSON_IsTrue(jget(j, "poolsSized")));
    cr_expect_null(jget(j, "why"));
    cr_expect_null(jget(j, "note"));
    const cJSON *stages = jget(j, "stages");
    cr_assert_eq(cJSON_GetArraySize(stages), 2);
    const cJSON *b = cJSON_GetArrayItem(stages, 1);
    cr_expect_str_eq(sget(b, "name"), "b");
    /* b on gpu: 1 pod of 400 rows/s at 0.84/h beats 15 cpu pods at 0.60/h per row */
    cr_expect_str_eq(sget(b, "shape"), sb_shape_names[out.stages[1].shape]);
    cr_expect_eq(jget(b, "workers")->valuedouble, (double)out.stages[1].workers);
    cr_expect_eq(jget(b, "rowsPerSecondPerWorker")->valuedouble,
                 st[1].shapes[out.stages[1].shape].rate);
    cr_expect_eq(jget(j, "rowsPerSecond")->valuedouble, out.rows_per_second);
    cr_expect(out.rows_per_second >= 300);
    cr_expect_eq(jget(j, "costPerHour")->valuedouble, out.cost_per_hour);
    cr_expect_eq(jget(j, "costPerMillionRows")->valuedouble, out.cost_per_million_rows);
    cr_expect_eq(jget(jget(j, "target"), "rowsPerSecond")->valuedouble, 300);
    cr_expect_eq(jget(jget(j, "target"), "maxCostPerHour")->valuedouble, 10);
    cr_expect_str_eq(sget(jget(j, "prices"), "gpuType"), "nvidia-l4");
    cr_expect_eq(jget(jget(j, "prices"), "gpuHour")->valuedouble, 0.8);
    cJSON_Delete(j);
    char m[512];
    sb_operator_plan_event_message(&v, NULL, 0, m, sizeof m);
    char want[64];
    snprintf(want, sizeof want, "a=cpu:%lld b=%s:%lld; ", (long long)out.stages[0].workers,
             sb_shape_names[out.stages[1].shape], (long long)out.stages[1].workers);
    cr_expect(strncmp(m, want, strlen(want)) == 0, "%s (want %s...)", m, want);
    cr_expect(strstr(m, "rows/s for ") && strstr(m, "per million rows), rates measured"), "%s", m);
    sb_operator_plan_event_message(&v, "b", -0.4, m, sizeof m);
    cr_expect(strncmp(m, "stage b runs at -40% of its planned rate; a=cpu:", 48) == 0, "%s", m);
    cr_expect_null(strstr(m, "moved"), "%s", m);
    /* a stage moved while running: counted, named in the status and the event */
    v.moves = 1;
    v.moved = "b cpu->gpu";
    j = sb_operator_plan_status_json(&v);
    cr_assert_not_null(j);
    cr_expect_eq(jget(j, "moves")->valuedouble, 1);
    cr_expect_str_eq(sget(j, "moved"), "b cpu->gpu");
    cJSON_Delete(j);
    sb_operator_plan_event_message(&v, "b", -0.4, m, sizeof m);
    cr_expect(strstr(m, "; moved b cpu->gpu while running") != NULL, "%s", m);
    v.moved = NULL;
    /* a re-plan the capacity asked for: its cause first, the capped resources in the status */
    sb_plan_capacity cap = {-1, -1, 1};
    v.cause = "pool gpu: 1 pod Pending (0/2 nodes are available: 2 Insufficient nvidia.com/gpu)";
    v.capacity = &cap;
    sb_operator_plan_event_message(&v, NULL, 0, m, sizeof m);
    cr_expect(strncmp(m, "pool gpu: 1 pod Pending (0/2 nodes", 34) == 0 && strstr(m, "); a=cpu:"),
              "%s", m);
    j = sb_operator_plan_status_json(&v);
    cr_assert_not_null(j);
    cr_expect_str_eq(sget(j, "cause"), v.cause);
    cr_expect_eq(jget(jget(j, "capacity"), "gpus")->valuedouble, 1);
    cr_expect_null(jget(jget(j, "capacity"), "cpuCores"), "unlimited: not listed");
    cJSON_Delete(j);
    v.cause = NULL;
    v.capacity = NULL;
    j = sb_operator_plan_status_json(&v);
    cr_expect_null(jget(j, "capacity"));
    cJSON_Delete(j);
    /* infeasible: why, no stages, no totals */
    in.target.rows_per_second = 1e9;
    cr_assert_eq(sb_plan_solve(&in, &out, &err), 0, "%s", err.msg);
    cr_assert(!out.feasible);
    v.note = "placement a=cpu b=gpu would cost less";
    j = sb_operator_plan_status_json(&v);
    cr_assert_not_null(j);
    cr_expect(cJSON_IsFalse(jget(j, "feasible")));
    cr_expect_str_eq(sget(j, "why"), out.why);
    cr_expect_eq(cJSON_GetArraySize(jget(j, "stages")), 0);
    cr_expect_null(jget(j, "costPerHour"));
    cr_expect_str_eq(sget(j, "note"), "placement a=cpu b=gpu would cost less");
    cJSON_Delete(j);
    sb_operator_plan_event_message(&v, NULL, 0, m, sizeof m);
    cr_expect(strncmp(m, "no plan: ", 9) == 0, "%s", m);
    /* a short buffer is cut, never overrun */
    char small[8];
    sb_operator_plan_event_message(&v, "b", -0.4, small, sizeof small);
    cr_expect_eq(strlen(small), 7);
}

/* At start the operator plans from declared rates with the controller's prices under the
 * Pipeline's, and a stage whose planned shape is not its first listed one gets a manifest that
 * lists it first: decoded again, the stage runs on gpu with its gpu shapeArgs. */
Test(opr_plan, declared_plan_reorders_the_manifest)
{
    static const struct {
        const char *execution;
        const char *want; /* b's pool */
    } cases[] = {
        /* the controller's GPU price (2.5/h, below) makes gpu dear: b stays on cpu */
        {"\"target\": {\"rowsPerSecond\": 1000}", "cpu"},
        /* the Pipeline's gpuHour overrides it: 2000 rows/s for ~0.05/h beats 4 cpu pods */
        {"\"target\": {\"rowsPerSecond\": 1000}, \"pricing\": {\"gpuHour\": 0.01}", "gpu"},
    };
    sb_price_defaults d;
    memset(&d, 0, sizeof d);
    sb_err err = {0};
    cr_assert_eq(sb_price_defaults_add_gpu(&d, "default=2.5", &err), 0, "%s", err.msg);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        cJSON *obj = plan_object("[\"cpu\", \"gpu\"]", cases[c].execution);
        sb_pipeline p;
        char msg[1024];
        cr_assert_eq(sb_operator_decode(obj, &p, NULL, msg, sizeof msg), 0, "%s", msg);
        sb_plan_stage_in st[SB_PLAN_MAX_STAGES];
        sb_plan_stages_from_spec(&p, st);
        cr_assert_eq(sb_plan_declared_rates(&p, st, NULL), 0, "bench.spin and identity declare");
        cr_expect(fabs(st[1].shapes[SB_SHAPE_GPU].rate - 2000) < 1e-6, "b gpu: %g",
                  st[1].shapes[SB_SHAPE_GPU].rate);
        sb_plan_input in = {.stages = st, .nstages = p.spec.nstages, .capacity = {-1, -1, -1}};
        cr_assert_eq(sb_price_resolve_with(&d, &p.spec.execution.pricing, &in.prices, NULL, &err),
                     0, "%s", err.msg);
        in.target.rows_per_second = p.spec.execution.target.rows_per_second;
        sb_plan_result out;
        cr_assert_eq(sb_plan_solve(&in, &out, &err), 0, "%s", err.msg);
        cr_assert(out.feasible, "%s", out.why);
        cr_expect_str_eq(sb_shape_names[out.stages[1].shape], cases[c].want, "case %zu", c);
        cJSON *moved = sb_operator_plan_reorder(obj, &p, &out);
        if (strcmp(cases[c].want, "cpu") == 0) {
            cr_expect_null(moved, "already in the planned order");
        } else {
            cr_assert_not_null(moved);
            sb_pipeline q;
            char *json = NULL;
            cr_assert_eq(sb_operator_decode(moved, &q, &json, msg, sizeof msg), 0, "%s", msg);
            cr_expect_str_eq(sb_stage_pool(&q.spec.stages[1]), "gpu");
            cr_expect_str_eq(q.spec.stages[1].placement[1], "cpu", "cpu stays allowed");
            cr_expect(strstr(q.spec.stages[1].args_json, "0.5") != NULL, "gpu shapeArgs: %s",
                      q.spec.stages[1].args_json);
            cr_expect(strstr(json, "\"placement\":[\"gpu\",\"cpu\"]") != NULL,
                      "the workers' manifest: %s", json);
            cr_expect_str_eq(sb_stage_pool(&p.spec.stages[1]), "cpu", "the original is kept");
            free(json);
            sb_pipeline_free(&q);
            cJSON_Delete(moved);
        }
        sb_pipeline_free(&p);
        cJSON_Delete(obj);
    }
}
