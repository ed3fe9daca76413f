/* decoder-common: the LLaDA2 family's block canvas, as decoder-llada2 and
 * decoder-llada21 share it: the prompt followed by masks in whole blocks of
 * L, the blocks the prompt covers prefilled (one forward per block; the
 * block-causal mask makes their K/V final), decoding from the block holding
 * the prompt's tail, each step a forward of the block against the cache (or
 * of the window [0, block end) with recompute), a K/V pass after a finished
 * block that another follows. The decoders are step machines
 * (tide/decoder.h): these helpers describe each of those forwards and
 * report a step's logits once it has run. */
#ifndef DECODER_COMMON_BLOCKS_H
#define DECODER_COMMON_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
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
                                 int max_steps, int nominal_steps, int steps_scope,
                                 struct tide_decoder_plan *out)
{
    const int64_t ctx = dc_blocks_ctx(p, P);
    int rc = dc_check_prompt(P, ctx, p, max_ctx);
    if (rc != TIDE_OK)
        return rc;
    const int blocks = (int)(ctx / p->block - P / p->block);
    const struct tide_decoder_plan pl = {
        .size = sizeof pl,
        .n_ctx = ctx,
        .max_tokens = p->recompute ? ctx : p->block,
        .max_output = p->gen_length,
        .blocks = blocks,
        .block_length = p->block,
        .max_steps = max_steps,
        .nominal_steps = nominal_steps,
        .slots = 1,
        /* the prompt's blocks, every step, a K/V pass per block */
        .max_forwards = p->recompute ? (int64_t)blocks * max_steps
                                     : P / p->block + (int64_t)blocks * (max_steps + 1),
        .gen_multiple = 1,
        .steps_scope = steps_scope,
        .grows_context = 1, /* dc_canvas_grow */
    };
    dc_plan_out(out, &pl);
    return TIDE_OK;
}

/* A forward of one span in slot 0: positions [pos0, pos0 + n) of canvas,
 * no logits (a prefill or K/V pass), of the given phase. */
static inline void dc_fwd_span(struct tide_decoder_fwd *f, int phase, const int32_t *canvas,
                               int64_t pos0, int64_t n)
{
    f->phase = phase;
    f->n_spans = 1;
    struct tide_seq_span *sp = &f->span[0];
    memset(sp, 0, sizeof *sp);
    sp->size = (uint32_t)sizeof *sp;
    sp->ids = canvas + pos0;
    sp->n = n;
    sp->pos0 = pos0;
}

/* The prefill of prompt block b, or the K/V pass of finished block b:
 * positions [b L, (b+1) L), no logits. */
static inline void dc_blocks_block_fwd(struct tide_decoder_fwd *f, int phase, const int32_t *canvas,
                                       int64_t b, int L)
{
    dc_fwd_span(f, phase, canvas, b * L, L);
}

/* One step's forward of block b (positions [b0, b0 + L) against the cache,
 * or the window [0, b0 + L) with recompute). pos[0..n) are the
 * block-relative positions the step decides on (increasing); span[n] is
 * scratch that must live until the forward is fed. With host->block_logits
 * every row of the window is asked for (logits holds [window, V]); else only
 * pos's rows (logits holds [n, V]). */
static inline void dc_blocks_step_fwd(const struct tide_decoder_host *h, struct tide_decoder_fwd *f,
                                      const int32_t *canvas, int64_t b, int L, bool recompute,
                                      const int32_t *pos, int n, int32_t *span, float *logits)
{
    const int64_t b0 = b * L, f0 = recompute ? 0 : b0, fn = b0 + L - f0;
    dc_fwd_span(f, TIDE_DECODE_STEP, canvas, f0, fn);
    struct tide_seq_span *sp = &f->span[0];
    sp->logits = logits;
    if (h->block_logits) {
        sp->n_rows = fn;
    } else {
        for (int j = 0; j < n; j++)
            span[j] = (int32_t)(b0 - f0 + pos[j]);
        sp->rows = span;
        sp->n_rows = n;
    }
}

