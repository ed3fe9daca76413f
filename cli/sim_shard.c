/* `tide sim --shard K/N --out DIR` and `tide sim merge` (docs/cluster.md):
 * a shard replays configurations i with i mod N = K and writes its rows,
 * exactly (rows.json), into a result folder; the merge reads them back in
 * the unsharded order and runs the rest of `tide sim` on them: the table,
 * the interval choices, --layer-budgets, results.csv and the plots. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_cli.h"
#include "tide/log.h"
#include "tide/shipped.h"
#include "tide/status.h"

struct sim_out {
    char csv[4200], plot[4200];
    bool ready;              /* the --out folder is ours to fill (new or empty) */
    bool created;            /* and was made here */
    json_t *trace, *profile; /* fingerprints of the inputs */
    json_t *config;          /* the configuration before the replays */
    char trace_abs[PATH_MAX], profile_abs[PATH_MAX];
    /* tide sim merge */
    bool merge;
    struct cli_parts parts;
    json_t **rows; /* [parts.count]: each shard's rows.json */
    long configs;  /* of the grid */
};

int sim_shard_arg(struct sim_cli *s, int argc, char **argv, int *i)
{
    const bool shard = !strcmp(argv[*i], "--shard"), out = !strcmp(argv[*i], "--out");
    if (!shard && !out)
        return 0;
    if (*i + 1 >= argc) {
        tide_error("%s needs a value", argv[*i]);
        return -1;
    }
    const char *v = argv[++*i];
    if (out) {
        s->out = v;
        return 1;
    }
    return cli_shard_parse(v, "--shard", &s->shard) == TIDE_OK ? 1 : -1;
}

static int sim_fingerprint(const char *path, json_t **fp, char *abs)
{
    int rc = cli_file_fingerprint(path, true, fp);
    if (rc == TIDE_OK && !realpath(path, abs))
        snprintf(abs, PATH_MAX, "%s", path);
    return rc;
}

/* In a merge: is this file the one the shards read? */
static int sim_same_input(const struct sim_out *o, const char *key, const json_t *fp,
                          const char *path, const char *flag)
{
    const json_t *want = json_object_get(o->parts.by_index[0]->m, key);
    if (json_equal((json_t *)want, (json_t *)fp))
        return TIDE_OK;
    char *a = json_dumps(want, JSON_COMPACT | JSON_ENCODE_ANY);
    char *b = json_dumps(fp, JSON_COMPACT | JSON_ENCODE_ANY);
    tide_error("tide sim merge: the %s %s is not the one the shards replayed (%s there, %s "
               "here); name the right file with %s",
               key, path ? path : "(none)", a ? a : "?", b ? b : "?", flag);
    free(a);
    free(b);
    return TIDE_E_CONFIG;
}

int sim_out_begin(struct sim_cli *s)
{
    if (!s->out && !s->shard.count && !s->o)
        return TIDE_OK;
    if (!s->out) {
        tide_error("--shard %d/%d needs --out DIR: the shard's result folder, for tide sim merge",
                   s->shard.index, s->shard.count);
        return TIDE_E_CONFIG;
    }
    if (s->csv || s->plot) {
        tide_error("--out %s writes %s/results.csv and %s/plots/; drop --csv and --plot", s->out,
                   s->out, s->out);
        return TIDE_E_CONFIG;
    }
    if (s->shard.count && s->metrics) {
        tide_error("--metrics replays one configuration; it does not go with --shard");
        return TIDE_E_CONFIG;
    }
    if (!s->o && !(s->o = calloc(1, sizeof *s->o)))
        return TIDE_E_NOMEM;
    struct sim_out *o = s->o;
    int rc = sim_fingerprint(s->trace_path, &o->trace, o->trace_abs);
    /* The profile the replay loads: a shipped one is found as the loader
     * finds it (config/profiles/X.ini from any folder), not only here. */
    char prof[PATH_MAX];
    if (rc == TIDE_OK && s->profile_path &&
        (rc = tide_shipped_path(s->profile_path, "--profile", prof, sizeof prof)) == TIDE_OK)
        rc = sim_fingerprint(prof, &o->profile, o->profile_abs);
    else if (rc == TIDE_OK && !s->profile_path)
        o->profile = json_null();
    if (rc == TIDE_OK && o->merge &&
        (rc = sim_same_input(o, "trace", o->trace, s->trace_path, "--trace")) == TIDE_OK)
        rc = sim_same_input(o, "profile", o->profile, s->profile_path, "--profile");
    if (rc == TIDE_OK && !(o->config = cli_config_values(s->c.cfg, NULL)))
        rc = TIDE_E_NOMEM;
    if (rc != TIDE_OK || (rc = cli_out_dir_create("--out", s->out, &o->created)) != TIDE_OK)
        return rc;
    o->ready = true;
    snprintf(o->csv, sizeof o->csv, "%s/results.csv", s->out);
    s->csv = o->csv;
    /* A shard's plots would show a part of the grid; the plots do not draw
     * --sweep points (python -m tide.plot does, from results.csv). */
    if (!s->shard.count && !s->sweep.n) {
        snprintf(o->plot, sizeof o->plot, "%s/plots", s->out);
        s->plot = o->plot;
    }
    return TIDE_OK;
}

