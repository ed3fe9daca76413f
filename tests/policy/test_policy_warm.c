/* policy-warm: the library (from a routing trace and learned online), the
 * nearest-prompt prediction and its effect on the first block's decisions.
 *
 * Costs (serial): device 10 us, host 50 + 10/row, promotion 100 us; two
 * steps per block are expected, so at step 0 one step remains. A 1-row
 * expert estimated at r rows per step is bought when -50 (now) + host(r) -
 * 10 (the next step) > 0: at 2.5 rows (a warm start of 4 rows, alpha 0.5)
 * it is (+15), at 0.5 rows (no prior) it is not (-25). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/status.h"
#include "tide/trace_write.h"

#define WARM_OPTS                                                                                  \
    "library learn neighbours max_prompts initial counts_file alpha carry memory hysteresis "      \
    "persistence balance"

static char tmpdir[256];

static const char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* A library trace: prompt 0 (vector e0) routes expert 5 in its first block
 * (4 rows a step; its second block, expert 1, does not count), prompt 1
 * (vector e1) routes expert 6. experts = 8 (or 9 for a foreign shape). */
static int write_library(const char *path, uint32_t experts, bool vectors)
{
    const struct tide_trace_header h = {.n_layers = 1,
                                        .n_experts = experts,
                                        .top_k = 1,
                                        .hidden = 4,
                                        .inter = 4,
                                        .expert_bytes = 96,
                                        .block_length = 4,
                                        .steps = 2,
                                        .model = "test"};
    struct tide_trace_writer *w;
    int rc = tide_trace_writer_open(path, false, true, &h, &w);
    if (rc != TIDE_OK)
        return rc;
    const float e0[4] = {1, 0, 0, 0}, e1[4] = {0, 1, 0, 0};
    const int32_t five[4] = {5, 5, 5, 5}, one[4] = {1, 1, 1, 1}, six[4] = {6, 6, 6, 6};
    tide_trace_prompt(w, 0, 4);
    if (vectors)
        tide_trace_prompt_vector(w, e0, 4);
    tide_trace_block(w, 0, true);
    for (int s = 0; s < 2; s++) {
        tide_trace_step(w, s);
        tide_trace_route(w, TIDE_TRACE_STEP, 0, 4, five);
    }
    tide_trace_route(w, TIDE_TRACE_KV, 0, 4, one);
    tide_trace_block(w, 1, false);
    tide_trace_step(w, 0);
    tide_trace_route(w, TIDE_TRACE_STEP, 0, 4, one);
    tide_trace_prompt(w, 1, 4);
    if (vectors)
        tide_trace_prompt_vector(w, e1, 4);
    tide_trace_block(w, 0, true);
    tide_trace_step(w, 0);
    rc = tide_trace_route(w, TIDE_TRACE_STEP, 0, 4, six);
    return tide_trace_writer_close(w, rc == TIDE_OK);
}

static void test_descriptor(void)
{
    struct pf f;
    CHECK_EQ_INT(pf_load(&f, "policy-warm"), TIDE_OK);
    CHECK(pf_desc_ok(&f, "policy-warm", WARM_OPTS));
    pf_close(&f);
}

static int open_warm(struct pf *f, struct tide_polcheck_costs *pc, const char *opts)
{
    tide_polcheck_costs_init(pc, false, 10, 50, 10, 100);
    char all[700];
    snprintf(all, sizeof all, "hysteresis=0 persistence=1 %s", opts);
    return pf_open_costs(f, "policy-warm", all, 1, 8, 2, &pc->c, 2);
}

/* From a trace: a prompt near prompt 0's vector starts expecting expert 5
 * (bought at its first row), one near prompt 1's expects 6 (5 is rented). */
static void test_library_from_trace(void)
{
    const char *lib = tpath("lib.trc");
    CHECK_EQ_INT(write_library(lib, 8, true), TIDE_OK);
    char opts[600];
    snprintf(opts, sizeof opts, "library=%s neighbours=1 learn=false alpha=0.5 carry=0", lib);
    struct pf f;
    struct tide_polcheck_costs pc;
    pf_log_capture();
    int rc = open_warm(&f, &pc, opts);
    pf_log_release();
    CHECK_EQ_INT(rc, TIDE_OK);
    CHECK(strstr(pf_log_text(), "library: 2 prompts from") != NULL);
    if (rc == TIDE_OK) {
        const float near0[4] = {0.9f, 0.1f, 0, 0}, near1[4] = {0.1f, 0.9f, 0, 0};
        pf_prompt(&f, 4, near0, 4);
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "5:1"), "P[5<0] D[5] H[]");
        pf_prompt(&f, 4, near1, 4);
        pf_block(&f, 0, true);
        /* Expected: 6 at 4 rows, 5 at none: 5 is rented, 6 bought (evicting 1). */
        CHECK_STR(pf_plan(&f, 0, 0, "7:1"), "P[] D[] H[7]");
        CHECK_STR(pf_plan(&f, 0, 0, "6:1"), "P[6<1] D[6] H[]");
        /* Only the first generated block is warm-started. */
        pf_block(&f, 1, false);
        CHECK_STR(pf_plan(&f, 0, 0, "4:1"), "P[] D[] H[4]");
    }
    pf_close(&f);
    /* No vector (a model or trace without one): no warm start, like policy-cost. */
    if (open_warm(&f, &pc, opts) == TIDE_OK) {
        pf_prompt(&f, 4, NULL, 0);
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "5:1"), "P[] D[] H[5]");
    }
    pf_close(&f);
    /* Only similar prompts count: an orthogonal vector gets no warm start. */
    if (open_warm(&f, &pc, opts) == TIDE_OK) {
        const float other[4] = {0, 0, 1, 0};
        pf_prompt(&f, 4, other, 4);
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "5:1"), "P[] D[] H[5]");
    }
    pf_close(&f);
}

