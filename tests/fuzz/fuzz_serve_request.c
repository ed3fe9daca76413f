/* Fuzz target: a request body of `tide serve` (serve/serve_json.c). The first
 * byte picks the endpoint (completions, chat, tokenize, detokenize), the
 * rest is the body. Accepted requests must hold what the worker relies on
 * (non-empty prompts, ids below the vocabulary, parameters in range,
 * non-empty stop strings); refused ones a 4xx error naming a field or none,
 * with a message, as valid JSON. The text helpers run on the raw bytes too:
 * cleaned text is valid UTF-8 (jansson accepts it), stop offsets and
 * hold-backs stay inside the text. */
#include <jansson.h>

#include "fuzz_common.h"
#include "serve_json.h"

static void fz_check_error(const struct serve_error *err)
{
    FZ_ASSERT(err->http >= 400 && err->http < 600);
    FZ_ASSERT(err->message[0]);
    char *js = serve_error_json(err);
    FZ_ASSERT(js);
    json_t *o = json_loads(js, 0, NULL);
    FZ_ASSERT(o && json_is_string(json_object_get(json_object_get(o, "error"), "message")));
    json_decref(o);
    free(js);
}

static void fz_check_req(const struct serve_req *r, const struct serve_limits *lim)
{
    FZ_ASSERT(r->n_prompts >= 1 && r->n_prompts <= SERVE_MAX_PROMPTS);
    for (int i = 0; i < r->n_prompts; i++) {
        const struct serve_prompt *p = &r->prompts[i];
        FZ_ASSERT(!!p->text != !!p->ids);
        if (p->text)
            FZ_ASSERT(p->len > 0 && strlen(p->text) == p->len);
        else
            for (size_t k = 0; k < p->n_ids; k++)
                FZ_ASSERT(p->ids[k] >= 0 && p->ids[k] < lim->vocab);
        FZ_ASSERT(p->text || p->n_ids > 0);
    }
    FZ_ASSERT(r->max_tokens == -1 || (r->max_tokens >= 1 && r->max_tokens <= lim->max_ctx));
    FZ_ASSERT(r->threshold == -1 || (r->threshold > 0 && r->threshold <= 1));
    FZ_ASSERT(r->top_p == -1 || (r->top_p > 0 && r->top_p <= 1));
    FZ_ASSERT(r->temperature == -1 || r->temperature >= 0);
    FZ_ASSERT(r->n_stop >= 0 && r->n_stop <= SERVE_MAX_STOP);
    for (int i = 0; i < r->n_stop; i++)
        FZ_ASSERT(r->stop[i][0] && strlen(r->stop[i]) <= SERVE_MAX_STOP_LEN);
    /* An answer echoing the first prompt is valid JSON. */
    const struct serve_choice c = {r->prompts[0].text ? r->prompts[0].text : "", r->prompts[0].len,
                                   "stop"};
    const struct serve_usage u = {0};
    char *js = serve_response_json(r->ep, "cmpl-fuzz", 0, "m", -1, &c, 1, &u);
    FZ_ASSERT(js);
    json_t *o = json_loads(js, 0, NULL);
    FZ_ASSERT(o);
    json_decref(o);
    free(js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_begin();
    if (!size)
        return 0;
    /* LLaDA's chat template (model-llada2, model-llada-moe), in roles. */
    static struct serve_chat chat;
    if (!chat.pre &&
        serve_chat_init("<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>"
                        "{prompt}<|role_end|><role>ASSISTANT</role>",
                        "<|role_end|>", &chat))
        return 0;
    const struct serve_limits lim = {
        .max_ctx = 4096, .vocab = 157184, .model = "tiny", .chat = &chat};
    const char *body = (const char *)data + 1;
    const size_t len = size - 1;
    struct serve_error err = {0};
    switch (data[0] % 4) {
    case 0:
    case 1: {
        struct serve_req r;
        const enum serve_endpoint ep = data[0] % 4 ? SERVE_EP_CHAT : SERVE_EP_COMPLETIONS;
        if (serve_req_parse(ep, body, len, &lim, &r, &err)) {
            fz_check_req(&r, &lim);
            /* Stop strings against the text of the first prompt. */
            if (r.prompts[0].text) {
                const char *t = r.prompts[0].text;
                const int64_t at = serve_stop_find(t, r.prompts[0].len, r.stop, r.n_stop);
                FZ_ASSERT(at >= -1 && at < (int64_t)r.prompts[0].len);
                FZ_ASSERT(serve_stop_holdback(t, r.prompts[0].len, r.stop, r.n_stop) <=
                          r.prompts[0].len);
            }
            serve_req_free(&r);
        } else {
            fz_check_error(&err);
        }
        break;
    }
    default: {
        struct serve_tok_req t;
        const bool ok = data[0] % 4 == 2 ? serve_tokenize_parse(body, len, &lim, &t, &err)
                                         : serve_detokenize_parse(body, len, &lim, &t, &err);
        if (ok)
            serve_tok_req_free(&t);
        else
            fz_check_error(&err);
    }
    }
    /* The raw bytes, cleaned, are a JSON string; held-back text is a prefix. */
    size_t n_final, n_part;
    char *final = serve_utf8_clean(body, len, true, &n_final);
    char *part = serve_utf8_clean(body, len, false, &n_part);
    FZ_ASSERT(final && part);
    FZ_ASSERT(n_part <= n_final && !memcmp(part, final, n_part));
    json_t *s = json_stringn(final, n_final);
    FZ_ASSERT(s);
    json_decref(s);
    free(final);
    free(part);
    return 0;
}
