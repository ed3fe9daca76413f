/* Naming the plugin at fault when the process crashes. Core-internal.
 *
 * The loader registers each plugin it loads; the `tide` command installs a
 * handler for SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT that walks the
 * stack, finds the first frame inside a registered plugin, and prints
 *   "tide: fatal: SIGSEGV in plugin NAME (PATH): the plugin crashed"
 * before handing the signal on (to a sanitizer's handler, or the default
 * action, which ends the process with that signal). */
#ifndef TIDE_CRASH_H
#define TIDE_CRASH_H

/* Remember that the shared object holding ADDR (any code or data address in
 * it) is plugin NAME loaded from PATH. The strings are copied; at most 64
 * plugins are kept. Not thread-safe against itself (the loader is serial). */
void tide_crash_register(const char *name, const char *path, const void *addr);

/* Install the handler (once; later calls do nothing). */
void tide_crash_install(void);

#endif
