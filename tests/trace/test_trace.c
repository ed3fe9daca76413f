/* Routing traces: the writer and reader round trip, appending, bad input
 * (truncated, foreign, other version, other shape), interrupted writes, the
 * simulator's tape, the similarity statistic and the calibrated synthesizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "sim/sim_test_util.h"
#include "sim.h"
#include "tide/log.h"
#include "tide/status.h"
#include "tide/trace_write.h"

static struct tide_trace_header header(uint32_t layers, uint32_t experts, uint32_t k)
{
    return (struct tide_trace_header){
        .n_layers = layers,
        .n_experts = experts,
        .top_k = k,
        .hidden = 64,
        .inter = 32,
        .expert_bytes = tide_expert_bytes(64, 32),
        .block_length = 4,
        .steps = 4,
        .threshold = 0.95,
        .model = "unit-test",
    };
}

/* A small trace: one prompt of 6 tokens (no prefill: 6 < block 4? no: one
 * prefill block), two blocks of two steps and a K/V pass, 2 layers, top-2 of
 * `experts` experts. Ids are (seed + t + 3*j + layer) % experts. */
static int write_small(const char *path, uint32_t experts, int seed, bool append)
{
    struct tide_trace_header h = header(2, experts, 2);
    struct tide_trace_writer *w;
    int rc = tide_trace_writer_open(path, append, false, &h, &w);
    if (rc != TIDE_OK)
        return rc;
    int32_t ids[8];
    rc = tide_trace_prompt(w, (uint32_t)seed, 6);
    for (uint32_t l = 0; l < 2 && rc == TIDE_OK; l++) {
        for (int i = 0; i < 8; i++)
            ids[i] = (int32_t)(((uint32_t)(seed + i / 2 + 3 * (i % 2)) + l) % experts);
        rc = tide_trace_route(w, TIDE_TRACE_PREFILL, l, 4, ids);
    }
    for (int b = 0; b < 2 && rc == TIDE_OK; b++) {
        rc = tide_trace_block(w, b, b == 0);
        for (int s = 0; s < 2 && rc == TIDE_OK; s++) {
            rc = tide_trace_step(w, s);
            for (uint32_t l = 0; l < 2 && rc == TIDE_OK; l++) {
                for (int i = 0; i < 8; i++)
                    ids[i] =
                        (int32_t)(((uint32_t)(seed + b + s * (i == 0) + i / 2 + 3 * (i % 2)) + l) %
                                  experts);
                rc = tide_trace_route(w, TIDE_TRACE_STEP, l, 4, ids);
            }
        }
        for (uint32_t l = 0; l < 2 && rc == TIDE_OK; l++)
            rc = tide_trace_route(w, TIDE_TRACE_KV, l, 4, ids);
    }
    int crc = tide_trace_writer_close(w, rc == TIDE_OK);
    return rc != TIDE_OK ? rc : crc;
}

static void test_round_trip(void)
{
    const uint32_t experts_cases[] = {16, 300}; /* u8 and u16 ids */
    for (int c = 0; c < 2; c++) {
        const uint32_t E = experts_cases[c];
        const char *path = tpath(c ? "rt16.trc" : "rt8.trc");
        CHECK_EQ_INT(write_small(path, E, 5, false), TIDE_OK);
        CHECK(access(tpath(c ? "rt16.trc.tmp" : "rt8.trc.tmp"), F_OK) != 0);
        struct tide_trace_reader *r;
        CHECK_EQ_INT(tide_trace_reader_open(path, &r), TIDE_OK);
        if (!r)
            continue;
        const struct tide_trace_header *h = tide_trace_reader_header(r);
        CHECK_EQ_INT(h->n_layers, 2);
        CHECK_EQ_INT(h->n_experts, E);
        CHECK_EQ_INT(h->top_k, 2);
        CHECK_EQ_INT(h->block_length, 4);
        CHECK(!strcmp(h->model, "unit-test"));
        struct tide_trace_record rec;
        int types[64], n = 0, got;
        int32_t first_ids[8] = {0};
        while ((got = tide_trace_reader_next(r, &rec)) == 1 && n < 64) {
            if (n == 1) /* the first routing record: prefill, layer 0 */
                memcpy(first_ids, rec.ids, sizeof first_ids);
            types[n++] = rec.type;
        }
        CHECK_EQ_INT(got, 0);
        /* prompt, 2 prefill, then 2 x (block, 2 x (step, 2 routes), 2 kv) */
        CHECK_EQ_INT(n, 1 + 2 + 2 * (1 + 2 * 3 + 2));
        CHECK_EQ_INT(types[0], TIDE_TREC_PROMPT);
        CHECK_EQ_INT(types[3], TIDE_TREC_BLOCK);
        CHECK_EQ_INT(types[4], TIDE_TREC_STEP);
        for (int i = 0; i < 8; i++)
            CHECK_EQ_INT(first_ids[i], (5 + i / 2 + 3 * (i % 2)) % E);
        tide_trace_reader_rewind(r);
        CHECK_EQ_INT(tide_trace_reader_next(r, &rec), 1);
        CHECK_EQ_INT(rec.type, TIDE_TREC_PROMPT);
        CHECK_EQ_INT(rec.prompt_id, 5);
        CHECK_EQ_INT(rec.prompt_len, 6);
        tide_trace_reader_close(r);
    }
}

