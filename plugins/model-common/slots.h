/* model-common: model ops slots whose logic does not depend on the model:
 * a span's rows checked, the prompt vector, phase profiling
 * bookkeeping. Header-only. */
#ifndef MODEL_COMMON_SLOTS_H
#define MODEL_COMMON_SLOTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tide/backend.h"
#include "tide/log.h"
#include "tide/model.h"
#include "tide/safetensors.h"
#include "tide/status.h"

/* Check a span's rows[0..n_rows) against its n positions; who
 * names the plugin in the message. */
static inline int mc_check_rows(const char *who, const int32_t *rows, int64_t n_rows, int64_t n,
                                const float *logits)
{
    if (n_rows < 0 || n_rows > n || (n_rows > 0 && (!rows || !logits))) {
        tide_error("%s: forward_batch: %lld rows of a %lld-token span (rows %s, logits %s)", who,
                   (long long)n_rows, (long long)n, rows ? "set" : "NULL", logits ? "set" : "NULL");
        return TIDE_E_INVAL;
    }
    for (int64_t i = 0; i < n_rows; i++) {
        if (rows[i] < 0 || rows[i] >= n) {
            tide_error("%s: forward_batch: rows[%lld] = %d is outside the %lld-token span", who,
                       (long long)i, rows[i], (long long)n);
            return TIDE_E_RANGE;
        }
    }
    return TIDE_OK;
}

/* The mean of the prompt's input embeddings from the mapped bf16 table v
 * [vocab, hidden] (NULL: missing), accumulated in double so the result does
 * not depend on the prompt's length beyond rounding to f32. */
static inline int mc_prompt_vector(const char *who, const struct tide_view *v, int vocab,
                                   int hidden, const int32_t *ids, int64_t n, float *out)
{
    if (!v || n < 1) {
        tide_error("%s: prompt_vector of %lld tokens: %s", who, (long long)n,
                   v ? "needs at least one token" : "the embedding table is missing");
        return v ? TIDE_E_RANGE : TIDE_E_INVAL;
    }
    double *acc = calloc((size_t)hidden, sizeof *acc);
    if (!acc)
        return TIDE_E_NOMEM;
    const uint16_t *table = v->data;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= vocab) {
            tide_error("%s: prompt token id %d at position %lld is outside the vocabulary "
                       "(vocab_size %d)",
                       who, ids[i], (long long)i, vocab);
            free(acc);
            return TIDE_E_RANGE;
        }
        const uint16_t *row = table + (size_t)ids[i] * (size_t)hidden;
        for (int j = 0; j < hidden; j++)
            acc[j] += tide_bf16_to_f32(row[j]);
    }
    for (int j = 0; j < hidden; j++)
        out[j] = (float)(acc[j] / (double)n);
    free(acc);
    return TIDE_OK;
}

/* ---- phase profiling (model ops profile / profile_read) ------------------ */

/* The phases of a MoE decoder layer stack's forward pass, for the profile
 * slots; a model that has these parts names them the same. */
enum mc_phase {
    MC_PH_ATTENTION, /* q/k/v, q/k norms, rope, K/V write, attention, output projection, residual */
    MC_PH_DENSE,     /* the dense SwiGLU of dense layers */
    MC_PH_SHARED,    /* the shared expert of MoE layers */
    MC_PH_ROUTED,    /* router, routed experts (the dispatcher) and their combination */
    MC_PH_OUTPUT,    /* final norm and head, for the rows asked for, and the read back */
    MC_PH_OTHER,     /* embedding, layer norms, residual adds of the feed-forward */
    MC_N_PHASES
};

static const char *const mc_phase_names[MC_N_PHASES] = {
    "attention", "dense ffn", "shared expert", "routed experts", "output layer", "other",
};

#define MC_MAX_PHASES 8

