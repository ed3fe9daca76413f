/* bench-onednn-matmul: oneDNN's bf16 matmul (bf16 x bf16 -> f32, weights in
 * the layout the primitive picks, as backend-cpu-onednn packs them) at
 * M = 1 .. 64 rows, for the shapes of a LLaDA2 forward, against a STREAM
 * triad and the bf16 peak measured in the same run. The same source builds
 * against the system's oneDNN 2.x (bench-onednn-matmul) and, with
 * -DTIDE_BENCH_ONEDNN3=PREFIX, against a oneDNN 3.x (bench-onednn-matmul-3),
 * so the two can be timed side by side (docs/cpu-performance.md, "oneDNN 2.6
 * vs 3.x"). --dtype f32 times oneDNN's f32 matmul instead (f32 weights: twice
 * the bytes, but what oneDNN computes on CPUs without a bf16 matmul); --own
 * (the 2.x build) times the backend's own AVX2 row kernel (rows_avx2.c, the
 * `matmul=avx2` entry) on the same shape, weights in the checkpoint's [N][K]
 * rows.
 *
 *   bench-onednn-matmul [--threads N] [--reps R] [--shape NAME|N,K] [--rows LIST]
 *                       [--dtype bf16|f32] [--own]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bm_shape.h"
#include "common/roofline.h"
#include "oneapi/dnnl/dnnl.h"
#ifdef BM_OWN
#include "dnnl_bk.h"
#endif

/* The data type of the source and weights (the destination is f32). */
static dnnl_data_type_t bm_dt = dnnl_bf16;

#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t bm_md; /* a handle */
typedef const_dnnl_memory_desc_t bm_cmd;
#define BM_MD(x) (x)
#else
typedef dnnl_memory_desc_t bm_md; /* a struct */
typedef const dnnl_memory_desc_t *bm_cmd;
#define BM_MD(x) (&(x))
#endif

