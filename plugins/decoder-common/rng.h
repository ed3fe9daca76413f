/* decoder-common: the seeded random numbers of every decoder.
 *
 * xoshiro256** seeded through splitmix64, [generation] seed. The numpy
 * references (tests/reference/llada2_ref.py Rng) implement the same
 * generator, so sampled runs are checked decision for decision there. */
#ifndef DECODER_COMMON_RNG_H
#define DECODER_COMMON_RNG_H

#include <stdint.h>

struct dc_rng {
    uint64_t s[4];
};

static inline uint64_t dc_rng_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static inline void dc_rng_seed(struct dc_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

/* Uniform in [0, 1), 53 bits. */
static inline double dc_rng_uniform(struct dc_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = dc_rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = dc_rng_rotl(s[3], 45);
    return (double)(out >> 11) * (1.0 / 9007199254740992.0);
}

#endif
