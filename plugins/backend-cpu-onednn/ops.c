/* The non-matmul ops: plain C loops, parallel over rows (or heads) with
 * OpenMP when the work is large enough to pay for waking the team. Each op
 * follows the rounding points of the numpy reference: f32 arithmetic,
 * double only where backend.h says "f32 or better", bf16 rounding once at
 * the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend-common/route.h"
#include "dnnl_bk.h"
#include "dnnl_bk_math.h"

/* Elements below which a loop stays on one thread. */
#define DNNL_BK_PAR_MIN 16384

int dnnl_bk_embed(struct tide_backend *bk, const struct tide_weight *table, const int32_t *ids,
                  int64_t n, const struct tide_tensor *out)
{
    int rc = bkc_check_embed(&dnnl_bk_id, table, ids, n, out);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const int64_t H = table->cols;
    const size_t es = tide_dtype_size(table->dtype);
#pragma omp parallel for num_threads(bk->threads) if (n * H >= DNNL_BK_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        const char *src = (const char *)table->data + (size_t)ids[i] * (size_t)H * es;
        float *dst = dnnl_bk_at(out, i, 0);
        if (table->dtype == TIDE_DTYPE_F32)
            memcpy(dst, src, sizeof(float) * (size_t)H);
        else if (table->dtype == TIDE_DTYPE_BF16)
            for (int64_t j = 0; j < H; j++)
                dst[j] = tide_bf16_to_f32(((const uint16_t *)src)[j]);
        else
            for (int64_t j = 0; j < H; j++)
                dst[j] = tide_f16_to_f32(((const uint16_t *)src)[j]);
    }
    return TIDE_OK;
}

int dnnl_bk_rmsnorm(struct tide_backend *bk, const struct tide_tensor *x,
                    const struct tide_weight *w, int group, float eps, const struct tide_tensor *y)
{
    int rc = bkc_check_rmsnorm(&dnnl_bk_id, x, w, group, eps, y);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const bool xb = x->dtype == TIDE_DTYPE_BF16, yb = y->dtype == TIDE_DTYPE_BF16;
    const bool simd = dnnl_bk_simd_on(bk);
#pragma omp parallel for num_threads(bk->threads) if (x->rows * x->cols >= DNNL_BK_PAR_MIN)
    for (int64_t r = 0; r < x->rows; r++)
        dnnl_bk_rmsnorm_row(simd, dnnl_bk_at(x, r, 0), xb, dnnl_bk_at(y, r, 0), yb, w->vec, x->cols,
                            group, eps);
    return TIDE_OK;
}

/* Make bk->rope_cs hold the angles of positions [0, npos) for (theta,
 * rot_dim), computed exactly as the loop they replace did: the inverse
 * frequency pow(theta, -2j/rot) in double rounded to f32, the angle pos * inv
 * in f32, its cos and sin in double rounded to f32. */
static int dnnl_bk_rope_table(struct tide_backend *bk, float theta, int rot_dim, int64_t npos)
{
    const int half = rot_dim / 2;
    if (bk->rope_cs && bk->rope_theta == theta && bk->rope_rot == rot_dim && npos <= bk->rope_pos)
        return TIDE_OK;
    int64_t cap = npos < 4096 ? 4096 : npos;
    if (bk->rope_cs && bk->rope_theta == theta && bk->rope_rot == rot_dim && cap < 2 * bk->rope_pos)
        cap = 2 * bk->rope_pos;
    float *cs = malloc(sizeof *cs * 2 * (size_t)half * (size_t)cap + 1);
    float *inv = malloc(sizeof *inv * (size_t)half + 1);
    if (!cs || !inv) {
        free(cs);
        free(inv);
        tide_error(DNNL_BK_NAME ": rope: out of memory for the angles of %lld positions",
                   (long long)cap);
        return TIDE_E_NOMEM;
    }
    for (int j = 0; j < half; j++)
        inv[j] = (float)pow((double)theta, -2.0 * j / rot_dim);
#pragma omp parallel for num_threads(bk->threads) if (cap * half >= DNNL_BK_PAR_MIN)
    for (int64_t p = 0; p < cap; p++)
        for (int j = 0; j < half; j++) {
            const float angle = (float)p * inv[j];
            cs[(p * half + j) * 2] = (float)cos((double)angle);
            cs[(p * half + j) * 2 + 1] = (float)sin((double)angle);
        }
    free(inv);
    free(bk->rope_cs);
    bk->rope_cs = cs;
    bk->rope_pos = cap;
    bk->rope_theta = theta;
    bk->rope_rot = rot_dim;
    return TIDE_OK;
}

