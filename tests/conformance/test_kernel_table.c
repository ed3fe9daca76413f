/* backend-cpu-onednn's kernel table (kernels.c), entry by entry, as dav1d's
 * checkasm does: the table is filled for the plain C level (no CPU flags)
 * and for each ISA level in turn; every entry a level changes is run
 * against its plain C twin, bit for bit, and each row alone against the
 * same row in a batch (batch invariance). Levels this CPU lacks are
 * reported as skipped, naming the entries they would bring.
 *
 * The AVX512-BF16 and AMX row kernels sum in their own orders (their files
 * state them), which the plain own kernel does not share: here they are
 * checked for batch invariance and against the own kernel within f32
 * rounding; test_raw_kernel and test_amx_kernel check their exact orders. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_rand.h"
#include "dnnl_bk.h"
#include "harness.h"

/* Each level adds the flags of one ISA to the one before. oneDNN's bf16
 * matmul comes with AVX-512 (it is what create would find there). */
static const struct {
    const char *name;
    unsigned flags;
} levels[] = {
    {"avx2", DNNL_BK_CPU_AVX2},
    {"avx512",
     DNNL_BK_CPU_AVX2 | DNNL_BK_CPU_AVX512 | DNNL_BK_CPU_AVX512_EXP | DNNL_BK_CPU_ONEDNN_BF16},
    {"avx512bf16", DNNL_BK_CPU_AVX2 | DNNL_BK_CPU_AVX512 | DNNL_BK_CPU_AVX512_EXP |
                       DNNL_BK_CPU_ONEDNN_BF16 | DNNL_BK_CPU_AVX512BF16},
    {"amx", DNNL_BK_CPU_AVX2 | DNNL_BK_CPU_AVX512 | DNNL_BK_CPU_AVX512_EXP |
                DNNL_BK_CPU_ONEDNN_BF16 | DNNL_BK_CPU_AVX512BF16 | DNNL_BK_CPU_AMX},
};

static float rnd_f32(float scale)
{
    return ((float)(rng() >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
}

/* The number of outputs of a and b whose bits differ (NaN = NaN). */
static int64_t diff_bits(const float *a, const float *b, int64_t n)
{
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += isnan(a[i]) && isnan(b[i]) ? 0 : memcmp(&a[i], &b[i], sizeof *a) != 0;
    return d;
}

/* ---- row kernels (matmul, expert) ------------------------------------------ */

/* rows on m tokens x two segments (n0, n1 rows of k) at 2 threads against
 * want (the plain twin, or NULL: the own kernel within tol), and each token
 * alone (1 thread) against its row of the batch. Returns the differences. */
static int64_t rows_case(dnnl_bk_rows_fn *rows, dnnl_bk_work_fn *work, bool exact, int64_t m,
                         int64_t n0, int64_t n1, int64_t k)
{
    const int64_t n = n0 + n1;
    uint16_t *x = malloc(sizeof *x * (size_t)(m * k)), *w = malloc(sizeof *w * (size_t)(n * k));
    float *y = malloc(sizeof *y * (size_t)(m * n)), *r = malloc(sizeof *r * (size_t)(m * n));
    const uint16_t **xr = malloc(sizeof *xr * (size_t)m);
    float **yr = malloc(sizeof *yr * (size_t)m * 4), **rr = yr + m, **y2 = rr + m, **r2 = y2 + m;
    for (int64_t i = 0; i < m * k; i++)
        x[i] = rand_bf16();
    for (int64_t i = 0; i < n * k; i++)
        w[i] = rand_bf16();
    for (int64_t t = 0; t < m; t++) {
        xr[t] = x + t * k;
        yr[t] = y + t * n;
        y2[t] = yr[t] + n0;
        rr[t] = r + t * n;
        r2[t] = rr[t] + n0;
    }
    const size_t wb = work ? work(m, k, 2) : 0;
    void *buf = wb ? malloc(wb) : NULL;
    const struct dnnl_bk_raw_seg segs[2] = {{w, n0, yr}, {w + n0 * k, n1, y2}};
    const struct dnnl_bk_raw_seg refs[2] = {{w, n0, rr}, {w + n0 * k, n1, r2}};
    rows(xr, m, segs, 2, k, 2, buf);
    dnnl_bk_rows_c(xr, m, refs, 2, k, 2, NULL);
    int64_t bad = 0;
    if (exact) {
        bad += diff_bits(y, r, m * n);
    } else {
        for (int64_t i = 0; i < m * n; i++)
            bad += !(fabsf(y[i] - r[i]) <= 1e-3f * (1.0f + fabsf(r[i])) * sqrtf((float)k));
    }
    float *alone = malloc(sizeof *alone * (size_t)n), *a2 = alone + n0;
    for (int64_t t = 0; t < m; t++) {
        const struct dnnl_bk_raw_seg one[2] = {{w, n0, &alone}, {w + n0 * k, n1, &a2}};
        void *b1 = work ? malloc(work(1, k, 1)) : NULL;
        rows(&xr[t], 1, one, 2, k, 1, b1);
        free(b1);
        bad += diff_bits(alone, yr[t], n);
    }
    free(alone);
    free(buf);
    free(x);
    free(w);
    free(y);
    free(r);
    free(xr);
    free(yr);
    return bad;
}

static int test_rows(dnnl_bk_rows_fn *rows, dnnl_bk_work_fn *work, bool exact)
{
    /* k: expert shapes, a multiple of 32 that is not of 64, tails of 1..7. */
    static const int64_t ks[] = {2048, 512, 96, 1001, 7};
    static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 9, 17, 33};
    int cases = 0;
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++, cases++) {
            const int64_t bad = rows_case(rows, work, exact, ms[mi], 37, 19, ks[ki]);
            if (bad)
                fprintf(stderr, "  FAIL m %lld k %lld: %lld outputs differ\n", (long long)ms[mi],
                        (long long)ks[ki], (long long)bad);
            CHECK_EQ_INT(bad, 0);
        }
    return cases;
}

