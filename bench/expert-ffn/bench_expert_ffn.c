/* bench-expert-ffn: one routed expert FFN (gate, up: [I,H], down: [H,I], bf16)
 * on a backend, at 1..64 tokens, with weights streamed from DRAM: the calls
 * cycle over enough distinct experts that none is in cache when it runs.
 * Prints time per expert, weight bandwidth, its ratio to a STREAM triad
 * measured in the same run with the same thread count, and GFLOP/s, for each
 * expert layout the backend offers (`expert_layout`).
 *
 * Usage: bench-expert-ffn [--backend NAME] [--threads N] [--mib MiB] [--hidden H]
 *                         [--inter I] [--seconds S]
 * Plugins are found as by `tide` (next to the binary, TIDE_PLUGIN_PATH). */
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

struct bench_cfg {
    const char *backend;
    int threads; /* 0 = all cores */
    int mib;     /* weights per layout */
    int hidden, inter;
    double seconds; /* timed seconds per (layout, tokens) point */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* STREAM triad a = b + s*c over three arrays of n doubles; best of 8 passes, GB/s
 * with STREAM's byte count (3 * 8 bytes per element, no write-allocate). */
static double stream_triad(int threads, size_t n)
{
    double *a = malloc(sizeof *a * n), *b = malloc(sizeof *b * n), *c = malloc(sizeof *c * n);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return 0.0;
    }
    const long long ln = (long long)n;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long long i = 0; i < ln; i++) {
        a[i] = 1.0;
        b[i] = 2.0;
        c[i] = 0.5;
    }
    double best = 1e30;
    for (int it = 0; it < 8; it++) {
        double t0 = now_s();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long long i = 0; i < ln; i++)
            a[i] = b[i] + 3.0 * c[i];
        double t = now_s() - t0;
        best = t < best && it > 0 ? t : best;
    }
    volatile double sink = a[n / 2];
    (void)sink;
    free(a);
    free(b);
    free(c);
    return 3.0 * sizeof(double) * (double)n / best / 1e9;
}

/* Random bf16 values in about [-0.05, 0.05]: plausible weights, no denormals. */
static void fill_bf16(uint16_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
#pragma omp parallel for firstprivate(s) schedule(static)
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

struct bench_run {
    const struct tide_backend_ops *ops;
    struct tide_backend *bk;
    struct tide_expert **experts;
    int n_experts;
    struct tide_tensor x, out;
};

/* Median seconds per expert call at n tokens, over cycles through all experts. */
static double time_tokens(struct bench_run *r, int n, double seconds)
{
    int32_t rows[256], dst[256];
    for (int i = 0; i < n; i++)
        rows[i] = dst[i] = i;
    double samples[4096];
    int ns = 0;
    double t_end = 0.0;
    for (int cycle = -1; ns < 4096; cycle++) {
        double t0 = now_s();
        for (int e = 0; e < r->n_experts; e++)
            if (r->ops->expert_ffn(r->bk, r->experts[e], &r->x, rows, dst, n, &r->out))
                return -1.0;
        r->ops->sync(r->bk);
        double t1 = now_s();
        if (cycle < 0) { /* warm-up: primitives, scratch, page tables */
            t_end = t1 + seconds;
            continue;
        }
        samples[ns++] = (t1 - t0) / r->n_experts;
        if (t1 > t_end && ns >= 3)
            break;
    }
    qsort(samples, (size_t)ns, sizeof *samples, cmp_double);
    return samples[ns / 2];
}

/* One backend instance with `layout`, its experts over the raw weights, and the table rows. */
static int bench_layout(const struct tide_plugin *p, struct tide_config *cfg,
                        const struct bench_cfg *bc, const char *layout, uint16_t *raw,
                        int n_experts, double triad)
{
    const char *sec = p->desc->name;
    char threads[32];
    snprintf(threads, sizeof threads, "%d", bc->threads);
    if ((has_option(p->desc, "threads") &&
         tide_config_set_value(cfg, sec, "threads", threads, "bench")) ||
        (layout && tide_config_set_value(cfg, sec, "expert_layout", layout, "bench")))
        return TIDE_E_CONFIG;
    struct bench_run r = {.ops = p->desc->ops, .n_experts = n_experts};
    struct tide_backend_args args = {
        .size = sizeof args, .opts = tide_config_section(cfg, sec), .role = TIDE_ROLE_HOST};
    int rc = r.ops->create(&args, &r.bk);
    if (rc)
        return rc;
    const int64_t H = bc->hidden, I = bc->inter;
    const size_t mat = (size_t)(H * I);
    r.experts = calloc((size_t)n_experts, sizeof *r.experts);
    double t0 = now_s();
    for (int e = 0; e < n_experts && !rc; e++) {
        uint16_t *w = raw + (size_t)e * 3 * mat;
        struct tide_view g = {.data = w, .dtype = TIDE_DTYPE_BF16, .ndim = 2, .shape = {I, H}};
        struct tide_view u = g, d = g;
        u.data = w + mat;
        d.data = w + 2 * mat;
        d.shape[0] = H;
        d.shape[1] = I;
        g.nbytes = u.nbytes = d.nbytes = mat * 2;
        rc = r.ops->expert_create(r.bk, &g, &u, &d, &r.experts[e]);
    }
    double t_create = (now_s() - t0) / n_experts;
    struct tide_buffer *xb = NULL, *ob = NULL;
    if (!rc)
        rc = r.ops->buffer_alloc(r.bk, (size_t)(64 * H) * 2, &xb);
    if (!rc)
        rc = r.ops->buffer_alloc(r.bk, (size_t)(64 * H) * 4, &ob);
    if (!rc) {
        r.x = tide_tensor_2d(xb, TIDE_DTYPE_BF16, 64, H);
        r.out = tide_tensor_2d(ob, TIDE_DTYPE_F32, 64, H);
        uint16_t *xh = malloc(sizeof *xh * (size_t)(64 * H));
        fill_bf16(xh, (size_t)(64 * H), 99);
        rc = r.ops->write(r.bk, &r.x, xh);
        free(xh);
    }
    if (!rc) {
        const char *lname = layout ? layout : "default";
        fprintf(stdout, "# %s: %s; expert_create %.2f ms per expert\n", lname,
                r.ops->describe(r.bk), 1e3 * t_create);
        static const int tokens[] = {1, 4, 8, 32, 64};
        const double bytes = 3.0 * (double)mat * 2.0;
        for (size_t i = 0; i < sizeof tokens / sizeof tokens[0] && !rc; i++) {
            double t = time_tokens(&r, tokens[i], bc->seconds);
            if (t < 0) {
                rc = TIDE_E_DEVICE;
                break;
            }
            double gbs = bytes / t / 1e9;
            fprintf(stdout, "%6d  %-8s %10.1f %10.1f %8.2f %10.1f\n", tokens[i], lname, 1e6 * t,
                    gbs, gbs / triad, 2.0 * tokens[i] * 3.0 * (double)mat / t / 1e9);
            fflush(stdout);
        }
    }
    for (int e = 0; e < n_experts; e++)
        r.ops->expert_destroy(r.bk, r.experts[e]);
    free(r.experts);
    r.ops->buffer_free(r.bk, xb);
    r.ops->buffer_free(r.bk, ob);
    r.ops->destroy(r.bk);
    return rc;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--backend NAME] [--threads N] [--mib MiB] [--hidden H] [--inter I] "
            "[--seconds S]\n",
            argv0);
    return 2;
}

