/* `tide serve`'s pure parts: request parsing and validation (every error
 * names its field), UTF-8 cleaning, stop sequences, response bodies and the
 * Prometheus text. */
#include <jansson.h>

#include "harness.h"
#include "serve_json.h"
#include "serve_metrics.h"

/* The chat template of model-llada2 (LLaDA2.0) and model-llada-moe, as
 * their plugins give it (llada2_chat_template, lmoe_chat_template), and
 * their end-of-turn token. */
#define LLADA_TEMPLATE                                                                             \
    "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>{prompt}<|role_end|>"   \
    "<role>ASSISTANT</role>"
#define LLADA_END "<|role_end|>"

static struct serve_chat llada_chat; /* LLADA_TEMPLATE in roles (main) */
static struct serve_limits lim = {.max_ctx = 4096, .vocab = 1000, .chat = &llada_chat};

/* Parse body for ep; expect success. */
static bool parse_ok(enum serve_endpoint ep, const char *body, struct serve_req *r)
{
    struct serve_error err = {0};
    bool ok = serve_req_parse(ep, body, strlen(body), &lim, r, &err);
    if (!ok)
        fprintf(stderr, "unexpected error for %s: %s\n", body, err.message);
    return ok;
}

/* Parse body; expect a 400 naming param (NULL: none) with msg in the text. */
static void parse_bad(enum serve_endpoint ep, const char *body, const char *param, const char *msg,
                      int line)
{
    struct serve_req r;
    struct serve_error err = {0};
    test_checks++;
    if (serve_req_parse(ep, body, strlen(body), &lim, &r, &err)) {
        test_failures++;
        fprintf(stderr, "line %d: %s was accepted\n", line, body);
        serve_req_free(&r);
        return;
    }
    CHECK_EQ_INT(err.http, 400);
    if (strcmp(err.param, param ? param : "")) {
        test_failures++;
        fprintf(stderr, "line %d: %s: param '%s', expected '%s' (%s)\n", line, body, err.param,
                param ? param : "", err.message);
    }
    CHECK_CONTAINS(err.message, msg);
    /* The error body is valid JSON with the OpenAI shape. */
    char *js = serve_error_json(&err);
    json_t *o = json_loads(js, 0, NULL);
    CHECK(o && json_is_object(json_object_get(o, "error")));
    CHECK(json_is_string(json_object_get(json_object_get(o, "error"), "message")));
    CHECK(param ? json_is_string(json_object_get(json_object_get(o, "error"), "param"))
                : json_is_null(json_object_get(json_object_get(o, "error"), "param")));
    json_decref(o);
    free(js);
}
#define BAD(ep, body, param, msg) parse_bad(ep, body, param, msg, __LINE__)

