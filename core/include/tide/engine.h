/* The embedding API: drive the runtime from a program (C, or Python through
 * ctypes) instead of the `tide` command line.
 *
 *     struct tide_engine *e;
 *     const char *sets[] = {"generation.gen_length=64"};
 *     struct tide_engine_args a = {.size = sizeof a, .config_path = "config/llada2-tiny.ini",
 *                                  .sets = sets, .n_sets = 1};
 *     if (tide_engine_open(&a, &e) != TIDE_OK) {
 *         fprintf(stderr, "%s\n", tide_engine_error(NULL));
 *         return 1;
 *     }
 *     struct tide_request r;
 *     tide_request_init(&r);
 *     r.prompt = "Hello";
 *     struct tide_result *res;
 *     if (tide_engine_generate(e, &r, &res) == TIDE_OK)
 *         printf("%s\n", res->text);
 *     tide_result_free(res);
 *     tide_engine_close(e);
 *
 * An engine is what `tide run` builds: the plugins found on the search path,
 * the configuration (defaults, then an INI file, INI text and
 * "section.key=value" overrides, exactly as `tide run -c FILE --set ...`),
 * the model loaded and its experts placed by the configured policy. `tide
 * run` itself is written on this API.
 *
 * Errors: every function that acts returns TIDE_OK or a negative enum
 * tide_status; the messages that explain it (naming the file, key or tensor
 * at fault) are kept and returned by tide_engine_error(). Messages are also
 * logged as usual (stderr, or the sink of tide_log_set_sink; the level is
 * tide_log_set_level's). Nothing here calls exit() or installs signal
 * handlers.
 *
 * Threading: an engine serves one call at a time; calls on one engine from
 * several threads must be serialised by the caller. Callbacks run on the
 * thread that called tide_engine_generate (or tide_engine_run_batch: one
 * loop on one thread drives every request of a batch) and must not call
 * into the same engine, except tide_engine_cancel(), which any thread may
 * call at any time, and the calls a batch queue's callbacks may make (see
 * struct tide_batch_queue).
 * Separate engines in one process are allowed but share the log settings.
 *
 * Versioning: structs the caller fills start with `size` (set it to
 * sizeof the struct; tide_request_init does it for requests); structs the
 * library fills also carry their size. Fields are only ever appended, so a
 * program built against an older header keeps working with a newer library
 * (TIDE_ENGINE_API_VERSION counts these additions; see docs/sdk.md). */
#ifndef TIDE_ENGINE_H
#define TIDE_ENGINE_H

#include "tide/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tide/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when fields or functions are appended to this header. */
#define TIDE_ENGINE_API_VERSION 5

struct tide_engine; /* opaque */

/* How to open an engine. Zero every field you do not set. */
struct tide_policy_costs;

struct tide_engine_args {
    uint32_t size;           /* sizeof(struct tide_engine_args) */
    const char *config_path; /* INI file, or NULL for the built-in defaults */
    const char *config_text; /* INI text, applied after config_path; or NULL */
    const char *const *sets; /* [n_sets] "section.key=value" overrides, applied last, in order */
    int n_sets;
    const char *plugin_path; /* ':'-separated plugin folders searched before the default
                                ones (next to the executable, next to libtide, the install
                                prefix, TIDE_PLUGIN_PATH); or NULL */
    /* --- appended --- */
    /* The machine's modelled costs for the cost-aware policies (tide/policy.h),
     * borrowed: it must outlive the engine. The runtime does not read hardware
     * profiles; the tide command loads [policy] profile and passes it here. An
     * engine whose config sets [policy] profile without this is refused. */
    const struct tide_policy_costs *policy_costs;
    /* --- appended (API version 3) --- */
    const char *const *config_paths; /* [n_config_paths] more INI files, read after config_path
                                        and before config_text, in order: each may override
                                        what the earlier ones set; or NULL */
    int n_config_paths;
};

/* Open an engine: find the plugins, build the configuration, resolve the
 * model (generating the synthetic checkpoint when [model] create asks for
 * it), load it and place its experts. On success *out owns the engine (close
 * it with tide_engine_close); on failure *out is NULL and
 * tide_engine_error(NULL) on this thread explains why. Returns TIDE_OK,
 * TIDE_E_INVAL (args NULL or size too small), TIDE_E_CONFIG (a bad file, key
 * or value: every one is reported), TIDE_E_NOTFOUND, TIDE_E_FORMAT, TIDE_E_IO,
 * TIDE_E_BUDGET, TIDE_E_DEVICE, TIDE_E_NOMEM. */
