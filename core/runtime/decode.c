/* The engine's side of a decoder plugin (decode.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define DECODE_PREFIX "decoder-"

static volatile sig_atomic_t decode_stop;

void tide_request_stop(void)
{
    decode_stop = 1;
}

bool tide_stop_requested(void)
{
    return decode_stop != 0;
}

/* The decoder plugin called `name`: "decoder-NAME" or NAME itself. */
static const struct tide_plugin *decode_find(const struct tide_plugin_set *set, const char *name)
{
    const struct tide_plugin *p = tide_plugins_resolve(set, name, TIDE_PLUGIN_DECODER);
    return p && p->desc->kind == TIDE_PLUGIN_DECODER ? p : NULL;
}

static const char *decode_short(const char *plugin_name)
{
    size_t n = strlen(DECODE_PREFIX);
    return strncmp(plugin_name, DECODE_PREFIX, n) ? plugin_name : plugin_name + n;
}

static int decode_name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "auto|<model's>|<the others, sorted>" into buf. */
static void decode_choices(const struct tide_plugin_set *set, const char *model_wants, char *buf,
                           size_t len)
{
    const char *names[64];
    int n = 0;
    for (int i = 0; i < set->n && n < 64; i++)
        if (set->items[i].desc->kind == TIDE_PLUGIN_DECODER)
            names[n++] = decode_short(set->items[i].desc->name);
    qsort(names, (size_t)n, sizeof *names, decode_name_cmp);
    size_t at = (size_t)snprintf(buf, len, "auto");
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n && at < len; i++) {
            const bool mine = model_wants && !strcmp(names[i], model_wants);
            if (mine == (pass == 0))
                at += (size_t)snprintf(buf + at, len - at, "|%s", names[i]);
        }
}

const struct tide_plugin *tide_decode_resolve(const struct tide_plugin_set *set, const char *want,
                                              const char *model_wants, const char *arch)
{
    char choices[1024];
    const bool is_auto = !strcmp(want, "auto");
    const char *name = is_auto ? model_wants : want;
    if (!name) {
        decode_choices(set, NULL, choices, sizeof choices);
        tide_error("[generation] decoder = auto: model %s names no decoder; set [generation] "
                   "decoder to one of %s",
                   arch ? arch : "?", choices);
        return NULL;
    }
    if (strchr(name, '/') || strchr(name, '\\')) {
        tide_error("[generation] decoder = %s: name a decoder plugin, not a path", name);
        return NULL;
    }
    const struct tide_plugin *p = decode_find(set, name);
    if (!p) {
        decode_choices(set, model_wants, choices, sizeof choices);
        if (is_auto)
            tide_error("[generation] decoder = auto: model %s asks for decoder '%s', which no "
                       "decoder plugin provides (found: %s; see `tide plugins`)",
                       arch ? arch : "?", name, choices);
        else
            tide_error("[generation] decoder = '%s': expected one of %s (decoder plugins found; "
                       "see `tide plugins`)",
                       name, choices);
        return NULL;
    }
    if (!p->usable) {
        tide_error("[generation] decoder = %s: the plugin cannot run here: %s", name, p->why);
        return NULL;
    }
    return p;
}

int tide_decode_open(struct tide_decode *d, const struct tide_plugin *pl,
                     const struct tide_config *cfg, const struct tide_model_info *info,
                     const struct tide_gen_tokens *tok)
{
    memset(d, 0, sizeof *d);
    const struct tide_opts *gen = tide_config_section(cfg, "generation");
    const struct tide_decoder_args a = {
        .size = sizeof a,
        .gen = gen,
        .opts = tide_config_section(cfg, pl->desc->name),
        .info = info,
        .mask = tok->mask,
        .eos = tok->eos,
        .n_stop = tok->n_stop,
        .stop = tok->stop,
    };
    d->pl = pl;
    d->ops = pl->desc->ops;
    d->name = decode_short(pl->desc->name);
    d->all_logits = tide_opts_bool(gen, "all_logits");
    int rc = d->ops->create(&a, &d->dec);
    if (rc != TIDE_OK) {
        d->dec = NULL;
        return rc;
    }
    if (TIDE_OPS_HAS(d->ops, describe))
        d->ops->describe(d->dec, d->settings, sizeof d->settings);
    return TIDE_OK;
}

void tide_decode_close(struct tide_decode *d)
{
    if (d->dec)
        d->ops->destroy(d->dec);
    d->dec = NULL;
}

int tide_decode_plan(const struct tide_decode *d, int64_t prompt_len, int64_t max_ctx,
                     struct tide_decoder_plan *out)
{
    memset(out, 0, sizeof *out);
    out->size = sizeof *out;
    if (prompt_len < 1) {
        tide_error("generation: the prompt is empty (it must hold at least one token)");
        return TIDE_E_RANGE;
    }
    int rc = d->ops->plan(d->dec, prompt_len, out);
    if (rc != TIDE_OK)
        return rc;
    if (out->slots < 1)
        out->slots = 1;
    if (out->gen_multiple < 1)
        out->gen_multiple = 1;
    if (out->n_ctx < 1 || out->max_tokens < 1 || out->max_tokens > out->n_ctx ||
        out->max_output < 0 || out->block_length < 1 || out->slots > TIDE_DECODER_MAX_SPANS) {
        tide_error("decoder %s: its plan is inconsistent (n_ctx %lld, max_tokens %lld, "
                   "max_output %lld, block_length %d, slots %d)",
                   d->pl->desc->name, (long long)out->n_ctx, (long long)out->max_tokens,
                   (long long)out->max_output, out->block_length, out->slots);
        return TIDE_E_INVAL;
    }
    if (out->n_ctx > max_ctx) {
        tide_error("generation: decoder %s needs %lld positions for a prompt of %lld tokens but "
                   "the model's context is %lld",
                   d->pl->desc->name, (long long)out->n_ctx, (long long)prompt_len,
                   (long long)max_ctx);
        return TIDE_E_RANGE;
    }
    return TIDE_OK;
}
