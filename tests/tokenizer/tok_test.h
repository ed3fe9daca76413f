/* Shared by the tokenizer tests and tok_tool: a small English + code corpus,
 * the specials of the LLaDA2 family, log capture and temporary files. */
#ifndef TIDE_TEST_TOK_TEST_H
#define TIDE_TEST_TOK_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tide/log.h"

static const char test_corpus[] =
    "The quick brown fox jumps over the lazy dog. The dog didn't move; it was "
    "asleep in the sun, and the fox was already gone by the time it woke up.\n"
    "We'll see whether the model can learn that the word \"the\" is common, "
    "that they're, you've and I'm are contractions, and that numbers such as "
    "2024, 3.14159 and 1,000,000 are split into single digits.\n\n"
    "Mixture-of-experts models route each token to a few experts. When the "
    "experts do not fit in GPU memory, some of them live in host memory and are "
    "copied over PCIe when the router asks for them. A good placement policy "
    "keeps the hot experts on the device and streams the cold ones.\n"
    "Diffusion language models decode a block of masked tokens in parallel: at "
    "every step they unmask the positions whose probability is above a "
    "threshold, and they stop after the block that contains the end of text.\n\n"
    "int tide_tensor_numel(const struct tide_tensor *t)\n"
    "{\n"
    "    int64_t n = 1;\n"
    "    for (int i = 0; i < t->ndim; i++)\n"
    "        n *= t->shape[i];\n"
    "    return (int)n;\n"
    "}\n\n"
    "static int add(int a, int b)\n"
    "{\n"
    "    if (a > 0 && b > INT_MAX - a)\n"
    "        return -1; /* overflow */\n"
    "    return a + b;\n"
    "}\n\n"
    "def softmax(xs):\n"
    "    m = max(xs)\n"
    "    es = [math.exp(x - m) for x in xs]\n"
    "    s = sum(es)\n"
    "    return [e / s for e in es]\n\n"
    "class Router:\n"
    "    def __init__(self, n_experts, top_k=8):\n"
    "        self.n_experts = n_experts\n"
    "        self.top_k = top_k\n\n"
    "    def route(self, scores):\n"
    "        order = sorted(range(self.n_experts), key=lambda e: -scores[e])\n"
    "        return order[: self.top_k]\n\n"
    "for (size_t i = 0; i < n; i++) {\n"
    "    out[i] = in[i] * scale + bias[i];\n"
    "}\n"
    "Then the quick brown fox said: \"Hello, world!\" and the lazy dog replied "
    "with a yawn. It's the same story every day, isn't it? They've told it "
    "a thousand times, and we'd hear it again.\n"
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 65536 157184.\n"
    "The end of the text is marked by a special token, and the mask token "
    "marks the positions that are still to be decoded.\n";

static const char *const test_specials[] = {"<|endoftext|>", "<|mask|>", "<|role_end|>", "<role>",
                                            "</role>"};
#define TEST_N_SPECIALS 5
#define TEST_VOCAB      600

/* Log capture: every message since the last tt_log_reset(), one per line. */
static char tt_log[16384];

static inline void tt_sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    (void)level;
    size_t n = strlen(tt_log);
    snprintf(tt_log + n, sizeof tt_log - n, "%s\n", msg);
}

static inline void tt_log_reset(void)
{
    tt_log[0] = 0;
    tide_log_set_sink(tt_sink, NULL);
}

/* xorshift64: a deterministic pseudo-random stream from *state (non-zero). */
static inline uint32_t tt_rnd(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (uint32_t)(*state >> 11);
}

/* A fresh temporary folder (static storage), or NULL. */
static inline const char *tt_tmpdir(void)
{
    static char dir[512];
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tide-tok-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(dir);
}

static inline int tt_write(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* Whole file, NUL-terminated, malloc'd; NULL on failure. */
static inline char *tt_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        if (len)
            *len = (size_t)n;
    }
    return b;
}

#endif
