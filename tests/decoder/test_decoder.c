/* Decoder selection and full attention, on a scripted model whose logits at
 * a position depend only on that position (so every decoder must produce
 * the same known tokens) and which records the span of every forward. The
 * decoders are the plugins (decoder-llada2, decoder-llada), driven through
 * the engine loop (tide_decode_run, a batch of one), as the engine runs
 * them.
 *
 * - tide_decode_resolve: auto follows info->decoder ("llada"; NULL, a model
 *   that names none, is refused listing the decoders found); an unknown
 *   name is refused naming it; an info struct from before the attention
 *   field counts as block-causal; llada2 with the KV cache on a
 *   full-attention model is refused, with recompute it is allowed.
 * - decoder llada forwards exactly [0, P+G) at every step, steps per block =
 *   steps / (G/L), forwards == steps; with cfg_scale each forward holds a
 *   second span, the unconditional pass, in the generation's second slot;
 *   with prefix_cache a block's first step forwards the whole canvas and
 *   later steps [block start, P+G).
 * - llada2 with recompute on the full-attention model forwards the official
 *   windows [0, (b+1)L).
 * - the context and per-forward sizes the engine reserves. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core_options.h"
#include "decode.h"
#include "harness.h"
#include "loader.h"
#include "tide/log.h"
#include "tide/model.h"
#include "tide/status.h"

#define V       16
#define MASK    15
#define EOS     0
#define MAXCALL 512

struct tide_model {
    struct tide_model_info info;
    int n_slots;
    int calls; /* forward_batch calls */
    int n;     /* spans forwarded */
    int64_t pos0[MAXCALL], len[MAXCALL];
    int slot[MAXCALL];
};

static char logbuf[4096];

static void sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR) {
        size_t n = strlen(logbuf);
        snprintf(logbuf + n, sizeof logbuf - n, "%s\n", msg);
    }
}

/* The token every decoder must put at position pos: never EOS or the mask. */
static int32_t target(int64_t pos)
{
    return (int32_t)(1 + (pos * 5) % (V - 2));
}

static void row_logits(int64_t pos, float *out)
{
    const float sharp = 1.0f + (float)(pos % 5);
    for (int v = 0; v < V; v++)
        out[v] = -sharp * (float)abs(v - target(pos));
}

static void record(struct tide_model *m, int64_t n, int64_t pos0, int slot)
{
    if (m->n < MAXCALL) {
        m->pos0[m->n] = pos0;
        m->len[m->n] = n;
        m->slot[m->n] = slot;
    }
    m->n++;
}

static int fk_reserve(struct tide_model *m, int n_slots, int64_t n_ctx, int64_t max_tokens)
{
    (void)n_ctx;
    (void)max_tokens;
    m->n_slots = n_slots;
    return TIDE_OK;
}

/* Each span's rows: rows NULL for 0 .. n_rows-1. */
static int64_t span_row(const struct tide_seq_span *sp, int64_t i)
{
    return sp->rows ? sp->rows[i] : i;
}

static int fk_forward_batch(struct tide_model *m, const struct tide_seq_span *spans, int n_spans)
{
    m->calls++;
    for (int k = 0; k < n_spans; k++) {
        const struct tide_seq_span *sp = &spans[k];
        CHECK(sp->slot >= 0 && sp->slot < m->n_slots);
        record(m, sp->n, sp->pos0, sp->slot);
        for (int64_t i = 0; i < sp->n_rows; i++)
            row_logits(sp->pos0 + span_row(sp, i), sp->logits + i * V);
    }
    return TIDE_OK;
}

/* The mask token wins at position 2 for the first two forwards, token 5
 * afterwards; token 3 (weakly) everywhere else. */
static int fk_forward_flip(struct tide_model *m, const struct tide_seq_span *spans, int n_spans)
{
    m->calls++;
    for (int k = 0; k < n_spans; k++) {
        const struct tide_seq_span *sp = &spans[k];
        record(m, sp->n, sp->pos0, sp->slot);
        for (int64_t i = 0; i < sp->n_rows; i++) {
            float *r = sp->logits + i * V;
            for (int v = 0; v < V; v++)
                r[v] = v == 3 ? 1.0f : 0.0f;
            if (sp->pos0 + span_row(sp, i) == 2)
                r[m->calls <= 2 ? MASK : 5] = 4.0f;
        }
    }
    return TIDE_OK;
}

static const struct tide_model_info *fk_info(const struct tide_model *m)
{
    return &m->info;
}

