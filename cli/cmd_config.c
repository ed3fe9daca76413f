/* `tide config check FILE` and `tide config doc`. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tide/log.h"
#include "tide/status.h"

static void config_usage(FILE *f)
{
    fprintf(f, "usage: tide config check FILE [--set section.key=value ...]\n"
               "       tide config doc\n\n"
               "check  validates FILE against the option tables of the core and of every\n"
               "       plugin found, then prints the effective configuration with the origin\n"
               "       of each value: default, FILE:LINE or --set. Exit 2 on any error.\n"
               "doc    prints the Markdown reference of every option (docs/config.md).\n");
}

int cmd_config(int argc, char **argv)
{
    if (argc < 2 || cli_wants_help(argc, argv, 1)) {
        config_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    struct cli_ctx c = {0};
    const char *sub = argv[1];
    bool check = !strcmp(sub, "check"), doc = !strcmp(sub, "doc");
    if (!check && !doc) {
        fprintf(stderr, "tide config: unknown subcommand '%s'\n", sub);
        config_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (check && argv[i][0] != '-' && !c.config_path) {
            c.config_path = argv[i];
            continue;
        }
        fprintf(stderr, "tide config %s: unexpected argument '%s'\n", sub, argv[i]);
        config_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (check && !c.config_path) {
        fprintf(stderr, "tide config check: which FILE?\n");
        config_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (doc && (c.config_path || c.n_sets)) {
        fprintf(stderr, "tide config doc takes no file or --set\n");
        return CLI_EXIT_USAGE;
    }
    int rc = cli_setup(&c);
    if (rc == TIDE_OK) {
        if (check) {
            printf("; effective configuration of %s\n", c.config_path);
            tide_config_print(c.cfg, stdout, NULL);
        } else {
            tide_config_doc(c.cfg, stdout);
        }
    } else if (check) {
        tide_error("%s: configuration is not valid", c.config_path);
    }
    cli_teardown(&c);
    return cli_exit_code(rc);
}
