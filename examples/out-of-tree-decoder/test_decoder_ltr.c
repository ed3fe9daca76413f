/* Unit test of decoder-ltr: the built plugin (argv[1]) is loaded with dlopen
 * and driven through its descriptor and ops table as the engine would, with
 * options built by the public tide_opts_create() and a scripted host whose
 * logits at a position depend only on that position. Every host call is
 * written to a trace ("F8+4/r1 R2 E1:1 ...", see sh_*), so each run is
 * checked call by call: the prefill, one token per step at the block's
 * leftmost mask, the K/V pass between blocks, the EOS cut, and a step_begin
 * status stopping the generation. The driver (sh_run) is the engine loop's
 * rule: next(), the forward it asks for, feed(), until next() says done.
 * Exit status 0 when every check holds. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tide/decoder.h"
#include "tide/log.h"
#include "tide/option.h"
#include "tide/plugin.h"
#include "tide/status.h"

static int checks, failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        checks++;                                                                                  \
        if (strcmp(g_, w_)) {                                                                      \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: got\n  \"%s\"\nexpected\n  \"%s\"\n", __FILE__, __LINE__, g_,  \
                    w_);                                                                           \
        }                                                                                          \
    } while (0)

enum { V = 32, MASK = 31, EOS = 0, STOP = 1, MAXPOS = 256 };

/* ---- the plugin --------------------------------------------------------- */

static const struct tide_plugin_desc *desc;
static const struct tide_decoder_ops *ops;

static int load(const char *path)
{
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    /* POSIX: a data pointer converts to a function pointer through memcpy. */
    void *sym = dlsym(so, TIDE_PLUGIN_ENTRY_SYMBOL);
    tide_plugin_entry_fn entry = NULL;
    if (sym)
        memcpy(&entry, &sym, sizeof entry);
    if (!entry) {
        fprintf(stderr, "%s exports no %s\n", path, TIDE_PLUGIN_ENTRY_SYMBOL);
        return 1;
    }
    CHECK(entry(TIDE_ABI_VERSION + 1) == NULL);
    desc = entry(TIDE_ABI_VERSION);
    if (!desc)
        return 1;
    ops = desc->ops;
    return 0; /* never closed: the process ends with it loaded */
}

/* ---- log ----------------------------------------------------------------- */

static char log_err[2048];

static void log_keep(void *user, enum tide_log_level level, const char *msg)
{
    if (level != TIDE_LOG_ERROR)
        return;
    size_t n = strlen(log_err);
    snprintf(log_err + n, sizeof log_err - n, "%s\n", msg);
}

/* ---- settings ------------------------------------------------------------ */

/* The [generation] keys decoder-common/params.h reads, as the core declares
 * them (a stand-in for the engine's section). */
