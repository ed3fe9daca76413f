/* backend-cpu-onednn: the plugin descriptor, options, instance lifecycle,
 * memory and weights. The kernel table (kernels.c) says which file computes
 * what; experts and slots live in experts.c, the matmul and expert FFN ops
 * in gemm.c, the other ops in ops.c.
 *
 * Every op runs inline on the calling thread and is complete on return, so
 * `sync` has nothing to wait for. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dnnl_bk.h"
#include "tide/option.h"
#include "tide/plugin.h"

/* The options choose among the kernels the CPU runs (kernels.c): `gemm` the
 * matmul and expert entries, `expert_layout` where bf16 experts live
 * (inplace: the checkpoint's rows, no copy; packed: a oneDNN-blocked copy,
 * slightly faster, twice the memory), `simd` vector entries or their plain
 * C twins. docs/cpu-performance.md has the measurements behind the
 * defaults; the helps feed docs/config.md (tools/update-config-doc.sh). */
static const struct tide_option dnnl_bk_options[] = {
    {"threads", TIDE_OPT_INT, "0",
     "threads for oneDNN and the other ops (OpenMP); 0 = every core this process may use", NULL,
     "[0,]"},
    {"expert_layout", TIDE_OPT_ENUM, "auto",
     "routed experts: inplace = use the checkpoint's memory as it is; packed = a oneDNN-blocked "
     "copy in host RAM (0-30% faster, +1 copy of every expert); auto = inplace when the CPU "
     "has AVX512-BF16, else packed",
     "auto|inplace|packed", NULL},
    {"gemm", TIDE_OPT_ENUM, "auto",
     "the matmul and expert entries of the kernel table: amx = rows_amx.c for every matmul and "
     "inplace expert (AMX-BF16 tiles, the checkpoint's rows read in place, no packed copies); "
     "onednn = oneDNN's bf16 matmuls (and rows_avx512bf16.c for inplace experts); own = the own "
     "kernel for every matmul (rows_avx2.c, or rows_c.c without AVX2); each keeps one "
     "summation order per output whatever the row count; auto = amx where the CPU has "
     "AMX-BF16, else onednn where it has a bf16 matmul (AVX512), else own",
     "auto|amx|onednn|own", NULL},
    {"simd", TIDE_OPT_BOOL, "true",
     "vector entries of the kernel table (attention, rmsnorm, exp, SiLU, bf16 rows, quantized "
     "experts, the expert batch): AVX-512 where the CPU has it, else AVX2 attention and "
     "quantized experts; the same bits as their plain C twins, which false selects (for "
     "checking)",
     NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

int dnnl_bk_fail(const char *op, const char *call, dnnl_status_t st)
{
    tide_error(DNNL_BK_NAME ": %s: oneDNN call %s failed: %s", op, call, dnnl_status2str(st));
    return TIDE_E_DEVICE;
}

const struct bkc_id dnnl_bk_id = {DNNL_BK_NAME, DNNL_BK_BUF_MAGIC};

void dnnl_bk_enter(struct tide_backend *bk)
{
    if (omp_get_max_threads() != bk->threads)
        omp_set_num_threads(bk->threads);
}

static void dnnl_bk_round_begin(struct tide_backend *bk)
{
    (void)bk;
    dnnl_bk_pool_hot(true);
}

static void dnnl_bk_round_end(struct tide_backend *bk)
{
    (void)bk;
    dnnl_bk_pool_hot(false);
}

static void dnnl_bk_parallel(struct tide_backend *bk, int nt_max,
                             void (*fn)(void *ctx, int tid, int nt), void *ctx)
{
    dnnl_bk_par(nt_max < bk->threads ? nt_max : bk->threads, fn, ctx);
}

/* 64-byte aligned allocation rounded up to whole cache lines; NULL on failure. */
static void *dnnl_bk_alloc(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}

void *dnnl_bk_alloc_weight(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge || !DNNL_BK_HUGE_WEIGHTS)
        return dnnl_bk_alloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, huge, (bytes + 63) & ~(size_t)63) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

int dnnl_bk_scratch(struct tide_backend *bk, size_t bytes)
{
    if (bytes <= bk->scratch_bytes)
        return TIDE_OK;
    size_t want = bytes + bytes / 4;
    void *p = dnnl_bk_alloc(want);
    if (!p) {
        tide_error(DNNL_BK_NAME ": cannot allocate %zu bytes of scratch memory", want);
        return TIDE_E_NOMEM;
    }
    free(bk->scratch);
    bk->scratch = p;
    bk->scratch_bytes = want;
    return TIDE_OK;
}

static const char *dnnl_bk_isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41:
        return "sse41";
    case dnnl_cpu_isa_avx:
        return "avx";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic:
        return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
        return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    default:
        return "unknown";
    }
}

