/* An emulated CUDA runtime and cuBLAS: the subset backend-cuda calls,
 * implemented on the host so the backend runs, and is tested, on machines
 * without a GPU (tests/gpu/emu/README.md says what it checks and what not).
 *
 * Streams are queues of deferred commands. Nothing runs when it is issued
 * unless the schedule says so (TIDE_CUDA_EMU_SCHEDULE):
 *   lazy      (default) a stream runs only when the host waits for it, or
 *             when another stream waits on one of its events;
 *   eager     every command runs at once (a sequential program);
 *   random:S  after each call, a random stream runs a few commands, or to
 *             its end, or nothing runs (seed S);
 *   eager-even / eager-odd: streams created 0th, 2nd, 4th... (or 1st, 3rd...)
 *             run at once, the others lazily. backend-cuda creates its compute
 *             stream and then its copy stream, so eager-even runs kernels
 *             before promotions that they do not wait for, eager-odd runs
 *             promotions before kernels issued earlier that they do not wait for.
 * Host memory is read and written when a copy runs, not when it is issued,
 * as a DMA engine does. So a missing stream/event dependency, or a host
 * buffer reused before its copy ran, gives wrong values under some schedule.
 *
 * Device memory is plain host memory filled with 0xff (NaN in f32 and bf16)
 * at allocation, followed by 256 canary bytes checked at every free and
 * synchronisation; freed memory is poisoned and kept until all streams are
 * idle. Copies, memsets and GEMMs check that their device ranges lie inside
 * one allocation and their host ranges outside all of them.
 *
 * Other switches: TIDE_CUDA_EMU_NO_DEVICE=1 (cudaGetDeviceCount fails with
 * cudaErrorNoDevice), TIDE_CUDA_EMU_REGISTER_FAIL=1 (cudaHostRegister fails).
 * One host thread at a time drives the emulation. */
#include "emu_cuda.h" /* first: it defines __shared__ before the CUDA headers do */

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <vector>

emu::idx3 threadIdx, blockIdx, blockDim, gridDim;

struct CUstream_st;
struct CUevent_st;

