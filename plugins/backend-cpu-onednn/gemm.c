/* oneDNN matmuls: weight packing, the primitive cache, the matmul op and the
 * expert FFN.
 *
 * oneDNN 2.6 is slow with a runtime M (it falls back to gemm:jit), so every
 * primitive has a fixed M. M is padded up to a bucket (dnnl_bk_bucket) and one
 * primitive is cached per (bucket, N, K, weight layout); at small M the cost
 * is the weight traffic, so padding rows is almost free. Source and
 * destination are always dense: with a row stride other than K or N, oneDNN
 * 2.6 leaves its brgemm kernel for gemm:jit, or for its reference kernel with
 * packed weights, so strided views are staged through scratch instead.
 * The packed weight layout oneDNN picks (BA16a64b2a on avx512_core_bf16) is
 * the same for every M, so one packed copy serves all buckets. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_bk.h"
#include "dnnl_bk_math.h"

int64_t dnnl_bk_bucket(int64_t m)
{
    if (m <= 16) {
        int64_t b = 1;
        while (b < m)
            b <<= 1;
        return b;
    }
    if (m <= 64)
        return (m + 15) / 16 * 16;
    return (m + 63) / 64 * 64;
}

/* Matmul op desc for dense y[m,N] f32 = x[m,K] bf16 * W. */
static int dnnl_bk_mm_desc(dnnl_matmul_desc_t *mm, int64_t m, int64_t n, int64_t k,
                           const dnnl_memory_desc_t *wmd, const char *op)
{
    dnnl_memory_desc_t s, d;
    DNNL_BK_TRY(op, dnnl_memory_desc_init_by_tag(&s, 2, (dnnl_dims_t){m, k}, dnnl_bf16, dnnl_ab));
    DNNL_BK_TRY(op, dnnl_memory_desc_init_by_tag(&d, 2, (dnnl_dims_t){m, n}, dnnl_f32, dnnl_ab));
    DNNL_BK_TRY(op, dnnl_matmul_desc_init(mm, &s, wmd, NULL, &d));
    return TIDE_OK;
}

void dnnl_bk_mat_free(struct dnnl_bk_mat *m)
{
    free(m->own);
    memset(m, 0, sizeof *m);
}

/* Reorder raw [N][K] rows (oneDNN tag ba of dims {K,N}) into m->own (layout m->md). */
static int dnnl_bk_pack(struct tide_backend *bk, struct dnnl_bk_mat *m, const void *data,
                        const char *what)
{
    dnnl_memory_desc_t raw;
    dnnl_memory_t src = NULL, dst = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_status_t st =
        dnnl_memory_desc_init_by_tag(&raw, 2, (dnnl_dims_t){m->k, m->n}, dnnl_bf16, dnnl_ba);
    if (st == dnnl_success)
        st = dnnl_memory_create(&src, &raw, bk->eng, (void *)data);
    if (st == dnnl_success)
        st = dnnl_memory_create(&dst, &m->md, bk->eng, m->own);
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&rpd, &raw, bk->eng, &m->md, bk->eng, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&r, rpd);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
        st = dnnl_primitive_execute(r, bk->stream, 2, args);
    }
    if (st == dnnl_success)
        st = dnnl_stream_wait(bk->stream);
    if (r)
        dnnl_primitive_destroy(r);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    if (src)
        dnnl_memory_destroy(src);
    if (dst)
        dnnl_memory_destroy(dst);
    if (st != dnnl_success) {
        tide_error(DNNL_BK_NAME ": packing %s [%lld,%lld] failed: %s", what, (long long)m->n,
                   (long long)m->k, dnnl_status2str(st));
        return TIDE_E_DEVICE;
    }
    return TIDE_OK;
}

int dnnl_bk_mat_load(struct tide_backend *bk, struct dnnl_bk_mat *m, const void *data,
                     const char *what)
{
    if (m->layout == DNNL_BK_PACKED)
        return dnnl_bk_pack(bk, m, data, what);
    if (!m->own) {
        m->data = data;
        return TIDE_OK;
    }
    memcpy(m->own, data, m->own_bytes);
    return TIDE_OK;
}

