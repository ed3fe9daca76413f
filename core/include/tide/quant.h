/* Block-quantized weight formats of routed experts (docs/quantization.md).
 *
 * A quantized matrix W [rows, cols] is stored as values and scales, two
 * tensors side by side in the checkpoint:
 *   q8_0  <name>.weight I8 [rows, cols], <name>.weight_scale F16
 *         [rows, cols/32]: W[r][c] = q[r][c] * s[r][c/32] (GGML's q8_0, one
 *         scale per 32 values of a row);
 *   q4_0  <name>.weight U8 [rows, cols/2], <name>.weight_scale F16
 *         [rows, cols/32]: block b of row r is bytes 16b .. 16b+15, byte j
 *         holding column 32b+j in its low nibble and 32b+j+16 in its high
 *         one; W = (nibble - 8) * s (GGML's q4_0);
 *   fp8   <name>.weight F8_E4M3 [rows, cols], <name>.weight_scale_inv F32
 *         [ceil(rows/br), ceil(cols/bc)]: W[r][c] = f8[r][c] * s[r/br][c/bc],
 *         as published FP8 checkpoints store it (config.json
 *         quantization_config: quant_method "fp8", weight_block_size
 *         [br, bc], usually [128, 128]). Despite its name the scale is a
 *         multiplier.
 * A struct tide_view of such a matrix has qfmt set, shape [rows, cols]
 * (logical), the values' dtype and bytes, and its scales in `scale`. */
#ifndef TIDE_QUANT_H
#define TIDE_QUANT_H

#include "tide/api.h"

#include <stddef.h>
#include <stdint.h>

#include "tide/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tide_qfmt {
    TIDE_QFMT_NONE = 0, /* bf16, not quantized */
    TIDE_QFMT_Q8_0 = 1,
    TIDE_QFMT_Q4_0 = 2,
    TIDE_QFMT_FP8 = 3,
};
#define TIDE_QFMT_COUNT 4

#define TIDE_QK        32     /* values per scale of q8_0 and q4_0 (one row) */
#define TIDE_FP8_BLOCK 128    /* default fp8 block, rows and columns */
#define TIDE_FP8_MAX   448.0f /* largest finite e4m3fn value */

/* "bf16", "q8_0", "q4_0", "fp8"; "?" for anything else. */
TIDE_API const char *tide_qfmt_name(int fmt);
/* Parse a format name ("bf16", "q8_0", "q4", "q4_0", "fp8"). Returns 0 and
 * *fmt, or -1. */
TIDE_API int tide_qfmt_parse(const char *s, int *fmt);
/* The values' dtype (BF16 for NONE) and the scales' dtype (F16, F16, F32;
 * INVALID for NONE). */
TIDE_API enum tide_dtype tide_qfmt_value_dtype(int fmt);
TIDE_API enum tide_dtype tide_qfmt_scale_dtype(int fmt);
/* Suffix of the scale tensor after the weight's name minus "weight":
 * "weight_scale" (q8_0, q4_0) or "weight_scale_inv" (fp8). */
TIDE_API const char *tide_qfmt_scale_name(int fmt);
/* The usual block: {1, 32} for q8_0 and q4_0, {128, 128} for fp8, {0, 0}
 * for NONE. */
TIDE_API void tide_qfmt_default_block(int fmt, int block[2]);

/* Shapes and bytes of a [rows, cols] matrix in fmt with the given block.
 * value_shape: the stored values' 2-D shape; scale_shape: the scales'. */
TIDE_API void tide_qmat_value_shape(int fmt, int64_t rows, int64_t cols, int64_t shape[2]);
TIDE_API void tide_qmat_scale_shape(const int block[2], int64_t rows, int64_t cols,
                                    int64_t shape[2]);
/* Every byte of the matrix, values and scales (bf16 for NONE). */
TIDE_API uint64_t tide_qmat_bytes(int fmt, const int block[2], int64_t rows, int64_t cols);
/* One routed expert: gate and up [inter, hidden], down [hidden, inter]. */
TIDE_API uint64_t tide_qexpert_bytes(int fmt, const int block[2], int64_t hidden, int64_t inter);

/* Is (fmt, block) usable for a [rows, cols] matrix? q8_0 and q4_0 need
 * block {1, 32} and cols a multiple of 32; fp8 needs positive blocks and
 * cols a multiple of 32 (the kernels' step). On failure why[len] says what
 * is wrong and the result is -1. */
TIDE_API int tide_qfmt_fits(int fmt, const int block[2], int64_t rows, int64_t cols, char *why,
                            size_t len);

/* Check that v is a [rows, cols] matrix of format fmt with block `block`
 * (NONE: plain BF16): dtypes, shapes, byte counts and the scale view. Returns
 * 0, or -1 with why[len] naming the tensor and what is wrong. */
TIDE_API int tide_qview_check(const struct tide_view *v, int fmt, const int block[2], int64_t rows,
                              int64_t cols, char *why, size_t len);

/* Make the view of a quantized [rows, cols] matrix from its two checkpoint
 * tensors (values as stored, scales) into *out, which keeps a pointer to
 * `scales` (it must outlive *out). Checks as tide_qview_check. */
TIDE_API int tide_qview_make(const struct tide_view *values, const struct tide_view *scales,
                             int fmt, const int block[2], int64_t rows, int64_t cols,
                             struct tide_view *out, char *why, size_t len);

/* Row r of a checked view (quantized or plain BF16) as f32: the exact
 * product of value and scale, rounded once to f32. out[cols]. */
TIDE_API void tide_qview_row_f32(const struct tide_view *v, int64_t r, float *out);

/* Quantize a bf16 [rows, cols] matrix (rows of `cols` values) into values
 * and scales, sized as tide_qmat_value_shape / tide_qmat_scale_shape say
 * (values in the value dtype, scales in the scale dtype). q8_0 and q4_0
 * give the bytes of GGML's reference quantizers (docs/quantization.md says
 * where they differ); fp8 never gives e4m3's NaN codes. Returns 0, -1 when
 * the format does not fit the shape, or -2 when src holds a NaN or an
 * infinity (nothing is written then). */
TIDE_API int tide_quantize_bf16(int fmt, const int block[2], const uint16_t *src, int64_t rows,
                                int64_t cols, void *values, void *scales);

/* e4m3fn <-> f32. Encoding rounds to nearest even and saturates at +-448;
 * NaN encodes as 0x7f. Decoding 0x7f / 0xff gives NaN. */
TIDE_API float tide_fp8_to_f32(uint8_t b);
TIDE_API uint8_t tide_f32_to_fp8(float f);
/* f32 -> IEEE half, to nearest even (overflow gives infinity). */
TIDE_API uint16_t tide_f32_to_f16(float f);

#ifdef __cplusplus
}
#endif
#endif