static void test_completions_fields(void)
{
    struct serve_req r;
    CHECK(
        parse_ok(SERVE_EP_COMPLETIONS,
                 "{\"model\":\"x\",\"prompt\":\"Hello\",\"max_tokens\":16,\"temperature\":0,"
                 "\"top_p\":0.9,\"top_k\":5,\"seed\":7,\"stop\":[\"\\n\",\"END\"],\"stream\":true,"
                 "\"stream_options\":{\"include_usage\":true},\"block_length\":32,\"steps\":8,"
                 "\"threshold\":0.9,\"n\":1,\"logprobs\":null,\"echo\":false,\"user\":\"u\","
                 "\"unknown_field\":[1,2]}",
                 &r));
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK(!strcmp(r.prompts[0].text, "Hello"));
    CHECK_EQ_INT(r.max_tokens, 16);
    CHECK_NEAR(r.temperature, 0, 0);
    CHECK_NEAR(r.top_p, 0.9, 1e-12);
    CHECK_EQ_INT(r.top_k, 5);
    CHECK_EQ_INT(r.seed, 7);
    CHECK_EQ_INT(r.n_stop, 2);
    CHECK(!strcmp(r.stop[1], "END"));
    CHECK(r.stream && r.include_usage && !r.chat);
    CHECK_EQ_INT(r.block_length, 32);
    CHECK_EQ_INT(r.steps, 8);
    CHECK_NEAR(r.threshold, 0.9, 1e-12);
    serve_req_free(&r);

    /* Unset fields stay "configured" (negative). */
    CHECK(parse_ok(SERVE_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":null}", &r));
    CHECK(r.max_tokens < 0 && r.temperature < 0 && r.top_p < 0 && r.top_k < 0 && r.seed < 0 &&
          r.steps < 0 && r.threshold < 0 && r.block_length < 0 && !r.stream && !r.n_stop);
    serve_req_free(&r);

    /* An integral number is an integer; top_k -1 means off. */
    CHECK(
        parse_ok(SERVE_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":16.0,\"top_k\":-1}", &r));
    CHECK_EQ_INT(r.max_tokens, 16);
    CHECK_EQ_INT(r.top_k, 0);
    serve_req_free(&r);

    /* Token ids, and batches of text or ids. */
    CHECK(parse_ok(SERVE_EP_COMPLETIONS, "{\"prompt\":[1,2,999]}", &r));
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK_EQ_INT(r.prompts[0].n_ids, 3);
    CHECK_EQ_INT(r.prompts[0].ids[2], 999);
    CHECK(!r.prompts[0].text);
    serve_req_free(&r);
    CHECK(parse_ok(SERVE_EP_COMPLETIONS, "{\"prompt\":[\"a\",[5,6],\"b\"],\"stop\":\"x\"}", &r));
    CHECK_EQ_INT(r.n_prompts, 3);
    CHECK(!strcmp(r.prompts[2].text, "b"));
    CHECK_EQ_INT(r.prompts[1].n_ids, 2);
    CHECK_EQ_INT(r.n_stop, 1);
    serve_req_free(&r);
}

