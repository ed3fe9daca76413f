/* dc_sample_rows (plugins/decoder-common/sample.h), a step's rows spread
 * over threads, against dc_sample called row by row in row order: the same
 * ids, the same confidence bits and the same generator state afterwards, for
 * greedy, plain and sampled settings (temperature, top-k, top-p), 1-40 rows,
 * 1-4 threads; plain picks also on rows of several parts (dc_greedy_part),
 * which dc_sample_rows spreads over the threads part by part. A plant that draws the uniforms in
 * another order (or draws none for greedy rows, or one too many) fails here. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "decoder-common/sample.h"

#define MAXV 40000
#define MAXR 40

static void one(const struct dc_sampler *sp, int V, int n, int threads, const float *const *rows,
                const char *what)
{
    struct dc_rng a, b;
    dc_rng_seed(&a, 1234);
    dc_rng_seed(&b, 1234);
    struct dc_scratch sc;
    CHECK(dc_scratch_init(&sc, sp, V) == 0);
    int32_t want[MAXR], got[MAXR];
    double wconf[MAXR], gconf[MAXR];
    for (int j = 0; j < n; j++)
        want[j] = dc_sample(rows[j], V, sp, &a, &sc, &wconf[j]);
    dc_scratch_free(&sc);
    omp_set_num_threads(threads);
    struct dc_rows rs;
    CHECK(dc_rows_init(&rs, sp, V, MAXR) == 0);
    dc_sample_rows(&rs, sp, rows, n, V, &b);
    memcpy(got, rs.id, sizeof *got * (size_t)n);
    memcpy(gconf, rs.conf, sizeof *gconf * (size_t)n);
    dc_rows_free(&rs);
    int bad = 0;
    for (int j = 0; j < n; j++)
        bad += want[j] != got[j] || memcmp(&wconf[j], &gconf[j], sizeof wconf[j]) != 0;
    /* The generators must stand at the same place: the next draws agree. */
    const bool same_rng = dc_rng_uniform(&a) == dc_rng_uniform(&b);
    if (bad || !same_rng)
        fprintf(stderr, "FAIL %s: V %d, %d rows, %d threads: %d rows differ%s\n", what, V, n,
                threads, bad, same_rng ? "" : ", generator state differs");
    CHECK(!bad);
    CHECK(same_rng);
}

static void test_rows(void)
{
    float *data = malloc(sizeof *data * (size_t)MAXV * MAXR);
    const float *rows[MAXR];
    struct dc_rng fill;
    dc_rng_seed(&fill, 99);
    for (int j = 0; j < MAXR; j++) {
        for (int v = 0; v < MAXV; v++)
            data[(size_t)j * MAXV + v] = (float)(8.0 * dc_rng_uniform(&fill) - 4.0);
        rows[j] = data + (size_t)j * MAXV;
    }
    const struct dc_sampler cases[] = {
        {.greedy = true, .plain = true, .skip = -1},
        {.greedy = true, .plain = true, .skip = 7},
        {.temperature = 0.0, .greedy = true, .top_k = 20, .top_p = 1.0, .skip = 3},
        {.temperature = 1.0, .top_p = 1.0, .skip = -1},
        {.temperature = 0.7, .top_k = 50, .top_p = 0.9, .skip = 5},
        {.temperature = 1.3, .top_p = 0.5, .skip = -1},
    };
    const char *names[] = {"plain",   "plain+skip",          "greedy top-k",
                           "sampled", "sampled top-k top-p", "sampled top-p"};
    const int ns[] = {1, 2, 3, 16, 17, 40};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            for (int t = 1; t <= 4; t++)
                one(&cases[c], 1000, ns[i], t, rows, names[c]);
    /* Three parts per row (16384, 16384, 7232); the excluded id in the
     * second. */
    const struct dc_sampler plain[] = {{.greedy = true, .plain = true, .skip = -1},
                                       {.greedy = true, .plain = true, .skip = 16390}};
    for (size_t c = 0; c < 2; c++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            for (int t = 1; t <= 4; t++)
                one(&plain[c], MAXV, ns[i], t, rows, c ? "plain+skip, 3 parts" : "plain, 3 parts");
    free(data);
}

int main(void)
{
    TEST_RUN(test_rows);
    TEST_DONE();
}
