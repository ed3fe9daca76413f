/* policy-lru: the "full swap" baseline with a least-recently-used cache.
 *
 * Every active expert (count > 0) that is not resident is promoted before it
 * runs. Promotions use free slots first, then evict the least recently used
 * resident that is not active in this step (ties: the lower id). Recency is
 * the value of a per-layer step counter (one tick per plan() call of that
 * layer, across blocks) at the expert's last active step; the initial
 * residents 0..B-1 start at 0. When more experts are active than slots can
 * hold, promotions go in descending count order (ties: lower id) as far as
 * non-active residents allow; the rest run on the host. Active residents are
 * never evicted.
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

#define LRU_NAME "policy-lru"

struct tide_policy {
    struct tide_policy_shape shape;
    struct polc_initial init; /* experts 0..B-1 */
    uint64_t *clock;          /* [n_moe_layers] plan() calls so far */
    uint64_t *last;           /* [n_moe_layers][n_experts] clock at the last active step */
    struct polc_rank *rank;   /* [n_moe_layers][n_experts] scratch */
    uint8_t *held;            /* [n_moe_layers][n_experts] scratch: residency as planned */
};

static void lru_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    polc_initial_free(&p->init);
    free(p->clock);
    free(p->last);
    free(p->rank);
    free(p->held);
    free(p);
}

static int lru_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                      struct tide_policy **out)
{
    int rc = polc_check_shape(LRU_NAME, shape);
    if (rc != TIDE_OK)
        return rc;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    size_t layers = (size_t)shape->n_moe_layers;
    size_t cells = layers * (size_t)shape->n_experts;
    p->clock = calloc(layers ? layers : 1, sizeof *p->clock);
    p->last = calloc(cells ? cells : 1, sizeof *p->last);
    p->rank = malloc((cells ? cells : 1) * sizeof *p->rank);
    p->held = malloc(cells ? cells : 1);
    rc = p->clock && p->last && p->rank && p->held
             ? polc_initial_init(&p->init, LRU_NAME, shape, NULL)
             : TIDE_E_NOMEM;
    if (rc != TIDE_OK) {
        lru_destroy(p);
        return rc;
    }
    *out = p;
    return TIDE_OK;
}

static int lru_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, LRU_NAME, layer, out);
}

static void lru_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    /* Recency spans blocks: nothing to reset. */
}

/* The least recently used expert in held[] with no tokens this step, ties to
 * the lower id; -1 when every held expert is active. ctx: last[n]. */
static int32_t lru_victim(const void *ctx, const uint8_t *held, const uint32_t *counts, int n)
{
    const uint64_t *last = ctx;
    int32_t victim = -1;
    for (int e = 0; e < n; e++)
        if (held[e] && counts[e] == 0 && (victim < 0 || last[e] < last[victim]))
            victim = e;
    return victim;
}

static int lru_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    int n_res = polc_check_view(LRU_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    const int n = p->shape.n_experts;
    size_t base = (size_t)v->layer * (size_t)n;
    uint64_t *last = &p->last[base];
    uint64_t tick = ++p->clock[v->layer];
    polc_full_swap(&p->shape, v, n_res, lru_victim, last, &p->rank[base], &p->held[base], out);
    for (int e = 0; e < n; e++)
        if (v->counts[e])
            last[e] = tick;
    return TIDE_OK;
}

static const struct tide_policy_ops lru_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = lru_create,
    .destroy = lru_destroy,
    .initial = lru_initial,
    .block_begin = lru_block_begin,
    .plan = lru_plan,
};

static const struct tide_plugin_desc lru_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = LRU_NAME,
    .version = "0.1.0",
    .summary = "full swap: promote every missing active expert, evicting the least recently used",
    .ops = &lru_ops,
    .options = NULL,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(lru_desc)
