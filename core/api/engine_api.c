/* The embedding API (tide/engine.h) on top of the engine's phases: open from
 * a configuration, generate with requests and callbacks, counters, options.
 * Every public call starts by forgetting the thread's logged errors and ends
 * by keeping them when it fails, so the caller gets the messages that the
 * failing code logged where it failed. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core_options.h"
#include "engine.h"
#include "log_errors.h"
#include "loop.h"
#include "tide/engine.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/shipped.h"
#include "tide/status.h"

#ifndef TIDE_VERSION_STRING
#define TIDE_VERSION_STRING "0.0.0"
#endif

/* The first published sizes: callers built against them are served. */
#define API_ARGS_V1    (offsetof(struct tide_engine_args, plugin_path) + sizeof(const char *))
#define API_REQUEST_V1 (offsetof(struct tide_request, on_logits) + sizeof(void (*)(void)))
#define API_STATS_V1   (offsetof(struct tide_offload_stats, device_seconds) + sizeof(double))
#define API_INFO_V1    (offsetof(struct tide_engine_info, expert_bytes) + sizeof(uint64_t))

static _Thread_local char api_thread_error[4096];

static double api_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void api_begin(struct tide_engine *e)
{
    tide_log_errors_clear();
    if (e)
        e->error[0] = 0;
}

/* Keep msg (NULL or "": the messages logged on this thread) of a failed
 * call for tide_engine_error. Returns rc. */
static int api_end_msg(struct tide_engine *e, int rc, const char *msg)
{
    if (rc == TIDE_OK)
        return rc;
    const char *m = msg && *msg ? msg : tide_log_errors();
    snprintf(api_thread_error, sizeof api_thread_error, "%s", *m ? m : tide_status_str(rc));
    if (e)
        snprintf(e->error, sizeof e->error, "%s", api_thread_error);
    return rc;
}

static int api_end(struct tide_engine *e, int rc)
{
    return api_end_msg(e, rc, NULL);
}

const char *tide_engine_error(const struct tide_engine *e)
{
    return e ? e->error : api_thread_error;
}

const char *tide_version(void)
{
    return TIDE_VERSION_STRING;
}

int tide_engine_api_version(void)
{
    return TIDE_ENGINE_API_VERSION;
}

void tide_free(void *p)
{
    free(p);
}

/* ---- open --------------------------------------------------------------- */

/* Scan the caller's folders first, then the default search path. */
static int api_scan(const char *plugin_path, struct tide_plugin_set **set)
{
    enum { MAX_DIRS = 96 };
    char *dirs[MAX_DIRS];
    int n = 0;
    char *copy = NULL, *save = NULL;
    if (plugin_path && !(copy = strdup(plugin_path)))
        return TIDE_E_NOMEM;
    for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t && n < MAX_DIRS / 2;
         t = strtok_r(NULL, ":", &save)) {
        if (!(dirs[n] = strdup(t)))
            break;
        n++;
    }
    free(copy);
    n += tide_plugin_default_dirs(dirs + n, MAX_DIRS - n);
    int rc = tide_plugins_scan_dirs((const char *const *)dirs, n, set);
    for (int i = 0; i < n; i++)
        free(dirs[i]);
    return rc;
}

/* A configuration file, found as the CLI finds it (tide/shipped.h: from the
 * working directory, else among the shipped files). */
static int api_load_file(struct tide_config *cfg, const char *given)
{
    char path[PATH_MAX];
    int rc = tide_shipped_path(given, "config", path, sizeof path);
    return rc == TIDE_OK ? tide_config_load_file(cfg, path) : rc;
}

/* Defaults, then the files, the text and the overrides; every bad override
 * is reported. */
static int api_config(const struct tide_engine_args *a, const struct tide_plugin_set *set,
                      struct tide_config **out)
{
    struct tide_config *cfg = tide_config_create();
    if (!cfg)
        return TIDE_E_NOMEM;
    int rc;
    if ((rc = tide_core_register_sections(cfg)) != TIDE_OK ||
        (rc = tide_config_add_plugins(cfg, set)) != TIDE_OK ||
        (a->config_path && (rc = api_load_file(cfg, a->config_path)) != TIDE_OK)) {
        tide_config_destroy(cfg);
        return rc;
    }
    for (int i = 0; i < a->n_config_paths; i++) {
        if (!a->config_paths || !a->config_paths[i]) {
            tide_error("tide_engine_open: config_paths[%d] is NULL", i);
            rc = TIDE_E_INVAL;
        } else {
            rc = api_load_file(cfg, a->config_paths[i]);
        }
        if (rc != TIDE_OK) {
            tide_config_destroy(cfg);
            return rc;
        }
    }
    if (a->config_text &&
        (rc = tide_config_load_text(cfg, "<config text>", a->config_text)) != TIDE_OK) {
        tide_config_destroy(cfg);
        return rc;
    }
    int bad = 0;
    for (int i = 0; i < a->n_sets; i++)
        if (!a->sets[i] || tide_config_set(cfg, a->sets[i]) != TIDE_OK)
            bad++;
    if (bad) {
        tide_config_destroy(cfg);
        return TIDE_E_CONFIG;
    }
    *out = cfg;
    return TIDE_OK;
}

static void api_policy_name(struct tide_engine *e)
{
    const struct tide_moe_shape *sh = e->moe ? tide_moe_get_shape(e->moe) : NULL;
    const bool offload = sh && tide_moe_budget(e->moe) < sh->n_experts && e->policy_pl;
    snprintf(e->policy_name, sizeof e->policy_name, "%s",
             offload ? e->policy_pl->desc->name : "none");
}

