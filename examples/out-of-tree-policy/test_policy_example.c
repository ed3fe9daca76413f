/* Unit test of policy-example: the policy driven directly with hand-written
 * routing counts, through its descriptor and ops table as the engine would,
 * with options built by the public tide_opts_create(). Every plan is checked
 * against the core's plan rules and applied to a simulated residency map.
 * Exit status 0 when every check holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tide/log.h"
#include "tide/option.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

static int checks, failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_PLAN(got, want)                                                                      \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        checks++;                                                                                  \
        if (strcmp(g_, w_)) {                                                                      \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: plan \"%s\", expected \"%s\"\n", __FILE__, __LINE__, g_, w_);  \
        }                                                                                          \
    } while (0)

enum { MAX_E = 16 };

/* One policy instance and the residency it has built. */
struct fx {
    const struct tide_policy_ops *ops;
    struct tide_opts *opts;
    struct tide_policy *p;
    struct tide_policy_shape shape;
    uint8_t resident[4][MAX_E];
    uint32_t counts[MAX_E];
    int32_t promote[MAX_E], evict[MAX_E];
    uint8_t place[MAX_E];
    char text[256];
};

static char log_last[512];

static void log_keep(void *user, enum tide_log_level level, const char *msg)
{
    snprintf(log_last, sizeof log_last, "%s", msg);
}

static int fx_open(struct fx *f, const char *const *opts, int n_opts, int layers, int experts,
                   int budget)
{
    memset(f, 0, sizeof *f);
    const struct tide_plugin_desc *d = tide_plugin_entry(TIDE_ABI_VERSION);
    f->ops = d->ops;
    int rc = tide_opts_create(d->name, d->options, opts, n_opts, &f->opts);
    if (rc != TIDE_OK)
        return rc;
    f->shape = (struct tide_policy_shape){.size = sizeof f->shape,
                                          .n_layers = layers,
                                          .n_moe_layers = layers,
                                          .n_experts = experts,
                                          .top_k = 2,
                                          .expert_bytes = 1,
                                          .budget = budget};
    if ((rc = f->ops->create(&f->shape, f->opts, &f->p)) != TIDE_OK)
        return rc;
    for (int l = 0; l < layers; l++) {
        int32_t init[MAX_E];
        int n = f->ops->initial(f->p, l, init);
        CHECK(n >= 0 && n <= budget);
        for (int i = 0; i < n; i++)
            f->resident[l][init[i]] = 1;
    }
    return TIDE_OK;
}

static void fx_close(struct fx *f)
{
    if (f->p)
        f->ops->destroy(f->p);
    tide_opts_destroy(f->opts);
}

/* The core's plan rules (core/runtime/plan_check.c), restated. */
static const char *fx_rule_broken(const struct fx *f, int layer, const struct tide_plan *pl)
{
    uint8_t mark[MAX_E];
    memcpy(mark, f->resident[layer], sizeof mark);
    int held = 0;
    for (int e = 0; e < f->shape.n_experts; e++)
        held += mark[e];
    int free_slots = f->shape.budget - held;
    if (pl->n_promote < 0 || pl->n_promote > f->shape.budget)
        return "too many promotions";
    for (int i = 0; i < pl->n_promote; i++) {
        int e = pl->promote[i], v = pl->evict[i];
        if (e < 0 || e >= f->shape.n_experts || mark[e])
            return "promotes a resident or unknown expert";
        if (v < 0 && free_slots-- <= 0)
            return "no free slot";
        if (v >= 0 && mark[v] != 1)
            return "evicts a non-resident";
        mark[e] = 2;
        if (v >= 0)
            mark[v] = 3;
    }
    for (int e = 0; e < f->shape.n_experts; e++)
        if (f->counts[e] && pl->place[e] == TIDE_PLACE_DEVICE && mark[e] != 1 && mark[e] != 2)
            return "places a non-resident on the device";
    return NULL;
}

/* Plan with counts "EXPERT:COUNT ...", check, apply; the plan as text:
 * "P[4<0 5<-] D[1 4 5] H[7]". */
static const char *fx_plan(struct fx *f, int layer, int step, const char *counts)
{
    memset(f->counts, 0, sizeof f->counts);
    for (const char *p = counts; p && *p;) {
        int e, c, used;
        if (sscanf(p, "%d:%d%n", &e, &c, &used) != 2)
            break;
        f->counts[e] = (uint32_t)c;
        p += used;
    }
    memset(f->place, 0xff, sizeof f->place);
    struct tide_plan pl = {.promote = f->promote, .evict = f->evict, .place = f->place};
    const struct tide_policy_view v = {.layer = layer,
                                       .block = 0,
                                       .step = step,
                                       .counts = f->counts,
                                       .resident = f->resident[layer]};
    int rc = f->ops->plan(f->p, &v, &pl);
    if (rc != TIDE_OK) {
        snprintf(f->text, sizeof f->text, "ERROR %d", rc);
        return f->text;
    }
    const char *bad = fx_rule_broken(f, layer, &pl);
    if (bad) {
        snprintf(f->text, sizeof f->text, "INVALID: %s", bad);
        return f->text;
    }
    size_t k = (size_t)snprintf(f->text, sizeof f->text, "P[");
    for (int i = 0; i < pl.n_promote; i++) {
        char ev[16] = "-";
        if (pl.evict[i] >= 0)
            snprintf(ev, sizeof ev, "%d", pl.evict[i]);
        k += (size_t)snprintf(f->text + k, sizeof f->text - k, "%s%d<%s", i ? " " : "",
                              pl.promote[i], ev);
        f->resident[layer][pl.promote[i]] = 1;
        if (pl.evict[i] >= 0)
            f->resident[layer][pl.evict[i]] = 0;
    }
    for (int where = 0; where < 2; where++) {
        k += (size_t)snprintf(f->text + k, sizeof f->text - k, "] %s[", where ? "H" : "D");
        int first = 1;
        for (int e = 0; e < f->shape.n_experts; e++)
            if (f->counts[e] && f->place[e] == (where ? TIDE_PLACE_HOST : TIDE_PLACE_DEVICE)) {
                k += (size_t)snprintf(f->text + k, sizeof f->text - k, "%s%d", first ? "" : " ", e);
                first = 0;
            }
    }
    snprintf(f->text + k, sizeof f->text - k, "]");
    return f->text;
}

