/* backend-cpu-onednn on block-quantized routed experts (tide/quant.h: q8_0,
 * q4_0, fp8). Experts are made by quantizing random bf16 matrices with
 * tide_quantize_bf16, and for each format and shape:
 *  - expert_ffn is compared with a reference in double on the rows
 *    tide_qview_row_f32 gives (h rounded to bf16 as the contract says),
 *    within 1e-3 of the largest output;
 *  - and bit for bit with the kernel's stated order (quant_c.c: the own
 *    kernel's 8-lane fused multiply-add order on W = value * scale in f32),
 *    written out plainly here;
 *  - the AVX2 code (simd = true) and the plain code (simd = false) give
 *    identical bits;
 *  - batch invariance: a row computed alone, in a call of 37 (and 300) rows,
 *    and through expert_ffn_batch among other experts gives identical bits;
 *  - slot_create_q + slot_load give the bits of expert_create;
 *  - the kernel itself (quant_c.c, quant_avx2.c, quant_avx512.c, compiled
 *    into this test): every code path the CPU has (plain C, AVX2, AVX-512)
 *    against the stated order bit for bit, at 1..12, 16, 31 and 64 tokens,
 *    several K and N, all formats, fp8 with NaN codes (the same outputs
 *    NaN, every other output the same bits); each token alone equals the
 *    batch (batch invariance). The AVX-512 part is skipped, with a note, on
 *    a CPU without it;
 *  - bad views are refused, each error naming the tensor at fault: a wrong
 *    scale shape, a wrong value dtype, formats mixed within an expert, a
 *    slot of another format, fp8 column blocks that are not a multiple of 32.
 *
 * Usage: test_quant_experts (ctest sets TIDE_PLUGIN_DIR). CPU only. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dnnl_bk.h"
#include "dnnl_bk_math.h"
#include "harness.h"
#include "loader.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/quant.h"
#include "tide/status.h"

static const struct tide_backend_ops *ops;

/* ---- inputs ------------------------------------------------------------- */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

/* Uniform in [-1, 1). */
static float rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static uint16_t *rnd_bf16(size_t n, float scale)
{
    uint16_t *a = malloc(sizeof *a * n);
    for (size_t i = 0; i < n; i++)
        a[i] = tide_f32_to_bf16(rnd() * scale);
    return a;
}

/* One quantized matrix: values, scales and their views. */
struct qm {
    void *values, *scales;
    struct tide_view v, s;
    char name[64], sname[64];
};

/* Quantize a random [rows, cols] bf16 matrix into *m. */
static void qm_make(struct qm *m, int fmt, const int block[2], int64_t rows, int64_t cols,
                    const char *name)
{
    memset(m, 0, sizeof *m);
    int64_t vs[2], ss[2];
    tide_qmat_value_shape(fmt, rows, cols, vs);
    tide_qmat_scale_shape(block, rows, cols, ss);
    const size_t vb = (size_t)(vs[0] * vs[1]) * tide_dtype_size(tide_qfmt_value_dtype(fmt));
    const size_t sb = (size_t)(ss[0] * ss[1]) * tide_dtype_size(tide_qfmt_scale_dtype(fmt));
    uint16_t *src = rnd_bf16((size_t)(rows * cols), 0.1f);
    m->values = malloc(vb);
    m->scales = malloc(sb);
    CHECK_EQ_INT(tide_quantize_bf16(fmt, block, src, rows, cols, m->values, m->scales), 0);
    free(src);
    snprintf(m->name, sizeof m->name, "%s.weight", name);
    snprintf(m->sname, sizeof m->sname, "%s.%s", name, tide_qfmt_scale_name(fmt));
    m->s = (struct tide_view){.data = m->scales,
                              .dtype = tide_qfmt_scale_dtype(fmt),
                              .ndim = 2,
                              .shape = {ss[0], ss[1]},
                              .nbytes = sb,
                              .name = m->sname};
    m->v = (struct tide_view){.data = m->values,
                              .dtype = tide_qfmt_value_dtype(fmt),
                              .ndim = 2,
                              .shape = {rows, cols},
                              .nbytes = vb,
                              .name = m->name,
                              .qfmt = fmt,
                              .qblock = {block[0], block[1]},
                              .scale = &m->s};
    char why[256];
    CHECK_EQ_INT(tide_qview_check(&m->v, fmt, block, rows, cols, why, sizeof why), 0);
}

static void qm_free(struct qm *m)
{
    free(m->values);
    free(m->scales);
}

