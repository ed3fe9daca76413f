/* backend-cuda with block-quantized routed experts (q8_0, q4_0, fp8):
 *
 *  - for each format, expert_ffn and expert_ffn_batch on an expert made by
 *    expert_create and on one promoted into a slot_create_q slot, at 1, 4,
 *    37 and 64 rows (the fused decoding GEMV and the decode + f32 GEMM
 *    paths), match a double-precision host reference built from
 *    tide_qview_row_f32 within its error bound (tests/conformance/ref_ops.c);
 *    slot and resident copies agree bit for bit, and so do expert_ffn_batch
 *    and one expert_ffn call per expert;
 *  - a slot reloaded with another expert right after kernels that read it
 *    gives each kernel the expert loaded when it was issued;
 *  - slot_load refuses views of another format than the slot's (bf16 into a
 *    quantized slot, quantized into a bf16 one, q4_0 into q8_0), and
 *    expert_create refuses mixed formats, naming the tensor.
 * Everything runs twice: host experts (values and scales) in a read-only file
 * mapping with pin = true, then in malloc'd memory with pin = false and a
 * 64 KiB staging ring.
 *
 * Usage: test_cuda_quant [PLUGIN-NAME]; exit 77 when the plugin's probe
 * refuses (no CUDA device). */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "harness.h"
#include "loader.h"
#include "ref_ops.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/quant.h"
#include "tide/status.h"

static const struct tide_backend_ops *ops;
static struct tide_backend *bk;
static bool use_files; /* host experts in a file mapping (this pass) */

enum { H = 256, I = 160, T = 70, MAXN = 64 };

static uint64_t rng = 0x5deece66dull;

