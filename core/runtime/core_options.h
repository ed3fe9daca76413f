/* The core's own configuration sections. Core-internal. */
#ifndef TIDE_CORE_OPTIONS_H
#define TIDE_CORE_OPTIONS_H

#include "config.h"
#include "loader.h"

/* Register [model], [backend], [policy], [generation], [output], [bench] and
 * [serve]. */
int tide_core_register_sections(struct tide_config *cfg);

/* Register one section per plugin in the set, named after the plugin. */
int tide_config_add_plugins(struct tide_config *cfg, const struct tide_plugin_set *set);

#endif