int tide_engine_open(const struct tide_engine_args *args, struct tide_engine **out)
{
    api_begin(NULL);
    if (!out || !args || args->size < API_ARGS_V1 || (args->n_sets > 0 && !args->sets)) {
        tide_error("tide_engine_open: %s", !out    ? "out is NULL"
                                           : !args ? "args is NULL"
                                           : args->size < API_ARGS_V1
                                               ? "args->size is too small (set it to sizeof(struct "
                                                 "tide_engine_args))"
                                               : "args->sets is NULL");
        if (out)
            *out = NULL;
        return api_end(NULL, TIDE_E_INVAL);
    }
    *out = NULL;
    struct tide_engine_args a = {0};
    memcpy(&a, args, args->size < sizeof a ? args->size : sizeof a);
    struct tide_plugin_set *set = NULL;
    struct tide_config *cfg = NULL;
    struct tide_engine *e = NULL;
    int rc = api_scan(a.plugin_path, &set);
    if (rc == TIDE_OK)
        rc = api_config(&a, set, &cfg);
    if (rc == TIDE_OK)
        rc = tide_engine_prepare(cfg, set, &e);
    if (rc != TIDE_OK) {
        tide_config_destroy(cfg);
        tide_plugins_free(set);
        return api_end(NULL, rc);
    }
    e->own_cfg = cfg;
    e->own_set = set;
    if (a.policy_costs) {
        tide_engine_set_policy_costs(e, a.policy_costs);
    } else if (*tide_opts_str(tide_config_section(cfg, "policy"), "profile")) {
        tide_error("[policy] profile = %s: the embedding API does not read hardware profiles; "
                   "load it and pass tide_engine_args.policy_costs (the tide command does)",
                   tide_opts_str(tide_config_section(cfg, "policy"), "profile"));
        tide_engine_close(e);
        return api_end(NULL, TIDE_E_CONFIG);
    }
    if ((rc = tide_engine_load(e, set)) != TIDE_OK) {
        tide_engine_close(e);
        return api_end(NULL, rc);
    }
    api_policy_name(e);
    const struct tide_moe_shape *sh = tide_moe_get_shape(e->moe);
    if (sh && sh->n_layers > 0) {
        if (!(e->layer_total = calloc((size_t)sh->n_layers, sizeof *e->layer_total))) {
            tide_engine_close(e);
            return api_end(NULL, TIDE_E_NOMEM);
        }
        e->n_layer_total = sh->n_layers;
    }
    *out = e;
    return TIDE_OK;
}

/* ---- generation --------------------------------------------------------- */

void tide_request_init(struct tide_request *r)
{
    if (!r)
        return;
    memset(r, 0, sizeof *r);
    r->size = sizeof *r;
    r->chat = -1;
    r->gen_length = -1;
    r->block_length = -1;
    r->steps = -1;
    r->threshold = -1;
    r->temperature = -1;
    r->top_k = -1;
    r->top_p = -1;
    r->seed = -1;
}

/* Set generation.key to a typed request field, checked like an INI value. */
static int api_set_num(struct tide_config *cfg, const char *key, bool is_int, int64_t i, double f)
{
    char v[64];
    if (is_int)
        snprintf(v, sizeof v, "%lld", (long long)i);
    else
        snprintf(v, sizeof v, "%.17g", f);
    return tide_config_set_value(cfg, "generation", key, v, "request");
}

/* Is section a decoder plugin's own section? */
static bool api_is_decoder_section(const struct tide_engine *e, const char *section)
{
    const struct tide_plugin_set *set = e->own_set;
    for (int i = 0; set && i < set->n; i++)
        if (set->items[i].desc->kind == TIDE_PLUGIN_DECODER &&
            !strcmp(set->items[i].desc->name, section))
            return true;
    return false;
}

/* The request's parameters: the engine's [generation] and decoder sections,
 * then the request's overrides, checked by the option tables (so a new
 * option works here without an API change). *tmp is the request's own
 * configuration when it overrides anything (the caller destroys it), else
 * NULL (the engine's applies). */
static int api_params(const struct tide_engine *e, const struct tide_request *r,
                      struct tide_config **tmp_out, bool *chat)
{
    const bool typed = r->gen_length >= 0 || r->block_length >= 0 || r->steps >= 0 ||
                       r->threshold >= 0 || r->temperature >= 0 || r->top_k >= 0 || r->top_p >= 0 ||
                       r->seed >= 0;
    struct tide_config *tmp = NULL;
    int rc = TIDE_OK;
    *tmp_out = NULL;
    if (typed || r->n_sets > 0) {
        if (!(tmp = tide_config_clone(e->cfg)))
            return TIDE_E_NOMEM;
        for (int i = 0; rc == TIDE_OK && i < r->n_sets; i++) {
            const char *s = r->sets ? r->sets[i] : NULL;
            const char *eq = s ? strchr(s, '=') : NULL;
            const char *dot = s ? strchr(s, '.') : NULL;
            char section[128], key[128];
            const size_t ls = dot ? (size_t)(dot - s) : 0;
            const size_t lk = dot && eq && eq > dot ? (size_t)(eq - dot - 1) : 0;
            if (ls && ls < sizeof section) {
                memcpy(section, s, ls);
                section[ls] = 0;
            } else {
                section[0] = 0;
            }
            if (!s || !eq || !ls || ls >= sizeof section || !lk || lk >= sizeof key ||
                (strcmp(section, "generation") && !api_is_decoder_section(e, section))) {
                tide_error("request override '%s': expected generation.key=value or "
                           "decoder-NAME.key=value (only [generation] options change per request, "
                           "and the decoders' own)",
                           s ? s : "(null)");
                rc = TIDE_E_CONFIG;
                break;
            }
            memcpy(key, dot + 1, lk);
            key[lk] = 0;
            rc = tide_config_set_value(tmp, section, key, eq + 1, "request");
        }
        if (rc == TIDE_OK && r->gen_length >= 0)
            rc = api_set_num(tmp, "gen_length", true, r->gen_length, 0);
        if (rc == TIDE_OK && r->block_length >= 0)
            rc = api_set_num(tmp, "block_length", true, r->block_length, 0);
        if (rc == TIDE_OK && r->steps >= 0)
            rc = api_set_num(tmp, "steps", true, r->steps, 0);
        if (rc == TIDE_OK && r->threshold >= 0)
            rc = api_set_num(tmp, "threshold", false, 0, r->threshold);
        if (rc == TIDE_OK && r->temperature >= 0)
            rc = api_set_num(tmp, "temperature", false, 0, r->temperature);
        if (rc == TIDE_OK && r->top_k >= 0)
            rc = api_set_num(tmp, "top_k", true, r->top_k, 0);
        if (rc == TIDE_OK && r->top_p >= 0)
            rc = api_set_num(tmp, "top_p", false, 0, r->top_p);
        if (rc == TIDE_OK && r->seed >= 0)
            rc = api_set_num(tmp, "seed", true, r->seed, 0);
    }
    const struct tide_config *cfg = tmp ? tmp : e->cfg;
    if (rc == TIDE_OK) {
        const struct tide_opts *g = tide_config_section(cfg, "generation");
        const int block = (int)tide_opts_int(g, "block_length");
        *chat = r->chat >= 0 ? r->chat != 0 : tide_opts_bool(g, "chat");
        if (block != e->block) {
            tide_error("request: block_length %d differs from the %d this engine's model was "
                       "opened with (its attention mask is built for it); open an engine with "
                       "generation.block_length=%d",
                       block, e->block, block);
            rc = TIDE_E_UNSUPPORTED;
        } else if (strcmp(tide_opts_str(g, "decoder"),
                          tide_opts_str(tide_config_section(e->cfg, "generation"), "decoder"))) {
            tide_error("request: [generation] decoder differs from this engine's (%s): the "
                       "decoder is chosen when the engine opens",
                       e->dec.pl->desc->name);
            rc = TIDE_E_UNSUPPORTED;
        }
    }
    if (rc != TIDE_OK)
        tide_config_destroy(tmp);
    else
        *tmp_out = tmp;
    return rc;
}

