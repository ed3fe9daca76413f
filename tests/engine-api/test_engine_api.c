/* The public embedding API (tide/engine.h) end to end on a generated tiny
 * checkpoint, using nothing but public headers: opening (file errors, bad
 * overrides, the messages handed back), generation with every callback,
 * per-request parameters, cancellation, offload counters, options changed on
 * an open engine (a lossless re-placement), tokens.
 * usage: test_engine_api PLUGIN_DIR */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tide/engine.h"
#include "tide/log.h"

static const char *plugin_dir;
static char work[] = "/tmp/tide-engine-api-XXXXXX";
static char config_text[1024];

/* A 40-token prompt of ids the tiny tokenizer knows. */
static int32_t prompt_ids[40];

static int open_engine(const char *const *sets, int n_sets, struct tide_engine **e)
{
    const struct tide_engine_args a = {
        .size = sizeof a,
        .config_text = config_text,
        .sets = sets,
        .n_sets = n_sets,
        .plugin_path = plugin_dir,
    };
    return tide_engine_open(&a, e);
}

static void test_open_errors(void)
{
    struct tide_engine *e = (struct tide_engine *)&e; /* must be reset to NULL */
    CHECK_EQ_INT(tide_engine_open(NULL, &e), TIDE_E_INVAL);
    CHECK(e == NULL);
    CHECK_CONTAINS(tide_engine_error(NULL), "args is NULL");

    struct tide_engine_args a = {.size = 4};
    CHECK_EQ_INT(tide_engine_open(&a, &e), TIDE_E_INVAL);
    CHECK_CONTAINS(tide_engine_error(NULL), "sizeof(struct tide_engine_args)");

    /* Every problem of the text is reported, with its line. */
    a = (struct tide_engine_args){.size = sizeof a,
                                  .config_text = "[generation]\nstepz = 3\nthreshold = 2\n",
                                  .plugin_path = plugin_dir};
    CHECK_EQ_INT(tide_engine_open(&a, &e), TIDE_E_CONFIG);
    CHECK(e == NULL);
    CHECK_CONTAINS(tide_engine_error(NULL), "<config text>:2: unknown key 'stepz' in [generation]");
    CHECK_CONTAINS(tide_engine_error(NULL), "did you mean 'steps'?");
    CHECK_CONTAINS(tide_engine_error(NULL), "<config text>:3: [generation] threshold = '2'");

    a = (struct tide_engine_args){.size = sizeof a, .config_path = "/nonexistent/t.ini"};
    CHECK_EQ_INT(tide_engine_open(&a, &e), TIDE_E_CONFIG);
    CHECK_CONTAINS(tide_engine_error(NULL), "/nonexistent/t.ini");

    const char *bad[] = {"generation.steps=0", "nosection", "policy.plugin=policy-frob"};
    CHECK_EQ_INT(open_engine(bad, 2, &e), TIDE_E_CONFIG);
    CHECK_CONTAINS(tide_engine_error(NULL), "[generation] steps = '0'");
    CHECK_CONTAINS(tide_engine_error(NULL), "expected section.key=value");
    /* An unknown policy is found when the experts are placed. */
    const char *pol[] = {"policy.plugin=policy-frob", "policy.budget=4"};
    CHECK_EQ_INT(open_engine(pol, 2, &e), TIDE_E_CONFIG);
    CHECK_CONTAINS(tide_engine_error(NULL), "policy-frob: no policy plugin of that name");
    /* The same file given twice is a duplicate; a text after a file may
     * override it. */
    char path[512];
    snprintf(path, sizeof path, "%s/t.ini", work);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fprintf(f, "[generation]\nsteps = 8\n");
        fclose(f);
    }
    char text[1200];
    snprintf(text, sizeof text, "%s[generation]\nsteps = 12\n", config_text);
    a = (struct tide_engine_args){
        .size = sizeof a, .config_path = path, .config_text = text, .plugin_path = plugin_dir};
    CHECK_EQ_INT(tide_engine_open(&a, &e), TIDE_OK);
    const char *v = NULL;
    CHECK_EQ_INT(tide_engine_get_option(e, "generation.steps", &v), TIDE_OK);
    CHECK(v && !strcmp(v, "12"));
    CHECK_EQ_INT(tide_engine_get_option(e, "generation.nokey", &v), TIDE_E_NOTFOUND);
    CHECK_CONTAINS(tide_engine_error(e), "no option 'generation.nokey'");
    tide_engine_close(e);
}

