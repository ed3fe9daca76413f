/* MoE dispatcher: routing ids in, expert FFNs issued per active expert over
 * its gathered tokens, outputs combined in a fixed order (by token, then
 * routing slot) so the result never depends on where an expert ran. */
#include <stdlib.h>
#include <string.h>

#include "moe_internal.h"
#include "tide/log.h"
#include "tide/status.h"

struct tide_moe {
    struct tide_backend_ref dev;
    struct tide_moe_shape shape;
    bool declared;
    struct tide_expert **experts; /* [n_layers * n_experts] on dev */
    struct tide_buffer *parts;    /* f32 [parts_rows, hidden] on dev */
    int64_t parts_rows;
    int32_t *count; /* [n_experts] */
    int32_t *start; /* [n_experts + 1] */
    int32_t *rows;  /* [cap] token index of each assignment, grouped by expert */
    int32_t *dst;   /* [cap] assignment index t*k+j, grouped by expert */
    int64_t cap;
    struct tide_moe_stats stats;
};

int tide_moe_create(const struct tide_backend_ref *dev, struct tide_moe **out)
{
    struct tide_moe *moe = calloc(1, sizeof *moe);
    if (!moe)
        return TIDE_E_NOMEM;
    moe->dev = *dev;
    *out = moe;
    return TIDE_OK;
}

void tide_moe_destroy(struct tide_moe *moe)
{
    if (!moe)
        return;
    const struct tide_backend_ops *o = moe->dev.ops;
    int64_t n = moe->declared ? (int64_t)moe->shape.n_layers * moe->shape.n_experts : 0;
    for (int64_t i = 0; moe->experts && i < n; i++)
        if (moe->experts[i])
            o->expert_destroy(moe->dev.bk, moe->experts[i]);
    if (moe->parts)
        o->buffer_free(moe->dev.bk, moe->parts);
    free(moe->experts);
    free(moe->count);
    free(moe->start);
    free(moe->rows);
    free(moe->dst);
    free(moe);
}

int tide_moe_declare(struct tide_moe *moe, const struct tide_moe_shape *s)
{
    if (moe->declared) {
        tide_error("moe: shape declared twice");
        return TIDE_E_INVAL;
    }
    if (!s || s->size < sizeof *s || s->n_layers < 1 || s->n_experts < 1 || s->top_k < 1 ||
        s->top_k > s->n_experts || s->hidden < 1 || s->inter < 1) {
        tide_error("moe: invalid shape declared by the model");
        return TIDE_E_INVAL;
    }
    moe->shape = *s;
    moe->experts = calloc((size_t)s->n_layers * (size_t)s->n_experts, sizeof *moe->experts);
    moe->count = calloc((size_t)s->n_experts, sizeof *moe->count);
    moe->start = calloc((size_t)s->n_experts + 1, sizeof *moe->start);
    if (!moe->experts || !moe->count || !moe->start)
        return TIDE_E_NOMEM;
    moe->declared = true;
    return TIDE_OK;
}

const struct tide_moe_shape *tide_moe_get_shape(const struct tide_moe *moe)
{
    return moe->declared ? &moe->shape : NULL;
}

void tide_moe_get_stats(const struct tide_moe *moe, struct tide_moe_stats *out)
{
    *out = moe->stats;
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
    for (int j = 0; j < 3; j++) {
        int64_t r = j < 2 ? I : H, c = j < 2 ? H : I;
        if (v[j]->dtype != TIDE_DTYPE_BF16 || v[j]->ndim != 2 || v[j]->shape[0] != r ||
            v[j]->shape[1] != c) {
            tide_error("moe: tensor '%s' must be BF16 [%lld, %lld]", v[j]->name ? v[j]->name : "?",
                       (long long)r, (long long)c);
            return TIDE_E_INVAL;
        }
    }
    struct tide_expert **slot = &moe->experts[(size_t)layer * moe->shape.n_experts + e];
    if (*slot) {
        tide_error("moe: expert %d of MoE layer %d registered twice", e, layer);
        return TIDE_E_INVAL;
    }
    int rc = moe->dev.ops->expert_create(moe->dev.bk, gate, up, down, slot);
    if (rc != TIDE_OK)
        tide_error("moe: backend %s could not take expert %d of MoE layer %d (%s)", moe->dev.name,
                   e, layer, gate->name ? gate->name : "?");
    return rc;
}

