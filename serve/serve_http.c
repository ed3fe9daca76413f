/* `tide serve`: routing, authentication, bodies and streams over
 * libmicrohttpd. */
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve_http.h"
#include "tide/log.h"
#include "tide/status.h"

/* Seconds libmicrohttpd lets a connection be silent (its own timeout: it
 * closes without an answer). Requests are bounded by [serve] read_timeout
 * (sh_watchdog); this bounds the rest, such as a client that stops reading
 * its answer. */
#define SH_IDLE_TIMEOUT 120
#define SH_WATCH_MS     100 /* how often the watchdog looks at the connections */

/* Where a connection is, for the read timeout (sh_watchdog). */
enum sh_phase {
    SH_HEADERS,  /* opened; the first request's headers are awaited */
    SH_BODY,     /* the headers are in; the body is awaited */
    SH_BUSY,     /* the request is in: it is being served */
    SH_IDLE,     /* kept alive after an answer; the next request is awaited */
    SH_TIMED_OUT /* the watchdog closed it */
};

/* One open connection (libmicrohttpd's socket context). */
struct sh_conn {
    struct sh_conn *prev, *next;
    int fd;
    enum sh_phase phase; /* under serve_http.mu */
    double deadline;     /* CLOCK_MONOTONIC seconds: the phase must end by then */
    const char *label;   /* the route's label once the headers are in, else "other" */
};

struct serve_http {
    struct serve_http_args a;
    struct MHD_Daemon *d;
    int port;
    atomic_bool closing;
    /* The read timeout: the open connections and the watchdog. */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    struct sh_conn *conns;
    bool stop;
    pthread_t watchdog;
    bool have_watchdog;
    char *timeout_answer; /* the whole 408 answer, status line to body */
};

/* What one request gathers between calls of the access handler. */
struct sh_req {
    const struct sh_route *route;
    char *model; /* GET /v1/models/NAME: NAME */
    bool http11; /* the client speaks HTTP/1.1: it takes interim (1xx) answers */
    char *body;
    size_t len, cap;
    bool too_large;
    size_t discarded;
};

typedef enum MHD_Result (*sh_handler)(struct serve_http *h, struct MHD_Connection *c,
                                      struct sh_req *r);

struct sh_route {
    const char *path;
    const char *method; /* GET routes answer HEAD too */
    const char *label;  /* the endpoint label of tide_http_requests_total */
    bool public;        /* no API key needed */
    sh_handler fn;
};

/* ---- answers ------------------------------------------------------------ */

/* While shutting down, every answer closes its connection, so that the
 * server can wait for the last bytes to leave (serve_http_drain). */
static void sh_closing_header(struct serve_http *h, struct MHD_Response *res)
{
    if (atomic_load(&h->closing))
        MHD_add_response_header(res, MHD_HTTP_HEADER_CONNECTION, "close");
}

static enum MHD_Result sh_send(struct serve_http *h, struct MHD_Connection *c, const char *label,
                               int status, const char *ctype, const char *body, const char *h1,
                               const char *v1)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(
        body ? strlen(body) : 0, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
    if (!res)
        return MHD_NO;
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (h1)
        MHD_add_response_header(res, h1, v1);
    sh_closing_header(h, res);
    const enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, res);
    MHD_destroy_response(res);
    serve_metrics_request(h->a.metrics, label, status);
    if (status >= 500)
        tide_warn("serve: %s answered %d: %.300s", label, status, body ? body : "");
    else if (status >= 400)
        tide_debug("serve: %s answered %d: %.300s", label, status, body ? body : "");
    return rc;
}

static enum MHD_Result sh_json(struct serve_http *h, struct MHD_Connection *c, const char *label,
                               int status, char *body /* freed */)
{
    if (!body)
        return sh_send(h, c, label, 500, "application/json",
                       "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                       "\"param\":null,\"code\":null}}",
                       NULL, NULL);
    const enum MHD_Result rc = sh_send(h, c, label, status, "application/json", body, NULL, NULL);
    free(body);
    return rc;
}

