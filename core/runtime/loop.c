/* The engine loop (loop.h): the scheduler's ops over decoders and a model. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dip.h"
#include "finite.h"
#include "log_errors.h"
#include "loop.h"
#include "scheduler.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"
#include "tide/trace.h"

struct loop;

/* A slot and the generation running in it. */
struct lslot {
    struct loop *lp;
    int idx;
    struct tide_loop_seq *s; /* NULL: free */
    struct tide_decode *d;
    struct tide_decoder_seq *ds;
    struct tide_decoder_plan plan;
    struct tide_decoder_host host;
    struct tide_decoder_fwd fwd; /* the forward it posted */
    uint32_t id;                 /* its prompt id in the trace */
    bool lead;                   /* its events reach the policy */
    int block, step;             /* its last events */
    bool in_block, begun;        /* a block began (not yet the next one's), any block began */
    double t0, prefill, t_step;
    int64_t forwards;         /* its passes (spans) */
    int64_t calls;            /* the model's forward calls it took part in */
    struct tide_dip_run *dip; /* its in-context examples (DIP); NULL: none */
    int64_t prompt_n;         /* its prompt's tokens now */
    int64_t attended;         /* key positions its passes attended */
    int64_t computed;         /* positions its passes computed */
};

struct loop {
    const struct tide_loop_env *env;
    const struct tide_loop_feed *feed;
    int max, V;
    int64_t max_ctx;
    struct lslot *slot;          /* [max] */
    struct tide_loop_seq *held;  /* admitted once the batch drains (needs a bigger reserve) */
    int64_t n_ctx, per_tokens;   /* reserved: positions per slot, positions per span */
    int per_slots;               /* reserved: model slots per sequence */
    uint64_t next_order;         /* admission order, for trace ids */
    struct tide_seq_span *spans; /* [max * TIDE_DECODER_MAX_SPANS] one forward's */
    uint32_t *ids;               /* [max] its prompts' trace ids */
    const float **rowp;          /* [cap_rows] the NaN check's rows */
    int32_t *rowpos;
    size_t cap_rows;
    char fwd_error[1024]; /* the messages of the last failed forward */
};

static double lp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- a generation's events ---------------------------------------------- */

static const struct tide_gen_hooks *ls_hooks(const struct lslot *L)
{
    return L->s->hooks;
}

static void ls_block_begin(void *u, int block, bool first)
{
    struct lslot *L = u;
    if (!L->begun) {
        L->prefill = lp_now() - L->t0;
        L->begun = true;
    }
    L->block = block;
    L->step = 0;
    L->in_block = true;
    if (L->lead && L->lp->env->moe)
        tide_moe_block_begin(L->lp->env->moe, block, first);
    const struct tide_gen_hooks *h = ls_hooks(L);
    if (h && h->block_begin)
        h->block_begin(h->user, block, first);
}

static int ls_step_begin(void *u, int block, int step)
{
    struct lslot *L = u;
    if (tide_stop_requested())
        return TIDE_E_INTERRUPTED;
    L->block = block;
    L->step = step;
    L->t_step = lp_now();
    int rc = TIDE_OK;
    if (L->lead && L->lp->env->moe)
        rc = tide_moe_step_begin(L->lp->env->moe, block, step);
    const struct tide_gen_hooks *h = ls_hooks(L);
    if (rc == TIDE_OK && h && h->step_begin)
        rc = h->step_begin(h->user, block, step);
    return rc;
}

static void ls_step_logits(void *u, int64_t block, int step, const float *logits, int rows,
                           int vocab)
{
    const struct tide_gen_hooks *h = ls_hooks(u);
    if (h && h->step_logits)
        h->step_logits(h->user, block, step, logits, rows, vocab);
}

static void ls_step_rows(void *u, int64_t block, int step, int n, const int32_t *pos,
                         const float *const *rows, int vocab)
{
    const struct tide_gen_hooks *h = ls_hooks(u);
    if (h && h->step_rows)
        h->step_rows(h->user, block, step, n, pos, rows, vocab);
}

/* The metrics lines' ",\"seq\":N" when the loop batches, else "". */
static void ls_seq_tag(const struct lslot *L, char *buf, size_t len)
{
    buf[0] = 0;
    if (L->lp->max > 1)
        snprintf(buf, len, ",\"seq\":%d", L->idx);
}

