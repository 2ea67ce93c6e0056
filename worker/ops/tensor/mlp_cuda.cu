/* mlp_cuda.cu — tensor.mlp's CUDA implementation (see mlp_cuda.h): weights resident on the
 * device, the GEMMs done by cuBLASLt, two streams whose pinned host buffers and device buffers
 * hold one batch each.
 *
 * A layer is y[n x dout] = x[n x din] . w^T + b, x row-major and w [out, in] as PyTorch stores
 * it. cuBLAS is column-major: the same memory read column-major is x^T (din x n, ld din), w^T
 * (din x dout, ld din) and y^T (dout x n, ld dout), so each layer is the matmul
 * y^T = op(A) . B with A = w^T transposed (CUBLAS_OP_T: w), B = x^T, m = dout, n = n, k = din,
 * and the bias is a vector of m, which cuBLASLt's BIAS epilogue adds to every column. relu is
 * fused too (RELU_BIAS); gelu (erf, as the CPU computes it: cuBLASLt's GELU epilogue is the tanh
 * approximation) runs in a small kernel after the matmul, as do bias and activation when the
 * heuristic offers no algorithm with the epilogue. A layer's plan (descriptors, layouts, the
 * heuristic's algorithm) is made for a batch size once and kept (the last two sizes per layer).
 * Precisions: fp32 is CUBLAS_COMPUTE_32F (no TF32: within 1e-4 of the CPU), tf32 is
 * CUBLAS_COMPUTE_32F_FAST_TF32, bf16 multiplies bfloat16 copies of the weights (made once per
 * model) and of each layer's input (rounded by a kernel) with fp32 sums and outputs.
 *
 * Memory: see mlp_cuda.h. Every CUDA and cuBLAS call is checked; failures become sb_err messages
 * naming the call, with the library's text (those of the release paths, which have no caller to
 * tell, are logged as warnings).
 */
#define SB_MLP_CUDA_IMPL
extern "C" { /* (C headers without extern "C" of their own) */
#include "core/err.h"
#include "core/log.h"
}
#include "worker/ops/tensor/mlp_cuda.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 256
#define MAX_LAYERS 64
#define PLANS 2                      /* plans kept per layer: batch sizes */
#define WORKSPACE ((size_t)32 << 20) /* cuBLASLt's workspace per slot (32 MiB for Hopper) */

/* cuBLASLt is opened on first use, not linked. Its load alone costs a process ~160 MiB: 95 MiB
 * of .bss its initializers write and ~65 MiB of the library's pages (measured here: a GPU-pool
 * worker that never ran a GEMM held 198 MiB of Pss, and scripts/bench-memory.sh's accelerator
 * pipelines went over their goal). A worker of a GPU pool on a machine without a GPU (the CPU
 * fallback), or one whose stages have no tensor.mlp, never pays it. dlopen searches as the link
 * did: LD_LIBRARY_PATH, then the binary's RUNPATH (the image's lib/streambatch, the wheel's
 * folder). The functions are called through lt_fn, their types taken from cublasLt.h. */
#define LT_SONAME "libcublasLt.so.13"
/* clang-format off */
#define LT_FUNCS(X)                                                                                \
    X(Create) X(Destroy) X(GetStatusName) X(GetStatusString) X(Matmul) X(MatmulAlgoGetHeuristic)  \
    X(MatmulDescCreate) X(MatmulDescDestroy) X(MatmulDescSetAttribute) X(MatmulPreferenceCreate)   \
    X(MatmulPreferenceDestroy) X(MatmulPreferenceSetAttribute) X(MatrixLayoutCreate)               \
    X(MatrixLayoutDestroy)
/* clang-format on */

static struct {
#define LT_PTR(f) decltype(&::cublasLt##f) f;
    LT_FUNCS(LT_PTR)
#undef LT_PTR
} lt_fn;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static bool lt_ok;
static char lt_why[400];

