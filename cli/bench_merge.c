/* `tide bench merge DIR... --out DIR`: join the shards of one sweep into the
 * folder an unsharded run writes (results.csv in the unsharded order,
 * config.ini, manifest.json, metrics-*.jsonl). Rows are copied as text, so
 * every number is exactly what its shard wrote. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_shard.h"
#include "tide/log.h"
#include "tide/status.h"

static void merge_usage(FILE *f)
{
    fprintf(f, "usage: tide bench merge DIR... --out DIR\n\n"
               "Joins the shards of one `tide bench --shard K/N` sweep into --out DIR (a new\n"
               "or empty folder): results.csv with the rows in the order of an unsharded run,\n"
               "config.ini, the metrics-*.jsonl of every configuration, and manifest.json\n"
               "(shard 0's, listing every shard with its host, and the hosts). Each DIR is a\n"
               "result folder or a folder of result folders.\n\n"
               "Refused, naming the field: shards of another grid (policies, budgets,\n"
               "intervals, prompts, repeats), configuration, checkpoint (size and hash of\n"
               "config.json and model.safetensors.index.json) or revision; a shard given\n"
               "twice (exit 2). Missing shards are listed by index; an interrupted or\n"
               "unfinished shard, or shards whose reference tokens differ, are reported (exit\n"
               "1). As for a single run, tokens that differ from the baseline fail the merge\n"
               "(exit 1, after writing) when one backend computed every expert.\n\n"
               "Separate unsharded runs (e.g. one per value of a key given with --set) merge\n"
               "too when they share the code, checkpoint and grid: results.csv and\n"
               "summary.csv hold every run's rows in the order given, with a column per\n"
               "configuration key whose value differs between the runs; metrics files are\n"
               "renamed runK-FILE, each run's config.ini is kept as config-runK.ini, and the\n"
               "manifest lists the runs and the varied keys. Runs of one configuration are\n"
               "refused (use --repeats N).\n");
}

/* One shard's results.csv cut into lines (each with its newline). */
struct merge_csv {
    char *text;
    char **line; /* [n]: line[0] is the header */
    int n;
};

static int merge_read_csv(const char *dir, const char *name, struct merge_csv *c)
{
    char path[4200];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = cli_read_file(path, &c->text, &len);
    if (rc != TIDE_OK)
        return rc;
    for (char *p = c->text; *p;) {
        char *nl = strchr(p, '\n');
        if (!nl) {
            tide_error("%s: the last line is cut short (no newline)", path);
            return TIDE_E_FORMAT;
        }
        char **l = realloc(c->line, sizeof *l * (size_t)(c->n + 1));
        if (!l)
            return TIDE_E_NOMEM;
        c->line = l;
        c->line[c->n++] = p;
        p = nl + 1;
    }
    if (!c->n) {
        tide_error("%s: empty", path);
        return TIDE_E_FORMAT;
    }
    return TIDE_OK;
}

/* Free n folders' results.csv and summary.csv (either array may be NULL). */
static void merge_csvs_free(struct merge_csv *csv, struct merge_csv *sum, int n)
{
    for (int k = 0; k < n; k++) {
        if (csv) {
            free(csv[k].text);
            free(csv[k].line);
        }
        if (sum) {
            free(sum[k].text);
            free(sum[k].line);
        }
    }
    free(csv);
    free(sum);
}

static size_t merge_len(const char *line)
{
    return (size_t)(strchr(line, '\n') - line) + 1;
}

/* The grid's shape, from shard 0's manifest. */
struct merge_grid {
    long configs;  /* all configurations, over every sweep point */
    long points;   /* --sweep points (1 without) */
    long repeats;  /* results.csv lines per configuration */
    long baseline; /* baselines per sweep point (one per batch size) */
};

