/* Routed experts and expert slots.
 *
 * An expert made by expert_create uses the checkpoint's memory (`inplace`) or
 * a packed copy (`packed`), as the `expert_layout` option says. A slot
 * (slot_create) is the same structure with memory of its own, refilled by
 * slot_load when the dispatcher promotes an expert into it: a copy of the
 * rows (inplace) or a reorder into the packed layout (packed). Everything is
 * synchronous on this backend, so copy_sync has nothing to wait for.
 *
 * A block-quantized expert (tide/quant.h: q8_0, q4_0, fp8) always keeps its
 * compressed layout, whatever `expert_layout` says: expert_create aliases the
 * checkpoint's values and scales (no copy), a slot of slot_create_q owns
 * room for one expert's values and scales and slot_load copies them in.
 * the quant_*.c kernels read them as they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dnnl_bk.h"

double dnnl_bk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dnnl_bk_expert_destroy(struct tide_backend *bk, struct tide_expert *e)
{
    if (!e)
        return;
    if (bk)
        bk->n_experts--;
    dnnl_bk_mat_free(&e->gate_up);
    dnnl_bk_mat_free(&e->gate);
    dnnl_bk_mat_free(&e->up);
    dnnl_bk_mat_free(&e->down);
    free(e->qgate.own);
    free(e->qup.own);
    free(e->qdown.own);
    free(e);
}

/* The shape of a quantized [n,k] matrix of (fmt, block), without memory. */
static void dnnl_bk_qmat_shape(struct dnnl_bk_qmat *m, int fmt, const int block[2], int64_t n,
                               int64_t k)
{
    int64_t vs[2], ss[2];
    tide_qmat_value_shape(fmt, n, k, vs);
    tide_qmat_scale_shape(block, n, k, ss);
    m->fmt = fmt;
    m->br = block[0];
    m->bc = block[1];
    m->n = n;
    m->k = k;
    m->sld = ss[1];
    m->q_bytes = (size_t)(vs[0] * vs[1]) * tide_dtype_size(tide_qfmt_value_dtype(fmt));
    m->s_bytes = (size_t)(ss[0] * ss[1]) * tide_dtype_size(tide_qfmt_scale_dtype(fmt));
}

/* Can the quant_*.c kernels run (fmt, block) on [n,k]? TIDE_OK or TIDE_E_INVAL
 * (logged, naming `what`). */
static int dnnl_bk_qfits(const char *op, const char *what, int fmt, const int block[2], int64_t n,
                         int64_t k)
{
    char why[192];
    if (fmt <= TIDE_QFMT_NONE || fmt >= TIDE_QFMT_COUNT || !block)
        return dnnl_bk_inval(op, "%s: weight format %d is not a quantized format", what, fmt);
    if (tide_qfmt_fits(fmt, block, n, k, why, sizeof why))
        return dnnl_bk_inval(op, "%s: %s", what, why);
    /* The kernel takes one scale per 32-value chunk. */
    if (block[1] % TIDE_QK)
        return dnnl_bk_inval(op, "%s: %s blocks of %d columns; this backend needs a multiple of %d",
                             what, tide_qfmt_name(fmt), block[1], TIDE_QK);
    return TIDE_OK;
}

/* gate, up [inter,hidden] and down [hidden,inter], each a view of (fmt,
 * block) that the quant_*.c kernels can run. */
static int dnnl_bk_check_qviews(const char *op, int fmt, const int block[2],
                                const struct tide_view *gate, const struct tide_view *up,
                                const struct tide_view *down, int64_t hidden, int64_t inter)
{
    const struct tide_view *v[3] = {gate, up, down};
    const char *what[3] = {"gate", "up", "down"};
    for (int i = 0; i < 3; i++) {
        const int64_t n = i < 2 ? inter : hidden, k = i < 2 ? hidden : inter;
        char why[320];
        if (tide_qview_check(v[i], fmt, block, n, k, why, sizeof why))
            return dnnl_bk_inval(op, "%s: %s", what[i], why);
        const char *name = v[i]->name ? v[i]->name : what[i];
        int rc = dnnl_bk_qfits(op, name, fmt, block, n, k);
        if (rc)
            return rc;
    }
    return TIDE_OK;
}