static float rnd_unit(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

/* A quantized host expert: for gate [I,H], up [I,H], down [H,I] the values
 * and scales as tide_quantize_bf16 makes them, their views, and the f32
 * weights tide_qview_row_f32 decodes (the reference's). */
struct qexpert {
    int fmt, block[2];
    void *values[3], *scales[3];
    size_t vbytes[3], sbytes[3];
    struct tide_view sv[3], qv[3];
    float *w[3];
    void *map; /* the file mapping holding values and scales, or NULL */
    size_t map_len;
};

static const char *const q_names[3] = {"e.gate_proj.weight", "e.up_proj.weight",
                                       "e.down_proj.weight"};
static const char *const s_names[3] = {"e.gate_proj.scale", "e.up_proj.scale", "e.down_proj.scale"};

/* Make the views of e's matrices, checked by the core. */
static void qexpert_views(struct qexpert *e)
{
    for (int j = 0; j < 3; j++) {
        const int64_t rows = j < 2 ? I : H, cols = j < 2 ? H : I;
        int64_t vs[2], ss[2];
        tide_qmat_value_shape(e->fmt, rows, cols, vs);
        tide_qmat_scale_shape(e->block, rows, cols, ss);
        struct tide_view v = {.data = e->values[j],
                              .dtype = tide_qfmt_value_dtype(e->fmt),
                              .ndim = 2,
                              .nbytes = e->vbytes[j],
                              .name = q_names[j]};
        v.shape[0] = vs[0];
        v.shape[1] = vs[1];
        e->sv[j] = (struct tide_view){.data = e->scales[j],
                                      .dtype = tide_qfmt_scale_dtype(e->fmt),
                                      .ndim = 2,
                                      .nbytes = e->sbytes[j],
                                      .name = s_names[j]};
        e->sv[j].shape[0] = ss[0];
        e->sv[j].shape[1] = ss[1];
        char why[300] = "";
        int rc = tide_qview_make(&v, &e->sv[j], e->fmt, e->block, rows, cols, &e->qv[j], why,
                                 sizeof why);
        CHECK_EQ_INT(rc, 0);
        if (rc)
            fprintf(stderr, "  %s\n", why);
    }
}

/* Move values and scales into one read-only private file mapping, 8-byte
 * aligned and packed so that tensors share pages, as in a checkpoint. */
static bool qexpert_to_file(struct qexpert *e)
{
    char path[] = "/tmp/tide-quant-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return false;
    unlink(path);
    size_t off = 4096 + 8, at[6];
    bool ok = true;
    for (int k = 0; k < 6 && ok; k++) {
        const void *p = k < 3 ? e->values[k] : e->scales[k - 3];
        const size_t n = k < 3 ? e->vbytes[k] : e->sbytes[k - 3];
        at[k] = off;
        ok = pwrite(fd, p, n, (off_t)off) == (ssize_t)n;
        off = (off + n + 7) & ~(size_t)7;
    }
    void *map = ok ? mmap(NULL, off, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED)
        return false;
    for (int j = 0; j < 3; j++) {
        free(e->values[j]);
        free(e->scales[j]);
        e->values[j] = (char *)map + at[j];
        e->scales[j] = (char *)map + at[3 + j];
    }
    e->map = map;
    e->map_len = off;
    return true;
}

/* A random expert in fmt with blocks `block`. */
static void qexpert_make(struct qexpert *e, int fmt, const int block[2])
{
    memset(e, 0, sizeof *e);
    e->fmt = fmt;
    e->block[0] = block[0];
    e->block[1] = block[1];
    for (int j = 0; j < 3; j++) {
        const int64_t rows = j < 2 ? I : H, cols = j < 2 ? H : I;
        int64_t vs[2], ss[2];
        tide_qmat_value_shape(fmt, rows, cols, vs);
        tide_qmat_scale_shape(block, rows, cols, ss);
        e->vbytes[j] = (size_t)(vs[0] * vs[1]) * tide_dtype_size(tide_qfmt_value_dtype(fmt));
        e->sbytes[j] = (size_t)(ss[0] * ss[1]) * tide_dtype_size(tide_qfmt_scale_dtype(fmt));
        e->values[j] = malloc(e->vbytes[j]);
        e->scales[j] = malloc(e->sbytes[j]);
        uint16_t *src = malloc(sizeof *src * (size_t)(rows * cols));
        for (int64_t i = 0; i < rows * cols; i++)
            src[i] = tide_f32_to_bf16(rnd_unit() * 0.5f);
        CHECK_EQ_INT(tide_quantize_bf16(fmt, block, src, rows, cols, e->values[j], e->scales[j]),
                     0);
        free(src);
    }
    if (use_files)
        CHECK(qexpert_to_file(e));
    qexpert_views(e);
    for (int j = 0; j < 3; j++) {
        const int64_t rows = j < 2 ? I : H, cols = j < 2 ? H : I;
        e->w[j] = malloc(sizeof(float) * (size_t)(rows * cols));
        for (int64_t r = 0; r < rows; r++)
            tide_qview_row_f32(&e->qv[j], r, e->w[j] + r * cols);
    }
}

/* File mappings stay until the backend is destroyed: it keeps promotion
 * sources page-locked that long (backend-cuda's `pin` option). */
static struct {
    void *p;
    size_t len;
} maps[32];
static int n_maps;

static void qexpert_free(struct qexpert *e)
{
    for (int j = 0; j < 3; j++) {
        if (!e->map) {
            free(e->values[j]);
            free(e->scales[j]);
        }
        free(e->w[j]);
    }
    if (e->map && n_maps < (int)(sizeof maps / sizeof maps[0])) {
        maps[n_maps].p = e->map;
        maps[n_maps++].len = e->map_len;
    }
}

static void unmap_all(void)
{
    for (int i = 0; i < n_maps; i++)
        munmap(maps[i].p, maps[i].len);
    n_maps = 0;
}

/* ---- backend helpers ----------------------------------------------------- */

static struct tide_buffer *bufs[32];
static int n_bufs;

static struct tide_tensor new_tensor(enum tide_dtype dt, int64_t rows, int64_t cols)
{
    struct tide_tensor t = {0};
    int rc = ops->buffer_alloc(bk, (size_t)(rows * cols) * tide_dtype_size(dt), &bufs[n_bufs]);
    CHECK_EQ_INT(rc, TIDE_OK);
    if (rc)
        return t;
    return tide_tensor_2d(bufs[n_bufs++], dt, rows, cols);
}

static void free_buffers(void)
{
    for (int i = 0; i < n_bufs; i++)
        ops->buffer_free(bk, bufs[i]);
    n_bufs = 0;
}

static float *read_f32(const struct tide_tensor *t)
{
    float *v = malloc(sizeof *v * (size_t)(t->rows * t->cols));
    CHECK_EQ_INT(ops->read(bk, t, v), TIDE_OK);
    return v;
}

static int count_diff(const char *what, const float *a, const float *b, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) && bad++ < 4)
            fprintf(stderr, "  %s[%zu]: %.9g vs %.9g\n", what, i, (double)a[i], (double)b[i]);
    if (bad)
        fprintf(stderr, "%s: %d of %zu values differ\n", what, bad, n);
    return bad;
}