static void test_append_and_refuse(void)
{
    const char *path = tpath("app.trc");
    CHECK_EQ_INT(write_small(path, 16, 1, false), TIDE_OK);
    /* An existing file is not replaced by a new writer. */
    capture();
    CHECK_EQ_INT(write_small(path, 16, 2, false), TIDE_E_CONFIG);
    release();
    CHECK_CONTAINS(logbuf, "exists; refusing to replace it");
    /* Appending a second prompt of the same shape. */
    CHECK_EQ_INT(write_small(path, 16, 2, true), TIDE_OK);
    struct tide_sim_trace *t = NULL;
    CHECK_EQ_INT(tide_sim_trace_load(path, &t), TIDE_OK);
    if (t) {
        CHECK_EQ_INT(t->prompts, 2);
        CHECK_EQ_INT(t->blocks, 4);
        CHECK_EQ_INT(t->steps, 8);
        tide_sim_trace_free(t);
    }
    /* Appending another shape is refused, naming both. */
    capture();
    CHECK_EQ_INT(write_small(path, 32, 3, true), TIDE_E_FORMAT);
    release();
    CHECK_CONTAINS(logbuf, "records a model of 2 MoE layers x 16 experts");
}

static void test_interrupted(void)
{
    const char *path = tpath("int.trc");
    struct tide_trace_header h = header(2, 16, 2);
    struct tide_trace_writer *w;
    CHECK_EQ_INT(tide_trace_writer_open(path, false, false, &h, &w), TIDE_OK);
    CHECK_EQ_INT(tide_trace_prompt(w, 0, 3), TIDE_OK);
    CHECK(access(tpath("int.trc.tmp"), F_OK) == 0);
    CHECK_EQ_INT(tide_trace_writer_close(w, false), TIDE_OK);
    CHECK(access(path, F_OK) != 0);
    CHECK(access(tpath("int.trc.tmp"), F_OK) != 0);
}

