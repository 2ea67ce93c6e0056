/* mlp.c — the tensor.mlp operator, CPU implementation (the reference; docs/pipeline-api.md):
 * a multilayer perceptron of Linear layers with an activation between them, weights from a
 * safetensors file as PyTorch saves an nn.Sequential of Linear and activation layers
 * (`<index>.weight` [out, in] and `<index>.bias` [out], taken in index order).
 *
 * Args: weights (URI on any storage backend, required), field (the input, required),
 * activation (relu, gelu or none between layers; default relu), outputField (default "y"),
 * topK (optional: also "<outputField>TopK", the indices of the k largest outputs, largest
 * first), device (auto: CUDA when this worker has a usable device, else the CPU; cpu; cuda:
 * the stage fails, saying why, when there is no usable device or the worker is not the CUDA
 * build), precision (fp32, the default; tf32 or bf16: the GEMMs' precision on CUDA, refused with
 * device cpu; the CPU computes in fp32 whatever is asked, which is within every precision's
 * tolerance).
 *
 * Input, per batch: a fixed-size-list column named `field` (any numeric child type, as wide as
 * the first layer) gives typed output: every input column plus `outputField` (fixed-size list of
 * float32) and the top-k column (fixed-size list of int32); a null row gives null outputs.
 * Otherwise jsonl records: `field` is a top-level member holding an array of numbers, and each
 * output record is the input record with the output members added. A record without the field,
 * with a non-number or the wrong width, or that already has the output member is a data error
 * naming the record. A project right after it in the same task is absorbed (absorb_next,
 * borrowed): each batch's output is written with the project's columns only, as project would
 * have written it, and nothing else is copied.
 *
 * Weights are loaded once per worker process and kept (keyed by URI) across tasks; a file over
 * 2 GiB is refused. Memory: the state owns its scratch; the model cache owns the models until
 * sb_op_shutdown().
 *
 * CUDA (mlp_cuda.h; only in streambatch-worker-gpu, whose mlp_cuda.o defines the weak entry
 * points): the first stage that may use it asks cudaGetDeviceCount once per worker, and says
 * once in the log (and in the streambatch_worker_cuda_devices gauge) when there is no usable
 * device. A model's weights go to the device once, with the cached model, and stay there until
 * sb_op_shutdown() (their bf16 copy too, made by the first state at precision bf16). A state on
 * CUDA owns a run (a cuBLASLt handle and its GEMM plans, two streams with their pinned and device
 * buffers), kept with the state across tasks: batch k is converted into its slot's pinned buffer
 * (load_nums_par) and queued, then batch k-1's output is taken and appended while the device works
 * on batch k; the last batch of an input partition is waited for at once, so nothing is held past
 * the partition's last process() call.
 */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "io/schemes.h"
#include "partition/rowjson.h"
#include "worker/ops/impls.h"
#include "worker/ops/json.h"
#include "worker/ops/tensor/mlp_cuda.h"
#include "worker/ops/tensor/safetensors.h"

#define MAX_WEIGHTS (2ull << 30)
#define MAX_LAYERS 64

typedef enum { ACT_RELU, ACT_GELU, ACT_NONE } act_kind;
_Static_assert((int)ACT_RELU == (int)SB_MLP_CUDA_RELU && (int)ACT_GELU == (int)SB_MLP_CUDA_GELU &&
                   (int)ACT_NONE == (int)SB_MLP_CUDA_NONE,
               "mlp_cuda.h numbers the activations as mlp.c does");

typedef struct mlp_model {
    char *uri;
    size_t nl;
    size_t din[MAX_LAYERS], dout[MAX_LAYERS];
    float *w[MAX_LAYERS]; /* dout x din, row-major */
    float *b[MAX_LAYERS]; /* dout, or NULL */
    size_t widest;
    sb_mlp_cuda_model *dev; /* the weights on the device (CUDA build), made on first use */
    struct mlp_model *next;
} mlp_model;

typedef enum { DEV_AUTO, DEV_CPU, DEV_CUDA } dev_kind;

typedef enum { PREC_FP32, PREC_TF32, PREC_BF16 } prec_kind;
_Static_assert((int)PREC_FP32 == (int)SB_MLP_CUDA_FP32 && (int)PREC_TF32 == (int)SB_MLP_CUDA_TF32 &&
                   (int)PREC_BF16 == (int)SB_MLP_CUDA_BF16,
               "mlp_cuda.h numbers the precisions as mlp.c does");
static const char *const prec_names[] = {"fp32", "tf32", "bf16"};

/* A batch queued on the device whose output is not appended yet (its input's rows). */
typedef struct {
    bool active, json;
    int slot;
    size_t ci, first, n;
} mlp_pending;

typedef struct {
    const mlp_model *m;
    act_kind act;
    prec_kind prec;       /* on CUDA; the CPU computes in fp32 */
    sb_mlp_cuda_run *run; /* NULL: the CPU implementation */
    int next_slot;
    mlp_pending pending;
    char *field, *out_field, *topk_field;
    size_t topk;
    float *x, *y, *t; /* scratch: input, output, the layer between */
    size_t cap_rows;
    char *out_key, *topk_key; /* jsonl: "<outputField>":[ and ,"<topk field>":[ as JSON text */
    char *rec;                /* jsonl: the output record being built */
    size_t rec_cap;
    void *proj; /* the project after this op in the task, borrowed (absorb_next), or NULL */
} mlp_state;

/* ---- the model cache ---------------------------------------------------------------------- */

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static mlp_model *cache;

static void model_free(mlp_model *m)
{
    if (m->dev != NULL)
        sb_mlp_cuda_model_free(m->dev);
    for (size_t l = 0; l < m->nl; l++) {
        free(m->w[l]);
        free(m->b[l]);
    }
    free(m->uri);
    free(m);
}

static void mlp_shutdown(void)
{
    pthread_mutex_lock(&cache_mu);
    while (cache != NULL) {
        mlp_model *m = cache;
        cache = m->next;
        model_free(m);
    }
    pthread_mutex_unlock(&cache_mu);
}

