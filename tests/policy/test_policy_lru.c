/* policy-lru: exact promotions, evictions and placements, step by step. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/status.h"

static void test_descriptor(void)
{
    struct pf f;
    CHECK_EQ_INT(pf_load(&f, "policy-lru"), TIDE_OK);
    CHECK(pf_desc_ok(&f, "policy-lru", NULL));
    pf_close(&f);
}

/* Evictions follow recency across steps and blocks; ties go to the lower id. */
static void test_eviction_order(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lru", NULL, 1, 8, 3)) {
        CHECK_STR(pf_residents(&f, 0), "0 1 2");
        pf_block(&f, 0, true);
        /* 1 and 2 are both unused since the start: the lower id goes first. */
        CHECK_STR(pf_plan(&f, 0, 0, "0:1 3:2"), "P[3<1] D[0 3] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "4:1"), "P[4<2] D[4] H[]");
        /* 0 was used at tick 1, 3 at tick 1, 4 at tick 2; 0 is active now. */
        CHECK_STR(pf_plan(&f, 0, 2, "5:1 0:1"), "P[5<3] D[0 5] H[]");
        pf_block(&f, 1, false);
        CHECK_STR(pf_plan(&f, 0, 0, "6:1"), "P[6<4] D[6] H[]");
        CHECK_STR(pf_residents(&f, 0), "0 5 6");
        /* Hits move nothing and refresh recency: 0 is now newer than 5 and 6. */
        CHECK_STR(pf_plan(&f, 0, 1, "0:2"), "P[] D[0] H[]");
        CHECK_STR(pf_plan(&f, 0, 2, "1:1"), "P[1<5] D[1] H[]");
        CHECK_STR(pf_plan(&f, 0, 3, "2:1"), "P[2<6] D[2] H[]");
        CHECK_STR(pf_plan(&f, 0, 4, "3:1"), "P[3<0] D[3] H[]");
    }
    pf_close(&f);
}

/* Active residents are never evicted; with more active experts than slots,
 * promotions go by count (ties: lower id) and the rest run on the host. */
static void test_in_use_and_overflow(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lru", NULL, 1, 8, 3)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:5 1:5 2:5 7:1"), "P[] D[0 1 2] H[7]");
        /* 1 and 2 are idle: 4 (count 9) takes one, then 5 and 6 tie at 8 and 5,
         * the lower id, takes the other; 6 finds no idle resident. */
        CHECK_STR(pf_plan(&f, 0, 1, "0:1 4:9 6:8 5:8"), "P[4<1 5<2] D[0 4 5] H[6]");
        CHECK_STR(pf_residents(&f, 0), "0 4 5");
        /* Every resident active: nothing moves, misses run on the host. */
        CHECK_STR(pf_plan(&f, 0, 2, "0:1 4:1 5:1 1:9 2:9 3:9"), "P[] D[0 4 5] H[1 2 3]");
        /* All three idle: the highest counts win, evicting in LRU order. */
        CHECK_STR(pf_plan(&f, 0, 3, "1:1 2:3 3:2 6:2 7:1"), "P[2<0 3<4 6<5] D[2 3 6] H[1 7]");
    }
    pf_close(&f);
}

static void test_free_slots(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lru", NULL, 1, 8, 3)) {
        f.resident[0] = f.resident[2] = 0;
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "5:1 6:2 7:3"), "P[7<- 6<- 5<1] D[5 6 7] H[]");
    }
    pf_close(&f);
}

static void test_budget_edges(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lru", NULL, 2, 8, 0)) {
        CHECK_STR(pf_residents(&f, 1), "");
        CHECK_STR(pf_plan(&f, 1, 0, "0:1 3:4"), "P[] D[] H[0 3]");
    }
    pf_close(&f);
    if (PF_OPEN(&f, "policy-lru", NULL, 1, 4, 4)) {
        CHECK_STR(pf_plan(&f, 0, 0, "0:1 1:1 2:1 3:1"), "P[] D[0 1 2 3] H[]");
    }
    pf_close(&f);
}

/* Recency is kept per layer. */
static void test_layers(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lru", NULL, 2, 4, 2)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:1"), "P[] D[0] H[]");
        CHECK_STR(pf_plan(&f, 1, 0, "1:1"), "P[] D[1] H[]");
        /* Layer 0 evicts 1 (idle), layer 1 evicts 0 (idle). */
        CHECK_STR(pf_plan(&f, 0, 1, "2:1"), "P[2<1] D[2] H[]");
        CHECK_STR(pf_plan(&f, 1, 1, "2:1"), "P[2<0] D[2] H[]");
    }
    pf_close(&f);
}

int main(void)
{
    TEST_RUN(test_descriptor);
    TEST_RUN(test_eviction_order);
    TEST_RUN(test_in_use_and_overflow);
    TEST_RUN(test_free_slots);
    TEST_RUN(test_budget_edges);
    TEST_RUN(test_layers);
    TEST_DONE();
}
