/* A model plugin's optional slots on a generated tiny checkpoint, on the CPU
 * backend (model-llada2's tiny preset, or the plugin and preset given):
 *  - rows: the logits of any subset of a span's rows (in any order) are
 *    bit-identical to those rows with every row asked for, and the K/V it
 *    writes are the same (the next block's logits are identical after
 *    either);
 *  - bad rows are refused with a message naming forward_batch;
 *  - forward_batch: several sequences in their own KV-cache slots, with
 *    mixed prefix lengths, spans and rows, give each sequence the logits
 *    (and K/V) it gets alone in slot 0, bit for bit, whoever its
 *    companions are; bad spans (a shared or missing slot, too many tokens)
 *    are refused naming forward_batch;
 *  - profile / profile_read: every phase is named, the work counted is what
 *    the shapes say (output layer FLOPs = 2 x rows x vocab x hidden), and
 *    nothing is counted while profiling is off.
 * Usage: test_model_rows [PLUGIN PRESET] (TIDE_PLUGIN_DIR names the plugins). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "core_options.h"
#include "engine.h"
#include "harness.h"
#include "loader.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define L 8 /* block length */

static struct tide_engine *e;
static const struct tide_model_ops *mo;
static int V;

static int32_t ids[3 * L];

#define NSEQ 4
static int32_t seq_ids[NSEQ][5 * L]; /* sequence s: a prefix of prefix[s] tokens, then blocks */
static const int prefix[NSEQ] = {L, 2 * L, 3, 2 * L + 5};

/* One span in slot 0: every row when lg is set (a forward), else none. */
static int fwd(const int32_t *x, int64_t n, int64_t pos0, float *lg)
{
    return tide_model_forward1(mo, e->model, x, n, pos0, NULL, lg ? n : 0, lg);
}

/* One span in slot 0 with the rows asked for. */
static int fwd_rows(const int32_t *x, int64_t n, int64_t pos0, const int32_t *rows, int64_t n_rows,
                    float *lg)
{
    return tide_model_forward1(mo, e->model, x, n, pos0, rows, n_rows, lg);
}

/* Logits of block b (all rows) after the prefix was written by forward. */
static float *block_logits(int b)
{
    float *lg = malloc(sizeof *lg * (size_t)L * (size_t)V);
    CHECK_EQ_INT(fwd(ids + b * L, L, b * L, lg), TIDE_OK);
    return lg;
}

static void test_rows(void)
{
    CHECK_EQ_INT(fwd(ids, L, 0, NULL), TIDE_OK);
    float *all = block_logits(1);
    float *next_all = block_logits(2);
    static const int32_t subsets[][L + 1] = {
        /* count, rows... */
        {1, 0}, {1, L - 1}, {3, 5, 1, 6}, {L, 0, 1, 2, 3, 4, 5, 6, 7}, {4, 7, 6, 5, 4},
    };
    for (size_t s = 0; s < sizeof subsets / sizeof subsets[0]; s++) {
        const int n = subsets[s][0];
        const int32_t *rows = subsets[s] + 1;
        float *got = malloc(sizeof *got * (size_t)n * (size_t)V);
        CHECK_EQ_INT(fwd_rows(ids + L, L, L, rows, n, got), TIDE_OK);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += memcmp(got + (size_t)i * V, all + (size_t)rows[i] * V, sizeof *got * V) != 0;
        if (bad)
            fprintf(stderr, "subset %zu: %d of %d rows differ from forward\n", s, bad, n);
        CHECK_EQ_INT(bad, 0);
        /* The K/V of block 1 are forward's: block 2 sees the same prefix. */
        float *next = block_logits(2);
        CHECK(memcmp(next, next_all, sizeof *next * (size_t)L * V) == 0);
        free(next);
        free(got);
    }
    /* No rows: a forward without logits. */
    CHECK_EQ_INT(fwd_rows(ids + L, L, L, NULL, 0, NULL), TIDE_OK);
    float *next = block_logits(2);
    CHECK(memcmp(next, next_all, sizeof *next * (size_t)L * V) == 0);
    free(next);
    free(all);
    free(next_all);
}

