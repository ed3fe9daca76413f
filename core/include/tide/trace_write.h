/* Routing-trace writer (format: tide/trace.h, docs/trace-format.md). The
 * writer functions return TIDE_OK or the first write error (TIDE_E_IO).
 * Writers write PATH.tmp and rename on close, so nothing is half-written.
 * The runtime never includes this header: it emits trace events to a
 * struct tide_trace_sink, and tide_trace_writer_sink() connects the two. */
#ifndef TIDE_TRACE_WRITE_H
#define TIDE_TRACE_WRITE_H

#include "tide/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "tide/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tide_trace_writer;

/* Create PATH (refusing an existing file unless append or overwrite) or
 * append to it (its header must match h: same shape). Writes go to
 * PATH.tmp until tide_trace_writer_close(w, true). */
TIDE_API int tide_trace_writer_open(const char *path, bool append, bool overwrite,
                                    const struct tide_trace_header *h,
                                    struct tide_trace_writer **out);
/* A new prompt: its id (free-form, e.g. the index in a prompt file) and length. */
TIDE_API int tide_trace_prompt(struct tide_trace_writer *w, uint32_t prompt_id,
                               uint32_t prompt_len);
/* The vector of the prompt just written (tide_trace_prompt), vec[dim].
 * Appending to a version-1 file writes nothing (that format has no such
 * record). */
TIDE_API int tide_trace_prompt_vector(struct tide_trace_writer *w, const float *vec, uint32_t dim);
/* Version 3 (batched decoding): a prompt joins a running batch, and the
 * prompts the next forward holds. On a file of an older version (appending)
 * they are refused (TIDE_E_UNSUPPORTED, logged). */
TIDE_API int tide_trace_join(struct tide_trace_writer *w, uint32_t prompt_id, uint32_t prompt_len);
TIDE_API int tide_trace_batch(struct tide_trace_writer *w, uint32_t n, const uint32_t *prompt_ids);
/* Version 4 (DIP): prompt prompt_id grew by `inserted` tokens at `at`, to
 * prompt_len. On a file of an older version (appending) it is refused
 * (TIDE_E_UNSUPPORTED, logged). */
TIDE_API int tide_trace_context(struct tide_trace_writer *w, uint32_t prompt_id, uint32_t at,
                                uint32_t inserted, uint32_t prompt_len);
/* Block `block` (0 = first generated) starts. */
TIDE_API int tide_trace_block(struct tide_trace_writer *w, int32_t block, bool first_generated);
/* Denoising step `step` of the current block starts. */
TIDE_API int tide_trace_step(struct tide_trace_writer *w, int32_t step);
/* The routing of one MoE layer in one forward: n tokens, top_k ids each. */
TIDE_API int tide_trace_route(struct tide_trace_writer *w, enum tide_trace_phase phase,
                              uint32_t layer, uint32_t n, const int32_t *ids);
/* Finish: keep renames PATH.tmp to PATH; !keep removes PATH.tmp (interrupt,
 * error). Frees w. Returns the first write error, if any. */
TIDE_API int tide_trace_writer_close(struct tide_trace_writer *w, bool keep);

/* A sink whose events are written to w (w must outlive its use). */
TIDE_API struct tide_trace_sink tide_trace_writer_sink(struct tide_trace_writer *w);

#ifdef __cplusplus
}
#endif
#endif
