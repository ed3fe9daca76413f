#include <stdio.h>
#include <string.h>

#include "plan_check.h"

const char *tide_plan_check(const struct tide_plan_ctx *c, const struct tide_plan *p, char *why,
                            size_t len)
{
    const int E = c->n_experts;
    uint8_t *mark = c->mark;
    int free_slots = c->budget - c->n_held;
    why[0] = 0;
    if (p->n_promote < 0 || p->n_promote > c->budget) {
        snprintf(why, len, "%d promotions with a budget of %d", p->n_promote, c->budget);
        return why;
    }
    /* Mark promotions (2) and evictions (3) in a scratch copy of residency. */
    memcpy(mark, c->resident, (size_t)E);
    for (int i = 0; i < p->n_promote; i++) {
        int e = p->promote[i], ev = p->evict[i];
        if (e < 0 || e >= E)
            snprintf(why, len, "promotes expert %d, out of range", e);
        else if (mark[e])
            snprintf(why, len, "promotes expert %d, which is already resident", e);
        else if (ev < 0 && free_slots-- <= 0)
            snprintf(why, len, "promotes expert %d into a free slot, but the layer is full", e);
        else if (ev >= E || (ev >= 0 && mark[ev] != 1))
            snprintf(why, len, "evicts expert %d, which is not resident", ev);
        if (*why)
            return why;
        mark[e] = 2;
        if (ev >= 0)
            mark[ev] = 3;
    }
    for (int e = 0; e < E; e++) {
        if (!c->counts[e])
            continue;
        if (p->place[e] == TIDE_PLACE_DEVICE && mark[e] != 1 && mark[e] != 2)
            snprintf(why, len,
                     mark[e] == 3 ? "evicts expert %d, which it places on the device"
                                  : "places expert %d on the device, but it is not resident",
                     e);
        else if (p->place[e] != TIDE_PLACE_DEVICE && p->place[e] != TIDE_PLACE_HOST)
            snprintf(why, len, "places expert %d nowhere (place %d)", e, p->place[e]);
        if (*why)
            return why;
    }
    return NULL;
}

const char *tide_prefetch_check(int n_experts, int budget, int n_held, const uint8_t *resident,
                                int e, int evict)
{
    if (!resident || e < 0 || e >= n_experts)
        return "a layer or expert out of range";
    if (resident[e])
        return "an expert that is already resident";
    if (evict >= 0 && (evict >= n_experts || !resident[evict]))
        return "an eviction of an expert that is not resident";
    if (evict < 0 && n_held >= budget)
        return "a free slot in a full layer";
    return NULL;
}