/* The grid of a result folder, from its manifest. */
static int merge_grid_read(const struct cli_part *p, struct merge_grid *grid)
{
    const json_t *g = json_object_get(p->m, "grid"), *a;
    size_t i;
    *grid = (struct merge_grid){.points = 1, .repeats = 1};
    grid->configs = (long)json_integer_value(json_object_get(g, "configurations"));
    grid->baseline = json_is_true(json_object_get(g, "baseline"));
    /* Before the baseline ran at every batch size there was one per point. */
    if (json_is_integer(json_object_get(g, "baselines")))
        grid->baseline = (long)json_integer_value(json_object_get(g, "baselines"));
    grid->repeats = (long)json_integer_value(json_object_get(g, "repeats"));
    json_array_foreach(json_object_get(g, "sweep"), i, a) grid->points *=
        (long)json_array_size(json_object_get(a, "values"));
    if (grid->points < 1 || grid->configs < 0 || grid->configs % grid->points ||
        grid->repeats < 1) {
        tide_error("%s: grid in manifest.json: %ld configurations do not divide into %ld "
                   "sweep points",
                   p->dir, grid->configs, grid->points);
        return TIDE_E_FORMAT;
    }
    return TIDE_OK;
}

/* Entry e of an unsharded run's rows (a baseline per sweep point, then that
 * point's configurations): its configuration, or -1 for a baseline. */
static long merge_entry(const struct merge_grid *g, long e)
{
    const long per = g->configs / g->points + g->baseline; /* entries per point */
    const long pt = e / per, at = e % per;
    return at < g->baseline ? -1 : pt * (g->configs / g->points) + at - g->baseline;
}

/* Whether shard s holds entry e (every shard runs the baselines). */
static bool merge_holds(const struct merge_grid *g, const struct cli_shard *s, long e)
{
    const long c = merge_entry(g, e);
    return c < 0 || cli_shard_mine(s, c);
}

static long merge_entries(const struct merge_grid *g)
{
    return g->configs + g->baseline * g->points;
}

/* The rows shard k must hold, in the order of merge_entry. */
static int merge_check_rows(const struct cli_part *p, const struct merge_csv *csv,
                            const struct merge_grid *g)
{
    const json_t *rows = json_object_get(p->m, "rows");
    const long want = g->baseline * g->points + cli_shard_size(&p->shard, g->configs);
    const long have = (long)json_array_size(rows);
    if (have * g->repeats != csv->n - 1) {
        tide_error("%s: manifest.json lists %ld configurations of %ld repeats but results.csv has "
                   "%d rows",
                   p->dir, have, g->repeats, csv->n - 1);
        return TIDE_E_FORMAT;
    }
    if (have < want) {
        tide_error("tide bench merge: shard %d of %d (%s) is unfinished: %ld of its %ld rows; run "
                   "it again",
                   p->shard.index, p->shard.count, p->dir, have, want);
        return TIDE_E_INVAL;
    }
    for (long r = 0, e = 0; r < have; r++, e++) {
        const json_t *row = json_array_get(rows, (size_t)r);
        const json_t *c = json_object_get(row, "configuration");
        const char *file = json_string_value(json_object_get(row, "metrics"));
        while (e < merge_entries(g) && !merge_holds(g, &p->shard, e))
            e++;
        const long expect = merge_entry(g, e);
        if (!json_is_integer(c) || json_integer_value(c) != expect || !file || strchr(file, '/') ||
            r >= want) {
            tide_error("%s: row %ld of manifest.json is not configuration %ld of shard %d/%d",
                       p->dir, r, expect, p->shard.index, p->shard.count);
            return TIDE_E_FORMAT;
        }
    }
    return TIDE_OK;
}

/* Every shard checked its tokens against the same reference. */
static int merge_check_reference(const struct cli_parts *ps)
{
    const json_t *a =
        json_object_get(json_object_get(ps->by_index[0]->m, "reference_tokens"), "fnv1a64");
    for (int k = 1; k < ps->count; k++) {
        const json_t *b =
            json_object_get(json_object_get(ps->by_index[k]->m, "reference_tokens"), "fnv1a64");
        if (!json_equal((json_t *)a, (json_t *)b)) {
            tide_error("tide bench merge: shard %d (%s) compared its tokens with other reference "
                       "tokens than shard 0 (%s): their baselines (or, with [bench] baseline = "
                       "false, their first configurations) generated different text, so the "
                       "'same' columns do not agree; check the checkpoints' weights, or run with "
                       "the baseline or --baseline DIR",
                       k, ps->by_index[k]->dir, ps->by_index[0]->dir);
            return TIDE_E_INVAL;
        }
    }
    return TIDE_OK;
}

