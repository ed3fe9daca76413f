/* The progress line of long commands (bench, sim, mkmodel, run, quantize):
 *
 *   tide bench: configuration 2/4, prompt 1/3: policy-lru b8   37%  12 s, ETA 20 s
 *
 * redrawn in place on stderr (carriage return, clear to end of line) at most
 * ten times a second, cut to the terminal's width. The ETA is the mean time
 * per unit of work so far times the units left.
 *
 * It is drawn only when stderr is a terminal and the log level is info or
 * more: `tide --quiet` and each command's --quiet turn it off, and output
 * redirected to a file or a pipe never holds it. The environment overrides
 * that: TIDE_PROGRESS=0 never draws it; TIDE_PROGRESS=1 draws it on a
 * terminal even under --quiet (scripts that keep the messages of the
 * commands they run out, such as bench/policy-study/run.sh);
 * TIDE_PROGRESS=always draws it wherever stderr goes.
 *
 * While a line is up, log messages erase it before they print (a log sink),
 * and the next update draws it again; whoever prints to stdout calls
 * cli_progress_clear first, or prints through cli_progress_text. Text that
 * does not end its line (tide run streams blocks) is never erased: the line
 * is then drawn on the row below it, the cursor staying at the text's end,
 * and log messages start a line of their own (also when stdout and stderr
 * share a file or pipe and no line is drawn). Single-threaded: update from
 * one thread. */
#ifndef TIDE_CLI_PROGRESS_H
#define TIDE_CLI_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>

#include "tide/log.h"

struct cli_progress {
    bool on;           /* drawing (see above) */
    bool drawn;        /* a line is on the terminal now */
    bool below;        /* it is on the row below unfinished text */
    bool shared;       /* stdout and stderr reach the same file, pipe or terminal */
    const char *label; /* "tide bench" */
    double total;      /* units of work (prompts, bytes, layers) */
    double done;       /* units finished, as last updated */
    double t0, last;   /* monotonic seconds: begin, the last redraw (0: draw at once) */
};

/* Whether a progress line would be drawn now (terminal, level, env). */
bool cli_progress_wanted(void);

/* Start counting: total units, label in front of every line (a string that
 * outlives p). Draws nothing yet. */
void cli_progress_begin(struct cli_progress *p, const char *label, double total);

/* done units of total are finished; detail says where ("configuration 2/4
 * ... prompt 1/3"). Redraws when the last redraw is 0.1 s old or more. */
void cli_progress_update(struct cli_progress *p, double done, const char *fmt, ...)
    TIDE_PRINTF(3, 4);

/* Erase the line (before printing to stdout); the next update redraws. */
void cli_progress_clear(struct cli_progress *p);

/* Draw no line from now on (progress = false), still keeping log messages
 * off the end of streamed text. */
void cli_progress_off(struct cli_progress *p);

/* Write len bytes of text to stdout (flushed), erasing the line first;
 * text that does not end with a newline keeps the line below it. */
void cli_progress_text(struct cli_progress *p, const char *text, size_t len);

/* Erase the line and stop: log messages print as usual again. */
void cli_progress_end(struct cli_progress *p);

#endif
