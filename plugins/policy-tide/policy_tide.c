/* policy-tide: the TIDE paper's interval-based expert refresh.
 *
 * Semantics follow the authors' reference code (ims-kdks/TIDE):
 *  - a refresh happens at step 0 of every block, then whenever
 *    step % interval == 0, and at every step of the first generated block
 *    when first_block_every_step is set. Steps count from 0 in each block
 *    and a block may run any number of them (decoders with open-ended steps
 *    make blocks differ in length), so the rule is defined for every block
 *    length: a block of n steps refreshes at steps 0, interval, 2 x
 *    interval, ... below n, and an interval of n or more refreshes at step
 *    0 only;
 *  - at a refresh, per MoE layer, target = the top-B experts by this step's
 *    count, keeping only count > 0 (count descending, ties: lower id);
 *    to_promote = the target experts not resident, in that order;
 *    can_demote = the residents not in target, in ascending id order. Free
 *    slots are used first, then each promotion evicts the next expert of
 *    can_demote: only as many residents are demoted as are promoted, and
 *    stale residents beyond that stay;
 *  - between refreshes nothing moves: residents run on the device, every
 *    other active expert on the host.
 * Promoted experts run on the device in the step that promotes them (the
 * reference moves experts first, then computes). The rule itself is the
 * core's tide_tide_refresh (tide/solver.h), which the simulator's evaluator
 * shares.
 *
 * prefetch (beyond the paper): at the start of a refresh step, each layer's
 * target is taken from that layer's counts of the previous step, and its
 * promotions are issued at once (step_begin), so on an asynchronous backend
 * the copies overlap the earlier layers' compute instead of stalling each
 * layer. Placement only changes, so the result stays lossless; the cost is a
 * target one step stale. A layer with no previous step refreshes as usual.
 *
 * interval = auto (beyond the paper): the policy records, per layer, the
 * counts of every step of the blocks decoded so far and the residency each
 * block started from. When a block begins it replays the last auto_window
 * blocks, as long as each of them ran (the measured distribution of steps
 * per block), under every interval 1..N with the tide_solver_eval_tide
 * evaluator and the hardware profile named by `profile`, and uses the
 * interval of least modelled time (one for all layers, or one per layer with
 * auto_scope = layer). N is auto_max when set; with auto_max = 0 (the
 * default) it is the longest block of the window in steps, or the decoder's
 * bound on steps per block (the shape's max_steps; 32 when unknown) when
 * that is larger. Every interval from the window's longest block on
 * refreshes at step 0 only there, so they cost the same and the tie goes to
 * the longest, N: "step 0 only" then stays so for later blocks up to the
 * bound. Each choice is logged with its predicted cost and the block
 * lengths it was solved over. Until a block has been seen, auto_start is
 * used.
 *
 * Thread safety: plan() calls for different layers may run concurrently
 * (all scratch is per layer); block_begin() must not overlap plan(). */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy-common/initial.h"
#include "policy-common/plan.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/profile.h"
#include "tide/quant.h"
#include "tide/solver.h"
#include "tide/status.h"

#define TIDEP_NAME "policy-tide"

/* One layer's steps of one block, recorded for interval = auto. */
struct tidep_rec {
    uint16_t *ids; /* [cap_pairs] */
    uint32_t *cnt;
    size_t n_pairs, cap_pairs;
    struct tide_solver_fwd *fwd; /* [cap_fwd]; ids holds the pair offset until solved */
    size_t n_fwd, cap_fwd;
    uint8_t *start; /* [n_experts] residency before the block's first plan */
    bool have_start;
};

