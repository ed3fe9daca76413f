/* MoE dispatcher and expert store (see moe_internal.h). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe_internal.h"
#include "plan_check.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/quant.h"
#include "tide/status.h"

/* The phase of the forward being dispatched, in trace order. */
enum moe_phase {
    PHASE_PREFILL = TIDE_TRACE_PREFILL,
    PHASE_STEP = TIDE_TRACE_STEP,
    PHASE_KV = TIDE_TRACE_KV,
};

struct moe_layer {
    const struct tide_view *view[3];  /* [3 * n_experts]: gate, up, down host views */
    struct tide_expert **dev_expert;  /* [n_experts] no-offload mode, created lazily */
    struct tide_expert **host_expert; /* [n_experts] offload mode, created lazily */
    struct tide_expert **slot;        /* [budget] device slots */
    int32_t *slot_of;                 /* [n_experts] slot index, or -1 */
    int32_t *held;                    /* [budget] expert in each slot, or -1 */
    uint8_t *resident;                /* [n_experts] */
    int n_held;
    struct tide_moe_counters cur; /* the current phase */
    struct tide_moe_counters sum; /* since the last reset of the totals */
};

struct tide_moe {
    struct tide_backend_ref dev, host;
    bool has_host;
    struct tide_moe_shape shape;
    bool declared;
    const struct tide_view **views; /* [n_layers * n_experts * 3] */
    struct moe_layer *layers;

    /* placement */
    bool configured;
    bool offload;
    int budget;
    const struct tide_policy_ops *pops;
    struct tide_policy *policy;
    char policy_name[64];
    const uint8_t **resident_rows; /* [n_layers] for step_begin */

    /* generation context */
    enum moe_phase phase;
    int block, step;
    FILE *metrics;
    const struct tide_trace_sink *trace;
    int trace_rc; /* first trace write error */
    struct tide_moe_counters total;

    /* scratch, sized for the largest call */
    uint32_t *count; /* [n_experts] */
    int32_t *start;  /* [n_experts + 1] */
    int32_t *fill;   /* [n_experts] */
    int32_t *rows;   /* [cap] token of each assignment, grouped by expert */
    int32_t *dst;    /* [cap] assignment index t*k+j, grouped by expert */
    int32_t *local;  /* [cap] 0..n-1, host-side row numbers */
    int32_t *h_rows; /* [cap] tokens of host assignments, grouped by expert */
    int32_t *h_dst;  /* [cap] assignment index of host assignments */
    int64_t cap;
    int32_t *promote, *evict;       /* [n_experts] plan */
    uint8_t *place;                 /* [n_experts] */
    uint8_t *mark;                  /* [n_experts] plan validation scratch */
    const struct tide_expert **run; /* [n_experts] experts of one expert_ffn_batch */
    int64_t *run_off;               /* [n_experts + 1] their row offsets */
    struct tide_prefetch pf;
    struct tide_buffer *parts; /* dev f32 [cap, hidden] */
    struct tide_buffer *xg;    /* dev bf16 [cap, hidden] gathered host rows */
    struct tide_buffer *yg;    /* dev f32 [cap, hidden] host results */
    struct tide_buffer *xh;    /* host bf16 [cap, hidden] */
    struct tide_buffer *yh;    /* host f32 [cap, hidden] */
    int64_t buf_rows;          /* rows of parts */
    int64_t off_rows;          /* rows of xg, yg, xh, yh */
};

static double moe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tide_moe_create(const struct tide_backend_ref *dev, const struct tide_backend_ref *host,
                    struct tide_moe **out)
{
    struct tide_moe *moe = calloc(1, sizeof *moe);
    if (!moe)
        return TIDE_E_NOMEM;
    moe->dev = *dev;
    if (host && host->ops) {
        moe->host = *host;
        moe->has_host = true;
    }
    *out = moe;
    return TIDE_OK;
}

static void moe_free_buf(const struct tide_backend_ref *b, struct tide_buffer **buf)
{
    if (*buf)
        b->ops->buffer_free(b->bk, *buf);
    *buf = NULL;
}

/* Frees the slots and the policy of the current configuration. */
static void moe_unconfigure(struct tide_moe *moe)
{
    for (int l = 0; moe->layers && l < moe->shape.n_layers; l++) {
        struct moe_layer *L = &moe->layers[l];
        for (int s = 0; L->slot && s < moe->budget; s++)
            if (L->slot[s])
                moe->dev.ops->expert_destroy(moe->dev.bk, L->slot[s]);
        free(L->slot);
        free(L->held);
        L->slot = NULL;
        L->held = NULL;
        L->n_held = 0;
        if (L->slot_of)
            for (int e = 0; e < moe->shape.n_experts; e++)
                L->slot_of[e] = -1;
        if (L->resident)
            memset(L->resident, 0, (size_t)moe->shape.n_experts);
    }
    if (moe->policy)
        moe->pops->destroy(moe->policy);
    moe->policy = NULL;
    moe->pops = NULL;
    moe->configured = false;
}

