/* bench-onednn-wdq: oneDNN 3.x's weight-decompression matmul (integer
 * weights, floating-point source and destination) on the routed-expert
 * shapes, for the comparison with the backend's quantized experts
 * (docs/cpu-performance.md, "oneDNN 2.6 vs 3.x"). Per weight type (s8, u8,
 * s4, u4), source type (bf16, f32) and row count it creates the primitive
 * and prints oneDNN's answer: the status and implementation, and where it
 * runs, best and median ms against the same run's triad, each call on
 * another copy of the weights (64 MiB of copies: read from DRAM, as the
 * routed experts are).
 *
 * The quantized experts' semantics (q8_0, q4_0: weight = value x scale, one
 * scale per block of 32 along K) are grouped scales on the weights: mask
 * over K and N, groups {32, 1}. oneDNN 3.5 and later express that
 * (dnnl_primitive_attr_set_scales with groups, dnnl_s4/dnnl_u4,
 * dnnl_primitive_attr_set_fpmath_mode_v2 with apply_to_int); before 3.5
 * (e.g. 3.2) there are no 4-bit types nor groups, so this asks for the
 * nearest thing 3.2 can state, one scale per output column, and says so.
 * Not a ctest test; oneDNN 3.x only (-DTIDE_BENCH_ONEDNN3=PREFIX).
 *
 *   bench-onednn-wdq [--threads N] [--reps R] [--shape NAME|N,K] [--rows LIST]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bm_shape.h"
#include "common/roofline.h"
#include "oneapi/dnnl/dnnl.h"
#include "oneapi/dnnl/dnnl_debug.h"

#if DNNL_VERSION_MAJOR < 3
#error "bench-onednn-wdq needs oneDNN 3.x"
#endif
/* Grouped scales and 4-bit types: oneDNN 3.5 and later. */
#define WDQ_GROUPS (DNNL_VERSION_MAJOR > 3 || DNNL_VERSION_MINOR >= 5)
/* K elements per scale, as q8_0 and q4_0 blocks. */
#define WDQ_GROUP 32
/* Weight copies cycled through at most (64 MiB in all, or this many). */
#define WDQ_MAX_COPIES 4096

#define CHECK(call)                                                                                \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success) {                                                                 \
            fprintf(stderr, "bench-onednn-wdq: %s: status %d\n", #call, (int)st_);                 \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

struct wdq {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    int64_t n, k;
    int threads, reps;
};

static const char *wdq_status_name(dnnl_status_t st)
{
    switch (st) {
    case dnnl_success:
        return "success";
    case dnnl_out_of_memory:
        return "out_of_memory";
    case dnnl_invalid_arguments:
        return "invalid_arguments";
    case dnnl_unimplemented:
        return "unimplemented";
    default:
        return "other";
    }
}

static double wdq_bits(dnnl_data_type_t dt)
{
#if WDQ_GROUPS
    if (dt == dnnl_s4 || dt == dnnl_u4)
        return 4;
#endif
    return dt == dnnl_f32 ? 32 : dt == dnnl_bf16 ? 16 : 8;
}

/* Fill a memory object's bytes with a fixed pseudo-random pattern (the
 * values do not matter for the timing; any byte is a valid s8/u8/s4/u4). */
static int wdq_fill(dnnl_memory_t mem, const_dnnl_memory_desc_t md, uint8_t mask)
{
    void *p;
    CHECK(dnnl_memory_get_data_handle(mem, &p));
    const size_t n = dnnl_memory_desc_get_size(md);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        ((uint8_t *)p)[i] = (uint8_t)(s >> 24) & mask;
    }
    return 0;
}

static void wdq_case_free(dnnl_primitive_attr_t attr, dnnl_memory_desc_t smd,
                          dnnl_memory_desc_t wmd, dnnl_memory_desc_t wraw, dnnl_memory_desc_t dmd)
{
    dnnl_primitive_attr_destroy(attr);
    dnnl_memory_desc_destroy(smd);
    dnnl_memory_desc_destroy(wmd);
    dnnl_memory_desc_destroy(wraw);
    dnnl_memory_desc_destroy(dmd);
}

