/* Initial resident sets and the routing-count file, shared by the policy
 * plugins (header-only, static inline).
 *
 * Routing-count file format (text, UTF-8/ASCII):
 *
 *     # comments run from '#' to the end of the line; blank lines are skipped
 *     # LAYER EXPERT COUNT
 *     0 17 1234
 *     0 3  977
 *     1 200 15
 *
 * One entry per line: three decimal integers separated by blanks. LAYER is
 * the 0-based MoE layer (not the model layer), EXPERT the 0-based routed
 * expert, COUNT >= 0 how many token-slot assignments it received (from a
 * routing trace or any profile). Lines for the same (LAYER, EXPERT) add up,
 * so files can be concatenated. Pairs not listed count 0.
 *
 * The popular set of a layer is its top-B experts by count, ties broken by
 * the lower id; zero-count experts fill the remaining slots in id order, so
 * a layer always starts with exactly B residents. */
#ifndef TIDE_POLICY_COMMON_INITIAL_H
#define TIDE_POLICY_COMMON_INITIAL_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy-common/rank.h"
#include "tide/log.h"
#include "tide/option.h"
#include "tide/policy.h"
#include "tide/status.h"

/* Option-table entries for plugins that offer a choice of initial set. */
#define POLC_OPTION_INITIAL                                                                        \
    {                                                                                              \
        "initial", TIDE_OPT_ENUM, "first",                                                         \
            "initial residents of every MoE layer: first = experts 0..B-1, popular = the top-B "   \
            "by "                                                                                  \
            "count in counts_file (ties: lower id)",                                               \
            "first|popular", NULL                                                                  \
    }
#define POLC_OPTION_COUNTS_FILE                                                                    \
    {                                                                                              \
        "counts_file", TIDE_OPT_STRING, "",                                                        \
            "routing-count file for initial = popular: text lines 'LAYER EXPERT COUNT' (0-based "  \
            "MoE "                                                                                 \
            "layer and expert, count >= 0; repeated pairs add up; '#' starts a comment)",          \
            NULL, NULL                                                                             \
    }

/* The initial residents of every MoE layer, computed once at create(). */
struct polc_initial {
    int32_t *sets; /* [n_layers][budget] expert ids, owned */
    int n_layers;
    int budget;
};

/* Parse one decimal integer token into *v; false on junk or overflow. */
static inline bool polc_parse_ll(const char *tok, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(tok, &end, 10);
    return errno == 0 && end != tok && *end == 0;
}

/* Parse one data line (comment already cut) into counts. Returns TIDE_OK,
 * TIDE_OK with *blank set for a blank line, or TIDE_E_FORMAT after logging
 * "who: path:line: ...". */
static inline int polc_counts_line(const char *who, const char *path, int line_no, char *line,
                                   const struct tide_policy_shape *s, uint64_t *counts, bool *blank)
{
    static const char *const field[3] = {"layer", "expert", "count"};
    long long v[3];
    int n = 0;
    char *save = NULL;
    *blank = false;
    for (char *tok = strtok_r(line, " \t\r\n\v\f", &save); tok;
         tok = strtok_r(NULL, " \t\r\n\v\f", &save)) {
        if (n == 3) {
            tide_error(
                "%s: counts_file %s:%d: more than three fields; expected 'LAYER EXPERT COUNT'", who,
                path, line_no);
            return TIDE_E_FORMAT;
        }
        if (!polc_parse_ll(tok, &v[n])) {
            tide_error("%s: counts_file %s:%d: %s '%s' is not an integer", who, path, line_no,
                       field[n], tok);
            return TIDE_E_FORMAT;
        }
        n++;
    }
    if (n == 0) {
        *blank = true;
        return TIDE_OK;
    }
    if (n < 3) {
        tide_error("%s: counts_file %s:%d: %d field%s; expected 'LAYER EXPERT COUNT'", who, path,
                   line_no, n, n == 1 ? "" : "s");
        return TIDE_E_FORMAT;
    }
    if (v[0] < 0 || v[0] >= s->n_moe_layers) {
        tide_error("%s: counts_file %s:%d: layer %lld is out of range: the model has %d MoE layers "
                   "(0..%d)",
                   who, path, line_no, v[0], s->n_moe_layers, s->n_moe_layers - 1);
        return TIDE_E_FORMAT;
    }
    if (v[1] < 0 || v[1] >= s->n_experts) {
        tide_error(
            "%s: counts_file %s:%d: expert %lld is out of range: a layer has %d experts (0..%d)",
            who, path, line_no, v[1], s->n_experts, s->n_experts - 1);
        return TIDE_E_FORMAT;
    }
    if (v[2] < 0) {
        tide_error("%s: counts_file %s:%d: count %lld is negative", who, path, line_no, v[2]);
        return TIDE_E_FORMAT;
    }
    uint64_t *c = &counts[(size_t)v[0] * (size_t)s->n_experts + (size_t)v[1]];
    if (*c > UINT64_MAX - (uint64_t)v[2]) {
        tide_error("%s: counts_file %s:%d: the counts of layer %lld expert %lld overflow", who,
                   path, line_no, v[0], v[1]);
        return TIDE_E_FORMAT;
    }
    *c += (uint64_t)v[2];
    return TIDE_OK;
}

