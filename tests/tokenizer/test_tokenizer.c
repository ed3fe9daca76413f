/* A tokenizer trained on the built-in corpus: training (determinism, refusals),
 * special tokens, digit splitting, round trips over UTF-8 text and random
 * bytes, and encoding speed. */
#include <stdint.h>
#include <time.h>

#include "harness.h"
#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tide/tokenizer_train.h"
#include "tok_test.h"

static const char *tmp;
static char path[1024];
static struct tide_tokenizer *tok;

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint32_t rnd(void)
{
    return tt_rnd(&rng);
}

static int32_t *encode(const char *s, size_t len, size_t *n)
{
    int32_t *ids = NULL;
    int rc = tide_tokenizer_encode(tok, s, len, &ids, n);
    CHECK_EQ_INT(rc, TIDE_OK);
    CHECK(ids != NULL);
    return ids;
}

/* decode(encode(s)) == s, byte for byte. Returns the number of tokens. */
static size_t round_trip(const char *s, size_t len)
{
    size_t n = 0;
    int32_t *ids = encode(s, len, &n);
    char *back = NULL;
    size_t blen = 0;
    int rc = tide_tokenizer_decode(tok, ids, n, &back, &blen);
    CHECK_EQ_INT(rc, TIDE_OK);
    bool same = rc == TIDE_OK && blen == len && !memcmp(back, s, len) && back[blen] == 0;
    CHECK(same);
    if (!same) {
        fprintf(stderr, "  round trip failed for %zu bytes:", len);
        for (size_t i = 0; i < len && i < 64; i++)
            fprintf(stderr, " %02x", (unsigned char)s[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    free(back);
    return n;
}

static void test_train(void)
{
    snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
    CHECK_EQ_INT(tide_tokenizer_train(test_corpus, sizeof test_corpus - 1, TEST_VOCAB,
                                      test_specials, TEST_N_SPECIALS, path, false),
                 TIDE_OK);
    size_t len1, len2;
    char *first = tt_read(path, &len1);
    CHECK(first != NULL);

    tt_log_reset();
    CHECK_EQ_INT(tide_tokenizer_train(test_corpus, sizeof test_corpus - 1, TEST_VOCAB,
                                      test_specials, TEST_N_SPECIALS, path, false),
                 TIDE_E_INVAL);
    CHECK_CONTAINS(tt_log, "refusing to overwrite");
    CHECK_CONTAINS(tt_log, path);
    tide_log_set_sink(NULL, NULL);

    /* Deterministic: training again gives the same bytes. */
    CHECK_EQ_INT(tide_tokenizer_train(test_corpus, sizeof test_corpus - 1, TEST_VOCAB,
                                      test_specials, TEST_N_SPECIALS, path, true),
                 TIDE_OK);
    char *second = tt_read(path, &len2);
    CHECK(second && first && len1 == len2 && !memcmp(first, second, len1));
    CHECK_CONTAINS(first, "\"type\": \"Split\"");
    CHECK_CONTAINS(first, "\"behavior\": \"Isolated\"");
    CHECK_CONTAINS(first, "\"<|endoftext|>\": 600");
    free(first);
    free(second);

    /* Bad arguments. */
    char other[1100];
    snprintf(other, sizeof other, "%s/other.json", tmp);
    const char *dup[] = {"<a>", "<a>"};
    const char *empty[] = {""};
    const char *byte[] = {"!"};
    const struct {
        int vocab, n;
        const char *const *sp;
        const char *msg;
    } bad[] = {
        {100, 0, NULL, "vocab_target 100 must be in"},
        {300, 2, dup, "special token \"<a>\" is given twice"},
        {300, 1, empty, "special token 0 is empty"},
        {300, 1, byte, "spells the byte token of 0x21"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tt_log_reset();
        CHECK_EQ_INT(
            tide_tokenizer_train("abc", 3, bad[i].vocab, bad[i].sp, bad[i].n, other, false),
            TIDE_E_INVAL);
        CHECK_CONTAINS(tt_log, bad[i].msg);
        tide_log_set_sink(NULL, NULL);
    }
    CHECK(access(other, F_OK) != 0);

    /* A tiny corpus runs out of pairs before the target: says so, still valid. */
    tt_log_reset();
    CHECK_EQ_INT(tide_tokenizer_train("abab", 4, 500, NULL, 0, other, false), TIDE_OK);
    tide_log_set_sink(NULL, NULL);
    /* ab (twice), then ab+ab: 258 tokens */
    CHECK_CONTAINS(tt_log, "no more pairs to merge: 258 tokens instead of 500");
    struct tide_tokenizer *t = NULL;
    CHECK_EQ_INT(tide_tokenizer_load(other, &t), TIDE_OK);
    if (t) {
        CHECK_EQ_INT(tide_tokenizer_size(t), 258);
        CHECK(!strcmp(tide_tokenizer_piece(t, 256), "ab"));
        CHECK(!strcmp(tide_tokenizer_piece(t, 257), "abab"));
        int32_t *ids;
        size_t n;
        CHECK_EQ_INT(tide_tokenizer_encode(t, "abab ab", 7, &ids, &n), TIDE_OK);
        CHECK_EQ_INT(n, 3);
        if (n == 3) {
            CHECK_EQ_INT(ids[0], 257);
            CHECK_EQ_INT(ids[1], ' ');
            CHECK_EQ_INT(ids[2], 256);
        }
        free(ids);
        tide_tokenizer_free(t);
    }
    CHECK_EQ_INT(tide_tokenizer_load(path, &tok), TIDE_OK);
}

static void test_special_tokens(void)
{
    CHECK_EQ_INT(tide_tokenizer_size(tok), TEST_VOCAB + TEST_N_SPECIALS);
    for (int s = 0; s < TEST_N_SPECIALS; s++) {
        int32_t id = tide_tokenizer_id(tok, test_specials[s]);
        CHECK_EQ_INT(id, TEST_VOCAB + s);
        CHECK(tide_tokenizer_is_special(tok, id));
        CHECK(!strcmp(tide_tokenizer_piece(tok, id), test_specials[s]));
        size_t n;
        int32_t *ids = encode(test_specials[s], strlen(test_specials[s]), &n);
        CHECK_EQ_INT(n, 1);
        CHECK_EQ_INT(ids[0], id);
        free(ids);
    }
    CHECK(!tide_tokenizer_is_special(tok, 'a'));
    CHECK_EQ_INT(tide_tokenizer_id(tok, "a"), 'a');
    CHECK_EQ_INT(tide_tokenizer_id(tok, "Ġ"), ' '); /* byte tokens: id = byte */
    CHECK_EQ_INT(tide_tokenizer_id(tok, "no such token"), -1);

    /* Specials are cut out before the regex, even inside words. */
    const char *text = "x<role>HUMAN</role>Hi<|role_end|><|mask|><|mask|>y<|endoftext|>";
    size_t n;
    int32_t *ids = encode(text, strlen(text), &n);
    int32_t role = tide_tokenizer_id(tok, "<role>"), end_role = tide_tokenizer_id(tok, "</role>");
    int32_t role_end = tide_tokenizer_id(tok, "<|role_end|>");
    int32_t mask = tide_tokenizer_id(tok, "<|mask|>"),
            eos = tide_tokenizer_id(tok, "<|endoftext|>");
    CHECK(n >= 8);
    if (n >= 8) {
        CHECK_EQ_INT(ids[0], 'x');
        CHECK_EQ_INT(ids[1], role);
        CHECK_EQ_INT(ids[n - 1], eos);
        CHECK_EQ_INT(ids[n - 2], 'y');
        CHECK_EQ_INT(ids[n - 3], mask);
        CHECK_EQ_INT(ids[n - 4], mask);
        CHECK_EQ_INT(ids[n - 5], role_end);
        int found = 0;
        for (size_t i = 0; i < n; i++)
            found += ids[i] == end_role;
        CHECK_EQ_INT(found, 1);
    }
    free(ids);
    round_trip(text, strlen(text));

    /* A chat turn (LLaDA2's template, which the model plugin owns) starts
     * and ends with specials. */
    const char *chat = "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi"
                       "<|role_end|><role>ASSISTANT</role>";
    ids = encode(chat, strlen(chat), &n);
    CHECK(n > 6 && ids[0] == role && ids[n - 1] == end_role);
    free(ids);
}

static void test_digits_and_merges(void)
{
    const char *text = "In 2024 we had 157184 rows and 3.14 pi";
    size_t n;
    int32_t *ids = encode(text, strlen(text), &n);
    int digits = 0;
    for (size_t i = 0; i < n; i++) {
        char *s;
        size_t len;
        CHECK_EQ_INT(tide_tokenizer_decode(tok, ids + i, 1, &s, &len), TIDE_OK);
        bool has_digit = false;
        for (size_t k = 0; k < len; k++)
            has_digit = has_digit || (s[k] >= '0' && s[k] <= '9');
        if (has_digit) {
            CHECK_EQ_INT(len, 1);
            digits++;
        }
        free(s);
    }
    CHECK_EQ_INT(digits, 4 + 6 + 3);
    free(ids);

    /* Frequent words became single tokens; the corpus compresses. */
    ids = encode(" the", 4, &n);
    CHECK_EQ_INT(n, 1);
    CHECK(!strcmp(tide_tokenizer_piece(tok, ids[0]), "Ġthe"));
    free(ids);
    size_t bytes = sizeof test_corpus - 1;
    size_t tokens = round_trip(test_corpus, bytes);
    fprintf(stderr, "  corpus: %zu bytes -> %zu tokens (%.2f bytes/token)\n", bytes, tokens,
            (double)bytes / (double)tokens);
    CHECK((double)bytes / (double)tokens > 2.5);
}

static void test_round_trip_text(void)
{
    static const char *const texts[] = {
        "",
        "a",
        " ",
        "Hello, world!",
        "  leading and trailing spaces   ",
        "tabs\tand\t\ttabs\n\nnew\r\nlines\r\rcarriage\n",
        "\n\n\n    \n\t \n",
        "digits 0123456789 and ٣٤٥ and ３４ and ² and Ⅻ",
        "emoji 😀😃🎉👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷",
        "CJK 中文字符测试，日本語のテキスト、한국어 텍스트",
        "accents: café naïve façade Ångström ß ſ K",
        "combining: e\xcc\x81 a\xcc\x8a",
        "spaces: \xc2\xa0nbsp\xe2\x80\x89thin\xe3\x80\x80ideographic\xc2\x85nel",
        "contractions: I'll you've we're he's DON'T Can't 'S 'lL",
        "code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; }\n",
        "json: {\"a\": [1, 2, 3], \"b\": null}",
        "<|endoftext|> partial <|endof <role tags </role>>",
        "NUL\0byte",
        "\xef\xbf\xbd replacement char and \xf4\x8f\xbf\xbf max code point",
    };
    size_t lens[sizeof texts / sizeof texts[0]];
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        lens[i] = strlen(texts[i]);
    lens[17] = 8; /* "NUL\0byte" */
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        round_trip(texts[i], lens[i]);

    /* Long runs: one piece of 100000 spaces, of letters, of newlines. */
    size_t big = 100000;
    char *s = malloc(big);
    const char fills[] = {' ', 'a', '\n', '7'};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(s, fills[f], big);
        round_trip(s, big);
    }
    free(s);
}

static void test_round_trip_bytes(void)
{
    char buf[512];
    for (int i = 0; i < 256; i++)
        buf[i] = (char)i;
    round_trip(buf, 256);
    /* Invalid UTF-8 of every kind. */
    static const char *const bad[] = {
        "\x80",
        "\xbf\xbf",
        "\xc0\xaf",
        "\xc1\xbf",
        "\xe0\x80\xaf",
        "\xed\xa0\x80",
        "\xf0\x80\x80\xaf",
        "\xf4\x90\x80\x80",
        "\xf5\x80\x80\x80",
        "\xff\xfe",
        "\xe4\xb8",
        "\xf0\x9f\x98",
        "ab\xe4\xb8 cd",
        "x\xff\xffy z\xc3",
        "  \xff  ",
        "<role>\xff</role>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        round_trip(bad[i], strlen(bad[i]));
    /* Random bytes, and random text with invalid bytes sprinkled in. */
    static const char *const pieces[] = {"the",  " ",        "\n", "中", "😀",
                                         "7",    "'s",       "é",  "\t", "<|mask|>",
                                         "\xff", "\xe4\xb8", "  ", "Ω",  "x"};
    for (int iter = 0; iter < 2000; iter++) {
        size_t len = rnd() % sizeof buf;
        if (iter % 2) {
            for (size_t i = 0; i < len; i++)
                buf[i] = (char)rnd();
        } else {
            size_t o = 0;
            while (o + 8 < len) {
                const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
                memcpy(buf + o, p, strlen(p));
                o += strlen(p);
            }
            len = o;
        }
        round_trip(buf, len);
    }
}

static void test_decode_errors(void)
{
    int32_t ids[] = {'a', -5};
    char *s = (char *)ids;
    size_t len = 99;
    tt_log_reset();
    CHECK_EQ_INT(tide_tokenizer_decode(tok, ids, 2, &s, &len), TIDE_E_RANGE);
    CHECK_CONTAINS(tt_log, "token id -5 at position 1");
    CHECK(s == NULL && len == 0);
    ids[1] = tide_tokenizer_size(tok);
    CHECK_EQ_INT(tide_tokenizer_decode(tok, ids, 2, &s, &len), TIDE_E_RANGE);
    tide_log_set_sink(NULL, NULL);
    CHECK_EQ_INT(tide_tokenizer_decode(tok, ids, 0, &s, &len), TIDE_OK);
    CHECK(s && len == 0 && s[0] == 0);
    free(s);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Encoding speed on ~2 MB of repeated corpus and ~2 MB of made-up words
 * (few repeated pieces, so the per-call cache helps less). */
static void test_speed(void)
{
    size_t target = 2u << 20, o = 0;
    char *text = malloc(target + 64);
    while (o + sizeof test_corpus <= target) {
        memcpy(text + o, test_corpus, sizeof test_corpus - 1);
        o += sizeof test_corpus - 1;
    }
    static const char *const syl[] = {"ka", "lo", "mi", "ne", "ru", "sta", "pe", "th", "qu", "zo"};
    size_t o2 = 0;
    char *words = malloc(target + 64);
    while (o2 < target) {
        int k = 1 + (int)(rnd() % 5);
        for (int i = 0; i < k; i++) {
            const char *s = syl[rnd() % 10];
            memcpy(words + o2, s, strlen(s));
            o2 += strlen(s);
        }
        words[o2++] = rnd() % 12 ? ' ' : '\n';
        if (rnd() % 9 == 0)
            o2 += (size_t)snprintf(words + o2, 16, "%u ", rnd() % 100000);
    }
    const char *names[] = {"corpus", "random words"};
    char *bufs[] = {text, words};
    size_t lens[] = {o, o2};
    double worst = 1e9;
    for (int b = 0; b < 2; b++) {
        double t0 = now();
        size_t n;
        int32_t *ids = encode(bufs[b], lens[b], &n);
        double dt = now() - t0, mbs = (double)lens[b] / 1e6 / dt;
        fprintf(stderr, "  encode %s: %.2f MB in %.3f s = %.1f MB/s, %zu tokens\n", names[b],
                (double)lens[b] / 1e6, dt, mbs, n);
        worst = mbs < worst ? mbs : worst;
        free(ids);
    }
    free(text);
    free(words);
    /* The goal is >= 1 MB/s; sanitizers and a busy machine are slower, so
     * only a gross regression fails here. */
    CHECK(worst > 0.25);
}

int main(void)
{
    tmp = tt_tmpdir();
    if (!tmp) {
        fprintf(stderr, "cannot make a temporary folder\n");
        return 1;
    }
    TEST_RUN(test_train);
    if (!tok) {
        fprintf(stderr, "training failed; stopping\n");
        TEST_DONE();
    }
    TEST_RUN(test_special_tokens);
    TEST_RUN(test_digits_and_merges);
    TEST_RUN(test_round_trip_text);
    TEST_RUN(test_round_trip_bytes);
    TEST_RUN(test_decode_errors);
    TEST_RUN(test_speed);
    tide_tokenizer_free(tok);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    TEST_DONE();
}
