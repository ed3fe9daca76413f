/* Decoding of block-quantized expert weights (tide/quant.h), shared by the
 * kernels of kernels.cu (device code) and host C: tests/gpu/test_cuda_qdecode.c
 * compiles this header as plain C and checks every function against the
 * core's tide_qview_row_f32, so the arithmetic the GPU runs is tested on any
 * machine. Nothing here allocates, logs or touches the CUDA runtime.
 *
 * The semantics are tide_qview_row_f32's: W[r][c] = value * scale, the
 * product of two exactly decoded numbers rounded once to f32 (the plugin is
 * built with --fmad=false, so nothing is contracted). */
#ifndef CUDA_QDECODE_H
#define CUDA_QDECODE_H

#include <stdint.h>
#include <string.h>

#include "tide/quant.h"

#ifdef __CUDACC__
#define CUDA_Q_FN static __host__ __device__ __forceinline__
#else
#define CUDA_Q_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One quantized matrix W [rows, cols] in (device or host) memory. Passed to
 * kernels by value. */
struct cuda_qmat {
    const void *values; /* q8_0: int8 [rows, cols]; q4_0: bytes [rows, cols/2]; fp8: e4m3fn
                           bytes [rows, cols] */
    const void *scales; /* [ceil(rows/br), scols]: f16 bits (q8_0, q4_0) or f32 (fp8) */
    int fmt;            /* enum tide_qfmt: Q8_0, Q4_0 or FP8 */
    int br, bc;         /* rows and columns one scale covers ({1, 32} for q8_0 and q4_0) */
    int64_t rows, cols; /* logical shape; cols is a multiple of TIDE_QK */
    int64_t scols;      /* columns of `scales`: ceil(cols / bc) */
};

/* The f32 with bit pattern u. */
CUDA_Q_FN float cuda_q_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e4m3fn -> f32, exact: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
 * infinities, S.1111.111 is NaN, exponent 0 is subnormal (m * 2^-9). */
CUDA_Q_FN float cuda_q_fp8_to_f32(uint8_t b)
{
    const uint32_t sign = (uint32_t)(b & 0x80u) << 24, e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15u && m == 7u)
        return cuda_q_bits_f32(sign | 0x7fc00000u);
    if (e == 0u) { /* subnormal or zero: m * 2^-9, exact; negation keeps -0 */
        const float v = (float)m * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return cuda_q_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

/* IEEE half -> f32, exact (as tide_f16_to_f32). */
CUDA_Q_FN float cuda_q_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) /* inf, NaN */
        return cuda_q_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e != 0u)
        return cuda_q_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    const float v = (float)m * (1.0f / 16777216.0f); /* subnormal or zero: m * 2^-24, exact */
    return sign ? -v : v;
}

/* The q4_0 level (-8 .. 7) of column c of a row of bytes: block b = c / 32
 * is bytes 16b .. 16b+15; byte j holds column 32b+j in its low nibble and
 * 32b+j+16 in its high one. */
CUDA_Q_FN int cuda_q_q4_level(const uint8_t *row, int64_t c)
{
    const int64_t j = c % TIDE_QK;
    const uint8_t byte = row[(c / TIDE_QK) * (TIDE_QK / 2) + j % (TIDE_QK / 2)];
    return (j < TIDE_QK / 2 ? (int)(byte & 15u) : (int)(byte >> 4)) - 8;
}

/* Index into m->scales of the scale of element (r, c). */
CUDA_Q_FN int64_t cuda_q_scale_index(const struct cuda_qmat *m, int64_t r, int64_t c)
{
    return r / m->br * m->scols + c / m->bc;
}

/* The scale of element (r, c) as f32. */
CUDA_Q_FN float cuda_q_scale(const struct cuda_qmat *m, int64_t r, int64_t c)
{
    const int64_t i = cuda_q_scale_index(m, r, c);
    if (m->fmt == TIDE_QFMT_FP8)
        return ((const float *)m->scales)[i];
    return cuda_q_f16_to_f32(((const uint16_t *)m->scales)[i]);
}

/* The stored value of element (r, c), decoded exactly (before its scale). */
CUDA_Q_FN float cuda_q_value(const struct cuda_qmat *m, int64_t r, int64_t c)
{
    switch (m->fmt) {
    case TIDE_QFMT_Q8_0:
        return (float)((const int8_t *)m->values)[r * m->cols + c];
    case TIDE_QFMT_Q4_0:
        return (float)cuda_q_q4_level((const uint8_t *)m->values + r * (m->cols / 2), c);
    default: /* TIDE_QFMT_FP8 */
        return cuda_q_fp8_to_f32(((const uint8_t *)m->values)[r * m->cols + c]);
    }
}

/* W[r][c] = value * scale, rounded once to f32. */
CUDA_Q_FN float cuda_q_weight(const struct cuda_qmat *m, int64_t r, int64_t c)
{
    return cuda_q_value(m, r, c) * cuda_q_scale(m, r, c);
}

#ifdef __cplusplus
}
#endif
#endif
