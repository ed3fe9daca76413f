/* The LLaDA2.0 forward pass over backend ops (DESIGN.md section 4), read top
 * to bottom like llama2.c: embed, then per layer attention and a dense or MoE
 * feed-forward, then the final norm and the head. Routed experts go through
 * the core's dispatcher (tide_moe_forward). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llada2.h"
#include "model-common/batch.h"
#include "model-common/forward.h"
#include "model-common/slots.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

const char llada2_chat_template[] = "<role>SYSTEM</role>detailed thinking off<|role_end|>"
                                    "<role>HUMAN</role>{prompt}<|role_end|><role>ASSISTANT</role>";

struct llada2_layer {
    struct tide_weight *in_norm, *qkv, *q_norm, *k_norm, *dense, *post_norm;
    /* dense feed-forward (layer < first_k_dense_replace) */
    struct tide_weight *ffn_gate, *ffn_up, *ffn_down;
    /* MoE */
    struct tide_weight *router, *router_bias;
    struct tide_weight *sh_gate, *sh_up, *sh_down;
    int moe_index;            /* -1 for dense layers */
    struct tide_view *xviews; /* quantized routed experts' views [3 n_experts], or NULL */
    struct tide_buffer *k_cache, *v_cache; /* f32 [n_slots * n_ctx, n_kv*hd] */
};

struct tide_model {
    struct llada2_cfg cfg;
    struct tide_model_info info;
    struct tide_st *st;
    struct mc_dequant dq; /* bf16 copies of FP8 dense weights */
    struct tide_backend_ref dev;
    struct tide_moe *moe;
    int64_t max_tokens, n_ctx; /* per forward (all spans); per slot */
    int n_slots;
    int block;
    struct mc_batch batch;
    struct tide_weight *embed, *norm, *head;
    struct llada2_layer *layers;
    /* activations, sized for max_tokens rows */
    struct tide_buffer *h, *x, *qkv, *att, *tmp, *tmp2, *g, *u, *a, *rlog, *logits;
    int32_t *ids; /* host [max_tokens * top_k] */
    float *wts;   /* host [max_tokens * top_k] */
    char arch[32];
    struct mc_prof prof;
};

static const struct tide_backend_ops *ops_of(const struct tide_model *m)
{
    return m->dev.ops;
}

/* Create a backend weight from a checked checkpoint tensor. */
static int load_weight(struct tide_model *m, const char *name, enum tide_dtype dt, int ndim,
                       int64_t d0, int64_t d1, enum tide_weight_kind kind, struct tide_weight **out)
{
    return mc_load_weight_q("model-llada2", m->st, &m->dev, &m->cfg.quant, &m->dq, name, dt, ndim,
                            d0, d1, kind, out);
}