/* Index of `s` in names[n], or -1. */
static int dnnl_bk_pick(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

/* Cap oneDNN below AMX, before its first use. oneDNN 2.6's AMX brgemm gives
 * a row other bits when the call has another number of rows, so oneDNN
 * dispatches to AVX512-BF16 at most (batch invariant) and AMX runs in
 * rows_amx.c. The cap is process-wide; a cap the user set
 * (ONEDNN_MAX_CPU_ISA) is kept unless it lets AMX in. */
static int dnnl_bk_cap_isa(void)
{
    const char *isa_env = getenv("ONEDNN_MAX_CPU_ISA");
    if (!isa_env)
        isa_env = getenv("DNNL_MAX_CPU_ISA");
    if (!isa_env)
        dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16);
    if (dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx) {
        tide_error(DNNL_BK_NAME ": oneDNN dispatches to AMX (%s%s), and its AMX matmuls are "
                                "not batch invariant; set it to AVX512_CORE_BF16 or lower",
                   isa_env ? "ONEDNN_MAX_CPU_ISA = "
                           : "its ISA was fixed before this backend "
                             "could cap it",
                   isa_env ? isa_env : "");
        return TIDE_E_UNSUPPORTED;
    }
    return TIDE_OK;
}

/* The CPU's flags for the kernel table, with oneDNN's bf16 matmul on eng;
 * the reasons when the AVX-512 exp or that matmul is missing. */
static unsigned dnnl_bk_flags(dnnl_engine_t eng, char *exp_why, size_t exp_len, char *bf16_why,
                              size_t bf16_len)
{
    unsigned flags = dnnl_bk_cpu_flags(exp_why, exp_len);
    if (dnnl_bk_has_bf16(eng, bf16_why, bf16_len))
        flags |= DNNL_BK_CPU_ONEDNN_BF16;
    return flags;
}

/* The description: oneDNN and the options as resolved, then the table. */
static void dnnl_bk_set_desc(struct tide_backend *bk, const struct dnnl_bk_choice *c)
{
    const struct dnnl_bk_kernels *k = &bk->kern;
    const dnnl_version_t *v = dnnl_version();
    const char *gemm = !k->matmul                       ? "onednn"
                       : k->matmul == dnnl_bk_rows_amx  ? "amx"
                       : k->matmul == dnnl_bk_rows_avx2 ? "own (avx2)"
                                                        : "own (plain C)";
    const char *simd = k->attention == dnnl_bk_attention_avx512 ? "on"
                       : k->attention == dnnl_bk_attention_avx2 ? "avx2"
                                                                : "off";
    char table[256];
    snprintf(bk->desc, sizeof bk->desc,
             "oneDNN %d.%d.%d, %d thread%s, isa %s, gemm %s, experts %s%s, simd %s; kernels: %s",
             v->major, v->minor, v->patch, bk->threads, bk->threads == 1 ? "" : "s",
             dnnl_bk_isa_name(dnnl_get_effective_cpu_isa()), gemm,
             k->expert_layout == DNNL_BK_PACKED ? "packed" : "inplace",
             c->layout == DNNL_BK_XL_AUTO ? " (auto)" : "", simd,
             dnnl_bk_kernels_str(k, table, sizeof table));
}

/* ---- lifecycle ---------------------------------------------------------- */

static void dnnl_bk_destroy(struct tide_backend *bk)
{
    if (!bk)
        return;
    if (bk->n_experts)
        tide_warn(DNNL_BK_NAME ": destroyed with %d experts still alive", bk->n_experts);
    dnnl_bk_prims_free(bk);
    if (bk->stream)
        dnnl_stream_destroy(bk->stream);
    if (bk->eng)
        dnnl_engine_destroy(bk->eng);
    free(bk->scratch);
    free(bk->rope_cs);
    free(bk);
}