static void test_completions_errors(void)
{
    const enum serve_endpoint C = SERVE_EP_COMPLETIONS;
    BAD(C, "{\"prompt\": \"a\",", NULL, "malformed JSON");
    BAD(C, "", NULL, "malformed JSON");
    BAD(C, "[1,2]", NULL, "must be a JSON object");
    BAD(C, "\"text\"", NULL, "must be a JSON object");
    BAD(C, "{}", "prompt", "'prompt' is required");
    BAD(C, "{\"prompt\":\"\"}", "prompt", "'prompt' is empty");
    BAD(C, "{\"prompt\":[]}", "prompt", "'prompt' is empty");
    BAD(C, "{\"prompt\":[\"a\",\"\"]}", "prompt[1]", "'prompt[1]' is empty");
    BAD(C, "{\"prompt\":[[]]}", "prompt[0]", "is empty");
    BAD(C, "{\"prompt\":42}", "prompt", "must be a string");
    BAD(C, "{\"prompt\":{\"a\":1}}", "prompt", "not an object");
    BAD(C, "{\"prompt\":[1,\"a\"]}", "prompt", "element 1 is a string");
    BAD(C, "{\"prompt\":[1,1000]}", "prompt", "out of range");
    BAD(C, "{\"prompt\":[-1]}", "prompt", "out of range");
    BAD(C, "{\"prompt\":[\"a\",3]}", "prompt[1]", "must be a string or an array");
    BAD(C, "{\"prompt\":\"a\",\"max_tokens\":\"16\"}", "max_tokens",
        "must be an integer, not a string");
    BAD(C, "{\"prompt\":\"a\",\"max_tokens\":1.5}", "max_tokens", "must be an integer");
    BAD(C, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens", "must be >= 1");
    BAD(C, "{\"prompt\":\"a\",\"max_tokens\":5000}", "max_tokens", "beyond the model's context");
    BAD(C, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature", "must be a number");
    BAD(C, "{\"prompt\":\"a\",\"temperature\":-1}", "temperature", "must be in");
    BAD(C, "{\"prompt\":\"a\",\"top_p\":0}", "top_p", "must be in (0");
    BAD(C, "{\"prompt\":\"a\",\"top_p\":1.5}", "top_p", "must be in");
    BAD(C, "{\"prompt\":\"a\",\"top_k\":-2}", "top_k", "must be in [-1, ");
    BAD(C, "{\"prompt\":\"a\",\"seed\":-3}", "seed", "must be >= 0");
    BAD(C, "{\"prompt\":\"a\",\"threshold\":0}", "threshold", "must be in (0");
    BAD(C, "{\"prompt\":\"a\",\"steps\":0}", "steps", "must be in [1, 4096]");
    BAD(C, "{\"prompt\":\"a\",\"block_length\":true}", "block_length", "not a boolean");
    BAD(C, "{\"prompt\":\"a\",\"stream\":\"yes\"}", "stream", "must be a boolean");
    BAD(C, "{\"prompt\":\"a\",\"stream_options\":3}", "stream_options", "must be an object");
    BAD(C, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":1}}",
        "stream_options.include_usage", "must be a boolean");
    BAD(C, "{\"prompt\":\"a\",\"stop\":5}", "stop", "must be a string or an array");
    BAD(C, "{\"prompt\":\"a\",\"stop\":[\"x\",5]}", "stop", "'stop[1]' must be a string");
    BAD(C, "{\"prompt\":\"a\",\"stop\":[\"\"]}", "stop", "must hold 1 to");
    BAD(C,
        "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
        "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
        "stop", "at most 16");
    BAD(C, "{\"prompt\":\"a\",\"model\":5}", "model", "must be a string");
    BAD(C, "{\"prompt\":\"a\",\"n\":2}", "n", "not supported");
    BAD(C, "{\"prompt\":\"a\",\"logprobs\":1}", "logprobs", "not supported");
    BAD(C, "{\"prompt\":\"a\",\"echo\":true}", "echo", "not supported");
    BAD(C, "{\"prompt\":\"a\",\"suffix\":\"x\"}", "suffix", "not supported");
    BAD(C, "{\"prompt\":\"a\",\"best_of\":3}", "best_of", "not supported");
    BAD(C, "{\"prompt\":\"a\",\"presence_penalty\":0.5}", "presence_penalty", "not supported");
    BAD(C, "{\"prompt\":\"a\",\"logit_bias\":{\"5\":1}}", "logit_bias", "not supported");
    /* A NUL inside a string is refused by the JSON parser, not passed on. */
    BAD(C, "{\"prompt\":\"a\\u0000b\"}", NULL, "malformed JSON");
    /* Deep nesting is refused, not a stack overflow. */
    char deep[20000];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{\"prompt\":\"a\",\"x\":");
    for (int i = 0; i < 6000; i++)
        deep[k++] = '[';
    deep[k] = 0;
    BAD(C, deep, NULL, "malformed JSON");
    /* Without limits, max_tokens is not checked against a context. */
    struct serve_req r;
    struct serve_error err;
    const struct serve_limits none = {0};
    const char *b = "{\"prompt\":[5000],\"max_tokens\":100000}";
    CHECK(serve_req_parse(C, b, strlen(b), &none, &r, &err));
    serve_req_free(&r);
}

/* The chat text of a request's messages (with the limits' template). */
static void chat_is(const struct serve_limits *l, const char *messages, const char *want, int line)
{
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\":%s}", messages);
    struct serve_req r;
    struct serve_error err = {0};
    test_checks++;
    if (!serve_req_parse(SERVE_EP_CHAT, body, strlen(body), l, &r, &err)) {
        test_failures++;
        fprintf(stderr, "line %d: %s refused: %s\n", line, body, err.message);
        return;
    }
    CHECK(r.chat && r.n_prompts == 1);
    if (strcmp(r.prompts[0].text, want) || r.prompts[0].len != strlen(want)) {
        test_failures++;
        fprintf(stderr, "line %d: %s\n  gave %s\n  want %s\n", line, body, r.prompts[0].text, want);
    }
    serve_req_free(&r);
}
#define CHAT_IS(l, messages, want) chat_is(l, messages, want, __LINE__)

static void test_chat_template(void)
{
    /* The roles of LLaDA's template (LLaDA2.0 and LLaDA-MoE). */
    const struct serve_chat *c = &llada_chat;
    CHECK(c->roles);
    CHECK(!strcmp(c->system_head, "<role>SYSTEM</role>"));
    CHECK(!strcmp(c->default_system, "detailed thinking off"));
    CHECK(!strcmp(c->user_head, "<role>HUMAN</role>"));
    CHECK(!strcmp(c->assistant_head, "<role>ASSISTANT</role>"));
    CHECK(!strcmp(c->end, LLADA_END));

    /* One user message is the model's template itself. */
    CHAT_IS(&lim, "[{\"role\":\"user\",\"content\":\"Hi\"}]",
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi<|role_end|>"
            "<role>ASSISTANT</role>");
    /* A system message replaces the default one; turns follow in order. */
    CHAT_IS(&lim,
            "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
            "\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello!\"},{\"role\":\"user\","
            "\"content\":[{\"type\":\"text\",\"text\":\"And \"},{\"type\":\"text\",\"text\":"
            "\"you?\"}]}]",
            "<role>SYSTEM</role>Be brief.<|role_end|><role>HUMAN</role>Hi<|role_end|>"
            "<role>ASSISTANT</role>Hello!<|role_end|><role>HUMAN</role>And you?<|role_end|>"
            "<role>ASSISTANT</role>");
    /* Several turns without a system message: the default one first. */
    CHAT_IS(&lim,
            "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\"},"
            "{\"role\":\"user\",\"content\":\"c\"}]",
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>a<|role_end|>"
            "<role>ASSISTANT</role>b<|role_end|><role>HUMAN</role>c<|role_end|>"
            "<role>ASSISTANT</role>");

    /* A template without a system turn: no default, system refused. */
    struct serve_chat plain;
    CHECK(serve_chat_init("<u>{prompt}</t><a>", "</t>", &plain) == 0);
    CHECK(plain.roles && !plain.system_head);
    struct serve_limits l = lim;
    l.chat = &plain;
    CHAT_IS(&l,
            "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":\"y\"},"
            "{\"role\":\"user\",\"content\":\"z\"}]",
            "<u>x</t><a>y</t><u>z</t><a>");
    struct serve_req r;
    struct serve_error err = {0};
    const char *b = "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"}]}";
    CHECK(!serve_req_parse(SERVE_EP_CHAT, b, strlen(b), &l, &r, &err));
    CHECK(!strcmp(err.param, "messages[0].role"));
    CHECK_CONTAINS(err.message, "no system turn");
    serve_chat_free(&plain);

    /* A template that does not split into roles (no end-of-turn token):
     * one user message, as the template says; more are refused. */
    CHECK(serve_chat_init(LLADA_TEMPLATE, NULL, &plain) == 0);
    CHECK(!plain.roles);
    CHAT_IS(&l, "[{\"role\":\"user\",\"content\":\"Hi\"}]",
            "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi<|role_end|>"
            "<role>ASSISTANT</role>");
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\","
        "\"content\":\"b\"}]}";
    CHECK(!serve_req_parse(SERVE_EP_CHAT, b, strlen(b), &l, &r, &err));
    CHECK_CONTAINS(err.message, "takes one user message");
    serve_chat_free(&plain);
    serve_chat_free(&plain); /* a freed one is zeroed: no-op */

    /* No template (or none with {prompt}): chat is refused. */
    CHECK(serve_chat_init("no placeholder", LLADA_END, &plain) == 0 && !plain.pre);
    l.chat = NULL;
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}";
    CHECK(!serve_req_parse(SERVE_EP_CHAT, b, strlen(b), &l, &r, &err));
    CHECK(err.http == 400 && !strcmp(err.param, "messages"));
    CHECK_CONTAINS(err.message, "no chat template");
}

