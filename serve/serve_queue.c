/* `tide serve`: the queue, the worker and the generation jobs. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "serve_queue.h"
#include "tide/log.h"
#include "tide/status.h"

enum job_kind { JOB_GENERATE, JOB_TOKENIZE, JOB_DETOKENIZE };
enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };
enum job_cancel { JOB_LIVE = 0, JOB_GONE = 1, JOB_SHUTDOWN = 2 };

#define SQ_POLL_MS 50 /* how often a waiting connection looks at its socket */

struct serve_job {
    struct serve_job *next;
    enum job_kind kind;
    struct serve_req req;
    struct serve_tok_req tok;
    /* under q->mu */
    int refs; /* the connection's and the queue's */
    enum job_state state;
    bool started; /* a stream's headers may go out */
    pthread_cond_t cv;
    atomic_int cancel; /* enum job_cancel */
    double t_submit;
    char id[48];
    int64_t created;
    /* the answer, when not a stream (or when a stream fails before it starts) */
    int status;
    char *body;
    /* a stream's events not yet read */
    char *sse;
    size_t len, off, cap;
    /* A generation being decoded (the worker's; sq_job_begin): one batch
     * sequence per prompt ("choice"). */
    struct sq_gen *units; /* [n_prompts] */
    struct serve_choice *choices;
    char **texts;
    struct serve_usage total;
    struct serve_error err; /* the first failure */
    bool failed;
    int admitted, ended; /* choices handed to the batch, and finished */
    double t_start;
    struct serve_job *next_running;
    int64_t work; /* its planned work ([serve] schedule = shortest); -1: not yet asked */
};

struct serve_queue {
    pthread_mutex_t mu;
    pthread_cond_t work; /* the worker waits for jobs */
    pthread_cond_t idle; /* shutdown waits for the running job */
    struct serve_job *head, *tail;
    int n_waiting, max_queue;
    struct serve_job *running; /* jobs being decoded (a list through next_running) */
    int n_running;
    struct serve_job *admitting; /* the running job whose choices are not all admitted */
    int max_batch;
    bool shortest; /* [serve] schedule = shortest */
    int n_seq;     /* choices admitted and not ended: the batch's sequences */
    bool closed, stop;
    pthread_t worker;
    bool have_worker;
    struct serve_engine *e;
    struct serve_metrics *m;
    const char *model;
    double avg_seconds; /* moving average of a job's time, for Retry-After */
};

static double sq_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- jobs --------------------------------------------------------------- */

/* n random bytes: the kernel's, else (getrandom failed) a process-wide
 * counter mixed with the clock, so that no two calls repeat. */
static void sq_random(unsigned char *out, size_t n)
{
    if (getrandom(out, n, 0) == (ssize_t)n)
        return;
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
                 atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0) { /* splitmix64 */
            x += 0x9e3779b97f4a7c15u;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
            x ^= z ^ (z >> 31);
        }
        out[i] = (unsigned char)(x >> (8 * (i % 8)));
    }
}

static struct serve_job *sq_job_new(enum job_kind kind)
{
    struct serve_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->kind = kind;
    j->refs = 1;
    j->work = -1;
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->cancel, JOB_LIVE);
    unsigned char r[12];
    sq_random(r, sizeof r);
    int k = snprintf(j->id, sizeof j->id, "%s", "cmpl-");
    for (size_t i = 0; i < sizeof r; i++)
        k += snprintf(j->id + k, sizeof j->id - (size_t)k, "%02x", r[i]);
    j->created = (int64_t)time(NULL);
    return j;
}

struct serve_job *serve_job_generate(struct serve_req *req, int64_t default_seed)
{
    struct serve_job *j = sq_job_new(JOB_GENERATE);
    if (!j)
        return NULL;
    j->req = *req;
    memset(req, 0, sizeof *req);
    if (j->req.seed < 0 && default_seed >= 0) {
        j->req.seed = default_seed;
    } else if (j->req.seed < 0) {
        /* Below 2^53, so that every JSON client reads it back exactly. */
        uint64_t x;
        sq_random((unsigned char *)&x, sizeof x);
        j->req.seed = (int64_t)(x & ((UINT64_C(1) << 53) - 1));
    }
    if (j->req.ep == SERVE_EP_CHAT) { /* "chatcmpl-..." */
        memmove(j->id + 4, j->id, strlen(j->id) + 1);
        memcpy(j->id, "chat", 4);
    }
    return j;
}