static void ls_step_end(void *u, const struct tide_decoder_step *st)
{
    struct lslot *L = u;
    struct loop *lp = L->lp;
    /* A decoder built against an older header reports fewer fields. */
    struct tide_decoder_step ev = {0};
    memcpy(&ev, st, st->size < sizeof ev ? st->size : sizeof ev);
    ev.size = sizeof ev;
    if (L->lead && lp->env->moe)
        tide_moe_step_end(lp->env->moe);
    if (lp->env->metrics) {
        char seq[32];
        ls_seq_tag(L, seq, sizeof seq);
        fprintf(lp->env->metrics,
                "{\"type\":\"step\",\"block\":%d,\"step\":%d,\"seconds\":%.6f,"
                "\"committed\":%d,\"masks_left\":%d,\"edited\":%d%s}\n",
                ev.block, ev.step, lp_now() - L->t_step, ev.committed, ev.remaining, ev.edited,
                seq);
    }
    const struct tide_gen_hooks *h = ls_hooks(L);
    if (h && h->step_end)
        h->step_end(h->user, &ev);
}

static void ls_block_end(void *u, int block, const int32_t *gen, int64_t n)
{
    struct lslot *L = u;
    L->in_block = false;
    const struct tide_gen_hooks *h = ls_hooks(L);
    if (h && h->block_end)
        h->block_end(h->user, block, gen, n);
}

/* DIP: the examples due before block `block` join the prompt. */
static int64_t ls_context_grow(void *u, int block, const int32_t **ids, int64_t *at)
{
    struct lslot *L = u;
    struct loop *lp = L->lp;
    const int64_t m = L->dip ? tide_dip_grow(L->dip, block, ids, at) : 0;
    if (m <= 0)
        return 0;
    L->prompt_n += m;
    if (L->lead && lp->env->moe &&
        tide_moe_context(lp->env->moe, L->id, (uint32_t)*at, (uint32_t)m, (uint32_t)L->prompt_n) !=
            TIDE_OK)
        tide_warn("trace: the context record of prompt %u could not be written", L->id);
    if (lp->env->metrics) {
        char seq[32];
        ls_seq_tag(L, seq, sizeof seq);
        fprintf(lp->env->metrics,
                "{\"type\":\"context\",\"block\":%d,\"at\":%lld,\"inserted\":%lld,"
                "\"prompt_tokens\":%lld%s}\n",
                block, (long long)*at, (long long)m, (long long)L->prompt_n, seq);
    }
    return m;
}

static void ls_parallel(void *u, int nt_max, void (*fn)(void *ctx, int tid, int nt), void *ctx)
{
    const struct lslot *L = u;
    L->lp->env->parallel(L->lp->env->user, nt_max, fn, ctx);
}

/* ---- admission ---------------------------------------------------------- */

/* Make room for plans of n_ctx positions, spans of max_tokens and slots
 * contexts per sequence (only while nothing runs: growing discards the
 * caches). */
static int lp_reserve(struct loop *lp, int64_t n_ctx, int64_t max_tokens, int slots)
{
    if (n_ctx <= lp->n_ctx && max_tokens <= lp->per_tokens && slots <= lp->per_slots)
        return TIDE_OK;
    n_ctx = n_ctx > lp->n_ctx ? n_ctx : lp->n_ctx;
    max_tokens = max_tokens > lp->per_tokens ? max_tokens : lp->per_tokens;
    slots = slots > lp->per_slots ? slots : lp->per_slots;
    const int n_slots = lp->max * slots;
    int rc = lp->env->ops->reserve_slots(lp->env->m, n_slots, n_ctx, max_tokens * n_slots);
    if (rc != TIDE_OK)
        return rc;
    lp->n_ctx = n_ctx;
    lp->per_tokens = max_tokens;
    lp->per_slots = slots;
    return TIDE_OK;
}

static void lp_error(struct tide_loop_seq *s, const char *msg)
{
    if (!s->error[0])
        snprintf(s->error, sizeof s->error, "%s", msg);
}

/* s ends with rc before it ran (refused). */
static void lp_refuse(struct loop *lp, struct tide_loop_seq *s, int rc)
{
    s->rc = rc;
    lp_error(s, tide_log_errors());
    lp->feed->done(lp->feed->user, s);
}

