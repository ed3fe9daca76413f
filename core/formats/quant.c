/* Block-quantized weight formats (tide/quant.h, docs/quantization.md). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tide/quant.h"

static const char *const q_names[TIDE_QFMT_COUNT] = {"bf16", "q8_0", "q4_0", "fp8"};

const char *tide_qfmt_name(int fmt)
{
    return fmt >= 0 && fmt < TIDE_QFMT_COUNT ? q_names[fmt] : "?";
}

int tide_qfmt_parse(const char *s, int *fmt)
{
    if (!s)
        return -1;
    for (int i = 0; i < TIDE_QFMT_COUNT; i++)
        if (!strcmp(s, q_names[i])) {
            *fmt = i;
            return 0;
        }
    if (!strcmp(s, "q4")) {
        *fmt = TIDE_QFMT_Q4_0;
        return 0;
    }
    return -1;
}

enum tide_dtype tide_qfmt_value_dtype(int fmt)
{
    switch (fmt) {
    case TIDE_QFMT_NONE:
        return TIDE_DTYPE_BF16;
    case TIDE_QFMT_Q8_0:
        return TIDE_DTYPE_I8;
    case TIDE_QFMT_Q4_0:
        return TIDE_DTYPE_U8;
    case TIDE_QFMT_FP8:
        return TIDE_DTYPE_F8_E4M3;
    }
    return TIDE_DTYPE_INVALID;
}

enum tide_dtype tide_qfmt_scale_dtype(int fmt)
{
    switch (fmt) {
    case TIDE_QFMT_Q8_0:
    case TIDE_QFMT_Q4_0:
        return TIDE_DTYPE_F16;
    case TIDE_QFMT_FP8:
        return TIDE_DTYPE_F32;
    }
    return TIDE_DTYPE_INVALID;
}

const char *tide_qfmt_scale_name(int fmt)
{
    return fmt == TIDE_QFMT_FP8 ? "weight_scale_inv" : "weight_scale";
}

void tide_qfmt_default_block(int fmt, int block[2])
{
    block[0] = block[1] = 0;
    if (fmt == TIDE_QFMT_Q8_0 || fmt == TIDE_QFMT_Q4_0) {
        block[0] = 1;
        block[1] = TIDE_QK;
    } else if (fmt == TIDE_QFMT_FP8) {
        block[0] = block[1] = TIDE_FP8_BLOCK;
    }
}

void tide_qmat_value_shape(int fmt, int64_t rows, int64_t cols, int64_t shape[2])
{
    shape[0] = rows;
    shape[1] = fmt == TIDE_QFMT_Q4_0 ? cols / 2 : cols;
}

void tide_qmat_scale_shape(const int block[2], int64_t rows, int64_t cols, int64_t shape[2])
{
    shape[0] = block[0] > 0 ? (rows + block[0] - 1) / block[0] : 0;
    shape[1] = block[1] > 0 ? (cols + block[1] - 1) / block[1] : 0;
}

uint64_t tide_qmat_bytes(int fmt, const int block[2], int64_t rows, int64_t cols)
{
    if (fmt == TIDE_QFMT_NONE)
        return (uint64_t)rows * (uint64_t)cols * 2u;
    int64_t vs[2], ss[2];
    tide_qmat_value_shape(fmt, rows, cols, vs);
    tide_qmat_scale_shape(block, rows, cols, ss);
    return (uint64_t)(vs[0] * vs[1]) * tide_dtype_size(tide_qfmt_value_dtype(fmt)) +
           (uint64_t)(ss[0] * ss[1]) * tide_dtype_size(tide_qfmt_scale_dtype(fmt));
}

uint64_t tide_qexpert_bytes(int fmt, const int block[2], int64_t hidden, int64_t inter)
{
    return 2 * tide_qmat_bytes(fmt, block, inter, hidden) +
           tide_qmat_bytes(fmt, block, hidden, inter);
}

static int q_why(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int q_why(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int tide_qfmt_fits(int fmt, const int block[2], int64_t rows, int64_t cols, char *why, size_t len)
{
    if (fmt < 0 || fmt >= TIDE_QFMT_COUNT)
        return q_why(why, len, "unknown weight format %d", fmt);
    if (rows <= 0 || cols <= 0)
        return q_why(why, len, "empty matrix [%lld, %lld]", (long long)rows, (long long)cols);
    if (fmt == TIDE_QFMT_NONE)
        return 0;
    if (cols % TIDE_QK)
        return q_why(why, len, "%s needs a column count that is a multiple of %d, not %lld",
                     tide_qfmt_name(fmt), TIDE_QK, (long long)cols);
    if (fmt == TIDE_QFMT_FP8) {
        if (block[0] <= 0 || block[1] <= 0)
            return q_why(why, len, "fp8 block [%d, %d] must be positive", block[0], block[1]);
        return 0;
    }
    if (block[0] != 1 || block[1] != TIDE_QK)
        return q_why(why, len, "%s has blocks of [1, %d], not [%d, %d]", tide_qfmt_name(fmt),
                     TIDE_QK, block[0], block[1]);
    return 0;
}

int tide_qview_check(const struct tide_view *v, int fmt, const int block[2], int64_t rows,
                     int64_t cols, char *why, size_t len)
{
    if (!v || !v->data)
        return q_why(why, len, "missing tensor");
    const char *name = v->name ? v->name : "?";
    if (v->qfmt != fmt)
        return q_why(why, len, "tensor '%s' is %s, expected %s", name, tide_qfmt_name(v->qfmt),
                     tide_qfmt_name(fmt));
    enum tide_dtype vt = tide_qfmt_value_dtype(fmt);
    if (v->dtype != vt)
        return q_why(why, len, "tensor '%s' holds %s values, expected %s for %s", name,
                     tide_dtype_name(v->dtype), tide_dtype_name(vt), tide_qfmt_name(fmt));
    if (v->ndim != 2 || v->shape[0] != rows || v->shape[1] != cols)
        return q_why(why, len,
                     "tensor '%s' has shape [%lld, %lld] (%d dims), expected [%lld, %lld]", name,
                     (long long)v->shape[0], (long long)(v->ndim > 1 ? v->shape[1] : 0), v->ndim,
                     (long long)rows, (long long)cols);
    if (fmt == TIDE_QFMT_NONE)
        return 0;
    char fw[160];
    if (tide_qfmt_fits(fmt, block, rows, cols, fw, sizeof fw))
        return q_why(why, len, "tensor '%s': %s", name, fw);
    if (v->qblock[0] != block[0] || v->qblock[1] != block[1])
        return q_why(why, len, "tensor '%s' has blocks [%d, %d], expected [%d, %d]", name,
                     v->qblock[0], v->qblock[1], block[0], block[1]);
    int64_t vs[2], ss[2];
    tide_qmat_value_shape(fmt, rows, cols, vs);
    if (v->nbytes != (size_t)(vs[0] * vs[1]) * tide_dtype_size(vt))
        return q_why(why, len, "tensor '%s' has %zu bytes of values, expected %lld", name,
                     v->nbytes, (long long)(vs[0] * vs[1]));
    const struct tide_view *s = v->scale;
    if (!s || !s->data)
        return q_why(why, len, "tensor '%s' has no %s", name, tide_qfmt_scale_name(fmt));
    const char *sn = s->name ? s->name : tide_qfmt_scale_name(fmt);
    enum tide_dtype st = tide_qfmt_scale_dtype(fmt);
    tide_qmat_scale_shape(block, rows, cols, ss);
    if (s->dtype != st)
        return q_why(why, len, "scale tensor '%s' is %s, expected %s for %s", sn,
                     tide_dtype_name(s->dtype), tide_dtype_name(st), tide_qfmt_name(fmt));
    if (s->ndim != 2 || s->shape[0] != ss[0] || s->shape[1] != ss[1])
        return q_why(why, len,
                     "scale tensor '%s' has shape [%lld, %lld] (%d dims), expected [%lld, %lld] "
                     "for a [%lld, %lld] matrix in blocks of [%d, %d]",
                     sn, (long long)s->shape[0], (long long)(s->ndim > 1 ? s->shape[1] : 0),
                     s->ndim, (long long)ss[0], (long long)ss[1], (long long)rows, (long long)cols,
                     block[0], block[1]);
    return 0;
}

int tide_qview_make(const struct tide_view *values, const struct tide_view *scales, int fmt,
                    const int block[2], int64_t rows, int64_t cols, struct tide_view *out,
                    char *why, size_t len)
{
    if (!values)
        return q_why(why, len, "missing values tensor");
    const char *name = values->name ? values->name : "?";
    if (fmt == TIDE_QFMT_NONE)
        return q_why(why, len, "tensor '%s': bf16 is not a quantized format", name);
    int64_t vs[2];
    tide_qmat_value_shape(fmt, rows, cols, vs);
    enum tide_dtype vt = tide_qfmt_value_dtype(fmt);
    if (values->dtype != vt)
        return q_why(why, len, "tensor '%s' is %s, expected %s for %s", name,
                     tide_dtype_name(values->dtype), tide_dtype_name(vt), tide_qfmt_name(fmt));
    if (values->ndim != 2 || values->shape[0] != vs[0] || values->shape[1] != vs[1])
        return q_why(why, len,
                     "tensor '%s' has shape [%lld, %lld] (%d dims), expected [%lld, %lld] for a "
                     "[%lld, %lld] %s matrix",
                     name, (long long)values->shape[0],
                     (long long)(values->ndim > 1 ? values->shape[1] : 0), values->ndim,
                     (long long)vs[0], (long long)vs[1], (long long)rows, (long long)cols,
                     tide_qfmt_name(fmt));
    struct tide_view v = *values;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.qfmt = fmt;
    v.qblock[0] = block[0];
    v.qblock[1] = block[1];
    v.scale = scales;
    if (tide_qview_check(&v, fmt, block, rows, cols, why, len))
        return -1;
    *out = v;
    return 0;
}

float tide_fp8_to_f32(uint8_t b)
{
    const int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), e - 10);
    return b & 0x80 ? -v : v;
}

uint8_t tide_f32_to_fp8(float f)
{
    if (isnan(f))
        return 0x7f;
    const uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= TIDE_FP8_MAX)
        return sign | 0x7e;
    int code;
    if (a < 0x1p-6f) {
        code = (int)rintf(a * 512.0f); /* subnormal steps of 2^-9; 8 is the smallest normal */
    } else {
        int e;
        float fr = frexpf(a, &e); /* a = fr 2^e, fr in [0.5, 1) */
        int mq = (int)rintf((fr * 2.0f - 1.0f) * 8.0f);
        e -= 1;
        if (mq == 8) {
            mq = 0;
            e++;
        }
        code = ((e + 7) << 3) | mq;
        if (code > 0x7e)
            code = 0x7e;
    }
    return (uint8_t)(sign | code);
}

