/* `tide tokenize`: output format, --json, --decode, --chat, --model, stdin,
 * and exit codes (0 ok, 1 runtime failure, 2 usage). argv[1] is the tide
 * binary. */
#include <sys/wait.h>

#include "harness.h"
#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tide/tokenizer_train.h"
#include "tok_test.h"

static const char *tide_bin;
static char fixture[1024];
static const char *tmp;

/* Run `[STDIN |] tide tokenize ARGS`; capture stdout and stderr. Returns the
 * exit status, or -1. */
static int run(const char *input, const char *args, char **out, char **err)
{
    char cmd[4096], out_path[1100], err_path[1100];
    snprintf(out_path, sizeof out_path, "%s/out.txt", tmp);
    snprintf(err_path, sizeof err_path, "%s/err.txt", tmp);
    snprintf(cmd, sizeof cmd, "%s%s%s'%s' tokenize %s >'%s' 2>'%s'", input ? "printf '" : "",
             input ? input : "", input ? "' | " : "", tide_bin, args, out_path, err_path);
    int st = system(cmd);
    *out = tt_read(out_path, NULL);
    *err = tt_read(err_path, NULL);
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void expect(const char *input, const char *args, int code, const char *out_has,
                   const char *err_has)
{
    char *out, *err;
    int rc = run(input, args, &out, &err);
    CHECK_EQ_INT(rc, code);
    if (out_has)
        CHECK_CONTAINS(out, out_has);
    if (err_has)
        CHECK_CONTAINS(err, err_has);
    if (rc != code)
        fprintf(stderr, "  for: tide tokenize %s\n  stderr: %s\n", args, err ? err : "");
    free(out);
    free(err);
}

static void test_encode(void)
{
    char a[2048];
    snprintf(a, sizeof a, "--tokenizer '%s' 'hello world'", fixture);
    expect(NULL, a, 0, "17\t\"hello\"\n22\t\" world\"\n", NULL);
    snprintf(a, sizeof a, "--tokenizer='%s' hello world", fixture); /* words joined */
    expect(NULL, a, 0, "17\t\"hello\"\n22\t\" world\"\n", NULL);
    snprintf(a, sizeof a, "--json --tokenizer '%s' 'hello<|x|>'", fixture);
    expect(NULL, a, 0, "\"ids\": [17, 26]", NULL);
    expect(NULL, a, 0, "{\"id\": 26, \"piece\": \"<|x|>\", \"text\": \"<|x|>\", \"special\": true}",
           NULL);
    snprintf(a, sizeof a, "--tokenizer '%s' 'hello<|x|>'", fixture);
    expect(NULL, a, 0, "26\t\"<|x|>\"\tspecial\n", NULL);
    snprintf(a, sizeof a, "--tokenizer '%s' -", fixture);
    expect("he\\n", a, 0, "14\t\"he\"\n13\t\"\\n\"\n", NULL);
    snprintf(a, sizeof a, "--tokenizer '%s' -- --chat", fixture); /* "-" bytes missing */
    expect(NULL, a, 1, NULL, "no token for byte 0x2d");
}

static void test_decode(void)
{
    char a[2048];
    snprintf(a, sizeof a, "--tokenizer '%s' --decode 17,22,26,13", fixture);
    expect(NULL, a, 0, "hello world<|x|>\n\n", NULL);
    snprintf(a, sizeof a, "--tokenizer '%s' --json --decode '17 22'", fixture);
    expect(NULL, a, 0, "{\"text\": \"hello world\"}", NULL);
    snprintf(a, sizeof a, "--tokenizer '%s' --decode 17,999", fixture);
    expect(NULL, a, 1, NULL, "token id 999 at position 1 has no token");
    snprintf(a, sizeof a, "--tokenizer '%s' --decode 17,x", fixture);
    expect(NULL, a, 2, NULL, "--decode expects integers");
}

static void test_model_and_chat(void)
{
    char path[1100], a[2048];
    snprintf(path, sizeof path, "%s/tokenizer.json", tmp);
    CHECK_EQ_INT(tide_tokenizer_train(test_corpus, sizeof test_corpus - 1, TEST_VOCAB,
                                      test_specials, TEST_N_SPECIALS, path, true),
                 TIDE_OK);
    snprintf(a, sizeof a, "--model '%s' --chat Hi", tmp);
    expect(NULL, a, 0, "603\t\"<role>\"\tspecial\n", NULL);
    expect(NULL, a, 0, "\"<|role_end|>\"\tspecial\n603\t\"<role>\"\tspecial\n", NULL);
    expect(NULL, a, 0, "604\t\"</role>\"\tspecial\n", NULL);
    /* The template is the model plugin's: an unknown or non-model plugin is refused. */
    snprintf(a, sizeof a, "--model '%s' --chat --plugin model-nope Hi", tmp);
    expect(NULL, a, 2, NULL, "model-nope");
    snprintf(a, sizeof a, "--model '%s' --chat --plugin policy-lru Hi", tmp);
    expect(NULL, a, 2, NULL, "policy-lru");
    /* bytes that are not UTF-8 are shown as \xNN, or U+FFFD in JSON */
    snprintf(a, sizeof a, "--model '%s' -", tmp);
    expect("a\\377\\tb", a, 0, "\"\\xff\"\n", NULL);
    snprintf(a, sizeof a, "--model '%s' --json -", tmp);
    expect("\\377", a, 0, "\"text\": \"\\ufffd\"", NULL);
}

static void test_usage(void)
{
    char a[2048];
    expect(NULL, "--help", 0, "usage: tide tokenize", NULL);
    expect(NULL, "hello", 2, NULL, "give exactly one of --model DIR or --tokenizer FILE");
    snprintf(a, sizeof a, "--model /x --tokenizer '%s' hi", fixture);
    expect(NULL, a, 2, NULL, "exactly one");
    snprintf(a, sizeof a, "--tokenizer '%s'", fixture);
    expect(NULL, a, 2, NULL, "no TEXT given");
    snprintf(a, sizeof a, "--tokenizer '%s' --decode 1 hi", fixture);
    expect(NULL, a, 2, NULL, "--decode takes no TEXT");
    snprintf(a, sizeof a, "--tokenizer '%s' --frobnicate hi", fixture);
    expect(NULL, a, 2, NULL, "unknown option '--frobnicate'");
    expect(NULL, "hi --tokenizer", 2, NULL, "missing value after '--tokenizer'");
    snprintf(a, sizeof a, "--tokenizer '%s/nope.json' hi", tmp);
    expect(NULL, a, 1, NULL, "nope.json: cannot open");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_tokenize_cli PATH_TO_TIDE\n");
        return 1;
    }
    tide_bin = argv[1];
    const char *data = getenv("TIDE_TEST_DATA");
    snprintf(fixture, sizeof fixture, "%s/fixtures/tiny.json", data ? data : ".");
    tmp = tt_tmpdir();
    if (!tmp) {
        fprintf(stderr, "cannot make a temporary folder\n");
        return 1;
    }
    TEST_RUN(test_encode);
    TEST_RUN(test_decode);
    TEST_RUN(test_model_and_chat);
    TEST_RUN(test_usage);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    TEST_DONE();
}
