/* mlp_cuda.h — tensor.mlp on CUDA: the interface between the operator (mlp.c, C, in the
 * archive) and its CUDA implementation (mlp_cuda.cu, compiled by nvcc into the
 * streambatch-worker-gpu binary only; docs/architecture.md, "The CUDA build").
 *
 * Linking: outside mlp_cuda.cu these functions are declared weak. A binary that links only
 * libstreambatch.a (streambatch-worker, the tests) has them all NULL, and mlp.c then runs the CPU
 * implementation; streambatch-worker-gpu (and tests/cuda) link mlp_cuda.o, whose strong
 * definitions take their place. Test `sb_mlp_cuda_probe != NULL` before calling any of them.
 *
 * Threads: a model is shared read-only by every thread once made; a run belongs to one thread
 * at a time. Every function that can fail returns -1 (or NULL) and sets err to a message that
 * names the CUDA call and holds cudaGetErrorString's text.
 *
 * Memory: sb_mlp_cuda_model_new() copies the weights to the device (the caller keeps its host
 * copies); sb_mlp_cuda_model_prepare() adds their bf16 copy; sb_mlp_cuda_model_free() releases
 * them. A run owns a cuBLASLt handle, its GEMM plans, two CUDA streams and, per stream, pinned
 * host buffers, device buffers for one batch and a cuBLASLt workspace; sb_mlp_cuda_run_free()
 * waits for what is in flight and releases them. The buffers sb_mlp_cuda_input()/sb_mlp_cuda_wait()
 * return belong to the run and stay valid until the slot's next sb_mlp_cuda_input() or the run's
 * free.
 */
#ifndef SB_WORKER_OPS_TENSOR_MLP_CUDA_H
#define SB_WORKER_OPS_TENSOR_MLP_CUDA_H

#include <stddef.h>

#include "core/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef SB_MLP_CUDA_IMPL
#define SB_MLP_CUDA_API
#else
#define SB_MLP_CUDA_API __attribute__((weak))
#endif

/* Activations, as mlp.c numbers them: relu, gelu (0.5 x (1 + erf(x / sqrt 2))), none. */
enum { SB_MLP_CUDA_RELU = 0, SB_MLP_CUDA_GELU = 1, SB_MLP_CUDA_NONE = 2 };

/* Precisions of the GEMMs (args.precision): fp32 (CUBLAS_COMPUTE_32F, no TF32), tf32
 * (CUBLAS_COMPUTE_32F_FAST_TF32: inputs rounded to TF32's 10-bit mantissa, fp32 sums), bf16
 * (weights and each layer's input rounded to bfloat16, fp32 sums and outputs). */
enum { SB_MLP_CUDA_FP32 = 0, SB_MLP_CUDA_TF32 = 1, SB_MLP_CUDA_BF16 = 2 };

/* Two slots: consecutive batches alternate between them, so that one batch's copies and
 * kernels overlap the other's. */
#define SB_MLP_CUDA_SLOTS 2

typedef struct sb_mlp_cuda_model sb_mlp_cuda_model;
typedef struct sb_mlp_cuda_run sb_mlp_cuda_run;

/* The number of CUDA devices (cudaGetDeviceCount), or -1 with err set when the runtime fails
 * (no driver: cudaErrorInsufficientDriver / cudaErrorNoDevice, an old driver, ...). */
SB_MLP_CUDA_API int sb_mlp_cuda_probe(sb_err *err);

/* A model of nl layers on device 0: layer l is din[l] -> dout[l], weights w[l] (dout x din,
 * row-major) and bias b[l] (dout floats, or NULL). NULL + err. */
SB_MLP_CUDA_API sb_mlp_cuda_model *sb_mlp_cuda_model_new(size_t nl, const size_t *din,
                                                         const size_t *dout, const float *const *w,
                                                         const float *const *b, sb_err *err);
SB_MLP_CUDA_API void sb_mlp_cuda_model_free(sb_mlp_cuda_model *m);

/* Makes m ready for runs of `precision`: for bf16, the weights' bfloat16 copy (converted on the
 * device, once; later calls return at once). Not thread-safe: the caller serializes it with
 * every other use of m (mlp.c holds its model cache's lock). 0, or -1 + err. */
SB_MLP_CUDA_API int sb_mlp_cuda_model_prepare(sb_mlp_cuda_model *m, int precision, sb_err *err);

/* The cuBLASLt handle, streams and buffers of one op state running model m with activation act
 * (between layers, not after the last) at `precision` (bf16: m prepared for it). NULL + err. */
SB_MLP_CUDA_API sb_mlp_cuda_run *sb_mlp_cuda_run_new(const sb_mlp_cuda_model *m, int act,
                                                     int precision, sb_err *err);
SB_MLP_CUDA_API void sb_mlp_cuda_run_free(sb_mlp_cuda_run *r);

/* The pinned input buffer of `slot` for n rows (n x din[0] floats, row-major), grown as
 * needed; the slot must not be in flight (submitted and not yet waited for). NULL + err. */
SB_MLP_CUDA_API float *sb_mlp_cuda_input(sb_mlp_cuda_run *r, int slot, size_t n, sb_err *err);

/* Queues on the slot's stream: the input's copy to the device, per layer one cuBLASLt matmul
 * (bias and relu fused as its epilogue where cuBLASLt offers one; else, and for gelu, a small
 * kernel after it; for bf16, a kernel rounding the layer's input first), the output's copy back.
 * Returns at once. */
SB_MLP_CUDA_API int sb_mlp_cuda_submit(sb_mlp_cuda_run *r, int slot, size_t n, sb_err *err);

/* Waits for the slot's batch and returns its output (n x dout[last] floats, pinned). */
SB_MLP_CUDA_API const float *sb_mlp_cuda_wait(sb_mlp_cuda_run *r, int slot, sb_err *err);

/* y[n x dout] = act(x[n x din] . w^T + b) at `precision`, with everything on the host side:
 * one layer through the same model, run and plans as the op, for tests. 0, or -1 + err. */
SB_MLP_CUDA_API int sb_mlp_cuda_linear(const float *x, size_t n, size_t din, const float *w,
                                       const float *b, size_t dout, int act, int precision,
                                       float *y, sb_err *err);

/* ---- the C side (mlp.c, always present) ------------------------------------------------ */

/* The CUDA devices this worker found when the first tensor.mlp stage asked (0: none usable,
 * or a build without CUDA), or -1 when none asked yet. For the worker's metrics. */
int sb_op_mlp_cuda_devices(void);

#ifdef __cplusplus
}
#endif

#endif
