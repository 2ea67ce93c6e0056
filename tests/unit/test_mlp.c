/* Tests of tensor.mlp's CPU implementation (worker/ops/tensor): the strict safetensors reader
 * and the op over tensor columns and jsonl records. Models are written here as safetensors
 * files; expected outputs are computed here in double precision. (Against numpy, on random
 * models through `streambatch run`: tests/sdk/test-python-kit.sh.) */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partition/partition.h"
#include "partition/rowjson.h"
#include "worker/ops/ops.h"
#include "worker/ops/statecache.h"
#include "worker/ops/tensor/mlp_cuda.h"
#include "worker/ops/tensor/safetensors.h"
#include "testutil.h"

TestSuite(mlp, .timeout = 60);

/* A safetensors file from a header text and data bytes; returns its path (static buffer). */
static const char *write_st(const char *header, const void *data, size_t dlen)
{
    static char path[256];
    char dir[128];
    sb_test_tmpl(dir, sizeof dir, "sb-test-mlp");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint64_t hl = strlen(header);
    fwrite(&hl, 8, 1, f);
    fwrite(header, 1, hl, f);
    if (dlen)
        fwrite(data, 1, dlen, f);
    fclose(f);
    return path;
}

/* The model used below: 0: Linear(3 -> 4) with bias, relu, 2: Linear(4 -> 2) without bias. */
static const float W0[4][3] = {{1, -1, 0.5f}, {0.25f, 2, -1}, {-0.5f, 0, 1}, {1, 1, 1}};
static const float B0[4] = {0.1f, -0.2f, 0.3f, -4};
static const float W2[2][4] = {{1, 0.5f, -1, 2}, {-1, 1, 0.25f, 0}};

static const char *model_file(void)
{
    float data[12 + 4 + 8];
    memcpy(data, W0, sizeof W0);
    memcpy(data + 12, B0, sizeof B0);
    memcpy(data + 16, W2, sizeof W2);
    return write_st("{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[4,3],\"data_offsets\":[0,48]},"
                    "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[48,64]},"
                    "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[64,96]},"
                    "\"__metadata__\":{\"format\":\"pt\"}}",
                    data, sizeof data);
}

static void expect_row(const float x[3], double y[2], int relu)
{
    double h[4];
    for (int o = 0; o < 4; o++) {
        h[o] = B0[o];
        for (int i = 0; i < 3; i++)
            h[o] += (double)W0[o][i] * x[i];
        if (relu && h[o] < 0)
            h[o] = 0;
    }
    for (int o = 0; o < 2; o++) {
        y[o] = 0;
        for (int i = 0; i < 4; i++)
            y[o] += (double)W2[o][i] * h[i];
    }
}

static void *g_blob;
static size_t g_len;
static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows, (void)ud;
    cr_assert_null(g_blob, "one output partition expected");
    g_blob = blob;
    g_len = len;
    return 0;
}

/* One task of op (state st) over blob, in batches of `batch` rows, finished and flushed; 0 with
 * the output in g_blob, or -1 + e. */
static int run_state(const sb_op_impl *op, void *st, void *blob, size_t len, size_t batch,
                     sb_err *e)
{
    sb_op_out *o = sb_op_out_new(64 << 20, collect, NULL, e);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, e), 0);
    g_blob = NULL;
    int rc = sb_op_run(op, st, b, batch, o, e);
    if (rc == 0)
        rc = op->finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_batch_close(b);
    sb_op_out_free(o);
    return rc;
}

/* Runs tensor.mlp (args) over blob; 0 with the output in g_blob, or -1 + e. */
static int run(const char *args, void *blob, size_t len, size_t batch, sb_err *e)
{
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    cr_assert_not_null(op);
    void *st;
    if (op->init(args, &st, e) != 0)
        return -1;
    int rc = run_state(op, st, blob, len, batch, e);
    op->free(st);
    return rc;
}

static const float X[5][3] = {{1, 2, 3}, {0, 0, 0}, {-1, 0.5f, 2}, {3, -2, 1}, {0.1f, 0.2f, 0.3f}};

