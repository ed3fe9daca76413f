/* bench-expert-ffn: one routed expert FFN (gate, up: [I,H], down: [H,I], bf16)
 * on a backend, at 1..64 tokens, with weights streamed from DRAM: the calls
 * cycle over enough distinct experts that none is in cache when it runs.
 * Prints time per expert, weight bandwidth, its ratio to a STREAM triad
 * measured in the same run with the same thread count, and GFLOP/s, for each
 * expert layout the backend offers (`expert_layout`).
 *
 * On a shared machine the bandwidth drifts by tens of percent within a minute,
 * so the layouts are measured interleaved (for each token count: a STREAM
 * triad, then each layout), and the whole sweep is repeated. Each figure is
 * the median over sweeps of the median cycle; the ratio is taken against the
 * triad measured just before it.
 *
 * Usage: bench-expert-ffn [--backend NAME] [--threads N] [--mib MiB] [--hidden H]
 *                         [--inter I] [--seconds S] [--reps R] [--tokens 1,4,8,32,64]
 * Plugins are found as by `tide` (next to the binary, TIDE_PLUGIN_PATH), or
 * in $TIDE_PLUGIN_DIR when set. */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "loader.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define BENCH_MAX_TOKENS  16
#define BENCH_MAX_LAYOUTS 4
#define BENCH_MAX_REPS    16

struct bench_cfg {
    const char *backend;
    int threads; /* 0 = all cores */
    int mib;     /* weights cycled through */
    int hidden, inter;
    double seconds;               /* timed seconds per (layout, tokens, rep) point */
    int reps;                     /* sweeps */
    int tokens[BENCH_MAX_TOKENS]; /* token counts, each in [1, 256] */
    int n_tokens;
};

/* One backend instance with its experts over the shared raw weights. */
struct bench_run {
    char layout[32]; /* "default" when the backend has no expert_layout */
    const struct tide_backend_ops *ops;
    struct tide_backend *bk;
    struct tide_expert **experts; /* [n_experts] */
    int n_experts;
    struct tide_buffer *xb, *ob;
    struct tide_tensor x, out;                      /* bf16 [256,H], f32 [256,H] */
    double create_ms, slot_ms;                      /* per expert; slot_ms < 0: no slots */
    double us[BENCH_MAX_TOKENS][BENCH_MAX_REPS];    /* median cycle, per expert */
    double ratio[BENCH_MAX_TOKENS][BENCH_MAX_REPS]; /* weight GB/s / triad */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* STREAM triad arrays: a = b + s*c over n doubles each. */
struct triad {
    double *a, *b, *c;
    size_t n;
    int threads;
};

static int triad_init(struct triad *t, size_t n, int threads)
{
    t->a = malloc(sizeof *t->a * n);
    t->b = malloc(sizeof *t->b * n);
    t->c = malloc(sizeof *t->c * n);
    t->n = n;
    t->threads = threads;
    if (!t->a || !t->b || !t->c)
        return TIDE_E_NOMEM;
    const long long ln = (long long)n;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long long i = 0; i < ln; i++) { /* first touch by the threads that use it */
        t->a[i] = 1.0;
        t->b[i] = 2.0;
        t->c[i] = 0.5;
    }
    return TIDE_OK;
}

static void triad_free(struct triad *t)
{
    free(t->a);
    free(t->b);
    free(t->c);
}

/* Best of 5 passes in GB/s, with STREAM's byte count (3 x 8 bytes per element). */
static double triad_run(struct triad *t)
{
    const long long ln = (long long)t->n;
    double *a = t->a;
    const double *b = t->b, *c = t->c;
    double best = 1e30;
    for (int it = 0; it < 6; it++) {
        double t0 = now_s();
#pragma omp parallel for num_threads(t->threads) schedule(static)
        for (long long i = 0; i < ln; i++)
            a[i] = b[i] + 3.0 * c[i];
        double dt = now_s() - t0;
        best = dt < best && it > 0 ? dt : best;
    }
    return 3.0 * sizeof(double) * (double)t->n / best / 1e9;
}

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

