/* decoder-llada2: block diffusion as the official LLaDA2.0 generate() does
 * it (modeling_llada2_moe.py). docs/decoding.md lists every rule with the
 * line it follows; the rules are named R1..R17 there and below.
 *
 * The canvas is the prompt followed by masks, in whole blocks (R3, R4).
 * Decoding starts at the block holding the prompt's tail (R5); each block runs
 * up to min(steps, gen_length / minimal_topk) denoising steps (R1) on one
 * transfer schedule (R2), ends early when no mask is left before a step (R7),
 * and commits by threshold or by schedule (R10, R11). Generation stops after a
 * block holding EOS (R14), or inside one with eos_early_stop (R13); the output
 * is at most gen_length tokens, cut after the first EOS (R17).
 *
 * Where TIDE departs on purpose (docs/decoding.md, "Departures"): finished
 * blocks live in the model's KV cache, exact under the block-causal mask, so
 * the whole prompt blocks are prefilled and a finished block is run once more
 * for its final K/V when another block follows (recompute = true runs exactly
 * the official forwards instead); temperature 0 is argmax rather than a draw;
 * draws use TIDE's own seeded RNG; stop_tokens and mask_in_argmax = false are
 * options, off by default.
 *
 * The per-position rule (dc_sample) and the per-step rule (dc_commit_count)
 * live in decoder-common/sample.h, which decoder-llada21 shares. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder-common/blocks.h"
#include "decoder-common/canvas.h"
#include "decoder-common/params.h"
#include "decoder-common/sample.h"
#include "tide/decoder.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define L2D_NAME "decoder-llada2"

struct tide_decoder {
    struct dc_params p;
    struct dc_tokens tok;
    int V;           /* vocabulary */
    int64_t max_ctx; /* the model's positions */
    int steps;       /* R1: steps after the cap */
};

/* R1: steps = min(steps, gen_length // minimal_topk) */
static int l2d_steps(const struct dc_params *p)
{
    const int64_t cap = p->minimal_topk > 0 ? p->gen_length / p->minimal_topk : 0;
    return cap < p->steps ? (int)cap : p->steps;
}

static void l2d_destroy(struct tide_decoder *d)
{
    free(d);
}

static int l2d_create(const struct tide_decoder_args *a, struct tide_decoder **out)
{
    *out = NULL;
    struct tide_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return TIDE_E_NOMEM;
    dc_params_read(a->gen, &d->p);
    dc_tokens_from(a, &d->tok);
    d->V = a->info->vocab_size;
    d->max_ctx = a->info->max_ctx;
    d->steps = l2d_steps(&d->p);
    const struct tide_model_info *info = a->info;
    const int attention = TIDE_INFO_HAS(info, attention) ? info->attention : TIDE_ATTN_BLOCK_CAUSAL;
    int rc = TIDE_OK;
    if (attention != TIDE_ATTN_BLOCK_CAUSAL && attention != TIDE_ATTN_FULL) {
        tide_error("model %s: unknown attention kind %d", info->arch ? info->arch : "?", attention);
        rc = TIDE_E_CONFIG;
    } else if (attention == TIDE_ATTN_FULL && !d->p.recompute) {
        /* The KV cache is exact only under the block-causal mask; on a
         * full-attention model it is refused, never approximated. */
        tide_error("[generation] decoder = llada2 with the KV cache needs block-causal "
                   "attention, but model %s attends to the full sequence (the cache would be "
                   "inexact); set [generation] recompute = true, or decoder = llada",
                   info->arch ? info->arch : "?");
        rc = TIDE_E_CONFIG;
    } else if ((rc = dc_check_common(&d->p)) != TIDE_OK ||
               (rc = dc_check_no_mode(&d->p, "llada2")) != TIDE_OK) {
    } else if (d->p.prefix_cache) {
        tide_error("[generation] prefix_cache is an option of decoder = llada; decoder llada2 "
                   "caches exactly (recompute = false)");
        rc = TIDE_E_CONFIG;
    } else if (d->steps < 1) {
        /* The official code would run no step and return gen_length mask tokens. */
        tide_error("generation: minimal_topk (%d) is larger than gen_length (%lld), so "
                   "steps = gen_length / minimal_topk is 0 and nothing would be decoded",
                   d->p.minimal_topk, (long long)d->p.gen_length);
        rc = TIDE_E_CONFIG;
    }
    if (rc != TIDE_OK) {
        l2d_destroy(d);
        return rc;
    }
    *out = d;
    return TIDE_OK;
}

