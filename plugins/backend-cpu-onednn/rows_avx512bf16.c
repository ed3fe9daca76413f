/* A bf16 matmul kernel for the checkpoint's own [N][K] layout, for the
 * `inplace` expert layout at every token count.
 *
 * oneDNN 2.6 reads raw [N][K] weights (tag ba) at about half the speed of its
 * prepacked layout at M <= 8. Here each output y[t][n] is a dot product of x
 * row t with weight row n, both contiguous, so the weights stream from DRAM
 * and the few x rows stay in L1. The inner step is VDPBF16PS (bf16 pairs
 * multiplied exactly, accumulated in f32), the instruction oneDNN's brgemm
 * kernel uses, so the accumulation is f32 as the contract requires; only the
 * summation order differs.
 *
 * Two tilings (rk_block picks): for 1-4 tokens and long rows, one weight row
 * after another (rk_rows, a linear stream); otherwise up to 8 tokens by NR
 * rows side by side (rk_tile). Both sum an output in one order that depends
 * on k alone: one f32 accumulator over the chunks of 32 in increasing order
 * (the tail masked), then the lanes as rk_hsum16 adds them. So a token's
 * result does not depend on the token count or on its companions (batch
 * invariance, tests/conformance/test_raw_kernel.c). Row blocks of DNNL_BK_RAW_RB rows are split
 * among the threads; more than 8 tokens re-read a block from L2, not DRAM.
 * A block is walked together with the block half the matrix list further
 * on (gate beside up; the first half of down beside the second), so each
 * core reads two DRAM streams at once (rk_tile2, rk_rows2): one stream is
 * limited by the misses a core keeps in flight. The tile shapes change
 * with it, the order of each output's sum does not.
 * The weights are prefetched by software a few KiB ahead: rows are only pages
 * long, and the hardware stream prefetchers stop at page boundaries.
 *
 * Alignment: weight rows that do not start on 64 bytes (tensors in a
 * safetensors file usually do not) cost up to ~30% where a core is the limit
 * (1 thread, 4 tokens, measured); with 2 threads on 2 cores the DRAM is the
 * limit and the difference is within noise. */
#include <immintrin.h>

#include "dnnl_bk.h"

/* Weight rows per block: 32 rows of K = 2048 bf16 are 128 KiB, well inside L2. */
#define DNNL_BK_RAW_RB 32

#define RK_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define RK_INLINE static inline __attribute__((always_inline)) RK_TARGET

/* Lane i of the result is the sum of the 16 lanes of v[i]: pairs of vectors
 * are interleaved and added, halving their count at each step, so 16 sums cost
 * 45 instructions instead of 16 separate reductions. */
RK_INLINE __m512 rk_hsum16(const __m512 *v)
{
    __m512 u[8], w[4], x[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* lane: [a0+a2, b0+b2, a1+a3, b1+b3] */
        u[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) { /* lane: partial sums of v[4i..4i+3] */
        __m512d a = _mm512_castps_pd(u[2 * i]), b = _mm512_castps_pd(u[2 * i + 1]);
        w[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 2; i++) /* lanes 0,1 of w[2i] summed, lanes 2,3; then w[2i+1] */
        x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x88),
                         _mm512_shuffle_f32x4(x[0], x[1], 0xdd));
}

/* y[t][col + r] = the lane sum of v[t * nr + r], for t < mt, r < nr <= 16 / mt. */
RK_INLINE void rk_store(__m512 *v, const int mt, const int nr, float *const *y, int64_t col)
{
    float sum[16];
#pragma GCC unroll 16
    for (int i = mt * nr; i < 16; i++)
        v[i] = _mm512_setzero_ps();
    _mm512_storeu_ps(sum, rk_hsum16(v));
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 16
        for (int r = 0; r < nr; r++)
            y[t][col + r] = sum[t * nr + r];
}

/* acc[t][r] += x[t][k0..k0+32) . w[r][k0..k0+32) with the lanes outside `m`
 * read as zero; prefetch the same columns of the rows `pf` ahead (pf = 0: none). */
