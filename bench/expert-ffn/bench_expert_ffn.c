/* bench-expert-ffn: one routed expert FFN (gate, up: [I,H], down: [H,I], bf16)
 * on a backend, at 1..64 tokens, with weights streamed from DRAM: the calls
 * cycle over enough distinct experts that none is in cache when it runs.
 * Prints time per expert, weight bandwidth, its ratio to a STREAM triad
 * measured in the same run with the same thread count, GFLOP/s and its ratio
 * to the bf16 peak (VDPBF16PS) measured in the same run, for each expert
 * layout the backend offers (`expert_layout`), called one expert at a time
 * (expert_ffn) and, when the backend has it, all experts in one call
 * (expert_ffn_batch, as the dispatcher calls it). The summary compares each
 * figure with its target: >= 0.9 of STREAM at 1-8 tokens (memory-bound),
 * >= 0.7 of peak at >= 64 tokens (compute-bound).
 *
 * On a shared machine the bandwidth drifts by tens of percent within a minute,
 * so the layouts are measured interleaved (for each token count: a STREAM
 * triad, then each layout), and the whole sweep is repeated. Each figure is
 * the median over sweeps of the median cycle; the ratio is taken against the
 * triad measured just before it.
 *
 * --format runs the experts in bf16 (every layout, the default), q8_0, q4_0
 * or fp8 (blocks 128x128), quantized from the same bf16 weights with
 * tide_quantize_bf16, or all of them interleaved; the bandwidth counts the
 * bytes of each format (values and scales), so /triad compares formats.
 *
 * Usage: bench-expert-ffn [--backend NAME] [--threads N] [--mib MiB] [--hidden H]
 *                         [--inter I] [--seconds S] [--reps R] [--tokens 1,4,8,32,64]
 *                         [--huge 0|1] [--format bf16|q8_0|q4_0|fp8|all]
 * --gemm a,b (backends with a `gemm` option) measures each bf16 layout under
 * each of those matmul kernels, interleaved (e.g. --gemm amx,onednn);
 * --layout NAME measures that expert_layout only.
 * --huge 1 puts the weights in transparent huge pages (2 MiB), as the
 * checkpoint is with [model] mmap = false; by default they are in 4 KiB
 * pages, as a mapped checkpoint is.
 * Plugins are found as by `tide` (next to the binary, TIDE_PLUGIN_PATH), or
 * in $TIDE_PLUGIN_DIR when set. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/roofline.h"
#include "config.h"
#include "loader.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/quant.h"
#include "tide/status.h"

#define BENCH_MAX_TOKENS  16
#define BENCH_MAX_LAYOUTS 8
#define BENCH_MAX_REPS    16

struct bench_cfg {
    const char *backend;
    int huge;    /* raw weights in transparent huge pages (as [model] mmap = false gives) */
    int threads; /* 0 = all cores */
    int mib;     /* weights cycled through */
    int hidden, inter;
    double seconds;               /* timed seconds per (layout, tokens, rep) point */
    int reps;                     /* sweeps */
    int tokens[BENCH_MAX_TOKENS]; /* token counts, each in [1, 256] */
    int n_tokens;
    bool formats[TIDE_QFMT_COUNT]; /* formats measured (bf16 = TIDE_QFMT_NONE) */
    char gemm[64];                 /* --gemm: the backend's `gemm` values to compare, ',' apart */
    const char *layout;            /* --layout: this expert_layout only (NULL: each) */
};

/* The experts quantized to one format: expert e's matrix j (gate, up, down)
 * has its values at data + e * per + voff[j] and its scales at soff[j]. */
struct bench_q {
    int fmt, block[2];
    uint8_t *data;
    size_t per;
    size_t voff[3], soff[3];
};