/* After the step's forward of dc_blocks_step_fwd: row[j] points at the
 * logits of pos[j], and the logits events are made (step_logits with every
 * row of the block when host->block_logits, then step_rows). */
static inline void dc_blocks_step_fed(const struct tide_decoder_host *h, int64_t b, int L,
                                      bool recompute, int step, int V, const int32_t *pos, int n,
                                      const float *logits, const float **row)
{
    const int64_t b0 = b * L, f0 = recompute ? 0 : b0;
    const float *lb = logits + (size_t)(b0 - f0) * (size_t)V;
    for (int j = 0; j < n; j++)
        row[j] = h->block_logits ? lb + (size_t)pos[j] * (size_t)V : logits + (size_t)j * (size_t)V;
    if (h->block_logits)
        h->step_logits(h->user, b, step, lb, L, V);
    h->step_rows(h->user, b, step, n, pos, row, V);
}

/* What the forward a generation posted last was (NONE: it was fed). */
enum { DC_POSTED_NONE, DC_POSTED_PREFILL, DC_POSTED_STEP, DC_POSTED_KV };

/* One generation's block canvas and where its loop stands, between the
 * forwards of a step machine: the prompt's blocks are prefilled one per
 * forward (none with recompute), decoding starts at the block holding the
 * prompt's tail, each block begins (block_begin) before its first step and
 * ends with block_end, after its K/V pass when another block follows. */
struct dc_canvas {
    int32_t *ids;         /* [cap]: the prompt, then masks to the end of the last block */
    int64_t P, total, nb; /* prompt tokens, positions, blocks */
    int64_t cap;          /* positions allocated: room for the context to grow */
    int64_t first;        /* the first decoded block: the one holding the prompt's tail */
    int64_t fixed;        /* positions before this are the prompt or, after a growth, the
                             prompt and the output so far: never decoded again */
    bool grown;           /* the context grew (dc_canvas_grow) */
    int base;             /* generated blocks before `first` (earlier growths) */
    int64_t asked;        /* the block context_grow was last asked before */
    int L;                /* block length */
    bool recompute;       /* no KV cache: no prefill, no K/V pass */
    int64_t pf;           /* next prompt block to prefill */
    int64_t b;            /* the current block */
    bool in_block;        /* block_begin was reported for b */
    int posted;           /* DC_POSTED_*: the forward last posted */
    bool finished;        /* next() said done */
};

/* The canvas of a prompt of P tokens under p, with room for the prompt to
 * grow by `room` tokens. TIDE_OK or TIDE_E_NOMEM. */
static inline int dc_canvas_init(struct dc_canvas *c, const struct dc_params *p,
                                 const int32_t *prompt, int64_t P, int32_t mask, int64_t room)
{
    memset(c, 0, sizeof *c);
    c->P = P;
    c->L = p->block;
    c->total = dc_blocks_ctx(p, P);
    c->cap = dc_blocks_ctx(p, P + (room > 0 ? room : 0));
    c->nb = c->total / c->L;
    c->first = P / c->L;
    c->fixed = P;
    c->asked = -1;
    c->recompute = p->recompute;
    c->pf = p->recompute ? c->first : 0;
    c->b = c->first;
    if (!(c->ids = (int32_t *)malloc(sizeof *c->ids * (size_t)c->cap)))
        return TIDE_E_NOMEM;
    for (int64_t i = 0; i < c->cap; i++)
        c->ids[i] = i < P ? prompt[i] : mask;
    return TIDE_OK;
}

/* The generated block the loop stands at, from 0 (events count these). */
static inline int dc_canvas_gen(const struct dc_canvas *c)
{
    return c->base + (int)(c->b - c->first);
}

/* Position pos may not change: a prompt token (the prompt's masks stay
 * candidates, as in the official loops) or, once the context grew, any
 * position before `fixed` (the output of earlier blocks is final). */
static inline bool dc_canvas_locked(const struct dc_canvas *c, int64_t pos, int32_t mask)
{
    return pos < c->fixed && (c->grown || c->ids[pos] != mask);
}