static enum MHD_Result sh_error(struct serve_http *h, struct MHD_Connection *c, const char *label,
                                const struct serve_error *err, const char *h1, const char *v1)
{
    char *body = serve_error_json(err);
    const enum MHD_Result rc =
        body ? sh_send(h, c, label, err->http, "application/json", body, h1, v1) : MHD_NO;
    free(body);
    return rc;
}

/* ---- GET routes --------------------------------------------------------- */

static enum MHD_Result sh_health(struct serve_http *h, struct MHD_Connection *c, struct sh_req *r)
{
    if (atomic_load(&h->closing))
        return sh_send(h, c, "health", 503, "application/json", "{\"status\":\"shutting_down\"}",
                       NULL, NULL);
    return sh_send(h, c, "health", 200, "application/json", "{\"status\":\"ok\"}", NULL, NULL);
}

static enum MHD_Result sh_models(struct serve_http *h, struct MHD_Connection *c, struct sh_req *r)
{
    return sh_json(h, c, "models", 200, serve_models_json(h->a.model, 0, false));
}

static enum MHD_Result sh_metrics(struct serve_http *h, struct MHD_Connection *c, struct sh_req *r)
{
    int queued, running;
    serve_queue_load(h->a.queue, &queued, &running);
    /* Count this scrape before rendering, so that it shows in its own text. */
    serve_metrics_request(h->a.metrics, "metrics", 200);
    char *text =
        serve_metrics_render(h->a.metrics, queued, running, h->a.max_queue, h->a.info, h->a.model);
    if (!text)
        return MHD_NO;
    struct MHD_Response *res =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!res) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    sh_closing_header(h, res);
    const enum MHD_Result rc = MHD_queue_response(c, 200, res);
    MHD_destroy_response(res);
    return rc;
}

static enum MHD_Result sh_tokenizer_info(struct serve_http *h, struct MHD_Connection *c,
                                         struct sh_req *r)
{
    return sh_json(h, c, "tokenizer_info", 200,
                   serve_tokenizer_info_json(h->a.info->eos_text, h->a.info->max_ctx));
}

/* ---- queued routes ------------------------------------------------------ */

struct sh_stream {
    struct serve_http *h;
    struct serve_job *j;
    int fd;
};

static ssize_t sh_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sh_stream *s = cls;
    const ssize_t n = serve_job_read(s->h->a.queue, s->j, s->fd, buf, max);
    if (n > 0)
        return n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void sh_stream_free(void *cls)
{
    struct sh_stream *s = cls;
    serve_job_release(s->h->a.queue, s->j);
    free(s);
}

static int sh_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Queue a job, wait for it (watching the client), and answer: a whole body,
 * or a stream of server-sent events. */
