/* `tide bench --shard K/N` and `--baseline DIR`: what a run records so that
 * `tide bench merge` can check and join its shards (cli/bench_shard.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_shard.h"
#include "engine.h"
#include "tide/log.h"
#include "tide/status.h"

int bench_shard_arg(struct bench_shard_args *a, int argc, char **argv, int *i)
{
    static const char *const names[] = {"--shard",     "--baseline", "--emit-slurm",
                                        "--partition", "--gres",     "--time"};
    const char *arg = argv[*i];
    size_t k = 0;
    while (k < sizeof names / sizeof names[0] && strcmp(arg, names[k]))
        k++;
    if (k == sizeof names / sizeof names[0])
        return 0;
    if (*i + 1 >= argc) {
        tide_error("%s needs a value", arg);
        return -1;
    }
    const char *v = argv[++*i];
    switch (k) {
    case 0:
        return cli_shard_parse(v, "--shard", &a->shard) == TIDE_OK ? 1 : -1;
    case 1:
        a->baseline = v;
        return 1;
    case 2: {
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 1 || n > CLI_SHARD_MAX) {
            tide_error("--emit-slurm %s: expected the number of shards, 1 to %d", v, CLI_SHARD_MAX);
            return -1;
        }
        a->emit_slurm = (int)n;
        return 1;
    }
    }
    /* sbatch options: one word each, written into #SBATCH lines. */
    for (const char *p = v; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\'' || *p == '\\' || *p == '#' ||
            *p == 127) {
            tide_error("%s '%s': expected one word without spaces or quotes", arg, v);
            return -1;
        }
    if (!*v) {
        tide_error("%s: empty value", arg);
        return -1;
    }
    const char **dst[] = {&a->partition, &a->gres, &a->time};
    *dst[k - 3] = v;
    return 1;
}

void bench_shard_suffix(const struct bench_shard_args *a, char *buf, size_t len)
{
    if (a->shard.count)
        snprintf(buf, len, "-shard-%d-of-%d", a->shard.index, a->shard.count);
    else if (len)
        buf[0] = 0;
}

