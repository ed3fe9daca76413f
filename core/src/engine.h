/* An engine: the plugins, backends, dispatcher, model and tokenizer named by
 * a configuration, opened in two phases. Core-internal; used by `tide run`,
 * `tide forward` and `tide bench`. */
#ifndef TIDE_ENGINE_H
#define TIDE_ENGINE_H

#include "config.h"
#include "generate.h"
#include "loader.h"
#include "moe_internal.h"
#include "tide/model.h"
#include "tide/tokenizer.h"

struct tide_engine {
    const struct tide_config *cfg; /* borrowed */
    const struct tide_plugin *model_pl;
    const struct tide_model_ops *mops;
    const struct tide_plugin *dev_pl;
    struct tide_backend_ref dev;
    struct tide_moe *moe;
    struct tide_model *model;
    struct tide_tokenizer *tok;
    struct tide_gen_tokens ids; /* mask, eos, stop */
    char model_dir[4096];
};

/* Phase 1: resolve the model plugin and checkpoint directory (generating the
 * synthetic checkpoint when [model] create asks for it), load the tokenizer.
 * Returns TIDE_OK or a status (logged). */
int tide_engine_prepare(const struct tide_config *cfg, const struct tide_plugin_set *set,
                        struct tide_engine **out);

/* Phase 2: create the backend and dispatcher and open the model. */
int tide_engine_load(struct tide_engine *e, const struct tide_plugin_set *set);

/* Make room for a generation of prompt_len tokens under p (KV cache and
 * activations); checks the prompt against the model's context first. */
int tide_engine_reserve(struct tide_engine *e, int64_t prompt_len, const struct tide_gen_params *p);

void tide_engine_close(struct tide_engine *e); /* NULL is a no-op */

/* Fill generation parameters from [generation]. */
void tide_engine_gen_params(const struct tide_config *cfg, struct tide_gen_params *p);

/* Encode text (wrapped in the model's chat template when chat; needs the
 * model loaded) into ids; caller frees. */
int tide_engine_encode(const struct tide_engine *e, const char *text, bool chat, int32_t **ids,
                       size_t *n);

#endif
