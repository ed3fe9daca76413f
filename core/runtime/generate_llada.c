/* The "llada" decoder: LLaDA's generate() (ML-GSAI/LLaDA generate.py, the
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
#include <stdlib.h>
#include <string.h>

#include "finite.h"
#include "generate.h"
#include "generate_internal.h"
#include "probs.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

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
 * step, one more in the first n % steps steps. */
static int llada_schedule(int n_masks, int steps, int s)
{
    return n_masks / steps + (s < n_masks % steps ? 1 : 0);
}

/* L8 at temperature > 0, add_gumbel_noise then argmax: the largest
 * exp(l) / (-log u)^T in float64 (the lowest id on ties), one u per token
 * in id order. `skip` is left out (mask_in_argmax = false), or -1. */
static int32_t llada_gumbel_pick(const float *l, int V, double T, int32_t skip,
                                 struct tide_gen_rng *rng)
{
    int32_t best = -1;
    double bv = -INFINITY;
    for (int v = 0; v < V; v++) {
        const double u = tide_gen_rng_uniform(rng);
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
    float *buf;        /* [cap rows or total - f0, V] */
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

static int llada_forward(const struct tide_model_ops *ops, struct tide_model *m,
                         const int32_t *canvas, int64_t total, int64_t f0, const int32_t *rows,
                         int n, int32_t *span, bool by_rows, int V, struct llada_fwd *f)
{
    int rc;
    if (by_rows) {
        for (int j = 0; j < n; j++)
            span[j] = (int32_t)(rows[j] - f0);
        if ((rc = llada_grow(f, (size_t)(n ? n : 1) * (size_t)V)) != TIDE_OK)
            return rc;
        rc = ops->forward_rows(m, canvas + f0, total - f0, f0, span, n, f->buf);
        for (int j = 0; j < n; j++)
            f->row[j] = f->buf + (size_t)j * (size_t)V;
    } else {
        if ((rc = llada_grow(f, (size_t)(total - f0) * (size_t)V)) != TIDE_OK)
            return rc;
        rc = ops->forward(m, canvas + f0, total - f0, f0, f->buf);
        for (int j = 0; j < n; j++)
            f->row[j] = f->buf + (size_t)(rows[j] - f0) * (size_t)V;
    }
    return rc;
}

int tide_generate_llada(const struct tide_model_ops *ops, struct tide_model *m,
                        const struct tide_gen_params *p, const struct tide_gen_tokens *tok,
                        const int32_t *prompt, int64_t P, const struct tide_gen_hooks *hooks,
                        struct tide_gen_result *out)
{
    memset(out, 0, sizeof *out);
    const struct tide_model_info *info = ops->info(m);
    const int L = p->block, V = info->vocab_size, S = tide_gen_steps(p);
    const int64_t G = p->gen_length, total = P + G, nb = G / L;
    const bool greedy = !(p->temperature > 0), cfg = p->cfg_scale > 0;
    const int32_t skip = p->mask_in_argmax ? -1 : tok->mask;
    /* Every row of the block when asked for (all_logits, a step_logits hook);
     * the whole canvas's logits when the model cannot do fewer rows. */
    const bool block_rows = p->all_logits || (hooks && hooks->step_logits);
    const bool by_rows = TIDE_OPS_HAS(ops, forward_rows);
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
    if (!canvas || !is_prompt || !cand || !rows || !span || !bpos || !brow || !cand_row ||
        !fc.row || (cfg && (!uncond || !fu.row))) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    /* L1: the prompt, then gen_length masks. The prompt index is what is not
     * the mask token at the start (the official prompt_index = x != mask_id). */
    for (int64_t i = 0; i < total; i++) {
        canvas[i] = i < P ? prompt[i] : tok->mask;
        is_prompt[i] = canvas[i] != tok->mask;
    }
    struct tide_gen_rng rng;
    tide_gen_rng_seed(&rng, p->seed);
    const double t0 = tide_gen_now();
    int64_t end = total; /* decoded part of the canvas (eos_early_stop may end it sooner) */
    bool warned = false;
    for (int64_t b = 0; b < nb; b++) {
        /* L2: block b is [P + b L, P + (b+1) L). */
        const int64_t b0 = P + b * L, be = b0 + L;
        if (hooks && hooks->block_begin)
            hooks->block_begin(hooks->user, (int)b, b == 0);
        /* L4: the block's schedule, from its masks at the block's start. */
        int n_block = 0;
        for (int64_t i = b0; i < be; i++)
            n_block += canvas[i] == tok->mask;
        for (int s = 0; s < S; s++) {
            if (tide_stop_requested()) {
                rc = TIDE_E_INTERRUPTED;
                goto done;
            }
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
            if (hooks && hooks->step_begin &&
                (rc = hooks->step_begin(hooks->user, (int)b, s)) != TIDE_OK)
                goto done;
            /* L6: one forward over the whole canvas. With prefix_cache
             * (APPROXIMATE): a block's first step runs the whole canvas and
             * leaves every position's K/V in the model's cache; later steps
             * run only [block start, end) against the cached prefix, unless
             * a candidate lies before the block. */
            const bool suffix = p->prefix_cache && s > 0 && n_before == 0;
            const int64_t f0 = suffix ? b0 : 0;
            rc = llada_forward(ops, m, canvas, total, f0, rows, n_rows, span, by_rows, V, &fc);
            if (rc != TIDE_OK)
                goto done;
            out->forwards++;
            const float **row = fc.row;
            if (cfg) {
                /* L7: the unconditional pass masks the prompt; logits =
                 * un + (cfg + 1) (cond - un), in float32. */
                for (int64_t i = 0; i < total; i++)
                    uncond[i] = is_prompt[i] ? tok->mask : canvas[i];
                rc = llada_forward(ops, m, uncond, total, 0, rows, n_rows, span, by_rows, V, &fu);
                if (rc != TIDE_OK)
                    goto done;
                out->forwards++;
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
                        const float d = fc.row[j][v] - fu.row[j][v];
                        const float kd = k * d;
                        o[v] = fu.row[j][v] + kd;
                    }
                    fc.row[j] = o;
                }
                row = fc.row;
            }
            out->steps++;
            if (block_rows && hooks && hooks->step_logits) {
                /* The block's rows are contiguous, after the candidates
                 * before it. */
                hooks->step_logits(hooks->user, b, s, row[n_before], L, V);
            }
            int n_in = 0;
            for (int j = 0; j < n_cand; j++)
                if (cand[j].pos >= b0) {
                    bpos[n_in] = (int32_t)(cand[j].pos - b0);
                    brow[n_in++] = row[cand_row[j]];
                }
            if (hooks && hooks->step_rows)
                hooks->step_rows(hooks->user, b, s, n_in, bpos, brow, V);
            for (int j = 0; j < n_cand; j++)
                if ((rc = tide_logits_check_rows(&row[cand_row[j]], &cand[j].pos, 1, V, b, s)) !=
                    TIDE_OK)
                    goto done;
            /* L8: a token for every candidate; L9: its confidence. */
            for (int j = 0; j < n_cand; j++) {
                const float *l = row[cand_row[j]];
                double pr;
                if (greedy) {
                    tide_greedy_pick(l, V, skip, &cand[j].x0, &pr);
                } else {
                    cand[j].x0 = llada_gumbel_pick(l, V, p->temperature, skip, &rng);
                    pr = p->remasking == TIDE_GEN_REMASK_LOW_CONFIDENCE
                             ? llada_prob(l, V, skip, cand[j].x0)
                             : 0;
                }
                cand[j].conf = pr;
            }
            if (p->remasking == TIDE_GEN_REMASK_RANDOM)
                for (int j = 0; j < n_cand; j++)
                    cand[j].conf = tide_gen_rng_uniform(&rng);
            /* L11: commit the scheduled number of most confident candidates. */
            const int n_sched = llada_schedule(n_block, S, s);
            const int commit = n_sched < n_cand ? n_sched : n_cand;
            qsort(cand, (size_t)n_cand, sizeof *cand, llada_cand_desc);
            for (int c = 0; c < commit; c++)
                canvas[cand[c].pos] = cand[c].x0; /* L12 */
            int left = 0;
            for (int64_t i = b0; i < be; i++)
                left += canvas[i] == tok->mask;
            if (hooks && hooks->step_end)
                hooks->step_end(hooks->user, (int)b, s, commit, left);
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
        const int64_t n_now = tide_gen_output_len(canvas, P, G, be, tok, &st);
        if (hooks && hooks->block_end)
            hooks->block_end(hooks->user, (int)b, canvas + P, n_now);
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
    rc = tide_gen_finish(out, canvas + P,
                         tide_gen_output_len(canvas, P, G, end, tok, &out->stopped), t0);
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
    return rc;
}
