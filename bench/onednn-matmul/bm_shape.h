/* What the oneDNN benchmarks' command lines share: the options every one
 * takes, and the shape, a name from the benchmark's table or "N,K".
 * Header-only, included once by each. */
#ifndef TIDE_BENCH_BM_SHAPE_H
#define TIDE_BENCH_BM_SHAPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The options every benchmark takes, --threads N, --reps R, --rows LIST
 * and --shape S, each with a value v (NULL when none follows): true when a
 * is one of them and v was taken, false when it is not or lacks its value. */
static inline bool bm_common_arg(const char *a, const char *v, int *threads, int *reps,
                                 char rows[256], char shape[64])
{
    if (!v)
        return false;
    if (!strcmp(a, "--threads"))
        *threads = atoi(v);
    else if (!strcmp(a, "--reps"))
        *reps = atoi(v);
    else if (!strcmp(a, "--rows"))
        snprintf(rows, 256, "%s", v);
    else if (!strcmp(a, "--shape"))
        snprintf(shape, 64, "%s", v);
    else
        return false;
    return true;
}

#endif
