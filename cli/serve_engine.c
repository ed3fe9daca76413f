/* `tide serve`: the engine adapter (serve_engine.h), written on the
 * runtime's engine (core/runtime/engine.h). Every other serve_* file goes
 * through these calls, so moving to another engine API changes this file
 * only. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine.h"
#include "serve_engine.h"
#include "tide/log.h"
#include "tide/status.h"

struct serve_engine {
    struct cli_ctx cli; /* plugins and configuration */
    struct tide_engine *e;
    struct tide_gen_params defaults; /* [generation] */
    struct serve_engine_info info;
    char policy[128];
    /* [output] metrics: the dispatcher's JSON Lines pass through a stream
     * of ours (per-layer totals for /metrics) and on to the file, if any. */
    FILE *lines; /* fopencookie stream handed to the engine */
    FILE *file;  /* [output] metrics, or NULL */
    const char *file_path;
    char *line; /* partial line */
    size_t line_len, line_cap;
    struct serve_offload *layers; /* [n_moe_layers] */
};

static double se_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One JSON line of the dispatcher's telemetry: add "layer" lines to the
 * per-layer totals. */
static void se_metrics_line(struct serve_engine *s, const char *line, size_t len)
{
    json_t *o = json_loadb(line, len, 0, NULL);
    const json_t *type = json_object_get(o, "type");
    const json_t *layer = json_object_get(o, "layer");
    if (type && json_is_string(type) && !strcmp(json_string_value(type), "layer") &&
        json_is_integer(layer) && json_integer_value(layer) >= 0 &&
        json_integer_value(layer) < s->info.n_moe_layers) {
        struct serve_offload *c = &s->layers[json_integer_value(layer)];
#define SE_ADD(f) c->f += (uint64_t)json_integer_value(json_object_get(o, #f))
        SE_ADD(tokens);
        SE_ADD(hit_rows);
        SE_ADD(miss_rows);
        SE_ADD(promotions);
        SE_ADD(evictions);
        SE_ADD(weight_bytes);
        SE_ADD(act_bytes);
#undef SE_ADD
    }
    json_decref(o);
}

static ssize_t se_lines_write(void *cookie, const char *buf, size_t size)
{
    struct serve_engine *s = cookie;
    if (s->file)
        fwrite(buf, 1, size, s->file);
    for (size_t i = 0; i < size; i++) {
        if (buf[i] == '\n') {
            se_metrics_line(s, s->line, s->line_len);
            s->line_len = 0;
            continue;
        }
        if (s->line_len + 1 >= s->line_cap) {
            size_t cap = s->line_cap ? 2 * s->line_cap : 1024;
            char *p = realloc(s->line, cap);
            if (!p)
                return -1;
            s->line = p;
            s->line_cap = cap;
        }
        s->line[s->line_len++] = buf[i];
    }
    return (ssize_t)size;
}

static void se_settings(const struct tide_config *cfg, struct serve_settings *st)
{
    const struct tide_opts *so = tide_config_section(cfg, "serve");
    *st = (struct serve_settings){
        .host = tide_opts_str(so, "host"),
        .port = (int)tide_opts_int(so, "port"),
        .max_queue = (int)tide_opts_int(so, "max_queue"),
        .max_body = tide_opts_size(so, "max_body"),
        .api_key = tide_opts_str(so, "api_key"),
        .model_name = tide_opts_str(so, "model_name"),
        .max_connections = (int)tide_opts_int(so, "max_connections"),
        .shutdown_timeout = tide_opts_float(so, "shutdown_timeout"),
    };
}

