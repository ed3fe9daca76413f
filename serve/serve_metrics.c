/* `tide serve`: Prometheus counters. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_metrics.h"

#define SM_MAX_SERIES 64 /* (endpoint, status) pairs */

static const double sm_step_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                         0.25,  0.5,    1,     2.5,  5,     10};
static const double sm_req_buckets[] = {0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,
                                        10,   25,  50,   100, 250, 1000};
#define SM_NB 13 /* buckets of each histogram, +Inf aside */

struct sm_hist {
    uint64_t count[SM_NB + 1]; /* per bucket (not cumulative); last = +Inf */
    uint64_t n;
    double sum;
};

struct serve_metrics {
    pthread_mutex_t mu;
    struct {
        const char *endpoint; /* static strings */
        int status;
        uint64_t n;
    } series[SM_MAX_SERIES];
    int n_series;
    struct sm_hist step, request, queue, prefill;
    uint64_t generations, prompt_tokens, completion_tokens, steps, forwards, blocks;
    uint64_t cancel_disconnect, cancel_shutdown;
    int sequences, sequences_max; /* prompts decoding together: now, most */
    struct serve_offload total;
    struct serve_offload *layers;
    int n_layers;
};

struct serve_metrics *serve_metrics_create(int n_layers)
{
    struct serve_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->n_layers = n_layers > 0 ? n_layers : 0;
    m->layers = calloc((size_t)(m->n_layers ? m->n_layers : 1), sizeof *m->layers);
    if (!m->layers) {
        free(m);
        return NULL;
    }
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void serve_metrics_destroy(struct serve_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m->layers);
    free(m);
}

static void sm_observe(struct sm_hist *h, const double *bounds, double v)
{
    int i = 0;
    while (i < SM_NB && v > bounds[i])
        i++;
    h->count[i]++;
    h->n++;
    h->sum += v;
}

