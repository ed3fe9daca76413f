/* The plan rules, shared by the live dispatcher (moe.c) and the trace
 * simulator (sim.c) so the two can never disagree. Core-internal. */
#ifndef TIDE_PLAN_CHECK_H
#define TIDE_PLAN_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "tide/policy.h"

/* What a plan is checked against: one MoE layer at one step. */
struct tide_plan_ctx {
    int n_experts;
    int budget;              /* device slots of the layer */
    int n_held;              /* slots in use */
    const uint8_t *resident; /* [n_experts] */
    const uint32_t *counts;  /* [n_experts] tokens per expert this step */
    uint8_t *mark;           /* [n_experts] scratch */
};

/* Check a plan: at most `budget` promotions, each of a non-resident expert
 * into a free slot or the slot of a resident it evicts; no eviction of an
 * expert placed on the device; every active expert placed on the device only
 * if resident after the promotions, else on the host. Returns NULL when the
 * plan is valid, else a sentence ("evicts expert 5, which it places on the
 * device") written into why. */
const char *tide_plan_check(const struct tide_plan_ctx *c, const struct tide_plan *p, char *why,
                            size_t why_len);

/* Check one prefetch of step_begin (struct tide_prefetch): expert e of a
 * layer promoted into the slot of resident `evict`, or into a free slot when
 * evict < 0. resident[n_experts] is the layer's map (NULL: the layer is out
 * of range), n_held of its budget slots in use. Returns NULL when valid,
 * else a phrase ("an expert that is already resident"). */
const char *tide_prefetch_check(int n_experts, int budget, int n_held, const uint8_t *resident,
                                int e, int evict);

#endif
