/* backend-cpu-onednn's kernel table: one struct of function pointers filled
 * once at create from the CPU's flags and the options (dnnl_bk_kernels_init,
 * as dav1d's *_dsp_init(flags) does), and every implementation it can hold.
 * Each file holds one instruction set: *_c.c plain C (the reference twin of
 * every entry), *_avx2.c, *_avx512.c, *_avx512bf16.c, *_amx.c. Included by
 * dnnl_bk.h after struct dnnl_bk_qmat. */
#ifndef DNNL_BK_KERNELS_H
#define DNNL_BK_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/backend.h"
#include "tide/quant.h"

struct tide_backend;
struct dnnl_bk_qmat;

/* One weight matrix of a row-kernel call: rows w[n][k] (bf16, row-major)
 * and the output rows: y[t][0..n) for token t. */
struct dnnl_bk_raw_seg {
    const uint16_t *w;
    int64_t n;
    float *const *y;
};

/* One block-quantized weight matrix of a call, its output rows
 * y[t][0..w->n) for token t. */
struct dnnl_bk_qseg {
    const struct dnnl_bk_qmat *w;
    float *const *y;
};

/* A row kernel, by row band: for each segment y[t][j] = x[t] . w[j] over k
 * for t < m, in f32, in one summation order per output that depends on k
 * alone (its file states it), so a row's bits depend neither on m nor on
 * the threads. x[t]: bf16 rows of k values. threads <= 1 runs inline on the
 * calling thread. work: the entry's work function's bytes of scratch. */
typedef void dnnl_bk_rows_fn(const uint16_t *const *x, int64_t m,
                             const struct dnnl_bk_raw_seg *segs, int n_segs, int64_t k, int threads,
                             void *work);
/* rows_c.c: block number i of the segments when each is cut into blocks of
 * `rows` rows (the last of a segment may be shorter): its segment and rows
 * [*r0, *r1). How every row kernel hands work to its threads. */
const struct dnnl_bk_raw_seg *dnnl_bk_seg_block(const struct dnnl_bk_raw_seg *segs, int64_t i,
                                                int64_t rows, int64_t *r0, int64_t *r1);

/* Bytes of `work` a row kernel needs for m rows of k values on `threads`. */
typedef size_t dnnl_bk_work_fn(int64_t m, int64_t k, int threads);
/* A quantized row kernel: as dnnl_bk_rows_fn on quantized matrices, with
 * W[j][i] = value * scale rounded once to f32 (tide_qview_row_f32) and the
 * order quant_c.c states; every segment has the same k. */
typedef void dnnl_bk_quant_fn(const uint16_t *const *x, int64_t m, const struct dnnl_bk_qseg *segs,
                              int n_segs, int64_t k, int threads);
/* The attention op (checked arguments, n > 0). */
typedef int dnnl_bk_attn_fn(struct tide_backend *bk, const struct tide_attn_args *a);
/* One row of rmsnorm over groups of `group` columns (x, y f32 or bf16; y may
 * alias x), in the order math_c.c states. */
typedef void dnnl_bk_rmsnorm_row_fn(const void *x, bool xb, void *y, bool yb, const float *w,
                                    int64_t cols, int group, float eps);
/* h[i] = bf16(silu(g[i]) * u[i]) (dnnl_bk_silu_mul), n elements. */
typedef void dnnl_bk_silu_fn(const float *g, const float *u, uint16_t *h, int64_t n);
/* x[i] = expf(x[i] - m): the softmax probabilities before the sum. */
typedef void dnnl_bk_exp_sub_fn(float *x, int64_t n, float m);
/* y[i] = tide_f32_to_bf16(x[i]). */
typedef void dnnl_bk_to_bf16_fn(const float *x, uint16_t *y, int64_t n);

/* 0 leaves quant_avx512.c's tiles out of the table (for comparison). */
#ifndef DNNL_BK_Q_AVX512_ON
#define DNNL_BK_Q_AVX512_ON 1
#endif

/* What the CPU offers the kernels (dnnl_bk_cpu_flags). */
enum dnnl_bk_cpu {
    DNNL_BK_CPU_AVX2 = 1u << 0,        /* AVX2, FMA and F16C */
    DNNL_BK_CPU_AVX512 = 1u << 1,      /* AVX512 F, DQ, BW and VL */
    DNNL_BK_CPU_AVX512_EXP = 1u << 2,  /* the AVX-512 exp gives this libm's expf bits */
    DNNL_BK_CPU_AVX512BF16 = 1u << 3,  /* AVX512-BF16 */
    DNNL_BK_CPU_AMX = 1u << 4,         /* AMX-BF16, the tile state granted by Linux */
    DNNL_BK_CPU_ONEDNN_BF16 = 1u << 5, /* oneDNN has a bf16 matmul here (create adds it) */
};

/* This CPU's flags (all but DNNL_BK_CPU_ONEDNN_BF16, which needs an
 * engine); why: when AVX512 is set without AVX512_EXP, the reason. */
unsigned dnnl_bk_cpu_flags(char *why, size_t why_len);

/* The options that choose among the kernels a CPU runs. */
enum dnnl_bk_gemm { DNNL_BK_GEMM_AUTO, DNNL_BK_GEMM_AMX, DNNL_BK_GEMM_ONEDNN, DNNL_BK_GEMM_OWN };
enum dnnl_bk_xl { DNNL_BK_XL_AUTO, DNNL_BK_XL_INPLACE, DNNL_BK_XL_PACKED };
struct dnnl_bk_choice {
    enum dnnl_bk_gemm gemm; /* `gemm` */
    enum dnnl_bk_xl layout; /* `expert_layout` */
    bool simd;              /* `simd`: false keeps the plain C twins where they exist */
};

