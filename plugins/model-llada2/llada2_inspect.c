/* `tide inspect DIR` for llada2_moe checkpoints: architecture, parameter
 * counts, memory per expert budget, and every missing, unexpected or
 * mis-shaped tensor. Reads headers only; no weights are touched. */
#include "llada2.h"
#include "model-common/inspect.h"
#include "tide/log.h"
#include "tide/status.h"

static int spec_of(const void *ctx, int i, char name[MC_NAME_MAX], enum tide_dtype *dt,
                   int64_t shape[TIDE_MAX_DIMS])
{
    return llada2_tensor_spec(ctx, i, name, dt, shape);
}

int llada2_inspect(const char *dir, const struct tide_inspect_args *args)
{
    FILE *f = args->out ? args->out : stdout;
    struct llada2_cfg c;
    int rc = llada2_cfg_load(dir, &c);
    if (rc != TIDE_OK)
        return rc;
    const int moe = llada2_n_moe_layers(&c);
    const uint64_t eb = llada2_expert_bytes(&c), dense = llada2_dense_bytes(&c);
    const uint64_t routed = eb * (uint64_t)moe * (uint64_t)c.n_experts;
    const uint64_t emb = 2ull * (uint64_t)c.vocab * (uint64_t)c.hidden;
    const uint64_t eb_bf16 =
        tide_qexpert_bytes(TIDE_QFMT_NONE, c.quant.block, c.hidden, c.moe_inter);
    const uint64_t active = dense - emb + eb_bf16 * (uint64_t)moe * (uint64_t)c.top_k;
    fprintf(f, "checkpoint   %s\n", dir);
    fprintf(f, "architecture llada2_moe: %d layers (%d dense, %d MoE), hidden %d\n", c.n_layers,
            c.first_dense, moe, c.hidden);
    fprintf(f,
            "attention    %d query heads, %d KV heads, head_dim %d, RoPE on %d dims "
            "(theta %g), QK-norm %s\n",
            c.n_heads, c.n_kv_heads, c.head_dim, c.rot_dim, c.rope_theta, c.qk_norm ? "on" : "off");
    fprintf(f,
            "experts      %d routed per MoE layer (width %d), top-%d in %d groups (keep %d), "
            "%d shared, scale %g\n",
            c.n_experts, c.moe_inter, c.top_k, c.n_group, c.topk_group, c.n_shared, c.routed_scale);
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
    return mc_inspect_rest(f, dir, &z, &c, llada2_tensor_count(&c), spec_of, args->budget);
}
