/* `tide config check FILE` and `tide config doc`. */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tide/log.h"
#include "tide/shipped.h"
#include "tide/status.h"

static void config_usage(FILE *f)
{
    fprintf(f, "usage: tide config check FILE... [--set section.key=value ...]\n"
               "       tide config doc\n\n"
               "check  validates the FILEs (layered in order: a later one wins, as several\n"
               "       -c do) against the option tables of the core and of every plugin\n"
               "       found, then prints the effective configuration with the origin of\n"
               "       each value: default, FILE:LINE (the file that set it, included files\n"
               "       too) or --set. Exit 2 on any error.\n"
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
        static const char *const subs[] = {"check", "doc", NULL};
        char hint[64];
        cli_suggest_word(sub, subs, hint, sizeof hint);
        fprintf(stderr, "tide config: unknown subcommand '%s'%s\n", sub, hint);
        config_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (check && argv[i][0] != '-' && c.n_configs < CLI_MAX_CONFIGS) {
            c.configs[c.n_configs++] = argv[i];
            continue;
        }
        char cmd[32];
        snprintf(cmd, sizeof cmd, "config %s", sub);
        return cli_unexpected(cmd, argv[i], config_usage);
    }
    if (check && !c.n_configs) {
        fprintf(stderr, "tide config check: which FILE?\n");
        config_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (doc && (c.n_configs || c.n_sets)) {
        fprintf(stderr, "tide config doc takes no file or --set\n");
        return CLI_EXIT_USAGE;
    }
    int rc = cli_setup(&c);
    char files[4096] = "";
    size_t used = 0;
    for (int i = 0; i < c.n_configs && used < sizeof files; i++) {
        /* The file read, where it is a shipped one found elsewhere (after a
         * successful setup, so a missing file is reported once). */
        char found[PATH_MAX];
        const bool moved = rc == TIDE_OK &&
                           tide_shipped_path(c.configs[i], "-c", found, sizeof found) == TIDE_OK &&
                           strcmp(found, c.configs[i]);
        used +=
            (size_t)snprintf(files + used, sizeof files - used, "%s%s%s%s%s", i ? ", then " : "",
                             c.configs[i], moved ? " (" : "", moved ? found : "", moved ? ")" : "");
    }
    if (rc == TIDE_OK) {
        if (check) {
            printf("; effective configuration of %s\n", files);
            tide_config_print(c.cfg, stdout, NULL);
        } else {
            tide_config_doc(c.cfg, stdout);
        }
    } else if (check) {
        tide_error("%s: configuration is not valid", files);
    }
    cli_teardown(&c);
    return cli_exit_code(rc);
}
