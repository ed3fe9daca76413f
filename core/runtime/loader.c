/* Plugin loader: dlopen every *.so in the search path, call its single entry
 * symbol with our ABI version, validate the descriptor and the ops table
 * size, and keep a record of every refusal with its reason. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "crash.h"
#include "loader.h"
#include "tide/backend.h"
#include "tide/decoder.h"
#include "tide/log.h"
#include "tide/model.h"
#include "tide/policy.h"
#include "tide/status.h"

#ifndef TIDE_INSTALL_PLUGIN_DIR
#define TIDE_INSTALL_PLUGIN_DIR "/usr/local/lib/tide/plugins"
#endif
#ifndef TIDE_INSTALL_PLUGIN_DIR_FROM_BIN
#define TIDE_INSTALL_PLUGIN_DIR_FROM_BIN "../lib/tide/plugins"
#endif

#define DESC_MIN_SIZE (offsetof(struct tide_plugin_desc, probe) + sizeof(void (*)(void)))

const char *tide_plugin_kind_str(int kind)
{
    switch (kind) {
    case TIDE_PLUGIN_MODEL:
        return "model";
    case TIDE_PLUGIN_BACKEND:
        return "backend";
    case TIDE_PLUGIN_POLICY:
        return "policy";
    case TIDE_PLUGIN_DECODER:
        return "decoder";
    }
    return "unknown";
}

static char *ld_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Append dir to dirs unless it is there already (compared as real paths, so
 * the build tree's and the install's spellings of one folder count once). */
static void ld_add_dir(char **dirs, int *n, int max, const char *dir)
{
    char real[PATH_MAX], other[PATH_MAX];
    const char *key = realpath(dir, real) ? real : dir;
    for (int i = 0; i < *n; i++)
        if (!strcmp(dirs[i], dir) || !strcmp(realpath(dirs[i], other) ? other : dirs[i], key))
            return;
    if (*n < max && (dirs[*n] = ld_strdup(dir)))
        (*n)++;
}

/* Any object of the core: dladdr() on it names the file that carries the
 * core (libtide, or a program linking the core's objects, as tide does). */
static const char ld_anchor;

int tide_plugin_default_dirs(char **dirs, int max)
{
    int n = 0;
    char exe[PATH_MAX], exe_file[PATH_MAX] = "";
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        memcpy(exe_file, exe, (size_t)len + 1);
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            char d[PATH_MAX + 16];
            snprintf(d, sizeof d, "%s/plugins", exe);
            ld_add_dir(dirs, &n, max, d);
            /* An installed tide (which carries the core itself) moved to
             * another prefix: its plugins, where the install put them
             * relative to it (searched when that folder exists). */
            const int w = snprintf(d, sizeof d, "%s/%s", exe, TIDE_INSTALL_PLUGIN_DIR_FROM_BIN);
            if (w > 0 && (size_t)w < sizeof d && access(d, F_OK) == 0)
                ld_add_dir(dirs, &n, max, d);
        }
    }
    /* <libdir>/tide/plugins next to this libtide: an install moved to another
     * prefix (cmake --install --prefix), or a program embedding libtide.
     * Not when the core is the program's own (tide links its objects). */
    Dl_info info;
    char lib[PATH_MAX];
    if (dladdr(&ld_anchor, &info) && info.dli_fname && realpath(info.dli_fname, lib) &&
        strcmp(lib, exe_file) != 0) {
        char *slash = strrchr(lib, '/');
        if (slash) {
            *slash = 0;
            char d[PATH_MAX + 16];
            snprintf(d, sizeof d, "%s/tide/plugins", lib);
            ld_add_dir(dirs, &n, max, d);
        }
    }
    ld_add_dir(dirs, &n, max, TIDE_INSTALL_PLUGIN_DIR);
    const char *env = getenv("TIDE_PLUGIN_PATH");
    if (env) {
        char *copy = ld_strdup(env), *save = NULL;
        for (char *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok && n < max;
             tok = strtok_r(NULL, ":", &save)) {
            struct stat st;
            /* Sticky or not: anyone may add a new .so to such a folder. */
            if (stat(tok, &st) == 0 && (st.st_mode & S_IWOTH))
                tide_warn("TIDE_PLUGIN_PATH entry %s is world-writable: anyone on this machine "
                          "can plant a plugin there",
                          tok);
            ld_add_dir(dirs, &n, max, tok);
        }
        free(copy);
    }
    return n;
}

static int ld_refuse(struct tide_plugin_set *set, const char *path, const char *fmt, ...)
    TIDE_PRINTF(3, 4);

