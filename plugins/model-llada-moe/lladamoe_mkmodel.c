/* `tide mkmodel`: synthetic LLaDA-MoE checkpoints in exactly the real
 * format (config.json, bf16 model.safetensors, tokenizer.json), with
 * deterministic random weights. Tests and the demo use these; nothing is
 * ever downloaded. Weights stream to disk, so multi-GB presets need little
 * memory. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "lladamoe.h"
#include "tide/log.h"
#include "tide/safetensors_write.h"
#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tide/tokenizer_train.h"

/* Text the synthetic tokenizer's merges are learned from: prose, code, math
 * and chat, so that bench prompts of each kind tokenize into real merges. */
static const char mk_corpus[] =
    "The tide comes in and the tide goes out. Every day the sea rises and falls twice, pulled "
    "by the moon and the sun. Sailors read the tide tables before they leave the harbour, and "
    "fishermen know that the best time to fish is often just after the turn of the tide.\n"
    "A language model reads a prompt and writes an answer. A diffusion language model starts "
    "from a block of masked tokens and fills them in over several denoising steps, committing "
    "the tokens it is most confident about first. The experts of a mixture-of-experts layer "
    "each see only the tokens the router sends them.\n"
    "Write a haiku about the sea. Explain how a hash table works. What is the capital of "
    "France? The capital of France is Paris. Summarise the following text in one sentence.\n"
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\nfor i in range(10):\n    print(i, fibonacci(i))\n\n"
    "int main(void)\n{\n    int total = 0;\n    for (int i = 0; i < 100; i++)\n        total += "
    "i * i;\n    printf(\"%d\\n\", total);\n    return 0;\n}\n\n"
    "function add(a, b) { return a + b; }\nconst xs = [1, 2, 3].map((x) => x * 2);\n"
    "Solve 12 + 35 = 47. Then 47 * 2 = 94, and 94 - 4 = 90. If x + 3 = 10 then x = 7.\n"
    "The area of a circle is pi times the radius squared. A triangle has three sides and its "
    "angles add up to 180 degrees. The derivative of x^2 is 2x.\n"
    "User: Hello! Can you help me plan a trip to the coast?\nAssistant: Of course. When would "
    "you like to travel, and do you prefer quiet beaches or busy towns?\nUser: Next week, "
    "somewhere quiet.\nAssistant: Then a small fishing village would suit you well.\n"
    "Thank you very much. You are welcome. Please let me know if there is anything else.\n"
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2026. Punctuation: , . ; : ! ? ( ) [ ] { } \" '\n";

static const char *const mk_specials[] = {"<|endoftext|>", "<|mask|>", "<|role_end|>", "<role>",
                                          "</role>"};

/* A preset: the shape of one model size. */
struct mk_preset {
    const char *name;
    int hidden, n_layers, n_heads, n_kv_heads;
    int dense_inter, moe_inter, shared_inter, n_experts, top_k;
    int n_dense; /* the first n_dense layers are dense (moe_layer_freq 0) */
    bool bias;   /* moe_router_enable_expert_bias */
    int vocab;   /* 0: the synthetic tokenizer's size */
    int64_t max_pos;
    int vocab_target; /* tokenizer tokens before the specials */
};

/* tiny-moe exercises every path the code has (a dense layer, a shared expert,
 * the expert bias, GQA) at test speed; llada-moe-7b is LLaDA-MoE-7B-A1B's
 * published shape (all 16 layers MoE, no shared expert, no bias). */
/* clang-format off */
static const struct mk_preset mk_presets[] = {
    /*               hidden  heads  dense_inter shared experts dense       vocab  vocab_target
     *                   layers kv  moe_inter         top_k   bias             max_pos */
    {"tiny-moe",         64,  3, 4,  2,  128,   32,  32,  16, 4, 1, true,      0,  4096,  480},
    {"llada-moe-7b",   2048, 16, 16, 16, 8192, 1024,   0,  64, 8, 0, false, 157184, 8192, 2000},
};
/* clang-format on */

static struct lmoe_cfg mk_preset_cfg(const struct mk_preset *p)
{
    struct lmoe_cfg c = {
        .hidden = p->hidden,
        .n_layers = p->n_layers,
        .n_heads = p->n_heads,
        .n_kv_heads = p->n_kv_heads,
        .head_dim = p->hidden / p->n_heads,
        .rot_dim = p->hidden / p->n_heads, /* partial_rotary_factor 1 */
        .dense_inter = p->n_dense ? p->dense_inter : 0,
        .moe_inter = p->moe_inter,
        .shared_inter = p->shared_inter,
        .n_experts = p->n_experts,
        .top_k = p->top_k,
        .vocab = p->vocab,
        .max_pos = p->max_pos,
        .rope_theta = 50000.0,
        .eps = 1e-5,
        .qk_norm = true,
        .tied = false,
        .expert_bias = p->bias,
    };
    for (int l = 0; l < p->n_layers; l++)
        c.moe[l] = l >= p->n_dense;
    return c;
}

