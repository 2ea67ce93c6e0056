/* The Pipeline spec model: quantities, durations, the document tree, decoding with defaults,
 * and that YAML and JSON give the same result and the same problems. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "doc/doc.h"
#include "spec/pipeline.h"
#include "spec/quantity.h"
#include "spec/validate.h"

Test(quantity, values_as_kubernetes_parses_them)
{
    static const struct {
        const char *s;
        int64_t value, milli;
    } ok[] = {
        {"64Mi", 67108864, 67108864000},
        {"1.5Gi", 1610612736, 1610612736000},
        {"500m", 1, 500},
        {"2", 2, 2000},
        {"1e3", 1000, 1000000},
        {"1E3", 1000, 1000000},
        {"1k", 1000, 1000000},
        {"0.1", 1, 100},
        {"100n", 1, 1},
        {"-1", -1, -1000},
        {"+5", 5, 5000},
        {".5", 1, 500},
        {"1.", 1, 1000},
        {"0", 0, 0},
        {"7Ei", 8070450532247928832, 0},
        {"2.5", 3, 2500},
        {"1M", 1000000, 1000000000},
        {"1Ki", 1024, 1024000},
        {"0.000000001", 1, 1},
        {"123456789012345678", 123456789012345678, 0},
        {"1e-3", 1, 1},
        {"10e+2", 1000, 1000000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        int64_t v = -42, m = -42;
        sb_err err = {0};
        cr_expect_eq(sb_quantity_value(ok[i].s, &v, &err), 0, "%s: %s", ok[i].s, err.msg);
        cr_expect_eq(v, ok[i].value, "%s: value %lld, want %lld", ok[i].s, (long long)v,
                     (long long)ok[i].value);
        if (ok[i].milli != 0 || strcmp(ok[i].s, "0") == 0) {
            cr_expect_eq(sb_quantity_milli(ok[i].s, &m, &err), 0, "%s: %s", ok[i].s, err.msg);
            cr_expect_eq(m, ok[i].milli, "%s: milli %lld, want %lld", ok[i].s, (long long)m,
                         (long long)ok[i].milli);
        }
    }
}

Test(quantity, invalid_ones_are_rejected_with_a_reason)
{
    static const struct {
        const char *s, *msg;
    } bad[] = {
        {"", "empty quantity"},
        {"Mi", "must start with a number"},
        {"1.5.5", "unknown suffix \".5\""},
        {"1K", "unknown suffix \"K\""},
        {"1 Mi", "unknown suffix \" Mi\""},
        {"1Mb", "unknown suffix \"Mb\""},
        {"1e", "invalid exponent \"e\""},
        {"abc", "must start with a number"},
        {"8Ei", "too large"},
        {"1e19", "too large"},
        {"12345678901234567891", "more than 19 significant digits"},
        {"1ex", "invalid exponent"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t v = 7;
        sb_err err = {0};
        cr_expect_eq(sb_quantity_value(bad[i].s, &v, &err), -1, "%s accepted", bad[i].s);
        cr_expect(strstr(err.msg, bad[i].msg) != NULL, "%s: \"%s\" lacks \"%s\"", bad[i].s, err.msg,
                  bad[i].msg);
        cr_expect_eq(v, 7, "output written on error");
    }
    int64_t m;
    cr_expect_eq(sb_quantity_milli("9223372036854775807", &m, NULL), -1, "milli overflow");
}

Test(quantity, format_bytes)
{
    char b[32];
    cr_expect_str_eq(sb_quantity_format_bytes(67108864, b, sizeof b), "64Mi");
    cr_expect_str_eq(sb_quantity_format_bytes(1536, b, sizeof b), "1536");
    cr_expect_str_eq(sb_quantity_format_bytes(1000, b, sizeof b), "1000");
    cr_expect_str_eq(sb_quantity_format_bytes(0, b, sizeof b), "0");
}

Test(duration, go_syntax)
{
    static const struct {
        const char *s;
        int64_t ns;
    } ok[] = {
        {"300ms", 300000000},
        {"1h30m", 5400000000000},
        {"0", 0},
        {"-1.5h", -5400000000000},
        {"1.5s", 1500000000},
        {".5s", 500000000},
        {"1\xc2\xb5s", 1000},
        {"1us", 1000},
        {"2h45m30.5s", 9930500000000},
        {"1ns", 1},
        {"+5m", 300000000000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        int64_t v = 0;
        sb_err err = {0};
        cr_expect_eq(sb_duration_parse(ok[i].s, &v, &err), 0, "%s: %s", ok[i].s, err.msg);
        cr_expect_eq(v, ok[i].ns, "%s: %lld", ok[i].s, (long long)v);
    }
    const char *bad[] = {"", "5", "5min", "1h-30m", "h", "9999999999h", "1.5", "-"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t v;
        sb_err err = {0};
        cr_expect_eq(sb_duration_parse(bad[i], &v, &err), -1, "\"%s\" accepted", bad[i]);
        cr_expect(err.msg[0] != '\0');
    }
}

Test(doc, yaml_core_schema_scalars)
{
    const char *y = "a: 12\nb: -3\nc: 1.5\nd: true\ne: False\nf: null\ng: ~\nh: '12'\n"
                    "i: 0x1f\nj: 0o17\nk: 64Mi\nl: .inf\nm: \"true\"\nn: yes\no: 1e3\np:\n";
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL));
    const sb_node *r = sb_doc_root(d, 0);
    struct {
        const char *k;
        sb_node_kind kind;
    } want[] = {
        {"a", SB_NODE_INT},    {"b", SB_NODE_INT},    {"c", SB_NODE_FLOAT},  {"d", SB_NODE_BOOL},
        {"e", SB_NODE_BOOL},   {"f", SB_NODE_NULL},   {"g", SB_NODE_NULL},   {"h", SB_NODE_STRING},
        {"i", SB_NODE_INT},    {"j", SB_NODE_INT},    {"k", SB_NODE_STRING}, {"l", SB_NODE_FLOAT},
        {"m", SB_NODE_STRING}, {"n", SB_NODE_STRING}, {"o", SB_NODE_FLOAT},  {"p", SB_NODE_NULL}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const sb_node *n = sb_node_get(r, want[i].k);
        cr_assert_not_null(n, "%s", want[i].k);
        cr_expect_eq(n->kind, want[i].kind, "%s: kind %d want %d", want[i].k, n->kind,
                     want[i].kind);
    }
    cr_expect_eq(sb_node_get(r, "a")->v.i, 12);
    cr_expect_eq(sb_node_get(r, "i")->v.i, 31);
    cr_expect_eq(sb_node_get(r, "j")->v.i, 15);
    cr_expect_eq(sb_node_get(r, "e")->v.b, 0);
    cr_expect(isinf(sb_node_get(r, "l")->v.f));
    cr_expect_eq(sb_node_get(r, "c")->line, 3);
    cr_expect_eq(sb_node_get(r, "c")->col, 4);
    sb_doc_free(d);
}

Test(doc, multi_document_and_positions)
{
    const char *y = "a: 1\n---\nb: [x, y]\n---\n";
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL));
    cr_assert_eq(sb_doc_count(d), 3);
    const sb_node *b = sb_node_get(sb_doc_root(d, 1), "b");
    cr_assert_eq(b->kind, SB_NODE_SEQ);
    cr_expect_eq(b->n, 2);
    cr_expect_str_eq(b->items[1]->text, "y");
    cr_expect_eq(b->items[1]->line, 3);
    cr_expect_eq(b->items[1]->col, 8);
    cr_expect_eq(sb_doc_start_line(d, 1), 2);
    cr_expect_eq(sb_doc_root(d, 2)->kind, SB_NODE_NULL);
    sb_doc_free(d);
}

Test(doc, aliases_share_and_count)
{
    const char *y = "base: &b {cpu: '1'}\nx: *b\ny: *b\n";
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL));
    const sb_node *r = sb_doc_root(d, 0);
    cr_expect_eq(sb_node_get(r, "x"), sb_node_get(r, "base"));
    char *j = sb_node_to_json(r);
    cr_expect_str_eq(j, "{\"base\":{\"cpu\":\"1\"},\"x\":{\"cpu\":\"1\"},\"y\":{\"cpu\":\"1\"}}");
    free(j);
    sb_doc_free(d);
    sb_doc_limits lim = {.max_nodes = 10};
    const char *bomb = "a: &a [1,2,3]\nb: [*a,*a,*a]\n";
    d = sb_doc_parse_yaml(bomb, strlen(bomb), &lim);
    cr_expect(strstr(sb_doc_error(d, NULL, NULL), "more than 10 nodes") != NULL);
    sb_doc_free(d);
}

Test(doc, json_parse_and_errors)
{
    const char *j = "{\"a\": 1, \"b\": [true, null, \"s\\n\"], \"c\": 2.5}";
    sb_doc *d = sb_doc_parse_json(j, strlen(j), NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL));
    const sb_node *r = sb_doc_root(d, 0);
    cr_expect_eq(sb_node_get(r, "a")->kind, SB_NODE_INT);
    cr_expect_eq(sb_node_get(r, "c")->kind, SB_NODE_FLOAT);
    char *out = sb_node_to_json(r);
    cr_expect_str_eq(out, "{\"a\":1,\"b\":[true,null,\"s\\u000a\"],\"c\":2.5}");
    free(out);
    sb_doc_free(d);
    /* integers past 2^53 stay exact (cJSON holds doubles): a filter value reaches the worker
     * as written; numbers inside strings and keys do not shift the others */
    const char *big = "{\"s\": \"-7 \\\" 12\", \"12\": [4611686018427387905, -9223372036854775808,"
                      " 1.5, 9223372036854775808, 2.0, 1e2], \"v\": 9007199254740993}";
    d = sb_doc_parse_json(big, strlen(big), NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL));
    r = sb_doc_root(d, 0);
    cr_expect_eq(sb_node_get(r, "v")->kind, SB_NODE_INT);
    cr_expect_eq(sb_node_get(r, "v")->v.i, 9007199254740993LL);
    out = sb_node_to_json(r);
    cr_expect_str_eq(out, "{\"s\":\"-7 \\\" 12\",\"12\":[4611686018427387905,-9223372036854775808,"
                          "1.5,9.2233720368547758e+18,2,100],\"v\":9007199254740993}");
    free(out);
    sb_doc_free(d);
    /* the same through cJSON (streambatch run's --set round trip) */
    cJSON *cj = cJSON_Parse(big);
    cr_assert_not_null(cj);
    cr_assert_eq(sb_doc_cjson_keep_ints(cj, big), 0);
    out = cJSON_PrintUnformatted(cj);
    cr_expect(strstr(out, "[4611686018427387905,-9223372036854775808,1.5,") != NULL, "%s", out);
    cr_expect(strstr(out, "\"v\":9007199254740993}") != NULL, "%s", out);
    free(out);
    cJSON_Delete(cj);
    const char *bad = "{\n  \"a\": 1,\n  \"b\": }";
    int line, col;
    d = sb_doc_parse_json(bad, strlen(bad), NULL);
    cr_expect_str_eq(sb_doc_error(d, &line, &col), "invalid JSON");
    cr_expect_eq(line, 3);
    sb_doc_free(d);
    const char *dup = "{\"a\": 1, \"a\": 2}";
    d = sb_doc_parse_json(dup, strlen(dup), NULL);
    cr_expect(strstr(sb_doc_error(d, NULL, NULL), "duplicate key \"a\"") != NULL);
    sb_doc_free(d);
    /* far apart and nested; and the same key in two different objects is fine */
    const char *apart = "[{\"x\": {\"k\": 1}}, {\"k\": 1, \"m\": [], \"z\": 0, \"m\": 2}]";
    d = sb_doc_parse_json(apart, strlen(apart), NULL);
    cr_expect(strstr(sb_doc_error(d, NULL, NULL), "duplicate key \"m\"") != NULL, "%s",
              sb_doc_error(d, NULL, NULL));
    sb_doc_free(d);
    /* an object of 50,000 keys, the last repeating the first (checked with one sort: the
     * check compared each key with every one before it, seconds for a hostile manifest) */
    size_t cap = 50000 * 16, o = 0;
    char *wide = malloc(cap);
    cr_assert_not_null(wide);
    o += (size_t)snprintf(wide + o, cap - o, "{");
    for (int i = 0; i < 50000; i++)
        o += (size_t)snprintf(wide + o, cap - o, "\"k%d\":%d,", i, i);
    o += (size_t)snprintf(wide + o, cap - o, "\"k0\":0}");
    d = sb_doc_parse_json(wide, o, NULL);
    cr_expect(strstr(sb_doc_error(d, NULL, NULL), "duplicate key \"k0\"") != NULL, "%s",
              sb_doc_error(d, NULL, NULL));
    sb_doc_free(d);
    wide[o - 8] = '}'; /* without the repeat: parsed */
    d = sb_doc_parse_json(wide, o - 7, NULL);
    cr_expect_null(sb_doc_error(d, NULL, NULL), "%s", sb_doc_error(d, NULL, NULL));
    cr_expect_eq(sb_doc_root(d, 0)->n, 50000);
    sb_doc_free(d);
    free(wide);
}