/* "<index>.weight" / "<index>.bias": the index and the kind (0 weight, 1 bias); -1 otherwise. */
static long layer_index(const char *name, int *kind)
{
    char *end;
    long i = strtol(name, &end, 10);
    if (end == name || name[0] < '0' || name[0] > '9' || i < 0 || i > 1000000)
        return -1;
    if (strcmp(end, ".weight") == 0)
        *kind = 0;
    else if (strcmp(end, ".bias") == 0)
        *kind = 1;
    else
        return -1;
    return i;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

static int build_model(const sb_safetensors *st, mlp_model *m, sb_err *err)
{
    long idx[MAX_LAYERS];
    size_t ni = 0;
    for (size_t i = 0; i < st->n; i++) {
        int kind;
        long k = layer_index(st->t[i].name, &kind);
        if (k < 0)
            return sb_err_set(err,
                              "tensor \"%.100s\" is not <index>.weight or <index>.bias (weights "
                              "of an nn.Sequential of Linear layers are expected)",
                              st->t[i].name);
        if (kind != 0)
            continue;
        if (ni == MAX_LAYERS)
            return sb_err_set(err, "more than %d layers", MAX_LAYERS);
        idx[ni++] = k;
    }
    if (ni == 0)
        return sb_err_set(err, "no <index>.weight tensor: no layers");
    qsort(idx, ni, sizeof *idx, cmp_long);
    for (size_t l = 0; l < ni; l++) {
        char wn[48], bn[48];
        snprintf(wn, sizeof wn, "%ld.weight", idx[l]);
        snprintf(bn, sizeof bn, "%ld.bias", idx[l]);
        const sb_st_tensor *w = sb_st_find(st, wn), *b = sb_st_find(st, bn);
        if (w->ndim != 2 || w->shape[0] == 0 || w->shape[1] == 0 || w->shape[0] > (1u << 20) ||
            w->shape[1] > (1u << 20))
            return sb_err_set(err, "tensor %s must have shape [out, in] (sizes 1 to 2^20)", wn);
        m->dout[l] = (size_t)w->shape[0];
        m->din[l] = (size_t)w->shape[1];
        if (l > 0 && m->din[l] != m->dout[l - 1])
            return sb_err_set(err,
                              "layers do not chain: %s takes %zu inputs, the layer before "
                              "gives %zu",
                              wn, m->din[l], m->dout[l - 1]);
        if (b != NULL && (b->ndim != 1 || b->shape[0] != w->shape[0]))
            return sb_err_set(err, "tensor %s must have shape [%zu]", bn, m->dout[l]);
        m->w[l] = malloc(m->din[l] * m->dout[l] * sizeof(float));
        m->b[l] = b != NULL ? malloc(m->dout[l] * sizeof(float)) : NULL;
        m->nl = l + 1;
        if (m->w[l] == NULL || (b != NULL && m->b[l] == NULL))
            return sb_err_set(err, "out of memory for the weights");
        for (uint64_t i = 0; i < w->count; i++)
            m->w[l][i] = sb_st_get(w, i);
        for (size_t i = 0; b != NULL && i < m->dout[l]; i++)
            m->b[l][i] = sb_st_get(b, i);
        if (m->din[l] > m->widest)
            m->widest = m->din[l];
        if (m->dout[l] > m->widest)
            m->widest = m->dout[l];
    }
    for (size_t i = 0; i < st->n; i++) { /* a bias without its weight */
        int kind;
        long k = layer_index(st->t[i].name, &kind);
        bool found = false;
        for (size_t l = 0; l < ni; l++)
            found |= idx[l] == k;
        if (!found)
            return sb_err_set(err, "tensor \"%.100s\" has no matching weight", st->t[i].name);
    }
    return 0;
}

static int load_model(const char *uri, mlp_model **out, sb_err *err)
{
    uint64_t size = 0;
    int exists = 0;
    if (sb_io_stat(uri, &size, &exists, err) != 0)
        return -1;
    if (!exists)
        return sb_err_set(err, "not found");
    if (size > MAX_WEIGHTS)
        return sb_err_set(err, "%llu bytes (the limit is 2 GiB)", (unsigned long long)size);
    uint8_t *buf = malloc(size ? (size_t)size : 1);
    if (buf == NULL)
        return sb_err_set(err, "out of memory for %llu bytes", (unsigned long long)size);
    sb_io_rd *r = NULL;
    ssize_t got = -1;
    if (sb_io_read_open(uri, 0, size, &r, err) == 0) {
        got = sb_io_read_full(r, buf, (size_t)size, err);
        sb_io_read_close(r);
    }
    if (got < 0 || (uint64_t)got != size) {
        free(buf);
        return got < 0 ? -1 : sb_err_set(err, "the file changed while it was read");
    }
    sb_safetensors st;
    if (sb_st_parse(buf, (size_t)size, &st, err) != 0)
        return -1;
    mlp_model *m = calloc(1, sizeof *m);
    int rc = m == NULL ? sb_err_set(err, "out of memory") : build_model(&st, m, err);
    sb_st_free(&st);
    if (rc == 0 && (m->uri = strdup(uri)) == NULL)
        rc = sb_err_set(err, "out of memory");
    if (rc != 0) {
        if (m != NULL)
            model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* The cached model of uri, loaded on first use (under the lock: one load per worker). */
static const mlp_model *model_get(const char *uri, sb_err *err)
{
    pthread_mutex_lock(&cache_mu);
    mlp_model *m = cache;
    while (m != NULL && strcmp(m->uri, uri) != 0)
        m = m->next;
    if (m == NULL) {
        if (load_model(uri, &m, err) != 0) {
            sb_err_wrap(err, "tensor.mlp: weights %.300s", uri);
            m = NULL;
        } else {
            m->next = cache;
            cache = m;
        }
    }
    pthread_mutex_unlock(&cache_mu);
    return m;
}

/* ---- CUDA: the probe and the weights on the device ------------------------------------------ */

static pthread_mutex_t cuda_mu = PTHREAD_MUTEX_INITIALIZER;
static int cuda_devices = -1;     /* -1: not asked yet */
static char cuda_why[SB_ERR_MAX]; /* why there is none, when cuda_devices is 0 */

int sb_op_mlp_cuda_devices(void)
{
    pthread_mutex_lock(&cuda_mu);
    int n = cuda_devices;
    pthread_mutex_unlock(&cuda_mu);
    return n;
}

/* The usable CUDA devices (asked once per worker, logged once); 0 with why[] set when none. */
static int cuda_usable(char *why, size_t cap)
{
    pthread_mutex_lock(&cuda_mu);
    if (cuda_devices < 0) {
        sb_err e = {0};
        int n = 0;
        if (sb_mlp_cuda_probe == NULL) {
            snprintf(cuda_why, sizeof cuda_why,
                     "this worker was built without CUDA (the CUDA build is "
                     "streambatch-worker-gpu, in the worker-gpu image)");
        } else if ((n = sb_mlp_cuda_probe(&e)) < 0) {
            n = 0;
            snprintf(cuda_why, sizeof cuda_why, "no usable CUDA device: %s", e.msg);
        } else if (n == 0) {
            snprintf(cuda_why, sizeof cuda_why,
                     "no usable CUDA device: cudaGetDeviceCount found none");
        }
        cuda_devices = n;
        if (n > 0) {
            char num[16];
            snprintf(num, sizeof num, "%d", n);
            sb_log(SB_LOG_INFO, "tensor.mlp runs on CUDA", "devices", num, NULL);
        } else {
            sb_log(SB_LOG_INFO, "tensor.mlp runs on the CPU", "reason", cuda_why, NULL);
        }
    }
    int n = cuda_devices;
    snprintf(why, cap, "%s", cuda_why);
    pthread_mutex_unlock(&cuda_mu);
    return n;
}

/* The model's weights on the device, uploaded by the first state that needs them (and their
 * bf16 copy by the first that runs at bf16). */
static int model_to_device(const mlp_model *cm, prec_kind prec, sb_err *err)
{
    pthread_mutex_lock(&cache_mu);
    mlp_model *m = (mlp_model *)cm; /* the cache's own model: dev is set under the lock */
    int rc = 0;
    if (m->dev == NULL) {
        const float *w[MAX_LAYERS], *b[MAX_LAYERS];
        for (size_t l = 0; l < m->nl; l++) {
            w[l] = m->w[l];
            b[l] = m->b[l];
        }
        m->dev = sb_mlp_cuda_model_new(m->nl, m->din, m->dout, w, b, err);
        rc = m->dev == NULL ? -1 : 0;
    }
    if (rc == 0)
        rc = sb_mlp_cuda_model_prepare(m->dev, (int)prec, err);
    pthread_mutex_unlock(&cache_mu);
    return rc;
}

/* ---- the forward pass --------------------------------------------------------------------- */

/* OpenBLAS runs one thread per call here: the worker runs one op per slot and `--cpus` counts
 * slots, so a GEMM that spread over every core would take other slots' CPU. Debian's serial
 * variant (libopenblas0-serial, what `make deps` and the images install) has no threads; the
 * pthread variant, when the machine's alternatives pick it, is set to one thread here (a
 * process-wide setting, and calls from several threads then run each in its caller); the OpenMP
 * variant takes its count from each calling thread's OpenMP settings, which we cannot set for it,
 * so it is named in the log. */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* OpenBLAS builds with DYNAMIC_ARCH (Debian's) pick their kernels when the library loads, from
 * the CPU's model number. Bookworm's 0.3.21 does not know CPUs newer than it (Emerald Rapids,
 * model 207, among them) and falls back to its Prescott kernels (SSE3): 3x slower than AVX-512
 * ones. Its documented remedy is OPENBLAS_CORETYPE in the environment, which it reads only when
 * it loads, before our code runs; these two entry points (exported by every DYNAMIC_ARCH build,
 * weak here: a build without them leaves the choice alone) redo the choice with it set. */
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

/* The OpenBLAS core for what this CPU can do, when the library took it for an older one; NULL
 * when its own choice stands (it knows the CPU, or the user set OPENBLAS_CORETYPE). */
static const char *blas_better_core(const char *loaded)
{
#if defined(__x86_64__)
    static const char *const generic[] = {"Prescott",   "Core2",     "Penryn",
                                          "Dunnington", "Nehalem",   "Katmai",
                                          "Coppermine", "Northwood", "Banias"};
    bool old = false;
    for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
        old = old || strcasecmp(loaded, generic[i]) == 0;
    if (!old || getenv("OPENBLAS_CORETYPE") != NULL)
        return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    if (__builtin_cpu_supports("avx"))
        return "SandyBridge";
#else
    (void)loaded;
#endif
    return NULL;
}

static void blas_setup(void)
{
    char loaded[32];
    snprintf(loaded, sizeof loaded, "%s", openblas_get_corename());
    const char *core = blas_better_core(loaded);
    if (core != NULL && gotoblas_dynamic_init != NULL && gotoblas_dynamic_quit != NULL) {
        /* the worker's only setenv of a new name after its start (the first one copies the
         * environment to a new array and leaves the old one, which a concurrent getenv may be
         * reading, in place) */
        setenv("OPENBLAS_CORETYPE", core, 0);
        gotoblas_dynamic_quit();
        gotoblas_dynamic_init();
        sb_log(SB_LOG_INFO,
               "tensor.mlp: OpenBLAS took this CPU for an older one; using its "
               "newer kernels (set OPENBLAS_CORETYPE to choose)",
               "loaded", loaded, "now", openblas_get_corename(), NULL);
    }
    openblas_set_num_threads(1);
    if (openblas_get_parallel() == 2)
        sb_log(SB_LOG_WARN,
               "tensor.mlp: the OpenMP build of OpenBLAS is loaded; its GEMMs may use more than "
               "one core per slot (install libopenblas0-serial, or set OMP_NUM_THREADS=1)",
               "config", openblas_get_config(), NULL);
}

/* y[n x dout] = x[n x din] . w^T + b: the bias is copied into every row of y first and the GEMM
 * adds to it (beta 1), so no second pass over y. n is cut to what a blasint holds. */
static void linear(const float *x, size_t n, size_t din, const float *w, const float *b,
                   size_t dout, float *y)
{
    const size_t most = (size_t)INT_MAX / (din > dout ? din : dout);
    for (size_t r0 = 0; r0 < n; r0 += most) {
        size_t nr = n - r0 < most ? n - r0 : most;
        float *yr = y + r0 * dout;
        if (b != NULL)
            for (size_t r = 0; r < nr; r++)
                memcpy(yr + r * dout, b, dout * sizeof(float));
        float beta = b != NULL ? 1.0f : 0.0f;
        /* one row: GEMV (w read once, row by row). OpenBLAS 0.3.21's GEMM would first pack all
         * of w into its own layout, for one row 2.5x the GEMV's time */
        if (nr == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)dout, (blasint)din, 1.0f, w,
                        (blasint)din, x + r0 * din, 1, beta, yr, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nr, (blasint)dout,
                        (blasint)din, 1.0f, x + r0 * din, (blasint)din, w, (blasint)din, beta, yr,
                        (blasint)dout);
    }
}

static void activate(float *v, size_t n, act_kind a)
{
    if (a == ACT_RELU) {
        for (size_t i = 0; i < n; i++)
            v[i] = v[i] > 0 ? v[i] : 0;
    } else if (a == ACT_GELU) {
        for (size_t i = 0; i < n; i++)
            v[i] = 0.5f * v[i] * (1.0f + erff(v[i] * 0.70710678118654752f));
    }
}

/* s->y[0..n*out) = the model applied to s->x[0..n*in). The last layer writes y; the ones before
 * alternate between t and y so that no layer writes its own input. */
static void forward(mlp_state *s, size_t n)
{
    const mlp_model *m = s->m;
    const float *in = s->x;
    for (size_t l = 0; l < m->nl; l++) {
        float *dst = (m->nl - 1 - l) % 2 == 0 ? s->y : s->t;
        linear(in, n, m->din[l], m->w[l], m->b[l], m->dout[l], dst);
        if (l + 1 < m->nl)
            activate(dst, n * m->dout[l], s->act);
        in = dst;
    }
}

/* The indices of the k largest of v[0..n), largest first (ties: lower index first). */
static void top_k(const float *v, size_t n, size_t k, int32_t *out)
{
    for (size_t j = 0; j < k; j++)
        out[j] = -1;
    for (size_t i = 0; i < n; i++) {
        size_t j = k;
        while (j > 0 && (out[j - 1] < 0 || v[i] > v[out[j - 1]]))
            j--;
        if (j == k)
            continue;
        memmove(out + j + 1, out + j, (k - j - 1) * sizeof *out);
        out[j] = (int32_t)i;
    }
}

static int reserve_rows(mlp_state *s, size_t n, sb_err *err)
{
    if (n <= s->cap_rows)
        return 0;
    size_t w = s->m->widest;
    float *x = realloc(s->x, n * w * sizeof(float));
    if (x != NULL)
        s->x = x;
    float *y = realloc(s->y, n * w * sizeof(float));
    if (y != NULL)
        s->y = y;
    float *t = realloc(s->t, n * w * sizeof(float));
    if (t != NULL)
        s->t = t;
    if (x == NULL || y == NULL || t == NULL)
        return sb_err_set(err, "tensor.mlp: out of memory for %zu rows", n);
    s->cap_rows = n;
    return 0;
}

/* ---- the op ------------------------------------------------------------------------------- */

static void mlp_free(void *state)
{
    mlp_state *s = state;
    if (s == NULL)
        return;
    if (s->run != NULL)
        sb_mlp_cuda_run_free(s->run); /* waits for what is in flight */
    free(s->field);
    free(s->out_field);
    free(s->topk_field);
    free(s->out_key);
    free(s->topk_key);
    free(s->x);
    free(s->y);
    free(s->t);
    free(s->rec);
    free(s);
}

/* lead + the JSON string of name + ":[" (malloc'd), the text before an output member's values. */
static char *json_key(const char *name, const char *lead)
{
    size_t q = sb_json_quote(name, strlen(name), NULL, 0), l = strlen(lead);
    char *k = malloc(l + q + 3);
    if (k == NULL)
        return NULL;
    memcpy(k, lead, l);
    sb_json_quote(name, strlen(name), k + l, q);
    memcpy(k + l + q, ":[", 3);
    return k;
}

/* args.precision (absent: fp32) into *out; a value that is none of the three, or tf32/bf16 with
 * device cpu (the CPU computes in fp32 only), is an error naming the field. */
static int parse_precision(const cJSON *p, dev_kind device, prec_kind *out, sb_err *err)
{
    *out = PREC_FP32;
    if (p == NULL)
        return 0;
    for (int i = PREC_FP32; i <= PREC_BF16 && cJSON_IsString(p); i++)
        if (strcmp(p->valuestring, prec_names[i]) == 0)
            *out = (prec_kind)i;
    if (!cJSON_IsString(p) || strcmp(p->valuestring, prec_names[*out]) != 0)
        return sb_err_set(err, "tensor.mlp: args.precision must be fp32, tf32 or bf16");
    if (*out != PREC_FP32 && device == DEV_CPU)
        return sb_err_set(err,
                          "tensor.mlp: args.precision is %s, but args.device is cpu: the CPU "
                          "computes in fp32 only (drop precision, or use device auto or cuda)",
                          prec_names[*out]);
    return 0;
}

/* args.activation (relu, gelu or none; relu when absent) and args.device (auto, cpu or cuda;
 * auto when absent). 0, or -1 naming the argument. */
static int parse_act_device(const cJSON *act, const cJSON *dev, act_kind *out_act,
                            dev_kind *out_dev, sb_err *err)
{
    static const char *const acts[] = {"relu", "gelu", "none"};
    static const act_kind act_vals[] = {ACT_RELU, ACT_GELU, ACT_NONE};
    static const char *const devs[] = {"auto", "cpu", "cuda"};
    static const dev_kind dev_vals[] = {DEV_AUTO, DEV_CPU, DEV_CUDA};
    *out_act = ACT_RELU;
    *out_dev = DEV_AUTO;
    if (act != NULL) {
        size_t i = 0;
        while (i < 3 && !(cJSON_IsString(act) && strcmp(act->valuestring, acts[i]) == 0))
            i++;
        if (i == 3)
            return sb_err_set(err, "tensor.mlp: args.activation must be relu, gelu or none");
        *out_act = act_vals[i];
    }
    if (dev != NULL) {
        size_t i = 0;
        while (i < 3 && !(cJSON_IsString(dev) && strcmp(dev->valuestring, devs[i]) == 0))
            i++;
        if (i == 3)
            return sb_err_set(err, "tensor.mlp: args.device must be auto, cpu or cuda");
        *out_dev = dev_vals[i];
    }
    return 0;
}

static int mlp_init(const char *args_json, void **state, sb_err *err)
{
    *state = NULL;
    cJSON *a = args_json ? cJSON_Parse(args_json) : NULL;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(a, "weights");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(a, "field");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(a, "activation");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(a, "outputField");
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(a, "topK");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(a, "device");
    const cJSON *prec = cJSON_GetObjectItemCaseSensitive(a, "precision");
    mlp_state *s = calloc(1, sizeof *s);
    int rc = -1;
    if (s == NULL) {
        sb_err_set(err, "out of memory");
        goto out;
    }
    if (!cJSON_IsString(w) || w->valuestring[0] == '\0') {
        sb_err_set(err, "tensor.mlp: args.weights must be the URI of a safetensors file");
        goto out;
    }
    if (!cJSON_IsString(f) || f->valuestring[0] == '\0') {
        sb_err_set(err, "tensor.mlp: args.field must name the input (a tensor column or a jsonl "
                        "field)");
        goto out;
    }
    if (of != NULL && (!cJSON_IsString(of) || of->valuestring[0] == '\0')) {
        sb_err_set(err, "tensor.mlp: args.outputField must be a non-empty string");
        goto out;
    }
    dev_kind device = DEV_AUTO;
    if (parse_act_device(act, dev, &s->act, &device, err) != 0)
        goto out;
    if (tk != NULL && (!cJSON_IsNumber(tk) || tk->valuedouble < 1 || tk->valuedouble > 1e6 ||
                       tk->valuedouble != (double)(size_t)tk->valuedouble)) {
        sb_err_set(err, "tensor.mlp: args.topK must be an integer >= 1");
        goto out;
    }
    if (parse_precision(prec, device, &s->prec, err) != 0)
        goto out;
    s->field = strdup(f->valuestring);
    s->out_field = strdup(of ? of->valuestring : "y");
    if (s->field == NULL || s->out_field == NULL ||
        asprintf(&s->topk_field, "%sTopK", s->out_field) < 0) {
        s->topk_field = NULL;
        sb_err_set(err, "out of memory");
        goto out;
    }
    if ((s->out_key = json_key(s->out_field, "")) == NULL ||
        (s->topk_key = json_key(s->topk_field, ",")) == NULL) {
        sb_err_set(err, "out of memory");
        goto out;
    }
    if ((s->m = model_get(w->valuestring, err)) == NULL)
        goto out;
    if (tk != NULL) {
        s->topk = (size_t)tk->valuedouble;
        size_t outw = s->m->dout[s->m->nl - 1];
        if (s->topk > outw) {
            sb_err_set(err, "tensor.mlp: args.topK is %zu, the model has %zu outputs", s->topk,
                       outw);
            goto out;
        }
    }
    if (device != DEV_CPU) {
        char why[SB_ERR_MAX];
        if (cuda_usable(why, sizeof why) > 0) {
            if (model_to_device(s->m, s->prec, err) != 0 ||
                (s->run = sb_mlp_cuda_run_new(s->m->dev, (int)s->act, (int)s->prec, err)) == NULL) {
                sb_err_wrap(err, "tensor.mlp: weights %.200s on the GPU", w->valuestring);
                goto out;
            }
        } else if (device == DEV_CUDA) {
            sb_err_set(err, "tensor.mlp: args.device is cuda, but %s", why);
            goto out;
        }
    }
    if (s->run == NULL)
        pthread_once(&blas_once, blas_setup);
    if (s->run == NULL && s->prec != PREC_FP32)
        sb_log(SB_LOG_INFO, "tensor.mlp: args.precision applies on CUDA; the CPU computes in fp32",
               "precision", prec_names[s->prec], NULL);
    *state = s;
    s = NULL;
    rc = 0;
out:
    mlp_free(s);
    cJSON_Delete(a);
    return rc;
}

/* Values [0, count) of a column of numbers of type t as float32, into x. One loop per type: a
 * float32 column (the usual input) is one copy. */
static void load_nums(sb_type t, const void *base, size_t count, float *x)
{
#define SB_MLP_LOAD(T)                                                                             \
    do {                                                                                           \
        const T *v_ = base;                                                                        \
        for (size_t i_ = 0; i_ < count; i_++)                                                      \
            x[i_] = (float)v_[i_];                                                                 \
    } while (0)
    switch (t) {
    case SB_TYPE_FLOAT32:
        memcpy(x, base, count * sizeof(float));
        break;
    case SB_TYPE_INT8:
        SB_MLP_LOAD(int8_t);
        break;
    case SB_TYPE_INT16:
        SB_MLP_LOAD(int16_t);
        break;
    case SB_TYPE_INT32:
        SB_MLP_LOAD(int32_t);
        break;
    case SB_TYPE_INT64:
        SB_MLP_LOAD(int64_t);
        break;
    case SB_TYPE_UINT8:
        SB_MLP_LOAD(uint8_t);
        break;
    case SB_TYPE_UINT16:
        SB_MLP_LOAD(uint16_t);
        break;
    case SB_TYPE_UINT32:
        SB_MLP_LOAD(uint32_t);
        break;
    case SB_TYPE_UINT64:
        SB_MLP_LOAD(uint64_t);
        break;
    default:
        SB_MLP_LOAD(double);
        break;
    }
#undef SB_MLP_LOAD
}

/* The copy of a batch into its pinned buffer (CUDA path) on a few threads. One core copies
 * 5-10 GB/s, so at batch 1024 of 12288 floats (48 MiB) the copy alone took longer than the GPU's
 * transfer and GEMMs together, and the op trailed PyTorch, whose loader hands it pinned batches.
 * A gpu worker's slots share one device and do little else on the CPU, so the copy may take a
 * few cores for the moment it lasts; below LOAD_PAR_MIN bytes one thread does it (a thread's
 * start costs ~20 us). */
#define LOAD_PAR_THREADS 4
#define LOAD_PAR_MIN (4u << 20)

typedef struct {
    sb_type t;
    const uint8_t *base;
    size_t count;
    float *x;
} load_part;

static void *load_part_run(void *arg)
{
    const load_part *p = arg;
    load_nums(p->t, p->base, p->count, p->x);
    return NULL;
}

/* load_nums over LOAD_PAR_THREADS slices, this thread taking the last; one thread when the copy
 * is small or a thread cannot be started (the slices it could not hand off it does itself). */
static void load_nums_par(sb_type t, const void *base, size_t count, float *x)
{
    size_t w = sb_type_width(t);
    if (count * sizeof(float) < LOAD_PAR_MIN) {
        load_nums(t, base, count, x);
        return;
    }
    pthread_t th[LOAD_PAR_THREADS];
    load_part parts[LOAD_PAR_THREADS];
    bool started[LOAD_PAR_THREADS] = {false};
    size_t per = (count + LOAD_PAR_THREADS - 1) / LOAD_PAR_THREADS;
    for (size_t i = 0; i < LOAD_PAR_THREADS; i++) {
        size_t from = i * per < count ? i * per : count;
        size_t to = from + per < count ? from + per : count;
        parts[i] = (load_part){t, (const uint8_t *)base + from * w, to - from, x + from};
        if (i + 1 < LOAD_PAR_THREADS && parts[i].count > 0)
            started[i] = pthread_create(&th[i], NULL, load_part_run, &parts[i]) == 0;
    }
    for (size_t i = 0; i < LOAD_PAR_THREADS; i++)
        if (!started[i])
            load_part_run(&parts[i]);
    for (size_t i = 0; i < LOAD_PAR_THREADS; i++)
        if (started[i])
            pthread_join(th[i], NULL);
}

/* Whether the output replaces the input column (outputField = field) instead of adding one. */
static bool replaces_input(const mlp_state *s)
{
    return strcmp(s->out_field, s->field) == 0;
}

/* Typed input: the tensor column `ci`, rows [first, first+n) into x (n x din). */
static int tensor_input(const mlp_state *s, const sb_batch *in, size_t ci, size_t first, size_t n,
                        float *x, sb_err *err)
{
    const sb_column *c = sb_batch_column(in, ci);
    const mlp_model *m = s->m;
    size_t din = m->din[0];
    if (c->list_size != din)
        return sb_err_data(err,
                           "tensor.mlp: column \"%.100s\" holds %u values per row, the "
                           "model's first layer takes %zu",
                           s->field, (unsigned)c->list_size, din);
    bool out_taken = !replaces_input(s) && sb_batch_find(in, s->out_field) >= 0;
    if (out_taken || (s->topk && sb_batch_find(in, s->topk_field) >= 0))
        return sb_err_data(err, "tensor.mlp: the input already has a column \"%.100s\"",
                           out_taken ? s->out_field : s->topk_field);
    const uint8_t *v = (const uint8_t *)c->values + first * din * sb_type_width(c->child_type);
    if (s->run != NULL) /* x is the slot's pinned buffer: see load_nums_par */
        load_nums_par(c->child_type, v, n * din, x);
    else
        load_nums(c->child_type, v, n * din, x);
    return 0;
}

/* Validity bits [first, first+n) of c from bit 0 (malloc'd into *out; NULL when c has none). */
static int validity_slice(const sb_column *c, size_t first, size_t n, uint8_t **out)
{
    *out = NULL;
    if (c->validity == NULL || c->null_count == 0)
        return 0;
    if ((*out = calloc(1, (n + 7) / 8)) == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (sb_column_valid(c, first + i))
            (*out)[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

/* Typed output for rows [first, first+n) of `in`, their model outputs y (n x dout): every input
 * column + the outputs, or with the input column replaced by the outputs (outputField = field).
 * The new columns hold n rows from 0, the input's rows [first, first+n). */
static int tensor_output(const mlp_state *s, const sb_batch *in, size_t ci, size_t first, size_t n,
                         const float *y, sb_op_out *out, sb_err *err)
{
    const sb_column *c = sb_batch_column(in, ci);
    const mlp_model *m = s->m;
    size_t dout = m->dout[m->nl - 1];
    bool replace = replaces_input(s);
    size_t ncols = sb_batch_ncols(in), extra = (replace ? 0 : 1) + (s->topk ? 1 : 0);
    size_t total = ncols + extra, yi = replace ? ci : ncols;
    sb_field *f = calloc(total, sizeof *f);
    sb_column *cols = calloc(total, sizeof *cols);
    size_t *firsts = calloc(total, sizeof *firsts);
    int32_t *kv = s->topk ? malloc(n * s->topk * sizeof(int32_t)) : NULL;
    uint8_t *valid = NULL;
    int rc = -1;
    if (f == NULL || cols == NULL || firsts == NULL || (s->topk && kv == NULL) ||
        validity_slice(c, first, n, &valid) != 0) {
        sb_err_set(err, "tensor.mlp: out of memory");
        goto done;
    }
    for (size_t r = 0; kv != NULL && r < n; r++)
        top_k(y + r * dout, dout, s->topk, kv + r * s->topk);
    for (size_t i = 0; i < ncols; i++) {
        cols[i] = *sb_batch_column(in, i);
        firsts[i] = first;
    }
    cols[yi] = (sb_column){.name = s->out_field,
                           .name_len = strlen(s->out_field),
                           .type = SB_TYPE_FIXED_LIST,
                           .child_type = SB_TYPE_FLOAT32,
                           .list_size = (uint32_t)dout,
                           .nullable = c->nullable,
                           .length = n,
                           .null_count = valid ? c->null_count : 0,
                           .validity = valid,
                           .values = y,
                           .values_len = n * dout * sizeof(float)};
    firsts[yi] = 0;
    if (kv != NULL) {
        cols[total - 1] = cols[yi];
        cols[total - 1].name = s->topk_field;
        cols[total - 1].name_len = strlen(s->topk_field);
        cols[total - 1].child_type = SB_TYPE_INT32;
        cols[total - 1].list_size = (uint32_t)s->topk;
        cols[total - 1].values = kv;
        cols[total - 1].values_len = n * s->topk * sizeof(int32_t);
        firsts[total - 1] = 0;
    }
    if (s->proj != NULL) { /* only the columns the project keeps are copied */
        rc = sb_op_project_columns_at(s->proj, cols, firsts, total, n, out, err);
        goto done;
    }
    for (size_t i = 0; i < total; i++)
        f[i] = sb_field_of(&cols[i]);
    rc = sb_op_out_append_columns_at(out, f, cols, firsts, total, n, 0, err);
done:
    free(f);
    free(cols);
    free(firsts);
    free(kv);
    free(valid);
    return rc;
}

/* Parses a JSON array of numbers (a validated span) into x[0..want); -1 + why otherwise. */
static int parse_vector(const char *p, size_t n, float *x, size_t want, const char **why,
                        size_t *got)
{
    size_t i = 1, k = 0; /* after '[' */
    *got = 0;
    for (;;) {
        while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
            i++;
        if (i >= n || p[i] == ']')
            break;
        if (p[i] == ',') {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && strchr("+-0123456789.eE", p[j]) != NULL)
            j++;
        if (j == i) {
            *why = "an element that is not a number";
            return -1;
        }
        if (k < want) {
            double d;
            int64_t iv;
            bool is_int;
            sb_op_json_number(p + i, j - i, &d, &iv, &is_int);
            if (!isfinite((float)d)) {
                *why = "a number outside float32's range";
                return -1;
            }
            x[k] = (float)d;
        }
        k++;
        i = j;
    }
    *got = k;
    if (k != want) {
        *why = "the wrong number of elements";
        return -1;
    }
    return 0;
}

static int add_text(mlp_state *s, size_t *len, const char *p, size_t n)
{
    if (s->rec_cap - *len < n) {
        size_t cap = s->rec_cap ? s->rec_cap : 1024;
        while (cap - *len < n)
            cap *= 2;
        char *r = realloc(s->rec, cap);
        if (r == NULL)
            return -1;
        s->rec = r;
        s->rec_cap = cap;
    }
    memcpy(s->rec + *len, p, n);
    *len += n;
    return 0;
}

/* jsonl input: `field` is an array member of each record (of the records column ci); rows
 * [first, first+n) into x (n x din). */
static int json_input(const mlp_state *s, const sb_batch *in, size_t ci, size_t first, size_t n,
                      float *x, sb_err *err)
{
    const sb_column *c = sb_batch_column(in, ci);
    size_t din = s->m->din[0];
    sb_op_json_key keys[3] = {{s->field, strlen(s->field)},
                              {s->out_field, strlen(s->out_field)},
                              {s->topk_field, strlen(s->topk_field)}};
    for (size_t r = 0; r < n; r++) {
        size_t len;
        const char *p = sb_column_binary(c, first + r, &len);
        sb_op_json_span found[3];
        sb_op_json_type top;
        char msg[160];
        if (sb_op_json_scan(p, len, keys, s->topk ? 3 : 2, found, &top, msg, sizeof msg) != 0)
            return sb_err_data(err, "tensor.mlp: record %zu is not valid JSON (%s)", first + r,
                               msg);
        if (top != SB_OP_JSON_OBJECT)
            return sb_err_data(err, "tensor.mlp: record %zu is a JSON %s, not an object", first + r,
                               sb_op_json_type_name(top));
        if (found[0].type != SB_OP_JSON_ARRAY)
            return sb_err_data(err,
                               "tensor.mlp: record %zu: field \"%.100s\" is %s, not an array "
                               "of %zu numbers",
                               first + r, s->field, sb_op_json_type_name(found[0].type), din);
        if (replaces_input(s))
            return sb_err_data(err,
                               "tensor.mlp: args.outputField \"%.100s\" equals args.field: "
                               "the output replaces a tensor column, not a member of jsonl "
                               "records (record %zu); choose another outputField",
                               s->out_field, first + r);
        if (found[1].type != SB_OP_JSON_NONE || (s->topk && found[2].type != SB_OP_JSON_NONE))
            return sb_err_data(err, "tensor.mlp: record %zu already has a field \"%.100s\"",
                               first + r,
                               found[1].type != SB_OP_JSON_NONE ? s->out_field : s->topk_field);
        const char *why;
        size_t got;
        if (parse_vector(found[0].p, found[0].n, x + r * din, din, &why, &got) != 0)
            return sb_err_data(err,
                               "tensor.mlp: record %zu: field \"%.100s\" has %s (%zu elements; "
                               "the model's first layer takes %zu numbers)",
                               first + r, s->field, why, got, din);
    }
    return 0;
}

/* jsonl output: each record of rows [first, first+n) with the output members of y (n x dout)
 * added. */
static int json_output(mlp_state *s, const sb_batch *in, size_t ci, size_t first, size_t n,
                       const float *y, sb_op_out *out, sb_err *err)
{
    const sb_column *c = sb_batch_column(in, ci);
    size_t dout = s->m->dout[s->m->nl - 1];
    int32_t *idx = s->topk ? malloc(s->topk * sizeof *idx) : NULL;
    if (s->topk && idx == NULL)
        return sb_err_set(err, "tensor.mlp: out of memory");
    int rc = 0;
    for (size_t r = 0; r < n && rc == 0; r++) {
        size_t len, at = 0;
        const char *p = sb_column_binary(c, first + r, &len);
        while (len > 0 && p[len - 1] != '}')
            len--; /* trailing whitespace */
        size_t body = len - 1;
        bool empty = true;
        for (size_t i = 1; i < body && empty; i++)
            empty = p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n' || p[i] == '{';
        char num[40];
        rc |= add_text(s, &at, p, body);
        rc |= add_text(s, &at, empty ? "" : ",", empty ? 0 : 1);
        rc |= add_text(s, &at, s->out_key, strlen(s->out_key));
        for (size_t k = 0; k < dout && rc == 0; k++) {
            if (k)
                rc |= add_text(s, &at, ",", 1);
            rc |= add_text(s, &at, num, sb_json_float(num, y[r * dout + k], true));
        }
        rc |= add_text(s, &at, "]", 1);
        if (rc == 0 && s->topk) {
            top_k(y + r * dout, dout, s->topk, idx);
            rc |= add_text(s, &at, s->topk_key, strlen(s->topk_key));
            for (size_t k = 0; k < s->topk && rc == 0; k++) {
                int w = snprintf(num, sizeof num, "%s%d", k ? "," : "", (int)idx[k]);
                rc |= add_text(s, &at, num, (size_t)w);
            }
            rc |= add_text(s, &at, "]", 1);
        }
        rc |= add_text(s, &at, "}", 1);
        if (rc != 0) {
            rc = sb_err_set(err, "tensor.mlp: out of memory");
            break;
        }
        rc = s->proj != NULL ? sb_op_project_record(s->proj, first + r, s->rec, at, out, err)
                             : sb_op_out_append_binary(out, s->rec, at, err);
    }
    free(idx);
    return rc;
}

static int batch_input(const mlp_state *s, const sb_batch *in, bool json, size_t ci, size_t first,
                       size_t n, float *x, sb_err *err)
{
    return json ? json_input(s, in, ci, first, n, x, err)
                : tensor_input(s, in, ci, first, n, x, err);
}

static int batch_output(mlp_state *s, const sb_batch *in, bool json, size_t ci, size_t first,
                        size_t n, const float *y, sb_op_out *out, sb_err *err)
{
    return json ? json_output(s, in, ci, first, n, y, out, err)
                : tensor_output(s, in, ci, first, n, y, out, err);
}

/* Appends the output of the batch in flight (its rows are in `in`: see the header). */
static int cuda_drain(mlp_state *s, const sb_batch *in, sb_op_out *out, sb_err *err)
{
    mlp_pending p = s->pending;
    s->pending.active = false;
    if (!p.active)
        return 0;
    const float *y = sb_mlp_cuda_wait(s->run, p.slot, err);
    if (y == NULL)
        return sb_err_wrap(err, "tensor.mlp");
    return batch_output(s, in, p.json, p.ci, p.first, p.n, y, out, err);
}

/* On the device: queue this batch, then append the previous one's output while it runs. */
static int process_cuda(mlp_state *s, const sb_batch *in, bool json, size_t ci, size_t first,
                        size_t n, sb_op_out *out, sb_err *err)
{
    int slot = s->next_slot;
    float *x = sb_mlp_cuda_input(s->run, slot, n, err);
    if (x == NULL)
        return sb_err_wrap(err, "tensor.mlp");
    if (batch_input(s, in, json, ci, first, n, x, err) != 0)
        return -1;
    if (sb_mlp_cuda_submit(s->run, slot, n, err) != 0)
        return sb_err_wrap(err, "tensor.mlp");
    s->next_slot = (slot + 1) % SB_MLP_CUDA_SLOTS;
    if (cuda_drain(s, in, out, err) != 0)
        return -1;
    s->pending =
        (mlp_pending){.active = true, .json = json, .slot = slot, .ci = ci, .first = first, .n = n};
    if (first + n >= sb_batch_rows(in)) /* the partition's last batch: `in` goes after this */
        return cuda_drain(s, in, out, err);
    return 0;
}

static int mlp_process(void *state, const sb_batch *in, size_t first, size_t n, sb_op_out *out,
                       sb_err *err)
{
    mlp_state *s = state;
    if (n == 0)
        return 0;
    int ci = sb_batch_find(in, s->field);
    bool json = ci < 0 || sb_batch_column(in, (size_t)ci)->type != SB_TYPE_FIXED_LIST;
    if (json && ci >= 0 && strcmp(s->field, SB_OP_RECORD_COLUMN) != 0)
        return sb_err_data(err,
                           "tensor.mlp: column \"%.100s\" is %s, not a fixed-size list of numbers",
                           s->field, sb_type_name(sb_batch_column(in, (size_t)ci)->type));
    if (json) { /* jsonl records */
        if ((ci = sb_op_record_column(in, "tensor.mlp", err)) < 0)
            return sb_err_wrap(err, "tensor.mlp: no tensor column \"%.100s\" either", s->field);
        if (!sb_op_out_has_schema(out)) {
            sb_field rf = {.name = SB_OP_RECORD_COLUMN, .type = SB_TYPE_UTF8};
            if (sb_op_out_set_schema(out, &rf, 1, err) != 0)
                return -1;
        }
    }
    if (s->run != NULL)
        return process_cuda(s, in, json, (size_t)ci, first, n, out, err);
    if (reserve_rows(s, n, err) != 0 ||
        batch_input(s, in, json, (size_t)ci, first, n, s->x, err) != 0)
        return -1;
    forward(s, n);
    return batch_output(s, in, json, (size_t)ci, first, n, s->y, out, err);
}

/* The feed's last call on `in` did not reach its last row (the rest is carried into the next
 * batch, another `in`): the batch in flight, whose rows are in's, is appended now. */
static int mlp_input_end(void *state, const sb_batch *in, sb_op_out *out, sb_err *err)
{
    mlp_state *s = state;
    return s->run != NULL ? cuda_drain(s, in, out, err) : 0;
}

static int mlp_finish(void *state, sb_op_out *out, sb_err *err)
{
    (void)out;
    (void)err;
    mlp_state *s = state;
    s->pending.active = false; /* (none: a partition's last batch is always drained) */
    return 0;
}

/* Keeps the model, the CUDA run (streams, pinned and device buffers) and the scratch: what made
 * a task's init cost milliseconds (a 16 MiB pinned alloc+free is 8.4 ms on an H200). Nothing is
 * in flight after a successful task (a partition's last batch is drained at once). */
static int mlp_reset(void *state, sb_err *err)
{
    (void)err;
    mlp_state *s = state;
    s->pending.active = false;
    s->next_slot = 0;
    s->proj = NULL; /* borrowed for the task (absorb_borrows) */
    return 0;
}

/* A project right after this op in the task: each batch's output is written projected, so the
 * input columns the project drops (a 48 KiB image a row in the headline job) are not copied
 * into a partition only to be dropped. Borrowed: the runtime keeps the project's state and its
 * own (ops.h), so the model and the CUDA run stay with the worker. */
static bool mlp_absorb_next(void *state, const sb_op_impl *next, void *next_state)
{
    mlp_state *s = state;
    if (next != &sb_op_project_impl || s->proj != NULL)
        return false;
    s->proj = next_state;
    return true;
}

const sb_op_impl sb_op_mlp_impl = {
    .name = "tensor.mlp",
    .init = mlp_init,
    .process = mlp_process,
    .finish = mlp_finish,
    .input_end = mlp_input_end,
    .free = mlp_free,
    .reset = mlp_reset,
    .absorb_next = mlp_absorb_next,
    .absorb_borrows = true,
    .shutdown = mlp_shutdown,
    .default_batch = 256,
    .init_may_recover = true, /* the weights' fetch, a CUDA device on another worker */
};
