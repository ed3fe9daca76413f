/* `tide tokenize`: show how a tokenizer.json splits text, or decode ids. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "cli.h"
#include "tide/model.h"
#include "tide/log.h"
#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tokenizer_internal.h"

static void tk_usage(FILE *f)
{
    fprintf(f,
            "usage: tide tokenize (--model DIR | --tokenizer FILE) [--chat [--plugin NAME]]\n"
            "                     [--json] TEXT...\n"
            "       tide tokenize (--model DIR | --tokenizer FILE) [--json] --decode ID,ID,...\n"
            "\n"
            "Shows how a HuggingFace tokenizer.json (byte-level BPE, as LLaDA2.0 uses) splits\n"
            "text into tokens, or turns ids back into text. For debugging prompts.\n"
            "\n"
            "options:\n"
            "  --model DIR        a checkpoint folder: reads DIR/tokenizer.json\n"
            "  --tokenizer FILE   a tokenizer.json\n"
            "  --chat             wrap TEXT in the model plugin's chat template first\n"
            "  --plugin NAME      the model plugin whose template --chat uses\n"
            "                     (default model-llada2)\n"
            "  --json             print JSON instead of lines\n"
            "  --decode IDS       decode ids (separated by commas or spaces) and print the text\n"
            "  -h, --help         this help\n"
            "\n"
            "TEXT: the arguments joined by single spaces; \"-\" reads standard input; \"--\"\n"
            "ends the options. Added tokens such as <|endoftext|> are matched in the text.\n"
            "\n"
            "output: one line per token: the id, the token's bytes in double quotes (escapes\n"
            "\\n \\r \\t \\\" \\\\, and \\xNN for other control bytes and bytes that are not\n"
            "valid UTF-8), then \"special\" for special tokens. --json prints\n"
            "{\"ids\": [...], \"tokens\": [{\"id\", \"piece\", \"text\", \"special\"}]}, where\n"
            "piece is the vocab string (byte-level form, e.g. \"Ġthe\") and text the\n"
            "bytes (U+FFFD for bytes that are not valid UTF-8). --decode prints the text\n"
            "as raw bytes and a newline, or {\"text\": ...} with --json.\n"
            "\n"
            "exit codes: 0 ok, 1 runtime failure (unreadable tokenizer, unknown id),\n"
            "            2 usage error\n");
}

/* Print bytes as a quoted string: C-like escapes, or JSON escapes (invalid
 * UTF-8 becomes U+FFFD) when json. */
static void tk_quote(FILE *f, const char *s, size_t n, bool json)
{
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = tok_utf8_char(u + i, n - i);
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20 || c == 0x7F)
            fprintf(f, json ? "\\u%04x" : "\\x%02x", c);
        else if (k == 0)
            fprintf(f, json ? "\\ufffd" : "\\x%02x", c);
        else
            fwrite(u + i, 1, k, f);
        i += k ? k : 1;
    }
    fputc('"', f);
}

static int tk_read_stdin(char **buf, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, stdin);
        if (n < cap)
            break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    if (!b) {
        tide_error("tokenize: out of memory reading standard input");
        return TIDE_E_NOMEM;
    }
    if (ferror(stdin)) {
        tide_error("tokenize: cannot read standard input: %s", strerror(errno));
        free(b);
        return TIDE_E_IO;
    }
    *buf = b;
    *len = n;
    return TIDE_OK;
}

/* The TEXT arguments joined by spaces, or stdin for a lone "-". */
static int tk_text(char **words, int n_words, char **out, size_t *len)
{
    if (n_words == 1 && !strcmp(words[0], "-"))
        return tk_read_stdin(out, len);
    size_t total = 1;
    for (int i = 0; i < n_words; i++)
        total += strlen(words[i]) + 1;
    char *s = malloc(total);
    if (!s) {
        tide_error("tokenize: out of memory");
        return TIDE_E_NOMEM;
    }
    size_t o = 0;
    for (int i = 0; i < n_words; i++) {
        if (i)
            s[o++] = ' ';
        size_t l = strlen(words[i]);
        memcpy(s + o, words[i], l);
        o += l;
    }
    s[o] = 0;
    *out = s;
    *len = o;
    return TIDE_OK;
}

