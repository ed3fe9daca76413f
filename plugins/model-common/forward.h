/* model-common: pieces of a decoder forward pass over backend ops that are the
 * same for every model: loading a checked weight onto the backend, the
 * routed experts' registration, activation and KV cache buffers, a SwiGLU
 * MLP, the attention over the KV cache with its output projection and
 * residual, the output layer, and the span checks of a forward call.
 * Header-only. What is the model's own (weight names, router, mask, rope,
 * q/k norms) stays in its plugin and is passed in. Work counting for the
 * profile stays with the caller, which knows its phases. */
#ifndef MODEL_COMMON_FORWARD_H
#define MODEL_COMMON_FORWARD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model-common/config.h"
#include "model-common/slots.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/model.h"
#include "tide/moe.h"
#include "tide/plugin.h"
#include "tide/safetensors.h"
#include "tide/status.h"

/* Create a backend weight from checkpoint tensor name, checked for dtype and
 * shape {d0, d1} (ndim 1: {d0}); who names the plugin in the message. */
static inline int mc_load_weight(const char *who, const struct tide_st *st,
                                 const struct tide_backend_ref *dev, const char *name,
                                 enum tide_dtype dt, int ndim, int64_t d0, int64_t d1,
                                 enum tide_weight_kind kind, struct tide_weight **out)
{
    const int64_t shape[2] = {d0, d1};
    const struct tide_view *v;
    int rc = tide_st_expect(st, name, dt, ndim, shape, &v);
    if (rc != TIDE_OK)
        return rc;
    rc = dev->ops->weight_create(dev->bk, v, kind, out);
    if (rc != TIDE_OK)
        tide_error("%s: backend %s could not take tensor '%s': %s", who, dev->name, name,
                   tide_status_str(rc));
    return rc;
}

/* bf16 copies of a checkpoint's FP8 dense weights, owned by the model until
 * it closes (a backend may alias a weight's memory). */
struct mc_dequant {
    void **bufs;
    int n, cap;
};

static inline void mc_dequant_free(struct mc_dequant *d)
{
    for (int i = 0; i < d->n; i++)
        free(d->bufs[i]);
    free(d->bufs);
    d->bufs = NULL;
    d->n = d->cap = 0;
}

/* mc_load_weight, and for a checkpoint whose quantization_config is fp8: a
 * 2-D weight stored as F8_E4M3 with its weight_scale_inv (published FP8
 * checkpoints quantize the attention and dense layers too) is dequantized
 * once at load into bf16 (each value * scale in f32, rounded to bf16) and
 * made a weight from that copy, which dq keeps. */
static inline int mc_load_weight_q(const char *who, const struct tide_st *st,
                                   const struct tide_backend_ref *dev, const struct mc_quant *q,
                                   struct mc_dequant *dq, const char *name, enum tide_dtype dt,
                                   int ndim, int64_t d0, int64_t d1, enum tide_weight_kind kind,
                                   struct tide_weight **out)
{
    const struct tide_view *v = tide_st_find(st, name);
    if (!q || q->fmt != TIDE_QFMT_FP8 || dt != TIDE_DTYPE_BF16 || ndim != 2 || !v ||
        v->dtype != TIDE_DTYPE_F8_E4M3)
        return mc_load_weight(who, st, dev, name, dt, ndim, d0, d1, kind, out);
    const int64_t shape[2] = {d0, d1};
    int rc = tide_st_expect(st, name, TIDE_DTYPE_F8_E4M3, 2, shape, &v);
    if (rc != TIDE_OK)
        return rc;
    char sn[192], why[400];
    const size_t base = strlen(name) > 6 ? strlen(name) - 6 : 0; /* less "weight" */
    snprintf(sn, sizeof sn, "%.*sweight_scale_inv", (int)base, name);
    int64_t ss[2];
    tide_qmat_scale_shape(q->block, d0, d1, ss);
    const struct tide_view *s;
    if ((rc = tide_st_expect(st, sn, TIDE_DTYPE_F32, 2, ss, &s)) != TIDE_OK)
        return rc;
    struct tide_view qv;
    if (tide_qview_make(v, s, TIDE_QFMT_FP8, q->block, d0, d1, &qv, why, sizeof why)) {
        tide_error("%s: %s", who, why);
        return TIDE_E_FORMAT;
    }
    if (dq->n == dq->cap) {
        int cap = dq->cap ? 2 * dq->cap : 64;
        void **b = realloc(dq->bufs, sizeof *b * (size_t)cap);
        if (!b)
            return TIDE_E_NOMEM;
        dq->bufs = b;
        dq->cap = cap;
    }
    uint16_t *w = malloc(sizeof *w * (size_t)(d0 * d1));
    float *row = malloc(sizeof *row * (size_t)d1);
    if (!w || !row) {
        free(w);
        free(row);
        return TIDE_E_NOMEM;
    }
    for (int64_t r = 0; r < d0; r++) {
        tide_qview_row_f32(&qv, r, row);
        for (int64_t c = 0; c < d1; c++)
            w[r * d1 + c] = tide_f32_to_bf16(row[c]);
    }
    free(row);
    dq->bufs[dq->n++] = w;
    struct tide_view bv = {.data = w,
                           .dtype = TIDE_DTYPE_BF16,
                           .ndim = 2,
                           .shape = {d0, d1},
                           .nbytes = sizeof *w * (size_t)(d0 * d1),
                           .name = v->name};
    rc = dev->ops->weight_create(dev->bk, &bv, kind, out);
    if (rc != TIDE_OK)
        tide_error("%s: backend %s could not take tensor '%s' (fp8, dequantized to bf16): %s", who,
                   dev->name, name, tide_status_str(rc));
    return rc;
}

