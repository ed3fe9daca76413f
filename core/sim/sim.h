/* The trace simulator (docs/sim.md). Core-internal; used by `tide sim` and
 * `tide trace`.
 *
 * A trace is decoded once into a tape: its events in order, with every
 * routing record turned into sparse per-expert counts, and per MoE layer the
 * list of that layer's forwards (struct tide_solver_fwd) for the evaluator,
 * the hindsight policies and the oracle.
 *
 * tide_sim_run replays the tape through a placement policy exactly as the
 * live dispatcher (core/runtime/moe.c) runs it: the policy's initial residents,
 * block_begin, step_begin prefetches, plan() in STEP forwards (the plan is
 * validated and its promotions applied), frozen placement in PREFILL and KV
 * forwards, and the same counters per layer and phase, written as the same
 * JSON Lines when asked. It adds the modelled time of a hardware profile. */
#ifndef TIDE_SIM_H
#define TIDE_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "metrics.h"
#include "tide/policy.h"
#include "tide/profile.h"
#include "tide/progress.h"
#include "tide/solver.h"
#include "tide/trace.h"

enum sim_ev_type {
    SIM_EV_PROMPT = 1,
    SIM_EV_BLOCK = 2,
    SIM_EV_STEP = 3,
    SIM_EV_ROUTE = 4,
    SIM_EV_CONTEXT = 5, /* the prompt grew (DIP): a = prompt id, b = its new length,
                           fwd = tokens inserted */
};

/* One event of the tape. */
struct sim_event {
    uint8_t type;  /* enum sim_ev_type */
    uint8_t phase; /* ROUTE: enum tide_trace_phase */
    uint8_t first; /* BLOCK: first generated block; PROMPT: joins a running batch (the
                      dispatcher's phase is not reset; tide_sim_trace_batch) */
    int32_t a;     /* PROMPT: prompt id; BLOCK: block; STEP: step; ROUTE: layer */
    uint32_t b;    /* PROMPT: prompt length; ROUTE: tokens */
    uint32_t fwd;  /* ROUTE: index into the layer's forward list */
    uint32_t vec;  /* PROMPT: 1 + index of its prompt vector in vecs, 0 = none */
};

struct tide_sim_trace {
    char *path;
    struct tide_trace_header h; /* h.model, h.decoder, h.decoder_settings point below */
    char *model, *decoder, *decoder_settings;
    struct sim_event *ev; /* [n_ev] */
    size_t n_ev;
    uint16_t *ids; /* [n_pairs] expert of each (forward, expert) pair */
    uint32_t *cnt; /* [n_pairs] its assignments */
    size_t n_pairs;
    struct tide_solver_fwd **fwd; /* [n_layers][n_fwd[l]] */
    size_t *n_fwd;                /* [n_layers] */
    uint32_t max_tokens;          /* largest forward */
    uint64_t assignments;         /* token-expert assignments in all */
    uint64_t prompts, blocks, steps;
    /* Batched decoding (trace version 3, or tide_sim_trace_batch): forwards
     * holding two or more prompts, and the prompts they held in all. In a
     * batched trace the block and step records are the lead's, so blocks,
     * steps and block_steps describe the lead's clock, and tokens_generated
     * is prompts x gen_length (the recorded gen_length). */
    uint64_t batch_forwards, batch_seqs;
    /* Context growth (DIP, trace version 4): insertions and the tokens they
     * added to prompts. */
    uint64_t contexts, context_tokens;
    uint64_t tokens_generated; /* per prompt, the positions its blocks generate (block_length
                                  less the prompt's tail in the first), at most gen_length
                                  when the trace records it: the tokens tide run counts,
                                  but for the output cut at an end-of-text */
    float *vecs;               /* [n_vecs][vec_dim] prompt vectors (trace version 2) */
    size_t n_vecs;
    uint32_t vec_dim;
    /* The steps of every block as recorded: STEP records between a block
     * record and the next block or prompt record. Decoders with open-ended
     * steps make them vary from block to block, and nothing bounds them by
     * h.steps (the decoder's own bound, when it has one). */
    uint32_t *block_steps;    /* [blocks] in trace order */
    uint8_t *block_first;     /* [blocks] 1: the first generated block of its prompt */
    uint32_t max_block_steps; /* the longest block, in steps (0: no block) */
};

/* Decode a trace file. Errors (foreign file, version, truncation, bad
 * record) are logged by the reader, naming the file and offset. */
int tide_sim_trace_load(const char *path, struct tide_sim_trace **out);
void tide_sim_trace_free(struct tide_sim_trace *t); /* NULL is a no-op */

