/* policy-cost: the rent-or-buy decisions and the balanced placement, step by
 * step, on hand-computed costs. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/status.h"

#define COST_OPTS "initial counts_file alpha carry memory hysteresis persistence balance"

static void test_descriptor(void)
{
    struct pf f;
    CHECK_EQ_INT(pf_load(&f, "policy-cost"), TIDE_OK);
    CHECK(pf_desc_ok(&f, "policy-cost", COST_OPTS));
    pf_close(&f);
}

/* Without the machine's costs there is nothing to weigh: create() refuses,
 * naming the option that provides them. */
static void test_needs_costs(void)
{
    struct pf f;
    pf_log_capture();
    CHECK_EQ_INT(pf_open(&f, "policy-cost", NULL, 1, 8, 2), TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "policy-cost: needs the machine's modelled costs") != NULL);
    CHECK(strstr(pf_log_text(), "[policy] profile") != NULL);
    pf_close(&f);
    /* Costs for another expert size are refused too. */
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, false, 10, 50, 10, 100);
    pc.c.expert_bytes = 12345;
    pf_log_capture();
    CHECK_EQ_INT(pf_open_costs(&f, "policy-cost", NULL, 1, 8, 2, &pc.c, 4), TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "costs are for experts of 12345 bytes") != NULL);
    pf_close(&f);
}

/* Serial costs: device 10 us, host 50 + 10/row, a promotion 100 us. With
 * alpha = 1 the estimate is the last step's count; 4 steps per block are
 * expected (max_steps) until a block has been seen.
 * Buying expert 2 (1 row) at step 0: now 60 -> 110 (-50), then 50 saved at
 * each of the 3 remaining steps (+150): it pays. At step 3 only the step
 * itself remains and at least one more is assumed: -50 + 50 = 0 does not
 * pay, so the expert is rented (runs on the host). */
static void test_rent_or_buy(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, false, 10, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(pf_open_costs(&f, "policy-cost", "alpha=1 carry=0 hysteresis=0 persistence=1",
                                   1, 8, 2, &pc.c, 4),
                     __FILE__, __LINE__, &test_checks, &test_failures)) {
        CHECK_STR(pf_residents(&f, 0), "0 1");
        pf_block(&f, 0, true);
        /* Both residents idle: the lower id is evicted first. */
        CHECK_STR(pf_plan(&f, 0, 0, "2:1"), "P[2<0] D[2] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "2:1 1:1"), "P[] D[1 2] H[]");
        /* Step 2: one step remains after this one: -50 + 50 = 0, rented. */
        CHECK_STR(pf_plan(&f, 0, 2, "5:1"), "P[] D[] H[5]");
        /* 3 rows: now 80 -> 110 (-30), then 70 saved at the one step assumed: it pays. */
        CHECK_STR(pf_plan(&f, 0, 3, "5:3"), "P[5<1] D[5] H[]");
        CHECK_STR(pf_residents(&f, 0), "2 5");
    }
    pf_close(&f);
}

/* A resident estimated busier than the candidate is never evicted. */
static void test_keeps_busier_residents(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, false, 10, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(pf_open_costs(&f, "policy-cost",
                                   "alpha=0.5 carry=0 hysteresis=0 persistence=1", 1, 8, 2, &pc.c,
                                   32),
                     __FILE__, __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:4 1:4"), "P[] D[0 1] H[]");
        /* Estimates: 0 and 1 at 1 row (one step idle), 7 at 0.5: kept on the host. */
        CHECK_STR(pf_plan(&f, 0, 1, "7:1"), "P[] D[] H[7]");
        /* 7 is now at 1.75 rows, above 0 and 1 (0.5 each): 0 goes first. */
        CHECK_STR(pf_plan(&f, 0, 2, "7:3"), "P[7<0] D[7] H[]");
    }
    pf_close(&f);
}

/* Hysteresis: a promotion must save `hysteresis` promotions' worth beyond
 * its cost. One row saves 50 a step (3 steps: 150 - 50 now = 100), which is
 * not more than 1 x 100; two rows save 60 (180 - 40 = 140), which is. */
static void test_hysteresis(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, false, 10, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(pf_open_costs(&f, "policy-cost", "alpha=1 carry=0 hysteresis=1 persistence=1",
                                   1, 8, 2, &pc.c, 4),
                     __FILE__, __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "4:1"), "P[] D[] H[4]");
        CHECK_STR(pf_plan(&f, 0, 0, "4:2"), "P[4<0] D[4] H[]");
    }
    pf_close(&f);
}

