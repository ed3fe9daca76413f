/* model-common: the synthetic checkpoint writer behind `tide mkmodel`
 * (config.json is the model's own): tokenizer corpus and specials, random
 * streams, lm_head gains, the output folder, the streaming weight writer.
 * Header-only; include from one source file of a model plugin. */
#ifndef MODEL_COMMON_MKMODEL_H
#define MODEL_COMMON_MKMODEL_H

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model-common/spec.h"
#include "tide/log.h"
#include "tide/progress.h"
#include "tide/safetensors_write.h"
#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tide/tokenizer_train.h"

/* Text the synthetic tokenizer's merges are learned from: prose, code, math
 * and chat, so that bench prompts of each kind tokenize into real merges. */
static const char mc_mk_corpus[] =
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

static const char *const mc_mk_specials[] = {"<|endoftext|>", "<|mask|>", "<|role_end|>", "<role>",
                                             "</role>"};

/* splitmix64: one independent stream per tensor, so the weights of a tensor
 * depend only on (seed, tensor index), never on chunking. */
static inline uint64_t mc_mk_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float mc_mk_uniform(uint64_t *s)
{
    return (float)((double)(mc_mk_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Gains of the lm_head rows, so that a random model's output reads as random
 * words instead of mojibake. Byte-level BPE has a token for every byte, and
 * one that is not a whole UTF-8 character prints as garbage; specials, ids
 * the tokenizer lacks and control characters print badly too. Their rows are
 * damped hard, other non-words (punctuation, digits, word pieces with no
 * leading space, words under 3 letters) a little, and " word" tokens are left as they are: the
 * random logits still choose which word. Returns [vocab] gains (caller
 * frees) or NULL. */
static inline float *mc_mk_head_gains(const struct tide_tokenizer *tok, int vocab)
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

/* How the values of tensor `name` are drawn: base + amp * U(-1,1). */
typedef void (*mc_dist_fn)(const char *name, const int64_t *shape, int nd, float *base, float *amp);

/* Write the n tensors of spec(ctx, i) to path as a safetensors file, each
 * drawn from its own stream (seed, i) by dist; lm_head.weight rows are
 * scaled by head_gain. total (bytes) is for the progress reports: to pg
 * (bytes written of total, after every chunk) when it has a function, else
 * an info message per GiB. */
static inline int mc_mk_write_weights(const char *path, const void *ctx, int n, mc_spec_fn spec,
                                      mc_dist_fn dist, uint64_t total, uint64_t seed,
                                      const float *head_gain, const struct tide_progress *pg)
{
    struct tide_st_writer *w;
    int rc = tide_st_writer_create(path, false, &w);
    if (rc != TIDE_OK)
        return rc;
    char name[MC_NAME_MAX];
    enum tide_dtype dt;
    int64_t shape[TIDE_MAX_DIMS];
    for (int i = 0; i < n && rc == TIDE_OK; i++) {
        int nd = spec(ctx, i, name, &dt, shape);
        rc = tide_st_writer_add(w, name, dt, nd, shape);
    }
    enum { CHUNK = 1 << 16 };
    uint16_t *b16 = malloc(CHUNK * sizeof *b16);
    float *f32 = malloc(CHUNK * sizeof *f32);
    if (!b16 || !f32)
        rc = TIDE_E_NOMEM;
    uint64_t done = 0, next_report = 1ull << 30;
    for (int i = 0; i < n && rc == TIDE_OK; i++) {
        int nd = spec(ctx, i, name, &dt, shape);
        int64_t numel = 1;
        for (int d = 0; d < nd; d++)
            numel *= shape[d];
        float base, amp;
        dist(name, shape, nd, &base, &amp);
        const bool head = !strcmp(name, "lm_head.weight");
        uint64_t s = seed * 0x100000001b3ull + (uint64_t)i * 0x9e3779b97f4a7c15ull;
        for (int64_t off = 0; off < numel && rc == TIDE_OK; off += CHUNK) {
            int64_t len = numel - off < CHUNK ? numel - off : CHUNK;
            if (dt == TIDE_DTYPE_F32) {
                for (int64_t j = 0; j < len; j++)
                    f32[j] = base + amp * mc_mk_uniform(&s);
                rc = tide_st_writer_write(w, f32, (size_t)len * 4);
            } else {
                for (int64_t j = 0; j < len; j++) {
                    float v = base + amp * mc_mk_uniform(&s);
                    if (head)
                        v *= head_gain[(off + j) / shape[1]];
                    b16[j] = tide_f32_to_bf16(v);
                }
                rc = tide_st_writer_write(w, b16, (size_t)len * 2);
            }
            done += (uint64_t)len * tide_dtype_size(dt);
            if (rc == TIDE_OK && pg && pg->fn) {
                rc = tide_progress_report(pg, done, total);
            } else if (done >= next_report) {
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
static inline int mc_mk_prepare_dir(const char *dir)
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

/* The first half of `tide mkmodel DIR`: DIR prepared (mc_mk_prepare_dir),
 * its tokenizer.json trained on the built-in corpus to vocab_target tokens,
 * *vocab set to the tokenizer's size when 0, and *head_gain (to free) made
 * for that vocabulary. */
static inline int mc_mk_tokenizer(const char *dir, int vocab_target, int *vocab, float **head_gain)
{
    int rc = mc_mk_prepare_dir(dir);
    if (rc != TIDE_OK)
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    rc = tide_tokenizer_train(mc_mk_corpus, sizeof mc_mk_corpus - 1, vocab_target, mc_mk_specials,
                              (int)(sizeof mc_mk_specials / sizeof mc_mk_specials[0]), path, false);
    if (rc != TIDE_OK)
        return rc;
    struct tide_tokenizer *tok;
    if ((rc = tide_tokenizer_load(path, &tok)) != TIDE_OK)
        return rc;
    if (!*vocab)
        *vocab = tide_tokenizer_size(tok);
    *head_gain = mc_mk_head_gains(tok, *vocab);
    tide_tokenizer_free(tok);
    return *head_gain ? TIDE_OK : TIDE_E_NOMEM;
}

/* The second half: DIR/config.json by write_cfg(path, cfg), then
 * DIR/model.safetensors (mc_mk_write_weights; bytes is its size for the
 * messages and pg, which may be NULL); head_gain is freed. */
static inline int mc_mk_finish(const char *dir, const char *preset, int n_layers, const void *cfg,
                               int (*write_cfg)(const char *path, const void *cfg), int n_tensors,
                               mc_spec_fn spec, mc_dist_fn dist, uint64_t bytes, uint64_t seed,
                               float *head_gain, const struct tide_progress *pg)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = write_cfg(path, cfg);
    if (rc != TIDE_OK) {
        free(head_gain);
        return rc;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tide_info("mkmodel: writing %s (%s, %d layers, %.2f GiB, seed %llu)", dir, preset, n_layers,
              (double)bytes / 1073741824.0, (unsigned long long)seed);
    rc = mc_mk_write_weights(path, cfg, n_tensors, spec, dist, bytes, seed, head_gain, pg);
    free(head_gain);
    return rc;
}

#endif