TIDE_API int tide_engine_open(const struct tide_engine_args *args, struct tide_engine **out);

/* Close an engine and free everything it holds. NULL is a no-op. Must not
 * run while a call on the engine is in progress. */
TIDE_API void tide_engine_close(struct tide_engine *e);

/* The messages of the last failed call: on e (the engine's, "" when its last
 * call succeeded), or with e NULL the calling thread's last failed call on
 * any engine (use it after tide_engine_open fails). One message per line;
 * when none was logged, the status text. The string belongs to the engine
 * (or the thread) and is valid until its next call. Never NULL. */
TIDE_API const char *tide_engine_error(const struct tide_engine *e);

/* ---- generation --------------------------------------------------------- */

/* Passed to on_start once the request is checked and memory reserved, just
 * before the prompt is prefilled (alone or in a batch). Valid during the
 * call. */
struct tide_start_event {
    uint32_t size;         /* sizeof(struct tide_start_event) of the library */
    int64_t prompt_tokens; /* tokens of the prompt (after the chat template) */
    int64_t gen_length;    /* the effective parameters of this request ... */
    int block_length;
    int steps;
    double threshold;
    double temperature;
    int top_k;
    double top_p;
    int64_t seed;
    bool chat;
    bool recompute;
    int n_blocks; /* blocks this request decodes at most */
    /* --- appended --- */
    const char *decoder; /* the decoder plugin's short name ([generation] decoder, resolved) */
    /* --- appended (API version 2) --- */
    const char *decoder_settings; /* the decoder's settings in force, "key=value ..." */
    int max_steps;                /* most steps a block runs (0: no bound); steps is then 0 when the
                                     decoder's loop is open-ended */
};

/* Passed to on_step after every denoising step. Valid during the call. */
struct tide_step_event {
    uint32_t size;       /* sizeof(struct tide_step_event) of the library */
    int block;           /* generated block, from 0 */
    int step;            /* denoising step within the block, from 0 */
    int n_blocks;        /* blocks this request decodes at most */
    int committed;       /* tokens committed by this step */
    int remaining;       /* masked positions left in the block */
    int64_t tokens;      /* tokens committed so far in this request */
    int64_t steps;       /* steps so far in this request, this one included */
    double step_seconds; /* wall time of this step */
    double seconds;      /* wall time since the request started */
    /* --- appended (API version 2) --- */
    int edited;    /* tokens this step replaced by other tokens (editing decoders) */
    int64_t edits; /* such replacements so far in this request */
};

/* Passed to on_block when a block is final. Valid during the call. */
struct tide_block_event {
    uint32_t size;      /* sizeof(struct tide_block_event) of the library */
    int block;          /* generated block, from 0 */
    int n_blocks;       /* blocks this request decodes at most */
    const int32_t *ids; /* [n_ids] every token generated so far (through EOS, if any) */
    int64_t n_ids;
    const char *text; /* their text (NUL-terminated; ids the tokenizer lacks are left out) */
    size_t text_len;
    const char *delta; /* text not handed out by earlier events: a suffix of text that stops
                          before an incomplete UTF-8 sequence at its end */
    size_t delta_len;
    int64_t steps;  /* steps so far in this request */
    double seconds; /* wall time since the request started */
};

/* Passed to on_logits at every denoising step: the logits of every row of
 * the block (verification, e.g. `tide run --dump-logits`). Setting on_logits
 * makes each step compute the output layer for the whole block, where
 * otherwise only the still-masked rows are computed. Valid during the call. */
struct tide_logits_event {
    uint32_t size;       /* sizeof(struct tide_logits_event) of the library */
    int64_t block;       /* absolute block on the canvas (prompt blocks included) */
    int step;            /* denoising step within the block */
    const float *logits; /* [rows][vocab] f32 */
    int rows;            /* block length */
    int vocab;
};

/* Passed to on_rows at every denoising step: the logits the decoder read,
 * one row per still-masked position (`tide run --logits-hash`). They are the
 * same values whether or not the whole block was computed. Valid during the
 * call. */