namespace
{

constexpr unsigned char kPoison = 0xff; /* NaN in f32 and bf16 */
constexpr size_t kCanary = 256;
constexpr size_t kFiberStack = 256 << 10;

struct Stream;

struct Event {
    bool timing = true;
    uint64_t issued = 0;                  /* id of the most recent record */
    std::map<uint64_t, Stream *> pending; /* records issued, not yet run */
    double t = 0.0;                       /* stream clock when the latest record ran */
    bool destroyed = false;
};

struct Cmd {
    std::function<void()> fn; /* work, or empty for a record / wait */
    Event *ev = nullptr;
    uint64_t id = 0;
    bool wait = false;
    double cost = 1e-6; /* simulated seconds */
};

struct Stream {
    std::deque<Cmd> q;
    double clock = 0.0;
    bool destroyed = false;
    bool eager = false; /* under eager-even / eager-odd */
};

struct Block {
    void *base;  /* malloc'd */
    size_t size; /* user bytes; the canary follows */
};

enum class Schedule { lazy, eager, random, eager_even, eager_odd };

struct State {
    std::map<uintptr_t, Block> dev;     /* device allocations by start */
    std::map<uintptr_t, size_t> pinned; /* cudaHostAlloc */
    std::map<uintptr_t, size_t> reg;    /* cudaHostRegister */
    std::vector<void *> graveyard;      /* freed, poisoned, released when streams are idle */
    std::vector<std::unique_ptr<Stream>> streams, dead; /* dead: destroyed, kept for checks */
    std::vector<std::unique_ptr<Event>> events;
    cudaError_t last = cudaSuccess, sticky = cudaSuccess;
    Schedule schedule = Schedule::lazy;
    std::mt19937_64 rng;
    bool no_device = false, register_fail = false;
    State()
    {
        const char *s = getenv("TIDE_CUDA_EMU_SCHEDULE");
        if (s && !strcmp(s, "eager")) {
            schedule = Schedule::eager;
        } else if (s && !strcmp(s, "eager-even")) {
            schedule = Schedule::eager_even;
        } else if (s && !strcmp(s, "eager-odd")) {
            schedule = Schedule::eager_odd;
        } else if (s && !strncmp(s, "random", 6)) {
            schedule = Schedule::random;
            rng.seed(s[6] == ':' ? strtoull(s + 7, nullptr, 10) : 1);
        }
        no_device = getenv("TIDE_CUDA_EMU_NO_DEVICE") && atoi(getenv("TIDE_CUDA_EMU_NO_DEVICE"));
        register_fail =
            getenv("TIDE_CUDA_EMU_REGISTER_FAIL") && atoi(getenv("TIDE_CUDA_EMU_REGISTER_FAIL"));
    }
};

State &S()
{
    static State s;
    return s;
}

cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Record an API error (returned by cudaGetLastError) and say why on stderr. */
cudaError_t fail(cudaError_t e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda-emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    S().last = e;
    return e;
}

/* A fault while device work ran: every later synchronisation reports it. */
void fault(cudaError_t e, const char *what)
{
    fprintf(stderr, "cuda-emu: device fault: %s\n", what);
    if (S().sticky == cudaSuccess)
        S().sticky = e;
}

/* Is [p, p+n) inside one device allocation? */
bool in_dev(const void *p, size_t n)
{
    auto &d = S().dev;
    uintptr_t a = (uintptr_t)p;
    auto it = d.upper_bound(a);
    if (it == d.begin())
        return false;
    --it;
    return a >= it->first && a + n <= it->first + it->second.size;
}

/* Does [p, p+n) touch any device allocation? */
bool touches_dev(const void *p, size_t n)
{
    auto &d = S().dev;
    uintptr_t a = (uintptr_t)p, b = a + (n ? n : 1);
    auto it = d.lower_bound(b);
    if (it == d.begin())
        return false;
    --it;
    return it->first + it->second.size + kCanary > a;
}

void check_canaries()
{
    for (auto &kv : S().dev) {
        const unsigned char *c = (const unsigned char *)kv.second.base + kv.second.size;
        for (size_t i = 0; i < kCanary; i++)
            if (c[i] != kPoison) {
                char msg[160];
                snprintf(msg, sizeof msg,
                         "a kernel or copy wrote past the end of the %zu-byte "
                         "device allocation at %p",
                         kv.second.size, kv.second.base);
                fault(cudaErrorIllegalAddress, msg);
                memset((void *)c, kPoison, kCanary);
                break;
            }
    }
}

Stream *stream_of(cudaStream_t s, const char *call)
{
    Stream *p = reinterpret_cast<Stream *>(s);
    if (!p) {
        fail(cudaErrorInvalidResourceHandle,
             "%s on the legacy default stream: backend-cuda must use its own streams", call);
        return nullptr;
    }
    if (p->destroyed) {
        fail(cudaErrorInvalidResourceHandle, "%s on a destroyed stream", call);
        return nullptr;
    }
    return p;
}

void exec(Stream *s);

/* Run streams until record `id` of e has run. */
void run_record(Event *e, uint64_t id)
{
    for (;;) {
        auto it = e->pending.find(id);
        if (it == e->pending.end())
            return;
        exec(it->second);
    }
}

/* Run the command at the front of s. */
void exec(Stream *s)
{
    Cmd c = std::move(s->q.front());
    s->q.pop_front();
    if (c.wait) {
        run_record(c.ev, c.id);
        s->clock = std::max(s->clock, c.ev->t);
    } else if (c.ev) {
        c.ev->pending.erase(c.id);
        if (c.id == c.ev->issued)
            c.ev->t = s->clock;
    } else {
        if (S().sticky == cudaSuccess)
            c.fn();
        s->clock += c.cost;
    }
}

void drain(Stream *s)
{
    while (!s->q.empty())
        exec(s);
}

/* Release freed memory once nothing can still refer to it. */
void bury()
{
    for (auto &s : S().streams)
        if (!s->q.empty())
            return;
    for (void *p : S().graveyard)
        free(p);
    S().graveyard.clear();
}

/* After every call that issues work: run what the schedule says. */
void pump()
{
    State &st = S();
    if (st.schedule == Schedule::eager || st.schedule == Schedule::eager_even ||
        st.schedule == Schedule::eager_odd) {
        for (auto &s : st.streams)
            if (st.schedule == Schedule::eager || s->eager)
                drain(s.get());
    } else if (st.schedule == Schedule::random) {
        /* A third of the time nothing runs, a third a few commands of one
         * stream, a third one stream to its end: every relative order of
         * two streams turns up. */
        std::vector<Stream *> busy;
        for (auto &s : st.streams)
            if (!s->q.empty())
                busy.push_back(s.get());
        const unsigned pick = (unsigned)(st.rng() % 3);
        if (!busy.empty() && pick) {
            Stream *s = busy[st.rng() % busy.size()];
            for (int n = pick == 1 ? 1 + (int)(st.rng() % 3) : INT32_MAX; n > 0 && !s->q.empty();
                 n--)
                exec(s);
        }
    }
    bury();
}

void enqueue(Stream *s, std::function<void()> fn, double cost)
{
    Cmd c;
    c.fn = std::move(fn);
    c.cost = cost;
    s->q.push_back(std::move(c));
    pump();
}

double copy_cost(size_t bytes)
{
    return 1e-6 + (double)bytes / 25e9;
}

/* ---- fibers: the threads of one block --------------------------------------- */

/* A fiber switch: swapcontext, or on x86-64 a few instructions that save the
 * callee-saved registers on the current stack and swap stack pointers
 * (swapcontext also saves the signal mask, a system call per switch, which
 * made the attention kernel's barriers dominate the run time). */
#if defined(__x86_64__)
extern "C" void tide_emu_switch(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".globl tide_emu_switch\n"
        ".hidden tide_emu_switch\n"
        ".type tide_emu_switch,@function\n"
        "tide_emu_switch:\n"
        "    pushq %rbp\n    pushq %rbx\n    pushq %r12\n"
        "    pushq %r13\n    pushq %r14\n    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n    popq %r14\n    popq %r13\n"
        "    popq %r12\n    popq %rbx\n    popq %rbp\n"
        "    ret\n"
        ".size tide_emu_switch, .-tide_emu_switch\n");
struct Context {
    void *sp;
};
#else
struct Context {
    ucontext_t uc;
};
#endif

enum class FiberState { ready, barrier, done };

struct Fiber {
    Context ctx;
    std::unique_ptr<char[]> stack;
    FiberState state;
};

Context g_sched;
std::vector<Fiber> g_fibers;
unsigned g_cur;
bool g_direct; /* threads after the first run as plain calls: no barrier seen */
const std::function<void()> *g_body;

void to_scheduler(Fiber &f)
{
#if defined(__x86_64__)
    tide_emu_switch(&f.ctx.sp, g_sched.sp);
#else
    swapcontext(&f.ctx.uc, &g_sched.uc);
#endif
}

void fiber_entry()
{
    (*g_body)();
    g_fibers[g_cur].state = FiberState::done;
    to_scheduler(g_fibers[g_cur]); /* never resumed */
}

void start_fiber(unsigned t)
{
    Fiber &f = g_fibers[t];
    if (!f.stack)
        f.stack.reset(new char[kFiberStack]);
    f.state = FiberState::ready;
#if defined(__x86_64__)
    /* The frame tide_emu_switch pops: six registers, then the address it
     * returns to. After that `ret`, rsp is 8 below a 16-byte boundary, as at
     * the entry of a called function. */
    uintptr_t top = ((uintptr_t)f.stack.get() + kFiberStack) & ~(uintptr_t)15;
    void **sp = (void **)(top - 8);
    *--sp = (void *)fiber_entry;
    for (int i = 0; i < 6; i++)
        *--sp = nullptr;
    f.ctx.sp = sp;
#else
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc.uc_stack.ss_size = kFiberStack;
    f.ctx.uc.uc_link = nullptr;
    makecontext(&f.ctx.uc, fiber_entry, 0);
#endif
}

void resume(unsigned t)
{
    g_cur = t;
    threadIdx = {t, 0, 0};
#if defined(__x86_64__)
    tide_emu_switch(&g_sched.sp, g_fibers[t].ctx.sp);
#else
    swapcontext(&g_sched.uc, &g_fibers[t].ctx.uc);
#endif
}

/* Run one block of n threads. Thread 0 runs first as a fiber; if it ends
 * without reaching a barrier, the others run as plain calls (a barrier they
 * reach then is divergent, an error). Otherwise every thread is a fiber and
 * all of them are brought to each barrier in turn. */
void run_block(unsigned n, const std::function<void()> &body)
{
    if (g_fibers.size() < n)
        g_fibers.resize(n);
    g_body = &body;
    start_fiber(0);
    resume(0);
    if (g_fibers[0].state == FiberState::done) {
        g_direct = true;
        for (unsigned t = 1; t < n; t++) {
            threadIdx = {t, 0, 0};
            body();
        }
        g_direct = false;
        return;
    }
    for (unsigned t = 1; t < n; t++)
        start_fiber(t);
    for (unsigned t = 1; t < n; t++)
        resume(t);
    for (;;) {
        unsigned done = 0, waiting = 0;
        for (unsigned t = 0; t < n; t++)
            (g_fibers[t].state == FiberState::done ? done : waiting)++;
        if (waiting == 0)
            return;
        if (done != 0) {
            fault(cudaErrorLaunchFailure,
                  "__syncthreads() reached by only some threads of a block");
            return;
        }
        for (unsigned t = 0; t < n; t++) {
            g_fibers[t].state = FiberState::ready;
            resume(t);
        }
    }
}

} // namespace

