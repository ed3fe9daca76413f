/* backend-cuda expert offload: slot_create / slot_load / copy_sync /
 * gather_rows / scatter_rows / timings.
 *
 *  - a slot loaded with an expert computes exactly (bit for bit) what a
 *    resident copy of it (expert_create) computes, and both agree with the
 *    plain-C reference within its bound;
 *  - a slot reloaded with a second expert right after kernels that read the
 *    first (no sync in between) gives the first expert's results to those
 *    kernels and the second's to later ones: the copy stream and the compute
 *    stream are ordered by events;
 *  - after copy_sync the host source may change without effect;
 *  - promotions from a read-only mmapped file (like the checkpoint);
 *  - gather/scatter round trips, with "last write wins" on repeated rows;
 *  - timings are positive and never decrease; argument errors name the op.
 * Everything runs twice: host experts in file mappings with pin = true (the
 * promotions read page-locked checkpoint-like memory in place), then in
 * malloc'd memory with pin = false and a deliberately small staging ring
 * (64 KiB), which forces the ring to wrap many times.
 *
 * Usage: test_cuda_offload [PLUGIN-NAME]; exit 77 when the plugin's probe
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
#include "tide/status.h"

static const struct tide_backend_ops *ops;
static struct tide_backend *bk;
/* The backend runs on the emulated runtime (tests/gpu/emu): its GEMMs are
 * plain loops, so the big test uses fewer rows. */
static bool emulated;

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng = 0x2545f4914f6cdd1dull;

/* Uniform in [-1, 1), already a bf16 value. */
static float rnd_bf16(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return tide_round_bf16((float)((double)(rng >> 11) / 4503599627370496.0 - 1.0));
}

/* A host expert: f32 values (bf16-representable) and their bf16 copies
 * gate [I,H], up [I,H], down [H,I] (`mat`): malloc'd in one block (`bf`), or a
 * file mapping like the checkpoint's. */
struct host_expert {
    int H, I;
    float *f;         /* [3*H*I] */
    uint16_t *bf;     /* malloc'd gate | up | down, or NULL */
    uint16_t *mat[3]; /* gate, up, down */
    void *map;        /* the mapping holding bf (owned), or NULL */
    size_t map_len;
};

/* Host experts live until the backend is destroyed: page-locked sources must
 * stay mapped that long (backend-cuda's `pin` option). */
static struct host_expert experts[16];
static int n_experts;

/* Where host experts live in this pass: file mappings or malloc'd memory. */
static bool use_files;

/* Move the experts' matrices into one file, back to back, mapped like the
 * safetensors reader maps a checkpoint (read-only, private) or shared and
 * writable. As in a checkpoint, whose tensors are sorted by name, each
 * expert's down_proj comes before its gate_proj and up_proj; the first starts
 * a page and a few bytes into the file, so tensors share pages. e[0] owns
 * the mapping. Returns false when that fails. */
static bool experts_to_file(struct host_expert **e, int n, bool writable)
{
    static const int file_order[3] = {2, 0, 1}; /* down, gate, up */
    char path[] = "/tmp/tide-offload-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return false;
    unlink(path);
    const size_t pad = 4096 + 6;
    size_t off = pad;
    bool ok = true;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 3 && ok; j++) {
            const size_t bytes = (size_t)e[i]->H * e[i]->I * sizeof(uint16_t);
            ok = pwrite(fd, e[i]->mat[file_order[j]], bytes, (off_t)off) == (ssize_t)bytes;
            off += bytes;
        }
    void *map = ok ? mmap(NULL, off, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                          writable ? MAP_SHARED : MAP_PRIVATE, fd, 0)
                   : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED)
        return false;
    off = pad;
    for (int i = 0; i < n; i++) {
        free(e[i]->bf);
        e[i]->bf = NULL;
        for (int j = 0; j < 3; j++) {
            e[i]->mat[file_order[j]] = (uint16_t *)((char *)map + off);
            off += (size_t)e[i]->H * e[i]->I * sizeof(uint16_t);
        }
    }
    e[0]->map = map;
    e[0]->map_len = off;
    return true;
}

