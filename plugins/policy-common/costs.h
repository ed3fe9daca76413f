/* The machine's modelled costs (struct tide_policy_costs, tide/policy.h)
 * as policies use them: expert times at fractional rows, the modelled time
 * of one layer-forward, and the placement that balances device and host.
 *
 * Header-only (static inline). The model is the profile's (docs/profiles.md):
 *   serial:  t = D + W + L + A_down + H + A_up
 *   overlap: t = max(D, W + A_up, L + A_down + H + A_up)
 * per MoE layer and forward, where D and H are the device and host expert
 * times, W the promotions' copies, A_down and A_up the host rows' activation
 * copies and L twice the copy latency when any row runs on the host. */
#ifndef TIDE_POLICY_COMMON_COSTS_H
#define TIDE_POLICY_COMMON_COSTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tide/log.h"
#include "tide/policy.h"
#include "tide/status.h"

/* The shape's costs, or NULL (logged as an error when `required`, naming
 * the option that provides them) when there are none or they do not fit
 * the shape. *rc is TIDE_OK, or TIDE_E_CONFIG / TIDE_E_INVAL on a problem. */
static inline const struct tide_policy_costs *
polc_costs_get(const char *who, const struct tide_policy_shape *s, bool required, int *rc)
{
    *rc = TIDE_OK;
    const struct tide_policy_costs *c = TIDE_SHAPE_HAS(s, costs) ? s->costs : NULL;
    if (!c) {
        if (required) {
            tide_error("%s: needs the machine's modelled costs: set [policy] profile to a "
                       "hardware profile such as config/profiles/h100-pcie5.ini (tide sim: "
                       "--profile); measure this machine with `tide profile`",
                       who);
            *rc = TIDE_E_CONFIG;
        }
        return NULL;
    }
    if (c->size < offsetof(struct tide_policy_costs, host_us) + sizeof c->host_us ||
        c->n_rows < 2 || !c->device_us || !c->host_us) {
        tide_error("%s: the core handed over malformed costs (%u bytes, %d table rows)", who,
                   c->size, c->n_rows);
        *rc = TIDE_E_INVAL;
        return NULL;
    }
    if (c->expert_bytes != s->expert_bytes) {
        tide_error("%s: the costs are for experts of %llu bytes, the model's have %llu", who,
                   (unsigned long long)c->expert_bytes, (unsigned long long)s->expert_bytes);
        *rc = TIDE_E_CONFIG;
        return NULL;
    }
    return c;
}

/* A table of times against whole rows, read at fractional rows: linear
 * from 0 between 0 and 1 row (an expected cost: a chance of one row), linear
 * between whole rows, extrapolated from the last two entries beyond. */
static inline double polc_tab(const double *tab, int n, double rows)
{
    if (rows <= 0)
        return 0;
    if (rows < 1)
        return rows * tab[1];
    if (rows >= (double)(n - 1)) {
        const double slope = n > 2 ? tab[n - 1] - tab[n - 2] : 0;
        return tab[n - 1] + slope * (rows - (double)(n - 1));
    }
    const int r = (int)rows;
    return tab[r] + (tab[r + 1] - tab[r]) * (rows - (double)r);
}

static inline double polc_dev_us(const struct tide_policy_costs *c, double rows)
{
    return polc_tab(c->device_us, c->n_rows, rows);
}

static inline double polc_host_us(const struct tide_policy_costs *c, double rows)
{
    return polc_tab(c->host_us, c->n_rows, rows);
}

/* Work of one layer-forward, in the terms of the model. */
struct polc_work {
    double dev;       /* D: device expert time */
    double host;      /* H: host expert time */
    double host_rows; /* rows on the host (A_down and A_up scale with them) */
    double promotions;
    bool any_host; /* L applies (expected work: host_rows > 0) */
};

