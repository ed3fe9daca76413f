/* Property test: random routing-count sequences over several layers, blocks,
 * steps, budgets and options, for every policy plugin.
 *
 * The fixture checks every plan against the plan rules and applies it to a
 * simulated residency map: residents never exceed B, an evicted expert is
 * resident and a promoted one is not, every expert placed on the device is
 * resident after the step (so no expert running on the device is evicted),
 * and every active expert has a place. On top of that:
 *  - every policy is deterministic (two runs give the same plans);
 *  - policy-tide matches an independent model of the reference code;
 *  - policy-lru and policy-lfu never leave an idle resident while an active
 *    expert misses;
 *  - policy-static never promotes.
 * policy-cost, policy-hybrid and policy-warm get test costs (overlapped and
 * serial) in their shape, and policy-warm prompt vectors (or none). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/status.h"

#define MAX_E 64

static uint64_t rng_state;

static uint32_t rng_next(void)
{
    /* xorshift64*: fixed seed, so every run sees the same sequences. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 32);
}

static int rng_below(int n)
{
    return (int)(rng_next() % (uint32_t)n);
}

/* Per-layer routing preference that drifts slowly, like real diffusion
 * steps: most tokens go to the first few experts of pref[]. */
struct layer_gen {
    int pref[MAX_E];
};