static void test_chat(void)
{
    struct serve_req r;
    CHECK(parse_ok(SERVE_EP_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}],"
                   "\"max_completion_tokens\":9}",
                   &r));
    CHECK(r.chat);
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK_CONTAINS(r.prompts[0].text, "<role>HUMAN</role>Hi there<|role_end|>");
    CHECK_EQ_INT(r.max_tokens, 9);
    serve_req_free(&r);
    const enum serve_endpoint H = SERVE_EP_CHAT;
    BAD(H, "{\"prompt\":\"a\"}", "messages", "'messages' is required");
    BAD(H, "{\"messages\":[]}", "messages", "an empty array");
    BAD(H, "{\"messages\":\"hi\"}", "messages", "not a string");
    BAD(H, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", "must be a string");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"\"}]}", "messages[0].content",
        "is empty");
    BAD(H, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "missing");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
        "messages[0].content", "text part");
    BAD(H,
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"tool\",\"content\":"
        "\"u\"}]}",
        "messages[1].role", "must be 'system', 'user' or 'assistant'");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\"}]}",
        "messages[1].content", "missing");
    BAD(H, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"tools\":[{}]}", "tools",
        "not supported");
}

/* "model" names the model served, or is absent or null; another name is a
 * 404 model_not_found naming both, as GET /v1/models/NAME answers. */
