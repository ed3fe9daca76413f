/* policy-lfu: decayed frequencies decide evictions; full swap otherwise. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/status.h"

static void test_descriptor(void)
{
    struct pf f;
    CHECK_EQ_INT(pf_load(&f, "policy-lfu"), TIDE_OK);
    CHECK(pf_desc_ok(&f, "policy-lfu", "initial counts_file decay score"));
    pf_close(&f);
}

/* decay = 0.5, score = rows: each step halves every score, then adds the
 * step's rows. The evicted resident is the idle one of lowest score. */
static void test_decayed_eviction(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lfu", "decay=0.5", 1, 8, 3)) {
        CHECK_STR(pf_residents(&f, 0), "0 1 2");
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:4 1:1 2:2"), "P[] D[0 1 2] H[]");
        /* Scores 2, 0.5, 1 (decayed) and 5 at 1: 1 goes. */
        CHECK_STR(pf_plan(&f, 0, 1, "5:1"), "P[5<1] D[5] H[]");
        /* Scores 0: 1, 2: 0.5, 5: 0.5 (5 idle now) -> 2 and 5 tie, 2 goes. */
        CHECK_STR(pf_plan(&f, 0, 2, "6:3"), "P[6<2] D[6] H[]");
        /* 0: 0.5, 5: 0.25, 6: 1.5: 5 goes although it was used after 0. */
        CHECK_STR(pf_plan(&f, 0, 3, "7:1"), "P[7<5] D[7] H[]");
        CHECK_STR(pf_residents(&f, 0), "0 6 7");
    }
    pf_close(&f);
}

/* score = hits counts uses, not rows; decay = 1 is plain LFU. */
static void test_hits_no_decay(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lfu", "decay=1 score=hits", 1, 8, 2)) {
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:9"), "P[] D[0] H[]");
        CHECK_STR(pf_plan(&f, 0, 1, "1:1"), "P[] D[1] H[]");
        CHECK_STR(pf_plan(&f, 0, 2, "1:1"), "P[] D[1] H[]");
        /* 0 used once (9 rows), 1 twice: 0 goes. */
        CHECK_STR(pf_plan(&f, 0, 3, "4:1"), "P[4<0] D[4] H[]");
    }
    pf_close(&f);
}

/* Active residents stay; misses beyond the idle residents run on the host,
 * busiest first; free slots are used first. */
static void test_full_swap(void)
{
    struct pf f;
    if (PF_OPEN(&f, "policy-lfu", NULL, 1, 8, 3)) {
        f.resident[2] = 0;
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "0:1 5:2 6:3 7:1"), "P[6<- 5<1] D[0 5 6] H[7]");
        CHECK_STR(pf_plan(&f, 0, 1, "0:1 5:1 6:1 1:5"), "P[] D[0 5 6] H[1]");
    }
    pf_close(&f);
    if (PF_OPEN(&f, "policy-lfu", NULL, 1, 8, 0)) {
        CHECK_STR(pf_plan(&f, 0, 0, "0:1 3:4"), "P[] D[] H[0 3]");
    }
    pf_close(&f);
}

int main(void)
{
    TEST_RUN(test_descriptor);
    TEST_RUN(test_decayed_eviction);
    TEST_RUN(test_hits_no_decay);
    TEST_RUN(test_full_swap);
    TEST_DONE();
}
