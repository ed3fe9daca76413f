/* decoder-llada21: LLaDA2.1's generate() (modeling_llada2_moe.py of the
 * LLaDA2.1 release; dllm keeps a copy as
 * dllm/pipelines/llada21/models/modeling_llada21_moe.py), rule by rule.
 * docs/decoding.md lists every rule (E1-E14) with the line it follows; the
 * names appear below.
 *
 * The canvas is the prompt followed by masks, in whole blocks (E2). Decoding
 * starts at the block holding the prompt's tail (E3). A block has no step
 * schedule (E1: `steps` is computed and never used): each step forwards the
 * block (E5), takes a token and its probability at every position (E6),
 * commits the masked positions above `threshold`, or the `num_to_transfer`
 * most confident when fewer are (E7), and edits every position that holds a
 * generated token whose prediction changed with a probability above
 * `editing_threshold` (E8, E9). Once no mask is left, up to `max_post_steps`
 * more steps may edit (E4); a step that finds no mask and edits nothing ends
 * the block (E10). Only the current block is ever edited, so finished blocks
 * are final and their K/V are cached exactly (E12). With eos_early_stop,
 * generation ends after a block once the generated part holds no mask and
 * an EOS (E13); the output is cut after the first EOS (E14).
 *
 * Departures (docs/decoding.md): the KV cache (recompute = true runs the
 * official windows); draws use TIDE's seeded RNG, only at the positions a
 * step decides on; a greedy block whose state (its canvas and post-step
 * count) repeats ends there, since the official loop would repeat it
 * forever, and max_block_steps is a safety bound far above any block seen
 * to end; stop_tokens and mask_in_argmax = false are options, off by
 * default. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder-common/blocks.h"
#include "decoder-common/canvas.h"
#include "decoder-common/params.h"
#include "decoder-common/sample.h"
#include "tide/decoder.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

#define L21_NAME "decoder-llada21"

/* max_block_steps = 0: a safety bound, 7 x the longest block seen to end
 * (14,146 steps: block_length 32, threshold 0.5, editing_threshold 0, a
 * tiny checkpoint favouring the mask token; docs/decoding.md). */
#define L21_SAFETY_STEPS 100000

/* The named modes ([generation] mode). Each sets the two thresholds when
 * the configuration leaves them at their defaults; docs/decoding.md cites
 * where each value is published. */
static const struct l21_mode {
    const char *name;
    double threshold, editing_threshold;
} l21_modes[] = {
    /* S Mode: the M2T threshold lowered, T2T repairing (the LLaDA2.1 model
     * card's speed settings; SGLang's JointThreshold defaults). */
    {"speed", 0.5, 0.0},
    /* Q Mode: conservative thresholds (the model card's quality settings;
     * the diffusers LLaDA2 pipeline example for LLaDA2.1-mini). */
    {"quality", 0.7, 0.5},
};

struct tide_decoder {
    struct dc_params p;
    struct dc_tokens tok;
    int V;
    int64_t max_ctx;
    double editing_threshold;
    int max_post_steps;
    int num_to_transfer;
    int max_block_steps; /* the safety bound on steps per block (departure 3) */
    bool bound_set;      /* max_block_steps was set, not the default */
    bool end_on_repeat;  /* departure 3: a repeated state ends a greedy block */
    char mode[16];
};

