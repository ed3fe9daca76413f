/* backend-cuda expert offload: device slots, promotions on the copy stream,
 * page-locking of promotion sources, the pinned rings and the event timers.
 *
 * Ordering of a slot (see cuda_bk.h): slot_load makes the copy stream wait
 * for the slot's `used` event (the last kernel that read it) before the copy,
 * and records `loaded` after it; expert_ffn makes the compute stream wait
 * for `loaded` before reading the slot and records `used` after its last
 * read. Both events are re-recorded each time, and a wait always refers to
 * the most recent record.
 *
 * Sources: a promotion copies straight from the caller's host memory when
 * that memory is a file mapping (the mmapped checkpoint) that could be
 * page-locked with cudaHostRegister (read-only where the device supports it,
 * since the checkpoint is a PROT_READ mapping). Locked ranges stay registered
 * until the backend is destroyed, so the next promotion of the same expert
 * costs nothing extra; the mapping must stay in place that long. Other memory
 * (malloc'd: it may be freed and its addresses reused, which a registration
 * would not notice) is staged through a pinned ring, and so is everything
 * after a failed registration (warned once). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_bk.h"

/* Pending timed spans per timer before the oldest is waited for. */
#define CUDA_TIMER_CAP 1024

/* ---- rings ---------------------------------------------------------------- */

int cuda_ring_init(struct cuda_ring *r, size_t seg_bytes, int n_seg, cudaStream_t stream,
                   const char *what)
{
    memset(r, 0, sizeof *r);
    r->stream = stream;
    r->ev = calloc((size_t)n_seg, sizeof *r->ev);
    r->armed = calloc((size_t)n_seg, sizeof *r->armed);
    if (!r->ev || !r->armed) {
        cuda_ring_free(r);
        return TIDE_E_NOMEM;
    }
    cudaError_t err =
        cudaHostAlloc((void **)&r->host, seg_bytes * (size_t)n_seg, cudaHostAllocDefault);
    for (int i = 0; err == cudaSuccess && i < n_seg; i++)
        err = cudaEventCreateWithFlags(&r->ev[i], cudaEventDisableTiming);
    if (err != cudaSuccess) {
        int rc = cuda_bk_fail(what, "cudaHostAlloc/cudaEventCreateWithFlags", err);
        if (r->host)
            cudaFreeHost(r->host);
        r->host = NULL;
        cuda_ring_free(r);
        return rc;
    }
    r->seg_bytes = seg_bytes;
    r->n_seg = n_seg;
    return TIDE_OK;
}

void cuda_ring_free(struct cuda_ring *r)
{
    for (int i = 0; r->ev && i < r->n_seg; i++)
        if (r->ev[i])
            cudaEventDestroy(r->ev[i]);
    if (r->host)
        cudaFreeHost(r->host);
    free(r->ev);
    free(r->armed);
    memset(r, 0, sizeof *r);
}

int cuda_ring_reserve(struct cuda_ring *r, size_t bytes, void **out)
{
    *out = NULL;
    if (!r->host || bytes > r->seg_bytes)
        return TIDE_OK;
    if (r->off + bytes > r->seg_bytes) {
        /* Close this segment: its event follows every copy issued from it. */
        CUDA_BK_TRY("upload", cudaEventRecord(r->ev[r->cur], r->stream));
        r->armed[r->cur] = true;
        r->cur = (r->cur + 1) % r->n_seg;
        r->off = 0;
        if (r->armed[r->cur]) {
            CUDA_BK_TRY("upload", cudaEventSynchronize(r->ev[r->cur]));
            r->armed[r->cur] = false;
        }
    }
    *out = r->host + (size_t)r->cur * r->seg_bytes + r->off;
    r->off += (bytes + 63) & ~(size_t)63;
    return TIDE_OK;
}

/* ---- timers --------------------------------------------------------------- */

