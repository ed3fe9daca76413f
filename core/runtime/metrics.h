/* The exact traffic counters of one MoE layer over one phase, and the
 * "layer" line of [output] metrics that carries them. The dispatcher (live)
 * and the simulator (replayed) both write it through one function, so their
 * lines stay byte-identical (tests/sim/test_sim_golden.py). Core-internal. */
#ifndef TIDE_METRICS_H
#define TIDE_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "tide/trace.h"

/* The members of struct tide_traffic, for structs that embed them by name
 * (see struct tide_moe_counters). */
#define TIDE_TRAFFIC_MEMBERS                                                                       \
    uint64_t tokens;       /* tokens routed */                                                     \
    uint64_t active;       /* experts with at least one token */                                   \
    uint64_t hit_rows;     /* token-expert assignments computed on the device */                   \
    uint64_t miss_rows;    /* token-expert assignments computed on the host */                     \
    uint64_t promotions;   /* experts copied into device slots */                                  \
    uint64_t evictions;    /* residents replaced */                                                \
    uint64_t weight_bytes; /* expert weights moved host -> device */                               \
    uint64_t act_bytes     /* activations moved device <-> host for host experts */

struct tide_traffic {
    TIDE_TRAFFIC_MEMBERS;
};

/* a += b. */
void tide_traffic_add(struct tide_traffic *a, const struct tide_traffic *b);

/* Write one "layer" line to f: phase, block, step (-1 outside denoising
 * steps), layer, the counters, then `tail` (more JSON members, already
 * formatted, without a leading comma) and a newline. */
void tide_metrics_layer_line(FILE *f, enum tide_trace_phase phase, int block, int step, int layer,
                             const struct tide_traffic *t, const char *tail);

#endif
