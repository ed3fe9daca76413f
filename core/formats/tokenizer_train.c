/* A small deterministic byte-level BPE trainer, for synthetic checkpoints:
 * count the pre-tokenized pieces of a corpus, then merge the most frequent
 * adjacent pair until the vocabulary is full, and write a HuggingFace
 * tokenizer.json laid out like the LLaDA2.0 one.
 *
 * Each merge rescans the distinct pieces and the pair table, so the cost is
 * O(merges * (distinct pieces + distinct pairs)): fine for the corpora of a
 * few hundred kB it is meant for. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tide/log.h"
#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tide/tokenizer_train.h"
#include "tokenizer_internal.h"

struct tr_word {
    int32_t *sym; /* [n] token ids */
    int n;
    int64_t freq;
};

/* (left, right) -> count, open addressing; entries are never removed. */
struct tr_pairs {
    uint64_t *key;  /* [mask + 1] left << 32 | right */
    int64_t *count; /* [mask + 1] */
    bool *used;     /* [mask + 1] */
    size_t mask, n;
};

struct tr_ctx {
    const char *path;
    const char *corpus;
    size_t corpus_len;
    struct tok_map word_map; /* piece bytes (in the corpus) -> index into words */
    struct tr_word *words;
    size_t n_words, words_cap;
    char **bytes; /* [n_tok] raw bytes of each token */
    uint32_t *len;
    int32_t n_tok, tok_cap;
    struct tok_map tok_map; /* raw bytes -> id */
    struct tr_pairs pairs;
    int32_t (*merges)[2]; /* [n_merges] */
    size_t n_merges;
    uint64_t *banned; /* pairs whose merge would spell a special token */
    size_t n_banned;
};

static int tr_nomem(const struct tr_ctx *c)
{
    tide_error("%s: out of memory while training the tokenizer", c->path);
    return TIDE_E_NOMEM;
}

static uint64_t tr_key(int32_t a, int32_t b)
{
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static size_t tr_slot(const struct tr_pairs *p, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    size_t j = (size_t)(h >> 17) & p->mask;
    while (p->used[j] && p->key[j] != key)
        j = (j + 1) & p->mask;
    return j;
}

static int tr_pairs_grow(struct tr_pairs *p)
{
    size_t cap = p->used ? (p->mask + 1) * 2 : 1024;
    struct tr_pairs q = {calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(int64_t)),
                         calloc(cap, sizeof(bool)), cap - 1, p->n};
    if (!q.key || !q.count || !q.used) {
        free(q.key);
        free(q.count);
        free(q.used);
        return TIDE_E_NOMEM;
    }
    for (size_t i = 0; p->used && i <= p->mask; i++) {
        if (!p->used[i])
            continue;
        size_t j = tr_slot(&q, p->key[i]);
        q.used[j] = true;
        q.key[j] = p->key[i];
        q.count[j] = p->count[i];
    }
    free(p->key);
    free(p->count);
    free(p->used);
    *p = q;
    return TIDE_OK;
}

static int tr_pair_add(struct tr_pairs *p, int32_t a, int32_t b, int64_t delta)
{
    if ((!p->used || (p->n + 1) * 2 > p->mask + 1) && tr_pairs_grow(p) != TIDE_OK)
        return TIDE_E_NOMEM;
    uint64_t key = tr_key(a, b);
    size_t j = tr_slot(p, key);
    if (!p->used[j]) {
        p->used[j] = true;
        p->key[j] = key;
        p->count[j] = 0;
        p->n++;
    }
    p->count[j] += delta;
    return TIDE_OK;
}

static int tr_word_pairs(struct tr_ctx *c, const struct tr_word *w, int64_t sign)
{
    for (int i = 0; i + 1 < w->n; i++)
        if (tr_pair_add(&c->pairs, w->sym[i], w->sym[i + 1], sign * w->freq) != TIDE_OK)
            return TIDE_E_NOMEM;
    return TIDE_OK;
}

