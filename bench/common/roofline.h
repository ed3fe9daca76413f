/* The machine's limits, measured in the benchmark's own run, for rooflines:
 * a STREAM triad (memory bandwidth) and peak arithmetic (bf16 dot products
 * with AMX's TDPBF16PS where the CPU has it, else VDPBF16PS; f32 with FMA),
 * on the same OpenMP thread count as the code measured. Header-only: each
 * benchmark includes it once, and uses what it needs (all static inline). */
#ifndef TIDE_BENCH_ROOFLINE_H
#define TIDE_BENCH_ROOFLINE_H

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "loader.h"

/* The OpenMP defaults `tide` runs with (tide_openmp_env_defaults): this
 * benchmark links OpenMP itself, whose runtime has read the environment
 * before main, so when the defaults were missing the program runs itself
 * again with them set. Returns only when the environment is final. */
static inline void roof_openmp_env(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    tide_openmp_env_defaults();
    execv("/proc/self/exe", argv);
    /* exec failed: run on with the runtime's defaults */
}

static inline double roof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds this process has used, all threads. On a machine shared with
 * other jobs, wall time includes the time our threads wait for a core; CPU
 * time does not, so CPU-time ratios estimate what an idle machine would do
 * (closely for compute-bound work; memory-bound work still shares the DRAM). */
static inline double roof_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* STREAM triad arrays: a = b + s*c over n doubles each. */
struct roof_triad {
    double *a, *b, *c;
    size_t n;
    int threads;
};

/* n doubles on 2 MiB boundaries, in transparent huge pages where the
 * kernel gives them: the triad measures the memory's limit, not the TLB's
 * (with 4 KiB pages it came out 4-38% lower on the Zen 4 VM of
 * docs/cpu-performance.md, session 9). */
static inline double *roof_triad_alloc(size_t n)
{
    const size_t huge = (size_t)2 << 20, bytes = (sizeof(double) * n + huge - 1) / huge * huge;
    double *p = aligned_alloc(huge, bytes);
#ifdef MADV_HUGEPAGE
    if (p)
        madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

/* 0, or -1 when out of memory. */
static inline int roof_triad_init(struct roof_triad *t, size_t n, int threads)
{
    t->a = roof_triad_alloc(n);
    t->b = roof_triad_alloc(n);
    t->c = roof_triad_alloc(n);
    t->n = n;
    t->threads = threads;
    if (!t->a || !t->b || !t->c)
        return -1;
    const long long ln = (long long)n;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long long i = 0; i < ln; i++) { /* first touch by the threads that use it */
        t->a[i] = 1.0;
        t->b[i] = 2.0;
        t->c[i] = 0.5;
    }
    return 0;
}

static inline void roof_triad_free(struct roof_triad *t)
{
    free(t->a);
    free(t->b);
    free(t->c);
}

/* Best of 5 passes in GB/s, with STREAM's byte count (3 x 8 bytes per
 * element). *per_cpu (may be NULL): the same per CPU-second x threads. */
static inline double roof_triad_run2(struct roof_triad *t, double *per_cpu)
{
    const long long ln = (long long)t->n;
    double *a = t->a;
    const double *b = t->b, *c = t->c;
    double best = 1e30, best_cpu = 1e30;
    for (int it = 0; it < 6; it++) {
        double t0 = roof_now(), c0 = roof_cpu_now();
#pragma omp parallel for num_threads(t->threads) schedule(static)
        for (long long i = 0; i < ln; i++)
            a[i] = b[i] + 3.0 * c[i];
        double dt = roof_now() - t0, dc = (roof_cpu_now() - c0) / t->threads;
        best = dt < best && it > 0 ? dt : best;
        best_cpu = dc < best_cpu && it > 0 ? dc : best_cpu;
    }
    if (per_cpu)
        *per_cpu = 3.0 * sizeof(double) * (double)t->n / best_cpu / 1e9;
    return 3.0 * sizeof(double) * (double)t->n / best / 1e9;
}

