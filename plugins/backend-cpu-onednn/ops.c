/* The non-matmul ops: plain C loops, parallel over rows (or heads) on the
 * backend's threads (pool.c) when the work is large enough to pay for
 * sharing it. Each op
 * follows the rounding points of the numpy reference: f32 arithmetic,
 * double only where backend.h says "f32 or better", bf16 rounding once at
 * the end. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend-common/route.h"
#include "dnnl_bk.h"
#include "dnnl_bk_math.h"

/* Elements below which a loop stays on one thread. */
#define DNNL_BK_PAR_MIN 16384

/* The threads for a loop of `work` elements: all of bk's, or one below min. */
static int ops_threads(const struct tide_backend *bk, int64_t work, int64_t min)
{
    return work >= min ? bk->threads : 1;
}

struct embed_job {
    const struct tide_weight *table;
    const int32_t *ids;
    const struct tide_tensor *out;
};

static void embed_rows(void *c, int64_t i0, int64_t i1)
{
    const struct embed_job *j = c;
    const int64_t H = j->table->cols;
    const size_t es = tide_dtype_size(j->table->dtype);
    for (int64_t i = i0; i < i1; i++) {
        const char *src = (const char *)j->table->data + (size_t)j->ids[i] * (size_t)H * es;
        float *dst = dnnl_bk_at(j->out, i, 0);
        if (j->table->dtype == TIDE_DTYPE_F32)
            memcpy(dst, src, sizeof(float) * (size_t)H);
        else if (j->table->dtype == TIDE_DTYPE_BF16)
            for (int64_t k = 0; k < H; k++)
                dst[k] = tide_bf16_to_f32(((const uint16_t *)src)[k]);
        else
            for (int64_t k = 0; k < H; k++)
                dst[k] = tide_f16_to_f32(((const uint16_t *)src)[k]);
    }
}

int dnnl_bk_embed(struct tide_backend *bk, const struct tide_weight *table, const int32_t *ids,
                  int64_t n, const struct tide_tensor *out)
{
    int rc = bkc_check_embed(&dnnl_bk_id, table, ids, n, out);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const struct embed_job j = {table, ids, out};
    dnnl_bk_par_for(ops_threads(bk, n * table->cols, DNNL_BK_PAR_MIN), n, embed_rows, (void *)&j);
    return TIDE_OK;
}

struct rmsnorm_job {
    const struct tide_tensor *x;
    const struct tide_weight *w;
    int group;
    float eps;
    const struct tide_tensor *y;
    dnnl_bk_rmsnorm_row_fn *row; /* the table's entry */
};

static void rmsnorm_rows(void *c, int64_t r0, int64_t r1)
{
    const struct rmsnorm_job *j = c;
    const bool xb = j->x->dtype == TIDE_DTYPE_BF16, yb = j->y->dtype == TIDE_DTYPE_BF16;
    for (int64_t r = r0; r < r1; r++)
        j->row(dnnl_bk_at(j->x, r, 0), xb, dnnl_bk_at(j->y, r, 0), yb, j->w->vec, j->x->cols,
               j->group, j->eps);
}

int dnnl_bk_rmsnorm(struct tide_backend *bk, const struct tide_tensor *x,
                    const struct tide_weight *w, int group, float eps, const struct tide_tensor *y)
{
    int rc = bkc_check_rmsnorm(&dnnl_bk_id, x, w, group, eps, y);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const struct rmsnorm_job j = {x, w, group, eps, y, bk->kern.rmsnorm_row};
    dnnl_bk_par_for(ops_threads(bk, x->rows * x->cols, DNNL_BK_PAR_MIN), x->rows, rmsnorm_rows,
                    (void *)&j);
    return TIDE_OK;
}

struct rope_table_job {
    float *cs;
    const float *inv;
    int half;
};

static void rope_table_rows(void *c, int64_t p0, int64_t p1)
{
    const struct rope_table_job *j = c;
    const int half = j->half;
    for (int64_t p = p0; p < p1; p++)
        for (int k = 0; k < half; k++) {
            const float angle = (float)p * j->inv[k];
            j->cs[(p * half + k) * 2] = (float)cos((double)angle);
            j->cs[(p * half + k) * 2 + 1] = (float)sin((double)angle);
        }
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
    const struct rope_table_job job = {cs, inv, half};
    dnnl_bk_par_for(ops_threads(bk, cap * half, DNNL_BK_PAR_MIN), cap, rope_table_rows,
                    (void *)&job);
    free(inv);
    free(bk->rope_cs);
    bk->rope_cs = cs;
    bk->rope_pos = cap;
    bk->rope_theta = theta;
    bk->rope_rot = rot_dim;
    return TIDE_OK;
}