/* Last error message, captured through the log sink. */
static char last_error[1024];
static int lock_warnings; /* "cannot page-lock" warnings seen */

static void sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR)
        snprintf(last_error, sizeof last_error, "%s", msg);
    if (level == TIDE_LOG_WARN && strstr(msg, "page-lock"))
        lock_warnings++;
    if (level <= TIDE_LOG_WARN)
        fprintf(stderr, "(logged) %s\n", msg);
}

/* ---- tests -------------------------------------------------------------- */

static float xf[T * H];
static struct tide_tensor x_dev;

static void make_input(void)
{
    uint16_t *h = malloc(sizeof *h * (size_t)T * H);
    for (int i = 0; i < T * H; i++) {
        xf[i] = tide_round_bf16(rnd_unit() * 2.0f);
        h[i] = tide_f32_to_bf16(xf[i]);
    }
    x_dev = new_tensor(TIDE_DTYPE_BF16, T, H);
    CHECK_EQ_INT(ops->write(bk, &x_dev, h), TIDE_OK);
    free(h);
}

/* expert_ffn and expert_ffn_batch of the resident copy `res` and the slot
 * copy `slot` of e at each row count, against each other and the reference. */
static void run_counts(const struct qexpert *e, const struct tide_expert *res,
                       const struct tide_expert *slot)
{
    static const int counts[] = {1, 4, 37, MAXN};
    const char *fname = tide_qfmt_name(e->fmt);
    struct tide_tensor o1 = new_tensor(TIDE_DTYPE_F32, MAXN, H);
    struct tide_tensor o2 = new_tensor(TIDE_DTYPE_F32, MAXN, H);
    struct tide_tensor ob = new_tensor(TIDE_DTYPE_F32, 2 * MAXN, H);
    int32_t rows[2 * MAXN], dst[2 * MAXN];
    double *want = malloc(sizeof *want * MAXN * H), *err = malloc(sizeof *err * MAXN * H);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        const int n = counts[k];
        for (int i = 0; i < n; i++) {
            rows[i] = rows[n + i] = (int32_t)((i * 7 + 3) % T);
            dst[i] = (int32_t)i;
            dst[n + i] = (int32_t)(2 * n - 1 - i); /* the second expert's rows reversed */
        }
        CHECK_EQ_INT(ops->expert_ffn(bk, res, &x_dev, rows, dst, n, &o1), TIDE_OK);
        CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x_dev, rows, dst, n, &o2), TIDE_OK);
        const struct tide_expert *both[2] = {res, slot};
        const int64_t off[3] = {0, n, 2 * n};
        CHECK_EQ_INT(ops->expert_ffn_batch(bk, 2, both, &x_dev, rows, dst, off, &ob), TIDE_OK);
        float *a = read_f32(&o1), *b = read_f32(&o2), *c = read_f32(&ob);
        char what[96];
        snprintf(what, sizeof what, "%s n=%d slot vs resident", fname, n);
        CHECK_EQ_INT(count_diff(what, b, a, (size_t)n * H), 0);
        snprintf(what, sizeof what, "%s n=%d batch vs expert_ffn", fname, n);
        CHECK_EQ_INT(count_diff(what, c, a, (size_t)n * H), 0);
        int bad = 0;
        for (int i = 0; i < n; i++) /* the slot's rows, reversed */
            bad += memcmp(c + (size_t)(2 * n - 1 - i) * H, b + (size_t)i * H, sizeof *b * H) != 0;
        CHECK_EQ_INT(bad, 0);
        ref_expert_ffn(xf, rows, n, e->w[0], e->w[1], e->w[2], H, I, want, err);
        bad = 0;
        double worst = 0.0;
        for (int i = 0; i < n * H; i++) {
            const double d = fabs((double)a[i] - want[i]);
            worst = d > worst ? d : worst;
            if (!(d <= err[i]) && bad++ < 4)
                fprintf(stderr, "  %s n=%d: out[%d] = %.9g, reference %.9g +- %.3g\n", fname, n, i,
                        (double)a[i], want[i], err[i]);
        }
        CHECK_EQ_INT(bad, 0);
        fprintf(stderr, "  %s block [%d,%d] n=%d: largest deviation from the reference %.3g\n",
                fname, e->block[0], e->block[1], n, worst);
        free(a);
        free(b);
        free(c);
    }
    free(want);
    free(err);
}

