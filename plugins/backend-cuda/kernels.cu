/* backend-cuda kernels. Written for clarity over speed: flat grid-stride
 * loops for elementwise work, one block per reduction, and the same f32
 * expression order as the CPU backend (ops.c of backend-cpu-onednn) so that
 * the two agree to the bit wherever the order is fixed (add, convert, embed,
 * rope, moe_combine, the attention scores) and within rounding elsewhere.
 * Built with --fmad=false: a*b+c is never contracted into one FMA. */
#ifndef CUDA_K_EMULATED /* tests/gpu/emu compiles this file as host C++ */
#include <cuda_runtime.h>
#endif
#include <math.h>

#include "cuda_kernels.h"
#include "cuda_qdecode.h"
#include "tide/tensor.h"

/* kernel<<<blocks, threads, 0, stream>>>, spelled so the emulation can replace it. */
#ifndef CUDA_K_LAUNCH
#define CUDA_K_LAUNCH(kernel, blocks, threads, stream) kernel<<<(blocks), (threads), 0, (stream)>>>
#endif

namespace
{

constexpr int kThreads = 256;     /* flat elementwise kernels */
constexpr int kNormThreads = 128; /* rmsnorm: one block per (row, group) */
constexpr int kQThreads = 256;    /* qgemv: one block per row of W */
constexpr int64_t kMaxBlocks = 1 << 20;

/* Blocks of kThreads for `total` items (grid-stride loops cover the rest). */
unsigned cuda_blocks(int64_t total)
{
    int64_t b = (total + kThreads - 1) / kThreads;
    if (b < 1)
        b = 1;
    if (b > kMaxBlocks)
        b = kMaxBlocks;
    return (unsigned)b;
}

__device__ __forceinline__ int64_t cuda_tid()
{
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t cuda_nthreads()
{
    return (int64_t)gridDim.x * blockDim.x;
}

__device__ __forceinline__ float cuda_bf16_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

/* Round to nearest even, NaN kept quiet: tide_f32_to_bf16 bit for bit. */
__device__ __forceinline__ uint16_t cuda_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* IEEE half -> f32, exact (as tide_f16_to_f32). */
__device__ __forceinline__ float cuda_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) /* inf, NaN */
        return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e != 0)
        return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
    const float v = (float)m * (1.0f / 16777216.0f); /* subnormal or zero: m * 2^-24, exact */
    return sign ? -v : v;
}

__device__ __forceinline__ float cuda_ld(const void *row, bool bf16, int64_t j)
{
    return bf16 ? cuda_bf16_to_f32(((const uint16_t *)row)[j]) : ((const float *)row)[j];
}

__device__ __forceinline__ void cuda_st(void *row, bool bf16, int64_t j, float v)
{
    if (bf16)
        ((uint16_t *)row)[j] = cuda_f32_to_bf16(v);
    else
        ((float *)row)[j] = v;
}

/* exp in double rounded to f32: the host's expf is correctly rounded in all
 * but rare cases, the device's single-precision expf is not. */
__device__ __forceinline__ float cuda_expf(float x)
{
    return (float)exp((double)x);
}