/* The trace's prompts as the engine would decode them in a batch of up to
 * `batch` sequences (continuous batching, docs/batching.md): each forward
 * of the result holds every running prompt's next forward (their routing
 * summed: a sequence's routing does not depend on its companions), the
 * policy sees the lead's block and step records, and prompts join in trace
 * order as others finish. batch 1 gives the trace's own tape. Blocks and
 * steps are the lead's clock (as in a trace recorded from a batch), so ms
 * per step is the time of a batched step; tokens are every prompt's.
 * Returns TIDE_OK,
 * TIDE_E_RANGE (batch < 1), TIDE_E_FORMAT (a trace without prompt records)
 * or TIDE_E_NOMEM. */
int tide_sim_trace_batch(const struct tide_sim_trace *t, int batch, struct tide_sim_trace **out);

/* Grow *p (elements of elem bytes, capacity *cap) to hold need; false when
 * out of memory (*p unchanged). */
bool sim_grow(void **p, size_t *cap, size_t need, size_t elem);

/* Policies that need the future and so cannot be plugins. */
enum tide_sim_hindsight {
    SIM_PLUGIN = 0,      /* an ordinary policy plugin */
    SIM_BELADY = 1,      /* full swap with Belady eviction (farthest next use) */
    SIM_BEST_STATIC = 2, /* the top-B experts by rows over the whole trace, never moved */
};

/* One configuration to replay. */
struct tide_sim_config {
    const char *label;                     /* for messages: "policy-tide", "belady" */
    enum tide_sim_hindsight kind;          /* SIM_PLUGIN: ops and opts below */
    const struct tide_policy_ops *ops;     /* policy plugin */
    const struct tide_opts *opts;          /* its option section */
    int budget;                            /* experts per layer in device slots */
    const int *layer_budget;               /* [n_layers] per-layer budgets, or NULL */
    const struct tide_policy_costs *costs; /* handed to the policy (the profile), or NULL */
};

/* Exact counters (those of the engine's metrics) plus modelled time. */
struct tide_sim_counters {
    union { /* the exact counters, by name or as one struct (metrics.h) */
        struct tide_traffic traffic;
        struct {
            TIDE_TRAFFIC_MEMBERS;
        };
    };
    double us;      /* modelled, every forward */
    double step_us; /* modelled, STEP forwards */
};

struct tide_sim_result {
    struct tide_sim_counters total;
    struct tide_sim_counters *layer; /* [n_layers], owned */
    double seconds;                  /* wall time of the replay */
};

/* Replay the tape. metrics (may be NULL) receives the engine's JSON Lines
 * (with "model_us" in place of measured seconds). Returns TIDE_OK or a
 * status (a policy failure or an invalid plan, logged with the policy's
 * name, layer, block and step). */
/* The shape a policy replayed on trace t at this budget is created with. */
void tide_sim_shape(const struct tide_sim_trace *t, int budget,
                    const struct tide_policy_costs *costs, struct tide_policy_shape *out);

int tide_sim_run(const struct tide_sim_trace *t, const struct tide_sim_config *c,
                 const struct tide_cost *cost, FILE *metrics, struct tide_sim_result *out);
void tide_sim_result_free(struct tide_sim_result *r);

/* The distribution of steps per block (block_steps), over every block or
 * over the first generated block of each prompt or over the others. */
enum tide_sim_blocks {
    TIDE_SIM_BLOCKS_ALL = 0,
    TIDE_SIM_BLOCKS_FIRST = 1, /* the first generated block of each prompt */
    TIDE_SIM_BLOCKS_OTHER = 2, /* every later block */
};

struct tide_sim_steps {
    uint64_t blocks;   /* blocks selected */
    uint32_t min, max; /* steps of the shortest and the longest (0 when no block) */
    double median;     /* the middle value; for an even count, the mean of the two middle ones */
    double mean;
};

/* Summarise the selected blocks' steps into *out. hist, when not NULL,
 * receives the number of blocks with s steps at hist[s], s = 0 ..
 * t->max_block_steps (room for max_block_steps + 1 entries). Returns TIDE_OK
 * or TIDE_E_NOMEM. */
int tide_sim_steps_dist(const struct tide_sim_trace *t, enum tide_sim_blocks which,
                        struct tide_sim_steps *out, uint64_t *hist);

/* "3 blocks, min 17, median 38, mean 45.00, max 80" (or "no block") into
 * buf[len]. */
void tide_sim_steps_str(const struct tide_sim_steps *d, char *buf, size_t len);

/* Modelled tokens per second, and milliseconds per denoising step: the
 * modelled time of every forward (prefill and K/V passes included) over the
 * number of denoising steps. */
double tide_sim_tok_per_s(const struct tide_sim_trace *t, const struct tide_sim_counters *c);
double tide_sim_ms_per_step(const struct tide_sim_trace *t, const struct tide_sim_counters *c);

/* ---- Hindsight policies (sim_oracle.c) ---- */

/* Create one as a policy instance for the replay; ops is written to *ops.
 * fwd_index[l] is the index of layer l's current forward, kept by the
 * replay. */