/* Open the checkpoint's safetensors in args->dir with the load flags args
 * carries (older callers' args have none), then declare the model's MoE
 * shape to the dispatcher args->moe (nothing without MoE layers). */
static inline int mc_open_checkpoint(const struct tide_model_args *args, int n_moe_layers,
                                     int n_experts, int top_k, int hidden, int moe_inter,
                                     const struct mc_quant *quant, struct tide_st **st)
{
    const unsigned load =
        args->size >= offsetof(struct tide_model_args, load_flags) + sizeof args->load_flags
            ? args->load_flags
            : 0u;
    int rc = tide_st_open_flags(args->dir, load, st);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_moe_shape shape = {
        .size = sizeof shape,
        .n_layers = n_moe_layers,
        .n_experts = n_experts,
        .top_k = top_k,
        .hidden = hidden,
        .inter = moe_inter,
        .qfmt = quant ? quant->fmt : TIDE_QFMT_NONE,
        .qblock = {quant ? quant->block[0] : 0, quant ? quant->block[1] : 0},
    };
    if (shape.n_layers > 0)
        rc = tide_moe_declare(args->moe, &shape);
    return rc;
}

/* Destroy a backend weight (NULL: nothing) and clear the pointer. */
static inline void mc_weight_free(const struct tide_backend_ref *dev, struct tide_weight **w)
{
    if (*w)
        dev->ops->weight_destroy(dev->bk, *w);
    *w = NULL;
}

/* Check and register the n_experts routed experts of checkpoint layer l
 * (model.layers.<l>.mlp.experts.<e>.{gate,up,down}_proj.weight, width inter
 * over hidden H) as MoE layer moe_index of the dispatcher: bf16, or in the
 * format q says, with their scales beside them (tide/quant.h). A quantized
 * expert's views are made in store[3 * n_experts], which must live as long
 * as the model (NULL when q is bf16). */
static inline int mc_register_experts(const struct tide_st *st, struct tide_moe *moe, int l,
                                      int moe_index, int n_experts, int64_t inter, int64_t H,
                                      const struct mc_quant *q, struct tide_view *store)
{
    const int fmt = q ? q->fmt : TIDE_QFMT_NONE;
    char n[160], sn[160], why[400];
    for (int e = 0; e < n_experts; e++) {
        static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
        const struct tide_view *v[3];
        for (int j = 0; j < 3; j++) {
            const int64_t rows = j < 2 ? inter : H, cols = j < 2 ? H : inter;
            int64_t shape[2];
            tide_qmat_value_shape(fmt, rows, cols, shape);
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, proj[j]);
            int rc = tide_st_expect(st, n, tide_qfmt_value_dtype(fmt), 2, shape, &v[j]);
            if (rc != TIDE_OK)
                return rc;
            if (fmt == TIDE_QFMT_NONE)
                continue;
            snprintf(sn, sizeof sn, "model.layers.%d.mlp.experts.%d.%s.%s", l, e, proj[j],
                     tide_qfmt_scale_name(fmt));
            int64_t ss[2];
            tide_qmat_scale_shape(q->block, rows, cols, ss);
            const struct tide_view *s;
            if ((rc = tide_st_expect(st, sn, tide_qfmt_scale_dtype(fmt), 2, ss, &s)) != TIDE_OK)
                return rc;
            struct tide_view *qv = &store[(size_t)e * 3 + (size_t)j];
            if (tide_qview_make(v[j], s, fmt, q->block, rows, cols, qv, why, sizeof why)) {
                tide_error("%s: %s", tide_st_path(st), why);
                return TIDE_E_FORMAT;
            }
            v[j] = qv;
        }
        int rc = tide_moe_register_expert(moe, moe_index, e, v[0], v[1], v[2]);
        if (rc != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}

/* ---- buffers ------------------------------------------------------------- */

struct mc_buf_want {
    struct tide_buffer **buf;
    size_t bytes;
};

/* Free a backend buffer (NULL: nothing) and clear the pointer. */
static inline void mc_buffer_free(const struct tide_backend_ref *dev, struct tide_buffer **b)
{
    if (*b)
        dev->ops->buffer_free(dev->bk, *b);
    *b = NULL;
}

/* Allocate each want[i].bytes into *want[i].buf; the first failure is logged
 * and returned (the caller frees what was allocated). */
static inline int mc_buffers_alloc(const char *who, const struct tide_backend_ref *dev,
                                   const struct mc_buf_want *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = dev->ops->buffer_alloc(dev->bk, want[i].bytes, want[i].buf);
        if (rc != TIDE_OK) {
            tide_error("%s: cannot allocate %zu bytes of activations on %s", who, want[i].bytes,
                       dev->name);
            return rc;
        }
    }
    return TIDE_OK;
}