/* Everything the callbacks saw. */
struct seen {
    int starts, steps, blocks, logits;
    int64_t prompt_tokens;
    int n_blocks;
    char text[65536];
    size_t len;
    int64_t last_n_ids;
    int cancel_at_step;  /* return nonzero from on_step after this many steps (0: never) */
    int cancel_at_block; /* ... from on_block after this many blocks */
    struct tide_engine *cancel_engine; /* call tide_engine_cancel instead of returning 1 */
    int rows, vocab;
};

static int on_start(void *u, const struct tide_start_event *ev)
{
    struct seen *s = u;
    s->starts++;
    s->prompt_tokens = ev->prompt_tokens;
    s->n_blocks = ev->n_blocks;
    return 0;
}

static int on_step(void *u, const struct tide_step_event *ev)
{
    struct seen *s = u;
    s->steps++;
    CHECK_EQ_INT(ev->steps, s->steps);
    CHECK(ev->block < ev->n_blocks);
    if (s->cancel_at_step && s->steps == s->cancel_at_step) {
        if (s->cancel_engine) {
            tide_engine_cancel(s->cancel_engine);
            return 0;
        }
        return 1;
    }
    return 0;
}

static int on_block(void *u, const struct tide_block_event *ev)
{
    struct seen *s = u;
    CHECK_EQ_INT(ev->block, s->blocks);
    s->blocks++;
    CHECK(ev->n_ids >= s->last_n_ids);
    s->last_n_ids = ev->n_ids;
    CHECK(ev->delta + ev->delta_len <= ev->text + ev->text_len);
    if (s->len + ev->delta_len < sizeof s->text) {
        memcpy(s->text + s->len, ev->delta, ev->delta_len);
        s->len += ev->delta_len;
    }
    return s->cancel_at_block && s->blocks == s->cancel_at_block;
}

static void on_logits(void *u, const struct tide_logits_event *ev)
{
    struct seen *s = u;
    s->logits++;
    s->rows = ev->rows;
    s->vocab = ev->vocab;
}

static void request(struct tide_request *r, struct seen *s)
{
    tide_request_init(r);
    r->prompt_ids = prompt_ids;
    r->n_prompt_ids = 40;
    r->user = s;
    r->on_start = on_start;
    r->on_step = on_step;
    r->on_block = on_block;
    r->on_logits = on_logits;
}