static struct tide_model_ops ops_rows = {
    .size = sizeof(struct tide_model_ops),
    .info = fk_info,
    .reserve_slots = fk_reserve,
    .forward_batch = fk_forward_batch,
};

static struct tide_model_ops ops_flip = {
    .size = sizeof(struct tide_model_ops),
    .info = fk_info,
    .reserve_slots = fk_reserve,
    .forward_batch = fk_forward_flip,
};

static void model_init(struct tide_model *m, int attention, const char *decoder)
{
    memset(m, 0, sizeof *m);
    m->info = (struct tide_model_info){
        .size = sizeof m->info,
        .arch = "scripted",
        .vocab_size = V,
        .max_ctx = 4096,
        .attention = attention,
        .decoder = decoder,
    };
}

static struct tide_plugin_set *plugins;

/* The generation settings of a test, as [generation] keys. */
struct params {
    int64_t gen_length;
    int block, steps;
    double threshold, cfg_scale;
    bool recompute, prefix_cache;
};

static struct params params(int64_t G, int L, int steps)
{
    return (struct params){.gen_length = G, .block = L, .steps = steps, .threshold = 0.95};
}

/* A configuration holding p. */
static struct tide_config *config_of(const struct params *p)
{
    struct tide_config *cfg = tide_config_create();
    CHECK(cfg != NULL);
    CHECK_EQ_INT(tide_core_register_sections(cfg), TIDE_OK);
    CHECK_EQ_INT(tide_config_add_plugins(cfg, plugins), TIDE_OK);
    char v[64];
    snprintf(v, sizeof v, "%lld", (long long)p->gen_length);
    CHECK_EQ_INT(tide_config_set_value(cfg, "generation", "gen_length", v, "test"), TIDE_OK);
    snprintf(v, sizeof v, "%d", p->block);
    CHECK_EQ_INT(tide_config_set_value(cfg, "generation", "block_length", v, "test"), TIDE_OK);
    snprintf(v, sizeof v, "%d", p->steps);
    CHECK_EQ_INT(tide_config_set_value(cfg, "generation", "steps", v, "test"), TIDE_OK);
    snprintf(v, sizeof v, "%.17g", p->threshold);
    CHECK_EQ_INT(tide_config_set_value(cfg, "generation", "threshold", v, "test"), TIDE_OK);
    snprintf(v, sizeof v, "%.17g", p->cfg_scale);
    CHECK_EQ_INT(tide_config_set_value(cfg, "generation", "cfg_scale", v, "test"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set_value(cfg, "generation", "recompute",
                                       p->recompute ? "true" : "false", "test"),
                 TIDE_OK);
    CHECK_EQ_INT(tide_config_set_value(cfg, "generation", "prefix_cache",
                                       p->prefix_cache ? "true" : "false", "test"),
                 TIDE_OK);
    return cfg;
}

static const struct tide_gen_tokens tok = {.mask = MASK, .eos = EOS};
static const int32_t prompt[7] = {3, 4, 5, 6, 7, 8, 9};

/* Resolve `want` for m ("auto": its info->decoder) and open it under p:
 * the status of the first step that fails. */
static int open_decoder(const struct tide_model *m, const char *want, const struct params *p,
                        struct tide_decode *d)
{
    memset(d, 0, sizeof *d);
    const char *model_wants = TIDE_INFO_HAS(&m->info, decoder) ? m->info.decoder : NULL;
    const struct tide_plugin *pl = tide_decode_resolve(plugins, want, model_wants, "scripted");
    if (!pl)
        return TIDE_E_CONFIG;
    struct tide_config *cfg = config_of(p);
    int rc = tide_decode_open(d, pl, cfg, &m->info, &tok);
    tide_config_destroy(cfg);
    return rc;
}

static void test_resolve(void)
{
    struct tide_model m;
    struct params p = params(32, 8, 16);
    struct tide_decode d;
    struct tide_decoder_plan plan;
    model_init(&m, TIDE_ATTN_BLOCK_CAUSAL, NULL);
    /* A model that names no decoder: auto is refused, listing the decoders. */
    logbuf[0] = 0;
    CHECK_EQ_INT(open_decoder(&m, "auto", &p, &d), TIDE_E_CONFIG);
    CHECK(strstr(logbuf, "names no decoder") != NULL);
    CHECK(strstr(logbuf, "llada2") != NULL);
    m.info.decoder = "llada";
    CHECK_EQ_INT(open_decoder(&m, "auto", &p, &d), TIDE_OK);
    CHECK(!strcmp(d.pl->desc->name, "decoder-llada"));
    tide_decode_close(&d);
    m.info.decoder = "dream";
    logbuf[0] = 0;
    CHECK_EQ_INT(open_decoder(&m, "auto", &p, &d), TIDE_E_CONFIG);
    CHECK(strstr(logbuf, "decoder 'dream'") != NULL);
    logbuf[0] = 0;
    CHECK_EQ_INT(open_decoder(&m, "bogus", &p, &d), TIDE_E_CONFIG);
    CHECK(strstr(logbuf, "decoder = 'bogus': expected one of auto|") != NULL);
    /* The full plugin name works too. */
    CHECK_EQ_INT(open_decoder(&m, "decoder-llada2", &p, &d), TIDE_OK);
    tide_decode_close(&d);
    /* An info struct from before the appended fields: block-causal. */
    m.info.attention = TIDE_ATTN_FULL;
    m.info.size = (uint32_t)offsetof(struct tide_model_info, attention);
    CHECK_EQ_INT(open_decoder(&m, "llada2", &p, &d), TIDE_OK);
    tide_decode_close(&d);
    /* llada2's cache on full attention: refused, never approximated. */
    m.info.size = sizeof m.info;
    m.info.decoder = NULL;
    logbuf[0] = 0;
    CHECK_EQ_INT(open_decoder(&m, "llada2", &p, &d), TIDE_E_CONFIG);
    CHECK(strstr(logbuf, "recompute = true") != NULL);
    p.recompute = true;
    CHECK_EQ_INT(open_decoder(&m, "llada2", &p, &d), TIDE_OK);
    tide_decode_close(&d);
    /* The engine's reserve: llada forwards the whole canvas. */
    p = params(32, 8, 16);
    CHECK_EQ_INT(open_decoder(&m, "llada", &p, &d), TIDE_OK);
    CHECK_EQ_INT(tide_decode_plan(&d, 7, 4096, &plan), TIDE_OK);
    CHECK_EQ_INT(plan.n_ctx, 39);
    CHECK_EQ_INT(plan.max_tokens, 39);
    CHECK_EQ_INT(plan.max_steps, 4);
    CHECK_EQ_INT(plan.blocks, 4);
    tide_decode_close(&d);
    m.info.attention = TIDE_ATTN_BLOCK_CAUSAL;
    CHECK_EQ_INT(open_decoder(&m, "llada2", &p, &d), TIDE_OK);
    CHECK_EQ_INT(tide_decode_plan(&d, 7, 4096, &plan), TIDE_OK);
    CHECK_EQ_INT(plan.n_ctx, 40);
    CHECK_EQ_INT(plan.max_tokens, 8);
    /* An empty prompt and a context too small are refused. */
    CHECK_EQ_INT(tide_decode_plan(&d, 0, 4096, &plan), TIDE_E_RANGE);
    CHECK_EQ_INT(tide_decode_plan(&d, 7, 39, &plan), TIDE_E_RANGE);
    tide_decode_close(&d);
}

/* Generate on m with the decoder m names under p; checks the tokens are the
 * targets. */
static void run(struct tide_model *m, const struct tide_model_ops *ops, const struct params *p,
                int64_t P, struct tide_gen_result *r)
{
    m->n = 0;
    m->calls = 0;
    struct tide_decode d;
    memset(r, 0, sizeof *r);
    CHECK_EQ_INT(open_decoder(m, m->info.decoder ? "auto" : "llada2", p, &d), TIDE_OK);
    CHECK_EQ_INT(tide_decode_run(&d, ops, m, prompt, P, NULL, r), TIDE_OK);
    tide_decode_close(&d);
    CHECK_EQ_INT(r->n, p->gen_length);
    for (int64_t i = 0; i < r->n; i++)
        CHECK_EQ_INT(r->ids[i], target(P + i));
}

static void test_llada_full(void)
{
    struct tide_model m;
    model_init(&m, TIDE_ATTN_FULL, "llada");
    struct params p = params(24, 8, 12);
    struct tide_gen_result r;
    run(&m, &ops_rows, &p, 7, &r);
    CHECK_EQ_INT(r.steps, 12);
    CHECK_EQ_INT(r.forwards, 12);
    CHECK_EQ_INT(r.blocks, 3);
    CHECK_EQ_INT(m.n, 12);
    for (int i = 0; i < m.n && i < MAXCALL; i++) {
        CHECK_EQ_INT(m.pos0[i], 0);
        CHECK_EQ_INT(m.len[i], 7 + 24);
        CHECK_EQ_INT(m.slot[i], 0);
    }
    free(r.ids);
    /* cfg: the unconditional whole-canvas pass shares the step's forward, in
     * the generation's second slot: one forward of the model, two passes
     * (the official count). */
    p.cfg_scale = 2;
    run(&m, &ops_rows, &p, 7, &r);
    CHECK_EQ_INT(r.forwards, 24);
    CHECK_EQ_INT(m.calls, 12);
    CHECK_EQ_INT(m.n, 24);
    for (int i = 0; i < m.n && i < MAXCALL; i++) {
        CHECK_EQ_INT(m.pos0[i], 0);
        CHECK_EQ_INT(m.len[i], 7 + 24);
        CHECK_EQ_INT(m.slot[i], i % 2);
    }
    free(r.ids);
    /* prefix_cache: the whole canvas at a block's first step, then from
     * the block's start. */
    p.cfg_scale = 0;
    p.prefix_cache = true;
    run(&m, &ops_rows, &p, 7, &r);
    CHECK_EQ_INT(r.forwards, 12);
    for (int i = 0; i < m.n && i < MAXCALL; i++) {
        const int b = i / 4, s = i % 4;
        CHECK_EQ_INT(m.pos0[i], s == 0 ? 0 : 7 + 8 * b);
        CHECK_EQ_INT(m.len[i], 31 - m.pos0[i]);
    }
    free(r.ids);
}

static void test_llada2_full_recompute(void)
{
    struct tide_model m;
    model_init(&m, TIDE_ATTN_FULL, NULL);
    struct params p = params(16, 8, 8);
    struct tide_gen_result r;
    struct tide_decode d;
    /* KV cache: refused before any forward. */
    m.n = 0;
    logbuf[0] = 0;
    CHECK_EQ_INT(open_decoder(&m, "llada2", &p, &d), TIDE_E_CONFIG);
    CHECK_EQ_INT(m.n, 0);
    CHECK(strstr(logbuf, "full sequence") != NULL);
    /* Recompute: the official windows [0, (b+1)L), first block 0 (P = 7). */
    p.recompute = true;
    p.threshold = 1; /* commit by schedule: 1 per step, 8 steps per block */
    run(&m, &ops_rows, &p, 7, &r);
    CHECK_EQ_INT(r.forwards, r.steps);
    for (int i = 0; i < m.n && i < MAXCALL; i++) {
        CHECK_EQ_INT(m.pos0[i], 0);
        CHECK(m.len[i] == 8 || m.len[i] == 16 || m.len[i] == 24);
    }
    free(r.ids);
}

/* L5/L12 as the official loop: a position given the mask token stays a
 * candidate; block 1's schedule (from its own 2 masks) is spent on block 0's
 * leftovers, so block 1 ends masked (the reference's selftest has the same
 * case). */
static void test_llada_leftover(void)
{
    struct tide_model m;
    model_init(&m, TIDE_ATTN_FULL, "llada");
    struct params p = params(4, 2, 4);
    struct tide_gen_result r;
    struct tide_decode d;
    const int32_t pr[2] = {1, 2};
    CHECK_EQ_INT(open_decoder(&m, "auto", &p, &d), TIDE_OK);
    CHECK_EQ_INT(tide_decode_run(&d, &ops_flip, &m, pr, 2, NULL, &r), TIDE_OK);
    tide_decode_close(&d);
    const int32_t want[4] = {5, 3, MASK, MASK};
    CHECK_EQ_INT(r.n, 4);
    for (int i = 0; i < 4 && i < r.n; i++)
        CHECK_EQ_INT(r.ids[i], want[i]);
    CHECK_EQ_INT(r.forwards, 4);
    free(r.ids);
}

int main(void)
{
    tide_log_set_sink(sink, NULL);
    const char *dir = getenv("TIDE_PLUGIN_DIR");
    if (!dir || tide_plugins_scan_dirs(&dir, 1, &plugins) != TIDE_OK) {
        fprintf(stderr, "TIDE_PLUGIN_DIR is not set or cannot be scanned\n");
        return 1;
    }
    TEST_RUN(test_resolve);
    TEST_RUN(test_llada_full);
    TEST_RUN(test_llada2_full_recompute);
    TEST_RUN(test_llada_leftover);
    tide_plugins_free(plugins);
    TEST_DONE();
}
