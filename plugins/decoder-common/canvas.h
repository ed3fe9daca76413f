/* decoder-common: the special tokens, the stop rule and the output cut that
 * every decoder shares.
 *
 * A decoder stops at its model's EOS and, as a departure that is off by
 * default, at the ids of [generation] stop_tokens. The output is the
 * canvas after the prompt, at most gen_length tokens, cut after the first
 * EOS or stop token (which is kept), looking no further than the decoded
 * part of the canvas. */
#ifndef DECODER_COMMON_CANVAS_H
#define DECODER_COMMON_CANVAS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tide/decoder.h"

/* Most stop tokens kept. */
#define DC_MAX_STOP 16

struct dc_tokens {
    int32_t mask, eos;
    int n_stop;
    int32_t stop[DC_MAX_STOP]; /* [n_stop] */
};

/* Copy the tokens of the decoder's args (at most DC_MAX_STOP stop tokens;
 * the engine never passes more). */
static inline void dc_tokens_from(const struct tide_decoder_args *a, struct dc_tokens *t)
{
    memset(t, 0, sizeof *t);
    t->mask = a->mask;
    t->eos = a->eos;
    for (int i = 0; i < a->n_stop && i < DC_MAX_STOP; i++)
        t->stop[t->n_stop++] = a->stop[i];
}

/* id is EOS or one of the stop tokens. */
static inline bool dc_is_stop(const struct dc_tokens *t, int32_t id)
{
    if (id == t->eos)
        return true;
    for (int i = 0; i < t->n_stop; i++)
        if (id == t->stop[i])
            return true;
    return false;
}

/* The first position in [from, to) holding EOS or a stop token, or -1. */
static inline int64_t dc_find_stop(const int32_t *canvas, int64_t from, int64_t to,
                                   const struct dc_tokens *t)
{
    for (int64_t i = from; i < to; i++)
        if (dc_is_stop(t, canvas[i]))
            return i;
    return -1;
}

/* Tokens of the output: canvas[P, P + G) cut after the first EOS/stop token
 * (which is kept), looking no further than end (the decoded part). */
static inline int64_t dc_output_len(const int32_t *canvas, int64_t P, int64_t G, int64_t end,
                                    const struct dc_tokens *t, bool *stopped)
{
    const int64_t hi = P + G < end ? P + G : end;
    const int64_t e = dc_find_stop(canvas, P, hi, t);
    *stopped = e >= 0;
    return e >= 0 ? e + 1 - P : hi - P;
}

/* finish()'s result: the n output tokens canvas[P, P + n) and the counters. */
static inline void dc_result_set(struct tide_decoder_result *out, const int32_t *canvas, int64_t P,
                                 int64_t n, bool stopped, int64_t steps, int blocks, int64_t edits)
{
    memcpy(out->ids, canvas + P, sizeof *out->ids * (size_t)n);
    out->n = n;
    out->steps = steps;
    out->blocks = blocks;
    out->stopped = stopped;
    out->edits = edits;
}

#endif
