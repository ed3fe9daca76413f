/* model-common: the forward pass every model of the LLaDA family shares,
 * parameterised by what differs between them (the router, the attention's
 * reach, how q, k and v are projected, the tensor names).
 *
 * A model plugin embeds struct mc_model in its struct tide_model and fills
 * it at open (mc_model_begin; mc_model_embed, its own layer weights into
 * struct mc_layer through mc_model_weight and mc_model_experts, then
 * mc_model_head); the skeleton then runs the model ops whose logic is the
 * same for every model: reserve_slots (mc_model_reserve), forward_batch
 * (mc_model_forward: embed; per layer RMSNorm, attention, RMSNorm, a dense
 * SwiGLU or the MoE block; the output layer on the rows asked for), close
 * (mc_model_close), profile and prompt_vector. What is the model's own comes
 * through struct mc_model_hooks: the router (LLaDA2: the backend's
 * group-limited sigmoid router; LLaDA-MoE: a softmax on the host) and the
 * attention's block (LLaDA2: block-causal with the generation's block;
 * LLaDA-MoE: full, one block as long as the context).
 *
 * The forward is the one both plugins ran before they shared it, op for op,
 * so every bit is the same (their tests, and tide run --logits-hash of both
 * tiny models, show it). Header-only, like the rest of model-common. */
#ifndef MODEL_COMMON_SKELETON_H
#define MODEL_COMMON_SKELETON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "model-common/batch.h"
#include "model-common/forward.h"
#include "model-common/slots.h"
#include "tide/model.h"
#include "tide/moe.h"

/* One layer's weights (NULL where the layer has none) and KV cache. */
struct mc_layer {
    struct tide_weight *in_norm, *post_norm;
    /* q, k and v: fused rows of q heads, k heads, v heads (LLaDA2), or apart */
    struct tide_weight *wqkv, *wq, *wk, *wv;
    struct tide_weight *q_norm, *k_norm, *wo; /* per-head norms (or NULL), output projection */
    struct tide_weight *ffn_gate, *ffn_up, *ffn_down; /* a dense layer's SwiGLU */
    struct tide_weight *router;                       /* MoE layers */
    struct tide_weight *router_bias;                  /* a backend router's f32 bias, or NULL */
    const float *expert_bias; /* a host router's bias (mapped checkpoint), or NULL */
    struct tide_weight *sh_gate, *sh_up, *sh_down; /* the shared expert, or NULL */
    int moe_index;                                 /* -1 for dense layers */
    struct tide_view *xviews; /* quantized routed experts' views [3 n_experts], or NULL */
    struct tide_buffer *k_cache, *v_cache; /* f32 [n_slots * n_ctx, n_kv * hd] */
};

/* The sizes the skeleton reads, from the model's config. */
struct mc_dims {
    int n_layers, hidden, n_heads, n_kv_heads, head_dim, rot_dim;
    int vocab, n_experts, top_k;
    int64_t dense_inter;  /* a dense layer's SwiGLU width */
    int64_t shared_inter; /* the shared expert's width; 0: none */
    int64_t moe_inter;    /* a routed expert's width */
    int64_t max_pos;
    double eps, rope_theta;
    bool qk_norm;
};

struct mc_model;

/* What a model does its own way. */
struct mc_model_hooks {
    /* Top-k ids and weights of n tokens into m->ids and m->wts [n * top_k],
     * from the router logits rl (f32 [n, n_experts], on the device). */
    int (*route)(struct mc_model *m, const struct mc_layer *L, const struct tide_tensor *rl,
                 int64_t n);
    /* Optional: host memory of its own for max_tokens rows per forward
     * (reserve), and its release (reserve and close). */
    int (*reserve)(struct mc_model *m, int64_t max_tokens);
    void (*release)(struct mc_model *m);
};

struct mc_model {
    const char *who; /* "model-llada2": messages name it */
    const struct mc_model_hooks *hooks;
    struct mc_dims d;
    struct tide_model_info info;
    struct tide_st *st;
    struct mc_dequant dq; /* bf16 copies of FP8 dense weights */
    const struct mc_quant *quant;
    struct tide_backend_ref dev;
    struct tide_moe *moe;
    int block;                 /* the attention's block; 0: full attention (the context) */
    int64_t max_tokens, n_ctx; /* per forward (all spans); per slot */
    int n_slots;
    struct mc_batch batch;
    struct tide_weight *embed, *norm, *head;
    const char *embed_name;  /* its tensor, for prompt_vector */
    struct mc_layer *layers; /* [n_layers] */
    /* activations, sized for max_tokens rows */
    struct tide_buffer *h, *x, *qkv, *att, *tmp, *tmp2, *g, *u, *a, *rlog, *logits;
    int32_t *ids; /* host [max_tokens * top_k] */
    float *wts;   /* host [max_tokens * top_k] */
    struct mc_prof prof;
};

