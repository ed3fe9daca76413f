/* The trace simulator: decoding a trace into a tape and replaying it
 * through placement policies (sim.h). The replay mirrors the dispatcher in
 * core/runtime/moe.c event by event, so that its counters equal the engine's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_check.h"
#include "sim.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

static double sim_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- Decoding ------------------------------------------------------------ */

bool sim_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return false;
    *p = q;
    *cap = n;
    return true;
}

void tide_sim_trace_free(struct tide_sim_trace *t)
{
    if (!t)
        return;
    for (uint32_t l = 0; t->fwd && l < t->h.n_layers; l++)
        free(t->fwd[l]);
    free(t->fwd);
    free(t->n_fwd);
    free(t->ev);
    free(t->ids);
    free(t->cnt);
    free(t->vecs);
    free(t->block_steps);
    free(t->block_first);
    free(t->model);
    free(t->decoder);
    free(t->decoder_settings);
    free(t->path);
    free(t);
}

/* The forwards' pair offsets were stored in place of pointers while the
 * pair arrays grew; turn them into pointers. */
static void sim_fix_pointers(struct tide_sim_trace *t)
{
    for (uint32_t l = 0; l < t->h.n_layers; l++)
        for (size_t j = 0; j < t->n_fwd[l]; j++) {
            struct tide_solver_fwd *f = &t->fwd[l][j];
            size_t off = (size_t)(uintptr_t)f->ids;
            f->ids = t->ids + off;
            f->cnt = t->cnt + off;
        }
}