static void test_generate(void)
{
    struct tide_engine *e = NULL;
    CHECK_EQ_INT(open_engine(NULL, 0, &e), TIDE_OK);
    if (!e)
        return;
    struct tide_engine_info info = {.size = sizeof info};
    CHECK_EQ_INT(tide_engine_get_info(e, &info), TIDE_OK);
    CHECK_EQ_INT(info.n_experts, 32);
    CHECK_EQ_INT(info.budget, 32);
    CHECK(!strcmp(info.policy, "none"));
    CHECK_EQ_INT(info.block_length, 32);
    CHECK(info.vocab_size > 0 && info.max_ctx >= 128);

    struct seen s = {0};
    struct tide_request r;
    request(&r, &s);
    struct tide_result *res = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res), TIDE_OK);
    if (!res) {
        tide_engine_close(e);
        return;
    }
    CHECK_EQ_INT(res->prompt_tokens, 40);
    CHECK_EQ_INT(s.starts, 1);
    CHECK_EQ_INT(s.prompt_tokens, 40);
    CHECK_EQ_INT(s.n_blocks, 3); /* 40 + 64 positions in blocks of 32: blocks 1..3 */
    CHECK_EQ_INT(s.blocks, res->blocks);
    CHECK_EQ_INT(s.steps, res->steps);
    CHECK_EQ_INT(s.logits, res->steps);
    CHECK_EQ_INT(s.rows, 32);
    CHECK_EQ_INT(s.vocab, info.vocab_size);
    CHECK_EQ_INT(s.last_n_ids, res->n_ids);
    CHECK(res->forwards > res->steps);
    CHECK(!res->cancelled);
    CHECK_EQ_INT(res->gen_length, 64);
    CHECK(res->text != NULL && strlen(res->text) == res->text_len);
    /* The deltas make up the text, but for an unfinished UTF-8 tail. */
    CHECK(s.len <= res->text_len && res->text_len - s.len <= 3);
    CHECK(!memcmp(s.text, res->text, s.len));
    /* Without offload every expert row is a hit; the counters add up. */
    CHECK(res->offload.tokens > 0);
    CHECK_EQ_INT(res->offload.miss_rows, 0);
    CHECK_EQ_INT(res->offload.hit_rows, res->offload.tokens * (uint64_t)info.experts_per_token);
    CHECK_NEAR(res->offload.hit_rate, 1.0, 0);

    /* The same request again: the same tokens. */
    struct seen s2 = {0};
    request(&r, &s2);
    struct tide_result *res2 = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res2), TIDE_OK);
    if (res2) {
        CHECK_EQ_INT(res2->n_ids, res->n_ids);
        CHECK(!memcmp(res2->ids, res->ids, sizeof *res->ids * (size_t)res->n_ids));
        struct tide_offload_stats tot = {.size = sizeof tot};
        CHECK_EQ_INT(tide_engine_stats(e, &tot), TIDE_OK);
        CHECK_EQ_INT(tot.tokens, res->offload.tokens + res2->offload.tokens);
        CHECK_EQ_INT(tot.hit_rows, res->offload.hit_rows + res2->offload.hit_rows);
    }
    /* Per MoE layer: the layers add up to the total. */
    struct tide_offload_stats all = {.size = sizeof all}, sum = {0};
    CHECK_EQ_INT(tide_engine_stats(e, &all), TIDE_OK);
    for (int l = 0; l < info.n_moe_layers; l++) {
        struct tide_offload_stats ls = {.size = sizeof ls};
        CHECK_EQ_INT(tide_engine_layer_stats(e, l, &ls), TIDE_OK);
        CHECK(ls.tokens > 0);
        sum.tokens += ls.tokens;
        sum.hit_rows += ls.hit_rows;
        sum.active += ls.active;
    }
    CHECK_EQ_INT(sum.tokens, all.tokens);
    CHECK_EQ_INT(sum.hit_rows, all.hit_rows);
    CHECK_EQ_INT(sum.active, all.active);
    struct tide_offload_stats bad = {.size = sizeof bad};
    CHECK_EQ_INT(tide_engine_layer_stats(e, info.n_moe_layers, &bad), TIDE_E_RANGE);
    CHECK_CONTAINS(tide_engine_error(e), "MoE layers");
    tide_engine_reset_stats(e);
    CHECK_EQ_INT(tide_engine_layer_stats(e, 0, &bad), TIDE_OK);
    CHECK_EQ_INT(bad.tokens, 0);
    struct tide_offload_stats tot = {.size = sizeof tot};
    CHECK_EQ_INT(tide_engine_stats(e, &tot), TIDE_OK);
    CHECK_EQ_INT(tot.tokens, 0);
    /* An old caller's smaller struct is filled only as far as it goes. */
    struct tide_offload_stats small = {.size = 8};
    CHECK_EQ_INT(tide_engine_stats(e, &small), TIDE_E_INVAL);

    /* Per-request parameters: typed, and as generation.key=value. */
    struct seen s3 = {0};
    request(&r, &s3);
    r.gen_length = 20;
    const char *sets[] = {"generation.steps=4"};
    r.sets = sets;
    r.n_sets = 1;
    struct tide_result *res3 = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res3), TIDE_OK);
    if (res3) {
        CHECK_EQ_INT(res3->gen_length, 20);
        CHECK_EQ_INT(res3->steps_per_block, 4);
        CHECK_EQ_INT(s3.n_blocks, 1); /* 40 + 20 positions: block 1 only */
        CHECK(res3->steps <= 4 * res3->blocks);
    }
    /* The engine's own configuration did not change. */
    const char *v = NULL;
    CHECK_EQ_INT(tide_engine_get_option(e, "generation.steps", &v), TIDE_OK);
    CHECK(v && !strcmp(v, "32"));

    /* Bad per-request values name the option; nothing runs. */
    struct seen s4 = {0};
    struct tide_result *res4 = (struct tide_result *)&s4;
    request(&r, &s4);
    r.threshold = 1.5;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res4), TIDE_E_CONFIG);
    CHECK(res4 == NULL);
    CHECK_CONTAINS(tide_engine_error(e), "[generation] threshold = '1.5'");
    CHECK_EQ_INT(s4.starts, 0);
    request(&r, &s4);
    const char *other[] = {"policy.budget=3"};
    r.sets = other;
    r.n_sets = 1;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res4), TIDE_E_CONFIG);
    CHECK_CONTAINS(tide_engine_error(e), "only [generation] options change per request");
    request(&r, &s4);
    r.block_length = 16;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res4), TIDE_E_UNSUPPORTED);
    CHECK_CONTAINS(tide_engine_error(e), "block_length 16 differs from the 32");
    request(&r, &s4);
    r.prompt_ids = NULL;
    r.prompt = "";
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res4), TIDE_E_RANGE);
    CHECK_CONTAINS(tide_engine_error(e), "the prompt is empty");
    request(&r, &s4);
    r.gen_length = 100000;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res4), TIDE_E_RANGE);
    CHECK_CONTAINS(tide_engine_error(e), "but the model's context is");
    request(&r, &s4);
    r.prompt_ids = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res4), TIDE_E_INVAL);
    CHECK_CONTAINS(tide_engine_error(e), "no prompt");
    CHECK_EQ_INT(s4.starts, 0);
    /* A success clears the engine's message. */
    struct seen s5 = {0};
    request(&r, &s5);
    r.gen_length = 8;
    struct tide_result *res5 = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res5), TIDE_OK);
    CHECK(!strcmp(tide_engine_error(e), ""));

    tide_result_free(res);
    tide_result_free(res2);
    tide_result_free(res3);
    tide_result_free(res5);
    tide_engine_close(e);
}