static int load_layer(struct tide_model *m, int l, int *moe_index)
{
    const struct llada2_cfg *c = &m->cfg;
    struct llada2_layer *L = &m->layers[l];
    const int64_t H = c->hidden, hd = c->head_dim;
    char n[LLADA2_NAME_MAX];
    int rc;
#define W(field, suffix, dt, nd, a, b, kind)                                                       \
    do {                                                                                           \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                    \
        if ((rc = load_weight(m, n, dt, nd, a, b, kind, &L->field)) != TIDE_OK)                    \
            return rc;                                                                             \
    } while (0)
    W(in_norm, "input_layernorm.weight", TIDE_DTYPE_BF16, 1, H, 0, TIDE_WEIGHT_VECTOR);
    W(qkv, "attention.query_key_value.weight", TIDE_DTYPE_BF16, 2,
      (c->n_heads + 2 * c->n_kv_heads) * hd, H, TIDE_WEIGHT_MATMUL);
    if (c->qk_norm) {
        W(q_norm, "attention.query_layernorm.weight", TIDE_DTYPE_BF16, 1, hd, 0,
          TIDE_WEIGHT_VECTOR);
        W(k_norm, "attention.key_layernorm.weight", TIDE_DTYPE_BF16, 1, hd, 0, TIDE_WEIGHT_VECTOR);
    }
    W(dense, "attention.dense.weight", TIDE_DTYPE_BF16, 2, H, c->n_heads * hd, TIDE_WEIGHT_MATMUL);
    W(post_norm, "post_attention_layernorm.weight", TIDE_DTYPE_BF16, 1, H, 0, TIDE_WEIGHT_VECTOR);
    L->moe_index = -1;
    if (l < c->first_dense) {
        W(ffn_gate, "mlp.gate_proj.weight", TIDE_DTYPE_BF16, 2, c->inter, H, TIDE_WEIGHT_MATMUL);
        W(ffn_up, "mlp.up_proj.weight", TIDE_DTYPE_BF16, 2, c->inter, H, TIDE_WEIGHT_MATMUL);
        W(ffn_down, "mlp.down_proj.weight", TIDE_DTYPE_BF16, 2, H, c->inter, TIDE_WEIGHT_MATMUL);
    } else {
        L->moe_index = (*moe_index)++;
        W(router, "mlp.gate.weight", TIDE_DTYPE_BF16, 2, c->n_experts, H, TIDE_WEIGHT_MATMUL);
        if (c->expert_bias)
            W(router_bias, "mlp.gate.expert_bias", TIDE_DTYPE_F32, 1, c->n_experts, 0,
              TIDE_WEIGHT_VECTOR);
        const int64_t Is = (int64_t)c->moe_inter * c->n_shared;
        if (c->n_shared) {
            W(sh_gate, "mlp.shared_experts.gate_proj.weight", TIDE_DTYPE_BF16, 2, Is, H,
              TIDE_WEIGHT_MATMUL);
            W(sh_up, "mlp.shared_experts.up_proj.weight", TIDE_DTYPE_BF16, 2, Is, H,
              TIDE_WEIGHT_MATMUL);
            W(sh_down, "mlp.shared_experts.down_proj.weight", TIDE_DTYPE_BF16, 2, H, Is,
              TIDE_WEIGHT_MATMUL);
        }
        if (c->quant.fmt != TIDE_QFMT_NONE &&
            !(L->xviews = calloc((size_t)c->n_experts * 3, sizeof *L->xviews)))
            return TIDE_E_NOMEM;
        rc = mc_register_experts(m->st, m->moe, l, L->moe_index, c->n_experts, c->moe_inter, H,
                                 &c->quant, L->xviews);
        if (rc != TIDE_OK)
            return rc;
    }
#undef W
    return TIDE_OK;
}

