/* config.json of LLaDA-MoE checkpoints (LLaDAMoEModelLM): reading with the
 * official configuration class's defaults, validation of what the forward
 * pass relies on, and writing. The authority is inclusionAI's
 * configuration_lladamoe.py (class LLaDAConfig, model_type "llada") and
 * modeling_lladamoe.py; dllm's copy names the same class's type "lladamoe". */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lladamoe.h"
#include "model-common/config.h"
#include "model-common/spec.h"
#include "tide/log.h"
#include "tide/status.h"

/* Routed experts over all layers a config may declare (keeps the tensor
 * count an int; 1000x the published model). */
#define LMOE_MAX_ROUTED (1 << 20)

/* Missing keys. The official class's default for every shape key is -1 (or
 * None), which builds no working model, so those are required; any other key
 * takes the class default, logged. */
#define NO_DEFAULT                                                                                 \
    "the official configuration class's default, -1 or None, builds no working model, so there "   \
    "is no default"

/* A flag the official code tests for truth (None counts as false). */
static bool rd_flag(struct mc_cfg_reader *r, const char *key, bool def)
{
    json_t *v = json_object_get(r->root, key);
    if (!v)
        return def;
    if (json_is_null(v))
        return false;
    if (!json_is_boolean(v)) {
        tide_error("%s: \"%s\" must be true, false or null", r->path, key);
        r->errors++;
        return def;
    }
    return json_is_true(v);
}

/* model_type and architectures: "llada" is shared with the dense LLaDA-8B
 * (LLaDAModelLM), so when architectures is present it must name the MoE
 * class. */
static int check_type(json_t *root, const char *path)
{
    json_t *mt = json_object_get(root, "model_type");
    if (!json_is_string(mt)) {
        tide_error("%s: missing \"model_type\" (expected \"llada\", as LLaDA-MoE's "
                   "configuration class names it)",
                   path);
        return TIDE_E_FORMAT;
    }
    const char *t = json_string_value(mt);
    if (strcmp(t, "llada") && strcmp(t, "lladamoe")) {
        tide_error("%s: model_type \"%s\" is not supported by model-llada-moe (it reads "
                   "\"llada\" or \"lladamoe\" with architectures LLaDAMoEModelLM; another model "
                   "type needs its own model plugin)",
                   path, t);
        return TIDE_E_UNSUPPORTED;
    }
    json_t *arch = json_object_get(root, "architectures");
    if (!arch || json_is_null(arch))
        return TIDE_OK;
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a)
    {
        if (json_is_string(a) && (!strcmp(json_string_value(a), "LLaDAMoEModelLM") ||
                                  !strcmp(json_string_value(a), "LLaDAMoEModel")))
            return TIDE_OK;
    }
    tide_error("%s: \"architectures\" does not name LLaDAMoEModelLM: model_type \"%s\" without "
               "it is another model (the dense LLaDA is LLaDAModelLM), not supported by "
               "model-llada-moe",
               path, t);
    return TIDE_E_UNSUPPORTED;
}

/* moe_layer_freq: one entry per layer, 0 = dense feed-forward, else MoE. */
static void rd_layer_freq(struct mc_cfg_reader *r, struct lmoe_cfg *c)
{
    json_t *v = json_object_get(r->root, "moe_layer_freq");
    if (!v || json_is_null(v)) {
        tide_error("%s: missing key \"moe_layer_freq\" (one 0/1 entry per layer; the official "
                   "class's default [] fails on the first layer)",
                   r->path);
        r->errors++;
        return;
    }
    if (!json_is_array(v) || (int)json_array_size(v) != c->n_layers) {
        tide_error("%s: \"moe_layer_freq\" must be a list of num_hidden_layers (%d) integers",
                   r->path, c->n_layers);
        r->errors++;
        return;
    }
    for (int l = 0; l < c->n_layers; l++) {
        json_t *e = json_array_get(v, (size_t)l);
        if (!json_is_integer(e) || json_integer_value(e) < 0) {
            tide_error("%s: \"moe_layer_freq\"[%d] must be a non-negative integer", r->path, l);
            r->errors++;
            return;
        }
        c->moe[l] = json_integer_value(e) != 0;
    }
}

