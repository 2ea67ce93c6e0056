/* Tests of tensor.mlp's CUDA implementation (worker/ops/tensor/mlp_cuda.cu, cuBLASLt), linked
 * with the CUDA objects (Makefile: CUDA_TEST_BINS). With a device: one layer (the op's own
 * model, run and plans) against a double precision reference at each precision, shapes that are
 * not multiples of 8 and batches of 1, 3 and 1025 rows; and the op on CUDA against the op on the
 * CPU (the reference) over the same random model and data, tensor columns and jsonl, several
 * batch sizes (one batch, batches that overlap on the two streams, a last batch that is not
 * full), also from a state kept between tasks (the worker's op state cache).
 * Tolerances (docs/pipeline-api.md): fp32 within 1e-4 of the larger of |want| and the row's
 * largest |want|; one layer at tf32 within 2.5e-3 and at bf16 within 1e-2 of sum_k |x_k w_k|
 * + |b| (each product's inputs rounded to 10 or 7 mantissa bits, truncated or to nearest); the
 * 3-layer model at tf32 within 1e-2, at bf16 within 5e-2 of the row's largest |want| (a
 * simulation of that model's rounding in double precision, 300 rows, gave 4.1e-3 for tf32
 * truncated and 1.4e-2 for bf16).
 * Without one (no driver: cudaGetDeviceCount fails): those skip, and the tests check that
 * `device: cuda` fails with the CUDA error and that `auto` gives the CPU's results. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partition/partition.h"
#include "tests/unit/testutil.h"
#include "worker/ops/ops.h"
#include "worker/ops/statecache.h"
#include "worker/ops/tensor/mlp_cuda.h"

TestSuite(mlp_cuda, .timeout = 120);

/* The number of devices, or 0 with why[] set. */
static int devices(char *why, size_t cap)
{
    cr_assert_not_null(sb_mlp_cuda_probe, "this test links the CUDA objects");
    sb_err e = {0};
    int n = sb_mlp_cuda_probe(&e);
    snprintf(why, cap, "%s", n < 0 ? e.msg : "cudaGetDeviceCount found none");
    return n < 0 ? 0 : n;
}

static void need_device(void)
{
    char why[SB_ERR_MAX];
    if (devices(why, sizeof why) == 0)
        cr_skip("no CUDA device here (%s): the CUDA results are not compared", why);
}

/* Deterministic values in [-1, 1). */
static float rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* |got - want| within tol of the larger of |want| and the vector's scale (a value near zero
 * in a vector of large ones is judged against the vector). */
static void expect_close(const float *got, const float *want, size_t n, size_t width, double tol,
                         const char *what)
{
    for (size_t r = 0; r < n / width; r++) {
        double scale = 1e-6;
        for (size_t k = 0; k < width; k++)
            scale = fmax(scale, fabs(want[r * width + k]));
        for (size_t k = 0; k < width; k++) {
            size_t i = r * width + k;
            cr_assert(fabs(got[i] - want[i]) <= tol * fmax(fabs(want[i]), scale),
                      "%s: row %zu output %zu: %.9g, want %.9g", what, r, k, got[i], want[i]);
        }
    }
}

static const char *const PREC_NAMES[] = {"fp32", "tf32", "bf16"};

/* One layer's tolerance at a precision, as a fraction of sum_k |x_k w_k| + |b| (see the top). */
static double layer_tol(int prec)
{
    return prec == SB_MLP_CUDA_TF32 ? 2.5e-3 : prec == SB_MLP_CUDA_BF16 ? 1e-2 : 0;
}

/* One shape through sb_mlp_cuda_linear (the op's cuBLASLt path), every activation, against
 * double precision; b may be left out (NULL). fp32: expect_close at 1e-4; tf32 and bf16: each
 * output within layer_tol of its sum of absolute products (an error bound that cancellation in
 * the sum cannot break, and that a wrong layout or transpose breaks by far). */