static enum MHD_Result sh_run_job(struct serve_http *h, struct MHD_Connection *c, const char *label,
                                  const struct sh_req *r, struct serve_job *j)
{
    struct serve_error err;
    if (!j) {
        serve_error_set(&err, 500, "server_error", NULL, NULL, "out of memory");
        return sh_error(h, c, label, &err, NULL, NULL);
    }
    int retry = 1;
    const enum serve_submit s = serve_queue_submit(h->a.queue, j, &retry);
    if (s != SERVE_SUBMIT_OK) {
        serve_job_release(h->a.queue, j);
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry);
        if (s == SERVE_SUBMIT_FULL) {
            serve_error_set(&err, 503, "server_error", "queue_full", NULL,
                            "%d requests are waiting already ([serve] max_queue); retry in "
                            "about %d s",
                            h->a.max_queue, retry);
            return sh_error(h, c, label, &err, MHD_HTTP_HEADER_RETRY_AFTER, ra);
        }
        serve_error_set(&err, 503, "server_error", "shutting_down", NULL,
                        "the server is shutting down");
        return sh_error(h, c, label, &err, NULL, NULL);
    }
    const int fd = sh_fd(c);
    const int w = serve_job_wait(h->a.queue, j, fd, r->http11);
    if (w < 0) {
        serve_job_release(h->a.queue, j);
        serve_metrics_request(h->a.metrics, label, 499); /* client closed the request */
        return MHD_NO;
    }
    if (w == 0) {
        int status;
        const char *body;
        serve_job_answer(h->a.queue, j, &status, &body);
        const enum MHD_Result rc =
            body ? sh_send(h, c, label, status, "application/json", body, NULL, NULL) : MHD_NO;
        serve_job_release(h->a.queue, j);
        return rc;
    }
    struct sh_stream *st = malloc(sizeof *st);
    if (!st) {
        serve_job_release(h->a.queue, j);
        return MHD_NO;
    }
    *st = (struct sh_stream){.h = h, .j = j, .fd = fd};
    struct MHD_Response *res = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16384, sh_stream_read, st, sh_stream_free);
    if (!res) {
        sh_stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(res, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(res, "X-Accel-Buffering", "no");
    sh_closing_header(h, res);
    const enum MHD_Result rc = MHD_queue_response(c, 200, res);
    MHD_destroy_response(res);
    serve_metrics_request(h->a.metrics, label, 200);
    return rc;
}

static const struct serve_limits *sh_limits(struct serve_http *h, struct serve_limits *lim)
{
    *lim = (struct serve_limits){.max_ctx = h->a.info->max_ctx,
                                 .vocab = h->a.info->vocab,
                                 .model = h->a.model,
                                 .chat = h->a.info->chat};
    return lim;
}

static enum MHD_Result sh_generate(struct serve_http *h, struct MHD_Connection *c, struct sh_req *r,
                                   enum serve_endpoint ep, const char *label)
{
    struct serve_limits lim;
    struct serve_req req;
    struct serve_error err;
    if (!serve_req_parse(ep, r->body ? r->body : "", r->len, sh_limits(h, &lim), &req, &err))
        return sh_error(h, c, label, &err, NULL, NULL);
    struct serve_job *j = serve_job_generate(&req, h->a.default_seed);
    serve_req_free(&req);
    return sh_run_job(h, c, label, r, j);
}

static enum MHD_Result sh_completions(struct serve_http *h, struct MHD_Connection *c,
                                      struct sh_req *r)
{
    return sh_generate(h, c, r, SERVE_EP_COMPLETIONS, "completions");
}

static enum MHD_Result sh_chat(struct serve_http *h, struct MHD_Connection *c, struct sh_req *r)
{
    return sh_generate(h, c, r, SERVE_EP_CHAT, "chat_completions");
}

static enum MHD_Result sh_tokens(struct serve_http *h, struct MHD_Connection *c, struct sh_req *r,
                                 bool detok)
{
    const char *label = detok ? "detokenize" : "tokenize";
    struct serve_limits lim;
    struct serve_tok_req t;
    struct serve_error err;
    const char *body = r->body ? r->body : "";
    if (detok ? !serve_detokenize_parse(body, r->len, sh_limits(h, &lim), &t, &err)
              : !serve_tokenize_parse(body, r->len, sh_limits(h, &lim), &t, &err))
        return sh_error(h, c, label, &err, NULL, NULL);
    struct serve_job *j = serve_job_tokens(detok, &t);
    serve_tok_req_free(&t);
    return sh_run_job(h, c, label, r, j);
}

static enum MHD_Result sh_tokenize(struct serve_http *h, struct MHD_Connection *c, struct sh_req *r)
{
    return sh_tokens(h, c, r, false);
}

static enum MHD_Result sh_detokenize(struct serve_http *h, struct MHD_Connection *c,
                                     struct sh_req *r)
{
    return sh_tokens(h, c, r, true);
}

static const struct sh_route sh_routes[] = {
    {"/v1/completions", "POST", "completions", false, sh_completions},
    {"/v1/chat/completions", "POST", "chat_completions", false, sh_chat},
    {"/v1/models", "GET", "models", false, sh_models},
    {"/health", "GET", "health", true, sh_health},
    {"/metrics", "GET", "metrics", false, sh_metrics},
    {"/tokenize", "POST", "tokenize", false, sh_tokenize},
    {"/detokenize", "POST", "detokenize", false, sh_detokenize},
    {"/tokenizer_info", "GET", "tokenizer_info", false, sh_tokenizer_info},
};

/* ---- the access handler ------------------------------------------------- */

/* Constant-time comparison of the bearer token with the key. */
static bool sh_authorized(const struct serve_http *h, struct MHD_Connection *c)
{
    const char *key = h->a.api_key;
    if (!key || !*key)
        return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncasecmp(v, "Bearer ", 7))
        return false;
    v += 7;
    while (*v == ' ')
        v++;
    const size_t kl = strlen(key), vl = strlen(v);
    unsigned char diff = kl != vl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < vl ? v[i] : 0);
    return diff == 0;
}

