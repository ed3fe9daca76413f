/* decoder-ltr: left-to-right block diffusion, built out of tree against an
 * installed tide (see README.md). A semi-autoregressive baseline for the
 * LLaDA2 family: the same canvas and KV cache as decoder-llada2, but every
 * step commits the LEFTMOST masked position of the block, greedily, so the
 * steps equal the tokens decoded.
 *
 * The canvas is the prompt followed by masks, in whole blocks of
 * [generation] block_length. The blocks the prompt covers entirely are
 * prefilled, one forward per block (rows NULL, logits NULL); decoding starts
 * at the block holding the prompt's tail. A step forwards the block, reads
 * the logits of its leftmost masked position and commits the argmax there
 * (the mask token left out, so every step commits a real token). With
 * [decoder-ltr] min_confidence > 0 the same step also commits every other
 * masked position of the block whose greedy probability is above it.
 *
 * Positions from P + gen_length on are never decoded (they are cut from the
 * output anyway), and since the decided part of the canvas is always a
 * prefix, generation ends as soon as that prefix holds EOS or a stop token:
 * the output is final there. A finished block is run once more for its final
 * K/V before the next block (its last step's K/V predate its commits), as
 * decoder-llada2 does.
 *
 * Only public headers: those of tide/ and the installed decoder-common/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder-common/canvas.h"
#include "decoder-common/params.h"
#include "decoder-common/probs.h"
#include "tide/decoder.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define LTR_NAME "decoder-ltr"

static const struct tide_option ltr_options[] = {
    {"min_confidence", TIDE_OPT_FLOAT, "0",
     "also commit, in the same step, every other masked position of the block whose greedy "
     "probability is above this; 0 = exactly one token per step (the leftmost)",
     NULL, "[0,1]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

struct tide_decoder {
    struct dc_params p;
    struct dc_tokens tok;
    double min_confidence;
    int V;           /* vocabulary */
    int64_t max_ctx; /* the model's positions */
};

static void ltr_destroy(struct tide_decoder *d)
{
    free(d);
}

/* The [generation] settings this loop cannot honour, each refused naming
 * its key. TIDE_OK or TIDE_E_CONFIG (logged). */
static int ltr_check(const struct tide_decoder *d, const struct tide_model_info *info)
{
    const struct dc_params *p = &d->p;
    const int attention = TIDE_INFO_HAS(info, attention) ? info->attention : TIDE_ATTN_BLOCK_CAUSAL;
    const char *arch = info->arch ? info->arch : "?";
    if (attention != TIDE_ATTN_BLOCK_CAUSAL) {
        tide_error("[generation] decoder = ltr needs block-causal attention (it keeps finished "
                   "blocks in the KV cache), but model %s attends to the full sequence; use "
                   "another decoder",
                   arch);
        return TIDE_E_CONFIG;
    }
    if (p->recompute) {
        tide_error("[generation] recompute = true: decoder ltr always decodes on the exact KV "
                   "cache; set recompute = false");
        return TIDE_E_CONFIG;
    }
    if (p->temperature > 0) {
        tide_error("[generation] temperature = %g: decoder ltr is greedy; set temperature = 0",
                   p->temperature);
        return TIDE_E_CONFIG;
    }
    if (p->top_k > 0 || p->top_p < 1.0) {
        tide_error("[generation] top_k = %d, top_p = %g: decoder ltr is greedy over the whole "
                   "vocabulary; leave top_k = 0 and top_p = 1",
                   p->top_k, p->top_p);
        return TIDE_E_CONFIG;
    }
    if (p->cfg_scale != 0) {
        tide_error("[generation] cfg_scale = %g: decoder ltr has no classifier-free guidance",
                   p->cfg_scale);
        return TIDE_E_CONFIG;
    }
    if (p->prefix_cache || p->remask_random) {
        tide_error("[generation] %s: an option of decoder = llada, not of decoder ltr",
                   p->prefix_cache ? "prefix_cache = true" : "remasking = random");
        return TIDE_E_CONFIG;
    }
    if (p->block < 1 || p->gen_length < 1) {
        tide_error("[generation] block_length (%d) and gen_length (%lld) must be >= 1", p->block,
                   (long long)p->gen_length);
        return TIDE_E_CONFIG;
    }
    if (d->V < 2) {
        tide_error("model %s: a vocabulary of %d tokens leaves nothing besides the mask token",
                   arch, d->V);
        return TIDE_E_CONFIG;
    }
    return dc_check_no_mode(p, "ltr");
}

