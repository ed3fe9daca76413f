/* --sweep SECTION.KEY=v1,v2,... (tide bench and tide sim): a grid over any
 * configuration key, the product of every --sweep given, run outside the
 * command's own grid (policy x budget x interval x batch). Point p of the
 * sweep numbers the combinations from 0, the last --sweep varying fastest;
 * configuration i of the whole grid is point i / inner, where inner is the
 * size of the command's own grid (docs/cluster.md). */
#ifndef TIDE_CLI_SWEEP_H
#define TIDE_CLI_SWEEP_H

#include <jansson.h>
#include <stdio.h>

#include "config.h"

#define CLI_SWEEP_MAX_KEYS   8
#define CLI_SWEEP_MAX_VALUES 64

struct cli_sweep_axis {
    char name[160]; /* "section.key" */
    char section[96], key[64];
    char *text;                              /* the values as given, cut in place; owned */
    const char *value[CLI_SWEEP_MAX_VALUES]; /* [n], into text */
    int n;
};

struct cli_sweep {
    struct cli_sweep_axis axis[CLI_SWEEP_MAX_KEYS]; /* [n], in the order given */
    int n;
};

/* Add "SECTION.KEY=v1,v2,..." (the value of one --sweep). Returns TIDE_OK or
 * TIDE_E_CONFIG (logged: the form, a key given twice, too many). */
int cli_sweep_add(struct cli_sweep *s, const char *text);

/* Check every value by setting it in cfg (the config layer checks its type
 * and range and names the key), refusing keys of the sections in `own`
 * (NULL-terminated: the command's own grid), then set point 0. Returns
 * TIDE_OK or TIDE_E_CONFIG (logged). */
int cli_sweep_check(const struct cli_sweep *s, struct tide_config *cfg, const char *const *own);

/* How many points (1 without --sweep). */
long cli_sweep_points(const struct cli_sweep *s);

/* The value of axis a at point p. */
const char *cli_sweep_value(const struct cli_sweep *s, long p, int a);

/* Set point p's values in cfg. Returns TIDE_OK or TIDE_E_CONFIG (logged). */
int cli_sweep_apply(const struct cli_sweep *s, struct tide_config *cfg, long p);

/* [{"key": "section.key", "values": [...]}] (a new reference). */
json_t *cli_sweep_json(const struct cli_sweep *s);

/* The CSV columns: ",section.key" per axis; then point p's ",value"s. */
void cli_sweep_csv_header(const struct cli_sweep *s, FILE *f);
void cli_sweep_csv_row(const struct cli_sweep *s, long p, FILE *f);

/* "section.key=value ..." of point p, for messages ("" without --sweep). */
void cli_sweep_label(const struct cli_sweep *s, long p, char *buf, size_t len);

void cli_sweep_free(struct cli_sweep *s);

#endif