/* Write OUT: results.csv, config.ini, the metrics, manifest.json. */
static int merge_write(const struct cli_parts *ps, const struct merge_csv *csv,
                       const struct merge_csv *sum, const struct merge_grid *g, const char *out,
                       bool *differ)
{
    char path[4400], src[4400];
    snprintf(path, sizeof path, "%s/results.csv", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        tide_error("cannot create %s", path);
        return TIDE_E_IO;
    }
    json_t *rows = json_array();
    int rc = rows ? TIDE_OK : TIDE_E_NOMEM;
    fwrite(csv[0].line[0], 1, merge_len(csv[0].line[0]), f);
    *differ = false;
    FILE *sf = NULL;                                      /* summary.csv */
    long *next = calloc((size_t)ps->count, sizeof *next); /* [shard] its next row */
    if (!next)
        rc = TIDE_E_NOMEM;
    for (long e = 0; e < merge_entries(g) && rc == TIDE_OK; e++) {
        const long i = merge_entry(g, e);
        /* The baselines come from shard 0; every shard holds them. */
        const int k = i < 0 ? 0 : (int)(i % ps->count);
        const long r = next[k];
        for (int s = 0; s < ps->count; s++)
            next[s] += merge_holds(g, &ps->by_index[s]->shard, e);
        const struct cli_part *p = ps->by_index[k];
        for (long q = 0; q < g->repeats; q++) {
            const char *line = csv[k].line[1 + r * g->repeats + q];
            fwrite(line, 1, merge_len(line), f);
            *differ |= strstr(line, ",NO,") != NULL;
        }
        if (!sf) {
            snprintf(path, sizeof path, "%s/summary.csv", out);
            if (!(sf = fopen(path, "w")))
                rc = TIDE_E_IO;
            else
                fwrite(sum[0].line[0], 1, merge_len(sum[0].line[0]), sf);
        }
        if (sf && 1 + r < sum[k].n)
            fwrite(sum[k].line[1 + r], 1, merge_len(sum[k].line[1 + r]), sf);
        json_t *row = json_array_get(json_object_get(p->m, "rows"), (size_t)r);
        const char *file = json_string_value(json_object_get(row, "metrics"));
        snprintf(src, sizeof src, "%s/%s", p->dir, file);
        snprintf(path, sizeof path, "%s/%s", out, file);
        rc = cli_copy_file(src, path);
        json_array_append(rows, row);
    }
    free(next);
    if (sf && fclose(sf) != 0 && rc == TIDE_OK)
        rc = TIDE_E_IO;
    if (fclose(f) != 0 && rc == TIDE_OK) {
        tide_error("cannot write %s/results.csv", out);
        rc = TIDE_E_IO;
    }
    snprintf(src, sizeof src, "%s/config.ini", ps->by_index[0]->dir);
    snprintf(path, sizeof path, "%s/config.ini", out);
    if (rc == TIDE_OK)
        rc = cli_copy_file(src, path);
    json_t *m = rc == TIDE_OK ? cli_parts_manifest(ps) : NULL;
    if (rc == TIDE_OK && !m)
        rc = TIDE_E_NOMEM;
    if (rc == TIDE_OK) {
        bool strict = true;
        for (int k = 0; k < ps->count; k++)
            strict &= json_is_true(json_object_get(ps->by_index[k]->m, "strict_tokens"));
        json_object_set_new(m, "strict_tokens", json_boolean(strict));
        json_object_set(m, "rows", rows);
        json_object_set_new(m, "interrupted", json_false());
        snprintf(path, sizeof path, "%s/manifest.json", out);
        rc = cli_json_write(path, m);
    }
    json_decref(m);
    json_decref(rows);
    return rc;
}

/* Tokens that differ from the baseline fail the merge (after writing) when
 * one backend computed every expert, else they are expected (a warning). */
static int merge_token_verdict(bool differ, bool strict)
{
    if (differ && strict) {
        tide_error("bench merge: some configurations generated different tokens than the "
                   "baseline (column 'same'); placement must be lossless");
        return TIDE_E_INVAL;
    }
    if (differ)
        tide_warn("bench merge: some configurations generated different tokens than the "
                  "baseline; their device and host experts ran on different backends, so this "
                  "is expected");
    return TIDE_OK;
}

