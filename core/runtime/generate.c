/* Block diffusion as the official LLaDA2.0 generate() does it
 * (modeling_llada2_moe.py). docs/decoding.md lists every rule with the line
 * it follows; the rules are named R1..R17 there and below.
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
 * The per-position rule (gen_sample) and the per-step rule (gen_commit_count)
 * are the seam for another model's decoding algorithm. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "finite.h"
#include "generate.h"
#include "generate_internal.h"
#include "probs.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

static volatile sig_atomic_t gen_stop;

void tide_request_stop(void)
{
    gen_stop = 1;
}

bool tide_stop_requested(void)
{
    return gen_stop != 0;
}

double tide_gen_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *tide_gen_decoder_name(const struct tide_gen_params *p)
{
    return p->decoder == TIDE_GEN_DEC_LLADA ? "llada" : "llada2";
}

int tide_gen_decoder_of(const struct tide_gen_params *p, const struct tide_model_info *info)
{
    if (p->decoder != TIDE_GEN_DEC_AUTO)
        return p->decoder;
    const char *want = TIDE_INFO_HAS(info, decoder) ? info->decoder : NULL;
    if (!want || !strcmp(want, "llada2"))
        return TIDE_GEN_DEC_LLADA2;
    return !strcmp(want, "llada") ? TIDE_GEN_DEC_LLADA : TIDE_GEN_DEC_AUTO;
}

int tide_gen_resolve(struct tide_gen_params *p, const struct tide_model_info *info)
{
    const char *want = TIDE_INFO_HAS(info, decoder) ? info->decoder : NULL;
    p->attention = TIDE_INFO_HAS(info, attention) ? info->attention : TIDE_ATTN_BLOCK_CAUSAL;
    if (p->decoder == TIDE_GEN_DEC_AUTO) {
        p->decoder = tide_gen_decoder_of(p, info);
        if (p->decoder == TIDE_GEN_DEC_AUTO) {
            tide_error("[generation] decoder = auto: model %s asks for decoder '%s', which this "
                       "core does not have (llada2, llada)",
                       info->arch ? info->arch : "?", want);
            return TIDE_E_CONFIG;
        }
    }
    if (p->attention != TIDE_ATTN_BLOCK_CAUSAL && p->attention != TIDE_ATTN_FULL) {
        tide_error("model %s: unknown attention kind %d", info->arch ? info->arch : "?",
                   p->attention);
        return TIDE_E_CONFIG;
    }
    /* The llada2 decoder's KV cache is exact only under the block-causal
     * mask; on a full-attention model it is refused, never approximated. */
    if (p->decoder == TIDE_GEN_DEC_LLADA2 && p->attention == TIDE_ATTN_FULL && !p->recompute) {
        tide_error("[generation] decoder = llada2 with the KV cache needs block-causal "
                   "attention, but model %s attends to the full sequence (the cache would be "
                   "inexact); set [generation] recompute = true, or decoder = llada",
                   info->arch ? info->arch : "?");
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

int64_t tide_gen_ctx(int64_t prompt_len, const struct tide_gen_params *p)
{
    int64_t total = prompt_len + p->gen_length; /* R3; llada: L1 */
    if (p->decoder == TIDE_GEN_DEC_LLADA)
        return total;
    return (total + p->block - 1) / p->block * p->block;
}

int64_t tide_gen_max_tokens(int64_t prompt_len, const struct tide_gen_params *p)
{
    if (p->decoder == TIDE_GEN_DEC_LLADA || p->recompute)
        return tide_gen_ctx(prompt_len, p);
    return p->block;
}

int tide_gen_steps(const struct tide_gen_params *p)
{
    if (p->decoder == TIDE_GEN_DEC_LLADA) {
        /* L3: steps // num_blocks (tide_gen_check refuses a remainder) */
        const int64_t nb = p->block > 0 ? p->gen_length / p->block : 0;
        return nb > 0 ? (int)(p->steps / nb) : 0;
    }
    /* R1: steps = min(steps, gen_length // minimal_topk) */
    const int64_t cap = p->minimal_topk > 0 ? p->gen_length / p->minimal_topk : 0;
    return cap < p->steps ? (int)cap : p->steps;
}

int tide_gen_blocks(int64_t prompt_len, const struct tide_gen_params *p)
{
    if (p->decoder == TIDE_GEN_DEC_LLADA)
        return (int)(p->gen_length / p->block);
    return (int)(tide_gen_ctx(prompt_len, p) / p->block - prompt_len / p->block);
}

/* The llada decoder's own rules (L2, L3) and the options it does not take. */
static int gen_check_llada(const struct tide_gen_params *p)
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

int tide_gen_check(const struct tide_gen_params *p, int64_t prompt_len, int64_t max_ctx)
{
    if (p->block < 1 || p->steps < 1 || p->gen_length < 1 || p->minimal_topk < 1 ||
        !(p->threshold > 0) || p->threshold > 1) {
        tide_error("generation: block_length, steps, gen_length and minimal_topk must be >= 1 "
                   "and threshold in (0,1]");
        return TIDE_E_CONFIG;
    }
    if (p->decoder == TIDE_GEN_DEC_LLADA) {
        int rc = gen_check_llada(p);
        if (rc != TIDE_OK)
            return rc;
    } else if (p->prefix_cache) {
        tide_error("[generation] prefix_cache is an option of decoder = llada; decoder llada2 "
                   "caches exactly (recompute = false)");
        return TIDE_E_CONFIG;
    } else if (tide_gen_steps(p) < 1) {
        /* The official code would run no step and return gen_length mask tokens. */
        tide_error("generation: minimal_topk (%d) is larger than gen_length (%lld), so "
                   "steps = gen_length / minimal_topk is 0 and nothing would be decoded",
                   p->minimal_topk, (long long)p->gen_length);
        return TIDE_E_CONFIG;
    }
    if (prompt_len < 1) {
        tide_error("generation: the prompt is empty (it must hold at least one token)");
        return TIDE_E_RANGE;
    }
    int64_t need = tide_gen_ctx(prompt_len, p);
    if (need > max_ctx) {
        tide_error("generation: the prompt (%lld tokens) plus gen_length (%lld), in blocks of "
                   "%d, needs %lld positions but the model's context is %lld",
                   (long long)prompt_len, (long long)p->gen_length, p->block, (long long)need,
                   (long long)max_ctx);
        return TIDE_E_RANGE;
    }
    return TIDE_OK;
}

/* ---- random numbers ------------------------------------------------------ */

static uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void tide_gen_rng_seed(struct tide_gen_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

double tide_gen_rng_uniform(struct tide_gen_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return (double)(out >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- one position: logits -> token and confidence (R9) -------------------- */

/* The official _sample_with_temperature_topk_topp, as parameters. */
struct gen_sampler {
    double temperature; /* logits are divided by it when > 0 and != 1 */
    bool greedy;        /* temperature 0: argmax (lowest id on ties) instead of a draw */
    int top_k;          /* 0 = off */
    double top_p;       /* >= 1 = off */
    int32_t skip;       /* a token left out of everything (mask_in_argmax = false), or -1 */
    bool plain;         /* argmax with no top-k or top-p: read the logits as they are */
};

struct gen_cand {
    double s;
    int32_t id;
};

/* Scratch for one row, [vocab] each. */
struct gen_scratch {
    double *s;            /* the filtered logits; -inf = removed */
    double *tmp;          /* quickselect */
    struct gen_cand *ord; /* top-p order */
};

/* The row kernels below are the hot loops over the vocabulary: each is a
 * plain reduction so that it can be vectorised on its own. The greedy pick
 * over unfiltered logits is tide_greedy_pick (probs.h): argmax and the
 * softmax sum in one vectorised pass. */

/* Largest filtered logit and its first id, and the softmax sum over them
 * (-inf entries contribute nothing). */
static double gen_srow_max(const double *s, int V, int32_t *arg)
{
    double mx = -INFINITY;
    int32_t best = -1;
    for (int v = 0; v < V; v++)
        if (s[v] > mx) {
            mx = s[v];
            best = v;
        }
    *arg = best;
    return mx;
}

static double gen_srow_sumexp(const double *s, int V, double mx)
{
    double sum = 0;
    for (int v = 0; v < V; v++)
        if (s[v] > -INFINITY)
            sum += exp(s[v] - mx);
    return sum;
}

/* The k-th largest of a[0..n) (k in [1, n]), counting repeats; a is reordered. */
static double gen_kth_largest(double *a, int n, int k)
{
    int lo = 0, hi = n - 1;
    const int want = k - 1;
    while (lo < hi) {
        const double pivot = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot)
                i++;
            while (a[j] < pivot)
                j--;
            if (i <= j) {
                double t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return pivot; /* a[j+1 .. i-1] all equal the pivot */
    }
    return a[want];
}

/* R9.3, _top_k_logits: keep the logits >= the k-th largest (ties kept). */
static void gen_top_k(double *s, int V, int k, double *tmp)
{
    if (k <= 0 || k >= V)
        return;
    memcpy(tmp, s, sizeof *tmp * (size_t)V);
    const double kth = gen_kth_largest(tmp, V, k);
    for (int v = 0; v < V; v++)
        if (s[v] < kth)
            s[v] = -INFINITY;
}

/* Descending value, then ascending id (torch.sort leaves the order of ties
 * unspecified; this one is fixed). */
static int cand_desc(const void *a, const void *b)
{
    const struct gen_cand *x = a, *y = b;
    if (x->s != y->s)
        return x->s < y->s ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* R9.4, _top_p_logits: sort descending, softmax, cumulative sum; keep the
 * first token and every token whose preceding cumulative mass is <= p, i.e.
 * the smallest prefix whose mass exceeds p. */
static void gen_top_p(double *s, int V, double p, struct gen_cand *ord)
{
    if (p >= 1.0)
        return;
    int n = 0;
    for (int v = 0; v < V; v++)
        if (s[v] > -INFINITY)
            ord[n++] = (struct gen_cand){s[v], v};
    qsort(ord, (size_t)n, sizeof *ord, cand_desc);
    const double mx = ord[0].s;
    double z = 0;
    for (int j = 0; j < n; j++)
        z += exp(ord[j].s - mx);
    double cum = 0;
    int j = 0;
    while (j < n) {
        cum += exp(ord[j].s - mx) / z;
        j++;
        if (cum > p)
            break;
    }
    for (; j < n; j++)
        s[ord[j].id] = -INFINITY;
}

/* R9: the token for one position and its confidence, the probability of that
 * token under the scaled and filtered distribution. Greedy: argmax; else a
 * draw u * Z against the running sum in id order. */
static int32_t gen_sample(const float *logits, int V, const struct gen_sampler *sp,
                          struct tide_gen_rng *rng, struct gen_scratch *sc, double *conf)
{
    int32_t best;
    if (sp->plain) {
        tide_greedy_pick(logits, V, sp->skip, &best, conf);
        return best;
    }
    double *s = sc->s;
    const bool scale = sp->temperature > 0 && sp->temperature != 1.0;
    for (int v = 0; v < V; v++)
        s[v] = scale ? (double)logits[v] / sp->temperature : (double)logits[v];
    if (sp->skip >= 0)
        s[sp->skip] = -INFINITY;
    gen_top_k(s, V, sp->top_k, sc->tmp);
    gen_top_p(s, V, sp->top_p, sc->ord);
    const double mx = gen_srow_max(s, V, &best);
    const double z = gen_srow_sumexp(s, V, mx);
    if (sp->greedy) {
        *conf = 1.0 / z;
        return best;
    }
    const double r = tide_gen_rng_uniform(rng) * z;
    double acc = 0;
    int32_t last = best;
    for (int v = 0; v < V; v++) {
        if (!(s[v] > -INFINITY))
            continue;
        const double e = exp(s[v] - mx);
        acc += e;
        last = v;
        if (r < acc) {
            *conf = e / z;
            return v;
        }
    }
    *conf = exp(s[last] - mx) / z;
    return last;
}

/* ---- one step: which positions to commit (R2, R10, R11) ------------------ */

/* R2, _get_num_transfer_tokens: step s of a block commits L / steps tokens,
 * one more in the first L % steps steps (0 for every step past L). */
static int gen_schedule(int L, int steps, int s)
{
    return L / steps + (s < L % steps ? 1 : 0);
}

struct gen_pos {
    double conf;
    int32_t pos;
};

static int pos_desc(const void *a, const void *b)
{
    const struct gen_pos *x = a, *y = b;
    if (x->conf != y->conf)
        return x->conf < y->conf ? 1 : -1;
    return x->pos - y->pos;
}

/* R10/R11: cand[0..n) are the masked positions with their confidence. Sorts
 * them by confidence (descending; lower position on ties, where torch.topk
 * leaves the order unspecified) and returns how many of the first to commit:
 * all those strictly above the threshold when there are at least n_sched of
 * them (with n_sched 0 that may be none), else min(n_sched, n). */
static int gen_commit_count(struct gen_pos *cand, int n, int n_sched, double threshold)
{
    int over = 0;
    for (int i = 0; i < n; i++)
        over += cand[i].conf > threshold;
    qsort(cand, (size_t)n, sizeof *cand, pos_desc);
    if (over >= n_sched)
        return over;
    return n_sched < n ? n_sched : n;
}

/* ---- stopping and the output (R13, R14, R17) ----------------------------- */

bool tide_gen_is_stop(const struct tide_gen_tokens *t, int32_t id)
{
    if (id == t->eos)
        return true;
    for (int i = 0; i < t->n_stop; i++)
        if (id == t->stop[i])
            return true;
    return false;
}

int64_t tide_gen_find_stop(const int32_t *canvas, int64_t from, int64_t to,
                           const struct tide_gen_tokens *t)
{
    for (int64_t i = from; i < to; i++)
        if (tide_gen_is_stop(t, canvas[i]))
            return i;
    return -1;
}

/* R13: after a step that committed EOS, with eos_early_stop: the first EOS of
 * the window [0, end) -- the official code searches from position 0, prompt
 * included; extra stop tokens count from the prompt's end -- provided no mask
 * lies between the prompt's end and it. Returns that position, or -1. */
static int64_t gen_early_stop_at(const int32_t *canvas, int64_t P, int64_t end,
                                 const struct tide_gen_tokens *t)
{
    int64_t e = -1;
    for (int64_t i = 0; i < end && e < 0; i++)
        if (canvas[i] == t->eos || (i >= P && tide_gen_is_stop(t, canvas[i])))
            e = i;
    for (int64_t i = P; e >= 0 && i < e; i++)
        if (canvas[i] == t->mask)
            return -1;
    return e;
}

/* R17: tokens of the output, canvas[P, P + G) cut after the first EOS (which
 * is kept), looking no further than end (the decoded part). */
int64_t tide_gen_output_len(const int32_t *canvas, int64_t P, int64_t G, int64_t end,
                            const struct tide_gen_tokens *t, bool *stopped)
{
    const int64_t hi = P + G < end ? P + G : end;
    const int64_t e = tide_gen_find_stop(canvas, P, hi, t);
    *stopped = e >= 0;
    return e >= 0 ? e + 1 - P : hi - P;
}

int tide_gen_finish(struct tide_gen_result *out, const int32_t *gen, int64_t n, double t0)
{
    out->n = n;
    out->ids = malloc(sizeof *out->ids * (size_t)(n ? n : 1));
    if (!out->ids)
        return TIDE_E_NOMEM;
    memcpy(out->ids, gen, sizeof *out->ids * (size_t)n);
    out->seconds = tide_gen_now() - t0;
    return TIDE_OK;
}

/* ---- the loop ------------------------------------------------------------ */

int tide_generate(const struct tide_model_ops *ops, struct tide_model *m,
                  const struct tide_gen_params *p, const struct tide_gen_tokens *tok,
                  const int32_t *prompt, int64_t P, const struct tide_gen_hooks *hooks,
                  struct tide_gen_result *out)
{
    memset(out, 0, sizeof *out);
    const struct tide_model_info *info = ops->info(m);
    struct tide_gen_params q = *p;
    int rc = tide_gen_resolve(&q, info);
    if (rc == TIDE_OK)
        rc = tide_gen_check(&q, P, info->max_ctx);
    if (rc != TIDE_OK)
        return rc;
    if (q.decoder == TIDE_GEN_DEC_LLADA)
        return tide_generate_llada(ops, m, &q, tok, prompt, P, hooks, out);
    p = &q;
    const int L = p->block, V = info->vocab_size, steps = tide_gen_steps(p);
    const int64_t G = p->gen_length, total = tide_gen_ctx(P, p), nb = total / L, first = P / L;
    const int64_t rows = p->recompute ? total : L;
    const struct gen_sampler sp = {
        .temperature = p->temperature,
        .greedy = !(p->temperature > 0),
        .top_k = p->top_k > 0 && p->top_k < V ? p->top_k : 0,
        .top_p = p->top_p,
        .skip = p->mask_in_argmax ? -1 : tok->mask,
        .plain = !(p->temperature > 0) && !(p->top_k > 0 && p->top_k < V) && !(p->top_p < 1.0),
    };
    int32_t *canvas = malloc(sizeof *canvas * (size_t)total);
    float *logits = malloc(sizeof *logits * (size_t)rows * (size_t)V);
    struct gen_scratch sc = {
        .s = sp.plain ? NULL : malloc(sizeof *sc.s * (size_t)V),
        .tmp = sp.plain ? NULL : malloc(sizeof *sc.tmp * (size_t)V),
        .ord = sp.plain ? NULL : malloc(sizeof *sc.ord * (size_t)V),
    };
    struct gen_pos *cand = malloc(sizeof *cand * (size_t)L);
    int32_t *x0 = malloc(sizeof *x0 * (size_t)L);
    /* The masked positions of a step (block-relative and in the forward's
     * span) and their logits rows. */
    int32_t *mpos = malloc(sizeof *mpos * (size_t)L), *span = malloc(sizeof *span * (size_t)L);
    const float **row = malloc(sizeof *row * (size_t)L);
    /* Every row of the block is computed when asked for (all_logits), when a
     * hook wants the whole block, or when the model cannot do less. */
    const bool all_rows =
        p->all_logits || (hooks && hooks->step_logits) || !TIDE_OPS_HAS(ops, forward_rows);
    if (!canvas || !logits || !cand || !x0 || !mpos || !span || !row ||
        (!sp.plain && (!sc.s || !sc.tmp || !sc.ord))) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    /* R4: the prompt, then masks to the end of the last block. */
    for (int64_t i = 0; i < total; i++)
        canvas[i] = i < P ? prompt[i] : tok->mask;
    struct tide_gen_rng rng;
    tide_gen_rng_seed(&rng, p->seed);
    const double t0 = tide_gen_now();
    /* R5: blocks the prompt covers are never decoded; with the cache they
     * are prefilled, one block per forward. */
    for (int64_t b = 0; !p->recompute && b < first; b++) {
        if ((rc = ops->forward(m, canvas + b * L, L, b * L, NULL)) != TIDE_OK)
            goto done;
        out->forwards++;
    }
    out->prefill_seconds = tide_gen_now() - t0;
    int64_t n_out = -1; /* set by R13 */
    int64_t end = P;    /* end of the decoded part of the canvas */
    bool stop = false, warned = false;
    for (int64_t b = first; b < nb && !stop; b++) {
        const int64_t b0 = b * L, cwe = b0 + L; /* R6: the window [0, cwe) */
        if (hooks && hooks->block_begin)
            hooks->block_begin(hooks->user, (int)(b - first), b == first);
        for (int s = 0; s < steps && !stop; s++) {
            if (tide_stop_requested()) {
                rc = TIDE_E_INTERRUPTED;
                goto done;
            }
            /* R7: the candidates are the block's masks; none left ends the
             * block before its forward. */
            int n_cand = 0;
            for (int i = 0; i < L; i++)
                n_cand += canvas[b0 + i] == tok->mask;
            if (!n_cand)
                break;
            if (hooks && hooks->step_begin &&
                (rc = hooks->step_begin(hooks->user, (int)(b - first), s)) != TIDE_OK)
                goto done;
            /* R8: one forward per step; only the block's masked rows are
             * read, so the model computes its output layer for those alone
             * (forward_rows) unless every row is wanted. */
            const int64_t f0 = p->recompute ? 0 : b0, fn = cwe - f0;
            n_cand = 0;
            for (int i = 0; i < L; i++)
                if (canvas[b0 + i] == tok->mask) {
                    mpos[n_cand] = i;
                    span[n_cand++] = (int32_t)(b0 - f0 + i);
                }
            const float *lb = logits + (size_t)(b0 - f0) * (size_t)V;
            if (all_rows) {
                rc = ops->forward(m, canvas + f0, fn, f0, logits);
                for (int j = 0; j < n_cand; j++)
                    row[j] = lb + (size_t)mpos[j] * (size_t)V;
            } else {
                rc = ops->forward_rows(m, canvas + f0, fn, f0, span, n_cand, logits);
                for (int j = 0; j < n_cand; j++)
                    row[j] = logits + (size_t)j * (size_t)V;
            }
            if (rc != TIDE_OK)
                goto done;
            out->forwards++;
            out->steps++;
            if (all_rows && hooks && hooks->step_logits)
                hooks->step_logits(hooks->user, b, s, lb, L, V);
            if (hooks && hooks->step_rows)
                hooks->step_rows(hooks->user, b, s, n_cand, mpos, row, V);
            if ((rc = tide_logits_check_rows(row, mpos, n_cand, V, b, s)) != TIDE_OK)
                goto done;
            /* R9: a token and a confidence for every masked position. */
            for (int j = 0; j < n_cand; j++) {
                double conf;
                x0[mpos[j]] = gen_sample(row[j], V, &sp, &rng, &sc, &conf);
                cand[j] = (struct gen_pos){conf, mpos[j]};
            }
            /* R10-R12: commit, in place. A position given the mask token
             * stays a candidate. */
            const int commit =
                gen_commit_count(cand, n_cand, gen_schedule(L, steps, s), p->threshold);
            int filled = 0;
            bool eos_committed = false;
            for (int c = 0; c < commit; c++) {
                const int32_t id = x0[cand[c].pos];
                canvas[b0 + cand[c].pos] = id;
                filled += id != tok->mask;
                eos_committed |= tide_gen_is_stop(tok, id);
            }
            if (hooks && hooks->step_end)
                hooks->step_end(hooks->user, (int)(b - first), s, commit, n_cand - filled);
            /* R13 */
            if (p->eos_early_stop && eos_committed) {
                const int64_t e = gen_early_stop_at(canvas, P, cwe, tok);
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
        stop = stop || tide_gen_find_stop(canvas, P, cwe, tok) >= 0;
        /* The last step's K/V predate its commits: store the final ones when
         * another block will attend to them. */
        if (!p->recompute && !stop && b + 1 < nb) {
            if ((rc = ops->forward(m, canvas + b0, L, b0, NULL)) != TIDE_OK)
                goto done;
            out->forwards++;
        }
        if (hooks && hooks->block_end) {
            bool st;
            const int64_t n = n_out >= 0 ? n_out : tide_gen_output_len(canvas, P, G, cwe, tok, &st);
            hooks->block_end(hooks->user, (int)(b - first), canvas + P, n);
        }
    }
    /* R17 */
    if (n_out < 0)
        n_out = tide_gen_output_len(canvas, P, G, end, tok, &out->stopped);
    rc = tide_gen_finish(out, canvas + P, n_out, t0);
done:
    free(canvas);
    free(logits);
    free(sc.s);
    free(sc.tmp);
    free(sc.ord);
    free(cand);
    free(x0);
    free(mpos);
    free(span);
    free(row);
    return rc;
}
