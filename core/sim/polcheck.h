/* Property checks of a placement policy over synthetic routing: what `tide
 * policy-check` runs on any policy plugin and tests/policy/test_policy_props.c
 * runs on the shipped ones (docs/writing-a-policy.md, "Checking your
 * policy"). Core-internal.
 *
 * One case drives a fresh policy instance through a random routing sequence
 * (a seed, several MoE layers, blocks of 1..32 steps but at most max_steps,
 * slowly drifting hot experts, empty steps, prompt vectors or none) exactly
 * as the dispatcher calls it: initial(), prompt_begin, block_begin,
 * step_begin (its prefetches applied) and plan() per layer and step. Every
 * call's answer is checked against the invariants of enum tide_polcheck_inv,
 * and the residency map is kept as the dispatcher keeps it.
 * tide_polcheck_case_twice runs a case twice and adds determinism.
 *
 * Threading: a report is filled by one thread; separate reports and cases
 * may run concurrently on separate policy instances. */
#ifndef TIDE_POLCHECK_H
#define TIDE_POLCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/option.h"
#include "tide/policy.h"

/* What is checked, in report order. */
enum tide_polcheck_inv {
    TIDE_POLCHECK_CREATE = 0,  /* create() accepts every budget 0..n_experts */
    TIDE_POLCHECK_INITIAL,     /* initial(): at most B distinct experts in range */
    TIDE_POLCHECK_STATUS,      /* plan() and step_begin() return TIDE_OK */
    TIDE_POLCHECK_ROUTING,     /* counts and residency handed over are left unaltered */
    TIDE_POLCHECK_BOUNDS,      /* nothing written past the arrays the core provides */
    TIDE_POLCHECK_BUDGET,      /* never more than B residents, B promotions a step */
    TIDE_POLCHECK_PLAN,        /* the dispatcher's plan rules (tide_plan_check) */
    TIDE_POLCHECK_PREFETCH,    /* step_begin prefetches: the dispatcher's rules */
    TIDE_POLCHECK_DETERMINISM, /* the same calls give the same answers */
    TIDE_POLCHECK_HOOK,        /* the caller's own model of the policy (tests) */
    TIDE_POLCHECK_N_INV
};

/* A one-line name of each invariant ("resident set <= budget"). */
const char *tide_polcheck_inv_name(enum tide_polcheck_inv inv);

/* One plan as the hook sees it, after the built-in checks passed. */
struct tide_polcheck_step {
    int n_experts, budget;
    int block, step, layer;
    bool first;                     /* the layer's first plan of the case */
    const uint32_t *counts;         /* [n_experts] this step's routing */
    const uint8_t *resident_before; /* [n_experts] residency handed to plan() */
    const uint8_t *resident;        /* [n_experts] after the plan's promotions */
    const struct tide_plan *plan;
    const char *text; /* the plan as "P[4<0 5<-] D[1 4 5] H[7]" (tests/policy/policy_fixture.h) */
};

/* A caller's extra check of one plan: NULL when it holds, else a sentence
 * (in why[len] or static) saying what differs. */
typedef const char *(*tide_polcheck_hook)(void *user, const struct tide_polcheck_step *s, char *why,
                                          size_t len);

/* One case. Zero what you do not set. */
struct tide_polcheck_case {
    const char *label; /* the case's options for messages ("interval=2 costs=serial"), or NULL */
    int n_layers;      /* MoE layers, >= 1 */
    int n_experts;     /* >= 1 */
    int budget;        /* 0 .. n_experts */
    int blocks;        /* blocks of the sequence, >= 1 */
    int second_prompt; /* block at which a second generation starts (prompt_begin and
                          block_begin(first_generated)); 0: none */
    uint64_t seed;     /* the routing sequence (mixed with n_experts and budget) */
    int max_steps;     /* the shape's max_steps (0: unknown); blocks run 1..32 steps, at most
                          this many */
    const struct tide_policy_costs *costs; /* handed in the shape, or NULL */
    tide_polcheck_hook hook;               /* or NULL */
    void *hook_user;
};

/* Counts per invariant over any number of cases, and the first failure of
 * each with its case and place. */
struct tide_polcheck_report {
    uint64_t checked[TIDE_POLCHECK_N_INV];
    uint64_t failed[TIDE_POLCHECK_N_INV];
    char first[TIDE_POLCHECK_N_INV][512];
    uint64_t cases;      /* cases run */
    uint64_t skipped;    /* cases whose create() asked for costs the case had not */
    uint64_t plans;      /* plan() calls */
    uint64_t promotions; /* promotions in plans and prefetches */
    uint64_t prefetches; /* of which prefetched */
};

/* Run one case of policy `ops` with its option section `opts` (NULL for a
 * policy without options), adding to *r. *hash (may be NULL) receives a
 * hash of every answer, 0 when the case failed or was skipped. A create()
 * that fails with TIDE_E_CONFIG while the case has no costs counts as
 * skipped (the policy needs a profile), not as a failure. Returns true when
 * every check held (or the case was skipped); the case stops at its first
 * failure. Messages of the policy itself go to the log. */
bool tide_polcheck_case_run(const struct tide_policy_ops *ops, const struct tide_opts *opts,
                            const struct tide_polcheck_case *c, struct tide_polcheck_report *r,
                            uint64_t *hash);

/* Run the case twice on fresh instances and check both give the same
 * answers (TIDE_POLCHECK_DETERMINISM). Returns true when all held. */
bool tide_polcheck_case_twice(const struct tide_policy_ops *ops, const struct tide_opts *opts,
                              const struct tide_polcheck_case *c, struct tide_polcheck_report *r);

/* True when no check of r failed. */
bool tide_polcheck_passed(const struct tide_polcheck_report *r);

/* Test costs in a policy's shape: every expert takes dev_us on the device at
 * any row count, host_us + host_us_row x rows on the host; a promotion
 * promote_us; activations and latency free. The tables live in tc (rows
 * 0..63); tc->c points into them. */
struct tide_polcheck_costs {
    struct tide_policy_costs c;
    double dev[64], host[64];
};
void tide_polcheck_costs_init(struct tide_polcheck_costs *tc, bool overlap, double dev_us,
                              double host_us, double host_us_row, double promote_us);

#endif