/* One generation in progress: the request, its callbacks' state, and the
 * last final blocks (for a cancelled result). */
struct api_gen {
    struct tide_engine *e;
    const struct tide_request *r;
    int n_blocks;
    double t0, t_step;
    int64_t tokens, steps, edits;
    int blocks;   /* blocks final so far */
    int32_t *ids; /* every token generated so far, as of the last block */
    int64_t n_ids, cap_ids;
    char *text; /* their text */
    size_t text_len, delivered;
    int rc;      /* a failure inside a hook (out of memory) */
    bool cancel; /* a callback asked to stop this request */
};

/* Length of the prefix of s[0..len) that does not end inside a UTF-8
 * sequence: a lead byte near the end whose continuation bytes have not all
 * arrived yet is held back. Malformed bytes are passed on as they are. */
static size_t api_utf8_whole(const char *s, size_t len)
{
    size_t i = len;
    int cont = 0;
    while (i > 0 && cont < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        cont++;
    }
    if (i == 0)
        return len;
    const unsigned char c = (unsigned char)s[i - 1];
    const int need = c >= 0xF8 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    return cont < need ? i - 1 : len;
}

/* Text of the ids the tokenizer knows; synthetic checkpoints may have a
 * vocabulary larger than their tokenizer, and such ids have no text. */
static int api_decode(const struct tide_engine *e, const int32_t *ids, int64_t n, char **text,
                      size_t *len, int64_t *unknown)
{
    int32_t *known = malloc(sizeof *known * (size_t)(n ? n : 1));
    if (!known)
        return TIDE_E_NOMEM;
    int64_t k = 0, u = 0;
    const int32_t size = tide_tokenizer_size(e->tok);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < size && tide_tokenizer_piece(e->tok, ids[i]))
            known[k++] = ids[i];
        else
            u++;
    }
    int rc = tide_tokenizer_decode(e->tok, known, (size_t)k, text, len);
    free(known);
    if (unknown)
        *unknown = u;
    return rc;
}

static int ag_step_begin(void *u, int block, int step)
{
    struct api_gen *g = u;
    if (g->cancel || atomic_load(&g->e->cancel))
        return TIDE_E_CANCELLED;
    g->t_step = api_now();
    return TIDE_OK;
}

static void ag_step_logits(void *u, int64_t block, int step, const float *logits, int rows,
                           int vocab)
{
    struct api_gen *g = u;
    const struct tide_logits_event ev = {
        .size = sizeof ev,
        .block = block,
        .step = step,
        .logits = logits,
        .rows = rows,
        .vocab = vocab,
    };
    g->r->on_logits(g->r->user, &ev);
}

static void ag_step_rows(void *u, int64_t block, int step, int n, const int32_t *pos,
                         const float *const *rows, int vocab)
{
    struct api_gen *g = u;
    const struct tide_rows_event ev = {
        .size = sizeof ev,
        .block = block,
        .step = step,
        .n = n,
        .pos = pos,
        .rows = rows,
        .vocab = vocab,
    };
    g->r->on_rows(g->r->user, &ev);
}

static void ag_step_end(void *u, const struct tide_decoder_step *s)
{
    struct api_gen *g = u;
    const int block = s->block, step = s->step, committed = s->committed, remaining = s->remaining;
    g->tokens += committed;
    g->edits += s->edited;
    g->steps++;
    if (!g->r->on_step)
        return;
    const double now = api_now();
    const struct tide_step_event ev = {
        .size = sizeof ev,
        .block = block,
        .step = step,
        .n_blocks = g->n_blocks,
        .committed = committed,
        .remaining = remaining,
        .tokens = g->tokens,
        .steps = g->steps,
        .step_seconds = now - g->t_step,
        .seconds = now - g->t0,
        .edited = s->edited,
        .edits = g->edits,
    };
    if (g->r->on_step(g->r->user, &ev))
        g->cancel = true;
}

static void ag_block_end(void *u, int block, const int32_t *gen, int64_t n)
{
    struct api_gen *g = u;
    g->blocks++;
    if (g->rc != TIDE_OK)
        return;
    if (n > g->cap_ids) {
        int32_t *ids = realloc(g->ids, sizeof *ids * (size_t)n);
        if (!ids) {
            g->rc = TIDE_E_NOMEM;
            g->cancel = true;
            return;
        }
        g->ids = ids;
        g->cap_ids = n;
    }
    memcpy(g->ids, gen, sizeof *gen * (size_t)n);
    g->n_ids = n;
    free(g->text);
    g->text = NULL;
    if ((g->rc = api_decode(g->e, gen, n, &g->text, &g->text_len, NULL)) != TIDE_OK) {
        g->cancel = true;
        return;
    }
    if (!g->r->on_block)
        return;
    size_t whole = api_utf8_whole(g->text, g->text_len);
    size_t from = g->delivered < whole ? g->delivered : whole;
    const struct tide_block_event ev = {
        .size = sizeof ev,
        .block = block,
        .n_blocks = g->n_blocks,
        .ids = g->ids,
        .n_ids = g->n_ids,
        .text = g->text,
        .text_len = g->text_len,
        .delta = g->text + from,
        .delta_len = whole - from,
        .steps = g->steps,
        .seconds = api_now() - g->t0,
    };
    g->delivered = whole > g->delivered ? whole : g->delivered;
    if (g->r->on_block(g->r->user, &ev))
        g->cancel = true;
}

