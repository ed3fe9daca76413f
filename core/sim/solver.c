/* The TIDE refresh rule, its evaluator and the interval/budget solver
 * (tide/solver.h). */
#include <stdlib.h>
#include <string.h>

#include "tide/log.h"
#include "tide/solver.h"
#include "tide/status.h"
#include "tide/trace.h"

void tide_solver_ws_free(struct tide_solver_ws *ws)
{
    if (!ws)
        return;
    free(ws->hist);
    free(ws->ids);
    free(ws->mark);
    free(ws->dense);
    free(ws->last);
    free(ws->promote);
    free(ws->evict);
    free(ws->keys);
    memset(ws, 0, sizeof *ws);
}

static bool ws_grow(void **p, size_t n, size_t elem)
{
    void *q = realloc(*p, n * elem);
    if (!q)
        return false;
    *p = q;
    return true;
}

/* Room for n experts; dense and last come zeroed and are kept zeroed by
 * their users. */
static int ws_experts(struct tide_solver_ws *ws, int n)
{
    size_t need = (size_t)(n > 0 ? n : 1);
    if (need <= ws->cap_ids)
        return TIDE_OK;
    if (!ws_grow((void **)&ws->ids, need, sizeof *ws->ids) ||
        !ws_grow((void **)&ws->mark, need, 1) ||
        !ws_grow((void **)&ws->promote, need, sizeof *ws->promote) ||
        !ws_grow((void **)&ws->evict, need, sizeof *ws->evict))
        return TIDE_E_NOMEM;
    free(ws->dense);
    free(ws->last);
    ws->dense = calloc(need, sizeof *ws->dense);
    ws->last = calloc(need, sizeof *ws->last);
    if (!ws->dense || !ws->last)
        return TIDE_E_NOMEM;
    ws->cap_ids = need;
    return TIDE_OK;
}

static int key_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int tide_rank_top(const uint32_t *counts, int n, int k, int32_t *out, struct tide_solver_ws *ws)
{
    uint32_t m = 0;
    int active = 0;
    for (int e = 0; e < n; e++) {
        if (counts[e]) {
            active++;
            if (counts[e] > m)
                m = counts[e];
        }
    }
    if (k > active)
        k = active;
    if (k <= 0)
        return 0;
    if ((uint64_t)m <= 4ull * (uint64_t)n + 1024) {
        /* Counting sort, stable in id: offsets by descending count. */
        if (m + 1 > ws->cap_hist) {
            if (!ws_grow((void **)&ws->hist, m + 1, sizeof *ws->hist))
                return TIDE_E_NOMEM;
            ws->cap_hist = m + 1;
        }
        memset(ws->hist, 0, sizeof *ws->hist * (m + 1));
        for (int e = 0; e < n; e++)
            ws->hist[counts[e]]++;
        uint32_t acc = 0;
        for (uint32_t c = m; c >= 1; c--) {
            uint32_t t = ws->hist[c];
            ws->hist[c] = acc;
            acc += t;
        }
        for (int e = 0; e < n; e++) {
            if (!counts[e])
                continue;
            uint32_t at = ws->hist[counts[e]]++;
            if (at < (uint32_t)k)
                out[at] = e;
        }
        return k;
    }
    if ((size_t)active > ws->cap_keys) {
        if (!ws_grow((void **)&ws->keys, (size_t)active, sizeof *ws->keys))
            return TIDE_E_NOMEM;
        ws->cap_keys = (size_t)active;
    }
    int a = 0;
    for (int e = 0; e < n; e++)
        if (counts[e])
            ws->keys[a++] = (uint64_t)(UINT32_MAX - counts[e]) << 32 | (uint32_t)e;
    qsort(ws->keys, (size_t)a, sizeof *ws->keys, key_cmp);
    for (int i = 0; i < k; i++)
        out[i] = (int32_t)(ws->keys[i] & 0xffffffffu);
    return k;
}