int dnnl_bk_mat_init(struct tide_backend *bk, struct dnnl_bk_mat *m, const void *data, int64_t n,
                     int64_t k, enum dnnl_bk_layout layout, bool own, const char *what)
{
    memset(m, 0, sizeof *m);
    m->n = n;
    m->k = k;
    m->layout = layout;
    if (layout == DNNL_BK_RAW) {
        DNNL_BK_TRY("weight_create", dnnl_memory_desc_init_by_tag(&m->md, 2, (dnnl_dims_t){k, n},
                                                                  dnnl_bf16, dnnl_ba));
    } else {
        /* Ask oneDNN which layout it wants, with a mid-size M. */
        dnnl_memory_desc_t any;
        dnnl_matmul_desc_t mm;
        dnnl_primitive_desc_t pd = NULL;
        DNNL_BK_TRY("weight_create", dnnl_memory_desc_init_by_tag(&any, 2, (dnnl_dims_t){k, n},
                                                                  dnnl_bf16, dnnl_format_tag_any));
        int rc = dnnl_bk_mm_desc(&mm, 32, n, k, &any, "weight_create");
        if (rc)
            return rc;
        DNNL_BK_TRY("weight_create", dnnl_primitive_desc_create(&pd, &mm, NULL, bk->eng, NULL));
        m->md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        dnnl_primitive_desc_destroy(pd);
        own = true;
    }
    if (own) {
        m->own_bytes = dnnl_memory_desc_get_size(&m->md);
        m->own = dnnl_bk_alloc_weight(m->own_bytes);
        if (!m->own) {
            tide_error(DNNL_BK_NAME ": cannot allocate %zu bytes for %s", m->own_bytes, what);
            m->own_bytes = 0;
            return TIDE_E_NOMEM;
        }
        m->data = m->own;
    }
    int rc = data ? dnnl_bk_mat_load(bk, m, data, what) : TIDE_OK;
    if (rc)
        dnnl_bk_mat_free(m);
    return rc;
}

/* The M of a big matrix's (the output layer's) primitive for m rows: exact
 * from 3 rows on, where it is compute-bound; 4 at 1-2 rows, where oneDNN
 * 2.6's brgemm streams the weights slower than at 4 (docs/cpu-performance.md).
 * A row's result does not depend on M (test_batch_invariance). */
int64_t dnnl_bk_exact_m(int64_t m)
{
    return m >= 1 && m <= 2 ? 4 : m;
}

void dnnl_bk_prims_free(struct tide_backend *bk)
{
    for (int i = 0; i < bk->n_prims; i++) {
        struct dnnl_bk_prim *p = &bk->prims[i];
        dnnl_memory_destroy(p->src);
        dnnl_memory_destroy(p->wei);
        dnnl_memory_destroy(p->dst);
        dnnl_primitive_destroy(p->prim);
    }
    free(bk->prims);
    bk->prims = NULL;
    bk->n_prims = bk->cap_prims = 0;
}

/* Build the primitive for a key and append it to the cache. */
static int dnnl_bk_prim_new(struct tide_backend *bk, const struct dnnl_bk_mat *w, int64_t mb,
                            const char *op, struct dnnl_bk_prim **out)
{
    if (bk->n_prims == bk->cap_prims) {
        int cap = bk->cap_prims ? 2 * bk->cap_prims : 32;
        struct dnnl_bk_prim *p = realloc(bk->prims, sizeof *p * (size_t)cap);
        if (!p)
            return TIDE_E_NOMEM;
        bk->prims = p;
        bk->cap_prims = cap;
    }
    struct dnnl_bk_prim p = {.m = mb, .n = w->n, .k = w->k, .wmd = w->md};
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd = NULL;
    int rc = dnnl_bk_mm_desc(&mm, mb, w->n, w->k, &w->md, op);
    if (rc)
        return rc;
    DNNL_BK_TRY(op, dnnl_primitive_desc_create(&pd, &mm, NULL, bk->eng, NULL));
    const char *impl = "?";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (!bk->warned_ref && !strncmp(impl, "ref", 3)) {
        bk->warned_ref = true;
        tide_warn(DNNL_BK_NAME ": oneDNN chose its reference matmul (%s) for %lldx%lldx%lld: "
                               "this CPU lacks a fast bf16 kernel, expect slow matmuls",
                  impl, (long long)mb, (long long)w->n, (long long)w->k);
    }
    dnnl_status_t st = dnnl_primitive_create(&p.prim, pd);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *dmd = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    if (st == dnnl_success)
        st = dnnl_memory_create(&p.src, smd, bk->eng, DNNL_MEMORY_NONE);
    if (st == dnnl_success)
        st = dnnl_memory_create(&p.wei, &w->md, bk->eng, DNNL_MEMORY_NONE);
    if (st == dnnl_success)
        st = dnnl_memory_create(&p.dst, dmd, bk->eng, DNNL_MEMORY_NONE);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        dnnl_memory_destroy(p.src);
        dnnl_memory_destroy(p.wei);
        dnnl_memory_destroy(p.dst);
        dnnl_primitive_destroy(p.prim);
        return dnnl_bk_fail(op, "dnnl_primitive_create", st);
    }
    bk->prims[bk->n_prims] = p;
    *out = &bk->prims[bk->n_prims++];
    return TIDE_OK;
}