/* An expert: gate, up [I,H], down [H,I]. The scale view pointers are fixed
 * up after the struct is in place. */
struct qexp {
    struct qm g, u, d;
    int fmt, block[2];
    int64_t H, I;
};

static void qexp_make(struct qexp *e, int fmt, const int block[2], int64_t H, int64_t I, int id)
{
    char n[48];
    e->fmt = fmt;
    e->block[0] = block[0];
    e->block[1] = block[1];
    e->H = H;
    e->I = I;
    snprintf(n, sizeof n, "experts.%d.gate_proj", id);
    qm_make(&e->g, fmt, block, I, H, n);
    e->g.v.scale = &e->g.s;
    snprintf(n, sizeof n, "experts.%d.up_proj", id);
    qm_make(&e->u, fmt, block, I, H, n);
    e->u.v.scale = &e->u.s;
    snprintf(n, sizeof n, "experts.%d.down_proj", id);
    qm_make(&e->d, fmt, block, H, I, n);
    e->d.v.scale = &e->d.s;
}

static void qexp_free(struct qexp *e)
{
    qm_free(&e->g);
    qm_free(&e->u);
    qm_free(&e->d);
}

/* Matrix rows as tide_qview_row_f32 gives them (malloc'd [rows][cols]). */
static float *rows_f32(const struct tide_view *v)
{
    float *w = malloc(sizeof *w * (size_t)(v->shape[0] * v->shape[1]));
    for (int64_t r = 0; r < v->shape[0]; r++)
        tide_qview_row_f32(v, r, w + r * v->shape[1]);
    return w;
}

/* ---- references --------------------------------------------------------- */

/* The stated order: 8 lanes of fused multiply-adds, then the lane tree
 * (k is a multiple of 32, so no tail). */
static float order_dot(const float *x, const float *w, int64_t k)
{
    float l[8] = {0};
    for (int64_t i = 0; i < k; i++)
        l[i % 8] = fmaf(x[i], w[i], l[i % 8]);
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* out[H] for one bf16 row x[H]: exact (the stated order, f32) and in double
 * (h rounded to bf16 from the double values). */
static void reference(const struct qexp *e, const float *wg, const float *wu, const float *wd,
                      const uint16_t *x, float *exact, double *dbl)
{
    const int64_t H = e->H, I = e->I;
    float *xf = malloc(sizeof *xf * (size_t)H), *h = malloc(sizeof *h * (size_t)I);
    double *hd = malloc(sizeof *hd * (size_t)I);
    for (int64_t i = 0; i < H; i++)
        xf[i] = tide_bf16_to_f32(x[i]);
    for (int64_t j = 0; j < I; j++) {
        const float g = order_dot(xf, wg + j * H, H), u = order_dot(xf, wu + j * H, H);
        h[j] = tide_round_bf16(dnnl_bk_silu_mul(g, u));
        double gd = 0, ud = 0;
        for (int64_t i = 0; i < H; i++) {
            gd += (double)xf[i] * wg[j * H + i];
            ud += (double)xf[i] * wu[j * H + i];
        }
        hd[j] = tide_round_bf16((float)(gd / (1.0 + exp(-gd)) * ud));
    }
    for (int64_t r = 0; r < H; r++) {
        exact[r] = order_dot(h, wd + r * I, I);
        double o = 0;
        for (int64_t j = 0; j < I; j++)
            o += hd[j] * wd[r * I + j];
        dbl[r] = o;
    }
    free(xf);
    free(h);
    free(hd);
}

/* ---- backend helpers ---------------------------------------------------- */

static char last_error[1024];

static void sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR)
        snprintf(last_error, sizeof last_error, "%s", msg);
}

static void capture_errors(bool on)
{
    if (on)
        last_error[0] = 0;
    tide_log_set_sink(on ? sink : NULL, NULL);
}

/* Inputs x [T,H] bf16 and output [R,H] f32 on one backend instance. */
struct io {
    struct tide_buffer *xb, *ob;
    struct tide_tensor x, out;
};

static void io_make(struct tide_backend *bk, struct io *io, const uint16_t *x, int64_t T, int64_t R,
                    int64_t H)
{
    CHECK_EQ_INT(ops->buffer_alloc(bk, sizeof(uint16_t) * (size_t)(T * H), &io->xb), TIDE_OK);
    CHECK_EQ_INT(ops->buffer_alloc(bk, sizeof(float) * (size_t)(R * H), &io->ob), TIDE_OK);
    io->x = tide_tensor_2d(io->xb, TIDE_DTYPE_BF16, T, H);
    io->out = tide_tensor_2d(io->ob, TIDE_DTYPE_F32, R, H);
    CHECK_EQ_INT(ops->write(bk, &io->x, x), TIDE_OK);
}