/* The exact counters of a row, by name, for rows.json. */
static const char *const sim_counter_name[] = {"tokens",       "active",     "hit_rows",
                                               "miss_rows",    "promotions", "evictions",
                                               "weight_bytes", "act_bytes"};
#define SIM_N_COUNTERS (sizeof sim_counter_name / sizeof sim_counter_name[0])

static void sim_counters(struct tide_sim_counters *k, uint64_t *v[SIM_N_COUNTERS])
{
    uint64_t *const p[] = {&k->tokens,     &k->active,    &k->hit_rows,     &k->miss_rows,
                           &k->promotions, &k->evictions, &k->weight_bytes, &k->act_bytes};
    memcpy(v, p, sizeof p);
}

static json_t *sim_row_json(const struct sim_row *r, long config, int L)
{
    json_t *j = json_object(), *c = json_object(), *lu = json_null();
    if (r->layer_us) {
        lu = json_array();
        for (int l = 0; l < L; l++)
            json_array_append_new(lu, json_real(r->layer_us[l]));
    }
    struct tide_sim_counters k = r->c;
    uint64_t *v[SIM_N_COUNTERS];
    sim_counters(&k, v);
    for (size_t i = 0; i < SIM_N_COUNTERS; i++)
        json_object_set_new(c, sim_counter_name[i], json_integer((json_int_t)*v[i]));
    json_object_set_new(c, "us", json_real(k.us));
    json_object_set_new(c, "step_us", json_real(k.step_us));
    json_object_set_new(j, "configuration", json_integer(config));
    json_object_set_new(j, "policy", json_string(r->policy));
    json_object_set_new(j, "interval", json_string(r->interval));
    json_object_set_new(j, "interval_n", json_integer(r->interval_n));
    json_object_set_new(j, "budget", json_integer(r->budget));
    json_object_set_new(j, "point", json_integer(r->point));
    json_object_set_new(j, "bound", json_boolean(r->bound));
    json_object_set_new(j, "no_counters", json_boolean(r->no_counters));
    json_object_set_new(j, "seconds", json_real(r->seconds));
    json_object_set_new(j, "counters", c);
    json_object_set_new(j, "layer_us", lu);
    return j;
}

static double sim_num(const json_t *j, const char *key, bool *ok)
{
    const json_t *v = json_object_get(j, key);
    *ok &= json_is_number(v);
    return json_number_value(v);
}

/* A row of rows.json into r; false when a member is missing or wrong. */
static bool sim_row_read(const json_t *j, struct sim_row *r, int L)
{
    bool ok = json_is_string(json_object_get(j, "policy")) &&
              json_is_string(json_object_get(j, "interval"));
    if (!ok)
        return false;
    snprintf(r->policy, sizeof r->policy, "%s", json_string_value(json_object_get(j, "policy")));
    snprintf(r->interval, sizeof r->interval, "%s",
             json_string_value(json_object_get(j, "interval")));
    r->interval_n = (int)sim_num(j, "interval_n", &ok);
    r->budget = (int)sim_num(j, "budget", &ok);
    /* Shards written before --sweep went with --out have no point: 0. */
    const json_t *pt = json_object_get(j, "point");
    if (pt && json_integer_value(pt) != r->point)
        return false;
    r->seconds = sim_num(j, "seconds", &ok);
    r->bound = json_is_true(json_object_get(j, "bound"));
    r->no_counters = json_is_true(json_object_get(j, "no_counters"));
    const json_t *c = json_object_get(j, "counters");
    uint64_t *v[SIM_N_COUNTERS];
    sim_counters(&r->c, v);
    for (size_t i = 0; i < SIM_N_COUNTERS; i++) {
        const json_t *x = json_object_get(c, sim_counter_name[i]);
        ok &= json_is_integer(x) && json_integer_value(x) >= 0;
        *v[i] = (uint64_t)json_integer_value(x);
    }
    r->c.us = sim_num(c, "us", &ok);
    r->c.step_us = sim_num(c, "step_us", &ok);
    const json_t *lu = json_object_get(j, "layer_us");
    if (ok && json_is_array(lu)) {
        if (json_array_size(lu) != (size_t)L || !(r->layer_us = malloc(sizeof(double) * L)))
            return false;
        for (int l = 0; l < L; l++) {
            ok &= json_is_number(json_array_get(lu, (size_t)l));
            r->layer_us[l] = json_number_value(json_array_get(lu, (size_t)l));
        }
    }
    return ok && (json_is_array(lu) || json_is_null(lu));
}

