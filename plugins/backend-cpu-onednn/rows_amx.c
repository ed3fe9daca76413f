/* A bf16 matmul kernel on AMX tiles for the checkpoint's own [N][K] layout:
 * every matmul and inplace expert with `gemm = amx` (the default where the
 * CPU has AMX-BF16 and Linux grants the tile state).
 *
 * y[t][n] = x[t] . w[n] is computed transposed, C = W X^T: the weight rows
 * are the A operand of TDPBF16PS as they lie in memory (16 rows of 32 bf16
 * per tile, the row stride of the matrix), so nothing is repacked and the
 * weights stream from the mapping; the tokens are the B operand, packed once
 * per call into the pair-interleaved (VNNI) layout TDPBF16PS wants, 16
 * tokens per tile (missing tokens are zeros). One TDPBF16PS multiplies a
 * 16 x 32 slice of the weights by 16 tokens in 16 cycles, ~60 bytes of
 * weights per cycle: even one token leaves the memory, not the tiles, as the
 * limit, and 512 tokens stay far below the peak of VDPBF16PS code.
 *
 * Summation order: each output is one f32 accumulator (a tile element)
 * that TDPBF16PS advances over the chunks of 32 k in increasing order,
 * starting from zero; within a chunk the instruction's own order. A tile
 * element depends only on its weight row, its token and that order, never on
 * the other rows or tokens of the tile, so a token's result does not depend
 * on how many tokens share the call or where it sits among them (batch
 * invariance, tests/conformance/test_amx_kernel.c). Rows whose length is not
 * a multiple of 32 run on rows_avx512bf16.c instead (AVX512-BF16, which every AMX
 * CPU has): a choice made by k alone.
 *
 * Threads take blocks of 32 rows; each thread walks its rows a tile of 16
 * at a time, each weight tile against the token tiles two at a time (AK_DOT),
 * with the weight tile double-buffered. The accumulator sets alternate, so a
 * product's results are stored and written out while the next one streams
 * (ak_run). Two weight tiles against one token tile, as earlier versions ran
 * up to 16 tokens, kept 32 rows of 4 KiB pages streaming at once and was
 * slower (1-2-token experts: 228-232 against 212-224 us, 2 threads, Xeon
 * VM). Software prefetch of the next block (or a few chunks ahead in the
 * rows) into L2 was slower than none at 1-8 tokens (bench-expert-ffn:
 * 260-280 against 242-262 us per expert; the variants were removed): the
 * hardware prefetchers follow the rows, and a prefetch holds a line-fill
 * buffer as the tile loads do. */
#include <cpuid.h>
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dnnl_bk.h"

#define AK_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw")))
#define AK_INLINE static inline __attribute__((always_inline)) AK_TARGET

/* Weight rows per tile and per block; tokens per tile; k per chunk. */
#define AK_ROWS  16
#define AK_BLOCK 32
#define AK_TOK   16
#define AK_KC    32
/* Tokens whose results go out per pair of chunks of the next product (AK_DOT). */
#define AK_SPT 4

/* Linux: ask for the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA); without it the first tile instruction raises SIGILL. */
#define AK_ARCH_REQ_XCOMP_PERM 0x1023
#define AK_XFEATURE_XTILEDATA  18

bool dnnl_bk_amx_available(void)
{
    static int state = -1; /* -1 unknown, 0 no, 1 yes */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s >= 0)
        return s == 1;
    unsigned a = 0, b = 0, c = 0, d = 0;
    __builtin_cpu_init();
    bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512bf16");
    if (ok && __get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        ok = (d >> 22 & 1) && (d >> 24 & 1); /* AMX-BF16, AMX-TILE */
    } else {
        ok = false;
    }
#ifdef SYS_arch_prctl
    ok = ok && syscall(SYS_arch_prctl, AK_ARCH_REQ_XCOMP_PERM, AK_XFEATURE_XTILEDATA) == 0;
#else
    ok = false;
#endif
    __atomic_store_n(&state, ok ? 1 : 0, __ATOMIC_RELEASE);
    return ok;
}

/* Palette 1, tiles 0-7 all 16 rows of 64 bytes: 0-3 accumulators, 4-5
 * weights, 6-7 tokens. */
struct ak_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

AK_INLINE void ak_config(void)
{
    struct ak_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = AK_ROWS;
    }
    _tile_loadconfig(&cfg);
}

/* Bytes of the packed tokens and of one thread's short-tile rows. */
static size_t ak_pack_bytes(int64_t m, int64_t k)
{
    return ((size_t)((m + AK_TOK - 1) / AK_TOK * k / 2 * AK_TOK) * sizeof(uint32_t) + 63) &
           ~(size_t)63;
}
static size_t ak_tail_bytes(int64_t k)
{
    return ((size_t)(AK_ROWS * k) * sizeof(uint16_t) + 63) & ~(size_t)63;
}