/* One case: m rows of src_dt x wei_dt weights [K, N] (format any, packed
 * from the checkpoint's [N][K] rows by a reorder), f32 destination.
 * Prints one line; returns -1 only on errors other than oneDNN refusing. */
static int wdq_case(struct wdq *w, dnnl_data_type_t src_dt, dnnl_data_type_t wei_dt, int64_t m,
                    double triad)
{
    const dnnl_dims_t sd = {m, w->k}, wd = {w->k, w->n}, dd = {m, w->n};
    dnnl_memory_desc_t smd, wmd, wraw, dmd;
    CHECK(dnnl_memory_desc_create_with_tag(&smd, 2, sd, src_dt, dnnl_ab));
    CHECK(dnnl_memory_desc_create_with_tag(&wmd, 2, wd, wei_dt, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_create_with_tag(&wraw, 2, wd, wei_dt, dnnl_ba));
    CHECK(dnnl_memory_desc_create_with_tag(&dmd, 2, dd, dnnl_f32, dnnl_ab));
    dnnl_primitive_attr_t attr;
    CHECK(dnnl_primitive_attr_create(&attr));
    const dnnl_fpmath_mode_t fm =
        src_dt == dnnl_bf16 ? dnnl_fpmath_mode_bf16 : dnnl_fpmath_mode_strict;
#if WDQ_GROUPS
    /* Decompress the integer weights to the source's type (apply_to_int). */
    CHECK(dnnl_primitive_attr_set_fpmath_mode_v2(attr, fm, 1));
    const dnnl_dims_t groups = {WDQ_GROUP, 1};
    CHECK(dnnl_primitive_attr_set_scales(attr, DNNL_ARG_WEIGHTS, (1 << 0) | (1 << 1), 2, groups,
                                         dnnl_f32));
    const int64_t sc_rows = w->k / WDQ_GROUP;
    const char *scales = "f32 per 32 x 1 group";
#else
    /* 3.2: no apply_to_int, no groups: one scale per output column. */
    CHECK(dnnl_primitive_attr_set_fpmath_mode(attr, fm));
    CHECK(dnnl_primitive_attr_set_scales_mask(attr, DNNL_ARG_WEIGHTS, 1 << 1));
    const int64_t sc_rows = 1;
    const char *scales = "f32 per column (no groups before 3.5)";
#endif
    char name[64];
    snprintf(name, sizeof name, "%s x %s", dnnl_dt2str(src_dt), dnnl_dt2str(wei_dt));
    /* Weights in the layout the primitive picks, packed by a reorder from
     * [N][K] rows; where oneDNN has no such reorder (4-bit types), the
     * primitive on the [N][K] rows themselves. */
    dnnl_primitive_desc_t pd, rpd = NULL;
    dnnl_status_t st = dnnl_matmul_primitive_desc_create(&pd, w->eng, smd, wmd, NULL, dmd, attr);
    const char *layout = "packed";
    if (st == dnnl_success &&
        dnnl_reorder_primitive_desc_create(
            &rpd, wraw, w->eng, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), w->eng,
            NULL) != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        rpd = NULL;
        layout = "[N][K] rows";
        st = dnnl_matmul_primitive_desc_create(&pd, w->eng, smd, wraw, NULL, dmd, attr);
    }
    if (st != dnnl_success) {
        printf("%-14s %4lld  %-13s %s  (%s, fpmath %s)\n", name, (long long)m, wdq_status_name(st),
               "-", scales, dnnl_fpmath_mode2str(fm));
        wdq_case_free(attr, smd, wmd, wraw, dmd);
        return 0;
    }
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const_dnnl_memory_desc_t got = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_t sm, wr, dm;
    dnnl_memory_desc_t scmd;
    const dnnl_dims_t scd = {sc_rows, w->n};
    CHECK(dnnl_memory_desc_create_with_tag(&scmd, 2, scd, dnnl_f32, dnnl_ab));
    CHECK(dnnl_memory_create(&sm, smd, w->eng, DNNL_MEMORY_ALLOCATE));
    CHECK(dnnl_memory_create(&wr, wraw, w->eng, DNNL_MEMORY_ALLOCATE));
    CHECK(dnnl_memory_create(&dm, dmd, w->eng, DNNL_MEMORY_ALLOCATE));
    if (wdq_fill(wr, wraw, 0xff) || wdq_fill(sm, smd, 0x3f))
        return -1;
    /* As the experts in bench-expert-ffn: copies of the weights and scales
     * cycled through, 64 MiB in all, so every call reads them from DRAM. */
    const double wbytes = (double)dnnl_memory_desc_get_size(got);
    int copies = (int)ceil(64.0 * 1048576.0 / wbytes);
    copies = copies < 1 ? 1 : copies > WDQ_MAX_COPIES ? WDQ_MAX_COPIES : copies;
    dnnl_memory_t wc[WDQ_MAX_COPIES], sc[WDQ_MAX_COPIES];
    dnnl_primitive_t r = NULL, prim;
    if (rpd)
        CHECK(dnnl_primitive_create(&r, rpd));
    for (int c = 0; c < copies; c++) {
        CHECK(dnnl_memory_create(&sc[c], scmd, w->eng, DNNL_MEMORY_ALLOCATE));
        if (wdq_fill(sc[c], scmd, 0x3c))
            return -1;
        if (r) {
            CHECK(dnnl_memory_create(&wc[c], got, w->eng, DNNL_MEMORY_ALLOCATE));
            dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, wr}, {DNNL_ARG_TO, wc[c]}};
            CHECK(dnnl_primitive_execute(r, w->strm, 2, rargs));
            CHECK(dnnl_stream_wait(w->strm));
        } else { /* the rows as they lie */
            CHECK(dnnl_memory_create(&wc[c], wraw, w->eng, DNNL_MEMORY_ALLOCATE));
            if (wdq_fill(wc[c], wraw, 0xff))
                return -1;
        }
    }
    CHECK(dnnl_primitive_create(&prim, pd));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, sm},
                               {DNNL_ARG_WEIGHTS, wc[0]},
                               {DNNL_ARG_DST, dm},
                               {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, sc[0]}};
    double *t = malloc(sizeof *t * (size_t)w->reps);
    if (!t)
        return -1;
    for (int i = -copies; i < w->reps; i++) {
        const int c = (i + copies) % copies;
        args[1].memory = wc[c];
        args[3].memory = sc[c];
        const double t0 = roof_now();
        CHECK(dnnl_primitive_execute(prim, w->strm, 4, args));
        CHECK(dnnl_stream_wait(w->strm));
        if (i >= 0)
            t[i] = 1e3 * (roof_now() - t0);
    }
    for (int i = 1; i < w->reps; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    /* Bytes read: the weights at their width and the scales. */
    const double bytes =
        (double)w->n * (double)w->k * wdq_bits(wei_dt) / 8 + 4.0 * (double)sc_rows * (double)w->n;
    printf("%-14s %4lld  %-13s %8.3f %8.3f %6.2f  %s (weights %s, scales %s, fpmath %s)\n", name,
           (long long)m, "success", t[0], t[w->reps / 2], bytes / (triad * 1e6) / t[0],
           impl ? impl : "?", layout, scales, dnnl_fpmath_mode2str(fm));
    free(t);
    dnnl_primitive_destroy(prim);
    if (r)
        dnnl_primitive_destroy(r);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(sm);
    for (int c = 0; c < copies; c++) {
        dnnl_memory_destroy(wc[c]);
        dnnl_memory_destroy(sc[c]);
    }
    dnnl_memory_destroy(wr);
    dnnl_memory_destroy(dm);
    dnnl_memory_desc_destroy(scmd);
    wdq_case_free(attr, smd, wmd, wraw, dmd);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench-onednn-wdq [--threads N] [--reps R] [--shape NAME|N,K] "
               "[--rows 1,2,4,8]\n"
               "  shapes: expert-up (512 x 2048: gate or up of a LLaDA2.0-mini routed expert,\n"
               "  hidden 2048, inter 512), expert-down (2048 x 512), tiny-up (32 x 64: the tiny\n"
               "  preset, hidden 64, inter 32), tiny-down (64 x 32); or N,K. Default expert-up, "
               "rows 1,2,4,8, 2 threads,\n"
               "  best and median of 20 calls; weights s8, u8 (and s4, u4 from oneDNN 3.5),\n"
               "  source bf16 and f32, destination f32.\n");
}