/* One backend instance with its experts over the shared raw weights. */
struct bench_run {
    char
        layout[32]; /* "default" when the backend has no expert_layout; the format when quantized */
    const struct bench_q *q; /* quantized experts, or NULL (bf16) */
    double bytes;            /* bytes of one expert's weights (values and scales) */
    const struct tide_backend_ops *ops;
    struct tide_backend *bk;
    struct tide_expert **experts; /* [n_experts] */
    int n_experts;
    struct tide_buffer *xb, *ob;
    struct tide_tensor x, out; /* bf16 [256,H], f32 [n_experts * BENCH_BATCH_MAX, H] */
    double create_ms, slot_ms; /* per expert; slot_ms < 0: no slots */
    bool has_batch;            /* the backend has expert_ffn_batch */
    /* [0] one expert_ffn call per expert, [1] one expert_ffn_batch call */
    double us[2][BENCH_MAX_TOKENS][BENCH_MAX_REPS];     /* median cycle, per expert */
    double cpu_us[2][BENCH_MAX_TOKENS][BENCH_MAX_REPS]; /* CPU time / threads, per expert */
    double ratio[2][BENCH_MAX_TOKENS][BENCH_MAX_REPS];  /* weight GB/s / triad */
};

/* Tokens per expert up to which the batch call is measured (its output holds
 * n_experts x this many rows). */
#define BENCH_BATCH_MAX 64

#define now_s roof_now

/* Random bf16 values in about [-0.05, 0.05]: plausible weights, no denormals. */
static void fill_bf16(uint16_t *p, size_t n, uint64_t seed)
{
    const uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)n; i++) {
        uint64_t z = s + (uint64_t)i * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
        z ^= z >> 29;
        float f = ((float)(z & 0xffff) / 65536.0f - 0.5f) * 0.1f;
        p[i] = tide_f32_to_bf16(f);
    }
}

static bool has_option(const struct tide_plugin_desc *d, const char *name)
{
    for (const struct tide_option *o = d->options; o && o->name; o++)
        if (!strcmp(o->name, name))
            return true;
    return false;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0.0;
}

/* Expert e's three matrices inside the raw weights (q NULL), or inside the
 * quantized copy q, whose scale views go to sv[3]. */
static void expert_views(const uint16_t *raw, const struct bench_q *q, int e, int64_t H, int64_t I,
                         struct tide_view v[3], struct tide_view sv[3])
{
    const size_t mat = (size_t)(H * I);
    for (int j = 0; j < 3; j++) {
        const int64_t rows = j < 2 ? I : H, cols = j < 2 ? H : I;
        if (!q) {
            struct tide_view x = {.data = raw + ((size_t)e * 3 + (size_t)j) * mat,
                                  .dtype = TIDE_DTYPE_BF16,
                                  .ndim = 2,
                                  .shape = {rows, cols},
                                  .nbytes = mat * 2};
            v[j] = x;
            continue;
        }
        int64_t vs[2], ss[2];
        tide_qmat_value_shape(q->fmt, rows, cols, vs);
        tide_qmat_scale_shape(q->block, rows, cols, ss);
        const uint8_t *base = q->data + (size_t)e * q->per;
        struct tide_view s = {.data = base + q->soff[j],
                              .dtype = tide_qfmt_scale_dtype(q->fmt),
                              .ndim = 2,
                              .shape = {ss[0], ss[1]},
                              .nbytes = (size_t)(ss[0] * ss[1]) *
                                        tide_dtype_size(tide_qfmt_scale_dtype(q->fmt))};
        sv[j] = s;
        struct tide_view x = {.data = base + q->voff[j],
                              .dtype = tide_qfmt_value_dtype(q->fmt),
                              .ndim = 2,
                              .shape = {rows, cols},
                              .nbytes = (size_t)(vs[0] * vs[1]),
                              .qfmt = q->fmt,
                              .qblock = {q->block[0], q->block[1]},
                              .scale = &sv[j]};
        v[j] = x;
    }
}