static const char *minimal =
    "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: m}\n"
    "spec:\n  source: {uri: 'file:///in', format: jsonl}\n"
    "  stages: [{name: a, op: identity}, {name: b, op: bench.sleep, args: {msPerMB: 3},"
    " resources: {gpu: 1, cpu: 250m, memory: 1.5Gi}, workers: {min: 0, max: 2}}]\n"
    "  sink: {uri: 'file:///out', format: jsonl}\n";

Test(spec, defaults)
{
    sb_doc *d = sb_doc_parse_yaml(minimal, strlen(minimal), NULL);
    sb_pipeline p;
    sb_diags dg = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg), 0);
    cr_assert_eq(dg.n, 0, "%s: %s", dg.n ? dg.items[0].path : "", dg.n ? dg.items[0].msg : "");
    cr_expect_str_eq(p.metadata.name, "m");
    cr_expect_eq(p.spec.source.format, SB_FMT_JSONL);
    cr_expect_eq(p.spec.source.partition_size, 64 << 20);
    cr_expect_eq(p.spec.execution.memory_budget, 2LL << 30);
    cr_expect_eq(p.spec.execution.max_task_retries, 3);
    cr_expect_eq(p.spec.execution.max_errored_partitions, 0);
    cr_expect_eq(p.spec.execution.mode, SB_MODE_STREAMING);
    cr_expect_eq(p.spec.execution.stall_timeout_ns, 300LL * 1000000000);
    cr_expect_eq(p.spec.execution.cpu_slots_per_worker, 1);
    cr_expect_eq(p.spec.suspend, false);
    cr_expect_eq(p.spec.ttl_set, false);
    cr_assert_eq(p.spec.nstages, 2);
    cr_expect_eq(p.spec.stages[0].resources.cpu_milli, 1000);
    cr_expect_eq(p.spec.stages[0].resources.gpu, 0);
    cr_expect_eq(p.spec.stages[0].workers.min, 1);
    cr_expect_eq(p.spec.stages[0].workers.max, 16);
    cr_expect_str_eq(sb_stage_pool(&p.spec.stages[0]), "cpu");
    cr_expect_eq(p.spec.stages[1].resources.cpu_milli, 250);
    cr_expect_eq(p.spec.stages[1].resources.memory_bytes, 1610612736);
    cr_expect_eq(p.spec.stages[1].workers.min, 0);
    cr_expect_str_eq(sb_stage_pool(&p.spec.stages[1]), "gpu");
    cr_expect_str_eq(p.spec.stages[1].args_json, "{\"msPerMB\":3}");
    cr_expect_null(p.spec.stages[0].args_json);
    sb_pipeline_free(&p);
    sb_diags_free(&dg);
    sb_doc_free(d);
}

