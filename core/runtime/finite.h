/* Non-finite numbers (NaN, Inf) in weights and logits. Core-internal.
 *
 * Two checks, so that a NaN never silently becomes tokens:
 *  - at load, tide_weights_check scans every floating-point tensor of a
 *    checkpoint and names each tensor that holds a NaN or an Inf (cost: one
 *    pass over the weights at memory bandwidth, see docs/hardening.md);
 *  - at every denoising step, tide_logits_check refuses logits that hold a
 *    NaN or an Inf (from the weights, or from overflow in the forward pass),
 *    naming the block, step, row and vocabulary entry. */
#ifndef TIDE_FINITE_H
#define TIDE_FINITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/safetensors.h"

/* Scan every BF16, F16, F32 and F8_E4M3 tensor of st, on up to 8 threads (one per
 * CPU). Each tensor that holds a NaN or an Inf is logged (its file, name,
 * counts and the first bad element; at most 10 tensors, then a count).
 * Returns TIDE_OK, TIDE_E_FORMAT or TIDE_E_NOMEM. *bytes_scanned (may be
 * NULL) gets the bytes read. Thread-safe (st is immutable). */
int tide_st_check_finite(const struct tide_st *st, uint64_t *bytes_scanned);

/* tide_st_check_finite over the checkpoint directory DIR, when DIR holds a
 * safetensors checkpoint (model.safetensors or its index); other layouts are
 * skipped. Logs the time it took at debug level.
 * Skipped when DIR/.tide-weights-verified lists exactly the checkpoint's files
 * with their current sizes and modification times (a clean scan was recorded).
 * remember: after a clean scan, write that marker into DIR (only then is
 * anything written there; a failure to write is a warning).
 * Returns TIDE_OK, TIDE_E_FORMAT (non-finite weights), or tide_st_open's status. */
int tide_weights_check(const char *dir, bool remember);

/* Check the logits rows of one step (block and step as the decoder numbers
 * them): rows[i] holds vocab values for canvas position pos[i]. Returns TIDE_OK, or
 * TIDE_E_FORMAT after logging the first non-finite value and how many there
 * are. */
int tide_logits_check_rows(const float *const *rows, const int32_t *pos, int n, int vocab,
                           int64_t block, int step);

#endif