/* Quantize the n_experts bf16 experts of raw into q (fmt with its default block). */
static int bench_quantize(struct bench_q *q, int fmt, const uint16_t *raw, int n_experts, int64_t H,
                          int64_t I)
{
    q->fmt = fmt;
    tide_qfmt_default_block(fmt, q->block);
    size_t at = 0;
    for (int j = 0; j < 3; j++) {
        const int64_t rows = j < 2 ? I : H, cols = j < 2 ? H : I;
        int64_t vs[2], ss[2];
        tide_qmat_value_shape(fmt, rows, cols, vs);
        tide_qmat_scale_shape(q->block, rows, cols, ss);
        q->voff[j] = at;
        at += ((size_t)(vs[0] * vs[1]) + 63) & ~(size_t)63;
        q->soff[j] = at;
        at += ((size_t)(ss[0] * ss[1]) * tide_dtype_size(tide_qfmt_scale_dtype(fmt)) + 63) &
              ~(size_t)63;
    }
    q->per = at;
    q->data = aligned_alloc(2u << 20, (q->per * (size_t)n_experts + (2u << 20) - 1) &
                                          ~(size_t)((2u << 20) - 1));
    if (!q->data)
        return TIDE_E_NOMEM;
    int bad = 0;
    const size_t mat = (size_t)(H * I);
#pragma omp parallel for schedule(dynamic) reduction(| : bad)
    for (int e = 0; e < n_experts; e++)
        for (int j = 0; j < 3; j++)
            bad |= tide_quantize_bf16(fmt, q->block, raw + ((size_t)e * 3 + (size_t)j) * mat,
                                      j < 2 ? I : H, j < 2 ? H : I,
                                      q->data + (size_t)e * q->per + q->voff[j],
                                      q->data + (size_t)e * q->per + q->soff[j]) != 0;
    return bad ? TIDE_E_INVAL : TIDE_OK;
}

/* Median microseconds per expert at n tokens, over cycles through all
 * experts: one expert_ffn call each, or (batch) one expert_ffn_batch call for
 * all of them, each expert writing its own rows of out. */
static double time_tokens(struct bench_run *r, int n, double seconds, bool batch, int threads,
                          double *cpu_us)
{
    const int E = r->n_experts;
    int32_t *rows = malloc(sizeof *rows * (size_t)E * 256),
            *dst = malloc(sizeof *dst * (size_t)E * 256);
    const struct tide_expert **ex = malloc(sizeof *ex * (size_t)E);
    int64_t *off = malloc(sizeof *off * (size_t)(E + 1));
    double *samples = malloc(sizeof *samples * 4096), *cpu = malloc(sizeof *cpu * 4096);
    int ns = 0;
    double t_end = 0.0, result = -1.0;
    if (!rows || !dst || !ex || !off || !samples || !cpu)
        goto out;
    off[0] = 0;
    for (int e = 0; e < E; e++) {
        for (int i = 0; i < n; i++) {
            rows[e * n + i] = i;
            dst[e * n + i] = batch ? e * n + i : i;
        }
        ex[e] = r->experts[e];
        off[e + 1] = off[e] + n;
    }
    for (int cycle = -1; ns < 4096; cycle++) {
        double t0 = now_s(), c0 = roof_cpu_now();
        if (batch) {
            if (r->ops->expert_ffn_batch(r->bk, E, ex, &r->x, rows, dst, off, &r->out))
                goto out;
        } else {
            for (int e = 0; e < E; e++)
                if (r->ops->expert_ffn(r->bk, r->experts[e], &r->x, rows, dst, n, &r->out))
                    goto out;
        }
        r->ops->sync(r->bk);
        double t1 = now_s(), c1 = roof_cpu_now();
        if (cycle < 0) { /* warm-up: primitives, scratch, the previous layout's cache */
            t_end = t1 + seconds;
            continue;
        }
        cpu[ns] = 1e6 * (c1 - c0) / threads / E;
        samples[ns++] = 1e6 * (t1 - t0) / E;
        if (t1 > t_end && ns >= 3)
            break;
    }
    result = median(samples, ns);
    *cpu_us = median(cpu, ns);
out:
    free(cpu);
    free(rows);
    free(dst);
    free(ex);
    free(off);
    free(samples);
    return result;
}