static json_t *bench_ints(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

static long bench_grid_configs(const struct bench_grid *g)
{
    long n = 0;
    for (int p = 0; p < g->n_policies; p++)
        n += (long)g->n_budgets * (strcmp(g->policy[p], "policy-tide") ? 1 : g->n_intervals);
    return n * (g->n_batches > 0 ? g->n_batches : 1) * (g->sweep ? cli_sweep_points(g->sweep) : 1);
}

static json_t *bench_grid_json(const struct bench_grid *g)
{
    json_t *j = json_object(), *pol = json_array();
    uint64_t h = CLI_FNV1A64_INIT;
    for (int i = 0; i < g->n_prompts; i++)
        h = cli_fnv1a64(h, g->prompt[i], strlen(g->prompt[i]) + 1); /* with its NUL */
    for (int p = 0; pol && p < g->n_policies; p++)
        json_array_append_new(pol, json_string(g->policy[p]));
    json_object_set_new(j, "policies", pol);
    json_object_set_new(j, "budgets", bench_ints(g->budget, g->n_budgets));
    json_object_set_new(j, "intervals", bench_ints(g->interval, g->n_intervals));
    json_object_set_new(j, "batches", bench_ints(g->batch, g->n_batches));
    if (g->sweep && g->sweep->n)
        json_object_set_new(j, "sweep", cli_sweep_json(g->sweep));
    json_object_set_new(j, "baseline", json_boolean(g->baseline));
    /* One no-offload baseline per batch size at each sweep point. */
    json_object_set_new(j, "baselines", json_integer(g->baseline ? g->n_batches : 0));
    json_object_set_new(j, "configurations", json_integer(bench_grid_configs(g)));
    json_object_set_new(j, "prompts", json_integer(g->n_prompts));
    json_object_set_new(j, "prompts_fnv1a64", cli_json_hex64(h));
    json_object_set_new(j, "repeats", json_integer(g->repeats));
    return j;
}

/* config.json and the weights' shard index: what names a checkpoint (null
 * for a file the checkpoint does not have). */
static int bench_checkpoint_json(const char *dir, json_t **out)
{
    char path[4200];
    json_t *cfg = NULL, *idx = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = cli_file_fingerprint(path, false, &cfg);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (rc == TIDE_OK)
        rc = cli_file_fingerprint(path, false, &idx);
    if (rc == TIDE_OK && !(*out = json_object()))
        rc = TIDE_E_NOMEM;
    if (rc != TIDE_OK) {
        json_decref(cfg);
        json_decref(idx);
        return rc;
    }
    json_object_set_new(*out, "config_json", cfg);
    json_object_set_new(*out, "shard_index", idx);
    return TIDE_OK;
}

/* The first data line of DIR/results.csv, when it is the baseline's. */
static int bench_baseline_line(const char *dir, char **line)
{
    char path[4200], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/results.csv", dir);
    int rc = cli_read_file(path, &text, &len);
    if (rc != TIDE_OK)
        return rc;
    char *first = strchr(text, '\n');
    char *end = first ? strchr(first + 1, '\n') : NULL;
    if (!end || strncmp(first + 1, "(no offload),", 13)) {
        tide_error("--baseline %s: %s does not start with the baseline's row", dir, path);
        free(text);
        return TIDE_E_FORMAT;
    }
    *line = strndup(first + 1, (size_t)(end - first));
    free(text);
    return *line ? TIDE_OK : TIDE_E_NOMEM;
}

/* What a baseline depends on: the code, the checkpoint, the prompts and every
 * setting but the sweep's own ([bench]). A new reference. */
static json_t *bench_baseline_key(const json_t *m)
{
    const json_t *g = json_object_get(m, "grid");
    json_t *k = json_object(), *conf = json_deep_copy(json_object_get(m, "config"));
    json_object_del(conf, "bench");
    static const char *const top[] = {"tide_version", "git_revision", "checkpoint"};
    static const char *const grid[] = {"prompts", "prompts_fnv1a64", "repeats"};
    for (size_t i = 0; i < 3; i++) {
        json_object_set(k, top[i], json_object_get(m, top[i]));
        json_object_set(k, grid[i], json_object_get(g, grid[i]));
    }
    json_object_set_new(k, "config", conf);
    return k;
}

/* --baseline DIR: its reference tokens, row and metrics, if DIR is a run of
 * the same inputs (bench_baseline_key). */
static int bench_load_baseline(struct bench_shard_run *r, const char *dir, int n_prompts,
                               uint64_t *want)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_error_t err;
    json_t *m = json_load_file(path, 0, &err);
    if (!m) {
        tide_error("--baseline %s: cannot read %s (%s)", dir, path, err.text);
        return TIDE_E_CONFIG;
    }
    int rc = TIDE_OK;
    const json_t *rows = json_object_get(m, "rows"), *ref = json_object_get(m, "reference_tokens");
    const json_t *first = json_array_get(rows, 0);
    if (!json_is_true(json_object_get(json_object_get(m, "grid"), "baseline")) || !first ||
        json_integer_value(json_object_get(first, "configuration")) != -1 ||
        !json_is_array(json_object_get(ref, "fnv1a64"))) {
        tide_error("--baseline %s: not a tide bench result with a baseline (no-offload) row "
                   "(run it with [bench] baseline = true)",
                   dir);
        rc = TIDE_E_CONFIG;
    }
    json_t *mine = cli_manifest_new("bench");
    json_object_update(mine, r->m);
    json_t *ka = bench_baseline_key(mine), *kb = bench_baseline_key(m);
    char field[1024] = "";
    if (rc == TIDE_OK && cli_json_diff(ka, kb, field, sizeof field)) {
        char *va = cli_json_at(ka, field), *vb = cli_json_at(kb, field);
        tide_error("--baseline %s: not a run of the same code, checkpoint, prompts and settings: "
                   "%s differs (%s here, %s there)",
                   dir, field, va ? va : "?", vb ? vb : "?");
        free(va);
        free(vb);
        rc = TIDE_E_CONFIG;
    }
    json_decref(mine);
    json_decref(ka);
    json_decref(kb);
    const json_t *h = json_object_get(ref, "fnv1a64");
    for (int i = 0; rc == TIDE_OK && i < n_prompts; i++) {
        const char *s = json_string_value(json_array_get(h, (size_t)i));
        char *end;
        want[i] = s ? strtoull(s, &end, 16) : 0;
        if (!s || *end || strlen(s) != 16) {
            tide_error("--baseline %s: reference_tokens in %s has no hash for prompt %d", dir, path,
                       i);
            rc = TIDE_E_FORMAT;
        }
    }
    if (rc == TIDE_OK)
        rc = bench_baseline_line(dir, &r->baseline_line);
    if (rc == TIDE_OK) {
        const char *f = json_string_value(json_object_get(first, "metrics"));
        if (!f || strchr(f, '/')) {
            tide_error("--baseline %s: no metrics file for the baseline in %s", dir, path);
            rc = TIDE_E_FORMAT;
        } else if (!(r->baseline_file = malloc(strlen(dir) + strlen(f) + 2))) {
            rc = TIDE_E_NOMEM;
        } else {
            sprintf(r->baseline_file, "%s/%s", dir, f);
            json_t *row = json_object();
            json_object_set_new(row, "configuration", json_integer(-1));
            json_object_set_new(row, "metrics", json_string(f));
            json_array_append_new(r->rows, row);
        }
    }
    json_decref(m);
    return rc;
}

