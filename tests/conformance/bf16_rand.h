/* Reproducible bf16 inputs for the kernel tests (test_raw_kernel.c,
 * test_own_kernel.c), without libc's rand. */
#ifndef TIDE_TEST_BF16_RAND_H
#define TIDE_TEST_BF16_RAND_H

#include <stdint.h>
#include <string.h>

/* xorshift64*. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* A bf16 in [-2, 2) with a random mantissa; one in 64 is an exact zero. */
static uint16_t rand_bf16(void)
{
    uint64_t r = rng();
    if ((r & 63) == 0)
        return 0;
    float f = (float)((double)(r >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

#endif
