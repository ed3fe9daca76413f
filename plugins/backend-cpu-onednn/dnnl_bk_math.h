/* Scalar formulas shared by the ops, written once so every op rounds the same way. */
#ifndef DNNL_BK_MATH_H
#define DNNL_BK_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "tide/tensor.h"

/* Element j of a row of f32 or bf16 values, as f32. */
static inline float dnnl_bk_ld(const void *row, bool bf16, int64_t j)
{
    return bf16 ? tide_bf16_to_f32(((const uint16_t *)row)[j]) : ((const float *)row)[j];
}

/* Store v as element j of a row of f32 or bf16 values (bf16: rounded to nearest even). */
static inline void dnnl_bk_st(void *row, bool bf16, int64_t j, float v)
{
    if (bf16)
        ((uint16_t *)row)[j] = tide_f32_to_bf16(v);
    else
        ((float *)row)[j] = v;
}

/* silu(g) * u = g / (1 + exp(-g)) * u, in f32 (the caller rounds to bf16). */
static inline float dnnl_bk_silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

/* rmsnorm's eight double lanes added in its stated order (math_c.c). */
static inline double dnnl_bk_rms_lanes(const double s[8])
{
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

#endif
