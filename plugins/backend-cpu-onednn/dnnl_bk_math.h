/* Scalar formulas shared by the ops, written once so every op rounds the same way. */
#ifndef DNNL_BK_MATH_H
#define DNNL_BK_MATH_H

#include <math.h>

/* silu(g) * u = g / (1 + exp(-g)) * u, in f32 (the caller rounds to bf16). */
static inline float dnnl_bk_silu_mul(float g, float u)
{
    return g / (1.0f + expf(-g)) * u;
}

#endif
