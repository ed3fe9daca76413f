/* The backend's kernel for block-quantized routed experts (tide/quant.h:
 * q8_0, q4_0 and block-scaled fp8), on the values and scales where they lie
 * (the checkpoint's memory, or a slot's copy of it): no matrix is ever
 * dequantized into a copy, each 32-value chunk is decoded in registers.
 *
 * oneDNN 2.6 cannot take these weights. Its data types are f16, bf16, f32,
 * s32, s8 and u8 (dnnl_types.h: no f8, no 4-bit), and its scales are set per
 * argument with a mask over whole dimensions (dnnl_primitive_attr_set_scales,
 * set_output_scales), so one scale per 32 values of a row (q8_0, q4_0) or per
 * 128x128 block (fp8) cannot be expressed; an s8-weight matmul there is
 * integer arithmetic that wants s8/u8 sources, not bf16. Weight
 * decompression (floating-point sources with int8/int4 weights and grouped
 * scales) and the f8 types arrived in the 3.x series.
 *
 * What is computed, for y = x W^T with x bf16 [m, K] and W [N, K]:
 *   - W[j][i] = value * scale, the exact product rounded once to f32, bit for
 *     bit what tide_qview_row_f32 gives. An fp8 value is decoded through IEEE
 *     half: the bits sign<<15 | (code & 0x7f)<<7 are the e4m3 value times
 *     2^-8 exactly (normals and subnormals), which F16C widens exactly; the
 *     2^8 goes into the scale (exact below 2^120), so the product is the
 *     same real number and rounds the same. The NaN codes 0x7f and 0xff
 *     decode to NaN, as in the reference: the AVX2 and AVX-512 code
 *     recompute a tile whose values hold one with the plain code.
 *   - y[t][j] = x[t] . W[j] in f32 in rows_avx2.c's order: lane l (0..7)
 *     sums x[i] W[j][i] for i = l, l + 8, l + 16, ... < K, one fused
 *     multiply-add per i, i ascending; then the lanes are added as
 *     ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). K is a multiple of
 *     32 (tide_qfmt_fits), so there is no tail.
 * The order depends on K alone: a row's bits do not depend on how many rows
 * share the call (batch invariance), the tiling or the threads, and the AVX2
 * code and the plain code (fmaf, the same correctly rounded fused
 * multiply-add) give identical bits, as does the AVX-512 code;
 * tests/conformance/test_quant_experts.c checks each against that order
 * written out plainly on tide_qview_row_f32's rows.
 *
 * This file holds the plain C twin, the reference the vector code
 * (quant_avx2.c, quant_avx512.c) is tested against, and the threaded driver
 * every path runs on. */
#include <math.h>
#include <stdlib.h>

#include "dnnl_bk_quant.h"

void dnnl_bk_qchunk_c(const struct dnnl_bk_qmat *w, int64_t j, int64_t i0, float out[32])
{
    const float s = qk_scale(w, j, i0 / w->bc);
    const uint8_t *q = (const uint8_t *)w->q + j * qk_row_bytes(w);
    switch (w->fmt) {
    case TIDE_QFMT_Q8_0:
        for (int i = 0; i < 32; i++)
            out[i] = (float)(int8_t)q[i0 + i] * s;
        break;
    case TIDE_QFMT_Q4_0:
        for (int i = 0; i < 16; i++) {
            const uint8_t b = q[i0 / 2 + i];
            out[i] = (float)((int)(b & 15) - 8) * s;
            out[i + 16] = (float)((int)(b >> 4) - 8) * s;
        }
        break;
    default: /* fp8 */
        for (int i = 0; i < 32; i++) {
            const uint8_t b = q[i0 + i];
            const float v = (b & 0x7f) != 0x7f
                                ? qk_f16((uint16_t)((b & 0x80) << 8 | (b & 0x7f) << 7))
                            : b & 0x80 ? -NAN
                                       : NAN;
            out[i] = v * s;
        }
        break;
    }
}