static char last_error[512];

static void sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR)
        snprintf(last_error, sizeof last_error, "%s", msg);
}

/* Sequence s alone in slot 0 through forward: its prefix, then the block
 * after it (all rows) into lg, then the block after that into next. */
static void alone(int s, float *lg, float *next)
{
    const int p = prefix[s];
    CHECK_EQ_INT(fwd(seq_ids[s], p, 0, NULL), TIDE_OK);
    CHECK_EQ_INT(fwd(seq_ids[s] + p, L, p, lg), TIDE_OK);
    CHECK_EQ_INT(fwd(seq_ids[s] + p + L, 4, p + L, next), TIDE_OK);
}

/* Spans: prefill every member (members[i] in slot slots[i]) in one call,
 * then one step of each over its block with rows 1, 6 and 3, then the next
 * 4 positions with all rows: every logit row equals the one alone. */
static int batch_round(const int *members, const int *slots, int n, float *const *ref,
                       float *const *ref_next)
{
    struct tide_seq_span sp[NSEQ];
    const int32_t rows[3] = {1, 6, 3};
    float *lg[NSEQ];
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const int s = members[i];
        sp[i] = (struct tide_seq_span){
            .size = sizeof sp[i], .slot = slots[i], .ids = seq_ids[s], .n = prefix[s]};
    }
    CHECK_EQ_INT(mo->forward_batch(e->model, sp, n), TIDE_OK);
    for (int i = 0; i < n; i++) {
        const int s = members[i];
        lg[i] = malloc(sizeof *lg[i] * (size_t)L * (size_t)V);
        sp[i] = (struct tide_seq_span){.size = sizeof sp[i],
                                       .slot = slots[i],
                                       .ids = seq_ids[s] + prefix[s],
                                       .n = L,
                                       .pos0 = prefix[s],
                                       .rows = rows,
                                       .n_rows = 3,
                                       .logits = lg[i]};
    }
    CHECK_EQ_INT(mo->forward_batch(e->model, sp, n), TIDE_OK);
    for (int i = 0; i < n; i++)
        for (int r = 0; r < 3; r++)
            if (memcmp(lg[i] + (size_t)r * V, ref[members[i]] + (size_t)rows[r] * V,
                       sizeof(float) * (size_t)V)) {
                fprintf(stderr, "sequence %d in slot %d: step row %d differs\n", members[i],
                        slots[i], rows[r]);
                bad++;
            }
    for (int i = 0; i < n; i++) {
        const int s = members[i];
        sp[i] = (struct tide_seq_span){.size = sizeof sp[i],
                                       .slot = slots[i],
                                       .ids = seq_ids[s] + prefix[s] + L,
                                       .n = 4,
                                       .pos0 = prefix[s] + L,
                                       .n_rows = 4,
                                       .logits = lg[i]};
    }
    CHECK_EQ_INT(mo->forward_batch(e->model, sp, n), TIDE_OK);
    for (int i = 0; i < n; i++) {
        if (memcmp(lg[i], ref_next[members[i]], sizeof(float) * 4 * (size_t)V)) {
            float md = 0;
            int where = -1;
            for (int k = 0; k < 4 * V; k++) {
                float d = fabsf(lg[i][k] - ref_next[members[i]][k]);
                if (d > md) {
                    md = d;
                    where = k / V;
                }
            }
            fprintf(stderr, "sequence %d in slot %d: the next block differs (max %g, row %d)\n",
                    members[i], slots[i], md, where);
            bad++;
        }
        free(lg[i]);
    }
    return bad;
}

