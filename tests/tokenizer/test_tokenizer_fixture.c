/* The hand-written fixtures/tiny.json: known ids (worked out by hand from its
 * merges, and confirmed with HuggingFace tokenizers), variants of it, and
 * malformed files that must be refused with a message naming the file and
 * the key at fault. */
#include <stdint.h>

#include "harness.h"
#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tok_test.h"

static char fixture_path[1024];
static char *fixture; /* the text of tiny.json */
static const char *tmp;

struct expect {
    const char *text;
    int n;
    int32_t ids[8];
};

static void check_ids(const struct tide_tokenizer *t, const struct expect *e)
{
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tide_tokenizer_encode(t, e->text, strlen(e->text), &ids, &n);
    CHECK_EQ_INT(rc, TIDE_OK);
    CHECK_EQ_INT(n, e->n);
    int same = rc == TIDE_OK && n == (size_t)e->n;
    for (size_t i = 0; same && i < n; i++)
        same = ids[i] == e->ids[i];
    if (!same) {
        fprintf(stderr, "  text \"%s\": got", e->text);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    CHECK(same);
    free(ids);
}

/* text with the first `from` replaced by `to` (malloc'd). */
static char *replace(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    CHECK(at != NULL);
    if (!at)
        at = text + strlen(text);
    size_t pre = (size_t)(at - text), fl = *at ? strlen(from) : 0, tl = *at ? strlen(to) : 0;
    char *s = malloc(strlen(text) - fl + tl + 1);
    memcpy(s, text, pre);
    memcpy(s + pre, to, tl);
    strcpy(s + pre + tl, at + fl);
    return s;
}

/* The fixture with one or two replacements (from2 may be NULL), written to
 * tmp/name; returns the path (static storage). */
static const char *variant2(const char *name, const char *from, const char *to, const char *from2,
                            const char *to2)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    char *s = replace(fixture, from, to);
    if (from2) {
        char *s2 = replace(s, from2, to2);
        free(s);
        s = s2;
    }
    CHECK_EQ_INT(tt_write(path, s, strlen(s)), 0);
    free(s);
    return path;
}

static const char *variant(const char *name, const char *from, const char *to)
{
    return variant2(name, from, to, NULL, NULL);
}

