/* The quantized expert kernels on AVX-512, in quant_c.c's order.
 *
 * AVX-512 (AVX512F+BW+VL, chosen at run time; -DDNNL_BK_Q_AVX512_ON=0
 * leaves it out) keeps the same order: two weight rows share a zmm, row r
 * in lanes 0-7 and row r+1 in lanes 8-15, the x values in both halves, so each
 * 512-bit fused multiply-add does per lane what two 256-bit ones did, and
 * each half goes through the same lane tree. A pair of rows is decoded with
 * one 64-bit unpack, one widening (vpmovsxbd; fp8: vpmovsxbw and vcvtph2ps),
 * one convert and one multiply by [scale r x8 | scale r+1 x8] per 16
 * weights (q4_0: one table lookup, qk_q4_lut). Tiles are 8, 12, 12 and 8
 * rows at 1, 2, 3 and 4 tokens (up to 18 of the 32 registers accumulate).
 * A row left over by the pairs runs on the AVX2 tile (same bits). The fp8
 * NaN fallback is the plain twin. Above 4 tokens the AVX2 decoded-row path
 * runs (a zmm version measured slower on Zen 4: qk_path_avx512). On Zen 4, whose
 * 512-bit operations take two passes through 256-bit units, the AVX-512
 * tiles gain at 1 token in q4_0 (the table) and little elsewhere
 * (docs/cpu-performance.md). test_quant_experts checks every path the CPU
 * has against the stated order. The file builds with any x86-64 flags
 * (target attributes); the table picks it only where the CPU has
 * AVX512F+BW+VL. */
#include <immintrin.h>

#include "dnnl_bk_quant.h"

#define QK_TARGET512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
/* The tile loops unrolled completely (the AVX-512 tiles hold up to
 * QK_NP_MAX pairs). */
#define QK_UNROLL16 _Pragma("GCC unroll 16")
/* AVX-512 tiles: weight rows are taken in pairs (row 2p in the low 8 lanes
 * of a zmm, row 2p+1 in the high 8), so tiles hold 2 * qk_np[tokens] rows:
 * 8, 12, 12 and 8, which divide DNNL_BK_QRB; at most 18 accumulators. At 1
 * token 8 rows beat 24 on Zen 4 (q8_0 112 against 127 us per expert: fewer
 * row pointers to keep in registers). */
#define QK_NP_MAX 6
static const int qk_np[5] = {0, 4, 6, 6, 4};

typedef void (*qk_tile_fn)(const float *const *xf, const uint16_t *const *x,
                           const struct dnnl_bk_qmat *w, int64_t j0, float *const *y, int64_t pf);

/* x[i .. i+7] in both halves. */
static QK_TARGET512 QK_INLINE __m512 qk_x2(const float *x)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(x))));
}

/* The y outputs of one pair accumulator: the AVX2 lane tree on each half. */
static QK_TARGET512 QK_INLINE void qk_hsum2(__m512 v, float *y)
{
    y[0] = qk_hsum(_mm512_castps512_ps256(v));
    y[1] = qk_hsum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* Values g*8 .. g*8+7 (g = 0..3) of the 32-value chunks at qa (low lanes)
 * and qb (high lanes), unscaled as qk_dec8 gives them, into d[g]. */
static QK_TARGET512 QK_INLINE void qk_dec16x4(int fmt, const uint8_t *qa, const uint8_t *qb,
                                              __m512 d[4])
{
    __m128i p[4]; /* [row a's 8 bytes | row b's 8 bytes] of group g */
    if (fmt == TIDE_QFMT_Q4_0) {
        /* Byte i holds value i (low nibble) and i + 16 (high nibble). */
        const __m128i m15 = _mm_set1_epi8(15), e8 = _mm_set1_epi8(8);
        const __m128i a = _mm_loadu_si128((const __m128i *)qa),
                      b = _mm_loadu_si128((const __m128i *)qb);
        const __m128i alo = _mm_sub_epi8(_mm_and_si128(a, m15), e8),
                      ahi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(a, 4), m15), e8),
                      blo = _mm_sub_epi8(_mm_and_si128(b, m15), e8),
                      bhi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), m15), e8);
        p[0] = _mm_unpacklo_epi64(alo, blo);
        p[1] = _mm_unpackhi_epi64(alo, blo);
        p[2] = _mm_unpacklo_epi64(ahi, bhi);
        p[3] = _mm_unpackhi_epi64(ahi, bhi);
    } else {
        const __m128i a0 = _mm_loadu_si128((const __m128i *)qa),
                      a1 = _mm_loadu_si128((const __m128i *)(qa + 16)),
                      b0 = _mm_loadu_si128((const __m128i *)qb),
                      b1 = _mm_loadu_si128((const __m128i *)(qb + 16));
        p[0] = _mm_unpacklo_epi64(a0, b0);
        p[1] = _mm_unpackhi_epi64(a0, b0);
        p[2] = _mm_unpacklo_epi64(a1, b1);
        p[3] = _mm_unpackhi_epi64(a1, b1);
    }
    QK_UNROLL16
    for (int g = 0; g < 4; g++) {
        if (fmt == TIDE_QFMT_FP8) {
            /* As qk_dec8: 16-bit sign extension, shifted by 7, bit 14 cleared. */
            const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(p[g]), 7),
                                               _mm256_set1_epi16((short)0xbf80));
            d[g] = _mm512_cvtph_ps(h);
        } else {
            d[g] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(p[g]));
        }
    }
}