size_t dnnl_bk_rows_amx_work(int64_t m, int64_t k, int threads)
{
    return 64 + ak_pack_bytes(m, k) + (size_t)(threads > 1 ? threads : 1) * ak_tail_bytes(k);
}

/* a[i][j] becomes a[j][i] (16 x 16 32-bit elements): interleaved in pairs
 * of rows, then pairs of pairs, then 128-bit quarters across 4 and 8 rows;
 * 64 shuffles. */
AK_INLINE void ak_transpose(__m512 a[16])
{
    __m512 b[16];
#pragma GCC unroll 8
    for (int r = 0; r < 16; r += 2) {
        b[r] = _mm512_unpacklo_ps(a[r], a[r + 1]);
        b[r + 1] = _mm512_unpackhi_ps(a[r], a[r + 1]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 16; r += 4)
        for (int h = 0; h < 2; h++) {
            __m512d p = _mm512_castps_pd(b[r + h]), q = _mm512_castps_pd(b[r + h + 2]);
            a[r + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(p, q));
            a[r + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p, q));
        }
#pragma GCC unroll 2
    for (int r = 0; r < 16; r += 8)
        for (int h = 0; h < 4; h++) {
            b[r + h] = _mm512_shuffle_f32x4(a[r + h], a[r + h + 4], 0x88);
            b[r + h + 4] = _mm512_shuffle_f32x4(a[r + h], a[r + h + 4], 0xdd);
        }
#pragma GCC unroll 8
    for (int h = 0; h < 8; h++) {
        a[h] = _mm512_shuffle_f32x4(b[h], b[h + 8], 0x88);
        a[h + 8] = _mm512_shuffle_f32x4(b[h], b[h + 8], 0xdd);
    }
}

/* The tokens x[0..m) as TDPBF16PS's B operand, into b: tiles of AK_TOK
 * tokens, each [k/2][AK_TOK] words holding the pair (x[t][2p], x[t][2p+1])
 * at row p, column t % AK_TOK; zeros past m. 16 x 16 words at a time through
 * ak_transpose (k is a multiple of AK_KC here): word by word, 32 tokens of
 * k = 2048 took 33 us, on one thread, before every matmul of a step. */
static AK_TARGET void ak_pack(const uint16_t *const *x, int64_t m, int64_t k, uint32_t *b)
{
    const int64_t kp = k / 2;
    for (int64_t t0 = 0; t0 < m; t0 += AK_TOK) {
        const int mt = m - t0 < AK_TOK ? (int)(m - t0) : AK_TOK;
        uint32_t *tile = b + t0 / AK_TOK * kp * AK_TOK;
        for (int64_t p0 = 0; p0 < kp; p0 += 16) {
            __m512 a[16];
            for (int t = 0; t < AK_TOK; t++)
                a[t] = t < mt ? _mm512_loadu_ps(x[t0 + t] + 2 * p0) : _mm512_setzero_ps();
            ak_transpose(a);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                _mm512_store_ps(tile + (p0 + i) * AK_TOK, a[i]);
        }
    }
}

/* An accumulator tile c ([16 rows][16 tokens]) out to the token rows:
 * y[t][col + r] = c[r][t] for t < mt, r < nv: a gather of the token's column
 * from the stored tile, one 64-byte store. Element by element, the loads
 * from the lines the tile store had just written stalled, and the stores of
 * a 32-token output layer call took 5 of its 28 ms (157184 rows, 2
 * threads); a register transpose (ak_transpose) instead slowed 1-token
 * experts 5% (its shuffles beside the tile instructions: 234 against 221 us
 * per expert, 2 threads, Xeon VM) and 8-16-token ones 1-2%. Copies only:
 * the bits are the tile's. */
AK_INLINE void ak_scatter(const float *c, int mt, int nv, float *const *y, int64_t col)
{
    const __mmask16 rows = (__mmask16)((1u << nv) - 1);
    /* Element (r, t) of the tile is c[r * AK_TOK + t], AK_TOK = 16. */
    _Static_assert(AK_TOK == 16, "the gather indices assume 16 tokens per tile");
    const __m512i col0 =
        _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int t = 0; t < mt; t++)
        _mm512_mask_storeu_ps(y[t] + col, rows, _mm512_i32gather_ps(col0, c + t, 4));
}

/* A result still in its accumulators: outputs [col, col + nv) of tokens
 * y[0..mt) (mt <= 2 * AK_TOK), in accumulator set `set` (tiles 0-1 or 2-3),
 * `tiles` of them; nv = 0: none. */