static void run_format(int fmt, const int block[2])
{
    struct qexpert e;
    qexpert_make(&e, fmt, block);
    make_input();
    struct tide_expert *res = NULL, *slot = NULL;
    CHECK_EQ_INT(ops->expert_create(bk, &e.qv[0], &e.qv[1], &e.qv[2], &res), TIDE_OK);
    CHECK_EQ_INT(ops->slot_create_q(bk, H, I, fmt, block, &slot), TIDE_OK);
    CHECK_EQ_INT(ops->slot_load(bk, slot, &e.qv[0], &e.qv[1], &e.qv[2]), TIDE_OK);
    if (res && slot)
        run_counts(&e, res, slot);
    ops->expert_destroy(bk, slot);
    ops->expert_destroy(bk, res);
    free_buffers();
    qexpert_free(&e);
}

static void test_q8_0(void)
{
    static const int block[2] = {1, TIDE_QK};
    run_format(TIDE_QFMT_Q8_0, block);
}

static void test_q4_0(void)
{
    static const int block[2] = {1, TIDE_QK};
    run_format(TIDE_QFMT_Q4_0, block);
}

/* 128 x 128 blocks: I = 160 leaves partial blocks at the bottom of gate and
 * up and at the right of down. */
static void test_fp8(void)
{
    static const int block[2] = {TIDE_FP8_BLOCK, TIDE_FP8_BLOCK};
    run_format(TIDE_QFMT_FP8, block);
}

/* Blocks that straddle the kernels' 32-column steps. */
static void test_fp8_odd_block(void)
{
    static const int block[2] = {3, 48};
    run_format(TIDE_QFMT_FP8, block);
}

/* A quantized slot reloaded right after kernels read it, with no sync in
 * between: each kernel sees the expert loaded when it was issued. */
