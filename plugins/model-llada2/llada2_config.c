/* config.json of LLaDA2.0 checkpoints (model_type llada2_moe): reading,
 * validation of the relations the forward pass relies on, and writing. */
#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "llada2.h"
#include "model-common/config.h"
#include "model-common/spec.h"
#include "tide/log.h"
#include "tide/status.h"

/* Routed experts over all layers that a config may declare: 4x more than
 * the largest MoE checkpoints published, and it keeps the tensor count an int. */
#define LLADA2_MAX_ROUTED (1 << 20)

/* Missing keys. A key that sets tensor shapes has no usable default: the
 * official configuration class's (hidden_size 1024, intermediate_size None,
 * num_key_value_heads 0, ...) fit no released checkpoint or crash its own
 * code, so naming the key beats a shape mismatch later. Any other key takes
 * the default of LLaDA2MoeConfig (configuration_llada2_moe.py), logged. */
#define NO_DEFAULT "it sets tensor shapes, so there is no default"

static bool rd_bool(struct mc_cfg_reader *r, const char *key, bool def)
{
    if (mc_rd_missing(r, key, true, def ? "true" : "false"))
        return def;
    json_t *v = json_object_get(r->root, key);
    if (!json_is_boolean(v)) {
        tide_error("%s: \"%s\" must be true or false", r->path, key);
        r->errors++;
        return def;
    }
    return json_is_true(v);
}

/* A string key that, when present, must equal one of the accepted values. */
static void rd_expect_str(struct mc_cfg_reader *r, const char *key, const char *want)
{
    json_t *v = json_object_get(r->root, key);
    if (!v || json_is_null(v))
        return;
    if (!json_is_string(v) || strcmp(json_string_value(v), want)) {
        tide_error("%s: \"%s\" = %s is not supported by model-llada2 (expects \"%s\")", r->path,
                   key, json_is_string(v) ? json_string_value(v) : "(not a string)", want);
        r->errors++;
    }
}

