/* `tide serve`: the engine adapter (serve_engine.h), written on the public
 * embedding API (tide/engine.h) alone: the [serve] and [output] options,
 * the end-of-text ids (which answers must not show as text), the chat
 * template and end-of-turn token (split into roles for "messages") and how
 * the decoder takes gen_length and steps all come from it. Every other
 * serve_* file goes through these calls. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output_file.h"
#include "serve_engine.h"
#include "tide/engine.h"
#include "tide/log.h"
#include "tide/status.h"

/* Most end-of-text ids kept: EOS and [generation] stop_tokens. */
#define SE_MAX_END 32

struct serve_engine {
    struct tide_engine *e;
    struct tide_engine_info ei;
    struct serve_engine_info info;
    char policy[128];
    /* The text of each end-of-text id, stripped from answers. */
    int32_t end_ids[SE_MAX_END];
    char *end_text[SE_MAX_END];
    size_t end_len[SE_MAX_END];
    int n_end;
    FILE *metrics; /* [output] metrics, or NULL */
    const char *metrics_path;
    struct serve_chat chat;
    /* How the decoder takes gen_length and steps (tide_engine_info). */
    bool whole_blocks; /* gen_length in whole blocks: max_tokens is rounded up, then cut */
    bool shared_steps; /* [generation] steps counts every block's: scaled by the blocks */
    int block_steps;   /* steps per block as configured */
    /* Why the decoder refuses top_k, top_p ("": it takes them; se_probe). */
    char no_top_k[512], no_top_p[512];
};

/* An option of the engine's configuration ("" or 0 when it has none: a
 * name mistyped here, caught by the tests). */
static const char *se_str(struct serve_engine *s, const char *name)
{
    const char *v = "";
    return tide_engine_get_option(s->e, name, &v) == TIDE_OK ? v : "";
}

static int64_t se_int(struct serve_engine *s, const char *name)
{
    int64_t v = 0;
    return tide_engine_get_number(s->e, name, &v, NULL) == TIDE_OK ? v : 0;
}

static double se_float(struct serve_engine *s, const char *name)
{
    double v = 0;
    return tide_engine_get_number(s->e, name, NULL, &v) == TIDE_OK ? v : 0;
}

static void se_settings(struct serve_engine *s, struct serve_settings *st)
{
    *st = (struct serve_settings){
        .host = se_str(s, "serve.host"),
        .port = (int)se_int(s, "serve.port"),
        .max_queue = (int)se_int(s, "serve.max_queue"),
        .max_body = (uint64_t)se_int(s, "serve.max_body"),
        .api_key = se_str(s, "serve.api_key"),
        .model_name = se_str(s, "serve.model_name"),
        .max_connections = (int)se_int(s, "serve.max_connections"),
        .max_batch = (int)se_int(s, "serve.max_batch"),
        .shutdown_timeout = se_float(s, "serve.shutdown_timeout"),
        .read_timeout = se_float(s, "serve.read_timeout"),
        .default_seed = se_int(s, "serve.default_seed"),
        .shortest = !strcmp(se_str(s, "serve.schedule"), "shortest"),
    };
}

static void se_swallow(void *user, enum tide_log_level level, const char *msg)
{
    (void)user, (void)level, (void)msg;
}

/* Does the decoder take top_k and top_p? Plan a one-token prompt with each
 * set: a decoder that refuses one says why, and requests that set it are
 * refused with that reason, naming the field, before they reach the engine
 * (where the refusal would be a logged error: a client could fill the log).
 * The probe's own log lines are not shown; the server is not serving yet. */
