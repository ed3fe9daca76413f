/* Sweeps split over processes or machines (docs/cluster.md), shared by
 * `tide bench` and `tide sim`: --shard K/N, the result folder's manifest
 * (provenance, fingerprints of the inputs, the effective configuration),
 * and what `merge` checks before it joins shards into the folder a single
 * run would have written. */
#ifndef TIDE_CLI_SHARD_H
#define TIDE_CLI_SHARD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define CLI_SHARD_MAX 100000

/* Configuration i of a sweep (numbered from 0 in the order an unsharded run
 * takes them) belongs to shard i mod count. */
struct cli_shard {
    int index; /* K, in [0, count) */
    int count; /* N; 0 = not sharded */
};

/* Parse "K/N" (0 <= K < N <= CLI_SHARD_MAX) into *out. Returns TIDE_OK or
 * TIDE_E_CONFIG (logged, naming `what`). */
int cli_shard_parse(const char *text, const char *what, struct cli_shard *out);

/* Whether configuration `config` belongs to this shard (always, unsharded). */
bool cli_shard_mine(const struct cli_shard *s, long config);

/* How many of `configs` configurations belong to shard s. */
long cli_shard_size(const struct cli_shard *s, long configs);

/* FNV-1a, 64 bits: h = cli_fnv1a64(CLI_FNV1A64_INIT, p, n), chainable. */
#define CLI_FNV1A64_INIT 0xcbf29ce484222325ull
uint64_t cli_fnv1a64(uint64_t h, const void *p, size_t n);

/* A 64-bit value as a JSON string of 16 hex digits (new reference). */
json_t *cli_json_hex64(uint64_t v);

/* {"size": bytes, "fnv1a64": "hex"} of a file, or JSON null when it does not
 * exist and !required. Returns TIDE_OK, TIDE_E_NOTFOUND (required and
 * absent) or TIDE_E_IO (logged, naming the file). *out is a new reference. */
int cli_file_fingerprint(const char *path, bool required, json_t **out);

/* A new manifest holding the run's provenance: command, tide_version,
 * git_revision, date (UTC), host, kernel, cpu, cores. NULL on allocation
 * failure. */
json_t *cli_manifest_new(const char *command);

/* The effective configuration's values, {"section": {"key": "value"}}, less
 * the keys named in skip ("section.key", NULL-terminated; may be NULL). A new
 * reference, or NULL on allocation failure. */
json_t *cli_config_values(const struct tide_config *cfg, const char *const *skip);

/* Set every value of such an object in cfg, with origin `origin`. Returns
 * TIDE_OK or TIDE_E_CONFIG (logged: a section or key this build lacks). */
int cli_config_apply(struct tide_config *cfg, const json_t *values, const char *origin);

/* The first member where a and b differ, appended to path as in
 * "grid.budgets[1]" (path holds the prefix, may be ""); false when equal. */
bool cli_json_diff(const json_t *a, const json_t *b, char *path, size_t len);

/* The value at such a path in j as compact JSON (malloc'd; "(absent)" when
 * there is none), for messages. */
char *cli_json_at(const json_t *j, const char *path);

/* Write j to path (indented, keys in insertion order) as path.tmp, renamed
 * when complete. TIDE_OK or TIDE_E_IO (logged). */
int cli_json_write(const char *path, const json_t *j);

/* Create folder `path` for a merged result: it must not exist, or be empty.
 * *created says whether it was made here. Returns TIDE_OK or TIDE_E_CONFIG /
 * TIDE_E_IO (logged). */
int cli_out_dir_create(const char *what, const char *path, bool *created);

/* After a failed merge: remove everything in that folder (it was empty)
 * and the folder itself when it was made here. */
void cli_out_dir_discard(const char *path, bool created);

/* The current UTC time as "YYYY-mm-ddTHH:MM:SSZ" (manifests' dates). */
void cli_utc_now(char *buf, size_t len);

/* Copy a file (replacing dst). TIDE_OK or TIDE_E_IO (logged). */
int cli_copy_file(const char *src, const char *dst);

/* ---- Merging ---- */

/* One result folder given to `merge`. */
struct cli_part {
    char *dir;              /* owned */
    json_t *m;              /* its manifest.json, owned */
    struct cli_shard shard; /* an unsharded run is shard 0 of 1 */
};

struct cli_parts {
    struct cli_part *part; /* [n], in the order found */
    int n;
    struct cli_part **by_index; /* [count]: part of shard i (after cli_parts_check) */
    int count;                  /* N */
};

/* Read the manifests of the result folders named by dirs: each is a result
 * folder (it holds manifest.json) or a folder of result folders (each
 * subfolder that holds one, in name order). Every manifest must come from
 * `command` (bench or sim). Returns TIDE_OK or a status (logged, naming the
 * folder). Free *out with cli_parts_free, also on failure. */
int cli_parts_load(const char *command, char *const *dirs, int n_dirs, struct cli_parts *out);

/* Check that the parts are the shards of one sweep: the same shard count and
 * the same value of every manifest member named in same (NULL-terminated;
 * the first difference is named, e.g. "grid.budgets"), no shard twice, none
 * missing (reported by index) and none interrupted. Fills by_index. Returns
 * TIDE_OK, TIDE_E_CONFIG (a mixture or a duplicate) or TIDE_E_INVAL (shards
 * missing or interrupted), logged. */
int cli_parts_check(const char *command, struct cli_parts *ps, const char *const *same);

void cli_parts_free(struct cli_parts *ps);

/* The merged manifest: shard 0's, without its "shard", plus "shards" (index,
 * folder, host, date, cpu, backends of each) and "hosts" (distinct, in shard
 * order) and "merged" (the date of the merge). New reference or NULL. */
json_t *cli_parts_manifest(const struct cli_parts *ps);

#endif
