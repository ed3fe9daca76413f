/* Backend conformance: every op of struct tide_backend_ops on random inputs,
 * against the plain-C reference in ref_ops.c, at several shapes including
 * strided views and odd sizes, plus error paths.
 *
 * Usage: test_backend_ops BACKEND-NAME. The backend is loaded by name through
 * the core loader from $TIDE_PLUGIN_DIR; exit 77 when its probe() refuses
 * (for example no CUDA device).
 *
 * Tolerances: each reference value comes with an error bound derived from the
 * contract (see ref_ops.h): f32 accumulation in any order gives
 * (n+2)*2^-24*sum|terms|; bf16 outputs must lie between the bf16 roundings of
 * (value - bound) and (value + bound). Exact ops (add, convert, embed, copies,
 * router ids) are compared bit for bit. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "harness.h"
#include "loader.h"
#include "ref_ops.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

/* The backend under test. */
static const struct tide_backend_ops *ops;
static struct tide_backend *bk;

/* Buffers allocated by the current test, freed by free_all(). */
static struct tide_buffer *bufs[64];
static int n_bufs;

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1). */
static float rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rnd_array(size_t n, bool bf16)
{
    float *a = malloc(sizeof *a * n);
    for (size_t i = 0; i < n; i++)
        a[i] = bf16 ? tide_round_bf16(rnd()) : rnd();
    return a;
}

static void free_all(void)
{
    for (int i = 0; i < n_bufs; i++)
        ops->buffer_free(bk, bufs[i]);
    n_bufs = 0;
}

/* A [rows, cols] view with row stride `stride` that starts `pad` elements into
 * a fresh buffer, so strided views and non-zero offsets are exercised. */
static struct tide_tensor new_view(enum tide_dtype dt, int64_t rows, int64_t cols, int64_t stride,
                                   int64_t pad)
{
    struct tide_tensor t = {0};
    CHECK(n_bufs < (int)(sizeof bufs / sizeof bufs[0]));
    if (n_bufs == (int)(sizeof bufs / sizeof bufs[0]))
        return t;
    size_t bytes = (size_t)(pad + rows * stride + 8) * tide_dtype_size(dt);
    int rc = ops->buffer_alloc(bk, bytes, &bufs[n_bufs]);
    CHECK_EQ_INT(rc, TIDE_OK);
    if (rc)
        return t;
    t.buf = bufs[n_bufs++];
    t.offset = (size_t)pad * tide_dtype_size(dt);
    t.dtype = dt;
    t.rows = rows;
    t.cols = cols;
    t.stride = stride;
    return t;
}

/* Write f32 values (converted to the view's dtype) into a view. */
static void put(const struct tide_tensor *t, const float *v)
{
    size_t n = (size_t)(t->rows * t->cols);
    if (t->dtype == TIDE_DTYPE_BF16) {
        uint16_t *h = malloc(sizeof *h * n + 1);
        for (size_t i = 0; i < n; i++)
            h[i] = tide_f32_to_bf16(v[i]);
        CHECK_EQ_INT(ops->write(bk, t, h), TIDE_OK);
        free(h);
    } else {
        CHECK_EQ_INT(ops->write(bk, t, v), TIDE_OK);
    }
}

/* Read a view as f32 values (malloc'd). */
static float *get(const struct tide_tensor *t)
{
    size_t n = (size_t)(t->rows * t->cols);
    float *v = malloc(sizeof *v * n + 1);
    if (t->dtype == TIDE_DTYPE_BF16) {
        uint16_t *h = malloc(sizeof *h * n + 1);
        CHECK_EQ_INT(ops->read(bk, t, h), TIDE_OK);
        for (size_t i = 0; i < n; i++)
            v[i] = tide_bf16_to_f32(h[i]);
        free(h);
    } else {
        CHECK_EQ_INT(ops->read(bk, t, v), TIDE_OK);
    }
    return v;
}

/* Compare n values with reference values and bounds; bf16 results must lie
 * between the bf16 roundings of want -/+ err. Reports the first mismatches. */
static void check_values(const char *what, const float *got, const double *want, const double *err,
                         size_t n, bool bf16)
{
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double lo = want[i] - err[i], hi = want[i] + err[i];
        if (bf16) {
            lo = ref_bf16(lo);
            hi = ref_bf16(hi);
        }
        bool ok = got[i] >= lo && got[i] <= hi;
        double d = fabs(got[i] - want[i]);
        worst = d > worst ? d : worst;
        if (!ok && bad++ < 5)
            fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (+-%.3g)\n", what, i, (double)got[i],
                    want[i], err[i]);
    }
    test_checks++;
    if (bad) {
        test_failures++;
        fprintf(stderr, "%s: %d of %zu values outside the bound\n", what, bad, n);
    }
}

/* Values that must match exactly. */
static void check_exact(const char *what, const float *got, const float *want, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof got[i]) && bad++ < 5)
            fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g\n", what, i, (double)got[i],
                    (double)want[i]);
    test_checks++;
    if (bad) {
        test_failures++;
        fprintf(stderr, "%s: %d of %zu values differ\n", what, bad, n);
    }
}

static struct tide_view host_view(const void *data, enum tide_dtype dt, int ndim, int64_t d0,
                                  int64_t d1, const char *name)
{
    struct tide_view v = {.data = data, .dtype = dt, .ndim = ndim, .name = name};
    v.shape[0] = d0;
    v.shape[1] = d1;
    v.nbytes = (size_t)tide_view_numel(&v) * tide_dtype_size(dt);
    return v;
}

/* A bf16 host copy of f32 values (already bf16-representable). */
static uint16_t *to_bf16(const float *v, size_t n)
{
    uint16_t *h = malloc(sizeof *h * n + 1);
    for (size_t i = 0; i < n; i++)
        h[i] = tide_f32_to_bf16(v[i]);
    return h;
}

static struct tide_weight *make_weight(const float *v, enum tide_dtype dt, int ndim, int64_t d0,
                                       int64_t d1, enum tide_weight_kind kind, void **keep)
{
    size_t n = (size_t)(d0 * (ndim > 1 ? d1 : 1));
    void *data = (void *)v;
    *keep = NULL;
    if (dt == TIDE_DTYPE_BF16)
        data = *keep = to_bf16(v, n);
    struct tide_view view = host_view(data, dt, ndim, d0, d1, "test.weight");
    struct tide_weight *w = NULL;
    CHECK_EQ_INT(ops->weight_create(bk, &view, kind, &w), TIDE_OK);
    return w;
}

/* Last error message, captured through the log sink. */
static char last_error[1024];
static int n_errors;

static void sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR) {
        snprintf(last_error, sizeof last_error, "%s", msg);
        n_errors++;
    }
}

/* Start (clearing the last message) or stop capturing error messages. */
static void capture_errors(bool on)
{
    if (on) {
        last_error[0] = 0;
        n_errors = 0;
    }
    tide_log_set_sink(on ? sink : NULL, NULL);
}

/* ---- tests -------------------------------------------------------------- */

static void test_memory(void)
{
    CHECK(ops->describe(bk) && ops->describe(bk)[0]);
    fprintf(stderr, "backend: %s\n", ops->describe(bk));
    struct tide_tensor t = new_view(TIDE_DTYPE_F32, 5, 7, 11, 3);
    float *z = get(&t);
    for (int i = 0; i < 35; i++)
        CHECK(z[i] == 0.0f); /* zero-filled */
    free(z);
    float *v = rnd_array(35, false);
    put(&t, v);
    float *back = get(&t);
    check_exact("write/read strided", back, v, 35);
    /* The padding between rows is untouched. */
    float *host = ops->buffer_host_ptr(bk, t.buf);
    if (host) {
        CHECK(host[3 + 7] == 0.0f && host[3 + 11 + 10] == 0.0f);
        CHECK(host[3 + 11] == v[7]);
    }
    CHECK_EQ_INT(ops->sync(bk), TIDE_OK);
    free(v);
    free(back);
    free_all();
}