int sim_hindsight_create(enum tide_sim_hindsight kind, const struct tide_sim_trace *t,
                         const struct tide_policy_shape *shape, const uint32_t *fwd_index,
                         const struct tide_policy_ops **ops, struct tide_policy **out);

/* ---- The oracle (sim_oracle.c) ----
 *
 * What it minimises: for each MoE layer, over every residency schedule that
 * the dispatcher allows (any initial set of B experts; promotions only at
 * STEP forwards, none in PREFILL or KV forwards; at most B residents; a
 * resident may still run on the host in a STEP forward), the modelled time
 *   serial profile:  sum over forwards of dense + D + W + A_down + H + A_up
 *   overlap profile: sum over forwards of dense + lambda_f . (D, W + A_up,
 *                    A_down + H + A_up), with lambda_f >= 0 summing to 1
 * i.e. the profile's model with the per-transfer latency dropped and, with
 * overlap, the max of the three streams replaced by a convex combination of
 * them (never more than the max). Every term is then a sum over experts, so
 * the exact optimum is a min-cost flow over time (one unit per slot). The
 * result is therefore a lower bound on the modelled time of every policy
 * on the trace, prefetching or not: the property test checks exactly that.
 * lambda_f is one-hot on the bottleneck stream of each forward of a
 * reference schedule (the optimum of the serial costs); any choice gives a
 * valid bound. With overlap, a second bound is also computed forward by
 * forward, with promotions free and the max relaxed to linear programs (see
 * or_forward_bound), and the larger of the two is kept, per layer. */
struct tide_sim_oracle {
    double bound_us;      /* the lower bound, all forwards */
    double step_bound_us; /* ... STEP forwards */
    /* The optimal schedule's own counters (evaluated with the full model).
     * Meaningful when schedule is true (serial profiles: the bound is that
     * schedule's relaxed cost); with overlap the bound may come from the
     * forward-by-forward relaxation, which has no schedule. */
    struct tide_sim_counters sched;
    bool schedule;
    double *layer_bound_us; /* [n_layers], owned */
};

/* budget, or layer_budget[n_layers] when not NULL. progress (may be NULL)
 * hears of each solved layer and pass (units: n_layers x passes, 2 with an
 * overlapping profile, else 1); a status it returns stops the oracle, which
 * returns it. */
int tide_sim_oracle(const struct tide_sim_trace *t, int budget, const int *layer_budget,
                    const struct tide_cost *cost, const struct tide_progress *progress,
                    struct tide_sim_oracle *out);
void tide_sim_oracle_free(struct tide_sim_oracle *o);

/* ---- Statistics ---- */

/* Adjacent-step similarity of expert activations, within a block and over
 * STEP forwards only. A block of a layer is a run of STEP forwards with
 * ascending steps and no other forward in between. For d = 1..max_d, over
 * every pair of steps (s, s+d) of a block: the cosine of the two count
 * vectors and the Jaccard index of the two sets of active experts. Writes
 * the means into cos[(n_layers + 1) * max_d] and jac[...] (row n_layers is
 * over all layers' pairs) and the number of pairs into pairs[...] (may be
 * NULL). Means over no pair are 0. */
void tide_sim_similarity(const struct tide_solver_fwd *const *fwd, const size_t *n_fwd,
                         int n_layers, int max_d, double *cos, double *jac, uint64_t *pairs);

/* ---- Synthetic traces (sim_synth.c) ---- */

struct tide_synth_params {
    uint32_t n_layers, n_experts, top_k;
    uint32_t hidden, inter;    /* expert shape recorded in the header */
    uint32_t block_length;     /* tokens per block and per forward */
    uint32_t steps, min_steps; /* denoising steps per block: uniform in [min_steps, steps] */
    uint32_t blocks;           /* generated blocks per prompt */
    uint32_t prompts;          /* prompts, appended one after another */
    uint32_t prompt_len;       /* prompt tokens: full blocks are prefilled */
    double skew;               /* Zipf exponent of expert popularity (0 = uniform) */
    double similarity;         /* wanted adjacent-step cosine, (0, 1] */
    double drift;              /* share of the changes that persist, [0, 1] */
    uint64_t seed;
};

/* Find the per-slot change rate whose generated traces read back
 * `similarity` as the all-layer adjacent-step cosine (bisection over a
 * calibration sample). Returns TIDE_OK, TIDE_E_RANGE (unreachable: the
 * similarity of fully random steps at this skew is above it) or
 * TIDE_E_NOMEM. */
int tide_synth_calibrate(const struct tide_synth_params *p, double *rate);

/* Write a synthetic trace with a given change rate (from
 * tide_synth_calibrate). Goes through the trace writer: PATH.tmp, renamed
 * at the end; an interrupt (tide_request_stop) leaves nothing. */
int tide_synth_write(const char *path, bool overwrite, const struct tide_synth_params *p,
                     double rate);

#endif