/* Count one pre-tokenized piece. Added tokens (the specials) are not counted. */
static int tr_count(void *user, const char *p, size_t n, int32_t added_id)
{
    struct tr_ctx *c = user;
    if (added_id >= 0)
        return TIDE_OK;
    /* The trainer's steps never rewrite text, so pieces point into the corpus
     * and can be map keys as they are. */
    if (p < c->corpus || p + n > c->corpus + c->corpus_len || n > INT32_MAX) {
        tide_error("%s: internal error: a training piece is not in the corpus", c->path);
        return TIDE_E_INVAL;
    }
    int32_t w = tok_map_get(&c->word_map, p, n);
    if (w >= 0) {
        c->words[w].freq++;
        return TIDE_OK;
    }
    if (c->n_words == c->words_cap) {
        size_t cap = c->words_cap ? c->words_cap * 2 : 1024;
        struct tr_word *nw = realloc(c->words, cap * sizeof *nw);
        if (!nw)
            return tr_nomem(c);
        c->words = nw;
        c->words_cap = cap;
    }
    struct tr_word *nw = &c->words[c->n_words];
    if (!(nw->sym = malloc(n * sizeof *nw->sym)))
        return tr_nomem(c);
    for (size_t i = 0; i < n; i++)
        nw->sym[i] = (unsigned char)p[i];
    nw->n = (int)n;
    nw->freq = 1;
    if (tok_map_put(&c->word_map, p, n, (int32_t)c->n_words) != TIDE_OK)
        return tr_nomem(c);
    c->n_words++;
    return TIDE_OK;
}

static int tr_add_token(struct tr_ctx *c, char *bytes, uint32_t len)
{
    if (c->n_tok == c->tok_cap) {
        int32_t cap = c->tok_cap ? c->tok_cap * 2 : 512;
        char **b = realloc(c->bytes, (size_t)cap * sizeof *b);
        if (b)
            c->bytes = b;
        uint32_t *l = b ? realloc(c->len, (size_t)cap * sizeof *l) : NULL;
        if (!l) {
            free(bytes);
            return tr_nomem(c);
        }
        c->len = l;
        c->tok_cap = cap;
    }
    c->bytes[c->n_tok] = bytes;
    c->len[c->n_tok] = len;
    if (tok_map_put(&c->tok_map, bytes, len, c->n_tok) != TIDE_OK) {
        free(bytes);
        return tr_nomem(c);
    }
    c->n_tok++;
    return TIDE_OK;
}

/* The byte-level spelling of raw bytes (malloc'd, NUL-terminated). */
static char *tr_spell(const char *bytes, size_t n)
{
    char *s = malloc(2 * n + 1);
    if (!s)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)tok_byte_utf8((uint8_t)bytes[i], s + o);
    s[o] = 0;
    return s;
}

static bool tr_is_banned(const struct tr_ctx *c, uint64_t key)
{
    for (size_t i = 0; i < c->n_banned; i++)
        if (c->banned[i] == key)
            return true;
    return false;
}

/* Replace every (a, b) in the words by id and update the pair counts. */
static int tr_apply(struct tr_ctx *c, int32_t a, int32_t b, int32_t id)
{
    for (size_t wi = 0; wi < c->n_words; wi++) {
        struct tr_word *w = &c->words[wi];
        bool has = false;
        for (int i = 0; i + 1 < w->n && !has; i++)
            has = w->sym[i] == a && w->sym[i + 1] == b;
        if (!has)
            continue;
        if (tr_word_pairs(c, w, -1) != TIDE_OK)
            return tr_nomem(c);
        int o = 0;
        for (int i = 0; i < w->n; i++) {
            if (i + 1 < w->n && w->sym[i] == a && w->sym[i + 1] == b) {
                w->sym[o++] = id;
                i++;
            } else {
                w->sym[o++] = w->sym[i];
            }
        }
        w->n = o;
        if (tr_word_pairs(c, w, +1) != TIDE_OK)
            return tr_nomem(c);
    }
    return TIDE_OK;
}

