/* The simulator's pieces: profiles and the cost model, the solver on
 * hand-computed cost curves, the TIDE evaluator against the policy-tide
 * plugin, and the oracle (exact against brute force on tiny traces; never
 * above any policy on random synthetic traces). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "harness.h"
#include "sim/sim_test_util.h"
#include "loader.h"
#include "sim.h"
#include "tide/quant.h"
#include "tide/trace_write.h"
#include "tide/log.h"
#include "tide/solver.h"
#include "tide/status.h"

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* ---- profiles and the cost model ---------------------------------------- */

static const char *const good_profile = "; test\n[profile]\nname = unit\n"
                                        "[transfer]\nh2d_gbps = 10 ; GB/s\nd2h_gbps = 5\n"
                                        "latency_us = 2\noverlap = false\n"
                                        "[expert]\nhidden = 64\ninter = 32\n"
                                        "[device]\ndense_us = 3\ndense_us_per_token = 0.5\n"
                                        "rows = 1, 4, 8\nus = 10, 16, 40\n"
                                        "[host]\nrows = 1,2\nus = 100,150\n";

static void test_profile_load(void)
{
    write_text(tpath("good.ini"), good_profile);
    struct tide_profile p;
    CHECK_EQ_INT(tide_profile_load(tpath("good.ini"), &p), TIDE_OK);
    CHECK(!strcmp(p.name, "unit"));
    CHECK_NEAR(p.h2d_gbps, 10, 0);
    CHECK_NEAR(p.d2h_gbps, 5, 0);
    CHECK(!p.overlap);
    CHECK_EQ_INT(p.hidden, 64);
    CHECK_EQ_INT(p.device.n, 3);
    CHECK_NEAR(p.device.us[2], 40, 0);
    CHECK_EQ_INT(p.host.n, 2);
    /* The curve: inside, below, beyond (linear from the last two points). */
    CHECK_NEAR(tide_profile_curve_us(&p.device, 2), 12, 1e-12);
    CHECK_NEAR(tide_profile_curve_us(&p.device, 6), 28, 1e-12);
    CHECK_NEAR(tide_profile_curve_us(&p.device, 16), 88, 1e-12);
    CHECK_NEAR(tide_profile_curve_us(&p.device, 0.5), 10, 1e-12);
    CHECK_NEAR(tide_profile_curve_us(&p.device, 0), 0, 0);
    /* Save and load again: the same numbers. */
    const char *notes[11] = {"n0", "n1", NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    CHECK_EQ_INT(tide_profile_save(&p, tpath("saved.ini"), false, "header\nline 2", notes),
                 TIDE_OK);
    capture();
    CHECK_EQ_INT(tide_profile_save(&p, tpath("saved.ini"), false, NULL, NULL), TIDE_E_CONFIG);
    release();
    CHECK_CONTAINS(logbuf, "exists; refusing to replace it");
    struct tide_profile q;
    CHECK_EQ_INT(tide_profile_load(tpath("saved.ini"), &q), TIDE_OK);
    CHECK_NEAR(q.h2d_gbps, p.h2d_gbps, 1e-9);
    CHECK_NEAR(q.latency_us, p.latency_us, 1e-9);
    CHECK_NEAR(q.host.us[1], p.host.us[1], 1e-9);
    CHECK_NEAR(q.dense_us_per_token, p.dense_us_per_token, 1e-9);
    CHECK(!strcmp(q.name, "unit"));

    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"[transfer]\nh2d_gbs = 1\n",
         ":2: unknown key 'h2d_gbs' in [transfer]; did you mean h2d_gbps?"},
        {"[transfer]\nh2d_gbps = fast\n", ":2: [transfer] h2d_gbps = 'fast': not a number"},
        {"[transfer]\nh2d_gbps = 0\n", "h2d_gbps = '0': must be > 0"},
        {"[transfer]\nh2d_gbps = 1\nh2d_gbps = 2\n", ":3: [transfer] h2d_gbps is set twice"},
        {"[transfers]\n", ":1: unknown section [transfers]"},
        {"h2d_gbps = 1\n", ":1: 'h2d_gbps' is outside any section"},
        {"[host]\nrows = 1,2\nus = 5\n", ":3: [host] us has 1 values but rows (line 2) has 2"},
        {"[host]\nrows = 2,1\nus = 5,6\n", "[host] rows must be >= 1 and strictly ascending"},
        {"[transfer]\noverlap = maybe\n", "overlap = 'maybe': expected true or false"},
        {"[profile]\n", "[transfer] h2d_gbps is missing"},
        {"[expert]\nformat = int3\n", "[expert] format = 'int3': expected bf16, q8_0, q4_0 or fp8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(tpath("bad.ini"), bad[i].text);
        capture();
        CHECK_EQ_INT(tide_profile_load(tpath("bad.ini"), &q), TIDE_E_FORMAT);
        release();
        CHECK_CONTAINS(logbuf, bad[i].msg);
        CHECK_CONTAINS(logbuf, "bad.ini");
    }
    capture();
    CHECK_EQ_INT(tide_profile_load(tpath("none.ini"), &q), TIDE_E_NOTFOUND);
    release();
    CHECK_CONTAINS(logbuf, "none.ini: cannot open");
}

