/* The backend's own bf16 matmul, for CPUs where oneDNN has no bf16 matmul
 * (oneDNN 2.6 wants AVX512 for bf16; an AVX2-only x86-64 host has none).
 *
 * y[t][j] = sum_k bf16(x[t][k]) * bf16(w[j][k]), accumulated in f32, on the
 * checkpoint's own [N][K] rows (the `inplace` layout, no packing). bf16 to
 * f32 is exact (a 16-bit shift) and so is the product of two bf16 values in
 * f32, so the arithmetic is what the contract asks: bf16 inputs, f32
 * accumulation. Every output has one fixed summation order, whatever the
 * number of rows, the tiling or the threads:
 *   - lane l (0..7) sums x[k] w[k] for k = l, l + 8, l + 16, ... below
 *     K8 = 8 floor(K / 8), one fused multiply-add per k, k ascending;
 *   - the lanes are added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
 *   - the tail k = K8 .. K-1 is added by fused multiply-adds, k ascending.
 * So a row's result does not depend on how many rows share the call (batch
 * invariance), and the AVX2 code and the scalar code (any CPU; fmaf is the
 * same correctly rounded fused multiply-add) give identical bits, which
 * tests/conformance/test_own_kernel.c checks against this order written out
 * plainly.
 *
 * AVX2 tiles are 4 rows of x by 2 weight rows (8 accumulators); the weights
 * stream once per 4 tokens and the x rows stay in L1. Row blocks of
 * OK_RB weight rows are split among the threads. */
#include <immintrin.h>
#include <math.h>

#include "dnnl_bk.h"

/* Weight rows per block handed to a thread. */
#define OK_RB 16

#define OK_TARGET __attribute__((target("avx2,fma")))

bool dnnl_bk_own_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static inline float ok_bf16(uint16_t v)
{
    union {
        uint32_t u;
        float f;
    } c = {.u = (uint32_t)v << 16};
    return c.f;
}

/* The lane sum of the stated order. */
static inline float ok_lanes(const float l[8])
{
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    return (a0 + a2) + (a1 + a3);
}

/* One output, scalar, in the stated order. */
static float ok_dot_scalar(const uint16_t *x, const uint16_t *w, int64_t k)
{
    float l[8] = {0};
    const int64_t k8 = k & ~(int64_t)7;
    for (int64_t i = 0; i < k8; i += 8)
        for (int j = 0; j < 8; j++)
            l[j] = fmaf(ok_bf16(x[i + j]), ok_bf16(w[i + j]), l[j]);
    float r = ok_lanes(l);
    for (int64_t i = k8; i < k; i++)
        r = fmaf(ok_bf16(x[i]), ok_bf16(w[i]), r);
    return r;
}

static OK_TARGET inline __m256 ok_load8(const uint16_t *p)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static OK_TARGET inline float ok_hsum(__m256 v)
{
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    /* a = (l0+l4, l1+l5, l2+l6, l3+l7); b = (a0+a2, a1+a3, ...) */
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    const __m128 c = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(c);
}

static OK_TARGET inline float ok_tail(float r, const uint16_t *x, const uint16_t *w, int64_t k8,
                                      int64_t k)
{
    for (int64_t i = k8; i < k; i++)
        r = fmaf(ok_bf16(x[i]), ok_bf16(w[i]), r);
    return r;
}

/* mt (1..4) tokens by nr (1..2) weight rows starting at w, outputs column col. */
static OK_TARGET void ok_tile(int mt, int nr, const uint16_t *const *x, const uint16_t *w,
                              int64_t k, float *const *y, int64_t col)
{
    __m256 acc[4][2];
    for (int t = 0; t < 4; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    const int64_t k8 = k & ~(int64_t)7;
    for (int64_t i = 0; i < k8; i += 8) {
        const __m256 w0 = ok_load8(w + i);
        const __m256 w1 = nr > 1 ? ok_load8(w + k + i) : w0;
        for (int t = 0; t < mt; t++) {
            const __m256 xv = ok_load8(x[t] + i);
            acc[t][0] = _mm256_fmadd_ps(xv, w0, acc[t][0]);
            if (nr > 1)
                acc[t][1] = _mm256_fmadd_ps(xv, w1, acc[t][1]);
        }
    }
    for (int t = 0; t < mt; t++)
        for (int r = 0; r < nr; r++)
            y[t][col + r] = ok_tail(ok_hsum(acc[t][r]), x[t], w + r * k, k8, k);
}

#define OK_DEFINE(mt, nr)                                                                          \
    static OK_TARGET void ok_tile_##mt##_##nr(const uint16_t *const *x, const uint16_t *w,         \
                                              int64_t k, float *const *y, int64_t col)             \
    {                                                                                              \
        ok_tile(mt, nr, x, w, k, y, col);                                                          \
    }
OK_DEFINE(1, 1)
OK_DEFINE(1, 2)
OK_DEFINE(2, 1)
OK_DEFINE(2, 2)
OK_DEFINE(3, 1)
OK_DEFINE(3, 2)
OK_DEFINE(4, 1)
OK_DEFINE(4, 2)

typedef void (*ok_tile_fn)(const uint16_t *const *x, const uint16_t *w, int64_t k, float *const *y,
                           int64_t col);
static const ok_tile_fn ok_tiles[5][3] = {
    {NULL, NULL, NULL},
    {NULL, ok_tile_1_1, ok_tile_1_2},
    {NULL, ok_tile_2_1, ok_tile_2_2},
    {NULL, ok_tile_3_1, ok_tile_3_2},
    {NULL, ok_tile_4_1, ok_tile_4_2},
};

/* Rows [r0, r1) of one segment, for all m tokens. */
static void ok_block(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *s,
                     int64_t k, int64_t r0, int64_t r1, bool avx2)
{
    if (!avx2) {
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = 0; t < m; t++)
                s->y[t][r] = ok_dot_scalar(x[t], s->w + r * k, k);
        return;
    }
    for (int64_t t0 = 0; t0 < m; t0 += 4) {
        const int mt = (int)(m - t0 < 4 ? m - t0 : 4);
        int64_t r = r0;
        for (; r + 2 <= r1; r += 2)
            ok_tiles[mt][2](x + t0, s->w + r * k, k, s->y + t0, r);
        for (; r < r1; r++)
            ok_tiles[mt][1](x + t0, s->w + r * k, k, s->y + t0, r);
    }
}

void dnnl_bk_own_gemm(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *segs,
                      int n_segs, int64_t k, int threads, bool avx2)
{
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].n + OK_RB - 1) / OK_RB;
    if (threads <= 1) {
        for (int i = 0; i < n_segs; i++)
            for (int64_t r0 = 0; r0 < segs[i].n; r0 += OK_RB)
                ok_block(x, m, &segs[i], k, r0, r0 + OK_RB < segs[i].n ? r0 + OK_RB : segs[i].n,
                         avx2);
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t rb = b;
        int i = 0;
        while (rb >= (segs[i].n + OK_RB - 1) / OK_RB)
            rb -= (segs[i++].n + OK_RB - 1) / OK_RB;
        const int64_t r0 = rb * OK_RB, r1 = r0 + OK_RB;
        ok_block(x, m, &segs[i], k, r0, r1 < segs[i].n ? r1 : segs[i].n, avx2);
    }
}
