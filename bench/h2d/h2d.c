/* bench-h2d: host-to-device copy bandwidth, the PCIe constant of the
 * offload cost model, for the ways backend-cuda can source a promotion:
 *   pinned      cudaHostAlloc'd memory (the roofline: every ratio is to it);
 *   pageable    malloc'd memory, touched first;
 *   registered  malloc'd memory page-locked with cudaHostRegister;
 *   mmap-ro     a read-only private file mapping (how the checkpoint is
 *               mapped) page-locked with cudaHostRegisterReadOnly: the
 *               in-place promotion path; skipped if the device refuses;
 *   staged      pageable memory copied chunk by chunk into a pinned ring of
 *               8 x 8 MiB segments, each chunk's DMA overlapping the next
 *               memcpy: backend-cuda's fallback path.
 * Each copy goes on one stream and is timed on the host (issue to stream
 * synchronised); the median of the repetitions is reported.
 *
 * Output: CSV on stdout, "mode,bytes,reps,median_s,gb_per_s,ratio_to_pinned"
 * (GB = 1e9 bytes). Exit 0, 1 on a CUDA error, 77 when there is no device.
 * usage: bench-h2d [--quick] [--device N] */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#define H2D_SEG      ((size_t)8 << 20)
#define H2D_NSEG     8
#define H2D_MAX_REPS 20

static double h2d_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Print a failed call and return false. */
static bool h2d_ok(cudaError_t e, const char *call)
{
    if (e == cudaSuccess)
        return true;
    fprintf(stderr, "bench-h2d: %s: %s: %s\n", call, cudaGetErrorName(e), cudaGetErrorString(e));
    return false;
}

#define H2D_TRY(call)                                                                              \
    do {                                                                                           \
        if (!h2d_ok((call), #call))                                                                \
            return -1.0;                                                                           \
    } while (0)

struct h2d_ring {
    char *host;
    cudaEvent_t ev[H2D_NSEG];
    bool armed[H2D_NSEG];
};

/* One timed copy of `bytes` from src to dst; staged through `ring` when set.
 * Returns seconds, or -1 on a CUDA error. */
static double h2d_copy(void *dst, const char *src, size_t bytes, cudaStream_t s,
                       struct h2d_ring *ring)
{
    double t0 = h2d_now();
    if (!ring) {
        H2D_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    } else {
        int seg = 0;
        for (size_t off = 0; off < bytes; off += H2D_SEG, seg = (seg + 1) % H2D_NSEG) {
            size_t n = bytes - off < H2D_SEG ? bytes - off : H2D_SEG;
            if (ring->armed[seg])
                H2D_TRY(cudaEventSynchronize(ring->ev[seg]));
            char *p = ring->host + (size_t)seg * H2D_SEG;
            memcpy(p, src + off, n);
            H2D_TRY(cudaMemcpyAsync((char *)dst + off, p, n, cudaMemcpyHostToDevice, s));
            H2D_TRY(cudaEventRecord(ring->ev[seg], s));
            ring->armed[seg] = true;
        }
    }
    H2D_TRY(cudaStreamSynchronize(s));
    return h2d_now() - t0;
}

static int h2d_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median seconds of `reps` copies after two warm-ups; -1 on error. */
static double h2d_median(void *dst, const char *src, size_t bytes, cudaStream_t s,
                         struct h2d_ring *ring, int reps)
{
    double t[H2D_MAX_REPS];
    for (int i = -2; i < reps; i++) {
        double dt = h2d_copy(dst, src, bytes, s, ring);
        if (dt < 0)
            return -1.0;
        if (i >= 0)
            t[i] = dt;
    }
    qsort(t, (size_t)reps, sizeof t[0], h2d_cmp);
    return t[reps / 2];
}

/* A read-only private mapping of a temporary file holding `bytes`. */
static char *h2d_map_file(size_t bytes)
{
    char path[] = "/tmp/tide-bench-h2d-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    unlink(path);
    char *buf = malloc(H2D_SEG);
    bool ok = buf != NULL;
    if (ok)
        memset(buf, 0x3c, H2D_SEG);
    for (size_t off = 0; ok && off < bytes; off += H2D_SEG) {
        size_t n = bytes - off < H2D_SEG ? bytes - off : H2D_SEG;
        ok = pwrite(fd, buf, n, (off_t)off) == (ssize_t)n;
    }
    free(buf);
    void *map = ok ? mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED)
        return NULL;
    madvise(map, bytes, MADV_WILLNEED);
    /* Fault every page in, so the copy measures the transfer, not the disk. */
    volatile char sink = 0;
    for (size_t off = 0; off < bytes; off += 4096)
        sink ^= ((volatile char *)map)[off];
    (void)sink;
    return map;
}

static void h2d_report(const char *mode, size_t bytes, int reps, double sec, double pinned_sec)
{
    double gbs = (double)bytes / sec / 1e9;
    printf("%s,%zu,%d,%.6e,%.3f,%.3f\n", mode, bytes, reps, sec, gbs,
           pinned_sec > 0 ? pinned_sec / sec : 1.0);
    fflush(stdout);
    fprintf(stderr, "  %-10s %8.1f MiB  %7.2f GB/s  (%.2f of pinned)\n", mode,
            (double)bytes / (1 << 20), gbs, pinned_sec > 0 ? pinned_sec / sec : 1.0);
}

/* Copies from `src` page-locked in place with cudaHostRegister(flags),
 * reported as `mode`; a refused registration is noted and skipped. Returns 0,
 * or 1 on a CUDA error during the copies. */
static int h2d_in_place(const char *mode, void *dev, char *src, size_t bytes, unsigned flags,
                        cudaStream_t s, int reps, double pinned_sec)
{
    cudaError_t e = cudaHostRegister(src, bytes, flags);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fprintf(stderr, "  %-10s skipped: cudaHostRegister(flags %u) failed: %s\n", mode, flags,
                cudaGetErrorName(e));
        return 0;
    }
    double t = h2d_median(dev, src, bytes, s, NULL, reps);
    cudaHostUnregister(src);
    if (t < 0)
        return 1;
    h2d_report(mode, bytes, reps, t, pinned_sec);
    return 0;
}

