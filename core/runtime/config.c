/* Configuration. Schemas come from option tables (the core's and each
 * plugin's); values come from defaults, then the INI file, then --set. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "tide/log.h"
#include "tide/status.h"

/* Debian's libinih is built with INI_MAX_LINE 200: a longer line is cut and
 * the rest parsed as a new line. We refuse such lines before inih sees them. */
#define CFG_MAX_LINE 198

struct cfg_value {
    char *text;      /* as written */
    char origin[64]; /* "default", "FILE:LINE", "--set" */
    int line;        /* line in the file or text that set it, 0 if not from one */
    int source;      /* TIDE_CONFIG_SRC_DEFAULT, _CMDLINE, or the id of that file or text */
    union {
        int64_t i;
        double f;
        bool b;
        uint64_t sz;
    } v;
};

struct tide_opts {
    char *section;
    char *owner;
    char *summary;
    const struct tide_option *table;
    int n;
    struct cfg_value *vals;         /* [n] */
    struct tide_config *standalone; /* the config to free with it (tide_opts_create), or NULL */
};

struct tide_config {
    struct tide_opts *sec; /* [n_sec] */
    int n_sec;
    char *path;
    int n_sources;     /* files and texts read so far (included ones too) */
    char *plugin_dirs; /* where plugins were searched, for messages, or NULL */
};

/* Nested include files at most (a chain this deep is surely a mistake). */
#define CFG_MAX_INCLUDE_DEPTH 16

/* State of one ini_parse call. */
struct cfg_parse {
    struct tide_config *cfg;
    const char *path;
    char **lines; /* [n_lines] raw lines of the file, for line numbers */
    int n_lines;
    int cursor; /* 0-based index of the line after the last match */
    int errors;
    int source;                    /* this file's or text's id (tide_config_source) */
    bool is_text;                  /* INI text: includes are taken from the current directory */
    char *real;                    /* realpath of the file, or NULL (text) */
    const struct cfg_parse *outer; /* the file that included this one, or NULL */
    int depth;                     /* includes between this file and the one loaded */
};

static char *cfg_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

struct tide_config *tide_config_create(void)
{
    return calloc(1, sizeof(struct tide_config));
}

void tide_config_destroy(struct tide_config *cfg)
{
    if (!cfg)
        return;
    for (int s = 0; s < cfg->n_sec; s++) {
        struct tide_opts *o = &cfg->sec[s];
        for (int i = 0; i < o->n; i++)
            free(o->vals[i].text);
        free(o->vals);
        free(o->section);
        free(o->owner);
        free(o->summary);
    }
    free(cfg->sec);
    free(cfg->path);
    free(cfg->plugin_dirs);
    free(cfg);
}

int tide_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    /* Optimal string alignment: two swapped letters ("lur" for "lru") cost
     * one edit, as a typo does. */
    int prev2[64] = {0}, prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            const int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            int sub = prev[j - 1] + (ai != bj);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == bj && prev2[j - 2] + 1 < cur[j])
                cur[j] = prev2[j - 2] + 1;
        }
        memcpy(prev2, prev, sizeof(int) * (lb + 1));
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

/* ---- value parsing ------------------------------------------------------ */

static const char *cfg_type_short(enum tide_opt_type t)
{
    switch (t) {
    case TIDE_OPT_INT:
        return "int";
    case TIDE_OPT_FLOAT:
        return "float";
    case TIDE_OPT_BOOL:
        return "bool";
    case TIDE_OPT_STRING:
        return "string";
    case TIDE_OPT_ENUM:
        return "enum";
    case TIDE_OPT_SIZE:
        return "size";
    }
    return "?";
}

/* Range "[lo,hi]", "(lo,hi]", "[lo,]", "[,hi)". Returns true when v is inside
 * or when there is no range. */
static bool cfg_in_range(const char *range, double v)
{
    if (!range || !*range)
        return true;
    char open = range[0];
    const char *comma = strchr(range, ',');
    size_t len = strlen(range);
    if (!comma || len < 3)
        return true;
    char close = range[len - 1];
    char *end;
    if (comma > range + 1) {
        double lo = strtod(range + 1, &end);
        if (open == '(' ? !(v > lo) : !(v >= lo))
            return false;
    }
    if (comma + 1 < range + len - 1) {
        double hi = strtod(comma + 1, &end);
        if (close == ')' ? !(v < hi) : !(v <= hi))
            return false;
    }
    return true;
}

static bool cfg_enum_has(const char *choices, const char *v)
{
    size_t n = strlen(v);
    const char *p = choices;
    while (p && *p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n))
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

