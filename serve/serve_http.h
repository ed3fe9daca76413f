/* `tide serve`: the HTTP side, on GNU libmicrohttpd (one thread per
 * connection; a connection waits for its job on the queue). Routes:
 *
 *   POST /v1/completions, POST /v1/chat/completions   generation (queued)
 *   GET  /v1/models, GET /v1/models/NAME               the model served
 *   GET  /health                                       liveness (no key needed)
 *   GET  /metrics                                      Prometheus text
 *   POST /tokenize, POST /detokenize, GET /tokenizer_info   (vLLM's; queued)
 *
 * With an API key every route but /health needs "Authorization: Bearer KEY".
 * Errors are OpenAI-style JSON: {"error": {"message", "type", "param",
 * "code"}}. A request whose headers, or then whose body, do not arrive
 * within [serve] read_timeout gets 408 and its connection is closed (a
 * watchdog thread), so that stalled clients cannot hold every connection. */
#ifndef TIDE_SERVE_HTTP_H
#define TIDE_SERVE_HTTP_H

#include <stdint.h>

#include "serve_engine.h"
#include "serve_metrics.h"
#include "serve_queue.h"

struct serve_http_args {
    const char *host; /* numeric address or name; "127.0.0.1" by default */
    int port;         /* 0: any free port (see serve_http_port) */
    uint64_t max_body;
    const char *api_key; /* "" or NULL: no authentication */
    const char *model;   /* the name answers carry */
    int max_connections;
    double read_timeout; /* seconds for a request's headers, and then for its body: else 408 */
    int max_queue;
    int64_t default_seed; /* [serve] default_seed: the seed of requests without one; < 0: random */
    struct serve_queue *queue;
    struct serve_metrics *metrics;
    const struct serve_engine_info *info;
};

struct serve_http;

/* Listen and serve (threads of libmicrohttpd). The args' pointers must
 * outlive the server. Returns TIDE_OK, TIDE_E_CONFIG (bad host) or
 * TIDE_E_IO (cannot listen: the address and the reason are logged). */
int serve_http_start(const struct serve_http_args *a, struct serve_http **out);
/* The port listened on. */
int serve_http_port(const struct serve_http *h);
/* Stop accepting connections; requests on open connections get 503, and
 * connections close once their answer (a stream, cancelled or not) is out;
 * idle keep-alive connections are closed. */
void serve_http_quiesce(struct serve_http *h);
/* Wait (at most timeout seconds) until the open connections have closed:
 * after serve_http_quiesce every answer closes its connection, so this lets
 * the last answers and stream events reach their clients. */
void serve_http_drain(struct serve_http *h, double timeout);
/* Close every connection and free. NULL is a no-op. */
void serve_http_stop(struct serve_http *h);

#endif