#ifndef QK_Q4_LUT
#define QK_Q4_LUT 1
#endif
/* q4_0 scaled in one step: a nibble has 16 values, so the 16 products
 * (v - 8) * scale of each row (the same multiplications, so the same bits)
 * are a table, and vpermt2ps looks up both rows' at once (index bit 4: row
 * b's table). d[g] as qk_dec16x4 gives it, times the scales s2[0] (row a)
 * and s2[1] (row b). */
static QK_TARGET512 QK_INLINE void qk_q4_lut(const uint8_t *qa, const uint8_t *qb, __m128 s2,
                                             __m512 d[4])
{
    const __m512 v = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 ta = _mm512_mul_ps(v, _mm512_broadcastss_ps(s2)),
                 tb = _mm512_mul_ps(
                     v, _mm512_permutexvar_ps(_mm512_set1_epi32(1), _mm512_castps128_ps512(s2)));
    const __m128i m15 = _mm_set1_epi8(15), b16 = _mm_set1_epi8(16);
    const __m128i a = _mm_loadu_si128((const __m128i *)qa),
                  b = _mm_loadu_si128((const __m128i *)qb);
    const __m128i alo = _mm_and_si128(a, m15), ahi = _mm_and_si128(_mm_srli_epi16(a, 4), m15),
                  blo = _mm_or_si128(_mm_and_si128(b, m15), b16),
                  bhi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(b, 4), m15), b16);
    const __m128i p[4] = {_mm_unpacklo_epi64(alo, blo), _mm_unpackhi_epi64(alo, blo),
                          _mm_unpacklo_epi64(ahi, bhi), _mm_unpackhi_epi64(ahi, bhi)};
    QK_UNROLL16
    for (int g = 0; g < 4; g++)
        d[g] = _mm512_permutex2var_ps(ta, _mm512_cvtepu8_epi32(p[g]), tb);
}

/* True when the 32-byte fp8 chunk at q holds a NaN code. */
static QK_TARGET512 QK_INLINE __m256i qk_nan32(const uint8_t *q)
{
    const __m256i v = _mm256_loadu_si256((const __m256i *)q), m7 = _mm256_set1_epi8(0x7f);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, m7), m7);
}

/* qk_tile on mt (1..4) tokens by np (1..QK_NP_MAX) pairs of weight rows
 * j0 .. j0+2np-1: per lane the same fused multiply-adds on the same
 * products in the same order, so the same bits. */