/* "12,34 56" -> ids. Returns false on a malformed list. */
static bool tk_parse_ids(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = strlen(s) / 2 + 1, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return false;
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < INT32_MIN || x > INT32_MAX ||
            (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n') || k == cap) {
            free(v);
            return false;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    *ids = v;
    *n = k;
    return true;
}

static int tk_print_decode(const struct tide_tokenizer *t, const char *list, bool json)
{
    int32_t *ids;
    size_t n;
    if (!tk_parse_ids(list, &ids, &n)) {
        fprintf(stderr,
                "tide tokenize: --decode expects integers separated by commas, got "
                "'%s'\n",
                list);
        return CLI_EXIT_USAGE;
    }
    char *text;
    size_t len;
    int rc = tide_tokenizer_decode(t, ids, n, &text, &len);
    free(ids);
    if (rc != TIDE_OK)
        return cli_exit_code(rc);
    if (json) {
        fputs("{\"text\": ", stdout);
        tk_quote(stdout, text, len, true);
        fputs("}\n", stdout);
    } else {
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
    }
    free(text);
    return CLI_EXIT_OK;
}

static int tk_print_encode(const struct tide_tokenizer *t, const char *text, size_t len, bool json)
{
    int32_t *ids;
    size_t n;
    int rc = tide_tokenizer_encode(t, text, len, &ids, &n);
    if (rc != TIDE_OK)
        return cli_exit_code(rc);
    if (json) {
        fputs("{\"ids\": [", stdout);
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? ", " : "", ids[i]);
        fputs("],\n \"tokens\": [", stdout);
    }
    for (size_t i = 0; i < n && rc == TIDE_OK; i++) {
        char *bytes;
        size_t bl;
        if ((rc = tide_tokenizer_decode(t, ids + i, 1, &bytes, &bl)) != TIDE_OK)
            break;
        bool special = tide_tokenizer_is_special(t, ids[i]);
        if (json) {
            const char *piece = tide_tokenizer_piece(t, ids[i]);
            printf("%s\n  {\"id\": %d, \"piece\": ", i ? "," : "", ids[i]);
            tk_quote(stdout, piece, strlen(piece), true);
            fputs(", \"text\": ", stdout);
            tk_quote(stdout, bytes, bl, true);
            printf(", \"special\": %s}", special ? "true" : "false");
        } else {
            printf("%d\t", ids[i]);
            tk_quote(stdout, bytes, bl, false);
            fputs(special ? "\tspecial\n" : "\n", stdout);
        }
        free(bytes);
    }
    if (json && rc == TIDE_OK)
        fputs("]}\n", stdout);
    free(ids);
    return cli_exit_code(rc);
}

/* The value of --opt VALUE or --opt=VALUE at argv[*i]; NULL when argv[*i] is
 * not opt. Sets *missing when the value is absent. */
static const char *tk_opt(int argc, char **argv, int *i, const char *opt, bool *missing)
{
    size_t l = strlen(opt);
    if (strncmp(argv[*i], opt, l))
        return NULL;
    if (argv[*i][l] == '=')
        return argv[*i] + l + 1;
    if (argv[*i][l])
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

/* Wrap text in the chat template of model plugin `name` for checkpoint dir. */
static int tk_chat(const char *name, const char *dir, const char *text, size_t len, char **out,
                   size_t *out_len)
{
    struct tide_plugin_set *set;
    const struct tide_model_ops *ops = cli_model_plugin(name, "--plugin", &set);
    int rc = TIDE_E_CONFIG;
    if (ops) {
        const char *tmpl = TIDE_OPS_HAS(ops, chat_template) ? ops->chat_template(dir) : NULL;
        rc = tide_chat_apply(tmpl, text, len, out, out_len);
    }
    tide_plugins_free(set);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *decode = NULL, *plugin = "model-llada2";
    bool chat = false, json = false, missing = false;
    char **words = calloc((size_t)argc + 1, sizeof *words);
    int n_words = 0;
    if (!words) {
        fprintf(stderr, "tide tokenize: out of memory\n");
        return CLI_EXIT_RUNTIME;
    }
    bool opts = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!opts || a[0] != '-' || !strcmp(a, "-")) {
            words[n_words++] = argv[i];
        } else if (!strcmp(a, "--")) {
            opts = false;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tk_usage(stdout);
            free(words);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if ((v = tk_opt(argc, argv, &i, "--model", &missing))) {
            model = v;
        } else if ((v = tk_opt(argc, argv, &i, "--tokenizer", &missing))) {
            file = v;
        } else if ((v = tk_opt(argc, argv, &i, "--plugin", &missing))) {
            plugin = v;
        } else if ((v = tk_opt(argc, argv, &i, "--decode", &missing))) {
            decode = v;
        } else {
            char hint[160] = "";
            if (!missing)
                cli_flag_hint(a, tk_usage, hint, sizeof hint);
            fprintf(stderr, "tide tokenize: %s '%s'%s (see tide tokenize --help)\n",
                    missing ? "missing value after" : "unknown option", a, hint);
            free(words);
            return CLI_EXIT_USAGE;
        }
    }
    const char *why = NULL;
    if (!model == !file)
        why = "give exactly one of --model DIR or --tokenizer FILE";
    else if (decode && (n_words || chat))
        why = "--decode takes no TEXT and no --chat";
    else if (!decode && !n_words)
        why = "no TEXT given (use \"-\" to read standard input)";
    if (why) {
        fprintf(stderr, "tide tokenize: %s (see tide tokenize --help)\n", why);
        free(words);
        return CLI_EXIT_USAGE;
    }
    char *path = NULL;
    if (model) {
        path = malloc(strlen(model) + sizeof "/tokenizer.json");
        if (path)
            sprintf(path, "%s/tokenizer.json", model);
    }
    struct tide_tokenizer *t = NULL;
    int rc = model && !path ? TIDE_E_NOMEM : tide_tokenizer_load(path ? path : file, &t);
    int code = cli_exit_code(rc);
    if (rc == TIDE_OK && decode) {
        code = tk_print_decode(t, decode, json);
    } else if (rc == TIDE_OK) {
        char *text = NULL, *wrapped = NULL;
        size_t len = 0, wlen = 0;
        rc = tk_text(words, n_words, &text, &len);
        if (rc == TIDE_OK && chat &&
            (rc = tk_chat(plugin, model, text, len, &wrapped, &wlen)) == TIDE_OK) {
            free(text);
            text = wrapped;
            len = wlen;
        }
        code = rc == TIDE_OK ? tk_print_encode(t, text, len, json) : cli_exit_code(rc);
        free(text);
    }
    tide_tokenizer_free(t);
    free(path);
    free(words);
    return code;
}
