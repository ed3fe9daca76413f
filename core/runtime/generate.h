/* Diffusion generation. Two decoders, each following an official loop rule
 * by rule (docs/decoding.md): "llada2", LLaDA2.0's block diffusion
 * (modeling_llada2_moe.py generate(), generate.c, with an exact KV cache),
 * and "llada", LLaDA's low-confidence remasking over the whole canvas
 * (ML-GSAI/LLaDA generate.py, used by LLaDA-MoE; generate_llada.c).
 * Core-internal. */
#ifndef TIDE_GENERATE_H
#define TIDE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "tide/model.h"

struct tide_gen_params {
    int64_t gen_length;  /* G: most tokens returned after the prompt */
    int block;           /* L: block length */
    int steps;           /* denoising steps per block, before the cap (tide_gen_steps) */
    int minimal_topk;    /* steps are capped at gen_length / minimal_topk (>= 1) */
    double threshold;    /* commit every masked position whose confidence is > this */
    double temperature;  /* 0 = argmax; logits are divided by it when > 0 and != 1 */
    int top_k;           /* 0 = off; ties with the k-th logit are kept */
    double top_p;        /* 1 = off; the smallest prefix whose mass exceeds top_p is kept */
    uint64_t seed;       /* sampling RNG (temperature > 0) */
    bool eos_early_stop; /* stop inside a block once a committed EOS has no mask before it */
    bool mask_in_argmax; /* the mask token competes in argmax/softmax (official); false
                          * leaves it out */
    bool recompute;      /* recompute the whole prefix each step (no KV cache) */
    bool all_logits;     /* the output layer for every row of the block, not only the masked
                          * rows the decoder reads (same decisions; for checks) */
    /* --- appended for the llada decoder --- */
    int decoder;       /* enum tide_gen_decoder; AUTO until tide_gen_resolve */
    double cfg_scale;  /* llada: classifier-free guidance; 0 = off */
    int remasking;     /* llada: enum tide_gen_remasking */
    bool prefix_cache; /* llada: APPROXIMATE Fast-dLLM-style prefix cache (off = exact) */
    int attention;     /* the model's TIDE_ATTN_*, set by tide_gen_resolve */
};

/* [generation] decoder. AUTO is the model's info->decoder. */
enum tide_gen_decoder { TIDE_GEN_DEC_AUTO = 0, TIDE_GEN_DEC_LLADA2 = 1, TIDE_GEN_DEC_LLADA = 2 };

/* [generation] remasking (llada): the confidence that orders the commits. */
enum tide_gen_remasking { TIDE_GEN_REMASK_LOW_CONFIDENCE = 0, TIDE_GEN_REMASK_RANDOM = 1 };

/* Most extra stop tokens ([generation] stop_tokens). */
#define TIDE_GEN_MAX_STOP 16

/* Special ids, looked up by name in the tokenizer. */
struct tide_gen_tokens {
    int32_t mask, eos;
    int n_stop;                      /* extra tokens that end generation as EOS does */
    int32_t stop[TIDE_GEN_MAX_STOP]; /* [n_stop] */
};

/* Optional callbacks; any may be NULL. */
struct tide_gen_hooks {
    void *user;
    /* A block is about to be decoded; first is true for the first decoded block. */
    void (*block_begin)(void *user, int block, bool first);
    /* A denoising step is about to run its forward; a status other than
     * TIDE_OK stops the generation with it. */
    int (*step_begin)(void *user, int block, int step);
    /* Every row of the active block's logits, [block length, vocab] (block =
     * absolute block index on the canvas). Setting this hook makes each step
     * compute the output layer for the whole block, not only its masked rows. */
    void (*step_logits)(void *user, int64_t block, int step, const float *logits, int rows,
                        int vocab);
    /* The logits a step decided on: for i < n, rows[i] holds the vocab
     * logits of the masked position pos[i] (block-relative, increasing). The
     * same values whether or not the whole block was computed. */
    void (*step_rows)(void *user, int64_t block, int step, int n, const int32_t *pos,
                      const float *const *rows, int vocab);
    /* After each step: how many positions were committed (a position given the
     * mask token stays masked but counts), how many masks remain. */
    void (*step_end)(void *user, int block, int step, int committed, int remaining);
    /* A block is final: gen[0..n) is the output so far (at most gen_length
     * tokens, cut after the first EOS/stop token). */
    void (*block_end)(void *user, int block, const int32_t *gen, int64_t n);
};