/* A quantized expert of (fmt, block) without weights; `own`: with memory for
 * them (a slot), else it will alias a checkpoint's. */
static int dnnl_bk_expert_new_q(struct tide_backend *bk, int64_t hidden, int64_t inter, int fmt,
                                const int block[2], bool own, struct tide_expert **out)
{
    struct tide_expert *e = calloc(1, sizeof *e);
    if (!e)
        return TIDE_E_NOMEM;
    e->hidden = hidden;
    e->inter = inter;
    e->layout = DNNL_BK_RAW;
    e->qfmt = fmt;
    e->qblock[0] = block[0];
    e->qblock[1] = block[1];
    bk->n_experts++;
    struct dnnl_bk_qmat *m[3] = {&e->qgate, &e->qup, &e->qdown};
    for (int i = 0; i < 3; i++) {
        dnnl_bk_qmat_shape(m[i], fmt, block, i < 2 ? inter : hidden, i < 2 ? hidden : inter);
        if (!own)
            continue;
        const size_t qb = (m[i]->q_bytes + 63) & ~(size_t)63;
        m[i]->own = aligned_alloc(64, qb + ((m[i]->s_bytes + 63) & ~(size_t)63));
        if (!m[i]->own) {
            dnnl_bk_expert_destroy(bk, e);
            return TIDE_E_NOMEM;
        }
        m[i]->q = m[i]->own;
        m[i]->s = (char *)m[i]->own + qb;
    }
    *out = e;
    return TIDE_OK;
}

/* Point (alias) or copy (slot) a quantized expert's matrices at checked views. */
static void dnnl_bk_expert_load_q(struct tide_expert *e, const struct tide_view *gate,
                                  const struct tide_view *up, const struct tide_view *down)
{
    struct dnnl_bk_qmat *m[3] = {&e->qgate, &e->qup, &e->qdown};
    const struct tide_view *v[3] = {gate, up, down};
    for (int i = 0; i < 3; i++) {
        if (m[i]->own) {
            memcpy(m[i]->own, v[i]->data, m[i]->q_bytes);
            memcpy((void *)m[i]->s, v[i]->scale->data, m[i]->s_bytes);
        } else {
            m[i]->q = v[i]->data;
            m[i]->s = v[i]->scale->data;
        }
    }
}

/* bf16 experts: refuse a quantized view among them, naming it. */
static int dnnl_bk_all_bf16(const char *op, const struct tide_view *gate,
                            const struct tide_view *up, const struct tide_view *down,
                            const char *holder)
{
    const struct tide_view *v[3] = {gate, up, down};
    const char *what[3] = {"gate", "up", "down"};
    for (int i = 0; i < 3; i++)
        if (v[i] && v[i]->qfmt != TIDE_QFMT_NONE)
            return dnnl_bk_inval(op, "%s: tensor '%s' is %s, but %s", what[i],
                                 v[i]->name ? v[i]->name : what[i], tide_qfmt_name(v[i]->qfmt),
                                 holder);
    return TIDE_OK;
}

/* An expert of the backend's layout without weights; `own` gives it memory. */
static int dnnl_bk_expert_new(struct tide_backend *bk, int64_t hidden, int64_t inter, bool own,
                              const char *name, struct tide_expert **out)
{
    struct tide_expert *e = calloc(1, sizeof *e);
    if (!e)
        return TIDE_E_NOMEM;
    e->hidden = hidden;
    e->inter = inter;
    e->layout = bk->kern.expert_layout;
    bk->n_experts++;
    int rc;
    if (e->layout == DNNL_BK_PACKED) {
        /* One [2I,H] matrix so gate and up are a single matmul. */
        rc = dnnl_bk_mat_init(bk, &e->gate_up, NULL, 2 * inter, hidden, DNNL_BK_PACKED, true, name);
        if (!rc)
            rc = dnnl_bk_mat_init(bk, &e->down, NULL, hidden, inter, DNNL_BK_PACKED, true, name);
    } else {
        rc = dnnl_bk_mat_init(bk, &e->gate, NULL, inter, hidden, DNNL_BK_RAW, own, name);
        if (!rc)
            rc = dnnl_bk_mat_init(bk, &e->up, NULL, inter, hidden, DNNL_BK_RAW, own, name);
        if (!rc)
            rc = dnnl_bk_mat_init(bk, &e->down, NULL, hidden, inter, DNNL_BK_RAW, own, name);
    }
    if (rc) {
        dnnl_bk_expert_destroy(bk, e);
        return rc;
    }
    *out = e;
    return TIDE_OK;
}