struct serve_job *serve_job_tokens(bool detokenize, struct serve_tok_req *t)
{
    struct serve_job *j = sq_job_new(detokenize ? JOB_DETOKENIZE : JOB_TOKENIZE);
    if (!j)
        return NULL;
    j->tok = *t;
    memset(t, 0, sizeof *t);
    return j;
}

static void sq_job_free(struct serve_job *j)
{
    for (int i = 0; j->texts && i < j->req.n_prompts; i++)
        free(j->texts[i]);
    free(j->texts);
    free(j->choices);
    free(j->units);
    serve_req_free(&j->req);
    serve_tok_req_free(&j->tok);
    pthread_cond_destroy(&j->cv);
    free(j->body);
    free(j->sse);
    free(j);
}

/* Under q->mu. */
static void sq_release_locked(struct serve_job *j)
{
    if (--j->refs == 0)
        sq_job_free(j);
}

void serve_job_release(struct serve_queue *q, struct serve_job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&q->mu);
    /* The connection is done: if the job is not, nobody will read it. */
    if (j->state != JOB_DONE)
        atomic_store(&j->cancel, JOB_GONE);
    sq_release_locked(j);
    pthread_mutex_unlock(&q->mu);
}

/* Set the answer (takes body). Under q->mu or from the worker before DONE. */
static void sq_answer(struct serve_job *j, int status, char *body)
{
    free(j->body);
    j->status = status;
    j->body = body;
}

static void sq_answer_error(struct serve_job *j, const struct serve_error *err)
{
    sq_answer(j, err->http, serve_error_json(err));
}

/* Append a server-sent event (takes ev). */
static void sq_emit(struct serve_queue *q, struct serve_job *j, char *ev)
{
    if (!ev)
        return;
    const size_t n = strlen(ev);
    pthread_mutex_lock(&q->mu);
    if (j->off == j->len)
        j->off = j->len = 0;
    if (j->len + n > j->cap) {
        size_t cap = j->cap ? j->cap : 4096;
        while (cap < j->len + n)
            cap *= 2;
        char *p = realloc(j->sse, cap);
        if (p) {
            j->sse = p;
            j->cap = cap;
        }
    }
    if (j->len + n <= j->cap) {
        memcpy(j->sse + j->len, ev, n);
        j->len += n;
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&q->mu);
    free(ev);
}

static void sq_start(struct serve_queue *q, struct serve_job *j)
{
    pthread_mutex_lock(&q->mu);
    j->started = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&q->mu);
}

/* ---- the connection's side ---------------------------------------------- */

/* Is the client gone? A client that closed its sending side only (a
 * half-close: shutdown(SHUT_WR) after its request, as HTTP/1.0 tools do)
 * still reads its answer, and TCP tells it apart from a closed socket only
 * once something is written: a closed socket answers with a reset, which
 * poll reports as POLLHUP or POLLERR. So an end of input alone is not a
 * disconnect. With *probe (the client speaks HTTP/1.1, which must skip
 * interim answers) one "100 Continue" is written at the end of input to
 * find out; *probe is then cleared. A pipelined next request is not an end
 * of input. */
static bool sq_peer_gone(int fd, bool *probe)
{
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL))
        return true;
    char c;
    const ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0)
        return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (r > 0 || !probe || !*probe)
        return false;
    *probe = false;
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return send(fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
           errno != EWOULDBLOCK && errno != EINTR;
}

