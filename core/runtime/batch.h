/* Batched decoding: several generations stepping together, each under its
 * own decoder instance (settings), their forwards gathered into one
 * forward_batch of the model per round (tide/model.h), so dense layers run
 * once over every sequence's rows and an expert is fetched once per forward
 * for all of them. Sequences join between forwards while a slot is free and
 * leave when they finish (continuous batching).
 *
 * How: each sequence's decoder runs on its own thread, but only one thread
 * runs at a time (a baton passed in slot order), so the decoders, the
 * callers' hooks and the dispatcher's events run exactly as in a single
 * generation, one after another and deterministically; a decoder's forward
 * hands the baton back, and once every running sequence has asked for its
 * forward the caller's thread runs them as one forward_batch.
 *
 * The placement policy sees every forward's routing (all sequences' tokens)
 * and one block and step clock: that of the batch's lead, its oldest
 * running sequence (docs/batching.md). A sequence's tokens and logits do not
 * depend on its companions when the backends' kernels are batch invariant
 * (the CPU backend's are; test_batch checks it bit for bit). Core-internal. */
#ifndef TIDE_BATCH_H
#define TIDE_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "decode.h"
#include "engine.h"

/* One generation of a batch, owned by the caller from next() until done(). */
struct tide_batch_seq {
    struct tide_decode *d; /* its decoder instance (NULL: the engine's own) */
    const int32_t *prompt;
    int64_t n;
    const struct tide_gen_hooks *hooks; /* its events (forward must be NULL); may be NULL */
    void *user;                         /* the caller's */
    /* Set before done(): tide_decode_run's status and result (the caller
     * frees result.ids). */
    int rc;
    struct tide_gen_result result;
    int slot;         /* the KV-cache slot it ran in */
    char error[1024]; /* on failure: the messages its decoder's thread logged */
};

/* Where a batch's sequences come from and go to. */
struct tide_batch_feed {
    void *user;
    /* The next sequence to admit, or NULL for none now. Called between
     * forwards while a slot is free. idle: nothing runs, so the call may wait
     * for work; returning NULL while idle ends tide_batch_run. */
    struct tide_batch_seq *(*next)(void *user, bool idle);
    /* A sequence finished, failed or was refused (s->rc says). */
    void (*done)(void *user, struct tide_batch_seq *s);
    /* Optional: called between every two forwards (even with every slot
     * taken), for quick work that must not wait for a slot. */
    void (*between)(void *user);
};

/* Run sequences from feed, up to max_batch at a time, until next() returns
 * NULL while nothing runs. The model must implement forward_batch, unless
 * max_batch is 1. Returns TIDE_OK, or a status that stopped the whole batch
 * (a failed forward ends every running sequence with it; out of memory).
 * Each sequence's own failure goes to its rc. */
int tide_batch_run(struct tide_engine *e, int max_batch, const struct tide_batch_feed *feed);

#endif
