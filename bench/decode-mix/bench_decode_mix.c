/* bench-decode-mix: what the AVX2 instruction mixes of the expert kernels
 * cost on this core, memory aside. Each mix is the inner loop of a kernel
 * at one token (quant_avx2.c, rows_avx2.c): the weights of 8 vectors (64
 * values) decoded from L1 and multiplied into 8 independent accumulators,
 * so neither memory nor the FMA latency bounds it, only the core's pipes.
 * It prints cycles per 8 weights (core cycles, from a dependent add chain
 * timed on the same thread's CPU clock) and what one core could stream at
 * that rate, the ceiling a kernel at one token meets before memory does.
 *
 *   build/bench-decode-mix [--seconds S]
 *
 * x86-64 with AVX2, FMA and F16C; elsewhere it says so and exits 77. */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/roofline.h"

#if defined(__x86_64__)
#define BM_TARGET __attribute__((target("avx2,fma,f16c")))
#define BM_CLOBBER                                                                                 \
    "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",        \
        "xmm9", "xmm10", "xmm11"

/* The constants the mixes read: ymm12 (integer mask or bits), ymm13 (a
 * weight vector or a subtrahend), ymm14 (x), ymm15 (a scale). Values that
 * keep every operand normal. */
static BM_TARGET void bm_constants(void)
{
    __asm__ volatile("vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n\t"
                     "vpsrld $28, %%ymm12, %%ymm12\n\t" /* 15 in each lane */
                     "vbroadcastss %0, %%ymm13\n\t"
                     "vbroadcastss %0, %%ymm14\n\t"
                     "vbroadcastss %0, %%ymm15"
                     :
                     : "m"((float){1.0f})
                     : "xmm12", "xmm13", "xmm14", "xmm15");
}

/* A mix: its loop body is PAIR(i, t, u, a, b) for the pairs i = 0..3 of
 * weight vectors (temporaries ymm t and u, accumulators ymm a and b). */
#define BM_MIX(name, PAIR)                                                                         \
    static BM_TARGET void mix_##name(const uint8_t *p, long iters)                                 \
    {                                                                                              \
        __asm__ volatile("1:\n\t" PAIR(0, 8, 9, 0, 1) PAIR(1, 10, 11, 2, 3) PAIR(2, 8, 9, 4, 5)    \
                             PAIR(3, 10, 11, 6, 7) "dec %1\n\t"                                    \
                                                   "jnz 1b"                                        \
                         : "+r"(p), "+r"(iters)                                                    \
                         :                                                                         \
                         : BM_CLOBBER);                                                            \
    }
#define BM_FMA(t, a) "vfmadd231ps %%ymm14, %%ymm" #t ", %%ymm" #a "\n\t"

#define P_FMA(i, t, u, a, b) BM_FMA(13, a) BM_FMA(13, b)
#define P_MUL_FMA(i, t, u, a, b)                                                                   \
    "vmulps %%ymm15, %%ymm13, %%ymm" #t "\n\t" BM_FMA(t, a) "vmulps %%ymm15, %%ymm13, %%ymm" #u    \
                                                            "\n\t" BM_FMA(u, b)
/* bf16 as rows_avx2.c widens it: a 16-byte broadcast, then one byte
 * shuffle (its control here ymm12; the cost does not depend on it) */
#define P_BF16_SHUF(i, t, u, a, b)                                                                 \
    "vbroadcasti128 " #i "*32(%0), %%ymm" #t "\n\t"                                                \
    "vpshufb %%ymm12, %%ymm" #t ", %%ymm" #t                                                       \
    "\n\t" BM_FMA(t, a) "vbroadcasti128 " #i "*32+16(%0), %%ymm" #u "\n\t"                         \
                        "vpshufb %%ymm12, %%ymm" #u ", %%ymm" #u "\n\t" BM_FMA(u, b)
/* bf16: 16 values, 32 bytes, per pair */
#define P_BF16(i, t, u, a, b)                                                                      \
    "vpmovzxwd " #i "*32(%0), %%ymm" #t "\n\t"                                                     \
    "vpslld $16, %%ymm" #t ", %%ymm" #t                                                            \
    "\n\t" BM_FMA(t, a) "vpmovzxwd " #i "*32+16(%0), %%ymm" #u "\n\t"                              \
                        "vpslld $16, %%ymm" #u ", %%ymm" #u "\n\t" BM_FMA(u, b)
/* q8_0 one vector: widen, then `conv` (convert and scale) */
#define V_Q8(off, t, a, conv) "vpmovsxbd " off "(%0), %%ymm" #t "\n\t" conv(t) BM_FMA(t, a)
#define C_CVT_MUL(t)                                                                               \
    "vcvtdq2ps %%ymm" #t ", %%ymm" #t "\n\t"                                                       \
    "vmulps %%ymm15, %%ymm" #t ", %%ymm" #t "\n\t"