static void test_batch(void)
{
    CHECK(TIDE_OPS_HAS(mo, forward_batch) && TIDE_OPS_HAS(mo, reserve_slots));
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < 5 * L; i++)
            seq_ids[s][i] = (int32_t)(7 + (i * 97 + s * 1009) % (V - 12));
    CHECK_EQ_INT(mo->reserve_slots(e->model, NSEQ, 5 * L, NSEQ * 3 * L), TIDE_OK);
    float *ref[NSEQ], *ref_next[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        ref[s] = malloc(sizeof(float) * (size_t)L * (size_t)V);
        ref_next[s] = malloc(sizeof(float) * 4 * (size_t)V);
        alone(s, ref[s], ref_next[s]);
    }
    /* Alone in another slot, then with every set of companions, in
     * shuffled slots and span orders. */
    static const int rounds[][2][NSEQ + 1] = {
        {{1, 2}, {3}},
        {{2, 0, 1}, {1, 3}},
        {{3, 3, 1, 0}, {0, 2, 1}},
        {{4, 0, 1, 2, 3}, {0, 1, 2, 3}},
        {{4, 3, 2, 1, 0}, {2, 0, 3, 1}},
    };
    for (size_t r = 0; r < sizeof rounds / sizeof rounds[0]; r++) {
        const int n = rounds[r][0][0];
        const int bad = batch_round(rounds[r][0] + 1, rounds[r][1], n, ref, ref_next);
        if (bad)
            fprintf(stderr, "batch round %zu (%d sequences): %d rows differ from alone\n", r, n,
                    bad);
        CHECK_EQ_INT(bad, 0);
    }
    for (int s = 0; s < NSEQ; s++) {
        free(ref[s]);
        free(ref_next[s]);
    }
    tide_log_set_sink(sink, NULL);
    /* Spans: a shared slot, a slot out of range, more tokens than reserved. */
    struct tide_seq_span sp[2] = {
        {.size = sizeof sp[0], .slot = 0, .ids = ids, .n = L},
        {.size = sizeof sp[1], .slot = 0, .ids = ids, .n = L},
    };
    CHECK_EQ_INT(mo->forward_batch(e->model, sp, 2), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "forward_batch");
    sp[1].slot = 1 << 20;
    CHECK_EQ_INT(mo->forward_batch(e->model, sp, 2), TIDE_E_RANGE);
    CHECK_CONTAINS(last_error, "slot");
    sp[0].n = 1 << 20;
    CHECK_EQ_INT(mo->forward_batch(e->model, sp, 1), TIDE_E_RANGE);
    CHECK_CONTAINS(last_error, "forward_batch");
    tide_log_set_sink(NULL, NULL);
}

static void test_bad_rows(void)
{
    float lg[1];
    const int32_t out[1] = {L}, neg[1] = {-1};
    tide_log_set_sink(sink, NULL);
    CHECK_EQ_INT(fwd_rows(ids + L, L, L, out, 1, lg), TIDE_E_RANGE);
    CHECK_CONTAINS(last_error, "forward_batch");
    CHECK_EQ_INT(fwd_rows(ids + L, L, L, neg, 1, lg), TIDE_E_RANGE);
    CHECK_EQ_INT(fwd_rows(ids + L, 2, L, NULL, 3, lg), TIDE_E_INVAL);
    CHECK_EQ_INT(fwd_rows(ids + L, 2, L, out, 3, lg), TIDE_E_INVAL);
    tide_log_set_sink(NULL, NULL);
}

