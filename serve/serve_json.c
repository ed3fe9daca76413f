/* `tide serve`: request parsing and validation, response bodies. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_kind.h"
#include "serve_json.h"

int serve_error_set(struct serve_error *err, int http, const char *type, const char *code,
                    const char *param, const char *fmt, ...)
{
    err->http = http;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return http;
}

int serve_error_model(struct serve_error *err, const char *name, const char *served)
{
    return serve_error_set(err, 404, "invalid_request_error", "model_not_found", "model",
                           "the model '%.200s' is not served here (this server serves '%s')", name,
                           served);
}

/* A 400 naming the field. */
#define bad(err, param, ...)                                                                       \
    serve_error_set(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

/* Field getters: 0 when absent or null (the configured value stays), 1 when
 * set, -1 on a bad type or range (err set). */
static int get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   struct serve_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    int64_t x;
    if (json_is_integer(v)) {
        x = (int64_t)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (int64_t)json_real_value(v); /* 16.0 is an integer too */
    } else {
        bad(err, key, "'%s' must be an integer, not %s", key, tide_json_kind(v));
        return -1;
    }
    if (x < lo || x > hi) {
        if (hi == INT64_MAX)
            bad(err, key, "'%s' must be >= %lld (got %lld)", key, (long long)lo, (long long)x);
        else
            bad(err, key, "'%s' must be in [%lld, %lld] (got %lld)", key, (long long)lo,
                (long long)hi, (long long)x);
        return -1;
    }
    *out = x;
    return 1;
}

/* A number in (lo, hi] when lo_open, else [lo, hi]. */
static int get_num(const json_t *o, const char *key, double lo, bool lo_open, double hi,
                   double *out, struct serve_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v)) {
        bad(err, key, "'%s' must be a number, not %s", key, tide_json_kind(v));
        return -1;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || (lo_open ? !(x > lo) : !(x >= lo)) || x > hi) {
        bad(err, key, "'%s' must be in %c%g, %g] (got %g)", key, lo_open ? '(' : '[', lo, hi, x);
        return -1;
    }
    *out = x;
    return 1;
}

static int get_bool(const json_t *o, const char *key, bool *out, struct serve_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        bad(err, key, "'%s' must be a boolean, not %s", key, tide_json_kind(v));
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

/* A field this server cannot honour: refused unless absent, null or the
 * neutral value the predicate accepts. */
static bool neutral_or_absent(const json_t *o, const char *key, bool (*neutral)(const json_t *),
                              const char *why, struct serve_error *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v) || neutral(v))
        return true;
    bad(err, key, "'%s' is not supported: %s", key, why);
    return false;
}

