/* The plugin ABI.
 *
 * A plugin is a shared object that exports exactly one symbol,
 * `tide_plugin_entry` (see TIDE_PLUGIN_EXPORT). The loader calls it with the
 * core's ABI version and gets back a static descriptor. The descriptor names
 * the plugin, its kind, its ops table (struct tide_model_ops,
 * struct tide_backend_ops, struct tide_policy_ops or struct tide_decoder_ops)
 * and its option table.
 *
 * Compatibility rules:
 *  - TIDE_ABI_VERSION changes when a change breaks existing plugins (a slot
 *    removed or reordered, a struct field changed). The loader refuses a
 *    plugin whose abi_version differs from its own.
 *  - Ops tables and descriptors begin with their size in bytes and only grow
 *    at the end. A plugin built against an older header has a smaller table;
 *    the core treats the missing trailing slots as absent (see TIDE_OPS_HAS).
 *    Each ops header defines the minimum size a plugin must provide. */
#ifndef TIDE_PLUGIN_H
#define TIDE_PLUGIN_H

#include "tide/api.h"

#include <stddef.h>
#include <stdint.h>

#include "tide/option.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: decoders are step machines (begin, next, feed, finish), models keep
 * only their batched slots (reserve_slots, forward_batch) and mkmodel takes
 * a progress callback. A version-1 plugin is refused, naming it. */
#define TIDE_ABI_VERSION 2u

enum tide_plugin_kind {
    TIDE_PLUGIN_MODEL = 1,
    TIDE_PLUGIN_BACKEND = 2,
    TIDE_PLUGIN_POLICY = 3,
    TIDE_PLUGIN_DECODER = 4, /* a decoding loop (tide/decoder.h) */
};

/* Returns "model", "backend", "policy", "decoder" or "unknown". */
TIDE_API const char *tide_plugin_kind_str(int kind);

struct tide_plugin_desc {
    uint32_t struct_size; /* sizeof(struct tide_plugin_desc) the plugin was built with */
    uint32_t abi_version; /* TIDE_ABI_VERSION the plugin was built with */
    uint32_t kind;        /* enum tide_plugin_kind */
    const char *name;     /* unique, no path separators, e.g. "policy-lru" */
    const char *version;  /* the plugin's own version, e.g. "0.1.0" */
    const char *summary;  /* one line for `tide plugins` */
    const void *ops;      /* kind-specific ops table; starts with uint32_t size */
    const struct tide_option *options; /* NULL-name terminated; may be NULL */
    /* Optional. Can this plugin work here? Returns TIDE_OK, or a negative
     * status after writing a one-line reason into why[why_len] (for example
     * "no CUDA device: cudaErrorInsufficientDriver"). Must be cheap and must
     * not keep resources. */
    int (*probe)(char *why, size_t why_len);
};

/* The entry point. `host_abi` is the core's TIDE_ABI_VERSION; a plugin may
 * return NULL when it cannot serve that version. */
typedef const struct tide_plugin_desc *(*tide_plugin_entry_fn)(uint32_t host_abi);

#define TIDE_PLUGIN_ENTRY_SYMBOL "tide_plugin_entry"

#if defined(__GNUC__)
#define TIDE_PLUGIN_VISIBLE __attribute__((visibility("default")))
#else
#define TIDE_PLUGIN_VISIBLE
#endif

#ifdef __cplusplus
#define TIDE_PLUGIN_EXPORT extern "C" TIDE_PLUGIN_VISIBLE
#else
#define TIDE_PLUGIN_EXPORT TIDE_PLUGIN_VISIBLE
#endif

/* The entry point every plugin defines (and the only symbol it exports). */
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi);

/* Defines the entry point for a plugin with one descriptor: `desc` for the
 * ABI it was built with, NULL for any other. Write it once, after the
 * descriptor: TIDE_PLUGIN_DEFINE(my_desc) */
#define TIDE_PLUGIN_DEFINE(desc)                                                                   \
    TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi)         \
    {                                                                                              \
        return host_abi == TIDE_ABI_VERSION ? &(desc) : NULL;                                      \
    }

/* True when an ops table of declared size `ops->size` contains `field` and the
 * slot is set. Use it for every slot that is not in the kind's minimum size. */
#define TIDE_OPS_HAS(ops, field)                                                                   \
    ((ops) != NULL &&                                                                              \
     (size_t)(ops)->size >= offsetof(__typeof__(*(ops)), field) + sizeof((ops)->field) &&          \
     (ops)->field != NULL)

#ifdef __cplusplus
}
#endif
#endif