int tide_parse_size(const char *text, uint64_t *out)
{
    static const struct {
        const char *unit;
        double mul;
    } units[] = {
        {"", 1},
        {"b", 1},
        {"kib", 1024.0},
        {"mib", 1048576.0},
        {"gib", 1073741824.0},
        {"tib", 1099511627776.0},
        {"kb", 1e3},
        {"mb", 1e6},
        {"gb", 1e9},
        {"tb", 1e12},
        {"k", 1024.0},
        {"m", 1048576.0},
        {"g", 1073741824.0},
        {"t", 1099511627776.0},
    };
    if (!text)
        return TIDE_E_INVAL;
    while (isspace((unsigned char)*text))
        text++;
    if (!isdigit((unsigned char)*text) && *text != '.')
        return TIDE_E_INVAL;
    /* Plain decimal only: strtod would also take hex and exponents. */
    for (const char *q = text; *q && (isalnum((unsigned char)*q) || *q == '.'); q++)
        if (*q == 'x' || *q == 'X' || ((*q == 'e' || *q == 'E') && isdigit((unsigned char)q[1])))
            return TIDE_E_INVAL;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || end == text || !isfinite(v) || v < 0)
        return TIDE_E_INVAL;
    while (isspace((unsigned char)*end))
        end++;
    char unit[8];
    size_t ul = strlen(end);
    while (ul > 0 && isspace((unsigned char)end[ul - 1]))
        ul--;
    if (ul >= sizeof unit)
        return TIDE_E_INVAL;
    for (size_t i = 0; i < ul; i++)
        unit[i] = (char)tolower((unsigned char)end[i]);
    unit[ul] = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (!strcmp(unit, units[i].unit)) {
            double bytes = v * units[i].mul;
            if (bytes >= 18446744073709551615.0)
                return TIDE_E_INVAL;
            if (bytes != floor(bytes) && units[i].mul == 1)
                return TIDE_E_INVAL; /* fractional bytes */
            *out = (uint64_t)floor(bytes);
            return TIDE_OK;
        }
    }
    return TIDE_E_INVAL;
}

/* Parse text for option `opt` into val. On failure, writes what was expected
 * into why and returns TIDE_E_CONFIG. */
static int cfg_parse_value(const struct tide_option *opt, const char *text, struct cfg_value *val,
                           char *why, size_t why_len)
{
    char *end;
    switch (opt->type) {
    case TIDE_OPT_INT: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end) {
            snprintf(why, why_len, "expected an integer%s%s", opt->range ? " in " : "",
                     opt->range ? opt->range : "");
            return TIDE_E_CONFIG;
        }
        if (!cfg_in_range(opt->range, (double)v)) {
            snprintf(why, why_len, "expected an integer in %s", opt->range);
            return TIDE_E_CONFIG;
        }
        val->v.i = v;
        return TIDE_OK;
    }
    case TIDE_OPT_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end || !isfinite(v)) {
            snprintf(why, why_len, "expected a number%s%s", opt->range ? " in " : "",
                     opt->range ? opt->range : "");
            return TIDE_E_CONFIG;
        }
        if (!cfg_in_range(opt->range, v)) {
            snprintf(why, why_len, "expected a number in %s", opt->range);
            return TIDE_E_CONFIG;
        }
        val->v.f = v;
        return TIDE_OK;
    }
    case TIDE_OPT_BOOL: {
        static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
        for (int i = 0; i < 4; i++) {
            if (!strcasecmp(text, yes[i])) {
                val->v.b = true;
                return TIDE_OK;
            }
            if (!strcasecmp(text, no[i])) {
                val->v.b = false;
                return TIDE_OK;
            }
        }
        snprintf(why, why_len, "expected a boolean: true/false, yes/no, on/off or 1/0");
        return TIDE_E_CONFIG;
    }
    case TIDE_OPT_STRING:
        return TIDE_OK;
    case TIDE_OPT_ENUM:
        if (!cfg_enum_has(opt->choices, text)) {
            snprintf(why, why_len, "expected one of %s", opt->choices);
            return TIDE_E_CONFIG;
        }
        return TIDE_OK;
    case TIDE_OPT_SIZE: {
        uint64_t v;
        if (tide_parse_size(text, &v) != TIDE_OK) {
            snprintf(why, why_len,
                     "expected a size such as 4096, 512MiB, 12GiB or 1.5GB (units B, KiB, MiB, "
                     "GiB, TiB, KB, MB, GB, TB)");
            return TIDE_E_CONFIG;
        }
        if (!cfg_in_range(opt->range, (double)v)) {
            snprintf(why, why_len, "expected a size in %s bytes", opt->range);
            return TIDE_E_CONFIG;
        }
        val->v.sz = v;
        return TIDE_OK;
    }
    }
    snprintf(why, why_len, "option has an unknown type");
    return TIDE_E_CONFIG;
}

/* ---- schema ------------------------------------------------------------- */

static struct tide_opts *cfg_find(const struct tide_config *cfg, const char *name)
{
    for (int s = 0; s < cfg->n_sec; s++)
        if (!strcmp(cfg->sec[s].section, name))
            return &cfg->sec[s];
    return NULL;
}

static int cfg_key_index(const struct tide_opts *o, const char *key)
{
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->table[i].name, key))
            return i;
    return -1;
}