/* y = x W^T for x [T,K] at row stride sx and y [T,N] at row stride sy. */
static void run_matmul(int T, int N, int K, int sx, int sy, enum tide_dtype wdt)
{
    float *x = rnd_array((size_t)T * K, true),
          *w = rnd_array((size_t)N * K, wdt == TIDE_DTYPE_BF16);
    void *keep;
    struct tide_weight *wt = make_weight(w, wdt, 2, N, K, TIDE_WEIGHT_MATMUL, &keep);
    if (wdt != TIDE_DTYPE_BF16) /* the backend rounds f32 weights to bf16 */
        for (int i = 0; i < N * K; i++)
            w[i] = tide_round_bf16(w[i]);
    struct tide_tensor xt = new_view(TIDE_DTYPE_BF16, T, K, sx, 5);
    struct tide_tensor yt = new_view(TIDE_DTYPE_F32, T, N, sy, 3);
    put(&xt, x);
    CHECK_EQ_INT(ops->matmul(bk, &xt, wt, &yt), TIDE_OK);
    float *y = get(&yt);
    double *want = malloc(sizeof *want * (size_t)T * N), *err = malloc(sizeof *err * (size_t)T * N);
    ref_matmul(x, w, T, N, K, want, err);
    char what[96];
    snprintf(what, sizeof what, "matmul T=%d N=%d K=%d sx=%d sy=%d %s", T, N, K, sx, sy,
             tide_dtype_name(wdt));
    check_values(what, y, want, err, (size_t)T * N, false);
    ops->weight_destroy(bk, wt);
    free(keep);
    free(x);
    free(w);
    free(y);
    free(want);
    free(err);
    free_all();
}

static void test_matmul(void)
{
    run_matmul(1, 64, 48, 48, 64, TIDE_DTYPE_BF16);
    run_matmul(3, 37, 50, 50, 37, TIDE_DTYPE_BF16);       /* K not a multiple of 16 */
    run_matmul(8, 96, 200, 200, 96, TIDE_DTYPE_BF16);     /* a full bucket, contiguous */
    run_matmul(8, 96, 200, 232, 101, TIDE_DTYPE_BF16);    /* a full bucket, strided */
    run_matmul(33, 70, 130, 141, 75, TIDE_DTYPE_BF16);    /* padded to a bucket */
    run_matmul(300, 24, 40, 40, 24, TIDE_DTYPE_BF16);     /* more than one chunk */
    run_matmul(4, 512, 2048, 2048, 512, TIDE_DTYPE_BF16); /* expert-sized */
    run_matmul(5, 20, 33, 33, 20, TIDE_DTYPE_F32);        /* f32 checkpoint tensor */
}

/* A bf16 matmul case: T rows of x against random N x K weights, in dense
 * views, and y = x W^T as the backend computes it for all T rows. */
struct mm_case {
    float *x, *w, *y;
    void *keep;
    struct tide_weight *wt;
    struct tide_tensor xt, yt;
};

static void mm_case_init(struct mm_case *c, int T, int N, int K)
{
    c->x = rnd_array((size_t)T * K, true);
    c->w = rnd_array((size_t)N * K, true);
    c->wt = make_weight(c->w, TIDE_DTYPE_BF16, 2, N, K, TIDE_WEIGHT_MATMUL, &c->keep);
    c->xt = new_view(TIDE_DTYPE_BF16, T, K, K, 0);
    c->yt = new_view(TIDE_DTYPE_F32, T, N, N, 0);
    put(&c->xt, c->x);
    CHECK_EQ_INT(ops->matmul(bk, &c->xt, c->wt, &c->yt), TIDE_OK);
    c->y = get(&c->yt);
}

static void mm_case_free(struct mm_case *c)
{
    ops->weight_destroy(bk, c->wt);
    free(c->keep);
    free(c->x);
    free(c->w);
    free(c->y);
    free_all();
}

/* buffer_wrap (optional): a matmul into the caller's memory, one element
 * past an aligned start, gives the bits of the same matmul into a backend
 * buffer; the memory around the view is untouched, and buffer_free leaves
 * the memory to the caller (ASan reports a free of it). */
static void test_buffer_wrap(void)
{
    if (!TIDE_OPS_HAS(ops, buffer_wrap)) {
        fprintf(stderr, "buffer_wrap: not provided by this backend\n");
        return;
    }
    enum { T = 5, N = 70, K = 64 };
    struct mm_case c;
    mm_case_init(&c, T, N, K);
    float *mem = malloc(sizeof *mem * (T * N + 2));
    for (int i = 0; i < T * N + 2; i++)
        mem[i] = -7.0f;
    struct tide_buffer *wb = NULL;
    CHECK_EQ_INT(ops->buffer_wrap(bk, mem + 1, sizeof *mem * T * N, &wb), TIDE_OK);
    if (wb) {
        CHECK(ops->buffer_host_ptr(bk, wb) == (void *)(mem + 1));
        struct tide_tensor ot = tide_tensor_2d(wb, TIDE_DTYPE_F32, T, N);
        CHECK_EQ_INT(ops->matmul(bk, &c.xt, c.wt, &ot), TIDE_OK);
        CHECK_EQ_INT(ops->sync(bk), TIDE_OK);
        ops->buffer_free(bk, wb);
        CHECK(memcmp(mem + 1, c.y, sizeof *mem * T * N) == 0);
        CHECK(mem[0] == -7.0f && mem[T * N + 1] == -7.0f);
    }
    free(mem);
    mm_case_free(&c);
}

static void run_rmsnorm(int T, int C, int group, int stride, bool in_place, enum tide_dtype ydt,
                        float scale)
{
    float *x = rnd_array((size_t)T * C, false), *w = rnd_array((size_t)group, false);
    for (int i = 0; i < T * C; i++)
        x[i] *= scale;
    void *keep;
    struct tide_weight *wt =
        make_weight(w, TIDE_DTYPE_BF16, 1, group, 0, TIDE_WEIGHT_VECTOR, &keep);
    for (int j = 0; j < group; j++)
        w[j] = tide_round_bf16(w[j]);
    /* x lives inside a wider tensor (per-head norm of q/k inside a fused qkv). */
    struct tide_tensor wide = new_view(TIDE_DTYPE_F32, T, stride, stride, 0);
    float *wv = rnd_array((size_t)T * stride, false);
    put(&wide, wv);
    struct tide_tensor xt = tide_tensor_slice(&wide, 0, T, 2, C);
    put(&xt, x);
    struct tide_tensor yt = in_place ? xt : new_view(ydt, T, C, C + 1, 1);
    CHECK_EQ_INT(ops->rmsnorm(bk, &xt, wt, group, 1e-6f, &yt), TIDE_OK);
    float *y = get(&yt);
    double *want = malloc(sizeof *want * (size_t)T * C), *err = malloc(sizeof *err * (size_t)T * C);
    ref_rmsnorm(x, w, T, C, group, 1e-6f, want, err);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm T=%d C=%d group=%d %s%s", T, C, group,
             tide_dtype_name(yt.dtype), in_place ? " in place" : "");
    check_values(what, y, want, err, (size_t)T * C, yt.dtype == TIDE_DTYPE_BF16);
    /* Columns outside the view are untouched. */
    float *after = get(&wide);
    for (int t = 0; t < T; t++) {
        CHECK(after[t * stride] == wv[t * stride] && after[t * stride + 1] == wv[t * stride + 1]);
        for (int c = C + 2; c < stride; c++)
            CHECK(after[t * stride + c] == wv[t * stride + c]);
    }
    ops->weight_destroy(bk, wt);
    free(keep);
    free(after);
    free(wv);
    free(x);
    free(w);
    free(y);
    free(want);
    free(err);
    free_all();
}

