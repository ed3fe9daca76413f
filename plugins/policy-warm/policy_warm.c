/* policy-warm: a prompt-similarity warm start (after Remoe's SPS) in front
 * of the cost-aware rule of policy-cost.
 *
 * A library holds, for earlier prompts, the prompt's vector (the mean of its
 * input embeddings) and each MoE layer's mean rows per denoising step of
 * every expert over the prompt's first generated block. It is read from
 * routing traces (`library`, traces recorded by tide run / tide bench carry
 * the prompt vectors) and, with `learn`, grows by every prompt this policy
 * serves. When a generation starts (prompt_begin), the `neighbours` library
 * prompts of highest cosine similarity to this prompt's vector are averaged,
 * weighted by their similarity (only positive ones count); the first
 * generated block then starts its per-expert estimates from that prediction
 * instead of from the previous prompt's state (a cold start). Everything else
 * is policy-cost's rent-or-buy rule (policy-common/rentbuy.h), so
 * policy-warm minus policy-cost is what the warm start is worth. Without a
 * prompt vector (a model or trace without one) or an empty library it
 * behaves exactly as policy-cost.
 *
 * Thread safety: plan() calls for different layers may run concurrently
 * (state and scratch are per layer); prompt_begin() and block_begin() must
 * not overlap plan(). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy-common/costs.h"
#include "policy-common/initial.h"
#include "policy-common/plan.h"
#include "policy-common/rentbuy.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"
#include "tide/trace.h"

#define WARM_NAME "policy-warm"

static const struct tide_option warm_options[] = {
    {"library", TIDE_OPT_STRING, "",
     "routing traces (comma-separated) whose prompts, with their prompt vectors, seed the "
     "library; empty = start with none",
     NULL, NULL},
    {"learn", TIDE_OPT_BOOL, "true",
     "add every prompt served (its vector and first block's rows) to the library", NULL, NULL},
    {"neighbours", TIDE_OPT_INT, "3", "library prompts averaged for a warm start", NULL,
     "[1,1024]"},
    {"max_prompts", TIDE_OPT_INT, "4096",
     "most prompts the library keeps; beyond, the oldest learned one is replaced", NULL, "[1,]"},
    POLC_OPTION_INITIAL,
    POLC_OPTION_COUNTS_FILE,
    POLC_RB_OPTIONS,
    {NULL, 0, NULL, NULL, NULL, NULL},
};

/* One library prompt. */
struct warm_entry {
    float *vec;  /* [dim], unit length */
    float *rows; /* [n_moe_layers][n_experts] mean rows per step, first generated block */
};

/* A prompt being collected (from a trace, or served). */
struct warm_acc {
    float *vec; /* [dim], NULL until the prompt's vector is known */
    bool have_vec;
    double *sum; /* [n_moe_layers][n_experts] rows over the first generated block's steps */
    int *steps;  /* [n_moe_layers] */
};

struct tide_policy {
    struct tide_policy_shape shape;
    struct polc_initial init;
    struct polc_rb rb;
    int dim; /* prompt-vector length; 0 until the first vector */
    struct warm_entry *lib;
    int n_lib, cap_lib, next_replace;
    int neighbours, max_prompts;
    bool learn;
    struct warm_acc cur; /* the prompt being served */
    bool in_first;       /* the current block is its first generated one */
    float *prior;        /* [n_moe_layers][n_experts] prediction for the current prompt */
    bool have_prior;
    double *sim; /* [cap_lib] scratch */
    int32_t *nn; /* [neighbours] scratch */
    uint64_t warm_starts;
};

static void warm_acc_free(struct warm_acc *a)
{
    free(a->vec);
    free(a->sum);
    free(a->steps);
    memset(a, 0, sizeof *a);
}

static int warm_acc_init(struct tide_policy *p, struct warm_acc *a)
{
    const size_t L = (size_t)p->shape.n_moe_layers, E = (size_t)p->shape.n_experts;
    a->sum = calloc(L * E > 0 ? L * E : 1, sizeof *a->sum);
    a->steps = calloc(L ? L : 1, sizeof *a->steps);
    return a->sum && a->steps ? TIDE_OK : TIDE_E_NOMEM;
}