int tide_sim_trace_load(const char *path, struct tide_sim_trace **out)
{
    struct tide_trace_reader *r;
    int rc = tide_trace_reader_open(path, &r);
    if (rc != TIDE_OK)
        return rc;
    struct tide_sim_trace *t = calloc(1, sizeof *t);
    const struct tide_trace_header *h = tide_trace_reader_header(r);
    const uint32_t L = h->n_layers, E = h->n_experts;
    uint32_t *dense = calloc(E, sizeof *dense);
    size_t *fcap = calloc(L, sizeof *fcap);
    if (!t || !dense || !fcap || !(t->path = strdup(path)) ||
        !(t->model = strdup(h->model ? h->model : "")) ||
        !(t->decoder = strdup(h->decoder ? h->decoder : "")) ||
        !(t->decoder_settings = strdup(h->decoder_settings ? h->decoder_settings : "")) ||
        !(t->fwd = calloc(L, sizeof *t->fwd)) || !(t->n_fwd = calloc(L, sizeof *t->n_fwd))) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    t->h = *h;
    t->h.model = t->model;
    t->h.decoder = t->decoder;
    t->h.decoder_settings = t->decoder_settings;
    size_t ev_cap = 0, pair_cap = 0, cnt_cap = 0, vec_cap = 0, bs_cap = 0, bf_cap = 0,
           last_prompt = SIZE_MAX;
    uint32_t prompt_len = 0;
    bool first = false, in_block = false;
    /* Tokens count as the engine counts them: a prompt's generated positions
     * up to gen_length (the tail of the last block past it is decoded too,
     * and never returned). Traces that do not record gen_length count whole
     * blocks. */
    const char *gl = strstr(t->decoder_settings, "gen_length=");
    while (gl && gl != t->decoder_settings && gl[-1] != ' ')
        gl = strstr(gl + 1, "gen_length=");
    const uint64_t gen_length = gl ? strtoull(gl + 11, NULL, 10) : 0;
    uint64_t prompt_tokens = 0;
    int32_t step = -1;
    struct tide_trace_record rec;
    int got;
    while ((got = tide_trace_reader_next(r, &rec)) == 1) {
        if (!sim_grow((void **)&t->ev, &ev_cap, t->n_ev + 1, sizeof *t->ev)) {
            rc = TIDE_E_NOMEM;
            goto done;
        }
        struct sim_event *ev = &t->ev[t->n_ev++];
        memset(ev, 0, sizeof *ev);
        switch (rec.type) {
        case TIDE_TREC_PROMPT_VEC:
            /* Not an event of its own: it belongs to the prompt before it. */
            t->n_ev--;
            if (last_prompt == SIZE_MAX || t->ev[last_prompt].vec ||
                (t->n_vecs && rec.dim != t->vec_dim)) {
                tide_error("trace %s: a prompt-vector record %s", path,
                           last_prompt == SIZE_MAX ? "before any prompt"
                           : t->ev[last_prompt].vec
                               ? "twice for one prompt"
                               : "of another length than the trace's first one");
                rc = TIDE_E_FORMAT;
                goto done;
            }
            if (!sim_grow((void **)&t->vecs, &vec_cap, (t->n_vecs + 1) * rec.dim,
                          sizeof *t->vecs)) {
                rc = TIDE_E_NOMEM;
                goto done;
            }
            memcpy(&t->vecs[t->n_vecs * rec.dim], rec.vec, sizeof *t->vecs * rec.dim);
            t->vec_dim = rec.dim;
            t->ev[last_prompt].vec = (uint32_t)++t->n_vecs;
            break;
        case TIDE_TREC_JOIN:
            /* A prompt joins a running batch: the lead's block goes on. */
            last_prompt = t->n_ev - 1;
            ev->type = SIM_EV_PROMPT;
            ev->first = 1;
            ev->a = (int32_t)rec.prompt_id;
            ev->b = rec.prompt_len;
            t->prompts++;
            break;
        case TIDE_TREC_CONTEXT:
            ev->type = SIM_EV_CONTEXT;
            ev->a = (int32_t)rec.prompt_id;
            ev->b = rec.prompt_len;
            ev->fwd = rec.inserted;
            t->contexts++;
            t->context_tokens += rec.inserted;
            break;
        case TIDE_TREC_BATCH:
            t->n_ev--; /* composition only: the routes that follow hold its tokens */
            t->batch_forwards++;
            t->batch_seqs += rec.n_seq;
            break;
        case TIDE_TREC_PROMPT:
            last_prompt = t->n_ev - 1;
            ev->type = SIM_EV_PROMPT;
            ev->a = (int32_t)rec.prompt_id;
            ev->b = rec.prompt_len;
            prompt_len = rec.prompt_len;
            prompt_tokens = 0;
            first = false;
            in_block = false;
            step = -1;
            t->prompts++;
            break;
        case TIDE_TREC_BLOCK:
            ev->type = SIM_EV_BLOCK;
            ev->a = rec.block;
            ev->first = rec.first_generated;
            first = rec.first_generated;
            step = -1;
            if (!sim_grow((void **)&t->block_steps, &bs_cap, t->blocks + 1,
                          sizeof *t->block_steps) ||
                !sim_grow((void **)&t->block_first, &bf_cap, t->blocks + 1,
                          sizeof *t->block_first)) {
                rc = TIDE_E_NOMEM;
                goto done;
            }
            t->block_steps[t->blocks] = 0;
            t->block_first[t->blocks] = first;
            t->blocks++;
            in_block = true;
            {
                uint64_t n = h->block_length - (first ? prompt_len % h->block_length : 0);
                if (gen_length && prompt_tokens + n > gen_length)
                    n = gen_length > prompt_tokens ? gen_length - prompt_tokens : 0;
                prompt_tokens += n;
                t->tokens_generated += n;
            }
            break;
        case TIDE_TREC_STEP:
            ev->type = SIM_EV_STEP;
            ev->a = rec.step;
            step = rec.step;
            t->steps++;
            /* A step outside any block (a prompt record came last) belongs
             * to no block's count. */
            if (in_block) {
                uint32_t n = ++t->block_steps[t->blocks - 1];
                if (n > t->max_block_steps)
                    t->max_block_steps = n;
            }
            break;
        case TIDE_TREC_ROUTE: {
            const uint32_t l = rec.layer;
            const size_t A = (size_t)rec.n * h->top_k;
            uint32_t n_active = 0;
            for (size_t a = 0; a < A; a++)
                n_active += dense[rec.ids[a]]++ == 0;
            if (!sim_grow((void **)&t->ids, &pair_cap, t->n_pairs + n_active, sizeof *t->ids) ||
                !sim_grow((void **)&t->cnt, &cnt_cap, t->n_pairs + n_active, sizeof *t->cnt) ||
                !sim_grow((void **)&t->fwd[l], &fcap[l], t->n_fwd[l] + 1, sizeof **t->fwd)) {
                rc = TIDE_E_NOMEM;
                goto done;
            }
            const size_t off = t->n_pairs;
            for (uint32_t e = 0; e < E; e++) {
                if (dense[e]) {
                    t->ids[t->n_pairs] = (uint16_t)e;
                    t->cnt[t->n_pairs++] = dense[e];
                    dense[e] = 0;
                }
            }
            struct tide_solver_fwd *f = &t->fwd[l][t->n_fwd[l]];
            f->phase = (uint8_t)rec.phase;
            f->first_block = rec.phase == TIDE_TRACE_STEP && first;
            f->step = rec.phase == TIDE_TRACE_STEP ? step : -1;
            f->tokens = rec.n;
            f->n_active = n_active;
            f->ids = (const uint16_t *)(uintptr_t)off;
            f->cnt = NULL;
            ev->type = SIM_EV_ROUTE;
            ev->phase = (uint8_t)rec.phase;
            ev->a = (int32_t)l;
            ev->b = rec.n;
            ev->fwd = (uint32_t)t->n_fwd[l]++;
            if (rec.n > t->max_tokens)
                t->max_tokens = rec.n;
            t->assignments += A;
            break;
        }
        }
    }
    if (got < 0)
        rc = got;
    else
        sim_fix_pointers(t);
    if (t->batch_forwards && gen_length)
        t->tokens_generated = t->prompts * gen_length; /* the blocks are the lead's only */
done:
    tide_trace_reader_close(r);
    free(dense);
    free(fcap);
    if (rc != TIDE_OK) {
        if (t && t->fwd && t->n_fwd)
            sim_fix_pointers(t); /* nothing dereferences them; keep free() simple */
        tide_sim_trace_free(t);
        return rc;
    }
    *out = t;
    return TIDE_OK;
}

