/* Hardware profiles and the cost model that turns placement counts into
 * time, shared by `tide sim`, the interval solver and policy-tide's
 * `interval = auto`. Profiles are INI files (in config/profiles/) whose
 * every number carries its source in a comment; the format and the model are
 * documented in docs/profiles.md.
 *
 * The model, per MoE layer and forward (one layer of one denoising step, of
 * the prefill or of a block's final K/V pass):
 *   D = sum over experts run on the device of device(rows)
 *   H = sum over experts run on the host of host(rows)
 *   W = promotions * expert_bytes / h2d          (expert weights, copy queue)
 *   A_down = host_rows * hidden * 2 / d2h        (bf16 rows to the host)
 *   A_up   = host_rows * hidden * 4 / h2d        (f32 results back)
 *   L = 2 * latency when any row runs on the host, else 0
 *   dense = dense_us + dense_us_per_token * tokens  (attention, router, shared expert)
 *   serial:  t = dense + D + W + L + A_down + H + A_up
 *   overlap: t = dense + max(D, W + A_up, L + A_down + H + A_up)
 * (in the overlapped form the copy queue carries the weights and the
 * uploads, the host path is download, compute, upload, and the device
 * computes its residents meanwhile). Times are microseconds. */
#ifndef TIDE_PROFILE_H
#define TIDE_PROFILE_H

#include "tide/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "tide/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TIDE_PROFILE_MAX_POINTS 32

/* Expert FFN time against rows (token-expert assignments of one expert):
 * piecewise linear through the points (rows ascending, >= 1), the first
 * point's time below it, extrapolated linearly beyond the last two. */
struct tide_profile_curve {
    int n;
    double rows[TIDE_PROFILE_MAX_POINTS];
    double us[TIDE_PROFILE_MAX_POINTS];
};

struct tide_profile {
    char name[64];
    double h2d_gbps;   /* pinned host -> device, GB/s (1e9 bytes/s) */
    double d2h_gbps;   /* device -> pinned host, GB/s */
    double latency_us; /* fixed cost of each activation transfer (one each way) */
    bool overlap;      /* copies, host experts and device experts run concurrently */
    uint32_t hidden;   /* expert shape the curves were measured for */
    uint32_t inter;
    struct tide_profile_curve device; /* device expert time vs rows */
    struct tide_profile_curve host;   /* host expert time vs rows */
    double dense_us;           /* per MoE layer and forward: attention, router, shared expert */
    double dense_us_per_token; /* ... plus this per token of the forward */
    int qfmt;                  /* [expert] format: the experts' weight format (tide/quant.h) */
    int qblock[2];             /* its default block */
};

/* Bytes of one routed expert of that shape: gate, up and down in bf16. */
static inline uint64_t tide_expert_bytes(uint32_t hidden, uint32_t inter)
{
    return 3ull * hidden * inter * 2u;
}

/* Load and validate a profile INI into *out. Every problem is logged as
 * "FILE:LINE: ..." (unknown keys with a suggestion); returns TIDE_OK,
 * TIDE_E_NOTFOUND / TIDE_E_IO (cannot open) or TIDE_E_FORMAT. */
TIDE_API int tide_profile_load(const char *path, struct tide_profile *out);

/* Write p as a profile INI to path (via path.tmp, renamed), refusing an
 * existing file unless overwrite. header is written first as comment lines
 * (may be NULL); notes[i], when given, is the source comment put above key
 * i of the order name, h2d_gbps, d2h_gbps, latency_us, overlap, hidden,
 * inter, dense_us, dense_us_per_token, device, host. */
TIDE_API int tide_profile_save(const struct tide_profile *p, const char *path, bool overwrite,
                               const char *header, const char *const notes[11]);

/* Time of one expert at `rows` on a curve, for the curve's own expert
 * shape: microseconds, 0 for rows <= 0. */
TIDE_API double tide_profile_curve_us(const struct tide_profile_curve *c, double rows);

