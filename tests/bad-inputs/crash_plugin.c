/* A policy plugin that crashes (SIGSEGV) in create: the bad-input catalogue
 * checks that tide names it (cases/plugin-crash-in-create.case). Built into
 * its own folder, found only through TIDE_PLUGIN_PATH. */
#include <stddef.h>

#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

static int crash_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                        struct tide_policy **out)
{
    volatile int *null = NULL;
    *null = 42; /* the bug under test */
    return TIDE_E_INVAL;
}

static void crash_destroy(struct tide_policy *p) {}

static int crash_initial(struct tide_policy *p, int layer, int32_t *out)
{
    return 0;
}

static void crash_block_begin(struct tide_policy *p, int block, bool first_generated) {}

static int crash_plan(struct tide_policy *p, const struct tide_policy_view *v,
                      struct tide_plan *out)
{
    return TIDE_OK;
}

static const struct tide_policy_ops crash_ops = {
    .size = sizeof(struct tide_policy_ops),
    .create = crash_create,
    .destroy = crash_destroy,
    .initial = crash_initial,
    .block_begin = crash_block_begin,
    .plan = crash_plan,
};

static const struct tide_plugin_desc crash_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_POLICY,
    .name = "test-crash-create",
    .version = "0",
    .summary = "crashes in create (a test of crash reports)",
    .ops = &crash_ops,
};

TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi)
{
    return host_abi == TIDE_ABI_VERSION ? &crash_desc : NULL;
}
