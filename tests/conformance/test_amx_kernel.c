/* backend-cpu-onednn's AMX bf16 kernel (rows_amx.c): batch invariance and
 * fidelity, for every token count, row count, row length and thread count.
 *
 *  - each token computed alone gives the bits it gets in the batch, and two
 *    threads give the bits of one (batch invariance: the KV path equals
 *    recompute);
 *  - every output is within the bound of an f32 sum of k terms around a
 *    double reference (fidelity).
 *
 * The kernel's order: one f32 accumulator per output (a tile element) that
 * TDPBF16PS advances over the chunks of 32 in increasing order, from zero.
 * Inside a chunk the instruction adds its 32 products in a way the SDM's
 * pseudo-code (products added one by one) does not describe: on a Xeon with
 * AMX (2026-12) neither that, nor pairs first, nor the exact sum of a chunk
 * rounded once matched more than half of the outputs. So the test pins the
 * invariances and the bound, not the bits of a plain restatement. Rows of k
 * not a multiple of 32 run rows_avx512bf16.c, whose own test checks its order.
 *
 * Exit 77 when the CPU lacks AMX-BF16 or Linux refuses the tile state. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_rand.h"
#include "dnnl_bk.h"
#include "kernel_case.h"

/* The most tokens of a case. */
#define TEST_MAX_M 300

static int failures;

/* Double reference and the bound of an f32 sum of k terms. */
static double ref_exact(const uint16_t *x, const uint16_t *w, int64_t k, double *bound)
{
    double s = 0.0, a = 0.0;
    for (int64_t i = 0; i < k; i++) {
        double p = (double)kcase_f32(x[i]) * (double)kcase_f32(w[i]);
        s += p;
        a += fabs(p);
    }
    *bound = (double)k * ldexp(1.0, -24) * a + 1e-30;
    return s;
}

/* One token on one thread. */
static void amx_one(const uint16_t *const *x, const struct dnnl_bk_raw_seg *segs, int64_t k)
{
    void *work = malloc(dnnl_bk_rows_amx_work(1, k, 1));
    dnnl_bk_rows_amx(x, 1, segs, 2, k, 1, work);
    free(work);
}

/* m tokens against two segments of n0 and n1 rows of length k (the gate/up
 * call shape, kernel_case.h), on `threads` threads. */
static void check_case(int64_t m, int64_t n0, int64_t n1, int64_t k, int threads)
{
    struct kcase c;
    kcase_init(&c, m, n0, n1, k);
    void *work = malloc(dnnl_bk_rows_amx_work(m, k, threads));
    dnnl_bk_rows_amx(c.xr, m, c.segs, 2, k, threads, work);
    free(work);
    int64_t bad = 0;
    for (int s = 0; s < 2; s++)
        for (int64_t t = 0; t < m; t++)
            for (int64_t r = 0; r < c.n[s]; r++) {
                const float got = c.yp[s][t][r];
                double bound, want = ref_exact(c.xr[t], c.w[s] + r * k, k, &bound);
                if (fabs((double)got - want) > bound && bad++ < 3)
                    fprintf(stderr,
                            "FAIL m %lld k %lld: segment %d token %lld row %lld: %.9g, "
                            "double %.9g, bound %.3g\n",
                            (long long)m, (long long)k, s, (long long)t, (long long)r, got, want,
                            bound);
            }
    /* Each token alone, on one thread, against its row of the batch. */
    bad += kcase_alone(&c, amx_one);
    kcase_end(&c, "", threads, bad, &failures);
}

int main(void)
{
    if (!dnnl_bk_amx_available()) {
        printf("skipped: this CPU has no AMX-BF16, or Linux refused the tile state\n");
        return 77;
    }
    /* k: the expert shapes (H = 2048, I = 512), one chunk, and lengths that
     * are not whole chunks (the raw kernel's). Rows: short tiles, a whole
     * block, one tile beside a block, one row. */
    const int64_t ks[] = {2048, 512, 32, 96, 1000, 7};
    const int64_t rows[][2] = {{37, 5}, {64, 64}, {48, 16}, {1, 17}};
    int cases = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (int64_t m = 1; m <= 18; m++)
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
                for (int threads = 1; threads <= 2; threads++) {
                    if (ks[ki] >= 1000 && m > 6 && m % 4)
                        continue;
                    check_case(m, rows[ri][0], rows[ri][1], ks[ki], threads);
                    cases++;
                }
    /* Larger token counts: a busy expert, a prefill, odd tails of the
     * token tiles and of the pairs of them. */
    const int64_t big[] = {31, 32, 33, 47, 64, 65, 100, 129, 256, TEST_MAX_M};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        check_case(big[i], 40, 9, 2048, 2);
        check_case(big[i], 33, 3, 512, 1);
        cases += 2;
    }
    if (failures) {
        fprintf(stderr, "%d of %d cases differ\n", failures, cases);
        return 1;
    }
    printf("ok: %d cases: each token alone equals the batch, every output within the f32 bound "
           "of a double sum\n",
           cases);
    return 0;
}
