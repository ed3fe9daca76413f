/* The quantized expert kernels on AVX2+FMA+F16C, in quant_c.c's order.
 *
 * AVX2 tiles are up to 6 tokens by 2 to 8 weight rows (7-8 tokens: two
 * tiles of 4): each chunk of weights is decoded once per tile into
 * registers, with the tile's scales converted once per 8 chunks (F16C, 8 at
 * a time), so at 1-6 tokens the weights are read and decoded once. q4_0
 * nibbles n are widened unshifted and scaled as n s - 8 s by one fused
 * multiply-subtract (exact: n s and 8 s are, and (n - 8) s is an f32).
 * Above 8 tokens (fp8: 6) a row block is decoded once into f32 rows (the same
 * products, in the thread's buffer, which stays in L2) and tiles of 4
 * tokens by 3 rows run over them: the same operations in the same order,
 * so the same bits, without decoding the weights again for every 4 tokens.
 * Row blocks of DNNL_BK_QRB weight rows (kept in cache while every tile of
 * tokens passes over them) are split among the threads (quant_c.c's
 * driver). A tile whose fp8 values hold a NaN code is recomputed with the
 * plain twin. test_quant_experts checks this file against the stated order.
 *
 * On Zen 3 the decode bounds them at 1-2 tokens (its instruction mix,
 * bench-decode-mix: 1.4 cycles per 8 weights for q8_0, 1.5 for q4_0, 2.4
 * for fp8) and the fused multiply-adds from 4 tokens on
 * (docs/cpu-performance.md). */
#include <immintrin.h>
#include <stdlib.h>

#include "dnnl_bk_quant.h"

/* Weight rows of a register tile of mt tokens: mt x nr accumulators, with
 * the weights and the scale, fit the 16 registers. Each output is one chain
 * of dependent fused multiply-adds (the stated order), so at few tokens many
 * rows are needed to cover the FMA latency. */
#define QK_NR_MAX 8
#define QK_MT_MAX 6
static const int qk_nr[QK_MT_MAX + 1] = {0, 8, 6, 4, 3, 2, 2};
/* Tokens up to which the tiles decode the weights in registers (above 6, in
 * tiles of 4); above it a row block is decoded once into f32 rows. fp8
 * keeps the decoded rows from 7 tokens on, as before the direct tiles,
 * which measured no faster there (Zen 3: 2.6 and 2.5 GB/s per thread at 7
 * and 8 tokens either way). */
#define QK_DIRECT_MAX     8
#define QK_DIRECT_MAX_FP8 6
/* Tiles of at most 2 rows load each x vector once for all their rows (the
 * loads, not the fused multiply-adds, bound them); wider tiles take x from
 * memory in each multiply-add. */
#define QK_XR(mt, nr) ((mt) >= 2 && (nr) <= 2)
/* Chunks of 32 columns whose scales a tile converts at once. */
#define QK_SG 8
/* The tile loops unrolled completely, so that acc[t][r] are registers. */
#define QK_UNROLL _Pragma("GCC unroll 8")
/* Prefetch distance in rows: at least this many (the next tiles). */
#define QK_PF_MIN_ROWS 12

/* Values g*8 .. g*8+7 of the 32-value chunk at q (the chunk's first byte),
 * as f32, unscaled (fp8: times 2^-8, NaN codes not handled). */
static QK_TARGET QK_INLINE __m256 qk_dec8(int fmt, const uint8_t *q, int g)
{
    if (fmt == TIDE_QFMT_Q8_0)
        return _mm256_cvtepi32_ps(
            _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * g))));
    if (fmt == TIDE_QFMT_Q4_0) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(q + 8 * (g & 1)));
        if (g >= 2)
            b = _mm_srli_epi16(b, 4);
        b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(15)), _mm_set1_epi8(8));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    }
    /* fp8: sign-extend to 16 bits and shift by 7: bit 15 is the sign, bits
     * 13..7 the exponent and mantissa; bit 14 (the sign again) is cleared. */
    const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(q + 8 * g)));
    const __m128i h = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16((short)0xbf80));
    return _mm256_cvtph_ps(h);
}

/* The scales of rows j0 .. j0+nr-1 for the nc (<= QK_SG) chunks from
 * column i0, as the kernel multiplies them, into sc[r][c]: converted once
 * per tile and group of chunks, then broadcast from memory. */
