/* policy-static: the "CPU routing" baseline (Fiddler, llama.cpp --cpu-moe).
 *
 * Each MoE layer keeps a fixed set of B resident experts for the whole run
 * and never promotes: resident experts run on the device, every other active
 * expert runs on the host. The set is experts 0..B-1 (initial = first) or the
 * B most popular experts of a routing-count file (initial = popular).
 *
 * Routing-count file (counts_file), text:
 *     # comments run from '#' to the end of the line
 *     # LAYER EXPERT COUNT   (0-based MoE layer, 0-based expert, count >= 0)
 *     0 17 1234
 *     0 3 977
 * Repeated (LAYER, EXPERT) pairs add up; unlisted pairs count 0. The popular
 * set of a layer is its top-B by count, ties to the lower id, filled up with
 * zero-count experts in id order. A missing file fails create() with
 * TIDE_E_NOTFOUND, a malformed line with TIDE_E_FORMAT naming file:line.
 *
 * This file is the template of docs/writing-a-policy.md.
 *
 * Thread safety: plan() only reads the instance; any calls may overlap. */
#include <stdbool.h>
#include <stdlib.h>

#include "policy-common/initial.h"
#include "policy-common/plan.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

#define STATIC_NAME "policy-static"

struct tide_policy {
    struct tide_policy_shape shape;
    struct polc_initial init; /* the fixed resident set of every layer */
};

static const struct tide_option static_options[] = {
    POLC_OPTION_INITIAL,
    POLC_OPTION_COUNTS_FILE,
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static void static_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    polc_initial_free(&p->init);
    free(p);
}

static int static_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                         struct tide_policy **out)
{
    int rc = polc_check_create(STATIC_NAME, shape, opts);
    if (rc != TIDE_OK)
        return rc;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    rc = polc_initial_init(&p->init, STATIC_NAME, shape, opts);
    if (rc != TIDE_OK) {
        static_destroy(p);
        return rc;
    }
    *out = p;
    return TIDE_OK;
}

static int static_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, STATIC_NAME, layer, out);
}

static void static_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    /* The set never changes. */
}

static int static_plan(struct tide_policy *p, const struct tide_policy_view *v,
                       struct tide_plan *out)
{
    int n_res = polc_check_view(STATIC_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    out->n_promote = 0;
    polc_place(&p->shape, v, out);
    return TIDE_OK;
}

static const struct tide_policy_ops static_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = static_create,
    .destroy = static_destroy,
    .initial = static_initial,
    .block_begin = static_block_begin,
    .plan = static_plan,
};

static const struct tide_plugin_desc static_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = STATIC_NAME,
    .version = "0.1.0",
    .summary = "CPU routing: a fixed resident set per layer, misses run on the host",
    .ops = &static_ops,
    .options = static_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(static_desc)