struct tide_policy {
    struct tide_policy_shape shape;
    int interval;                /* refresh every `interval` steps within a block, >= 1 */
    bool first_block_every_step; /* refresh at every step of the first generated block */
    struct polc_initial init;
    bool have_block;           /* block_begin() has been called */
    bool first_block;          /* the current block is the first generated one */
    int block;                 /* the current block */
    struct tide_solver_ws *ws; /* [n_moe_layers] */
    bool prefetch;
    uint32_t *last;      /* [n_moe_layers][n_experts] counts of the previous step */
    uint8_t *have_last;  /* [n_moe_layers] */
    uint8_t *prefetched; /* [n_moe_layers] this step's refresh was done at step start */
    int32_t *scratch;    /* [2][n_experts] */
    int *layer_interval; /* [n_moe_layers] interval in force */
    /* interval = auto */
    bool is_auto;
    bool auto_per_layer;
    int auto_window;
    int auto_max;   /* the longest interval considered; 0: see tidep_solve */
    int auto_bound; /* auto_max = 0: N is at least this (max_steps, else 32) */
    struct tide_profile profile;
    struct tide_cost cost;
    struct tidep_rec *rec; /* [auto_window + 1][n_moe_layers]; slot seq % (window + 1) */
    int64_t seq;           /* blocks begun */
    double *cost_tab;      /* [n_moe_layers][cap_tab] */
    int *iv;               /* [cap_tab] the intervals 1..N */
    int cap_tab;           /* intervals cost_tab and iv have room for */
    int *choice;           /* [n_moe_layers] */
    uint8_t *res_tmp;      /* [n_experts] */
};

