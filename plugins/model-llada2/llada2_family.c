/* Which LLaDA2 release a checkpoint is, told by its decoding loop.
 *
 * LLaDA2.0 and LLaDA2.1 checkpoints (mini and flash) share the architecture,
 * the config.json keys and the tensor layout: nothing in the weights or the
 * configuration tells them apart. What differs is the decoding loop of the
 * remote code each release ships beside its weights (the modeling file that
 * config.json's auto_map names, modeling_llada2_moe.py): LLaDA2.1's
 * generate() takes editing_threshold (mask-to-token plus token-to-token
 * editing), LLaDA2.0's does not. So, in order:
 *   1. [model-llada2] decoder = llada2 | llada21 says it outright;
 *   2. auto reads the generate() signature of the class config.json's
 *      auto_map names (AutoModelForCausalLM first, then every other entry,
 *      as dllm registers LLaDA2.1 under AutoModelForMaskedLM), in its
 *      remote-code file beside the checkpoint, following base classes of
 *      the same file: llada21 when a parameter is named editing_threshold,
 *      else llada2. The file is parsed, not searched: comments and string
 *      literals are blanked first, the class body is told by indentation,
 *      and only the parameter names of generate() count. Without an
 *      auto_map class that has a generate(), the first class of
 *      modeling_llada2_moe.py that defines one decides;
 *   3. without such a file: llada2 (what earlier tide versions assumed).
 * The answer names a decoder plugin ([generation] decoder = auto uses it);
 * `tide inspect` prints it with the reason. docs/adding-a-model.md. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llada2.h"

/* Python source, read for its structure only. */
struct py_src {
    char *text; /* NUL-terminated; comments and string contents blanked */
    size_t n;
};

/* Blank comments and the contents of string literals (quotes, newlines
 * kept), so that no word inside them is taken for code. */
static void py_blank(char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const char c = s[i];
        if (c == '#') {
            while (i < n && s[i] != '\n')
                s[i++] = ' ';
        } else if (c == '\'' || c == '"') {
            const bool triple = i + 2 < n && s[i + 1] == c && s[i + 2] == c;
            const size_t q = triple ? 3 : 1;
            i += q;
            while (i < n) {
                if (s[i] == '\\' && i + 1 < n) {
                    s[i] = ' ';
                    if (s[i + 1] != '\n')
                        s[i + 1] = ' ';
                    i += 2;
                } else if (triple ? i + 2 < n && s[i] == c && s[i + 1] == c && s[i + 2] == c
                                  : s[i] == c) {
                    i += q;
                    break;
                } else if (!triple && s[i] == '\n') {
                    break; /* unterminated: the line ends it */
                } else {
                    if (s[i] != '\n')
                        s[i] = ' ';
                    i++;
                }
            }
        } else {
            i++;
        }
    }
}

/* dir/name, read and blanked (at most 4 MiB); false when it is no regular
 * file or cannot be read. */
static bool py_load(const char *dir, const char *name, struct py_src *src)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    src->text = NULL;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    const size_t cap = st.st_size < (4 << 20) ? (size_t)st.st_size : (size_t)4 << 20;
    src->text = malloc(cap + 1);
    src->n = src->text ? fread(src->text, 1, cap, f) : 0;
    fclose(f);
    if (!src->text)
        return false;
    src->text[src->n] = 0;
    for (size_t i = 0; i < src->n; i++)
        if (!src->text[i])
            src->text[i] = ' ';
    py_blank(src->text, src->n);
    return true;
}

static bool py_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The indentation of the line at p, or -1 when it holds no code. */
static int py_indent(const char *p)
{
    int w = 0;
    for (; *p == ' ' || *p == '\t'; p++)
        w += *p == '\t' ? 8 - w % 8 : 1;
    return *p == '\n' || *p == '\r' || !*p || *p == '\\' ? -1 : w;
}

static const char *py_next_line(const char *p)
{
    const char *e = strchr(p, '\n');
    return e ? e + 1 : p + strlen(p);
}

/* p starts with word, then a character that cannot continue a name. */
static const char *py_word(const char *p, const char *word)
{
    const size_t n = strlen(word);
    return !strncmp(p, word, n) && !py_ident_char(p[n]) ? p + n : NULL;
}

static const char *py_skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* The bracket matching the one at open (string contents are blank), or NULL. */
static const char *py_close(const char *open)
{
    int depth = 0;
    for (const char *p = open; *p; p++) {
        if (*p == '(' || *p == '[' || *p == '{')
            depth++;
        else if ((*p == ')' || *p == ']' || *p == '}') && --depth == 0)
            return p;
    }
    return NULL;
}