static void sq_timedwait(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const long ns = ts.tv_nsec + (long)(seconds * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

int serve_job_wait(struct serve_queue *q, struct serve_job *j, int fd, bool interim)
{
    bool probe = interim;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        if (j->started || j->state == JOB_DONE) {
            const int r = j->started ? 1 : 0;
            pthread_mutex_unlock(&q->mu);
            return r;
        }
        sq_timedwait(&j->cv, &q->mu, SQ_POLL_MS / 1000.0);
        if (!j->started && j->state != JOB_DONE && sq_peer_gone(fd, &probe)) {
            atomic_store(&j->cancel, JOB_GONE);
            pthread_mutex_unlock(&q->mu);
            return -1;
        }
    }
}

void serve_job_answer(struct serve_queue *q, struct serve_job *j, int *status, const char **body)
{
    pthread_mutex_lock(&q->mu);
    *status = j->status ? j->status : 500;
    *body = j->body;
    pthread_mutex_unlock(&q->mu);
}

ssize_t serve_job_read(struct serve_queue *q, struct serve_job *j, int fd, char *buf, size_t max)
{
    pthread_mutex_lock(&q->mu);
    for (;;) {
        if (j->off < j->len) {
            size_t n = j->len - j->off < max ? j->len - j->off : max;
            memcpy(buf, j->sse + j->off, n);
            j->off += n;
            pthread_mutex_unlock(&q->mu);
            return (ssize_t)n;
        }
        if (j->state == JOB_DONE) {
            pthread_mutex_unlock(&q->mu);
            return 0;
        }
        sq_timedwait(&j->cv, &q->mu, SQ_POLL_MS / 1000.0);
        if (j->off == j->len && j->state != JOB_DONE && sq_peer_gone(fd, NULL)) {
            atomic_store(&j->cancel, JOB_GONE);
            pthread_mutex_unlock(&q->mu);
            return -1;
        }
    }
}

/* Waiting jobs that a free batch slot takes at the next forward: the
 * generations, in queue order, whose prompts fit in the slots the running
 * sequences leave free. They wait for one forward at most, not for a slot,
 * so they do not count against max_queue. Under q->mu. */
static int sq_taken_soon(const struct serve_queue *q)
{
    int free_slots = q->max_batch - q->n_seq;
    if (q->admitting)
        free_slots -= q->admitting->req.n_prompts - q->admitting->admitted;
    int n = 0;
    for (const struct serve_job *j = q->head; j && free_slots > 0; j = j->next) {
        if (j->kind != JOB_GENERATE)
            continue;
        if (j->req.n_prompts > free_slots)
            break;
        free_slots -= j->req.n_prompts;
        n++;
    }
    return n;
}

enum serve_submit serve_queue_submit(struct serve_queue *q, struct serve_job *j, int *retry_after)
{
    pthread_mutex_lock(&q->mu);
    enum serve_submit r = SERVE_SUBMIT_OK;
    if (q->closed) {
        r = SERVE_SUBMIT_CLOSED;
    } else if (q->n_waiting - sq_taken_soon(q) >= q->max_queue) {
        r = SERVE_SUBMIT_FULL;
        const double wait = q->avg_seconds * (q->n_waiting + 1);
        *retry_after = wait < 1 ? 1 : wait > 3600 ? 3600 : (int)(wait + 0.999);
    } else {
        j->refs++;
        j->state = JOB_QUEUED;
        j->t_submit = sq_now();
        if (q->tail)
            q->tail->next = j;
        else
            q->head = j;
        q->tail = j;
        q->n_waiting++;
        pthread_cond_signal(&q->work);
    }
    pthread_mutex_unlock(&q->mu);
    return r;
}

void serve_queue_load(struct serve_queue *q, int *queued, int *running)
{
    pthread_mutex_lock(&q->mu);
    *queued = q->n_waiting;
    *running = q->n_running;
    pthread_mutex_unlock(&q->mu);
}

/* ---- the worker's side -------------------------------------------------- */

/* One choice (one prompt) of a generation job. */
struct sq_gen {
    struct serve_gen sg; /* first: a serve_gen's address is its unit's */
    struct serve_queue *q;
    struct serve_job *j;
    int index;
    size_t emitted;  /* bytes of the choice's text already streamed */
    bool role_sent;  /* chat streams name the role in the first chunk */
    bool stop_found; /* a stop sequence ended the text */
};

/* The text of a choice so far: valid UTF-8, cut before the first stop
 * sequence (*found). malloc'd; NULL when out of memory. */
static char *sq_text(const struct serve_req *r, const char *raw, size_t len, bool final,
                     size_t *out_len, bool *found)
{
    char *t = serve_utf8_clean(raw ? raw : "", raw ? len : 0, final, out_len);
    if (!t)
        return NULL;
    const int64_t p = serve_stop_find(t, *out_len, r->stop, r->n_stop);
    *found = p >= 0;
    if (p >= 0) {
        *out_len = (size_t)p;
        t[p] = 0;
    }
    return t;
}

/* Should the choice stop: its client went away, the server is shutting
 * down, or another choice of its job failed. */
static bool sq_stop(const struct sq_gen *g)
{
    return atomic_load(&g->j->cancel) != JOB_LIVE || g->j->failed;
}

static int sq_on_start(void *user, int64_t prompt_tokens)
{
    struct sq_gen *g = user;
    if (g->j->req.stream && !g->index)
        sq_start(g->q, g->j);
    return sq_stop(g);
}

static int sq_on_step(void *user, double seconds)
{
    struct sq_gen *g = user;
    serve_metrics_step(g->q->m, seconds);
    return sq_stop(g);
}

static void sq_stream_delta(struct sq_gen *g, const char *text, size_t upto, const char *finish,
                            int block, int64_t steps)
{
    const struct serve_job *j = g->j;
    if (upto < g->emitted)
        upto = g->emitted;
    sq_emit(g->q, g->j,
            serve_chunk_sse(j->req.ep, j->id, j->created, g->q->model, j->req.seed, g->index,
                            text + g->emitted, upto - g->emitted,
                            j->req.ep == SERVE_EP_CHAT && !g->role_sent, finish, block, steps,
                            NULL));
    g->role_sent = true;
    g->emitted = upto;
}

static int sq_on_block(void *user, const struct serve_block *b)
{
    struct sq_gen *g = user;
    const struct serve_req *r = &g->j->req;
    const bool last = b->eos || b->full;
    if (!r->stream && !r->n_stop)
        return sq_stop(g);
    size_t len;
    bool found;
    char *t = sq_text(r, b->text, b->text_len, last, &len, &found);
    if (!t)
        return 1;
    g->stop_found = found;
    if (r->stream) {
        const size_t upto =
            found || last ? len : len - serve_stop_holdback(t, len, r->stop, r->n_stop);
        sq_stream_delta(g, t, upto, NULL, b->block, b->steps);
    }
    free(t);
    return found || sq_stop(g);
}

/* Add a result whose answer has completion_tokens tokens. */
static void sq_usage_add(struct serve_usage *u, const struct serve_result *res,
                         int64_t completion_tokens)
{
    u->prompt_tokens += res->prompt_tokens;
    u->completion_tokens += completion_tokens;
    u->steps += res->steps;
    u->forwards += res->forwards;
    u->blocks += res->blocks;
    u->seconds += res->seconds;
    u->prefill_seconds += res->prefill_seconds;
    u->hit_rows += res->offload.hit_rows;
    u->miss_rows += res->offload.miss_rows;
    u->promotions += res->offload.promotions;
    u->evictions += res->offload.evictions;
    u->weight_bytes += res->offload.weight_bytes;
    u->act_bytes += res->offload.act_bytes;
    const uint64_t rows = u->hit_rows + u->miss_rows;
    u->hit_rate = rows ? (double)u->hit_rows / (double)rows : 1.0;
}

/* The generation of prompt i of r (no callbacks). */
static struct serve_gen sq_gen_of(const struct serve_req *r, int i)
{
    return (struct serve_gen){
        .prompt = &r->prompts[i],
        .chat = r->chat,
        .max_tokens = r->max_tokens,
        .block_length = r->block_length,
        .steps = r->steps,
        .top_k = r->top_k,
        .threshold = r->threshold,
        .temperature = r->temperature,
        .top_p = r->top_p,
        .seed = r->seed,
    };
}

/* A job starts decoding: its choices' units, answer arrays, counters. */
static int sq_job_begin(struct serve_queue *q, struct serve_job *j, double t_start)
{
    struct serve_req *r = &j->req;
    j->t_start = t_start;
    j->total = (struct serve_usage){.queue_seconds = t_start - j->t_submit};
    j->units = calloc((size_t)r->n_prompts, sizeof *j->units);
    j->choices = calloc((size_t)r->n_prompts, sizeof *j->choices);
    j->texts = calloc((size_t)r->n_prompts, sizeof *j->texts);
    if (!j->units || !j->choices || !j->texts)
        return TIDE_E_NOMEM;
    for (int i = 0; i < r->n_prompts; i++) {
        struct sq_gen *g = &j->units[i];
        *g = (struct sq_gen){.q = q, .j = j, .index = i};
        g->sg = sq_gen_of(r, i);
        g->sg.user = g;
        g->sg.on_start = sq_on_start;
        g->sg.on_step = sq_on_step;
        g->sg.on_block = sq_on_block;
    }
    return TIDE_OK;
}

/* The job's first failure is its answer. */
static void sq_job_fail(struct serve_job *j, const struct serve_error *err)
{
    if (!j->failed && err)
        j->err = *err;
    j->failed = true;
}

/* Every choice ended: the answer (or the stream's end), the counters, and
 * the job leaves the running list. */
static void sq_job_finish(struct serve_queue *q, struct serve_job *j)
{
    struct serve_req *r = &j->req;
    struct serve_usage total = j->total;
    struct serve_choice *choices = j->choices;
    struct serve_error err = j->err;
    bool failed = j->failed;
    const int cancel = atomic_load(&j->cancel);
    if (cancel != JOB_LIVE) {
        serve_metrics_cancel(q->m, cancel == JOB_GONE ? "disconnect" : "shutdown");
        serve_error_set(
            &err, 503, "server_error", "cancelled", NULL, "the request was cancelled: %s",
            cancel == JOB_GONE ? "the client went away" : "the server is shutting down");
        failed = true;
    }
    pthread_mutex_lock(&q->mu);
    const bool started = j->started;
    pthread_mutex_unlock(&q->mu);
    if (failed && started) {
        /* Mid-stream: an error event ends it (the OpenAI clients raise it). */
        char *js = serve_error_json(&err);
        char *ev = js ? malloc(strlen(js) + 16) : NULL;
        if (ev)
            sprintf(ev, "data: %s\n\n", js);
        free(js);
        sq_emit(q, j, ev);
    } else if (failed) {
        sq_answer_error(j, &err);
    } else if (r->stream) {
        if (r->include_usage)
            sq_emit(q, j,
                    serve_chunk_sse(r->ep, j->id, j->created, q->model, r->seed, 0, "", 0, false,
                                    NULL, -1, 0, &total));
        sq_emit(q, j, strdup("data: [DONE]\n\n"));
    } else {
        sq_answer(j, 200,
                  serve_response_json(r->ep, j->id, j->created, q->model, r->seed, choices,
                                      r->n_prompts, &total));
    }
    struct serve_offload layers[256];
    const int n = serve_engine_layer_stats(q->e, layers, 256);
    serve_metrics_layers(q->m, layers, n < 256 ? n : 256);
    const double dt = sq_now() - j->t_start;
    pthread_mutex_lock(&q->mu);
    q->avg_seconds = q->avg_seconds ? 0.8 * q->avg_seconds + 0.2 * dt : dt;
    struct serve_job **p = &q->running;
    while (*p && *p != j)
        p = &(*p)->next_running;
    if (*p)
        *p = j->next_running;
    q->n_running--;
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_cond_broadcast(&q->idle);
    sq_release_locked(j);
    pthread_mutex_unlock(&q->mu);
}

/* Choice u ended with rc (res: its result, else err). */
static void sq_choice_end(struct serve_queue *q, struct sq_gen *u, int rc, struct serve_result *res,
                          const struct serve_error *err)
{
    struct serve_job *j = u->j;
    struct serve_req *r = &j->req;
    const int i = u->index;
    if (rc != TIDE_OK) {
        sq_job_fail(j, err);
    } else if (atomic_load(&j->cancel) != JOB_LIVE || j->failed) {
        j->failed = true; /* the answer says why (sq_job_finish) */
    } else {
        size_t len;
        bool found;
        char *t = sq_text(r, res->text, res->text_len, true, &len, &found);
        /* A stop sequence cut the text: count the tokens of what is left. */
        int64_t n_tokens = res->n_ids;
        if (!t || (found && serve_engine_count_tokens(q->e, res->ids, res->n_ids, len, &n_tokens) !=
                                TIDE_OK)) {
            free(t);
            struct serve_error e = {0};
            serve_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
            sq_job_fail(j, &e);
        } else {
            const char *finish = found || res->eos ? "stop" : "length";
            struct serve_usage one = {.queue_seconds = i ? 0 : j->total.queue_seconds};
            sq_usage_add(&one, res, n_tokens);
            serve_metrics_generation(q->m, &one);
            sq_usage_add(&j->total, res, n_tokens);
            if (r->stream)
                sq_stream_delta(u, t, len, finish, -1, 0);
            j->texts[i] = t;
            j->choices[i] = (struct serve_choice){.text = t, .len = len, .finish_reason = finish};
        }
    }
    if (res)
        serve_result_free(res);
    if (++j->ended == r->n_prompts)
        sq_job_finish(q, j);
}

static void sq_run_tokens(struct serve_queue *q, struct serve_job *j)
{
    struct serve_error err = {0};
    const struct serve_prompt *p = &j->tok.p;
    if (j->kind == JOB_TOKENIZE) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (serve_engine_tokenize(q->e, p->text, p->len, &ids, &n, &err) == TIDE_OK)
            sq_answer(j, 200, serve_tokens_json(ids, n, serve_engine_info(q->e)->max_ctx));
        else
            sq_answer_error(j, &err);
        free(ids);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (serve_engine_detokenize(q->e, p->ids, p->n_ids, &text, &len, &err) == TIDE_OK)
            sq_answer(j, 200, serve_detokens_json(text, len));
        else
            sq_answer_error(j, &err);
        free(text);
    }
}

