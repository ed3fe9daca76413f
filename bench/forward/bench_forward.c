/* bench-forward: milliseconds per forward of a denoising step on a real-sized
 * checkpoint, by phase (attention, dense ffn, shared expert, routed experts,
 * output layer, other, and the probabilities the decoder computes), each
 * against its roofline: bytes read / STREAM triad and FLOPs / peak, both
 * measured in the same run on the same threads.
 *
 * A step is decoded as the generator does: the prompt's blocks are prefilled
 * into the KV cache, then the next block starts all masks and each step runs
 * the model on the block, turns the logits of the masked rows into a greedy
 * pick and its probability, and commits the most confident row (one per
 * step, as a 32-step schedule does on an undertrained model), so the masked
 * rows go block, block-1, ..., 1. The block is decoded --repeats times after
 * one untimed pass (first touch of the weights, oneDNN primitives).
 *
 *   --rows masked  logits only for the masked rows (model slot forward_rows)
 *   --rows all     logits for every row of the block (forward), the plain path
 *   --probs plain  probabilities as the generator computed them before (libm
 *                  exp in double per element) instead of dc_greedy_pick
 * A model plugin without forward_rows or profile (an older build, for a
 * before/after comparison) runs with --rows all and prints totals only.
 *
 * Usage: bench-forward --model DIR [--threads N] [--prompt N] [--block N]
 *                      [--repeats N] [--rows masked|all] [--probs fast|plain]
 *                      [--set section.key=value ...]
 * Plugins come from $TIDE_PLUGIN_DIR when set, else as `tide` finds them. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/roofline.h"
#include "config.h"
#include "core_options.h"
#include "engine.h"
#include "loader.h"
#include "loop.h"
#include "decoder-common/sample.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define BF_MAX_SETS   32
#define BF_MAX_PHASES 16

struct bf_cfg {
    const char *model;
    int threads;
    int prompt, block, repeats;
    bool all_rows, plain_probs;
    const char *sets[BF_MAX_SETS];
    int n_sets;
};

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s --model DIR [--threads N] [--prompt N] [--block N] [--repeats N]\n"
            "          [--rows masked|all] [--probs fast|plain] [--set section.key=value ...]\n",
            argv0);
    return 2;
}

static int parse_args(int argc, char **argv, struct bf_cfg *c)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return 1;
        if (!strcmp(a, "--model"))
            c->model = v;
        else if (!strcmp(a, "--threads"))
            c->threads = atoi(v);
        else if (!strcmp(a, "--prompt"))
            c->prompt = atoi(v);
        else if (!strcmp(a, "--block"))
            c->block = atoi(v);
        else if (!strcmp(a, "--repeats"))
            c->repeats = atoi(v);
        else if (!strcmp(a, "--rows") && (!strcmp(v, "masked") || !strcmp(v, "all")))
            c->all_rows = !strcmp(v, "all");
        else if (!strcmp(a, "--probs") && (!strcmp(v, "fast") || !strcmp(v, "plain")))
            c->plain_probs = !strcmp(v, "plain");
        else if (!strcmp(a, "--set") && c->n_sets < BF_MAX_SETS)
            c->sets[c->n_sets++] = v;
        else
            return 1;
    }
    return !c->model || c->threads < 0 || c->prompt < 1 || c->block < 1 || c->block > 4096 ||
           c->repeats < 1;
}

/* The generator's probabilities before dc_greedy_pick: argmax, then a sum
 * of exp in double over the row. */
static void plain_pick(const float *l, int V, int32_t *id, double *prob)
{
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > l[best])
            best = v;
    double sum = 0;
    for (int v = 0; v < V; v++)
        sum += exp((double)l[v] - (double)l[best]);
    *id = best;
    *prob = 1.0 / sum;
}

/* The decoders' greedy pick over unfiltered logits (temperature 0). */
static const struct dc_sampler bf_greedy = {.greedy = true, .plain = true, .skip = -1};

/* One phase's work in one forward; phase BF_MAX_PHASES - 1 holds the
 * probabilities. */
struct bf_work {
    double bytes, flops, flops_f32;
};