/* A random expert; in a file mapping when `file` (writable if asked). */
static struct host_expert *expert_new(int H, int I, bool file, bool writable)
{
    if (n_experts == (int)(sizeof experts / sizeof experts[0]))
        return NULL;
    struct host_expert *e = &experts[n_experts++];
    const size_t n = 3 * (size_t)H * I;
    *e = (struct host_expert){.H = H, .I = I};
    e->f = malloc(sizeof *e->f * n);
    e->bf = malloc(sizeof *e->bf * n);
    for (int j = 0; j < 3; j++)
        e->mat[j] = e->bf + (size_t)j * H * I;
    for (size_t i = 0; i < n; i++) {
        e->f[i] = rnd_bf16() * 0.5f;
        e->bf[i] = tide_f32_to_bf16(e->f[i]);
    }
    if (file)
        CHECK(experts_to_file(&e, 1, writable));
    return e;
}

static void experts_free(void)
{
    for (int i = 0; i < n_experts; i++) {
        struct host_expert *e = &experts[i];
        if (e->map)
            munmap(e->map, e->map_len);
        free(e->bf);
        free(e->f);
    }
    n_experts = 0;
}

/* Views of gate, up and down. */
static void expert_views(const struct host_expert *e, struct tide_view v[3])
{
    static const char *names[3] = {"t.gate_proj.weight", "t.up_proj.weight", "t.down_proj.weight"};
    const size_t mat = (size_t)e->H * e->I;
    for (int j = 0; j < 3; j++) {
        v[j] = (struct tide_view){
            .data = e->mat[j], .dtype = TIDE_DTYPE_BF16, .ndim = 2, .name = names[j]};
        v[j].shape[0] = j < 2 ? e->I : e->H;
        v[j].shape[1] = j < 2 ? e->H : e->I;
        v[j].nbytes = mat * sizeof(uint16_t);
    }
}

static struct tide_expert *resident(const struct host_expert *e)
{
    struct tide_view v[3];
    expert_views(e, v);
    struct tide_expert *x = NULL;
    CHECK_EQ_INT(ops->expert_create(bk, &v[0], &v[1], &v[2], &x), TIDE_OK);
    return x;
}

static int slot_load(struct tide_expert *slot, const struct host_expert *e)
{
    struct tide_view v[3];
    expert_views(e, v);
    return ops->slot_load(bk, slot, &v[0], &v[1], &v[2]);
}

/* Buffers of the current test. */
static struct tide_buffer *bufs[64];
static int n_bufs;

static struct tide_tensor new_tensor(enum tide_dtype dt, int64_t rows, int64_t cols, int64_t stride)
{
    struct tide_tensor t = {0};
    int rc =
        ops->buffer_alloc(bk, (size_t)(rows * stride + 3) * tide_dtype_size(dt), &bufs[n_bufs]);
    CHECK_EQ_INT(rc, TIDE_OK);
    if (rc)
        return t;
    t = tide_tensor_2d(bufs[n_bufs++], dt, rows, cols);
    t.stride = stride;
    return t;
}

static void free_buffers(void)
{
    for (int i = 0; i < n_bufs; i++)
        ops->buffer_free(bk, bufs[i]);
    n_bufs = 0;
}

/* x [T,H] bf16 from f32 values, written to a new tensor; values kept in *xf. */
static struct tide_tensor new_input(int T, int H, float **xf)
{
    struct tide_tensor x = new_tensor(TIDE_DTYPE_BF16, T, H, H + 2);
    uint16_t *h = malloc(sizeof *h * (size_t)T * H);
    *xf = malloc(sizeof **xf * (size_t)T * H);
    for (int i = 0; i < T * H; i++) {
        (*xf)[i] = rnd_bf16() * 2.0f;
        h[i] = tide_f32_to_bf16((*xf)[i]);
    }
    CHECK_EQ_INT(ops->write(bk, &x, h), TIDE_OK);
    free(h);
    return x;
}

static float *read_f32(const struct tide_tensor *t)
{
    float *v = malloc(sizeof *v * (size_t)(t->rows * t->cols) + 1);
    CHECK_EQ_INT(ops->read(bk, t, v), TIDE_OK);
    return v;
}

/* Count differing bits-patterns; print the first few. */
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

/* rows[i] = (i * 7 + 3) % T; dst[i] = i. */
static void make_rows(int32_t *rows, int32_t *dst, int n, int T)
{
    for (int i = 0; i < n; i++) {
        rows[i] = (int32_t)((i * 7 + 3) % T);
        dst[i] = (int32_t)i;
    }
}

/* ---- tests -------------------------------------------------------------- */