static int tr_merge_loop(struct tr_ctx *c, int vocab_target, const char *const *specials,
                         int n_specials)
{
    size_t merges_cap = 0;
    while (c->n_tok < vocab_target) {
        /* Most frequent pair; ties to the smaller (left, right): deterministic. */
        size_t best = SIZE_MAX;
        for (size_t j = 0; c->pairs.used && j <= c->pairs.mask; j++) {
            if (!c->pairs.used[j] || c->pairs.count[j] <= 0)
                continue;
            if (best != SIZE_MAX && (c->pairs.count[j] < c->pairs.count[best] ||
                                     (c->pairs.count[j] == c->pairs.count[best] &&
                                      c->pairs.key[j] > c->pairs.key[best])))
                continue;
            if (tr_is_banned(c, c->pairs.key[j]))
                continue;
            best = j;
        }
        if (best == SIZE_MAX) {
            tide_info("%s: the corpus has no more pairs to merge: %d tokens instead of %d", c->path,
                      c->n_tok, vocab_target);
            break;
        }
        uint64_t key = c->pairs.key[best];
        int32_t a = (int32_t)(key >> 32), b = (int32_t)(key & 0xFFFFFFFFu);
        uint32_t len = c->len[a] + c->len[b];
        char *bytes = malloc(len);
        if (!bytes)
            return tr_nomem(c);
        memcpy(bytes, c->bytes[a], c->len[a]);
        memcpy(bytes + c->len[a], c->bytes[b], c->len[b]);
        char *spelled = tr_spell(bytes, len);
        bool clash = false;
        for (int s = 0; spelled && s < n_specials; s++)
            clash = clash || !strcmp(spelled, specials[s]);
        free(spelled);
        if (clash) {
            free(bytes);
            uint64_t *nb = realloc(c->banned, (c->n_banned + 1) * sizeof *nb);
            if (!nb)
                return tr_nomem(c);
            c->banned = nb;
            c->banned[c->n_banned++] = key;
            continue;
        }
        /* Two merge paths can spell the same bytes ("ab"+"c", "a"+"bc"):
         * the second merge reuses the token. */
        int32_t id = tok_map_get(&c->tok_map, bytes, len);
        if (id >= 0) {
            free(bytes);
        } else {
            id = c->n_tok;
            if (tr_add_token(c, bytes, len) != TIDE_OK)
                return TIDE_E_NOMEM;
        }
        if (c->n_merges == merges_cap) {
            merges_cap = merges_cap ? merges_cap * 2 : 1024;
            int32_t(*m)[2] = realloc(c->merges, merges_cap * sizeof *m);
            if (!m)
                return tr_nomem(c);
            c->merges = m;
        }
        c->merges[c->n_merges][0] = a;
        c->merges[c->n_merges][1] = b;
        c->n_merges++;
        int rc = tr_apply(c, a, b, id);
        if (rc != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}

/* Set a member; a NULL value (failed allocation) marks the build as failed. */
static void tr_set(json_t *obj, const char *key, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(obj, key, v))
        *ok = false;
}

static void tr_append(json_t *arr, json_t *v, bool *ok)
{
    if (!v || json_array_append_new(arr, v))
        *ok = false;
}

static json_t *tr_json(const struct tr_ctx *c, const char *const *specials, int n_specials)
{
    bool ok = true;
    json_t *root = json_object(), *added = json_array(), *vocab = json_object();
    json_t *merges = json_array(), *model = json_object();
    if (!root || !added || !vocab || !merges || !model) {
        json_decref(added);
        json_decref(vocab);
        json_decref(merges);
        json_decref(model);
        json_decref(root);
        return NULL;
    }
    tr_set(root, "version", json_string("1.0"), &ok);
    tr_set(root, "truncation", json_null(), &ok);
    tr_set(root, "padding", json_null(), &ok);
    for (int s = 0; s < n_specials; s++) {
        json_t *a = json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", c->n_tok + s, "content",
                              specials[s], "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized",
                              0, "special", 1);
        tr_append(added, a, &ok);
    }
    tr_set(root, "added_tokens", added, &ok);
    tr_set(root, "normalizer", json_null(), &ok);
    json_t *pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type",
                            "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex",
                            tok_llada2_regex, "behavior", "Isolated", "invert", 0, "type",
                            "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
    tr_set(root, "pre_tokenizer", pre, &ok);
    tr_set(root, "post_processor", json_null(), &ok);
    tr_set(root, "decoder",
           json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                     "trim_offsets", 1, "use_regex", 1),
           &ok);
    for (int32_t id = 0; id < c->n_tok && ok; id++) {
        char *s = tr_spell(c->bytes[id], c->len[id]);
        tr_set(vocab, s ? s : "", s ? json_integer(id) : NULL, &ok);
        free(s);
    }
    for (int s = 0; s < n_specials; s++)
        tr_set(vocab, specials[s], json_integer(c->n_tok + s), &ok);
    for (size_t i = 0; i < c->n_merges && ok; i++) {
        int32_t a = c->merges[i][0], b = c->merges[i][1];
        char *sa = tr_spell(c->bytes[a], c->len[a]), *sb = tr_spell(c->bytes[b], c->len[b]);
        char *m = sa && sb ? malloc(strlen(sa) + strlen(sb) + 2) : NULL;
        if (m)
            sprintf(m, "%s %s", sa, sb);
        tr_append(merges, m ? json_string(m) : NULL, &ok);
        free(sa);
        free(sb);
        free(m);
    }
    tr_set(model, "type", json_string("BPE"), &ok);
    tr_set(model, "dropout", json_null(), &ok);
    tr_set(model, "unk_token", json_null(), &ok);
    tr_set(model, "continuing_subword_prefix", json_null(), &ok);
    tr_set(model, "end_of_word_suffix", json_null(), &ok);
    tr_set(model, "fuse_unk", json_false(), &ok);
    tr_set(model, "byte_fallback", json_false(), &ok);
    tr_set(model, "ignore_merges", json_false(), &ok);
    tr_set(model, "vocab", vocab, &ok);
    tr_set(model, "merges", merges, &ok);
    tr_set(root, "model", model, &ok);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Write to PATH.XXXXXX, then rename (overwrite) or link (refuses an existing
 * file atomically). */