struct bf_run {
    struct tide_engine *e;
    const struct tide_model_ops *mo;
    int V, L;
    int64_t b0;      /* first position of the decoded block */
    int32_t *canvas; /* [b0 + L] */
    int32_t mask;
    float *logits; /* [L, V] */
    int32_t *rows;
    /* The decoders' picks (dc_sample_rows, greedy): their rows and results. */
    struct dc_rows picks;
    /* The engine's hooks, as its loop uses them: a forward and the picks
     * after it are one round, the picks run on the backend's threads. */
    struct tide_loop_env env;
    const float **prow;
    double fwd_s, prob_s;     /* summed over timed steps */
    double fwd_cpu, prob_cpu; /* CPU seconds of the forwards (all threads), probabilities */
    int64_t forwards, rows_out;
    /* Each timed forward's work by phase (the profile's counts after it
     * minus before it), for a roofline drawn per forward: [cap][BF_MAX_PHASES]. */
    bool prof;
    struct bf_work *work;
    int64_t cap;
    int n_ph;
    struct tide_phase_stats last[BF_MAX_PHASES];
};

/* Store the work of the forward just run (and of its n rows' probabilities). */
static int bf_record(struct bf_run *r, int n)
{
    if (r->forwards == r->cap) {
        int64_t cap = r->cap ? 2 * r->cap : 128;
        struct bf_work *w = realloc(r->work, sizeof *w * BF_MAX_PHASES * (size_t)cap);
        if (!w)
            return TIDE_E_NOMEM;
        r->work = w;
        r->cap = cap;
    }
    struct tide_phase_stats now[BF_MAX_PHASES];
    int n_ph = 0;
    int rc = r->mo->profile_read(r->e->model, now, BF_MAX_PHASES - 1, &n_ph);
    if (rc)
        return rc;
    r->n_ph = n_ph < BF_MAX_PHASES - 1 ? n_ph : BF_MAX_PHASES - 1;
    struct bf_work *w = r->work + (size_t)r->forwards * BF_MAX_PHASES;
    for (int i = 0; i < r->n_ph; i++) {
        w[i].bytes = (double)(now[i].bytes - r->last[i].bytes);
        w[i].flops = (double)(now[i].flops - r->last[i].flops);
        w[i].flops_f32 = (double)(now[i].flops_f32 - r->last[i].flops_f32);
        r->last[i] = now[i];
    }
    w[BF_MAX_PHASES - 1] = (struct bf_work){(double)n * r->V * 4.0, 0, 0};
    return TIDE_OK;
}

/* Decode one block from all masks; timed when `timed`. */
static int bf_block(struct bf_run *r, const struct bf_cfg *c, bool timed, bool use_rows)
{
    const int L = r->L, V = r->V;
    for (int i = 0; i < L; i++)
        r->canvas[r->b0 + i] = r->mask;
    for (int s = 0; s < L; s++) {
        int n = 0;
        for (int i = 0; i < L; i++)
            if (r->canvas[r->b0 + i] == r->mask)
                r->rows[n++] = i;
        if (r->env.round_begin)
            r->env.round_begin(r->env.user);
        double t0 = roof_now(), c0 = roof_cpu_now();
        int rc = tide_model_forward1(r->mo, r->e->model, r->canvas + r->b0, L, r->b0,
                                     use_rows ? r->rows : NULL, use_rows ? n : L, r->logits);
        if (rc) {
            if (r->env.round_end)
                r->env.round_end(r->env.user);
            return rc;
        }
        double t1 = roof_now(), c1 = roof_cpu_now();
        int best_row = -1;
        int32_t best_id = 0;
        double best_p = -1;
        for (int j = 0; j < n; j++)
            r->prow[j] = r->logits + (size_t)(use_rows ? j : r->rows[j]) * (size_t)V;
        if (!c->plain_probs)
            dc_sample_rows(&r->picks, &bf_greedy, r->prow, n, V, NULL);
        for (int j = 0; j < n; j++) {
            int32_t id = c->plain_probs ? 0 : r->picks.id[j];
            double p = c->plain_probs ? 0.0 : r->picks.conf[j];
            if (c->plain_probs)
                plain_pick(r->prow[j], V, &id, &p);
            if (p > best_p) {
                best_p = p;
                best_id = id;
                best_row = r->rows[j];
            }
        }
        double t2 = roof_now(), c2 = roof_cpu_now();
        if (r->env.round_end)
            r->env.round_end(r->env.user);
        r->canvas[r->b0 + best_row] = best_id;
        if (timed && r->prof && (rc = bf_record(r, n)))
            return rc;
        if (timed) {
            r->fwd_s += t1 - t0;
            r->fwd_cpu += c1 - c0;
            r->prob_cpu += c2 - c1;
            r->prob_s += t2 - t1;
            r->forwards++;
            r->rows_out += n;
        }
    }
    return TIDE_OK;
}