/* ---- open and close ------------------------------------------------------ */

/* The common part of open: the model's identity and dimensions, the
 * checkpoint opened (its MoE shape declared), room for the layers. info is
 * the model's (its size, names, template, attention, decoder). Returns
 * TIDE_OK or a status (logged); the model closes what was made on failure. */
static inline int mc_model_begin(struct mc_model *m, const char *who,
                                 const struct mc_model_hooks *hooks, const struct mc_dims *d,
                                 const struct mc_quant *quant, const struct tide_model_args *args,
                                 int n_moe_layers, int block, const struct tide_model_info *info)
{
    m->who = who;
    m->hooks = hooks;
    m->d = *d;
    m->quant = quant;
    m->dev = *args->dev;
    m->moe = args->moe;
    m->block = block;
    m->info = *info;
    mc_prof_init(&m->prof, mc_phase_names, MC_N_PHASES);
    int rc = mc_open_checkpoint(args, n_moe_layers, d->n_experts, d->top_k, d->hidden,
                                (int)d->moe_inter, quant, &m->st);
    if (rc != TIDE_OK)
        return rc;
    if (!(m->layers = (struct mc_layer *)calloc((size_t)d->n_layers, sizeof *m->layers)))
        return TIDE_E_NOMEM;
    return TIDE_OK;
}

/* A backend weight from a checked checkpoint tensor (FP8 dense weights are
 * widened to bf16). */
static inline int mc_model_weight(struct mc_model *m, const char *name, enum tide_dtype dt,
                                  int ndim, int64_t d0, int64_t d1, enum tide_weight_kind kind,
                                  struct tide_weight **out)
{
    return mc_load_weight_q(m->who, m->st, &m->dev, m->quant, &m->dq, name, dt, ndim, d0, d1, kind,
                            out);
}

/* A MoE layer's routed experts, registered with the dispatcher. */
static inline int mc_model_experts(struct mc_model *m, int l, struct mc_layer *L)
{
    const struct mc_dims *d = &m->d;
    if (m->quant->fmt != TIDE_QFMT_NONE &&
        !(L->xviews = (struct tide_view *)calloc((size_t)d->n_experts * 3, sizeof *L->xviews)))
        return TIDE_E_NOMEM;
    return mc_register_experts(m->st, m->moe, l, L->moe_index, d->n_experts, (int)d->moe_inter,
                               d->hidden, m->quant, L->xviews);
}

/* The embedding table (loaded first, as the checkpoint lists it). */
static inline int mc_model_embed(struct mc_model *m, const char *embed)
{
    m->embed_name = embed;
    return mc_model_weight(m, embed, TIDE_DTYPE_BF16, 2, m->d.vocab, m->d.hidden, TIDE_WEIGHT_EMBED,
                           &m->embed);
}

/* The final norm and the head (tied: the embedding table's rows). */
static inline int mc_model_head(struct mc_model *m, const char *head, bool tied)
{
    const struct mc_dims *d = &m->d;
    int rc = mc_model_weight(m, "model.norm.weight", TIDE_DTYPE_BF16, 1, d->hidden, 0,
                             TIDE_WEIGHT_VECTOR, &m->norm);
    if (rc == TIDE_OK)
        rc = mc_model_weight(m, tied ? m->embed_name : head, TIDE_DTYPE_BF16, 2, d->vocab,
                             d->hidden, TIDE_WEIGHT_MATMUL, &m->head);
    return rc;
}