struct tide_rows_event {
    uint32_t size;            /* sizeof(struct tide_rows_event) of the library */
    int64_t block;            /* absolute block on the canvas (prompt blocks included) */
    int step;                 /* denoising step within the block */
    int n;                    /* rows */
    const int32_t *pos;       /* [n] their positions in the block, increasing */
    const float *const *rows; /* [n] each [vocab] f32 */
    int vocab;
};

/* One generation. Initialise with tide_request_init(), then set what you
 * need. For every numeric parameter a negative value means "the engine's
 * configured [generation] value". */
struct tide_request {
    uint32_t size;             /* sizeof(struct tide_request); set by tide_request_init */
    const char *prompt;        /* UTF-8 text (NUL-terminated); ignored when prompt_ids is set */
    const int32_t *prompt_ids; /* [n_prompt_ids] token ids, or NULL */
    size_t n_prompt_ids;
    int chat;                /* 1: wrap the text prompt in the model's chat template;
                                0: do not; negative: [generation] chat */
    int64_t gen_length;      /* tokens to generate (an API's max_tokens) */
    int block_length;        /* must equal the engine's (the model's attention mask
                                was built for it); TIDE_E_UNSUPPORTED otherwise */
    int steps;               /* most denoising steps per block */
    double threshold;        /* commit threshold, (0,1] */
    double temperature;      /* 0 = greedy */
    int top_k;               /* 0 = off */
    double top_p;            /* (0,1], 1 = off */
    int64_t seed;            /* sampling seed */
    const char *const *sets; /* [n_sets] "generation.key=value" overrides for this request
                                only, applied before the fields above; any [generation]
                                option, including ones added after this header */
    int n_sets;
    void *user; /* passed to every callback */
    /* Optional callbacks (NULL: none). Those returning int cancel the
     * generation when they return nonzero: it stops before its next step
     * and tide_engine_generate returns TIDE_E_CANCELLED (when no step is
     * left, it completes normally). */
    int (*on_start)(void *user, const struct tide_start_event *ev);
    int (*on_step)(void *user, const struct tide_step_event *ev);
    int (*on_block)(void *user, const struct tide_block_event *ev);
    void (*on_logits)(void *user, const struct tide_logits_event *ev);
    /* --- appended --- */
    void (*on_rows)(void *user, const struct tide_rows_event *ev);
};

/* Reset a request: size set, every parameter negative (configured), chat
 * negative, no prompt, no callbacks. */
TIDE_API void tide_request_init(struct tide_request *req);

/* Exact offload counters: totals over every MoE layer and forward (prefill,
 * steps, K/V passes). With no offload every row is a hit. */
struct tide_offload_stats {
    uint32_t size;         /* the caller sets sizeof(struct tide_offload_stats) before a
                              call that fills it; the library writes no more than that */
    uint64_t tokens;       /* token routings (tokens x MoE layers) */
    uint64_t active;       /* experts with at least one token, summed over layers and forwards */
    uint64_t hit_rows;     /* token-expert rows computed on the device */
    uint64_t miss_rows;    /* token-expert rows computed on the host */
    uint64_t promotions;   /* experts copied into device slots */
    uint64_t evictions;    /* residents replaced */
    uint64_t weight_bytes; /* expert weights moved host -> device */
    uint64_t act_bytes;    /* activations moved device <-> host for host experts */
    double hit_rate;       /* hit_rows / (hit_rows + miss_rows); 0 when no rows */
    double host_seconds;   /* host expert time */
    double device_seconds; /* device expert time */
};

/* What a generation produced. Allocated by the library; free it with
 * tide_result_free. */
