/* backend-cuda internals, shared by its C sources. Nothing here is exported:
 * the plugin is built with hidden visibility and only tide_plugin_entry
 * leaves the shared object.
 *
 * Execution model (backend.h, DESIGN.md "Backend execution model"):
 *  - every op is enqueued on one compute stream, in issue order;
 *  - promotions (slot_load) run on a separate copy stream. A slot records
 *    `used` on the compute stream after the last kernel that reads it and
 *    `loaded` on the copy stream after its copy; each stream waits on the
 *    other's event before touching the slot (cudaStreamWaitEvent);
 *  - `read` synchronises the compute stream, `sync` both streams;
 *  - host arrays handed to an op (ids, rows, routing weights) are copied into
 *    a pinned ring before the op returns, so the caller may reuse them at once. */
#ifndef CUDA_BK_H
#define CUDA_BK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "tide/backend.h"
#include "tide/log.h"
#include "tide/quant.h"
#include "tide/status.h"
#include "tide/tensor.h"

#ifndef CUDA_BK_NAME /* tests/gpu builds an emulated copy under another name */
#define CUDA_BK_NAME "backend-cuda"
#endif

/* Segments of the promotion staging ring (option `staging` is split among them). */
#define CUDA_BK_STAGING_NSEG 8

/* Tags, to refuse handles of another backend. */
#define CUDA_BK_BUF_MAGIC    0x7d1ec0dau
#define CUDA_BK_EXPERT_MAGIC 0x7d1ec0e5u

/* Device memory; ptr is zero-filled (on the compute stream) at allocation. */
struct tide_buffer {
    uint32_t magic; /* CUDA_BK_BUF_MAGIC */
    void *ptr;      /* device pointer */
    size_t bytes;   /* usable size */
};

struct tide_weight {
    enum tide_weight_kind kind;
    int64_t rows, cols;    /* [N,K] for MATMUL, [V,H] for EMBED, [1,C] for VECTOR */
    enum tide_dtype dtype; /* of dev: BF16 for MATMUL, F32 for VECTOR, the source's for EMBED */
    void *dev;             /* device copy [rows, cols] */
    float *host_vec; /* VECTOR: host f32 copy [cols] (the router runs its top-k on the host) */
    char name[96];   /* tensor name for messages ("?" when unnamed) */
};

/* One matrix of a block-quantized expert inside the expert's allocation:
 * its values, then its scales (tide/quant.h layouts, as in the checkpoint). */
struct cuda_qpart {
    int64_t rows, cols;        /* logical shape: [I,H] for gate and up, [H,I] for down */
    int64_t scols;             /* columns of the scale matrix */
    size_t values, scales;     /* byte offsets into tide_expert.dev, 256-aligned */
    size_t n_values, n_scales; /* bytes */
};

/* A routed expert in device memory, in one allocation. bf16: gate [I,H],
 * then up [I,H] (together the [2I,H] matrix of one fused GEMM), then down
 * [H,I], row-major. Quantized (qfmt set): gate, up and down each as its
 * compressed values and scales (`part`), exactly the checkpoint's bytes, so
 * a promotion moves no more than the checkpoint holds; the FFN decodes them
 * (ops.c). */
struct tide_expert {
    uint32_t magic; /* CUDA_BK_EXPERT_MAGIC */
    int64_t hidden, inter;
    void *dev;
    size_t bytes;              /* of dev */
    int qfmt;                  /* enum tide_qfmt; TIDE_QFMT_NONE: bf16 */
    int qblock[2];             /* rows and columns per scale (quantized) */
    struct cuda_qpart part[3]; /* gate, up, down (quantized) */
    bool is_slot;              /* made by slot_create(_q): loaded by slot_load on the copy stream */
    cudaEvent_t loaded;        /* slot: recorded on the copy stream after its last slot_load */
    cudaEvent_t used;          /* slot: recorded on the compute stream after its last reader */
    bool load_recorded;        /* `loaded` has been recorded at least once */
    bool use_recorded;         /* `used` has been recorded at least once */
};

