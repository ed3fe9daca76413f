/* decoder-llada: LLaDA's generate() (ML-GSAI/LLaDA generate.py, the
 * loop LLaDA-MoE's release uses), rule by rule. docs/decoding.md lists the
 * rules L1..L12 with the official lines; the names appear below.
 *
 * The canvas is the prompt followed by gen_length masks (L1). gen_length is
 * cut into blocks of block_length starting right after the prompt (L2), and
 * the steps are shared evenly between the blocks (L3). Each block computes its
 * transfer schedule once, from its own mask count (L4). Every step forwards
 * the whole canvas (L6; cfg_scale adds an unconditional pass with the prompt
 * masked, L7), picks a token for every masked position (argmax, or Gumbel-max
 * at temperature > 0, L8), scores it (softmax probability, or a uniform draw
 * for random remasking, L9), excludes positions past the current block (L10)
 * and commits the scheduled number of most confident masked positions (L11).
 * Committed tokens never change (L12).
 *
 * Departures (docs/decoding.md): TIDE's seeded RNG instead of torch's, drawn
 * only for the positions that can be committed; eos_early_stop ends after a
 * block once the output is final; prefix_cache (off by default) is a
 * Fast-dLLM-style APPROXIMATE cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder-common/blocks.h"
#include "decoder-common/canvas.h"
#include "decoder-common/params.h"
#include "decoder-common/probs.h"
#include "decoder-common/rng.h"
#include "decoder-common/sample.h"
#include "tide/decoder.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define LLD_NAME "decoder-llada"

struct tide_decoder {
    struct dc_params p;
    struct dc_tokens tok;
    int V;
    int64_t max_ctx;
    int steps; /* L3: steps per block */
};

struct llada_cand {
    double conf;
    int32_t pos; /* absolute canvas position */
    int32_t x0;  /* the token chosen for it */
};

/* Descending confidence; the lower position first on ties (torch.topk leaves
 * their order unspecified). */
static int llada_cand_desc(const void *a, const void *b)
{
    const struct llada_cand *x = a, *y = b;
    if (x->conf != y->conf)
        return x->conf < y->conf ? 1 : -1;
    return x->pos - y->pos;
}

/* L4, get_num_transfer_tokens: a block with n masks commits n // steps per
 * step, one more in the first n % steps steps (dc_schedule). */

/* L8 at temperature > 0, add_gumbel_noise then argmax: the largest
 * exp(l) / (-log u)^T in float64 (the lowest id on ties), one u per token
 * in id order. `skip` is left out (mask_in_argmax = false), or -1. */
static int32_t llada_gumbel_pick(const float *l, int V, double T, int32_t skip, struct dc_rng *rng)
{
    int32_t best = -1;
    double bv = -INFINITY;
    for (int v = 0; v < V; v++) {
        const double u = dc_rng_uniform(rng);
        if (v == skip)
            continue;
        const double g = exp((double)l[v]) / pow(-log(u), T);
        if (best < 0 || g > bv) {
            bv = g;
            best = v;
        }
    }
    return best;
}

/* L9, low_confidence: softmax(logits)[id], in double. */
static double llada_prob(const float *l, int V, int32_t skip, int32_t id)
{
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++)
        if (v != skip && l[v] > mx)
            mx = l[v];
    for (int v = 0; v < V; v++)
        if (v != skip)
            z += exp((double)l[v] - mx);
    return exp((double)l[id] - mx) / z;
}

/* Logits for the rows rows[0..n) (absolute positions, increasing) of a
 * canvas, from a forward over [f0, total). */
struct llada_fwd {
    float *buf;        /* [cap rows, V] */
    size_t cap;        /* floats */
    const float **row; /* [total] per requested row */
};

static int llada_grow(struct llada_fwd *f, size_t floats)
{
    if (floats <= f->cap)
        return TIDE_OK;
    float *b = realloc(f->buf, sizeof *b * floats);
    if (!b)
        return TIDE_E_NOMEM;
    f->buf = b;
    f->cap = floats;
    return TIDE_OK;
}