/* The route for url and method; NULL with *err set (404, 405). */
static const struct sh_route *sh_route(const char *url, const char *method, struct serve_error *err,
                                       const char **allow)
{
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    const char *m = get ? "GET" : method;
    const struct sh_route *path_match = NULL;
    for (size_t i = 0; i < sizeof sh_routes / sizeof sh_routes[0]; i++) {
        if (strcmp(url, sh_routes[i].path))
            continue;
        if (!strcmp(sh_routes[i].method, m))
            return &sh_routes[i];
        path_match = &sh_routes[i];
    }
    if (path_match) {
        *allow = !strcmp(path_match->method, "GET") ? "GET, HEAD" : path_match->method;
        serve_error_set(err, 405, "invalid_request_error", "method_not_allowed", NULL,
                        "%s does not take %.16s (use %s)", url, method, path_match->method);
    } else {
        serve_error_set(err, 404, "invalid_request_error", "not_found", NULL,
                        "no route %.16s %.200s (see /v1/completions, /v1/chat/completions, "
                        "/v1/models, /health, /metrics)",
                        method, url);
    }
    return NULL;
}

static enum MHD_Result sh_model_one(struct serve_http *h, struct MHD_Connection *c,
                                    const char *name)
{
    if (strcmp(name, h->a.model)) {
        struct serve_error err;
        serve_error_model(&err, name, h->a.model);
        return sh_error(h, c, "models", &err, NULL, NULL);
    }
    return sh_json(h, c, "models", 200, serve_models_json(h->a.model, 0, true));
}

/* ---- the read timeout -------------------------------------------------- */

static double sh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct sh_conn *sh_conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Move c to phase p; restart: its deadline restarts, and label (when not
 * NULL) names its route. False when the watchdog has closed it: the caller
 * gives up on it (MHD_NO). */
static bool sh_phase(struct serve_http *h, struct MHD_Connection *c, enum sh_phase p, bool restart,
                     const char *label)
{
    struct sh_conn *k = sh_conn_of(c);
    if (!k)
        return true;
    pthread_mutex_lock(&h->mu);
    const bool live = k->phase != SH_TIMED_OUT;
    if (live) {
        k->phase = p;
        if (restart)
            k->deadline = sh_now() + h->a.read_timeout;
        if (label)
            k->label = label;
    }
    pthread_mutex_unlock(&h->mu);
    return live;
}

static void sh_notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                                 enum MHD_ConnectionNotificationCode toe)
{
    struct serve_http *h = cls;
    struct sh_conn *k = *socket_context;
    pthread_mutex_lock(&h->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED && (k = calloc(1, sizeof *k))) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *k = (struct sh_conn){.next = h->conns,
                              .fd = ci ? ci->connect_fd : -1,
                              .phase = SH_HEADERS,
                              .deadline = sh_now() + h->a.read_timeout,
                              .label = "other"};
        if (h->conns)
            h->conns->prev = k;
        h->conns = k;
        *socket_context = k;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && k) {
        /* Before libmicrohttpd closes the socket: the watchdog, which
         * holds mu while it uses fd, never sees a number reused. */
        if (k->prev)
            k->prev->next = k->next;
        else
            h->conns = k->next;
        if (k->next)
            k->next->prev = k->prev;
        free(k);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&h->mu);
}

/* Answer 408 on the connections that did not send their request's headers,
 * or then its body, within read_timeout, and close them; close idle
 * keep-alive ones without an answer (a client would take it for the answer
 * to the request it sends next). Closing is a shutdown of the socket:
 * libmicrohttpd's thread sees the end, closes the connection and frees its
 * slot. */