int dnnl_bk_gemm(struct tide_backend *bk, const struct dnnl_bk_mat *w, const uint16_t *x,
                 int64_t mb, float *y, const char *op)
{
    struct dnnl_bk_prim *p = NULL;
    for (int i = 0; i < bk->n_prims; i++) {
        struct dnnl_bk_prim *c = &bk->prims[i];
        if (c->m == mb && c->n == w->n && c->k == w->k && dnnl_memory_desc_equal(&c->wmd, &w->md)) {
            p = c;
            break;
        }
    }
    if (!p) {
        int rc = dnnl_bk_prim_new(bk, w, mb, op, &p);
        if (rc)
            return rc;
    }
    DNNL_BK_TRY(op, dnnl_memory_set_data_handle(p->src, (void *)x));
    DNNL_BK_TRY(op, dnnl_memory_set_data_handle(p->wei, (void *)w->data));
    DNNL_BK_TRY(op, dnnl_memory_set_data_handle(p->dst, y));
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, p->src}, {DNNL_ARG_WEIGHTS, p->wei}, {DNNL_ARG_DST, p->dst}};
    DNNL_BK_TRY(op, dnnl_primitive_execute(p->prim, bk->stream, 3, args));
    DNNL_BK_TRY(op, dnnl_stream_wait(bk->stream));
    return TIDE_OK;
}