static void test_cost_model(void)
{
    struct tide_profile p;
    write_text(tpath("good.ini"), good_profile);
    CHECK_EQ_INT(tide_profile_load(tpath("good.ini"), &p), TIDE_OK);
    struct tide_cost c;
    /* Another expert shape is refused unless scaling is allowed. */
    capture();
    CHECK_EQ_INT(tide_cost_init(&c, &p, 128, 32, false, "trace X", 16), TIDE_E_CONFIG);
    release();
    CHECK_CONTAINS(logbuf, "was measured for experts of hidden 64 x inter 32");
    CHECK_CONTAINS(logbuf, "but trace X has hidden 128 x inter 32");
    CHECK_EQ_INT(tide_cost_init(&c, &p, 128, 32, true, "trace X", 16), TIDE_OK);
    CHECK_NEAR(c.scale, 2, 1e-12);
    CHECK_NEAR(tide_cost_device(&c, 2), 24, 1e-9);
    CHECK_NEAR(tide_cost_device(&c, 100), 2 * tide_profile_curve_us(&p.device, 100), 1e-9);
    tide_cost_free(&c);
    CHECK_EQ_INT(tide_cost_init(&c, &p, 64, 32, false, "t", 16), TIDE_OK);
    /* expert 3*64*32*2 = 12288 bytes: 1.2288 us at 10 GB/s; a row is 128 bytes down
     * (0.0256 us at 5 GB/s) and 256 bytes up (0.0256 us at 10 GB/s). */
    CHECK_NEAR(c.promote_us, 1.2288, 1e-12);
    CHECK_NEAR(c.down_us_row, 0.0256, 1e-12);
    CHECK_NEAR(c.up_us_row, 0.0256, 1e-12);
    struct tide_layer_work w = {
        .device_us = 30, .host_us = 250, .host_rows = 10, .promotions = 2, .tokens = 4};
    /* dense 3 + 4*0.5 = 5; W = 2.4576; down = 2*2 + 0.256; up = 0.256. */
    const double serial = 5 + 30 + 2.4576 + 4.256 + 250 + 0.256;
    CHECK_NEAR(tide_cost_layer_us(&c, &w), serial, 1e-9);
    c.p.overlap = true;
    CHECK_NEAR(tide_cost_layer_us(&c, &w), 5 + (4.256 + 250 + 0.256), 1e-9);
    w.host_us = 1;
    w.device_us = 300;
    CHECK_NEAR(tide_cost_layer_us(&c, &w), 5 + 300, 1e-9);
    w.host_rows = 0;
    w.host_us = 0;
    w.device_us = 0;
    w.promotions = 1000;
    CHECK_NEAR(tide_cost_layer_us(&c, &w), 5 + 1228.8, 1e-9);
    tide_cost_free(&c);

    /* Expert formats (tide/quant.h): a q4_0 expert of 64 x 32 is 3456 bytes
     * (each matrix 1024 bytes of nibbles and 128 of f16 scales); a bf16
     * profile binds to it only with scaling, which keeps the compute curves
     * (same shape) and moves the q4_0 bytes. */
    capture();
    CHECK_EQ_INT(tide_cost_init_fmt(&c, &p, 64, 32, TIDE_QFMT_Q4_0, false, "model M", 16),
                 TIDE_E_CONFIG);
    release();
    CHECK_CONTAINS(logbuf, "(0.01 MiB, bf16), but model M has hidden 64 x inter 32");
    CHECK_CONTAINS(logbuf, "--format q4_0");
    CHECK_EQ_INT(tide_cost_init_fmt(&c, &p, 64, 32, TIDE_QFMT_Q4_0, true, "model M", 16), TIDE_OK);
    CHECK_EQ_INT(c.expert_bytes, 3456);
    CHECK_NEAR(c.scale, 1, 0);
    CHECK_NEAR(c.promote_us, 0.3456, 1e-12);
    tide_cost_free(&c);
    /* A q8_0 profile ([expert] format) binds to q8_0 experts of its shape. */
    char text[1024];
    snprintf(text, sizeof text, "%s", good_profile);
    char *at = strstr(text, "inter = 32\n") + strlen("inter = 32\n");
    memmove(at + strlen("format = q8_0\n"), at, strlen(at) + 1);
    memcpy(at, "format = q8_0\n", strlen("format = q8_0\n"));
    write_text(tpath("q8.ini"), text);
    CHECK_EQ_INT(tide_profile_load(tpath("q8.ini"), &p), TIDE_OK);
    CHECK_EQ_INT(p.qfmt, TIDE_QFMT_Q8_0);
    CHECK_EQ_INT(tide_cost_init(&c, &p, 64, 32, false, "m", 16), TIDE_OK);
    CHECK_EQ_INT(c.expert_bytes, 6528);
    tide_cost_free(&c);
    CHECK_EQ_INT(tide_profile_save(&p, tpath("q8-saved.ini"), true, NULL, NULL), TIDE_OK);
    struct tide_profile q;
    CHECK_EQ_INT(tide_profile_load(tpath("q8-saved.ini"), &q), TIDE_OK);
    CHECK_EQ_INT(q.qfmt, TIDE_QFMT_Q8_0);
}

/* ---- the solver ------------------------------------------------------------ */

static void test_solver_intervals(void)
{
    /* cost = a/tau + b*tau: the optimum is sqrt(a/b). */
    const double a[3] = {16, 64, 4}, b[3] = {1, 1, 1};
    int iv[32];
    double cost[3 * 32];
    for (int i = 0; i < 32; i++)
        iv[i] = i + 1;
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < 32; i++)
            cost[l * 32 + i] = a[l] / iv[i] + b[l] * iv[i];
    int g = -1, li[3];
    double g_us, l_us;
    CHECK_EQ_INT(tide_solver_intervals(cost, 3, 32, iv, &g, &g_us, li, &l_us), TIDE_OK);
    /* Global: 84/tau + 3 tau, least at tau = 5 (31.8; 6 gives 32). */
    CHECK_EQ_INT(iv[g], 5);
    CHECK_NEAR(g_us, 84.0 / 5 + 15, 1e-9);
    CHECK_EQ_INT(iv[li[0]], 4);
    CHECK_EQ_INT(iv[li[1]], 8);
    CHECK_EQ_INT(iv[li[2]], 2);
    CHECK_NEAR(l_us, 8 + 16 + 4, 1e-9);
    /* Ties go to the longer interval. */
    const double flat[4] = {2, 1, 1, 3};
    const int iv4[4] = {1, 2, 4, 8};
    CHECK_EQ_INT(tide_solver_intervals(flat, 1, 4, iv4, &g, &g_us, li, &l_us), TIDE_OK);
    CHECK_EQ_INT(iv4[g], 4);
    CHECK_EQ_INT(iv4[li[0]], 4);
    capture();
    CHECK_EQ_INT(tide_solver_intervals(flat, 0, 4, iv4, &g, &g_us, li, &l_us), TIDE_E_INVAL);
    release();
}

