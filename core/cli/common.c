#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core_options.h"
#include "tide/log.h"
#include "tide/status.h"

int cli_common_arg(struct cli_ctx *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *val = NULL;
    bool is_cfg = !strcmp(a, "-c") || !strcmp(a, "--config");
    bool is_set = !strcmp(a, "--set");
    if (!strncmp(a, "--config=", 9)) {
        is_cfg = true;
        val = a + 9;
    } else if (!strncmp(a, "--set=", 6)) {
        is_set = true;
        val = a + 6;
    }
    if (!is_cfg && !is_set)
        return 0;
    if (!val) {
        if (*i + 1 >= argc) {
            tide_error("%s needs a value", a);
            return -1;
        }
        val = argv[++*i];
    }
    if (is_cfg) {
        c->config_path = val;
        return 1;
    }
    if (c->n_sets == CLI_MAX_SETS) {
        tide_error("too many --set options (at most %d)", CLI_MAX_SETS);
        return -1;
    }
    c->sets[c->n_sets++] = val;
    return 1;
}

int cli_setup(struct cli_ctx *c)
{
    int rc = tide_plugins_scan(&c->plugins);
    if (rc != TIDE_OK)
        return rc;
    c->cfg = tide_config_create();
    if (!c->cfg)
        return TIDE_E_NOMEM;
    if ((rc = tide_core_register_sections(c->cfg)) != TIDE_OK ||
        (rc = tide_config_add_plugins(c->cfg, c->plugins)) != TIDE_OK)
        return rc;
    if (c->config_path && (rc = tide_config_load_file(c->cfg, c->config_path)) != TIDE_OK)
        return rc;
    int bad = 0;
    for (int i = 0; i < c->n_sets; i++)
        if (tide_config_set(c->cfg, c->sets[i]) != TIDE_OK)
            bad++;
    return bad ? TIDE_E_CONFIG : TIDE_OK;
}

void cli_teardown(struct cli_ctx *c)
{
    tide_config_destroy(c->cfg);
    c->cfg = NULL;
    tide_plugins_free(c->plugins);
    c->plugins = NULL;
}

int cli_exit_code(int status)
{
    switch (status) {
    case TIDE_OK: return CLI_EXIT_OK;
    case TIDE_E_CONFIG: return CLI_EXIT_USAGE;
    case TIDE_E_INTERRUPTED: return CLI_EXIT_INTERRUPTED;
    }
    return CLI_EXIT_RUNTIME;
}