/* ---- quantized experts -------------------------------------------------- */

/* A random [n,k] matrix of fmt: values without NaN codes, scales of
 * moderate size (f16 bits for q8_0 and q4_0, f32 for fp8). */
static void qmat_make(struct dnnl_bk_qmat *q, int fmt, int64_t n, int64_t k)
{
    const bool fp8 = fmt == TIDE_QFMT_FP8;
    *q = (struct dnnl_bk_qmat){.fmt = fmt, .br = fp8 ? 32 : 1, .bc = fp8 ? 64 : 32, .n = n, .k = k};
    q->sld = (k + q->bc - 1) / q->bc;
    const int64_t srows = (n + q->br - 1) / q->br;
    q->q_bytes = (size_t)(n * (fmt == TIDE_QFMT_Q4_0 ? k / 2 : k));
    q->s_bytes = (size_t)(srows * q->sld) * (fp8 ? 4 : 2);
    uint8_t *v = malloc(q->q_bytes);
    for (size_t i = 0; i < q->q_bytes; i++) {
        v[i] = (uint8_t)rng();
        if (fp8 && (v[i] & 0x7f) == 0x7f)
            v[i] ^= 1;
    }
    void *s = malloc(q->s_bytes);
    for (int64_t i = 0; i < srows * q->sld; i++) {
        if (fp8)
            ((float *)s)[i] = 0.01f + (float)(rng() % 100) / 1000.0f;
        else
            ((uint16_t *)s)[i] = (uint16_t)(0x2000 + rng() % 0x1000);
    }
    q->q = v;
    q->s = s;
}

static int64_t quant_case(dnnl_bk_quant_fn *fn, int fmt, int64_t m, int64_t n, int64_t k)
{
    struct dnnl_bk_qmat q;
    qmat_make(&q, fmt, n, k);
    uint16_t *x = malloc(sizeof *x * (size_t)(m * k));
    float *y = malloc(sizeof *y * (size_t)(m * n)), *r = malloc(sizeof *r * (size_t)(m * n));
    const uint16_t **xr = malloc(sizeof *xr * (size_t)m);
    float **yr = malloc(sizeof *yr * (size_t)m * 2), **rr = yr + m;
    for (int64_t i = 0; i < m * k; i++)
        x[i] = rand_bf16();
    for (int64_t t = 0; t < m; t++) {
        xr[t] = x + t * k;
        yr[t] = y + t * n;
        rr[t] = r + t * n;
    }
    const struct dnnl_bk_qseg seg = {&q, yr}, ref = {&q, rr};
    fn(xr, m, &seg, 1, k, 2);
    dnnl_bk_quant_c(xr, m, &ref, 1, k, 2);
    int64_t bad = diff_bits(y, r, m * n);
    float *alone = malloc(sizeof *alone * (size_t)n);
    for (int64_t t = 0; t < m; t++) {
        const struct dnnl_bk_qseg one = {&q, &alone};
        fn(&xr[t], 1, &one, 1, k, 1);
        bad += diff_bits(alone, yr[t], n);
    }
    free(alone);
    free(x);
    free(y);
    free(r);
    free(xr);
    free(yr);
    free((void *)q.q);
    free((void *)q.s);
    return bad;
}