struct mc_prof {
    bool on;
    int n;         /* phases */
    int cur;       /* the phase being timed; n: none */
    double t, cpu; /* when it started: wall and process CPU clocks */
    const char *const *names;
    struct tide_phase_stats ph[MC_MAX_PHASES];
    unsigned char *seen; /* [n_experts] scratch for counting distinct experts */
};

/* At open: n phases (<= MC_MAX_PHASES) named names[n]; off. */
static inline void mc_prof_init(struct mc_prof *p, const char *const *names, int n)
{
    memset(p, 0, sizeof *p);
    p->names = names;
    p->n = n;
    p->cur = n;
}

static inline double mc_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* End the phase being timed and start `next` (n: none). Costs nothing when
 * profiling is off; otherwise waits for the backend so the time lands in the
 * right phase. */
static inline int mc_prof_phase(struct mc_prof *p, const struct tide_backend_ops *o,
                                struct tide_backend *bk, int next)
{
    if (!p->on)
        return TIDE_OK;
    int rc = o->sync(bk);
    const double t = mc_clock(CLOCK_MONOTONIC), cpu = mc_clock(CLOCK_PROCESS_CPUTIME_ID);
    if (p->cur < p->n) {
        p->ph[p->cur].seconds += t - p->t;
        p->ph[p->cur].cpu_seconds += cpu - p->cpu;
    }
    if (next < p->n)
        p->ph[next].calls++;
    p->cur = next;
    p->t = t;
    p->cpu = cpu;
    return rc;
}

/* Count the work of the phase being timed: bytes read and FLOPs. */
static inline void mc_prof_work(struct mc_prof *p, uint64_t bytes, uint64_t flops,
                                uint64_t flops_f32)
{
    if (!p->on || p->cur >= p->n)
        return;
    p->ph[p->cur].bytes += bytes;
    p->ph[p->cur].flops += flops;
    p->ph[p->cur].flops_f32 += flops_f32;
}

/* Count the work of x [n, K] times a bf16 [N, K] matrix: the matrix's bytes
 * and 2 n N K FLOPs. */
static inline void mc_prof_mm_work(struct mc_prof *p, int64_t n, int64_t N, int64_t K)
{
    mc_prof_work(p, (uint64_t)(N * K) * 2u, 2u * (uint64_t)(n * N * K), 0);
}

/* The profile slot: zero the counters and switch timing on or off. */
static inline int mc_prof_switch(struct mc_prof *p, bool on, int n_experts)
{
    if (on && !p->seen && !(p->seen = calloc((size_t)n_experts + 1, 1)))
        return TIDE_E_NOMEM;
    memset(p->ph, 0, sizeof p->ph);
    for (int i = 0; i < p->n; i++)
        p->ph[i].name = p->names[i];
    p->on = on;
    p->cur = p->n; /* between forwards: not timed */
    p->t = mc_clock(CLOCK_MONOTONIC);
    p->cpu = mc_clock(CLOCK_PROCESS_CPUTIME_ID);
    return TIDE_OK;
}

/* The profile_read slot. */
static inline int mc_prof_read(const struct mc_prof *p, struct tide_phase_stats *out, int max,
                               int *n)
{
    if (!n || (max > 0 && !out))
        return TIDE_E_INVAL;
    for (int i = 0; i < p->n && i < max; i++) {
        out[i] = p->ph[i];
        out[i].name = p->names[i];
    }
    *n = p->n;
    return TIDE_OK;
}

/* Distinct experts among ids[0..count) (each in [0, n_experts)), counted
 * with the profiler's scratch. */
static inline uint64_t mc_prof_distinct(struct mc_prof *p, const int32_t *ids, int64_t count,
                                        int n_experts)
{
    uint64_t distinct = 0;
    memset(p->seen, 0, (size_t)n_experts);
    for (int64_t a = 0; a < count; a++)
        if (ids[a] >= 0 && ids[a] < n_experts && !p->seen[ids[a]]++)
            distinct++;
    return distinct;
}

#endif