int tide_tide_refresh(const uint32_t *counts, const uint8_t *resident, int n_resident, int n,
                      int budget, int32_t *promote, int32_t *evict, struct tide_solver_ws *ws)
{
    int rc = ws_experts(ws, n);
    if (rc != TIDE_OK)
        return rc;
    int32_t *target = ws->ids;
    int nt = tide_rank_top(counts, n, budget, target, ws);
    if (nt < 0)
        return nt;
    uint8_t *in_target = ws->mark;
    memset(in_target, 0, (size_t)n);
    for (int i = 0; i < nt; i++)
        in_target[target[i]] = 1;
    int free_slots = budget - n_resident, next = 0, np = 0;
    for (int i = 0; i < nt; i++) {
        int32_t e = target[i], victim = -1;
        if (resident[e])
            continue;
        if (free_slots > 0) {
            free_slots--;
        } else {
            /* |target| <= budget, so enough non-target residents exist. */
            while (next < n && !(resident[next] && !in_target[next]))
                next++;
            if (next >= n) {
                tide_error("tide refresh: no resident left to evict (%d residents, budget %d)",
                           n_resident, budget);
                return TIDE_E_INVAL;
            }
            victim = next++;
        }
        promote[np] = e;
        evict[np] = victim;
        np++;
    }
    return np;
}

static void eval_apply(uint8_t *resident, int *n_res, const int32_t *promote, const int32_t *evict,
                       int np)
{
    for (int i = 0; i < np; i++) {
        if (evict[i] >= 0)
            resident[evict[i]] = 0;
        else
            (*n_res)++;
        resident[promote[i]] = 1;
    }
}

int tide_solver_eval_tide(const struct tide_solver_fwd *fwd, size_t n_fwd, int n_experts,
                          int budget, uint8_t *resident, const struct tide_tide_rule *rule,
                          const struct tide_cost *cost, struct tide_eval *out,
                          struct tide_solver_ws *ws)
{
    if (budget < 0 || budget > n_experts || rule->interval < 1) {
        tide_error("tide evaluator: budget %d (of %d experts) or interval %d out of range", budget,
                   n_experts, rule->interval);
        return TIDE_E_INVAL;
    }
    int rc = ws_experts(ws, n_experts);
    if (rc != TIDE_OK)
        return rc;
    int n_res = 0;
    for (int e = 0; e < n_experts; e++)
        n_res += resident[e] != 0;
    if (n_res > budget) {
        tide_error("tide evaluator: %d residents exceed the budget of %d", n_res, budget);
        return TIDE_E_INVAL;
    }
    uint32_t *dense = ws->dense, *last = ws->last;
    bool have_last = false;
    int32_t *promote = ws->promote, *evict = ws->evict;
    for (size_t i = 0; i < n_fwd && rc == TIDE_OK; i++) {
        const struct tide_solver_fwd *f = &fwd[i];
        for (uint32_t a = 0; a < f->n_active; a++)
            dense[f->ids[a]] = f->cnt[a];
        int promotions = 0;
        if (f->phase == TIDE_TRACE_STEP) {
            bool refresh =
                f->step % rule->interval == 0 || (f->first_block && rule->first_block_every_step);
            bool done = false;
            if (rule->prefetch && refresh && have_last) {
                int np =
                    tide_tide_refresh(last, resident, n_res, n_experts, budget, promote, evict, ws);
                if (np < 0) {
                    rc = np;
                    break;
                }
                eval_apply(resident, &n_res, promote, evict, np);
                promotions += np;
                done = true;
            }
            if (refresh && !done) {
                int np = tide_tide_refresh(dense, resident, n_res, n_experts, budget, promote,
                                           evict, ws);
                if (np < 0) {
                    rc = np;
                    break;
                }
                eval_apply(resident, &n_res, promote, evict, np);
                promotions += np;
            }
            if (rule->prefetch) {
                memcpy(last, dense, sizeof *last * (size_t)n_experts);
                have_last = true;
            }
        }
        struct tide_layer_work w = {.promotions = (uint32_t)promotions, .tokens = f->tokens};
        for (uint32_t a = 0; a < f->n_active; a++) {
            uint32_t c = f->cnt[a];
            if (resident[f->ids[a]]) {
                w.device_us += tide_cost_device(cost, c);
                out->hit_rows += c;
            } else {
                w.host_us += tide_cost_host(cost, c);
                w.host_rows += c;
            }
            dense[f->ids[a]] = 0;
        }
        out->miss_rows += w.host_rows;
        out->promotions += (uint64_t)promotions;
        double us = tide_cost_layer_us(cost, &w);
        out->us += us;
        if (f->phase == TIDE_TRACE_STEP)
            out->step_us += us;
    }
    if (rc != TIDE_OK)
        memset(dense, 0, sizeof *dense * (size_t)n_experts);
    memset(last, 0, sizeof *last * (size_t)n_experts);
    return rc;
}