static void warm_acc_reset(struct tide_policy *p, struct warm_acc *a)
{
    const size_t L = (size_t)p->shape.n_moe_layers, E = (size_t)p->shape.n_experts;
    memset(a->sum, 0, sizeof *a->sum * L * E);
    memset(a->steps, 0, sizeof *a->steps * L);
    a->have_vec = false;
}

static void warm_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_lib; i++) {
        free(p->lib[i].vec);
        free(p->lib[i].rows);
    }
    free(p->lib);
    warm_acc_free(&p->cur);
    free(p->prior);
    free(p->sim);
    free(p->nn);
    polc_rb_free(&p->rb);
    polc_initial_free(&p->init);
    free(p);
}

/* Take vec[dim] as the collected prompt's vector, normalised. Returns false
 * (logged once by the caller) when its length differs from the library's. */
static int warm_set_vec(struct tide_policy *p, struct warm_acc *a, const float *vec, int dim,
                        const char *where)
{
    if (p->dim && dim != p->dim) {
        tide_warn("%s: %s: a prompt vector of %d entries, but the library's have %d; this "
                  "prompt gets no warm start and is not learned",
                  WARM_NAME, where, dim, p->dim);
        return TIDE_OK;
    }
    if (!a->vec && !(a->vec = malloc(sizeof *a->vec * (size_t)dim)))
        return TIDE_E_NOMEM;
    p->dim = dim;
    double n2 = 0;
    for (int i = 0; i < dim; i++)
        n2 += (double)vec[i] * vec[i];
    const double inv = n2 > 0 ? 1.0 / sqrt(n2) : 0.0;
    for (int i = 0; i < dim; i++)
        a->vec[i] = (float)(vec[i] * inv);
    a->have_vec = n2 > 0;
    return TIDE_OK;
}

/* Add the collected prompt to the library when it has a vector and steps. */
static int warm_commit(struct tide_policy *p, struct warm_acc *a, int max_prompts)
{
    const size_t L = (size_t)p->shape.n_moe_layers, E = (size_t)p->shape.n_experts;
    if (!a->have_vec || !L || !a->steps[0])
        return TIDE_OK;
    struct warm_entry *en;
    if (p->n_lib < max_prompts) {
        if (p->n_lib == p->cap_lib) {
            int n = p->cap_lib ? 2 * p->cap_lib : 16;
            if (n > max_prompts)
                n = max_prompts;
            struct warm_entry *lib = realloc(p->lib, sizeof *lib * (size_t)n);
            double *sim = realloc(p->sim, sizeof *sim * (size_t)n);
            if (lib)
                p->lib = lib;
            if (sim)
                p->sim = sim;
            if (!lib || !sim)
                return TIDE_E_NOMEM;
            p->cap_lib = n;
        }
        en = &p->lib[p->n_lib];
        en->vec = malloc(sizeof *en->vec * (size_t)p->dim);
        en->rows = malloc(sizeof *en->rows * L * E);
        if (!en->vec || !en->rows) {
            free(en->vec);
            free(en->rows);
            return TIDE_E_NOMEM;
        }
        p->n_lib++;
    } else {
        en = &p->lib[p->next_replace];
        p->next_replace = (p->next_replace + 1) % max_prompts;
    }
    memcpy(en->vec, a->vec, sizeof *en->vec * (size_t)p->dim);
    for (size_t l = 0; l < L; l++)
        for (size_t e = 0; e < E; e++)
            en->rows[l * E + e] =
                a->steps[l] ? (float)(a->sum[l * E + e] / (double)a->steps[l]) : 0.0f;
    return TIDE_OK;
}