/* The K and V caches of layer l, bytes each. */
static inline int mc_kv_alloc(const char *who, const struct tide_backend_ref *dev, int l,
                              size_t bytes, struct tide_buffer **k, struct tide_buffer **v)
{
    int rc;
    if ((rc = dev->ops->buffer_alloc(dev->bk, bytes, k)) != TIDE_OK ||
        (rc = dev->ops->buffer_alloc(dev->bk, bytes, v)) != TIDE_OK)
        tide_error("%s: cannot allocate the KV cache of layer %d (%zu bytes x 2)", who, l, bytes);
    return rc;
}

/* ---- forward ------------------------------------------------------------- */

/* A forward call's span: n tokens at pos0 within the reserved capacity, ids
 * inside the vocabulary. */
static inline int mc_check_span(const char *who, const int32_t *ids, int64_t n, int64_t pos0,
                                int64_t max_tokens, int64_t n_ctx, int vocab)
{
    if (n < 1 || n > max_tokens || pos0 < 0 || pos0 + n > n_ctx) {
        tide_error("%s: forward of %lld tokens at position %lld exceeds the opened "
                   "capacity (%lld tokens per call, %lld positions)",
                   who, (long long)n, (long long)pos0, (long long)max_tokens, (long long)n_ctx);
        return TIDE_E_RANGE;
    }
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= vocab) {
            tide_error("%s: token id %d at position %lld is outside the vocabulary "
                       "(vocab_size %d)",
                       who, ids[i], (long long)(pos0 + i), vocab);
            return TIDE_E_RANGE;
        }
    }
    return TIDE_OK;
}

/* y = down(silu(x gate^T) * (x up^T)) for a dense SwiGLU MLP of width I, with
 * g, u (f32) and a (bf16) as scratch of n x I. */
static inline int mc_swiglu(const struct tide_backend_ref *dev, struct tide_buffer *g_buf,
                            struct tide_buffer *u_buf, struct tide_buffer *a_buf,
                            const struct tide_tensor *x, int64_t n, int64_t I,
                            const struct tide_weight *gate, const struct tide_weight *up,
                            const struct tide_weight *down, const struct tide_tensor *y)
{
    const struct tide_backend_ops *o = dev->ops;
    struct tide_backend *bk = dev->bk;
    struct tide_tensor g = tide_tensor_2d(g_buf, TIDE_DTYPE_F32, n, I);
    struct tide_tensor u = tide_tensor_2d(u_buf, TIDE_DTYPE_F32, n, I);
    struct tide_tensor a = tide_tensor_2d(a_buf, TIDE_DTYPE_BF16, n, I);
    int rc;
    if ((rc = o->matmul(bk, x, gate, &g)) || (rc = o->matmul(bk, x, up, &u)) ||
        (rc = o->swiglu(bk, &g, &u, &a)) || (rc = o->matmul(bk, &a, down, y)))
        return rc;
    return TIDE_OK;
}

/* One sequence of a forward call as the model runs it: rows off .. off+n-1
 * of the activations hold positions pos0 .. pos0+n-1 of KV-cache slot slot.
 * A plain forward is one span at off 0 in slot 0. */
struct mc_span {
    int64_t off, n, pos0;
    int slot;
};