static void se_probe(struct serve_engine *s)
{
    const int32_t id = 0;
    struct tide_request r;
    tide_request_init(&r);
    r.prompt_ids = &id;
    r.n_prompt_ids = 1;
    r.chat = 0;
    r.gen_length = s->info.block_length;
    struct tide_request_plan plan = {.size = sizeof plan};
    tide_log_set_sink(se_swallow, NULL);
    if (tide_engine_plan(s->e, &r, &plan) == TIDE_OK) { /* else nothing to learn */
        r.top_k = 2;
        if (tide_engine_plan(s->e, &r, &plan) != TIDE_OK)
            snprintf(s->no_top_k, sizeof s->no_top_k, "%s", tide_engine_error(s->e));
        r.top_k = -1;
        r.top_p = 0.5;
        if (tide_engine_plan(s->e, &r, &plan) != TIDE_OK)
            snprintf(s->no_top_p, sizeof s->no_top_p, "%s", tide_engine_error(s->e));
    }
    tide_log_set_sink(NULL, NULL);
}

/* A request's top_k or top_p that the decoder does not take (se_probe):
 * 400 naming it, logged at info level (a client's mistake, not the
 * server's). */
static int se_check_sampling(struct serve_engine *s, const struct serve_gen *g, bool log,
                             struct serve_error *err)
{
    const char *field = g->top_k > 0 && *s->no_top_k                    ? "top_k"
                        : g->top_p >= 0 && g->top_p < 1 && *s->no_top_p ? "top_p"
                                                                        : NULL;
    if (!field)
        return TIDE_OK;
    serve_error_set(err, 400, "invalid_request_error", NULL, field,
                    "'%s' is not supported by the decoder %s: %s", field, s->ei.decoder,
                    !strcmp(field, "top_k") ? s->no_top_k : s->no_top_p);
    if (log)
        tide_info("serve: refused a request: %s", err->message);
    return TIDE_E_UNSUPPORTED;
}

/* The end-of-text ids and their text. */
static int se_end_tokens(struct serve_engine *s)
{
    for (int i = 0; i < s->ei.n_end_ids && s->n_end < SE_MAX_END; i++) {
        const int32_t id = s->ei.end_ids[i];
        if (id < 0)
            continue;
        char *t = NULL;
        size_t len = 0;
        if (tide_engine_detokenize(s->e, &id, 1, &t, &len) != TIDE_OK)
            return TIDE_E_NOMEM;
        s->end_ids[s->n_end] = id;
        s->end_text[s->n_end] = t;
        s->end_len[s->n_end] = len;
        s->n_end++;
    }
    return TIDE_OK;
}

int serve_engine_open(const char *const *configs, int n_configs, const char *const *sets,
                      int n_sets, const struct tide_policy_costs *costs,
                      struct serve_settings *settings, struct serve_engine **out)
{
    *out = NULL;
    struct serve_engine *s = calloc(1, sizeof *s);
    if (!s)
        return TIDE_E_NOMEM;
    const struct tide_engine_args args = {
        .size = sizeof args,
        .config_paths = configs,
        .n_config_paths = n_configs,
        .sets = sets,
        .n_sets = n_sets,
        .policy_costs = costs,
    };
    int rc = tide_engine_open(&args, &s->e);
    if (rc != TIDE_OK)
        goto fail;
    se_settings(s, settings);
    s->ei.size = sizeof s->ei;
    if ((rc = tide_engine_get_info(s->e, &s->ei)) != TIDE_OK || (rc = se_end_tokens(s)) != TIDE_OK)
        goto fail;
    /* The chat template, in roles for "messages" (struct serve_chat). */
    if (serve_chat_init(s->ei.chat_template, s->ei.turn_end, &s->chat)) {
        rc = TIDE_E_NOMEM;
        goto fail;
    }
    snprintf(s->policy, sizeof s->policy, "%s", s->ei.policy);
    s->info = (struct serve_engine_info){
        .model_dir = s->ei.model,
        .policy = s->policy,
        .budget = s->ei.budget,
        .n_layers = s->ei.n_layers,
        .n_moe_layers = s->ei.n_moe_layers,
        .n_experts = s->ei.n_experts,
        .block_length = s->ei.block_length,
        .max_ctx = s->ei.max_ctx,
        .vocab = s->ei.vocab_size,
        .gen_length = se_int(s, "generation.gen_length"),
        .chat = s->chat.pre ? &s->chat : NULL,
        .eos_text = s->ei.eos_token && *s->ei.eos_token ? s->ei.eos_token : NULL,
    };
    /* How the decoder takes gen_length and steps, as its plan states:
     * blocks that start right after the prompt need gen_length in whole
     * blocks (LLaDA's generate() asserts it); steps shared among the blocks
     * are scaled by their number. */
    const int L = s->info.block_length;
    s->whole_blocks = s->ei.gen_multiple == L && L > 1;
    s->shared_steps = s->ei.steps_scope == 1;
    s->block_steps = s->ei.nominal_steps;
    se_probe(s);
    tide_debug("serve: decoder %s: %s; steps %s", s->ei.decoder,
               s->whole_blocks ? "gen_length in whole blocks" : "any gen_length",
               s->shared_steps ? "shared among the blocks" : "per block");
    /* [output] metrics collects the telemetry of every request. */
    s->metrics_path = se_str(s, "output.metrics");
    if ((rc = cli_output_open_path("metrics", s->metrics_path, "[output] metrics",
                                   se_int(s, "output.overwrite") != 0, &s->metrics)) != TIDE_OK)
        goto fail;
    tide_engine_set_metrics(s->e, s->metrics);
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
    if (s->e)
        tide_engine_set_metrics(s->e, NULL);
    if (s->metrics)
        cli_output_close(s->metrics, s->metrics_path, true);
    for (int i = 0; i < s->n_end; i++)
        tide_free(s->end_text[i]);
    serve_chat_free(&s->chat);
    tide_engine_close(s->e);
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
    bool stop;    /* our callback asked to stop */
    int32_t *ids; /* the last final block's ids, cut (see serve_block) */
    int64_t n_ids;
    char *text;
    size_t text_len;
    bool eos, full;
    bool pending; /* the last block needs a cut its text cannot give: after the call */
    int last_block;
    int64_t steps;
    int rc;
};