static void *sh_watchdog(void *arg)
{
    struct serve_http *h = arg;
    const size_t n = strlen(h->timeout_answer);
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const long ns = ts.tv_nsec + SH_WATCH_MS * 1000000L;
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&h->wake, &h->mu, &ts);
        const double now = sh_now();
        /* Shutting down: an idle connection is closed at once (its answer,
         * a stream's last event too, is out), so that the drain need not
         * wait for its client to leave. */
        const bool closing = atomic_load(&h->closing);
        for (struct sh_conn *k = h->conns; k && !h->stop; k = k->next) {
            if (k->fd < 0 || k->phase == SH_BUSY || k->phase == SH_TIMED_OUT ||
                (now < k->deadline && !(closing && k->phase == SH_IDLE)))
                continue;
            if (k->phase != SH_IDLE) {
                if (send(k->fd, h->timeout_answer, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                    /* the client is gone or not reading: closing is all */
                }
                serve_metrics_request(h->a.metrics, k->label, 408);
                tide_debug("serve: a request was not received within %g s: 408", h->a.read_timeout);
            }
            shutdown(k->fd, SHUT_RDWR);
            k->phase = SH_TIMED_OUT;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* The 408 answer, written by the watchdog itself (libmicrohttpd cannot
 * answer a request whose body has not arrived). */
static char *sh_timeout_answer(double read_timeout)
{
    struct serve_error err;
    serve_error_set(&err, 408, "invalid_request_error", "request_timeout", NULL,
                    "the request was not received in time: its headers, and then its body, must "
                    "arrive within %g s each ([serve] read_timeout)",
                    read_timeout);
    char *body = serve_error_json(&err);
    if (!body)
        return NULL;
    const char *fmt = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s";
    const int n = snprintf(NULL, 0, fmt, strlen(body), body);
    char *out = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (out)
        snprintf(out, (size_t)n + 1, fmt, strlen(body), body);
    free(body);
    return out;
}

static enum MHD_Result sh_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls)
{
    struct serve_http *h = cls;
    struct sh_req *r = *con_cls;
    struct serve_error err;
    if (!sh_phase(h, c, SH_BUSY, false, NULL))
        return MHD_NO; /* answered 408 meanwhile */
    if (!r) {
        /* The headers are in: route, authenticate, check the size. */
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        *con_cls = r;
        r->http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
        const char *allow = NULL;
        const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        const char *prefix = "/v1/models/";
        if (get && !strncmp(url, prefix, strlen(prefix)) && url[strlen(prefix)]) {
            if (!sh_authorized(h, c))
                goto unauthorized;
            /* Answered once the request is in (below), as every GET is. */
            return (r->model = strdup(url + strlen(prefix))) ? MHD_YES : MHD_NO;
        }
        r->route = sh_route(url, method, &err, &allow);
        if (!r->route)
            return sh_error(h, c, "other", &err, allow ? MHD_HTTP_HEADER_ALLOW : NULL, allow);
        if (!r->route->public && !sh_authorized(h, c))
            goto unauthorized;
        if (atomic_load(&h->closing) && r->route->fn != sh_health && r->route->fn != sh_metrics) {
            serve_error_set(&err, 503, "server_error", "shutting_down", NULL,
                            "the server is shutting down");
            return sh_error(h, c, r->route->label, &err, NULL, NULL);
        }
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > h->a.max_body) {
            serve_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                            "the request body has %.20s bytes; at most %llu are taken ([serve] "
                            "max_body)",
                            cl, (unsigned long long)h->a.max_body);
            return sh_error(h, c, r->route->label, &err, NULL, NULL);
        }
        /* Every answer waits for the request's end, a GET's too: an answer
         * queued before it makes libmicrohttpd close the connection. */
        sh_phase(h, c, SH_BODY, true, r->route->label);
        return MHD_YES; /* the body, if any, follows */
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (r->too_large || r->len + n > h->a.max_body) {
            /* A chunked body over the limit: drop it, answer at its end;
             * give up on a client that keeps sending far past it. */
            r->too_large = true;
            r->discarded += n;
            sh_phase(h, c, SH_BODY, false, NULL);
            return r->discarded > 4 * h->a.max_body + 65536 ? MHD_NO : MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 4096;
            while (cap < r->len + n + 1)
                cap *= 2;
            char *p = realloc(r->body, cap);
            if (!p)
                return MHD_NO;
            r->body = p;
            r->cap = cap;
        }
        memcpy(r->body + r->len, upload, n);
        r->len += n;
        r->body[r->len] = 0;
        sh_phase(h, c, SH_BODY, false, NULL);
        return MHD_YES;
    }
    if (r->model)
        return sh_model_one(h, c, r->model);
    if (r->too_large) {
        serve_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                        "the request body is over %llu bytes ([serve] max_body)",
                        (unsigned long long)h->a.max_body);
        return sh_error(h, c, r->route->label, &err, NULL, NULL);
    }
    return r->route->fn(h, c, r);