static void io_free(struct tide_backend *bk, struct io *io)
{
    ops->buffer_free(bk, io->xb);
    ops->buffer_free(bk, io->ob);
}

/* Output rows [0, n) as host floats (malloc'd). */
static float *read_out(struct tide_backend *bk, struct io *io, int64_t n)
{
    float *all = malloc(sizeof *all * (size_t)(io->out.rows * io->out.cols));
    CHECK_EQ_INT(ops->read(bk, &io->out, all), TIDE_OK);
    (void)n;
    return all;
}

static struct tide_expert *create(struct tide_backend *bk, const struct qexp *e)
{
    struct tide_expert *x = NULL;
    CHECK_EQ_INT(ops->expert_create(bk, &e->g.v, &e->u.v, &e->d.v, &x), TIDE_OK);
    return x;
}

/* Outputs whose bits differ. */
static int64_t count_diff(const float *a, const float *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof *a) != 0;
    return d;
}

/* ---- tests -------------------------------------------------------------- */

#define N_ROWS 37
#define N_BIG  300

/* Every check of one format and shape on the instances bk (simd on) and bp
 * (simd off, the plain code). */
static void check_format(struct tide_backend *bk, struct tide_backend *bp, int fmt,
                         const int block[2], int64_t H, int64_t I)
{
    fprintf(stderr, "  %s block [%d,%d], hidden %lld, inter %lld\n", tide_qfmt_name(fmt), block[0],
            block[1], (long long)H, (long long)I);
    struct qexp e, e2;
    qexp_make(&e, fmt, block, H, I, 3);
    qexp_make(&e2, fmt, block, H, I, 4);
    float *wg = rows_f32(&e.g.v), *wu = rows_f32(&e.u.v), *wd = rows_f32(&e.d.v);
    uint16_t *x = rnd_bf16((size_t)(N_BIG * H), 2.0f);

    /* Reference for the first N_ROWS rows. */
    float *exact = malloc(sizeof *exact * (size_t)(N_ROWS * H));
    double *dbl = malloc(sizeof *dbl * (size_t)(N_ROWS * H)), scale = 0;
    for (int64_t t = 0; t < N_ROWS; t++)
        reference(&e, wg, wu, wd, x + t * H, exact + t * H, dbl + t * H);
    for (int64_t i = 0; i < N_ROWS * H; i++)
        scale = fmax(scale, fabs(dbl[i]));
    CHECK(scale > 0);

    struct tide_backend *b2[2] = {bk, bp};
    float *res[2][4] = {{0}}; /* [instance][alone, 37 rows, batch, slot] */
    int32_t rows[N_BIG], dst[N_BIG];
    for (int i = 0; i < N_BIG; i++)
        rows[i] = dst[i] = i;
    for (int b = 0; b < 2; b++) {
        struct tide_backend *be = b2[b];
        struct io io;
        io_make(be, &io, x, N_BIG, 2 * N_BIG, H);
        struct tide_expert *xe = create(be, &e), *xe2 = create(be, &e2);
        if (!xe || !xe2) {
            io_free(be, &io);
            continue;
        }
        /* Each row alone. */
        for (int t = 0; t < N_ROWS; t++)
            CHECK_EQ_INT(ops->expert_ffn(be, xe, &io.x, &rows[t], &dst[t], 1, &io.out), TIDE_OK);
        res[b][0] = read_out(be, &io, N_ROWS);
        /* N_ROWS rows in one call, written elsewhere. */
        int32_t d2[N_BIG];
        for (int i = 0; i < N_BIG; i++)
            d2[i] = N_BIG + i;
        CHECK_EQ_INT(ops->expert_ffn(be, xe, &io.x, rows, d2, N_ROWS, &io.out), TIDE_OK);
        float *all = read_out(be, &io, 2 * N_BIG);
        res[b][1] = malloc(sizeof(float) * (size_t)(N_ROWS * H));
        memcpy(res[b][1], all + N_BIG * H, sizeof(float) * (size_t)(N_ROWS * H));
        free(all);
        /* All N_BIG rows in one call (more than one 256-row chunk). */
        CHECK_EQ_INT(ops->expert_ffn(be, xe, &io.x, rows, d2, N_BIG, &io.out), TIDE_OK);
        all = read_out(be, &io, 2 * N_BIG);
        CHECK_EQ_INT(count_diff(all + N_BIG * H, res[b][0], N_ROWS * H), 0);
        free(all);
        /* expert_ffn_batch: e for rows 0..9, e2 for 10..19, e for 20..36. */
        {
            const struct tide_expert *ex[3] = {xe, xe2, xe};
            const int64_t off[4] = {0, 10, 20, N_ROWS};
            CHECK_EQ_INT(ops->expert_ffn_batch(be, 3, ex, &io.x, rows, d2, off, &io.out), TIDE_OK);
            all = read_out(be, &io, 2 * N_BIG);
            res[b][2] = malloc(sizeof(float) * (size_t)(N_ROWS * H));
            memcpy(res[b][2], all + N_BIG * H, sizeof(float) * (size_t)(N_ROWS * H));
            free(all);
            /* Rows 10..19 went to e2: compare them with e2 alone. */
            for (int t = 10; t < 20; t++)
                CHECK_EQ_INT(ops->expert_ffn(be, xe2, &io.x, &rows[t], &dst[t], 1, &io.out),
                             TIDE_OK);
            all = read_out(be, &io, 2 * N_BIG);
            CHECK_EQ_INT(count_diff(all + 10 * H, res[b][2] + 10 * H, 10 * H), 0);
            memcpy(res[b][2] + 10 * H, res[b][0] + 10 * H, sizeof(float) * (size_t)(10 * H));
            free(all);
        }
        /* A slot of the format, loaded with the same views. */
        {
            struct tide_expert *slot = NULL;
            CHECK_EQ_INT(ops->slot_create_q(be, H, I, fmt, block, &slot), TIDE_OK);
            if (slot) {
                CHECK_EQ_INT(ops->slot_load(be, slot, &e2.g.v, &e2.u.v, &e2.d.v), TIDE_OK);
                CHECK_EQ_INT(ops->slot_load(be, slot, &e.g.v, &e.u.v, &e.d.v), TIDE_OK);
                CHECK_EQ_INT(ops->copy_sync(be), TIDE_OK);
                CHECK_EQ_INT(ops->expert_ffn(be, slot, &io.x, rows, d2, N_ROWS, &io.out), TIDE_OK);
                all = read_out(be, &io, 2 * N_BIG);
                res[b][3] = malloc(sizeof(float) * (size_t)(N_ROWS * H));
                memcpy(res[b][3], all + N_BIG * H, sizeof(float) * (size_t)(N_ROWS * H));
                free(all);
                ops->expert_destroy(be, slot);
            }
        }
        ops->expert_destroy(be, xe);
        ops->expert_destroy(be, xe2);
        io_free(be, &io);
    }
    const int64_t n = N_ROWS * H;
    static const char *what[4] = {"alone", "37 rows", "batch", "slot"};
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 4; k++) {
            if (!res[b][k]) {
                CHECK(res[b][k] != NULL);
                continue;
            }
            /* Bits of the stated order. */
            const int64_t d = count_diff(res[b][k], exact, n);
            if (d)
                fprintf(stderr,
                        "    simd %s, %s: %lld of %lld outputs differ from the stated "
                        "order\n",
                        b ? "off" : "on", what[k], (long long)d, (long long)n);
            CHECK_EQ_INT(d, 0);
            /* And against the double reference. */
            double worst = 0;
            for (int64_t i = 0; i < n; i++)
                worst = fmax(worst, fabs(res[b][k][i] - dbl[i]));
            if (!(worst <= 1e-3 * scale))
                fprintf(stderr, "    simd %s, %s: max error %g of output scale %g\n",
                        b ? "off" : "on", what[k], worst, scale);
            CHECK(worst <= 1e-3 * scale);
            /* AVX2 and plain code, and every way of calling, agree. */
            CHECK_EQ_INT(count_diff(res[b][k], res[0][0], n), 0);
        }
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 4; k++)
            free(res[b][k]);
    free(exact);
    free(dbl);
    free(x);
    free(wg);
    free(wu);
    free(wd);
    qexp_free(&e);
    qexp_free(&e2);
}