/* ---- the batch's feed (serve_engine_run_batch) --------------------------- */

/* Answer every tokenizer job waiting: they never wait behind generations.
 * Under q->mu (released while one runs). */
static void sq_tokens_locked(struct serve_queue *q)
{
    for (;;) {
        struct serve_job *j = q->head, *prev = NULL;
        while (j && j->kind == JOB_GENERATE) {
            prev = j;
            j = j->next;
        }
        if (!j)
            return;
        if (prev)
            prev->next = j->next;
        else
            q->head = j->next;
        if (q->tail == j)
            q->tail = prev;
        j->next = NULL;
        q->n_waiting--;
        const int cancel = atomic_load(&j->cancel);
        if (cancel == JOB_LIVE) {
            j->state = JOB_RUNNING;
            pthread_mutex_unlock(&q->mu);
            sq_run_tokens(q, j);
            pthread_mutex_lock(&q->mu);
        } else {
            serve_metrics_cancel(q->m, cancel == JOB_GONE ? "disconnect" : "shutdown");
        }
        j->state = JOB_DONE;
        pthread_cond_broadcast(&j->cv);
        sq_release_locked(j);
    }
}

static void sq_between(void *user)
{
    struct serve_queue *q = user;
    pthread_mutex_lock(&q->mu);
    sq_tokens_locked(q);
    pthread_mutex_unlock(&q->mu);
}

