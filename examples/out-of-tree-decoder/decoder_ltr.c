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
        .slots = 1,
        /* the prompt's blocks, every step, a K/V pass per block */
        .max_forwards =
            P / d->p.block + (int64_t)(ctx / d->p.block - P / d->p.block) * (d->p.block + 1),
        .gen_multiple = 1,
        .steps_scope = TIDE_STEPS_UNUSED,
    };
    /* The caller's struct may be older (shorter) than ours. */
    const uint32_t n = out->size < sizeof pl ? out->size : (uint32_t)sizeof pl;
    memcpy(out, &pl, n);
    out->size = n;
    return TIDE_OK;
}

/* The first masked position in [from, to), or to. */
static int64_t ltr_first_mask(const int32_t *canvas, int64_t from, int64_t to, int32_t mask)
{
    while (from < to && canvas[from] != mask)
        from++;
    return from;
}

/* What a generation's last forward was. */
enum { LTR_PREFILL, LTR_STEP, LTR_KV };

/* One generation: the loop's variables, kept between forwards (the engine
 * asks for a forward with next() and hands back its logits with feed()). */
struct tide_decoder_seq {
    const struct tide_decoder *d;
    const struct tide_decoder_host *h;
    int64_t P, total, nb, first, lim; /* positions from lim on are never output */
    int32_t *canvas;                  /* [total] */
    int32_t *mpos;     /* [L] the step's masked positions, block-relative, increasing */
    const float **row; /* [L] their logits rows */
    float *logits;     /* [L][V] */
    int posted;        /* LTR_*: the forward last posted */
    int64_t pf;        /* next prompt block to prefill */
    int64_t b;         /* the current block */
    int s, n;          /* its next step; the posted step's rows */
    bool in_block;     /* block_begin was reported for b */
    bool stop, finished;
    int64_t decided; /* the canvas is final on [P, decided) */
    int64_t steps;
    int blocks;
};

static int ltr_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out);

static int ltr_begin(struct tide_decoder *d, const struct tide_decoder_host *h,
                     const int32_t *prompt, int64_t P, struct tide_decoder_seq **out)
{
    *out = NULL;
    /* Every slot used below is in version 2 of the host; a host that says
     * otherwise is not one this plugin can serve. */
    if (!TIDE_DECODER_HAS(h, struct tide_decoder_host, block_end)) {
        tide_error("%s: the engine's decoder host is %u bytes, older than version 2", LTR_NAME,
                   h->size);
        return TIDE_E_INVAL;
    }
    const int L = d->p.block;
    struct tide_decoder_seq *q = calloc(1, sizeof *q);
    if (!q)
        return TIDE_E_NOMEM;
    q->d = d;
    q->h = h;
    q->P = P;
    q->total = ltr_ctx(d, P);
    q->nb = q->total / L;
    q->first = P / L;
    q->lim = P + d->p.gen_length;
    q->canvas = malloc(sizeof *q->canvas * (size_t)q->total);
    q->mpos = malloc(sizeof *q->mpos * (size_t)L);
    q->row = malloc(sizeof *q->row * (size_t)L);
    q->logits = malloc(sizeof *q->logits * (size_t)L * (size_t)d->V);
    if (!q->canvas || !q->mpos || !q->row || !q->logits) {
        ltr_finish(q, NULL);
        return TIDE_E_NOMEM;
    }
    for (int64_t i = 0; i < q->total; i++)
        q->canvas[i] = i < P ? prompt[i] : d->tok.mask;
    q->b = q->first;
    q->decided = P;
    *out = q;
    return TIDE_OK;
}

/* A forward of block b's positions: rows[n] of it (NULL: every row, when
 * logits is set), or none (logits NULL). */
static void ltr_fwd(struct tide_decoder_seq *q, struct tide_decoder_fwd *f, int phase, int64_t b,
                    const int32_t *rows, int n, float *logits)
{
    const int L = q->d->p.block;
    f->phase = phase;
    f->n_spans = 1;
    f->span[0] = (struct tide_seq_span){
        .size = sizeof f->span[0],
        .slot = 0,
        .ids = q->canvas + b * L,
        .n = L,
        .pos0 = b * L,
        .rows = rows,
        .n_rows = logits ? (rows ? n : L) : 0,
        .logits = logits,
    };
}

static void ltr_block_end(struct tide_decoder_seq *q)
{
    bool st;
    q->h->block_end(
        q->h->user, (int)(q->b - q->first), q->canvas + q->P,
        dc_output_len(q->canvas, q->P, q->d->p.gen_length, q->decided, &q->d->tok, &st));
    q->b++;
    q->in_block = false;
}