static const struct tide_option gen_table[] = {
    {"gen_length", TIDE_OPT_INT, "128", "", NULL, "[1,]"},
    {"block_length", TIDE_OPT_INT, "32", "", NULL, "[1,4096]"},
    {"steps", TIDE_OPT_INT, "32", "", NULL, "[1,]"},
    {"minimal_topk", TIDE_OPT_INT, "1", "", NULL, "[1,]"},
    {"threshold", TIDE_OPT_FLOAT, "0.95", "", NULL, "(0,1]"},
    {"temperature", TIDE_OPT_FLOAT, "0", "", NULL, "[0,]"},
    {"top_k", TIDE_OPT_INT, "0", "", NULL, "[0,]"},
    {"top_p", TIDE_OPT_FLOAT, "1", "", NULL, "(0,1]"},
    {"seed", TIDE_OPT_INT, "0", "", NULL, NULL},
    {"eos_early_stop", TIDE_OPT_BOOL, "false", "", NULL, NULL},
    {"mask_in_argmax", TIDE_OPT_BOOL, "true", "", NULL, NULL},
    {"recompute", TIDE_OPT_BOOL, "false", "", NULL, NULL},
    {"cfg_scale", TIDE_OPT_FLOAT, "0", "", NULL, "[0,]"},
    {"remasking", TIDE_OPT_ENUM, "low_confidence", "", "low_confidence|random", NULL},
    {"prefix_cache", TIDE_OPT_BOOL, "false", "", NULL, NULL},
    {"mode", TIDE_OPT_STRING, "", "", NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

struct fx {
    struct tide_opts *gen, *opts;
    struct tide_model_info info;
    struct tide_decoder *d;
};

/* Create an instance: gen and own are "key=value" lists (NULL-terminated).
 * Returns create()'s status, or tide_opts_create()'s. */
static int fx_open(struct fx *f, const char *const *gen, const char *const *own, int attention)
{
    memset(f, 0, sizeof *f);
    int n_gen = 0, n_own = 0;
    while (gen && gen[n_gen])
        n_gen++;
    while (own && own[n_own])
        n_own++;
    int rc = tide_opts_create("generation", gen_table, gen, n_gen, &f->gen);
    if (rc == TIDE_OK)
        rc = tide_opts_create(desc->name, desc->options, own, n_own, &f->opts);
    if (rc != TIDE_OK)
        return rc;
    f->info = (struct tide_model_info){.size = sizeof f->info,
                                       .arch = "scripted",
                                       .vocab_size = V,
                                       .max_ctx = 64,
                                       .attention = attention};
    static const int32_t stop[] = {STOP};
    const struct tide_decoder_args a = {.size = sizeof a,
                                        .gen = f->gen,
                                        .opts = f->opts,
                                        .info = &f->info,
                                        .mask = MASK,
                                        .eos = EOS,
                                        .n_stop = 1,
                                        .stop = stop};
    return ops->create(&a, &f->d);
}

static void fx_close(struct fx *f)
{
    ops->destroy(f->d);
    tide_opts_destroy(f->gen);
    tide_opts_destroy(f->opts);
}

/* ---- the scripted host --------------------------------------------------- */

struct sh {
    struct tide_decoder_host host;
    int64_t P, G;
    int L;
    int32_t want[MAXPOS]; /* the token the model predicts at each position */
    bool sure[MAXPOS];    /* predicted with probability ~1 (else ~0.2) */
    int cancel_block, cancel_step, cancel_status; /* step_begin's answer there */
    int fail_at;                                  /* forward call that fails (from 0); -1 none */
    int n_forward, n_logits;
    bool in_step; /* between step_begin and step_end */
    char trace[4096];
};

static void sh_put(struct sh *h, const char *fmt, ...)
{
    size_t n = strlen(h->trace);
    if (n && n < sizeof h->trace - 1)
        h->trace[n++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->trace + n, sizeof h->trace - n, fmt, ap);
    va_end(ap);
}

/* Position p's logits: the model's token wins; the mask token comes second
 * and would win if the decoder let it compete. */
static void sh_row(const struct sh *h, int64_t p, float *row)
{
    for (int v = 0; v < V; v++)
        row[v] = 0.0f;
    row[MASK] = 6.0f;
    row[h->want[p]] = h->sure[p] ? 12.0f : 2.0f;
}

/* The forward of a span (struct tide_seq_span's fields). Trace: F<pos0>+<n>
 * then /kv (no logits), /all (every row) or /r<n_rows>. */
static int sh_forward(struct sh *h, const int32_t *ids, int64_t n, int64_t pos0,
                      const int32_t *rows, int64_t n_rows, float *logits)
{
    if (h->fail_at == h->n_forward++) {
        sh_put(h, "F!");
        return TIDE_E_IO;
    }
    CHECK(n == h->L && pos0 % h->L == 0);
    if (!logits || !n_rows) {
        sh_put(h, "F%lld+%lld/kv", (long long)pos0, (long long)n);
        CHECK(!h->in_step);
        /* A prefill or K/V pass holds the block's final tokens. */
        const int64_t end = pos0 + n < h->P + h->G ? pos0 + n : h->P + h->G;
        for (int64_t i = pos0; i < end; i++)
            CHECK(ids[i - pos0] != MASK);
        return TIDE_OK;
    }
    CHECK(h->in_step);
    if (!rows) {
        CHECK(n_rows == n);
        sh_put(h, "F%lld+%lld/all", (long long)pos0, (long long)n);
        for (int64_t i = 0; i < n; i++)
            sh_row(h, pos0 + i, logits + i * V);
        return TIDE_OK;
    }
    sh_put(h, "F%lld+%lld/r%lld", (long long)pos0, (long long)n, (long long)n_rows);
    for (int64_t i = 0; i < n_rows; i++) {
        CHECK(rows[i] >= 0 && rows[i] < n && (i == 0 || rows[i] > rows[i - 1]));
        CHECK(ids[rows[i]] == MASK);
        sh_row(h, pos0 + rows[i], logits + i * V);
    }
    return TIDE_OK;
}

static void sh_block_begin(void *user, int block, bool first)
{
    struct sh *h = user;
    sh_put(h, "B%d%s", block, first ? "*" : "");
}

static int sh_step_begin(void *user, int block, int step)
{
    struct sh *h = user;
    sh_put(h, "S%d", step);
    if (block == h->cancel_block && step == h->cancel_step)
        return h->cancel_status;
    h->in_step = true;
    return TIDE_OK;
}

static void sh_step_logits(void *user, int64_t block, int step, const float *logits, int rows,
                           int vocab)
{
    struct sh *h = user;
    CHECK(rows == h->L && vocab == V);
    h->n_logits++;
}

/* Trace: R<pos>,<pos>,... (block-relative). Each row must be its position's. */
static void sh_step_rows(void *user, int64_t block, int step, int n, const int32_t *pos,
                         const float *const *rows, int vocab)
{
    struct sh *h = user;
    char buf[256] = "R";
    size_t k = 1;
    for (int j = 0; j < n; j++) {
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%d", j ? "," : "", pos[j]);
        const int64_t p = block * h->L + pos[j];
        CHECK(rows[j][h->want[p]] == (h->sure[p] ? 12.0f : 2.0f));
    }
    sh_put(h, "%s", buf);
    CHECK(vocab == V);
}

/* Trace: E<committed>:<remaining>. */
static void sh_step_end(void *user, const struct tide_decoder_step *s)
{
    struct sh *h = user;
    CHECK(s->size >= sizeof *s && s->edited == 0);
    sh_put(h, "E%d:%d", s->committed, s->remaining);
    h->in_step = false;
}

/* Trace: X<block>=<tokens of output so far>. */
static void sh_block_end(void *user, int block, const int32_t *gen, int64_t n)
{
    struct sh *h = user;
    sh_put(h, "X%d=%lld", block, (long long)n);
    for (int64_t i = 0; i < n; i++)
        CHECK(gen[i] == h->want[h->P + i]);
}

/* A host for prompts of P tokens and settings G, L: the model predicts
 * 2 + (7p mod 20) at position p (never EOS, STOP or the mask), unsure. */
static void sh_init(struct sh *h, int64_t P, int64_t G, int L)
{
    memset(h, 0, sizeof *h);
    h->P = P;
    h->G = G;
    h->L = L;
    for (int p = 0; p < MAXPOS; p++)
        h->want[p] = (int32_t)(2 + (p * 7) % 20);
    h->cancel_block = h->fail_at = -1;
    h->host = (struct tide_decoder_host){
        .size = sizeof h->host,
        .user = h,
        .block_begin = sh_block_begin,
        .step_begin = sh_step_begin,
        .step_logits = sh_step_logits,
        .step_rows = sh_step_rows,
        .step_end = sh_step_end,
        .block_end = sh_block_end,
    };
}

/* A generation of a prompt of h->P tokens, driven as the engine drives it
 * (next, the forward, feed, ... finish), ids sized exactly by the plan. A
 * status from next() or a forward ends it and is returned. */
static int sh_run(struct fx *f, struct sh *h, struct tide_decoder_result *res)
{
    struct tide_decoder_plan pl = {.size = sizeof pl};
    CHECK(ops->plan(f->d, h->P, &pl) == TIDE_OK);
    int32_t prompt[MAXPOS];
    for (int64_t i = 0; i < h->P; i++)
        prompt[i] = (int32_t)(2 + i % 20);
    *res = (struct tide_decoder_result){.size = sizeof *res,
                                        .ids = malloc(sizeof *res->ids * (size_t)pl.max_output)};
    struct tide_decoder_seq *q = NULL;
    int rc = ops->begin(f->d, &h->host, prompt, h->P, &q);
    while (rc == TIDE_OK) {
        struct tide_decoder_fwd fwd = {.size = sizeof fwd};
        rc = ops->next(q, &fwd);
        if (rc != TIDE_OK)
            break;
        CHECK(fwd.n_spans == 1 && fwd.span[0].slot == 0);
        const struct tide_seq_span *sp = &fwd.span[0];
        rc = sh_forward(h, sp->ids, sp->n, sp->pos0, sp->rows, sp->n_rows, sp->logits);
        if (rc == TIDE_OK)
            rc = ops->feed(q);
    }
    if (rc == TIDE_DECODER_DONE)
        return ops->finish(q, res);
    ops->finish(q, NULL);
    return rc;
}

/* The output is the model's tokens from P on. */
static bool sh_output_ok(const struct sh *h, const struct tide_decoder_result *r)
{
    for (int64_t i = 0; i < r->n; i++)
        if (r->ids[i] != h->want[h->P + i])
            return false;
    return true;
}

/* ---- tests --------------------------------------------------------------- */

static void test_descriptor(void)
{
    CHECK(desc->kind == TIDE_PLUGIN_DECODER);
    CHECK(!strcmp(desc->name, "decoder-ltr"));
    CHECK(desc->struct_size >= sizeof(struct tide_plugin_desc));
    CHECK(ops->size >= TIDE_DECODER_OPS_MIN_SIZE);
    CHECK(TIDE_OPS_HAS(ops, describe));
    /* Option values are checked against the table, as in an INI file. */
    struct tide_opts *o = NULL;
    const char *big[] = {"min_confidence=1.5"}, *typo[] = {"min_confidense=0.5"};
    log_err[0] = 0;
    CHECK(tide_opts_create(desc->name, desc->options, big, 1, &o) == TIDE_E_CONFIG && !o);
    CHECK(strstr(log_err, "min_confidence") != NULL);
    CHECK(tide_opts_create(desc->name, desc->options, typo, 1, &o) == TIDE_E_CONFIG);
    CHECK(strstr(log_err, "did you mean 'min_confidence'?") != NULL);
}

/* Each setting the loop cannot honour is refused, naming its key. */
static void test_refusals(void)
{
    static const struct {
        const char *set, *says;
    } cases[] = {
        {"temperature=0.7", "[generation] temperature"},
        {"recompute=true", "[generation] recompute"},
        {"top_k=5", "[generation] top_k"},
        {"top_p=0.9", "top_p"},
        {"cfg_scale=1.5", "[generation] cfg_scale"},
        {"prefix_cache=true", "[generation] prefix_cache"},
        {"remasking=random", "remasking = random"},
        {"mode=fast", "[generation] mode"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx f;
        const char *gen[] = {cases[i].set, NULL};
        log_err[0] = 0;
        CHECK(fx_open(&f, gen, NULL, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_E_CONFIG && !f.d);
        if (!strstr(log_err, cases[i].says)) {
            CHECK(!"the refusal names the key");
            fprintf(stderr, "  %s: \"%s\"\n", cases[i].set, log_err);
        }
        fx_close(&f);
    }
    struct fx f;
    log_err[0] = 0;
    CHECK(fx_open(&f, NULL, NULL, TIDE_ATTN_FULL) == TIDE_E_CONFIG && !f.d);
    CHECK(strstr(log_err, "block-causal") != NULL);
    fx_close(&f);
    /* What it ignores by design is accepted. */
    const char *fine[] = {"steps=3", "threshold=0.5", "eos_early_stop=true", "seed=9", NULL};
    CHECK(fx_open(&f, fine, NULL, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_OK && f.d);
    fx_close(&f);
}

static void test_plan(void)
{
    struct fx f;
    const char *gen[] = {"gen_length=20", "block_length=8", "steps=4", NULL};
    CHECK(fx_open(&f, gen, NULL, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_OK);
    struct tide_decoder_plan pl = {.size = sizeof pl};
    CHECK(ops->plan(f.d, 5, &pl) == TIDE_OK);
    /* 5 + 20 in blocks of 8: 32 positions, blocks 0..3 all generated. */
    CHECK(pl.size == sizeof pl && pl.n_ctx == 32 && pl.max_tokens == 8 && pl.max_output == 20);
    CHECK(pl.blocks == 4 && pl.block_length == 8 && pl.max_steps == 8 && pl.nominal_steps == 8);
    /* The prompt fills blocks 0 and 1: 2 + 20 = 22 -> 24 positions, block 2. */
    CHECK(ops->plan(f.d, 16, &pl) == TIDE_OK && pl.n_ctx == 40 && pl.blocks == 3);
    CHECK(ops->plan(f.d, 17, &pl) == TIDE_OK && pl.n_ctx == 40 && pl.blocks == 3);
    /* prompt_len 0: the settings alone, never refused nor logged. */
    log_err[0] = 0;
    CHECK(ops->plan(f.d, 0, &pl) == TIDE_OK && pl.n_ctx == 24 && pl.blocks == 3);
    CHECK(pl.block_length == 8 && pl.max_steps == 8 && !log_err[0]);
    /* Beyond the model's 64 positions: refused with the numbers. */
    CHECK(ops->plan(f.d, 50, &pl) == TIDE_E_RANGE);
    CHECK(strstr(log_err, "(50 tokens)") != NULL && strstr(log_err, "context is 64") != NULL);
    /* An older, shorter plan struct: nothing is written beyond its size. */
    struct tide_decoder_plan old;
    memset(&old, 0x5a, sizeof old);
    old.size = (uint32_t)offsetof(struct tide_decoder_plan, blocks);
    CHECK(ops->plan(f.d, 5, &old) == TIDE_OK &&
          old.size == offsetof(struct tide_decoder_plan, blocks));
    CHECK(old.n_ctx == 32 && old.max_output == 20);
    int poison;
    memset(&poison, 0x5a, sizeof poison);
    CHECK(old.blocks == poison && old.nominal_steps == poison);
    char buf[256];
    ops->describe(f.d, buf, sizeof buf);
    CHECK(strstr(buf, "gen_length=20 block_length=8") && strstr(buf, "min_confidence=0"));
    fx_close(&f);
}

/* One token per step, leftmost first; the prefill, the K/V pass between
 * blocks and none after the last; positions from P + G on never decoded. */
static void test_one_per_step(void)
{
    struct fx f;
    const char *gen[] = {"gen_length=6", "block_length=4", NULL};
    CHECK(fx_open(&f, gen, NULL, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_OK);
    struct sh h;
    sh_init(&h, 10, 6, 4);
    struct tide_decoder_result r;
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK_STR(h.trace, "F0+4/kv F4+4/kv "
                       "B0* S0 F8+4/r1 R2 E1:1 S1 F8+4/r1 R3 E1:0 F8+4/kv X0=2 "
                       "B1 S0 F12+4/r1 R0 E1:3 S1 F12+4/r1 R1 E1:2 S2 F12+4/r1 R2 E1:1 "
                       "S3 F12+4/r1 R3 E1:0 X1=6");
    CHECK(r.n == 6 && r.steps == 6 && r.blocks == 2 && !r.stopped && r.edits == 0);
    CHECK(sh_output_ok(&h, &r));
    free(r.ids);
    /* P + G short of a block's end: the tail of the last block stays masked. */
    sh_init(&h, 3, 6, 4);
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK_STR(h.trace, "B0* S0 F0+4/r1 R3 E1:0 F0+4/kv X0=1 "
                       "B1 S0 F4+4/r1 R0 E1:3 S1 F4+4/r1 R1 E1:2 S2 F4+4/r1 R2 E1:1 "
                       "S3 F4+4/r1 R3 E1:0 F4+4/kv X1=5 B2 S0 F8+4/r1 R0 E1:0 X2=6");
    CHECK(r.n == 6 && r.steps == 6 && r.blocks == 3 && sh_output_ok(&h, &r));
    free(r.ids);
    /* The same instance again gives the same run. */
    char first[sizeof h.trace];
    memcpy(first, h.trace, sizeof first);
    sh_init(&h, 3, 6, 4);
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK_STR(h.trace, first);
    free(r.ids);
    fx_close(&f);
}

/* Generation ends at the step that commits EOS (kept), or a stop token. */
static void test_eos_cut(void)
{
    struct fx f;
    const char *gen[] = {"gen_length=12", "block_length=4", NULL};
    CHECK(fx_open(&f, gen, NULL, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_OK);
    struct sh h;
    sh_init(&h, 6, 12, 4);
    h.want[6 + 3] = EOS;
    struct tide_decoder_result r;
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK_STR(h.trace, "F0+4/kv B0* S0 F4+4/r1 R2 E1:1 S1 F4+4/r1 R3 E1:0 F4+4/kv X0=2 "
                       "B1 S0 F8+4/r1 R0 E1:3 S1 F8+4/r1 R1 E1:2 X1=4");
    CHECK(r.n == 4 && r.ids[3] == EOS && r.stopped && r.steps == 4 && r.blocks == 2);
    free(r.ids);
    sh_init(&h, 6, 12, 4);
    h.want[6 + 1] = STOP; /* [generation] stop_tokens */
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK(r.n == 2 && r.ids[1] == STOP && r.stopped && r.steps == 2 && r.blocks == 1);
    CHECK_STR(h.trace, "F0+4/kv B0* S0 F4+4/r1 R2 E1:1 S1 F4+4/r1 R3 E1:0 X0=2");
    free(r.ids);
    fx_close(&f);
}

/* min_confidence: the same step also commits the sure positions, never a
 * position past P + G; the output is the same tokens in fewer steps. */
static void test_min_confidence(void)
{
    struct fx f;
    const char *gen[] = {"gen_length=8", "block_length=8", NULL},
               *own[] = {"min_confidence=0.9", NULL};
    CHECK(fx_open(&f, gen, own, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_OK);
    struct sh h;
    sh_init(&h, 4, 8, 8);
    h.sure[5] = h.sure[6] = h.sure[9] = h.sure[13] = true;
    struct tide_decoder_result r;
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK_STR(h.trace, "B0* S0 F0+8/r4 R4,5,6,7 E3:1 S1 F0+8/r1 R7 E1:0 F0+8/kv X0=4 "
                       "B1 S0 F8+8/r4 R0,1,2,3 E2:2 S1 F8+8/r2 R2,3 E1:1 S2 F8+8/r1 R3 E1:0 "
                       "X1=8");
    CHECK(r.n == 8 && r.steps == 5 && r.blocks == 2 && sh_output_ok(&h, &r));
    free(r.ids);
    char buf[256];
    ops->describe(f.d, buf, sizeof buf);
    CHECK(strstr(buf, "min_confidence=0.9") != NULL);
    /* An EOS committed right of a mask ends nothing until the prefix is decided. */
    sh_init(&h, 4, 8, 8);
    h.sure[6] = true;
    h.want[6] = EOS;
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK_STR(h.trace, "B0* S0 F0+8/r4 R4,5,6,7 E2:2 S1 F0+8/r2 R5,7 E1:1 X0=3");
    CHECK(r.n == 3 && r.stopped && r.steps == 2 && r.blocks == 1);
    free(r.ids);
    fx_close(&f);
}

/* block_logits: every step computes and reports the whole block. */
static void test_block_logits(void)
{
    struct fx f;
    const char *gen[] = {"gen_length=4", "block_length=4", NULL};
    CHECK(fx_open(&f, gen, NULL, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_OK);
    struct sh h;
    sh_init(&h, 2, 4, 4);
    h.host.block_logits = true;
    struct tide_decoder_result r;
    CHECK(sh_run(&f, &h, &r) == TIDE_OK);
    CHECK_STR(h.trace, "B0* S0 F0+4/all R2 E1:1 S1 F0+4/all R3 E1:0 F0+4/kv X0=2 "
                       "B1 S0 F4+4/all R0 E1:1 S1 F4+4/all R1 E1:0 X1=4");
    CHECK(h.n_logits == 4 && r.steps == 4 && sh_output_ok(&h, &r));
    free(r.ids);
    fx_close(&f);
}

/* A status from step_begin or a forward stops the generation and is returned. */
static void test_stops(void)
{
    struct fx f;
    const char *gen[] = {"gen_length=12", "block_length=4", NULL};
    CHECK(fx_open(&f, gen, NULL, TIDE_ATTN_BLOCK_CAUSAL) == TIDE_OK);
    struct sh h;
    sh_init(&h, 6, 12, 4);
    h.cancel_block = 1;
    h.cancel_step = 2;
    h.cancel_status = TIDE_E_CANCELLED;
    struct tide_decoder_result r;
    CHECK(sh_run(&f, &h, &r) == TIDE_E_CANCELLED);
    CHECK_STR(h.trace, "F0+4/kv B0* S0 F4+4/r1 R2 E1:1 S1 F4+4/r1 R3 E1:0 F4+4/kv X0=2 "
                       "B1 S0 F8+4/r1 R0 E1:3 S1 F8+4/r1 R1 E1:2 S2");
    free(r.ids);
    sh_init(&h, 6, 12, 4);
    h.cancel_block = 0;
    h.cancel_step = 0;
    h.cancel_status = TIDE_E_INTERRUPTED;
    CHECK(sh_run(&f, &h, &r) == TIDE_E_INTERRUPTED);
    CHECK_STR(h.trace, "F0+4/kv B0* S0");
    free(r.ids);
    sh_init(&h, 6, 12, 4);
    h.fail_at = 3; /* the K/V pass of block 0 */
    CHECK(sh_run(&f, &h, &r) == TIDE_E_IO);
    CHECK_STR(h.trace, "F0+4/kv B0* S0 F4+4/r1 R2 E1:1 S1 F4+4/r1 R3 E1:0 F!");
    free(r.ids);
    fx_close(&f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/decoder-ltr.so\n", argv[0]);
        return 2;
    }
    if (load(argv[1]))
        return 1;
    tide_log_set_sink(log_keep, NULL);
    test_descriptor();
    test_refusals();
    test_plan();
    test_one_per_step();
    test_eos_cut();
    test_min_confidence();
    test_block_logits();
    test_stops();
    tide_log_set_sink(NULL, NULL);
    fprintf(stderr, "%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