void tide_moe_destroy(struct tide_moe *moe)
{
    if (!moe)
        return;
    moe_unconfigure(moe);
    const int E = moe->shape.n_experts;
    for (int l = 0; moe->layers && l < moe->shape.n_layers; l++) {
        struct moe_layer *L = &moe->layers[l];
        for (int e = 0; e < E; e++) {
            if (L->dev_expert && L->dev_expert[e])
                moe->dev.ops->expert_destroy(moe->dev.bk, L->dev_expert[e]);
            if (L->host_expert && L->host_expert[e])
                moe->host.ops->expert_destroy(moe->host.bk, L->host_expert[e]);
        }
        free(L->dev_expert);
        free(L->host_expert);
        free(L->slot_of);
        free(L->resident);
    }
    moe_free_buf(&moe->dev, &moe->parts);
    moe_free_buf(&moe->dev, &moe->xg);
    moe_free_buf(&moe->dev, &moe->yg);
    if (moe->has_host) {
        moe_free_buf(&moe->host, &moe->xh);
        moe_free_buf(&moe->host, &moe->yh);
    }
    free(moe->layers);
    free(moe->views);
    free(moe->resident_rows);
    free(moe->count);
    free(moe->start);
    free(moe->fill);
    free(moe->rows);
    free(moe->dst);
    free(moe->local);
    free(moe->h_rows);
    free(moe->h_dst);
    free(moe->promote);
    free(moe->evict);
    free(moe->place);
    free(moe->mark);
    free(moe->run);
    free(moe->run_off);
    free(moe->pf.layer);
    free(moe->pf.expert);
    free(moe->pf.evict);
    free(moe);
}

int tide_moe_declare(struct tide_moe *moe, const struct tide_moe_shape *s)
{
    if (moe->declared) {
        tide_error("moe: shape declared twice");
        return TIDE_E_INVAL;
    }
    const size_t v1 = offsetof(struct tide_moe_shape, inter) + sizeof(int);
    if (!s || s->size < v1 || s->n_layers < 1 || s->n_experts < 1 || s->top_k < 1 ||
        s->top_k > s->n_experts || s->hidden < 1 || s->inter < 1) {
        tide_error("moe: invalid shape declared by the model");
        return TIDE_E_INVAL;
    }
    memset(&moe->shape, 0, sizeof moe->shape);
    memcpy(&moe->shape, s, s->size < sizeof *s ? s->size : sizeof *s);
    moe->shape.size = sizeof moe->shape;
    char why[200];
    if (tide_qfmt_fits(moe->shape.qfmt, moe->shape.qblock, s->inter, s->hidden, why, sizeof why) ||
        tide_qfmt_fits(moe->shape.qfmt, moe->shape.qblock, s->hidden, s->inter, why, sizeof why)) {
        tide_error("moe: routed experts [%d, %d]: %s", s->inter, s->hidden, why);
        return TIDE_E_INVAL;
    }
    const size_t L = (size_t)s->n_layers, E = (size_t)s->n_experts;
    moe->views = calloc(L * E * 3, sizeof *moe->views);
    moe->layers = calloc(L, sizeof *moe->layers);
    moe->resident_rows = calloc(L, sizeof *moe->resident_rows);
    moe->count = calloc(E, sizeof *moe->count);
    moe->start = calloc(E + 1, sizeof *moe->start);
    moe->fill = calloc(E, sizeof *moe->fill);
    moe->promote = calloc(E, sizeof *moe->promote);
    moe->evict = calloc(E, sizeof *moe->evict);
    moe->place = calloc(E, sizeof *moe->place);
    moe->mark = calloc(E, sizeof *moe->mark);
    moe->run = calloc(E, sizeof *moe->run);
    moe->run_off = calloc(E + 1, sizeof *moe->run_off);
    moe->pf.cap = (int)(L * E);
    moe->pf.layer = calloc(L * E, sizeof *moe->pf.layer);
    moe->pf.expert = calloc(L * E, sizeof *moe->pf.expert);
    moe->pf.evict = calloc(L * E, sizeof *moe->pf.evict);
    if (!moe->views || !moe->layers || !moe->resident_rows || !moe->count || !moe->start ||
        !moe->fill || !moe->promote || !moe->evict || !moe->place || !moe->mark || !moe->run ||
        !moe->run_off || !moe->pf.layer || !moe->pf.expert || !moe->pf.evict)
        return TIDE_E_NOMEM;
    for (size_t l = 0; l < L; l++) {
        struct moe_layer *ly = &moe->layers[l];
        ly->slot_of = malloc(E * sizeof *ly->slot_of);
        ly->resident = calloc(E, 1);
        if (!ly->slot_of || !ly->resident)
            return TIDE_E_NOMEM;
        for (size_t e = 0; e < E; e++)
            ly->slot_of[e] = -1;
        moe->resident_rows[l] = ly->resident;
    }
    moe->declared = true;
    return TIDE_OK;
}

const struct tide_moe_shape *tide_moe_get_shape(const struct tide_moe *moe)
{
    return moe->declared ? &moe->shape : NULL;
}

uint64_t tide_moe_expert_bytes(const struct tide_moe *moe)
{
    return tide_qexpert_bytes(moe->shape.qfmt, moe->shape.qblock, moe->shape.hidden,
                              moe->shape.inter);
}

int tide_moe_budget(const struct tide_moe *moe)
{
    return moe->budget;
}