static inline double roof_triad_run(struct roof_triad *t)
{
    return roof_triad_run2(t, NULL);
}

/* This CPU's name (/proc/cpuinfo "model name"; "unknown CPU" elsewhere) and
 * its vector extensions that matter here, for the header of every table:
 * hosts change between sessions, and a hypervisor may hide extensions. */
static inline void roof_cpu_name(char *out, size_t n)
{
    snprintf(out, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            const char *c = strchr(line, ':');
            if (strncmp(line, "model name", 10) || !c)
                continue;
            c += 1 + (c[1] == ' ');
            snprintf(out, n, "%.*s", (int)strcspn(c, "\n"), c);
            break;
        }
        fclose(f);
    }
    __builtin_cpu_init();
    const size_t len = strlen(out);
    snprintf(out + len, n - len, " (%s)",
             __builtin_cpu_supports("avx512bf16") ? "AVX512-BF16"
             : __builtin_cpu_supports("avx512f")  ? "AVX-512, no BF16"
             : __builtin_cpu_supports("avx2")     ? "AVX2, no AVX-512"
                                                  : "no AVX2");
}

#define ROOF_TARGET __attribute__((target("avx512f,avx512bf16")))

/* Independent accumulator chains of each peak loop. A loop reaches an
 * instruction's throughput only with at least latency x (instructions per
 * cycle) chains; with fewer it measures the latency instead. Documented
 * (docs/cpu-performance.md, "Compute peaks"): an FMA has latency 4 at 2 per
 * cycle (8 chains) on Intel cores with two FMA units and on Zen 2-4;
 * VDPBF16PS has latency 6-8 at 1 per 2 cycles on Sapphire Rapids (4
 * chains). 20 zmm chains leave 12 of the 32 registers free; 12 ymm chains
 * and the two operands fill AVX2's 16. */
#define ROOF_CHAINS_ZMM 20
#define ROOF_CHAINS_YMM 12
#define ROOF_CHAINS_AMX 6 /* tiles 0-5; 6 and 7 hold the operands */

static inline bool roof_has_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

/* iters x ROOF_CHAINS_ZMM independent VDPBF16PS (64 FLOP each); returns a
 * lane so the work is not optimised away. */
ROOF_TARGET static float roof_bf16_loop(long iters)
{
    __m512 acc[ROOF_CHAINS_ZMM];
    for (int i = 0; i < ROOF_CHAINS_ZMM; i++)
        acc[i] = _mm512_set1_ps((float)i);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x0001);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 20
        for (int i = 0; i < ROOF_CHAINS_ZMM; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < ROOF_CHAINS_ZMM; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* iters x ROOF_CHAINS_ZMM independent 16-lane FMAs (32 FLOP each). */
ROOF_TARGET static float roof_f32_loop(long iters)
{
    __m512 acc[ROOF_CHAINS_ZMM];
    for (int i = 0; i < ROOF_CHAINS_ZMM; i++)
        acc[i] = _mm512_set1_ps((float)i);
    const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(1e-9f);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 20
        for (int i = 0; i < ROOF_CHAINS_ZMM; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < ROOF_CHAINS_ZMM; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

#define ROOF_TARGET_AVX2 __attribute__((target("avx2,fma")))

static inline bool roof_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* iters x ROOF_CHAINS_YMM independent 8-lane FMAs (16 FLOP each): 12
 * chains cover an FMA latency of 4-5 cycles on two FMA pipes (8-10). */
ROOF_TARGET_AVX2 static float roof_f32_loop_avx2(long iters)
{
    __m256 acc[ROOF_CHAINS_YMM];
    for (int i = 0; i < ROOF_CHAINS_YMM; i++)
        acc[i] = _mm256_set1_ps((float)i);
    const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(1e-9f);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < ROOF_CHAINS_YMM; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < ROOF_CHAINS_YMM; i++)
        s = _mm256_add_ps(s, acc[i]);
    float l[8];
    _mm256_storeu_ps(l, s);
    return l[0] + l[7];
}

#define ROOF_TARGET_AMX __attribute__((target("amx-tile,amx-bf16")))

/* AMX-BF16 and AMX-TILE (CPUID 7.0:EDX bits 22, 24), and Linux's leave to
 * use the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, feature 18). */
static inline bool roof_has_amx(void)
{
    unsigned a, b, c, d;
    if (!roof_has_bf16() || __get_cpuid_max(0, NULL) < 7)
        return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d >> 22 & 1) || !(d >> 24 & 1))
        return false;
#ifdef SYS_arch_prctl
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return false;
#endif
}