/* All modes at one size; returns 0 or 1 on a CUDA error. */
static int h2d_size(size_t bytes, int reps, cudaStream_t s, struct h2d_ring *ring, bool ro)
{
    void *dev = NULL;
    char *pinned = NULL, *pageable = malloc(bytes);
    if (!pageable || !h2d_ok(cudaMalloc(&dev, bytes), "cudaMalloc") ||
        !h2d_ok(cudaHostAlloc((void **)&pinned, bytes, cudaHostAllocDefault), "cudaHostAlloc")) {
        free(pageable);
        cudaFree(dev);
        return 1;
    }
    memset(pageable, 0x5a, bytes);
    memset(pinned, 0x5a, bytes);
    int rc = 0;
    double tp = h2d_median(dev, pinned, bytes, s, NULL, reps);
    double tq = tp > 0 ? h2d_median(dev, pageable, bytes, s, NULL, reps) : -1.0;
    double ts = tq > 0 ? h2d_median(dev, pageable, bytes, s, ring, reps) : -1.0;
    if (ts < 0) {
        rc = 1;
    } else {
        h2d_report("pinned", bytes, reps, tp, tp);
        h2d_report("pageable", bytes, reps, tq, tp);
        h2d_report("staged", bytes, reps, ts, tp);
    }
    if (rc == 0)
        rc = h2d_in_place("registered", dev, pageable, bytes, cudaHostRegisterDefault, s, reps, tp);
    char *map = rc == 0 ? h2d_map_file(bytes) : NULL;
    if (map) {
        rc = h2d_in_place("mmap-ro", dev, map, bytes,
                          ro ? cudaHostRegisterReadOnly : cudaHostRegisterDefault, s, reps, tp);
        munmap(map, bytes);
    }
    cudaFreeHost(pinned);
    cudaFree(dev);
    free(pageable);
    return rc;
}

int main(int argc, char **argv)
{
    bool quick = false;
    int device = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            device = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench-h2d [--quick] [--device N]\n");
            return 2;
        }
    }
    int count = -1; /* left at -1 when the call fails */
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        fprintf(stderr, "skipped: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "none found");
        return 77;
    }
    struct cudaDeviceProp p;
    int ro = 0;
    if (!h2d_ok(cudaSetDevice(device), "cudaSetDevice") ||
        !h2d_ok(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties"))
        return 1;
    if (cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, device) !=
        cudaSuccess)
        ro = 0;
    fprintf(stderr, "bench-h2d: %s, read-only registration %ssupported\n", p.name,
            ro ? "" : "not ");
    cudaStream_t s;
    struct h2d_ring ring = {0};
    if (!h2d_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !h2d_ok(cudaHostAlloc((void **)&ring.host, H2D_SEG * H2D_NSEG, cudaHostAllocDefault),
                "cudaHostAlloc"))
        return 1;
    for (int i = 0; i < H2D_NSEG; i++)
        if (!h2d_ok(cudaEventCreateWithFlags(&ring.ev[i], cudaEventDisableTiming),
                    "cudaEventCreate"))
            return 1;
    printf("mode,bytes,reps,median_s,gb_per_s,ratio_to_pinned\n");
    /* 6 MiB: one LLaDA2.0-mini expert (gate+up+down, bf16). */
    const size_t full[] = {(size_t)6 << 20, (size_t)64 << 20, (size_t)512 << 20};
    const size_t small[] = {(size_t)6 << 20, (size_t)16 << 20};
    const size_t *sizes = quick ? small : full;
    const int n = quick ? 2 : 3;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = h2d_size(sizes[i], quick ? 3 : (sizes[i] > ((size_t)64 << 20) ? 5 : 15), s, &ring,
                      ro != 0);
    for (int i = 0; i < H2D_NSEG; i++)
        cudaEventDestroy(ring.ev[i]);
    cudaFreeHost(ring.host);
    cudaStreamDestroy(s);
    return rc;
}
