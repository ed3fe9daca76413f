/* Batched decoding (see batch.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "log_errors.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

struct batch;

/* A KV-cache slot and the sequence running in it. */
struct bslot {
    struct batch *b;
    int idx;
    struct tide_batch_seq *s; /* NULL: free */
    pthread_t th;
    uint64_t order;    /* admission order: the lowest running one leads; its trace prompt id */
    bool join;         /* admitted while others ran (a join record, not a prompt record) */
    bool turn;         /* holds the baton */
    pthread_cond_t go; /* the sequence waits here for its turn (one condition each: a
                          hand-over wakes one thread, not the whole batch) */
    bool posted;       /* asked for a forward, waiting for it */
    bool finished;     /* its decoder returned */
    struct tide_seq_span span;
    int fwd_rc;
    int block; /* its last block_begin */
    bool in_block;
    struct tide_gen_hooks hooks; /* what its decoder calls */
};

struct batch {
    struct tide_engine *e;
    const struct tide_batch_feed *feed;
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* the caller's thread waits here for the baton back */
    struct bslot *slot; /* [max] */
    int max, n_active;
    uint64_t next_order;
    int lead;                    /* slot of the lead, -1 when none runs */
    bool lead_left;              /* it finished during this round's resumes */
    int64_t n_ctx, per_tokens;   /* reserved: positions per slot, rows per sequence */
    struct tide_batch_seq *held; /* admitted once the batch drains (needs a bigger reserve) */
    struct tide_seq_span *spans; /* [max] one round's forward */
    uint32_t *ids;               /* [max] its prompts' ids, for the trace */
};

static bool bs_is_lead(const struct bslot *sl)
{
    return sl->b->lead == sl->idx;
}

/* ---- a sequence's side: its thread and its decoder's hooks -------------- */