static void api_counters_sub(const struct tide_moe_counters *a, const struct tide_moe_counters *b,
                             struct tide_moe_counters *d)
{
    d->tokens = a->tokens - b->tokens;
    d->active = a->active - b->active;
    d->hit_rows = a->hit_rows - b->hit_rows;
    d->miss_rows = a->miss_rows - b->miss_rows;
    d->promotions = a->promotions - b->promotions;
    d->evictions = a->evictions - b->evictions;
    d->weight_bytes = a->weight_bytes - b->weight_bytes;
    d->act_bytes = a->act_bytes - b->act_bytes;
    d->host_seconds = a->host_seconds - b->host_seconds;
    d->device_seconds = a->device_seconds - b->device_seconds;
}

static void api_counters_add(struct tide_moe_counters *a, const struct tide_moe_counters *b)
{
    tide_traffic_add(&a->traffic, &b->traffic);
    a->host_seconds += b->host_seconds;
    a->device_seconds += b->device_seconds;
}

static void api_stats(const struct tide_moe_counters *c, struct tide_offload_stats *s)
{
    const uint64_t rows = c->hit_rows + c->miss_rows;
    *s = (struct tide_offload_stats){
        .size = sizeof *s,
        .tokens = c->tokens,
        .active = c->active,
        .hit_rows = c->hit_rows,
        .miss_rows = c->miss_rows,
        .promotions = c->promotions,
        .evictions = c->evictions,
        .weight_bytes = c->weight_bytes,
        .act_bytes = c->act_bytes,
        .hit_rate = rows ? (double)c->hit_rows / (double)rows : 0.0,
        .host_seconds = c->host_seconds,
        .device_seconds = c->device_seconds,
    };
}

/* The prompt's ids: the caller's, or the text encoded (with the template). */
static int api_prompt(struct tide_engine *e, const struct tide_request *r, bool chat, int32_t **ids,
                      size_t *n)
{
    if (!r->prompt_ids)
        return tide_engine_encode(e, r->prompt, chat, ids, n);
    *ids = malloc(sizeof **ids * (r->n_prompt_ids ? r->n_prompt_ids : 1));
    if (!*ids)
        return TIDE_E_NOMEM;
    if (r->n_prompt_ids)
        memcpy(*ids, r->prompt_ids, sizeof **ids * r->n_prompt_ids);
    *n = r->n_prompt_ids;
    return TIDE_OK;
}

void tide_result_free(struct tide_result *r)
{
    if (!r)
        return;
    free(r->ids);
    free(r->text);
    free(r);
}

/* The result of a finished (or cancelled) generation. */
static int api_result(struct api_gen *g, const struct tide_gen_result *gr, bool cancelled,
                      struct tide_result *res)
{
    const int32_t *ids = cancelled ? g->ids : gr->ids;
    const int64_t n = cancelled ? g->n_ids : gr->n;
    res->ids = malloc(sizeof *res->ids * (size_t)(n ? n : 1));
    if (!res->ids)
        return TIDE_E_NOMEM;
    if (n)
        memcpy(res->ids, ids, sizeof *ids * (size_t)n);
    res->n_ids = n;
    res->cancelled = cancelled;
    if (cancelled) {
        res->steps = g->steps;
        res->edits = g->edits;
        res->blocks = g->blocks;
        res->seconds = api_now() - g->t0;
    } else {
        res->steps = gr->steps;
        res->edits = gr->edits;
        res->forwards = gr->forwards;
        res->model_forwards = gr->model_forwards;
        res->context_tokens = gr->prompt_tokens;
        res->inserted_tokens = gr->inserted;
        res->attended = gr->attended;
        res->computed = gr->computed;
        res->blocks = gr->blocks;
        res->stopped = gr->stopped;
        res->seconds = gr->seconds;
        res->prefill_seconds = gr->prefill_seconds;
    }
    return api_decode(g->e, res->ids, n, &res->text, &res->text_len, &res->unknown_ids);
}

/* A request being served: checked, with its decoder and prompt ready
 * (api_req_prepare), begun (api_req_start: its result, on_start), run alone
 * or in a batch, then finished (api_req_finish). */
struct api_req {
    struct tide_request r;
    struct tide_config *tmp; /* the request's overrides, or NULL */
    struct tide_decode own, *dec;
    struct tide_decoder_plan plan;
    bool chat;
    int32_t *ids; /* the prompt */
    size_t n;
    struct tide_result *res;
    struct api_gen g;
    struct tide_gen_hooks hooks;
    struct tide_gen_result gr;
    const struct tide_request *req; /* the caller's */
    struct tide_loop_seq seq;       /* the engine loop's view of it */
};

/* Check req and get it ready to run: overrides, decoder, prompt ids, plan.
 * who names the calling function in messages. q must not move afterwards. */
static int api_req_prepare(struct tide_engine *e, const struct tide_request *req, struct api_req *q,
                           const char *who)
{
    memset(q, 0, sizeof *q);
    q->req = req;
    q->dec = e ? &e->dec : NULL;
    if (!e || !req || req->size < API_REQUEST_V1 || (!req->prompt && !req->prompt_ids)) {
        tide_error("%s: %s", who,
                   !e     ? "the engine is NULL"
                   : !req ? "the request is NULL"
                   : req->size < API_REQUEST_V1
                       ? "request size is too small (initialise it with tide_request_init)"
                       : "the request has no prompt (set prompt or prompt_ids)");
        return TIDE_E_INVAL;
    }
    tide_request_init(&q->r);
    memcpy(&q->r, req, req->size < sizeof q->r ? req->size : sizeof q->r);
    q->g = (struct api_gen){.e = e, .r = &q->r};
    int rc = api_params(e, &q->r, &q->tmp, &q->chat);
    if (rc == TIDE_OK && q->tmp && (rc = tide_engine_decode_open(e, q->tmp, &q->own)) == TIDE_OK)
        q->dec = &q->own;
    if (rc == TIDE_OK)
        rc = api_prompt(e, &q->r, q->chat, &q->ids, &q->n);
    if (rc == TIDE_OK)
        rc = tide_decode_plan(q->dec, (int64_t)q->n, e->mops->info(e->model)->max_ctx, &q->plan);
    return rc;
}

