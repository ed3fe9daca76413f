/* Decoder plugin interface (struct tide_decoder_ops, plugin ABI version 2).
 *
 * A decoder is a model family's decoding loop, as its official code writes
 * it: the canvas, the steps (a fixed schedule or open-ended), the commit,
 * edit and stop rules, sampling and the output cut. It never touches weights
 * or backends, and it never runs a forward itself: it is a step machine. The
 * engine asks it for the spans of its next forward, runs that forward
 * (together with the other sequences of a batch), and feeds it the logits.
 * The decoder reports where blocks and steps begin and end through
 * struct tide_decoder_host; the engine turns those into the placement
 * policy's events, traces, metrics and the embedding API's callbacks. So one
 * decoder runs under every policy and backend, alone or in a batch, and a
 * new family is a model plugin plus, where its loop differs, a decoder
 * plugin (docs/writing-a-decoder.md).
 *
 * Life of an instance and of a generation:
 *   create(args)            one instance per generation's settings: reads
 *                           [generation] and the decoder's own section,
 *                           checks them against the model (info) and logs
 *                           every problem, naming the key;
 *   plan(prompt_len)        the positions the model must hold, the widest
 *                           forward, the most blocks, steps and forwards; the
 *                           engine reserves the model from it;
 *   begin(host, prompt)     a generation's state (the decoder copies the
 *                           prompt); several may be alive at once;
 *   next(seq, &fwd)         the next forward's spans, or TIDE_DECODER_DONE;
 *   feed(seq)               the logits of that forward are in the buffers
 *                           next() named: sample, commit, report the step;
 *   ... next, feed, next, feed ... until next() says done;
 *   finish(seq, &result)    the output; frees the state;
 *   destroy().
 * The engine calls next() and feed() alternately, starting with next(); a
 * forward with no logits (a prefill or K/V pass) is fed too. Events (the
 * host's callbacks) are made from inside next() and feed() only. A
 * generation is driven by one thread at a time; different generations of
 * one instance may be driven from different calls, never at the same time.
 *
 * Growth: struct fields are only appended; ops slots after describe are
 * optional. Every struct starts with its size. */
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

struct tide_decoder;     /* instance, created by create, destroyed by destroy */
struct tide_decoder_seq; /* one generation, created by begin, freed by finish */

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

/* How [generation] steps is counted (struct tide_decoder_plan steps_scope). */
enum {
    TIDE_STEPS_PER_BLOCK = 0, /* steps is each block's (LLaDA2.0) */
    TIDE_STEPS_SHARED = 1,    /* steps is shared evenly among the blocks (LLaDA) */
    TIDE_STEPS_UNUSED = 2,    /* the loop is open-ended and ignores steps (LLaDA2.1) */
};