static void test_cancel(void)
{
    struct tide_engine *e = NULL;
    CHECK_EQ_INT(open_engine(NULL, 0, &e), TIDE_OK);
    if (!e)
        return;
    /* From on_step: no further step runs. */
    struct seen s = {.cancel_at_step = 3};
    struct tide_request r;
    request(&r, &s);
    struct tide_result *res = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res), TIDE_E_CANCELLED);
    CHECK(res != NULL);
    if (res) {
        CHECK(res->cancelled);
        CHECK_EQ_INT(res->steps, 3);
        CHECK_EQ_INT(s.steps, 3);
        CHECK_EQ_INT(res->n_ids, 0); /* no block was final */
    }
    CHECK_CONTAINS(tide_engine_error(e), "cancelled");
    tide_result_free(res);
    /* tide_engine_cancel (any thread; here a callback). */
    struct seen s2 = {.cancel_at_step = 2, .cancel_engine = e};
    request(&r, &s2);
    res = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res), TIDE_E_CANCELLED);
    CHECK_EQ_INT(s2.steps, 2);
    tide_result_free(res);
    /* From on_block: the result holds the final block. */
    struct seen s3 = {.cancel_at_block = 1};
    request(&r, &s3);
    res = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res), TIDE_E_CANCELLED);
    if (res) {
        CHECK(res->cancelled);
        CHECK_EQ_INT(res->blocks, 1);
        CHECK_EQ_INT(res->n_ids, s3.last_n_ids);
        CHECK(res->n_ids > 0 && res->n_ids <= 24); /* block 1 holds positions 40..63 */
    }
    tide_result_free(res);
    /* A cancel between generations does not reach the next one. */
    tide_engine_cancel(e);
    struct seen s4 = {0};
    request(&r, &s4);
    r.gen_length = 8;
    res = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res), TIDE_OK);
    tide_result_free(res);
    tide_engine_close(e);
}