static void test_rmsnorm(void)
{
    run_rmsnorm(1, 64, 64, 64 + 2, false, TIDE_DTYPE_F32, 3.0f);
    run_rmsnorm(3, 48, 48, 60, false, TIDE_DTYPE_BF16, 3.0f);
    run_rmsnorm(8, 6 * 16, 16, 10 * 16, true, TIDE_DTYPE_F32, 3.0f); /* per head, in place */
    run_rmsnorm(33, 2048, 2048, 2050, false, TIDE_DTYPE_F32, 3.0f);
    run_rmsnorm(2, 40, 20, 44, false, TIDE_DTYPE_F32, 1e-3f); /* mean(x^2) ~ eps */
}

static void run_rope(int T, int nh, int hd, int rot, int64_t pos0)
{
    const int C = nh * hd, stride = 3 * C + 4;
    struct tide_tensor wide = new_view(TIDE_DTYPE_F32, T, stride, stride, 2);
    float *wv = rnd_array((size_t)T * stride, false);
    put(&wide, wv);
    struct tide_tensor xt = tide_tensor_slice(&wide, 0, T, C, C); /* the "k" part */
    float *x = get(&xt);
    CHECK_EQ_INT(ops->rope(bk, &xt, hd, rot, 600000.0f, pos0), TIDE_OK);
    float *y = get(&xt), *orig = malloc(sizeof *orig * (size_t)T * C);
    memcpy(orig, x, sizeof *orig * (size_t)T * C);
    ref_rope(x, T, C, hd, rot, 600000.0f, pos0);
    double *want = malloc(sizeof *want * (size_t)T * C), *err = malloc(sizeof *err * (size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)t * C + c;
            int j = c % hd, half = rot / 2;
            want[i] = x[i];
            /* cos/sin may differ by an ulp on other devices. */
            err[i] = j < rot
                         ? 8 * REF_U * (fabs(orig[i]) + fabs(orig[j < half ? i + half : i - half]))
                         : 0.0;
        }
    char what[96];
    snprintf(what, sizeof what, "rope T=%d heads=%d hd=%d rot=%d pos0=%lld", T, nh, hd, rot,
             (long long)pos0);
    check_values(what, y, want, err, (size_t)T * C, false);
    float *after = get(&wide);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < stride; c++)
            if (c < C || c >= 2 * C)
                CHECK(after[t * stride + c] == wv[t * stride + c]);
    free(after);
    free(wv);
    free(x);
    free(y);
    free(orig);
    free(want);
    free(err);
    free_all();
}

static void test_rope(void)
{
    run_rope(1, 2, 16, 16, 0);
    run_rope(3, 4, 32, 16, 7);
    run_rope(33, 2, 128, 64, 4090); /* LLaDA2 shape: rope on 64 of 128 dims, large positions */
}

static void run_attention(int64_t pos0, int n, int nh, int nkv, int hd, int block,
                          enum tide_dtype odt)
{
    const int qc = nh * hd, kc = nkv * hd, total = (int)pos0 + n;
    float *q = rnd_array((size_t)n * qc, false), *k = rnd_array((size_t)total * kc, false);
    float *v = rnd_array((size_t)total * kc, false);
    for (int i = 0; i < n * qc; i++)
        q[i] *= 2.0f;
    /* q, k and v as strided slices of fused qkv-like tensors. */
    struct tide_tensor qw = new_view(TIDE_DTYPE_F32, n, qc + 2 * kc, qc + 2 * kc, 1);
    struct tide_tensor qt = tide_tensor_slice(&qw, 0, n, 0, qc);
    struct tide_tensor kvw = new_view(TIDE_DTYPE_F32, total + 3, 2 * kc + 1, 2 * kc + 1, 0);
    struct tide_tensor kt = tide_tensor_slice(&kvw, 0, total + 3, 0, kc);
    struct tide_tensor vt = tide_tensor_slice(&kvw, 0, total + 3, kc + 1, kc);
    struct tide_tensor ot = new_view(odt, n, qc, qc + 3, 2);
    put(&qt, q);
    struct tide_tensor k_span = tide_tensor_slice(&kt, 0, total, 0, kc);
    struct tide_tensor v_span = tide_tensor_slice(&vt, 0, total, 0, kc);
    put(&k_span, k);
    put(&v_span, v);
    /* Rows beyond pos0+n hold garbage that must not be read. */
    float junk[64];
    for (int i = 0; i < 64; i++)
        junk[i] = 1e30f;
    struct tide_tensor tail = tide_tensor_slice(&kvw, total, 1, 0, kc < 64 ? kc : 64);
    put(&tail, junk);
    struct tide_attn_args a = {.size = sizeof a,
                               .q = &qt,
                               .k_cache = &kt,
                               .v_cache = &vt,
                               .out = &ot,
                               .pos0 = pos0,
                               .n = n,
                               .n_heads = nh,
                               .n_kv_heads = nkv,
                               .head_dim = hd,
                               .block = block,
                               .scale = 1.0f / sqrtf((float)hd)};
    CHECK_EQ_INT(ops->attention(bk, &a), TIDE_OK);
    float *o = get(&ot);
    double *want = malloc(sizeof *want * (size_t)n * qc),
           *err = malloc(sizeof *err * (size_t)n * qc);
    ref_attention(q, k, v, pos0, n, nh, nkv, hd, block, a.scale, want, err);
    char what[128];
    snprintf(what, sizeof what, "attention pos0=%lld n=%d heads=%d/%d hd=%d block=%d %s",
             (long long)pos0, n, nh, nkv, hd, block, tide_dtype_name(odt));
    check_values(what, o, want, err, (size_t)n * qc, odt == TIDE_DTYPE_BF16);
    free(q);
    free(k);
    free(v);
    free(o);
    free(want);
    free(err);
    free_all();
}

static void test_attention(void)
{
    run_attention(0, 1, 2, 1, 16, 4, TIDE_DTYPE_F32);
    run_attention(6, 7, 4, 2, 16, 4, TIDE_DTYPE_F32);      /* partial blocks on both sides */
    run_attention(5, 3, 4, 4, 24, 8, TIDE_DTYPE_BF16);     /* MHA, bf16 out */
    run_attention(64, 32, 16, 4, 128, 32, TIDE_DTYPE_F32); /* LLaDA2-mini heads */
}

static void test_swiglu(void)
{
    const int T = 3, I = 50;
    float *g = rnd_array((size_t)T * I, false), *u = rnd_array((size_t)T * I, false);
    for (int i = 0; i < T * I; i++)
        g[i] *= 8.0f;
    struct tide_tensor gt = new_view(TIDE_DTYPE_F32, T, I, I + 5, 1);
    struct tide_tensor ut = new_view(TIDE_DTYPE_F32, T, I, I + 2, 0);
    struct tide_tensor ot = new_view(TIDE_DTYPE_BF16, T, I, I + 7, 3);
    put(&gt, g);
    put(&ut, u);
    CHECK_EQ_INT(ops->swiglu(bk, &gt, &ut, &ot), TIDE_OK);
    float *o = get(&ot);
    double want[150], err[150];
    ref_swiglu(g, u, T * I, want, err);
    check_values("swiglu", o, want, err, (size_t)T * I, true);
    free(g);
    free(u);
    free(o);
    free_all();
}

static void test_add(void)
{
    const int T = 5, C = 33;
    float *a = rnd_array((size_t)T * C, false), *b = rnd_array((size_t)T * C, false);
    struct tide_tensor at = new_view(TIDE_DTYPE_F32, T, C, C + 3, 1);
    struct tide_tensor bt = new_view(TIDE_DTYPE_F32, T, C, C, 0);
    put(&at, a);
    put(&bt, b);
    CHECK_EQ_INT(ops->add(bk, &at, &bt), TIDE_OK);
    float *r = get(&at);
    for (int i = 0; i < T * C; i++)
        a[i] += b[i];
    check_exact("add", r, a, (size_t)T * C);
    free(a);
    free(b);
    free(r);
    free_all();
}