static void free_buffers(struct tide_model *m)
{
    struct tide_buffer **bufs[] = {&m->h, &m->x, &m->qkv, &m->att,  &m->tmp,   &m->tmp2,
                                   &m->g, &m->u, &m->a,   &m->rlog, &m->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mc_buffer_free(&m->dev, bufs[i]);
    for (int l = 0; m->layers && l < m->cfg.n_layers; l++) {
        mc_buffer_free(&m->dev, &m->layers[l].k_cache);
        mc_buffer_free(&m->dev, &m->layers[l].v_cache);
    }
    free(m->ids);
    free(m->wts);
    m->ids = NULL;
    m->wts = NULL;
    mc_batch_free(&m->batch);
    m->n_ctx = m->max_tokens = 0;
    m->n_slots = 0;
}

static int alloc_acts(struct tide_model *m, int64_t max_tokens)
{
    const struct llada2_cfg *c = &m->cfg;
    const size_t T = (size_t)max_tokens;
    const size_t ffn =
        (size_t)(c->inter > c->moe_inter * c->n_shared ? c->inter : c->moe_inter * c->n_shared);
    const size_t qkv = (size_t)(c->n_heads + 2 * c->n_kv_heads) * (size_t)c->head_dim;
    const size_t att = (size_t)(c->n_heads * c->head_dim);
    const struct mc_buf_want want[] = {
        {&m->h, T * (size_t)c->hidden * 4},
        {&m->x, T * (size_t)c->hidden * 2},
        {&m->qkv, T * qkv * 4},
        {&m->att, T * att * 2},
        {&m->tmp, T * (size_t)c->hidden * 4},
        {&m->tmp2, T * (size_t)c->hidden * 4},
        {&m->g, T * ffn * 4},
        {&m->u, T * ffn * 4},
        {&m->a, T * ffn * 2},
        {&m->rlog, T * (size_t)c->n_experts * 4},
        {&m->logits, T * (size_t)c->vocab * 4},
    };
    int rc = mc_buffers_alloc("model-llada2", &m->dev, want, sizeof want / sizeof want[0]);
    if (rc != TIDE_OK)
        return rc;
    m->ids = malloc(T * (size_t)c->top_k * sizeof *m->ids);
    m->wts = malloc(T * (size_t)c->top_k * sizeof *m->wts);
    return m->ids && m->wts ? TIDE_OK : TIDE_E_NOMEM;
}

int llada2_reserve_slots(struct tide_model *m, int n_slots, int64_t n_ctx, int64_t max_tokens)
{
    const struct llada2_cfg *c = &m->cfg;
    int rc = mc_reserve_check("model-llada2", n_slots, n_ctx, max_tokens, c->max_pos);
    if (rc != TIDE_OK)
        return rc;
    if (!mc_reserve_grows(&n_slots, &n_ctx, &max_tokens, m->n_slots, m->n_ctx, m->max_tokens))
        return TIDE_OK;
    free_buffers(m);
    rc = alloc_acts(m, max_tokens);
    if (rc == TIDE_OK)
        rc = mc_batch_alloc(&m->batch, n_slots, max_tokens);
    const size_t kv_bytes =
        (size_t)n_slots * (size_t)n_ctx * (size_t)(c->n_kv_heads * c->head_dim) * sizeof(float);
    for (int l = 0; rc == TIDE_OK && l < c->n_layers; l++)
        rc = mc_kv_alloc("model-llada2", &m->dev, l, kv_bytes, &m->layers[l].k_cache,
                         &m->layers[l].v_cache);
    if (rc != TIDE_OK) {
        free_buffers(m);
        return rc;
    }
    m->n_ctx = n_ctx;
    m->max_tokens = max_tokens;
    m->n_slots = n_slots;
    return TIDE_OK;
}

int llada2_open(const struct tide_model_args *args, struct tide_model **out)
{
    if (args->block < 1) {
        tide_error("model-llada2: open needs a block length >= 1");
        return TIDE_E_INVAL;
    }
    struct tide_model *m = calloc(1, sizeof *m);
    if (!m)
        return TIDE_E_NOMEM;
    int rc = llada2_cfg_load(args->dir, &m->cfg);
    if (rc != TIDE_OK) {
        free(m);
        return rc;
    }
    const struct llada2_cfg *c = &m->cfg;
    m->dev = *args->dev;
    m->moe = args->moe;
    m->block = args->block;
    snprintf(m->arch, sizeof m->arch, "llada2_moe");
    m->info = (struct tide_model_info){
        .size = sizeof m->info,
        .arch = m->arch,
        .n_layers = c->n_layers,
        .n_moe_layers = llada2_n_moe_layers(c),
        .n_experts = c->n_experts,
        .top_k = c->top_k,
        .hidden = c->hidden,
        .vocab_size = c->vocab,
        .max_ctx = c->max_pos,
        .expert_bytes = llada2_expert_bytes(c),
        .dense_bytes = llada2_dense_bytes(c),
        .mask_token = "<|mask|>",
        .eos_token = "<|endoftext|>",
        .stop_token = "<|role_end|>",
        .chat_template = llada2_chat_template,
        .attention = TIDE_ATTN_BLOCK_CAUSAL,
    };
    char why[512];
    m->info.decoder = llada2_checkpoint_decoder(args->dir, args->opts, why, sizeof why);
    mc_prof_init(&m->prof, mc_phase_names, MC_N_PHASES);
    if ((rc = mc_open_checkpoint(args, llada2_n_moe_layers(c), c->n_experts, c->top_k, c->hidden,
                                 c->moe_inter, &c->quant, &m->st)) != TIDE_OK)
        goto fail;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = TIDE_E_NOMEM;
        goto fail;
    }
    if ((rc = load_weight(m, "model.word_embeddings.weight", TIDE_DTYPE_BF16, 2, c->vocab,
                          c->hidden, TIDE_WEIGHT_EMBED, &m->embed)) != TIDE_OK)
        goto fail;
    int moe_index = 0;
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = load_layer(m, l, &moe_index)) != TIDE_OK)
            goto fail;
    if ((rc = load_weight(m, "model.norm.weight", TIDE_DTYPE_BF16, 1, c->hidden, 0,
                          TIDE_WEIGHT_VECTOR, &m->norm)) != TIDE_OK)
        goto fail;
    if ((rc = load_weight(m, c->tied ? "model.word_embeddings.weight" : "lm_head.weight",
                          TIDE_DTYPE_BF16, 2, c->vocab, c->hidden, TIDE_WEIGHT_MATMUL, &m->head)) !=
        TIDE_OK)
        goto fail;
    *out = m;
    return TIDE_OK;
