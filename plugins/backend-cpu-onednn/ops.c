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

#define DT_F32  DNNL_BK_DT(TIDE_DTYPE_F32)
#define DT_BF16 DNNL_BK_DT(TIDE_DTYPE_BF16)

static inline float dnnl_bk_ld(const void *row, bool bf16, int64_t j)
{
    return bf16 ? tide_bf16_to_f32(((const uint16_t *)row)[j]) : ((const float *)row)[j];
}

static inline void dnnl_bk_st(void *row, bool bf16, int64_t j, float v)
{
    if (bf16)
        ((uint16_t *)row)[j] = tide_f32_to_bf16(v);
    else
        ((float *)row)[j] = v;
}

/* Both views have the same shape, or log "<op>: a [..] and b [..] differ". */
static int dnnl_bk_same_shape(const char *op, const char *an, const struct tide_tensor *a,
                              const char *bn, const struct tide_tensor *b)
{
    if (a->rows == b->rows && a->cols == b->cols)
        return TIDE_OK;
    return dnnl_bk_inval(op, "%s [%lld,%lld] and %s [%lld,%lld] differ in shape", an,
                         (long long)a->rows, (long long)a->cols, bn, (long long)b->rows,
                         (long long)b->cols);
}

int dnnl_bk_embed(struct tide_backend *bk, const struct tide_weight *table, const int32_t *ids,
                  int64_t n, const struct tide_tensor *out)
{
    const char *op = "embed";
    int rc = dnnl_bk_check_weight(op, "table", table, TIDE_WEIGHT_EMBED);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "out", out, DT_F32);
    if (rc)
        return rc;
    if (n < 0 || n != out->rows || out->cols != table->cols || (n && !ids))
        return dnnl_bk_inval(op, "%lld ids (%s) into out [%lld,%lld] from table %s [%lld,%lld]",
                             (long long)n, ids ? "set" : "NULL", (long long)out->rows,
                             (long long)out->cols, table->name, (long long)table->rows,
                             (long long)table->cols);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->rows) {
            tide_error(DNNL_BK_NAME ": embed: token id %d (position %lld) is outside the "
                                    "vocabulary [0, %lld) of %s",
                       ids[i], (long long)i, (long long)table->rows, table->name);
            return TIDE_E_RANGE;
        }
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
    const char *op = "rmsnorm";
    int rc = dnnl_bk_check_tensor(op, "x", x, DT_F32 | DT_BF16);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "y", y, DT_F32 | DT_BF16);
    if (!rc)
        rc = dnnl_bk_check_weight(op, "w", w, TIDE_WEIGHT_VECTOR);
    if (!rc)
        rc = dnnl_bk_same_shape(op, "x", x, "y", y);
    if (rc)
        return rc;
    if (group <= 0 || x->cols % group || w->cols != group)
        return dnnl_bk_inval(op,
                             "group %d must divide x's %lld columns and equal the length %lld "
                             "of weight %s",
                             group, (long long)x->cols, (long long)w->cols, w->name);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return dnnl_bk_inval(op, "eps = %g is not a finite non-negative number", (double)eps);
    dnnl_bk_enter(bk);
    const bool xb = x->dtype == TIDE_DTYPE_BF16, yb = y->dtype == TIDE_DTYPE_BF16;
    const float *wv = w->vec;
#pragma omp parallel for num_threads(bk->threads) if (x->rows * x->cols >= DNNL_BK_PAR_MIN)
    for (int64_t r = 0; r < x->rows; r++) {
        const void *xr = dnnl_bk_at(x, r, 0);
        void *yr = dnnl_bk_at(y, r, 0);
        for (int64_t g0 = 0; g0 < x->cols; g0 += group) {
            double ss = 0.0;
#pragma omp simd reduction(+ : ss)
            for (int j = 0; j < group; j++) {
                double v = dnnl_bk_ld(xr, xb, g0 + j);
                ss += v * v;
            }
            float rr = (float)(1.0 / sqrt(ss / group + (double)eps));
            /* Element j is read before it is written, so y may alias x. */
            for (int j = 0; j < group; j++)
                dnnl_bk_st(yr, yb, g0 + j, dnnl_bk_ld(xr, xb, g0 + j) * rr * wv[j]);
        }
    }
    return TIDE_OK;
}