/* Round n up to whole cache lines. */
static size_t dnnl_bk_lines(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Bytes of work a row kernel (the table's matmul or expert entry) needs. */
static size_t dnnl_bk_work(dnnl_bk_work_fn *work, int64_t m, int64_t k, int threads)
{
    return work ? work(m, k, threads) : 0;
}

/* matmul on the table's row kernel: x and y rows where they are, any
 * stride. */
static int dnnl_bk_matmul_rows(struct tide_backend *bk, const struct tide_tensor *x,
                               const struct dnnl_bk_mat *m, const struct tide_tensor *y)
{
    const int64_t T = x->rows;
    const size_t bp = dnnl_bk_lines(2 * sizeof(void *) * (size_t)(T ? T : 1));
    int rc = dnnl_bk_scratch(bk, bp + dnnl_bk_work(bk->kern.matmul_work, T, m->k, bk->threads));
    if (rc)
        return rc;
    const uint16_t **xr = bk->scratch;
    float **yr = (float **)(xr + T);
    for (int64_t t = 0; t < T; t++) {
        xr[t] = dnnl_bk_at(x, t, 0);
        yr[t] = dnnl_bk_at(y, t, 0);
    }
    const struct dnnl_bk_raw_seg seg = {m->data, m->n, yr};
    bk->kern.matmul(xr, T, &seg, 1, m->k, bk->threads, (char *)bk->scratch + bp);
    return TIDE_OK;
}

int dnnl_bk_matmul(struct tide_backend *bk, const struct tide_tensor *x,
                   const struct tide_weight *w, const struct tide_tensor *y)
{
    const char *op = "matmul";
    int rc = bkc_check_matmul(&dnnl_bk_id, x, w, y);
    if (rc)
        return rc;
    const struct dnnl_bk_mat *m = &w->mat;
    dnnl_bk_enter(bk);
    if (bk->kern.matmul)
        return dnnl_bk_matmul_rows(bk, x, m, y);
    const int64_t N = m->n, K = m->k;
    for (int64_t t0 = 0; t0 < x->rows; t0 += DNNL_BK_MAX_BUCKET) {
        int64_t rows = x->rows - t0 < DNNL_BK_MAX_BUCKET ? x->rows - t0 : DNNL_BK_MAX_BUCKET;
        int64_t mb = N * K >= DNNL_BK_EXACT_M_MIN ? dnnl_bk_exact_m(rows) : dnnl_bk_bucket(rows);
        /* Use the caller's memory when it is dense and holds the whole bucket. */
        bool xd = mb == rows && x->stride == K, yd = mb == rows && y->stride == N;
        size_t xb = xd ? 0 : dnnl_bk_lines(sizeof(uint16_t) * (size_t)(mb * K));
        rc = dnnl_bk_scratch(bk, xb + (yd ? 0 : sizeof(float) * (size_t)(mb * N)));
        if (rc)
            return rc;
        uint16_t *xs = xd ? dnnl_bk_at(x, t0, 0) : bk->scratch;
        float *ys = yd ? dnnl_bk_at(y, t0, 0) : (float *)((char *)bk->scratch + xb);
        if (!xd) {
            for (int64_t r = 0; r < rows; r++)
                memcpy(xs + r * K, dnnl_bk_at(x, t0 + r, 0), sizeof(uint16_t) * (size_t)K);
            memset(xs + rows * K, 0, sizeof(uint16_t) * (size_t)((mb - rows) * K));
        }
        rc = dnnl_bk_gemm(bk, m, xs, mb, ys, op);
        if (rc)
            return rc;
        if (!yd)
            for (int64_t r = 0; r < rows; r++)
                memcpy(dnnl_bk_at(y, t0 + r, 0), ys + r * N, sizeof(float) * (size_t)N);
    }
    return TIDE_OK;
}

/* Validate the expert_ffn arguments. */
static int dnnl_bk_ffn_check(const struct tide_expert *e, const struct tide_tensor *x_all,
                             const int32_t *rows, const int32_t *dst_rows, int64_t n,
                             const struct tide_tensor *out)
{
    const char *op = "expert_ffn";
    if (!e)
        return dnnl_bk_inval(op, "expert is NULL");
    int rc = bkc_check_ffn_io(&dnnl_bk_id, e->hidden, x_all, out);
    if (rc)
        return rc;
    if (n < 0 || (n > 0 && (!rows || !dst_rows)))
        return dnnl_bk_inval(op, "n = %lld with rows %s and dst_rows %s", (long long)n,
                             rows ? "set" : "NULL", dst_rows ? "set" : "NULL");
    for (int64_t i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= x_all->rows)
            return dnnl_bk_inval(op, "rows[%lld] = %d is outside x_all's %lld rows", (long long)i,
                                 rows[i], (long long)x_all->rows);
        if (dst_rows[i] < 0 || dst_rows[i] >= out->rows)
            return dnnl_bk_inval(op, "dst_rows[%lld] = %d is outside out's %lld rows", (long long)i,
                                 dst_rows[i], (long long)out->rows);
    }
    return TIDE_OK;
}

/* Scratch of one row-kernel expert call of m rows, hidden size H and width
 * I on `threads` threads: row pointers x, h, g, u, y [m] | g, u [m,I] f32 |
 * h [m,I] bf16 | the row kernel's work for the longer of H and I. */
static size_t dnnl_bk_ffn_raw_bytes(const struct tide_backend *bk, int64_t m, int64_t H, int64_t I,
                                    int threads)
{
    return dnnl_bk_lines(5 * sizeof(void *) * (size_t)m) +
           dnnl_bk_lines(2 * sizeof(float) * (size_t)(m * I)) +
           dnnl_bk_lines(sizeof(uint16_t) * (size_t)(m * I)) +
           dnnl_bk_work(bk->kern.expert_work, m, H > I ? H : I, threads);
}

/* h = silu(g) * u, row by row: rows [0, m) of g, u (f32, strides lg, lu)
 * into h (bf16, stride lh); rows [m, ..) of h zeroed (padding). */
struct silu_job {
    const float *g;
    int64_t lg;
    const float *u;
    int64_t lu;
    uint16_t *h;
    int64_t lh, m;
    dnnl_bk_silu_fn *silu; /* the table's entry */
};

static void silu_rows(void *c, int64_t r0, int64_t r1)
{
    const struct silu_job *j = c;
    for (int64_t r = r0; r < r1; r++) {
        if (r < j->m)
            j->silu(j->g + r * j->lg, j->u + r * j->lu, j->h + r * j->lh, j->lh);
        else
            memset(j->h + r * j->lh, 0, sizeof *j->h * (size_t)j->lh);
    }
}

/* expert_ffn of an inplace expert on the table's expert entry, or of a
 * quantized expert on its format's entry (any m): no gather, no padding,
 * results written straight to out. `scratch` holds
 * dnnl_bk_ffn_raw_bytes(bk, m, H, I, threads); threads = 1 runs inline. */
static void dnnl_bk_ffn_raw(const struct tide_backend *bk, const struct tide_expert *e,
                            const struct tide_tensor *x_all, const int32_t *rows,
                            const int32_t *dst_rows, int64_t m, const struct tide_tensor *out,
                            void *scratch, int threads)
{
    const int64_t H = e->hidden, I = e->inter;
    size_t bp = dnnl_bk_lines(5 * sizeof(void *) * (size_t)m);
    size_t bgu = dnnl_bk_lines(2 * sizeof(float) * (size_t)(m * I));
    const uint16_t **xr = scratch, **hr = xr + m;
    float **gr = (float **)(hr + m), **ur = gr + m, **yr = ur + m;
    float *g = (float *)((char *)scratch + bp), *u = g + m * I;
    uint16_t *h = (uint16_t *)((char *)g + bgu);
    void *work = (char *)h + dnnl_bk_lines(sizeof(uint16_t) * (size_t)(m * I));
    for (int64_t t = 0; t < m; t++) {
        xr[t] = dnnl_bk_at(x_all, rows[t], 0);
        gr[t] = g + t * I;
        ur[t] = u + t * I;
        hr[t] = h + t * I;
        yr[t] = dnnl_bk_at(out, dst_rows[t], 0);
    }
    if (e->qfmt != TIDE_QFMT_NONE) {
        const struct dnnl_bk_qseg gu[2] = {{&e->qgate, gr}, {&e->qup, ur}};
        bk->kern.quant[e->qfmt](xr, m, gu, 2, H, threads);
    } else {
        const struct dnnl_bk_raw_seg gu[2] = {{e->gate.data, I, gr}, {e->up.data, I, ur}};
        bk->kern.expert(xr, m, gu, 2, H, threads, work);
    }
    /* Inline below 4096 elements (and on one thread: an expert batch's). */
    const struct silu_job sj = {g, I, u, I, h, I, m, bk->kern.silu_mul_bf16};
    dnnl_bk_par_for(threads > 1 && m * I >= 4096 ? threads : 1, m, silu_rows, (void *)&sj);
    if (e->qfmt != TIDE_QFMT_NONE) {
        const struct dnnl_bk_qseg d = {&e->qdown, yr};
        bk->kern.quant[e->qfmt](hr, m, &d, 1, I, threads);
    } else {
        const struct dnnl_bk_raw_seg d = {e->down.data, H, yr};
        bk->kern.expert(hr, m, &d, 1, I, threads, work);
    }
}

/* One expert on all the backend's threads (checked arguments). */
static int dnnl_bk_ffn_run(struct tide_backend *bk, const struct tide_expert *e,
                           const struct tide_tensor *x_all, const int32_t *rows,
                           const int32_t *dst_rows, int64_t n, const struct tide_tensor *out)
{
    const char *op = "expert_ffn";
    const int64_t H = e->hidden, I = e->inter;
    int rc;
    for (int64_t i0 = 0; i0 < n; i0 += DNNL_BK_MAX_BUCKET) {
        int64_t m = n - i0 < DNNL_BK_MAX_BUCKET ? n - i0 : DNNL_BK_MAX_BUCKET;
        /* Inplace experts run on the row kernel at every row count: one
         * summation order, so a row's bits do not depend on how many rows the
         * expert got (the KV path equals recompute). Switching to oneDNN above
         * some count, as an earlier version did at 64 rows, broke that. */
        if (e->qfmt != TIDE_QFMT_NONE || (e->layout == DNNL_BK_RAW && bk->kern.expert)) {
            if ((rc = dnnl_bk_scratch(bk, dnnl_bk_ffn_raw_bytes(bk, m, H, I, bk->threads))))
                return rc;
            dnnl_bk_ffn_raw(bk, e, x_all, rows + i0, dst_rows + i0, m, out, bk->scratch,
                            bk->threads);
            continue;
        }
        int64_t mb = dnnl_bk_bucket(m);
        /* Scratch: x [mb,H] bf16 | gate,up [mb,2I] f32 | h [mb,I] bf16 | y [mb,H] f32.
         * Fused (packed), row r of gate,up is gate then up; apart (inplace), gate
         * rows come first, then up rows, each block dense. */
        size_t bx = dnnl_bk_lines(sizeof(uint16_t) * (size_t)(mb * H));
        size_t bgu = dnnl_bk_lines(sizeof(float) * (size_t)(mb * 2 * I));
        size_t bh = dnnl_bk_lines(sizeof(uint16_t) * (size_t)(mb * I));
        rc = dnnl_bk_scratch(bk, bx + bgu + bh + sizeof(float) * (size_t)(mb * H));
        if (rc)
            return rc;
        uint16_t *xs = bk->scratch;
        float *gu = (float *)((char *)bk->scratch + bx);
        uint16_t *hs = (uint16_t *)((char *)gu + bgu);
        float *ys = (float *)((char *)hs + bh);
        for (int64_t r = 0; r < m; r++)
            memcpy(xs + r * H, dnnl_bk_at(x_all, rows[i0 + r], 0), sizeof(uint16_t) * (size_t)H);
        memset(xs + m * H, 0, sizeof(uint16_t) * (size_t)((mb - m) * H));
        const bool fused = e->layout == DNNL_BK_PACKED;
        if (fused) {
            rc = dnnl_bk_gemm(bk, &e->gate_up, xs, mb, gu, op);
        } else {
            rc = dnnl_bk_gemm(bk, &e->gate, xs, mb, gu, op);
            if (!rc)
                rc = dnnl_bk_gemm(bk, &e->up, xs, mb, gu + mb * I, op);
        }
        if (rc)
            return rc;
        const int64_t ld = fused ? 2 * I : I, uo = fused ? I : mb * I;
        const struct silu_job sj = {gu, ld, gu + uo, ld, hs, I, m, bk->kern.silu_mul_bf16};
        dnnl_bk_par_for(m * I >= 4096 ? bk->threads : 1, mb, silu_rows, (void *)&sj);
        rc = dnnl_bk_gemm(bk, &e->down, hs, mb, ys, op);
        if (rc)
            return rc;
        for (int64_t r = 0; r < m; r++)
            memcpy(dnnl_bk_at(out, dst_rows[i0 + r], 0), ys + r * H, sizeof(float) * (size_t)H);
    }
    return TIDE_OK;
}

int dnnl_bk_expert_ffn(struct tide_backend *bk, const struct tide_expert *e,
                       const struct tide_tensor *x_all, const int32_t *rows,
                       const int32_t *dst_rows, int64_t n, const struct tide_tensor *out)
{
    int rc = dnnl_bk_ffn_check(e, x_all, rows, dst_rows, n, out);
    if (rc)
        return rc;
    dnnl_bk_enter(bk);
    const double t_start = dnnl_bk_now();
    rc = dnnl_bk_ffn_run(bk, e, x_all, rows, dst_rows, n, out);
    bk->expert_seconds += dnnl_bk_now() - t_start;
    return rc;
}

/* An expert of a batch for the threads: its cost estimate and index. */
struct dnnl_bk_job {
    double cost;
    int j;
};

/* Larger cost first; equal costs in index order. */
static int dnnl_bk_job_cmp(const void *a, const void *b)
{
    const struct dnnl_bk_job *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost < y->cost ? 1 : -1;
    return (x->j > y->j) - (x->j < y->j);
}

/* Rows up to which an expert of a batch runs on one thread (the row kernel). */
#define DNNL_BK_BATCH_MAX_M DNNL_BK_RAW_MAX_M

/* Fetch the first bytes of each of e's matrices towards the caches: the
 * kernel's own prefetch runs ahead inside a matrix but not into the next. */
static void dnnl_bk_expert_touch(const struct tide_expert *e)
{
    const char *m[3] = {e->gate.data, e->up.data, e->down.data};
    if (e->qfmt != TIDE_QFMT_NONE) {
        m[0] = e->qgate.q;
        m[1] = e->qup.q;
        m[2] = e->qdown.q;
    }
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < DNNL_BK_RAW_PF_BYTES; b += 64)
            __builtin_prefetch(m[i] + b, 0, 2);
}

