/* backend-cuda: the plugin descriptor, instance lifecycle, memory, weights
 * and experts. The ops live in ops.c (cuBLAS matmuls and the kernels of
 * kernels.cu), promotions and timings in offload.c.
 *
 * The CUDA runtime is loaded with this plugin; the module is linked with
 * -z nodelete so that dlclose never unmaps it while the driver's threads and
 * the runtime's exit handlers still refer to it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_bk.h"
#include "tide/option.h"
#include "tide/plugin.h"

/* Pinned ring for uploads (ids, row maps, routing weights, the host experts'
 * results): 16 segments of 1 MiB; larger writes wait for their copy. */
#define CUDA_BK_PARAM_SEG  ((size_t)1 << 20)
#define CUDA_BK_PARAM_NSEG 16

static const struct tide_option cuda_bk_options[] = {
    {"device", TIDE_OPT_INT, "0", "CUDA device ordinal (as numbered by the CUDA runtime)", NULL,
     "[0,]"},
    {"pin", TIDE_OPT_BOOL, "true",
     "page-lock file-mapped promotion sources (the mmapped checkpoint) in place with "
     "cudaHostRegister, locked until the backend is destroyed; other memory, everything when "
     "false, and everything after a failed lock go through a pinned staging ring",
     NULL, NULL},
    {"staging", TIDE_OPT_SIZE, "64MiB",
     "pinned host ring for promotions that are not page-locked in place (8 segments)", NULL,
     "[65536,]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

/* ---- errors and validation --------------------------------------------- */

int cuda_bk_fail(const char *op, const char *call, cudaError_t err)
{
    tide_error(CUDA_BK_NAME ": %s: %s failed: %s: %s", op, call, cudaGetErrorName(err),
               cudaGetErrorString(err));
    return err == cudaErrorMemoryAllocation ? TIDE_E_NOMEM : TIDE_E_DEVICE;
}

int cuda_bk_blas_fail(const char *op, const char *call, cublasStatus_t st)
{
    tide_error(CUDA_BK_NAME ": %s: %s failed: %s: %s", op, call, cublasGetStatusName(st),
               cublasGetStatusString(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? TIDE_E_NOMEM : TIDE_E_DEVICE;
}

const struct bkc_id cuda_bk_id = {CUDA_BK_NAME, CUDA_BK_BUF_MAGIC};

int cuda_bk_check_expert(const char *op, const struct tide_expert *e)
{
    if (!e)
        return cuda_bk_inval(op, "expert is NULL");
    if (e->magic != CUDA_BK_EXPERT_MAGIC)
        return cuda_bk_inval(op, "the expert was not made by this backend");
    return TIDE_OK;
}

int cuda_bk_check_rows(const char *op, const char *what, const int32_t *rows, int64_t n,
                       int64_t limit)
{
    if (n < 0 || (n > 0 && !rows))
        return cuda_bk_inval(op, "%lld %s (%s)", (long long)n, what, rows ? "set" : "NULL");
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= limit)
            return cuda_bk_inval(op, "%s[%lld] = %d is outside [0, %lld)", what, (long long)i,
                                 rows[i], (long long)limit);
    return TIDE_OK;
}

/* ---- instance helpers -------------------------------------------------- */

int cuda_bk_enter(struct tide_backend *bk, const char *op)
{
    CUDA_BK_TRY(op, cudaSetDevice(bk->device));
    return TIDE_OK;
}

/* cudaMalloc with a message naming what the memory is for and what is free. */
static int cuda_bk_malloc(void **p, size_t bytes, const char *op, const char *what)
{
    *p = NULL;
    cudaError_t err = cudaMalloc(p, bytes ? bytes : 256);
    if (err == cudaSuccess)
        return TIDE_OK;
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    tide_error(CUDA_BK_NAME ": %s: cannot allocate %zu bytes of device memory for %s (%zu of "
                            "%zu bytes free): %s",
               op, bytes, what, free_b, total_b, cudaGetErrorName(err));
    *p = NULL;
    return err == cudaErrorMemoryAllocation ? TIDE_E_NOMEM : TIDE_E_DEVICE;
}

int cuda_bk_scratch(struct tide_backend *bk, size_t bytes, const char *op, void **out)
{
    if (bytes > bk->scratch_bytes) {
        /* Earlier ops on the stream may still read the old scratch. */
        CUDA_BK_TRY(op, cudaStreamSynchronize(bk->compute));
        if (bk->scratch)
            CUDA_BK_TRY(op, cudaFree(bk->scratch));
        bk->scratch = NULL;
        bk->scratch_bytes = 0;
        size_t want = cuda_bk_align(bytes + bytes / 4);
        int rc = cuda_bk_malloc(&bk->scratch, want, op, "scratch");
        if (rc)
            return rc;
        bk->scratch_bytes = want;
    }
    *out = bk->scratch;
    return TIDE_OK;
}

int cuda_bk_host_scratch(struct tide_backend *bk, size_t bytes, const char *op, void **out)
{
    if (bytes > bk->host_scratch_bytes) {
        size_t want = bytes + bytes / 4 + 64;
        void *p = malloc(want);
        if (!p) {
            tide_error(CUDA_BK_NAME ": %s: cannot allocate %zu bytes of host memory", op, want);
            return TIDE_E_NOMEM;
        }
        free(bk->host_scratch);
        bk->host_scratch = p;
        bk->host_scratch_bytes = want;
    }
    *out = bk->host_scratch;
    return TIDE_OK;
}

int cuda_bk_upload(struct tide_backend *bk, void *dst, const void *src, size_t bytes,
                   const char *op)
{
    if (!bytes)
        return TIDE_OK;
    void *pinned = NULL;
    int rc = cuda_ring_reserve(&bk->params, bytes, &pinned);
    if (rc)
        return rc;
    if (pinned) {
        memcpy(pinned, src, bytes);
        CUDA_BK_TRY(op, cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, bk->compute));
        return TIDE_OK;
    }
    /* Too large for the ring: copy from the caller's memory and wait, so it may be reused. */
    CUDA_BK_TRY(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, bk->compute));
    CUDA_BK_TRY(op, cudaStreamSynchronize(bk->compute));
    return TIDE_OK;
}

/* ---- lifecycle ---------------------------------------------------------- */

static void cuda_bk_destroy(struct tide_backend *bk)
{
    if (!bk)
        return;
    if (bk->n_buffers || bk->n_weights || bk->n_experts)
        tide_warn(CUDA_BK_NAME ": destroyed with %d buffers, %d weights and %d experts still "
                               "alive",
                  bk->n_buffers, bk->n_weights, bk->n_experts);
    cudaSetDevice(bk->device);
    /* Errors are ignored from here on: everything is released regardless. */
    if (bk->copy)
        cudaStreamSynchronize(bk->copy);
    if (bk->compute)
        cudaStreamSynchronize(bk->compute);
    cuda_bk_unpin_all(bk);
    cuda_ring_free(&bk->params);
    cuda_ring_free(&bk->staging);
    cuda_timer_free(&bk->copy_timer);
    cuda_timer_free(&bk->expert_timer);
    if (bk->scratch)
        cudaFree(bk->scratch);
    if (bk->blas)
        cublasDestroy(bk->blas);
    if (bk->copy)
        cudaStreamDestroy(bk->copy);
    if (bk->compute)
        cudaStreamDestroy(bk->compute);
    cudaGetLastError();
    free(bk->host_scratch);
    free(bk->pins);
    free(bk);
}

/* The device's name, memory and compute capability into bk->desc. */
static int cuda_bk_describe_device(struct tide_backend *bk)
{
    struct cudaDeviceProp p;
    CUDA_BK_TRY("create", cudaGetDeviceProperties(&p, bk->device));
    if (p.major < 8) {
        tide_error(CUDA_BK_NAME ": device %d (%s) has compute capability %d.%d; this backend "
                                "needs 8.0 or newer (bf16 tensor cores)",
                   bk->device, p.name, p.major, p.minor);
        return TIDE_E_UNSUPPORTED;
    }
    int rt = 0, drv = 0, blas = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    cublasGetVersion(bk->blas, &blas);
    snprintf(bk->desc, sizeof bk->desc,
             "%.256s (device %d), %.1f GiB, compute capability %d.%d, %d SMs; CUDA runtime %d.%d, "
             "driver %d.%d, cuBLAS %d.%d.%d; promotions %s",
             p.name, bk->device, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major,
             p.minor, p.multiProcessorCount, rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10,
             blas / 10000, blas % 10000 / 100, blas % 100,
             !bk->pin           ? "staged through a pinned ring"
             : bk->pin_readonly ? "from file mappings page-locked read-only"
                                : "from file mappings page-locked");
    return TIDE_OK;
}

static int cuda_bk_create(const struct tide_backend_args *args, struct tide_backend **out)
{
    int rc = bkc_check_create(&cuda_bk_id, args, out);
    if (rc)
        return rc;
    int64_t device = args->opts ? tide_opts_int(args->opts, "device") : 0;
    bool pin = args->opts ? tide_opts_bool(args->opts, "pin") : true;
    uint64_t staging = args->opts ? tide_opts_size(args->opts, "staging") : (uint64_t)64 << 20;
    int count = -1;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        tide_error(CUDA_BK_NAME ": no usable CUDA device: cudaGetDeviceCount: %s: %s",
                   cudaGetErrorName(err), cudaGetErrorString(err));
        return TIDE_E_UNSUPPORTED;
    }
    if (device < 0 || device >= count) {
        tide_error(CUDA_BK_NAME ": device = %lld, but this machine has %d CUDA device%s (0..%d)",
                   (long long)device, count, count == 1 ? "" : "s", count - 1);
        return TIDE_E_CONFIG;
    }
    if (staging < CUDA_BK_STAGING_NSEG * (uint64_t)4096)
        return cuda_bk_inval("create", "staging = %llu bytes is too small",
                             (unsigned long long)staging);

    struct tide_backend *bk = calloc(1, sizeof *bk);
    if (!bk)
        return TIDE_E_NOMEM;
    bk->device = (int)device;
    bk->role = args->role;
    bk->pin = pin;
    bk->staging_bytes = (size_t)staging;
    long page = sysconf(_SC_PAGESIZE);
    bk->page = page > 0 ? (size_t)page : 4096;
    int ro = 0;
    cublasStatus_t bst;
    if ((err = cudaSetDevice(bk->device)) != cudaSuccess ||
        (err = cudaStreamCreateWithFlags(&bk->compute, cudaStreamNonBlocking)) != cudaSuccess ||
        (err = cudaStreamCreateWithFlags(&bk->copy, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = cuda_bk_fail("create", "cudaSetDevice/cudaStreamCreateWithFlags", err);
    } else if ((bst = cublasCreate(&bk->blas)) != CUBLAS_STATUS_SUCCESS ||
               (bst = cublasSetStream(bk->blas, bk->compute)) != CUBLAS_STATUS_SUCCESS ||
               (bst = cublasSetMathMode(bk->blas,
                                        CUBLAS_DEFAULT_MATH |
                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) !=
                   CUBLAS_STATUS_SUCCESS) {
        rc = cuda_bk_blas_fail("create", "cublasCreate/cublasSetStream/cublasSetMathMode", bst);
    } else if ((rc = cuda_ring_init(&bk->params, CUDA_BK_PARAM_SEG, CUDA_BK_PARAM_NSEG, bk->compute,
                                    "upload ring")) == TIDE_OK) {
        /* Read-only registration lets a PROT_READ mmap (the checkpoint) be page-locked. */
        if (cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, bk->device) !=
            cudaSuccess)
            ro = 0;
        bk->pin_readonly = ro != 0;
        rc = cuda_bk_describe_device(bk);
    }
    if (rc) {
        cuda_bk_destroy(bk);
        return rc;
    }
    *out = bk;
    return TIDE_OK;
}

static const char *cuda_bk_describe(const struct tide_backend *bk)
{
    return bk ? bk->desc : CUDA_BK_NAME;
}

/* ---- memory ------------------------------------------------------------- */

static int cuda_bk_buffer_alloc(struct tide_backend *bk, size_t bytes, struct tide_buffer **out)
{
    if (!bk || !out)
        return cuda_bk_inval("buffer_alloc", "NULL backend or out pointer");
    *out = NULL;
    int rc = cuda_bk_enter(bk, "buffer_alloc");
    if (rc)
        return rc;
    struct tide_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return TIDE_E_NOMEM;
    rc = cuda_bk_malloc(&b->ptr, bytes, "buffer_alloc", "a buffer");
    if (rc == TIDE_OK && bytes) {
        cudaError_t err = cudaMemsetAsync(b->ptr, 0, bytes, bk->compute);
        if (err != cudaSuccess) {
            rc = cuda_bk_fail("buffer_alloc", "cudaMemsetAsync", err);
            cudaFree(b->ptr);
        }
    }
    if (rc) {
        free(b);
        return rc;
    }
    b->magic = CUDA_BK_BUF_MAGIC;
    b->bytes = bytes;
    bk->n_buffers++;
    *out = b;
    return TIDE_OK;
}

static void cuda_bk_buffer_free(struct tide_backend *bk, struct tide_buffer *buf)
{
    if (!buf)
        return;
    if (buf->magic != CUDA_BK_BUF_MAGIC) {
        tide_error(CUDA_BK_NAME ": buffer_free: not a buffer of this backend");
        return;
    }
    if (bk) {
        /* Work already issued may still use the buffer. */
        cudaSetDevice(bk->device);
        cudaError_t err = cudaStreamSynchronize(bk->compute);
        if (err != cudaSuccess)
            cuda_bk_fail("buffer_free", "cudaStreamSynchronize", err);
        bk->n_buffers--;
    }
    cudaFree(buf->ptr);
    buf->magic = 0;
    free(buf);
}

static void *cuda_bk_buffer_host_ptr(struct tide_backend *bk, struct tide_buffer *buf)
{
    return NULL; /* device memory */
}

/* Copy between packed host rows and a view; `to_view` is the direction. */
static int cuda_bk_copy(struct tide_backend *bk, const char *op, const struct tide_tensor *t,
                        void *host, bool to_view)
{
    int rc = bkc_check_tensor(&cuda_bk_id, op, to_view ? "dst" : "src", t, BKC_ANY);
    if (rc)
        return rc;
    if (t->rows == 0 || t->cols == 0)
        return TIDE_OK;
    if (!host)
        return cuda_bk_inval(op, "host pointer is NULL");
    if ((rc = cuda_bk_enter(bk, op)))
        return rc;
    const size_t es = tide_dtype_size(t->dtype), row = (size_t)t->cols * es;
    const size_t bytes = row * (size_t)t->rows, pitch = (size_t)t->stride * es;
    void *dev = cuda_bk_at(t, 0, 0);
    if (!to_view) {
        /* read waits for all prior work on the compute stream, then for the copy. */
        CUDA_BK_TRY(op, cudaMemcpy2DAsync(host, row, dev, pitch, row, (size_t)t->rows,
                                          cudaMemcpyDeviceToHost, bk->compute));
        CUDA_BK_TRY(op, cudaStreamSynchronize(bk->compute));
        return cuda_timer_harvest(&bk->expert_timer, false);
    }
    void *pinned = NULL;
    if ((rc = cuda_ring_reserve(&bk->params, bytes, &pinned)))
        return rc;
    if (pinned)
        memcpy(pinned, host, bytes);
    CUDA_BK_TRY(op, cudaMemcpy2DAsync(dev, pitch, pinned ? pinned : host, row, row, (size_t)t->rows,
                                      cudaMemcpyHostToDevice, bk->compute));
    if (!pinned) /* the caller may reuse its memory when write returns */
        CUDA_BK_TRY(op, cudaStreamSynchronize(bk->compute));
    return TIDE_OK;
}

static int cuda_bk_write(struct tide_backend *bk, const struct tide_tensor *dst, const void *src)
{
    return cuda_bk_copy(bk, "write", dst, (void *)src, true);
}

static int cuda_bk_read(struct tide_backend *bk, const struct tide_tensor *src, void *dst)
{
    return cuda_bk_copy(bk, "read", src, dst, false);
}

static int cuda_bk_sync(struct tide_backend *bk)
{
    int rc = cuda_bk_enter(bk, "sync");
    if (rc)
        return rc;
    CUDA_BK_TRY("sync", cudaStreamSynchronize(bk->copy));
    CUDA_BK_TRY("sync", cudaStreamSynchronize(bk->compute));
    rc = cuda_timer_harvest(&bk->copy_timer, false);
    return rc ? rc : cuda_timer_harvest(&bk->expert_timer, false);
}

/* Free and total device memory of the instance's device (cudaMemGetInfo). */
static int cuda_bk_mem_info(struct tide_backend *bk, uint64_t *free_bytes, uint64_t *total_bytes)
{
    size_t f = 0, t = 0;
    int rc = cuda_bk_enter(bk, "mem_info");
    if (rc)
        return rc;
    CUDA_BK_TRY("mem_info", cudaMemGetInfo(&f, &t));
    if (free_bytes)
        *free_bytes = f;
    if (total_bytes)
        *total_bytes = t;
    return TIDE_OK;
}

/* ---- weights ------------------------------------------------------------ */

static void cuda_bk_weight_destroy(struct tide_backend *bk, struct tide_weight *w)
{
    if (!w)
        return;
    if (bk) {
        cudaSetDevice(bk->device);
        cudaStreamSynchronize(bk->compute); /* kernels may still read it */
        bk->n_weights--;
    }
    if (w->dev)
        cudaFree(w->dev);
    free(w->host_vec);
    free(w);
}

/* Upload `bytes` from host memory synchronously (the compute stream, then a wait). */
static int cuda_bk_upload_sync(struct tide_backend *bk, void *dst, const void *src, size_t bytes,
                               const char *op)
{
    CUDA_BK_TRY(op, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, bk->compute));
    CUDA_BK_TRY(op, cudaStreamSynchronize(bk->compute));
    return TIDE_OK;
}

/* Fill w from src (checked for its kind): the device copy (and the host vector). */
static int cuda_bk_weight_fill(struct tide_backend *bk, const struct tide_view *src,
                               struct tide_weight *w)
{
    const char *op = "weight_create";
    const int64_t numel = tide_view_numel(src);
    const void *data = src->data;
    void *tmp = NULL;
    switch (w->kind) {
    case TIDE_WEIGHT_MATMUL:
        w->rows = src->shape[0];
        w->cols = src->shape[1];
        w->dtype = TIDE_DTYPE_BF16;
        if (src->dtype != TIDE_DTYPE_BF16) { /* matmul inputs are bf16 by contract */
            uint16_t *h = malloc(sizeof *h * (size_t)numel);
            if (!h)
                return TIDE_E_NOMEM;
            for (int64_t i = 0; i < numel; i++)
                h[i] = tide_f32_to_bf16(bkc_view_f32(src, i));
            data = tmp = h;
        }
        break;
    case TIDE_WEIGHT_VECTOR:
        w->rows = 1;
        w->cols = numel;
        w->dtype = TIDE_DTYPE_F32;
        w->host_vec = malloc(sizeof(float) * (size_t)numel);
        if (!w->host_vec)
            return TIDE_E_NOMEM;
        for (int64_t i = 0; i < numel; i++)
            w->host_vec[i] = bkc_view_f32(src, i);
        data = w->host_vec;
        break;
    case TIDE_WEIGHT_EMBED:
        w->rows = src->shape[0];
        w->cols = src->shape[1];
        w->dtype = src->dtype;
        break;
    }
    const size_t bytes = (size_t)numel * tide_dtype_size(w->dtype);
    int rc = cuda_bk_malloc(&w->dev, bytes, op, w->name);
    if (rc == TIDE_OK)
        rc = cuda_bk_upload_sync(bk, w->dev, data, bytes, op);
    free(tmp);
    return rc;
}

static int cuda_bk_weight_create(struct tide_backend *bk, const struct tide_view *src,
                                 enum tide_weight_kind kind, struct tide_weight **out)
{
    int rc = bkc_check_weight_create(&cuda_bk_id, bk, src, kind, out);
    if (rc || (rc = cuda_bk_enter(bk, "weight_create")))
        return rc;
    const char *name = src->name ? src->name : "?";
    struct tide_weight *w = calloc(1, sizeof *w);
    if (!w)
        return TIDE_E_NOMEM;
    w->kind = kind;
    snprintf(w->name, sizeof w->name, "%s", name);
    bk->n_weights++;
    rc = cuda_bk_weight_fill(bk, src, w);
    if (rc) {
        if (rc == TIDE_E_NOMEM)
            tide_error(CUDA_BK_NAME ": weight_create: out of memory for weight %s", name);
        cuda_bk_weight_destroy(bk, w);
        return rc;
    }
    *out = w;
    return TIDE_OK;
}

/* ---- experts ------------------------------------------------------------ */

int cuda_bk_check_expert_views(const char *op, int qfmt, const int qblock[2],
                               const struct tide_view *gate, const struct tide_view *up,
                               const struct tide_view *down, int64_t *hidden, int64_t *inter)
{
    static const char *const what[3] = {"gate", "up", "down"};
    const struct tide_view *v[3] = {gate, up, down};
    *hidden = *inter = 0;
    if (!gate || gate->ndim != 2)
        return cuda_bk_inval(op, "gate is NULL or not 2-D");
    *inter = gate->shape[0];
    *hidden = gate->shape[1];
    if (qfmt == TIDE_QFMT_NONE) {
        for (int j = 0; j < 3; j++)
            if (v[j] && v[j]->qfmt != TIDE_QFMT_NONE)
                return cuda_bk_inval(op,
                                     "%s tensor '%s' is %s, expected bf16 (a bf16 expert or slot; "
                                     "quantized slots come from slot_create_q)",
                                     what[j], v[j]->name ? v[j]->name : "?",
                                     tide_qfmt_name(v[j]->qfmt));
        return bkc_check_expert_views(&cuda_bk_id, op, gate, up, down, *hidden, *inter);
    }
    char why[320];
    for (int j = 0; j < 3; j++) {
        const int64_t rows = j < 2 ? *inter : *hidden, cols = j < 2 ? *hidden : *inter;
        if (tide_qview_check(v[j], qfmt, qblock, rows, cols, why, sizeof why))
            return cuda_bk_inval(op, "%s: %s", what[j], why);
    }
    return TIDE_OK;
}

/* Offsets and sizes of the values and scales of a quantized expert's gate,
 * up and down in one allocation; returns its bytes. */
static size_t cuda_bk_qlayout(int qfmt, const int qblock[2], int64_t hidden, int64_t inter,
                              struct cuda_qpart part[3])
{
    const size_t vsz = tide_dtype_size(tide_qfmt_value_dtype(qfmt));
    const size_t ssz = tide_dtype_size(tide_qfmt_scale_dtype(qfmt));
    size_t off = 0;
    for (int j = 0; j < 3; j++) {
        struct cuda_qpart *p = &part[j];
        int64_t vs[2], ss[2];
        p->rows = j < 2 ? inter : hidden;
        p->cols = j < 2 ? hidden : inter;
        tide_qmat_value_shape(qfmt, p->rows, p->cols, vs);
        tide_qmat_scale_shape(qblock, p->rows, p->cols, ss);
        p->scols = ss[1];
        p->n_values = (size_t)(vs[0] * vs[1]) * vsz;
        p->n_scales = (size_t)(ss[0] * ss[1]) * ssz;
        p->values = off;
        p->scales = off = cuda_bk_align(off + p->n_values);
        off = cuda_bk_align(off + p->n_scales);
    }
    return off;
}

int cuda_bk_expert_alloc(struct tide_backend *bk, int64_t hidden, int64_t inter, int qfmt,
                         const int qblock[2], bool slot, const char *op, struct tide_expert **out)
{
    *out = NULL;
    if (hidden <= 0 || inter <= 0)
        return cuda_bk_inval(op, "hidden %lld and inter %lld must be positive", (long long)hidden,
                             (long long)inter);
    if (qfmt != TIDE_QFMT_NONE) {
        char why[200];
        if (!qblock)
            return cuda_bk_inval(op, "%s experts need a block (qblock is NULL)",
                                 tide_qfmt_name(qfmt));
        if (tide_qfmt_fits(qfmt, qblock, inter, hidden, why, sizeof why) ||
            tide_qfmt_fits(qfmt, qblock, hidden, inter, why, sizeof why))
            return cuda_bk_inval(op, "experts [%lld, %lld]: %s", (long long)inter,
                                 (long long)hidden, why);
    }
    int rc = cuda_bk_enter(bk, op);
    if (rc)
        return rc;
    struct tide_expert *e = calloc(1, sizeof *e);
    if (!e)
        return TIDE_E_NOMEM;
    e->magic = CUDA_BK_EXPERT_MAGIC;
    e->hidden = hidden;
    e->inter = inter;
    e->qfmt = qfmt;
    e->is_slot = slot;
    if (qfmt != TIDE_QFMT_NONE) {
        e->qblock[0] = qblock[0];
        e->qblock[1] = qblock[1];
        e->bytes = cuda_bk_qlayout(qfmt, qblock, hidden, inter, e->part);
    } else {
        e->bytes = (size_t)(3 * hidden * inter) * sizeof(uint16_t);
    }
    bk->n_experts++;
    rc = cuda_bk_malloc(&e->dev, e->bytes, op, slot ? "an expert slot" : "an expert");
    cudaError_t err = cudaSuccess;
    if (rc == TIDE_OK)
        err = cudaMemsetAsync(e->dev, 0, e->bytes, bk->compute);
    if (rc == TIDE_OK && err == cudaSuccess && slot) {
        err = cudaEventCreateWithFlags(&e->loaded, cudaEventDisableTiming);
        if (err == cudaSuccess)
            err = cudaEventCreateWithFlags(&e->used, cudaEventDisableTiming);
        /* The zero fill counts as a use: a slot_load must not overtake it. */
        if (err == cudaSuccess && (err = cudaEventRecord(e->used, bk->compute)) == cudaSuccess)
            e->use_recorded = true;
    }
    if (rc == TIDE_OK && err != cudaSuccess)
        rc = cuda_bk_fail(op, "cudaMemsetAsync/cudaEventCreate/cudaEventRecord", err);
    if (rc) {
        cuda_bk_expert_destroy(bk, e);
        return rc;
    }
    *out = e;
    return TIDE_OK;
}

int cuda_bk_expert_fill(struct tide_backend *bk, struct tide_expert *e,
                        const struct tide_view *const v[3], bool sync, const char *op)
{
    char *dev = e->dev;
    int rc = TIDE_OK;
    for (int j = 0; j < 3 && rc == TIDE_OK; j++) {
        /* bf16: the whole matrix; quantized: its values, then its scales. */
        const void *src[2] = {v[j]->data, e->qfmt != TIDE_QFMT_NONE ? v[j]->scale->data : NULL};
        size_t at[2], n[2];
        if (e->qfmt == TIDE_QFMT_NONE) {
            n[0] = (size_t)(e->hidden * e->inter) * sizeof(uint16_t);
            at[0] = (size_t)j * n[0];
            n[1] = at[1] = 0;
        } else {
            at[0] = e->part[j].values;
            n[0] = e->part[j].n_values;
            at[1] = e->part[j].scales;
            n[1] = e->part[j].n_scales;
        }
        for (int k = 0; k < 2 && rc == TIDE_OK; k++)
            if (n[k])
                rc = sync ? cuda_bk_upload_sync(bk, dev + at[k], src[k], n[k], op)
                          : cuda_bk_promote(bk, dev + at[k], src[k], n[k]);
    }
    return rc;
}

void cuda_bk_expert_destroy(struct tide_backend *bk, struct tide_expert *e)
{
    if (!e)
        return;
    if (e->magic != CUDA_BK_EXPERT_MAGIC) {
        tide_error(CUDA_BK_NAME ": expert_destroy: not an expert of this backend");
        return;
    }
    if (bk) {
        /* A kernel may still read it, or a promotion still write it. */
        cudaSetDevice(bk->device);
        cudaStreamSynchronize(bk->copy);
        cudaStreamSynchronize(bk->compute);
        bk->n_experts--;
    }
    if (e->loaded)
        cudaEventDestroy(e->loaded);
    if (e->used)
        cudaEventDestroy(e->used);
    if (e->dev)
        cudaFree(e->dev);
    e->magic = 0;
    free(e);
}

/* A resident device copy, uploaded synchronously: bf16, or the compressed
 * values and scales of a block-quantized expert (the format and block are
 * gate's; up and down must match). */
static int cuda_bk_expert_create(struct tide_backend *bk, const struct tide_view *gate,
                                 const struct tide_view *up, const struct tide_view *down,
                                 struct tide_expert **out)
{
    const char *op = "expert_create";
    if (!bk || !out)
        return cuda_bk_inval(op, "NULL argument");
    *out = NULL;
    const int fmt = gate ? gate->qfmt : TIDE_QFMT_NONE;
    const int *block = gate ? gate->qblock : NULL;
    int64_t H, I;
    int rc = cuda_bk_check_expert_views(op, fmt, block, gate, up, down, &H, &I);
    struct tide_expert *e = NULL;
    if (!rc)
        rc = cuda_bk_expert_alloc(bk, H, I, fmt, block, false, op, &e);
    if (rc)
        return rc;
    const struct tide_view *v[3] = {gate, up, down};
    if ((rc = cuda_bk_expert_fill(bk, e, v, true, op))) {
        cuda_bk_expert_destroy(bk, e);
        return rc;
    }
    *out = e;
    return TIDE_OK;
}

/* ---- descriptor --------------------------------------------------------- */

/* Is there a CUDA device of compute capability 8.0 or newer? Keeps nothing:
 * cudaGetDeviceCount initialises the driver but creates no context. */
static int cuda_bk_probe(char *why, size_t why_len)
{
    int count = -1; /* left at -1 by a failing call */
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount: %s: %s", cudaGetErrorName(err),
                 cudaGetErrorString(err));
        cudaGetLastError();
        return TIDE_E_UNSUPPORTED;
    }
    if (count < 1) {
        snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount found none");
        return TIDE_E_UNSUPPORTED;
    }
    int best_major = 0, best_minor = 0;
    for (int d = 0; d < count; d++) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess)
            continue;
        if (major >= 8)
            return TIDE_OK;
        if (major > best_major || (major == best_major && minor > best_minor)) {
            best_major = major;
            best_minor = minor;
        }
    }
    cudaGetLastError();
    snprintf(why, why_len,
             "no CUDA device of compute capability 8.0 or newer (the best of %d is %d.%d)", count,
             best_major, best_minor);
    return TIDE_E_UNSUPPORTED;
}

