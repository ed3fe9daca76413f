/* `tide mkmodel`: synthetic LLaDA-MoE checkpoints in exactly the real
 * format (config.json, bf16 model.safetensors, tokenizer.json), with
 * deterministic random weights. Tests and the demo use these; nothing is
 * ever downloaded. Weights stream to disk, so multi-GB presets need little
 * memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lladamoe.h"
#include "model-common/mkmodel.h"
#include "tide/log.h"
#include "tide/status.h"

/* A preset: the shape of one model size. */
struct mk_preset {
    const char *name;
    int hidden, n_layers, n_heads, n_kv_heads;
    int dense_inter, moe_inter, shared_inter, n_experts, top_k;
    int n_dense; /* the first n_dense layers are dense (moe_layer_freq 0) */
    bool bias;   /* moe_router_enable_expert_bias */
    int vocab;   /* 0: the synthetic tokenizer's size */
    int64_t max_pos;
    int vocab_target; /* tokenizer tokens before the specials */
};

/* tiny-moe exercises every path the code has (a dense layer, a shared expert,
 * the expert bias, GQA) at test speed; llada-moe-7b is LLaDA-MoE-7B-A1B's
 * published shape (all 16 layers MoE, no shared expert, no bias). */
/* clang-format off */
static const struct mk_preset mk_presets[] = {
    /*               hidden  heads  dense_inter shared experts dense       vocab  vocab_target
     *                   layers kv  moe_inter         top_k   bias             max_pos */
    {"tiny-moe",         64,  3, 4,  2,  128,   32,  32,  16, 4, 1, true,      0,  4096,  480},
    {"llada-moe-7b",   2048, 16, 16, 16, 8192, 1024,   0,  64, 8, 0, false, 157184, 8192, 2000},
};
/* clang-format on */

static struct lmoe_cfg mk_preset_cfg(const struct mk_preset *p)
{
    struct lmoe_cfg c = {
        .hidden = p->hidden,
        .n_layers = p->n_layers,
        .n_heads = p->n_heads,
        .n_kv_heads = p->n_kv_heads,
        .head_dim = p->hidden / p->n_heads,
        .rot_dim = p->hidden / p->n_heads, /* partial_rotary_factor 1 */
        .dense_inter = p->n_dense ? p->dense_inter : 0,
        .moe_inter = p->moe_inter,
        .shared_inter = p->shared_inter,
        .n_experts = p->n_experts,
        .top_k = p->top_k,
        .vocab = p->vocab,
        .max_pos = p->max_pos,
        .rope_theta = 50000.0,
        .eps = 1e-5,
        .qk_norm = true,
        .tied = false,
        .expert_bias = p->bias,
    };
    for (int l = 0; l < p->n_layers; l++)
        c.moe[l] = l >= p->n_dense;
    return c;
}

/* How the values of a tensor are drawn: base + amp * U(-1,1). */
static void mk_dist(const char *name, const int64_t *shape, int nd, float *base, float *amp)
{
    *base = 0.0f;
    if (strstr(name, "layernorm") || strstr(name, "norm.weight") || strstr(name, "q_norm") ||
        strstr(name, "k_norm")) {
        *base = 1.0f;
        *amp = 0.1f;
    } else if (strstr(name, "expert_bias")) {
        *amp = 0.01f; /* next to softmax scores of about 1/n_experts */
    } else if (strstr(name, "embed_tokens")) {
        *amp = 1.0f;
    } else {
        /* uniform with variance 1/fan_in keeps activations near unit RMS */
        double fan_in = nd == 2 ? (double)shape[1] : 1.0;
        *amp = (float)(sqrt(3.0 / fan_in) * (strstr(name, "lm_head") ? 4.0 : 1.0));
    }
}

static int mk_spec(const void *ctx, int i, char name[MC_NAME_MAX], enum tide_dtype *dt,
                   int64_t shape[TIDE_MAX_DIMS])
{
    return lmoe_tensor_spec(ctx, i, name, dt, shape);
}

static int mk_write_cfg(const char *path, const void *cfg)
{
    return lmoe_cfg_write(path, cfg);
}

int lmoe_mkmodel(const char *dir, const char *preset, int layers, uint64_t seed,
                 const struct tide_progress *pg)
{
    const struct mk_preset *p = NULL;
    for (size_t i = 0; i < sizeof mk_presets / sizeof mk_presets[0]; i++)
        if (!strcmp(mk_presets[i].name, preset))
            p = &mk_presets[i];
    if (!p) {
        tide_error("mkmodel: unknown preset '%s' (model-llada-moe has tiny-moe, llada-moe-7b)",
                   preset);
        return TIDE_E_CONFIG;
    }
    struct lmoe_cfg c = mk_preset_cfg(p);
    if (layers > 0) {
        if (layers <= p->n_dense || layers > LMOE_MAX_LAYERS) {
            tide_error("mkmodel: --layers %d must be in (%d, %d] (the first %d are dense)", layers,
                       p->n_dense, LMOE_MAX_LAYERS, p->n_dense);
            return TIDE_E_CONFIG;
        }
        c.n_layers = layers;
        for (int l = 0; l < layers; l++)
            c.moe[l] = l >= p->n_dense;
    }
    float *head_gain;
    int rc = mc_mk_tokenizer(dir, p->vocab_target, &c.vocab, &head_gain);
    if (rc != TIDE_OK)
        return rc;
    lmoe_cfg_finish(&c);
    const uint64_t bytes =
        lmoe_dense_bytes(&c) + lmoe_expert_bytes(&c) * (uint64_t)c.n_moe * (uint64_t)c.n_experts;
    return mc_mk_finish(dir, preset, c.n_layers, &c, mk_write_cfg, lmoe_tensor_count(&c), mk_spec,
                        mk_dist, bytes, seed, head_gain, pg);
}
