/* Block-causal GQA attention in plain C (table entry attn = c), the
 * reference the vector entries (math_avx512.c, attn_avx2.c) must match bit
 * for bit, and the tiled driver those entries share: K transposed once per
 * call, then each entry's scores and mixing kernels over it. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_bk.h"
#include "dnnl_bk_math.h"

struct attention_job {
    const struct tide_attn_args *a;
    _Atomic int64_t next; /* the next (query, head) item: dynamic scheduling */
    _Atomic int failed;
};

/* The plain loop: (query, head) items taken one at a time. */
static void attention_items(void *c, int tid, int nt)
{
    (void)tid;
    (void)nt;
    struct attention_job *jb = c;
    const struct tide_attn_args *a = jb->a;
    const int64_t n = a->n, total = a->pos0 + a->n;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const bool ob = a->out->dtype == TIDE_DTYPE_BF16;
    /* Per thread: scores over the visible keys, and the f32 output row. */
    float *p = malloc(sizeof *p * (size_t)(total + hd));
    if (!p) {
        atomic_store(&jb->failed, 1);
        return;
    }
    float *o = p + total;
    for (int64_t it; (it = atomic_fetch_add(&jb->next, 1)) < n * a->n_heads;) {
        const int64_t i = it / a->n_heads;
        const int h = (int)(it % a->n_heads);
        const int64_t pos = a->pos0 + i;
        const int64_t vis_end = (pos / a->block + 1) * a->block;
        const int64_t L = vis_end < total ? vis_end : total;
        const float *q = (const float *)dnnl_bk_at(a->q, i, 0) + (int64_t)h * hd;
        const int64_t kvo = (int64_t)(h / group) * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j < L; j++) {
            const float *k = (const float *)dnnl_bk_at(a->k_cache, j, 0) + kvo;
            /* In order, not vectorised: a reassociated sum is as exact but
             * moves a bf16 rounding of the tiny e2e model just enough to
             * flip a routing choice against the numpy reference. */
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += q[d] * k[d];
            p[j] = dot * a->scale;
            mx = p[j] > mx ? p[j] : mx;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < L; j++) {
            p[j] = expf(p[j] - mx);
            sum += p[j];
        }
        for (int d = 0; d < hd; d++)
            o[d] = 0.0f;
        for (int64_t j = 0; j < L; j++) {
            const float *v = (const float *)dnnl_bk_at(a->v_cache, j, 0) + kvo;
            const float pj = p[j] / sum;
#pragma omp simd
            for (int d = 0; d < hd; d++)
                o[d] += pj * v[d];
        }
        void *dst = (char *)dnnl_bk_at(a->out, i, 0) +
                    (size_t)h * (size_t)hd * tide_dtype_size(a->out->dtype);
        for (int d = 0; d < hd; d++)
            dnnl_bk_st(dst, ob, d, o[d]);
    }
    free(p);
}

