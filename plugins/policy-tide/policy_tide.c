/* policy-tide: the TIDE paper's interval-based expert refresh.
 *
 * Semantics follow the authors' reference code (ims-kdks/TIDE):
 *  - a refresh happens at step 0 of every block, then whenever
 *    step % interval == 0, and at every step of the first generated block
 *    when first_block_every_step is set;
 *  - at a refresh, per MoE layer, target = the top-B experts by this step's
 *    count, keeping only count > 0 (count descending, ties: lower id);
 *    to_promote = the target experts not resident, in that order;
 *    can_demote = the residents not in target, in ascending id order. Free
 *    slots are used first, then each promotion evicts the next expert of
 *    can_demote: only as many residents are demoted as are promoted, and
 *    stale residents beyond that stay;
 *  - between refreshes nothing moves: residents run on the device, every
 *    other active expert on the host.
 * Promoted experts run on the device in the step that promotes them (the
 * reference moves experts first, then computes).
 *
 * Thread safety: plan() calls for different layers may run concurrently
 * (all scratch is per layer); block_begin() must not overlap plan(). */
#include <assert.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy-common/initial.h"
#include "policy-common/plan.h"
#include "policy-common/rank.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

#define TIDEP_NAME "policy-tide"

struct tide_policy {
    struct tide_policy_shape shape;
    int interval;                /* refresh every `interval` steps within a block, >= 1 */
    bool first_block_every_step; /* refresh at every step of the first generated block */
    struct polc_initial init;
    bool have_block;        /* block_begin() has been called */
    bool first_block;       /* the current block is the first generated one */
    struct polc_rank *rank; /* [n_moe_layers][n_experts] scratch */
    uint8_t *in_target;     /* [n_moe_layers][n_experts] scratch */
};

static const struct tide_option tidep_options[] = {
    {"interval", TIDE_OPT_INT, "4",
     "refresh the resident set every `interval` denoising steps within a block (tau); "
     "step 0 of every block always refreshes",
     NULL, "[1,]"},
    {"first_block_every_step", TIDE_OPT_BOOL, "true",
     "refresh at every step of the first generated block (warm-up), as the reference does", NULL,
     NULL},
    POLC_OPTION_INITIAL,
    POLC_OPTION_COUNTS_FILE,
    {"prefetch", TIDE_OPT_BOOL, "false",
     "not active yet: the policy ABI has no step-start slot to prefetch from; true only logs a "
     "warning",
     NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static void tidep_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    polc_initial_free(&p->init);
    free(p->rank);
    free(p->in_target);
    free(p);
}

static int tidep_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                        struct tide_policy **out)
{
    int rc = polc_check_shape(TIDEP_NAME, shape);
    if (rc != TIDE_OK)
        return rc;
    if (!opts) {
        tide_error("%s: create() needs the [%s] option section (opts is NULL)", TIDEP_NAME,
                   TIDEP_NAME);
        return TIDE_E_INVAL;
    }
    int64_t interval = tide_opts_int(opts, "interval");
    if (interval < 1) {
        tide_error("%s: interval = %lld is out of range: must be >= 1", TIDEP_NAME,
                   (long long)interval);
        return TIDE_E_CONFIG;
    }
    if (tide_opts_bool(opts, "prefetch"))
        tide_warn("%s: prefetch = true is not active yet: policy ABI v1 has no step-start slot, "
                  "so experts are still promoted only at refresh steps",
                  TIDEP_NAME);
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    /* Any interval beyond the block length means "step 0 only". */
    p->interval = interval > INT_MAX ? INT_MAX : (int)interval;
    p->first_block_every_step = tide_opts_bool(opts, "first_block_every_step");
    size_t cells = (size_t)shape->n_moe_layers * (size_t)shape->n_experts;
    p->rank = malloc((cells ? cells : 1) * sizeof *p->rank);
    p->in_target = malloc(cells ? cells : 1);
    rc = p->rank && p->in_target ? polc_initial_init(&p->init, TIDEP_NAME, shape, opts)
                                 : TIDE_E_NOMEM;
    if (rc != TIDE_OK) {
        tidep_destroy(p);
        return rc;
    }
    *out = p;
    return TIDE_OK;
}

static int tidep_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, TIDEP_NAME, layer, out);
}

static void tidep_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    p->have_block = true;
    p->first_block = first_generated;
}

static bool tidep_is_refresh(const struct tide_policy *p, const struct tide_policy_view *v)
{
    /* Without block_begin() (a bare simulator), block 0 is the first generated one. */
    bool first = p->have_block ? p->first_block : v->block == 0;
    return v->step % p->interval == 0 || (first && p->first_block_every_step);
}

/* Promote the top-B active experts that are missing; demote only as many
 * stale residents as needed, lowest id first. */
static void tidep_refresh(struct tide_policy *p, const struct tide_policy_view *v, int n_res,
                          struct tide_plan *out)
{
    const int n = p->shape.n_experts;
    struct polc_rank *r = &p->rank[(size_t)v->layer * (size_t)n];
    uint8_t *in_target = &p->in_target[(size_t)v->layer * (size_t)n];
    polc_rank_counts(v->counts, NULL, n, r);
    int n_target = polc_rank_top_active(r, n, p->shape.budget);
    memset(in_target, 0, (size_t)n);
    for (int i = 0; i < n_target; i++)
        in_target[r[i].id] = 1;
    int free_slots = p->shape.budget - n_res, next = 0;
    for (int i = 0; i < n_target; i++) {
        int32_t e = r[i].id, victim = -1;
        if (v->resident[e])
            continue;
        if (free_slots > 0) {
            free_slots--;
        } else {
            /* Enough exist: |target| <= B, so non-target residents >= promotions - free slots. */
            while (next < n && !(v->resident[next] && !in_target[next]))
                next++;
            assert(next < n);
            victim = next++;
        }
        out->promote[out->n_promote] = e;
        out->evict[out->n_promote] = victim;
        out->n_promote++;
    }
}

static int tidep_plan(struct tide_policy *p, const struct tide_policy_view *v,
                      struct tide_plan *out)
{
    int n_res = polc_check_view(TIDEP_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    if (v->step < 0) {
        tide_error("%s: plan() for step %d of block %d: steps count from 0", TIDEP_NAME, v->step,
                   v->block);
        return TIDE_E_INVAL;
    }
    out->n_promote = 0;
    if (tidep_is_refresh(p, v))
        tidep_refresh(p, v, n_res, out);
    polc_place(&p->shape, v, out);
    return TIDE_OK;
}

static const struct tide_policy_ops tidep_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = tidep_create,
    .destroy = tidep_destroy,
    .initial = tidep_initial,
    .block_begin = tidep_block_begin,
    .plan = tidep_plan,
};

static const struct tide_plugin_desc tidep_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = TIDEP_NAME,
    .version = "0.1.0",
    .summary = "TIDE: refresh the top-B experts by count every `interval` steps, frozen between",
    .ops = &tidep_ops,
    .options = tidep_options,
    .probe = NULL,
};

/* The plugin's single exported symbol: the descriptor for ABI 1, else NULL. */
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi);

TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi)
{
    return host_abi == TIDE_ABI_VERSION ? &tidep_desc : NULL;
}