/* ---- Separate runs that differ in configuration keys ---- */

/* A CSV field: quoted when it holds a comma, a quote or a newline. */
static void merge_csv_field(FILE *f, const char *v)
{
    if (!strpbrk(v, ",\"\n")) {
        fprintf(f, ",%s", v);
        return;
    }
    fputs(",\"", f);
    for (; *v; v++) {
        if (*v == '"')
            fputc('"', f);
        fputc(*v, f);
    }
    fputc('"', f);
}

/* The keys ("section.key") whose values differ between the runs' "config". */
static json_t *merge_varied_keys(const struct cli_parts *ps)
{
    json_t *keys = json_array();
    for (int k = 0; keys && k < ps->n; k++) {
        const char *sec;
        const json_t *vals;
        json_object_foreach(json_object_get(ps->part[k].m, "config"), sec, vals)
        {
            const char *key;
            const json_t *v;
            json_object_foreach((json_t *)vals, key, v)
            {
                char name[256];
                snprintf(name, sizeof name, "%s.%s", sec, key);
                bool varies = false, listed = false;
                for (int j = 0; j < ps->n && !varies; j++) {
                    const json_t *w = json_object_get(
                        json_object_get(json_object_get(ps->part[j].m, "config"), sec), key);
                    varies = !w || !json_equal((json_t *)v, (json_t *)w);
                }
                size_t i;
                const json_t *x;
                json_array_foreach(keys, i, x) listed |= !strcmp(json_string_value(x), name);
                if (varies && !listed)
                    json_array_append_new(keys, json_string(name));
            }
        }
    }
    return keys;
}

/* Run k's value of key "section.key" ("" when it does not set it). */
static const char *merge_run_value(const struct cli_part *p, const char *name)
{
    char sec[128];
    const char *dot = strchr(name, '.');
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - name), name);
    const char *v = json_string_value(
        json_object_get(json_object_get(json_object_get(p->m, "config"), sec), dot + 1));
    return v ? v : "";
}

/* Copy csv's rows (all after the header) to f, each with the run's values of
 * the varied keys appended. */
static void merge_runs_rows(FILE *f, const struct merge_csv *csv, const struct cli_part *p,
                            const json_t *keys, bool *differ)
{
    for (int r = 1; r < csv->n; r++) {
        fwrite(csv->line[r], 1, merge_len(csv->line[r]) - 1, f);
        if (differ)
            *differ |= strstr(csv->line[r], ",NO,") != NULL;
        size_t i;
        const json_t *x;
        json_array_foreach(keys, i, x) merge_csv_field(f, merge_run_value(p, json_string_value(x)));
        fputc('\n', f);
    }
}

static void merge_runs_header(FILE *f, const struct merge_csv *csv, const json_t *keys)
{
    fwrite(csv->line[0], 1, merge_len(csv->line[0]) - 1, f);
    size_t i;
    const json_t *x;
    json_array_foreach(keys, i, x) fprintf(f, ",%s", json_string_value(x));
    fputc('\n', f);
}

/* Write OUT for runs: results.csv and summary.csv with a column per varied
 * key, each run's metrics as runK-FILE, config.ini (run 0's) and
 * config-runK.ini, and manifest.json (run 0's, with "runs", "varied" and
 * every run's rows). */
