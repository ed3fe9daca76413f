/* backend-cpu-onednn's own bf16 kernel (rows_avx2.c, the matmuls of every
 * CPU where oneDNN has no bf16 matmul) gives exactly the bits its summation
 * order promises, for every row count, weight-row count, row length, thread
 * count, and in both its AVX2 and plain C code.
 *
 * The order, restated plainly for one output y = x . w of length k, from
 * products of bf16 values widened to f32 and fused multiply-adds (fmaf):
 *  - 8 lanes: lane l sums x[i] w[i] for i = l, l + 8, ... below
 *    K8 = 8 floor(k / 8), in increasing i, starting from 0;
 *  - r = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7));
 *  - then r = fmaf(x[i], w[i], r) for i = K8 .. k-1.
 * It depends on k alone, so a row's result cannot depend on how many rows
 * share the call: that is checked directly too, by computing each row alone
 * and inside every batch size.
 *
 * The AVX2 half is skipped (not failed) on a CPU without AVX2 and FMA; the
 * plain C half always runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_rand.h"
#include "dnnl_bk.h"
#include "kernel_case.h"

static int failures;

static float ref_dot(const uint16_t *x, const uint16_t *w, int64_t k)
{
    float l[8] = {0};
    const int64_t k8 = k / 8 * 8;
    for (int64_t i = 0; i < k8; i++)
        l[i % 8] = fmaf(kcase_f32(x[i]), kcase_f32(w[i]), l[i % 8]);
    float r = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for (int64_t i = k8; i < k; i++)
        r = fmaf(kcase_f32(x[i]), kcase_f32(w[i]), r);
    return r;
}

/* m rows against two segments of n0 and n1 weight rows of length k, at odd
 * element offsets (as tensors in a safetensors file may sit), on `threads`
 * threads, AVX2 or plain C. Each output must equal ref_dot, and so the
 * output of the same row computed alone (m = 1). */
static void check_case(int64_t m, int64_t n0, int64_t n1, int64_t k, int threads, bool avx2)
{
    struct kcase c;
    kcase_init(&c, m, n0, n1, k);
    const uint16_t **xr = c.xr;
    float ***yp = c.yp;
    const int64_t *n = c.n;
    dnnl_bk_rows_fn *rows = avx2 ? dnnl_bk_rows_avx2 : dnnl_bk_rows_c;
    rows(xr, m, c.segs, 2, k, threads, NULL);
    int64_t bad = 0;
    for (int s = 0; s < 2; s++)
        for (int64_t t = 0; t < m; t++)
            for (int64_t r = 0; r < n[s]; r++) {
                const float want = ref_dot(xr[t], c.w[s] + r * k, k), got = yp[s][t][r];
                if (memcmp(&want, &got, sizeof want) && bad++ < 3)
                    fprintf(stderr,
                            "FAIL %s m %lld k %lld threads %d: segment %d row %lld col %lld: "
                            "%.9g, want %.9g\n",
                            avx2 ? "avx2" : "plain", (long long)m, (long long)k, threads, s,
                            (long long)t, (long long)r, got, want);
            }
    /* Each row alone, through the kernel: the same bits as in the batch. */
    float *alone = malloc(sizeof(float) * (size_t)(n0 > n1 ? n0 : n1));
    for (int64_t t = 0; t < m; t++) {
        const struct dnnl_bk_raw_seg one = {c.w[0], n0, &alone};
        rows(&xr[t], 1, &one, 1, k, 1, NULL);
        if (memcmp(alone, yp[0][t], sizeof(float) * (size_t)n0) && bad++ < 3)
            fprintf(stderr, "FAIL %s m %lld k %lld: row %lld alone differs from the batch\n",
                    avx2 ? "avx2" : "plain", (long long)m, (long long)k, (long long)t);
    }
    free(alone);
    kcase_end(&c, avx2 ? "avx2 " : "plain ", threads, bad, &failures);
}

int main(void)
{
    const bool has_avx2 = dnnl_bk_cpu_flags(NULL, 0) & DNNL_BK_CPU_AVX2;
    /* k: expert shapes (2048, 512), a tail of every length 1..7, tiny rows. */
    const int64_t ks[] = {2048, 512, 1000, 1001, 1003, 1007, 96, 9, 7, 1};
    /* Weight-row counts not multiples of the tile or of a thread's block. */
    const int64_t rows[][2] = {{37, 5}, {1, 17}, {32, 33}};
    /* Row counts: every remainder of the 4-row tile, and batch sizes. */
    const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 31, 64, 100};
    int cases = 0;
    for (int pass = 0; pass < 2; pass++) {
        const bool avx2 = pass == 0;
        if (avx2 && !has_avx2) {
            printf("AVX2 code skipped: this CPU lacks AVX2 or FMA\n");
            continue;
        }
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                    const int threads = 1 + (int)((ki + mi + ri) % 2);
                    if (ms[mi] > 16 && ks[ki] >= 1000 && ri != 1)
                        continue; /* keep the plain C half quick */
                    check_case(ms[mi], rows[ri][0], rows[ri][1], ks[ki], threads, avx2);
                    cases++;
                }
    }
    if (failures) {
        fprintf(stderr, "%d of %d cases differ from the kernel's stated order\n", failures, cases);
        return 1;
    }
    printf("ok: %d cases bit-identical to the stated order%s\n", cases,
           has_avx2 ? " (AVX2 and plain C)" : " (plain C)");
    return 0;
}
