/* backend-cpu-onednn's raw bf16 kernel (rows_avx512bf16.c) gives exactly the bits
 * its summation order promises, for every token count, row count, row length
 * and thread count.
 *
 * The order depends on k alone, never on the token count, so a token's
 * result does not depend on how many tokens share the call (batch
 * invariance: the KV path equals recompute). A faster kernel may change the
 * order, as long as it keeps one. The reference below restates the order
 * plainly, one output at a time, with the same instruction (VDPBF16PS) as
 * the only arithmetic on bf16 pairs:
 *
 *  - the row of k values is cut into chunks of 32 (the last one padded with
 *    zeros);
 *  - one sum over all chunks in increasing order;
 *  - the 16 lanes of the vector are then added as (s0 + s1) + (s2 + s3), s_j
 *    = (l[4j] + l[4j+2]) + (l[4j+1] + l[4j+3]).
 *
 * And each token computed alone gives the bits it gets in the batch.
 *
 * Exit 77 when the CPU lacks AVX512-BF16. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_rand.h"
#include "dnnl_bk.h"
#include "kernel_case.h"

/* The most tokens of a case. */
#define DNNL_BK_TEST_MAX_M 130

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

static int failures;

static TARGET __m512 chunk_dot(__m512 acc, const uint16_t *x, const uint16_t *w, int64_t k,
                               int64_t c)
{
    int64_t k0 = 32 * c, left = k - k0;
    __mmask32 m = left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1ull << left) - 1);
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_maskz_loadu_epi16(m, x + k0),
                            (__m512bh)_mm512_maskz_loadu_epi16(m, w + k0));
}

static TARGET float ref_dot(const uint16_t *x, const uint16_t *w, int64_t k)
{
    const int64_t chunks = (k + 31) / 32;
    __m512 v = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; c++)
        v = chunk_dot(v, x, w, k, c);
    float l[16], s[4];
    _mm512_storeu_ps(l, v);
    for (int j = 0; j < 4; j++)
        s[j] = (l[4 * j] + l[4 * j + 2]) + (l[4 * j + 1] + l[4 * j + 3]);
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* One token on one thread. */
static void raw_one(const uint16_t *const *x, const struct dnnl_bk_raw_seg *segs, int64_t k)
{
    dnnl_bk_rows_avx512bf16(x, 1, segs, 2, k, 1, NULL);
}

/* m tokens against two segments of n0 and n1 rows of length k (the gate/up
 * call shape), on `threads` threads. The x rows and weights sit at odd
 * element offsets, as tensors in a safetensors file may. */
static void check_case(int64_t m, int64_t n0, int64_t n1, int64_t k, int threads)
{
    struct kcase c;
    kcase_init(&c, m, n0, n1, k);
    const uint16_t **xr = c.xr;
    float ***yp = c.yp;
    const int64_t *n = c.n;
    dnnl_bk_rows_avx512bf16(xr, m, c.segs, 2, k, threads, NULL);
    int64_t bad = 0;
    for (int s = 0; s < 2; s++)
        for (int64_t t = 0; t < m; t++) {
            for (int64_t r = 0; r < n[s]; r++) {
                float want = ref_dot(xr[t], c.w[s] + r * k, k);
                float got = yp[s][t][r];
                if (memcmp(&want, &got, sizeof want)) {
                    if (bad++ < 3)
                        fprintf(stderr,
                                "FAIL m %lld k %lld threads %d: segment %d token %lld row %lld: "
                                "%.9g, want %.9g\n",
                                (long long)m, (long long)k, threads, s, (long long)t, (long long)r,
                                got, want);
                }
            }
        }
    /* Each token alone, on one thread, against its row of the batch. */
    bad += kcase_alone(&c, raw_one);
    kcase_end(&c, "", threads, bad, &failures);
}

int main(void)
{
    if (!(dnnl_bk_cpu_flags(NULL, 0) & DNNL_BK_CPU_AVX512BF16)) {
        printf("skipped: this CPU has no AVX512-BF16\n");
        return 77;
    }
    /* k: the expert shapes (gate/up H = 2048, down I = 512), rows order's
     * bound, a tail after whole groups, a partial chunk, tiny rows. */
    const int64_t ks[] = {2048, 512, 1024, 1056, 1100, 1148, 1000, 96, 7};
    /* Row counts not multiples of any tile, and a whole row block. */
    const int64_t rows[][2] = {{37, 5}, {64, 64}, {1, 17}};
    int cases = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (int64_t m = 1; m <= 12; m++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
                for (int threads = 1; threads <= 2; threads++) {
                    if (ks[ki] < 1024 && ri == 1 && threads == 2)
                        continue;
                    check_case(m, rows[ri][0], rows[ri][1], ks[ki], threads);
                    cases++;
                }
    /* Larger token counts, as the batch of a busy expert (the kernel takes
     * every count since it alone computes inplace experts). */
    const int64_t big[] = {16, 31, 64, 65, 100, DNNL_BK_TEST_MAX_M};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        check_case(big[i], 40, 9, 2048, 2);
        check_case(big[i], 33, 3, 512, 1);
        cases += 2;
    }
    if (failures) {
        fprintf(stderr, "%d of %d cases differ from the kernel's stated order\n", failures, cases);
        return 1;
    }
    printf("ok: %d cases bit-identical to the stated order\n", cases);
    return 0;
}
