/* `tide serve`: counters for GET /metrics (Prometheus text format 0.0.4).
 * Every function is thread-safe (one mutex). */
#ifndef TIDE_SERVE_METRICS_H
#define TIDE_SERVE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "serve_engine.h"
#include "serve_json.h"

struct serve_metrics;

/* n_layers: MoE layers, for the per-layer series. NULL when out of memory. */
struct serve_metrics *serve_metrics_create(int n_layers);
void serve_metrics_destroy(struct serve_metrics *m); /* NULL is a no-op */

/* An answered request: endpoint label ("completions", ...) and HTTP status. */
void serve_metrics_request(struct serve_metrics *m, const char *endpoint, int status);
/* A denoising step took seconds. */
void serve_metrics_step(struct serve_metrics *m, double seconds);
/* Prompts decoding together now (the batch; its largest is kept too). */
void serve_metrics_sequences(struct serve_metrics *m, int n);
/* A generation finished (u: its usage and tide counters). */
void serve_metrics_generation(struct serve_metrics *m, const struct serve_usage *u);
/* A request was cancelled before it finished: reason "disconnect" or "shutdown". */
void serve_metrics_cancel(struct serve_metrics *m, const char *reason);
/* Replace the per-layer totals (cumulative, from the engine). */
void serve_metrics_layers(struct serve_metrics *m, const struct serve_offload *layers, int n);

/* Totals for the end-of-run summary. */
struct serve_metrics_totals {
    uint64_t requests, generations, prompt_tokens, completion_tokens, cancelled;
};
void serve_metrics_totals(struct serve_metrics *m, struct serve_metrics_totals *t);

/* The exposition text, with the queue state and the engine's description.
 * malloc'd; NULL when out of memory. */
char *serve_metrics_render(struct serve_metrics *m, int queued, int running, int max_queue,
                           const struct serve_engine_info *info, const char *model);

#endif
