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

/* What the forward a generation posted last was. */
enum { LLD_NONE, LLD_STEP };

/* One generation: the official loop's variables, kept between forwards. */
struct tide_decoder_seq {
    const struct tide_decoder *d;
    const struct tide_decoder_host *h;
    int64_t P, total, nb;
    int64_t pcap;  /* positions allocated: total plus the context's room to grow */
    int64_t asked; /* the block context_grow was last asked before */
    bool greedy, cfg, block_rows;
    int32_t skip;
    int32_t *canvas;         /* [total] */
    int32_t *uncond;         /* [total] the unconditional pass's canvas (cfg) */
    bool *is_prompt;         /* [total] */
    struct llada_cand *cand; /* [total] */
    int32_t *rows;           /* [total + L] the rows a step computes (absolute) */
    int32_t *span;           /* [total + L] the same, relative to the forward's start */
    int32_t *bpos;           /* [L] */
    const float **brow;      /* [L] */
    int *cand_row;           /* [total] a candidate's row of the forward */
    float *lc, *lu;          /* [cap rows, V] the conditional and unconditional logits */
    size_t cap;              /* floats of each */
    const float **row;       /* [total + L] per computed row */
    float *mixed;            /* [mixed_cap] cfg's mixed logits */
    size_t mixed_cap;
    struct dc_sampler gsp; /* greedy: the candidates' picks, spread over the threads */
    struct dc_rows rs;
    const float **grow; /* [total] */
    struct dc_rng rng;
    int posted;                   /* LLD_*: the forward last posted */
    int64_t b;                    /* the current block */
    int s;                        /* its next step */
    int n_block;                  /* L4: its masks at its start */
    bool in_block;                /* block_begin was reported for b */
    int n_cand, n_before, n_rows; /* the posted step's */
    bool finished;
    int64_t end; /* decoded part of the canvas (eos_early_stop may end it sooner) */
    bool warned;
    int64_t steps; /* result */
    int blocks;
    bool stopped;
};

static int lld_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out);

static int lld_begin(struct tide_decoder *d, const struct tide_decoder_host *h,
                     const int32_t *prompt, int64_t P, struct tide_decoder_seq **out)
{
    *out = NULL;
    const struct dc_params *p = &d->p;
    const int L = p->block, V = d->V;
    const int64_t G = p->gen_length, total = P + G;
    const int64_t room = TIDE_DECODER_HAS(h, struct tide_decoder_host, context_room)
                             ? (h->context_room > 0 ? h->context_room : 0)
                             : 0;
    const int64_t cap = total + room;
    struct tide_decoder_seq *q = calloc(1, sizeof *q);
    if (!q)
        return TIDE_E_NOMEM;
    q->d = d;
    q->h = h;
    q->P = P;
    q->total = total;
    q->pcap = cap;
    q->asked = 0;
    q->nb = G / L;
    q->greedy = !(p->temperature > 0);
    q->cfg = p->cfg_scale > 0;
    q->skip = p->mask_in_argmax ? -1 : d->tok.mask;
    /* Every row of the block when the engine asks for it (step_logits). */
    q->block_rows = h->block_logits;
    q->gsp = (struct dc_sampler){.greedy = true, .plain = true, .skip = q->skip};
    q->canvas = malloc(sizeof *q->canvas * (size_t)cap);
    q->uncond = q->cfg ? malloc(sizeof *q->uncond * (size_t)cap) : NULL;
    q->is_prompt = malloc(sizeof *q->is_prompt * (size_t)cap);
    q->cand = malloc(sizeof *q->cand * (size_t)cap);
    q->rows = malloc(sizeof *q->rows * (size_t)(cap + L));
    q->span = malloc(sizeof *q->span * (size_t)(cap + L));
    q->bpos = malloc(sizeof *q->bpos * (size_t)L);
    q->brow = malloc(sizeof *q->brow * (size_t)L);
    q->cand_row = malloc(sizeof *q->cand_row * (size_t)cap);
    q->row = malloc(sizeof *q->row * (size_t)(cap + L));
    q->grow = q->greedy ? malloc(sizeof *q->grow * (size_t)cap) : NULL;
    if (!q->canvas || !q->is_prompt || !q->cand || !q->rows || !q->span || !q->bpos || !q->brow ||
        !q->cand_row || !q->row || (q->cfg && !q->uncond) ||
        (q->greedy && (!q->grow || dc_rows_init(&q->rs, &q->gsp, V, (int)cap)))) {
        lld_finish(q, NULL);
        return TIDE_E_NOMEM;
    }
    /* L1: the prompt, then gen_length masks. The prompt index is what is not
     * the mask token at the start (the official prompt_index = x != mask_id). */
    for (int64_t i = 0; i < total; i++) {
        q->canvas[i] = i < P ? prompt[i] : d->tok.mask;
        q->is_prompt[i] = q->canvas[i] != d->tok.mask;
    }
    if (q->greedy)
        dc_rows_host(&q->rs, h);
    dc_rng_seed(&q->rng, p->seed);
    q->end = total;
    *out = q;
    return TIDE_OK;
}

