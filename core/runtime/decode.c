/* The engine's side of a decoder plugin (decode.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decode.h"
#include "finite.h"
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

static double decode_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The decoder plugin called `name`: "decoder-NAME" or NAME itself. */
static const struct tide_plugin *decode_find(const struct tide_plugin_set *set, const char *name)
{
    char full[256];
    snprintf(full, sizeof full, DECODE_PREFIX "%s", name);
    const struct tide_plugin *p = tide_plugins_find(set, full);
    if (!p || p->desc->kind != TIDE_PLUGIN_DECODER)
        p = tide_plugins_find(set, name);
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
    if (out->n_ctx < 1 || out->max_tokens < 1 || out->max_tokens > out->n_ctx ||
        out->max_output < 0 || out->block_length < 1) {
        tide_error("decoder %s: its plan is inconsistent (n_ctx %lld, max_tokens %lld, "
                   "max_output %lld, block_length %d)",
                   d->pl->desc->name, (long long)out->n_ctx, (long long)out->max_tokens,
                   (long long)out->max_output, out->block_length);
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

/* ---- the host a decoder runs against ------------------------------------ */

struct decode_host {
    const struct tide_model_ops *ops;
    struct tide_model *m;
    const struct tide_gen_hooks *hooks;
    int V;
    int64_t forwards;
    int block, step; /* the last events, for messages */
    bool in_step;
    double t0, prefill;
    bool begun; /* a block has begun */
    float *all; /* forward_rows fallback: every row, [cap_all] floats */
    size_t cap_all;
    const float **rowp; /* [cap_rows] pointers for the NaN check */
    int32_t *rowpos;
    size_t cap_rows;
};

static int dh_grow_rows(struct decode_host *h, size_t n)
{
    if (n <= h->cap_rows)
        return TIDE_OK;
    const float **p = realloc(h->rowp, sizeof *p * n);
    if (!p)
        return TIDE_E_NOMEM;
    h->rowp = p;
    int32_t *q = realloc(h->rowpos, sizeof *q * n);
    if (!q)
        return TIDE_E_NOMEM;
    h->rowpos = q;
    h->cap_rows = n;
    return TIDE_OK;
}

static int dh_forward(void *user, const int32_t *ids, int64_t n, int64_t pos0, const int32_t *rows,
                      int64_t n_rows, float *logits)
{
    struct decode_host *h = user;
    const size_t V = (size_t)h->V;
    int rc;
    if (h->hooks && h->hooks->forward) {
        rc = h->hooks->forward(h->hooks->user, ids, n, pos0, rows, n_rows, logits);
        n_rows = !logits ? 0 : rows ? n_rows : n;
    } else if (!logits) {
        rc = h->ops->forward(h->m, ids, n, pos0, NULL);
        n_rows = 0;
    } else if (!rows) {
        rc = h->ops->forward(h->m, ids, n, pos0, logits);
        n_rows = n;
    } else if (TIDE_OPS_HAS(h->ops, forward_rows)) {
        rc = h->ops->forward_rows(h->m, ids, n, pos0, rows, n_rows, logits);
    } else {
        /* The model computes every row; hand back those asked for. */
        if ((size_t)n * V > h->cap_all) {
            float *a = realloc(h->all, sizeof *a * (size_t)n * V);
            if (!a)
                return TIDE_E_NOMEM;
            h->all = a;
            h->cap_all = (size_t)n * V;
        }
        rc = h->ops->forward(h->m, ids, n, pos0, h->all);
        for (int64_t i = 0; rc == TIDE_OK && i < n_rows; i++)
            memcpy(logits + (size_t)i * V, h->all + (size_t)rows[i] * V, sizeof *logits * V);
    }
    if (rc != TIDE_OK)
        return rc;
    h->forwards++;
    if (!n_rows)
        return TIDE_OK;
    if ((rc = dh_grow_rows(h, (size_t)n_rows)) != TIDE_OK)
        return rc;
    for (int64_t i = 0; i < n_rows; i++) {
        h->rowp[i] = logits + (size_t)i * V;
        h->rowpos[i] = (int32_t)(pos0 + (rows ? rows[i] : i));
    }
    return tide_logits_check_rows(h->rowp, h->rowpos, (int)n_rows, h->V, h->block, h->step);
}

static void dh_block_begin(void *user, int block, bool first)
{
    struct decode_host *h = user;
    if (!h->begun) {
        h->prefill = decode_now() - h->t0;
        h->begun = true;
    }
    h->block = block;
    h->step = 0;
    if (h->hooks && h->hooks->block_begin)
        h->hooks->block_begin(h->hooks->user, block, first);
}

static int dh_step_begin(void *user, int block, int step)
{
    struct decode_host *h = user;
    if (tide_stop_requested())
        return TIDE_E_INTERRUPTED;
    h->block = block;
    h->step = step;
    if (h->hooks && h->hooks->step_begin)
        return h->hooks->step_begin(h->hooks->user, block, step);
    return TIDE_OK;
}

static void dh_step_logits(void *user, int64_t block, int step, const float *logits, int rows,
                           int vocab)
{
    struct decode_host *h = user;
    if (h->hooks && h->hooks->step_logits)
        h->hooks->step_logits(h->hooks->user, block, step, logits, rows, vocab);
}

static void dh_step_rows(void *user, int64_t block, int step, int n, const int32_t *pos,
                         const float *const *rows, int vocab)
{
    struct decode_host *h = user;
    if (h->hooks && h->hooks->step_rows)
        h->hooks->step_rows(h->hooks->user, block, step, n, pos, rows, vocab);
}

static void dh_step_end(void *user, const struct tide_decoder_step *s)
{
    struct decode_host *h = user;
    /* A decoder built against an older header reports fewer fields. */
    struct tide_decoder_step ev = {0};
    memcpy(&ev, s, s->size < sizeof ev ? s->size : sizeof ev);
    ev.size = sizeof ev;
    if (h->hooks && h->hooks->step_end)
        h->hooks->step_end(h->hooks->user, &ev);
}

static void dh_block_end(void *user, int block, const int32_t *gen, int64_t n)
{
    struct decode_host *h = user;
    if (h->hooks && h->hooks->block_end)
        h->hooks->block_end(h->hooks->user, block, gen, n);
}

int tide_decode_run(struct tide_decode *d, const struct tide_model_ops *ops, struct tide_model *m,
                    const int32_t *prompt, int64_t P, const struct tide_gen_hooks *hooks,
                    struct tide_gen_result *out)
{
    memset(out, 0, sizeof *out);
    const struct tide_model_info *info = ops->info(m);
    struct tide_decoder_plan plan;
    int rc = tide_decode_plan(d, P, info->max_ctx, &plan);
    if (rc != TIDE_OK)
        return rc;
    struct decode_host h = {
        .ops = ops,
        .m = m,
        .hooks = hooks,
        .V = info->vocab_size,
        .t0 = decode_now(),
    };
    const struct tide_decoder_host host = {
        .size = sizeof host,
        .user = &h,
        .block_logits = d->all_logits || (hooks && hooks->step_logits),
        .forward = dh_forward,
        .block_begin = dh_block_begin,
        .step_begin = dh_step_begin,
        .step_logits = dh_step_logits,
        .step_rows = dh_step_rows,
        .step_end = dh_step_end,
        .block_end = dh_block_end,
    };
    struct tide_decoder_result res = {
        .size = sizeof res,
        .ids = malloc(sizeof *res.ids * (size_t)(plan.max_output ? plan.max_output : 1)),
    };
    if (!res.ids)
        return TIDE_E_NOMEM;
    rc = d->ops->run(d->dec, &host, prompt, P, &res);
    free(h.all);
    free(h.rowp);
    free(h.rowpos);
    if (rc == TIDE_OK && (res.n < 0 || res.n > plan.max_output)) {
        tide_error("decoder %s returned %lld tokens, more than its plan's %lld", d->pl->desc->name,
                   (long long)res.n, (long long)plan.max_output);
        rc = TIDE_E_INVAL;
    }
    if (rc != TIDE_OK) {
        free(res.ids);
        return rc;
    }
    *out = (struct tide_gen_result){
        .ids = res.ids,
        .n = res.n,
        .forwards = h.forwards,
        .steps = res.steps,
        .blocks = res.blocks,
        .stopped = res.stopped,
        .edits = res.edits,
        .seconds = decode_now() - h.t0,
        .prefill_seconds = h.begun ? h.prefill : decode_now() - h.t0,
    };
    return TIDE_OK;
}
