/* What the backends (backend-cpu-onednn, backend-cuda) check the same way:
 * the arguments of every op, so that all backends refuse the same calls with
 * the same messages; the status of a library call (BKC_TRY); and the host
 * views weight_create reads (bkc_view_f32).
 *
 * Every failure is logged once as "<backend>: <op>: <text>" at error level,
 * where <backend> is the calling plugin's name (struct bkc_id), and returns
 * TIDE_E_INVAL unless stated; success is TIDE_OK. Nothing here allocates,
 * touches backend memory or keeps state; it may be called from any thread.
 *
 * Header-only: a plugin folder, not a library. The including backend defines
 * first struct tide_buffer (with `uint32_t magic` and `size_t bytes`) and
 * struct tide_weight (with `kind`, `rows`, `cols` and `char name[]`). */
#ifndef TIDE_BACKEND_COMMON_CHECK_H
#define TIDE_BACKEND_COMMON_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tide/backend.h"
#include "tide/log.h"
#include "tide/status.h"
#include "tide/tensor.h"

/* The backend doing the checking. */
struct bkc_id {
    const char *name;   /* plugin name: the prefix of every message */
    uint32_t buf_magic; /* tag in this backend's struct tide_buffer */
};

/* Bit for a dtype in the `dtypes` masks below. */
#define BKC_DT(t) (1u << (unsigned)(t))
#define BKC_F32   BKC_DT(TIDE_DTYPE_F32)
#define BKC_BF16  BKC_DT(TIDE_DTYPE_BF16)
#define BKC_ANY                                                                                    \
    (BKC_F32 | BKC_BF16 | BKC_DT(TIDE_DTYPE_F16) | BKC_DT(TIDE_DTYPE_I32) | BKC_DT(TIDE_DTYPE_I64))

/* Log "<name>: <op>: <message>" at error level and return TIDE_E_INVAL. */
static inline int bkc_inval(const char *name, const char *op, const char *fmt, ...)
    TIDE_PRINTF(3, 4);
static inline int bkc_inval(const char *name, const char *op, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tide_error("%s: %s: %s", name, op, msg);
    return TIDE_E_INVAL;
}

/* Evaluate `call`, which returns a status of type T; unless it is `ok`, return
 * fail(op, text, status) from the calling function. The backends wrap it as
 * DNNL_BK_TRY, CUDA_BK_TRY, ..., passing #call as `text` so that the message
 * shows the call as written. */
#define BKC_TRY(T, ok, fail, op, call, text)                                                       \
    do {                                                                                           \
        T st_ = (call);                                                                            \
        if (st_ != (ok))                                                                           \
            return fail((op), (text), st_);                                                        \
    } while (0)

/* ---- tensors and handles ------------------------------------------------ */

/* A tensor view: non-NULL, a buffer of this backend, a dtype in the mask,
 * non-negative shape, stride >= cols and the view inside its buffer. Logged
 * as "<op>: <what> ...". */
static inline int bkc_check_tensor(const struct bkc_id *id, const char *op, const char *what,
                                   const struct tide_tensor *t, unsigned dtypes)
{
    if (!t)
        return bkc_inval(id->name, op, "%s is NULL", what);
    if (!t->buf)
        return bkc_inval(id->name, op, "%s has no buffer", what);
    if (t->buf->magic != id->buf_magic)
        return bkc_inval(id->name, op, "%s is a view of a buffer this backend did not allocate",
                         what);
    if ((unsigned)t->dtype >= 32 || !(dtypes & BKC_DT(t->dtype))) {
        char want[64] = "";
        for (int d = TIDE_DTYPE_F32; d <= TIDE_DTYPE_I32; d++)
            if (dtypes & BKC_DT(d))
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s",
                         want[0] ? " or " : "", tide_dtype_name((enum tide_dtype)d));
        return bkc_inval(id->name, op, "%s is %s, expected %s", what, tide_dtype_name(t->dtype),
                         want);
    }
    if (t->rows < 0 || t->cols < 0 || t->stride < t->cols)
        return bkc_inval(id->name, op, "%s has shape [%lld,%lld] with row stride %lld", what,
                         (long long)t->rows, (long long)t->cols, (long long)t->stride);
    size_t es = tide_dtype_size(t->dtype);
    if (t->offset % es)
        return bkc_inval(id->name, op, "%s offset %zu is not a multiple of its element size", what,
                         t->offset);
    if (t->rows == 0 || t->cols == 0)
        return TIDE_OK;
    /* One past the view's last byte; in double, which is exact far beyond any
     * buffer size, so a huge stride cannot overflow into a small value. */
    double last = ((double)(t->rows - 1) * (double)t->stride + (double)t->cols) * (double)es +
                  (double)t->offset;
    if (last > (double)t->buf->bytes)
        return bkc_inval(id->name, op,
                         "%s [%lld,%lld] (stride %lld, offset %zu) runs past the end of its "
                         "%zu-byte buffer",
                         what, (long long)t->rows, (long long)t->cols, (long long)t->stride,
                         t->offset, t->buf->bytes);
    return TIDE_OK;
}

