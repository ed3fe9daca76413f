/* Hardware profiles: the INI reader and writer, and the cost model
 * (tide/profile.h, docs/profiles.md). The reader is a small line parser of
 * its own so that every message names the profile file, line and key. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "tide/log.h"
#include "tide/profile.h"
#include "tide/quant.h"
#include "tide/shipped.h"
#include "tide/status.h"

enum prof_key {
    PK_NAME,
    PK_H2D,
    PK_D2H,
    PK_LATENCY,
    PK_OVERLAP,
    PK_HIDDEN,
    PK_INTER,
    PK_DENSE,
    PK_DENSE_TOK,
    PK_DEV_ROWS,
    PK_DEV_US,
    PK_HOST_ROWS,
    PK_HOST_US,
    PK_FORMAT,
    PK_COUNT,
};

static const struct {
    const char *section, *key;
    bool required;
} prof_keys[PK_COUNT] = {
    [PK_NAME] = {"profile", "name", false},
    [PK_H2D] = {"transfer", "h2d_gbps", true},
    [PK_D2H] = {"transfer", "d2h_gbps", true},
    [PK_LATENCY] = {"transfer", "latency_us", false},
    [PK_OVERLAP] = {"transfer", "overlap", true},
    [PK_HIDDEN] = {"expert", "hidden", true},
    [PK_INTER] = {"expert", "inter", true},
    [PK_FORMAT] = {"expert", "format", false},
    [PK_DENSE] = {"device", "dense_us", false},
    [PK_DENSE_TOK] = {"device", "dense_us_per_token", false},
    [PK_DEV_ROWS] = {"device", "rows", true},
    [PK_DEV_US] = {"device", "us", true},
    [PK_HOST_ROWS] = {"host", "rows", true},
    [PK_HOST_US] = {"host", "us", true},
};

static const char *const prof_sections[] = {"profile", "transfer", "expert", "device", "host"};

static char *prof_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        *--e = 0;
    return s;
}

/* Cut an inline comment: ';' or '#' at the start or after a blank. */
static void prof_cut_comment(char *s)
{
    for (char *p = s; *p; p++)
        if ((*p == ';' || *p == '#') && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
            *p = 0;
            return;
        }
}

static bool prof_number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && !*prof_trim(end) && errno == 0 && isfinite(*v);
}

/* "1, 2, 4" -> values; false on junk or too many. */
static bool prof_list(char *s, double *v, int *n)
{
    *n = 0;
    char *save = NULL;
    for (char *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == TIDE_PROFILE_MAX_POINTS || !prof_number(prof_trim(t), &v[*n]))
            return false;
        (*n)++;
    }
    return *n > 0;
}

struct prof_parse {
    const char *path;
    int errors;
    int line_of[PK_COUNT];
    double rows[2][TIDE_PROFILE_MAX_POINTS], us[2][TIDE_PROFILE_MAX_POINTS];
    int n_rows[2], n_us[2];
};

static void prof_bad(struct prof_parse *ps, int line, const char *section, const char *key,
                     const char *value, const char *why)
{
    tide_error("%s:%d: [%s] %s = '%s': %s", ps->path, line, section, key, value, why);
    ps->errors++;
}