int dnnl_bk_rope(struct tide_backend *bk, const struct tide_tensor *x, int head_dim, int rot_dim,
                 float theta, int64_t pos0)
{
    int rc = bkc_check_rope(&dnnl_bk_id, x, head_dim, rot_dim, theta, pos0);
    if (rc)
        return rc;
    if (rot_dim == 0 || x->rows == 0)
        return TIDE_OK;
    dnnl_bk_enter(bk);
    if ((rc = dnnl_bk_rope_table(bk, theta, rot_dim, pos0 + x->rows)))
        return rc;
    const int half = rot_dim / 2;
    const int64_t heads = x->cols / head_dim;
#pragma omp parallel for num_threads(bk->threads) if (x->rows * heads * half >= DNNL_BK_PAR_MIN / 4)
    for (int64_t i = 0; i < x->rows; i++) {
        float *row = dnnl_bk_at(x, i, 0);
        const float *cs = bk->rope_cs + (size_t)(pos0 + i) * (size_t)half * 2;
        for (int64_t h = 0; h < heads; h++) {
            float *p = row + h * head_dim;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                const float c = cs[2 * j], s = cs[2 * j + 1];
                const float x1 = p[j], x2 = p[j + half];
                p[j] = x1 * c - x2 * s;
                p[j + half] = x2 * c + x1 * s;
            }
        }
    }
    return TIDE_OK;
}