unauthorized:
    serve_error_set(&err, 401, "authentication_error", "invalid_api_key", NULL,
                    "a valid API key is required: send \"Authorization: Bearer KEY\" ([serve] "
                    "api_key or TIDE_API_KEY)");
    return sh_error(h, c, "unauthorized", &err, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
}

static void sh_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    sh_phase(cls, c, SH_IDLE, true, NULL);
    struct sh_req *r = *con_cls;
    if (r) {
        free(r->body);
        free(r->model);
        free(r);
        *con_cls = NULL;
    }
}

static void sh_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0;
    tide_debug("serve: libmicrohttpd: %s", buf);
}

int serve_http_start(const struct serve_http_args *a, struct serve_http **out)
{
    *out = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", a->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    const int gai = getaddrinfo(a->host, port, &hints, &ai);
    if (gai) {
        tide_error("[serve] host = %s: cannot resolve it (%s)", a->host, gai_strerror(gai));
        return TIDE_E_CONFIG;
    }
    struct serve_http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        return TIDE_E_NOMEM;
    }
    h->a = *a;
    atomic_init(&h->closing, false);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->wake, NULL);
    if (!(h->timeout_answer = sh_timeout_answer(a->read_timeout))) {
        freeaddrinfo(ai);
        serve_http_stop(h);
        return TIDE_E_NOMEM;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->d = MHD_start_daemon(
        flags, (uint16_t)a->port, NULL, NULL, sh_access, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)a->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)fmax(SH_IDLE_TIMEOUT, ceil(a->read_timeout) + 1), MHD_OPTION_NOTIFY_COMPLETED,
        sh_completed, h, MHD_OPTION_NOTIFY_CONNECTION, sh_notify_connection, h,
        MHD_OPTION_EXTERNAL_LOGGER, sh_log, h, MHD_OPTION_END);
    char where[300];
    char addr[NI_MAXHOST] = "?";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
    snprintf(where, sizeof where, ai->ai_family == AF_INET6 ? "[%s]:%d" : "%s:%d", addr, a->port);
    freeaddrinfo(ai);
    if (!h->d) {
        tide_error("serve: cannot listen on %s (is the port in use? see [serve] host and port)",
                   where);
        serve_http_stop(h);
        return TIDE_E_IO;
    }
    if (pthread_create(&h->watchdog, NULL, sh_watchdog, h) != 0) {
        tide_error("serve: cannot start the thread of [serve] read_timeout");
        serve_http_stop(h);
        return TIDE_E_NOMEM;
    }
    h->have_watchdog = true;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di && di->port ? di->port : a->port;
    *out = h;
    return TIDE_OK;
}

int serve_http_port(const struct serve_http *h)
{
    return h->port;
}

void serve_http_quiesce(struct serve_http *h)
{
    atomic_store(&h->closing, true);
    const MHD_socket s = MHD_quiesce_daemon(h->d);
    if (s != MHD_INVALID_SOCKET)
        close(s);
}

void serve_http_drain(struct serve_http *h, double timeout)
{
    for (double waited = 0; waited < timeout; waited += 0.02) {
        const union MHD_DaemonInfo *di =
            MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!di || di->num_connections == 0)
            return;
        const struct timespec tick = {0, 20 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
}

void serve_http_stop(struct serve_http *h)
{
    if (!h)
        return;
    if (h->have_watchdog) {
        pthread_mutex_lock(&h->mu);
        h->stop = true;
        pthread_cond_signal(&h->wake);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->watchdog, NULL);
    }
    if (h->d)
        MHD_stop_daemon(h->d);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->mu);
    free(h->timeout_answer);
    free(h);
}
