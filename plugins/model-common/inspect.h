/* model-common: `tide inspect`'s tensor check and memory table, over a
 * model's tensor spec. Header-only. */
#ifndef MODEL_COMMON_INSPECT_H
#define MODEL_COMMON_INSPECT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model-common/spec.h"
#include "tide/log.h"
#include "tide/quant.h"
#include "tide/safetensors.h"
#include "tide/status.h"

/* Human-readable bytes into buf: B, KiB, MiB, GiB or TiB. */
static inline const char *mc_hbytes(uint64_t b, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

static inline void mc_print_shape(FILE *f, int nd, const int64_t *shape)
{
    fputc('[', f);
    for (int d = 0; d < nd; d++)
        fprintf(f, "%s%lld", d ? ", " : "", (long long)shape[d]);
    fputc(']', f);
}

static inline int mc_view_cmp(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t) * (const struct tide_view *const *)a;
    const uintptr_t y = (uintptr_t) * (const struct tide_view *const *)b;
    return (x > y) - (x < y);
}

/* Whether the scale sv of an fp8 dense weight [d0, d1] (name) is what the
 * load takes (mc_load_weight_q): F32 [ceil(d0/br), ceil(d1/bc)] for
 * fp8_block [br, bc]. Prints the mismatch when not. */
static inline bool mc_check_dense_scale(const struct tide_view *sv, const char *sn,
                                        const int fp8_block[2], int64_t d0, int64_t d1, FILE *f)
{
    int64_t ss[2];
    tide_qmat_scale_shape(fp8_block, d0, d1, ss);
    if (sv->dtype == TIDE_DTYPE_F32 && sv->ndim == 2 && sv->shape[0] == ss[0] &&
        sv->shape[1] == ss[1])
        return true;
    fprintf(f, "  mismatch    %s: expected F32 ", sn);
    mc_print_shape(f, 2, ss);
    fprintf(f, " (blocks of [%d, %d] over [%lld, %lld]), found %s ", fp8_block[0], fp8_block[1],
            (long long)d0, (long long)d1, tide_dtype_name(sv->dtype));
    mc_print_shape(f, sv->ndim, sv->shape);
    fputc('\n', f);
    return false;
}

/* Compare the checkpoint with the expected tensor list. fp8_block: the
 * block of config.json's fp8 quantization_config, under which a bf16 weight
 * may be stored as F8_E4M3 with its weight_scale_inv (checked as the load
 * checks it); NULL when the checkpoint is not fp8. Returns the number of
 * problems found. O(n log n): the checkpoint tensors that were expected
 * are collected and sorted, and each checkpoint tensor is looked up there. */
static inline int mc_check_tensors(const void *ctx, int n, mc_spec_fn spec,
                                   const struct tide_st *st, const int *fp8_block, FILE *f)
{
    int problems = 0, missing = 0, n_found = 0, fp8_dense = 0;
    /* room for a scale beside each expected tensor (fp8 dense weights) */
    const struct tide_view **found = malloc(sizeof *found * (size_t)(2 * n + 1));
    if (!found) {
        tide_error("inspect: out of memory listing %d tensors", n);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char name[MC_NAME_MAX];
        enum tide_dtype dt;
        int64_t shape[TIDE_MAX_DIMS];
        int nd = spec(ctx, i, name, &dt, shape);
        const struct tide_view *v = tide_st_find(st, name);
        if (!v) {
            if (missing++ < 20) {
                fprintf(f, "  missing     %s ", name);
                mc_print_shape(f, nd, shape);
                fputc('\n', f);
            }
            problems++;
            continue;
        }
        found[n_found++] = v;
        bool ok = v->ndim == nd;
        for (int d = 0; ok && d < nd; d++)
            ok = v->shape[d] == shape[d];
        if (ok && v->dtype != dt) {
            /* A published FP8 checkpoint's dense weight: F8_E4M3 with its
             * weight_scale_inv beside it, dequantized to bf16 at load. */
            char sn[MC_NAME_MAX + 16];
            const size_t len = strlen(name);
            snprintf(sn, sizeof sn, "%.*sweight_scale_inv", (int)(len > 6 ? len - 6 : 0), name);
            const struct tide_view *sv = tide_st_find(st, sn);
            ok = fp8_block && dt == TIDE_DTYPE_BF16 && v->dtype == TIDE_DTYPE_F8_E4M3 && nd == 2 &&
                 sv && len > 6 && !strcmp(name + len - 6, "weight");
            if (ok) {
                found[n_found++] = sv;
                fp8_dense++;
                if (!mc_check_dense_scale(sv, sn, fp8_block, shape[0], shape[1], f))
                    problems++;
            }
        }
        if (!ok) {
            fprintf(f, "  mismatch    %s: expected %s ", name, tide_dtype_name(dt));
            mc_print_shape(f, nd, shape);
            fprintf(f, ", found %s ", tide_dtype_name(v->dtype));
            mc_print_shape(f, v->ndim, v->shape);
            fputc('\n', f);
            problems++;
        }
    }
    if (missing > 20)
        fprintf(f, "  ... and %d more missing tensors\n", missing - 20);
    if (fp8_dense)
        fprintf(f,
                "  %d dense weights are fp8 with their weight_scale_inv: dequantized to bf16 at "
                "load (docs/quantization.md)\n",
                fp8_dense);
    qsort(found, (size_t)n_found, sizeof *found, mc_view_cmp);
    int unexpected = 0;
    for (int j = 0; j < tide_st_count(st); j++) {
        const struct tide_view *v = tide_st_at(st, j);
        if (bsearch(&v, found, (size_t)n_found, sizeof *found, mc_view_cmp))
            continue;
        if (unexpected++ < 20)
            fprintf(f, "  unexpected  %s\n", v->name);
        problems++;
    }
    if (unexpected > 20)
        fprintf(f, "  ... and %d more unexpected tensors\n", unexpected - 20);
    free(found);
    return problems;
}