/* A partition of X's 5 rows: id (0..4), x (row 1 null) and, with `tag`, a utf8 "t<row>". */
static void *x_part(bool tag, size_t *len)
{
    sb_field f[3] = {{.name = "id", .type = SB_TYPE_INT64},
                     {.name = "x",
                      .type = SB_TYPE_FIXED_LIST,
                      .child_type = SB_TYPE_FLOAT32,
                      .list_size = 3,
                      .nullable = true},
                     {.name = "tag", .type = SB_TYPE_UTF8}};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(f, tag ? 3 : 2, &e);
    for (int r = 0; r < 5; r++) {
        char t[8];
        snprintf(t, sizeof t, "t%d", r);
        cr_assert_eq(sb_batch_builder_append_int(bb, 0, r, &e), 0);
        cr_assert_eq(r == 1 ? sb_batch_builder_append_null(bb, 1, &e)
                            : sb_batch_builder_append_list(bb, 1, X[r], 3, &e),
                     0);
        cr_assert(!tag || sb_batch_builder_append_binary(bb, 2, t, strlen(t), &e) == 0);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, len, &e), 0);
    sb_batch_builder_free(bb);
    return blob;
}

Test(mlp, tensor_column_in_typed_columns_out)
{
    sb_err e = {0};
    size_t len;
    void *blob = x_part(false, &len);
    char *args;
    cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"x\",\"topK\":2}", model_file()) > 0);
    /* batches of 2 rows: the op's output rows follow the input's, row ranges that start inside
     * the partition included */
    cr_assert_eq(run(args, blob, len, 2, &e), 0, "%s", e.msg);
    sb_batch *out;
    cr_assert_eq(sb_batch_open(g_blob, g_len, &out, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_ncols(out), 4);
    const sb_column *y = sb_batch_column(out, 2), *k = sb_batch_column(out, 3);
    cr_assert_str_eq(y->name, "y");
    cr_assert_str_eq(k->name, "yTopK");
    cr_assert_eq(y->list_size, 2);
    for (int r = 0; r < 5; r++) {
        cr_assert_eq(sb_column_valid(y, r), r != 1, "row %d validity", r);
        if (r == 1)
            continue;
        double want[2];
        expect_row(X[r], want, 1);
        const float *got = (const float *)y->values + 2 * r;
        for (int o = 0; o < 2; o++)
            cr_assert(fabs(got[o] - want[o]) <= 1e-5 * fmax(1, fabs(want[o])),
                      "row %d output %d: %g, want %g", r, o, got[o], want[o]);
        const int32_t *ki = (const int32_t *)k->values + 2 * r;
        cr_assert_eq(ki[0], want[0] >= want[1] ? 0 : 1, "row %d top 1", r);
        cr_assert_eq(ki[1], want[0] >= want[1] ? 1 : 0);
    }
    sb_batch_close(out);
    sb_part_free(g_blob);
    sb_part_free(blob);
    free(args);
    sb_op_shutdown();
}

static void *json_part(const char *const *recs, size_t n, size_t *len)
{
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(sb_batch_builder_append_binary(bb, 0, recs[i], strlen(recs[i]), &e), 0);
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, len, &e), 0);
    sb_batch_builder_free(bb);
    return blob;
}

/* outputField = field: the outputs replace the input column in its place (an int16 input:
 * every numeric type is read as float32); a jsonl input is refused naming both args. */