/* iters x 6 independent TDPBF16PS (16 x 16 x 32 x 2 = 16384 FLOP each) into
 * tiles 0-5 from tiles 6 and 7; returns an element so the work stays. */
ROOF_TARGET_AMX static float roof_amx_loop(long iters)
{
    struct {
        unsigned char palette, start, reserved[14];
        unsigned short colsb[16];
        unsigned char rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    unsigned buf[256] __attribute__((aligned(64)));
    _tile_loadconfig(&cfg);
    for (int i = 0; i < 256; i++)
        buf[i] = 0x3c003c00u; /* bf16 pairs (2^-7, 2^-7): no overflow in 1.2M steps */
    _tile_loadd(6, buf, 64);
    _tile_loadd(7, buf, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 6, 7);
        _tile_dpbf16ps(1, 6, 7);
        _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7);
        _tile_dpbf16ps(4, 6, 7);
        _tile_dpbf16ps(5, 6, 7);
    }
    float out[256] __attribute__((aligned(64)));
    _tile_stored(5, out, 64);
    _tile_release();
    return out[0];
}

/* FLOP of one iteration of the peak loop roof_peak2 runs. */
static inline double roof_peak_iter_flop(bool amx, bool avx512, bool bf16)
{
    return amx       ? ROOF_CHAINS_AMX * 16384.0
           : !avx512 ? ROOF_CHAINS_YMM * 16.0
                     : ROOF_CHAINS_ZMM * (bf16 ? 64.0 : 32.0);
}

/* The kind of peak roof_peak2 measures on this CPU. */
static inline const char *roof_peak_kind(bool bf16)
{
    if (bf16 && roof_has_amx())
        return "TDPBF16PS (AMX)";
    if (roof_has_bf16())
        return bf16 ? "VDPBF16PS" : "AVX-512 FMA";
    return roof_has_avx2() ? "AVX2 FMA" : "none";
}

/* Peak GFLOP/s on `threads` threads, best of 5 runs of 10-40 ms: bf16
 * (TDPBF16PS where the CPU has AMX, else VDPBF16PS) when bf16 is true, else
 * f32 FMA. On a CPU without AVX512-BF16
 * both are the AVX2 f32 FMA peak: the own kernel's bf16 matmul is f32 FMAs
 * on widened bf16 values (0 without AVX2: nothing is measured). *per_cpu
 * (may be NULL) gets the same in GFLOP per CPU-second times threads: the
 * peak of an idle machine. */