static int bf_setup(const struct bf_cfg *c, struct tide_plugin_set **set, struct tide_config **cfg)
{
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    int rc = dir ? tide_plugins_scan_dirs(&dir, 1, set) : tide_plugins_scan(set);
    if (rc)
        return rc;
    if (!(*cfg = tide_config_create()))
        return TIDE_E_NOMEM;
    char path[4200], threads[64], block[64];
    snprintf(path, sizeof path, "model.path=%s", c->model);
    snprintf(threads, sizeof threads, "backend-cpu-onednn.threads=%d", c->threads);
    snprintf(block, sizeof block, "generation.block_length=%d", c->block);
    const char *mine[] = {path, "backend.device=backend-cpu-onednn", threads, block,
                          "output.progress=false"};
    if ((rc = tide_core_register_sections(*cfg)) || (rc = tide_config_add_plugins(*cfg, *set)))
        return rc;
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
        if ((rc = tide_config_set(*cfg, mine[i])))
            return rc;
    for (int i = 0; i < c->n_sets; i++)
        if ((rc = tide_config_set(*cfg, c->sets[i])))
            return rc;
    return TIDE_OK;
}

/* The limits a roofline is drawn with: STREAM triad GB/s and peak GFLOP/s,
 * measured in wall time, and per CPU-second x threads. */
struct bf_limits {
    double triad, bf16, f32;
    double triad_cpu, bf16_cpu, f32_cpu;
};

/* Roofline seconds of a phase: the memory or the arithmetic bound. */
static double bf_roof(double bytes, double flops, double flops_f32, double triad, double bf16,
                      double f32, bool *mem)
{
    double tm = bytes / (triad * 1e9);
    double tc = (bf16 > 0 ? flops / (bf16 * 1e9) : 0) + (f32 > 0 ? flops_f32 / (f32 * 1e9) : 0);
    *mem = tm >= tc;
    return tm > tc ? tm : tc;
}

/* A phase's roofline per forward, averaged: the sum over the timed forwards
 * of each forward's max(bytes / triad, FLOPs / peak) (a forward's phases run
 * one after the other, and the output layer's row count changes from step to
 * step, so a forward of few rows is memory bound and one of many compute
 * bound), divided by the forwards. *n_mem counts the memory-bound forwards. */
static double bf_roof_fwd(const struct bf_run *r, int ph, double triad, double bf16, double f32,
                          int64_t *n_mem)
{
    double s = 0;
    *n_mem = 0;
    for (int64_t f = 0; f < r->forwards; f++) {
        const struct bf_work *w = r->work + (size_t)f * BF_MAX_PHASES + ph;
        bool mem;
        s += bf_roof(w->bytes, w->flops, w->flops_f32, triad, bf16, f32, &mem);
        *n_mem += mem && (w->bytes > 0 || w->flops > 0 || w->flops_f32 > 0);
    }
    return 1e3 * s / (double)r->forwards;
}

/* One line of the table: wall time and its roofline, CPU time and its.
 * sums[0] and sums[1] add the two rooflines per forward, sums[2] the
 * aggregate one (the forwards' bytes and FLOPs summed first). */
/* The kernel-table entries (backend-cpu-onednn's "kernels: key=name ..."
 * in desc) that compute a phase, as "key=name ..." in out; "-" when the
 * backend names none. The probabilities are the decoder's, on the host. */