Test(mlp, output_field_equal_to_field_replaces_the_tensor_column)
{
    sb_field f[3] = {
        {.name = "id", .type = SB_TYPE_INT64},
        {.name = "x", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_INT16, .list_size = 3},
        {.name = "tag", .type = SB_TYPE_UTF8}};
    static const int16_t XI[4][3] = {{1, 2, 3}, {-7, 0, 5}, {300, -2, 1}, {0, 0, 0}};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(f, 3, &e);
    for (int r = 0; r < 4; r++) {
        char tag[8];
        snprintf(tag, sizeof tag, "t%d", r);
        cr_assert_eq(sb_batch_builder_append_int(bb, 0, 10 + r, &e), 0);
        cr_assert_eq(sb_batch_builder_append_list(bb, 1, XI[r], 3, &e), 0, "%s", e.msg);
        cr_assert_eq(sb_batch_builder_append_binary(bb, 2, tag, strlen(tag), &e), 0);
    }
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0);
    sb_batch_builder_free(bb);
    char *args;
    cr_assert(asprintf(&args,
                       "{\"weights\":\"%s\",\"field\":\"x\",\"outputField\":\"x\","
                       "\"topK\":1}",
                       model_file()) > 0);
    cr_assert_eq(run(args, blob, len, 3, &e), 0, "%s", e.msg);
    sb_batch *out;
    cr_assert_eq(sb_batch_open(g_blob, g_len, &out, &e), 0, "%s", e.msg);
    cr_assert_eq(sb_batch_ncols(out), 4, "id, x (the outputs), tag, xTopK");
    cr_assert_eq(sb_batch_rows(out), 4);
    const sb_column *id = sb_batch_column(out, 0), *y = sb_batch_column(out, 1);
    const sb_column *tag = sb_batch_column(out, 2), *k = sb_batch_column(out, 3);
    cr_assert_str_eq(y->name, "x");
    cr_assert_eq(y->child_type, SB_TYPE_FLOAT32);
    cr_assert_eq(y->list_size, 2);
    cr_assert_str_eq(tag->name, "tag");
    cr_assert_str_eq(k->name, "xTopK");
    for (int r = 0; r < 4; r++) {
        float xf[3] = {XI[r][0], XI[r][1], XI[r][2]};
        double want[2];
        expect_row(xf, want, 1);
        const float *got = (const float *)y->values + 2 * r;
        for (int o = 0; o < 2; o++)
            cr_assert(fabs(got[o] - want[o]) <= 1e-5 * fmax(1, fabs(want[o])),
                      "row %d output %d: %g, want %g", r, o, got[o], want[o]);
        cr_assert_eq(((const int64_t *)id->values)[r], 10 + r);
        size_t tl;
        const char *t = sb_column_binary(tag, (size_t)r, &tl);
        char want_tag[8];
        snprintf(want_tag, sizeof want_tag, "t%d", r);
        cr_assert(tl == strlen(want_tag) && memcmp(t, want_tag, tl) == 0, "row %d tag", r);
        cr_assert_eq(((const int32_t *)k->values)[r], want[0] >= want[1] ? 0 : 1, "row %d", r);
    }
    sb_batch_close(out);
    sb_part_free(g_blob);
    sb_part_free(blob);
    free(args);

    const char *recs[] = {"{\"x\":[1,2,3]}"};
    void *jb = json_part(recs, 1, &len);
    cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"x\",\"outputField\":\"x\"}",
                       model_file()) > 0);
    cr_assert_neq(run(args, jb, len, 8, &e), 0);
    cr_assert(strstr(e.msg, "args.outputField \"x\" equals args.field") != NULL, "%s", e.msg);
    if (g_blob)
        sb_part_free(g_blob);
    sb_part_free(jb);
    free(args);
    sb_op_shutdown();
}

Test(mlp, jsonl_records_get_the_output_member)
{
    const char *recs[] = {"{\"id\":1,\"v\":[1,2,3]}", " {\"v\":[3, -2, 1e0]} ", "{\"v\":[0,0,0]}"};
    size_t len;
    void *blob = json_part(recs, 3, &len);
    char *args;
    cr_assert(asprintf(&args,
                       "{\"weights\":\"%s\",\"field\":\"v\",\"activation\":\"none\","
                       "\"outputField\":\"logits\"}",
                       model_file()) > 0);
    sb_err e = {0};
    cr_assert_eq(run(args, blob, len, 0, &e), 0, "%s", e.msg);
    sb_batch *out;
    cr_assert_eq(sb_batch_open(g_blob, g_len, &out, &e), 0);
    const sb_column *c = sb_batch_column(out, 0);
    const float xs[3][3] = {{1, 2, 3}, {3, -2, 1}, {0, 0, 0}};
    for (int r = 0; r < 3; r++) {
        size_t n;
        const char *p = sb_column_binary(c, r, &n);
        char *s = strndup(p, n);
        double want[2];
        expect_row(xs[r], want, 0);
        double got[2];
        const char *at = strstr(s, "\"logits\":[");
        cr_assert_not_null(at, "%s", s);
        cr_assert_eq(sscanf(at, "\"logits\":[%lf,%lf]}", &got[0], &got[1]), 2, "%s", s);
        for (int o = 0; o < 2; o++)
            cr_assert(fabs(got[o] - want[o]) <= 1e-5 * fmax(1, fabs(want[o])), "%s: want %g", s,
                      want[o]);
        if (r == 0)
            cr_assert(strncmp(s, "{\"id\":1,\"v\":[1,2,3],\"logits\":[", 30) == 0, "%s", s);
        free(s);
    }
    sb_batch_close(out);
    sb_part_free(g_blob);
    sb_part_free(blob);
    free(args);
    sb_op_shutdown();
}

