/* Unit tests of the block-quantized formats (tide/quant.h): the fp8 and f16
 * codecs, sizes, the quantizers' error bounds and the view checks. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tide/quant.h"

/* Every e4m3fn code decodes to the value the OCP FP8 spec gives and encodes
 * back to itself (NaN and -0 aside). */
static void test_fp8_codec(void)
{
    for (int b = 0; b < 256; b++) {
        const int e = (b >> 3) & 15, m = b & 7;
        float v = tide_fp8_to_f32((uint8_t)b);
        if (e == 15 && m == 7) {
            CHECK(isnan(v));
            continue;
        }
        double want = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
        if (b & 0x80)
            want = -want;
        CHECK_EQ_INT(v == (float)want, 1);
        if (b != 0x80)
            CHECK_EQ_INT(tide_f32_to_fp8(v), b);
    }
    CHECK_NEAR(tide_fp8_to_f32(0x7e), 448.0, 0);
    CHECK_EQ_INT(tide_f32_to_fp8(1e6f), 0x7e); /* saturates */
    CHECK_EQ_INT(tide_f32_to_fp8(-1e6f), 0xfe);
    CHECK_EQ_INT(tide_f32_to_fp8(NAN), 0x7f);
    /* halfway between 1 and 1.125 rounds to even (1); just above rounds up */
    CHECK_EQ_INT(tide_f32_to_fp8(1.0625f), tide_f32_to_fp8(1.0f));
    CHECK_EQ_INT(tide_f32_to_fp8(1.07f), tide_f32_to_fp8(1.125f));
    /* smallest subnormal 2^-9; half of it rounds to even (zero) */
    CHECK_EQ_INT(tide_f32_to_fp8(0x1p-9f), 1);
    CHECK_EQ_INT(tide_f32_to_fp8(0x1p-10f), 0);
}

static void test_f16(void)
{
    const float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 0x1p-14f, 0x1p-24f, 3.14159f, 1e-3f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float back = tide_f16_to_f32(tide_f32_to_f16(vals[i]));
        CHECK(fabsf(back - vals[i]) <= fabsf(vals[i]) * 0x1p-11f);
    }
    CHECK_EQ_INT(tide_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(tide_f32_to_f16(1e9f), 0x7c00);
    CHECK_EQ_INT(tide_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
}

static void test_sizes(void)
{
    int b[2];
    tide_qfmt_default_block(TIDE_QFMT_Q8_0, b);
    CHECK_EQ_INT(tide_qmat_bytes(TIDE_QFMT_Q8_0, b, 512, 2048), 512 * 2048 + 512 * 64 * 2);
    tide_qfmt_default_block(TIDE_QFMT_Q4_0, b);
    CHECK_EQ_INT(tide_qmat_bytes(TIDE_QFMT_Q4_0, b, 512, 2048), 512 * 1024 + 512 * 64 * 2);
    tide_qfmt_default_block(TIDE_QFMT_FP8, b);
    CHECK_EQ_INT(tide_qmat_bytes(TIDE_QFMT_FP8, b, 512, 2048), 512 * 2048 + 4 * 16 * 4);
    CHECK_EQ_INT(tide_qmat_bytes(TIDE_QFMT_FP8, b, 200, 2048), 200 * 2048 + 2 * 16 * 4);
    CHECK_EQ_INT(tide_qexpert_bytes(TIDE_QFMT_NONE, b, 2048, 512), 3ull * 2048 * 512 * 2);
    int f = -1;
    CHECK(tide_qfmt_parse("q4", &f) == 0 && f == TIDE_QFMT_Q4_0);
    CHECK(tide_qfmt_parse("fp8", &f) == 0 && f == TIDE_QFMT_FP8);
    CHECK(tide_qfmt_parse("int4", &f) < 0);
    char why[200];
    int q[2] = {1, 32};
    CHECK(tide_qfmt_fits(TIDE_QFMT_Q8_0, q, 4, 48, why, sizeof why) < 0);
    CHECK_CONTAINS(why, "multiple of 32");
    int bad[2] = {1, 16};
    CHECK(tide_qfmt_fits(TIDE_QFMT_Q4_0, bad, 4, 64, why, sizeof why) < 0);
}

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f - 0.5f) * 2.0f;
}

