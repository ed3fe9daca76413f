/* `tide inspect DIR` for LLaDA-MoE checkpoints: architecture, parameter
 * counts, memory per expert budget, and every missing, unexpected or
 * mis-shaped tensor. Reads headers only; no weights are touched. */
#include <stdlib.h>
#include <string.h>

#include "lladamoe.h"
#include "tide/log.h"
#include "tide/status.h"

/* Human-readable bytes into buf: B, KiB, MiB, GiB or TiB. */
static const char *hbytes(uint64_t b, char *buf, size_t len)
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

static void print_shape(FILE *f, int nd, const int64_t *shape)
{
    fputc('[', f);
    for (int d = 0; d < nd; d++)
        fprintf(f, "%s%lld", d ? ", " : "", (long long)shape[d]);
    fputc(']', f);
}

static int view_cmp(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t) * (const struct tide_view *const *)a;
    const uintptr_t y = (uintptr_t) * (const struct tide_view *const *)b;
    return (x > y) - (x < y);
}

/* Compare the checkpoint with the expected tensor list. Returns the number
 * of problems found. O(n log n): the checkpoint tensors that were expected
 * are collected and sorted, and each checkpoint tensor is looked up there. */
static int check_tensors(const struct lmoe_cfg *c, const struct tide_st *st, FILE *f)
{
    int n = lmoe_tensor_count(c), problems = 0, missing = 0, n_found = 0;
    const struct tide_view **found = malloc(sizeof *found * (size_t)(n ? n : 1));
    if (!found) {
        tide_error("inspect: out of memory listing %d tensors", n);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char name[LMOE_NAME_MAX];
        enum tide_dtype dt;
        int64_t shape[TIDE_MAX_DIMS];
        int nd = lmoe_tensor_spec(c, i, name, &dt, shape);
        const struct tide_view *v = tide_st_find(st, name);
        if (!v) {
            if (missing++ < 20) {
                fprintf(f, "  missing     %s ", name);
                print_shape(f, nd, shape);
                fputc('\n', f);
            }
            problems++;
            continue;
        }
        found[n_found++] = v;
        bool ok = v->dtype == dt && v->ndim == nd;
        for (int d = 0; ok && d < nd; d++)
            ok = v->shape[d] == shape[d];
        if (!ok) {
            fprintf(f, "  mismatch    %s: expected %s ", name, tide_dtype_name(dt));
            print_shape(f, nd, shape);
            fprintf(f, ", found %s ", tide_dtype_name(v->dtype));
            print_shape(f, v->ndim, v->shape);
            fputc('\n', f);
            problems++;
        }
    }
    if (missing > 20)
        fprintf(f, "  ... and %d more missing tensors\n", missing - 20);
    qsort(found, (size_t)n_found, sizeof *found, view_cmp);
    int unexpected = 0;
    for (int j = 0; j < tide_st_count(st); j++) {
        const struct tide_view *v = tide_st_at(st, j);
        if (bsearch(&v, found, (size_t)n_found, sizeof *found, view_cmp))
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

int lmoe_inspect(const char *dir, const struct tide_inspect_args *args)
{
    FILE *f = args->out ? args->out : stdout;
    struct lmoe_cfg c;
    int rc = lmoe_cfg_load(dir, &c);
    if (rc != TIDE_OK)
        return rc;
    const int moe = c.n_moe;
    const uint64_t eb = lmoe_expert_bytes(&c), dense = lmoe_dense_bytes(&c);
    const uint64_t routed = eb * (uint64_t)moe * (uint64_t)c.n_experts;
    const uint64_t emb = (c.tied ? 1ull : 2ull) * (uint64_t)c.vocab * (uint64_t)c.hidden;
    const uint64_t active = dense - emb + eb * (uint64_t)moe * (uint64_t)c.top_k;
    char shared[32];
    snprintf(shared, sizeof shared, c.shared_inter ? "width %d" : "none", c.shared_inter);
    fprintf(f, "checkpoint   %s\n", dir);
    fprintf(f,
            "architecture llada_moe (LLaDAMoEModelLM): %d layers (%d dense, %d MoE), hidden %d\n",
            c.n_layers, c.n_layers - moe, moe, c.hidden);
    fprintf(f,
            "attention    full (bidirectional), %d query heads, %d KV heads, head_dim %d, RoPE on "
            "%d dims (theta %g), QK-norm %s\n",
            c.n_heads, c.n_kv_heads, c.head_dim, c.rot_dim, c.rope_theta, c.qk_norm ? "on" : "off");
    fprintf(f,
            "experts      %d routed per MoE layer (width %d), softmax top-%d, expert bias %s, "
            "shared expert %s\n",
            c.n_experts, c.moe_inter, c.top_k, c.expert_bias ? "on" : "off", shared);
    fprintf(f, "vocabulary   %d, context %lld positions\n", c.vocab, (long long)c.max_pos);
    const double total_p = (double)(dense + routed) / 2, active_p = (double)active / 2;
    const bool billions = total_p >= 1e9;
    fprintf(f, "parameters   %.3f %s total, %.3f %s active per token (excluding embeddings)\n",
            total_p / (billions ? 1e9 : 1e6), billions ? "B" : "M",
            active_p / (billions ? 1e9 : 1e6), billions ? "B" : "M");
    char b1[32], b2[32], b3[32];
    fprintf(f, "bytes        %llu per routed expert (%s); routed experts %s; everything else %s\n",
            (unsigned long long)eb, hbytes(eb, b1, sizeof b1), hbytes(routed, b2, sizeof b2),
            hbytes(dense, b3, sizeof b3));
    fprintf(f, "\nmemory by expert budget (experts per MoE layer on the device; KV cache "
               "and activations not included):\n");
    fprintf(f, "  %8s %14s %14s\n", "budget", "device", "host");
    /* A few representative budgets plus the requested one, ascending, once each. */
    int budgets[6] = {0, c.n_experts / 8, c.n_experts / 4, c.n_experts / 2, c.n_experts, -1};
    if (args->budget >= 0 && args->budget <= c.n_experts)
        budgets[5] = args->budget;
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
        fprintf(f, "  %8d %14s %14s%s\n", b, hbytes(on_dev, b1, sizeof b1),
                hbytes(routed - eb * (uint64_t)moe * (uint64_t)b, b2, sizeof b2),
                b == args->budget ? "  <- requested" : "");
    }
    struct tide_st *st = NULL;
    rc = tide_st_open(dir, &st);
    if (rc != TIDE_OK) {
        fprintf(f, "\ntensors      cannot be read (see the error above)\n");
        return rc;
    }
    fprintf(f, "\ntensors      %d in the checkpoint, %d expected, %s of data\n", tide_st_count(st),
            lmoe_tensor_count(&c), hbytes(tide_st_data_bytes(st), b1, sizeof b1));
    int problems = check_tensors(&c, st, f);
    if (!problems)
        fprintf(f, "  all tensors present with the expected dtype and shape\n");
    tide_st_close(st);
    return problems ? TIDE_E_FORMAT : TIDE_OK;
}