static int merge_runs_write(const struct cli_parts *ps, const struct merge_csv *csv,
                            const struct merge_csv *sum, const json_t *keys, const char *out,
                            bool *differ)
{
    char path[4400], src[4400];
    FILE *f[2] = {NULL, NULL};
    static const char *const names[2] = {"results.csv", "summary.csv"};
    const struct merge_csv *in[2] = {csv, sum};
    *differ = false;
    int rc = TIDE_OK;
    for (int t = 0; t < 2 && rc == TIDE_OK; t++) {
        snprintf(path, sizeof path, "%s/%s", out, names[t]);
        if (!(f[t] = fopen(path, "w"))) {
            tide_error("cannot create %s", path);
            rc = TIDE_E_IO;
            break;
        }
        merge_runs_header(f[t], &in[t][0], keys);
        for (int k = 0; k < ps->n; k++)
            merge_runs_rows(f[t], &in[t][k], &ps->part[k], keys, t ? NULL : differ);
    }
    for (int t = 0; t < 2; t++)
        if (f[t] && fclose(f[t]) != 0 && rc == TIDE_OK) {
            tide_error("cannot write %s/%s", out, names[t]);
            rc = TIDE_E_IO;
        }
    json_t *m = json_deep_copy(ps->part[0].m), *rows = json_array(), *runs = json_array();
    if (rc == TIDE_OK && (!m || !rows || !runs))
        rc = TIDE_E_NOMEM;
    bool strict = true;
    for (int k = 0; k < ps->n && rc == TIDE_OK; k++) {
        const struct cli_part *p = &ps->part[k];
        strict &= json_is_true(json_object_get(p->m, "strict_tokens"));
        size_t i;
        const json_t *row, *x;
        json_array_foreach(json_object_get(p->m, "rows"), i, row)
        {
            const char *file = json_string_value(json_object_get(row, "metrics"));
            char renamed[512];
            snprintf(renamed, sizeof renamed, "run%d-%s", k, file);
            snprintf(src, sizeof src, "%s/%s", p->dir, file);
            snprintf(path, sizeof path, "%s/%s", out, renamed);
            if (rc == TIDE_OK)
                rc = cli_copy_file(src, path);
            json_t *nr = json_deep_copy(row);
            json_object_set_new(nr, "metrics", json_string(renamed));
            json_object_set_new(nr, "run", json_integer(k));
            json_array_append_new(rows, nr);
        }
        snprintf(src, sizeof src, "%s/config.ini", p->dir);
        snprintf(path, sizeof path, "%s/config-run%d.ini", out, k);
        if (rc == TIDE_OK)
            rc = cli_copy_file(src, path);
        json_t *r = json_object(), *values = json_object();
        json_object_set_new(r, "index", json_integer(k));
        json_object_set_new(r, "dir", json_string(p->dir));
        static const char *const keep[] = {"host", "date", "cpu", "cores"};
        for (size_t j = 0; j < sizeof keep / sizeof keep[0]; j++)
            if (json_object_get(p->m, keep[j]))
                json_object_set(r, keep[j], json_object_get(p->m, keep[j]));
        json_array_foreach(keys, i, x) json_object_set_new(
            values, json_string_value(x), json_string(merge_run_value(p, json_string_value(x))));
        json_object_set_new(r, "values", values);
        json_array_append_new(runs, r);
    }
    snprintf(src, sizeof src, "%s/config.ini", ps->part[0].dir);
    snprintf(path, sizeof path, "%s/config.ini", out);
    if (rc == TIDE_OK)
        rc = cli_copy_file(src, path);
    if (rc == TIDE_OK) {
        char date[64];
        cli_utc_now(date, sizeof date);
        json_object_set_new(m, "merged", json_string(date));
        json_object_set(m, "varied", (json_t *)keys);
        json_object_set(m, "runs", runs);
        json_object_set(m, "rows", rows);
        json_object_set_new(m, "strict_tokens", json_boolean(strict));
        json_object_set_new(m, "interrupted", json_false());
        snprintf(path, sizeof path, "%s/manifest.json", out);
        rc = cli_json_write(path, m);
    }
    json_decref(m);
    json_decref(rows);
    json_decref(runs);
    return rc;
}

/* `merge` of separate unsharded runs (e.g. one per value of a key set with
 * --set in a shell loop): the same code, checkpoint and grid, configurations
 * that differ in some keys, which become columns. */
