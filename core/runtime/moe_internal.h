/* The MoE dispatcher and expert store: the core side of tide/moe.h.
 *
 * Two modes, chosen by tide_moe_configure:
 *  - no offload (budget >= n_experts): every expert is made available on the
 *    device backend once and runs there;
 *  - offload: every expert is made available on the host backend, and each
 *    MoE layer has `budget` device slots. A placement policy decides, per
 *    layer and denoising step, which experts to promote into slots (and whom
 *    to evict) and where each active expert runs. The core validates every
 *    plan and executes it: promotions are slot loads, resident experts run on
 *    the device, the others on the host (their token rows are gathered, moved
 *    to the host and the results moved back).
 * Outputs are always combined in a fixed order (token, then routing slot), so
 * results never depend on placement. */
#ifndef TIDE_MOE_INTERNAL_H
#define TIDE_MOE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "metrics.h"
#include "tide/backend.h"
#include "tide/moe.h"
#include "tide/policy.h"
#include "tide/trace.h"

/* Exact counters of one MoE layer over one phase (a denoising step, the
 * prefill, or a block's final K/V pass). */
struct tide_moe_counters {
    union { /* the exact counters, by name or as one struct */
        struct tide_traffic traffic;
        struct {
            TIDE_TRAFFIC_MEMBERS;
        };
    };
    double host_seconds;   /* host expert FFN time */
    double device_seconds; /* device expert FFN time */
};

/* How experts are placed. */
struct tide_moe_placement {
    const struct tide_policy_ops *ops; /* policy plugin; unused when budget >= n_experts */
    const char *name;                  /* policy plugin name, for messages */
    const struct tide_opts *opts;      /* its section */
    int budget;                        /* device slots per MoE layer */
    /* Handed to the policy in its shape (tide/policy.h); 0 / NULL when unknown. */
    int block_length, max_steps;
    const struct tide_policy_costs *costs; /* must outlive the configuration */
};

/* Create a dispatcher. host may be NULL when no configuration will offload.
 * The backends must outlive the dispatcher. */
int tide_moe_create(const struct tide_backend_ref *dev, const struct tide_backend_ref *host,
                    struct tide_moe **out);
void tide_moe_destroy(struct tide_moe *moe); /* NULL is a no-op */

/* (Re)configure placement after the model registered its experts: frees the
 * previous slots and policy, creates the new ones and loads the policy's
 * initial residents. Experts made available on a backend are kept across
 * calls, so a sweep pays for that once. Returns TIDE_OK or a status
 * (TIDE_E_BUDGET when the slots do not fit the device, with the numbers). */
int tide_moe_configure(struct tide_moe *moe, const struct tide_moe_placement *p);

const struct tide_moe_shape *tide_moe_get_shape(const struct tide_moe *moe);
/* Bytes of one routed expert (all three matrices, as stored). */
uint64_t tide_moe_expert_bytes(const struct tide_moe *moe);
int tide_moe_budget(const struct tide_moe *moe);

/* Generation events (from the generator's hooks). */
void tide_moe_block_begin(struct tide_moe *moe, int block, bool first_generated);
int tide_moe_step_begin(struct tide_moe *moe, int block, int step);
void tide_moe_step_end(struct tide_moe *moe);
/* The prompt of generation prompt_id grew by `inserted` tokens at `at`, to
 * prompt_len (DIP): the trace's context record and the policy's
 * prompt_grow; the forwards until the next block are prefill. Returns
 * TIDE_OK or the trace's failure. */
int tide_moe_context(struct tide_moe *moe, uint32_t prompt_id, uint32_t at, uint32_t inserted,
                     uint32_t prompt_len);
/* End of a generation: emits the pending phase. */
void tide_moe_finish(struct tide_moe *moe);
/* A generation of prompt_len tokens starts: tells the policy, with the
 * prompt's vector vec[dim] (NULL, 0 when unknown). */
void tide_moe_prompt_begin(struct tide_moe *moe, uint32_t prompt_len, const float *vec, int dim);
/* True when the policy in place listens to prompt_begin (so a prompt vector
 * is worth computing). */
bool tide_moe_wants_prompt(const struct tide_moe *moe);

/* Send the routing of every forward, and the block and step events, to s
 * (NULL: stop). s must stay valid until it is replaced. The first status a
 * sink returns stops the generation. */
void tide_moe_set_trace(struct tide_moe *moe, const struct tide_trace_sink *s);
/* The sink set, or NULL. */
const struct tide_trace_sink *tide_moe_get_trace(const struct tide_moe *moe);

/* Telemetry: JSON Lines, one per MoE layer per phase, to f (NULL: none). */
void tide_moe_set_metrics(struct tide_moe *moe, FILE *f);
/* Totals over every layer and phase since the last reset. */
void tide_moe_totals(const struct tide_moe *moe, struct tide_moe_counters *out);
/* The same for one MoE layer (0-based); zeros for a layer out of range. */
void tide_moe_layer_totals(const struct tide_moe *moe, int layer, struct tide_moe_counters *out);
void tide_moe_reset_totals(struct tide_moe *moe);

#endif
