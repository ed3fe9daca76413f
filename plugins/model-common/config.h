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
#include "tide/quant.h"
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

/* The routed experts' weight format (tide/quant.h), from config.json's
 * "quantization_config". */
struct mc_quant {
    int fmt;      /* enum tide_qfmt; TIDE_QFMT_NONE when the key is absent */
    int block[2]; /* rows and columns per scale */
};

/* An integer in [1, 65536] at index i of JSON array a (quantization_config's
 * `key`), or 0 (logged). */
static inline int mc_rd_block_dim(struct mc_cfg_reader *r, const char *key, const json_t *a,
                                  size_t i)
{
    const json_t *v = json_array_get(a, i);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65536) {
        tide_error("%s: quantization_config.%s[%zu] must be an integer in [1, 65536]", r->path, key,
                   i);
        r->errors++;
        return 0;
    }
    return (int)json_integer_value(v);
}

/* Read "quantization_config" (docs/quantization.md): absent or null is bf16;
 * {"quant_method": "fp8", "weight_block_size": [br, bc], ...} as published
 * FP8 checkpoints write it (fmt "e4m3" and activation_scheme "dynamic" when
 * present: activations stay bf16 here, the weights are dequantized exactly);
 * {"quant_method": "tide", "format": "q8_0" | "q4_0"} as `tide quantize`
 * writes it. Anything else is an error naming the key. */
static inline void mc_rd_quant(struct mc_cfg_reader *r, struct mc_quant *q)
{
    q->fmt = TIDE_QFMT_NONE;
    q->block[0] = q->block[1] = 0;
    const json_t *o = json_object_get(r->root, "quantization_config");
    if (!o || json_is_null(o))
        return;
    const json_t *m = json_object_get(o, "quant_method");
    if (!json_is_object(o) || !json_is_string(m)) {
        tide_error("%s: quantization_config must be an object with a string \"quant_method\"",
                   r->path);
        r->errors++;
        return;
    }
    const char *method = json_string_value(m);
    if (!strcmp(method, "fp8")) {
        const json_t *fmt = json_object_get(o, "fmt"),
                     *act = json_object_get(o, "activation_scheme");
        if (fmt && !json_is_null(fmt) &&
            (!json_is_string(fmt) || strcmp(json_string_value(fmt), "e4m3"))) {
            tide_error("%s: quantization_config.fmt must be \"e4m3\" (the only fp8 format "
                       "supported)",
                       r->path);
            r->errors++;
        }
        if (act && !json_is_null(act) &&
            (!json_is_string(act) || strcmp(json_string_value(act), "dynamic"))) {
            tide_error("%s: quantization_config.activation_scheme must be \"dynamic\" (static "
                       "activation scales are not supported)",
                       r->path);
            r->errors++;
        }
        const json_t *b = json_object_get(o, "weight_block_size");
        q->fmt = TIDE_QFMT_FP8;
        tide_qfmt_default_block(q->fmt, q->block);
        if (!b || json_is_null(b)) {
            /* Without a block, an fp8 config means one scale per tensor
             * (the per-tensor form of transformers' FP8 and of vLLM):
             * refused here, once, rather than read as 128 x 128 blocks
             * that every scale tensor would then contradict. */
            tide_error("%s: quantization_config has no weight_block_size: per-tensor fp8 scales "
                       "are not supported (tide reads block-scaled fp8, weight_block_size "
                       "[rows, cols])",
                       r->path);
            r->errors++;
        } else if (!json_is_array(b) || json_array_size(b) != 2) {
            tide_error("%s: quantization_config.weight_block_size must be an array of two "
                       "integers [rows, cols] (per-tensor fp8 scales are not supported)",
                       r->path);
            r->errors++;
        } else {
            q->block[0] = mc_rd_block_dim(r, "weight_block_size", b, 0);
            q->block[1] = mc_rd_block_dim(r, "weight_block_size", b, 1);
        }
        return;
    }
    if (!strcmp(method, "tide")) {
        const json_t *f = json_object_get(o, "format");
        int fmt = TIDE_QFMT_NONE;
        if (!json_is_string(f) || tide_qfmt_parse(json_string_value(f), &fmt) ||
            (fmt != TIDE_QFMT_Q8_0 && fmt != TIDE_QFMT_Q4_0)) {
            tide_error("%s: quantization_config.format must be \"q8_0\" or \"q4_0\"", r->path);
            r->errors++;
            return;
        }
        q->fmt = fmt;
        tide_qfmt_default_block(fmt, q->block);
        /* `tide quantize` writes block_size [1, 32]; q8_0 and q4_0 have no
         * other block, so anything else is a checkpoint tide cannot read. */
        const json_t *b = json_object_get(o, "block_size");
        if (b && !json_is_null(b) &&
            (!json_is_array(b) || json_array_size(b) != 2 ||
             json_integer_value(json_array_get(b, 0)) != q->block[0] ||
             json_integer_value(json_array_get(b, 1)) != q->block[1] ||
             !json_is_integer(json_array_get(b, 0)) || !json_is_integer(json_array_get(b, 1)))) {
            tide_error("%s: quantization_config.block_size must be [%d, %d] for %s (one scale "
                       "per %d values of a row)",
                       r->path, q->block[0], q->block[1], tide_qfmt_name(fmt), q->block[1]);
            r->errors++;
        }
        return;
    }
    tide_error("%s: quantization_config.quant_method \"%s\" is not supported (tide reads "
               "\"fp8\" with block scales, and \"tide\" q8_0 / q4_0 from `tide quantize`)",
               r->path, method);
    r->errors++;
}

/* The rule between quantization_config and the expert shape: the format
 * fits gate/up [inter, hidden] and down [hidden, inter] (tide_qfmt_fits). */
static inline void mc_quant_rule(struct mc_cfg_reader *r, const struct mc_quant *q, int inter,
                                 int hidden)
{
    char why[200] = "";
    mc_cfg_rule(r,
                !tide_qfmt_fits(q->fmt, q->block, inter, hidden, why, sizeof why) &&
                    !tide_qfmt_fits(q->fmt, q->block, hidden, inter, why, sizeof why),
                "quantization_config: routed experts [%d, %d]: %s", inter, hidden, why);
}

#endif