/* Sum of v over the block (blockDim.x a power of two, red[blockDim.x]). */
__device__ double cuda_block_sum(double v, double *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

/* Maximum of v over the block; NaNs are ignored as in the CPU loop. */
__device__ float cuda_block_max(float v, float *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = red[threadIdx.x + s];
            red[threadIdx.x] = o > red[threadIdx.x] ? o : red[threadIdx.x];
        }
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

__global__ void cuda_embed_kernel(const void *table, int dtype, int64_t H, const int32_t *ids,
                                  int64_t n, float *out, int64_t ldo)
{
    for (int64_t i = cuda_tid(); i < n * H; i += cuda_nthreads()) {
        int64_t r = i / H, c = i % H;
        int64_t at = (int64_t)ids[r] * H + c;
        float v;
        if (dtype == TIDE_DTYPE_F32)
            v = ((const float *)table)[at];
        else if (dtype == TIDE_DTYPE_BF16)
            v = cuda_bf16_to_f32(((const uint16_t *)table)[at]);
        else
            v = cuda_f16_to_f32(((const uint16_t *)table)[at]);
        out[r * ldo + c] = v;
    }
}

/* One block per (row, group): the sum of squares in double as the CPU does,
 * then y = x * r * w in f32. Every element is read before any is written
 * (the reduction's barrier separates them), so y may alias x. */
__global__ void cuda_rmsnorm_kernel(const void *x, bool xb, int64_t ldx, const float *w,
                                    int64_t group, float eps, void *y, bool yb, int64_t ldy,
                                    int64_t rows, int64_t n_groups)
{
    __shared__ double red[kNormThreads];
    const size_t xes = xb ? 2 : 4, yes = yb ? 2 : 4;
    for (int64_t b = blockIdx.x; b < rows * n_groups; b += gridDim.x) {
        const int64_t r = b / n_groups, g0 = (b % n_groups) * group;
        const char *xr = (const char *)x + ((size_t)(r * ldx + g0)) * xes;
        char *yr = (char *)y + ((size_t)(r * ldy + g0)) * yes;
        double ss = 0.0;
        for (int64_t j = threadIdx.x; j < group; j += blockDim.x) {
            double v = cuda_ld(xr, xb, j);
            ss += v * v;
        }
        ss = cuda_block_sum(ss, red);
        const float rr = (float)(1.0 / sqrt(ss / (double)group + (double)eps));
        for (int64_t j = threadIdx.x; j < group; j += blockDim.x)
            cuda_st(yr, yb, j, cuda_ld(xr, xb, j) * rr * w[j]);
    }
}

__global__ void cuda_rope_kernel(float *x, int64_t ldx, int64_t rows, int64_t heads, int head_dim,
                                 int half, cuda_k_rope_freqs f, int64_t pos0)
{
    const int64_t per_row = heads * half;
    for (int64_t i = cuda_tid(); i < rows * per_row; i += cuda_nthreads()) {
        const int64_t r = i / per_row, h = (i % per_row) / half;
        const int j = (int)(i % half);
        float *p = x + r * ldx + h * head_dim;
        const float pos = (float)(pos0 + r);
        const float angle = pos * f.inv[j];
        const float c = (float)cos((double)angle), s = (float)sin((double)angle);
        const float x1 = p[j], x2 = p[j + half];
        p[j] = x1 * c - x2 * s;
        p[j + half] = x2 * c + x1 * s;
    }
}

/* One block per (query i, head h), in turn over the grid. The scores of the
 * visible keys go to this block's row of `scores`:
 *  1. s_j = (q . k_j) * scale, the dot product summed over d in order, as the
 *     CPU does (each thread owns whole keys), and their maximum;
 *  2. p_j = exp(s_j - max) and their sum (in double);
 *  3. o_d = sum_j (p_j / sum) * v_jd in order j = 0..L-1 (each thread owns
 *     whole output dims). */
__global__ void __launch_bounds__(CUDA_K_ATTN_THREADS)
    cuda_attention_kernel(cuda_k_attn a, float *scores)
{
    __shared__ double red[CUDA_K_ATTN_THREADS];
    __shared__ float redf[CUDA_K_ATTN_THREADS];
    float *sc = scores + (size_t)blockIdx.x * (size_t)a.total;
    const int hd = a.head_dim;
    for (int64_t b = blockIdx.x; b < a.n * a.n_heads; b += gridDim.x) {
        const int64_t i = b / a.n_heads;
        const int h = (int)(b % a.n_heads);
        const int64_t pos = a.pos0 + i;
        const int64_t vis_end = (pos / a.block + 1) * a.block;
        const int64_t L = vis_end < a.total ? vis_end : a.total;
        const float *q = a.q + i * a.ldq + (int64_t)h * hd;
        const int64_t kvo = (int64_t)(h / a.group) * hd;

        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
            const float *k = a.k + j * a.ldk + kvo;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += q[d] * k[d];
            const float s = dot * a.scale;
            sc[j] = s;
            mx = s > mx ? s : mx;
        }
        mx = cuda_block_max(mx, redf);

        double sum = 0.0;
        for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
            const float p = cuda_expf(sc[j] - mx);
            sc[j] = p;
            sum += p;
        }
        const float fsum = (float)cuda_block_sum(sum, red); /* its barriers publish sc */

        char *orow = (char *)a.out + (size_t)(i * a.ldo + (int64_t)h * hd) * (a.out_bf16 ? 2 : 4);
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float o = 0.0f;
            for (int64_t j = 0; j < L; j++) {
                const float pj = sc[j] / fsum;
                o += pj * a.v[j * a.ldv + kvo + d];
            }
            cuda_st(orow, a.out_bf16, d, o);
        }
        __syncthreads(); /* sc is reused by the next (query, head) */
    }
}