static int tr_write(const char *path, const json_t *root, bool overwrite)
{
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 8);
    if (!tmp) {
        tide_error("%s: out of memory", path);
        return TIDE_E_NOMEM;
    }
    memcpy(tmp, path, pl);
    memcpy(tmp + pl, ".XXXXXX", 8);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        tide_error("%s: cannot create a temporary file next to it: %s", path, strerror(errno));
        free(tmp);
        return TIDE_E_IO;
    }
    int rc = TIDE_OK;
    /* mkstemp makes the file 0600; give it the usual permissions. */
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0)
        tide_warn("%s: cannot set the permissions of %s: %s", path, tmp, strerror(errno));
    if (json_dumpfd(root, fd, JSON_INDENT(2)) != 0 || write(fd, "\n", 1) != 1) {
        tide_error("%s: cannot write %s: %s", path, tmp, strerror(errno));
        rc = TIDE_E_IO;
    }
    if (close(fd) != 0 && rc == TIDE_OK) {
        tide_error("%s: cannot write %s: %s", path, tmp, strerror(errno));
        rc = TIDE_E_IO;
    }
    if (rc == TIDE_OK) {
        if (overwrite ? rename(tmp, path) != 0 : link(tmp, path) != 0) {
            int err = errno;
            if (err == EEXIST) {
                tide_error("%s exists; refusing to overwrite it", path);
                rc = TIDE_E_INVAL;
            } else {
                tide_error("%s: cannot create: %s", path, strerror(err));
                rc = TIDE_E_IO;
            }
        }
    }
    if (rc != TIDE_OK || !overwrite)
        unlink(tmp);
    free(tmp);
    return rc;
}

