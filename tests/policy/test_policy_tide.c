/* policy-tide: exact promotions, evictions and placements, step by step. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/log.h"
#include "tide/status.h"

static void test_descriptor(void)
{
    struct pf f;
    CHECK_EQ_INT(pf_load(&f, "policy-tide"), TIDE_OK);
    CHECK(pf_desc_ok(&f, "policy-tide",
                     "interval first_block_every_step initial counts_file prefetch profile "
                     "auto_scope auto_window auto_max auto_start"));
    pf_close(&f);
}

/* Promote 2 while 3 residents are stale: only 2 are evicted, lowest id first;
 * the target keeps only experts with tokens. */
static void test_capped_demotion(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-tide", "interval=4 first_block_every_step=false", 1, 8, 4)) {
        CHECK_STR(pf_residents(&f, 0), "0 1 2 3");
        pf_block(&f, 0, true);
        /* target = 4 (9), 5 (7), 1 (5): three experts, not four. */
        CHECK_STR(pf_plan(&f, 0, 0, "1:5 4:9 5:7"), "P[4<0 5<2] D[1 4 5] H[]");
        CHECK_STR(pf_residents(&f, 0), "1 3 4 5");
        /* Between refreshes nothing moves. */
        CHECK_STR(pf_plan(&f, 0, 1, "0:4 1:2 6:1"), "P[] D[1] H[0 6]");
        CHECK_STR(pf_plan(&f, 0, 3, "6:9 7:9"), "P[] D[] H[6 7]");
        /* Refresh at step 4: 6 and 7 tie, 3 is the lowest stale resident. */
        CHECK_STR(pf_plan(&f, 0, 4, "6:9 7:9 3:1"), "P[6<1 7<4] D[3 6 7] H[]");
        CHECK_STR(pf_residents(&f, 0), "3 5 6 7");
    }
    pf_close(&f);
}

/* Target ordering and cut: count descending, ties to the lower id. */
static void test_target_order(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-tide", "interval=1 first_block_every_step=false", 1, 8, 2)) {
        pf_block(&f, 0, false);
        CHECK_STR(pf_plan(&f, 0, 0, "7:3 6:3 5:9"), "P[5<0 6<1] D[5 6] H[7]");
        /* Nothing has tokens: the target is empty and nobody moves. */
        CHECK_STR(pf_plan(&f, 0, 1, ""), "P[] D[] H[]");
        CHECK_STR(pf_residents(&f, 0), "5 6");
        /* A resident in the target stays; one promotion evicts the stale 5. */
        CHECK_STR(pf_plan(&f, 0, 2, "6:1 2:1"), "P[2<5] D[2 6] H[]");
    }
    pf_close(&f);
    if (PF_OPEN(&f, "policy-tide", "interval=1 first_block_every_step=false", 1, 8, 4)) {
        pf_block(&f, 0, false);
        CHECK_STR(pf_plan(&f, 0, 0, "7:3 6:3 5:9"), "P[5<0 6<1 7<2] D[5 6 7] H[]");
        /* One active expert: one promotion, the other residents stay. */
        CHECK_STR(pf_plan(&f, 0, 1, "1:1"), "P[1<3] D[1] H[]");
        CHECK_STR(pf_residents(&f, 0), "1 5 6 7");
    }
    pf_close(&f);
    /* A resident with tokens but outside the target is demoted and runs on the host. */
    if (PF_OPEN(&f, "policy-tide", "interval=1 first_block_every_step=false", 1, 8, 2)) {
        pf_block(&f, 0, false);
        CHECK_STR(pf_plan(&f, 0, 0, "5:9 6:8 0:1"), "P[5<0 6<1] D[5 6] H[0]");
    }
    pf_close(&f);
}

/* Free slots (fewer residents than the budget) are used before evicting. */
static void test_free_slots(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-tide", "interval=2 first_block_every_step=false", 1, 8, 4)) {
        f.resident[2] = f.resident[3] = 0;
        pf_block(&f, 0, false);
        CHECK_STR(pf_plan(&f, 0, 0, "4:5 5:4 6:3"), "P[4<- 5<- 6<0] D[4 5 6] H[]");
        CHECK_STR(pf_residents(&f, 0), "1 4 5 6");
    }
    pf_close(&f);
}