static const struct tide_option tidep_options[] = {
    {"interval", TIDE_OPT_STRING, "4",
     "refresh the resident set at the steps of a block where step % interval == 0 (tau, >= 1; "
     "step 0 always, whatever the block's length), or auto: re-solve it from the blocks decoded "
     "so far with `profile`",
     NULL, NULL},
    {"first_block_every_step", TIDE_OPT_BOOL, "true",
     "refresh at every step of the first generated block (warm-up), as the reference does", NULL,
     NULL},
    POLC_OPTION_INITIAL,
    POLC_OPTION_COUNTS_FILE,
    {"prefetch", TIDE_OPT_BOOL, "false",
     "at a refresh step, promote each layer's target from the previous step's counts when the "
     "step starts, so copies overlap earlier layers' compute (beyond the paper; lossless)",
     NULL, NULL},
    {"profile", TIDE_OPT_STRING, "",
     "hardware profile INI (config/profiles/) whose cost model interval = auto minimises; its "
     "expert shape must be the model's",
     NULL, NULL},
    {"auto_scope", TIDE_OPT_ENUM, "global",
     "interval = auto: one interval for every layer (global) or one per MoE layer (layer)",
     "global|layer", NULL},
    {"auto_window", TIDE_OPT_INT, "4", "interval = auto: blocks of history the solver replays",
     NULL, "[1,64]"},
    {"auto_max", TIDE_OPT_INT, "0",
     "interval = auto: the longest interval considered; 0: the longest block (in steps) of the "
     "window, or the decoder's bound on steps per block (32 if unknown) when larger",
     NULL, "[0,4096]"},
    {"auto_start", TIDE_OPT_INT, "4", "interval = auto: the interval before any block was seen",
     NULL, "[1,]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static void tidep_rec_free(struct tidep_rec *r)
{
    free(r->ids);
    free(r->cnt);
    free(r->fwd);
    free(r->start);
}

static void tidep_destroy(struct tide_policy *p)
{
    if (!p)
        return;
    polc_initial_free(&p->init);
    const int L = p->shape.n_moe_layers;
    for (int l = 0; p->ws && l < L; l++)
        tide_solver_ws_free(&p->ws[l]);
    free(p->ws);
    free(p->last);
    free(p->have_last);
    free(p->prefetched);
    free(p->scratch);
    free(p->layer_interval);
    for (int i = 0; p->rec && i < (p->auto_window + 1) * L; i++)
        tidep_rec_free(&p->rec[i]);
    free(p->rec);
    free(p->cost_tab);
    free(p->iv);
    free(p->choice);
    free(p->res_tmp);
    tide_cost_free(&p->cost);
    free(p);
}

/* "auto" or an integer >= 1 (values beyond INT_MAX mean "step 0 only"). */
static int tidep_parse_interval(const char *s, bool *is_auto, int *interval)
{
    *is_auto = !strcmp(s, "auto");
    if (*is_auto)
        return TIDE_OK;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || (errno && errno != ERANGE) || v < 1) {
        tide_error("%s: interval = %s is out of range: must be an integer >= 1 or auto", TIDEP_NAME,
                   s);
        return TIDE_E_CONFIG;
    }
    *interval = v > INT_MAX || errno == ERANGE ? INT_MAX : (int)v;
    return TIDE_OK;
}

/* Room for n intervals in cost_tab and iv. False when out of memory (the
 * old tables stay). */
static bool tidep_fit(struct tide_policy *p, int n)
{
    if (n <= p->cap_tab)
        return true;
    const size_t L = (size_t)(p->shape.n_moe_layers > 0 ? p->shape.n_moe_layers : 1);
    double *t = realloc(p->cost_tab, sizeof *t * L * (size_t)n);
    if (!t)
        return false;
    p->cost_tab = t;
    int *iv = realloc(p->iv, sizeof *iv * (size_t)n);
    if (!iv)
        return false;
    p->iv = iv;
    for (int i = p->cap_tab; i < n; i++)
        iv[i] = i + 1;
    p->cap_tab = n;
    return true;
}

static int tidep_auto_init(struct tide_policy *p, const struct tide_opts *opts)
{
    const char *path = tide_opts_str(opts, "profile");
    if (!*path) {
        tide_error("%s: interval = auto needs a hardware profile: set [%s] profile to a file "
                   "such as config/profiles/h100-pcie5.ini",
                   TIDEP_NAME, TIDEP_NAME);
        return TIDE_E_CONFIG;
    }
    int rc = tide_profile_load(path, &p->profile);
    if (rc != TIDE_OK)
        return rc;
    /* The profile's expert: shape and weight format (tide/quant.h). */
    const uint64_t pb =
        tide_qexpert_bytes(p->profile.qfmt, p->profile.qblock, p->profile.hidden, p->profile.inter);
    /* The core's costs are fit to the model (scaled by expert bytes under
     * --scale-profile): a profile measured for another expert takes them. */
    const struct tide_policy_costs *core = TIDE_SHAPE_HAS(&p->shape, costs) ? p->shape.costs : NULL;
    const bool rebind =
        pb != p->shape.expert_bytes && core && core->expert_bytes == p->shape.expert_bytes;
    if (pb != p->shape.expert_bytes && !rebind) {
        tide_error("%s: profile %s was measured for %s experts of %llu bytes (hidden %u x inter "
                   "%u) but the model's experts have %llu bytes; measure one for this model "
                   "with `tide profile --model DIR` (it takes the model's shape and format), or "
                   "scale it by expert bytes (tide sim or tide bench --scale-profile)",
                   TIDEP_NAME, path, tide_qfmt_name(p->profile.qfmt), (unsigned long long)pb,
                   p->profile.hidden, p->profile.inter, (unsigned long long)p->shape.expert_bytes);
        return TIDE_E_CONFIG;
    }
    if ((rc = tide_cost_init(&p->cost, &p->profile, p->profile.hidden, p->profile.inter, false,
                             "the model", 4096)) != TIDE_OK ||
        (rebind && (rc = tide_cost_rebind(&p->cost, core)) != TIDE_OK))
        return rc;
    if (rebind)
        tide_info("%s: profile %s is for experts of %llu bytes; interval = auto uses the core's "
                  "costs for the model's %llu-byte experts (scaled by %.3f)",
                  TIDEP_NAME, path, (unsigned long long)pb,
                  (unsigned long long)p->shape.expert_bytes, p->cost.scale);
    p->auto_per_layer = !strcmp(tide_opts_str(opts, "auto_scope"), "layer");
    p->auto_window = (int)tide_opts_int(opts, "auto_window");
    p->auto_max = (int)tide_opts_int(opts, "auto_max");
    const bool known = TIDE_SHAPE_HAS(&p->shape, max_steps) && p->shape.max_steps > 0;
    /* At most auto_max's own range: the table is allocated for it. */
    p->auto_bound = !known ? 32 : p->shape.max_steps < 4096 ? p->shape.max_steps : 4096;
    int64_t start = tide_opts_int(opts, "auto_start");
    p->interval = start > INT_MAX ? INT_MAX : (int)start;
    const size_t L = (size_t)p->shape.n_moe_layers, E = (size_t)p->shape.n_experts;
    p->rec = calloc((size_t)(p->auto_window + 1) * (L ? L : 1), sizeof *p->rec);
    p->choice = malloc(sizeof *p->choice * (L ? L : 1));
    p->res_tmp = malloc(E);
    /* Room for the intervals of a window of blocks within the bound; a
     * longer block grows the table (tidep_fit). */
    if (!p->rec || !p->choice || !p->res_tmp ||
        !tidep_fit(p, p->auto_max ? p->auto_max : p->auto_bound))
        return TIDE_E_NOMEM;
    for (size_t i = 0; i < (size_t)(p->auto_window + 1) * L; i++)
        if (!(p->rec[i].start = malloc(E)))
            return TIDE_E_NOMEM;
    if (p->auto_max)
        tide_info("%s: interval = auto with profile %s (%s), window %d blocks, intervals 1..%d, %s",
                  TIDEP_NAME, p->profile.name, path, p->auto_window, p->auto_max,
                  p->auto_per_layer ? "one per layer" : "one for all layers");
    else
        tide_info("%s: interval = auto with profile %s (%s), window %d blocks, intervals 1 to "
                  "the window's longest block in steps (at least %d%s), %s",
                  TIDEP_NAME, p->profile.name, path, p->auto_window, p->auto_bound,
                  known ? ", the decoder's bound" : "",
                  p->auto_per_layer ? "one per layer" : "one for all layers");
    return TIDE_OK;
}

static int tidep_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                        struct tide_policy **out)
{
    int rc = polc_check_create(TIDEP_NAME, shape, opts);
    if (rc != TIDE_OK)
        return rc;
    bool is_auto;
    int interval = 1;
    if ((rc = tidep_parse_interval(tide_opts_str(opts, "interval"), &is_auto, &interval)) !=
        TIDE_OK)
        return rc;
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    p->interval = interval;
    p->is_auto = is_auto;
    p->first_block_every_step = tide_opts_bool(opts, "first_block_every_step");
    p->prefetch = tide_opts_bool(opts, "prefetch");
    size_t cells = (size_t)shape->n_moe_layers * (size_t)shape->n_experts;
    size_t layers = (size_t)shape->n_moe_layers;
    p->ws = calloc(layers ? layers : 1, sizeof *p->ws);
    p->last = calloc(cells ? cells : 1, sizeof *p->last);
    p->have_last = calloc(layers ? layers : 1, 1);
    p->prefetched = calloc(layers ? layers : 1, 1);
    p->scratch = malloc(2 * (size_t)shape->n_experts * sizeof *p->scratch);
    p->layer_interval = malloc(sizeof *p->layer_interval * (layers ? layers : 1));
    rc = p->ws && p->last && p->have_last && p->prefetched && p->scratch && p->layer_interval
             ? polc_initial_init(&p->init, TIDEP_NAME, shape, opts)
             : TIDE_E_NOMEM;
    if (rc == TIDE_OK && is_auto)
        rc = tidep_auto_init(p, opts);
    if (rc != TIDE_OK) {
        tidep_destroy(p);
        return rc;
    }
    for (size_t l = 0; l < layers; l++)
        p->layer_interval[l] = p->interval;
    *out = p;
    return TIDE_OK;
}

