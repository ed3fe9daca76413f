/* Compute backend interface (struct tide_backend_ops, version 1).
 *
 * A backend owns memory (buffers) and executes ops in issue order on its
 * compute queue. The CPU backend runs each op inline; an asynchronous backend
 * (CUDA) enqueues it, and `read` / `sync` wait. The model plugin drives these
 * ops for its forward pass; the core's MoE dispatcher drives the expert ops.
 *
 * Conventions for every op:
 *  - Tensors are 2-D row-major strided views (struct tide_tensor) of buffers
 *    allocated by the same backend instance.
 *  - Activations are f32 unless stated; inputs of matmuls are bf16, as in the
 *    bf16 reference model (the rounding points are part of the semantics the
 *    numpy reference in tests/reference implements).
 *  - Ops return TIDE_OK or a negative enum tide_status, after logging.
 *  - Threading: one thread drives a backend instance at a time.
 *
 * Growth: slots are only ever appended. TIDE_BACKEND_OPS_MIN_SIZE is the size
 * every backend must provide; use TIDE_OPS_HAS for anything beyond it. */
#ifndef TIDE_BACKEND_H
#define TIDE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/option.h"
#include "tide/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tide_backend; /* instance; owned by the core, created by ops->create */
struct tide_buffer;  /* backend memory; freed with buffer_free by whoever allocated it */
struct tide_weight;  /* a weight made available on the backend */
struct tide_expert;  /* one routed expert (gate, up, down) made available on the backend */

/* A 2-D strided view of backend memory. Non-owning. */
struct tide_tensor {
    struct tide_buffer *buf;
    size_t offset; /* bytes from the start of buf */
    enum tide_dtype dtype;
    int64_t rows;
    int64_t cols;
    int64_t stride; /* elements between the starts of consecutive rows, >= cols */
};

/* How a weight will be used, so a backend can choose a layout (prepack). */
enum tide_weight_kind {
    TIDE_WEIGHT_MATMUL = 1, /* [N,K]: y = x W^T */
    TIDE_WEIGHT_VECTOR = 2, /* [C]: norm weights, biases; read as f32 */
    TIDE_WEIGHT_EMBED = 3,  /* [V,H]: rows gathered by id */
};

enum tide_backend_role {
    TIDE_ROLE_DEVICE = 1, /* runs the model forward and resident experts */
    TIDE_ROLE_HOST = 2,   /* runs experts that are not resident */
};

struct tide_backend_args {
    uint32_t size;                /* sizeof(struct tide_backend_args) */
    const struct tide_opts *opts; /* the plugin's own section */
    enum tide_backend_role role;
};

/* Arguments of the attention op. q holds queries for absolute positions
 * pos0 .. pos0+n-1; k_cache/v_cache hold keys and values for positions
 * 0 .. pos0+n-1 (the caller has already written this span). Key j is visible
 * to the query at position p iff floor(j / block) <= floor(p / block). */
struct tide_attn_args {
    uint32_t size;
    const struct tide_tensor *q;       /* f32 [n, n_heads*head_dim] */
    const struct tide_tensor *k_cache; /* f32 [>= pos0+n, n_kv_heads*head_dim] */
    const struct tide_tensor *v_cache; /* f32 [>= pos0+n, n_kv_heads*head_dim] */
    const struct tide_tensor *out;     /* f32 or bf16 [n, n_heads*head_dim] */
    int64_t pos0;
    int64_t n;
    int n_heads;
    int n_kv_heads; /* divides n_heads (GQA) */
    int head_dim;
    int block;   /* block length of the block-causal mask */
    float scale; /* usually 1/sqrt(head_dim) */
};

/* Arguments of the router op: sigmoid scores, selection with bias and
 * group-limited top-k, weights from the unbiased scores. */
struct tide_router_args {
    uint32_t size;
    const struct tide_tensor *logits; /* f32 [n, n_experts] */
    const struct tide_weight *bias;   /* VECTOR [n_experts] (f32) or NULL */
    int n_group;                      /* groups of n_experts/n_group; 1 = no grouping */
    int topk_group;                   /* groups kept */
    int top_k;                        /* experts per token */
    bool norm_topk;                   /* renormalise the k weights to sum 1 */
    float scale;                      /* routed scaling factor applied after */
    int32_t *ids_host;                /* out [n, top_k], by descending biased score */
    float *weights_host;              /* out [n, top_k] */
};

struct tide_backend_ops {
    uint32_t size; /* sizeof(struct tide_backend_ops) the plugin was built with */

    /* Lifecycle. create returns TIDE_OK and *out, or a status (logged). */
    int (*create)(const struct tide_backend_args *args, struct tide_backend **out);
    void (*destroy)(struct tide_backend *bk); /* NULL is a no-op */
    /* One line describing the instance ("oneDNN 2.6.3, 2 threads, avx512_core_bf16"). */
    const char *(*describe)(const struct tide_backend *bk);

