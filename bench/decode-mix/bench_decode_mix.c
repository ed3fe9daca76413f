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

static BM_TARGET void mix_fma(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm0\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm1\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm2\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm3\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm4\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm5\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm6\n\t"
                     "vfmadd231ps %%ymm14, %%ymm13, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_mul_fma(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vmulps %%ymm15, %%ymm13, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_bf16(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vpmovzxwd 0(%0), %%ymm8\n\t"
                     "vpslld $16, %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vpmovzxwd 32(%0), %%ymm9\n\t"
                     "vpslld $16, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vpmovzxwd 64(%0), %%ymm10\n\t"
                     "vpslld $16, %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vpmovzxwd 96(%0), %%ymm11\n\t"
                     "vpslld $16, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vpmovzxwd 128(%0), %%ymm8\n\t"
                     "vpslld $16, %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vpmovzxwd 160(%0), %%ymm9\n\t"
                     "vpslld $16, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vpmovzxwd 192(%0), %%ymm10\n\t"
                     "vpslld $16, %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vpmovzxwd 224(%0), %%ymm11\n\t"
                     "vpslld $16, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_q8_0(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vpmovsxbd 0(%0), %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vmulps %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vpmovsxbd 8(%0), %%ymm9\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vmulps %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vpmovsxbd 16(%0), %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vmulps %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vpmovsxbd 24(%0), %%ymm11\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vmulps %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vpmovsxbd 32(%0), %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vmulps %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vpmovsxbd 40(%0), %%ymm9\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vmulps %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vpmovsxbd 48(%0), %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vmulps %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vpmovsxbd 56(%0), %%ymm11\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vmulps %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_q8_0_magic(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vpmovsxbd 0(%0), %%ymm8\n\t"
                     "vpaddd %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vpmovsxbd 8(%0), %%ymm9\n\t"
                     "vpaddd %%ymm12, %%ymm9, %%ymm9\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vpmovsxbd 16(%0), %%ymm10\n\t"
                     "vpaddd %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vpmovsxbd 24(%0), %%ymm11\n\t"
                     "vpaddd %%ymm12, %%ymm11, %%ymm11\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vpmovsxbd 32(%0), %%ymm8\n\t"
                     "vpaddd %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vpmovsxbd 40(%0), %%ymm9\n\t"
                     "vpaddd %%ymm12, %%ymm9, %%ymm9\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vpmovsxbd 48(%0), %%ymm10\n\t"
                     "vpaddd %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vpmovsxbd 56(%0), %%ymm11\n\t"
                     "vpaddd %%ymm12, %%ymm11, %%ymm11\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_q8_0_no_scale(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vpmovsxbd 0(%0), %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vpmovsxbd 8(%0), %%ymm9\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vpmovsxbd 16(%0), %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vpmovsxbd 24(%0), %%ymm11\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vpmovsxbd 32(%0), %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vpmovsxbd 40(%0), %%ymm9\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vpmovsxbd 48(%0), %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vpmovsxbd 56(%0), %%ymm11\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_i32(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vmovdqu 0(%0), %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vmulps %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vmovdqu 32(%0), %%ymm9\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vmulps %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vmovdqu 64(%0), %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vmulps %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vmovdqu 96(%0), %%ymm11\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vmulps %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vmovdqu 128(%0), %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vmulps %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vmovdqu 160(%0), %%ymm9\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vmulps %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vmovdqu 192(%0), %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vmulps %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vmovdqu 224(%0), %%ymm11\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vmulps %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_q4_0(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vpmovzxbd 0(%0), %%ymm8\n\t"
                     "vpsrld $4, %%ymm8, %%ymm9\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm8\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vpmovzxbd 16(%0), %%ymm10\n\t"
                     "vpsrld $4, %%ymm10, %%ymm11\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm10\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vpmovzxbd 32(%0), %%ymm8\n\t"
                     "vpsrld $4, %%ymm8, %%ymm9\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vcvtdq2ps %%ymm8, %%ymm8\n\t"
                     "vcvtdq2ps %%ymm9, %%ymm9\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm8\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vpmovzxbd 48(%0), %%ymm10\n\t"
                     "vpsrld $4, %%ymm10, %%ymm11\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vcvtdq2ps %%ymm10, %%ymm10\n\t"
                     "vcvtdq2ps %%ymm11, %%ymm11\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm10\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_q4_0_magic(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vpmovzxbd 0(%0), %%ymm8\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm9\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vpaddd %%ymm13, %%ymm8, %%ymm8\n\t"
                     "vpaddd %%ymm13, %%ymm9, %%ymm9\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm8\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vpmovzxbd 16(%0), %%ymm10\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm11\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vpaddd %%ymm13, %%ymm10, %%ymm10\n\t"
                     "vpaddd %%ymm13, %%ymm11, %%ymm11\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm10\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vpmovzxbd 32(%0), %%ymm8\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm9\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vpaddd %%ymm13, %%ymm8, %%ymm8\n\t"
                     "vpaddd %%ymm13, %%ymm9, %%ymm9\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm8\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vpmovzxbd 48(%0), %%ymm10\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm11\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vpaddd %%ymm13, %%ymm10, %%ymm10\n\t"
                     "vpaddd %%ymm13, %%ymm11, %%ymm11\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm10\n\t"
                     "vfmsub213ps %%ymm13, %%ymm15, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

static BM_TARGET void mix_fp8(const uint8_t *p, long iters)
{
    __asm__ volatile("1:\n\t"
                     "vpmovsxbw 0(%0), %%ymm8\n\t"
                     "vpsllw $7, %%ymm8, %%ymm8\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vextracti128 $1, %%ymm8, %%xmm9\n\t"
                     "vcvtph2ps %%xmm8, %%ymm8\n\t"
                     "vcvtph2ps %%xmm9, %%ymm9\n\t"
                     "vmulps %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vmulps %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm0\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm1\n\t"
                     "vpmovsxbw 16(%0), %%ymm10\n\t"
                     "vpsllw $7, %%ymm10, %%ymm10\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vextracti128 $1, %%ymm10, %%xmm11\n\t"
                     "vcvtph2ps %%xmm10, %%ymm10\n\t"
                     "vcvtph2ps %%xmm11, %%ymm11\n\t"
                     "vmulps %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vmulps %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm2\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm3\n\t"
                     "vpmovsxbw 32(%0), %%ymm8\n\t"
                     "vpsllw $7, %%ymm8, %%ymm8\n\t"
                     "vpand %%ymm12, %%ymm8, %%ymm8\n\t"
                     "vextracti128 $1, %%ymm8, %%xmm9\n\t"
                     "vcvtph2ps %%xmm8, %%ymm8\n\t"
                     "vcvtph2ps %%xmm9, %%ymm9\n\t"
                     "vmulps %%ymm15, %%ymm8, %%ymm8\n\t"
                     "vmulps %%ymm15, %%ymm9, %%ymm9\n\t"
                     "vfmadd231ps %%ymm14, %%ymm8, %%ymm4\n\t"
                     "vfmadd231ps %%ymm14, %%ymm9, %%ymm5\n\t"
                     "vpmovsxbw 48(%0), %%ymm10\n\t"
                     "vpsllw $7, %%ymm10, %%ymm10\n\t"
                     "vpand %%ymm12, %%ymm10, %%ymm10\n\t"
                     "vextracti128 $1, %%ymm10, %%xmm11\n\t"
                     "vcvtph2ps %%xmm10, %%ymm10\n\t"
                     "vcvtph2ps %%xmm11, %%ymm11\n\t"
                     "vmulps %%ymm15, %%ymm10, %%ymm10\n\t"
                     "vmulps %%ymm15, %%ymm11, %%ymm11\n\t"
                     "vfmadd231ps %%ymm14, %%ymm10, %%ymm6\n\t"
                     "vfmadd231ps %%ymm14, %%ymm11, %%ymm7\n\t"
                     "dec %1\n\t"
                     "jnz 1b"
                     : "+r"(p), "+r"(iters)
                     :
                     : BM_CLOBBER);
}

struct bm_mix {
    const char *name;
    double bytes; /* weight bytes per value */
    void (*run)(const uint8_t *p, long iters);
    const char *what;
};

static const struct bm_mix bm_mixes[] = {
    {"fma", 0, mix_fma, "register FMA only (the floor)"},
    {"mul+fma", 0, mix_mul_fma, "scale multiply + FMA (no decode)"},
    {"bf16", 2, mix_bf16, "bf16 (rows_avx2.c): vpmovzxwd m128, vpslld, FMA"},
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

/* Core cycles per second of this thread: a dependent add chain (16M
 * cycles) on its CPU clock, the best of 5. */
static double bm_hz(void)
{
    const long iters = 1000000;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        const double t0 = roof_thread_cpu_now();
        roof_clock_loop(iters);
        const double hz = 16.0 * iters / (roof_thread_cpu_now() - t0);
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
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc && atof(argv[i + 1]) > 0) {
            seconds = atof(argv[++i]);
        } else {
            fprintf(!strcmp(argv[i], "--help") ? stdout : stderr,
                    "usage: %s [--seconds S]\n"
                    "  cycles per 8 weights of the expert kernels' AVX2 instruction mixes at one\n"
                    "  token (L1-resident weights, 8 independent accumulators), and the GB/s of\n"
                    "  weights one core could decode at that rate. S: time per mix (1).\n",
                    argv[0]);
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
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
