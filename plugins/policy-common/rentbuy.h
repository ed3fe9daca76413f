/* The cost-aware "rent or buy" rule, shared by policy-cost and policy-warm
 * (header-only, static inline).
 *
 * Per MoE layer and denoising step:
 *  - each expert's estimated rows per step for the rest of the block is an
 *    exponential average of its counts in this block (`alpha` on the newest
 *    step); at block begin it starts from `carry` x the last block's
 *    estimate plus (1 - carry) x the expert's long-term mean rows per step
 *    (decaying over `memory` blocks), or from a prior the caller supplies;
 *  - an active expert that is not resident is "rented" (runs on the host)
 *    until buying it pays: it is promoted, evicting the resident of least
 *    estimated rows (free slots first), when the modelled time it saves now
 *    plus the per-step saving at the estimated rows over the expected
 *    remaining steps of the block, the step k ahead weighted q^k, exceeds
 *    `hysteresis` promotions' worth of time. q (`persistence`) is the chance
 *    that an expert active at a step is active at the next, measured per
 *    layer: flickering routing buys less. Candidates go busiest (by estimate)
 *    first and only past a resident estimated less busy; the first that does
 *    not pay ends the step's promotions;
 *  - the step's active experts are placed to minimise the modelled time:
 *    the non-resident ones on the host, and as many residents on the host as
 *    balance the device and the host path (`balance`).
 * The expected steps per block are the mean over the blocks seen, starting
 * from the shape's max_steps. Per-layer state and scratch: plan() calls for
 * different layers may run concurrently. */
#ifndef TIDE_POLICY_COMMON_RENTBUY_H
#define TIDE_POLICY_COMMON_RENTBUY_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy-common/costs.h"
#include "policy-common/plan.h"
#include "tide/option.h"
#include "tide/policy.h"
#include "tide/status.h"

/* Option-table entries of the rule (list all five, POLC_RB_OPTIONS). */
#define POLC_RB_OPTION_ALPHA                                                                       \
    {                                                                                              \
        "alpha", TIDE_OPT_FLOAT, "0.7",                                                            \
            "weight of the newest step in each expert's estimated rows per step (1 = the last "    \
            "step only)",                                                                          \
            NULL, "[0.01,1]"                                                                       \
    }
#define POLC_RB_OPTION_CARRY                                                                       \
    {                                                                                              \
        "carry", TIDE_OPT_FLOAT, "0.3",                                                            \
            "share of a block's estimate carried into the next block; the rest is the expert's "   \
            "long-term mean",                                                                      \
            NULL, "[0,1]"                                                                          \
    }
#define POLC_RB_OPTION_MEMORY                                                                      \
    {                                                                                              \
        "memory", TIDE_OPT_INT, "8", "blocks over which the long-term mean rows decay", NULL,      \
            "[1,]"                                                                                 \
    }
#define POLC_RB_OPTION_HYSTERESIS                                                                  \
    {                                                                                              \
        "hysteresis", TIDE_OPT_FLOAT, "0",                                                         \
            "a promotion must save this many promotions' worth of modelled time beyond its cost "  \
            "(against flapping)",                                                                  \
            NULL, "[0,]"                                                                           \
    }
#define POLC_RB_OPTION_BALANCE                                                                     \
    {                                                                                              \
        "balance", TIDE_OPT_BOOL, "true",                                                          \
            "run residents on the host when that lowers the modelled time (device-bound steps)",   \
            NULL, NULL                                                                             \
    }
#define POLC_RB_OPTION_PERSISTENCE                                                                 \
    {                                                                                              \
        "persistence", TIDE_OPT_STRING, "auto",                                                    \
            "chance that an expert active at a step is active at the next, which discounts "       \
            "later steps' savings: auto = measured per layer, or a number in (0, 1] (1 = no "      \
            "discount)",                                                                           \
            NULL, NULL                                                                             \
    }
#define POLC_RB_OPTIONS                                                                            \
    POLC_RB_OPTION_ALPHA, POLC_RB_OPTION_CARRY, POLC_RB_OPTION_MEMORY, POLC_RB_OPTION_HYSTERESIS,  \
        POLC_RB_OPTION_PERSISTENCE, POLC_RB_OPTION_BALANCE

struct polc_rb_layer {
    double *est;          /* [n_experts] estimated rows per step, this block */
    double *pop;          /* [n_experts] decayed rows (long-term) */
    double pop_w;         /* decayed steps: pop / pop_w is the mean rows per step */
    uint8_t *res;         /* [n_experts] scratch: residency as planned */
    int32_t *order;       /* [n_experts] scratch: candidates, then victims */
    struct polc_item *it; /* [n_experts] scratch */
    int steps;            /* steps seen in the current block */
    uint8_t *was;         /* [n_experts] active at the layer's previous step of the block */
    double kept, seen;    /* decayed: experts active at a step and at the next, at a step */
};