/* Both views have the same shape. */
static inline int bkc_same_shape(const struct bkc_id *id, const char *op, const char *an,
                                 const struct tide_tensor *a, const char *bn,
                                 const struct tide_tensor *b)
{
    if (a->rows == b->rows && a->cols == b->cols)
        return TIDE_OK;
    return bkc_inval(id->name, op, "%s [%lld,%lld] and %s [%lld,%lld] differ in shape", an,
                     (long long)a->rows, (long long)a->cols, bn, (long long)b->rows,
                     (long long)b->cols);
}

/* A weight handle of the given kind. */
static inline int bkc_check_weight(const struct bkc_id *id, const char *op, const char *what,
                                   const struct tide_weight *w, enum tide_weight_kind kind)
{
    static const char *const kinds[] = {"?", "MATMUL", "VECTOR", "EMBED"};
    if (!w)
        return bkc_inval(id->name, op, "%s is NULL", what);
    if (w->kind != kind)
        return bkc_inval(id->name, op, "%s (%s) is a %s weight, expected %s", what, w->name,
                         kinds[w->kind <= 3 ? w->kind : 0], kinds[kind]);
    return TIDE_OK;
}

/* ---- create, weight_create, expert_create and slot_load ----------------- */

/* create's arguments: non-NULL and at least up to `role`. Clears *out. */
static inline int bkc_check_create(const struct bkc_id *id, const struct tide_backend_args *args,
                                   struct tide_backend **out)
{
    if (!args || !out || args->size < offsetof(struct tide_backend_args, role) + sizeof args->role)
        return bkc_inval(id->name, "create", "NULL or truncated arguments");
    *out = NULL;
    return TIDE_OK;
}

/* weight_create's arguments: non-NULL, and a source of a float dtype, no empty
 * dimension and the rank `kind` needs ([N,K] MATMUL, [C] VECTOR, [V,H] EMBED).
 * Clears *out. */
static inline int bkc_check_weight_create(const struct bkc_id *id, const struct tide_backend *bk,
                                          const struct tide_view *src, enum tide_weight_kind kind,
                                          struct tide_weight **out)
{
    const char *op = "weight_create";
    if (!bk || !src || !out)
        return bkc_inval(id->name, op, "NULL argument");
    *out = NULL;
    const char *name = src->name ? src->name : "?";
    if (!src->data)
        return bkc_inval(id->name, op, "weight %s has no data", name);
    if (src->dtype != TIDE_DTYPE_F32 && src->dtype != TIDE_DTYPE_BF16 &&
        src->dtype != TIDE_DTYPE_F16)
        return bkc_inval(id->name, op, "weight %s is %s, expected BF16, F32 or F16", name,
                         tide_dtype_name(src->dtype));
    for (int d = 0; d < src->ndim; d++)
        if (src->shape[d] <= 0)
            return bkc_inval(id->name, op, "weight %s has an empty dimension", name);
    switch (kind) {
    case TIDE_WEIGHT_MATMUL:
        if (src->ndim != 2)
            return bkc_inval(id->name, op, "MATMUL weight %s has %d dims, expected 2 [N,K]", name,
                             src->ndim);
        return TIDE_OK;
    case TIDE_WEIGHT_VECTOR:
        if (src->ndim != 1 && !(src->ndim == 2 && (src->shape[0] == 1 || src->shape[1] == 1)))
            return bkc_inval(id->name, op, "VECTOR weight %s has %d dims, expected 1", name,
                             src->ndim);
        return TIDE_OK;
    case TIDE_WEIGHT_EMBED:
        if (src->ndim != 2)
            return bkc_inval(id->name, op, "EMBED weight %s has %d dims, expected 2 [V,H]", name,
                             src->ndim);
        return TIDE_OK;
    }
    return bkc_inval(id->name, op, "weight %s: unknown kind %d", name, (int)kind);
}

