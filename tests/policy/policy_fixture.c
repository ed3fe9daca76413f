/* Policy test fixture: see policy_fixture.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_fixture.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

static char pf_log_buf[16384];
static size_t pf_log_len;

static void pf_sink(void *user, enum tide_log_level level, const char *msg)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    int n = snprintf(pf_log_buf + pf_log_len, sizeof pf_log_buf - pf_log_len, "%s: %s\n",
                     names[level], msg);
    if (n > 0)
        pf_log_len += (size_t)n < sizeof pf_log_buf - pf_log_len
                          ? (size_t)n
                          : sizeof pf_log_buf - pf_log_len - 1;
}

void pf_log_capture(void)
{
    pf_log_len = 0;
    pf_log_buf[0] = 0;
    tide_log_set_sink(pf_sink, NULL);
}

const char *pf_log_text(void)
{
    return pf_log_buf;
}

void pf_log_release(void)
{
    tide_log_set_sink(NULL, NULL);
}

int pf_load(struct pf *f, const char *name)
{
    memset(f, 0, sizeof *f);
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (!dir) {
        fprintf(stderr, "TIDE_PLUGIN_DIR is not set (run through ctest)\n");
        return TIDE_E_NOTFOUND;
    }
    int rc = tide_plugins_scan_dirs(&dir, 1, &f->set);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_plugin *pl = tide_plugins_get(f->set, name, TIDE_PLUGIN_POLICY, "test");
    if (!pl)
        return TIDE_E_NOTFOUND;
    f->desc = pl->desc;
    f->ops = f->desc->ops;
    f->cfg = tide_config_create();
    if (!f->cfg)
        return TIDE_E_NOMEM;
    return tide_config_add_section(f->cfg, f->desc->name, f->desc->options, f->desc->name, NULL);
}

int pf_opt(struct pf *f, const char *key, const char *value)
{
    return tide_config_set_value(f->cfg, f->desc->name, key, value, "test");
}

/* Check the ids initial() wrote for one layer and mark them resident. */
static int pf_take_initial(struct pf *f, int layer, const int32_t *ids, int n)
{
    const int ne = f->shape.n_experts;
    uint8_t *res = &f->resident[(size_t)layer * (size_t)ne];
    if (n < 0 || n > f->shape.budget) {
        fprintf(stderr, "initial(layer %d) returned %d, budget %d\n", layer, n, f->shape.budget);
        return TIDE_E_INVAL;
    }
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= ne || res[ids[i]]) {
            fprintf(stderr, "initial(layer %d) id %d is out of range or repeated\n", layer, ids[i]);
            return TIDE_E_INVAL;
        }
        res[ids[i]] = 1;
    }
    return TIDE_OK;
}

int pf_create(struct pf *f, int n_moe_layers, int n_experts, int budget)
{
    f->shape = (struct tide_policy_shape){
        .size = sizeof(struct tide_policy_shape),
        .n_layers = n_moe_layers + 1,
        .n_moe_layers = n_moe_layers,
        .n_experts = n_experts,
        .top_k = n_experts < 8 ? n_experts : 8,
        .expert_bytes = 6291456,
        .budget = budget,
        .block_length = f->block_length,
        .max_steps = f->max_steps,
        .costs = f->costs,
    };
    int rc = f->ops->create(&f->shape, tide_config_section(f->cfg, f->desc->name), &f->p);
    if (rc != TIDE_OK) {
        f->p = NULL;
        return rc;
    }
    size_t ne = (size_t)(n_experts > 0 ? n_experts : 1);
    f->resident = calloc((size_t)(n_moe_layers > 0 ? n_moe_layers : 1) * ne, 1);
    f->counts = calloc(ne, sizeof *f->counts);
    f->promote = calloc(ne, sizeof *f->promote);
    f->evict = calloc(ne, sizeof *f->evict);
    f->place = calloc(ne, 1);
    int32_t *ids = calloc(ne, sizeof *ids);
    if (!f->resident || !f->counts || !f->promote || !f->evict || !f->place || !ids) {
        free(ids);
        return TIDE_E_NOMEM;
    }
    for (int l = 0; l < n_moe_layers && rc == TIDE_OK; l++)
        rc = pf_take_initial(f, l, ids, f->ops->initial(f->p, l, ids));
    free(ids);
    return rc;
}