/* A waiting generation's planned work: the sum of its prompts' (the
 * decoder's plans). A request that cannot be planned fails at once when it
 * runs, so it counts as no work. Under q->mu (the engine call is short: it
 * tokenizes and plans, nothing runs). */
static int64_t sq_work_locked(struct serve_queue *q, struct serve_job *j)
{
    if (j->work >= 0)
        return j->work;
    int64_t sum = 0;
    for (int i = 0; i < j->req.n_prompts; i++) {
        const struct serve_gen g = sq_gen_of(&j->req, i);
        int64_t w = 0;
        serve_engine_work(q->e, &g, &w);
        sum += w;
    }
    return j->work = sum;
}

/* Take the next waiting generation out of the queue (sq_tokens_locked took
 * the others): the first, or with [serve] schedule = shortest the one with
 * the least planned work (the first of those on ties). Under q->mu. */
static struct serve_job *sq_pick_locked(struct serve_queue *q)
{
    struct serve_job *best = q->head, *best_prev = NULL;
    if (q->shortest) {
        int64_t least = best ? sq_work_locked(q, best) : 0;
        for (struct serve_job *prev = q->head, *j = best ? best->next : NULL; j;
             prev = j, j = j->next) {
            const int64_t w = sq_work_locked(q, j);
            if (w < least) {
                least = w;
                best = j;
                best_prev = prev;
            }
        }
    }
    if (!best)
        return NULL;
    if (best_prev)
        best_prev->next = best->next;
    else
        q->head = best->next;
    if (q->tail == best)
        q->tail = best_prev;
    best->next = NULL;
    q->n_waiting--;
    return best;
}