/* A MoE layer's block: router gate, its bias (a buffer of the MoE block),
 * the routed experts, the shared expert (on the decoder layer). */
static struct mc_moe_spec moe_spec(const struct lmoe_cfg *c)
{
    return (struct mc_moe_spec){
        .n_experts = c->n_experts,
        .H = c->hidden,
        .I = c->moe_inter,
        .qfmt = c->quant.fmt,
        .block = c->quant.block,
        .bias_name = c->expert_bias ? "mlp.expert_bias" : NULL,
        .shared_part = "shared_expert",
        .shared_I = c->shared_inter,
    };
}

void lmoe_cfg_finish(struct lmoe_cfg *c)
{
    const struct mc_moe_spec m = moe_spec(c);
    c->n_moe = 0;
    int at = 1; /* the embeddings come first */
    for (int l = 0; l < c->n_layers; l++) {
        c->first[l] = at;
        at += 6 + (c->qk_norm ? 2 : 0);
        if (c->moe[l]) {
            c->n_moe++;
            at += mc_moe_tensors(&m);
        } else {
            at += 3;
        }
    }
    c->first[c->n_layers] = at;
}

int lmoe_cfg_load(const char *dir, struct lmoe_cfg *c)
{
    char path[4096];
    json_t *root;
    int rc = mc_cfg_open(dir, path, sizeof path, &root);
    if (rc != TIDE_OK)
        return rc;
    rc = check_type(root, path);
    if (rc != TIDE_OK) {
        json_decref(root);
        return rc;
    }
    struct mc_cfg_reader r = {.root = root, .path = path, .no_default = NO_DEFAULT};
    const int64_t big = 1 << 20;
    memset(c, 0, sizeof *c);
    /* Defaults: LLaDAConfig.__init__ (configuration_lladamoe.py). */
    c->hidden = mc_rd_int(&r, "hidden_size", false, 0, 1, big);
    c->n_layers = mc_rd_int(&r, "num_hidden_layers", false, 0, 1, LMOE_MAX_LAYERS);
    c->n_heads = mc_rd_int(&r, "num_attention_heads", false, 1, 1, 4096);
    /* num_key_value_heads None -> num_attention_heads */
    c->n_kv_heads = mc_rd_int(&r, "num_key_value_heads", true, c->n_heads, 1, 4096);
    mc_cfg_rule(&r, c->hidden % c->n_heads == 0,
                "num_attention_heads (%d) must divide hidden_size (%d): the official attention "
                "takes head_dim = hidden_size / num_attention_heads and raises otherwise",
                c->n_heads, c->hidden);
    c->head_dim = c->hidden / c->n_heads;
    json_t *hd = json_object_get(root, "head_dim");
    if (hd && json_is_integer(hd) && json_integer_value(hd) != c->head_dim)
        tide_warn("%s: \"head_dim\" = %lld is ignored, as in the official code: head_dim is "
                  "hidden_size / num_attention_heads = %d",
                  path, (long long)json_integer_value(hd), c->head_dim);
    /* transformers' default RoPE: int(head_dim * partial_rotary_factor) dims;
     * the class default -1 gives none that work. */
    const int before = r.errors;
    double prf = mc_rd_num(&r, "partial_rotary_factor", false, -1.0);
    mc_cfg_rule(&r, r.errors > before || (prf > 0 && prf <= 1),
                "partial_rotary_factor (%g) must be in (0, 1]", prf);
    c->rot_dim = prf > 0 && prf <= 1 ? (int)(c->head_dim * prf) : 0;
    c->rope_theta = mc_rd_num(&r, "rope_theta", false, -1.0);
    c->moe_inter = mc_rd_int(&r, "expert_intermediate_size", false, 0, 1, big);
    c->n_experts = mc_rd_int(&r, "num_experts", false, 1, 1, 65536);
    c->top_k = mc_rd_int(&r, "num_experts_per_tok", false, 1, 1, 65536);
    c->vocab = mc_rd_int(&r, "vocab_size", false, 0, 1, 1 << 24);
    c->max_pos = mc_rd_int(&r, "max_position_embeddings", true, 4096, 1, 1 << 24);
    c->eps = mc_rd_num(&r, "rms_norm_eps", true, 1e-5);
    c->tied = rd_flag(&r, "tie_word_embeddings", false);
    c->qk_norm = rd_flag(&r, "qk_layernorm", false);
    c->expert_bias = rd_flag(&r, "moe_router_enable_expert_bias", false);
    mc_rd_quant(&r, &c->quant);
    /* shared_expert_intermediate_size: null = no shared expert (the decoder
     * layer tests "is not None"); the class default -1 builds a broken one. */
    json_t *sh = json_object_get(root, "shared_expert_intermediate_size");
    if (!sh) {
        tide_error("%s: missing key \"shared_expert_intermediate_size\" (null for no shared "
                   "expert; the official class's default -1 builds a shared expert of width -1)",
                   path);
        r.errors++;
    } else if (!json_is_null(sh)) {
        c->shared_inter = mc_rd_int(&r, "shared_expert_intermediate_size", false, 0, 1, big);
    }
    if (c->n_layers >= 1 && c->n_layers <= LMOE_MAX_LAYERS)
        rd_layer_freq(&r, c);
    bool any_dense = false;
    for (int l = 0; l < c->n_layers && !r.errors; l++)
        any_dense |= !c->moe[l];
    if (any_dense)
        c->dense_inter = mc_rd_int(&r, "dense_intermediate_size", false, 0, 1, big);

    /* Keys the code path never reads: noted when they promise something else. */
    json_t *nt = json_object_get(root, "norm_topk_prob");
    if (nt && json_is_true(nt))
        tide_warn("%s: \"norm_topk_prob\" = true is ignored, as in the official code: "
                  "LLaDAMoESparseMoeBlock fixes norm_topk_prob = False",
                  path);
    json_t *sf = json_object_get(root, "moe_router_score_function");
    if (sf && json_is_string(sf) && strcmp(json_string_value(sf), "softmax"))
        tide_warn("%s: \"moe_router_score_function\" = \"%s\" is ignored, as in the official "
                  "code: the router always takes a softmax",
                  path, json_string_value(sf));
    json_t *rs = json_object_get(root, "routed_scaling_factor");
    if (rs && json_is_number(rs) && json_number_value(rs) != 1.0)
        tide_warn("%s: \"routed_scaling_factor\" = %g is ignored, as in the official code", path,
                  json_number_value(rs));
    json_t *act = json_object_get(root, "hidden_act");
    mc_cfg_rule(&r,
                !act || json_is_null(act) ||
                    (json_is_string(act) && !strcmp(json_string_value(act), "silu")),
                "hidden_act must be \"silu\" (model-llada-moe implements SwiGLU)");
    mc_cfg_rule(&r, !rd_flag(&r, "attention_bias", false),
                "attention_bias = true is not supported");
    json_t *clip = json_object_get(root, "clip_qkv");
    mc_cfg_rule(&r, !clip || json_is_null(clip), "clip_qkv is not supported (must be null)");
    json_t *rsc = json_object_get(root, "rope_scaling");
    mc_cfg_rule(&r, !rsc || json_is_null(rsc), "rope_scaling is not supported (must be null)");

    if (!r.errors) {
        mc_cfg_rule(&r, c->n_heads % c->n_kv_heads == 0,
                    "num_key_value_heads (%d) must divide num_attention_heads (%d)", c->n_kv_heads,
                    c->n_heads);
        mc_cfg_rule(&r, c->rot_dim % 2 == 0 && c->rot_dim >= 2,
                    "RoPE dims int(head_dim x partial_rotary_factor) (%d) must be even and >= 2",
                    c->rot_dim);
        mc_cfg_rule(&r, c->top_k <= c->n_experts,
                    "num_experts_per_tok (%d) exceeds num_experts (%d)", c->top_k, c->n_experts);
        int n_moe = 0;
        for (int l = 0; l < c->n_layers; l++)
            n_moe += c->moe[l];
        const int64_t routed = (int64_t)n_moe * c->n_experts;
        mc_cfg_rule(&r, routed <= LMOE_MAX_ROUTED,
                    "%d MoE layers times num_experts (%d) is %lld routed experts; TIDE supports at "
                    "most %d",
                    n_moe, c->n_experts, (long long)routed, LMOE_MAX_ROUTED);
        mc_quant_rule(&r, &c->quant, c->moe_inter, c->hidden);
        mc_cfg_rule(&r, c->eps > 0, "rms_norm_eps must be positive");
        mc_cfg_rule(&r, c->rope_theta > 0, "rope_theta must be positive");
    }
    json_decref(root);
    if (r.errors)
        return TIDE_E_FORMAT;
    lmoe_cfg_finish(c);
    return TIDE_OK;
}

