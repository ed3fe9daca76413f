/* Decoder plugin interface (struct tide_decoder_ops, version 1).
 *
 * A decoder is a model family's decoding loop, as its official code writes
 * it: the canvas, the steps (a fixed schedule or open-ended), the commit,
 * edit and stop rules, sampling and the output cut. It never touches weights
 * or backends: it asks the engine for forwards through struct
 * tide_decoder_host and reports where blocks and steps begin and end, which
 * the engine turns into the placement policy's events, traces, metrics and
 * the embedding API's callbacks. So one decoder runs under every policy and
 * backend, and a new family is a model plugin plus, where its loop differs,
 * a decoder plugin (docs/writing-a-decoder.md).
 *
 * Life of a generation:
 *   create(args)        one instance per generation's settings: reads
 *                       [generation] and the decoder's own section, checks
 *                       them against the model (info) and logs every problem,
 *                       naming the key;
 *   plan(prompt_len)    the positions the model must hold, the widest forward,
 *                       the most blocks, steps per block and tokens returned;
 *                       the engine reserves the model from it;
 *   run(host, prompt)   decodes, calling host->forward and the events;
 *   destroy().
 * run may be called again on the same instance (the same settings, another
 * prompt). An instance is used by one thread at a time.
 *
 * Growth: slots and struct fields are only appended; TIDE_DECODER_OPS_MIN_SIZE
 * is required. Every struct starts with its size. */
#ifndef TIDE_DECODER_H
#define TIDE_DECODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/model.h"
#include "tide/option.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tide_decoder; /* instance, created by create, destroyed by destroy */

/* What a decoder is created from. Valid during create only; the decoder
 * copies what it keeps. */
struct tide_decoder_args {
    uint32_t size;                      /* sizeof(struct tide_decoder_args) */
    const struct tide_opts *gen;        /* [generation]: gen_length, block_length, steps, ... */
    const struct tide_opts *opts;       /* the decoder's own section ([decoder-NAME]) */
    const struct tide_model_info *info; /* vocab_size, max_ctx, attention, ... */
    int32_t mask;                       /* the model's mask token id */
    int32_t eos;                        /* its end-of-sequence token id */
    int n_stop;                         /* [generation] stop_tokens: ids that end generation */
    const int32_t *stop;                /* [n_stop] as EOS does (departure; none by default) */
};

/* What one generation needs, for a prompt length (plan). */
struct tide_decoder_plan {
    uint32_t size;      /* sizeof(struct tide_decoder_plan); set by the caller */
    int64_t n_ctx;      /* canvas positions the model must hold (KV cache) */
    int64_t max_tokens; /* most positions one forward spans */
    int64_t max_output; /* most tokens run() returns */
    int blocks;         /* most blocks run() decodes */
    int block_length;   /* tokens per block, as the placement policy sees a block */
    int max_steps;      /* most denoising steps a block runs; 0: no bound is known */
    int nominal_steps;  /* steps per block the settings name (e.g. [generation] steps),
                           for summaries; 0 when the loop is open-ended */
};

/* One denoising step, as reported after it (step_end). */
struct tide_decoder_step {
    uint32_t size; /* sizeof(struct tide_decoder_step) of the decoder */
    int block;     /* generated block, from 0 */
    int step;      /* step within the block, from 0 */
    int committed; /* masked positions given a token (the mask token itself counts) */
    int remaining; /* masked positions left in the block */
    int edited;    /* positions holding a token that were given another one */
};