/* A pinned host ring for host -> device uploads on one stream. It is split in
 * segments; a segment's event is recorded on the stream when the ring moves
 * past it, and the host waits for that event before writing the segment again. */
struct cuda_ring {
    char *host; /* cudaHostAlloc'd [n_seg * seg_bytes], or NULL */
    size_t seg_bytes;
    int n_seg;
    int cur;         /* segment being filled */
    size_t off;      /* bytes used in it */
    cudaEvent_t *ev; /* [n_seg] */
    bool *armed;     /* [n_seg]: ev[i] was recorded after the last copy from segment i */
    cudaStream_t stream;
};

/* Cumulative busy time of one kind of work, measured with event pairs. The
 * pairs form a ring of `cap`; completed ones are added into `seconds`. */
struct cuda_timer {
    cudaEvent_t *ev;  /* [2 * cap]: start, stop of each pair; created on first use */
    int cap, head, n; /* ring of n pending pairs starting at head */
    double seconds;
};

/* One page-locked (cudaHostRegister'ed) host range, page-aligned. */
struct cuda_pin {
    uintptr_t start, end;
};

struct tide_backend {
    int device;
    enum tide_backend_role role;
    cudaStream_t compute, copy;
    cublasHandle_t blas;
    struct cuda_ring params;  /* small uploads on the compute stream */
    struct cuda_ring staging; /* promotions whose source is not page-locked (copy stream) */
    size_t staging_bytes;     /* size of `staging`, allocated on first use */
    void *scratch;            /* device scratch for the op in flight on the compute stream */
    size_t scratch_bytes;
    void *host_scratch; /* host scratch (router logits, row maps) */
    size_t host_scratch_bytes;
    /* Page-locked promotion sources, sorted by start, never overlapping. */
    struct cuda_pin *pins;
    int n_pins, cap_pins;
    bool pin;          /* option `pin` and not disabled by a failure */
    bool pin_readonly; /* the device takes cudaHostRegisterReadOnly */
    size_t page;
    struct cuda_timer copy_timer, expert_timer;
    int n_buffers, n_weights, n_experts; /* live handles, for the destroy warning */
    char desc[640];
};

/* Reads struct tide_buffer and struct tide_weight: included once they are defined. */
#include "backend-common/check.h"

/* ---- errors ------------------------------------------------------------ */

/* Log "backend-cuda: <op>: <call> failed: <name>: <text>" and return
 * TIDE_E_DEVICE (TIDE_E_NOMEM for cudaErrorMemoryAllocation). */
int cuda_bk_fail(const char *op, const char *call, cudaError_t err);
/* The same for a cuBLAS status. */
int cuda_bk_blas_fail(const char *op, const char *call, cublasStatus_t st);
/* Log "backend-cuda: <op>: <message>" and return TIDE_E_INVAL. */
#define cuda_bk_inval(op, ...) bkc_inval(CUDA_BK_NAME, (op), __VA_ARGS__)