static bool is_one(const json_t *v)
{
    return json_is_number(v) && json_number_value(v) == 1;
}
static bool is_zero_or_false(const json_t *v)
{
    return json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0);
}
static bool is_empty(const json_t *v)
{
    return (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0);
}
static bool is_text_format(const json_t *v)
{
    const json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    return t && json_is_string(t) && !strcmp(json_string_value(t), "text");
}
static bool is_none_choice(const json_t *v)
{
    return json_is_string(v) && !strcmp(json_string_value(v), "none");
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* ---- chat templates (serve_json.h, struct serve_chat) ------------------- */

int serve_chat_init(const char *tmpl, const char *end, struct serve_chat *out)
{
    *out = (struct serve_chat){0};
    const char *ph = tmpl ? strstr(tmpl, "{prompt}") : NULL;
    if (!ph)
        return 0;
    const char *post = ph + strlen("{prompt}");
    const size_t ne = end ? strlen(end) : 0;
    if (!(out->pre = dup_n(tmpl, (size_t)(ph - tmpl))) || !(out->post = strdup(post)))
        goto nomem;
    if (!ne || strncmp(post, end, ne))
        return 0; /* one user message only */
    const char *asst = post + ne, *user = out->pre, *last = NULL;
    for (const char *p = strstr(out->pre, end); p; p = strstr(p + 1, end))
        last = p;
    if (last)
        user = last + ne;
    /* The heads' form: their common prefix and suffix, not overlapping. */
    const size_t nu = strlen(user), na = strlen(asst);
    size_t np = 0, nq = 0;
    while (np < nu && np < na && user[np] == asst[np])
        np++;
    while (nq < nu - np && nq < na - np && user[nu - 1 - nq] == asst[na - 1 - nq])
        nq++;
    if (!np || !nq)
        return 0;
    if (last) {
        /* The system turn: a head of that form, then the default text. */
        const size_t ns = (size_t)(last - out->pre);
        const char *q = ns >= np && !strncmp(out->pre, user, np)
                            ? memmem(out->pre + np, ns - np, user + nu - nq, nq)
                            : NULL;
        if (!q)
            return 0;
        const size_t nh = (size_t)(q - out->pre) + nq;
        if (!(out->system_head = dup_n(out->pre, nh)) ||
            !(out->default_system = dup_n(out->pre + nh, ns - nh)))
            goto nomem;
    }
    if (!(out->user_head = dup_n(user, nu)) || !(out->assistant_head = strdup(asst)) ||
        !(out->end = strdup(end)))
        goto nomem;
    out->roles = true;
    return 0;
nomem:
    serve_chat_free(out);
    return -1;
}

void serve_chat_free(struct serve_chat *c)
{
    if (!c)
        return;
    free(c->pre);
    free(c->post);
    free(c->system_head);
    free(c->default_system);
    free(c->user_head);
    free(c->assistant_head);
    free(c->end);
    *c = (struct serve_chat){0};
}

/* One prompt made of token ids: a non-empty array of integers below vocab. */
static bool parse_ids(const json_t *a, const char *param, const struct serve_limits *lim,
                      struct serve_prompt *p, struct serve_error *err)
{
    const size_t n = json_array_size(a);
    if (!n) {
        bad(err, param, "'%s' is empty", param);
        return false;
    }
    p->ids = malloc(n * sizeof *p->ids);
    if (!p->ids) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < 0 || id > INT32_MAX ||
            (lim->vocab > 0 && id >= lim->vocab)) {
            bad(err, param,
                "'%s' must be a string or token ids; element %zu is %s%s (token ids are integers "
                "in [0, %d))",
                param, i, tide_json_kind(v), json_is_integer(v) ? " out of range" : "",
                lim->vocab > 0 ? lim->vocab : INT32_MAX);
            return false;
        }
        p->ids[i] = (int32_t)id;
    }
    p->n_ids = n;
    return true;
}

static bool parse_text(const json_t *s, const char *param, struct serve_prompt *p,
                       struct serve_error *err)
{
    if (json_string_length(s) == 0) {
        bad(err, param, "'%s' is empty", param);
        return false;
    }
    p->text = dup_n(json_string_value(s), json_string_length(s));
    if (!p->text) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    p->len = json_string_length(s);
    return true;
}

static bool add_prompts(struct serve_req *r, int n, struct serve_error *err)
{
    r->prompts = calloc((size_t)n, sizeof *r->prompts);
    if (!r->prompts) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    r->n_prompts = n;
    return true;
}

/* prompt: a string, an array of strings (a batch), an array of token ids,
 * or an array of arrays of token ids (a batch). */
static bool parse_prompt(const json_t *o, const struct serve_limits *lim, struct serve_req *r,
                         struct serve_error *err)
{
    const json_t *v = json_object_get(o, "prompt");
    if (!v || json_is_null(v)) {
        bad(err, "prompt", "'prompt' is required");
        return false;
    }
    if (json_is_string(v))
        return add_prompts(r, 1, err) && parse_text(v, "prompt", &r->prompts[0], err);
    if (!json_is_array(v)) {
        bad(err, "prompt", "'prompt' must be a string, an array of strings or token ids, not %s",
            tide_json_kind(v));
        return false;
    }
    const size_t n = json_array_size(v);
    if (!n) {
        bad(err, "prompt", "'prompt' is empty");
        return false;
    }
    const json_t *first = json_array_get(v, 0);
    if (json_is_integer(first))
        return add_prompts(r, 1, err) && parse_ids(v, "prompt", lim, &r->prompts[0], err);
    if (n > SERVE_MAX_PROMPTS) {
        bad(err, "prompt", "'prompt' holds %zu prompts; at most %d in one request", n,
            SERVE_MAX_PROMPTS);
        return false;
    }
    if (!add_prompts(r, (int)n, err))
        return false;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        char param[32];
        snprintf(param, sizeof param, "prompt[%zu]", i);
        if (json_is_string(e)) {
            if (!parse_text(e, param, &r->prompts[i], err))
                return false;
        } else if (json_is_array(e)) {
            if (!parse_ids(e, param, lim, &r->prompts[i], err))
                return false;
        } else {
            bad(err, param, "'%s' must be a string or an array of token ids, not %s", param,
                tide_json_kind(e));
            return false;
        }
    }
    return true;
}

