/* AVX-512 (F, DQ, BW, VL) entries of the kernel table: exp, SiLU x up with
 * the bf16 rounding, f32 -> bf16 rows, the rmsnorm row and the attention's
 * scores and mixing. Each returns the same bits as its plain C twin
 * (math_c.c, attn_c.c), so the `simd` option never changes a token or a
 * logit:
 *  - exp is expf as glibc 2.27+ computes it on a CPU with FMA (the
 *    exp2f-table method: x/ln2 split into k/32 + r with one FMA, 2^(k/32) from
 *    a 32-entry table, a cubic in r, all in double, rounded once to float),
 *    evaluated 8 lanes at a time with the same fused operations. Inputs with
 *    |x| >= 88, where glibc takes its special paths, go to expf itself. At
 *    start-up (dnnl_bk_avx512_exp_check) the vector code is checked against this
 *    process's expf on ~70k inputs spanning the range; any difference (another
 *    libm) turns the vector path off and logs why.
 *  - division, multiplication and the bf16 rounding (integer round to nearest
 *    even, quiet NaNs) are exact IEEE operations in both versions. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_bk.h"
#include "dnnl_bk_math.h"

#define SIMD_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))

/* 2^(i/32) as double bits, minus i << 47 (so adding k << 47 scales by 2^(k>>5)). */
static double simd_tab[32];

/* The constants of the method: 32/ln2, 1.5 * 2^52 (round to integer by
 * addition), and the cubic's coefficients for 2^(r/32) - 1 ~ C2 r + C1 r^2 + C0 r^3. */
static const double SIMD_INVLN2N = 0x1.71547652b82fep+5;
static const double SIMD_SHIFT = 0x1.8p+52;
static const double SIMD_C0 = 0x1.c6af84b912394p-20;
static const double SIMD_C1 = 0x1.ebfce50fac4f3p-13;
static const double SIMD_C2 = 0x1.62e42ff0c52d6p-6;

/* exp of 8 floats given as doubles with |x| < 88. */
SIMD_TARGET static inline __m256 simd_exp8(__m512d xd)
{
    const __m512d inv = _mm512_set1_pd(SIMD_INVLN2N), shift = _mm512_set1_pd(SIMD_SHIFT);
    __m512d z = _mm512_fmadd_pd(inv, xd, shift);
    __m512i ki = _mm512_castpd_si512(z);
    __m512d kd = _mm512_sub_pd(z, shift);
    __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const double *t = simd_tab;
    __m512d lo = _mm512_permutex2var_pd(_mm512_loadu_pd(t), idx, _mm512_loadu_pd(t + 8));
    __m512d hi = _mm512_permutex2var_pd(_mm512_loadu_pd(t + 16), idx, _mm512_loadu_pd(t + 24));
    __mmask8 upper = _mm512_test_epi64_mask(idx, _mm512_set1_epi64(16));
    __m512i tb = _mm512_castpd_si512(_mm512_mask_mov_pd(lo, upper, hi));
    __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(tb, _mm512_slli_epi64(ki, 47)));
    __m512d zz = _mm512_fmadd_pd(_mm512_set1_pd(SIMD_C0), r, _mm512_set1_pd(SIMD_C1));
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(SIMD_C2), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(zz, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

/* expf of 16 floats: the vector method where |x| < 88, libm's expf elsewhere. */
SIMD_TARGET static inline __m512 simd_exp16(__m512 x)
{
    __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(simd_exp8(a)), simd_exp8(b), 1);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(88.0f), _CMP_NLT_UQ);
    if (big) { /* rare: overflow, underflow, infinities, NaN */
        float xs[16], ys[16];
        _mm512_storeu_ps(xs, x);
        _mm512_storeu_ps(ys, y);
        for (int i = 0; i < 16; i++)
            if (big & (1u << i))
                ys[i] = expf(xs[i]);
        y = _mm512_loadu_ps(ys);
    }
    return y;
}

/* tide_f32_to_bf16 on 16 lanes: round to nearest even; NaNs stay quiet NaNs. */
SIMD_TARGET static inline __m256i simd_bf16(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan,
                              _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040)));
    return _mm512_cvtepi32_epi16(r);
}

SIMD_TARGET void dnnl_bk_silu_mul_bf16_avx512(const float *g, const float *u, uint16_t *h,
                                              int64_t n)
{
    int64_t i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i);
        __m512 e = simd_exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        __m512 y = _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i));
        _mm256_storeu_si256((__m256i *)(h + i), simd_bf16(y));
    }
    for (; i < n; i++)
        h[i] = tide_f32_to_bf16(dnnl_bk_silu_mul(g[i], u[i]));
}