/* Room for n rows of logits in each pass. */
static int lld_grow(struct tide_decoder_seq *q, int n)
{
    const size_t floats = (size_t)(n ? n : 1) * (size_t)q->d->V;
    if (floats <= q->cap)
        return TIDE_OK;
    float *c = realloc(q->lc, sizeof *c * floats);
    if (!c)
        return TIDE_E_NOMEM;
    q->lc = c;
    if (q->cfg) {
        float *u = realloc(q->lu, sizeof *u * floats);
        if (!u)
            return TIDE_E_NOMEM;
        q->lu = u;
    }
    q->cap = floats;
    return TIDE_OK;
}

/* A span of the canvas c from f0 to the end, with the step's rows. */
static void lld_span(const struct tide_decoder_seq *q, struct tide_seq_span *sp, int slot,
                     const int32_t *c, int64_t f0, float *logits)
{
    *sp = (struct tide_seq_span){
        .size = sizeof *sp,
        .slot = slot,
        .ids = c + f0,
        .n = q->total - f0,
        .pos0 = f0,
        .rows = q->span,
        .n_rows = q->n_rows,
        .logits = logits,
    };
}

/* Before block q->b (>= 1) begins: the tokens context_grow gives join the
 * prompt at its offset; the rest of the canvas (the output so far, final
 * or not, and the masks) moves right with it, and the blocks stay where
 * they were relative to the prompt's end (L2). */
static int lld_context_grow(struct tide_decoder_seq *q)
{
    const struct tide_decoder_host *h = q->h;
    if (!TIDE_DECODER_HAS(h, struct tide_decoder_host, context_grow) || !h->context_grow)
        return TIDE_OK;
    const int32_t *ins = NULL;
    int64_t at = 0;
    const int64_t m = h->context_grow(h->user, (int)q->b, &ins, &at);
    if (m <= 0)
        return TIDE_OK;
    if (!ins || at < 0 || at > q->P || q->total + m > q->pcap) {
        tide_error("decoder llada: context growth beyond the prompt or its room");
        return TIDE_E_INVAL;
    }
    const size_t tail = (size_t)(q->total - at);
    memmove(q->canvas + at + m, q->canvas + at, sizeof *q->canvas * tail);
    memmove(q->is_prompt + at + m, q->is_prompt + at, sizeof *q->is_prompt * tail);
    memcpy(q->canvas + at, ins, sizeof *q->canvas * (size_t)m);
    for (int64_t i = at; i < at + m; i++)
        q->is_prompt[i] = ins[i - at] != q->d->tok.mask;
    q->P += m;
    q->total += m;
    q->end = q->end + m;
    return TIDE_OK;
}