bool sim_take(struct sim_cli *s, const char *policy, int budget, int interval, int *rc)
{
    const long i = s->n_config++;
    if (!s->o || !s->o->merge)
        return cli_shard_mine(&s->shard, i);
    const struct cli_parts *ps = &s->o->parts;
    const int k = (int)(i % ps->count);
    const json_t *j = json_array_get(s->o->rows[k], (size_t)(i / ps->count));
    struct sim_row *r;
    if ((*rc = sim_add_row(s, &r)) != TIDE_OK)
        return false;
    if (!j || json_integer_value(json_object_get(j, "configuration")) != i ||
        !sim_row_read(j, r, s->L) || strcmp(r->policy, policy) || r->budget != budget ||
        r->interval_n != interval) {
        tide_error("%s/rows.json: row %ld is not configuration %ld of the sweep (%s, budget %d, "
                   "interval %d, sweep point %ld) with all its counters",
                   ps->by_index[k]->dir, i / ps->count, i, policy, budget, interval, s->point);
        *rc = TIDE_E_FORMAT;
    }
    return false;
}

static json_t *sim_grid_json(const struct sim_cli *s)
{
    json_t *g = json_object(), *p = json_array(), *b = json_array(), *iv = json_array();
    for (int i = 0; i < s->n_pol; i++)
        json_array_append_new(p, json_string(s->pol[i]->desc->name));
    for (int i = 0; i < s->n_budget; i++)
        json_array_append_new(b, json_integer(s->budget[i]));
    for (int i = 0; i < s->n_interval; i++)
        json_array_append_new(iv, json_integer(s->interval[i]));
    json_object_set_new(g, "policies", p);
    json_object_set_new(g, "budgets", b);
    json_object_set_new(g, "intervals", iv); /* 0: auto */
    json_object_set_new(g, "hindsight", json_boolean(s->hindsight));
    json_object_set_new(g, "oracle", json_boolean(s->oracle));
    json_object_set_new(g, "layer_budgets", json_boolean(s->layer_budgets));
    json_object_set_new(g, "scale_profile", json_boolean(s->scale));
    json_object_set_new(g, "batch", json_integer(s->batch > 1 ? s->batch : 1));
    json_object_set_new(g, "configurations", json_integer(s->n_config));
    json_object_set_new(g, "sweep", cli_sweep_json(&s->sweep));
    return g;
}

int sim_out_end(struct sim_cli *s, int rc)
{
    struct sim_out *o = s->o;
    if (!o || !o->ready)
        return rc;
    if (rc == TIDE_OK && o->merge && s->n_config != o->configs) {
        tide_error("tide sim merge: the shards' grid has %ld configurations, the sweep %ld",
                   o->configs, s->n_config);
        rc = TIDE_E_FORMAT;
    }
    json_t *m = NULL, *rows = json_array();
    if (rc == TIDE_OK) {
        m = o->merge ? cli_parts_manifest(&o->parts) : cli_manifest_new("sim");
        if (!m || !rows)
            rc = TIDE_E_NOMEM;
    }
    if (rc == TIDE_OK) {
        /* Row j is configuration K + j N of a shard; in a whole sweep the
         * --layer-budgets rows come after the grid's and are not numbered. */
        const struct cli_shard sh = s->shard.count ? s->shard : (struct cli_shard){0, 1};
        for (int j = 0; j < s->n_rows; j++) {
            long config = sh.index + (long)j * sh.count;
            json_array_append_new(
                rows, sim_row_json(&s->rows[j], config < s->n_config ? config : -1, s->L));
        }
        if (!o->merge) {
            if (s->shard.count) {
                json_t *sj = json_object();
                json_object_set_new(sj, "index", json_integer(s->shard.index));
                json_object_set_new(sj, "count", json_integer(s->shard.count));
                json_object_set_new(m, "shard", sj);
            }
            json_object_set(m, "trace", o->trace);
            json_object_set_new(m, "trace_path", json_string(o->trace_abs));
            json_object_set(m, "profile", o->profile);
            json_object_set_new(m, "profile_path",
                                s->profile_path ? json_string(o->profile_abs) : json_null());
            json_object_set_new(m, "grid", sim_grid_json(s));
            json_object_set(m, "config", o->config);
        }
        json_object_set_new(m, "rows", json_integer(s->n_rows));
        json_object_set_new(m, "interrupted", json_false());
        char path[4400];
        snprintf(path, sizeof path, "%s/rows.json", s->out);
        rc = cli_json_write(path, rows);
        snprintf(path, sizeof path, "%s/manifest.json", s->out);
        if (rc == TIDE_OK)
            rc = cli_json_write(path, m);
    }
    json_decref(m);
    json_decref(rows);
    if (rc != TIDE_OK)
        cli_out_dir_discard(s->out, o->created);
    else
        printf("results in %s/\n", s->out);
    return rc;
}