static int test_quant(dnnl_bk_quant_fn *fn, int fmt)
{
    static const int64_t shapes[][2] = {{32, 7}, {96, 37}, {256, 50}, {512, 48}};
    static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 9, 17};
    int cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++, cases++) {
            const int64_t bad = quant_case(fn, fmt, ms[mi], shapes[s][1], shapes[s][0]);
            if (bad)
                fprintf(stderr, "  FAIL %s m %lld N %lld K %lld: %lld outputs differ\n",
                        tide_qfmt_name(fmt), (long long)ms[mi], (long long)shapes[s][1],
                        (long long)shapes[s][0], (long long)bad);
            CHECK_EQ_INT(bad, 0);
        }
    return cases;
}

/* ---- element-wise math ------------------------------------------------------ */

/* Lengths with every tail of a 16-lane vector, and values spanning exp's
 * range, its overflow and underflow, and NaN. */
static const int64_t lens[] = {1, 7, 15, 16, 17, 31, 33, 100, 1000};

static float *rnd_row(int64_t n, float scale)
{
    float *v = malloc(sizeof *v * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        v[i] = rnd_f32(scale);
    if (n > 5) {
        v[1] = 100.0f;
        v[2] = -120.0f;
        v[3] = NAN;
        v[4] = 0.0f;
    }
    return v;
}

static int test_math(enum dnnl_bk_entry e, const struct dnnl_bk_kernels *k,
                     const struct dnnl_bk_kernels *c)
{
    int cases = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++, cases++) {
        const int64_t n = lens[li];
        float *a = rnd_row(n, 30.0f), *b = rnd_row(n, 4.0f);
        float *y = calloc((size_t)n + 1, sizeof *y), *r = calloc((size_t)n + 1, sizeof *r);
        uint16_t *h = calloc((size_t)n + 1, 2), *hr = calloc((size_t)n + 1, 2);
        int64_t bad = 0;
        switch (e) {
        case DNNL_BK_E_SILU:
            k->silu_mul_bf16(a, b, h, n);
            c->silu_mul_bf16(a, b, hr, n);
            bad = memcmp(h, hr, 2 * (size_t)n) != 0;
            break;
        case DNNL_BK_E_EXP:
            memcpy(y, a, sizeof *y * (size_t)n);
            memcpy(r, a, sizeof *r * (size_t)n);
            k->exp_sub(y, n, 3.0f);
            c->exp_sub(r, n, 3.0f);
            bad = diff_bits(y, r, n);
            break;
        case DNNL_BK_E_BF16:
            k->to_bf16(a, h, n);
            c->to_bf16(a, hr, n);
            bad = memcmp(h, hr, 2 * (size_t)n) != 0;
            break;
        case DNNL_BK_E_RMSNORM:
            for (int group = 1; group <= n; group = group * 3 + 5) {
                if (n % group)
                    continue;
                for (int bf = 0; bf < 4; bf++) {
                    /* x f32 or bf16 (rounded in place), y f32 or bf16. */
                    uint16_t *xb = calloc((size_t)n + 1, 2);
                    c->to_bf16(b, xb, n);
                    const void *x = bf & 1 ? (const void *)xb : (const void *)b;
                    void *yo = bf & 2 ? (void *)h : (void *)y,
                         *yc = bf & 2 ? (void *)hr : (void *)r;
                    float *wv = rnd_row(group, 2.0f);
                    wv[group > 3 ? 3 : 0] = 0.5f; /* no NaN weights */
                    k->rmsnorm_row(x, bf & 1, yo, bf & 2, wv, n, group, 1e-6f);
                    c->rmsnorm_row(x, bf & 1, yc, bf & 2, wv, n, group, 1e-6f);
                    bad += memcmp(yo, yc, (bf & 2 ? 2 : 4) * (size_t)n) != 0;
                    free(wv);
                    free(xb);
                }
            }
            break;
        default:
            break;
        }
        if (bad)
            fprintf(stderr, "  FAIL %s n %lld: differs from plain C\n", dnnl_bk_entry_key(e),
                    (long long)n);
        CHECK_EQ_INT(bad, 0);
        free(a);
        free(b);
        free(y);
        free(r);
        free(h);
        free(hr);
    }
    return cases;
}