static void test_descriptor(void)
{
    const struct tide_plugin_desc *d = tide_plugin_entry(TIDE_ABI_VERSION);
    CHECK(d != NULL);
    CHECK(tide_plugin_entry(TIDE_ABI_VERSION + 1) == NULL);
    CHECK(d->kind == TIDE_PLUGIN_POLICY);
    CHECK(!strcmp(d->name, "policy-example"));
    const struct tide_policy_ops *ops = d->ops;
    CHECK(ops->size >= TIDE_POLICY_OPS_MIN_SIZE);
    /* Option values are checked against the table, as in an INI file. */
    struct tide_opts *o = NULL;
    const char *zero[] = {"decay=0"}, *big[] = {"decay=1.5"}, *typo[] = {"decy=0.5"};
    CHECK(tide_opts_create(d->name, d->options, zero, 1, &o) == TIDE_E_CONFIG && !o);
    CHECK(strstr(log_last, "expected a number in (0,1]") != NULL);
    CHECK(tide_opts_create(d->name, d->options, big, 1, &o) == TIDE_E_CONFIG);
    CHECK(tide_opts_create(d->name, d->options, typo, 1, &o) == TIDE_E_CONFIG);
    CHECK(strstr(log_last, "did you mean 'decay'?") != NULL);
}

static void test_admission(void)
{
    struct fx f;
    const char *opts[] = {"decay=0.5"};
    CHECK(fx_open(&f, opts, 1, 1, 8, 2) == TIDE_OK);
    CHECK(f.resident[0][0] && f.resident[0][1]);
    /* Full layer: the coldest idle resident (ties: the higher id) makes room. */
    CHECK_PLAN(fx_plan(&f, 0, 0, "2:3"), "P[2<1] D[2] H[]");
    /* scores 0:0 1:1 2:1.5 -> 1 is hotter than the idle 0. */
    CHECK_PLAN(fx_plan(&f, 0, 1, "1:1"), "P[1<0] D[1] H[]");
    /* Residents active now are never evicted; 5 is hotter than nothing idle. */
    CHECK_PLAN(fx_plan(&f, 0, 2, "1:2 2:2 5:9"), "P[] D[1 2] H[5]");
    /* Hot residents keep a one-step newcomer out. */
    CHECK_PLAN(fx_plan(&f, 0, 3, "1:4 2:4"), "P[] D[1 2] H[]");
    CHECK_PLAN(fx_plan(&f, 0, 4, "6:1"), "P[] D[] H[6]");
    /* ...until it stays: at 1.5 it overtakes the decaying 1 (1.3125). */
    CHECK_PLAN(fx_plan(&f, 0, 5, "6:1"), "P[6<1] D[6] H[]");
    fx_close(&f);
}

static void test_limits(void)
{
    struct fx f;
    const char *opts[] = {"max_promotions=1"};
    CHECK(fx_open(&f, opts, 1, 2, 8, 4) == TIDE_OK);
    /* Free slots: none (budget 4, residents 0..3); 1 promotion per step. */
    CHECK_PLAN(fx_plan(&f, 1, 0, "5:3 6:2 7:1"), "P[5<3] D[5] H[6 7]");
    /* Layers are independent. */
    CHECK_PLAN(fx_plan(&f, 0, 0, "0:1 4:1"), "P[4<3] D[0 4] H[]");
    fx_close(&f);
    /* Budget 0: every expert runs on the host. */
    CHECK(fx_open(&f, NULL, 0, 1, 8, 0) == TIDE_OK);
    CHECK_PLAN(fx_plan(&f, 0, 0, "0:1 3:5"), "P[] D[] H[0 3]");
    fx_close(&f);
    /* Free slots fill before anything is evicted. */
    CHECK(fx_open(&f, NULL, 0, 1, 8, 8) == TIDE_OK);
    CHECK_PLAN(fx_plan(&f, 0, 0, "7:1"), "P[] D[7] H[]");
    fx_close(&f);
    /* A layer beyond the shape is refused. */
    CHECK(fx_open(&f, NULL, 0, 1, 8, 2) == TIDE_OK);
    CHECK_PLAN(fx_plan(&f, 3, 0, "1:1"), "ERROR -1");
    fx_close(&f);
}

int main(void)
{
    tide_log_set_sink(log_keep, NULL);
    test_descriptor();
    test_admission();
    test_limits();
    tide_log_set_sink(NULL, NULL);
    fprintf(stderr, "%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
