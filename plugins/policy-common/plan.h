/* Shape and view checks and plan finishing, shared by the policy plugins.
 *
 * Header-only (static inline). `who` is the plugin name, used as the prefix
 * of every message. */
#ifndef TIDE_POLICY_COMMON_PLAN_H
#define TIDE_POLICY_COMMON_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "tide/log.h"
#include "tide/policy.h"
#include "tide/status.h"

/* Largest expert count a policy accepts: keeps [layers][experts] tables and
 * their index arithmetic far from int overflow. */
#define POLC_MAX_EXPERTS (1 << 20)
#define POLC_MAX_LAYERS  (1 << 16)

/* Validate the shape handed to create(). Logs the first problem and returns
 * TIDE_E_INVAL, else TIDE_OK. */
static inline int polc_check_shape(const char *who, const struct tide_policy_shape *s)
{
    if (!s || s->size < offsetof(struct tide_policy_shape, budget) + sizeof s->budget) {
        tide_error("%s: create() got no policy shape or one from an older core (%u bytes)", who,
                   s ? s->size : 0u);
        return TIDE_E_INVAL;
    }
    if (s->n_experts < 1 || s->n_experts > POLC_MAX_EXPERTS) {
        tide_error("%s: n_experts = %d is out of range: must be 1..%d", who, s->n_experts,
                   POLC_MAX_EXPERTS);
        return TIDE_E_INVAL;
    }
    if (s->n_moe_layers < 0 || s->n_moe_layers > POLC_MAX_LAYERS) {
        tide_error("%s: n_moe_layers = %d is out of range: must be 0..%d", who, s->n_moe_layers,
                   POLC_MAX_LAYERS);
        return TIDE_E_INVAL;
    }
    if (s->budget < 0 || s->budget > s->n_experts) {
        tide_error("%s: budget = %d experts per layer is out of range: must be 0..%d "
                   "(n_experts)",
                   who, s->budget, s->n_experts);
        return TIDE_E_INVAL;
    }
    return TIDE_OK;
}

/* The checks every policy's create() starts with: the shape (as
 * polc_check_shape) and the policy's option section, which the core always
 * passes. */
static inline int polc_check_create(const char *who, const struct tide_policy_shape *s,
                                    const struct tide_opts *opts)
{
    int rc = polc_check_shape(who, s);
    if (rc == TIDE_OK && !opts) {
        tide_error("%s: create() needs the [%s] option section (opts is NULL)", who, who);
        rc = TIDE_E_INVAL;
    }
    return rc;
}

/* Validate one plan() request. Returns the number of residents of the layer
 * (0 .. budget), or TIDE_E_INVAL after logging: layer out of range, missing
 * arrays, or more residents than the budget (a core bug). */
static inline int polc_check_view(const char *who, const struct tide_policy_shape *s,
                                  const struct tide_policy_view *v, const struct tide_plan *out)
{
    if (!v || !out || !v->counts || !v->resident || !out->promote || !out->evict || !out->place) {
        tide_error("%s: plan() called with a missing view or plan array", who);
        return TIDE_E_INVAL;
    }
    if (v->layer < 0 || v->layer >= s->n_moe_layers) {
        tide_error("%s: plan() for MoE layer %d, but the model has %d MoE layers", who, v->layer,
                   s->n_moe_layers);
        return TIDE_E_INVAL;
    }
    int n = 0;
    for (int e = 0; e < s->n_experts; e++)
        n += v->resident[e] != 0;
    if (n > s->budget) {
        tide_error("%s: MoE layer %d holds %d resident experts, more than the budget of %d", who,
                   v->layer, n, s->budget);
        return TIDE_E_INVAL;
    }
    return n;
}

/* Fill out->place for every expert from the residency after out's
 * promotions and evictions: DEVICE when resident, else HOST. Experts with no
 * tokens get a place too, so the whole array is defined. */
static inline void polc_place(const struct tide_policy_shape *s, const struct tide_policy_view *v,
                              struct tide_plan *out)
{
    for (int e = 0; e < s->n_experts; e++)
        out->place[e] = v->resident[e] ? TIDE_PLACE_DEVICE : TIDE_PLACE_HOST;
    for (int i = 0; i < out->n_promote; i++) {
        if (out->evict[i] >= 0)
            out->place[out->evict[i]] = TIDE_PLACE_HOST;
        out->place[out->promote[i]] = TIDE_PLACE_DEVICE;
    }
}

#endif
