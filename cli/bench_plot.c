/* `tide bench plot DIR [--out PLOTDIR]`: SVG charts of a bench result
 * folder's results.csv (docs/sim.md, "Plots"): time, tokens/s and hit rate
 * against budget (each policy at its best interval), and against interval
 * where intervals were swept. Repeats give the median with a min..max error
 * bar; the no-offload baseline is drawn as a bound. Columns are found by
 * name, so added columns (a --sweep key) do not move them. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "svgplot.h"
#include "tide/log.h"
#include "tide/status.h"

#define BP_MAX_COLS   64
#define BP_MAX_SERIES 56 /* colour x marker pairs that do not repeat */

static void bp_usage(FILE *f)
{
    fprintf(f, "usage: tide bench plot DIR [--out PLOTDIR]\n\n"
               "Draws a tide bench result folder's results.csv as SVG charts in PLOTDIR\n"
               "(default DIR/plots): time-budget.svg, tokps-budget.svg and\n"
               "hitrate-budget.svg (one line per policy, policy-tide at its best interval per\n"
               "budget), and when several intervals were run, time-interval.svg,\n"
               "tokps-interval.svg and hitrate-interval.svg (one line per policy and budget).\n"
               "A configuration run with --repeats N is drawn at its median with a min..max\n"
               "error bar (as summary.csv); each --sweep point and batch size is its own line;\n"
               "the no-offload baseline is a grey dashed bound. Axes over powers of two are\n"
               "log2. DIR may also be a folder of result folders (the newest is drawn) or a\n"
               "results.csv. For PDF or PNG: python -m tide.plot (python/README.md).\n");
}

/* One configuration (its repeats share everything but the measurements). */
struct bp_cfg {
    char policy[96];
    char suffix[320]; /* the sweep values and batch, for series names */
    int interval;     /* -1: none */
    int budget, batch;
    bool baseline;
    double *v[3]; /* seconds, tokens/s, hit rate (%), one per repeat */
    int n, cap;
    double med[3], lo[3], hi[3];
};

struct bp_data {
    struct bp_cfg *cfg;
    int n, cap;
    bool several_batches;
};

static void bp_free(struct bp_data *d)
{
    for (int i = 0; i < d->n; i++)
        for (int m = 0; m < 3; m++)
            free(d->cfg[i].v[m]);
    free(d->cfg);
}

/* Split line (cut in place) at commas into f[max]; returns the count. */
static int bp_fields(char *line, char **f, int max)
{
    int n = 0;
    for (char *p = line;; p++) {
        if (n < max)
            f[n] = p;
        n++;
        p += strcspn(p, ",");
        if (!*p)
            break;
        *p = 0;
    }
    return n;
}

static int bp_col(char **head, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(head[i], name))
            return i;
    return -1;
}

static int bp_add(struct bp_data *d, struct bp_cfg *key, const double *v)
{
    struct bp_cfg *c = NULL;
    for (int i = 0; i < d->n && !c; i++)
        if (!strcmp(d->cfg[i].policy, key->policy) && !strcmp(d->cfg[i].suffix, key->suffix) &&
            d->cfg[i].interval == key->interval && d->cfg[i].budget == key->budget &&
            d->cfg[i].batch == key->batch)
            c = &d->cfg[i];
    if (!c) {
        if (d->n == d->cap) {
            int cap = d->cap ? 2 * d->cap : 64;
            struct bp_cfg *p = realloc(d->cfg, sizeof *p * (size_t)cap);
            if (!p)
                return TIDE_E_NOMEM;
            d->cfg = p;
            d->cap = cap;
        }
        c = &d->cfg[d->n++];
        *c = *key;
        c->n = c->cap = 0;
        for (int m = 0; m < 3; m++)
            c->v[m] = NULL;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 4;
        for (int m = 0; m < 3; m++) {
            double *p = realloc(c->v[m], sizeof *p * (size_t)cap);
            if (!p)
                return TIDE_E_NOMEM;
            c->v[m] = p;
        }
        c->cap = cap;
    }
    for (int m = 0; m < 3; m++)
        c->v[m][c->n] = v[m];
    c->n++;
    return TIDE_OK;
}