static int ld_refuse(struct tide_plugin_set *set, const char *path, const char *fmt, ...)
{
    char reason[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    struct tide_refusal *r = realloc(set->refused, sizeof *r * (size_t)(set->n_refused + 1));
    if (!r)
        return TIDE_E_NOMEM;
    set->refused = r;
    r[set->n_refused].path = ld_strdup(path);
    r[set->n_refused].reason = ld_strdup(reason);
    set->n_refused++;
    tide_debug("plugin %s refused: %s", path, reason);
    return TIDE_OK;
}

/* Minimum ops-table size for a kind, 0 for an unknown kind. */
static size_t ld_min_ops_size(uint32_t kind)
{
    switch (kind) {
    case TIDE_PLUGIN_MODEL:
        return TIDE_MODEL_OPS_MIN_SIZE;
    case TIDE_PLUGIN_BACKEND:
        return TIDE_BACKEND_OPS_MIN_SIZE;
    case TIDE_PLUGIN_POLICY:
        return TIDE_POLICY_OPS_MIN_SIZE;
    case TIDE_PLUGIN_DECODER:
        return TIDE_DECODER_OPS_MIN_SIZE;
    }
    return 0;
}

/* Validate a descriptor; on refusal write the reason and return false. */
static bool ld_check_desc(const struct tide_plugin_desc *d, char *why, size_t len)
{
    if (d->struct_size < DESC_MIN_SIZE) {
        snprintf(why, len, "descriptor is %u bytes, at least %zu expected (built for another ABI)",
                 d->struct_size, DESC_MIN_SIZE);
        return false;
    }
    if (d->abi_version != TIDE_ABI_VERSION) {
        snprintf(why, len,
                 "ABI mismatch: plugin %s was built for plugin ABI %u, this tide speaks ABI %u",
                 d->name ? d->name : "(unnamed)", d->abi_version, TIDE_ABI_VERSION);
        return false;
    }
    size_t min = ld_min_ops_size(d->kind);
    if (!min) {
        snprintf(why, len, "unknown plugin kind %u", d->kind);
        return false;
    }
    if (!d->name || !*d->name) {
        snprintf(why, len, "descriptor has no name");
        return false;
    }
    if (strchr(d->name, '/') || strchr(d->name, '\\')) {
        snprintf(why, len, "plugin name '%s' contains a path separator; names are not paths",
                 d->name);
        return false;
    }
    for (const char *p = d->name; *p; p++) {
        if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= 'a' && *p <= 'z') ||
              (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) {
            snprintf(why, len, "plugin name '%s' has a character other than [A-Za-z0-9._-]",
                     d->name);
            return false;
        }
    }
    if (!d->ops) {
        snprintf(why, len, "descriptor has no ops table");
        return false;
    }
    uint32_t ops_size;
    memcpy(&ops_size, d->ops, sizeof ops_size);
    if (ops_size < min) {
        snprintf(why, len, "%s ops table is %u bytes, at least %zu expected (ABI mismatch)",
                 tide_plugin_kind_str((int)d->kind), ops_size, min);
        return false;
    }
    return true;
}

static int ld_load_file(struct tide_plugin_set *set, const char *path)
{
    char why[512];
    for (int i = 0; i < set->n; i++)
        if (!strcmp(set->items[i].path, path))
            return TIDE_OK; /* the same file reached through two search entries */
    for (int i = 0; i < set->n_refused; i++)
        if (!strcmp(set->refused[i].path, path))
            return TIDE_OK;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        return ld_refuse(set, path, "dlopen failed: %s", e ? e : "unknown error");
    }
    void *sym = dlsym(h, TIDE_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        dlclose(h);
        return ld_refuse(set, path, "no entry symbol '%s' (not a TIDE plugin?)",
                         TIDE_PLUGIN_ENTRY_SYMBOL);
    }
    tide_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    const struct tide_plugin_desc *d = entry(TIDE_ABI_VERSION);
    if (!d) {
        /* A plugin built for an older ABI answers only its own version: ask
         * for each older one, to name it and its version. Only the leading
         * fields, whose layout every version shares, are read. */
        for (uint32_t v = TIDE_ABI_VERSION - 1; v >= 1; v--) {
            const struct tide_plugin_desc *o = entry(v);
            if (o && o->struct_size >= offsetof(struct tide_plugin_desc, name) + sizeof o->name &&
                o->name) {
                int rc = ld_refuse(set, path,
                                   "plugin %s was built for plugin ABI %u; this tide speaks ABI "
                                   "%u: rebuild it against this tide's headers (docs/sdk.md)",
                                   o->name, v, TIDE_ABI_VERSION);
                dlclose(h);
                return rc;
            }
        }
        dlclose(h);
        return ld_refuse(set, path, "entry returned no descriptor for ABI %u (ABI mismatch)",
                         TIDE_ABI_VERSION);
    }
    if (!ld_check_desc(d, why, sizeof why)) {
        dlclose(h);
        return ld_refuse(set, path, "%s", why);
    }
    for (int i = 0; i < set->n; i++) {
        if (!strcmp(set->items[i].desc->name, d->name)) {
            /* d lives in the library: format the reason before unloading it. */
            int rc = ld_refuse(set, path, "duplicate name '%s': already loaded from %s", d->name,
                               set->items[i].path);
            dlclose(h);
            return rc;
        }
    }
    struct tide_plugin *items = realloc(set->items, sizeof *items * (size_t)(set->n + 1));
    if (!items) {
        dlclose(h);
        return TIDE_E_NOMEM;
    }
    set->items = items;
    struct tide_plugin *p = &items[set->n];
    memset(p, 0, sizeof *p);
    p->path = ld_strdup(path);
    p->handle = h;
    p->desc = d;
    p->usable = 1;
    if (d->probe && d->probe(p->why, sizeof p->why) != TIDE_OK) {
        p->usable = 0;
        if (!p->why[0])
            snprintf(p->why, sizeof p->why, "probe refused without a reason");
    }
    set->n++;
    tide_crash_register(d->name, path, sym);
    return TIDE_OK;
}