struct rope_job {
    const struct tide_tensor *x;
    const float *cs;
    int head_dim, half;
    int64_t pos0;
};

static void rope_rows(void *ctx, int64_t i0, int64_t i1)
{
    const struct rope_job *jb = ctx;
    const int half = jb->half, hd = jb->head_dim;
    const int64_t heads = jb->x->cols / hd;
    for (int64_t i = i0; i < i1; i++) {
        float *row = dnnl_bk_at(jb->x, i, 0);
        const float *cs = jb->cs + (size_t)(jb->pos0 + i) * (size_t)half * 2;
        for (int64_t h = 0; h < heads; h++) {
            float *p = row + h * hd;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                const float c = cs[2 * j], s = cs[2 * j + 1];
                const float x1 = p[j], x2 = p[j + half];
                p[j] = x1 * c - x2 * s;
                p[j + half] = x2 * c + x1 * s;
            }
        }
    }
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
    const struct rope_job j = {x, bk->rope_cs, head_dim, half, pos0};
    dnnl_bk_par_for(ops_threads(bk, x->rows * heads * half, DNNL_BK_PAR_MIN / 4), x->rows,
                    rope_rows, (void *)&j);
    return TIDE_OK;
}

int dnnl_bk_attention(struct tide_backend *bk, const struct tide_attn_args *a)
{
    int rc = bkc_check_attention(&dnnl_bk_id, a);
    if (rc)
        return rc;
    if (a->n == 0)
        return TIDE_OK;
    dnnl_bk_enter(bk);
    return bk->kern.attention(bk, a);
}

struct swiglu_job {
    const struct tide_tensor *g, *u, *out;
    dnnl_bk_silu_fn *silu; /* the table's entry */
};

static void swiglu_rows(void *c, int64_t r0, int64_t r1)
{
    const struct swiglu_job *j = c;
    for (int64_t r = r0; r < r1; r++)
        j->silu(dnnl_bk_at(j->g, r, 0), dnnl_bk_at(j->u, r, 0), dnnl_bk_at(j->out, r, 0),
                j->g->cols);
}

int dnnl_bk_swiglu(struct tide_backend *bk, const struct tide_tensor *g,
                   const struct tide_tensor *u, const struct tide_tensor *out)
{
    int rc = bkc_check_swiglu(&dnnl_bk_id, g, u, out);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const struct swiglu_job j = {g, u, out, bk->kern.silu_mul_bf16};
    dnnl_bk_par_for(ops_threads(bk, g->rows * g->cols, DNNL_BK_PAR_MIN / 4), g->rows, swiglu_rows,
                    (void *)&j);
    return TIDE_OK;
}

struct add_job {
    const struct tide_tensor *acc, *x;
};

static void add_rows(void *c, int64_t r0, int64_t r1)
{
    const struct add_job *jb = c;
    for (int64_t r = r0; r < r1; r++) {
        float *a = dnnl_bk_at(jb->acc, r, 0);
        const float *b = dnnl_bk_at(jb->x, r, 0);
#pragma omp simd
        for (int64_t j = 0; j < jb->acc->cols; j++)
            a[j] += b[j];
    }
}

int dnnl_bk_add(struct tide_backend *bk, const struct tide_tensor *acc, const struct tide_tensor *x)
{
    int rc = bkc_check_add(&dnnl_bk_id, acc, x);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const struct add_job j = {acc, x};
    dnnl_bk_par_for(ops_threads(bk, acc->rows * acc->cols, DNNL_BK_PAR_MIN), acc->rows, add_rows,
                    (void *)&j);
    return TIDE_OK;
}

struct convert_job {
    const struct tide_tensor *src, *dst;
};