RK_INLINE void rk_tile_step(const int mt, const int nr, __m512 acc[8][8], const uint16_t *const *x,
                            const uint16_t *w, int64_t k, int64_t k0, __mmask32 m, int64_t pf)
{
    __m512bh wv[8];
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) {
        wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, w + r * k + k0);
        if (pf)
            _mm_prefetch((const char *)(w + (pf + r) * k + k0), DNNL_BK_RAW_PF_HINT);
    }
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++) {
        __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x[t] + k0);
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++)
            acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv, wv[r]);
    }
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
    /* Prefetch distance in rows: at least the next tile, at least PF_BYTES.
     * The hardware prefetchers stop at page boundaries, and one row of
     * K = 2048 is a whole page. */
    const int64_t pf_rows = (DNNL_BK_RAW_PF_BYTES + 2 * k - 1) / (2 * k);
    const int64_t pf = pf_rows > nr ? pf_rows : nr;
    int64_t k0 = 0;
    for (; k0 + 32 <= k; k0 += 32)
        rk_tile_step(mt, nr, acc, x, w, k, k0, (__mmask32)0xffffffffu, pf);
    if (k0 < k) /* masked tail */
        rk_tile_step(mt, nr, acc, x, w, k, k0, (__mmask32)((1ull << (k - k0)) - 1), 0);
    __m512 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < mt * nr; i++)
        v[i] = acc[i / nr][i % nr];
    rk_store(v, mt, nr, y, col);
}

/* One weight row after another, a linear stream through W (the order oneDNN's
 * packed layout gives): for 1-4 tokens and long rows this keeps DRAM pages
 * open longer than nr rows read side by side. mt <= 4, nr * mt <= 16.
 *
 * Each output is summed exactly as rk_tile sums it (one accumulator, chunks
 * in order, the masked tail last, then rk_hsum16), so a token's result does
 * not depend on how many tokens share its group of 8 (batch invariance). An
 * earlier version kept 4 partial sums per token here to hide the VDPBF16PS
 * latency; at 1-4 tokens the weight stream from DRAM is the limit, not that
 * latency, and the second order made a row's bits depend on the row count. */
RK_INLINE void rk_rows(const int mt, const int nr, const uint16_t *const *x, const uint16_t *w,
                       int64_t k, float *const *y, int64_t col)
{
    const int64_t ahead = DNNL_BK_RAW_PF_BYTES / 2; /* elements */
    __m512 v[16];
#pragma GCC unroll 16
    for (int r = 0; r < nr; r++) {
        const uint16_t *wr = w + r * k;
        __m512 acc[4];
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++)
            acc[t] = _mm512_setzero_ps();
        int64_t k0 = 0;
        for (; k0 + 32 <= k; k0 += 32) {
            __m512bh wv = (__m512bh)_mm512_loadu_si512(wr + k0);
            _mm_prefetch((const char *)(wr + k0 + ahead), DNNL_BK_RAW_PF_HINT);
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++)
                acc[t] = _mm512_dpbf16_ps(acc[t], (__m512bh)_mm512_loadu_si512(x[t] + k0), wv);
        }
        if (k0 < k) { /* masked tail */
            const __mmask32 m = (__mmask32)((1ull << (k - k0)) - 1);
            __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, wr + k0);
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++)
                acc[t] =
                    _mm512_dpbf16_ps(acc[t], (__m512bh)_mm512_maskz_loadu_epi16(m, x[t] + k0), wv);
        }
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++)
            v[t * nr + r] = acc[t];
    }
    rk_store(v, mt, nr, y, col);
}

/* Two row groups in one k loop: rows wa[0..nr) into columns ca.. of ya and
 * rows wb[0..nr) into cb.. of yb, each output summed exactly as rk_tile sums
 * it (one accumulator, chunks in order, the masked tail last, rk_hsum16).
 * The two groups lie far apart, so a core reads two streams from DRAM at
 * once: one stream is limited by the misses a core keeps in flight (two
 * nearly doubled one thread's bandwidth: docs/cpu-performance.md).
 * mt * nr <= 8. */