static const struct tide_option l21_options[] = {
    {"editing_threshold", TIDE_OPT_FLOAT, "0.9",
     "edit a generated token of the current block when the model predicts another one with a "
     "probability above this (the official editing_threshold; [generation] mode sets it)",
     NULL, "[0,1]"},
    {"max_post_steps", TIDE_OPT_INT, "16",
     "steps a block may still run, editing only, once no mask is left (the official "
     "max_post_steps)",
     NULL, "[0,100000]"},
    {"num_to_transfer", TIDE_OPT_INT, "1",
     "masked positions a step commits at least: the most confident ones when fewer than this "
     "are above threshold (the official num_to_transfer)",
     NULL, "[1,100000]"},
    {"max_block_steps", TIDE_OPT_INT, "0",
     "safety bound on the steps of one block (the official loop has none); 0 = 100000, far "
     "above any block seen to end. A greedy block whose state repeats ends before it (the "
     "official loop would never end); a block that reaches it ends, with a warning",
     NULL, "[0,]"},
    {"end_on_repeat", TIDE_OPT_BOOL, "true",
     "end a block at temperature 0 when a step starts from a state (the block's canvas and its "
     "post-step count) an earlier step had: the official loop would repeat those steps forever. "
     "false follows it up to max_block_steps",
     NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static void l21_destroy(struct tide_decoder *d)
{
    free(d);
}

/* [generation] mode: the thresholds the configuration leaves at default. */
static int l21_apply_mode(struct tide_decoder *d, const struct tide_decoder_args *a)
{
    const char *mode = d->p.mode;
    if (!mode || !*mode)
        return TIDE_OK;
    const struct l21_mode *m = NULL;
    for (size_t i = 0; i < sizeof l21_modes / sizeof l21_modes[0]; i++)
        if (!strcmp(mode, l21_modes[i].name))
            m = &l21_modes[i];
    if (!m) {
        tide_error("[generation] mode = '%s': decoder llada21 has the modes speed and quality "
                   "(docs/decoding.md)",
                   mode);
        return TIDE_E_CONFIG;
    }
    snprintf(d->mode, sizeof d->mode, "%s", m->name);
    const bool th = !strcmp(tide_opts_origin(a->gen, "threshold"), "default");
    const bool et = !a->opts || !strcmp(tide_opts_origin(a->opts, "editing_threshold"), "default");
    if (th)
        d->p.threshold = m->threshold;
    if (et)
        d->editing_threshold = m->editing_threshold;
    if (!th || !et)
        tide_info("decoder llada21: mode %s sets threshold %g and editing_threshold %g; %s set "
                  "explicitly (%s) and win%s",
                  m->name, m->threshold, m->editing_threshold,
                  !th && !et ? "[generation] threshold and [decoder-llada21] editing_threshold are"
                  : !th      ? "[generation] threshold is"
                             : "[decoder-llada21] editing_threshold is",
                  !th ? tide_opts_origin(a->gen, "threshold")
                      : tide_opts_origin(a->opts, "editing_threshold"),
                  !th && !et ? "" : "s");
    return TIDE_OK;
}

static int l21_create(const struct tide_decoder_args *a, struct tide_decoder **out)
{
    *out = NULL;
    struct tide_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return TIDE_E_NOMEM;
    dc_params_read(a->gen, &d->p);
    dc_tokens_from(a, &d->tok);
    d->V = a->info->vocab_size;
    d->max_ctx = a->info->max_ctx;
    d->editing_threshold = a->opts ? tide_opts_float(a->opts, "editing_threshold") : 0.9;
    d->max_post_steps = a->opts ? (int)tide_opts_int(a->opts, "max_post_steps") : 16;
    d->num_to_transfer = a->opts ? (int)tide_opts_int(a->opts, "num_to_transfer") : 1;
    const int64_t mbs = a->opts ? tide_opts_int(a->opts, "max_block_steps") : 0;
    const struct tide_model_info *info = a->info;
    const int attention = TIDE_INFO_HAS(info, attention) ? info->attention : TIDE_ATTN_BLOCK_CAUSAL;
    int rc = dc_check_common(&d->p);
    if (rc == TIDE_OK)
        rc = l21_apply_mode(d, a);
    if (rc != TIDE_OK) {
    } else if (attention == TIDE_ATTN_FULL && !d->p.recompute) {
        tide_error("[generation] decoder = llada21 with the KV cache needs block-causal "
                   "attention, but model %s attends to the full sequence (the cache would be "
                   "inexact); set [generation] recompute = true",
                   info->arch ? info->arch : "?");
        rc = TIDE_E_CONFIG;
    } else if (d->p.cfg_scale > 0 || d->p.prefix_cache || d->p.remask_random) {
        tide_error("[generation] %s is not part of decoder llada21 (the official LLaDA2.1 "
                   "generate() has no such option); leave it at its default",
                   d->p.cfg_scale > 0  ? "cfg_scale"
                   : d->p.prefix_cache ? "prefix_cache"
                                       : "remasking = random");
        rc = TIDE_E_CONFIG;
    } else if (!(d->editing_threshold >= 0) || d->editing_threshold > 1) {
        tide_error("[decoder-llada21] editing_threshold must lie in [0, 1]");
        rc = TIDE_E_CONFIG;
    }
    if (rc != TIDE_OK) {
        l21_destroy(d);
        return rc;
    }
    d->bound_set = mbs > 0;
    d->end_on_repeat = a->opts ? tide_opts_bool(a->opts, "end_on_repeat") : true;
    d->max_block_steps = mbs > 0 ? (int)(mbs < 1000000 ? mbs : 1000000) : L21_SAFETY_STEPS;
    if (strcmp(tide_opts_origin(a->gen, "steps"), "default") ||
        strcmp(tide_opts_origin(a->gen, "minimal_topk"), "default"))
        tide_info("decoder llada21: [generation] steps and minimal_topk have no effect (the "
                  "official LLaDA2.1 loop computes steps and never uses it: a block runs until "
                  "it is full, then up to max_post_steps editing steps)");
    if (!(d->p.temperature > 0) && (d->p.top_k > 0 || d->p.top_p < 1.0))
        tide_info("decoder llada21: top_k and top_p have no effect at temperature 0 (the official "
                  "LLaDA2.1 sampler takes the argmax of the unfiltered logits)");
    *out = d;
    return TIDE_OK;
}

/* E2: the prompt plus gen_length, rounded up to whole blocks (dc_blocks_ctx);
 * steps are open-ended. max_forwards counts max_block_steps per block; the
 * default safety bound is no planning figure, so max_steps is then 0 (no
 * bound known: placement policies and traces take the steps blocks run). */
static int l21_plan(const struct tide_decoder *d, int64_t P, struct tide_decoder_plan *out)
{
    struct tide_decoder_plan pl = {.size = sizeof pl};
    const int rc =
        dc_blocks_plan(&d->p, d->max_ctx, P, d->max_block_steps, 0, TIDE_STEPS_UNUSED, &pl);
    if (rc != TIDE_OK)
        return rc;
    if (!d->bound_set)
        pl.max_steps = 0;
    dc_plan_out(out, &pl);
    return TIDE_OK;
}

/* A position of the block, with what this step predicts for it. */
struct l21_pos {
    double conf;
    int32_t pos; /* block-relative */
};

static int l21_pos_desc(const void *a, const void *b)
{
    const struct l21_pos *x = a, *y = b;
    if (x->conf != y->conf)
        return x->conf < y->conf ? 1 : -1;
    return x->pos - y->pos;
}

/* One generation: the official loop's variables, kept between forwards. */
struct tide_decoder_seq {
    const struct tide_decoder *d;
    const struct tide_decoder_host *h;
    struct dc_sampler sp;
    struct dc_canvas c; /* E2: the canvas and where the loop stands */
    float *logits;      /* [rows, V]: a step's forward */
    struct dc_rows rs;
    struct l21_pos *cand; /* [L] */
    int32_t *x0, *old;    /* [L] */
    double *conf;         /* [L] */
    int32_t *dpos, *span; /* [L] the step's decided positions, their rows */
    uint8_t *commit;      /* [L] 1: committed, 2: edited */
    const float **row;    /* [L] */
    struct dc_rng rng;
    int s;      /* the block's next step */
    int post;   /* its steps that found no mask (E4) */
    int n_mask; /* masks at the posted step's start */
    int n_rows; /* the posted step's decided positions */
    bool over;  /* the block's steps are over (E4, E10, a repeat, max_block_steps) */
    /* Departure 3: the block's states at its steps' starts (greedy only):
     * n_seen canvases of L ids, each with its post count and hash. */
    int32_t *seen;
    int *seen_post;
    uint64_t *seen_hash;
    int n_seen, cap_seen;
    int *slot; /* [n_slot] open addressing over the states: index + 1, 0 = empty */
    int n_slot;
    bool stop; /* E13 */
    int64_t end;
    int64_t steps, edits; /* result */
    int blocks;
    bool stopped;
};

static int l21_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out);

static int l21_begin(struct tide_decoder *d, const struct tide_decoder_host *h,
                     const int32_t *prompt, int64_t P, struct tide_decoder_seq **out)
{
    *out = NULL;
    const struct dc_params *p = &d->p;
    const int L = p->block, V = d->V;
    struct tide_decoder_seq *q = calloc(1, sizeof *q);
    if (!q)
        return TIDE_E_NOMEM;
    q->d = d;
    q->h = h;
    /* E6, _sample_with_temperature_topk_topp of LLaDA2.1: at temperature 0
     * the argmax of the unfiltered logits and its softmax probability; else
     * scaling (T != 1), top-k, top-p and a draw. */
    q->sp = DC_SAMPLER_OF(p, V, d->tok.mask);
    if (!(p->temperature > 0))
        q->sp.plain = true;
    /* E2: the prompt, then masks to the end of the last block. */
    const int64_t room =
        TIDE_DECODER_HAS(h, struct tide_decoder_host, context_room) ? h->context_room : 0;
    const int c_rc = dc_canvas_init(&q->c, p, prompt, P, d->tok.mask, room);
    const int64_t rows_max = p->recompute ? q->c.cap : L;
    q->logits = malloc(sizeof *q->logits * (size_t)rows_max * (size_t)V);
    const int sc_rc = dc_rows_init(&q->rs, &q->sp, V, L);
    q->cand = malloc(sizeof *q->cand * (size_t)L);
    q->x0 = malloc(sizeof *q->x0 * (size_t)L);
    q->old = malloc(sizeof *q->old * (size_t)L);
    q->conf = malloc(sizeof *q->conf * (size_t)L);
    q->dpos = malloc(sizeof *q->dpos * (size_t)L);
    q->span = malloc(sizeof *q->span * (size_t)L);
    q->commit = malloc((size_t)L);
    q->row = malloc(sizeof *q->row * (size_t)L);
    if (c_rc || !q->logits || !q->cand || !q->x0 || !q->old || !q->conf || !q->dpos || !q->span ||
        !q->commit || !q->row || sc_rc) {
        l21_finish(q, NULL);
        return TIDE_E_NOMEM;
    }
    dc_rows_host(&q->rs, h);
    dc_rng_seed(&q->rng, p->seed);
    q->end = P;
    *out = q;
    return TIDE_OK;
}

/* After block b's steps: E13, then its K/V pass when another block follows
 * (E12: the last step's K/V predate its transfers). Returns true when fwd
 * holds it. */
static bool l21_block_done(struct tide_decoder_seq *q, struct tide_decoder_fwd *fwd)
{
    const struct tide_decoder *d = q->d;
    const int64_t cwe = (q->c.b + 1) * d->p.block;
    q->end = cwe;
    q->blocks++;
    /* E13: with eos_early_stop, stop once the generated part holds no mask
     * and an EOS. */
    if (d->p.eos_early_stop) {
        bool any_mask = false;
        for (int64_t i = q->c.P; i < cwe && !any_mask; i++)
            any_mask = q->c.ids[i] == d->tok.mask;
        q->stop = !any_mask && dc_find_stop(q->c.ids, q->c.P, cwe, &d->tok) >= 0;
    }
    return dc_canvas_kv(&q->c, q->stop, fwd);
}

/* Block b is final: report it. */
static void l21_block_end(struct tide_decoder_seq *q)
{
    const struct tide_decoder *d = q->d;
    bool st;
    const int64_t cwe = (q->c.b + 1) * d->p.block;
    dc_canvas_block_end(&q->c, q->h,
                        dc_output_len(q->c.ids, q->c.P, d->p.gen_length, cwe, &d->tok, &st));
}

/* Departure 3: the block's state at the start of step q->s is its canvas
 * and its post count (E4). At temperature 0 the step is a function of that
 * state (the blocks before it are final), so a state seen at an earlier step
 * means the official loop runs the same steps again, forever. Records the
 * state and returns the earlier step that had it, -1 when none did, or
 * TIDE_E_NOMEM. */
static uint64_t l21_state_hash(const int32_t *block, int L, int post)
{
    uint64_t hv = 0xcbf29ce484222325ull ^ (uint64_t)(uint32_t)post;
    for (int i = 0; i < L; i++)
        hv = (hv ^ (uint64_t)(uint32_t)block[i]) * 0x100000001b3ull;
    return hv ^ hv >> 29;
}

/* Index state k (of hash hv) in the open-addressed table of n_slot. */
static void l21_slot_put(int *slot, int n_slot, uint64_t hv, int k)
{
    size_t i = (size_t)hv & (size_t)(n_slot - 1);
    while (slot[i])
        i = (i + 1) & (size_t)(n_slot - 1);
    slot[i] = k + 1;
}

static int l21_repeat(struct tide_decoder_seq *q, const int32_t *block, int L)
{
    const uint64_t hv = l21_state_hash(block, L, q->post);
    const size_t row = sizeof *block * (size_t)L;
    for (size_t i = (size_t)hv & (size_t)(q->n_slot - 1); q->n_slot && q->slot[i];
         i = (i + 1) & (size_t)(q->n_slot - 1)) {
        const int k = q->slot[i] - 1;
        if (q->seen_hash[k] == hv && q->seen_post[k] == q->post &&
            !memcmp(q->seen + (size_t)k * (size_t)L, block, row))
            return k;
    }
    if (q->n_seen == q->cap_seen) {
        const int cap = q->cap_seen ? 2 * q->cap_seen : 64;
        int32_t *seen = realloc(q->seen, row * (size_t)cap);
        if (seen)
            q->seen = seen;
        int *post = realloc(q->seen_post, sizeof *post * (size_t)cap);
        if (post)
            q->seen_post = post;
        uint64_t *hash = realloc(q->seen_hash, sizeof *hash * (size_t)cap);
        if (hash)
            q->seen_hash = hash;
        /* At most half full: twice the states' room. */
        int *slot = seen && post && hash ? calloc(2 * (size_t)cap, sizeof *slot) : NULL;
        if (!slot)
            return TIDE_E_NOMEM;
        free(q->slot);
        q->slot = slot;
        q->n_slot = 2 * cap;
        q->cap_seen = cap;
        for (int k = 0; k < q->n_seen; k++)
            l21_slot_put(q->slot, q->n_slot, q->seen_hash[k], k);
    }
    memcpy(q->seen + (size_t)q->n_seen * (size_t)L, block, row);
    q->seen_post[q->n_seen] = q->post;
    q->seen_hash[q->n_seen] = hv;
    l21_slot_put(q->slot, q->n_slot, hv, q->n_seen++);
    return -1;
}

static int l21_next(struct tide_decoder_seq *q, struct tide_decoder_fwd *fwd)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    struct dc_canvas *c = &q->c;
    const int L = d->p.block;
    /* E3: blocks the prompt covers are never decoded; with the cache they
     * are prefilled, one block per forward. */
    if (c->finished || dc_canvas_prefill(c, fwd))
        return c->finished ? TIDE_DECODER_DONE : TIDE_OK;
    while (c->b < c->nb && !q->stop) {
        /* Context growth (DIP): the prompt may grow between blocks; the
         * blocks it changed are prefilled again first. */
        const int grew = dc_canvas_grow(c, h, d->p.gen_length, d->tok.mask);
        if (grew < 0) {
            tide_error("decoder llada21: context growth beyond the prompt or its room");
            return grew;
        }
        if (grew && dc_canvas_prefill(c, fwd))
            return TIDE_OK;
        const int64_t b0 = c->b * L;
        if (dc_canvas_enter(c, h)) {
            q->over = false;
            q->s = 0;
            q->post = 0;
            q->n_seen = 0;
            if (q->slot)
                memset(q->slot, 0, sizeof *q->slot * (size_t)q->n_slot);
        }
        if (!q->over) {
            /* E4: the masks at the step's start; none left counts a post
             * step, and more than max_post_steps of them end the block. */
            int n_mask = 0;
            for (int i = 0; i < L; i++)
                n_mask +=
                    c->ids[b0 + i] == d->tok.mask && !dc_canvas_locked(c, b0 + i, d->tok.mask);
            if (!n_mask)
                q->post++;
            const int seen = q->post > d->max_post_steps || !q->sp.greedy || !d->end_on_repeat
                                 ? -1
                                 : l21_repeat(q, c->ids + b0, L);
            if (seen < -1)
                return seen;
            if (q->post > d->max_post_steps) {
                q->over = true;
            } else if (seen >= 0) {
                tide_warn("decoder llada21: block %lld ends at step %d, whose state (the block's "
                          "canvas, %d masks, and %d post steps) step %d had: the official loop "
                          "would repeat steps %d..%d forever (the mask token keeps winning; "
                          "generation.mask_in_argmax = false leaves it out)",
                          (long long)c->b, q->s, n_mask, q->post, seen, seen, q->s - 1);
                q->over = true;
            } else if (q->s >= d->max_block_steps) {
                tide_warn("decoder llada21: block %lld reached max_block_steps = %d with %d "
                          "masks left and ends there. This is a safety bound, far above the "
                          "longest block seen to end (14146 steps); the official loop has no "
                          "bound and might still end: raise [decoder-llada21] max_block_steps "
                          "to follow it further%s",
                          (long long)c->b, d->max_block_steps, n_mask,
                          q->sp.greedy ? ""
                                       : " (at temperature > 0 a repeated state proves nothing, "
                                         "so only this bound applies)");
                q->over = true;
            } else {
                int rc = h->step_begin(h->user, dc_canvas_gen(c), q->s);
                if (rc != TIDE_OK)
                    return rc;
                /* E5: one forward of the window [0, cwe) per step; the rows
                 * a step decides on are its masks and the positions it may
                 * edit: every position but the prompt's (which hold no
                 * mask). */
                int n_rows = 0;
                for (int i = 0; i < L; i++)
                    if (!dc_canvas_locked(c, b0 + i, d->tok.mask))
                        q->dpos[n_rows++] = i;
                q->n_mask = n_mask;
                q->n_rows = n_rows;
                dc_blocks_step_fwd(h, fwd, c->ids, c->b, L, d->p.recompute, q->dpos, n_rows,
                                   q->span, q->logits);
                c->posted = DC_POSTED_STEP;
                return TIDE_OK;
            }
        }
        if (l21_block_done(q, fwd))
            return TIDE_OK;
        l21_block_end(q);
    }
    /* E14 */
    c->finished = true;
    return TIDE_DECODER_DONE;
}