/* R3: the prompt plus gen_length, rounded up to whole blocks (dc_blocks_ctx);
 * with the cache a forward spans a block, with recompute the window. */
static int l2d_plan(const struct tide_decoder *d, int64_t P, struct tide_decoder_plan *out)
{
    return dc_blocks_plan(&d->p, d->max_ctx, P, d->steps, d->steps, TIDE_STEPS_PER_BLOCK, out);
}

/* R13: after a step that committed EOS, with eos_early_stop: the first EOS of
 * the window [0, end) -- the official code searches from position 0, prompt
 * included; extra stop tokens count from the prompt's end -- provided no mask
 * lies between the prompt's end and it. Returns that position, or -1. */
static int64_t l2d_early_stop_at(const int32_t *canvas, int64_t P, int64_t end,
                                 const struct dc_tokens *t)
{
    int64_t e = -1;
    for (int64_t i = 0; i < end && e < 0; i++)
        if (canvas[i] == t->eos || (i >= P && dc_is_stop(t, canvas[i])))
            e = i;
    for (int64_t i = P; e >= 0 && i < e; i++)
        if (canvas[i] == t->mask)
            return -1;
    return e;
}

/* One generation: the official loop's variables, kept between forwards. */
struct tide_decoder_seq {
    const struct tide_decoder *d;
    const struct tide_decoder_host *h;
    struct dc_sampler sp;
    struct dc_canvas c;  /* R4: the canvas and where the loop stands */
    float *logits;       /* [rows, V]: a step's forward */
    struct dc_rows rs;   /* a step's picks */
    struct dc_pos *cand; /* [L] */
    int32_t *x0;         /* [L] */
    int32_t *mpos;       /* [L] the step's masked positions (block-relative) */
    int32_t *span;       /* [L] their rows in the forward */
    const float **row;   /* [L] their logits */
    struct dc_rng rng;
    int s;         /* the block's next step */
    int n_cand;    /* the posted step's candidates */
    bool stop;     /* R13 or R14 ended generation */
    bool warned;   /* the masks-left warning was given */
    int64_t n_out; /* set by R13 */
    int64_t end;   /* end of the decoded part of the canvas */
    int64_t steps; /* result */
    int blocks;
    bool stopped;
};

static int l2d_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out);

static int l2d_begin(struct tide_decoder *d, const struct tide_decoder_host *h,
                     const int32_t *prompt, int64_t P, struct tide_decoder_seq **out)
{
    *out = NULL;
    const struct dc_params *p = &d->p;
    const int L = p->block, V = d->V;
    struct tide_decoder_seq *q = calloc(1, sizeof *q);
    if (!q)
        return TIDE_E_NOMEM;
    q->d = d;
    q->h = h;
    q->sp = DC_SAMPLER_OF(p, V, d->tok.mask);
    /* R4: the prompt, then masks to the end of the last block. */
    const int64_t room =
        TIDE_DECODER_HAS(h, struct tide_decoder_host, context_room) ? h->context_room : 0;
    const int c_rc = dc_canvas_init(&q->c, p, prompt, P, d->tok.mask, room);
    const int64_t rows = p->recompute ? q->c.cap : L;
    q->logits = malloc(sizeof *q->logits * (size_t)rows * (size_t)V);
    const int sc_rc = dc_rows_init(&q->rs, &q->sp, V, L);
    q->cand = malloc(sizeof *q->cand * (size_t)L);
    q->x0 = malloc(sizeof *q->x0 * (size_t)L);
    q->mpos = malloc(sizeof *q->mpos * (size_t)L);
    q->span = malloc(sizeof *q->span * (size_t)L);
    q->row = malloc(sizeof *q->row * (size_t)L);
    if (c_rc || !q->logits || !q->cand || !q->x0 || !q->mpos || !q->span || !q->row || sc_rc) {
        l2d_finish(q, NULL);
        return TIDE_E_NOMEM;
    }
    dc_rows_host(&q->rs, h);
    dc_rng_seed(&q->rng, p->seed);
    q->n_out = -1;
    q->end = P;
    *out = q;
    return TIDE_OK;
}

