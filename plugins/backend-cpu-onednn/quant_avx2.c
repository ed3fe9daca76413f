/* The backend's kernel for block-quantized routed experts (tide/quant.h:
 * q8_0, q4_0 and block-scaled fp8), on the values and scales where they lie
 * (the checkpoint's memory, or a slot's copy of it): no matrix is ever
 * dequantized into a copy, each 32-value chunk is decoded in registers.
 *
 * oneDNN 2.6 cannot take these weights. Its data types are f16, bf16, f32,
 * s32, s8 and u8 (dnnl_types.h: no f8, no 4-bit), and its scales are set per
 * argument with a mask over whole dimensions (dnnl_primitive_attr_set_scales,
 * set_output_scales), so one scale per 32 values of a row (q8_0, q4_0) or per
 * 128x128 block (fp8) cannot be expressed; an s8-weight matmul there is
 * integer arithmetic that wants s8/u8 sources, not bf16. Weight
 * decompression (floating-point sources with int8/int4 weights and grouped
 * scales) and the f8 types arrived in the 3.x series.
 *
 * What is computed, for y = x W^T with x bf16 [m, K] and W [N, K]:
 *   - W[j][i] = value * scale, the exact product rounded once to f32, bit for
 *     bit what tide_qview_row_f32 gives. An fp8 value is decoded through IEEE
 *     half: the bits sign<<15 | (code & 0x7f)<<7 are the e4m3 value times
 *     2^-8 exactly (normals and subnormals), which F16C widens exactly; the
 *     2^8 goes into the scale (exact below 2^120), so the product is the
 *     same real number and rounds the same. The NaN codes 0x7f and 0xff
 *     decode to NaN, as in the reference: the AVX2 and AVX-512 code
 *     recompute a tile whose values hold one with the plain code.
 *   - y[t][j] = x[t] . W[j] in f32 in rows_avx2.c's order: lane l (0..7)
 *     sums x[i] W[j][i] for i = l, l + 8, l + 16, ... < K, one fused
 *     multiply-add per i, i ascending; then the lanes are added as
 *     ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). K is a multiple of
 *     32 (tide_qfmt_fits), so there is no tail.
 * The order depends on K alone: a row's bits do not depend on how many rows
 * share the call (batch invariance), the tiling or the threads, and the AVX2
 * code and the plain code (fmaf, the same correctly rounded fused
 * multiply-add) give identical bits, as does the AVX-512 code below;
 * tests/conformance/test_quant_experts.c checks each against that order
 * written out plainly on tide_qview_row_f32's rows.
 *
 * AVX2 tiles are up to 6 tokens by 2 to 8 weight rows (7-8 tokens: two
 * tiles of 4): each chunk of weights is decoded once per tile into
 * registers, with the tile's scales converted once per 8 chunks (F16C, 8 at
 * a time), so at 1-6 tokens the weights are read and decoded once. q4_0
 * nibbles n are widened unshifted and scaled as n s - 8 s by one fused
 * multiply-subtract (exact: n s and 8 s are, and (n - 8) s is an f32).
 * Above 8 tokens a row block is decoded once into f32 rows (the same
 * products, in the thread's buffer, which stays in L2) and tiles of 4
 * tokens by 3 rows run over them: the same operations in the same order,
 * so the same bits, without decoding the weights again for every 4 tokens.
 * Row blocks of QK_RB weight rows (kept in cache while every tile of tokens
 * passes over them) are split among the threads.
 *
 * AVX-512 (AVX512F+BW+VL, chosen at run time; -DQK_AVX512_ON=0 leaves
 * it out) keeps the same order: two weight rows share a zmm, row r in lanes
 * 0-7 and row r+1 in lanes 8-15, the x values in both halves, so each
 * 512-bit fused multiply-add does per lane what two 256-bit ones did, and
 * each half goes through the same lane tree. A pair of rows is decoded with
 * one 64-bit unpack, one widening (vpmovsxbd; fp8: vpmovsxbw and vcvtph2ps),
 * one convert and one multiply by [scale r x8 | scale r+1 x8] per 16
 * weights (q4_0: one table lookup, qk_q4_lut). Tiles are 8, 12, 12 and 8
 * rows at 1, 2, 3 and 4 tokens (up to 18 of the 32 registers accumulate). A row left over by the
 * pairs runs on the AVX2 tile (same bits). The fp8 NaN fallback is the
 * AVX2 code's. Above 4 tokens the AVX2 decoded-row path runs (a zmm
 * version measured slower on Zen 4: qk_gemm). On Zen 4, whose
 * 512-bit operations take two passes through 256-bit units, the AVX-512
 * tiles gain at 1 token in q4_0 (the table) and little elsewhere
 * (docs/cpu-performance.md). test_quant_experts checks every path the CPU
 * has against the stated order. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_bk.h"

/* Weight rows per block handed to a thread (a multiple of every QK_NR). */
#define QK_RB 24
/* Weight rows of a register tile of mt tokens: mt x nr accumulators, with
 * the weights and the scale, fit the 16 registers. Each output is one chain
 * of dependent fused multiply-adds (the stated order), so at few tokens many
 * rows are needed to cover the FMA latency. */
