/* The error messages logged on the calling thread, kept for the embedding
 * API (engine_api.c), which hands them back with a status. Core-internal. */
#ifndef TIDE_LOG_ERRORS_H
#define TIDE_LOG_ERRORS_H

/* Forget the calling thread's error messages. */
void tide_log_errors_clear(void);

/* The error messages logged on the calling thread since the last clear, one
 * per line, without the "tide: error: " prefix; "" when none. Capped at 4 KiB
 * (later messages are cut). Thread-local storage, valid until the thread's
 * next tide_log or clear. */
const char *tide_log_errors(void);

#endif
