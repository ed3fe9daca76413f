/* What the two decoders (generate.c: llada2, generate_llada.c: llada) share:
 * the seeded RNG, the stop tokens and the output cut. Core-internal. */
#ifndef TIDE_GENERATE_INTERNAL_H
#define TIDE_GENERATE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "generate.h"

/* xoshiro256** seeded through splitmix64 (tests/reference/llada2_ref.py Rng
 * is the same generator, so sampled runs can be checked there). */
struct tide_gen_rng {
    uint64_t s[4];
};

void tide_gen_rng_seed(struct tide_gen_rng *r, uint64_t seed);

/* Uniform in [0, 1), 53 bits. */
double tide_gen_rng_uniform(struct tide_gen_rng *r);

/* Monotonic seconds. */
double tide_gen_now(void);

/* id is EOS or one of [generation] stop_tokens. */
bool tide_gen_is_stop(const struct tide_gen_tokens *t, int32_t id);

/* The first position in [from, to) holding EOS or a stop token, or -1. */
int64_t tide_gen_find_stop(const int32_t *canvas, int64_t from, int64_t to,
                           const struct tide_gen_tokens *t);

/* Tokens of the output: canvas[P, P + G) cut after the first EOS/stop token
 * (which is kept), looking no further than end (the decoded part). */
int64_t tide_gen_output_len(const int32_t *canvas, int64_t P, int64_t G, int64_t end,
                            const struct tide_gen_tokens *t, bool *stopped);

/* Fill out->ids with gen[0..n) (malloc'd) and out->seconds since t0;
 * TIDE_E_NOMEM. */
int tide_gen_finish(struct tide_gen_result *out, const int32_t *gen, int64_t n, double t0);

#endif
