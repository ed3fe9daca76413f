/* The "full swap" rule of policy-lru and policy-lfu (header-only, static
 * inline): every active expert that is not resident is promoted before it
 * runs, busiest first (ties: lower id), into a free slot, else evicting the
 * resident the caller's `victim` picks among those idle this step; when it
 * finds none (every resident is active) the remaining misses run on the
 * host. Active residents are never evicted. */
#ifndef TIDE_POLICY_COMMON_FULLSWAP_H
#define TIDE_POLICY_COMMON_FULLSWAP_H

#include <stdint.h>
#include <string.h>

#include "policy-common/plan.h"
#include "policy-common/rank.h"
#include "tide/policy.h"

/* Plan one layer-step (the view was checked: n_res residents). r[n_experts]
 * and held[n_experts] are the caller's scratch; held ends as the residency
 * after the plan. victim(ctx, held, counts, n) returns an expert with
 * held[e] and counts[e] == 0, or -1 for none. */
static inline void polc_full_swap(
    const struct tide_policy_shape *s, const struct tide_policy_view *v, int n_res,
    int32_t (*victim)(const void *ctx, const uint8_t *held, const uint32_t *counts, int n),
    const void *ctx, struct polc_rank *r, uint8_t *held, struct tide_plan *out)
{
    const int n = s->n_experts;
    polc_rank_counts(v->counts, NULL, n, r);
    const int n_active = polc_rank_top_active(r, n, n);
    int free_slots = s->budget - n_res;
    memcpy(held, v->resident, (size_t)n);
    out->n_promote = 0;
    for (int i = 0; i < n_active; i++) {
        int32_t e = r[i].id, u = -1;
        if (held[e])
            continue;
        if (free_slots > 0) {
            free_slots--;
        } else {
            u = victim(ctx, held, v->counts, n);
            if (u < 0)
                break; /* every slot holds an active expert: the rest run on the host */
            held[u] = 0;
        }
        held[e] = 1;
        out->promote[out->n_promote] = e;
        out->evict[out->n_promote] = u;
        out->n_promote++;
    }
    polc_place(s, v, out);
}

#endif
