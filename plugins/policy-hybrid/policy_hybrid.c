/* policy-hybrid: a static core of the most popular experts plus a dynamic
 * part refreshed TIDE-style, with the split chosen per layer by a solver.
 *
 * The rule, per MoE layer:
 *  - popularity is every expert's rows over the denoising steps seen so far
 *    (plus counts_file when initial = popular);
 *  - at each block begin the layer's core is its `core_size` most popular
 *    experts (ties: lower id), fixed for the block;
 *  - at a refresh step (step 0 of a block, then every `interval` steps, and
 *    every step of the first generated block with first_block_every_step),
 *    the target is the core plus the top (B - core_size) non-core experts by
 *    this step's count (count > 0; ties: lower id). Missing target experts
 *    that are active are promoted, core first, into free slots first, then
 *    each evicting the next resident outside the target in ascending id
 *    order (TIDE's "demote only as many as promoted"); an idle core member
 *    waits for its first active refresh step, and a resident one is never
 *    evicted while it is in the core; between refreshes nothing moves;
 *  - residents run on the device, the rest on the host; with costs and
 *    `balance`, residents also run on the host when that lowers the
 *    modelled time (as policy-cost does).
 * core = auto, interval = auto: when a block begins, the solver replays the
 * last `window` blocks of each layer (their counts and the residency each
 * started from; each block with the core its own start's popularity gave)
 * under the rule for every core size on a grid of budget/4 steps and every
 * interval 1, 4, 16, with the machine's costs, and gives each layer
 * the pair of least modelled time (ties: the smaller core, then the shorter
 * interval). Until a block has been seen, core_start and interval 1 are used.
 * A number for either fixes it (core: a share of the budget in [0, 1]).
 *
 * Thread safety: plan() calls for different layers may run concurrently
 * (state and scratch are per layer); block_begin() runs the solver and must
 * not overlap plan(). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "policy-common/costs.h"
#include "policy-common/initial.h"
#include "policy-common/plan.h"
#include "policy-common/rank.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

#define HYB_NAME "policy-hybrid"
#define HYB_GRID 4 /* core sizes 0, B/4, B/2, 3B/4, B */

static const struct tide_option hyb_options[] = {
    {"core", TIDE_OPT_STRING, "auto",
     "size of the static core: auto = chosen per layer by the solver from the blocks seen (needs "
     "[policy] profile), or a share of the budget in [0, 1]",
     NULL, NULL},
    {"core_start", TIDE_OPT_FLOAT, "0",
     "core = auto: share of the budget in the core before any block was seen", NULL, "[0,1]"},
    {"window", TIDE_OPT_INT, "2", "core = auto: blocks of history the solver replays", NULL,
     "[1,64]"},
    {"interval", TIDE_OPT_STRING, "auto",
     "refresh the dynamic part every `interval` denoising steps within a block (step 0 always): "
     "a number >= 1, or auto = chosen per layer with the core by the solver (1, 4 or 16)",
     NULL, NULL},
    {"first_block_every_step", TIDE_OPT_BOOL, "true",
     "refresh at every step of the first generated block, as policy-tide does", NULL, NULL},
    {"balance", TIDE_OPT_BOOL, "true",
     "with costs: run residents on the host when that lowers the modelled time", NULL, NULL},
    POLC_OPTION_INITIAL,
    POLC_OPTION_COUNTS_FILE,
    {NULL, 0, NULL, NULL, NULL, NULL},
};

/* One layer's denoising steps of one block, for the solver. */
struct hyb_block {
    uint8_t *start; /* [n_experts] residency at the block's first plan() */
    double *pop0;   /* [n_experts] popularity when the block began (its core's source) */
    bool have_start, first;
    int n_steps, cap_steps;
    int32_t *step; /* [cap_steps] */
    size_t *off;   /* [cap_steps + 1] pair offsets */
    int32_t *ids;  /* [cap_pairs] */
    uint32_t *cnt;
    size_t n_pairs, cap_pairs;
};

