/* Fuzz target: encoding arbitrary bytes with a fixed byte-level BPE (trained
 * once at start-up in the LLaDA2 format, with its special tokens). Every
 * input must encode to ids below the vocabulary size and decode back to
 * exactly the same bytes; the chat template must wrap it. */
#include "fuzz_common.h"
#include "tide/tokenizer.h"
#include "tide/tokenizer_train.h"

static const char encode_corpus[] =
    "The quick brown fox jumps over the lazy dog. It's 2024; we'll see 3.14159.\n"
    "int main(void) { return 0; }\n    def f(x):\n        return x * 2\n"
    "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 "
    "<|mask|><|mask|> <role>HUMAN</role>Hi<|role_end|>\r\n\r\n  spaces   and\ttabs";

static const char *const encode_specials[] = {"<|endoftext|>", "<|mask|>", "<role>", "</role>",
                                              "<|role_end|>"};

static struct tide_tokenizer *encode_tok(void)
{
    static struct tide_tokenizer *t;
    if (t)
        return t;
    char path[sizeof fz_dir_path + 32];
    snprintf(path, sizeof path, "%s/enc-tokenizer.json", fz_dir());
    if (tide_tokenizer_train(encode_corpus, sizeof encode_corpus - 1, 400, encode_specials, 5, path,
                             true) != TIDE_OK ||
        tide_tokenizer_load(path, &t) != TIDE_OK)
        abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct tide_tokenizer *t = encode_tok();
    fz_begin();
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tide_tokenizer_encode(t, (const char *)data, size, &ids, &n);
    fz_check_status(rc);
    FZ_ASSERT(rc == TIDE_OK && ids); /* every byte has a token in a byte-level BPE */
    FZ_ASSERT(n <= size);
    const int32_t vocab = tide_tokenizer_size(t);
    for (size_t i = 0; i < n; i++)
        FZ_ASSERT(ids[i] >= 0 && ids[i] < vocab);
    char *text = NULL;
    size_t len = 0;
    rc = tide_tokenizer_decode(t, ids, n, &text, &len);
    FZ_ASSERT(rc == TIDE_OK);
    if (len != size || memcmp(text, data, size) != 0) {
        fprintf(stderr, "round trip changed the text: %zu bytes in, %zu out\n", size, len);
        FZ_ASSERT(!"decode(encode(x)) == x");
    }
    free(text);
    free(ids);
    return 0;
}
