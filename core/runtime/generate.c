/* Block diffusion (LLaDA2.0 generate): the canvas is the prompt followed by
 * masks, in whole blocks. Blocks fully covered by the prompt are prefilled
 * into the KV cache; each later block is denoised step by step, committing
 * every position whose probability exceeds the threshold (at least the
 * scheduled count), then run once more to write its final K/V. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "finite.h"
#include "generate.h"
#include "tide/log.h"
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

static double gen_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t tide_gen_ctx(int64_t prompt_len, const struct tide_gen_params *p)
{
    int64_t total = prompt_len + p->gen_length;
    return (total + p->block - 1) / p->block * p->block;
}

int tide_gen_check(const struct tide_gen_params *p, int64_t prompt_len, int64_t max_ctx)
{
    if (p->block < 1 || p->steps < 1 || p->gen_length < 1 || !(p->threshold > 0) ||
        p->threshold > 1) {
        tide_error("generation: block_length, steps and gen_length must be >= 1 and threshold "
                   "in (0,1]");
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

/* xoshiro256** seeded through splitmix64. */
struct gen_rng {
    uint64_t s[4];
};

static uint64_t rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static void rng_seed(struct gen_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

static double rng_uniform(struct gen_rng *r)
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

struct gen_cand {
    double p;
    int32_t id;
};

static int cand_desc(const void *a, const void *b)
{
    const struct gen_cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

/* Pick a token for one position and its confidence. The mask token is never
 * a candidate. Greedy: argmax (lowest id on ties), confidence = its softmax
 * probability in double. Sampling: softmax(l/T), top-k, top-p, then draw. */
static int32_t gen_pick(const float *logits, int V, int32_t mask, const struct tide_gen_params *p,
                        struct gen_rng *rng, struct gen_cand *scratch, double *conf)
{
    int32_t best = -1;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (v != mask && (best < 0 || logits[v] > mx)) {
            mx = logits[v];
            best = v;
        }
    const double T = p->temperature > 0 ? p->temperature : 1.0;
    double sum = 0;
    for (int v = 0; v < V; v++)
        if (v != mask)
            sum += exp(((double)logits[v] - (double)mx) / T);
    if (p->temperature <= 0) {
        *conf = 1.0 / sum;
        return best;
    }
    int n = 0;
    for (int v = 0; v < V; v++)
        if (v != mask)
            scratch[n++] = (struct gen_cand){exp(((double)logits[v] - (double)mx) / T) / sum, v};
    qsort(scratch, (size_t)n, sizeof *scratch, cand_desc);
    if (p->top_k > 0 && p->top_k < n)
        n = p->top_k;
    double mass = 0;
    int keep = 0;
    while (keep < n) {
        mass += scratch[keep++].p;
        if (mass >= p->top_p)
            break;
    }
    double r = rng_uniform(rng) * mass, acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += scratch[i].p;
        if (r < acc || i == keep - 1) {
            *conf = scratch[i].p / mass;
            return scratch[i].id;
        }
    }
    *conf = 0;
    return best;
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

int tide_generate(const struct tide_model_ops *ops, struct tide_model *m,
                  const struct tide_gen_params *p, const struct tide_gen_tokens *tok,
                  const int32_t *prompt, int64_t P, const struct tide_gen_hooks *hooks,
                  struct tide_gen_result *out)
{
    memset(out, 0, sizeof *out);
    const struct tide_model_info *info = ops->info(m);
    int rc = tide_gen_check(p, P, info->max_ctx);
    if (rc != TIDE_OK)
        return rc;
    const int L = p->block, V = info->vocab_size;
    const int64_t total = tide_gen_ctx(P, p), nb = total / L, first = P / L;
    const int steps = p->steps < L ? p->steps : L;
    const int64_t rows = p->recompute ? total : L;
    int32_t *canvas = malloc(sizeof *canvas * (size_t)total);
    float *logits = malloc(sizeof *logits * (size_t)rows * (size_t)V);
    struct gen_cand *scratch = malloc(sizeof *scratch * (size_t)V);
    struct gen_pos *cand = malloc(sizeof *cand * (size_t)L);
    int32_t *x0 = malloc(sizeof *x0 * (size_t)L);
    if (!canvas || !logits || !scratch || !cand || !x0) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    for (int64_t i = 0; i < total; i++)
        canvas[i] = i < P ? prompt[i] : tok->mask;
    struct gen_rng rng;
    rng_seed(&rng, p->seed);
    const double t0 = gen_now();
    /* Prefill the blocks the prompt covers, one block per forward. */
    for (int64_t b = 0; !p->recompute && b < first; b++) {
        if ((rc = ops->forward(m, canvas + b * L, L, b * L, NULL)) != TIDE_OK)
            goto done;
        out->forwards++;
    }
    out->prefill_seconds = gen_now() - t0;
    int64_t end = P;
    for (int64_t b = first; b < nb; b++) {
        const int64_t b0 = b * L;
        if (hooks && hooks->block_begin)
            hooks->block_begin(hooks->user, (int)(b - first), b == first);
        for (int s = 0; s < steps; s++) {
            if (tide_stop_requested()) {
                rc = TIDE_E_INTERRUPTED;
                goto done;
            }
            int n_active = 0;
            for (int i = 0; i < L; i++)
                n_active += canvas[b0 + i] == tok->mask;
            if (!n_active)
                break;
            if (hooks && hooks->step_begin &&
                (rc = hooks->step_begin(hooks->user, (int)(b - first), s)) != TIDE_OK)
                goto done;
            const int64_t f0 = p->recompute ? 0 : b0, fn = p->recompute ? b0 + L : L;
            if ((rc = ops->forward(m, canvas + f0, fn, f0, logits)) != TIDE_OK)
                goto done;
            out->forwards++;
            out->steps++;
            const float *lb = logits + (size_t)(b0 - f0) * (size_t)V;
            if (hooks && hooks->step_logits)
                hooks->step_logits(hooks->user, b, s, lb, L, V);
            if ((rc = tide_logits_check(lb, L, V, b, s)) != TIDE_OK)
                goto done;
            int n_cand = 0, n_over = 0;
            for (int i = 0; i < L; i++) {
                if (canvas[b0 + i] != tok->mask)
                    continue;
                double conf;
                x0[i] = gen_pick(lb + (size_t)i * V, V, tok->mask, p, &rng, scratch, &conf);
                cand[n_cand++] = (struct gen_pos){conf, i};
                n_over += conf > p->threshold;
            }
            const int n_s = L / steps + (s < L % steps ? 1 : 0);
            qsort(cand, (size_t)n_cand, sizeof *cand, pos_desc);
            int commit = n_over >= n_s ? n_over : (n_s < n_cand ? n_s : n_cand);
            for (int c = 0; c < commit; c++)
                canvas[b0 + cand[c].pos] = x0[cand[c].pos];
            if (hooks && hooks->step_end)
                hooks->step_end(hooks->user, (int)(b - first), s, commit, n_cand - commit);
        }
        /* The schedule commits L tokens in `steps` steps; guard anyway. */
        for (int i = 0; i < L; i++) {
            if (canvas[b0 + i] == tok->mask) {
                tide_error("generation: block %lld still has masks after %d steps", (long long)b,
                           steps);
                rc = TIDE_E_INVAL;
                goto done;
            }
        }
        /* The last step's K/V predate its commits: write the final ones. */
        if (!p->recompute) {
            if ((rc = ops->forward(m, canvas + b0, L, b0, NULL)) != TIDE_OK)
                goto done;
            out->forwards++;
        }
        out->blocks++;
        end = b0 + L;
        int64_t cut = end;
        for (int64_t i = P; i < end; i++) {
            if (canvas[i] == tok->eos || (tok->stop >= 0 && canvas[i] == tok->stop)) {
                cut = i + 1;
                out->stopped = true;
                break;
            }
        }
        if (hooks && hooks->block_end)
            hooks->block_end(hooks->user, (int)(b - first), canvas + P, cut - P);
        if (out->stopped) {
            end = cut;
            break;
        }
    }
    out->n = end - P;
    out->ids = malloc(sizeof *out->ids * (size_t)(out->n ? out->n : 1));
    if (!out->ids) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    memcpy(out->ids, canvas + P, sizeof *out->ids * (size_t)out->n);
    out->seconds = gen_now() - t0;
done:
    free(canvas);
    free(logits);
    free(scratch);
    free(cand);
    free(x0);
    return rc;
}
