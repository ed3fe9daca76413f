/* An engine: the plugins, backends, dispatcher, model and tokenizer named by
 * a configuration, opened in two phases. The runtime side of the public
 * embedding API (tide/engine.h, engine_api.c), whose opaque struct
 * tide_engine this is; `tide bench`, `tide forward` and `tide sim` use the
 * phases directly (a borrowed config, re-placing experts between runs). */
#ifndef TIDE_ENGINE_INTERNAL_H
#define TIDE_ENGINE_INTERNAL_H

#include <stdatomic.h>
#include <stdio.h>

#include "config.h"
#include "decode.h"
#include "loader.h"
#include "moe_internal.h"
#include "tide/engine.h"
#include "tide/model.h"
#include "tide/tokenizer.h"
#include "tide/trace.h"

/* Where a generation's telemetry goes; any member may be NULL. */
struct tide_engine_outputs {
    FILE *metrics;                       /* JSON Lines */
    const struct tide_trace_sink *trace; /* routing events (e.g. a trace writer's sink) */
    uint32_t prompt_id;                  /* recorded in the trace */
};

struct tide_engine {
    const struct tide_config *cfg; /* borrowed */
    const struct tide_plugin *model_pl;
    const struct tide_model_ops *mops;
    const struct tide_plugin *dev_pl, *host_pl, *policy_pl;
    struct tide_backend_ref dev, host;
    struct tide_moe *moe;
    struct tide_model *model;
    struct tide_tokenizer *tok;
    struct tide_gen_tokens ids; /* mask, eos, [generation] stop_tokens */
    char model_dir[4096];
    int block; /* [generation] block_length the model opened with (tide_engine_load) */
    /* Set by tide_engine_open (engine_api.c) only. */
    struct tide_config *own_cfg;               /* owned; cfg points to it */
    struct tide_plugin_set *own_set;           /* owned; freed after the model and backends */
    const struct tide_engine_outputs *outputs; /* borrowed, for tide_engine_generate */
    struct tide_engine_outputs own_outputs;    /* tide_engine_set_metrics's */
    int32_t end_ids[1 + TIDE_GEN_MAX_STOP];    /* EOS, then the stop tokens (tide_engine_info) */
    atomic_int cancel;                         /* tide_engine_cancel: stop before the next step */
    struct tide_moe_counters total;            /* since open or tide_engine_reset_stats */
    uint64_t forwards;                         /* the model's forward calls, as total */
    struct tide_moe_counters *layer_total;     /* [n_moe_layers] the same per MoE layer */
    int n_layer_total;
    char policy_name[128];                 /* for tide_engine_get_info */
    char error[4096];                      /* tide_engine_error */
    const struct tide_policy_costs *costs; /* handed to policies; borrowed, may be NULL */
    /* The decoder [generation] decoder resolves to (prepare when the config
     * or the checkpoint names it, else load), why (auto), and its instance
     * for cfg's settings (opened by tide_engine_load). */
    const struct tide_plugin *dec_pl;
    char dec_why[256];
    struct tide_decode dec;
    struct tide_dip *dip; /* [dip] pool's planner (dip.h); NULL: DIP off */
};

/* Phase 1: resolve the model plugin and checkpoint directory (generating the
 * synthetic checkpoint when [model] create asks for it), load the tokenizer.
 * Returns TIDE_OK or a status (logged). */
int tide_engine_prepare(const struct tide_config *cfg, const struct tide_plugin_set *set,
                        struct tide_engine **out);

/* Phase 2: create the backends and dispatcher, open the model, and place the
 * experts as [policy] says. */
int tide_engine_load(struct tide_engine *e, const struct tide_plugin_set *set);

/* Phase 2 without the placement: the backends, dispatcher, model and
 * decoder, so that the model's expert shape is known (tide_moe_get_shape)
 * before the policy costs are fixed; then tide_engine_place. */
int tide_engine_load_model(struct tide_engine *e, const struct tide_plugin_set *set);

/* The machine's modelled costs to hand to every policy placed from now on
 * (the caller loads [policy] profile: the runtime does not read profiles).
 * c must outlive the engine; NULL for none. Call before tide_engine_load (or
 * tide_engine_place). */
void tide_engine_set_policy_costs(struct tide_engine *e, const struct tide_policy_costs *c);

/* Re-place the experts: policy plugin name and budget (experts per MoE layer
 * on the device; >= n_experts means no offload). The policy's options come
 * from its section of the config as it is now. */
int tide_engine_place(struct tide_engine *e, const struct tide_plugin_set *set, const char *policy,
                      int budget);

/* The budget [policy] asks for: budget, or derived from expert_memory, or all. */
int tide_engine_config_budget(const struct tide_engine *e, int *budget);

/* A decoder instance of the engine's decoder for another configuration's
 * settings (a request's overrides); close it with tide_decode_close. The
 * engine must be loaded. Returns TIDE_OK or the decoder's status. */
int tide_engine_decode_open(const struct tide_engine *e, const struct tide_config *cfg,
                            struct tide_decode *d);

/* The engine loop's environment over this engine (loop.h): its model, its
 * decoder for sequences that name none, the dispatcher, the trace records
 * and prompt vectors, per-step metrics lines into metrics (may be NULL). */
struct tide_loop_env;
void tide_engine_loop_env(struct tide_engine *e, FILE *metrics, struct tide_loop_env *env);

/* One generation (a batch of one through the engine loop) with decoder d
 * (NULL: the engine's own, for its config), the caller's hooks, and
 * telemetry into outputs (may be NULL; its prompt_id names the prompt in the
 * trace). (The public tide_engine_generate wraps the loop with requests,
 * text and counters.) */
int tide_engine_generate_ids(struct tide_engine *e, struct tide_decode *d, const int32_t *prompt,
                             int64_t n, const struct tide_gen_hooks *user,
                             const struct tide_engine_outputs *outputs,
                             struct tide_gen_result *result);

/* A generation of prompt[n] starts (the engine loop calls it at
 * admission): the dispatcher's trace (if any) records it as prompt_id,
 * joining a running batch when join, with its vector; the vector goes to the
 * policy (prompt_begin). */
int tide_engine_prompt_begin(struct tide_engine *e, const int32_t *prompt, int64_t n,
                             uint32_t prompt_id, bool join);

/* Telemetry for the following tide_engine_generate calls (the public one):
 * metrics lines and routing events. o is borrowed until replaced; NULL
 * stops. For `tide run`, whose outputs are files the CLI layer writes. */
void tide_engine_set_outputs(struct tide_engine *e, const struct tide_engine_outputs *o);

/* The header of a routing trace of this engine's model under decoder d
 * (NULL: the engine's own; strings borrowed from the engine and d).
 * TIDE_E_CONFIG when the model has no MoE layer. */
int tide_engine_trace_header(const struct tide_engine *e, const struct tide_decode *d,
                             struct tide_trace_header *h);

/* tide_engine_close (tide/engine.h) closes both kinds of engine: the model,
 * dispatcher, backends and tokenizer, then what tide_engine_open owns. */

/* Encode text (wrapped in the model's chat template when chat; needs the
 * model loaded) into ids; caller frees. */
int tide_engine_encode(const struct tide_engine *e, const char *text, bool chat, int32_t **ids,
                       size_t *n);

#endif