/* Learned online. Prompt A's first block routes expert 5, its later blocks
 * 6 and 7 (memory = 1: the long-term means forget 5 within a few steps).
 * With 6 and 7 resident, a prompt with another vector (C) starts from those
 * means, where 6 and 7 are busier than 5: 5 is rented. A prompt with A's
 * vector then starts from A's first block (5 at 4 rows, 6 and 7 at none)
 * and buys 5 at its first row, unless learn = false. Returns that plan. */
static const char *run_learn(struct pf *f, bool learn, char *out, size_t len)
{
    struct tide_polcheck_costs pc;
    char opts[200];
    snprintf(opts, sizeof opts, "neighbours=1 learn=%s alpha=0.5 carry=0 memory=1",
             learn ? "true" : "false");
    snprintf(out, len, "could not open");
    if (open_warm(f, &pc, opts) != TIDE_OK)
        return out;
    const float a[4] = {0, 0, 2, 0}, c[4] = {1, 1, 0, 0};
    pf_prompt(f, 4, a, 4);
    pf_block(f, 0, true);
    pf_plan(f, 0, 0, "5:4");
    pf_plan(f, 0, 1, "5:4");
    for (int b = 1; b < 3; b++) {
        pf_block(f, b, false);
        pf_plan(f, 0, 0, "6:4 7:4");
        pf_plan(f, 0, 1, "6:4 7:4");
    }
    memset(f->resident, 0, 8);
    f->resident[6] = f->resident[7] = 1;
    pf_prompt(f, 4, c, 4);
    pf_block(f, 0, true);
    CHECK_STR(pf_plan(f, 0, 0, "5:1"), "P[] D[] H[5]");
    pf_prompt(f, 4, a, 4);
    pf_block(f, 0, true);
    snprintf(out, len, "%s", pf_plan(f, 0, 0, "5:1"));
    return out;
}

static void test_learns(void)
{
    struct pf f;
    char buf[256];
    CHECK_STR(run_learn(&f, true, buf, sizeof buf), "P[5<6] D[5] H[]");
    pf_close(&f);
    CHECK_STR(run_learn(&f, false, buf, sizeof buf), "P[] D[] H[5]");
    pf_close(&f);
}

static void test_bad_library(void)
{
    struct pf f;
    struct tide_polcheck_costs pc;
    char opts[600];
    /* Another model's trace. */
    const char *wrong = tpath("wrong.trc");
    CHECK_EQ_INT(write_library(wrong, 9, true), TIDE_OK);
    snprintf(opts, sizeof opts, "library=%s", wrong);
    pf_log_capture();
    CHECK_EQ_INT(open_warm(&f, &pc, opts), TIDE_E_CONFIG);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "records 1 MoE layers x 9 experts, but the model has 1 x 8") !=
          NULL);
    pf_close(&f);
    /* A missing file. */
    snprintf(opts, sizeof opts, "library=%s", tpath("missing.trc"));
    pf_log_capture();
    CHECK_EQ_INT(open_warm(&f, &pc, opts), TIDE_E_NOTFOUND);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "missing.trc") != NULL);
    pf_close(&f);
    /* A trace without prompt vectors is a warning, not an error. */
    const char *novec = tpath("novec.trc");
    CHECK_EQ_INT(write_library(novec, 8, false), TIDE_OK);
    snprintf(opts, sizeof opts, "library=%s", novec);
    pf_log_capture();
    CHECK_EQ_INT(open_warm(&f, &pc, opts), TIDE_OK);
    pf_log_release();
    CHECK(strstr(pf_log_text(), "has no prompt with a prompt vector (2 prompts") != NULL);
    pf_close(&f);
    /* A vector of another length than the library's is ignored, with a warning. */
    const char *lib = tpath("lib2.trc");
    CHECK_EQ_INT(write_library(lib, 8, true), TIDE_OK);
    snprintf(opts, sizeof opts, "library=%s neighbours=1 learn=false", lib);
    if (open_warm(&f, &pc, opts) == TIDE_OK) {
        const float v[3] = {1, 0, 0};
        pf_log_capture();
        pf_prompt(&f, 4, v, 3);
        pf_log_release();
        CHECK(strstr(pf_log_text(), "a prompt vector of 3 entries, but the library's have 4") !=
              NULL);
        pf_block(&f, 0, true);
        CHECK_STR(pf_plan(&f, 0, 0, "5:1"), "P[] D[] H[5]");
    }
    pf_close(&f);
}

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/tide-warm-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_descriptor);
    TEST_RUN(test_library_from_trace);
    TEST_RUN(test_learns);
    TEST_RUN(test_bad_library);
    const char *names[] = {"lib.trc", "wrong.trc", "novec.trc", "lib2.trc"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        remove(tpath(names[i]));
    rmdir(tmpdir);
    TEST_DONE();
}
