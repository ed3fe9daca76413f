/* LeakSanitizer suppressions, compiled in when the build uses
 * AddressSanitizer (TIDE_SANITIZE=ON); empty otherwise. Every program that
 * links libtide gets them, whatever LSAN_OPTIONS it runs with.
 *
 * GCC 12's LeakSanitizer crashes on glibc 2.36's dynamic TLS ("Tracer caught
 * signal 11" while reading the DTLS block of a dlopen'ed plugin's thread), so
 * the sanitizer suite runs with LSAN_OPTIONS=use_tls=0 (docs/hardening.md).
 * Without thread-local storage as a root, memory that glibc's dlopen/dlerror
 * and libgomp's thread pool keep per thread looks leaked; only that is
 * suppressed here. TIDE's own allocations are never suppressed. */
#if defined(__SANITIZE_ADDRESS__)
#define TIDE_HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TIDE_HAVE_ASAN 1
#endif
#endif

#ifdef TIDE_HAVE_ASAN
/* Called by the sanitizer runtime at start-up, which finds it by its
 * dynamic symbol: exported although core objects are hidden by default
 * (tide/api.h), or the runtime never sees the suppressions. */
__attribute__((visibility("default"), used)) const char *__lsan_default_suppressions(void);
__attribute__((visibility("default"), used)) const char *__lsan_default_suppressions(void)
{
    return "leak:_dlerror_run\n"
           "leak:_dl_map_object_deps\n"
           "leak:_dl_exception_create\n"
           "leak:_dl_new_object\n"
           "leak:_dl_check_map_versions\n"
           "leak:libgomp.so\n";
}
#else
typedef int tide_sanitizer_hooks_unused; /* ISO C wants a declaration */
#endif