struct hyb_layer {
    double *pop;           /* [n_experts] rows so far */
    uint8_t *core;         /* [n_experts] the block's core */
    int core_size;         /* its size */
    int interval;          /* the dynamic part's refresh interval */
    struct hyb_block *rec; /* [window + 1] ring of blocks */
    /* scratch */
    struct polc_rank *rank;         /* [n_experts] */
    uint8_t *res, *tgt, *cand_core; /* [n_experts] */
    uint32_t *dense;                /* [n_experts] */
    int32_t *prom, *ev;             /* [n_experts] */
    struct polc_item *it;           /* [n_experts] */
};

struct tide_policy {
    struct tide_policy_shape shape;
    const struct tide_policy_costs *c; /* NULL: no costs */
    struct polc_initial init;
    bool core_auto, interval_auto, balance, fbes;
    double core_share, core_start;
    int interval, window; /* interval: fixed, or the start with interval = auto */
    bool first_block, have_block;
    int64_t seq; /* blocks begun; the current one records into slot seq % (window + 1) */
    struct hyb_layer *ly;
};

static void hyb_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    for (int l = 0; p->ly && l < p->shape.n_moe_layers; l++) {
        struct hyb_layer *y = &p->ly[l];
        for (int k = 0; y->rec && k <= p->window; k++) {
            struct hyb_block *b = &y->rec[k];
            free(b->start);
            free(b->pop0);
            free(b->step);
            free(b->off);
            free(b->ids);
            free(b->cnt);
        }
        free(y->rec);
        free(y->pop);
        free(y->core);
        free(y->rank);
        free(y->res);
        free(y->tgt);
        free(y->cand_core);
        free(y->dense);
        free(y->prom);
        free(y->ev);
        free(y->it);
    }
    free(p->ly);
    polc_initial_free(&p->init);
    free(p);
}

/* "auto" or an integer >= 1 (1 when auto). */
static int hyb_parse_interval(const char *s, bool *is_auto, int *interval)
{
    *is_auto = !strcmp(s, "auto");
    *interval = 1;
    if (*is_auto)
        return TIDE_OK;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < 1) {
        tide_error("%s: interval = %s is out of range: must be auto or an integer >= 1", HYB_NAME,
                   s);
        return TIDE_E_CONFIG;
    }
    *interval = v > 1 << 30 ? 1 << 30 : (int)v;
    return TIDE_OK;
}

/* "auto" or a share in [0, 1]. */
static int hyb_parse_core(const char *s, bool *is_auto, double *share)
{
    *is_auto = !strcmp(s, "auto");
    if (*is_auto)
        return TIDE_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= 0 && v <= 1)) {
        tide_error("%s: core = %s is out of range: must be auto or a share of the budget in "
                   "[0, 1]",
                   HYB_NAME, s);
        return TIDE_E_CONFIG;
    }
    *share = v;
    return TIDE_OK;
}