static int merge_runs(struct cli_parts *ps, const char *out, bool *differ, json_t **varied)
{
    static const char *const same[] = {"tide_version", "git_revision", "grid", "checkpoint", NULL};
    const struct cli_part *p0 = &ps->part[0];
    for (int k = 0; k < ps->n; k++) {
        const struct cli_part *p = &ps->part[k];
        if (json_is_true(json_object_get(p->m, "interrupted"))) {
            tide_error("tide bench merge: %s was interrupted; run it again", p->dir);
            return TIDE_E_INVAL;
        }
        for (const char *const *f = same; k && *f; f++) {
            char path[1024];
            snprintf(path, sizeof path, "%s", *f);
            if (cli_json_diff(json_object_get(p0->m, *f), json_object_get(p->m, *f), path,
                              sizeof path)) {
                char *va = cli_json_at(p0->m, path), *vb = cli_json_at(p->m, path);
                tide_error("tide bench merge: %s and %s are runs of different sweeps: %s differs "
                           "(%s in the first, %s in the second); runs merge when only their "
                           "configuration differs",
                           p0->dir, p->dir, path, va ? va : "?", vb ? vb : "?");
                free(va);
                free(vb);
                return TIDE_E_CONFIG;
            }
        }
    }
    json_t *keys = merge_varied_keys(ps);
    if (!keys)
        return TIDE_E_NOMEM;
    *varied = keys;
    if (!json_array_size(keys)) {
        tide_error("tide bench merge: %s and %s have the same configuration, so nothing tells "
                   "their rows apart; for repeats of one configuration use --repeats N, for "
                   "shards --shard K/N",
                   p0->dir, ps->part[1].dir);
        return TIDE_E_CONFIG;
    }
    struct merge_grid grid;
    struct merge_csv *csv = calloc((size_t)ps->n, sizeof *csv);
    struct merge_csv *sum = calloc((size_t)ps->n, sizeof *sum);
    int rc = csv && sum ? merge_grid_read(p0, &grid) : TIDE_E_NOMEM;
    for (int k = 0; k < ps->n && rc == TIDE_OK; k++)
        if ((rc = merge_read_csv(ps->part[k].dir, "results.csv", &csv[k])) == TIDE_OK &&
            (rc = merge_read_csv(ps->part[k].dir, "summary.csv", &sum[k])) == TIDE_OK)
            rc = merge_check_rows(&ps->part[k], &csv[k], &grid);
    for (int k = 1; k < ps->n && rc == TIDE_OK; k++)
        if (merge_len(csv[k].line[0]) != merge_len(csv[0].line[0]) ||
            memcmp(csv[k].line[0], csv[0].line[0], merge_len(csv[0].line[0]))) {
            tide_error("tide bench merge: %s and %s have different results.csv columns", p0->dir,
                       ps->part[k].dir);
            rc = TIDE_E_FORMAT;
        }
    /* A varied key cannot also be a swept column of the runs. */
    char *header = rc == TIDE_OK ? strndup(csv[0].line[0], merge_len(csv[0].line[0])) : NULL;
    for (size_t i = 0; header && i < json_array_size(keys); i++) {
        const char *key = json_string_value(json_array_get(keys, i));
        if (strstr(header, key)) {
            tide_error("tide bench merge: %s varies between the runs and is also swept within "
                       "them (a column of results.csv)",
                       key);
            rc = TIDE_E_CONFIG;
            break;
        }
    }
    free(header);
    bool created = false;
    if (rc == TIDE_OK && (rc = cli_out_dir_create("--out", out, &created)) == TIDE_OK) {
        rc = merge_runs_write(ps, csv, sum, keys, out, differ);
        if (rc != TIDE_OK)
            cli_out_dir_discard(out, created);
    }
    merge_csvs_free(csv, sum, ps->n);
    return rc;
}

