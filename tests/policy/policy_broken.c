/* policy-broken: a policy with one planted fault, for tests of `tide
 * policy-check` (tests/policy/policy_check.sh). Built for the tests only,
 * into a folder of its own, never installed.
 *
 * Without a fault (fault = none) it is a plain full-swap cache: each active
 * expert that is not resident is promoted into a free slot, else in place
 * of the lowest idle resident; residents run on the device, the rest on the
 * host. Each fault breaks one promise:
 *   budget    promotes into a "free" slot when the layer is already full
 *   routing   writes into the routing counts it is shown
 *   place     places an active expert that is not resident on the device
 *   random    plans differ between two instances given the same calls
 *   initial   initial() returns one expert twice
 *   prefetch  step_begin() asks for a promotion in a layer that does not exist */
#include <stdlib.h>
#include <string.h>

#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

#define BROKEN_NAME "policy-broken"

struct tide_policy {
    int n, budget;
    char fault[16];
    uint8_t *held; /* [n] scratch: residency after the plan */
};

/* Instances made so far: the `random` fault makes each differ. */
static unsigned broken_instances;

static int broken_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                         struct tide_policy **out)
{
    if (!shape || !opts)
        return TIDE_E_INVAL;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p || !(p->held = calloc((size_t)shape->n_experts, 1))) {
        free(p);
        return TIDE_E_NOMEM;
    }
    p->n = shape->n_experts;
    p->budget = shape->budget;
    strncpy(p->fault, tide_opts_str(opts, "fault"), sizeof p->fault - 1);
    broken_instances++;
    *out = p;
    return TIDE_OK;
}

static void broken_destroy(struct tide_policy *p)
{
    if (p)
        free(p->held);
    free(p);
}

static int broken_initial(struct tide_policy *p, int layer, int32_t *out)
{
    (void)layer;
    for (int i = 0; i < p->budget; i++)
        out[i] = i;
    if (!strcmp(p->fault, "initial") && p->budget >= 2)
        out[1] = out[0];
    return p->budget;
}

static void broken_block_begin(struct tide_policy *p, int block, bool first)
{
    (void)p;
    (void)block;
    (void)first;
}

static int broken_plan(struct tide_policy *p, const struct tide_policy_view *v,
                       struct tide_plan *out)
{
    const int n = p->n;
    memcpy(p->held, v->resident, (size_t)n);
    int held = 0, np = 0;
    for (int e = 0; e < n; e++)
        held += p->held[e];
    const bool overfill = !strcmp(p->fault, "budget");
    const bool shuffle = !strcmp(p->fault, "random") && broken_instances % 2 == 0;
    for (int k = 0; k < n && np < p->budget; k++) {
        const int e = shuffle ? n - 1 - k : k;
        if (!v->counts[e] || p->held[e])
            continue;
        int victim = -1;
        if (held >= p->budget && !overfill) {
            for (int x = 0; x < n && victim < 0; x++)
                if (p->held[x] && !v->counts[x])
                    victim = x;
            if (victim < 0)
                break; /* every resident is busy: the rest run on the host */
        }
        out->promote[np] = e;
        out->evict[np++] = victim;
        p->held[e] = 1;
        if (victim >= 0)
            p->held[victim] = 0;
        else
            held++;
    }
    out->n_promote = np;
    for (int e = 0; e < n; e++)
        if (v->counts[e])
            out->place[e] =
                p->held[e] || !strcmp(p->fault, "place") ? TIDE_PLACE_DEVICE : TIDE_PLACE_HOST;
    if (!strcmp(p->fault, "routing"))
        for (int e = 0; e < n; e++)
            if (v->counts[e]) {
                ((uint32_t *)v->counts)[e]++; /* the fault: routing is the core's */
                break;
            }
    return TIDE_OK;
}

static int broken_step_begin(struct tide_policy *p, int block, int step,
                             const uint8_t *const *resident, struct tide_prefetch *out)
{
    (void)block;
    (void)resident;
    out->n = 0;
    if (!strcmp(p->fault, "prefetch") && step == 1 && out->cap > 0) {
        out->layer[0] = -1;
        out->expert[0] = 0;
        out->evict[0] = -1;
        out->n = 1;
    }
    return TIDE_OK;
}

static const struct tide_policy_ops broken_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = broken_create,
    .destroy = broken_destroy,
    .initial = broken_initial,
    .block_begin = broken_block_begin,
    .plan = broken_plan,
    .step_begin = broken_step_begin,
};

static const struct tide_option broken_options[] = {
    {"fault", TIDE_OPT_ENUM, "none", "the promise this policy breaks (tests of policy-check)",
     "none|budget|routing|place|random|initial|prefetch", NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_plugin_desc broken_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = BROKEN_NAME,
    .version = "0.1.0",
    .summary = "a policy with one planted fault, for tests of tide policy-check",
    .ops = &broken_ops,
    .options = broken_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(broken_desc)
