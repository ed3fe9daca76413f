/* The LLaDA-MoE forward pass over backend ops, read top to bottom: embed,
 * then per layer full bidirectional attention and a dense or MoE
 * feed-forward, then the final norm and the head. It follows the official
 * modeling_lladamoe.py (LLaDAMoEModelLM); routed experts go through the
 * core's dispatcher (tide_moe_forward), so every placement policy and offload
 * path applies. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lladamoe.h"
#include "model-common/batch.h"
#include "model-common/forward.h"
#include "model-common/slots.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

/* The prompt format of inclusionAI's inference engine for LLaDA-MoE
 * (dInfer benchmarks), the Ling tokenizer's roles. */
const char lmoe_chat_template[] = "<role>SYSTEM</role>detailed thinking off<|role_end|>"
                                  "<role>HUMAN</role>{prompt}<|role_end|><role>ASSISTANT</role>";

struct lmoe_layer {
    struct tide_weight *in_norm, *wq, *wk, *wv, *q_norm, *k_norm, *wo, *post_norm;
    struct tide_weight *ffn_gate, *ffn_up, *ffn_down; /* dense layers */
    struct tide_weight *router;                       /* MoE layers */
    const float *expert_bias;                         /* host, from the checkpoint, or NULL */
    struct tide_weight *sh_gate, *sh_up, *sh_down;    /* shared expert, or NULL */
    int moe_index;                                    /* -1 for dense layers */
    struct tide_view *xviews; /* quantized routed experts' views [3 n_experts], or NULL */
    struct tide_buffer *k_cache, *v_cache; /* f32 [n_ctx, n_kv*hd] */
};

struct tide_model {
    struct lmoe_cfg cfg;
    struct tide_model_info info;
    struct tide_st *st;
    struct mc_dequant dq; /* bf16 copies of FP8 dense weights */
    struct tide_backend_ref dev;
    struct tide_moe *moe;
    int64_t max_tokens, n_ctx; /* per forward (all spans); per slot */
    int n_slots;
    struct mc_batch batch;
    struct tide_weight *embed, *norm, *head;
    struct lmoe_layer *layers;
    struct tide_buffer *h, *x, *q, *k, *v, *att, *tmp, *tmp2, *g, *u, *a, *rlog, *logits;
    float *rl_host; /* [max_tokens * n_experts] router logits on the host */
    float *scratch; /* [n_experts] */
    int32_t *ids;   /* [max_tokens * top_k] */
    float *wts;     /* [max_tokens * top_k] */
    struct mc_prof prof;
};

static const struct tide_backend_ops *ops_of(const struct tide_model *m)
{
    return m->dev.ops;
}

static int load_weight(struct tide_model *m, const char *name, enum tide_dtype dt, int ndim,
                       int64_t d0, int64_t d1, enum tide_weight_kind kind, struct tide_weight **out)
{
    return mc_load_weight_q("model-llada-moe", m->st, &m->dev, &m->cfg.quant, &m->dq, name, dt,
                            ndim, d0, d1, kind, out);
}