static int lp_admit(void *u, int slot, int n_running)
{
    struct loop *lp = u;
    struct tide_loop_seq *s = lp->held;
    lp->held = NULL;
    if (!s && !(s = lp->feed->next(lp->feed->user, n_running == 0)))
        return TIDE_SCHED_NONE;
    tide_log_errors_clear(); /* the messages of this sequence's checks only */
    memset(&s->result, 0, sizeof s->result);
    s->error[0] = 0;
    s->slot = slot;
    struct tide_decode *d = s->d ? s->d : lp->env->dec;
    struct lslot *L = &lp->slot[slot];
    *L = (struct lslot){.lp = lp, .idx = slot, .d = d, .t0 = lp_now()};
    /* DIP: the pool ranked for this prompt; the plan holds every example. */
    const int32_t *prompt = s->prompt;
    int64_t n_prompt = s->n, room = 0;
    int rc = TIDE_OK;
    if (lp->env->dip && (rc = tide_dip_start(lp->env->dip, lp->env->ops, lp->env->m, s->prompt,
                                             s->n, &L->dip)) == TIDE_OK)
        n_prompt += tide_dip_tokens(L->dip);
    if (rc == TIDE_OK &&
        (rc = tide_decode_plan(d, n_prompt, lp->max_ctx, &L->plan)) == TIDE_E_RANGE && L->dip)
        tide_error("[dip]: the prompt (%lld tokens) with its in-context examples (%lld tokens) is "
                   "too long for the model; lower [dip] shots or set [dip] budget",
                   (long long)s->n, (long long)tide_dip_tokens(L->dip));
    if (rc == TIDE_OK && L->dip) {
        if ((rc = tide_dip_compose(L->dip, L->plan.blocks)) == TIDE_OK) {
            prompt = tide_dip_prompt(L->dip, &n_prompt);
            room = tide_dip_room(L->dip);
            char msg[256];
            tide_dip_summary(L->dip, msg, sizeof msg);
            tide_info("%s", msg);
            json_t *j = lp->env->metrics ? tide_dip_json(lp->env->dip, L->dip) : NULL;
            if (j) {
                json_object_set_new(j, "type", json_string("dip"));
                if (lp->max > 1)
                    json_object_set_new(j, "seq", json_integer(slot));
                json_dumpf(j, lp->env->metrics, JSON_COMPACT);
                fputc('\n', lp->env->metrics);
                json_decref(j);
            }
        }
        const bool grows = TIDE_DECODER_HAS(&L->plan, struct tide_decoder_plan, grows_context) &&
                           L->plan.grows_context;
        if (rc == TIDE_OK && room > 0 && !grows) {
            tide_error("[dip] mode = dynamic: decoder %s does not take context growth (its plan "
                       "has no grows_context); [dip] mode = upfront works with any decoder",
                       d->pl->desc->name);
            rc = TIDE_E_CONFIG;
        }
        /* Each insertion may prefill the prompt's blocks again. */
        if (rc == TIDE_OK && room > 0 && L->plan.max_forwards > 0 && L->plan.block_length > 0)
            L->plan.max_forwards +=
                (int64_t)L->plan.blocks * (L->plan.n_ctx / L->plan.block_length + 1);
    }
    L->prompt_n = n_prompt;
    const int slots = L->plan.slots > 0 ? L->plan.slots : 1;
    if (rc == TIDE_OK && slots > TIDE_DECODER_MAX_SPANS) {
        tide_error("decoder %s: its plan asks for %d KV-cache slots per generation, at most %d",
                   d->pl->desc->name, slots, TIDE_DECODER_MAX_SPANS);
        rc = TIDE_E_INVAL;
    }
    if (rc == TIDE_OK && n_running > 0 &&
        (L->plan.n_ctx > lp->n_ctx || L->plan.max_tokens > lp->per_tokens ||
         slots > lp->per_slots)) {
        lp->held = s;
        tide_dip_run_free(L->dip); /* ranked again when admitted */
        L->dip = NULL;
        return TIDE_SCHED_HOLD;
    }
    if (rc == TIDE_OK)
        rc = lp_reserve(lp, L->plan.n_ctx, L->plan.max_tokens, slots);
    if (rc == TIDE_OK && lp->feed->start)
        rc = lp->feed->start(lp->feed->user, s);
    if (rc == TIDE_OK) {
        L->id = (uint32_t)(s->trace_id >= 0 ? (uint64_t)s->trace_id : lp->next_order);
        lp->next_order++;
        if (lp->env->prompt_begin)
            rc = lp->env->prompt_begin(lp->env->user, prompt, n_prompt, L->id, n_running > 0);
    }
    if (rc == TIDE_OK) {
        L->s = s;
        L->host = (struct tide_decoder_host){
            .size = sizeof L->host,
            .user = L,
            .block_logits = d->all_logits || (s->hooks && s->hooks->step_logits),
            .block_begin = ls_block_begin,
            .step_begin = ls_step_begin,
            .step_logits = ls_step_logits,
            .step_rows = ls_step_rows,
            .step_end = ls_step_end,
            .block_end = ls_block_end,
            .parallel = lp->env->parallel ? ls_parallel : NULL,
            .context_room = room,
            .context_grow = room > 0 ? ls_context_grow : NULL,
        };
        rc = d->ops->begin(d->dec, &L->host, prompt, n_prompt, &L->ds);
        if (rc != TIDE_OK)
            L->s = NULL;
    }
    if (rc != TIDE_OK) {
        tide_dip_run_free(L->dip);
        L->dip = NULL;
        lp_refuse(lp, s, rc);
        return TIDE_SCHED_AGAIN;
    }
    return TIDE_SCHED_ADMITTED;
}