#define QK_NR_MAX 8
#define QK_MT_MAX 6
static const int qk_nr[QK_MT_MAX + 1] = {0, 8, 6, 4, 3, 2, 2};
/* Tokens up to which the tiles decode the weights in registers (above 6, in
 * tiles of 4); above it a row block is decoded once into f32 rows. */
#define QK_DIRECT_MAX 8
/* Tiles of at most 2 rows load each x vector once for all their rows (the
 * loads, not the fused multiply-adds, bound them); wider tiles take x from
 * memory in each multiply-add. */
#define QK_XR(mt, nr) ((mt) >= 2 && (nr) <= 2)
/* Chunks of 32 columns whose scales a tile converts at once. */
#define QK_SG 8

#define QK_TARGET __attribute__((target("avx2,fma,f16c")))
#define QK_INLINE __attribute__((always_inline)) inline
/* The tile loops unrolled completely, so that acc[t][r] are registers. */
#define QK_UNROLL _Pragma("GCC unroll 8")
/* The AVX-512 tiles hold up to QK_NP_MAX pairs. */
#define QK_UNROLL16 _Pragma("GCC unroll 16")

#define QK_TARGET512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
/* AVX-512 tiles: weight rows are taken in pairs (row 2p in the low 8 lanes
 * of a zmm, row 2p+1 in the high 8), so tiles hold 2 * qk_np[tokens] rows:
 * 8, 12, 12 and 8, which divide QK_RB; at most 18 accumulators. At 1 token
 * 8 rows beat 24 on Zen 4 (q8_0 112 against 127 us per expert: fewer row
 * pointers to keep in registers). */
#define QK_NP_MAX 6
static const int qk_np[5] = {0, 4, 6, 6, 4};

/* The code paths of this file, all giving the same bits (table entries c,
 * avx2, avx512). */
enum qk_isa {
    QK_PLAIN,  /* plain C */
    QK_AVX2,   /* AVX2+FMA+F16C */
    QK_AVX512, /* and AVX512F+BW+VL: two weight rows per zmm */
};

static inline float qk_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float qk_bf16(uint16_t v)
{
    return qk_bits((uint32_t)v << 16);
}

