/* The LLaDA-MoE forward pass over backend ops: the family's skeleton
 * (model-common/skeleton.h: embed, then per layer attention and a dense or
 * MoE feed-forward, then the final norm and the head), with what is
 * LLaDA-MoE's own as the official modeling_lladamoe.py (LLaDAMoEModelLM)
 * writes it: the tensor names, q, k and v projected apart, full
 * bidirectional attention, and a softmax router on the host with an
 * optional expert bias. Routed experts go through the core's dispatcher
 * (tide_moe_forward), so every placement policy and offload path applies. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lladamoe.h"
#include "model-common/skeleton.h"
#include "tide/log.h"
#include "tide/status.h"

/* The prompt format of inclusionAI's inference engine for LLaDA-MoE
 * (dInfer benchmarks), the Ling tokenizer's roles. */
const char lmoe_chat_template[] = "<role>SYSTEM</role>detailed thinking off<|role_end|>"
                                  "<role>HUMAN</role>{prompt}<|role_end|><role>ASSISTANT</role>";

struct tide_model {
    struct mc_model base; /* first: the skeleton's state */
    struct lmoe_cfg cfg;
    float *rl_host; /* [max_tokens * n_experts] router logits on the host */
    float *scratch; /* [n_experts] */
};

/* The skeleton's model is the first member of ours. */
static struct tide_model *lmoe_of(struct mc_model *m)
{
    return (struct tide_model *)(void *)m;
}

