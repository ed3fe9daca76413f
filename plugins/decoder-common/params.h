/* decoder-common: the [generation] keys every decoder reads, and the checks
 * they share.
 *
 * Which keys a decoder honours is its own business: each reads this struct
 * and refuses what it cannot do (naming the key); keys only one decoder has
 * live in that decoder's own section ([decoder-NAME]). */
#ifndef DECODER_COMMON_PARAMS_H
#define DECODER_COMMON_PARAMS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tide/log.h"
#include "tide/option.h"
#include "tide/status.h"

struct dc_params {
    int64_t gen_length;  /* G: most tokens returned after the prompt */
    int block;           /* L: block length */
    int steps;           /* denoising steps ([generation] steps, before any cap) */
    int minimal_topk;    /* steps are capped at gen_length / minimal_topk (>= 1) */
    double threshold;    /* commit every masked position whose confidence is > this */
    double temperature;  /* 0 = argmax; logits are divided by it when > 0 and != 1 */
    int top_k;           /* 0 = off; ties with the k-th logit are kept */
    double top_p;        /* 1 = off */
    uint64_t seed;       /* sampling RNG (temperature > 0) */
    bool eos_early_stop; /* the official eos_early_stop */
    bool mask_in_argmax; /* the mask token competes in argmax/softmax (official) */
    bool recompute;      /* recompute the whole prefix each step (no KV cache) */
    double cfg_scale;    /* classifier-free guidance; 0 = off */
    bool remask_random;  /* remasking = random (else low_confidence) */
    bool prefix_cache;   /* APPROXIMATE prefix cache */
    const char *mode;    /* a named preset of the decoder; "" = none (owned by the config) */
};

static inline void dc_params_read(const struct tide_opts *g, struct dc_params *p)
{
    *p = (struct dc_params){
        .gen_length = tide_opts_int(g, "gen_length"),
        .block = (int)tide_opts_int(g, "block_length"),
        .steps = (int)tide_opts_int(g, "steps"),
        .minimal_topk = (int)tide_opts_int(g, "minimal_topk"),
        .threshold = tide_opts_float(g, "threshold"),
        .temperature = tide_opts_float(g, "temperature"),
        .top_k = (int)tide_opts_int(g, "top_k"),
        .top_p = tide_opts_float(g, "top_p"),
        .seed = (uint64_t)tide_opts_int(g, "seed"),
        .eos_early_stop = tide_opts_bool(g, "eos_early_stop"),
        .mask_in_argmax = tide_opts_bool(g, "mask_in_argmax"),
        .recompute = tide_opts_bool(g, "recompute"),
        .cfg_scale = tide_opts_float(g, "cfg_scale"),
        .remask_random = !strcmp(tide_opts_str(g, "remasking"), "random"),
        .prefix_cache = tide_opts_bool(g, "prefix_cache"),
        .mode = tide_opts_str(g, "mode"),
    };
}

/* The ranges every decoder needs (the option table checks most already; a
 * section built by other means is checked here). TIDE_E_CONFIG, logged. */
static inline int dc_check_common(const struct dc_params *p)
{
    if (p->block < 1 || p->steps < 1 || p->gen_length < 1 || p->minimal_topk < 1 ||
        !(p->threshold > 0) || p->threshold > 1) {
        tide_error("generation: block_length, steps, gen_length and minimal_topk must be >= 1 "
                   "and threshold in (0,1]");
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

/* A decoder without named modes refuses [generation] mode. */
static inline int dc_check_no_mode(const struct dc_params *p, const char *decoder)
{
    if (p->mode && *p->mode) {
        tide_error("[generation] mode = '%s': decoder %s has no named modes (leave mode empty)",
                   p->mode, decoder);
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

/* The prompt against the canvas it needs: TIDE_E_RANGE (logged) when `need`
 * positions exceed the model's context. P = 0 (a plan of the settings
 * alone) is never refused. */
static inline int dc_check_prompt(int64_t P, int64_t need, const struct dc_params *p,
                                  int64_t max_ctx)
{
    if (P > 0 && need > max_ctx) {
        tide_error("generation: the prompt (%lld tokens) plus gen_length (%lld), in blocks of "
                   "%d, needs %lld positions but the model's context is %lld",
                   (long long)P, (long long)p->gen_length, p->block, (long long)need,
                   (long long)max_ctx);
        return TIDE_E_RANGE;
    }
    return TIDE_OK;
}

/* The sampler of the settings (sample.h), for a vocabulary of V. */
#define DC_SAMPLER_OF(p, V, mask_id)                                                               \
    ((struct dc_sampler){                                                                          \
        .temperature = (p)->temperature,                                                           \
        .greedy = !((p)->temperature > 0),                                                         \
        .top_k = (p)->top_k > 0 && (p)->top_k < (V) ? (p)->top_k : 0,                              \
        .top_p = (p)->top_p,                                                                       \
        .skip = (p)->mask_in_argmax ? -1 : (mask_id),                                              \
        .plain = !((p)->temperature > 0) && !((p)->top_k > 0 && (p)->top_k < (V)) &&               \
                 !((p)->top_p < 1.0),                                                              \
    })

#endif