/* ---- attention ------------------------------------------------------------- */

static struct tide_buffer *buf_of(void *p, size_t bytes)
{
    struct tide_buffer *b = malloc(sizeof *b);
    *b = (struct tide_buffer){DNNL_BK_BUF_MAGIC, p, bytes, false};
    return b;
}

/* n queries at pos0 over pos0 + n keys, GQA 8 heads on 2 KV heads, f32 or
 * bf16 output: the entry against attention_c, bit for bit. */
static int64_t attn_case(dnnl_bk_attn_fn *fn, int hd, int64_t pos0, int64_t n, bool ob)
{
    const int nh = 8, nkv = 2, block = 4;
    const int64_t total = pos0 + n, qc = (int64_t)nh * hd, kc = (int64_t)nkv * hd;
    float *q = malloc(sizeof *q * (size_t)(n * qc)),
          *kv = malloc(sizeof *kv * (size_t)(2 * total * kc));
    for (int64_t i = 0; i < n * qc; i++)
        q[i] = rnd_f32(1.0f);
    for (int64_t i = 0; i < 2 * total * kc; i++)
        kv[i] = rnd_f32(1.0f);
    const size_t ob_bytes = (ob ? 2 : 4) * (size_t)(n * qc);
    void *o1 = malloc(ob_bytes), *o2 = malloc(ob_bytes);
    struct tide_buffer *bq = buf_of(q, 0), *bk = buf_of(kv, 0), *b1 = buf_of(o1, 0),
                       *b2 = buf_of(o2, 0);
    const enum tide_dtype od = ob ? TIDE_DTYPE_BF16 : TIDE_DTYPE_F32;
    const struct tide_tensor tq = {bq, 0, TIDE_DTYPE_F32, n, qc, qc},
                             tk = {bk, 0, TIDE_DTYPE_F32, total, kc, kc},
                             tv = {bk,
                                   sizeof(float) * (size_t)(total * kc),
                                   TIDE_DTYPE_F32,
                                   total,
                                   kc,
                                   kc},
                             t1 = {b1, 0, od, n, qc, qc}, t2 = {b2, 0, od, n, qc, qc};
    struct tide_attn_args a = {sizeof a, &tq, &tk, &tv, &t1,   pos0,
                               n,        nh,  nkv, hd,  block, 1.0f / sqrtf((float)hd)};
    struct tide_backend be = {.threads = 2};
    int64_t bad = fn(&be, &a) != TIDE_OK;
    a.out = &t2;
    bad += dnnl_bk_attention_c(&be, &a) != TIDE_OK;
    bad += memcmp(o1, o2, ob_bytes) != 0;
    free(be.scratch);
    free(q);
    free(kv);
    free(o1);
    free(o2);
    free(bq);
    free(bk);
    free(b1);
    free(b2);
    return bad;
}

static int test_attn(dnnl_bk_attn_fn *fn)
{
    static const int hds[] = {64, 16, 8, 24}; /* 24: the AVX-512 entry's plain fallback */
    static const int64_t pos[][2] = {{0, 1}, {0, 9}, {5, 3}, {30, 17}};
    int cases = 0;
    for (size_t h = 0; h < sizeof hds / sizeof *hds; h++)
        for (size_t p = 0; p < sizeof pos / sizeof *pos; p++)
            for (int ob = 0; ob < 2; ob++, cases++) {
                const int64_t bad = attn_case(fn, hds[h], pos[p][0], pos[p][1], ob);
                if (bad)
                    fprintf(stderr, "  FAIL attn head_dim %d pos0 %lld n %lld %s\n", hds[h],
                            (long long)pos[p][0], (long long)pos[p][1], ob ? "bf16" : "f32");
                CHECK_EQ_INT(bad, 0);
            }
    return cases;
}

/* ---- the table ------------------------------------------------------------- */