int tide_config_add_section(struct tide_config *cfg, const char *name,
                            const struct tide_option *table, const char *owner, const char *summary)
{
    if (cfg_find(cfg, name)) {
        tide_error("config: section [%s] is declared twice (by %s)", name, owner);
        return TIDE_E_INVAL;
    }
    int n = 0;
    while (table && table[n].name)
        n++;
    struct tide_opts *sec = realloc(cfg->sec, sizeof *sec * (size_t)(cfg->n_sec + 1));
    if (!sec)
        return TIDE_E_NOMEM;
    cfg->sec = sec;
    struct tide_opts *o = &cfg->sec[cfg->n_sec];
    memset(o, 0, sizeof *o);
    o->section = cfg_strdup(name);
    o->owner = cfg_strdup(owner ? owner : "core");
    o->summary = cfg_strdup(summary ? summary : "");
    o->table = table;
    o->n = n;
    o->vals = calloc((size_t)(n ? n : 1), sizeof *o->vals);
    if (!o->section || !o->owner || !o->summary || !o->vals) {
        free(o->section);
        free(o->owner);
        free(o->summary);
        free(o->vals);
        return TIDE_E_NOMEM;
    }
    /* Every value is set before the section counts, so a failure leaves no
     * half-built section behind. */
    for (int i = 0; i < n; i++) {
        char why[256];
        struct cfg_value *v = &o->vals[i];
        const char *def = table[i].def ? table[i].def : "";
        int rc = cfg_parse_value(&table[i], def, v, why, sizeof why);
        if (rc != TIDE_OK)
            tide_error("config: default of [%s] %s = '%s' does not parse (%s): a bug in %s", name,
                       table[i].name, def, why, o->owner);
        else if (!(v->text = cfg_strdup(def)))
            rc = TIDE_E_NOMEM;
        if (rc != TIDE_OK) {
            for (int j = 0; j <= i; j++)
                free(o->vals[j].text);
            free(o->vals);
            free(o->section);
            free(o->owner);
            free(o->summary);
            return rc == TIDE_E_NOMEM ? rc : TIDE_E_INVAL;
        }
        snprintf(v->origin, sizeof v->origin, "default");
    }
    cfg->n_sec++;
    return TIDE_OK;
}

/* "did you mean" for a key: the closest key in this section, else the same
 * key in another section. */
static void cfg_suggest_key(const struct tide_config *cfg, const struct tide_opts *o,
                            const char *key, char *buf, size_t len)
{
    int best = 99;
    const char *hit = NULL;
    for (int i = 0; i < o->n; i++) {
        int d = tide_edit_distance(key, o->table[i].name);
        if (d < best) {
            best = d;
            hit = o->table[i].name;
        }
    }
    if (hit && best <= 2 + (int)strlen(key) / 4) {
        snprintf(buf, len, "; did you mean '%s'?", hit);
        return;
    }
    for (int s = 0; s < cfg->n_sec; s++) {
        if (&cfg->sec[s] != o && cfg_key_index(&cfg->sec[s], key) >= 0) {
            snprintf(buf, len, "; did you mean [%s] %s?", cfg->sec[s].section, key);
            return;
        }
    }
    if (o->n > 0) {
        size_t used = (size_t)snprintf(buf, len, "; known keys:");
        for (int i = 0; i < o->n && used < len; i++)
            used += (size_t)snprintf(buf + used, len - used, " %s", o->table[i].name);
    } else {
        snprintf(buf, len, "; this section has no options");
    }
}

static void cfg_suggest_section(const struct tide_config *cfg, const char *name, char *buf,
                                size_t len)
{
    int best = 99;
    const char *hit = NULL;
    for (int s = 0; s < cfg->n_sec; s++) {
        int d = tide_edit_distance(name, cfg->sec[s].section);
        if (d < best) {
            best = d;
            hit = cfg->sec[s].section;
        }
    }
    if (hit && best <= 3)
        snprintf(buf, len, "; did you mean [%s]?", hit);
    else
        snprintf(buf, len,
                 " (sections are [model], [backend], [policy], [generation], "
                 "[output] and one per plugin found; see `tide config doc`)");
}

/* Set section.key from a source (a file or text's id with the line, or
 * TIDE_CONFIG_SRC_CMDLINE with line 0). where prefixes messages. */
/* An unknown section at where. A name with a '-' names a plugin (the core's
 * sections have none): say that no such plugin was found, and where. */
static void cfg_unknown_section(const struct tide_config *cfg, const char *where, const char *name)
{
    char hint[512];
    cfg_suggest_section(cfg, name, hint, sizeof hint);
    if (!strchr(name, '-')) {
        tide_error("%s: unknown section [%s]%s", where, name, hint);
        return;
    }
    if (strncmp(hint, "; did you mean", 14))
        hint[0] = 0;
    tide_error("%s: [%s]: plugin not found: no plugin named '%s' in %s%s (TIDE_PLUGIN_PATH "
               "adds folders; `tide plugins` lists what was found)%s",
               where, name, name, cfg->plugin_dirs ? "the folders searched: " : "",
               cfg->plugin_dirs ? cfg->plugin_dirs : "the plugin folders", hint);
}