/* Brute force over every allocation on the grid with sum <= total. */
static double budgets_brute(const double *cost, int L, int nb, const int *grid, int total, int l,
                            int used)
{
    if (l == L)
        return 0;
    double best = INFINITY;
    for (int j = 0; j < nb; j++) {
        if (used + grid[j] > total)
            break;
        double c =
            cost[l * nb + j] + budgets_brute(cost, L, nb, grid, total, l + 1, used + grid[j]);
        best = fmin(best, c);
    }
    return best;
}

static void test_solver_budgets(void)
{
    const int grids[2][9] = {{0, 1, 2, 3, 4, 5, 6, 7, 8}, {0, 2, 4, 6, 8}};
    const int n_grid[2] = {9, 5};
    const double w[4] = {10, 40, 5, 25};
    for (int gi = 0; gi < 2; gi++) {
        const int nb = n_grid[gi];
        double cost[4 * 9];
        for (int l = 0; l < 4; l++)
            for (int j = 0; j < nb; j++)
                cost[l * nb + j] = w[l] / (grids[gi][j] + 1.0); /* convex, decreasing */
        for (int total = 0; total <= 20; total += (gi ? 2 : 1)) {
            int idx[4];
            double got;
            CHECK_EQ_INT(tide_solver_budgets(cost, 4, nb, grids[gi], total, idx, &got), TIDE_OK);
            int used = 0;
            for (int l = 0; l < 4; l++)
                used += grids[gi][idx[l]];
            CHECK(used <= total);
            CHECK_NEAR(got, budgets_brute(cost, 4, nb, grids[gi], total, 0, 0), 1e-9);
        }
    }
    /* A grid of unequal steps: greedy stays feasible and beats the equal share. */
    const int odd[4] = {0, 2, 4, 8};
    double oc[4 * 4];
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 4; j++)
            oc[l * 4 + j] = w[l] / (odd[j] + 1.0);
    int oi[4];
    double ous;
    CHECK_EQ_INT(tide_solver_budgets(oc, 4, 4, odd, 16, oi, &ous), TIDE_OK);
    CHECK(odd[oi[0]] + odd[oi[1]] + odd[oi[2]] + odd[oi[3]] <= 16);
    CHECK(ous <= oc[2] + oc[6] + oc[10] + oc[14]);
    /* The hand case: w 10, 40 on 0..8 and 4 experts: 40 gets 3, 10 gets 1 (5 + 10 = 15). */
    const double two[2 * 9] = {10, 5,  10.0 / 3, 2.5, 2, 10.0 / 6, 10.0 / 7, 1.25, 10.0 / 9,
                               40, 20, 40.0 / 3, 10,  8, 40.0 / 6, 40.0 / 7, 5,    40.0 / 9};
    int idx[2];
    double us;
    CHECK_EQ_INT(tide_solver_budgets(two, 2, 9, grids[0], 4, idx, &us), TIDE_OK);
    CHECK_EQ_INT(idx[0], 1);
    CHECK_EQ_INT(idx[1], 3);
    CHECK_NEAR(us, 15, 1e-12);
    const int g2[2] = {2, 4};
    capture();
    CHECK_EQ_INT(tide_solver_budgets(two, 2, 2, g2, 3, idx, &us), TIDE_E_BUDGET);
    const int g3[2] = {4, 2};
    CHECK_EQ_INT(tide_solver_budgets(two, 2, 2, g3, 30, idx, &us), TIDE_E_INVAL);
    release();
}