/* An expert batch's small experts, one per thread, each thread taking the
 * next when it is free (ord: largest first). */
struct spread_job {
    const struct tide_backend *bk;
    const struct tide_expert *const *experts;
    const struct dnnl_bk_job *ord;
    int n;
    const struct tide_tensor *x_all;
    const int32_t *rows, *dst_rows;
    const int64_t *offsets;
    const struct tide_tensor *out;
    char *scratch; /* [threads][per] */
    size_t per;
    _Atomic int next;
};

static void spread_run(void *c, int tid, int nt)
{
    (void)nt;
    struct spread_job *s = c;
    char *mine = s->scratch + (size_t)tid * s->per;
    int i = atomic_fetch_add(&s->next, 1);
    while (i < s->n) {
        /* Claim the next expert now, to fetch its first lines while this one runs. */
        const int after = atomic_fetch_add(&s->next, 1);
        if (after < s->n)
            dnnl_bk_expert_touch(s->experts[s->ord[after].j]);
        const int j = s->ord[i].j;
        dnnl_bk_ffn_raw(s->bk, s->experts[j], s->x_all, s->rows + s->offsets[j],
                        s->dst_rows + s->offsets[j], s->offsets[j + 1] - s->offsets[j], s->out,
                        mine, 1);
        i = after;
    }
}