static void test_convert(void)
{
    const int T = 4, C = 19;
    float *a = rnd_array((size_t)T * C, false);
    /* Ties: halfway between two bf16 values rounds to the even one. */
    a[0] = 1.0f + 1.0f / 256.0f;    /* -> 1.0 */
    a[1] = 1.0f + 3.0f / 256.0f;    /* -> 1.0 + 4/256 */
    a[2] = -(1.0f + 1.0f / 256.0f); /* -> -1.0 */
    a[3] = 3.4028235e38f;           /* rounds up to +inf */
    struct tide_tensor f = new_view(TIDE_DTYPE_F32, T, C, C + 1, 2);
    struct tide_tensor h = new_view(TIDE_DTYPE_BF16, T, C, C + 4, 1);
    struct tide_tensor f2 = new_view(TIDE_DTYPE_F32, T, C, C, 0);
    struct tide_tensor h2 = new_view(TIDE_DTYPE_BF16, T, C, C + 2, 3);
    put(&f, a);
    CHECK_EQ_INT(ops->convert(bk, &f, &h), TIDE_OK);   /* f32 -> bf16 */
    CHECK_EQ_INT(ops->convert(bk, &h, &h2), TIDE_OK);  /* bf16 copy */
    CHECK_EQ_INT(ops->convert(bk, &h2, &f2), TIDE_OK); /* bf16 -> f32 */
    float *r = get(&f2), *want = malloc(sizeof *want * (size_t)T * C);
    for (int i = 0; i < T * C; i++)
        want[i] = tide_round_bf16(a[i]);
    CHECK(want[0] == 1.0f && want[1] == 1.0f + 4.0f / 256.0f && want[2] == -1.0f);
    check_exact("convert f32->bf16->bf16->f32", r, want, (size_t)T * C);
    CHECK_EQ_INT(ops->convert(bk, &f, &f2), TIDE_OK); /* f32 copy */
    float *r2 = get(&f2);
    check_exact("convert f32 copy", r2, a, (size_t)T * C);
    free(a);
    free(r);
    free(r2);
    free(want);
    free_all();
}

static void test_embed(void)
{
    const int V = 50, H = 24, n = 6;
    float *table = rnd_array((size_t)V * H, true);
    void *keep;
    struct tide_weight *wt = make_weight(table, TIDE_DTYPE_BF16, 2, V, H, TIDE_WEIGHT_EMBED, &keep);
    int32_t ids[6] = {0, 49, 7, 7, 23, 1};
    struct tide_tensor ot = new_view(TIDE_DTYPE_F32, n, H, H + 3, 1);
    CHECK_EQ_INT(ops->embed(bk, wt, ids, n, &ot), TIDE_OK);
    float *o = get(&ot), *want = malloc(sizeof *want * (size_t)n * H);
    for (int i = 0; i < n; i++)
        memcpy(want + i * H, table + (size_t)ids[i] * H, sizeof *want * (size_t)H);
    check_exact("embed", o, want, (size_t)n * H);
    /* An f32 table (a checkpoint may store it so) gives the same rows. */
    void *keep32;
    struct tide_weight *w32 =
        make_weight(table, TIDE_DTYPE_F32, 2, V, H, TIDE_WEIGHT_EMBED, &keep32);
    CHECK_EQ_INT(ops->embed(bk, w32, ids, n, &ot), TIDE_OK);
    float *o32 = get(&ot);
    check_exact("embed f32 table", o32, want, (size_t)n * H);
    ops->weight_destroy(bk, w32);
    free(o32);
    /* An id past the vocabulary fails cleanly, naming the id. */
    int32_t bad[2] = {3, 50};
    struct tide_tensor o2 = tide_tensor_slice(&ot, 0, 2, 0, H);
    capture_errors(true);
    int rc = ops->embed(bk, wt, bad, 2, &o2);
    capture_errors(false);
    CHECK(rc == TIDE_E_RANGE || rc == TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "50");
    CHECK_CONTAINS(last_error, "embed");
    int32_t neg[1] = {-1};
    struct tide_tensor o1 = tide_tensor_slice(&ot, 0, 1, 0, H);
    capture_errors(true);
    rc = ops->embed(bk, wt, neg, 1, &o1);
    capture_errors(false);
    CHECK(rc != TIDE_OK);
    CHECK_CONTAINS(last_error, "-1");
    ops->weight_destroy(bk, wt);
    free(keep);
    free(table);
    free(o);
    free(want);
    free_all();
}

static void run_router(int n, int E, int n_group, int topk_group, int top_k, bool with_bias,
                       bool norm, float scale)
{
    float *logits = rnd_array((size_t)n * E, false), *bias = rnd_array((size_t)E, false);
    for (int i = 0; i < n * E; i++)
        logits[i] *= 4.0f;
    for (int e = 0; e < E; e++)
        bias[e] *= 0.1f;
    /* Token 0: all logits equal, so every tie goes to the lowest group and id. */
    for (int e = 0; e < E; e++)
        logits[e] = 0.25f;
    void *keep = NULL;
    struct tide_weight *bt =
        with_bias ? make_weight(bias, TIDE_DTYPE_F32, 1, E, 0, TIDE_WEIGHT_VECTOR, &keep) : NULL;
    struct tide_tensor lt = new_view(TIDE_DTYPE_F32, n, E, E + 2, 1);
    put(&lt, logits);
    int32_t *ids = malloc(sizeof *ids * (size_t)n * top_k),
            *rids = malloc(sizeof *rids * (size_t)n * top_k);
    float *w = malloc(sizeof *w * (size_t)n * top_k), *rw = malloc(sizeof *rw * (size_t)n * top_k);
    struct tide_router_args a = {.size = sizeof a,
                                 .logits = &lt,
                                 .bias = bt,
                                 .n_group = n_group,
                                 .topk_group = topk_group,
                                 .top_k = top_k,
                                 .norm_topk = norm,
                                 .scale = scale,
                                 .ids_host = ids,
                                 .weights_host = w};
    CHECK_EQ_INT(ops->router(bk, &a), TIDE_OK);
    ref_router(logits, with_bias ? bias : NULL, n, E, n_group, topk_group, top_k, norm, scale, rids,
               rw);
    int bad = 0;
    for (int i = 0; i < n * top_k; i++) {
        /* sigmoid, sum and division in f32: a few ulps on other devices. */
        double tol = (top_k + 10) * REF_U * fabs(rw[i]);
        if ((ids[i] != rids[i] || fabs(w[i] - rw[i]) > tol) && bad++ < 5)
            fprintf(stderr, "  router[%d]: got id %d w %.9g, want id %d w %.9g\n", i, ids[i],
                    (double)w[i], rids[i], (double)rw[i]);
    }
    CHECK_EQ_INT(bad, 0);
    if (n_group > 1 && !with_bias) /* tie-breaking: the first top_k ids of group 0.. */
        for (int j = 0; j < top_k; j++)
            CHECK_EQ_INT(ids[j], j);
    ops->weight_destroy(bk, bt);
    free(keep);
    free(logits);
    free(bias);
    free(ids);
    free(rids);
    free(w);
    free(rw);
    free_all();
}

static void test_router(void)
{
    run_router(9, 16, 4, 2, 4, true, true, 2.5f);
    run_router(5, 16, 4, 2, 4, false, true, 1.0f);
    run_router(3, 12, 1, 1, 3, false, false, 1.0f);
    run_router(33, 256, 8, 4, 8, true, true, 2.5f); /* LLaDA2-mini routing */
}

/* expert_ffn on n scattered rows of x_all [T,H] into out [R,H]. */
/* Random expert weights (bf16 values) and their host views. */
struct test_expert {
    int H, I;
    float *gate, *up, *down; /* [I,H], [I,H], [H,I] */
    uint16_t *gb, *ub, *db;  /* the same as bf16 */
    struct tide_view gv, uv, dv;
};