/* An fp8 NaN code (0x7f) among the values makes the outputs it reaches NaN,
 * as the reference decodes it, on the AVX2 and the plain code. */
static void check_fp8_nan(struct tide_backend *bk, struct tide_backend *bp)
{
    const int block[2] = {128, 128};
    const int64_t H = 96, I = 64;
    struct qexp e;
    qexp_make(&e, TIDE_QFMT_FP8, block, H, I, 5);
    ((uint8_t *)e.g.values)[5 * H + 17] = 0x7f; /* gate row 5: h[5] is NaN for every token */
    uint16_t *x = rnd_bf16((size_t)(3 * H), 2.0f);
    struct tide_backend *b2[2] = {bk, bp};
    for (int b = 0; b < 2; b++) {
        struct io io;
        io_make(b2[b], &io, x, 3, 3, H);
        struct tide_expert *xe = create(b2[b], &e);
        int32_t rows[3] = {0, 1, 2};
        CHECK_EQ_INT(ops->expert_ffn(b2[b], xe, &io.x, rows, rows, 3, &io.out), TIDE_OK);
        float *o = read_out(b2[b], &io, 3);
        int64_t nan = 0;
        for (int64_t i = 0; i < 3 * H; i++)
            nan += isnan(o[i]) != 0;
        CHECK_EQ_INT(nan, 3 * H);
        free(o);
        ops->expert_destroy(b2[b], xe);
        io_free(b2[b], &io);
    }
    free(x);
    qexp_free(&e);
}