/* source.uris: a list of URLs instead of uri, carried in order; uri stays NULL. */
Test(spec, source_uris_list)
{
    static const char y[] = "apiVersion: streambatch.dev/v1alpha1\n"
                            "kind: Pipeline\n"
                            "metadata: {name: u}\n"
                            "spec:\n"
                            "  source:\n"
                            "    uris: [https://h.example/a.csv, 'http://h.example:8080/b.csv',\n"
                            "           s3://bucket/c.csv]\n"
                            "    format: csv\n"
                            "  stages: [{name: a, op: identity}]\n"
                            "  sink: {uri: file:///out, format: jsonl}\n";
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    sb_pipeline p;
    sb_diags dg = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg), 0);
    cr_assert_eq(dg.n, 0, "%s: %s", dg.n ? dg.items[0].path : "", dg.n ? dg.items[0].msg : "");
    cr_expect_null(p.spec.source.uri);
    cr_assert_eq(p.spec.source.nuris, 3);
    cr_expect_str_eq(p.spec.source.uris[0], "https://h.example/a.csv");
    cr_expect_str_eq(p.spec.source.uris[1], "http://h.example:8080/b.csv");
    cr_expect_str_eq(p.spec.source.uris[2], "s3://bucket/c.csv");
    sb_pipeline_free(&p);
    sb_diags_free(&dg);
    sb_doc_free(d);
}

