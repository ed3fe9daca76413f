/* model-llada2 internals: config.json, tensor names, forward pass, presets. */
#ifndef LLADA2_H
#define LLADA2_H

#include <stdbool.h>
#include <stdint.h>

#include "model-common/config.h"
#include "tide/model.h"
#include "tide/safetensors.h"

#define LLADA2_NAME_MAX 128

/* config.json of a llada2_moe checkpoint, validated. */
struct llada2_cfg {
    int hidden;      /* hidden_size */
    int n_layers;    /* num_hidden_layers */
    int n_heads;     /* num_attention_heads */
    int n_kv_heads;  /* num_key_value_heads */
    int head_dim;    /* head_dim, default hidden / heads */
    int rot_dim;     /* int(head_dim * partial_rotary_factor); rotary_dim is not read */
    int inter;       /* intermediate_size (dense layers) */
    int moe_inter;   /* moe_intermediate_size */
    int n_experts;   /* num_experts */
    int top_k;       /* num_experts_per_tok */
    int n_shared;    /* num_shared_experts */
    int n_group;     /* n_group */
    int topk_group;  /* topk_group */
    int first_dense; /* first_k_dense_replace */
    int vocab;       /* vocab_size */
    int64_t max_pos; /* max_position_embeddings */
    double rope_theta;
    double eps;            /* rms_norm_eps */
    double routed_scale;   /* routed_scaling_factor */
    bool norm_topk;        /* top_k > 1 (norm_topk_prob is not read, as upstream) */
    bool qk_norm;          /* use_qk_norm */
    bool tied;             /* tie_word_embeddings */
    bool expert_bias;      /* moe_router_enable_expert_bias */
    struct mc_quant quant; /* routed experts' format (quantization_config) */
};

/* Read and validate DIR/config.json. Errors name the file and the key. */
int llada2_cfg_load(const char *dir, struct llada2_cfg *cfg);
/* Write cfg as a config.json in the real checkpoint's format. */
int llada2_cfg_write(const char *path, const struct llada2_cfg *cfg);

/* Expected tensors. llada2_tensor_count gives how many; llada2_tensor_spec
 * fills the name, dtype and shape of the i-th (stable order: embeddings,
 * layers in order, final norm, head). Returns the number of dims. */
int llada2_tensor_count(const struct llada2_cfg *cfg);
int llada2_tensor_spec(const struct llada2_cfg *cfg, int i, char name[LLADA2_NAME_MAX],
                       enum tide_dtype *dtype, int64_t shape[TIDE_MAX_DIMS]);

/* Bytes of one routed expert, and of everything that is not a routed expert. */
uint64_t llada2_expert_bytes(const struct llada2_cfg *cfg);
uint64_t llada2_dense_bytes(const struct llada2_cfg *cfg);
int llada2_n_moe_layers(const struct llada2_cfg *cfg);

int llada2_open(const struct tide_model_args *args, struct tide_model **out);
void llada2_close(struct tide_model *m);
int llada2_reserve_slots(struct tide_model *m, int n_slots, int64_t n_ctx, int64_t max_tokens);
int llada2_forward_batch(struct tide_model *m, const struct tide_seq_span *spans, int n_spans);
const struct tide_model_info *llada2_info(const struct tide_model *m);
int llada2_prompt_vector(struct tide_model *m, const int32_t *ids, int64_t n, float *out);
int llada2_profile(struct tide_model *m, bool on);
int llada2_profile_read(const struct tide_model *m, struct tide_phase_stats *out, int max, int *n);
int llada2_inspect(const char *dir, const struct tide_inspect_args *args);
struct tide_progress;
int llada2_mkmodel(const char *dir, const char *preset, int layers, uint64_t seed,
                   const struct tide_progress *pg);

extern const char llada2_chat_template[];

/* The decoder a checkpoint's release uses ("llada2" or "llada21"), from
 * [model-llada2] decoder or the remote code beside it (llada2_family.c); the
 * reason goes into why[len]. */
const char *llada2_checkpoint_decoder(const char *dir, const struct tide_opts *opts, char *why,
                                      size_t len);

#endif