static void test_model(void)
{
    struct serve_limits l = lim;
    l.model = "tiny";
    struct serve_req r;
    struct serve_tok_req t;
    struct serve_error err = {0};
    const char *ok[] = {"{\"prompt\":\"a\",\"model\":\"tiny\"}", "{\"prompt\":\"a\"}",
                        "{\"prompt\":\"a\",\"model\":null}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK(serve_req_parse(SERVE_EP_COMPLETIONS, ok[i], strlen(ok[i]), &l, &r, &err));
        serve_req_free(&r);
    }
    const char *b = "{\"prompt\":\"a\",\"model\":\"gpt-4\"}";
    CHECK(!serve_req_parse(SERVE_EP_COMPLETIONS, b, strlen(b), &l, &r, &err));
    CHECK_EQ_INT(err.http, 404);
    CHECK(err.code && !strcmp(err.code, "model_not_found") && !strcmp(err.param, "model"));
    CHECK_CONTAINS(err.message, "'gpt-4'");
    CHECK_CONTAINS(err.message, "'tiny'");
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"model\":\"tin\"}";
    CHECK(!serve_req_parse(SERVE_EP_CHAT, b, strlen(b), &l, &r, &err));
    CHECK_EQ_INT(err.http, 404);
    b = "{\"prompt\":\"a\",\"model\":\"tiny2\"}";
    CHECK(!serve_tokenize_parse(b, strlen(b), &l, &t, &err));
    CHECK_EQ_INT(err.http, 404);
    b = "{\"tokens\":[1],\"model\":\"x\"}";
    CHECK(!serve_detokenize_parse(b, strlen(b), &l, &t, &err));
    CHECK_EQ_INT(err.http, 404);
    b = "{\"tokens\":[1],\"model\":\"tiny\"}";
    CHECK(serve_detokenize_parse(b, strlen(b), &l, &t, &err));
    serve_tok_req_free(&t);
    /* The 404 of GET /v1/models/NAME is the same error. */
    struct serve_error get;
    CHECK_EQ_INT(serve_error_model(&get, "gpt-4", "tiny"), 404);
    CHECK(!strcmp(get.message, "the model 'gpt-4' is not served here (this server serves 'tiny')"));
}

/* lm-evaluation-harness's loglikelihood request (local-completions) asks
 * for echo and logprobs: it is refused naming echo (docs/serving.md). */
static void test_lm_eval_loglikelihood(void)
{
    BAD(SERVE_EP_COMPLETIONS,
        "{\"model\":\"tiny\",\"prompt\":[[1,2,3]],\"temperature\":0,\"max_tokens\":1,"
        "\"logprobs\":1,\"seed\":1234,\"echo\":true}",
        "echo", "not supported");
}

static void test_tokenize(void)
{
    struct serve_tok_req t;
    struct serve_error err;
    const char *b = "{\"prompt\":\"hello\",\"add_special_tokens\":false}";
    CHECK(serve_tokenize_parse(b, strlen(b), &lim, &t, &err));
    CHECK(!strcmp(t.p.text, "hello"));
    serve_tok_req_free(&t);
    /* Messages: in the chat template, as a chat completion has them. */
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    CHECK(serve_tokenize_parse(b, strlen(b), &lim, &t, &err));
    CHECK(!strcmp(t.p.text, "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>"
                            "hi<|role_end|><role>ASSISTANT</role>"));
    serve_tok_req_free(&t);
    b = "{\"prompt\":3}";
    CHECK(!serve_tokenize_parse(b, strlen(b), &lim, &t, &err));
    CHECK(!strcmp(err.param, "prompt"));
    b = "{\"tokens\":[1,2,3]}";
    CHECK(serve_detokenize_parse(b, strlen(b), &lim, &t, &err));
    CHECK_EQ_INT(t.p.n_ids, 3);
    serve_tok_req_free(&t);
    b = "{\"tokens\":[]}";
    CHECK(serve_detokenize_parse(b, strlen(b), &lim, &t, &err));
    CHECK_EQ_INT(t.p.n_ids, 0);
    serve_tok_req_free(&t);
    b = "{\"tokens\":[1,\"x\"]}";
    CHECK(!serve_detokenize_parse(b, strlen(b), &lim, &t, &err));
    CHECK(!strcmp(err.param, "tokens"));
    char *js = serve_tokens_json((const int32_t[]){4, 5}, 2, 4096);
    CHECK(js && !strcmp(js, "{\"count\":2,\"max_model_len\":4096,\"tokens\":[4,5]}"));
    free(js);
}

