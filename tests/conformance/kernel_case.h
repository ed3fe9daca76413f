/* One case of the row-kernel tests (test_raw_kernel.c, test_own_kernel.c,
 * test_amx_kernel.c): m random bf16 rows x[t] of k values and two weight
 * segments of n[0] and n[1] rows (the gate/up call shape), each at an odd
 * element offset as tensors in a safetensors file may sit, with output rows
 * yp[s][t]. Include after bf16_rand.h and dnnl_bk.h. */
#ifndef TIDE_TEST_KERNEL_CASE_H
#define TIDE_TEST_KERNEL_CASE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The f32 value of a bf16 (exact). */
static inline float kcase_f32(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

struct kcase {
    int64_t m, k, n[2];
    uint16_t *xbuf, *wbuf[2];
    const uint16_t **xr;  /* [m] token rows */
    const uint16_t *w[2]; /* segment s's first weight row */
    float *y[2], **yp[2]; /* outputs, yp[s][t] = row t of segment s */
    struct dnnl_bk_raw_seg segs[2];
};

static inline void kcase_init(struct kcase *c, int64_t m, int64_t n0, int64_t n1, int64_t k)
{
    *c = (struct kcase){.m = m, .k = k, .n = {n0, n1}};
    c->xbuf = malloc(sizeof(uint16_t) * (size_t)(m * (k + 1) + 1));
    c->xr = malloc(sizeof *c->xr * (size_t)m);
    for (int64_t t = 0; t < m; t++) {
        c->xr[t] = c->xbuf + 1 + t * (k + 1);
        for (int64_t i = 0; i < k; i++)
            ((uint16_t *)c->xr[t])[i] = rand_bf16();
    }
    for (int s = 0; s < 2; s++) {
        c->wbuf[s] = malloc(sizeof(uint16_t) * (size_t)(c->n[s] * k + 1));
        for (int64_t i = 0; i < c->n[s] * k; i++)
            c->wbuf[s][1 + i] = rand_bf16();
        c->w[s] = c->wbuf[s] + 1;
        c->y[s] = malloc(sizeof(float) * (size_t)(m * c->n[s]));
        c->yp[s] = malloc(sizeof *c->yp[s] * (size_t)m);
        for (int64_t t = 0; t < m; t++)
            c->yp[s][t] = c->y[s] + t * c->n[s];
        c->segs[s] = (struct dnnl_bk_raw_seg){c->w[s], c->n[s], c->yp[s]};
    }
}

static inline void kcase_free(struct kcase *c)
{
    free(c->xbuf);
    free(c->xr);
    for (int s = 0; s < 2; s++) {
        free(c->wbuf[s]);
        free(c->y[s]);
        free(c->yp[s]);
    }
}

/* A kernel run on one token row x[0] against both segments (k values). */
typedef void (*kcase_one_fn)(const uint16_t *const *x, const struct dnnl_bk_raw_seg *segs,
                             int64_t k);

/* Each token of c alone, through `one`, against its rows of the batch:
 * the number of tokens that differ (the first three reported). */
static inline int64_t kcase_alone(const struct kcase *c, kcase_one_fn one)
{
    int64_t bad = 0;
    float *y1[2] = {malloc(sizeof(float) * (size_t)c->n[0]),
                    malloc(sizeof(float) * (size_t)c->n[1])};
    for (int64_t t = 0; t < c->m; t++) {
        const struct dnnl_bk_raw_seg segs[2] = {{c->w[0], c->n[0], &y1[0]},
                                                {c->w[1], c->n[1], &y1[1]}};
        one(&c->xr[t], segs, c->k);
        for (int s = 0; s < 2; s++)
            if (memcmp(y1[s], c->yp[s][t], sizeof(float) * (size_t)c->n[s]) && bad++ < 3)
                fprintf(stderr, "FAIL m %lld k %lld: token %lld alone differs from the batch\n",
                        (long long)c->m, (long long)c->k, (long long)t);
    }
    free(y1[0]);
    free(y1[1]);
    return bad;
}

/* Report a case with `bad` differing outputs (counted in *failures) and free it. */
static inline void kcase_end(struct kcase *c, const char *what, int threads, int64_t bad,
                             int *failures)
{
    if (bad) {
        fprintf(stderr, "FAIL %sm %lld rows %lld+%lld k %lld threads %d: %lld outputs differ\n",
                what, (long long)c->m, (long long)c->n[0], (long long)c->n[1], (long long)c->k,
                threads, (long long)bad);
        (*failures)++;
    }
    kcase_free(c);
}

#endif