/* Load a routing-count file into a new [n_moe_layers][n_experts] table
 * (*out, caller frees). Returns TIDE_OK, TIDE_E_NOTFOUND (no such file),
 * TIDE_E_IO, TIDE_E_FORMAT (bad line; the file and line are logged) or
 * TIDE_E_NOMEM. Layers with no entry are reported as a warning. */
static inline int polc_counts_load(const char *who, const char *path,
                                   const struct tide_policy_shape *s, uint64_t **out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int err = errno;
        tide_error("%s: counts_file %s: cannot open: %s", who, path, strerror(err));
        return err == ENOENT || err == ENOTDIR ? TIDE_E_NOTFOUND : TIDE_E_IO;
    }
    size_t cells = (size_t)s->n_moe_layers * (size_t)s->n_experts;
    uint64_t *counts = calloc(cells ? cells : 1, sizeof *counts);
    if (!counts) {
        fclose(f);
        return TIDE_E_NOMEM;
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = TIDE_OK, line_no = 0, entries = 0;
    while (rc == TIDE_OK && getline(&line, &cap, f) >= 0) {
        line_no++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        bool blank;
        rc = polc_counts_line(who, path, line_no, line, s, counts, &blank);
        entries += rc == TIDE_OK && !blank;
    }
    if (rc == TIDE_OK && ferror(f)) {
        tide_error("%s: counts_file %s: read error after line %d", who, path, line_no);
        rc = TIDE_E_IO;
    }
    free(line);
    fclose(f);
    if (rc == TIDE_OK && entries == 0) {
        tide_error("%s: counts_file %s has no 'LAYER EXPERT COUNT' lines", who, path);
        rc = TIDE_E_FORMAT;
    }
    if (rc != TIDE_OK) {
        free(counts);
        return rc;
    }
    int missing = 0, first_missing = -1;
    for (int l = 0; l < s->n_moe_layers; l++) {
        uint64_t sum = 0;
        for (int e = 0; e < s->n_experts; e++)
            sum |= counts[(size_t)l * (size_t)s->n_experts + (size_t)e];
        if (!sum && missing++ == 0)
            first_missing = l;
    }
    if (missing)
        tide_warn("%s: counts_file %s has no counts for %d MoE layer%s (the first is layer %d); "
                  "those start with experts 0..B-1",
                  who, path, missing, missing == 1 ? "" : "s", first_missing);
    *out = counts;
    return TIDE_OK;
}

/* Compute the initial sets. With opts == NULL, or initial = first, layer l
 * starts with experts 0..B-1; with initial = popular, with the top-B of
 * counts_file. Returns TIDE_OK, TIDE_E_CONFIG (popular without a file), a
 * status of polc_counts_load, or TIDE_E_NOMEM. `in` is zeroed on failure. */
static inline int polc_initial_init(struct polc_initial *in, const char *who,
                                    const struct tide_policy_shape *s, const struct tide_opts *opts)
{
    memset(in, 0, sizeof *in);
    const char *mode = opts ? tide_opts_str(opts, "initial") : "first";
    const char *path = opts ? tide_opts_str(opts, "counts_file") : "";
    bool popular = !strcmp(mode, "popular");
    if (popular && !*path) {
        tide_error("%s: initial = popular needs counts_file (a routing-count file)", who);
        return TIDE_E_CONFIG;
    }
    if (!popular && *path)
        tide_warn("%s: counts_file = %s is ignored because initial = %s", who, path, mode);
    size_t n_ids = (size_t)s->n_moe_layers * (size_t)s->budget;
    int32_t *sets = malloc((n_ids ? n_ids : 1) * sizeof *sets);
    if (!sets)
        return TIDE_E_NOMEM;
    if (!popular) {
        for (size_t i = 0; i < n_ids; i++)
            sets[i] = (int32_t)(i % (size_t)s->budget);
    } else {
        uint64_t *counts = NULL;
        struct polc_rank *r = malloc((size_t)s->n_experts * sizeof *r);
        int rc = r ? polc_counts_load(who, path, s, &counts) : TIDE_E_NOMEM;
        if (rc != TIDE_OK) {
            free(r);
            free(sets);
            return rc;
        }
        for (int l = 0; l < s->n_moe_layers; l++) {
            polc_rank_counts(NULL, &counts[(size_t)l * (size_t)s->n_experts], s->n_experts, r);
            for (int i = 0; i < s->budget; i++)
                sets[(size_t)l * (size_t)s->budget + (size_t)i] = r[i].id;
        }
        free(counts);
        free(r);
    }
    in->sets = sets;
    in->n_layers = s->n_moe_layers;
    in->budget = s->budget;
    return TIDE_OK;
}

/* The initial() slot: copy layer's set into out[budget]. Returns the number
 * written (the budget), or TIDE_E_INVAL for a layer out of range (logged). */
static inline int polc_initial_get(const struct polc_initial *in, const char *who, int layer,
                                   int32_t *out)
{
    if (layer < 0 || layer >= in->n_layers || (!out && in->budget > 0)) {
        tide_error("%s: initial() for MoE layer %d, but the model has %d MoE layers", who, layer,
                   in->n_layers);
        return TIDE_E_INVAL;
    }
    if (in->budget > 0)
        memcpy(out, &in->sets[(size_t)layer * (size_t)in->budget],
               (size_t)in->budget * sizeof *out);
    return in->budget;
}

static inline void polc_initial_free(struct polc_initial *in)
{
    free(in->sets);
    in->sets = NULL;
}

#endif