RK_INLINE void rk_tile2(const int mt, const int nr, const uint16_t *const *x, const uint16_t *wa,
                        const uint16_t *wb, int64_t k, float *const *ya, int64_t ca,
                        float *const *yb, int64_t cb)
{
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < 2 * nr; r++)
            acc[t][r] = _mm512_setzero_ps();
    const int64_t pf_rows = (DNNL_BK_RAW_PF_BYTES + 2 * k - 1) / (2 * k);
    const int64_t pf = pf_rows > nr ? pf_rows : nr;
    int64_t k0 = 0;
    for (;; k0 += 32) {
        const bool tail = k0 + 32 > k;
        if (tail && k0 >= k)
            break;
        const __mmask32 m = tail ? (__mmask32)((1ull << (k - k0)) - 1) : (__mmask32)0xffffffffu;
        __m512bh wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, wa + r * k + k0);
            wv[nr + r] = (__m512bh)_mm512_maskz_loadu_epi16(m, wb + r * k + k0);
            if (!tail) {
                _mm_prefetch((const char *)(wa + (pf + r) * k + k0), DNNL_BK_RAW_PF_HINT);
                _mm_prefetch((const char *)(wb + (pf + r) * k + k0), DNNL_BK_RAW_PF_HINT);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x[t] + k0);
#pragma GCC unroll 8
            for (int r = 0; r < 2 * nr; r++)
                acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv, wv[r]);
        }
    }
    __m512 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < mt * nr; i++)
        v[i] = acc[i / nr][i % nr];
    rk_store(v, mt, nr, ya, ca);
#pragma GCC unroll 16
    for (int i = 0; i < mt * nr; i++)
        v[i] = acc[i / nr][nr + i % nr];
    rk_store(v, mt, nr, yb, cb);
}

/* rk_rows on two row groups at once (rows wa[0..nr) and wb[0..nr)), for
 * the same reason as rk_tile2: two DRAM streams per core. mt <= 4,
 * nr * mt <= 16; used up to RK_ROWS2_MAX_MT tokens. */
RK_INLINE void rk_rows2(const int mt, const int nr, const uint16_t *const *x, const uint16_t *wa,
                        const uint16_t *wb, int64_t k, float *const *ya, int64_t ca,
                        float *const *yb, int64_t cb)
{
    const int64_t ahead = DNNL_BK_RAW_PF_BYTES / 2; /* elements */
    __m512 va[16], vb[16];
#pragma GCC unroll 16
    for (int r = 0; r < nr; r++) {
        const uint16_t *ra = wa + r * k, *rb = wb + r * k;
        __m512 a[4], b[4];
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++)
            a[t] = b[t] = _mm512_setzero_ps();
        int64_t k0 = 0;
        for (; k0 + 32 <= k; k0 += 32) {
            __m512bh wva = (__m512bh)_mm512_loadu_si512(ra + k0);
            __m512bh wvb = (__m512bh)_mm512_loadu_si512(rb + k0);
            _mm_prefetch((const char *)(ra + k0 + ahead), DNNL_BK_RAW_PF_HINT);
            _mm_prefetch((const char *)(rb + k0 + ahead), DNNL_BK_RAW_PF_HINT);
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) {
                __m512bh xv = (__m512bh)_mm512_loadu_si512(x[t] + k0);
                a[t] = _mm512_dpbf16_ps(a[t], xv, wva);
                b[t] = _mm512_dpbf16_ps(b[t], xv, wvb);
            }
        }
        if (k0 < k) { /* masked tail */
            const __mmask32 m = (__mmask32)((1ull << (k - k0)) - 1);
            __m512bh wva = (__m512bh)_mm512_maskz_loadu_epi16(m, ra + k0);
            __m512bh wvb = (__m512bh)_mm512_maskz_loadu_epi16(m, rb + k0);
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) {
                __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x[t] + k0);
                a[t] = _mm512_dpbf16_ps(a[t], xv, wva);
                b[t] = _mm512_dpbf16_ps(b[t], xv, wvb);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            va[t * nr + r] = a[t];
            vb[t * nr + r] = b[t];
        }
    }
    rk_store(va, mt, nr, ya, ca);
    rk_store(vb, mt, nr, yb, cb);
}

typedef void (*rk_tile_fn)(const uint16_t *const *x, const uint16_t *w, int64_t k, float *const *y,
                           int64_t col);

typedef void (*rk_pair_fn)(const uint16_t *const *x, const uint16_t *wa, const uint16_t *wb,
                           int64_t k, float *const *ya, int64_t ca, float *const *yb, int64_t cb);