static int llada_forward(const struct tide_decoder_host *h, const int32_t *canvas, int64_t total,
                         int64_t f0, const int32_t *rows, int n, int32_t *span, int V,
                         struct llada_fwd *f)
{
    for (int j = 0; j < n; j++)
        span[j] = (int32_t)(rows[j] - f0);
    int rc = llada_grow(f, (size_t)(n ? n : 1) * (size_t)V);
    if (rc != TIDE_OK)
        return rc;
    rc = h->forward(h->user, canvas + f0, total - f0, f0, span, n, f->buf);
    for (int j = 0; j < n; j++)
        f->row[j] = f->buf + (size_t)j * (size_t)V;
    return rc;
}

static int lld_run(struct tide_decoder *d, const struct tide_decoder_host *h, const int32_t *prompt,
                   int64_t P, struct tide_decoder_result *out)
{
    const struct dc_params *p = &d->p;
    const struct dc_tokens *tok = &d->tok;
    const int L = p->block, V = d->V, S = d->steps;
    const int64_t G = p->gen_length, total = P + G, nb = G / L;
    const bool greedy = !(p->temperature > 0), cfg = p->cfg_scale > 0;
    const int32_t skip = p->mask_in_argmax ? -1 : tok->mask;
    /* Every row of the block when the engine asks for it (step_logits). */
    const bool block_rows = h->block_logits;
    void *u = h->user;
    out->n = out->steps = out->edits = 0;
    out->blocks = 0;
    out->stopped = false;
    int rc = TIDE_OK;
    int32_t *canvas = malloc(sizeof *canvas * (size_t)total);
    int32_t *uncond = cfg ? malloc(sizeof *uncond * (size_t)total) : NULL;
    bool *is_prompt = malloc(sizeof *is_prompt * (size_t)total);
    struct llada_cand *cand = malloc(sizeof *cand * (size_t)total);
    int32_t *rows = malloc(sizeof *rows * (size_t)(total + L));
    int32_t *span = malloc(sizeof *span * (size_t)(total + L));
    int32_t *bpos = malloc(sizeof *bpos * (size_t)L);
    const float **brow = malloc(sizeof *brow * (size_t)L);
    int *cand_row = malloc(sizeof *cand_row * (size_t)total);
    struct llada_fwd fc = {.row = malloc(sizeof *fc.row * (size_t)(total + L))};
    struct llada_fwd fu = {.row = cfg ? malloc(sizeof *fu.row * (size_t)(total + L)) : NULL};
    float *mixed = NULL;
    size_t mixed_cap = 0;
    /* Greedy: the candidates' picks, their rows spread over the threads. */
    const struct dc_sampler gsp = {.greedy = true, .plain = true, .skip = skip};
    struct dc_rows rs = {0};
    const float **grow = greedy ? malloc(sizeof *grow * (size_t)total) : NULL;
    if (!canvas || !is_prompt || !cand || !rows || !span || !bpos || !brow || !cand_row ||
        !fc.row || (cfg && (!uncond || !fu.row)) ||
        (greedy && (!grow || dc_rows_init(&rs, &gsp, V, (int)total)))) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    /* L1: the prompt, then gen_length masks. The prompt index is what is not
     * the mask token at the start (the official prompt_index = x != mask_id). */
    for (int64_t i = 0; i < total; i++) {
        canvas[i] = i < P ? prompt[i] : tok->mask;
        is_prompt[i] = canvas[i] != tok->mask;
    }
    struct dc_rng rng;
    dc_rng_seed(&rng, p->seed);
    int64_t end = total; /* decoded part of the canvas (eos_early_stop may end it sooner) */
    bool warned = false;
    for (int64_t b = 0; b < nb; b++) {
        /* L2: block b is [P + b L, P + (b+1) L). */
        const int64_t b0 = P + b * L, be = b0 + L;
        h->block_begin(u, (int)b, b == 0);
        /* L4: the block's schedule, from its masks at the block's start. */
        int n_block = 0;
        for (int64_t i = b0; i < be; i++)
            n_block += canvas[i] == tok->mask;
        for (int s = 0; s < S; s++) {
            /* L5, L10: the candidates are the masked positions before the
             * block's end (the prompt's masks and earlier blocks' included). */
            int n_cand = 0, n_before = 0;
            for (int64_t i = 0; i < be; i++)
                if (canvas[i] == tok->mask) {
                    cand[n_cand++].pos = (int32_t)i;
                    n_before += i < b0;
                }
            /* The rows to compute: the candidates, or with block_rows the
             * candidates before the block and then the whole block. */
            int n_rows = 0;
            for (int j = 0; j < n_cand; j++) {
                if (block_rows && cand[j].pos >= b0) {
                    cand_row[j] = n_before + (int)(cand[j].pos - b0);
                    continue;
                }
                cand_row[j] = n_rows;
                rows[n_rows++] = cand[j].pos;
            }
            if (block_rows)
                for (int64_t i = b0; i < be; i++)
                    rows[n_rows++] = (int32_t)i;
            if ((rc = h->step_begin(u, (int)b, s)) != TIDE_OK)
                goto done;
            /* L6: one forward over the whole canvas. With prefix_cache
             * (APPROXIMATE): a block's first step runs the whole canvas and
             * leaves every position's K/V in the model's cache; later steps
             * run only [block start, end) against the cached prefix, unless
             * a candidate lies before the block. */
            const bool suffix = p->prefix_cache && s > 0 && n_before == 0;
            const int64_t f0 = suffix ? b0 : 0;
            rc = llada_forward(h, canvas, total, f0, rows, n_rows, span, V, &fc);
            if (rc != TIDE_OK)
                goto done;
            const float **row = fc.row;
            if (cfg) {
                /* L7: the unconditional pass masks the prompt; logits =
                 * un + (cfg + 1) (cond - un), in float32. */
                for (int64_t i = 0; i < total; i++)
                    uncond[i] = is_prompt[i] ? tok->mask : canvas[i];
                rc = llada_forward(h, uncond, total, 0, rows, n_rows, span, V, &fu);
                if (rc != TIDE_OK)
                    goto done;
                const size_t need = (size_t)(n_rows ? n_rows : 1) * (size_t)V;
                if (need > mixed_cap) {
                    float *t = realloc(mixed, sizeof *t * need);
                    if (!t) {
                        rc = TIDE_E_NOMEM;
                        goto done;
                    }
                    mixed = t;
                    mixed_cap = need;
                }
                const float k = (float)(p->cfg_scale + 1.0);
                for (int j = 0; j < n_rows; j++) {
                    float *o = mixed + (size_t)j * (size_t)V;
                    for (int v = 0; v < V; v++) {
                        const float df = fc.row[j][v] - fu.row[j][v];
                        const float kd = k * df;
                        o[v] = fu.row[j][v] + kd;
                    }
                    fc.row[j] = o;
                }
                row = fc.row;
            }
            out->steps++;
            if (block_rows) {
                /* The block's rows are contiguous, after the candidates
                 * before it. */
                h->step_logits(u, b, s, row[n_before], L, V);
            }
            int n_in = 0;
            for (int j = 0; j < n_cand; j++)
                if (cand[j].pos >= b0) {
                    bpos[n_in] = (int32_t)(cand[j].pos - b0);
                    brow[n_in++] = row[cand_row[j]];
                }
            h->step_rows(u, b, s, n_in, bpos, brow, V);
            /* L8: a token for every candidate; L9: its confidence. */
            if (greedy) {
                for (int j = 0; j < n_cand; j++)
                    grow[j] = row[cand_row[j]];
                dc_sample_rows(&rs, &gsp, grow, n_cand, V, NULL);
            }
            for (int j = 0; j < n_cand; j++) {
                const float *l = row[cand_row[j]];
                double pr;
                if (greedy) {
                    cand[j].x0 = rs.id[j];
                    pr = rs.conf[j];
                } else {
                    cand[j].x0 = llada_gumbel_pick(l, V, p->temperature, skip, &rng);
                    pr = !p->remask_random ? llada_prob(l, V, skip, cand[j].x0) : 0;
                }
                cand[j].conf = pr;
            }
            if (p->remask_random)
                for (int j = 0; j < n_cand; j++)
                    cand[j].conf = dc_rng_uniform(&rng);
            /* L11: commit the scheduled number of most confident candidates. */
            const int n_sched = dc_schedule(n_block, S, s);
            const int commit = n_sched < n_cand ? n_sched : n_cand;
            qsort(cand, (size_t)n_cand, sizeof *cand, llada_cand_desc);
            for (int c = 0; c < commit; c++)
                canvas[cand[c].pos] = cand[c].x0; /* L12 */
            int left = 0;
            for (int64_t i = b0; i < be; i++)
                left += canvas[i] == tok->mask;
            const struct tide_decoder_step ev = {
                .size = sizeof ev,
                .block = (int)b,
                .step = s,
                .committed = commit,
                .remaining = left,
            };
            h->step_end(u, &ev);
        }
        int left = 0;
        for (int64_t i = b0; i < be; i++)
            left += canvas[i] == tok->mask;
        if (left && !warned) {
            tide_warn("generation: block %lld ended after %d steps with %d masks left (the mask "
                      "token won at those positions; later steps of decoder llada may still "
                      "fill them; generation.mask_in_argmax = false leaves it out)",
                      (long long)b, S, left);
            warned = true;
        }
        out->blocks++;
        bool st;
        const int64_t n_now = dc_output_len(canvas, P, G, be, tok, &st);
        h->block_end(u, (int)b, canvas + P, n_now);
        /* eos_early_stop: the output ends at an EOS with no mask before it,
         * so no later step can change it. */
        if (p->eos_early_stop && st && b + 1 < nb) {
            bool final = true;
            for (int64_t i = P; i < P + n_now && final; i++)
                final = canvas[i] != tok->mask;
            if (final) {
                end = be;
                break;
            }
        }
    }
    /* L12: the output is canvas[P, P + G), cut after the first EOS/stop token. */
    out->n = dc_output_len(canvas, P, G, end, tok, &out->stopped);
    memcpy(out->ids, canvas + P, sizeof *out->ids * (size_t)out->n);
done:
    free(canvas);
    free(uncond);
    free(is_prompt);
    free(cand);
    free(rows);
    free(span);
    free(bpos);
    free(brow);
    free(cand_row);
    free(fc.buf);
    free((void *)fc.row);
    free(fu.buf);
    free((void *)fu.row);
    free(mixed);
    dc_rows_free(&rs);
    free(grow);
    return rc;
}