/* ---- the kernel's code paths -------------------------------------------- */

/* Outputs that differ: NaN where the other is not, or other bits where
 * neither is NaN (NaN payloads may differ between the vector FMA and fmaf). */
static int64_t count_diff_nan(const float *a, const float *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += isnan(a[i]) || isnan(b[i]) ? isnan(a[i]) != isnan(b[i])
                                        : memcmp(&a[i], &b[i], sizeof *a) != 0;
    return d;
}

/* The quantized entries of the kernel table, plain first. */
static dnnl_bk_quant_fn *const q_fns[] = {dnnl_bk_quant_c, dnnl_bk_quant_avx2,
                                          dnnl_bk_quant_avx512};
enum { Q_PLAIN, Q_AVX2, Q_AVX512 };

static const char *isa_name(int isa)
{
    return isa == Q_AVX512 ? "avx512" : isa == Q_AVX2 ? "avx2" : "plain";
}

/* The last entry of q_fns this CPU runs. */
static int q_best(void)
{
    const unsigned f = dnnl_bk_cpu_flags(NULL, 0);
    if (!(f & DNNL_BK_CPU_AVX2))
        return Q_PLAIN;
    return DNNL_BK_Q_AVX512_ON && (f & DNNL_BK_CPU_AVX512) ? Q_AVX512 : Q_AVX2;
}

#define KP_MAX_T 64

/* The quantized entries on one [N,K] matrix of fmt, every path up to `best`:
 * m tokens in one call (2 threads) and each token alone (1 thread) against
 * the stated order on tide_qview_row_f32's rows. nan: plant NaN codes
 * (fp8). Returns the outputs that differ. */
