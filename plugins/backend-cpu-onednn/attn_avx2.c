/* The AVX2 entry of attention (attn = avx2), for CPUs without the AVX-512
 * one; attn_c.c's dnnl_bk_attention_tiled drives its kernels, as it drives
 * math_avx512.c's. The arithmetic is the plain loop's (attn_c.c), operation
 * for operation, so the bits are the same:
 *  - scores: K is transposed per call into kt[kv head][dim][key], so one vector holds the partial
 * dot products of 8 keys, each lane summing q[d] * k[d] in the order d = 0, 1, ... with a separate
 * multiply and add, as the scalar loop does; then times scale;
 *  - exp (libm's expf) and the softmax sum stay the plain sequential loops;
 *  - mixing: o += (p[j] / sum) v_j over 8 dimensions at a time, in key order;
 *  - the bf16 output rounding is the plain one.
 * The target leaves FMA out, and ISO C does not contract a * b + c, so no
 * multiply-add is fused. tests/lossless (simd) compares simd = true with
 * false end to end, bit for bit; test_backend_ops runs both against the
 * reference. */
#include <immintrin.h>

#include "dnnl_bk.h"

#define A2_TARGET __attribute__((target("avx2")))

#define A2_HEADS DNNL_BK_ATT_HEADS

/* p[h][j] = scale * (q_h . k_j) for j in [0, len); kt is [hd][ldk] for this
 * KV head (ldk a multiple of 8, zero-padded). */
A2_TARGET static void a2_scores(const float *const *q, int nh, const float *kt, int64_t ldk, int hd,
                                int64_t len, float scale, float *const *p)
{
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t j0 = 0; j0 < len; j0 += 8) {
        __m256 acc[A2_HEADS];
        for (int h = 0; h < A2_HEADS; h++)
            acc[h] = _mm256_setzero_ps();
        const float *k = kt + j0;
        if (nh == A2_HEADS) {
            for (int d = 0; d < hd; d++) {
                const __m256 kv = _mm256_loadu_ps(k + (int64_t)d * ldk);
#pragma GCC unroll 4
                for (int h = 0; h < A2_HEADS; h++)
                    acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(_mm256_set1_ps(q[h][d]), kv));
            }
        } else {
            for (int d = 0; d < hd; d++) {
                const __m256 kv = _mm256_loadu_ps(k + (int64_t)d * ldk);
                for (int h = 0; h < nh; h++)
                    acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(_mm256_set1_ps(q[h][d]), kv));
            }
        }
        for (int h = 0; h < nh; h++)
            _mm256_storeu_ps(p[h] + j0, _mm256_mul_ps(acc[h], sc));
    }
}

/* o[0..hd) = sum_j (p[j] / sum) v_j in key order; v rows at stride ldv; hd a
 * multiple of 8. */
A2_TARGET static void a2_mix(const float *p, float sum, int64_t len, const float *v, int64_t ldv,
                             int hd, float *o)
{
    for (int d0 = 0; d0 < hd; d0 += 64) {
        const int nv = (hd - d0 >= 64 ? 64 : hd - d0) / 8;
        __m256 a[8];
        for (int i = 0; i < 8; i++)
            a[i] = _mm256_setzero_ps();
        for (int64_t j = 0; j < len; j++) {
            const __m256 pj = _mm256_set1_ps(p[j] / sum);
            const float *vj = v + j * ldv + d0;
            if (nv == 8) {
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    a[i] = _mm256_add_ps(a[i], _mm256_mul_ps(pj, _mm256_loadu_ps(vj + 8 * i)));
            } else {
                for (int i = 0; i < nv; i++)
                    a[i] = _mm256_add_ps(a[i], _mm256_mul_ps(pj, _mm256_loadu_ps(vj + 8 * i)));
            }
        }
        for (int i = 0; i < nv; i++)
            _mm256_storeu_ps(o + d0 + 8 * i, a[i]);
    }
}

int dnnl_bk_attention_avx2(struct tide_backend *bk, const struct tide_attn_args *a)
{
    static const struct dnnl_bk_att_kernels k = {a2_scores, a2_mix, dnnl_bk_exp_sub_c,
                                                 dnnl_bk_to_bf16_c};
    if (a->head_dim % 8)
        return dnnl_bk_attention_c(bk, a);
    return dnnl_bk_attention_tiled(bk, a, &k);
}
