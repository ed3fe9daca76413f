/* policy-example: a decayed-frequency expert cache, built out of tree against
 * an installed tide (see README.md).
 *
 * Per MoE layer every expert has a score, the tokens routed to it with older
 * steps weighted down: score = decay * score + count, updated at each plan().
 * Active experts (count > 0) that are not resident are considered hottest
 * first. One goes into a free slot if there is one; otherwise it replaces
 * the coldest resident that is idle this step, but only when it is hotter
 * than that resident (so a one-step burst does not churn the cache). At most
 * max_promotions experts move per layer and step. Resident experts run on the
 * device, the rest on the host. The first residents are experts 0..budget-1.
 *
 * Thread safety: plan() calls for different layers may run concurrently;
 * every piece of state is per layer. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The shipped policies' header-only helpers, installed with tide
 * (include/policy-common/): view checks and placement. */
#include "policy-common/plan.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

#define EX_NAME "policy-example"

static const struct tide_option ex_options[] = {
    {"decay", TIDE_OPT_FLOAT, "0.8", "weight of the past in an expert's score (1 = plain counts)",
     NULL, "(0,1]"},
    {"max_promotions", TIDE_OPT_INT, "0",
     "experts promoted per layer and step at most; 0 = up to the budget", NULL, "[0,]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

struct tide_policy {
    struct tide_policy_shape shape;
    double decay;
    int max_promotions;
    double *score;  /* [n_moe_layers][n_experts] */
    int32_t *order; /* [n_moe_layers][n_experts] scratch: active experts, hottest first */
    uint8_t *held;  /* [n_moe_layers][n_experts] scratch: residency as planned */
};

static void ex_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    free(p->score);
    free(p->order);
    free(p->held);
    free(p);
}

static int ex_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                     struct tide_policy **out)
{
    if (shape->size < sizeof *shape || shape->n_moe_layers < 0 || shape->n_experts < 1 ||
        shape->budget < 0 || shape->budget > shape->n_experts) {
        tide_error("%s: invalid shape (%d MoE layers, %d experts, budget %d)", EX_NAME,
                   shape->n_moe_layers, shape->n_experts, shape->budget);
        return TIDE_E_INVAL;
    }
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    p->decay = tide_opts_float(opts, "decay");
    p->max_promotions = (int)tide_opts_int(opts, "max_promotions");
    size_t cells = (size_t)shape->n_moe_layers * (size_t)shape->n_experts;
    p->score = calloc(cells ? cells : 1, sizeof *p->score);
    p->order = malloc((cells ? cells : 1) * sizeof *p->order);
    p->held = malloc(cells ? cells : 1);
    if (!p->score || !p->order || !p->held) {
        ex_destroy(p);
        return TIDE_E_NOMEM;
    }
    *out = p;
    return TIDE_OK;
}

static int ex_initial(struct tide_policy *p, int layer, int32_t *out)
{
    for (int i = 0; i < p->shape.budget; i++)
        out[i] = i;
    return p->shape.budget;
}

static void ex_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    /* Scores carry across blocks: the routing of neighbouring blocks is alike. */
}

/* a is hotter than b: higher score, ties to the lower id. */
static bool ex_hotter(const double *score, int32_t a, int32_t b)
{
    return score[a] > score[b] || (score[a] == score[b] && a < b);
}

/* The coldest held expert that is idle this step, or -1. */
static int32_t ex_victim(const struct tide_policy *p, const double *score, const uint8_t *held,
                         const uint32_t *counts)
{
    int32_t v = -1;
    for (int32_t e = 0; e < p->shape.n_experts; e++)
        if (held[e] && !counts[e] && (v < 0 || ex_hotter(score, v, e)))
            v = e;
    return v;
}

static int ex_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    const int n = p->shape.n_experts;
    /* Layer in range, arrays present, at most B residents: their count. */
    const int n_held = polc_check_view(EX_NAME, &p->shape, v, out);
    if (n_held < 0)
        return n_held;
    double *score = &p->score[(size_t)v->layer * (size_t)n];
    int32_t *order = &p->order[(size_t)v->layer * (size_t)n];
    uint8_t *held = &p->held[(size_t)v->layer * (size_t)n];
    int n_active = 0;
    for (int e = 0; e < n; e++) {
        score[e] = p->decay * score[e] + (double)v->counts[e];
        held[e] = v->resident[e] != 0;
        if (!v->counts[e])
            continue;
        /* Insertion sort: a layer has at most a few hundred experts. */
        int i = n_active++;
        while (i > 0 && ex_hotter(score, e, order[i - 1])) {
            order[i] = order[i - 1];
            i--;
        }
        order[i] = e;
    }
    int free_slots = p->shape.budget - n_held;
    int limit = p->shape.budget;
    if (p->max_promotions > 0 && p->max_promotions < limit)
        limit = p->max_promotions;
    out->n_promote = 0;
    for (int i = 0; i < n_active && out->n_promote < limit; i++) {
        int32_t e = order[i], victim = -1;
        if (held[e])
            continue;
        if (free_slots > 0) {
            free_slots--;
        } else {
            victim = ex_victim(p, score, held, v->counts);
            if (victim < 0 || !ex_hotter(score, e, victim))
                continue; /* runs on the host this step */
            held[victim] = 0;
        }
        held[e] = 1;
        out->promote[out->n_promote] = e;
        out->evict[out->n_promote] = victim;
        out->n_promote++;
    }
    /* Residents after the promotions on the device, the rest on the host. */
    polc_place(&p->shape, v, out);
    return TIDE_OK;
}

static const struct tide_policy_ops ex_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = ex_create,
    .destroy = ex_destroy,
    .initial = ex_initial,
    .block_begin = ex_block_begin,
    .plan = ex_plan,
};

static const struct tide_plugin_desc ex_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = EX_NAME,
    .version = "0.1.0",
    .summary = "example built out of tree: a decayed-frequency cache that admits an expert only "
               "when it is hotter than the coldest idle resident",
    .ops = &ex_ops,
    .options = ex_options,
    .probe = NULL,
};

/* The plugin's single exported symbol: the descriptor for this ABI, else NULL. */
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi)
{
    return host_abi == TIDE_ABI_VERSION ? &ex_desc : NULL;
}