Test(mlp, bad_records_are_data_errors_naming_the_record)
{
    struct {
        const char *rec, *want;
    } cases[] = {
        {"{\"v\":[1,2]}", "record 0: field \"v\" has the wrong number of elements (2 elements"},
        {"{\"v\":[1,2,\"x\"]}", "record 0: field \"v\" has an element that is not a number"},
        {"{\"w\":[1,2,3]}", "record 0: field \"v\" is absent, not an array of 3 numbers"},
        {"{\"v\":[1,2,3],\"y\":0}", "record 0 already has a field \"y\""},
        {"[1,2,3]", "record 0 is a JSON array, not an object"},
        {"{\"v\":[1,2,3e99]}", "a number outside float32's range"},
    };
    char *args;
    cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"v\"}", model_file()) > 0);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t len;
        void *blob = json_part(&cases[i].rec, 1, &len);
        sb_err e = {0};
        cr_expect_eq(run(args, blob, len, 0, &e), -1, "case %zu", i);
        cr_expect(e.data, "case %zu: a data error", i);
        cr_expect(strstr(e.msg, cases[i].want) != NULL, "case %zu: %s", i, e.msg);
        sb_part_free(blob);
        sb_part_free(g_blob);
        g_blob = NULL;
    }
    free(args);
    sb_op_shutdown();
}

Test(mlp, bad_weights_files_say_what_is_wrong)
{
    float d[8] = {0};
    struct {
        const char *header;
        size_t dlen;
        const char *want;
    } cases[] = {
        {"{\"0.weight\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8,
         "has dtype F16 (F32 and F64 are supported"},
        {"{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,64]}}", 32,
         "data_offsets [0, 64] lie outside the 32 data bytes"},
        {"{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,16]}}", 32,
         "16 data bytes for 6 values of F32"},
        {"{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
         "\"1.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]}}",
         32, "overlap"},
        {"{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 32,
         "tensor \"fc.weight\" is not <index>.weight or <index>.bias"},
        {"{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
         "\"1.weight\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[16,28]}}",
         32, "layers do not chain: 1.weight takes 3 inputs, the layer before gives 2"},
        {"{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
         "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[16,28]}}",
         32, "tensor 0.bias must have shape [2]"},
        {"{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
         "\"3.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
         32, "tensor \"3.bias\" has no matching weight"},
        {"not json at all", 0, "the header is not a JSON object"},
        {"{}", 0, "no <index>.weight tensor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = write_st(cases[i].header, d, cases[i].dlen);
        char *args;
        cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"v\"}", path) > 0);
        const sb_op_impl *op = sb_op_find("tensor.mlp");
        void *st = NULL;
        sb_err e = {0};
        cr_expect_eq(op->init(args, &st, &e), -1, "case %zu", i);
        cr_expect(strstr(e.msg, cases[i].want) != NULL, "case %zu: %s", i, e.msg);
        cr_expect(strstr(e.msg, path) != NULL, "case %zu names the file: %s", i, e.msg);
        free(args);
    }
    /* a header length past the end of the file */
    FILE *f = fopen(write_st("{}", NULL, 0), "r+b");
    uint64_t big = 1ull << 40;
    fwrite(&big, 8, 1, f);
    fclose(f);
    uint8_t *buf = malloc(16);
    memcpy(buf, &big, 8);
    memcpy(buf + 8, "{}      ", 8);
    sb_safetensors st;
    sb_err e = {0};
    cr_expect_eq(sb_st_parse(buf, 16, &st, &e), -1);
    cr_expect(strstr(e.msg, "not a safetensors file?") != NULL, "%s", e.msg);
}

/* args.device in a build without CUDA (this test links only the archive): cuda fails and says
 * why, cpu and auto (the default) run the CPU implementation, anything else is refused; the
 * worker's gauge says no device once a stage asked. */