/* A profile bound to one expert shape, with per-row tables for speed. */
struct tide_cost {
    struct tide_profile p;
    uint64_t expert_bytes;
    uint32_t hidden;
    double scale;       /* expert_bytes / the profile's expert bytes (1 unless scaled) */
    double promote_us;  /* one promotion */
    double down_us_row; /* A_down per host row */
    double up_us_row;   /* A_up per host row */
    int n_tab;          /* tables cover rows 0 .. n_tab-1 */
    double *dev_tab;    /* [n_tab] device(rows) * scale; [0] = 0 */
    double *host_tab;   /* [n_tab] host(rows) * scale */
};

/* Bind p to experts of hidden x inter. A profile measured for another shape
 * is refused (TIDE_E_CONFIG, naming both shapes and `what`, e.g. the trace
 * file) unless allow_scale: then the curves scale linearly with the
 * expert's bf16 bytes, i.e. its FLOPs (exact for FLOP-bound times,
 * approximate for launch overheads), while copies always move the expert's
 * real bytes in its format. max_rows sizes the tables (larger rows are computed). */
TIDE_API int tide_cost_init(struct tide_cost *c, const struct tide_profile *p, uint32_t hidden,
                            uint32_t inter, bool allow_scale, const char *what, uint32_t max_rows);
/* The same for experts in weight format qfmt (tide/quant.h, default block):
 * a profile measured for another format is refused unless allow_scale. */
TIDE_API int tide_cost_init_fmt(struct tide_cost *c, const struct tide_profile *p, uint32_t hidden,
                                uint32_t inter, int qfmt, bool allow_scale, const char *what,
                                uint32_t max_rows);
/* Make c (bound by tide_cost_init to some expert) model the expert that pc
 * was computed for: pc's expert bytes, copy costs and expert-time tables
 * (e.g. the core's costs, scaled by --scale-profile), with c's curves beyond
 * pc's tables scaled as pc's last row is. Returns TIDE_OK or TIDE_E_INVAL
 * (malformed pc, logged). Not thread-safe on c. */
TIDE_API int tide_cost_rebind(struct tide_cost *c, const struct tide_policy_costs *pc);
/* Free the tables of c. NULL and zeroed structs are fine. */
TIDE_API void tide_cost_free(struct tide_cost *c);

/* Modelled microseconds of one expert with `rows` rows on the device (the
 * profile's curve, scaled to c's expert). Thread-safe (read-only). */
static inline double tide_cost_device(const struct tide_cost *c, uint32_t rows)
{
    return (int64_t)rows < c->n_tab ? c->dev_tab[rows]
                                    : c->scale * tide_profile_curve_us(&c->p.device, rows);
}

/* The same on the host. */
static inline double tide_cost_host(const struct tide_cost *c, uint32_t rows)
{
    return (int64_t)rows < c->n_tab ? c->host_tab[rows]
                                    : c->scale * tide_profile_curve_us(&c->p.host, rows);
}

/* The policy ABI's view of c (struct tide_policy_costs, tide/policy.h):
 * plain numbers, the tables pointing into c (so c must outlive it). */
TIDE_API void tide_cost_policy_costs(const struct tide_cost *c, struct tide_policy_costs *out);

/* What placement produced in one MoE layer for one forward. */
struct tide_layer_work {
    double device_us;    /* sum of tide_cost_device over device experts */
    double host_us;      /* sum of tide_cost_host over host experts */
    uint64_t host_rows;  /* rows computed on the host */
    uint32_t promotions; /* experts copied host -> device */
    uint32_t tokens;     /* tokens of the forward */
};

/* The terms of a layer-forward (see the model above), microseconds. */
struct tide_layer_streams {
    double dense;    /* dense */
    double device;   /* D */
    double weights;  /* W */
    double act_down; /* L + A_down */
    double host;     /* H */
    double act_up;   /* A_up */
};
/* Split one layer-forward's work into the terms above (for bounds and plots). */
TIDE_API void tide_cost_streams(const struct tide_cost *c, const struct tide_layer_work *w,
                                struct tide_layer_streams *s);

/* Modelled microseconds of one MoE layer for one forward: the serial or the
 * overlapped form above, by the profile's overlap. */
TIDE_API double tide_cost_layer_us(const struct tide_cost *c, const struct tide_layer_work *w);

#ifdef __cplusplus
}
#endif
#endif