static int ltr_create(const struct tide_decoder_args *a, struct tide_decoder **out)
{
    *out = NULL;
    if (a->size < sizeof *a || !a->gen || !a->info) {
        tide_error("%s: decoder args of %u bytes, expected %zu", LTR_NAME, a->size, sizeof *a);
        return TIDE_E_INVAL;
    }
    struct tide_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return TIDE_E_NOMEM;
    dc_params_read(a->gen, &d->p);
    dc_tokens_from(a, &d->tok);
    /* No section at all (a host that registered none): the table's default. */
    d->min_confidence = a->opts ? tide_opts_float(a->opts, "min_confidence") : 0.0;
    d->V = a->info->vocab_size;
    d->max_ctx = a->info->max_ctx;
    const int rc = ltr_check(d, a->info);
    if (rc != TIDE_OK) {
        ltr_destroy(d);
        return rc;
    }
    *out = d;
    return TIDE_OK;
}

/* The canvas: the prompt plus gen_length, rounded up to whole blocks. */
static int64_t ltr_ctx(const struct tide_decoder *d, int64_t P)
{
    const int64_t L = d->p.block;
    return (P + d->p.gen_length + L - 1) / L * L;
}

static int ltr_plan(const struct tide_decoder *d, int64_t P, struct tide_decoder_plan *out)
{
    const int64_t ctx = ltr_ctx(d, P);
    const int rc = dc_check_prompt(P, ctx, &d->p, d->max_ctx);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_decoder_plan pl = {
        .size = sizeof pl,
        .n_ctx = ctx,
        .max_tokens = d->p.block, /* every forward spans one block */
        .max_output = d->p.gen_length,
        .blocks = (int)(ctx / d->p.block - P / d->p.block),
        .block_length = d->p.block,
        /* One token per step: a block takes at most block_length steps. */
        .max_steps = d->p.block,
        .nominal_steps = d->p.block,
    };
    /* The caller's struct may be older (shorter) than ours. */
    const uint32_t n = out->size < sizeof pl ? out->size : (uint32_t)sizeof pl;
    memcpy(out, &pl, n);
    out->size = n;
    return TIDE_OK;
}

/* Scratch of one run, [L] each. */
struct ltr_scratch {
    int32_t *mpos;     /* the step's masked positions, block-relative, increasing */
    const float **row; /* their logits rows */
    float *logits;     /* [L][V] */
};

static void ltr_scratch_free(struct ltr_scratch *s)
{
    free(s->mpos);
    free(s->row);
    free(s->logits);
}

/* The first masked position in [from, to), or to. */
static int64_t ltr_first_mask(const int32_t *canvas, int64_t from, int64_t to, int32_t mask)
{
    while (from < to && canvas[from] != mask)
        from++;
    return from;
}

/* One step on block [b0, b0 + L): forward, the events, the commits. `left`
 * is the block's leftmost masked position (absolute), hi the end of the
 * positions it decodes. *committed gets the positions given a token. */
static int ltr_step(struct tide_decoder *d, const struct tide_decoder_host *h, int32_t *canvas,
                    int64_t b, int64_t b0, int64_t left, int64_t hi, int s, struct ltr_scratch *sc,
                    int *committed)
{
    const int L = d->p.block, V = d->V;
    const int32_t mask = d->tok.mask;
    /* The rows read: the leftmost mask, and with min_confidence every mask. */
    int n = 0;
    for (int64_t i = left; i < hi; i++)
        if (canvas[i] == mask && (i == left || d->min_confidence > 0))
            sc->mpos[n++] = (int32_t)(i - b0);
    int rc;
    if (h->block_logits) {
        rc = h->forward(h->user, canvas + b0, L, b0, NULL, 0, sc->logits);
        for (int j = 0; j < n; j++)
            sc->row[j] = sc->logits + (size_t)sc->mpos[j] * (size_t)V;
    } else {
        rc = h->forward(h->user, canvas + b0, L, b0, sc->mpos, n, sc->logits);
        for (int j = 0; j < n; j++)
            sc->row[j] = sc->logits + (size_t)j * (size_t)V;
    }
    if (rc != TIDE_OK)
        return rc;
    if (h->block_logits)
        h->step_logits(h->user, b, s, sc->logits, L, V);
    h->step_rows(h->user, b, s, n, sc->mpos, sc->row, V);
    /* Greedy, the mask token left out: every step decides its leftmost
     * position for good. The others only when the model is sure enough; all
     * picks read this step's logits, so the commits do not depend on order. */
    int c = 0;
    for (int j = 0; j < n; j++) {
        int32_t id;
        double prob;
        dc_greedy_pick(sc->row[j], V, mask, &id, &prob);
        if (j == 0 || prob > d->min_confidence) {
            canvas[b0 + sc->mpos[j]] = id;
            c++;
        }
    }
    *committed = c;
    return TIDE_OK;
}

