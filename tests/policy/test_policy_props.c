/* Property test: random routing-count sequences over several layers, blocks,
 * steps, budgets and options, for every policy plugin.
 *
 * The sequences and the checks are those of `tide policy-check`
 * (core/sim/polcheck.c): every initial set, prefetch and plan is checked
 * against the dispatcher's rules and applied to a simulated residency map
 * (residents never exceed B, an evicted expert is resident and a promoted
 * one is not, every expert placed on the device is resident after the step,
 * every active expert has a place), the routing handed to plan() is left
 * unaltered, nothing is written past the plan arrays, and every policy is
 * deterministic (two runs give the same plans). On top of that, as the
 * checks' hook:
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
#include "polcheck.h"
#include "policy_fixture.h"
#include "tide/status.h"

#define MAX_E 64

struct variant {
    const char *plugin;
    const char *opts; /* for pf_load_opts */
    int interval;     /* policy-tide only, else 0 */
    bool every_step;  /* policy-tide only */
    int costs;        /* 0: none; 1: overlapped, 2: serial test costs in the shape */
};

/* The hook's state: the variant and, for policy-tide, the reference model's
 * residency per layer. */
struct model {
    const struct variant *v;
    uint8_t ref_res[3][MAX_E];
};

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
static bool lru_full_swap_holds(const struct tide_polcheck_step *s)
{
    bool miss = false, idle = false;
    int n_res = 0;
    for (int e = 0; e < s->n_experts; e++) {
        miss |= s->counts[e] && s->plan->place[e] == TIDE_PLACE_HOST;
        idle |= s->resident[e] && !s->counts[e];
        n_res += s->resident[e];
    }
    return !miss || (!idle && n_res == s->budget);
}

/* What each shipped policy promises beyond the plan rules. */
static const char *model_check(void *user, const struct tide_polcheck_step *s, char *why,
                               size_t len)
{
    struct model *m = user;
    const struct variant *v = m->v;
    if (v->interval) {
        const int tau = v->interval;
        uint8_t *ref = m->ref_res[s->layer];
        if (s->first)
            memcpy(ref, s->resident_before, (size_t)s->n_experts);
        char want[1024];
        ref_tide_step(s->counts, s->n_experts, s->budget,
                      s->step % tau == 0 || (s->block == 0 && v->every_step), ref, want,
                      sizeof want);
        if (strcmp(s->text, want)) {
            snprintf(why, len, "the reference refresh gives %s", want);
            return why;
        }
    }
    if ((!strcmp(v->plugin, "policy-lru") || !strcmp(v->plugin, "policy-lfu")) &&
        !lru_full_swap_holds(s))
        return "an expert ran on the host while an idle resident could have made room";
    if (!strcmp(v->plugin, "policy-static") && strncmp(s->text, "P[]", 3))
        return "policy-static promoted";
    return NULL;
}

/* Random sequences through the shared property checks (core/sim/polcheck.c,
 * also `tide policy-check`), with each policy's own promises as the hook. */
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
        /* policy-tide's prefetch: step_begin promotions under the same rules. */
        {"policy-tide", "interval=2 prefetch=true", 0, false, 0},
    };
    static const int sizes[] = {5, 16, 33};
    int runs = 0;
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        const struct variant *v = &variants[vi];
        struct pf f;
        if (!pf_expect_ok(pf_load_opts(&f, v->plugin, v->opts), __FILE__, __LINE__, &test_checks,
                          &test_failures)) {
            pf_close(&f);
            continue;
        }
        struct tide_polcheck_costs tc;
        tide_polcheck_costs_init(&tc, v->costs == 1, 10, 40, 2, 120);
        struct model m = {.v = v};
        struct tide_polcheck_report r = {0};
        for (int si = 0; si < 3; si++) {
            int n = sizes[si];
            int budgets[] = {0, 1, n / 3, n / 2, n - 1, n};
            for (int bi = 0; bi < 6; bi++)
                for (uint64_t seed = 1; seed <= 4; seed++) {
                    const struct tide_polcheck_case c = {
                        .label = v->opts,
                        .n_layers = 3,
                        .n_experts = n,
                        .budget = budgets[bi],
                        .blocks = 4,
                        .second_prompt = v->interval ? 0 : 2,
                        .seed = seed,
                        .max_steps = v->costs ? 16 : 0,
                        .costs = v->costs ? &tc.c : NULL,
                        .hook = model_check,
                        .hook_user = &m,
                    };
                    tide_polcheck_case_twice(f.ops, pf_section(&f), &c, &r);
                    runs++;
                }
        }
        for (int i = 0; i < TIDE_POLCHECK_N_INV; i++)
            if (r.failed[i])
                fprintf(stderr, "%s: %s: %llu failed, first: %s\n", v->plugin,
                        tide_polcheck_inv_name(i), (unsigned long long)r.failed[i], r.first[i]);
        CHECK(tide_polcheck_passed(&r));
        CHECK_EQ_INT(r.skipped, 0);
        CHECK_EQ_INT(r.cases, 3 * 6 * 4);
        CHECK_EQ_INT(r.checked[TIDE_POLCHECK_DETERMINISM], 3 * 6 * 4);
        CHECK(r.plans > 0);
        pf_close(&f);
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