static inline double roof_peak2(int threads, bool bf16, double *per_cpu)
{
    if (per_cpu)
        *per_cpu = 0.0;
    const bool avx512 = roof_has_bf16(), amx = bf16 && roof_has_amx();
    if (!avx512 && !roof_has_avx2())
        return 0.0;
    /* 40M vector instructions per thread (about 10-20 ms), or 1.2M tile
     * products (16 cycles each where one tile unit runs them). Shorter runs
     * read low on a VM whose idle vCPUs take time to wake. */
    const long iters = amx ? 200000 : avx512 ? 2000000 : 3000000;
    double best = 1e30, best_cpu = 1e30;
    volatile float sink = 0;
    for (int rep = 0; rep < 6; rep++) {
        double t0 = roof_now(), c0 = roof_cpu_now();
#pragma omp parallel num_threads(threads)
        {
            float v = amx       ? roof_amx_loop(iters)
                      : !avx512 ? roof_f32_loop_avx2(iters)
                      : bf16    ? roof_bf16_loop(iters)
                                : roof_f32_loop(iters);
#pragma omp atomic
            sink += v;
        }
        double dt = roof_now() - t0, dc = (roof_cpu_now() - c0) / threads;
        best = dt < best && rep > 0 ? dt : best;
        best_cpu = dc < best_cpu && rep > 0 ? dc : best_cpu;
    }
    (void)sink;
    const double per_iter = roof_peak_iter_flop(amx, avx512, bf16);
    const double flops = (double)threads * (double)iters * per_iter;
    if (per_cpu)
        *per_cpu = flops / best_cpu / 1e9;
    return flops / best / 1e9;
}

static inline double roof_peak(int threads, bool bf16)
{
    return roof_peak2(threads, bf16, NULL);
}

/* iters x 16 dependent 64-bit adds: 16 cycles an iteration on every x86
 * core (an add's latency is 1 cycle; the count and the branch run beside
 * the chain), so it counts core cycles, not the TSC's. */
static inline unsigned long roof_clock_loop(long iters)
{
    unsigned long x = 0;
    __asm__ volatile("1:\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(x), "+r"(iters)
                     :
                     : "cc");
    return x;
}

static inline double roof_thread_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* This thread's core clock in Hz: roof_clock_loop over 16M cycles, timed
 * by the thread's own CPU clock (time spent waiting for a core does not
 * count). */
static inline double roof_thread_hz(void)
{
    const long iters = 1000000;
    const double t0 = roof_thread_cpu_now();
    (void)roof_clock_loop(iters); /* its asm is volatile: it runs */
    const double t1 = roof_thread_cpu_now();
    return 16.0 * (double)iters / (t1 - t0);
}

/* FLOP per cycle per core of roof_peak2's loop, the figure to check against
 * the instruction's documented throughput: on each of `threads` threads,
 * the dependent add chain (cycles) and then the peak loop, both timed by
 * the thread's own CPU clock, so the time a thread waits for a core on a
 * shared machine counts in neither, and a CPU clock that runs at a fixed
 * fraction of the real one cancels. Best of 5 rounds of the threads' mean;
 * *ghz (may be NULL): the core clock those rounds saw, cycles per thread
 * CPU-second (only as right as that clock). 0 where no peak is measured. */
static inline double roof_flop_per_cycle(int threads, bool bf16, double *ghz)
{
    const bool avx512 = roof_has_bf16(), amx = bf16 && roof_has_amx();
    if (ghz)
        *ghz = 0.0;
    if (!avx512 && !roof_has_avx2())
        return 0.0;
    const long iters = amx ? 50000 : avx512 ? 500000 : 750000;
    const double per_iter = roof_peak_iter_flop(amx, avx512, bf16);
    double best = 0.0, best_ghz = 0.0;
    volatile float sink = 0;
    for (int rep = 0; rep < 6; rep++) {
        double sum = 0.0, sum_ghz = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sum, sum_ghz)
        {
            const double hz = roof_thread_hz(), t1 = roof_thread_cpu_now();
            const float v = amx       ? roof_amx_loop(iters)
                            : !avx512 ? roof_f32_loop_avx2(iters)
                            : bf16    ? roof_bf16_loop(iters)
                                      : roof_f32_loop(iters);
            const double t2 = roof_thread_cpu_now();
            sum += (double)iters * per_iter / (t2 - t1) / hz;
            sum_ghz += hz / 1e9;
#pragma omp atomic
            sink += v;
        }
        if (rep > 0 && sum / threads > best)
            best = sum / threads, best_ghz = sum_ghz / threads;
    }
    (void)sink;
    if (ghz)
        *ghz = best_ghz;
    return best;
}