static int key_cmp(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b; /* (count, id) */
    if (x[0] != y[0])
        return x[0] > y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static void test_rank_and_refresh(void)
{
    struct tide_solver_ws ws = {0};
    uint64_t s = 12345;
    for (int round = 0; round < 200; round++) {
        const int n = 1 + round % 97;
        uint32_t counts[97], pairs[97][2];
        int32_t out[97];
        int active = 0;
        for (int e = 0; e < n; e++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            /* Small counts (counting sort) and, every 5th round, huge ones (qsort). */
            uint32_t v = (uint32_t)(s >> 33) % (round % 5 ? 6 : 4000000000u);
            counts[e] = v;
            if (v) {
                pairs[active][0] = v;
                pairs[active++][1] = (uint32_t)e;
            }
        }
        qsort(pairs, (size_t)active, sizeof pairs[0], key_cmp);
        const int k = round % 7 + 1;
        int got = tide_rank_top(counts, n, k, out, &ws);
        CHECK_EQ_INT(got, active < k ? active : k);
        for (int i = 0; i < got; i++)
            if (out[i] != (int32_t)pairs[i][1]) {
                CHECK_EQ_INT(out[i], pairs[i][1]);
                break;
            }
    }
    /* The capped demotion of policy-tide's unit test: target 4, 5, 1; two
     * promotions evict the lowest stale residents 0 and 2. */
    uint32_t counts[8] = {[1] = 5, [4] = 9, [5] = 7};
    uint8_t res[8] = {1, 1, 1, 1};
    int32_t promote[4], evict[4];
    CHECK_EQ_INT(tide_tide_refresh(counts, res, 4, 8, 4, promote, evict, &ws), 2);
    CHECK_EQ_INT(promote[0], 4);
    CHECK_EQ_INT(evict[0], 0);
    CHECK_EQ_INT(promote[1], 5);
    CHECK_EQ_INT(evict[1], 2);
    /* Free slots first. */
    uint8_t res2[8] = {1, 1};
    CHECK_EQ_INT(tide_tide_refresh(counts, res2, 2, 8, 4, promote, evict, &ws), 2);
    CHECK_EQ_INT(evict[0], -1);
    CHECK_EQ_INT(evict[1], -1);
    tide_solver_ws_free(&ws);
}

/* ---- replay with plugins --------------------------------------------------- */

struct plug {
    struct tide_plugin_set *set;
    struct tide_config *cfg;
};

static int plug_open(struct plug *p)
{
    memset(p, 0, sizeof *p);
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (!dir)
        return TIDE_E_NOTFOUND;
    int rc = tide_plugins_scan_dirs(&dir, 1, &p->set);
    if (rc != TIDE_OK)
        return rc;
    if (!(p->cfg = tide_config_create()))
        return TIDE_E_NOMEM;
    for (int i = 0; i < p->set->n; i++) {
        const struct tide_plugin_desc *d = p->set->items[i].desc;
        if (d->kind == TIDE_PLUGIN_POLICY &&
            (rc = tide_config_add_section(p->cfg, d->name, d->options, d->name, NULL)) != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}

static void plug_close(struct plug *p)
{
    tide_config_destroy(p->cfg);
    tide_plugins_free(p->set);
}

/* A sim config for plugin `name` with "key=value key=value" options. */
static bool plug_config(struct plug *p, const char *name, const char *opts, int budget,
                        struct tide_sim_config *c)
{
    const struct tide_plugin *pl = tide_plugins_find(p->set, name);
    if (!pl)
        return false;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", opts ? opts : "");
    char *save = NULL;
    for (char *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            return false;
        *eq = 0;
        if (tide_config_set_value(p->cfg, name, kv, eq + 1, "test") != TIDE_OK)
            return false;
    }
    *c = (struct tide_sim_config){
        .label = name,
        .kind = SIM_PLUGIN,
        .ops = pl->desc->ops,
        .opts = tide_config_section(p->cfg, name),
        .budget = budget,
    };
    return true;
}

static int synth(const char *path, uint32_t layers, uint32_t experts, uint32_t k, double skew,
                 double similarity, uint32_t blocks, uint64_t seed)
{
    struct tide_synth_params sp = {
        .n_layers = layers,
        .n_experts = experts,
        .top_k = k,
        .hidden = 64,
        .inter = 32,
        .block_length = 16,
        .steps = 16,
        .min_steps = 5,
        .blocks = blocks,
        .prompts = 2,
        .prompt_len = 20,
        .skew = skew,
        .similarity = similarity,
        .drift = 0.5,
        .seed = seed,
    };
    double rate;
    int rc = tide_synth_calibrate(&sp, &rate);
    return rc ? rc : tide_synth_write(path, true, &sp, rate);
}

static void random_profile(struct tide_profile *p, uint64_t *s, bool overlap)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "random");
#define RND()                                                                                      \
    ((double)((*s = *s * 6364136223846793005ull + 1442695040888963407ull) >> 11) /                 \
     9007199254740992.0)
    p->h2d_gbps = 0.002 + 0.05 * RND();
    p->d2h_gbps = 0.002 + 0.05 * RND();
    p->latency_us = 5 * RND();
    p->overlap = overlap;
    p->hidden = 64;
    p->inter = 32;
    p->dense_us = 10 * RND();
    p->dense_us_per_token = RND();
    p->device.n = p->host.n = 3;
    const double r[3] = {1, 8, 64};
    for (int i = 0; i < 3; i++) {
        p->device.rows[i] = p->host.rows[i] = r[i];
        p->device.us[i] = (i ? p->device.us[i - 1] : 2) + 20 * RND() * r[i] / 8;
        p->host.us[i] = (i ? p->host.us[i - 1] : 20) + 80 * RND() * r[i] / 8;
    }
#undef RND
}

/* Load a trace and bind a random profile to it; NULL (a failed check) on error. */
static struct tide_sim_trace *load_with_cost(const char *path, uint64_t *seed, bool overlap,
                                             bool no_latency, struct tide_cost *c)
{
    struct tide_sim_trace *t = NULL;
    CHECK_EQ_INT(tide_sim_trace_load(path, &t), TIDE_OK);
    if (!t)
        return NULL;
    struct tide_profile p;
    random_profile(&p, seed, overlap);
    if (no_latency)
        p.latency_us = 0;
    int rc = tide_cost_init(c, &p, 64, 32, false, "t", t->max_tokens);
    CHECK_EQ_INT(rc, TIDE_OK);
    if (rc != TIDE_OK) {
        tide_sim_trace_free(t);
        return NULL;
    }
    return t;
}

/* The evaluator replays exactly what the plugin does, counter for counter. */
static void test_evaluator_matches_plugin(void)
{
    struct plug pg;
    if (plug_open(&pg) != TIDE_OK) {
        fprintf(stderr, "no plugins: TIDE_PLUGIN_DIR unset or empty\n");
        CHECK(0);
        return;
    }
    const char *path = tpath("eval.trc");
    CHECK_EQ_INT(synth(path, 3, 32, 4, 1.0, 0.9, 6, 3), TIDE_OK);
    uint64_t s = 99;
    struct tide_cost cost = {0};
    struct tide_sim_trace *t = load_with_cost(path, &s, true, false, &cost);
    struct tide_solver_ws ws = {0};
    uint8_t res[32];
    const int budgets[] = {0, 3, 12, 31};
    const int intervals[] = {1, 2, 5, 16};
    int compared = 0;
    for (size_t bi = 0; t && bi < 4; bi++)
        for (size_t ii = 0; ii < 4; ii++)
            for (int variant = 0; variant < 3; variant++) {
                const struct tide_tide_rule rule = {
                    .interval = intervals[ii],
                    .first_block_every_step = variant == 1,
                    .prefetch = variant == 2,
                };
                char opts[128];
                snprintf(opts, sizeof opts, "interval=%d first_block_every_step=%s prefetch=%s",
                         rule.interval, rule.first_block_every_step ? "true" : "false",
                         rule.prefetch ? "true" : "false");
                struct tide_sim_config c;
                CHECK(plug_config(&pg, "policy-tide", opts, budgets[bi], &c));
                struct tide_sim_result r;
                if (tide_sim_run(t, &c, &cost, NULL, &r) != TIDE_OK) {
                    CHECK(0);
                    continue;
                }
                for (uint32_t l = 0; l < t->h.n_layers; l++) {
                    memset(res, 0, sizeof res);
                    memset(res, 1, (size_t)budgets[bi]); /* initial = first */
                    struct tide_eval ev = {0};
                    CHECK_EQ_INT(tide_solver_eval_tide(t->fwd[l], t->n_fwd[l], 32, budgets[bi], res,
                                                       &rule, &cost, &ev, &ws),
                                 TIDE_OK);
                    CHECK_EQ_INT(ev.promotions, r.layer[l].promotions);
                    CHECK_EQ_INT(ev.hit_rows, r.layer[l].hit_rows);
                    CHECK_EQ_INT(ev.miss_rows, r.layer[l].miss_rows);
                    CHECK_NEAR(ev.us, r.layer[l].us, 1e-6 * (1 + ev.us));
                    CHECK_NEAR(ev.step_us, r.layer[l].step_us, 1e-6 * (1 + ev.us));
                    compared++;
                }
                tide_sim_result_free(&r);
            }
    CHECK_EQ_INT(compared, 4 * 4 * 3 * 3);
    tide_solver_ws_free(&ws);
    tide_cost_free(&cost);
    tide_sim_trace_free(t);
    plug_close(&pg);
}

/* ---- the oracle ------------------------------------------------------------ */

/* A tiny hand trace: 1 layer, 4 experts, top-2, 3 tokens a forward; a
 * prefill, block 0 (steps 0..2, K/V), block 1 (steps 0..1, K/V). */
static int tiny_trace(const char *path, uint64_t seed)
{
    struct tide_trace_header h = {.n_layers = 1,
                                  .n_experts = 4,
                                  .top_k = 2,
                                  .hidden = 64,
                                  .inter = 32,
                                  .expert_bytes = tide_expert_bytes(64, 32),
                                  .block_length = 4,
                                  .steps = 4,
                                  .threshold = 0.9,
                                  .model = "tiny"};
    struct tide_trace_writer *w;
    int rc = tide_trace_writer_open(path, false, true, &h, &w);
    if (rc)
        return rc;
    int32_t ids[6];
    uint64_t s = seed;
#define ROUTE(ph)                                                                                  \
    do {                                                                                           \
        for (int t_ = 0; t_ < 3; t_++) {                                                           \
            s = s * 6364136223846793005ull + 1442695040888963407ull;                               \
            int a_ = (int)((s >> 40) % 4), b_ = (int)((s >> 20) % 3);                              \
            ids[2 * t_] = a_;                                                                      \
            ids[2 * t_ + 1] = (a_ + 1 + b_) % 4;                                                   \
        }                                                                                          \
        rc = rc ? rc : tide_trace_route(w, ph, 0, 3, ids);                                         \
    } while (0)
    rc = tide_trace_prompt(w, 0, 5);
    ROUTE(TIDE_TRACE_PREFILL);
    const int steps[2] = {3, 2};
    for (int b = 0; b < 2; b++) {
        rc = rc ? rc : tide_trace_block(w, b, b == 0);
        for (int st = 0; st < steps[b]; st++) {
            rc = rc ? rc : tide_trace_step(w, st);
            ROUTE(TIDE_TRACE_STEP);
        }
        ROUTE(TIDE_TRACE_KV);
    }
#undef ROUTE
    int crc = tide_trace_writer_close(w, rc == TIDE_OK);
    return rc ? rc : crc;
}

/* The exact optimum of the full model by dynamic programming over resident
 * sets (4 experts): additions only at STEP forwards (and the free initial
 * set), drops anywhere, at most B residents; in a STEP forward a resident
 * may run on the host. With a serial profile and no latency this is exactly
 * what the oracle minimises. */
static double brute_optimum(const struct tide_sim_trace *t, int B, const struct tide_cost *c)
{
    const struct tide_solver_fwd *f = t->fwd[0];
    const size_t T = t->n_fwd[0];
    double dp[16], nd[16];
    for (int S = 0; S < 16; S++)
        dp[S] = __builtin_popcount((unsigned)S) <= B ? 0 : INFINITY;
    for (size_t j = 0; j < T; j++) {
        const bool step = f[j].phase == TIDE_TRACE_STEP;
        for (int S = 0; S < 16; S++) {
            nd[S] = INFINITY;
            if (__builtin_popcount((unsigned)S) > B)
                continue;
            for (int P = 0; P < 16; P++) {
                const int added = S & ~P;
                if (dp[P] == INFINITY || (added && !step))
                    continue;
                /* Which residents run on the device: any subset in a step. */
                for (int dev = 0; dev < 16; dev++) {
                    if ((dev & ~S) || (!step && dev != S))
                        continue;
                    struct tide_layer_work w = {.tokens = f[j].tokens,
                                                .promotions =
                                                    (uint32_t)__builtin_popcount((unsigned)added)};
                    for (uint32_t a = 0; a < f[j].n_active; a++) {
                        if (dev >> f[j].ids[a] & 1) {
                            w.device_us += tide_cost_device(c, f[j].cnt[a]);
                        } else {
                            w.host_us += tide_cost_host(c, f[j].cnt[a]);
                            w.host_rows += f[j].cnt[a];
                        }
                    }
                    nd[S] = fmin(nd[S], dp[P] + tide_cost_layer_us(c, &w));
                }
            }
        }
        memcpy(dp, nd, sizeof dp);
    }
    double best = INFINITY;
    for (int S = 0; S < 16; S++)
        best = fmin(best, dp[S]);
    return best;
}

static void test_oracle_exact_on_tiny(void)
{
    uint64_t s = 7;
    int cases = 0;
    for (int seed = 1; seed <= 40; seed++) {
        const char *path = tpath("tiny.trc");
        CHECK_EQ_INT(tiny_trace(path, (uint64_t)seed), TIDE_OK);
        struct tide_cost c;
        struct tide_sim_trace *t = load_with_cost(path, &s, false, true, &c);
        if (!t)
            continue;
        for (int B = 1; B <= 3; B++) {
            struct tide_sim_oracle o;
            CHECK_EQ_INT(tide_sim_oracle(t, B, NULL, &c, NULL, &o), TIDE_OK);
            double want = brute_optimum(t, B, &c);
            if (fabs(o.bound_us - want) > 1e-6 * want)
                fprintf(stderr, "seed %d B %d: oracle %.6f, brute force %.6f\n", seed, B,
                        o.bound_us, want);
            CHECK_NEAR(o.bound_us, want, 1e-6 * want);
            tide_sim_oracle_free(&o);
            cases++;
        }
        tide_cost_free(&c);
        tide_sim_trace_free(t);
    }
    CHECK_EQ_INT(cases, 120);
}

/* The oracle's progress callback: every layer and pass in order, the same
 * bound as without it, and a status it returns stops the oracle. */
struct oracle_calls {
    uint64_t n, last, total;
    bool ordered;
    int stop_at; /* return TIDE_E_INTERRUPTED at this call (0: never) */
};

static int oracle_progress(void *user, uint64_t done, uint64_t total)
{
    struct oracle_calls *k = user;
    k->n++;
    k->ordered &= done == k->last + 1 && (!k->total || total == k->total);
    k->last = done;
    k->total = total;
    return k->stop_at && (int)k->n == k->stop_at ? TIDE_E_INTERRUPTED : TIDE_OK;
}

static void test_oracle_progress(void)
{
    uint64_t s = 99;
    const char *path = tpath("tiny.trc");
    CHECK_EQ_INT(tiny_trace(path, 5), TIDE_OK);
    for (int overlap = 0; overlap <= 1; overlap++) {
        struct tide_cost c;
        struct tide_sim_trace *t = load_with_cost(path, &s, overlap, false, &c);
        if (!t)
            continue;
        const uint64_t units = (uint64_t)t->h.n_layers * (c.p.overlap ? 2 : 1);
        struct tide_sim_oracle plain, heard;
        CHECK_EQ_INT(tide_sim_oracle(t, 2, NULL, &c, NULL, &plain), TIDE_OK);
        struct oracle_calls k = {.ordered = true};
        const struct tide_progress pg = {.fn = oracle_progress, .user = &k};
        CHECK_EQ_INT(tide_sim_oracle(t, 2, NULL, &c, &pg, &heard), TIDE_OK);
        CHECK(k.ordered);
        CHECK(k.n == units && k.last == units && k.total == units);
        CHECK(heard.bound_us == plain.bound_us);
        tide_sim_oracle_free(&plain);
        tide_sim_oracle_free(&heard);
        k = (struct oracle_calls){.ordered = true, .stop_at = 1};
        CHECK_EQ_INT(tide_sim_oracle(t, 2, NULL, &c, &pg, &heard), TIDE_E_INTERRUPTED);
        CHECK(k.n == 1);
        CHECK(heard.layer_bound_us == NULL);
        tide_cost_free(&c);
        tide_sim_trace_free(t);
    }
}

/* The oracle is a lower bound: never above the exact optimum of the full
 * model (brute force, any profile) nor above any policy's modelled time on
 * random synthetic traces. */
static void test_oracle_property(void)
{
    uint64_t s = 2024;
    for (int seed = 1; seed <= 30; seed++) {
        const char *path = tpath("tiny.trc");
        CHECK_EQ_INT(tiny_trace(path, (uint64_t)seed * 31), TIDE_OK);
        struct tide_cost c;
        struct tide_sim_trace *t = load_with_cost(path, &s, seed % 2, false, &c);
        if (!t)
            continue;
        for (int B = 1; B <= 3; B++) {
            struct tide_sim_oracle o;
            CHECK_EQ_INT(tide_sim_oracle(t, B, NULL, &c, NULL, &o), TIDE_OK);
            double opt = brute_optimum(t, B, &c);
            CHECK(o.bound_us <= opt * (1 + 1e-9));
            tide_sim_oracle_free(&o);
        }
        tide_cost_free(&c);
        tide_sim_trace_free(t);
    }

    struct plug pg;
    if (plug_open(&pg) != TIDE_OK) {
        CHECK(0);
        return;
    }
    static const struct {
        const char *name, *opts;
    } pols[] = {
        {"policy-tide", "interval=1 first_block_every_step=false prefetch=false"},
        {"policy-tide", "interval=2 first_block_every_step=true prefetch=false"},
        {"policy-tide", "interval=3 first_block_every_step=false prefetch=true"},
        {"policy-tide", "interval=8 first_block_every_step=true prefetch=true"},
        {"policy-tide", "interval=32 first_block_every_step=false prefetch=false"},
        {"policy-lru", NULL},
        {"policy-static", NULL},
    };
    int checked = 0;
    for (int trial = 0; trial < 12; trial++) {
        const char *path = tpath("prop.trc");
        const uint32_t experts = trial % 3 ? 16 : 32;
        CHECK_EQ_INT(synth(path, 2, experts, trial % 2 ? 2 : 4, 0.3 + 0.2 * (trial % 4),
                           0.92 + 0.015 * (trial % 5), 3, 100 + (uint64_t)trial),
                     TIDE_OK);
        struct tide_cost c;
        struct tide_sim_trace *t = load_with_cost(path, &s, trial % 2 == 0, false, &c);
        if (!t)
            continue;
        const int budgets[2] = {1 + trial % 4, (int)experts / 2};
        for (int bi = 0; bi < 2; bi++) {
            struct tide_sim_oracle o;
            if (tide_sim_oracle(t, budgets[bi], NULL, &c, NULL, &o) != TIDE_OK) {
                CHECK(0);
                continue;
            }
            for (size_t k = 0; k < sizeof pols / sizeof pols[0] + 2; k++) {
                struct tide_sim_config cfg;
                if (k < sizeof pols / sizeof pols[0]) {
                    CHECK(plug_config(&pg, pols[k].name, pols[k].opts, budgets[bi], &cfg));
                } else {
                    cfg = (struct tide_sim_config){
                        .label = k == sizeof pols / sizeof pols[0] ? "belady" : "best-static",
                        .kind = k == sizeof pols / sizeof pols[0] ? SIM_BELADY : SIM_BEST_STATIC,
                        .budget = budgets[bi]};
                }
                struct tide_sim_result r;
                if (tide_sim_run(t, &cfg, &c, NULL, &r) != TIDE_OK) {
                    CHECK(0);
                    continue;
                }
                if (!(o.bound_us <= r.total.us * (1 + 1e-9)))
                    fprintf(stderr, "trial %d budget %d: %s %s: %.3f us < oracle %.3f us\n", trial,
                            budgets[bi], cfg.label, k < 7 && pols[k].opts ? pols[k].opts : "",
                            r.total.us, o.bound_us);
                CHECK(o.bound_us <= r.total.us * (1 + 1e-9));
                /* Per layer too. */
                for (uint32_t l = 0; l < t->h.n_layers; l++)
                    CHECK(o.layer_bound_us[l] <= r.layer[l].us * (1 + 1e-9));
                checked++;
                tide_sim_result_free(&r);
            }
            tide_sim_oracle_free(&o);
        }
        tide_cost_free(&c);
        tide_sim_trace_free(t);
    }
    CHECK_EQ_INT(checked, 12 * 2 * 9);
    plug_close(&pg);
}

/* Hindsight policies: best static is the best static set; Belady is a full
 * swap that never does worse than LRU when every active expert fits. */
static void test_hindsight(void)
{
    struct plug pg;
    if (plug_open(&pg) != TIDE_OK) {
        CHECK(0);
        return;
    }
    const char *path = tpath("hs.trc");
    CHECK_EQ_INT(synth(path, 2, 32, 2, 1.2, 0.85, 4, 77), TIDE_OK);
    uint64_t s = 5;
    struct tide_cost c = {0};
    struct tide_sim_trace *t = load_with_cost(path, &s, false, false, &c);
    for (int B = 4; t && B <= 32; B += 14) {
        struct tide_sim_config st,
            bs = {.label = "best-static", .kind = SIM_BEST_STATIC, .budget = B};
        CHECK(plug_config(&pg, "policy-static", NULL, B, &st));
        struct tide_sim_result a, b;
        CHECK_EQ_INT(tide_sim_run(t, &st, &c, NULL, &a), TIDE_OK);
        CHECK_EQ_INT(tide_sim_run(t, &bs, &c, NULL, &b), TIDE_OK);
        CHECK(b.total.hit_rows >= a.total.hit_rows);
        CHECK_EQ_INT(b.total.promotions, 0);
        if (B >= 32)
            CHECK_EQ_INT(b.total.miss_rows, 0);
        tide_sim_result_free(&a);
        tide_sim_result_free(&b);
    }
    tide_cost_free(&c);
    tide_sim_trace_free(t);
    plug_close(&pg);
}

/* ---- a trace's prompts replayed as a batch ---------------------------------- */

/* Write prompt A (prefill {0}, block 0: step 0 {1 1 1}, step 1 {2 2}) and B
 * (prefill {3}, block 0: step 0 {1}, step 1 {2}, step 2 {2 3}), one layer of
 * 4 experts, top-1. */
static int two_prompts(const char *path)
{
    struct tide_trace_header h = {.n_layers = 1,
                                  .n_experts = 4,
                                  .top_k = 1,
                                  .hidden = 64,
                                  .inter = 32,
                                  .expert_bytes = tide_expert_bytes(64, 32),
                                  .block_length = 4,
                                  .steps = 4,
                                  .threshold = 0.9,
                                  .model = "two"};
    struct tide_trace_writer *w;
    int rc = tide_trace_writer_open(path, false, true, &h, &w);
    if (rc)
        return rc;
    static const int32_t a0[] = {0}, a1[] = {1, 1, 1}, a2[] = {2, 2}, b0[] = {3}, b1[] = {1},
                         b2[] = {2}, b3[] = {2, 3};
    rc = tide_trace_prompt(w, 0, 1);
    rc = rc ? rc : tide_trace_route(w, TIDE_TRACE_PREFILL, 0, 1, a0);
    rc = rc ? rc : tide_trace_block(w, 0, true);
    rc = rc ? rc : tide_trace_step(w, 0);
    rc = rc ? rc : tide_trace_route(w, TIDE_TRACE_STEP, 0, 3, a1);
    rc = rc ? rc : tide_trace_step(w, 1);
    rc = rc ? rc : tide_trace_route(w, TIDE_TRACE_STEP, 0, 2, a2);
    rc = rc ? rc : tide_trace_prompt(w, 1, 1);
    rc = rc ? rc : tide_trace_route(w, TIDE_TRACE_PREFILL, 0, 1, b0);
    rc = rc ? rc : tide_trace_block(w, 0, true);
    rc = rc ? rc : tide_trace_step(w, 0);
    rc = rc ? rc : tide_trace_route(w, TIDE_TRACE_STEP, 0, 1, b1);
    rc = rc ? rc : tide_trace_step(w, 1);
    rc = rc ? rc : tide_trace_route(w, TIDE_TRACE_STEP, 0, 1, b2);
    rc = rc ? rc : tide_trace_step(w, 2);
    rc = rc ? rc : tide_trace_route(w, TIDE_TRACE_STEP, 0, 2, b3);
    int crc = tide_trace_writer_close(w, rc == TIDE_OK);
    return rc ? rc : crc;
}

/* "P0 P1+ R... B0 S0 R..." : the tape's events, and each route's counts. */
static void tape_str(const struct tide_sim_trace *t, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < t->n_ev && at < len; i++) {
        const struct sim_event *ev = &t->ev[i];
        static const char kind[] = "?PBSR";
        at += (size_t)snprintf(buf + at, len - at, "%s%c%d%s", i ? " " : "", kind[ev->type],
                               ev->type == SIM_EV_ROUTE ? ev->phase : ev->a,
                               ev->type == SIM_EV_PROMPT && ev->first ? "+" : "");
        if (ev->type != SIM_EV_ROUTE)
            continue;
        const struct tide_solver_fwd *f = &t->fwd[ev->a][ev->fwd];
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "{");
        for (uint32_t k = 0; k < f->n_active; k++)
            at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "%s%u:%u", k ? "," : "",
                                   f->ids[k], f->cnt[k]);
        at += (size_t)snprintf(buf + at, at < len ? len - at : 0, "}");
    }
}

