/* backend-cpu-onednn internals, shared by its source files. Nothing here is
 * exported: the plugin is built with hidden visibility and only
 * tide_plugin_entry leaves the shared object. */
#ifndef DNNL_BK_H
#define DNNL_BK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "tide/backend.h"
#include "tide/log.h"
#include "tide/quant.h"
#include "tide/status.h"
#include "tide/tensor.h"

#define DNNL_BK_NAME "backend-cpu-onednn"

/* Largest M of one oneDNN matmul call; larger T is processed in chunks. */
#define DNNL_BK_MAX_BUCKET 256

/* Weights of at least this many elements (32 MiB of bf16) get a matmul
 * primitive per exact row count instead of a padded bucket. */
#define DNNL_BK_EXACT_M_MIN ((int64_t)16 << 20)

/* Tag in every buffer, to refuse tensors of another backend's memory. */
#define DNNL_BK_BUF_MAGIC 0x7d1eb0f5u

struct tide_buffer {
    uint32_t magic; /* DNNL_BK_BUF_MAGIC */
    void *ptr;      /* 64-byte aligned, zero-filled at allocation (owned) */
    size_t bytes;   /* usable size */
    bool owned;     /* false: the caller's memory (buffer_wrap), not freed here */
};

/* Where a matrix lives and how oneDNN reads it. */
enum dnnl_bk_layout {
    DNNL_BK_PACKED = 0, /* reordered once into oneDNN's blocked layout (a copy) */
    DNNL_BK_RAW = 1,    /* the checkpoint's [N][K] rows used in place (tag ba) */
};

/* A bf16 matrix W[N,K] for y = x W^T. */
struct dnnl_bk_mat {
    int64_t n, k;
    enum dnnl_bk_layout layout;
    const void *data;      /* packed copy (== own) or the caller's raw rows */
    void *own;             /* owned packed or converted copy, or NULL */
    size_t own_bytes;      /* bytes of `own` */
    dnnl_memory_desc_t md; /* weights desc, dims {K, N} */
};

struct tide_weight {
    enum tide_weight_kind kind;
    int64_t rows, cols;     /* [N,K] for MATMUL, [V,H] for EMBED, [1,C] for VECTOR */
    enum tide_dtype dtype;  /* EMBED: dtype of data; else the source dtype */
    struct dnnl_bk_mat mat; /* MATMUL */
    float *vec;             /* VECTOR: owned f32 copy [cols] */
    const void *data;       /* EMBED: aliased table rows */
    char name[96];          /* tensor name for messages ("?" when unnamed) */
};

/* A block-quantized matrix W[N,K] (tide/quant.h) for y = x W^T, read by
 * the quant_*.c kernels where it lies: the checkpoint's values and scales (aliased),
 * or the memory of a slot (own). */
struct dnnl_bk_qmat {
    int fmt;       /* enum tide_qfmt, never NONE */
    int br, bc;    /* rows and columns one scale covers (q8_0, q4_0: 1, 32; bc % 32 == 0) */
    int64_t n, k;  /* logical [N,K]; K % 32 == 0 */
    const void *q; /* values: N rows of K bytes (q8_0, fp8) or K/2 bytes (q4_0) */
    const void *s; /* scales [ceil(N/br)][sld]: f16 (q8_0, q4_0) or f32 (fp8) */
    int64_t sld;   /* scales per scale row, ceil(K/bc) */
    void *own;     /* slot memory holding the values then the scales, or NULL */
    size_t q_bytes, s_bytes; /* bytes of values and of scales */
};

struct tide_expert {
    int64_t hidden, inter;      /* H and I */
    int qfmt;                   /* enum tide_qfmt: NONE for bf16; else q* below hold it */
    int qblock[2];              /* the format's block (rows, columns per scale) */
    struct dnnl_bk_qmat qgate;  /* quantized: [I,H] */
    struct dnnl_bk_qmat qup;    /* quantized: [I,H] */
    struct dnnl_bk_qmat qdown;  /* quantized: [H,I] */
    enum dnnl_bk_layout layout; /* PACKED: gate_up fused; RAW: gate and up apart */
    struct dnnl_bk_mat gate_up; /* PACKED: [2I,H], gate rows first */
    struct dnnl_bk_mat gate;    /* RAW: [I,H] */
    struct dnnl_bk_mat up;      /* RAW: [I,H] */
    struct dnnl_bk_mat down;    /* [H,I] */
};