/* ---- a generation's forwards -------------------------------------------- */

/* The forward next() returned is one the plan allows. */
static int lp_check_fwd(const struct lslot *L)
{
    const struct tide_decoder_fwd *f = &L->fwd;
    const char *bad = NULL;
    const int slots = L->plan.slots > 0 ? L->plan.slots : 1;
    if (f->n_spans < 1 || f->n_spans > TIDE_DECODER_MAX_SPANS)
        bad = "a forward of no span, or of too many";
    else if (f->phase < TIDE_DECODE_PREFILL || f->phase > TIDE_DECODE_KV)
        bad = "an unknown phase";
    for (int j = 0; !bad && j < f->n_spans; j++) {
        const struct tide_seq_span *sp = &f->span[j];
        if (sp->slot < 0 || sp->slot >= slots)
            bad = "a span's slot beyond its plan's slots";
        else if (sp->n < 1 || sp->n > L->plan.max_tokens || sp->pos0 < 0 ||
                 sp->pos0 + sp->n > L->plan.n_ctx)
            bad = "a span beyond its plan's positions";
        else if (sp->n_rows < 0 || (sp->n_rows > 0 && !sp->logits) || sp->n_rows > sp->n)
            bad = "a span's rows inconsistent with its logits";
        for (int k = 0; !bad && k < j; k++)
            if (f->span[k].slot == sp->slot)
                bad = "two spans in one slot";
    }
    if (!bad)
        return TIDE_OK;
    tide_error("decoder %s asked for %s", L->d->pl->desc->name, bad);
    return TIDE_E_INVAL;
}

static int lp_grow_rows(struct loop *lp, size_t n)
{
    if (n <= lp->cap_rows)
        return TIDE_OK;
    const float **p = realloc(lp->rowp, sizeof *p * n);
    if (!p)
        return TIDE_E_NOMEM;
    lp->rowp = p;
    int32_t *q = realloc(lp->rowpos, sizeof *q * n);
    if (!q)
        return TIDE_E_NOMEM;
    lp->rowpos = q;
    lp->cap_rows = n;
    return TIDE_OK;
}