/* The text of a message's content: a string, or an array of text parts. */
static bool message_text(const json_t *c, const char *param, struct serve_prompt *p,
                         struct serve_error *err)
{
    if (json_is_string(c))
        return parse_text(c, param, p, err);
    if (!json_is_array(c)) {
        bad(err, param, "'%s' must be a string or an array of text parts, not %s", param,
            c ? tide_json_kind(c) : "missing");
        return false;
    }
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *part = json_array_get(c, i);
        const json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
        const json_t *text = json_is_object(part) ? json_object_get(part, "text") : NULL;
        if (!type || !json_is_string(type) || strcmp(json_string_value(type), "text") || !text ||
            !json_is_string(text)) {
            bad(err, param, "'%s[%zu]' must be a text part {\"type\": \"text\", \"text\": ...}",
                param, i);
            return false;
        }
        total += json_string_length(text);
    }
    if (!total) {
        bad(err, param, "'%s' is empty", param);
        return false;
    }
    p->text = malloc(total + 1);
    if (!p->text) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    size_t k = 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *text = json_object_get(json_array_get(c, i), "text");
        memcpy(p->text + k, json_string_value(text), json_string_length(text));
        k += json_string_length(text);
    }
    p->text[k] = 0;
    p->len = k;
    return true;
}

/* The head of a role in the chat template; NULL when it has none. */
static const char *chat_head(const struct serve_chat *c, const char *role)
{
    return !strcmp(role, "system")      ? c->system_head
           : !strcmp(role, "user")      ? c->user_head
           : !strcmp(role, "assistant") ? c->assistant_head
                                        : NULL;
}

static char *put(char *at, const char *s, size_t n)
{
    memcpy(at, s, n);
    return at + n;
}

/* messages: the conversation, rendered in the model's chat template
 * (struct serve_chat) as the one prompt. */
