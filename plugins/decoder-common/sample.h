/* decoder-common: one position's token and confidence, and one step's
 * transfer schedule and commit order, as the LLaDA2 family's official code
 * writes them (modeling_llada2_moe.py: _sample_with_temperature_topk_topp,
 * _get_num_transfer_tokens, and the threshold commit of generate()). Rule
 * names (R2, R9, R10, R11) are those of docs/decoding.md.
 *
 * The row kernels below are the hot loops over the vocabulary: each is a
 * plain reduction so that it can be vectorised on its own. The greedy pick
 * over unfiltered logits is dc_greedy_pick (probs.h): argmax and the
 * softmax sum in one vectorised pass. */
#ifndef DECODER_COMMON_SAMPLE_H
#define DECODER_COMMON_SAMPLE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "decoder-common/probs.h"
#include "decoder-common/rng.h"
#include "tide/decoder.h"

/* The official _sample_with_temperature_topk_topp, as parameters. */
struct dc_sampler {
    double temperature; /* logits are divided by it when > 0 and != 1 */
    bool greedy;        /* argmax (lowest id on ties) instead of a draw */
    int top_k;          /* 0 = off */
    double top_p;       /* >= 1 = off */
    int32_t skip;       /* a token left out of everything (mask_in_argmax = false), or -1 */
    bool plain;         /* argmax of the logits as they are: no scaling, top-k or top-p */
};

struct dc_cand {
    double s;
    int32_t id;
};

/* Scratch for one row, [vocab] each (NULL for a plain sampler). */
struct dc_scratch {
    double *s;           /* the filtered logits; -inf = removed */
    double *tmp;         /* quickselect */
    struct dc_cand *ord; /* top-p order */
};

static inline int dc_scratch_init(struct dc_scratch *sc, const struct dc_sampler *sp, int V)
{
    memset(sc, 0, sizeof *sc);
    if (sp->plain)
        return 0;
    sc->s = malloc(sizeof *sc->s * (size_t)V);
    sc->tmp = malloc(sizeof *sc->tmp * (size_t)V);
    sc->ord = malloc(sizeof *sc->ord * (size_t)V);
    return sc->s && sc->tmp && sc->ord ? 0 : -1;
}

static inline void dc_scratch_free(struct dc_scratch *sc)
{
    free(sc->s);
    free(sc->tmp);
    free(sc->ord);
    memset(sc, 0, sizeof *sc);
}

/* Largest filtered logit and its first id. */
static inline double dc_srow_max(const double *s, int V, int32_t *arg)
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

/* The softmax sum over the filtered logits (-inf entries contribute nothing). */
static inline double dc_srow_sumexp(const double *s, int V, double mx)
{
    double sum = 0;
    for (int v = 0; v < V; v++)
        if (s[v] > -INFINITY)
            sum += exp(s[v] - mx);
    return sum;
}

/* The k-th largest of a[0..n) (k in [1, n]), counting repeats; a is reordered. */
static inline double dc_kth_largest(double *a, int n, int k)
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
static inline void dc_top_k(double *s, int V, int k, double *tmp)
{
    if (k <= 0 || k >= V)
        return;
    memcpy(tmp, s, sizeof *tmp * (size_t)V);
    const double kth = dc_kth_largest(tmp, V, k);
    for (int v = 0; v < V; v++)
        if (s[v] < kth)
            s[v] = -INFINITY;
}

/* Descending value, then ascending id (torch.sort leaves the order of ties
 * unspecified; this one is fixed). */