void sim_out_free(struct sim_out *o)
{
    if (!o)
        return;
    json_decref(o->trace);
    json_decref(o->profile);
    json_decref(o->config);
    for (int k = 0; o->rows && k < o->parts.count; k++)
        json_decref(o->rows[k]);
    free(o->rows);
    cli_parts_free(&o->parts);
    free(o);
}

static void sim_merge_usage(FILE *f)
{
    fprintf(f, "usage: tide sim merge DIR... --out DIR [--trace FILE] [--profile FILE]\n\n"
               "Joins the shards of one `tide sim --shard K/N --out DIR` sweep into --out DIR\n"
               "(a new or empty folder) and finishes it as one `tide sim --out DIR` run would:\n"
               "the table, the best interval per budget, --layer-budgets (replayed here),\n"
               "results.csv, plots/, rows.json and manifest.json (listing every shard and its\n"
               "host). Each DIR is a result folder or a folder of result folders. The trace\n"
               "and profile are read again from where the shards read them, or from --trace\n"
               "and --profile, and must be the same files (size and hash).\n\n"
               "Refused, naming the field: shards of another trace, profile, grid, configuration\n"
               "or revision; a shard given twice (exit 2). Missing shards are listed by index\n"
               "(exit 1).\n");
}

/* The manifest's grid back into the command line's lists and flags. */
static int sim_merge_grid(struct sim_cli *s, const json_t *g)
{
    const json_t *p = json_object_get(g, "policies"), *b = json_object_get(g, "budgets");
    const json_t *iv = json_object_get(g, "intervals"), *v;
    size_t i;
    char *dst[] = {s->policies, s->budgets, s->intervals};
    const json_t *src[] = {p, b, iv};
    for (int k = 0; k < 3; k++) {
        size_t at = 0;
        json_array_foreach(src[k], i, v)
        {
            char item[96];
            if (k == 0 && json_is_string(v))
                snprintf(item, sizeof item, "%s", json_string_value(v));
            else if (k && json_is_integer(v))
                snprintf(item, sizeof item, k == 2 && !json_integer_value(v) ? "auto" : "%lld",
                         (long long)json_integer_value(v));
            else
                return TIDE_E_FORMAT;
            at +=
                (size_t)snprintf(dst[k] + at, at < 512 ? 512 - at : 0, "%s%s", i ? "," : "", item);
        }
        if (!at || at >= 512)
            return TIDE_E_FORMAT;
    }
    s->hindsight = json_is_true(json_object_get(g, "hindsight"));
    s->oracle = json_is_true(json_object_get(g, "oracle"));
    s->layer_budgets = json_is_true(json_object_get(g, "layer_budgets"));
    s->scale = json_is_true(json_object_get(g, "scale_profile"));
    /* Shards written before --batch replayed the trace as recorded. */
    const json_t *bj = json_object_get(g, "batch");
    s->batch = json_is_integer(bj) ? (int)json_integer_value(bj) : 1;
    s->o->configs = (long)json_integer_value(json_object_get(g, "configurations"));
    /* --sweep: [{"key": "section.key", "values": [...]}] back into axes. */
    const json_t *a;
    size_t k;
    json_array_foreach(json_object_get(g, "sweep"), i, a)
    {
        const char *key = json_string_value(json_object_get(a, "key"));
        char text[2048];
        size_t at = (size_t)snprintf(text, sizeof text, "%s=", key ? key : "");
        json_array_foreach(json_object_get(a, "values"), k, v)
        {
            if (!json_is_string(v) || at >= sizeof text)
                return TIDE_E_FORMAT;
            at += (size_t)snprintf(text + at, sizeof text - at, "%s%s", k ? "," : "",
                                   json_string_value(v));
        }
        if (!key || at >= sizeof text || cli_sweep_add(&s->sweep, text) != TIDE_OK)
            return TIDE_E_FORMAT;
    }
    return TIDE_OK;
}

