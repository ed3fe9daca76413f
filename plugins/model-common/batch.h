/* model-common: several sequences per forward (the model ops' reserve_slots
 * and forward_batch, tide/model.h). A batch lays its spans' rows end to end
 * in the model's activations, so every row-wise op (embedding, norms,
 * projections, the routed and shared experts, the head) runs once over all
 * of them, while each span's rotary positions, K/V writes and attention use
 * its own positions and KV-cache slot (mc_rope_spans, mc_attend). A single
 * sequence is a batch of one span. Header-only. */
#ifndef MODEL_COMMON_BATCH_H
#define MODEL_COMMON_BATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model-common/forward.h"
#include "model-common/slots.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/model.h"
#include "tide/status.h"

/* Most KV-cache slots a model reserves (a guard against a wild argument). */
#define MC_MAX_SLOTS 4096

/* A forward call's host-side layout, sized by reserve. */
struct mc_batch {
    struct mc_span *sp; /* [cap_slots] */
    int n_sp, cap_slots;
    int64_t T;     /* rows in all */
    int32_t *ids;  /* [max_tokens] the spans' ids end to end */
    int32_t *rows; /* [max_tokens] rows (of T) whose logits are asked for, span by span */
    int64_t R;
    float *all; /* [max_tokens * vocab] host logits when the backend cannot gather rows */
};

static inline void mc_batch_free(struct mc_batch *b)
{
    free(b->sp);
    free(b->ids);
    free(b->rows);
    free(b->all);
    memset(b, 0, sizeof *b);
}

static inline int mc_batch_alloc(struct mc_batch *b, int n_slots, int64_t max_tokens)
{
    mc_batch_free(b);
    b->sp = malloc(sizeof *b->sp * (size_t)n_slots);
    b->ids = malloc(sizeof *b->ids * (size_t)max_tokens);
    b->rows = malloc(sizeof *b->rows * (size_t)max_tokens);
    if (!b->sp || !b->ids || !b->rows) {
        mc_batch_free(b);
        return TIDE_E_NOMEM;
    }
    b->cap_slots = n_slots;
    return TIDE_OK;
}

/* reserve_slots' arguments, against the model's max_position_embeddings. */
static inline int mc_reserve_check(const char *who, int n_slots, int64_t n_ctx, int64_t max_tokens,
                                   int64_t max_pos)
{
    if (n_slots < 1 || n_slots > MC_MAX_SLOTS || n_ctx < 1 || max_tokens < 1 ||
        max_tokens > (int64_t)n_slots * n_ctx) {
        tide_error("%s: reserve(%d slots of %lld positions, %lld per forward) is invalid", who,
                   n_slots, (long long)n_ctx, (long long)max_tokens);
        return TIDE_E_INVAL;
    }
    if (n_ctx > max_pos) {
        tide_error("%s: %lld positions requested but the model supports %lld "
                   "(max_position_embeddings)",
                   who, (long long)n_ctx, (long long)max_pos);
        return TIDE_E_RANGE;
    }
    return TIDE_OK;
}

/* Whether a reserve of (n_slots, n_ctx, max_tokens) must reallocate over
 * the capacity held (have_*); when it must, each wanted value becomes the
 * larger of the two, since a reserve never shrinks. */
static inline bool mc_reserve_grows(int *n_slots, int64_t *n_ctx, int64_t *max_tokens,
                                    int have_slots, int64_t have_ctx, int64_t have_tokens)
{
    if (*n_slots <= have_slots && *n_ctx <= have_ctx && *max_tokens <= have_tokens)
        return false;
    *n_slots = *n_slots > have_slots ? *n_slots : have_slots;
    *n_ctx = *n_ctx > have_ctx ? *n_ctx : have_ctx;
    *max_tokens = *max_tokens > have_tokens ? *max_tokens : have_tokens;
    return true;
}

/* Check a forward_batch call against the reserved capacity (n_slots slots of
 * n_ctx positions, max_tokens rows per call) and lay it out in b: spans,
 * ids and the rows whose logits are wanted. Every problem is logged naming
 * the span. */
static inline int mc_batch_prepare(const char *who, struct mc_batch *b,
                                   const struct tide_seq_span *spans, int n_spans, int n_slots,
                                   int64_t n_ctx, int64_t max_tokens, int vocab)
{
    if (n_spans < 1 || n_spans > n_slots || !spans) {
        tide_error("%s: forward_batch of %d spans with %d slots reserved", who, n_spans, n_slots);
        return TIDE_E_INVAL;
    }
    int64_t T = 0, R = 0;
    for (int i = 0; i < n_spans; i++) {
        const struct tide_seq_span *s = &spans[i];
        if (s->size < sizeof *s) {
            tide_error("%s: forward_batch: span %d has size %u, expected %zu", who, i,
                       (unsigned)s->size, sizeof *s);
            return TIDE_E_INVAL;
        }
        if (s->slot < 0 || s->slot >= n_slots) {
            tide_error("%s: forward_batch: span %d names slot %d of %d", who, i, s->slot, n_slots);
            return TIDE_E_RANGE;
        }
        for (int j = 0; j < i; j++) {
            if (spans[j].slot == s->slot) {
                tide_error("%s: forward_batch: spans %d and %d share slot %d", who, j, i, s->slot);
                return TIDE_E_INVAL;
            }
        }
        int rc = mc_check_span(who, s->ids, s->n, s->pos0, max_tokens - T, n_ctx, vocab);
        if (rc == TIDE_OK && s->rows)
            rc = mc_check_rows(who, s->rows, s->n_rows, s->n, s->logits);
        else if (rc == TIDE_OK &&
                 (s->n_rows < 0 || s->n_rows > s->n || (s->n_rows && !s->logits))) {
            tide_error("%s: forward_batch: %lld rows of a %lld-token span (logits %s)", who,
                       (long long)s->n_rows, (long long)s->n, s->logits ? "set" : "NULL");
            rc = TIDE_E_INVAL;
        }
        if (rc != TIDE_OK) {
            tide_error("%s: forward_batch: span %d (slot %d) refused", who, i, s->slot);
            return rc;
        }
        b->sp[i] = (struct mc_span){.off = T, .n = s->n, .pos0 = s->pos0, .slot = s->slot};
        memcpy(b->ids + T, s->ids, sizeof *s->ids * (size_t)s->n);
        for (int64_t r = 0; r < s->n_rows; r++)
            b->rows[R++] = (int32_t)(T + (s->rows ? s->rows[r] : r));
        T += s->n;
    }
    b->n_sp = n_spans;
    b->T = T;
    b->R = R;
    return TIDE_OK;
}