__global__ void cuda_swiglu_kernel(const float *g, int64_t ldg, const float *u, int64_t ldu,
                                   uint16_t *out, int64_t ldo, int64_t rows, int64_t cols)
{
    for (int64_t i = cuda_tid(); i < rows * cols; i += cuda_nthreads()) {
        const int64_t r = i / cols, c = i % cols;
        const float gv = g[r * ldg + c], uv = u[r * ldu + c];
        out[r * ldo + c] = cuda_f32_to_bf16(gv / (1.0f + cuda_expf(-gv)) * uv);
    }
}

__global__ void cuda_add_kernel(float *acc, int64_t lda, const float *x, int64_t ldx, int64_t rows,
                                int64_t cols)
{
    for (int64_t i = cuda_tid(); i < rows * cols; i += cuda_nthreads()) {
        const int64_t r = i / cols, c = i % cols;
        acc[r * lda + c] += x[r * ldx + c];
    }
}

__global__ void cuda_convert_kernel(const void *src, bool sb, int64_t lds, void *dst, bool db,
                                    int64_t ldd, int64_t rows, int64_t cols)
{
    const size_t ses = sb ? 2 : 4, des = db ? 2 : 4;
    for (int64_t i = cuda_tid(); i < rows * cols; i += cuda_nthreads()) {
        const int64_t r = i / cols, c = i % cols;
        const float v = cuda_ld((const char *)src + (size_t)(r * lds) * ses, sb, c);
        cuda_st((char *)dst + (size_t)(r * ldd) * des, db, c, v);
    }
}

template <typename T>
__global__ void cuda_copy_rows_kernel(const T *src, int64_t lds, const int32_t *smap, T *dst,
                                      int64_t ldd, const int32_t *dmap, int64_t n, int64_t cols)
{
    for (int64_t i = cuda_tid(); i < n * cols; i += cuda_nthreads()) {
        const int64_t r = i / cols, c = i % cols;
        const int64_t sr = smap ? smap[r] : r, dr = dmap ? dmap[r] : r;
        dst[dr * ldd + c] = src[sr * lds + c];
    }
}

__global__ void cuda_combine_kernel(const float *parts, int64_t ldp, const float *w, int k,
                                    float *y, int64_t ldy, int64_t rows, int64_t cols)
{
    for (int64_t i = cuda_tid(); i < rows * cols; i += cuda_nthreads()) {
        const int64_t t = i / cols, c = i % cols;
        float acc = 0.0f;
        for (int j = 0; j < k; j++)
            acc += w[t * k + j] * parts[(t * k + j) * ldp + c];
        y[t * ldy + c] = acc;
    }
}

/* Quantized GEMV: block b takes rows r = b, b + grid, ... of W. Thread i
 * sums columns i, i + blockDim, ... (consecutive threads read consecutive
 * values, so the reads of W and x coalesce) for each of the n <= 8 rows of
 * x; the block then adds the per-thread sums in a tree. Each weight is
 * decoded once per launch, whatever n. */
