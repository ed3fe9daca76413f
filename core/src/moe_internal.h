/* The MoE dispatcher's core-side API (creation, statistics). */
#ifndef TIDE_MOE_INTERNAL_H
#define TIDE_MOE_INTERNAL_H

#include <stdint.h>

#include "tide/backend.h"
#include "tide/moe.h"

/* Counters since creation, exact integers. */
struct tide_moe_stats {
    uint64_t calls;        /* tide_moe_forward calls */
    uint64_t assignments;  /* token-expert assignments routed */
    uint64_t expert_calls; /* expert FFN invocations (active experts summed over calls) */
};

/* Create a dispatcher running every expert on dev. The backend must outlive
 * the dispatcher. Returns TIDE_OK or TIDE_E_NOMEM. */
int tide_moe_create(const struct tide_backend_ref *dev, struct tide_moe **out);
void tide_moe_destroy(struct tide_moe *moe); /* NULL is a no-op */
const struct tide_moe_shape *tide_moe_get_shape(const struct tide_moe *moe);
void tide_moe_get_stats(const struct tide_moe *moe, struct tide_moe_stats *out);

#endif
