/* backend-cuda's weight decoding (plugins/backend-cuda/cuda_qdecode.h),
 * compiled here as host C and checked against the core's reference,
 * tide_qview_row_f32, on matrices quantized with tide_quantize_bf16. The
 * kernels run exactly these functions on the device, so this test covers
 * their arithmetic and indexing on machines without a GPU (label unit).
 *
 *  - every e4m3fn code and every IEEE half decodes as tide_fp8_to_f32 and
 *    tide_f16_to_f32 do, bit for bit (NaN as NaN);
 *  - every element of q8_0, q4_0 and fp8 matrices equals the reference bit
 *    for bit, over edge shapes: one row, rows and columns that are not
 *    multiples of the fp8 block (partial blocks at the bottom and right),
 *    blocks whose width is not a multiple of 32, and all-zero blocks (scale
 *    0 for q8_0 and q4_0, 1 for fp8). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_qdecode.h"
#include "harness.h"
#include "tide/quant.h"
#include "tide/tensor.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double rnd_unit(void) /* [0, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Same value, or both NaN. */
static bool same_f32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return !memcmp(&a, &b, sizeof a);
}

static void test_fp8_codes(void)
{
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        float want = tide_fp8_to_f32((uint8_t)b), got = cuda_q_fp8_to_f32((uint8_t)b);
        if (!same_f32(got, want) && bad++ < 4)
            fprintf(stderr, "  fp8 0x%02x: %.9g, reference %.9g\n", b, (double)got, (double)want);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(signbit(cuda_q_fp8_to_f32(0x80)) && cuda_q_fp8_to_f32(0x80) == 0.0f);
    CHECK(cuda_q_fp8_to_f32(0x7e) == 448.0f && cuda_q_fp8_to_f32(0x01) == 0x1p-9f);
}

static void test_f16_codes(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float want = tide_f16_to_f32((uint16_t)h), got = cuda_q_f16_to_f32((uint16_t)h);
        if (!same_f32(got, want) && bad++ < 4)
            fprintf(stderr, "  f16 0x%04x: %.9g, reference %.9g\n", (unsigned)h, (double)got,
                    (double)want);
    }
    CHECK_EQ_INT(bad, 0);
}

/* A bf16 [rows, cols] matrix: magnitudes from 2^-8 to 2^4 by row, a few
 * outliers 4 times larger, and the block of rows [0, zr) x columns [0, zc)
 * zero. */
static uint16_t *make_src(int64_t rows, int64_t cols, int64_t zr, int64_t zc)
{
    uint16_t *s = malloc(sizeof *s * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double v = (rnd_unit() * 2.0 - 1.0) * ldexp(1.0, (int)(r % 13) - 8);
            if (rnd_unit() < 0.01)
                v *= 4.0;
            if (r < zr && c < zc)
                v = 0.0;
            s[r * cols + c] = tide_f32_to_bf16((float)v);
        }
    return s;
}

/* Quantize a random [rows, cols] matrix in fmt / block and compare every
 * element of cuda_q_weight (and its parts) with tide_qview_row_f32. */