/* Milliseconds per slot_load (a promotion), cycling over the experts; -1 when
 * the backend has no slots. */
static double slot_load_ms(struct bench_run *r, const uint16_t *raw, int64_t H, int64_t I)
{
    struct tide_expert *slot = NULL;
    if (!TIDE_OPS_HAS(r->ops, slot_create) || !TIDE_OPS_HAS(r->ops, slot_load) ||
        !TIDE_OPS_HAS(r->ops, copy_sync))
        return -1.0;
    if (r->q ? !TIDE_OPS_HAS(r->ops, slot_create_q) ||
                   r->ops->slot_create_q(r->bk, H, I, r->q->fmt, r->q->block, &slot)
             : r->ops->slot_create(r->bk, H, I, &slot))
        return -1.0;
    const int loads = r->n_experts < 32 ? r->n_experts : 32;
    double t0 = 0.0;
    int rc = TIDE_OK;
    for (int i = -1; i < loads && !rc; i++) { /* i = -1: first touch of the slot */
        if (i == 0)
            t0 = now_s();
        struct tide_view v[3], sv[3];
        expert_views(raw, r->q, i < 0 ? 0 : i, H, I, v, sv);
        rc = r->ops->slot_load(r->bk, slot, &v[0], &v[1], &v[2]);
        if (!rc)
            rc = r->ops->copy_sync(r->bk);
    }
    double t = (now_s() - t0) / loads;
    r->ops->expert_destroy(r->bk, slot);
    return rc ? -1.0 : 1e3 * t;
}

/* Create a backend instance with `layout` (NULL: the backend's default) and its experts. */
static int run_open(struct bench_run *r, const struct tide_plugin *p, struct tide_config *cfg,
                    const struct bench_cfg *bc, const char *layout, const char *gemm,
                    const uint16_t *raw, const struct bench_q *q, int n_experts)
{
    const char *sec = p->desc->name;
    char threads[32];
    snprintf(threads, sizeof threads, "%d", bc->threads);
    if ((has_option(p->desc, "threads") &&
         tide_config_set_value(cfg, sec, "threads", threads, "bench")) ||
        (layout && tide_config_set_value(cfg, sec, "expert_layout", layout, "bench")) ||
        (gemm && tide_config_set_value(cfg, sec, "gemm", gemm, "bench")))
        return TIDE_E_CONFIG;
    snprintf(r->layout, sizeof r->layout, "%s%s%s",
             q        ? tide_qfmt_name(q->fmt)
             : layout ? layout
                      : "default",
             gemm ? "/" : "", gemm ? gemm : "");
    r->q = q;
    r->bytes = q ? (double)tide_qexpert_bytes(q->fmt, q->block, bc->hidden, bc->inter)
                 : 3.0 * bc->hidden * bc->inter * 2.0;
    r->ops = p->desc->ops;
    r->n_experts = n_experts;
    struct tide_backend_args args = {
        .size = sizeof args, .opts = tide_config_section(cfg, sec), .role = TIDE_ROLE_HOST};
    int rc = r->ops->create(&args, &r->bk);
    if (rc)
        return rc;
    const int64_t H = bc->hidden, I = bc->inter;
    r->experts = calloc((size_t)n_experts, sizeof *r->experts);
    if (!r->experts)
        return TIDE_E_NOMEM;
    double t0 = now_s();
    for (int e = 0; e < n_experts && !rc; e++) {
        struct tide_view v[3], sv[3];
        expert_views(raw, q, e, H, I, v, sv);
        rc = r->ops->expert_create(r->bk, &v[0], &v[1], &v[2], &r->experts[e]);
    }
    r->create_ms = 1e3 * (now_s() - t0) / n_experts;
    if (rc)
        return rc;
    r->slot_ms = slot_load_ms(r, raw, H, I);
    r->has_batch = TIDE_OPS_HAS(r->ops, expert_ffn_batch);
    int64_t out_rows = r->has_batch ? (int64_t)n_experts * BENCH_BATCH_MAX : 256;
    out_rows = out_rows > 256 ? out_rows : 256; /* single calls write up to 256 rows */
    if ((rc = r->ops->buffer_alloc(r->bk, (size_t)(256 * H) * 2, &r->xb)) ||
        (rc = r->ops->buffer_alloc(r->bk, (size_t)(out_rows * H) * 4, &r->ob)))
        return rc;
    r->x = tide_tensor_2d(r->xb, TIDE_DTYPE_BF16, 256, H);
    r->out = tide_tensor_2d(r->ob, TIDE_DTYPE_F32, out_rows, H);
    uint16_t *xh = malloc(sizeof *xh * (size_t)(256 * H));
    if (!xh)
        return TIDE_E_NOMEM;
    fill_bf16(xh, (size_t)(256 * H), 99);
    rc = r->ops->write(r->bk, &r->x, xh);
    free(xh);
    return rc;
}