static int64_t check_kernel_one(int fmt, const int block[2], int64_t K, int64_t N, bool nan,
                                int best)
{
    static const int tokens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 31, 64};
    struct qm m;
    qm_make(&m, fmt, block, N, K, "experts.0.gate_proj");
    m.v.scale = &m.s;
    if (nan) {
        uint8_t *q = m.values;
        q[3 % N * K + 17] = 0x7f;      /* a chunk of row 3 */
        q[(N - 1) * K + K - 1] = 0xff; /* the last row's last chunk (the odd tail) */
        q[N / 2 * K + 40 % K] = 0x7f;  /* a row inside a pair tile */
    }
    const float *wf = rows_f32(&m.v);
    struct dnnl_bk_qmat w = {.fmt = fmt,
                             .br = block[0],
                             .bc = block[1],
                             .n = N,
                             .k = K,
                             .q = m.values,
                             .s = m.scales,
                             .sld = m.s.shape[1]};
    uint16_t *x = rnd_bf16((size_t)(KP_MAX_T * K), 2.0f);
    float *xf = malloc(sizeof *xf * (size_t)K), *ref = malloc(sizeof *ref * (size_t)(KP_MAX_T * N));
    for (int t = 0; t < KP_MAX_T; t++) {
        for (int64_t i = 0; i < K; i++)
            xf[i] = tide_bf16_to_f32(x[t * K + i]);
        for (int64_t j = 0; j < N; j++)
            ref[t * N + j] = order_dot(xf, wf + j * K, K);
    }
    float *y = malloc(sizeof *y * (size_t)(KP_MAX_T * N)),
          *alone = malloc(sizeof *alone * (size_t)N);
    const uint16_t *xr[KP_MAX_T];
    float *yr[KP_MAX_T];
    for (int t = 0; t < KP_MAX_T; t++) {
        xr[t] = x + t * K;
        yr[t] = y + t * N;
    }
    int64_t bad = 0;
    for (int isa = Q_PLAIN; isa <= best; isa++) {
        for (size_t c = 0; c < sizeof tokens / sizeof *tokens; c++) {
            const int mt = tokens[c];
            const struct dnnl_bk_qseg seg = {.w = &w, .y = yr};
            memset(y, 0xff, sizeof *y * (size_t)(KP_MAX_T * N));
            q_fns[isa](xr, mt, &seg, 1, K, 2);
            int64_t d = count_diff_nan(y, ref, mt * N);
            if (d)
                fprintf(stderr, "    %s K %lld N %lld%s, %s, %d tokens: %lld outputs differ\n",
                        tide_qfmt_name(fmt), (long long)K, (long long)N, nan ? " (NaN codes)" : "",
                        isa_name(isa), mt, (long long)d);
            bad += d;
        }
        /* Each token alone (1 thread) against the 64-token batch just run. */
        int64_t d = 0;
        for (int t = 0; t < KP_MAX_T; t++) {
            float *ya[1] = {alone};
            const struct dnnl_bk_qseg seg = {.w = &w, .y = ya};
            q_fns[isa](&xr[t], 1, &seg, 1, K, 1);
            d += count_diff_nan(alone, y + t * N, N);
        }
        if (d)
            fprintf(stderr, "    %s K %lld N %lld, %s: %lld outputs alone differ from the batch\n",
                    tide_qfmt_name(fmt), (long long)K, (long long)N, isa_name(isa), (long long)d);
        bad += d;
    }
    if (nan) { /* every output of a row holding a NaN code is NaN, the others are not */
        int64_t n_nan = 0, rows_nan = 0;
        for (int64_t i = 0; i < KP_MAX_T * N; i++)
            n_nan += isnan(y[i]) != 0;
        for (int64_t j = 0; j < N; j++) {
            bool any = false;
            for (int64_t i = 0; i < K; i++)
                any |= isnan(wf[j * K + i]) != 0;
            rows_nan += any;
        }
        CHECK(rows_nan >= 2);
        CHECK_EQ_INT(n_nan, rows_nan * KP_MAX_T);
    }
    free(y);
    free(alone);
    free(ref);
    free(xf);
    free(x);
    free((void *)wf);
    qm_free(&m);
    return bad;
}

static void test_kernel_paths(void)
{
    const int best = q_best();
    fprintf(stderr, "  paths: plain%s%s\n", best >= Q_AVX2 ? ", avx2" : "",
            best >= Q_AVX512 ? ", avx512" : "");
    if (best < Q_AVX512)
        fprintf(stderr, "  no AVX-512 path (the CPU lacks AVX512F/BW/VL, or built without it): "
                        "not checked\n");
    const int qb[2] = {1, 32}, fb[2] = {128, 128}, fb2[2] = {32, 64};
    /* N: whole row blocks of 24, a pair tail (50 = 2 x 24 + 2), an odd
     * tail (37, 7); K: one chunk, scale blocks that do not divide K (96 with
     * 64 columns per fp8 scale), a long row. */
    const int64_t shapes[][2] = {{32, 7}, {96, 37}, {256, 50}, {1024, 48}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int64_t K = shapes[s][0], N = shapes[s][1];
        CHECK_EQ_INT(check_kernel_one(TIDE_QFMT_Q8_0, qb, K, N, false, best), 0);
        CHECK_EQ_INT(check_kernel_one(TIDE_QFMT_Q4_0, qb, K, N, false, best), 0);
        CHECK_EQ_INT(check_kernel_one(TIDE_QFMT_FP8, fb, K, N, false, best), 0);
        CHECK_EQ_INT(check_kernel_one(TIDE_QFMT_FP8, fb2, K, N, false, best), 0);
        CHECK_EQ_INT(check_kernel_one(TIDE_QFMT_FP8, fb2, K, N, true, best), 0);
    }
}

/* expert_create / slot_load refuse `bad` with an error naming `name`. */
static void expect_refused(struct tide_backend *bk, const char *what, int rc, const char *name)
{
    fprintf(stderr, "  refused (%s): %s\n", what, last_error);
    CHECK_EQ_INT(rc, TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, name);
    (void)bk;
}

