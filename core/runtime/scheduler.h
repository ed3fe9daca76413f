/* The scheduler of the engine loop: which sequences share a forward, when a
 * sequence joins and leaves, and whose block and step clock the placement
 * policy follows (the lead). Pure rules over slots, no model: the engine
 * loop (loop.c) drives decoders with it, and the simulator (tide sim
 * --batch, core/sim/sim_batch.c) drives a trace's recorded forwards with
 * the same function, so the two cannot drift apart.
 *
 * One round, on the caller's thread:
 *   1. admission: while a slot is free (and no sequence waits for the batch
 *      to drain), admit() the next sequence into the lowest free slot and
 *      resume() it to its first forward; a sequence admitted into an empty
 *      batch leads;
 *   2. between(), then one forward() over every slot that posted one, in
 *      slot order;
 *   3. every sequence of that forward resume()s in slot order: it takes its
 *      logits and runs to its next forward, or finishes and leaves; when the
 *      lead leaves, nobody leads for the rest of the round (the policy hears
 *      of no event in between), and after it the oldest running sequence
 *      leads (lead()); when the last one leaves, drained().
 * A sequence that needs more room than is reserved waits (admit() says
 * HOLD) until the batch drains, and sequences behind it wait too (first
 * come, first served). Core-internal. */
#ifndef TIDE_SCHED_H
#define TIDE_SCHED_H

#include <stdbool.h>

/* What admit() says. */
enum {
    TIDE_SCHED_NONE = 0,     /* nothing to admit now */
    TIDE_SCHED_ADMITTED = 1, /* a sequence now holds the slot: resume it */
    TIDE_SCHED_HOLD = 2,     /* one waits for the batch to drain; ask again once it has */
    TIDE_SCHED_AGAIN = 3,    /* one was refused or ended at once (its business): ask again */
};

struct tide_sched_ops {
    void *user;
    /* Admit the next sequence into `slot`, n_running sequences running
     * (0: the batch is idle, so the call may wait for work). Returns an enum
     * value above, or a failing status that stops the run. */
    int (*admit)(void *user, int slot, int n_running);
    /* Run slot's sequence to its next forward: first, right after admit();
     * else after a forward that held it, which returned fwd_rc (a failed
     * forward ends the sequence with it). lead: its block and step events
     * reach the policy. Returns 1 (it posted a forward), 0 (it finished and
     * its slot is free again), or a failing status that stops the run (the
     * sequence is then finished too). */
    int (*resume)(void *user, int slot, bool first, bool lead, int fwd_rc);
    /* One forward over the posted slots[n], in slot order; lead is the
     * lead's slot (-1: nobody leads). Returns TIDE_OK or the status every
     * sequence of the forward gets. */
    int (*forward)(void *user, const int *slots, int n, int lead);
    /* After a round whose lead left: slot's sequence leads from now. */
    void (*lead)(void *user, int slot);
    /* The last running sequence left (the batch is empty). */
    void (*drained)(void *user);
    /* Optional: before every forward, for quick work that must not wait for
     * a slot. */
    void (*between)(void *user);
    /* Optional: a round's forward is about to run (before), and every
     * sequence of it has resumed (after). */
    void (*round_begin)(void *user);
    void (*round_end)(void *user);
};

/* Run rounds over max_batch slots until admit() says NONE while nothing
 * runs. Returns TIDE_OK, TIDE_E_INVAL (max_batch < 1), TIDE_E_NOMEM, or a
 * failing status from an op (every running sequence is then resumed with
 * it, so each ends). */
int tide_sched_run(int max_batch, const struct tide_sched_ops *ops);

#endif