__global__ void __launch_bounds__(kQThreads)
    cuda_qgemv_kernel(cuda_qmat w, const uint16_t *x, int64_t ldx, int n, float *y, int64_t ldy)
{
    __shared__ float red[CUDA_K_QGEMV_ROWS][kQThreads];
    for (int64_t r = blockIdx.x; r < w.rows; r += gridDim.x) {
        float acc[CUDA_K_QGEMV_ROWS];
        for (int t = 0; t < CUDA_K_QGEMV_ROWS; t++)
            acc[t] = 0.0f;
        for (int64_t c = threadIdx.x; c < w.cols; c += blockDim.x) {
            const float wv = cuda_q_weight(&w, r, c);
            for (int t = 0; t < CUDA_K_QGEMV_ROWS; t++)
                if (t < n)
                    acc[t] += wv * cuda_bf16_to_f32(x[t * ldx + c]);
        }
        for (int t = 0; t < CUDA_K_QGEMV_ROWS; t++)
            if (t < n)
                red[t][threadIdx.x] = acc[t];
        __syncthreads();
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s)
                for (int t = 0; t < n; t++)
                    red[t][threadIdx.x] += red[t][threadIdx.x + s];
            __syncthreads();
        }
        if ((int)threadIdx.x < n)
            y[threadIdx.x * ldy + r] = red[threadIdx.x][0];
        __syncthreads(); /* red is reused by the next row */
    }
}

__global__ void cuda_qdequant_kernel(cuda_qmat w, float *out, int64_t ldo)
{
    for (int64_t i = cuda_tid(); i < w.rows * w.cols; i += cuda_nthreads()) {
        const int64_t r = i / w.cols, c = i % w.cols;
        out[r * ldo + c] = cuda_q_weight(&w, r, c);
    }
}

/* Launch a grid-stride kernel over `total` items (nothing when there are none). */
template <class K, class... A>
cudaError_t cuda_flat(K kernel, int64_t total, cudaStream_t s, A... args)
{
    if (total == 0)
        return cudaSuccess;
    CUDA_K_LAUNCH(kernel, cuda_blocks(total), kThreads, s)(args...);
    return cudaGetLastError();
}

template <typename T>
cudaError_t cuda_copy_rows_t(cudaStream_t s, const void *src, int64_t lds, const int32_t *smap,
                             void *dst, int64_t ldd, const int32_t *dmap, int64_t n, int64_t cols)
{
    return cuda_flat(cuda_copy_rows_kernel<T>, n * cols, s, (const T *)src, lds, smap, (T *)dst,
                     ldd, dmap, n, cols);
}

} // namespace