static QK_TARGET QK_INLINE void qk_tile_scales(int fmt, int nr, const struct dnnl_bk_qmat *w,
                                               int64_t j0, int64_t i0, int nc,
                                               float sc[QK_NR_MAX][QK_SG], const float *const *srow)
{
    if (fmt == TIDE_QFMT_FP8) {
        /* Each chunk's scale column, without a division per chunk: bc is a
         * multiple of 32. */
        int64_t col[QK_SG], b = i0 / w->bc, in = i0 - b * w->bc;
        for (int c = 0; c < nc; c++, in += 32) {
            if (in == w->bc) {
                b++;
                in = 0;
            }
            col[c] = b;
        }
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < nc; c++)
                sc[r][c] = srow[r][col[c]] * 256.0f;
        return;
    }
    /* q8_0, q4_0: one f16 scale per chunk (bc = 32, br = 1). */
    const uint16_t *hs = (const uint16_t *)w->s + j0 * w->sld + i0 / 32;
    for (int r = 0; r < nr; r++, hs += w->sld) {
        if (nc == QK_SG)
            _mm256_store_ps(sc[r], _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)hs)));
        else
            for (int c = 0; c < nc; c++)
                sc[r][c] = _cvtsh_ss(hs[c]);
    }
}

/* The four groups of 8 values of the 32-value chunk at p, as f32, unscaled
 * (fp8: times 2^-8, NaN codes not handled). */
static QK_TARGET QK_INLINE void qk_dec32(int fmt, const uint8_t *p, __m256 d[4])
{
    if (fmt == TIDE_QFMT_Q8_0) {
        for (int g = 0; g < 4; g++)
            d[g] = _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * g))));
    } else if (fmt == TIDE_QFMT_Q4_0) {
        /* Byte i holds value i + 8 (low nibble) and i + 24 (high nibble):
         * d holds the nibbles, unshifted (qk_tile subtracts 8 x scale). */
        const __m256i m15 = _mm256_set1_epi32(15);
        for (int h = 0; h < 2; h++) {
            const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * h)));
            d[h] = _mm256_cvtepi32_ps(_mm256_and_si256(b, m15));
            d[h + 2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
        }
    } else {
        /* As qk_dec8, 16 values per step. */
        const __m256i m = _mm256_set1_epi16((short)0xbf80);
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_and_si256(
                _mm256_slli_epi16(
                    _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 16 * h))), 7),
                m);
            d[2 * h] = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
            d[2 * h + 1] = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
        }
    }
}

/* Values g*8 .. g*8+7 of the 32-value chunk at p as qk_dec32 gives them
 * (q4_0: the nibbles, unshifted). */
static QK_TARGET QK_INLINE __m256 qk_dec8n(int fmt, const uint8_t *p, int g)
{
    if (fmt != TIDE_QFMT_Q4_0)
        return qk_dec8(fmt, p, g);
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * (g & 1))));
    return _mm256_cvtepi32_ps(g < 2 ? _mm256_and_si256(b, _mm256_set1_epi32(15))
                                    : _mm256_srli_epi32(b, 4));
}

/* One weight vector: decoded values d times the scale s (q4_0: d - 8 times
 * s as n s - 8 s, s8 = 8 s: exact, since n s and 8 s are, so the one
 * rounding of the fused multiply-subtract gives the product's bits). */
static QK_TARGET QK_INLINE __m256 qk_scaled(int fmt, __m256 d, __m256 s, __m256 s8)
{
    return fmt == TIDE_QFMT_Q4_0 ? _mm256_fmsub_ps(d, s, s8) : _mm256_mul_ps(d, s);
}

/* mt (1..QK_MT_MAX) tokens by nr (1..QK_NR_MAX) weight rows j0 .. j0+nr-1
 * of w. xf: the x rows widened to f32; x: the same bf16 rows, for the plain
 * code. Each chunk of a row is decoded once into registers and used for
 * every token; the weights `pf` rows ahead are prefetched. */
