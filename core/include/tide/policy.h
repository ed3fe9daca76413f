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

/* The modelled costs of this machine (a hardware profile, docs/profiles.md)
 * as plain numbers, for policies that weigh a promotion against host work.
 * Times are microseconds for the expert shape of the policy's model. The
 * cost model they come from, per MoE layer and forward:
 *   serial:  t = D + W + L + A_down + H + A_up
 *   overlap: t = max(D, W + A_up, L + A_down + H + A_up)
 * with D, H the device and host expert times (the tables below), W =
 * promotions x promote_us, A_down / A_up = host rows x act_*_us_row, and L =
 * 2 x latency_us when any row runs on the host. The tables cover every row
 * count a plan can see (a step forward's tokens); beyond them a policy
 * extrapolates linearly from the last two entries. Owned by the core, valid
 * until the policy is destroyed. */
struct tide_policy_costs {
    uint32_t size;           /* sizeof(struct tide_policy_costs) */
    uint64_t expert_bytes;   /* the expert the numbers are for (the shape's expert_bytes) */
    bool overlap;            /* copies, host experts and device experts run concurrently */
    double promote_us;       /* one promotion: expert_bytes / host-to-device bandwidth */
    double act_down_us_row;  /* one host row's input to the host */
    double act_up_us_row;    /* its result back to the device */
    double latency_us;       /* fixed cost of each activation copy (one each way) */
    int n_rows;              /* the tables cover rows 0 .. n_rows-1, n_rows >= 2 */
    const double *device_us; /* [n_rows] one expert with r rows on the device; [0] = 0 */
    const double *host_us;   /* [n_rows] one expert with r rows on the host; [0] = 0 */
};

struct tide_policy_shape {
    uint32_t size;    /* sizeof(struct tide_policy_shape) */
    int n_layers;     /* all layers */
    int n_moe_layers; /* layers the policy is asked about, 0-based */
    int n_experts;    /* per MoE layer */
    int top_k;
    uint64_t expert_bytes; /* bytes moved by one promotion */
    int budget;            /* device slots per MoE layer, 0 .. n_experts */
    /* ---- Appended: read only when `size` covers them (TIDE_SHAPE_HAS). ---- */
    int block_length; /* tokens per diffusion block; 0 when unknown */
    int max_steps;    /* most denoising steps per block; 0 when unknown */
    /* The machine's modelled costs: [policy] profile in the engine, the
     * --profile of `tide sim`; NULL when none was given. */
    const struct tide_policy_costs *costs;
};

/* True when shape s (from a core of any age) has the field. */
#define TIDE_SHAPE_HAS(s, field)                                                                   \
    ((s)->size >= offsetof(struct tide_policy_shape, field) + sizeof((s)->field))

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
    /* A generation starts (before its prefill): prompt_len tokens, and
     * vec[dim] the prompt's vector (the mean of its input embeddings, from
     * the model's prompt_vector slot or the trace), or vec NULL and dim 0
     * when the model or the trace gives none. vec is valid during the call. */
    void (*prompt_begin)(struct tide_policy *p, uint32_t prompt_len, const float *vec, int dim);
    /* The prompt grew during generation (DIP, docs/dip.md): `inserted`
     * tokens joined it, which is now prompt_len long. The forwards that
     * recompute what the insertion changed (prefill phase) follow, then the
     * next block begins. */
    void (*prompt_grow)(struct tide_policy *p, uint32_t prompt_len, uint32_t inserted);
};

#define TIDE_POLICY_OPS_MIN_SIZE (offsetof(struct tide_policy_ops, plan) + sizeof(void (*)(void)))

#ifdef __cplusplus
}
#endif
#endif