static int tr_check_args(const char *corpus, size_t len, int vocab_target,
                         const char *const *specials, int n_specials, const char *path,
                         bool overwrite)
{
    if (!path || (!corpus && len)) {
        tide_error("tokenizer train: no %s given", path ? "corpus" : "output path");
        return TIDE_E_INVAL;
    }
    if (vocab_target < 256 || vocab_target > TOK_MAX_ID - n_specials || n_specials < 0 ||
        (n_specials && !specials)) {
        tide_error("%s: vocab_target %d must be in [256, %d] and n_specials %d >= 0", path,
                   vocab_target, TOK_MAX_ID - (n_specials > 0 ? n_specials : 0), n_specials);
        return TIDE_E_INVAL;
    }
    for (int s = 0; s < n_specials; s++) {
        const char *sp = specials[s];
        size_t n = sp ? strlen(sp) : 0, i = 0, k;
        while (i < n && (k = tok_utf8_char((const unsigned char *)sp + i, n - i)) > 0)
            i += k;
        if (!n || i < n) {
            tide_error("%s: special token %d is %s", path, s,
                       n ? "not valid UTF-8" : "empty or NULL");
            return TIDE_E_INVAL;
        }
        for (int o = 0; o < s; o++)
            if (!strcmp(specials[o], sp)) {
                tide_error("%s: special token \"%s\" is given twice", path, sp);
                return TIDE_E_INVAL;
            }
        for (int b = 0; b < 256; b++) {
            char u[3] = {0};
            tok_byte_utf8((uint8_t)b, u);
            if (!strcmp(u, sp)) {
                tide_error("%s: special token \"%s\" spells the byte token of 0x%02x", path, sp, b);
                return TIDE_E_INVAL;
            }
        }
    }
    if (!overwrite && access(path, F_OK) == 0) {
        tide_error("%s exists; refusing to overwrite it", path);
        return TIDE_E_INVAL;
    }
    return TIDE_OK;
}

static void tr_free(struct tr_ctx *c)
{
    for (size_t i = 0; i < c->n_words; i++)
        free(c->words[i].sym);
    free(c->words);
    tok_map_free(&c->word_map);
    for (int32_t i = 0; i < c->n_tok; i++)
        free(c->bytes[i]);
    free(c->bytes);
    free(c->len);
    tok_map_free(&c->tok_map);
    free(c->pairs.key);
    free(c->pairs.count);
    free(c->pairs.used);
    free(c->merges);
    free(c->banned);
}

int tide_tokenizer_train(const char *corpus, size_t len, int vocab_target,
                         const char *const *specials, int n_specials, const char *path,
                         bool overwrite)
{
    int rc = tr_check_args(corpus, len, vocab_target, specials, n_specials, path, overwrite);
    if (rc != TIDE_OK)
        return rc;
    struct tr_ctx c = {.path = path, .corpus = corpus ? corpus : "", .corpus_len = len};
    /* A splitter: the LLaDA2 regex, with the specials as added tokens. */
    struct tide_tokenizer *sp = calloc(1, sizeof *sp);
    if (!sp || !(sp->steps = calloc(1, sizeof *sp->steps)))
        goto nomem;
    sp->path = malloc(strlen(path) + 1);
    if (!sp->path)
        goto nomem;
    strcpy(sp->path, path);
    if ((rc = tok_compile(tok_llada2_regex, strlen(tok_llada2_regex), false, "LLaDA2 regex",
                          &sp->steps[0].re)) != TIDE_OK)
        goto done;
    sp->n_steps = 1;
    for (int s = 0; s < n_specials; s++)
        if (tok_added_push(sp, specials[s], strlen(specials[s]), s, true, false, false, false) !=
            TIDE_OK)
            goto nomem;
    if (tok_added_index(sp) != TIDE_OK)
        goto nomem;
    if ((rc = tok_split(sp, c.corpus, len, tr_count, &c)) != TIDE_OK)
        goto done;
    for (int b = 0; b < 256; b++) {
        char *one = malloc(1);
        if (!one)
            goto nomem;
        *one = (char)b;
        if ((rc = tr_add_token(&c, one, 1)) != TIDE_OK)
            goto done;
    }
    for (size_t w = 0; w < c.n_words; w++)
        if (tr_word_pairs(&c, &c.words[w], +1) != TIDE_OK)
            goto nomem;
    if ((rc = tr_merge_loop(&c, vocab_target, specials, n_specials)) != TIDE_OK)
        goto done;
    json_t *root = tr_json(&c, specials, n_specials);
    if (!root)
        goto nomem;
    rc = tr_write(path, root, overwrite);
    json_decref(root);
    if (rc == TIDE_OK)
        tide_debug("%s: trained %d tokens (%zu merges, %zu distinct pieces) and %d specials", path,
                   c.n_tok, c.n_merges, c.n_words, n_specials);
    goto done;
nomem:
    rc = tr_nomem(&c);
done:
    tide_tokenizer_free(sp);
    tr_free(&c);
    return rc;
}