/* Re-placing the experts of an open engine under a policy keeps the tokens. */
static void test_set_options(void)
{
    struct tide_engine *e = NULL;
    CHECK_EQ_INT(open_engine(NULL, 0, &e), TIDE_OK);
    if (!e)
        return;
    struct seen s = {0};
    struct tide_request r;
    request(&r, &s);
    struct tide_result *want = NULL, *got = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &want), TIDE_OK);

    /* All or nothing: one refused assignment leaves every value as it was. */
    const char *mixed[] = {"generation.steps=5", "model.path=/elsewhere"};
    CHECK_EQ_INT(tide_engine_set_options(e, mixed, 2), TIDE_E_CONFIG);
    CHECK_CONTAINS(tide_engine_error(e), "model.path cannot change on an open engine");
    const char *v = NULL;
    tide_engine_get_option(e, "generation.steps", &v);
    CHECK(v && !strcmp(v, "32"));
    const char *bad[] = {"policy.budget=-7"};
    CHECK_EQ_INT(tide_engine_set_options(e, bad, 1), TIDE_E_CONFIG);
    CHECK_CONTAINS(tide_engine_error(e), "[policy] budget = '-7'");

    const char *lru[] = {"policy.plugin=policy-lru", "policy.budget=4"};
    CHECK_EQ_INT(tide_engine_set_options(e, lru, 2), TIDE_OK);
    struct tide_engine_info info = {.size = sizeof info};
    tide_engine_get_info(e, &info);
    CHECK(!strcmp(info.policy, "policy-lru"));
    CHECK_EQ_INT(info.budget, 4);
    struct seen s2 = {0};
    request(&r, &s2);
    CHECK_EQ_INT(tide_engine_generate(e, &r, &got), TIDE_OK);
    if (want && got) {
        CHECK_EQ_INT(got->n_ids, want->n_ids);
        CHECK(!memcmp(got->ids, want->ids, sizeof *got->ids * (size_t)want->n_ids));
        CHECK(got->offload.promotions > 0);
        CHECK(got->offload.miss_rows > 0);
        CHECK(got->offload.hit_rate < 1.0);
        CHECK_EQ_INT(got->offload.weight_bytes, got->offload.promotions * info.expert_bytes);
        /* Re-placing reset the dispatcher's own totals, not the engine's. */
        struct tide_offload_stats tot = {.size = sizeof tot}, l0 = {.size = sizeof l0};
        tide_engine_stats(e, &tot);
        tide_engine_layer_stats(e, 0, &l0);
        CHECK_EQ_INT(tot.tokens, want->offload.tokens + got->offload.tokens);
        CHECK(l0.miss_rows > 0 && l0.miss_rows <= got->offload.miss_rows);
    }
    tide_result_free(want);
    tide_result_free(got);
    tide_engine_close(e);
}

static void test_tokens(void)
{
    struct tide_engine *e = NULL;
    CHECK_EQ_INT(open_engine(NULL, 0, &e), TIDE_OK);
    if (!e)
        return;
    int32_t *ids = NULL, *chat_ids = NULL;
    size_t n = 0, n_chat = 0;
    const char *hello = "Hello world, hello tides";
    CHECK_EQ_INT(tide_engine_tokenize(e, hello, strlen(hello), 0, &ids, &n), TIDE_OK);
    CHECK(n > 0);
    char *text = NULL;
    size_t len = 0;
    CHECK_EQ_INT(tide_engine_detokenize(e, ids, n, &text, &len), TIDE_OK);
    CHECK(text && !strcmp(text, hello));
    CHECK_EQ_INT(tide_engine_tokenize(e, hello, strlen(hello), 1, &chat_ids, &n_chat), TIDE_OK);
    CHECK(n_chat > n);
    /* A text prompt with the template: the same count the result reports. */
    struct seen s = {0};
    struct tide_request r;
    request(&r, &s);
    r.prompt_ids = NULL;
    r.prompt = hello;
    r.chat = 1;
    r.gen_length = 8;
    struct tide_result *res = NULL;
    CHECK_EQ_INT(tide_engine_generate(e, &r, &res), TIDE_OK);
    if (res) {
        CHECK_EQ_INT(res->prompt_tokens, (int64_t)n_chat);
        CHECK(res->chat);
    }
    tide_result_free(res);
    tide_free(ids);
    tide_free(chat_ids);
    tide_free(text);
    tide_engine_close(e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    plugin_dir = argv[1];
    if (!mkdtemp(work)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(config_text, sizeof config_text,
             "[model]\npath = %s/tiny\ncreate = tiny\ncreate_seed = 11\n"
             "[backend]\ndevice = backend-cpu-onednn\n[generation]\ngen_length = 64\n",
             work);
    for (int i = 0; i < 40; i++)
        prompt_ids[i] = 7 + (i * 37) % 400;
    tide_log_set_level(TIDE_LOG_WARN);
    CHECK_EQ_INT(tide_engine_api_version(), TIDE_ENGINE_API_VERSION);
    CHECK(strlen(tide_version()) > 0);
    TEST_RUN(test_open_errors);
    TEST_RUN(test_generate);
    TEST_RUN(test_cancel);
    TEST_RUN(test_set_options);
    TEST_RUN(test_tokens);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", work);
    TEST_DONE();
}