/* Rows per group of a pair for mt tokens: 16 accumulators in all. */
#define RK_NR2(mt) ((mt) <= 2 ? 4 : (mt) <= 4 ? 2 : 1)

#define RK_DEFINE_PAIR(mt)                                                                         \
    static RK_TARGET void rk_tile2_##mt(const uint16_t *const *x, const uint16_t *wa,              \
                                        const uint16_t *wb, int64_t k, float *const *ya,           \
                                        int64_t ca, float *const *yb, int64_t cb)                  \
    {                                                                                              \
        rk_tile2(mt, RK_NR2(mt), x, wa, wb, k, ya, ca, yb, cb);                                    \
    }
#define RK_DEFINE_ROWS_PAIR(mt)                                                                    \
    static RK_TARGET void rk_rows2_##mt(const uint16_t *const *x, const uint16_t *wa,              \
                                        const uint16_t *wb, int64_t k, float *const *ya,           \
                                        int64_t ca, float *const *yb, int64_t cb)                  \
    {                                                                                              \
        rk_rows2(mt, 16 / (mt), x, wa, wb, k, ya, ca, yb, cb);                                     \
    }

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
    }                                                                                              \
    RK_DEFINE_PAIR(mt)

/* Row-after-row tiles for 1-4 tokens: 16 / tokens rows, and 1 row for the rest. */
#define RK_DEFINE_ROWS(mt)                                                                         \
    static RK_TARGET void rk_rows_##mt(const uint16_t *const *x, const uint16_t *w, int64_t k,     \
                                       float *const *y, int64_t col)                               \
    {                                                                                              \
        rk_rows(mt, 16 / (mt), x, w, k, y, col);                                                   \
    }                                                                                              \
    static RK_TARGET void rk_rows_##mt##_1(const uint16_t *const *x, const uint16_t *w, int64_t k, \
                                           float *const *y, int64_t col)                           \
    {                                                                                              \
        rk_rows(mt, 1, x, w, k, y, col);                                                           \
    }                                                                                              \
    RK_DEFINE_ROWS_PAIR(mt)

RK_DEFINE_ROWS(1)
RK_DEFINE_ROWS(2)
RK_DEFINE_ROWS(3)
RK_DEFINE_ROWS(4)
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
static const rk_tile_fn rk_rows_n[5] = {NULL, rk_rows_1, rk_rows_2, rk_rows_3, rk_rows_4};
static const rk_tile_fn rk_rows_n_1[5] = {NULL, rk_rows_1_1, rk_rows_2_1, rk_rows_3_1, rk_rows_4_1};
static const rk_tile_fn rk_tiles_1[9] = {NULL,        rk_tile_1_1, rk_tile_2_1,
                                         rk_tile_3_1, rk_tile_4_1, rk_tile_5_1,
                                         rk_tile_6_1, rk_tile_7_1, rk_tile_8_1};

static const rk_pair_fn rk_tiles2[9] = {NULL,       rk_tile2_1, rk_tile2_2, rk_tile2_3, rk_tile2_4,
                                        rk_tile2_5, rk_tile2_6, rk_tile2_7, rk_tile2_8};
static const rk_pair_fn rk_rows2_n[5] = {NULL, rk_rows2_1, rk_rows2_2, rk_rows2_3, rk_rows2_4};

/* Row after row pays off for 1-4 tokens on rows of at least this many
 * elements (gate/up of H = 2048: +5-10% measured; down with K = 512 loses;
 * 5-8 tokens run out of registers and lose half their speed). */
#define RK_ROWS_MIN_K 1024

/* Rows [r0, r1) of one segment for tokens t0 .. t0 + mt - 1 (mt <= 8). */
static void rk_span(const uint16_t *const *x, int mt, const struct dnnl_bk_raw_seg *s, int64_t k,
                    int64_t r, int64_t r1, int64_t t0)
{
    const bool rows = mt <= 4 && k >= RK_ROWS_MIN_K;
    const int nr = rows ? 16 / mt : RK_NR(mt);
    const rk_tile_fn full = rows ? rk_rows_n[mt] : rk_tiles[mt];
    const rk_tile_fn one = rows ? rk_rows_n_1[mt] : rk_tiles_1[mt];
    for (; r + nr <= r1; r += nr)
        full(x + t0, s->w + r * k, k, s->y + t0, r);
    for (; r < r1; r++)
        one(x + t0, s->w + r * k, k, s->y + t0, r);
}

