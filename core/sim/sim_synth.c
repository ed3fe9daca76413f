/* Synthetic routing traces with controllable popularity skew and
 * step-to-step stability (sim.h, docs/trace-format.md).
 *
 * Model: each MoE layer ranks its experts in a random order and gives the
 * expert of rank r the weight 1/(r+1)^skew. Every token of a block starts
 * from a "home" set of top_k distinct experts drawn by weight. At each
 * later step every slot of every token changes with probability `rate`:
 * a share `drift` of the changes redraw the home slot for good, the rest
 * replace it for this step only (a flicker). Persistent changes make the
 * similarity decay with step distance, flickers do not. The K/V pass of a
 * block routes like one more step; prefill blocks draw fresh sets. The rate
 * is calibrated by bisection so that the trace's adjacent-step cosine (the
 * statistic of `tide trace info`) is the one asked for. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "sim.h"
#include "tide/log.h"
#include "tide/status.h"
#include "tide/trace_write.h"

struct syn_rng {
    uint64_t s;
};

/* splitmix64 as a generator: fast, 2^64 period, good enough for traces. */
static uint64_t syn_next(struct syn_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double syn_unif(struct syn_rng *r)
{
    return (double)(syn_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

struct syn {
    const struct tide_synth_params *p;
    double q_drift, q_flick;
    struct syn_rng rng;
    double *cum;   /* [L][E] cumulative popularity */
    int32_t *home; /* [L][T][k] */
    int32_t *cur;  /* [L][T][k] */
};

static int32_t syn_draw(struct syn *g, int l)
{
    const uint32_t E = g->p->n_experts;
    const double *c = &g->cum[(size_t)l * E];
    double x = syn_unif(&g->rng) * c[E - 1];
    uint32_t lo = 0, hi = E - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (c[mid] > x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return (int32_t)lo;
}

static bool syn_in(const int32_t *row, uint32_t k, int32_t e)
{
    for (uint32_t j = 0; j < k; j++)
        if (row[j] == e)
            return true;
    return false;
}

/* A new expert for slot j of row, distinct from the row's others. */
static int32_t syn_fresh(struct syn *g, int l, const int32_t *row)
{
    int32_t e;
    do
        e = syn_draw(g, l);
    while (syn_in(row, g->p->top_k, e));
    return e;
}

static void syn_fill(struct syn *g, int l, int32_t *row)
{
    for (uint32_t j = 0; j < g->p->top_k; j++)
        row[j] = -1;
    for (uint32_t j = 0; j < g->p->top_k; j++)
        row[j] = syn_fresh(g, l, row);
}

static size_t syn_row(const struct syn *g, uint32_t l, uint32_t t)
{
    return ((size_t)l * g->p->block_length + t) * g->p->top_k;
}

/* Fresh home sets for every token of every layer. */
static void syn_new_block(struct syn *g)
{
    const struct tide_synth_params *p = g->p;
    for (uint32_t l = 0; l < p->n_layers; l++)
        for (uint32_t t = 0; t < p->block_length; t++) {
            int32_t *h = &g->home[syn_row(g, l, t)];
            syn_fill(g, (int)l, h);
            memcpy(&g->cur[syn_row(g, l, t)], h, sizeof *h * p->top_k);
        }
}

/* One step of change: drift the homes, then flicker. */
static void syn_evolve(struct syn *g)
{
    const struct tide_synth_params *p = g->p;
    const uint32_t k = p->top_k;
    for (uint32_t l = 0; l < p->n_layers; l++)
        for (uint32_t t = 0; t < p->block_length; t++) {
            int32_t *h = &g->home[syn_row(g, l, t)], *c = &g->cur[syn_row(g, l, t)];
            for (uint32_t j = 0; j < k; j++)
                if (syn_unif(&g->rng) < g->q_drift) {
                    h[j] = -1;
                    h[j] = syn_fresh(g, (int)l, h);
                }
            memcpy(c, h, sizeof *c * k);
            for (uint32_t j = 0; j < k; j++)
                if (syn_unif(&g->rng) < g->q_flick)
                    c[j] = syn_fresh(g, (int)l, c);
        }
}

static int syn_emit_all(struct syn *g, const struct tide_trace_sink *s, enum tide_trace_phase ph,
                        const int32_t *rows)
{
    const struct tide_synth_params *p = g->p;
    int rc = TIDE_OK;
    for (uint32_t l = 0; l < p->n_layers && rc == TIDE_OK; l++)
        rc = s->route(s->user, ph, l, p->block_length, &rows[syn_row(g, l, 0)]);
    return rc;
}

static int syn_run(const struct tide_synth_params *p, double rate, const struct tide_trace_sink *s)
{
    struct syn g = {
        .p = p,
        .q_drift = rate * p->drift,
        .q_flick = rate * (1 - p->drift),
        .rng = {p->seed * 0x2545f4914f6cdd1dull + 1},
    };
    const size_t L = p->n_layers, E = p->n_experts, cells = L * p->block_length * p->top_k;
    g.cum = malloc(sizeof *g.cum * L * E);
    g.home = malloc(sizeof *g.home * cells);
    g.cur = malloc(sizeof *g.cur * cells);
    int32_t *perm = malloc(sizeof *perm * E);
    int rc = g.cum && g.home && g.cur && perm ? TIDE_OK : TIDE_E_NOMEM;
    for (size_t l = 0; l < L && rc == TIDE_OK; l++) {
        for (size_t e = 0; e < E; e++)
            perm[e] = (int32_t)e;
        for (size_t e = E - 1; e > 0; e--) {
            size_t j = (size_t)(syn_next(&g.rng) % (e + 1));
            int32_t t = perm[e];
            perm[e] = perm[j];
            perm[j] = t;
        }
        double *c = &g.cum[l * E];
        for (size_t e = 0; e < E; e++)
            c[e] = 1.0 / pow((double)perm[e] + 1.0, p->skew);
        for (size_t e = 1; e < E; e++)
            c[e] += c[e - 1];
    }
    for (uint32_t q = 0; q < p->prompts && rc == TIDE_OK; q++) {
        if (s->prompt)
            rc = s->prompt(s->user, q, p->prompt_len);
        for (uint32_t b = 0; b < p->prompt_len / p->block_length && rc == TIDE_OK; b++) {
            syn_new_block(&g);
            rc = syn_emit_all(&g, s, TIDE_TRACE_PREFILL, g.cur);
        }
        for (uint32_t b = 0; b < p->blocks && rc == TIDE_OK; b++) {
            if (tide_stop_requested()) {
                rc = TIDE_E_INTERRUPTED;
                break;
            }
            rc = s->block(s->user, (int32_t)b, b == 0);
            uint32_t span = p->steps - p->min_steps + 1;
            uint32_t steps = p->min_steps + (uint32_t)(syn_next(&g.rng) % span);
            syn_new_block(&g);
            for (uint32_t st = 0; st < steps && rc == TIDE_OK; st++) {
                if (st)
                    syn_evolve(&g);
                if ((rc = s->step(s->user, (int32_t)st)) == TIDE_OK)
                    rc = syn_emit_all(&g, s, TIDE_TRACE_STEP, g.cur);
            }
            if (rc == TIDE_OK) {
                syn_evolve(&g);
                rc = syn_emit_all(&g, s, TIDE_TRACE_KV, g.cur);
            }
        }
    }
    free(g.cum);
    free(g.home);
    free(g.cur);
    free(perm);
    return rc;
}

/* ---- In memory, for calibration ---- */

struct syn_mem {
    uint32_t E, k;
    uint32_t *dense;
    struct tide_solver_fwd *fwd[2];
    size_t n_fwd[2], cap_fwd[2];
    uint16_t *ids;
    uint32_t *cnt;
    size_t n_pairs, cap_pairs;
    int32_t step;
};

static int mem_block(void *u, int32_t block, bool first)
{
    return TIDE_OK;
}

static int mem_step(void *u, int32_t step)
{
    ((struct syn_mem *)u)->step = step;
    return TIDE_OK;
}

static int mem_route(void *u, enum tide_trace_phase ph, uint32_t layer, uint32_t n,
                     const int32_t *ids)
{
    struct syn_mem *m = u;
    if (ph != TIDE_TRACE_STEP)
        return TIDE_OK;
    if (m->n_pairs + m->E > m->cap_pairs) {
        size_t c = 2 * (m->n_pairs + m->E);
        uint16_t *a = realloc(m->ids, c * sizeof *a);
        if (a)
            m->ids = a;
        uint32_t *b = realloc(m->cnt, c * sizeof *b);
        if (b)
            m->cnt = b;
        if (!a || !b)
            return TIDE_E_NOMEM;
        m->cap_pairs = c;
    }
    if (m->n_fwd[layer] == m->cap_fwd[layer]) {
        size_t c = 2 * m->cap_fwd[layer] + 64;
        struct tide_solver_fwd *f = realloc(m->fwd[layer], c * sizeof *f);
        if (!f)
            return TIDE_E_NOMEM;
        m->fwd[layer] = f;
        m->cap_fwd[layer] = c;
    }
    for (size_t a = 0; a < (size_t)n * m->k; a++)
        m->dense[ids[a]]++;
    struct tide_solver_fwd *f = &m->fwd[layer][m->n_fwd[layer]++];
    *f = (struct tide_solver_fwd){.phase = TIDE_TRACE_STEP, .step = m->step, .tokens = n};
    f->ids = (const uint16_t *)(uintptr_t)m->n_pairs;
    for (uint32_t e = 0; e < m->E; e++)
        if (m->dense[e]) {
            m->ids[m->n_pairs] = (uint16_t)e;
            m->cnt[m->n_pairs++] = m->dense[e];
            m->dense[e] = 0;
            f->n_active++;
        }
    return TIDE_OK;
}

/* The all-layer adjacent-step cosine of a calibration sample at `rate`. */
static int syn_measure(const struct tide_synth_params *p, double rate, double *cos1)
{
    struct syn_mem m = {.E = p->n_experts, .k = p->top_k};
    m.dense = calloc(p->n_experts, sizeof *m.dense);
    if (!m.dense)
        return TIDE_E_NOMEM;
    const struct tide_trace_sink s = {
        .block = mem_block, .step = mem_step, .route = mem_route, .user = &m};
    int rc = syn_run(p, rate, &s);
    if (rc == TIDE_OK) {
        const uint32_t L = p->n_layers;
        for (uint32_t l = 0; l < L; l++)
            for (size_t j = 0; j < m.n_fwd[l]; j++) {
                size_t off = (size_t)(uintptr_t)m.fwd[l][j].ids;
                m.fwd[l][j].ids = m.ids + off;
                m.fwd[l][j].cnt = m.cnt + off;
            }
        double cos[3], jac[3];
        const struct tide_solver_fwd *const fw[2] = {m.fwd[0], m.fwd[1]};
        tide_sim_similarity(fw, m.n_fwd, (int)L, 1, cos, jac, NULL);
        *cos1 = cos[L];
    }
    free(m.dense);
    free(m.fwd[0]);
    free(m.fwd[1]);
    free(m.ids);
    free(m.cnt);
    return rc;
}

int tide_synth_calibrate(const struct tide_synth_params *p, double *rate)
{
    if (p->similarity >= 1) {
        *rate = 0;
        return TIDE_OK;
    }
    /* A sample of two layers with ~4000 step pairs, fixed seed. */
    struct tide_synth_params q = *p;
    q.n_layers = p->n_layers < 2 ? p->n_layers : 2;
    q.prompts = 1;
    q.prompt_len = 0;
    uint32_t per_block = (p->min_steps + p->steps) / 2;
    per_block = per_block > 1 ? per_block - 1 : 1;
    q.blocks = 2000 / (q.n_layers * per_block) + 2;
    q.seed = p->seed ^ 0x5eedca1bull;
    double lo = 0, hi = 1, c_hi;
    int rc = syn_measure(&q, 1.0, &c_hi);
    if (rc != TIDE_OK)
        return rc;
    if (c_hi > p->similarity) {
        tide_error("trace synth: similarity %.4f is below what fully random steps give at skew "
                   "%.2f (%.4f); raise it or lower the skew",
                   p->similarity, p->skew, c_hi);
        return TIDE_E_RANGE;
    }
    for (int it = 0; it < 30 && rc == TIDE_OK; it++) {
        double mid = 0.5 * (lo + hi), c;
        if ((rc = syn_measure(&q, mid, &c)) != TIDE_OK)
            break;
        if (c > p->similarity)
            lo = mid;
        else
            hi = mid;
    }
    *rate = 0.5 * (lo + hi);
    return rc;
}

/* ---- To a file ---- */

int tide_synth_write(const char *path, bool overwrite, const struct tide_synth_params *p,
                     double rate)
{
    char model[256];
    snprintf(model, sizeof model,
             "synthetic: skew %.3g, similarity %.4g (rate %.5f), drift %.2g, seed %llu", p->skew,
             p->similarity, rate, p->drift, (unsigned long long)p->seed);
    const struct tide_trace_header h = {
        .n_layers = p->n_layers,
        .n_experts = p->n_experts,
        .top_k = p->top_k,
        .hidden = p->hidden,
        .inter = p->inter,
        .expert_bytes = tide_expert_bytes(p->hidden, p->inter),
        .block_length = p->block_length,
        .steps = p->steps,
        .threshold = 0,
        .model = model,
    };
    struct tide_trace_writer *w;
    int rc = tide_trace_writer_open(path, false, overwrite, &h, &w);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_trace_sink s = tide_trace_writer_sink(w);
    rc = syn_run(p, rate, &s);
    int crc = tide_trace_writer_close(w, rc == TIDE_OK);
    return rc != TIDE_OK ? rc : crc;
}