int dnnl_bk_expert_ffn_batch(struct tide_backend *bk, int n_experts,
                             const struct tide_expert *const *experts,
                             const struct tide_tensor *x_all, const int32_t *rows,
                             const int32_t *dst_rows, const int64_t *offsets,
                             const struct tide_tensor *out)
{
    int rc = bkc_check_batch_offsets(&dnnl_bk_id, n_experts, experts, offsets);
    if (rc)
        return rc;
    for (int j = 0; j < n_experts; j++) {
        if ((rc = dnnl_bk_ffn_check(experts[j], x_all, rows + offsets[j], dst_rows + offsets[j],
                                    offsets[j + 1] - offsets[j], out)))
            return rc;
    }
    dnnl_bk_enter(bk);
    const double t_start = dnnl_bk_now();
    /* Experts of few rows on the row kernel: one thread each, the threads
     * working on different experts at once, so there is no team barrier per
     * expert. The others (many rows, packed layout) run one by one on all
     * threads. */
    const int T = bk->threads;
    const bool spread = T > 1 && bk->kern.expert_spread;
    struct dnnl_bk_job *ord = malloc(sizeof *ord * (size_t)(n_experts + 1));
    int64_t max_m = 0, max_i = 0, max_h = 0;
    int n_spread = 0;
    if (!ord)
        return TIDE_E_NOMEM;
    rc = TIDE_OK;
    for (int j = 0; j < n_experts && !rc; j++) {
        const struct tide_expert *e = experts[j];
        const int64_t m = offsets[j + 1] - offsets[j];
        /* Quantized experts always run on their format's entry, on any CPU. */
        const bool row = e->qfmt != TIDE_QFMT_NONE ? T > 1 : spread && e->layout == DNNL_BK_RAW;
        if (!m)
            continue;
        if (!row || m > DNNL_BK_BATCH_MAX_M) {
            rc = dnnl_bk_ffn_run(bk, e, x_all, rows + offsets[j], dst_rows + offsets[j], m, out);
            continue;
        }
        /* A matrix is streamed once, plus about one tenth of that per row of
         * compute. */
        ord[n_spread++] =
            (struct dnnl_bk_job){(double)(e->hidden * e->inter) * (10.0 + (double)m), j};
        max_m = m > max_m ? m : max_m;
        max_i = e->inter > max_i ? e->inter : max_i;
        max_h = e->hidden > max_h ? e->hidden : max_h;
    }
    /* Largest first, each thread taking the next expert when it is free: the
     * last ones are the smallest, so the threads finish together. Each
     * expert writes its own rows of out, so the order does not change a bit. */
    qsort(ord, (size_t)n_spread, sizeof *ord, dnnl_bk_job_cmp);
    const size_t per = dnnl_bk_lines(dnnl_bk_ffn_raw_bytes(bk, max_m, max_h, max_i, 1));
    if (!rc && n_spread && !(rc = dnnl_bk_scratch(bk, per * (size_t)T))) {
        struct spread_job sj = {
            .bk = bk,
            .experts = experts,
            .ord = ord,
            .n = n_spread,
            .x_all = x_all,
            .rows = rows,
            .dst_rows = dst_rows,
            .offsets = offsets,
            .out = out,
            .scratch = bk->scratch,
            .per = per,
        };
        dnnl_bk_par(T, spread_run, &sj);
    }
    free(ord);
    bk->expert_seconds += dnnl_bk_now() - t_start;
    return rc;
}