static int ltr_next(struct tide_decoder_seq *q, struct tide_decoder_fwd *fwd)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    const int L = d->p.block;
    if (q->finished)
        return TIDE_DECODER_DONE;
    /* The blocks the prompt fills are never decoded: prefill their K/V. */
    if (q->pf < q->first) {
        ltr_fwd(q, fwd, TIDE_DECODE_PREFILL, q->pf++, NULL, 0, NULL);
        q->posted = LTR_PREFILL;
        return TIDE_OK;
    }
    while (q->b < q->nb) {
        const int64_t b0 = q->b * L, hi = b0 + L < q->lim ? b0 + L : q->lim;
        const int gb = (int)(q->b - q->first); /* generated block */
        if (!q->in_block) {
            if (q->stop)
                break;
            h->block_begin(h->user, gb, q->b == q->first);
            q->in_block = true;
            q->s = 0;
        }
        if (q->decided < hi && !q->stop) {
            int rc = h->step_begin(h->user, gb, q->s);
            if (rc != TIDE_OK)
                return rc;
            /* The rows read: the leftmost mask, and with min_confidence
             * every mask. */
            int n = 0;
            for (int64_t i = q->decided; i < hi; i++)
                if (q->canvas[i] == d->tok.mask && (i == q->decided || d->min_confidence > 0))
                    q->mpos[n++] = (int32_t)(i - b0);
            q->n = n;
            ltr_fwd(q, fwd, TIDE_DECODE_STEP, q->b, h->block_logits ? NULL : q->mpos, n, q->logits);
            q->posted = LTR_STEP;
            return TIDE_OK;
        }
        q->blocks++;
        q->stop = q->stop || hi >= q->lim;
        /* The last step's K/V predate its commits: store the final ones when
         * another block will attend to them. */
        if (!q->stop) {
            ltr_fwd(q, fwd, TIDE_DECODE_KV, q->b, NULL, 0, NULL);
            q->posted = LTR_KV;
            return TIDE_OK;
        }
        ltr_block_end(q);
    }
    q->finished = true;
    return TIDE_DECODER_DONE;
}

static int ltr_feed(struct tide_decoder_seq *q)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    const int L = d->p.block, V = d->V;
    const int32_t mask = d->tok.mask;
    if (q->posted == LTR_KV)
        ltr_block_end(q);
    if (q->posted != LTR_STEP)
        return TIDE_OK;
    q->posted = LTR_PREFILL; /* fed */
    const int64_t b0 = q->b * L, hi = b0 + L < q->lim ? b0 + L : q->lim;
    const int n = q->n, s = q->s;
    for (int j = 0; j < n; j++)
        q->row[j] = h->block_logits ? q->logits + (size_t)q->mpos[j] * (size_t)V
                                    : q->logits + (size_t)j * (size_t)V;
    if (h->block_logits)
        h->step_logits(h->user, q->b, s, q->logits, L, V);
    h->step_rows(h->user, q->b, s, n, q->mpos, q->row, V);
    /* Greedy, the mask token left out: every step decides its leftmost
     * position for good. The others only when the model is sure enough; all
     * picks read this step's logits, so the commits do not depend on order. */
    int committed = 0;
    for (int j = 0; j < n; j++) {
        int32_t id;
        double prob;
        dc_greedy_pick(q->row[j], V, mask, &id, &prob);
        if (j == 0 || prob > d->min_confidence) {
            q->canvas[b0 + q->mpos[j]] = id;
            committed++;
        }
    }
    q->steps++;
    q->decided = ltr_first_mask(q->canvas, q->decided, hi, mask);
    int remaining = 0;
    for (int64_t i = q->decided; i < hi; i++)
        remaining += q->canvas[i] == mask;
    const struct tide_decoder_step ev = {
        .size = sizeof ev,
        .block = (int)(q->b - q->first),
        .step = s,
        .committed = committed,
        .remaining = remaining,
    };
    h->step_end(h->user, &ev);
    q->s++;
    /* The decided prefix holds EOS: the output cannot change any more. */
    q->stop = dc_find_stop(q->canvas, q->P, q->decided, &d->tok) >= 0;
    return TIDE_OK;
}

static int ltr_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out)
{
    if (!q)
        return TIDE_OK;
    int rc = TIDE_OK;
    if (out && !q->finished) {
        rc = TIDE_E_INVAL;
    } else if (out) {
        const struct tide_decoder *d = q->d;
        bool stopped;
        const int64_t n =
            dc_output_len(q->canvas, q->P, d->p.gen_length, q->decided, &d->tok, &stopped);
        dc_result_set(out, q->canvas, q->P, n, stopped, q->steps, q->blocks, 0);
    }
    free(q->canvas);
    free(q->mpos);
    free(q->row);
    free(q->logits);
    free(q);
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
    .begin = ltr_begin,
    .next = ltr_next,
    .feed = ltr_feed,
    .finish = ltr_finish,
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