static void test_utf8(void)
{
    size_t n;
    char *s = serve_utf8_clean("ab\xc3\xa9", 4, false, &n); /* complete é */
    CHECK(n == 4 && !strcmp(s, "ab\xc3\xa9"));
    free(s);
    s = serve_utf8_clean("ab\xe2\x82", 4, false, &n); /* € cut short: held back */
    CHECK(n == 2 && !strcmp(s, "ab"));
    free(s);
    s = serve_utf8_clean("ab\xe2\x82", 4, true, &n); /* final: replaced */
    CHECK(n == 5 && !strcmp(s, "ab\xef\xbf\xbd"));
    free(s);
    s = serve_utf8_clean("\xff"
                         "a\x80\xc0\xaf"
                         "b",
                         6, false, &n); /* invalid bytes */
    CHECK(!strcmp(s, "\xef\xbf\xbd"
                     "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                     "b"));
    free(s);
    s = serve_utf8_clean("\xed\xa0\x80", 3, true, &n); /* a surrogate is not UTF-8 */
    CHECK(!strcmp(s, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
    free(s);
    s = serve_utf8_clean("\xf0\x9f\x98\x80!", 5, false, &n); /* emoji */
    CHECK(n == 5);
    free(s);
    /* Whatever the bytes, the result is a valid JSON string. */
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)(255 - i);
    s = serve_utf8_clean((const char *)all, 256, true, &n);
    json_t *v = json_stringn(s, n);
    CHECK(v != NULL);
    json_decref(v);
    free(s);
}

static void test_stop(void)
{
    char *stops[] = {"\n\n", "END", "xyz"};
    CHECK_EQ_INT(serve_stop_find("abc END\n\n", 9, stops, 3), 4);
    CHECK_EQ_INT(serve_stop_find("abc\n\nEND", 8, stops, 3), 3);
    CHECK_EQ_INT(serve_stop_find("abc", 3, stops, 3), -1);
    CHECK_EQ_INT(serve_stop_find("abc", 3, stops, 0), -1);
    CHECK_EQ_INT(serve_stop_holdback("abc EN", 6, stops, 3), 2);
    CHECK_EQ_INT(serve_stop_holdback("abc E", 5, stops, 3), 1);
    CHECK_EQ_INT(serve_stop_holdback("abc\n", 4, stops, 3), 1);
    CHECK_EQ_INT(serve_stop_holdback("abcxy", 5, stops, 3), 2);
    CHECK_EQ_INT(serve_stop_holdback("abc", 3, stops, 3), 0);
    CHECK_EQ_INT(serve_stop_holdback("", 0, stops, 3), 0);
    CHECK_EQ_INT(serve_stop_holdback("E", 1, stops, 3), 1);
}

static void test_responses(void)
{
    const struct serve_usage u = {.prompt_tokens = 5,
                                  .completion_tokens = 7,
                                  .steps = 3,
                                  .forwards = 4,
                                  .blocks = 1,
                                  .seconds = 0.5,
                                  .hit_rate = 0.75,
                                  .hit_rows = 3,
                                  .miss_rows = 1,
                                  .promotions = 2,
                                  .weight_bytes = 1500000000,
                                  .act_bytes = 500000000};
    const struct serve_choice c[2] = {{"hi \xe2\x82\xac", 6, "stop"}, {"bad \xff", 5, "length"}};
    char *js = serve_response_json(SERVE_EP_COMPLETIONS, "cmpl-1", 123, "m", -1, c, 2, &u);
    json_t *o = json_loads(js, 0, NULL);
    CHECK(o != NULL);
    CHECK(!strcmp(json_string_value(json_object_get(o, "object")), "text_completion"));
    json_t *ch = json_object_get(o, "choices");
    CHECK_EQ_INT(json_array_size(ch), 2);
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(ch, 0), "text")),
                  "hi \xe2\x82\xac"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(ch, 1), "text")),
                  "bad \xef\xbf\xbd"));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(ch, 1), "finish_reason")),
                  "length"));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")),
                 12);
    json_t *t = json_object_get(o, "tide");
    CHECK_EQ_INT(json_integer_value(json_object_get(t, "steps")), 3);
    CHECK_EQ_INT(json_integer_value(json_object_get(t, "promotions")), 2);
    CHECK_NEAR(json_real_value(json_object_get(t, "gb_moved")), 2.0, 1e-12);
    CHECK_NEAR(json_real_value(json_object_get(t, "hit_rate")), 0.75, 1e-12);
    json_decref(o);
    free(js);

    js = serve_response_json(SERVE_EP_CHAT, "chatcmpl-1", 1, "m", -1, c, 1, &u);
    o = json_loads(js, 0, NULL);
    json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    CHECK(!strcmp(json_string_value(json_object_get(msg, "role")), "assistant"));
    CHECK(!strcmp(json_string_value(json_object_get(msg, "content")), "hi \xe2\x82\xac"));
    json_decref(o);
    free(js);

    char *ev = serve_chunk_sse(SERVE_EP_CHAT, "chatcmpl-1", 1, "m", -1, 0, "ab", 2, true, NULL, 0,
                               4, NULL);
    CHECK(!strncmp(ev, "data: {", 7) && !strcmp(ev + strlen(ev) - 2, "\n\n"));
    o = json_loads(ev + 6, 0, NULL);
    json_t *d = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta");
    CHECK(!strcmp(json_string_value(json_object_get(d, "role")), "assistant"));
    CHECK(!strcmp(json_string_value(json_object_get(d, "content")), "ab"));
    CHECK(!strcmp(json_string_value(json_object_get(o, "object")), "chat.completion.chunk"));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(o, "tide"), "steps")), 4);
    json_decref(o);
    free(ev);
    ev = serve_chunk_sse(SERVE_EP_COMPLETIONS, "c", 1, "m", -1, 0, "", 0, false, NULL, -1, 0, &u);
    o = json_loads(ev + 6, 0, NULL);
    CHECK_EQ_INT(json_array_size(json_object_get(o, "choices")), 0);
    CHECK(json_object_get(o, "usage") && json_object_get(o, "tide"));
    json_decref(o);
    free(ev);

    js = serve_models_json("llada2-tiny", 5, false);
    CHECK(js && strstr(js, "\"object\":\"list\"") && strstr(js, "\"id\":\"llada2-tiny\""));
    free(js);
}