/* The engine's services during run(). Every callback gets `user`. */
struct tide_decoder_host {
    uint32_t size; /* sizeof(struct tide_decoder_host) of the engine */
    void *user;
    /* True when every step must compute the logits of its whole block and
     * report them through step_logits (`tide run --dump-logits`,
     * [generation] all_logits); otherwise a decoder asks only for the rows
     * it reads. */
    bool block_logits;
    /* One forward over positions pos0 .. pos0+n-1 holding ids[n], attending
     * to the model's cached K/V of the positions before pos0 and writing the
     * K/V of this span. rows NULL: logits gets f32 [n, vocab], every row;
     * else logits gets [n_rows, vocab], row i for position pos0 + rows[i]
     * (0 <= rows[i] < n, distinct, increasing). n_rows = 0 and logits NULL:
     * no logits (a prefill or K/V pass). Each row is the same whatever rows
     * were asked for. The engine checks the rows for NaN and Inf. Returns
     * TIDE_OK or a status: stop and return it. */
    int (*forward)(void *user, const int32_t *ids, int64_t n, int64_t pos0, const int32_t *rows,
                   int64_t n_rows, float *logits);
    /* Block `block` (generated blocks, from 0) starts; first: the first
     * generated block of this prompt. Forwards between block_begin and the
     * first step_begin, and after a step_end, count as the block's K/V pass;
     * forwards before the first block_begin as the prompt's prefill. */
    void (*block_begin)(void *user, int block, bool first);
    /* Step `step` of the block is about to run its forward(s). A status
     * other than TIDE_OK (cancelled, interrupted, a policy failure) must
     * stop the generation: return it from run(). */
    int (*step_begin)(void *user, int block, int step);
    /* The logits of every row of the block this step (only when
     * block_logits): [rows, vocab], block = absolute block on the canvas. */
    void (*step_logits)(void *user, int64_t block, int step, const float *logits, int rows,
                        int vocab);
    /* The logits the step decided on: rows[i] is position pos[i] of the
     * block (block-relative, increasing), [vocab] f32 each. */
    void (*step_rows)(void *user, int64_t block, int step, int n, const int32_t *pos,
                      const float *const *rows, int vocab);
    /* After each step. */
    void (*step_end)(void *user, const struct tide_decoder_step *s);
    /* A block is final: gen[0..n) is the output so far (what run() would
     * return if generation ended here). */
    void (*block_end)(void *user, int block, const int32_t *gen, int64_t n);
};

/* What run() produced. The engine provides ids with room for the plan's
 * max_output tokens. */
struct tide_decoder_result {
    uint32_t size; /* sizeof(struct tide_decoder_result) of the engine */
    int32_t *ids;  /* [max_output], filled with the output */
    int64_t n;     /* tokens written to ids */
    int64_t steps; /* denoising steps (the official loop's forwards) */
    int blocks;    /* blocks decoded */
    bool stopped;  /* the output ends at an EOS or stop token */
    int64_t edits; /* tokens replaced by other tokens (editing decoders), 0 otherwise */
};

struct tide_decoder_ops {
    uint32_t size;
    /* Create an instance for these settings. Checks them and logs each
     * problem naming the key ("[generation] threshold", "[decoder-x] key").
     * Returns TIDE_OK, TIDE_E_CONFIG or TIDE_E_NOMEM. */
    int (*create)(const struct tide_decoder_args *args, struct tide_decoder **out);
    void (*destroy)(struct tide_decoder *d); /* NULL is a no-op */
    /* The needs of a generation of prompt_len tokens (out->size is set by
     * the caller; write no field beyond it). prompt_len 0 asks only for what
     * the settings alone decide (block_length, max_steps, nominal_steps) and
     * must not fail or log. Returns TIDE_OK, or TIDE_E_RANGE for a prompt the
     * model's context cannot hold (logged with the numbers). */
    int (*plan)(const struct tide_decoder *d, int64_t prompt_len, struct tide_decoder_plan *out);
    /* Decode prompt[prompt_len]. out->ids has room for plan.max_output.
     * Returns TIDE_OK or the first failing status (from host calls, or
     * TIDE_E_NOMEM). */
    int (*run)(struct tide_decoder *d, const struct tide_decoder_host *host, const int32_t *prompt,
               int64_t prompt_len, struct tide_decoder_result *out);
    /* ---- Optional: beyond TIDE_DECODER_OPS_MIN_SIZE. ---- */
    /* The settings in force, as "key=value key=value" (traces and logs
     * record them). Writes at most len bytes, NUL-terminated. */
    void (*describe)(const struct tide_decoder *d, char *buf, size_t len);
};

#define TIDE_DECODER_OPS_MIN_SIZE (offsetof(struct tide_decoder_ops, run) + sizeof(void (*)(void)))

/* True when a struct of a given declared size (from the other side of the
 * ABI) holds field. */
#define TIDE_DECODER_HAS(s, type, field)                                                           \
    ((size_t)(s)->size >= offsetof(type, field) + sizeof((s)->field))

#ifdef __cplusplus
}
#endif
#endif