static void gemm_case(size_t n, size_t din, size_t dout, int prec, bool bias)
{
    float *x = malloc(n * din * 4), *w = malloc(dout * din * 4), *b = malloc(dout * 4);
    float *y = malloc(n * dout * 4), *want = malloc(n * dout * 4);
    double *mag = malloc(n * dout * sizeof(double));
    unsigned s = 7;
    for (size_t i = 0; i < n * din; i++)
        x[i] = rnd(&s);
    for (size_t i = 0; i < dout * din; i++)
        w[i] = rnd(&s);
    for (size_t i = 0; i < dout; i++)
        b[i] = bias ? rnd(&s) : 0.0f;
    for (int act = SB_MLP_CUDA_RELU; act <= SB_MLP_CUDA_NONE; act++) {
        for (size_t r = 0; r < n; r++)
            for (size_t o = 0; o < dout; o++) {
                double v = b[o], m = fabs(b[o]);
                for (size_t k = 0; k < din; k++) {
                    v += (double)x[r * din + k] * w[o * din + k];
                    m += fabs((double)x[r * din + k] * w[o * din + k]);
                }
                if (act == SB_MLP_CUDA_RELU)
                    v = v > 0 ? v : 0;
                else if (act == SB_MLP_CUDA_GELU)
                    v = 0.5 * v * (1 + erf(v / sqrt(2.0)));
                want[r * dout + o] = (float)v;
                mag[r * dout + o] = m;
            }
        sb_err e = {0};
        memset(y, 0xff, n * dout * 4); /* NaN: a value the GEMM does not write fails */
        cr_assert_eq(sb_mlp_cuda_linear(x, n, din, w, bias ? b : NULL, dout, act, prec, y, &e), 0,
                     "%s", e.msg);
        char what[96];
        snprintf(what, sizeof what, "%zu x %zu -> %zu, %s, %s%s", n, din, dout, PREC_NAMES[prec],
                 act == 0   ? "relu"
                 : act == 1 ? "gelu"
                            : "none",
                 bias ? "" : ", no bias");
        if (prec == SB_MLP_CUDA_FP32) {
            expect_close(y, want, n * dout, dout, 1e-4, what);
            continue;
        }
        /* relu and gelu move a value by at most its own change (their slopes are at most
         * ~1.13), so the bound of the sum, with that slope, holds after them */
        for (size_t i = 0; i < n * dout; i++)
            cr_assert(fabs(y[i] - want[i]) <= 1.13 * layer_tol(prec) * mag[i] + 1e-6,
                      "%s: row %zu output %zu: %.9g, want %.9g (sum of |products| %.6g)", what,
                      i / dout, i % dout, y[i], want[i], mag[i]);
    }
    free(x), free(w), free(b), free(y), free(want), free(mag);
}

Test(mlp_cuda, one_layer_matches_a_double_reference_at_each_precision)
{
    need_device();
    for (int p = SB_MLP_CUDA_FP32; p <= SB_MLP_CUDA_BF16; p++) {
        /* in and out not multiples of 8 (nor of 4: ld alignments the heuristic must take),
         * batches of 1, 3 and 1025 rows, with and without a bias */
        gemm_case(1, 70, 131, p, true);
        gemm_case(3, 9, 3, p, false);
        gemm_case(1025, 133, 257, p, true);
        gemm_case(173, 72, 260, p, true);
        gemm_case(1, 4, 1, p, true);
        gemm_case(2000, 132, 1100, p, false); /* a grid that fills the GPU */
    }
}

Test(mlp_cuda, bf16_without_a_prepared_model_is_refused)
{
    need_device();
    size_t din = 8, dout = 4;
    float w[32] = {0};
    const float *wp = w, *bp = NULL;
    sb_err e = {0};
    sb_mlp_cuda_model *m = sb_mlp_cuda_model_new(1, &din, &dout, &wp, &bp, &e);
    cr_assert_not_null(m, "%s", e.msg);
    cr_expect_null(sb_mlp_cuda_run_new(m, SB_MLP_CUDA_RELU, SB_MLP_CUDA_BF16, &e));
    cr_expect(strstr(e.msg, "no bf16 weights") != NULL, "%s", e.msg);
    cr_expect_null(sb_mlp_cuda_run_new(m, SB_MLP_CUDA_RELU, 7, &e));
    cr_expect(strstr(e.msg, "no precision 7") != NULL, "%s", e.msg);
    cr_assert_eq(sb_mlp_cuda_model_prepare(m, SB_MLP_CUDA_BF16, &e), 0, "%s", e.msg);
    sb_mlp_cuda_run *r = sb_mlp_cuda_run_new(m, SB_MLP_CUDA_RELU, SB_MLP_CUDA_BF16, &e);
    cr_expect_not_null(r, "%s", e.msg);
    sb_mlp_cuda_run_free(r);
    sb_mlp_cuda_model_free(m);
}

