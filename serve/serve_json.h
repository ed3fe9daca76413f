/* `tide serve`: the OpenAI-compatible request and response bodies.
 *
 * Pure functions, no engine and no HTTP: a request body (bytes) becomes a
 * struct serve_req or an OpenAI-style error naming the field at fault, and
 * results become response bodies (whole JSON objects or server-sent-event
 * chunks). tests/serve/test_serve_json.c covers them, and the fuzz target
 * tests/fuzz/fuzz_serve_request.c feeds them arbitrary bytes. */
#ifndef TIDE_SERVE_JSON_H
#define TIDE_SERVE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOP     16  /* stop sequences per request */
#define SERVE_MAX_PROMPTS  64  /* prompts in one completions request (a batch) */
#define SERVE_MAX_STOP_LEN 256 /* bytes of one stop sequence */

enum serve_endpoint {
    SERVE_EP_COMPLETIONS = 0, /* POST /v1/completions */
    SERVE_EP_CHAT = 1,        /* POST /v1/chat/completions */
};

/* One prompt: text, or token ids (the OpenAI API accepts both). */
struct serve_prompt {
    char *text; /* NUL-terminated UTF-8, or NULL when ids are given */
    size_t len;
    int32_t *ids; /* [n_ids], or NULL */
    size_t n_ids;
};

/* A parsed and validated generation request. Numeric parameters are
 * negative when the request leaves them to the configuration. */
struct serve_req {
    enum serve_endpoint ep;
    struct serve_prompt *prompts; /* [n_prompts]; chat: one, the conversation in the chat
                                     template (serve_chat) */
    int n_prompts;
    bool chat;          /* the chat endpoint: prompts[0] came from "messages" */
    int64_t max_tokens; /* tokens to generate at most */
    int block_length;
    int steps;
    double threshold;
    double temperature;
    int top_k;
    double top_p;
    int64_t seed;
    char *stop[SERVE_MAX_STOP]; /* NUL-terminated, non-empty */
    int n_stop;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
};

/* A model's chat template, split into roles (docs/serving.md, "Chat").
 *
 * The model gives a template for one prompt, PRE{prompt}POST, and the token
 * that ends a turn, END ("<|role_end|>"). LLaDA2.0's and LLaDA-MoE's:
 *   PRE  = <role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>
 *   POST = <|role_end|><role>ASSISTANT</role>
 * POST is END and the assistant's head (the generation prompt). What
 * follows PRE's last END is the user's head; what precedes it is the system
 * turn, none when PRE holds no END. The heads share a form, the longest
 * prefix and suffix common to the user's and the assistant's ("<role>",
 * "</role>"): the system turn is its head (up to the first such suffix) and
 * the default system text (the rest). A conversation is rendered as
 *   [system head, default text, END: unless the first message is a system one]
 *   then head, content, END for each message, then the assistant's head;
 * one user message gives PRE content POST, the template itself. A template
 * that does not split so (no END after {prompt}, heads without a common
 * form) takes one user message only, as PRE content POST. */
struct serve_chat {
    char *pre, *post;     /* around {prompt}; NULL: the model has no chat template */
    bool roles;           /* split into roles: the fields below are set */
    char *system_head;    /* "<role>SYSTEM</role>"; NULL: no system turn (refused) */
    char *default_system; /* "detailed thinking off": when no system message is given */
    char *user_head;      /* "<role>HUMAN</role>" */
    char *assistant_head; /* "<role>ASSISTANT</role>" */
    char *end;            /* "<|role_end|>" */
};

/* Split tmpl (with one "{prompt}"; NULL or without one: no chat) by the
 * end-of-turn token end (NULL: none, one user message only). Returns 0, or
 * -1 when out of memory; free *out with serve_chat_free (zeroed: no-op). */
int serve_chat_init(const char *tmpl, const char *end, struct serve_chat *out);
void serve_chat_free(struct serve_chat *c);

/* What the parser checks requests against. */
struct serve_limits {
    int64_t max_ctx; /* the model's context in positions; max_tokens beyond it is refused */
    int vocab;       /* token ids must be below it */
    /* --- NULL: not checked (chat: refused) --- */
    const char *model;             /* the name served: another "model" gets 404 */
    const struct serve_chat *chat; /* renders "messages"; NULL: no chat template */
};

/* An error answer: HTTP status, OpenAI error type and code, the field at
 * fault (or NULL) and a message. */
struct serve_error {
    int http;
    const char *type; /* "invalid_request_error", "authentication_error", ... */
    const char *code; /* or NULL */
    char param[64];   /* "" when no single field is at fault */
    char message[512];
};