void lmoe_route(const float *logits, const float *bias, int n_experts, int top_k, float *p,
                int32_t *ids, float *w)
{
    float mx = -INFINITY;
    for (int e = 0; e < n_experts; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    float sum = 0.0f;
    for (int e = 0; e < n_experts; e++) {
        p[e] = expf(logits[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < n_experts; e++)
        p[e] = p[e] / sum + (bias ? bias[e] : 0.0f);
    /* top_k by selection: descending, ties to the lower id; NaN never wins */
    for (int j = 0; j < top_k; j++) {
        int best = -1;
        for (int e = 0; e < n_experts; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++)
                taken = ids[i] == e;
            if (taken)
                continue;
            if (best < 0 || p[e] > p[best] || (isnan(p[best]) && !isnan(p[e])))
                best = e;
        }
        ids[j] = best;
        w[j] = p[best];
    }
}

/* The softmax router runs on the host, like the backend router op's host
 * outputs; read waits for the router's matmul. */
static int lmoe_route_hook(struct mc_model *mm, const struct mc_layer *L,
                           const struct tide_tensor *rl, int64_t n)
{
    struct tide_model *m = lmoe_of(mm);
    const struct lmoe_cfg *c = &m->cfg;
    int rc = mm->dev.ops->read(mm->dev.bk, rl, m->rl_host);
    if (rc != TIDE_OK)
        return rc;
    for (int64_t t = 0; t < n; t++)
        lmoe_route(m->rl_host + t * c->n_experts, L->expert_bias, c->n_experts, c->top_k,
                   m->scratch, mm->ids + t * c->top_k, mm->wts + t * c->top_k);
    return TIDE_OK;
}

static int lmoe_reserve_hook(struct mc_model *mm, int64_t max_tokens)
{
    struct tide_model *m = lmoe_of(mm);
    m->rl_host = malloc((size_t)max_tokens * (size_t)m->cfg.n_experts * sizeof *m->rl_host);
    return m->rl_host ? TIDE_OK : TIDE_E_NOMEM;
}

static void lmoe_release_hook(struct mc_model *mm)
{
    struct tide_model *m = lmoe_of(mm);
    free(m->rl_host);
    m->rl_host = NULL;
}

static const struct mc_model_hooks lmoe_hooks = {
    .route = lmoe_route_hook,
    .reserve = lmoe_reserve_hook,
    .release = lmoe_release_hook,
};

static int load_layer(struct tide_model *m, int l, int *moe_index)
{
    struct mc_model *b = &m->base;
    const struct lmoe_cfg *c = &m->cfg;
    struct mc_layer *L = &b->layers[l];
    const int64_t H = c->hidden, hd = c->head_dim;
    const int64_t qw = (int64_t)c->n_heads * hd, kw = (int64_t)c->n_kv_heads * hd;
    char n[LMOE_NAME_MAX];
    int rc;
#define W(field, suffix, dt, nd, a, b_, kind)                                                      \
    do {                                                                                           \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                    \
        if ((rc = mc_model_weight(b, n, dt, nd, a, b_, kind, &L->field)) != TIDE_OK)               \
            return rc;                                                                             \
    } while (0)
    const enum tide_dtype B = TIDE_DTYPE_BF16;
    W(in_norm, "input_layernorm.weight", B, 1, H, 0, TIDE_WEIGHT_VECTOR);
    W(wq, "self_attn.q_proj.weight", B, 2, qw, H, TIDE_WEIGHT_MATMUL);
    W(wk, "self_attn.k_proj.weight", B, 2, kw, H, TIDE_WEIGHT_MATMUL);
    W(wv, "self_attn.v_proj.weight", B, 2, kw, H, TIDE_WEIGHT_MATMUL);
    if (c->qk_norm) {
        W(q_norm, "self_attn.q_norm.weight", B, 1, hd, 0, TIDE_WEIGHT_VECTOR);
        W(k_norm, "self_attn.k_norm.weight", B, 1, hd, 0, TIDE_WEIGHT_VECTOR);
    }
    W(wo, "self_attn.o_proj.weight", B, 2, H, qw, TIDE_WEIGHT_MATMUL);
    W(post_norm, "post_attention_layernorm.weight", B, 1, H, 0, TIDE_WEIGHT_VECTOR);
    L->moe_index = -1;
    if (!c->moe[l]) {
        const int64_t I = c->dense_inter;
        W(ffn_gate, "mlp.gate_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(ffn_up, "mlp.up_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(ffn_down, "mlp.down_proj.weight", B, 2, H, I, TIDE_WEIGHT_MATMUL);
        return TIDE_OK;
    }
    L->moe_index = (*moe_index)++;
    W(router, "mlp.gate.weight", B, 2, c->n_experts, H, TIDE_WEIGHT_MATMUL);
    if (c->expert_bias) {
        const int64_t shape[1] = {c->n_experts};
        const struct tide_view *v;
        snprintf(n, sizeof n, "model.layers.%d.mlp.expert_bias", l);
        if ((rc = tide_st_expect(b->st, n, TIDE_DTYPE_F32, 1, shape, &v)) != TIDE_OK)
            return rc;
        L->expert_bias = v->data;
    }
    if (c->shared_inter) {
        const int64_t I = c->shared_inter;
        W(sh_gate, "shared_expert.gate_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(sh_up, "shared_expert.up_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(sh_down, "shared_expert.down_proj.weight", B, 2, H, I, TIDE_WEIGHT_MATMUL);
    }
#undef W
    return mc_model_experts(b, l, L);
}

int lmoe_open(const struct tide_model_args *args, struct tide_model **out)
{
    struct tide_model *m = calloc(1, sizeof *m);
    if (!m)
        return TIDE_E_NOMEM;
    int rc = lmoe_cfg_load(args->dir, &m->cfg);
    if (rc != TIDE_OK) {
        free(m);
        return rc;
    }
    const struct lmoe_cfg *c = &m->cfg;
    const struct mc_dims d = {
        .n_layers = c->n_layers,
        .hidden = c->hidden,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = c->head_dim,
        .rot_dim = c->rot_dim,
        .vocab = c->vocab,
        .n_experts = c->n_experts,
        .top_k = c->top_k,
        .dense_inter = c->dense_inter,
        .shared_inter = c->shared_inter,
        .moe_inter = c->moe_inter,
        .max_pos = c->max_pos,
        .eps = c->eps,
        .rope_theta = c->rope_theta,
        .qk_norm = c->qk_norm,
    };
    const struct tide_model_info info = {
        .size = sizeof info,
        .arch = "llada_moe",
        .n_layers = c->n_layers,
        .n_moe_layers = c->n_moe,
        .n_experts = c->n_experts,
        .top_k = c->top_k,
        .hidden = c->hidden,
        .vocab_size = c->vocab,
        .max_ctx = c->max_pos,
        .expert_bytes = lmoe_expert_bytes(c),
        .dense_bytes = lmoe_dense_bytes(c),
        /* The Ling tokenizer LLaDA-MoE shares with LLaDA2.0: mask id 156895
         * is "<|mask|>", eos 156892 "<|endoftext|>", the turn end "<|role_end|>". */
        .mask_token = "<|mask|>",
        .eos_token = "<|endoftext|>",
        .stop_token = "<|role_end|>",
        .chat_template = lmoe_chat_template,
        .attention = TIDE_ATTN_FULL,
        .decoder = "llada",
    };
    /* args->block is not read: the attention is full (the official code
     * passes attention_mask = None and is_causal = False), block 0. */
    rc = mc_model_begin(&m->base, "model-llada-moe", &lmoe_hooks, &d, &c->quant, args, c->n_moe, 0,
                        &info);
    if (rc == TIDE_OK && !(m->scratch = malloc(sizeof *m->scratch * (size_t)c->n_experts)))
        rc = TIDE_E_NOMEM;
    if (rc == TIDE_OK)
        rc = mc_model_embed(&m->base, "model.embed_tokens.weight");
    int moe_index = 0;
    for (int l = 0; rc == TIDE_OK && l < c->n_layers; l++)
        rc = load_layer(m, l, &moe_index);
    if (rc == TIDE_OK)
        rc = mc_model_head(&m->base, "lm_head.weight", c->tied);
    if (rc != TIDE_OK) {
        lmoe_close(m);
        return rc;
    }
    *out = m;
    return TIDE_OK;
}

void lmoe_close(struct tide_model *m)
{
    if (!m)
        return;
    mc_model_close(&m->base);
    free(m->scratch);
    free(m);
}

MC_MODEL_SKELETON_OPS(lmoe)

int lmoe_prompt_vector(struct tide_model *m, const int32_t *ids, int64_t n, float *out)
{
    return mc_model_prompt_vector(&m->base, ids, n, out);
}