/* Overlapped costs with a slow device (30 us per expert, host 50 + 10/row):
 * four active residents take 120 us on the device; the host path running
 * the 1-row expert of lowest id (60 us) in parallel makes it 90, a second
 * one would make the host path 120. */
static void test_balance(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, true, 30, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(pf_open_costs(&f, "policy-cost", NULL, 1, 8, 4, &pc.c, 32), __FILE__, __LINE__,
                     &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:3 1:1 2:2 3:1"), "P[] D[0 2 3] H[1]");
        /* One active resident: the device is not the bottleneck. */
        CHECK_STR(pf_plan(&f, 0, 1, "0:3"), "P[] D[0] H[]");
    }
    pf_close(&f);
    if (pf_expect_ok(pf_open_costs(&f, "policy-cost", "balance=false", 1, 8, 4, &pc.c, 32),
                     __FILE__, __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:3 1:1 2:2 3:1"), "P[] D[0 1 2 3] H[]");
    }
    pf_close(&f);
}

/* The expected steps per block follow the blocks seen. A 1-row expert
 * costs 50 now and saves 50 at each later step: at step 1 of the first
 * block (prior: 4 steps, so 2 remain) it pays; after two blocks of two
 * steps the mean is (4 + 2 + 2) / 3 = 2.67, at step 1 at most one step is
 * left, and the same expert is rented. */
static void test_learns_block_length(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, false, 10, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(pf_open_costs(&f, "policy-cost", "alpha=1 carry=0 hysteresis=0 persistence=1",
                                   1, 8, 2, &pc.c, 4),
                     __FILE__, __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:1 1:1"), "P[] D[0 1] H[]");
        /* Prior: 4 steps, so at step 1 two remain: 1 row pays (-50 + 100). */
        CHECK_STR(pf_plan(&f, 0, 1, "6:1"), "P[6<0] D[6] H[]");
        pf_block(&f, 1, false);
        CHECK_STR(pf_plan(&f, 0, 0, "6:1 1:1"), "P[] D[1 6] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "6:1 1:1"), "P[] D[1 6] H[]");
        pf_block(&f, 2, false);
        /* Mean (4 + 2 + 2) / 3 = 2.67 steps: at step 1, 0.67 -> 1 remains: rented. */
        CHECK_STR(pf_plan(&f, 0, 0, "6:1 1:1"), "P[] D[1 6] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "5:1"), "P[] D[] H[5]");
    }
    pf_close(&f);
}

/* Later steps' savings count only as far as activity persists: when the
 * expert active at one step is never the one active at the next, the
 * measured persistence is 0 and nothing is bought after the first step
 * (which has no measurement yet); persistence = 1 buys every time. */
static void test_persistence(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, false, 10, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(
            pf_open_costs(&f, "policy-cost", "alpha=1 carry=0 hysteresis=0", 1, 8, 2, &pc.c, 32),
            __FILE__, __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "2:1"), "P[2<0] D[2] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "3:1"), "P[] D[] H[3]");
        CHECK_STR(pf_plan(&f, 0, 2, "4:1"), "P[] D[] H[4]");
    }
    pf_close(&f);
    if (pf_expect_ok(pf_open_costs(&f, "policy-cost", "alpha=1 carry=0 hysteresis=0 persistence=1",
                                   1, 8, 2, &pc.c, 32),
                     __FILE__, __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "2:1"), "P[2<0] D[2] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "3:1"), "P[3<1] D[3] H[]");
    }
    pf_close(&f);
    pf_log_capture();
    CHECK_EQ_INT(pf_open_costs(&f, "policy-cost", "persistence=0", 1, 8, 2, &pc.c, 32),
                 TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "persistence = 0 is out of range") != NULL);
    pf_close(&f);
}

int main(void)
{
    TEST_RUN(test_descriptor);
    TEST_RUN(test_needs_costs);
    TEST_RUN(test_rent_or_buy);
    TEST_RUN(test_keeps_busier_residents);
    TEST_RUN(test_hysteresis);
    TEST_RUN(test_balance);
    TEST_RUN(test_learns_block_length);
    TEST_RUN(test_persistence);
    TEST_DONE();
}