int cuda_timer_begin(struct cuda_timer *t, cudaStream_t stream, int *slot)
{
    if (!t->ev) {
        t->ev = calloc(2 * (size_t)CUDA_TIMER_CAP, sizeof *t->ev);
        if (!t->ev)
            return TIDE_E_NOMEM;
        t->cap = CUDA_TIMER_CAP;
    }
    if (t->n == t->cap) { /* full: wait for the oldest span */
        int rc = cuda_timer_harvest(t, false);
        if (rc == TIDE_OK && t->n == t->cap) {
            CUDA_BK_TRY("timings", cudaEventSynchronize(t->ev[2 * t->head + 1]));
            rc = cuda_timer_harvest(t, false);
        }
        if (rc)
            return rc;
    }
    const int i = (t->head + t->n) % t->cap;
    for (int j = 0; j < 2; j++)
        if (!t->ev[2 * i + j])
            CUDA_BK_TRY("timings", cudaEventCreate(&t->ev[2 * i + j]));
    CUDA_BK_TRY("timings", cudaEventRecord(t->ev[2 * i], stream));
    *slot = i;
    return TIDE_OK;
}

int cuda_timer_end(struct cuda_timer *t, cudaStream_t stream, int slot)
{
    CUDA_BK_TRY("timings", cudaEventRecord(t->ev[2 * slot + 1], stream));
    t->n++;
    return TIDE_OK;
}

int cuda_timer_harvest(struct cuda_timer *t, bool wait)
{
    while (t->n > 0) {
        cudaEvent_t a = t->ev[2 * t->head], b = t->ev[2 * t->head + 1];
        if (wait) {
            CUDA_BK_TRY("timings", cudaEventSynchronize(b));
        } else {
            cudaError_t q = cudaEventQuery(b);
            if (q == cudaErrorNotReady)
                return TIDE_OK;
            if (q != cudaSuccess)
                return cuda_bk_fail("timings", "cudaEventQuery", q);
        }
        float ms = 0.0f;
        CUDA_BK_TRY("timings", cudaEventElapsedTime(&ms, a, b));
        t->seconds += (double)ms * 1e-3;
        t->head = (t->head + 1) % t->cap;
        t->n--;
    }
    return TIDE_OK;
}

void cuda_timer_free(struct cuda_timer *t)
{
    for (int i = 0; t->ev && i < 2 * t->cap; i++)
        if (t->ev[i])
            cudaEventDestroy(t->ev[i]);
    free(t->ev);
    memset(t, 0, sizeof *t);
}

/* ---- page-locked sources -------------------------------------------------- */

void cuda_bk_unpin_all(struct tide_backend *bk)
{
    for (int i = 0; i < bk->n_pins; i++)
        cudaHostUnregister((void *)bk->pins[i].start);
    cudaGetLastError();
    bk->n_pins = 0;
}