/* One cached matmul primitive: fixed M bucket, shapes and weight layout; dense
 * source and destination. */
struct dnnl_bk_prim {
    int64_t m, n, k;
    dnnl_memory_desc_t wmd; /* weights desc the primitive was built for */
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst; /* handles set per call */
};

/* The kernel table: which code computes each op on this instance. */
#include "dnnl_bk_kernels.h"

struct tide_backend {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    enum tide_backend_role role;
    int threads;                 /* OpenMP threads for oneDNN and our loops */
    struct dnnl_bk_kernels kern; /* filled once at create (kernels.c) */
    struct dnnl_bk_prim *prims;  /* [n_prims] primitive cache */
    int n_prims, cap_prims;
    void *scratch; /* staging for padded matmuls and expert_ffn, 64-byte aligned */
    size_t scratch_bytes;
    int n_experts;   /* live experts */
    bool warned_ref; /* logged once that oneDNN picked a reference kernel */
    /* RoPE angles, cached: rope_cs[(pos * half + j) * 2 + {0,1}] = cos, sin of
     * pos * theta^(-2j/rot_dim), for pos < rope_pos. */
    float *rope_cs;
    int64_t rope_pos;
    float rope_theta;
    int rope_rot;
    double copy_seconds;   /* slot_load, cumulative */
    double expert_seconds; /* expert_ffn, cumulative */
    char desc[384];        /* describe(): options resolved and the kernel table */
};

/* Reads struct tide_buffer and struct tide_weight: included once they are defined. */
#include "backend-common/check.h"

/* Check a status from oneDNN; on failure log "<op>: <call>: <status>" and
 * return TIDE_E_DEVICE from the calling function. */
#define DNNL_BK_TRY(op, call) BKC_TRY(dnnl_status_t, dnnl_success, dnnl_bk_fail, op, call, #call)

/* Log a oneDNN failure and return TIDE_E_DEVICE. */
int dnnl_bk_fail(const char *op, const char *call, dnnl_status_t st);

/* This backend to the shared argument checks of backend-common/check.h,
 * which every op runs first (plugin.c). */
extern const struct bkc_id dnnl_bk_id;

/* Log "backend-cpu-onednn: <op>: <message>" at error level and return TIDE_E_INVAL. */
#define dnnl_bk_inval(op, ...) bkc_inval(DNNL_BK_NAME, (op), __VA_ARGS__)

/* Address of element (r, c) of a view. */
static inline void *dnnl_bk_at(const struct tide_tensor *t, int64_t r, int64_t c)
{
    return (char *)t->buf->ptr + t->offset +
           (size_t)(r * t->stride + c) * tide_dtype_size(t->dtype);
}

/* Make this thread's OpenMP team size the instance's (oneDNN reads it). */
void dnnl_bk_enter(struct tide_backend *bk);

/* ---- Threads (pool.c) ----------------------------------------------------
 * The backend's own loops run on one team of threads for the whole process
 * (not OpenMP's, which only oneDNN's primitives use): inside a round of the
 * engine loop (round_begin .. round_end: a forward and the sampling after
 * it) the workers spin between jobs, so the ops of a forward cost no
 * wake-up; outside one they soon sleep. */

/* Run fn(ctx, tid, nt) for tid = 0 .. nt-1, the caller as tid 0, and return
 * once every one has. With nt <= 1, or while another job runs (a job inside
 * a job, another engine's thread), the caller alone runs it (nt 1). */
void dnnl_bk_par(int nt, void (*fn)(void *ctx, int tid, int nt), void *ctx);
/* fn(ctx, i0, i1) over [0, n) in nt contiguous shares, as OpenMP's static
 * schedule divides a loop (nt is capped at n). */
void dnnl_bk_par_for(int nt, int64_t n, void (*fn)(void *ctx, int64_t i0, int64_t i1), void *ctx);
/* A round begins (true) or ends (false); rounds nest. */
void dnnl_bk_pool_hot(bool on);

