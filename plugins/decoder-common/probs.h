/* decoder-common: the greedy choice over a row of logits and its
 * probability, fast. Header-only; every decoder and bench/forward use it.
 *
 * dc_greedy_pick cuts the row into parts of DC_PICK_PART logits and makes
 * one pass over each: per lane of 16 it keeps the running maximum, the
 * first index where it was reached, and the sum of exp(l - max) rescaled
 * whenever the maximum grows (the "online softmax"); the parts' lanes are
 * then merged in order (dc_greedy_merge), and the lanes into the result.
 * The parts are fixed by V alone, so dc_sample_rows can spread them over
 * threads (one row of 157184 logits is 10 parts) with the same bits.
 * exp is dc_exp_neg below, a float polynomial written with separate
 * multiplies and adds; sums are in double. The AVX-512 path, the AVX2 path
 * (16 lanes as two halves of 8) and the scalar path (any CPU) perform the
 * same operations in the same order per lane, so they return identical bits
 * (tests/probs).
 *
 * dc_exp_neg(x): exp(x) for x <= 0 in float: within 2 ulp of exp for
 * x >= -86, and 0 below (where exp(x) < 5e-38).
 * dc_greedy_pick(logits, V, exclude, id, prob): *id = the index of the
 * largest value (the lowest index among equal ones), *prob = its softmax
 * probability 1 / sum_v exp(logits[v] - max), relative error below 1e-6.
 * `exclude` is an index left out of both (-1: none). The logits must be
 * finite (the engine checks them); V >= 1 and at least one index not
 * excluded.
 * dc_greedy_parts(V), dc_greedy_part(logits, V, exclude, part, st) and
 * dc_greedy_finish(parts, n, id, prob): the same pick a part at a time.
 * dc_probs_force_scalar(on): force the scalar path in this translation unit
 * (tests compare the two); returns the previous setting. */
#ifndef DECODER_COMMON_PROBS_H
#define DECODER_COMMON_PROBS_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PROBS_X86 1
#endif

#define PROBS_LANES 16

/* Logits per part of a row: a fixed count, so that a row's bits do not
 * depend on how its parts are spread over threads (dc_sample_rows). */
#define DC_PICK_PART 16384

/* Below this, exp(x) is taken as 0: 2^n stays a normal float for n >= -124. */
#define PROBS_EXP_MIN (-86.0f)

/* Cephes expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-7 polynomial. */
#define PROBS_LOG2E  1.44269504088896341f
#define PROBS_LN2_HI 0.693359375f
#define PROBS_LN2_LO (-2.12194440e-4f)
#define PROBS_P0     1.9875691500e-4f
#define PROBS_P1     1.3981999507e-3f
#define PROBS_P2     8.3334519073e-3f
#define PROBS_P3     4.1665795894e-2f
#define PROBS_P4     1.6666665459e-1f
#define PROBS_P5     5.0000001201e-1f

static bool dc_probs_scalar_forced;

static inline bool dc_probs_force_scalar(bool on)
{
    bool was = dc_probs_scalar_forced;
    dc_probs_scalar_forced = on;
    return was;
}

static inline float dc_exp_neg(float x)
{
    if (!(x >= PROBS_EXP_MIN))
        return 0.0f;
    /* Each step is one rounded operation, as in the vector code (C11 without
     * extensions does not contract a*b+c into an FMA). */
    float n = rintf(x * PROBS_LOG2E);
    float r = x - n * PROBS_LN2_HI;
    r = r - n * PROBS_LN2_LO;
    float y = PROBS_P0;
    y = y * r + PROBS_P1;
    y = y * r + PROBS_P2;
    y = y * r + PROBS_P3;
    y = y * r + PROBS_P4;
    y = y * r + PROBS_P5;
    y = y * (r * r) + r + 1.0f;
    uint32_t bits;
    memcpy(&bits, &y, sizeof bits);
    bits += (uint32_t)((int32_t)n * (1 << 23));
    memcpy(&y, &bits, sizeof y);
    return y;
}

/* Per-lane state of the scan over a part of a row. */
struct dc_pick_part {
    float m[PROBS_LANES];   /* running maximum */
    int32_t i[PROBS_LANES]; /* first index where it was reached */
    double s[PROBS_LANES];  /* sum of exp(l - m) */
};

/* Lanes to result: the maximum over lanes, the lowest index reaching it, and
 * the sum of every lane's s rescaled to it, in lane order. */
static inline void probs_finish(const struct dc_pick_part *st, int32_t *id, double *prob)
{
    float mx = st->m[0];
    for (int l = 1; l < PROBS_LANES; l++)
        mx = st->m[l] > mx ? st->m[l] : mx;
    int32_t best = INT32_MAX;
    double sum = 0.0;
    for (int l = 0; l < PROBS_LANES; l++) {
        if (st->m[l] == mx && st->i[l] < best)
            best = st->i[l];
        sum = sum + st->s[l] * (double)dc_exp_neg(st->m[l] - mx);
    }
    *id = best;
    *prob = 1.0 / sum;
}