static int hyb_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                      struct tide_policy **out)
{
    int rc = polc_check_create(HYB_NAME, shape, opts);
    if (rc != TIDE_OK)
        return rc;
    bool is_auto, iv_auto;
    double share = 0;
    int interval;
    if ((rc = hyb_parse_core(tide_opts_str(opts, "core"), &is_auto, &share)) != TIDE_OK ||
        (rc = hyb_parse_interval(tide_opts_str(opts, "interval"), &iv_auto, &interval)) != TIDE_OK)
        return rc;
    const struct tide_policy_costs *c = polc_costs_get(HYB_NAME, shape, false, &rc);
    if (rc != TIDE_OK)
        return rc;
    if ((is_auto || iv_auto) && !c) {
        tide_error("%s: %s = auto needs the machine's modelled costs: set [policy] profile to "
                   "a hardware profile such as config/profiles/h100-pcie5.ini (tide sim: "
                   "--profile), or fix it (core = 0.5, interval = 1)",
                   HYB_NAME, is_auto ? "core" : "interval");
        return TIDE_E_CONFIG;
    }
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    p->c = c;
    p->core_auto = is_auto;
    p->interval_auto = iv_auto;
    p->interval = interval;
    p->core_share = share;
    p->core_start = tide_opts_float(opts, "core_start");
    p->window = (int)tide_opts_int(opts, "window");
    p->fbes = tide_opts_bool(opts, "first_block_every_step");
    p->balance = c && tide_opts_bool(opts, "balance");
    const size_t L = (size_t)shape->n_moe_layers, E = (size_t)shape->n_experts;
    p->ly = calloc(L ? L : 1, sizeof *p->ly);
    rc = p->ly ? polc_initial_init(&p->init, HYB_NAME, shape, opts) : TIDE_E_NOMEM;
    uint64_t *file = NULL;
    const char *path = tide_opts_str(opts, "counts_file");
    if (rc == TIDE_OK && !strcmp(tide_opts_str(opts, "initial"), "popular"))
        rc = polc_counts_load(HYB_NAME, path, shape, &file);
    for (size_t l = 0; l < L && rc == TIDE_OK; l++) {
        struct hyb_layer *y = &p->ly[l];
        y->pop = calloc(E, sizeof *y->pop);
        y->core = calloc(E, 1);
        y->rec = calloc((size_t)p->window + 1, sizeof *y->rec);
        y->rank = malloc(E * sizeof *y->rank);
        y->res = malloc(E);
        y->tgt = malloc(E);
        y->cand_core = malloc(E);
        y->dense = calloc(E, sizeof *y->dense);
        y->prom = malloc(E * sizeof *y->prom);
        y->ev = malloc(E * sizeof *y->ev);
        y->it = malloc(E * sizeof *y->it);
        if (!y->pop || !y->core || !y->rec || !y->rank || !y->res || !y->tgt || !y->cand_core ||
            !y->dense || !y->prom || !y->ev || !y->it) {
            rc = TIDE_E_NOMEM;
            break;
        }
        for (int k = 0; k <= p->window && rc == TIDE_OK; k++)
            if (!(y->rec[k].start = malloc(E)) ||
                !(y->rec[k].pop0 = malloc(E * sizeof *y->rec[k].pop0)))
                rc = TIDE_E_NOMEM;
        for (size_t e = 0; file && e < E; e++)
            y->pop[e] = (double)file[l * E + e];
        y->interval = interval;
    }
    free(file);
    if (rc != TIDE_OK) {
        hyb_destroy(p);
        return rc;
    }
    *out = p;
    return TIDE_OK;
}

static int hyb_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, HYB_NAME, layer, out);
}

/* The k most popular experts by pop[] into core[] (ties: lower id). */
static void hyb_core(const struct tide_policy *p, struct hyb_layer *y, const double *pop, int k,
                     uint8_t *core)
{
    const int E = p->shape.n_experts;
    for (int e = 0; e < E; e++) {
        y->rank[e].count = (uint64_t)pop[e];
        y->rank[e].id = e;
        core[e] = 0;
    }
    polc_rank_sort(y->rank, E);
    for (int i = 0; i < k && i < E; i++)
        core[y->rank[i].id] = 1;
}

/* One refresh of the rule (file comment): updates res[] and writes the
 * promotions into prom[] / ev[]; returns how many. */
static int hyb_refresh(const struct tide_policy *p, struct hyb_layer *y, const uint32_t *counts,
                       const uint8_t *core, int core_size, uint8_t *res, int32_t *prom, int32_t *ev)
{
    const int E = p->shape.n_experts, B = p->shape.budget;
    int n_res = 0;
    for (int e = 0; e < E; e++) {
        n_res += res[e] != 0;
        y->tgt[e] = core[e];
    }
    /* Only active experts outside the core can enter the dynamic part. */
    int n_act = 0;
    for (int e = 0; e < E; e++)
        if (counts[e] && !core[e])
            y->rank[n_act++] = (struct polc_rank){.count = counts[e], .id = e};
    polc_rank_sort(y->rank, n_act);
    const int n_dyn = n_act < B - core_size ? n_act : B - core_size;
    int n = 0;
    for (int e = 0; e < E; e++) /* active core members first, in id order */
        if (core[e] && !res[e] && counts[e])
            prom[n++] = e;
    for (int i = 0; i < n_dyn; i++) {
        y->tgt[y->rank[i].id] = 1;
        if (!res[y->rank[i].id])
            prom[n++] = y->rank[i].id;
    }
    int free_slots = B - n_res, next = 0, k = 0;
    for (; k < n; k++) {
        int32_t victim = -1;
        if (free_slots > 0) {
            free_slots--;
        } else {
            while (next < E && (!res[next] || y->tgt[next]))
                next++;
            if (next == E)
                break; /* cannot happen: the target has at most B experts */
            victim = next++;
            res[victim] = 0;
        }
        res[prom[k]] = 1;
        ev[k] = victim;
    }
    return k;
}