uint16_t tide_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (isnan(f))
        return sign | 0x7e00u;
    float a = fabsf(f);
    if (a >= 65520.0f)
        return sign | 0x7c00u;
    if (a < 0x1p-14f) /* subnormal: steps of 2^-24 */
        return sign | (uint16_t)rintf(a * 0x1p24f);
    int e;
    float fr = frexpf(a, &e);
    int m = (int)rintf((fr * 2.0f - 1.0f) * 1024.0f);
    e -= 1;
    if (m == 1024) {
        m = 0;
        e++;
    }
    return sign | (uint16_t)(((e + 15) << 10) | m);
}

static float q_scale_at(const struct tide_view *s, int64_t i)
{
    if (s->dtype == TIDE_DTYPE_F16)
        return tide_f16_to_f32(((const uint16_t *)s->data)[i]);
    return ((const float *)s->data)[i];
}

void tide_qview_row_f32(const struct tide_view *v, int64_t r, float *out)
{
    const int64_t cols = v->shape[1];
    if (v->qfmt == TIDE_QFMT_NONE) {
        const uint16_t *w = (const uint16_t *)v->data + r * cols;
        for (int64_t c = 0; c < cols; c++)
            out[c] = tide_bf16_to_f32(w[c]);
        return;
    }
    const int64_t scols = v->scale->shape[1];
    const int64_t srow = r / v->qblock[0] * scols;
    switch (v->qfmt) {
    case TIDE_QFMT_Q8_0: {
        const int8_t *q = (const int8_t *)v->data + r * cols;
        for (int64_t c = 0; c < cols; c++)
            out[c] = (float)q[c] * q_scale_at(v->scale, srow + c / TIDE_QK);
        break;
    }
    case TIDE_QFMT_Q4_0: {
        const uint8_t *q = (const uint8_t *)v->data + r * (cols / 2);
        for (int64_t b = 0; b < cols / TIDE_QK; b++) {
            const float d = q_scale_at(v->scale, srow + b);
            for (int j = 0; j < TIDE_QK / 2; j++) {
                const uint8_t byte = q[b * (TIDE_QK / 2) + j];
                out[b * TIDE_QK + j] = (float)((int)(byte & 15) - 8) * d;
                out[b * TIDE_QK + j + TIDE_QK / 2] = (float)((int)(byte >> 4) - 8) * d;
            }
        }
        break;
    }
    case TIDE_QFMT_FP8: {
        const uint8_t *q = (const uint8_t *)v->data + r * cols;
        for (int64_t c = 0; c < cols; c++)
            out[c] = tide_fp8_to_f32(q[c]) * q_scale_at(v->scale, srow + c / v->qblock[1]);
        break;
    }
    }
}