SIMD_TARGET void dnnl_bk_exp_sub_avx512(float *x, int64_t n, float m)
{
    int64_t i = 0;
    const __m512 mv = _mm512_set1_ps(m);
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, simd_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv)));
    for (; i < n; i++)
        x[i] = expf(x[i] - m);
}

SIMD_TARGET void dnnl_bk_to_bf16_avx512(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), simd_bf16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] = tide_f32_to_bf16(x[i]);
}

/* ---- rmsnorm: the order math_c.c states ---- */

/* n <= 16 elements at p as f32 (bf16 widened), the rest 0. */
SIMD_TARGET static inline __m512 rms_ld16(const void *p, bool bf16, int64_t j, int n)
{
    const __mmask16 m = (__mmask16)((1u << n) - 1);
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + j)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)p + j);
}

SIMD_TARGET void dnnl_bk_rmsnorm_row_avx512(const void *x, bool xb, void *y, bool yb,
                                            const float *w, int64_t cols, int group, float eps)
{
    for (int64_t g0 = 0; g0 < cols; g0 += group) {
        __m512d acc = _mm512_setzero_pd();
        for (int j = 0; j < group; j += 8) {
            const int n = group - j < 8 ? group - j : 8;
            const __m512d v = _mm512_cvtps_pd(_mm512_castps512_ps256(rms_ld16(x, xb, g0 + j, n)));
            acc = _mm512_add_pd(acc, _mm512_mul_pd(v, v)); /* masked lanes add +0 */
        }
        double s[8];
        _mm512_storeu_pd(s, acc);
        const float rr = (float)(1.0 / sqrt(dnnl_bk_rms_lanes(s) / group + (double)eps));
        const __m512 rv = _mm512_set1_ps(rr);
        for (int j = 0; j < group; j += 16) {
            const int n = group - j < 16 ? group - j : 16;
            const __mmask16 m = (__mmask16)((1u << n) - 1);
            const __m512 v = _mm512_mul_ps(_mm512_mul_ps(rms_ld16(x, xb, g0 + j, n), rv),
                                           _mm512_maskz_loadu_ps(m, w + j));
            if (yb)
                _mm256_mask_storeu_epi16((uint16_t *)y + g0 + j, m, simd_bf16(v));
            else
                _mm512_mask_storeu_ps((float *)y + g0 + j, m, v);
        }
    }
}

/* expf over 16 inputs by the vector path, for the start-up check. */
SIMD_TARGET static void simd_exp_block(const float *x, float *y)
{
    _mm512_storeu_ps(y, simd_exp16(_mm512_loadu_ps(x)));
}

bool dnnl_bk_avx512_exp_check(char *why, size_t why_len)
{
    static int state = -1; /* -1 unknown, 0 off, 1 on */
    static char reason[160];
    if (state >= 0) {
        snprintf(why, why_len, "%s", reason);
        return state == 1;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("fma")) {
        snprintf(reason, sizeof reason, "this CPU lacks AVX-512 (F, DQ, BW, VL) or FMA");
        state = 0;
        snprintf(why, why_len, "%s", reason);
        return false;
    }
    for (int i = 0; i < 32; i++) {
        double v = exp2((double)i / 32.0);
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        bits -= (uint64_t)i << 47;
        memcpy(&simd_tab[i], &bits, sizeof bits);
    }
    /* Inputs: every 2^16th float bit pattern in (-104, 89) of both signs,
     * plus the edges of the vector path's range and values near 0. */
    int bad = 0, checked = 0;
    float first_x = 0, xs[16], ys[16];
    int k = 0;
    for (uint64_t b = 0; b <= 0xffffffffu && !bad; b += 0x10000u - 7u) {
        float x;
        uint32_t u = (uint32_t)b;
        memcpy(&x, &u, sizeof x);
        if (!(fabsf(x) < 104.0f))
            continue;
        xs[k++] = x;
        if (k < 16)
            continue;
        simd_exp_block(xs, ys);
        for (int i = 0; i < 16; i++, checked++)
            if (memcmp(&ys[i], &(float){expf(xs[i])}, sizeof(float)) && !bad++)
                first_x = xs[i];
        k = 0;
    }
    const float edges[16] = {87.99999f, -87.99999f, 88.0f, -88.0f, 0.0f, -0.0f, 1e-30f,  -1e-30f,
                             FLT_MIN,   -FLT_MIN,   1.0f,  -1.0f,  0.5f, 80.0f, -100.0f, 103.9f};
    simd_exp_block(edges, ys);
    for (int i = 0; i < 16; i++, checked++)
        if (memcmp(&ys[i], &(float){expf(edges[i])}, sizeof(float)) && !bad++)
            first_x = edges[i];
    if (bad) {
        snprintf(reason, sizeof reason,
                 "the vector exp differs from this libm's expf (first at x = %.9g, %d of %d "
                 "inputs)",
                 (double)first_x, bad, checked);
        state = 0;
    } else {
        snprintf(reason, sizeof reason, "AVX-512, exp checked against expf on %d inputs", checked);
        state = 1;
    }
    snprintf(why, why_len, "%s", reason);
    return state == 1;
}