/* Value i of a host view of dtype F32, BF16 or F16, as f32 (0 for others). */
static inline float bkc_view_f32(const struct tide_view *v, int64_t i)
{
    switch (v->dtype) {
    case TIDE_DTYPE_F32:
        return ((const float *)v->data)[i];
    case TIDE_DTYPE_BF16:
        return tide_bf16_to_f32(((const uint16_t *)v->data)[i]);
    case TIDE_DTYPE_F16:
        return tide_f16_to_f32(((const uint16_t *)v->data)[i]);
    default:
        return 0.0f;
    }
}

/* A routed-expert matrix view `what`: 2-D bf16 of shape [n,k], n, k > 0. */
static inline int bkc_check_expert_view(const struct bkc_id *id, const char *op,
                                        const struct tide_view *v, const char *what, int64_t n,
                                        int64_t k)
{
    if (!v || !v->data)
        return bkc_inval(id->name, op, "%s is NULL", what);
    const char *name = v->name ? v->name : what;
    if (v->dtype != TIDE_DTYPE_BF16)
        return bkc_inval(id->name, op, "%s (%s) is %s, expected BF16", what, name,
                         tide_dtype_name(v->dtype));
    if (v->ndim != 2 || v->shape[0] != n || v->shape[1] != k || n <= 0 || k <= 0)
        return bkc_inval(id->name, op, "%s (%s) has shape %s[%lld,%lld], expected [%lld,%lld]",
                         what, name, v->ndim == 2 ? "" : "(not 2-D) ", (long long)v->shape[0],
                         (long long)(v->ndim > 1 ? v->shape[1] : 0), (long long)n, (long long)k);
    return TIDE_OK;
}

/* gate, up [inter, hidden] and down [hidden, inter]. */
static inline int bkc_check_expert_views(const struct bkc_id *id, const char *op,
                                         const struct tide_view *gate, const struct tide_view *up,
                                         const struct tide_view *down, int64_t hidden,
                                         int64_t inter)
{
    int rc = bkc_check_expert_view(id, op, gate, "gate", inter, hidden);
    if (!rc)
        rc = bkc_check_expert_view(id, op, up, "up", inter, hidden);
    if (!rc)
        rc = bkc_check_expert_view(id, op, down, "down", hidden, inter);
    return rc;
}

/* expert_ffn_batch's experts and offsets: n_experts >= 0, both arrays set
 * when there are experts, offsets[0] = 0 and never decreasing. The experts'
 * own arguments are the backend's to check (its expert_ffn check). */
static inline int bkc_check_batch_offsets(const struct bkc_id *id, int n_experts,
                                          const void *experts, const int64_t *offsets)
{
    const char *op = "expert_ffn_batch";
    if (n_experts < 0 || (n_experts > 0 && (!experts || !offsets)) || (offsets && offsets[0]))
        return bkc_inval(id->name, op,
                         "%d experts with experts %s and offsets %s (offsets[0] must be 0)",
                         n_experts, experts ? "set" : "NULL", offsets ? "set" : "NULL");
    for (int j = 0; j < n_experts; j++)
        if (offsets[j + 1] < offsets[j])
            return bkc_inval(id->name, op, "offsets decrease at %d (%lld, then %lld)", j,
                             (long long)offsets[j], (long long)offsets[j + 1]);
    return TIDE_OK;
}