static int cfg_assign(struct tide_config *cfg, const char *where, int line, int source,
                      const char *section, const char *key, const char *value, const char *origin)
{
    struct tide_opts *o = cfg_find(cfg, section);
    char hint[512] = "";
    if (!o) {
        cfg_unknown_section(cfg, where, section);
        return TIDE_E_CONFIG;
    }
    int i = cfg_key_index(o, key);
    if (i < 0) {
        cfg_suggest_key(cfg, o, key, hint, sizeof hint);
        tide_error("%s: unknown key '%s' in [%s]%s", where, key, section, hint);
        return TIDE_E_CONFIG;
    }
    struct cfg_value *v = &o->vals[i];
    if (line > 0 && v->line > 0 && v->source == source) {
        tide_error("%s: [%s] %s is set twice (first at line %d; indented lines continue the "
                   "previous value in INI)",
                   where, section, key, v->line);
        return TIDE_E_CONFIG;
    }
    struct cfg_value nv = *v;
    char why[320];
    if (cfg_parse_value(&o->table[i], value, &nv, why, sizeof why) != TIDE_OK) {
        tide_error("%s: [%s] %s = '%s': %s", where, section, key, value, why);
        return TIDE_E_CONFIG;
    }
    char *text = cfg_strdup(value);
    if (!text)
        return TIDE_E_NOMEM;
    free(v->text);
    *v = nv;
    v->text = text;
    v->line = line;
    v->source = source;
    snprintf(v->origin, sizeof v->origin, "%s", origin);
    return TIDE_OK;
}

/* ---- INI file ----------------------------------------------------------- */

static const char *cfg_skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Find the line of the next "name = value" in the file at or after cursor. */
static int cfg_locate(struct cfg_parse *ps, const char *name)
{
    size_t n = strlen(name);
    for (int i = ps->cursor; i < ps->n_lines; i++) {
        const char *p = cfg_skip_ws(ps->lines[i]);
        if (!strncmp(p, name, n)) {
            const char *q = cfg_skip_ws(p + n);
            if (*q == '=' || *q == ':') {
                ps->cursor = i + 1;
                return i + 1;
            }
        }
    }
    /* Not found: an indented continuation of the previous key's value. Give
     * that key's line, so cfg_assign reports it as set twice. */
    return ps->cursor;
}

static int cfg_load_path(struct tide_config *cfg, const char *path, const struct cfg_parse *outer);

/* include = FILE at line of ps: read FILE there (relative to the including
 * file's folder; to the current directory from INI text). Missing files and
 * cycles are refused, naming both files. */
static void cfg_include(struct cfg_parse *ps, int line, const char *value)
{
    char path[4096], chain[1024];
    const char *slash = ps->is_text ? NULL : strrchr(ps->path, '/');
    if (!*value) {
        tide_error("%s:%d: include needs a file name", ps->path, line);
        ps->errors++;
        return;
    }
    if (*value == '/' || !slash)
        snprintf(path, sizeof path, "%s", value);
    else
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - ps->path), ps->path, value);
    char *real = realpath(path, NULL);
    if (!real) {
        tide_error("%s:%d: include = %s: cannot open %s: %s", ps->path, line, value, path,
                   strerror(errno));
        ps->errors++;
        return;
    }
    const struct cfg_parse *p = ps;
    while (p && !(p->real && !strcmp(p->real, real)))
        p = p->outer;
    if (p || ps->depth + 1 > CFG_MAX_INCLUDE_DEPTH) {
        /* The chain of includes, innermost last: "a.ini -> b.ini -> a.ini". */
        size_t used = (size_t)snprintf(chain, sizeof chain, "%s", path);
        for (const struct cfg_parse *q = ps; q && used < sizeof chain; q = q->outer)
            used += (size_t)snprintf(chain + used, sizeof chain - used, " <- %s", q->path);
        if (p)
            tide_error("%s:%d: include = %s: %s is already being read (%s); include cycles are "
                       "refused",
                       ps->path, line, value, path, chain);
        else
            tide_error("%s:%d: include = %s: more than %d nested includes (%s)", ps->path, line,
                       value, CFG_MAX_INCLUDE_DEPTH, chain);
        ps->errors++;
        free(real);
        return;
    }
    free(real);
    if (cfg_load_path(ps->cfg, path, ps) != TIDE_OK) {
        tide_error("%s:%d: included %s is not valid", ps->path, line, path);
        ps->errors++;
    }
}