static bool hyb_is_refresh(const struct tide_policy *p, int interval, bool first, int step)
{
    return step % interval == 0 || (first && p->fbes);
}

static struct hyb_block *hyb_slot(const struct tide_policy *p, struct hyb_layer *y, int64_t seq)
{
    return &y->rec[seq % (p->window + 1)];
}

/* Modelled time of the recorded blocks of layer l under core size k and
 * refresh interval iv. Each block is replayed with the core its own start's
 * popularity gives, so the choice is judged out of sample, as it will be
 * used. Returns -1 when no block is recorded. */
static double hyb_replay(struct tide_policy *p, int l, int k, int iv)
{
    struct hyb_layer *y = &p->ly[l];
    const int E = p->shape.n_experts;
    const int64_t from = p->seq - p->window < 0 ? 0 : p->seq - p->window;
    double us = 0;
    bool any = false;
    for (int64_t s = from; s < p->seq; s++) {
        const struct hyb_block *b = hyb_slot(p, y, s);
        if (!b->have_start)
            continue;
        any = true;
        hyb_core(p, y, b->pop0, k, y->cand_core);
        memcpy(y->res, b->start, (size_t)E);
        for (int i = 0; i < b->n_steps; i++) {
            for (size_t j = b->off[i]; j < b->off[i + 1]; j++)
                y->dense[b->ids[j]] = b->cnt[j];
            int n = 0;
            if (hyb_is_refresh(p, iv, b->first, b->step[i]))
                n = hyb_refresh(p, y, y->dense, y->cand_core, k, y->res, y->prom, y->ev);
            us += polc_layer_time(p->c, (int)(b->off[i + 1] - b->off[i]), b->ids + b->off[i], NULL,
                                  y->dense, y->res, n, p->balance, y->it, NULL);
            for (size_t j = b->off[i]; j < b->off[i + 1]; j++)
                y->dense[b->ids[j]] = 0;
        }
    }
    return any ? us : -1;
}

/* The solver: for layer l, the core size on a grid of budget/4 steps (with
 * core = auto) and the interval among 1, 4, 16 (with interval = auto) of
 * least modelled time over the recorded blocks; ties go to the
 * smaller core and the shorter interval. Keeps the layer's choice when
 * nothing is recorded. */
static void hyb_solve_layer(struct tide_policy *p, int l)
{
    struct hyb_layer *y = &p->ly[l];
    const int B = p->shape.budget;
    const int iv_lo = p->interval_auto ? 1 : y->interval;
    const int iv_hi = p->interval_auto ? 16 : y->interval;
    double best = -1;
    int best_k = y->core_size, best_iv = y->interval, last_k = -1;
    for (int g = 0; g <= HYB_GRID; g++) {
        const int k = p->core_auto ? (int)((int64_t)B * g / HYB_GRID) : y->core_size;
        if (k == last_k)
            continue;
        last_k = k;
        for (int iv = iv_lo; iv <= iv_hi; iv *= 4) {
            const double us = hyb_replay(p, l, k, iv);
            if (us < 0)
                return;
            if (best < 0 || us < best) {
                best = us;
                best_k = k;
                best_iv = iv;
            }
        }
    }
    y->core_size = best_k;
    y->interval = best_iv;
}

static void hyb_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    p->first_block = first_generated;
    p->have_block = true;
    const int B = p->shape.budget;
    bool recorded = p->shape.n_moe_layers > 0 && hyb_slot(p, &p->ly[0], p->seq)->have_start;
    if (recorded)
        p->seq++;
    for (int l = 0; l < p->shape.n_moe_layers; l++) {
        struct hyb_layer *y = &p->ly[l];
        if (!p->core_auto)
            y->core_size = (int)(p->core_share * B + 0.5);
        else if (p->seq == 0)
            y->core_size = (int)(p->core_start * B + 0.5);
        if ((p->core_auto || p->interval_auto) && recorded) {
            hyb_solve_layer(p, l);
            tide_debug("%s: block %d, MoE layer %d: core %d of %d, interval %d", HYB_NAME, block, l,
                       y->core_size, B, y->interval);
        }
        hyb_core(p, y, y->pop, y->core_size, y->core);
        struct hyb_block *b = hyb_slot(p, y, p->seq);
        memcpy(b->pop0, y->pop, sizeof *y->pop * (size_t)p->shape.n_experts);
        b->have_start = false;
        b->n_steps = 0;
        b->n_pairs = 0;
        b->first = first_generated;
    }
}