Test(mlp, device_cuda_fails_clearly_without_the_cuda_build_and_auto_is_the_cpu)
{
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    const char *w = model_file();
    cr_assert_eq(sb_op_mlp_cuda_devices(), -1, "nothing asked before the first stage");
    struct {
        const char *device, *want; /* want: NULL when init succeeds */
    } cases[] = {
        {"\"cuda\"", "tensor.mlp: args.device is cuda, but this worker was built without CUDA "
                     "(the CUDA build is streambatch-worker-gpu, in the worker-gpu image)"},
        {"\"gpu\"", "tensor.mlp: args.device must be auto, cpu or cuda"},
        {"1", "tensor.mlp: args.device must be auto, cpu or cuda"},
        {"\"cpu\"", NULL},
        {"\"auto\"", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *args;
        cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"v\",\"device\":%s}", w,
                           cases[i].device) > 0);
        void *st = NULL;
        sb_err e = {0};
        int rc = op->init(args, &st, &e);
        if (cases[i].want == NULL) {
            cr_expect_eq(rc, 0, "%s: %s", cases[i].device, e.msg);
        } else {
            cr_expect_eq(rc, -1, "%s", cases[i].device);
            cr_expect(strstr(e.msg, cases[i].want) != NULL, "%s: %s", cases[i].device, e.msg);
        }
        op->free(st);
        free(args);
    }
    cr_expect_eq(sb_op_mlp_cuda_devices(), 0, "asked once: none");
    /* the default (auto) gives the CPU's outputs, bit for bit */
    const char *recs[] = {"{\"v\":[1,2,3]}", "{\"v\":[-1,0.5,2]}", "{\"v\":[3,-2,1]}"};
    size_t len;
    void *blob = json_part(recs, 3, &len);
    char *out[2];
    for (int k = 0; k < 2; k++) {
        char *args;
        cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"v\"%s}", w,
                           k ? ",\"device\":\"cpu\"" : "") > 0);
        sb_err e = {0};
        cr_assert_eq(run(args, blob, len, 2, &e), 0, "%s", e.msg);
        sb_batch *b;
        cr_assert_eq(sb_batch_open(g_blob, g_len, &b, &e), 0);
        size_t n, total = 0;
        out[k] = NULL;
        for (size_t r = 0; r < sb_batch_rows(b); r++) {
            const char *p = sb_column_binary(sb_batch_column(b, 0), r, &n);
            out[k] = realloc(out[k], total + n + 2);
            memcpy(out[k] + total, p, n);
            total += n;
            out[k][total++] = '\n';
            out[k][total] = '\0';
        }
        sb_batch_close(b);
        sb_part_free(g_blob);
        g_blob = NULL;
        free(args);
    }
    cr_expect_str_eq(out[0], out[1]);
    cr_expect(strstr(out[0], "\"y\":[") != NULL, "%s", out[0]);
    free(out[0]);
    free(out[1]);
    sb_part_free(blob);
    sb_op_shutdown();
}

/* Runs tensor.mlp as one task of stage "score" over blob with a state from the cache (returned
 * after the task); *used: the state it ran with. 0 with the output in g_blob. */
static int run_cached(sb_op_cache *c, const char *args, void *blob, size_t len, void **used,
                      sb_err *e)
{
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    void *st;
    if (sb_op_cache_get(c, op, "score", args, &st, e) != 0)
        return -1;
    *used = st;
    int rc = run_state(op, st, blob, len, 2, e);
    if (rc == 0)
        sb_op_cache_put(c, op, "score", args, st);
    else
        op->free(st);
    return rc;
}

/* Op state per worker (ops.h): a state kept between tasks (weights, scratch) and reset gives the
 * next task the same output as the first task. */
Test(mlp, a_reused_state_gives_the_same_output)
{
    sb_field f = {
        .name = "x", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = 3};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    for (int r = 0; r < 5; r++)
        cr_assert_eq(sb_batch_builder_append_list(bb, 0, X[r], 3, &e), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0);
    sb_batch_builder_free(bb);
    char *args;
    cr_assert(asprintf(&args, "{\"weights\":\"%s\",\"field\":\"x\",\"device\":\"cpu\"}",
                       model_file()) > 0);
    sb_op_cache *c = sb_op_cache_new(2);
    void *first = NULL, *used = NULL, *out1 = NULL;
    size_t len1 = 0;
    for (int task = 0; task < 3; task++) {
        cr_assert_eq(run_cached(c, args, blob, len, &used, &e), 0, "%s", e.msg);
        if (task == 0) {
            first = used;
            out1 = g_blob;
            len1 = g_len;
            continue;
        }
        cr_expect_eq(used, first, "task %d reuses the state", task);
        cr_expect_eq(g_len, len1);
        cr_expect_eq(memcmp(g_blob, out1, len1 < g_len ? len1 : g_len), 0, "same output");
        sb_part_free(g_blob);
    }
    sb_op_cache_stats st;
    sb_op_cache_stats_get(c, &st);
    cr_expect_eq(st.created, 1);
    cr_expect_eq(st.reused, 2);
    sb_op_cache_free(c);
    sb_op_shutdown();
    sb_part_free(out1);
    sb_part_free(blob);
    free(args);
}