static int cfg_ini_handler(void *user, const char *section, const char *name, const char *value)
{
    struct cfg_parse *ps = user;
    int line = cfg_locate(ps, name);
    char where[512];
    snprintf(where, sizeof where, "%s:%d", ps->path, line);
    if (!strcmp(name, "include")) {
        cfg_include(ps, line, value);
        return 1;
    }
    if (!*section) {
        tide_error("%s: '%s' is outside any section; put it under [model], [backend], [policy], "
                   "[generation], [output] or a plugin's section",
                   where, name);
        ps->errors++;
        return 1;
    }
    char origin[64];
    const char *base = strrchr(ps->path, '/');
    snprintf(origin, sizeof origin, "%s:%d", base ? base + 1 : ps->path, line);
    if (cfg_assign(ps->cfg, where, line, ps->source, section, name, value, origin) != TIDE_OK)
        ps->errors++;
    return 1; /* keep going: report every error in one pass */
}

static void cfg_free_lines(char **lines, int n)
{
    for (int i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

/* Read the INI text of f into lines and reject lines inih would silently cut. */
static int cfg_read_stream(struct cfg_parse *ps, FILE *f)
{
    int cap = 0, rc = TIDE_OK;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        if (ps->n_lines == cap) {
            cap = cap ? 2 * cap : 64;
            char **nl = realloc(ps->lines, sizeof *nl * (size_t)cap);
            if (!nl) {
                rc = TIDE_E_NOMEM;
                break;
            }
            ps->lines = nl;
        }
        size_t len = (size_t)got;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (len > CFG_MAX_LINE) {
            tide_error("%s:%d: line is %zu bytes long; the INI reader takes at most %d", ps->path,
                       ps->n_lines + 1, len, CFG_MAX_LINE);
            ps->errors++;
        }
        if (strlen(line) < len) {
            tide_error("%s:%d: line contains a NUL byte", ps->path, ps->n_lines + 1);
            ps->errors++;
        }
        const char *h = cfg_skip_ws(line);
        const char *close = *h == '[' ? strchr(h, ']') : NULL;
        if (close && close > h + 1 && (size_t)(close - h - 1) < 128) {
            char name[128];
            memcpy(name, h + 1, (size_t)(close - h - 1));
            name[close - h - 1] = 0;
            if (!cfg_find(ps->cfg, name)) {
                char where[4200];
                snprintf(where, sizeof where, "%s:%d", ps->path, ps->n_lines + 1);
                cfg_unknown_section(ps->cfg, where, name);
                ps->errors++;
            }
        }
        ps->lines[ps->n_lines] = cfg_strdup(line);
        if (!ps->lines[ps->n_lines]) {
            rc = TIDE_E_NOMEM;
            break;
        }
        ps->n_lines++;
    }
    if (rc == TIDE_OK && ferror(f)) {
        tide_error("config: cannot read %s: %s", ps->path, strerror(errno));
        rc = TIDE_E_CONFIG;
    }
    free(line);
    return rc;
}

/* Read the file into lines (cfg_read_stream). */
static int cfg_read_lines(struct cfg_parse *ps)
{
    /* O_NONBLOCK: a FIFO given as the config file must not block the open. */
    int fd = open(ps->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    if (fd < 0) {
        tide_error("config: cannot open %s: %s", ps->path, strerror(errno));
        return TIDE_E_CONFIG;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        tide_error("config: %s is not a regular file", ps->path);
        close(fd);
        return TIDE_E_CONFIG;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        tide_error("config: cannot open %s: %s", ps->path, strerror(errno));
        close(fd);
        return TIDE_E_CONFIG;
    }
    int rc = cfg_read_stream(ps, f);
    fclose(f);
    return rc;
}

/* After the lines were read: run inih (parse(), on the same text) and report
 * what it returned. Frees the lines. */
static int cfg_parse_ini(struct cfg_parse *ps, int read_rc, int (*parse)(struct cfg_parse *ps))
{
    if (read_rc != TIDE_OK || ps->errors) {
        cfg_free_lines(ps->lines, ps->n_lines);
        return read_rc == TIDE_E_NOMEM ? read_rc : TIDE_E_CONFIG;
    }
    int r = parse(ps);
    cfg_free_lines(ps->lines, ps->n_lines);
    if (r < 0) {
        tide_error("config: cannot read %s%s", ps->path, r == -2 ? ": out of memory" : "");
        return TIDE_E_CONFIG;
    }
    /* Debian's inih returns the first line it could not parse as a positive number. */
    if (r > 0) {
        tide_error("%s:%d: syntax error: expected '[section]', 'key = value' or a ';' comment",
                   ps->path, r);
        return TIDE_E_CONFIG;
    }
    return ps->errors ? TIDE_E_CONFIG : TIDE_OK;
}

static int cfg_ini_parse_path(struct cfg_parse *ps)
{
    return ini_parse(ps->path, cfg_ini_handler, ps);
}

/* Read one file as a new source (a key may be set once in it; a later
 * source may override it), inside outer when it is included. */
static int cfg_load_path(struct tide_config *cfg, const char *path, const struct cfg_parse *outer)
{
    struct cfg_parse ps = {.cfg = cfg,
                           .path = path,
                           .source = ++cfg->n_sources,
                           .real = realpath(path, NULL),
                           .outer = outer,
                           .depth = outer ? outer->depth + 1 : 0};
    int rc = cfg_parse_ini(&ps, cfg_read_lines(&ps), cfg_ini_parse_path);
    free(ps.real);
    return rc;
}

int tide_config_load_file(struct tide_config *cfg, const char *path)
{
    int rc = cfg_load_path(cfg, path, NULL);
    if (rc != TIDE_OK)
        return rc;
    free(cfg->path);
    cfg->path = cfg_strdup(path);
    return TIDE_OK;
}

/* INI text for tide_config_load_text, read through memory streams. */
struct cfg_text {
    struct cfg_parse ps;
    const char *text;
    size_t len;
};

static int cfg_ini_parse_text(struct cfg_parse *ps)
{
    const struct cfg_text *t = (const struct cfg_text *)ps;
    return ini_parse_string(t->text, cfg_ini_handler, ps);
}

int tide_config_load_text(struct tide_config *cfg, const char *name, const char *text)
{
    struct cfg_text t = {
        .ps = {.cfg = cfg, .path = name, .is_text = true}, .text = text, .len = strlen(text)};
    if (!t.len)
        return TIDE_OK; /* fmemopen refuses an empty buffer; there is nothing to parse */
    t.ps.source = ++cfg->n_sources;
    FILE *f = fmemopen((void *)text, t.len, "r");
    if (!f)
        return TIDE_E_NOMEM;
    int rc = cfg_read_stream(&t.ps, f);
    fclose(f);
    return cfg_parse_ini(&t.ps, rc, cfg_ini_parse_text);
}

struct tide_config *tide_config_clone(const struct tide_config *cfg)
{
    struct tide_config *c = tide_config_create();
    if (!c)
        return NULL;
    c->sec = calloc((size_t)(cfg->n_sec ? cfg->n_sec : 1), sizeof *c->sec);
    if (!c->sec || (cfg->path && !(c->path = cfg_strdup(cfg->path))) ||
        (cfg->plugin_dirs && !(c->plugin_dirs = cfg_strdup(cfg->plugin_dirs))))
        goto fail;
    c->n_sources = cfg->n_sources;
    for (int s = 0; s < cfg->n_sec; s++) {
        const struct tide_opts *o = &cfg->sec[s];
        struct tide_opts *d = &c->sec[s];
        c->n_sec++;
        d->table = o->table;
        d->n = o->n;
        d->section = cfg_strdup(o->section);
        d->owner = cfg_strdup(o->owner);
        d->summary = cfg_strdup(o->summary);
        d->vals = calloc((size_t)(o->n ? o->n : 1), sizeof *d->vals);
        if (!d->section || !d->owner || !d->summary || !d->vals)
            goto fail;
        for (int i = 0; i < o->n; i++) {
            d->vals[i] = o->vals[i];
            if (!(d->vals[i].text = cfg_strdup(o->vals[i].text)))
                goto fail;
        }
    }
    return c;
fail:
    tide_config_destroy(c);
    return NULL;
}

const char *tide_config_get_text(const struct tide_config *cfg, const char *section,
                                 const char *key)
{
    const struct tide_opts *o = cfg_find(cfg, section);
    int i = o ? cfg_key_index(o, key) : -1;
    return i >= 0 ? o->vals[i].text : NULL;
}

int tide_config_get_number(const struct tide_config *cfg, const char *section, const char *key,
                           int64_t *i, double *f)
{
    const struct tide_opts *o = cfg_find(cfg, section);
    const int k = o ? cfg_key_index(o, key) : -1;
    if (k < 0)
        return TIDE_E_NOTFOUND;
    const struct cfg_value *v = &o->vals[k];
    int64_t iv;
    double fv;
    switch (o->table[k].type) {
    case TIDE_OPT_INT:
        iv = v->v.i;
        fv = (double)iv;
        break;
    case TIDE_OPT_SIZE:
        iv = v->v.sz > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v->v.sz;
        fv = (double)v->v.sz;
        break;
    case TIDE_OPT_BOOL:
        iv = v->v.b;
        fv = iv;
        break;
    case TIDE_OPT_FLOAT:
        fv = v->v.f;
        iv = fv >= 9.2e18 ? INT64_MAX : fv <= -9.2e18 ? INT64_MIN : (int64_t)fv;
        break;
    default:
        return TIDE_E_INVAL;
    }
    if (i)
        *i = iv;
    if (f)
        *f = fv;
    return TIDE_OK;
}

int tide_opts_create(const char *section, const struct tide_option *table, const char *const *sets,
                     int n_sets, struct tide_opts **out)
{
    *out = NULL;
    struct tide_config *cfg = tide_config_create();
    if (!cfg)
        return TIDE_E_NOMEM;
    int rc = tide_config_add_section(cfg, section, table, section, "");
    for (int i = 0; rc == TIDE_OK && i < n_sets; i++) {
        const char *eq = strchr(sets[i], '=');
        char key[128];
        if (!eq || eq == sets[i] || (size_t)(eq - sets[i]) >= sizeof key) {
            tide_error("[%s]: '%s' is not key=value", section, sets[i]);
            rc = TIDE_E_CONFIG;
            break;
        }
        memcpy(key, sets[i], (size_t)(eq - sets[i]));
        key[eq - sets[i]] = 0;
        rc = tide_config_set_value(cfg, section, key, eq + 1, "tide_opts_create");
    }
    if (rc != TIDE_OK) {
        tide_config_destroy(cfg);
        return rc;
    }
    cfg->sec[0].standalone = cfg;
    *out = &cfg->sec[0];
    return TIDE_OK;
}

void tide_opts_destroy(struct tide_opts *o)
{
    if (o && o->standalone)
        tide_config_destroy(o->standalone);
}

int tide_config_set(struct tide_config *cfg, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    const char *dot = strchr(assignment, '.');
    if (!eq || !dot || dot > eq || dot == assignment || eq == dot + 1) {
        tide_error("--set %s: expected section.key=value (e.g. --set generation.steps=16)",
                   assignment);
        return TIDE_E_CONFIG;
    }
    char section[128], key[128];
    size_t ls = (size_t)(dot - assignment), lk = (size_t)(eq - dot - 1);
    if (ls >= sizeof section || lk >= sizeof key) {
        tide_error("--set %s: section or key too long", assignment);
        return TIDE_E_CONFIG;
    }
    memcpy(section, assignment, ls);
    section[ls] = 0;
    memcpy(key, dot + 1, lk);
    key[lk] = 0;
    char where[300];
    snprintf(where, sizeof where, "--set %s", assignment);
    return cfg_assign(cfg, where, 0, TIDE_CONFIG_SRC_CMDLINE, section, key, eq + 1, "--set");
}

int tide_config_set_value(struct tide_config *cfg, const char *section, const char *key,
                          const char *value, const char *origin)
{
    char where[300];
    snprintf(where, sizeof where, "%s: %s.%s=%s", origin, section, key, value);
    return cfg_assign(cfg, where, 0, TIDE_CONFIG_SRC_CMDLINE, section, key, value, origin);
}

const struct tide_opts *tide_config_section(const struct tide_config *cfg, const char *name)
{
    return cfg_find(cfg, name);
}

const char *tide_config_key_section(const struct tide_config *cfg, const char *key)
{
    for (int i = 0; i < cfg->n_sec; i++)
        for (int k = 0; k < cfg->sec[i].n; k++)
            if (!strcmp(cfg->sec[i].table[k].name, key))
                return cfg->sec[i].section;
    return NULL;
}

const char *tide_config_path(const struct tide_config *cfg)
{
    return cfg->path;
}

int tide_config_source(const struct tide_config *cfg, const char *section, const char *key)
{
    const struct tide_opts *o = cfg_find(cfg, section);
    int i = o ? cfg_key_index(o, key) : -1;
    return i >= 0 ? o->vals[i].source : TIDE_CONFIG_SRC_DEFAULT;
}

int tide_config_set_plugin_dirs(struct tide_config *cfg, const char *dirs)
{
    char *d = cfg_strdup(dirs);
    if (!d)
        return TIDE_E_NOMEM;
    free(cfg->plugin_dirs);
    cfg->plugin_dirs = d;
    return TIDE_OK;
}

/* ---- typed getters ------------------------------------------------------ */

static const struct cfg_value *cfg_get(const struct tide_opts *o, const char *name,
                                       enum tide_opt_type t1, enum tide_opt_type t2)
{
    if (!o) {
        tide_error("config: option '%s' read from a missing section (a bug)", name);
        return NULL;
    }
    int i = cfg_key_index(o, name);
    if (i < 0 || (o->table[i].type != t1 && o->table[i].type != t2)) {
        tide_error("config: [%s] %s is not a declared %s option (a bug)", o->section, name,
                   cfg_type_short(t1));
        return NULL;
    }
    return &o->vals[i];
}

int64_t tide_opts_int(const struct tide_opts *o, const char *name)
{
    const struct cfg_value *v = cfg_get(o, name, TIDE_OPT_INT, TIDE_OPT_INT);
    return v ? v->v.i : 0;
}

double tide_opts_float(const struct tide_opts *o, const char *name)
{
    const struct cfg_value *v = cfg_get(o, name, TIDE_OPT_FLOAT, TIDE_OPT_FLOAT);
    return v ? v->v.f : 0.0;
}

bool tide_opts_bool(const struct tide_opts *o, const char *name)
{
    const struct cfg_value *v = cfg_get(o, name, TIDE_OPT_BOOL, TIDE_OPT_BOOL);
    return v ? v->v.b : false;
}

const char *tide_opts_str(const struct tide_opts *o, const char *name)
{
    const struct cfg_value *v = cfg_get(o, name, TIDE_OPT_STRING, TIDE_OPT_ENUM);
    return v ? v->text : "";
}

uint64_t tide_opts_size(const struct tide_opts *o, const char *name)
{
    const struct cfg_value *v = cfg_get(o, name, TIDE_OPT_SIZE, TIDE_OPT_SIZE);
    return v ? v->v.sz : 0;
}

const char *tide_opts_section(const struct tide_opts *o)
{
    return o ? o->section : "";
}

const char *tide_opts_origin(const struct tide_opts *o, const char *name)
{
    int i = o ? cfg_key_index(o, name) : -1;
    return i >= 0 ? o->vals[i].origin : "?";
}

/* ---- printing ----------------------------------------------------------- */

static bool cfg_listed(const char *name, const char *const *only)
{
    if (!only)
        return true;
    for (; *only; only++)
        if (!strcmp(*only, name))
            return true;
    return false;
}

void tide_config_print(const struct tide_config *cfg, FILE *out, const char *const *only)
{
    bool first = true;
    for (int s = 0; s < cfg->n_sec; s++) {
        const struct tide_opts *o = &cfg->sec[s];
        if (!o->n || !cfg_listed(o->section, only))
            continue;
        fprintf(out, "%s[%s]\n", first ? "" : "\n", o->section);
        first = false;
        int w = 0;
        for (int i = 0; i < o->n; i++) {
            int len = (int)(strlen(o->table[i].name) + 3 + strlen(o->vals[i].text));
            if (len > w)
                w = len;
        }
        for (int i = 0; i < o->n; i++) {
            char kv[256];
            snprintf(kv, sizeof kv, "%s = %s", o->table[i].name, o->vals[i].text);
            fprintf(out, "%-*s  ; %s\n", w, kv, o->vals[i].origin);
        }
    }
}

void tide_config_doc(const struct tide_config *cfg, FILE *out)
{
    fprintf(out, "# TIDE configuration reference\n\n"
                 "Generated by `tide config doc` from the option tables of the core and of "
                 "every plugin found. Do not edit by hand.\n\n"
                 "Values come from the defaults below, then the INI files given with `-c`, in "
                 "order (`-c base.ini -c over.ini`: a later file overrides what an earlier one "
                 "set; a key may be set once per file), then `--set section.key=value` on the "
                 "command line. `tide config check FILE...` prints the effective values, each "
                 "with the file and line that set it.\n\n"
                 "A line `include = FILE`, at the top of a file or inside any section, reads "
                 "FILE at that point as a file of its own: it starts outside any section, and "
                 "the includer's later lines override it. A relative FILE is taken from the "
                 "including file's folder (from the current directory in INI text given "
                 "through the API). A missing file and a cycle of includes are errors that name "
                 "both files.\n\n"
                 "Shipped files are found from any working directory: a relative `-c` file, "
                 "`[bench] prompts` or hardware profile that does not exist from the working "
                 "directory is looked up in the installed `<prefix>/share/tide` (beside the "
                 "library or the binary, so a moved install still finds it), in the source "
                 "tree for a binary run from its build folder, then at the configured prefix; "
                 "`tide config check` shows the path used, and a file found nowhere is an error "
                 "naming every folder searched.\n\n"
                 "Sizes take units: "
                 "`4096`, `512MiB`, `12GiB`, `1.5GB`. Ranges use `[lo,hi]` (inclusive) and "
                 "`(lo,hi)` (exclusive) bounds.\n");
    for (int s = 0; s < cfg->n_sec; s++) {
        const struct tide_opts *o = &cfg->sec[s];
        fprintf(out, "\n## [%s]\n\n", o->section);
        if (strcmp(o->owner, "core"))
            fprintf(out, "Options of the plugin `%s`. ", o->owner);
        if (*o->summary)
            fprintf(out, "%s", o->summary);
        fprintf(out, "\n\n");
        if (!o->n) {
            fprintf(out, "No options.\n");
            continue;
        }
        fprintf(out, "| key | type | default | description |\n|---|---|---|---|\n");
        for (int i = 0; i < o->n; i++) {
            const struct tide_option *op = &o->table[i];
            char type[160];
            if (op->type == TIDE_OPT_ENUM)
                snprintf(type, sizeof type, "enum: %s", op->choices);
            else if (op->range)
                snprintf(type, sizeof type, "%s in %s", cfg_type_short(op->type), op->range);
            else
                snprintf(type, sizeof type, "%s", cfg_type_short(op->type));
            for (char *p = type; *p; p++)
                if (*p == '|')
                    *p = '/';
            fprintf(out, "| `%s` | %s | `%s` | %s |\n", op->name, type,
                    op->def && *op->def ? op->def : "", op->help ? op->help : "");
        }
    }
}
