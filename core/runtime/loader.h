/* Plugin discovery and loading. Core-internal. */
#ifndef TIDE_LOADER_H
#define TIDE_LOADER_H

#include <stddef.h>

#include "tide/plugin.h"

/* One loaded plugin. */
struct tide_plugin {
    char *path;   /* file it was loaded from */
    void *handle; /* dlopen handle */
    const struct tide_plugin_desc *desc;
    int usable;    /* probe() passed, or no probe */
    char why[256]; /* probe's reason when !usable */
};

/* A file that was refused, and why. */
struct tide_refusal {
    char *path;
    char *reason;
};

struct tide_plugin_set {
    struct tide_plugin *items;
    int n;
    struct tide_refusal *refused;
    int n_refused;
    char **dirs; /* directories searched, in order */
    int n_dirs;
};

/* The default search path: <dir of the executable>/plugins, <dir of
 * libtide>/tide/plugins (a relocated install, or a program embedding
 * libtide), the install prefix's plugin folder, then each entry of
 * TIDE_PLUGIN_PATH (':'-separated); each folder once. Writes up to max entries into dirs (malloc'd
 * strings, caller frees) and returns how many. */
int tide_plugin_default_dirs(char **dirs, int max);

/* Load every *.so in the given directories, in order. Files that fail are
 * recorded in set->refused with the reason; they are not errors. Returns
 * TIDE_OK or TIDE_E_NOMEM. The caller frees the set with tide_plugins_free
 * only after destroying every instance created from it. */
int tide_plugins_scan_dirs(const char *const *dirs, int n_dirs, struct tide_plugin_set **out);

/* tide_plugins_scan_dirs over tide_plugin_default_dirs(). */
int tide_plugins_scan(struct tide_plugin_set **out);

void tide_plugins_free(struct tide_plugin_set *set);

/* Defaults for the OpenMP runtime that CPU backend plugins bring in, which
 * reads its environment once, when the first such plugin is loaded: so call
 * this first thing in main(), before any thread starts (it uses setenv).
 * Unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, it looks at the
 * tasks running on the machine (/proc/stat, the fewest of 5 samples over
 * 4 ms):
 *  - none but this one: GOMP_SPINCOUNT=300000, libgomp's default; idle
 *    threads spin for milliseconds, so every op of a step finds the team
 *    awake (a 4-layer LLaDA2-mini step: 77-78 ms against 80 with 1000, 2
 *    threads, Xeon VM);
 *  - any other (or unknown): GOMP_SPINCOUNT=1000, tens of microseconds, so
 *    that no core is burnt waiting for a thread the scheduler has preempted
 *    (under load, libgomp's default made a forward 2-4x slower).
 * README.md, "CPU speed and threads". tide_openmp_env_note: what was chosen
 * and why, for the log ("" before the call). */
void tide_openmp_env_defaults(void);
const char *tide_openmp_env_note(void);

/* Resolve a plugin named in the configuration for a slot of the given kind.
 * `what` names the config key for messages ("[policy] plugin"). Logs and
 * returns NULL when: the name holds a path separator, no plugin has that name
 * (with a "did you mean" and any refusal that may explain it), the plugin is
 * of another kind, or its probe refused. */
const struct tide_plugin *tide_plugins_get(const struct tide_plugin_set *set, const char *name,
                                           enum tide_plugin_kind kind, const char *what);

/* The plugin a name in a configuration or on a command line means: the
 * plugin called `name` when it is of this kind, else the one called
 * "KIND-name" (so lru and cpu-onednn mean policy-lru and
 * backend-cpu-onednn), else the one called
 * `name` of another kind (for the caller to refuse), else NULL. No logging.
 * Every command resolves plugin names through this. */
const struct tide_plugin *tide_plugins_resolve(const struct tide_plugin_set *set, const char *name,
                                               enum tide_plugin_kind kind);

/* Like tide_plugins_get without logging; NULL when absent. */
const struct tide_plugin *tide_plugins_find(const struct tide_plugin_set *set, const char *name);

#endif