void serve_metrics_request(struct serve_metrics *m, const char *endpoint, int status)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_series &&
           (m->series[i].status != status || strcmp(m->series[i].endpoint, endpoint)))
        i++;
    if (i == m->n_series && i < SM_MAX_SERIES) {
        m->series[i].endpoint = endpoint;
        m->series[i].status = status;
        m->n_series++;
    }
    if (i < m->n_series)
        m->series[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_sequences(struct serve_metrics *m, int n)
{
    pthread_mutex_lock(&m->mu);
    m->sequences = n;
    if (n > m->sequences_max)
        m->sequences_max = n;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_step(struct serve_metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    sm_observe(&m->step, sm_step_buckets, seconds);
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_generation(struct serve_metrics *m, const struct serve_usage *u)
{
    pthread_mutex_lock(&m->mu);
    m->generations++;
    m->prompt_tokens += (uint64_t)u->prompt_tokens;
    m->completion_tokens += (uint64_t)u->completion_tokens;
    m->steps += (uint64_t)u->steps;
    m->forwards += (uint64_t)u->forwards;
    m->blocks += (uint64_t)u->blocks;
    m->total.hit_rows += u->hit_rows;
    m->total.miss_rows += u->miss_rows;
    m->total.promotions += u->promotions;
    m->total.evictions += u->evictions;
    m->total.weight_bytes += u->weight_bytes;
    m->total.act_bytes += u->act_bytes;
    sm_observe(&m->request, sm_req_buckets, u->seconds);
    sm_observe(&m->queue, sm_req_buckets, u->queue_seconds);
    sm_observe(&m->prefill, sm_req_buckets, u->prefill_seconds);
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_cancel(struct serve_metrics *m, const char *reason)
{
    pthread_mutex_lock(&m->mu);
    if (!strcmp(reason, "disconnect"))
        m->cancel_disconnect++;
    else
        m->cancel_shutdown++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_layers(struct serve_metrics *m, const struct serve_offload *layers, int n)
{
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < n && i < m->n_layers; i++)
        m->layers[i] = layers[i];
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_totals(struct serve_metrics *m, struct serve_metrics_totals *t)
{
    pthread_mutex_lock(&m->mu);
    *t = (struct serve_metrics_totals){
        .generations = m->generations,
        .prompt_tokens = m->prompt_tokens,
        .completion_tokens = m->completion_tokens,
        .cancelled = m->cancel_disconnect + m->cancel_shutdown,
    };
    for (int i = 0; i < m->n_series; i++)
        t->requests += m->series[i].n;
    pthread_mutex_unlock(&m->mu);
}

/* ---- exposition --------------------------------------------------------- */

static void sm_head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sm_counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    sm_head(f, name, "counter", help);
    fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void sm_gauge(FILE *f, const char *name, const char *help, double v)
{
    sm_head(f, name, "gauge", help);
    fprintf(f, "%s %.17g\n", name, v);
}

static void sm_hist_write(FILE *f, const char *name, const char *help, const struct sm_hist *h,
                          const double *bounds)
{
    sm_head(f, name, "histogram", help);
    uint64_t acc = 0;
    for (int i = 0; i < SM_NB; i++) {
        acc += h->count[i];
        fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)acc);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)h->n);
    fprintf(f, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

static double sm_rate(uint64_t hit, uint64_t miss)
{
    return hit + miss ? (double)hit / (double)(hit + miss) : 1.0;
}

/* A label value: backslash, quote and newline escaped. */
static void sm_label(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f);
        if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

char *serve_metrics_render(struct serve_metrics *m, int queued, int running, int max_queue,
                           const struct serve_engine_info *info, const char *model)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    pthread_mutex_lock(&m->mu);
    sm_head(f, "tide_info", "gauge", "The model and placement served (value 1).");
    fprintf(f, "tide_info{model=\"");
    sm_label(f, model);
    fprintf(f, "\",policy=\"");
    sm_label(f, info->policy);
    fprintf(f, "\",budget=\"%d\",experts=\"%d\",moe_layers=\"%d\"} 1\n", info->budget,
            info->n_experts, info->n_moe_layers);
    sm_head(f, "tide_http_requests_total", "counter",
            "HTTP requests answered, by endpoint and status.");
    for (int i = 0; i < m->n_series; i++)
        fprintf(f, "tide_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                m->series[i].endpoint, m->series[i].status, (unsigned long long)m->series[i].n);
    sm_gauge(f, "tide_queue_requests", "Generation requests waiting for the worker.", queued);
    sm_gauge(f, "tide_queue_capacity", "Most requests that may wait ([serve] max_queue).",
             max_queue);
    sm_gauge(f, "tide_running_requests", "Generation requests in progress.", running);
    sm_gauge(f, "tide_batch_sequences",
             "Prompts decoding together now (continuous batching, [serve] max_batch).",
             m->sequences);
    sm_gauge(f, "tide_batch_sequences_max", "Most prompts that decoded together since start.",
             m->sequences_max);
    sm_counter(f, "tide_generations_total", "Generations finished (one per prompt).",
               m->generations);
    sm_head(f, "tide_cancelled_total", "counter",
            "Requests cancelled before they finished, by reason.");
    fprintf(f, "tide_cancelled_total{reason=\"disconnect\"} %llu\n",
            (unsigned long long)m->cancel_disconnect);
    fprintf(f, "tide_cancelled_total{reason=\"shutdown\"} %llu\n",
            (unsigned long long)m->cancel_shutdown);
    sm_counter(f, "tide_prompt_tokens_total", "Prompt tokens processed.", m->prompt_tokens);
    sm_counter(f, "tide_generation_tokens_total", "Tokens generated (completion tokens).",
               m->completion_tokens);
    sm_counter(f, "tide_denoising_steps_total", "Denoising steps run.", m->steps);
    sm_counter(f, "tide_forwards_total", "Model forward passes (prefill, steps, K/V passes).",
               m->forwards);
    sm_counter(f, "tide_blocks_total", "Blocks decoded.", m->blocks);
    sm_hist_write(f, "tide_step_seconds", "Wall time of one denoising step.", &m->step,
                  sm_step_buckets);
    sm_hist_write(f, "tide_request_seconds", "Wall time of one generation.", &m->request,
                  sm_req_buckets);
    sm_hist_write(f, "tide_queue_seconds", "Time a request waited before its generation.",
                  &m->queue, sm_req_buckets);
    sm_hist_write(f, "tide_prefill_seconds", "Time from a generation's start to its first block.",
                  &m->prefill, sm_req_buckets);
    sm_counter(f, "tide_expert_hit_rows_total",
               "Token-expert rows computed on the device (resident experts).", m->total.hit_rows);
    sm_counter(f, "tide_expert_miss_rows_total", "Token-expert rows computed on the host.",
               m->total.miss_rows);
    sm_gauge(f, "tide_expert_hit_rate", "Device rows over all expert rows, since start.",
             sm_rate(m->total.hit_rows, m->total.miss_rows));
    sm_counter(f, "tide_expert_promotions_total", "Experts copied into device slots.",
               m->total.promotions);
    sm_counter(f, "tide_expert_evictions_total", "Resident experts replaced.", m->total.evictions);
    sm_counter(f, "tide_weight_bytes_moved_total", "Expert weight bytes moved host to device.",
               m->total.weight_bytes);
    sm_counter(f, "tide_activation_bytes_moved_total",
               "Activation bytes moved between device and host for host experts.",
               m->total.act_bytes);
    sm_head(f, "tide_layer_hit_rate", "gauge",
            "Per MoE layer: device rows over all expert rows, since start.");
    for (int i = 0; i < m->n_layers; i++)
        fprintf(f, "tide_layer_hit_rate{layer=\"%d\"} %.17g\n", i,
                sm_rate(m->layers[i].hit_rows, m->layers[i].miss_rows));
    sm_head(f, "tide_layer_promotions_total", "counter", "Per MoE layer: experts promoted.");
    for (int i = 0; i < m->n_layers; i++)
        fprintf(f, "tide_layer_promotions_total{layer=\"%d\"} %llu\n", i,
                (unsigned long long)m->layers[i].promotions);
    sm_head(f, "tide_layer_bytes_moved_total", "counter",
            "Per MoE layer: weight and activation bytes moved.");
    for (int i = 0; i < m->n_layers; i++)
        fprintf(f, "tide_layer_bytes_moved_total{layer=\"%d\"} %llu\n", i,
                (unsigned long long)(m->layers[i].weight_bytes + m->layers[i].act_bytes));
    pthread_mutex_unlock(&m->mu);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