static int se_end_index(const struct serve_engine *s, int32_t id)
{
    for (int i = 0; i < s->n_end; i++)
        if (s->end_ids[i] == id)
            return i;
    return -1;
}

static int se_on_start(void *user, const struct tide_start_event *ev)
{
    struct se_gen *x = user;
    return x->g->on_start ? x->g->on_start(x->g->user, ev->prompt_tokens) : 0;
}

static int se_on_step(void *user, const struct tide_step_event *ev)
{
    struct se_gen *x = user;
    x->steps = ev->steps;
    if (x->g->on_step && x->g->on_step(x->g->user, ev->step_seconds))
        x->stop = true;
    return x->stop;
}

/* Keep ids[0..keep) and text as the state, and hand them on. */
static int se_deliver(struct se_gen *x, int block, const int32_t *ids, int64_t keep,
                      const char *text, size_t len, bool eos, bool full)
{
    int32_t *ci = malloc(sizeof *ci * (size_t)(keep ? keep : 1));
    char *ct = malloc(len + 1);
    if (!ci || !ct) {
        free(ci);
        free(ct);
        x->rc = TIDE_E_NOMEM;
        return 1;
    }
    memcpy(ci, ids, sizeof *ci * (size_t)keep);
    memcpy(ct, text, len);
    ct[len] = 0;
    free(x->ids);
    free(x->text);
    x->ids = ci;
    x->n_ids = keep;
    x->text = ct;
    x->text_len = len;
    x->eos = eos;
    x->full = full;
    x->last_block = block;
    const struct serve_block b = {
        .block = block,
        .ids = ci,
        .n_ids = keep,
        .text = ct,
        .text_len = len,
        .eos = eos,
        .full = full,
        .steps = x->steps,
    };
    return x->g->on_block && x->g->on_block(x->g->user, &b);
}

