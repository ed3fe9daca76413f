/* Block-causal GQA attention on AVX2, for CPUs without AVX-512 (where
 * simd.c's path does not run). The arithmetic is the plain loop's (ops.c),
 * operation for operation, so the bits are the same:
 *  - scores: K is transposed per call into kt[kv head][dim][key]
 *    (dnnl_bk_transpose_k), so one vector holds the partial dot products of 8
 *    keys, each lane summing q[d] * k[d] in the order d = 0, 1, ... with a
 *    separate multiply and add, as the scalar loop does; then times scale;
 *  - exp (libm's expf) and the softmax sum stay the plain sequential loops;
 *  - mixing: o += (p[j] / sum) v_j over 8 dimensions at a time, in key order;
 *  - the bf16 output rounding is the plain one.
 * The target leaves FMA out, and ISO C does not contract a * b + c, so no
 * multiply-add is fused. tests/lossless (simd) compares simd = true with
 * false end to end, bit for bit; test_backend_ops runs both against the
 * reference. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_bk.h"

#define A2_TARGET __attribute__((target("avx2")))

/* Heads of one GQA group handled together (they share the K loads). */
#define A2_HEADS 4

bool dnnl_bk_avx2_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

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
    const int64_t n = a->n, total = a->pos0 + a->n, ldk = (total + 15) / 16 * 16;
    const int hd = a->head_dim, nkv = a->n_kv_heads, group = a->n_heads / a->n_kv_heads;
    const bool ob = a->out->dtype == TIDE_DTYPE_BF16;
    int rc = dnnl_bk_scratch(bk, sizeof(float) * (size_t)(nkv * hd) * (size_t)ldk);
    if (rc)
        return rc;
    float *kt = bk->scratch;
    dnnl_bk_transpose_k(a->k_cache, nkv, hd, total, ldk, kt, bk->threads);
    int failed = 0;
#pragma omp parallel num_threads(bk->threads) if (n * nkv > 1)
    {
        float *p = malloc(sizeof *p * ((size_t)A2_HEADS * (size_t)ldk + (size_t)hd));
        if (!p) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++)
            for (int g = 0; g < nkv; g++) {
                if (!p)
                    continue;
                float *o = p + (size_t)A2_HEADS * (size_t)ldk;
                const int64_t pos = a->pos0 + i;
                const int64_t vis_end = (pos / a->block + 1) * a->block;
                const int64_t len = vis_end < total ? vis_end : total;
                const float *vg = (const float *)dnnl_bk_at(a->v_cache, 0, 0) + (int64_t)g * hd;
                for (int h0 = 0; h0 < group; h0 += A2_HEADS) {
                    const int nh = group - h0 < A2_HEADS ? group - h0 : A2_HEADS;
                    const float *q[A2_HEADS];
                    float *ph[A2_HEADS];
                    for (int h = 0; h < nh; h++) {
                        q[h] = (const float *)dnnl_bk_at(a->q, i, 0) +
                               (int64_t)(g * group + h0 + h) * hd;
                        ph[h] = p + (size_t)h * (size_t)ldk;
                    }
                    a2_scores(q, nh, kt + (int64_t)g * hd * ldk, ldk, hd, len, a->scale, ph);
                    for (int h = 0; h < nh; h++) {
                        float mx = -INFINITY;
                        for (int64_t j = 0; j < len; j++)
                            mx = ph[h][j] > mx ? ph[h][j] : mx;
                        dnnl_bk_exp_sub(false, ph[h], len, mx);
                        float sum = 0.0f;
                        for (int64_t j = 0; j < len; j++)
                            sum += ph[h][j];
                        a2_mix(ph[h], sum, len, vg, a->v_cache->stride, hd, o);
                        const int head = g * group + h0 + h;
                        void *dst = (char *)dnnl_bk_at(a->out, i, 0) +
                                    (size_t)head * (size_t)hd * tide_dtype_size(a->out->dtype);
                        if (ob)
                            dnnl_bk_to_bf16(false, o, dst, hd);
                        else
                            memcpy(dst, o, sizeof *o * (size_t)hd);
                    }
                }
            }
        free(p);
    }
    if (failed) {
        tide_error(DNNL_BK_NAME ": attention: out of memory for %lld scores", (long long)total);
        return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}