int tide_moe_register_expert(struct tide_moe *moe, int layer, int e, const struct tide_view *gate,
                             const struct tide_view *up, const struct tide_view *down)
{
    if (!moe->declared || layer < 0 || layer >= moe->shape.n_layers || e < 0 ||
        e >= moe->shape.n_experts) {
        tide_error("moe: expert %d of MoE layer %d is outside the declared shape", e, layer);
        return TIDE_E_INVAL;
    }
    const int64_t H = moe->shape.hidden, I = moe->shape.inter;
    const struct tide_view *v[3] = {gate, up, down};
    const struct tide_view **dst = &moe->views[((size_t)layer * moe->shape.n_experts + e) * 3];
    if (dst[0]) {
        tide_error("moe: expert %d of MoE layer %d registered twice", e, layer);
        return TIDE_E_INVAL;
    }
    for (int j = 0; j < 3; j++) {
        int64_t r = j < 2 ? I : H, c = j < 2 ? H : I;
        char why[300];
        if (tide_qview_check(v[j], moe->shape.qfmt, moe->shape.qblock, r, c, why, sizeof why)) {
            tide_error("moe: expert %d of MoE layer %d: %s", e, layer, why);
            return TIDE_E_INVAL;
        }
    }
    for (int j = 0; j < 3; j++)
        dst[j] = v[j];
    return TIDE_OK;
}

static const struct tide_view *const *moe_views(const struct tide_moe *moe, int layer, int e)
{
    return &moe->views[((size_t)layer * moe->shape.n_experts + e) * 3];
}

/* The expert made available on backend b, created on first use. */
static int moe_expert_on(struct tide_moe *moe, const struct tide_backend_ref *b,
                         struct tide_expert ***table, int layer, int e,
                         const struct tide_expert **out)
{
    if (!*table && !(*table = calloc((size_t)moe->shape.n_experts, sizeof **table)))
        return TIDE_E_NOMEM;
    if (!(*table)[e]) {
        const struct tide_view *const *v = moe_views(moe, layer, e);
        if (!v[0]) {
            tide_error("moe: expert %d of MoE layer %d was never registered", e, layer);
            return TIDE_E_INVAL;
        }
        int rc = b->ops->expert_create(b->bk, v[0], v[1], v[2], &(*table)[e]);
        if (rc != TIDE_OK) {
            tide_error("moe: backend %s could not take expert %d of MoE layer %d (%s)", b->name, e,
                       layer, v[0]->name ? v[0]->name : "?");
            return rc;
        }
    }
    *out = (*table)[e];
    return TIDE_OK;
}

/* Promote expert e of layer l into a free slot, or into the slot of `evict`. */
static int moe_promote(struct tide_moe *moe, int l, int e, int evict)
{
    struct moe_layer *L = &moe->layers[l];
    int s = -1;
    if (evict >= 0) {
        s = L->slot_of[evict];
        L->slot_of[evict] = -1;
        L->resident[evict] = 0;
        L->n_held--;
        L->cur.evictions++;
    } else {
        for (int i = 0; i < moe->budget && s < 0; i++)
            if (L->held[i] < 0)
                s = i;
    }
    if (s < 0) {
        tide_error("moe: no free device slot in MoE layer %d (a bug: plans are validated)", l);
        return TIDE_E_INVAL;
    }
    const struct tide_view *const *v = moe_views(moe, l, e);
    int rc = moe->dev.ops->slot_load(moe->dev.bk, L->slot[s], v[0], v[1], v[2]);
    if (rc != TIDE_OK) {
        tide_error("moe: promoting expert %d of MoE layer %d into a device slot failed", e, l);
        return rc;
    }
    L->held[s] = e;
    L->slot_of[e] = s;
    L->resident[e] = 1;
    L->n_held++;
    return TIDE_OK;
}

static bool moe_has_offload_ops(const struct tide_backend_ref *b)
{
    const struct tide_backend_ops *o = b->ops;
    return TIDE_OPS_HAS(o, slot_create) && TIDE_OPS_HAS(o, slot_load) &&
           TIDE_OPS_HAS(o, gather_rows) && TIDE_OPS_HAS(o, scatter_rows) &&
           TIDE_OPS_HAS(o, copy_sync);
}

/* Refuse a budget whose slots would not fit the device, with the numbers. */
static int moe_check_fits(struct tide_moe *moe, int budget)
{
    const struct tide_backend_ops *o = moe->dev.ops;
    uint64_t free_b = 0, total_b = 0;
    if (!TIDE_OPS_HAS(o, mem_info) || o->mem_info(moe->dev.bk, &free_b, &total_b) != TIDE_OK)
        return TIDE_OK;
    const uint64_t need =
        (uint64_t)budget * (uint64_t)moe->shape.n_layers * tide_moe_expert_bytes(moe);
    if (need > free_b) {
        tide_error("budget of %d experts per MoE layer needs %.2f GiB of device memory for %d "
                   "layers x %llu bytes, but %s has %.2f GiB free (of %.2f GiB); lower "
                   "[policy] budget or expert_memory",
                   budget, (double)need / 1073741824.0, moe->shape.n_layers,
                   (unsigned long long)tide_moe_expert_bytes(moe), moe->dev.name,
                   (double)free_b / 1073741824.0, (double)total_b / 1073741824.0);
        return TIDE_E_BUDGET;
    }
    return TIDE_OK;
}