int dnnl_bk_rope(struct tide_backend *bk, const struct tide_tensor *x, int head_dim, int rot_dim,
                 float theta, int64_t pos0)
{
    const char *op = "rope";
    int rc = dnnl_bk_check_tensor(op, "x", x, DT_F32);
    if (rc)
        return rc;
    if (head_dim <= 0 || x->cols % head_dim || rot_dim < 0 || rot_dim > head_dim || rot_dim % 2)
        return dnnl_bk_inval(op,
                             "head_dim %d must divide x's %lld columns and rot_dim %d must be "
                             "even and in [0, head_dim]",
                             head_dim, (long long)x->cols, rot_dim);
    if (!(theta > 0.0f) || !isfinite(theta) || pos0 < 0)
        return dnnl_bk_inval(op, "theta = %g must be positive and pos0 = %lld non-negative",
                             (double)theta, (long long)pos0);
    if (rot_dim == 0)
        return TIDE_OK;
    const int half = rot_dim / 2;
    float *inv = malloc(sizeof *inv * (size_t)half);
    if (!inv)
        return TIDE_E_NOMEM;
    for (int j = 0; j < half; j++)
        inv[j] = (float)pow((double)theta, -2.0 * j / rot_dim);
    dnnl_bk_enter(bk);
    const int64_t heads = x->cols / head_dim;
#pragma omp parallel for num_threads(bk->threads) if (x->rows * heads * half >= DNNL_BK_PAR_MIN / 4)
    for (int64_t i = 0; i < x->rows; i++) {
        float *row = dnnl_bk_at(x, i, 0);
        const float pos = (float)(pos0 + i);
        for (int j = 0; j < half; j++) {
            float angle = pos * inv[j];
            float c = (float)cos((double)angle), s = (float)sin((double)angle);
            for (int64_t h = 0; h < heads; h++) {
                float *p = row + h * head_dim;
                float x1 = p[j], x2 = p[j + half];
                p[j] = x1 * c - x2 * s;
                p[j + half] = x2 * c + x1 * s;
            }
        }
    }
    free(inv);
    return TIDE_OK;
}

/* Validate the attention arguments. */
static int dnnl_bk_attn_check(const struct tide_attn_args *a)
{
    const char *op = "attention";
    if (!a || a->size < offsetof(struct tide_attn_args, scale) + sizeof a->scale)
        return dnnl_bk_inval(op, "arguments are NULL or truncated");
    int rc = dnnl_bk_check_tensor(op, "q", a->q, DT_F32);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "k_cache", a->k_cache, DT_F32);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "v_cache", a->v_cache, DT_F32);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "out", a->out, DT_F32 | DT_BF16);
    if (rc)
        return rc;
    if (a->n_heads <= 0 || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || a->head_dim <= 0 ||
        a->block <= 0 || a->pos0 < 0 || a->n < 0 || !isfinite(a->scale))
        return dnnl_bk_inval(op,
                             "bad parameters: n_heads %d, n_kv_heads %d, head_dim %d, block "
                             "%d, pos0 %lld, n %lld, scale %g",
                             a->n_heads, a->n_kv_heads, a->head_dim, a->block, (long long)a->pos0,
                             (long long)a->n, (double)a->scale);
    const int64_t qc = (int64_t)a->n_heads * a->head_dim, kc = (int64_t)a->n_kv_heads * a->head_dim;
    if (a->q->rows != a->n || a->q->cols != qc || a->out->rows != a->n || a->out->cols != qc)
        return dnnl_bk_inval(op, "q [%lld,%lld] and out [%lld,%lld] must be [n=%lld, %lld]",
                             (long long)a->q->rows, (long long)a->q->cols, (long long)a->out->rows,
                             (long long)a->out->cols, (long long)a->n, (long long)qc);
    const struct tide_tensor *kv[2] = {a->k_cache, a->v_cache};
    for (int i = 0; i < 2; i++)
        if (kv[i]->cols != kc || kv[i]->rows < a->pos0 + a->n)
            return dnnl_bk_inval(op, "%s is [%lld,%lld], expected at least %lld rows of %lld",
                                 i ? "v_cache" : "k_cache", (long long)kv[i]->rows,
                                 (long long)kv[i]->cols, (long long)(a->pos0 + a->n),
                                 (long long)kc);
    return TIDE_OK;
}

int dnnl_bk_attention(struct tide_backend *bk, const struct tide_attn_args *a)
{
    int rc = dnnl_bk_attn_check(a);
    if (rc)
        return rc;
    const int64_t n = a->n, total = a->pos0 + a->n;
    const int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const bool ob = a->out->dtype == TIDE_DTYPE_BF16;
    if (n == 0)
        return TIDE_OK;
    dnnl_bk_enter(bk);
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
    const char *op = "swiglu";
    int rc = dnnl_bk_check_tensor(op, "g", g, DT_F32);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "u", u, DT_F32);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "out", out, DT_BF16);
    if (!rc)
        rc = dnnl_bk_same_shape(op, "g", g, "u", u);
    if (!rc)
        rc = dnnl_bk_same_shape(op, "g", g, "out", out);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