/* After block b's steps: the masks-left warning, R14, then its K/V pass
 * when another block follows. Returns true when fwd holds that pass. */
static bool l2d_block_done(struct tide_decoder_seq *q, struct tide_decoder_fwd *fwd)
{
    const struct tide_decoder *d = q->d;
    const int L = d->p.block;
    const int64_t b0 = q->c.b * L, cwe = b0 + L;
    int left = 0;
    for (int i = 0; i < L; i++)
        left += q->c.ids[b0 + i] == d->tok.mask;
    if (left && !q->warned && !q->stop) {
        /* As in the official code, the masks stay in the canvas (R7). */
        tide_warn("generation: block %lld ended after %d steps with %d masks left (the mask "
                  "token won at those positions; generation.mask_in_argmax = false leaves "
                  "it out)",
                  (long long)q->c.b, d->steps, left);
        q->warned = true;
    }
    q->end = cwe;
    q->blocks++;
    /* R14: stop after a block whose generated part holds EOS. */
    q->stop = q->stop || dc_find_stop(q->c.ids, q->c.P, cwe, &d->tok) >= 0;
    return dc_canvas_kv(&q->c, q->stop, fwd);
}

/* Block b is final: report it (R13's cut when it stopped inside it). */
static void l2d_block_end(struct tide_decoder_seq *q)
{
    const struct tide_decoder *d = q->d;
    bool st;
    const int64_t cwe = (q->c.b + 1) * d->p.block;
    dc_canvas_block_end(&q->c, q->h,
                        q->n_out >= 0
                            ? q->n_out
                            : dc_output_len(q->c.ids, q->c.P, d->p.gen_length, cwe, &d->tok, &st));
}

static int l2d_next(struct tide_decoder_seq *q, struct tide_decoder_fwd *fwd)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    struct dc_canvas *c = &q->c;
    const int L = d->p.block;
    /* R5: blocks the prompt covers are never decoded; with the cache they
     * are prefilled, one block per forward. */
    if (c->finished || dc_canvas_prefill(c, fwd))
        return c->finished ? TIDE_DECODER_DONE : TIDE_OK;
    while (c->b < c->nb && (c->in_block || !q->stop)) {
        /* Context growth (DIP): the prompt may grow between blocks; the
         * blocks it changed are prefilled again first. */
        const int grew = dc_canvas_grow(c, h, d->p.gen_length, d->tok.mask);
        if (grew < 0) {
            tide_error("decoder llada2: context growth beyond the prompt or its room");
            return grew;
        }
        if (grew && dc_canvas_prefill(c, fwd))
            return TIDE_OK;
        const int64_t b0 = c->b * L;
        if (dc_canvas_enter(c, h))
            q->s = 0;
        /* R7: the candidates are the block's masks; none left ends the
         * block before its forward. */
        int n_cand = 0;
        for (int i = 0; i < L; i++)
            if (c->ids[b0 + i] == d->tok.mask && !dc_canvas_locked(c, b0 + i, d->tok.mask))
                q->mpos[n_cand++] = i;
        if (!q->stop && q->s < d->steps && n_cand) {
            int rc = h->step_begin(h->user, dc_canvas_gen(c), q->s);
            if (rc != TIDE_OK)
                return rc;
            /* R8: one forward per step; only the block's masked rows are
             * read, so only those are asked for unless every row is wanted. */
            q->n_cand = n_cand;
            dc_blocks_step_fwd(h, fwd, c->ids, c->b, L, d->p.recompute, q->mpos, n_cand, q->span,
                               q->logits);
            c->posted = DC_POSTED_STEP;
            return TIDE_OK;
        }
        if (l2d_block_done(q, fwd))
            return TIDE_OK;
        l2d_block_end(q);
    }
    /* R17 */
    if (q->n_out < 0)
        q->n_out = dc_output_len(c->ids, c->P, d->p.gen_length, q->end, &d->tok, &q->stopped);
    c->finished = true;
    return TIDE_DECODER_DONE;
}

