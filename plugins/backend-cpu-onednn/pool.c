/* The backend's threads: one team for the whole process (dnnl_bk.h,
 * "Threads").
 *
 * Workers wait for a job by watching a generation counter. Inside a round
 * of the engine loop (dnnl_bk_pool_hot: a forward and the decoders' sampling
 * after it) they spin between jobs, so the ops of a forward cost no wake-up;
 * outside one they spin a little, then sleep on a futex, so an idle process
 * keeps no CPU busy. The caller runs its own share of every job and then
 * waits for the workers. One job runs at a time; a job started while another
 * runs (another engine on another thread, or a job inside a job) runs on
 * its caller alone. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dnnl_bk.h"

#define BP_MAX_WORKERS 255
/* Outside a round, a worker waits this many rounds of BP_SPINS pauses and a
 * yield before it sleeps (a fraction of a millisecond on an idle machine):
 * the gaps between the ops of a forward run outside the engine loop (a
 * benchmark, a test) stay without wake-ups too. */
#define BP_IDLE_ROUNDS 64
/* A waiting thread (a worker, or the caller waiting for the workers) spins
 * this many pauses, then yields its CPU once, and again: on an idle machine
 * the yield returns at once; on a busy one (more runnable threads than
 * CPUs, another process spinning too) the thread it waits for gets the CPU
 * instead of a spinner holding it for a whole time slice. */
#define BP_SPINS 256

static struct {
    pthread_mutex_t run;  /* held for a job */
    pthread_mutex_t grow; /* held while workers are added or stopped */
    int n_workers;        /* threads besides the caller */
    pthread_t th[BP_MAX_WORKERS];
    _Atomic uint32_t gen; /* a job is announced by changing it */
    _Atomic int pending;  /* workers that have not finished the job */
    _Atomic int sleepers; /* workers in futex_wait */
    _Atomic int hot;      /* rounds in progress: workers spin */
    _Atomic int stop;
    /* The job (written before gen changes, read after). */
    void (*fn)(void *ctx, int tid, int nt);
    void *ctx;
    int nt;
} bp = {.run = PTHREAD_MUTEX_INITIALIZER, .grow = PTHREAD_MUTEX_INITIALIZER};

static void bp_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    sched_yield();
#endif
}

/* One step of a wait: a pause, and every BP_SPINS of them a yield. */
static void bp_wait_step(unsigned spins)
{
    if (spins % BP_SPINS == BP_SPINS - 1)
        sched_yield();
    else
        bp_pause();
}

static void bp_futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void bp_futex_wake_all(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

struct bp_worker {
    int tid;
    uint32_t seen;
};

static void *bp_main(void *arg)
{
    const struct bp_worker w = *(struct bp_worker *)arg;
    free(arg);
    uint32_t seen = w.seen;
    for (;;) {
        uint32_t g;
        unsigned spins = 0; /* unsigned: a long hot wait wraps, harmlessly */
        while ((g = atomic_load_explicit(&bp.gen, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&bp.stop, memory_order_relaxed))
                return NULL;
            if (atomic_load_explicit(&bp.hot, memory_order_relaxed) > 0 ||
                spins < BP_IDLE_ROUNDS * BP_SPINS) {
                bp_wait_step(spins++);
                continue;
            }
            atomic_fetch_add(&bp.sleepers, 1);
            bp_futex_wait(&bp.gen, seen);
            atomic_fetch_sub(&bp.sleepers, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load_explicit(&bp.stop, memory_order_relaxed))
            return NULL;
        if (w.tid < bp.nt)
            bp.fn(bp.ctx, w.tid, bp.nt);
        atomic_fetch_sub_explicit(&bp.pending, 1, memory_order_release);
    }
}

/* At least n workers (threads - 1), under bp.run (no job in flight). */
static void bp_grow(int n)
{
    if (n > BP_MAX_WORKERS)
        n = BP_MAX_WORKERS;
    pthread_mutex_lock(&bp.grow);
    while (bp.n_workers < n) {
        struct bp_worker *w = malloc(sizeof *w);
        if (!w)
            break;
        *w = (struct bp_worker){.tid = bp.n_workers + 1, .seen = atomic_load(&bp.gen)};
        if (pthread_create(&bp.th[bp.n_workers], NULL, bp_main, w) != 0) {
            free(w);
            break;
        }
        bp.n_workers++;
    }
    pthread_mutex_unlock(&bp.grow);
}

void dnnl_bk_par(int nt, void (*fn)(void *ctx, int tid, int nt), void *ctx)
{
    if (nt <= 1 || pthread_mutex_trylock(&bp.run) != 0) {
        fn(ctx, 0, 1);
        return;
    }
    if (bp.n_workers < nt - 1)
        bp_grow(nt - 1);
    if (nt > bp.n_workers + 1)
        nt = bp.n_workers + 1; /* the threads could not all start */
    bp.fn = fn;
    bp.ctx = ctx;
    bp.nt = nt;
    atomic_store_explicit(&bp.pending, bp.n_workers, memory_order_relaxed);
    atomic_fetch_add_explicit(&bp.gen, 1, memory_order_seq_cst);
    if (atomic_load(&bp.sleepers) > 0)
        bp_futex_wake_all(&bp.gen);
    fn(ctx, 0, nt);
    for (unsigned spins = 0; atomic_load_explicit(&bp.pending, memory_order_acquire) > 0; spins++)
        bp_wait_step(spins);
    pthread_mutex_unlock(&bp.run);
}

struct bp_for {
    void (*fn)(void *ctx, int64_t i0, int64_t i1);
    void *ctx;
    int64_t n;
};

/* Thread tid's contiguous share of [0, n), as OpenMP's static schedule. */
static void bp_for_job(void *c, int tid, int nt)
{
    const struct bp_for *f = c;
    const int64_t i0 = f->n * tid / nt, i1 = f->n * (tid + 1) / nt;
    if (i0 < i1)
        f->fn(f->ctx, i0, i1);
}

void dnnl_bk_par_for(int nt, int64_t n, void (*fn)(void *ctx, int64_t i0, int64_t i1), void *ctx)
{
    if (n <= 0)
        return;
    if (nt > n)
        nt = (int)n;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    struct bp_for f = {fn, ctx, n};
    dnnl_bk_par(nt, bp_for_job, &f);
}

void dnnl_bk_pool_hot(bool on)
{
    atomic_fetch_add(&bp.hot, on ? 1 : -1);
}

/* The workers run this plugin's code: they stop before it is unloaded. */
__attribute__((destructor)) static void bp_stop(void)
{
    pthread_mutex_lock(&bp.run);
    pthread_mutex_lock(&bp.grow);
    atomic_store(&bp.stop, 1);
    atomic_fetch_add(&bp.gen, 1);
    bp_futex_wake_all(&bp.gen);
    for (int i = 0; i < bp.n_workers; i++)
        pthread_join(bp.th[i], NULL);
    bp.n_workers = 0;
    pthread_mutex_unlock(&bp.grow);
    pthread_mutex_unlock(&bp.run);
}