/* ---- Replay ---------------------------------------------------------------- */

/* One policy instance and the layers it places (one per distinct budget). */
struct sim_inst {
    const struct tide_policy_ops *ops;
    struct tide_policy *p;
    int budget;
};

struct sim {
    const struct tide_sim_trace *t;
    const struct tide_sim_config *c;
    const struct tide_cost *cost;
    FILE *metrics;
    int L, E, K;
    int *budget;  /* [L] */
    int *inst_of; /* [L] instance, -1 when the layer does not offload */
    struct sim_inst inst[8];
    int n_inst;
    uint8_t *res;           /* [L][E] residency */
    const uint8_t **rows;   /* [L] rows of res */
    int *held;              /* [L] residents */
    uint32_t *fwd_index;    /* [L] the layer's current forward */
    uint32_t *pending_prom; /* [L] prefetched promotions not yet in a forward's time */
    uint32_t *dense;        /* [E] */
    int32_t *promote, *evict;
    uint8_t *place, *mark;
    struct tide_prefetch pf;
    struct tide_sim_counters *cur; /* [L] the current phase */
    int phase, block, step;
    struct tide_sim_result *out;
};

static void sim_free(struct sim *s)
{
    for (int i = 0; i < s->n_inst; i++)
        if (s->inst[i].p)
            s->inst[i].ops->destroy(s->inst[i].p);
    free(s->budget);
    free(s->inst_of);
    free(s->res);
    free(s->rows);
    free(s->held);
    free(s->fwd_index);
    free(s->pending_prom);
    free(s->dense);
    free(s->promote);
    free(s->evict);
    free(s->place);
    free(s->mark);
    free(s->pf.layer);
    free(s->pf.expert);
    free(s->pf.evict);
    free(s->cur);
}

static void sim_add(struct tide_sim_counters *a, const struct tide_sim_counters *b)
{
    tide_traffic_add(&a->traffic, &b->traffic);
    a->us += b->us;
    a->step_us += b->step_us;
}