struct polc_rb {
    const struct tide_policy_shape *shape; /* the policy's copy */
    const struct tide_policy_costs *c;
    double alpha, carry, decay, hysteresis;
    double persistence; /* fixed q in (0, 1], or 0: measured */
    bool balance;
    double steps_sum; /* steps of the finished blocks, plus the prior */
    double blocks;    /* finished blocks, plus one for the prior */
    bool in_block;
    struct polc_rb_layer *ly; /* [n_moe_layers] */
};

static inline void polc_rb_free(struct polc_rb *rb)
{
    for (int l = 0; rb->ly && l < rb->shape->n_moe_layers; l++) {
        struct polc_rb_layer *y = &rb->ly[l];
        free(y->est);
        free(y->pop);
        free(y->res);
        free(y->order);
        free(y->it);
        free(y->was);
    }
    free(rb->ly);
    rb->ly = NULL;
}

/* Set up the rule for `shape` (kept by pointer: the policy's own copy) with
 * costs c (required) and the POLC_RB_OPTIONS of opts. Returns TIDE_OK,
 * TIDE_E_CONFIG (a bad persistence, logged with `who`) or TIDE_E_NOMEM;
 * free with polc_rb_free either way. */
static inline int polc_rb_init(struct polc_rb *rb, const char *who,
                               const struct tide_policy_shape *shape,
                               const struct tide_policy_costs *c, const struct tide_opts *opts)
{
    memset(rb, 0, sizeof *rb);
    const char *q = tide_opts_str(opts, "persistence");
    if (strcmp(q, "auto")) {
        char *end;
        rb->persistence = strtod(q, &end);
        if (end == q || *end || !(rb->persistence > 0 && rb->persistence <= 1)) {
            tide_error("%s: persistence = %s is out of range: must be auto or a number in (0, 1]",
                       who, q);
            return TIDE_E_CONFIG;
        }
    }
    rb->shape = shape;
    rb->c = c;
    rb->alpha = tide_opts_float(opts, "alpha");
    rb->carry = tide_opts_float(opts, "carry");
    rb->hysteresis = tide_opts_float(opts, "hysteresis");
    rb->balance = tide_opts_bool(opts, "balance");
    const int max_steps =
        TIDE_SHAPE_HAS(shape, max_steps) && shape->max_steps > 0 ? shape->max_steps : 32;
    rb->steps_sum = max_steps;
    rb->blocks = 1;
    /* Long-term mean: each step's weight decays to about 1/e over `memory` blocks. */
    rb->decay = 1.0 - 1.0 / ((double)tide_opts_int(opts, "memory") * max_steps);
    const size_t L = (size_t)shape->n_moe_layers, E = (size_t)shape->n_experts;
    rb->ly = calloc(L ? L : 1, sizeof *rb->ly);
    if (!rb->ly)
        return TIDE_E_NOMEM;
    for (size_t l = 0; l < L; l++) {
        struct polc_rb_layer *y = &rb->ly[l];
        y->est = calloc(E, sizeof *y->est);
        y->pop = calloc(E, sizeof *y->pop);
        y->res = malloc(E);
        y->order = malloc(E * sizeof *y->order);
        y->it = malloc(E * sizeof *y->it);
        y->was = calloc(E, 1);
        if (!y->est || !y->pop || !y->res || !y->order || !y->it || !y->was)
            return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}

/* A block begins: fold the last block's length into the expected steps and
 * start each layer's estimates, from prior[l][e] (rows per step) when given,
 * else from the carried estimate and the long-term mean. */
static inline void polc_rb_block_begin(struct polc_rb *rb, const float *prior)
{
    const int L = rb->shape->n_moe_layers, E = rb->shape->n_experts;
    if (rb->in_block && L > 0 && rb->ly[0].steps > 0) {
        rb->steps_sum += rb->ly[0].steps;
        rb->blocks += 1;
    }
    rb->in_block = true;
    for (int l = 0; l < L; l++) {
        struct polc_rb_layer *y = &rb->ly[l];
        y->steps = 0;
        memset(y->was, 0, (size_t)E);
        for (int e = 0; e < E; e++) {
            if (prior) {
                y->est[e] = prior[(size_t)l * (size_t)E + (size_t)e];
            } else {
                const double mean = y->pop_w > 0 ? y->pop[e] / y->pop_w : 0;
                y->est[e] = rb->carry * y->est[e] + (1 - rb->carry) * mean;
            }
        }
    }
}

/* ids[n] by v[] descending, ties to the lower id (n is small). */
static inline void polc_rb_sort_desc(int32_t *ids, int n, const double *v)
{
    for (int i = 1; i < n; i++) {
        int32_t x = ids[i];
        int j = i - 1;
        while (j >= 0 && (v[ids[j]] < v[x] || (v[ids[j]] == v[x] && ids[j] > x))) {
            ids[j + 1] = ids[j];
            j--;
        }
        ids[j + 1] = x;
    }
}

/* ids[n] by (est, pop, id) ascending: the first is evicted first. */
static inline void polc_rb_sort_victims(int32_t *ids, int n, const double *est, const double *pop)
{
    for (int i = 1; i < n; i++) {
        int32_t x = ids[i];
        int j = i - 1;
        while (j >= 0 && (est[ids[j]] > est[x] ||
                          (est[ids[j]] == est[x] &&
                           (pop[ids[j]] > pop[x] || (pop[ids[j]] == pop[x] && ids[j] > x))))) {
            ids[j + 1] = ids[j];
            j--;
        }
        ids[j + 1] = x;
    }
}

/* The plan of one layer at one step (the view was checked: n_res residents). */
static inline void polc_rb_plan(struct polc_rb *rb, const struct tide_policy_view *v, int n_res,
                                struct tide_plan *out)
{
    const int E = rb->shape->n_experts;
    struct polc_rb_layer *y = &rb->ly[v->layer];
    if (v->step + 1 > y->steps)
        y->steps = v->step + 1;
    double kept = 0, seen = 0;
    for (int e = 0; e < E; e++) {
        const double r = v->counts[e];
        y->est[e] = rb->alpha * r + (1 - rb->alpha) * y->est[e];
        y->pop[e] = rb->decay * y->pop[e] + r;
        kept += y->was[e] && r > 0;
        seen += y->was[e];
        y->was[e] = r > 0;
    }
    y->pop_w = rb->decay * y->pop_w + 1;
    y->kept = rb->decay * y->kept + kept;
    y->seen = rb->decay * y->seen + seen;
    memcpy(y->res, v->resident, (size_t)E);
    out->n_promote = 0;
    /* The saving of a step k steps ahead counts with weight q^k, q the chance
     * that an active expert is active at the next step too (measured): over
     * the expected steps left, h steps, that is q (1 - q^h) / (1 - q). */
    double left = rb->steps_sum / rb->blocks - v->step - 1;
    if (left < 1)
        left = 1;
    const double q = rb->persistence > 0 ? rb->persistence : y->seen > 0 ? y->kept / y->seen : 1.0;
    double h = left, qk = 1;
    if (q < 1) {
        for (int k = 0; k < (int)left && qk > 1e-6; k++)
            qk *= q;
        h = q * (1 - qk) / (1 - q);
    }
    int n_cand = 0;
    for (int e = 0; e < E; e++)
        if (v->counts[e] && !y->res[e])
            y->order[n_cand++] = e;
    polc_rb_sort_desc(y->order, n_cand, y->est);
    int32_t *victims = y->order + n_cand;
    int n_vict = 0;
    for (int e = 0; e < E; e++)
        if (y->res[e])
            victims[n_vict++] = e;
    polc_rb_sort_victims(victims, n_vict, y->est, y->pop);
    int free_slots = rb->shape->budget - n_res, vi = 0;
    double t_future =
        polc_layer_time(rb->c, E, NULL, y->est, NULL, y->res, 0, rb->balance, y->it, NULL);
    double t_now =
        polc_layer_time(rb->c, E, NULL, NULL, v->counts, y->res, 0, rb->balance, y->it, NULL);
    const double margin = rb->hysteresis * rb->c->promote_us;
    for (int k = 0; k < n_cand && out->n_promote < rb->shape->budget; k++) {
        const int32_t e = y->order[k];
        int32_t u = -1;
        if (free_slots <= 0) {
            if (vi >= n_vict)
                break;
            u = victims[vi];
            if (y->est[u] >= y->est[e])
                break; /* every resident left is estimated at least as busy */
            y->res[u] = 0;
        }
        y->res[e] = 1;
        const double tf =
            polc_layer_time(rb->c, E, NULL, y->est, NULL, y->res, 0, rb->balance, y->it, NULL);
        const double tn = polc_layer_time(rb->c, E, NULL, NULL, v->counts, y->res,
                                          out->n_promote + 1, rb->balance, y->it, NULL);
        if ((t_now - tn) + h * (t_future - tf) <= margin) {
            y->res[e] = 0;
            if (u >= 0)
                y->res[u] = 1;
            break;
        }
        if (u >= 0)
            vi++;
        else
            free_slots--;
        out->promote[out->n_promote] = e;
        out->evict[out->n_promote] = u;
        out->n_promote++;
        t_future = tf;
        t_now = tn;
    }
    polc_place(rb->shape, v, out);
    if (rb->balance)
        polc_layer_time(rb->c, E, NULL, NULL, v->counts, y->res, out->n_promote, true, y->it,
                        out->place);
}

#endif
