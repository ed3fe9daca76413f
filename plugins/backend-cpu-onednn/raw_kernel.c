/* A bf16 matmul kernel for the checkpoint's own [N][K] layout, for the
 * `inplace` expert layout at small token counts.
 *
 * oneDNN 2.6 reads raw [N][K] weights (tag ba) at about 40% of the speed of
 * its prepacked layout at M <= 8. Here each output y[t][n] is a dot product
 * of x row t with weight row n, both contiguous, so the weights stream from
 * DRAM row after row and the few x rows stay in L1. The inner step is
 * VDPBF16PS (bf16 pairs multiplied exactly, accumulated in f32), the same
 * instruction oneDNN's brgemm kernel uses, so the accumulation is f32 as the
 * contract requires; only the summation order differs.
 *
 * Tiles: up to 8 tokens by NR weight rows in registers (NR = 16 / tokens,
 * at least 2), over row blocks of DNNL_BK_RAW_RB rows; more than 8 tokens
 * re-read a block from L2, not DRAM. Threads split the row blocks. */
#include <immintrin.h>

#include "dnnl_bk.h"

/* Weight rows per block: 32 rows of K = 2048 bf16 are 128 KiB, well inside L2. */
#define DNNL_BK_RAW_RB 32

#define RK_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define RK_INLINE static inline __attribute__((always_inline)) RK_TARGET

bool dnnl_bk_raw_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}

/* y[t][col + r] = x[t][0..k) . w[r][0..k) for t < mt, r < nr. */
RK_INLINE void rk_tile(const int mt, const int nr, const uint16_t *const *x, const uint16_t *w,
                       int64_t k, float *const *y, int64_t col)
{
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++)
            acc[t][r] = _mm512_setzero_ps();
    int64_t k0 = 0;
    for (; k0 + 32 <= k; k0 += 32) {
        __m512bh wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            wv[r] = (__m512bh)_mm512_loadu_si512(w + r * k + k0);
            /* The next tile's rows: the hardware prefetchers stop at page
             * boundaries, and one row of K = 2048 is a whole page. */
            _mm_prefetch((const char *)(w + (nr + r) * k + k0), _MM_HINT_T1);
        }
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512(x[t] + k0);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++)
                acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv, wv[r]);
        }
    }
    if (k0 < k) { /* masked tail: the lanes past k load as zero */
        __mmask32 m = (__mmask32)((1ull << (k - k0)) - 1);
        __m512bh wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++)
            wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + r * k + k0);
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x[t] + k0);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++)
                acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv, wv[r]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++)
            y[t][col + r] = _mm512_reduce_add_ps(acc[t][r]);
}

typedef void (*rk_tile_fn)(const uint16_t *const *x, const uint16_t *w, int64_t k, float *const *y,
                           int64_t col);

/* Rows per tile for mt tokens: 16 accumulators. */
#define RK_NR(mt) ((mt) <= 2 ? 8 : (mt) <= 4 ? 4 : 2)

#define RK_DEFINE(mt)                                                                              \
    static RK_TARGET void rk_tile_##mt(const uint16_t *const *x, const uint16_t *w, int64_t k,     \
                                       float *const *y, int64_t col)                               \
    {                                                                                              \
        rk_tile(mt, RK_NR(mt), x, w, k, y, col);                                                   \
    }                                                                                              \
    static RK_TARGET void rk_tile_##mt##_1(const uint16_t *const *x, const uint16_t *w, int64_t k, \
                                           float *const *y, int64_t col)                           \
    {                                                                                              \
        rk_tile(mt, 1, x, w, k, y, col);                                                           \
    }

RK_DEFINE(1)
RK_DEFINE(2)
RK_DEFINE(3)
RK_DEFINE(4)
RK_DEFINE(5)
RK_DEFINE(6)
RK_DEFINE(7)
RK_DEFINE(8)

static const rk_tile_fn rk_tiles[9] = {NULL,      rk_tile_1, rk_tile_2, rk_tile_3, rk_tile_4,
                                       rk_tile_5, rk_tile_6, rk_tile_7, rk_tile_8};
static const rk_tile_fn rk_tiles_1[9] = {NULL,        rk_tile_1_1, rk_tile_2_1,
                                         rk_tile_3_1, rk_tile_4_1, rk_tile_5_1,
                                         rk_tile_6_1, rk_tile_7_1, rk_tile_8_1};

/* Rows [r0, r1) of one segment, for all m tokens. */
static void rk_block(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *s,
                     int64_t k, int64_t r0, int64_t r1)
{
    for (int64_t t0 = 0; t0 < m; t0 += 8) {
        const int mt = (int)(m - t0 < 8 ? m - t0 : 8), nr = RK_NR(mt);
        int64_t r = r0;
        for (; r + nr <= r1; r += nr)
            rk_tiles[mt](x + t0, s->w + r * k, k, s->y + t0, r);
        for (; r < r1; r++)
            rk_tiles_1[mt](x + t0, s->w + r * k, k, s->y + t0, r);
    }
}

void dnnl_bk_raw_gemm(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *segs,
                      int n_segs, int64_t k, int threads)
{
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].n + DNNL_BK_RAW_RB - 1) / DNNL_BK_RAW_RB;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t rb = b;
        int i = 0;
        while (rb >= (segs[i].n + DNNL_BK_RAW_RB - 1) / DNNL_BK_RAW_RB)
            rb -= (segs[i++].n + DNNL_BK_RAW_RB - 1) / DNNL_BK_RAW_RB;
        int64_t r0 = rb * DNNL_BK_RAW_RB, r1 = r0 + DNNL_BK_RAW_RB;
        rk_block(x, m, &segs[i], k, r0, r1 < segs[i].n ? r1 : segs[i].n);
    }
}