/* Begin the request: its result's parameters, on_start, the hooks. */
static int api_req_start(struct tide_engine *e, struct api_req *q)
{
    if (!(q->res = calloc(1, sizeof *q->res)))
        return TIDE_E_NOMEM;
    const struct tide_opts *go = tide_config_section(q->tmp ? q->tmp : e->cfg, "generation");
    *q->res = (struct tide_result){
        .size = sizeof *q->res,
        .prompt_tokens = (int64_t)q->n,
        .gen_length = tide_opts_int(go, "gen_length"),
        .block_length = (int)tide_opts_int(go, "block_length"),
        .steps_per_block = q->plan.nominal_steps,
        .threshold = tide_opts_float(go, "threshold"),
        .temperature = tide_opts_float(go, "temperature"),
        .top_k = (int)tide_opts_int(go, "top_k"),
        .top_p = tide_opts_float(go, "top_p"),
        .seed = tide_opts_int(go, "seed"),
        .chat = q->chat,
    };
    const struct tide_result *res = q->res;
    q->g.n_blocks = q->plan.blocks;
    q->g.t0 = api_now();
    if (q->r.on_start) {
        const struct tide_start_event ev = {
            .size = sizeof ev,
            .prompt_tokens = (int64_t)q->n,
            .gen_length = res->gen_length,
            .block_length = res->block_length,
            .steps = q->plan.nominal_steps,
            .threshold = res->threshold,
            .temperature = res->temperature,
            .top_k = res->top_k,
            .top_p = res->top_p,
            .seed = res->seed,
            .chat = q->chat,
            .recompute = tide_opts_bool(go, "recompute"),
            .n_blocks = q->g.n_blocks,
            .decoder = q->dec->name,
            .decoder_settings = q->dec->settings,
            .max_steps = q->plan.max_steps,
        };
        if (q->r.on_start(q->r.user, &ev))
            q->g.cancel = true;
    }
    q->hooks = (struct tide_gen_hooks){
        .user = &q->g,
        .step_begin = ag_step_begin,
        .step_logits = q->r.on_logits ? ag_step_logits : NULL,
        .step_rows = q->r.on_rows ? ag_step_rows : NULL,
        .step_end = ag_step_end,
        .block_end = ag_block_end,
    };
    return TIDE_OK;
}

/* The request ran with status rc: its result (kept in *out on TIDE_OK and
 * TIDE_E_CANCELLED, else freed), and everything the request held freed.
 * Returns the request's final status. */
static int api_req_finish(struct api_req *q, int rc, struct tide_result **out)
{
    if (q->g.rc != TIDE_OK)
        rc = q->g.rc; /* a hook's failure stopped the generation as a cancel */
    if (q->res && (rc == TIDE_OK || rc == TIDE_E_CANCELLED)) {
        int rrc = api_result(&q->g, &q->gr, rc == TIDE_E_CANCELLED, q->res);
        if (rrc != TIDE_OK)
            rc = rrc;
    }
    tide_decode_close(&q->own);
    tide_config_destroy(q->tmp);
    free(q->ids);
    free(q->gr.ids);
    free(q->g.ids);
    free(q->g.text);
    if (rc == TIDE_OK || rc == TIDE_E_CANCELLED)
        *out = q->res;
    else
        tide_result_free(q->res);
    q->res = NULL;
    return rc;
}

/* The dispatcher's counters before a run, to add what it moved to the
 * engine's totals afterwards (api_totals_end). */
struct api_totals {
    struct tide_moe_counters before;
    struct tide_moe_counters *layer_before; /* [n_layer_total] */
};

static int api_totals_begin(struct tide_engine *e, struct api_totals *t)
{
    t->layer_before = NULL;
    if (e->n_layer_total &&
        !(t->layer_before = malloc(sizeof *t->layer_before * (size_t)e->n_layer_total)))
        return TIDE_E_NOMEM;
    for (int l = 0; l < e->n_layer_total; l++)
        tide_moe_layer_totals(e->moe, l, &t->layer_before[l]);
    tide_moe_totals(e->moe, &t->before);
    return TIDE_OK;
}

/* Add the counters since api_totals_begin to the engine's totals; *delta
 * gets them. */
static void api_totals_end(struct tide_engine *e, struct api_totals *t,
                           struct tide_moe_counters *delta)
{
    tide_moe_totals(e->moe, delta);
    api_counters_sub(delta, &t->before, delta);
    api_counters_add(&e->total, delta);
    for (int l = 0; l < e->n_layer_total; l++) {
        struct tide_moe_counters now;
        tide_moe_layer_totals(e->moe, l, &now);
        api_counters_sub(&now, &t->layer_before[l], &now);
        api_counters_add(&e->layer_total[l], &now);
    }
    free(t->layer_before);
    t->layer_before = NULL;
}

/* ---- the engine loop over requests -------------------------------------- */

/* A run of the engine loop over requests: a queue's (a batch) or one. */
struct api_run {
    struct tide_engine *e;
    const struct tide_batch_queue *q; /* NULL: the single request `one` */
    struct api_req *one;
    bool one_taken, one_done;
    int one_rc;
    struct tide_result *one_res;
    char one_error[1024];
};

/* The loop's sequence of a prepared request. */
static void api_req_seq(struct api_req *x, void *user, int64_t trace_id)
{
    x->seq = (struct tide_loop_seq){
        .d = x->dec,
        .prompt = x->ids,
        .n = (int64_t)x->n,
        .hooks = &x->hooks,
        .user = user,
        .trace_id = trace_id,
    };
}

static struct tide_loop_seq *ar_next(void *u, bool idle)
{
    struct api_run *ar = u;
    if (!ar->q) {
        if (ar->one_taken)
            return NULL;
        ar->one_taken = true;
        return &ar->one->seq;
    }
    for (;;) {
        const struct tide_request *req = ar->q->next(ar->q->user, idle);
        if (!req)
            return NULL;
        struct api_req *x = calloc(1, sizeof *x);
        if (!x) {
            ar->q->done(ar->q->user, req, TIDE_E_NOMEM, NULL, tide_status_str(TIDE_E_NOMEM));
            continue;
        }
        tide_log_errors_clear(); /* the messages of this request's checks only */
        int rc = api_req_prepare(ar->e, req, x, "tide_engine_run_batch");
        if (rc != TIDE_OK) {
            struct tide_result *res = NULL;
            rc = api_req_finish(x, rc, &res);
            const char *m = tide_log_errors();
            ar->q->done(ar->q->user, req, rc, res, *m ? m : tide_status_str(rc));
            free(x);
            continue;
        }
        api_req_seq(x, x, -1);
        return &x->seq;
    }
}

static int ar_start(void *u, struct tide_loop_seq *s)
{
    struct api_run *ar = u;
    struct api_req *x = ar->q ? s->user : ar->one;
    return api_req_start(ar->e, x);
}

