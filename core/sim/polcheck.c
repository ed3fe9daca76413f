/* Property checks of a placement policy over synthetic routing (polcheck.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_check.h"
#include "polcheck.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

/* Entries past each array the policy writes; they must keep this value. */
#define PC_GUARD      8
#define PC_GUARD_BYTE 0xA5
#define PC_GUARD_ID   (-0x5A5A5A5)

static const char *const pc_inv_names[TIDE_POLCHECK_N_INV] = {
    [TIDE_POLCHECK_CREATE] = "create() accepts budgets 0..n_experts",
    [TIDE_POLCHECK_INITIAL] = "initial(): <= B distinct experts",
    [TIDE_POLCHECK_STATUS] = "plan()/step_begin() return TIDE_OK",
    [TIDE_POLCHECK_ROUTING] = "routing and residency left unaltered",
    [TIDE_POLCHECK_BOUNDS] = "writes stay inside the plan arrays",
    [TIDE_POLCHECK_BUDGET] = "resident set <= budget",
    [TIDE_POLCHECK_PLAN] = "plan rules (promote, evict, place)",
    [TIDE_POLCHECK_PREFETCH] = "prefetch rules (step_begin)",
    [TIDE_POLCHECK_DETERMINISM] = "deterministic (same calls, same plans)",
    [TIDE_POLCHECK_HOOK] = "matches the test's model of the policy",
};

const char *tide_polcheck_inv_name(enum tide_polcheck_inv inv)
{
    return inv >= 0 && inv < TIDE_POLCHECK_N_INV ? pc_inv_names[inv] : "?";
}

bool tide_polcheck_passed(const struct tide_polcheck_report *r)
{
    for (int i = 0; i < TIDE_POLCHECK_N_INV; i++)
        if (r->failed[i])
            return false;
    return true;
}

void tide_polcheck_costs_init(struct tide_polcheck_costs *tc, bool overlap, double dev_us,
                              double host_us, double host_us_row, double promote_us)
{
    memset(tc, 0, sizeof *tc);
    for (int r = 1; r < 64; r++) {
        tc->dev[r] = dev_us;
        tc->host[r] = host_us + host_us_row * r;
    }
    tc->c = (struct tide_policy_costs){
        .size = sizeof tc->c,
        .expert_bytes = 6291456,
        .overlap = overlap,
        .promote_us = promote_us,
        .n_rows = 64,
        .device_us = tc->dev,
        .host_us = tc->host,
    };
}

/* xorshift64*: the case's seed fixes the whole sequence. */
static uint32_t pc_rng(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (uint32_t)((*s * 2685821657736338717ull) >> 32);
}

static int pc_below(uint64_t *s, int n)
{
    return (int)(pc_rng(s) % (uint32_t)n);
}

/* One step's counts of a layer: a per-layer preference order that drifts
 * slowly, like real diffusion steps; most tokens go to its first few
 * experts, some steps route nothing. */
static void pc_gen_counts(uint64_t *rng, int *pref, int n, uint32_t *counts)
{
    memset(counts, 0, sizeof *counts * (size_t)n);
    for (int i = 0; i < 2; i++)
        if (pc_below(rng, 4) == 0) {
            int a = pc_below(rng, n), b = pc_below(rng, n), t = pref[a];
            pref[a] = pref[b];
            pref[b] = t;
        }
    int tokens = pc_below(rng, 8) == 0 ? 0 : 1 + pc_below(rng, 32);
    int top_k = n < 4 ? n : 4, hot = n < 6 ? n : 6;
    for (int t = 0; t < tokens; t++) {
        int picked[4], np = 0;
        while (np < top_k) {
            int e = pc_below(rng, 5) ? pref[pc_below(rng, hot)] : pc_below(rng, n);
            bool dup = false;
            for (int j = 0; j < np; j++)
                dup |= picked[j] == e;
            if (!dup)
                picked[np++] = e;
        }
        for (int j = 0; j < np; j++)
            counts[picked[j]]++;
    }
}

