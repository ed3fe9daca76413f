/* `tide inspect DIR` for LLaDA-MoE checkpoints: architecture, parameter
 * counts, memory per expert budget, and every missing, unexpected or
 * mis-shaped tensor. Reads headers only; no weights are touched. */
#include "lladamoe.h"
#include "model-common/inspect.h"
#include "tide/log.h"
#include "tide/status.h"

static int spec_of(const void *ctx, int i, char name[MC_NAME_MAX], enum tide_dtype *dt,
                   int64_t shape[TIDE_MAX_DIMS])
{
    return lmoe_tensor_spec(ctx, i, name, dt, shape);
}

int lmoe_inspect(const char *dir, const struct tide_inspect_args *args)
{
    FILE *f = args->out ? args->out : stdout;
    struct lmoe_cfg c;
    int rc = lmoe_cfg_load(dir, &c);
    if (rc != TIDE_OK)
        return rc;
    const int moe = c.n_moe;
    const uint64_t eb = lmoe_expert_bytes(&c), dense = lmoe_dense_bytes(&c);
    const uint64_t routed = eb * (uint64_t)moe * (uint64_t)c.n_experts;
    const uint64_t emb = (c.tied ? 1ull : 2ull) * (uint64_t)c.vocab * (uint64_t)c.hidden;
    const uint64_t eb_bf16 =
        tide_qexpert_bytes(TIDE_QFMT_NONE, c.quant.block, c.hidden, c.moe_inter);
    const uint64_t active = dense - emb + eb_bf16 * (uint64_t)moe * (uint64_t)c.top_k;
    char shared[32];
    snprintf(shared, sizeof shared, c.shared_inter ? "width %d" : "none", c.shared_inter);
    fprintf(f, "checkpoint   %s\n", dir);
    fprintf(f,
            "architecture llada_moe (LLaDAMoEModelLM): %d layers (%d dense, %d MoE), hidden %d\n",
            c.n_layers, c.n_layers - moe, moe, c.hidden);
    fprintf(f,
            "attention    full (bidirectional), %d query heads, %d KV heads, head_dim %d, RoPE on "
            "%d dims (theta %g), QK-norm %s\n",
            c.n_heads, c.n_kv_heads, c.head_dim, c.rot_dim, c.rope_theta, c.qk_norm ? "on" : "off");
    fprintf(f,
            "experts      %d routed per MoE layer (width %d), softmax top-%d, expert bias %s, "
            "shared expert %s\n",
            c.n_experts, c.moe_inter, c.top_k, c.expert_bias ? "on" : "off", shared);
    const struct mc_inspect_sizes z = {
        .vocab = c.vocab,
        .n_experts = c.n_experts,
        .moe = moe,
        .max_pos = c.max_pos,
        .eb = eb,
        .dense = dense,
        .routed = routed,
        .active = active,
        .format = tide_qfmt_name(c.quant.fmt),
        .eb_bf16 = eb_bf16,
        .fp8_block = c.quant.fmt == TIDE_QFMT_FP8 ? c.quant.block : NULL,
    };
    return mc_inspect_rest(f, dir, &z, &c, lmoe_tensor_count(&c), spec_of, args->budget);
}