/* Quantize a random matrix, rebuild it through a view, and bound the error
 * per block by the format's step. */
static void check_roundtrip(int fmt, const int block[2], int64_t rows, int64_t cols)
{
    uint16_t *src = malloc(sizeof *src * (size_t)(rows * cols));
    uint32_t seed = 12345u + (uint32_t)fmt;
    for (int64_t i = 0; i < rows * cols; i++)
        src[i] = tide_f32_to_bf16(frand(&seed) * (1.0f + (float)(i % 7)));
    int64_t vs[2], ss[2];
    tide_qmat_value_shape(fmt, rows, cols, vs);
    tide_qmat_scale_shape(block, rows, cols, ss);
    void *vals = malloc((size_t)(vs[0] * vs[1]));
    void *scales = malloc((size_t)(ss[0] * ss[1]) * 4);
    CHECK_EQ_INT(tide_quantize_bf16(fmt, block, src, rows, cols, vals, scales), 0);
    struct tide_view v = {.data = vals,
                          .dtype = tide_qfmt_value_dtype(fmt),
                          .ndim = 2,
                          .shape = {vs[0], vs[1]},
                          .nbytes = (size_t)(vs[0] * vs[1]),
                          .name = "m.weight"};
    struct tide_view s = {.data = scales,
                          .dtype = tide_qfmt_scale_dtype(fmt),
                          .ndim = 2,
                          .shape = {ss[0], ss[1]},
                          .nbytes =
                              (size_t)(ss[0] * ss[1]) * tide_dtype_size(tide_qfmt_scale_dtype(fmt)),
                          .name = "m.weight_scale"};
    struct tide_view qv;
    char why[300] = "";
    CHECK_EQ_INT(tide_qview_make(&v, &s, fmt, block, rows, cols, &qv, why, sizeof why), 0);
    float *row = malloc(sizeof *row * (size_t)cols);
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        tide_qview_row_f32(&qv, r, row);
        /* the largest magnitude of the row's block, as the step's unit */
        for (int64_t c = 0; c < cols; c++) {
            const int64_t c0 = c / block[1] * block[1], r0 = r / block[0] * block[0];
            float amax = 0;
            for (int64_t rr = r0; rr < r0 + block[0] && rr < rows; rr++)
                for (int64_t cc = c0; cc < c0 + block[1] && cc < cols; cc++)
                    amax = fmaxf(amax, fabsf(tide_bf16_to_f32(src[rr * cols + cc])));
            double err = fabs(row[c] - tide_bf16_to_f32(src[r * cols + c])) / amax;
            if (err > worst)
                worst = err;
        }
    }
    /* q8_0: half a step of amax/127 (+ f16 scale rounding); q4_0: GGML's
     * clamp can cost a whole step of amax/8 at the opposite extreme; fp8:
     * half an ulp of a 3-bit mantissa, 1/16 relative. */
    double bound = fmt == TIDE_QFMT_Q8_0   ? 0.5 / 127 + 1e-3
                   : fmt == TIDE_QFMT_Q4_0 ? 1.0 / 8 + 1e-3
                                           : 1.0 / 16 + 1e-3;
    if (!(worst <= bound))
        fprintf(stderr, "%s [%lld,%lld]: worst error %.4g of the block's max, bound %.4g\n",
                tide_qfmt_name(fmt), (long long)rows, (long long)cols, worst, bound);
    CHECK(worst <= bound);
    CHECK(worst > 0); /* it did quantize */

    /* the checks name the tensor at fault */
    struct tide_view bad_s = s;
    bad_s.shape[1] += 1;
    qv.scale = &bad_s;
    CHECK(tide_qview_check(&qv, fmt, block, rows, cols, why, sizeof why) < 0);
    CHECK_CONTAINS(why, "m.weight_scale");
    qv.scale = &s;
    CHECK(tide_qview_check(&qv, fmt, block, rows + 1, cols, why, sizeof why) < 0);
    CHECK_CONTAINS(why, "m.weight");
    int other = fmt == TIDE_QFMT_Q8_0 ? TIDE_QFMT_FP8 : TIDE_QFMT_Q8_0;
    CHECK(tide_qview_check(&qv, other, block, rows, cols, why, sizeof why) < 0);
    CHECK_CONTAINS(why, "expected");
    struct tide_view wrong = v;
    wrong.dtype = TIDE_DTYPE_BF16;
    CHECK(tide_qview_make(&wrong, &s, fmt, block, rows, cols, &qv, why, sizeof why) < 0);
    CHECK_CONTAINS(why, "m.weight");
    free(row);
    free(src);
    free(vals);
    free(scales);
}

