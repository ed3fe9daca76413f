/* A trace's prompts replayed as a batch (tide_sim_trace_batch, sim.h).
 *
 * Batch invariance makes this exact: a sequence's routing does not depend
 * on its companions, so the forward the engine runs for a batch is the sum of
 * its members' own forwards. The rounds are the engine loop's own: this file
 * drives the scheduler that the engine runs on (core/runtime/scheduler.h,
 * tide_sched_run), with a trace's recorded forwards in place of decoders.
 * Sequences join in trace order while fewer than `batch` run and leave after
 * their last forward; each round is one forward holding every running
 * sequence's next forward. The policy sees the lead's (the oldest running
 * sequence's) block and step records and phase, and when the lead leaves, a
 * block record for the new lead's current block, as the dispatcher does. */
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "sim.h"
#include "tide/log.h"
#include "tide/status.h"

/* One prompt of the source tape: where its events are. */
struct sb_seq {
    size_t begin, end; /* events [begin, end): its PROMPT event first */
    size_t cur;        /* next event not yet consumed */
    int32_t block;     /* its current block (-1: none yet) */
};

/* The merged tape being written. */
struct sb_out {
    struct tide_sim_trace *t;
    size_t ev_cap, pair_cap, cnt_cap, *fcap;
};

static int sb_emit(struct sb_out *o, const struct sim_event *ev)
{
    struct tide_sim_trace *t = o->t;
    if (!sim_grow((void **)&t->ev, &o->ev_cap, t->n_ev + 1, sizeof *t->ev))
        return TIDE_E_NOMEM;
    t->ev[t->n_ev++] = *ev;
    return TIDE_OK;
}

/* The source events of sequence q's next forward: [*from, *to) are the
 * records before it (block, step) and [*to, *end) its ROUTE events, one
 * per layer in ascending order. False when q has no forward left. */
static bool sb_next_forward(const struct tide_sim_trace *t, const struct sb_seq *q, size_t *from,
                            size_t *to, size_t *end)
{
    size_t i = q->cur;
    while (i < q->end && t->ev[i].type != SIM_EV_ROUTE)
        i++;
    if (i == q->end)
        return false;
    size_t j = i + 1;
    while (j < q->end && t->ev[j].type == SIM_EV_ROUTE && t->ev[j].a > t->ev[j - 1].a)
        j++;
    *from = q->cur;
    *to = i;
    *end = j;
    return true;
}