static inline void mc_model_free_buffers(struct mc_model *m)
{
    struct tide_buffer **bufs[] = {&m->h, &m->x, &m->qkv, &m->att,  &m->tmp,   &m->tmp2,
                                   &m->g, &m->u, &m->a,   &m->rlog, &m->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mc_buffer_free(&m->dev, bufs[i]);
    for (int l = 0; m->layers && l < m->d.n_layers; l++) {
        mc_buffer_free(&m->dev, &m->layers[l].k_cache);
        mc_buffer_free(&m->dev, &m->layers[l].v_cache);
    }
    free(m->ids);
    free(m->wts);
    m->ids = NULL;
    m->wts = NULL;
    if (m->hooks && m->hooks->release)
        m->hooks->release(m);
    mc_batch_free(&m->batch);
    m->n_ctx = m->max_tokens = 0;
    m->n_slots = 0;
}

/* Everything the skeleton holds (the model frees the rest, then itself). */
static inline void mc_model_close(struct mc_model *m)
{
    if (m->dev.ops) {
#define MC_WFREE(w) mc_weight_free(&m->dev, &(w))
        for (int l = 0; m->layers && l < m->d.n_layers; l++) {
            struct mc_layer *L = &m->layers[l];
            struct tide_weight **ws[] = {
                &L->in_norm, &L->post_norm,   &L->wqkv,    &L->wq,       &L->wk,     &L->wv,
                &L->q_norm,  &L->k_norm,      &L->wo,      &L->ffn_gate, &L->ffn_up, &L->ffn_down,
                &L->router,  &L->router_bias, &L->sh_gate, &L->sh_up,    &L->sh_down};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                MC_WFREE(*ws[i]);
        }
        MC_WFREE(m->embed);
        MC_WFREE(m->norm);
        MC_WFREE(m->head);
#undef MC_WFREE
        mc_model_free_buffers(m);
    }
    for (int l = 0; m->layers && l < m->d.n_layers; l++)
        free(m->layers[l].xviews);
    free(m->layers);
    m->layers = NULL;
    free(m->prof.seen);
    m->prof.seen = NULL;
    tide_st_close(m->st);
    m->st = NULL;
    mc_dequant_free(&m->dq);
}

/* ---- the model ops whose logic is the skeleton's ------------------------- */

static inline int mc_model_reserve(struct mc_model *m, int n_slots, int64_t n_ctx,
                                   int64_t max_tokens)
{
    const struct mc_dims *d = &m->d;
    int rc = mc_reserve_check(m->who, n_slots, n_ctx, max_tokens, d->max_pos);
    if (rc != TIDE_OK)
        return rc;
    if (!mc_reserve_grows(&n_slots, &n_ctx, &max_tokens, m->n_slots, m->n_ctx, m->max_tokens))
        return TIDE_OK;
    mc_model_free_buffers(m);
    const size_t T = (size_t)max_tokens, H = (size_t)d->hidden;
    const size_t ffn =
        (size_t)(d->dense_inter > d->shared_inter ? d->dense_inter : d->shared_inter);
    const size_t qw = (size_t)d->n_heads * (size_t)d->head_dim;
    const size_t kw = (size_t)d->n_kv_heads * (size_t)d->head_dim;
    const struct mc_buf_want want[] = {
        {&m->h, T * H * 4},
        {&m->x, T * H * 2},
        {&m->qkv, T * (qw + 2 * kw) * 4},
        {&m->att, T * qw * 2},
        {&m->tmp, T * H * 4},
        {&m->tmp2, T * H * 4},
        {&m->g, T * (ffn ? ffn : 1) * 4},
        {&m->u, T * (ffn ? ffn : 1) * 4},
        {&m->a, T * (ffn ? ffn : 1) * 2},
        {&m->rlog, T * (size_t)d->n_experts * 4},
        {&m->logits, T * (size_t)d->vocab * 4},
    };
    rc = mc_buffers_alloc(m->who, &m->dev, want, sizeof want / sizeof want[0]);
    if (rc == TIDE_OK) {
        m->ids = (int32_t *)malloc(T * (size_t)d->top_k * sizeof *m->ids);
        m->wts = (float *)malloc(T * (size_t)d->top_k * sizeof *m->wts);
        rc = m->ids && m->wts ? TIDE_OK : TIDE_E_NOMEM;
    }
    if (rc == TIDE_OK && m->hooks->reserve)
        rc = m->hooks->reserve(m, max_tokens);
    if (rc == TIDE_OK)
        rc = mc_batch_alloc(&m->batch, n_slots, max_tokens);
    const size_t kv_bytes = (size_t)n_slots * (size_t)n_ctx * kw * sizeof(float);
    for (int l = 0; rc == TIDE_OK && l < d->n_layers; l++)
        rc =
            mc_kv_alloc(m->who, &m->dev, l, kv_bytes, &m->layers[l].k_cache, &m->layers[l].v_cache);
    if (rc != TIDE_OK) {
        mc_model_free_buffers(m);
        return rc;
    }
    m->n_ctx = n_ctx;
    m->max_tokens = max_tokens;
    m->n_slots = n_slots;
    return TIDE_OK;
}

/* End the phase being timed and start `next`. */
static inline int mc_model_phase(struct mc_model *m, int next)
{
    return mc_prof_phase(&m->prof, m->dev.ops, m->dev.bk, next);
}

static inline int mc_model_profile(struct mc_model *m, bool on)
{
    return mc_prof_switch(&m->prof, on, m->d.n_experts);
}

/* The mean of the prompt's input embeddings, from the mapped checkpoint
 * (the table was checked at open). */
static inline int mc_model_prompt_vector(struct mc_model *m, const int32_t *ids, int64_t n,
                                         float *out)
{
    return mc_prompt_vector(m->who, tide_st_find(m->st, m->embed_name), m->d.vocab, m->d.hidden,
                            ids, n, out);
}

/* y = down(silu(x gate^T) * (x up^T)) for a SwiGLU MLP of width I. */
static inline int mc_model_swiglu(struct mc_model *m, const struct tide_tensor *x, int64_t n,
                                  int64_t I, const struct tide_weight *gate,
                                  const struct tide_weight *up, const struct tide_weight *down,
                                  const struct tide_tensor *y)
{
    int rc = mc_swiglu(&m->dev, m->g, m->u, m->a, x, n, I, gate, up, down, y);
    if (rc != TIDE_OK)
        return rc;
    mc_prof_mm_work(&m->prof, n, 3 * I, m->d.hidden);
    return TIDE_OK;
}

/* The attention's block: the model's, or the reserved context (full
 * attention: the backend shows key j to position p iff j / block <= p /
 * block, so one block as long as the context hides nothing). */
static inline int mc_model_block(const struct mc_model *m)
{
    return m->block > 0 ? m->block : (int)m->n_ctx;
}

/* FLOPs of the attention for each span's queries: scores and mixing, 2 x 2
 * per visible key and dimension. */
static inline uint64_t mc_model_attn_flops(const struct mc_model *m, const struct mc_span *sp,
                                           int n_sp)
{
    const int64_t block = mc_model_block(m);
    uint64_t keys = 0;
    for (int s = 0; s < n_sp; s++) {
        const int64_t total = sp[s].pos0 + sp[s].n;
        for (int64_t i = 0; i < sp[s].n; i++) {
            const int64_t end = ((sp[s].pos0 + i) / block + 1) * block;
            keys += (uint64_t)(end < total ? end : total);
        }
    }
    return 4u * keys * (uint64_t)(m->d.n_heads * m->d.head_dim);
}

static inline int mc_model_attention(struct mc_model *m, const struct mc_layer *L,
                                     const struct tide_tensor *x)
{
    const struct mc_batch *b = &m->batch;
    const struct mc_dims *d = &m->d;
    const int64_t n = b->T;
    const struct tide_backend_ops *o = m->dev.ops;
    struct tide_backend *bk = m->dev.bk;
    const int64_t hd = d->head_dim, qw = d->n_heads * hd, kw = d->n_kv_heads * hd;
    struct tide_tensor qkv = tide_tensor_2d(m->qkv, TIDE_DTYPE_F32, n, qw + 2 * kw);
    struct tide_tensor q, k, v;
    int rc;
    if (L->wqkv) {
        /* Fused: each row holds q, k, v side by side. */
        q = tide_tensor_slice(&qkv, 0, n, 0, qw);
        k = tide_tensor_slice(&qkv, 0, n, qw, kw);
        v = tide_tensor_slice(&qkv, 0, n, qw + kw, kw);
        rc = o->matmul(bk, x, L->wqkv, &qkv);
    } else {
        /* Apart: three dense matrices in the same buffer, one after the
         * other (room for max_tokens rows each). */
        const size_t T = (size_t)m->max_tokens;
        q = tide_tensor_2d(m->qkv, TIDE_DTYPE_F32, n, qw);
        k = tide_tensor_2d(m->qkv, TIDE_DTYPE_F32, n, kw);
        v = tide_tensor_2d(m->qkv, TIDE_DTYPE_F32, n, kw);
        k.offset = T * (size_t)qw * sizeof(float);
        v.offset = T * (size_t)(qw + kw) * sizeof(float);
        if (!(rc = o->matmul(bk, x, L->wq, &q)) && !(rc = o->matmul(bk, x, L->wk, &k)))
            rc = o->matmul(bk, x, L->wv, &v);
    }
    if (rc)
        return rc;
    /* Per-head RMSNorm over each head's head_dim values. */
    if (d->qk_norm && ((rc = o->rmsnorm(bk, &q, L->q_norm, (int)hd, (float)d->eps, &q)) ||
                       (rc = o->rmsnorm(bk, &k, L->k_norm, (int)hd, (float)d->eps, &k))))
        return rc;
    if (d->rot_dim > 0 && ((rc = mc_rope_spans(&m->dev, &q, (int)hd, d->rot_dim,
                                               (float)d->rope_theta, b->sp, b->n_sp)) ||
                           (rc = mc_rope_spans(&m->dev, &k, (int)hd, d->rot_dim,
                                               (float)d->rope_theta, b->sp, b->n_sp))))
        return rc;
    const struct mc_attend_args aa = {
        .q = &q,
        .k = &k,
        .v = &v,
        .k_cache = L->k_cache,
        .v_cache = L->v_cache,
        .att = m->att,
        .tmp = m->tmp,
        .h = m->h,
        .wo = L->wo,
        .sp = b->sp,
        .n_sp = b->n_sp,
        .n_ctx = m->n_ctx,
        .T = n,
        .hidden = d->hidden,
        .n_heads = d->n_heads,
        .n_kv_heads = d->n_kv_heads,
        .head_dim = (int)hd,
        .block = mc_model_block(m),
    };
    if ((rc = mc_attend(&m->dev, &aa)))
        return rc;
    if (m->prof.on) {
        mc_prof_mm_work(&m->prof, n, qw + 2 * kw, d->hidden);
        mc_prof_mm_work(&m->prof, n, d->hidden, qw);
        mc_prof_work(&m->prof, 2u * mc_spans_kv_positions(b->sp, b->n_sp) * (uint64_t)kw * 4u, 0,
                     mc_model_attn_flops(m, b->sp, b->n_sp));
    }
    return TIDE_OK;
}

/* Distinct experts among the n x top_k routing ids: bytes and FLOPs of the
 * routed experts (and the router's matmul). */
static inline void mc_model_routed_work(struct mc_model *m, int64_t n)
{
    const struct mc_dims *d = &m->d;
    if (!m->prof.on)
        return;
    const uint64_t distinct = mc_prof_distinct(&m->prof, m->ids, n * d->top_k, d->n_experts);
    mc_prof_mm_work(&m->prof, n, d->n_experts, d->hidden);
    mc_prof_work(&m->prof, distinct * m->info.expert_bytes,
                 2u * (uint64_t)(n * d->top_k) * 3u * (uint64_t)d->hidden * (uint64_t)d->moe_inter,
                 0);
}

/* y = the routed experts (the model's router, then the dispatcher) + the
 * shared expert. */
static inline int mc_model_moe(struct mc_model *m, const struct mc_layer *L, int64_t n,
                               const struct tide_tensor *x, const struct tide_tensor *y)
{
    const struct mc_dims *d = &m->d;
    const struct tide_backend_ops *o = m->dev.ops;
    struct tide_backend *bk = m->dev.bk;
    struct tide_tensor rl = tide_tensor_2d(m->rlog, TIDE_DTYPE_F32, n, d->n_experts);
    int rc = mc_model_phase(m, MC_PH_ROUTED);
    if (!rc)
        rc = o->matmul(bk, x, L->router, &rl);
    if (!rc)
        rc = m->hooks->route(m, L, &rl, n);
    if (!rc)
        rc = tide_moe_forward(m->moe, L->moe_index, x, m->ids, m->wts, n, y);
    if (rc)
        return rc;
    mc_model_routed_work(m, n);
    if (!d->shared_inter)
        return TIDE_OK;
    struct tide_tensor sh = tide_tensor_2d(m->tmp2, TIDE_DTYPE_F32, n, d->hidden);
    if ((rc = mc_model_phase(m, MC_PH_SHARED)) ||
        (rc = mc_model_swiglu(m, x, n, d->shared_inter, L->sh_gate, L->sh_up, L->sh_down, &sh)))
        return rc;
    return o->add(bk, y, &sh);
}

/* The output layer for the rows asked for: final norm and head on h's rows,
 * read into each span's logits. Every op is row by row, so a row's logits
 * do not depend on which others are computed. */
static inline int mc_model_output(struct mc_model *m, const struct tide_seq_span *spans)
{
    const struct mc_output_args oa = {
        .h = m->h,
        .x = m->x,
        .tmp = m->tmp,
        .lg = m->logits,
        .norm = m->norm,
        .head = m->head,
        .max_tokens = m->max_tokens,
        .hidden = m->d.hidden,
        .vocab = m->d.vocab,
        .eps = (float)m->d.eps,
    };
    int rc = mc_output_batch(&m->dev, &oa, &m->batch, spans);
    mc_prof_mm_work(&m->prof, m->batch.R, m->d.vocab, m->d.hidden);
    return rc;
}

/* The forward pass over every span's rows (forward_batch). */
static inline int mc_model_forward(struct mc_model *m, const struct tide_seq_span *spans,
                                   int n_spans)
{
    const struct mc_dims *d = &m->d;
    int rc = mc_batch_prepare(m->who, &m->batch, spans, n_spans, m->n_slots, m->n_ctx,
                              m->max_tokens, d->vocab);
    if (rc != TIDE_OK)
        return rc;
    const int64_t n = m->batch.T, H = d->hidden;
    const struct tide_backend_ops *o = m->dev.ops;
    struct tide_backend *bk = m->dev.bk;
    struct tide_tensor h = tide_tensor_2d(m->h, TIDE_DTYPE_F32, n, H);
    struct tide_tensor x = tide_tensor_2d(m->x, TIDE_DTYPE_BF16, n, H);
    struct tide_tensor tmp = tide_tensor_2d(m->tmp, TIDE_DTYPE_F32, n, H);
    const float eps = (float)d->eps;
    rc = mc_model_phase(m, MC_PH_OTHER);
    if (!rc)
        rc = o->embed(bk, m->embed, m->batch.ids, n, &h);
    for (int l = 0; rc == TIDE_OK && l < d->n_layers; l++) {
        const struct mc_layer *L = &m->layers[l];
        if ((rc = o->rmsnorm(bk, &h, L->in_norm, (int)H, eps, &x)) ||
            (rc = mc_model_phase(m, MC_PH_ATTENTION)) || (rc = mc_model_attention(m, L, &x)) ||
            (rc = mc_model_phase(m, MC_PH_OTHER)) ||
            (rc = o->rmsnorm(bk, &h, L->post_norm, (int)H, eps, &x)))
            break;
        if (L->moe_index < 0) {
            if (!(rc = mc_model_phase(m, MC_PH_DENSE)))
                rc = mc_model_swiglu(m, &x, n, d->dense_inter, L->ffn_gate, L->ffn_up, L->ffn_down,
                                     &tmp);
        } else {
            rc = mc_model_moe(m, L, n, &x, &tmp);
        }
        if (rc == TIDE_OK && (rc = mc_model_phase(m, MC_PH_OTHER)) == TIDE_OK)
            rc = o->add(bk, &h, &tmp);
    }
    if (rc == TIDE_OK && m->batch.R > 0) {
        if (!(rc = mc_model_phase(m, MC_PH_OUTPUT)))
            rc = mc_model_output(m, spans);
    } else if (rc == TIDE_OK) {
        rc = o->sync(bk);
    }
    if (rc == TIDE_OK)
        rc = mc_model_phase(m, MC_N_PHASES);
    return rc;
}

/* The model ops that only forward to the skeleton, defined for a plugin
 * whose struct tide_model holds its struct mc_model as member `base`:
 * PREFIX_info, _reserve_slots, _forward_batch, _profile, _profile_read
 * (declared by the plugin's header, named in its ops table). */
#define MC_MODEL_SKELETON_OPS(prefix)                                                              \
    const struct tide_model_info *prefix##_info(const struct tide_model *m)                        \
    {                                                                                              \
        return &m->base.info;                                                                      \
    }                                                                                              \
    int prefix##_reserve_slots(struct tide_model *m, int n_slots, int64_t n_ctx,                   \
                               int64_t max_tokens)                                                 \
    {                                                                                              \
        return mc_model_reserve(&m->base, n_slots, n_ctx, max_tokens);                             \
    }                                                                                              \
    int prefix##_forward_batch(struct tide_model *m, const struct tide_seq_span *spans,            \
                               int n_spans)                                                        \
    {                                                                                              \
        return mc_model_forward(&m->base, spans, n_spans);                                         \
    }                                                                                              \
    int prefix##_profile(struct tide_model *m, bool on)                                            \
    {                                                                                              \
        return mc_model_profile(&m->base, on);                                                     \
    }                                                                                              \
    int prefix##_profile_read(const struct tide_model *m, struct tide_phase_stats *out, int max,   \
                              int *n)                                                              \
    {                                                                                              \
        return mc_prof_read(&m->base.prof, out, max, n);                                           \
    }

#endif