int pf_load_opts(struct pf *f, const char *plugin, const char *opts)
{
    int rc = pf_load(f, plugin);
    char kv[512], *save = NULL;
    snprintf(kv, sizeof kv, "%s", opts ? opts : "");
    for (char *tok = strtok_r(kv, " ", &save); tok && rc == TIDE_OK;
         tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return TIDE_E_INVAL;
        *eq = 0;
        rc = pf_opt(f, tok, eq + 1);
    }
    return rc;
}

const struct tide_opts *pf_section(const struct pf *f)
{
    return f->cfg && f->desc ? tide_config_section(f->cfg, f->desc->name) : NULL;
}

int pf_open(struct pf *f, const char *plugin, const char *opts, int n_moe_layers, int n_experts,
            int budget)
{
    int rc = pf_load_opts(f, plugin, opts);
    return rc == TIDE_OK ? pf_create(f, n_moe_layers, n_experts, budget) : rc;
}

int pf_open_costs(struct pf *f, const char *plugin, const char *opts, int n_moe_layers,
                  int n_experts, int budget, const struct tide_policy_costs *costs, int max_steps)
{
    int rc = pf_load_opts(f, plugin, opts);
    f->costs = costs;
    f->max_steps = max_steps;
    return rc == TIDE_OK ? pf_create(f, n_moe_layers, n_experts, budget) : rc;
}

void pf_prompt(struct pf *f, uint32_t prompt_len, const float *vec, int dim)
{
    if (TIDE_OPS_HAS(f->ops, prompt_begin))
        f->ops->prompt_begin(f->p, prompt_len, vec, dim);
}

bool pf_expect_ok(int rc, const char *file, int line, int *checks, int *failures)
{
    ++*checks;
    if (rc == TIDE_OK)
        return true;
    ++*failures;
    fprintf(stderr, "%s:%d: setting up the policy failed: %s\n", file, line, tide_status_str(rc));
    return false;
}

bool pf_desc_ok(const struct pf *f, const char *name, const char *options)
{
    const struct tide_plugin_desc *d = f->desc;
    if (!d || strcmp(d->name, name) || strcmp(d->version, "0.1.0") ||
        d->kind != TIDE_PLUGIN_POLICY || f->ops->size != sizeof(struct tide_policy_ops)) {
        fprintf(stderr, "descriptor of %s: wrong name, version, kind or ops size\n", name);
        return false;
    }
    char have[512] = "";
    for (int i = 0; d->options && d->options[i].name; i++) {
        size_t n = strlen(have);
        snprintf(have + n, sizeof have - n, "%s%s", i ? " " : "", d->options[i].name);
    }
    if (strcmp(have, options ? options : "")) {
        fprintf(stderr, "options of %s: \"%s\", expected \"%s\"\n", name, have,
                options ? options : "");
        return false;
    }
    return true;
}

void pf_block(struct pf *f, int block, bool first_generated)
{
    f->block = block;
    f->ops->block_begin(f->p, block, first_generated);
}

const char *pf_plan(struct pf *f, int layer, int step, const char *counts)
{
    uint32_t *c = calloc((size_t)f->shape.n_experts, sizeof *c);
    if (!c)
        return "ERROR nomem";
    for (const char *s = counts; s && *s;) {
        int e, n, used;
        if (sscanf(s, " %d:%d%n", &e, &n, &used) != 2 || e < 0 || e >= f->shape.n_experts) {
            free(c);
            return "ERROR bad counts spec in the test";
        }
        c[e] = (uint32_t)n;
        s += used;
        while (*s == ' ')
            s++;
    }
    const char *t = pf_plan_counts(f, layer, step, c);
    free(c);
    return t;
}

/* Append to f->text. */
static void pf_add(struct pf *f, const char *fmt, ...) TIDE_PRINTF(2, 3);

static void pf_add(struct pf *f, const char *fmt, ...)
{
    size_t len = strlen(f->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->text + len, sizeof f->text - len, fmt, ap);
    va_end(ap);
}

static const char *pf_invalid(struct pf *f, const char *fmt, ...) TIDE_PRINTF(2, 3);

static const char *pf_invalid(struct pf *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strcpy(f->text, "INVALID: ");
    vsnprintf(f->text + 9, sizeof f->text - 9, fmt, ap);
    va_end(ap);
    return f->text;
}