int tide_solver_intervals(const double *cost, int n_layers, int n_int, const int *intervals,
                          int *global_idx, double *global_us, int *layer_idx, double *layer_us)
{
    if (n_layers < 1 || n_int < 1) {
        tide_error("interval solver: no layer or no interval to choose from");
        return TIDE_E_INVAL;
    }
    /* Ties go to the longer interval. */
    int best = -1;
    double best_us = 0;
    for (int i = 0; i < n_int; i++) {
        double s = 0;
        for (int l = 0; l < n_layers; l++)
            s += cost[(size_t)l * n_int + i];
        if (best < 0 || s < best_us || (s == best_us && intervals[i] > intervals[best])) {
            best = i;
            best_us = s;
        }
    }
    *global_idx = best;
    *global_us = best_us;
    double total = 0;
    for (int l = 0; l < n_layers; l++) {
        const double *c = &cost[(size_t)l * n_int];
        int b = 0;
        for (int i = 1; i < n_int; i++)
            if (c[i] < c[b] || (c[i] == c[b] && intervals[i] > intervals[b]))
                b = i;
        if (layer_idx)
            layer_idx[l] = b;
        total += c[b];
    }
    if (layer_us)
        *layer_us = total;
    return TIDE_OK;
}

int tide_solver_budgets(const double *cost, int n_layers, int n_b, const int *budgets,
                        int64_t total, int *idx, double *total_us)
{
    if (n_layers < 1 || n_b < 1 || budgets[0] < 0) {
        tide_error("budget solver: empty budget grid or no layer");
        return TIDE_E_INVAL;
    }
    for (int j = 1; j < n_b; j++)
        if (budgets[j] <= budgets[j - 1]) {
            tide_error("budget solver: the budget grid must be strictly ascending");
            return TIDE_E_INVAL;
        }
    int64_t used = (int64_t)n_layers * budgets[0];
    if (used > total) {
        tide_error("budget solver: %lld experts in all cannot give %d layers %d each",
                   (long long)total, n_layers, budgets[0]);
        return TIDE_E_BUDGET;
    }
    for (int l = 0; l < n_layers; l++)
        idx[l] = 0;
    for (;;) {
        int best = -1;
        double best_gain = 0;
        for (int l = 0; l < n_layers; l++) {
            int j = idx[l];
            if (j + 1 >= n_b)
                continue;
            int64_t step = budgets[j + 1] - budgets[j];
            if (used + step > total)
                continue;
            const double *c = &cost[(size_t)l * n_b];
            double gain = (c[j] - c[j + 1]) / (double)step;
            if (gain > best_gain) {
                best_gain = gain;
                best = l;
            }
        }
        if (best < 0)
            break;
        used += budgets[idx[best] + 1] - budgets[idx[best]];
        idx[best]++;
    }
    double s = 0;
    for (int l = 0; l < n_layers; l++)
        s += cost[(size_t)l * n_b + idx[l]];
    *total_us = s;
    return TIDE_OK;
}