fail:
    llada2_close(m);
    return rc;
}

void llada2_close(struct tide_model *m)
{
    if (!m)
        return;
    if (m->dev.ops) {
#define WFREE(w) mc_weight_free(&m->dev, &(w))
        for (int l = 0; m->layers && l < m->cfg.n_layers; l++) {
            struct llada2_layer *L = &m->layers[l];
            WFREE(L->in_norm);
            WFREE(L->qkv);
            WFREE(L->q_norm);
            WFREE(L->k_norm);
            WFREE(L->dense);
            WFREE(L->post_norm);
            WFREE(L->ffn_gate);
            WFREE(L->ffn_up);
            WFREE(L->ffn_down);
            WFREE(L->router);
            WFREE(L->router_bias);
            WFREE(L->sh_gate);
            WFREE(L->sh_up);
            WFREE(L->sh_down);
        }
        WFREE(m->embed);
        WFREE(m->norm);
        WFREE(m->head);
#undef WFREE
        free_buffers(m);
    }
    for (int l = 0; m->layers && l < m->cfg.n_layers; l++)
        free(m->layers[l].xviews);
    free(m->layers);
    free(m->prof.seen);
    tide_st_close(m->st);
    mc_dequant_free(&m->dq);
    free(m);
}

const struct tide_model_info *llada2_info(const struct tide_model *m)
{
    return &m->info;
}

/* ---- phase profiling ---------------------------------------------------- */

/* End the phase being timed and start `next`. */
static int llada2_phase(struct tide_model *m, int next)
{
    return mc_prof_phase(&m->prof, ops_of(m), m->dev.bk, next);
}

int llada2_profile(struct tide_model *m, bool on)
{
    return mc_prof_switch(&m->prof, on, m->cfg.n_experts);
}

int llada2_profile_read(const struct tide_model *m, struct tide_phase_stats *out, int max, int *n)
{
    return mc_prof_read(&m->prof, out, max, n);
}

/* ---- forward ------------------------------------------------------------ */

/* y = down(silu(x gate^T) * (x up^T)) for a dense SwiGLU MLP of width I. */
static int swiglu_mlp(struct tide_model *m, const struct tide_tensor *x, int64_t n, int64_t I,
                      const struct tide_weight *gate, const struct tide_weight *up,
                      const struct tide_weight *down, const struct tide_tensor *y)
{
    int rc = mc_swiglu(&m->dev, m->g, m->u, m->a, x, n, I, gate, up, down, y);
    if (rc != TIDE_OK)
        return rc;
    mc_prof_mm_work(&m->prof, n, 3 * I, m->cfg.hidden);
    return TIDE_OK;
}

/* FLOPs of block-causal attention for each span's queries: scores and
 * mixing, 2 x 2 per visible key and dimension. */
static uint64_t llada2_attn_flops(const struct tide_model *m, const struct mc_span *sp, int n_sp)
{
    const int64_t hd = m->cfg.head_dim;
    uint64_t keys = 0;
    for (int s = 0; s < n_sp; s++) {
        const int64_t total = sp[s].pos0 + sp[s].n;
        for (int64_t i = 0; i < sp[s].n; i++) {
            const int64_t end = ((sp[s].pos0 + i) / m->block + 1) * m->block;
            keys += (uint64_t)(end < total ? end : total);
        }
    }
    return 4u * keys * (uint64_t)(m->cfg.n_heads * hd);
}