static QK_TARGET512 QK_INLINE void qk_tile512(int fmt, int mt, int np, const float *const *xf,
                                              const uint16_t *const *x,
                                              const struct dnnl_bk_qmat *w, int64_t j0,
                                              float *const *y, int64_t pf)
{
    __m512 acc[4][QK_NP_MAX];
    QK_UNROLL16
    for (int t = 0; t < mt; t++)
        QK_UNROLL16
    for (int p = 0; p < np; p++)
        acc[t][p] = _mm512_setzero_ps();
    const int64_t k = w->k, rb = qk_row_bytes(w), bc = w->bc;
    const int chunk_bytes = fmt == TIDE_QFMT_Q4_0 ? 16 : 32;
    const uint8_t *q0 = (const uint8_t *)w->q + j0 * rb;
    const int64_t s0 = j0 / w->br * w->sld;
    __m256i nan = _mm256_setzero_si256();
    int64_t off = 0;
    for (int64_t c0 = 0, b = 0; c0 < k; c0 += bc, b++) {
        const int64_t c1 = c0 + bc < k ? c0 + bc : k;
        for (int64_t i = c0; i < c1; i += 32, off += chunk_bytes) {
            QK_UNROLL16
            for (int p = 0; p < np; p++) {
                const uint8_t *qa = q0 + 2 * p * rb + off, *qb = qa + rb;
                if ((off & 63) == 0) {
                    _mm_prefetch((const char *)((uintptr_t)qa + (uintptr_t)(pf * rb)),
                                 DNNL_BK_RAW_PF_HINT);
                    _mm_prefetch((const char *)((uintptr_t)qb + (uintptr_t)(pf * rb)),
                                 DNNL_BK_RAW_PF_HINT);
                }
                /* The pair's two scales in lanes 0 and 1, converted at once. */
                __m128 s2;
                if (fmt == TIDE_QFMT_FP8) {
                    const float *fs = (const float *)w->s;
                    s2 = _mm_mul_ps(
                        _mm_unpacklo_ps(_mm_load_ss(fs + (j0 + 2 * p) / w->br * w->sld + b),
                                        _mm_load_ss(fs + (j0 + 2 * p + 1) / w->br * w->sld + b)),
                        _mm_set1_ps(256.0f));
                    nan = _mm256_or_si256(nan, _mm256_or_si256(qk_nan32(qa), qk_nan32(qb)));
                } else {
                    const uint16_t *hs = (const uint16_t *)w->s + s0 + b;
                    const uint32_t h2 = hs[2 * p * w->sld] | (uint32_t)hs[(2 * p + 1) * w->sld]
                                                                 << 16;
                    s2 = _mm_cvtph_ps(_mm_cvtsi32_si128((int)h2));
                }
                __m512 d[4];
                if (fmt == TIDE_QFMT_Q4_0 && QK_Q4_LUT)
                    qk_q4_lut(qa, qb, s2, d);
                else
                    qk_dec16x4(fmt, qa, qb, d);
                const __m512 s = _mm512_permutexvar_ps(
                    _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                    _mm512_castps128_ps512(s2));
                QK_UNROLL16
                for (int g = 0; g < 4; g++) {
                    const __m512 wv =
                        fmt == TIDE_QFMT_Q4_0 && QK_Q4_LUT ? d[g] : _mm512_mul_ps(d[g], s);
                    QK_UNROLL16
                    for (int t = 0; t < mt; t++)
                        acc[t][p] = _mm512_fmadd_ps(qk_x2(xf[t] + i + 8 * g), wv, acc[t][p]);
                }
                /* At 3-4 tokens, keeping the 4 mt x vectors of a chunk in
                 * registers for every pair (GCC's choice) spills
                 * accumulators: load them again (L1) for each pair. */
                if (mt >= 3)
                    __asm__ volatile("" ::: "memory");
            }
        }
    }
    if (fmt == TIDE_QFMT_FP8 && !_mm256_testz_si256(nan, nan)) {
        for (int t = 0; t < mt; t++)
            for (int r = 0; r < 2 * np; r++)
                y[t][j0 + r] = dnnl_bk_qdot_c(x[t], w, j0 + r);
        return;
    }
    float o[2];
    QK_UNROLL16
    for (int t = 0; t < mt; t++)
        QK_UNROLL16
    for (int p = 0; p < np; p++) {
        qk_hsum2(acc[t][p], o);
        y[t][j0 + 2 * p] = o[0];
        y[t][j0 + 2 * p + 1] = o[1];
    }
}

/* qk_tile512_<format>_<tokens>_<1 or n> (n: qk_np[tokens] pairs) */
#define QK_TILE512(fmt, name, mt, np, tag)                                                         \
    static QK_TARGET512 void qk_tile512_##name##_##mt##_##tag(                                     \
        const float *const *xf, const uint16_t *const *x, const struct dnnl_bk_qmat *w,            \
        int64_t j0, float *const *y, int64_t pf)                                                   \
    {                                                                                              \
        qk_tile512(fmt, mt, np, xf, x, w, j0, y, pf);                                              \
    }
