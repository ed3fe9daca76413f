/* model-common: reading a checkpoint's config.json: opening and parsing it,
 * and typed key readers that log a missing key's default (or the error when
 * the key has none), a wrong type or an out-of-range value, counting errors
 * so that every problem of a file is reported at once. Header-only; needs
 * jansson. Which keys a model reads, their defaults and the rules between
 * them stay in its plugin. */
#ifndef MODEL_COMMON_CONFIG_H
#define MODEL_COMMON_CONFIG_H

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "tide/log.h"
#include "tide/status.h"

struct mc_cfg_reader {
    json_t *root;
    const char *path;
    int errors;
    /* why a key without a default is required, in the missing-key error */
    const char *no_default;
};

/* Open and parse dir/config.json into *root (a JSON object), its path in
 * path[len]. Errors are logged naming the file. */
static inline int mc_cfg_open(const char *dir, char *path, size_t len, json_t **root)
{
    snprintf(path, len, "%s/config.json", dir);
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        /* A FIFO would block the read below; a folder reads as bad JSON. */
        tide_error("%s: not a regular file", path);
        return TIDE_E_FORMAT;
    }
    json_error_t jerr;
    json_t *r = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!r) {
        if (jerr.line < 0 || strstr(jerr.text, "unable to open"))
            tide_error("%s: cannot read: %s", path, jerr.text);
        else
            tide_error("%s:%d:%d: not valid JSON: %s", path, jerr.line, jerr.column, jerr.text);
        return errno == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_FORMAT;
    }
    if (!json_is_object(r)) {
        tide_error("%s: top level must be a JSON object", path);
        json_decref(r);
        return TIDE_E_FORMAT;
    }
    *root = r;
    return TIDE_OK;
}

/* Whether key is missing (absent or null). Without a default (def_ok false)
 * that is an error; otherwise def (its text) is logged as used. */
static inline bool mc_rd_missing(struct mc_cfg_reader *r, const char *key, bool def_ok,
                                 const char *def)
{
    json_t *v = json_object_get(r->root, key);
    if (v && !json_is_null(v))
        return false;
    if (!def_ok) {
        tide_error("%s: missing key \"%s\" (%s)", r->path, key, r->no_default);
        r->errors++;
    } else {
        tide_info("%s: \"%s\" is missing: using %s, the default of the official configuration "
                  "class",
                  r->path, key, def);
    }
    return true;
}

/* An integer key in [lo, hi]; a missing one takes def when def_ok. */
static inline int mc_rd_int(struct mc_cfg_reader *r, const char *key, bool def_ok, int64_t def,
                            int64_t lo, int64_t hi)
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)def);
    if (mc_rd_missing(r, key, def_ok, text))
        return (int)def;
    json_t *v = json_object_get(r->root, key);
    if (!json_is_integer(v)) {
        tide_error("%s: \"%s\" must be an integer", r->path, key);
        r->errors++;
        return (int)def;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        tide_error("%s: \"%s\" = %lld is out of range [%lld, %lld]", r->path, key, (long long)x,
                   (long long)lo, (long long)hi);
        r->errors++;
        return (int)def;
    }
    return (int)x;
}

/* A finite number key; a missing one takes def when def_ok. */
static inline double mc_rd_num(struct mc_cfg_reader *r, const char *key, bool def_ok, double def)
{
    char text[32];
    snprintf(text, sizeof text, "%g", def);
    if (mc_rd_missing(r, key, def_ok, text))
        return def;
    json_t *v = json_object_get(r->root, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        tide_error("%s: \"%s\" must be a number", r->path, key);
        r->errors++;
        return def;
    }
    return json_number_value(v);
}

/* A rule between keys: when !ok, log the message (naming the file) and count
 * an error. */
static inline void mc_cfg_rule(struct mc_cfg_reader *r, bool ok, const char *fmt, ...)
    TIDE_PRINTF(3, 4);

static inline void mc_cfg_rule(struct mc_cfg_reader *r, bool ok, const char *fmt, ...)
{
    if (ok)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tide_error("%s: %s", r->path, msg);
    r->errors++;
}

#endif
