/* backend-cpu-onednn's rmsnorm row entries: the AVX-512 one (math_avx512.c)
 * gives the bits of the plain one (math_c.c), which sums in the order
 * math_c.c states, and both stay
 * within f32 rounding of a double reference. Covers f32 and bf16 input and
 * output, groups that are and are not multiples of the vector width, several
 * groups per row, and y aliasing x. On a CPU without AVX-512 only the plain
 * path against the reference runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_bk.h"

static int failures;

static float rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f) * 3.0f;
}

/* The row in the input dtype (bf16 values rounded from r). */
static void fill(void *x, bool xb, const float *r, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (xb)
            ((uint16_t *)x)[i] = tide_f32_to_bf16(r[i]);
        else
            ((float *)x)[i] = r[i];
}

static float get(const void *y, bool yb, int64_t i)
{
    return yb ? tide_bf16_to_f32(((const uint16_t *)y)[i]) : ((const float *)y)[i];
}

static void one_case(bool simd_ok, int64_t cols, int group, bool xb, bool yb, bool alias,
                     unsigned seed)
{
    float *r = malloc(sizeof *r * (size_t)cols), *w = malloc(sizeof *w * (size_t)group);
    void *x = malloc(4 * (size_t)cols), *yp = malloc(4 * (size_t)cols),
         *ys = malloc(4 * (size_t)cols);
    for (int64_t i = 0; i < cols; i++)
        r[i] = rnd(&seed);
    for (int j = 0; j < group; j++)
        w[j] = 0.5f + rnd(&seed) / 6.0f;
    const float eps = 1e-6f;
    /* y aliases x only when both have one dtype. */
    alias = alias && xb == yb;
    fill(x, xb, r, cols);
    void *out_p = alias ? x : yp;
    dnnl_bk_rmsnorm_row_c(x, xb, out_p, yb, w, cols, group, eps);
    if (alias)
        memcpy(yp, x, (xb ? 2 : 4) * (size_t)cols);
    /* Against double: the scale within 1e-6 relative, each output within the
     * output's rounding (bf16: 2^-8 relative, f32: 1e-6) plus the scale's. */
    for (int64_t g0 = 0; g0 < cols; g0 += group) {
        double ss = 0;
        for (int j = 0; j < group; j++) {
            double v = xb ? tide_bf16_to_f32(tide_f32_to_bf16(r[g0 + j])) : r[g0 + j];
            ss += v * v;
        }
        const double rr = 1.0 / sqrt(ss / group + eps);
        for (int j = 0; j < group; j++) {
            double v = xb ? tide_bf16_to_f32(tide_f32_to_bf16(r[g0 + j])) : r[g0 + j];
            const double want = v * rr * w[j], got = get(yp, yb, g0 + j);
            const double tol = fabs(want) * (yb ? 1.0 / 128 : 4e-6) + 1e-30;
            if (fabs(got - want) > tol) {
                if (failures++ < 10)
                    fprintf(stderr,
                            "FAIL cols %lld group %d x %s y %s: element %lld = %.9g, double "
                            "reference %.9g\n",
                            (long long)cols, group, xb ? "bf16" : "f32", yb ? "bf16" : "f32",
                            (long long)(g0 + j), got, want);
                goto next;
            }
        }
    }
next:
    if (simd_ok) {
        fill(x, xb, r, cols);
        void *out_s = alias ? x : ys;
        dnnl_bk_rmsnorm_row_avx512(x, xb, out_s, yb, w, cols, group, eps);
        if (memcmp(out_s, yp, (yb ? 2 : 4) * (size_t)cols) != 0 && failures++ < 10)
            fprintf(stderr, "FAIL cols %lld group %d x %s y %s%s: AVX-512 bits differ from plain\n",
                    (long long)cols, group, xb ? "bf16" : "f32", yb ? "bf16" : "f32",
                    alias ? " (in place)" : "");
    }
    free(r);
    free(w);
    free(x);
    free(yp);
    free(ys);
}

int main(void)
{
    char why[256] = "";
    const unsigned flags = dnnl_bk_cpu_flags(why, sizeof why);
    const bool simd_ok = (flags & DNNL_BK_CPU_AVX512) && (flags & DNNL_BK_CPU_AVX512_EXP);
    if (!(flags & DNNL_BK_CPU_AVX512))
        snprintf(why, sizeof why, "this CPU lacks AVX-512 (F, DQ, BW, VL) or FMA");
    if (!simd_ok)
        printf("no AVX-512 path (%s): the plain path against double only\n", why);
    const int groups[] = {1, 7, 8, 16, 24, 100, 128, 2048};
    int cases = 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
        for (int reps = 1; reps <= 3; reps += 2)
            for (int d = 0; d < 4; d++)
                for (int alias = 0; alias < 2; alias++) {
                    one_case(simd_ok, (int64_t)groups[g] * reps, groups[g], d & 1, d & 2, alias,
                             1234u + (unsigned)(g * 16 + reps * 4 + d));
                    cases++;
                }
    printf("%d cases, %d failures\n", cases, failures);
    return failures ? 1 : 0;
}