/* One element into one lane. */
static inline void probs_step(struct dc_pick_part *st, int l, float x, int32_t idx)
{
    if (x > st->m[l]) {
        st->s[l] = st->s[l] * (double)dc_exp_neg(st->m[l] - x) + 1.0;
        st->m[l] = x;
        st->i[l] = idx;
    } else {
        st->s[l] = st->s[l] + (double)dc_exp_neg(x - st->m[l]);
    }
}

static inline void probs_init(struct dc_pick_part *st)
{
    for (int l = 0; l < PROBS_LANES; l++) {
        /* -FLT_MAX, not -inf: x - m stays a number for x = -inf (an excluded
         * or padding lane), and exp of it is 0. */
        st->m[l] = -FLT_MAX;
        st->i[l] = INT32_MAX;
        st->s[l] = 0.0;
    }
}

/* Logits [v0, v1) into st (v0 a multiple of PROBS_LANES). */
static inline void probs_scalar(const float *x, int64_t v0, int64_t v1, int64_t exclude,
                                struct dc_pick_part *st)
{
    probs_init(st);
    for (int64_t b = v0; b < v1; b += PROBS_LANES)
        for (int l = 0; l < PROBS_LANES; l++) {
            const int64_t v = b + l;
            probs_step(st, l, v < v1 && v != exclude ? x[v] : -INFINITY, (int32_t)v);
        }
}

#ifdef PROBS_X86
#define PROBS_TARGET __attribute__((target("avx512f,avx512dq")))

/* Logits ahead of the scan to prefetch. */
#define PROBS_AHEAD 1024

PROBS_TARGET static inline __m512 probs_exp16(__m512 x)
{
    const __mmask16 ok = _mm512_cmp_ps_mask(x, _mm512_set1_ps(PROBS_EXP_MIN), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(PROBS_EXP_MIN)); /* keep the masked lanes finite */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(PROBS_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(PROBS_LN2_HI)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(PROBS_LN2_LO)));
    __m512 y = _mm512_set1_ps(PROBS_P0);
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(PROBS_P1));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(PROBS_P2));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(PROBS_P3));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(PROBS_P4));
    y = _mm512_add_ps(_mm512_mul_ps(y, r), _mm512_set1_ps(PROBS_P5));
    y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(y, _mm512_mul_ps(r, r)), r),
                      _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    y = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), e));
    return _mm512_maskz_mov_ps(ok, y);
}

/* Lanes 8..15 of a as doubles. */
PROBS_TARGET static inline __m512d probs_hi_pd(__m512 a)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

/* One vector of 16 logits at v0 into the lanes: s += exp(x - m) where x does
 * not exceed the lane's maximum, else s = s * exp(m - x) + 1 and m = x. */
PROBS_TARGET static inline void probs_vec(__m512 xv, int64_t v0, __m512 *m, __m512i *best,
                                          __m512d s[2])
{
    const __mmask16 up = _mm512_cmp_ps_mask(xv, *m, _CMP_GT_OQ);
    const __m512 e = probs_exp16(_mm512_sub_ps(xv, *m));
    __m512d keep[2] = {_mm512_add_pd(s[0], _mm512_cvtps_pd(_mm512_castps512_ps256(e))),
                       _mm512_add_pd(s[1], probs_hi_pd(e))};
    if (__builtin_expect(up != 0, 0)) { /* rare after the first vectors */
        const __m512 g = probs_exp16(_mm512_sub_ps(*m, xv));
        const __m512d one = _mm512_set1_pd(1.0);
        const __m512d grow[2] = {
            _mm512_add_pd(_mm512_mul_pd(s[0], _mm512_cvtps_pd(_mm512_castps512_ps256(g))), one),
            _mm512_add_pd(_mm512_mul_pd(s[1], probs_hi_pd(g)), one)};
        keep[0] = _mm512_mask_mov_pd(keep[0], (__mmask8)up, grow[0]);
        keep[1] = _mm512_mask_mov_pd(keep[1], (__mmask8)(up >> 8), grow[1]);
        *m = _mm512_mask_mov_ps(*m, up, xv);
        const __m512i lane =
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        *best = _mm512_mask_mov_epi32(*best, up,
                                      _mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)v0)));
    }
    s[0] = keep[0];
    s[1] = keep[1];
}