extern "C" {

cudaError_t cuda_k_embed(cudaStream_t s, const void *table, int table_dtype, int64_t H,
                         const int32_t *ids, int64_t n, float *out, int64_t ldo)
{
    return cuda_flat(cuda_embed_kernel, n * H, s, table, table_dtype, H, ids, n, out, ldo);
}

cudaError_t cuda_k_rmsnorm(cudaStream_t s, const void *x, bool x_bf16, int64_t ldx, const float *w,
                           int64_t group, float eps, void *y, bool y_bf16, int64_t ldy,
                           int64_t rows, int64_t cols)
{
    const int64_t blocks = rows * (cols / group);
    if (blocks == 0)
        return cudaSuccess;
    const unsigned grid = (unsigned)(blocks < kMaxBlocks ? blocks : kMaxBlocks);
    CUDA_K_LAUNCH(cuda_rmsnorm_kernel, grid, kNormThreads, s)
    (x, x_bf16, ldx, w, group, eps, y, y_bf16, ldy, rows, cols / group);
    return cudaGetLastError();
}

cudaError_t cuda_k_rope(cudaStream_t s, float *x, int64_t ldx, int64_t rows, int64_t heads,
                        int head_dim, int half, const struct cuda_k_rope_freqs *f, int64_t pos0)
{
    return cuda_flat(cuda_rope_kernel, rows * heads * half, s, x, ldx, rows, heads, head_dim, half,
                     *f, pos0);
}

cudaError_t cuda_k_attention(cudaStream_t s, const struct cuda_k_attn *a, float *scores,
                             int64_t grid)
{
    if (a->n * a->n_heads == 0)
        return cudaSuccess;
    CUDA_K_LAUNCH(cuda_attention_kernel, (unsigned)grid, CUDA_K_ATTN_THREADS, s)(*a, scores);
    return cudaGetLastError();
}

cudaError_t cuda_k_swiglu(cudaStream_t s, const float *g, int64_t ldg, const float *u, int64_t ldu,
                          uint16_t *out, int64_t ldo, int64_t rows, int64_t cols)
{
    return cuda_flat(cuda_swiglu_kernel, rows * cols, s, g, ldg, u, ldu, out, ldo, rows, cols);
}

cudaError_t cuda_k_add(cudaStream_t s, float *acc, int64_t lda, const float *x, int64_t ldx,
                       int64_t rows, int64_t cols)
{
    return cuda_flat(cuda_add_kernel, rows * cols, s, acc, lda, x, ldx, rows, cols);
}

cudaError_t cuda_k_convert(cudaStream_t s, const void *src, bool src_bf16, int64_t lds, void *dst,
                           bool dst_bf16, int64_t ldd, int64_t rows, int64_t cols)
{
    return cuda_flat(cuda_convert_kernel, rows * cols, s, src, src_bf16, lds, dst, dst_bf16, ldd,
                     rows, cols);
}

cudaError_t cuda_k_copy_rows(cudaStream_t s, const void *src, int64_t lds, const int32_t *smap,
                             void *dst, int64_t ldd, const int32_t *dmap, int64_t n, int64_t cols,
                             size_t elem)
{
    switch (elem) {
    case 1:
        return cuda_copy_rows_t<uint8_t>(s, src, lds, smap, dst, ldd, dmap, n, cols);
    case 2:
        return cuda_copy_rows_t<uint16_t>(s, src, lds, smap, dst, ldd, dmap, n, cols);
    case 4:
        return cuda_copy_rows_t<uint32_t>(s, src, lds, smap, dst, ldd, dmap, n, cols);
    case 8:
        return cuda_copy_rows_t<uint64_t>(s, src, lds, smap, dst, ldd, dmap, n, cols);
    default:
        return cudaErrorInvalidValue;
    }
}

cudaError_t cuda_k_combine(cudaStream_t s, const float *parts, int64_t ldp, const float *w, int k,
                           float *y, int64_t ldy, int64_t rows, int64_t cols)
{
    return cuda_flat(cuda_combine_kernel, rows * cols, s, parts, ldp, w, k, y, ldy, rows, cols);
}

cudaError_t cuda_k_qgemv(cudaStream_t s, const struct cuda_qmat *w, const uint16_t *x, int64_t ldx,
                         int64_t n, float *y, int64_t ldy)
{
    if (n < 0 || n > CUDA_K_QGEMV_ROWS)
        return cudaErrorInvalidValue;
    if (n == 0 || w->rows == 0)
        return cudaSuccess;
    const unsigned grid = (unsigned)(w->rows < kMaxBlocks ? w->rows : kMaxBlocks);
    CUDA_K_LAUNCH(cuda_qgemv_kernel, grid, kQThreads, s)(*w, x, ldx, (int)n, y, ldy);
    return cudaGetLastError();
}

cudaError_t cuda_k_qdequant(cudaStream_t s, const struct cuda_qmat *w, float *out, int64_t ldo)
{
    return cuda_flat(cuda_qdequant_kernel, w->rows * w->cols, s, *w, out, ldo);
}

} // extern "C"