static int se_on_block(void *user, const struct tide_block_event *ev)
{
    struct se_gen *x = user;
    const struct serve_engine *s = x->s;
    int64_t keep = ev->n_ids;
    int end = -1;
    for (int64_t i = 0; i < ev->n_ids && end < 0; i++)
        if ((end = se_end_index(s, ev->ids[i])) >= 0)
            keep = i + 1;
    bool eos = end >= 0, full = false;
    if (keep >= x->max_tokens) {
        full = keep > x->max_tokens || !eos;
        if (keep > x->max_tokens) {
            /* The text of a prefix is not in the event: decode it once the
             * call returns (callbacks must not call into the engine). */
            x->pending = true;
            x->last_block = ev->block;
            free(x->ids);
            x->ids = malloc(sizeof *x->ids * (size_t)x->max_tokens);
            if (!x->ids) {
                x->rc = TIDE_E_NOMEM;
                return 1;
            }
            memcpy(x->ids, ev->ids, sizeof *x->ids * (size_t)x->max_tokens);
            x->n_ids = x->max_tokens;
            x->eos = false;
            x->full = true;
            x->stop = true;
            return 1;
        }
    }
    /* The text without the end-of-text token (the last id when present). */
    size_t len = ev->text_len;
    if (eos && len >= s->end_len[end] &&
        !memcmp(ev->text + len - s->end_len[end], s->end_text[end], s->end_len[end]))
        len -= s->end_len[end];
    if (se_deliver(x, ev->block, ev->ids, keep, ev->text, len, eos, full))
        x->stop = true;
    return x->stop;
}

/* Prompt tokens, checked against the model for gen_length tokens to
 * generate: an error names the field. */
static int se_prepare(struct serve_engine *s, const struct serve_gen *g, int64_t asked, int64_t gen,
                      int32_t **ids, size_t *n, struct serve_error *err)
{
    const int L = s->info.block_length;
    if (g->block_length > 0 && g->block_length != L) {
        serve_error_set(err, 400, "invalid_request_error", NULL, "block_length",
                        "'block_length' must be %d, the engine's (the model's attention mask is "
                        "built for it when the server starts)",
                        L);
        return TIDE_E_UNSUPPORTED;
    }
    const char *what = g->chat ? "messages" : "prompt";
    const struct serve_prompt *pr = g->prompt;
    if (pr->ids) {
        if (!(*ids = malloc(sizeof **ids * pr->n_ids)))
            return TIDE_E_NOMEM;
        memcpy(*ids, pr->ids, sizeof **ids * pr->n_ids);
        *n = pr->n_ids;
    } else {
        int32_t *t = NULL;
        int rc = tide_engine_tokenize(s->e, pr->text, pr->len, 0, &t, n);
        if (rc != TIDE_OK) {
            serve_error_set(err, 500, "server_error", NULL, what, "cannot tokenize the %s: %s",
                            what, tide_engine_error(s->e));
            return rc;
        }
        /* Ours to free with free(): copy out of the library's memory. */
        *ids = malloc(sizeof **ids * (*n ? *n : 1));
        if (*ids)
            memcpy(*ids, t, sizeof **ids * *n);
        tide_free(t);
        if (!*ids)
            return TIDE_E_NOMEM;
    }
    /* Positions: the prompt plus gen, rounded up to whole blocks (blocks
     * from position 0, or, with whole_blocks, from the prompt's end). */
    const int64_t P = (int64_t)*n, max_ctx = s->info.max_ctx;
    const int64_t one = s->whole_blocks ? P + L : (P + 1 + L - 1) / L * L,
                  need = s->whole_blocks ? P + gen : (P + gen + L - 1) / L * L;
    if (P < 1) {
        serve_error_set(err, 400, "invalid_request_error", NULL, what, "'%s' has no tokens", what);
        return TIDE_E_RANGE;
    }
    if (one > max_ctx) {
        serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded", what,
                        "the %s has %lld tokens; with one block of %d to generate it needs %lld "
                        "positions, beyond the model's context of %lld",
                        what, (long long)P, L, (long long)one, (long long)max_ctx);
        return TIDE_E_RANGE;
    }
    if (need > max_ctx) {
        /* The max_tokens asked for (or configured); a decoder of whole
         * blocks generates more, which the message says apart. */
        char whole[96] = "";
        if (gen != asked)
            snprintf(whole, sizeof whole, ", generated as %lld in whole blocks", (long long)gen);
        serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded",
                        g->max_tokens > 0 ? "max_tokens" : what,
                        "the %s (%lld tokens) plus max_tokens (%lld%s%s), in blocks of %d, needs "
                        "%lld positions, beyond the model's context of %lld",
                        what, (long long)P, (long long)asked,
                        g->max_tokens > 0 ? "" : ", [generation] gen_length", whole, L,
                        (long long)need, (long long)max_ctx);
        return TIDE_E_RANGE;
    }
    return TIDE_OK;
}