/* The same object as JSON (as the API server sends it, with metadata and status it adds) gives
 * the same struct; an invalid one gives the same paths and messages as its YAML twin. */
Test(spec, json_and_yaml_agree)
{
    const char *json =
        "{\"apiVersion\":\"streambatch.dev/v1alpha1\",\"kind\":\"Pipeline\","
        "\"metadata\":{\"name\":\"m\",\"namespace\":\"ml\",\"uid\":\"1-2\",\"resourceVersion\":"
        "\"7\","
        "\"generation\":2,\"managedFields\":[{\"manager\":\"kubectl\"}]},"
        "\"spec\":{\"source\":{\"uri\":\"file:///in\",\"format\":\"jsonl\"},"
        "\"stages\":[{\"name\":\"a\",\"op\":\"identity\"},{\"name\":\"b\",\"op\":\"bench.sleep\","
        "\"args\":{\"msPerMB\":3},\"resources\":{\"gpu\":1,\"cpu\":\"250m\",\"memory\":\"1.5Gi\"},"
        "\"workers\":{\"min\":0,\"max\":2}}],\"sink\":{\"uri\":\"file:///out\",\"format\":"
        "\"jsonl\"}},\"status\":{\"phase\":\"Running\"}}";
    sb_doc *dj = sb_doc_parse_json(json, strlen(json), NULL);
    sb_doc *dy = sb_doc_parse_yaml(minimal, strlen(minimal), NULL);
    sb_pipeline pj, py;
    sb_diags gj = {0}, gy = {0};
    sb_pipeline_decode(sb_doc_root(dj, 0), &pj, &gj);
    sb_pipeline_decode(sb_doc_root(dy, 0), &py, &gy);
    cr_expect_eq(gj.n, 0, "%s", gj.n ? gj.items[0].msg : "");
    cr_expect_str_eq(pj.metadata.namespace_, "ml");
    cr_expect_eq(pj.spec.stages[1].resources.memory_bytes,
                 py.spec.stages[1].resources.memory_bytes);
    cr_expect_eq(pj.spec.stages[1].resources.cpu_milli, py.spec.stages[1].resources.cpu_milli);
    cr_expect_str_eq(pj.spec.stages[1].args_json, py.spec.stages[1].args_json);
    cr_expect_eq(pj.spec.execution.memory_budget, py.spec.execution.memory_budget);
    cr_expect_eq(pj.spec.stages[0].workers.max, py.spec.stages[0].workers.max);
    sb_pipeline_free(&pj);
    sb_pipeline_free(&py);
    sb_diags_free(&gj);
    sb_diags_free(&gy);
    sb_doc_free(dj);
    sb_doc_free(dy);

    const char *bad_json =
        "{\"apiVersion\":\"streambatch.dev/v1alpha1\",\"kind\":\"Pipeline\","
        "\"metadata\":{\"name\":\"m\"},\"spec\":{\"source\":{\"uri\":\"ftp://x\","
        "\"format\":\"jsonl\"},\"stages\":[{\"name\":\"a\",\"op\":\"identity\","
        "\"resources\":{\"gpu\":-1}}],\"sink\":{\"uri\":\"file:///o\","
        "\"format\":\"jsonl\"}}}";
    const char *bad_yaml = "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\n"
                           "metadata: {name: m}\nspec:\n  source: {uri: 'ftp://x', format: jsonl}\n"
                           "  stages: [{name: a, op: identity, resources: {gpu: -1}}]\n"
                           "  sink: {uri: 'file:///o', format: jsonl}\n";
    dj = sb_doc_parse_json(bad_json, strlen(bad_json), NULL);
    dy = sb_doc_parse_yaml(bad_yaml, strlen(bad_yaml), NULL);
    sb_pipeline_decode(sb_doc_root(dj, 0), &pj, &gj);
    sb_pipeline_decode(sb_doc_root(dy, 0), &py, &gy);
    cr_assert_eq(gj.n, 2);
    cr_assert_eq(gy.n, 2);
    for (size_t i = 0; i < 2; i++) {
        cr_expect_str_eq(gj.items[i].path, gy.items[i].path);
        cr_expect_str_eq(gj.items[i].msg, gy.items[i].msg);
        cr_expect_eq(gj.items[i].line, 0);
        cr_expect_gt(gy.items[i].line, 0);
    }
    cr_expect_str_eq(gy.items[1].path, "spec.stages[0].resources.gpu");
    cr_expect_str_eq(gy.items[1].msg, "must be a non-negative integer, got -1");
    sb_pipeline_free(&pj);
    sb_pipeline_free(&py);
    sb_diags_free(&gj);
    sb_diags_free(&gy);
    sb_doc_free(dj);
    sb_doc_free(dy);
}