/* The GEMMs (OpenBLAS: GEMV for one row, GEMM for more) against a double-precision reference on
 * a wider model with odd sizes (37 -> 129 -> 65 -> 3, gelu, the middle layer without bias): every
 * batch size (1, 2, 7, 64 and one past the rows) gives outputs within 1e-5 (relative, at least
 * 1) of the reference, so the per-row and the blocked paths agree with each other too. */
#define WD0 37
#define WD1 129
#define WD2 65
#define WD3 3
#define WROWS 70

static float g_w0[WD1][WD0], g_b0[WD1], g_w1[WD2][WD1], g_w2[WD3][WD2], g_b2[WD3];

static const char *wide_model_file(void)
{
    unsigned s = 12345;
#define RND() ((s = s * 1103515245u + 12345u), ((float)((s >> 8) & 0xffff) / 65536.0f - 0.5f))
    for (int o = 0; o < WD1; o++) {
        g_b0[o] = RND() * 0.2f;
        for (int i = 0; i < WD0; i++)
            g_w0[o][i] = RND() * 0.4f;
    }
    for (int o = 0; o < WD2; o++)
        for (int i = 0; i < WD1; i++)
            g_w1[o][i] = RND() * 0.2f;
    for (int o = 0; o < WD3; o++) {
        g_b2[o] = RND();
        for (int i = 0; i < WD2; i++)
            g_w2[o][i] = RND() * 0.3f;
    }
#undef RND
    size_t n0 = sizeof g_w0, n1 = sizeof g_b0, n2 = sizeof g_w1, n3 = sizeof g_w2, n4 = sizeof g_b2;
    char *data = malloc(n0 + n1 + n2 + n3 + n4), hdr[1024];
    cr_assert_not_null(data);
    memcpy(data, g_w0, n0);
    memcpy(data + n0, g_b0, n1);
    memcpy(data + n0 + n1, g_w1, n2);
    memcpy(data + n0 + n1 + n2, g_w2, n3);
    memcpy(data + n0 + n1 + n2 + n3, g_b2, n4);
    snprintf(hdr, sizeof hdr,
             "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%zu]},"
             "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},"
             "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"4.weight\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]},"
             "\"4.bias\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}}",
             WD1, WD0, n0, WD1, n0, n0 + n1, WD2, WD1, n0 + n1, n0 + n1 + n2, WD3, WD2,
             n0 + n1 + n2, n0 + n1 + n2 + n3, WD3, n0 + n1 + n2 + n3, n0 + n1 + n2 + n3 + n4);
    const char *path = write_st(hdr, data, n0 + n1 + n2 + n3 + n4);
    free(data);
    return path;
}

static double gelu_d(double v)
{
    return 0.5 * v * (1.0 + erf(v * 0.70710678118654752));
}

static void wide_expect(const float *x, double y[WD3])
{
    double h0[WD1], h1[WD2];
    for (int o = 0; o < WD1; o++) {
        double a = g_b0[o];
        for (int i = 0; i < WD0; i++)
            a += (double)g_w0[o][i] * x[i];
        h0[o] = gelu_d(a);
    }
    for (int o = 0; o < WD2; o++) {
        double a = 0;
        for (int i = 0; i < WD1; i++)
            a += (double)g_w1[o][i] * h0[i];
        h1[o] = gelu_d(a);
    }
    for (int o = 0; o < WD3; o++) {
        double a = g_b2[o];
        for (int i = 0; i < WD2; i++)
            a += (double)g_w2[o][i] * h1[i];
        y[o] = a;
    }
}