/* What the server emits, control characters included, is taken back as an
 * assistant turn: U+0000 becomes U+FFFD (JSON parsers refuse \u0000), the
 * others are escaped and come back as they were. Answers carry their seed. */
static void test_round_trip(void)
{
    char text[40];
    for (int i = 0; i < 32; i++)
        text[i] = (char)i;
    memcpy(text + 32, "ok\x7f", 3);
    const struct serve_choice c = {text, 35, "stop"};
    const struct serve_usage u = {0};
    char *js = serve_response_json(SERVE_EP_CHAT, "chatcmpl-1", 1, "m", 42, &c, 1, &u);
    json_t *o = json_loads(js, 0, NULL);
    CHECK(o != NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "seed")), 42);
    json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    json_t *body = json_pack("{s:[{s:s,s:s},{s:s,s:O},{s:s,s:s}]}", "messages", "role", "user",
                             "content", "Hi", "role", "assistant", "content",
                             json_object_get(msg, "content"), "role", "user", "content", "More");
    char *back = json_dumps(body, JSON_COMPACT);
    struct serve_req r;
    CHECK(parse_ok(SERVE_EP_CHAT, back, &r));
    CHECK(r.n_prompts == 1 &&
          memmem(r.prompts[0].text, r.prompts[0].len, "\xef\xbf\xbd\x01\x02", 5) != NULL);
    serve_req_free(&r);
    free(back);
    json_decref(body);
    json_decref(o);
    free(js);
    char *ev =
        serve_chunk_sse(SERVE_EP_COMPLETIONS, "c", 1, "m", 7, 0, text, 35, false, NULL, 0, 1, NULL);
    CHECK(ev && !strstr(ev, "\\u0000") && strstr(ev, "\"seed\":7"));
    free(ev);
    ev = serve_chunk_sse(SERVE_EP_COMPLETIONS, "c", 1, "m", -1, 0, "a", 1, false, NULL, 0, 1, NULL);
    CHECK(ev && !strstr(ev, "\"seed\""));
    free(ev);
}