static int dnnl_bk_create(const struct tide_backend_args *args, struct tide_backend **out)
{
    int rc = bkc_check_create(&dnnl_bk_id, args, out);
    if (rc)
        return rc;
    int64_t threads = args->opts ? tide_opts_int(args->opts, "threads") : 0;
    const char *layout = args->opts ? tide_opts_str(args->opts, "expert_layout") : "auto";
    const char *gemm = args->opts ? tide_opts_str(args->opts, "gemm") : "auto";
    if (threads < 0 || threads > 4096)
        return dnnl_bk_inval("create", "threads = %lld is outside [0, 4096]", (long long)threads);
    struct dnnl_bk_choice choice = {.simd = args->opts ? tide_opts_bool(args->opts, "simd") : true};
    static const char *const layouts[] = {"auto", "inplace", "packed"};
    static const char *const gemms[] = {"auto", "amx", "onednn", "own"};
    int li = dnnl_bk_pick(layouts, 3, layout), gi = dnnl_bk_pick(gemms, 4, gemm);
    if (li < 0)
        return dnnl_bk_inval("create", "expert_layout = '%s', expected auto, inplace or packed",
                             layout);
    if (gi < 0)
        return dnnl_bk_inval("create", "gemm = '%s', expected auto, amx, onednn or own", gemm);
    choice.layout = (enum dnnl_bk_xl)li;
    choice.gemm = (enum dnnl_bk_gemm)gi;

    if ((rc = dnnl_bk_cap_isa()))
        return rc;

    struct tide_backend *bk = calloc(1, sizeof *bk);
    if (!bk)
        return TIDE_E_NOMEM;
    bk->role = args->role;
    bk->threads = threads ? (int)threads : omp_get_num_procs();
    dnnl_status_t st = dnnl_engine_create(&bk->eng, dnnl_cpu, 0);
    if (st == dnnl_success)
        st = dnnl_stream_create(&bk->stream, bk->eng, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        dnnl_bk_destroy(bk);
        return dnnl_bk_fail("create", "dnnl_engine_create/dnnl_stream_create", st);
    }
    char exp_why[160], bf16_why[128];
    const unsigned flags =
        dnnl_bk_flags(bk->eng, exp_why, sizeof exp_why, bf16_why, sizeof bf16_why);
    if (choice.gemm == DNNL_BK_GEMM_ONEDNN && !(flags & DNNL_BK_CPU_ONEDNN_BF16)) {
        tide_error(DNNL_BK_NAME ": gemm = onednn, but %s; set gemm = own (or auto)", bf16_why);
        dnnl_bk_destroy(bk);
        return TIDE_E_UNSUPPORTED;
    }
    if (choice.gemm == DNNL_BK_GEMM_AMX && !(flags & DNNL_BK_CPU_AMX)) {
        tide_error(DNNL_BK_NAME ": gemm = amx, but this CPU has no AMX-BF16 (or Linux refused "
                                "the tile state); set gemm = onednn, own or auto");
        dnnl_bk_destroy(bk);
        return TIDE_E_UNSUPPORTED;
    }
    dnnl_bk_kernels_init(&bk->kern, flags, &choice);
    const bool vec512 = (flags & DNNL_BK_CPU_AVX512) && (flags & DNNL_BK_CPU_AVX512_EXP);
    if (choice.simd && (flags & DNNL_BK_CPU_AVX512) && !vec512)
        tide_info(DNNL_BK_NAME ": AVX-512 simd kernels off: %s%s", exp_why,
                  flags & DNNL_BK_CPU_AVX2
                      ? "; attention runs on AVX2 (same bits as the plain loops)"
                      : "");
    const bool own = bk->kern.matmul == dnnl_bk_rows_avx2 || bk->kern.matmul == dnnl_bk_rows_c;
    if (own && choice.gemm != DNNL_BK_GEMM_OWN)
        tide_info(DNNL_BK_NAME ": %s: every matmul runs on the backend's own %s kernel", bf16_why,
                  bk->kern.matmul == dnnl_bk_rows_avx2 ? "AVX2" : "plain C");
    if (own && choice.layout == DNNL_BK_XL_PACKED)
        tide_info(DNNL_BK_NAME ": expert_layout = packed needs oneDNN's matmul (gemm = own "
                               "here): experts stay inplace");
    dnnl_bk_set_desc(bk, &choice);
    *out = bk;
    return TIDE_OK;
}

static const char *dnnl_bk_describe(const struct tide_backend *bk)
{
    return bk ? bk->desc : DNNL_BK_NAME;
}

/* ---- memory ------------------------------------------------------------- */