/* Set *err (printf-style message). Returns err->http. */
int serve_error_set(struct serve_error *err, int http, const char *type, const char *code,
                    const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Set *err to the 404 model_not_found for a model other than the one served
 * (GET /v1/models/NAME, and "model" in a request body). Returns 404. */
int serve_error_model(struct serve_error *err, const char *name, const char *served);

/* Parse body[0..len) as a request for ep. Returns true and fills *out (free
 * it with serve_req_free), or false with *err set (HTTP 400 naming the
 * field; 404 for a model not served). Unknown fields are ignored; known ones
 * that this server cannot honour (n > 1, logprobs, echo, suffix, tools,
 * penalties) are refused. */
bool serve_req_parse(enum serve_endpoint ep, const char *body, size_t len,
                     const struct serve_limits *lim, struct serve_req *out,
                     struct serve_error *err);
void serve_req_free(struct serve_req *r); /* NULL and zeroed requests are fine */

/* The body of an error answer: {"error": {...}}; malloc'd, caller frees. */
char *serve_error_json(const struct serve_error *err);

/* ---- text helpers ------------------------------------------------------- */

/* Copy text[0..len) to a malloc'd NUL-terminated string, replacing every
 * invalid UTF-8 sequence, and every NUL byte, with U+FFFD (a client could
 * not send a NUL back: JSON parsers refuse \u0000, ours included; other
 * control characters are escaped in JSON and taken back as they are). When final is false, an
 * incomplete sequence at the very end is left out (a later token may complete it). *out_len gets
 * the length. Returns NULL when out of memory. */
char *serve_utf8_clean(const char *text, size_t len, bool final, size_t *out_len);

/* The earliest occurrence of any stop string in text[0..len): its offset,
 * or -1 when none. */
int64_t serve_stop_find(const char *text, size_t len, char *const *stop, int n_stop);

/* Bytes at the end of text[0..len) that could begin a stop string: the
 * length of the longest suffix that is a proper prefix of one of them. A
 * stream holds these back until the next block shows whether they stop it. */
size_t serve_stop_holdback(const char *text, size_t len, char *const *stop, int n_stop);

/* ---- response bodies ---------------------------------------------------- */

/* Counters reported with each answer ("usage" and the "tide" object). */
struct serve_usage {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    /* the tide object */
    int64_t steps, forwards;
    int blocks;
    double seconds, prefill_seconds, queue_seconds;
    double hit_rate; /* device rows / all expert rows */
    uint64_t hit_rows, miss_rows, promotions, evictions, weight_bytes, act_bytes;
};

/* One finished choice. */
struct serve_choice {
    const char *text; /* UTF-8 */
    size_t len;
    const char *finish_reason; /* "stop", "length" or NULL (cancelled) */
};

/* A whole answer: a text_completion or a chat.completion object with the
 * choices, usage and tide objects, and "seed" (the sampling seed used; left
 * out when negative). malloc'd, caller frees; NULL on NOMEM. */
char *serve_response_json(enum serve_endpoint ep, const char *id, int64_t created,
                          const char *model, int64_t seed, const struct serve_choice *choices,
                          int n, const struct serve_usage *usage);

/* One server-sent event "data: {...}\n\n" of a stream: a chunk with "seed"
 * (as serve_response_json's), text delta[0..len) for choice index, with finish_reason (NULL while
 * going on), role (chat: the first chunk), block (>= 0: a "tide" member naming the block and steps
 * so far) and usage (non-NULL: the final usage chunk, no choices). malloc'd, caller frees. */
char *serve_chunk_sse(enum serve_endpoint ep, const char *id, int64_t created, const char *model,
                      int64_t seed, int index, const char *delta, size_t len, bool role,
                      const char *finish_reason, int block, int64_t steps,
                      const struct serve_usage *usage);

/* POST /tokenize ({"prompt": text} or {"messages": [...]}, rendered in the
 * chat template as for chat completions) and POST /detokenize ({"tokens":
 * [ids]}), as vLLM serves them (lm-evaluation-harness's remote tokenizer
 * uses both). */
struct serve_tok_req {
    struct serve_prompt p; /* text (tokenize; messages already rendered) or ids (detokenize) */
};
bool serve_tokenize_parse(const char *body, size_t len, const struct serve_limits *lim,
                          struct serve_tok_req *out, struct serve_error *err);
bool serve_detokenize_parse(const char *body, size_t len, const struct serve_limits *lim,
                            struct serve_tok_req *out, struct serve_error *err);
void serve_tok_req_free(struct serve_tok_req *t);
/* {"count": n, "max_model_len": max_ctx, "tokens": [...]} */
char *serve_tokens_json(const int32_t *ids, size_t n, int64_t max_ctx);
/* {"prompt": text} */
char *serve_detokens_json(const char *text, size_t len);
/* GET /tokenizer_info: {"eos_token": ..., "model_max_length": ...} */
char *serve_tokenizer_info_json(const char *eos, int64_t max_ctx);

/* GET /v1/models: the one model served. */
char *serve_models_json(const char *model, int64_t created, bool one);

#endif