static void ar_done(void *u, struct tide_loop_seq *s)
{
    struct api_run *ar = u;
    struct api_req *x = ar->q ? s->user : ar->one;
    struct tide_result *res = NULL;
    x->gr = s->result;
    const int rc = api_req_finish(x, s->rc, &res);
    const char *why = rc == TIDE_OK || rc == TIDE_E_CANCELLED ? ""
                      : s->error[0]                           ? s->error
                                                              : tide_status_str(rc);
    if (!ar->q) {
        ar->one_done = true;
        ar->one_rc = rc;
        ar->one_res = res;
        snprintf(ar->one_error, sizeof ar->one_error, "%s", why);
        return;
    }
    ar->q->done(ar->q->user, x->req, rc, res, why);
    free(x);
}

static void ar_between(void *u)
{
    struct api_run *ar = u;
    ar->q->between(ar->q->user);
}

/* Run the engine loop over ar's requests, max_batch at a time, with the
 * engine's telemetry outputs. */
static int api_loop(struct api_run *ar, int max_batch)
{
    struct tide_engine *e = ar->e;
    FILE *metrics = e->outputs ? e->outputs->metrics : NULL;
    struct tide_loop_env env;
    tide_engine_loop_env(e, metrics, &env);
    const struct tide_loop_feed feed = {
        .user = ar,
        .next = ar_next,
        .start = ar_start,
        .done = ar_done,
        .between = ar->q && ar->q->between ? ar_between : NULL,
    };
    atomic_store(&e->cancel, 0);
    tide_moe_set_metrics(e->moe, metrics);
    tide_moe_set_trace(e->moe, e->outputs ? e->outputs->trace : NULL);
    const int rc = tide_loop_run(&env, max_batch, &feed);
    tide_moe_set_metrics(e->moe, NULL);
    tide_moe_set_trace(e->moe, NULL);
    atomic_store(&e->cancel, 0);
    return rc;
}

int tide_engine_generate(struct tide_engine *e, const struct tide_request *req,
                         struct tide_result **out)
{
    api_begin(e);
    if (out)
        *out = NULL;
    if (!out) {
        tide_error("tide_engine_generate: out is NULL");
        return api_end(e, TIDE_E_INVAL);
    }
    struct api_req q;
    int rc = api_req_prepare(e, req, &q, "tide_engine_generate");
    if (rc != TIDE_OK)
        return api_end(e, api_req_finish(&q, rc, out));
    struct api_totals t = {0};
    if ((rc = api_totals_begin(e, &t)) != TIDE_OK)
        return api_end(e, api_req_finish(&q, rc, out));
    struct api_run ar = {.e = e, .one = &q};
    api_req_seq(&q, &q, e->outputs ? (int64_t)e->outputs->prompt_id : 0);
    rc = api_loop(&ar, 1);
    struct tide_moe_counters delta;
    api_totals_end(e, &t, &delta);
    if (!ar.one_done) {
        /* The loop failed before the request ended (out of memory). */
        rc = api_req_finish(&q, rc != TIDE_OK ? rc : TIDE_E_INVAL, out);
    } else if (rc != TIDE_OK) {
        tide_result_free(ar.one_res); /* the loop's own failure wins */
    } else {
        rc = ar.one_rc;
        *out = ar.one_res;
        if (*out)
            api_stats(&delta, &(*out)->offload);
    }
    return api_end_msg(e, rc, ar.one_error);
}

int tide_engine_run_batch(struct tide_engine *e, int max_batch, const struct tide_batch_queue *q)
{
    api_begin(e);
    if (!e || !q || q->size < sizeof *q || !q->next || !q->done || max_batch < 1) {
        tide_error("tide_engine_run_batch: %s", !e                    ? "the engine is NULL"
                                                : !q                  ? "the queue is NULL"
                                                : q->size < sizeof *q ? "queue size is too small"
                                                : max_batch < 1 ? "max_batch must be at least 1"
                                                                : "the queue needs next and done");
        return api_end(e, TIDE_E_INVAL);
    }
    struct api_totals t;
    int rc = api_totals_begin(e, &t);
    if (rc != TIDE_OK)
        return api_end(e, rc);
    struct api_run ar = {.e = e, .q = q};
    rc = api_loop(&ar, max_batch);
    struct tide_moe_counters delta;
    api_totals_end(e, &t, &delta);
    return api_end(e, rc);
}

int tide_engine_plan(struct tide_engine *e, const struct tide_request *req,
                     struct tide_request_plan *out)
{
    api_begin(e);
    if (!out || out->size < sizeof(uint32_t)) {
        tide_error("tide_engine_plan: %s", !out ? "out is NULL"
                                                : "out->size is too small (set it to "
                                                  "sizeof(struct tide_request_plan))");
        return api_end(e, TIDE_E_INVAL);
    }
    struct api_req q;
    int rc = api_req_prepare(e, req, &q, "tide_engine_plan");
    if (rc == TIDE_OK) {
        const struct tide_decoder_plan *p = &q.plan;
        const int slots = p->slots > 0 ? p->slots : 1;
        const struct tide_request_plan pl = {
            .size = sizeof pl,
            .prompt_tokens = (int64_t)q.n,
            .n_ctx = p->n_ctx,
            .max_output = p->max_output,
            .blocks = p->blocks,
            .max_steps = p->max_steps,
            .nominal_steps = p->nominal_steps,
            .max_forwards = p->max_forwards,
            .work = p->max_forwards * p->max_tokens * slots,
        };
        const uint32_t size = out->size < sizeof pl ? out->size : (uint32_t)sizeof pl;
        memcpy(out, &pl, size);
        out->size = size;
    }
    struct tide_result *none = NULL;
    api_req_finish(&q, rc, &none);
    tide_result_free(none);
    return api_end(e, rc);
}

void tide_engine_set_metrics(struct tide_engine *e, FILE *f)
{
    if (!e)
        return;
    e->own_outputs = (struct tide_engine_outputs){.metrics = f};
    e->outputs = f ? &e->own_outputs : NULL;
}

/* generate_batch's queue: the array in order. */
struct api_array {
    const struct tide_request *const *reqs;
    int n, next;
    struct tide_result **results;
    int *status;
    bool *ended; /* [n] done() came for reqs[i] */
};

static const struct tide_request *aa_next(void *u, bool idle)
{
    (void)idle;
    struct api_array *a = u;
    return a->next < a->n ? a->reqs[a->next++] : NULL;
}

