/* `tide serve`: an OpenAI-compatible HTTP server. The model is loaded once;
 * one worker decodes the requests as a continuous batch (serve_queue.c), the
 * HTTP side is libmicrohttpd (serve_http.c), the engine is reached through
 * serve_engine.c only. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "serve_engine.h"
#include "serve_http.h"
#include "serve_metrics.h"
#include "serve_queue.h"
#include "tide/log.h"
#include "tide/status.h"

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: tide serve [-c FILE] [--set section.key=value ...] [--host ADDR] [--port N]\n\n"
            "Loads the model once and answers OpenAI-style HTTP requests (docs/serving.md).\n"
            "One worker decodes up to [serve] max_batch prompts together, a continuous batch:\n"
            "waiting requests join between forwards while fewer run, in arrival order (or\n"
            "shortest planned work first: [serve] schedule); each answer is the one the\n"
            "request gets alone.\n\n"
            "  POST /v1/completions        prompt (text, token ids, or a batch of them)\n"
            "  POST /v1/chat/completions   messages (system, user, assistant), in the model's\n"
            "                              chat template\n"
            "  GET  /v1/models             the model served\n"
            "  GET  /health                liveness (needs no key)\n"
            "  GET  /metrics               Prometheus text: requests, tokens, step time,\n"
            "                              hit rate per MoE layer, bytes moved\n"
            "  POST /tokenize, POST /detokenize, GET /tokenizer_info   (as vLLM's)\n\n"
            "Requests take max_tokens, temperature, top_p, top_k, seed, stop and stream\n"
            "(server-sent events, one chunk per committed block, then [DONE]), and the\n"
            "block-diffusion fields block_length, steps and threshold; each answer carries\n"
            "usage, the seed used (a random one when the request has none, unless [serve]\n"
            "default_seed is set) and a \"tide\" object (steps, forwards, hit rate,\n"
            "promotions, GB moved, seconds). Other unset fields take the [generation] values.\n\n"
            "  -c, --config FILE   configuration; [serve] holds the server's options\n"
            "                      (host, port, max_queue, max_batch, schedule, max_body,\n"
            "                      api_key, model_name, max_connections, read_timeout,\n"
            "                      shutdown_timeout, default_seed; `tide config doc`)\n"
            "      --set S.K=V     override one option (may repeat)\n"
            "      --host ADDR     listen address (default 127.0.0.1: this machine only);\n"
            "                      same as --set serve.host=ADDR\n"
            "      --port N        TCP port (default 8080; 0 = any free port, logged)\n\n"
            "Security: without [serve] api_key (or the TIDE_API_KEY environment variable)\n"
            "anyone who can reach the address may use the model; requests never name files.\n"
            "SIGINT or SIGTERM stops accepting, answers waiting requests with 503, lets the\n"
            "running ones finish (at most [serve] shutdown_timeout seconds, or until a second\n"
            "signal), closes the connections once their answers are out, writes [output]\n"
            "metrics, and exits 0 (while the model loads, it exits 130 at once).\n\n"
            "example:\n"
            "  tide serve -c config/llada2-tiny.ini --port 8080 &\n"
            "  curl -s localhost:8080/v1/completions -H 'Content-Type: application/json' \\\n"
            "       -d '{\"prompt\": \"Hello\", \"max_tokens\": 32}'\n");
}

static double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool serve_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return !strcmp(host, "localhost");
}

/* The last component of a path, without trailing slashes. */
static void serve_basename(const char *path, char *out, size_t cap)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    snprintf(out, cap, "%.*s", (int)(n - b), path + b);
}

/* Signals: SIGINT and SIGTERM are blocked in every thread and taken by one
 * thread of ours with sigwait. While the model loads, one ends the process
 * (nothing to clean up yet); once serving, each is passed to the main thread
 * through a pipe. */
static sigset_t serve_sigs;
static atomic_bool serve_loaded;
static int serve_pipe[2] = {-1, -1};

static void *serve_signal_thread(void *arg)
{
    for (;;) {
        int sig;
        if (sigwait(&serve_sigs, &sig) != 0)
            continue;
        if (!atomic_load(&serve_loaded)) {
            static const char msg[] = "tide: warning: serve: interrupted while loading\n";
            if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
                /* nothing more to do */
            }
            _exit(CLI_EXIT_INTERRUPTED);
        }
        if (write(serve_pipe[1], &sig, sizeof sig) < 0) {
            /* the main thread is gone: the process is ending */
        }
    }
    return NULL;
}

/* The next signal, waiting at most timeout_ms (-1: forever); 0 when none. */
static int serve_next_signal(int timeout_ms)
{
    struct pollfd p = {.fd = serve_pipe[0], .events = POLLIN};
    int sig = 0;
    if (poll(&p, 1, timeout_ms) > 0 && read(serve_pipe[0], &sig, sizeof sig) != sizeof sig)
        sig = 0;
    return sig;
}