static int lld_next(struct tide_decoder_seq *q, struct tide_decoder_fwd *fwd)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    const struct dc_params *p = &d->p;
    const int L = p->block, S = d->steps;
    if (q->finished)
        return TIDE_DECODER_DONE;
    while (q->b < q->nb) {
        if (!q->in_block && q->b > q->asked) {
            /* Context growth (DIP): the prompt may grow between blocks.
             * Every step forwards the whole canvas, so nothing else is
             * recomputed (with prefix_cache, a block's first step refills
             * the cache). */
            q->asked = q->b;
            int rc = lld_context_grow(q);
            if (rc != TIDE_OK)
                return rc;
        }
        /* L2: block b is [P + b L, P + (b+1) L). */
        const int64_t b0 = q->P + q->b * L, be = b0 + L;
        if (!q->in_block) {
            h->block_begin(h->user, (int)q->b, q->b == 0);
            q->in_block = true;
            q->s = 0;
            /* L4: the block's schedule, from its masks at the block's start. */
            q->n_block = 0;
            for (int64_t i = b0; i < be; i++)
                q->n_block += q->canvas[i] == d->tok.mask;
        }
        if (q->s < S) {
            /* L5, L10: the candidates are the masked positions before the
             * block's end (the prompt's masks and earlier blocks' included). */
            int n_cand = 0, n_before = 0;
            for (int64_t i = 0; i < be; i++)
                if (q->canvas[i] == d->tok.mask) {
                    q->cand[n_cand++].pos = (int32_t)i;
                    n_before += i < b0;
                }
            /* The rows to compute: the candidates, or with block_rows the
             * candidates before the block and then the whole block. */
            int n_rows = 0;
            for (int j = 0; j < n_cand; j++) {
                if (q->block_rows && q->cand[j].pos >= b0) {
                    q->cand_row[j] = n_before + (int)(q->cand[j].pos - b0);
                    continue;
                }
                q->cand_row[j] = n_rows;
                q->rows[n_rows++] = q->cand[j].pos;
            }
            if (q->block_rows)
                for (int64_t i = b0; i < be; i++)
                    q->rows[n_rows++] = (int32_t)i;
            int rc = h->step_begin(h->user, (int)q->b, q->s);
            if (rc == TIDE_OK)
                rc = lld_grow(q, n_rows);
            if (rc != TIDE_OK)
                return rc;
            q->n_cand = n_cand;
            q->n_before = n_before;
            q->n_rows = n_rows;
            /* L6: one forward over the whole canvas. With prefix_cache
             * (APPROXIMATE): a block's first step runs the whole canvas and
             * leaves every position's K/V in the model's cache; later steps
             * run only [block start, end) against the cached prefix, unless
             * a candidate lies before the block. */
            const bool suffix = p->prefix_cache && q->s > 0 && n_before == 0;
            const int64_t f0 = suffix ? b0 : 0;
            for (int j = 0; j < n_rows; j++)
                q->span[j] = (int32_t)(q->rows[j] - f0);
            fwd->phase = TIDE_DECODE_STEP;
            fwd->n_spans = 1;
            lld_span(q, &fwd->span[0], 0, q->canvas, f0, q->lc);
            if (q->cfg) {
                /* L7: the unconditional pass masks the prompt; it shares the
                 * forward, in the generation's second slot (prefix_cache is
                 * refused with cfg, so f0 is 0). */
                for (int64_t i = 0; i < q->total; i++)
                    q->uncond[i] = q->is_prompt[i] ? d->tok.mask : q->canvas[i];
                fwd->n_spans = 2;
                lld_span(q, &fwd->span[1], 1, q->uncond, 0, q->lu);
            }
            q->posted = LLD_STEP;
            return TIDE_OK;
        }
        int left = 0;
        for (int64_t i = b0; i < be; i++)
            left += q->canvas[i] == d->tok.mask;
        if (left && !q->warned) {
            tide_warn("generation: block %lld ended after %d steps with %d masks left (the mask "
                      "token won at those positions; later steps of decoder llada may still "
                      "fill them; generation.mask_in_argmax = false leaves it out)",
                      (long long)q->b, S, left);
            q->warned = true;
        }
        q->blocks++;
        bool st;
        const int64_t n_now = dc_output_len(q->canvas, q->P, p->gen_length, be, &d->tok, &st);
        h->block_end(h->user, (int)q->b, q->canvas + q->P, n_now);
        q->in_block = false;
        q->b++;
        /* eos_early_stop: the output ends at an EOS with no mask before it,
         * so no later step can change it. */
        if (p->eos_early_stop && st && q->b < q->nb) {
            bool final = true;
            for (int64_t i = q->P; i < q->P + n_now && final; i++)
                final = q->canvas[i] != d->tok.mask;
            if (final) {
                q->end = be;
                break;
            }
        }
    }
    q->finished = true;
    return TIDE_DECODER_DONE;
}