static int dnnl_bk_buffer_alloc(struct tide_backend *bk, size_t bytes, struct tide_buffer **out)
{
    if (!bk || !out)
        return dnnl_bk_inval("buffer_alloc", "NULL backend or out pointer");
    *out = NULL;
    struct tide_buffer *b = malloc(sizeof *b);
    void *p = dnnl_bk_alloc(bytes);
    if (!b || !p) {
        free(b);
        free(p);
        tide_error(DNNL_BK_NAME ": buffer_alloc: cannot allocate %zu bytes", bytes);
        return TIDE_E_NOMEM;
    }
    memset(p, 0, bytes);
    b->magic = DNNL_BK_BUF_MAGIC;
    b->ptr = p;
    b->bytes = bytes;
    b->owned = true;
    *out = b;
    return TIDE_OK;
}

static int dnnl_bk_buffer_wrap(struct tide_backend *bk, void *host, size_t bytes,
                               struct tide_buffer **out)
{
    if (!bk || !out)
        return dnnl_bk_inval("buffer_wrap", "NULL backend or out pointer");
    *out = NULL;
    if (!host && bytes)
        return dnnl_bk_inval("buffer_wrap", "NULL host memory of %zu bytes", bytes);
    struct tide_buffer *b = malloc(sizeof *b);
    if (!b)
        return TIDE_E_NOMEM;
    *b = (struct tide_buffer){DNNL_BK_BUF_MAGIC, host, bytes, false};
    *out = b;
    return TIDE_OK;
}

static void dnnl_bk_buffer_free(struct tide_backend *bk, struct tide_buffer *buf)
{
    if (!buf)
        return;
    buf->magic = 0;
    if (buf->owned)
        free(buf->ptr);
    free(buf);
}

static void *dnnl_bk_buffer_host_ptr(struct tide_backend *bk, struct tide_buffer *buf)
{
    return buf && buf->magic == DNNL_BK_BUF_MAGIC ? buf->ptr : NULL;
}

/* Copy between packed host rows and a view, in the direction `to_view`. */
static int dnnl_bk_copy(const char *op, const struct tide_tensor *t, void *host, bool to_view)
{
    int rc = bkc_check_tensor(&dnnl_bk_id, op, to_view ? "dst" : "src", t, BKC_ANY);
    if (rc)
        return rc;
    if (!host && t->rows && t->cols)
        return dnnl_bk_inval(op, "host pointer is NULL");
    size_t row = (size_t)t->cols * tide_dtype_size(t->dtype);
    for (int64_t r = 0; r < t->rows; r++) {
        char *v = dnnl_bk_at(t, r, 0), *h = (char *)host + (size_t)r * row;
        memcpy(to_view ? v : h, to_view ? h : v, row);
    }
    return TIDE_OK;
}

static int dnnl_bk_write(struct tide_backend *bk, const struct tide_tensor *dst, const void *src)
{
    return dnnl_bk_copy("write", dst, (void *)src, true);
}

static int dnnl_bk_read(struct tide_backend *bk, const struct tide_tensor *src, void *dst)
{
    return dnnl_bk_copy("read", src, dst, false);
}

/* ---- weights ------------------------------------------------------------ */

static void dnnl_bk_weight_destroy(struct tide_backend *bk, struct tide_weight *w)
{
    if (!w)
        return;
    dnnl_bk_mat_free(&w->mat);
    free(w->vec);
    free(w);
}

/* MATMUL: prepacked once (oneDNN), or the checkpoint's rows (own and AMX kernels). bf16 is the
 * contract for matmul inputs, so an f32 or f16 checkpoint tensor is rounded to bf16 (nearest even)
 * first. */
static int dnnl_bk_weight_matmul(struct tide_backend *bk, const struct tide_view *src,
                                 struct tide_weight *w)
{
    w->rows = src->shape[0];
    w->cols = src->shape[1];
    const void *rows = src->data;
    uint16_t *tmp = NULL;
    if (src->dtype != TIDE_DTYPE_BF16) {
        tmp = malloc(sizeof *tmp * (size_t)(w->rows * w->cols));
        if (!tmp)
            return TIDE_E_NOMEM;
        for (int64_t i = 0; i < w->rows * w->cols; i++)
            tmp[i] = tide_f32_to_bf16(bkc_view_f32(src, i));
        rows = tmp;
    }
    /* A row kernel reads the rows where they are (a converted copy is
     * kept); the AMX kernel reads a copy in 2 MiB pages, which streams
     * faster than a mapped checkpoint's page cache (docs/cpu-performance.md);
     * routed experts stay in place. */
    const bool amx = bk->kern.matmul == dnnl_bk_rows_amx;
    int rc = bk->kern.matmul ? dnnl_bk_mat_init(bk, &w->mat, rows, w->rows, w->cols, DNNL_BK_RAW,
                                                tmp != NULL || amx, w->name)
                             : dnnl_bk_mat_init(bk, &w->mat, rows, w->rows, w->cols, DNNL_BK_PACKED,
                                                true, w->name);
    free(tmp);
    return rc;
}

