/* mlp_cuda.cu — tensor.mlp's CUDA implementation (see mlp_cuda.h): weights resident on the
 * device, two streams whose pinned host buffers and device buffers hold one batch each, and a
 * tiled SGEMM kernel of our own with the bias and the activation fused.
 *
 * The kernel: y[n x dout] = x[n x din] . w^T + b, both operands K-contiguous (x row-major, w
 * [out, in] as PyTorch stores it). A block of 256 threads computes a 64 x 64 tile of y; each
 * step it stages a 64 x 16 tile of x and of w in shared memory (transposed, K outermost, padded
 * against bank conflicts) and every thread accumulates a 4 x 4 register block (rows ty + 16 i,
 * outputs tx + 16 j: shared reads are broadcasts or consecutive, stores to y are coalesced).
 * A second kernel (sgemm_xwt_big) does the same with 128 x 128 tiles and 8 x 8 outputs per
 * thread for grids large enough to fill the GPU (batches of thousands of rows).
 * Accumulation is fp32 FMA, like the CPU's AVX2 kernel (the order of the sums differs: results
 * agree to ~1e-6 relative, the tests allow 1e-4).
 *
 * Memory: see mlp_cuda.h. Every CUDA call is checked; failures become sb_err messages naming
 * the call, with cudaGetErrorString's text (those of the release paths, which have no caller to
 * tell, are logged as warnings).
 */
#define SB_MLP_CUDA_IMPL
extern "C" { /* (C headers without extern "C" of their own) */
#include "core/err.h"
#include "core/log.h"
}
#include "worker/ops/tensor/mlp_cuda.h"

#include <atomic>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#define TILE_M 64 /* rows of x per block */
#define TILE_N 64 /* outputs per block */
#define TILE_K 16
#define THREADS 256 /* 16 x 16, each 4 x 4 outputs */
#define MAX_LAYERS 64

#define CK(call, what)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return fail(err, what, e_);                                                            \
    } while (0)