static int lld_feed(struct tide_decoder_seq *q)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    const struct dc_params *p = &d->p;
    const int L = p->block, V = d->V, S = d->steps;
    if (q->posted != LLD_STEP)
        return TIDE_OK;
    q->posted = LLD_NONE;
    const int64_t b0 = q->P + q->b * L;
    const int n_cand = q->n_cand, n_rows = q->n_rows, s = q->s;
    for (int j = 0; j < n_rows; j++)
        q->row[j] = q->lc + (size_t)j * (size_t)V;
    if (q->cfg) {
        /* L7: logits = un + (cfg + 1) (cond - un), in float32. */
        const size_t need = (size_t)(n_rows ? n_rows : 1) * (size_t)V;
        if (need > q->mixed_cap) {
            float *t = realloc(q->mixed, sizeof *t * need);
            if (!t)
                return TIDE_E_NOMEM;
            q->mixed = t;
            q->mixed_cap = need;
        }
        const float k = (float)(p->cfg_scale + 1.0);
        for (int j = 0; j < n_rows; j++) {
            float *o = q->mixed + (size_t)j * (size_t)V;
            const float *c = q->lc + (size_t)j * (size_t)V, *u = q->lu + (size_t)j * (size_t)V;
            for (int v = 0; v < V; v++) {
                const float df = c[v] - u[v];
                const float kd = k * df;
                o[v] = u[v] + kd;
            }
            q->row[j] = o;
        }
    }
    const float **row = q->row;
    q->steps++;
    if (q->block_rows) {
        /* The block's rows are contiguous, after the candidates before it. */
        h->step_logits(h->user, q->b, s, row[q->n_before], L, V);
    }
    int n_in = 0;
    for (int j = 0; j < n_cand; j++)
        if (q->cand[j].pos >= b0) {
            q->bpos[n_in] = (int32_t)(q->cand[j].pos - b0);
            q->brow[n_in++] = row[q->cand_row[j]];
        }
    h->step_rows(h->user, q->b, s, n_in, q->bpos, q->brow, V);
    /* L8: a token for every candidate; L9: its confidence. */
    if (q->greedy) {
        for (int j = 0; j < n_cand; j++)
            q->grow[j] = row[q->cand_row[j]];
        dc_sample_rows(&q->rs, &q->gsp, q->grow, n_cand, V, NULL);
    }
    for (int j = 0; j < n_cand; j++) {
        const float *l = row[q->cand_row[j]];
        double pr;
        if (q->greedy) {
            q->cand[j].x0 = q->rs.id[j];
            pr = q->rs.conf[j];
        } else {
            q->cand[j].x0 = llada_gumbel_pick(l, V, p->temperature, q->skip, &q->rng);
            pr = !p->remask_random ? llada_prob(l, V, q->skip, q->cand[j].x0) : 0;
        }
        q->cand[j].conf = pr;
    }
    if (p->remask_random)
        for (int j = 0; j < n_cand; j++)
            q->cand[j].conf = dc_rng_uniform(&q->rng);
    /* L11: commit the scheduled number of most confident candidates. */
    const int n_sched = dc_schedule(q->n_block, S, s);
    const int commit = n_sched < n_cand ? n_sched : n_cand;
    qsort(q->cand, (size_t)n_cand, sizeof *q->cand, llada_cand_desc);
    for (int c = 0; c < commit; c++)
        q->canvas[q->cand[c].pos] = q->cand[c].x0; /* L12 */
    int left = 0;
    for (int64_t i = b0; i < b0 + L; i++)
        left += q->canvas[i] == d->tok.mask;
    const struct tide_decoder_step ev = {
        .size = sizeof ev,
        .block = (int)q->b,
        .step = s,
        .committed = commit,
        .remaining = left,
    };
    h->step_end(h->user, &ev);
    q->s++;
    return TIDE_OK;
}

static int lld_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out)
{
    if (!q)
        return TIDE_OK;
    int rc = TIDE_OK;
    if (out && !q->finished) {
        rc = TIDE_E_INVAL;
    } else if (out) {
        /* L12: the output is canvas[P, P + G), cut after the first EOS/stop
         * token. */
        const struct tide_decoder *d = q->d;
        const int64_t n =
            dc_output_len(q->canvas, q->P, d->p.gen_length, q->end, &d->tok, &q->stopped);
        dc_result_set(out, q->canvas, q->P, n, q->stopped, q->steps, q->blocks, 0);
    }
    free(q->canvas);
    free(q->uncond);
    free(q->is_prompt);
    free(q->cand);
    free(q->rows);
    free(q->span);
    free(q->bpos);
    free(q->brow);
    free(q->cand_row);
    free(q->lc);
    free(q->lu);
    free((void *)q->row);
    free(q->mixed);
    dc_rows_free(&q->rs);
    free(q->grow);
    free(q);
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
        .slots = d->p.cfg_scale > 0 ? 2 : 1, /* L7: the unconditional pass's own context */
        .max_forwards = d->p.steps,
        .gen_multiple = d->p.block, /* L2: blocks start right after the prompt */
        .steps_scope = TIDE_STEPS_SHARED,
        .grows_context = 1, /* lld_context_grow */
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
    .begin = lld_begin,
    .next = lld_next,
    .feed = lld_feed,
    .finish = lld_finish,
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