PROBS_TARGET static inline void probs_avx512(const float *x, int64_t v0, int64_t v1,
                                             int64_t exclude, struct dc_pick_part *st)
{
    __m512 m = _mm512_set1_ps(-FLT_MAX);
    __m512i best = _mm512_set1_epi32(INT32_MAX);
    __m512d s[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    /* The vector holding `exclude` and the partial last one are loaded with
     * those lanes at -inf (which adds exp(-inf) = 0 and never wins). */
    const int64_t ex0 = exclude >= 0 ? exclude / PROBS_LANES * PROBS_LANES : -1;
    const int64_t full = v0 + (v1 - v0) / PROBS_LANES * PROBS_LANES;
    for (int64_t b = v0; b < full; b += PROBS_LANES) {
        __m512 xv = _mm512_loadu_ps(x + b);
        /* 4 KiB ahead: the hardware prefetchers left these loads waiting (a
         * forward's picks 1.47 ms without, 0.80 with: 16.5 rows of 157184
         * logits that the output layer had just written, 2 threads, Xeon VM;
         * 2 or 8 KiB ahead did the same). A prefetch never faults. */
        _mm_prefetch((const char *)(x + b + PROBS_AHEAD), _MM_HINT_T0);
        if (__builtin_expect(b == ex0, 0))
            xv = _mm512_mask_mov_ps(xv, (__mmask16)(1u << (exclude - b)), ninf);
        probs_vec(xv, b, &m, &best, s);
    }
    if (full < v1) {
        __mmask16 in = (__mmask16)((1u << (v1 - full)) - 1u);
        if (ex0 == full)
            in &= (__mmask16) ~(1u << (exclude - full));
        probs_vec(_mm512_mask_loadu_ps(ninf, in, x + full), full, &m, &best, s);
    }
    _mm512_storeu_ps(st->m, m);
    _mm512_storeu_si512(st->i, best);
    _mm512_storeu_pd(st->s, s[0]);
    _mm512_storeu_pd(st->s + 8, s[1]);
}

/* The same scan on AVX2: the 16 lanes as two halves of 8 (lanes 0-7, 8-15),
 * the same operations per lane in the same order (no FMA: the target leaves
 * it out, and ISO C does not contract), so the bits equal the scalar path's. */
#define PROBS_TARGET2 __attribute__((target("avx2")))

PROBS_TARGET2 static inline __m256 probs_exp8(__m256 x)
{
    const __m256 ok = _mm256_cmp_ps(x, _mm256_set1_ps(PROBS_EXP_MIN), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(PROBS_EXP_MIN));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(PROBS_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(PROBS_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(PROBS_LN2_LO)));
    __m256 y = _mm256_set1_ps(PROBS_P0);
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(PROBS_P1));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(PROBS_P2));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(PROBS_P3));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(PROBS_P4));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(PROBS_P5));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_mul_ps(r, r)), r),
                      _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), e));
    return _mm256_and_ps(y, ok);
}

/* 8 lanes (one half) of probs_vec: s[0], s[1] hold lanes 0-3 and 4-7 of it. */
PROBS_TARGET2 static inline void probs_vec8(__m256 xv, int64_t v0, __m256 *m, __m256i *best,
                                            __m256d s[2])
{
    const __m256 up = _mm256_cmp_ps(xv, *m, _CMP_GT_OQ);
    const __m256 e = probs_exp8(_mm256_sub_ps(xv, *m));
    __m256d keep[2] = {_mm256_add_pd(s[0], _mm256_cvtps_pd(_mm256_castps256_ps128(e))),
                       _mm256_add_pd(s[1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)))};
    if (__builtin_expect(_mm256_movemask_ps(up) != 0, 0)) {
        const __m256 g = probs_exp8(_mm256_sub_ps(*m, xv));
        const __m256d one = _mm256_set1_pd(1.0);
        const __m256d grow[2] = {
            _mm256_add_pd(_mm256_mul_pd(s[0], _mm256_cvtps_pd(_mm256_castps256_ps128(g))), one),
            _mm256_add_pd(_mm256_mul_pd(s[1], _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1))), one)};
        const __m256i upi = _mm256_castps_si256(up);
        keep[0] = _mm256_blendv_pd(
            keep[0], grow[0],
            _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(upi))));
        keep[1] = _mm256_blendv_pd(
            keep[1], grow[1],
            _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(upi, 1))));
        *m = _mm256_blendv_ps(*m, xv, up);
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        *best =
            _mm256_blendv_epi8(*best, _mm256_add_epi32(lane, _mm256_set1_epi32((int32_t)v0)), upi);
    }
    s[0] = keep[0];
    s[1] = keep[1];
}

/* 16 logits at x (n of them valid, lane `ex` excluded, -1: none) as two halves,
 * the invalid and excluded lanes -inf. */
PROBS_TARGET2 static inline void probs_load16(const float *x, int n, int ex, __m256 v[2])
{
    if (n == 16 && ex < 0) {
        v[0] = _mm256_loadu_ps(x);
        v[1] = _mm256_loadu_ps(x + 8);
        return;
    }
    float t[16];
    for (int l = 0; l < 16; l++)
        t[l] = l < n && l != ex ? x[l] : -INFINITY;
    v[0] = _mm256_loadu_ps(t);
    v[1] = _mm256_loadu_ps(t + 8);
}