/* Each shard's rows.json, with the number of rows its share of the grid has. */
static int sim_merge_rows(struct sim_out *o)
{
    if (!(o->rows = calloc((size_t)o->parts.count, sizeof *o->rows)))
        return TIDE_E_NOMEM;
    for (int k = 0; k < o->parts.count; k++) {
        const struct cli_part *p = o->parts.by_index[k];
        char path[4400];
        snprintf(path, sizeof path, "%s/rows.json", p->dir);
        json_error_t err;
        o->rows[k] = json_load_file(path, 0, &err);
        if (!json_is_array(o->rows[k])) {
            tide_error("%s: not a list of rows (line %d: %s)", path, err.line,
                       o->rows[k] ? "not an array" : err.text);
            return TIDE_E_FORMAT;
        }
        const long want = cli_shard_size(&p->shard, o->configs);
        if ((long)json_array_size(o->rows[k]) != want) {
            tide_error("tide sim merge: shard %d of %d (%s) has %zu rows, its share of the grid "
                       "is %ld; run it again",
                       k, o->parts.count, p->dir, json_array_size(o->rows[k]), want);
            return TIDE_E_INVAL;
        }
    }
    return TIDE_OK;
}

int cmd_sim_merge(int argc, char **argv)
{
    struct sim_cli s;
    memset(&s, 0, sizeof s);
    s.qfmt = -1;
    const char *trace = NULL, *profile = NULL;
    char **dirs = calloc((size_t)argc, sizeof *dirs);
    int n_dirs = 0, rc = dirs ? TIDE_OK : TIDE_E_NOMEM;
    for (int i = 1; i < argc && rc == TIDE_OK; i++) {
        const char **val = !strcmp(argv[i], "--out")       ? &s.out
                           : !strcmp(argv[i], "--trace")   ? &trace
                           : !strcmp(argv[i], "--profile") ? &profile
                                                           : NULL;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            sim_merge_usage(stdout);
            free(dirs);
            return CLI_EXIT_OK;
        } else if (val && i + 1 < argc) {
            *val = argv[++i];
        } else if (argv[i][0] == '-') {
            tide_error("sim merge: unexpected argument '%s' (see tide sim merge --help)", argv[i]);
            rc = TIDE_E_CONFIG;
        } else {
            dirs[n_dirs++] = argv[i];
        }
    }
    if (rc == TIDE_OK && (!s.out || !n_dirs)) {
        tide_error("sim merge: %s (see tide sim merge --help)",
                   s.out ? "name the shards' result folders" : "name the output folder with --out");
        rc = TIDE_E_CONFIG;
    }
    if (rc == TIDE_OK && !(s.o = calloc(1, sizeof *s.o)))
        rc = TIDE_E_NOMEM;
    static const char *const same[] = {"tide_version", "git_revision", "trace", "profile",
                                       "grid",         "config",       NULL};
    if (rc == TIDE_OK) {
        s.o->merge = true;
        if ((rc = cli_parts_load("sim", dirs, n_dirs, &s.o->parts)) == TIDE_OK)
            rc = cli_parts_check("sim", &s.o->parts, same);
    }
    const json_t *m0 = rc == TIDE_OK ? s.o->parts.by_index[0]->m : NULL;
    if (rc == TIDE_OK && sim_merge_grid(&s, json_object_get(m0, "grid")) != TIDE_OK) {
        tide_error("%s/manifest.json: \"grid\" is not a tide sim grid",
                   s.o->parts.by_index[0]->dir);
        rc = TIDE_E_FORMAT;
    }
    if (rc == TIDE_OK)
        rc = sim_merge_rows(s.o);
    if (rc == TIDE_OK) {
        s.trace_path = trace ? trace : json_string_value(json_object_get(m0, "trace_path"));
        s.profile_path = profile ? profile : json_string_value(json_object_get(m0, "profile_path"));
        if (!s.trace_path) {
            tide_error("%s/manifest.json: no trace_path; name the trace with --trace",
                       s.o->parts.by_index[0]->dir);
            rc = TIDE_E_FORMAT;
        }
    }
    /* The shards' configuration, value for value. */
    if (rc == TIDE_OK && (rc = cli_setup(&s.c)) == TIDE_OK)
        rc = cli_config_apply(s.c.cfg, json_object_get(m0, "config"), "tide sim merge");
    if (rc == TIDE_OK)
        rc = sim_main(&s);
    rc = sim_out_end(&s, rc);
    sim_cli_free(&s);
    free(dirs);
    return cli_exit_code(rc);
}