static const struct tide_backend_ops cuda_bk_ops = {
    .size = sizeof(struct tide_backend_ops),
    .create = cuda_bk_create,
    .destroy = cuda_bk_destroy,
    .describe = cuda_bk_describe,
    .buffer_alloc = cuda_bk_buffer_alloc,
    .buffer_free = cuda_bk_buffer_free,
    .buffer_host_ptr = cuda_bk_buffer_host_ptr,
    .write = cuda_bk_write,
    .read = cuda_bk_read,
    .weight_create = cuda_bk_weight_create,
    .weight_destroy = cuda_bk_weight_destroy,
    .expert_create = cuda_bk_expert_create,
    .expert_destroy = cuda_bk_expert_destroy,
    .embed = cuda_bk_embed,
    .matmul = cuda_bk_matmul,
    .rmsnorm = cuda_bk_rmsnorm,
    .rope = cuda_bk_rope,
    .attention = cuda_bk_attention,
    .swiglu = cuda_bk_swiglu,
    .add = cuda_bk_add,
    .convert = cuda_bk_convert,
    .router = cuda_bk_router,
    .expert_ffn = cuda_bk_expert_ffn,
    .moe_combine = cuda_bk_moe_combine,
    .sync = cuda_bk_sync,
    .slot_create = cuda_bk_slot_create,
    .slot_load = cuda_bk_slot_load,
    .gather_rows = cuda_bk_gather_rows,
    .scatter_rows = cuda_bk_scatter_rows,
    .copy_sync = cuda_bk_copy_sync,
    .timings = cuda_bk_timings,
    .mem_info = cuda_bk_mem_info,
    .expert_ffn_batch = cuda_bk_expert_ffn_batch,
    .slot_create_q = cuda_bk_slot_create_q,
};

static const struct tide_plugin_desc cuda_bk_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_BACKEND,
    .name = CUDA_BK_NAME,
    .version = "0.1.0",
    .summary = "GPU backend: cuBLAS bf16 matmuls, CUDA kernels, expert slots promoted on a copy "
               "stream",
    .ops = &cuda_bk_ops,
    .options = cuda_bk_options,
    .probe = cuda_bk_probe,
};

TIDE_PLUGIN_DEFINE(cuda_bk_desc)