/* A loaded slot equals a resident copy bit for bit, and the reference within bounds. */
static void test_slot_matches_resident(void)
{
    const int H = 96, I = 40, T = 13, n = 9;
    struct host_expert *he = expert_new(H, I, use_files, false);
    float *xf;
    struct tide_tensor x = new_input(T, H, &xf);
    struct tide_tensor o1 = new_tensor(TIDE_DTYPE_F32, n, H, H),
                       o2 = new_tensor(TIDE_DTYPE_F32, n, H, H + 5);
    int32_t rows[9], dst[9];
    make_rows(rows, dst, n, T);
    struct tide_expert *res = resident(he), *slot = NULL;
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &slot), TIDE_OK);
    CHECK_EQ_INT(slot_load(slot, he), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, res, &x, rows, dst, n, &o1), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x, rows, dst, n, &o2), TIDE_OK);
    float *a = read_f32(&o1), *b = read_f32(&o2);
    CHECK_EQ_INT(count_diff("slot vs resident", a, b, (size_t)n * H), 0);
    double *want = malloc(sizeof *want * (size_t)n * H), *err = malloc(sizeof *err * (size_t)n * H);
    ref_expert_ffn(xf, rows, n, he->f, he->f + (size_t)H * I, he->f + 2 * (size_t)H * I, H, I, want,
                   err);
    int bad = 0;
    for (int i = 0; i < n * H; i++)
        if (!(fabs(b[i] - want[i]) <= err[i]) && bad++ < 4)
            fprintf(stderr, "  slot[%d] = %.9g, reference %.9g +- %.3g\n", i, (double)b[i], want[i],
                    err[i]);
    CHECK_EQ_INT(bad, 0);
    /* An empty slot holds zeros, so its FFN is exactly zero. */
    struct tide_expert *empty = NULL;
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &empty), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, empty, &x, rows, dst, n, &o1), TIDE_OK);
    float *z = read_f32(&o1);
    for (int i = 0; i < n * H; i++)
        CHECK(z[i] == 0.0f);
    ops->expert_destroy(bk, empty);
    ops->expert_destroy(bk, slot);
    ops->expert_destroy(bk, res);
    free(z);
    free(want);
    free(err);
    free(a);
    free(b);
    free(xf);
    free_buffers();
}

/* Reloading a slot right after kernels read it: each kernel sees the expert
 * that was loaded when it was issued. LLaDA2.0-mini sized experts (6 MiB),
 * many rows, several queued readers: a missing wait would show. */
static void test_slot_reuse_ordering(void)
{
    enum { H = 2048, I = 512, readers = 6 };
    const int T = emulated ? 24 : 256, n = T;
    struct host_expert *ha = expert_new(H, I, use_files, false);
    struct host_expert *hb = expert_new(H, I, use_files, false);
    float *xf;
    struct tide_tensor x = new_input(T, H, &xf);
    int32_t *rows = malloc(sizeof *rows * n), *dst = malloc(sizeof *dst * n);
    make_rows(rows, dst, n, T);
    struct tide_expert *ra = resident(ha), *rb = resident(hb), *slot = NULL;
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &slot), TIDE_OK);
    struct tide_tensor want_a = new_tensor(TIDE_DTYPE_F32, n, H, H);
    struct tide_tensor want_b = new_tensor(TIDE_DTYPE_F32, n, H, H);
    struct tide_tensor outs[readers + 2];
    for (int r = 0; r < readers + 2; r++)
        outs[r] = new_tensor(TIDE_DTYPE_F32, n, H, H);
    CHECK_EQ_INT(ops->expert_ffn(bk, ra, &x, rows, dst, n, &want_a), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, rb, &x, rows, dst, n, &want_b), TIDE_OK);
    CHECK_EQ_INT(ops->sync(bk), TIDE_OK);
    /* No synchronisation from here to the reads. */
    CHECK_EQ_INT(slot_load(slot, ha), TIDE_OK);
    for (int r = 0; r < readers; r++)
        CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x, rows, dst, n, &outs[r]), TIDE_OK);
    CHECK_EQ_INT(slot_load(slot, hb), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x, rows, dst, n, &outs[readers]), TIDE_OK);
    CHECK_EQ_INT(slot_load(slot, ha), TIDE_OK); /* and back, immediately */
    CHECK_EQ_INT(ops->expert_ffn(bk, slot, &x, rows, dst, n, &outs[readers + 1]), TIDE_OK);
    float *a = read_f32(&want_a), *b = read_f32(&want_b);
    int same = 0; /* the test can tell the two experts apart */
    for (int i = 0; i < n * H; i++)
        same += a[i] == b[i];
    CHECK(same < n * H / 100);
    for (int r = 0; r < readers + 2; r++) {
        float *o = read_f32(&outs[r]);
        char what[64];
        snprintf(what, sizeof what, "reader %d (expert %s)", r, r == readers ? "B" : "A");
        CHECK_EQ_INT(count_diff(what, o, r == readers ? b : a, (size_t)n * H), 0);
        free(o);
    }
    ops->expert_destroy(bk, slot);
    ops->expert_destroy(bk, ra);
    ops->expert_destroy(bk, rb);
    free(a);
    free(b);
    free(xf);
    free(rows);
    free(dst);
    free_buffers();
}