/* ---- ops (backend.h states each contract) -------------------------------- */

/* embed: an id outside the table is TIDE_E_RANGE. */
static inline int bkc_check_embed(const struct bkc_id *id, const struct tide_weight *table,
                                  const int32_t *ids, int64_t n, const struct tide_tensor *out)
{
    const char *op = "embed";
    int rc = bkc_check_weight(id, op, "table", table, TIDE_WEIGHT_EMBED);
    if (!rc)
        rc = bkc_check_tensor(id, op, "out", out, BKC_F32);
    if (rc)
        return rc;
    if (n < 0 || n != out->rows || out->cols != table->cols || (n && !ids))
        return bkc_inval(
            id->name, op, "%lld ids (%s) into out [%lld,%lld] from table %s [%lld,%lld]",
            (long long)n, ids ? "set" : "NULL", (long long)out->rows, (long long)out->cols,
            table->name, (long long)table->rows, (long long)table->cols);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->rows) {
            tide_error("%s: embed: token id %d (position %lld) is outside the vocabulary [0, "
                       "%lld) of %s",
                       id->name, ids[i], (long long)i, (long long)table->rows, table->name);
            return TIDE_E_RANGE;
        }
    return TIDE_OK;
}

/* matmul: y [T,N] f32 = x [T,K] bf16 times W [N,K] transposed. */
static inline int bkc_check_matmul(const struct bkc_id *id, const struct tide_tensor *x,
                                   const struct tide_weight *w, const struct tide_tensor *y)
{
    const char *op = "matmul";
    int rc = bkc_check_weight(id, op, "w", w, TIDE_WEIGHT_MATMUL);
    if (!rc)
        rc = bkc_check_tensor(id, op, "x", x, BKC_BF16);
    if (!rc)
        rc = bkc_check_tensor(id, op, "y", y, BKC_F32);
    if (rc)
        return rc;
    if (x->cols != w->cols || y->cols != w->rows || x->rows != y->rows)
        return bkc_inval(id->name, op,
                         "shapes do not match: x [%lld,%lld] * %s [%lld,%lld]^T -> y "
                         "[%lld,%lld]",
                         (long long)x->rows, (long long)x->cols, w->name, (long long)w->rows,
                         (long long)w->cols, (long long)y->rows, (long long)y->cols);
    return TIDE_OK;
}

static inline int bkc_check_rmsnorm(const struct bkc_id *id, const struct tide_tensor *x,
                                    const struct tide_weight *w, int group, float eps,
                                    const struct tide_tensor *y)
{
    const char *op = "rmsnorm";
    int rc = bkc_check_tensor(id, op, "x", x, BKC_F32 | BKC_BF16);
    if (!rc)
        rc = bkc_check_tensor(id, op, "y", y, BKC_F32 | BKC_BF16);
    if (!rc)
        rc = bkc_check_weight(id, op, "w", w, TIDE_WEIGHT_VECTOR);
    if (!rc)
        rc = bkc_same_shape(id, op, "x", x, "y", y);
    if (rc)
        return rc;
    if (group <= 0 || x->cols % group || w->cols != group)
        return bkc_inval(id->name, op,
                         "group %d must divide x's %lld columns and equal the length %lld "
                         "of weight %s",
                         group, (long long)x->cols, (long long)w->cols, w->name);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return bkc_inval(id->name, op, "eps = %g is not a finite non-negative number", (double)eps);
    return TIDE_OK;
}

static inline int bkc_check_rope(const struct bkc_id *id, const struct tide_tensor *x, int head_dim,
                                 int rot_dim, float theta, int64_t pos0)
{
    const char *op = "rope";
    int rc = bkc_check_tensor(id, op, "x", x, BKC_F32);
    if (rc)
        return rc;
    if (head_dim <= 0 || x->cols % head_dim || rot_dim < 0 || rot_dim > head_dim || rot_dim % 2)
        return bkc_inval(id->name, op,
                         "head_dim %d must divide x's %lld columns and rot_dim %d must be "
                         "even and in [0, head_dim]",
                         head_dim, (long long)x->cols, rot_dim);
    if (!(theta > 0.0f) || !isfinite(theta) || pos0 < 0)
        return bkc_inval(id->name, op, "theta = %g must be positive and pos0 = %lld non-negative",
                         (double)theta, (long long)pos0);
    return TIDE_OK;
}