int llada2_cfg_load(const char *dir, struct llada2_cfg *c)
{
    char path[4096];
    json_t *root;
    int rc = mc_cfg_open(dir, path, sizeof path, &root);
    if (rc != TIDE_OK)
        return rc;
    struct mc_cfg_reader r = {.root = root, .path = path, .no_default = NO_DEFAULT};
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_string(mt)) {
        tide_error("%s: missing \"model_type\" (expected \"llada2_moe\")", path);
        json_decref(root);
        return TIDE_E_FORMAT;
    }
    if (strcmp(json_string_value(mt), "llada2_moe")) {
        tide_error("%s: model_type \"%s\" is not supported by model-llada2 (it reads "
                   "\"llada2_moe\"; another model type needs its own model plugin)",
                   path, json_string_value(mt));
        json_decref(root);
        return TIDE_E_UNSUPPORTED;
    }
    const int64_t big = 1 << 20;
    memset(c, 0, sizeof *c);
    /* Defaults: LLaDA2MoeConfig.__init__ (configuration_llada2_moe.py). */
    c->hidden = mc_rd_int(&r, "hidden_size", false, 0, 1, big);
    c->n_layers = mc_rd_int(&r, "num_hidden_layers", false, 0, 1, 4096);
    c->n_heads = mc_rd_int(&r, "num_attention_heads", false, 1, 1, 4096);
    c->n_kv_heads = mc_rd_int(&r, "num_key_value_heads", false, 1, 1, 4096);
    mc_cfg_rule(&r, c->hidden % c->n_heads == 0 || json_object_get(root, "head_dim"),
                "num_attention_heads (%d) must divide hidden_size (%d) when head_dim is absent",
                c->n_heads, c->hidden);
    c->head_dim = mc_rd_int(&r, "head_dim", true, c->hidden / c->n_heads, 2, 4096);
    double prf = mc_rd_num(&r, "partial_rotary_factor", true, 0.5);
    mc_cfg_rule(&r, prf >= 0 && prf <= 1, "partial_rotary_factor (%g) must be in [0, 1]", prf);
    /* The official code never reads rotary_dim: RoPE covers
     * int(head_dim * partial_rotary_factor) dims (transformers' default rope). */
    c->rot_dim = prf >= 0 && prf <= 1 ? (int)(c->head_dim * prf) : 0;
    json_t *rd = json_object_get(root, "rotary_dim");
    if (rd && json_is_integer(rd) && json_integer_value(rd) != c->rot_dim)
        tide_warn("%s: \"rotary_dim\" = %lld is ignored, as in the official code: RoPE covers "
                  "int(head_dim x partial_rotary_factor) = %d dims",
                  path, (long long)json_integer_value(rd), c->rot_dim);
    c->inter = mc_rd_int(&r, "intermediate_size", false, 0, 1, big);
    c->moe_inter = mc_rd_int(&r, "moe_intermediate_size", false, 0, 1, big);
    c->n_experts = mc_rd_int(&r, "num_experts", false, 1, 1, 65536);
    c->top_k = mc_rd_int(&r, "num_experts_per_tok", true, 2, 1, 65536);
    c->n_shared = mc_rd_int(&r, "num_shared_experts", true, 0, 0, 64);
    c->n_group = mc_rd_int(&r, "n_group", true, 8, 1, 65536);
    c->topk_group = mc_rd_int(&r, "topk_group", true, 4, 1, 65536);
    c->first_dense = mc_rd_int(&r, "first_k_dense_replace", true, 0, 0, 4096);
    c->vocab = mc_rd_int(&r, "vocab_size", false, 0, 1, 1 << 24);
    c->max_pos = mc_rd_int(&r, "max_position_embeddings", true, 16384, 1, 1 << 24);
    c->rope_theta = mc_rd_num(&r, "rope_theta", true, 10000.0);
    c->eps = mc_rd_num(&r, "rms_norm_eps", true, 1e-5);
    c->routed_scale = mc_rd_num(&r, "routed_scaling_factor", true, 2.5);
    /* The official gate normalises the top-k weights whenever top_k > 1 and
     * never reads norm_topk_prob. */
    c->norm_topk = c->top_k > 1;
    json_t *nt = json_object_get(root, "norm_topk_prob");
    if (nt && json_is_boolean(nt) && json_is_true(nt) != c->norm_topk)
        tide_warn("%s: \"norm_topk_prob\" = %s is ignored, as in the official code: the routing "
                  "weights are normalised exactly when num_experts_per_tok > 1",
                  path, json_is_true(nt) ? "true" : "false");
    c->qk_norm = rd_bool(&r, "use_qk_norm", true);
    c->tied = rd_bool(&r, "tie_word_embeddings", false);
    c->expert_bias = rd_bool(&r, "moe_router_enable_expert_bias", true);
    mc_rd_quant(&r, &c->quant);
    rd_expect_str(&r, "score_function", "sigmoid");
    rd_expect_str(&r, "hidden_act", "silu");
    mc_cfg_rule(&r, !rd_bool(&r, "use_qkv_bias", false), "use_qkv_bias = true is not supported");
    /* The class default of use_bias is true: a bias on attention.dense. */
    json_t *ub = json_object_get(root, "use_bias");
    mc_cfg_rule(&r, !(!ub || json_is_null(ub)),
                "\"use_bias\" is missing, and the official configuration class defaults it to true "
                "(a bias on attention.dense), which model-llada2 does not support; LLaDA2.0 "
                "checkpoints set \"use_bias\": false");
    mc_cfg_rule(&r, !ub || json_is_null(ub) || !rd_bool(&r, "use_bias", true),
                "use_bias = true (a bias on attention.dense) is not supported");
    json_t *rs = json_object_get(root, "rope_scaling");
    mc_cfg_rule(&r, !rs || json_is_null(rs), "rope_scaling is not supported (must be null)");

    if (!r.errors) {
        mc_cfg_rule(&r, c->n_heads % c->n_kv_heads == 0,
                    "num_key_value_heads (%d) must divide num_attention_heads (%d)", c->n_kv_heads,
                    c->n_heads);
        mc_cfg_rule(&r, c->rot_dim % 2 == 0 && c->rot_dim <= c->head_dim,
                    "RoPE dims int(head_dim x partial_rotary_factor) (%d) must be even and at most "
                    "head_dim (%d)",
                    c->rot_dim, c->head_dim);
        mc_cfg_rule(&r, c->n_experts % c->n_group == 0, "n_group (%d) must divide num_experts (%d)",
                    c->n_group, c->n_experts);
        mc_cfg_rule(&r, c->topk_group <= c->n_group, "topk_group (%d) must be at most n_group (%d)",
                    c->topk_group, c->n_group);
        mc_cfg_rule(&r, c->n_group == 1 || c->n_experts / c->n_group >= 2,
                    "groups need at least 2 experts (num_experts %d, n_group %d)", c->n_experts,
                    c->n_group);
        const int64_t kept = (int64_t)c->topk_group * (c->n_experts / c->n_group);
        mc_cfg_rule(&r, c->top_k <= kept,
                    "num_experts_per_tok (%d) exceeds the experts in the kept groups (%lld)",
                    c->top_k, (long long)kept);
        mc_cfg_rule(&r, c->first_dense <= c->n_layers,
                    "first_k_dense_replace (%d) exceeds num_hidden_layers (%d)", c->first_dense,
                    c->n_layers);
        /* Bounds the tensor list (an int) and the work of walking it. */
        const int64_t routed = (int64_t)(c->n_layers - c->first_dense) * c->n_experts;
        mc_cfg_rule(&r, routed <= LLADA2_MAX_ROUTED,
                    "num_hidden_layers - first_k_dense_replace (%d) times num_experts (%d) is %lld "
                    "routed experts; TIDE supports at most %d",
                    c->n_layers - c->first_dense, c->n_experts, (long long)routed,
                    LLADA2_MAX_ROUTED);
        mc_quant_rule(&r, &c->quant, c->moe_inter, c->hidden);
        mc_cfg_rule(&r, c->eps > 0, "rms_norm_eps must be positive");
        mc_cfg_rule(&r, c->rope_theta > 0, "rope_theta must be positive");
    }
    json_decref(root);
    return r.errors ? TIDE_E_FORMAT : TIDE_OK;
}