static int l21_feed(struct tide_decoder_seq *q)
{
    const struct tide_decoder *d = q->d;
    const struct tide_decoder_host *h = q->h;
    const struct dc_params *p = &d->p;
    const struct dc_tokens *tok = &d->tok;
    struct dc_canvas *c = &q->c;
    const int L = p->block;
    const int posted = c->posted;
    c->posted = DC_POSTED_NONE;
    if (posted == DC_POSTED_KV)
        l21_block_end(q);
    if (posted != DC_POSTED_STEP)
        return TIDE_OK;
    const int64_t b0 = c->b * L;
    const int n_rows = q->n_rows, s = q->s;
    const int32_t *dpos = q->dpos;
    dc_blocks_step_fed(h, c->b, L, p->recompute, s, d->V, dpos, n_rows, q->logits, q->row);
    q->steps++;
    /* E6: a token and its probability at every decided position. */
    dc_sample_rows(&q->rs, &q->sp, q->row, n_rows, d->V, &q->rng);
    for (int j = 0; j < n_rows; j++) {
        q->x0[dpos[j]] = q->rs.id[j];
        q->conf[dpos[j]] = q->rs.conf[j];
    }
    for (int i = 0; i < L; i++) {
        q->old[i] = c->ids[b0 + i];
        q->commit[i] = 0;
    }
    /* E7: the masks: all above threshold when there are at least
     * num_to_transfer of them, else the num_to_transfer most confident
     * (lower position first on ties). */
    int n_act = 0, n_high = 0;
    for (int j = 0; j < n_rows; j++) {
        const int i = dpos[j];
        if (q->old[i] != tok->mask)
            continue;
        q->cand[n_act++] = (struct l21_pos){q->conf[i], i};
        n_high += q->conf[i] > p->threshold;
    }
    if (n_act) {
        if (n_high >= d->num_to_transfer) {
            for (int k = 0; k < n_act; k++)
                q->commit[q->cand[k].pos] = q->cand[k].conf > p->threshold;
        } else {
            qsort(q->cand, (size_t)n_act, sizeof *q->cand, l21_pos_desc);
            const int k = d->num_to_transfer < n_act ? d->num_to_transfer : n_act;
            for (int j = 0; j < k; j++)
                q->commit[q->cand[j].pos] = 1;
        }
    }
    /* E8, E9: edits: a generated, unmasked position whose prediction differs
     * from its token, with probability above editing_threshold (the
     * prediction may be the mask token). */
    int edited = 0, committed = 0;
    for (int j = 0; j < n_rows; j++) {
        const int i = dpos[j];
        if (q->old[i] == tok->mask || dc_canvas_locked(c, b0 + i, tok->mask))
            continue;
        if (q->conf[i] > d->editing_threshold && q->x0[i] != q->old[i]) {
            q->commit[i] = 2;
            edited++;
        }
    }
    /* E11: both kinds of transfer at once. */
    int remaining = 0;
    for (int i = 0; i < L; i++) {
        if (q->commit[i])
            c->ids[b0 + i] = q->x0[i];
        committed += q->commit[i] == 1;
        remaining += c->ids[b0 + i] == tok->mask;
    }
    q->edits += edited;
    const struct tide_decoder_step ev = {
        .size = sizeof ev,
        .block = dc_canvas_gen(c),
        .step = s,
        .committed = committed,
        .remaining = remaining,
        .edited = edited,
    };
    h->step_end(h->user, &ev);
    q->s++;
    /* E10: no mask at the step's start and nothing edited. */
    if (!q->n_mask && !edited)
        q->over = true;
    return TIDE_OK;
}

