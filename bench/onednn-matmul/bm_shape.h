/* Shape arguments of the oneDNN benchmarks: a name from the benchmark's
 * table or "N,K". Header-only, included once by each. */
#ifndef TIDE_BENCH_BM_SHAPE_H
#define TIDE_BENCH_BM_SHAPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct bm_shape {
    const char *name;
    int64_t n, k; /* output columns, inner dimension */
};

/* Sets *n and *k from text: a name of table[0..count) or "N,K" with both
 * positive. false (and *n, *k unchanged) when it is neither. */
static inline bool bm_shape_parse(const char *text, const struct bm_shape *table, size_t count,
                                  int64_t *n, int64_t *k)
{
    for (size_t i = 0; i < count; i++)
        if (!strcmp(text, table[i].name)) {
            *n = table[i].n, *k = table[i].k;
            return true;
        }
    long long nn, kk;
    if (sscanf(text, "%lld,%lld", &nn, &kk) == 2 && nn > 0 && kk > 0) {
        *n = nn, *k = kk;
        return true;
    }
    return false;
}

#endif