#define QK_TILES512(fmt, name)                                                                     \
    QK_TILE512(fmt, name, 1, 1, 1)                                                                 \
    QK_TILE512(fmt, name, 1, 4, n)                                                                 \
    QK_TILE512(fmt, name, 2, 1, 1)                                                                 \
    QK_TILE512(fmt, name, 2, 6, n)                                                                 \
    QK_TILE512(fmt, name, 3, 1, 1)                                                                 \
    QK_TILE512(fmt, name, 3, 6, n)                                                                 \
    QK_TILE512(fmt, name, 4, 1, 1)                                                                 \
    QK_TILE512(fmt, name, 4, 4, n)
QK_TILES512(TIDE_QFMT_Q8_0, q8)
QK_TILES512(TIDE_QFMT_Q4_0, q4)
QK_TILES512(TIDE_QFMT_FP8, f8)

/* [format][tokens][1 pair or qk_np[tokens] pairs] */
static const qk_tile_fn qk_tiles512[TIDE_QFMT_COUNT][5][2] = {
    [TIDE_QFMT_Q8_0] = {{NULL, NULL},
                        {qk_tile512_q8_1_1, qk_tile512_q8_1_n},
                        {qk_tile512_q8_2_1, qk_tile512_q8_2_n},
                        {qk_tile512_q8_3_1, qk_tile512_q8_3_n},
                        {qk_tile512_q8_4_1, qk_tile512_q8_4_n}},
    [TIDE_QFMT_Q4_0] = {{NULL, NULL},
                        {qk_tile512_q4_1_1, qk_tile512_q4_1_n},
                        {qk_tile512_q4_2_1, qk_tile512_q4_2_n},
                        {qk_tile512_q4_3_1, qk_tile512_q4_3_n},
                        {qk_tile512_q4_4_1, qk_tile512_q4_4_n}},
    [TIDE_QFMT_FP8] = {{NULL, NULL},
                       {qk_tile512_f8_1_1, qk_tile512_f8_1_n},
                       {qk_tile512_f8_2_1, qk_tile512_f8_2_n},
                       {qk_tile512_f8_3_1, qk_tile512_f8_3_n},
                       {qk_tile512_f8_4_1, qk_tile512_f8_4_n}},
};

/* Rows [r0, r1) of one segment: pair tiles at 1-4 tokens, the AVX2 tiles
 * for a row they leave and above 4 tokens (same bits). */
static void qk_block512(const float *const *xf, const uint16_t *const *x, int64_t m,
                        const struct dnnl_bk_qseg *s, int64_t r0, int64_t r1)
{
    const struct dnnl_bk_qmat *w = s->w;
    int64_t r = r0;
    if (m >= 1 && m <= 4) {
        /* Prefetch distance in rows: at least DNNL_BK_RAW_PF_BYTES ahead,
         * at least the next tile. */
        const int64_t rb = qk_row_bytes(w);
        int64_t pf = (DNNL_BK_RAW_PF_BYTES + rb - 1) / rb;
        pf = pf > 2 * QK_NP_MAX ? pf : 2 * QK_NP_MAX;
        const int mt = (int)m;
        const qk_tile_fn(*t512)[2] = qk_tiles512[w->fmt];
        for (; r + 2 * qk_np[mt] <= r1; r += 2 * qk_np[mt])
            t512[mt][1](xf, x, w, r, s->y, pf);
        for (; r + 2 <= r1; r += 2)
            t512[mt][0](xf, x, w, r, s->y, pf);
    }
    if (r < r1)
        dnnl_bk_qblock_avx2(xf, x, m, s, r, r1);
}

/* Above 4 tokens the AVX2 decoded rows: on Zen 4 (512-bit operations take
 * two cycles) tiles of 4 tokens by 4 row pairs on zmm, which must join two
 * rows per load, measured 10% slower at 32 and 64 tokens. */
static const struct dnnl_bk_qpath qk_path_avx512 = {
    qk_block512,
    dnnl_bk_qdecoded_avx2,
    {[TIDE_QFMT_Q8_0] = 4, [TIDE_QFMT_Q4_0] = 4, [TIDE_QFMT_FP8] = 4},
    true};

void dnnl_bk_quant_avx512(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                          int n_segs, int64_t k, int threads)
{
    if (DNNL_BK_Q_AVX512_ON)
        dnnl_bk_quant_run(&qk_path_avx512, x, m, segs, n_segs, k, threads);
    else
        dnnl_bk_quant_avx2(x, m, segs, n_segs, k, threads);
}
