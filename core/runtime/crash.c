/* Crash attribution (crash.h). The handler uses only what is already set up:
 * the plugin table is fixed-size static storage, backtrace() is warmed up at
 * install time (its first call may allocate), and messages go out with
 * write(). dladdr() is not async-signal-safe, but the process is about to
 * die and a named culprit is worth the risk. */
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "crash.h"

#define CRASH_MAX_PLUGINS 64
#define CRASH_MAX_FRAMES  64

struct crash_plugin {
    const void *base; /* load address of the shared object (dli_fbase) */
    char name[64];
    char path[512];
};

static struct crash_plugin crash_plugins[CRASH_MAX_PLUGINS];
static volatile sig_atomic_t crash_n;

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define CRASH_N_SIGNALS ((int)(sizeof crash_signals / sizeof crash_signals[0]))
static struct sigaction crash_old[CRASH_N_SIGNALS];
static bool crash_installed;

void tide_crash_register(const char *name, const char *path, const void *addr)
{
    Dl_info info;
    if (crash_n >= CRASH_MAX_PLUGINS || !dladdr(addr, &info) || !info.dli_fbase)
        return;
    struct crash_plugin *p = &crash_plugins[crash_n];
    p->base = info.dli_fbase;
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->path, sizeof p->path, "%s", path);
    crash_n++;
}

static const char *crash_sig_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV (invalid memory access)";
    case SIGBUS:
        return "SIGBUS (bus error: a mapped file shrank, or misaligned access)";
    case SIGFPE:
        return "SIGFPE (arithmetic error)";
    case SIGILL:
        return "SIGILL (illegal instruction)";
    default:
        return "SIGABRT (abort)";
    }
}

/* The registered plugin that holds a frame of the current stack, or NULL. */
static const struct crash_plugin *crash_culprit(void)
{
    void *frames[CRASH_MAX_FRAMES];
    int n = backtrace(frames, CRASH_MAX_FRAMES);
    for (int f = 0; f < n; f++) {
        Dl_info info;
        if (!dladdr(frames[f], &info))
            continue;
        for (int i = 0; i < crash_n; i++)
            if (crash_plugins[i].base == info.dli_fbase)
                return &crash_plugins[i];
    }
    return NULL;
}

static void crash_handler(int sig, siginfo_t *si, void *ctx)
{
    char msg[1024];
    const struct crash_plugin *p = crash_culprit();
    int len;
    if (p)
        len = snprintf(msg, sizeof msg, "tide: fatal: %s in plugin %s (%s): the plugin crashed\n",
                       crash_sig_name(sig), p->name, p->path);
    else
        len = snprintf(msg, sizeof msg, "tide: fatal: %s: tide crashed (please report it)\n",
                       crash_sig_name(sig));
    if (len > 0) {
        ssize_t w = write(STDERR_FILENO, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg);
        (void)w;
    }
    /* Hand over to whoever handled the signal before us, or to the default
     * action: raised now, it is delivered when this handler returns. */
    for (int i = 0; i < CRASH_N_SIGNALS; i++) {
        if (crash_signals[i] != sig)
            continue;
        const struct sigaction *old = &crash_old[i];
        if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
            sigaction(sig, old, NULL);
            old->sa_sigaction(sig, si, ctx);
            return;
        }
        if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler != SIG_DFL &&
            old->sa_handler != SIG_IGN) {
            sigaction(sig, old, NULL);
            old->sa_handler(sig);
            return;
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void tide_crash_install(void)
{
    if (crash_installed)
        return;
    crash_installed = true;
    void *warm[2];
    backtrace(warm, 2);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < CRASH_N_SIGNALS; i++)
        sigaction(crash_signals[i], &sa, &crash_old[i]);
}