/* Expert e's three matrices inside the raw weights. */
static void expert_views(const uint16_t *raw, int e, int64_t H, int64_t I, struct tide_view v[3])
{
    const size_t mat = (size_t)(H * I);
    for (int j = 0; j < 3; j++) {
        struct tide_view x = {.data = raw + ((size_t)e * 3 + (size_t)j) * mat,
                              .dtype = TIDE_DTYPE_BF16,
                              .ndim = 2,
                              .shape = {j < 2 ? I : H, j < 2 ? H : I},
                              .nbytes = mat * 2};
        v[j] = x;
    }
}

/* Median microseconds per expert call at n tokens, over cycles through all experts. */
static double time_tokens(struct bench_run *r, int n, double seconds)
{
    int32_t rows[256];
    for (int i = 0; i < n; i++)
        rows[i] = i;
    double samples[4096];
    int ns = 0;
    double t_end = 0.0;
    for (int cycle = -1; ns < 4096; cycle++) {
        double t0 = now_s();
        for (int e = 0; e < r->n_experts; e++)
            if (r->ops->expert_ffn(r->bk, r->experts[e], &r->x, rows, rows, n, &r->out))
                return -1.0;
        r->ops->sync(r->bk);
        double t1 = now_s();
        if (cycle < 0) { /* warm-up: primitives, scratch, the previous layout's cache */
            t_end = t1 + seconds;
            continue;
        }
        samples[ns++] = 1e6 * (t1 - t0) / r->n_experts;
        if (t1 > t_end && ns >= 3)
            break;
    }
    return median(samples, ns);
}

/* Milliseconds per slot_load (a promotion), cycling over the experts; -1 when
 * the backend has no slots. */
static double slot_load_ms(struct bench_run *r, const uint16_t *raw, int64_t H, int64_t I)
{
    struct tide_expert *slot = NULL;
    if (!TIDE_OPS_HAS(r->ops, slot_create) || !TIDE_OPS_HAS(r->ops, slot_load) ||
        !TIDE_OPS_HAS(r->ops, copy_sync) || r->ops->slot_create(r->bk, H, I, &slot))
        return -1.0;
    const int loads = r->n_experts < 32 ? r->n_experts : 32;
    double t0 = 0.0;
    int rc = TIDE_OK;
    for (int i = -1; i < loads && !rc; i++) { /* i = -1: first touch of the slot */
        if (i == 0)
            t0 = now_s();
        struct tide_view v[3];
        expert_views(raw, i < 0 ? 0 : i, H, I, v);
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
                    const struct bench_cfg *bc, const char *layout, const uint16_t *raw,
                    int n_experts)
{
    const char *sec = p->desc->name;
    char threads[32];
    snprintf(threads, sizeof threads, "%d", bc->threads);
    if ((has_option(p->desc, "threads") &&
         tide_config_set_value(cfg, sec, "threads", threads, "bench")) ||
        (layout && tide_config_set_value(cfg, sec, "expert_layout", layout, "bench")))
        return TIDE_E_CONFIG;
    snprintf(r->layout, sizeof r->layout, "%s", layout ? layout : "default");
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
        struct tide_view v[3];
        expert_views(raw, e, H, I, v);
        rc = r->ops->expert_create(r->bk, &v[0], &v[1], &v[2], &r->experts[e]);
    }
    r->create_ms = 1e3 * (now_s() - t0) / n_experts;
    if (rc)
        return rc;
    r->slot_ms = slot_load_ms(r, raw, H, I);
    if ((rc = r->ops->buffer_alloc(r->bk, (size_t)(256 * H) * 2, &r->xb)) ||
        (rc = r->ops->buffer_alloc(r->bk, (size_t)(256 * H) * 4, &r->ob)))
        return rc;
    r->x = tide_tensor_2d(r->xb, TIDE_DTYPE_BF16, 256, H);
    r->out = tide_tensor_2d(r->ob, TIDE_DTYPE_F32, 256, H);
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
            "[--seconds S] [--reps R] [--tokens 1,4,8,32,64]\n",
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
        else if (!strcmp(argv[i], "--seconds"))
            bc->seconds = atof(v);
        else if (!strcmp(argv[i], "--reps"))
            bc->reps = atoi(v);
        else if (strcmp(argv[i], "--tokens") || parse_tokens(v, bc))
            return 1;
    }
    return bc->threads < 0 || bc->mib < 1 || bc->hidden < 1 || bc->inter < 1 ||
           !(bc->seconds > 0) || bc->reps < 1 || bc->reps > BENCH_MAX_REPS;
}