/* The state of one running case. */
struct pc_run {
    const struct tide_policy_ops *ops;
    const struct tide_opts *opts;
    const struct tide_polcheck_case *c;
    struct tide_polcheck_report *r;
    struct tide_policy *p;
    struct tide_policy_shape shape;
    int n, budget;
    uint8_t *res;                             /* [n_layers][n] residency */
    const uint8_t **rows;                     /* [n_layers] into res, for step_begin */
    int *held;                                /* [n_layers] residents */
    int *pref;                                /* [n_layers][n] routing preference */
    uint8_t *seen;                            /* [n_layers] the layer had its first plan */
    uint32_t *counts;                         /* [n + guard] handed to plan() */
    uint32_t *truth;                          /* [n] the same, kept aside */
    uint8_t *before;                          /* [n] residency before plan() */
    int32_t *promote, *evict;                 /* [n + guard] */
    uint8_t *place;                           /* [n + guard] */
    uint8_t *mark;                            /* [n] tide_plan_check's scratch */
    int32_t *pf_layer, *pf_expert, *pf_evict; /* [cap + guard] prefetch */
    int pf_cap;
    int32_t *init; /* [n + guard] initial() */
    char text[8192];
    uint64_t hash;
    uint64_t rng;
    int block, step, layer; /* where the case is, -1 when outside */
};

static void pc_fail(struct pc_run *x, enum tide_polcheck_inv inv, const char *fmt, ...)
    TIDE_PRINTF(3, 4);

static void pc_fail(struct pc_run *x, enum tide_polcheck_inv inv, const char *fmt, ...)
{
    struct tide_polcheck_report *r = x->r;
    if (r->failed[inv]++)
        return;
    char why[320], where[96] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (x->block >= 0)
        snprintf(where, sizeof where, ", block %d step %d", x->block, x->step);
    if (x->layer >= 0)
        snprintf(where + strlen(where), sizeof where - strlen(where), "%s layer %d",
                 x->block >= 0 ? "" : ",", x->layer);
    snprintf(r->first[inv], sizeof r->first[inv], "n_experts %d B %d seed %llu%s%s%s: %s", x->n,
             x->budget, (unsigned long long)x->c->seed, x->c->label ? " " : "",
             x->c->label ? x->c->label : "", where, why);
}

static void pc_hash(struct pc_run *x, const char *s)
{
    for (; *s; s++)
        x->hash = (x->hash ^ (uint8_t)*s) * 1099511628211ull;
}

static bool pc_guards_ok(const void *a, size_t elem, int n)
{
    if (elem == 1) {
        for (int i = 0; i < PC_GUARD; i++)
            if (((const uint8_t *)a)[n + i] != PC_GUARD_BYTE)
                return false;
        return true;
    }
    for (int i = 0; i < PC_GUARD; i++)
        if (((const int32_t *)a)[n + i] != PC_GUARD_ID)
            return false;
    return true;
}

static void pc_set_guards(void *a, size_t elem, int n)
{
    if (elem == 1) {
        memset((uint8_t *)a + n, PC_GUARD_BYTE, PC_GUARD);
        return;
    }
    for (int i = 0; i < PC_GUARD; i++)
        ((int32_t *)a)[n + i] = PC_GUARD_ID;
}

static void pc_free(struct pc_run *x)
{
    if (x->p)
        x->ops->destroy(x->p);
    free(x->res);
    free(x->rows);
    free(x->held);
    free(x->pref);
    free(x->seen);
    free(x->counts);
    free(x->truth);
    free(x->before);
    free(x->promote);
    free(x->evict);
    free(x->place);
    free(x->mark);
    free(x->pf_layer);
    free(x->pf_expert);
    free(x->pf_evict);
    free(x->init);
}

static bool pc_alloc(struct pc_run *x)
{
    const size_t n = (size_t)x->n, L = (size_t)x->c->n_layers, g = PC_GUARD;
    x->pf_cap = (int)(L * n);
    x->res = calloc(L * n, 1);
    x->rows = calloc(L, sizeof *x->rows);
    x->held = calloc(L, sizeof *x->held);
    x->pref = calloc(L * n, sizeof *x->pref);
    x->seen = calloc(L, 1);
    x->counts = calloc(n + g, sizeof *x->counts);
    x->truth = calloc(n, sizeof *x->truth);
    x->before = calloc(n, 1);
    x->promote = calloc(n + g, sizeof *x->promote);
    x->evict = calloc(n + g, sizeof *x->evict);
    x->place = calloc(n + g, 1);
    x->mark = calloc(n, 1);
    x->pf_layer = calloc(L * n + g, sizeof *x->pf_layer);
    x->pf_expert = calloc(L * n + g, sizeof *x->pf_expert);
    x->pf_evict = calloc(L * n + g, sizeof *x->pf_evict);
    x->init = calloc(n + g, sizeof *x->init);
    if (!x->res || !x->rows || !x->held || !x->pref || !x->seen || !x->counts || !x->truth ||
        !x->before || !x->promote || !x->evict || !x->place || !x->mark || !x->pf_layer ||
        !x->pf_expert || !x->pf_evict || !x->init)
        return false;
    for (size_t l = 0; l < L; l++)
        x->rows[l] = &x->res[l * n];
    return true;
}