/* One generation in the engine's terms: the callbacks' state, the request
 * and its prompt ids (se_begin), turned into a result (se_end). */
struct se_req {
    struct se_gen x;
    struct tide_request r;
    int32_t *ids;
};

/* Check g and build its request. On failure *err says why (logged with
 * log, when it is a refusal that the engine would have logged). */
static int se_begin(struct serve_engine *s, const struct serve_gen *g, struct se_req *q, bool log,
                    struct serve_error *err)
{
    memset(q, 0, sizeof *q);
    q->x = (struct se_gen){
        .s = s, .g = g, .max_tokens = g->max_tokens > 0 ? g->max_tokens : s->info.gen_length};
    /* Whole blocks where the decoder wants them (the answer is cut at
     * max_tokens), and the steps per block asked for in each. */
    const int L = s->info.block_length;
    const int64_t gen = s->whole_blocks ? (q->x.max_tokens + L - 1) / L * L : q->x.max_tokens;
    const int64_t per_block = g->steps > 0 ? g->steps : s->block_steps;
    const int64_t steps = s->shared_steps ? per_block * ((gen + L - 1) / L) : g->steps;
    size_t n = 0;
    int rc = se_check_sampling(s, g, log, err);
    if (rc == TIDE_OK)
        rc = se_prepare(s, g, q->x.max_tokens, gen, &q->ids, &n, err);
    if (rc != TIDE_OK) {
        free(q->ids);
        q->ids = NULL;
        return rc;
    }
    struct tide_request *r = &q->r;
    tide_request_init(r);
    r->prompt_ids = q->ids;
    r->n_prompt_ids = n;
    r->chat = 0; /* the ids are final */
    r->gen_length = gen;
    r->steps = steps < INT32_MAX ? (int)steps : INT32_MAX; /* the engine checks the range */
    r->threshold = g->threshold;
    r->temperature = g->temperature;
    r->top_k = g->top_k;
    r->top_p = g->top_p;
    r->seed = g->seed;
    r->user = &q->x;
    r->on_start = se_on_start;
    r->on_step = se_on_step;
    r->on_block = se_on_block;
    return TIDE_OK;
}

/* The request ended with rc and res (freed here), why explaining a
 * failure: the serve result, or *err. */
