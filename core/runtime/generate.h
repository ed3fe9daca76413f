/* Block-diffusion generation with threshold decoding and an exact KV cache.
 * Core-internal. */
#ifndef TIDE_GENERATE_H
#define TIDE_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "tide/model.h"

struct tide_gen_params {
    int64_t gen_length; /* tokens to generate, rounded up to whole blocks */
    int block;          /* block length */
    int steps;          /* most denoising steps per block */
    double threshold;   /* commit probability threshold, (0,1] */
    double temperature; /* 0 = argmax */
    int top_k;          /* 0 = off */
    double top_p;       /* 1 = off */
    uint64_t seed;
    bool recompute; /* recompute the whole prefix each step (no KV cache) */
};

/* Special ids, looked up by name in the tokenizer. stop may be -1. */
struct tide_gen_tokens {
    int32_t mask, eos, stop;
};

/* Optional callbacks; any may be NULL. */
struct tide_gen_hooks {
    void *user;
    /* A block is about to be decoded; first is true for the first decoded block. */
    void (*block_begin)(void *user, int block, bool first);
    /* A denoising step is about to run its forward; a status other than
     * TIDE_OK stops the generation with it. */
    int (*step_begin)(void *user, int block, int step);
    /* The logits a step decided on: rows [block, vocab] of the active block
     * (block = absolute block index on the canvas). */
    void (*step_logits)(void *user, int64_t block, int step, const float *logits, int rows,
                        int vocab);
    /* After each step: how many were committed, how many masks remain. */
    void (*step_end)(void *user, int block, int step, int committed, int remaining);
    /* A block is final: gen[0..n) are all generated tokens so far. */
    void (*block_end)(void *user, int block, const int32_t *gen, int64_t n);
};

struct tide_gen_result {
    int32_t *ids; /* generated tokens, cut after the first EOS/stop; caller frees */
    int64_t n;
    int64_t forwards; /* model forward calls, including prefill and K/V passes */
    int64_t steps;    /* denoising steps */
    int blocks;       /* blocks decoded */
    bool stopped;     /* stopped at EOS/stop rather than at gen_length */
    double seconds;   /* wall time of the whole generation */
    double prefill_seconds;
};

/* Positions a generation needs: the prompt plus gen_length, rounded up to
 * whole blocks. */
int64_t tide_gen_ctx(int64_t prompt_len, const struct tide_gen_params *p);

/* Check parameters against the model before opening it; logs and returns
 * TIDE_E_CONFIG / TIDE_E_RANGE (empty or too long prompt). */
int tide_gen_check(const struct tide_gen_params *p, int64_t prompt_len, int64_t max_ctx);

/* Generate. The model must have been opened with n_ctx >= tide_gen_ctx(...)
 * and max_tokens >= block (or n_ctx with recompute). */
int tide_generate(const struct tide_model_ops *ops, struct tide_model *m,
                  const struct tide_gen_params *p, const struct tide_gen_tokens *tok,
                  const int32_t *prompt, int64_t prompt_len, const struct tide_gen_hooks *hooks,
                  struct tide_gen_result *out);

/* Ctrl-C support: a signal handler calls tide_request_stop(); long loops
 * check tide_stop_requested() and return TIDE_E_INTERRUPTED. */
void tide_request_stop(void);
bool tide_stop_requested(void);

#endif