static void prof_assign(struct prof_parse *ps, struct tide_profile *p, int line,
                        const char *section, const char *key, char *value)
{
    int k = -1, best = -1, best_d = 1 << 30;
    for (int i = 0; i < PK_COUNT; i++) {
        if (strcmp(prof_keys[i].section, section))
            continue;
        if (!strcmp(prof_keys[i].key, key))
            k = i;
        int d = tide_edit_distance(prof_keys[i].key, key);
        if (d < best_d) {
            best_d = d;
            best = i;
        }
    }
    if (k < 0) {
        if (best >= 0 && best_d <= 3)
            tide_error("%s:%d: unknown key '%s' in [%s]; did you mean %s?", ps->path, line, key,
                       section, prof_keys[best].key);
        else
            tide_error("%s:%d: unknown key '%s' in [%s] (see docs/profiles.md)", ps->path, line,
                       key, section);
        ps->errors++;
        return;
    }
    if (ps->line_of[k]) {
        tide_error("%s:%d: [%s] %s is set twice (first at line %d)", ps->path, line, section, key,
                   ps->line_of[k]);
        ps->errors++;
        return;
    }
    ps->line_of[k] = line;
    double v = 0;
    switch (k) {
    case PK_NAME:
        snprintf(p->name, sizeof p->name, "%s", value);
        return;
    case PK_OVERLAP:
        if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "on") ||
            !strcmp(value, "1"))
            p->overlap = true;
        else if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "off") ||
                 !strcmp(value, "0"))
            p->overlap = false;
        else
            prof_bad(ps, line, section, key, value, "expected true or false");
        return;
    case PK_FORMAT:
        if (tide_qfmt_parse(value, &p->qfmt))
            prof_bad(ps, line, section, key, value, "expected bf16, q8_0, q4_0 or fp8");
        else
            tide_qfmt_default_block(p->qfmt, p->qblock);
        return;
    case PK_DEV_ROWS:
    case PK_DEV_US:
    case PK_HOST_ROWS:
    case PK_HOST_US: {
        int c = k == PK_HOST_ROWS || k == PK_HOST_US;
        bool rows = k == PK_DEV_ROWS || k == PK_HOST_ROWS;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", value);
        if (!prof_list(copy, rows ? ps->rows[c] : ps->us[c], rows ? &ps->n_rows[c] : &ps->n_us[c]))
            prof_bad(ps, line, section, key, value,
                     "expected a comma-separated list of numbers (at most 32)");
        return;
    }
    default:
        break;
    }
    if (!prof_number(value, &v)) {
        prof_bad(ps, line, section, key, value, "not a number");
        return;
    }
    bool positive = k == PK_H2D || k == PK_D2H || k == PK_HIDDEN || k == PK_INTER;
    if (positive ? !(v > 0) : v < 0) {
        prof_bad(ps, line, section, key, value, positive ? "must be > 0" : "must be >= 0");
        return;
    }
    if ((k == PK_HIDDEN || k == PK_INTER) && (v != floor(v) || v > 1e6)) {
        prof_bad(ps, line, section, key, value, "must be a whole number of at most 1000000");
        return;
    }
    switch (k) {
    case PK_H2D:
        p->h2d_gbps = v;
        break;
    case PK_D2H:
        p->d2h_gbps = v;
        break;
    case PK_LATENCY:
        p->latency_us = v;
        break;
    case PK_HIDDEN:
        p->hidden = (uint32_t)v;
        break;
    case PK_INTER:
        p->inter = (uint32_t)v;
        break;
    case PK_DENSE:
        p->dense_us = v;
        break;
    case PK_DENSE_TOK:
        p->dense_us_per_token = v;
        break;
    default:
        break;
    }
}

/* Check and store one curve (c: 0 device, 1 host). */
static void prof_curve(struct prof_parse *ps, int c, struct tide_profile_curve *out)
{
    const char *sec = c ? "host" : "device";
    const int kr = c ? PK_HOST_ROWS : PK_DEV_ROWS, ku = c ? PK_HOST_US : PK_DEV_US;
    if (!ps->line_of[kr] || !ps->line_of[ku])
        return; /* reported as missing */
    if (ps->n_rows[c] != ps->n_us[c]) {
        tide_error("%s:%d: [%s] us has %d values but rows (line %d) has %d", ps->path,
                   ps->line_of[ku], sec, ps->n_us[c], ps->line_of[kr], ps->n_rows[c]);
        ps->errors++;
        return;
    }
    for (int i = 0; i < ps->n_rows[c]; i++) {
        if (ps->rows[c][i] < 1 || (i && ps->rows[c][i] <= ps->rows[c][i - 1])) {
            tide_error("%s:%d: [%s] rows must be >= 1 and strictly ascending", ps->path,
                       ps->line_of[kr], sec);
            ps->errors++;
            return;
        }
        if (!(ps->us[c][i] > 0)) {
            tide_error("%s:%d: [%s] us must be > 0 (value %d is %g)", ps->path, ps->line_of[ku],
                       sec, i + 1, ps->us[c][i]);
            ps->errors++;
            return;
        }
    }
    out->n = ps->n_rows[c];
    memcpy(out->rows, ps->rows[c], sizeof out->rows);
    memcpy(out->us, ps->us[c], sizeof out->us);
}