/* Drive `blocks` blocks of `steps` steps on a 1-layer, 4-expert, B=1 model
 * where the hot expert is never resident, so every refresh promotes exactly
 * one expert. Returns the refresh steps as "b.s b.s ...". */
static const char *tide_schedule(struct pf *f, int blocks, int steps, char *out, size_t len)
{
    out[0] = 0;
    for (int b = 0; b < blocks; b++) {
        pf_block(f, b, b == 0);
        for (int s = 0; s < steps; s++) {
            int hot = f->resident[0] ? 1 : 0;
            char counts[16];
            snprintf(counts, sizeof counts, "%d:5", hot);
            const char *t = pf_plan(f, 0, s, counts);
            if (!strncmp(t, "P[]", 3))
                continue;
            size_t n = strlen(out);
            snprintf(out + n, len - n, "%s%d.%d", n ? " " : "", b, s);
        }
    }
    return out;
}

static void test_schedule(void)
{
    static const struct {
        const char *opts;
        int steps;
        const char *want;
    } cases[] = {
        {"interval=1 first_block_every_step=false", 4,
         "0.0 0.1 0.2 0.3 1.0 1.1 1.2 1.3 2.0 2.1 2.2 2.3"},
        {"interval=2 first_block_every_step=false", 5, "0.0 0.2 0.4 1.0 1.2 1.4 2.0 2.2 2.4"},
        {"interval=4 first_block_every_step=false", 10, "0.0 0.4 0.8 1.0 1.4 1.8 2.0 2.4 2.8"},
        {"interval=32 first_block_every_step=false", 32, "0.0 1.0 2.0"},
        {"interval=4 first_block_every_step=true", 6, "0.0 0.1 0.2 0.3 0.4 0.5 1.0 1.4 2.0 2.4"},
        {"interval=32 first_block_every_step=true", 3, "0.0 0.1 0.2 1.0 2.0"},
        {"interval=99999999999 first_block_every_step=false", 32, "0.0 1.0 2.0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pf f;
        char got[512];
        if (PF_OPEN(&f, "policy-tide", cases[i].opts, 1, 4, 1)) {
            tide_schedule(&f, 3, cases[i].steps, got, sizeof got);
            if (strcmp(got, cases[i].want))
                fprintf(stderr, "%s:\n", cases[i].opts);
            CHECK_STR(got, cases[i].want);
        }
        pf_close(&f);
    }
    /* The full 32-step blocks: refresh exactly when step % interval == 0. */
    const int intervals[] = {1, 2, 4, 32};
    for (int i = 0; i < 4; i++) {
        struct pf f;
        char got[4096], want[4096] = "", opts[64];
        int tau = intervals[i];
        snprintf(opts, sizeof opts, "interval=%d first_block_every_step=false", tau);
        for (int b = 0; b < 3; b++)
            for (int s = 0; s < 32; s += tau) {
                size_t n = strlen(want);
                snprintf(want + n, sizeof want - n, "%s%d.%d", n ? " " : "", b, s);
            }
        if (PF_OPEN(&f, "policy-tide", opts, 1, 4, 1))
            CHECK_STR(tide_schedule(&f, 3, 32, got, sizeof got), want);
        pf_close(&f);
    }
}

/* Without block_begin, block 0 counts as the first generated block. */
static void test_first_block_without_block_begin(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-tide", "interval=4 first_block_every_step=true", 1, 4, 1)) {
        CHECK_STR(pf_plan(&f, 0, 1, "2:1"), "P[2<0] D[2] H[]");
        f.block = 1;
        CHECK_STR(pf_plan(&f, 0, 1, "3:1"), "P[] D[] H[3]");
    }
    pf_close(&f);
}

static void test_budget_zero(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-tide", "interval=1 first_block_every_step=true", 2, 8, 0)) {
        CHECK_STR(pf_residents(&f, 0), "");
        pf_block(&f, 0, true);
        for (int s = 0; s < 3; s++) {
            CHECK_STR(pf_plan(&f, 0, s, "0:3 5:2 7:1"), "P[] D[] H[0 5 7]");
            CHECK_STR(pf_plan(&f, 1, s, "1:1"), "P[] D[] H[1]");
        }
    }
    pf_close(&f);
}

