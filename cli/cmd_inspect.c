/* `tide inspect DIR`: what a checkpoint holds and what it needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tide/log.h"
#include "tide/model.h"
#include "tide/status.h"

static void inspect_usage(FILE *f)
{
    fprintf(f, "usage: tide inspect DIR [--budget B] [--plugin model-llada2]\n\n"
               "Prints the architecture, parameter counts, bytes per routed expert, the memory\n"
               "needed on the device and on the host for several expert budgets (and for B,\n"
               "experts per MoE layer kept on the device), and every missing, unexpected or\n"
               "mis-shaped tensor. Reads headers only. Exit 1 when tensors are wrong.\n"
               "--plugin names the model plugin that reads DIR (`tide plugins` lists them).\n");
}

int cmd_inspect(int argc, char **argv)
{
    const char *dir = NULL, *plugin = "model-llada2";
    long budget = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
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
            fprintf(stderr, "tide inspect: unexpected argument '%s'\n\n", a);
            inspect_usage(stderr);
            return CLI_EXIT_USAGE;
        }
    }
    if (!dir) {
        inspect_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    struct tide_plugin_set *set;
    const struct tide_model_ops *ops = cli_model_plugin(plugin, "--plugin", &set);
    int rc = TIDE_E_CONFIG;
    if (ops) {
        const struct tide_inspect_args ia = {
            .size = sizeof ia, .budget = (int)budget, .out = stdout};
        rc = ops->inspect(dir, &ia);
    }
    tide_plugins_free(set);
    return cli_exit_code(rc);
}