static void test_metrics(void)
{
    struct serve_metrics *m = serve_metrics_create(2);
    serve_metrics_request(m, "completions", 200);
    serve_metrics_request(m, "completions", 200);
    serve_metrics_request(m, "completions", 400);
    serve_metrics_step(m, 0.003);
    serve_metrics_step(m, 7);
    const struct serve_usage u = {.prompt_tokens = 5,
                                  .completion_tokens = 7,
                                  .steps = 2,
                                  .hit_rows = 3,
                                  .miss_rows = 1,
                                  .weight_bytes = 10,
                                  .seconds = 0.2};
    serve_metrics_generation(m, &u);
    serve_metrics_cancel(m, "disconnect");
    const struct serve_offload layers[2] = {{.hit_rows = 1, .miss_rows = 3}, {.hit_rows = 2}};
    serve_metrics_layers(m, layers, 2);
    const struct serve_engine_info info = {
        .policy = "policy-tide", .budget = 4, .n_experts = 8, .n_moe_layers = 2};
    char *t = serve_metrics_render(m, 3, 1, 64, &info, "my \"model\"");
    CHECK_CONTAINS(t, "tide_http_requests_total{endpoint=\"completions\",status=\"200\"} 2\n");
    CHECK_CONTAINS(t, "tide_http_requests_total{endpoint=\"completions\",status=\"400\"} 1\n");
    CHECK_CONTAINS(t, "tide_queue_requests 3\n");
    CHECK_CONTAINS(t, "tide_step_seconds_bucket{le=\"0.005\"} 1\n");
    CHECK_CONTAINS(t, "tide_step_seconds_bucket{le=\"10\"} 2\n");
    CHECK_CONTAINS(t, "tide_step_seconds_count 2\n");
    CHECK_CONTAINS(t, "tide_generation_tokens_total 7\n");
    CHECK_CONTAINS(t, "tide_expert_hit_rate 0.75\n");
    CHECK_CONTAINS(t, "tide_layer_hit_rate{layer=\"0\"} 0.25\n");
    CHECK_CONTAINS(t, "tide_layer_hit_rate{layer=\"1\"} 1\n");
    CHECK_CONTAINS(t, "tide_cancelled_total{reason=\"disconnect\"} 1\n");
    CHECK_CONTAINS(t, "model=\"my \\\"model\\\"\"");
    CHECK_CONTAINS(t, "# TYPE tide_step_seconds histogram\n");
    /* Every non-comment line is "name[{labels}] value". */
    int bad = 0;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n"))
        if (line[0] != '#' && !strchr(line, ' '))
            bad++;
    CHECK_EQ_INT(bad, 0);
    free(t);
    struct serve_metrics_totals tot;
    serve_metrics_totals(m, &tot);
    CHECK_EQ_INT(tot.requests, 3);
    CHECK_EQ_INT(tot.cancelled, 1);
    serve_metrics_destroy(m);
}

int main(void)
{
    if (serve_chat_init(LLADA_TEMPLATE, LLADA_END, &llada_chat)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    TEST_RUN(test_completions_fields);
    TEST_RUN(test_completions_errors);
    TEST_RUN(test_chat_template);
    TEST_RUN(test_chat);
    TEST_RUN(test_model);
    TEST_RUN(test_lm_eval_loglikelihood);
    TEST_RUN(test_tokenize);
    TEST_RUN(test_utf8);
    TEST_RUN(test_stop);
    TEST_RUN(test_responses);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_metrics);
    serve_chat_free(&llada_chat);
    TEST_DONE();
}
