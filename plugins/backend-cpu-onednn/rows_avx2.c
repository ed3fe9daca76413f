/* The own bf16 row kernel on AVX2 (table entries matmul/expert = avx2), for
 * CPUs where oneDNN has no bf16 matmul (oneDNN 2.6 wants AVX512 for bf16; an
 * AVX2-only x86-64 host has none). Its plain C twin is rows_c.c.
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
 * invariance), and this code and rows_c.c's (any CPU; fmaf is the
 * same correctly rounded fused multiply-add) give identical bits, which
 * tests/conformance/test_own_kernel.c checks against this order written out
 * plainly.
 *
 * AVX2 tiles are 4 rows of x by 3 weight rows (12 accumulators); the x rows
 * are widened to f32 once per call, the weight rows as they stream. Row
 * blocks of OK_RB weight rows (kept in L2 while every tile of tokens passes
 * over them) are split among the threads. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "dnnl_bk.h"

/* Weight rows per block handed to a thread. */
#define OK_RB 18

#define OK_TARGET __attribute__((target("avx2,fma")))

static inline float ok_bf16(uint16_t v)
{
    union {
        uint32_t u;
        float f;
    } c = {.u = (uint32_t)v << 16};
    return c.f;
}

/* Eight bf16 values as f32, in order: the 16 bytes broadcast to both
 * halves, then one byte shuffle (control ctl, ok_bf16_ctl) moves value i
 * into the high half of lane i (values 0-3 from the low half's copy, 4-7
 * from the high half's) and zeroes the low halves. A widening and a shift
 * would be two operations on the shuffle pipes, which on Zen 3 take cycles
 * from the fused multiply-adds. */
static const int8_t ok_bf16_ctl[32] __attribute__((aligned(32))) = {
    -128, -128, 0, 1, -128, -128, 2,  3,  -128, -128, 4,  5,  -128, -128, 6,  7,
    -128, -128, 8, 9, -128, -128, 10, 11, -128, -128, 12, 13, -128, -128, 14, 15};

static OK_TARGET inline __m256 ok_load8(const uint16_t *p, __m256i ctl)
{
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(v, ctl));
}

/* The control read from memory: a volatile read per step keeps the
 * compiler from holding it in a register for the whole loop, which a tile
 * of 12 accumulators, 3 weight vectors and an x vector cannot spare (it
 * then folds the x loads into every multiply-add: 4 x 3 tiles 1.46 FMAs a
 * cycle on Zen 3 that way, 1.66 this way). */
static OK_TARGET inline __m256i ok_ctl(void)
{
    return *(const volatile __m256i *)ok_bf16_ctl;
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

/* Software prefetch distance in weight rows: at least the next tile's rows,
 * at least DNNL_BK_RAW_PF_BYTES ahead (the hardware prefetchers stop at page
 * boundaries, and a row of k = 2048 is a page). */
static inline int64_t ok_pf_rows(int64_t k, int nr)
{
    const int64_t rows = (DNNL_BK_RAW_PF_BYTES + 2 * k - 1) / (2 * k);
    return rows > nr ? rows : nr;
}

/* Prefetch the weight element at w + i, which may lie past the matrix: the
 * address is formed as an integer (no out-of-bounds pointer arithmetic), and
 * a prefetch never faults. */
static OK_TARGET inline void ok_prefetch(const uint16_t *w, int64_t i)
{
    _mm_prefetch((const char *)((uintptr_t)w + (uintptr_t)i * sizeof *w), DNNL_BK_RAW_PF_HINT);
}

/* One step of 8 values at i: mt tokens by nr (<= 3) weight rows. */
static OK_TARGET inline __attribute__((always_inline)) void ok_step(int mt, int nr,
                                                                    const float *const *xf,
                                                                    const uint16_t *w, int64_t k,
                                                                    int64_t i, __m256 acc[][3])
{
    __m256 wv[3];
    const __m256i ctl = ok_ctl();
    for (int r = 0; r < nr; r++)
        wv[r] = ok_load8(w + r * k + i, ctl);
    for (int t = 0; t < mt; t++) {
        const __m256 xv = _mm256_loadu_ps(xf[t] + i);
        for (int r = 0; r < nr; r++)
            acc[t][r] = _mm256_fmadd_ps(xv, wv[r], acc[t][r]);
    }
}

/* mt (1..4) tokens by nr weight rows starting at w, outputs column col; the
 * x rows come widened to f32 (xf[t], k values each). The weights `pf` rows
 * ahead are prefetched (pf 0: none), one line per row every 4 steps: the
 * steps are unrolled by 4 so that no step branches (on Zen 3 a branch per
 * step for the prefetch cost a tile of 4 tokens a tenth of its speed). */
#define OK_TILE(mt, nr)                                                                            \
    static OK_TARGET void ok_tile_##mt##_##nr(const float *const *xf, const uint16_t *const *x,    \
                                              const uint16_t *w, int64_t k, float *const *y,       \
                                              int64_t col, int64_t pf)                             \
    {                                                                                              \
        __m256 acc[mt][3];                                                                         \
        for (int t = 0; t < (mt); t++)                                                             \
            for (int r = 0; r < (nr); r++)                                                         \
                acc[t][r] = _mm256_setzero_ps();                                                   \
        const int64_t k8 = k & ~(int64_t)7;                                                        \
        int64_t i = 0;                                                                             \
        for (; i + 32 <= k8; i += 32) {                                                            \
            if (pf) /* one prefetch per 64-byte line */                                            \
                for (int r = 0; r < (nr); r++)                                                     \
                    ok_prefetch(w, (pf + r) * k + i);                                              \
            ok_step(mt, nr, xf, w, k, i, acc);                                                     \
            ok_step(mt, nr, xf, w, k, i + 8, acc);                                                 \
            ok_step(mt, nr, xf, w, k, i + 16, acc);                                                \
            ok_step(mt, nr, xf, w, k, i + 24, acc);                                                \
        }                                                                                          \
        for (; i < k8; i += 8)                                                                     \
            ok_step(mt, nr, xf, w, k, i, acc);                                                     \
        for (int t = 0; t < (mt); t++)                                                             \
            for (int r = 0; r < (nr); r++)                                                         \
                y[t][col + r] = ok_tail(ok_hsum(acc[t][r]), x[t], w + r * k, k8, k);               \
    }
