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
    return dc_blocks_plan(&d->p, d->max_ctx, P, d->steps, d->steps, out);
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

static int l2d_run(struct tide_decoder *d, const struct tide_decoder_host *h, const int32_t *prompt,
                   int64_t P, struct tide_decoder_result *out)
{
    const struct dc_params *p = &d->p;
    const struct dc_tokens *tok = &d->tok;
    const int L = p->block, V = d->V, steps = d->steps;
    const int64_t G = p->gen_length, total = dc_blocks_ctx(p, P), nb = total / L, first = P / L;
    const int64_t rows = p->recompute ? total : L;
    const struct dc_sampler sp = DC_SAMPLER_OF(p, V, tok->mask);
    void *u = h->user;
    out->n = out->steps = out->edits = 0;
    out->blocks = 0;
    out->stopped = false;
    int rc = TIDE_OK;
    int32_t *canvas = malloc(sizeof *canvas * (size_t)total);
    float *logits = malloc(sizeof *logits * (size_t)rows * (size_t)V);
    struct dc_rows rs;
    const int sc_rc = dc_rows_init(&rs, &sp, V, L);
    struct dc_pos *cand = malloc(sizeof *cand * (size_t)L);
    int32_t *x0 = malloc(sizeof *x0 * (size_t)L);
    /* The masked positions of a step (block-relative; span: scratch) and
     * their logits rows. */
    int32_t *mpos = malloc(sizeof *mpos * (size_t)L), *span = malloc(sizeof *span * (size_t)L);
    const float **row = malloc(sizeof *row * (size_t)L);
    if (!canvas || !logits || !cand || !x0 || !mpos || !span || !row || sc_rc) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    /* R4: the prompt, then masks to the end of the last block. */
    for (int64_t i = 0; i < total; i++)
        canvas[i] = i < P ? prompt[i] : tok->mask;
    struct dc_rng rng;
    dc_rng_seed(&rng, p->seed);
    /* R5: blocks the prompt covers are never decoded; with the cache they
     * are prefilled, one block per forward. */
    if ((rc = dc_blocks_prefill(h, canvas, first, L, p->recompute)) != TIDE_OK)
        goto done;
    int64_t n_out = -1; /* set by R13 */
    int64_t end = P;    /* end of the decoded part of the canvas */
    bool stop = false, warned = false;
    for (int64_t b = first; b < nb && !stop; b++) {
        const int64_t b0 = b * L, cwe = b0 + L; /* R6: the window [0, cwe) */
        h->block_begin(u, (int)(b - first), b == first);
        for (int s = 0; s < steps && !stop; s++) {
            /* R7: the candidates are the block's masks; none left ends the
             * block before its forward. */
            int n_cand = 0;
            for (int i = 0; i < L; i++)
                n_cand += canvas[b0 + i] == tok->mask;
            if (!n_cand)
                break;
            if ((rc = h->step_begin(u, (int)(b - first), s)) != TIDE_OK)
                goto done;
            /* R8: one forward per step; only the block's masked rows are
             * read, so only those are asked for unless every row is wanted. */
            n_cand = 0;
            for (int i = 0; i < L; i++)
                if (canvas[b0 + i] == tok->mask)
                    mpos[n_cand++] = i;
            if ((rc = dc_blocks_step_forward(h, canvas, b, L, p->recompute, s, V, mpos, n_cand,
                                             span, logits, row)) != TIDE_OK)
                goto done;
            out->steps++;
            /* R9: a token and a confidence for every masked position. */
            dc_sample_rows(&rs, &sp, row, n_cand, V, &rng);
            for (int j = 0; j < n_cand; j++) {
                x0[mpos[j]] = rs.id[j];
                cand[j] = (struct dc_pos){rs.conf[j], mpos[j]};
            }
            /* R10-R12: commit, in place. A position given the mask token
             * stays a candidate. */
            const int commit =
                dc_commit_count(cand, n_cand, dc_schedule(L, steps, s), p->threshold);
            int filled = 0;
            bool eos_committed = false;
            for (int c = 0; c < commit; c++) {
                const int32_t id = x0[cand[c].pos];
                canvas[b0 + cand[c].pos] = id;
                filled += id != tok->mask;
                eos_committed |= dc_is_stop(tok, id);
            }
            const struct tide_decoder_step ev = {
                .size = sizeof ev,
                .block = (int)(b - first),
                .step = s,
                .committed = commit,
                .remaining = n_cand - filled,
            };
            h->step_end(u, &ev);
            /* R13 */
            if (p->eos_early_stop && eos_committed) {
                const int64_t e = l2d_early_stop_at(canvas, P, cwe, tok);
                if (e >= 0) {
                    n_out = e + 1 - P < 0 ? 0 : (e + 1 - P > G ? G : e + 1 - P);
                    out->stopped = e >= P && e < P + G;
                    stop = true;
                }
            }
        }
        int left = 0;
        for (int i = 0; i < L; i++)
            left += canvas[b0 + i] == tok->mask;
        if (left && !warned && !stop) {
            /* As in the official code, the masks stay in the canvas (R7). */
            tide_warn("generation: block %lld ended after %d steps with %d masks left (the mask "
                      "token won at those positions; generation.mask_in_argmax = false leaves "
                      "it out)",
                      (long long)b, steps, left);
            warned = true;
        }
        end = cwe;
        out->blocks++;
        /* R14: stop after a block whose generated part holds EOS. */
        stop = stop || dc_find_stop(canvas, P, cwe, tok) >= 0;
        /* The last step's K/V predate its commits: store the final ones when
         * another block will attend to them. */
        if (!p->recompute && !stop && b + 1 < nb &&
            (rc = h->forward(u, canvas + b0, L, b0, NULL, 0, NULL)) != TIDE_OK)
            goto done;
        bool st;
        const int64_t n = n_out >= 0 ? n_out : dc_output_len(canvas, P, G, cwe, tok, &st);
        h->block_end(u, (int)(b - first), canvas + P, n);
    }
    /* R17 */
    if (n_out < 0)
        n_out = dc_output_len(canvas, P, G, end, tok, &out->stopped);
    memcpy(out->ids, canvas + P, sizeof *out->ids * (size_t)n_out);
    out->n = n_out;
done:
    free(canvas);
    free(logits);
    dc_rows_free(&rs);
    free(cand);
    free(x0);
    free(mpos);
    free(span);
    free(row);
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
    .run = l2d_run,
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