/* The memory-by-budget table of `tide inspect`: device and host bytes at a
 * few representative budgets and the requested one. */
static inline void mc_budget_table(FILE *f, int n_experts, int moe, uint64_t eb, uint64_t dense,
                                   uint64_t routed, int requested)
{
    char b1[32], b2[32];
    fprintf(f, "\nmemory by expert budget (experts per MoE layer on the device; KV cache "
               "and activations not included):\n");
    fprintf(f, "  %8s %14s %14s\n", "budget", "device", "host");
    /* A few representative budgets plus the requested one, ascending, once each. */
    int budgets[6] = {0, n_experts / 8, n_experts / 4, n_experts / 2, n_experts, -1};
    if (requested >= 0 && requested <= n_experts)
        budgets[5] = requested;
    for (int i = 1; i < 6; i++)
        for (int j = i; j > 0 && budgets[j] < budgets[j - 1]; j--) {
            int t = budgets[j];
            budgets[j] = budgets[j - 1];
            budgets[j - 1] = t;
        }
    for (int i = 0; i < 6; i++) {
        int b = budgets[i];
        if (b < 0 || (i > 0 && b == budgets[i - 1]))
            continue;
        uint64_t on_dev = dense + eb * (uint64_t)moe * (uint64_t)b;
        fprintf(f, "  %8d %14s %14s%s\n", b, mc_hbytes(on_dev, b1, sizeof b1),
                mc_hbytes(routed - eb * (uint64_t)moe * (uint64_t)b, b2, sizeof b2),
                b == requested ? "  <- requested" : "");
    }
}

/* What `tide inspect` prints after a model's own architecture lines: the
 * vocabulary and context, parameter counts, bytes per routed expert, the
 * memory table, and the check of the checkpoint in dir against the model's
 * n_tensors specs (ctx, spec). Sizes are bf16 bytes: dense (everything but
 * the routed experts), routed (all routed experts), active (per token,
 * excluding embeddings), eb (one routed expert) over moe MoE layers. */
struct mc_inspect_sizes {
    int vocab, n_experts, moe;
    int64_t max_pos;
    uint64_t eb, dense, routed, active;
    /* appended: the experts' weight format (NULL: bf16) and the bf16 bytes
     * of one expert, which count its parameters */
    const char *format;
    uint64_t eb_bf16;
    /* appended: config.json's fp8 block, under which dense weights may be
     * F8_E4M3 with scales (NULL: the checkpoint is not fp8) */
    const int *fp8_block;
};

static inline int mc_inspect_rest(FILE *f, const char *dir, const struct mc_inspect_sizes *z,
                                  const void *ctx, int n_tensors, mc_spec_fn spec, int budget)
{
    fprintf(f, "vocabulary   %d, context %lld positions\n", z->vocab, (long long)z->max_pos);
    /* Parameters from bf16 bytes (2 per parameter), whatever the experts' format. */
    const double per_eb = z->eb_bf16 && z->eb ? (double)z->eb_bf16 / (double)z->eb : 1.0;
    const double total_p = ((double)z->dense + (double)z->routed * per_eb) / 2;
    const double active_p = (double)z->active / 2; /* counted in bf16 bytes by the model */
    const bool billions = total_p >= 1e9;
    fprintf(f, "parameters   %.3f %s total, %.3f %s active per token (excluding embeddings)\n",
            total_p / (billions ? 1e9 : 1e6), billions ? "B" : "M",
            active_p / (billions ? 1e9 : 1e6), billions ? "B" : "M");
    char b1[32], b2[32], b3[32];
    fprintf(
        f, "bytes        %llu per routed expert (%s, %s); routed experts %s; everything else %s\n",
        (unsigned long long)z->eb, mc_hbytes(z->eb, b1, sizeof b1), z->format ? z->format : "bf16",
        mc_hbytes(z->routed, b2, sizeof b2), mc_hbytes(z->dense, b3, sizeof b3));
    mc_budget_table(f, z->n_experts, z->moe, z->eb, z->dense, z->routed, budget);
    struct tide_st *st = NULL;
    int rc = tide_st_open(dir, &st);
    if (rc != TIDE_OK) {
        fprintf(f, "\ntensors      cannot be read (see the error above)\n");
        return rc;
    }
    fprintf(f, "\ntensors      %d in the checkpoint, %d expected, %s of data\n", tide_st_count(st),
            n_tensors, mc_hbytes(tide_st_data_bytes(st), b1, sizeof b1));
    int problems = mc_check_tensors(ctx, n_tensors, spec, st, z->fp8_block, f);
    if (!problems)
        fprintf(f, "  all tensors present with the expected dtype and shape\n");
    tide_st_close(st);
    return problems ? TIDE_E_FORMAT : TIDE_OK;
}

#endif
