#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log_errors.h"
#include "tide/log.h"

static int log_level = -1;
static void (*log_sink)(void *user, enum tide_log_level level, const char *msg);
static void *log_sink_user;
/* The error messages of the calling thread since tide_log_errors_clear(), one
 * per line, for the embedding API to hand back (engine_api.c). */
static _Thread_local char log_errors[4096];
static _Thread_local size_t log_errors_len;

void tide_log_errors_clear(void)
{
    log_errors_len = 0;
    log_errors[0] = 0;
}

const char *tide_log_errors(void)
{
    return log_errors;
}

static void log_errors_add(const char *msg, size_t len)
{
    size_t room = sizeof log_errors - 1 - log_errors_len;
    if (log_errors_len && room) {
        log_errors[log_errors_len++] = '\n';
        room--;
    }
    if (len > room)
        len = room;
    memcpy(log_errors + log_errors_len, msg, len);
    log_errors_len += len;
    log_errors[log_errors_len] = 0;
}

void tide_log_set_sink(void (*fn)(void *user, enum tide_log_level level, const char *msg),
                       void *user)
{
    log_sink = fn;
    log_sink_user = user;
}

static enum tide_log_level log_env_level(void)
{
    const char *s = getenv("TIDE_LOG_LEVEL");
    if (!s)
        return TIDE_LOG_INFO;
    if (!strcmp(s, "error"))
        return TIDE_LOG_ERROR;
    if (!strcmp(s, "warn"))
        return TIDE_LOG_WARN;
    if (!strcmp(s, "debug"))
        return TIDE_LOG_DEBUG;
    return TIDE_LOG_INFO;
}

void tide_log_set_level(enum tide_log_level level)
{
    log_level = (int)level;
}

enum tide_log_level tide_log_get_level(void)
{
    if (log_level < 0)
        log_level = (int)log_env_level();
    return (enum tide_log_level)log_level;
}

/* Copy src[0..n) into dst (room for cap bytes and a NUL), writing control
 * characters other than tab as \xNN: messages quote names and values taken
 * from files (tensor names, INI values, JSON keys), and a stray escape
 * sequence must not reach the terminal. Returns the bytes written. */
static size_t log_escape(char *dst, size_t cap, const char *src, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f) {
            if (k + 4 > cap)
                break;
            k += (size_t)snprintf(dst + k, 5, "\\x%02x", c);
        } else {
            if (k + 1 > cap)
                break;
            dst[k++] = (char)c;
        }
    }
    dst[k] = 0;
    return k;
}

void tide_log(enum tide_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if ((int)level > (int)tide_log_get_level())
        return;
    char raw[2048], buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t rl = (size_t)m < sizeof raw ? (size_t)m : sizeof raw - 1;
    int n = snprintf(buf, sizeof buf, "tide: %s: ", names[level]);
    size_t len = (size_t)n + log_escape(buf + n, sizeof buf - (size_t)n - 2, raw, rl);
    if (level == TIDE_LOG_ERROR)
        log_errors_add(buf + n, len - (size_t)n);
    if (log_sink) {
        buf[len] = 0;
        log_sink(log_sink_user, level, buf + n);
        return;
    }
    buf[len++] = '\n';
    /* One write per message keeps lines whole when threads log at once. */
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}
