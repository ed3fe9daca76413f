/* Helpers shared by the trace and simulator tests (header-only): a scratch
 * folder, paths in it, and capture of log messages. harness.h first. */
#ifndef TIDE_TEST_SIM_UTIL_H
#define TIDE_TEST_SIM_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tide/log.h"

static char st_dir[] = "/tmp/tide-sim-test-XXXXXX";
static char logbuf[16384];

static void st_sink(void *user, enum tide_log_level level, const char *msg)
{
    size_t n = strlen(logbuf);
    snprintf(logbuf + n, sizeof logbuf - n, "%s\n", msg);
}

/* Collect messages into logbuf until release(). */
static void capture(void)
{
    logbuf[0] = 0;
    tide_log_set_sink(st_sink, NULL);
}

static void release(void)
{
    tide_log_set_sink(NULL, NULL);
}

/* A path in the scratch folder (eight rotating buffers). */
static const char *tpath(const char *name)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", st_dir, name);
    return buf[k];
}

/* Create the scratch folder; false (and a message) on failure. */
static bool st_begin(void)
{
    if (mkdtemp(st_dir))
        return true;
    perror("mkdtemp");
    return false;
}

/* Remove the scratch folder. */
static void st_end(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", st_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", st_dir);
}

#endif