static void expert_make(struct test_expert *te, int H, int I)
{
    te->H = H;
    te->I = I;
    te->gate = rnd_array((size_t)I * H, true);
    te->up = rnd_array((size_t)I * H, true);
    te->down = rnd_array((size_t)H * I, true);
    te->gb = to_bf16(te->gate, (size_t)I * H);
    te->ub = to_bf16(te->up, (size_t)I * H);
    te->db = to_bf16(te->down, (size_t)H * I);
    te->gv = host_view(te->gb, TIDE_DTYPE_BF16, 2, I, H, "e.gate_proj.weight");
    te->uv = host_view(te->ub, TIDE_DTYPE_BF16, 2, I, H, "e.up_proj.weight");
    te->dv = host_view(te->db, TIDE_DTYPE_BF16, 2, H, I, "e.down_proj.weight");
}

static void expert_free(struct test_expert *te)
{
    free(te->gate);
    free(te->up);
    free(te->down);
    free(te->gb);
    free(te->ub);
    free(te->db);
}

/* expert_ffn of e (holding te's weights) on n scattered rows of x_all [T,H] into out [R,H]. */
static void check_expert(const struct tide_expert *e, const struct test_expert *te, int T, int n,
                         int R, const char *label)
{
    const int H = te->H, I = te->I;
    float *x = rnd_array((size_t)T * H, true);
    for (int i = 0; i < T * H; i++)
        x[i] = tide_round_bf16(x[i] * 4.0f);
    int32_t *rows = malloc(sizeof *rows * (size_t)n), *dst = malloc(sizeof *dst * (size_t)n);
    /* Scattered sources (repeats allowed) and distinct destinations (R coprime to 5). */
    for (int i = 0; i < n; i++) {
        rows[i] = (int32_t)((i * 7 + 3) % T);
        dst[i] = (int32_t)((i * 5 + 1) % R);
    }
    struct tide_tensor xt = new_view(TIDE_DTYPE_BF16, T, H, H + 8, 4);
    struct tide_tensor ot = new_view(TIDE_DTYPE_F32, R, H, H + 1, 1);
    put(&xt, x);
    float *sentinel = malloc(sizeof *sentinel * (size_t)R * H);
    for (int i = 0; i < R * H; i++)
        sentinel[i] = 7.0f;
    put(&ot, sentinel);
    CHECK_EQ_INT(ops->expert_ffn(bk, e, &xt, rows, dst, n, &ot), TIDE_OK);
    float *o = get(&ot), *got = malloc(sizeof *got * (size_t)n * H);
    for (int i = 0; i < n; i++)
        memcpy(got + (size_t)i * H, o + (size_t)dst[i] * H, sizeof *got * (size_t)H);
    double *want = malloc(sizeof *want * (size_t)n * H), *err = malloc(sizeof *err * (size_t)n * H);
    ref_expert_ffn(x, rows, n, te->gate, te->up, te->down, H, I, want, err);
    char what[128];
    snprintf(what, sizeof what, "%s H=%d I=%d n=%d of %d rows", label, H, I, n, T);
    check_values(what, got, want, err, (size_t)n * H, false);
    /* Rows no dst_rows entry names keep their contents. */
    for (int r = 0; r < R; r++) {
        bool named = false;
        for (int i = 0; i < n; i++)
            named |= dst[i] == r;
        if (!named)
            for (int c = 0; c < H; c++)
                CHECK(o[(size_t)r * H + c] == 7.0f);
    }
    free(x);
    free(rows);
    free(dst);
    free(sentinel);
    free(o);
    free(got);
    free(want);
    free(err);
    free_all();
}

static void run_expert(int H, int I, int T, int n, int R)
{
    struct test_expert te;
    expert_make(&te, H, I);
    struct tide_expert *e = NULL;
    CHECK_EQ_INT(ops->expert_create(bk, &te.gv, &te.uv, &te.dv, &e), TIDE_OK);
    if (e)
        check_expert(e, &te, T, n, R, "expert_ffn");
    ops->expert_destroy(bk, e);
    expert_free(&te);
}

static void test_expert_ffn(void)
{
    run_expert(72, 40, 11, 1, 9);
    run_expert(72, 40, 11, 3, 9);
    run_expert(72, 40, 11, 8, 9);
    run_expert(50, 24, 40, 33, 37);  /* H, I not multiples of 16; padded bucket */
    run_expert(2048, 512, 12, 8, 8); /* LLaDA2-mini expert */
    run_expert(40, 24, 80, 70, 73);  /* many rows: another code path in some backends */
    run_expert(1100, 40, 5, 1, 3);   /* long rows, 1-2 tokens: another kernel in some backends */
    run_expert(1100, 40, 5, 2, 3);
    run_expert(1100, 40, 7, 3, 7);
    run_expert(1100, 40, 7, 4, 7);
}

/* expert_ffn_batch (optional): several experts in one call give exactly the
 * results of one expert_ffn call each, whatever the mix of row counts (none,
 * few, more than a one-thread kernel takes), and match the reference. */
static void test_expert_batch(void)
{
    if (!TIDE_OPS_HAS(ops, expert_ffn_batch)) {
        fprintf(stderr, "  (no expert_ffn_batch)\n");
        return;
    }
    enum { NE = 7 };
    const int H = 72, I = 40, T = 20;
    const int counts[NE] = {3, 0, 1, 8, 70, 2, 5};
    struct test_expert te[NE];
    const struct tide_expert *ex[NE];
    int64_t off[NE + 1] = {0};
    for (int j = 0; j < NE; j++) {
        expert_make(&te[j], H, I);
        struct tide_expert *e = NULL;
        CHECK_EQ_INT(ops->expert_create(bk, &te[j].gv, &te[j].uv, &te[j].dv, &e), TIDE_OK);
        ex[j] = e;
        off[j + 1] = off[j] + counts[j];
    }
    const int A = (int)off[NE];
    int32_t *rows = malloc(sizeof *rows * (size_t)A), *dst = malloc(sizeof *dst * (size_t)A);
    for (int i = 0; i < A; i++) {
        rows[i] = (int32_t)((i * 7 + 3) % T);
        dst[i] = (int32_t)((i * 37 + 5) % A); /* a permutation: 37 is coprime to A = 89 */
    }
    float *x = rnd_array((size_t)T * H, true);
    struct tide_tensor xt = new_view(TIDE_DTYPE_BF16, T, H, H + 8, 4);
    struct tide_tensor o1 = new_view(TIDE_DTYPE_F32, A, H, H + 1, 1);
    struct tide_tensor o2 = new_view(TIDE_DTYPE_F32, A, H, H + 1, 1);
    put(&xt, x);
    for (int j = 0; j < NE; j++)
        if (ex[j])
            CHECK_EQ_INT(
                ops->expert_ffn(bk, ex[j], &xt, rows + off[j], dst + off[j], counts[j], &o1),
                TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn_batch(bk, NE, ex, &xt, rows, dst, off, &o2), TIDE_OK);
    float *a = get(&o1), *b = get(&o2);
    check_exact("expert_ffn_batch vs expert_ffn one by one", b, a, (size_t)A * H);
    /* And the reference, expert by expert. */
    double *want = malloc(sizeof *want * (size_t)A * H), *err = malloc(sizeof *err * (size_t)A * H);
    float *got = malloc(sizeof *got * (size_t)A * H);
    for (int j = 0; j < NE; j++) {
        if (!counts[j])
            continue;
        ref_expert_ffn(x, rows + off[j], counts[j], te[j].gate, te[j].up, te[j].down, H, I,
                       want + off[j] * H, err + off[j] * H);
        for (int i = 0; i < counts[j]; i++)
            memcpy(got + (off[j] + i) * H, b + (size_t)dst[off[j] + i] * H, sizeof *got * H);
    }
    check_values("expert_ffn_batch", got, want, err, (size_t)A * H, false);
    /* Decreasing offsets are refused. */
    int64_t bad[3] = {0, 2, 1};
    capture_errors(true);
    CHECK_EQ_INT(ops->expert_ffn_batch(bk, 2, ex, &xt, rows, dst, bad, &o2), TIDE_E_INVAL);
    capture_errors(false);
    CHECK_CONTAINS(last_error, "expert_ffn_batch");
    for (int j = 0; j < NE; j++) {
        ops->expert_destroy(bk, (struct tide_expert *)ex[j]);
        expert_free(&te[j]);
    }
    free(rows);
    free(dst);
    free(x);
    free(a);
    free(b);
    free(want);
    free(err);
    free(got);
    free_all();
}