static bool parse_messages(const json_t *o, const struct serve_chat *chat, struct serve_req *r,
                           struct serve_error *err)
{
    const json_t *m = json_object_get(o, "messages");
    if (!m || json_is_null(m)) {
        bad(err, "messages", "'messages' is required");
        return false;
    }
    if (!json_is_array(m) || !json_array_size(m)) {
        bad(err, "messages", "'messages' must be a non-empty array of messages, not %s",
            json_is_array(m) ? "an empty array" : tide_json_kind(m));
        return false;
    }
    const size_t n = json_array_size(m);
    for (size_t i = 0; i < n; i++) {
        const json_t *msg = json_array_get(m, i);
        const json_t *role = json_is_object(msg) ? json_object_get(msg, "role") : NULL;
        if (!role || !json_is_string(role)) {
            char param[48];
            snprintf(param, sizeof param, "messages[%zu].role", i);
            bad(err, param, "'%s' must be a string (each message is {\"role\", \"content\"})",
                param);
            return false;
        }
    }
    if (!chat || !chat->pre) {
        bad(err, "messages", "this model has no chat template; use /v1/completions");
        return false;
    }
    const char *first = json_string_value(json_object_get(json_array_get(m, 0), "role"));
    if (!chat->roles && (n != 1 || strcmp(first, "user"))) {
        bad(err, "messages",
            "this model's chat template takes one user message (it does not split into roles: "
            "docs/serving.md); the request has %zu message%s starting with role '%.40s'",
            n, n == 1 ? "" : "s", first);
        return false;
    }
    /* Each message: head, content, tail; then the generation prompt. */
    const char *tail = chat->roles ? chat->end : chat->post;
    const char *gen = chat->roles ? chat->assistant_head : "";
    const bool dflt = chat->roles && chat->system_head && strcmp(first, "system");
    struct serve_prompt *parts = calloc(n, sizeof *parts);
    if (!parts) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    size_t total =
        strlen(gen) +
        (dflt ? strlen(chat->system_head) + strlen(chat->default_system) + strlen(chat->end) : 0);
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        const json_t *msg = json_array_get(m, i);
        const char *role = json_string_value(json_object_get(msg, "role"));
        const char *head = chat->roles ? chat_head(chat, role) : chat->pre;
        char param[48];
        if (!head) {
            snprintf(param, sizeof param, "messages[%zu].role", i);
            if (!strcmp(role, "system"))
                bad(err, param, "this model's chat template has no system turn");
            else
                bad(err, param, "'%s' must be 'system', 'user' or 'assistant' (got '%.40s')", param,
                    role);
            ok = false;
            break;
        }
        snprintf(param, sizeof param, "messages[%zu].content", i);
        ok = message_text(json_object_get(msg, "content"), param, &parts[i], err);
        total += strlen(head) + parts[i].len + strlen(tail);
    }
    char *text = ok ? malloc(total + 1) : NULL;
    if (ok && !text) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        ok = false;
    }
    if (ok) {
        char *at = text;
        if (dflt) {
            at = put(at, chat->system_head, strlen(chat->system_head));
            at = put(at, chat->default_system, strlen(chat->default_system));
            at = put(at, chat->end, strlen(chat->end));
        }
        for (size_t i = 0; i < n; i++) {
            const char *role = json_string_value(json_object_get(json_array_get(m, i), "role"));
            const char *head = chat->roles ? chat_head(chat, role) : chat->pre;
            at = put(at, head, strlen(head));
            at = put(at, parts[i].text, parts[i].len);
            at = put(at, tail, strlen(tail));
        }
        at = put(at, gen, strlen(gen));
        *at = 0;
    }
    for (size_t i = 0; i < n; i++)
        free(parts[i].text);
    free(parts);
    if (!ok || !add_prompts(r, 1, err)) {
        free(text);
        return false;
    }
    r->prompts[0] = (struct serve_prompt){.text = text, .len = total};
    return true;
}

static bool parse_stop(const json_t *o, struct serve_req *r, struct serve_error *err)
{
    const json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v))
        return true;
    const size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v)) {
        bad(err, "stop", "'stop' must be a string or an array of strings, not %s",
            tide_json_kind(v));
        return false;
    }
    if (n > SERVE_MAX_STOP) {
        bad(err, "stop", "'stop' holds %zu sequences; at most %d", n, SERVE_MAX_STOP);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s)) {
            bad(err, "stop", "'stop[%zu]' must be a string, not %s", i, tide_json_kind(s));
            return false;
        }
        const size_t len = json_string_length(s);
        if (!len || len > SERVE_MAX_STOP_LEN) {
            bad(err, "stop", "'stop[%zu]' must hold 1 to %d bytes (got %zu)", i, SERVE_MAX_STOP_LEN,
                len);
            return false;
        }
        if (!(r->stop[r->n_stop] = dup_n(json_string_value(s), len))) {
            serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return false;
        }
        r->n_stop++;
    }
    return true;
}

/* "model": absent, null or the name served (lim->model; NULL: any). */
static bool check_model(const json_t *o, const struct serve_limits *lim, struct serve_error *err)
{
    const json_t *model = json_object_get(o, "model");
    if (!model || json_is_null(model))
        return true;
    if (!json_is_string(model)) {
        bad(err, "model", "'model' must be a string, not %s", tide_json_kind(model));
        return false;
    }
    if (lim->model && (json_string_length(model) != strlen(lim->model) ||
                       memcmp(json_string_value(model), lim->model, strlen(lim->model)))) {
        serve_error_model(err, json_string_value(model), lim->model);
        return false;
    }
    return true;
}