/* What roof_peak2(threads, bf16, ...) runs on this CPU: the instruction,
 * its independent chains and FLOP per instruction. */
struct roof_peak_loop {
    const char *insn;
    int chains, flop;
};

static inline struct roof_peak_loop roof_peak_loop_of(bool bf16)
{
    if (bf16 && roof_has_amx())
        return (struct roof_peak_loop){"TDPBF16PS (AMX tiles)", ROOF_CHAINS_AMX, 16384};
    if (roof_has_bf16())
        return bf16 ? (struct roof_peak_loop){"VDPBF16PS zmm", ROOF_CHAINS_ZMM, 64}
                    : (struct roof_peak_loop){"VFMADD231PS zmm", ROOF_CHAINS_ZMM, 32};
    if (roof_has_avx2())
        return (struct roof_peak_loop){"VFMADD231PS ymm", ROOF_CHAINS_YMM, 16};
    return (struct roof_peak_loop){"none", 0, 0};
}

/* One header line per peak: the instruction, its chains, FLOP per
 * instruction, the GFLOP/s measured and roof_flop_per_cycle's figure. */
static inline void roof_print_peak(const char *label, bool bf16, double gflops, int threads)
{
    const struct roof_peak_loop l = roof_peak_loop_of(bf16);
    double ghz;
    const double fpc = roof_flop_per_cycle(threads, bf16, &ghz);
    printf("# peak %s: %s, %d independent chains, %d FLOP each: %.0f GFLOP/s, %.1f "
           "FLOP/cycle/core (cycles from a dependent add chain, %.2f GHz per thread CPU-second)\n",
           label, l.insn, l.chains, l.flop, gflops, fpc, ghz);
}

/* How this process maps the files whose names end in `suffix` (the
 * checkpoint's .safetensors): bytes resident, and bytes of those in 2 MiB
 * pages (FilePmdMapped in /proc/self/smaps). A file mapping gets 2 MiB pages
 * only where the page cache holds the file in 2 MiB folios: after a cold
 * read, yes; after the file was just written (tide mkmodel, cp), mostly not.
 * Weights on 4 KiB pages stream slower (docs/cpu-performance.md, session
 * 10), so benchmarks print this beside their times. false when
 * /proc/self/smaps cannot be read (not Linux) or no such file is mapped. */
static inline bool roof_file_pages(const char *suffix, double *resident, double *huge)
{
    *resident = *huge = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return false;
    char line[4096];
    bool in = false, any = false;
    const size_t ls = strlen(suffix);
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        char key[64];
        if (sscanf(line, "%63[A-Za-z_]: %llu kB", key, &kb) == 2) {
            if (in && !strcmp(key, "Rss"))
                *resident += 1024.0 * (double)kb;
            else if (in && !strcmp(key, "FilePmdMapped"))
                *huge += 1024.0 * (double)kb;
            continue;
        }
        /* A mapping's first line: range perms offset dev inode [path]. */
        size_t n = strcspn(line, "\n");
        line[n] = 0;
        in = n >= ls && !strcmp(line + n - ls, suffix);
        any |= in;
    }
    fclose(f);
    return any;
}

/* One line for a benchmark's header: how the checkpoint's pages are mapped. */
static inline void roof_print_file_pages(const char *suffix)
{
    double res, huge;
    if (!roof_file_pages(suffix, &res, &huge)) {
        printf("# weights: no %s file mapped (read into memory, [model] mmap = false?)\n", suffix);
        return;
    }
    printf("# weights: %.2f GiB of mapped %s resident, %.2f GiB (%.0f%%) of it in 2 MiB "
           "pages%s\n",
           res / 1073741824.0, suffix, huge / 1073741824.0, res > 0 ? 100.0 * huge / res : 0.0,
           res > 0 && huge < 0.5 * res
               ? " (the page cache holds the file in small pages, as after writing it: "
                 "weights stream slower; see docs/cpu-performance.md, session 10)"
               : "");
}

#endif
