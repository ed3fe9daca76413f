/* The core's MoE dispatcher, as seen by model plugins.
 *
 * A model registers every routed expert once at open time (host views into
 * its checkpoint), then calls tide_moe_forward for each MoE layer with the
 * router's choices. The core decides where each expert runs (placement
 * policy, issue-dependent), issues the expert GEMMs on the right backend and
 * combines the outputs in a fixed order (by token, then routing slot), so the
 * result never depends on placement. */
#ifndef TIDE_MOE_H
#define TIDE_MOE_H

#include "tide/api.h"

#include <stdint.h>

#include "tide/backend.h"
#include "tide/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tide_moe; /* owned by the core */

/* The MoE shape a model declares before registering experts. */
struct tide_moe_shape {
    uint32_t size; /* sizeof(struct tide_moe_shape) */
    int n_layers;  /* MoE layers */
    int n_experts; /* routed experts per MoE layer */
    int top_k;     /* experts per token */
    int hidden;    /* expert input and output width */
    int inter;     /* expert intermediate width */
    /* --- appended (check size) --- */
    int qfmt;      /* experts' weight format (tide/quant.h); 0: bf16 */
    int qblock[2]; /* its block: rows and columns per scale */
};

/* Declare the shape; once, before any other call. Returns TIDE_OK,
 * TIDE_E_INVAL (bad or repeated declaration) or TIDE_E_NOMEM. */
TIDE_API int tide_moe_declare(struct tide_moe *moe, const struct tide_moe_shape *shape);

/* Register expert e of MoE layer `layer` (0-based among MoE layers). The views
 * (and their scale views) must stay valid until the model closes. They are
 * bf16, or of the declared block-quantized format. Returns TIDE_OK, TIDE_E_INVAL
 * (index out of range, shape mismatch: the tensor name is logged) or a
 * backend error. */
TIDE_API int tide_moe_register_expert(struct tide_moe *moe, int layer, int e,
                                      const struct tide_view *gate, const struct tide_view *up,
                                      const struct tide_view *down);

/* Run the routed experts of one MoE layer for n tokens.
 *   x:   bf16 [n, hidden] on the device backend (the normalised input);
 *   ids: host [n, top_k] expert ids; w: host [n, top_k] routing weights;
 *   y:   f32 [n, hidden] on the device backend, overwritten with
 *        sum_j w[t,j] * expert_{ids[t,j]}(x[t]).
 * Returns TIDE_OK or a negative status (logged). */
TIDE_API int tide_moe_forward(struct tide_moe *moe, int layer, const struct tide_tensor *x,
                              const int32_t *ids, const float *w, int64_t n,
                              const struct tide_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