OK_TILE(1, 1)
OK_TILE(1, 3)
OK_TILE(2, 1)
OK_TILE(2, 3)
OK_TILE(3, 1)
OK_TILE(3, 3)
OK_TILE(4, 1)
OK_TILE(4, 3)

typedef void (*ok_tile_fn)(const float *const *xf, const uint16_t *const *x, const uint16_t *w,
                           int64_t k, float *const *y, int64_t col, int64_t pf);
/* [tokens][1 or OK_NR rows] */
#define OK_NR 3
static const ok_tile_fn ok_tiles[5][2] = {
    {NULL, NULL},
    {ok_tile_1_1, ok_tile_1_3},
    {ok_tile_2_1, ok_tile_2_3},
    {ok_tile_3_1, ok_tile_3_3},
    {ok_tile_4_1, ok_tile_4_3},
};

/* Rows [r0, r1) of one segment, for all m tokens (xf: the x rows widened). */
static void ok_block(const float *const *xf, const uint16_t *const *x, int64_t m,
                     const struct dnnl_bk_raw_seg *s, int64_t k, int64_t r0, int64_t r1)
{
    /* Only the first tile of tokens prefetches: the later ones find the
     * block's rows in L2, and on Zen 3 a prefetch per line costs a tile of
     * 4 tokens about a tenth of its speed. */
    /* Tiles of tokens as even as 4 allows (17: 4, 4, 3, 3, 3, not 4, 4, 4,
     * 4, 1): a tile of 1 token holds too few chains of multiply-adds to
     * cover their latency. */
    const int64_t tiles = (m + 3) / 4;
    for (int64_t j = 0, t0 = 0; j < tiles; j++) {
        const int mt = (int)(m / tiles + (j < m % tiles));
        int64_t r = r0;
        for (; r + OK_NR <= r1; r += OK_NR)
            ok_tiles[mt][1](xf + t0, x + t0, s->w + r * k, k, s->y + t0, r,
                            t0 ? 0 : ok_pf_rows(k, OK_NR));
        for (; r < r1; r++)
            ok_tiles[mt][0](xf + t0, x + t0, s->w + r * k, k, s->y + t0, r,
                            t0 ? 0 : ok_pf_rows(k, 1));
        t0 += mt;
    }
}

/* x widened to f32 once per call: xf rows of k floats in one buffer. */
static OK_TARGET void ok_widen(const uint16_t *x, float *xf, int64_t k)
{
    const __m256i ctl = _mm256_load_si256((const __m256i *)ok_bf16_ctl);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(xf + i, ok_load8(x + i, ctl));
    for (; i < k; i++)
        xf[i] = ok_bf16(x[i]);
}

const float **dnnl_bk_widen_rows(const uint16_t *const *x, int64_t m, int64_t k, float **buf)
{
    *buf = malloc(sizeof **buf * (size_t)(m * k));
    const float **xf = malloc(sizeof *xf * (size_t)m);
    if (!*buf || !xf) {
        free(*buf);
        free(xf);
        *buf = NULL;
        return NULL;
    }
    for (int64_t t = 0; t < m; t++) {
        ok_widen(x[t], *buf + t * k, k);
        xf[t] = *buf + t * k;
    }
    return xf;
}

struct ok_job {
    const float *const *xf;
    const uint16_t *const *x;
    int64_t m;
    const struct dnnl_bk_raw_seg *segs;
    int64_t k;
};

/* Blocks [b0, b1) of OK_RB rows, numbered through the segments in order. */
static void ok_job_blocks(void *c, int64_t b0, int64_t b1)
{
    const struct ok_job *j = c;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0, r1;
        const struct dnnl_bk_raw_seg *s = dnnl_bk_seg_block(j->segs, b, OK_RB, &r0, &r1);
        ok_block(j->xf, j->x, j->m, s, j->k, r0, r1);
    }
}

void dnnl_bk_rows_avx2(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *segs,
                       int n_segs, int64_t k, int threads, void *work)
{
    /* Widened rows: a row's bits are those of the bf16 row, so this changes
     * no result, only how often the conversion runs. */
    float *buf = NULL;
    const float **xf = NULL;
    if (m <= 0)
        return;
    if (!(xf = dnnl_bk_widen_rows(x, m, k, &buf))) {
        dnnl_bk_rows_c(x, m, segs, n_segs, k, threads, work); /* the same bits */
        return;
    }
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].n + OK_RB - 1) / OK_RB;
    const struct ok_job j = {xf, x, m, segs, k};
    if (threads <= 1)
        ok_job_blocks((void *)&j, 0, blocks);
    else
        dnnl_bk_par_for(threads, blocks, ok_job_blocks, (void *)&j);
    free(buf);
    free(xf);
}
