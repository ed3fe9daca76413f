/* The progress line of long commands (cli/progress.h). */
#include "progress.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_CLEAR "\r\033[K"
/* Below text that does not end its line: ESC D (index) moves down one row
 * in the same column, scrolling at the bottom, and ESC M moves back up, so
 * a row exists below without scrolling between ESC 7 (save the cursor) and
 * ESC 8 (restore it); the line lives on that row and the cursor stays at
 * the end of the text. */
#define PROGRESS_BELOW       "\033D\033M\0337\033D\r\033[K"
#define PROGRESS_BELOW_CLEAR "\0337\033D\r\033[K\0338"

/* Streamed text on the screen stderr shares does not end its line
 * (cli_progress_text); the log sink, on whichever thread logs, starts its
 * message on a line of its own and clears it. */
static atomic_bool progress_midline;
/* The sink may use escape sequences (a line is being drawn). */
static atomic_bool progress_escapes;

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
 * message never lands after the line's text; after streamed text that does
 * not end its line, the message starts a line of its own. Touches only the
 * atomics above, so a plugin thread may log too; the next update redraws. */
static void progress_log_sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    const bool mid = atomic_exchange(&progress_midline, false);
    const char *lead = atomic_load(&progress_escapes)
                           ? (mid ? PROGRESS_BELOW_CLEAR "\n" : PROGRESS_CLEAR)
                           : (mid ? "\n" : "");
    char buf[2200];
    int n = snprintf(buf, sizeof buf, "%stide: %s: %s\n", lead, names[level], msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof buf) {
        n = (int)sizeof buf - 1;
        buf[n - 1] = '\n';
    }
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w;
}

/* Whether stdout and stderr reach the same file, pipe or terminal. */
static bool progress_shared(void)
{
    struct stat o, e;
    return fstat(STDOUT_FILENO, &o) == 0 && fstat(STDERR_FILENO, &e) == 0 && o.st_dev == e.st_dev &&
           o.st_ino == e.st_ino && o.st_rdev == e.st_rdev;
}

void cli_progress_begin(struct cli_progress *p, const char *label, double total)
{
    *p = (struct cli_progress){
        .on = cli_progress_wanted(), .shared = progress_shared(), .label = label, .total = total};
    p->t0 = progress_now();
    atomic_store(&progress_midline, false);
    atomic_store(&progress_escapes, p->on);
    if (p->on || p->shared)
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
    p->below = atomic_load(&progress_midline);
    if (p->below)
        fprintf(stderr, PROGRESS_BELOW "%.*s%s\0338", nh, head, tail);
    else
        fprintf(stderr, PROGRESS_CLEAR "%.*s%s", nh, head, tail);
    fflush(stderr);
    p->drawn = true;
}

void cli_progress_clear(struct cli_progress *p)
{
    if (p->on && p->drawn) {
        fputs(p->below ? PROGRESS_BELOW_CLEAR : PROGRESS_CLEAR, stderr);
        fflush(stderr);
    }
    p->drawn = false;
    p->last = 0;
}

void cli_progress_off(struct cli_progress *p)
{
    cli_progress_clear(p);
    if (p->on && !p->shared)
        tide_log_set_sink(NULL, NULL);
    atomic_store(&progress_escapes, false);
    p->on = false;
}

void cli_progress_text(struct cli_progress *p, const char *text, size_t len)
{
    if (!len)
        return;
    cli_progress_clear(p);
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (p->shared)
        atomic_store(&progress_midline, text[len - 1] != '\n');
}

void cli_progress_end(struct cli_progress *p)
{
    cli_progress_clear(p);
    if (p->on || p->shared)
        tide_log_set_sink(NULL, NULL);
    atomic_store(&progress_midline, false);
    atomic_store(&progress_escapes, false);
    p->on = false;
    p->shared = false;
}
