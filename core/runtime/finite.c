/* NaN and Inf detection in checkpoint weights and in logits (finite.h). */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
 * and NaN when it is above. e4m3fn has no infinity: S.1111.111 (0x7f, 0xff)
 * is its NaN, the one pattern at the threshold. */
static void fin_spec(enum tide_dtype dt, uint32_t *abs_mask, uint32_t *inf_bits)
{
    switch (dt) {
    case TIDE_DTYPE_F8_E4M3:
        *abs_mask = 0x7f;
        *inf_bits = 0x7f;
        return;
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

/* The fast pass only asks "is anything here non-finite?": the largest
 * magnitude bit pattern (bits & abs_mask) of a chunk is compared with the
 * infinity pattern. A max-reduction over plain integers, vectorised with AVX2
 * where the CPU has it (>= 5 GB/s per core from memory), plain C elsewhere. */
/* The largest (p[i] & mask) over n elements of W bits, plain C. */
#define FIN_MAX(W, T)                                                                              \
    static uint32_t fin_max##W(const T *p, size_t n, T mask)                                       \
    {                                                                                              \
        T mx = 0;                                                                                  \
        for (size_t i = 0; i < n; i++) {                                                           \
            T v = (T)(p[i] & mask);                                                                \
            mx = v > mx ? v : mx;                                                                  \
        }                                                                                          \
        return mx;                                                                                 \
    }

FIN_MAX(8, uint8_t)
FIN_MAX(16, uint16_t)
FIN_MAX(32, uint32_t)

#if defined(__x86_64__)
#include <immintrin.h>
#define FIN_AVX2 __attribute__((target("avx2")))

/* Bytes per vectorised step: 4 x 32. */
#define FIN_STEP 128

/* The largest (p[i] & mask) over n elements of W bits, 4 x 32 bytes a step. */
#define FIN_MAX_AVX2(W, T)                                                                         \
    FIN_AVX2 static uint32_t fin_max##W##_avx2(const T *p, size_t n, T mask)                       \
    {                                                                                              \
        const __m256i m = _mm256_set1_epi##W((int)mask);                                           \
        __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;                                   \
        size_t i = 0;                                                                              \
        for (; i + FIN_STEP / sizeof(T) <= n; i += FIN_STEP / sizeof(T)) {                         \
            const __m256i *v = (const __m256i *)(p + i);                                           \
            a = _mm256_max_epu##W(a, _mm256_and_si256(_mm256_loadu_si256(v), m));                  \
            b = _mm256_max_epu##W(b, _mm256_and_si256(_mm256_loadu_si256(v + 1), m));              \
            c = _mm256_max_epu##W(c, _mm256_and_si256(_mm256_loadu_si256(v + 2), m));              \
            d = _mm256_max_epu##W(d, _mm256_and_si256(_mm256_loadu_si256(v + 3), m));              \
        }                                                                                          \
        a = _mm256_max_epu##W(_mm256_max_epu##W(a, b), _mm256_max_epu##W(c, d));                   \
        T lanes[32 / sizeof(T)];                                                                   \
        _mm256_storeu_si256((__m256i *)lanes, a);                                                  \
        uint32_t mx = fin_max##W(p + i, n - i, mask);                                              \
        for (size_t l = 0; l < 32 / sizeof(T); l++)                                                \
            mx = lanes[l] > mx ? lanes[l] : mx;                                                    \
        return mx;                                                                                 \
    }

FIN_MAX_AVX2(8, uint8_t)
FIN_MAX_AVX2(16, uint16_t)
FIN_MAX_AVX2(32, uint32_t)

static bool fin_have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
#endif

/* True when n elements of element size es at p hold a NaN or an Inf. */
static bool fin_any_bad(const void *p, size_t n, size_t es, uint32_t mask, uint32_t inf, bool avx2)
{
#if defined(__x86_64__)
    if (avx2)
        return (es == 1   ? fin_max8_avx2(p, n, (uint8_t)mask)
                : es == 2 ? fin_max16_avx2(p, n, (uint16_t)mask)
                          : fin_max32_avx2(p, n, mask)) >= inf;
#endif
    (void)avx2;
    return (es == 1   ? fin_max8(p, n, (uint8_t)mask)
            : es == 2 ? fin_max16(p, n, (uint16_t)mask)
                      : fin_max32(p, n, mask)) >= inf;
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
        } else if (dt == TIDE_DTYPE_F8_E4M3) {
            bits = ((const uint8_t *)data)[i];
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
        if (bits > inf || dt == TIDE_DTYPE_F8_E4M3)
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

/* Chunks of the fast pass: pieces of at most FIN_CHUNK bytes of the float
 * tensors, in file order; each thread takes the next chunk until none is
 * left, so one huge tensor is shared by every thread. */
#define FIN_CHUNK ((size_t)4 << 20)

struct fin_chunk {
    int tensor;
    size_t begin, bytes; /* within the tensor */
};

struct fin_job {
    const struct tide_st *st;
    struct fin_chunk *chunks;
    size_t n;
    _Atomic size_t next;
    _Atomic unsigned char *bad; /* [tensors] set when a chunk holds a NaN or an Inf */
    bool avx2;
};

static bool fin_float(enum tide_dtype dt)
{
    return dt == TIDE_DTYPE_BF16 || dt == TIDE_DTYPE_F16 || dt == TIDE_DTYPE_F32 ||
           dt == TIDE_DTYPE_F8_E4M3;
}

static void *fin_worker(void *arg)
{
    struct fin_job *j = arg;
    size_t c;
    while ((c = atomic_fetch_add(&j->next, 1)) < j->n) {
        const struct fin_chunk *ch = &j->chunks[c];
        const struct tide_view *v = tide_st_at(j->st, ch->tensor);
        uint32_t mask, inf;
        fin_spec(v->dtype, &mask, &inf);
        const size_t es = tide_dtype_size(v->dtype);
        const char *p = (const char *)v->data + ch->begin;
#ifdef MADV_POPULATE_READ
        /* Map the chunk's pages in one call rather than a fault per 64 KiB. */
        const uintptr_t page = 4096, a = (uintptr_t)p & ~(page - 1);
        madvise((void *)a, (size_t)((uintptr_t)p + ch->bytes - a), MADV_POPULATE_READ);
#endif
        /* The mapping is aligned to the element size (safetensors.c checks). */
        if (fin_any_bad(p, ch->bytes / es, es, mask, inf, j->avx2))
            atomic_store(&j->bad[ch->tensor], 1);
    }
    return NULL;
}

int tide_st_check_finite(const struct tide_st *st, uint64_t *bytes_scanned)
{
    const int n_t = tide_st_count(st);
    struct fin_job job = {.st = st};
    size_t cap = 0;
    uint64_t scanned = 0;
    for (int t = 0; t < n_t; t++) {
        const struct tide_view *v = tide_st_at(st, t);
        if (fin_float(v->dtype)) {
            cap += (v->nbytes + FIN_CHUNK - 1) / FIN_CHUNK;
            scanned += v->nbytes;
        }
    }
    job.chunks = malloc(sizeof *job.chunks * (cap + 1));
    job.bad = calloc((size_t)n_t + 1, 1);
    if (!job.chunks || !job.bad) {
        free(job.chunks);
        free((void *)job.bad);
        return TIDE_E_NOMEM;
    }
    for (int t = 0; t < n_t; t++) {
        const struct tide_view *v = tide_st_at(st, t);
        if (!fin_float(v->dtype))
            continue;
        for (size_t b = 0; b < v->nbytes; b += FIN_CHUNK)
            job.chunks[job.n++] =
                (struct fin_chunk){t, b, v->nbytes - b < FIN_CHUNK ? v->nbytes - b : FIN_CHUNK};
    }
#if defined(__x86_64__)
    job.avx2 = fin_have_avx2();
#endif
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n_threads = cpus < 1 ? 1 : cpus > FIN_MAX_THREADS ? FIN_MAX_THREADS : (int)cpus;
    pthread_t th[FIN_MAX_THREADS];
    int started = 0;
    while (started < n_threads - 1 && pthread_create(&th[started], NULL, fin_worker, &job) == 0)
        started++;
    fin_worker(&job);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);

    int bad_tensors = 0;
    for (int t = 0; t < n_t; t++) {
        const struct tide_view *v = tide_st_at(st, t);
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
    free(job.chunks);
    free((void *)job.bad);
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

/* The verified marker: which files were scanned, by size and modification
 * time. Any change to a file (or the set of files) changes the text. */
#define FIN_MARKER_NAME "/.tide-weights-verified"
#define FIN_MARKER_HEAD "tide weights verified 1\n"
#define FIN_MARKER_MAX  65536

/* The marker text for st's files into buf; false when a file cannot be stat'ed
 * or the text does not fit. */
static bool fin_marker_text(const struct tide_st *st, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "%s", FIN_MARKER_HEAD);
    const char *last = NULL;
    for (int t = 0; t < tide_st_count(st); t++) {
        const char *f = tide_st_file_of(st, tide_st_at(st, t)->name);
        if (!f || f == last)
            continue;
        /* Tensors come file by file, so each file starts one run. */
        last = f;
        struct stat sb;
        if (stat(f, &sb) != 0)
            return false;
        const char *base = strrchr(f, '/');
        k += (size_t)snprintf(buf + k, k < len ? len - k : 0, "%lld %lld.%09ld %s\n",
                              (long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                              (long)sb.st_mtim.tv_nsec, base ? base + 1 : f);
        if (k >= len)
            return false;
    }
    return true;
}

/* True when DIR's marker holds exactly `want`. */
static bool fin_marker_matches(const char *dir, const char *want)
{
    char path[4200], *got = malloc(FIN_MARKER_MAX);
    snprintf(path, sizeof path, "%s" FIN_MARKER_NAME, dir);
    FILE *f = got ? fopen(path, "rb") : NULL;
    size_t n = f ? fread(got, 1, FIN_MARKER_MAX - 1, f) : 0;
    if (f)
        fclose(f);
    bool same = f && n == strlen(want) && !memcmp(got, want, n);
    if (f && !same)
        tide_debug("%s: the checkpoint's files changed since it was verified: scanning again",
                   path);
    free(got);
    return same;
}

/* Write DIR's marker (atomically: a temporary file, then rename). */
static void fin_marker_write(const char *dir, const char *text)
{
    char path[4200], tmp[4220];
    snprintf(path, sizeof path, "%s" FIN_MARKER_NAME, dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(text, 1, strlen(text), f) == strlen(text);
    if (f && fclose(f) != 0)
        ok = false;
    if (ok && rename(tmp, path) == 0) {
        tide_info("%s: recorded that the weights are free of NaN and Inf ([model] "
                  "remember_check); later loads of these unchanged files skip the scan",
                  path);
        return;
    }
    tide_warn("%s: cannot record the weight check (%s); the next load scans again", path,
              strerror(errno));
    remove(tmp);
}

int tide_weights_check(const char *dir, bool remember)
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
    char *marker = malloc(FIN_MARKER_MAX);
    const bool have_text = marker && fin_marker_text(st, marker, FIN_MARKER_MAX);
    if (have_text && fin_marker_matches(dir, marker)) {
        tide_info("%s: skipping the NaN/Inf scan: %s" FIN_MARKER_NAME
                  " records a clean scan of these files (same sizes and times)",
                  dir, dir);
        tide_st_close(st);
        free(marker);
        return TIDE_OK;
    }
    uint64_t bytes = 0;
    rc = tide_st_check_finite(st, &bytes);
    tide_st_close(st);
    const double dt = fin_now() - t0;
    tide_debug("%s: checked %.3f GB of weights for NaN and Inf in %.3f s (%.2f GB/s)", dir,
               (double)bytes / 1e9, dt, dt > 0 ? (double)bytes / 1e9 / dt : 0.0);
    if (rc == TIDE_OK && remember && have_text)
        fin_marker_write(dir, marker);
    free(marker);
    return rc;
}

int tide_logits_check_rows(const float *const *rows, const int32_t *pos, int n, int vocab,
                           int64_t block, int step)
{
    static int avx2 = -1;
    if (avx2 < 0) {
#if defined(__x86_64__)
        avx2 = fin_have_avx2();
#else
        avx2 = 0;
#endif
    }
    uint64_t nan = 0, inf = 0;
    int first_row = -1;
    uint64_t first_tok = 0;
    for (int r = 0; r < n; r++) {
        if (!fin_any_bad(rows[r], (size_t)vocab, 4, 0x7fffffffu, 0x7f800000u, avx2))
            continue;
        struct fin_count c = fin_detail(rows[r], (size_t)vocab, TIDE_DTYPE_F32);
        nan += c.nan;
        inf += c.inf;
        if (first_row < 0) {
            first_row = pos[r];
            first_tok = c.first;
        }
    }
    if (first_row < 0)
        return TIDE_OK;
    tide_error("generation: block %lld, step %d: the logits hold %llu NaN and %llu Inf values "
               "(first at position %d, token %llu); no token is committed from them. The weights "
               "or the backend produced them: check the checkpoint with [model] check_weights "
               "= true, or try another [backend] device",
               (long long)block, step, (unsigned long long)nan, (unsigned long long)inf, first_row,
               (unsigned long long)first_tok);
    return TIDE_E_FORMAT;
}