static void run_close(struct bench_run *r)
{
    if (!r->bk)
        return;
    for (int e = 0; r->experts && e < r->n_experts; e++)
        r->ops->expert_destroy(r->bk, r->experts[e]);
    free(r->experts);
    r->ops->buffer_free(r->bk, r->xb);
    r->ops->buffer_free(r->bk, r->ob);
    r->ops->destroy(r->bk);
}

/* "1,4,8" into bc->tokens; non-zero when malformed or out of [1, 256]. */
static int parse_tokens(const char *v, struct bench_cfg *bc)
{
    bc->n_tokens = 0;
    for (const char *p = v; *p;) {
        char *end;
        long t = strtol(p, &end, 10);
        if (end == p || t < 1 || t > 256 || bc->n_tokens == BENCH_MAX_TOKENS ||
            (*end && *end != ','))
            return 1;
        bc->tokens[bc->n_tokens++] = (int)t;
        p = *end ? end + 1 : end;
    }
    return bc->n_tokens == 0;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--backend NAME] [--threads N] [--mib MiB] [--hidden H] [--inter I] "
            "[--seconds S] [--reps R] [--tokens 1,4,8,32,64] [--huge 0|1] "
            "[--format bf16|q8_0|q4_0|fp8|all] [--gemm a,b] [--layout NAME]\n",
            argv0);
    return 2;
}

static int parse_args(int argc, char **argv, struct bench_cfg *bc)
{
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return 1;
        if (!strcmp(argv[i], "--backend"))
            bc->backend = v;
        else if (!strcmp(argv[i], "--threads"))
            bc->threads = atoi(v);
        else if (!strcmp(argv[i], "--mib"))
            bc->mib = atoi(v);
        else if (!strcmp(argv[i], "--hidden"))
            bc->hidden = atoi(v);
        else if (!strcmp(argv[i], "--inter"))
            bc->inter = atoi(v);
        else if (!strcmp(argv[i], "--huge"))
            bc->huge = atoi(v);
        else if (!strcmp(argv[i], "--seconds"))
            bc->seconds = atof(v);
        else if (!strcmp(argv[i], "--reps"))
            bc->reps = atoi(v);
        else if (!strcmp(argv[i], "--layout"))
            bc->layout = v;
        else if (!strcmp(argv[i], "--gemm")) {
            if (strlen(v) >= sizeof bc->gemm)
                return 1;
            snprintf(bc->gemm, sizeof bc->gemm, "%s", v);
        } else if (!strcmp(argv[i], "--format")) {
            int f;
            memset(bc->formats, 0, sizeof bc->formats);
            if (!strcmp(v, "all"))
                for (f = 0; f < TIDE_QFMT_COUNT; f++)
                    bc->formats[f] = true;
            else if (tide_qfmt_parse(v, &f))
                return 1;
            else
                bc->formats[f] = true;
        } else if (strcmp(argv[i], "--tokens") || parse_tokens(v, bc))
            return 1;
    }
    return bc->threads < 0 || bc->mib < 1 || bc->hidden < 1 || bc->inter < 1 ||
           !(bc->seconds > 0) || bc->reps < 1 || bc->reps > BENCH_MAX_REPS;
}