static void test_reload_ordering(void)
{
    static const int block[2] = {1, TIDE_QK};
    struct qexpert ea, eb;
    qexpert_make(&ea, TIDE_QFMT_Q4_0, block);
    qexpert_make(&eb, TIDE_QFMT_Q4_0, block);
    make_input();
    struct tide_expert *ra = NULL, *rb = NULL, *slot = NULL;
    CHECK_EQ_INT(ops->expert_create(bk, &ea.qv[0], &ea.qv[1], &ea.qv[2], &ra), TIDE_OK);
    CHECK_EQ_INT(ops->expert_create(bk, &eb.qv[0], &eb.qv[1], &eb.qv[2], &rb), TIDE_OK);
    CHECK_EQ_INT(ops->slot_create_q(bk, H, I, TIDE_QFMT_Q4_0, block, &slot), TIDE_OK);
    static const int counts[2] = {4, 37};
    int32_t rows[37], dst[37];
    for (int i = 0; i < 37; i++) {
        rows[i] = (int32_t)((i * 5 + 1) % T);
        dst[i] = (int32_t)i;
    }
    for (int k = 0; k < 2 && ra && rb && slot; k++) {
        const int n = counts[k];
        struct tide_tensor wa = new_tensor(TIDE_DTYPE_F32, n, H),
                           wb = new_tensor(TIDE_DTYPE_F32, n, H);
        struct tide_tensor o[3];
        for (int i = 0; i < 3; i++)
            o[i] = new_tensor(TIDE_DTYPE_F32, n, H);
        CHECK_EQ_INT(ops->expert_ffn(bk, ra, &x_dev, rows, dst, n, &wa), TIDE_OK);
        CHECK_EQ_INT(ops->expert_ffn(bk, rb, &x_dev, rows, dst, n, &wb), TIDE_OK);
        CHECK_EQ_INT(ops->sync(bk), TIDE_OK);
        CHECK_EQ_INT(ops->slot_load(bk, slot, &ea.qv[0], &ea.qv[1], &ea.qv[2]), TIDE_OK);
        CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x_dev, rows, dst, n, &o[0]), TIDE_OK);
        CHECK_EQ_INT(ops->slot_load(bk, slot, &eb.qv[0], &eb.qv[1], &eb.qv[2]), TIDE_OK);
        CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x_dev, rows, dst, n, &o[1]), TIDE_OK);
        CHECK_EQ_INT(ops->slot_load(bk, slot, &ea.qv[0], &ea.qv[1], &ea.qv[2]), TIDE_OK);
        CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x_dev, rows, dst, n, &o[2]), TIDE_OK);
        float *a = read_f32(&wa), *b = read_f32(&wb);
        for (int i = 0; i < 3; i++) {
            float *v = read_f32(&o[i]);
            char what[64];
            snprintf(what, sizeof what, "n=%d reader %d (expert %s)", n, i, i == 1 ? "B" : "A");
            CHECK_EQ_INT(count_diff(what, v, i == 1 ? b : a, (size_t)n * H), 0);
            free(v);
        }
        free(a);
        free(b);
        free_buffers();
        make_input();
    }
    ops->expert_destroy(bk, slot);
    ops->expert_destroy(bk, ra);
    ops->expert_destroy(bk, rb);
    free_buffers();
    qexpert_free(&ea);
    qexpert_free(&eb);
}