int tide_moe_configure(struct tide_moe *moe, const struct tide_moe_placement *p)
{
    if (!moe->declared) {
        tide_error("moe: configure before the model declared its experts");
        return TIDE_E_INVAL;
    }
    moe_unconfigure(moe);
    const int E = moe->shape.n_experts;
    if (p->budget < 0) {
        tide_error("[policy] budget = %d: must be >= 0", p->budget);
        return TIDE_E_CONFIG;
    }
    moe->budget = p->budget < E ? p->budget : E;
    moe->offload = p->budget < E;
    tide_moe_reset_totals(moe);
    if (!moe->offload) {
        /* Every expert on the device, made available now rather than on
         * first use, so the first steps do not pay for the uploads. (No fit
         * check: a host-memory device may alias the mapped checkpoint; a
         * failed upload reports itself.) */
        int rc = TIDE_OK;
        for (int l = 0; rc == TIDE_OK && l < moe->shape.n_layers; l++)
            for (int e = 0; rc == TIDE_OK && e < E; e++) {
                const struct tide_expert *ex;
                rc = moe_expert_on(moe, &moe->dev, &moe->layers[l].dev_expert, l, e, &ex);
            }
        if (rc != TIDE_OK)
            return rc;
        moe->configured = true;
        return TIDE_OK;
    }
    if (!moe->has_host) {
        tide_error("moe: offloading needs a host backend");
        return TIDE_E_CONFIG;
    }
    if (!moe_has_offload_ops(&moe->dev)) {
        tide_error("backend %s has no expert-slot ops (slot_create, slot_load, gather_rows, "
                   "scatter_rows, copy_sync): it cannot hold a budget below %d experts",
                   moe->dev.name, E);
        return TIDE_E_UNSUPPORTED;
    }
    if (moe->shape.qfmt != TIDE_QFMT_NONE && !TIDE_OPS_HAS(moe->dev.ops, slot_create_q)) {
        tide_error("backend %s has no slots for %s experts (slot_create_q): it cannot offload "
                   "this checkpoint; run without offload or on a backend that has them",
                   moe->dev.name, tide_qfmt_name(moe->shape.qfmt));
        return TIDE_E_UNSUPPORTED;
    }
    int rc = moe_check_fits(moe, moe->budget);
    if (rc != TIDE_OK)
        return rc;
    if (p->costs && p->costs->expert_bytes != tide_moe_expert_bytes(moe)) {
        const char *fmt = tide_qfmt_name(moe->shape.qfmt);
        tide_error("[policy] profile: its costs are for experts of %llu bytes, but the model's "
                   "experts have %llu bytes (%s, hidden %d x inter %d); measure a profile for "
                   "this model with `tide profile --hidden %d --inter %d --format %s`",
                   (unsigned long long)p->costs->expert_bytes,
                   (unsigned long long)tide_moe_expert_bytes(moe), fmt, moe->shape.hidden,
                   moe->shape.inter, moe->shape.hidden, moe->shape.inter, fmt);
        return TIDE_E_CONFIG;
    }
    const struct tide_policy_shape shape = {
        .size = sizeof shape,
        .n_layers = moe->shape.n_layers,
        .n_moe_layers = moe->shape.n_layers,
        .n_experts = E,
        .top_k = moe->shape.top_k,
        .expert_bytes = tide_moe_expert_bytes(moe),
        .budget = moe->budget,
        .block_length = p->block_length,
        .max_steps = p->max_steps,
        .costs = p->costs,
    };
    moe->pops = p->ops;
    snprintf(moe->policy_name, sizeof moe->policy_name, "%s", p->name);
    if ((rc = p->ops->create(&shape, p->opts, &moe->policy)) != TIDE_OK) {
        tide_error("policy %s could not start (%s)", p->name, tide_status_str(rc));
        moe->policy = NULL;
        return rc;
    }
    int32_t *init = malloc(sizeof *init * (size_t)(moe->budget ? moe->budget : 1));
    if (!init)
        return TIDE_E_NOMEM;
    for (int l = 0; l < moe->shape.n_layers && rc == TIDE_OK; l++) {
        struct moe_layer *L = &moe->layers[l];
        L->slot = calloc((size_t)(moe->budget ? moe->budget : 1), sizeof *L->slot);
        L->held = malloc(sizeof *L->held * (size_t)(moe->budget ? moe->budget : 1));
        if (!L->slot || !L->held) {
            rc = TIDE_E_NOMEM;
            break;
        }
        for (int s = 0; s < moe->budget && rc == TIDE_OK; s++) {
            L->held[s] = -1;
            if (moe->shape.qfmt != TIDE_QFMT_NONE)
                rc = moe->dev.ops->slot_create_q(moe->dev.bk, moe->shape.hidden, moe->shape.inter,
                                                 moe->shape.qfmt, moe->shape.qblock, &L->slot[s]);
            else
                rc = moe->dev.ops->slot_create(moe->dev.bk, moe->shape.hidden, moe->shape.inter,
                                               &L->slot[s]);
            if (rc != TIDE_OK)
                tide_error("moe: backend %s cannot allocate device slot %d of MoE layer %d",
                           moe->dev.name, s, l);
        }
        int n = rc == TIDE_OK ? p->ops->initial(moe->policy, l, init) : 0;
        if (n < 0 || n > moe->budget) {
            tide_error("policy %s: initial placement of MoE layer %d has %d experts (budget %d)",
                       p->name, l, n, moe->budget);
            rc = TIDE_E_INVAL;
        }
        for (int i = 0; i < n && rc == TIDE_OK; i++) {
            int e = init[i];
            if (e < 0 || e >= E || L->resident[e]) {
                tide_error("policy %s: initial placement of MoE layer %d names expert %d "
                           "(out of range or twice)",
                           p->name, l, e);
                rc = TIDE_E_INVAL;
            } else {
                rc = moe_promote(moe, l, e, -1);
            }
        }
    }
    free(init);
    if (rc == TIDE_OK)
        rc = moe->dev.ops->copy_sync(moe->dev.bk);
    /* The initial load is set-up, not traffic of any step. */
    for (int l = 0; l < moe->shape.n_layers; l++)
        memset(&moe->layers[l].cur, 0, sizeof moe->layers[l].cur);
    if (rc != TIDE_OK) {
        moe_unconfigure(moe);
        return rc;
    }
    moe->configured = true;
    tide_info("offload: %d of %d experts per MoE layer in device slots (%.2f MiB), the rest on "
              "%s; policy %s",
              moe->budget, E,
              (double)moe->budget * moe->shape.n_layers * (double)tide_moe_expert_bytes(moe) /
                  1048576.0,
              moe->host.name, p->name);
    return TIDE_OK;
}