static int bp_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Read results.csv by column name into configurations. */
static int bp_read(const char *path, struct bp_data *d)
{
    char *text;
    size_t len;
    int rc = cli_read_file(path, &text, &len);
    if (rc != TIDE_OK)
        return rc;
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    char *head[BP_MAX_COLS], *f[BP_MAX_COLS];
    const int nh = line ? bp_fields(line, head, BP_MAX_COLS) : 0;
    if (nh > BP_MAX_COLS) {
        tide_error("%s: %d columns; tide bench plot reads at most %d", path, nh, BP_MAX_COLS);
        free(text);
        return TIDE_E_FORMAT;
    }
    for (int i = 0; i < nh; i++)
        head[i][strcspn(head[i], "\r")] = 0;
    static const char *const need[] = {"policy", "budget", "seconds", "tokens_per_second",
                                       "hit_rate"};
    int col[5];
    for (int k = 0; k < 5; k++)
        if ((col[k] = bp_col(head, nh, need[k])) < 0) {
            tide_error("%s: no column '%s' (a tide bench results.csv has policy, interval, "
                       "budget, seconds, hit_rate, tokens_per_second, batch, repeat)",
                       path, need[k]);
            free(text);
            return TIDE_E_FORMAT;
        }
    const int c_iv = bp_col(head, nh, "interval"), c_batch = bp_col(head, nh, "batch");
    /* --sweep keys are SECTION.KEY columns. */
    int sweep[BP_MAX_COLS], n_sweep = 0;
    for (int i = 0; i < nh; i++)
        if (strchr(head[i], '.'))
            sweep[n_sweep++] = i;
    int first_batch = -1;
    for (int ln = 2; rc == TIDE_OK && (line = strtok_r(NULL, "\n", &save)); ln++) {
        line[strcspn(line, "\r")] = 0;
        if (!*line)
            continue;
        const int n = bp_fields(line, f, BP_MAX_COLS);
        if (n != nh) {
            tide_error("%s:%d: %d fields where the header has %d", path, ln, n, nh);
            rc = TIDE_E_FORMAT;
            break;
        }
        struct bp_cfg k = {0};
        snprintf(k.policy, sizeof k.policy, "%s", f[col[0]]);
        k.baseline = !strncmp(k.policy, "(no offload)", 12);
        char *end;
        k.budget = (int)strtol(f[col[1]], &end, 10);
        if (!k.baseline && (end == f[col[1]] || *end)) {
            tide_error("%s:%d: budget '%s' is not a number", path, ln, f[col[1]]);
            rc = TIDE_E_FORMAT;
            break;
        }
        k.interval = c_iv >= 0 && f[c_iv][0] != '-' && f[c_iv][0] ? atoi(f[c_iv]) : -1;
        k.batch = c_batch >= 0 ? atoi(f[c_batch]) : 1;
        if (first_batch < 0)
            first_batch = k.batch;
        d->several_batches |= k.batch != first_batch;
        size_t sl = 0;
        for (int s = 0; s < n_sweep; s++) {
            const char *key = strrchr(head[sweep[s]], '.') + 1;
            sl += (size_t)snprintf(k.suffix + sl, sl < sizeof k.suffix ? sizeof k.suffix - sl : 0,
                                   "%s%s=%s", sl ? " " : "", key, f[sweep[s]]);
            if (sl >= sizeof k.suffix)
                sl = sizeof k.suffix - 1;
        }
        double v[3];
        for (int m = 0; m < 3; m++) {
            const char *t = f[col[2 + m]];
            v[m] = *t ? strtod(t, &end) : NAN;
            if (*t && *end) {
                tide_error("%s:%d: %s '%s' is not a number", path, ln, need[2 + m], t);
                rc = TIDE_E_FORMAT;
            }
        }
        v[2] *= 100; /* hit rate in % */
        if (rc == TIDE_OK)
            rc = bp_add(d, &k, v);
    }
    free(text);
    if (rc == TIDE_OK && !d->n) {
        tide_error("%s: no rows to plot", path);
        rc = TIDE_E_FORMAT;
    }
    /* Median and min..max over each configuration's repeats. */
    for (int i = 0; rc == TIDE_OK && i < d->n; i++) {
        struct bp_cfg *c = &d->cfg[i];
        for (int m = 0; m < 3; m++) {
            qsort(c->v[m], (size_t)c->n, sizeof(double), bp_cmp_double);
            const int n = c->n;
            c->med[m] = n % 2 ? c->v[m][n / 2] : 0.5 * (c->v[m][n / 2 - 1] + c->v[m][n / 2]);
            c->lo[m] = c->v[m][0];
            c->hi[m] = c->v[m][n - 1];
        }
    }
    return rc;
}

