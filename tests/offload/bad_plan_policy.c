/* A policy that breaks the plan rules on purpose, for the core's validation:
 * it places every active expert on the device, resident or not. */
#include <stdlib.h>

#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

struct tide_policy {
    int budget;
    int n_experts;
};

static int bad_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                      struct tide_policy **out)
{
    (void)opts;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->budget = shape->budget;
    p->n_experts = shape->n_experts;
    *out = p;
    return TIDE_OK;
}

static void bad_destroy(struct tide_policy *p)
{
    free(p);
}

static int bad_initial(struct tide_policy *p, int layer, int32_t *out)
{
    (void)layer;
    for (int i = 0; i < p->budget; i++)
        out[i] = i;
    return p->budget;
}

static void bad_block_begin(struct tide_policy *p, int block, bool first)
{
    (void)p;
    (void)block;
    (void)first;
}

static int bad_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    out->n_promote = 0;
    for (int e = 0; e < p->n_experts; e++)
        out->place[e] = v->counts[e] ? TIDE_PLACE_DEVICE : TIDE_PLACE_HOST;
    return TIDE_OK;
}

static const struct tide_policy_ops bad_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = bad_create,
    .destroy = bad_destroy,
    .initial = bad_initial,
    .block_begin = bad_block_begin,
    .plan = bad_plan,
};

static const struct tide_plugin_desc bad_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = "test-bad-plan",
    .version = "0.0.1",
    .summary = "test policy whose plans break the rules",
    .ops = &bad_ops,
};

TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi)
{
    return host_abi == TIDE_ABI_VERSION ? &bad_desc : NULL;
}