/* The interleaved sweeps and the table. */
static int bench(struct bench_run *runs, int n_runs, const struct bench_cfg *bc, struct triad *tr)
{
    const double mat = (double)bc->hidden * bc->inter, bytes = 3.0 * mat * 2.0;
    double triad[BENCH_MAX_TOKENS][BENCH_MAX_REPS];
    for (int rep = 0; rep < bc->reps; rep++)
        for (int i = 0; i < bc->n_tokens; i++) {
            triad[i][rep] = triad_run(tr);
            for (int l = 0; l < n_runs; l++) {
                double us = time_tokens(&runs[l], bc->tokens[i], bc->seconds);
                if (us < 0)
                    return TIDE_E_DEVICE;
                runs[l].us[i][rep] = us;
                runs[l].ratio[i][rep] = bytes / (1e-6 * us) / 1e9 / triad[i][rep];
            }
        }
    printf("%6s  %-8s %10s %11s %8s %10s %10s\n", "tokens", "layout", "us/expert", "weight GB/s",
           "/triad", "GFLOP/s", "triad GB/s");
    for (int i = 0; i < bc->n_tokens; i++) {
        double tri = median(triad[i], bc->reps);
        for (int l = 0; l < n_runs; l++) {
            double us = median(runs[l].us[i], bc->reps), t = 1e-6 * us;
            printf("%6d  %-8s %10.1f %11.1f %8.2f %10.1f %10.1f\n", bc->tokens[i], runs[l].layout,
                   us, bytes / t / 1e9, median(runs[l].ratio[i], bc->reps),
                   2.0 * bc->tokens[i] * 3.0 * mat / t / 1e9, tri);
        }
    }
    return TIDE_OK;
}

int main(int argc, char **argv)
{
    struct bench_cfg bc = {"backend-cpu-onednn", 0, 384, 2048, 512, 0.5, 3, {1, 4, 8, 32, 64}, 5};
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
    uint16_t *raw = malloc(expert_bytes * (size_t)n_experts);
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
    char *save = NULL, *c = strtok_r(choices, "|", &save);
    if (!c && !rc)
        rc = run_open(&runs[n_runs++], p, cfg, &bc, NULL, raw, n_experts);
    for (; c && !rc && n_runs < BENCH_MAX_LAYOUTS; c = strtok_r(NULL, "|", &save))
        if (strcmp(c, "auto"))
            rc = run_open(&runs[n_runs++], p, cfg, &bc, c, raw, n_experts);
    struct triad tr = {0};
    if (!rc)
        rc = triad_init(&tr, (size_t)32 << 20, threads); /* 3 x 256 MiB */
    if (!rc) {
        printf("# expert FFN H=%d I=%d bf16, %d experts x %.2f MiB = %.0f MiB cycled, %d "
               "threads, %d sweeps\n",
               bc.hidden, bc.inter, n_experts, expert_bytes / 1048576.0,
               n_experts * expert_bytes / 1048576.0, threads, bc.reps);
        for (int l = 0; l < n_runs; l++)
            printf("# %s: %s; expert_create %.2f ms, slot_load %.2f ms per expert\n",
                   runs[l].layout, runs[l].ops->describe(runs[l].bk), runs[l].create_ms,
                   runs[l].slot_ms);
        printf("# packed keeps a second host copy of every expert (+%.2f MiB each); inplace "
               "none\n",
               expert_bytes / 1048576.0);
        printf("# STREAM triad: 3 x 256 MiB, %d threads, measured before each token count\n",
               threads);
        rc = bench(runs, n_runs, &bc, &tr);
    }
    triad_free(&tr);
    if (rc)
        fprintf(stderr, "bench-expert-ffn: failed: %s\n", tide_status_str(rc));
    for (int l = 0; l < n_runs; l++)
        run_close(&runs[l]);
    tide_config_destroy(cfg);
    free(raw);
    tide_plugins_free(set);
    return rc ? 1 : 0;
}
