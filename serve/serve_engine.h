/* `tide serve`: the engine, as the server uses it. The only file that calls
 * the runtime is serve_engine.c; the HTTP side sees these calls only.
 *
 * Threading: one thread (the server's worker) makes every call on an
 * engine, except serve_engine_info, whose result is immutable after open. */
#ifndef TIDE_SERVE_ENGINE_H
#define TIDE_SERVE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve_json.h"

struct serve_engine;

/* What was opened (strings owned by the engine, valid until close). */
struct serve_engine_info {
    const char *model_dir;
    const char *policy; /* placement policy plugin, or "none" without offload */
    int budget;         /* experts per MoE layer on the device */
    int n_layers, n_moe_layers, n_experts;
    int block_length;              /* fixed at open */
    int64_t max_ctx;               /* positions the model takes */
    int vocab;                     /* the model's vocabulary (ids below it) */
    int64_t gen_length;            /* [generation] gen_length: max_tokens when a request has none */
    const struct serve_chat *chat; /* the model's chat template in roles; NULL: none */
    const char *eos_text;          /* the end-of-text token's text, or NULL */
};

/* The [serve] section. */
struct serve_settings {
    const char *host;
    int port;
    int max_queue;
    uint64_t max_body;
    const char *api_key;
    const char *model_name; /* "" = the checkpoint folder's name */
    int max_connections;
    int max_batch; /* prompts decoded together */
    bool shortest; /* [serve] schedule = shortest: least planned work first */
    double shutdown_timeout;
    double read_timeout;  /* seconds a client may take to send a request's headers, or its body */
    int64_t default_seed; /* the seed of requests that give none; -1: a random one each */
};

/* Open: plugins, configuration (the files in order, then "section.key=value" overrides),
 * model; costs are those of [policy] profile (NULL: none; borrowed, must
 * outlive the engine). *settings receives the [serve] section (strings owned
 * by the engine). Errors are logged. Returns TIDE_OK or a status. */
struct tide_policy_costs;
int serve_engine_open(const char *const *configs, int n_configs, const char *const *sets,
                      int n_sets, const struct tide_policy_costs *costs,
                      struct serve_settings *settings, struct serve_engine **out);
void serve_engine_close(struct serve_engine *e); /* NULL is a no-op; flushes telemetry */
const struct serve_engine_info *serve_engine_info(const struct serve_engine *e);

/* A block is final. ids are every token generated so far, cut after the
 * first end-of-text and at max_tokens; text is theirs without the
 * end-of-text token (ids the tokenizer has no text for are left out). */
struct serve_block {
    int block; /* generated block, from 0 */
    const int32_t *ids;
    int64_t n_ids;
    const char *text; /* raw bytes: may end inside a UTF-8 sequence */
    size_t text_len;
    bool eos;      /* an end-of-text token was generated */
    bool full;     /* max_tokens reached */
    int64_t steps; /* denoising steps so far */
};

/* One generation. Numeric parameters are negative for "as configured".
 * max_tokens may be any count the context takes: for a decoder that takes
 * gen_length in whole blocks, the engine generates whole blocks and cuts
 * the answer; steps are per block (docs/serving.md). */
struct serve_gen {
    const struct serve_prompt *prompt; /* text (chat: already in the template) or ids */
    bool chat;                         /* from "messages" (errors name it) */
    int64_t max_tokens;
    int block_length, steps, top_k;
    double threshold, temperature, top_p;
    int64_t seed;
    void *user;
    /* Called once the request is checked, before any forward. Nonzero
     * cancels. */
    int (*on_start)(void *user, int64_t prompt_tokens);
    /* After each denoising step; nonzero stops before the next step. */
    int (*on_step)(void *user, double step_seconds);
    /* After each block; nonzero stops the generation there (what was final
     * stays the result). */
    int (*on_block)(void *user, const struct serve_block *b);
};

