/* policy-lfu: the "full swap" baseline with a least-frequently-used cache
 * whose frequencies decay, as in MoE offloading papers (an expert's score is
 * its recent routing volume, not its all-time count).
 *
 * Per MoE layer and step: every expert's score is multiplied by `decay`,
 * then its count this step (`score = rows`) or 1 if it is active (`score =
 * hits`) is added. Every active expert that is not resident is promoted
 * before it runs, busiest first (ties: lower id): into a free slot, else
 * evicting the resident of lowest score that is not active this step (ties:
 * lower id). When every resident is active the rest run on the host. Active
 * residents are never evicted. The initial residents are experts 0..B-1 or
 * the popular set of a routing-count file; scores start at 0.
 *
 * Thread safety: plan() calls for different layers may run concurrently
 * (state and scratch are per layer). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy-common/fullswap.h"
#include "policy-common/initial.h"
#include "policy-common/plan.h"
#include "policy-common/rank.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

#define LFU_NAME "policy-lfu"

static const struct tide_option lfu_options[] = {
    POLC_OPTION_INITIAL,
    POLC_OPTION_COUNTS_FILE,
    {"decay", TIDE_OPT_FLOAT, "0.9",
     "each step, every expert's score is multiplied by this before its new use is added (1 = "
     "plain LFU, no decay)",
     NULL, "[0,1]"},
    {"score", TIDE_OPT_ENUM, "rows",
     "what a step adds to an active expert's score: rows = its token count, hits = 1", "rows|hits",
     NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

struct tide_policy {
    struct tide_policy_shape shape;
    struct polc_initial init;
    double decay;
    bool hits;
    double *score;          /* [n_moe_layers][n_experts] decayed use */
    struct polc_rank *rank; /* [n_moe_layers][n_experts] scratch */
    uint8_t *held;          /* [n_moe_layers][n_experts] scratch: residency as planned */
};

static void lfu_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    polc_initial_free(&p->init);
    free(p->score);
    free(p->rank);
    free(p->held);
    free(p);
}

static int lfu_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                      struct tide_policy **out)
{
    int rc = polc_check_create(LFU_NAME, shape, opts);
    if (rc != TIDE_OK)
        return rc;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    p->decay = tide_opts_float(opts, "decay");
    p->hits = !strcmp(tide_opts_str(opts, "score"), "hits");
    size_t cells = (size_t)shape->n_moe_layers * (size_t)shape->n_experts;
    p->score = calloc(cells ? cells : 1, sizeof *p->score);
    p->rank = malloc((cells ? cells : 1) * sizeof *p->rank);
    p->held = malloc(cells ? cells : 1);
    rc = p->score && p->rank && p->held ? polc_initial_init(&p->init, LFU_NAME, shape, opts)
                                        : TIDE_E_NOMEM;
    if (rc != TIDE_OK) {
        lfu_destroy(p);
        return rc;
    }
    *out = p;
    return TIDE_OK;
}

static int lfu_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, LFU_NAME, layer, out);
}

static void lfu_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    /* Frequencies span blocks: nothing to reset. */
    (void)p;
    (void)block;
    (void)first_generated;
}

/* The idle resident of lowest score, ties to the lower id; -1 when every
 * resident is active. ctx: score[n]. */
static int32_t lfu_victim(const void *ctx, const uint8_t *held, const uint32_t *counts, int n)
{
    const double *score = ctx;
    int32_t victim = -1;
    for (int e = 0; e < n; e++)
        if (held[e] && counts[e] == 0 && (victim < 0 || score[e] < score[victim]))
            victim = e;
    return victim;
}

static int lfu_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    int n_res = polc_check_view(LFU_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    const int n = p->shape.n_experts;
    const size_t base = (size_t)v->layer * (size_t)n;
    double *score = &p->score[base];
    for (int e = 0; e < n; e++)
        score[e] = p->decay * score[e] + (v->counts[e] ? (p->hits ? 1.0 : v->counts[e]) : 0.0);
    polc_full_swap(&p->shape, v, n_res, lfu_victim, score, &p->rank[base], &p->held[base], out);
    return TIDE_OK;
}

static const struct tide_policy_ops lfu_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = lfu_create,
    .destroy = lfu_destroy,
    .initial = lfu_initial,
    .block_begin = lfu_block_begin,
    .plan = lfu_plan,
};

static const struct tide_plugin_desc lfu_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = LFU_NAME,
    .version = "0.1.0",
    .summary = "full swap: promote every missing active expert, evicting the least frequently "
               "used (decayed)",
    .ops = &lfu_ops,
    .options = lfu_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(lfu_desc)