/* The next choice to decode: the rest of the job being admitted, else the
 * next waiting generation (sq_pick_locked). */
static const struct serve_gen *sq_next(void *user, bool idle)
{
    struct serve_queue *q = user;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        sq_tokens_locked(q);
        struct serve_job *j = q->admitting;
        if (j) {
            const int n = j->req.n_prompts;
            if (atomic_load(&j->cancel) != JOB_LIVE || j->failed) {
                /* Its other choices are not started. */
                q->admitting = NULL;
                const int left = n - j->admitted;
                j->admitted = n;
                j->ended += left;
                if (left && j->ended == n) {
                    pthread_mutex_unlock(&q->mu);
                    sq_job_finish(q, j);
                    pthread_mutex_lock(&q->mu);
                }
                continue;
            }
            struct sq_gen *u = &j->units[j->admitted++];
            if (j->admitted == n)
                q->admitting = NULL;
            serve_metrics_sequences(q->m, ++q->n_seq);
            pthread_mutex_unlock(&q->mu);
            return &u->sg;
        }
        if ((j = sq_pick_locked(q))) {
            const int cancel = atomic_load(&j->cancel);
            if (cancel != JOB_LIVE) {
                serve_metrics_cancel(q->m, cancel == JOB_GONE ? "disconnect" : "shutdown");
                j->state = JOB_DONE;
                pthread_cond_broadcast(&j->cv);
                sq_release_locked(j);
                continue;
            }
            j->state = JOB_RUNNING;
            j->next_running = q->running;
            q->running = j;
            q->n_running++;
            if (sq_job_begin(q, j, sq_now()) != TIDE_OK) {
                struct serve_error e = {0};
                serve_error_set(&e, 500, "server_error", NULL, NULL, "out of memory");
                sq_job_fail(j, &e);
                j->admitted = j->ended = j->req.n_prompts;
                pthread_mutex_unlock(&q->mu);
                sq_job_finish(q, j);
                pthread_mutex_lock(&q->mu);
                continue;
            }
            q->admitting = j;
            continue;
        }
        if (!idle || q->stop) {
            pthread_mutex_unlock(&q->mu);
            return NULL;
        }
        pthread_cond_wait(&q->work, &q->mu);
    }
}