/* ---- batch invariance --------------------------------------------------- */

/* A row's result must not depend on how many rows share the call, where it
 * sits among them, or which other experts share an expert batch: the KV path
 * then equals recompute, and a request's output does not depend on its
 * companions. Each case computes all rows in one call, then every count of
 * bi_counts at a shifting offset, and compares bit for bit. The counts cross
 * every tiling edge of the CPU kernels (groups of 4 and 8 tokens, oneDNN's
 * buckets, the 256-row chunks). */
static const int bi_counts[] = {1,  2,  3,  4,   5,   7,   8,   9,   15,  16,  17,  31,  32, 33,
                                63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 384, 511, 512};

/* Offset of the c-row part among max rows. */
static int bi_offset(int c, int max)
{
    return (c * 37) % (max - c + 1);
}

/* How many of the n rows of C values differ, bit for bit, from want's. */
static int bi_diff_rows(const float *got, const float *want, int n, int C)
{
    int d = 0;
    for (int r = 0; r < n; r++)
        d += memcmp(got + (size_t)r * C, want + (size_t)r * C, sizeof *got * (size_t)C) != 0;
    return d;
}

static void bi_report(const char *what, int c, int o, int d, int max)
{
    if (d)
        fprintf(stderr,
                "FAIL %s: %d of %d rows (from row %d) differ from the same rows of a call "
                "of %d\n",
                what, d, c, o, max);
    CHECK(d == 0);
}

/* matmul of N x K at every count up to max rows. */
static void bi_matmul(int N, int K, int max)
{
    struct mm_case mc;
    mm_case_init(&mc, max, N, K);
    char what[64];
    snprintf(what, sizeof what, "matmul N=%d K=%d", N, K);
    for (size_t i = 0; i < sizeof bi_counts / sizeof bi_counts[0] && bi_counts[i] <= max; i++) {
        const int c = bi_counts[i], o = bi_offset(c, max);
        struct tide_tensor xs = tide_tensor_slice(&mc.xt, o, c, 0, K);
        struct tide_tensor ys = tide_tensor_slice(&mc.yt, o, c, 0, N);
        CHECK_EQ_INT(ops->matmul(bk, &xs, mc.wt, &ys), TIDE_OK);
        float *part = get(&ys);
        bi_report(what, c, o, bi_diff_rows(part, mc.y + (size_t)o * N, c, N), max);
        free(part);
    }
    mm_case_free(&mc);
}

/* One expert at every count up to max rows, alone (expert_ffn) and in an
 * expert batch with two companions whose row counts change with the count. */
static void bi_expert(int H, int I, int max)
{
    struct test_expert te[3];
    struct tide_expert *ex[3] = {NULL, NULL, NULL};
    for (int j = 0; j < 3; j++) {
        expert_make(&te[j], H, I);
        CHECK_EQ_INT(ops->expert_create(bk, &te[j].gv, &te[j].uv, &te[j].dv, &ex[j]), TIDE_OK);
    }
    float *x = rnd_array((size_t)max * H, true);
    for (int i = 0; i < max * H; i++)
        x[i] = tide_round_bf16(x[i] * 4.0f);
    /* Rows 0..max-1 of out are the expert's, max.. the companions'. */
    const int comp_max = 80;
    int32_t *idx = malloc(sizeof *idx * (size_t)(max + 2 * comp_max));
    for (int i = 0; i < max + 2 * comp_max; i++)
        idx[i] = i;
    struct tide_tensor xt = new_view(TIDE_DTYPE_BF16, max, H, H + 8, 4);
    struct tide_tensor ot = new_view(TIDE_DTYPE_F32, max + 2 * comp_max, H, H, 0);
    put(&xt, x);
    if (!ex[1])
        goto out;
    CHECK_EQ_INT(ops->expert_ffn(bk, ex[1], &xt, idx, idx, max, &ot), TIDE_OK);
    struct tide_tensor first = tide_tensor_slice(&ot, 0, max, 0, H);
    float *full = get(&first);
    char what[96];
    for (size_t i = 0; i < sizeof bi_counts / sizeof bi_counts[0] && bi_counts[i] <= max; i++) {
        const int c = bi_counts[i], o = bi_offset(c, max);
        struct tide_tensor part_t = tide_tensor_slice(&ot, o, c, 0, H);
        CHECK_EQ_INT(ops->expert_ffn(bk, ex[1], &xt, idx + o, idx + o, c, &ot), TIDE_OK);
        float *part = get(&part_t);
        snprintf(what, sizeof what, "expert_ffn H=%d I=%d", H, I);
        bi_report(what, c, o, bi_diff_rows(part, full + (size_t)o * H, c, H), max);
        free(part);
        if (!TIDE_OPS_HAS(ops, expert_ffn_batch) || !ex[0] || !ex[2])
            continue;
        /* Companions: a few rows before, many or one after (their sources
         * are any rows of x; their outputs go past row max). */
        const int n0 = (c * 5) % 7, n2 = c % 3 ? comp_max : 1;
        int32_t *rows = malloc(sizeof *rows * (size_t)(n0 + c + n2)),
                *dst = malloc(sizeof *dst * (size_t)(n0 + c + n2));
        for (int r = 0; r < n0; r++) {
            rows[r] = (r * 11) % max;
            dst[r] = max + r;
        }
        for (int r = 0; r < c; r++)
            rows[n0 + r] = dst[n0 + r] = o + r;
        for (int r = 0; r < n2; r++) {
            rows[n0 + c + r] = (r * 13 + 1) % max;
            dst[n0 + c + r] = max + comp_max + r;
        }
        const struct tide_expert *batch[3] = {ex[0], ex[1], ex[2]};
        const int64_t off[4] = {0, n0, n0 + c, n0 + c + n2};
        CHECK_EQ_INT(ops->expert_ffn_batch(bk, 3, batch, &xt, rows, dst, off, &ot), TIDE_OK);
        part = get(&part_t);
        snprintf(what, sizeof what, "expert_ffn_batch H=%d I=%d (companions of %d and %d rows)", H,
                 I, n0, n2);
        bi_report(what, c, o, bi_diff_rows(part, full + (size_t)o * H, c, H), max);
        free(part);
        free(rows);
        free(dst);
    }
    free(full);
out:
    for (int j = 0; j < 3; j++) {
        ops->expert_destroy(bk, ex[j]);
        expert_free(&te[j]);
    }
    free(idx);
    free(x);
    free_all();
}

/* Attention of the queries [pos0, end) against the keys before end, for
 * every block-aligned pos0 (the positions the KV cache holds) and every block
 * end after it, against all `total` queries at once (recompute). */
