/* A trace's prompts replayed as a batch (tide_sim_trace_batch, sim.h).
 *
 * Batch invariance makes this exact: a sequence's routing does not depend
 * on its companions, so the forward the engine runs for a batch is the sum of
 * its members' own forwards. The rounds follow the engine's batch runner
 * (core/runtime/batch.c): each round is one forward holding every running
 * sequence's next forward; sequences join in trace order at the start of a
 * round while fewer than `batch` run, and leave after their last forward.
 * The policy sees the lead's (the oldest running sequence's) block and step
 * records and phase, and when the lead leaves, a block record for the new
 * lead's current block, as the dispatcher does. */
#include <stdlib.h>
#include <string.h>

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
        if (emit && (ev->type == SIM_EV_BLOCK || ev->type == SIM_EV_STEP)) {
            *stale = false;
            int rc = sb_emit(o, ev);
            if (rc != TIDE_OK)
                return rc;
        }
    }
    return TIDE_OK;
}

static int sb_run(const struct tide_sim_trace *t, int batch, struct sb_out *o, struct sb_seq *seq,
                  size_t n_seq)
{
    int *active = malloc(sizeof *active * (size_t)batch);
    size_t *rf = malloc(sizeof *rf * (size_t)batch), *rt = malloc(sizeof *rt * (size_t)batch),
           *re = malloc(sizeof *re * (size_t)batch);
    uint32_t *dense = calloc(t->h.n_experts, sizeof *dense);
    int rc = active && rf && rt && re && dense ? TIDE_OK : TIDE_E_NOMEM;
    int n_active = 0, lead = -1;
    size_t next = 0;
    bool stale = false; /* a lead took over and has not begun a step since */
    while (rc == TIDE_OK) {
        /* The previous round's sequences resume (in the engine, after its
         * forward): each runs to its next forward, or finishes and leaves.
         * The lead's records reach the policy; the others' do not. */
        int k = 0;
        bool lead_left = false;
        for (int a = 0; a < n_active; a++) {
            const int s = active[a];
            if (sb_next_forward(t, &seq[s], &rf[k], &rt[k], &re[k]))
                active[k++] = s;
            else if (s == lead)
                lead_left = true;
        }
        n_active = k;
        for (int a = 0; rc == TIDE_OK && a < n_active; a++)
            rc = sb_pre(t, o, &seq[active[a]], rf[a], rt[a], active[a] == lead && !lead_left,
                        &stale);
        if (lead_left || !n_active)
            lead = -1;
        if (rc == TIDE_OK && lead_left && n_active) {
            /* The oldest one leads now and announces its current block. */
            lead = active[0];
            stale = false;
            if (seq[lead].block >= 0) {
                const struct sim_event ev = {.type = SIM_EV_BLOCK, .a = seq[lead].block};
                rc = sb_emit(o, &ev);
                stale = true;
            }
        }
        /* Join in trace order while a slot is free; each runs to its first
         * forward. One joining an empty batch leads from its start (its
         * records go out before the next one joins); one joining a running
         * batch does not reset the dispatcher's phase (first = 1). */
        while (rc == TIDE_OK && n_active < batch && next < n_seq) {
            struct sb_seq *q = &seq[next];
            struct sim_event ev = t->ev[q->begin];
            ev.first = n_active > 0;
            rc = sb_emit(o, &ev);
            q->cur = q->begin + 1;
            const int s = (int)next++;
            if (rc != TIDE_OK ||
                !sb_next_forward(t, q, &rf[n_active], &rt[n_active], &re[n_active]))
                continue; /* no forward at all: it ends as it starts */
            const bool leads = n_active == 0;
            if (leads) {
                lead = s;
                stale = false;
            }
            rc = sb_pre(t, o, q, rf[n_active], rt[n_active], leads, &stale);
            active[n_active++] = s;
        }
        if (rc != TIDE_OK || n_active == 0) {
            if (rc == TIDE_OK && next < n_seq)
                continue;
            break;
        }
        if (rc == TIDE_OK)
            rc = sb_merge(t, o, n_active, rt, re, stale, dense);
        if (n_active > 1) {
            o->t->batch_forwards++;
            o->t->batch_seqs += (uint64_t)n_active;
        }
        for (int a = 0; a < n_active; a++)
            seq[active[a]].cur = re[a];
    }
    free(active);
    free(rf);
    free(rt);
    free(re);
    free(dense);
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