static void aa_done(void *u, const struct tide_request *req, int status, struct tide_result *res,
                    const char *error)
{
    (void)error; /* logged where it happened */
    struct api_array *a = u;
    for (int i = 0; i < a->n; i++) {
        if (a->reqs[i] == req && !a->ended[i]) {
            a->ended[i] = true;
            a->results[i] = res;
            a->status[i] = status;
            return;
        }
    }
    tide_result_free(res);
}

int tide_engine_generate_batch(struct tide_engine *e, const struct tide_request *const *reqs, int n,
                               int max_batch, struct tide_result **results, int *status)
{
    if (!reqs || !results || !status || n < 0) {
        api_begin(e);
        tide_error("tide_engine_generate_batch: %s", n < 0   ? "n is negative"
                                                     : !reqs ? "reqs is NULL"
                                                             : "results or status is NULL");
        return api_end(e, TIDE_E_INVAL);
    }
    for (int i = 0; i < n; i++) {
        results[i] = NULL;
        status[i] = TIDE_E_INVAL; /* until done */
    }
    struct api_array a = {.reqs = reqs, .n = n, .results = results, .status = status};
    if (!(a.ended = calloc((size_t)(n ? n : 1), sizeof *a.ended))) {
        api_begin(e);
        return api_end(e, TIDE_E_NOMEM);
    }
    const struct tide_batch_queue q = {
        .size = sizeof q, .user = &a, .next = aa_next, .done = aa_done};
    int rc = tide_engine_run_batch(e, max_batch, &q);
    free(a.ended);
    return rc;
}

void tide_engine_set_outputs(struct tide_engine *e, const struct tide_engine_outputs *o)
{
    e->outputs = o;
}

void tide_engine_cancel(struct tide_engine *e)
{
    if (e)
        atomic_store(&e->cancel, 1);
}

/* ---- counters, information, options ------------------------------------- */

int tide_engine_stats(struct tide_engine *e, struct tide_offload_stats *out)
{
    api_begin(e);
    if (!e || !out || out->size < API_STATS_V1) {
        tide_error("tide_engine_stats: %s", !e     ? "the engine is NULL"
                                            : !out ? "out is NULL"
                                                   : "out->size is too small (set it to "
                                                     "sizeof(struct tide_offload_stats))");
        return api_end(e, TIDE_E_INVAL);
    }
    struct tide_offload_stats s;
    api_stats(&e->total, &s);
    const uint32_t size = out->size < sizeof s ? out->size : (uint32_t)sizeof s;
    memcpy(out, &s, size);
    out->size = size;
    return TIDE_OK;
}

int tide_engine_layer_stats(struct tide_engine *e, int layer, struct tide_offload_stats *out)
{
    api_begin(e);
    if (!e || !out || out->size < API_STATS_V1) {
        tide_error("tide_engine_layer_stats: %s", !e     ? "the engine is NULL"
                                                  : !out ? "out is NULL"
                                                         : "out->size is too small (set it to "
                                                           "sizeof(struct tide_offload_stats))");
        return api_end(e, TIDE_E_INVAL);
    }
    if (layer < 0 || layer >= e->n_layer_total) {
        tide_error("tide_engine_layer_stats: layer %d: the model has %d MoE layers (0..%d)", layer,
                   e->n_layer_total, e->n_layer_total - 1);
        return api_end(e, TIDE_E_RANGE);
    }
    struct tide_offload_stats s;
    api_stats(&e->layer_total[layer], &s);
    const uint32_t size = out->size < sizeof s ? out->size : (uint32_t)sizeof s;
    memcpy(out, &s, size);
    out->size = size;
    return TIDE_OK;
}

uint64_t tide_engine_forwards(const struct tide_engine *e)
{
    return e ? e->forwards : 0;
}

void tide_engine_reset_stats(struct tide_engine *e)
{
    if (!e)
        return;
    memset(&e->total, 0, sizeof e->total);
    e->forwards = 0;
    for (int l = 0; l < e->n_layer_total; l++)
        memset(&e->layer_total[l], 0, sizeof e->layer_total[l]);
}

static const char *api_describe(const struct tide_backend_ref *b)
{
    return b->ops->describe ? b->ops->describe(b->bk) : b->name;
}

int tide_engine_get_info(struct tide_engine *e, struct tide_engine_info *out)
{
    api_begin(e);
    if (!e || !out || out->size < API_INFO_V1) {
        tide_error("tide_engine_get_info: %s", !e     ? "the engine is NULL"
                                               : !out ? "out is NULL"
                                                      : "out->size is too small (set it to "
                                                        "sizeof(struct tide_engine_info))");
        return api_end(e, TIDE_E_INVAL);
    }
    const struct tide_model_info *mi = e->mops->info(e->model);
    const struct tide_moe_shape *sh = tide_moe_get_shape(e->moe);
    struct tide_engine_info i = {
        .size = sizeof i,
        .model = e->model_dir,
        .model_plugin = e->model_pl->desc->name,
        .device = api_describe(&e->dev),
        .host = api_describe(&e->host),
        .policy = e->policy_name,
        .budget = sh ? tide_moe_budget(e->moe) : 0,
        .n_layers = mi->n_layers,
        .n_moe_layers = mi->n_moe_layers,
        .n_experts = mi->n_experts,
        .experts_per_token = mi->top_k,
        .vocab_size = mi->vocab_size,
        .max_ctx = mi->max_ctx,
        .block_length = e->block,
        .has_chat_template = mi->chat_template && *mi->chat_template,
        .expert_bytes = mi->expert_bytes,
        .decoder = e->dec.name,
        .gen_multiple = 1,
        .eos_id = e->ids.eos,
        .end_ids = e->end_ids,
        .eos_token = mi->eos_token,
        .chat_template = mi->chat_template && *mi->chat_template ? mi->chat_template : NULL,
        .turn_end = mi->stop_token,
    };
    struct tide_decoder_plan plan = {.size = sizeof plan};
    if (e->dec.dec && e->dec.ops->plan(e->dec.dec, 0, &plan) == TIDE_OK) {
        i.gen_multiple = plan.gen_multiple > 0 ? plan.gen_multiple : 1;
        i.steps_scope = plan.steps_scope;
        i.nominal_steps = plan.nominal_steps;
    }
    e->end_ids[i.n_end_ids++] = e->ids.eos;
    for (int k = 0; k < e->ids.n_stop; k++)
        e->end_ids[i.n_end_ids++] = e->ids.stop[k];
    const uint32_t size = out->size < sizeof i ? out->size : (uint32_t)sizeof i;
    memcpy(out, &i, size);
    out->size = size;
    return TIDE_OK;
}