static void test_budget_all(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-tide", "interval=1 first_block_every_step=true", 1, 8, 8)) {
        CHECK_STR(pf_residents(&f, 0), "0 1 2 3 4 5 6 7");
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:3 5:2 7:1"), "P[] D[0 5 7] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "0:1 1:1 2:1 3:1 4:1 5:1 6:1 7:1"),
                  "P[] D[0 1 2 3 4 5 6 7] H[]");
    }
    pf_close(&f);
}

/* Layers have separate resident sets. */
static void test_layers(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-tide", "interval=2 first_block_every_step=false", 2, 8, 2)) {
        pf_block(&f, 3, false);
        CHECK_STR(pf_plan(&f, 0, 0, "4:2 0:1"), "P[4<1] D[0 4] H[]");
        CHECK_STR(pf_plan(&f, 1, 0, "6:2 7:2"), "P[6<0 7<1] D[6 7] H[]");
        CHECK_STR(pf_residents(&f, 0), "0 4");
        CHECK_STR(pf_residents(&f, 1), "6 7");
        CHECK_STR(pf_plan(&f, 1, 1, "0:5"), "P[] D[] H[0]");
    }
    pf_close(&f);
}

/* prefetch: at a refresh step, step_begin() asks for each layer's refresh
 * from the previous step's counts, and plan() then promotes nothing more. */
static void test_prefetch(void)
{
    struct pf f;
    if (!PF_OPEN(&f, "policy-tide", "prefetch=true interval=2 first_block_every_step=false", 1, 8,
                 2))
        return;
    int32_t layer[8], expert[8], evict[8];
    struct tide_prefetch pf = {.cap = 8, .layer = layer, .expert = expert, .evict = evict};
    const uint8_t *res[1] = {f.resident};
    pf_block(&f, 0, false);
    /* Step 0 refreshes, but there is no previous step yet: a plain refresh. */
    CHECK_EQ_INT(f.ops->step_begin(f.p, 0, 0, res, &pf), TIDE_OK);
    CHECK_EQ_INT(pf.n, 0);
    CHECK_STR(pf_plan(&f, 0, 0, "3:5 4:2"), "P[3<0 4<1] D[3 4] H[]");
    /* Step 1 is not a refresh step. */
    CHECK_EQ_INT(f.ops->step_begin(f.p, 0, 1, res, &pf), TIDE_OK);
    CHECK_EQ_INT(pf.n, 0);
    CHECK_STR(pf_plan(&f, 0, 1, "5:3 6:1"), "P[] D[] H[5 6]");
    /* Step 2 refreshes from step 1's counts at step start: 5 and 6 replace 3 and 4. */
    CHECK_EQ_INT(f.ops->step_begin(f.p, 0, 2, res, &pf), TIDE_OK);
    CHECK_EQ_INT(pf.n, 2);
    if (pf.n == 2) {
        CHECK_EQ_INT(layer[0], 0);
        CHECK_EQ_INT(expert[0], 5);
        CHECK_EQ_INT(evict[0], 3);
        CHECK_EQ_INT(expert[1], 6);
        CHECK_EQ_INT(evict[1], 4);
        for (int i = 0; i < 2; i++) {
            f.resident[evict[i]] = 0;
            f.resident[expert[i]] = 1;
        }
    }
    /* ... and the step's own plan moves nothing, though 7 is now the busiest. */
    CHECK_STR(pf_plan(&f, 0, 2, "7:4 5:1"), "P[] D[5] H[7]");
    pf_close(&f);
}