/* Fill an expert from checked views. */
static int dnnl_bk_expert_load(struct tide_backend *bk, struct tide_expert *e,
                               const struct tide_view *gate, const struct tide_view *up,
                               const struct tide_view *down)
{
    const char *name = gate->name ? gate->name : "expert";
    dnnl_bk_enter(bk);
    if (e->layout == DNNL_BK_RAW) {
        int rc = dnnl_bk_mat_load(bk, &e->gate, gate->data, name);
        if (!rc)
            rc = dnnl_bk_mat_load(bk, &e->up, up->data, name);
        return rc ? rc : dnnl_bk_mat_load(bk, &e->down, down->data, name);
    }
    /* Gate rows then up rows, contiguous, as the fused matrix's source. */
    size_t half = (size_t)(e->inter * e->hidden) * sizeof(uint16_t);
    int rc = dnnl_bk_scratch(bk, 2 * half);
    if (rc)
        return rc;
    memcpy(bk->scratch, gate->data, half);
    memcpy((char *)bk->scratch + half, up->data, half);
    rc = dnnl_bk_mat_load(bk, &e->gate_up, bk->scratch, name);
    return rc ? rc : dnnl_bk_mat_load(bk, &e->down, down->data, name);
}

int dnnl_bk_expert_create(struct tide_backend *bk, const struct tide_view *gate,
                          const struct tide_view *up, const struct tide_view *down,
                          struct tide_expert **out)
{
    if (!bk || !out || !gate || gate->ndim != 2)
        return dnnl_bk_inval("expert_create", "NULL argument or gate not 2-D");
    *out = NULL;
    const int64_t inter = gate->shape[0], hidden = gate->shape[1];
    if (inter <= 0 || hidden <= 0)
        return dnnl_bk_inval("expert_create", "gate has an empty dimension");
    const char *name = gate->name ? gate->name : "expert";
    struct tide_expert *e = NULL;
    int rc;
    if (gate->qfmt != TIDE_QFMT_NONE) {
        /* Quantized: the checkpoint's values and scales in place, whatever
         * expert_layout says (there is no packed form of them). */
        rc = dnnl_bk_check_qviews("expert_create", gate->qfmt, gate->qblock, gate, up, down, hidden,
                                  inter);
        if (!rc)
            rc = dnnl_bk_expert_new_q(bk, hidden, inter, gate->qfmt, gate->qblock, false, &e);
        if (rc == TIDE_E_NOMEM)
            tide_error(DNNL_BK_NAME ": expert_create: out of memory for %s", name);
        if (rc)
            return rc;
        dnnl_bk_expert_load_q(e, gate, up, down);
        *out = e;
        return TIDE_OK;
    }
    rc = dnnl_bk_all_bf16("expert_create", gate, up, down,
                          "gate is bf16 (all three must share one format)");
    if (!rc)
        rc = bkc_check_expert_views(&dnnl_bk_id, "expert_create", gate, up, down, hidden, inter);
    if (rc)
        return rc;
    rc = dnnl_bk_expert_new(bk, hidden, inter, false, name, &e);
    if (!rc)
        rc = dnnl_bk_expert_load(bk, e, gate, up, down);
    if (rc) {
        if (rc == TIDE_E_NOMEM)
            tide_error(DNNL_BK_NAME ": expert_create: out of memory for %s", name);
        dnnl_bk_expert_destroy(bk, e);
        return rc;
    }
    *out = e;
    return TIDE_OK;
}