static QK_TARGET QK_INLINE void qk_tile(int fmt, int mt, int nr, const float *const *xf,
                                        const uint16_t *const *x, const struct dnnl_bk_qmat *w,
                                        int64_t j0, float *const *y, int64_t pf)
{
    __m256 acc[QK_MT_MAX][QK_NR_MAX];
    QK_UNROLL
    for (int t = 0; t < mt; t++)
        QK_UNROLL
    for (int r = 0; r < nr; r++)
        acc[t][r] = _mm256_setzero_ps();
    const int64_t k = w->k, rb = qk_row_bytes(w);
    const int cb = fmt == TIDE_QFMT_Q4_0 ? 16 : 32; /* bytes of a chunk */
    const uint8_t *q = (const uint8_t *)w->q + j0 * rb;
    float sc[QK_NR_MAX][QK_SG] __attribute__((aligned(32)));
    __m256i nan = _mm256_setzero_si256();
    /* fp8: each row's scale row (one division per row and tile). */
    const float *srow[QK_NR_MAX];
    if (fmt == TIDE_QFMT_FP8)
        QK_UNROLL
    for (int r = 0; r < nr; r++)
        srow[r] = (const float *)w->s + (j0 + r) / w->br * w->sld;
    for (int64_t i0 = 0; i0 < k; i0 += 32 * QK_SG) {
        const int nc = k - i0 >= 32 * QK_SG ? QK_SG : (int)((k - i0) / 32);
        qk_tile_scales(fmt, nr, w, j0, i0, nc, sc, srow);
        for (int c = 0; c < nc; c++) {
            const int64_t i = i0 + 32 * c, off = i / 32 * cb;
            if ((off & 63) == 0) /* one prefetch per 64-byte line */
                QK_UNROLL
            for (int r = 0; r < nr; r++)
                _mm_prefetch((const char *)(q + (r + pf) * rb + off), DNNL_BK_RAW_PF_HINT);
            if (fmt == TIDE_QFMT_FP8)
                QK_UNROLL
            for (int r = 0; r < nr; r++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(q + r * rb + off));
                const __m256i m7 = _mm256_set1_epi8(0x7f);
                nan = _mm256_or_si256(nan, _mm256_cmpeq_epi8(_mm256_and_si256(v, m7), m7));
            }
            if (QK_XR(mt, nr)) {
                /* Few rows: each x vector loaded once for all of them. */
                __m256 sv[QK_NR_MAX], s8[QK_NR_MAX];
                QK_UNROLL
                for (int r = 0; r < nr; r++) {
                    sv[r] = _mm256_broadcast_ss(&sc[r][c]);
                    s8[r] = _mm256_mul_ps(sv[r], _mm256_set1_ps(8.0f));
                }
                QK_UNROLL
                for (int g = 0; g < 4; g++) {
                    __m256 wv[QK_NR_MAX];
                    QK_UNROLL
                    for (int r = 0; r < nr; r++)
                        wv[r] = qk_scaled(fmt, qk_dec8n(fmt, q + r * rb + off, g), sv[r], s8[r]);
                    QK_UNROLL
                    for (int t = 0; t < mt; t++) {
                        const __m256 xv = _mm256_loadu_ps(xf[t] + i + 8 * g);
                        QK_UNROLL
                        for (int r = 0; r < nr; r++)
                            acc[t][r] = _mm256_fmadd_ps(xv, wv[r], acc[t][r]);
                    }
                }
                continue;
            }
            QK_UNROLL
            for (int r = 0; r < nr; r++) {
                const uint8_t *p = q + r * rb + off;
                const __m256 s = _mm256_broadcast_ss(&sc[r][c]);
                const __m256 s8 = _mm256_mul_ps(s, _mm256_set1_ps(8.0f));
                __m256 d[4];
                qk_dec32(fmt, p, d);
                QK_UNROLL
                for (int g = 0; g < 4; g++) {
                    const __m256 wv = qk_scaled(fmt, d[g], s, s8);
                    QK_UNROLL
                    for (int t = 0; t < mt; t++)
                        acc[t][r] =
                            _mm256_fmadd_ps(_mm256_loadu_ps(xf[t] + i + 8 * g), wv, acc[t][r]);
                }
            }
        }
    }
    if (fmt == TIDE_QFMT_FP8 && !_mm256_testz_si256(nan, nan)) {
        for (int t = 0; t < mt; t++)
            for (int r = 0; r < nr; r++)
                y[t][j0 + r] = dnnl_bk_qdot_c(x[t], w, j0 + r);
        return;
    }
    QK_UNROLL
    for (int t = 0; t < mt; t++)
        QK_UNROLL
    for (int r = 0; r < nr; r++)
        y[t][j0 + r] = qk_hsum(acc[t][r]);
}

typedef void (*qk_tile_fn)(const float *const *xf, const uint16_t *const *x,
                           const struct dnnl_bk_qmat *w, int64_t j0, float *const *y, int64_t pf);

/* qk_tile_<format>_<tokens>_<1 or n> (n: qk_nr[tokens] rows) */
#define QK_TILE(fmt, name, mt, nr, tag)                                                            \
    static QK_TARGET void qk_tile_##name##_##mt##_##tag(                                           \
        const float *const *xf, const uint16_t *const *x, const struct dnnl_bk_qmat *w,            \
        int64_t j0, float *const *y, int64_t pf)                                                   \
    {                                                                                              \
        qk_tile(fmt, mt, nr, xf, x, w, j0, y, pf);                                                 \
    }