int lmoe_cfg_write(const char *path, const struct lmoe_cfg *c)
{
    json_t *o = json_object();
    if (!o)
        return TIDE_E_NOMEM;
    json_t *arch = json_array();
    json_array_append_new(arch, json_string("LLaDAMoEModelLM"));
    json_object_set_new(o, "architectures", arch);
    json_object_set_new(o, "model_type", json_string("llada"));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden));
    json_object_set_new(o, "dense_intermediate_size",
                        c->dense_inter ? json_integer(c->dense_inter) : json_null());
    json_object_set_new(o, "expert_intermediate_size", json_integer(c->moe_inter));
    json_object_set_new(o, "shared_expert_intermediate_size",
                        c->shared_inter ? json_integer(c->shared_inter) : json_null());
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_pos));
    json_object_set_new(o, "rms_norm_eps", json_real(c->eps));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tied));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "partial_rotary_factor", json_real((double)c->rot_dim / c->head_dim));
    json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "clip_qkv", json_null());
    json_object_set_new(o, "num_experts_per_tok", json_integer(c->top_k));
    json_object_set_new(o, "num_experts", json_integer(c->n_experts));
    json_object_set_new(o, "norm_topk_prob", json_false());
    json_object_set_new(o, "qk_layernorm", json_boolean(c->qk_norm));
    json_t *freq = json_array();
    for (int l = 0; l < c->n_layers; l++)
        json_array_append_new(freq, json_integer(c->moe[l]));
    json_object_set_new(o, "moe_layer_freq", freq);
    json_object_set_new(o, "moe_router_enable_expert_bias", json_boolean(c->expert_bias));
    json_object_set_new(o, "moe_router_score_function", json_string("softmax"));
    json_object_set_new(o, "routed_scaling_factor", json_integer(1));
    json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
    int rc = json_dump_file(o, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (rc) {
        tide_error("%s: cannot write: %s", path, strerror(errno));
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

uint64_t lmoe_expert_bytes(const struct lmoe_cfg *c)
{
    return tide_qexpert_bytes(c->quant.fmt, c->quant.block, c->hidden, c->moe_inter);
}

int lmoe_tensor_count(const struct lmoe_cfg *c)
{
    return c->first[c->n_layers] + 1 + (c->tied ? 0 : 1);
}

/* The layer holding tensor i (first[l] <= i < first[l+1]), by bisection. */
static int layer_of(const struct lmoe_cfg *c, int i)
{
    int lo = 0, hi = c->n_layers - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (c->first[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static int layer_spec(const struct lmoe_cfg *c, int l, int j, char *name, size_t len,
                      enum tide_dtype *dt, int64_t shape[TIDE_MAX_DIMS])
{
    const int64_t H = c->hidden, hd = c->head_dim;
    const int64_t qw = (int64_t)c->n_heads * hd, kw = (int64_t)c->n_kv_heads * hd;
    char p[48];
    snprintf(p, sizeof p, "model.layers.%d", l);
    *dt = TIDE_DTYPE_BF16;
    /* attention: norm, q, k, v, [q_norm, k_norm], o, post norm */
    static const char *att[] = {"input_layernorm",  "self_attn.q_proj",        "self_attn.k_proj",
                                "self_attn.v_proj", "self_attn.q_norm",        "self_attn.k_norm",
                                "self_attn.o_proj", "post_attention_layernorm"};
    const int natt = c->qk_norm ? 8 : 6;
    if (j < natt) {
        int slot = c->qk_norm || j < 4 ? j : j + 2;
        snprintf(name, len, "%s.%s.weight", p, att[slot]);
        switch (slot) {
        case 0:
        case 7:
            return mc_spec1(shape, H);
        case 1:
            return mc_spec2(shape, qw, H);
        case 2:
        case 3:
            return mc_spec2(shape, kw, H);
        case 4:
        case 5:
            return mc_spec1(shape, hd); /* per head, over head_dim */
        default:
            return mc_spec2(shape, H, qw);
        }
    }
    j -= natt;
    if (!c->moe[l]) {
        return mc_spec_swiglu(p, "mlp", j, c->dense_inter, H, name, len, shape);
    }
    const struct mc_moe_spec m = moe_spec(c);
    return mc_spec_moe(p, j, &m, name, len, dt, shape);
}

int lmoe_tensor_spec(const struct lmoe_cfg *c, int i, char name[LMOE_NAME_MAX], enum tide_dtype *dt,
                     int64_t shape[TIDE_MAX_DIMS])
{
    *dt = TIDE_DTYPE_BF16;
    if (i == 0) {
        snprintf(name, LMOE_NAME_MAX, "model.embed_tokens.weight");
        return mc_spec2(shape, c->vocab, c->hidden);
    }
    if (i < c->first[c->n_layers]) {
        int l = layer_of(c, i);
        return layer_spec(c, l, i - c->first[l], name, LMOE_NAME_MAX, dt, shape);
    }
    if (i == c->first[c->n_layers]) {
        snprintf(name, LMOE_NAME_MAX, "model.norm.weight");
        return mc_spec1(shape, c->hidden);
    }
    snprintf(name, LMOE_NAME_MAX, "lm_head.weight");
    return mc_spec2(shape, c->vocab, c->hidden);
}

bool lmoe_tensor_is_routed(const struct lmoe_cfg *c, int i)
{
    if (i < 1 || i >= c->first[c->n_layers])
        return false;
    int l = layer_of(c, i);
    if (!c->moe[l])
        return false;
    const struct mc_moe_spec m = moe_spec(c);
    const int e0 = c->first[l] + (c->qk_norm ? 8 : 6) + mc_moe_first_expert(&m);
    return i >= e0 && i < e0 + mc_expert_tensors(c->quant.fmt) * c->n_experts;
}

uint64_t lmoe_dense_bytes(const struct lmoe_cfg *c)
{
    const int n = lmoe_tensor_count(c);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (lmoe_tensor_is_routed(c, i)) {
            /* the first of them: skip the layer's experts */
            i += mc_expert_tensors(c->quant.fmt) * c->n_experts - 1;
            continue;
        }
        char name[LMOE_NAME_MAX];
        enum tide_dtype dt;
        int64_t shape[TIDE_MAX_DIMS];
        const int nd = lmoe_tensor_spec(c, i, name, &dt, shape);
        total += mc_spec_bytes(dt, shape, nd);
    }
    return total;
}