#define C_MAGIC(t)                                                                                 \
    "vpaddd %%ymm12, %%ymm" #t ", %%ymm" #t "\n\t"                                                 \
    "vfmsub213ps %%ymm13, %%ymm15, %%ymm" #t "\n\t"
#define C_CVT(t)                    "vcvtdq2ps %%ymm" #t ", %%ymm" #t "\n\t"
#define P_Q8(i, t, u, a, b)         V_Q8(#i "*16", t, a, C_CVT_MUL) V_Q8(#i "*16+8", u, b, C_CVT_MUL)
#define P_Q8_MAGIC(i, t, u, a, b)   V_Q8(#i "*16", t, a, C_MAGIC) V_Q8(#i "*16+8", u, b, C_MAGIC)
#define P_Q8_NOSCALE(i, t, u, a, b) V_Q8(#i "*16", t, a, C_CVT) V_Q8(#i "*16+8", u, b, C_CVT)
#define P_I32(i, t, u, a, b)                                                                       \
    "vmovdqu " #i "*64(%0), %%ymm" #t "\n\t" C_CVT_MUL(t)                                          \
        BM_FMA(t, a) "vmovdqu " #i "*64+32(%0), %%ymm" #u "\n\t" C_CVT_MUL(u) BM_FMA(u, b)
/* q4_0: 16 values, 8 bytes, per pair (low and high nibbles) */
#define V_FMSUB_FMA(t, a) "vfmsub213ps %%ymm13, %%ymm15, %%ymm" #t "\n\t" BM_FMA(t, a)
#define P_Q4(i, t, u, a, b)                                                                        \
    "vpmovzxbd " #i "*8(%0), %%ymm" #t "\n\t"                                                      \
    "vpsrld $4, %%ymm" #t ", %%ymm" #u "\n\t"                                                      \
    "vpand %%ymm12, %%ymm" #t ", %%ymm" #t "\n\t" C_CVT(t) C_CVT(u) V_FMSUB_FMA(t, a)              \
        V_FMSUB_FMA(u, b)
#define P_Q4_MAGIC(i, t, u, a, b)                                                                  \
    "vpmovzxbd " #i "*8(%0), %%ymm" #t "\n\t"                                                      \
    "vpand %%ymm12, %%ymm" #t ", %%ymm" #u "\n\t"                                                  \
    "vpand %%ymm12, %%ymm" #t ", %%ymm" #t "\n\t"                                                  \
    "vpaddd %%ymm13, %%ymm" #t ", %%ymm" #t "\n\t"                                                 \
    "vpaddd %%ymm13, %%ymm" #u ", %%ymm" #u "\n\t" V_FMSUB_FMA(t, a) V_FMSUB_FMA(u, b)
/* fp8: 16 values, 16 bytes, per pair */
#define P_FP8(i, t, u, a, b)                                                                       \
    "vpmovsxbw " #i "*16(%0), %%ymm" #t "\n\t"                                                     \
    "vpsllw $7, %%ymm" #t ", %%ymm" #t "\n\t"                                                      \
    "vpand %%ymm12, %%ymm" #t ", %%ymm" #t "\n\t"                                                  \
    "vextracti128 $1, %%ymm" #t ", %%xmm" #u "\n\t"                                                \
    "vcvtph2ps %%xmm" #t ", %%ymm" #t "\n\t"                                                       \
    "vcvtph2ps %%xmm" #u ", %%ymm" #u "\n\t"                                                       \
    "vmulps %%ymm15, %%ymm" #t ", %%ymm" #t "\n\t"                                                 \
    "vmulps %%ymm15, %%ymm" #u ", %%ymm" #u "\n\t" BM_FMA(t, a) BM_FMA(u, b)

BM_MIX(fma, P_FMA)
BM_MIX(mul_fma, P_MUL_FMA)
BM_MIX(bf16, P_BF16_SHUF)
BM_MIX(bf16_widen, P_BF16)
BM_MIX(q8_0, P_Q8)
BM_MIX(q8_0_magic, P_Q8_MAGIC)
BM_MIX(q8_0_no_scale, P_Q8_NOSCALE)
BM_MIX(i32, P_I32)
BM_MIX(q4_0, P_Q4)
BM_MIX(q4_0_magic, P_Q4_MAGIC)
BM_MIX(fp8, P_FP8)

struct bm_mix {
    const char *name;
    double bytes; /* weight bytes per value */
    void (*run)(const uint8_t *p, long iters);
    const char *what;
};