struct ak_pend {
    float *const *y;
    int64_t col;
    int nv, mt, set, tiles;
};

/* The pending accumulators to c (the second at c + 256). */
AK_INLINE void ak_pend_store(const struct ak_pend *p, float *c)
{
    if (p->set == 0) {
        _tile_stored(0, c, 64);
        if (p->tiles > 1)
            _tile_stored(1, c + 256, 64);
    } else {
        _tile_stored(2, c, 64);
        if (p->tiles > 1)
            _tile_stored(3, c + 256, 64);
    }
}

/* The next AK_SPT of p's tokens from c out to their rows, after *done of
 * them; p->nv = 0 once all are out. AK_SPT divides AK_TOK: a part never
 * spans two tiles. */
AK_INLINE void ak_pend_part(const float *c, struct ak_pend *p, int *done)
{
    const int t0 = *done, nt = p->mt - t0 < AK_SPT ? p->mt - t0 : AK_SPT;
    ak_scatter(c + t0 / AK_TOK * 256 + t0 % AK_TOK, nt, p->nv, p->y + t0, p->col);
    *done = t0 + nt;
    if (*done == p->mt)
        p->nv = 0;
}

/* One weight tile (16 rows from w, row length k) against NT token tiles (b,
 * b2) into accumulators A0 (A1), over all of k. The weight tile is
 * double-buffered (tiles 4, 5), and with one token tile the token tile too
 * (6, 7). Meanwhile the previous tile's results (*p) go out: stored after
 * the first two chunks, written AK_SPT tokens after each later pair of
 * chunks, once the store has landed. Stored and written at the end of their
 * own tile, the loads from the tile just stored waited for its last product
 * and held back the next tile's loads: 1-16-token experts streamed at
 * 25.5-28.5 GB/s instead of 29.5-30 (2 threads, Xeon VM). */
#define AK_DOT(NT, A0, A1)                                                                         \
    do {                                                                                           \
        const int64_t ws = k * (int64_t)sizeof(uint16_t), bs = AK_TOK * sizeof(uint32_t);          \
        bool stored = false;                                                                       \
        int done = 0;                                                                              \
        _tile_zero(A0);                                                                            \
        if (NT > 1)                                                                                \
            _tile_zero(A1);                                                                        \
        int64_t kc = 0;                                                                            \
        for (; kc + 2 * AK_KC <= k; kc += 2 * AK_KC) {                                             \
            const int64_t k2 = kc + AK_KC;                                                         \
            _tile_loadd(4, w + kc, ws);                                                            \
            _tile_loadd(6, b + kc / 2 * AK_TOK, bs);                                               \
            if (NT > 1)                                                                            \
                _tile_loadd(7, b2 + kc / 2 * AK_TOK, bs);                                          \
            _tile_dpbf16ps(A0, 4, 6);                                                              \
            if (NT > 1)                                                                            \
                _tile_dpbf16ps(A1, 4, 7);                                                          \
            _tile_loadd(5, w + k2, ws);                                                            \
            if (NT > 1) {                                                                          \
                _tile_loadd(6, b + k2 / 2 * AK_TOK, bs);                                           \
                _tile_loadd(7, b2 + k2 / 2 * AK_TOK, bs);                                          \
                _tile_dpbf16ps(A0, 5, 6);                                                          \
                _tile_dpbf16ps(A1, 5, 7);                                                          \
            } else {                                                                               \
                _tile_loadd(7, b + k2 / 2 * AK_TOK, bs);                                           \
                _tile_dpbf16ps(A0, 5, 7);                                                          \
            }                                                                                      \
            if (p->nv && !stored) {                                                                \
                ak_pend_store(p, c);                                                               \
                stored = true;                                                                     \
            } else if (p->nv) {                                                                    \
                ak_pend_part(c, p, &done);                                                         \
            }                                                                                      \
        }                                                                                          \
        if (kc < k) {                                                                              \
            _tile_loadd(4, w + kc, ws);                                                            \
            _tile_loadd(6, b + kc / 2 * AK_TOK, bs);                                               \
            _tile_dpbf16ps(A0, 4, 6);                                                              \
            if (NT > 1) {                                                                          \
                _tile_loadd(7, b2 + kc / 2 * AK_TOK, bs);                                          \
                _tile_dpbf16ps(A1, 4, 7);                                                          \
            }                                                                                      \
        }                                                                                          \
        if (p->nv && !stored)                                                                      \
            ak_pend_store(p, c);                                                                   \
        while (p->nv)                                                                              \
            ak_pend_part(c, p, &done);                                                             \
    } while (0)

