/* The progress line of long commands (cli/progress.h). */
#include "progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_CLEAR "\r\033[K"

static double progress_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool cli_progress_wanted(void)
{
    const char *env = getenv("TIDE_PROGRESS");
    if (env && !strcmp(env, "0"))
        return false;
    if (env && !strcmp(env, "always"))
        return true;
    if (env && !strcmp(env, "1"))
        return isatty(STDERR_FILENO);
    return isatty(STDERR_FILENO) && tide_log_get_level() >= TIDE_LOG_INFO;
}

/* Log messages while a line is up: erase it first, in the same write, so a
 * message never lands after the line's text. Touches no state, so a plugin
 * thread may log too; the next update redraws. */
static void progress_log_sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    char buf[2200];
    int n = snprintf(buf, sizeof buf, PROGRESS_CLEAR "tide: %s: %s\n", names[level], msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof buf) {
        n = (int)sizeof buf - 1;
        buf[n - 1] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w;
}

void cli_progress_begin(struct cli_progress *p, const char *label, double total)
{
    *p = (struct cli_progress){.on = cli_progress_wanted(), .label = label, .total = total};
    p->t0 = progress_now();
    if (p->on)
        tide_log_set_sink(progress_log_sink, NULL);
}

/* "42 s", "3m05s", "2h07m". */
static void progress_time(double s, char *buf, size_t len)
{
    if (s < 0)
        s = 0;
    const long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, len, "%ld s", t);
    else if (t < 3600)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
}

static int progress_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 100;
}

void cli_progress_update(struct cli_progress *p, double done, const char *fmt, ...)
{
    p->done = done;
    if (!p->on)
        return;
    const double now = progress_now();
    if (p->last > 0 && now - p->last < 0.1)
        return;
    p->last = now;
    char detail[512], el[32], eta[48] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    const double elapsed = now - p->t0;
    progress_time(elapsed, el, sizeof el);
    /* The first hundredth says too little about the rate to be worth an ETA. */
    if (done >= 0.01 * p->total && done < p->total) {
        char left[32];
        progress_time(elapsed / done * (p->total - done), left, sizeof left);
        snprintf(eta, sizeof eta, ", ETA %s", left);
    }
    const double pct = p->total > 0 ? 100.0 * done / p->total : 0.0;
    char tail[96], head[768];
    const int nt = snprintf(tail, sizeof tail, "  %3.0f%%  %s%s", pct, el, eta);
    int nh = snprintf(head, sizeof head, "%s: %s", p->label, detail);
    /* A line that wraps cannot be erased by a carriage return: the detail
     * gives way, never the percentage and the ETA. */
    const int room = progress_width() - 1 - nt;
    if (nh > room)
        nh = room > 0 ? room : 0;
    if (nh > (int)sizeof head - 1)
        nh = (int)sizeof head - 1;
    fprintf(stderr, PROGRESS_CLEAR "%.*s%s", nh, head, tail);
    fflush(stderr);
    p->drawn = true;
}

void cli_progress_clear(struct cli_progress *p)
{
    if (p->on && p->drawn) {
        fputs(PROGRESS_CLEAR, stderr);
        fflush(stderr);
    }
    p->drawn = false;
    p->last = 0;
}

void cli_progress_end(struct cli_progress *p)
{
    cli_progress_clear(p);
    if (p->on)
        tide_log_set_sink(NULL, NULL);
    p->on = false;
}