/* create() and initial(): 1 ok, 0 skipped (needs costs), -1 failed. */
static int pc_start(struct pc_run *x)
{
    const struct tide_polcheck_case *c = x->c;
    x->shape = (struct tide_policy_shape){
        .size = sizeof(struct tide_policy_shape),
        .n_layers = c->n_layers + 1,
        .n_moe_layers = c->n_layers,
        .n_experts = x->n,
        .top_k = x->n < 8 ? x->n : 8,
        .expert_bytes = c->costs ? c->costs->expert_bytes : 6291456,
        .budget = x->budget,
        .max_steps = c->max_steps,
        .costs = c->costs,
    };
    x->r->checked[TIDE_POLCHECK_CREATE]++;
    struct tide_policy *p = NULL;
    int rc = x->ops->create(&x->shape, x->opts, &p);
    if (rc == TIDE_E_CONFIG && !c->costs) {
        x->r->checked[TIDE_POLCHECK_CREATE]--;
        x->r->skipped++;
        return 0;
    }
    if (rc != TIDE_OK || !p) {
        pc_fail(x, TIDE_POLCHECK_CREATE, "create() returned %s%s", tide_status_str(rc),
                rc == TIDE_OK ? " and no instance" : "");
        return -1;
    }
    x->p = p;
    for (int l = 0; l < c->n_layers; l++) {
        x->layer = l;
        for (int i = 0; i < x->n; i++)
            x->init[i] = -1;
        pc_set_guards(x->init, sizeof *x->init, x->budget);
        x->r->checked[TIDE_POLCHECK_INITIAL]++;
        int k = x->ops->initial(p, l, x->init);
        uint8_t *res = &x->res[(size_t)l * (size_t)x->n];
        if (k < 0 || k > x->budget) {
            pc_fail(x, TIDE_POLCHECK_INITIAL, "initial() returned %d with a budget of %d", k,
                    x->budget);
            return -1;
        }
        if (!pc_guards_ok(x->init, sizeof *x->init, x->budget)) {
            x->r->checked[TIDE_POLCHECK_BOUNDS]++;
            pc_fail(x, TIDE_POLCHECK_BOUNDS, "initial() wrote past out[budget = %d]", x->budget);
            return -1;
        }
        for (int i = 0; i < k; i++) {
            int32_t e = x->init[i];
            if (e < 0 || e >= x->n || res[e]) {
                pc_fail(x, TIDE_POLCHECK_INITIAL, "initial() id %d is out of range or repeated",
                        (int)e);
                return -1;
            }
            res[e] = 1;
        }
        x->held[l] = k;
        char buf[32];
        snprintf(buf, sizeof buf, "I%d:%d", l, k);
        pc_hash(x, buf);
    }
    x->layer = -1;
    return 1;
}