/* The output layer for the rows b asked for: final norm and head over
 * those rows of h, read into each span's logits. Every op is row by row, so
 * a row's logits do not depend on which others are computed. Without a row
 * gather on the backend, every row is computed and those asked for kept.
 * h holds max_tokens rows; x (bf16), tmp (f32) and lg (f32 [., vocab]) are
 * scratch. */
struct mc_output_args {
    struct tide_buffer *h, *x, *tmp, *lg;
    const struct tide_weight *norm, *head;
    int64_t max_tokens, hidden;
    int vocab;
    float eps;
};

static inline int mc_output_batch(const struct tide_backend_ref *dev,
                                  const struct mc_output_args *a, struct mc_batch *b,
                                  const struct tide_seq_span *spans)
{
    const struct tide_backend_ops *o = dev->ops;
    struct tide_backend *bk = dev->bk;
    const int64_t H = a->hidden, V = a->vocab;
    bool identity = b->R == b->T;
    for (int64_t r = 0; identity && r < b->R; r++)
        identity = b->rows[r] == r;
    const bool gather = !identity && TIDE_OPS_HAS(o, gather_rows);
    const int64_t n_out = gather ? b->R : b->T;
    struct tide_tensor h = tide_tensor_2d(a->h, TIDE_DTYPE_F32, n_out, H);
    struct tide_tensor x = tide_tensor_2d(a->x, TIDE_DTYPE_BF16, n_out, H);
    struct tide_tensor lg = tide_tensor_2d(a->lg, TIDE_DTYPE_F32, n_out, V);
    int rc = TIDE_OK;
    if (gather) {
        /* Gather the rows first (tmp is free: the layers are done). */
        struct tide_tensor hall = tide_tensor_2d(a->h, TIDE_DTYPE_F32, a->max_tokens, H);
        h = tide_tensor_2d(a->tmp, TIDE_DTYPE_F32, n_out, H);
        rc = o->gather_rows(bk, &hall, b->rows, n_out, &h);
    }
    /* One span asks for rows: where the backend computes in host memory, the
     * head writes them straight into the span's logits (buffer_wrap). Read
     * back instead, 16 rows of 157184 logits cost ~1.5 ms of a ~75 ms
     * forward (2 threads, Xeon VM). */
    int asking = 0, only = -1;
    for (int i = 0; i < b->n_sp; i++)
        if (spans[i].n_rows) {
            asking++;
            only = i;
        }
    struct tide_buffer *wrapped = NULL;
    if ((gather || identity) && asking == 1 && TIDE_OPS_HAS(o, buffer_wrap) &&
        o->buffer_wrap(bk, spans[only].logits, sizeof(float) * (size_t)(n_out * V), &wrapped) ==
            TIDE_OK)
        lg = tide_tensor_2d(wrapped, TIDE_DTYPE_F32, n_out, V);
    if (!rc && !(rc = o->rmsnorm(bk, &h, a->norm, (int)H, a->eps, &x)))
        rc = o->matmul(bk, &x, a->head, &lg);
    if (wrapped) {
        o->buffer_free(bk, wrapped);
        return rc;
    }
    if (rc)
        return rc;
    if (gather || identity) {
        /* lg's rows are the asked rows, span by span. */
        int64_t r = 0;
        for (int i = 0; rc == TIDE_OK && i < b->n_sp; i++) {
            if (!spans[i].n_rows)
                continue;
            struct tide_tensor s = tide_tensor_slice(&lg, r, spans[i].n_rows, 0, V);
            rc = o->read(bk, &s, spans[i].logits);
            r += spans[i].n_rows;
        }
        return rc;
    }
    if (!b->all && !(b->all = malloc(sizeof *b->all * (size_t)(a->max_tokens * V))))
        return TIDE_E_NOMEM;
    if ((rc = o->read(bk, &lg, b->all)) != TIDE_OK)
        return rc;
    int64_t r = 0;
    for (int i = 0; i < b->n_sp; i++)
        for (int64_t j = 0; j < spans[i].n_rows; j++, r++)
            memcpy(spans[i].logits + j * V, b->all + (int64_t)b->rows[r] * V,
                   sizeof *b->all * (size_t)V);
    return TIDE_OK;
}

/* Cached positions the spans' attention reads: each span its slot's
 * positions 0 .. pos0+n-1 (for the profile's K/V bytes). */
static inline uint64_t mc_spans_kv_positions(const struct mc_span *sp, int n_sp)
{
    uint64_t p = 0;
    for (int s = 0; s < n_sp; s++)
        p += (uint64_t)(sp[s].pos0 + sp[s].n);
    return p;
}

#endif