/* After copy_sync the source may change; the slot keeps what was loaded. A
 * read-only private file mapping is a valid source (the checkpoint case). */
static void test_copy_sync_and_mmap(void)
{
    const int H = 256, I = 136, T = 8, n = 8;
    struct host_expert *hc = expert_new(H, I, use_files, true), *hm = expert_new(H, I, true, false);
    float *xf;
    struct tide_tensor x = new_input(T, H, &xf);
    int32_t rows[8], dst[8];
    make_rows(rows, dst, n, T);
    struct tide_expert *rc_ = resident(hc), *rm = resident(hm), *s1 = NULL, *s2 = NULL;
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &s1), TIDE_OK);
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &s2), TIDE_OK);
    CHECK_EQ_INT(slot_load(s1, hc), TIDE_OK);
    CHECK_EQ_INT(slot_load(s2, hm), TIDE_OK);
    CHECK_EQ_INT(ops->copy_sync(bk), TIDE_OK);
    for (int j = 0; j < 3; j++) /* garbage after copy_sync */
        memset(hc->mat[j], 0x7f, (size_t)H * I * sizeof(uint16_t));
    struct tide_tensor o[4];
    for (int i = 0; i < 4; i++)
        o[i] = new_tensor(TIDE_DTYPE_F32, n, H, H);
    CHECK_EQ_INT(ops->expert_ffn(bk, rc_, &x, rows, dst, n, &o[0]), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, s1, &x, rows, dst, n, &o[1]), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, rm, &x, rows, dst, n, &o[2]), TIDE_OK);
    CHECK_EQ_INT(ops->expert_ffn(bk, s2, &x, rows, dst, n, &o[3]), TIDE_OK);
    float *v[4];
    for (int i = 0; i < 4; i++)
        v[i] = read_f32(&o[i]);
    CHECK_EQ_INT(count_diff("slot after copy_sync", v[1], v[0], (size_t)n * H), 0);
    CHECK_EQ_INT(count_diff("slot from a read-only mapping", v[3], v[2], (size_t)n * H), 0);
    for (int i = 0; i < 4; i++)
        free(v[i]);
    ops->expert_destroy(bk, s1);
    ops->expert_destroy(bk, s2);
    ops->expert_destroy(bk, rc_);
    ops->expert_destroy(bk, rm);
    free(xf);
    free_buffers();
}