static int tidep_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return polc_initial_get(&p->init, TIDEP_NAME, layer, out);
}

static struct tidep_rec *tidep_slot(struct tide_policy *p, int64_t seq, int layer)
{
    size_t slot = (size_t)(seq % (p->auto_window + 1));
    return &p->rec[slot * (size_t)p->shape.n_moe_layers + (size_t)layer];
}

/* The steps a recorded block ran: its last step + 1 over every layer that
 * recorded it (0: the block was not recorded). */
static int tidep_block_steps(struct tide_policy *p, int64_t seq)
{
    int n = 0;
    for (int l = 0; l < p->shape.n_moe_layers; l++) {
        const struct tidep_rec *r = tidep_slot(p, seq, l);
        for (size_t j = 0; r->have_start && j < r->n_fwd; j++)
            if (r->fwd[j].step >= n)
                n = r->fwd[j].step == INT32_MAX ? INT32_MAX : r->fwd[j].step + 1;
    }
    return n;
}

/* Replay the recorded blocks under every interval 1..M and choose. M is
 * auto_max, or with auto_max = 0 the longest recorded block of the window
 * (in steps) or auto_bound when larger. From the longest block on, every
 * interval refreshes at step 0 only, so those are evaluated once. */
static void tidep_solve(struct tide_policy *p)
{
    const int L = p->shape.n_moe_layers, E = p->shape.n_experts;
    int64_t from = p->seq - p->auto_window < 0 ? 0 : p->seq - p->auto_window;
    int blocks = 0, longest = 0;
    char lens[160] = "";
    for (int64_t s = from; s < p->seq; s++) {
        const int n = tidep_block_steps(p, s);
        if (!n)
            continue;
        blocks++;
        longest = n > longest ? n : longest;
        size_t k = strlen(lens);
        if (k + 16 < sizeof lens)
            snprintf(lens + k, sizeof lens - k, "%s%d", k ? "," : "", n);
        else if (k + 4 < sizeof lens && strcmp(lens + k - 3, "..."))
            snprintf(lens + k, sizeof lens - k, "...");
    }
    if (!blocks)
        return;
    const int M = p->auto_max ? p->auto_max : longest > p->auto_bound ? longest : p->auto_bound;
    const int M_eval = M < longest ? M : longest; /* intervals M_eval..M cost the same */
    if (!tidep_fit(p, M)) {
        tide_warn("%s: interval = auto: no memory for %d intervals after block %d; keeping the "
                  "intervals in force",
                  TIDEP_NAME, M, p->block);
        return;
    }
    const int *iv = p->iv;
    int rc = TIDE_OK;
    for (int l = 0; l < L && rc == TIDE_OK; l++) {
        for (int64_t s = from; s < p->seq; s++) {
            struct tidep_rec *r = tidep_slot(p, s, l);
            for (size_t j = 0; j < r->n_fwd; j++) {
                size_t off = (size_t)(uintptr_t)r->fwd[j].ids;
                if (off <= r->n_pairs && !r->fwd[j].cnt) {
                    r->fwd[j].ids = r->ids + off;
                    r->fwd[j].cnt = r->cnt + off;
                }
            }
        }
        double *row = &p->cost_tab[(size_t)l * M];
        for (int i = 0; i < M_eval && rc == TIDE_OK; i++) {
            const struct tide_tide_rule rule = {.interval = i + 1, .prefetch = p->prefetch};
            struct tide_eval ev = {0};
            for (int64_t s = from; s < p->seq && rc == TIDE_OK; s++) {
                struct tidep_rec *r = tidep_slot(p, s, l);
                if (!r->have_start)
                    continue;
                memcpy(p->res_tmp, r->start, (size_t)E);
                rc = tide_solver_eval_tide(r->fwd, r->n_fwd, E, p->shape.budget, p->res_tmp, &rule,
                                           &p->cost, &ev, &p->ws[l]);
            }
            row[i] = ev.us;
        }
        for (int i = M_eval; i < M; i++)
            row[i] = row[M_eval - 1];
    }
    int g = 0;
    double g_us = 0, l_us = 0;
    if (rc == TIDE_OK)
        rc = tide_solver_intervals(p->cost_tab, L, M, iv, &g, &g_us, p->choice, &l_us);
    if (rc != TIDE_OK) {
        tide_warn("%s: interval = auto could not re-solve after block %d; keeping the intervals "
                  "in force",
                  TIDEP_NAME, p->block);
        return;
    }
    double one = 0;
    for (int l = 0; l < L; l++)
        one += p->cost_tab[(size_t)l * M];
    char list[512] = "";
    for (int l = 0; l < L; l++) {
        p->layer_interval[l] = p->auto_per_layer ? iv[p->choice[l]] : iv[g];
        size_t n = strlen(list);
        if (p->auto_per_layer && n + 16 < sizeof list)
            snprintf(list + n, sizeof list - n, "%s%d", l ? "," : "", iv[p->choice[l]]);
    }
    if (p->auto_per_layer)
        tide_info("%s: interval auto (block %d, %d block%s of history, of %s steps; intervals "
                  "1..%d): per-layer intervals %s, predicted %.3f ms per block (one interval "
                  "for all, %d: %.3f ms; interval 1: %.3f ms)",
                  TIDEP_NAME, p->block, blocks, blocks == 1 ? "" : "s", lens, M, list,
                  l_us / 1e3 / blocks, iv[g], g_us / 1e3 / blocks, one / 1e3 / blocks);
    else
        tide_info("%s: interval auto (block %d, %d block%s of history, of %s steps; intervals "
                  "1..%d): interval %d, predicted %.3f ms per block (interval 1: %.3f ms; "
                  "per-layer intervals would give %.3f ms)",
                  TIDEP_NAME, p->block, blocks, blocks == 1 ? "" : "s", lens, M, iv[g],
                  g_us / 1e3 / blocks, one / 1e3 / blocks, l_us / 1e3 / blocks);
}

