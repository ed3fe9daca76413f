/* The own bf16 row kernel in plain C (table entries matmul/expert = c): the
 * reference twin of rows_avx2.c, in the summation order that file states,
 * so the two give the same bits; it serves CPUs without AVX2. Also the row
 * blocks every row kernel hands to its threads (dnnl_bk_seg_block). */
#include <math.h>

#include "dnnl_bk.h"

/* Weight rows per block handed to a thread. */
#define RC_RB 16

static inline float rc_bf16(uint16_t v)
{
    union {
        uint32_t u;
        float f;
    } c = {.u = (uint32_t)v << 16};
    return c.f;
}

/* One output in the stated order: 8 lanes over k below K8 = 8 floor(k/8),
 * the lanes added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), then
 * the tail. */
static float rc_dot(const uint16_t *x, const uint16_t *w, int64_t k)
{
    float l[8] = {0};
    const int64_t k8 = k & ~(int64_t)7;
    for (int64_t i = 0; i < k8; i += 8)
        for (int j = 0; j < 8; j++)
            l[j] = fmaf(rc_bf16(x[i + j]), rc_bf16(w[i + j]), l[j]);
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    float r = (a0 + a2) + (a1 + a3);
    for (int64_t i = k8; i < k; i++)
        r = fmaf(rc_bf16(x[i]), rc_bf16(w[i]), r);
    return r;
}

const struct dnnl_bk_raw_seg *dnnl_bk_seg_block(const struct dnnl_bk_raw_seg *segs, int64_t i,
                                                int64_t rows, int64_t *r0, int64_t *r1)
{
    int j = 0;
    while (i >= (segs[j].n + rows - 1) / rows)
        i -= (segs[j++].n + rows - 1) / rows;
    *r0 = i * rows;
    *r1 = *r0 + rows < segs[j].n ? *r0 + rows : segs[j].n;
    return &segs[j];
}

struct rc_job {
    const uint16_t *const *x;
    int64_t m;
    const struct dnnl_bk_raw_seg *segs;
    int64_t k;
};

/* Blocks [b0, b1) of RC_RB rows, numbered through the segments in order. */
static void rc_blocks(void *c, int64_t b0, int64_t b1)
{
    const struct rc_job *j = c;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0, r1;
        const struct dnnl_bk_raw_seg *s = dnnl_bk_seg_block(j->segs, b, RC_RB, &r0, &r1);
        for (int64_t r = r0; r < r1; r++)
            for (int64_t t = 0; t < j->m; t++)
                s->y[t][r] = rc_dot(j->x[t], s->w + r * j->k, j->k);
    }
}

void dnnl_bk_rows_c(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *segs,
                    int n_segs, int64_t k, int threads, void *work)
{
    (void)work;
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].n + RC_RB - 1) / RC_RB;
    const struct rc_job j = {x, m, segs, k};
    if (threads <= 1)
        rc_blocks((void *)&j, 0, blocks);
    else
        dnnl_bk_par_for(threads, blocks, rc_blocks, (void *)&j);
}