int tide_profile_load(const char *given, struct tide_profile *out)
{
    char path[PATH_MAX];
    int src = tide_shipped_path(given, "profile", path, sizeof path);
    if (src != TIDE_OK)
        return src;
    FILE *f = fopen(path, "r");
    if (!f) {
        int err = errno;
        tide_error("profile %s: cannot open: %s", path, strerror(err));
        return err == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_IO;
    }
    struct tide_profile p;
    memset(&p, 0, sizeof p);
    struct prof_parse ps;
    memset(&ps, 0, sizeof ps);
    ps.path = path;
    char *line = NULL, section[64] = "";
    size_t cap = 0;
    int no = 0;
    while (getline(&line, &cap, f) >= 0) {
        no++;
        char *s = prof_trim(line);
        if (!*s || *s == ';' || *s == '#')
            continue;
        if (*s == '[') {
            char *end = strchr(s, ']');
            size_t n_sec = sizeof prof_sections / sizeof prof_sections[0], i = 0;
            if (end) {
                *end = 0;
                for (; i < n_sec && strcmp(prof_sections[i], s + 1); i++)
                    ;
            }
            if (!end || i == n_sec) {
                tide_error("%s:%d: unknown section %s%s (a profile has [profile], [transfer], "
                           "[expert], [device] and [host])",
                           path, no, end ? s : "", end ? "]" : s);
                ps.errors++;
                section[0] = 0;
                continue;
            }
            snprintf(section, sizeof section, "%s", s + 1);
            continue;
        }
        prof_cut_comment(s);
        char *eq = strchr(s, '=');
        if (!eq) {
            tide_error("%s:%d: expected 'key = value' or '[section]'", path, no);
            ps.errors++;
            continue;
        }
        *eq = 0;
        char *key = prof_trim(s), *value = prof_trim(eq + 1);
        if (!*section) {
            tide_error("%s:%d: '%s' is outside any section", path, no, key);
            ps.errors++;
            continue;
        }
        prof_assign(&ps, &p, no, section, key, value);
    }
    bool rd_err = ferror(f);
    free(line);
    fclose(f);
    if (rd_err) {
        tide_error("profile %s: read error", path);
        return TIDE_E_IO;
    }
    for (int k = 0; k < PK_COUNT; k++)
        if (prof_keys[k].required && !ps.line_of[k]) {
            tide_error("%s: [%s] %s is missing (see docs/profiles.md)", path, prof_keys[k].section,
                       prof_keys[k].key);
            ps.errors++;
        }
    prof_curve(&ps, 0, &p.device);
    prof_curve(&ps, 1, &p.host);
    if (ps.errors)
        return TIDE_E_FORMAT;
    if (!p.name[0]) {
        const char *base = strrchr(path, '/');
        snprintf(p.name, sizeof p.name, "%.*s", (int)sizeof p.name - 1, base ? base + 1 : path);
        char *dot = strrchr(p.name, '.');
        if (dot && dot != p.name)
            *dot = 0;
    }
    *out = p;
    return TIDE_OK;
}

static void prof_put_curve(FILE *f, const char *key, const struct tide_profile_curve *c, bool us)
{
    fprintf(f, "%s = ", key);
    for (int i = 0; i < c->n; i++)
        fprintf(f, us ? "%s%.4g" : "%s%.0f", i ? ", " : "", us ? c->us[i] : c->rows[i]);
    fputc('\n', f);
}

static void prof_note(FILE *f, const char *const notes[11], int i)
{
    if (notes && notes[i] && *notes[i])
        fprintf(f, "; %s\n", notes[i]);
}