int main(int argc, char **argv)
{
    struct bench_cfg bc = {"backend-cpu-onednn", 0, 384, 2048, 512, 1.0};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage(argv[0]);
        if (!strcmp(argv[i], "--backend"))
            bc.backend = v;
        else if (!strcmp(argv[i], "--threads"))
            bc.threads = atoi(v);
        else if (!strcmp(argv[i], "--mib"))
            bc.mib = atoi(v);
        else if (!strcmp(argv[i], "--hidden"))
            bc.hidden = atoi(v);
        else if (!strcmp(argv[i], "--inter"))
            bc.inter = atoi(v);
        else if (!strcmp(argv[i], "--seconds"))
            bc.seconds = atof(v);
        else
            return usage(argv[0]);
        i++;
    }
    if (bc.threads < 0 || bc.mib < 1 || bc.hidden < 1 || bc.inter < 1 || !(bc.seconds > 0))
        return usage(argv[0]);
    struct tide_plugin_set *set = NULL;
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    int rc = dir ? tide_plugins_scan_dirs(&dir, 1, &set) : tide_plugins_scan(&set);
    if (rc)
        return 1;
    const struct tide_plugin *p =
        tide_plugins_get(set, bc.backend, TIDE_PLUGIN_BACKEND, "--backend");
    if (!p) {
        tide_plugins_free(set);
        return 1;
    }
    const int threads = bc.threads ? bc.threads : omp_get_num_procs();
    const size_t expert_bytes = (size_t)3 * (size_t)bc.hidden * (size_t)bc.inter * 2;
    int n_experts = (int)(((size_t)bc.mib << 20) / expert_bytes);
    n_experts = n_experts < 2 ? 2 : n_experts;
    uint16_t *raw = malloc(expert_bytes * (size_t)n_experts);
    if (!raw) {
        fprintf(stderr, "cannot allocate %d MiB of weights\n", bc.mib);
        tide_plugins_free(set);
        return 1;
    }
    omp_set_num_threads(threads);
    fill_bf16(raw, expert_bytes / 2 * (size_t)n_experts, 1);
    double triad = stream_triad(threads, (size_t)32 << 20); /* 3 x 256 MiB */
    fprintf(stdout,
            "# expert FFN H=%d I=%d bf16, %d experts x %.2f MiB = %.0f MiB cycled, %d threads\n"
            "# STREAM triad (3 x 256 MiB, same threads): %.1f GB/s\n"
            "# packed costs a second host copy of every expert (+%.2f MiB each); inplace none\n",
            bc.hidden, bc.inter, n_experts, expert_bytes / 1048576.0,
            n_experts * expert_bytes / 1048576.0, threads, triad, expert_bytes / 1048576.0);
    fprintf(stdout, "%6s  %-8s %10s %10s %8s %10s\n", "tokens", "layout", "us/expert",
            "weight GB/s", "/triad", "GFLOP/s");
    struct tide_config *cfg = tide_config_create();
    rc = cfg ? tide_config_add_section(cfg, p->desc->name, p->desc->options, p->desc->name,
                                       p->desc->summary)
             : TIDE_E_NOMEM;
    const char *choices = NULL;
    for (const struct tide_option *o = p->desc->options; o && o->name; o++)
        if (!strcmp(o->name, "expert_layout"))
            choices = o->choices;
    if (!rc && choices) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", choices);
        for (char *save = NULL, *c = strtok_r(buf, "|", &save); c && !rc;
             c = strtok_r(NULL, "|", &save))
            rc = bench_layout(p, cfg, &bc, c, raw, n_experts, triad);
    } else if (!rc) {
        rc = bench_layout(p, cfg, &bc, NULL, raw, n_experts, triad);
    }
    if (rc)
        fprintf(stderr, "bench-expert-ffn: failed: %s\n", tide_status_str(rc));
    tide_config_destroy(cfg);
    free(raw);
    tide_plugins_free(set);
    return rc ? 1 : 0;
}