/* Apply the promotions to res, checking each against the plan rules. */
static const char *pf_apply(struct pf *f, uint8_t *res, int n_promote)
{
    const int ne = f->shape.n_experts, budget = f->shape.budget;
    if (n_promote < 0 || n_promote > budget)
        return pf_invalid(f, "n_promote %d outside 0..budget %d", n_promote, budget);
    int n_res = 0;
    for (int e = 0; e < ne; e++)
        n_res += res[e];
    for (int i = 0; i < n_promote; i++) {
        int32_t e = f->promote[i], x = f->evict[i];
        if (e < 0 || e >= ne || res[e])
            return pf_invalid(f, "promote[%d] = %d is out of range or already resident", i, e);
        if (f->counts[e] == 0)
            return pf_invalid(f, "promote[%d] = %d has no tokens", i, e);
        if (x == -1) {
            if (n_res >= budget)
                return pf_invalid(f, "evict[%d] = -1 but the layer is full", i);
            n_res++;
        } else {
            if (x < 0 || x >= ne || !res[x])
                return pf_invalid(f, "evict[%d] = %d is not resident", i, x);
            res[x] = 0;
        }
        res[e] = 1;
    }
    if (n_res > budget)
        return pf_invalid(f, "%d residents exceed the budget %d", n_res, budget);
    return NULL;
}

const char *pf_plan_counts(struct pf *f, int layer, int step, const uint32_t *counts)
{
    const int ne = f->shape.n_experts;
    uint8_t *res = &f->resident[(size_t)layer * (size_t)ne];
    memcpy(f->counts, counts, (size_t)ne * sizeof *counts);
    memset(f->place, 0xEE, (size_t)ne);
    struct tide_plan plan = {.promote = f->promote, .evict = f->evict, .place = f->place};
    struct tide_policy_view v = {
        .layer = layer, .block = f->block, .step = step, .counts = f->counts, .resident = res};
    int rc = f->ops->plan(f->p, &v, &plan);
    if (rc != TIDE_OK) {
        snprintf(f->text, sizeof f->text, "ERROR %d", rc);
        return f->text;
    }
    /* Evictions and promotions act on the map before placement is checked. */
    const char *bad = pf_apply(f, res, plan.n_promote);
    if (bad)
        return bad;
    for (int e = 0; e < ne; e++) {
        if (!counts[e])
            continue;
        if (f->place[e] != TIDE_PLACE_DEVICE && f->place[e] != TIDE_PLACE_HOST)
            return pf_invalid(f, "active expert %d has no place (%d)", e, f->place[e]);
        if (f->place[e] == TIDE_PLACE_DEVICE && !res[e])
            return pf_invalid(f, "expert %d runs on the device but is not resident", e);
    }
    f->text[0] = 0;
    pf_add(f, "P[");
    for (int i = 0; i < plan.n_promote; i++) {
        if (f->evict[i] < 0)
            pf_add(f, "%s%d<-", i ? " " : "", f->promote[i]);
        else
            pf_add(f, "%s%d<%d", i ? " " : "", f->promote[i], f->evict[i]);
    }
    for (int where = TIDE_PLACE_DEVICE; where <= TIDE_PLACE_HOST; where++) {
        pf_add(f, "] %s[", where == TIDE_PLACE_DEVICE ? "D" : "H");
        bool first = true;
        for (int e = 0; e < ne; e++) {
            if (counts[e] && f->place[e] == where) {
                pf_add(f, "%s%d", first ? "" : " ", e);
                first = false;
            }
        }
    }
    pf_add(f, "]");
    return f->text;
}

const char *pf_residents(struct pf *f, int layer)
{
    const int ne = f->shape.n_experts;
    const uint8_t *res = &f->resident[(size_t)layer * (size_t)ne];
    f->text[0] = 0;
    for (int e = 0; e < ne; e++)
        if (res[e])
            pf_add(f, "%s%d", f->text[0] ? " " : "", e);
    return f->text;
}

void pf_close(struct pf *f)
{
    if (f->p)
        f->ops->destroy(f->p);
    free(f->resident);
    free(f->counts);
    free(f->promote);
    free(f->evict);
    free(f->place);
    tide_config_destroy(f->cfg);
    tide_plugins_free(f->set);
    memset(f, 0, sizeof *f);
}