static void convert_rows(void *c, int64_t r0, int64_t r1)
{
    const struct convert_job *jb = c;
    const struct tide_tensor *src = jb->src, *dst = jb->dst;
    const bool same = src->dtype == dst->dtype;
    const bool sb = src->dtype == TIDE_DTYPE_BF16, db = dst->dtype == TIDE_DTYPE_BF16;
    const size_t row = (size_t)src->cols * tide_dtype_size(src->dtype);
    for (int64_t r = r0; r < r1; r++) {
        const void *s = dnnl_bk_at(src, r, 0);
        void *d = dnnl_bk_at(dst, r, 0);
        if (same)
            memmove(d, s, row);
        else
            for (int64_t j = 0; j < src->cols; j++)
                dnnl_bk_st(d, db, j, dnnl_bk_ld(s, sb, j));
    }
}

int dnnl_bk_convert(struct tide_backend *bk, const struct tide_tensor *src,
                    const struct tide_tensor *dst)
{
    int rc = bkc_check_convert(&dnnl_bk_id, src, dst);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const struct convert_job j = {src, dst};
    dnnl_bk_par_for(ops_threads(bk, src->rows * src->cols, DNNL_BK_PAR_MIN), src->rows,
                    convert_rows, (void *)&j);
    return TIDE_OK;
}

struct router_job {
    const struct tide_router_args *a;
    _Atomic int failed;
};

/* Thread tid's contiguous share of the tokens (OpenMP's static schedule). */
static void router_tokens(void *c, int tid, int nt)
{
    struct router_job *jb = c;
    const struct tide_router_args *a = jb->a;
    const int64_t n = a->logits->rows, t0 = n * tid / nt, t1 = n * (tid + 1) / nt;
    const int E = (int)a->logits->cols, G = a->n_group;
    const float *bias = a->bias ? a->bias->vec : NULL;
    const size_t fl = sizeof(float) * (size_t)(2 * E + G);
    float *s = malloc(fl + (size_t)(E + G));
    if (!s) {
        atomic_store(&jb->failed, 1);
        return;
    }
    unsigned char *taken = (unsigned char *)s + fl;
    for (int64_t t = t0; t < t1; t++)
        bkc_route_token(a, dnnl_bk_at(a->logits, t, 0), bias, E, s, s + E, taken, s + 2 * E,
                        taken + E, a->ids_host + t * a->top_k, a->weights_host + t * a->top_k);
    free(s);
}

int dnnl_bk_router(struct tide_backend *bk, const struct tide_router_args *a)
{
    int rc = bkc_check_router(&dnnl_bk_id, a);
    if (rc)
        return rc;
    const int64_t n = a->logits->rows;
    dnnl_bk_enter(bk);
    /* A token is ~3 us (E sigmoids, then top-k passes): 32 tokens of 256
     * experts took 109 us on one thread, under DNNL_BK_PAR_MIN elements. */
    struct router_job j = {.a = a};
    dnnl_bk_par(n > 1 ? bk->threads : 1, router_tokens, &j);
    if (atomic_load(&j.failed)) {
        tide_error(DNNL_BK_NAME ": router: out of memory");
        return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}

struct combine_job {
    const struct tide_tensor *parts;
    const float *w;
    int k;
    const struct tide_tensor *y;
};

static void combine_rows(void *c, int64_t t0, int64_t t1)
{
    const struct combine_job *jb = c;
    const int64_t H = jb->y->cols;
    const int k = jb->k;
    for (int64_t t = t0; t < t1; t++) {
        float *yr = dnnl_bk_at(jb->y, t, 0);
        for (int64_t h = 0; h < H; h++)
            yr[h] = 0.0f;
        /* Slot order j = 0..k-1 for every element: the result never depends on placement. */
        for (int j = 0; j < k; j++) {
            const float wj = jb->w[t * k + j];
            const float *p = dnnl_bk_at(jb->parts, t * k + j, 0);
#pragma omp simd
            for (int64_t h = 0; h < H; h++)
                yr[h] += wj * p[h];
        }
    }
}

int dnnl_bk_moe_combine(struct tide_backend *bk, const struct tide_tensor *parts, const float *w,
                        int k, const struct tide_tensor *y)
{
    int rc = bkc_check_moe_combine(&dnnl_bk_id, parts, w, k, y);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const struct combine_job j = {parts, w, k, y};
    dnnl_bk_par_for(ops_threads(bk, parts->rows * y->cols, DNNL_BK_PAR_MIN), y->rows, combine_rows,
                    (void *)&j);
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
