/* The router's per-token selection, shared by every backend that finishes
 * routing on the host (backend-cpu-onednn; backend-cuda copies the logits
 * back for it), so all backends pick exactly the same experts.
 *
 * Semantics (backend.h, struct tide_router_args): s = sigmoid(logit);
 * sel = s + bias; with n_group > 1 a group's score is the sum of its top-2
 * sel, the topk_group best groups are kept (ties: lower group) and the rest
 * masked to -inf; then top_k experts by sel descending (ties: lower id);
 * w = s at those ids, normalised (+1e-20) when norm_topk, times scale.
 * Header-only: a plugin folder, not a library. */
#ifndef TIDE_BACKEND_COMMON_ROUTE_H
#define TIDE_BACKEND_COMMON_ROUTE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tide/backend.h"

/* Index of the largest v[i] with !taken[i]; ties and NaNs go to the lowest index. */
static inline int bkc_argmax(const float *v, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

/* Route one token. s and sel are scratch of E floats, gs of n_group floats;
 * taken of E bytes, gt of n_group bytes. ids and w receive top_k entries. */
static inline void bkc_route_token(const struct tide_router_args *a, const float *logit,
                                   const float *bias, int E, float *s, float *sel,
                                   unsigned char *taken, float *gs, unsigned char *gt, int32_t *ids,
                                   float *w)
{
    for (int e = 0; e < E; e++) {
        s[e] = 1.0f / (1.0f + expf(-logit[e]));
        sel[e] = bias ? s[e] + bias[e] : s[e];
    }
    if (a->n_group > 1) {
        const int gsz = E / a->n_group;
        for (int g = 0; g < a->n_group; g++) {
            const float *v = sel + g * gsz;
            float m1 = -INFINITY, m2 = -INFINITY; /* top-2 */
            for (int i = 0; i < gsz; i++) {
                if (v[i] > m1) {
                    m2 = m1;
                    m1 = v[i];
                } else if (v[i] > m2) {
                    m2 = v[i];
                }
            }
            gs[g] = gsz > 1 ? m1 + m2 : m1;
            gt[g] = 0;
        }
        for (int k = 0; k < a->topk_group; k++)
            gt[bkc_argmax(gs, gt, a->n_group)] = 1;
        for (int e = 0; e < E; e++)
            if (!gt[e / gsz])
                sel[e] = -INFINITY;
    }
    memset(taken, 0, (size_t)E);
    float sum = 0.0f;
    for (int k = 0; k < a->top_k; k++) {
        int e = bkc_argmax(sel, taken, E);
        taken[e] = 1;
        ids[k] = e;
        w[k] = s[e];
        sum += w[k];
    }
    for (int k = 0; k < a->top_k; k++) {
        if (a->norm_topk)
            w[k] /= sum + 1e-20f;
        w[k] *= a->scale;
    }
}

#endif