static void sq_done(void *user, const struct serve_gen *g, int rc, struct serve_result *res,
                    const struct serve_error *err)
{
    struct serve_queue *q = user;
    pthread_mutex_lock(&q->mu);
    serve_metrics_sequences(q->m, --q->n_seq);
    pthread_mutex_unlock(&q->mu);
    sq_choice_end(q, (struct sq_gen *)(void *)g, rc, res, err);
}

static void *sq_worker(void *arg)
{
    struct serve_queue *q = arg;
    const struct serve_batch_feed f = {
        .user = q, .next = sq_next, .done = sq_done, .between = sq_between};
    int max = q->max_batch;
    for (;;) {
        /* Returns once stopped and idle, or refusing the batch size. */
        const int rc = serve_engine_run_batch(q->e, max, &f);
        if (rc == TIDE_E_UNSUPPORTED && max > 1) {
            tide_warn("serve: decoding one request at a time ([serve] max_batch = %d cannot be "
                      "used; see the message above)",
                      max);
            max = 1;
            continue;
        }
        pthread_mutex_lock(&q->mu);
        const bool stop = q->stop;
        pthread_mutex_unlock(&q->mu);
        if (stop)
            break;
        if (rc != TIDE_OK) {
            tide_error("serve: the worker stopped: %s", tide_status_str(rc));
            break;
        }
    }
    return NULL;
}