static void check_refusals(struct tide_backend *bk)
{
    const int qb[2] = {1, 32}, fb[2] = {128, 128};
    const int64_t H = 96, I = 64;
    struct qexp q8, q4, f8;
    qexp_make(&q8, TIDE_QFMT_Q8_0, qb, H, I, 7);
    qexp_make(&q4, TIDE_QFMT_Q4_0, qb, H, I, 8);
    qexp_make(&f8, TIDE_QFMT_FP8, fb, H, I, 9);
    struct tide_expert *x = NULL;
    int rc;

    /* Wrong scale shape (one scale column short) on up. */
    struct tide_view us = q8.u.s, uv = q8.u.v;
    us.shape[1] -= 1;
    us.nbytes -= (size_t)us.shape[0] * 2;
    uv.scale = &us;
    capture_errors(true);
    rc = ops->expert_create(bk, &q8.g.v, &uv, &q8.d.v, &x);
    capture_errors(false);
    expect_refused(bk, "scale shape", rc, "experts.7.up_proj.weight_scale");
    CHECK(x == NULL);

    /* Wrong value dtype on down (U8 for q8_0). */
    struct tide_view dv = q8.d.v;
    dv.dtype = TIDE_DTYPE_U8;
    capture_errors(true);
    rc = ops->expert_create(bk, &q8.g.v, &q8.u.v, &dv, &x);
    capture_errors(false);
    expect_refused(bk, "value dtype", rc, "experts.7.down_proj.weight");

    /* Formats mixed within an expert: gate q8_0, up q4_0. */
    capture_errors(true);
    rc = ops->expert_create(bk, &q8.g.v, &q4.u.v, &q8.d.v, &x);
    capture_errors(false);
    expect_refused(bk, "mixed formats", rc, "experts.8.up_proj.weight");

    /* A bf16 gate with a quantized down. */
    uint16_t *gb = rnd_bf16((size_t)(I * H), 0.1f), *ub = rnd_bf16((size_t)(I * H), 0.1f);
    struct tide_view g16 = {.data = gb,
                            .dtype = TIDE_DTYPE_BF16,
                            .ndim = 2,
                            .shape = {I, H},
                            .nbytes = (size_t)(I * H) * 2,
                            .name = "experts.1.gate_proj.weight"};
    struct tide_view u16 = g16;
    u16.data = ub;
    u16.name = "experts.1.up_proj.weight";
    capture_errors(true);
    rc = ops->expert_create(bk, &g16, &u16, &q8.d.v, &x);
    capture_errors(false);
    expect_refused(bk, "bf16 with q8_0", rc, "experts.7.down_proj.weight");

    /* A q8_0 slot loaded with q4_0 views; a bf16 slot with q8_0 views. */
    struct tide_expert *slot = NULL;
    CHECK_EQ_INT(ops->slot_create_q(bk, H, I, TIDE_QFMT_Q8_0, qb, &slot), TIDE_OK);
    capture_errors(true);
    rc = ops->slot_load(bk, slot, &q4.g.v, &q4.u.v, &q4.d.v);
    capture_errors(false);
    expect_refused(bk, "q4_0 into a q8_0 slot", rc, "experts.8.gate_proj.weight");
    capture_errors(true);
    rc = ops->slot_load(bk, slot, &f8.g.v, &f8.u.v, &f8.d.v);
    capture_errors(false);
    expect_refused(bk, "fp8 into a q8_0 slot", rc, "experts.9.gate_proj.weight");
    ops->expert_destroy(bk, slot);
    slot = NULL;
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &slot), TIDE_OK);
    capture_errors(true);
    rc = ops->slot_load(bk, slot, &q8.g.v, &q8.u.v, &q8.d.v);
    capture_errors(false);
    expect_refused(bk, "q8_0 into a bf16 slot", rc, "experts.7.gate_proj.weight");
    ops->expert_destroy(bk, slot);
    /* An fp8 slot with a different block refuses fp8 views of 128x128. */
    slot = NULL;
    const int fb2[2] = {64, 32};
    CHECK_EQ_INT(ops->slot_create_q(bk, H, I, TIDE_QFMT_FP8, fb2, &slot), TIDE_OK);
    capture_errors(true);
    rc = ops->slot_load(bk, slot, &f8.g.v, &f8.u.v, &f8.d.v);
    capture_errors(false);
    expect_refused(bk, "fp8 blocks of another size", rc, "experts.9.gate_proj.weight");
    ops->expert_destroy(bk, slot);
    /* An expert made by expert_create is not a slot. */
    x = create(bk, &q8);
    capture_errors(true);
    rc = ops->slot_load(bk, x, &q8.g.v, &q8.u.v, &q8.d.v);
    capture_errors(false);
    CHECK_EQ_INT(rc, TIDE_E_INVAL);
    ops->expert_destroy(bk, x);
    x = NULL;

    /* fp8 with column blocks of 48: tide_qfmt_fits takes it, this backend does not. */
    struct qexp f48;
    const int b48[2] = {16, 48};
    qexp_make(&f48, TIDE_QFMT_FP8, b48, H, I, 10);
    capture_errors(true);
    rc = ops->expert_create(bk, &f48.g.v, &f48.u.v, &f48.d.v, &x);
    capture_errors(false);
    expect_refused(bk, "fp8 blocks of 48 columns", rc, "experts.10.gate_proj.weight");
    capture_errors(true);
    rc = ops->slot_create_q(bk, H, I, TIDE_QFMT_FP8, b48, &slot);
    capture_errors(false);
    CHECK_EQ_INT(rc, TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "48");
    /* q4_0 with the wrong block. */
    const int bad[2] = {1, 64};
    capture_errors(true);
    rc = ops->slot_create_q(bk, H, I, TIDE_QFMT_Q4_0, bad, &slot);
    capture_errors(false);
    CHECK_EQ_INT(rc, TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "q4_0");

    free(gb);
    free(ub);
    qexp_free(&q8);
    qexp_free(&q4);
    qexp_free(&f8);
    qexp_free(&f48);
}

