/* The TIDE refresh rule, its counterfactual evaluator and the interval and
 * budget solver (docs/sim.md).
 *
 * - tide_rank_top and tide_tide_refresh are the refresh rule of the paper as
 *   policy-tide applies it; the plugin calls them, so the evaluator below and
 *   the live policy cannot drift apart.
 * - tide_solver_eval_tide replays one MoE layer's routing history under the
 *   rule with a given interval and budget and returns its modelled time
 *   (tide/profile.h) and counters, exactly as policy-tide would produce them.
 * - tide_solver_intervals picks the interval that minimises modelled time,
 *   for all layers together and for each layer alone.
 * - tide_solver_budgets shares one memory total among the layers by greedy
 *   marginal gain.
 * Everything here is pure computation: no I/O, no global state. Workspaces
 * make the functions reentrant (one workspace per thread).
 *
 * Nothing here assumes a number of steps per block: a forward carries its
 * step within its block (from 0), blocks may differ in length (decoders
 * with open-ended steps) and may run longer than any header's bound. An
 * interval at least as long as a block refreshes that block at step 0
 * only. */
#ifndef TIDE_SOLVER_H
#define TIDE_SOLVER_H

#include "tide/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scratch of the ranking and evaluation functions; zero-initialise it, free
 * it with tide_solver_ws_free. Not shared between threads. */
struct tide_solver_ws {
    uint32_t *hist; /* [cap_hist] */
    size_t cap_hist;
    int32_t *ids; /* [cap_ids] */
    uint8_t *mark;
    uint32_t *dense, *last; /* [cap_ids] counts */
    int32_t *promote, *evict;
    size_t cap_ids;
    uint64_t *keys; /* [cap_keys] sort keys when counts are too large to bucket */
    size_t cap_keys;
};
/* Free the scratch and zero *ws (it can be used again). NULL is a no-op. */
TIDE_API void tide_solver_ws_free(struct tide_solver_ws *ws);

/* Rank the n experts by count (descending, ties to the lower id) and write
 * the ids of the first min(k, active) experts with count > 0 into out[k].
 * Returns how many, or TIDE_E_NOMEM. O(n + max count) (counting sort). */
TIDE_API int tide_rank_top(const uint32_t *counts, int n, int k, int32_t *out,
                           struct tide_solver_ws *ws);

/* The refresh of one layer: target = tide_rank_top(counts, budget); promote
 * the target experts that are not resident, in target order, into free slots
 * first (budget - n_resident of them, evict -1), then each evicting the next
 * resident outside the target in ascending id order (only as many residents
 * are demoted as needed). promote[] and evict[] need room for budget
 * entries. Returns the number of promotions (>= 0) or TIDE_E_NOMEM. */
TIDE_API int tide_tide_refresh(const uint32_t *counts, const uint8_t *resident, int n_resident,
                               int n, int budget, int32_t *promote, int32_t *evict,
                               struct tide_solver_ws *ws);

/* One forward of one MoE layer, with its routing counts in sparse form. */
struct tide_solver_fwd {
    uint8_t phase;       /* enum tide_trace_phase */
    bool first_block;    /* the first generated block of its prompt */
    int32_t step;        /* denoising step within the block; -1 outside a step */
    uint32_t tokens;     /* tokens of the forward */
    uint32_t n_active;   /* experts with tokens */
    const uint16_t *ids; /* [n_active] those experts */
    const uint32_t *cnt; /* [n_active] their token-slot assignments */
};

/* The rule's parameters (policy-tide's options). */
struct tide_tide_rule {
    int interval;                /* >= 1 */
    bool first_block_every_step; /* refresh every step of the first generated block */
    bool prefetch;               /* refresh from the previous step's counts at step start */
};

/* Counters and modelled time of one evaluation. */
struct tide_eval {
    double us;           /* modelled time of every forward, tide_cost_layer_us summed */
    double step_us;      /* ... of the STEP forwards only */
    uint64_t promotions; /* experts copied into device slots */
    uint64_t hit_rows;   /* assignments computed on the device */
    uint64_t miss_rows;  /* assignments computed on the host */
};

/* Replay fwd[0..n_fwd) of one layer under the rule with `budget` slots,
 * starting from resident[n_experts] (updated in place to the final
 * residency). Placement in PREFILL and KV forwards is frozen; in STEP
 * forwards the rule refreshes when step % interval == 0 or (first_block and
 * first_block_every_step), whatever the length of the block. Adds into
 * *out (zero it first). Returns TIDE_OK, TIDE_E_INVAL (budget or interval
 * out of range, more residents than the budget) or TIDE_E_NOMEM. */
TIDE_API int tide_solver_eval_tide(const struct tide_solver_fwd *fwd, size_t n_fwd, int n_experts,
                                   int budget, uint8_t *resident, const struct tide_tide_rule *rule,
                                   const struct tide_cost *cost, struct tide_eval *out,
                                   struct tide_solver_ws *ws);

/* Pick intervals. cost[l * n_int + i] is the modelled time of layer l under
 * intervals[i]. Writes the index of the interval minimising the sum over
 * layers (*global_idx, its total in *global_us) and, per layer, the index
 * minimising that layer alone (layer_idx[n_layers], total in *layer_us).
 * Ties go to the longer interval (fewer refreshes). Returns TIDE_OK or
 * TIDE_E_INVAL (no layer or no interval). */
TIDE_API int tide_solver_intervals(const double *cost, int n_layers, int n_int,
                                   const int *intervals, int *global_idx, double *global_us,
                                   int *layer_idx, double *layer_us);

/* Share a memory total among layers. cost[l * n_b + j] is the modelled time
 * of layer l with budgets[j] experts (budgets ascending). Every layer starts
 * at budgets[0]; then, while experts remain, the layer whose next grid point
 * saves the most time per added expert (and fits) moves up one point. The
 * result is optimal when every layer's cost is convex in the budget.
 * Writes idx[n_layers] and the total modelled time. Returns TIDE_OK,
 * TIDE_E_INVAL (bad grid) or TIDE_E_BUDGET (total < n_layers * budgets[0]). */
TIDE_API int tide_solver_budgets(const double *cost, int n_layers, int n_b, const int *budgets,
                                 int64_t total, int *idx, double *total_us);

#ifdef __cplusplus
}
#endif
#endif