static inline int bkc_check_attention(const struct bkc_id *id, const struct tide_attn_args *a)
{
    const char *op = "attention";
    if (!a || a->size < offsetof(struct tide_attn_args, scale) + sizeof a->scale)
        return bkc_inval(id->name, op, "arguments are NULL or truncated");
    int rc = bkc_check_tensor(id, op, "q", a->q, BKC_F32);
    if (!rc)
        rc = bkc_check_tensor(id, op, "k_cache", a->k_cache, BKC_F32);
    if (!rc)
        rc = bkc_check_tensor(id, op, "v_cache", a->v_cache, BKC_F32);
    if (!rc)
        rc = bkc_check_tensor(id, op, "out", a->out, BKC_F32 | BKC_BF16);
    if (rc)
        return rc;
    if (a->n_heads <= 0 || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || a->head_dim <= 0 ||
        a->block <= 0 || a->pos0 < 0 || a->n < 0 || !isfinite(a->scale))
        return bkc_inval(id->name, op,
                         "bad parameters: n_heads %d, n_kv_heads %d, head_dim %d, block "
                         "%d, pos0 %lld, n %lld, scale %g",
                         a->n_heads, a->n_kv_heads, a->head_dim, a->block, (long long)a->pos0,
                         (long long)a->n, (double)a->scale);
    const int64_t qc = (int64_t)a->n_heads * a->head_dim, kc = (int64_t)a->n_kv_heads * a->head_dim;
    if (a->q->rows != a->n || a->q->cols != qc || a->out->rows != a->n || a->out->cols != qc)
        return bkc_inval(id->name, op, "q [%lld,%lld] and out [%lld,%lld] must be [n=%lld, %lld]",
                         (long long)a->q->rows, (long long)a->q->cols, (long long)a->out->rows,
                         (long long)a->out->cols, (long long)a->n, (long long)qc);
    const struct tide_tensor *kv[2] = {a->k_cache, a->v_cache};
    for (int i = 0; i < 2; i++)
        if (kv[i]->cols != kc || kv[i]->rows < a->pos0 + a->n)
            return bkc_inval(id->name, op, "%s is [%lld,%lld], expected at least %lld rows of %lld",
                             i ? "v_cache" : "k_cache", (long long)kv[i]->rows,
                             (long long)kv[i]->cols, (long long)(a->pos0 + a->n), (long long)kc);
    return TIDE_OK;
}

static inline int bkc_check_swiglu(const struct bkc_id *id, const struct tide_tensor *g,
                                   const struct tide_tensor *u, const struct tide_tensor *out)
{
    const char *op = "swiglu";
    int rc = bkc_check_tensor(id, op, "g", g, BKC_F32);
    if (!rc)
        rc = bkc_check_tensor(id, op, "u", u, BKC_F32);
    if (!rc)
        rc = bkc_check_tensor(id, op, "out", out, BKC_BF16);
    if (!rc)
        rc = bkc_same_shape(id, op, "g", g, "u", u);
    if (!rc)
        rc = bkc_same_shape(id, op, "g", g, "out", out);
    return rc;
}

static inline int bkc_check_add(const struct bkc_id *id, const struct tide_tensor *acc,
                                const struct tide_tensor *x)
{
    const char *op = "add";
    int rc = bkc_check_tensor(id, op, "acc", acc, BKC_F32);
    if (!rc)
        rc = bkc_check_tensor(id, op, "x", x, BKC_F32);
    if (!rc)
        rc = bkc_same_shape(id, op, "acc", acc, "x", x);
    return rc;
}