    /* Memory. Buffers are zero-filled. host_ptr returns NULL when the memory
     * is not host-addressable. */
    int (*buffer_alloc)(struct tide_backend *bk, size_t bytes, struct tide_buffer **out);
    void (*buffer_free)(struct tide_backend *bk, struct tide_buffer *buf);
    void *(*buffer_host_ptr)(struct tide_backend *bk, struct tide_buffer *buf);
    /* Host <-> backend copies of a whole tensor view (host side is packed
     * rows of cols elements). read waits for all prior work. */
    int (*write)(struct tide_backend *bk, const struct tide_tensor *dst, const void *src);
    int (*read)(struct tide_backend *bk, const struct tide_tensor *src, void *dst);

    /* Weights. The view's memory (usually the mmapped checkpoint) outlives the
     * weight. A backend may alias it (no copy), upload it, or repack it. */
    int (*weight_create)(struct tide_backend *bk, const struct tide_view *src,
                         enum tide_weight_kind kind, struct tide_weight **out);
    void (*weight_destroy)(struct tide_backend *bk, struct tide_weight *w);
    /* A routed expert: gate [I,H], up [I,H], down [H,I], all bf16, or all
     * in one block-quantized format (tide/quant.h: view->qfmt set, scales in
     * view->scale). A backend that cannot run a format refuses it, naming the
     * tensor. */
    int (*expert_create)(struct tide_backend *bk, const struct tide_view *gate,
                         const struct tide_view *up, const struct tide_view *down,
                         struct tide_expert **out);
    void (*expert_destroy)(struct tide_backend *bk, struct tide_expert *e);

    /* Ops. */
    /* out[i] = table[ids[i]] as f32; ids are host memory, checked < V. */
    int (*embed)(struct tide_backend *bk, const struct tide_weight *table, const int32_t *ids,
                 int64_t n, const struct tide_tensor *out);
    /* y = x W^T; x bf16 [T,K], W MATMUL [N,K], y f32 [T,N]. fp32 accumulation. */
    int (*matmul)(struct tide_backend *bk, const struct tide_tensor *x, const struct tide_weight *w,
                  const struct tide_tensor *y);
    /* RMSNorm over each run of `group` columns (group = cols for a whole row,
     * head_dim for per-head norms): y = x * rsqrt(mean(x^2) + eps) * w, with
     * w a VECTOR of length group. y is f32 or bf16 (then rounded once). */
    int (*rmsnorm)(struct tide_backend *bk, const struct tide_tensor *x,
                   const struct tide_weight *w, int group, float eps, const struct tide_tensor *y);
    /* Rotate-half RoPE in place on the first rot_dim dims of each head of
     * width head_dim; row i has position pos0 + i. Angles in f32:
     * pos * theta^(-2j/rot_dim). */
    int (*rope)(struct tide_backend *bk, const struct tide_tensor *x, int head_dim, int rot_dim,
                float theta, int64_t pos0);
    int (*attention)(struct tide_backend *bk, const struct tide_attn_args *a);
    /* out = silu(g) * u; g, u f32 [T,I]; out bf16 [T,I]. */
    int (*swiglu)(struct tide_backend *bk, const struct tide_tensor *g, const struct tide_tensor *u,
                  const struct tide_tensor *out);
    /* acc += x; both f32, same shape. */
    int (*add)(struct tide_backend *bk, const struct tide_tensor *acc, const struct tide_tensor *x);
    /* dst = src with dtype conversion (f32 <-> bf16, or same-type copy); same shape. */
    int (*convert)(struct tide_backend *bk, const struct tide_tensor *src,
                   const struct tide_tensor *dst);
    int (*router)(struct tide_backend *bk, const struct tide_router_args *a);
    /* For i < n: out[dst_rows[i]] = down(silu(gate x) * up x) with x = x_all[rows[i]].
     * x_all bf16 [T,H]; out f32 [R,H]; rows and dst_rows are host arrays. */
    int (*expert_ffn)(struct tide_backend *bk, const struct tide_expert *e,
                      const struct tide_tensor *x_all, const int32_t *rows, const int32_t *dst_rows,
                      int64_t n, const struct tide_tensor *out);
    /* y[t] = sum_{j<k} w[t*k+j] * parts[t*k+j], summed in order j = 0..k-1.
     * parts f32 [T*k,H]; w host [T*k]; y f32 [T,H]. */
    int (*moe_combine)(struct tide_backend *bk, const struct tide_tensor *parts, const float *w,
                       int k, const struct tide_tensor *y);
    /* Wait until all issued work is complete. */
    int (*sync)(struct tide_backend *bk);

    /* ---- Expert offload. Optional: beyond TIDE_BACKEND_OPS_MIN_SIZE. ---- */

