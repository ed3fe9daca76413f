/* --sweep SECTION.KEY=v1,v2,...: a grid over any configuration key
 * (cli/sweep.h). */
#include <stdlib.h>
#include <string.h>

#include "sweep.h"
#include "tide/log.h"
#include "tide/status.h"

int cli_sweep_add(struct cli_sweep *s, const char *text)
{
    const char *dot = strchr(text, '.'), *eq = strchr(text, '=');
    if (!dot || !eq || dot > eq || dot == text || eq == dot + 1 || !eq[1] ||
        (size_t)(dot - text) >= sizeof s->axis[0].section ||
        (size_t)(eq - dot - 1) >= sizeof s->axis[0].key) {
        tide_error(
            "--sweep %s: expected SECTION.KEY=v1,v2,... (e.g. generation.threshold=0.9,0.95)",
            text);
        return TIDE_E_CONFIG;
    }
    if (s->n == CLI_SWEEP_MAX_KEYS) {
        tide_error("--sweep %s: at most %d keys can be swept at once", text, CLI_SWEEP_MAX_KEYS);
        return TIDE_E_CONFIG;
    }
    struct cli_sweep_axis *a = &s->axis[s->n];
    memset(a, 0, sizeof *a);
    snprintf(a->section, sizeof a->section, "%.*s", (int)(dot - text), text);
    snprintf(a->key, sizeof a->key, "%.*s", (int)(eq - dot - 1), dot + 1);
    snprintf(a->name, sizeof a->name, "%.*s", (int)(eq - text), text);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->axis[i].name, a->name)) {
            tide_error("--sweep %s: %s is swept twice; give all its values in one --sweep", text,
                       a->name);
            return TIDE_E_CONFIG;
        }
    if (!(a->text = strdup(eq + 1)))
        return TIDE_E_NOMEM;
    s->n++;
    for (char *t = a->text, *next; t; t = next) {
        if ((next = strchr(t, ',')))
            *next++ = 0;
        while (*t == ' ')
            t++;
        for (char *end = t + strlen(t); end > t && end[-1] == ' ';)
            *--end = 0;
        if (!*t) {
            tide_error("--sweep %s: value %d is empty (a stray comma?)", a->name, a->n + 1);
            return TIDE_E_CONFIG;
        }
        if (a->n == CLI_SWEEP_MAX_VALUES) {
            tide_error("--sweep %s: at most %d values per key", a->name, CLI_SWEEP_MAX_VALUES);
            return TIDE_E_CONFIG;
        }
        a->value[a->n++] = t;
    }
    if (!a->n) {
        tide_error("--sweep %s: no values (expected SECTION.KEY=v1,v2,...)", text);
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

int cli_sweep_check(const struct cli_sweep *s, struct tide_config *cfg, const char *const *own)
{
    for (int i = 0; i < s->n; i++) {
        const struct cli_sweep_axis *a = &s->axis[i];
        for (const char *const *o = own; o && *o; o++)
            if (!strcmp(a->section, *o)) {
                tide_error("--sweep %s: [%s] describes the command's own grid; set it with its "
                           "flags (see --help) instead",
                           a->name, a->section);
                return TIDE_E_CONFIG;
            }
        for (int v = 0; v < a->n; v++)
            if (tide_config_set_value(cfg, a->section, a->key, a->value[v], "--sweep") != TIDE_OK)
                return TIDE_E_CONFIG;
    }
    return cli_sweep_apply(s, cfg, 0);
}

long cli_sweep_points(const struct cli_sweep *s)
{
    long n = 1;
    for (int i = 0; i < s->n; i++)
        n *= s->axis[i].n;
    return n;
}

const char *cli_sweep_value(const struct cli_sweep *s, long p, int a)
{
    for (int i = s->n - 1; i > a; i--)
        p /= s->axis[i].n;
    return s->axis[a].value[p % s->axis[a].n];
}

int cli_sweep_apply(const struct cli_sweep *s, struct tide_config *cfg, long p)
{
    for (int i = 0; i < s->n; i++)
        if (tide_config_set_value(cfg, s->axis[i].section, s->axis[i].key, cli_sweep_value(s, p, i),
                                  "--sweep") != TIDE_OK)
            return TIDE_E_CONFIG;
    return TIDE_OK;
}

json_t *cli_sweep_json(const struct cli_sweep *s)
{
    json_t *j = json_array();
    for (int i = 0; j && i < s->n; i++) {
        json_t *a = json_object(), *v = json_array();
        for (int k = 0; v && k < s->axis[i].n; k++)
            json_array_append_new(v, json_string(s->axis[i].value[k]));
        json_object_set_new(a, "key", json_string(s->axis[i].name));
        json_object_set_new(a, "values", v);
        json_array_append_new(j, a);
    }
    return j;
}

void cli_sweep_csv_header(const struct cli_sweep *s, FILE *f)
{
    for (int i = 0; i < s->n; i++)
        fprintf(f, ",%s", s->axis[i].name);
}

void cli_sweep_csv_row(const struct cli_sweep *s, long p, FILE *f)
{
    for (int i = 0; i < s->n; i++)
        fprintf(f, ",%s", cli_sweep_value(s, p, i));
}

void cli_sweep_label(const struct cli_sweep *s, long p, char *buf, size_t len)
{
    size_t at = 0;
    if (len)
        buf[0] = 0;
    for (int i = 0; i < s->n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s=%s", i ? " " : "", s->axis[i].name,
                               cli_sweep_value(s, p, i));
}

void cli_sweep_free(struct cli_sweep *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->axis[i].text);
    s->n = 0;
}