/* Close the current phase like moe_flush: write its lines, add it up. */
static void sim_flush(struct sim *s)
{
    for (int l = 0; l < s->L; l++) {
        struct tide_sim_counters *c = &s->cur[l];
        if (!c->tokens && !c->promotions) {
            memset(c, 0, sizeof *c);
            continue;
        }
        if (s->metrics) {
            char tail[48];
            snprintf(tail, sizeof tail, "\"model_us\":%.3f", c->us);
            tide_metrics_layer_line(s->metrics, s->phase, s->block, s->step, l, &c->traffic, tail);
        }
        sim_add(&s->out->layer[l], c);
        sim_add(&s->out->total, c);
        memset(c, 0, sizeof *c);
    }
}

/* Promote e in layer l, evicting ev (or into a free slot). */
static void sim_promote(struct sim *s, int l, int e, int ev)
{
    uint8_t *r = &s->res[(size_t)l * s->E];
    if (ev >= 0) {
        r[ev] = 0;
        s->cur[l].evictions++;
    } else {
        s->held[l]++;
    }
    r[e] = 1;
    s->cur[l].promotions++;
    s->cur[l].weight_bytes += s->t->h.expert_bytes;
}

void tide_sim_shape(const struct tide_sim_trace *t, int budget,
                    const struct tide_policy_costs *costs, struct tide_policy_shape *out)
{
    *out = (struct tide_policy_shape){
        .size = sizeof *out,
        .n_layers = (int)t->h.n_layers,
        .n_moe_layers = (int)t->h.n_layers,
        .n_experts = (int)t->h.n_experts,
        .top_k = (int)t->h.top_k,
        .expert_bytes = t->h.expert_bytes,
        .budget = budget,
        .block_length = (int)t->h.block_length,
        /* The decoder's bound, or the longest block recorded when a block
         * ran longer (a trace of a decoder without a bound). */
        .max_steps = (int)(t->max_block_steps > t->h.steps ? t->max_block_steps : t->h.steps),
        .costs = costs,
    };
}

static int sim_create_inst(struct sim *s, int budget, struct sim_inst *in)
{
    struct tide_policy_shape shape;
    tide_sim_shape(s->t, budget, s->c->costs, &shape);
    in->budget = budget;
    int rc;
    if (s->c->kind == SIM_PLUGIN) {
        in->ops = s->c->ops;
        rc = in->ops->create(&shape, s->c->opts, &in->p);
    } else {
        rc = sim_hindsight_create(s->c->kind, s->t, &shape, s->fwd_index, &in->ops, &in->p);
    }
    if (rc != TIDE_OK) {
        tide_error("sim: policy %s could not start with budget %d (%s)", s->c->label, budget,
                   tide_status_str(rc));
        in->p = NULL;
    }
    return rc;
}

