/* Generation: the engine's side of a decoder plugin (tide/decoder.h).
 *
 * The decoding loops themselves are plugins (plugins/decoder-*, one per
 * model family's official loop). The core resolves which one [generation]
 * decoder names (auto: the one the model asks for), creates it from a
 * configuration and checks its plan; the engine loop (loop.h) drives it,
 * checks the logits, counts the forwards and passes the block and step
 * events on to the engine's hooks (dispatcher, metrics, the embedding API).
 * Core-internal. */
#ifndef TIDE_DECODE_H
#define TIDE_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "loader.h"
#include "tide/decoder.h"
#include "tide/model.h"

/* Most extra stop tokens ([generation] stop_tokens). */
#define TIDE_GEN_MAX_STOP 16

/* Special ids, looked up by name in the tokenizer. */
struct tide_gen_tokens {
    int32_t mask, eos;
    int n_stop;                      /* extra tokens that end generation as EOS does */
    int32_t stop[TIDE_GEN_MAX_STOP]; /* [n_stop] */
};

/* The engine's view of a generation's events; any hook may be NULL. The
 * decoder's own events (tide/decoder.h) arrive here unchanged. */
struct tide_gen_hooks {
    void *user;
    void (*block_begin)(void *user, int block, bool first);
    /* A status other than TIDE_OK stops the generation with it. */
    int (*step_begin)(void *user, int block, int step);
    /* Setting this hook makes each step compute the logits of its whole block. */
    void (*step_logits)(void *user, int64_t block, int step, const float *logits, int rows,
                        int vocab);
    void (*step_rows)(void *user, int64_t block, int step, int n, const int32_t *pos,
                      const float *const *rows, int vocab);
    void (*step_end)(void *user, const struct tide_decoder_step *s);
    void (*block_end)(void *user, int block, const int32_t *gen, int64_t n);
};

struct tide_gen_result {
    int32_t *ids; /* the output (at most the plan's max_output tokens); caller frees */
    int64_t n;
    int64_t forwards;       /* model passes, as the official loop counts forwards: steps,
                               prefill and K/V passes, cfg's unconditional passes (which
                               share a forward of the model with their step's) */
    int64_t model_forwards; /* forward calls of the model it took part in (shared in a batch) */
    int64_t steps;          /* denoising steps (the decoder's count) */
    int blocks;             /* blocks decoded */
    bool stopped;           /* the output ends at an EOS/stop token */
    int64_t edits;          /* tokens replaced by other tokens (editing decoders) */
    double seconds;         /* wall time of the whole generation */
    double prefill_seconds; /* of which before the first block began */
    /* DIP (docs/dip.md) and attention cost: */
    int64_t prompt_tokens; /* the prompt at the start (examples up front included) */
    int64_t inserted;      /* tokens that joined the prompt during generation */
    int64_t insertions;    /* how many times it grew */
    int64_t attended;      /* key positions attended, summed over its passes: each span's
                              pos0 + n (what a forward's attention reads per query row) */
    int64_t computed;      /* positions its passes computed (each span's n) */
};

/* One decoder instance, for one configuration's generation settings. */
struct tide_decode {
    const struct tide_plugin *pl;
    const struct tide_decoder_ops *ops;
    struct tide_decoder *dec;
    const char *name;   /* the plugin's name without "decoder-" (borrowed from it) */
    bool all_logits;    /* [generation] all_logits: every row of each block */
    char settings[512]; /* describe(), or "" */
};

/* The decoder plugin `want` names ([generation] decoder: "auto", a short
 * name "x" for the plugin decoder-x, or a plugin's full name); auto takes
 * model_wants (the model's choice, NULL when it names none). Logs and
 * returns NULL when none fits, listing the decoders found (model_wants
 * first). `arch` names the model in messages. */
const struct tide_plugin *tide_decode_resolve(const struct tide_plugin_set *set, const char *want,
                                              const char *model_wants, const char *arch);

/* Create an instance of plugin pl from cfg's [generation] and the plugin's
 * section, for the model described by info. Returns TIDE_OK or the
 * decoder's status (its messages name the keys). */
int tide_decode_open(struct tide_decode *d, const struct tide_plugin *pl,
                     const struct tide_config *cfg, const struct tide_model_info *info,
                     const struct tide_gen_tokens *tok);
void tide_decode_close(struct tide_decode *d); /* a zeroed or closed d is a no-op */

/* The plan for a prompt of prompt_len tokens, checked against the model's
 * context (max_ctx). TIDE_OK, TIDE_E_RANGE (logged) or the decoder's status. */
int tide_decode_plan(const struct tide_decode *d, int64_t prompt_len, int64_t max_ctx,
                     struct tide_decoder_plan *out);

/* One generation of decoder d on model m through the engine loop (a batch
 * of one; loop.c), without a dispatcher: the model's reserve follows the
 * plan. hooks may be NULL. On TIDE_OK out->ids is malloc'd (the caller frees
 * it); on failure out->ids is NULL. */
int tide_decode_run(struct tide_decode *d, const struct tide_model_ops *ops, struct tide_model *m,
                    const int32_t *prompt, int64_t prompt_len, const struct tide_gen_hooks *hooks,
                    struct tide_gen_result *out);

/* Ctrl-C support: a signal handler calls tide_request_stop(); long loops
 * check tide_stop_requested() and return TIDE_E_INTERRUPTED (the decoder's
 * step_begin does). */
void tide_request_stop(void);
bool tide_stop_requested(void);

#endif