static int ld_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ld_scan_dir(struct tide_plugin_set *set, const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return TIDE_OK; /* absent folders are normal (no install, no env) */
    char **names = NULL;
    int n = 0, rc = TIDE_OK;
    struct dirent *de;
    while ((de = readdir(dp))) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 3, ".so"))
            continue;
        char **nn = realloc(names, sizeof *nn * (size_t)(n + 1));
        if (!nn) {
            rc = TIDE_E_NOMEM;
            break;
        }
        names = nn;
        names[n++] = ld_strdup(de->d_name);
    }
    closedir(dp);
    /* Sorted, so "which duplicate wins" does not depend on the file system. */
    if (n)
        qsort(names, (size_t)n, sizeof *names, ld_name_cmp);
    for (int i = 0; i < n; i++) {
        if (rc == TIDE_OK && names[i]) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            char real[PATH_MAX];
            rc = ld_load_file(set, realpath(path, real) ? real : path);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int tide_plugins_scan_dirs(const char *const *dirs, int n_dirs, struct tide_plugin_set **out)
{
    struct tide_plugin_set *set = calloc(1, sizeof *set);
    if (!set)
        return TIDE_E_NOMEM;
    set->dirs = calloc((size_t)(n_dirs ? n_dirs : 1), sizeof *set->dirs);
    if (!set->dirs) {
        free(set);
        return TIDE_E_NOMEM;
    }
    for (int i = 0; i < n_dirs; i++) {
        set->dirs[set->n_dirs++] = ld_strdup(dirs[i]);
        int rc = ld_scan_dir(set, dirs[i]);
        if (rc != TIDE_OK) {
            tide_plugins_free(set);
            return rc;
        }
    }
    *out = set;
    return TIDE_OK;
}

int tide_plugins_scan(struct tide_plugin_set **out)
{
    char *dirs[64];
    int n = tide_plugin_default_dirs(dirs, 64);
    int rc = tide_plugins_scan_dirs((const char *const *)dirs, n, out);
    for (int i = 0; i < n; i++)
        free(dirs[i]);
    return rc;
}

void tide_plugins_free(struct tide_plugin_set *set)
{
    if (!set)
        return;
    for (int i = set->n - 1; i >= 0; i--) {
        /* Under sanitizers, keep the code mapped so leak reports can be symbolised. */
        if (!getenv("TIDE_NO_DLCLOSE"))
            dlclose(set->items[i].handle);
        free(set->items[i].path);
    }
    for (int i = 0; i < set->n_refused; i++) {
        free(set->refused[i].path);
        free(set->refused[i].reason);
    }
    for (int i = 0; i < set->n_dirs; i++)
        free(set->dirs[i]);
    free(set->dirs);
    free(set->items);
    free(set->refused);
    free(set);
}

const struct tide_plugin *tide_plugins_find(const struct tide_plugin_set *set, const char *name)
{
    for (int i = 0; i < set->n; i++)
        if (!strcmp(set->items[i].desc->name, name))
            return &set->items[i];
    return NULL;
}

const struct tide_plugin *tide_plugins_resolve(const struct tide_plugin_set *set, const char *name,
                                               enum tide_plugin_kind kind)
{
    const struct tide_plugin *p = tide_plugins_find(set, name);
    if (p && p->desc->kind == (uint32_t)kind)
        return p;
    char full[256];
    snprintf(full, sizeof full, "%s-%s", tide_plugin_kind_str(kind), name);
    const struct tide_plugin *q = tide_plugins_find(set, full);
    return q && q->desc->kind == (uint32_t)kind ? q : p;
}

const struct tide_plugin *tide_plugins_get(const struct tide_plugin_set *set, const char *name,
                                           enum tide_plugin_kind kind, const char *what)
{
    if (strchr(name, '/') || strchr(name, '\\')) {
        tide_error("%s = %s: config names plugins, not paths; put the file in a folder on "
                   "TIDE_PLUGIN_PATH and name it by its plugin name",
                   what, name);
        return NULL;
    }
    const struct tide_plugin *p = tide_plugins_resolve(set, name, kind);
    if (!p) {
        /* Against the full names and, for a short name, the short ones. */
        const char *kn = tide_plugin_kind_str(kind);
        const size_t kl = strlen(kn);
        const bool short_name = strncmp(name, kn, kl) || name[kl] != '-';
        const char *best = NULL;
        int bd = 99;
        for (int i = 0; i < set->n; i++) {
            const char *full = set->items[i].desc->name;
            if (set->items[i].desc->kind != (uint32_t)kind)
                continue;
            const char *cand =
                short_name && !strncmp(full, kn, kl) && full[kl] == '-' ? full + kl + 1 : full;
            int d = tide_edit_distance(name, cand);
            if (d < bd) {
                bd = d;
                best = cand;
            }
        }
        char hint[256] = "";
        if (best && bd <= 4 && (bd <= 2 || bd <= (int)strlen(best) / 3))
            snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
        /* A wrong TIDE_PLUGIN_PATH shows here: say where we looked. */
        char dirs[2048] = "";
        size_t used = 0;
        for (int i = 0; i < set->n_dirs && used < sizeof dirs; i++)
            used += (size_t)snprintf(dirs + used, sizeof dirs - used, "%s%s", i ? ", " : "",
                                     set->dirs[i]);
        /* The valid values: every usable plugin of the kind. */
        char found[1024] = "";
        used = 0;
        for (int i = 0; i < set->n && used < sizeof found; i++)
            if (set->items[i].desc->kind == (uint32_t)kind && set->items[i].usable)
                used += (size_t)snprintf(found + used, sizeof found - used, "%s%s",
                                         used ? ", " : "", set->items[i].desc->name);
        tide_error("%s = %s: no %s plugin of that name was found%s (%s plugins found: %s; "
                   "plugin not found in the folders searched: %s; TIDE_PLUGIN_PATH adds "
                   "folders; see `tide plugins`)",
                   what, name, tide_plugin_kind_str(kind), hint, tide_plugin_kind_str(kind),
                   used ? found : "none", set->n_dirs ? dirs : "none");
        for (int i = 0; i < set->n_refused; i++)
            if (strstr(set->refused[i].path, name))
                tide_error("  %s was refused: %s", set->refused[i].path, set->refused[i].reason);
        return NULL;
    }
    if (p->desc->kind != (uint32_t)kind) {
        tide_error("%s = %s: %s is a %s plugin, not a %s plugin", what, name, p->path,
                   tide_plugin_kind_str((int)p->desc->kind), tide_plugin_kind_str(kind));
        return NULL;
    }
    if (!p->usable) {
        tide_error("%s = %s: the plugin cannot run here: %s", what, name, p->why);
        return NULL;
    }
    return p;
}

/* Other runnable tasks than this one, the fewest seen in 5 samples of
 * /proc/stat's procs_running a millisecond apart (a job that computes is
 * runnable in each; a shell or kernel thread waking for a moment is not);
 * -1 when unknown. */
static int openmp_others_running(void)
{
    int fewest = -1;
    for (int i = 0; i < 5; i++) {
        FILE *f = fopen("/proc/stat", "r");
        if (!f)
            return -1;
        char line[256];
        int n = -1;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "procs_running %d", &n) == 1)
                break;
        fclose(f);
        if (n < 1)
            return -1;
        fewest = fewest < 0 || n - 1 < fewest ? n - 1 : fewest;
        if (i < 4)
            usleep(1000);
    }
    return fewest;
}

static const char *openmp_note = "";

const char *tide_openmp_env_note(void)
{
    return openmp_note;
}

void tide_openmp_env_defaults(void)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) {
        openmp_note = "OpenMP idle threads: as OMP_WAIT_POLICY / GOMP_SPINCOUNT say";
        return;
    }
    const int others = openmp_others_running();
    if (others == 0) {
        /* libgomp's own default, written out so that programs that re-run
         * themselves once the environment is set (bench/) see it set. */
        setenv("GOMP_SPINCOUNT", "300000", 0);
        openmp_note = "OpenMP idle threads spin before sleeping (GOMP_SPINCOUNT=300000: nothing "
                      "else was running at start; OMP_WAIT_POLICY=passive if other jobs start)";
    } else {
        setenv("GOMP_SPINCOUNT", "1000", 0);
        openmp_note = "OpenMP idle threads sleep soon (GOMP_SPINCOUNT=1000: other tasks were "
                      "running at start; OMP_WAIT_POLICY=active on a dedicated machine)";
    }
}