static void test_known_ids(void)
{
    struct tide_tokenizer *t = NULL;
    CHECK_EQ_INT(tide_tokenizer_load(fixture_path, &t), TIDE_OK);
    if (!t)
        return;
    static const struct expect cases[] = {
        {"hello world", 2, {17, 22}},
        {"abc", 2, {23, 2}},          /* "a b" ranks before "b c" */
        {"bcd", 2, {24, 3}},          /* "b c" ranks before "c d" */
        {"abcd", 2, {23, 25}},        /* ab, then cd */
        {"12", 2, {11, 12}},          /* digits one per token */
        {"he\n", 2, {14, 13}},        /* newline is its own piece */
        {"<|x|>y<|x|>", 2, {27, 26}}, /* longest added token first */
        {"hello<|x|>", 2, {17, 26}},
        {"cabd", 2, {28, 3}}, /* non-special added token */
        {"a <|x|> b", 5, {0, 8, 26, 8, 1}},
        {"", 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_ids(t, &cases[i]);
    CHECK_EQ_INT(tide_tokenizer_size(t), 29);
    CHECK_EQ_INT(tide_tokenizer_id(t, "Ġworld"), 22);
    CHECK_EQ_INT(tide_tokenizer_id(t, "<|x|>"), 26);
    CHECK_EQ_INT(tide_tokenizer_id(t, "cab"), 28);
    CHECK_EQ_INT(tide_tokenizer_id(t, "zz"), -1);
    CHECK(!strcmp(tide_tokenizer_piece(t, 22), "Ġworld"));
    CHECK(!strcmp(tide_tokenizer_piece(t, 27), "<|x|>y"));
    CHECK(tide_tokenizer_piece(t, 29) == NULL);
    CHECK(tide_tokenizer_piece(t, -1) == NULL);
    CHECK(tide_tokenizer_is_special(t, 26));
    CHECK(!tide_tokenizer_is_special(t, 28));
    CHECK(!tide_tokenizer_is_special(t, 17));
    CHECK(!tide_tokenizer_is_special(t, 1000));

    int32_t ids[] = {17, 22, 26, 13, 28};
    char *text;
    size_t len;
    CHECK_EQ_INT(tide_tokenizer_decode(t, ids, 5, &text, &len), TIDE_OK);
    CHECK_EQ_INT(len, strlen("hello world<|x|>\ncab"));
    CHECK(!strcmp(text, "hello world<|x|>\ncab"));
    free(text);

    tt_log_reset();
    int32_t bad[] = {17, 29};
    CHECK_EQ_INT(tide_tokenizer_decode(t, bad, 2, &text, &len), TIDE_E_RANGE);
    CHECK_CONTAINS(tt_log, "token id 29 at position 1 has no token");
    /* 'H' has no byte token and there is no unk_token. */
    int32_t *out;
    size_t n;
    tt_log_reset();
    CHECK_EQ_INT(tide_tokenizer_encode(t, "Hello", 5, &out, &n), TIDE_E_FORMAT);
    CHECK_CONTAINS(tt_log, fixture_path);
    CHECK_CONTAINS(tt_log, "no token for byte 0x48");
    tide_log_set_sink(NULL, NULL);
    tide_tokenizer_free(t);
    tide_tokenizer_free(NULL);
}

static void test_variants(void)
{
    /* merges as ["a", "b"] pairs */
    const char *p =
        variant("pairs.json", "\"h e\",\n      \"l l\"", "[\"h\", \"e\"], [\"l\", \"l\"]");
    struct tide_tokenizer *t = NULL;
    CHECK_EQ_INT(tide_tokenizer_load(p, &t), TIDE_OK);
    if (t) {
        check_ids(t, &(struct expect){"hello world", 2, {17, 22}});
        tide_tokenizer_free(t);
    }
    /* GPT-2 style: ByteLevel with its own regex and a prefix space */
    p = variant("gpt2.json", "\"pre_tokenizer\": {",
                "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                "\"trim_offsets\": true, \"use_regex\": true}, \"unused\": {");
    CHECK_EQ_INT(tide_tokenizer_load(p, &t), TIDE_OK);
    if (t) {
        check_ids(t, &(struct expect){"hello world", 3, {8, 17, 22}});
        check_ids(t, &(struct expect){"12", 3, {8, 11, 12}});
        tide_tokenizer_free(t);
    }
    /* lstrip/rstrip swallow the spaces around the added token */
    p = variant("strip.json", "\"lstrip\": false, \"rstrip\": false",
                "\"lstrip\": true, \"rstrip\": true");
    CHECK_EQ_INT(tide_tokenizer_load(p, &t), TIDE_OK);
    if (t) {
        check_ids(t, &(struct expect){"a <|x|> b", 3, {0, 26, 1}});
        tide_tokenizer_free(t);
    }
    /* ignore_merges: a whole piece in the vocab wins over the merges ("abc"
     * takes the place of "cd", whose merge goes) */
    char *noign = replace(fixture, "\"cd\": 25", "\"abc\": 25");
    char *ign = replace(noign, ",\n      \"c d\"", "");
    char *ign2 = replace(ign, "\"ignore_merges\": false", "\"ignore_merges\": true");
    char p_ign[1100], p_noign[1100];
    snprintf(p_ign, sizeof p_ign, "%s/ignore.json", tmp);
    snprintf(p_noign, sizeof p_noign, "%s/noignore.json", tmp);
    CHECK_EQ_INT(tt_write(p_ign, ign2, strlen(ign2)), 0);
    CHECK_EQ_INT(tt_write(p_noign, ign, strlen(ign)), 0);
    free(noign);
    free(ign);
    free(ign2);
    CHECK_EQ_INT(tide_tokenizer_load(p_ign, &t), TIDE_OK);
    if (t) {
        check_ids(t, &(struct expect){"abc abcd", 5, {25, 8, 23, 2, 3}});
        tide_tokenizer_free(t);
    }
    CHECK_EQ_INT(tide_tokenizer_load(p_noign, &t), TIDE_OK);
    if (t) {
        check_ids(t, &(struct expect){"abc", 2, {23, 2}});
        tide_tokenizer_free(t);
    }
    /* Added tokens that model.vocab lacks get HuggingFace's ids (after the
     * vocab), whatever the file says; with a warning. */
    p = variant2("ids.json", "{\"id\": 26", "{\"id\": 40", "{\"id\": 28", "{\"id\": 7");
    tt_log_reset();
    CHECK_EQ_INT(tide_tokenizer_load(p, &t), TIDE_OK);
    tide_log_set_sink(NULL, NULL);
    CHECK_CONTAINS(tt_log, "added_tokens[0] \"<|x|>\" has id 40 in the file, but HuggingFace "
                           "tokenizers gives it 26");
    CHECK_CONTAINS(tt_log, "added_tokens[2] \"cab\" has id 7");
    if (t) {
        check_ids(t, &(struct expect){"<|x|>cab", 2, {26, 28}});
        CHECK(!strcmp(tide_tokenizer_piece(t, 7), "o"));
        tide_tokenizer_free(t);
    }
    /* a String pattern splits on the literal text */
    p = variant("string.json", "{\"Regex\": \"'(?i", "{\"String\": \"l\"}, \"x\": {\"R\": \"");
    CHECK_EQ_INT(tide_tokenizer_load(p, &t), TIDE_OK);
    if (t) {
        check_ids(t, &(struct expect){"hello", 4, {14, 6, 6, 7}}); /* he l l o */
        tide_tokenizer_free(t);
    }
}

struct bad_case {
    const char *name, *from, *to, *msg;
};

static void test_malformed(void)
{
    static const struct bad_case cases[] = {
        {"type.json", "\"type\": \"BPE\"", "\"type\": \"Unigram\"",
         "model.type \"Unigram\" is not supported"},
        {"fallback.json", "\"byte_fallback\": false", "\"byte_fallback\": true",
         "model.byte_fallback true"},
        {"merge.json", "\"c d\"", "\"c zz\"", "model.merges[11]: piece \"zz\" is not in"},
        {"merged.json", "\"c d\"", "\"c a\"", "merged piece \"ca\" is not in model.vocab"},
        {"mergeint.json", "\"h e\"", "7", "model.merges[0]: expected \"a b\""},
        {"mergespace.json", "\"h e\"", "\"he\"", "model.merges[0] \"he\": expected two pieces"},
        {"norm.json", "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}",
         "normalizer.type \"NFC\" is not supported"},
        {"pretok.json", "\"type\": \"Split\"", "\"type\": \"Whitespace\"",
         "pre_tokenizer.pretokenizers[0].type \"Whitespace\" is not supported"},
        {"behavior.json", "\"Isolated\"", "\"Removed\"",
         "pre_tokenizer.pretokenizers[0].behavior \"Removed\" is not supported"},
        {"regex.json", "\"Regex\": \"'", "\"Regex\": \"(", "cannot compile the pattern"},
        {"vocabstr.json", "\"a\": 0", "\"a\": \"zero\"",
         "model.vocab[\"a\"]: expected an integer id, got a string"},
        {"vocabneg.json", "\"a\": 0", "\"a\": -3", "model.vocab[\"a\"]: id -3 is out of range"},
        {"vocabdup.json", "\"b\": 1", "\"b\": 0", "share id 0"},
        {"added.json", "\"added_tokens\": [", "\"added_tokens\": 5, \"x\": [",
         "added_tokens: expected an array, got an integer"},
        {"addedid.json", "{\"id\": 26", "{\"id\": \"26\"",
         "added_tokens[0].id: expected an integer, got a string"},
        {"addedbool.json", "\"special\": true}", "\"special\": 1}",
         "added_tokens[0].special: expected true or false"},
        {"single.json", "\"single_word\": false", "\"single_word\": true",
         "added_tokens[0].single_word true is not supported"},
        {"decoder.json", "\"decoder\": {\"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"BPE\"",
         "decoder.type \"BPE\" is not supported"},
        {"nobytelevel.json", "\"type\": \"ByteLevel\", \"add_prefix_space\": false",
         "\"type\": \"Sequence\", \"pretokenizers\": [], \"x\": false",
         "pre_tokenizer has no ByteLevel step"},
        {"nomodel.json", "\"model\": {", "\"modell\": {", "model: expected an object, got nothing"},
        {"dropout.json", "\"dropout\": null", "\"dropout\": 0.1", "model.dropout must be null"},
        {"syntax.json", "\"merges\": [", "\"merges\": [,", "not valid JSON"},
        {"dupkey.json", "\"b\": 1,", "\"b\": 1, \"b\": 2,", "not valid JSON"},
        {"unk.json", "\"unk_token\": null", "\"unk_token\": \"<unk>\"",
         "model.unk_token \"<unk>\" is not in model.vocab"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct bad_case *c = &cases[i];
        const char *p = variant(c->name, c->from, c->to);
        struct tide_tokenizer *t = (struct tide_tokenizer *)&t;
        tt_log_reset();
        int rc = tide_tokenizer_load(p, &t);
        tide_log_set_sink(NULL, NULL);
        CHECK_EQ_INT(rc, TIDE_E_FORMAT);
        CHECK(t == NULL);
        CHECK_CONTAINS(tt_log, p);
        CHECK_CONTAINS(tt_log, c->msg);
        if (rc != TIDE_E_FORMAT || !strstr(tt_log, c->msg))
            fprintf(stderr, "  in case %s\n", c->name);
        if (rc == TIDE_OK)
            tide_tokenizer_free(t);
    }
    /* Syntax errors give line:column. */
    const char *p = variant("syntax2.json", "\"merges\": [", "\"merges\": [,");
    tt_log_reset();
    struct tide_tokenizer *t;
    CHECK_EQ_INT(tide_tokenizer_load(p, &t), TIDE_E_FORMAT);
    tide_log_set_sink(NULL, NULL);
    char where[1100];
    snprintf(where, sizeof where, "%s:39:", p);
    CHECK_CONTAINS(tt_log, where);

    /* Not JSON at all, empty, a JSON array, a missing file. */
    static const struct {
        const char *name, *data, *msg;
        int rc;
    } raw[] = {
        {"text.json", "hello", "not valid JSON", TIDE_E_FORMAT},
        {"empty.json", "", "not valid JSON", TIDE_E_FORMAT},
        {"array.json", "[1, 2]", "top level: expected an object, got an array", TIDE_E_FORMAT},
        {"trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "not valid JSON",
         TIDE_E_FORMAT},
    };
    char path[1024];
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, raw[i].name);
        CHECK_EQ_INT(tt_write(path, raw[i].data, strlen(raw[i].data)), 0);
        tt_log_reset();
        CHECK_EQ_INT(tide_tokenizer_load(path, &t), raw[i].rc);
        tide_log_set_sink(NULL, NULL);
        CHECK_CONTAINS(tt_log, path);
        CHECK_CONTAINS(tt_log, raw[i].msg);
    }
    snprintf(path, sizeof path, "%s/missing.json", tmp);
    tt_log_reset();
    CHECK_EQ_INT(tide_tokenizer_load(path, &t), TIDE_E_NOTFOUND);
    tide_log_set_sink(NULL, NULL);
    CHECK_CONTAINS(tt_log, path);
}

static uint64_t rng = 0x2545F4914F6CDD1DULL;

static uint32_t rnd(void)
{
    return tt_rnd(&rng);
}

/* Random damage to the fixture (byte changes, cuts, repeats): loading must
 * succeed or fail with TIDE_E_FORMAT and a message naming the file, never
 * crash; a loaded tokenizer must encode and decode without crashing. */
static void test_mutations(void)
{
    static const char junk[] = "{}[]\":,0-9.etnfalsru \\\n";
    size_t flen = strlen(fixture);
    char *buf = malloc(2 * flen + 1);
    char path[1100];
    snprintf(path, sizeof path, "%s/mutant.json", tmp);
    int loaded = 0;
    for (int iter = 0; iter < 600; iter++) {
        memcpy(buf, fixture, flen + 1);
        size_t len = flen;
        for (int m = 1 + (int)(rnd() % 3); m > 0; m--) {
            size_t at = rnd() % len, span = 1 + rnd() % 12;
            if (at + span > len)
                span = len - at;
            switch (rnd() % 3) {
            case 0:
                buf[at] = junk[rnd() % (sizeof junk - 1)];
                break;
            case 1:
                memmove(buf + at, buf + at + span, len - at - span + 1);
                len -= span;
                break;
            default:
                if (len + span <= 2 * flen) {
                    memmove(buf + at + span, buf + at, len - at + 1);
                    len += span;
                }
            }
            if (len == 0)
                break;
        }
        CHECK_EQ_INT(tt_write(path, buf, len), 0);
        struct tide_tokenizer *t = NULL;
        tt_log_reset();
        int rc = tide_tokenizer_load(path, &t);
        if (rc != TIDE_OK) {
            CHECK_EQ_INT(rc, TIDE_E_FORMAT);
            CHECK_CONTAINS(tt_log, path);
        } else {
            loaded++;
            static const char *const texts[] = {"hello world", "abcd 12\n", "<|x|>y cab",
                                                "\xff\xfe ab", ""};
            for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
                int32_t *ids;
                size_t n;
                rc = tide_tokenizer_encode(t, texts[i], strlen(texts[i]), &ids, &n);
                CHECK(rc == TIDE_OK || rc == TIDE_E_FORMAT);
                if (rc != TIDE_OK)
                    continue;
                char *back;
                size_t bl;
                CHECK_EQ_INT(tide_tokenizer_decode(t, ids, n, &back, &bl), TIDE_OK);
                free(back);
                free(ids);
            }
            tide_tokenizer_free(t);
        }
        tide_log_set_sink(NULL, NULL);
    }
    fprintf(stderr, "  %d of 600 mutants loaded\n", loaded);
    free(buf);
}

int main(void)
{
    const char *data = getenv("TIDE_TEST_DATA");
    snprintf(fixture_path, sizeof fixture_path, "%s/fixtures/tiny.json", data ? data : ".");
    fixture = tt_read(fixture_path, NULL);
    tmp = tt_tmpdir();
    if (!fixture || !tmp) {
        fprintf(stderr, "cannot read %s or make a temporary folder\n", fixture_path);
        return 1;
    }
    TEST_RUN(test_known_ids);
    TEST_RUN(test_variants);
    TEST_RUN(test_malformed);
    TEST_RUN(test_mutations);
    free(fixture);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    TEST_DONE();
}