/* The merged forward of one round: per layer, the sum of the members' counts. */
static int sb_merge(const struct tide_sim_trace *t, struct sb_out *o, int n_active,
                    const size_t *rt, const size_t *re, bool stale, uint32_t *dense)
{
    struct tide_sim_trace *m = o->t;
    const struct sim_event *lead = &t->ev[rt[0]];
    /* The dispatcher's phase is the lead's, except after a new lead took
     * over: its block record set KV, until its next step record. */
    const uint8_t phase_all = stale ? (uint8_t)TIDE_TRACE_KV : lead->phase;
    const uint32_t L = t->h.n_layers, E = t->h.n_experts;
    for (uint32_t l = 0; l < L; l++) {
        uint32_t tokens = 0, n_active_e = 0;
        const uint8_t phase = phase_all;
        const struct tide_solver_fwd *lf = NULL;
        for (int k = 0; k < n_active; k++) {
            for (size_t i = rt[k]; i < re[k]; i++) {
                const struct sim_event *ev = &t->ev[i];
                if ((uint32_t)ev->a != l)
                    continue;
                const struct tide_solver_fwd *f = &t->fwd[l][ev->fwd];
                if (k == 0)
                    lf = f;
                tokens += f->tokens;
                for (uint32_t x = 0; x < f->n_active; x++)
                    n_active_e += dense[f->ids[x]] == 0, dense[f->ids[x]] += f->cnt[x];
            }
        }
        if (!tokens)
            continue; /* no member routed through this layer (cannot happen with whole forwards) */
        if (!sim_grow((void **)&m->ids, &o->pair_cap, m->n_pairs + n_active_e, sizeof *m->ids) ||
            !sim_grow((void **)&m->cnt, &o->cnt_cap, m->n_pairs + n_active_e, sizeof *m->cnt) ||
            !sim_grow((void **)&m->fwd[l], &o->fcap[l], m->n_fwd[l] + 1, sizeof **m->fwd))
            return TIDE_E_NOMEM;
        const size_t off = m->n_pairs;
        for (uint32_t e = 0; e < E; e++)
            if (dense[e]) {
                m->ids[m->n_pairs] = (uint16_t)e;
                m->cnt[m->n_pairs++] = dense[e];
                m->assignments += dense[e];
                dense[e] = 0;
            }
        struct tide_solver_fwd *f = &m->fwd[l][m->n_fwd[l]];
        *f = (struct tide_solver_fwd){
            .phase = phase,
            .first_block = lf && phase == TIDE_TRACE_STEP ? lf->first_block : false,
            .step = lf && phase == TIDE_TRACE_STEP ? lf->step : -1,
            .tokens = tokens,
            .n_active = n_active_e,
            .ids = (const uint16_t *)(uintptr_t)off,
        };
        const struct sim_event ev = {
            .type = SIM_EV_ROUTE,
            .phase = phase,
            .a = (int32_t)l,
            .b = tokens,
            .fwd = (uint32_t)m->n_fwd[l]++,
        };
        if (tokens > m->max_tokens)
            m->max_tokens = tokens;
        int rc = sb_emit(o, &ev);
        if (rc != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}

/* Copy what does not change with batching: header, strings, prompts and
 * tokens, prompt vectors. */
static int sb_copy_meta(const struct tide_sim_trace *t, struct tide_sim_trace *m)
{
    m->h = t->h;
    if (!(m->path = strdup(t->path)) || !(m->model = strdup(t->model)) ||
        !(m->decoder = strdup(t->decoder)) || !(m->decoder_settings = strdup(t->decoder_settings)))
        return TIDE_E_NOMEM;
    m->h.model = m->model;
    m->h.decoder = m->decoder;
    m->h.decoder_settings = m->decoder_settings;
    m->prompts = t->prompts;
    m->tokens_generated = t->tokens_generated;
    if (t->n_vecs) {
        const size_t n = t->n_vecs * t->vec_dim;
        if (!(m->vecs = malloc(sizeof *m->vecs * n)))
            return TIDE_E_NOMEM;
        memcpy(m->vecs, t->vecs, sizeof *m->vecs * n);
        m->n_vecs = t->n_vecs;
        m->vec_dim = t->vec_dim;
    }
    return TIDE_OK;
}

/* The records before a member's forward: its block moves; emitted only
 * when it leads (emit), which ends a stale phase. */
static int sb_pre(const struct tide_sim_trace *t, struct sb_out *o, struct sb_seq *q, size_t from,
                  size_t to, bool emit, bool *stale)
{
    for (size_t i = from; i < to; i++) {
        const struct sim_event *ev = &t->ev[i];
        if (ev->type == SIM_EV_BLOCK)
            q->block = ev->a;
        if (emit &&
            (ev->type == SIM_EV_BLOCK || ev->type == SIM_EV_STEP || ev->type == SIM_EV_CONTEXT)) {
            *stale = false;
            int rc = sb_emit(o, ev);
            if (rc != TIDE_OK)
                return rc;
        }
    }
    return TIDE_OK;
}

/* The scheduler's view of the replay: slots hold sequences of the tape. */
struct sb_replay {
    const struct tide_sim_trace *t;
    struct sb_out *o;
    struct sb_seq *seq;
    size_t n_seq, next;   /* sequences; the next to join */
    size_t *at;           /* [batch] the sequence in each slot */
    size_t *rf, *rt, *re; /* [batch] its next forward: records [rf, rt), routes [rt, re) */
    size_t *mt, *me;      /* [batch] one forward's members, the lead first */
    uint32_t *dense;      /* [n_experts] scratch of sb_merge */
    bool stale;           /* a lead took over and has not begun a step since */
    int err;              /* a record that could not be written (the next forward fails) */
};

/* Join in trace order; its prompt record goes out at once (first: it joins
 * a running batch, which does not reset the dispatcher's phase). */
static int sr_admit(void *u, int slot, int n_running)
{
    struct sb_replay *r = u;
    if (r->next >= r->n_seq)
        return TIDE_SCHED_NONE;
    struct sb_seq *q = &r->seq[r->next];
    struct sim_event ev = r->t->ev[q->begin];
    ev.first = n_running > 0;
    int rc = sb_emit(r->o, &ev);
    if (rc != TIDE_OK)
        return rc;
    q->cur = q->begin + 1;
    r->at[slot] = r->next++;
    return TIDE_SCHED_ADMITTED;
}

/* The sequence runs to its next forward; only the lead's records go out. */
static int sr_resume(void *u, int slot, bool first, bool lead, int fwd_rc)
{
    struct sb_replay *r = u;
    if (fwd_rc != TIDE_OK)
        return fwd_rc;
    struct sb_seq *q = &r->seq[r->at[slot]];
    if (!first)
        q->cur = r->re[slot];
    if (!sb_next_forward(r->t, q, &r->rf[slot], &r->rt[slot], &r->re[slot]))
        return 0;
    int rc = sb_pre(r->t, r->o, q, r->rf[slot], r->rt[slot], lead, &r->stale);
    return rc == TIDE_OK ? 1 : rc;
}

/* The merged forward of a round: the lead's routes first. */
static int sr_forward(void *u, const int *slots, int n, int lead)
{
    struct sb_replay *r = u;
    if (r->err != TIDE_OK)
        return r->err;
    int k = 0;
    if (lead >= 0) {
        r->mt[k] = r->rt[lead];
        r->me[k++] = r->re[lead];
    }
    for (int i = 0; i < n; i++)
        if (slots[i] != lead) {
            r->mt[k] = r->rt[slots[i]];
            r->me[k++] = r->re[slots[i]];
        }
    int rc = sb_merge(r->t, r->o, k, r->mt, r->me, r->stale, r->dense);
    if (n > 1) {
        r->o->t->batch_forwards++;
        r->o->t->batch_seqs += (uint64_t)n;
    }
    return rc;
}

/* A new lead announces its current block. */
static void sr_lead(void *u, int slot)
{
    struct sb_replay *r = u;
    const struct sb_seq *q = &r->seq[r->at[slot]];
    r->stale = false;
    if (q->block >= 0) {
        const struct sim_event ev = {.type = SIM_EV_BLOCK, .a = q->block};
        r->err = sb_emit(r->o, &ev);
        r->stale = r->err == TIDE_OK;
    }
}

/* An empty batch resets the dispatcher's phase, as between generations. */
static void sr_drained(void *u)
{
    ((struct sb_replay *)u)->stale = false;
}

static int sb_run(const struct tide_sim_trace *t, int batch, struct sb_out *o, struct sb_seq *seq,
                  size_t n_seq)
{
    const size_t B = (size_t)batch;
    struct sb_replay r = {
        .t = t,
        .o = o,
        .seq = seq,
        .n_seq = n_seq,
        .at = malloc(sizeof *r.at * B),
        .rf = malloc(sizeof *r.rf * B),
        .rt = malloc(sizeof *r.rt * B),
        .re = malloc(sizeof *r.re * B),
        .mt = malloc(sizeof *r.mt * B),
        .me = malloc(sizeof *r.me * B),
        .dense = calloc(t->h.n_experts, sizeof *r.dense),
    };
    int rc = r.at && r.rf && r.rt && r.re && r.mt && r.me && r.dense ? TIDE_OK : TIDE_E_NOMEM;
    if (rc == TIDE_OK) {
        const struct tide_sched_ops ops = {
            .user = &r,
            .admit = sr_admit,
            .resume = sr_resume,
            .forward = sr_forward,
            .lead = sr_lead,
            .drained = sr_drained,
        };
        rc = tide_sched_run(batch, &ops);
    }
    free(r.at);
    free(r.rf);
    free(r.rt);
    free(r.re);
    free(r.mt);
    free(r.me);
    free(r.dense);
    return rc;
}

/* Blocks and steps of the merged tape: the lead's clock, as the records of a
 * batched trace give them (the loader counts those the same way). */
static int sb_clock(struct tide_sim_trace *m)
{
    size_t cap = 0;
    for (size_t i = 0; i < m->n_ev; i++)
        cap += m->ev[i].type == SIM_EV_BLOCK;
    if (cap && (!(m->block_steps = calloc(cap, sizeof *m->block_steps)) ||
                !(m->block_first = calloc(cap, sizeof *m->block_first))))
        return TIDE_E_NOMEM;
    bool in_block = false;
    for (size_t i = 0; i < m->n_ev; i++) {
        const struct sim_event *ev = &m->ev[i];
        if (ev->type == SIM_EV_PROMPT && !ev->first) {
            in_block = false;
        } else if (ev->type == SIM_EV_BLOCK) {
            m->block_first[m->blocks++] = ev->first;
            in_block = true;
        } else if (ev->type == SIM_EV_STEP) {
            m->steps++;
            if (in_block && ++m->block_steps[m->blocks - 1] > m->max_block_steps)
                m->max_block_steps = m->block_steps[m->blocks - 1];
        }
    }
    return TIDE_OK;
}

int tide_sim_trace_batch(const struct tide_sim_trace *t, int batch, struct tide_sim_trace **out)
{
    *out = NULL;
    if (batch < 1) {
        tide_error("batch of %d sequences: must be at least 1", batch);
        return TIDE_E_RANGE;
    }
    /* The prompts: each from its PROMPT event to the next one. */
    size_t n_seq = 0;
    for (size_t i = 0; i < t->n_ev; i++)
        n_seq += t->ev[i].type == SIM_EV_PROMPT;
    if (!n_seq || t->ev[0].type != SIM_EV_PROMPT) {
        tide_error("trace %s: %s; it cannot be replayed as a batch", t->path,
                   n_seq ? "events before its first prompt record" : "no prompt records");
        return TIDE_E_FORMAT;
    }
    struct sb_seq *seq = calloc(n_seq, sizeof *seq);
    struct tide_sim_trace *m = calloc(1, sizeof *m);
    struct sb_out o = {.t = m};
    const uint32_t L = t->h.n_layers;
    int rc = seq && m ? TIDE_OK : TIDE_E_NOMEM;
    if (rc == TIDE_OK &&
        (!(m->fwd = calloc(L, sizeof *m->fwd)) || !(m->n_fwd = calloc(L, sizeof *m->n_fwd)) ||
         !(o.fcap = calloc(L, sizeof *o.fcap))))
        rc = TIDE_E_NOMEM;
    if (rc == TIDE_OK) {
        size_t k = 0;
        for (size_t i = 0; i < t->n_ev; i++) {
            if (t->ev[i].type != SIM_EV_PROMPT)
                continue;
            if (k)
                seq[k - 1].end = i;
            seq[k++] = (struct sb_seq){.begin = i, .block = -1};
        }
        seq[n_seq - 1].end = t->n_ev;
        rc = sb_copy_meta(t, m);
    }
    if (rc == TIDE_OK)
        rc = sb_run(t, batch, &o, seq, n_seq);
    if (rc == TIDE_OK)
        rc = sb_clock(m);
    if (m && m->fwd && m->n_fwd) {
        for (uint32_t l = 0; l < L; l++)
            for (size_t j = 0; j < m->n_fwd[l]; j++) {
                struct tide_solver_fwd *f = &m->fwd[l][j];
                const size_t off = (size_t)(uintptr_t)f->ids;
                f->ids = m->ids + off;
                f->cnt = m->cnt + off;
            }
    }
    free(o.fcap);
    free(seq);
    if (rc != TIDE_OK) {
        tide_sim_trace_free(m);
        return rc;
    }
    *out = m;
    return TIDE_OK;
}