namespace emu
{

void syncthreads()
{
    if (g_direct) {
        fault(cudaErrorLaunchFailure,
              "__syncthreads() reached by a thread after thread 0 finished without one");
        return;
    }
    g_fibers[g_cur].state = FiberState::barrier;
    to_scheduler(g_fibers[g_cur]);
}

void launch(cudaStream_t stream, unsigned blocks, unsigned threads, std::function<void()> body)
{
    Stream *s = stream_of(stream, "kernel launch");
    if (!s)
        return;
    if (blocks == 0 || threads == 0 || threads > 1024) {
        fail(cudaErrorInvalidConfiguration, "kernel launch with %u blocks of %u threads", blocks,
             threads);
        return;
    }
    enqueue(
        s,
        [blocks, threads, body]() {
            gridDim = {blocks, 1, 1};
            blockDim = {threads, 1, 1};
            for (unsigned b = 0; b < blocks && S().sticky == cudaSuccess; b++) {
                blockIdx = {b, 0, 0};
                run_block(threads, body);
            }
        },
        2e-6);
}

} // namespace emu

/* ---- runtime API -------------------------------------------------------------- */

extern "C" {

cudaError_t cudaGetDeviceCount(int *count)
{
    if (S().no_device)
        return S().last = cudaErrorNoDevice;
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device != 0)
        return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): one device is emulated", device);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device != 0)
        return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", device);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "TIDE emulated CUDA device");
    prop->totalGlobalMem = (size_t)8 << 30;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (device != 0)
        return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute(device %d)", device);
    switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
        *value = 9;
        break;
    case cudaDevAttrComputeCapabilityMinor:
        *value = 0;
        break;
    case cudaDevAttrHostRegisterReadOnlySupported:
        *value = 1;
        break;
    default:
        *value = 0;
    }
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = 13000;
    return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidPitchValue:
        return "cudaErrorInvalidPitchValue";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
        return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered:
        return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNotSupported:
        return "cudaErrorNotSupported";
    default:
        return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    return e == cudaSuccess ? "no error" : "emulated CUDA error (see cuda-emu messages)";
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = S().sticky != cudaSuccess ? S().sticky : S().last;
    S().last = cudaSuccess;
    return e;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    *free_b = *total = (size_t)8 << 30;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
    *p = nullptr;
    if (size == 0)
        return cudaSuccess;
    void *b = aligned_alloc(256, (size + kCanary + 255) & ~(size_t)255);
    if (!b)
        return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu)", size);
    memset(b, kPoison, size + kCanary);
    S().dev[(uintptr_t)b] = Block{b, size};
    *p = b;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    auto it = S().dev.find((uintptr_t)p);
    if (it == S().dev.end())
        return fail(cudaErrorInvalidValue, "cudaFree(%p): not a device allocation", p);
    check_canaries();
    memset(p, kPoison, it->second.size);
    S().graveyard.push_back(p);
    S().dev.erase(it);
    bury();
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    *p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    if (!*p)
        return fail(cudaErrorMemoryAllocation, "cudaHostAlloc(%zu)", size);
    memset(*p, 0xa5, size);
    S().pinned[(uintptr_t)*p] = size;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    auto it = S().pinned.find((uintptr_t)p);
    if (it == S().pinned.end())
        return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not from cudaHostAlloc", p);
    memset(p, 0xa5, it->second);
    S().graveyard.push_back(p);
    S().pinned.erase(it);
    bury();
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags)
{
    if (S().register_fail)
        return fail(cudaErrorNotSupported,
                    "cudaHostRegister refused (TIDE_CUDA_EMU_REGISTER_FAIL)");
    if (!p || !size || (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterReadOnly)))
        return fail(cudaErrorInvalidValue, "cudaHostRegister(%p, %zu, flags %u)", p, size, flags);
    if (touches_dev(p, size))
        return fail(cudaErrorInvalidValue, "cudaHostRegister of device memory");
    uintptr_t a = (uintptr_t)p, b = a + size;
    auto &r = S().reg;
    auto it = r.lower_bound(b);
    if (it != r.begin() && (--it)->first + it->second > a)
        return fail(cudaErrorHostMemoryAlreadyRegistered,
                    "cudaHostRegister(%p, %zu) overlaps the registration at %#lx (%zu bytes)", p,
                    size, (unsigned long)it->first, it->second);
    r[a] = size;
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    auto it = S().reg.find((uintptr_t)p);
    if (it == S().reg.end())
        return fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister(%p)", p);
    S().reg.erase(it);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    static unsigned created;
    S().streams.push_back(std::unique_ptr<Stream>(new Stream));
    S().streams.back()->eager = (created++ % 2 == 0) == (S().schedule == Schedule::eager_even);
    *s = reinterpret_cast<cudaStream_t>(S().streams.back().get());
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    Stream *s = stream_of(stream, "cudaStreamDestroy");
    if (!s)
        return cudaErrorInvalidResourceHandle;
    drain(s); /* the work completes; the handle goes away at once */
    s->destroyed = true;
    auto &v = S().streams;
    for (auto it = v.begin(); it != v.end(); ++it)
        if (it->get() == s) {
            S().dead.push_back(std::move(*it));
            v.erase(it);
            break;
        }
    bury();
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    Stream *s = stream_of(stream, "cudaStreamSynchronize");
    if (!s)
        return cudaErrorInvalidResourceHandle;
    drain(s);
    check_canaries();
    bury();
    return S().sticky;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    Stream *s = stream_of(stream, "cudaStreamWaitEvent");
    Event *e = reinterpret_cast<Event *>(event);
    if (!s)
        return cudaErrorInvalidResourceHandle;
    if (!e || e->destroyed)
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on a bad event");
    Cmd c;
    c.wait = true;
    c.ev = e;
    c.id = e->issued;
    s->q.push_back(std::move(c));
    pump();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    S().events.push_back(std::unique_ptr<Event>(new Event));
    S().events.back()->timing = !(flags & cudaEventDisableTiming);
    *event = reinterpret_cast<cudaEvent_t>(S().events.back().get());
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    Event *e = reinterpret_cast<Event *>(event);
    if (!e || e->destroyed)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy on a bad event");
    e->destroyed = true; /* kept: pending records may still refer to it */
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    Stream *s = stream_of(stream, "cudaEventRecord");
    Event *e = reinterpret_cast<Event *>(event);
    if (!s)
        return cudaErrorInvalidResourceHandle;
    if (!e || e->destroyed)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord on a bad event");
    Cmd c;
    c.ev = e;
    c.id = ++e->issued;
    e->pending[c.id] = s;
    s->q.push_back(std::move(c));
    pump();
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    Event *e = reinterpret_cast<Event *>(event);
    if (!e || e->destroyed)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize on a bad event");
    run_record(e, e->issued);
    check_canaries();
    bury();
    return S().sticky;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    Event *e = reinterpret_cast<Event *>(event);
    if (!e || e->destroyed)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery on a bad event");
    if (S().sticky != cudaSuccess)
        return S().sticky;
    return e->pending.count(e->issued) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    Event *a = reinterpret_cast<Event *>(start), *b = reinterpret_cast<Event *>(end);
    if (!a || !b || a->destroyed || b->destroyed || !a->timing || !b->timing)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaEventElapsedTime: bad events or events without timing");
    if (!a->issued || !b->issued || a->pending.count(a->issued) || b->pending.count(b->issued))
        return S().last = cudaErrorNotReady;
    *ms = (float)((b->t - a->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t stream)
{
    Stream *s = stream_of(stream, "cudaMemsetAsync");
    if (!s)
        return cudaErrorInvalidResourceHandle;
    if (!in_dev(p, count))
        return fail(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %zu) outside device memory", p,
                    count);
    enqueue(
        s, [p, value, count]() { memset(p, value, count); }, copy_cost(count));
    return cudaSuccess;
}

