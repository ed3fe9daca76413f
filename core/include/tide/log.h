/* Logging. All diagnostics go to stderr through these calls, so the level
 * (TIDE_LOG_LEVEL=error|warn|info|debug or tide --quiet/--verbose) applies to
 * the core and the plugins alike. Thread-safe: each message is one write. */
#ifndef TIDE_LOG_H
#define TIDE_LOG_H

#include "tide/api.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tide_log_level {
    TIDE_LOG_ERROR = 0,
    TIDE_LOG_WARN = 1,
    TIDE_LOG_INFO = 2,
    TIDE_LOG_DEBUG = 3,
};

#if defined(__GNUC__)
#define TIDE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TIDE_PRINTF(a, b)
#endif

/* Prints "tide: <level>: <message>\n" when level <= the current level. */
TIDE_API void tide_log(enum tide_log_level level, const char *fmt, ...) TIDE_PRINTF(2, 3);
TIDE_API void tide_log_set_level(enum tide_log_level level);
/* Redirect messages (already formatted, without the trailing newline) to fn;
 * NULL restores stderr. For tests that assert messages. Not thread-safe
 * against concurrent tide_log calls. */
TIDE_API void tide_log_set_sink(void (*fn)(void *user, enum tide_log_level level, const char *msg),
                                void *user);
TIDE_API enum tide_log_level tide_log_get_level(void);

#define tide_error(...) tide_log(TIDE_LOG_ERROR, __VA_ARGS__)
#define tide_warn(...)  tide_log(TIDE_LOG_WARN, __VA_ARGS__)
#define tide_info(...)  tide_log(TIDE_LOG_INFO, __VA_ARGS__)
#define tide_debug(...) tide_log(TIDE_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