/* ---- events and telemetry ---------------------------------------------- */

static void moe_add(struct tide_moe_counters *a, const struct tide_moe_counters *b)
{
    tide_traffic_add(&a->traffic, &b->traffic);
    a->host_seconds += b->host_seconds;
    a->device_seconds += b->device_seconds;
}

/* Close the current phase: write its lines, add it to the totals. */
static void moe_flush(struct tide_moe *moe)
{
    for (int l = 0; l < moe->shape.n_layers; l++) {
        struct tide_moe_counters *c = &moe->layers[l].cur;
        if (!c->tokens && !c->promotions) {
            memset(c, 0, sizeof *c);
            continue;
        }
        if (moe->metrics) {
            char tail[96];
            snprintf(tail, sizeof tail, "\"host_s\":%.6f,\"device_s\":%.6f", c->host_seconds,
                     c->device_seconds);
            tide_metrics_layer_line(moe->metrics, (enum tide_trace_phase)moe->phase, moe->block,
                                    moe->step, l, &c->traffic, tail);
        }
        moe_add(&moe->total, c);
        moe_add(&moe->layers[l].sum, c);
        memset(c, 0, sizeof *c);
    }
}

void tide_moe_set_trace(struct tide_moe *moe, const struct tide_trace_sink *s)
{
    moe->trace = s;
    moe->trace_rc = TIDE_OK;
}

const struct tide_trace_sink *tide_moe_get_trace(const struct tide_moe *moe)
{
    return moe->trace;
}

/* Remember the first trace write error; the generation stops on it. */
static void moe_trace_rc(struct tide_moe *moe, int rc)
{
    if (rc != TIDE_OK && moe->trace_rc == TIDE_OK)
        moe->trace_rc = rc;
}

void tide_moe_set_metrics(struct tide_moe *moe, FILE *f)
{
    moe->metrics = f;
}

void tide_moe_totals(const struct tide_moe *moe, struct tide_moe_counters *out)
{
    *out = moe->total;
}

void tide_moe_layer_totals(const struct tide_moe *moe, int layer, struct tide_moe_counters *out)
{
    if (layer >= 0 && layer < moe->shape.n_layers && moe->layers)
        *out = moe->layers[layer].sum;
    else
        memset(out, 0, sizeof *out);
}

void tide_moe_reset_totals(struct tide_moe *moe)
{
    memset(&moe->total, 0, sizeof moe->total);
    for (int l = 0; moe->layers && l < moe->shape.n_layers; l++)
        memset(&moe->layers[l].sum, 0, sizeof moe->layers[l].sum);
}

void tide_moe_block_begin(struct tide_moe *moe, int block, bool first_generated)
{
    moe_flush(moe);
    moe->block = block;
    moe->step = 0;
    moe->phase = PHASE_KV;
    if (moe->trace)
        moe_trace_rc(moe, moe->trace->block(moe->trace->user, block, first_generated));
    if (moe->policy && moe->pops->block_begin)
        moe->pops->block_begin(moe->policy, block, first_generated);
}

/* Validate and issue the promotions a policy asked for at step start. */
static int moe_prefetch(struct tide_moe *moe)
{
    struct tide_prefetch *pf = &moe->pf;
    for (int i = 0; i < pf->n; i++) {
        int l = pf->layer[i], e = pf->expert[i], ev = pf->evict[i];
        struct moe_layer *L = l >= 0 && l < moe->shape.n_layers ? &moe->layers[l] : NULL;
        const char *bad = tide_prefetch_check(moe->shape.n_experts, moe->budget, L ? L->n_held : 0,
                                              L ? L->resident : NULL, e, ev);
        if (bad) {
            tide_error("policy %s: invalid prefetch at block %d step %d (layer %d, expert %d, "
                       "evict %d): %s",
                       moe->policy_name, moe->block, moe->step, l, e, ev, bad);
            return TIDE_E_INVAL;
        }
        int rc = moe_promote(moe, l, e, ev);
        if (rc != TIDE_OK)
            return rc;
        L->cur.promotions++;
        L->cur.weight_bytes += tide_moe_expert_bytes(moe);
    }
    return TIDE_OK;
}

