/* The plain C entries of the kernel table's element-wise math, the
 * reference twins of math_avx512.c: SiLU x up with the bf16 rounding, exp of
 * a row minus its maximum, f32 -> bf16 rows and the rmsnorm row. */
#include <math.h>

#include "dnnl_bk.h"
#include "dnnl_bk_math.h"

void dnnl_bk_silu_mul_bf16_c(const float *g, const float *u, uint16_t *h, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        h[i] = tide_f32_to_bf16(dnnl_bk_silu_mul(g[i], u[i]));
}

void dnnl_bk_exp_sub_c(float *x, int64_t n, float m)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = expf(x[i] - m);
}

void dnnl_bk_to_bf16_c(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = tide_f32_to_bf16(x[i]);
}

/* rmsnorm: one order for the sum of squares, in both paths: element j of a
 * group goes to double lane j % 8 (squares of f32 values are exact in double), the
 * lanes then add as ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)); the scale is
 * 1/sqrt(ss/group + eps) rounded to f32 and each output (x * scale) * w in
 * f32. A row's result depends on its own values alone. */
void dnnl_bk_rmsnorm_row_c(const void *x, bool xb, void *y, bool yb, const float *w, int64_t cols,
                           int group, float eps)
{
    for (int64_t g0 = 0; g0 < cols; g0 += group) {
        double s[8] = {0};
        for (int j = 0; j < group; j++) {
            const double v = dnnl_bk_ld(x, xb, g0 + j);
            s[j % 8] += v * v;
        }
        const float rr = (float)(1.0 / sqrt(dnnl_bk_rms_lanes(s) / group + (double)eps));
        /* Element j is read before it is written, so y may alias x. */
        for (int j = 0; j < group; j++)
            dnnl_bk_st(y, yb, g0 + j, dnnl_bk_ld(x, xb, g0 + j) * rr * w[j]);
    }
}