/* Memory for a weight the backend keeps its own copy of (a packed matrix):
 * from 2 MiB on, on 2 MiB boundaries and advised into transparent huge
 * pages, which stream faster (docs/cpu-performance.md). Released with
 * free(); NULL when out of memory. -DDNNL_BK_HUGE_WEIGHTS=0 keeps them on
 * 64-byte boundaries, for comparison. */
#ifndef DNNL_BK_HUGE_WEIGHTS
#define DNNL_BK_HUGE_WEIGHTS 1
#endif
void *dnnl_bk_alloc_weight(size_t bytes);

/* Grow the scratch area to at least `bytes`; TIDE_OK or TIDE_E_NOMEM. */
int dnnl_bk_scratch(struct tide_backend *bk, size_t bytes);

/* The M a primitive is built for when m rows are multiplied (m <= DNNL_BK_MAX_BUCKET). */
int64_t dnnl_bk_bucket(int64_t m);
/* The same for a weight of at least DNNL_BK_EXACT_M_MIN elements. */
int64_t dnnl_bk_exact_m(int64_t m);

/* Set up W[N,K] in `layout`. PACKED always owns its blocked copy; RAW owns an
 * [N][K] copy when `own`, else it aliases the rows it is loaded from. When
 * `data` (bf16 [N][K] rows) is not NULL, load it (dnnl_bk_mat_load). */
int dnnl_bk_mat_init(struct tide_backend *bk, struct dnnl_bk_mat *m, const void *data, int64_t n,
                     int64_t k, enum dnnl_bk_layout layout, bool own, const char *what);
/* (Re)load a matrix from bf16 [N][K] rows: reorder (PACKED), copy (owned RAW)
 * or alias (RAW). TIDE_OK or TIDE_E_DEVICE (logged). */
int dnnl_bk_mat_load(struct tide_backend *bk, struct dnnl_bk_mat *m, const void *data,
                     const char *what);
void dnnl_bk_mat_free(struct dnnl_bk_mat *m);

/* y[mb,N] = x[mb,K] W^T with dense f32 y and bf16 x, mb a bucket (dnnl_bk_bucket). */
int dnnl_bk_gemm(struct tide_backend *bk, const struct dnnl_bk_mat *w, const uint16_t *x,
                 int64_t mb, float *y, const char *op);

void dnnl_bk_prims_free(struct tide_backend *bk);

/* Token counts up to which an inplace expert of expert_ffn_batch runs on one
 * thread (the experts of a batch spread over the threads); above it the
 * expert gets every thread. Either way the row kernel gives the same bits. */
#define DNNL_BK_RAW_MAX_M 64

/* Software prefetch of the row kernels for the weight rows: distance in
 * bytes and hint (prefetcht2 16 KiB ahead measured fastest on Zen 4 and 5:
 * docs/cpu-performance.md). Overridable at build time (-D...). */
#ifndef DNNL_BK_RAW_PF_BYTES
#define DNNL_BK_RAW_PF_BYTES 16384
#endif
#ifndef DNNL_BK_RAW_PF_HINT
#define DNNL_BK_RAW_PF_HINT _MM_HINT_T2
#endif

/* Does oneDNN have a bf16 matmul with f32 output on this CPU (engine eng)?
 * When not, why[why_len] says so. */
bool dnnl_bk_has_bf16(dnnl_engine_t eng, char *why, size_t why_len);

/* rows_avx2.c: the bf16 rows x[m] of k values widened to f32 (exact) in
 * one malloc'd buffer *buf; returns the row pointers (free both), or NULL
 * when out of memory. Needs AVX2 (DNNL_BK_CPU_AVX2). */
const float **dnnl_bk_widen_rows(const uint16_t *const *x, int64_t m, int64_t k, float **buf);

/* rows_amx.c: true when this CPU has AMX-BF16 (and AVX512-BF16) and
 * Linux lets this process use the tile state (asked for on the first call). */
bool dnnl_bk_amx_available(void);

/* math_avx512.c: start-up check of the vector exp against this process's
 * expf (once per process); false, with the reason in why, when the CPU lacks
 * AVX-512 or the bits would differ (another libm). */
bool dnnl_bk_avx512_exp_check(char *why, size_t why_len);

/* The vector steps of the tiled attention (attn_c.c's driver): scores
 * p[h][j] = scale * (q_h . k_j) for up to DNNL_BK_ATT_HEADS heads of a GQA
 * group over the transposed keys kt [hd][ldk]; mix o = sum_j (p[j] / sum) v_j
 * in key order; the exp and bf16 rounding entries to use. Each must give the
 * plain loop's bits. */