int tide_moe_step_begin(struct tide_moe *moe, int block, int step)
{
    moe_flush(moe);
    moe->block = block;
    moe->step = step;
    moe->phase = PHASE_STEP;
    if (moe->trace) {
        moe_trace_rc(moe, moe->trace->step(moe->trace->user, step));
        if (moe->trace_rc != TIDE_OK)
            return moe->trace_rc;
    }
    if (!moe->policy || !TIDE_OPS_HAS(moe->pops, step_begin))
        return TIDE_OK;
    moe->pf.n = 0;
    int rc = moe->pops->step_begin(moe->policy, block, step, moe->resident_rows, &moe->pf);
    if (rc != TIDE_OK) {
        tide_error("policy %s failed at the start of block %d step %d", moe->policy_name, block,
                   step);
        return rc;
    }
    if (moe->pf.n < 0 || moe->pf.n > moe->pf.cap) {
        tide_error("policy %s: prefetch count %d out of range", moe->policy_name, moe->pf.n);
        return TIDE_E_INVAL;
    }
    return moe_prefetch(moe);
}

void tide_moe_step_end(struct tide_moe *moe)
{
    moe_flush(moe);
    moe->phase = PHASE_KV;
}

int tide_moe_context(struct tide_moe *moe, uint32_t prompt_id, uint32_t at, uint32_t inserted,
                     uint32_t prompt_len)
{
    moe_flush(moe);
    moe->phase = PHASE_PREFILL;
    if (moe->trace && moe->trace->context) {
        moe_trace_rc(moe,
                     moe->trace->context(moe->trace->user, prompt_id, at, inserted, prompt_len));
        if (moe->trace_rc != TIDE_OK)
            return moe->trace_rc;
    }
    if (moe->policy && TIDE_OPS_HAS(moe->pops, prompt_grow))
        moe->pops->prompt_grow(moe->policy, prompt_len, inserted);
    return TIDE_OK;
}

void tide_moe_finish(struct tide_moe *moe)
{
    moe_flush(moe);
    moe->phase = PHASE_PREFILL;
    moe->block = 0;
    moe->step = 0;
}

void tide_moe_prompt_begin(struct tide_moe *moe, uint32_t prompt_len, const float *vec, int dim)
{
    if (moe->policy && TIDE_OPS_HAS(moe->pops, prompt_begin))
        moe->pops->prompt_begin(moe->policy, prompt_len, vec, vec ? dim : 0);
}

bool tide_moe_wants_prompt(const struct tide_moe *moe)
{
    return moe->policy && TIDE_OPS_HAS(moe->pops, prompt_begin);
}

/* ---- forward ------------------------------------------------------------ */

static int moe_reserve(struct tide_moe *moe, int64_t assignments)
{
    if (assignments > moe->cap) {
        int32_t **arrs[] = {&moe->rows, &moe->dst, &moe->local, &moe->h_rows, &moe->h_dst};
        for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
            int32_t *p = realloc(*arrs[i], (size_t)assignments * sizeof *p);
            if (!p)
                return TIDE_E_NOMEM;
            *arrs[i] = p;
        }
        for (int64_t i = 0; i < assignments; i++)
            moe->local[i] = (int32_t)i;
        moe->cap = assignments;
    }
    const size_t H = (size_t)moe->shape.hidden, A = (size_t)assignments;
    int rc = TIDE_OK;
    if (assignments > moe->buf_rows) {
        moe_free_buf(&moe->dev, &moe->parts);
        moe->buf_rows = 0;
        if ((rc = moe->dev.ops->buffer_alloc(moe->dev.bk, A * H * 4, &moe->parts)) != TIDE_OK)
            return rc;
        moe->buf_rows = assignments;
    }
    if (!moe->offload || assignments <= moe->off_rows)
        return TIDE_OK;
    /* Staging for host experts: only while offloading. */
    moe_free_buf(&moe->dev, &moe->xg);
    moe_free_buf(&moe->dev, &moe->yg);
    moe_free_buf(&moe->host, &moe->xh);
    moe_free_buf(&moe->host, &moe->yh);
    moe->off_rows = 0;
    if ((rc = moe->dev.ops->buffer_alloc(moe->dev.bk, A * H * 2, &moe->xg)) == TIDE_OK &&
        (rc = moe->dev.ops->buffer_alloc(moe->dev.bk, A * H * 4, &moe->yg)) == TIDE_OK &&
        (rc = moe->host.ops->buffer_alloc(moe->host.bk, A * H * 2, &moe->xh)) == TIDE_OK &&
        (rc = moe->host.ops->buffer_alloc(moe->host.bk, A * H * 4, &moe->yh)) == TIDE_OK)
        moe->off_rows = assignments;
    return rc;
}

/* Check a plan against the rules; logs the first violation, naming the policy. */
static int moe_check_plan(struct tide_moe *moe, int l, const struct tide_plan *p)
{
    const struct moe_layer *L = &moe->layers[l];
    const struct tide_plan_ctx c = {
        .n_experts = moe->shape.n_experts,
        .budget = moe->budget,
        .n_held = L->n_held,
        .resident = L->resident,
        .counts = moe->count,
        .mark = moe->mark,
    };
    char why[200];
    if (!tide_plan_check(&c, p, why, sizeof why))
        return TIDE_OK;
    tide_error("policy %s returned an invalid plan at MoE layer %d, block %d, step %d: it %s",
               moe->policy_name, l, moe->block, moe->step, why);
    return TIDE_E_INVAL;
}

/* Where each active expert runs when no policy is asked: resident -> device. */
static void moe_default_place(struct tide_moe *moe, int l)
{
    for (int e = 0; e < moe->shape.n_experts; e++)
        moe->place[e] = moe->layers[l].resident[e] ? TIDE_PLACE_DEVICE : TIDE_PLACE_HOST;
}