static int sim_setup(struct sim *s)
{
    const int L = s->L, E = s->E;
    const size_t LE = (size_t)L * (size_t)E;
    s->budget = malloc(sizeof *s->budget * (size_t)L);
    s->inst_of = malloc(sizeof *s->inst_of * (size_t)L);
    s->res = calloc(LE ? LE : 1, 1);
    s->rows = malloc(sizeof *s->rows * (size_t)L);
    s->held = calloc((size_t)L, sizeof *s->held);
    s->fwd_index = calloc((size_t)L, sizeof *s->fwd_index);
    s->pending_prom = calloc((size_t)L, sizeof *s->pending_prom);
    s->dense = calloc((size_t)E, sizeof *s->dense);
    s->promote = malloc(sizeof *s->promote * (size_t)E);
    s->evict = malloc(sizeof *s->evict * (size_t)E);
    s->place = malloc((size_t)E);
    s->mark = malloc((size_t)E);
    s->pf.cap = (int)LE;
    s->pf.layer = malloc(sizeof *s->pf.layer * (LE ? LE : 1));
    s->pf.expert = malloc(sizeof *s->pf.expert * (LE ? LE : 1));
    s->pf.evict = malloc(sizeof *s->pf.evict * (LE ? LE : 1));
    s->cur = calloc((size_t)L, sizeof *s->cur);
    s->out->layer = calloc((size_t)L, sizeof *s->out->layer);
    if (!s->budget || !s->inst_of || !s->res || !s->rows || !s->held || !s->fwd_index ||
        !s->pending_prom || !s->dense || !s->promote || !s->evict || !s->place || !s->mark ||
        !s->pf.layer || !s->pf.expert || !s->pf.evict || !s->cur || !s->out->layer)
        return TIDE_E_NOMEM;
    int32_t *init = malloc(sizeof *init * (size_t)E);
    if (!init)
        return TIDE_E_NOMEM;
    int rc = TIDE_OK;
    for (int l = 0; l < L && rc == TIDE_OK; l++) {
        int b = s->c->layer_budget ? s->c->layer_budget[l] : s->c->budget;
        if (b < 0) {
            tide_error("sim: budget %d for MoE layer %d: must be >= 0", b, l);
            rc = TIDE_E_CONFIG;
            break;
        }
        s->budget[l] = b < E ? b : E;
        s->rows[l] = &s->res[(size_t)l * E];
        s->inst_of[l] = -1;
        if (b >= E)
            continue; /* no offload: every expert on the device, no policy */
        int i = 0;
        while (i < s->n_inst && s->inst[i].budget != b)
            i++;
        if (i == s->n_inst) {
            if (s->n_inst == (int)(sizeof s->inst / sizeof s->inst[0])) {
                tide_error("sim: at most %d distinct per-layer budgets",
                           (int)(sizeof s->inst / sizeof s->inst[0]));
                rc = TIDE_E_CONFIG;
                break;
            }
            if ((rc = sim_create_inst(s, b, &s->inst[s->n_inst])) != TIDE_OK)
                break;
            s->n_inst++;
        }
        s->inst_of[l] = i;
        int n = s->inst[i].ops->initial(s->inst[i].p, l, init);
        if (n < 0 || n > b) {
            tide_error("sim: policy %s: initial placement of MoE layer %d has %d experts (budget "
                       "%d)",
                       s->c->label, l, n, b);
            rc = TIDE_E_INVAL;
        }
        uint8_t *r = &s->res[(size_t)l * E];
        for (int k = 0; k < n && rc == TIDE_OK; k++) {
            if (init[k] < 0 || init[k] >= E || r[init[k]]) {
                tide_error("sim: policy %s: initial placement of MoE layer %d names expert %d "
                           "(out of range or twice)",
                           s->c->label, l, init[k]);
                rc = TIDE_E_INVAL;
            } else {
                r[init[k]] = 1;
                s->held[l]++;
            }
        }
    }
    free(init);
    return rc;
}

/* The prefetches of one instance at step start, validated like the
 * dispatcher's; entries for layers of other instances are ignored. */
static int sim_prefetch(struct sim *s, int i)
{
    struct sim_inst *in = &s->inst[i];
    if (!TIDE_OPS_HAS(in->ops, step_begin))
        return TIDE_OK;
    s->pf.n = 0;
    int rc = in->ops->step_begin(in->p, s->block, s->step, s->rows, &s->pf);
    if (rc != TIDE_OK) {
        tide_error("sim: policy %s failed at the start of block %d step %d", s->c->label, s->block,
                   s->step);
        return rc;
    }
    if (s->pf.n < 0 || s->pf.n > s->pf.cap) {
        tide_error("sim: policy %s: prefetch count %d out of range", s->c->label, s->pf.n);
        return TIDE_E_INVAL;
    }
    for (int k = 0; k < s->pf.n; k++) {
        int l = s->pf.layer[k], e = s->pf.expert[k], ev = s->pf.evict[k];
        if (l >= 0 && l < s->L && s->inst_of[l] != i)
            continue;
        const bool ok_l = l >= 0 && l < s->L;
        const char *bad = tide_prefetch_check(s->E, ok_l ? s->budget[l] : 0, ok_l ? s->held[l] : 0,
                                              ok_l ? s->rows[l] : NULL, e, ev);
        if (bad) {
            tide_error("sim: policy %s: invalid prefetch at block %d step %d (layer %d, expert %d, "
                       "evict %d): %s",
                       s->c->label, s->block, s->step, l, e, ev, bad);
            return TIDE_E_INVAL;
        }
        sim_promote(s, l, e, ev);
        s->pending_prom[l]++;
    }
    return TIDE_OK;
}