PROBS_TARGET2 static inline void probs_avx2(const float *x, int64_t v0, int64_t v1, int64_t exclude,
                                            struct dc_pick_part *st)
{
    __m256 m[2] = {_mm256_set1_ps(-FLT_MAX), _mm256_set1_ps(-FLT_MAX)};
    __m256i best[2] = {_mm256_set1_epi32(INT32_MAX), _mm256_set1_epi32(INT32_MAX)};
    __m256d s[2][2] = {{_mm256_setzero_pd(), _mm256_setzero_pd()},
                       {_mm256_setzero_pd(), _mm256_setzero_pd()}};
    const int64_t ex0 = exclude >= 0 ? exclude / PROBS_LANES * PROBS_LANES : -1;
    for (int64_t b = v0; b < v1; b += PROBS_LANES) {
        __m256 xv[2];
        _mm_prefetch((const char *)(x + b + PROBS_AHEAD), _MM_HINT_T0);
        probs_load16(x + b, v1 - b < PROBS_LANES ? (int)(v1 - b) : PROBS_LANES,
                     b == ex0 ? (int)(exclude - b) : -1, xv);
        probs_vec8(xv[0], b, &m[0], &best[0], s[0]);
        probs_vec8(xv[1], b + 8, &m[1], &best[1], s[1]);
    }
    _mm256_storeu_ps(st->m, m[0]);
    _mm256_storeu_ps(st->m + 8, m[1]);
    _mm256_storeu_si256((__m256i *)st->i, best[0]);
    _mm256_storeu_si256((__m256i *)(st->i + 8), best[1]);
    _mm256_storeu_pd(st->s, s[0][0]);
    _mm256_storeu_pd(st->s + 4, s[0][1]);
    _mm256_storeu_pd(st->s + 8, s[1][0]);
    _mm256_storeu_pd(st->s + 12, s[1][1]);
}

static inline bool probs_have_avx2(void)
{
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2");
    }
    return have;
}

static inline bool probs_have_avx512(void)
{
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    }
    return have;
}
#endif

/* Parts of a row of V logits: dc_greedy_parts(V) of DC_PICK_PART each (the
 * last shorter). */
static inline int dc_greedy_parts(int64_t V)
{
    return (int)((V + DC_PICK_PART - 1) / DC_PICK_PART);
}

/* Part `part` of the row into *st, on the widest path this CPU has. */
static inline void dc_greedy_part(const float *logits, int64_t V, int64_t exclude, int part,
                                  struct dc_pick_part *st)
{
    const int64_t v0 = (int64_t)part * DC_PICK_PART,
                  v1 = V - v0 < DC_PICK_PART ? V : v0 + DC_PICK_PART;
#ifdef PROBS_X86
    if (!dc_probs_scalar_forced && probs_have_avx512()) {
        probs_avx512(logits, v0, v1, exclude, st);
        return;
    }
    if (!dc_probs_scalar_forced && probs_have_avx2()) {
        probs_avx2(logits, v0, v1, exclude, st);
        return;
    }
#endif
    probs_scalar(logits, v0, v1, exclude, st);
}

/* Part b into the parts before it, acc: per lane the larger maximum (acc's
 * on ties: its indices are lower) and both sums rescaled to it. */
static inline void dc_greedy_merge(struct dc_pick_part *acc, const struct dc_pick_part *b)
{
    for (int l = 0; l < PROBS_LANES; l++) {
        const float ma = acc->m[l], mb = b->m[l], mx = mb > ma ? mb : ma;
        acc->s[l] = acc->s[l] * (double)dc_exp_neg(ma - mx) + b->s[l] * (double)dc_exp_neg(mb - mx);
        if (mb > ma) {
            acc->m[l] = mb;
            acc->i[l] = b->i[l];
        }
    }
}

/* The row's pick from its n parts, merged in order. */
static inline void dc_greedy_finish(const struct dc_pick_part *parts, int n, int32_t *id,
                                    double *prob)
{
    struct dc_pick_part acc = parts[0];
    for (int p = 1; p < n; p++)
        dc_greedy_merge(&acc, &parts[p]);
    probs_finish(&acc, id, prob);
}

static inline void dc_greedy_pick(const float *logits, int64_t V, int64_t exclude, int32_t *id,
                                  double *prob)
{
    struct dc_pick_part acc, next;
    dc_greedy_part(logits, V, exclude, 0, &acc);
    for (int p = 1; p < dc_greedy_parts(V); p++) {
        dc_greedy_part(logits, V, exclude, p, &next);
        dc_greedy_merge(&acc, &next);
    }
    probs_finish(&acc, id, prob);
}

#endif