static void bi_attention(int nh, int nkv, int hd, int block, int total)
{
    const int qc = nh * hd, kc = nkv * hd;
    float *q = rnd_array((size_t)total * qc, false), *k = rnd_array((size_t)total * kc, false);
    float *v = rnd_array((size_t)total * kc, false);
    for (int i = 0; i < total * qc; i++)
        q[i] *= 2.0f;
    struct tide_tensor qt = new_view(TIDE_DTYPE_F32, total, qc, qc, 0);
    struct tide_tensor kt = new_view(TIDE_DTYPE_F32, total, kc, kc, 0);
    struct tide_tensor vt = new_view(TIDE_DTYPE_F32, total, kc, kc, 0);
    struct tide_tensor ot = new_view(TIDE_DTYPE_F32, total, qc, qc, 0);
    put(&qt, q);
    put(&kt, k);
    put(&vt, v);
    struct tide_attn_args a = {.size = sizeof a,
                               .k_cache = &kt,
                               .v_cache = &vt,
                               .n_heads = nh,
                               .n_kv_heads = nkv,
                               .head_dim = hd,
                               .block = block,
                               .scale = 1.0f / sqrtf((float)hd)};
    a.q = &qt;
    a.out = &ot;
    a.pos0 = 0;
    a.n = total;
    CHECK_EQ_INT(ops->attention(bk, &a), TIDE_OK);
    float *full = get(&ot);
    char what[96];
    snprintf(what, sizeof what, "attention heads=%d/%d hd=%d block=%d", nh, nkv, hd, block);
    for (int pos0 = 0; pos0 < total; pos0 += block)
        for (int end = pos0 + block; end <= total; end += block) {
            struct tide_tensor qs = tide_tensor_slice(&qt, pos0, end - pos0, 0, qc);
            struct tide_tensor os = tide_tensor_slice(&ot, pos0, end - pos0, 0, qc);
            a.q = &qs;
            a.out = &os;
            a.pos0 = pos0;
            a.n = end - pos0;
            CHECK_EQ_INT(ops->attention(bk, &a), TIDE_OK);
            float *part = get(&os);
            bi_report(what, end - pos0, pos0,
                      bi_diff_rows(part, full + (size_t)pos0 * qc, end - pos0, qc), total);
            free(part);
        }
    free(q);
    free(k);
    free(v);
    free(full);
    free_all();
}

static void test_batch_invariance(void)
{
    bi_matmul(96, 200, 512);   /* small: bucketed by oneDNN */
    bi_matmul(4096, 4096, 40); /* 16 Mi elements: exact row counts in oneDNN */
    bi_expert(72, 40, 512);
    bi_expert(1024, 64, 512); /* rows of 1024: another tiling at 1-4 rows (raw kernel) */
    bi_attention(4, 2, 32, 32, 128);
    bi_attention(4, 4, 24, 8, 40); /* hd not a multiple of 16: the plain loops */
}

/* Row gather and scatter between a strided table and a packed block. */
static void run_rows(enum tide_dtype dt)
{
    const int T = 9, C = 21, n = 5;
    const int32_t rows[5] = {8, 0, 3, 3, 6};
    const int32_t scatter[5] = {2, 7, 0, 5, 4};
    float *v = rnd_array((size_t)T * C, true);
    struct tide_tensor table = new_view(dt, T, C, C + 3, 2);
    struct tide_tensor packed = new_view(dt, n, C, C, 0);
    put(&table, v);
    CHECK_EQ_INT(ops->gather_rows(bk, &table, rows, n, &packed), TIDE_OK);
    float *g = get(&packed), *want = malloc(sizeof *want * (size_t)T * C);
    for (int i = 0; i < n; i++)
        memcpy(want + i * C, v + rows[i] * C, sizeof *want * (size_t)C);
    check_exact("gather_rows", g, want, (size_t)n * C);
    CHECK_EQ_INT(ops->scatter_rows(bk, &packed, scatter, n, &table), TIDE_OK);
    float *s = get(&table);
    memcpy(want, v, sizeof *want * (size_t)T * C);
    for (int i = 0; i < n; i++)
        memcpy(want + scatter[i] * C, g + i * C, sizeof *want * (size_t)C);
    check_exact("scatter_rows", s, want, (size_t)T * C);
    const int32_t bad[1] = {9};
    struct tide_tensor one = tide_tensor_slice(&packed, 0, 1, 0, C);
    capture_errors(true);
    CHECK_EQ_INT(ops->gather_rows(bk, &table, bad, 1, &one), TIDE_E_INVAL);
    capture_errors(false);
    CHECK_CONTAINS(last_error, "gather_rows");
    free(v);
    free(g);
    free(s);
    free(want);
    free_all();
}

/* The optional expert-offload slots, when the backend has them. */
static void test_slots(void)
{
    if (!TIDE_OPS_HAS(ops, slot_create) || !TIDE_OPS_HAS(ops, slot_load) ||
        !TIDE_OPS_HAS(ops, gather_rows) || !TIDE_OPS_HAS(ops, scatter_rows) ||
        !TIDE_OPS_HAS(ops, copy_sync)) {
        fprintf(stderr, "  (no expert-slot ops)\n");
        return;
    }
    run_rows(TIDE_DTYPE_BF16);
    run_rows(TIDE_DTYPE_F32);
    struct test_expert a, b;
    expert_make(&a, 72, 40);
    expert_make(&b, 72, 40);
    struct tide_expert *slot = NULL;
    CHECK_EQ_INT(ops->slot_create(bk, 72, 40, &slot), TIDE_OK);
    if (slot) {
        /* Promote a, then b into the same slot: each time the slot computes that expert. */
        CHECK_EQ_INT(ops->slot_load(bk, slot, &a.gv, &a.uv, &a.dv), TIDE_OK);
        CHECK_EQ_INT(ops->copy_sync(bk), TIDE_OK);
        check_expert(slot, &a, 11, 5, 9, "slot expert a");
        CHECK_EQ_INT(ops->slot_load(bk, slot, &b.gv, &b.uv, &b.dv), TIDE_OK);
        CHECK_EQ_INT(ops->copy_sync(bk), TIDE_OK);
        check_expert(slot, &b, 11, 3, 9, "slot expert b");
        /* The views may go once copy_sync returned: the slot has its own copy. */
        memset(b.gb, 0, sizeof *b.gb * 40 * 72);
        check_expert(slot, &b, 11, 2, 9, "slot expert b after its source changed");
        struct tide_view wrong = a.gv;
        wrong.shape[0] = 41;
        capture_errors(true);
        CHECK_EQ_INT(ops->slot_load(bk, slot, &wrong, &a.uv, &a.dv), TIDE_E_INVAL);
        capture_errors(false);
        CHECK_CONTAINS(last_error, "slot_load");
    }
    ops->expert_destroy(bk, slot);
    if (TIDE_OPS_HAS(ops, timings)) {
        double copy = -1.0, expert = -1.0;
        CHECK_EQ_INT(ops->timings(bk, &copy, &expert), TIDE_OK);
        CHECK(copy > 0.0 && expert > 0.0);
    }
    if (TIDE_OPS_HAS(ops, mem_info)) {
        uint64_t free_b = 0, total_b = 0;
        CHECK_EQ_INT(ops->mem_info(bk, &free_b, &total_b), TIDE_OK);
        CHECK(total_b > 0 && free_b <= total_b);
    }
    expert_free(&a);
    expert_free(&b);
}

static void test_moe_combine(void)
{
    const int T = 5, k = 3, H = 33;
    float *parts = rnd_array((size_t)T * k * H, false), *w = rnd_array((size_t)T * k, false);
    struct tide_tensor pt = new_view(TIDE_DTYPE_F32, T * k, H, H + 2, 1);
    struct tide_tensor yt = new_view(TIDE_DTYPE_F32, T, H, H, 0);
    /* Token 1: weights 1 and parts that are rotations of (1, 1e8, -1e8), whose
     * f32 sum is 0 or 1 depending on the order. The products are exact, so the
     * in-order sum is exact with or without fused multiply-adds, and another
     * order gives a different value in some columns. */
    for (int j = 0; j < k; j++)
        w[1 * k + j] = 1.0f;
    const float order[3] = {1.0f, 1e8f, -1e8f};
    for (int c = 0; c < H; c++)
        for (int j = 0; j < k; j++)
            parts[((size_t)1 * k + j) * H + c] = order[(j + c) % 3];
    put(&pt, parts);
    float *junk = rnd_array((size_t)T * H, false);
    put(&yt, junk); /* y is overwritten, not accumulated into */
    CHECK_EQ_INT(ops->moe_combine(bk, &pt, w, k, &yt), TIDE_OK);
    float *y = get(&yt);
    double want[5 * 33], err[5 * 33];
    ref_moe_combine(parts, w, T, k, H, want, err);
    for (int c = 0; c < H; c++)
        err[1 * H + c] = 0.0; /* exact products: the order alone decides */
    check_values("moe_combine", y, want, err, (size_t)T * H, false);
    free(parts);
    free(w);
    free(junk);
    free(y);
    free_all();
}