/* The plan rules of the dispatcher (plan_check.c, shared with moe.c). */
static int sim_check_plan(struct sim *s, int l, const struct tide_plan *p)
{
    const struct tide_plan_ctx c = {
        .n_experts = s->E,
        .budget = s->budget[l],
        .n_held = s->held[l],
        .resident = s->rows[l],
        .counts = s->dense,
        .mark = s->mark,
    };
    char why[200];
    if (!tide_plan_check(&c, p, why, sizeof why))
        return TIDE_OK;
    tide_error("sim: policy %s returned an invalid plan at MoE layer %d, block %d, step %d: it %s",
               s->c->label, l, s->block, s->step, why);
    return TIDE_E_INVAL;
}

static int sim_route(struct sim *s, const struct sim_event *ev)
{
    const int l = ev->a, E = s->E;
    const struct tide_solver_fwd *f = &s->t->fwd[l][ev->fwd];
    s->fwd_index[l] = ev->fwd;
    const uint8_t *r = s->rows[l];
    for (uint32_t a = 0; a < f->n_active; a++)
        s->dense[f->ids[a]] = f->cnt[a];
    struct tide_layer_work w = {.tokens = f->tokens, .promotions = s->pending_prom[l]};
    s->pending_prom[l] = 0;
    const int i = s->inst_of[l];
    int rc = TIDE_OK;
    uint8_t *place = s->place;
    if (i < 0) {
        memset(place, TIDE_PLACE_DEVICE, (size_t)E);
    } else {
        for (int e = 0; e < E; e++)
            place[e] = r[e] ? TIDE_PLACE_DEVICE : TIDE_PLACE_HOST;
        if (s->phase == TIDE_TRACE_STEP) {
            const struct tide_policy_view v = {
                .layer = l, .block = s->block, .step = s->step, .counts = s->dense, .resident = r};
            struct tide_plan plan = {.promote = s->promote, .evict = s->evict, .place = place};
            struct sim_inst *in = &s->inst[i];
            if ((rc = in->ops->plan(in->p, &v, &plan)) != TIDE_OK) {
                tide_error("sim: policy %s failed at MoE layer %d, block %d, step %d", s->c->label,
                           l, s->block, s->step);
            } else if ((rc = sim_check_plan(s, l, &plan)) == TIDE_OK) {
                for (int k = 0; k < plan.n_promote; k++)
                    sim_promote(s, l, plan.promote[k], plan.evict[k]);
                w.promotions += (uint32_t)plan.n_promote;
            }
        }
    }
    struct tide_sim_counters *c = &s->cur[l];
    for (uint32_t a = 0; a < f->n_active; a++) {
        const uint32_t e = f->ids[a], n = f->cnt[a];
        if (place[e] == TIDE_PLACE_DEVICE) {
            w.device_us += tide_cost_device(s->cost, n);
            c->hit_rows += n;
        } else {
            w.host_us += tide_cost_host(s->cost, n);
            w.host_rows += n;
        }
        s->dense[e] = 0;
    }
    c->miss_rows += w.host_rows;
    c->act_bytes += w.host_rows * s->t->h.hidden * 6u;
    c->tokens += f->tokens;
    c->active += f->n_active;
    const double us = tide_cost_layer_us(s->cost, &w);
    c->us += us;
    if (s->phase == TIDE_TRACE_STEP)
        c->step_us += us;
    return rc;
}

