/* Routing traces: the routing of every MoE layer at every forward of a
 * generation, recorded once and replayed by `tide sim` through any policy,
 * budget and hardware profile (placement never changes routing).
 *
 * File format (version 3, little-endian; versions 1 and 2 are read too),
 * documented in docs/trace-format.md:
 *   header: magic "TIDETRC\0", u32 version, u32 json_len, JSON metadata
 *           (model shape, generation parameters), padded to 8 bytes;
 *   records: u8 type, then a type-specific payload (see the doc). A file may
 *           hold many prompts, appended one after another.
 * This header is the format and its reader; the writer is tide/trace_write.h. */
#ifndef TIDE_TRACE_H
#define TIDE_TRACE_H

#include "tide/api.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TIDE_TRACE_VERSION                                                                         \
    4u                            /* written: version 3 adds the join and batch records,           \
                                      version 4 the context record (DIP) */
#define TIDE_TRACE_VERSION_MIN 1u /* oldest read: version 1 has no prompt-vector records */

/* Phases of a forward, as the dispatcher sees them. */
enum tide_trace_phase {
    TIDE_TRACE_PREFILL = 0, /* prompt blocks written to the KV cache */
    TIDE_TRACE_STEP = 1,    /* a denoising step (the policy is consulted) */
    TIDE_TRACE_KV = 2,      /* a finished block's final K/V pass */
};

/* What a trace is about. Strings are owned by the caller (writer) or by the
 * reader (reader). */
struct tide_trace_header {
    uint32_t n_layers;  /* MoE layers */
    uint32_t n_experts; /* routed experts per MoE layer */
    uint32_t top_k;
    uint32_t hidden;
    uint32_t inter;        /* expert intermediate width */
    uint64_t expert_bytes; /* one routed expert */
    uint32_t block_length;
    uint32_t steps;
    double threshold;
    const char *model; /* checkpoint directory or a synthetic label */
    uint32_t version;  /* reader: the file's format version; ignored by the writer */
    /* The decoder that produced the steps and its settings ("key=value ...");
     * "" when unknown (synthetic traces, files from before they were
     * recorded). NULL counts as "" for the writer. */
    const char *decoder;
    const char *decoder_settings;
};

/* The events a trace records, as callbacks. The MoE dispatcher emits them
 * while the engine generates (tide_moe_set_trace); the trace writer
 * (tide/trace_write.h) and the simulator's synthetic traces consume them.
 * Every callback returns TIDE_OK or a status that stops the producer. */
struct tide_trace_sink {
    void *user;
    /* A new prompt: its id (free-form, e.g. the index in a prompt file) and length. */
    int (*prompt)(void *user, uint32_t prompt_id, uint32_t prompt_len);
    /* Block `block` (0 = first generated) starts. */
    int (*block)(void *user, int32_t block, bool first_generated);
    /* Denoising step `step` of the current block starts. */
    int (*step)(void *user, int32_t step);
    /* The routing of one MoE layer in one forward: n tokens, top_k ids each. */
    int (*route)(void *user, enum tide_trace_phase phase, uint32_t layer, uint32_t n,
                 const int32_t *ids);
    /* Optional (may be NULL): the vector of the prompt just announced (the
     * mean of its input embeddings, tide/model.h prompt_vector), vec[dim]. */
    int (*prompt_vector)(void *user, const float *vec, uint32_t dim);
    /* ---- Appended (version 3): batched decoding (docs/batching.md). ---- */
    /* A prompt joins a running batch (as prompt, but the generations before
     * it go on: the dispatcher's phase is not reset). */
    int (*join)(void *user, uint32_t prompt_id, uint32_t prompt_len);
    /* The next forward holds the positions of these prompts, in this order
     * (written before its routing records when it holds two or more). */
    int (*batch)(void *user, uint32_t n, const uint32_t *prompt_ids);
    /* ---- Appended (version 4): context growth (DIP, docs/dip.md). ---- */
    /* Prompt prompt_id grew by `inserted` tokens at offset `at`, to
     * prompt_len; the forwards that recompute what it changed follow. */
    int (*context)(void *user, uint32_t prompt_id, uint32_t at, uint32_t inserted,
                   uint32_t prompt_len);
};

/* ---- Reading ---- */

#define TIDE_TRACE_MAGIC "TIDETRC\0"

enum tide_trace_rec {
    TIDE_TREC_PROMPT = 1, /* u32 prompt_id, u32 prompt_len */
    TIDE_TREC_BLOCK = 2,  /* i32 block, u8 first_generated */
    TIDE_TREC_STEP = 3,   /* i32 step */
    TIDE_TREC_ROUTE = 4, /* u8 phase, u32 layer, u32 n, n*top_k ids (u8, or u16 if > 256 experts) */
    TIDE_TREC_PROMPT_VEC = 5, /* version 2: u32 dim, dim f32: the vector of the last prompt */
    TIDE_TREC_JOIN = 6,       /* version 3: u32 prompt_id, u32 prompt_len: joins a running batch */
    TIDE_TREC_BATCH = 7,      /* version 3: u32 n, n u32 prompt ids: the next forward's prompts */
    TIDE_TREC_CONTEXT = 8,    /* version 4: u32 prompt_id, u32 at, u32 inserted, u32 prompt_len:
                                 the prompt grew by `inserted` tokens at offset `at` (DIP) */
};

/* One record. ids points into the reader's buffer, valid until the next call. */
struct tide_trace_record {
    enum tide_trace_rec type;
    uint32_t prompt_id, prompt_len;
    int32_t block;
    bool first_generated;
    int32_t step;
    enum tide_trace_phase phase;
    uint32_t layer;
    uint32_t n;             /* tokens */
    const int32_t *ids;     /* [n * top_k] */
    uint32_t dim;           /* PROMPT_VEC: entries of vec */
    const float *vec;       /* PROMPT_VEC: [dim], valid until the next call */
    uint32_t n_seq;         /* BATCH: prompts in the forward */
    const uint32_t *seq_id; /* BATCH: [n_seq] their ids, valid until the next call */
    uint32_t at, inserted;  /* CONTEXT: where and how many tokens joined (prompt_id and
                               prompt_len, the new length, are set too) */
};

struct tide_trace_reader;

/* Open and check a trace: refuses a foreign file, another version, a bad
 * header, naming the file. Returns TIDE_OK with *out (free it with
 * tide_trace_reader_close), TIDE_E_NOTFOUND, TIDE_E_IO, TIDE_E_FORMAT or
 * TIDE_E_NOMEM. One reader per thread. */
TIDE_API int tide_trace_reader_open(const char *path, struct tide_trace_reader **out);
/* The trace's header; valid (strings included) until the reader is closed. */
TIDE_API const struct tide_trace_header *
tide_trace_reader_header(const struct tide_trace_reader *r);
/* Read the next record: returns 1 with *rec filled, 0 at the end, or a
 * negative status (a truncated or malformed record: logged with its offset). */
TIDE_API int tide_trace_reader_next(struct tide_trace_reader *r, struct tide_trace_record *rec);
/* Back to the first record. */
TIDE_API void tide_trace_reader_rewind(struct tide_trace_reader *r);
/* Unmap the file and free the reader. NULL is a no-op. */
TIDE_API void tide_trace_reader_close(struct tide_trace_reader *r);

#ifdef __cplusplus
}
#endif
#endif