static void test_profile(void)
{
    CHECK(TIDE_OPS_HAS(mo, profile) && TIDE_OPS_HAS(mo, profile_read));
    struct tide_phase_stats ph[16];
    int n = 0;
    const int32_t rows[3] = {2, 3, 7};
    float *lg = malloc(sizeof *lg * 3 * (size_t)V);
    CHECK_EQ_INT(mo->profile(e->model, true), TIDE_OK);
    CHECK_EQ_INT(fwd_rows(ids + L, L, L, rows, 3, lg), TIDE_OK);
    CHECK_EQ_INT(mo->profile_read(e->model, ph, 16, &n), TIDE_OK);
    CHECK(n >= 5 && n <= 16);
    const struct tide_model_info *info = mo->info(e->model);
    double seconds = 0;
    bool output = false, routed = false, attention = false;
    for (int i = 0; i < n && i < 16; i++) {
        CHECK(ph[i].name && ph[i].name[0]);
        CHECK(ph[i].seconds >= 0);
        seconds += ph[i].seconds;
        if (!strcmp(ph[i].name, "output layer")) {
            output = true;
            CHECK_EQ_INT(ph[i].calls, 1);
            CHECK_EQ_INT(ph[i].flops, 2ull * 3 * (uint64_t)V * (uint64_t)info->hidden);
            CHECK_EQ_INT(ph[i].bytes, 2ull * (uint64_t)V * (uint64_t)info->hidden);
        } else if (!strcmp(ph[i].name, "routed experts")) {
            routed = true;
            CHECK_EQ_INT(ph[i].calls, info->n_moe_layers);
            /* At least top_k distinct experts per layer, at most all of them. */
            CHECK(ph[i].bytes >= (uint64_t)info->n_moe_layers * info->top_k * info->expert_bytes);
            CHECK(ph[i].bytes <= (uint64_t)info->n_moe_layers * info->n_experts *
                                     (info->expert_bytes + 2ull * info->hidden));
        } else if (!strcmp(ph[i].name, "attention")) {
            attention = true;
            CHECK_EQ_INT(ph[i].calls, info->n_layers);
            CHECK(ph[i].flops_f32 > 0);
        }
    }
    CHECK(output && routed && attention);
    CHECK(seconds > 0);
    /* Off: nothing more is counted. */
    CHECK_EQ_INT(mo->profile(e->model, false), TIDE_OK);
    CHECK_EQ_INT(fwd_rows(ids + L, L, L, rows, 3, lg), TIDE_OK);
    CHECK_EQ_INT(mo->profile_read(e->model, ph, 16, &n), TIDE_OK);
    for (int i = 0; i < n && i < 16; i++)
        CHECK(ph[i].calls == 0 && ph[i].flops == 0 && ph[i].seconds == 0);
    free(lg);
}

int main(int argc, char **argv)
{
    tide_openmp_env_defaults(); /* as `tide` runs (the machine may be shared) */
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (!dir) {
        fprintf(stderr, "TIDE_PLUGIN_DIR is not set (ctest sets it)\n");
        return 1;
    }
    const char *plugin = argc == 3 ? argv[1] : "model-llada2";
    const char *preset = argc == 3 ? argv[2] : "tiny";
    char tmp[] = "/tmp/tide-model-rows-XXXXXX", path[256], plug[128], create[128];
    snprintf(plug, sizeof plug, "model.plugin=%s", plugin);
    snprintf(create, sizeof create, "model.create=%s", preset);
    if (!mkdtemp(tmp))
        return 1;
    snprintf(path, sizeof path, "model.path=%s/tiny", tmp);
    struct tide_plugin_set *set = NULL;
    struct tide_config *cfg = tide_config_create();
    int rc = tide_plugins_scan_dirs(&dir, 1, &set);
    const char *sets[] = {plug,
                          path,
                          create,
                          "backend.device=backend-cpu-onednn",
                          "generation.block_length=8",
                          "backend-cpu-onednn.threads=2"};
    if (!rc)
        rc = tide_core_register_sections(cfg);
    if (!rc)
        rc = tide_config_add_plugins(cfg, set);
    for (size_t i = 0; !rc && i < sizeof sets / sizeof sets[0]; i++)
        rc = tide_config_set(cfg, sets[i]);
    if (!rc)
        rc = tide_engine_prepare(cfg, set, &e);
    if (!rc)
        rc = tide_engine_load(e, set);
    CHECK_EQ_INT(rc, TIDE_OK);
    if (!rc) {
        mo = e->mops;
        V = mo->info(e->model)->vocab_size;
        for (int i = 0; i < 3 * L; i++)
            ids[i] = (int32_t)(5 + (i * 131) % (V - 10));
        CHECK_EQ_INT(mo->reserve_slots(e->model, 1, 3 * L, L), TIDE_OK);
        TEST_RUN(test_rows);
        TEST_RUN(test_bad_rows);
        TEST_RUN(test_profile);
        TEST_RUN(test_batch);
    }
    tide_engine_close(e);
    tide_config_destroy(cfg);
    tide_plugins_free(set);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    TEST_DONE();
}