/* Context growth (tide_decoder_host context_grow), between blocks, before
 * any block but the first generated one begins. The inserted tokens join
 * the prompt at `at`; the prompt and the output so far -- everything before
 * the next block -- become the fixed part of a canvas re-cut into blocks of
 * L from position 0, as for a prompt that long: decoding resumes at the
 * block holding the fixed part's tail, and gen_length output positions
 * follow the prompt. Under the block-causal mask the cached K/V of every
 * block before the one holding `at` are unchanged; from that block to the
 * fixed part's tail they are prefilled again (dc_canvas_prefill), and only
 * they. Returns 1 when the canvas grew, 0 when not, or TIDE_E_INVAL (logged
 * by the caller) for an insertion beyond the prompt or the room. */
static inline int dc_canvas_grow(struct dc_canvas *c, const struct tide_decoder_host *h, int64_t G,
                                 int32_t mask)
{
    if (c->in_block || c->asked == c->b || (c->base == 0 && c->b == c->first) ||
        !TIDE_DECODER_HAS(h, struct tide_decoder_host, context_grow) || !h->context_grow)
        return 0;
    c->asked = c->b;
    const int32_t *ins = NULL;
    int64_t at = 0;
    const int64_t m = h->context_grow(h->user, dc_canvas_gen(c), &ins, &at);
    if (m <= 0)
        return 0;
    const int64_t L = c->L, end = c->b * L, P2 = c->P + m;
    const int64_t total2 = (P2 + G + L - 1) / L * L;
    if (!ins || at < 0 || at > c->P || total2 > c->cap)
        return TIDE_E_INVAL;
    memmove(c->ids + at + m, c->ids + at, sizeof *c->ids * (size_t)(end - at));
    memcpy(c->ids + at, ins, sizeof *c->ids * (size_t)m);
    for (int64_t i = end + m; i < total2; i++)
        c->ids[i] = mask;
    c->base = dc_canvas_gen(c);
    c->P = P2;
    c->fixed = end + m;
    c->grown = true;
    c->total = total2;
    c->nb = total2 / L;
    c->first = c->fixed / L;
    c->b = c->first;
    c->asked = c->b;
    c->pf = c->recompute ? c->first : at / L;
    return 1;
}

static inline void dc_canvas_free(struct dc_canvas *c)
{
    free(c->ids);
    c->ids = NULL;
}

/* The next prompt block's prefill into fwd; false when none is left. */
static inline bool dc_canvas_prefill(struct dc_canvas *c, struct tide_decoder_fwd *fwd)
{
    if (c->pf >= c->first)
        return false;
    dc_blocks_block_fwd(fwd, TIDE_DECODE_PREFILL, c->ids, c->pf++, c->L);
    c->posted = DC_POSTED_PREFILL;
    return true;
}

/* Entering block b: block_begin once. Returns true when it just began. */
static inline bool dc_canvas_enter(struct dc_canvas *c, const struct tide_decoder_host *h)
{
    if (c->in_block)
        return false;
    h->block_begin(h->user, dc_canvas_gen(c), c->base == 0 && c->b == c->first);
    c->in_block = true;
    return true;
}

/* Block b's steps are over: its K/V pass into fwd when another block
 * follows and generation goes on (the last step's K/V predate its
 * commits). Returns true when fwd holds it. */
static inline bool dc_canvas_kv(struct dc_canvas *c, bool stop, struct tide_decoder_fwd *fwd)
{
    if (c->recompute || stop || c->b + 1 >= c->nb)
        return false;
    dc_blocks_block_fwd(fwd, TIDE_DECODE_KV, c->ids, c->b, c->L);
    c->posted = DC_POSTED_KV;
    return true;
}

/* Block b is final with n tokens of output so far: block_end, then the
 * next block. */
static inline void dc_canvas_block_end(struct dc_canvas *c, const struct tide_decoder_host *h,
                                       int64_t n)
{
    h->block_end(h->user, dc_canvas_gen(c), c->ids + c->P, n);
    c->b++;
    c->in_block = false;
}

#endif
