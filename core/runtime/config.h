/* Configuration: option schemas, INI parsing (inih), --set overrides.
 * Core-internal; plugins only see struct tide_opts (tide/option.h). */
#ifndef TIDE_CONFIG_INTERNAL_H
#define TIDE_CONFIG_INTERNAL_H

#include <stdio.h>

#include "tide/option.h"

struct tide_config;

/* Create an empty config (no sections). Returns NULL on allocation failure. */
struct tide_config *tide_config_create(void);
void tide_config_destroy(struct tide_config *cfg); /* NULL is a no-op */

/* Register a section and its option table (NULL-name terminated, static
 * storage). `owner` is "core" or the plugin name, for `config doc`. Values
 * start at the table's defaults. Returns TIDE_OK, TIDE_E_INVAL (a duplicate
 * section or a default that does not parse: a bug, logged). */
int tide_config_add_section(struct tide_config *cfg, const char *name,
                            const struct tide_option *table, const char *owner,
                            const char *summary);

/* Parse an INI file into the registered sections. Every problem is logged as
 * "FILE:LINE: ..."; all are reported, then TIDE_E_CONFIG is returned. Files
 * layer: each load may override what earlier ones set (a key may be set once
 * per file). A line `include = FILE`, at the top or in any section, reads
 * FILE at that point as a file of its own (its own sections; relative names
 * are taken from the including file's folder); a missing file and a cycle are
 * errors naming both files. */
int tide_config_load_file(struct tide_config *cfg, const char *path);

/* Parse INI text (NUL-terminated) like a file; name stands for the file in
 * messages and origins ("<config text>:3"). A key may be set once per file or
 * text; a later file or text may override an earlier one. */
int tide_config_load_text(struct tide_config *cfg, const char *name, const char *text);

/* A deep copy (values, origins; option tables are shared, static storage).
 * NULL when out of memory. */
struct tide_config *tide_config_clone(const struct tide_config *cfg);

/* The value of section.key as written, or NULL when there is no such option.
 * Owned by the config; valid until the value changes. */
const char *tide_config_get_text(const struct tide_config *cfg, const char *section,
                                 const char *key);

/* Apply one "section.key=value" override (origin "--set"). */
int tide_config_set(struct tide_config *cfg, const char *assignment);
/* A numeric option's value (INT, SIZE, BOOL as 0/1, FLOAT; truncated
 * towards zero for *i). Returns TIDE_OK, TIDE_E_NOTFOUND, or TIDE_E_INVAL
 * for a text option. i or f may be NULL. */
int tide_config_get_number(const struct tide_config *cfg, const char *section, const char *key,
                           int64_t *i, double *f);

/* Set a value programmatically with an origin label (bench sweeps). */
int tide_config_set_value(struct tide_config *cfg, const char *section, const char *key,
                          const char *value, const char *origin);

/* The resolved options of a section, or NULL when it is not registered. */
const struct tide_opts *tide_config_section(const struct tide_config *cfg, const char *name);

/* The first section, in registration order (the core's first), with an
 * option called key, or NULL. Owned by the config. */
const char *tide_config_key_section(const struct tide_config *cfg, const char *key);

/* The file most recently loaded, or NULL. */
const char *tide_config_path(const struct tide_config *cfg);

/* Where the value of section.key came from: the built-in default, the
 * command line (tide_config_set and tide_config_set_value), or the id (> 0)
 * of the file or INI text that set it. Values from one file share its id;
 * each load, and each included file, has its own. An unknown key answers
 * TIDE_CONFIG_SRC_DEFAULT. */
enum { TIDE_CONFIG_SRC_DEFAULT = 0, TIDE_CONFIG_SRC_CMDLINE = -1 };
int tide_config_source(const struct tide_config *cfg, const char *section, const char *key);

/* The plugin folders that were searched (text, e.g. ':'-separated), named by
 * the message about a section whose plugin was not found. Copied. Returns
 * TIDE_OK or TIDE_E_NOMEM. */
int tide_config_set_plugin_dirs(struct tide_config *cfg, const char *dirs);

/* Print the effective configuration as INI, each value annotated with its
 * origin. With only_sections (NULL-terminated), restrict to those. */
void tide_config_print(const struct tide_config *cfg, FILE *out, const char *const *only_sections);

/* Print the Markdown reference of every registered option. */
void tide_config_doc(const struct tide_config *cfg, FILE *out);

/* Levenshtein distance, capped; exposed for "did you mean" in the CLI. */
int tide_edit_distance(const char *a, const char *b);

#endif
