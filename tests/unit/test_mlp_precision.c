/* tensor.mlp's args.precision (fp32, tf32, bf16) where no GPU is: the Pipeline validator's rules
 * (lib/spec/pipeline.c: the values, tf32/bf16 with device cpu, tf32/bf16 on a stage that runs on
 * cpu only) with their messages, and the op (worker/ops/tensor/mlp.c, this binary links no CUDA):
 * a bad value and device cpu are refused at init, and tf32/bf16 on the CPU fallback give the fp32
 * results bit for bit (docs/pipeline-api.md says the CPU computes in fp32). The CUDA results of
 * each precision are compared in tests/cuda/test_mlp_cuda.c. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doc/doc.h"
#include "partition/partition.h"
#include "spec/pipeline.h"
#include "worker/ops/ops.h"
#include "testutil.h"

TestSuite(mlp_precision, .timeout = 60);

static const char *HEAD = "apiVersion: streambatch.dev/v1alpha1\n"
                          "kind: Pipeline\n"
                          "metadata: {name: p}\n"
                          "spec:\n"
                          "  source: {uri: file:///in, format: jsonl}\n"
                          "  sink: {uri: file:///out, format: jsonl}\n"
                          "  stages:\n";

/* Decodes HEAD + stages; the problems, "path: message" joined by '\n' (malloc'd, "" for none). */
static char *problems(const char *stages)
{
    char y[4096];
    snprintf(y, sizeof y, "%s%s", HEAD, stages);
    sb_doc *doc = sb_doc_parse_yaml(y, strlen(y), NULL);
    cr_assert_null(sb_doc_error(doc, NULL, NULL));
    sb_diags d = {0};
    sb_pipeline p;
    sb_pipeline_decode(sb_doc_root(doc, 0), &p, &d);
    size_t cap = 1, at = 0;
    for (size_t i = 0; i < d.n; i++)
        cap += strlen(d.items[i].path) + strlen(d.items[i].msg) + 3;
    char *out = malloc(cap);
    out[0] = '\0';
    for (size_t i = 0; i < d.n; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s: %s", i ? "\n" : "", d.items[i].path,
                               d.items[i].msg);
    sb_diags_free(&d);
    sb_pipeline_free(&p);
    sb_doc_free(doc);
    return out;
}

#define MLP "op: tensor.mlp, args: {weights: file:///w, field: x"

Test(mlp_precision, the_validator_takes_the_three_precisions_where_a_gpu_can_run_them)
{
    const char *ok[] = {
        "  - {name: a, " MLP ", precision: fp32}, resources: {gpu: 1}}\n",
        "  - {name: a, " MLP ", precision: tf32}, resources: {gpu: 1}}\n",
        "  - {name: a, " MLP ", precision: bf16}, resources: {gpu: 1}}\n",
        "  - {name: a, " MLP ", precision: fp32}}\n", /* fp32 anywhere, device cpu too */
        "  - {name: a, " MLP ", precision: fp32, device: cpu}}\n",
        "  - {name: a, " MLP ", precision: bf16, device: cuda}, resources: {gpu: 1}}\n",
        /* a gpu shape first, the cpu one as a fallback that computes in fp32 */
        "  - {name: a, " MLP ", precision: tf32}, placement: [gpu, cpu]}\n",
        "  - {name: a, " MLP "}, placement: [gpu, cpu],\n"
        "     shapeArgs: {gpu: {precision: bf16}, cpu: {device: cpu}}}\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char *p = problems(ok[i]);
        cr_expect_str_eq(p, "", "%s", ok[i]);
        free(p);
    }
}

Test(mlp_precision, the_validator_names_the_stage_and_the_field_of_a_wrong_precision)
{
    struct {
        const char *stages, *want;
    } bad[] = {
        {"  - {name: a, " MLP ", precision: fp16}, resources: {gpu: 1}}\n",
         "spec.stages[0].args.precision: must be one of fp32, tf32, bf16, got \"fp16\""},
        {"  - {name: a, " MLP ", precision: 32}, resources: {gpu: 1}}\n",
         "spec.stages[0].args.precision: must be one of fp32, tf32, bf16, got 32"},
        {"  - {name: a, " MLP ", precision: bf16, device: cpu}, resources: {gpu: 1}}\n",
         "spec.stages[0].args.precision: is bf16, but spec.stages[0].args.device is cpu: the CPU "
         "computes tensor.mlp in fp32 only (drop precision, or set it in shapeArgs.gpu)"},
        {"  - {name: a, " MLP ", precision: tf32}}\n",
         "spec.stages[0].args.precision: is tf32, but the stage runs on cpu only, where "
         "tensor.mlp computes in fp32 (give it resources.gpu or a gpu placement, or drop "
         "precision)"},
        {"  - {name: a, " MLP ", precision: bf16}, placement: [gpu, cpu],\n"
         "     shapeArgs: {cpu: {device: cpu}}}\n",
         "spec.stages[0].args.precision: is bf16, but spec.stages[0].shapeArgs.cpu.device is cpu: "
         "the CPU computes tensor.mlp in fp32 only (drop precision, or set it in shapeArgs.gpu)"},
        {"  - {name: a, " MLP "}, placement: [gpu, cpu],\n"
         "     shapeArgs: {gpu: {precision: half}}}\n",
         "spec.stages[0].shapeArgs.gpu.precision: must be one of fp32, tf32, bf16, got \"half\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *p = problems(bad[i].stages);
        cr_expect_str_eq(p, bad[i].want, "%s", bad[i].stages);
        free(p);
    }
}

/* A one-layer model 3 -> 2 (weights with many significant bits, so that a rounding to tf32 or
 * bf16 would show). */
static const char *model_file(void)
{
    static char path[256];
    char dir[128];
    const float data[8] = {1.0009765625f, -0.3333333f, 0.1234567f, 2.7182817f,
                           -1.4142135f,   0.5772157f,  0.0078125f, -0.6931472f};
    const char *h = "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                    "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]}}";
    sb_test_tmpl(dir, sizeof dir, "sb-test-mlp-precision");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint64_t hl = strlen(h);
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, hl, f);
    fwrite(data, 4, 8, f);
    fclose(f);
    return path;
}