static inline int dc_cand_desc(const void *a, const void *b)
{
    const struct dc_cand *x = a, *y = b;
    if (x->s != y->s)
        return x->s < y->s ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* R9.4, _top_p_logits: sort descending, softmax, cumulative sum; keep the
 * first token and every token whose preceding cumulative mass is <= p, i.e.
 * the smallest prefix whose mass exceeds p. */
static inline void dc_top_p(double *s, int V, double p, struct dc_cand *ord)
{
    if (p >= 1.0)
        return;
    int n = 0;
    for (int v = 0; v < V; v++)
        if (s[v] > -INFINITY)
            ord[n++] = (struct dc_cand){s[v], v};
    qsort(ord, (size_t)n, sizeof *ord, dc_cand_desc);
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

/* Does R9 draw a uniform for a row (one per row, only then)? */
static inline bool dc_sampler_draws(const struct dc_sampler *sp)
{
    return !sp->plain && !sp->greedy;
}

/* R9 with the row's uniform u already drawn (ignored when the sampler does
 * not draw). */
static inline int32_t dc_sample_u(const float *logits, int V, const struct dc_sampler *sp, double u,
                                  struct dc_scratch *sc, double *conf)
{
    int32_t best;
    if (sp->plain) {
        dc_greedy_pick(logits, V, sp->skip, &best, conf);
        return best;
    }
    double *s = sc->s;
    const bool scale = sp->temperature > 0 && sp->temperature != 1.0;
    for (int v = 0; v < V; v++)
        s[v] = scale ? (double)logits[v] / sp->temperature : (double)logits[v];
    if (sp->skip >= 0)
        s[sp->skip] = -INFINITY;
    dc_top_k(s, V, sp->top_k, sc->tmp);
    dc_top_p(s, V, sp->top_p, sc->ord);
    const double mx = dc_srow_max(s, V, &best);
    const double z = dc_srow_sumexp(s, V, mx);
    if (sp->greedy) {
        *conf = 1.0 / z;
        return best;
    }
    const double r = u * z;
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

/* R9: the token for one position and its confidence, the probability of that
 * token under the scaled and filtered distribution. Greedy: argmax; else a
 * draw u * Z against the running sum in id order (one uniform from rng). */
static inline int32_t dc_sample(const float *logits, int V, const struct dc_sampler *sp,
                                struct dc_rng *rng, struct dc_scratch *sc, double *conf)
{
    return dc_sample_u(logits, V, sp, dc_sampler_draws(sp) ? dc_rng_uniform(rng) : 0.0, sc, conf);
}

/* R9 for every row a step decides on, the rows spread over threads: a row's
 * pick is a pass over the whole vocabulary, too long for one thread; a plain
 * pick is spread by parts of rows (dc_greedy_part) so no thread idles on a
 * step's last rows (docs/cpu-performance.md, appendix). The results are those of
 * dc_sample row by row, in row order: the uniforms are drawn first, one per
 * row in row order, and each row's result depends on that row alone.
 * Threads: OpenMP's current count (the CPU backend sets its own), at most
 * the rows, one without OpenMP; run on the engine's own team when the
 * decoder's host offers one (dc_rows_host), else on OpenMP's. */
struct dc_rows {
    int threads; /* scratch slots */
    /* The engine's threads (tide_decoder_host parallel), or NULL: OpenMP. */
    void (*par)(void *user, int nt_max, void (*fn)(void *ctx, int tid, int nt), void *ctx);
    void *par_user;
    int max_rows;               /* rows per call, at most */
    struct dc_scratch *sc;      /* [threads] */
    double *u;                  /* [max_rows] the step's uniforms */
    int32_t *id;                /* [max_rows] what the last dc_sample_rows chose: tokens */
    double *conf;               /* [max_rows] and their confidences */
    int n_parts;                /* a plain sampler's parts per row (dc_greedy_parts of the
                                 * init's V; a longer row goes row by row), else 0 */
    struct dc_pick_part *parts; /* [max_rows][n_parts] */
};

static inline int dc_rows_max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static inline void dc_rows_free(struct dc_rows *r)
{
    for (int t = 0; r->sc && t < r->threads; t++)
        dc_scratch_free(&r->sc[t]);
    free(r->sc);
    free(r->u);
    free(r->id);
    free(r->conf);
    free(r->parts);
    memset(r, 0, sizeof *r);
}

/* Returns 0, or -1 when out of memory (r is then empty). */
static inline int dc_rows_init(struct dc_rows *r, const struct dc_sampler *sp, int V, int max_rows)
{
    memset(r, 0, sizeof *r);
    r->threads = dc_rows_max_threads();
    r->max_rows = max_rows;
    r->sc = calloc((size_t)r->threads, sizeof *r->sc);
    const size_t rows = (size_t)(max_rows > 0 ? max_rows : 1);
    r->u = malloc(sizeof *r->u * rows);
    r->id = malloc(sizeof *r->id * rows);
    r->conf = malloc(sizeof *r->conf * rows);
    int rc = r->sc && r->u && r->id && r->conf ? 0 : -1;
    if (!rc && sp->plain) {
        r->n_parts = dc_greedy_parts(V);
        r->parts = malloc(sizeof *r->parts * rows * (size_t)r->n_parts);
        rc = r->parts ? 0 : -1;
    }
    for (int t = 0; !rc && t < r->threads; t++)
        rc = dc_scratch_init(&r->sc[t], sp, V);
    if (rc) {
        if (!r->sc)
            r->threads = 0;
        dc_rows_free(r);
    }
    return rc;
}

/* Run dc_sample_rows on the team of the engine that drives h (the one
 * that runs the forward), when it offers one. */
static inline void dc_rows_host(struct dc_rows *r, const struct tide_decoder_host *h)
{
    if (TIDE_DECODER_HAS(h, struct tide_decoder_host, parallel) && h->parallel) {
        r->par = h->parallel;
        r->par_user = h->user;
    }
}

/* One call's work, for thread me of nt: pass 0 picks (whole rows, or parts
 * of rows), pass 1 merges the parts of each row. */
struct dc_rows_job {
    struct dc_rows *r;
    const struct dc_sampler *sp;
    const float *const *rows;
    int n, V, P, pass;
    bool by_parts;
};

static inline void dc_rows_work(void *c, int me, int nt)
{
    const struct dc_rows_job *j = (const struct dc_rows_job *)c;
    struct dc_rows *r = j->r;
    if (j->by_parts && j->pass == 0) {
        for (int it = me; it < j->n * j->P; it += nt)
            dc_greedy_part(j->rows[it / j->P], j->V, j->sp->skip, it % j->P, &r->parts[it]);
    } else if (j->by_parts) {
        for (int k = me; k < j->n; k += nt)
            dc_greedy_finish(&r->parts[(size_t)k * (size_t)j->P], j->P, &r->id[k], &r->conf[k]);
    } else {
        for (int k = me; k < j->n; k += nt)
            r->id[k] = dc_sample_u(j->rows[k], j->V, j->sp, r->u[k], &r->sc[me], &r->conf[k]);
    }
}

/* r->id[j] and r->conf[j] for rows[j], j < n <= r->max_rows. */
static inline void dc_sample_rows(struct dc_rows *r, const struct dc_sampler *sp,
                                  const float *const *rows, int n, int V, struct dc_rng *rng)
{
    if (n <= 0)
        return;
    const bool draws = dc_sampler_draws(sp);
    for (int j = 0; j < n; j++)
        r->u[j] = draws ? dc_rng_uniform(rng) : 0.0;
    int threads = dc_rows_max_threads();
    threads = threads < r->threads ? threads : r->threads;
    /* A plain pick goes a part of a row at a time (dc_greedy_part): one row
     * is work for every thread, and the last rows of a step do not leave
     * threads idle. */
    const bool by_parts = sp->plain && r->parts && dc_greedy_parts(V) <= r->n_parts;
    const int P = by_parts ? dc_greedy_parts(V) : 1, items = n * P;
    threads = threads < items ? threads : items;
    struct dc_rows_job job = {r, sp, rows, n, V, P, 0, by_parts};
    if (r->par && threads > 1) {
        r->par(r->par_user, threads, dc_rows_work, &job);
        if (by_parts) {
            job.pass = 1;
            r->par(r->par_user, threads, dc_rows_work, &job);
        }
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
#ifdef _OPENMP
        const int me = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int me = 0, nt = 1;
#endif
        dc_rows_work(&job, me, nt);
        if (by_parts) {
#ifdef _OPENMP
#pragma omp barrier
#endif
            struct dc_rows_job fin = job;
            fin.pass = 1;
            dc_rows_work(&fin, me, nt);
        }
    }
}

/* R2, _get_num_transfer_tokens: step s of n positions over `steps` steps
 * commits n / steps, one more in the first n % steps steps (0 for every step
 * past n). */
static inline int dc_schedule(int n, int steps, int s)
{
    return n / steps + (s < n % steps ? 1 : 0);
}

/* A candidate position and its confidence. */
struct dc_pos {
    double conf;
    int32_t pos;
};

/* Descending confidence; the lower position first on ties (torch.topk leaves
 * their order unspecified). */
static inline int dc_pos_desc(const void *a, const void *b)
{
    const struct dc_pos *x = a, *y = b;
    if (x->conf != y->conf)
        return x->conf < y->conf ? 1 : -1;
    return x->pos - y->pos;
}

/* R10/R11: cand[0..n) are the masked positions with their confidence. Sorts
 * them by confidence (descending; lower position on ties) and returns how
 * many of the first to commit: all those strictly above the threshold when
 * there are at least n_min of them (with n_min 0 that may be none), else
 * min(n_min, n). */
static inline int dc_commit_count(struct dc_pos *cand, int n, int n_min, double threshold)
{
    int over = 0;
    for (int i = 0; i < n; i++)
        over += cand[i].conf > threshold;
    qsort(cand, (size_t)n, sizeof *cand, dc_pos_desc);
    if (over >= n_min)
        return over;
    return n_min < n ? n_min : n;
}

#endif
