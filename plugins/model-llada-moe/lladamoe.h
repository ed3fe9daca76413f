/* model-llada-moe internals: config.json, tensor names, forward pass, presets. */
#ifndef LLADAMOE_H
#define LLADAMOE_H

#include <stdbool.h>
#include <stdint.h>

#include "model-common/config.h"
#include "tide/model.h"
#include "tide/safetensors.h"

#define LMOE_NAME_MAX   128
#define LMOE_MAX_LAYERS 1024

/* config.json of a LLaDA-MoE checkpoint (LLaDAMoEModelLM), validated. */
struct lmoe_cfg {
    int hidden;       /* hidden_size */
    int n_layers;     /* num_hidden_layers */
    int n_heads;      /* num_attention_heads */
    int n_kv_heads;   /* num_key_value_heads, default num_attention_heads */
    int head_dim;     /* hidden_size / num_attention_heads (the code reads no head_dim) */
    int rot_dim;      /* int(head_dim * partial_rotary_factor) */
    int dense_inter;  /* dense_intermediate_size (dense layers; 0 when there are none) */
    int moe_inter;    /* expert_intermediate_size */
    int shared_inter; /* shared_expert_intermediate_size; 0 = null: no shared expert */
    int n_experts;    /* num_experts */
    int top_k;        /* num_experts_per_tok */
    int vocab;        /* vocab_size */
    int64_t max_pos;  /* max_position_embeddings */
    double rope_theta;
    double eps;                         /* rms_norm_eps */
    bool qk_norm;                       /* qk_layernorm */
    bool tied;                          /* tie_word_embeddings */
    bool expert_bias;                   /* moe_router_enable_expert_bias */
    struct mc_quant quant;              /* routed experts' format (quantization_config) */
    int n_moe;                          /* layers with moe_layer_freq[i] != 0 */
    unsigned char moe[LMOE_MAX_LAYERS]; /* moe_layer_freq: 1 = MoE layer, 0 = dense */
    /* first[l]: index of layer l's first tensor in lmoe_tensor_spec order;
     * first[n_layers]: the final norm's. */
    int first[LMOE_MAX_LAYERS + 1];
};

/* Read and validate DIR/config.json. Errors name the file and the key. */
int lmoe_cfg_load(const char *dir, struct lmoe_cfg *cfg);
/* Fill the derived fields (n_moe, first[]) after the others are set. */
void lmoe_cfg_finish(struct lmoe_cfg *cfg);
/* Write cfg as a config.json in the published checkpoint's format. */
int lmoe_cfg_write(const char *path, const struct lmoe_cfg *cfg);

/* Expected tensors, in a stable order: embeddings, layers in order, final
 * norm, head. lmoe_tensor_spec fills the i-th's name, dtype and shape and
 * returns its number of dims. */
int lmoe_tensor_count(const struct lmoe_cfg *cfg);
int lmoe_tensor_spec(const struct lmoe_cfg *cfg, int i, char name[LMOE_NAME_MAX],
                     enum tide_dtype *dtype, int64_t shape[TIDE_MAX_DIMS]);
/* True when tensor i (spec order) is a routed expert's matrix. */
bool lmoe_tensor_is_routed(const struct lmoe_cfg *cfg, int i);

uint64_t lmoe_expert_bytes(const struct lmoe_cfg *cfg);
uint64_t lmoe_dense_bytes(const struct lmoe_cfg *cfg);

int lmoe_open(const struct tide_model_args *args, struct tide_model **out);
void lmoe_close(struct tide_model *m);
int lmoe_reserve_slots(struct tide_model *m, int n_slots, int64_t n_ctx, int64_t max_tokens);
int lmoe_forward_batch(struct tide_model *m, const struct tide_seq_span *spans, int n_spans);
const struct tide_model_info *lmoe_info(const struct tide_model *m);
int lmoe_prompt_vector(struct tide_model *m, const int32_t *ids, int64_t n, float *out);
int lmoe_profile(struct tide_model *m, bool on);
int lmoe_profile_read(const struct tide_model *m, struct tide_phase_stats *out, int max, int *n);
int lmoe_inspect(const char *dir, const struct tide_inspect_args *args);
struct tide_progress;
int lmoe_mkmodel(const char *dir, const char *preset, int layers, uint64_t seed,
                 const struct tide_progress *pg);

/* Softmax routing of one token as the official LLaDAMoESparseMoeBlock:
 * p = softmax(logits) (f32), sel = p + bias (bias may be NULL), the top_k
 * largest sel (ties: lower id) by descending sel, weights = those sel values
 * (norm_topk_prob is fixed to False in the code). scratch holds n_experts floats. */
void lmoe_route(const float *logits, const float *bias, int n_experts, int top_k, float *scratch,
                int32_t *ids, float *w);

extern const char lmoe_chat_template[];

#endif