static int ltr_run(struct tide_decoder *d, const struct tide_decoder_host *h, const int32_t *prompt,
                   int64_t P, struct tide_decoder_result *out)
{
    out->n = out->steps = out->edits = 0;
    out->blocks = 0;
    out->stopped = false;
    /* Every slot used below is in version 1 of the host; a host that says
     * otherwise is not one this plugin can serve. */
    if (!TIDE_DECODER_HAS(h, struct tide_decoder_host, block_end)) {
        tide_error("%s: the engine's decoder host is %u bytes, older than version 1", LTR_NAME,
                   h->size);
        return TIDE_E_INVAL;
    }
    const struct dc_tokens *tok = &d->tok;
    const int L = d->p.block, V = d->V;
    const int64_t G = d->p.gen_length, total = ltr_ctx(d, P), nb = total / L, first = P / L;
    const int64_t lim = P + G; /* positions from here on are never output */
    int32_t *canvas = malloc(sizeof *canvas * (size_t)total);
    struct ltr_scratch sc = {
        .mpos = malloc(sizeof *sc.mpos * (size_t)L),
        .row = malloc(sizeof *sc.row * (size_t)L),
        .logits = malloc(sizeof *sc.logits * (size_t)L * (size_t)V),
    };
    int rc = TIDE_OK;
    if (!canvas || !sc.mpos || !sc.row || !sc.logits) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    for (int64_t i = 0; i < total; i++)
        canvas[i] = i < P ? prompt[i] : tok->mask;
    /* The blocks the prompt fills are never decoded: prefill their K/V. */
    for (int64_t b = 0; b < first; b++)
        if ((rc = h->forward(h->user, canvas + b * L, L, b * L, NULL, 0, NULL)) != TIDE_OK)
            goto done;
    int64_t decided = P; /* the canvas is final on [P, decided) */
    bool stop = false;
    for (int64_t b = first; b < nb && !stop; b++) {
        const int64_t b0 = b * L, hi = b0 + L < lim ? b0 + L : lim;
        const int gb = (int)(b - first); /* generated block */
        h->block_begin(h->user, gb, b == first);
        for (int s = 0; decided < hi && !stop; s++) {
            if ((rc = h->step_begin(h->user, gb, s)) != TIDE_OK)
                goto done;
            int committed;
            rc = ltr_step(d, h, canvas, b, b0, decided, hi, s, &sc, &committed);
            if (rc != TIDE_OK)
                goto done;
            out->steps++;
            decided = ltr_first_mask(canvas, decided, hi, tok->mask);
            int remaining = 0;
            for (int64_t i = decided; i < hi; i++)
                remaining += canvas[i] == tok->mask;
            const struct tide_decoder_step ev = {
                .size = sizeof ev,
                .block = gb,
                .step = s,
                .committed = committed,
                .remaining = remaining,
            };
            h->step_end(h->user, &ev);
            /* The decided prefix holds EOS: the output cannot change any more. */
            stop = dc_find_stop(canvas, P, decided, tok) >= 0;
        }
        out->blocks++;
        stop = stop || hi >= lim;
        /* The last step's K/V predate its commits: store the final ones when
         * another block will attend to them. */
        if (!stop && (rc = h->forward(h->user, canvas + b0, L, b0, NULL, 0, NULL)) != TIDE_OK)
            goto done;
        bool st;
        h->block_end(h->user, gb, canvas + P, dc_output_len(canvas, P, G, decided, tok, &st));
    }
    out->n = dc_output_len(canvas, P, G, decided, tok, &out->stopped);
    memcpy(out->ids, canvas + P, sizeof *out->ids * (size_t)out->n);
done:
    free(canvas);
    ltr_scratch_free(&sc);
    return rc;
}

static void ltr_describe(const struct tide_decoder *d, char *buf, size_t len)
{
    snprintf(buf, len,
             "gen_length=%lld block_length=%d order=leftmost greedy=true min_confidence=%g "
             "stop_tokens=%d",
             (long long)d->p.gen_length, d->p.block, d->min_confidence, d->tok.n_stop);
}

static const struct tide_decoder_ops ltr_ops = {
    .size = sizeof(struct tide_decoder_ops),
    .create = ltr_create,
    .destroy = ltr_destroy,
    .plan = ltr_plan,
    .run = ltr_run,
    .describe = ltr_describe,
};

static const struct tide_plugin_desc ltr_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_DECODER,
    .name = LTR_NAME,
    .version = "0.1.0",
    .summary = "example built out of tree: left-to-right block diffusion, one greedy token per "
               "step (the block's leftmost mask) on the exact KV cache",
    .ops = &ltr_ops,
    .options = ltr_options,
    .probe = NULL,
};

/* The plugin's single exported symbol: the descriptor for this ABI, else NULL. */
TIDE_PLUGIN_DEFINE(ltr_desc)
