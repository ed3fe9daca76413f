/* Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.c).
 *
 * Every target defines LLVMFuzzerTestOneInput. Built with clang and
 * TIDE_FUZZ=ON it links libFuzzer; otherwise it links replay_main.c and
 * ctest replays the committed corpus through it (label fuzz).
 *
 * The parsers take paths, so each input is written to a file in a private
 * temporary directory first. The log sink checks two properties of every
 * call: a failure (other than TIDE_E_NOMEM) logged at least one error, and
 * no message is empty or holds a control character (garbage on a terminal).
 * A broken property aborts, which libFuzzer reports as a crash. */
#ifndef TIDE_FUZZ_COMMON_H
#define TIDE_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tide/log.h"
#include "tide/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz_errors; /* error messages since fz_begin */

/* Stop with a message: libFuzzer saves the input that got here. */
#define FZ_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond);       \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static inline void fz_sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR)
        fz_errors++;
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "log: %s\n", msg);
    FZ_ASSERT(msg && *msg);
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f) {
            fprintf(stderr, "control byte 0x%02x in message: %s\n", *p, msg);
            FZ_ASSERT(!"a log message holds a control character");
        }
}

/* Start one input: quiet, checked logging. */
static inline void fz_begin(void)
{
    fz_errors = 0;
    tide_log_set_level(TIDE_LOG_WARN);
    tide_log_set_sink(fz_sink, NULL);
}

/* A call returned rc: a failure must have said why (out of memory aside). */
static inline void fz_check_status(int rc)
{
    if (rc != TIDE_OK && rc != TIDE_E_NOMEM && fz_errors == 0) {
        fprintf(stderr, "status %d (%s) with no error logged\n", rc, tide_status_str(rc));
        FZ_ASSERT(!"a failure was not logged");
    }
    if (rc == TIDE_OK && fz_errors > 0)
        FZ_ASSERT(!"success, yet an error was logged");
}

static char fz_dir_path[4096];

static inline int fz_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void fz_cleanup(void)
{
    if (fz_dir_path[0])
        nftw(fz_dir_path, fz_rm, 16, FTW_DEPTH | FTW_PHYS);
}

/* A private directory for this process's files, created once in $TMPDIR
 * and removed at exit. An abort, or libFuzzer's _Exit after a finding, skips
 * the removal: scripts/fuzz.sh and ctest therefore point TMPDIR at a folder
 * inside the build (fuzz.sh removes its own after each target). */
static inline const char *fz_dir(void)
{
    if (!fz_dir_path[0]) {
        const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        if (snprintf(fz_dir_path, sizeof fz_dir_path, "%s/tide-fuzz-XXXXXX", base) >=
            (int)sizeof fz_dir_path - 300) {
            fprintf(stderr, "TMPDIR is too long: %s\n", base);
            abort();
        }
        if (!mkdtemp(fz_dir_path)) {
            perror("mkdtemp");
            abort();
        }
        atexit(fz_cleanup);
    }
    return fz_dir_path;
}

/* Write bytes to fz_dir()/NAME; returns the path (static storage per slot). */
static inline const char *fz_write(const char *name, const void *data, size_t size)
{
    static char paths[8][sizeof fz_dir_path + 320];
    static int slot;
    char *path = paths[slot++ % 8];
    if (snprintf(path, sizeof paths[0], "%s/%.300s", fz_dir(), name) >= (int)sizeof paths[0])
        abort();
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

/* Cut data at the separator SEP (the seeds and the dictionary use it):
 * fills parts[0..max) with pointers and lengths, returns how many parts. */
static inline int fz_split(const uint8_t *data, size_t size, const char *sep, const uint8_t **parts,
                           size_t *lens, int max)
{
    const size_t ls = strlen(sep);
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; n < max - 1 && i + ls <= size; i++) {
        if (!memcmp(data + i, sep, ls)) {
            parts[n] = data + start;
            lens[n++] = i - start;
            start = i + ls;
            i += ls - 1;
        }
    }
    parts[n] = data + start;
    lens[n++] = size - start;
    return n;
}

/* A NUL-terminated copy of len bytes (caller frees). */
static inline char *fz_strndup(const uint8_t *p, size_t len)
{
    char *s = malloc(len + 1);
    if (!s)
        abort();
    memcpy(s, p, len);
    s[len] = 0;
    return s;
}

#endif