static const char *bf_kernels(const char *desc, const char *phase, char *out, size_t len)
{
    static const struct {
        const char *phase, *keys;
    } map[] = {
        {"attention", "matmul attn rmsnorm"},
        {"dense ffn", "matmul silu"},
        {"shared expert", "matmul silu"},
        {"routed experts", "expert batch q8_0 q4_0 fp8 silu"},
        {"output layer", "matmul"},
        {"other", "rmsnorm"},
        {"probabilities", ""},
    };
    const char *table = desc ? strstr(desc, "kernels: ") : NULL;
    snprintf(out, len, "%s", !strcmp(phase, "probabilities") ? "decoder (host)" : "-");
    if (!table)
        return out;
    size_t at = 0;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (strcmp(map[i].phase, phase))
            continue;
        char keys[64];
        snprintf(keys, sizeof keys, "%s", map[i].keys);
        for (char *save = NULL, *k = strtok_r(keys, " ", &save); k;
             k = strtok_r(NULL, " ", &save)) {
            char pat[24];
            snprintf(pat, sizeof pat, " %s=", k);
            const char *e = strstr(table + 8, pat);
            if (!e)
                continue;
            e++;
            const size_t n = strcspn(e, " ;,");
            const int w = snprintf(out + at, len - at, "%s%.*s", at ? " " : "", (int)n, e);
            at += w > 0 && (size_t)w < len - at ? (size_t)w : 0;
        }
    }
    return out;
}

static void bf_line(const struct bf_run *r, int ph, const char *name, double ms, double cpu_ms,
                    double gb, double gf, double gf32, const struct bf_limits *lim, double sums[3])
{
    bool mem;
    int64_t n_mem, n_mem_c;
    const double roof = bf_roof_fwd(r, ph, lim->triad, lim->bf16, lim->f32, &n_mem);
    const double roof_c = bf_roof_fwd(r, ph, lim->triad_cpu, lim->bf16_cpu, lim->f32_cpu, &n_mem_c);
    sums[0] += roof;
    sums[1] += roof_c;
    sums[2] += 1e3 * bf_roof(gb * 1e9, gf * 1e9, gf32 * 1e9, lim->triad, lim->bf16, lim->f32, &mem);
    if (roof <= 0) {
        printf("%-16s %8.2f %8s %9s %8s %8s %8s | %8.2f %8s %8s\n", name, ms, "-", "-", "-", "-",
               "-", cpu_ms, "-", "-");
        return;
    }
    const char *bound = n_mem == r->forwards ? "memory" : n_mem ? "mixed" : "compute";
    const char *desc = r->e->dev.ops->describe ? r->e->dev.ops->describe(r->e->dev.bk) : NULL;
    char kern[160];
    printf("%-16s %8.2f %8.3f %9.2f %8.2f %8s %8.2f | %8.2f %8.2f %8.2f | %s\n", name, ms, gb,
           gf + gf32, roof, bound, roof / ms, cpu_ms, roof_c, roof_c / cpu_ms,
           bf_kernels(desc, name, kern, sizeof kern));
}

static void bf_report(const struct bf_run *r, const struct tide_phase_stats *ph, int n_ph,
                      const struct bf_limits *lim, int threads)
{
    const double nf = (double)r->forwards;
    double sum_s = 0, sums[3] = {0}, bytes = 0, flops = 0;
    printf("\n%-16s %8s %8s %9s %8s %8s %8s | %8s %8s %8s | %s\n", "phase", "ms/fwd", "GB/fwd",
           "GFLOP/fwd", "roof ms", "bound", "achieved", "cpu ms", "roof ms", "achieved",
           "kernels (the backend's table)");
    for (int i = 0; i < n_ph && i < r->n_ph; i++) {
        const double gb = (double)ph[i].bytes / nf / 1e9, gf = (double)ph[i].flops / nf / 1e9;
        const double gf32 = (double)ph[i].flops_f32 / nf / 1e9;
        sum_s += ph[i].seconds;
        bytes += gb;
        flops += gf + gf32;
        bf_line(r, i, ph[i].name, 1e3 * ph[i].seconds / nf, 1e3 * ph[i].cpu_seconds / threads / nf,
                gb, gf, gf32, lim, sums);
    }
    /* Probabilities: the logits of the masked rows are read once (memory
     * bound); one thread, so its CPU time is not divided. */
    const double prob_ms = 1e3 * r->prob_s / nf, prob_cpu = 1e3 * r->prob_cpu / nf;
    const double prob_gb = (double)r->rows_out * r->V * 4.0 / nf / 1e9;
    bf_line(r, BF_MAX_PHASES - 1, "probabilities", prob_ms, prob_cpu, prob_gb, 0, 0, lim, sums);
    bytes += prob_gb;
    const double step_ms = 1e3 * r->fwd_s / nf + prob_ms;
    const double step_cpu = 1e3 * r->fwd_cpu / threads / nf + prob_cpu;
    printf("%-16s %8.2f %8.3f %9.2f %8.2f %8s %8.2f | %8.2f %8.2f %8.2f\n", "whole step", step_ms,
           bytes, flops, sums[0], "", sums[0] / step_ms, step_cpu, sums[1], sums[1] / step_cpu);
    printf("# phases sum to %.2f ms of the %.2f ms forward; the right-hand columns use CPU time "
           "(/ threads) and limits per CPU-second\n",
           1e3 * sum_s / nf, 1e3 * r->fwd_s / nf);
    printf("# roof ms: each forward's max(bytes / triad, FLOPs / peak) per phase, averaged "
           "(mixed: memory bound in some forwards, compute bound in others); drawn from the "
           "per-forward averages instead, the looser bound, the whole step's roofline is "
           "%.2f ms and it achieves %.2f of it\n",
           sums[2], sums[2] / step_ms);
}

