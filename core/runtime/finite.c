/* NaN and Inf detection in checkpoint weights and in logits (finite.h). */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "finite.h"
#include "tide/log.h"
#include "tide/status.h"

#define FIN_MAX_REPORTS 10
#define FIN_MAX_THREADS 8

/* Counts of non-finite elements in n elements of dtype dt at p, with the
 * index of the first. The fast pass only counts; callers rescan for details
 * only when it finds something. */
struct fin_count {
    uint64_t nan, inf, first;
};

/* Bit patterns: an element is non-finite when (bits & abs_mask) >= inf_bits,
 * and NaN when it is above. */
static void fin_spec(enum tide_dtype dt, uint32_t *abs_mask, uint32_t *inf_bits)
{
    switch (dt) {
    case TIDE_DTYPE_BF16:
        *abs_mask = 0x7fff;
        *inf_bits = 0x7f80;
        return;
    case TIDE_DTYPE_F16:
        *abs_mask = 0x7fff;
        *inf_bits = 0x7c00;
        return;
    default:
        *abs_mask = 0x7fffffff;
        *inf_bits = 0x7f800000;
        return;
    }
}

/* How many of n 16-bit elements are non-finite (branch-free, vectorises). */
static uint64_t fin_scan16(const uint16_t *p, size_t n, uint16_t mask, uint16_t inf)
{
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (uint16_t)(p[i] & mask) >= inf;
    return bad;
}

static uint64_t fin_scan32(const uint32_t *p, size_t n, uint32_t mask, uint32_t inf)
{
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += (p[i] & mask) >= inf;
    return bad;
}

/* The slow pass over a tensor known to hold something non-finite. */
static struct fin_count fin_detail(const void *data, size_t n, enum tide_dtype dt)
{
    uint32_t mask, inf;
    fin_spec(dt, &mask, &inf);
    struct fin_count c = {0, 0, UINT64_MAX};
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        if (dt == TIDE_DTYPE_F32) {
            memcpy(&bits, (const uint8_t *)data + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, (const uint8_t *)data + 2 * i, 2);
            bits = h;
        }
        bits &= mask;
        if (bits < inf)
            continue;
        if (c.first == UINT64_MAX)
            c.first = i;
        if (bits > inf)
            c.nan++;
        else
            c.inf++;
    }
    return c;
}

/* "[3, 17]" for flat index i of a tensor of the given shape. */
static void fin_index_text(uint64_t i, const struct tide_view *v, char *buf, size_t len)
{
    uint64_t idx[TIDE_MAX_DIMS] = {0};
    for (int d = v->ndim - 1; d >= 0; d--) {
        uint64_t ext = v->shape[d] > 0 ? (uint64_t)v->shape[d] : 1;
        idx[d] = i % ext;
        i /= ext;
    }
    size_t k = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < v->ndim && k < len; d++)
        k +=
            (size_t)snprintf(buf + k, len - k, "%s%llu", d ? ", " : "", (unsigned long long)idx[d]);
    if (k < len)
        snprintf(buf + k, len - k, "]");
}

/* Threads of the fast pass: each takes the next tensor until none is left. */
struct fin_job {
    const struct tide_st *st;
    int n;
    _Atomic int next;
    uint64_t *bad; /* [n] non-finite elements per tensor */
};

static bool fin_float(enum tide_dtype dt)
{
    return dt == TIDE_DTYPE_BF16 || dt == TIDE_DTYPE_F16 || dt == TIDE_DTYPE_F32;
}

static void *fin_worker(void *arg)
{
    struct fin_job *j = arg;
    int t;
    while ((t = atomic_fetch_add(&j->next, 1)) < j->n) {
        const struct tide_view *v = tide_st_at(j->st, t);
        if (!fin_float(v->dtype))
            continue;
        uint32_t mask, inf;
        fin_spec(v->dtype, &mask, &inf);
        const size_t es = tide_dtype_size(v->dtype), n = v->nbytes / es;
        /* The mapping is aligned to the element size (safetensors.c checks). */
        j->bad[t] = es == 2 ? fin_scan16(v->data, n, (uint16_t)mask, (uint16_t)inf)
                            : fin_scan32(v->data, n, mask, inf);
    }
    return NULL;
}

