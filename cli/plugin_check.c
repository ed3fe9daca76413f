/* What the plugin checks share (plugin_check.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin_check.h"
#include "tide/log.h"
#include "tide/status.h"

/* A GPU-like profile for the tiny models' experts (hidden 64, inter 32), as
 * in tests/offload: the device is much faster than the host and copies
 * overlap, so cost-aware policies promote and balance. */
static const char check_profile[] = "[profile]\nname = policy-check-gpu-like\n"
                                    "[transfer]\nh2d_gbps = 2\nd2h_gbps = 2\nlatency_us = 1\n"
                                    "overlap = true\n[expert]\nhidden = 64\ninter = 32\n"
                                    "[device]\nrows = 1, 64\nus = 2, 3\n"
                                    "[host]\nrows = 1, 64\nus = 20, 60\n";

/* PLUGIN given as a file: its folder goes first on TIDE_PLUGIN_PATH, and
 * the plugin found must be that very file. */
static int check_plugin_path(const char *arg, const char *cmd, char *real, size_t len)
{
    char buf[PATH_MAX];
    if (!realpath(arg, buf)) {
        tide_error("%s: %s: %s", cmd, arg, strerror(errno));
        return TIDE_E_CONFIG;
    }
    snprintf(real, len, "%s", buf);
    char *slash = strrchr(buf, '/');
    *slash = 0;
    const char *old = getenv("TIDE_PLUGIN_PATH");
    char *path = malloc(strlen(buf) + (old ? strlen(old) : 0) + 2);
    if (!path)
        return TIDE_E_NOMEM;
    sprintf(path, "%s%s%s", buf, old && *old ? ":" : "", old && *old ? old : "");
    setenv("TIDE_PLUGIN_PATH", path, 1);
    free(path);
    return TIDE_OK;
}

int cli_check_resolve(struct cli_ctx *c, const char *a, int kind, const char *cmd,
                      const struct tide_plugin **out)
{
    *out = NULL;
    bool is_file = strchr(a, '/') || (strlen(a) > 3 && !strcmp(a + strlen(a) - 3, ".so"));
    char real[PATH_MAX] = "";
    int rc;
    if (is_file && (rc = check_plugin_path(a, cmd, real, sizeof real)) != TIDE_OK)
        return rc;
    if ((rc = cli_setup(c)) != TIDE_OK)
        return rc;
    const struct tide_plugin_set *set = c->plugins;
    char what[64];
    snprintf(what, sizeof what, "%s PLUGIN", cmd);
    if (!is_file) {
        *out = tide_plugins_get(set, a, kind, what);
        return *out ? TIDE_OK : TIDE_E_CONFIG;
    }
    const struct tide_plugin *pl = NULL;
    for (int i = 0; i < set->n && !pl; i++) {
        char r[PATH_MAX];
        if (realpath(set->items[i].path, r) && !strcmp(r, real))
            pl = &set->items[i];
    }
    for (int i = 0; i < set->n_refused && !pl; i++) {
        char r[PATH_MAX];
        if (realpath(set->refused[i].path, r) && !strcmp(r, real)) {
            tide_error("%s: %s was refused: %s", cmd, a, set->refused[i].reason);
            return TIDE_E_CONFIG;
        }
    }
    if (!pl) {
        tide_error("%s: %s is not a plugin the loader found", cmd, a);
        return TIDE_E_CONFIG;
    }
    /* The engine resolves the name; another file of that name found earlier
     * would be the one it runs. */
    const struct tide_plugin *named = tide_plugins_find(set, pl->desc->name);
    if (named != pl) {
        tide_error("%s: %s is named %s, but the engine would load %s, found earlier on the "
                   "search path",
                   cmd, a, pl->desc->name, named ? named->path : "another file");
        return TIDE_E_CONFIG;
    }
    if ((int)pl->desc->kind != kind) {
        tide_error("%s: %s is a %s plugin, not a %s", cmd, a,
                   tide_plugin_kind_str((int)pl->desc->kind), tide_plugin_kind_str(kind));
        return TIDE_E_CONFIG;
    }
    *out = pl;
    return TIDE_OK;
}

int cli_check_model(struct cli_check_tmp *t, const char *model, const char *preset,
                    const char *model_dir, const char *cmd)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/tide-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", cmd);
    if (!mkdtemp(t->dir)) {
        tide_error("%s: cannot create a temporary folder %s: %s", cmd, t->dir, strerror(errno));
        t->dir[0] = 0;
        return TIDE_E_IO;
    }
    struct stat st;
    if (model_dir) {
        snprintf(t->model, sizeof t->model, "%s", model_dir);
        if (stat(t->model, &st) == 0)
            return TIDE_OK;
        cli_mkdir_parents(t->model);
    } else {
        snprintf(t->model, sizeof t->model, "%s/tiny", t->dir);
    }
    struct tide_plugin_set *set;
    const struct tide_model_ops *mops = cli_model_plugin(model, cmd, &set);
    int rc = mops ? mops->mkmodel(t->model, preset, 0, 11, NULL) : TIDE_E_NOTFOUND;
    tide_plugins_free(set);
    return rc;
}

int cli_check_profile(const struct cli_check_tmp *t, char *path, size_t len, const char *cmd)
{
    snprintf(path, len, "%s/gpu-like.ini", t->dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(check_profile, f) < 0 || fclose(f) != 0) {
        tide_error("%s: cannot write %s: %s", cmd, path, strerror(errno));
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

void cli_check_rm_tmp(struct cli_check_tmp *t)
{
    if (!t->dir[0])
        return;
    static const char *const files[] = {"tiny/config.json", "tiny/model.safetensors",
                                        "tiny/tokenizer.json", "gpu-like.ini", NULL};
    char p[PATH_MAX + 64];
    for (int i = 0; files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", t->dir, files[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/tiny", t->dir);
    rmdir(p);
    rmdir(t->dir);
    t->dir[0] = 0;
}

int cli_check_budgets(const char *text, int *out, int max, const char *cmd)
{
    int n = 0;
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        long b = strtol(p, &end, 10);
        if (end == p || errno || b < 0 || b > 1 << 20 || (*end && *end != ',') || n == max) {
            fprintf(stderr,
                    "tide %s: --budgets takes up to %d budgets >= 0, comma-separated: '%s'\n", cmd,
                    max, text);
            return -1;
        }
        out[n++] = (int)b;
        p = *end ? end + 1 : end;
    }
    if (!n)
        fprintf(stderr, "tide %s: --budgets takes up to %d budgets >= 0, comma-separated: '%s'\n",
                cmd, max, text);
    return n ? n : -1;
}