/* Check the device and host sides of a copy of `extent` bytes at dst and src. */
static cudaError_t check_copy(void *dst, const void *src, size_t dext, size_t sext,
                              enum cudaMemcpyKind kind, const char *call)
{
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        ok = in_dev(dst, dext) && !touches_dev(src, sext);
        break;
    case cudaMemcpyDeviceToHost:
        ok = in_dev(src, sext) && !touches_dev(dst, dext);
        break;
    case cudaMemcpyDeviceToDevice:
        ok = in_dev(dst, dext) && in_dev(src, sext);
        break;
    default:
        return fail(cudaErrorInvalidValue, "%s: kind %d is not used by backend-cuda", call,
                    (int)kind);
    }
    if (!ok)
        return fail(cudaErrorInvalidValue,
                    "%s(dst %p [%zu bytes], src %p [%zu bytes], kind %d): a device range is not "
                    "inside one allocation, or a host range touches device memory",
                    call, dst, dext, src, sext, (int)kind);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    Stream *s = stream_of(stream, "cudaMemcpyAsync");
    if (!s)
        return cudaErrorInvalidResourceHandle;
    if (!count)
        return cudaSuccess;
    cudaError_t e = check_copy(dst, src, count, count, kind, "cudaMemcpyAsync");
    if (e != cudaSuccess)
        return e;
    enqueue(
        s, [dst, src, count]() { memmove(dst, src, count); }, copy_cost(count));
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream)
{
    Stream *s = stream_of(stream, "cudaMemcpy2DAsync");
    if (!s)
        return cudaErrorInvalidResourceHandle;
    if (dpitch < width || spitch < width)
        return fail(cudaErrorInvalidPitchValue, "cudaMemcpy2DAsync: pitch %zu/%zu < width %zu",
                    dpitch, spitch, width);
    if (!width || !height)
        return cudaSuccess;
    cudaError_t e = check_copy(dst, src, (height - 1) * dpitch + width,
                               (height - 1) * spitch + width, kind, "cudaMemcpy2DAsync");
    if (e != cudaSuccess)
        return e;
    enqueue(
        s,
        [=]() {
            for (size_t r = 0; r < height; r++)
                memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
        },
        copy_cost(width * height));
    return cudaSuccess;
}

} // extern "C"

