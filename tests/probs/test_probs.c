/* dc_exp_neg and dc_greedy_pick (plugins/decoder-common/probs.h):
 *  - exp within 2 ulp of libm's double exp on [-86, 0], exactly 1 at 0, 0 below -86;
 *  - the pick's id is the first maximum (excluded id skipped), its
 *    probability within 1e-6 of a double-precision softmax;
 *  - the AVX-512 path (when the CPU has it) and the scalar path return the
 *    same bits, on odd lengths, ties, excluded ids and a full vocabulary,
 *    rows of one part and of several (DC_PICK_PART logits each). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "decoder-common/probs.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void test_exp(void)
{
    double worst = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = (float)(-86.0 * i / 2000000.0);
        double want = exp((double)x), got = dc_exp_neg(x);
        double ulp = ldexp(1.0, ilogb(want) - 23);
        double e = fabs(got - want) / ulp;
        worst = e > worst ? e : worst;
    }
    fprintf(stderr, "exp: worst error %.2f ulp on [-86, 0]\n", worst);
    CHECK(worst <= 2.0);
    CHECK(dc_exp_neg(0.0f) == 1.0f);
    CHECK(dc_exp_neg(-86.5f) == 0.0f);
    CHECK(dc_exp_neg(-INFINITY) == 0.0f);
    CHECK(dc_exp_neg(-FLT_MAX) == 0.0f);
}

/* The reference: first maximum, and 1 / sum exp(l - max) in double. */
static void ref_pick(const float *l, int64_t V, int64_t exclude, int32_t *id, double *prob)
{
    int32_t best = -1;
    for (int64_t v = 0; v < V; v++)
        if (v != exclude && (best < 0 || l[v] > l[best]))
            best = (int32_t)v;
    double sum = 0;
    for (int64_t v = 0; v < V; v++)
        if (v != exclude)
            sum += exp((double)l[v] - (double)l[best]);
    *id = best;
    *prob = 1.0 / sum;
}

static void check_row(const float *l, int64_t V, int64_t exclude, const char *what)
{
    int32_t want_id, id_v, id_s;
    double want_p, p_v, p_s;
    ref_pick(l, V, exclude, &want_id, &want_p);
    dc_greedy_pick(l, V, exclude, &id_v, &p_v);
    bool was = dc_probs_force_scalar(true);
    dc_greedy_pick(l, V, exclude, &id_s, &p_s);
    dc_probs_force_scalar(was);
    CHECK_EQ_INT(id_v, want_id);
    CHECK_EQ_INT(id_s, want_id);
    CHECK(memcmp(&p_v, &p_s, sizeof p_v) == 0);
    CHECK_NEAR(p_v / want_p, 1.0, 1e-6);
    if (id_v != want_id || memcmp(&p_v, &p_s, sizeof p_v) || fabs(p_v / want_p - 1) > 1e-6)
        fprintf(stderr, "  %s V=%lld exclude=%lld: id %d/%d want %d, p %.17g/%.17g want %.17g\n",
                what, (long long)V, (long long)exclude, id_v, id_s, want_id, p_v, p_s, want_p);
}

static void test_pick(void)
{
    const int64_t sizes[] = {1,   2,    5,    15,    16,    17,    31,    33,
                             100, 1000, 4097, 16384, 16385, 32769, 157184};
    float *l = malloc(sizeof *l * 157184);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t V = sizes[k];
        for (int rep = 0; rep < 4; rep++) {
            /* Logit scales from flat (prob ~ 1/V) to peaked (prob ~ 1). */
            const double scale = rep == 0 ? 0.01 : rep == 1 ? 3.0 : rep == 2 ? 10.0 : 40.0;
            for (int64_t v = 0; v < V; v++)
                l[v] = (float)((urand() * 2 - 1) * scale);
            check_row(l, V, -1, "random");
            if (V > 1) {
                check_row(l, V, (int64_t)(urand() * (double)V), "random, one excluded");
                /* The maximum excluded: the runner-up wins. */
                int64_t mx = 0;
                for (int64_t v = 1; v < V; v++)
                    mx = l[v] > l[mx] ? v : mx;
                check_row(l, V, mx, "maximum excluded");
                /* The first of a part excluded (parts of DC_PICK_PART). */
                if (V > DC_PICK_PART)
                    check_row(l, V, DC_PICK_PART, "first of the second part excluded");
                /* Ties: the first of equal maxima, wherever they fall in the lanes. */
                l[V - 1] = l[mx] = 50.0f;
                l[V / 2] = 50.0f;
                check_row(l, V, -1, "tie");
            }
        }
    }
    for (int64_t v = 0; v < 157184; v++)
        l[v] = 1.5f;
    check_row(l, 157184, -1, "all equal");
    check_row(l, 157184, 0, "all equal, first excluded");
    /* Large magnitudes: differences beyond exp's range count as 0. */
    for (int64_t v = 0; v < 1000; v++)
        l[v] = (float)(urand() * 2e4 - 1e4);
    check_row(l, 1000, -1, "wide range");
    free(l);
}

int main(void)
{
    TEST_RUN(test_exp);
    TEST_RUN(test_pick);
    TEST_DONE();
}