static int dnnl_bk_weight_create(struct tide_backend *bk, const struct tide_view *src,
                                 enum tide_weight_kind kind, struct tide_weight **out)
{
    int rc = bkc_check_weight_create(&dnnl_bk_id, bk, src, kind, out);
    if (rc)
        return rc;
    const char *name = src->name ? src->name : "?";
    struct tide_weight *w = calloc(1, sizeof *w);
    if (!w)
        return TIDE_E_NOMEM;
    w->kind = kind;
    w->dtype = src->dtype;
    snprintf(w->name, sizeof w->name, "%s", name);
    dnnl_bk_enter(bk);
    switch (kind) {
    case TIDE_WEIGHT_MATMUL:
        rc = dnnl_bk_weight_matmul(bk, src, w);
        break;
    case TIDE_WEIGHT_VECTOR: {
        int64_t c = tide_view_numel(src);
        w->rows = 1;
        w->cols = c;
        w->vec = malloc(sizeof(float) * (size_t)c);
        if (!w->vec) {
            rc = TIDE_E_NOMEM;
            break;
        }
        for (int64_t i = 0; i < c; i++)
            w->vec[i] = bkc_view_f32(src, i);
        break;
    }
    case TIDE_WEIGHT_EMBED:
        w->rows = src->shape[0];
        w->cols = src->shape[1];
        w->data = src->data;
        break;
    }
    if (rc) {
        if (rc == TIDE_E_NOMEM)
            tide_error(DNNL_BK_NAME ": weight_create: out of memory for weight %s", name);
        dnnl_bk_weight_destroy(bk, w);
        return rc;
    }
    *out = w;
    return TIDE_OK;
}

static int dnnl_bk_sync(struct tide_backend *bk)
{
    return TIDE_OK;
}

/* "MemAvailable:" / "MemTotal:" of /proc/meminfo in bytes, 0 when absent. */
static uint64_t dnnl_bk_meminfo(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    return p ? strtoull(p + strlen(key), NULL, 10) * 1024u : 0;
}

/* Host RAM: what the kernel reports as available without swapping, and the total. */
static int dnnl_bk_mem_info(struct tide_backend *bk, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (!free_bytes || !total_bytes)
        return dnnl_bk_inval("mem_info", "NULL out pointer");
    char text[4096] = "";
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    uint64_t avail = dnnl_bk_meminfo(text, "MemAvailable:");
    uint64_t total = dnnl_bk_meminfo(text, "MemTotal:");
    if (!avail || !total) { /* no procfs: what sysconf knows */
        long page = sysconf(_SC_PAGESIZE), av = sysconf(_SC_AVPHYS_PAGES),
             ph = sysconf(_SC_PHYS_PAGES);
        if (page <= 0 || av < 0 || ph <= 0) {
            tide_error(DNNL_BK_NAME ": mem_info: cannot read /proc/meminfo or sysconf");
            return TIDE_E_IO;
        }
        avail = (uint64_t)av * (uint64_t)page;
        total = (uint64_t)ph * (uint64_t)page;
    }
    *free_bytes = avail;
    *total_bytes = total;
    return TIDE_OK;
}

/* ---- descriptor --------------------------------------------------------- */

bool dnnl_bk_has_bf16(dnnl_engine_t eng, char *why, size_t why_len)
{
    dnnl_memory_desc_t s, w, d;
    dnnl_matmul_desc_t mm;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_init_by_tag(&s, 2, (dnnl_dims_t){1, 32}, dnnl_bf16, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&w, 2, (dnnl_dims_t){32, 16}, dnnl_bf16, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&d, 2, (dnnl_dims_t){1, 16}, dnnl_f32, dnnl_ab);
    dnnl_status_t st = dnnl_matmul_desc_init(&mm, &s, &w, NULL, &d);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(&pd, &mm, NULL, eng, NULL);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success)
        snprintf(why, why_len, "oneDNN has no bf16 matmul on this CPU (%s)", dnnl_status2str(st));
    return st == dnnl_success;
}