/* Hand the baton back to the caller's thread and wait for it again. */
static void bs_yield(struct bslot *sl)
{
    struct batch *b = sl->b;
    pthread_mutex_lock(&b->mu);
    sl->turn = false;
    pthread_cond_signal(&b->cv);
    while (!sl->turn)
        pthread_cond_wait(&sl->go, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

static int bs_forward(void *u, const int32_t *ids, int64_t n, int64_t pos0, const int32_t *rows,
                      int64_t n_rows, float *logits)
{
    struct bslot *sl = u;
    sl->span = (struct tide_seq_span){
        .size = sizeof sl->span,
        .slot = sl->idx,
        .ids = ids,
        .n = n,
        .pos0 = pos0,
        .rows = logits ? rows : NULL,
        .n_rows = !logits ? 0
                  : rows  ? n_rows
                          : n,
        .logits = logits,
    };
    sl->posted = true;
    bs_yield(sl);
    return sl->fwd_rc;
}

static void bs_block_begin(void *u, int block, bool first)
{
    struct bslot *sl = u;
    const struct tide_gen_hooks *h = sl->s->hooks;
    sl->block = block;
    sl->in_block = true;
    if (bs_is_lead(sl))
        tide_moe_block_begin(sl->b->e->moe, block, first);
    if (h && h->block_begin)
        h->block_begin(h->user, block, first);
}

static int bs_step_begin(void *u, int block, int step)
{
    struct bslot *sl = u;
    const struct tide_gen_hooks *h = sl->s->hooks;
    int rc = TIDE_OK;
    if (bs_is_lead(sl))
        rc = tide_moe_step_begin(sl->b->e->moe, block, step);
    if (rc == TIDE_OK && h && h->step_begin)
        rc = h->step_begin(h->user, block, step);
    return rc;
}

static void bs_step_logits(void *u, int64_t block, int step, const float *logits, int rows,
                           int vocab)
{
    const struct tide_gen_hooks *h = ((struct bslot *)u)->s->hooks;
    h->step_logits(h->user, block, step, logits, rows, vocab);
}

static void bs_step_rows(void *u, int64_t block, int step, int n, const int32_t *pos,
                         const float *const *rows, int vocab)
{
    const struct tide_gen_hooks *h = ((struct bslot *)u)->s->hooks;
    if (h && h->step_rows)
        h->step_rows(h->user, block, step, n, pos, rows, vocab);
}

static void bs_step_end(void *u, const struct tide_decoder_step *st)
{
    struct bslot *sl = u;
    const struct tide_gen_hooks *h = sl->s->hooks;
    if (bs_is_lead(sl))
        tide_moe_step_end(sl->b->e->moe);
    if (h && h->step_end)
        h->step_end(h->user, st);
}

static void bs_block_end(void *u, int block, const int32_t *gen, int64_t n)
{
    const struct tide_gen_hooks *h = ((struct bslot *)u)->s->hooks;
    if (h && h->block_end)
        h->block_end(h->user, block, gen, n);
}

static void *bs_main(void *arg)
{
    struct bslot *sl = arg;
    struct batch *b = sl->b;
    pthread_mutex_lock(&b->mu);
    while (!sl->turn)
        pthread_cond_wait(&sl->go, &b->mu);
    pthread_mutex_unlock(&b->mu);
    struct tide_batch_seq *s = sl->s;
    struct tide_engine *e = b->e;
    tide_log_errors_clear(); /* this thread's messages are the sequence's */
    s->rc = tide_engine_prompt_begin(e, s->prompt, s->n, (uint32_t)sl->order, sl->join);
    if (s->rc == TIDE_OK)
        s->rc = tide_decode_run(s->d ? s->d : &e->dec, e->mops, e->model, s->prompt, s->n,
                                &sl->hooks, &s->result);
    if (s->rc != TIDE_OK)
        snprintf(s->error, sizeof s->error, "%s", tide_log_errors());
    pthread_mutex_lock(&b->mu);
    sl->finished = true;
    sl->turn = false;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- the caller's side: admission, rounds ------------------------------- */

/* Let slot sl's sequence run until it asks for a forward or finishes; a
 * finished one leaves (its slot freed, done() called). */
static void bt_turn(struct batch *b, struct bslot *sl)
{
    pthread_mutex_lock(&b->mu);
    sl->posted = false;
    sl->turn = true;
    pthread_cond_signal(&sl->go);
    while (sl->turn)
        pthread_cond_wait(&b->cv, &b->mu);
    const bool finished = sl->finished;
    pthread_mutex_unlock(&b->mu);
    if (!finished)
        return;
    pthread_join(sl->th, NULL);
    pthread_cond_destroy(&sl->go);
    struct tide_batch_seq *s = sl->s;
    s->slot = sl->idx;
    sl->s = NULL;
    b->n_active--;
    if (b->lead == sl->idx) {
        /* No one leads until this round's sequences have all resumed
         * (bt_new_lead), so the policy hears of no event in between. */
        b->lead = -1;
        b->lead_left = true;
    }
    if (b->n_active == 0)
        tide_moe_finish(b->e->moe); /* as between two generations alone */
    b->feed->done(b->feed->user, s);
}

/* After a round: when the lead left, the oldest running sequence leads, and
 * the policy's block clock moves to its current block. */
static void bt_new_lead(struct batch *b)
{
    if (!b->lead_left)
        return;
    b->lead_left = false;
    for (int i = 0; i < b->max; i++)
        if (b->slot[i].s && (b->lead < 0 || b->slot[i].order < b->slot[b->lead].order))
            b->lead = i;
    if (b->lead >= 0 && b->slot[b->lead].in_block)
        tide_moe_block_begin(b->e->moe, b->slot[b->lead].block, false);
}

/* Make room for a sequence whose plan needs n_ctx positions and max_tokens
 * rows per forward (only while nothing runs: growing discards the caches). */
static int bt_reserve(struct batch *b, int64_t n_ctx, int64_t max_tokens)
{
    if (n_ctx <= b->n_ctx && max_tokens <= b->per_tokens)
        return TIDE_OK;
    n_ctx = n_ctx > b->n_ctx ? n_ctx : b->n_ctx;
    max_tokens = max_tokens > b->per_tokens ? max_tokens : b->per_tokens;
    const struct tide_model_ops *o = b->e->mops;
    int rc = b->max > 1 ? o->reserve_slots(b->e->model, b->max, n_ctx, max_tokens * b->max)
                        : o->reserve(b->e->model, n_ctx, max_tokens);
    if (rc != TIDE_OK)
        return rc;
    b->n_ctx = n_ctx;
    b->per_tokens = max_tokens;
    return TIDE_OK;
}

/* Admit s: check its plan, reserve, start its thread in the lowest free slot
 * and run it to its first forward. Returns false when s must wait for the
 * batch to drain (held); a refused s is done() at once. */
static bool bt_admit(struct batch *b, struct tide_batch_seq *s)
{
    struct tide_engine *e = b->e;
    struct tide_decoder_plan plan;
    memset(&s->result, 0, sizeof s->result);
    s->error[0] = 0;
    s->rc = tide_decode_plan(s->d ? s->d : &e->dec, s->n, e->mops->info(e->model)->max_ctx, &plan);
    if (s->rc != TIDE_OK) {
        b->feed->done(b->feed->user, s);
        return true;
    }
    if ((plan.n_ctx > b->n_ctx || plan.max_tokens > b->per_tokens) && b->n_active > 0) {
        b->held = s;
        return false;
    }
    if ((s->rc = bt_reserve(b, plan.n_ctx, plan.max_tokens)) != TIDE_OK) {
        b->feed->done(b->feed->user, s);
        return true;
    }
    struct bslot *sl = NULL;
    for (int i = 0; i < b->max && !sl; i++)
        if (!b->slot[i].s)
            sl = &b->slot[i];
    const struct tide_gen_hooks *h = s->hooks;
    *sl = (struct bslot){
        .b = b,
        .idx = (int)(sl - b->slot),
        .s = s,
        .order = b->next_order++,
        .join = b->n_active > 0,
        .hooks =
            {
                .user = sl,
                .block_begin = bs_block_begin,
                .step_begin = bs_step_begin,
                .step_logits = h && h->step_logits ? bs_step_logits : NULL,
                .step_rows = bs_step_rows,
                .step_end = bs_step_end,
                .block_end = bs_block_end,
                .forward = bs_forward,
            },
    };
    pthread_cond_init(&sl->go, NULL);
    if (pthread_create(&sl->th, NULL, bs_main, sl) != 0) {
        tide_error("batch: cannot start a thread for a sequence");
        pthread_cond_destroy(&sl->go);
        sl->s = NULL;
        s->rc = TIDE_E_NOMEM;
        b->feed->done(b->feed->user, s);
        return true;
    }
    b->n_active++;
    if (b->lead < 0)
        b->lead = sl->idx;
    bt_turn(b, sl);
    return true;
}

/* One forward over every posted span, in slot order. */
static int bt_forward(struct batch *b)
{
    int n = 0;
    for (int i = 0; i < b->max; i++)
        if (b->slot[i].s && b->slot[i].posted)
            b->spans[n++] = b->slot[i].span;
    if (!n)
        return TIDE_OK;
    const struct tide_trace_sink *trace = tide_moe_get_trace(b->e->moe);
    if (n > 1 && trace && trace->batch) {
        /* The trace's batch record: the prompts of this forward, in span order. */
        for (int i = 0, k = 0; i < b->max; i++)
            if (b->slot[i].s && b->slot[i].posted)
                b->ids[k++] = (uint32_t)b->slot[i].order;
        int rc = trace->batch(trace->user, (uint32_t)n, b->ids);
        if (rc != TIDE_OK)
            return rc;
    }
    const struct tide_model_ops *o = b->e->mops;
    struct tide_model *m = b->e->model;
    if (TIDE_OPS_HAS(o, forward_batch))
        return o->forward_batch(m, b->spans, n);
    /* One sequence at a time (max_batch 1) on a model without batches. */
    const struct tide_seq_span *s = &b->spans[0];
    if (s->rows && TIDE_OPS_HAS(o, forward_rows))
        return o->forward_rows(m, s->ids, s->n, s->pos0, s->rows, s->n_rows, s->logits);
    if (!s->rows && (s->n_rows == 0 || s->n_rows == s->n))
        return o->forward(m, s->ids, s->n, s->pos0, s->n_rows ? s->logits : NULL);
    tide_error("batch: model %s cannot compute chosen rows (no forward_rows)",
               b->e->mops->info(m)->arch);
    return TIDE_E_UNSUPPORTED;
}

int tide_batch_run(struct tide_engine *e, int max_batch, const struct tide_batch_feed *feed)
{
    const struct tide_model_ops *o = e->mops;
    if (max_batch < 1) {
        tide_error("batch: max_batch must be at least 1 (got %d)", max_batch);
        return TIDE_E_INVAL;
    }
    if (max_batch > 1 && (!TIDE_OPS_HAS(o, forward_batch) || !TIDE_OPS_HAS(o, reserve_slots))) {
        tide_error("batch: model plugin %s has no forward_batch (an older plugin): it decodes one "
                   "sequence at a time; use a batch of 1",
                   e->model_pl ? e->model_pl->desc->name : o->info(e->model)->arch);
        return TIDE_E_UNSUPPORTED;
    }
    struct batch b = {.e = e, .feed = feed, .max = max_batch, .lead = -1};
    b.slot = calloc((size_t)max_batch, sizeof *b.slot);
    b.spans = calloc((size_t)max_batch, sizeof *b.spans);
    b.ids = calloc((size_t)max_batch, sizeof *b.ids);
    if (!b.slot || !b.spans || !b.ids) {
        free(b.slot);
        free(b.spans);
        free(b.ids);
        return TIDE_E_NOMEM;
    }
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cv, NULL);
    for (;;) {
        /* Join: the held sequence once the batch drained, then new ones. */
        if (b.held && b.n_active == 0) {
            struct tide_batch_seq *s = b.held;
            b.held = NULL;
            bt_admit(&b, s);
        }
        while (!b.held && b.n_active < b.max) {
            struct tide_batch_seq *s = feed->next(feed->user, b.n_active == 0);
            if (!s || !bt_admit(&b, s))
                break;
        }
        if (b.n_active == 0 && !b.held)
            break;
        if (feed->between)
            feed->between(feed->user);
        /* Every running sequence has asked for its forward. */
        const int rc = bt_forward(&b);
        for (int i = 0; i < b.max; i++)
            if (b.slot[i].s && b.slot[i].posted)
                b.slot[i].fwd_rc = rc;
        for (int i = 0; i < b.max; i++)
            if (b.slot[i].s && b.slot[i].posted)
                bt_turn(&b, &b.slot[i]);
        bt_new_lead(&b);
    }
    tide_moe_finish(e->moe);
    pthread_cond_destroy(&b.cv);
    pthread_mutex_destroy(&b.mu);
    free(b.slot);
    free(b.spans);
    free(b.ids);
    return TIDE_OK;
}