static const struct bm_mix bm_mixes[] = {
    {"fma", 0, mix_fma, "register FMA only (the floor)"},
    {"mul+fma", 0, mix_mul_fma, "scale multiply + FMA (no decode)"},
    {"bf16", 2, mix_bf16, "bf16 (rows_avx2.c): vbroadcasti128, vpshufb, FMA"},
    {"bf16 widen", 2, mix_bf16_widen,
     "bf16 widened (rows_avx2.c before): vpmovzxwd m128, vpslld, FMA"},
    {"q8_0", 1, mix_q8_0, "q8_0 (quant_avx2.c): vpmovsxbd m64, vcvtdq2ps, vmulps, FMA"},
    {"q8_0 magic", 1, mix_q8_0_magic, "q8_0, bits + 1.5x2^23: vpmovsxbd m64, vpaddd, vfmsub, FMA"},
    {"q8_0 no scale", 1, mix_q8_0_no_scale,
     "q8_0 unscaled (another order): vpmovsxbd m64, vcvtdq2ps, FMA"},
    {"i32", 0, mix_i32, "int32 values (no widening): vmovdqu, vcvtdq2ps, vmulps, FMA"},
    {"q4_0", 0.5, mix_q4_0,
     "q4_0 (quant_avx2.c): vpmovzxbd m64, vpand | vpsrld, vcvtdq2ps, vfmsub, FMA"},
    {"q4_0 magic", 0.5, mix_q4_0_magic,
     "q4_0, nibbles masked in place + 1.5x2^23: vpmovzxbd m64, vpand x2, vpaddd, vfmsub, FMA"},
    {"fp8", 1, mix_fp8,
     "fp8 (quant_avx2.c): vpmovsxbw m128, vpsllw, vpand, vcvtph2ps x2, vmulps, FMA"},
};

/* This thread's core clock: the best of 5 roof_thread_hz. */
static double bm_hz(void)
{
    double best = 0;
    for (int r = 0; r < 5; r++) {
        const double hz = roof_thread_hz();
        best = hz > best ? hz : best;
    }
    return best;
}

/* Core cycles per iteration of m (64 values) at hz, on this thread's CPU
 * clock: the best of 5 rounds of about `seconds` / 5 each. */
static double bm_cycles(const struct bm_mix *m, const uint8_t *buf, double seconds, double hz)
{
    long iters = 1000;
    for (;;) { /* calibrate: a round of about seconds / 5 */
        const double t0 = roof_thread_cpu_now();
        bm_constants();
        m->run(buf, iters);
        const double t = roof_thread_cpu_now() - t0;
        if (t > seconds / 5 || iters > (1L << 40))
            break;
        iters *= t > 0 ? 2 + (long)(seconds / 5 / t) : 10;
    }
    double best = 0;
    for (int r = 0; r < 5; r++) {
        const double t0 = roof_thread_cpu_now();
        bm_constants();
        m->run(buf, iters);
        const double c = (roof_thread_cpu_now() - t0) * hz / (double)iters;
        best = r == 0 || c < best ? c : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    double seconds = 1.0;
    for (int i = 1; i < argc; i++) {
        const bool help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
        if (!strcmp(argv[i], "--seconds")) {
            char *end = NULL;
            const double v = i + 1 < argc ? strtod(argv[i + 1], &end) : 0;
            if (!end || *end || !(v > 0) || v > 3600) {
                fprintf(stderr,
                        "bench-decode-mix: --seconds '%s': expected seconds per mix, "
                        "a number above 0 and at most 3600\n",
                        i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            seconds = v;
            i++;
            continue;
        }
        if (!help)
            fprintf(stderr, "bench-decode-mix: unknown argument '%s'\n", argv[i]);
        fprintf(help ? stdout : stderr,
                "usage: %s [--seconds S]\n"
                "  cycles per 8 weights of the expert kernels' AVX2 instruction mixes at one\n"
                "  token (L1-resident weights, 8 independent accumulators), and the GB/s of\n"
                "  weights one core could decode at that rate. S: time per mix (1).\n",
                argv[0]);
        return help ? 0 : 2;
    }
    char cpu[128];
    roof_cpu_name(cpu, sizeof cpu);
    printf("# bench-decode-mix on %s, one thread\n", cpu);
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("# this CPU lacks AVX2 or FMA: nothing to measure\n");
        return 77;
    }
    static uint8_t buf[4096] __attribute__((aligned(64)));
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(0x31 + i % 7); /* small values, no fp8 NaN code */
    const double hz = bm_hz();
    printf("# core clock %.2f GHz (dependent add chain on this thread's CPU clock)\n", hz / 1e9);
    printf("%-14s %14s %14s  %s\n", "mix", "cycles/8 wts", "GB/s per core",
           "instructions per 8 weights");
    for (size_t i = 0; i < sizeof bm_mixes / sizeof *bm_mixes; i++) {
        const struct bm_mix *m = &bm_mixes[i];
        const double c = bm_cycles(m, buf, seconds, hz) / 8.0;
        char gbs[32] = "-";
        if (m->bytes > 0)
            snprintf(gbs, sizeof gbs, "%.1f", 8.0 * m->bytes / c * hz / 1e9);
        printf("%-14s %14.2f %14s  %s\n", m->name, c, gbs, m->what);
    }
    printf("# the FMA pipes take vmulps, vfmadd and vfmsub; a mix at 1.00 cycle per 8 weights "
           "holds 2 of them per vector\n");
    return 0;
}
#else
int main(void)
{
    printf("# bench-decode-mix measures x86-64 AVX2 code: nothing to measure here\n");
    return 77;
}
#endif