/* The series name of configuration c: policy, [budget], sweep, batch. */
static void bp_name(const struct bp_data *d, const struct bp_cfg *c, bool with_budget, char *buf,
                    size_t len)
{
    int n = snprintf(buf, len, "%s", c->baseline ? "no offload" : c->policy);
    if (with_budget && !c->baseline && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " b%d", c->budget);
    if (c->suffix[0] && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " %s", c->suffix);
    if (d->several_batches && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " batch %d", c->batch);
}

/* The points of one chart's series, owned here. */
struct bp_chart {
    struct svg_series s[BP_MAX_SERIES];
    char name[BP_MAX_SERIES][448];
    double *x[BP_MAX_SERIES], *y[BP_MAX_SERIES], *lo[BP_MAX_SERIES], *hi[BP_MAX_SERIES];
    int n;
    bool dropped;
};

static void bp_chart_free(struct bp_chart *ch)
{
    for (int i = 0; i < ch->n; i++) {
        free(ch->x[i]);
        free(ch->y[i]);
        free(ch->lo[i]);
        free(ch->hi[i]);
    }
    ch->n = 0;
}

/* The series called name, created (with room for cap points) if new. */
static struct svg_series *bp_series(struct bp_chart *ch, const char *name, int cap)
{
    for (int i = 0; i < ch->n; i++)
        if (!strcmp(ch->name[i], name))
            return &ch->s[i];
    if (ch->n == BP_MAX_SERIES) {
        ch->dropped = true;
        return NULL;
    }
    const int i = ch->n;
    snprintf(ch->name[i], sizeof ch->name[i], "%s", name);
    ch->x[i] = calloc((size_t)cap, sizeof(double));
    ch->y[i] = calloc((size_t)cap, sizeof(double));
    ch->lo[i] = calloc((size_t)cap, sizeof(double));
    ch->hi[i] = calloc((size_t)cap, sizeof(double));
    if (!ch->x[i] || !ch->y[i] || !ch->lo[i] || !ch->hi[i]) {
        free(ch->x[i]);
        free(ch->y[i]);
        free(ch->lo[i]);
        free(ch->hi[i]);
        return NULL;
    }
    ch->s[i] = (struct svg_series){.name = ch->name[i],
                                   .x = ch->x[i],
                                   .y = ch->y[i],
                                   .markers = true,
                                   .ylo = ch->lo[i],
                                   .yhi = ch->hi[i]};
    ch->n++;
    return &ch->s[i];
}

/* Add point (x, configuration c's metric m) to a series, keeping x sorted;
 * an x already there keeps the lower median time (the best interval). */