struct tide_result {
    uint32_t size; /* sizeof(struct tide_result) of the library */
    int32_t *ids;  /* [n_ids] generated tokens, cut after the first EOS */
    int64_t n_ids;
    char *text; /* their text, NUL-terminated, text_len bytes */
    size_t text_len;
    int64_t prompt_tokens;  /* tokens of the prompt (after the chat template) */
    int64_t steps;          /* denoising steps */
    int64_t forwards;       /* model forward calls, prefill and K/V passes included
                               (0 in a cancelled result) */
    int blocks;             /* blocks decoded */
    bool stopped;           /* stopped at EOS rather than at gen_length */
    bool cancelled;         /* stopped by a callback or tide_engine_cancel */
    double seconds;         /* wall time of the generation */
    double prefill_seconds; /* of which prefilling the prompt */
    int64_t unknown_ids;    /* generated ids the tokenizer has no text for (left out of text) */
    struct tide_offload_stats offload; /* this request's counters */
    int64_t gen_length;                /* the effective parameters, as in tide_start_event */
    int block_length;
    int steps_per_block;
    double threshold;
    double temperature;
    int top_k;
    double top_p;
    int64_t seed;
    bool chat;
    /* --- appended (API version 2) --- */
    int64_t edits; /* tokens replaced by other tokens (editing decoders; 0 otherwise) */
    /* --- appended (API version 4) --- */
    int64_t model_forwards; /* forward calls of the model this request took part in: one per
                               round of the engine loop, shared by every request of a batch
                               (forwards counts the request's own passes) */
    /* --- appended (API version 5): DIP and attention cost (docs/dip.md) --- */
    int64_t context_tokens;  /* the prompt the model saw at the start: prompt_tokens plus the
                                in-context examples DIP put up front ([dip]) */
    int64_t inserted_tokens; /* tokens that joined the prompt during generation (DIP) */
    int64_t attended;        /* key positions attended, summed over the request's passes (each
                                span's end: what its attention reads per query row) */
    int64_t computed;        /* positions computed, summed over the request's passes */
};

/* Generate from req. Checks the request (parameters, prompt length against
 * the model's context) before any work or callback; then prefills, decodes
 * block by block and calls the callbacks. On TIDE_OK *out holds the result.
 * On TIDE_E_CANCELLED (a callback returned nonzero, or tide_engine_cancel)
 * *out holds what was final before the cancel (whole blocks), with
 * cancelled set. On any other status *out is NULL. Either way, passing *out
 * to tide_result_free is always right. Returns TIDE_OK, TIDE_E_CANCELLED,
 * TIDE_E_INVAL (e, req or out NULL, no prompt, size too small), TIDE_E_CONFIG
 * (a bad parameter or override, naming it), TIDE_E_RANGE (empty or too long
 * prompt, an id beyond the vocabulary), TIDE_E_UNSUPPORTED (block_length
 * differs from the engine's; chat with a model without template),
 * TIDE_E_INTERRUPTED (SIGINT, when the program routes it to the runtime, as
 * `tide` does), TIDE_E_NOMEM, TIDE_E_DEVICE and what plugins return. */
TIDE_API int tide_engine_generate(struct tide_engine *e, const struct tide_request *req,
                                  struct tide_result **out);

/* Free a result. NULL is a no-op. */
TIDE_API void tide_result_free(struct tide_result *r);

/* Ask the generation in progress on e, if any, to stop before its next step
 * (it returns TIDE_E_CANCELLED). A generation that starts later is not
 * affected. Any thread; async-signal-safe. */
TIDE_API void tide_engine_cancel(struct tide_engine *e);

/* ---- batches (API version 3) -------------------------------------------- */

/* Several requests decoded together: every forward of the model runs each
 * running request's next span at once (dense layers once over all their
 * rows, each expert fetched once for all of them), while each request keeps
 * its own prompt, settings, decoder state and callbacks. Requests join
 * between forwards while fewer than max_batch run and leave when they end
 * (continuous batching). A request's tokens and logits do not depend on its
 * companions on a batch-invariant backend (the CPU backend; docs/batching.md
 * says which are). One loop on the calling thread schedules the batch, runs
 * one forward for all its requests and feeds each request's decoder, so
 * callbacks of all the batch's requests run on the calling thread, one at a
 * time; tide_engine_generate is the same loop with a batch of one. In a
 * batch, a result's offload counters are zero: the expert traffic is shared
 * by the batch, and tide_engine_stats counts it. */
struct tide_batch_queue {
    uint32_t size; /* sizeof(struct tide_batch_queue) */
    void *user;
    /* The next request to start, or NULL when none waits. Called between
     * forwards while fewer than max_batch run. idle: nothing runs, so the
     * call may wait for work; returning NULL while idle ends the run. The
     * request must stay valid until done() is called for it. */
    const struct tide_request *(*next)(void *user, bool idle);
    /* Every request next() returned ends here: status and result as
     * tide_engine_generate's (free the result with tide_result_free);
     * error: on failure, the messages that explain it (naming the key or
     * value at fault, as tide_engine_error would), else "". */
    void (*done)(void *user, const struct tide_request *req, int status, struct tide_result *res,
                 const char *error);
    /* Optional (NULL): called between every two forwards, even while every
     * slot is taken, for quick work that must not wait for one. next and
     * between may call tide_engine_tokenize, tide_engine_detokenize and
     * tide_engine_plan. */
    void (*between)(void *user);
};