/* Run entry e of k (a level's table) against c (the plain C table). */
static int test_entry(enum dnnl_bk_entry e, const struct dnnl_bk_kernels *k,
                      const struct dnnl_bk_kernels *c)
{
    switch (e) {
    case DNNL_BK_E_MATMUL:
    case DNNL_BK_E_EXPERT: {
        dnnl_bk_rows_fn *fn = e == DNNL_BK_E_MATMUL ? k->matmul : k->expert;
        dnnl_bk_work_fn *work = e == DNNL_BK_E_MATMUL ? k->matmul_work : k->expert_work;
        if (!fn)
            return 0; /* oneDNN: test_backend_ops */
        return test_rows(fn, work, fn == dnnl_bk_rows_avx2 || fn == dnnl_bk_rows_c);
    }
    case DNNL_BK_E_Q8_0:
    case DNNL_BK_E_Q4_0:
    case DNNL_BK_E_FP8: {
        const int fmt = TIDE_QFMT_Q8_0 + (e - DNNL_BK_E_Q8_0);
        return test_quant(k->quant[fmt], fmt);
    }
    case DNNL_BK_E_ATTN:
        return test_attn(k->attention);
    case DNNL_BK_E_RMSNORM:
    case DNNL_BK_E_SILU:
    case DNNL_BK_E_EXP:
    case DNNL_BK_E_BF16:
        return test_math(e, k, c);
    default:
        return 0; /* batch: a scheduling choice, test_backend_ops */
    }
}

int main(void)
{
    char why[160] = "", line[256];
    const unsigned host = dnnl_bk_cpu_flags(why, sizeof why) | DNNL_BK_CPU_ONEDNN_BF16;
    struct dnnl_bk_kernels c, k;
    const struct dnnl_bk_choice choices[] = {
        {DNNL_BK_GEMM_AUTO, DNNL_BK_XL_AUTO, true},
        {DNNL_BK_GEMM_OWN, DNNL_BK_XL_AUTO, true},
    };
    dnnl_bk_kernels_init(&c, 0, &choices[0]);
    printf("plain C: %s\n", dnnl_bk_kernels_str(&c, line, sizeof line));
    /* The plain C twins against themselves at 2 threads and alone: batch
     * invariance of the reference. */
    fprintf(stderr, "c: %d row cases\n", test_rows(dnnl_bk_rows_c, NULL, true));
    /* (key, implementation) pairs already run. */
    const char *done[64][2];
    int n_done = 0, skipped = 0;
    for (size_t l = 0; l < sizeof levels / sizeof *levels; l++)
        for (size_t ci = 0; ci < sizeof choices / sizeof *choices; ci++) {
            dnnl_bk_kernels_init(&k, levels[l].flags, &choices[ci]);
            const bool runs = (levels[l].flags & ~host) == 0;
            printf("%s%s: %s%s\n", levels[l].name, ci ? " (gemm = own)" : "",
                   dnnl_bk_kernels_str(&k, line, sizeof line),
                   runs ? "" : "  [skipped: this CPU lacks it]");
            for (int e = 0; e < DNNL_BK_E_COUNT; e++) {
                bool seen = !strcmp(k.name[e], c.name[e]);
                for (int d = 0; d < n_done && !seen; d++)
                    seen =
                        !strcmp(done[d][0], dnnl_bk_entry_key(e)) && !strcmp(done[d][1], k.name[e]);
                if (seen)
                    continue;
                done[n_done][0] = dnnl_bk_entry_key(e);
                done[n_done++][1] = k.name[e];
                if (!runs) {
                    printf("  skipped: %s=%s (this CPU lacks %s)\n", dnnl_bk_entry_key(e),
                           k.name[e], levels[l].name);
                    skipped++;
                    continue;
                }
                const int before = test_failures, cases = test_entry(e, &k, &c);
                printf("  %s %s=%s: %d cases\n", test_failures == before ? "ok  " : "FAIL",
                       dnnl_bk_entry_key(e), k.name[e], cases);
            }
        }
    if (*why && (host & DNNL_BK_CPU_AVX512) && !(host & DNNL_BK_CPU_AVX512_EXP))
        printf("AVX-512 math off here: %s\n", why);
    printf("%d entries run, %d skipped\n", n_done - skipped, skipped);
    fflush(stdout);
    TEST_DONE();
}