int dnnl_bk_slot_create(struct tide_backend *bk, int64_t hidden, int64_t inter,
                        struct tide_expert **out)
{
    if (!bk || !out)
        return dnnl_bk_inval("slot_create", "NULL argument");
    *out = NULL;
    if (hidden <= 0 || inter <= 0)
        return dnnl_bk_inval("slot_create", "hidden %lld and inter %lld must be positive",
                             (long long)hidden, (long long)inter);
    int rc = dnnl_bk_expert_new(bk, hidden, inter, true, "expert slot", out);
    if (rc == TIDE_E_NOMEM)
        tide_error(DNNL_BK_NAME ": slot_create: out of memory for a [%lld,%lld] expert slot",
                   (long long)hidden, (long long)inter);
    return rc;
}

int dnnl_bk_slot_create_q(struct tide_backend *bk, int64_t hidden, int64_t inter, int qfmt,
                          const int qblock[2], struct tide_expert **out)
{
    if (!bk || !out)
        return dnnl_bk_inval("slot_create_q", "NULL argument");
    *out = NULL;
    if (qfmt == TIDE_QFMT_NONE)
        return dnnl_bk_slot_create(bk, hidden, inter, out);
    if (hidden <= 0 || inter <= 0)
        return dnnl_bk_inval("slot_create_q", "hidden %lld and inter %lld must be positive",
                             (long long)hidden, (long long)inter);
    int rc = dnnl_bk_qfits("slot_create_q", "gate/up", qfmt, qblock, inter, hidden);
    if (!rc)
        rc = dnnl_bk_qfits("slot_create_q", "down", qfmt, qblock, hidden, inter);
    if (!rc)
        rc = dnnl_bk_expert_new_q(bk, hidden, inter, qfmt, qblock, true, out);
    if (rc == TIDE_E_NOMEM)
        tide_error(DNNL_BK_NAME ": slot_create_q: out of memory for a [%lld,%lld] %s expert slot",
                   (long long)hidden, (long long)inter, tide_qfmt_name(qfmt));
    return rc;
}

int dnnl_bk_slot_load(struct tide_backend *bk, struct tide_expert *slot,
                      const struct tide_view *gate, const struct tide_view *up,
                      const struct tide_view *down)
{
    if (!bk || !slot)
        return dnnl_bk_inval("slot_load", "NULL backend or slot");
    if (slot->qfmt != TIDE_QFMT_NONE) {
        if (!slot->qgate.own)
            return dnnl_bk_inval("slot_load",
                                 "the expert was made by expert_create, not slot_create_q");
        int rc = dnnl_bk_check_qviews("slot_load", slot->qfmt, slot->qblock, gate, up, down,
                                      slot->hidden, slot->inter);
        if (rc)
            return rc;
        double t0 = dnnl_bk_now();
        dnnl_bk_expert_load_q(slot, gate, up, down);
        bk->copy_seconds += dnnl_bk_now() - t0;
        return TIDE_OK;
    }
    if (slot->layout == DNNL_BK_RAW && !slot->gate.own)
        return dnnl_bk_inval("slot_load", "the expert was made by expert_create, not slot_create");
    int rc = dnnl_bk_all_bf16("slot_load", gate, up, down,
                              "the slot holds bf16 experts (slot_create_q makes a quantized slot)");
    if (!rc)
        rc = bkc_check_expert_views(&dnnl_bk_id, "slot_load", gate, up, down, slot->hidden,
                                    slot->inter);
    if (rc)
        return rc;
    double t0 = dnnl_bk_now();
    rc = dnnl_bk_expert_load(bk, slot, gate, up, down);
    bk->copy_seconds += dnnl_bk_now() - t0;
    return rc;
}

int dnnl_bk_copy_sync(struct tide_backend *bk)
{
    return TIDE_OK;
}

int dnnl_bk_timings(struct tide_backend *bk, double *copy_seconds, double *expert_seconds)
{
    if (!bk)
        return dnnl_bk_inval("timings", "NULL backend");
    if (copy_seconds)
        *copy_seconds = bk->copy_seconds;
    if (expert_seconds)
        *expert_seconds = bk->expert_seconds;
    return TIDE_OK;
}