/* ---- attention ------------------------------------------------------------
 * Block-causal GQA attention with the plain loop's arithmetic (attn_c.c), done
 * a vector of keys at a time: K is transposed per call into
 * kt[kv head][dim][key], so one vector holds the partial dot products of 16
 * (AVX-512) or 8 (AVX2, attn_avx2.c) keys, each lane summing q[d] * k[d] in
 * the order d = 0, 1, ... as the scalar loop does. The softmax sum stays a
 * sequential loop; exp, the mixing o += (p / sum) v (over dimensions, in key
 * order) and the bf16 rounding are the same operations vectorised (exp and
 * the rounding on the AVX-512 path only). dnnl_bk_attention_tiled (attn_c.c)
 * is the driver both paths share; each brings its scores and mixing kernels. */

#define SIMD_ATT_HEADS DNNL_BK_ATT_HEADS

/* p[h][j] = scale * q_h . k_j for j in [0, len), the SIMD_ATT_HEADS or fewer
 * heads nh whose queries are q[h]; kt is [hd][ldk] for this KV head. */
SIMD_TARGET static void simd_scores(const float *const *q, int nh, const float *kt, int64_t ldk,
                                    int hd, int64_t len, float scale, float *const *p)
{
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t j0 = 0; j0 < len; j0 += 16) {
        __m512 acc[SIMD_ATT_HEADS];
        for (int h = 0; h < SIMD_ATT_HEADS; h++)
            acc[h] = _mm512_setzero_ps();
        const float *k = kt + j0;
        if (nh == SIMD_ATT_HEADS) {
            for (int d = 0; d < hd; d++) {
                const __m512 kv = _mm512_loadu_ps(k + (int64_t)d * ldk);
#pragma GCC unroll 4
                for (int h = 0; h < SIMD_ATT_HEADS; h++)
                    acc[h] = _mm512_add_ps(acc[h], _mm512_mul_ps(_mm512_set1_ps(q[h][d]), kv));
            }
        } else {
            for (int d = 0; d < hd; d++) {
                const __m512 kv = _mm512_loadu_ps(k + (int64_t)d * ldk);
                for (int h = 0; h < nh; h++)
                    acc[h] = _mm512_add_ps(acc[h], _mm512_mul_ps(_mm512_set1_ps(q[h][d]), kv));
            }
        }
        for (int h = 0; h < nh; h++)
            _mm512_storeu_ps(p[h] + j0, _mm512_mul_ps(acc[h], sc));
    }
}

/* o[0..hd) = sum_j (p[j] / sum) v_j, in key order; v rows at stride ldv. */
SIMD_TARGET static void simd_mix(const float *p, float sum, int64_t len, const float *v,
                                 int64_t ldv, int hd, float *o)
{
    for (int d0 = 0; d0 < hd; d0 += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        const int w = hd - d0 >= 64 ? 64 : hd - d0; /* a multiple of 16 */
        for (int64_t j = 0; j < len; j++) {
            const __m512 pj = _mm512_set1_ps(p[j] / sum);
            const float *vj = v + j * ldv + d0;
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(pj, _mm512_loadu_ps(vj)));
            if (w > 16)
                a1 = _mm512_add_ps(a1, _mm512_mul_ps(pj, _mm512_loadu_ps(vj + 16)));
            if (w > 32)
                a2 = _mm512_add_ps(a2, _mm512_mul_ps(pj, _mm512_loadu_ps(vj + 32)));
            if (w > 48)
                a3 = _mm512_add_ps(a3, _mm512_mul_ps(pj, _mm512_loadu_ps(vj + 48)));
        }
        _mm512_storeu_ps(o + d0, a0);
        if (w > 16)
            _mm512_storeu_ps(o + d0 + 16, a1);
        if (w > 32)
            _mm512_storeu_ps(o + d0 + 32, a2);
        if (w > 48)
            _mm512_storeu_ps(o + d0 + 48, a3);
    }
}

int dnnl_bk_attention_avx512(struct tide_backend *bk, const struct tide_attn_args *a)
{
    static const struct dnnl_bk_att_kernels k = {simd_scores, simd_mix, dnnl_bk_exp_sub_avx512,
                                                 dnnl_bk_to_bf16_avx512};
    if (a->head_dim % 16)
        return dnnl_bk_attention_c(bk, a);
    return dnnl_bk_attention_tiled(bk, a, &k);
}