static int attention_block(struct tide_model *m, struct llada2_layer *L,
                           const struct tide_tensor *x)
{
    const struct mc_batch *b = &m->batch;
    const int64_t n = b->T;
    const struct llada2_cfg *c = &m->cfg;
    const struct tide_backend_ops *o = ops_of(m);
    struct tide_backend *bk = m->dev.bk;
    const int64_t hd = c->head_dim, qw = c->n_heads * hd, kw = c->n_kv_heads * hd;
    struct tide_tensor qkv = tide_tensor_2d(m->qkv, TIDE_DTYPE_F32, n, qw + 2 * kw);
    struct tide_tensor q = tide_tensor_slice(&qkv, 0, n, 0, qw);
    struct tide_tensor k = tide_tensor_slice(&qkv, 0, n, qw, kw);
    struct tide_tensor v = tide_tensor_slice(&qkv, 0, n, qw + kw, kw);
    int rc;
    if ((rc = o->matmul(bk, x, L->qkv, &qkv)))
        return rc;
    if (c->qk_norm && ((rc = o->rmsnorm(bk, &q, L->q_norm, (int)hd, (float)c->eps, &q)) ||
                       (rc = o->rmsnorm(bk, &k, L->k_norm, (int)hd, (float)c->eps, &k))))
        return rc;
    if (c->rot_dim > 0 && ((rc = mc_rope_spans(&m->dev, &q, (int)hd, c->rot_dim,
                                               (float)c->rope_theta, b->sp, b->n_sp)) ||
                           (rc = mc_rope_spans(&m->dev, &k, (int)hd, c->rot_dim,
                                               (float)c->rope_theta, b->sp, b->n_sp))))
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
        .wo = L->dense,
        .sp = b->sp,
        .n_sp = b->n_sp,
        .n_ctx = m->n_ctx,
        .T = n,
        .hidden = c->hidden,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = (int)hd,
        .block = m->block,
    };
    if ((rc = mc_attend(&m->dev, &aa)))
        return rc;
    if (m->prof.on) {
        mc_prof_mm_work(&m->prof, n, qw + 2 * kw, c->hidden);
        mc_prof_mm_work(&m->prof, n, c->hidden, qw);
        mc_prof_work(&m->prof, 2u * mc_spans_kv_positions(b->sp, b->n_sp) * (uint64_t)kw * 4u, 0,
                     llada2_attn_flops(m, b->sp, b->n_sp));
    }
    return TIDE_OK;
}

/* Distinct experts among the n x top_k routing ids: bytes and FLOPs of the routed experts. */
static void llada2_routed_work(struct tide_model *m, int64_t n)
{
    const struct llada2_cfg *c = &m->cfg;
    if (!m->prof.on)
        return;
    const uint64_t distinct = mc_prof_distinct(&m->prof, m->ids, n * c->top_k, c->n_experts);
    mc_prof_mm_work(&m->prof, n, c->n_experts, c->hidden); /* router */
    mc_prof_work(&m->prof, distinct * llada2_expert_bytes(c),
                 2u * (uint64_t)(n * c->top_k) * 3u * (uint64_t)c->hidden * (uint64_t)c->moe_inter,
                 0);
}

static int moe_block(struct tide_model *m, struct llada2_layer *L, int64_t n,
                     const struct tide_tensor *x, const struct tide_tensor *y)
{
    const struct llada2_cfg *c = &m->cfg;
    const struct tide_backend_ops *o = ops_of(m);
    struct tide_backend *bk = m->dev.bk;
    struct tide_tensor rl = tide_tensor_2d(m->rlog, TIDE_DTYPE_F32, n, c->n_experts);
    int rc = llada2_phase(m, MC_PH_ROUTED);
    if (!rc)
        rc = o->matmul(bk, x, L->router, &rl);
    if (rc)
        return rc;
    const struct tide_router_args ra = {
        .size = sizeof ra,
        .logits = &rl,
        .bias = L->router_bias,
        .n_group = c->n_group,
        .topk_group = c->topk_group,
        .top_k = c->top_k,
        .norm_topk = c->norm_topk,
        .scale = (float)c->routed_scale,
        .ids_host = m->ids,
        .weights_host = m->wts,
    };
    if ((rc = o->router(bk, &ra)))
        return rc;
    if ((rc = tide_moe_forward(m->moe, L->moe_index, x, m->ids, m->wts, n, y)))
        return rc;
    llada2_routed_work(m, n);
    if (!c->n_shared)
        return TIDE_OK;
    struct tide_tensor sh = tide_tensor_2d(m->tmp2, TIDE_DTYPE_F32, n, c->hidden);
    if ((rc = llada2_phase(m, MC_PH_SHARED)) ||
        (rc = swiglu_mlp(m, x, n, (int64_t)c->moe_inter * c->n_shared, L->sh_gate, L->sh_up,
                         L->sh_down, &sh)))
        return rc;
    return o->add(bk, y, &sh);
}