#define CHECK(call)                                                                                \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success) {                                                                 \
            fprintf(stderr, "bench-onednn-matmul: %s: status %d\n", #call, (int)st_);              \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

static int bm_md_init(bm_md *md, int64_t rows, int64_t cols, dnnl_data_type_t dt,
                      dnnl_format_tag_t tag)
{
    const dnnl_dims_t dims = {rows, cols};
#if DNNL_VERSION_MAJOR >= 3
    CHECK(dnnl_memory_desc_create_with_tag(md, 2, dims, dt, tag));
#else
    CHECK(dnnl_memory_desc_init_by_tag(md, 2, dims, dt, tag));
#endif
    return 0;
}

static void bm_md_free(bm_md md)
{
#if DNNL_VERSION_MAJOR >= 3
    dnnl_memory_desc_destroy(md);
#else
    (void)md;
#endif
}

struct bm {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    int64_t n, k;
    dnnl_memory_t w; /* packed weights [K, N] */
    bm_md w_any;     /* the packed layout, from the M = 16 primitive */
};

/* A matmul primitive for m rows; its weights layout must be the one w has. */
static int bm_prim(struct bm *b, int64_t m, dnnl_primitive_t *prim, bm_md *src, bm_md *dst,
                   bool first)
{
    bm_md wmd;
    if (bm_md_init(src, m, b->k, bm_dt, dnnl_ab) || bm_md_init(dst, m, b->n, dnnl_f32, dnnl_ab) ||
        bm_md_init(&wmd, b->k, b->n, bm_dt, dnnl_format_tag_any))
        return -1;
    dnnl_primitive_desc_t pd;
#if DNNL_VERSION_MAJOR >= 3
    CHECK(dnnl_matmul_primitive_desc_create(&pd, b->eng, *src, first ? wmd : b->w_any, NULL, *dst,
                                            NULL));
#else
    dnnl_matmul_desc_t desc;
    CHECK(dnnl_matmul_desc_init(&desc, src, first ? &wmd : &b->w_any, NULL, dst));
    CHECK(dnnl_primitive_desc_create(&pd, &desc, NULL, b->eng, NULL));
#endif
    bm_md_free(wmd);
    bm_cmd got = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (first) {
#if DNNL_VERSION_MAJOR >= 3
        CHECK(dnnl_memory_desc_clone(&b->w_any, got));
#else
        b->w_any = *got;
#endif
    }
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    if (first)
        printf("# implementation at M = %lld: %s\n", (long long)m, impl ? impl : "?");
    CHECK(dnnl_primitive_create(prim, pd));
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

/* Pack random bf16 weights given as [N][K] rows (the checkpoint's layout,
 * "ba" for the [K, N] operand) into b->w_any. */
static int bm_pack(struct bm *b)
{
    bm_md raw;
    if (bm_md_init(&raw, b->k, b->n, bm_dt, dnnl_ba))
        return -1;
    dnnl_memory_t rm;
    CHECK(dnnl_memory_create(&rm, BM_MD(raw), b->eng, DNNL_MEMORY_ALLOCATE));
    void *p;
    CHECK(dnnl_memory_get_data_handle(rm, &p));
    uint16_t *h = p;
    float *hf = p;
    uint32_t s = 12345;
    for (int64_t i = 0; i < b->n * b->k; i++) {
        s = s * 1664525u + 1013904223u;
        float f = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
        uint32_t u;
        memcpy(&u, &f, 4);
        if (bm_dt == dnnl_f32)
            hf[i] = f;
        else
            h[i] = (uint16_t)(u >> 16);
    }
    CHECK(dnnl_memory_create(&b->w, BM_MD(b->w_any), b->eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_desc_t rpd;
    CHECK(dnnl_reorder_primitive_desc_create(&rpd, BM_MD(raw), b->eng, BM_MD(b->w_any), b->eng,
                                             NULL));
    dnnl_primitive_t r;
    CHECK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, rm}, {DNNL_ARG_TO, b->w}};
    CHECK(dnnl_primitive_execute(r, b->strm, 2, args));
    CHECK(dnnl_stream_wait(b->strm));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(rm);
    bm_md_free(raw);
    return 0;
}

/* Best and median wall ms of reps calls at m rows (after one warm call);
 * *cpu_ms: the median call's CPU time / threads. */
static int bm_time(struct bm *b, int64_t m, int reps, int threads, double *best, double *median,
                   double *cpu_ms)
{
    dnnl_primitive_t prim;
    bm_md src, dst;
    if (bm_prim(b, m, &prim, &src, &dst, false))
        return -1;
    dnnl_memory_t sm, dm;
    CHECK(dnnl_memory_create(&sm, BM_MD(src), b->eng, DNNL_MEMORY_ALLOCATE));
    CHECK(dnnl_memory_create(&dm, BM_MD(dst), b->eng, DNNL_MEMORY_ALLOCATE));
    void *p;
    CHECK(dnnl_memory_get_data_handle(sm, &p));
    memset(p, 0x3f, (size_t)(m * b->k) * (bm_dt == dnnl_f32 ? 4 : 2));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, b->w}, {DNNL_ARG_DST, dm}};
    double *t = malloc(sizeof *t * (size_t)reps), *c = malloc(sizeof *c * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        const double t0 = roof_now(), c0 = roof_cpu_now();
        CHECK(dnnl_primitive_execute(prim, b->strm, 3, args));
        CHECK(dnnl_stream_wait(b->strm));
        if (r >= 0) {
            t[r] = 1e3 * (roof_now() - t0);
            c[r] = 1e3 * (roof_cpu_now() - c0) / threads;
        }
    }
    /* Sort by wall time: best, and the median with its CPU time. */
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
            x = c[j], c[j] = c[j - 1], c[j - 1] = x;
        }
    *best = t[0];
    *median = t[reps / 2];
    *cpu_ms = c[reps / 2];
    free(t);
    free(c);
    dnnl_memory_destroy(sm);
    dnnl_memory_destroy(dm);
    dnnl_primitive_destroy(prim);
    bm_md_free(src);
    bm_md_free(dst);
    return 0;
}

#ifdef BM_OWN
/* The own AVX2 kernel (dnnl_bk_rows_avx2) at m rows on w ([N][K] bf16 rows):
 * best and median wall ms of reps calls after one warm call, *cpu_ms the
 * median call's CPU time / threads, as bm_time. */