/* Check a CUDA call; on failure log it and return from the calling function. */
#define CUDA_BK_TRY(op, call) BKC_TRY(cudaError_t, cudaSuccess, cuda_bk_fail, op, call, #call)
/* The same for a cuBLAS call. */
#define CUDA_BK_BLAS_TRY(op, call)                                                                 \
    BKC_TRY(cublasStatus_t, CUBLAS_STATUS_SUCCESS, cuda_bk_blas_fail, op, call, #call)

/* ---- validation -------------------------------------------------------- */

/* This backend to the shared argument checks of backend-common/check.h,
 * which every op runs first (plugin.c). */
extern const struct bkc_id cuda_bk_id;

/* Validate an expert handle; TIDE_OK or TIDE_E_INVAL (logged). */
int cuda_bk_check_expert(const char *op, const struct tide_expert *e);
/* Each of n host row indices lies in [0, limit); else TIDE_E_INVAL naming the
 * first bad one ("<op>: <what>[i] = r is outside ..."). */
int cuda_bk_check_rows(const char *op, const char *what, const int32_t *rows, int64_t n,
                       int64_t limit);

/* Device address of element (r, c) of a view. */
static inline void *cuda_bk_at(const struct tide_tensor *t, int64_t r, int64_t c)
{
    return (char *)t->buf->ptr + t->offset +
           (size_t)(r * t->stride + c) * tide_dtype_size(t->dtype);
}

/* ---- instance helpers (plugin.c) --------------------------------------- */

/* Make the instance's device current on the calling thread. */
int cuda_bk_enter(struct tide_backend *bk, const char *op);
/* Device scratch of at least `bytes` for the op being issued (the previous
 * contents may be lost: it is reallocated after a compute-stream sync). */
int cuda_bk_scratch(struct tide_backend *bk, size_t bytes, const char *op, void **out);
/* Host scratch of at least `bytes`; TIDE_OK or TIDE_E_NOMEM (logged). */
int cuda_bk_host_scratch(struct tide_backend *bk, size_t bytes, const char *op, void **out);
/* Copy `bytes` of host memory to device memory on the compute stream. The
 * host memory may be reused as soon as this returns. */
int cuda_bk_upload(struct tide_backend *bk, void *dst, const void *src, size_t bytes,
                   const char *op);
/* Round up to a multiple of 256 bytes (cuBLAS and vector loads like that alignment). */
static inline size_t cuda_bk_align(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* ---- pinned rings (offload.c) ------------------------------------------ */

/* Allocate a ring of n_seg segments of seg_bytes on `stream`. TIDE_OK, or a
 * status after logging; the ring is then empty (host == NULL). */
int cuda_ring_init(struct cuda_ring *r, size_t seg_bytes, int n_seg, cudaStream_t stream,
                   const char *what);
void cuda_ring_free(struct cuda_ring *r);
/* Reserve `bytes` (<= seg_bytes) of pinned memory for a copy that the caller
 * issues on the ring's stream right away. Waits for the copies that last read
 * the segment. *out is NULL when the ring is absent or bytes > seg_bytes. */
int cuda_ring_reserve(struct cuda_ring *r, size_t bytes, void **out);

/* ---- timers (offload.c) ------------------------------------------------ */

/* Record the start of a timed span on `stream`; *slot identifies it. */
int cuda_timer_begin(struct cuda_timer *t, cudaStream_t stream, int *slot);
/* Record its end; the span is then pending until harvested. */
int cuda_timer_end(struct cuda_timer *t, cudaStream_t stream, int slot);
/* Add completed spans into t->seconds (all of them when `wait`). */
int cuda_timer_harvest(struct cuda_timer *t, bool wait);
void cuda_timer_free(struct cuda_timer *t);

/* ---- ops (backend.h documents each) ------------------------------------ */

int cuda_bk_gemm(struct tide_backend *bk, const void *x, int64_t ldx, const void *w, int64_t n,
                 int64_t k, int64_t t, float *y, int64_t ldy, const char *op);
int cuda_bk_embed(struct tide_backend *bk, const struct tide_weight *table, const int32_t *ids,
                  int64_t n, const struct tide_tensor *out);
int cuda_bk_matmul(struct tide_backend *bk, const struct tide_tensor *x,
                   const struct tide_weight *w, const struct tide_tensor *y);
int cuda_bk_rmsnorm(struct tide_backend *bk, const struct tide_tensor *x,
                    const struct tide_weight *w, int group, float eps, const struct tide_tensor *y);
int cuda_bk_rope(struct tide_backend *bk, const struct tide_tensor *x, int head_dim, int rot_dim,
                 float theta, int64_t pos0);
int cuda_bk_attention(struct tide_backend *bk, const struct tide_attn_args *a);
int cuda_bk_swiglu(struct tide_backend *bk, const struct tide_tensor *g,
                   const struct tide_tensor *u, const struct tide_tensor *out);
int cuda_bk_add(struct tide_backend *bk, const struct tide_tensor *acc,
                const struct tide_tensor *x);
int cuda_bk_convert(struct tide_backend *bk, const struct tide_tensor *src,
                    const struct tide_tensor *dst);
int cuda_bk_router(struct tide_backend *bk, const struct tide_router_args *a);
int cuda_bk_expert_ffn(struct tide_backend *bk, const struct tide_expert *e,
                       const struct tide_tensor *x_all, const int32_t *rows,
                       const int32_t *dst_rows, int64_t n, const struct tide_tensor *out);
int cuda_bk_expert_ffn_batch(struct tide_backend *bk, int n_experts,
                             const struct tide_expert *const *experts,
                             const struct tide_tensor *x_all, const int32_t *rows,
                             const int32_t *dst_rows, const int64_t *offsets,
                             const struct tide_tensor *out);
int cuda_bk_moe_combine(struct tide_backend *bk, const struct tide_tensor *parts, const float *w,
                        int k, const struct tide_tensor *y);
int cuda_bk_gather_rows(struct tide_backend *bk, const struct tide_tensor *src, const int32_t *rows,
                        int64_t n, const struct tide_tensor *dst);
int cuda_bk_scatter_rows(struct tide_backend *bk, const struct tide_tensor *src,
                         const int32_t *rows, int64_t n, const struct tide_tensor *dst);

/* Offload (offload.c). */
int cuda_bk_slot_create(struct tide_backend *bk, int64_t hidden, int64_t inter,
                        struct tide_expert **out);
int cuda_bk_slot_create_q(struct tide_backend *bk, int64_t hidden, int64_t inter, int qfmt,
                          const int qblock[2], struct tide_expert **out);
int cuda_bk_slot_load(struct tide_backend *bk, struct tide_expert *slot,
                      const struct tide_view *gate, const struct tide_view *up,
                      const struct tide_view *down);
int cuda_bk_copy_sync(struct tide_backend *bk);
int cuda_bk_timings(struct tide_backend *bk, double *copy_seconds, double *expert_seconds);
/* Validate the three views of an expert for `op` and return its sizes: all
 * bf16 (qfmt NONE), or all of format qfmt with blocks qblock (checked with
 * tide_qview_check). TIDE_OK, or TIDE_E_INVAL naming the tensor (logged). */
int cuda_bk_check_expert_views(const char *op, int qfmt, const int qblock[2],
                               const struct tide_view *gate, const struct tide_view *up,
                               const struct tide_view *down, int64_t *hidden, int64_t *inter);
/* Allocate an expert's device memory (zero-filled) for bf16 (qfmt NONE) or a
 * quantized format and, for a slot, its events. */
int cuda_bk_expert_alloc(struct tide_backend *bk, int64_t hidden, int64_t inter, int qfmt,
                         const int qblock[2], bool slot, const char *op, struct tide_expert **out);
/* Copy the three views' bytes (values and scales when quantized) into e's
 * device memory: on the compute stream with a wait (`sync`), or as a
 * promotion on the copy stream. */
int cuda_bk_expert_fill(struct tide_backend *bk, struct tide_expert *e,
                        const struct tide_view *const v[3], bool sync, const char *op);
/* Copy host [src, src+bytes) to device dst on the copy stream (a promotion). */
int cuda_bk_promote(struct tide_backend *bk, char *dst, const char *src, size_t bytes);
void cuda_bk_expert_destroy(struct tide_backend *bk, struct tide_expert *e);
/* Unregister every page-locked promotion source. */
void cuda_bk_unpin_all(struct tide_backend *bk);

#endif