static void test_batch_tape(void)
{
    const char *path = tpath("two.trc");
    CHECK_EQ_INT(two_prompts(path), TIDE_OK);
    struct tide_sim_trace *t = NULL, *b = NULL;
    CHECK_EQ_INT(tide_sim_trace_load(path, &t), TIDE_OK);
    if (!t)
        return;
    char want[512], got[512];
    /* Batch 1: the tape as recorded. */
    tape_str(t, want, sizeof want);
    CHECK_EQ_INT(tide_sim_trace_batch(t, 1, &b), TIDE_OK);
    if (b) {
        tape_str(b, got, sizeof got);
        if (strcmp(got, want))
            fprintf(stderr, "batch 1 tape:\n  got  %s\n  want %s\n", got, want);
        CHECK(!strcmp(got, want));
        tide_sim_trace_free(b);
    }
    /* Batch 2: B joins the running batch (no phase reset), each round sums
     * both; A leads; when A leaves, B takes over announcing its block 0, and
     * the dispatcher stays in KV until B's next step record. */
    CHECK_EQ_INT(tide_sim_trace_batch(t, 2, &b), TIDE_OK);
    if (b) {
        tape_str(b, got, sizeof got);
        static const char two[] = "P0 P1+ R0{0:1,3:1} B0 S0 R1{1:4} S1 R1{2:3} B0 R2{2:1,3:1}";
        if (strcmp(got, two))
            fprintf(stderr, "batch 2 tape:\n  got  %s\n  want %s\n", got, two);
        CHECK(!strcmp(got, two));
        CHECK_EQ_INT(b->n_fwd[0], 4);
        CHECK_EQ_INT(b->max_tokens, 4);
        CHECK_EQ_INT(b->assignments, t->assignments);
        CHECK_EQ_INT(b->steps, 2); /* the lead's clock: its step records */
        CHECK_EQ_INT(b->blocks, 2);
        CHECK_EQ_INT(b->tokens_generated, t->tokens_generated);
        tide_sim_trace_free(b);
    }
    capture();
    CHECK_EQ_INT(tide_sim_trace_batch(t, 0, &b), TIDE_E_RANGE);
    release();
    tide_sim_trace_free(t);
    /* Synthetic traces of 5 prompts: every assignment kept, forwards merged. */
    struct tide_synth_params sp = {
        .n_layers = 3,
        .n_experts = 16,
        .top_k = 2,
        .hidden = 64,
        .inter = 32,
        .block_length = 8,
        .steps = 8,
        .min_steps = 2,
        .blocks = 3,
        .prompts = 5,
        .prompt_len = 12,
        .skew = 1.0,
        .similarity = 0.9,
        .drift = 0.5,
        .seed = 3,
    };
    double rate;
    CHECK_EQ_INT(tide_synth_calibrate(&sp, &rate), TIDE_OK);
    CHECK_EQ_INT(tide_synth_write(tpath("five.trc"), true, &sp, rate), TIDE_OK);
    CHECK_EQ_INT(tide_sim_trace_load(tpath("five.trc"), &t), TIDE_OK);
    if (!t)
        return;
    for (int B = 1; B <= 6; B++) {
        CHECK_EQ_INT(tide_sim_trace_batch(t, B, &b), TIDE_OK);
        if (!b)
            continue;
        for (uint32_t l = 0; l < 3; l++) {
            uint64_t tok_t = 0, tok_b = 0;
            for (size_t j = 0; j < t->n_fwd[l]; j++)
                tok_t += t->fwd[l][j].tokens;
            for (size_t j = 0; j < b->n_fwd[l]; j++)
                tok_b += b->fwd[l][j].tokens;
            CHECK_EQ_INT(tok_b, tok_t);
            CHECK(b->n_fwd[l] <= t->n_fwd[l] && b->n_fwd[l] * (size_t)B >= t->n_fwd[l]);
        }
        CHECK_EQ_INT(b->assignments, t->assignments);
        CHECK(b->max_tokens <= (uint32_t)B * t->max_tokens);
        CHECK_EQ_INT(b->prompts, 5);
        tide_sim_trace_free(b);
    }
    tide_sim_trace_free(t);
}

int main(void)
{
    if (!st_begin())
        return 1;
    TEST_RUN(test_profile_load);
    TEST_RUN(test_cost_model);
    TEST_RUN(test_solver_intervals);
    TEST_RUN(test_solver_budgets);
    TEST_RUN(test_rank_and_refresh);
    TEST_RUN(test_evaluator_matches_plugin);
    TEST_RUN(test_oracle_exact_on_tiny);
    TEST_RUN(test_oracle_property);
    TEST_RUN(test_oracle_progress);
    TEST_RUN(test_hindsight);
    TEST_RUN(test_batch_tape);
    st_end();
    TEST_DONE();
}