/* Run requests from q, up to max_batch at a time, until next() returns NULL
 * while none runs. tide_engine_cancel stops every running request. Returns
 * TIDE_OK (each request's own status goes to done), or TIDE_E_INVAL,
 * TIDE_E_UNSUPPORTED (max_batch > 1 on a model plugin without batches) or
 * TIDE_E_NOMEM. A routing trace of a batch records each prompt's id as its
 * order of admission from 0 (docs/trace-format.md, batched runs). */
TIDE_API int tide_engine_run_batch(struct tide_engine *e, int max_batch,
                                   const struct tide_batch_queue *q);

/* Generate reqs[0..n) as one batch of at most max_batch at a time, in order
 * of admission: results[i] and status[i] are those tide_engine_generate
 * would give reqs[i]. Returns as tide_engine_run_batch. */
TIDE_API int tide_engine_generate_batch(struct tide_engine *e,
                                        const struct tide_request *const *reqs, int n,
                                        int max_batch, struct tide_result **results, int *status);

/* ---- counters, information, options ------------------------------------- */

/* The offload counters summed over every generation since the engine opened
 * (or since tide_engine_reset_stats). out->size must be set; the library
 * writes at most that many bytes. Returns TIDE_OK or TIDE_E_INVAL. */
TIDE_API int tide_engine_stats(struct tide_engine *e, struct tide_offload_stats *out);

/* The same counters for one MoE layer, 0 .. n_moe_layers - 1 (for
 * per-layer hit rates). Returns TIDE_OK, TIDE_E_INVAL or TIDE_E_RANGE. */
TIDE_API int tide_engine_layer_stats(struct tide_engine *e, int layer,
                                     struct tide_offload_stats *out);

/* The model's forward calls since the engine opened (or since
 * tide_engine_reset_stats): one per round of the engine loop, whatever
 * number of sequences shared it (API version 4). */
TIDE_API uint64_t tide_engine_forwards(const struct tide_engine *e);

/* Zero the cumulative counters of tide_engine_stats, tide_engine_layer_stats
 * and tide_engine_forwards. */
TIDE_API void tide_engine_reset_stats(struct tide_engine *e);

/* What was opened. Strings belong to the engine and live until it closes
 * (policy: until the next tide_engine_set_options). */
struct tide_engine_info {
    uint32_t size;            /* the caller sets sizeof(struct tide_engine_info) */
    const char *model;        /* checkpoint directory */
    const char *model_plugin; /* e.g. "model-llada2" */
    const char *device;       /* device backend, described */
    const char *host;         /* host backend, described */
    const char *policy;       /* policy plugin, or "none" without offload */
    int budget;               /* experts per MoE layer on the device */
    int n_layers;
    int n_moe_layers;
    int n_experts;         /* routed experts per MoE layer */
    int experts_per_token; /* the router's top-k */
    int vocab_size;
    int64_t max_ctx;  /* positions the model takes: prompt + gen_length, in blocks */
    int block_length; /* the model's block length (fixed at open) */
    bool has_chat_template;
    uint64_t expert_bytes; /* one routed expert */
    /* --- appended (API version 4) --- */
    const char *decoder; /* the decoder plugin's short name (NAME of decoder-NAME) */
    int gen_multiple;    /* a request's gen_length must be a multiple of this (1, or the
                            block length when blocks start right after the prompt) */
    int steps_scope;     /* how [generation] steps counts: 0 steps per block, 1 shared evenly
                            among the blocks, 2 unused (an open-ended loop; tide/decoder.h
                            TIDE_STEPS_*) */
    int nominal_steps;   /* steps per block the configuration names (0: open-ended) */
    int32_t eos_id;      /* the end-of-sequence token */
    int n_end_ids;
    const int32_t *end_ids;    /* [n_end_ids] ids that end generation: EOS, then
                                  [generation] stop_tokens */
    const char *eos_token;     /* EOS as text ("<|endoftext|>") */
    const char *chat_template; /* the model's, with one "{prompt}"; NULL: none */
    const char *turn_end;      /* the token that ends a chat turn ("<|role_end|>"), or NULL */
};