int main(int argc, char **argv)
{
    roof_openmp_env(argv); /* the OpenMP defaults `tide` runs with */
    struct bf_cfg c = {.threads = 2, .prompt = 64, .block = 32, .repeats = 3};
    if (parse_args(argc, argv, &c))
        return usage(argv[0]);
    const int threads = c.threads ? c.threads : omp_get_num_procs();
    struct tide_plugin_set *set = NULL;
    struct tide_config *cfg = NULL;
    struct bf_run r = {.L = c.block};
    struct roof_triad tr = {0};
    int rc = bf_setup(&c, &set, &cfg);
    if (!rc && roof_triad_init(&tr, (size_t)32 << 20, threads)) /* 3 x 256 MiB */
        rc = TIDE_E_NOMEM;
    if (!rc && !(rc = tide_engine_prepare(cfg, set, &r.e)))
        rc = tide_engine_load(r.e, set);
    if (rc)
        goto done;
    r.mo = r.e->mops;
    const struct tide_model_info *info = r.mo->info(r.e->model);
    r.V = info->vocab_size;
    r.mask = r.e->ids.mask;
    const int64_t first = c.prompt / c.block, n_ctx = (first + 1) * (int64_t)c.block;
    r.b0 = first * c.block;
    const bool use_rows = !c.all_rows;
    const bool prof = TIDE_OPS_HAS(r.mo, profile) && TIDE_OPS_HAS(r.mo, profile_read);
    r.canvas = malloc(sizeof *r.canvas * (size_t)n_ctx);
    r.logits = malloc(sizeof *r.logits * (size_t)c.block * (size_t)r.V);
    r.rows = malloc(sizeof *r.rows * (size_t)c.block);
    r.prow = malloc(sizeof *r.prow * (size_t)c.block);
    if (!r.canvas || !r.logits || !r.rows || !r.prow ||
        dc_rows_init(&r.picks, &bf_greedy, r.V, c.block)) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    tide_engine_loop_env(r.e, NULL, &r.env);
    r.picks.par = r.env.parallel;
    r.picks.par_user = r.env.user;
    /* The prompt: fixed ids spread over the vocabulary; the partial tail
     * block (if any) is part of the decoded block, as in the generator. */
    for (int64_t i = 0; i < r.b0; i++)
        r.canvas[i] = (int32_t)(100 + (i * 7919) % (r.V - 200));
    if ((rc = r.mo->reserve_slots(r.e->model, 1, n_ctx, c.block)))
        goto done;
    for (int64_t b = 0; b < first && !rc; b++)
        rc = tide_model_forward1(r.mo, r.e->model, r.canvas + b * c.block, c.block, b * c.block,
                                 NULL, 0, NULL);
    if (!rc)
        rc = bf_block(&r, &c, false, use_rows); /* warm-up */
    struct bf_limits lim;
    double triad0_cpu, triad1_cpu;
    const double triad0 = roof_triad_run2(&tr, &triad0_cpu);
    lim.bf16 = roof_peak2(threads, true, &lim.bf16_cpu);
    lim.f32 = roof_peak2(threads, false, &lim.f32_cpu);
    if (!rc && prof)
        rc = r.mo->profile(r.e->model, true);
    r.prof = prof;
    for (int rep = 0; rep < c.repeats && !rc; rep++)
        rc = bf_block(&r, &c, true, use_rows);
    if (rc)
        goto done;
    const double triad1 = roof_triad_run2(&tr, &triad1_cpu);
    lim.triad = (triad0 + triad1) / 2;
    lim.triad_cpu = (triad0_cpu + triad1_cpu) / 2;
    printf("# bench-forward: %s: %d layers (%d MoE x %d experts, top-%d), vocab %d\n", c.model,
           info->n_layers, info->n_moe_layers, info->n_experts, info->top_k, r.V);
    char cpu[256];
    roof_cpu_name(cpu, sizeof cpu);
    printf("# CPU: %s; peak measured as %s\n", cpu, roof_peak_kind(true));
    printf("# %s\n", r.e->dev.ops->describe ? r.e->dev.ops->describe(r.e->dev.bk) : "");
    printf("# OpenMP: GOMP_SPINCOUNT=%s, OMP_WAIT_POLICY=%s (tide's default when neither is set: "
           "300000 where nothing else ran at start, else 1000)\n",
           getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "(unset)",
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)");
    roof_print_file_pages(".safetensors");
    printf("# prompt %d, block %d, %d timed blocks = %lld forwards, %.1f masked rows per "
           "forward; logits for %s rows; probabilities %s\n",
           c.prompt, c.block, c.repeats, (long long)r.forwards,
           (double)r.rows_out / (double)r.forwards, use_rows ? "the masked" : "all",
           c.plain_probs ? "plain (libm exp, double)"
           : r.env.parallel
               ? "dc_sample_rows (greedy: dc_greedy_pick per row, rows over the backend's "
                 "threads, as the engine runs them; a forward and its picks are one round)"
               : "dc_sample_rows (greedy: dc_greedy_pick per row, rows over OpenMP threads)");
    printf("# same run, %d threads: STREAM triad %.1f GB/s (%.1f before, %.1f after); peak bf16 "
           "%.0f GFLOP/s, f32 %.0f GFLOP/s\n",
           threads, lim.triad, triad0, triad1, lim.bf16, lim.f32);
    roof_print_peak("bf16", true, lim.bf16, threads);
    roof_print_peak("f32", false, lim.f32, threads);
    printf("# per CPU-second x threads: triad %.1f GB/s, peak bf16 %.0f GFLOP/s, f32 %.0f "
           "GFLOP/s\n",
           lim.triad_cpu, lim.bf16_cpu, lim.f32_cpu);
    printf("# ms per forward: %.2f (probabilities %.2f more)\n", 1e3 * r.fwd_s / r.forwards,
           1e3 * r.prob_s / r.forwards);
    printf("# CPU ms per forward / threads: %.2f (time on a core, not waiting for one: on a "
           "machine shared with other jobs, an estimate of the idle machine's ms per forward, "
           "low by the time threads sit idle in serial parts)\n",
           1e3 * r.fwd_cpu / threads / r.forwards);
    if (prof) {
        struct tide_phase_stats ph[BF_MAX_PHASES];
        int n = 0;
        if (!(rc = r.mo->profile_read(r.e->model, ph, BF_MAX_PHASES, &n))) {
            bf_report(&r, ph, n < BF_MAX_PHASES ? n : BF_MAX_PHASES, &lim, threads);
            for (int i = 0; i < n && i < BF_MAX_PHASES; i++)
                if (!strcmp(ph[i].name, "routed experts") && ph[i].calls && info->expert_bytes)
                    printf("# routed experts: %.1f distinct experts per MoE layer and forward\n",
                           (double)ph[i].bytes / (double)ph[i].calls / (double)info->expert_bytes);
        }
        r.mo->profile(r.e->model, false);
    } else {
        printf("# (the model plugin has no profile slot: totals only)\n");
    }
done:
    if (rc)
        fprintf(stderr, "bench-forward: failed: %s\n", tide_status_str(rc));
    roof_triad_free(&tr);
    free(r.canvas);
    free(r.logits);
    free(r.rows);
    free(r.prow);
    dc_rows_free(&r.picks);
    free(r.work);
    tide_engine_close(r.e);
    tide_config_destroy(cfg);
    tide_plugins_free(set);
    return rc ? 1 : 0;
}