static void check_matrix(int fmt, int br, int bc, int64_t rows, int64_t cols)
{
    const int block[2] = {br, bc};
    int64_t vs[2], ss[2];
    tide_qmat_value_shape(fmt, rows, cols, vs);
    tide_qmat_scale_shape(block, rows, cols, ss);
    const size_t vsz = tide_dtype_size(tide_qfmt_value_dtype(fmt));
    const size_t ssz = tide_dtype_size(tide_qfmt_scale_dtype(fmt));
    uint16_t *src = make_src(rows, cols, rows > 1 ? rows / 2 : 0, cols / 2);
    void *values = malloc(vsz * (size_t)(vs[0] * vs[1])),
         *scales = malloc(ssz * (size_t)(ss[0] * ss[1]));
    CHECK_EQ_INT(tide_quantize_bf16(fmt, block, src, rows, cols, values, scales), 0);
    struct tide_view sv = {.data = scales,
                           .dtype = tide_qfmt_scale_dtype(fmt),
                           .ndim = 2,
                           .nbytes = ssz * (size_t)(ss[0] * ss[1]),
                           .name = "t.weight_scale"};
    sv.shape[0] = ss[0];
    sv.shape[1] = ss[1];
    struct tide_view vv = {.data = values,
                           .dtype = tide_qfmt_value_dtype(fmt),
                           .ndim = 2,
                           .nbytes = vsz * (size_t)(vs[0] * vs[1]),
                           .name = "t.weight"};
    vv.shape[0] = vs[0];
    vv.shape[1] = vs[1];
    struct tide_view q;
    char why[300] = "";
    int rc = tide_qview_make(&vv, &sv, fmt, block, rows, cols, &q, why, sizeof why);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", why);
        free(values);
        free(scales);
        free(src);
        return;
    }
    const struct cuda_qmat m = {.values = values,
                                .scales = scales,
                                .fmt = fmt,
                                .br = br,
                                .bc = bc,
                                .rows = rows,
                                .cols = cols,
                                .scols = ss[1]};
    float *ref = malloc(sizeof *ref * (size_t)cols);
    int bad = 0;
    int64_t nonzero = 0;
    for (int64_t r = 0; r < rows; r++) {
        tide_qview_row_f32(&q, r, ref);
        for (int64_t c = 0; c < cols; c++) {
            const float got = cuda_q_weight(&m, r, c);
            nonzero += got != 0.0f;
            /* value * scale, with the value and scale decoded on their own */
            const float parts = cuda_q_value(&m, r, c) * cuda_q_scale(&m, r, c);
            if ((!same_f32(got, ref[c]) || !same_f32(parts, got)) && bad++ < 4)
                fprintf(stderr,
                        "  %s [%lld,%lld] block [%d,%d]: W[%lld][%lld] = %.9g, reference "
                        "%.9g\n",
                        tide_qfmt_name(fmt), (long long)rows, (long long)cols, br, bc, (long long)r,
                        (long long)c, (double)got, (double)ref[c]);
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(nonzero > rows * cols / 4); /* the matrix is not trivially zero */
    free(ref);
    free(values);
    free(scales);
    free(src);
}

static void test_q8_0(void)
{
    static const int64_t shapes[][2] = {{1, 32}, {3, 64}, {37, 96}, {64, 160}, {5, 2048}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_matrix(TIDE_QFMT_Q8_0, 1, TIDE_QK, shapes[i][0], shapes[i][1]);
}

static void test_q4_0(void)
{
    static const int64_t shapes[][2] = {{1, 32}, {3, 64}, {37, 96}, {64, 160}, {5, 2048}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_matrix(TIDE_QFMT_Q4_0, 1, TIDE_QK, shapes[i][0], shapes[i][1]);
}

static void test_fp8(void)
{
    /* 128 x 128 blocks: whole, partial at the bottom (rows % 128), at the
     * right (cols % 128), both; smaller and odd blocks. */
    static const int64_t shapes[][4] = {
        {128, 128, 1, 32},    {128, 128, 128, 128}, {128, 128, 100, 96},  {128, 128, 129, 160},
        {128, 128, 257, 288}, {128, 128, 40, 512},  {64, 32, 65, 96},     {3, 48, 10, 96},
        {1, 128, 7, 256},     {128, 1, 5, 64},      {256, 256, 300, 320},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_matrix(TIDE_QFMT_FP8, (int)shapes[i][0], (int)shapes[i][1], shapes[i][2],
                     shapes[i][3]);
}

int main(void)
{
    TEST_RUN(test_fp8_codes);
    TEST_RUN(test_f16_codes);
    TEST_RUN(test_q8_0);
    TEST_RUN(test_q4_0);
    TEST_RUN(test_fp8);
    TEST_DONE();
}