static int l21_finish(struct tide_decoder_seq *q, struct tide_decoder_result *out)
{
    if (!q)
        return TIDE_OK;
    int rc = TIDE_OK;
    if (out && !q->c.finished) {
        rc = TIDE_E_INVAL;
    } else if (out) {
        const struct tide_decoder *d = q->d;
        const int64_t n =
            dc_output_len(q->c.ids, q->c.P, d->p.gen_length, q->end, &d->tok, &q->stopped);
        dc_result_set(out, q->c.ids, q->c.P, n, q->stopped, q->steps, q->blocks, q->edits);
    }
    dc_canvas_free(&q->c);
    free(q->logits);
    dc_rows_free(&q->rs);
    free(q->cand);
    free(q->x0);
    free(q->old);
    free(q->conf);
    free(q->dpos);
    free(q->span);
    free(q->commit);
    free(q->row);
    free(q->seen);
    free(q->seen_post);
    free(q->seen_hash);
    free(q->slot);
    free(q);
    return rc;
}

static void l21_describe(const struct tide_decoder *d, char *buf, size_t len)
{
    const struct dc_params *p = &d->p;
    snprintf(buf, len,
             "mode=%s gen_length=%lld block_length=%d threshold=%g editing_threshold=%g "
             "max_post_steps=%d num_to_transfer=%d max_block_steps=%d end_on_repeat=%s "
             "temperature=%g top_k=%d "
             "top_p=%g seed=%llu eos_early_stop=%s mask_in_argmax=%s recompute=%s",
             d->mode[0] ? d->mode : "none", (long long)p->gen_length, p->block, p->threshold,
             d->editing_threshold, d->max_post_steps, d->num_to_transfer, d->max_block_steps,
             d->end_on_repeat ? "true" : "false", p->temperature, p->top_k, p->top_p,
             (unsigned long long)p->seed, p->eos_early_stop ? "true" : "false",
             p->mask_in_argmax ? "true" : "false", p->recompute ? "true" : "false");
}

static const struct tide_decoder_ops l21_ops = {
    .size = sizeof(struct tide_decoder_ops),
    .create = l21_create,
    .destroy = l21_destroy,
    .plan = l21_plan,
    .begin = l21_begin,
    .next = l21_next,
    .feed = l21_feed,
    .finish = l21_finish,
    .describe = l21_describe,
};

static const struct tide_plugin_desc l21_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_DECODER,
    .name = L21_NAME,
    .version = "0.1.0",
    .summary = "LLaDA2.1 (modeling generate() of the 2.1 release): mask-to-token commits plus "
               "token-to-token editing, open-ended steps per block, modes speed and quality; "
               "rules E1-E14 of docs/decoding.md",
    .ops = &l21_ops,
    .options = l21_options,
};

TIDE_PLUGIN_DEFINE(l21_desc)