/* Can oneDNN run here at all? (Without its bf16 matmul the own kernel
 * serves every matmul, so that is not a refusal.) At debug level (`tide
 * --verbose plugins`) it logs the kernel table of the default options. */
static int dnnl_bk_probe(char *why, size_t why_len)
{
    /* The cap first (create's), unless the user set one: create judges that. */
    const bool user_isa = getenv("ONEDNN_MAX_CPU_ISA") || getenv("DNNL_MAX_CPU_ISA");
    const bool capped = !user_isa && dnnl_bk_cap_isa() == TIDE_OK;
    dnnl_engine_t eng = NULL;
    dnnl_status_t st = dnnl_engine_create(&eng, dnnl_cpu, 0);
    if (st != dnnl_success) {
        snprintf(why, why_len, "oneDNN cannot create a CPU engine: %s", dnnl_status2str(st));
        return TIDE_E_DEVICE;
    }
    if (capped) {
        char exp_why[160], bf16_why[128], table[256];
        const unsigned flags =
            dnnl_bk_flags(eng, exp_why, sizeof exp_why, bf16_why, sizeof bf16_why);
        struct dnnl_bk_kernels k;
        dnnl_bk_kernels_init(&k, flags, &(struct dnnl_bk_choice){.simd = true});
        tide_debug(DNNL_BK_NAME ": kernels (default options): %s",
                   dnnl_bk_kernels_str(&k, table, sizeof table));
    }
    dnnl_engine_destroy(eng);
    return TIDE_OK;
}

static const struct tide_backend_ops dnnl_bk_ops = {
    .size = sizeof(struct tide_backend_ops),
    .create = dnnl_bk_create,
    .destroy = dnnl_bk_destroy,
    .describe = dnnl_bk_describe,
    .buffer_alloc = dnnl_bk_buffer_alloc,
    .buffer_free = dnnl_bk_buffer_free,
    .buffer_host_ptr = dnnl_bk_buffer_host_ptr,
    .buffer_wrap = dnnl_bk_buffer_wrap,
    .round_begin = dnnl_bk_round_begin,
    .round_end = dnnl_bk_round_end,
    .parallel = dnnl_bk_parallel,
    .write = dnnl_bk_write,
    .read = dnnl_bk_read,
    .weight_create = dnnl_bk_weight_create,
    .weight_destroy = dnnl_bk_weight_destroy,
    .expert_create = dnnl_bk_expert_create,
    .expert_destroy = dnnl_bk_expert_destroy,
    .embed = dnnl_bk_embed,
    .matmul = dnnl_bk_matmul,
    .rmsnorm = dnnl_bk_rmsnorm,
    .rope = dnnl_bk_rope,
    .attention = dnnl_bk_attention,
    .swiglu = dnnl_bk_swiglu,
    .add = dnnl_bk_add,
    .convert = dnnl_bk_convert,
    .router = dnnl_bk_router,
    .expert_ffn = dnnl_bk_expert_ffn,
    .moe_combine = dnnl_bk_moe_combine,
    .sync = dnnl_bk_sync,
    .slot_create = dnnl_bk_slot_create,
    .slot_load = dnnl_bk_slot_load,
    .gather_rows = dnnl_bk_gather_rows,
    .scatter_rows = dnnl_bk_scatter_rows,
    .copy_sync = dnnl_bk_copy_sync,
    .timings = dnnl_bk_timings,
    .mem_info = dnnl_bk_mem_info,
    .expert_ffn_batch = dnnl_bk_expert_ffn_batch,
    .slot_create_q = dnnl_bk_slot_create_q,
};

static const struct tide_plugin_desc dnnl_bk_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_BACKEND,
    .name = DNNL_BK_NAME,
    .version = "0.1.0",
    .summary = "CPU backend: oneDNN bf16 matmuls (prepacked weights), AVX512-BF16 expert "
               "kernel on the checkpoint layout, OpenMP ops",
    .ops = &dnnl_bk_ops,
    .options = dnnl_bk_options,
    .probe = dnnl_bk_probe,
};

TIDE_PLUGIN_DEFINE(dnnl_bk_desc)
