/* Progress of long work (the simulator's oracle, a model plugin's mkmodel):
 * the core and the plugins never draw on a terminal; they report units done
 * through this callback and the front end (the `tide` command) decides what
 * to show. */
#ifndef TIDE_PROGRESS_H
#define TIDE_PROGRESS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tide_progress {
    /* done of total units are finished (units are the caller's: bytes,
     * layers; total does not change during one piece of work). Called on the
     * working thread, between units. Returns TIDE_OK to go on; any other
     * status stops the work, which returns that status. */
    int (*fn)(void *user, uint64_t done, uint64_t total);
    void *user; /* handed to fn; owned by whoever set it */
};

/* Report to p when p and p->fn are set; TIDE_OK (0) otherwise. */
static inline int tide_progress_report(const struct tide_progress *p, uint64_t done, uint64_t total)
{
    return p && p->fn ? p->fn(p->user, done, total) : 0;
}

#ifdef __cplusplus
}
#endif
#endif