static void lt_load(void)
{
    void *h = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(lt_why, sizeof lt_why, "%s", e != NULL ? e : "dlopen failed");
        return;
    }
#define LT_SYM(f)                                                                                  \
    if ((lt_fn.f = (decltype(lt_fn.f))dlsym(h, "cublasLt" #f)) == NULL) {                          \
        snprintf(lt_why, sizeof lt_why, "%s has no symbol cublasLt" #f, LT_SONAME);                \
        return;                                                                                    \
    }
    LT_FUNCS(LT_SYM)
#undef LT_SYM
    lt_ok = true; /* the handle stays open for the life of the process */
}

/* Opens cuBLASLt once per process; -1 + err naming the library and why when it cannot. */
static int lt_open(sb_err *err)
{
    pthread_once(&lt_once, lt_load);
    if (!lt_ok)
        return sb_err_set(err, "cuBLAS: cannot load %s: %s", LT_SONAME, lt_why);
    return 0;
}

#define CK(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return fail(err, what, e_);                                                            \
    } while (0)

#define LK(call, what)                                                                             \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return lt_fail(err, what, s_);                                                         \
    } while (0)

static int fail(sb_err *err, const char *what, cudaError_t e)
{
    return sb_err_set(err, "CUDA: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static int lt_fail(sb_err *err, const char *what, cublasStatus_t s)
{
    return sb_err_set(err, "cuBLAS: %s: %s (%s)", what, lt_fn.GetStatusString(s),
                      lt_fn.GetStatusName(s));
}

/* For the release paths (frees, stream teardown): a failure is logged, nothing else to do. */
static void released(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        sb_log(SB_LOG_WARN, "CUDA: releasing failed", "call", what, "error", cudaGetErrorString(e),
               (const char *)NULL);
}

static void lt_released(cublasStatus_t s, const char *what)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        sb_log(SB_LOG_WARN, "cuBLAS: releasing failed", "call", what, "error",
               lt_fn.GetStatusString(s), (const char *)NULL);
}

__device__ __forceinline__ float act_apply(float v, int act)
{
    if (act == SB_MLP_CUDA_RELU)
        return v > 0.0f ? v : 0.0f;
    if (act == SB_MLP_CUDA_GELU)
        return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    return v;
}

/* y[i] = act(y[i] + b[i % dout]) over n x dout values (b may be NULL). */
__global__ void bias_act(float *__restrict__ y, const float *__restrict__ b, size_t count,
                         unsigned dout, int act)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = act_apply(y[i] + (b != NULL ? b[i % dout] : 0.0f), act);
}

