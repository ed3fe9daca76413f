/* What `tide policy-check` and `tide decoder-check` share: resolving the
 * plugin under test (a name, or the path of its .so file) and the temporary
 * folder holding a tiny synthetic checkpoint and a test hardware profile. */
#ifndef TIDE_CLI_PLUGIN_CHECK_H
#define TIDE_CLI_PLUGIN_CHECK_H

#include <limits.h>
#include <stddef.h>

#include "cli.h"

/* A temporary folder of a check, and what was written into it. */
struct cli_check_tmp {
    char dir[PATH_MAX]; /* "" when none */
    char model[PATH_MAX + 16];
};

/* Find the plugin to check, of kind `kind`, named by arg: a plugin name
 * (found as the engine finds it, with a "did you mean"), or the path of its
 * file, whose folder then goes first on TIDE_PLUGIN_PATH so that the loader
 * finds that very file. Sets up c (cli_setup). cmd names the command in
 * messages. Returns TIDE_OK with *out set, or TIDE_E_CONFIG (logged: an
 * unknown name, a refused file, a file another of the same name shadows, a
 * plugin of another kind) or TIDE_E_NOMEM. */
int cli_check_resolve(struct cli_ctx *c, const char *arg, int kind, const char *cmd,
                      const struct tide_plugin **out);

/* Create the temporary folder t->dir (under TMPDIR) and, unless model_dir
 * names one already there, a tiny checkpoint of model plugin `model`
 * (preset, seed 11) into model_dir (created) or t->dir/tiny; t->model is
 * its path. Returns TIDE_OK or a status (logged). */
int cli_check_model(struct cli_check_tmp *t, const char *model, const char *preset,
                    const char *model_dir, const char *cmd);

/* Write the test hardware profile of the tiny experts (hidden 64, inter 32:
 * a device much faster than the host, overlapped copies, so that cost-aware
 * policies promote and balance) as t->dir/gpu-like.ini into path[len].
 * Returns TIDE_OK or TIDE_E_IO (logged). */
int cli_check_profile(const struct cli_check_tmp *t, char *path, size_t len, const char *cmd);

/* Parse "B,B,..." (budgets >= 0, at most max) into out. Returns how many,
 * or -1 after printing the usage error (naming cmd). */
int cli_check_budgets(const char *text, int *out, int max, const char *cmd);

/* Remove what cli_check_model and cli_check_profile wrote into t->dir, and
 * the folder (anything else a model plugin wrote stays, with the folder). */
void cli_check_rm_tmp(struct cli_check_tmp *t);

#endif
