/* The engine loop: one loop on one thread for every generation, alone or
 * batched (docs/architecture.md, "The engine loop").
 *
 *     admit (the scheduler, scheduler.h) -> each decoder's next() -> one
 *     forward_batch of the model -> each decoder's feed() -> ...
 *
 * A single generation is a batch of one. Decoders are step machines
 * (tide/decoder.h): they say what to forward and take the logits; the loop
 * runs one forward for every running sequence, so dense layers run once over
 * all their rows and an expert is fetched once per forward for all of them.
 * Sequences join between forwards while a slot is free and leave when they
 * finish (continuous batching).
 *
 * The placement policy sees every forward's routing (all sequences' tokens)
 * and one block and step clock: that of the batch's lead, its oldest running
 * sequence (scheduler.h, docs/batching.md). A sequence's tokens and logits do
 * not depend on its companions when the backends' kernels are batch
 * invariant (the CPU backend's are; test_batch checks it bit for bit).
 * Core-internal. */
#ifndef TIDE_LOOP_H
#define TIDE_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "decode.h"
#include "moe_internal.h"

/* One generation, owned by the feed from next() until done(). */
struct tide_loop_seq {
    struct tide_decode *d; /* its decoder instance (NULL: the loop's default) */
    const int32_t *prompt; /* [n], valid until done() */
    int64_t n;
    const struct tide_gen_hooks *hooks; /* its events; may be NULL */
    void *user;                         /* the feed's */
    int64_t trace_id;                   /* its prompt id in a routing trace; < 0: its order of
                                           admission in this run, from 0 */
    /* Set before done(): the status and result (the feed frees result.ids),
     * the slot it ran in, and on failure the messages logged for it. */
    int rc;
    struct tide_gen_result result;
    int slot;
    char error[1024];
};

/* Where a loop's sequences come from and go to. */
struct tide_loop_feed {
    void *user;
    /* The next sequence, or NULL for none now. Called between forwards
     * while a slot is free. idle: nothing runs, so the call may wait for
     * work; returning NULL while idle ends the run. */
    struct tide_loop_seq *(*next)(void *user, bool idle);
    /* Optional: s is admitted and its memory reserved, before its first
     * forward. A status other than TIDE_OK ends it with that status. */
    int (*start)(void *user, struct tide_loop_seq *s);
    /* s finished, failed or was refused (s->rc says). */
    void (*done)(void *user, struct tide_loop_seq *s);
    /* Optional: between every two forwards (even with every slot taken). */
    void (*between)(void *user);
};

/* What a loop runs on. */
struct tide_loop_env {
    const struct tide_model_ops *ops;
    struct tide_model *m;
    const char *model_name;  /* for messages */
    struct tide_decode *dec; /* the decoder of a sequence that names none */
    struct tide_moe *moe;    /* the dispatcher (placement events, trace); NULL: none */
    FILE *metrics;           /* per-step JSON lines; NULL: none */
    uint64_t *forwards;      /* counts the model's forward calls; NULL: none */
    /* Optional: a sequence starts (its trace record, join: into a running
     * batch; its prompt vector for the policy). A failure ends it. */
    int (*prompt_begin)(void *user, const int32_t *prompt, int64_t n, uint32_t id, bool join);
    /* Optional: a round (one forward and the feeds that read its logits)
     * begins and ends: the backends keep their threads ready inside it. */
    void (*round_begin)(void *user);
    void (*round_end)(void *user);
    /* Optional: the decoders' parallel work (tide_decoder_host parallel) on
     * the backends' threads. */
    void (*parallel)(void *user, int nt_max, void (*fn)(void *ctx, int tid, int nt), void *ctx);
    /* Optional: DIP's planner (dip.h): every sequence's prompt gets its
     * in-context examples, up front or during generation. */
    const struct tide_dip *dip;
    void *user;
};

/* Run sequences from feed, up to max_batch at a time, until next() returns
 * NULL while nothing runs. Returns TIDE_OK, or a status that stopped the
 * whole run (out of memory; TIDE_E_INVAL for max_batch < 1). Each
 * sequence's own failure, a failed forward included, goes to its rc. */
int tide_loop_run(const struct tide_loop_env *env, int max_batch,
                  const struct tide_loop_feed *feed);

/* One generation (a batch of one) of prompt[n] under decoder d (NULL: the
 * env's), with trace id trace_id (< 0: 0). On TIDE_OK out->ids is malloc'd
 * (the caller frees it); else out is zeroed. Returns the generation's
 * status, or the run's. */
int tide_loop_one(const struct tide_loop_env *env, struct tide_decode *d, const int32_t *prompt,
                  int64_t n, const struct tide_gen_hooks *hooks, int64_t trace_id,
                  struct tide_gen_result *out);

#endif