/* y[i] = x[i] rounded to the nearest bfloat16 (ties to even). */
__global__ void to_bf16(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

/* Blocks for a grid-stride kernel over count values: enough to fill a GPU, at most 4096. */
static unsigned blocks_for(size_t count)
{
    size_t b = (count + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

/* ---- the model ---------------------------------------------------------------------------- */

struct sb_mlp_cuda_model {
    size_t nl, widest;
    size_t din[MAX_LAYERS], dout[MAX_LAYERS];
    float *w[MAX_LAYERS], *b[MAX_LAYERS]; /* device */
    __nv_bfloat16 *wb[MAX_LAYERS];        /* device: w as bfloat16 (bf16 runs), or NULL */
};

extern "C" int sb_mlp_cuda_probe(sb_err *err)
{
    int n = 0;
    CK(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    return n;
}

extern "C" void sb_mlp_cuda_model_free(sb_mlp_cuda_model *m)
{
    if (m == NULL)
        return;
    for (size_t l = 0; l < m->nl; l++) {
        released(cudaFree(m->w[l]), "cudaFree (weights)");
        released(cudaFree(m->b[l]), "cudaFree (bias)");
        released(cudaFree(m->wb[l]), "cudaFree (bf16 weights)");
    }
    free(m);
}

static int upload(float **dst, const float *src, size_t count, sb_err *err)
{
    CK(cudaMalloc((void **)dst, count * sizeof(float)), "cudaMalloc (weights)");
    CK(cudaMemcpy(*dst, src, count * sizeof(float), cudaMemcpyHostToDevice),
       "cudaMemcpy (weights to the device)");
    return 0;
}

extern "C" sb_mlp_cuda_model *sb_mlp_cuda_model_new(size_t nl, const size_t *din,
                                                    const size_t *dout, const float *const *w,
                                                    const float *const *b, sb_err *err)
{
    if (nl == 0 || nl > MAX_LAYERS) {
        sb_err_set(err, "CUDA: a model of %zu layers", nl);
        return NULL;
    }
    sb_mlp_cuda_model *m = (sb_mlp_cuda_model *)calloc(1, sizeof *m);
    if (m == NULL) {
        sb_err_set(err, "CUDA: out of memory");
        return NULL;
    }
    for (size_t l = 0; l < nl; l++) {
        m->nl = l + 1;
        m->din[l] = din[l];
        m->dout[l] = dout[l];
        m->widest = din[l] > m->widest ? din[l] : m->widest;
        m->widest = dout[l] > m->widest ? dout[l] : m->widest;
        if (upload(&m->w[l], w[l], din[l] * dout[l], err) != 0 ||
            (b[l] != NULL && upload(&m->b[l], b[l], dout[l], err) != 0)) {
            sb_mlp_cuda_model_free(m);
            return NULL;
        }
    }
    return m;
}

/* m's bf16 copy of its weights, converted on the device. 0, or -1 + err (some may be made). */
static int bf16_weights(sb_mlp_cuda_model *m, sb_err *err)
{
    for (size_t l = 0; l < m->nl; l++) {
        size_t count = m->din[l] * m->dout[l];
        CK(cudaMalloc((void **)&m->wb[l], count * sizeof(__nv_bfloat16)),
           "cudaMalloc (bf16 weights)");
        to_bf16<<<blocks_for(count), THREADS>>>(m->w[l], m->wb[l], count);
        CK(cudaGetLastError(), "launching the bf16 conversion of the weights");
    }
    /* the runs' streams do not wait for the legacy default stream (cudaStreamNonBlocking) */
    CK(cudaDeviceSynchronize(), "converting the weights to bf16 (cudaDeviceSynchronize)");
    return 0;
}

extern "C" int sb_mlp_cuda_model_prepare(sb_mlp_cuda_model *m, int precision, sb_err *err)
{
    if (precision != SB_MLP_CUDA_BF16 || m->wb[0] != NULL)
        return 0;
    if (bf16_weights(m, err) == 0)
        return 0;
    for (size_t l = 0; l < m->nl; l++) { /* none or all: wb[0] says whether they are there */
        released(cudaFree(m->wb[l]), "cudaFree (bf16 weights)");
        m->wb[l] = NULL;
    }
    return -1;
}

/* ---- plans: a layer's matmul for one batch size -------------------------------------------- */

typedef struct {
    bool used;
    size_t n;
    int act;
    unsigned long last; /* the run's tick when last used */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    bool post;      /* a kernel after the matmul: bias_act(post_bias, act) */
    bool post_bias; /* that kernel adds the bias (the epilogue did not) */
} plan_t;

static void plan_release(plan_t *p)
{
    if (p->op != NULL)
        lt_released(lt_fn.MatmulDescDestroy(p->op), "cublasLtMatmulDescDestroy");
    if (p->a != NULL)
        lt_released(lt_fn.MatrixLayoutDestroy(p->a), "cublasLtMatrixLayoutDestroy");
    if (p->b != NULL)
        lt_released(lt_fn.MatrixLayoutDestroy(p->b), "cublasLtMatrixLayoutDestroy");
    if (p->d != NULL)
        lt_released(lt_fn.MatrixLayoutDestroy(p->d), "cublasLtMatrixLayoutDestroy");
    memset(p, 0, sizeof *p);
}

/* The epilogue that does a layer's bias and activation, as far as cuBLASLt has one (gelu: the
 * bias only, the erf form runs in bias_act). */
static cublasLtEpilogue_t fused_epilogue(int act, bool bias)
{
    if (act == SB_MLP_CUDA_RELU)
        return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

/* The heuristic's best algorithm for p with epilogue ep; *found 0 when it offers none. */
static int plan_algo(cublasLtHandle_t lt, plan_t *p, cublasLtEpilogue_t ep, const float *bias,
                     int *found, sb_err *err)
{
    LK(lt_fn.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
       "cublasLtMatmulDescSetAttribute (epilogue)");
    const float *bp =
        ep == CUBLASLT_EPILOGUE_BIAS || ep == CUBLASLT_EPILOGUE_RELU_BIAS ? bias : NULL;
    LK(lt_fn.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
       "cublasLtMatmulDescSetAttribute (bias)");
    cublasLtMatmulPreference_t pref = NULL;
    LK(lt_fn.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    size_t ws = WORKSPACE;
    cublasStatus_t st = lt_fn.MatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    int count = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = lt_fn.MatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->d, p->d, pref, 1, &res, &count);
    lt_released(lt_fn.MatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy");
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
        return lt_fail(err, "cublasLtMatmulAlgoGetHeuristic", st);
    *found = st == CUBLAS_STATUS_SUCCESS && count > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    if (*found)
        p->algo = res.algo;
    return 0;
}

/* Makes p: layer (din x dout, bias) for batches of n rows, activation act, at precision. */
static int plan_build(cublasLtHandle_t lt, plan_t *p, size_t din, size_t dout, const float *bias,
                      size_t n, int act, int precision, sb_err *err)
{
    cublasComputeType_t ct =
        precision == SB_MLP_CUDA_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t ab = precision == SB_MLP_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LK(lt_fn.MatmulDescCreate(&p->op, ct, CUDA_R_32F), "cublasLtMatmulDescCreate");
    LK(lt_fn.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
       "cublasLtMatmulDescSetAttribute (transa)");
    LK(lt_fn.MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
       "cublasLtMatmulDescSetAttribute (transb)");
    LK(lt_fn.MatrixLayoutCreate(&p->a, ab, din, dout, (int64_t)din),
       "cublasLtMatrixLayoutCreate (weights)");
    LK(lt_fn.MatrixLayoutCreate(&p->b, ab, din, n, (int64_t)din),
       "cublasLtMatrixLayoutCreate (input)");
    LK(lt_fn.MatrixLayoutCreate(&p->d, CUDA_R_32F, dout, n, (int64_t)dout),
       "cublasLtMatrixLayoutCreate (output)");
    cublasLtEpilogue_t ep = fused_epilogue(act, bias != NULL);
    int found = 0;
    if (plan_algo(lt, p, ep, bias, &found, err) != 0)
        return -1;
    p->post_bias = false;
    if (!found && ep != CUBLASLT_EPILOGUE_DEFAULT) { /* bias and activation in bias_act */
        if (plan_algo(lt, p, CUBLASLT_EPILOGUE_DEFAULT, bias, &found, err) != 0)
            return -1;
        p->post_bias = bias != NULL;
        ep = CUBLASLT_EPILOGUE_DEFAULT;
    }
    if (!found)
        return sb_err_set(err,
                          "cuBLAS: no algorithm for a %zu x %zu -> %zu matmul at precision %s "
                          "(cublasLtMatmulAlgoGetHeuristic found none)",
                          n, din, dout,
                          precision == SB_MLP_CUDA_TF32   ? "tf32"
                          : precision == SB_MLP_CUDA_BF16 ? "bf16"
                                                          : "fp32");
    p->post = p->post_bias || act == SB_MLP_CUDA_GELU ||
              (act == SB_MLP_CUDA_RELU && ep == CUBLASLT_EPILOGUE_DEFAULT);
    p->n = n;
    p->act = act;
    p->used = true;
    return 0;
}

/* ---- a run: a cuBLASLt handle, its plans, two streams with one batch's buffers each -------- */

typedef struct {
    cudaStream_t s;
    size_t cap;          /* rows the buffers hold */
    float *xh, *yh;      /* pinned host: input (cap x din0), output (cap x dout_last) */
    float *xd, *t0, *t1; /* device: input, the layers' outputs (cap x widest each) */
    __nv_bfloat16 *xb;   /* device, bf16 runs: a layer's input rounded (cap x widest) */
    void *ws;            /* device: cuBLASLt's workspace (WORKSPACE bytes) */
    size_t n;            /* rows submitted */
} slot_t;

struct sb_mlp_cuda_run {
    const sb_mlp_cuda_model *m;
    int act, act_last; /* act_last: after the last layer (none, but for sb_mlp_cuda_linear) */
    int precision;
    cublasLtHandle_t lt;
    unsigned long tick;
    plan_t plan[MAX_LAYERS][PLANS];
    slot_t slot[SB_MLP_CUDA_SLOTS];
};

static void slot_release(slot_t *s)
{
    released(cudaFreeHost(s->xh), "cudaFreeHost (input)");
    released(cudaFreeHost(s->yh), "cudaFreeHost (output)");
    released(cudaFree(s->xd), "cudaFree (input)");
    released(cudaFree(s->t0), "cudaFree (activations)");
    released(cudaFree(s->t1), "cudaFree (activations)");
    released(cudaFree(s->xb), "cudaFree (bf16 input)");
    s->xh = s->yh = s->xd = s->t0 = s->t1 = NULL;
    s->xb = NULL;
    s->cap = 0;
}

extern "C" void sb_mlp_cuda_run_free(sb_mlp_cuda_run *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < SB_MLP_CUDA_SLOTS; i++) {
        if (r->slot[i].s != NULL) {
            released(cudaStreamSynchronize(r->slot[i].s), "cudaStreamSynchronize");
            released(cudaStreamDestroy(r->slot[i].s), "cudaStreamDestroy");
        }
        slot_release(&r->slot[i]);
        released(cudaFree(r->slot[i].ws), "cudaFree (cuBLASLt workspace)");
    }
    for (size_t l = 0; l < MAX_LAYERS; l++)
        for (int k = 0; k < PLANS; k++)
            plan_release(&r->plan[l][k]);
    if (r->lt != NULL)
        lt_released(lt_fn.Destroy(r->lt), "cublasLtDestroy");
    free(r);
}

static int run_init(sb_mlp_cuda_run *r, sb_err *err)
{
    if (r->precision < SB_MLP_CUDA_FP32 || r->precision > SB_MLP_CUDA_BF16)
        return sb_err_set(err, "CUDA: no precision %d", r->precision);
    if (r->precision == SB_MLP_CUDA_BF16 && r->m->wb[0] == NULL)
        return sb_err_set(err, "CUDA: the model has no bf16 weights (sb_mlp_cuda_model_prepare)");
    if (lt_open(err) != 0)
        return -1;
    LK(lt_fn.Create(&r->lt), "cublasLtCreate");
    for (int i = 0; i < SB_MLP_CUDA_SLOTS; i++) {
        cudaError_t e = cudaStreamCreateWithFlags(&r->slot[i].s, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            r->slot[i].s = NULL;
            return fail(err, "cudaStreamCreate", e);
        }
        CK(cudaMalloc(&r->slot[i].ws, WORKSPACE), "cudaMalloc (cuBLASLt workspace)");
    }
    return 0;
}

extern "C" sb_mlp_cuda_run *sb_mlp_cuda_run_new(const sb_mlp_cuda_model *m, int act, int precision,
                                                sb_err *err)
{
    sb_mlp_cuda_run *r = (sb_mlp_cuda_run *)calloc(1, sizeof *r);
    if (r == NULL) {
        sb_err_set(err, "CUDA: out of memory");
        return NULL;
    }
    r->m = m;
    r->act = act;
    r->act_last = SB_MLP_CUDA_NONE;
    r->precision = precision;
    if (run_init(r, err) != 0) {
        sb_mlp_cuda_run_free(r);
        return NULL;
    }
    return r;
}

static int slot_grow(const sb_mlp_cuda_run *r, slot_t *s, size_t n, sb_err *err)
{
    if (n <= s->cap)
        return 0;
    slot_release(s);
    const sb_mlp_cuda_model *m = r->m;
    size_t in = m->din[0], out = m->dout[m->nl - 1];
    CK(cudaHostAlloc((void **)&s->xh, n * in * sizeof(float), cudaHostAllocDefault),
       "cudaHostAlloc (input)");
    CK(cudaHostAlloc((void **)&s->yh, n * out * sizeof(float), cudaHostAllocDefault),
       "cudaHostAlloc (output)");
    CK(cudaMalloc((void **)&s->xd, n * in * sizeof(float)), "cudaMalloc (input)");
    CK(cudaMalloc((void **)&s->t0, n * m->widest * sizeof(float)), "cudaMalloc (activations)");
    CK(cudaMalloc((void **)&s->t1, n * m->widest * sizeof(float)), "cudaMalloc (activations)");
    if (r->precision == SB_MLP_CUDA_BF16)
        CK(cudaMalloc((void **)&s->xb, n * m->widest * sizeof(__nv_bfloat16)),
           "cudaMalloc (bf16 input)");
    s->cap = n;
    return 0;
}

extern "C" float *sb_mlp_cuda_input(sb_mlp_cuda_run *r, int slot, size_t n, sb_err *err)
{
    if (slot < 0 || slot >= SB_MLP_CUDA_SLOTS) {
        sb_err_set(err, "CUDA: no slot %d", slot);
        return NULL;
    }
    slot_t *s = &r->slot[slot];
    if (slot_grow(r, s, n, err) != 0) {
        slot_release(s);
        return NULL;
    }
    return s->xh;
}

/* Layer l's plan for n rows and activation act: kept, or made in place of the least recently
 * used one. NULL + err. */
static plan_t *plan_get(sb_mlp_cuda_run *r, size_t l, size_t n, int act, sb_err *err)
{
    plan_t *ps = r->plan[l], *p = &ps[0];
    r->tick++;
    for (int k = 0; k < PLANS; k++) {
        if (ps[k].used && ps[k].n == n && ps[k].act == act) {
            ps[k].last = r->tick;
            return &ps[k];
        }
        if (!ps[k].used || (p->used && ps[k].last < p->last))
            p = &ps[k];
    }
    plan_release(p);
    const sb_mlp_cuda_model *m = r->m;
    if (plan_build(r->lt, p, m->din[l], m->dout[l], m->b[l], n, act, r->precision, err) != 0) {
        plan_release(p);
        return NULL;
    }
    p->last = r->tick;
    return p;
}

/* Queues layer l on slot s: out (n x dout) = act(in (n x din) . w^T + b). */
static int layer(sb_mlp_cuda_run *r, slot_t *s, size_t l, const float *in, float *out, size_t n,
                 int act, sb_err *err)
{
    const sb_mlp_cuda_model *m = r->m;
    size_t din = m->din[l], dout = m->dout[l];
    plan_t *p = plan_get(r, l, n, act, err);
    if (p == NULL)
        return -1;
    const void *a = m->w[l], *b = in;
    if (r->precision == SB_MLP_CUDA_BF16) {
        to_bf16<<<blocks_for(n * din), THREADS, 0, s->s>>>(in, s->xb, n * din);
        CK(cudaGetLastError(), "launching the bf16 conversion of a layer's input");
        a = m->wb[l];
        b = s->xb;
    }
    const float one = 1.0f, zero = 0.0f;
    LK(lt_fn.Matmul(r->lt, p->op, &one, a, p->a, b, p->b, &zero, out, p->d, out, p->d, &p->algo,
                    s->ws, WORKSPACE, s->s),
       "cublasLtMatmul");
    if (p->post) {
        bias_act<<<blocks_for(n * dout), THREADS, 0, s->s>>>(out, p->post_bias ? m->b[l] : NULL,
                                                             n * dout, (unsigned)dout, act);
        CK(cudaGetLastError(), "launching the bias and activation kernel");
    }
    return 0;
}

extern "C" int sb_mlp_cuda_submit(sb_mlp_cuda_run *r, int slot, size_t n, sb_err *err)
{
    const sb_mlp_cuda_model *m = r->m;
    if (slot < 0 || slot >= SB_MLP_CUDA_SLOTS || n > r->slot[slot].cap)
        return sb_err_set(err, "CUDA: slot %d does not hold %zu rows", slot, n);
    slot_t *s = &r->slot[slot];
    s->n = n;
    if (n == 0)
        return 0;
    CK(cudaMemcpyAsync(s->xd, s->xh, n * m->din[0] * sizeof(float), cudaMemcpyHostToDevice, s->s),
       "cudaMemcpyAsync (input to the device)");
    const float *in = s->xd;
    float *dst = s->t0;
    for (size_t l = 0; l < m->nl; l++) {
        int act = l + 1 < m->nl ? r->act : r->act_last;
        if (layer(r, s, l, in, dst, n, act, err) != 0)
            return -1;
        in = dst;
        dst = dst == s->t0 ? s->t1 : s->t0;
    }
    CK(cudaMemcpyAsync(s->yh, in, n * m->dout[m->nl - 1] * sizeof(float), cudaMemcpyDeviceToHost,
                       s->s),
       "cudaMemcpyAsync (output to the host)");
    return 0;
}

extern "C" const float *sb_mlp_cuda_wait(sb_mlp_cuda_run *r, int slot, sb_err *err)
{
    if (slot < 0 || slot >= SB_MLP_CUDA_SLOTS) {
        sb_err_set(err, "CUDA: no slot %d", slot);
        return NULL;
    }
    cudaError_t e = cudaStreamSynchronize(r->slot[slot].s);
    if (e != cudaSuccess) {
        fail(err, "running the batch (cudaStreamSynchronize)", e);
        return NULL;
    }
    return r->slot[slot].yh;
}

extern "C" int sb_mlp_cuda_linear(const float *x, size_t n, size_t din, const float *w,
                                  const float *b, size_t dout, int act, int precision, float *y,
                                  sb_err *err)
{
    if (n == 0)
        return 0;
    sb_mlp_cuda_model *m = sb_mlp_cuda_model_new(1, &din, &dout, &w, &b, err);
    if (m == NULL)
        return -1;
    sb_mlp_cuda_run *r = NULL;
    int rc = sb_mlp_cuda_model_prepare(m, precision, err);
    if (rc == 0 && (r = sb_mlp_cuda_run_new(m, SB_MLP_CUDA_NONE, precision, err)) == NULL)
        rc = -1;
    if (rc == 0) {
        r->act_last = act;
        float *xh = sb_mlp_cuda_input(r, 0, n, err);
        rc = xh == NULL ? -1 : 0;
        if (rc == 0)
            memcpy(xh, x, n * din * sizeof(float));
        if (rc == 0)
            rc = sb_mlp_cuda_submit(r, 0, n, err);
        const float *yh = rc == 0 ? sb_mlp_cuda_wait(r, 0, err) : NULL;
        if (yh == NULL)
            rc = -1;
        else
            memcpy(y, yh, n * dout * sizeof(float));
    }
    sb_mlp_cuda_run_free(r);
    sb_mlp_cuda_model_free(m);
    return rc;
}