static void bp_point(struct bp_chart *ch, struct svg_series *s, double x, const struct bp_cfg *c,
                     int m, double *key_time)
{
    const int i = (int)(s - ch->s);
    int k = 0;
    while (k < s->n && ch->x[i][k] < x)
        k++;
    if (k < s->n && ch->x[i][k] == x) {
        if (!(c->med[0] < key_time[k]))
            return;
    } else {
        memmove(&ch->x[i][k + 1], &ch->x[i][k], sizeof(double) * (size_t)(s->n - k));
        memmove(&ch->y[i][k + 1], &ch->y[i][k], sizeof(double) * (size_t)(s->n - k));
        memmove(&ch->lo[i][k + 1], &ch->lo[i][k], sizeof(double) * (size_t)(s->n - k));
        memmove(&ch->hi[i][k + 1], &ch->hi[i][k], sizeof(double) * (size_t)(s->n - k));
        memmove(&key_time[k + 1], &key_time[k], sizeof(double) * (size_t)(s->n - k));
        s->n++;
    }
    ch->x[i][k] = x;
    ch->y[i][k] = c->med[m];
    /* One repeat: no bar. */
    ch->lo[i][k] = c->n > 1 ? c->lo[m] : NAN;
    ch->hi[i][k] = c->n > 1 ? c->hi[m] : NAN;
    key_time[k] = c->med[0];
}

/* One chart of metric m against budget (by_interval false) or interval. */
static int bp_chart(const struct bp_data *d, int m, bool by_interval, const char *path)
{
    static const char *const ylabel[3] = {"time for the prompt set (s)", "tokens per second",
                                          "hit rate (%)"};
    static const char *const what[3] = {"Time", "Tokens per second", "Hit rate"};
    struct bp_chart *ch = calloc(1, sizeof *ch);
    double **best = calloc(BP_MAX_SERIES, sizeof *best);
    if (!ch || !best) {
        free(ch);
        free(best);
        return TIDE_E_NOMEM;
    }
    int rc = TIDE_OK;
    double x0 = INFINITY, x1 = -INFINITY;
    char name[448];
    for (int i = 0; i < d->n && rc == TIDE_OK; i++) {
        const struct bp_cfg *c = &d->cfg[i];
        if (c->baseline || (by_interval && c->interval < 1))
            continue;
        const double x = by_interval ? c->interval : c->budget;
        bp_name(d, c, by_interval, name, sizeof name);
        struct svg_series *s = bp_series(ch, name, d->n);
        if (!s) {
            if (ch->dropped)
                continue;
            rc = TIDE_E_NOMEM;
            break;
        }
        const int si = (int)(s - ch->s);
        if (!best[si] && !(best[si] = calloc((size_t)d->n, sizeof(double)))) {
            rc = TIDE_E_NOMEM;
            break;
        }
        bp_point(ch, s, x, c, m, best[si]);
        x0 = fmin(x0, x);
        x1 = fmax(x1, x);
    }
    /* Against interval: only series with several intervals tell anything. */
    for (int i = 0; by_interval && i < ch->n; i++)
        if (ch->s[i].n < 2)
            ch->s[i].n = 0;
    /* The baselines, as bounds over the x range drawn. */
    for (int i = 0; rc == TIDE_OK && isfinite(x0) && i < d->n; i++) {
        const struct bp_cfg *c = &d->cfg[i];
        if (!c->baseline)
            continue;
        bp_name(d, c, false, name, sizeof name);
        struct svg_series *s = bp_series(ch, name, 2);
        if (!s)
            continue;
        const int si = (int)(s - ch->s);
        ch->x[si][0] = x0;
        ch->x[si][1] = x1;
        ch->y[si][0] = ch->y[si][1] = c->med[m];
        s->n = 2;
        s->bound = true;
        s->markers = false;
        s->ylo = s->yhi = NULL;
    }
    int drawn = 0;
    for (int i = 0; i < ch->n; i++)
        drawn += ch->s[i].n > 0 && !ch->s[i].bound;
    if (ch->dropped)
        tide_warn("%s: more than %d lines; the rest are left out", path, BP_MAX_SERIES);
    char title[160];
    snprintf(title, sizeof title, "%s against %s%s", what[m], by_interval ? "interval" : "budget",
             by_interval ? "" : " (policy-tide at its best interval)");
    if (rc == TIDE_OK && drawn)
        rc = svg_line_chart(path, title,
                            by_interval ? "refresh interval (steps)"
                                        : "experts per MoE layer on the device",
                            ylabel[m], ch->s, ch->n, SVG_SCALE_AUTO, SVG_SCALE_LINEAR);
    else if (rc == TIDE_OK)
        rc = TIDE_E_NOTFOUND; /* nothing of this kind: no file */
    for (int i = 0; i < BP_MAX_SERIES; i++)
        free(best[i]);
    free(best);
    bp_chart_free(ch);
    free(ch);
    return rc;
}

