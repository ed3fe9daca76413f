/* One source, many test plugins. tests/plugins-bad/CMakeLists.txt builds it
 * once per case, each with a few macros that make the plugin wrong in one way
 * (or not at all, for the good ones):
 *   TP_NAME         descriptor name (required)
 *   TP_BACKEND      a backend plugin; otherwise a policy plugin
 *   TP_KIND         kind written into the descriptor (e.g. an unknown one)
 *   TP_ABI          abi_version written into the descriptor
 *   TP_DESC_SIZE    struct_size written into the descriptor
 *   TP_SMALL_OPS    the policy ops table declares one slot less than the minimum
 *   TP_NO_EXPORT    the shared object has no tide_plugin_entry symbol (its entry
 *                   function is misspelt; plugin.h declares the real one exported)
 *   TP_NULL_ENTRY   the entry function declines the host's ABI (returns NULL)
 *   TP_OLD_ABI      built as for plugin ABI 1: the entry answers only host ABI 1,
 *                   with a descriptor saying so (TIDE_PLUGIN_DEFINE's behaviour)
 *   TP_PROBE_FAILS  probe() refuses with TP_PROBE_REASON */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tide/backend.h"
#include "tide/plugin.h"
#include "tide/policy.h"
#include "tide/status.h"

#ifndef TP_NAME
#error "TP_NAME must be defined"
#endif
#ifndef TP_ABI
#define TP_ABI TIDE_ABI_VERSION
#endif
#ifndef TP_DESC_SIZE
#define TP_DESC_SIZE sizeof(struct tide_plugin_desc)
#endif

/* The reason the probe-refusing plugin gives; tests look for it verbatim. */
#define TP_PROBE_REASON "no frobnicator on this machine (test plugin always refuses)"

#ifdef TP_BACKEND

#ifndef TP_KIND
#define TP_KIND TIDE_PLUGIN_BACKEND
#endif
#define TP_OPS_SIZE sizeof(struct tide_backend_ops)

/* A backend that loads but never creates an instance: enough to fill the
 * backend slot of a test with a plugin of the wrong kind. */
static int tp_backend_create(const struct tide_backend_args *args, struct tide_backend **out)
{
    return TIDE_E_UNSUPPORTED;
}

static void tp_backend_destroy(struct tide_backend *bk) {}

static const struct tide_backend_ops tp_ops = {
    .size = TP_OPS_SIZE,
    .create = tp_backend_create,
    .destroy = tp_backend_destroy,
};

#define TP_OPTIONS NULL

#else /* a policy */

#ifndef TP_KIND
#define TP_KIND TIDE_PLUGIN_POLICY
#endif
#ifdef TP_SMALL_OPS
/* As if built against a header whose table ended before `plan`. */
#define TP_OPS_SIZE (TIDE_POLICY_OPS_MIN_SIZE - sizeof(void (*)(void)))
#else
#define TP_OPS_SIZE sizeof(struct tide_policy_ops)
#endif

/* A policy that never moves an expert: the first `budget` experts stay
 * resident and every active expert runs where it is. */
struct tide_policy {
    struct tide_policy_shape shape;
};

static int tp_create(const struct tide_policy_shape *shape, const struct tide_opts *opts,
                     struct tide_policy **out)
{
    struct tide_policy *p = calloc(1, sizeof *p);
    if (!p)
        return TIDE_E_NOMEM;
    p->shape = *shape;
    *out = p;
    return TIDE_OK;
}

static void tp_destroy(struct tide_policy *p)
{
    free(p);
}

static int tp_initial(struct tide_policy *p, int layer, int32_t *out)
{
    for (int e = 0; e < p->shape.budget; e++)
        out[e] = e;
    return p->shape.budget;
}

static void tp_block_begin(struct tide_policy *p, int block, bool first_generated) {}

static int tp_plan(struct tide_policy *p, const struct tide_policy_view *v, struct tide_plan *out)
{
    out->n_promote = 0;
    for (int e = 0; e < p->shape.n_experts; e++)
        if (v->counts[e])
            out->place[e] = v->resident[e] ? TIDE_PLACE_DEVICE : TIDE_PLACE_HOST;
    return TIDE_OK;
}

static const struct tide_policy_ops tp_ops = {
    .size = TP_OPS_SIZE,
    .create = tp_create,
    .destroy = tp_destroy,
    .initial = tp_initial,
    .block_begin = tp_block_begin,
    .plan = tp_plan,
};

/* One option of each kind that a plugin section commonly has. */
static const struct tide_option tp_options[] = {
    {"mode", TIDE_OPT_ENUM, "keep", "what the test policy does", "keep|host", NULL},
    {"weight", TIDE_OPT_FLOAT, "0.5", "an unused weight", NULL, "[0,1]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};
#define TP_OPTIONS tp_options

#endif

#ifdef TP_PROBE_FAILS
static int tp_probe(char *why, size_t why_len)
{
    strncpy(why, TP_PROBE_REASON, why_len - 1);
    why[why_len - 1] = 0;
    return TIDE_E_UNSUPPORTED;
}
#define TP_PROBE tp_probe
#else
#define TP_PROBE NULL
#endif

static const struct tide_plugin_desc tp_desc = {
    .struct_size = TP_DESC_SIZE,
    .abi_version = TP_ABI,
    .kind = TP_KIND,
    .name = TP_NAME,
    .version = "0.0.1",
    .summary = "test plugin (" TP_NAME ")",
    .ops = &tp_ops,
    .options = TP_OPTIONS,
    .probe = TP_PROBE,
};

#ifdef TP_NO_EXPORT
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entri(uint32_t host_abi);
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entri(uint32_t host_abi)
#else
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi);
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi)
#endif
{
#ifdef TP_NULL_ENTRY
    if (host_abi != TIDE_ABI_VERSION + 1)
        return NULL;
#endif
#ifdef TP_OLD_ABI
    if (host_abi != 1)
        return NULL;
#endif
    return &tp_desc;
}