/* convert: f32 <-> bf16, or a copy between views of one dtype. */
static inline int bkc_check_convert(const struct bkc_id *id, const struct tide_tensor *src,
                                    const struct tide_tensor *dst)
{
    const char *op = "convert";
    int rc = bkc_check_tensor(id, op, "src", src, BKC_ANY);
    if (!rc)
        rc = bkc_check_tensor(id, op, "dst", dst, BKC_ANY);
    if (!rc)
        rc = bkc_same_shape(id, op, "src", src, "dst", dst);
    if (rc)
        return rc;
    const bool same = src->dtype == dst->dtype;
    const bool fb = (src->dtype == TIDE_DTYPE_F32 || src->dtype == TIDE_DTYPE_BF16) &&
                    (dst->dtype == TIDE_DTYPE_F32 || dst->dtype == TIDE_DTYPE_BF16);
    if (!same && !fb)
        return bkc_inval(id->name, op,
                         "cannot convert %s to %s (f32 <-> bf16 or same-type copies only)",
                         tide_dtype_name(src->dtype), tide_dtype_name(dst->dtype));
    return TIDE_OK;
}

static inline int bkc_check_router(const struct bkc_id *id, const struct tide_router_args *a)
{
    const char *op = "router";
    if (!a || a->size < offsetof(struct tide_router_args, weights_host) + sizeof a->weights_host)
        return bkc_inval(id->name, op, "arguments are NULL or truncated");
    int rc = bkc_check_tensor(id, op, "logits", a->logits, BKC_F32);
    if (rc)
        return rc;
    const int64_t E = a->logits->cols;
    if (a->bias) {
        rc = bkc_check_weight(id, op, "bias", a->bias, TIDE_WEIGHT_VECTOR);
        if (rc)
            return rc;
        if (a->bias->cols != E)
            return bkc_inval(id->name, op, "bias %s has %lld values for %lld experts",
                             a->bias->name, (long long)a->bias->cols, (long long)E);
    }
    if (a->n_group < 1 || E % a->n_group || a->topk_group < 1 || a->topk_group > a->n_group ||
        a->top_k < 1 || a->top_k > a->topk_group * (E / a->n_group))
        return bkc_inval(id->name, op,
                         "%lld experts cannot take n_group %d, topk_group %d, top_k %d",
                         (long long)E, a->n_group, a->topk_group, a->top_k);
    if (a->logits->rows && (!a->ids_host || !a->weights_host))
        return bkc_inval(id->name, op, "ids_host or weights_host is NULL");
    return TIDE_OK;
}

/* expert_ffn's tensors, once the backend has checked the expert itself:
 * x_all bf16 and out f32, both of the expert's hidden size. */
static inline int bkc_check_ffn_io(const struct bkc_id *id, int64_t hidden,
                                   const struct tide_tensor *x_all, const struct tide_tensor *out)
{
    const char *op = "expert_ffn";
    int rc = bkc_check_tensor(id, op, "x_all", x_all, BKC_BF16);
    if (!rc)
        rc = bkc_check_tensor(id, op, "out", out, BKC_F32);
    if (rc)
        return rc;
    if (x_all->cols != hidden || out->cols != hidden)
        return bkc_inval(id->name, op,
                         "x_all has %lld columns and out %lld, the expert's hidden size "
                         "is %lld",
                         (long long)x_all->cols, (long long)out->cols, (long long)hidden);
    return TIDE_OK;
}

static inline int bkc_check_moe_combine(const struct bkc_id *id, const struct tide_tensor *parts,
                                        const float *w, int k, const struct tide_tensor *y)
{
    const char *op = "moe_combine";
    int rc = bkc_check_tensor(id, op, "parts", parts, BKC_F32);
    if (!rc)
        rc = bkc_check_tensor(id, op, "y", y, BKC_F32);
    if (rc)
        return rc;
    if (k < 1 || parts->rows != y->rows * k || parts->cols != y->cols || (y->rows && !w))
        return bkc_inval(id->name, op,
                         "parts [%lld,%lld] must be [%lld*k, %lld] with k = %d >= 1 and "
                         "w set",
                         (long long)parts->rows, (long long)parts->cols, (long long)y->rows,
                         (long long)y->cols, k);
    return TIDE_OK;
}

#endif