/* step_begin's prefetches, checked by the dispatcher's rules and applied. */
static bool pc_prefetch(struct pc_run *x)
{
    if (!TIDE_OPS_HAS(x->ops, step_begin))
        return true;
    const int n = x->n;
    struct tide_prefetch pf = {
        .cap = x->pf_cap, .layer = x->pf_layer, .expert = x->pf_expert, .evict = x->pf_evict};
    pc_set_guards(x->pf_layer, sizeof(int32_t), x->pf_cap);
    pc_set_guards(x->pf_expert, sizeof(int32_t), x->pf_cap);
    pc_set_guards(x->pf_evict, sizeof(int32_t), x->pf_cap);
    const size_t cells = (size_t)x->c->n_layers * (size_t)n;
    uint8_t *keep = malloc(cells);
    if (keep)
        memcpy(keep, x->res, cells);
    x->r->checked[TIDE_POLCHECK_STATUS]++;
    int rc = x->ops->step_begin(x->p, x->block, x->step, x->rows, &pf);
    x->r->checked[TIDE_POLCHECK_ROUTING]++;
    bool altered = keep && memcmp(keep, x->res, cells);
    free(keep);
    if (rc != TIDE_OK) {
        pc_fail(x, TIDE_POLCHECK_STATUS, "step_begin() returned %s", tide_status_str(rc));
        return false;
    }
    if (altered) {
        pc_fail(x, TIDE_POLCHECK_ROUTING, "step_begin() wrote into the residency map");
        return false;
    }
    x->r->checked[TIDE_POLCHECK_BOUNDS]++;
    if (!pc_guards_ok(x->pf_layer, sizeof(int32_t), x->pf_cap) ||
        !pc_guards_ok(x->pf_expert, sizeof(int32_t), x->pf_cap) ||
        !pc_guards_ok(x->pf_evict, sizeof(int32_t), x->pf_cap)) {
        pc_fail(x, TIDE_POLCHECK_BOUNDS, "step_begin() wrote past the prefetch arrays (cap %d)",
                x->pf_cap);
        return false;
    }
    x->r->checked[TIDE_POLCHECK_PREFETCH]++;
    if (pf.n < 0 || pf.n > pf.cap) {
        pc_fail(x, TIDE_POLCHECK_PREFETCH, "prefetch count %d out of range 0..%d", pf.n, pf.cap);
        return false;
    }
    for (int i = 0; i < pf.n; i++) {
        int l = pf.layer[i], e = pf.expert[i], ev = pf.evict[i];
        const bool in = l >= 0 && l < x->c->n_layers;
        uint8_t *res = in ? &x->res[(size_t)l * (size_t)n] : NULL;
        /* The dispatcher's rule; a promotion into a full layer is named as
         * the budget it breaks. */
        const char *bad = tide_prefetch_check(n, x->budget, in ? x->held[l] : 0, res, e, ev);
        x->r->checked[TIDE_POLCHECK_BUDGET]++;
        if (bad && res && e >= 0 && e < n && !res[e] && ev < 0) {
            pc_fail(x, TIDE_POLCHECK_BUDGET,
                    "prefetch %d promotes expert %d of layer %d into a free slot, but the layer "
                    "holds its budget of %d",
                    i, e, l, x->budget);
            return false;
        }
        if (bad) {
            pc_fail(x, TIDE_POLCHECK_PREFETCH, "prefetch %d (layer %d, expert %d, evict %d): %s", i,
                    l, e, ev, bad);
            return false;
        }
        res[e] = 1;
        if (ev >= 0)
            res[ev] = 0;
        else
            x->held[l]++;
        char buf[48];
        snprintf(buf, sizeof buf, "F%d:%d<%d", l, e, ev);
        pc_hash(x, buf);
        x->r->promotions++;
        x->r->prefetches++;
    }
    return true;
}

static void pc_add(struct pc_run *x, const char *fmt, ...) TIDE_PRINTF(2, 3);

static void pc_add(struct pc_run *x, const char *fmt, ...)
{
    size_t len = strlen(x->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->text + len, sizeof x->text - len, fmt, ap);
    va_end(ap);
}

/* The plan as "P[4<0 5<-] D[1 4 5] H[7]" (the fixture's text). */
static void pc_plan_text(struct pc_run *x, const struct tide_plan *plan)
{
    x->text[0] = 0;
    pc_add(x, "P[");
    for (int i = 0; i < plan->n_promote; i++) {
        if (plan->evict[i] < 0)
            pc_add(x, "%s%d<-", i ? " " : "", plan->promote[i]);
        else
            pc_add(x, "%s%d<%d", i ? " " : "", plan->promote[i], plan->evict[i]);
    }
    for (int where = TIDE_PLACE_DEVICE; where <= TIDE_PLACE_HOST; where++) {
        pc_add(x, "] %s[", where == TIDE_PLACE_DEVICE ? "D" : "H");
        bool first = true;
        for (int e = 0; e < x->n; e++) {
            if (x->truth[e] && plan->place[e] == where) {
                pc_add(x, "%s%d", first ? "" : " ", e);
                first = false;
            }
        }
    }
    pc_add(x, "]");
}

