/* The LLaDA2.0 forward pass over backend ops (DESIGN.md section 4): the
 * family's skeleton (model-common/skeleton.h: embed, then per layer
 * attention and a dense or MoE feed-forward, then the final norm and the
 * head), with what is LLaDA2's own: the tensor names, fused q/k/v rows,
 * block-causal attention with the generation's block, and the group-limited
 * sigmoid router with its expert bias (the backend's router op). Routed
 * experts go through the core's dispatcher (tide_moe_forward). */
#include <stdlib.h>
#include <string.h>

#include "llada2.h"
#include "model-common/skeleton.h"
#include "tide/log.h"
#include "tide/status.h"

const char llada2_chat_template[] = "<role>SYSTEM</role>detailed thinking off<|role_end|>"
                                    "<role>HUMAN</role>{prompt}<|role_end|><role>ASSISTANT</role>";

struct tide_model {
    struct mc_model base; /* first: the skeleton's state */
    struct llada2_cfg cfg;
};

/* The skeleton's model is the first member of ours. */
static struct tide_model *llada2_of(struct mc_model *m)
{
    return (struct tide_model *)(void *)m;
}

/* The group-limited sigmoid router (section 4, 2.8): the backend's op. */
static int llada2_route(struct mc_model *mm, const struct mc_layer *L, const struct tide_tensor *rl,
                        int64_t n)
{
    (void)n;
    const struct llada2_cfg *c = &llada2_of(mm)->cfg;
    const struct tide_router_args ra = {
        .size = sizeof ra,
        .logits = rl,
        .bias = L->router_bias,
        .n_group = c->n_group,
        .topk_group = c->topk_group,
        .top_k = c->top_k,
        .norm_topk = c->norm_topk,
        .scale = (float)c->routed_scale,
        .ids_host = mm->ids,
        .weights_host = mm->wts,
    };
    return mm->dev.ops->router(mm->dev.bk, &ra);
}

static const struct mc_model_hooks llada2_hooks = {.route = llada2_route};

static int load_layer(struct tide_model *m, int l, int *moe_index)
{
    struct mc_model *b = &m->base;
    const struct llada2_cfg *c = &m->cfg;
    struct mc_layer *L = &b->layers[l];
    const int64_t H = c->hidden, hd = c->head_dim;
    const enum tide_dtype B = TIDE_DTYPE_BF16;
    char n[LLADA2_NAME_MAX];
    int rc;
#define W(field, suffix, dt, nd, a, b_, kind)                                                      \
    do {                                                                                           \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                    \
        if ((rc = mc_model_weight(b, n, dt, nd, a, b_, kind, &L->field)) != TIDE_OK)               \
            return rc;                                                                             \
    } while (0)
    W(in_norm, "input_layernorm.weight", B, 1, H, 0, TIDE_WEIGHT_VECTOR);
    W(wqkv, "attention.query_key_value.weight", B, 2, (c->n_heads + 2 * c->n_kv_heads) * hd, H,
      TIDE_WEIGHT_MATMUL);
    if (c->qk_norm) {
        W(q_norm, "attention.query_layernorm.weight", B, 1, hd, 0, TIDE_WEIGHT_VECTOR);
        W(k_norm, "attention.key_layernorm.weight", B, 1, hd, 0, TIDE_WEIGHT_VECTOR);
    }
    W(wo, "attention.dense.weight", B, 2, H, c->n_heads * hd, TIDE_WEIGHT_MATMUL);
    W(post_norm, "post_attention_layernorm.weight", B, 1, H, 0, TIDE_WEIGHT_VECTOR);
    L->moe_index = -1;
    if (l < c->first_dense) {
        W(ffn_gate, "mlp.gate_proj.weight", B, 2, c->inter, H, TIDE_WEIGHT_MATMUL);
        W(ffn_up, "mlp.up_proj.weight", B, 2, c->inter, H, TIDE_WEIGHT_MATMUL);
        W(ffn_down, "mlp.down_proj.weight", B, 2, H, c->inter, TIDE_WEIGHT_MATMUL);
        return TIDE_OK;
    }
    L->moe_index = (*moe_index)++;
    W(router, "mlp.gate.weight", B, 2, c->n_experts, H, TIDE_WEIGHT_MATMUL);
    if (c->expert_bias)
        W(router_bias, "mlp.gate.expert_bias", TIDE_DTYPE_F32, 1, c->n_experts, 0,
          TIDE_WEIGHT_VECTOR);
    const int64_t Is = (int64_t)c->moe_inter * c->n_shared;
    if (c->n_shared) {
        W(sh_gate, "mlp.shared_experts.gate_proj.weight", B, 2, Is, H, TIDE_WEIGHT_MATMUL);
        W(sh_up, "mlp.shared_experts.up_proj.weight", B, 2, Is, H, TIDE_WEIGHT_MATMUL);
        W(sh_down, "mlp.shared_experts.down_proj.weight", B, 2, H, Is, TIDE_WEIGHT_MATMUL);
    }
#undef W
    return mc_model_experts(b, l, L);
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
        .dense_inter = c->inter,
        .shared_inter = (int64_t)c->moe_inter * c->n_shared,
        .moe_inter = c->moe_inter,
        .max_pos = c->max_pos,
        .eps = c->eps,
        .rope_theta = c->rope_theta,
        .qk_norm = c->qk_norm,
    };
    struct tide_model_info info = {
        .size = sizeof info,
        .arch = "llada2_moe",
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
    info.decoder = llada2_checkpoint_decoder(args->dir, args->opts, why, sizeof why);
    rc = mc_model_begin(&m->base, "model-llada2", &llada2_hooks, &d, &c->quant, args,
                        llada2_n_moe_layers(c), args->block, &info);
    if (rc == TIDE_OK)
        rc = mc_model_embed(&m->base, "model.word_embeddings.weight");
    int moe_index = 0;
    for (int l = 0; rc == TIDE_OK && l < c->n_layers; l++)
        rc = load_layer(m, l, &moe_index);
    if (rc == TIDE_OK)
        rc = mc_model_head(&m->base, "lm_head.weight", c->tied);
    if (rc != TIDE_OK) {
        llada2_close(m);
        return rc;
    }
    *out = m;
    return TIDE_OK;
}

void llada2_close(struct tide_model *m)
{
    if (!m)
        return;
    mc_model_close(&m->base);
    free(m);
}

MC_MODEL_SKELETON_OPS(llada2)

/* The mean of the prompt's input embeddings, accumulated in double so the
 * result does not depend on the prompt's length beyond rounding to f32. */
int llada2_prompt_vector(struct tide_model *m, const int32_t *ids, int64_t n, float *out)
{
    return mc_model_prompt_vector(&m->base, ids, n, out);
}