int bench_shard_begin(struct bench_shard_run *r, const struct bench_shard_args *a,
                      const struct tide_config *cfg, const struct tide_engine *e,
                      const struct bench_grid *g, uint64_t *want)
{
    memset(r, 0, sizeof *r);
    r->args = a;
    if (a->partition || a->gres || a->time) {
        tide_error("--partition, --gres and --time are sbatch options: they go with --emit-slurm");
        return TIDE_E_CONFIG;
    }
    r->m = json_object();
    r->rows = json_array();
    /* Where results go and where the inputs are read from may differ between
     * shards; what they hold is compared by fingerprint. */
    const char *skip[4 + CLI_SWEEP_MAX_KEYS] = {"bench.out", "bench.prompts", "model.path"};
    /* The swept keys are recorded in the grid; the snapshot holds point 0. */
    for (int i = 0; g->sweep && i < g->sweep->n; i++)
        skip[3 + i] = g->sweep->axis[i].name;
    json_t *conf = cli_config_values(cfg, skip), *ck = NULL;
    if (!r->m || !r->rows || !conf) {
        json_decref(conf);
        return TIDE_E_NOMEM;
    }
    int rc = bench_checkpoint_json(e->model_dir, &ck);
    if (rc != TIDE_OK) {
        json_decref(conf);
        return rc;
    }
    if (a->shard.count) {
        json_t *s = json_object();
        json_object_set_new(s, "index", json_integer(a->shard.index));
        json_object_set_new(s, "count", json_integer(a->shard.count));
        json_object_set_new(r->m, "shard", s);
    }
    json_object_set_new(r->m, "grid", bench_grid_json(g));
    json_object_set_new(r->m, "checkpoint", ck);
    json_object_set_new(r->m, "config", conf);
    json_t *ref = json_object();
    json_object_set_new(ref, "from",
                        json_string(a->baseline   ? a->baseline
                                    : g->baseline ? "baseline"
                                                  : "first configuration"));
    json_object_set_new(r->m, "reference_tokens", ref);
    if (a->baseline && g->baseline) {
        if ((rc = bench_load_baseline(r, a->baseline, g->n_prompts, want)) == TIDE_OK)
            tide_info("bench: the baseline (no offload) row, metrics and tokens come from %s",
                      a->baseline);
    } else if (a->baseline) {
        tide_error("--baseline %s: this run has no baseline ([bench] baseline = false)",
                   a->baseline);
        rc = TIDE_E_CONFIG;
    }
    return rc;
}

int bench_shard_row(struct bench_shard_run *r, long config, const char *tag)
{
    char file[200];
    snprintf(file, sizeof file, "metrics-%s.jsonl", tag);
    json_t *row = json_object();
    if (!row)
        return TIDE_E_NOMEM;
    json_object_set_new(row, "configuration", json_integer(config));
    json_object_set_new(row, "metrics", json_string(file));
    return json_array_append_new(r->rows, row) == 0 ? TIDE_OK : TIDE_E_NOMEM;
}

json_t *bench_shard_end(struct bench_shard_run *r, const char *dir, const uint64_t *want, int n,
                        bool strict, bool interrupted)
{
    json_t *ref = json_object_get(r->m, "reference_tokens"), *h = json_array();
    /* With --sweep, want holds a baseline per point; a point none of this
     * shard's configurations ran (baseline = false) keeps zeros. */
    int last = n;
    while (last > 0 && !want[last - 1])
        last--;
    for (int i = 0; h && i < last; i++)
        json_array_append_new(h, cli_json_hex64(want[i]));
    json_object_set_new(ref, "fnv1a64", h);
    json_object_set_new(r->m, "strict_tokens", json_boolean(strict));
    json_object_set(r->m, "rows", r->rows);
    json_object_set_new(r->m, "interrupted", json_boolean(interrupted));
    if (r->baseline_file) {
        const char *f = strrchr(r->baseline_file, '/') + 1;
        char dst[4400];
        snprintf(dst, sizeof dst, "%s/%s", dir, f);
        if (cli_copy_file(r->baseline_file, dst) != TIDE_OK)
            tide_warn("bench: the baseline's metrics were not copied from %s", r->args->baseline);
    }
    return r->m;
}

void bench_shard_run_free(struct bench_shard_run *r)
{
    json_decref(r->m);
    json_decref(r->rows);
    free(r->baseline_line);
    free(r->baseline_file);
    memset(r, 0, sizeof *r);
}