Test(mlp, every_batch_size_matches_the_reference_on_a_wider_model)
{
    static float xs[WROWS][WD0];
    for (int r = 0; r < WROWS; r++)
        for (int i = 0; i < WD0; i++)
            xs[r][i] = (float)((r * 31 + i * 17) % 23) / 11.0f - 1.0f;
    sb_field f = {
        .name = "x", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = WD0};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    for (int r = 0; r < WROWS; r++)
        cr_assert_eq(sb_batch_builder_append_list(bb, 0, xs[r], WD0, &e), 0);
    void *blob;
    size_t len;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, &len, &e), 0);
    sb_batch_builder_free(bb);
    char *args;
    cr_assert(asprintf(&args,
                       "{\"weights\":\"%s\",\"field\":\"x\",\"activation\":\"gelu\","
                       "\"device\":\"cpu\"}",
                       wide_model_file()) > 0);
    static const size_t batches[] = {1, 2, 7, 64, WROWS + 1};
    for (size_t k = 0; k < sizeof batches / sizeof *batches; k++) {
        cr_assert_eq(run(args, blob, len, batches[k], &e), 0, "%s", e.msg);
        sb_batch *out;
        cr_assert_eq(sb_batch_open(g_blob, g_len, &out, &e), 0, "%s", e.msg);
        const sb_column *y = sb_batch_column(out, 1);
        cr_assert_eq(y->list_size, WD3);
        for (int r = 0; r < WROWS; r++) {
            double want[WD3];
            wide_expect(xs[r], want);
            const float *got = (const float *)y->values + WD3 * r;
            for (int o = 0; o < WD3; o++)
                cr_assert(fabs(got[o] - want[o]) <= 1e-5 * fmax(1, fabs(want[o])),
                          "batch %zu row %d output %d: %.9g, want %.9g", batches[k], r, o, got[o],
                          want[o]);
        }
        sb_batch_close(out);
        sb_part_free(g_blob);
    }
    sb_part_free(blob);
    free(args);
    sb_op_shutdown();
}

/* The rows of an output partition as JSON text, one line a row (typed columns through
 * sb_batch_rows_json; records as they are). */
static char *rows_text(const void *blob, size_t len)
{
    sb_err e = {0};
    sb_batch *b, *rb = NULL;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    void *rj = NULL;
    size_t rl = 0;
    if (sb_batch_find(b, "record") < 0) {
        cr_assert_eq(sb_batch_rows_json(b, &rj, &rl, &e), 0, "%s", e.msg);
        cr_assert_eq(sb_batch_open(rj, rl, &rb, &e), 0, "%s", e.msg);
    }
    const sb_batch *r = rb != NULL ? rb : b;
    const sb_column *c = sb_batch_column(r, 0);
    char *text = NULL;
    size_t tl = 0;
    FILE *f = open_memstream(&text, &tl);
    for (size_t i = 0; i < sb_batch_rows(r); i++) {
        size_t n;
        const char *p = sb_column_binary(c, i, &n);
        fprintf(f, "%.*s\n", (int)n, p);
    }
    fclose(f);
    if (rb != NULL)
        sb_batch_close(rb);
    sb_part_free(rj);
    sb_batch_close(b);
    return text;
}

/* tensor.mlp then project in one call chain, or (fused) tensor.mlp having absorbed project:
 * the rows text of the output. The states come from cache c (stage "score" and "keep") and go
 * back to it, as the runtime does: the project's state after the mlp's, whose reset forgets the
 * borrowed project. 0, or -1 + e. */
static int mlp_then_project(sb_op_cache *c, const char *margs, const char *pargs, bool fused,
                            void *blob, size_t len, char **text, sb_err *e)
{
    const sb_op_impl *mlp = sb_op_find("tensor.mlp"), *prj = sb_op_find("project");
    void *ms, *ps;
    cr_assert_eq(sb_op_cache_get(c, mlp, "score", margs, &ms, e), 0, "%s", e->msg);
    cr_assert_eq(sb_op_cache_get(c, prj, "keep", pargs, &ps, e), 0, "%s", e->msg);
    if (fused) {
        cr_assert_not_null(mlp->absorb_next, "tensor.mlp absorbs a project after it");
        cr_assert(mlp->absorb_next(ms, prj, ps), "tensor.mlp absorbs the project after it");
    }
    int rc = run_state(mlp, ms, blob, len, 2, e);
    if (rc == 0 && !fused) {
        void *mid = g_blob;
        rc = run_state(prj, ps, mid, g_len, 0, e);
        sb_part_free(mid);
    }
    if (rc == 0) {
        *text = rows_text(g_blob, g_len);
        sb_part_free(g_blob);
        g_blob = NULL;
        sb_op_cache_put(c, mlp, "score", margs, ms);
        sb_op_cache_put(c, prj, "keep", pargs, ps);
    } else {
        mlp->free(ms); /* never the borrowed project's state */
        prj->free(ps);
    }
    return rc;
}