/* Exact offload counters of one request (or cumulative). */
struct serve_offload {
    uint64_t tokens, hit_rows, miss_rows, promotions, evictions, weight_bytes, act_bytes;
};

struct serve_result {
    int64_t prompt_tokens;
    int32_t *ids; /* generated tokens as in the last serve_block; freed by serve_result_free */
    int64_t n_ids;
    char *text; /* their text, raw bytes (see serve_block) */
    size_t text_len;
    bool eos, full;
    bool stopped; /* a callback stopped it */
    int64_t steps, forwards;
    int blocks;
    double seconds, prefill_seconds;
    struct serve_offload offload;
};
void serve_result_free(struct serve_result *r);

/* Generate. Returns TIDE_OK with *out filled (also when a callback stopped
 * it: out->stopped), or a status with *err set: 400 for a request the model
 * cannot take (prompt or max_tokens beyond the context, block_length other
 * than the engine's, chat without a template, top_k or top_p where the
 * decoder takes none; naming the field), 500 otherwise. */
int serve_engine_generate(struct serve_engine *e, const struct serve_gen *g,
                          struct serve_result *out, struct serve_error *err);

/* Continuous batching (docs/batching.md): generations decoded together, up
 * to max_batch at a time, joining between forwards. Every callback runs on
 * the calling thread's behalf, one at a time. */
struct serve_batch_feed {
    void *user;
    /* The next generation to start (the caller's: valid until done()), or
     * NULL for none now. idle: nothing runs, so the call may wait for work;
     * NULL while idle ends serve_engine_run_batch. */
    const struct serve_gen *(*next)(void *user, bool idle);
    /* g ended: rc TIDE_OK with *res (the caller frees it with
     * serve_result_free), else a status with *err set as
     * serve_engine_generate's. */
    void (*done)(void *user, const struct serve_gen *g, int rc, struct serve_result *res,
                 const struct serve_error *err);
    /* Optional: between every two forwards, for quick work (tokenizing) that
     * must not wait behind the generations. */
    void (*between)(void *user);
};

/* Run generations from f until next() returns NULL while idle. Returns
 * TIDE_OK or a status for the whole batch (logged): TIDE_E_UNSUPPORTED when
 * max_batch > 1 and the model plugin has no batches. */
int serve_engine_run_batch(struct serve_engine *s, int max_batch, const struct serve_batch_feed *f);

/* The planned work of g (tide_engine_plan's work: positions forwarded, a
 * bound), for [serve] schedule = shortest. Only from the worker, between
 * forwards (a feed's next()). Returns TIDE_OK, or the status generating g
 * would fail with (then *work is 0: it fails fast anyway). */
int serve_engine_work(struct serve_engine *s, const struct serve_gen *g, int64_t *work);

/* Tokens of text (as is: chat text is rendered by the parser). *ids is
 * freed with free(). */
int serve_engine_tokenize(struct serve_engine *e, const char *text, size_t len, int32_t **ids,
                          size_t *n, struct serve_error *err);
/* Text of ids (unknown ids left out). *text is freed with free(). */
int serve_engine_detokenize(struct serve_engine *e, const int32_t *ids, size_t n, char **text,
                            size_t *len, struct serve_error *err);

/* The tokens of an answer cut to len bytes (by a stop sequence): the fewest
 * leading ids[0..n) whose text, cleaned as answers are (serve_utf8_clean,
 * an incomplete last character left out), holds len bytes, in *count.
 * Returns TIDE_OK or TIDE_E_NOMEM. */
int serve_engine_count_tokens(struct serve_engine *e, const int32_t *ids, int64_t n, size_t len,
                              int64_t *count);

/* Cumulative per-MoE-layer counters since open: out[i] for the i-th MoE
 * layer, at most cap. Returns the number of MoE layers. */
int serve_engine_layer_stats(struct serve_engine *e, struct serve_offload *out, int cap);

#endif