static void tidep_block_begin(struct tide_policy *p, int block, bool first_generated)
{
    p->have_block = true;
    p->first_block = first_generated;
    p->block = block;
    if (!p->is_auto)
        return;
    if (tidep_slot(p, p->seq, 0)->have_start || p->seq > 0) {
        p->seq++;
        tidep_solve(p);
    }
    for (int l = 0; l < p->shape.n_moe_layers; l++) {
        struct tidep_rec *r = tidep_slot(p, p->seq, l);
        r->n_pairs = r->n_fwd = 0;
        r->have_start = false;
    }
}

static bool tidep_is_refresh(const struct tide_policy *p, int layer, int block, int step)
{
    /* Without block_begin() (a bare simulator), block 0 is the first generated one. */
    bool first = p->have_block ? p->first_block : block == 0;
    return step % p->layer_interval[layer] == 0 || (first && p->first_block_every_step);
}

/* Record one plan's counts for interval = auto. Returns false when out of memory. */
static bool tidep_record(struct tide_policy *p, const struct tide_policy_view *v)
{
    struct tidep_rec *r = tidep_slot(p, p->seq, v->layer);
    const int E = p->shape.n_experts;
    if (!r->have_start) {
        memcpy(r->start, v->resident, (size_t)E);
        r->have_start = true;
    }
    uint32_t active = 0, tokens = 0;
    for (int e = 0; e < E; e++)
        if (v->counts[e]) {
            active++;
            tokens += v->counts[e];
        }
    if (r->n_pairs + active > r->cap_pairs) {
        size_t n = 2 * (r->n_pairs + active) + 64;
        uint16_t *ids = realloc(r->ids, n * sizeof *ids);
        if (ids)
            r->ids = ids;
        uint32_t *cnt = realloc(r->cnt, n * sizeof *cnt);
        if (cnt)
            r->cnt = cnt;
        if (!ids || !cnt)
            return false;
        r->cap_pairs = n;
    }
    if (r->n_fwd == r->cap_fwd) {
        size_t n = 2 * r->cap_fwd + 16;
        struct tide_solver_fwd *f = realloc(r->fwd, n * sizeof *f);
        if (!f)
            return false;
        r->fwd = f;
        r->cap_fwd = n;
    }
    struct tide_solver_fwd *f = &r->fwd[r->n_fwd++];
    *f = (struct tide_solver_fwd){
        .phase = 1, /* TIDE_TRACE_STEP */
        .first_block = p->first_block,
        .step = v->step,
        .tokens = tokens / (uint32_t)(p->shape.top_k > 0 ? p->shape.top_k : 1),
        .n_active = active,
        .ids = (const uint16_t *)(uintptr_t)r->n_pairs, /* an offset until solved */
        .cnt = NULL,
    };
    for (int e = 0; e < E; e++)
        if (v->counts[e]) {
            r->ids[r->n_pairs] = (uint16_t)e;
            r->cnt[r->n_pairs++] = v->counts[e];
        }
    return true;
}