#define QK_TILES(fmt, name)                                                                        \
    QK_TILE(fmt, name, 1, 1, 1)                                                                    \
    QK_TILE(fmt, name, 1, 8, n)                                                                    \
    QK_TILE(fmt, name, 2, 1, 1)                                                                    \
    QK_TILE(fmt, name, 2, 6, n)                                                                    \
    QK_TILE(fmt, name, 3, 1, 1)                                                                    \
    QK_TILE(fmt, name, 3, 4, n)                                                                    \
    QK_TILE(fmt, name, 4, 1, 1)                                                                    \
    QK_TILE(fmt, name, 4, 3, n)                                                                    \
    QK_TILE(fmt, name, 5, 1, 1)                                                                    \
    QK_TILE(fmt, name, 5, 2, n)                                                                    \
    QK_TILE(fmt, name, 6, 1, 1)                                                                    \
    QK_TILE(fmt, name, 6, 2, n)
QK_TILES(TIDE_QFMT_Q8_0, q8)
QK_TILES(TIDE_QFMT_Q4_0, q4)
QK_TILES(TIDE_QFMT_FP8, f8)

#define QK_TILES_OF(name)                                                                          \
    {                                                                                              \
        {NULL, NULL}, {qk_tile_##name##_1_1, qk_tile_##name##_1_n},                                \
            {qk_tile_##name##_2_1, qk_tile_##name##_2_n},                                          \
            {qk_tile_##name##_3_1, qk_tile_##name##_3_n},                                          \
            {qk_tile_##name##_4_1, qk_tile_##name##_4_n},                                          \
            {qk_tile_##name##_5_1, qk_tile_##name##_5_n},                                          \
            {qk_tile_##name##_6_1, qk_tile_##name##_6_n},                                          \
    }
/* [format][tokens][1 or qk_nr[tokens] rows] */
static const qk_tile_fn qk_tiles[TIDE_QFMT_COUNT][QK_MT_MAX + 1][2] = {
    [TIDE_QFMT_Q8_0] = QK_TILES_OF(q8),
    [TIDE_QFMT_Q4_0] = QK_TILES_OF(q4),
    [TIDE_QFMT_FP8] = QK_TILES_OF(f8),
};

/* Weight row j of w as f32 into out[k]: each value times its scale, the
 * products qk_tile multiplies (fp8 chunks holding a NaN code through the
 * plain code, which decodes them to NaN). */
static QK_TARGET void qk_decode_row(const struct dnnl_bk_qmat *w, int64_t j, float *out)
{
    const int fmt = w->fmt;
    const int chunk_bytes = fmt == TIDE_QFMT_Q4_0 ? 16 : 32;
    const uint8_t *q0 = (const uint8_t *)w->q + j * qk_row_bytes(w);
    int64_t off = 0;
    for (int64_t i = 0; i < w->k; i += 32, off += chunk_bytes) {
        const uint8_t *q = q0 + off;
        if (fmt == TIDE_QFMT_FP8) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)q);
            const __m256i m7 = _mm256_set1_epi8(0x7f);
            const __m256i nan = _mm256_cmpeq_epi8(_mm256_and_si256(v, m7), m7);
            if (!_mm256_testz_si256(nan, nan)) {
                dnnl_bk_qchunk_c(w, j, i, out + i);
                continue;
            }
        }
        const __m256 s = _mm256_set1_ps(qk_scale(w, j, i / w->bc));
        QK_UNROLL
        for (int g = 0; g < 4; g++)
            _mm256_storeu_ps(out + i + 8 * g, _mm256_mul_ps(qk_dec8(fmt, q, g), s));
    }
}

/* mt (1..4) tokens by nr (1 or 3) decoded weight rows wf (nr rows of k),
 * outputs col .. col+nr-1: qk_tile's order on f32 weights. */
static QK_TARGET QK_INLINE void qk_ftile(int mt, int nr, const float *const *xf, const float *wf,
                                         int64_t k, float *const *y, int64_t col)
{
    __m256 acc[4][3];
    QK_UNROLL
    for (int t = 0; t < mt; t++)
        QK_UNROLL
    for (int r = 0; r < nr; r++)
        acc[t][r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
        QK_UNROLL
        for (int r = 0; r < nr; r++) {
            const __m256 wv = _mm256_loadu_ps(wf + r * k + i);
            QK_UNROLL
            for (int t = 0; t < mt; t++)
                acc[t][r] = _mm256_fmadd_ps(_mm256_loadu_ps(xf[t] + i), wv, acc[t][r]);
        }
    }
    QK_UNROLL
    for (int t = 0; t < mt; t++)
        QK_UNROLL
    for (int r = 0; r < nr; r++)
        y[t][col + r] = qk_hsum(acc[t][r]);
}

typedef void (*qk_ftile_fn)(const float *const *xf, const float *wf, int64_t k, float *const *y,
                            int64_t col);
#define QK_FTILE(mt, nr)                                                                           \
    static QK_TARGET void qk_ftile_##mt##_##nr(const float *const *xf, const float *wf, int64_t k, \
                                               float *const *y, int64_t col)                       \
    {                                                                                              \
        qk_ftile(mt, nr, xf, wf, k, y, col);                                                       \
    }
QK_FTILE(1, 1)
QK_FTILE(1, 3)
QK_FTILE(2, 1)
QK_FTILE(2, 3)
QK_FTILE(3, 1)
QK_FTILE(3, 3)
QK_FTILE(4, 1)
QK_FTILE(4, 3)
static const qk_ftile_fn qk_ftiles[5][2] = {
    {NULL, NULL},
    {qk_ftile_1_1, qk_ftile_1_3},
    {qk_ftile_2_1, qk_ftile_2_3},
    {qk_ftile_3_1, qk_ftile_3_3},
    {qk_ftile_4_1, qk_ftile_4_3},
};

/* Rows [r0, r1) of one segment decoded once into wbuf (DNNL_BK_QRB rows of
 * k floats), then every tile of 4 tokens over them. */
void dnnl_bk_qdecoded_avx2(const float *const *xf, int64_t m, const struct dnnl_bk_qseg *s,
                           int64_t r0, int64_t r1, float *wbuf)
{
    const struct dnnl_bk_qmat *w = s->w;
    const int64_t k = w->k;
    for (int64_t r = r0; r < r1; r++)
        qk_decode_row(w, r, wbuf + (r - r0) * k);
    for (int64_t t0 = 0; t0 < m; t0 += 4) {
        const int mt = (int)(m - t0 < 4 ? m - t0 : 4);
        int64_t r = r0;
        for (; r + 3 <= r1; r += 3)
            qk_ftiles[mt][1](xf + t0, wbuf + (r - r0) * k, k, s->y + t0, r);
        for (; r < r1; r++)
            qk_ftiles[mt][0](xf + t0, wbuf + (r - r0) * k, k, s->y + t0, r);
    }
}

void dnnl_bk_qblock_avx2(const float *const *xf, const uint16_t *const *x, int64_t m,
                         const struct dnnl_bk_qseg *s, int64_t r0, int64_t r1)
{
    const struct dnnl_bk_qmat *w = s->w;
    /* Prefetch distance in rows: at least DNNL_BK_RAW_PF_BYTES ahead, at
     * least the next tile. */
    const int64_t rb = qk_row_bytes(w);
    int64_t pf = (DNNL_BK_RAW_PF_BYTES + rb - 1) / rb;
    pf = pf > QK_PF_MIN_ROWS ? pf : QK_PF_MIN_ROWS;
    const qk_tile_fn(*tiles)[2] = qk_tiles[w->fmt];
    /* Tokens per tile: all of them up to QK_MT_MAX, else 4. */
    const int step = m <= QK_MT_MAX ? (int)m : 4;
    for (int64_t t0 = 0; t0 < m; t0 += step) {
        const int mt = (int)(m - t0 < step ? m - t0 : step), nr = qk_nr[mt];
        int64_t r = r0;
        for (; r + nr <= r1; r += nr)
            tiles[mt][1](xf + t0, x + t0, w, r, s->y + t0, pf);
        for (; r < r1; r++)
            tiles[mt][0](xf + t0, x + t0, w, r, s->y + t0, pf);
    }
}

static const struct dnnl_bk_qpath qk_path_avx2 = {dnnl_bk_qblock_avx2,
                                                  dnnl_bk_qdecoded_avx2,
                                                  {[TIDE_QFMT_Q8_0] = QK_DIRECT_MAX,
                                                   [TIDE_QFMT_Q4_0] = QK_DIRECT_MAX,
                                                   [TIDE_QFMT_FP8] = QK_DIRECT_MAX_FP8},
                                                  true};

void dnnl_bk_quant_avx2(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                        int n_segs, int64_t k, int threads)
{
    dnnl_bk_quant_run(&qk_path_avx2, x, m, segs, n_segs, k, threads);
}