/* DIR as given: a results.csv, a result folder, or a folder of them (the
 * newest by name, which is its timestamp). */
static int bp_find(const char *arg, char *csv, size_t len, char *dir, size_t dlen)
{
    struct stat st;
    if (stat(arg, &st) != 0) {
        tide_error("tide bench plot: %s: %s", arg, strerror(errno));
        return TIDE_E_NOTFOUND;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(csv, len, "%s", arg);
        snprintf(dir, dlen, "%s", arg);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, dlen, ".");
        return TIDE_OK;
    }
    snprintf(csv, len, "%s/results.csv", arg);
    snprintf(dir, dlen, "%s", arg);
    if (stat(csv, &st) == 0)
        return TIDE_OK;
    DIR *dh = opendir(arg);
    char newest[256] = "";
    for (struct dirent *e; dh && (e = readdir(dh));) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s/results.csv", arg, e->d_name);
        if (e->d_name[0] != '.' && strcmp(e->d_name, newest) > 0 && stat(p, &st) == 0)
            snprintf(newest, sizeof newest, "%s", e->d_name);
    }
    if (dh)
        closedir(dh);
    if (!newest[0]) {
        tide_error("tide bench plot: %s has no results.csv, nor a result folder holding one", arg);
        return TIDE_E_NOTFOUND;
    }
    snprintf(csv, len, "%s/%s/results.csv", arg, newest);
    snprintf(dir, dlen, "%s/%s", arg, newest);
    tide_info("bench plot: the newest result folder under %s: %s", arg, newest);
    return TIDE_OK;
}

int cmd_bench_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            bp_usage(stdout);
            return CLI_EXIT_OK;
        }
        if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (argv[i][0] == '-' || in) {
            return cli_unexpected("bench plot", argv[i], bp_usage);
        } else {
            in = argv[i];
        }
    }
    if (!in) {
        fprintf(stderr, "tide bench plot: name the result folder\n\n");
        bp_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    char csv[4200], dir[4200], plots[4300], path[4400];
    int rc = bp_find(in, csv, sizeof csv, dir, sizeof dir);
    struct bp_data d = {0};
    if (rc == TIDE_OK)
        rc = bp_read(csv, &d);
    snprintf(plots, sizeof plots, "%s", out ? out : dir);
    if (!out)
        strncat(plots, "/plots", sizeof plots - strlen(plots) - 1);
    if (rc == TIDE_OK) {
        cli_mkdir_parents(plots);
        if (mkdir(plots, 0777) != 0 && errno != EEXIST) {
            tide_error("tide bench plot: cannot create %s: %s", plots, strerror(errno));
            rc = TIDE_E_IO;
        }
    }
    static const char *const file[3] = {"time", "tokps", "hitrate"};
    int written = 0;
    for (int by = 0; by < 2 && rc == TIDE_OK; by++)
        for (int m = 0; m < 3 && rc == TIDE_OK; m++) {
            snprintf(path, sizeof path, "%s/%s-%s.svg", plots, file[m], by ? "interval" : "budget");
            rc = bp_chart(&d, m, by == 1, path);
            if (rc == TIDE_E_NOTFOUND)
                rc = TIDE_OK;
            else if (rc == TIDE_OK)
                written++;
        }
    if (rc == TIDE_OK)
        printf("%d plots of %s in %s/\n", written, csv, plots);
    bp_free(&d);
    return cli_exit_code(rc);
}