static void lld_destroy(struct tide_decoder *d)
{
    free(d);
}

/* The llada decoder's own rules (L2, L3) and the options it does not take. */
static int lld_check(const struct dc_params *p)
{
    if (p->gen_length % p->block) {
        tide_error("[generation] gen_length (%lld) must be a multiple of block_length (%d) with "
                   "decoder = llada (the official generate() asserts gen_length %% block_length "
                   "== 0)",
                   (long long)p->gen_length, p->block);
        return TIDE_E_CONFIG;
    }
    const int64_t nb = p->gen_length / p->block;
    if (p->steps % nb) {
        tide_error("[generation] steps (%d) must be a multiple of the number of blocks, "
                   "gen_length / block_length = %lld, with decoder = llada (the official "
                   "generate() asserts steps %% num_blocks == 0)",
                   p->steps, (long long)nb);
        return TIDE_E_CONFIG;
    }
    if (p->top_k > 0 || p->top_p < 1.0) {
        tide_error("[generation] top_k and top_p are not part of decoder = llada (the official "
                   "generate() samples with Gumbel noise over all tokens); leave them at 0 and 1");
        return TIDE_E_CONFIG;
    }
    if (p->prefix_cache && p->cfg_scale > 0) {
        tide_error("[generation] prefix_cache cannot be combined with cfg_scale > 0 (the "
                   "unconditional pass would overwrite the cached prefix)");
        return TIDE_E_CONFIG;
    }
    if (!(p->cfg_scale >= 0)) {
        tide_error("[generation] cfg_scale must be >= 0");
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

static int lld_create(const struct tide_decoder_args *a, struct tide_decoder **out)
{
    *out = NULL;
    struct tide_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return TIDE_E_NOMEM;
    dc_params_read(a->gen, &d->p);
    dc_tokens_from(a, &d->tok);
    d->V = a->info->vocab_size;
    d->max_ctx = a->info->max_ctx;
    int rc = dc_check_common(&d->p);
    if (rc == TIDE_OK)
        rc = lld_check(&d->p);
    if (rc == TIDE_OK)
        rc = dc_check_no_mode(&d->p, "llada");
    if (rc != TIDE_OK) {
        lld_destroy(d);
        return rc;
    }
    /* L3: steps // num_blocks */
    d->steps = (int)(d->p.steps / (d->p.gen_length / d->p.block));
    *out = d;
    return TIDE_OK;
}

static int lld_plan(const struct tide_decoder *d, int64_t P, struct tide_decoder_plan *out)
{
    const int64_t ctx = P + d->p.gen_length; /* L1 */
    int rc = dc_check_prompt(P, ctx, &d->p, d->max_ctx);
    if (rc != TIDE_OK)
        return rc;
    struct tide_decoder_plan pl = {
        .size = sizeof pl,
        .n_ctx = ctx,
        .max_tokens = ctx, /* L6: every forward is the whole canvas */
        .max_output = d->p.gen_length,
        .blocks = (int)(d->p.gen_length / d->p.block),
        .block_length = d->p.block,
        .max_steps = d->steps,
        .nominal_steps = d->steps,
    };
    dc_plan_out(out, &pl);
    return TIDE_OK;
}

static void lld_describe(const struct tide_decoder *d, char *buf, size_t len)
{
    const struct dc_params *p = &d->p;
    snprintf(buf, len,
             "gen_length=%lld block_length=%d steps=%d steps_per_block=%d temperature=%g "
             "cfg_scale=%g remasking=%s seed=%llu eos_early_stop=%s mask_in_argmax=%s "
             "prefix_cache=%s",
             (long long)p->gen_length, p->block, p->steps, d->steps, p->temperature, p->cfg_scale,
             p->remask_random ? "random" : "low_confidence", (unsigned long long)p->seed,
             p->eos_early_stop ? "true" : "false", p->mask_in_argmax ? "true" : "false",
             p->prefix_cache ? "true" : "false");
}

static const struct tide_decoder_ops lld_ops = {
    .size = sizeof(struct tide_decoder_ops),
    .create = lld_create,
    .destroy = lld_destroy,
    .plan = lld_plan,
    .run = lld_run,
    .describe = lld_describe,
};

static const struct tide_plugin_desc lld_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_DECODER,
    .name = LLD_NAME,
    .version = "0.1.0",
    .summary = "LLaDA generate.py (LLaDA-MoE): low-confidence remasking over a fully masked "
               "canvas, whole-canvas forwards, cfg_scale; rules L1-L12 of docs/decoding.md",
    .ops = &lld_ops,
    .options = NULL,
};

TIDE_PLUGIN_DEFINE(lld_desc)