#define DNNL_BK_ATT_HEADS 4
struct dnnl_bk_att_kernels {
    void (*scores)(const float *const *q, int nh, const float *kt, int64_t ldk, int hd, int64_t len,
                   float scale, float *const *p);
    void (*mix)(const float *p, float sum, int64_t len, const float *v, int64_t ldv, int hd,
                float *o);
    dnnl_bk_exp_sub_fn *exp_sub;
    dnnl_bk_to_bf16_fn *to_bf16;
};
/* Attention with those kernels (checked arguments). */
int dnnl_bk_attention_tiled(struct tide_backend *bk, const struct tide_attn_args *a,
                            const struct dnnl_bk_att_kernels *kern);

/* Seconds on a monotonic clock. */
double dnnl_bk_now(void);

/* Ops (backend.h documents each). */
int dnnl_bk_expert_create(struct tide_backend *bk, const struct tide_view *gate,
                          const struct tide_view *up, const struct tide_view *down,
                          struct tide_expert **out);
void dnnl_bk_expert_destroy(struct tide_backend *bk, struct tide_expert *e);
int dnnl_bk_slot_create(struct tide_backend *bk, int64_t hidden, int64_t inter,
                        struct tide_expert **out);
int dnnl_bk_slot_load(struct tide_backend *bk, struct tide_expert *slot,
                      const struct tide_view *gate, const struct tide_view *up,
                      const struct tide_view *down);
int dnnl_bk_slot_create_q(struct tide_backend *bk, int64_t hidden, int64_t inter, int qfmt,
                          const int qblock[2], struct tide_expert **out);
int dnnl_bk_copy_sync(struct tide_backend *bk);
int dnnl_bk_timings(struct tide_backend *bk, double *copy_seconds, double *expert_seconds);
int dnnl_bk_gather_rows(struct tide_backend *bk, const struct tide_tensor *src, const int32_t *rows,
                        int64_t n, const struct tide_tensor *dst);
int dnnl_bk_scatter_rows(struct tide_backend *bk, const struct tide_tensor *src,
                         const int32_t *rows, int64_t n, const struct tide_tensor *dst);
int dnnl_bk_matmul(struct tide_backend *bk, const struct tide_tensor *x,
                   const struct tide_weight *w, const struct tide_tensor *y);
int dnnl_bk_expert_ffn(struct tide_backend *bk, const struct tide_expert *e,
                       const struct tide_tensor *x_all, const int32_t *rows,
                       const int32_t *dst_rows, int64_t n, const struct tide_tensor *out);
int dnnl_bk_expert_ffn_batch(struct tide_backend *bk, int n_experts,
                             const struct tide_expert *const *experts,
                             const struct tide_tensor *x_all, const int32_t *rows,
                             const int32_t *dst_rows, const int64_t *offsets,
                             const struct tide_tensor *out);
int dnnl_bk_embed(struct tide_backend *bk, const struct tide_weight *table, const int32_t *ids,
                  int64_t n, const struct tide_tensor *out);
int dnnl_bk_rmsnorm(struct tide_backend *bk, const struct tide_tensor *x,
                    const struct tide_weight *w, int group, float eps, const struct tide_tensor *y);
int dnnl_bk_rope(struct tide_backend *bk, const struct tide_tensor *x, int head_dim, int rot_dim,
                 float theta, int64_t pos0);
int dnnl_bk_attention(struct tide_backend *bk, const struct tide_attn_args *a);
int dnnl_bk_swiglu(struct tide_backend *bk, const struct tide_tensor *g,
                   const struct tide_tensor *u, const struct tide_tensor *out);
int dnnl_bk_add(struct tide_backend *bk, const struct tide_tensor *acc,
                const struct tide_tensor *x);
int dnnl_bk_convert(struct tide_backend *bk, const struct tide_tensor *src,
                    const struct tide_tensor *dst);
int dnnl_bk_router(struct tide_backend *bk, const struct tide_router_args *a);
int dnnl_bk_moe_combine(struct tide_backend *bk, const struct tide_tensor *parts, const float *w,
                        int k, const struct tide_tensor *y);

#endif