/* The table's entries, in the order the description names them. */
enum dnnl_bk_entry {
    DNNL_BK_E_MATMUL, /* matmul op */
    DNNL_BK_E_EXPERT, /* bf16 expert FFN (expert_ffn and each expert of a batch) */
    DNNL_BK_E_BATCH,  /* expert_ffn_batch: spread (one expert per thread) or serial */
    DNNL_BK_E_Q8_0,   /* quantized experts, per format */
    DNNL_BK_E_Q4_0,
    DNNL_BK_E_FP8,
    DNNL_BK_E_ATTN,    /* attention */
    DNNL_BK_E_RMSNORM, /* rmsnorm row */
    DNNL_BK_E_SILU,    /* SiLU x up (swiglu, experts) */
    DNNL_BK_E_EXP,     /* softmax exp (attention probabilities) */
    DNNL_BK_E_BF16,    /* f32 -> bf16 rows (attention output) */
    DNNL_BK_E_COUNT
};

struct dnnl_bk_kernels {
    /* matmul op on the weight's raw [N][K] rows; NULL: oneDNN's matmul on
     * a packed copy (gemm.c). work: NULL when it needs none. */
    dnnl_bk_rows_fn *matmul;
    dnnl_bk_work_fn *matmul_work;
    /* bf16 experts in the raw layout, every row count; NULL: oneDNN. */
    dnnl_bk_rows_fn *expert;
    dnnl_bk_work_fn *expert_work;
    enum dnnl_bk_layout expert_layout; /* bf16 experts' layout (expert_create, slots) */
    bool expert_spread; /* batch: experts of few rows one per thread, not one by one */
    dnnl_bk_quant_fn *quant[TIDE_QFMT_COUNT]; /* [enum tide_qfmt]; [NONE] NULL */
    dnnl_bk_attn_fn *attention;
    dnnl_bk_rmsnorm_row_fn *rmsnorm_row;
    dnnl_bk_silu_fn *silu_mul_bf16;
    dnnl_bk_exp_sub_fn *exp_sub;
    dnnl_bk_to_bf16_fn *to_bf16;
    const char *name[DNNL_BK_E_COUNT]; /* each entry's implementation: "c", "avx2", ... */
};

/* Fill k from the CPU flags and the choice. A choice the flags cannot serve
 * (gemm = amx without AMX, onednn without ONEDNN_BF16) falls back as auto
 * does; create refuses those first, naming the option. */
void dnnl_bk_kernels_init(struct dnnl_bk_kernels *k, unsigned flags,
                          const struct dnnl_bk_choice *c);

/* "matmul=avx2 expert=avx2 ..." into buf; returns buf. */
const char *dnnl_bk_kernels_str(const struct dnnl_bk_kernels *k, char *buf, size_t len);

/* The entry's key in that string ("matmul", "q8_0", ...). */
const char *dnnl_bk_entry_key(enum dnnl_bk_entry e);

/* ---- The implementations, by file ---------------------------------------- */

/* rows_c.c (any CPU), rows_avx2.c (DNNL_BK_CPU_AVX2): the own order. */
dnnl_bk_rows_fn dnnl_bk_rows_c;
dnnl_bk_rows_fn dnnl_bk_rows_avx2;
/* rows_avx512bf16.c (DNNL_BK_CPU_AVX512BF16): VDPBF16PS, its own order. */
dnnl_bk_rows_fn dnnl_bk_rows_avx512bf16;
/* rows_amx.c (DNNL_BK_CPU_AMX): AMX tiles, the weight rows read in place;
 * k not a multiple of 32 runs dnnl_bk_rows_avx512bf16. */
dnnl_bk_rows_fn dnnl_bk_rows_amx;
dnnl_bk_work_fn dnnl_bk_rows_amx_work;

/* quant_c.c (any CPU), quant_avx2.c (DNNL_BK_CPU_AVX2) and quant_avx512.c
 * (and DNNL_BK_CPU_AVX512; built with DNNL_BK_Q_AVX512_ON, the default). */
dnnl_bk_quant_fn dnnl_bk_quant_c;
dnnl_bk_quant_fn dnnl_bk_quant_avx2;
dnnl_bk_quant_fn dnnl_bk_quant_avx512;

/* attn_c.c, attn_avx2.c (DNNL_BK_CPU_AVX2; head_dim % 8, else plain),
 * math_avx512.c (DNNL_BK_CPU_AVX512 and _EXP; head_dim % 16, else plain). */
dnnl_bk_attn_fn dnnl_bk_attention_c;
dnnl_bk_attn_fn dnnl_bk_attention_avx2;
dnnl_bk_attn_fn dnnl_bk_attention_avx512;

/* math_c.c and math_avx512.c (DNNL_BK_CPU_AVX512 and _EXP). */
dnnl_bk_rmsnorm_row_fn dnnl_bk_rmsnorm_row_c;
dnnl_bk_rmsnorm_row_fn dnnl_bk_rmsnorm_row_avx512;
dnnl_bk_silu_fn dnnl_bk_silu_mul_bf16_c;
dnnl_bk_silu_fn dnnl_bk_silu_mul_bf16_avx512;
dnnl_bk_exp_sub_fn dnnl_bk_exp_sub_c;
dnnl_bk_exp_sub_fn dnnl_bk_exp_sub_avx512;
dnnl_bk_to_bf16_fn dnnl_bk_to_bf16_c;
dnnl_bk_to_bf16_fn dnnl_bk_to_bf16_avx512;

#endif
