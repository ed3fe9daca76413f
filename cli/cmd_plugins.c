/* `tide plugins`: what was found, where, and why anything was refused. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tide/status.h"

int cmd_plugins(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: tide plugins\n\n"
                   "Lists the plugins found, with kind, version, ABI and path, and explains why\n"
                   "any file was refused. Search order: <dir of tide>/plugins, the install\n"
                   "prefix's plugin folder, then each folder of TIDE_PLUGIN_PATH (':'-separated).\n"
                   "The first plugin of a name wins; later ones are refused as duplicates.\n");
            return CLI_EXIT_OK;
        }
        fprintf(stderr, "tide plugins: unexpected argument '%s'%s (see tide plugins --help)\n",
                argv[i],
                !strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")
                    ? "; did you mean 'tide --verbose plugins'?"
                    : "");
        return CLI_EXIT_USAGE;
    }
    struct tide_plugin_set *set;
    int rc = tide_plugins_scan(&set);
    if (rc != TIDE_OK)
        return cli_exit_code(rc);
    printf("searched:\n");
    for (int i = 0; i < set->n_dirs; i++)
        printf("  %s\n", set->dirs[i]);
    printf("\n%-22s %-8s %-8s %-4s %-10s %s\n", "NAME", "KIND", "VERSION", "ABI", "STATUS", "PATH");
    for (int k = TIDE_PLUGIN_MODEL; k <= TIDE_PLUGIN_DECODER; k++) {
        for (int i = 0; i < set->n; i++) {
            const struct tide_plugin *p = &set->items[i];
            if (p->desc->kind != (uint32_t)k)
                continue;
            printf("%-22s %-8s %-8s %-4u %-10s %s\n", p->desc->name,
                   tide_plugin_kind_str((int)p->desc->kind),
                   p->desc->version ? p->desc->version : "?", p->desc->abi_version,
                   p->usable ? "ok" : "unusable", p->path);
            if (p->desc->summary && *p->desc->summary)
                printf("    %s\n", p->desc->summary);
            if (!p->usable)
                printf("    unusable here: %s\n", p->why);
        }
    }
    if (set->n == 0)
        printf("(no plugins found)\n");
    if (set->n_refused) {
        printf("\nrefused:\n");
        for (int i = 0; i < set->n_refused; i++)
            printf("  %s\n    %s\n", set->refused[i].path, set->refused[i].reason);
    }
    tide_plugins_free(set);
    return CLI_EXIT_OK;
}