/* ---- cuBLAS ------------------------------------------------------------------- */

struct cublasContext {
    cudaStream_t stream = nullptr;
};

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
    *h = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int *v)
{
    *v = 130100;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
        return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error (see cuda-emu messages)";
}

/* C = alpha op(A) op(B) + beta C, column-major, bf16 or f32 inputs (both
 * the same), f32 output and accumulation (in order over k, one of the orders
 * the contract allows). */
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                            int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((Atype != CUDA_R_16BF && Atype != CUDA_R_32F) || Btype != Atype || Ctype != CUDA_R_32F ||
        compute != CUBLAS_COMPUTE_32F) {
        fprintf(stderr, "cuda-emu: cublasGemmEx: only bf16 x bf16 or f32 x f32 -> f32 with 32F "
                        "compute\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const bool f32 = Atype == CUDA_R_32F;
    const size_t es = f32 ? 4 : 2;
    const bool an = ta == CUBLAS_OP_N, bn = tb == CUBLAS_OP_N;
    if ((!an && ta != CUBLAS_OP_T) || (!bn && tb != CUBLAS_OP_T) || m < 0 || n < 0 || k < 0 ||
        lda < std::max(1, an ? m : k) || ldb < std::max(1, bn ? k : n) || ldc < std::max(1, m)) {
        fprintf(stderr, "cuda-emu: cublasGemmEx: invalid m %d n %d k %d lda %d ldb %d ldc %d\n", m,
                n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    /* Elements spanned: a column-major [rows, cols] operand with leading dimension ld. */
    auto span = [](int rows, int cols, int ld) { return (size_t)(cols - 1) * ld + rows; };
    const size_t ea = k ? span(an ? m : k, an ? k : m, lda) : 0;
    const size_t eb = k ? span(bn ? k : n, bn ? n : k, ldb) : 0;
    if ((k && (!in_dev(A, es * ea) || !in_dev(B, es * eb))) || !in_dev(C, 4 * span(m, n, ldc))) {
        fprintf(stderr, "cuda-emu: cublasGemmEx: an operand lies outside device memory\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    Stream *s = stream_of(h->stream, "cublasGemmEx");
    if (!s)
        return CUBLAS_STATUS_INVALID_VALUE;
    float *c = (float *)C;
    enqueue(
        s,
        [=]() {
            /* Element i of an operand as f32. */
            auto at = [f32](const void *p, size_t i) {
                return f32 ? ((const float *)p)[i]
                           : __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
            };
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    float acc = 0.0f;
                    for (int l = 0; l < k; l++) {
                        float x = at(A, an ? i + (size_t)l * lda : l + (size_t)i * lda);
                        float y = at(B, bn ? l + (size_t)j * ldb : j + (size_t)l * ldb);
                        acc += x * y;
                    }
                    float &out = c[i + (size_t)j * ldc];
                    out = be == 0.0f ? al * acc : al * acc + be * out;
                }
        },
        1e-6 + 2.0 * m * n * (double)k / 1e14);
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