/* A random 3-layer model dims[0] -> dims[1] -> dims[2] -> dims[3] as a safetensors file (path
 * in a static buffer, overwritten by the next call). */
static const char *model_file_dims(const size_t dims[4])
{
    static char path[256];
    char dir[128], header[1024];
    size_t off = 0, hl = 0, total = 0;
    for (int l = 0; l < 3; l++)
        total += dims[l + 1] * dims[l] + dims[l + 1];
    float *data = malloc(total * 4);
    unsigned s = 42;
    for (size_t i = 0; i < total; i++)
        data[i] = rnd(&s) * 0.3f;
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "{");
    for (int l = 0; l < 3; l++) {
        size_t wn = dims[l + 1] * dims[l] * 4, bn = dims[l + 1] * 4;
        hl += (size_t)snprintf(header + hl, sizeof header - hl,
                               "%s\"%d.weight\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu],"
                               "\"data_offsets\":[%zu,%zu]},\"%d.bias\":{\"dtype\":\"F32\","
                               "\"shape\":[%zu],\"data_offsets\":[%zu,%zu]}",
                               l ? "," : "", 2 * l, dims[l + 1], dims[l], off, off + wn, 2 * l,
                               dims[l + 1], off + wn, off + wn + bn);
        off += wn + bn;
    }
    hl += (size_t)snprintf(header + hl, sizeof header - hl, "}");
    sb_test_tmpl(dir, sizeof dir, "sb-test-mlp-cuda");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    uint64_t h64 = hl;
    fwrite(&h64, 8, 1, f);
    fwrite(header, 1, hl, f);
    fwrite(data, 4, total, f);
    fclose(f);
    free(data);
    return path;
}

/* 48 -> 96 -> 80 -> 10 */
static const char *model_file(void)
{
    static const size_t dims[4] = {48, 96, 80, 10};
    return model_file_dims(dims);
}

#define ROWS 1000
#define DIN 48
#define DOUT 10

static void *tensor_part(size_t *len)
{
    sb_field f = {
        .name = "x", .type = SB_TYPE_FIXED_LIST, .child_type = SB_TYPE_FLOAT32, .list_size = DIN};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    unsigned s = 3;
    for (int r = 0; r < ROWS; r++) {
        float x[DIN];
        for (int k = 0; k < DIN; k++)
            x[k] = rnd(&s) * 2;
        cr_assert_eq(sb_batch_builder_append_list(bb, 0, x, DIN, &e), 0, "%s", e.msg);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, len, &e), 0);
    sb_batch_builder_free(bb);
    return blob;
}

static void *json_part(size_t *len)
{
    sb_field f = {.name = "record", .type = SB_TYPE_UTF8};
    sb_err e = {0};
    sb_batch_builder *bb = sb_batch_builder_new(&f, 1, &e);
    unsigned s = 3;
    for (int r = 0; r < ROWS; r++) {
        char rec[DIN * 24 + 32];
        size_t at = (size_t)snprintf(rec, sizeof rec, "{\"id\":%d,\"v\":[", r);
        for (int k = 0; k < DIN; k++)
            at += (size_t)snprintf(rec + at, sizeof rec - at, "%s%.9g", k ? "," : "",
                                   (double)(rnd(&s) * 2));
        at += (size_t)snprintf(rec + at, sizeof rec - at, "]}");
        cr_assert_eq(sb_batch_builder_append_binary(bb, 0, rec, at, &e), 0);
    }
    void *blob;
    cr_assert_eq(sb_batch_builder_finish(bb, &blob, len, &e), 0);
    sb_batch_builder_free(bb);
    return blob;
}

