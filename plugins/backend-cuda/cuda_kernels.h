/* backend-cuda kernels, callable from C. Each launcher enqueues one kernel on
 * `s` and returns the launch status (cudaGetLastError); it checks nothing
 * else: the callers in ops.c validate every argument first.
 *
 * Views are passed as a device pointer to element (0, 0) and a row stride
 * `ld*` in elements. Numerics follow the CPU backend's definitions: f32
 * arithmetic without contraction (the file is built with --fmad=false),
 * exp/cos/sin evaluated in double and rounded to f32 (as close as a device
 * gets to the host's correctly rounded expf and its cos/sin in double), bf16
 * rounding to nearest even exactly as tide_f32_to_bf16. */
#ifndef CUDA_KERNELS_H
#define CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cuda_qdecode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest rot_dim / 2 of the rope op: the frequencies travel as a kernel argument. */
#define CUDA_K_ROPE_MAX_HALF 256

/* Threads of the attention kernel's blocks (one block per query and head). */
#define CUDA_K_ATTN_THREADS 128

/* RoPE inverse frequencies, computed on the host in double and rounded to f32. */
struct cuda_k_rope_freqs {
    float inv[CUDA_K_ROPE_MAX_HALF];
};

/* out[i, :] = table[ids[i], :] as f32; table_dtype is an enum tide_dtype
 * (F32, F16 or BF16), the table packed [V, H]; ids are device memory. */
cudaError_t cuda_k_embed(cudaStream_t s, const void *table, int table_dtype, int64_t H,
                         const int32_t *ids, int64_t n, float *out, int64_t ldo);

/* RMSNorm over runs of `group` columns; w is f32 [group] on the device. y may
 * alias x element for element. */
cudaError_t cuda_k_rmsnorm(cudaStream_t s, const void *x, bool x_bf16, int64_t ldx, const float *w,
                           int64_t group, float eps, void *y, bool y_bf16, int64_t ldy,
                           int64_t rows, int64_t cols);

/* Rotate-half RoPE in place on the first 2*half dims of each head. */
cudaError_t cuda_k_rope(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int64_t heads,
                        int head_dim, int half, const struct cuda_k_rope_freqs *f, int64_t pos0);

/* Attention arguments; group = n_heads / n_kv_heads, total = pos0 + n. */
struct cuda_k_attn {
    const float *q, *k, *v;
    void *out;
    int64_t ldq, ldk, ldv, ldo;
    bool out_bf16;
    int64_t pos0, n, total;
    int n_heads, group, head_dim, block;
    float scale;
};

/* Block-causal GQA attention. `scores` is device scratch of grid * total
 * floats; grid (>= 1) blocks each take (query, head) pairs in turn. */
cudaError_t cuda_k_attention(cudaStream_t s, const struct cuda_k_attn *a, float *scores,
                             int64_t grid);

/* out = bf16(silu(g) * u) over [rows, cols]. */
cudaError_t cuda_k_swiglu(cudaStream_t s, const float *g, int64_t ldg, const float *u, int64_t ldu,
                          uint16_t *out, int64_t ldo, int64_t rows, int64_t cols);

/* acc += x over [rows, cols], f32. */
cudaError_t cuda_k_add(cudaStream_t s, float *acc, int64_t lda, const float *x, int64_t ldx,
                       int64_t rows, int64_t cols);

/* dst = src converted between f32 and bf16 (either direction, or the same). */
cudaError_t cuda_k_convert(cudaStream_t s, const void *src, bool src_bf16, int64_t lds, void *dst,
                           bool dst_bf16, int64_t ldd, int64_t rows, int64_t cols);

/* dst[dmap ? dmap[i] : i, :] = src[smap ? smap[i] : i, :] for i < n, rows of
 * `cols` elements of `elem` bytes (1, 2, 4 or 8); maps are device memory. The
 * destination rows must be distinct. */
cudaError_t cuda_k_copy_rows(cudaStream_t s, const void *src, int64_t lds, const int32_t *smap,
                             void *dst, int64_t ldd, const int32_t *dmap, int64_t n, int64_t cols,
                             size_t elem);

/* y[t, :] = sum_{j<k} w[t*k+j] * parts[t*k+j, :], in order j = 0..k-1; w is
 * device memory [rows * k]. */
cudaError_t cuda_k_combine(cudaStream_t s, const float *parts, int64_t ldp, const float *w, int k,
                           float *y, int64_t ldy, int64_t rows, int64_t cols);

/* Most rows (tokens) of one cuda_k_qgemv launch. */
#define CUDA_K_QGEMV_ROWS 8

/* y[t, r] = sum_c W[r][c] * x[t, c] for t < n <= CUDA_K_QGEMV_ROWS and every
 * row r of the quantized W (cuda_qdecode.h): the weights are decoded on the
 * fly, read once for all n rows; x bf16, f32 products and sums. One block per
 * row of W (in turn over the grid). */
cudaError_t cuda_k_qgemv(cudaStream_t s, const struct cuda_qmat *w, const uint16_t *x, int64_t ldx,
                         int64_t n, float *y, int64_t ldy);

/* out[r, c] = W[r][c] as f32 for the whole quantized matrix. */
cudaError_t cuda_k_qdequant(cudaStream_t s, const struct cuda_qmat *w, float *out, int64_t ldo);

#ifdef __cplusplus
}
#endif
#endif