int tide_profile_save(const struct tide_profile *p, const char *path, bool overwrite,
                      const char *header, const char *const notes[11])
{
    if (!overwrite && access(path, F_OK) == 0) {
        tide_error("profile %s exists; refusing to replace it (use --force)", path);
        return TIDE_E_CONFIG;
    }
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp)
        return TIDE_E_NOMEM;
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        tide_error("profile: cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return TIDE_E_IO;
    }
    if (header) {
        const char *s = header;
        while (*s) {
            const char *e = strchr(s, '\n');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            fprintf(f, "; %.*s\n", (int)len, s);
            s += len + (e ? 1 : 0);
        }
        fputc('\n', f);
    }
    /* Keys in file order, with the section each opens. */
    char v[9][64];
    snprintf(v[0], sizeof v[0], "%s", p->name);
    snprintf(v[1], sizeof v[1], "%.4g", p->h2d_gbps);
    snprintf(v[2], sizeof v[2], "%.4g", p->d2h_gbps);
    snprintf(v[3], sizeof v[3], "%.4g", p->latency_us);
    snprintf(v[4], sizeof v[4], "%s", p->overlap ? "true" : "false");
    snprintf(v[5], sizeof v[5], "%u", p->hidden);
    snprintf(v[6], sizeof v[6], "%u", p->inter);
    snprintf(v[7], sizeof v[7], "%.4g", p->dense_us);
    snprintf(v[8], sizeof v[8], "%.4g", p->dense_us_per_token);
    static const int key_of[9] = {PK_NAME,   PK_H2D,   PK_D2H,   PK_LATENCY,  PK_OVERLAP,
                                  PK_HIDDEN, PK_INTER, PK_DENSE, PK_DENSE_TOK};
    const char *section = "";
    for (int i = 0; i < 9; i++) {
        const char *sec = prof_keys[key_of[i]].section;
        if (strcmp(sec, section))
            fprintf(f, "%s[%s]\n", *section ? "\n" : "", sec);
        section = sec;
        prof_note(f, notes, i);
        fprintf(f, "%s = %s\n", prof_keys[key_of[i]].key, v[i]);
        if (key_of[i] == PK_INTER && p->qfmt != TIDE_QFMT_NONE)
            fprintf(f, "%s = %s\n", prof_keys[PK_FORMAT].key, tide_qfmt_name(p->qfmt));
    }
    prof_note(f, notes, 9);
    prof_put_curve(f, "rows", &p->device, false);
    prof_put_curve(f, "us", &p->device, true);
    fprintf(f, "\n[host]\n");
    prof_note(f, notes, 10);
    prof_put_curve(f, "rows", &p->host, false);
    prof_put_curve(f, "us", &p->host, true);
    int rc = ferror(f) ? TIDE_E_IO : TIDE_OK;
    if (fclose(f) != 0)
        rc = TIDE_E_IO;
    if (rc == TIDE_OK && rename(tmp, path) != 0)
        rc = TIDE_E_IO;
    if (rc != TIDE_OK) {
        tide_error("profile: cannot write %s: %s", path, strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return rc;
}

double tide_profile_curve_us(const struct tide_profile_curve *c, double rows)
{
    if (rows <= 0 || c->n < 1)
        return 0;
    if (c->n == 1 || rows <= c->rows[0])
        return c->n == 1 ? c->us[0] * (rows > c->rows[0] ? rows / c->rows[0] : 1) : c->us[0];
    int i = 1;
    while (i < c->n - 1 && rows > c->rows[i])
        i++;
    const double x0 = c->rows[i - 1], x1 = c->rows[i], y0 = c->us[i - 1], y1 = c->us[i];
    double y = y0 + (y1 - y0) * (rows - x0) / (x1 - x0);
    return y > 0 ? y : 0;
}

int tide_cost_init(struct tide_cost *c, const struct tide_profile *p, uint32_t hidden,
                   uint32_t inter, bool allow_scale, const char *what, uint32_t max_rows)
{
    return tide_cost_init_fmt(c, p, hidden, inter, p->qfmt, allow_scale, what, max_rows);
}

int tide_cost_init_fmt(struct tide_cost *c, const struct tide_profile *p, uint32_t hidden,
                       uint32_t inter, int qfmt, bool allow_scale, const char *what,
                       uint32_t max_rows)
{
    memset(c, 0, sizeof *c);
    int blk[2];
    tide_qfmt_default_block(qfmt, blk);
    const uint64_t bytes = tide_qexpert_bytes(qfmt, blk, hidden, inter);
    const uint64_t ref = tide_qexpert_bytes(p->qfmt, p->qblock, p->hidden, p->inter);
    if ((hidden != p->hidden || inter != p->inter || qfmt != p->qfmt) && !allow_scale) {
        tide_error("profile %s was measured for experts of hidden %u x inter %u (%.2f MiB, %s), "
                   "but %s has hidden %u x inter %u (%.2f MiB, %s); measure a profile for that "
                   "shape (tide profile --hidden %u --inter %u --format %s) or allow scaling by "
                   "expert bytes",
                   p->name, p->hidden, p->inter, (double)ref / 1048576.0, tide_qfmt_name(p->qfmt),
                   what, hidden, inter, (double)bytes / 1048576.0, tide_qfmt_name(qfmt), hidden,
                   inter, tide_qfmt_name(qfmt));
        return TIDE_E_CONFIG;
    }
    c->p = *p;
    c->expert_bytes = bytes;
    c->hidden = hidden;
    /* Expert compute scales with the shape (its bf16 bytes are its FLOPs);
     * copies move the format's real bytes. A profile of another format keeps
     * its own compute curves (allow_scale): dequantizing kernels are not
     * faster in proportion to the bytes they read. */
    const int none[2] = {0, 0};
    c->scale = (double)tide_qexpert_bytes(TIDE_QFMT_NONE, none, hidden, inter) /
               (double)tide_qexpert_bytes(TIDE_QFMT_NONE, none, p->hidden, p->inter);
    c->promote_us = (double)bytes / (p->h2d_gbps * 1e3);
    c->down_us_row = (double)hidden * 2.0 / (p->d2h_gbps * 1e3);
    c->up_us_row = (double)hidden * 4.0 / (p->h2d_gbps * 1e3);
    c->n_tab = (int)(max_rows < 65535 ? max_rows : 65535) + 1;
    c->dev_tab = malloc(sizeof *c->dev_tab * (size_t)c->n_tab);
    c->host_tab = malloc(sizeof *c->host_tab * (size_t)c->n_tab);
    if (!c->dev_tab || !c->host_tab) {
        tide_cost_free(c);
        return TIDE_E_NOMEM;
    }
    for (int r = 0; r < c->n_tab; r++) {
        c->dev_tab[r] = c->scale * tide_profile_curve_us(&p->device, r);
        c->host_tab[r] = c->scale * tide_profile_curve_us(&p->host, r);
    }
    return TIDE_OK;
}

void tide_cost_policy_costs(const struct tide_cost *c, struct tide_policy_costs *out)
{
    *out = (struct tide_policy_costs){
        .size = sizeof *out,
        .expert_bytes = c->expert_bytes,
        .overlap = c->p.overlap,
        .promote_us = c->promote_us,
        .act_down_us_row = c->down_us_row,
        .act_up_us_row = c->up_us_row,
        .latency_us = c->p.latency_us,
        .n_rows = c->n_tab,
        .device_us = c->dev_tab,
        .host_us = c->host_tab,
    };
}

int tide_cost_rebind(struct tide_cost *c, const struct tide_policy_costs *pc)
{
    if (!pc || pc->n_rows < 2 || !pc->device_us || !pc->host_us) {
        tide_error("cost model: malformed policy costs");
        return TIDE_E_INVAL;
    }
    const int last = pc->n_rows - 1;
    const double ref = tide_profile_curve_us(&c->p.device, last);
    c->scale = ref > 0 ? pc->device_us[last] / ref : 1.0;
    c->expert_bytes = pc->expert_bytes;
    c->promote_us = pc->promote_us;
    c->down_us_row = pc->act_down_us_row;
    c->up_us_row = pc->act_up_us_row;
    for (int r = 0; r < c->n_tab; r++) {
        c->dev_tab[r] =
            r < pc->n_rows ? pc->device_us[r] : c->scale * tide_profile_curve_us(&c->p.device, r);
        c->host_tab[r] =
            r < pc->n_rows ? pc->host_us[r] : c->scale * tide_profile_curve_us(&c->p.host, r);
    }
    return TIDE_OK;
}

void tide_cost_free(struct tide_cost *c)
{
    if (!c)
        return;
    free(c->dev_tab);
    free(c->host_tab);
    c->dev_tab = c->host_tab = NULL;
    c->n_tab = 0;
}

void tide_cost_streams(const struct tide_cost *c, const struct tide_layer_work *w,
                       struct tide_layer_streams *s)
{
    s->dense = c->p.dense_us + c->p.dense_us_per_token * (double)w->tokens;
    s->device = w->device_us;
    s->weights = c->promote_us * (double)w->promotions;
    s->act_down =
        w->host_rows ? 2.0 * c->p.latency_us + c->down_us_row * (double)w->host_rows : 0.0;
    s->host = w->host_us;
    s->act_up = c->up_us_row * (double)w->host_rows;
}

double tide_cost_layer_us(const struct tide_cost *c, const struct tide_layer_work *w)
{
    struct tide_layer_streams s;
    tide_cost_streams(c, w, &s);
    if (!c->p.overlap)
        return s.dense + s.device + s.weights + s.act_down + s.host + s.act_up;
    double copy = s.weights + s.act_up, host = s.act_down + s.host + s.act_up;
    double m = s.device > copy ? s.device : copy;
    return s.dense + (m > host ? m : host);
}