int dnnl_bk_attention_c(struct tide_backend *bk, const struct tide_attn_args *a)
{
    struct attention_job jb = {.a = a};
    dnnl_bk_par(a->n * a->n_heads > 1 ? bk->threads : 1, attention_items, &jb);
    if (atomic_load(&jb.failed)) {
        tide_error(DNNL_BK_NAME ": attention: out of memory for %lld scores",
                   (long long)(a->pos0 + a->n));
        return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}

struct transpose_job {
    const struct tide_tensor *kc;
    int hd;
    int64_t total, ldk, jb;
    float *kt;
};

/* Items it of (KV head g, 64-key band b), g = it / jb. */
static void att_transpose_items(void *c, int64_t i0, int64_t i1)
{
    const struct transpose_job *t = c;
    const int hd = t->hd;
    for (int64_t it = i0; it < i1; it++) {
        const int g = (int)(it / t->jb);
        const int64_t b = it % t->jb;
        const int64_t j0 = b * 64, j1 = j0 + 64 < t->ldk ? j0 + 64 : t->ldk;
        for (int64_t j = j0; j < j1; j++) {
            const float *k = j < t->total ? (const float *)dnnl_bk_at(t->kc, j, 0) + g * hd : NULL;
            for (int d = 0; d < hd; d++)
                t->kt[((int64_t)g * hd + d) * t->ldk + j] = k ? k[d] : 0.0f;
        }
    }
}

/* kt[g][d][j] = k_cache[j][g*hd + d] for j < total, 0 for j in [total, ldk). */
static void att_transpose_k(const struct tide_tensor *kc, int nkv, int hd, int64_t total,
                            int64_t ldk, float *kt, int threads)
{
    const int64_t jb = (total + 63) / 64;
    const struct transpose_job t = {kc, hd, total, ldk, jb, kt};
    dnnl_bk_par_for(total * nkv * hd >= 65536 ? threads : 1, nkv * jb, att_transpose_items,
                    (void *)&t);
}

struct tiled_job {
    const struct tide_attn_args *a;
    const struct dnnl_bk_att_kernels *kern;
    const float *kt;
    int64_t ldk;
    _Atomic int64_t next; /* the next (query, KV head) item: dynamic scheduling */
    _Atomic int failed;
};

static void att_tiled_items(void *c, int tid, int nt)
{
    (void)tid;
    (void)nt;
    struct tiled_job *jb = c;
    const struct tide_attn_args *a = jb->a;
    const struct dnnl_bk_att_kernels *kern = jb->kern;
    const int64_t n = a->n, total = a->pos0 + a->n, ldk = jb->ldk;
    const int hd = a->head_dim, nkv = a->n_kv_heads, group = a->n_heads / a->n_kv_heads;
    const bool ob = a->out->dtype == TIDE_DTYPE_BF16;
    const float *kt = jb->kt;
    /* Per thread: scores of the group's heads over the visible keys, and one
     * output row. */
    float *p = malloc(sizeof *p * ((size_t)DNNL_BK_ATT_HEADS * (size_t)ldk + (size_t)hd));
    if (!p) {
        atomic_store(&jb->failed, 1);
        return;
    }
    float *o = p + (size_t)DNNL_BK_ATT_HEADS * (size_t)ldk;
    for (int64_t it; (it = atomic_fetch_add(&jb->next, 1)) < n * nkv;) {
        const int64_t i = it / nkv;
        const int g = (int)(it % nkv);
        const int64_t pos = a->pos0 + i;
        const int64_t vis_end = (pos / a->block + 1) * a->block;
        const int64_t len = vis_end < total ? vis_end : total;
        const float *vg = (const float *)dnnl_bk_at(a->v_cache, 0, 0) + (int64_t)g * hd;
        for (int h0 = 0; h0 < group; h0 += DNNL_BK_ATT_HEADS) {
            const int nh = group - h0 < DNNL_BK_ATT_HEADS ? group - h0 : DNNL_BK_ATT_HEADS;
            const float *q[DNNL_BK_ATT_HEADS];
            float *ph[DNNL_BK_ATT_HEADS];
            for (int h = 0; h < nh; h++) {
                q[h] = (const float *)dnnl_bk_at(a->q, i, 0) + (int64_t)(g * group + h0 + h) * hd;
                ph[h] = p + (size_t)h * (size_t)ldk;
            }
            kern->scores(q, nh, kt + (int64_t)g * hd * ldk, ldk, hd, len, a->scale, ph);
            /* Each head's maximum and sum in key order, as the plain loop;
             * the heads side by side, so that the additions of one wait on
             * each other but not on another head's (4 chains of adds instead
             * of one: the sums were a fifth of the attention core). */
            float mx[DNNL_BK_ATT_HEADS], sum[DNNL_BK_ATT_HEADS];
            for (int h = 0; h < nh; h++)
                mx[h] = -INFINITY;
            for (int64_t j = 0; j < len; j++)
                for (int h = 0; h < nh; h++)
                    mx[h] = ph[h][j] > mx[h] ? ph[h][j] : mx[h];
            for (int h = 0; h < nh; h++) {
                kern->exp_sub(ph[h], len, mx[h]);
                sum[h] = 0.0f;
            }
            for (int64_t j = 0; j < len; j++)
                for (int h = 0; h < nh; h++)
                    sum[h] += ph[h][j];
            for (int h = 0; h < nh; h++) {
                kern->mix(ph[h], sum[h], len, vg, a->v_cache->stride, hd, o);
                const int head = g * group + h0 + h;
                void *dst = (char *)dnnl_bk_at(a->out, i, 0) +
                            (size_t)head * (size_t)hd * tide_dtype_size(a->out->dtype);
                if (ob)
                    kern->to_bf16(o, dst, hd);
                else
                    memcpy(dst, o, sizeof *o * (size_t)hd);
            }
        }
    }
    free(p);
}

int dnnl_bk_attention_tiled(struct tide_backend *bk, const struct tide_attn_args *a,
                            const struct dnnl_bk_att_kernels *kern)
{
    const int64_t n = a->n, total = a->pos0 + a->n, ldk = (total + 15) / 16 * 16;
    const int hd = a->head_dim, nkv = a->n_kv_heads;
    int rc = dnnl_bk_scratch(bk, sizeof(float) * (size_t)(nkv * hd) * (size_t)ldk);
    if (rc)
        return rc;
    float *kt = bk->scratch;
    att_transpose_k(a->k_cache, nkv, hd, total, ldk, kt, bk->threads);
    struct tiled_job jb = {.a = a, .kern = kern, .kt = kt, .ldk = ldk};
    dnnl_bk_par(n * nkv > 1 ? bk->threads : 1, att_tiled_items, &jb);
    if (atomic_load(&jb.failed)) {
        tide_error(DNNL_BK_NAME ": attention: out of memory for %lld scores", (long long)total);
        return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}