static bool parse_fields(const json_t *o, enum serve_endpoint ep, const struct serve_limits *lim,
                         struct serve_req *r, struct serve_error *err)
{
    if (!check_model(o, lim, err))
        return false;
    if (ep == SERVE_EP_CHAT ? !parse_messages(o, lim->chat, r, err) : !parse_prompt(o, lim, r, err))
        return false;
    r->chat = ep == SERVE_EP_CHAT;

    const int64_t max_ctx = lim->max_ctx > 0 ? lim->max_ctx : INT64_MAX;
    int64_t x;
    int rc;
    const char *mt = "max_tokens";
    if (ep == SERVE_EP_CHAT && json_object_get(o, "max_completion_tokens") &&
        !json_is_null(json_object_get(o, "max_completion_tokens")))
        mt = "max_completion_tokens";
    if ((rc = get_int(o, mt, 1, INT64_MAX, &x, err)) < 0)
        return false;
    if (rc > 0) {
        if (x > max_ctx) {
            serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded", mt,
                            "'%s' (%lld) is beyond the model's context of %lld positions", mt,
                            (long long)x, (long long)max_ctx);
            return false;
        }
        r->max_tokens = x;
    }
    if ((rc = get_int(o, "block_length", 1, 4096, &x, err)) < 0)
        return false;
    if (rc > 0)
        r->block_length = (int)x;
    if ((rc = get_int(o, "steps", 1, 4096, &x, err)) < 0)
        return false;
    if (rc > 0)
        r->steps = (int)x;
    if ((rc = get_int(o, "top_k", -1, INT32_MAX, &x, err)) < 0)
        return false;
    if (rc > 0)
        r->top_k = x < 0 ? 0 : (int)x; /* -1 is "off", as in vLLM */
    if ((rc = get_int(o, "seed", 0, INT64_MAX, &x, err)) < 0)
        return false;
    if (rc > 0)
        r->seed = x;
    if (get_num(o, "threshold", 0, true, 1, &r->threshold, err) < 0 ||
        get_num(o, "temperature", 0, false, 1e6, &r->temperature, err) < 0 ||
        get_num(o, "top_p", 0, true, 1, &r->top_p, err) < 0)
        return false;
    if (!parse_stop(o, r, err) || get_bool(o, "stream", &r->stream, err) < 0)
        return false;
    const json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            bad(err, "stream_options", "'stream_options' must be an object, not %s",
                tide_json_kind(so));
            return false;
        }
        if (get_bool(so, "include_usage", &r->include_usage, err) < 0) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            return false;
        }
    }
    return neutral_or_absent(o, "n", is_one, "only one choice per prompt (n = 1)", err) &&
           neutral_or_absent(o, "best_of", is_one, "only best_of = 1", err) &&
           neutral_or_absent(o, "echo", is_zero_or_false, "the prompt is not echoed", err) &&
           neutral_or_absent(o, "logprobs", is_zero_or_false,
                             "a diffusion model's tokens have no left-to-right log-probabilities",
                             err) &&
           neutral_or_absent(o, "top_logprobs", is_zero_or_false,
                             "a diffusion model's tokens have no left-to-right log-probabilities",
                             err) &&
           neutral_or_absent(o, "suffix", is_empty, "no insertion (suffix)", err) &&
           neutral_or_absent(o, "logit_bias", is_empty, "no logit bias", err) &&
           neutral_or_absent(o, "presence_penalty", is_zero_or_false, "no penalties", err) &&
           neutral_or_absent(o, "frequency_penalty", is_zero_or_false, "no penalties", err) &&
           neutral_or_absent(o, "repetition_penalty", is_one, "no penalties", err) &&
           neutral_or_absent(o, "tools", is_empty, "no tool calls", err) &&
           neutral_or_absent(o, "functions", is_empty, "no function calls", err) &&
           neutral_or_absent(o, "tool_choice", is_none_choice, "no tool calls", err) &&
           neutral_or_absent(o, "response_format", is_text_format, "only text responses", err);
}