/* One plan() call: every check, then the promotions applied. */
static bool pc_plan(struct pc_run *x)
{
    const int n = x->n, l = x->layer;
    uint8_t *res = &x->res[(size_t)l * (size_t)n];
    pc_gen_counts(&x->rng, &x->pref[(size_t)l * (size_t)n], n, x->truth);
    memcpy(x->counts, x->truth, (size_t)n * sizeof *x->counts);
    memcpy(x->before, res, (size_t)n);
    pc_set_guards(x->counts, sizeof(int32_t), n);
    pc_set_guards(x->promote, sizeof(int32_t), n);
    pc_set_guards(x->evict, sizeof(int32_t), n);
    pc_set_guards(x->place, 1, n);
    memset(x->place, 0xEE, (size_t)n);
    struct tide_plan plan = {.promote = x->promote, .evict = x->evict, .place = x->place};
    const struct tide_policy_view v = {
        .layer = l, .block = x->block, .step = x->step, .counts = x->counts, .resident = res};
    x->r->plans++;
    x->r->checked[TIDE_POLCHECK_STATUS]++;
    int rc = x->ops->plan(x->p, &v, &plan);
    if (rc != TIDE_OK) {
        pc_fail(x, TIDE_POLCHECK_STATUS, "plan() returned %s", tide_status_str(rc));
        return false;
    }
    x->r->checked[TIDE_POLCHECK_ROUTING]++;
    if (memcmp(x->counts, x->truth, (size_t)n * sizeof *x->counts)) {
        int e = 0;
        while (x->counts[e] == x->truth[e])
            e++;
        pc_fail(x, TIDE_POLCHECK_ROUTING, "plan() changed the routing: counts[%d] %u -> %u", e,
                x->truth[e], x->counts[e]);
        return false;
    }
    if (memcmp(res, x->before, (size_t)n)) {
        pc_fail(x, TIDE_POLCHECK_ROUTING, "plan() wrote into the residency map");
        return false;
    }
    x->r->checked[TIDE_POLCHECK_BOUNDS]++;
    if (!pc_guards_ok(x->counts, sizeof(int32_t), n) ||
        !pc_guards_ok(x->promote, sizeof(int32_t), n) ||
        !pc_guards_ok(x->evict, sizeof(int32_t), n) || !pc_guards_ok(x->place, 1, n)) {
        pc_fail(x, TIDE_POLCHECK_BOUNDS, "plan() wrote past an array of n_experts = %d entries", n);
        return false;
    }
    /* The budget first, so that a policy that overfills a layer is named
     * as such rather than by the plan rule it trips. */
    x->r->checked[TIDE_POLCHECK_BUDGET]++;
    if (plan.n_promote < 0 || plan.n_promote > x->budget) {
        pc_fail(x, TIDE_POLCHECK_BUDGET, "plan() asks for %d promotions with a budget of %d",
                plan.n_promote, x->budget);
        return false;
    }
    int free_slots = x->budget - x->held[l];
    for (int i = 0; i < plan.n_promote; i++)
        if (plan.evict[i] < 0 && free_slots-- <= 0) {
            pc_fail(x, TIDE_POLCHECK_BUDGET,
                    "plan() promotes expert %d into a free slot while the layer holds its "
                    "budget: %d residents with a budget of %d",
                    plan.promote[i], x->held[l] + plan.n_promote - i, x->budget);
            return false;
        }
    x->r->checked[TIDE_POLCHECK_PLAN]++;
    const struct tide_plan_ctx pc = {.n_experts = n,
                                     .budget = x->budget,
                                     .n_held = x->held[l],
                                     .resident = res,
                                     .counts = x->truth,
                                     .mark = x->mark};
    char why[200];
    if (tide_plan_check(&pc, &plan, why, sizeof why)) {
        pc_fail(x, TIDE_POLCHECK_PLAN, "the plan %s", why);
        return false;
    }
    for (int i = 0; i < plan.n_promote; i++) {
        res[plan.promote[i]] = 1;
        if (plan.evict[i] >= 0)
            res[plan.evict[i]] = 0;
        else
            x->held[l]++;
    }
    x->r->promotions += (uint64_t)plan.n_promote;
    pc_plan_text(x, &plan);
    pc_hash(x, x->text);
    if (x->c->hook) {
        const struct tide_polcheck_step st = {.n_experts = n,
                                              .budget = x->budget,
                                              .block = x->block,
                                              .step = x->step,
                                              .layer = l,
                                              .first = !x->seen[l],
                                              .counts = x->truth,
                                              .resident_before = x->before,
                                              .resident = res,
                                              .plan = &plan,
                                              .text = x->text};
        x->r->checked[TIDE_POLCHECK_HOOK]++;
        const char *bad = x->c->hook(x->c->hook_user, &st, why, sizeof why);
        if (bad) {
            pc_fail(x, TIDE_POLCHECK_HOOK, "plan %s: %s", x->text, bad);
            return false;
        }
    }
    x->seen[l] = 1;
    return true;
}