int serve_engine_open(const char *config_path, const char *const *sets, int n_sets,
                      struct serve_settings *settings, struct serve_engine **out)
{
    *out = NULL;
    struct serve_engine *s = calloc(1, sizeof *s);
    if (!s)
        return TIDE_E_NOMEM;
    s->cli.config_path = config_path;
    for (int i = 0; i < n_sets && i < CLI_MAX_SETS; i++)
        s->cli.sets[s->cli.n_sets++] = sets[i];
    int rc = cli_setup(&s->cli);
    if (rc != TIDE_OK)
        goto fail;
    se_settings(s->cli.cfg, settings);
    tide_engine_gen_params(s->cli.cfg, &s->defaults);
    if ((rc = tide_engine_prepare(s->cli.cfg, s->cli.plugins, &s->e)) != TIDE_OK ||
        (rc = tide_engine_load(s->e, s->cli.plugins)) != TIDE_OK)
        goto fail;
    const struct tide_model_info *mi = s->e->mops->info(s->e->model);
    int budget = 0;
    if ((rc = tide_engine_config_budget(s->e, &budget)) != TIDE_OK)
        goto fail;
    snprintf(s->policy, sizeof s->policy, "%s",
             budget < mi->n_experts
                 ? tide_opts_str(tide_config_section(s->cli.cfg, "policy"), "plugin")
                 : "none");
    s->info = (struct serve_engine_info){
        .model_dir = s->e->model_dir,
        .policy = s->policy,
        .budget = budget,
        .n_layers = mi->n_layers,
        .n_moe_layers = mi->n_moe_layers,
        .n_experts = mi->n_experts,
        .block_length = s->defaults.block,
        .max_ctx = mi->max_ctx,
        .vocab = mi->vocab_size,
        .gen_length = s->defaults.gen_length,
        .has_chat_template = mi->chat_template != NULL,
        .eos_text = mi->eos_token,
    };
    s->layers = calloc((size_t)(mi->n_moe_layers > 0 ? mi->n_moe_layers : 1), sizeof *s->layers);
    if (!s->layers) {
        rc = TIDE_E_NOMEM;
        goto fail;
    }
    if ((rc = cli_output_open(tide_config_section(s->cli.cfg, "output"), "metrics", &s->file,
                              &s->file_path)) != TIDE_OK)
        goto fail;
    s->lines = fopencookie(s, "w", (cookie_io_functions_t){.write = se_lines_write});
    if (!s->lines) {
        rc = TIDE_E_NOMEM;
        goto fail;
    }
    *out = s;
    return TIDE_OK;
fail:
    serve_engine_close(s);
    return rc;
}

void serve_engine_close(struct serve_engine *s)
{
    if (!s)
        return;
    if (s->lines)
        fclose(s->lines);
    if (s->file)
        cli_output_close(s->file, s->file_path, true);
    free(s->line);
    free(s->layers);
    tide_engine_close(s->e);
    cli_teardown(&s->cli);
    free(s);
}

const struct serve_engine_info *serve_engine_info(const struct serve_engine *s)
{
    return &s->info;
}

/* ---- generation --------------------------------------------------------- */

struct se_gen {
    struct serve_engine *s;
    const struct serve_gen *g;
    int64_t max_tokens;
    double t0, t_step, t_first_block;
    bool stop;    /* a callback asked to stop */
    int32_t *ids; /* the last block's ids */
    int64_t n_ids;
    char *text;
    size_t text_len;
    bool eos, full;
    int blocks;
    int64_t steps;
    int rc; /* a failure inside a hook */
};

/* The text of ids[0..n): ids the tokenizer knows, as in `tide run`. */
static int se_decode(const struct serve_engine *s, const int32_t *ids, int64_t n, char **text,
                     size_t *len)
{
    int32_t *known = malloc(sizeof *known * (size_t)(n ? n : 1));
    if (!known)
        return TIDE_E_NOMEM;
    int64_t k = 0;
    const int32_t size = tide_tokenizer_size(s->e->tok);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < size && tide_tokenizer_piece(s->e->tok, ids[i]))
            known[k++] = ids[i];
    int rc = tide_tokenizer_decode(s->e->tok, known, (size_t)k, text, len);
    free(known);
    return rc;
}

static void se_block_begin(void *u, int block, bool first)
{
    struct se_gen *x = u;
    if (first)
        x->t_first_block = se_now();
}

static int se_step_begin(void *u, int block, int step)
{
    struct se_gen *x = u;
    if (x->stop)
        return TIDE_E_INTERRUPTED; /* ours: told apart by x->stop */
    x->t_step = se_now();
    return TIDE_OK;
}

static void se_step_end(void *u, int block, int step, int committed, int remaining)
{
    struct se_gen *x = u;
    x->steps++;
    if (x->g->on_step && x->g->on_step(x->g->user, se_now() - x->t_step))
        x->stop = true;
}

static void se_block_end(void *u, int block, const int32_t *gen, int64_t n)
{
    struct se_gen *x = u;
    const struct tide_gen_tokens *t = &x->s->e->ids;
    int64_t keep = n, text_n = n;
    bool eos = false;
    for (int64_t i = 0; i < n; i++)
        if (gen[i] == t->eos || (t->stop >= 0 && gen[i] == t->stop)) {
            keep = i + 1;
            text_n = i;
            eos = true;
            break;
        }
    bool full = false;
    if (keep >= x->max_tokens) {
        full = keep > x->max_tokens || !eos;
        if (keep > x->max_tokens) {
            keep = text_n = x->max_tokens;
            eos = false;
        }
    }
    int32_t *ids = malloc(sizeof *ids * (size_t)(keep ? keep : 1));
    char *text = NULL;
    size_t len = 0;
    if (!ids || se_decode(x->s, gen, text_n, &text, &len) != TIDE_OK) {
        free(ids);
        x->rc = TIDE_E_NOMEM;
        x->stop = true;
        return;
    }
    memcpy(ids, gen, sizeof *ids * (size_t)keep);
    free(x->ids);
    free(x->text);
    x->ids = ids;
    x->n_ids = keep;
    x->text = text;
    x->text_len = len;
    x->eos = eos;
    x->full = full;
    x->blocks = block + 1;
    const struct serve_block b = {
        .block = block,
        .ids = ids,
        .n_ids = keep,
        .text = text,
        .text_len = len,
        .eos = eos,
        .full = full,
        .steps = x->steps,
    };
    if ((x->g->on_block && x->g->on_block(x->g->user, &b)) || full)
        x->stop = true;
}