/* Run the n experts collected in moe->run (rows segments at moe->run_off) on
 * backend b: one expert_ffn_batch call when b has it (it may run them
 * concurrently), else one expert_ffn per expert. Same results either way. */
static int moe_run_experts(struct tide_moe *moe, const struct tide_backend_ref *b, int n,
                           const struct tide_tensor *x, const int32_t *rows, const int32_t *dst,
                           const struct tide_tensor *out)
{
    if (TIDE_OPS_HAS(b->ops, expert_ffn_batch))
        return b->ops->expert_ffn_batch(b->bk, n, moe->run, x, rows, dst, moe->run_off, out);
    int rc = TIDE_OK;
    for (int j = 0; j < n && rc == TIDE_OK; j++)
        rc = b->ops->expert_ffn(b->bk, moe->run[j], x, rows + moe->run_off[j],
                                dst + moe->run_off[j], moe->run_off[j + 1] - moe->run_off[j], out);
    return rc;
}

/* Host experts run in three parts so that, on an asynchronous device, the
 * device experts (enqueued between them) overlap the host compute:
 * send: gather the host rows on the device and copy them to the host (waits
 * for x); compute: the host experts; receive: copy the results back and
 * scatter them into parts. */
static int moe_host_send(struct tide_moe *moe, const struct tide_tensor *x, int64_t nh)
{
    const int64_t H = moe->shape.hidden;
    const struct tide_backend_ops *d = moe->dev.ops;
    struct tide_tensor xg = tide_tensor_2d(moe->xg, TIDE_DTYPE_BF16, nh, H);
    void *xh_ptr = moe->host.ops->buffer_host_ptr(moe->host.bk, moe->xh);
    if (!xh_ptr || !moe->host.ops->buffer_host_ptr(moe->host.bk, moe->yh)) {
        tide_error("moe: host backend %s gives no host pointers", moe->host.name);
        return TIDE_E_UNSUPPORTED;
    }
    int rc = d->gather_rows(moe->dev.bk, x, moe->h_rows, nh, &xg);
    return rc ? rc : d->read(moe->dev.bk, &xg, xh_ptr);
}

static int moe_host_compute(struct tide_moe *moe, int l, int64_t nh)
{
    struct moe_layer *L = &moe->layers[l];
    const struct tide_backend_ops *h = moe->host.ops;
    struct tide_tensor xh = tide_tensor_2d(moe->xh, TIDE_DTYPE_BF16, nh, moe->shape.hidden);
    struct tide_tensor yh = tide_tensor_2d(moe->yh, TIDE_DTYPE_F32, nh, moe->shape.hidden);
    const double t0 = moe_now();
    int n = 0, rc = TIDE_OK;
    moe->run_off[0] = 0;
    for (int e = 0; e < moe->shape.n_experts && rc == TIDE_OK; e++) {
        if (!moe->count[e] || moe->place[e] != TIDE_PLACE_HOST)
            continue;
        rc = moe_expert_on(moe, &moe->host, &L->host_expert, l, e, &moe->run[n]);
        moe->run_off[n + 1] = moe->run_off[n] + moe->count[e];
        n++;
    }
    if (rc == TIDE_OK)
        rc = moe_run_experts(moe, &moe->host, n, &xh, moe->local, moe->local, &yh);
    if (rc == TIDE_OK)
        rc = h->sync(moe->host.bk);
    L->cur.host_seconds += moe_now() - t0;
    return rc;
}

static int moe_host_receive(struct tide_moe *moe, int l, int64_t nh,
                            const struct tide_tensor *parts)
{
    const int64_t H = moe->shape.hidden;
    const struct tide_backend_ops *d = moe->dev.ops;
    struct tide_tensor yg = tide_tensor_2d(moe->yg, TIDE_DTYPE_F32, nh, H);
    void *yh_ptr = moe->host.ops->buffer_host_ptr(moe->host.bk, moe->yh);
    int rc = d->write(moe->dev.bk, &yg, yh_ptr);
    if (rc == TIDE_OK)
        rc = d->scatter_rows(moe->dev.bk, &yg, moe->h_dst, nh, parts);
    moe->layers[l].cur.act_bytes += (uint64_t)nh * (uint64_t)H * (2u + 4u);
    return rc;
}

/* Cumulative device expert seconds: the backend's own (events) when it
 * measures them, else wall time around the calls. */
static bool moe_dev_timer(const struct tide_moe *moe, double *seconds)
{
    double copy;
    return TIDE_OPS_HAS(moe->dev.ops, timings) &&
           moe->dev.ops->timings(moe->dev.bk, &copy, seconds) == TIDE_OK;
}