static void test_options_and_errors(void)
{
    struct pf f;
    /* interval is an integer >= 1 or auto; auto needs a profile. */
    static const struct {
        const char *opts, *msg;
    } bad_opts[] = {
        {"interval=0",
         "policy-tide: interval = 0 is out of range: must be an integer >= 1 or auto"},
        {"interval=4x", "policy-tide: interval = 4x is out of range"},
        {"interval=auto", "interval = auto needs a hardware profile: set [policy-tide] profile"},
        {"interval=auto profile=/nonexistent/p.ini", "profile /nonexistent/p.ini: cannot open"},
    };
    for (size_t i = 0; i < sizeof bad_opts / sizeof bad_opts[0]; i++) {
        pf_log_capture();
        int rc = pf_open(&f, "policy-tide", bad_opts[i].opts, 1, 8, 2);
        pf_log_release();
        CHECK(rc == TIDE_E_CONFIG || rc == TIDE_E_NOTFOUND);
        CHECK_CONTAINS(pf_log_text(), bad_opts[i].msg);
        pf_close(&f);
    }

    static const struct {
        int layers, experts, budget;
        const char *msg;
    } bad[] = {
        {1, 8, 9, "policy-tide: budget = 9 experts per layer is out of range: must be 0..8"},
        {1, 8, -1, "policy-tide: budget = -1 experts per layer is out of range: must be 0..8"},
        {1, 0, 0, "policy-tide: n_experts = 0 is out of range"},
        {-1, 8, 2, "policy-tide: n_moe_layers = -1 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pf_log_capture();
        CHECK_EQ_INT(pf_open(&f, "policy-tide", NULL, bad[i].layers, bad[i].experts, bad[i].budget),
                     TIDE_E_INVAL);
        pf_log_release();
        CHECK_CONTAINS(pf_log_text(), bad[i].msg);
        pf_close(&f);
    }

    /* plan() for a layer the model does not have, and a layer over budget. */
    if (PF_OPEN(&f, "policy-tide", "interval=1 first_block_every_step=false", 1, 8, 2)) {
        struct tide_plan plan = {.promote = f.promote, .evict = f.evict, .place = f.place};
        struct tide_policy_view v = {.layer = 1, .counts = f.counts, .resident = f.resident};
        pf_log_capture();
        CHECK_EQ_INT(f.ops->plan(f.p, &v, &plan), TIDE_E_INVAL);
        CHECK_CONTAINS(pf_log_text(),
                       "policy-tide: plan() for MoE layer 1, but the model has 1 MoE layers");
        v.layer = 0;
        f.resident[5] = 1;
        CHECK_EQ_INT(f.ops->plan(f.p, &v, &plan), TIDE_E_INVAL);
        CHECK_CONTAINS(pf_log_text(), "MoE layer 0 holds 3 resident experts, more than the "
                                      "budget of 2");
        pf_log_release();
    }
    pf_close(&f);
}

/* initial = popular reads the routing-count file. */
static void test_initial_popular(void)
{
    char path[] = "/tmp/tide-policy-tide-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    FILE *fp = fdopen(fd, "w");
    fputs("# layer expert count\n0 6 10\n0 3 2\n1 7 1\n", fp);
    fclose(fp);
    struct pf f;
    char opts[128];
    snprintf(opts, sizeof opts, "initial=popular counts_file=%s", path);
    CHECK(PF_OPEN(&f, "policy-tide", opts, 2, 8, 2));
    CHECK_STR(pf_residents(&f, 0), "3 6");
    CHECK_STR(pf_residents(&f, 1), "0 7");
    pf_close(&f);
    remove(path);
}

/* A profile for the fixture's experts (hidden 2048 x inter 512, serial)
 * whose promotions (6 MiB at 1 MB/s) cost far more than any host compute
 * they could save: the fewer refreshes, the cheaper. */
static bool auto_profile(char *path, size_t len)
{
    snprintf(path, len, "/tmp/tide-policy-tide-prof-XXXXXX");
    int fd = mkstemp(path);
    FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!fp)
        return false;
    fputs("[profile]\nname = dear-copies\n[transfer]\nh2d_gbps = 0.001\nd2h_gbps = 4\n"
          "latency_us = 0\noverlap = false\n[expert]\nhidden = 2048\ninter = 512\n"
          "[device]\nrows = 1, 32\nus = 1, 2\n[host]\nrows = 1, 32\nus = 10, 40\n",
          fp);
    return fclose(fp) == 0;
}

/* One block of `steps` steps on layer 0 of a 1-layer model with budget 1:
 * step 0 routes everything to expert 1, each later step to one of experts
 * 2..7 in turn, so every refresh after step 0 promotes. Returns the later
 * steps that promoted, as "s s ..." ("" when only step 0 refreshed). */