static void gen_counts(struct layer_gen *g, int n, uint32_t *counts)
{
    memset(counts, 0, sizeof *counts * (size_t)n);
    for (int i = 0; i < 2; i++)
        if (rng_below(4) == 0) {
            int a = rng_below(n), b = rng_below(n), t = g->pref[a];
            g->pref[a] = g->pref[b];
            g->pref[b] = t;
        }
    int tokens = rng_below(8) == 0 ? 0 : 1 + rng_below(32);
    int top_k = n < 4 ? n : 4, hot = n < 6 ? n : 6;
    for (int t = 0; t < tokens; t++) {
        int picked[4], np = 0;
        while (np < top_k) {
            int e = rng_below(5) ? g->pref[rng_below(hot)] : rng_below(n);
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

/* The reference code's refresh (ims-kdks/TIDE update_expert_placement),
 * written independently: repeated arg-max for the target, list slicing for
 * the demotions. Updates res and writes the plan text into out. */
static void ref_tide_step(const uint32_t *counts, int n, int budget, bool refresh, uint8_t *res,
                          char *out, size_t len)
{
    int target[MAX_E], nt = 0, promote[MAX_E], np = 0, demote[MAX_E], nd = 0;
    uint8_t in_target[MAX_E] = {0};
    while (refresh && nt < budget) {
        int best = -1;
        for (int e = 0; e < n; e++)
            if (counts[e] > 0 && !in_target[e] && (best < 0 || counts[e] > counts[best]))
                best = e;
        if (best < 0)
            break;
        in_target[best] = 1;
        target[nt++] = best;
    }
    for (int i = 0; i < nt; i++)
        if (!res[target[i]])
            promote[np++] = target[i];
    for (int e = 0; e < n; e++)
        if (res[e] && !in_target[e])
            demote[nd++] = e;
    size_t o = (size_t)snprintf(out, len, "P[");
    for (int i = 0; i < np; i++) {
        res[demote[i]] = 0; /* np <= nd: the layer is full (B residents) */
        res[promote[i]] = 1;
        o += (size_t)snprintf(out + o, len - o, "%s%d<%d", i ? " " : "", promote[i], demote[i]);
    }
    for (int where = 0; where < 2; where++) {
        o += (size_t)snprintf(out + o, len - o, "] %s[", where ? "H" : "D");
        bool first = true;
        for (int e = 0; e < n; e++)
            if (counts[e] && (res[e] ? 0 : 1) == where) {
                o += (size_t)snprintf(out + o, len - o, "%s%d", first ? "" : " ", e);
                first = false;
            }
    }
    snprintf(out + o, len - o, "]");
}

/* Holds when no expert that ran on the host could have displaced an idle
 * resident (policy-lru's full-swap promise). */
static bool lru_full_swap_holds(const struct pf *f, int layer, const uint32_t *counts)
{
    const int n = f->shape.n_experts;
    const uint8_t *res = &f->resident[(size_t)layer * (size_t)n];
    bool miss = false, idle = false;
    int n_res = 0;
    for (int e = 0; e < n; e++) {
        miss |= counts[e] && f->place[e] == TIDE_PLACE_HOST;
        idle |= res[e] && !counts[e];
        n_res += res[e];
    }
    return !miss || (!idle && n_res == f->shape.budget);
}

struct variant {
    const char *plugin;
    const char *opts; /* for pf_open */
    int interval;     /* policy-tide only, else 0 */
    bool every_step;  /* policy-tide only */
    int costs;        /* 0: none; 1: overlapped, 2: serial test costs in the shape */
};

/* Run one random sequence; returns an FNV-1a hash of every plan text, or 0
 * when a plan broke a rule (reported). */
static uint64_t run_sequence(const struct variant *v, int n, int budget, uint64_t seed)
{
    enum { LAYERS = 3, BLOCKS = 4 };
    struct pf f;
    uint64_t hash = 1469598103934665603ull;
    rng_state = seed;
    struct pf_costs pc;
    pf_costs_init(&pc, v->costs == 1, 10, 40, 2, 120);
    if (!(v->costs
              ? pf_expect_ok(pf_open_costs(&f, v->plugin, v->opts, LAYERS, n, budget, &pc.c, 16),
                             __FILE__, __LINE__, &test_checks, &test_failures)
              : PF_OPEN(&f, v->plugin, v->opts, LAYERS, n, budget))) {
        pf_close(&f);
        return 0;
    }
    struct layer_gen gen[LAYERS];
    uint8_t ref_res[LAYERS][MAX_E];
    for (int l = 0; l < LAYERS; l++) {
        for (int e = 0; e < n; e++)
            gen[l].pref[e] = (e * 7 + l * 3) % n;
        memcpy(ref_res[l], &f.resident[(size_t)l * (size_t)n], (size_t)n);
    }
    const int tau = v->interval;
    bool ok = true;
    for (int b = 0; b < BLOCKS && ok; b++) {
        if (b == 0 || (!tau && b == 2)) {
            /* A generation starts (the second one: a new prompt for policies
             * without a reference model), with a vector or without. */
            float vec[4] = {(float)rng_below(3), (float)rng_below(3), 1, 0};
            pf_prompt(&f, 8, rng_below(4) ? vec : NULL, 4);
        }
        pf_block(&f, b, b == 0 || (!tau && b == 2));
        int steps = 1 + rng_below(32);
        for (int s = 0; s < steps && ok; s++) {
            for (int l = 0; l < LAYERS && ok; l++) {
                uint32_t counts[MAX_E];
                gen_counts(&gen[l], n, counts);
                const char *t = pf_plan_counts(&f, l, s, counts);
                char ref[1024] = "";
                if (tau)
                    ref_tide_step(counts, n, budget, s % tau == 0 || (b == 0 && v->every_step),
                                  ref_res[l], ref, sizeof ref);
                if (!strncmp(t, "INVALID", 7) || !strncmp(t, "ERROR", 5) ||
                    (tau && strcmp(t, ref)) ||
                    ((!strcmp(v->plugin, "policy-lru") || !strcmp(v->plugin, "policy-lfu")) &&
                     !lru_full_swap_holds(&f, l, counts)) ||
                    (!strcmp(v->plugin, "policy-static") && strncmp(t, "P[]", 3))) {
                    fprintf(stderr,
                            "%s [%s] n %d B %d block %d step %d layer %d:\n"
                            "    plan: %s\n    ref:  %s\n",
                            v->plugin, v->opts ? v->opts : "", n, budget, b, s, l, t, ref);
                    ok = false;
                }
                for (const char *c = t; *c; c++)
                    hash = (hash ^ (uint8_t)*c) * 1099511628211ull;
            }
        }
    }
    pf_close(&f);
    CHECK(ok);
    return ok ? hash : 0;
}

static void test_random_sequences(void)
{
    static const struct variant variants[] = {
        {"policy-tide", "interval=1 first_block_every_step=false", 1, false, 0},
        {"policy-tide", "interval=2 first_block_every_step=true", 2, true, 0},
        {"policy-tide", "interval=3 first_block_every_step=false", 3, false, 0},
        {"policy-tide", "interval=4 first_block_every_step=true", 4, true, 0},
        {"policy-tide", "interval=32 first_block_every_step=false", 32, false, 0},
        {"policy-lru", NULL, 0, false, 0},
        {"policy-static", NULL, 0, false, 0},
        {"policy-lfu", NULL, 0, false, 0},
        {"policy-lfu", "decay=1 score=hits", 0, false, 0},
        {"policy-cost", NULL, 0, false, 1},
        {"policy-cost", "alpha=1 carry=0 hysteresis=0 balance=false", 0, false, 2},
        {"policy-hybrid", "core=0.5 interval=2", 0, false, 0},
        {"policy-hybrid", "window=2", 0, false, 1},
        {"policy-hybrid", "core_start=1 first_block_every_step=false", 0, false, 2},
        {"policy-warm", NULL, 0, false, 1},
        {"policy-warm", "neighbours=2 max_prompts=1", 0, false, 2},
    };
    static const int sizes[] = {5, 16, 33};
    int runs = 0;
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++)
        for (int si = 0; si < 3; si++) {
            int n = sizes[si];
            int budgets[] = {0, 1, n / 3, n / 2, n - 1, n};
            for (int bi = 0; bi < 6; bi++)
                for (uint64_t seed = 1; seed <= 4; seed++) {
                    uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)(bi * 131 + si);
                    uint64_t h1 = run_sequence(&variants[vi], n, budgets[bi], s);
                    uint64_t h2 = run_sequence(&variants[vi], n, budgets[bi], s);
                    CHECK(h1 != 0 && h1 == h2);
                    runs++;
                }
        }
    CHECK_EQ_INT(runs, (int)(sizeof variants / sizeof variants[0]) * 3 * 6 * 4);
}

/* Every policy's create() refuses a missing shape and, for those with
 * options, a missing option section, naming itself (polc_check_create). */
static void test_create_refusals(void)
{
    static const char *const with_opts[] = {"policy-tide", "policy-static", "policy-lfu",
                                            "policy-cost", "policy-hybrid", "policy-warm"};
    static const char *const all[] = {"policy-tide",   "policy-static", "policy-lfu", "policy-cost",
                                      "policy-hybrid", "policy-warm",   "policy-lru"};
    const struct tide_policy_shape s = {
        .size = sizeof s, .n_moe_layers = 1, .n_experts = 8, .budget = 2};
    for (size_t i = 0; i < sizeof with_opts / sizeof with_opts[0]; i++) {
        struct pf f;
        if (pf_load(&f, with_opts[i]) != TIDE_OK) {
            CHECK(!"policy plugin loads");
            continue;
        }
        struct tide_policy *p = NULL;
        pf_log_capture();
        CHECK_EQ_INT(f.ops->create(&s, NULL, &p), TIDE_E_INVAL);
        pf_log_release();
        CHECK(p == NULL);
        char want[96];
        snprintf(want, sizeof want, "%s: create() needs the [%s] option section", with_opts[i],
                 with_opts[i]);
        CHECK_CONTAINS(pf_log_text(), want);
        pf_close(&f);
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        struct pf f;
        if (pf_load(&f, all[i]) != TIDE_OK) {
            CHECK(!"policy plugin loads");
            continue;
        }
        struct tide_policy *p = NULL;
        pf_log_capture();
        CHECK_EQ_INT(f.ops->create(NULL, NULL, &p), TIDE_E_INVAL);
        pf_log_release();
        CHECK(p == NULL);
        CHECK_CONTAINS(pf_log_text(), "create() got no policy shape");
        pf_close(&f);
    }
}

int main(void)
{
    TEST_RUN(test_create_refusals);
    TEST_RUN(test_random_sequences);
    TEST_DONE();
}