/* Read the library prompts of one routing trace. */
static int warm_load_trace(struct tide_policy *p, const char *path, int max_prompts)
{
    struct tide_trace_reader *r;
    int rc = tide_trace_reader_open(path, &r);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_trace_header *h = tide_trace_reader_header(r);
    const int L = p->shape.n_moe_layers, E = p->shape.n_experts;
    if ((int)h->n_layers != L || (int)h->n_experts != E) {
        tide_error("%s: library trace %s records %u MoE layers x %u experts, but the model has "
                   "%d x %d",
                   WARM_NAME, path, h->n_layers, h->n_experts, L, E);
        tide_trace_reader_close(r);
        return TIDE_E_CONFIG;
    }
    struct warm_acc a = {0};
    rc = warm_acc_init(p, &a);
    const int before = p->n_lib;
    int prompts = 0;
    bool first = false;
    struct tide_trace_record rec;
    int got = 0;
    while (rc == TIDE_OK && (got = tide_trace_reader_next(r, &rec)) == 1) {
        switch (rec.type) {
        case TIDE_TREC_PROMPT:
            rc = warm_commit(p, &a, max_prompts);
            warm_acc_reset(p, &a);
            first = false;
            prompts++;
            break;
        case TIDE_TREC_PROMPT_VEC:
            rc = warm_set_vec(p, &a, rec.vec, (int)rec.dim, path);
            break;
        case TIDE_TREC_BLOCK:
            first = rec.first_generated;
            break;
        case TIDE_TREC_ROUTE:
            if (first && rec.phase == TIDE_TRACE_STEP) {
                double *sum = &a.sum[(size_t)rec.layer * (size_t)E];
                for (size_t i = 0; i < (size_t)rec.n * h->top_k; i++)
                    sum[rec.ids[i]] += 1;
                a.steps[rec.layer]++;
            }
            break;
        default:
            break;
        }
    }
    if (got < 0)
        rc = got;
    if (rc == TIDE_OK)
        rc = warm_commit(p, &a, max_prompts);
    warm_acc_free(&a);
    tide_trace_reader_close(r);
    if (rc == TIDE_OK && p->n_lib == before)
        tide_warn("%s: library trace %s has no prompt with a prompt vector (%d prompts; traces "
                  "of format version 1 or of a model without prompt vectors have none)",
                  WARM_NAME, path, prompts);
    else if (rc == TIDE_OK)
        tide_info("%s: library: %d prompts from %s", WARM_NAME, p->n_lib - before, path);
    return rc;
}

static int warm_load_library(struct tide_policy *p, const char *list, int max_prompts)
{
    char *buf = strdup(list);
    if (!buf)
        return TIDE_E_NOMEM;
    int rc = TIDE_OK;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && rc == TIDE_OK; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        if (*t)
            rc = warm_load_trace(p, t, max_prompts);
    }
    free(buf);
    return rc;
}

static int warm_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                       struct tide_policy **out)
{
    int rc = polc_check_create(WARM_NAME, shape, opts);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_policy_costs *c = polc_costs_get(WARM_NAME, shape, true, &rc);
    if (!c)
        return rc;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    p->learn = tide_opts_bool(opts, "learn");
    p->neighbours = (int)tide_opts_int(opts, "neighbours");
    const int64_t mp = tide_opts_int(opts, "max_prompts");
    const int max_prompts = mp > 1 << 20 ? 1 << 20 : (int)mp;
    p->max_prompts = max_prompts;
    const size_t L = (size_t)shape->n_moe_layers, E = (size_t)shape->n_experts;
    rc = polc_rb_init(&p->rb, WARM_NAME, &p->shape, c, opts);
    if (rc == TIDE_OK)
        rc = polc_initial_init(&p->init, WARM_NAME, shape, opts);
    if (rc == TIDE_OK)
        rc = warm_acc_init(p, &p->cur);
    p->prior = malloc(sizeof *p->prior * (L * E > 0 ? L * E : 1));
    p->nn = malloc(sizeof *p->nn * (size_t)p->neighbours);
    if (rc == TIDE_OK && (!p->prior || !p->nn))
        rc = TIDE_E_NOMEM;
    if (rc == TIDE_OK)
        rc = warm_load_library(p, tide_opts_str(opts, "library"), max_prompts);
    if (rc != TIDE_OK) {
        warm_destroy(p);
        return rc;
    }
    *out = p;
    return TIDE_OK;
}

