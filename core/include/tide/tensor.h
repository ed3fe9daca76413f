/* Element types, host tensor views and bf16 conversion.
 *
 * A struct tide_view is a non-owning view of host memory, typically a tensor
 * used in place inside an mmapped safetensors file. Whoever created the memory
 * owns it; a view never frees. */
#ifndef TIDE_TENSOR_H
#define TIDE_TENSOR_H

#include "tide/api.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tide_dtype {
    TIDE_DTYPE_INVALID = 0,
    TIDE_DTYPE_F32 = 1,
    TIDE_DTYPE_F16 = 2,
    TIDE_DTYPE_BF16 = 3,
    TIDE_DTYPE_I64 = 4,
    TIDE_DTYPE_I32 = 5,
    TIDE_DTYPE_I8 = 6,      /* q8_0 expert values */
    TIDE_DTYPE_U8 = 7,      /* q4_0 expert values, two per byte */
    TIDE_DTYPE_F8_E4M3 = 8, /* fp8 expert values (e4m3fn) */
};

#define TIDE_MAX_DIMS 4

/* Bytes per element, 0 for TIDE_DTYPE_INVALID. */
TIDE_API size_t tide_dtype_size(enum tide_dtype t);
/* Safetensors spelling: "F32", "F16", "BF16", "I64", "I32", "I8", "U8",
 * "F8_E4M3"; "?" if invalid. */
TIDE_API const char *tide_dtype_name(enum tide_dtype t);

struct tide_view {
    const void *data; /* first element; not owned */
    enum tide_dtype dtype;
    int ndim;                     /* 0..TIDE_MAX_DIMS */
    int64_t shape[TIDE_MAX_DIMS]; /* outermost first; row-major, contiguous */
    size_t nbytes;                /* product(shape) * dtype size */
    const char *name;             /* tensor name, owned by whoever made the view; may be NULL */
    /* Appended: a block-quantized matrix (tide/quant.h, docs/quantization.md).
     * All zero for a plain tensor. For a quantized one, shape is the logical
     * [rows, cols] of the matrix, dtype the stored value type and nbytes the
     * bytes of the values alone; `scale` holds one scale per block of
     * qblock[0] rows by qblock[1] columns. */
    int qfmt;                      /* enum tide_qfmt; 0 (TIDE_QFMT_NONE): a plain tensor */
    int qblock[2];                 /* rows and columns one scale covers */
    const struct tide_view *scale; /* the scales, a plain 2-D view */
};

/* Product of the shape (1 for a scalar). */
static inline int64_t tide_view_numel(const struct tide_view *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++)
        n *= v->shape[i];
    return n;
}

/* bf16 <-> f32. Rounding is to nearest, ties to even; NaN stays NaN. */
static inline float tide_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t tide_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f32 rounded through bf16, the value a bf16 tensor would hold. */
static inline float tide_round_bf16(float f)
{
    return tide_bf16_to_f32(tide_f32_to_bf16(f));
}

/* IEEE half -> f32 (for F16 checkpoints). */
TIDE_API float tide_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