int llada2_cfg_write(const char *path, const struct llada2_cfg *c)
{
    json_t *o = json_object();
    if (!o)
        return TIDE_E_NOMEM;
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("LLaDA2MoeModelLM"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string("llada2_moe"));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "partial_rotary_factor", json_real((double)c->rot_dim / c->head_dim));
    json_object_set_new(o, "intermediate_size", json_integer(c->inter));
    json_object_set_new(o, "moe_intermediate_size", json_integer(c->moe_inter));
    json_object_set_new(o, "num_experts", json_integer(c->n_experts));
    json_object_set_new(o, "num_experts_per_tok", json_integer(c->top_k));
    json_object_set_new(o, "num_shared_experts", json_integer(c->n_shared));
    json_object_set_new(o, "n_group", json_integer(c->n_group));
    json_object_set_new(o, "topk_group", json_integer(c->topk_group));
    json_object_set_new(o, "first_k_dense_replace", json_integer(c->first_dense));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_pos));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "rms_norm_eps", json_real(c->eps));
    json_object_set_new(o, "routed_scaling_factor", json_real(c->routed_scale));
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk));
    json_object_set_new(o, "score_function", json_string("sigmoid"));
    json_object_set_new(o, "moe_router_enable_expert_bias", json_boolean(c->expert_bias));
    json_object_set_new(o, "router_dtype", json_string("fp32"));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "use_qkv_bias", json_false());
    json_object_set_new(o, "use_bias", json_false());
    /* Written, though the reader defaults it as the official class does:
     * a missing key is logged on every load. */
    json_object_set_new(o, "use_qk_norm", json_boolean(c->qk_norm));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tied));
    json_object_set_new(o, "pad_token_id", json_null());
    json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (rc) {
        tide_error("%s: cannot write: %s", path, strerror(errno));
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

int llada2_n_moe_layers(const struct llada2_cfg *c)
{
    return c->n_layers - c->first_dense;
}

uint64_t llada2_expert_bytes(const struct llada2_cfg *c)
{
    return tide_qexpert_bytes(c->quant.fmt, c->quant.block, c->hidden, c->moe_inter);
}

/* Tensor specs: per-layer entries come in a fixed order, so index i maps to
 * (layer, slot) arithmetically and no table needs to be stored. */
enum {
    SLOT_IN_NORM,
    SLOT_QKV,
    SLOT_QNORM,
    SLOT_KNORM,
    SLOT_DENSE,
    SLOT_POST_NORM,
    SLOT_LAYER_FIXED, /* count of the slots above */
};

/* A MoE layer's block: router gate, its bias, the routed experts, the
 * shared experts (n_shared of them fused into one SwiGLU). */
static struct mc_moe_spec moe_spec(const struct llada2_cfg *c)
{
    return (struct mc_moe_spec){
        .n_experts = c->n_experts,
        .H = c->hidden,
        .I = c->moe_inter,
        .qfmt = c->quant.fmt,
        .block = c->quant.block,
        .bias_name = c->expert_bias ? "mlp.gate.expert_bias" : NULL,
        .shared_part = "mlp.shared_experts",
        .shared_I = (int64_t)c->moe_inter * c->n_shared,
    };
}

static int layer_tensor_count(const struct llada2_cfg *c, int layer)
{
    int n = SLOT_LAYER_FIXED - (c->qk_norm ? 0 : 2);
    if (layer < c->first_dense)
        return n + 3;
    const struct mc_moe_spec m = moe_spec(c);
    return n + mc_moe_tensors(&m);
}

int llada2_tensor_count(const struct llada2_cfg *c)
{
    int n = 2 + (c->tied ? 0 : 1); /* embeddings, final norm, head */
    n += c->first_dense * layer_tensor_count(c, 0);
    if (c->n_layers > c->first_dense)
        n += (c->n_layers - c->first_dense) * layer_tensor_count(c, c->first_dense);
    return n;
}

static int layer_spec(const struct llada2_cfg *c, int l, int j, char *name, size_t len,
                      enum tide_dtype *dt, int64_t shape[TIDE_MAX_DIMS])
{
    const int64_t H = c->hidden, hd = c->head_dim;
    char p[64];
    snprintf(p, sizeof p, "model.layers.%d", l);
    *dt = TIDE_DTYPE_BF16;
    static const int fixed_qk[] = {SLOT_IN_NORM, SLOT_QKV,   SLOT_QNORM,
                                   SLOT_KNORM,   SLOT_DENSE, SLOT_POST_NORM};
    static const int fixed_noqk[] = {SLOT_IN_NORM, SLOT_QKV, SLOT_DENSE, SLOT_POST_NORM};
    int nfixed = c->qk_norm ? 6 : 4;
    if (j < nfixed) {
        switch (c->qk_norm ? fixed_qk[j] : fixed_noqk[j]) {
        case SLOT_IN_NORM:
            snprintf(name, len, "%s.input_layernorm.weight", p);
            return mc_spec1(shape, H);
        case SLOT_QKV:
            snprintf(name, len, "%s.attention.query_key_value.weight", p);
            return mc_spec2(shape, (c->n_heads + 2 * c->n_kv_heads) * hd, H);
        case SLOT_QNORM:
            snprintf(name, len, "%s.attention.query_layernorm.weight", p);
            return mc_spec1(shape, hd);
        case SLOT_KNORM:
            snprintf(name, len, "%s.attention.key_layernorm.weight", p);
            return mc_spec1(shape, hd);
        case SLOT_DENSE:
            snprintf(name, len, "%s.attention.dense.weight", p);
            return mc_spec2(shape, H, c->n_heads * hd);
        default:
            snprintf(name, len, "%s.post_attention_layernorm.weight", p);
            return mc_spec1(shape, H);
        }
    }
    j -= nfixed;
    if (l < c->first_dense) {
        return mc_spec_swiglu(p, "mlp", j, c->inter, H, name, len, shape);
    }
    const struct mc_moe_spec m = moe_spec(c);
    return mc_spec_moe(p, j, &m, name, len, dt, shape);
}

int llada2_tensor_spec(const struct llada2_cfg *c, int i, char name[LLADA2_NAME_MAX],
                       enum tide_dtype *dt, int64_t shape[TIDE_MAX_DIMS])
{
    *dt = TIDE_DTYPE_BF16;
    if (i == 0) {
        snprintf(name, LLADA2_NAME_MAX, "model.word_embeddings.weight");
        return mc_spec2(shape, c->vocab, c->hidden);
    }
    i--;
    /* Dense layers all have one count and MoE layers another: O(1), not O(layers). */
    const int nd = layer_tensor_count(c, 0), nm = layer_tensor_count(c, c->first_dense);
    if (i < c->first_dense * nd)
        return layer_spec(c, i / nd, i % nd, name, LLADA2_NAME_MAX, dt, shape);
    i -= c->first_dense * nd;
    const int n_moe = c->n_layers - c->first_dense;
    if (i < n_moe * nm)
        return layer_spec(c, c->first_dense + i / nm, i % nm, name, LLADA2_NAME_MAX, dt, shape);
    i -= n_moe * nm;
    if (i == 0) {
        snprintf(name, LLADA2_NAME_MAX, "model.norm.weight");
        return mc_spec1(shape, c->hidden);
    }
    snprintf(name, LLADA2_NAME_MAX, "lm_head.weight");
    return mc_spec2(shape, c->vocab, c->hidden);
}

/* Bytes of tensor i (llada2_tensor_spec order). */
static uint64_t tensor_bytes(const struct llada2_cfg *c, int i)
{
    char name[LLADA2_NAME_MAX];
    enum tide_dtype dt;
    int64_t shape[TIDE_MAX_DIMS];
    const int nd = llada2_tensor_spec(c, i, name, &dt, shape);
    return mc_spec_bytes(dt, shape, nd);
}

uint64_t llada2_dense_bytes(const struct llada2_cfg *c)
{
    /* Every tensor but the routed experts, which are skipped rather than
     * walked: a MoE layer's experts follow its gate (and bias). */
    const int n = llada2_tensor_count(c), nd = layer_tensor_count(c, 0);
    const int nm = layer_tensor_count(c, c->first_dense);
    const struct mc_moe_spec m = moe_spec(c);
    const int first_expert = (c->qk_norm ? 6 : 4) + mc_moe_first_expert(&m);
    uint64_t total = 0;
    int i = 0;
    for (; i < 1 + c->first_dense * nd; i++)
        total += tensor_bytes(c, i);
    for (int l = c->first_dense; l < c->n_layers; l++, i += nm)
        for (int j = 0; j < nm; j++)
            if (j < first_expert ||
                j >= first_expert + mc_expert_tensors(c->quant.fmt) * c->n_experts)
                total += tensor_bytes(c, i + j);
    for (; i < n; i++)
        total += tensor_bytes(c, i);
    return total;
}