static int bm_own_time(const uint16_t *w, int64_t n, int64_t k, int64_t m, int reps, int threads,
                       double *best, double *median, double *cpu_ms)
{
    uint16_t *xs = malloc(sizeof *xs * (size_t)(m * k));
    float *ys = malloc(sizeof *ys * (size_t)(m * n));
    const uint16_t **x = malloc(sizeof *x * (size_t)m);
    float **y = malloc(sizeof *y * (size_t)m);
    double *t = malloc(sizeof *t * (size_t)reps), *c = malloc(sizeof *c * (size_t)reps);
    if (!xs || !ys || !x || !y || !t || !c)
        return -1;
    memset(xs, 0x3f, sizeof *xs * (size_t)(m * k));
    for (int64_t i = 0; i < m; i++)
        x[i] = xs + i * k, y[i] = ys + i * n;
    const struct dnnl_bk_raw_seg seg = {w, n, y};
    dnnl_bk_pool_hot(true); /* workers spin between calls, as inside a forward */
    for (int r = -1; r < reps; r++) {
        const double t0 = roof_now(), c0 = roof_cpu_now();
        dnnl_bk_rows_avx2(x, m, &seg, 1, k, threads, NULL);
        if (r >= 0) {
            t[r] = 1e3 * (roof_now() - t0);
            c[r] = 1e3 * (roof_cpu_now() - c0) / threads;
        }
    }
    dnnl_bk_pool_hot(false);
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double v = t[j];
            t[j] = t[j - 1], t[j - 1] = v;
            v = c[j], c[j] = c[j - 1], c[j - 1] = v;
        }
    *best = t[0];
    *median = t[reps / 2];
    *cpu_ms = c[reps / 2];
    free(t), free(c), free(x), free(y), free(xs), free(ys);
    return 0;
}
#endif

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-onednn-matmul [--threads N] [--reps R] [--shape NAME|N,K] "
               "[--rows 1,2,4,...]\n"
               "  shapes (LLaDA2.0-mini): output (157184 x 2048, the output layer), qkv (2560 x\n"
               "  2048), dense-up (10240 x 2048: gate and up of the dense FFN), dense-down\n"
               "  (2048 x 5120); or N,K. Default: output, rows 1,2,4,8,16,32,64, 2 threads,\n"
               "  best and median of 5 calls. Prints ms, GFLOP/s and the ratio to the same\n"
               "  run's roofline (weight bytes / STREAM triad, FLOPs / bf16 peak).\n"
               "  --dtype f32: oneDNN's f32 matmul (f32 source and weights); --own (oneDNN\n"
               "  2.x build): the backend's own AVX2 bf16 kernel, not oneDNN.\n");
}