static const char *auto_block(struct pf *f, int block, bool first, int steps, char *out, size_t len)
{
    out[0] = 0;
    pf_block(f, block, first);
    for (int s = 0; s < steps; s++) {
        char counts[16];
        snprintf(counts, sizeof counts, "%d:5", s ? 2 + s % 6 : 1);
        const char *t = pf_plan(f, 0, s, counts);
        size_t n = strlen(out);
        if (s && strncmp(t, "P[]", 3))
            snprintf(out + n, len - n, "%s%d", n ? " " : "", s);
    }
    return out;
}

/* interval = auto over blocks of different lengths, some longer than 32
 * steps: with promotions dear, refreshing at step 0 only is cheapest, so
 * the solver picks an interval at least as long as every block of the
 * window (ties go to the longest considered): beyond 32. An explicit
 * auto_max still caps it; the shape's max_steps (the decoder's bound)
 * raises the default top. */
static void test_auto_long_blocks(void)
{
    char prof[64];
    CHECK(auto_profile(prof, sizeof prof));
    static const struct {
        const char *auto_max;
        int max_steps;
        const char *want_b2, *want_b3; /* the logs of the choices before blocks 2 and 3 */
        bool step0_only;               /* block 3 refreshes at step 0 only */
    } cases[] = {
        {"0", 0, "of 40,48 steps; intervals 1..48): interval 48,",
         "of 40,48,20 steps; intervals 1..48): interval 48,", true},
        {"0", 80, "of 40,48 steps; intervals 1..80): interval 80,",
         "of 40,48,20 steps; intervals 1..80): interval 80,", true},
        {"100", 0, "of 40,48 steps; intervals 1..100): interval 100,",
         "of 40,48,20 steps; intervals 1..100): interval 100,", true},
        {"32", 0, "of 40,48 steps; intervals 1..32): interval ",
         "of 40,48,20 steps; intervals 1..32): interval ", false},
    };
    tide_log_set_level(TIDE_LOG_INFO);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct pf f;
        char opts[256], got[512] = "";
        const int failures = test_failures;
        snprintf(opts, sizeof opts,
                 "interval=auto profile=%s auto_max=%s auto_start=1 auto_window=4 "
                 "first_block_every_step=false",
                 prof, cases[i].auto_max);
        pf_log_capture();
        int rc = pf_open_costs(&f, "policy-tide", opts, 1, 8, 1, NULL, cases[i].max_steps);
        if (rc == TIDE_OK) {
            /* auto_start = 1 before any block was seen: every step refreshes. */
            CHECK_STR(auto_block(&f, 0, true, 40, got, sizeof got),
                      "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 "
                      "28 29 30 31 32 33 34 35 36 37 38 39");
            auto_block(&f, 1, false, 48, got, sizeof got);
            auto_block(&f, 2, false, 20, got, sizeof got);
            auto_block(&f, 3, false, 48, got, sizeof got);
        }
        pf_log_release();
        CHECK_EQ_INT(rc, TIDE_OK);
        CHECK_CONTAINS(pf_log_text(), cases[i].want_b2);
        CHECK_CONTAINS(pf_log_text(), cases[i].want_b3);
        if (cases[i].step0_only) {
            CHECK_STR(got, "");
        } else {
            /* Capped at 32: block 3 (48 steps) refreshes again at the chosen interval. */
            const char *at = strstr(pf_log_text(), cases[i].want_b3);
            int chosen = at ? atoi(at + strlen(cases[i].want_b3)) : 0;
            CHECK(chosen >= 1 && chosen <= 32);
            CHECK_EQ_INT(atoi(got), chosen); /* the first refresh after step 0 */
        }
        if (test_failures > failures)
            fprintf(stderr, "auto_max=%s max_steps=%d:\n%s", cases[i].auto_max, cases[i].max_steps,
                    pf_log_text());
        pf_close(&f);
    }
    remove(prof);
}

int main(void)
{
    TEST_RUN(test_descriptor);
    TEST_RUN(test_capped_demotion);
    TEST_RUN(test_target_order);
    TEST_RUN(test_free_slots);
    TEST_RUN(test_schedule);
    TEST_RUN(test_first_block_without_block_begin);
    TEST_RUN(test_budget_zero);
    TEST_RUN(test_budget_all);
    TEST_RUN(test_layers);
    TEST_RUN(test_prefetch);
    TEST_RUN(test_options_and_errors);
    TEST_RUN(test_initial_popular);
    TEST_RUN(test_auto_long_blocks);
    TEST_DONE();
}