bool serve_req_parse(enum serve_endpoint ep, const char *body, size_t len,
                     const struct serve_limits *lim, struct serve_req *out, struct serve_error *err)
{
    *out = (struct serve_req){
        .ep = ep,
        .max_tokens = -1,
        .block_length = -1,
        .steps = -1,
        .threshold = -1,
        .temperature = -1,
        .top_k = -1,
        .top_p = -1,
        .seed = -1,
    };
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!o) {
        bad(err, NULL, "malformed JSON in the request body: %s (line %d, column %d)", je.text,
            je.line, je.column);
        return false;
    }
    bool ok = false;
    if (!json_is_object(o))
        bad(err, NULL, "the request body must be a JSON object, not %s", tide_json_kind(o));
    else
        ok = parse_fields(o, ep, lim, out, err);
    json_decref(o);
    if (!ok)
        serve_req_free(out);
    return ok;
}

void serve_req_free(struct serve_req *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    r->prompts = NULL;
    r->n_prompts = 0;
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    r->n_stop = 0;
}

/* ---- text helpers ------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0..n): > 0 when complete and
 * valid; 0 when it is a valid but incomplete start cut off by n; -k when the
 * first k bytes are invalid (to be replaced by one U+FFFD). */
static int utf8_seq(const unsigned char *s, size_t n)
{
    const unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return -1;
    }
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return 0;
        const unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf))
            return -i;
    }
    return need;
}

char *serve_utf8_clean(const char *text, size_t len, bool final, size_t *out_len)
{
    char *out = malloc(3 * len + 1); /* every byte may become U+FFFD */
    if (!out)
        return NULL;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, k = 0;
    while (i < len) {
        int q = utf8_seq(s + i, len - i);
        if (q == 0 && !final)
            break; /* incomplete at the end: a later token may complete it */
        if (q > 0 && s[i]) {
            memcpy(out + k, s + i, (size_t)q);
            k += (size_t)q;
            i += (size_t)q;
        } else { /* invalid bytes, or a NUL (q == 1) */
            memcpy(out + k, "\xef\xbf\xbd", 3);
            k += 3;
            i += q > 0 ? 1 : q == 0 ? len - i : (size_t)-q;
        }
    }
    out[k] = 0;
    *out_len = k;
    return out;
}

int64_t serve_stop_find(const char *text, size_t len, char *const *stop, int n_stop)
{
    int64_t best = -1;
    for (int i = 0; i < n_stop; i++) {
        const char *p = memmem(text, len, stop[i], strlen(stop[i]));
        if (p && (best < 0 || p - text < best))
            best = p - text;
    }
    return best;
}

