/* decoder-common: the LLaDA2 family's block canvas, as decoder-llada2 and
 * decoder-llada21 share it: the prompt followed by masks in whole blocks of
 * L, the blocks the prompt covers prefilled (one forward per block; the
 * block-causal mask makes their K/V final), decoding from the block holding
 * the prompt's tail, each step a forward of the block against the cache (or
 * of the window [0, block end) with recompute), a K/V pass after a finished
 * block that another follows. */
#ifndef DECODER_COMMON_BLOCKS_H
#define DECODER_COMMON_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "decoder-common/params.h"
#include "tide/decoder.h"

/* The canvas: the prompt plus gen_length, rounded up to whole blocks. */
static inline int64_t dc_blocks_ctx(const struct dc_params *p, int64_t P)
{
    const int64_t total = P + p->gen_length, L = p->block;
    return (total + L - 1) / L * L;
}

/* Copy a plan into the caller's struct, no further than its size. */
static inline void dc_plan_out(struct tide_decoder_plan *out, const struct tide_decoder_plan *pl)
{
    const uint32_t n = out->size < sizeof *pl ? out->size : (uint32_t)sizeof *pl;
    memcpy(out, pl, n);
    out->size = n;
}

/* The plan of a block canvas: a forward spans a block with the cache, the
 * window with recompute. TIDE_E_RANGE (logged) when the canvas exceeds the
 * model's context. */
static inline int dc_blocks_plan(const struct dc_params *p, int64_t max_ctx, int64_t P,
                                 int max_steps, int nominal_steps, struct tide_decoder_plan *out)
{
    const int64_t ctx = dc_blocks_ctx(p, P);
    int rc = dc_check_prompt(P, ctx, p, max_ctx);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_decoder_plan pl = {
        .size = sizeof pl,
        .n_ctx = ctx,
        .max_tokens = p->recompute ? ctx : p->block,
        .max_output = p->gen_length,
        .blocks = (int)(ctx / p->block - P / p->block),
        .block_length = p->block,
        .max_steps = max_steps,
        .nominal_steps = nominal_steps,
    };
    dc_plan_out(out, &pl);
    return TIDE_OK;
}

/* Prefill the `first` blocks the prompt covers (none with recompute). */
static inline int dc_blocks_prefill(const struct tide_decoder_host *h, const int32_t *canvas,
                                    int64_t first, int L, bool recompute)
{
    int rc = TIDE_OK;
    for (int64_t b = 0; !recompute && b < first && rc == TIDE_OK; b++)
        rc = h->forward(h->user, canvas + b * L, L, b * L, NULL, 0, NULL);
    return rc;
}

/* One step's forward of block b (positions [b0, b0 + L)) and its logits
 * events. pos[0..n) are the block-relative positions the step decides on
 * (increasing); span[n] is scratch. With host->block_logits every row of the
 * window is computed (logits holds [window, V]) and reported through
 * step_logits; else only pos's rows (logits holds [n, V]). On TIDE_OK,
 * row[j] points at the logits of pos[j], and step_rows has reported them. */
static inline int dc_blocks_step_forward(const struct tide_decoder_host *h, const int32_t *canvas,
                                         int64_t b, int L, bool recompute, int step, int V,
                                         const int32_t *pos, int n, int32_t *span, float *logits,
                                         const float **row)
{
    const int64_t b0 = b * L, f0 = recompute ? 0 : b0, fn = b0 + L - f0;
    const float *lb = logits + (size_t)(b0 - f0) * (size_t)V;
    int rc;
    if (h->block_logits) {
        rc = h->forward(h->user, canvas + f0, fn, f0, NULL, 0, logits);
        for (int j = 0; j < n; j++)
            row[j] = lb + (size_t)pos[j] * (size_t)V;
    } else {
        for (int j = 0; j < n; j++)
            span[j] = (int32_t)(b0 - f0 + pos[j]);
        rc = h->forward(h->user, canvas + f0, fn, f0, span, n, logits);
        for (int j = 0; j < n; j++)
            row[j] = logits + (size_t)j * (size_t)V;
    }
    if (rc != TIDE_OK)
        return rc;
    if (h->block_logits)
        h->step_logits(h->user, b, step, lb, L, V);
    h->step_rows(h->user, b, step, n, pos, row, V);
    return TIDE_OK;
}

#endif