/* Record one step's counts for the solver; false when out of memory. */
static bool hyb_record(struct tide_policy *p, struct hyb_layer *y, const struct tide_policy_view *v)
{
    struct hyb_block *b = hyb_slot(p, y, p->seq);
    const int E = p->shape.n_experts;
    if (!b->have_start) {
        memcpy(b->start, v->resident, (size_t)E);
        b->have_start = true;
        b->n_steps = 0;
        b->n_pairs = 0;
    }
    size_t active = 0;
    for (int e = 0; e < E; e++)
        active += v->counts[e] != 0;
    if (b->n_steps + 1 >= b->cap_steps) {
        int n = 2 * b->cap_steps + 40;
        int32_t *st = realloc(b->step, sizeof *st * (size_t)n);
        if (st)
            b->step = st;
        size_t *off = realloc(b->off, sizeof *off * ((size_t)n + 1));
        if (off)
            b->off = off;
        if (!st || !off)
            return false;
        b->cap_steps = n;
    }
    if (b->n_pairs + active > b->cap_pairs) {
        size_t n = 2 * (b->n_pairs + active) + 256;
        int32_t *ids = realloc(b->ids, n * sizeof *ids);
        if (ids)
            b->ids = ids;
        uint32_t *cnt = realloc(b->cnt, n * sizeof *cnt);
        if (cnt)
            b->cnt = cnt;
        if (!ids || !cnt)
            return false;
        b->cap_pairs = n;
    }
    b->off[b->n_steps] = b->n_pairs;
    b->step[b->n_steps++] = v->step;
    for (int e = 0; e < E; e++)
        if (v->counts[e]) {
            b->ids[b->n_pairs] = e;
            b->cnt[b->n_pairs++] = v->counts[e];
        }
    b->off[b->n_steps] = b->n_pairs;
    return true;
}

static int hyb_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    int n_res = polc_check_view(HYB_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    if (v->step < 0) {
        tide_error("%s: plan() for step %d of block %d: steps count from 0", HYB_NAME, v->step,
                   v->block);
        return TIDE_E_INVAL;
    }
    const int E = p->shape.n_experts;
    struct hyb_layer *y = &p->ly[v->layer];
    if ((p->core_auto || p->interval_auto) && !hyb_record(p, y, v))
        return TIDE_E_NOMEM;
    for (int e = 0; e < E; e++)
        y->pop[e] += v->counts[e];
    /* Without block_begin() (a bare simulator), block 0 is the first generated one. */
    const bool first = p->have_block ? p->first_block : v->block == 0;
    out->n_promote = 0;
    memcpy(y->res, v->resident, (size_t)E);
    if (hyb_is_refresh(p, y->interval, first, v->step))
        out->n_promote =
            hyb_refresh(p, y, v->counts, y->core, y->core_size, y->res, out->promote, out->evict);
    polc_place(&p->shape, v, out);
    if (p->balance)
        polc_layer_time(p->c, E, NULL, NULL, v->counts, y->res, out->n_promote, true, y->it,
                        out->place);
    return TIDE_OK;
}

static const struct tide_policy_ops hyb_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = hyb_create,
    .destroy = hyb_destroy,
    .initial = hyb_initial,
    .block_begin = hyb_block_begin,
    .plan = hyb_plan,
};

static const struct tide_plugin_desc hyb_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = HYB_NAME,
    .version = "0.1.0",
    .summary = "a static core of popular experts plus a TIDE-style dynamic part, the split "
               "solved per layer",
    .ops = &hyb_ops,
    .options = hyb_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(hyb_desc)