static int l2d_feed(struct tide_decoder_seq *q)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    const struct dc_params *p = &d->p;
    const struct dc_tokens *tok = &d->tok;
    struct dc_canvas *c = &q->c;
    const int L = p->block;
    const int posted = c->posted;
    c->posted = DC_POSTED_NONE;
    if (posted == DC_POSTED_KV)
        l2d_block_end(q);
    if (posted != DC_POSTED_STEP)
        return TIDE_OK;
    const int64_t b0 = c->b * L, cwe = b0 + L;
    const int n_cand = q->n_cand, s = q->s;
    dc_blocks_step_fed(h, c->b, L, p->recompute, s, d->V, q->mpos, n_cand, q->logits, q->row);
    q->steps++;
    /* R9: a token and a confidence for every masked position. */
    dc_sample_rows(&q->rs, &q->sp, q->row, n_cand, d->V, &q->rng);
    for (int j = 0; j < n_cand; j++) {
        q->x0[q->mpos[j]] = q->rs.id[j];
        q->cand[j] = (struct dc_pos){q->rs.conf[j], q->mpos[j]};
    }
    /* R10-R12: commit, in place. A position given the mask token stays a
     * candidate. */
    const int commit = dc_commit_count(q->cand, n_cand, dc_schedule(L, d->steps, s), p->threshold);
    int filled = 0;
    bool eos_committed = false;
    for (int k = 0; k < commit; k++) {
        const int32_t id = q->x0[q->cand[k].pos];
        c->ids[b0 + q->cand[k].pos] = id;
        filled += id != tok->mask;
        eos_committed |= dc_is_stop(tok, id);
    }
    const struct tide_decoder_step ev = {
        .size = sizeof ev,
        .block = dc_canvas_gen(c),
        .step = s,
        .committed = commit,
        .remaining = n_cand - filled,
    };
    h->step_end(h->user, &ev);
    q->s++;
    /* R13 */
    if (p->eos_early_stop && eos_committed) {
        const int64_t e = l2d_early_stop_at(c->ids, c->P, cwe, tok);
        if (e >= 0) {
            const int64_t G = p->gen_length, P = c->P;
            q->n_out = e + 1 - P < 0 ? 0 : (e + 1 - P > G ? G : e + 1 - P);
            q->stopped = e >= P && e < P + G;
            q->stop = true;
        }
    }
    return TIDE_OK;
}

static int l2d_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out)
{
    if (!q)
        return TIDE_OK;
    int rc = TIDE_OK;
    if (out && !q->c.finished) {
        rc = TIDE_E_INVAL;
    } else if (out) {
        dc_result_set(out, q->c.ids, q->c.P, q->n_out, q->stopped, q->steps, q->blocks, 0);
    }
    dc_canvas_free(&q->c);
    free(q->logits);
    dc_rows_free(&q->rs);
    free(q->cand);
    free(q->x0);
    free(q->mpos);
    free(q->span);
    free(q->row);
    free(q);
    return rc;
}

static void l2d_describe(const struct tide_decoder *d, char *buf, size_t len)
{
    const struct dc_params *p = &d->p;
    snprintf(buf, len,
             "gen_length=%lld block_length=%d steps=%d minimal_topk=%d threshold=%g "
             "temperature=%g top_k=%d top_p=%g seed=%llu eos_early_stop=%s mask_in_argmax=%s "
             "recompute=%s",
             (long long)p->gen_length, p->block, d->steps, p->minimal_topk, p->threshold,
             p->temperature, p->top_k, p->top_p, (unsigned long long)p->seed,
             p->eos_early_stop ? "true" : "false", p->mask_in_argmax ? "true" : "false",
             p->recompute ? "true" : "false");
}

static const struct tide_decoder_ops l2d_ops = {
    .size = sizeof(struct tide_decoder_ops),
    .create = l2d_create,
    .destroy = l2d_destroy,
    .plan = l2d_plan,
    .begin = l2d_begin,
    .next = l2d_next,
    .feed = l2d_feed,
    .finish = l2d_finish,
    .describe = l2d_describe,
};

static const struct tide_plugin_desc l2d_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_DECODER,
    .name = L2D_NAME,
    .version = "0.1.0",
    .summary = "LLaDA2.0 block diffusion (modeling_llada2_moe.py generate()): threshold "
               "commits on a fixed step schedule, exact KV cache; rules R1-R17 of "
               "docs/decoding.md",
    .ops = &l2d_ops,
    .options = NULL,
};

TIDE_PLUGIN_DEFINE(l2d_desc)