static int se_end(struct serve_engine *s, struct se_req *q, int rc, struct tide_result *res,
                  const char *why, struct serve_result *out, struct serve_error *err)
{
    struct se_gen x = q->x;
    memset(out, 0, sizeof *out);
    free(q->ids);
    q->ids = NULL;
    if (x.rc != TIDE_OK)
        rc = x.rc;
    else if (rc == TIDE_E_CANCELLED && res)
        rc = TIDE_OK; /* stopped by a callback: what was final is the result */
    if (rc == TIDE_OK && x.pending) {
        char *t = NULL;
        size_t len = 0;
        if ((rc = tide_engine_detokenize(s->e, x.ids, (size_t)x.n_ids, &t, &len)) == TIDE_OK) {
            int32_t *keep = x.ids;
            x.ids = NULL; /* se_deliver replaces it */
            se_deliver(&x, x.last_block, keep, x.n_ids, t, len, false, true);
            free(keep);
            tide_free(t);
            rc = x.rc;
        }
    }
    if (rc == TIDE_OK && !x.text && !(x.text = calloc(1, 1)))
        rc = TIDE_E_NOMEM;
    if (rc != TIDE_OK) {
        const int http =
            rc == TIDE_E_CONFIG || rc == TIDE_E_RANGE || rc == TIDE_E_UNSUPPORTED ? 400 : 500;
        /* A refusal is the request's fault: the engine's reason alone. */
        serve_error_set(
            err, http, http == 400 ? "invalid_request_error" : "server_error", NULL, NULL, "%s%s",
            http == 400 ? "" : "generation failed: ", why && *why ? why : tide_status_str(rc));
        free(x.ids);
        free(x.text);
        tide_result_free(res);
        return rc;
    }
    /* A cancelled result counts no forwards; the generator's rule gives
     * them: one per whole prompt block, one per step, one K/V pass per block. */
    const int64_t forwards =
        res->cancelled && !res->forwards
            ? res->prompt_tokens / s->info.block_length + res->steps + res->blocks
            : res->forwards;
    *out = (struct serve_result){
        .prompt_tokens = res->prompt_tokens,
        .ids = x.ids,
        .n_ids = x.n_ids,
        .text = x.text,
        .text_len = x.text_len,
        .eos = x.eos,
        .full = x.full,
        .stopped = res->cancelled,
        .steps = res->steps,
        .forwards = forwards,
        .blocks = res->blocks,
        .seconds = res->seconds,
        .prefill_seconds = res->prefill_seconds,
        .offload = {.tokens = res->offload.tokens,
                    .hit_rows = res->offload.hit_rows,
                    .miss_rows = res->offload.miss_rows,
                    .promotions = res->offload.promotions,
                    .evictions = res->offload.evictions,
                    .weight_bytes = res->offload.weight_bytes,
                    .act_bytes = res->offload.act_bytes},
    };
    tide_result_free(res);
    return TIDE_OK;
}

int serve_engine_generate(struct serve_engine *s, const struct serve_gen *g,
                          struct serve_result *out, struct serve_error *err)
{
    memset(out, 0, sizeof *out);
    struct se_req q;
    int rc = se_begin(s, g, &q, true, err);
    if (rc != TIDE_OK)
        return rc;
    struct tide_result *res = NULL;
    rc = tide_engine_generate(s->e, &q.r, &res);
    return se_end(s, &q, rc, res, tide_engine_error(s->e), out, err);
}

/* ---- continuous batching ------------------------------------------------ */

struct se_batch {
    struct serve_engine *s;
    const struct serve_batch_feed *f;
};

/* One generation of the batch. */
struct se_breq {
    struct se_req q; /* first: the request's address is the struct's */
    const struct serve_gen *g;
};

static const struct tide_request *sb_next(void *user, bool idle)
{
    struct se_batch *b = user;
    for (;;) {
        const struct serve_gen *g = b->f->next(b->f->user, idle);
        if (!g)
            return NULL;
        struct serve_error err = {0};
        struct se_breq *x = calloc(1, sizeof *x);
        int rc = x ? se_begin(b->s, g, &x->q, true, &err) : TIDE_E_NOMEM;
        if (rc == TIDE_OK) {
            x->g = g;
            return &x->q.r;
        }
        if (!x)
            serve_error_set(&err, 500, "server_error", NULL, NULL, "out of memory");
        free(x);
        b->f->done(b->f->user, g, rc, NULL, &err);
    }
}

static void sb_done(void *user, const struct tide_request *req, int status, struct tide_result *res,
                    const char *error)
{
    struct se_batch *b = user;
    struct se_breq *x = (struct se_breq *)(void *)((char *)req - offsetof(struct se_breq, q.r));
    struct serve_result out;
    struct serve_error err = {0};
    const int rc = se_end(b->s, &x->q, status, res, error, &out, &err);
    b->f->done(b->f->user, x->g, rc, rc == TIDE_OK ? &out : NULL, &err);
    free(x);
}

static void sb_between(void *user)
{
    struct se_batch *b = user;
    b->f->between(b->f->user);
}

int serve_engine_run_batch(struct serve_engine *s, int max_batch, const struct serve_batch_feed *f)
{
    struct se_batch b = {.s = s, .f = f};
    const struct tide_batch_queue q = {
        .size = sizeof q,
        .user = &b,
        .next = sb_next,
        .done = sb_done,
        .between = f->between ? sb_between : NULL,
    };
    int rc = tide_engine_run_batch(s->e, max_batch, &q);
    if (rc != TIDE_OK)
        tide_error("serve: %s", tide_engine_error(s->e));
    return rc;
}