/* q8_0 and q4_0 follow GGML's reference quantizers (quantize_row_q8_0_ref
 * and quantize_row_q4_0_ref, which gguf-py's quants.py reproduces) operation
 * for operation in f32, so that the bytes are GGML's: the scale d is kept in
 * f32, the values are multiplied by id = 1/d (not divided by the f16-rounded
 * scale), q8_0 rounds halves away from zero (roundf) and q4_0 truncates
 * x*id + 8.5. Only the stored scale is rounded to f16.
 *
 * Where GGML's 1/d overflows f32 (a block whose largest magnitude is below
 * 2^-121 for q8_0, 2^-125 for q4_0: only subnormal-sized weights) its result
 * is not defined (infinity times the value, cast to an integer); there the
 * value is divided by d instead, which is what x*id means. */
static float q_mul_id(float x, float d, float id)
{
    return isinf(id) ? x / d : x * id;
}

static void q_row_q8_0(const uint16_t *src, int64_t cols, int8_t *q, uint16_t *s)
{
    for (int64_t b = 0; b < cols / TIDE_QK; b++) {
        float amax = 0;
        for (int j = 0; j < TIDE_QK; j++)
            amax = fmaxf(amax, fabsf(tide_bf16_to_f32(src[b * TIDE_QK + j])));
        const float d = amax / 127.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        s[b] = tide_f32_to_f16(d);
        for (int j = 0; j < TIDE_QK; j++) {
            const float qv = roundf(q_mul_id(tide_bf16_to_f32(src[b * TIDE_QK + j]), d, id));
            q[b * TIDE_QK + j] = (int8_t)fmaxf(-127.0f, fminf(127.0f, qv));
        }
    }
}

