/* The kernel table (dnnl_bk_kernels.h): the CPU's flags, and one pass that
 * picks every entry from them and the options. Nothing else in the backend
 * asks which CPU it runs on. */
#include <stdio.h>
#include <string.h>

#include "dnnl_bk.h"

unsigned dnnl_bk_cpu_flags(char *why, size_t why_len)
{
    unsigned f = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        f |= DNNL_BK_CPU_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("fma"))
        f |= DNNL_BK_CPU_AVX512;
    char exp_why[160] = "";
    if ((f & DNNL_BK_CPU_AVX512) && dnnl_bk_avx512_exp_check(exp_why, sizeof exp_why))
        f |= DNNL_BK_CPU_AVX512_EXP;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512bf16"))
        f |= DNNL_BK_CPU_AVX512BF16;
    if (dnnl_bk_amx_available())
        f |= DNNL_BK_CPU_AMX;
    if (why)
        snprintf(why, why_len, "%s", exp_why);
    return f;
}

static const char *const dnnl_bk_keys[DNNL_BK_E_COUNT] = {
    [DNNL_BK_E_MATMUL] = "matmul", [DNNL_BK_E_EXPERT] = "expert",   [DNNL_BK_E_BATCH] = "batch",
    [DNNL_BK_E_Q8_0] = "q8_0",     [DNNL_BK_E_Q4_0] = "q4_0",       [DNNL_BK_E_FP8] = "fp8",
    [DNNL_BK_E_ATTN] = "attn",     [DNNL_BK_E_RMSNORM] = "rmsnorm", [DNNL_BK_E_SILU] = "silu",
    [DNNL_BK_E_EXP] = "exp",       [DNNL_BK_E_BF16] = "bf16",
};

const char *dnnl_bk_entry_key(enum dnnl_bk_entry e)
{
    return e >= 0 && e < DNNL_BK_E_COUNT ? dnnl_bk_keys[e] : "?";
}

/* A row kernel and its name. */
struct dnnl_bk_rows_impl {
    dnnl_bk_rows_fn *fn;
    dnnl_bk_work_fn *work;
    const char *name;
};

void dnnl_bk_kernels_init(struct dnnl_bk_kernels *k, unsigned flags, const struct dnnl_bk_choice *c)
{
    static const struct dnnl_bk_rows_impl amx = {dnnl_bk_rows_amx, dnnl_bk_rows_amx_work, "amx"},
                                          bf16 = {dnnl_bk_rows_avx512bf16, NULL, "avx512bf16"},
                                          avx2 = {dnnl_bk_rows_avx2, NULL, "avx2"},
                                          plain = {dnnl_bk_rows_c, NULL, "c"},
                                          onednn = {NULL, NULL, "onednn"};
    memset(k, 0, sizeof *k);
    /* Matmuls: AMX where the CPU has it (auto or amx), else oneDNN's where
     * it has a bf16 matmul (auto or onednn), else the own kernel. */
    const bool use_amx =
        (flags & DNNL_BK_CPU_AMX) && (c->gemm == DNNL_BK_GEMM_AUTO || c->gemm == DNNL_BK_GEMM_AMX);
    const bool own =
        !use_amx && (c->gemm == DNNL_BK_GEMM_OWN || !(flags & DNNL_BK_CPU_ONEDNN_BF16));
    const struct dnnl_bk_rows_impl *own_impl = (flags & DNNL_BK_CPU_AVX2) ? &avx2 : &plain;
    const struct dnnl_bk_rows_impl *mm = use_amx ? &amx : own ? own_impl : &onednn;
    /* bf16 experts: the matmul's row kernel, or with oneDNN's matmuls the
     * AVX512-BF16 one where it runs. Packed (a oneDNN-blocked copy) only
     * with oneDNN's matmuls: when asked, or by default without a row
     * kernel, where oneDNN reads the raw layout at half the packed speed. */
    const bool bf16_rows = (flags & DNNL_BK_CPU_AVX512BF16) != 0;
    const struct dnnl_bk_rows_impl *ex = mm->fn ? mm : bf16_rows ? &bf16 : &onednn;
    k->expert_layout = !own && (c->layout == DNNL_BK_XL_PACKED ||
                                (c->layout == DNNL_BK_XL_AUTO && !bf16_rows && !use_amx))
                           ? DNNL_BK_PACKED
                           : DNNL_BK_RAW;
    if (k->expert_layout == DNNL_BK_PACKED)
        ex = &onednn;
    k->matmul = mm->fn;
    k->matmul_work = mm->work;
    k->name[DNNL_BK_E_MATMUL] = mm->name;
    k->expert = ex->fn;
    k->expert_work = ex->work;
    k->name[DNNL_BK_E_EXPERT] = k->expert_layout == DNNL_BK_PACKED ? "onednn-packed"
                                : ex->fn                           ? ex->name
                                                                   : "onednn-inplace";
    /* The vector math and attention, unless `simd` asks for the plain twins. */
    const bool v512 = c->simd && (flags & DNNL_BK_CPU_AVX512) && (flags & DNNL_BK_CPU_AVX512_EXP);
    const bool v2 = c->simd && (flags & DNNL_BK_CPU_AVX2);
    /* Experts of few rows one per thread, each on the row kernel inline:
     * the AVX512-BF16 kernel only with the vector math on, as before the
     * table (its serial path is the one `simd = false` checks). */
    k->expert_spread = ex->fn && (ex != &bf16 || v512);
    k->name[DNNL_BK_E_BATCH] = k->expert_spread ? "spread" : "serial";
    const bool q512 = DNNL_BK_Q_AVX512_ON && v2 && (flags & DNNL_BK_CPU_AVX512);
    for (int f = TIDE_QFMT_Q8_0; f < TIDE_QFMT_COUNT; f++) {
        k->quant[f] = q512 ? dnnl_bk_quant_avx512 : v2 ? dnnl_bk_quant_avx2 : dnnl_bk_quant_c;
        k->name[DNNL_BK_E_Q8_0 + f - TIDE_QFMT_Q8_0] = q512 ? "avx512" : v2 ? "avx2" : "c";
    }
    k->attention = v512 ? dnnl_bk_attention_avx512
                   : v2 ? dnnl_bk_attention_avx2
                        : dnnl_bk_attention_c;
    k->name[DNNL_BK_E_ATTN] = v512 ? "avx512" : v2 ? "avx2" : "c";
    k->rmsnorm_row = v512 ? dnnl_bk_rmsnorm_row_avx512 : dnnl_bk_rmsnorm_row_c;
    k->silu_mul_bf16 = v512 ? dnnl_bk_silu_mul_bf16_avx512 : dnnl_bk_silu_mul_bf16_c;
    k->exp_sub = v512 ? dnnl_bk_exp_sub_avx512 : dnnl_bk_exp_sub_c;
    k->to_bf16 = v512 ? dnnl_bk_to_bf16_avx512 : dnnl_bk_to_bf16_c;
    for (int e = DNNL_BK_E_RMSNORM; e <= DNNL_BK_E_BF16; e++)
        k->name[e] = v512 ? "avx512" : "c";
}

const char *dnnl_bk_kernels_str(const struct dnnl_bk_kernels *k, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int e = 0; e < DNNL_BK_E_COUNT && at < len; e++) {
        int n = snprintf(buf + at, len - at, "%s%s=%s", e ? " " : "", dnnl_bk_keys[e],
                         k->name[e] ? k->name[e] : "?");
        at += n > 0 ? (size_t)n : 0;
    }
    return buf;
}