static int moe_reserve(struct tide_moe *moe, int64_t assignments)
{
    if (assignments > moe->cap) {
        int32_t *r = realloc(moe->rows, (size_t)assignments * sizeof *r);
        if (!r)
            return TIDE_E_NOMEM;
        moe->rows = r;
        int32_t *d = realloc(moe->dst, (size_t)assignments * sizeof *d);
        if (!d)
            return TIDE_E_NOMEM;
        moe->dst = d;
        moe->cap = assignments;
    }
    if (assignments > moe->parts_rows) {
        if (moe->parts)
            moe->dev.ops->buffer_free(moe->dev.bk, moe->parts);
        moe->parts = NULL;
        size_t bytes = (size_t)assignments * (size_t)moe->shape.hidden * sizeof(float);
        int rc = moe->dev.ops->buffer_alloc(moe->dev.bk, bytes, &moe->parts);
        if (rc != TIDE_OK) {
            moe->parts_rows = 0;
            return rc;
        }
        moe->parts_rows = assignments;
    }
    return TIDE_OK;
}

int tide_moe_forward(struct tide_moe *moe, int layer, const struct tide_tensor *x,
                     const int32_t *ids, const float *w, int64_t n, const struct tide_tensor *y)
{
    if (!moe->declared || layer < 0 || layer >= moe->shape.n_layers || n < 1) {
        tide_error("moe: forward on MoE layer %d with %lld tokens is invalid", layer, (long long)n);
        return TIDE_E_INVAL;
    }
    const int E = moe->shape.n_experts, k = moe->shape.top_k;
    const int64_t A = n * k;
    int rc = moe_reserve(moe, A);
    if (rc != TIDE_OK)
        return rc;
    /* Counting sort of the assignments by expert id, stable in (token, slot). */
    memset(moe->count, 0, sizeof *moe->count * (size_t)E);
    for (int64_t a = 0; a < A; a++) {
        if (ids[a] < 0 || ids[a] >= E) {
            tide_error("moe: layer %d routed token %lld to expert %d (only %d experts)", layer,
                       (long long)(a / k), ids[a], E);
            return TIDE_E_RANGE;
        }
        moe->count[ids[a]]++;
    }
    moe->start[0] = 0;
    for (int e = 0; e < E; e++)
        moe->start[e + 1] = moe->start[e] + moe->count[e];
    for (int e = 0; e < E; e++)
        moe->count[e] = 0;
    for (int64_t a = 0; a < A; a++) {
        int e = ids[a];
        int32_t at = moe->start[e] + moe->count[e]++;
        moe->rows[at] = (int32_t)(a / k);
        moe->dst[at] = (int32_t)a;
    }
    const struct tide_tensor parts =
        tide_tensor_2d(moe->parts, TIDE_DTYPE_F32, A, moe->shape.hidden);
    for (int e = 0; e < E; e++) {
        if (!moe->count[e])
            continue;
        const struct tide_expert *ex = moe->experts[(size_t)layer * E + e];
        if (!ex) {
            tide_error("moe: expert %d of MoE layer %d was never registered", e, layer);
            return TIDE_E_INVAL;
        }
        rc = moe->dev.ops->expert_ffn(moe->dev.bk, ex, x, moe->rows + moe->start[e],
                                      moe->dst + moe->start[e], moe->count[e], &parts);
        if (rc != TIDE_OK)
            return rc;
        moe->stats.expert_calls++;
    }
    moe->stats.calls++;
    moe->stats.assignments += (uint64_t)A;
    return moe->dev.ops->moe_combine(moe->dev.bk, &parts, w, k, y);
}