int dnnl_bk_attention(struct tide_backend *bk, const struct tide_attn_args *a)
{
    int rc = bkc_check_attention(&dnnl_bk_id, a);
    if (rc)
        return rc;
    const int64_t n = a->n, total = a->pos0 + a->n;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const bool ob = a->out->dtype == TIDE_DTYPE_BF16;
    if (n == 0)
        return TIDE_OK;
    dnnl_bk_enter(bk);
    if (dnnl_bk_simd_on(bk) && hd % 16 == 0)
        return dnnl_bk_attention_simd(bk, a);
    if (bk->simd_avx2 && hd % 8 == 0)
        return dnnl_bk_attention_avx2(bk, a);
    int failed = 0;
#pragma omp parallel num_threads(bk->threads) if (n * a->n_heads > 1)
    {
        /* Per thread: scores over the visible keys, and the f32 output row. */
        float *p = malloc(sizeof *p * (size_t)(total + hd));
        if (!p) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int64_t i = 0; i < n; i++)
            for (int h = 0; h < a->n_heads; h++) {
                if (!p)
                    continue;
                float *o = p + total;
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
    if (failed) {
        tide_error(DNNL_BK_NAME ": attention: out of memory for %lld scores", (long long)total);
        return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}

int dnnl_bk_swiglu(struct tide_backend *bk, const struct tide_tensor *g,
                   const struct tide_tensor *u, const struct tide_tensor *out)
{
    int rc = bkc_check_swiglu(&dnnl_bk_id, g, u, out);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
#pragma omp parallel for num_threads(bk->threads) if (g->rows * g->cols >= DNNL_BK_PAR_MIN / 4)
    for (int64_t r = 0; r < g->rows; r++)
        dnnl_bk_silu_mul_bf16(bk->simd, dnnl_bk_at(g, r, 0), dnnl_bk_at(u, r, 0),
                              dnnl_bk_at(out, r, 0), g->cols);
    return TIDE_OK;
}

int dnnl_bk_add(struct tide_backend *bk, const struct tide_tensor *acc, const struct tide_tensor *x)
{
    int rc = bkc_check_add(&dnnl_bk_id, acc, x);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
#pragma omp parallel for num_threads(bk->threads) if (acc->rows * acc->cols >= DNNL_BK_PAR_MIN)
    for (int64_t r = 0; r < acc->rows; r++) {
        float *a = dnnl_bk_at(acc, r, 0);
        const float *b = dnnl_bk_at(x, r, 0);
#pragma omp simd
        for (int64_t j = 0; j < acc->cols; j++)
            a[j] += b[j];
    }
    return TIDE_OK;
}

int dnnl_bk_convert(struct tide_backend *bk, const struct tide_tensor *src,
                    const struct tide_tensor *dst)
{
    int rc = bkc_check_convert(&dnnl_bk_id, src, dst);
    if (rc)
        return rc;
    const bool same = src->dtype == dst->dtype;
    dnnl_bk_enter(bk);
    const bool sb = src->dtype == TIDE_DTYPE_BF16, db = dst->dtype == TIDE_DTYPE_BF16;
    const size_t row = (size_t)src->cols * tide_dtype_size(src->dtype);
#pragma omp parallel for num_threads(bk->threads) if (src->rows * src->cols >= DNNL_BK_PAR_MIN)
    for (int64_t r = 0; r < src->rows; r++) {
        const void *s = dnnl_bk_at(src, r, 0);
        void *d = dnnl_bk_at(dst, r, 0);
        if (same)
            memmove(d, s, row);
        else
            for (int64_t j = 0; j < src->cols; j++)
                dnnl_bk_st(d, db, j, dnnl_bk_ld(s, sb, j));
    }
    return TIDE_OK;
}

int dnnl_bk_router(struct tide_backend *bk, const struct tide_router_args *a)
{
    int rc = bkc_check_router(&dnnl_bk_id, a);
    if (rc)
        return rc;
    const int64_t n = a->logits->rows;
    const int E = (int)a->logits->cols, G = a->n_group;
    const float *bias = a->bias ? a->bias->vec : NULL;
    dnnl_bk_enter(bk);
    int failed = 0;
    /* A token is ~3 us (E sigmoids, then top-k passes): 32 tokens of 256
     * experts took 109 us on one thread, under DNNL_BK_PAR_MIN elements. */
#pragma omp parallel num_threads(bk->threads) if (n > 1)
    {
        size_t fl = sizeof(float) * (size_t)(2 * E + G);
        float *s = malloc(fl + (size_t)(E + G));
        if (!s) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for
        for (int64_t t = 0; t < n; t++) {
            if (!s)
                continue;
            unsigned char *taken = (unsigned char *)s + fl;
            bkc_route_token(a, dnnl_bk_at(a->logits, t, 0), bias, E, s, s + E, taken, s + 2 * E,
                            taken + E, a->ids_host + t * a->top_k, a->weights_host + t * a->top_k);
        }
        free(s);
    }
    if (failed) {
        tide_error(DNNL_BK_NAME ": router: out of memory");
        return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}

int dnnl_bk_moe_combine(struct tide_backend *bk, const struct tide_tensor *parts, const float *w,
                        int k, const struct tide_tensor *y)
{
    int rc = bkc_check_moe_combine(&dnnl_bk_id, parts, w, k, y);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const int64_t H = y->cols;
#pragma omp parallel for num_threads(bk->threads) if (parts->rows * H >= DNNL_BK_PAR_MIN)
    for (int64_t t = 0; t < y->rows; t++) {
        float *yr = dnnl_bk_at(y, t, 0);
        for (int64_t h = 0; h < H; h++)
            yr[h] = 0.0f;
        /* Slot order j = 0..k-1 for every element: the result never depends on placement. */
        for (int j = 0; j < k; j++) {
            const float wj = w[t * k + j];
            const float *p = dnnl_bk_at(parts, t * k + j, 0);
#pragma omp simd
            for (int64_t h = 0; h < H; h++)
                yr[h] += wj * p[h];
        }
    }
    return TIDE_OK;
}

/* Validate a row gather/scatter: `packed` is [n, cols] of the same dtype as
 * `table`, and every rows[i] is inside table. */
static int dnnl_bk_rows_check(const char *op, const struct tide_tensor *table, const char *tn,
                              const struct tide_tensor *packed, const char *pn, const int32_t *rows,
                              int64_t n)
{
    int rc = bkc_check_tensor(&dnnl_bk_id, op, tn, table, BKC_ANY);
    if (!rc)
        rc = bkc_check_tensor(&dnnl_bk_id, op, pn, packed, BKC_DT(table->dtype));
    if (rc)
        return rc;
    if (n < 0 || packed->rows != n || packed->cols != table->cols || (n && !rows))
        return dnnl_bk_inval(op, "%s must be [n=%lld, %lld] with rows set, not [%lld,%lld]", pn,
                             (long long)n, (long long)table->cols, (long long)packed->rows,
                             (long long)packed->cols);
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= table->rows)
            return dnnl_bk_inval(op, "rows[%lld] = %d is outside %s's %lld rows", (long long)i,
                                 rows[i], tn, (long long)table->rows);
    return TIDE_OK;
}

int dnnl_bk_gather_rows(struct tide_backend *bk, const struct tide_tensor *src, const int32_t *rows,
                        int64_t n, const struct tide_tensor *dst)
{
    int rc = dnnl_bk_rows_check("gather_rows", src, "src", dst, "dst", rows, n);
    if (rc)
        return rc;
    const size_t row = (size_t)src->cols * tide_dtype_size(src->dtype);
    for (int64_t i = 0; i < n; i++)
        memmove(dnnl_bk_at(dst, i, 0), dnnl_bk_at(src, rows[i], 0), row);
    return TIDE_OK;
}

int dnnl_bk_scatter_rows(struct tide_backend *bk, const struct tide_tensor *src,
                         const int32_t *rows, int64_t n, const struct tide_tensor *dst)
{
    int rc = dnnl_bk_rows_check("scatter_rows", dst, "dst", src, "src", rows, n);
    if (rc)
        return rc;
    const size_t row = (size_t)src->cols * tide_dtype_size(src->dtype);
    for (int64_t i = 0; i < n; i++)
        memmove(dnnl_bk_at(dst, rows[i], 0), dnnl_bk_at(src, i, 0), row);
    return TIDE_OK;
}