/* Prompt tokens and generation parameters of a request, checked against
 * the model: an error names the field. */
static int se_prepare(struct serve_engine *s, const struct serve_gen *g, struct tide_gen_params *p,
                      int32_t **ids, size_t *n, struct serve_error *err)
{
    *p = s->defaults;
    if (g->block_length > 0 && g->block_length != s->defaults.block) {
        serve_error_set(err, 400, "invalid_request_error", NULL, "block_length",
                        "'block_length' must be %d, the engine's (the model's attention mask is "
                        "built for it when the server starts)",
                        s->defaults.block);
        return TIDE_E_UNSUPPORTED;
    }
    if (g->max_tokens > 0)
        p->gen_length = g->max_tokens;
    if (g->steps > 0)
        p->steps = g->steps;
    if (g->threshold > 0)
        p->threshold = g->threshold;
    if (g->temperature >= 0)
        p->temperature = g->temperature;
    if (g->top_k >= 0)
        p->top_k = g->top_k;
    if (g->top_p > 0)
        p->top_p = g->top_p;
    if (g->seed >= 0)
        p->seed = (uint64_t)g->seed;
    const char *what = g->chat ? "messages" : "prompt";
    const struct serve_prompt *pr = g->prompt;
    if (pr->ids) {
        if (!(*ids = malloc(sizeof **ids * pr->n_ids)))
            return TIDE_E_NOMEM;
        memcpy(*ids, pr->ids, sizeof **ids * pr->n_ids);
        *n = pr->n_ids;
    } else {
        if (g->chat && !s->info.has_chat_template) {
            serve_error_set(err, 400, "invalid_request_error", NULL, "messages",
                            "the model %s has no chat template; use /v1/completions",
                            s->info.model_dir);
            return TIDE_E_UNSUPPORTED;
        }
        int rc = tide_engine_encode(s->e, pr->text, g->chat, ids, n);
        if (rc != TIDE_OK) {
            serve_error_set(err, 500, "server_error", NULL, what, "cannot tokenize the %s: %s",
                            what, tide_status_str(rc));
            return rc;
        }
    }
    const int64_t P = (int64_t)*n, max_ctx = s->info.max_ctx;
    if (P < 1) {
        serve_error_set(err, 400, "invalid_request_error", NULL, what, "'%s' has no tokens", what);
        return TIDE_E_RANGE;
    }
    struct tide_gen_params one = *p;
    one.gen_length = 1;
    if (tide_gen_ctx(P, &one) > max_ctx) {
        serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded", what,
                        "the %s has %lld tokens; with one block of %d to generate it needs %lld "
                        "positions, beyond the model's context of %lld",
                        what, (long long)P, p->block, (long long)tide_gen_ctx(P, &one),
                        (long long)max_ctx);
        return TIDE_E_RANGE;
    }
    if (tide_gen_ctx(P, p) > max_ctx) {
        serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
                        g->max_tokens > 0 ? "max_tokens" : what,
                        "the %s (%lld tokens) plus max_tokens (%lld), in blocks of %d, needs "
                        "%lld positions, beyond the model's context of %lld",
                        what, (long long)P, (long long)p->gen_length, p->block,
                        (long long)tide_gen_ctx(P, p), (long long)max_ctx);
        return TIDE_E_RANGE;
    }
    return TIDE_OK;
}

static void se_offload_diff(struct serve_offload *o, const struct tide_moe_counters *a,
                            const struct tide_moe_counters *b)
{
    *o = (struct serve_offload){
        .tokens = b->tokens - a->tokens,
        .hit_rows = b->hit_rows - a->hit_rows,
        .miss_rows = b->miss_rows - a->miss_rows,
        .promotions = b->promotions - a->promotions,
        .evictions = b->evictions - a->evictions,
        .weight_bytes = b->weight_bytes - a->weight_bytes,
        .act_bytes = b->act_bytes - a->act_bytes,
    };
}