typedef struct {
    float *y; /* ROWS x DOUT, in row order over every partition emitted */
    size_t rows;
    int json;
} sink;

static int collect(void *blob, size_t len, uint64_t rows, void *ud)
{
    (void)rows;
    sink *k = ud;
    sb_err e = {0};
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, &e), 0, "%s", e.msg);
    for (size_t r = 0; r < sb_batch_rows(b); r++, k->rows++) {
        cr_assert_lt(k->rows, ROWS);
        float *dst = k->y + k->rows * DOUT;
        if (!k->json) {
            const sb_column *c = sb_batch_column(b, (size_t)sb_batch_find(b, "y"));
            memcpy(dst, (const float *)c->values + r * DOUT, DOUT * 4);
            continue;
        }
        size_t n;
        const char *p = sb_column_binary(sb_batch_column(b, 0), r, &n);
        cJSON *j = cJSON_ParseWithLength(p, n);
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(j, "y");
        cr_assert_eq(cJSON_GetArraySize(y), DOUT, "%.*s", (int)n, p);
        cr_assert_eq(cJSON_GetObjectItemCaseSensitive(j, "id")->valueint, (int)k->rows);
        for (int o = 0; o < DOUT; o++)
            dst[o] = (float)cJSON_GetArrayItem(y, o)->valuedouble;
        cJSON_Delete(j);
    }
    sb_batch_close(b);
    sb_part_free(blob);
    return 0;
}

/* Runs tensor.mlp over blob with args; 0 with the outputs in y, or -1 + e. */
static int run(const char *args, void *blob, size_t len, size_t batch, int json, float *y,
               sb_err *e)
{
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    cr_assert_not_null(op);
    void *st;
    if (op->init(args, &st, e) != 0)
        return -1;
    sink k = {.y = y, .json = json};
    sb_op_out *o = sb_op_out_new(16 << 10, collect, &k, e); /* several output partitions */
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, e), 0);
    int rc = sb_op_run(op, st, b, batch, o, e);
    if (rc == 0)
        rc = op->finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_batch_close(b);
    sb_op_out_free(o);
    op->free(st);
    if (rc == 0)
        cr_assert_eq(k.rows, ROWS);
    return rc;
}

static char *args_for(const char *weights, const char *act, const char *device, const char *field)
{
    char *a;
    cr_assert(asprintf(&a,
                       "{\"weights\":\"%s\",\"field\":\"%s\",\"activation\":\"%s\","
                       "\"device\":\"%s\"}",
                       weights, field, act, device) > 0);
    return a;
}

Test(mlp_cuda, the_op_on_cuda_equals_the_op_on_the_cpu)
{
    need_device();
    const char *w = model_file();
    size_t lens[2];
    void *blobs[2] = {tensor_part(&lens[0]), json_part(&lens[1])};
    float *cpu = malloc(ROWS * DOUT * 4), *gpu = malloc(ROWS * DOUT * 4);
    const char *acts[] = {"relu", "gelu", "none"};
    const size_t batches[] = {0, 1, 128, 333};
    for (int json = 0; json < 2; json++)
        for (size_t a = 0; a < 3; a++) {
            char *ac = args_for(w, acts[a], "cpu", json ? "v" : "x");
            char *ag = args_for(w, acts[a], "cuda", json ? "v" : "x");
            sb_err e = {0};
            cr_assert_eq(run(ac, blobs[json], lens[json], 128, json, cpu, &e), 0, "%s", e.msg);
            for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
                memset(gpu, 0, ROWS * DOUT * 4);
                cr_assert_eq(run(ag, blobs[json], lens[json], batches[bi], json, gpu, &e), 0, "%s",
                             e.msg);
                char what[96];
                snprintf(what, sizeof what, "%s, %s, batches of %zu", json ? "jsonl" : "tensor",
                         acts[a], batches[bi]);
                expect_close(gpu, cpu, ROWS * DOUT, DOUT, 1e-4, what);
            }
            free(ac);
            free(ag);
        }
    /* auto picks the device: the same results */
    char *aa = args_for(w, "gelu", "auto", "x"), *ac = args_for(w, "gelu", "cpu", "x");
    sb_err e = {0};
    cr_assert_eq(run(ac, blobs[0], lens[0], 256, 0, cpu, &e), 0, "%s", e.msg);
    cr_assert_eq(run(aa, blobs[0], lens[0], 256, 0, gpu, &e), 0, "%s", e.msg);
    expect_close(gpu, cpu, ROWS * DOUT, DOUT, 1e-4, "auto");
    cr_expect_gt(sb_op_mlp_cuda_devices(), 0);
    free(aa), free(ac), free(cpu), free(gpu);
    sb_part_free(blobs[0]);
    sb_part_free(blobs[1]);
    sb_op_shutdown();
}