/* Rotary embedding of t's rows, each span at its own positions. */
static inline int mc_rope_spans(const struct tide_backend_ref *dev, const struct tide_tensor *t,
                                int head_dim, int rot_dim, float theta, const struct mc_span *sp,
                                int n_sp)
{
    for (int i = 0; i < n_sp; i++) {
        struct tide_tensor s = tide_tensor_slice(t, sp[i].off, sp[i].n, 0, t->cols);
        int rc = dev->ops->rope(dev->bk, &s, head_dim, rot_dim, theta, sp[i].pos0);
        if (rc != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}

/* The attention of one layer once q, k and v [T, heads * head_dim] (f32,
 * every span's rows end to end) are projected, normed and rotated: each
 * span's k and v go into its slot of the layer's caches at its pos0, the
 * backend's attention mixes that slot's cached values under the block mask
 * (block: the model's; the reserved context length makes it full), then
 * the output projection wo over all T rows, added to the residual h. */
struct mc_attend_args {
    const struct tide_tensor *q, *k, *v;
    struct tide_buffer *k_cache, *v_cache; /* f32 [n_slots * n_ctx, n_kv_heads * head_dim] */
    struct tide_buffer *att;               /* bf16 scratch [T, n_heads * head_dim] */
    struct tide_buffer *tmp;               /* f32 scratch [T, hidden] */
    struct tide_buffer *h;                 /* f32 residual [T, hidden] */
    const struct tide_weight *wo;
    const struct mc_span *sp; /* [n_sp] */
    int n_sp;
    int64_t n_ctx, T, hidden; /* n_ctx: positions per slot */
    int n_heads, n_kv_heads, head_dim, block;
};

static inline int mc_attend(const struct tide_backend_ref *dev, const struct mc_attend_args *a)
{
    const struct tide_backend_ops *o = dev->ops;
    struct tide_backend *bk = dev->bk;
    const int64_t hd = a->head_dim, qw = a->n_heads * hd, kw = a->n_kv_heads * hd;
    struct tide_tensor att = tide_tensor_2d(a->att, TIDE_DTYPE_BF16, a->T, qw);
    int rc;
    for (int i = 0; i < a->n_sp; i++) {
        const struct mc_span *s = &a->sp[i];
        struct tide_tensor kall = tide_tensor_2d(a->k_cache, TIDE_DTYPE_F32, 0, kw);
        struct tide_tensor vall = tide_tensor_2d(a->v_cache, TIDE_DTYPE_F32, 0, kw);
        struct tide_tensor kc =
            tide_tensor_slice(&kall, (int64_t)s->slot * a->n_ctx, a->n_ctx, 0, kw);
        struct tide_tensor vc =
            tide_tensor_slice(&vall, (int64_t)s->slot * a->n_ctx, a->n_ctx, 0, kw);
        struct tide_tensor kdst = tide_tensor_slice(&kc, s->pos0, s->n, 0, kw);
        struct tide_tensor vdst = tide_tensor_slice(&vc, s->pos0, s->n, 0, kw);
        struct tide_tensor q = tide_tensor_slice(a->q, s->off, s->n, 0, qw);
        struct tide_tensor k = tide_tensor_slice(a->k, s->off, s->n, 0, kw);
        struct tide_tensor v = tide_tensor_slice(a->v, s->off, s->n, 0, kw);
        struct tide_tensor out = tide_tensor_slice(&att, s->off, s->n, 0, qw);
        if ((rc = o->convert(bk, &k, &kdst)) || (rc = o->convert(bk, &v, &vdst)))
            return rc;
        const struct tide_attn_args aa = {
            .size = sizeof aa,
            .q = &q,
            .k_cache = &kc,
            .v_cache = &vc,
            .out = &out,
            .pos0 = s->pos0,
            .n = s->n,
            .n_heads = a->n_heads,
            .n_kv_heads = a->n_kv_heads,
            .head_dim = a->head_dim,
            .block = a->block,
            .scale = (float)(1.0 / sqrt((double)hd)),
        };
        if ((rc = o->attention(bk, &aa)))
            return rc;
    }
    struct tide_tensor tmp = tide_tensor_2d(a->tmp, TIDE_DTYPE_F32, a->T, a->hidden);
    struct tide_tensor h = tide_tensor_2d(a->h, TIDE_DTYPE_F32, a->T, a->hidden);
    if ((rc = o->matmul(bk, &att, a->wo, &tmp)) || (rc = o->add(bk, &h, &tmp)))
        return rc;
    return TIDE_OK;
}

#endif