/* Modelled microseconds of w (the profile's serial or overlapped form). */
static inline double polc_time(const struct tide_policy_costs *c, const struct polc_work *w)
{
    const double L = w->any_host ? 2.0 * c->latency_us : 0.0;
    const double down = c->act_down_us_row * w->host_rows, up = c->act_up_us_row * w->host_rows;
    const double W = c->promote_us * w->promotions;
    if (!c->overlap)
        return w->dev + W + L + down + w->host + up;
    double t = w->dev;
    if (W + up > t)
        t = W + up;
    if (L + down + w->host + up > t)
        t = L + down + w->host + up;
    return t;
}

/* An active resident: where it runs is the balancer's choice. */
struct polc_item {
    double dev;  /* its device time */
    double host; /* its host time */
    double rows;
    double key; /* sort key, set by polc_balance */
    int32_t id;
};

static inline int polc_item_cmp(const void *a, const void *b)
{
    const struct polc_item *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Place the active residents it[n] to minimise the modelled time of a
 * layer-forward whose other work (experts that must run on the host,
 * promotions) is in *base: it[] is sorted by the host time each adds per
 * device time it saves (cheapest to move first, ties to the lower id), and
 * the best prefix of that order runs on the host. Exact for serial costs
 * (each move changes t by its own amount); with overlap it is the greedy
 * order of the balance between the device and the host path. Writes the
 * prefix length to *n_host and returns the modelled time. */
static inline double polc_balance(const struct tide_policy_costs *c, const struct polc_work *base,
                                  struct polc_item *it, int n, int *n_host)
{
    struct polc_work w = *base;
    const double act = c->act_down_us_row + c->act_up_us_row;
    for (int i = 0; i < n; i++) {
        w.dev += it[i].dev;
        const double moved = it[i].host + act * it[i].rows;
        it[i].key = it[i].dev > 0 ? moved / it[i].dev : moved * 1e12;
    }
    qsort(it, (size_t)n, sizeof *it, polc_item_cmp);
    double best = polc_time(c, &w);
    int k_best = 0;
    for (int i = 0; i < n; i++) {
        w.dev -= it[i].dev;
        w.host += it[i].host;
        w.host_rows += it[i].rows;
        w.any_host = true;
        const double t = polc_time(c, &w);
        if (t < best) {
            best = t;
            k_best = i + 1;
        }
    }
    *n_host = k_best;
    return best;
}

/* Modelled time of one layer-forward in which expert e has rows[e] rows
 * (fractional: expected rows; below 1e-3 it is idle) or counts[e] (pass
 * exactly one of the two), the residents res[] may run on either side (the
 * balanced choice when `balance`, else all on the device) and the others run
 * on the host, with `promotions` copies. Only the experts ids[n] are looked
 * at when ids is not NULL (the active ones), else experts 0..n-1.
 * it[n_experts] is scratch. When place is not NULL the residents the balance
 * runs on the host are marked TIDE_PLACE_HOST in it (nothing else is
 * written). */
static inline double polc_layer_time(const struct tide_policy_costs *c, int n, const int32_t *ids,
                                     const double *rows, const uint32_t *counts, const uint8_t *res,
                                     int promotions, bool balance, struct polc_item *it,
                                     uint8_t *place)
{
    struct polc_work w = {.promotions = promotions};
    int n_it = 0;
    for (int i = 0; i < n; i++) {
        const int e = ids ? ids[i] : i;
        const double r = rows ? rows[e] : (double)counts[e];
        if (r < 1e-3)
            continue;
        if (res[e]) {
            it[n_it++] = (struct polc_item){
                .dev = polc_dev_us(c, r), .host = polc_host_us(c, r), .rows = r, .id = e};
        } else {
            w.host += polc_host_us(c, r);
            w.host_rows += r;
            w.any_host = true;
        }
    }
    if (!balance) {
        for (int i = 0; i < n_it; i++)
            w.dev += it[i].dev;
        return polc_time(c, &w);
    }
    int n_host = 0;
    const double t = polc_balance(c, &w, it, n_it, &n_host);
    for (int i = 0; place && i < n_host; i++)
        place[it[i].id] = TIDE_PLACE_HOST;
    return t;
}

#endif