/* Split "section.key" (or "section.key=value") into its parts. */
static bool api_split(const char *s, char *section, size_t ls, char *key, size_t lk,
                      const char **value)
{
    const char *dot = strchr(s, '.');
    const char *eq = value ? strchr(s, '=') : NULL;
    const char *end = eq ? eq : s + strlen(s);
    if (!dot || dot == s || dot >= end - 1 || (value && !eq) || (size_t)(dot - s) >= ls ||
        (size_t)(end - dot - 1) >= lk)
        return false;
    memcpy(section, s, (size_t)(dot - s));
    section[dot - s] = 0;
    memcpy(key, dot + 1, (size_t)(end - dot - 1));
    key[end - dot - 1] = 0;
    if (value)
        *value = eq + 1;
    return true;
}

int tide_engine_get_option(struct tide_engine *e, const char *name, const char **value)
{
    api_begin(e);
    char section[128], key[128];
    const char *v = NULL;
    if (e && name && value && api_split(name, section, sizeof section, key, sizeof key, NULL))
        v = tide_config_get_text(e->cfg, section, key);
    if (!v) {
        tide_error("tide_engine_get_option: no option '%s' (expected section.key, e.g. "
                   "generation.steps; see `tide config doc`)",
                   name ? name : "(null)");
        return api_end(e, e && name && value ? TIDE_E_NOTFOUND : TIDE_E_INVAL);
    }
    *value = v;
    return TIDE_OK;
}

int tide_engine_get_number(struct tide_engine *e, const char *name, int64_t *i, double *f)
{
    api_begin(e);
    char section[128], key[128];
    if (!e || !name || !api_split(name, section, sizeof section, key, sizeof key, NULL)) {
        tide_error("tide_engine_get_number: no option '%s' (expected section.key, e.g. "
                   "serve.port; see `tide config doc`)",
                   name ? name : "(null)");
        return api_end(e, e && name ? TIDE_E_NOTFOUND : TIDE_E_INVAL);
    }
    int rc = tide_config_get_number(e->cfg, section, key, i, f);
    if (rc == TIDE_E_NOTFOUND)
        tide_error("tide_engine_get_number: no option '%s' (see `tide config doc`)", name);
    else if (rc != TIDE_OK)
        tide_error("tide_engine_get_number: option '%s' is text, not a number (use "
                   "tide_engine_get_option)",
                   name);
    return api_end(e, rc);
}

/* Sections an open engine can change, and whether they move experts. */
static bool api_settable(const struct tide_engine *e, const char *section, const char *key,
                         bool *placement)
{
    *placement = false;
    if (!strcmp(section, "generation"))
        return strcmp(key, "block_length") != 0;
    const struct tide_plugin *p = tide_plugins_find(e->own_set, section);
    if (!strcmp(section, "policy") || (p && p->desc->kind == TIDE_PLUGIN_POLICY)) {
        *placement = true;
        return true;
    }
    return false;
}

int tide_engine_set_options(struct tide_engine *e, const char *const *sets, int n_sets)
{
    api_begin(e);
    if (!e || !e->own_cfg || (n_sets > 0 && !sets)) {
        tide_error("tide_engine_set_options: %s",
                   !e            ? "the engine is NULL"
                   : !e->own_cfg ? "the engine was not opened with tide_engine_open"
                                 : "sets is NULL");
        return api_end(e, TIDE_E_INVAL);
    }
    /* Check every assignment on a copy first: all or nothing. */
    struct tide_config *tmp = tide_config_clone(e->own_cfg);
    if (!tmp)
        return api_end(e, TIDE_E_NOMEM);
    int rc = TIDE_OK;
    bool place = false;
    for (int i = 0; i < n_sets; i++) {
        char section[128], key[128];
        const char *value, *s = sets[i] ? sets[i] : "(null)";
        bool moves;
        if (!api_split(s, section, sizeof section, key, sizeof key, &value)) {
            tide_error("tide_engine_set_options: '%s': expected section.key=value", s);
            rc = TIDE_E_CONFIG;
        } else if (!api_settable(e, section, key, &moves)) {
            tide_error("tide_engine_set_options: %s.%s cannot change on an open engine (only "
                       "[generation] but block_length, [policy] and policy plugins' options "
                       "can); open a new engine to change it",
                       section, key);
            rc = TIDE_E_CONFIG;
        } else if (tide_config_set_value(tmp, section, key, value, "set_options") != TIDE_OK) {
            rc = TIDE_E_CONFIG;
        } else {
            place = place || moves;
        }
    }
    tide_config_destroy(tmp);
    for (int i = 0; rc == TIDE_OK && i < n_sets; i++)
        rc = tide_config_set(e->own_cfg, sets[i]);
    if (rc == TIDE_OK && place) {
        int budget;
        if ((rc = tide_engine_config_budget(e, &budget)) == TIDE_OK)
            rc = tide_engine_place(e, e->own_set,
                                   tide_opts_str(tide_config_section(e->cfg, "policy"), "plugin"),
                                   budget);
        api_policy_name(e);
    }
    return api_end(e, rc);
}

/* ---- tokens ------------------------------------------------------------- */

int tide_engine_tokenize(struct tide_engine *e, const char *text, size_t len, int chat,
                         int32_t **ids, size_t *n)
{
    api_begin(e);
    if (!e || (!text && len) || !ids || !n) {
        tide_error("tide_engine_tokenize: NULL argument");
        return api_end(e, TIDE_E_INVAL);
    }
    int rc;
    if (chat) {
        /* The template wants a C string. */
        char *copy = malloc(len + 1);
        if (!copy)
            return api_end(e, TIDE_E_NOMEM);
        if (len)
            memcpy(copy, text, len);
        copy[len] = 0;
        rc = tide_engine_encode(e, copy, true, ids, n);
        free(copy);
    } else {
        rc = tide_tokenizer_encode(e->tok, text ? text : "", len, ids, n);
    }
    return api_end(e, rc);
}

int tide_engine_detokenize(struct tide_engine *e, const int32_t *ids, size_t n, char **text,
                           size_t *len)
{
    api_begin(e);
    if (!e || (!ids && n) || !text || !len) {
        tide_error("tide_engine_detokenize: NULL argument");
        return api_end(e, TIDE_E_INVAL);
    }
    return api_end(e, api_decode(e, ids, (int64_t)n, text, len, NULL));
}
