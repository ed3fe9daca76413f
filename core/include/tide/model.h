/* Model plugin interface (struct tide_model_ops, plugin ABI version 2).
 *
 * A model plugin reads its checkpoint directory, describes itself, and runs a
 * forward pass over a span of positions with backend ops. Routed experts go
 * through the core's MoE dispatcher (tide/moe.h). The model owns its KV
 * caches: one per slot, so that several sequences share a forward
 * (forward_batch), one span each.
 *
 * Growth: slots are only appended; TIDE_MODEL_OPS_MIN_SIZE is required.
 * ABI version 2 dropped version 1's single-sequence slots (forward,
 * forward_rows, reserve) and the mkmodel without progress: a single
 * sequence is a batch of one span (tide_model_forward1). */
#ifndef TIDE_MODEL_H
#define TIDE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tide/backend.h"
#include "tide/moe.h"
#include "tide/option.h"
#include "tide/progress.h"
#include "tide/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tide_model; /* instance, created by open, destroyed by close */

/* What the core needs to know about a model. Static for the model's life. */
struct tide_model_info {
    uint32_t size;         /* sizeof(struct tide_model_info) */
    const char *arch;      /* "llada2_moe" */
    int n_layers;          /* all transformer layers */
    int n_moe_layers;      /* layers with routed experts */
    int n_experts;         /* routed experts per MoE layer */
    int top_k;             /* experts per token */
    int hidden;            /* model width */
    int vocab_size;        /* logits per position */
    int64_t max_ctx;       /* max positions (max_position_embeddings) */
    uint64_t expert_bytes; /* one routed expert, all its matrices, bytes */
    uint64_t dense_bytes;  /* every weight that is not a routed expert, bytes */
    /* Token names the generator looks up in the tokenizer (never ids). */
    const char *mask_token; /* "<|mask|>" */
    const char *eos_token;  /* "<|endoftext|>" */
    /* End of a chat turn ("<|role_end|>"), or NULL. Informational: like the
     * official generate(), the generator stops only at eos_token unless
     * [generation] stop_tokens names more. */
    const char *stop_token;
    /* Chat template with one "{prompt}" placeholder. */
    const char *chat_template;
    /* --- appended (check info->size with TIDE_INFO_HAS) --- */
    /* Which positions a forward lets each position see. TIDE_ATTN_BLOCK_CAUSAL:
     * a position sees every position of its own and earlier blocks of length
     * args->block, so finished blocks' K/V never change and the generator may
     * cache them exactly. TIDE_ATTN_FULL: every position sees every position
     * of the sequence; no exact KV cache exists and the generator recomputes
     * the whole canvas each step unless told to approximate. */
    int attention;
    /* The decoding loop this checkpoint's official code uses: the short name
     * of a decoder plugin (tide/decoder.h; "x" is the plugin decoder-x),
     * which [generation] decoder = auto picks. NULL: the model names none,
     * and auto is refused (the user names one). */
    const char *decoder;
};

enum { TIDE_ATTN_BLOCK_CAUSAL = 0, TIDE_ATTN_FULL = 1 };

/* True when the model's info struct is new enough to hold field. */
#define TIDE_INFO_HAS(info, field)                                                                 \
    ((size_t)(info)->size >= offsetof(struct tide_model_info, field) + sizeof((info)->field))

struct tide_model_args {
    uint32_t size;                      /* sizeof(struct tide_model_args) */
    const char *dir;                    /* checkpoint directory */
    const struct tide_opts *opts;       /* the plugin's own section */
    const struct tide_backend_ref *dev; /* runs the forward */
    struct tide_moe *moe;               /* the core's dispatcher; register experts here */
    int block;                          /* block length of the block-causal mask */
    /* --- appended (check args->size) --- */
    unsigned
        load_flags; /* TIDE_ST_READ / TIDE_ST_MLOCK for tide_st_open_flags ([model] mmap, mlock) */
};

/* One sequence's part of a forward_batch call: positions pos0 .. pos0+n-1
 * of KV-cache slot `slot` holding ids[n]. Logits: n_rows = 0 (rows and
 * logits may be NULL) for none; rows NULL for rows 0 .. n_rows-1; else
 * positions pos0 + rows[i] (0 <= rows[i] < n, distinct). logits receives
 * f32 [n_rows, vocab_size]. */
struct tide_seq_span {
    uint32_t size; /* sizeof(struct tide_seq_span) */
    int slot;
    const int32_t *ids;
    int64_t n, pos0;
    const int32_t *rows;
    int64_t n_rows;
    float *logits;
};

/* Arguments of `tide inspect`. */
struct tide_inspect_args {
    uint32_t size;
    int budget; /* experts per MoE layer kept on the device */
    FILE *out;
};

/* One phase of the forward pass (attention, dense feed-forward, ...), summed
 * over the forwards since profiling was switched on (model ops `profile`). */
struct tide_phase_stats {
    const char *name;   /* "attention", "routed experts", ...; owned by the plugin */
    uint64_t calls;     /* times the phase ran (per layer and forward) */
    double seconds;     /* wall time */
    double cpu_seconds; /* CPU time of the process (all threads) during the phase */
    uint64_t bytes;     /* weights (and K/V cache) read, counting each matrix once per call */
    uint64_t flops;     /* in bf16 matmuls, 2 per multiply-add */
    uint64_t flops_f32; /* in f32 arithmetic (attention scores and mixing) */
};