int main(int argc, char **argv)
{
    roof_openmp_env(argv);
    struct wdq w = {.n = 512, .k = 2048, .threads = 2, .reps = 20};
    char rows_text[256] = "1,2,4,8", shape[64] = "expert-up";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (bm_common_arg(a, v, &w.threads, &w.reps, rows_text, shape)) {
            i++;
        } else {
            usage(stderr);
            return 2;
        }
    }
    static const struct bm_shape shapes[] = {{"expert-up", 512, 2048},
                                             {"expert-down", 2048, 512},
                                             {"tiny-up", 32, 64},
                                             {"tiny-down", 64, 32}};
    const bool known = bm_shape_parse(shape, shapes, sizeof shapes / sizeof shapes[0], &w.n, &w.k);
    if (!known || w.threads < 1 || w.reps < 1 || w.k % WDQ_GROUP) {
        usage(stderr);
        return 2;
    }
    omp_set_num_threads(w.threads);
    char cpu[128];
    roof_cpu_name(cpu, sizeof cpu);
    const dnnl_version_t *ver = dnnl_version();
    printf("# bench-onednn-wdq: oneDNN %d.%d.%d (%s), weight decompression, N %lld x K %lld "
           "(%s), %d threads\n",
           ver->major, ver->minor, ver->patch, ver->hash, (long long)w.n, (long long)w.k, shape,
           w.threads);
    printf("# CPU: %s\n", cpu);
    if (dnnl_engine_create(&w.eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&w.strm, w.eng, dnnl_stream_default_flags) != dnnl_success)
        return 1;
    struct roof_triad tr;
    if (roof_triad_init(&tr, (size_t)32 << 20, w.threads))
        return 1;
    const double triad = roof_triad_run2(&tr, NULL);
    roof_triad_free(&tr);
    printf("# same run: STREAM triad %.1f GB/s; 'of triad': weight and scale bytes / triad / "
           "best time\n",
           triad);
    printf("%-14s %4s  %-13s %8s %8s %6s  %s\n", "src x wei", "rows", "status", "best ms",
           "med. ms", "triad", "implementation");
    static const dnnl_data_type_t weis[] = {
        dnnl_s8,
        dnnl_u8,
#if WDQ_GROUPS
        dnnl_s4,
        dnnl_u4
#endif
    };
    static const dnnl_data_type_t srcs[] = {dnnl_bf16, dnnl_f32};
    for (size_t si = 0; si < 2; si++)
        for (size_t wi = 0; wi < sizeof weis / sizeof weis[0]; wi++) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", rows_text);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                const int64_t m = atoll(t);
                if (m >= 1 && wdq_case(&w, srcs[si], weis[wi], m, triad))
                    return 1;
                fflush(stdout);
            }
        }
    dnnl_stream_destroy(w.strm);
    dnnl_engine_destroy(w.eng);
    return 0;
}