/* Copy the first n bytes of src into dst, optionally patching byte at. */
static void copy_cut(const char *src, const char *dst, long n, long at, int value)
{
    FILE *f = fopen(src, "rb"), *g = fopen(dst, "wb");
    for (long i = 0; f && g; i++) {
        int ch = fgetc(f);
        if (ch == EOF || (n >= 0 && i >= n))
            break;
        fputc(i == at ? value : ch, g);
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
}

static void test_bad_input(void)
{
    const char *good = tpath("good.trc");
    CHECK_EQ_INT(write_small(good, 16, 1, false), TIDE_OK);
    FILE *f = fopen(good, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    static const struct {
        const char *name;
        long cut, at;
        int value, rc;
        const char *msg;
    } cases[] = {
        {"trunc.trc", -3, -1, 0, TIDE_E_FORMAT, "truncated"},
        {"magic.trc", -1, 0, 'X', TIDE_E_FORMAT, "not a TIDE routing trace (bad magic)"},
        {"version.trc", -1, 8, 5, TIDE_E_FORMAT,
         "format version 5, this tide reads versions 1 to 4"},
        {"header.trc", 20, -1, 0, TIDE_E_FORMAT, "truncated header"},
        {"empty.trc", 0, -1, 0, TIDE_E_FORMAT, "the file is empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = tpath(cases[i].name);
        long cut = cases[i].cut == -3 ? size - 3 : cases[i].cut;
        copy_cut(good, p, cut, cases[i].at, cases[i].value);
        struct tide_sim_trace *t = NULL;
        capture();
        int rc = tide_sim_trace_load(p, &t);
        release();
        CHECK_EQ_INT(rc, cases[i].rc);
        CHECK_CONTAINS(logbuf, cases[i].msg);
        CHECK_CONTAINS(logbuf, p); /* the file is named */
        tide_sim_trace_free(t);
    }
    capture();
    struct tide_sim_trace *t = NULL;
    CHECK_EQ_INT(tide_sim_trace_load(tpath("missing.trc"), &t), TIDE_E_NOTFOUND);
    release();
    CHECK_CONTAINS(logbuf, "cannot open");
}

/* The tape: sparse counts, forward lists, phases, first block and tokens. */
static void test_tape(void)
{
    const char *path = tpath("tape.trc");
    CHECK_EQ_INT(write_small(path, 16, 0, false), TIDE_OK);
    struct tide_sim_trace *t = NULL;
    CHECK_EQ_INT(tide_sim_trace_load(path, &t), TIDE_OK);
    if (!t)
        return;
    CHECK_EQ_INT(t->assignments, (1 + 2 * 3) * 2 * 4 * 2);
    CHECK_EQ_INT(t->max_tokens, 4);
    /* Prompt of 6 in blocks of 4: the first block holds 2 prompt tokens. */
    CHECK_EQ_INT(t->tokens_generated, (4 - 2) + 4);
    CHECK_EQ_INT(t->n_fwd[0], 1 + 2 * 3);
    const struct tide_solver_fwd *f = t->fwd[0];
    CHECK_EQ_INT(f[0].phase, TIDE_TRACE_PREFILL);
    CHECK_EQ_INT(f[1].phase, TIDE_TRACE_STEP);
    CHECK_EQ_INT(f[1].step, 0);
    CHECK(f[1].first_block);
    CHECK_EQ_INT(f[2].step, 1);
    CHECK_EQ_INT(f[3].phase, TIDE_TRACE_KV);
    CHECK(!f[4].first_block);
    /* Prefill, layer 0, seed 0: ids (i/2 + 3*(i%2)) % 16 = 0 3 1 4 2 5 3 6. */
    const uint32_t want[16] = {[0] = 1, [1] = 1, [2] = 1, [3] = 2, [4] = 1, [5] = 1, [6] = 1};
    uint32_t got[16] = {0}, sum = 0;
    for (uint32_t a = 0; a < f[0].n_active; a++) {
        got[f[0].ids[a]] = f[0].cnt[a];
        sum += f[0].cnt[a];
        if (a)
            CHECK(f[0].ids[a] > f[0].ids[a - 1]);
    }
    CHECK_EQ_INT(f[0].n_active, 7);
    CHECK_EQ_INT(sum, 8);
    CHECK(!memcmp(got, want, sizeof want));
    tide_sim_trace_free(t);
}

/* Cosine and Jaccard on hand-made forwards. */
static void test_similarity(void)
{
    static const uint16_t ia[] = {0, 1, 2}, ib[] = {1, 2, 3}, ic[] = {0, 1, 2};
    static const uint32_t ca[] = {1, 2, 2}, cb[] = {2, 2, 1}, cc[] = {1, 2, 2};
    struct tide_solver_fwd f[4] = {
        {.phase = TIDE_TRACE_STEP, .step = 0, .n_active = 3, .ids = ia, .cnt = ca},
        {.phase = TIDE_TRACE_STEP, .step = 1, .n_active = 3, .ids = ib, .cnt = cb},
        {.phase = TIDE_TRACE_KV, .step = -1, .n_active = 3, .ids = ic, .cnt = cc},
        {.phase = TIDE_TRACE_STEP, .step = 0, .n_active = 3, .ids = ic, .cnt = cc},
    };
    const struct tide_solver_fwd *fw[1] = {f};
    size_t n[1] = {4};
    double cos[4], jac[4];
    uint64_t pairs[4];
    tide_sim_similarity(fw, n, 1, 2, cos, jac, pairs);
    /* a.b = 2*2 + 2*2 = 8, |a| = |b| = 3: cosine 8/9; sets {0,1,2} vs {1,2,3}: 2/4. */
    CHECK_NEAR(cos[0], 8.0 / 9.0, 1e-12);
    CHECK_NEAR(jac[0], 0.5, 1e-12);
    CHECK_EQ_INT(pairs[0], 1); /* the K/V pass separates blocks */
    CHECK_EQ_INT(pairs[1], 0);
    CHECK_NEAR(cos[2], 8.0 / 9.0, 1e-12); /* the all-layer row */
}

/* The synthesizer reads back the similarity it was asked for. */
static void test_synth_calibrated(void)
{
    static const struct {
        uint32_t layers, experts, k;
        double skew, sim, tol;
    } cases[] = {
        {2, 256, 8, 1.0, 0.985, 0.003},
        {3, 32, 4, 0.5, 0.95, 0.01},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct tide_synth_params p = {
            .n_layers = cases[c].layers,
            .n_experts = cases[c].experts,
            .top_k = cases[c].k,
            .hidden = 64,
            .inter = 32,
            .block_length = 32,
            .steps = 32,
            .min_steps = 20,
            .blocks = 12,
            .prompts = 2,
            .prompt_len = 40,
            .skew = cases[c].skew,
            .similarity = cases[c].sim,
            .drift = 0.5,
            .seed = 7 + c,
        };
        double rate = -1;
        CHECK_EQ_INT(tide_synth_calibrate(&p, &rate), TIDE_OK);
        CHECK(rate > 0 && rate < 1);
        const char *path = tpath(c ? "syn1.trc" : "syn0.trc");
        CHECK_EQ_INT(tide_synth_write(path, true, &p, rate), TIDE_OK);
        struct tide_sim_trace *t = NULL;
        CHECK_EQ_INT(tide_sim_trace_load(path, &t), TIDE_OK);
        if (!t)
            continue;
        CHECK_EQ_INT(t->prompts, 2);
        CHECK_EQ_INT(t->blocks, 24);
        CHECK(t->steps >= 24 * 20 && t->steps <= 24 * 32);
        const int L = (int)cases[c].layers, D = 5;
        double cos[(4 + 1) * 5], jac[(4 + 1) * 5];
        tide_sim_similarity((const struct tide_solver_fwd *const *)t->fwd, t->n_fwd, L, D, cos, jac,
                            NULL);
        double got = cos[L * D];
        if (!(got > cases[c].sim - cases[c].tol && got < cases[c].sim + cases[c].tol))
            fprintf(stderr, "synth case %zu: asked %.4f, read %.4f\n", c, cases[c].sim, got);
        CHECK_NEAR(got, cases[c].sim, cases[c].tol);
        /* Persistent drift: similarity falls with distance. */
        CHECK(cos[L * D + 4] < cos[L * D + 0]);
        tide_sim_trace_free(t);
    }
    /* Unreachable: near-random steps at a high skew are more similar than 0.1. */
    struct tide_synth_params q = {.n_layers = 1,
                                  .n_experts = 16,
                                  .top_k = 2,
                                  .hidden = 8,
                                  .inter = 8,
                                  .block_length = 8,
                                  .steps = 4,
                                  .min_steps = 4,
                                  .blocks = 2,
                                  .prompts = 1,
                                  .skew = 3,
                                  .similarity = 0.1,
                                  .drift = 0.5,
                                  .seed = 1};
    double rate;
    capture();
    CHECK_EQ_INT(tide_synth_calibrate(&q, &rate), TIDE_E_RANGE);
    release();
    CHECK_CONTAINS(logbuf, "is below what fully random steps give");
}

int main(void)
{
    if (!st_begin())
        return 1;
    TEST_RUN(test_round_trip);
    TEST_RUN(test_append_and_refuse);
    TEST_RUN(test_interrupted);
    TEST_RUN(test_bad_input);
    TEST_RUN(test_tape);
    TEST_RUN(test_similarity);
    TEST_RUN(test_synth_calibrated);
    st_end();
    TEST_DONE();
}