static int load_layer(struct tide_model *m, int l, int *moe_index)
{
    const struct lmoe_cfg *c = &m->cfg;
    struct lmoe_layer *L = &m->layers[l];
    const int64_t H = c->hidden, hd = c->head_dim;
    const int64_t qw = (int64_t)c->n_heads * hd, kw = (int64_t)c->n_kv_heads * hd;
    char n[LMOE_NAME_MAX];
    int rc;
#define W(field, suffix, dt, nd, a, b, kind)                                                       \
    do {                                                                                           \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                    \
        if ((rc = load_weight(m, n, dt, nd, a, b, kind, &L->field)) != TIDE_OK)                    \
            return rc;                                                                             \
    } while (0)
    const enum tide_dtype B = TIDE_DTYPE_BF16;
    W(in_norm, "input_layernorm.weight", B, 1, H, 0, TIDE_WEIGHT_VECTOR);
    W(wq, "self_attn.q_proj.weight", B, 2, qw, H, TIDE_WEIGHT_MATMUL);
    W(wk, "self_attn.k_proj.weight", B, 2, kw, H, TIDE_WEIGHT_MATMUL);
    W(wv, "self_attn.v_proj.weight", B, 2, kw, H, TIDE_WEIGHT_MATMUL);
    if (c->qk_norm) {
        W(q_norm, "self_attn.q_norm.weight", B, 1, hd, 0, TIDE_WEIGHT_VECTOR);
        W(k_norm, "self_attn.k_norm.weight", B, 1, hd, 0, TIDE_WEIGHT_VECTOR);
    }
    W(wo, "self_attn.o_proj.weight", B, 2, H, qw, TIDE_WEIGHT_MATMUL);
    W(post_norm, "post_attention_layernorm.weight", B, 1, H, 0, TIDE_WEIGHT_VECTOR);
    L->moe_index = -1;
    if (!c->moe[l]) {
        const int64_t I = c->dense_inter;
        W(ffn_gate, "mlp.gate_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(ffn_up, "mlp.up_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(ffn_down, "mlp.down_proj.weight", B, 2, H, I, TIDE_WEIGHT_MATMUL);
        return TIDE_OK;
    }
    L->moe_index = (*moe_index)++;
    W(router, "mlp.gate.weight", B, 2, c->n_experts, H, TIDE_WEIGHT_MATMUL);
    if (c->expert_bias) {
        const int64_t shape[1] = {c->n_experts};
        const struct tide_view *v;
        snprintf(n, sizeof n, "model.layers.%d.mlp.expert_bias", l);
        if ((rc = tide_st_expect(m->st, n, TIDE_DTYPE_F32, 1, shape, &v)) != TIDE_OK)
            return rc;
        L->expert_bias = v->data;
    }
    if (c->shared_inter) {
        const int64_t I = c->shared_inter;
        W(sh_gate, "shared_expert.gate_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(sh_up, "shared_expert.up_proj.weight", B, 2, I, H, TIDE_WEIGHT_MATMUL);
        W(sh_down, "shared_expert.down_proj.weight", B, 2, H, I, TIDE_WEIGHT_MATMUL);
    }
#undef W
    if (c->quant.fmt != TIDE_QFMT_NONE &&
        !(L->xviews = calloc((size_t)c->n_experts * 3, sizeof *L->xviews)))
        return TIDE_E_NOMEM;
    return mc_register_experts(m->st, m->moe, l, L->moe_index, c->n_experts, c->moe_inter, H,
                               &c->quant, L->xviews);
}

static void free_buffers(struct tide_model *m)
{
    struct tide_buffer **bufs[] = {&m->h,    &m->x, &m->q, &m->k, &m->v,    &m->att,   &m->tmp,
                                   &m->tmp2, &m->g, &m->u, &m->a, &m->rlog, &m->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        mc_buffer_free(&m->dev, bufs[i]);
    for (int l = 0; m->layers && l < m->cfg.n_layers; l++) {
        mc_buffer_free(&m->dev, &m->layers[l].k_cache);
        mc_buffer_free(&m->dev, &m->layers[l].v_cache);
    }
    free(m->ids);
    free(m->wts);
    free(m->rl_host);
    m->ids = NULL;
    m->wts = NULL;
    m->rl_host = NULL;
    mc_batch_free(&m->batch);
    m->n_ctx = m->max_tokens = 0;
    m->n_slots = 0;
}

static size_t max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

static int alloc_acts(struct tide_model *m, int64_t max_tokens)
{
    const struct lmoe_cfg *c = &m->cfg;
    const size_t T = (size_t)max_tokens, H = (size_t)c->hidden;
    const size_t ffn = max3((size_t)c->dense_inter, (size_t)c->shared_inter, 1);
    const size_t qw = (size_t)c->n_heads * (size_t)c->head_dim;
    const size_t kw = (size_t)c->n_kv_heads * (size_t)c->head_dim;
    const struct mc_buf_want want[] = {
        {&m->h, T * H * 4},
        {&m->x, T * H * 2},
        {&m->q, T * qw * 4},
        {&m->k, T * kw * 4},
        {&m->v, T * kw * 4},
        {&m->att, T * qw * 2},
        {&m->tmp, T * H * 4},
        {&m->tmp2, T * H * 4},
        {&m->g, T * ffn * 4},
        {&m->u, T * ffn * 4},
        {&m->a, T * ffn * 2},
        {&m->rlog, T * (size_t)c->n_experts * 4},
        {&m->logits, T * (size_t)c->vocab * 4},
    };
    int rc = mc_buffers_alloc("model-llada-moe", &m->dev, want, sizeof want / sizeof want[0]);
    if (rc != TIDE_OK)
        return rc;
    m->ids = malloc(T * (size_t)c->top_k * sizeof *m->ids);
    m->wts = malloc(T * (size_t)c->top_k * sizeof *m->wts);
    m->rl_host = malloc(T * (size_t)c->n_experts * sizeof *m->rl_host);
    return m->ids && m->wts && m->rl_host ? TIDE_OK : TIDE_E_NOMEM;
}

int lmoe_reserve_slots(struct tide_model *m, int n_slots, int64_t n_ctx, int64_t max_tokens)
{
    const struct lmoe_cfg *c = &m->cfg;
    int rc = mc_reserve_check("model-llada-moe", n_slots, n_ctx, max_tokens, c->max_pos);
    if (rc != TIDE_OK)
        return rc;
    if (!mc_reserve_grows(&n_slots, &n_ctx, &max_tokens, m->n_slots, m->n_ctx, m->max_tokens))
        return TIDE_OK;
    free_buffers(m);
    rc = alloc_acts(m, max_tokens);
    if (rc == TIDE_OK)
        rc = mc_batch_alloc(&m->batch, n_slots, max_tokens);
    const size_t kv_bytes =
        (size_t)n_slots * (size_t)n_ctx * (size_t)(c->n_kv_heads * c->head_dim) * sizeof(float);
    for (int l = 0; rc == TIDE_OK && l < c->n_layers; l++)
        rc = mc_kv_alloc("model-llada-moe", &m->dev, l, kv_bytes, &m->layers[l].k_cache,
                         &m->layers[l].v_cache);
    if (rc != TIDE_OK) {
        free_buffers(m);
        return rc;
    }
    m->n_ctx = n_ctx;
    m->max_tokens = max_tokens;
    m->n_slots = n_slots;
    return TIDE_OK;
}

int lmoe_open(const struct tide_model_args *args, struct tide_model **out)
{
    struct tide_model *m = calloc(1, sizeof *m);
    if (!m)
        return TIDE_E_NOMEM;
    int rc = lmoe_cfg_load(args->dir, &m->cfg);
    if (rc != TIDE_OK) {
        free(m);
        return rc;
    }
    const struct lmoe_cfg *c = &m->cfg;
    m->dev = *args->dev;
    m->moe = args->moe;
    /* args->block is not read: the attention is full (the official code
     * passes attention_mask = None and is_causal = False). */
    m->info = (struct tide_model_info){
        .size = sizeof m->info,
        .arch = "llada_moe",
        .n_layers = c->n_layers,
        .n_moe_layers = c->n_moe,
        .n_experts = c->n_experts,
        .top_k = c->top_k,
        .hidden = c->hidden,
        .vocab_size = c->vocab,
        .max_ctx = c->max_pos,
        .expert_bytes = lmoe_expert_bytes(c),
        .dense_bytes = lmoe_dense_bytes(c),
        /* The Ling tokenizer LLaDA-MoE shares with LLaDA2.0: mask id 156895
         * is "<|mask|>", eos 156892 "<|endoftext|>", the turn end "<|role_end|>". */
        .mask_token = "<|mask|>",
        .eos_token = "<|endoftext|>",
        .stop_token = "<|role_end|>",
        .chat_template = lmoe_chat_template,
        .attention = TIDE_ATTN_FULL,
        .decoder = "llada",
    };
    mc_prof_init(&m->prof, mc_phase_names, MC_N_PHASES);
    if ((rc = mc_open_checkpoint(args, c->n_moe, c->n_experts, c->top_k, c->hidden, c->moe_inter,
                                 &c->quant, &m->st)) != TIDE_OK)
        goto fail;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    m->scratch = malloc(sizeof *m->scratch * (size_t)c->n_experts);
    if (!m->layers || !m->scratch) {
        rc = TIDE_E_NOMEM;
        goto fail;
    }
    if ((rc = load_weight(m, "model.embed_tokens.weight", TIDE_DTYPE_BF16, 2, c->vocab, c->hidden,
                          TIDE_WEIGHT_EMBED, &m->embed)) != TIDE_OK)
        goto fail;
    int moe_index = 0;
    for (int l = 0; l < c->n_layers; l++)
        if ((rc = load_layer(m, l, &moe_index)) != TIDE_OK)
            goto fail;
    if ((rc = load_weight(m, "model.norm.weight", TIDE_DTYPE_BF16, 1, c->hidden, 0,
                          TIDE_WEIGHT_VECTOR, &m->norm)) != TIDE_OK)
        goto fail;
    if ((rc = load_weight(m, c->tied ? "model.embed_tokens.weight" : "lm_head.weight",
                          TIDE_DTYPE_BF16, 2, c->vocab, c->hidden, TIDE_WEIGHT_MATMUL, &m->head)) !=
        TIDE_OK)
        goto fail;
    *out = m;
    return TIDE_OK;
fail:
    lmoe_close(m);
    return rc;
}

void lmoe_close(struct tide_model *m)
{
    if (!m)
        return;
    if (m->dev.ops) {
#define WFREE(w) mc_weight_free(&m->dev, &(w))
        for (int l = 0; m->layers && l < m->cfg.n_layers; l++) {
            struct lmoe_layer *L = &m->layers[l];
            WFREE(L->in_norm);
            WFREE(L->wq);
            WFREE(L->wk);
            WFREE(L->wv);
            WFREE(L->q_norm);
            WFREE(L->k_norm);
            WFREE(L->wo);
            WFREE(L->post_norm);
            WFREE(L->ffn_gate);
            WFREE(L->ffn_up);
            WFREE(L->ffn_down);
            WFREE(L->router);
            WFREE(L->sh_gate);
            WFREE(L->sh_up);
            WFREE(L->sh_down);
        }
        WFREE(m->embed);
        WFREE(m->norm);
        WFREE(m->head);
#undef WFREE
        free_buffers(m);
    }
    for (int l = 0; m->layers && l < m->cfg.n_layers; l++)
        free(m->layers[l].xviews);
    free(m->layers);
    free(m->scratch);
    free(m->prof.seen);
    tide_st_close(m->st);
    mc_dequant_free(&m->dq);
    free(m);
}

const struct tide_model_info *lmoe_info(const struct tide_model *m)
{
    return &m->info;
}

/* ---- phase profiling ---------------------------------------------------- */

/* End the phase being timed and start `next`. */
static int lmoe_phase(struct tide_model *m, int next)
{
    return mc_prof_phase(&m->prof, ops_of(m), m->dev.bk, next);
}

int lmoe_profile(struct tide_model *m, bool on)
{
    return mc_prof_switch(&m->prof, on, m->cfg.n_experts);
}

int lmoe_profile_read(const struct tide_model *m, struct tide_phase_stats *out, int max, int *n)
{
    return mc_prof_read(&m->prof, out, max, n);
}

/* ---- forward ------------------------------------------------------------ */

static int swiglu_mlp(struct tide_model *m, const struct tide_tensor *x, int64_t n, int64_t I,
                      const struct tide_weight *gate, const struct tide_weight *up,
                      const struct tide_weight *down, const struct tide_tensor *y)
{
    int rc = mc_swiglu(&m->dev, m->g, m->u, m->a, x, n, I, gate, up, down, y);
    if (rc != TIDE_OK)
        return rc;
    mc_prof_mm_work(&m->prof, n, 3 * I, m->cfg.hidden);
    return TIDE_OK;
}

/* Full attention: each query position sees every key 0 .. pos0+n-1. The
 * backend's mask shows key j to position p iff j / block <= p / block, so a
 * block as long as the reserved context (every position < n_ctx) makes it
 * one block: nothing is hidden. */
static int attention_block(struct tide_model *m, struct lmoe_layer *L, const struct tide_tensor *x)
{
    const struct mc_batch *b = &m->batch;
    const int64_t n = b->T;
    const struct lmoe_cfg *c = &m->cfg;
    const struct tide_backend_ops *o = ops_of(m);
    struct tide_backend *bk = m->dev.bk;
    const int64_t hd = c->head_dim, qw = c->n_heads * hd, kw = c->n_kv_heads * hd;
    struct tide_tensor q = tide_tensor_2d(m->q, TIDE_DTYPE_F32, n, qw);
    struct tide_tensor k = tide_tensor_2d(m->k, TIDE_DTYPE_F32, n, kw);
    struct tide_tensor v = tide_tensor_2d(m->v, TIDE_DTYPE_F32, n, kw);
    int rc;
    if ((rc = o->matmul(bk, x, L->wq, &q)) || (rc = o->matmul(bk, x, L->wk, &k)) ||
        (rc = o->matmul(bk, x, L->wv, &v)))
        return rc;
    /* q_norm / k_norm: RMSNorm over each head's head_dim values (the official
     * code reshapes to (-1, head_dim) first). */
    if (c->qk_norm && ((rc = o->rmsnorm(bk, &q, L->q_norm, (int)hd, (float)c->eps, &q)) ||
                       (rc = o->rmsnorm(bk, &k, L->k_norm, (int)hd, (float)c->eps, &k))))
        return rc;
    if ((rc = mc_rope_spans(&m->dev, &q, (int)hd, c->rot_dim, (float)c->rope_theta, b->sp,
                            b->n_sp)) ||
        (rc =
             mc_rope_spans(&m->dev, &k, (int)hd, c->rot_dim, (float)c->rope_theta, b->sp, b->n_sp)))
        return rc;
    const struct mc_attend_args aa = {
        .q = &q,
        .k = &k,
        .v = &v,
        .k_cache = L->k_cache,
        .v_cache = L->v_cache,
        .att = m->att,
        .tmp = m->tmp,
        .h = m->h,
        .wo = L->wo,
        .sp = b->sp,
        .n_sp = b->n_sp,
        .n_ctx = m->n_ctx,
        .T = n,
        .hidden = c->hidden,
        .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads,
        .head_dim = (int)hd,
        .block = (int)m->n_ctx, /* one block: full attention */
    };
    if ((rc = mc_attend(&m->dev, &aa)))
        return rc;
    if (m->prof.on) {
        mc_prof_mm_work(&m->prof, n, qw + 2 * kw, c->hidden);
        mc_prof_mm_work(&m->prof, n, c->hidden, qw);
        uint64_t pairs = 0; /* query-key pairs: each span's queries see its slot's keys */
        for (int s = 0; s < b->n_sp; s++)
            pairs += (uint64_t)(b->sp[s].n * (b->sp[s].pos0 + b->sp[s].n));
        mc_prof_work(&m->prof, 2u * mc_spans_kv_positions(b->sp, b->n_sp) * (uint64_t)kw * 4u, 0,
                     4u * pairs * (uint64_t)qw);
    }
    return TIDE_OK;
}

void lmoe_route(const float *logits, const float *bias, int n_experts, int top_k, float *p,
                int32_t *ids, float *w)
{
    float mx = -INFINITY;
    for (int e = 0; e < n_experts; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    float sum = 0.0f;
    for (int e = 0; e < n_experts; e++) {
        p[e] = expf(logits[e] - mx);
        sum += p[e];
    }
    for (int e = 0; e < n_experts; e++)
        p[e] = p[e] / sum + (bias ? bias[e] : 0.0f);
    /* top_k by selection: descending, ties to the lower id; NaN never wins */
    for (int j = 0; j < top_k; j++) {
        int best = -1;
        for (int e = 0; e < n_experts; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++)
                taken = ids[i] == e;
            if (taken)
                continue;
            if (best < 0 || p[e] > p[best] || (isnan(p[best]) && !isnan(p[e])))
                best = e;
        }
        ids[j] = best;
        w[j] = p[best];
    }
}

static void lmoe_routed_work(struct tide_model *m, int64_t n)
{
    const struct lmoe_cfg *c = &m->cfg;
    if (!m->prof.on)
        return;
    const uint64_t distinct = mc_prof_distinct(&m->prof, m->ids, n * c->top_k, c->n_experts);
    mc_prof_mm_work(&m->prof, n, c->n_experts, c->hidden);
    mc_prof_work(&m->prof, distinct * lmoe_expert_bytes(c),
                 2u * (uint64_t)(n * c->top_k) * 3u * (uint64_t)c->hidden * (uint64_t)c->moe_inter,
                 0);
}

/* y = sum of the routed experts (through the dispatcher) + the shared expert. */
static int moe_block(struct tide_model *m, struct lmoe_layer *L, int64_t n,
                     const struct tide_tensor *x, const struct tide_tensor *y)
{
    const struct lmoe_cfg *c = &m->cfg;
    const struct tide_backend_ops *o = ops_of(m);
    struct tide_backend *bk = m->dev.bk;
    struct tide_tensor rl = tide_tensor_2d(m->rlog, TIDE_DTYPE_F32, n, c->n_experts);
    int rc = lmoe_phase(m, MC_PH_ROUTED);
    if (!rc)
        rc = o->matmul(bk, x, L->router, &rl);
    /* The softmax router runs on the host, like the backend router op's
     * host outputs; read waits for the matmul. */
    if (!rc)
        rc = o->read(bk, &rl, m->rl_host);
    if (rc)
        return rc;
    for (int64_t t = 0; t < n; t++)
        lmoe_route(m->rl_host + t * c->n_experts, L->expert_bias, c->n_experts, c->top_k,
                   m->scratch, m->ids + t * c->top_k, m->wts + t * c->top_k);
    if ((rc = tide_moe_forward(m->moe, L->moe_index, x, m->ids, m->wts, n, y)))
        return rc;
    lmoe_routed_work(m, n);
    if (!c->shared_inter)
        return TIDE_OK;
    struct tide_tensor sh = tide_tensor_2d(m->tmp2, TIDE_DTYPE_F32, n, c->hidden);
    if ((rc = lmoe_phase(m, MC_PH_SHARED)) ||
        (rc = swiglu_mlp(m, x, n, c->shared_inter, L->sh_gate, L->sh_up, L->sh_down, &sh)))
        return rc;
    return o->add(bk, y, &sh);
}

static int lmoe_output(struct tide_model *m, const struct tide_seq_span *spans)
{
    const struct lmoe_cfg *c = &m->cfg;
    const struct mc_output_args oa = {
        .h = m->h,
        .x = m->x,
        .tmp = m->tmp,
        .lg = m->logits,
        .norm = m->norm,
        .head = m->head,
        .max_tokens = m->max_tokens,
        .hidden = c->hidden,
        .vocab = c->vocab,
        .eps = (float)c->eps,
    };
    int rc = mc_output_batch(&m->dev, &oa, &m->batch, spans);
    mc_prof_mm_work(&m->prof, m->batch.R, c->vocab, c->hidden);
    return rc;
}

/* The forward pass over every span's rows (forward_batch). */
int lmoe_forward_batch(struct tide_model *m, const struct tide_seq_span *spans, int n_spans)
{
    const struct lmoe_cfg *c = &m->cfg;
    int rc = mc_batch_prepare("model-llada-moe", &m->batch, spans, n_spans, m->n_slots, m->n_ctx,
                              m->max_tokens, c->vocab);
    if (rc != TIDE_OK)
        return rc;
    const int64_t n = m->batch.T;
    const struct tide_backend_ops *o = ops_of(m);
    struct tide_backend *bk = m->dev.bk;
    const int64_t H = c->hidden;
    struct tide_tensor h = tide_tensor_2d(m->h, TIDE_DTYPE_F32, n, H);
    struct tide_tensor x = tide_tensor_2d(m->x, TIDE_DTYPE_BF16, n, H);
    struct tide_tensor tmp = tide_tensor_2d(m->tmp, TIDE_DTYPE_F32, n, H);
    const float eps = (float)c->eps;
    rc = lmoe_phase(m, MC_PH_OTHER);
    if (!rc)
        rc = o->embed(bk, m->embed, m->batch.ids, n, &h);
    for (int l = 0; rc == TIDE_OK && l < c->n_layers; l++) {
        struct lmoe_layer *L = &m->layers[l];
        if ((rc = o->rmsnorm(bk, &h, L->in_norm, (int)H, eps, &x)) ||
            (rc = lmoe_phase(m, MC_PH_ATTENTION)) || (rc = attention_block(m, L, &x)) ||
            (rc = lmoe_phase(m, MC_PH_OTHER)) ||
            (rc = o->rmsnorm(bk, &h, L->post_norm, (int)H, eps, &x)))
            break;
        if (L->moe_index < 0) {
            if (!(rc = lmoe_phase(m, MC_PH_DENSE)))
                rc =
                    swiglu_mlp(m, &x, n, c->dense_inter, L->ffn_gate, L->ffn_up, L->ffn_down, &tmp);
        } else {
            rc = moe_block(m, L, n, &x, &tmp);
        }
        if (rc == TIDE_OK && (rc = lmoe_phase(m, MC_PH_OTHER)) == TIDE_OK)
            rc = o->add(bk, &h, &tmp);
    }
    if (rc == TIDE_OK && m->batch.R > 0) {
        if (!(rc = lmoe_phase(m, MC_PH_OUTPUT)))
            rc = lmoe_output(m, spans);
    } else if (rc == TIDE_OK) {
        rc = o->sync(bk);
    }
    if (rc == TIDE_OK)
        rc = lmoe_phase(m, MC_N_PHASES);
    return rc;
}

int lmoe_prompt_vector(struct tide_model *m, const int32_t *ids, int64_t n, float *out)
{
    return mc_prompt_vector("model-llada-moe", tide_st_find(m->st, "model.embed_tokens.weight"),
                            m->cfg.vocab, m->cfg.hidden, ids, n, out);
}