/* execution.cpuSlotsPerWorker: decoded when in 1..64; outside, `validate` names the path. */
Test(spec, cpu_slots_per_worker)
{
    char doc[1024];
    snprintf(doc, sizeof doc, "%s  execution: {cpuSlotsPerWorker: 4}\n", minimal);
    sb_doc *d = sb_doc_parse_yaml(doc, strlen(doc), NULL);
    sb_pipeline p;
    sb_diags dg = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg), 0);
    cr_assert_eq(dg.n, 0, "%s", dg.n ? dg.items[0].msg : "");
    cr_expect_eq(p.spec.execution.cpu_slots_per_worker, 4);
    sb_pipeline_free(&p);
    sb_diags_free(&dg);
    sb_doc_free(d);

    const char *bad[] = {"0", "65", "-2", "2.5", "many"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(doc, sizeof doc, "%s  execution: {cpuSlotsPerWorker: %s}\n", minimal, bad[i]);
        char *out = NULL;
        size_t outlen = 0;
        FILE *f = open_memstream(&out, &outlen);
        cr_expect_eq(sb_validate_buffer("p.yaml", doc, strlen(doc), f, NULL), 1, "%s", bad[i]);
        fclose(f);
        cr_expect(strstr(out, "p.yaml:8:34: spec.execution.cpuSlotsPerWorker: must be ") == out,
                  "%s: %s", bad[i], out);
        if (i < 3)
            cr_expect(strstr(out, "must be between 1 and 64, got ") != NULL, "%s: %s", bad[i], out);
        free(out);
    }
}