/* splitmix64: one independent stream per tensor, so the weights of a tensor
 * depend only on (seed, tensor index), never on chunking. */
static uint64_t mk_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float mk_uniform(uint64_t *s)
{
    return (float)((double)(mk_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* How the values of a tensor are drawn: base + amp * U(-1,1). */
static void mk_dist(const char *name, const int64_t *shape, int nd, float *base, float *amp)
{
    *base = 0.0f;
    if (strstr(name, "layernorm") || strstr(name, "norm.weight") || strstr(name, "q_norm") ||
        strstr(name, "k_norm")) {
        *base = 1.0f;
        *amp = 0.1f;
    } else if (strstr(name, "expert_bias")) {
        *amp = 0.01f; /* next to softmax scores of about 1/n_experts */
    } else if (strstr(name, "embed_tokens")) {
        *amp = 1.0f;
    } else {
        /* uniform with variance 1/fan_in keeps activations near unit RMS */
        double fan_in = nd == 2 ? (double)shape[1] : 1.0;
        *amp = (float)(sqrt(3.0 / fan_in) * (strstr(name, "lm_head") ? 4.0 : 1.0));
    }
}

/* Gains of the lm_head rows, so that a random model's output reads as random
 * words instead of mojibake. Byte-level BPE has a token for every byte, and
 * one that is not a whole UTF-8 character prints as garbage; specials, ids
 * the tokenizer lacks and control characters print badly too. Their rows are
 * damped hard, other non-words (punctuation, digits, word pieces with no
 * leading space, words under 3 letters) a little, and " word" tokens are left as they are: the
 * random logits still choose which word. Returns [vocab] gains (caller
 * frees) or NULL. */
static float *mk_head_gains(const struct tide_tokenizer *tok, int vocab)
{
    float *g = malloc(sizeof *g * (size_t)vocab);
    if (!g)
        return NULL;
    const int32_t size = tide_tokenizer_size(tok);
    for (int32_t id = 0; id < vocab; id++) {
        char *text = NULL;
        size_t len = 0;
        g[id] = 0.05f;
        if (id >= size || !tide_tokenizer_piece(tok, id) || tide_tokenizer_is_special(tok, id) ||
            tide_tokenizer_decode(tok, &id, 1, &text, &len) != TIDE_OK)
            continue;
        const unsigned char *t = (const unsigned char *)text;
        bool ascii_print = len > 0, letters = true;
        for (size_t i = 0; i < len; i++) {
            ascii_print &= t[i] >= 0x20 && t[i] < 0x7f;
            letters &= (t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
                       (i == 0 && t[i] == ' ');
        }
        if (ascii_print)
            g[id] = letters && len >= 4 && t[0] == ' ' ? 1.0f : 0.4f;
        free(text);
    }
    return g;
}

static int mk_write_weights(const char *path, const struct lmoe_cfg *c, uint64_t seed,
                            const float *head_gain)
{
    struct tide_st_writer *w;
    int rc = tide_st_writer_create(path, false, &w);
    if (rc != TIDE_OK)
        return rc;
    const int n = lmoe_tensor_count(c);
    char name[LMOE_NAME_MAX];
    enum tide_dtype dt;
    int64_t shape[TIDE_MAX_DIMS];
    for (int i = 0; i < n && rc == TIDE_OK; i++) {
        int nd = lmoe_tensor_spec(c, i, name, &dt, shape);
        rc = tide_st_writer_add(w, name, dt, nd, shape);
    }
    enum { CHUNK = 1 << 16 };
    uint16_t *b16 = malloc(CHUNK * sizeof *b16);
    float *f32 = malloc(CHUNK * sizeof *f32);
    if (!b16 || !f32)
        rc = TIDE_E_NOMEM;
    const uint64_t total =
        lmoe_dense_bytes(c) + lmoe_expert_bytes(c) * (uint64_t)c->n_moe * (uint64_t)c->n_experts;
    uint64_t done = 0, next_report = 1ull << 30;
    for (int i = 0; i < n && rc == TIDE_OK; i++) {
        int nd = lmoe_tensor_spec(c, i, name, &dt, shape);
        int64_t numel = 1;
        for (int d = 0; d < nd; d++)
            numel *= shape[d];
        float base, amp;
        mk_dist(name, shape, nd, &base, &amp);
        const bool head = !strcmp(name, "lm_head.weight");
        uint64_t s = seed * 0x100000001b3ull + (uint64_t)i * 0x9e3779b97f4a7c15ull;
        for (int64_t off = 0; off < numel && rc == TIDE_OK; off += CHUNK) {
            int64_t len = numel - off < CHUNK ? numel - off : CHUNK;
            if (dt == TIDE_DTYPE_F32) {
                for (int64_t j = 0; j < len; j++)
                    f32[j] = base + amp * mk_uniform(&s);
                rc = tide_st_writer_write(w, f32, (size_t)len * 4);
            } else {
                for (int64_t j = 0; j < len; j++) {
                    float v = base + amp * mk_uniform(&s);
                    if (head)
                        v *= head_gain[(off + j) / shape[1]];
                    b16[j] = tide_f32_to_bf16(v);
                }
                rc = tide_st_writer_write(w, b16, (size_t)len * 2);
            }
            done += (uint64_t)len * tide_dtype_size(dt);
            if (done >= next_report) {
                tide_info("mkmodel: %.1f of %.1f GiB written", (double)done / 1073741824.0,
                          (double)total / 1073741824.0);
                next_report += 1ull << 30;
            }
        }
    }
    free(b16);
    free(f32);
    if (rc != TIDE_OK) {
        tide_st_writer_abort(w);
        return rc;
    }
    return tide_st_writer_finish(w);
}

/* dir must not exist, or be an empty directory: never overwrite user data. */
static int mk_prepare_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        /* Create missing parents too, like mkdir -p. */
        char path[4096];
        if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
            tide_error("mkmodel: path too long: %s", dir);
            return TIDE_E_INVAL;
        }
        for (char *p = path + 1; *p; p++) {
            if (*p != '/')
                continue;
            *p = 0;
            if (mkdir(path, 0777) != 0 && errno != EEXIST) {
                tide_error("mkmodel: cannot create %s: %s", path, strerror(errno));
                return TIDE_E_IO;
            }
            *p = '/';
        }
        if (mkdir(dir, 0777) != 0) {
            tide_error("mkmodel: cannot create %s: %s", dir, strerror(errno));
            return TIDE_E_IO;
        }
        return TIDE_OK;
    }
    if (!S_ISDIR(st.st_mode)) {
        tide_error("mkmodel: %s exists and is not a directory", dir);
        return TIDE_E_INVAL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        tide_error("mkmodel: cannot open %s: %s", dir, strerror(errno));
        return TIDE_E_IO;
    }
    struct dirent *de;
    int entries = 0;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            entries++;
    closedir(d);
    if (entries) {
        tide_error("mkmodel: %s is not empty; refusing to overwrite it (choose a new folder)", dir);
        return TIDE_E_INVAL;
    }
    return TIDE_OK;
}

int lmoe_mkmodel(const char *dir, const char *preset, int layers, uint64_t seed)
{
    const struct mk_preset *p = NULL;
    for (size_t i = 0; i < sizeof mk_presets / sizeof mk_presets[0]; i++)
        if (!strcmp(mk_presets[i].name, preset))
            p = &mk_presets[i];
    if (!p) {
        tide_error("mkmodel: unknown preset '%s' (model-llada-moe has tiny-moe, llada-moe-7b)",
                   preset);
        return TIDE_E_CONFIG;
    }
    struct lmoe_cfg c = mk_preset_cfg(p);
    if (layers > 0) {
        if (layers <= p->n_dense || layers > LMOE_MAX_LAYERS) {
            tide_error("mkmodel: --layers %d must be in (%d, %d] (the first %d are dense)", layers,
                       p->n_dense, LMOE_MAX_LAYERS, p->n_dense);
            return TIDE_E_CONFIG;
        }
        c.n_layers = layers;
        for (int l = 0; l < layers; l++)
            c.moe[l] = l >= p->n_dense;
    }
    int rc = mk_prepare_dir(dir);
    if (rc != TIDE_OK)
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    rc = tide_tokenizer_train(mk_corpus, sizeof mk_corpus - 1, p->vocab_target, mk_specials,
                              (int)(sizeof mk_specials / sizeof mk_specials[0]), path, false);
    if (rc != TIDE_OK)
        return rc;
    struct tide_tokenizer *tok;
    if ((rc = tide_tokenizer_load(path, &tok)) != TIDE_OK)
        return rc;
    if (!c.vocab)
        c.vocab = tide_tokenizer_size(tok);
    lmoe_cfg_finish(&c);
    float *head_gain = mk_head_gains(tok, c.vocab);
    tide_tokenizer_free(tok);
    if (!head_gain)
        return TIDE_E_NOMEM;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if ((rc = lmoe_cfg_write(path, &c)) != TIDE_OK) {
        free(head_gain);
        return rc;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const uint64_t bytes =
        lmoe_dense_bytes(&c) + lmoe_expert_bytes(&c) * (uint64_t)c.n_moe * (uint64_t)c.n_experts;
    tide_info("mkmodel: writing %s (%s, %d layers, %.2f GiB, seed %llu)", dir, preset, c.n_layers,
              (double)bytes / 1073741824.0, (unsigned long long)seed);
    rc = mk_write_weights(path, &c, seed, head_gain);
    free(head_gain);
    return rc;
}