/* Fill *out (out->size must be set). Returns TIDE_OK or TIDE_E_INVAL. */
TIDE_API int tide_engine_get_info(struct tide_engine *e, struct tide_engine_info *out);

/* The current value of one option, "section.key" (e.g.
 * "generation.gen_length"), as it would be written in the INI file. *value
 * belongs to the engine, valid until the option changes. Returns TIDE_OK or
 * TIDE_E_NOTFOUND. */
TIDE_API int tide_engine_get_option(struct tide_engine *e, const char *name, const char **value);

/* The same option as a number (API version 4): an integer or a size in
 * bytes ("64MiB") as *i, a float as *f (either pointer may be NULL), a
 * boolean as 0 or 1. Returns TIDE_OK, TIDE_E_NOTFOUND, or TIDE_E_INVAL for
 * an option that is text (get it with tide_engine_get_option). */
TIDE_API int tide_engine_get_number(struct tide_engine *e, const char *name, int64_t *i, double *f);

/* ---- plans and telemetry (API version 4) --------------------------------- */

/* What a request would take: its decoder's plan for its prompt. */
struct tide_request_plan {
    uint32_t size;         /* the caller sets sizeof(struct tide_request_plan) */
    int64_t prompt_tokens; /* after the chat template */
    int64_t n_ctx;         /* positions it holds in the KV cache */
    int64_t max_output;    /* most tokens it returns */
    int blocks;            /* most blocks it decodes */
    int max_steps;         /* most steps per block (0: no bound is known) */
    int nominal_steps;     /* steps per block the settings name (0: open-ended) */
    int64_t max_forwards;  /* most forwards (prefill, steps, K/V passes; 0: unknown) */
    int64_t work;          /* most positions it forwards in all, a bound on its work
                              (max_forwards x the widest span x its contexts; 0: unknown) */
};

/* Plan req without running it: checked as tide_engine_generate checks it
 * (the same errors), prompt tokenized, the decoder's plan. Returns TIDE_OK
 * or the status tide_engine_generate would return before any work. */
TIDE_API int tide_engine_plan(struct tide_engine *e, const struct tide_request *req,
                              struct tide_request_plan *out);

/* Telemetry of the following generations (alone or batched) into f: JSON
 * Lines per step and per MoE layer and phase, as [output] metrics writes
 * them for `tide run` (README, "Expert offload"). f is borrowed until
 * replaced; NULL stops. */
TIDE_API void tide_engine_set_metrics(struct tide_engine *e, FILE *f);

/* Change options of an open engine, "section.key=value" each: [generation]
 * (except block_length), [policy] and the sections of policy plugins. When a policy option changed,
 * the experts are placed again under the new policy and budget (no reload). All or nothing: when
 * one assignment is refused none is applied. Returns TIDE_OK, TIDE_E_CONFIG (unknown or bad key or
 * value; a section fixed at open, such as [model] or [backend]) or what placing returns
 * (TIDE_E_BUDGET, ...). */
TIDE_API int tide_engine_set_options(struct tide_engine *e, const char *const *sets, int n_sets);

/* ---- tokens ------------------------------------------------------------- */

/* Encode len bytes of text (wrapped in the chat template when chat is
 * nonzero). On success *ids is an array of *n ids the caller frees with
 * tide_free. Returns TIDE_OK, TIDE_E_FORMAT, TIDE_E_UNSUPPORTED (chat
 * without a template), TIDE_E_NOMEM. */
TIDE_API int tide_engine_tokenize(struct tide_engine *e, const char *text, size_t len, int chat,
                                  int32_t **ids, size_t *n);

/* Decode ids into text; ids the tokenizer has no text for are left out. On
 * success *text (NUL-terminated, *len bytes) is freed by the caller with
 * tide_free. Returns TIDE_OK or TIDE_E_NOMEM. */
TIDE_API int tide_engine_detokenize(struct tide_engine *e, const int32_t *ids, size_t n,
                                    char **text, size_t *len);

/* Free memory the library handed out (tokenize, detokenize). NULL is a no-op. */
TIDE_API void tide_free(void *p);

/* The library's version ("0.1.0"), static storage. */
TIDE_API const char *tide_version(void);

/* TIDE_ENGINE_API_VERSION of the library (it may be newer than the header
 * a program was built with). */
TIDE_API int tide_engine_api_version(void);

#ifdef __cplusplus
}
#endif
#endif