/* The interleaved sweeps and the table. */
static int bench(struct bench_run *runs, int n_runs, const struct bench_cfg *bc,
                 struct roof_triad *tr, double peak, double peak_cpu, int threads)
{
    const double mat = (double)bc->hidden * bc->inter;
    double triad[BENCH_MAX_TOKENS][BENCH_MAX_REPS];
    for (int rep = 0; rep < bc->reps; rep++)
        for (int i = 0; i < bc->n_tokens; i++) {
            triad[i][rep] = roof_triad_run(tr);
            for (int l = 0; l < n_runs; l++)
                for (int b = 0; b < 2; b++) {
                    if (b && (!runs[l].has_batch || bc->tokens[i] > BENCH_BATCH_MAX))
                        continue;
                    double cus = 0;
                    double us = time_tokens(&runs[l], bc->tokens[i], bc->seconds, b, threads, &cus);
                    if (us < 0)
                        return TIDE_E_DEVICE;
                    runs[l].us[b][i][rep] = us;
                    runs[l].cpu_us[b][i][rep] = cus;
                    runs[l].ratio[b][i][rep] = runs[l].bytes / (1e-6 * us) / 1e9 / triad[i][rep];
                }
        }
    printf("%6s  %-14s %-6s %10s %11s %8s %10s %8s %10s %9s %9s\n", "tokens", "layout", "call",
           "us/expert", "weight GB/s", "/triad", "GFLOP/s", "/peak", "triad GB/s", "cpu us",
           "cpu/peak");
    for (int i = 0; i < bc->n_tokens; i++) {
        double tri = median(triad[i], bc->reps);
        for (int l = 0; l < n_runs; l++)
            for (int b = 0; b < 2; b++) {
                if (b && (!runs[l].has_batch || bc->tokens[i] > BENCH_BATCH_MAX))
                    continue;
                double us = median(runs[l].us[b][i], bc->reps), t = 1e-6 * us;
                double gf = 2.0 * bc->tokens[i] * 3.0 * mat / t / 1e9;
                double cus = median(runs[l].cpu_us[b][i], bc->reps);
                double gf_cpu = 2.0 * bc->tokens[i] * 3.0 * mat / (1e-6 * cus) / 1e9;
                printf("%6d  %-14s %-6s %10.1f %11.1f %8.2f %10.1f %8.2f %10.1f %9.1f %9.2f\n",
                       bc->tokens[i], runs[l].layout, b ? "batch" : "single", us,
                       runs[l].bytes / t / 1e9, median(runs[l].ratio[b][i], bc->reps), gf,
                       peak > 0 ? gf / peak : 0.0, tri, cus,
                       peak_cpu > 0 ? gf_cpu / peak_cpu : 0.0);
            }
    }
    /* Against the targets: memory-bound counts (<= 8 tokens) by the triad,
     * compute-bound ones (>= 64) by the peak; the dispatcher's call is the batch. */
    printf("# targets: >= 0.90 of the triad at 1-8 tokens, >= 0.70 of the bf16 peak at >= 64;\n"
           "# (roofline R): the peak's flops take longer than the triad's bytes, so R of the\n"
           "# triad is the most this CPU allows\n");
    for (int l = 0; l < n_runs; l++)
        for (int b = 0; b < 2; b++) {
            if (b && !runs[l].has_batch)
                continue;
            printf("# %s %s:", runs[l].layout, b ? "batch" : "single");
            for (int i = 0; i < bc->n_tokens; i++) {
                const int n = bc->tokens[i];
                if (b && n > BENCH_BATCH_MAX)
                    continue;
                const double us = median(runs[l].us[b][i], bc->reps);
                if (n <= 8) {
                    printf(" %d: %.2f of triad", n, median(runs[l].ratio[b][i], bc->reps));
                    /* The most the roofline allows: the triad's time over
                     * the longer of it and the flops at the peak. */
                    const double tm = runs[l].bytes / (1e9 * median(triad[i], bc->reps)),
                                 tc = peak > 0 ? 2.0 * n * 3.0 * mat / (1e9 * peak) : 0;
                    if (tc > tm)
                        printf(" (roofline %.2f)", tm / tc);
                } else if (peak > 0)
                    printf(" %d: %.2f of peak", n, 2.0 * n * 3.0 * mat / (1e-6 * us) / 1e9 / peak);
            }
            printf("\n");
        }
    return TIDE_OK;
}

