/* policy-cost: rent or buy each expert by the machine's modelled costs.
 *
 * The rule (policy-common/rentbuy.h), per MoE layer and denoising step:
 *  - estimate each expert's rows per step for the rest of the block: an
 *    exponential average of its counts in this block (`alpha`), started at
 *    block begin from `carry` x the last block's estimate plus the rest from
 *    the expert's long-term mean (`memory` blocks);
 *  - an active expert that is not resident runs on the host ("rent") until
 *    buying it pays: it is promoted, evicting the resident of least
 *    estimated rows (free slots first), when the modelled time it saves now
 *    and over the expected remaining steps of the block (each later step
 *    discounted by the measured chance that activity persists) exceeds
 *    `hysteresis` promotions' worth of time (busiest first; the first that
 *    does not pay ends the step's promotions);
 *  - the step's active experts are placed to minimise the modelled time:
 *    residents also run on the host when that balances a device-bound step
 *    (`balance`).
 * Times come from the costs the core hands over ([policy] profile, or tide
 * sim --profile); the expected steps per block from the blocks seen so far
 * (starting at the shape's max_steps). Without costs create() fails.
 *
 * Thread safety: plan() calls for different layers may run concurrently
 * (state and scratch are per layer). */
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

#define COST_NAME "policy-cost"

static const struct tide_option cost_options[] = {
    POLC_OPTION_INITIAL,
    POLC_OPTION_COUNTS_FILE,
    POLC_RB_OPTIONS,
    {NULL, 0, NULL, NULL, NULL, NULL},
};

struct tide_policy {
    struct tide_policy_shape shape;
    struct polc_initial init;
    struct polc_rb rb;
};

static void cost_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    polc_rb_free(&p->rb);
    polc_initial_free(&p->init);
    free(p);
}

static int cost_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                       struct tide_policy **out)
{
    int rc = polc_check_create(COST_NAME, shape, opts);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_policy_costs *c = polc_costs_get(COST_NAME, shape, true, &rc);
    if (!c)
        return rc;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    rc = polc_rb_init(&p->rb, COST_NAME, &p->shape, c, opts);
    if (rc == TIDE_OK)
        rc = polc_initial_init(&p->init, COST_NAME, shape, opts);
    if (rc != TIDE_OK) {
        cost_destroy(p);
        return rc;
    }
    *out = p;
    return TIDE_OK;
}

static int cost_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, COST_NAME, layer, out);
}

static void cost_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    (void)block;
    (void)first_generated;
    polc_rb_block_begin(&p->rb, NULL);
}

static int cost_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    int n_res = polc_check_view(COST_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    polc_rb_plan(&p->rb, v, n_res, out);
    return TIDE_OK;
}

static const struct tide_policy_ops cost_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = cost_create,
    .destroy = cost_destroy,
    .initial = cost_initial,
    .block_begin = cost_block_begin,
    .plan = cost_plan,
};

static const struct tide_plugin_desc cost_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = COST_NAME,
    .version = "0.1.0",
    .summary = "cost-aware rent or buy: promote when the modelled saving over the rest of the "
               "block beats the copy; balance device and host",
    .ops = &cost_ops,
    .options = cost_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(cost_desc)