float dnnl_bk_qdot_c(const uint16_t *x, const struct dnnl_bk_qmat *w, int64_t j)
{
    float l[8] = {0}, wc[32];
    for (int64_t i0 = 0; i0 < w->k; i0 += 32) {
        dnnl_bk_qchunk_c(w, j, i0, wc);
        for (int i = 0; i < 32; i++)
            l[i & 7] = fmaf(qk_bf16(x[i0 + i]), wc[i], l[i & 7]);
    }
    const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
    return (a0 + a2) + (a1 + a3);
}

/* The plain path: one output at a time. */
static void qk_block_c(const float *const *xf, const uint16_t *const *x, int64_t m,
                       const struct dnnl_bk_qseg *s, int64_t r0, int64_t r1)
{
    (void)xf;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = 0; t < m; t++)
            s->y[t][r] = dnnl_bk_qdot_c(x[t], s->w, r);
}

static const struct dnnl_bk_qpath qk_path_c = {qk_block_c, NULL, {0}, false};

struct qk_job {
    const struct dnnl_bk_qpath *p;
    const float *const *xf;
    const uint16_t *const *x;
    int64_t m;
    const struct dnnl_bk_qseg *segs;
    int64_t k;
    float *wbuf; /* [threads][DNNL_BK_QRB * k] decoded rows, or NULL */
    int64_t blocks;
};

/* Block b, numbered through the segments in order. */
static void qk_run_block(const struct qk_job *j, int64_t b, float *wbuf)
{
    int i = 0;
    while (b >= (j->segs[i].w->n + DNNL_BK_QRB - 1) / DNNL_BK_QRB)
        b -= (j->segs[i++].w->n + DNNL_BK_QRB - 1) / DNNL_BK_QRB;
    const int64_t r0 = b * DNNL_BK_QRB,
                  r1 = r0 + DNNL_BK_QRB < j->segs[i].w->n ? r0 + DNNL_BK_QRB : j->segs[i].w->n;
    if (wbuf)
        j->p->decoded(j->xf, j->m, &j->segs[i], r0, r1, wbuf);
    else
        j->p->block(j->xf, j->x, j->m, &j->segs[i], r0, r1);
}

/* Thread tid's contiguous share of the blocks. */
static void qk_job_blocks(void *c, int tid, int nt)
{
    const struct qk_job *j = c;
    const int64_t b0 = j->blocks * tid / nt, b1 = j->blocks * (tid + 1) / nt;
    float *wbuf = j->wbuf ? j->wbuf + (size_t)tid * (size_t)(DNNL_BK_QRB * j->k) : NULL;
    for (int64_t b = b0; b < b1; b++)
        qk_run_block(j, b, wbuf);
}

void dnnl_bk_quant_run(const struct dnnl_bk_qpath *p, const uint16_t *const *x, int64_t m,
                       const struct dnnl_bk_qseg *segs, int n_segs, int64_t k, int threads)
{
    if (m <= 0 || n_segs <= 0)
        return;
    /* x widened once per call: the same bits as the bf16 rows. */
    float *buf = NULL;
    const float **xf = NULL;
    if (p->widen && !(xf = dnnl_bk_widen_rows(x, m, k, &buf)))
        p = &qk_path_c;
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].w->n + DNNL_BK_QRB - 1) / DNNL_BK_QRB;
    const int nt = threads < 1 ? 1 : threads < blocks ? threads : (int)blocks;
    /* Every segment of a call has one format (an expert's matrices). */
    float *wbuf = p->decoded && m > p->direct[segs[0].w->fmt]
                      ? malloc(sizeof *wbuf * (size_t)(nt * DNNL_BK_QRB * k))
                      : NULL;
    const struct qk_job j = {p, xf, x, m, segs, k, wbuf, blocks};
    if (nt <= 1)
        qk_job_blocks((void *)&j, 0, 1);
    else
        dnnl_bk_par(nt, qk_job_blocks, (void *)&j);
    free(wbuf);
    free(buf);
    free(xf);
}

void dnnl_bk_quant_c(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                     int n_segs, int64_t k, int threads)
{
    dnnl_bk_quant_run(&qk_path_c, x, m, segs, n_segs, k, threads);
}