/* The output layer for the rows asked for: final norm and head on h's rows
 * rows[0..n_rows) (NULL: rows 0..n_rows-1), read into logits. Every op is
 * row by row, so a row's logits do not depend on which others are computed. */
static int llada2_output(struct tide_model *m, const struct tide_seq_span *spans)
{
    const struct llada2_cfg *c = &m->cfg;
    const struct mc_output_args oa = {
        .h = m->h,
        .x = m->x,
        .tmp = m->tmp,
        .lg = m->logits,
        .norm = m->norm,
        .head = m->head,
        .max_tokens = m->max_tokens,
        .hidden = c->hidden,
        .vocab = c->vocab,
        .eps = (float)c->eps,
    };
    int rc = mc_output_batch(&m->dev, &oa, &m->batch, spans);
    mc_prof_mm_work(&m->prof, m->batch.R, c->vocab, c->hidden);
    return rc;
}

/* The forward pass over every span's rows (forward_batch). */
int llada2_forward_batch(struct tide_model *m, const struct tide_seq_span *spans, int n_spans)
{
    const struct llada2_cfg *c = &m->cfg;
    int rc = mc_batch_prepare("model-llada2", &m->batch, spans, n_spans, m->n_slots, m->n_ctx,
                              m->max_tokens, c->vocab);
    if (rc != TIDE_OK)
        return rc;
    const int64_t n = m->batch.T;
    const struct tide_backend_ops *o = ops_of(m);
    struct tide_backend *bk = m->dev.bk;
    const int64_t H = c->hidden;
    struct tide_tensor h = tide_tensor_2d(m->h, TIDE_DTYPE_F32, n, H);
    struct tide_tensor x = tide_tensor_2d(m->x, TIDE_DTYPE_BF16, n, H);
    struct tide_tensor tmp = tide_tensor_2d(m->tmp, TIDE_DTYPE_F32, n, H);
    const float eps = (float)c->eps;
    rc = llada2_phase(m, MC_PH_OTHER);
    if (!rc)
        rc = o->embed(bk, m->embed, m->batch.ids, n, &h);
    for (int l = 0; rc == TIDE_OK && l < c->n_layers; l++) {
        struct llada2_layer *L = &m->layers[l];
        if ((rc = o->rmsnorm(bk, &h, L->in_norm, (int)H, eps, &x)) ||
            (rc = llada2_phase(m, MC_PH_ATTENTION)) || (rc = attention_block(m, L, &x)) ||
            (rc = llada2_phase(m, MC_PH_OTHER)) ||
            (rc = o->rmsnorm(bk, &h, L->post_norm, (int)H, eps, &x)))
            break;
        if (L->moe_index < 0) {
            if (!(rc = llada2_phase(m, MC_PH_DENSE)))
                rc = swiglu_mlp(m, &x, n, c->inter, L->ffn_gate, L->ffn_up, L->ffn_down, &tmp);
        } else {
            rc = moe_block(m, L, n, &x, &tmp);
        }
        if (rc == TIDE_OK && (rc = llada2_phase(m, MC_PH_OTHER)) == TIDE_OK)
            rc = o->add(bk, &h, &tmp);
    }
    if (rc == TIDE_OK && m->batch.R > 0) {
        if (!(rc = llada2_phase(m, MC_PH_OUTPUT)))
            rc = llada2_output(m, spans);
    } else if (rc == TIDE_OK) {
        rc = o->sync(bk);
    }
    if (rc == TIDE_OK)
        rc = llada2_phase(m, MC_N_PHASES);
    return rc;
}

/* The mean of the prompt's input embeddings, from the mapped checkpoint
 * (the table was checked at open), accumulated in double so the result does
 * not depend on the prompt's length beyond rounding to f32. */
int llada2_prompt_vector(struct tide_model *m, const int32_t *ids, int64_t n, float *out)
{
    return mc_prompt_vector("model-llada2", tide_st_find(m->st, "model.word_embeddings.weight"),
                            m->cfg.vocab, m->cfg.hidden, ids, n, out);
}