int cmd_serve(int argc, char **argv)
{
    struct cli_ctx args = {0};
    char host_set[300], port_set[64];
    for (int i = 1; i < argc; i++) {
        int r = cli_common_arg(&args, argc, argv, &i);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        const char *a = argv[i];
        const bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--host") && has_val && args.n_sets < CLI_MAX_SETS) {
            snprintf(host_set, sizeof host_set, "serve.host=%s", argv[++i]);
            args.sets[args.n_sets++] = host_set;
        } else if (!strcmp(a, "--port") && has_val && args.n_sets < CLI_MAX_SETS) {
            snprintf(port_set, sizeof port_set, "serve.port=%s", argv[++i]);
            args.sets[args.n_sets++] = port_set;
        } else {
            return cli_unexpected("serve", a, serve_usage);
        }
    }
    /* Block the signals before any thread (the backends', the server's)
     * exists, so that every thread inherits the mask. */
    sigemptyset(&serve_sigs);
    sigaddset(&serve_sigs, SIGINT);
    sigaddset(&serve_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &serve_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t sig_thread;
    if (pipe(serve_pipe) != 0 ||
        pthread_create(&sig_thread, NULL, serve_signal_thread, NULL) != 0) {
        tide_error("serve: cannot set up signal handling: %s", strerror(errno));
        return CLI_EXIT_RUNTIME;
    }
    pthread_detach(sig_thread);

    struct serve_settings st;
    struct serve_engine *e = NULL;
    struct serve_metrics *m = NULL;
    struct serve_queue *q = NULL;
    struct serve_http *h = NULL;
    /* The costs of [policy] profile: the runtime does not read profiles. */
    const struct tide_policy_costs *costs = NULL;
    int rc = cli_setup(&args);
    if (rc == TIDE_OK)
        rc = cli_policy_costs(&args, &costs);
    if (rc == TIDE_OK)
        rc =
            serve_engine_open(args.configs, args.n_configs, args.sets, args.n_sets, costs, &st, &e);
    if (rc != TIDE_OK)
        goto done;
    const struct serve_engine_info *info = serve_engine_info(e);
    char model[256];
    if (*st.model_name)
        snprintf(model, sizeof model, "%s", st.model_name);
    else
        serve_basename(info->model_dir, model, sizeof model);
    const char *key = *st.api_key ? st.api_key : getenv("TIDE_API_KEY");
    if (key && !*key)
        key = NULL;
    if (!serve_is_loopback(st.host) && !key)
        tide_warn("serve: listening on %s without an API key: anyone who can reach it may use "
                  "the model (set [serve] api_key or TIDE_API_KEY)",
                  st.host);
    if (!(m = serve_metrics_create(info->n_moe_layers))) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    if ((rc = serve_queue_create(e, m, st.max_queue, st.max_batch, st.shortest, model, &q)) !=
        TIDE_OK)
        goto done;
    const struct serve_http_args ha = {
        .host = st.host,
        .port = st.port,
        .max_body = st.max_body,
        .api_key = key,
        .model = model,
        .max_connections = st.max_connections,
        .read_timeout = st.read_timeout,
        .max_queue = st.max_queue,
        .default_seed = st.default_seed,
        .queue = q,
        .metrics = m,
        .info = info,
    };
    if ((rc = serve_http_start(&ha, &h)) != TIDE_OK)
        goto done;
    const bool v6 = strchr(st.host, ':') != NULL;
    tide_info("serve: listening on http://%s%s%s:%d (model %s; policy %s, budget %d of %d "
              "experts; queue %d; %s)",
              v6 ? "[" : "", st.host, v6 ? "]" : "", serve_http_port(h), model, info->policy,
              info->budget, info->n_experts, st.max_queue, key ? "API key required" : "no API key");

    atomic_store(&serve_loaded, true);
    int sig;
    while (!(sig = serve_next_signal(-1)))
        ;
    tide_info("serve: %s: no new requests; finishing the running ones (at most %g s; a second "
              "signal cancels them)",
              sig == SIGINT ? "SIGINT" : "SIGTERM", st.shutdown_timeout);
    serve_http_quiesce(h);
    serve_queue_close(q);
    const double deadline = serve_now() + st.shutdown_timeout;
    for (;;) {
        int queued, running;
        serve_queue_load(q, &queued, &running);
        if (!running || serve_now() >= deadline)
            break;
        if (serve_next_signal(50))
            break; /* a second signal: cancel now */
    }
    serve_queue_shutdown(q, 0);
    serve_http_drain(h, 5); /* the last answers and stream events go out */
    rc = TIDE_OK;
done:
    serve_http_stop(h);
    serve_queue_destroy(q);
    if (m) {
        struct serve_metrics_totals t;
        serve_metrics_totals(m, &t);
        tide_info("serve: stopped after %llu requests: %llu generations, %llu prompt and %llu "
                  "completion tokens, %llu cancelled",
                  (unsigned long long)t.requests, (unsigned long long)t.generations,
                  (unsigned long long)t.prompt_tokens, (unsigned long long)t.completion_tokens,
                  (unsigned long long)t.cancelled);
    }
    serve_metrics_destroy(m);
    serve_engine_close(e); /* writes [output] metrics */
    cli_teardown(&args);
    return cli_exit_code(rc);
}