Test(spec, op_table_matches_names)
{
    size_t n = 0;
    for (; sb_op_names[n] != NULL; n++)
        cr_expect(sb_spec_op_known(sb_op_names[n]), "%s", sb_op_names[n]);
    /* 14, then issue 41's limit, join and sort */
    cr_expect_eq(n, 17, "the ops this build runs (image.decode is known but refused)");
    cr_expect(sb_spec_op_known("image.decode"), "known, so validate can say what to do instead");
    for (size_t i = 0; i < n; i++)
        cr_expect_str_neq(sb_op_names[i], "image.decode");
    cr_expect_not(sb_spec_op_known("tensor.mlpp"));
}

/* Regression (found by fuzz_spec): sb_validate_buffer read past a buffer that was not
 * NUL-terminated when checking for a blank file. */
Test(validate, blank_buffer_without_terminator)
{
    char *buf = malloc(2);
    memcpy(buf, "\n\n", 2);
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    cr_expect_eq(sb_validate_buffer("x.yaml", buf, 2, f, NULL), 1);
    fclose(f);
    cr_expect_str_eq(out, "x.yaml:1:1: file is empty: expected a Pipeline manifest\n");
    free(out);
    free(buf);
}

/* The problems of a pipeline whose stages are `stages` (YAML list items); the first one as
 * "path: message" in first. */
static size_t stage_problems(const char *stages, char *first, size_t len)
{
    char y[4096];
    snprintf(y, sizeof y,
             "apiVersion: streambatch.dev/v1alpha1\nkind: Pipeline\nmetadata: {name: m}\n"
             "spec:\n  source: {uri: 'file:///in', format: jsonl}\n  stages:\n%s"
             "  sink: {uri: 'file:///out', format: jsonl}\n",
             stages);
    sb_doc *d = sb_doc_parse_yaml(y, strlen(y), NULL);
    cr_assert_null(sb_doc_error(d, NULL, NULL), "%s", y);
    sb_pipeline p;
    sb_diags dg = {0};
    cr_assert_eq(sb_pipeline_decode(sb_doc_root(d, 0), &p, &dg), 0);
    snprintf(first, len, "%s: %s", dg.n ? dg.items[0].path : "", dg.n ? dg.items[0].msg : "");
    size_t n = dg.n;
    sb_pipeline_free(&p);
    sb_diags_free(&dg);
    sb_doc_free(d);
    return n;
}

/* docs/pipeline-api.md, "Filter comparisons": a boolean value compares by eq and ne only, and
 * validate refuses lt, le, gt and ge with one (on args, or on the args a shape runs with after
 * shapeArgs), and a value that is not a finite number (JSON has none), which the op refuses when
 * the task starts. */
