/* Expert-placement policy interface (struct tide_policy_ops, version 1).
 *
 * A policy is pure decision logic: it never touches memory or backends, so the
 * same plugin runs inside the live engine and inside the trace simulator.
 * Per MoE layer and denoising step it sees how many tokens routed to each
 * expert and which experts are resident on the device, and answers with a
 * plan: experts to promote (each paired with a resident to evict when the
 * layer is full) and where each active expert runs. The core validates every
 * plan before executing it.
 *
 * Growth: slots are only appended; TIDE_POLICY_OPS_MIN_SIZE is required. */
#ifndef TIDE_POLICY_H
#define TIDE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/option.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tide_policy; /* instance */

struct tide_policy_shape {
    uint32_t size;    /* sizeof(struct tide_policy_shape) */
    int n_layers;     /* all layers */
    int n_moe_layers; /* layers the policy is asked about, 0-based */
    int n_experts;    /* per MoE layer */
    int top_k;
    uint64_t expert_bytes; /* bytes moved by one promotion */
    int budget;            /* device slots per MoE layer, 0 .. n_experts */
};

enum tide_place {
    TIDE_PLACE_DEVICE = 0, /* run on the device backend (must be resident) */
    TIDE_PLACE_HOST = 1,   /* run on the host backend */
};

/* What the core shows the policy for one MoE layer at one step. */
struct tide_policy_view {
    int layer;               /* 0-based MoE layer */
    int block;               /* generated block index, 0 = first generated block */
    int step;                /* denoising step within the block, from 0 */
    const uint32_t *counts;  /* [n_experts] token-slot assignments this step */
    const uint8_t *resident; /* [n_experts] 1 if in a device slot */
};

/* The policy's answer. The core provides the arrays, sized n_experts. */
struct tide_plan {
    int n_promote;    /* promotions this step, <= budget */
    int32_t *promote; /* [n_promote] experts to copy into device slots */
    int32_t *evict;   /* [n_promote] resident to free for each, or -1 for a free slot */
    uint8_t *place;   /* [n_experts] enum tide_place for every expert with counts > 0,
                         evaluated after the promotions */
};

/* Promotions a policy asks for at the start of a step (prefetch). The core
 * provides the arrays with room for `cap` entries. */
struct tide_prefetch {
    int cap;
    int n;
    int32_t *layer;  /* [cap] MoE layer */
    int32_t *expert; /* [cap] expert to promote (must not be resident) */
    int32_t *evict;  /* [cap] resident of that layer to free, or -1 for a free slot */
};

struct tide_policy_ops {
    uint32_t size;
    int (*create)(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                  struct tide_policy **out);
    void (*destroy)(struct tide_policy *p); /* NULL is a no-op */
    /* Initial residents of a layer: write up to budget expert ids into
     * out[budget]; returns how many (<= budget). */
    int (*initial)(struct tide_policy *p, int layer, int32_t *out);
    /* A new block starts; first_generated is true for the first decoded block. */
    void (*block_begin)(struct tide_policy *p, int block, bool first_generated);
    /* Decide the plan for one layer at one step. Returns TIDE_OK or a status. */
    int (*plan)(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out);

    /* ---- Optional: beyond TIDE_POLICY_OPS_MIN_SIZE. ---- */

    /* A denoising step is about to start. resident[l][e] is the residency
     * map of MoE layer l. The policy may ask for promotions in any layer now;
     * the core issues them at once, so on an asynchronous backend the copies
     * overlap the earlier layers' compute. Returns TIDE_OK or a status. */
    int (*step_begin)(struct tide_policy *p, int block, int step, const uint8_t *const *resident,
                      struct tide_prefetch *out);
};

#define TIDE_POLICY_OPS_MIN_SIZE (offsetof(struct tide_policy_ops, plan) + sizeof(void (*)(void)))

#ifdef __cplusplus
}
#endif
#endif