#define AK_DEFINE(NT, A0, A1)                                                                      \
    static AK_TARGET void ak_dot_##NT##_##A0(const uint16_t *w, int64_t k, const uint32_t *b,      \
                                             const uint32_t *b2, float *c, struct ak_pend *p)      \
    {                                                                                              \
        (void)b2;                                                                                  \
        AK_DOT(NT, A0, A1);                                                                        \
    }
AK_DEFINE(1, 0, 1)
AK_DEFINE(1, 2, 3)
AK_DEFINE(2, 0, 1)
AK_DEFINE(2, 2, 3)

typedef void (*ak_dot_fn)(const uint16_t *w, int64_t k, const uint32_t *b, const uint32_t *b2,
                          float *c, struct ak_pend *p);
/* [token tiles - 1][accumulator set] */
static const ak_dot_fn ak_fns[2][2] = {{ak_dot_1_0, ak_dot_1_2}, {ak_dot_2_0, ak_dot_2_2}};

/* Blocks [i0, i1) of the segments on the calling thread: tile of 16 rows
 * after tile, each against the token tiles two at a time, the accumulator
 * sets alternating so that one product's results go out while the next
 * streams. tail: AK_ROWS x k elements for a last tile of fewer than 16
 * rows. */
static AK_TARGET void ak_run(const struct dnnl_bk_raw_seg *segs, int64_t i0, int64_t i1, int64_t m,
                             int64_t k, const uint32_t *b, uint16_t *tail)
{
    if (i0 >= i1)
        return;
    float c[2 * 256] __attribute__((aligned(64)));
    struct ak_pend p = {NULL, 0, 0, 0, 0, 0};
    const int64_t tiles = (m + AK_TOK - 1) / AK_TOK, tb = k / 2 * AK_TOK;
    int set = 0;
    ak_config();
    for (int64_t i = i0; i < i1; i++) {
        int64_t r0, r1;
        const struct dnnl_bk_raw_seg *s = dnnl_bk_seg_block(segs, i, AK_BLOCK, &r0, &r1);
        for (int64_t part = 0; part < r1 - r0; part += AK_ROWS) {
            const uint16_t *w = s->w + (r0 + part) * k;
            const int nv = r1 - r0 - part < AK_ROWS ? (int)(r1 - r0 - part) : AK_ROWS;
            if (nv < AK_ROWS) {
                memcpy(tail, w, sizeof(uint16_t) * (size_t)(nv * k));
                memset(tail + nv * k, 0, sizeof(uint16_t) * (size_t)((AK_ROWS - nv) * k));
                w = tail;
            }
            for (int64_t j = 0; j < tiles; j += 2) {
                const int nt = tiles - j >= 2 ? 2 : 1;
                const int64_t t0 = j * AK_TOK;
                ak_fns[nt - 1][set](w, k, b + j * tb, b + (j + 1) * tb, c, &p);
                const int64_t mt = m - t0 < nt * AK_TOK ? m - t0 : nt * AK_TOK;
                p = (struct ak_pend){s->y + t0, r0 + part, nv, (int)mt, set, nt};
                set ^= 1;
            }
        }
    }
    int done = 0;
    if (p.nv)
        ak_pend_store(&p, c);
    while (p.nv)
        ak_pend_part(c, &p, &done);
    _tile_release();
}

struct ak_job {
    const struct dnnl_bk_raw_seg *segs;
    int64_t blocks, m, k;
    const uint32_t *b;
    uint16_t *tails;
};

/* Thread me's contiguous share of the blocks, with its own tail buffer. */
static void ak_job_run(void *c, int me, int nt)
{
    const struct ak_job *j = c;
    ak_run(j->segs, j->blocks * me / nt, j->blocks * (me + 1) / nt, j->m, j->k, j->b,
           (uint16_t *)((char *)j->tails + (size_t)me * ak_tail_bytes(j->k)));
}

void dnnl_bk_rows_amx(const uint16_t *const *x, int64_t m, const struct dnnl_bk_raw_seg *segs,
                      int n_segs, int64_t k, int threads, void *work)
{
    if (m <= 0)
        return;
    if (k % AK_KC) {
        dnnl_bk_rows_avx512bf16(x, m, segs, n_segs, k, threads, NULL);
        return;
    }
    int64_t blocks = 0;
    for (int i = 0; i < n_segs; i++)
        blocks += (segs[i].n + AK_BLOCK - 1) / AK_BLOCK;
    uint32_t *b = (uint32_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    uint16_t *tails = (uint16_t *)((char *)b + ak_pack_bytes(m, k));
    ak_pack(x, m, k, b);
    if (threads <= 1 || blocks < 2) {
        ak_run(segs, 0, blocks, m, k, b, tails);
        return;
    }
    const struct ak_job j = {segs, blocks, m, k, b, tails};
    dnnl_bk_par(threads, ak_job_run, (void *)&j);
}