int main(int argc, char **argv)
{
    roof_openmp_env(argv); /* the OpenMP defaults `tide` runs with */
    struct bench_cfg bc = {
        .backend = "backend-cpu-onednn",
        .mib = 384,
        .hidden = 2048,
        .inter = 512,
        .seconds = 0.5,
        .reps = 3,
        .tokens = {1, 4, 8, 32, 64},
        .n_tokens = 5,
        .formats = {[TIDE_QFMT_NONE] = true},
    };
    if (parse_args(argc, argv, &bc))
        return usage(argv[0]);
    struct tide_plugin_set *set = NULL;
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (dir ? tide_plugins_scan_dirs(&dir, 1, &set) : tide_plugins_scan(&set))
        return 1;
    const struct tide_plugin *p =
        tide_plugins_get(set, bc.backend, TIDE_PLUGIN_BACKEND, "--backend");
    struct tide_config *cfg = p ? tide_config_create() : NULL;
    if (!p || !cfg ||
        tide_config_add_section(cfg, p->desc->name, p->desc->options, p->desc->name,
                                p->desc->summary)) {
        tide_config_destroy(cfg);
        tide_plugins_free(set);
        return 1;
    }
    const int threads = bc.threads ? bc.threads : omp_get_num_procs();
    const size_t expert_bytes = (size_t)3 * (size_t)bc.hidden * (size_t)bc.inter * 2;
    int n_experts = (int)(((size_t)bc.mib << 20) / expert_bytes);
    n_experts = n_experts < 2 ? 2 : n_experts;
    const size_t raw_bytes =
        (expert_bytes * (size_t)n_experts + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    uint16_t *raw = aligned_alloc(2u << 20, raw_bytes);
    if (raw && bc.huge)
        madvise(raw, raw_bytes, MADV_HUGEPAGE);
    struct bench_run runs[BENCH_MAX_LAYOUTS];
    memset(runs, 0, sizeof runs);
    int n_runs = 0, rc = raw ? TIDE_OK : TIDE_E_NOMEM;
    omp_set_num_threads(threads);
    if (raw)
        fill_bf16(raw, expert_bytes / 2 * (size_t)n_experts, 1);
    /* Every layout the backend offers, except auto (which is one of them). */
    char choices[128] = "";
    for (const struct tide_option *o = p->desc->options; o && o->name; o++)
        if (!strcmp(o->name, "expert_layout") && o->choices)
            snprintf(choices, sizeof choices, "%s", o->choices);
    /* Each layout under each --gemm value (or the backend's default). */
    char gemms[64];
    snprintf(gemms, sizeof gemms, "%s", bc.gemm);
    char *gsave = NULL, *g = bc.gemm[0] ? strtok_r(gemms, ",", &gsave) : NULL;
    do {
        char lay[128];
        snprintf(lay, sizeof lay, "%s", choices);
        char *save = NULL, *c = strtok_r(lay, "|", &save);
        if (!bc.formats[TIDE_QFMT_NONE])
            break;
        if (!c && !rc)
            rc = run_open(&runs[n_runs++], p, cfg, &bc, NULL, g, raw, NULL, n_experts);
        for (; c && !rc && n_runs < BENCH_MAX_LAYOUTS; c = strtok_r(NULL, "|", &save))
            if (strcmp(c, "auto") && (!bc.layout || !strcmp(c, bc.layout)))
                rc = run_open(&runs[n_runs++], p, cfg, &bc, c, g, raw, NULL, n_experts);
    } while (g && !rc && (g = strtok_r(NULL, ",", &gsave)));
    if (bc.gemm[0] && !rc)
        rc = tide_config_set_value(cfg, p->desc->name, "gemm", "auto", "bench") ? TIDE_E_CONFIG
                                                                                : TIDE_OK;
    if (!rc && bc.layout && bc.formats[TIDE_QFMT_NONE] && !n_runs) {
        fprintf(stderr, "bench-expert-ffn: --layout %s: %s offers expert_layout %s\n", bc.layout,
                p->desc->name, choices[0] ? choices : "(none)");
        rc = TIDE_E_CONFIG;
    }
    /* Quantized experts have one layout of their own, whatever expert_layout says. */
    struct bench_q qs[TIDE_QFMT_COUNT];
    memset(qs, 0, sizeof qs);
    for (int f = 1; f < TIDE_QFMT_COUNT && !rc && n_runs < BENCH_MAX_LAYOUTS; f++)
        if (bc.formats[f] && !(rc = bench_quantize(&qs[f], f, raw, n_experts, bc.hidden, bc.inter)))
            rc = run_open(&runs[n_runs++], p, cfg, &bc, NULL, NULL, raw, &qs[f], n_experts);
    struct roof_triad tr = {0};
    if (!rc)
        rc = roof_triad_init(&tr, (size_t)32 << 20, threads) ? TIDE_E_NOMEM
                                                             : TIDE_OK; /* 3 x 256 MiB */
    if (!rc) {
        char cpu[256];
        roof_cpu_name(cpu, sizeof cpu);
        printf("# expert FFN H=%d I=%d on %s, %d experts, %d threads, %d sweeps\n", bc.hidden,
               bc.inter, cpu, n_experts, threads, bc.reps);
        for (int l = 0; l < n_runs; l++)
            printf("# %s: %.2f MiB per expert (values and scales), %.0f MiB cycled\n",
                   runs[l].layout, runs[l].bytes / 1048576.0,
                   n_experts * runs[l].bytes / 1048576.0);
        for (int l = 0; l < n_runs; l++)
            printf("# %s: %s; expert_create %.2f ms, slot_load %.2f ms per expert\n",
                   runs[l].layout, runs[l].ops->describe(runs[l].bk), runs[l].create_ms,
                   runs[l].slot_ms);
        printf("# packed keeps a second host copy of every expert (+%.2f MiB each); inplace "
               "none\n",
               expert_bytes / 1048576.0);
        double peak_cpu = 0;
        const double peak = roof_peak2(threads, true, &peak_cpu);
        printf("# CPU: %s\n", cpu);
        printf("# STREAM triad: 3 x 256 MiB, %d threads, measured before each token count; "
               "bf16 peak (%s, %d threads) %.0f GFLOP/s (%.0f per CPU-second x "
               "threads)\n",
               threads, roof_peak_kind(true), threads, peak, peak_cpu);
        printf("# cpu us: the process's CPU time per expert / threads; cpu/peak: its GFLOP/s "
               "against the peak in CPU time. On a machine shared with other jobs, an estimate "
               "of the idle machine for compute-bound counts\n");
        rc = bench(runs, n_runs, &bc, &tr, peak, peak_cpu, threads);
    }
    roof_triad_free(&tr);
    if (rc)
        fprintf(stderr, "bench-expert-ffn: failed: %s\n", tide_status_str(rc));
    for (int l = 0; l < n_runs; l++)
        run_close(&runs[l]);
    tide_config_destroy(cfg);
    free(raw);
    for (int f = 0; f < TIDE_QFMT_COUNT; f++)
        free(qs[f].data);
    tide_plugins_free(set);
    return rc ? 1 : 0;
}
