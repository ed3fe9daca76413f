/* Ranking experts by routing count, shared by the policy plugins.
 *
 * Header-only (static inline): each policy plugin compiles its own copy, so
 * the plugins stay independent shared objects with no extra library.
 *
 * The order is total and therefore deterministic: count descending, ties
 * broken by the lower expert id. */
#ifndef TIDE_POLICY_COMMON_RANK_H
#define TIDE_POLICY_COMMON_RANK_H

#include <stdint.h>
#include <stdlib.h>

/* One expert and its count. */
struct polc_rank {
    uint64_t count; /* token-slot assignments */
    int32_t id;     /* expert id, 0 .. n_experts-1 */
};

static inline int polc_rank_cmp(const void *a, const void *b)
{
    const struct polc_rank *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Sort r[n] by count descending, ties by lower id. */
static inline void polc_rank_sort(struct polc_rank *r, int n)
{
    if (n > 1)
        qsort(r, (size_t)n, sizeof *r, polc_rank_cmp);
}

/* Rank the n experts of one layer into r[n] (caller's scratch, sized n)
 * from either per-step counts (c32) or a 64-bit table (c64, routing-count
 * files); pass exactly one of them. */
static inline void polc_rank_counts(const uint32_t *c32, const uint64_t *c64, int n,
                                    struct polc_rank *r)
{
    for (int e = 0; e < n; e++) {
        r[e].count = c32 ? c32[e] : c64[e];
        r[e].id = e;
    }
    polc_rank_sort(r, n);
}

/* After polc_rank_counts: how many of the first `k` ranked experts have a count
 * above zero (the top-k target when zero-count experts are excluded). */
static inline int polc_rank_top_active(const struct polc_rank *r, int n, int k)
{
    int m = 0;
    while (m < k && m < n && r[m].count > 0)
        m++;
    return m;
}

#endif