struct tide_gen_result {
    int32_t *ids; /* at most gen_length tokens, cut after the first EOS/stop; caller frees */
    int64_t n;
    int64_t forwards; /* model forward calls: steps, plus prefill and K/V passes when cached */
    int64_t steps;    /* denoising steps = forwards of the official generate() */
    int blocks;       /* blocks decoded */
    bool stopped;     /* the output ends at an EOS/stop token */
    double seconds;   /* wall time of the whole generation */
    double prefill_seconds;
};

/* Resolve p->decoder (AUTO: the model's info->decoder) and p->attention
 * from the model, and refuse what cannot be exact: the llada2 decoder's KV
 * cache on a full-attention model. Idempotent. TIDE_E_CONFIG (logged). */
int tide_gen_resolve(struct tide_gen_params *p, const struct tide_model_info *info);

/* The decoder p->decoder names, or (AUTO) the model asks for; AUTO when the
 * model names one this core lacks. Logs nothing. */
int tide_gen_decoder_of(const struct tide_gen_params *p, const struct tide_model_info *info);

/* The decoder's name ("llada2", "llada"); AUTO counts as llada2. */
const char *tide_gen_decoder_name(const struct tide_gen_params *p);

/* Positions a generation needs. llada2: the prompt plus gen_length, rounded
 * up to whole blocks; llada: the prompt plus gen_length. */
int64_t tide_gen_ctx(int64_t prompt_len, const struct tide_gen_params *p);

/* Positions one forward may span: the block (llada2 with the KV cache), or
 * the whole canvas (recompute, the llada decoder). */
int64_t tide_gen_max_tokens(int64_t prompt_len, const struct tide_gen_params *p);

/* Denoising steps per block. llada2: min(steps, gen_length / minimal_topk);
 * llada: steps / (gen_length / block_length). */
int tide_gen_steps(const struct tide_gen_params *p);

/* Blocks a generation decodes at most. */
int tide_gen_blocks(int64_t prompt_len, const struct tide_gen_params *p);

/* Check parameters against the model before opening it; logs and returns
 * TIDE_E_CONFIG / TIDE_E_RANGE (empty or too long prompt). */
int tide_gen_check(const struct tide_gen_params *p, int64_t prompt_len, int64_t max_ctx);

/* Generate. The model must have been opened with n_ctx >= tide_gen_ctx(...)
 * and max_tokens >= block (or n_ctx with recompute). */
int tide_generate(const struct tide_model_ops *ops, struct tide_model *m,
                  const struct tide_gen_params *p, const struct tide_gen_tokens *tok,
                  const int32_t *prompt, int64_t prompt_len, const struct tide_gen_hooks *hooks,
                  struct tide_gen_result *out);

/* The llada decoder (generate_llada.c); tide_generate calls it for
 * p->decoder == TIDE_GEN_DEC_LLADA after the common checks. */
int tide_generate_llada(const struct tide_model_ops *ops, struct tide_model *m,
                        const struct tide_gen_params *p, const struct tide_gen_tokens *tok,
                        const int32_t *prompt, int64_t prompt_len,
                        const struct tide_gen_hooks *hooks, struct tide_gen_result *out);

/* Ctrl-C support: a signal handler calls tide_request_stop(); long loops
 * check tide_stop_requested() and return TIDE_E_INTERRUPTED. */
void tide_request_stop(void);
bool tide_stop_requested(void);

#endif