/* The top-level `class name` of src: its line, and in *end where its body
 * ends. NULL when there is none. */
static const char *py_class(const struct py_src *src, const char *name, const char **end)
{
    for (const char *l = src->text; *l; l = py_next_line(l)) {
        const char *p = py_word(l, "class");
        if (!p || py_indent(l) != 0)
            continue;
        p = py_skip_ws(p);
        const char *after = py_word(p, name);
        if (!after)
            continue;
        after = py_skip_ws(after);
        if (*after != '(' && *after != ':')
            continue;
        /* The header may span lines (its bases); the body is every later
         * line indented deeper, up to the next code line that is not. */
        const char *hdr = *after == '(' ? py_close(after) : after;
        const char *b = py_next_line(hdr ? hdr : after);
        while (*b && py_indent(b) != 0)
            b = py_next_line(b);
        *end = b;
        return l;
    }
    return NULL;
}

/* The `(` of `def meth(` among the direct methods of the class at cls (body
 * up to end), or NULL. */
static const char *py_method(const char *cls, const char *end, const char *meth)
{
    const char *l = py_next_line(cls);
    const char *paren = strchr(cls, '(');
    if (paren && paren < l && py_close(paren))
        l = py_next_line(py_close(paren));
    int body = -1;
    for (; l < end && *l; l = py_next_line(l)) {
        const int ind = py_indent(l);
        if (ind < 0)
            continue;
        if (body < 0)
            body = ind;
        if (ind != body)
            continue;
        const char *p = py_skip_ws(l);
        const char *a = py_word(p, "async");
        p = py_word(a ? py_skip_ws(a) : p, "def");
        if (!p)
            continue;
        p = py_word(py_skip_ws(p), meth);
        if (p && *(p = py_skip_ws(p)) == '(')
            return p;
    }
    return NULL;
}

/* Does the parameter list opening at open name param? */
static bool py_has_param(const char *open, const char *param)
{
    const char *close = py_close(open);
    if (!close)
        return false;
    int depth = 0;
    bool start = true;
    for (const char *p = open + 1; p < close; p++) {
        if (*p == '(' || *p == '[' || *p == '{')
            depth++;
        else if (*p == ')' || *p == ']' || *p == '}')
            depth--;
        else if (!depth && *p == ',')
            start = true;
        else if (start && !depth && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' &&
                 *p != '*') {
            start = false;
            if (py_word(p, param))
                return true;
        }
    }
    return false;
}

/* Where generate() of class cls is defined, following its bases in the same
 * file (depth at most 8): the defining class's name into owner and the `(`
 * of its parameters, or NULL. */
static const char *py_generate(const struct py_src *src, const char *cls, char *owner, size_t len,
                               int depth)
{
    const char *end;
    const char *line = py_class(src, cls, &end);
    if (!line || depth > 8)
        return NULL;
    const char *open = py_method(line, end, "generate");
    if (open) {
        snprintf(owner, len, "%s", cls);
        return open;
    }
    const char *b = strchr(line, '(');
    const char *close = b && b < py_next_line(line) ? py_close(b) : NULL;
    for (const char *p = b ? b + 1 : close; p && p < close;) {
        while (p < close && !py_ident_char(*p))
            p++;
        const char *q = p;
        while (q < close && (py_ident_char(*q) || *q == '.'))
            q++;
        if (q > p) {
            const char *dot = p;
            for (const char *t = p; t < q; t++)
                if (*t == '.')
                    dot = t + 1;
            char base[128];
            if ((size_t)(q - dot) < sizeof base && q > dot) {
                memcpy(base, dot, (size_t)(q - dot));
                base[q - dot] = 0;
                const char *found = py_generate(src, base, owner, len, depth + 1);
                if (found)
                    return found;
            }
        }
        p = q + 1;
    }
    return NULL;
}

/* The first top-level class of src that defines generate() itself: its
 * name into cls, the `(` of its parameters; NULL when none does. */
static const char *py_any_generate(const struct py_src *src, char *cls, size_t len)
{
    for (const char *l = src->text; *l; l = py_next_line(l)) {
        const char *p = py_word(l, "class");
        if (!p || py_indent(l) != 0)
            continue;
        p = py_skip_ws(p);
        const char *q = p;
        while (py_ident_char(*q))
            q++;
        if (q == p || (size_t)(q - p) >= len)
            continue;
        snprintf(cls, len, "%.*s", (int)(q - p), p);
        const char *end;
        const char *line = py_class(src, cls, &end);
        const char *open = line ? py_method(line, end, "generate") : NULL;
        if (open)
            return open;
    }
    return NULL;
}