static float g_y[8];
static size_t g_rows;
static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows, (void)ud;
    sb_err e = {0};
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    const sb_column *c = sb_batch_column(b, (size_t)sb_batch_find(b, "y"));
    for (size_t r = 0; r < sb_batch_rows(b) && g_rows < 4; r++, g_rows++)
        memcpy(g_y + g_rows * 2, (const float *)c->values + r * 2, 8);
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* The op with args over 4 rows of 3 values; its outputs in g_y. 0, or -1 + e. */
static int run(const char *args, sb_err *e)
{
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    void *st = NULL;
    if (op->init(args, &st, e) != 0)
        return -1;
    sb_field f = {
        .name = "x", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = 3};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, e);
    for (int r = 0; r < 4; r++) {
        float x[3] = {0.3333333f * (float)(r + 1), -1.1f + 0.7f * (float)r, 3.14159265f / 3};
        cr_assert_eq(sb_batch_builder_append_list(bb, 0, x, 3, e), 0, "%s", e->msg);
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, e), 0);
    sb_batch_builder_free(bb);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, e), 0);
    g_rows = 0;
    sb_op_out *o = sb_op_out_new(1 << 20, collect, NULL, e);
    int rc = sb_op_run(op, st, b, 2, o, e);
    if (rc == 0)
        rc = op->finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_op_out_free(o);
    sb_batch_close(b);
    sb_part_free(blob);
    op->free(st);
    if (rc == 0)
        cr_assert_eq(g_rows, 4);
    return rc;
}

Test(mlp_precision, the_op_refuses_a_bad_precision_and_computes_fp32_on_the_cpu)
{
    const char *w = model_file();
    struct {
        const char *extra, *want; /* want: NULL when init succeeds */
    } cases[] = {
        {",\"precision\":\"fp16\"", "tensor.mlp: args.precision must be fp32, tf32 or bf16"},
        {",\"precision\":16", "tensor.mlp: args.precision must be fp32, tf32 or bf16"},
        {",\"precision\":\"BF16\"", "tensor.mlp: args.precision must be fp32, tf32 or bf16"},
        {",\"precision\":\"tf32\",\"device\":\"cpu\"",
         "tensor.mlp: args.precision is tf32, but args.device is cpu: the CPU computes in fp32 "
         "only (drop precision, or use device auto or cuda)"},
        {",\"precision\":\"bf16\",\"device\":\"cpu\"",
         "tensor.mlp: args.precision is bf16, but args.device is cpu: the CPU computes in fp32 "
         "only (drop precision, or use device auto or cuda)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *args;
        cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"x\"%s}", w, cases[i].extra) > 0);
        sb_err e = {0};
        cr_expect_eq(run(args, &e), -1, "%s", cases[i].extra);
        cr_expect_str_eq(e.msg, cases[i].want, "%s", cases[i].extra);
        free(args);
    }
    /* the reference: fp32 on the CPU, asked for, or by default */
    float want[8], got[8];
    char *args;
    sb_err e = {0};
    cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"x\",\"device\":\"cpu\"}", w) > 0);
    cr_assert_eq(run(args, &e), 0, "%s", e.msg);
    memcpy(want, g_y, sizeof want);
    free(args);
    const char *extra[] = {"", ",\"precision\":\"fp32\"", ",\"precision\":\"tf32\"",
                           ",\"precision\":\"bf16\"", ",\"precision\":\"fp32\",\"device\":\"cpu\""};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) {
        cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"x\"%s}", w, extra[i]) > 0);
        cr_assert_eq(run(args, &e), 0, "%s: %s", extra[i], e.msg);
        memcpy(got, g_y, sizeof got);
        cr_expect_eq(memcmp(got, want, sizeof want), 0,
                     "%s: the CPU computes in fp32 (%.9g %.9g, want %.9g %.9g)", extra[i],
                     (double)got[0], (double)got[1], (double)want[0], (double)want[1]);
        free(args);
    }
    sb_op_shutdown();
}