    /* An empty expert slot (gate, up [inter, hidden], down [hidden, inter],
     * bf16) in this backend's memory. Destroy with expert_destroy. */
    int (*slot_create)(struct tide_backend *bk, int64_t hidden, int64_t inter,
                       struct tide_expert **out);
    /* Promotion: copy an expert's host weights into a slot. May be
     * asynchronous (a copy queue); the backend orders it after every earlier
     * op that reads the slot and before every later op that reads it. The
     * views must stay valid until copy_sync returns. */
    int (*slot_load)(struct tide_backend *bk, struct tide_expert *slot,
                     const struct tide_view *gate, const struct tide_view *up,
                     const struct tide_view *down);
    /* dst[i] = src[rows[i]] for i < n; dst packed [n, cols]; rows on the host. */
    int (*gather_rows)(struct tide_backend *bk, const struct tide_tensor *src, const int32_t *rows,
                       int64_t n, const struct tide_tensor *dst);
    /* dst[rows[i]] = src[i] for i < n; src packed [n, cols]; rows on the host. */
    int (*scatter_rows)(struct tide_backend *bk, const struct tide_tensor *src, const int32_t *rows,
                        int64_t n, const struct tide_tensor *dst);
    /* Wait until every issued slot_load has landed. */
    int (*copy_sync)(struct tide_backend *bk);
    /* Cumulative timings since create (seconds, measured with events on an
     * asynchronous backend): promotions busy, expert FFN compute. May be NULL. */
    int (*timings)(struct tide_backend *bk, double *copy_seconds, double *expert_seconds);
    /* Memory this backend can still allocate, and its total, in bytes (for a
     * host backend: available and total RAM). */
    int (*mem_info)(struct tide_backend *bk, uint64_t *free_bytes, uint64_t *total_bytes);

    /* ---- Appended: optional. ---- */

    /* Several experts in one call: for j < n_experts, what expert_ffn(experts[j],
     * x_all, rows + offsets[j], dst_rows + offsets[j], offsets[j+1] - offsets[j],
     * out) computes, bit for bit. The experts' dst_rows are distinct, so a
     * backend may run them concurrently (and fetch the next one's weights
     * ahead). offsets [n_experts + 1], rows, dst_rows and experts are host
     * arrays; offsets[0] = 0 and it never decreases. */
    int (*expert_ffn_batch)(struct tide_backend *bk, int n_experts,
                            const struct tide_expert *const *experts,
                            const struct tide_tensor *x_all, const int32_t *rows,
                            const int32_t *dst_rows, const int64_t *offsets,
                            const struct tide_tensor *out);

    /* An empty expert slot for experts of block-quantized format qfmt
     * (tide/quant.h) with blocks of qblock[0] x qblock[1]; slot_load then
     * takes views of that format only. TIDE_QFMT_NONE is slot_create. A
     * backend without it offloads bf16 experts only. */
    int (*slot_create_q)(struct tide_backend *bk, int64_t hidden, int64_t inter, int qfmt,
                         const int qblock[2], struct tide_expert **out);

    /* A buffer over `bytes` of the caller's host memory at `host`, which the
     * backend's ops then read and write in place (no copy): a model's output
     * layer writes the caller's logits directly. buffer_free releases the
     * buffer, never the memory, which must outlive it; no alignment is
     * required. Only for a backend whose memory is host memory; others leave
     * it NULL (callers then compute into a buffer of their own and read). */
    int (*buffer_wrap)(struct tide_backend *bk, void *host, size_t bytes, struct tide_buffer **out);

    /* A round of the engine loop begins or ends: one forward of the model
     * and the sampling that reads its logits (parallel). Inside a round a
     * backend may keep its threads ready between ops (one team per forward:
     * a forward costs a handful of wake-ups, not one per op); outside one it
     * must leave no CPU busy. Rounds of two instances may overlap (device and
     * host roles); they are counted. */
    void (*round_begin)(struct tide_backend *bk);
    void (*round_end)(struct tide_backend *bk);
    /* Run fn(ctx, tid, nt) for tid = 0 .. nt-1 on the backend's CPU threads,
     * the caller as tid 0, nt at most nt_max, and return when every one has
     * (host work the engine hands it: the decoders' sampling). A host
     * backend's only; NULL elsewhere. */
    void (*parallel)(struct tide_backend *bk, int nt_max, void (*fn)(void *ctx, int tid, int nt),
                     void *ctx);
};

#define TIDE_BACKEND_OPS_MIN_SIZE (offsetof(struct tide_backend_ops, sync) + sizeof(void (*)(void)))

/* A backend instance with its ops, as handed to models and the dispatcher. */
struct tide_backend_ref {
    const struct tide_backend_ops *ops;
    struct tide_backend *bk;
    const char *name; /* plugin name */
};

/* A packed, contiguous view: offset 0, stride = cols. */
static inline struct tide_tensor tide_tensor_2d(struct tide_buffer *buf, enum tide_dtype t,
                                                int64_t rows, int64_t cols)
{
    struct tide_tensor x;
    x.buf = buf;
    x.offset = 0;
    x.dtype = t;
    x.rows = rows;
    x.cols = cols;
    x.stride = cols;
    return x;
}

/* Rows [r0, r0+n) and columns [c0, c0+m) of a view. */
static inline struct tide_tensor tide_tensor_slice(const struct tide_tensor *x, int64_t r0,
                                                   int64_t n, int64_t c0, int64_t m)
{
    struct tide_tensor s = *x;
    s.offset += (size_t)(r0 * x->stride + c0) * tide_dtype_size(x->dtype);
    s.rows = n;
    s.cols = m;
    return s;
}

#ifdef __cplusplus
}
#endif
#endif