struct tide_model_ops {
    uint32_t size;
    /* Open the checkpoint in args->dir and make its weights available on the
     * device backend. Errors name the file or tensor at fault. */
    int (*open)(const struct tide_model_args *args, struct tide_model **out);
    void (*close)(struct tide_model *m); /* NULL is a no-op */
    const struct tide_model_info *(*info)(const struct tide_model *m);
    /* Make room for n_slots KV caches of n_ctx positions each and
     * max_tokens positions per forward_batch call (all spans together):
     * KV cache and activations. Growing discards every slot's cache.
     * Errors (no memory, n_ctx beyond the model) are logged. */
    int (*reserve_slots)(struct tide_model *m, int n_slots, int64_t n_ctx, int64_t max_tokens);
    /* One forward over n_spans sequences, each span in its own slot (slots
     * distinct): positions pos0 .. pos0+n-1 of the slot holding ids[n],
     * attending to that slot's cached K/V of the positions before pos0 and
     * writing the K/V of the span into it. Logits only for the rows each
     * span asks for (struct tide_seq_span): a model may skip the output
     * layer (final norm and head) for the others. Each span's logits and K/V
     * must be bit-identical to the same span alone (and each row to the same
     * row asked for with other rows) when the backend's kernels are batch
     * invariant (docs/batching.md). Dense layers run once over every span's
     * rows; each MoE layer calls tide_moe_forward once with all of them, so
     * an expert is fetched once per forward. Returns TIDE_OK,
     * TIDE_E_RANGE/TIDE_E_INVAL for a bad span (logged), or a backend's
     * status. */
    int (*forward_batch)(struct tide_model *m, const struct tide_seq_span *spans, int n_spans);
    /* Describe a checkpoint directory without loading weights to a backend. */
    int (*inspect)(const char *dir, const struct tide_inspect_args *args);
    /* Write a synthetic checkpoint (config.json, model.safetensors,
     * tokenizer.json) into dir, which must not exist or be empty.
     * preset is model-specific; layers <= 0 keeps the preset's depth.
     * progress (may be NULL) gets the bytes of weights written of the
     * checkpoint's total as they are written (else they are logged); a
     * status that progress returns stops the writing, and mkmodel returns
     * it. */
    int (*mkmodel)(const char *dir, const char *preset, int layers, uint64_t seed,
                   const struct tide_progress *progress);
    /* --- optional (check with TIDE_OPS_HAS) --- */
    /* The chat template (one "{prompt}" placeholder) for the checkpoint in
     * dir, without opening it; dir may be NULL (the plugin's default).
     * NULL when the model has none. The string belongs to the plugin. */
    const char *(*chat_template)(const char *dir);
    /* The prompt's vector: the mean over ids[n] of the model's input
     * embeddings, f32, written to out[info->hidden]. Reads the host copy of
     * the checkpoint (no backend work, no KV cache change), so it may be
     * called any time after open. Used to key prompt-similarity placement
     * (tide/policy.h prompt_begin). Returns TIDE_OK, or TIDE_E_RANGE for an
     * id outside the vocabulary or n < 1 (logged). */
    int (*prompt_vector)(struct tide_model *m, const int32_t *ids, int64_t n, float *out);
    /* Phase profiling, off after open. profile(m, true) zeroes the counters
     * and times every later forward by phase (the backend is synced at each
     * phase boundary, so keep it off outside measurements); false stops.
     * profile_read copies up to max phases into out and sets *n to the
     * number the model has. Both return TIDE_OK or a status. */
    int (*profile)(struct tide_model *m, bool on);
    int (*profile_read)(const struct tide_model *m, struct tide_phase_stats *out, int max, int *n);
    /* The decoder the checkpoint in dir asks for, read without loading
     * weights (its config, or a hint file its release ships), as
     * info->decoder will say once it is open; opts is the plugin's section.
     * Writes the reason into why[why_len] ("config.json auto_map names a
     * modeling file whose generate() edits tokens"). Returns a string owned
     * by the plugin, or NULL when dir does not say (logs nothing). */
    const char *(*checkpoint_decoder)(const char *dir, const struct tide_opts *opts, char *why,
                                      size_t why_len);
};

/* Every slot up to mkmodel is required. */
#define TIDE_MODEL_OPS_MIN_SIZE (offsetof(struct tide_model_ops, mkmodel) + sizeof(void (*)(void)))

/* One span in slot 0: the forward of a single sequence (tools and tests).
 * rows/n_rows/logits as struct tide_seq_span. */
static inline int tide_model_forward1(const struct tide_model_ops *ops, struct tide_model *m,
                                      const int32_t *ids, int64_t n, int64_t pos0,
                                      const int32_t *rows, int64_t n_rows, float *logits)
{
    struct tide_seq_span sp;
    sp.size = (uint32_t)sizeof sp;
    sp.slot = 0;
    sp.ids = ids;
    sp.n = n;
    sp.pos0 = pos0;
    sp.rows = rows;
    sp.n_rows = logits ? n_rows : 0;
    sp.logits = logits;
    return ops->forward_batch(m, &sp, 1);
}

#ifdef __cplusplus
}
#endif
#endif
