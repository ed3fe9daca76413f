/* `tide serve`: the request queue and the one worker that owns the engine.
 *
 * Connection threads (one per HTTP connection) submit jobs and wait for
 * them. The worker decodes generations as a continuous batch (docs/
 * batching.md): between forwards it admits waiting requests, in arrival
 * order or shortest planned work first ([serve] schedule), while fewer than
 * [serve] max_batch prompts run (each prompt of a request is one sequence),
 * and it answers tokenizer jobs between every two forwards, so that they
 * never wait behind generations. Requests that a free slot takes at the
 * next forward do not count against [serve] max_queue. A job holds
 * what its answer needs: a whole body (JSON) or, for a stream, the
 * server-sent events produced so far. While a connection thread waits it
 * watches its socket: a client that goes away cancels its job, which stops
 * at the next denoising step (or is skipped if it has not started). */
#ifndef TIDE_SERVE_QUEUE_H
#define TIDE_SERVE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "serve_engine.h"
#include "serve_json.h"
#include "serve_metrics.h"

struct serve_queue;
struct serve_job;

/* Start the worker, decoding up to max_batch prompts at once; a free slot
 * takes the first waiting request, or with shortest the one with the least
 * planned work. The engine and metrics must outlive the queue; model is the
 * name answers carry. Returns TIDE_OK or a status (logged). */
int serve_queue_create(struct serve_engine *e, struct serve_metrics *m, int max_queue,
                       int max_batch, bool shortest, const char *model, struct serve_queue **out);
/* Stop: see serve_queue_shutdown, then join the worker and free. */
void serve_queue_destroy(struct serve_queue *q);

/* Refuse new jobs and answer the waiting ones with 503; the running ones
 * go on. */
void serve_queue_close(struct serve_queue *q);
/* Close, let the running jobs finish for at most timeout seconds, then
 * cancel them (they stop at their next step). Returns when the worker is
 * idle. */
void serve_queue_shutdown(struct serve_queue *q, double timeout);

/* Waiting and running jobs, for /metrics. */
void serve_queue_load(struct serve_queue *q, int *queued, int *running);

/* New jobs (NULL when out of memory). A generation takes over *req (it is
 * zeroed); one without a seed takes default_seed ([serve] default_seed),
 * or when that is negative a random one, drawn for it (its answer reports
 * it). A tokenizer job takes over *t. */
struct serve_job *serve_job_generate(struct serve_req *req, int64_t default_seed);
struct serve_job *serve_job_tokens(bool detokenize, struct serve_tok_req *t);

enum serve_submit {
    SERVE_SUBMIT_OK = 0,
    SERVE_SUBMIT_FULL = 1,   /* max_queue jobs wait already: 503, Retry-After */
    SERVE_SUBMIT_CLOSED = 2, /* shutting down: 503 */
};
/* Queue a job. On FULL, *retry_after is a guess of the seconds until there
 * is room. The caller keeps its reference either way. */
enum serve_submit serve_queue_submit(struct serve_queue *q, struct serve_job *j, int *retry_after);

/* Wait until the answer's headers can be sent: returns 1 when a stream has
 * started (read it with serve_job_read), 0 when the job is done (take the
 * answer with serve_job_answer), -1 when the client at fd went away (the
 * job is cancelled). A client that only closed its sending side is not
 * gone; with interim (it speaks HTTP/1.1) a "100 Continue" may be written
 * to fd to tell the two apart. */
int serve_job_wait(struct serve_queue *q, struct serve_job *j, int fd, bool interim);

/* A finished job's answer: HTTP status and body (owned by the job). */
void serve_job_answer(struct serve_queue *q, struct serve_job *j, int *status, const char **body);

/* The next bytes of a stream, up to max: blocks until there are some.
 * Returns the count, 0 at the end of the stream, -1 when the client at fd
 * went away (the job is cancelled). */
ssize_t serve_job_read(struct serve_queue *q, struct serve_job *j, int fd, char *buf, size_t max);

/* Drop the caller's reference (a job lives until its connection and the
 * worker are both done with it). NULL is a no-op. */
void serve_job_release(struct serve_queue *q, struct serve_job *j);

#endif