static struct tide_backend *g_bk, *g_bp; /* simd on, simd off */

static void test_formats(void)
{
    const int qb[2] = {1, 32}, fb[2] = {128, 128}, fb2[2] = {32, 64};
    const int64_t shapes[2][2] = {{96, 64}, {256, 160}};
    for (int s = 0; s < 2; s++) {
        const int64_t H = shapes[s][0], I = shapes[s][1];
        check_format(g_bk, g_bp, TIDE_QFMT_Q8_0, qb, H, I);
        check_format(g_bk, g_bp, TIDE_QFMT_Q4_0, qb, H, I);
        check_format(g_bk, g_bp, TIDE_QFMT_FP8, fb, H, I);
        check_format(g_bk, g_bp, TIDE_QFMT_FP8, fb2, H, I);
    }
}

static void test_fp8_nan(void)
{
    check_fp8_nan(g_bk, g_bp);
}

static void test_refusals(void)
{
    check_refusals(g_bk);
}

static struct tide_backend *open_backend(const struct tide_opts *opts)
{
    struct tide_backend_args args = {.size = sizeof args, .opts = opts, .role = TIDE_ROLE_HOST};
    struct tide_backend *bk = NULL;
    CHECK_EQ_INT(ops->create(&args, &bk), TIDE_OK);
    if (bk)
        fprintf(stderr, "backend: %s\n", ops->describe(bk));
    return bk;
}

int main(void)
{
    tide_openmp_env_defaults();
    const char *name = "backend-cpu-onednn";
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (!dir) {
        fprintf(stderr, "TIDE_PLUGIN_DIR is not set (ctest sets it)\n");
        return 1;
    }
    struct tide_plugin_set *set = NULL;
    if (tide_plugins_scan_dirs(&dir, 1, &set) != TIDE_OK)
        return 1;
    const struct tide_plugin *p = tide_plugins_get(set, name, TIDE_PLUGIN_BACKEND, "test");
    CHECK(p != NULL);
    if (!p) {
        tide_plugins_free(set);
        TEST_DONE();
    }
    ops = p->desc->ops;
    CHECK(TIDE_OPS_HAS(ops, slot_create_q));
    struct tide_config *cfg = tide_config_create();
    CHECK_EQ_INT(tide_config_add_section(cfg, name, p->desc->options, name, p->desc->summary),
                 TIDE_OK);
    const struct tide_opts *opts = tide_config_section(cfg, name);
    struct tide_backend *bk = open_backend(opts);
    CHECK_EQ_INT(tide_config_set_value(cfg, name, "simd", "false", "test"), TIDE_OK);
    struct tide_backend *bp = open_backend(opts);
    if (bk && bp && TIDE_OPS_HAS(ops, slot_create_q)) {
        g_bk = bk;
        g_bp = bp;
        TEST_RUN(test_formats);
        TEST_RUN(test_fp8_nan);
        TEST_RUN(test_refusals);
    }
    TEST_RUN(test_kernel_paths);
    ops->destroy(bk);
    ops->destroy(bp);
    tide_config_destroy(cfg);
    tide_plugins_free(set);
    TEST_DONE();
}