/* run() as one task of stage "score" with a state from the cache c, returned after the task
 * (ops.h, "Lifetime of an op state"); *used: the state it ran with. */
static int run_cached(sb_op_cache *c, const char *args, void *blob, size_t len, size_t batch,
                      float *y, void **used, sb_err *e)
{
    const sb_op_impl *op = sb_op_find("tensor.mlp");
    void *st;
    if (sb_op_cache_get(c, op, "score", args, &st, e) != 0)
        return -1;
    *used = st;
    sink k = {.y = y, .json = 0};
    sb_op_out *o = sb_op_out_new(16 << 10, collect, &k, e);
    sb_batch *b;
    cr_assert_eq(sb_batch_open(blob, len, &b, e), 0);
    int rc = sb_op_run(op, st, b, batch, o, e);
    if (rc == 0)
        rc = op->finish(st, o, e);
    if (rc == 0)
        rc = sb_op_out_flush(o, e);
    sb_batch_close(b);
    sb_op_out_free(o);
    if (rc == 0) {
        cr_assert_eq(k.rows, ROWS);
        sb_op_cache_put(c, op, "score", args, st);
    } else {
        op->free(st);
    }
    return rc;
}

/* The 3-layer model's tolerance against the CPU at a precision (see the top). */
static double model_tol(int prec)
{
    return prec == SB_MLP_CUDA_TF32 ? 1e-2 : prec == SB_MLP_CUDA_BF16 ? 5e-2 : 1e-4;
}

/* args_for with args.precision */
static char *args_prec(const char *weights, const char *act, const char *device, const char *prec)
{
    char *a;
    cr_assert(asprintf(&a,
                       "{\"weights\":\"%s\",\"field\":\"x\",\"activation\":\"%s\","
                       "\"device\":\"%s\",\"precision\":\"%s\"}",
                       weights, act, device, prec) > 0);
    return a;
}

/* Each precision through the op, hidden layers not multiples of 8 (48 -> 97 -> 33 -> 10),
 * batches of 1, 3, 333 and 1025 rows (more than the partition: one batch), against the CPU. */
Test(mlp_cuda, the_op_at_each_precision_matches_the_cpu_within_its_tolerance)
{
    need_device();
    static const size_t dims[4] = {48, 97, 33, 10};
    const char *w = model_file_dims(dims);
    size_t len;
    void *blob = tensor_part(&len);
    float *cpu = malloc(ROWS * DOUT * 4), *gpu = malloc(ROWS * DOUT * 4);
    const char *acts[] = {"relu", "gelu"};
    const size_t batches[] = {1, 3, 333, 1025};
    for (size_t a = 0; a < 2; a++) {
        char *ac = args_for(w, acts[a], "cpu", "x");
        sb_err e = {0};
        cr_assert_eq(run(ac, blob, len, 128, 0, cpu, &e), 0, "%s", e.msg);
        free(ac);
        for (int p = SB_MLP_CUDA_FP32; p <= SB_MLP_CUDA_BF16; p++) {
            char *ag = args_prec(w, acts[a], "cuda", PREC_NAMES[p]);
            for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
                memset(gpu, 0xff, ROWS * DOUT * 4);
                cr_assert_eq(run(ag, blob, len, batches[bi], 0, gpu, &e), 0, "%s", e.msg);
                char what[96];
                snprintf(what, sizeof what, "%s, %s, batches of %zu", PREC_NAMES[p], acts[a],
                         batches[bi]);
                expect_close(gpu, cpu, ROWS * DOUT, DOUT, model_tol(p), what);
            }
            free(ag);
        }
    }
    free(cpu), free(gpu);
    sb_part_free(blob);
    sb_op_shutdown();
}