int serve_engine_work(struct serve_engine *s, const struct serve_gen *g, int64_t *work)
{
    *work = 0;
    struct serve_error err = {0};
    struct se_req q;
    int rc = se_begin(s, g, &q, false, &err);
    if (rc != TIDE_OK)
        return rc;
    struct tide_request_plan plan = {.size = sizeof plan};
    q.r.on_start = NULL;
    q.r.on_step = NULL;
    q.r.on_block = NULL;
    if ((rc = tide_engine_plan(s->e, &q.r, &plan)) == TIDE_OK)
        *work = plan.work;
    free(q.ids);
    return rc;
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

int serve_engine_tokenize(struct serve_engine *s, const char *text, size_t len, int32_t **ids,
                          size_t *n, struct serve_error *err)
{
    int32_t *t = NULL;
    int rc = tide_engine_tokenize(s->e, text, len, 0, &t, n);
    if (rc != TIDE_OK) {
        serve_error_set(err, 500, "server_error", NULL, "prompt", "cannot tokenize: %s",
                        tide_engine_error(s->e));
        return rc;
    }
    *ids = malloc(sizeof **ids * (*n ? *n : 1));
    if (*ids)
        memcpy(*ids, t, sizeof **ids * *n);
    tide_free(t);
    return *ids ? TIDE_OK : TIDE_E_NOMEM;
}

int serve_engine_detokenize(struct serve_engine *s, const int32_t *ids, size_t n, char **text,
                            size_t *len, struct serve_error *err)
{
    char *t = NULL;
    int rc = tide_engine_detokenize(s->e, ids, n, &t, len);
    if (rc != TIDE_OK) {
        serve_error_set(err, 500, "server_error", NULL, "tokens", "cannot decode: %s",
                        tide_engine_error(s->e));
        return rc;
    }
    *text = malloc(*len + 1);
    if (*text) {
        memcpy(*text, t, *len);
        (*text)[*len] = 0;
    }
    tide_free(t);
    return *text ? TIDE_OK : TIDE_E_NOMEM;
}

/* Bytes of the cleaned text of ids[0..k), an incomplete last character
 * left out; -1 when out of memory. */
static int64_t se_clean_len(struct serve_engine *s, const int32_t *ids, int64_t k)
{
    char *t = NULL;
    size_t len = 0, n = 0;
    if (tide_engine_detokenize(s->e, ids, (size_t)k, &t, &len) != TIDE_OK)
        return -1;
    char *c = serve_utf8_clean(t, len, false, &n);
    tide_free(t);
    const bool ok = c != NULL;
    free(c);
    return ok ? (int64_t)n : -1;
}

int serve_engine_count_tokens(struct serve_engine *s, const int32_t *ids, int64_t n, size_t len,
                              int64_t *count)
{
    /* Text grows with the ids: the least k whose text holds len bytes. */
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2, got = se_clean_len(s, ids, mid);
        if (got < 0)
            return TIDE_E_NOMEM;
        if (got >= (int64_t)len)
            hi = mid;
        else
            lo = mid + 1;
    }
    *count = lo;
    return TIDE_OK;
}

int serve_engine_layer_stats(struct serve_engine *s, struct serve_offload *out, int cap)
{
    const int n = s->info.n_moe_layers;
    for (int i = 0; i < n && i < cap; i++) {
        struct tide_offload_stats st = {.size = sizeof st};
        if (tide_engine_layer_stats(s->e, i, &st) != TIDE_OK)
            st = (struct tide_offload_stats){0};
        out[i] = (struct serve_offload){.tokens = st.tokens,
                                        .hit_rows = st.hit_rows,
                                        .miss_rows = st.miss_rows,
                                        .promotions = st.promotions,
                                        .evictions = st.evictions,
                                        .weight_bytes = st.weight_bytes,
                                        .act_bytes = st.act_bytes};
    }
    return n;
}