/* tensor.mlp absorbs a project right after it (issue 36: the headline job's 48 KiB image a row
 * was copied into the GPU stage's output only for the project to drop it). The fused output is
 * the two ops' output, over typed columns and over records; a column the project lists and the
 * output lacks is project's data error; the absorbed project is only borrowed: after the task
 * both states are kept (and reused), and the mlp's next task without a project keeps every
 * column. */
Test(mlp, a_project_after_it_is_absorbed_and_both_states_kept)
{
    sb_err e = {0};
    size_t len;
    void *blob = x_part(true, &len);
    char *margs;
    cr_assert(asprintf(&margs, "{\"weights\":\"%s\",\"field\":\"x\",\"topK\":1}", model_file()) >
              0);
    const char *pargs = "{\"fields\":[\"yTopK\",\"tag\",\"y\"]}";
    sb_op_cache *c = sb_op_cache_new(4);
    char *two, *one;
    cr_assert_eq(mlp_then_project(c, margs, pargs, false, blob, len, &two, &e), 0, "%s", e.msg);
    cr_assert_eq(mlp_then_project(c, margs, pargs, true, blob, len, &one, &e), 0, "%s", e.msg);
    cr_expect_str_eq(one, two, "fused output is the two ops' output");
    cr_expect(strstr(one, "\"id\"") == NULL && strstr(one, "\"x\"") == NULL, "%s", one);
    cr_expect(strncmp(one, "{\"yTopK\":[", 10) == 0, "the listed order: %s", one);
    free(two);
    free(one);
    /* the next task of the mlp alone (its state reused, reset): every column again */
    cr_assert_eq(run_cached(c, margs, blob, len, &(void *){NULL}, &e), 0, "%s", e.msg);
    char *all = rows_text(g_blob, g_len);
    cr_expect(strstr(all, "\"id\":4") != NULL && strstr(all, "\"x\":[") != NULL, "%s", all);
    free(all);
    sb_part_free(g_blob);
    g_blob = NULL;
    sb_op_cache_stats st;
    sb_op_cache_stats_get(c, &st);
    cr_expect_eq(st.created, 2, "one mlp and one project state");
    cr_expect_eq(st.reused, 3, "both after the first task, the mlp's once more");
    /* a listed column the output lacks: project's data error, naming the output's columns */
    char *out = NULL;
    cr_assert_neq(
        mlp_then_project(c, margs, "{\"fields\":[\"tag\",\"zz\"]}", true, blob, len, &out, &e), 0);
    cr_expect(e.data, "a data error");
    cr_expect(strstr(e.msg, "project: the input has no column \"zz\" (its columns: id, x, tag, y, "
                            "yTopK)") != NULL,
              "%s", e.msg);
    sb_part_free(g_blob);
    g_blob = NULL;
    sb_part_free(blob);

    /* records: the output record written projected; a field the record lacks is left out */
    const char *recs[] = {"{\"id\":1,\"v\":[1,2,3],\"pad\":\"xxxx\"}", "{\"v\":[3,-2,1]}"};
    blob = json_part(recs, 2, &len);
    free(margs);
    cr_assert(asprintf(&margs, "{\"weights\":\"%s\",\"field\":\"v\",\"topK\":2}", model_file()) >
              0);
    pargs = "{\"fields\":[\"id\",\"yTopK\"]}";
    cr_assert_eq(mlp_then_project(c, margs, pargs, false, blob, len, &two, &e), 0, "%s", e.msg);
    cr_assert_eq(mlp_then_project(c, margs, pargs, true, blob, len, &one, &e), 0, "%s", e.msg);
    cr_expect_str_eq(one, two);
    cr_expect(strncmp(one, "{\"id\":1,\"yTopK\":[", 17) == 0, "%s", one);
    cr_expect(strstr(one, "\n{\"yTopK\":[") != NULL, "%s", one);
    free(two);
    free(one);
    sb_op_cache_free(c);
    sb_part_free(blob);
    free(margs);
    sb_op_shutdown();
}