int cmd_bench_merge(int argc, char **argv)
{
    const char *out = NULL;
    char **dirs = calloc((size_t)argc, sizeof *dirs);
    int n_dirs = 0;
    if (!dirs)
        return CLI_EXIT_RUNTIME;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            merge_usage(stdout);
            free(dirs);
            return CLI_EXIT_OK;
        }
        if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] == '-') {
            free(dirs);
            return cli_unexpected("bench merge", argv[i], merge_usage);
        } else {
            dirs[n_dirs++] = argv[i];
        }
    }
    if (!out || !n_dirs) {
        fprintf(stderr, "tide bench merge: %s\n\n",
                out ? "name the shards' result folders" : "name the output folder with --out DIR");
        merge_usage(stderr);
        free(dirs);
        return CLI_EXIT_USAGE;
    }
    struct cli_parts ps;
    static const char *const same[] = {"tide_version", "git_revision", "grid",
                                       "checkpoint",   "config",       NULL};
    int rc = cli_parts_load("bench", dirs, n_dirs, &ps);
    bool runs = rc == TIDE_OK && ps.n > 1;
    for (int k = 0; runs && k < ps.n; k++)
        runs = ps.part[k].shard.count == 1;
    if (runs) {
        bool differ = false;
        json_t *keys = NULL;
        rc = merge_runs(&ps, out, &differ, &keys);
        if (rc == TIDE_OK) {
            char list[512] = "";
            size_t i, at = 0;
            const json_t *x;
            json_array_foreach(keys, i, x) if (at < sizeof list) at += (size_t)snprintf(
                list + at, sizeof list - at, "%s%s", i ? ", " : "", json_string_value(x));
            tide_info("bench merge: %d runs differing in %s written to %s/results.csv (a column "
                      "per key)",
                      ps.n, list, out);
            bool strict = true;
            for (int k = 0; k < ps.n; k++)
                strict &= json_is_true(json_object_get(ps.part[k].m, "strict_tokens"));
            rc = merge_token_verdict(differ, strict);
        }
        json_decref(keys);
        cli_parts_free(&ps);
        free(dirs);
        return cli_exit_code(rc);
    }
    if (rc == TIDE_OK)
        rc = cli_parts_check("bench", &ps, same);
    struct merge_csv *csv = rc == TIDE_OK ? calloc((size_t)ps.count, sizeof *csv) : NULL;
    struct merge_csv *sum = rc == TIDE_OK ? calloc((size_t)ps.count, sizeof *sum) : NULL;
    if (rc == TIDE_OK && (!csv || !sum))
        rc = TIDE_E_NOMEM;
    struct merge_grid grid = {.points = 1, .repeats = 1};
    if (rc == TIDE_OK)
        rc = merge_grid_read(ps.by_index[0], &grid);
    for (int k = 0; k < (csv ? ps.count : 0) && rc == TIDE_OK; k++)
        if ((rc = merge_read_csv(ps.by_index[k]->dir, "results.csv", &csv[k])) == TIDE_OK &&
            (rc = merge_read_csv(ps.by_index[k]->dir, "summary.csv", &sum[k])) == TIDE_OK)
            rc = merge_check_rows(ps.by_index[k], &csv[k], &grid);
    for (int k = 1; k < (csv ? ps.count : 0) && rc == TIDE_OK; k++)
        if (merge_len(csv[k].line[0]) != merge_len(csv[0].line[0]) ||
            memcmp(csv[k].line[0], csv[0].line[0], merge_len(csv[0].line[0]))) {
            tide_error("tide bench merge: %s and %s have different results.csv columns",
                       ps.by_index[0]->dir, ps.by_index[k]->dir);
            rc = TIDE_E_FORMAT;
        }
    if (rc == TIDE_OK)
        rc = merge_check_reference(&ps);
    bool created = false, differ = false;
    if (rc == TIDE_OK && (rc = cli_out_dir_create("--out", out, &created)) == TIDE_OK) {
        rc = merge_write(&ps, csv, sum, &grid, out, &differ);
        if (rc != TIDE_OK)
            cli_out_dir_discard(out, created);
    }
    if (rc == TIDE_OK) {
        char hosts[512] = "";
        const json_t *h;
        size_t i;
        json_t *m = cli_parts_manifest(&ps);
        json_array_foreach(json_object_get(m, "hosts"), i, h)
        {
            size_t at = strlen(hosts);
            snprintf(hosts + at, sizeof hosts - at, "%s%s", i ? ", " : "", json_string_value(h));
        }
        json_decref(m);
        tide_info("bench merge: %d shards (hosts: %s), %ld configurations%s written to "
                  "%s/results.csv",
                  ps.count, hosts, grid.configs, grid.baseline ? " and the baselines" : "", out);
        bool strict = true;
        for (int k = 0; k < ps.count; k++)
            strict &= json_is_true(json_object_get(ps.by_index[k]->m, "strict_tokens"));
        rc = merge_token_verdict(differ, strict);
    }
    merge_csvs_free(csv, sum, ps.count);
    cli_parts_free(&ps);
    free(dirs);
    return cli_exit_code(rc);
}