int serve_engine_generate(struct serve_engine *s, const struct serve_gen *g,
                          struct serve_result *out, struct serve_error *err)
{
    memset(out, 0, sizeof *out);
    struct tide_gen_params p;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = se_prepare(s, g, &p, &ids, &n, err);
    if (rc == TIDE_OK && (rc = tide_engine_reserve(s->e, (int64_t)n, &p)) != TIDE_OK)
        serve_error_set(err, 500, "server_error", NULL, NULL, "cannot reserve memory: %s",
                        tide_status_str(rc));
    if (rc != TIDE_OK) {
        free(ids);
        return rc;
    }
    struct se_gen x = {.s = s, .g = g, .max_tokens = p.gen_length, .t0 = se_now()};
    out->prompt_tokens = (int64_t)n;
    if (g->on_start && g->on_start(g->user, (int64_t)n)) {
        free(ids);
        out->stopped = true;
        out->text = calloc(1, 1);
        return out->text ? TIDE_OK : TIDE_E_NOMEM;
    }
    x.t_first_block = x.t0;
    const struct tide_gen_hooks hooks = {
        .user = &x,
        .block_begin = se_block_begin,
        .step_begin = se_step_begin,
        .step_end = se_step_end,
        .block_end = se_block_end,
    };
    struct tide_moe_counters before, after;
    tide_moe_totals(s->e->moe, &before);
    struct tide_gen_result res = {0};
    const struct tide_engine_outputs outs = {.metrics = s->lines};
    rc = tide_engine_generate(s->e, &p, ids, (int64_t)n, &hooks, &outs, &res);
    fflush(s->lines);
    tide_moe_totals(s->e->moe, &after);
    free(ids);
    if (x.stop && x.rc == TIDE_OK && (rc == TIDE_OK || rc == TIDE_E_INTERRUPTED)) {
        rc = TIDE_OK; /* stopped by us: what was final is the result */
        out->stopped = true;
        /* the generator's count: prefill blocks, steps, one K/V pass per block */
        res.forwards = p.recompute ? x.steps : (int64_t)n / p.block + x.steps + x.blocks;
    } else if (rc == TIDE_OK && x.rc != TIDE_OK) {
        rc = x.rc;
    }
    if (rc != TIDE_OK) {
        free(x.ids);
        free(x.text);
        free(res.ids);
        serve_error_set(err, 500, "server_error", NULL, NULL, "generation failed: %s",
                        tide_status_str(rc));
        return rc;
    }
    if (!x.text && !(x.text = calloc(1, 1))) {
        free(x.ids);
        free(res.ids);
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return TIDE_E_NOMEM;
    }
    out->ids = x.ids;
    out->n_ids = x.n_ids;
    out->text = x.text;
    out->text_len = x.text_len;
    out->eos = x.eos;
    out->full = x.full;
    out->steps = x.steps;
    out->forwards = res.forwards;
    out->blocks = x.blocks;
    out->seconds = se_now() - x.t0;
    out->prefill_seconds = x.t_first_block - x.t0;
    se_offload_diff(&out->offload, &before, &after);
    free(res.ids);
    return TIDE_OK;
}

void serve_result_free(struct serve_result *r)
{
    if (!r)
        return;
    free(r->ids);
    free(r->text);
    r->ids = NULL;
    r->text = NULL;
}

int serve_engine_tokenize(struct serve_engine *s, const char *text, size_t len, bool chat,
                          int32_t **ids, size_t *n, struct serve_error *err)
{
    if (chat && !s->info.has_chat_template) {
        serve_error_set(err, 400, "invalid_request_error", NULL, "messages",
                        "the model has no chat template");
        return TIDE_E_UNSUPPORTED;
    }
    (void)len; /* the text is NUL-terminated and holds no NUL (JSON strings here) */
    int rc = tide_engine_encode(s->e, text, chat, ids, n);
    if (rc != TIDE_OK)
        serve_error_set(err, 500, "server_error", NULL, "prompt", "cannot tokenize: %s",
                        tide_status_str(rc));
    return rc;
}

int serve_engine_detokenize(struct serve_engine *s, const int32_t *ids, size_t n, char **text,
                            size_t *len, struct serve_error *err)
{
    int rc = se_decode(s, ids, (int64_t)n, text, len);
    if (rc != TIDE_OK)
        serve_error_set(err, 500, "server_error", NULL, "tokens", "cannot decode: %s",
                        tide_status_str(rc));
    return rc;
}

int serve_engine_layer_stats(struct serve_engine *s, struct serve_offload *out, int cap)
{
    const int n = s->info.n_moe_layers;
    for (int i = 0; i < n && i < cap; i++)
        out[i] = s->layers[i];
    return n;
}