int tide_sim_run(const struct tide_sim_trace *t, const struct tide_sim_config *c,
                 const struct tide_cost *cost, FILE *metrics, struct tide_sim_result *out)
{
    memset(out, 0, sizeof *out);
    struct sim s = {
        .t = t,
        .c = c,
        .cost = cost,
        .metrics = metrics,
        .L = (int)t->h.n_layers,
        .E = (int)t->h.n_experts,
        .K = (int)t->h.top_k,
        .phase = TIDE_TRACE_PREFILL,
        .out = out,
    };
    const double t0 = sim_now();
    int rc = sim_setup(&s);
    for (size_t k = 0; k < t->n_ev && rc == TIDE_OK; k++) {
        const struct sim_event *ev = &t->ev[k];
        switch (ev->type) {
        case SIM_EV_PROMPT:
            if (!ev->first) { /* the previous generation finished (tide_moe_finish) */
                sim_flush(&s);
                s.phase = TIDE_TRACE_PREFILL;
                s.block = 0;
                s.step = 0;
            }
            for (int i = 0; i < s.n_inst; i++) /* tide_moe_prompt_begin */
                if (TIDE_OPS_HAS(s.inst[i].ops, prompt_begin))
                    s.inst[i].ops->prompt_begin(
                        s.inst[i].p, ev->b, ev->vec ? &t->vecs[(ev->vec - 1) * t->vec_dim] : NULL,
                        ev->vec ? (int)t->vec_dim : 0);
            break;
        case SIM_EV_CONTEXT: /* tide_moe_context */
            sim_flush(&s);
            s.phase = TIDE_TRACE_PREFILL;
            for (int i = 0; i < s.n_inst; i++)
                if (TIDE_OPS_HAS(s.inst[i].ops, prompt_grow))
                    s.inst[i].ops->prompt_grow(s.inst[i].p, ev->b, ev->fwd);
            break;
        case SIM_EV_BLOCK:
            sim_flush(&s);
            s.block = ev->a;
            s.step = 0;
            s.phase = TIDE_TRACE_KV;
            for (int i = 0; i < s.n_inst; i++)
                if (s.inst[i].ops->block_begin)
                    s.inst[i].ops->block_begin(s.inst[i].p, ev->a, ev->first != 0);
            break;
        case SIM_EV_STEP:
            sim_flush(&s);
            s.step = ev->a;
            s.phase = TIDE_TRACE_STEP;
            for (int i = 0; i < s.n_inst && rc == TIDE_OK; i++)
                rc = sim_prefetch(&s, i);
            break;
        case SIM_EV_ROUTE:
            if (ev->phase != s.phase) { /* the step ended (tide_moe_step_end) */
                sim_flush(&s);
                s.phase = ev->phase;
            }
            rc = sim_route(&s, ev);
            break;
        }
    }
    if (rc == TIDE_OK)
        sim_flush(&s);
    out->seconds = sim_now() - t0;
    sim_free(&s);
    if (rc != TIDE_OK)
        tide_sim_result_free(out);
    return rc;
}

void tide_sim_result_free(struct tide_sim_result *r)
{
    if (!r)
        return;
    free(r->layer);
    r->layer = NULL;
}

double tide_sim_tok_per_s(const struct tide_sim_trace *t, const struct tide_sim_counters *c)
{
    return c->us > 0 ? (double)t->tokens_generated / (c->us * 1e-6) : 0.0;
}

double tide_sim_ms_per_step(const struct tide_sim_trace *t, const struct tide_sim_counters *c)
{
    return t->steps ? c->us / 1e3 / (double)t->steps : 0.0;
}

/* ---- Statistics ------------------------------------------------------------ */

static bool sim_block_selected(const struct tide_sim_trace *t, uint64_t b,
                               enum tide_sim_blocks which)
{
    return which == TIDE_SIM_BLOCKS_ALL || (which == TIDE_SIM_BLOCKS_FIRST) == !!t->block_first[b];
}