static int fail(sb_err *err, const char *what, cudaError_t e)
{
    return sb_err_set(err, "CUDA: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* For the release paths (frees, stream teardown): a failure is logged, nothing else to do. */
static void released(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        sb_log(SB_LOG_WARN, "CUDA: releasing failed", "call", what, "error", cudaGetErrorString(e),
               (const char *)NULL);
}

__device__ __forceinline__ float act_apply(float v, int act)
{
    if (act == SB_MLP_CUDA_RELU)
        return v > 0.0f ? v : 0.0f;
    if (act == SB_MLP_CUDA_GELU)
        return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    return v;
}

__global__ void __launch_bounds__(THREADS)
    sgemm_xwt(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
              float *__restrict__ y, int n, int din, int dout, int act)
{
    __shared__ float xs[TILE_K][TILE_M + 1];
    __shared__ float ws[TILE_K][TILE_N + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int row0 = blockIdx.x * TILE_M, col0 = blockIdx.y * TILE_N;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < din; k0 += TILE_K) {
        /* 64 x 16 elements of each operand, 4 per thread; 16 consecutive k per row: each
         * half-warp reads 64 contiguous bytes */
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int e = tid + q * THREADS, r = e / TILE_K, k = e % TILE_K;
            int gr = row0 + r, gc = col0 + r, gk = k0 + k;
            xs[k][r] = gr < n && gk < din ? x[(size_t)gr * din + gk] : 0.0f;
            ws[k][r] = gc < dout && gk < din ? w[(size_t)gc * din + gk] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE_K; k++) {
            float a[4], c[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                a[i] = xs[k][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++)
                c[j] = ws[k][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], c[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = row0 + ty + 16 * i;
        if (r >= n)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = col0 + tx + 16 * j;
            if (c < dout)
                y[(size_t)r * dout + c] = act_apply(acc[i][j] + (b != NULL ? b[c] : 0.0f), act);
        }
    }
}

/* The large kernel: a block of 256 threads computes a 128 x 128 tile of y, staging 128 x 8
 * tiles of x and w in shared memory (K outermost) each step; thread (ty, tx) accumulates 8 x 8
 * outputs: rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, outputs tx*4 + {0..3} and 64 + tx*4 +
 * {0..3}, read from shared memory as float4s (no bank conflicts: a warp reads 2 and 16
 * consecutive float4s). Each thread loads 4 consecutive k of one row of each operand: one float4
 * when VEC (din a multiple of 4, so rows are 16-byte aligned), else 4 checked scalars. */
#define BIG_M 128
#define BIG_N 128
#define BIG_K 8

template <bool VEC>
__global__ void __launch_bounds__(THREADS)
    sgemm_xwt_big(const float *__restrict__ x, const float *__restrict__ w,
                  const float *__restrict__ b, float *__restrict__ y, int n, int din, int dout,
                  int act)
{
    __shared__ __align__(16) float xs[BIG_K][BIG_M];
    __shared__ __align__(16) float ws[BIG_K][BIG_N];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int row0 = blockIdx.x * BIG_M, col0 = blockIdx.y * BIG_N;
    const int lr = tid >> 1, lk = (tid & 1) * 4; /* this thread's load: row lr, k lk..lk+3 */
    const int gr = row0 + lr, gc = col0 + lr;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < din; k0 += BIG_K) {
        const int gk = k0 + lk;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), c = a;
        if (VEC) {
            if (gr < n && gk < din)
                a = *(const float4 *)&x[(size_t)gr * din + gk];
            if (gc < dout && gk < din)
                c = *(const float4 *)&w[(size_t)gc * din + gk];
        } else {
            float av[4], cv[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                av[q] = gr < n && gk + q < din ? x[(size_t)gr * din + gk + q] : 0.0f;
                cv[q] = gc < dout && gk + q < din ? w[(size_t)gc * din + gk + q] : 0.0f;
            }
            a = make_float4(av[0], av[1], av[2], av[3]);
            c = make_float4(cv[0], cv[1], cv[2], cv[3]);
        }
        xs[lk][lr] = a.x, xs[lk + 1][lr] = a.y, xs[lk + 2][lr] = a.z, xs[lk + 3][lr] = a.w;
        ws[lk][lr] = c.x, ws[lk + 1][lr] = c.y, ws[lk + 2][lr] = c.z, ws[lk + 3][lr] = c.w;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BIG_K; k++) {
            const float4 a0 = *(const float4 *)&xs[k][ty * 4];
            const float4 a1 = *(const float4 *)&xs[k][64 + ty * 4];
            const float4 c0 = *(const float4 *)&ws[k][tx * 4];
            const float4 c1 = *(const float4 *)&ws[k][64 + tx * 4];
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float cv[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[i][j] = fmaf(av[i], cv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (r >= n)
            continue;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = col0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
            if (c < dout)
                y[(size_t)r * dout + c] = act_apply(acc[i][j] + (b != NULL ? b[c] : 0.0f), act);
        }
    }
}

/* The multiprocessors of the current device (asked once; 0 when the call fails). */
static int device_sms(void)
{
    static std::atomic<int> sms{-1};
    int v = sms.load();
    if (v < 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            v = 0;
        sms.store(v);
    }
    return v;
}

/* Queues y = act(x . w^T + b) on stream s: the 128 x 128 kernel once its grid has a block for
 * every multiprocessor (it does twice the work per shared-memory load), else the 64 x 64 one. */
static int launch(const float *x, size_t n, size_t din, const float *w, const float *b, size_t dout,
                  int act, int tile, float *y, cudaStream_t s, sb_err *err)
{
    if (n > 0x7fffffffu || din > 0x7fffffffu || dout > 0x7fffffffu)
        return sb_err_set(err, "CUDA: a batch of %zu rows is too large", n);
    if (n == 0 || dout == 0)
        return 0;
    size_t big_blocks = ((n + BIG_M - 1) / BIG_M) * ((dout + BIG_N - 1) / BIG_N);
    if (tile == SB_MLP_CUDA_TILE_AUTO)
        tile = device_sms() > 0 && big_blocks >= (size_t)device_sms() ? SB_MLP_CUDA_TILE_128
                                                                      : SB_MLP_CUDA_TILE_64;
    size_t tm = tile == SB_MLP_CUDA_TILE_128 ? BIG_M : TILE_M;
    size_t tn = tile == SB_MLP_CUDA_TILE_128 ? BIG_N : TILE_N;
    dim3 grid((unsigned)((n + tm - 1) / tm), (unsigned)((dout + tn - 1) / tn));
    if (grid.y > 65535)
        return sb_err_set(err, "CUDA: %zu outputs is more than the kernel's grid takes", dout);
    if (tile != SB_MLP_CUDA_TILE_128)
        sgemm_xwt<<<grid, THREADS, 0, s>>>(x, w, b, y, (int)n, (int)din, (int)dout, act);
    else if (din % 4 == 0)
        sgemm_xwt_big<true><<<grid, THREADS, 0, s>>>(x, w, b, y, (int)n, (int)din, (int)dout, act);
    else
        sgemm_xwt_big<false><<<grid, THREADS, 0, s>>>(x, w, b, y, (int)n, (int)din, (int)dout, act);
    CK(cudaGetLastError(), "launching the GEMM kernel");
    return 0;
}

/* ---- the model ---------------------------------------------------------------------------- */

struct sb_mlp_cuda_model {
    size_t nl, widest;
    size_t din[MAX_LAYERS], dout[MAX_LAYERS];
    float *w[MAX_LAYERS], *b[MAX_LAYERS]; /* device */
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

/* ---- a run: two streams, each with one batch's buffers ------------------------------------ */

typedef struct {
    cudaStream_t s;
    size_t cap;          /* rows the buffers hold */
    float *xh, *yh;      /* pinned host: input (cap x din0), output (cap x dout_last) */
    float *xd, *t0, *t1; /* device: input, the layers' outputs (cap x widest each) */
    size_t n;            /* rows submitted */
} slot_t;

struct sb_mlp_cuda_run {
    const sb_mlp_cuda_model *m;
    int act;
    slot_t slot[SB_MLP_CUDA_SLOTS];
};

static void slot_release(slot_t *s)
{
    released(cudaFreeHost(s->xh), "cudaFreeHost (input)");
    released(cudaFreeHost(s->yh), "cudaFreeHost (output)");
    released(cudaFree(s->xd), "cudaFree (input)");
    released(cudaFree(s->t0), "cudaFree (activations)");
    released(cudaFree(s->t1), "cudaFree (activations)");
    s->xh = s->yh = s->xd = s->t0 = s->t1 = NULL;
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
    }
    free(r);
}

extern "C" sb_mlp_cuda_run *sb_mlp_cuda_run_new(const sb_mlp_cuda_model *m, int act, sb_err *err)
{
    sb_mlp_cuda_run *r = (sb_mlp_cuda_run *)calloc(1, sizeof *r);
    if (r == NULL) {
        sb_err_set(err, "CUDA: out of memory");
        return NULL;
    }
    r->m = m;
    r->act = act;
    for (int i = 0; i < SB_MLP_CUDA_SLOTS; i++) {
        cudaError_t e = cudaStreamCreateWithFlags(&r->slot[i].s, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            r->slot[i].s = NULL;
            fail(err, "cudaStreamCreate", e);
            sb_mlp_cuda_run_free(r);
            return NULL;
        }
    }
    return r;
}

static int slot_grow(const sb_mlp_cuda_model *m, slot_t *s, size_t n, sb_err *err)
{
    if (n <= s->cap)
        return 0;
    slot_release(s);
    size_t in = m->din[0], out = m->dout[m->nl - 1];
    CK(cudaHostAlloc((void **)&s->xh, n * in * sizeof(float), cudaHostAllocDefault),
       "cudaHostAlloc (input)");
    CK(cudaHostAlloc((void **)&s->yh, n * out * sizeof(float), cudaHostAllocDefault),
       "cudaHostAlloc (output)");
    CK(cudaMalloc((void **)&s->xd, n * in * sizeof(float)), "cudaMalloc (input)");
    CK(cudaMalloc((void **)&s->t0, n * m->widest * sizeof(float)), "cudaMalloc (activations)");
    CK(cudaMalloc((void **)&s->t1, n * m->widest * sizeof(float)), "cudaMalloc (activations)");
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
    if (slot_grow(r->m, s, n, err) != 0) {
        slot_release(s);
        return NULL;
    }
    return s->xh;
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
        int act = l + 1 < m->nl ? r->act : SB_MLP_CUDA_NONE;
        if (launch(in, n, m->din[l], m->w[l], m->b[l], m->dout[l], act, SB_MLP_CUDA_TILE_AUTO, dst,
                   s->s, err) != 0)
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
                                  const float *b, size_t dout, int act, int tile, float *y,
                                  sb_err *err)
{
    float *d[4] = {NULL, NULL, NULL, NULL}; /* x, w, b, y */
    size_t sz[4] = {n * din, dout * din, b != NULL ? dout : 0, n * dout};
    const float *src[3] = {x, w, b};
    int rc = 0;
    cudaError_t e = cudaSuccess;
    const char *what = NULL;
    for (int i = 0; i < 4 && e == cudaSuccess; i++) {
        if (sz[i] == 0)
            continue;
        what = "cudaMalloc";
        e = cudaMalloc((void **)&d[i], sz[i] * sizeof(float));
        if (e == cudaSuccess && i < 3) {
            what = "cudaMemcpy (to the device)";
            e = cudaMemcpy(d[i], src[i], sz[i] * sizeof(float), cudaMemcpyHostToDevice);
        }
    }
    if (e == cudaSuccess)
        rc = launch(d[0], n, din, d[1], d[2], dout, act, tile, d[3], 0, err);
    if (e == cudaSuccess && rc == 0) {
        what = "cudaMemcpy (to the host)";
        e = cudaMemcpy(y, d[3], sz[3] * sizeof(float), cudaMemcpyDeviceToHost);
    }
    for (int i = 0; i < 4; i++)
        released(cudaFree(d[i]), "cudaFree");
    if (e != cudaSuccess)
        return fail(err, what, e);
    return rc;
}
