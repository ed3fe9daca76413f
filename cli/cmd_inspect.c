/* `tide inspect DIR`: what a checkpoint holds and what it needs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "decode.h"
#include "tide/log.h"
#include "tide/model.h"
#include "tide/status.h"

static void inspect_usage(FILE *f)
{
    fprintf(f, "usage: tide inspect DIR [--budget B] [--plugin model-llada2] [-c FILE] "
               "[--set section.key=value]...\n\n"
               "Prints the architecture, parameter counts, bytes per routed expert, the memory\n"
               "needed on the device and on the host for several expert budgets (and for B,\n"
               "experts per MoE layer kept on the device), and every missing, unexpected or\n"
               "mis-shaped tensor; then the decoder `tide run` would use on DIR and why\n"
               "([generation] decoder, else the checkpoint's own choice). Reads headers only.\n"
               "Exit 1 when tensors are wrong. --plugin names the model plugin that reads DIR\n"
               "(`tide plugins` lists them); -c and --set give the configuration the decoder\n"
               "is chosen under (e.g. --set model-llada2.decoder=llada21).\n");
}

/* The decoder a run on dir would use, and why. */
static int inspect_decoder(struct cli_ctx *c, const struct tide_plugin *mp, const char *dir)
{
    const struct tide_model_ops *ops = mp->desc->ops;
    const char *want = tide_opts_str(tide_config_section(c->cfg, "generation"), "decoder");
    char why[512] = "";
    const char *model_wants =
        TIDE_OPS_HAS(ops, checkpoint_decoder)
            ? ops->checkpoint_decoder(dir, tide_config_section(c->cfg, mp->desc->name), why,
                                      sizeof why)
            : NULL;
    if (!strcmp(want, "auto") && !model_wants) {
        printf("decoder: named by the model once it is open (%s cannot tell from the "
               "directory)\n",
               mp->desc->name);
        return TIDE_OK;
    }
    const struct tide_plugin *dp = tide_decode_resolve(c->plugins, want, model_wants, dir);
    if (!dp)
        return TIDE_E_CONFIG;
    if (strcmp(want, "auto"))
        printf("decoder: %s ([generation] decoder = %s)\n", dp->desc->name, want);
    else
        printf("decoder: %s (auto: %s)\n", dp->desc->name, why);
    return TIDE_OK;
}

int cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL, *plugin = "model-llada2";
    long budget = -1;
    struct cli_ctx c = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int common = cli_common_arg(&c, argc, argv, &i);
        if (common < 0)
            return CLI_EXIT_USAGE;
        if (common > 0)
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            inspect_usage(stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--budget") && i + 1 < argc) {
            char *end;
            budget = strtol(argv[++i], &end, 10);
            if (*end || budget < 0) {
                fprintf(stderr, "tide inspect: --budget takes a number >= 0\n");
                return CLI_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--plugin") && i + 1 < argc) {
            plugin = argv[++i];
        } else if (a[0] != '-' && !dir) {
            dir = a;
        } else {
            static const char *const flags[] = {"--budget", "--plugin", "--help", NULL};
            char hint[128];
            cli_suggest_flag(a, flags, hint, sizeof hint);
            fprintf(stderr, "tide inspect: unexpected argument '%s'%s\n\n", a, hint);
            inspect_usage(stderr);
            return CLI_EXIT_USAGE;
        }
    }
    if (!dir) {
        inspect_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        tide_error("tide inspect: %s: %s", dir,
                   stat(dir, &sb) != 0 ? strerror(errno) : "not a folder (name a checkpoint's)");
        return CLI_EXIT_USAGE;
    }
    int rc = cli_setup(&c);
    const struct tide_plugin *mp =
        rc == TIDE_OK ? tide_plugins_get(c.plugins, plugin, TIDE_PLUGIN_MODEL, "--plugin") : NULL;
    if (rc == TIDE_OK && !mp)
        rc = TIDE_E_CONFIG;
    if (rc == TIDE_OK) {
        const struct tide_model_ops *ops = mp->desc->ops;
        const struct tide_inspect_args ia = {
            .size = sizeof ia, .budget = (int)budget, .out = stdout};
        rc = ops->inspect(dir, &ia);
        fflush(stdout);
        /* After a report (whole, or naming wrong tensors), the decoder;
         * after an error that stopped it, nothing more. */
        if (rc == TIDE_OK || rc == TIDE_E_FORMAT) {
            const int drc = inspect_decoder(&c, mp, dir);
            if (rc == TIDE_OK)
                rc = drc;
        }
    }
    cli_teardown(&c);
    return cli_exit_code(rc);
}