static void run_gather_scatter(enum tide_dtype dt)
{
    const int T = 37, C = 53, n = 12;
    const size_t es = tide_dtype_size(dt);
    struct tide_tensor src = new_tensor(dt, T, C, C + 7);
    unsigned char *hsrc = malloc(es * (size_t)T * C), *got = malloc(es * (size_t)T * C);
    for (size_t i = 0; i < es * (size_t)T * C; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        hsrc[i] = (unsigned char)(rng >> 40);
    }
    CHECK_EQ_INT(ops->write(bk, &src, hsrc), TIDE_OK);
    int32_t rows[12];
    for (int i = 0; i < n; i++)
        rows[i] = (int32_t)((i * 11 + 5) % T); /* distinct: 11 is prime to 37 */
    rows[n - 1] = rows[2];                     /* one repeat for the gather */
    struct tide_tensor g = new_tensor(dt, n, C, C);
    CHECK_EQ_INT(ops->gather_rows(bk, &src, rows, n, &g), TIDE_OK);
    CHECK_EQ_INT(ops->read(bk, &g, got), TIDE_OK);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += memcmp(got + es * (size_t)i * C, hsrc + es * (size_t)rows[i] * C, es * C) != 0;
    CHECK_EQ_INT(bad, 0);
    /* Scatter back into zeros: rows[2] is named twice; the later (i = n-1) wins,
     * and it holds the same row, so the round trip restores src there. */
    struct tide_tensor back = new_tensor(dt, T, C, C + 1);
    CHECK_EQ_INT(ops->scatter_rows(bk, &g, rows, n, &back), TIDE_OK);
    CHECK_EQ_INT(ops->read(bk, &back, got), TIDE_OK);
    bad = 0;
    for (int r = 0; r < T; r++) {
        bool named = false;
        for (int i = 0; i < n; i++)
            named |= rows[i] == r;
        const unsigned char *want = hsrc + es * (size_t)r * C;
        for (size_t b = 0; b < es * (size_t)C; b++)
            bad += got[es * (size_t)r * C + b] != (named ? want[b] : 0);
    }
    CHECK_EQ_INT(bad, 0);
    /* Repeated destinations with different sources: the last write wins. */
    int32_t dup[4] = {4, 9, 4, 4};
    struct tide_tensor four = tide_tensor_slice(&g, 0, 4, 0, C);
    CHECK_EQ_INT(ops->scatter_rows(bk, &four, dup, 4, &back), TIDE_OK);
    CHECK_EQ_INT(ops->read(bk, &back, got), TIDE_OK);
    CHECK(!memcmp(got + es * 4 * C, hsrc + es * (size_t)rows[3] * C, es * C));
    CHECK(!memcmp(got + es * 9 * C, hsrc + es * (size_t)rows[1] * C, es * C));
    free(hsrc);
    free(got);
    free_buffers();
}