int serve_queue_create(struct serve_engine *e, struct serve_metrics *m, int max_queue,
                       int max_batch, bool shortest, const char *model, struct serve_queue **out)
{
    struct serve_queue *q = calloc(1, sizeof *q);
    if (!q)
        return TIDE_E_NOMEM;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->idle, NULL);
    q->e = e;
    q->m = m;
    q->model = model;
    q->max_queue = max_queue;
    q->max_batch = max_batch > 0 ? max_batch : 1;
    q->shortest = shortest;
    const int rc = pthread_create(&q->worker, NULL, sq_worker, q);
    if (rc) {
        tide_error("serve: cannot start the worker thread: %s", strerror(rc));
        serve_queue_destroy(q);
        return TIDE_E_NOMEM;
    }
    q->have_worker = true;
    *out = q;
    return TIDE_OK;
}

/* Under q->mu. */
static void sq_close_locked(struct serve_queue *q)
{
    q->closed = true;
    while (q->head) {
        struct serve_job *j = q->head;
        q->head = j->next;
        q->n_waiting--;
        struct serve_error err;
        serve_error_set(&err, 503, "server_error", "shutting_down", NULL,
                        "the server is shutting down; the request was not started");
        sq_answer_error(j, &err);
        serve_metrics_cancel(q->m, "shutdown");
        j->state = JOB_DONE;
        pthread_cond_broadcast(&j->cv);
        sq_release_locked(j);
    }
    q->tail = NULL;
}

void serve_queue_close(struct serve_queue *q)
{
    pthread_mutex_lock(&q->mu);
    sq_close_locked(q);
    pthread_mutex_unlock(&q->mu);
}

void serve_queue_shutdown(struct serve_queue *q, double timeout)
{
    pthread_mutex_lock(&q->mu);
    sq_close_locked(q);
    const double deadline = sq_now() + timeout;
    while (q->n_running && sq_now() < deadline)
        sq_timedwait(&q->idle, &q->mu, 0.05);
    if (q->n_running) {
        tide_warn("serve: cancelling the %d running request%s", q->n_running,
                  q->n_running > 1 ? "s" : "");
        for (struct serve_job *j = q->running; j; j = j->next_running)
            atomic_store(&j->cancel, JOB_SHUTDOWN);
    }
    while (q->n_running)
        pthread_cond_wait(&q->idle, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void serve_queue_destroy(struct serve_queue *q)
{
    if (!q)
        return;
    if (q->have_worker) {
        serve_queue_shutdown(q, 0);
        pthread_mutex_lock(&q->mu);
        q->stop = true;
        pthread_cond_signal(&q->work);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->worker, NULL);
    }
    pthread_cond_destroy(&q->work);
    pthread_cond_destroy(&q->idle);
    pthread_mutex_destroy(&q->mu);
    free(q);
}