/* First pin whose end lies above `addr` (pins are sorted and disjoint). */
static int cuda_pin_find(const struct tide_backend *bk, uintptr_t addr)
{
    int lo = 0, hi = bk->n_pins;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (bk->pins[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Register [start, end) (page-aligned, free of pins) and insert it at `at`. */
static int cuda_pin_add(struct tide_backend *bk, int at, uintptr_t start, uintptr_t end)
{
    if (bk->n_pins == bk->cap_pins) {
        int cap = bk->cap_pins ? 2 * bk->cap_pins : 256;
        struct cuda_pin *p = realloc(bk->pins, sizeof *p * (size_t)cap);
        if (!p)
            return TIDE_E_NOMEM;
        bk->pins = p;
        bk->cap_pins = cap;
    }
    unsigned flags = bk->pin_readonly ? cudaHostRegisterReadOnly : cudaHostRegisterDefault;
    cudaError_t err = cudaHostRegister((void *)start, end - start, flags);
    if (err != cudaSuccess) {
        cudaGetLastError();
        tide_warn(
            CUDA_BK_NAME ": cannot page-lock %zu bytes of promotion source at %p with "
                         "cudaHostRegister (%s: %s); promotions are staged through a pinned ring "
                         "from now on",
            (size_t)(end - start), (void *)start, cudaGetErrorName(err), cudaGetErrorString(err));
        return TIDE_E_DEVICE;
    }
    memmove(&bk->pins[at + 1], &bk->pins[at], sizeof *bk->pins * (size_t)(bk->n_pins - at));
    bk->pins[at] = (struct cuda_pin){.start = start, .end = end};
    bk->n_pins++;
    return TIDE_OK;
}

/* Make every page of [p, p+bytes) page-locked, registering the gaps between
 * ranges locked before. TIDE_OK, or a status when a registration failed. */
static int cuda_pin_cover(struct tide_backend *bk, const void *p, size_t bytes)
{
    const uintptr_t pg = bk->page;
    uintptr_t a = (uintptr_t)p & ~(pg - 1);
    const uintptr_t b = ((uintptr_t)p + bytes + pg - 1) & ~(pg - 1);
    int i = cuda_pin_find(bk, a);
    while (a < b) {
        if (i < bk->n_pins && bk->pins[i].start <= a) { /* a is locked: skip that range */
            a = bk->pins[i].end;
            i++;
            continue;
        }
        uintptr_t gap_end = i < bk->n_pins && bk->pins[i].start < b ? bk->pins[i].start : b;
        int rc = cuda_pin_add(bk, i, a, gap_end);
        if (rc)
            return rc;
        a = gap_end;
        i++; /* past the range just inserted */
    }
    return TIDE_OK;
}

/* Is [p, p+bytes) already page-locked by the ranges registered so far? */
static bool cuda_pin_covered(const struct tide_backend *bk, const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    const uintptr_t b = a + bytes;
    for (int i = cuda_pin_find(bk, a); a < b; i++) {
        if (i >= bk->n_pins || bk->pins[i].start > a)
            return false;
        a = bk->pins[i].end;
    }
    return true;
}

/* Does [p, p+bytes) lie inside one file mapping (a non-zero inode in
 * /proc/self/maps)? Read afresh each time: it is asked only before a new
 * registration, which costs far more. */
static bool cuda_file_backed(const void *p, size_t bytes)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    const uintptr_t a = (uintptr_t)p, b = a + bytes;
    bool found = false;
    char line[512];
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long start, end, inode;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &start, &end, &inode) == 3 && start <= a &&
            b <= end)
            found = inode != 0;
    }
    fclose(f);
    return found;
}

/* Copy host [src, src+bytes) to dst on the copy stream: piecewise from
 * locked ranges, through the staging ring, or (no ring) straight from the
 * source, which stays valid until copy_sync by contract. */
int cuda_bk_promote(struct tide_backend *bk, char *dst, const char *src, size_t bytes)
{
    const char *op = "slot_load";
    bool locked = bk->pin && cuda_pin_covered(bk, src, bytes);
    if (!locked && bk->pin && cuda_file_backed(src, bytes)) {
        locked = cuda_pin_cover(bk, src, bytes) == TIDE_OK;
        bk->pin = locked; /* a failure was warned once by cuda_pin_add */
    }
    if (locked) {
        /* One copy per locked range, so each DMA reads a single registration. */
        uintptr_t s = (uintptr_t)src, e = s + bytes;
        for (int i = cuda_pin_find(bk, s); s < e; i++) {
            uintptr_t piece = bk->pins[i].end < e ? bk->pins[i].end - s : e - s;
            CUDA_BK_TRY(op, cudaMemcpyAsync(dst + (s - (uintptr_t)src), (const void *)s, piece,
                                            cudaMemcpyHostToDevice, bk->copy));
            s += piece;
        }
        return TIDE_OK;
    }
    if (!bk->staging.host && bk->staging_bytes) {
        size_t seg = (bk->staging_bytes / CUDA_BK_STAGING_NSEG) & ~(size_t)4095;
        if (cuda_ring_init(&bk->staging, seg, CUDA_BK_STAGING_NSEG, bk->copy,
                           "slot_load staging ring") != TIDE_OK) {
            tide_warn(CUDA_BK_NAME ": no pinned staging ring: promotions copy from pageable "
                                   "memory");
            bk->staging_bytes = 0;
        }
    }
    for (size_t off = 0; off < bytes;) {
        size_t chunk = bytes - off;
        void *pinned = NULL;
        if (bk->staging.host) {
            chunk = chunk < bk->staging.seg_bytes ? chunk : bk->staging.seg_bytes;
            int rc = cuda_ring_reserve(&bk->staging, chunk, &pinned);
            if (rc)
                return rc;
            memcpy(pinned, src + off, chunk);
        }
        CUDA_BK_TRY(op, cudaMemcpyAsync(dst + off, pinned ? pinned : src + off, chunk,
                                        cudaMemcpyHostToDevice, bk->copy));
        off += chunk;
    }
    return TIDE_OK;
}