static int warm_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, WARM_NAME, layer, out);
}

/* The prediction for the current prompt from its nearest library prompts. */
static void warm_predict(struct tide_policy *p)
{
    p->have_prior = false;
    if (!p->cur.have_vec || !p->n_lib)
        return;
    for (int i = 0; i < p->n_lib; i++) {
        double s = 0;
        for (int j = 0; j < p->dim; j++)
            s += (double)p->lib[i].vec[j] * p->cur.vec[j];
        p->sim[i] = s;
    }
    /* The top `neighbours` by similarity, ties to the earlier entry. */
    int k = 0;
    for (int i = 0; i < p->n_lib; i++) {
        int j;
        if (k < p->neighbours)
            j = k++;
        else if (p->sim[i] > p->sim[p->nn[k - 1]])
            j = k - 1;
        else
            continue;
        while (j > 0 && p->sim[p->nn[j - 1]] < p->sim[i]) {
            p->nn[j] = p->nn[j - 1];
            j--;
        }
        p->nn[j] = i;
    }
    const size_t LE = (size_t)p->shape.n_moe_layers * (size_t)p->shape.n_experts;
    double wsum = 0;
    memset(p->prior, 0, sizeof *p->prior * LE);
    for (int i = 0; i < k; i++) {
        const double w = p->sim[p->nn[i]];
        if (w <= 0)
            continue;
        wsum += w;
        const float *rows = p->lib[p->nn[i]].rows;
        for (size_t x = 0; x < LE; x++)
            p->prior[x] += (float)(w * rows[x]);
    }
    if (wsum <= 0)
        return;
    for (size_t x = 0; x < LE; x++)
        p->prior[x] = (float)(p->prior[x] / wsum);
    p->have_prior = true;
}

static void warm_prompt_begin(struct tide_policy *p, uint32_t prompt_len, const float *vec, int dim)
{
    (void)prompt_len;
    /* The previous prompt is finished: learn it (an allocation failure only
     * loses this library entry, so it is not an error of the generation). */
    if (p->learn && warm_commit(p, &p->cur, p->max_prompts) != TIDE_OK)
        tide_warn("%s: out of memory: a prompt was not added to the library", WARM_NAME);
    warm_acc_reset(p, &p->cur);
    p->in_first = false;
    if (vec && dim > 0 && warm_set_vec(p, &p->cur, vec, dim, "prompt_begin") != TIDE_OK)
        tide_warn("%s: out of memory: this prompt gets no warm start", WARM_NAME);
    warm_predict(p);
}

static void warm_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    (void)block;
    p->in_first = first_generated;
    const bool warm = first_generated && p->have_prior;
    p->warm_starts += warm;
    polc_rb_block_begin(&p->rb, warm ? p->prior : NULL);
}

static int warm_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    int n_res = polc_check_view(WARM_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    if (p->in_first && p->learn) {
        const size_t E = (size_t)p->shape.n_experts;
        double *sum = &p->cur.sum[(size_t)v->layer * E];
        for (size_t e = 0; e < E; e++)
            sum[e] += v->counts[e];
        p->cur.steps[v->layer]++;
    }
    polc_rb_plan(&p->rb, v, n_res, out);
    return TIDE_OK;
}

static const struct tide_policy_ops warm_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = warm_create,
    .destroy = warm_destroy,
    .initial = warm_initial,
    .block_begin = warm_block_begin,
    .plan = warm_plan,
    .prompt_begin = warm_prompt_begin,
};

static const struct tide_plugin_desc warm_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = WARM_NAME,
    .version = "0.1.0",
    .summary = "prompt-similarity warm start: the first block starts from the nearest earlier "
               "prompts' experts, then policy-cost's rule",
    .ops = &warm_ops,
    .options = warm_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(warm_desc)
