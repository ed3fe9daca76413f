/* Option tables and typed option access.
 *
 * Every configurable component (the core's sections and each plugin) declares
 * its options in a static table. The core parses the INI file and `--set`
 * overrides against these tables, reports errors with file:line, and hands
 * each plugin a read-only view of its own section. */
#ifndef TIDE_OPTION_H
#define TIDE_OPTION_H

#include "tide/api.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tide_opt_type {
    TIDE_OPT_INT = 1,    /* signed 64-bit integer */
    TIDE_OPT_FLOAT = 2,  /* finite double */
    TIDE_OPT_BOOL = 3,   /* true/false, yes/no, on/off, 1/0 */
    TIDE_OPT_STRING = 4, /* any text (paths, names, lists) */
    TIDE_OPT_ENUM = 5,   /* one of `choices` */
    TIDE_OPT_SIZE = 6,   /* bytes, with units: 512MiB, 12GiB, 1.5GB, 4096 */
};

/* One option. Tables end with an entry whose name is NULL. */
struct tide_option {
    const char *name; /* key inside the section, [a-z0-9_] */
    enum tide_opt_type type;
    const char *def;     /* default, as it would be written in the INI file */
    const char *help;    /* one line */
    const char *choices; /* TIDE_OPT_ENUM: "a|b|c"; else NULL */
    const char *range;   /* INT/FLOAT/SIZE: "[lo,hi]", "(0,1]", "[1,]"; NULL = any */
};

/* A resolved section: the values of one option table. Owned by the core's
 * config; valid for the life of the run. */
struct tide_opts;

/* Typed getters. The name must be in the section's table and of the matching
 * type; otherwise the getter logs an error (a programming bug) and returns
 * 0 / false / "". Strings are owned by the config. */
TIDE_API int64_t tide_opts_int(const struct tide_opts *o, const char *name);
TIDE_API double tide_opts_float(const struct tide_opts *o, const char *name);
TIDE_API bool tide_opts_bool(const struct tide_opts *o, const char *name);
TIDE_API const char *tide_opts_str(const struct tide_opts *o,
                                   const char *name); /* STRING and ENUM */
TIDE_API uint64_t tide_opts_size(const struct tide_opts *o, const char *name);
/* Section name ("generation", "backend-cpu-onednn", ...). */
TIDE_API const char *tide_opts_section(const struct tide_opts *o);
/* Where the value came from: "default", "FILE:LINE" or "--set". */
TIDE_API const char *tide_opts_origin(const struct tide_opts *o, const char *name);

/* A standalone section built from an option table, for a plugin's unit tests
 * (out of tree too) and tools: values start at the table's defaults, then
 * each of sets[0..n_sets) ("key=value") is applied and checked as the INI
 * reader would. On success *out is owned by the caller (free it with
 * tide_opts_destroy); on failure *out is NULL and the reason is logged.
 * Returns TIDE_OK, TIDE_E_CONFIG (unknown key, bad value), TIDE_E_INVAL (a
 * default of the table does not parse) or TIDE_E_NOMEM. Thread-safe. */
TIDE_API int tide_opts_create(const char *section, const struct tide_option *table,
                              const char *const *sets, int n_sets, struct tide_opts **out);
/* Free a section from tide_opts_create. NULL, and sections that belong to a
 * configuration (those a plugin is handed), are left alone. */
TIDE_API void tide_opts_destroy(struct tide_opts *o);

/* Parse a size such as "12GiB", "512 MiB", "1.5GB", "4096" into bytes.
 * IEC units (KiB..TiB) are powers of 1024, SI (KB..TB) powers of 1000.
 * Returns TIDE_OK or TIDE_E_INVAL (overflow, junk, negative). */
TIDE_API int tide_parse_size(const char *text, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