Test(spec, filter_refuses_what_its_op_refuses)
{
    static const struct {
        const char *args, *shape_args, *path; /* path: NULL when valid */
    } cases[] = {
        {"{field: f, op: eq, value: true}", NULL, NULL},
        {"{field: f, op: ne, value: false}", NULL, NULL},
        {"{field: f, op: lt, value: 1}", NULL, NULL},
        {"{field: f, op: ge, value: \"true\"}", NULL, NULL},
        {"{field: f, op: lt, value: true}", NULL, "spec.stages[0].args.op"},
        {"{field: f, op: le, value: false}", NULL, "spec.stages[0].args.op"},
        {"{field: f, op: gt, value: True}", NULL, "spec.stages[0].args.op"},
        {"{field: f, op: ge, value: true}", NULL, "spec.stages[0].args.op"},
        /* shapeArgs.cpu is what the (cpu-only) op runs with */
        {"{field: f, op: eq, value: true}", "{cpu: {op: gt}}", "spec.stages[0].shapeArgs.cpu.op"},
        {"{field: f, op: lt, value: 3}", "{cpu: {value: false}}", "spec.stages[0].args.op"},
        {"{field: f, op: lt, value: true}", "{cpu: {op: eq}}", NULL},
        {"{field: f, op: lt, value: true}", "{cpu: {value: 2}}", NULL},
        {"{field: f, op: eq, value: .nan}", NULL, "spec.stages[0].args.value"},
        {"{field: f, op: eq, value: -.inf}", NULL, "spec.stages[0].args.value"},
        {"{field: f, op: eq, value: 1e999}", NULL, "spec.stages[0].args.value"},
        {"{field: f, op: eq, value: 1e300}", NULL, NULL},
        {"{field: f, op: eq, value: 1}", "{cpu: {value: .inf}}",
         "spec.stages[0].shapeArgs.cpu.value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char stage[512], first[1024];
        snprintf(stage, sizeof stage, "  - {name: a, op: filter, args: %s%s%s}\n", cases[i].args,
                 cases[i].shape_args ? ", shapeArgs: " : "",
                 cases[i].shape_args ? cases[i].shape_args : "");
        size_t n = stage_problems(stage, first, sizeof first);
        cr_expect_eq(n, cases[i].path != NULL, "%s: %zu problems, first %s", stage, n, first);
        if (cases[i].path == NULL || n == 0)
            continue;
        cr_expect(strncmp(first, cases[i].path, strlen(cases[i].path)) == 0 &&
                      first[strlen(cases[i].path)] == ':',
                  "%s: %s", stage, first);
        if (strstr(cases[i].path, ".op") != NULL)
            cr_expect(strstr(first, "does not apply to a boolean value") != NULL &&
                          strstr(first, "booleans compare with eq or ne only") != NULL,
                      "%s", first);
        else
            cr_expect(strstr(first, "must be a string, a finite number or a boolean") != NULL, "%s",
                      first);
    }
}

/* exec's inheritEnv (docs/exec.md): true, false or a non-empty list of variable names, NAME or
 * PREFIX*; anything else is refused at its path, naming what it must be. */
Test(spec, exec_inherit_env_is_a_boolean_or_names)
{
    static const struct {
        const char *v;
        int ok;
    } cases[] = {
        {"true", 1},
        {"false", 1},
        {"[AWS_REGION]", 1},
        {"[AWS_*, SB_AUTH_TOKEN]", 1},
        {"[\"*\"]", 1},
        {"yes", 0},
        {"1", 0},
        {"[]", 0},
        {"[\"A=1\"]", 0},
        {"[\"\"]", 0},
        {"[9LIVES]", 0},
        {"{AWS_REGION: true}", 0},
        {"[AWS_*X]", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char stage[256], first[1024];
        snprintf(stage, sizeof stage,
                 "  - {name: x, op: exec, args: {command: [cat], inheritEnv: %s}}\n", cases[i].v);
        size_t n = stage_problems(stage, first, sizeof first);
        cr_expect_eq(n, cases[i].ok ? 0 : 1, "%s: %zu problems, first %s", stage, n, first);
        if (!cases[i].ok && n > 0)
            cr_expect(strstr(first, "spec.stages[0].args.inheritEnv: must be true, false or a "
                                    "non-empty list of variable names") == first,
                      "%s", first);
    }
}

/* image.resize: width and height 1 to 65535 (the worker's bound on a side). */
Test(spec, resize_sides_are_1_to_65535)
{
    static const struct {
        const char *w, *h, *path;
    } cases[] = {
        {"1", "1", NULL},
        {"65535", "65535", NULL},
        {"224", "70000", "spec.stages[0].args.height"},
        {"65536", "224", "spec.stages[0].args.width"},
        {"0", "224", "spec.stages[0].args.width"},
        {"224", "-3", "spec.stages[0].args.height"},
        {"224", "2.5", "spec.stages[0].args.height"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char stage[256], first[1024], want[256];
        snprintf(stage, sizeof stage,
                 "  - {name: r, op: image.resize, args: {width: %s, height: %s}}\n", cases[i].w,
                 cases[i].h);
        size_t n = stage_problems(stage, first, sizeof first);
        cr_expect_eq(n, cases[i].path != NULL, "%s: %zu problems, first %s", stage, n, first);
        if (cases[i].path == NULL || n == 0)
            continue;
        snprintf(want, sizeof want, "%s: must be an integer from 1 to 65535, got ", cases[i].path);
        cr_expect(strncmp(first, want, strlen(want)) == 0, "%s: %s", stage, first);
    }
}

/* image.normalize: mean and std are one number (every channel) or one per channel (at most 64);
 * a 0 in std is refused, in args and in shapeArgs. */
Test(spec, normalize_mean_and_std_are_a_number_or_a_list)
{
    char many[512] = "[", stage[1024], first[1024];
    for (int i = 0; i < 65; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s1", i ? "," : "");
    strcat(many, "]");
    static const struct {
        const char *args, *path, *msg;
    } cases[] = {
        {"{mean: 0.5, std: 0.25}", NULL, NULL},
        {"{mean: 0, std: 2}", NULL, NULL},
        {"{mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}", NULL, NULL},
        {"{mean: 0.5, std: [0.2, 0.3, 0.4]}", NULL, NULL},
        {"{std: 0}", "spec.stages[0].args.std", "must not be 0"},
        {"{std: 0.0}", "spec.stages[0].args.std", "must not be 0"},
        {"{std: 1e-50}", "spec.stages[0].args.std", "must not be 0"}, /* 0 as a float */
        {"{std: [1, 0, 1]}", "spec.stages[0].args.std[1]", "must not be 0"},
        {"{mean: []}", "spec.stages[0].args.mean", "must be a finite number, or a list of 1 to 64"},
        {"{mean: .nan}", "spec.stages[0].args.mean", "must be a finite number"},
        {"{std: [1, .inf]}", "spec.stages[0].args.std", "must be a finite number"},
        {"{mean: \"0.5\"}", "spec.stages[0].args.mean", "must be a finite number"},
        {"{mean: {r: 1}}", "spec.stages[0].args.mean", "must be a finite number"},
        {"{std: 1}, shapeArgs: {cpu: {std: 0}}", "spec.stages[0].shapeArgs.cpu.std",
         "must not be 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(stage, sizeof stage, "  - {name: n, op: image.normalize, args: %s}\n",
                 cases[i].args);
        size_t n = stage_problems(stage, first, sizeof first);
        cr_expect_eq(n, cases[i].path != NULL, "%s: %zu problems, first %s", stage, n, first);
        if (cases[i].path == NULL || n == 0)
            continue;
        char want[512];
        snprintf(want, sizeof want, "%s: %s", cases[i].path, cases[i].msg);
        cr_expect(strncmp(first, want, strlen(want)) == 0, "%s: %s", stage, first);
    }
    snprintf(stage, sizeof stage, "  - {name: n, op: image.normalize, args: {mean: %s}}\n", many);
    cr_expect_eq(stage_problems(stage, first, sizeof first), 1, "65 values");
    cr_expect(strstr(first, "a list of 1 to 64 finite numbers, got a list") != NULL, "%s", first);
    many[strlen(many) - 3] = ']'; /* 64 values */
    many[strlen(many) - 2] = '\0';
    snprintf(stage, sizeof stage, "  - {name: n, op: image.normalize, args: {mean: %s}}\n", many);
    cr_expect_eq(stage_problems(stage, first, sizeof first), 0, "64 values: %s", first);
}

/* A stage without an op beside an all-to-all or join stage: validate reports the missing op and
 * goes on (fuzz_spec found the pipeline check calling strcmp on the missing op: a crash). */
Test(spec, a_stage_without_an_op_beside_an_all_to_all_stage_is_reported)
{
    char first[1024];
    size_t n = stage_problems("  - {name: a}\n  - {name: b, op: random_shuffle, args: {seed: 1}}\n"
                              "  - {name: c}\n",
                              first, sizeof first);
    cr_expect_geq(n, 2, "%zu problems, first %s", n, first);
    cr_expect(strstr(first, "spec.stages[0]") != NULL && strstr(first, "op") != NULL, "%s", first);
}
