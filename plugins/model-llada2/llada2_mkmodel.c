/* `tide mkmodel`: synthetic llada2_moe checkpoints in exactly the real
 * format (config.json, bf16 model.safetensors, tokenizer.json), with
 * deterministic random weights. Tests and the demo use these; nothing is
 * ever downloaded. Weights stream to disk, so multi-GB presets need little
 * memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llada2.h"
#include "model-common/mkmodel.h"
#include "tide/log.h"
#include "tide/status.h"

/* A preset: the shape of one model size, a row of mk_presets. The rest of its
 * llada2_cfg is the same for every preset (mk_preset_cfg). */
struct mk_preset {
    const char *name;
    int hidden, n_layers, n_heads, n_kv_heads, head_dim, rot_dim;
    int inter, moe_inter, n_experts, top_k, n_group, topk_group;
    int vocab; /* 0: the synthetic tokenizer's size */
    int64_t max_pos;
    int vocab_target; /* tokenizer tokens before the specials */
};

/* clang-format off */
static const struct mk_preset mk_presets[] = {
    /*             hidden   heads  head_dim     inter    experts groups        vocab vocab_target
     *                 layers kv_heads  rot_dim   moe_inter   top_k topk_grp        max_pos */
    {"tiny",           64,  4,  4,   2,  16,  8,  128,   32,  32, 4,  4,   2,      0,  4096,  480},
    {"small",         512,  3,  8,   2,  64, 32, 1024,  256,  64, 8,  8,   4,      0,  4096,  480},
    {"llada2-mini",  2048, 20, 16,   4, 128, 64, 5120,  512, 256, 8,  8,   4, 157184, 32768, 2000},
    {"llada2-flash", 4096, 32, 32,   4, 128, 64, 9216, 1024, 256, 8,  8,   4, 157184, 32768, 2000},
};
/* clang-format on */

/* The llada2_cfg of a preset: its row, and what all LLaDA2.0 checkpoints share. */
static struct llada2_cfg mk_preset_cfg(const struct mk_preset *p)
{
    return (struct llada2_cfg){
        .hidden = p->hidden,
        .n_layers = p->n_layers,
        .n_heads = p->n_heads,
        .n_kv_heads = p->n_kv_heads,
        .head_dim = p->head_dim,
        .rot_dim = p->rot_dim,
        .inter = p->inter,
        .moe_inter = p->moe_inter,
        .n_experts = p->n_experts,
        .top_k = p->top_k,
        .n_shared = 1,
        .n_group = p->n_group,
        .topk_group = p->topk_group,
        .first_dense = 1,
        .vocab = p->vocab,
        .max_pos = p->max_pos,
        .rope_theta = 600000.0,
        .eps = 1e-6,
        .routed_scale = 2.5,
        .norm_topk = true,
        .qk_norm = true,
        .tied = false,
        .expert_bias = true,
    };
}

/* How the values of a tensor are drawn: base + amp * U(-1,1). */
static void mk_dist(const char *name, const int64_t *shape, int nd, float *base, float *amp)
{
    *base = 0.0f;
    if (strstr(name, "layernorm") || strstr(name, "norm.weight")) {
        *base = 1.0f;
        *amp = 0.1f;
    } else if (strstr(name, "expert_bias")) {
        *amp = 0.05f;
    } else if (strstr(name, "word_embeddings")) {
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
    return llada2_tensor_spec(ctx, i, name, dt, shape);
}

static int mk_write_cfg(const char *path, const void *cfg)
{
    return llada2_cfg_write(path, cfg);
}

int llada2_mkmodel(const char *dir, const char *preset, int layers, uint64_t seed,
                   const struct tide_progress *pg)
{
    const struct mk_preset *p = NULL;
    for (size_t i = 0; i < sizeof mk_presets / sizeof mk_presets[0]; i++)
        if (!strcmp(mk_presets[i].name, preset))
            p = &mk_presets[i];
    if (!p) {
        tide_error("mkmodel: unknown preset '%s' (model-llada2 has tiny, small, llada2-mini, "
                   "llada2-flash)",
                   preset);
        return TIDE_E_CONFIG;
    }
    struct llada2_cfg c = mk_preset_cfg(p);
    if (layers > 0) {
        if (layers <= c.first_dense) {
            tide_error("mkmodel: --layers %d leaves no MoE layer (the first %d are dense)", layers,
                       c.first_dense);
            return TIDE_E_CONFIG;
        }
        c.n_layers = layers;
    }
    float *head_gain;
    int rc = mc_mk_tokenizer(dir, p->vocab_target, &c.vocab, &head_gain);
    if (rc != TIDE_OK)
        return rc;
    const uint64_t bytes = llada2_dense_bytes(&c) + llada2_expert_bytes(&c) *
                                                        (uint64_t)llada2_n_moe_layers(&c) *
                                                        (uint64_t)c.n_experts;
    return mc_mk_finish(dir, preset, c.n_layers, &c, mk_write_cfg, llada2_tensor_count(&c), mk_spec,
                        mk_dist, bytes, seed, head_gain, pg);
}