bool tide_polcheck_case_run(const struct tide_policy_ops *ops, const struct tide_opts *opts,
                            const struct tide_polcheck_case *c, struct tide_polcheck_report *r,
                            uint64_t *hash)
{
    struct pc_run x = {.ops = ops,
                       .opts = opts,
                       .c = c,
                       .r = r,
                       .n = c->n_experts,
                       .budget = c->budget,
                       .hash = 1469598103934665603ull,
                       /* Cases of one seed at other shapes get other sequences. */
                       .rng = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)c->n_experts * 131u +
                              (uint64_t)c->budget,
                       .block = -1,
                       .layer = -1};
    if (!x.rng)
        x.rng = 1;
    if (hash)
        *hash = 0;
    r->cases++;
    if (!pc_alloc(&x)) {
        pc_free(&x);
        pc_fail(&x, TIDE_POLCHECK_CREATE, "out of memory");
        return false;
    }
    for (int l = 0; l < c->n_layers; l++)
        for (int e = 0; e < x.n; e++)
            x.pref[(size_t)l * (size_t)x.n + (size_t)e] = (e * 7 + l * 3) % x.n;
    int st = pc_start(&x);
    bool ok = st >= 0;
    for (int b = 0; st > 0 && b < c->blocks && ok; b++) {
        x.block = b;
        x.step = 0;
        const bool starts = b == 0 || (c->second_prompt > 0 && b == c->second_prompt);
        if (starts && TIDE_OPS_HAS(ops, prompt_begin)) {
            /* A generation starts, with a prompt vector or without. */
            float vec[4] = {(float)pc_below(&x.rng, 3), (float)pc_below(&x.rng, 3), 1, 0};
            ops->prompt_begin(x.p, 8, pc_below(&x.rng, 4) ? vec : NULL, 4);
        }
        ops->block_begin(x.p, b, starts);
        /* max_steps is a bound the core keeps: 1..32 steps, or fewer. */
        int steps = 1 + pc_below(&x.rng, c->max_steps > 0 && c->max_steps < 32 ? c->max_steps : 32);
        for (int s = 0; s < steps && ok; s++) {
            x.step = s;
            ok = pc_prefetch(&x);
            for (int l = 0; l < c->n_layers && ok; l++) {
                x.layer = l;
                ok = pc_plan(&x);
            }
            x.layer = -1;
        }
    }
    if (hash && ok && st > 0)
        *hash = x.hash ? x.hash : 1;
    pc_free(&x);
    return ok;
}

bool tide_polcheck_case_twice(const struct tide_policy_ops *ops, const struct tide_opts *opts,
                              const struct tide_polcheck_case *c, struct tide_polcheck_report *r)
{
    uint64_t h1, h2;
    uint64_t skipped = r->skipped;
    if (!tide_polcheck_case_run(ops, opts, c, r, &h1))
        return false;
    if (r->skipped != skipped)
        return true;
    if (!tide_polcheck_case_run(ops, opts, c, r, &h2))
        return false;
    r->cases--; /* one case, run twice */
    r->checked[TIDE_POLCHECK_DETERMINISM]++;
    if (h1 != h2) {
        struct pc_run x = {
            .c = c, .r = r, .n = c->n_experts, .budget = c->budget, .block = -1, .layer = -1};
        pc_fail(&x, TIDE_POLCHECK_DETERMINISM,
                "two runs of the same calls gave different plans (hash %016llx vs %016llx)",
                (unsigned long long)h1, (unsigned long long)h2);
        return false;
    }
    return true;
}