int tide_st_check_finite(const struct tide_st *st, uint64_t *bytes_scanned)
{
    struct fin_job job = {.st = st, .n = tide_st_count(st)};
    job.bad = calloc((size_t)job.n + 1, sizeof *job.bad);
    if (!job.bad)
        return TIDE_E_NOMEM;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = cpus < 1 ? 1 : cpus > FIN_MAX_THREADS ? FIN_MAX_THREADS : (int)cpus;
    pthread_t th[FIN_MAX_THREADS];
    int started = 0;
    while (started < n_threads - 1 && pthread_create(&th[started], NULL, fin_worker, &job) == 0)
        started++;
    fin_worker(&job);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);

    uint64_t scanned = 0;
    int bad_tensors = 0;
    for (int t = 0; t < job.n; t++) {
        const struct tide_view *v = tide_st_at(st, t);
        if (fin_float(v->dtype))
            scanned += v->nbytes;
        if (!job.bad[t] || bad_tensors++ >= FIN_MAX_REPORTS)
            continue;
        const size_t n = v->nbytes / tide_dtype_size(v->dtype);
        struct fin_count c = fin_detail(v->data, n, v->dtype);
        char at[TIDE_MAX_DIMS * 24 + 4];
        fin_index_text(c.first, v, at, sizeof at);
        tide_error("%s: tensor '%s' (%s) holds %llu NaN and %llu Inf values out of %zu (first at "
                   "%s): the checkpoint is damaged",
                   tide_st_file_of(st, v->name), v->name, tide_dtype_name(v->dtype),
                   (unsigned long long)c.nan, (unsigned long long)c.inf, n, at);
    }
    free(job.bad);
    if (bad_tensors > FIN_MAX_REPORTS)
        tide_error("%s: %d more tensors hold NaN or Inf values", tide_st_path(st),
                   bad_tensors - FIN_MAX_REPORTS);
    if (bytes_scanned)
        *bytes_scanned = scanned;
    return bad_tensors ? TIDE_E_FORMAT : TIDE_OK;
}

static double fin_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tide_weights_check(const char *dir)
{
    char single[4200], index[4200];
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    if (access(single, F_OK) != 0 && access(index, F_OK) != 0)
        return TIDE_OK;
    const double t0 = fin_now();
    struct tide_st *st;
    int rc = tide_st_open(dir, &st);
    if (rc != TIDE_OK)
        return rc;
    uint64_t bytes = 0;
    rc = tide_st_check_finite(st, &bytes);
    tide_st_close(st);
    const double dt = fin_now() - t0;
    tide_debug("%s: checked %.3f GB of weights for NaN and Inf in %.3f s (%.2f GB/s)", dir,
               (double)bytes / 1e9, dt, dt > 0 ? (double)bytes / 1e9 / dt : 0.0);
    return rc;
}

int tide_logits_check(const float *logits, int rows, int vocab, int64_t block, int step)
{
    const size_t n = (size_t)rows * (size_t)vocab;
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += !(fabsf(logits[i]) <= FLT_MAX); /* NaN compares false */
    if (!bad)
        return TIDE_OK;
    struct fin_count c = fin_detail(logits, n, TIDE_DTYPE_F32);
    tide_error("generation: block %lld, step %d: the logits hold %llu NaN and %llu Inf values "
               "(first at row %llu, token %llu); no token is committed from them. The weights "
               "or the backend produced them: check the checkpoint with [model] check_weights "
               "= true, or try another [backend] device",
               (long long)block, step, (unsigned long long)c.nan, (unsigned long long)c.inf,
               (unsigned long long)(c.first / (uint64_t)vocab),
               (unsigned long long)(c.first % (uint64_t)vocab));
    return TIDE_E_FORMAT;
}
