/* decoder-broken: the out-of-tree example decoder (decoder-ltr) with one
 * planted fault, chosen by [decoder-broken] fault, for the test of `tide
 * decoder-check` (decoder_check.sh): the check must catch each one and name
 * it. fault = none is decoder-ltr itself, and passes.
 *   forwards  the plan says max_forwards 1
 *   steps     the plan says max_steps 1 (a block runs up to block_length)
 *   span      the plan says max_tokens one below the block (the engine
 *             refuses the first forward)
 *   random    the first output token depends on how many generations the
 *             process finished before (nondeterministic)
 *   batch     the first output token changes when another generation ran
 *             beside it (not batch invariant)
 * Test-only: built into its own folder, never into build/plugins. */
#include "tide/plugin.h"

/* decoder_ltr.c's own descriptor entry is left out: this file exports the
 * wrapped one below. */
#undef TIDE_PLUGIN_DEFINE
#define TIDE_PLUGIN_DEFINE(desc)
#include "../../examples/out-of-tree-decoder/decoder_ltr.c"

enum { BRK_NONE, BRK_FORWARDS, BRK_STEPS, BRK_SPAN, BRK_RANDOM, BRK_BATCH };

static const struct tide_option brk_options[] = {
    {"fault", TIDE_OPT_ENUM, "none", "the planted fault", "none|forwards|steps|span|random|batch",
     NULL},
    {"min_confidence", TIDE_OPT_FLOAT, "0", "as decoder-ltr's", NULL, "[0,1]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

/* The fault of the instance created last (one configuration per test run). */
static int brk_fault;
/* Generations finished so far in the process; alive now; and the ones that
 * had a companion at some point ([16] by state, a test's batch is smaller). */
static int brk_finished, brk_alive;
static const struct tide_decoder_seq *brk_shared[16];

static int brk_create(const struct tide_decoder_args *a, struct tide_decoder **out)
{
    static const char *const names[] = {"none", "forwards", "steps", "span", "random", "batch"};
    const char *f = a->opts ? tide_opts_str(a->opts, "fault") : "none";
    brk_fault = BRK_NONE;
    for (int i = 0; i < 6; i++)
        if (!strcmp(f, names[i]))
            brk_fault = i;
    return ltr_create(a, out);
}

static int brk_plan(const struct tide_decoder *d, int64_t P, struct tide_decoder_plan *out)
{
    int rc = ltr_plan(d, P, out);
    if (rc != TIDE_OK || P == 0)
        return rc;
    if (brk_fault == BRK_FORWARDS)
        out->max_forwards = 1;
    else if (brk_fault == BRK_STEPS)
        out->max_steps = 1;
    else if (brk_fault == BRK_SPAN)
        out->max_tokens = d->p.block - 1;
    return TIDE_OK;
}

static void brk_mark_shared(void)
{
    for (int i = 0; i < 16; i++)
        if (brk_shared[i] && brk_alive > 1)
            brk_shared[i] = (const struct tide_decoder_seq *)((uintptr_t)brk_shared[i] | 1);
}

static int brk_begin(struct tide_decoder *d, const struct tide_decoder_host *h,
                     const int32_t *prompt, int64_t P, struct tide_decoder_seq **out)
{
    int rc = ltr_begin(d, h, prompt, P, out);
    if (rc != TIDE_OK)
        return rc;
    brk_alive++;
    for (int i = 0; i < 16; i++)
        if (!brk_shared[i]) {
            brk_shared[i] = *out;
            break;
        }
    brk_mark_shared();
    return TIDE_OK;
}

static int brk_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out)
{
    bool shared = false;
    for (int i = 0; q && i < 16; i++)
        if (brk_shared[i] && ((uintptr_t)brk_shared[i] & ~(uintptr_t)1) == (uintptr_t)q) {
            shared = (uintptr_t)brk_shared[i] & 1;
            brk_shared[i] = NULL;
            brk_alive--;
        }
    const int V = q ? q->d->V : 0;
    int rc = ltr_finish(q, out);
    if (rc == TIDE_OK && out && out->n > 0) {
        if (brk_fault == BRK_RANDOM)
            out->ids[0] = (out->ids[0] + 1 + brk_finished) % V;
        else if (brk_fault == BRK_BATCH && shared)
            out->ids[0] = (out->ids[0] + 1) % V;
    }
    if (q)
        brk_finished++;
    return rc;
}

static const struct tide_decoder_ops brk_ops = {
    .size = sizeof(struct tide_decoder_ops),
    .create = brk_create,
    .destroy = ltr_destroy,
    .plan = brk_plan,
    .begin = brk_begin,
    .next = ltr_next,
    .feed = ltr_feed,
    .finish = brk_finish,
    .describe = ltr_describe,
};

static const struct tide_plugin_desc brk_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_DECODER,
    .name = "decoder-broken",
    .version = "0.1.0",
    .summary = "test only: decoder-ltr with a planted fault ([decoder-broken] fault)",
    .ops = &brk_ops,
    .options = brk_options,
    .probe = NULL,
};

/* The one exported symbol (decoder_ltr.c's own descriptor stays unused). */
TIDE_PLUGIN_EXPORT const struct tide_plugin_desc *tide_plugin_entry(uint32_t host_abi)
{
    (void)ltr_desc;
    return host_abi == TIDE_ABI_VERSION ? &brk_desc : NULL;
}
