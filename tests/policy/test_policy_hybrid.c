/* policy-hybrid: the static core, the TIDE-style dynamic part and the
 * solver's choice of the split, step by step. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/status.h"

static void test_descriptor(void)
{
    struct pf f;
    CHECK_EQ_INT(pf_load(&f, "policy-hybrid"), TIDE_OK);
    CHECK(pf_desc_ok(&f, "policy-hybrid",
                     "core core_start window interval first_block_every_step balance initial "
                     "counts_file"));
    pf_close(&f);
}

static void test_bad_options(void)
{
    struct pf f;
    pf_log_capture();
    CHECK_EQ_INT(pf_open(&f, "policy-hybrid", NULL, 1, 8, 4), TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "core = auto needs the machine's modelled costs") != NULL);
    pf_close(&f);
    pf_log_capture();
    CHECK_EQ_INT(pf_open(&f, "policy-hybrid", "core=1.5", 1, 8, 4), TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "core = 1.5 is out of range") != NULL);
    pf_close(&f);
    pf_log_capture();
    CHECK_EQ_INT(pf_open(&f, "policy-hybrid", "core=0.5", 1, 8, 4), TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "interval = auto needs the machine's modelled costs") != NULL);
    pf_close(&f);
    pf_log_capture();
    CHECK_EQ_INT(pf_open(&f, "policy-hybrid", "core=0.5 interval=0", 1, 8, 4), TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "interval = 0 is out of range") != NULL);
    pf_close(&f);
}

/* core = 0.5 of B = 4, interval 1: the two most popular experts (by rows so far; at
 * first all 0, so the lowest ids) are the core for each block, two slots
 * follow each step's top counts outside it. */
static void test_fixed_core(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-hybrid", "core=0.5 interval=1", 1, 8, 4)) {
        pf_block(&f, 0, true);
        /* Core {0, 1}; dynamic target {4, 5}; 2 and 3 are demoted in id order. */
        CHECK_STR(pf_plan(&f, 0, 0, "4:3 5:2 6:1"), "P[4<2 5<3] D[4 5] H[6]");
        pf_block(&f, 1, false);
        /* Core {4, 5} now; dynamic {7, 0}: only 7 moves, evicting 1. */
        CHECK_STR(pf_plan(&f, 0, 0, "0:1 7:2"), "P[7<1] D[0 7] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "2:5"), "P[2<0] D[2] H[]");
        /* Idle core members stay; the stale dynamic residents go in id order. */
        CHECK_STR(pf_plan(&f, 0, 2, "4:1 6:1"), "P[6<2] D[4 6] H[]");
        CHECK_STR(pf_residents(&f, 0), "4 5 6 7");
    }
    pf_close(&f);
    /* core = 0 is policy-tide's rule at interval 1. */
    if (PF_OPEN(&f, "policy-hybrid", "core=0 interval=2 first_block_every_step=false", 1, 8, 2)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "5:2 6:1"), "P[5<0 6<1] D[5 6] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "1:4"), "P[] D[] H[1]");
        CHECK_STR(pf_plan(&f, 0, 2, "1:4"), "P[1<5] D[1] H[]");
    }
    pf_close(&f);
}

/* core = auto. Experts 6 and 7 carry 3 rows on alternate steps, a 1-row
 * expert rides along; B = 2. Serial costs: device 10 us, host 50 + 10/row,
 * promotion 100 us. Refreshing every step (core 0) promotes twice a step
 * (220 us a step); a core of 2 never moves (6/7 on the device, the 1-row
 * expert on the host, 70 us). The first block runs with core_start = 0; the
 * solver then replays it: core 2 (the block's own start residency, 140 us
 * a step) beats core 1 (170) and core 0 (220), and the core becomes the two
 * most popular experts, 6 and 7. */
static void test_solver(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, false, 10, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(pf_open_costs(&f, "policy-hybrid", NULL, 1, 8, 2, &pc.c, 4), __FILE__,
                     __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "6:3 2:1"), "P[6<0 2<1] D[2 6] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "7:3 3:1"), "P[7<2 3<6] D[3 7] H[]");
        CHECK_STR(pf_plan(&f, 0, 2, "6:3 2:1"), "P[6<3 2<7] D[2 6] H[]");
        CHECK_STR(pf_plan(&f, 0, 3, "7:3 3:1"), "P[7<2 3<6] D[3 7] H[]");
        pf_block(&f, 1, false);
        CHECK_STR(pf_plan(&f, 0, 0, "6:3 2:1"), "P[6<3] D[6] H[2]");
        CHECK_STR(pf_plan(&f, 0, 1, "7:3 3:1"), "P[] D[7] H[3]");
        CHECK_STR(pf_plan(&f, 0, 2, "6:3 4:1"), "P[] D[6] H[4]");
    }
    pf_close(&f);
}

/* With overlapped costs the residents are balanced like policy-cost's. */
static void test_balance(void)
{
    struct tide_polcheck_costs pc;
    tide_polcheck_costs_init(&pc, true, 30, 50, 10, 100);
    struct pf f;
    if (pf_expect_ok(pf_open_costs(&f, "policy-hybrid", "core=1", 1, 8, 4, &pc.c, 32), __FILE__,
                     __LINE__, &test_checks, &test_failures)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:3 1:1 2:2 3:1"), "P[] D[0 2 3] H[1]");
    }
    pf_close(&f);
}

int main(void)
{
    TEST_RUN(test_descriptor);
    TEST_RUN(test_bad_options);
    TEST_RUN(test_fixed_core);
    TEST_RUN(test_solver);
    TEST_RUN(test_balance);
    TEST_DONE();
}