/* Every logits row of L's forward is finite (else logged, naming it). */
static int lp_check_rows(struct loop *lp, const struct lslot *L)
{
    const size_t V = (size_t)lp->V;
    for (int j = 0; j < L->fwd.n_spans; j++) {
        const struct tide_seq_span *sp = &L->fwd.span[j];
        if (!sp->n_rows)
            continue;
        int rc = lp_grow_rows(lp, (size_t)sp->n_rows);
        if (rc != TIDE_OK)
            return rc;
        for (int64_t i = 0; i < sp->n_rows; i++) {
            lp->rowp[i] = sp->logits + (size_t)i * V;
            lp->rowpos[i] = (int32_t)(sp->pos0 + (sp->rows ? sp->rows[i] : i));
        }
        rc =
            tide_logits_check_rows(lp->rowp, lp->rowpos, (int)sp->n_rows, lp->V, L->block, L->step);
        if (rc != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}

/* L's generation ended with rc (TIDE_OK: done): its result, its slot freed,
 * done(). */
static void lp_end(struct loop *lp, struct lslot *L, int rc)
{
    struct tide_loop_seq *s = L->s;
    struct tide_decoder_result res = {
        .size = sizeof res,
        .ids = NULL,
    };
    if (rc == TIDE_OK &&
        !(res.ids =
              malloc(sizeof *res.ids * (size_t)(L->plan.max_output > 0 ? L->plan.max_output : 1))))
        rc = TIDE_E_NOMEM;
    if (rc == TIDE_OK) {
        rc = L->d->ops->finish(L->ds, &res);
        if (rc == TIDE_OK && (res.n < 0 || res.n > L->plan.max_output)) {
            tide_error("decoder %s returned %lld tokens, more than its plan's %lld",
                       L->d->pl->desc->name, (long long)res.n, (long long)L->plan.max_output);
            rc = TIDE_E_INVAL;
        }
    } else {
        L->d->ops->finish(L->ds, NULL);
    }
    L->ds = NULL;
    s->rc = rc;
    if (rc == TIDE_OK) {
        const double now = lp_now();
        s->result = (struct tide_gen_result){
            .ids = res.ids,
            .n = res.n,
            .forwards = L->forwards,
            .model_forwards = L->calls,
            .steps = res.steps,
            .blocks = res.blocks,
            .stopped = res.stopped,
            .edits = res.edits,
            .seconds = now - L->t0,
            .prefill_seconds = L->begun ? L->prefill : now - L->t0,
            .prompt_tokens = s->n,
            .attended = L->attended,
            .computed = L->computed,
        };
        if (L->dip) {
            tide_dip_prompt(L->dip, &s->result.prompt_tokens);
            s->result.inserted = L->prompt_n - s->result.prompt_tokens;
            s->result.insertions = tide_dip_insertions(L->dip);
        }
    } else {
        free(res.ids);
        lp_error(s, tide_log_errors());
    }
    s->slot = L->idx;
    L->s = NULL;
    tide_dip_run_free(L->dip);
    L->dip = NULL;
    lp->feed->done(lp->feed->user, s);
}

static int lp_resume(void *u, int slot, bool first, bool lead, int fwd_rc)
{
    struct loop *lp = u;
    struct lslot *L = &lp->slot[slot];
    const struct tide_decoder_ops *o = L->d->ops;
    L->lead = lead;
    int rc = TIDE_OK;
    if (!first) {
        tide_log_errors_clear();
        if (fwd_rc != TIDE_OK) {
            lp_error(L->s, lp->fwd_error);
            rc = fwd_rc;
        } else {
            /* Its passes, as the official loop counts forwards (cfg's two
             * share one forward of the model). */
            L->forwards += L->fwd.n_spans;
            L->calls++;
            for (int j = 0; j < L->fwd.n_spans; j++) {
                L->attended += L->fwd.span[j].pos0 + L->fwd.span[j].n;
                L->computed += L->fwd.span[j].n;
            }
            rc = lp_check_rows(lp, L);
            if (rc == TIDE_OK)
                rc = o->feed(L->ds);
        }
    }
    if (rc == TIDE_OK) {
        memset(&L->fwd, 0, sizeof L->fwd);
        L->fwd.size = sizeof L->fwd;
        rc = o->next(L->ds, &L->fwd);
        if (rc == TIDE_OK && (rc = lp_check_fwd(L)) == TIDE_OK)
            return 1;
    }
    lp_end(lp, L, rc == TIDE_DECODER_DONE ? TIDE_OK : rc);
    return 0;
}

/* One forward over the posted slots' spans, in slot order. */
static int lp_forward(void *u, const int *slots, int n, int lead)
{
    (void)lead; /* the lead's events went to the dispatcher as they came */
    struct loop *lp = u;
    int ns = 0;
    for (int i = 0; i < n; i++) {
        const struct lslot *L = &lp->slot[slots[i]];
        for (int j = 0; j < L->fwd.n_spans; j++) {
            struct tide_seq_span sp = L->fwd.span[j];
            sp.size = sizeof sp;
            sp.slot = L->idx * lp->per_slots + sp.slot;
            lp->spans[ns++] = sp;
        }
    }
    const struct tide_trace_sink *trace = lp->env->moe ? tide_moe_get_trace(lp->env->moe) : NULL;
    if (n > 1 && trace && trace->batch) {
        /* The trace's batch record: the prompts of this forward, in span order. */
        for (int i = 0; i < n; i++)
            lp->ids[i] = lp->slot[slots[i]].id;
        int rc = trace->batch(trace->user, (uint32_t)n, lp->ids);
        if (rc != TIDE_OK)
            return rc;
    }
    tide_log_errors_clear();
    int rc = lp->env->ops->forward_batch(lp->env->m, lp->spans, ns);
    if (lp->env->forwards)
        ++*lp->env->forwards;
    if (rc != TIDE_OK)
        snprintf(lp->fwd_error, sizeof lp->fwd_error, "%s", tide_log_errors());
    return rc;
}

/* A new lead: the policy's block clock moves to its current block. */
static void lp_lead(void *u, int slot)
{
    struct loop *lp = u;
    const struct lslot *L = &lp->slot[slot];
    if (L->in_block && lp->env->moe)
        tide_moe_block_begin(lp->env->moe, L->block, false);
}

static void lp_drained(void *u)
{
    struct loop *lp = u;
    if (lp->env->moe)
        tide_moe_finish(lp->env->moe); /* as between two generations alone */
}

static void lp_round_begin(void *u)
{
    struct loop *lp = u;
    lp->env->round_begin(lp->env->user);
}

static void lp_round_end(void *u)
{
    struct loop *lp = u;
    lp->env->round_end(lp->env->user);
}

static void lp_between(void *u)
{
    struct loop *lp = u;
    lp->feed->between(lp->feed->user);
}

int tide_loop_run(const struct tide_loop_env *env, int max_batch, const struct tide_loop_feed *feed)
{
    if (max_batch < 1) {
        tide_error("batch: max_batch must be at least 1 (got %d)", max_batch);
        return TIDE_E_INVAL;
    }
    const struct tide_model_info *info = env->ops->info(env->m);
    struct loop lp = {
        .env = env,
        .feed = feed,
        .max = max_batch,
        .V = info->vocab_size,
        .max_ctx = info->max_ctx,
    };
    lp.slot = calloc((size_t)max_batch, sizeof *lp.slot);
    lp.spans = calloc((size_t)max_batch * TIDE_DECODER_MAX_SPANS, sizeof *lp.spans);
    lp.ids = calloc((size_t)max_batch, sizeof *lp.ids);
    int rc = lp.slot && lp.spans && lp.ids ? TIDE_OK : TIDE_E_NOMEM;
    if (rc == TIDE_OK) {
        const struct tide_sched_ops ops = {
            .user = &lp,
            .admit = lp_admit,
            .resume = lp_resume,
            .forward = lp_forward,
            .lead = lp_lead,
            .drained = lp_drained,
            .between = feed->between ? lp_between : NULL,
            .round_begin = env->round_begin ? lp_round_begin : NULL,
            .round_end = env->round_end ? lp_round_end : NULL,
        };
        rc = tide_sched_run(max_batch, &ops);
    }
    if (lp.held)
        lp_refuse(&lp, lp.held, rc != TIDE_OK ? rc : TIDE_E_CANCELLED);
    if (env->moe)
        tide_moe_finish(env->moe);
    free(lp.slot);
    free(lp.spans);
    free(lp.ids);
    free(lp.rowp);
    free(lp.rowpos);
    return rc;
}

/* ---- one generation ----------------------------------------------------- */

struct lone {
    struct tide_loop_seq seq;
    bool taken;
};

static struct tide_loop_seq *lone_next(void *u, bool idle)
{
    (void)idle;
    struct lone *o = u;
    if (o->taken)
        return NULL;
    o->taken = true;
    return &o->seq;
}

static void lone_done(void *u, struct tide_loop_seq *s)
{
    (void)u;
    (void)s;
}

int tide_loop_one(const struct tide_loop_env *env, struct tide_decode *d, const int32_t *prompt,
                  int64_t n, const struct tide_gen_hooks *hooks, int64_t trace_id,
                  struct tide_gen_result *out)
{
    memset(out, 0, sizeof *out);
    struct lone o = {
        .seq = {.d = d, .prompt = prompt, .n = n, .hooks = hooks, .trace_id = trace_id}};
    const struct tide_loop_feed feed = {.user = &o, .next = lone_next, .done = lone_done};
    int rc = tide_loop_run(env, 1, &feed);
    if (rc == TIDE_OK)
        rc = o.seq.rc;
    if (rc == TIDE_OK)
        *out = o.seq.result;
    else
        free(o.seq.result.ids);
    return rc;
}

int tide_decode_run(struct tide_decode *d, const struct tide_model_ops *ops, struct tide_model *m,
                    const int32_t *prompt, int64_t P, const struct tide_gen_hooks *hooks,
                    struct tide_gen_result *out)
{
    const struct tide_loop_env env = {
        .ops = ops,
        .m = m,
        .model_name = ops->info(m)->arch,
        .dec = d,
    };
    return tide_loop_one(&env, d, prompt, P, hooks, 0, out);
}