int tide_moe_forward(struct tide_moe *moe, int layer, const struct tide_tensor *x,
                     const int32_t *ids, const float *w, int64_t n, const struct tide_tensor *y)
{
    if (!moe->declared || layer < 0 || layer >= moe->shape.n_layers || n < 1) {
        tide_error("moe: forward on MoE layer %d with %lld tokens is invalid", layer, (long long)n);
        return TIDE_E_INVAL;
    }
    if (!moe->configured) {
        const struct tide_moe_placement all = {.budget = moe->shape.n_experts};
        int rc = tide_moe_configure(moe, &all);
        if (rc != TIDE_OK)
            return rc;
    }
    struct moe_layer *L = &moe->layers[layer];
    const int E = moe->shape.n_experts, k = moe->shape.top_k;
    const int64_t A = n * k;
    int rc = moe_reserve(moe, A);
    if (rc != TIDE_OK)
        return rc;
    memset(moe->count, 0, sizeof *moe->count * (size_t)E);
    for (int64_t a = 0; a < A; a++) {
        if (ids[a] < 0 || ids[a] >= E) {
            tide_error("moe: layer %d routed token %lld to expert %d (only %d experts)", layer,
                       (long long)(a / k), ids[a], E);
            return TIDE_E_RANGE;
        }
        moe->count[ids[a]]++;
    }
    if (moe->trace) {
        moe_trace_rc(moe, moe->trace->route(moe->trace->user, (enum tide_trace_phase)moe->phase,
                                            (uint32_t)layer, (uint32_t)n, ids));
        if (moe->trace_rc != TIDE_OK)
            return moe->trace_rc;
    }
    /* Placement for this call. */
    if (!moe->offload) {
        for (int e = 0; e < E; e++)
            moe->place[e] = TIDE_PLACE_DEVICE;
    } else if (moe->phase == PHASE_STEP) {
        const struct tide_policy_view v = {
            .layer = layer,
            .block = moe->block,
            .step = moe->step,
            .counts = moe->count,
            .resident = L->resident,
        };
        struct tide_plan plan = {
            .n_promote = 0,
            .promote = moe->promote,
            .evict = moe->evict,
            .place = moe->place,
        };
        moe_default_place(moe, layer);
        if ((rc = moe->pops->plan(moe->policy, &v, &plan)) != TIDE_OK) {
            tide_error("policy %s failed at MoE layer %d, block %d, step %d", moe->policy_name,
                       layer, moe->block, moe->step);
            return rc;
        }
        if ((rc = moe_check_plan(moe, layer, &plan)) != TIDE_OK)
            return rc;
        for (int i = 0; i < plan.n_promote; i++) {
            if ((rc = moe_promote(moe, layer, plan.promote[i], plan.evict[i])) != TIDE_OK)
                return rc;
            L->cur.promotions++;
            L->cur.weight_bytes += tide_moe_expert_bytes(moe);
        }
    } else {
        moe_default_place(moe, layer); /* prefill and K/V passes: placement frozen */
    }
    /* Group assignments by expert, stable in (token, slot); device experts'
     * rows go to rows/dst, host experts' to h_rows/h_dst. */
    int64_t nd = 0, nh = 0;
    for (int e = 0; e < E; e++) {
        moe->start[e] = (int32_t)nd;
        if (moe->count[e]) {
            L->cur.active++;
            if (moe->place[e] == TIDE_PLACE_DEVICE)
                nd += moe->count[e];
            else
                nh += moe->count[e];
        }
    }
    int64_t hd = 0;
    for (int e = 0; e < E; e++) {
        if (moe->count[e] && moe->place[e] != TIDE_PLACE_DEVICE) {
            moe->fill[e] = (int32_t)hd;
            hd += moe->count[e];
        } else {
            moe->fill[e] = moe->start[e];
        }
    }
    for (int64_t a = 0; a < A; a++) {
        int e = ids[a];
        int32_t at = moe->fill[e]++;
        if (moe->place[e] == TIDE_PLACE_DEVICE) {
            moe->rows[at] = (int32_t)(a / k);
            moe->dst[at] = (int32_t)a;
        } else {
            moe->h_rows[at] = (int32_t)(a / k);
            moe->h_dst[at] = (int32_t)a;
        }
    }
    L->cur.tokens += (uint64_t)n;
    L->cur.hit_rows += (uint64_t)nd;
    L->cur.miss_rows += (uint64_t)nh;
    const struct tide_tensor parts =
        tide_tensor_2d(moe->parts, TIDE_DTYPE_F32, A, moe->shape.hidden);
    if (nh && (rc = moe_host_send(moe, x, nh)) != TIDE_OK)
        return rc;
    double dev0 = 0, dev1 = 0;
    const bool timed = moe_dev_timer(moe, &dev0);
    const double t0 = moe_now();
    int n_dev = 0;
    moe->run_off[0] = 0;
    for (int e = 0; e < E; e++) {
        if (!moe->count[e] || moe->place[e] != TIDE_PLACE_DEVICE)
            continue;
        if (moe->offload)
            moe->run[n_dev] = L->slot[L->slot_of[e]];
        else if ((rc = moe_expert_on(moe, &moe->dev, &L->dev_expert, layer, e, &moe->run[n_dev])) !=
                 TIDE_OK)
            return rc;
        /* Device experts' segments are contiguous, in expert order, from 0. */
        moe->run_off[n_dev + 1] = moe->start[e] + moe->count[e];
        n_dev++;
    }
    if (n_dev && (rc = moe_run_experts(moe, &moe->dev, n_dev, x, moe->rows, moe->dst, &parts)))
        return rc;
    const double t1 = moe_now();
    if (nh && ((rc = moe_host_compute(moe, layer, nh)) != TIDE_OK ||
               (rc = moe_host_receive(moe, layer, nh, &parts)) != TIDE_OK))
        return rc;
    if (timed && moe_dev_timer(moe, &dev1))
        L->cur.device_seconds += dev1 - dev0;
    else
        L->cur.device_seconds += t1 - t0;
    return moe->dev.ops->moe_combine(moe->dev.bk, &parts, w, k, y);
}