/* prefetch: at a refresh step, issue every layer's refresh from the previous
 * step's counts before the step's forward starts. */
static int tidep_step_begin(struct tide_policy *p, int block, int step,
                            const uint8_t *const *resident, struct tide_prefetch *out)
{
    const int n = p->shape.n_experts;
    out->n = 0;
    memset(p->prefetched, 0, (size_t)p->shape.n_moe_layers);
    if (!p->prefetch)
        return TIDE_OK;
    int32_t *promote = p->scratch, *evict = p->scratch + n;
    for (int l = 0; l < p->shape.n_moe_layers; l++) {
        if (!p->have_last[l] || !tidep_is_refresh(p, l, block, step))
            continue;
        int n_res = 0;
        for (int e = 0; e < n; e++)
            n_res += resident[l][e] != 0;
        int k = tide_tide_refresh(&p->last[(size_t)l * n], resident[l], n_res, n, p->shape.budget,
                                  promote, evict, &p->ws[l]);
        if (k < 0)
            return k;
        if (out->n + k > out->cap) {
            tide_error("%s: prefetch needs room for %d promotions, the core gave %d", TIDEP_NAME,
                       out->n + k, out->cap);
            return TIDE_E_INVAL;
        }
        for (int i = 0; i < k; i++) {
            out->layer[out->n] = l;
            out->expert[out->n] = promote[i];
            out->evict[out->n] = evict[i];
            out->n++;
        }
        p->prefetched[l] = 1;
    }
    return TIDE_OK;
}