/* What one generation needs, for a prompt length (plan). */
struct tide_decoder_plan {
    uint32_t size;        /* sizeof(struct tide_decoder_plan); set by the caller */
    int64_t n_ctx;        /* canvas positions the model must hold (KV cache) */
    int64_t max_tokens;   /* most positions one span of a forward holds */
    int64_t max_output;   /* most tokens the generation returns */
    int blocks;           /* most blocks decoded */
    int block_length;     /* tokens per block, as the placement policy sees a block */
    int max_steps;        /* most denoising steps a block runs; 0: no bound is known */
    int nominal_steps;    /* steps per block the settings name (e.g. [generation] steps),
                             for summaries; 0 when the loop is open-ended */
    int slots;            /* KV-cache slots a generation uses at once (1; 2 with a second
                             context, such as LLaDA's classifier-free guidance pass) */
    int64_t max_forwards; /* most forwards of the generation (a bound, for scheduling:
                             prefill, steps and K/V passes); 0: unknown */
    int gen_multiple;     /* gen_length must be a multiple of this (1, or block_length
                             when blocks start right after the prompt) */
    int steps_scope;      /* TIDE_STEPS_PER_BLOCK, _SHARED or _UNUSED */
    /* --- appended --- */
    int grows_context; /* 1: the decoder asks host->context_grow before each block after the
                          first, so in-context examples can enter during generation (DIP,
                          docs/dip.md); 0: its prompt never changes */
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

/* The phase of a forward (struct tide_decoder_fwd). */
enum {
    TIDE_DECODE_PREFILL = 0, /* the prompt's blocks, before the first block begins */
    TIDE_DECODE_STEP = 1,    /* a denoising step (between step_begin and step_end) */
    TIDE_DECODE_KV = 2,      /* a finished block's final K/V */
};

/* Most spans one forward of a generation holds. */
#define TIDE_DECODER_MAX_SPANS 2

/* The next forward of a generation (next). Each span is a
 * struct tide_seq_span (tide/model.h) whose slot is the generation's own:
 * 0, or 1 .. plan.slots - 1 for a second context; the engine maps it to a
 * KV-cache slot of the model. The span's ids, rows and logits point into the
 * decoder's state and stay valid until feed() returns. logits receives f32
 * [n_rows, vocab]: rows NULL for rows 0 .. n_rows-1, else positions
 * pos0 + rows[i] (0 <= rows[i] < n, distinct, increasing); n_rows = 0 for
 * none. Each row is the same whatever rows, spans or companion sequences
 * share the forward (batch invariance). The engine checks every row for NaN
 * and Inf. */
struct tide_decoder_fwd {
    uint32_t size; /* sizeof(struct tide_decoder_fwd) of the engine */
    int phase;     /* TIDE_DECODE_PREFILL, _STEP or _KV */
    int n_spans;   /* 1 .. TIDE_DECODER_MAX_SPANS */
    struct tide_seq_span span[TIDE_DECODER_MAX_SPANS];
};

/* The engine's services to one generation. Every callback gets `user`, and
 * is called from inside next() or feed(). */
struct tide_decoder_host {
    uint32_t size; /* sizeof(struct tide_decoder_host) of the engine */
    void *user;
    /* True when every step must compute the logits of its whole block and
     * report them through step_logits (`tide run --dump-logits`,
     * [generation] all_logits); otherwise a decoder asks only for the rows
     * it reads. */
    bool block_logits;
    /* Block `block` (generated blocks, from 0) starts; first: the first
     * generated block of this prompt. Forwards between block_begin and the
     * first step_begin, and after a step_end, are the block's K/V passes;
     * forwards before the first block_begin are the prompt's prefill. */
    void (*block_begin)(void *user, int block, bool first);
    /* Step `step` of the block is about to run its forward; call it in the
     * next() that returns the step's forward. A status other than TIDE_OK
     * (cancelled, interrupted, a policy failure) must stop the generation:
     * return it from next(). */
    int (*step_begin)(void *user, int block, int step);
    /* The logits of every row of the block this step (only when
     * block_logits): [rows, vocab], block = absolute block on the canvas. */
    void (*step_logits)(void *user, int64_t block, int step, const float *logits, int rows,
                        int vocab);
    /* The logits the step decided on: rows[i] is position pos[i] of the
     * block (block-relative, increasing), [vocab] f32 each. */
    void (*step_rows)(void *user, int64_t block, int step, int n, const int32_t *pos,
                      const float *const *rows, int vocab);
    /* After each step (in the feed() of its forward). */
    void (*step_end)(void *user, const struct tide_decoder_step *s);
    /* A block is final: gen[0..n) is the output so far (what the generation
     * would return if it ended here). */
    void (*block_end)(void *user, int block, const int32_t *gen, int64_t n);
    /* --- appended: NULL when the engine has none --- */
    /* Run fn(ctx, tid, nt) for tid = 0 .. nt-1 (nt <= nt_max) on the engine's
     * CPU threads, the caller as tid 0, and return when every one has: the
     * same team that runs the forward, so a step's sampling wakes no other
     * threads (dc_sample_rows uses it). */
    void (*parallel)(void *user, int nt_max, void (*fn)(void *ctx, int tid, int nt), void *ctx);
    /* Context growth (DIP, docs/dip.md), for a decoder whose plan says
     * grows_context. context_room: the most tokens the prompt may grow by in
     * this generation (0: it never does); begin() makes room for them. Before
     * generated block `block` (>= 1) begins, the decoder calls context_grow;
     * it returns how many tokens to insert (0: none) with *ids (valid until
     * the next call) and *at, the prompt offset they go before (0 .. the
     * current prompt length). The decoder inserts them, shifts what follows
     * (the output so far included: it is final and stays so), recomputes
     * every cached position whose K/V the insertion changed and nothing
     * else, then begins the block. NULL: no growth. */
    int64_t context_room;
    int64_t (*context_grow)(void *user, int block, const int32_t **ids, int64_t *at);
};

/* What a generation produced (finish). The engine provides ids with room
 * for the plan's max_output tokens. */
struct tide_decoder_result {
    uint32_t size; /* sizeof(struct tide_decoder_result) of the engine */
    int32_t *ids;  /* [max_output], filled with the output */
    int64_t n;     /* tokens written to ids */
    int64_t steps; /* denoising steps (the official loop's forwards) */
    int blocks;    /* blocks decoded */
    bool stopped;  /* the output ends at an EOS or stop token */
    int64_t edits; /* tokens replaced by other tokens (editing decoders), 0 otherwise */
};

/* next() returns this when the generation has no forward left. */
#define TIDE_DECODER_DONE 1

struct tide_decoder_ops {
    uint32_t size;
    /* Create an instance for these settings. Checks them and logs each
     * problem naming the key ("[generation] threshold", "[decoder-x] key").
     * Returns TIDE_OK, TIDE_E_CONFIG or TIDE_E_NOMEM. */
    int (*create)(const struct tide_decoder_args *args, struct tide_decoder **out);
    void (*destroy)(struct tide_decoder *d); /* NULL is a no-op; no generation may be alive */
    /* The needs of a generation of prompt_len tokens (out->size is set by
     * the caller; write no field beyond it). prompt_len 0 asks only for what
     * the settings alone decide (block_length, max_steps, nominal_steps,
     * slots, gen_multiple, steps_scope) and must not fail or log. Returns
     * TIDE_OK, or TIDE_E_RANGE for a prompt the model's context cannot hold
     * (logged with the numbers). */
    int (*plan)(const struct tide_decoder *d, int64_t prompt_len, struct tide_decoder_plan *out);
    /* Start a generation of prompt[prompt_len] (copied) with host's events
     * (host is the engine's and outlives the generation). On TIDE_OK *out
     * is the state; else *out is NULL. Returns TIDE_OK or TIDE_E_NOMEM. */
    int (*begin)(struct tide_decoder *d, const struct tide_decoder_host *host,
                 const int32_t *prompt, int64_t prompt_len, struct tide_decoder_seq **out);
    /* The next forward into *fwd (fwd->size is the engine's; the decoder
     * sets phase, n_spans and the spans). Returns TIDE_OK (run it, then
     * feed), TIDE_DECODER_DONE (nothing left: call finish), or a failing
     * status (from step_begin, or TIDE_E_NOMEM): the generation ends with
     * it. */
    int (*next)(struct tide_decoder_seq *s, struct tide_decoder_fwd *fwd);
    /* The forward next() returned has run and its logits are in place.
     * Returns TIDE_OK or a failing status. */
    int (*feed)(struct tide_decoder_seq *s);
    /* The output into *out (out->ids has room for plan.max_output; write no
     * field beyond out->size), then free the state. out NULL: only free it
     * (a generation that failed or was abandoned). s NULL is a no-op.
     * Returns TIDE_OK, or TIDE_E_INVAL when called before next() said done. */
    int (*finish)(struct tide_decoder_seq *s, struct tide_decoder_result *out);
    /* The settings in force, as "key=value key=value" (traces and logs
     * record them). Writes at most len bytes, NUL-terminated. */
    void (*describe)(const struct tide_decoder *d, char *buf, size_t len);
    /* ---- Optional: appended after describe (check with TIDE_OPS_HAS). ---- */
};

/* Every slot up to finish is required; describe is required too. */
#define TIDE_DECODER_OPS_MIN_SIZE                                                                  \
    (offsetof(struct tide_decoder_ops, describe) + sizeof(void (*)(void)))

/* True when a struct of a given declared size (from the other side of the
 * ABI) holds field. */
#define TIDE_DECODER_HAS(s, type, field)                                                           \
    ((size_t)(s)->size >= offsetof(type, field) + sizeof((s)->field))

#ifdef __cplusplus
}
#endif
#endif
