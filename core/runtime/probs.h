/* Turning a row of logits into the greedy choice and its probability, fast.
 * Core-internal (the generator and bench/forward use it).
 *
 * tide_greedy_pick makes one pass over the row: per lane of 16 it keeps the
 * running maximum, the first index where it was reached, and the sum of
 * exp(l - max) rescaled whenever the maximum grows (the "online softmax").
 * exp is tide_exp_neg below, a float polynomial written with separate
 * multiplies and adds; sums are in double. The AVX-512 path and the scalar
 * path (any CPU) perform the same operations in the same order per lane, so
 * they return identical bits. */
#ifndef TIDE_PROBS_H
#define TIDE_PROBS_H

#include <stdbool.h>
#include <stdint.h>

/* exp(x) for x <= 0 in float: within 2 ulp of exp for x >= -86, and 0 below
 * (where exp(x) < 5e-38). Bit-identical in tide_greedy_pick's vector code. */
float tide_exp_neg(float x);

/* The greedy choice over logits[0..V): *id = the index of the largest value
 * (the lowest index among equal ones), *prob = its softmax probability
 * 1 / sum_v exp(logits[v] - max), relative error below 1e-6. `exclude` is an
 * index left out of both (-1: none). The logits must be finite (the
 * generator checks them first); V >= 1 and at least one index not excluded. */
void tide_greedy_pick(const float *logits, int64_t V, int64_t exclude, int32_t *id, double *prob);

/* Force the scalar path (tests compare the two); returns the previous setting. */
bool tide_probs_force_scalar(bool on);

#endif