int main(int argc, char **argv)
{
    roof_openmp_env(argv);
    int threads = 2, reps = 5;
    bool own = false;
    int64_t n = 157184, k = 2048;
    char rows_text[256] = "1,2,4,8,16,32,64", shape[64] = "output";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (bm_common_arg(a, v, &threads, &reps, rows_text, shape)) {
            i++;
        } else if (!strcmp(a, "--dtype") && v && (!strcmp(v, "bf16") || !strcmp(v, "f32"))) {
            bm_dt = strcmp(v, "f32") ? dnnl_bf16 : dnnl_f32, i++;
#ifdef BM_OWN
        } else if (!strcmp(a, "--own")) {
            own = true;
#endif
        } else {
            usage(stderr);
            return 2;
        }
    }
    static const struct bm_shape shapes[] = {{"output", 157184, 2048},
                                             {"qkv", 2560, 2048},
                                             {"dense-up", 10240, 2048},
                                             {"dense-down", 2048, 5120}};
    const bool known = bm_shape_parse(shape, shapes, sizeof shapes / sizeof shapes[0], &n, &k);
    if (!known || threads < 1 || reps < 1) {
        usage(stderr);
        return 2;
    }
    omp_set_num_threads(threads);
    char cpu[128];
    roof_cpu_name(cpu, sizeof cpu);
    const dnnl_version_t *ver = dnnl_version();
    const char *dts = bm_dt == dnnl_f32 ? "f32 x f32 -> f32" : "bf16 x bf16 -> f32";
    if (own)
        printf("# bench-onednn-matmul: the own AVX2 kernel (rows_avx2.c, matmul=avx2), bf16 x "
               "bf16 -> f32, N %lld x K %lld (%s), %d threads\n",
               (long long)n, (long long)k, shape, threads);
    else
        printf("# bench-onednn-matmul: oneDNN %d.%d.%d (%s), %s, N %lld x K %lld (%s), %d "
               "threads\n",
               ver->major, ver->minor, ver->patch, ver->hash, dts, (long long)n, (long long)k,
               shape, threads);
    printf("# CPU: %s\n", cpu);
    struct bm b = {.n = n, .k = k};
    uint16_t *own_w = NULL;
    if (own) {
        if (!roof_has_avx2() || !(own_w = malloc(sizeof *own_w * (size_t)(n * k))))
            return 1;
        for (int64_t i = 0; i < n * k; i++)
            own_w[i] = (uint16_t)(0x3c00 + (i * 7919) % 509); /* small bf16 values */
    } else {
        if (dnnl_engine_create(&b.eng, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&b.strm, b.eng, dnnl_stream_default_flags) != dnnl_success)
            return 1;
        dnnl_primitive_t p16;
        bm_md s16, d16;
        if (bm_prim(&b, 16, &p16, &s16, &d16, true) || bm_pack(&b))
            return 1;
        dnnl_primitive_destroy(p16);
        bm_md_free(s16);
        bm_md_free(d16);
    }
    struct roof_triad tr;
    if (roof_triad_init(&tr, (size_t)32 << 20, threads))
        return 1;
    double triad_cpu, peak_cpu;
    const double triad = roof_triad_run2(&tr, &triad_cpu);
    const double peak = roof_peak2(threads, true, &peak_cpu);
    printf("# same run: STREAM triad %.1f GB/s (%.1f per CPU-second x threads), bf16 peak (%s) "
           "%.0f GFLOP/s (%.0f per CPU-second x threads)\n",
           triad, triad_cpu, roof_peak_kind(true), peak, peak_cpu);
    roof_print_peak("bf16", true, peak, threads);
    printf("%6s %10s %10s %10s %9s %9s %9s %9s\n", "rows", "best ms", "median ms", "cpu ms",
           "GFLOP/s", "roof ms", "achieved", "cpu ach.");
    const double bytes = (double)n * (double)k * (bm_dt == dnnl_f32 && !own ? 4 : 2);
    char *save = NULL;
    for (char *t = strtok_r(rows_text, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const int64_t m = atoll(t);
        if (m < 1)
            continue;
        double best, med, cpu_ms;
#ifdef BM_OWN
        if (own ? bm_own_time(own_w, n, k, m, reps, threads, &best, &med, &cpu_ms)
                : bm_time(&b, m, reps, threads, &best, &med, &cpu_ms))
            return 1;
#else
        if (bm_time(&b, m, reps, threads, &best, &med, &cpu_ms))
            return 1;
#endif
        const double flop = 2.0 * (double)m * (double)n * (double)k;
        const double roof = 1e3 * fmax(bytes / (triad * 1e9), flop / (peak * 1e9));
        const double roof_cpu = 1e3 * fmax(bytes / (triad_cpu * 1e9), flop / (peak_cpu * 1e9));
        printf("%6lld %10.2f %10.2f %10.2f %9.0f %9.2f %9.2f %9.2f\n", (long long)m, best, med,
               cpu_ms, flop / (best * 1e6), roof, roof / best, roof_cpu / cpu_ms);
        fflush(stdout);
    }
    roof_triad_free(&tr);
    if (own) {
        free(own_w);
        return 0;
    }
    dnnl_memory_destroy(b.w);
    bm_md_free(b.w_any);
    dnnl_stream_destroy(b.strm);
    dnnl_engine_destroy(b.eng);
    return 0;
}
