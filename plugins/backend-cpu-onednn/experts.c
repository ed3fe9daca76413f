/* Routed experts and expert slots.
 *
 * An expert made by expert_create uses the checkpoint's memory (`inplace`) or
 * a packed copy (`packed`), as the `expert_layout` option says. A slot
 * (slot_create) is the same structure with memory of its own, refilled by
 * slot_load when the dispatcher promotes an expert into it: a copy of the
 * rows (inplace) or a reorder into the packed layout (packed). Everything is
 * synchronous on this backend, so copy_sync has nothing to wait for. */
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
    free(e);
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
    e->layout = bk->expert_layout;
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
    int rc = bkc_check_expert_views(&dnnl_bk_id, "expert_create", gate, up, down, hidden, inter);
    if (rc)
        return rc;
    const char *name = gate->name ? gate->name : "expert";
    struct tide_expert *e = NULL;
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

int dnnl_bk_slot_load(struct tide_backend *bk, struct tide_expert *slot,
                      const struct tide_view *gate, const struct tide_view *up,
                      const struct tide_view *down)
{
    if (!bk || !slot)
        return dnnl_bk_inval("slot_load", "NULL backend or slot");
    if (slot->layout == DNNL_BK_RAW && !slot->gate.own)
        return dnnl_bk_inval("slot_load", "the expert was made by expert_create, not slot_create");
    int rc =
        bkc_check_expert_views(&dnnl_bk_id, "slot_load", gate, up, down, slot->hidden, slot->inter);
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