size_t serve_stop_holdback(const char *text, size_t len, char *const *stop, int n_stop)
{
    size_t best = 0;
    for (int i = 0; i < n_stop; i++) {
        const size_t sl = strlen(stop[i]);
        for (size_t k = sl - 1 < len ? sl - 1 : len; k > best; k--)
            if (!memcmp(text + len - k, stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* ---- response bodies ---------------------------------------------------- */

/* A JSON string of UTF-8 text, cleaned again (serve_utf8_clean) if a caller
 * passed bad bytes or a NUL: JSON could carry it as \u0000, but a client
 * could not send it back (most parsers refuse it, as ours does). */
static json_t *jstr(const char *s, size_t len)
{
    json_t *v = memchr(s, 0, len) ? NULL : json_stringn(s, len);
    if (v)
        return v;
    size_t n;
    char *c = serve_utf8_clean(s, len, true, &n);
    v = c ? json_stringn(c, n) : NULL;
    free(c);
    return v;
}

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

char *serve_error_json(const struct serve_error *err)
{
    /* The message may quote the request's bytes (jansson's "near '...'" of a
     * malformed body) or be cut inside a character by its buffer: clean it to
     * UTF-8 so that the error body is always valid JSON. */
    size_t n_msg;
    char *msg = serve_utf8_clean(err->message, strlen(err->message), true, &n_msg);
    if (!msg)
        return NULL;
    char *js = dump(json_pack("{s:{s:s%,s:s,s:o,s:o}}", "error", "message", msg, n_msg, "type",
                              err->type ? err->type : "invalid_request_error", "param",
                              err->param[0] ? json_string(err->param) : json_null(), "code",
                              err->code ? json_string(err->code) : json_null()));
    free(msg);
    return js;
}

static json_t *usage_json(const struct serve_usage *u)
{
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

static json_t *tide_json(const struct serve_usage *u)
{
    json_t *t = json_pack("{s:I,s:I,s:i,s:f,s:f,s:f,s:f}", "steps", (json_int_t)u->steps,
                          "forwards", (json_int_t)u->forwards, "blocks", u->blocks, "seconds",
                          u->seconds, "prefill_seconds", u->prefill_seconds, "queue_seconds",
                          u->queue_seconds, "hit_rate", u->hit_rate);
    json_t *o = json_pack(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "hit_rows", (json_int_t)u->hit_rows, "miss_rows",
        (json_int_t)u->miss_rows, "promotions", (json_int_t)u->promotions, "evictions",
        (json_int_t)u->evictions, "weight_bytes", (json_int_t)u->weight_bytes, "act_bytes",
        (json_int_t)u->act_bytes, "gb_moved", (double)(u->weight_bytes + u->act_bytes) / 1e9);
    if (!t || !o || json_object_update(t, o) != 0) {
        json_decref(t);
        t = NULL;
    }
    json_decref(o);
    return t;
}

/* The members every answer starts with, and its (empty) "choices" array in
 * *choices (owned by the object). NULL when out of memory. */
static json_t *head(enum serve_endpoint ep, const char *id, int64_t created, const char *model,
                    int64_t seed, bool chunk, json_t **choices)
{
    const char *obj = ep == SERVE_EP_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                          : "text_completion";
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:[]}", "id", id, "object", obj, "created",
                          (json_int_t)created, "model", model, "choices");
    if (o && seed >= 0 && json_object_set_new(o, "seed", json_integer((json_int_t)seed)) != 0) {
        json_decref(o);
        o = NULL;
    }
    *choices = o ? json_object_get(o, "choices") : NULL;
    return o;
}

char *serve_response_json(enum serve_endpoint ep, const char *id, int64_t created,
                          const char *model, int64_t seed, const struct serve_choice *choices,
                          int n, const struct serve_usage *usage)
{
    json_t *arr;
    json_t *o = head(ep, id, created, model, seed, false, &arr);
    if (!o)
        return NULL;
    for (int i = 0; i < n; i++) {
        const struct serve_choice *c = &choices[i];
        json_t *fr = c->finish_reason ? json_string(c->finish_reason) : json_null();
        json_t *ch;
        if (ep == SERVE_EP_CHAT)
            ch = json_pack("{s:i,s:{s:s,s:o},s:n,s:o}", "index", i, "message", "role", "assistant",
                           "content", jstr(c->text, c->len), "logprobs", "finish_reason", fr);
        else
            ch = json_pack("{s:i,s:o,s:n,s:o}", "index", i, "text", jstr(c->text, c->len),
                           "logprobs", "finish_reason", fr);
        if (!ch || json_array_append_new(arr, ch) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    if (usage) {
        json_object_set_new(o, "usage", usage_json(usage));
        json_object_set_new(o, "tide", tide_json(usage));
    }
    return dump(o);
}

char *serve_chunk_sse(enum serve_endpoint ep, const char *id, int64_t created, const char *model,
                      int64_t seed, int index, const char *delta, size_t len, bool role,
                      const char *finish_reason, int block, int64_t steps,
                      const struct serve_usage *usage)
{
    json_t *arr;
    json_t *o = head(ep, id, created, model, seed, true, &arr);
    if (!o)
        return NULL;
    if (usage) {
        json_object_set_new(o, "usage", usage_json(usage));
        json_object_set_new(o, "tide", tide_json(usage));
    } else {
        json_t *fr = finish_reason ? json_string(finish_reason) : json_null();
        json_t *ch;
        if (ep == SERVE_EP_CHAT) {
            json_t *d = json_pack("{s:o}", "content", jstr(delta, len));
            if (d && role)
                json_object_set_new(d, "role", json_string("assistant"));
            ch = json_pack("{s:i,s:o,s:n,s:o}", "index", index, "delta", d, "logprobs",
                           "finish_reason", fr);
        } else {
            ch = json_pack("{s:i,s:o,s:n,s:o}", "index", index, "text", jstr(delta, len),
                           "logprobs", "finish_reason", fr);
        }
        json_array_append_new(arr, ch);
        if (block >= 0)
            json_object_set_new(o, "tide",
                                json_pack("{s:i,s:I}", "block", block, "steps", (json_int_t)steps));
    }
    char *js = dump(o);
    if (!js)
        return NULL;
    const size_t n = strlen(js);
    char *ev = malloc(n + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, js, n);
        memcpy(ev + 6 + n, "\n\n", 3);
    }
    free(js);
    return ev;
}

/* ---- tokenizer endpoints ------------------------------------------------ */

static json_t *load_object(const char *body, size_t len, struct serve_error *err)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!o) {
        bad(err, NULL, "malformed JSON in the request body: %s (line %d, column %d)", je.text,
            je.line, je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        bad(err, NULL, "the request body must be a JSON object, not %s", tide_json_kind(o));
        json_decref(o);
        return NULL;
    }
    return o;
}

bool serve_tokenize_parse(const char *body, size_t len, const struct serve_limits *lim,
                          struct serve_tok_req *out, struct serve_error *err)
{
    *out = (struct serve_tok_req){0};
    json_t *o = load_object(body, len, err);
    if (!o)
        return false;
    bool ok = false, special = false;
    const json_t *prompt = json_object_get(o, "prompt");
    if (!check_model(o, lim, err) || get_bool(o, "add_special_tokens", &special, err) < 0) {
        /* err set */
    } else if (prompt && !json_is_null(prompt)) {
        if (!json_is_string(prompt))
            bad(err, "prompt", "'prompt' must be a string, not %s", tide_json_kind(prompt));
        else if (!(out->p.text = dup_n(json_string_value(prompt), json_string_length(prompt))))
            serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        else {
            out->p.len = json_string_length(prompt);
            ok = true;
        }
    } else if (json_object_get(o, "messages")) {
        struct serve_req r = {0};
        if (parse_messages(o, lim->chat, &r, err)) {
            out->p = r.prompts[0];
            free(r.prompts);
            ok = true;
        } else {
            serve_req_free(&r);
        }
    } else {
        bad(err, "prompt", "'prompt' (or 'messages') is required");
    }
    json_decref(o);
    if (!ok)
        serve_tok_req_free(out);
    return ok;
}

bool serve_detokenize_parse(const char *body, size_t len, const struct serve_limits *lim,
                            struct serve_tok_req *out, struct serve_error *err)
{
    *out = (struct serve_tok_req){0};
    json_t *o = load_object(body, len, err);
    if (!o)
        return false;
    bool ok = false;
    const json_t *t = json_object_get(o, "tokens");
    if (!check_model(o, lim, err)) {
        /* err set */
    } else if (!t || !json_is_array(t)) {
        bad(err, "tokens", "'tokens' must be an array of token ids, not %s",
            t ? tide_json_kind(t) : "missing");
    } else if (!json_array_size(t)) {
        ok = (out->p.ids = malloc(sizeof *out->p.ids)) != NULL; /* "" */
    } else {
        ok = parse_ids(t, "tokens", lim, &out->p, err);
    }
    json_decref(o);
    if (!ok)
        serve_tok_req_free(out);
    return ok;
}

void serve_tok_req_free(struct serve_tok_req *t)
{
    free(t->p.text);
    free(t->p.ids);
    t->p = (struct serve_prompt){0};
}

char *serve_tokens_json(const int32_t *ids, size_t n, int64_t max_ctx)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return dump(json_pack("{s:I,s:I,s:o}", "count", (json_int_t)n, "max_model_len",
                          (json_int_t)max_ctx, "tokens", a));
}

char *serve_detokens_json(const char *text, size_t len)
{
    return dump(json_pack("{s:o}", "prompt", jstr(text, len)));
}

char *serve_tokenizer_info_json(const char *eos, int64_t max_ctx)
{
    return dump(json_pack("{s:s?,s:I,s:s}", "eos_token", eos, "model_max_length",
                          (json_int_t)max_ctx, "tokenizer_class", "tide"));
}

char *serve_models_json(const char *model, int64_t created, bool one)
{
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", model, "object", "model", "created",
                          (json_int_t)created, "owned_by", "tide");
    if (one)
        return dump(m);
    return dump(json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}