int tide_sim_steps_dist(const struct tide_sim_trace *t, enum tide_sim_blocks which,
                        struct tide_sim_steps *out, uint64_t *hist)
{
    memset(out, 0, sizeof *out);
    const size_t n_hist = (size_t)t->max_block_steps + 1;
    uint64_t *h = hist ? hist : calloc(n_hist, sizeof *h);
    if (!h)
        return TIDE_E_NOMEM;
    memset(h, 0, sizeof *h * n_hist);
    double sum = 0;
    for (uint64_t b = 0; b < t->blocks; b++) {
        if (!sim_block_selected(t, b, which))
            continue;
        const uint32_t n = t->block_steps[b];
        h[n]++;
        sum += n;
        if (!out->blocks || n < out->min)
            out->min = n;
        if (n > out->max)
            out->max = n;
        out->blocks++;
    }
    if (out->blocks) {
        out->mean = sum / (double)out->blocks;
        /* The values at ranks (n-1)/2 and n/2 (0-based), by counting. */
        const uint64_t lo = (out->blocks - 1) / 2, hi = out->blocks / 2;
        uint64_t seen = 0;
        double a = -1, c = -1;
        for (size_t s = 0; s < n_hist && c < 0; s++) {
            seen += h[s];
            if (a < 0 && seen > lo)
                a = (double)s;
            if (seen > hi)
                c = (double)s;
        }
        out->median = (a + c) / 2;
    }
    if (!hist)
        free(h);
    return TIDE_OK;
}

void tide_sim_steps_str(const struct tide_sim_steps *d, char *buf, size_t len)
{
    if (!d->blocks)
        snprintf(buf, len, "no block");
    else
        snprintf(buf, len, "%llu block%s, min %u, median %g, mean %.2f, max %u",
                 (unsigned long long)d->blocks, d->blocks == 1 ? "" : "s", d->min, d->median,
                 d->mean, d->max);
}

/* Cosine of two count vectors and Jaccard of their supports; ids ascending. */
static void sim_pair_sim(const struct tide_solver_fwd *a, const struct tide_solver_fwd *b,
                         double *cos, double *jac)
{
    double dot = 0, na = 0, nb = 0;
    uint32_t i = 0, j = 0, inter = 0;
    while (i < a->n_active || j < b->n_active) {
        if (j >= b->n_active || (i < a->n_active && a->ids[i] < b->ids[j])) {
            na += (double)a->cnt[i] * a->cnt[i];
            i++;
        } else if (i >= a->n_active || b->ids[j] < a->ids[i]) {
            nb += (double)b->cnt[j] * b->cnt[j];
            j++;
        } else {
            dot += (double)a->cnt[i] * b->cnt[j];
            na += (double)a->cnt[i] * a->cnt[i];
            nb += (double)b->cnt[j] * b->cnt[j];
            inter++;
            i++;
            j++;
        }
    }
    uint32_t uni = a->n_active + b->n_active - inter;
    *cos = na > 0 && nb > 0 ? dot / sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
    *jac = uni ? (double)inter / uni : 1.0;
}

void tide_sim_similarity(const struct tide_solver_fwd *const *fwd, const size_t *n_fwd,
                         int n_layers, int max_d, double *cos, double *jac, uint64_t *pairs)
{
    const size_t rows = (size_t)(n_layers + 1) * (size_t)max_d;
    uint64_t *np = calloc(rows, sizeof *np);
    for (size_t i = 0; i < rows; i++)
        cos[i] = jac[i] = 0;
    for (int l = 0; np && l < n_layers; l++) {
        const struct tide_solver_fwd *f = fwd[l];
        for (size_t j = 0; j < n_fwd[l]; j++) {
            if (f[j].phase != TIDE_TRACE_STEP)
                continue;
            /* Later steps of the same block: ascending, uninterrupted. */
            for (size_t k = j + 1; k < n_fwd[l]; k++) {
                if (f[k].phase != TIDE_TRACE_STEP || f[k].step <= f[k - 1].step)
                    break;
                int d = f[k].step - f[j].step;
                if (d > max_d)
                    break;
                double c, q;
                sim_pair_sim(&f[j], &f[k], &c, &q);
                const size_t at = (size_t)l * max_d + (size_t)(d - 1);
                const size_t all = (size_t)n_layers * max_d + (size_t)(d - 1);
                cos[at] += c;
                jac[at] += q;
                np[at]++;
                cos[all] += c;
                jac[all] += q;
                np[all]++;
            }
        }
    }
    for (size_t i = 0; np && i < rows; i++) {
        if (np[i]) {
            cos[i] /= (double)np[i];
            jac[i] /= (double)np[i];
        }
        if (pairs)
            pairs[i] = np[i];
    }
    free(np);
}