static void q_row_q4_0(const uint16_t *src, int64_t cols, uint8_t *q, uint16_t *s)
{
    for (int64_t b = 0; b < cols / TIDE_QK; b++) {
        /* The first value of largest magnitude maps to -8 exactly (the
         * extra negative level goes to the extreme). Starting from the
         * block's first value keeps gguf-py's sign of d in an all-zero block
         * (argmax picks element 0, which may be -0). */
        float amax = fabsf(tide_bf16_to_f32(src[b * TIDE_QK])),
              vmax = tide_bf16_to_f32(src[b * TIDE_QK]);
        for (int j = 1; j < TIDE_QK; j++) {
            const float x = tide_bf16_to_f32(src[b * TIDE_QK + j]);
            if (fabsf(x) > amax) {
                amax = fabsf(x);
                vmax = x;
            }
        }
        const float d = vmax / -8.0f;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        s[b] = tide_f32_to_f16(d);
        for (int j = 0; j < TIDE_QK / 2; j++) {
            int n[2];
            for (int h = 0; h < 2; h++) {
                const float x = tide_bf16_to_f32(src[b * TIDE_QK + j + h * TIDE_QK / 2]);
                const float t = truncf(q_mul_id(x, d, id) + 8.5f);
                n[h] = (int)fmaxf(0.0f, fminf(15.0f, t));
            }
            q[b * (TIDE_QK / 2) + j] = (uint8_t)(n[0] | (n[1] << 4));
        }
    }
}

static void q_fp8(const int block[2], const uint16_t *src, int64_t rows, int64_t cols, uint8_t *q,
                  float *s)
{
    int64_t ss[2];
    tide_qmat_scale_shape(block, rows, cols, ss);
    for (int64_t br = 0; br < ss[0]; br++)
        for (int64_t bc = 0; bc < ss[1]; bc++) {
            const int64_t r0 = br * block[0], c0 = bc * block[1];
            const int64_t r1 = r0 + block[0] < rows ? r0 + block[0] : rows;
            const int64_t c1 = c0 + block[1] < cols ? c0 + block[1] : cols;
            float amax = 0;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    amax = fmaxf(amax, fabsf(tide_bf16_to_f32(src[r * cols + c])));
            const float sc = amax > 0 ? amax / TIDE_FP8_MAX : 1.0f;
            s[br * ss[1] + bc] = sc;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    q[r * cols + c] = tide_f32_to_fp8(tide_bf16_to_f32(src[r * cols + c]) / sc);
        }
}

int tide_quantize_bf16(int fmt, const int block[2], const uint16_t *src, int64_t rows, int64_t cols,
                       void *values, void *scales)
{
    if (fmt == TIDE_QFMT_NONE || tide_qfmt_fits(fmt, block, rows, cols, NULL, 0))
        return -1;
    /* A NaN or an infinity has no code in q8_0 or q4_0, and would make
     * e4m3's NaN code (or a NaN scale) in fp8. */
    for (int64_t i = 0; i < rows * cols; i++)
        if ((src[i] & 0x7fffu) >= 0x7f80u)
            return -2;
    if (fmt == TIDE_QFMT_FP8) {
        q_fp8(block, src, rows, cols, values, scales);
        return 0;
    }
    const int64_t nb = cols / TIDE_QK;
    for (int64_t r = 0; r < rows; r++) {
        if (fmt == TIDE_QFMT_Q8_0)
            q_row_q8_0(src + r * cols, cols, (int8_t *)values + r * cols,
                       (uint16_t *)scales + r * nb);
        else
            q_row_q4_0(src + r * cols, cols, (uint8_t *)values + r * (cols / 2),
                       (uint16_t *)scales + r * nb);
    }
    return 0;
}