static int tidep_plan(struct tide_policy *p, const struct tide_policy_view *v,
                      struct tide_plan *out)
{
    int n_res = polc_check_view(TIDEP_NAME, &p->shape, v, out);
    if (n_res < 0)
        return n_res;
    if (v->step < 0) {
        tide_error("%s: plan() for step %d of block %d: steps count from 0", TIDEP_NAME, v->step,
                   v->block);
        return TIDE_E_INVAL;
    }
    if (p->is_auto && !tidep_record(p, v))
        return TIDE_E_NOMEM;
    out->n_promote = 0;
    if (tidep_is_refresh(p, v->layer, v->block, v->step) && !p->prefetched[v->layer]) {
        int k = tide_tide_refresh(v->counts, v->resident, n_res, p->shape.n_experts,
                                  p->shape.budget, out->promote, out->evict, &p->ws[v->layer]);
        if (k < 0)
            return k;
        out->n_promote = k;
    }
    if (p->prefetch) {
        memcpy(&p->last[(size_t)v->layer * p->shape.n_experts], v->counts,
               sizeof *v->counts * (size_t)p->shape.n_experts);
        p->have_last[v->layer] = 1;
    }
    polc_place(&p->shape, v, out);
    return TIDE_OK;
}

/* The prompt grew (DIP): the previous step's counts describe the old
 * context, so prefetch does not use them; the next refresh ranks its own
 * step's counts. */
static void tidep_prompt_grow(struct tide_policy *p, uint32_t prompt_len, uint32_t inserted)
{
    (void)prompt_len;
    (void)inserted;
    memset(p->have_last, 0, (size_t)(p->shape.n_moe_layers ? p->shape.n_moe_layers : 1));
}

static const struct tide_policy_ops tidep_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = tidep_create,
    .destroy = tidep_destroy,
    .initial = tidep_initial,
    .block_begin = tidep_block_begin,
    .plan = tidep_plan,
    .step_begin = tidep_step_begin,
    .prompt_begin = NULL,
    .prompt_grow = tidep_prompt_grow,
};

static const struct tide_plugin_desc tidep_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = TIDEP_NAME,
    .version = "0.1.0",
    .summary = "TIDE: refresh the top-B experts by count every `interval` steps, frozen between",
    .ops = &tidep_ops,
    .options = tidep_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(tidep_desc)
