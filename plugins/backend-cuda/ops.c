/* backend-cuda ops: argument checks on the host, then cuBLAS or a kernel of
 * kernels.cu enqueued on the compute stream. Host arrays (ids, row maps,
 * routing weights) are uploaded through the pinned ring before the op
 * returns. The router's top-k runs on the host over the logits it copies
 * back, with the same f32 code path as the CPU backend, so both pick the
 * same experts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend-common/route.h"
#include "cuda_bk.h"
#include "cuda_kernels.h"

/* Log a failed kernel launch. */
#define CUDA_BK_LAUNCH(op, call) CUDA_BK_TRY(op, call)

/* Elements between rows of a view. */
static int64_t ld(const struct tide_tensor *t)
{
    return t->stride;
}

/* Row-major y[t,n] = x[t,k] W[n,k]^T with x and W of type `dt` (bf16 or
 * f32), y f32, f32 accumulation. */
static int cuda_bk_gemm_dt(struct tide_backend *bk, cudaDataType dt, const void *x, int64_t ldx,
                           const void *w, int64_t n, int64_t k, int64_t t, float *y, int64_t ldy,
                           const char *op)
{
    if (t == 0 || n == 0)
        return TIDE_OK;
    if (t > INT32_MAX || n > INT32_MAX || k > INT32_MAX || ldx > INT32_MAX || ldy > INT32_MAX)
        return cuda_bk_inval(op, "a %lldx%lldx%lld product exceeds cuBLAS's 32-bit sizes",
                             (long long)t, (long long)n, (long long)k);
    /* Row-major y[t,n] = x[t,k] W[n,k]^T is column-major y^T = W x^T: W is a
     * column-major [k,n] matrix read transposed, x^T a column-major [k,t].
     * With f32 inputs, CUBLAS_COMPUTE_32F and the handle's default math mode
     * cuBLAS multiplies in full f32 (no TF32). */
    const float one = 1.0f, zero = 0.0f;
    CUDA_BK_BLAS_TRY(op, cublasGemmEx(bk->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)t, (int)k,
                                      &one, w, dt, (int)k, x, dt, (int)ldx, &zero, y, CUDA_R_32F,
                                      (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return TIDE_OK;
}

int cuda_bk_gemm(struct tide_backend *bk, const void *x, int64_t ldx, const void *w, int64_t n,
                 int64_t k, int64_t t, float *y, int64_t ldy, const char *op)
{
    return cuda_bk_gemm_dt(bk, CUDA_R_16BF, x, ldx, w, n, k, t, y, ldy, op);
}

int cuda_bk_matmul(struct tide_backend *bk, const struct tide_tensor *x,
                   const struct tide_weight *w, const struct tide_tensor *y)
{
    const char *op = "matmul";
    int rc = bkc_check_matmul(&cuda_bk_id, x, w, y);
    if (rc || (rc = cuda_bk_enter(bk, op)))
        return rc;
    return cuda_bk_gemm(bk, cuda_bk_at(x, 0, 0), ld(x), w->dev, w->rows, w->cols, x->rows,
                        cuda_bk_at(y, 0, 0), ld(y), op);
}

int cuda_bk_embed(struct tide_backend *bk, const struct tide_weight *table, const int32_t *ids,
                  int64_t n, const struct tide_tensor *out)
{
    const char *op = "embed";
    int rc = bkc_check_embed(&cuda_bk_id, table, ids, n, out);
    if (rc)
        return rc;
    if (n == 0)
        return TIDE_OK;
    void *dids;
    if ((rc = cuda_bk_enter(bk, op)) ||
        (rc = cuda_bk_scratch(bk, sizeof(int32_t) * (size_t)n, op, &dids)) ||
        (rc = cuda_bk_upload(bk, dids, ids, sizeof(int32_t) * (size_t)n, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_embed(bk->compute, table->dev, (int)table->dtype, table->cols, dids,
                                    n, cuda_bk_at(out, 0, 0), ld(out)));
    return TIDE_OK;
}

int cuda_bk_rmsnorm(struct tide_backend *bk, const struct tide_tensor *x,
                    const struct tide_weight *w, int group, float eps, const struct tide_tensor *y)
{
    const char *op = "rmsnorm";
    int rc = bkc_check_rmsnorm(&cuda_bk_id, x, w, group, eps, y);
    if (rc || (rc = cuda_bk_enter(bk, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_rmsnorm(bk->compute, cuda_bk_at(x, 0, 0), x->dtype == TIDE_DTYPE_BF16,
                                      ld(x), w->dev, group, eps, cuda_bk_at(y, 0, 0),
                                      y->dtype == TIDE_DTYPE_BF16, ld(y), x->rows, x->cols));
    return TIDE_OK;
}

int cuda_bk_rope(struct tide_backend *bk, const struct tide_tensor *x, int head_dim, int rot_dim,
                 float theta, int64_t pos0)
{
    const char *op = "rope";
    int rc = bkc_check_rope(&cuda_bk_id, x, head_dim, rot_dim, theta, pos0);
    if (rc)
        return rc;
    if (rot_dim / 2 > CUDA_K_ROPE_MAX_HALF) {
        tide_error(CUDA_BK_NAME ": rope: rot_dim %d exceeds the %d this backend supports", rot_dim,
                   2 * CUDA_K_ROPE_MAX_HALF);
        return TIDE_E_UNSUPPORTED;
    }
    if (rot_dim == 0)
        return TIDE_OK;
    const int half = rot_dim / 2;
    struct cuda_k_rope_freqs f;
    memset(&f, 0, sizeof f);
    for (int j = 0; j < half; j++)
        f.inv[j] = (float)pow((double)theta, -2.0 * j / rot_dim);
    if ((rc = cuda_bk_enter(bk, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_rope(bk->compute, cuda_bk_at(x, 0, 0), ld(x), x->rows,
                                   x->cols / head_dim, head_dim, half, &f, pos0));
    return TIDE_OK;
}

/* Most bytes of attention scores in scratch at once (grid * context floats). */
#define CUDA_BK_ATTN_SCRATCH ((size_t)64 << 20)

int cuda_bk_attention(struct tide_backend *bk, const struct tide_attn_args *a)
{
    int rc = bkc_check_attention(&cuda_bk_id, a);
    if (rc || a->n == 0)
        return rc;
    const char *op = "attention";
    const int64_t total = a->pos0 + a->n, pairs = a->n * a->n_heads;
    int64_t grid = (int64_t)(CUDA_BK_ATTN_SCRATCH / (sizeof(float) * (size_t)total));
    grid = grid < 1 ? 1 : grid > pairs ? pairs : grid;
    void *scores;
    if ((rc = cuda_bk_enter(bk, op)) ||
        (rc = cuda_bk_scratch(bk, sizeof(float) * (size_t)(grid * total), op, &scores)))
        return rc;
    const struct cuda_k_attn k = {
        .q = cuda_bk_at(a->q, 0, 0),
        .k = cuda_bk_at(a->k_cache, 0, 0),
        .v = cuda_bk_at(a->v_cache, 0, 0),
        .out = cuda_bk_at(a->out, 0, 0),
        .ldq = ld(a->q),
        .ldk = ld(a->k_cache),
        .ldv = ld(a->v_cache),
        .ldo = ld(a->out),
        .out_bf16 = a->out->dtype == TIDE_DTYPE_BF16,
        .pos0 = a->pos0,
        .n = a->n,
        .total = total,
        .n_heads = a->n_heads,
        .group = a->n_heads / a->n_kv_heads,
        .head_dim = a->head_dim,
        .block = a->block,
        .scale = a->scale,
    };
    CUDA_BK_LAUNCH(op, cuda_k_attention(bk->compute, &k, scores, grid));
    return TIDE_OK;
}

int cuda_bk_swiglu(struct tide_backend *bk, const struct tide_tensor *g,
                   const struct tide_tensor *u, const struct tide_tensor *out)
{
    const char *op = "swiglu";
    int rc = bkc_check_swiglu(&cuda_bk_id, g, u, out);
    if (rc || (rc = cuda_bk_enter(bk, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_swiglu(bk->compute, cuda_bk_at(g, 0, 0), ld(g), cuda_bk_at(u, 0, 0),
                                     ld(u), cuda_bk_at(out, 0, 0), ld(out), g->rows, g->cols));
    return TIDE_OK;
}

int cuda_bk_add(struct tide_backend *bk, const struct tide_tensor *acc, const struct tide_tensor *x)
{
    const char *op = "add";
    int rc = bkc_check_add(&cuda_bk_id, acc, x);
    if (rc || (rc = cuda_bk_enter(bk, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_add(bk->compute, cuda_bk_at(acc, 0, 0), ld(acc), cuda_bk_at(x, 0, 0),
                                  ld(x), acc->rows, acc->cols));
    return TIDE_OK;
}

/* Do the byte ranges of two views of the same buffer intersect? */
static bool cuda_bk_overlap(const struct tide_tensor *a, const struct tide_tensor *b)
{
    if (a->buf != b->buf || !a->rows || !a->cols || !b->rows || !b->cols)
        return false;
    size_t ae =
        a->offset + (size_t)((a->rows - 1) * a->stride + a->cols) * tide_dtype_size(a->dtype);
    size_t be =
        b->offset + (size_t)((b->rows - 1) * b->stride + b->cols) * tide_dtype_size(b->dtype);
    return a->offset < be && b->offset < ae;
}

int cuda_bk_convert(struct tide_backend *bk, const struct tide_tensor *src,
                    const struct tide_tensor *dst)
{
    const char *op = "convert";
    int rc = bkc_check_convert(&cuda_bk_id, src, dst);
    if (rc)
        return rc;
    const bool same = src->dtype == dst->dtype;
    if (src->rows == 0 || src->cols == 0)
        return TIDE_OK;
    if (same && src->buf == dst->buf && src->offset == dst->offset && src->stride == dst->stride)
        return TIDE_OK; /* the view onto itself */
    if ((rc = cuda_bk_enter(bk, op)))
        return rc;
    const size_t ses = tide_dtype_size(src->dtype), row = (size_t)src->cols * ses;
    const void *from = cuda_bk_at(src, 0, 0);
    int64_t from_ld = ld(src);
    if (cuda_bk_overlap(src, dst)) {
        /* Copy the source aside first: in-place rows must read the old values. */
        void *tmp;
        if ((rc = cuda_bk_scratch(bk, row * (size_t)src->rows, op, &tmp)))
            return rc;
        CUDA_BK_TRY(op,
                    cudaMemcpy2DAsync(tmp, row, from, (size_t)from_ld * ses, row, (size_t)src->rows,
                                      cudaMemcpyDeviceToDevice, bk->compute));
        from = tmp;
        from_ld = src->cols;
    }
    if (same) {
        CUDA_BK_TRY(op, cudaMemcpy2DAsync(cuda_bk_at(dst, 0, 0), (size_t)ld(dst) * ses, from,
                                          (size_t)from_ld * ses, row, (size_t)src->rows,
                                          cudaMemcpyDeviceToDevice, bk->compute));
        return TIDE_OK;
    }
    CUDA_BK_LAUNCH(op, cuda_k_convert(bk->compute, from, src->dtype == TIDE_DTYPE_BF16, from_ld,
                                      cuda_bk_at(dst, 0, 0), dst->dtype == TIDE_DTYPE_BF16, ld(dst),
                                      src->rows, src->cols));
    return TIDE_OK;
}

/* ---- router (host top-k) ------------------------------------------------ */

int cuda_bk_router(struct tide_backend *bk, const struct tide_router_args *a)
{
    const char *op = "router";
    int rc = bkc_check_router(&cuda_bk_id, a);
    if (rc)
        return rc;
    const int64_t n = a->logits->rows;
    const int E = (int)a->logits->cols, G = a->n_group;
    if (n == 0)
        return TIDE_OK;
    /* Host scratch: logits [n,E] | s, sel [E] | gs [G] | taken [E] | gt [G]. */
    const size_t lb = sizeof(float) * (size_t)(n * E), fl = sizeof(float) * (size_t)(2 * E + G);
    void *hs;
    if ((rc = cuda_bk_enter(bk, op)) ||
        (rc = cuda_bk_host_scratch(bk, lb + fl + (size_t)(E + G), op, &hs)))
        return rc;
    float *logits = hs, *s = (float *)((char *)hs + lb);
    unsigned char *taken = (unsigned char *)s + fl;
    CUDA_BK_TRY(op,
                cudaMemcpy2DAsync(logits, sizeof(float) * (size_t)E, cuda_bk_at(a->logits, 0, 0),
                                  sizeof(float) * (size_t)ld(a->logits), sizeof(float) * (size_t)E,
                                  (size_t)n, cudaMemcpyDeviceToHost, bk->compute));
    CUDA_BK_TRY(op, cudaStreamSynchronize(bk->compute));
    const float *bias = a->bias ? a->bias->host_vec : NULL;
    for (int64_t t = 0; t < n; t++)
        bkc_route_token(a, logits + t * E, bias, E, s, s + E, taken, s + 2 * E, taken + E,
                        a->ids_host + t * a->top_k, a->weights_host + t * a->top_k);
    /* The stream is idle: a good moment to fold in the finished expert timings. */
    return cuda_timer_harvest(&bk->expert_timer, false);
}

/* ---- rows, experts, combine -------------------------------------------- */

struct cuda_bk_pair {
    int32_t row; /* destination row */
    int32_t i;   /* source index */
};

static int cuda_bk_pair_cmp(const void *pa, const void *pb)
{
    const struct cuda_bk_pair *a = pa, *b = pb;
    if (a->row != b->row)
        return a->row < b->row ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* Scatter maps for "dst[rows[i]] = src[i], i = 0..n-1 in order": where a row
 * is named twice the later i wins, as in a sequential loop. Fills smap/dmap
 * (host, n entries each) with the m <= n kept pairs, all rows distinct. */
static int cuda_bk_scatter_maps(struct tide_backend *bk, const int32_t *rows, int64_t n,
                                int32_t *smap, int32_t *dmap, int64_t *m, const char *op)
{
    bool sorted = true;
    for (int64_t i = 1; i < n && sorted; i++)
        sorted = rows[i] > rows[i - 1];
    if (sorted) { /* strictly increasing: distinct already (the usual case) */
        for (int64_t i = 0; i < n; i++) {
            smap[i] = (int32_t)i;
            dmap[i] = rows[i];
        }
        *m = n;
        return TIDE_OK;
    }
    struct cuda_bk_pair *p = malloc(sizeof *p * (size_t)(n ? n : 1));
    if (!p) {
        tide_error(CUDA_BK_NAME ": %s: out of memory for %lld row indices", op, (long long)n);
        return TIDE_E_NOMEM;
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = (struct cuda_bk_pair){.row = rows[i], .i = (int32_t)i};
    qsort(p, (size_t)n, sizeof *p, cuda_bk_pair_cmp);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + 1 < n && p[i + 1].row == p[i].row)
            continue; /* a later write to the same row follows */
        smap[k] = p[i].i;
        dmap[k] = p[i].row;
        k++;
    }
    free(p);
    *m = k;
    return TIDE_OK;
}

/* Matrix j (0 gate, 1 up, 2 down) of a quantized expert, for the kernels. */
static struct cuda_qmat cuda_bk_qmat(const struct tide_expert *e, int j)
{
    const struct cuda_qpart *p = &e->part[j];
    struct cuda_qmat m = {
        .values = (const char *)e->dev + p->values,
        .scales = (const char *)e->dev + p->scales,
        .fmt = e->qfmt,
        .br = e->qblock[0],
        .bc = e->qblock[1],
        .rows = p->rows,
        .cols = p->cols,
        .scols = p->scols,
    };
    return m;
}

/* y [n, R] = x [n, C] W^T, W the quantized matrices j0 .. j0+np-1 of e
 * stacked by rows (gate and up: [2I, H]); x bf16 packed, y f32 with row
 * stride ldy. Up to CUDA_K_QGEMV_ROWS rows the kernel decodes W on the fly
 * and reads it once; beyond that W is decoded into f32 scratch wf [R, C]
 * once, x converted into xf [n, C], and cuBLAS multiplies in f32. */
static int cuda_bk_qproduct(struct tide_backend *bk, const struct tide_expert *e, int j0, int np,
                            const uint16_t *x, int64_t n, float *y, int64_t ldy, float *wf,
                            float *xf, const char *op)
{
    const int64_t C = e->part[j0].cols;
    int64_t R = 0;
    for (int j = j0; j < j0 + np; j++) {
        const struct cuda_qmat m = cuda_bk_qmat(e, j);
        if (n <= CUDA_K_QGEMV_ROWS)
            CUDA_BK_LAUNCH(op, cuda_k_qgemv(bk->compute, &m, x, C, n, y + R, ldy));
        else
            CUDA_BK_LAUNCH(op, cuda_k_qdequant(bk->compute, &m, wf + R * C, C));
        R += m.rows;
    }
    if (n <= CUDA_K_QGEMV_ROWS)
        return TIDE_OK;
    CUDA_BK_LAUNCH(op, cuda_k_convert(bk->compute, x, true, C, xf, false, C, n, C));
    return cuda_bk_gemm_dt(bk, CUDA_R_32F, xf, C, wf, R, C, n, y, ldy, op);
}

/* expert_ffn's argument checks, for `op`. */
static int cuda_bk_ffn_check(const char *op, const struct tide_expert *e,
                             const struct tide_tensor *x_all, const int32_t *rows,
                             const int32_t *dst_rows, int64_t n, const struct tide_tensor *out)
{
    int rc = cuda_bk_check_expert(op, e);
    if (!rc)
        rc = bkc_check_ffn_io(&cuda_bk_id, e->hidden, x_all, out);
    if (!rc)
        rc = cuda_bk_check_rows(op, "rows", rows, n, x_all->rows);
    if (!rc)
        rc = cuda_bk_check_rows(op, "dst_rows", dst_rows, n, out->rows);
    return rc;
}

/* expert_ffn once its arguments are checked. */
static int cuda_bk_ffn_run(struct tide_backend *bk, const struct tide_expert *e,
                           const struct tide_tensor *x_all, const int32_t *rows,
                           const int32_t *dst_rows, int64_t n, const struct tide_tensor *out,
                           const char *op)
{
    if (n == 0)
        return TIDE_OK;
    const int64_t H = e->hidden, I = e->inter;
    const bool quant = e->qfmt != TIDE_QFMT_NONE, dequant = quant && n > CUDA_K_QGEMV_ROWS;
    /* Host maps: rows [n] | smap [n] | dmap [n]; device: the same, then
     * x [n,H] bf16 | gate,up [n,2I] f32 | h [n,I] bf16 | y [n,H] f32, and for
     * a quantized expert of many rows the decoded weights w [3*I*H] f32
     * (gate, up [2I,H], then down [H,I]) | x [n,H] f32 | h [n,I] f32. */
    const size_t mb = sizeof(int32_t) * (size_t)(3 * n);
    const size_t bm = cuda_bk_align(mb), bx = cuda_bk_align(sizeof(uint16_t) * (size_t)(n * H));
    const size_t bgu = cuda_bk_align(sizeof(float) * (size_t)(n * 2 * I));
    const size_t bh = cuda_bk_align(sizeof(uint16_t) * (size_t)(n * I));
    const size_t by = cuda_bk_align(sizeof(float) * (size_t)(n * H));
    const size_t bw = dequant ? cuda_bk_align(sizeof(float) * (size_t)(3 * I * H)) : 0;
    const size_t bxf = dequant ? cuda_bk_align(sizeof(float) * (size_t)(n * H)) : 0;
    const size_t bhf = dequant ? sizeof(float) * (size_t)(n * I) : 0;
    void *hm, *dev;
    int64_t m = 0;
    int rc;
    if ((rc = cuda_bk_enter(bk, op)) || (rc = cuda_bk_host_scratch(bk, mb, op, &hm)))
        return rc;
    int32_t *hmap = hm;
    memcpy(hmap, rows, sizeof(int32_t) * (size_t)n);
    if ((rc = cuda_bk_scatter_maps(bk, dst_rows, n, hmap + n, hmap + 2 * n, &m, op)) ||
        (rc = cuda_bk_scratch(bk, bm + bx + bgu + bh + by + bw + bxf + bhf, op, &dev)) ||
        (rc = cuda_bk_upload(bk, dev, hmap, mb, op)))
        return rc;
    const int32_t *drows = dev, *dsmap = drows + n, *ddmap = drows + 2 * n;
    uint16_t *xs = (uint16_t *)((char *)dev + bm);
    float *gu = (float *)((char *)xs + bx);
    uint16_t *hs = (uint16_t *)((char *)gu + bgu);
    float *ys = (float *)((char *)hs + bh);
    float *wf = (float *)((char *)ys + by);
    float *xf = (float *)((char *)wf + bw);
    float *hf = (float *)((char *)xf + bxf);
    struct tide_expert *ew = (struct tide_expert *)e; /* its events are bookkeeping */
    int slot;
    if (ew->is_slot && ew->load_recorded) /* use the expert only after its copy landed */
        CUDA_BK_TRY(op, cudaStreamWaitEvent(bk->compute, ew->loaded, 0));
    if ((rc = cuda_timer_begin(&bk->expert_timer, bk->compute, &slot)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_copy_rows(bk->compute, cuda_bk_at(x_all, 0, 0), ld(x_all), drows, xs,
                                        H, NULL, n, H, sizeof(uint16_t)));
    if (quant)
        rc = cuda_bk_qproduct(bk, e, 0, 2, xs, n, gu, 2 * I, wf, xf, op);
    else
        rc = cuda_bk_gemm(bk, xs, H, e->dev, 2 * I, H, n, gu, 2 * I, op);
    if (rc)
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_swiglu(bk->compute, gu, 2 * I, gu + I, 2 * I, hs, I, n, I));
    if (quant) /* down's decoded weights go after gate's and up's */
        rc = cuda_bk_qproduct(bk, e, 2, 1, hs, n, ys, H, wf + 2 * I * H, hf, op);
    else
        rc = cuda_bk_gemm(bk, hs, I, (const uint16_t *)e->dev + 2 * I * H, H, I, n, ys, H, op);
    if (rc)
        return rc;
    if (ew->is_slot) { /* the last read of the slot: a later slot_load waits for this */
        CUDA_BK_TRY(op, cudaEventRecord(ew->used, bk->compute));
        ew->use_recorded = true;
    }
    CUDA_BK_LAUNCH(op, cuda_k_copy_rows(bk->compute, ys, H, dsmap, cuda_bk_at(out, 0, 0), ld(out),
                                        ddmap, m, H, sizeof(float)));
    return cuda_timer_end(&bk->expert_timer, bk->compute, slot);
}

int cuda_bk_expert_ffn(struct tide_backend *bk, const struct tide_expert *e,
                       const struct tide_tensor *x_all, const int32_t *rows,
                       const int32_t *dst_rows, int64_t n, const struct tide_tensor *out)
{
    const char *op = "expert_ffn";
    int rc = cuda_bk_ffn_check(op, e, x_all, rows, dst_rows, n, out);
    return rc ? rc : cuda_bk_ffn_run(bk, e, x_all, rows, dst_rows, n, out, op);
}

/* One expert after the other on the compute stream: exactly what one
 * expert_ffn call each computes. Everything is checked before anything is
 * issued, so a refused call leaves `out` untouched. */
int cuda_bk_expert_ffn_batch(struct tide_backend *bk, int n_experts,
                             const struct tide_expert *const *experts,
                             const struct tide_tensor *x_all, const int32_t *rows,
                             const int32_t *dst_rows, const int64_t *offsets,
                             const struct tide_tensor *out)
{
    const char *op = "expert_ffn_batch";
    int rc = bkc_check_batch_offsets(&cuda_bk_id, n_experts, experts, offsets);
    if (rc)
        return rc;
    for (int j = 0; j < n_experts; j++) {
        if ((rc = cuda_bk_ffn_check(op, experts[j], x_all, rows + offsets[j], dst_rows + offsets[j],
                                    offsets[j + 1] - offsets[j], out)))
            return rc;
    }
    for (int j = 0; j < n_experts; j++)
        if ((rc = cuda_bk_ffn_run(bk, experts[j], x_all, rows + offsets[j], dst_rows + offsets[j],
                                  offsets[j + 1] - offsets[j], out, op)))
            return rc;
    return TIDE_OK;
}

int cuda_bk_moe_combine(struct tide_backend *bk, const struct tide_tensor *parts, const float *w,
                        int k, const struct tide_tensor *y)
{
    const char *op = "moe_combine";
    int rc = bkc_check_moe_combine(&cuda_bk_id, parts, w, k, y);
    if (rc)
        return rc;
    if (y->rows == 0)
        return TIDE_OK;
    const size_t wb = sizeof(float) * (size_t)parts->rows;
    void *dw;
    if ((rc = cuda_bk_enter(bk, op)) || (rc = cuda_bk_scratch(bk, wb, op, &dw)) ||
        (rc = cuda_bk_upload(bk, dw, w, wb, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_combine(bk->compute, cuda_bk_at(parts, 0, 0), ld(parts), dw, k,
                                      cuda_bk_at(y, 0, 0), ld(y), y->rows, y->cols));
    return TIDE_OK;
}

/* Shared checks of gather_rows and scatter_rows: `packed` is the [n, cols]
 * side, `other` the side indexed by rows. */
static int cuda_bk_rows_check(const char *op, const struct tide_tensor *packed, const char *pn,
                              const struct tide_tensor *other, const char *on, const int32_t *rows,
                              int64_t n)
{
    int rc = bkc_check_tensor(&cuda_bk_id, op, pn, packed, BKC_ANY);
    if (!rc)
        rc = bkc_check_tensor(&cuda_bk_id, op, on, other, BKC_ANY);
    if (rc)
        return rc;
    if (packed->dtype != other->dtype || packed->cols != other->cols || n < 0 || packed->rows < n)
        return cuda_bk_inval(op,
                             "%s %s [%lld,%lld] and %s %s [%lld,%lld] must share dtype and "
                             "columns, with at least n = %lld rows in %s",
                             pn, tide_dtype_name(packed->dtype), (long long)packed->rows,
                             (long long)packed->cols, on, tide_dtype_name(other->dtype),
                             (long long)other->rows, (long long)other->cols, (long long)n, pn);
    return cuda_bk_check_rows(op, "rows", rows, n, other->rows);
}

int cuda_bk_gather_rows(struct tide_backend *bk, const struct tide_tensor *src, const int32_t *rows,
                        int64_t n, const struct tide_tensor *dst)
{
    const char *op = "gather_rows";
    int rc = cuda_bk_rows_check(op, dst, "dst", src, "src", rows, n);
    if (rc || n == 0 || src->cols == 0)
        return rc;
    void *dmap;
    if ((rc = cuda_bk_enter(bk, op)) ||
        (rc = cuda_bk_scratch(bk, sizeof(int32_t) * (size_t)n, op, &dmap)) ||
        (rc = cuda_bk_upload(bk, dmap, rows, sizeof(int32_t) * (size_t)n, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_copy_rows(bk->compute, cuda_bk_at(src, 0, 0), ld(src), dmap,
                                        cuda_bk_at(dst, 0, 0), ld(dst), NULL, n, src->cols,
                                        tide_dtype_size(src->dtype)));
    return TIDE_OK;
}

int cuda_bk_scatter_rows(struct tide_backend *bk, const struct tide_tensor *src,
                         const int32_t *rows, int64_t n, const struct tide_tensor *dst)
{
    const char *op = "scatter_rows";
    int rc = cuda_bk_rows_check(op, src, "src", dst, "dst", rows, n);
    if (rc || n == 0 || src->cols == 0)
        return rc;
    const size_t mb = sizeof(int32_t) * (size_t)(2 * n);
    void *hm, *dev;
    int64_t m = 0;
    if ((rc = cuda_bk_enter(bk, op)) || (rc = cuda_bk_host_scratch(bk, mb, op, &hm)))
        return rc;
    int32_t *smap = hm, *dmap = smap + n;
    if ((rc = cuda_bk_scatter_maps(bk, rows, n, smap, dmap, &m, op)) ||
        (rc = cuda_bk_scratch(bk, mb, op, &dev)) || (rc = cuda_bk_upload(bk, dev, hm, mb, op)))
        return rc;
    CUDA_BK_LAUNCH(op, cuda_k_copy_rows(bk->compute, cuda_bk_at(src, 0, 0), ld(src), dev,
                                        cuda_bk_at(dst, 0, 0), ld(dst), (int32_t *)dev + n, m,
                                        src->cols, tide_dtype_size(src->dtype)));
    return TIDE_OK;
}
