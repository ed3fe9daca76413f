/* What the quantized expert kernels share (quant_c.c, quant_avx2.c,
 * quant_avx512.c): the plain pieces every ISA falls back on, the threaded
 * driver each entry runs on, and the AVX2 code the AVX-512 code reuses.
 * quant_c.c states what is computed and in which order. */
#ifndef DNNL_BK_QUANT_H
#define DNNL_BK_QUANT_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "dnnl_bk.h"

/* Weight rows per block handed to a thread (a multiple of every tile's rows). */
#define DNNL_BK_QRB 24

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
static inline float qk_f16(uint16_t h)
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

/* W[j][i0 .. i0+31] as f32, each value times its scale (plain code). */
void dnnl_bk_qchunk_c(const struct dnnl_bk_qmat *w, int64_t j, int64_t i0, float out[32]);
/* Output j for the bf16 row x[k] in the stated order (plain code; the
 * vector code's fallback for fp8 tiles holding a NaN code). */
float dnnl_bk_qdot_c(const uint16_t *x, const struct dnnl_bk_qmat *w, int64_t j);

/* Rows [r0, r1) of segment s for m tokens: x the bf16 rows, xf the same
 * widened to f32 (NULL on the plain path). */
typedef void dnnl_bk_qblock_fn(const float *const *xf, const uint16_t *const *x, int64_t m,
                               const struct dnnl_bk_qseg *s, int64_t r0, int64_t r1);
/* The same through wbuf[DNNL_BK_QRB][k]: the rows decoded once, then every
 * tile of tokens over them. */
typedef void dnnl_bk_qdecoded_fn(const float *const *xf, int64_t m, const struct dnnl_bk_qseg *s,
                                 int64_t r0, int64_t r1, float *wbuf);

/* One instruction set's code, as the driver runs it. */
struct dnnl_bk_qpath {
    dnnl_bk_qblock_fn *block;        /* any m */
    dnnl_bk_qdecoded_fn *decoded;    /* above `direct` tokens when not NULL */
    int64_t direct[TIDE_QFMT_COUNT]; /* [format]: tokens up to which block runs */
    bool widen;                      /* block takes xf (AVX2: dnnl_bk_widen_rows) */
};

/* The path's entry (dnnl_bk_quant_fn): each segment cut into blocks of
 * DNNL_BK_QRB rows, the blocks split among the threads in contiguous
 * shares (OpenMP's static schedule). When memory for xf or wbuf runs out
 * it falls back on the plain path or on block, which give the same bits. */
void dnnl_bk_quant_run(const struct dnnl_bk_qpath *p, const uint16_t *const *x, int64_t m,
                       const struct dnnl_bk_qseg *segs, int n_segs, int64_t k, int threads);

/* quant_avx2.c's block (any m) and decoded code, which quant_avx512.c runs
 * for what its pair tiles do not cover. */
dnnl_bk_qblock_fn dnnl_bk_qblock_avx2;
dnnl_bk_qdecoded_fn dnnl_bk_qdecoded_avx2;

#define QK_TARGET __attribute__((target("avx2,fma,f16c")))
#define QK_INLINE __attribute__((always_inline)) inline

/* The lane tree of the stated order on one 8-lane accumulator. */
static QK_TARGET inline float qk_hsum(__m256 v)
{
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    /* a = (l0+l4, l1+l5, l2+l6, l3+l7); b = (a0+a2, a1+a3, ...) */
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    const __m128 c = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(c);
}

#endif