#pragma omp parallel for num_threads(bk->threads) if (g->rows * g->cols >= DNNL_BK_PAR_MIN / 4)
    for (int64_t r = 0; r < g->rows; r++) {
        const float *gr = dnnl_bk_at(g, r, 0), *ur = dnnl_bk_at(u, r, 0);
        uint16_t *o = dnnl_bk_at(out, r, 0);
        for (int64_t j = 0; j < g->cols; j++)
            o[j] = tide_f32_to_bf16(dnnl_bk_silu_mul(gr[j], ur[j]));
    }
    return TIDE_OK;
}

int dnnl_bk_add(struct tide_backend *bk, const struct tide_tensor *acc, const struct tide_tensor *x)
{
    const char *op = "add";
    int rc = dnnl_bk_check_tensor(op, "acc", acc, DT_F32);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "x", x, DT_F32);
    if (!rc)
        rc = dnnl_bk_same_shape(op, "acc", acc, "x", x);
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
    const char *op = "convert";
    const unsigned any = DT_F32 | DT_BF16 | DNNL_BK_DT(TIDE_DTYPE_F16) |
                         DNNL_BK_DT(TIDE_DTYPE_I32) | DNNL_BK_DT(TIDE_DTYPE_I64);
    int rc = dnnl_bk_check_tensor(op, "src", src, any);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "dst", dst, any);
    if (!rc)
        rc = dnnl_bk_same_shape(op, "src", src, "dst", dst);
    if (rc)
        return rc;
    const bool same = src->dtype == dst->dtype;
    const bool fb = (src->dtype == TIDE_DTYPE_F32 || src->dtype == TIDE_DTYPE_BF16) &&
                    (dst->dtype == TIDE_DTYPE_F32 || dst->dtype == TIDE_DTYPE_BF16);
    if (!same && !fb)
        return dnnl_bk_inval(op, "cannot convert %s to %s (f32 <-> bf16 or same-type copies only)",
                             tide_dtype_name(src->dtype), tide_dtype_name(dst->dtype));
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

/* Validate the router arguments. */
static int dnnl_bk_router_check(const struct tide_router_args *a)
{
    const char *op = "router";
    if (!a || a->size < offsetof(struct tide_router_args, weights_host) + sizeof a->weights_host)
        return dnnl_bk_inval(op, "arguments are NULL or truncated");
    int rc = dnnl_bk_check_tensor(op, "logits", a->logits, DT_F32);
    if (rc)
        return rc;
    const int64_t E = a->logits->cols;
    if (a->bias) {
        rc = dnnl_bk_check_weight(op, "bias", a->bias, TIDE_WEIGHT_VECTOR);
        if (rc)
            return rc;
        if (a->bias->cols != E)
            return dnnl_bk_inval(op, "bias %s has %lld values for %lld experts", a->bias->name,
                                 (long long)a->bias->cols, (long long)E);
    }
    if (a->n_group < 1 || E % a->n_group || a->topk_group < 1 || a->topk_group > a->n_group ||
        a->top_k < 1 || a->top_k > a->topk_group * (E / a->n_group))
        return dnnl_bk_inval(op, "%lld experts cannot take n_group %d, topk_group %d, top_k %d",
                             (long long)E, a->n_group, a->topk_group, a->top_k);
    if (a->logits->rows && (!a->ids_host || !a->weights_host))
        return dnnl_bk_inval(op, "ids_host or weights_host is NULL");
    return TIDE_OK;
}

int dnnl_bk_router(struct tide_backend *bk, const struct tide_router_args *a)
{
    int rc = dnnl_bk_router_check(a);
    if (rc)
        return rc;
    const int64_t n = a->logits->rows;
    const int E = (int)a->logits->cols, G = a->n_group;
    const float *bias = a->bias ? a->bias->vec : NULL;
    dnnl_bk_enter(bk);
    int failed = 0;
#pragma omp parallel num_threads(bk->threads) if (n * E >= DNNL_BK_PAR_MIN)
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
    const char *op = "moe_combine";
    int rc = dnnl_bk_check_tensor(op, "parts", parts, DT_F32);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, "y", y, DT_F32);
    if (rc)
        return rc;
    if (k < 1 || parts->rows != y->rows * k || parts->cols != y->cols || (y->rows && !w))
        return dnnl_bk_inval(op,
                             "parts [%lld,%lld] must be [%lld*k, %lld] with k = %d >= 1 and "
                             "w set",
                             (long long)parts->rows, (long long)parts->cols, (long long)y->rows,
                             (long long)y->cols, k);
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
    const unsigned any = DT_F32 | DT_BF16 | DNNL_BK_DT(TIDE_DTYPE_F16) |
                         DNNL_BK_DT(TIDE_DTYPE_I32) | DNNL_BK_DT(TIDE_DTYPE_I64);
    int rc = dnnl_bk_check_tensor(op, tn, table, any);
    if (!rc)
        rc = dnnl_bk_check_tensor(op, pn, packed, DNNL_BK_DT(table->dtype));
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