/* IEEE half -> f32, exact (the plain code's twin of F16C). */
static float qk_f16(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
    if (e == 31)
        return qk_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        const float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    return qk_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* Bytes of one row of values. */
static inline int64_t qk_row_bytes(const struct dnnl_bk_qmat *w)
{
    return w->fmt == TIDE_QFMT_Q4_0 ? w->k / 2 : w->k;
}

/* The scale of row j, scale column b, as the kernel multiplies it (fp8: times 2^8). */
static inline float qk_scale(const struct dnnl_bk_qmat *w, int64_t j, int64_t b)
{
    const int64_t i = j / w->br * w->sld + b;
    if (w->fmt == TIDE_QFMT_FP8)
        return ((const float *)w->s)[i] * 256.0f;
    return qk_f16(((const uint16_t *)w->s)[i]);
}

/* W[j][i0 .. i0+31] as f32 (plain code). */
static void qk_chunk_scalar(const struct dnnl_bk_qmat *w, int64_t j, int64_t i0, float out[32])
{
    const float s = qk_scale(w, j, i0 / w->bc);
    const uint8_t *q = (const uint8_t *)w->q + j * qk_row_bytes(w);
    switch (w->fmt) {
    case TIDE_QFMT_Q8_0:
        for (int i = 0; i < 32; i++)
            out[i] = (float)(int8_t)q[i0 + i] * s;
        break;
    case TIDE_QFMT_Q4_0:
        for (int i = 0; i < 16; i++) {
            const uint8_t b = q[i0 / 2 + i];
            out[i] = (float)((int)(b & 15) - 8) * s;
            out[i + 16] = (float)((int)(b >> 4) - 8) * s;
        }
        break;
    default: /* fp8 */
        for (int i = 0; i < 32; i++) {
            const uint8_t b = q[i0 + i];
            const float v = (b & 0x7f) != 0x7f
                                ? qk_f16((uint16_t)((b & 0x80) << 8 | (b & 0x7f) << 7))
                            : b & 0x80 ? -NAN
                                       : NAN;
            out[i] = v * s;
        }
        break;
    }
}

/* One output in the stated order (plain code). */
static float qk_dot_scalar(const uint16_t *x, const struct dnnl_bk_qmat *w, int64_t j)
{
    float l[8] = {0}, wc[32];
    for (int64_t i0 = 0; i0 < w->k; i0 += 32) {
        qk_chunk_scalar(w, j, i0, wc);
        for (int i = 0; i < 32; i++)
            l[i & 7] = fmaf(qk_bf16(x[i0 + i]), wc[i], l[i & 7]);
    }
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    return (a0 + a2) + (a1 + a3);
}

static QK_TARGET inline float qk_hsum(__m256 v)
{
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    /* a = (l0+l4, l1+l5, l2+l6, l3+l7); b = (a0+a2, a1+a3, ...) */
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    const __m128 c = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(c);
}

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
                                               float sc[QK_NR_MAX][QK_SG])
{
    if (fmt == TIDE_QFMT_FP8) {
        const float *fs = w->s;
        for (int r = 0; r < nr; r++) {
            const float *row = fs + (j0 + r) / w->br * w->sld;
            for (int c = 0; c < nc; c++)
                sc[r][c] = row[(i0 + 32 * c) / w->bc] * 256.0f;
        }
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
    for (int64_t i0 = 0; i0 < k; i0 += 32 * QK_SG) {
        const int nc = k - i0 >= 32 * QK_SG ? QK_SG : (int)((k - i0) / 32);
        qk_tile_scales(fmt, nr, w, j0, i0, nc, sc);
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
                y[t][j0 + r] = qk_dot_scalar(x[t], w, j0 + r);
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
                qk_chunk_scalar(w, j, i, out + i);
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

/* ---- AVX-512: two weight rows per zmm --------------------------------- */

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
                y[t][j0 + r] = qk_dot_scalar(x[t], w, j0 + r);
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

/* Rows [r0, r1) of one segment for m > 4 tokens: decoded once into wbuf
 * (QK_RB rows of k floats), then every tile of tokens over them. */
static void qk_block_decoded(const float *const *xf, int64_t m, const struct dnnl_bk_qseg *s,
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

/* Rows [r0, r1) of one segment, for all m tokens. */
static void qk_block(const float *const *xf, const uint16_t *const *x, int64_t m,
                     const struct dnnl_bk_qseg *s, int64_t r0, int64_t r1, int isa)
{
    const struct dnnl_bk_qmat *w = s->w;
    if (isa == QK_PLAIN) {
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = 0; t < m; t++)
                s->y[t][r] = qk_dot_scalar(x[t], w, r);
        return;
    }
    /* Prefetch distance in rows: at least DNNL_BK_RAW_PF_BYTES ahead, at
     * least the next tile. */
    const int64_t rb = qk_row_bytes(w);
    int64_t pf = (DNNL_BK_RAW_PF_BYTES + rb - 1) / rb;
    pf = pf > 2 * QK_NP_MAX ? pf : 2 * QK_NP_MAX;
    const qk_tile_fn(*tiles)[2] = qk_tiles[w->fmt];
    /* Tokens per tile: all of them up to QK_MT_MAX, else 4 (AVX-512: up
     * to 4 tokens reach here). */
    const int step = m <= QK_MT_MAX && isa != QK_AVX512 ? (int)m : 4;
    for (int64_t t0 = 0; t0 < m; t0 += step) {
        const int mt = (int)(m - t0 < step ? m - t0 : step), nr = qk_nr[mt];
        int64_t r = r0;
        if (isa == QK_AVX512) {
            const qk_tile_fn(*t512)[2] = qk_tiles512[w->fmt];
            for (; r + 2 * qk_np[mt] <= r1; r += 2 * qk_np[mt])
                t512[mt][1](xf + t0, x + t0, w, r, s->y + t0, pf);
            for (; r + 2 <= r1; r += 2)
                t512[mt][0](xf + t0, x + t0, w, r, s->y + t0, pf);
        }
        for (; r + nr <= r1; r += nr)
            tiles[mt][1](xf + t0, x + t0, w, r, s->y + t0, pf);
        for (; r < r1; r++)
            tiles[mt][0](xf + t0, x + t0, w, r, s->y + t0, pf);
    }
}

struct qk_job {
    const float *const *xf;
    const uint16_t *const *x;
    int64_t m;
    const struct dnnl_bk_qseg *segs;
    int64_t k;
    int isa;
    float *wbuf; /* [threads][QK_RB * k] decoded rows, or NULL */
    int64_t blocks;
};

/* Thread tid's contiguous share of the blocks of QK_RB rows (OpenMP's static
 * schedule), numbered through the segments in order. */
static void qk_job_blocks(void *c, int tid, int nt)
{
    const struct qk_job *j = c;
    const int64_t b0 = j->blocks * tid / nt, b1 = j->blocks * (tid + 1) / nt;
    for (int64_t b = b0; b < b1; b++) {
        int64_t rb = b;
        int i = 0;
        while (rb >= (j->segs[i].w->n + QK_RB - 1) / QK_RB)
            rb -= (j->segs[i++].w->n + QK_RB - 1) / QK_RB;
        const int64_t r0 = rb * QK_RB,
                      r1 = r0 + QK_RB < j->segs[i].w->n ? r0 + QK_RB : j->segs[i].w->n;
        if (j->wbuf)
            qk_block_decoded(j->xf, j->m, &j->segs[i], r0, r1,
                             j->wbuf + (size_t)tid * (size_t)(QK_RB * j->k));
        else
            qk_block(j->xf, j->x, j->m, &j->segs[i], r0, r1, j->isa);
    }
}

static void qk_gemm(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                    int n_segs, int64_t k, int threads, int isa)
{
    /* x widened once per call: the same bits as the bf16 rows. */
    float *buf = NULL;
    const float **xf = NULL;
    if (isa != QK_PLAIN && m > 0 && !(xf = dnnl_bk_widen_rows(x, m, k, &buf)))
        isa = QK_PLAIN; /* the plain code gives the same bits */
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].w->n + QK_RB - 1) / QK_RB;
    const int nt = threads > 1 ? threads : 1;
    /* Above 4 tokens: a buffer of QK_RB decoded rows per thread, and the
     * AVX2 tiles over them whatever isa is: on Zen 4 (512-bit operations
     * take two cycles) tiles of 4 tokens by 4 row pairs on zmm, which must
     * join two rows per load, measured 10% slower at 32 and 64 tokens. */
    float *wbuf = isa != QK_PLAIN && m > (isa == QK_AVX512 ? 4 : QK_DIRECT_MAX)
                      ? malloc(sizeof *wbuf * (size_t)(nt * QK_RB * k))
                      : NULL;
    if (threads <= 1) {
        for (int i = 0; i < n_segs; i++)
            for (int64_t r0 = 0; r0 < segs[i].w->n; r0 += QK_RB) {
                const int64_t r1 = r0 + QK_RB < segs[i].w->n ? r0 + QK_RB : segs[i].w->n;
                if (wbuf)
                    qk_block_decoded(xf, m, &segs[i], r0, r1, wbuf);
                else
                    qk_block(xf, x, m, &segs[i], r0, r1, isa);
            }
    } else {
        const struct qk_job j = {xf, x, m, segs, k, isa, wbuf, blocks};
        dnnl_bk_par(threads < blocks ? threads : (int)blocks, qk_job_blocks, (void *)&j);
    }
    free(wbuf);
    free(buf);
    free(xf);
}

void dnnl_bk_quant_c(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                     int n_segs, int64_t k, int threads)
{
    qk_gemm(x, m, segs, n_segs, k, threads, QK_PLAIN);
}

void dnnl_bk_quant_avx2(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                        int n_segs, int64_t k, int threads)
{
    qk_gemm(x, m, segs, n_segs, k, threads, QK_AVX2);
}

void dnnl_bk_quant_avx512(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                          int n_segs, int64_t k, int threads)
{
    qk_gemm(x, m, segs, n_segs, k, threads, DNNL_BK_Q_AVX512_ON ? QK_AVX512 : QK_AVX2);
}