static void test_gather_scatter(void)
{
    run_gather_scatter(TIDE_DTYPE_F32);
    run_gather_scatter(TIDE_DTYPE_BF16);
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

/* Experts back to back in one read-only file, as in a checkpoint: their
 * tensors share pages, so page-locking must register each page once (a
 * second registration of a page fails, and promotions would fall back to the
 * staging ring with a warning). Loaded out of order into three slots. */
static void test_shared_pages(void)
{
    enum { H = 40, I = 24, T = 6, n = 6, E = 3 };
    struct host_expert *he[E];
    struct tide_expert *res[E], *slot[E];
    for (int e = 0; e < E; e++)
        he[e] = expert_new(H, I, false, false);
    CHECK(experts_to_file(he, E, false));
    float *xf;
    struct tide_tensor x = new_input(T, H, &xf);
    int32_t rows[n], dst[n];
    make_rows(rows, dst, n, T);
    static const int order[E] = {1, 0, 2};
    for (int e = 0; e < E; e++) {
        res[e] = resident(he[e]);
        CHECK_EQ_INT(ops->slot_create(bk, H, I, &slot[e]), TIDE_OK);
    }
    for (int i = 0; i < E; i++)
        CHECK_EQ_INT(slot_load(slot[order[i]], he[order[i]]), TIDE_OK);
    for (int e = 0; e < E; e++) {
        struct tide_tensor a = new_tensor(TIDE_DTYPE_F32, n, H, H);
        struct tide_tensor b = new_tensor(TIDE_DTYPE_F32, n, H, H);
        CHECK_EQ_INT(ops->expert_ffn(bk, res[e], &x, rows, dst, n, &a), TIDE_OK);
        CHECK_EQ_INT(ops->expert_ffn(bk, slot[e], &x, rows, dst, n, &b), TIDE_OK);
        float *va = read_f32(&a), *vb = read_f32(&b);
        CHECK_EQ_INT(count_diff("slot from a shared file", vb, va, (size_t)n * H), 0);
        free(va);
        free(vb);
    }
    for (int e = 0; e < E; e++) {
        ops->expert_destroy(bk, slot[e]);
        ops->expert_destroy(bk, res[e]);
    }
    free(xf);
    free_buffers();
}

static void test_errors(void)
{
    const int H = 32, I = 16;
    struct host_expert *he = expert_new(H, I, false, false);
    struct host_expert *wide = expert_new(H + 8, I, false, false);
    struct tide_expert *slot = NULL, *res = resident(he);
    CHECK_EQ_INT(ops->slot_create(bk, H, I, &slot), TIDE_OK);
    last_error[0] = 0;
    CHECK_EQ_INT(slot_load(slot, wide), TIDE_E_INVAL); /* shape differs from the slot */
    CHECK_CONTAINS(last_error, "slot_load");
    last_error[0] = 0;
    CHECK_EQ_INT(slot_load(res, he), TIDE_E_INVAL); /* not a slot */
    CHECK_CONTAINS(last_error, "slot_create");
    struct tide_expert *none = NULL;
    CHECK(ops->slot_create(bk, 0, I, &none) != TIDE_OK && none == NULL);
    struct tide_tensor src = new_tensor(TIDE_DTYPE_F32, 4, 8, 8);
    struct tide_tensor dst = new_tensor(TIDE_DTYPE_F32, 2, 8, 8);
    int32_t bad_rows[2] = {1, 4};
    last_error[0] = 0;
    CHECK_EQ_INT(ops->gather_rows(bk, &src, bad_rows, 2, &dst), TIDE_E_INVAL);
    CHECK_CONTAINS(last_error, "gather_rows");
    CHECK_CONTAINS(last_error, "rows[1] = 4");
    struct tide_tensor dst16 = new_tensor(TIDE_DTYPE_BF16, 2, 8, 8);
    int32_t ok_rows[2] = {1, 2};
    CHECK_EQ_INT(ops->scatter_rows(bk, &dst16, ok_rows, 2, &src), TIDE_E_INVAL); /* dtypes */
    CHECK_CONTAINS(last_error, "scatter_rows");
    ops->expert_destroy(bk, slot);
    ops->expert_destroy(bk, res);
    free_buffers();
}

static double last_copy = -1.0, last_expert = -1.0;

static void test_timings(void)
{
    double c = -1.0, e = -1.0;
    CHECK_EQ_INT(ops->timings(bk, &c, &e), TIDE_OK);
    fprintf(stderr, "timings: copy %.6f s, expert %.6f s\n", c, e);
    /* Promotions and expert FFNs ran before this test in this instance. */
    CHECK(c > 0.0 && e > 0.0);
    CHECK(c >= last_copy && e >= last_expert);
    last_copy = c;
    last_expert = e;
    CHECK_EQ_INT(ops->timings(bk, NULL, NULL), TIDE_OK);
}

/* ---- main --------------------------------------------------------------- */

static void run_all(void)
{
    last_copy = last_expert = -1.0;
    TEST_RUN(test_slot_matches_resident);
    TEST_RUN(test_timings);
    TEST_RUN(test_slot_reuse_ordering);
    TEST_RUN(test_copy_sync_and_mmap);
    TEST_RUN(test_timings);
    TEST_RUN(test_shared_pages);
    TEST_RUN(test_gather_scatter);
    TEST_RUN(test_errors);
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "backend-cuda";
    emulated = strstr(name, "-emu") != NULL;
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
    if (!p || !TIDE_OPS_HAS(ops, slot_create) || !TIDE_OPS_HAS(ops, slot_load) ||
        !TIDE_OPS_HAS(ops, gather_rows) || !TIDE_OPS_HAS(ops, scatter_rows) ||
        !TIDE_OPS_HAS(ops, copy_sync) || !TIDE_OPS_HAS(ops, timings)) {
        fprintf(stderr, "%s lacks the offload slots\n", name);
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
                passes[i][0], passes[i][1], use_files ? "file mappings" : "malloc'd memory");
        struct tide_backend_args args = {
            .size = sizeof args, .opts = tide_config_section(cfg, name), .role = TIDE_ROLE_DEVICE};
        int rc = ops->create(&args, &bk);
        CHECK_EQ_INT(rc, TIDE_OK);
        if (rc)
            break;
        fprintf(stderr, "backend: %s\n", ops->describe(bk));
        lock_warnings = 0;
        tide_log_set_sink(sink, NULL);
        run_all();
        ops->destroy(bk);
        tide_log_set_sink(NULL, NULL);
        experts_free();
        /* With file-mapped experts every promotion source is locked once: the
         * emulated runtime refuses only overlapping registrations, so a
         * warning means the backend registered a page twice. (A real driver
         * may refuse a read-only mapping: allowed, warned once, then staged.) */
        const char *refuse = getenv("TIDE_CUDA_EMU_REGISTER_FAIL");
        if (emulated && use_files && !(refuse && atoi(refuse)))
            CHECK_EQ_INT(lock_warnings, 0);
    }
    tide_config_destroy(cfg);
    tide_plugins_free(set);
    TEST_DONE();
}