/* An auto_map entry: "module.Class" or "repo--module.Class", as a file name
 * and a class; false when it names no local module. */
static bool llada2_auto_ref(const char *ref, char *file, size_t flen, char *cls, size_t clen)
{
    const char *m = strstr(ref, "--") ? strstr(ref, "--") + 2 : ref;
    const char *dot = strrchr(m, '.');
    const size_t n = dot ? (size_t)(dot - m) : 0;
    if (!n || n + 4 > flen || memchr(m, '/', n) || memchr(m, '.', n) || strlen(dot + 1) >= clen ||
        !dot[1])
        return false;
    snprintf(file, flen, "%.*s.py", (int)n, m);
    snprintf(cls, clen, "%s", dot + 1);
    return true;
}

/* Decide from the generate() of class cls in file (key: the auto_map
 * entry). Returns the decoder, NULL when the file or the class's generate()
 * is not there; *seen is set when the file exists. */
static const char *llada2_decide(const char *dir, const char *key, const char *file,
                                 const char *cls, bool *seen, char *why, size_t len)
{
    struct py_src src;
    if (!py_load(dir, file, &src))
        return NULL;
    *seen = true;
    char owner[128] = "", any[128] = "";
    const char *open = cls ? py_generate(&src, cls, owner, sizeof owner, 0)
                           : py_any_generate(&src, any, sizeof any);
    const char *dec = NULL;
    if (open) {
        const bool v21 = py_has_param(open, "editing_threshold");
        char via[300] = "";
        if (cls && strcmp(owner, cls))
            snprintf(via, sizeof via, " (defined in its base %s)", owner);
        snprintf(why, len, "%s beside the checkpoint, class %s%s%s%s: generate()%s %s", file,
                 cls ? cls : any, key ? " (config.json auto_map." : "", key ? key : "",
                 key ? ")" : " (the first class that defines generate(); auto_map names none)", via,
                 v21 ? "takes the parameter editing_threshold: LLaDA2.1"
                     : "has no parameter editing_threshold: LLaDA2.0");
        dec = v21 ? "llada21" : "llada2";
    }
    free(src.text);
    return dec;
}

const char *llada2_checkpoint_decoder(const char *dir, const struct tide_opts *opts, char *why,
                                      size_t len)
{
    const char *set = opts ? tide_opts_str(opts, "decoder") : "auto";
    if (strcmp(set, "auto")) {
        snprintf(why, len, "[model-llada2] decoder = %s", set);
        return !strcmp(set, "llada21") ? "llada21" : "llada2";
    }
    /* auto_map's classes: AutoModelForCausalLM first, then the others in
     * the file's order. */
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *map = json_object_get(root, "auto_map");
    const char *dec = NULL;
    bool seen = false;
    char tried[512] = "";
    for (int pass = 0; pass < 2 && !dec; pass++) {
        const char *key;
        json_t *v;
        json_object_foreach(map, key, v)
        {
            const bool causal = !strcmp(key, "AutoModelForCausalLM");
            char file[256], cls[128];
            if (dec || causal != (pass == 0) || !strcmp(key, "AutoConfig") || !json_is_string(v) ||
                !llada2_auto_ref(json_string_value(v), file, sizeof file, cls, sizeof cls))
                continue;
            bool here = false;
            dec = llada2_decide(dir, key, file, cls, &here, why, len);
            seen |= here;
            if (!dec && strlen(tried) + strlen(file) + strlen(cls) + 4 < sizeof tried)
                snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s:%s",
                         *tried ? ", " : "", file, cls);
        }
    }
    json_decref(root);
    if (dec)
        return dec;
    bool here = false;
    dec = llada2_decide(dir, NULL, "modeling_llada2_moe.py", NULL, &here, why, len);
    seen |= here;
    if (dec)
        return dec;
    snprintf(why, len,
             "%s (looked for %s%smodeling_llada2_moe.py): LLaDA2.0 assumed ([model-llada2] "
             "decoder = llada21 for a LLaDA2.1 checkpoint without it)",
             seen ? "no generate() in the remote code beside the checkpoint"
                  : "no remote-code file beside the checkpoint",
             tried, *tried ? ", " : "");
    return "llada2";
}