/* Argument validation: bad shapes and dtypes fail with a message naming the op. */
static void test_errors(void)
{
    float *w = rnd_array(16 * 8, true);
    void *keep;
    struct tide_weight *wt = make_weight(w, TIDE_DTYPE_BF16, 2, 16, 8, TIDE_WEIGHT_MATMUL, &keep);
    struct tide_tensor x = new_view(TIDE_DTYPE_BF16, 2, 8, 8, 0);
    struct tide_tensor xf = new_view(TIDE_DTYPE_F32, 2, 8, 8, 0);
    struct tide_tensor y = new_view(TIDE_DTYPE_F32, 2, 15, 15, 0);
    capture_errors(true);
    CHECK_EQ_INT(ops->matmul(bk, &x, wt, &y), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "matmul");
    struct tide_tensor y16 = new_view(TIDE_DTYPE_F32, 2, 16, 16, 0);
    CHECK_EQ_INT(ops->matmul(bk, &xf, wt, &y16), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "F32");
    struct tide_tensor past = x, y4 = new_view(TIDE_DTYPE_F32, 4, 16, 16, 0);
    past.rows = 4; /* runs past the end of x's buffer */
    CHECK_EQ_INT(ops->matmul(bk, &past, wt, &y4), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "past the end");
    CHECK_EQ_INT(ops->add(bk, &xf, &y16), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "add");
    struct tide_view bad = host_view(keep, TIDE_DTYPE_BF16, 2, 4, 4, "g");
    struct tide_view bad_up = host_view(keep, TIDE_DTYPE_BF16, 2, 4, 5, "u");
    struct tide_expert *e = NULL;
    CHECK_EQ_INT(ops->expert_create(bk, &bad, &bad_up, &bad, &e), TIDE_E_INVAL);
    CHECK(e == NULL);
    CHECK_CONTAINS(last_error, "up");
    capture_errors(false);
    ops->weight_destroy(bk, wt);
    ops->weight_destroy(bk, NULL);
    ops->expert_destroy(bk, NULL);
    free(keep);
    free(w);
    free_all();
}

/* ---- main --------------------------------------------------------------- */

static void run_all(void)
{
    TEST_RUN(test_memory);
    TEST_RUN(test_matmul);
    TEST_RUN(test_buffer_wrap);
    TEST_RUN(test_rmsnorm);
    TEST_RUN(test_rope);
    TEST_RUN(test_attention);
    TEST_RUN(test_swiglu);
    TEST_RUN(test_add);
    TEST_RUN(test_convert);
    TEST_RUN(test_embed);
    TEST_RUN(test_router);
    TEST_RUN(test_expert_ffn);
    TEST_RUN(test_expert_batch);
    TEST_RUN(test_batch_invariance);
    TEST_RUN(test_slots);
    TEST_RUN(test_moe_combine);
    TEST_RUN(test_errors);
}

static void run_layout(void)
{
    TEST_RUN(test_expert_ffn);
    TEST_RUN(test_expert_batch);
    TEST_RUN(test_batch_invariance);
    TEST_RUN(test_slots);
}

static void run_gemm(void)
{
    TEST_RUN(test_matmul);
    TEST_RUN(test_expert_ffn);
    TEST_RUN(test_expert_batch);
    TEST_RUN(test_batch_invariance);
}

/* Run `body` on an instance for each choice of the enum option `name`, when
 * the backend has it, then set it back to auto. may_refuse: a choice this
 * machine cannot run may be refused at create (skipped, with the reason). */
static void run_choices(const struct tide_plugin *p, struct tide_config *cfg,
                        const struct tide_opts *opts, const char *name, bool may_refuse,
                        void (*body)(void))
{
    for (const struct tide_option *o = p->desc->options; o && o->name; o++) {
        if (strcmp(o->name, name) || !o->choices)
            continue;
        char choices[128];
        snprintf(choices, sizeof choices, "%s", o->choices);
        for (char *save = NULL, *c = strtok_r(choices, "|", &save); c;
             c = strtok_r(NULL, "|", &save)) {
            CHECK_EQ_INT(tide_config_set_value(cfg, p->desc->name, name, c, "test"), TIDE_OK);
            struct tide_backend_args args = {
                .size = sizeof args, .opts = opts, .role = TIDE_ROLE_DEVICE};
            capture_errors(may_refuse);
            const int rc = ops->create(&args, &bk);
            capture_errors(false);
            if (rc && may_refuse) {
                fprintf(stderr, "%s = %s: skipped, refused here: %s\n", name, c, last_error);
                continue;
            }
            CHECK_EQ_INT(rc, TIDE_OK);
            if (rc || !bk)
                continue;
            fprintf(stderr, "%s = %s (%s)\n", name, c,
                    TIDE_OPS_HAS(ops, describe) ? ops->describe(bk) : "");
            body();
            ops->destroy(bk);
        }
        CHECK_EQ_INT(tide_config_set_value(cfg, p->desc->name, name, "auto", "test"), TIDE_OK);
    }
}

/* Create an instance with the section's options; false on failure. */
static bool open_backend(const struct tide_plugin *p, const struct tide_opts *opts)
{
    struct tide_backend_args args = {.size = sizeof args, .opts = opts, .role = TIDE_ROLE_DEVICE};
    int rc = ops->create(&args, &bk);
    CHECK_EQ_INT(rc, TIDE_OK);
    return rc == TIDE_OK && bk;
}

int main(int argc, char **argv)
{
    tide_openmp_env_defaults(); /* as `tide` runs (the machine may be shared) */
    const char *bk_name = argc > 1 ? argv[1] : "backend-cpu-onednn";
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (!dir) {
        fprintf(stderr, "TIDE_PLUGIN_DIR is not set (ctest sets it)\n");
        return 1;
    }
    struct tide_plugin_set *set = NULL;
    if (tide_plugins_scan_dirs(&dir, 1, &set) != TIDE_OK)
        return 1;
    const struct tide_plugin *found = tide_plugins_find(set, bk_name);
    if (found && !found->usable) {
        fprintf(stderr, "skipped: %s: %s\n", bk_name, found->why);
        tide_plugins_free(set);
        return 77;
    }
    const struct tide_plugin *p = tide_plugins_get(set, bk_name, TIDE_PLUGIN_BACKEND, "test");
    CHECK(p != NULL);
    if (!p) {
        tide_plugins_free(set);
        TEST_DONE();
    }
    ops = p->desc->ops;
    struct tide_config *cfg = tide_config_create();
    CHECK_EQ_INT(tide_config_add_section(cfg, p->desc->name, p->desc->options, p->desc->name,
                                         p->desc->summary),
                 TIDE_OK);
    const struct tide_opts *opts = tide_config_section(cfg, p->desc->name);
    if (open_backend(p, opts)) {
        run_all();
        ops->destroy(bk);
    }
    /* Every expert layout the backend offers; every matmul kernel (a `gemm`
     * switch): the conformance of its matmuls and experts, and their batch
     * invariance. A kernel this CPU cannot run is refused at create: skipped. */
    run_choices(p, cfg, opts, "expert_layout", false, run_layout);
    run_choices(p, cfg, opts, "gemm", true, run_gemm);
    /* The plain loops behind a `simd` switch, when the backend has one. */
    for (const struct tide_option *o = p->desc->options; o && o->name; o++) {
        if (strcmp(o->name, "simd"))
            continue;
        CHECK_EQ_INT(tide_config_set_value(cfg, p->desc->name, "simd", "false", "test"), TIDE_OK);
        fprintf(stderr, "simd = false\n");
        if (open_backend(p, opts)) {
            TEST_RUN(test_rope);
            TEST_RUN(test_attention);
            TEST_RUN(test_swiglu);
            TEST_RUN(test_expert_ffn);
            TEST_RUN(test_expert_batch);
            ops->destroy(bk);
        }
    }
    ops->destroy(NULL);
    tide_config_destroy(cfg);
    tide_plugins_free(set);
    TEST_DONE();
}