/* Tokens up to which rows of K >= RK_ROWS_MIN_K run in pairs (rk_rows2):
 * two streams win at 1-2 tokens and lose at 3-4; the tiles of shorter rows
 * (down) pair at every count (docs/cpu-performance.md). */
#ifndef RK_ROWS2_MAX_MT
#define RK_ROWS2_MAX_MT 2
#endif

/* One block: rows [r0, r1) of segment s; with b non-NULL, rows [q0, q1) of
 * segment b at the same time (rk_tile2, rk_rows2), for all m tokens. */
static void rk_block(const uint16_t *const *x, int64_t m, int64_t k,
                     const struct dnnl_bk_raw_seg *s, int64_t r0, int64_t r1,
                     const struct dnnl_bk_raw_seg *b, int64_t q0, int64_t q1)
{
    for (int64_t t0 = 0; t0 < m; t0 += 8) {
        const int mt = (int)(m - t0 < 8 ? m - t0 : 8);
        int64_t r = r0, q = q0;
        const bool rows = mt <= 4 && k >= RK_ROWS_MIN_K;
        if (b && (!rows || mt <= RK_ROWS2_MAX_MT)) {
            const int nr = rows ? 16 / mt : RK_NR2(mt);
            const rk_pair_fn pair = rows ? rk_rows2_n[mt] : rk_tiles2[mt];
            for (; r + nr <= r1 && q + nr <= q1; r += nr, q += nr)
                pair(x + t0, s->w + r * k, b->w + q * k, k, s->y + t0, r, b->y + t0, q);
            rk_span(x, mt, b, k, q, q1, t0);
        } else if (b) {
            rk_span(x, mt, b, k, q, q1, t0);
        }
        rk_span(x, mt, s, k, r, r1, t0);
    }
}

/* Block number i of the segments: its segment and rows [*r0, *r1). */
static const struct dnnl_bk_raw_seg *rk_block_at(const struct dnnl_bk_raw_seg *segs, int64_t i,
                                                 int64_t *r0, int64_t *r1)
{
    return dnnl_bk_seg_block(segs, i, DNNL_BK_RAW_RB, r0, r1);
}

/* Block i and block i + half, walked together: the first and the second
 * half of the weights (gate and up, for an expert's gate/up call) stream
 * side by side. */
static void rk_pair_at(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *segs,
                       int64_t k, int64_t blocks, int64_t i)
{
    const int64_t half = (blocks + 1) / 2;
    int64_t r0, r1, q0 = 0, q1 = 0;
    const struct dnnl_bk_raw_seg *s = rk_block_at(segs, i, &r0, &r1);
    const struct dnnl_bk_raw_seg *b =
        i + half < blocks ? rk_block_at(segs, i + half, &q0, &q1) : NULL;
    rk_block(x, m, k, s, r0, r1, b, q0, q1);
}

struct rk_job {
    const uint16_t *const *x;
    int64_t m;
    const struct dnnl_bk_raw_seg *segs;
    int64_t k, blocks;
};

static void rk_job_pairs(void *c, int64_t i0, int64_t i1)
{
    const struct rk_job *j = c;
    for (int64_t i = i0; i < i1; i++)
        rk_pair_at(j->x, j->m, j->segs, j->k, j->blocks, i);
}

void dnnl_bk_rows_avx512bf16(const uint16_t *const *x, int64_t m,
                             const struct dnnl_bk_raw_seg *segs, int n_segs, int64_t k, int threads,
                             void *work)
{
    (void)work;
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].n + DNNL_BK_RAW_RB - 1) / DNNL_BK_RAW_RB;
    const int64_t half = (blocks + 1) / 2;
    if (threads <= 1) { /* inline, e.g. one expert per thread of an expert batch */
        for (int64_t i = 0; i < half; i++)
            rk_pair_at(x, m, segs, k, blocks, i);
        return;
    }
    const struct rk_job j = {x, m, segs, k, blocks};
    dnnl_bk_par_for(threads, half, rk_job_pairs, (void *)&j);
}