static void test_errors(void)
{
    static const int qb[2] = {1, TIDE_QK};
    struct qexpert e8, e4;
    qexpert_make(&e8, TIDE_QFMT_Q8_0, qb);
    qexpert_make(&e4, TIDE_QFMT_Q4_0, qb);
    /* A bf16 expert of the same shape. */
    uint16_t *bf = calloc(3 * (size_t)H * I, sizeof *bf);
    struct tide_view bv[3];
    for (int j = 0; j < 3; j++) {
        bv[j] = (struct tide_view){.data = bf + (size_t)j * H * I,
                                   .dtype = TIDE_DTYPE_BF16,
                                   .ndim = 2,
                                   .name = q_names[j]};
        bv[j].shape[0] = j < 2 ? I : H;
        bv[j].shape[1] = j < 2 ? H : I;
        bv[j].nbytes = (size_t)H * I * sizeof(uint16_t);
    }
    struct tide_expert *qslot = NULL, *bslot = NULL, *x = NULL;
    CHECK_EQ_INT(ops->slot_create_q(bk, H, I, TIDE_QFMT_Q8_0, qb, &qslot), TIDE_OK);
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &bslot), TIDE_OK);
    last_error[0] = 0;
    CHECK_EQ_INT(ops->slot_load(bk, qslot, &bv[0], &bv[1], &bv[2]), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "slot_load");
    CHECK_CONTAINS(last_error, "e.gate_proj.weight");
    last_error[0] = 0;
    CHECK_EQ_INT(ops->slot_load(bk, qslot, &e4.qv[0], &e4.qv[1], &e4.qv[2]), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "e.gate_proj.weight");
    CHECK_CONTAINS(last_error, "q4_0");
    last_error[0] = 0;
    CHECK_EQ_INT(ops->slot_load(bk, bslot, &e8.qv[0], &e8.qv[1], &e8.qv[2]), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "e.gate_proj.weight");
    CHECK_CONTAINS(last_error, "q8_0");
    last_error[0] = 0; /* mixed formats: gate q8_0, up q4_0 */
    CHECK_EQ_INT(ops->expert_create(bk, &e8.qv[0], &e4.qv[1], &e8.qv[2], &x), TIDE_E_INVAL);
    CHECK(x == NULL);
    CHECK_CONTAINS(last_error, "expert_create");
    CHECK_CONTAINS(last_error, "e.up_proj.weight");
    static const int bad_block[2] = {1, 16};
    CHECK(ops->slot_create_q(bk, H, I, TIDE_QFMT_Q4_0, bad_block, &x) == TIDE_E_INVAL && !x);
    CHECK(ops->slot_create_q(bk, H, I + 8, TIDE_QFMT_FP8, qb, &x) == TIDE_E_INVAL && !x);
    /* slot_create_q with bf16 is slot_create. */
    CHECK_EQ_INT(ops->slot_create_q(bk, H, I, TIDE_QFMT_NONE, NULL, &x), TIDE_OK);
    if (x) {
        CHECK_EQ_INT(ops->slot_load(bk, x, &bv[0], &bv[1], &bv[2]), TIDE_OK);
        ops->expert_destroy(bk, x);
    }
    ops->expert_destroy(bk, qslot);
    ops->expert_destroy(bk, bslot);
    CHECK_EQ_INT(ops->copy_sync(bk), TIDE_OK);
    free(bf);
    qexpert_free(&e8);
    qexpert_free(&e4);
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "backend-cuda";
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (!dir) {
        fprintf(stderr, "TIDE_PLUGIN_DIR is not set (ctest sets it)\n");
        return 1;
    }
    struct tide_plugin_set *set = NULL;
    if (tide_plugins_scan_dirs(&dir, 1, &set) != TIDE_OK)
        return 1;
    const struct tide_plugin *p = tide_plugins_find(set, name);
    if (p && !p->usable) {
        fprintf(stderr, "skipped: %s: %s\n", name, p->why);
        tide_plugins_free(set);
        return 77;
    }
    p = tide_plugins_get(set, name, TIDE_PLUGIN_BACKEND, "test");
    CHECK(p != NULL);
    ops = p ? p->desc->ops : NULL;
    if (!p || !TIDE_OPS_HAS(ops, slot_create_q) || !TIDE_OPS_HAS(ops, expert_ffn_batch)) {
        fprintf(stderr, "%s lacks slot_create_q or expert_ffn_batch\n", name);
        tide_plugins_free(set);
        return 1;
    }
    struct tide_config *cfg = tide_config_create();
    CHECK_EQ_INT(tide_config_add_section(cfg, name, p->desc->options, name, p->desc->summary),
                 TIDE_OK);
    static const char *const passes[][2] = {{"true", "64MiB"}, {"false", "65536"}};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(tide_config_set_value(cfg, name, "pin", passes[i][0], "test"), TIDE_OK);
        CHECK_EQ_INT(tide_config_set_value(cfg, name, "staging", passes[i][1], "test"), TIDE_OK);
        use_files = i == 0;
        fprintf(stderr, "pass %d: pin = %s, staging = %s, host experts in %s\n", i + 1,
                passes[i][0], passes[i][1], use_files ? "a file mapping" : "malloc'd memory");
        struct tide_backend_args args = {
            .size = sizeof args, .opts = tide_config_section(cfg, name), .role = TIDE_ROLE_DEVICE};
        int rc = ops->create(&args, &bk);
        CHECK_EQ_INT(rc, TIDE_OK);
        if (rc)
            break;
        fprintf(stderr, "backend: %s\n", ops->describe(bk));
        lock_warnings = 0;
        tide_log_set_sink(sink, NULL);
        TEST_RUN(test_q8_0);
        TEST_RUN(test_q4_0);
        TEST_RUN(test_fp8);
        TEST_RUN(test_fp8_odd_block);
        TEST_RUN(test_reload_ordering);
        TEST_RUN(test_errors);
        ops->destroy(bk);
        tide_log_set_sink(NULL, NULL);
        unmap_all();
        /* Values and scales share pages in the file: each page must be
         * locked once (the emulated runtime refuses a second registration;
         * a real driver may refuse a read-only mapping, which is allowed). */
        if (strstr(name, "-emu") && use_files)
            CHECK_EQ_INT(lock_warnings, 0);
    }
    tide_config_destroy(cfg);
    tide_plugins_free(set);
    TEST_DONE();
}