/* ---- slots ---------------------------------------------------------------- */

int cuda_bk_slot_create(struct tide_backend *bk, int64_t hidden, int64_t inter,
                        struct tide_expert **out)
{
    if (!bk || !out)
        return cuda_bk_inval("slot_create", "NULL argument");
    return cuda_bk_expert_alloc(bk, hidden, inter, TIDE_QFMT_NONE, NULL, true, "slot_create", out);
}

/* Room for the compressed values and scales of one expert: a promotion then
 * moves the checkpoint's bytes (about 1/2 of bf16 for q8_0 and fp8, 1/4 for
 * q4_0), and the FFN decodes them on the device. */
int cuda_bk_slot_create_q(struct tide_backend *bk, int64_t hidden, int64_t inter, int qfmt,
                          const int qblock[2], struct tide_expert **out)
{
    const char *op = "slot_create_q";
    if (!bk || !out)
        return cuda_bk_inval(op, "NULL argument");
    *out = NULL;
    if (qfmt < 0 || qfmt >= TIDE_QFMT_COUNT)
        return cuda_bk_inval(op, "unknown weight format %d", qfmt);
    return cuda_bk_expert_alloc(bk, hidden, inter, qfmt, qfmt ? qblock : NULL, true, op, out);
}

int cuda_bk_slot_load(struct tide_backend *bk, struct tide_expert *slot,
                      const struct tide_view *gate, const struct tide_view *up,
                      const struct tide_view *down)
{
    const char *op = "slot_load";
    int rc = bk ? cuda_bk_check_expert(op, slot) : cuda_bk_inval(op, "NULL backend");
    if (rc)
        return rc;
    if (!slot->is_slot)
        return cuda_bk_inval(op, "the expert was made by expert_create, not slot_create");
    int64_t H, I;
    /* The views must be in the slot's format: a quantized slot holds no bf16 expert. */
    if ((rc = cuda_bk_check_expert_views(op, slot->qfmt, slot->qblock, gate, up, down, &H, &I)))
        return rc;
    if (H != slot->hidden || I != slot->inter)
        return cuda_bk_inval(op, "expert %s is [%lld,%lld] but the slot holds [%lld,%lld]",
                             gate->name ? gate->name : "?", (long long)I, (long long)H,
                             (long long)slot->inter, (long long)slot->hidden);
    if ((rc = cuda_bk_enter(bk, op)))
        return rc;
    /* Overwrite only after the last kernel that reads the slot. */
    if (slot->use_recorded)
        CUDA_BK_TRY(op, cudaStreamWaitEvent(bk->copy, slot->used, 0));
    int t;
    if ((rc = cuda_timer_begin(&bk->copy_timer, bk->copy, &t)))
        return rc;
    const struct tide_view *v[3] = {gate, up, down};
    if ((rc = cuda_bk_expert_fill(bk, slot, v, false, op)))
        return rc;
    if ((rc = cuda_timer_end(&bk->copy_timer, bk->copy, t)))
        return rc;
    CUDA_BK_TRY(op, cudaEventRecord(slot->loaded, bk->copy));
    slot->load_recorded = true;
    return TIDE_OK;
}

int cuda_bk_copy_sync(struct tide_backend *bk)
{
    int rc = cuda_bk_enter(bk, "copy_sync");
    if (rc)
        return rc;
    CUDA_BK_TRY("copy_sync", cudaStreamSynchronize(bk->copy));
    return cuda_timer_harvest(&bk->copy_timer, false);
}

/* Waits for all issued work, so the sums include every span issued so far. */
int cuda_bk_timings(struct tide_backend *bk, double *copy_seconds, double *expert_seconds)
{
    int rc = cuda_bk_enter(bk, "timings");
    if (!rc)
        rc = cuda_timer_harvest(&bk->copy_timer, true);
    if (!rc)
        rc = cuda_timer_harvest(&bk->expert_timer, true);
    if (rc)
        return rc;
    if (copy_seconds)
        *copy_seconds = bk->copy_timer.seconds;
    if (expert_seconds)
        *expert_seconds = bk->expert_timer.seconds;
    return TIDE_OK;
}