static void test_roundtrip(void)
{
    int b[2];
    tide_qfmt_default_block(TIDE_QFMT_Q8_0, b);
    check_roundtrip(TIDE_QFMT_Q8_0, b, 7, 96);
    tide_qfmt_default_block(TIDE_QFMT_Q4_0, b);
    check_roundtrip(TIDE_QFMT_Q4_0, b, 5, 64);
    tide_qfmt_default_block(TIDE_QFMT_FP8, b);
    check_roundtrip(TIDE_QFMT_FP8, b, 130, 160); /* partial blocks at both edges */
    const int small[2] = {16, 32};
    check_roundtrip(TIDE_QFMT_FP8, small, 40, 96);
}

/* q4_0's nibble order is GGML's: byte j of a block holds values j (low) and
 * j + 16 (high). */
static void test_q4_order(void)
{
    uint16_t src[32];
    for (int j = 0; j < 32; j++)
        src[j] = tide_f32_to_bf16(j < 16 ? -8.0f : 1.0f); /* scale 1, low -8, high +1 */
    uint8_t vals[16];
    uint16_t sc[1];
    const int b[2] = {1, 32};
    CHECK_EQ_INT(tide_quantize_bf16(TIDE_QFMT_Q4_0, b, src, 1, 32, vals, sc), 0);
    CHECK_NEAR(tide_f16_to_f32(sc[0]), 1.0, 0);
    for (int j = 0; j < 16; j++)
        CHECK_EQ_INT(vals[j], 0 | (9 << 4));
}

/* The quantizers never write a NaN code: finite inputs at the extremes of
 * bf16 (its largest value, subnormals, zeros of both signs) give finite fp8
 * codes and scales, and a NaN or an infinity is refused (-2) in every
 * format. */
static void test_no_nan(void)
{
    enum { R = 4, C = 64 };
    const uint16_t extremes[] = {0x7f7f, 0xff7f, 0x0001, 0x8001, 0x0000, 0x8000, 0x007f, 0x3f80};
    uint16_t src[R * C];
    for (int i = 0; i < R * C; i++)
        src[i] = extremes[(i * 7 + i / C) % 8];
    for (int i = 0; i < C; i++) /* a block of subnormals only */
        src[i] = (uint16_t)(1 + i % 127) | (i & 1 ? 0x8000 : 0);
    uint8_t vals[R * C];
    float sc[R * C];
    const int blocks[3][2] = {{1, 32}, {2, 32}, {128, 128}};
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(tide_quantize_bf16(TIDE_QFMT_FP8, blocks[k], src, R, C, vals, sc), 0);
        for (int i = 0; i < R * C; i++)
            CHECK((vals[i] & 0x7f) != 0x7f);
        int64_t ss[2];
        tide_qmat_scale_shape(blocks[k], R, C, ss);
        for (int64_t i = 0; i < ss[0] * ss[1]; i++)
            CHECK(isfinite(sc[i]) && sc[i] > 0);
    }
    const uint16_t bad[] = {0x7fc0, 0xffc0, 0x7f80, 0xff80, 0x7f81};
    for (int fmt = TIDE_QFMT_Q8_0; fmt < TIDE_QFMT_COUNT; fmt++) {
        int b[2];
        tide_qfmt_default_block(fmt, b);
        for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
            uint16_t one[R * C];
            memcpy(one, src, sizeof one);
            one[R * C - 3] = bad[j];
            CHECK_EQ_INT(tide_quantize_bf16(fmt, b, one, R, C, vals, sc), -2);
        }
    }
}

int main(void)
{
    TEST_RUN(test_fp8_codec);
    TEST_RUN(test_f16);
    TEST_RUN(test_sizes);
    TEST_RUN(test_roundtrip);
    TEST_RUN(test_q4_order);
    TEST_RUN(test_no_nan);
    TEST_DONE();
}