/* A state kept between tasks keeps its CUDA run (cuBLASLt handle and plans, streams, pinned and
 * device buffers: what made a task's init cost milliseconds) and gives every later task the
 * CPU's results, at each precision, with batch sizes that change between tasks. */
static void reused_state(int prec)
{
    const char *w = model_file();
    size_t len;
    void *blob = tensor_part(&len);
    float *cpu = malloc(ROWS * DOUT * 4), *gpu = malloc(ROWS * DOUT * 4);
    char *ac = args_for(w, "gelu", "cpu", "x"),
         *ag = args_prec(w, "gelu", "cuda", PREC_NAMES[prec]);
    sb_err e = {0};
    cr_assert_eq(run(ac, blob, len, 128, 0, cpu, &e), 0, "%s", e.msg);
    sb_op_cache *c = sb_op_cache_new(2);
    void *first = NULL;
    const size_t batches[] = {128, 333, 1, 128};
    for (int task = 0; task < 4; task++) {
        void *used = NULL;
        memset(gpu, 0, ROWS * DOUT * 4);
        cr_assert_eq(run_cached(c, ag, blob, len, batches[task], gpu, &used, &e), 0, "%s", e.msg);
        if (task == 0)
            first = used;
        cr_expect_eq(used, first, "task %d: the same state", task);
        char what[64];
        snprintf(what, sizeof what, "%s, task %d, batches of %zu", PREC_NAMES[prec], task,
                 batches[task]);
        expect_close(gpu, cpu, ROWS * DOUT, DOUT, model_tol(prec), what);
    }
    sb_op_cache_stats st;
    sb_op_cache_stats_get(c, &st);
    cr_expect_eq(st.created, 1);
    cr_expect_eq(st.reused, 3);
    sb_op_cache_free(c);
    free(ac), free(ag), free(cpu), free(gpu);
    sb_part_free(blob);
    sb_op_shutdown();
}

Test(mlp_cuda, a_reused_state_keeps_its_streams_and_matches_the_cpu)
{
    need_device();
    for (int p = SB_MLP_CUDA_FP32; p <= SB_MLP_CUDA_BF16; p++)
        reused_state(p);
}

Test(mlp_cuda, without_a_device_cuda_fails_clearly_and_auto_runs_on_the_cpu)
{
    char why[SB_ERR_MAX];
    if (devices(why, sizeof why) > 0)
        cr_skip("a CUDA device is here: the fallback is not taken");
    const char *w = model_file();
    size_t len;
    void *blob = tensor_part(&len);
    float *cpu = malloc(ROWS * DOUT * 4), *dflt = malloc(ROWS * DOUT * 4);
    cr_assert_eq(sb_op_mlp_cuda_devices(), -1, "not asked before the first stage");
    char *ag = args_for(w, "relu", "cuda", "x");
    sb_err e = {0};
    cr_assert_eq(run(ag, blob, len, 100, 0, cpu, &e), -1);
    cr_expect(strstr(e.msg, "tensor.mlp: args.device is cuda, but no usable CUDA device: CUDA: "
                            "cudaGetDeviceCount: ") != NULL,
              "%s", e.msg);
    cr_expect(strstr(e.msg, why) != NULL, "the CUDA error string: %s (want %s)", e.msg, why);
    cr_expect_eq(sb_op_mlp_cuda_devices(), 0);
    char *ac = args_for(w, "relu", "cpu", "x");
    cr_assert_eq(run(ac, blob, len, 100, 0, cpu, &e), 0, "%s", e.msg);
    char *aa;
    cr_assert(asprintf(&aa, "{\"weights\":\"%s\",\"field\":\"x\"}", w) > 0); /* auto */
    cr_assert_eq(run(aa, blob, len, 100, 0, dflt, &e), 0, "%s", e.msg);
    cr_expect_eq(memcmp(cpu, dflt, ROWS * DOUT * 4), 0, "auto without a device is the CPU");
    free(ag), free(ac), free(aa), free(cpu), free(dflt);
    sb_part_free(blob);
    sb_op_shutdown();
}
