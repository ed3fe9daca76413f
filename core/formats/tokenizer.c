/* Tokenizer: load a HuggingFace tokenizer.json (byte-level BPE), encode and
 * decode. The trainer is in tokenizer_train.c. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tide/log.h"
#include "tide/status.h"
#include "json_kind.h"
#include "tide/tokenizer.h"
#include "tokenizer_internal.h"

const char tok_llada2_regex[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|"
    "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";

/* ByteLevel with use_regex true splits with the GPT-2 pattern. */
static const char tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- small pieces ------------------------------------------------------- */

static char *tok_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

uint32_t tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

static int tok_map_grow(struct tok_map *m)
{
    size_t cap = m->slots ? (m->mask + 1) * 2 : 64;
    struct tok_slot *s = calloc(cap, sizeof *s);
    if (!s)
        return TIDE_E_NOMEM;
    if (m->slots) {
        for (size_t i = 0; i <= m->mask; i++) {
            if (!m->slots[i].key)
                continue;
            size_t j = m->slots[i].hash & (cap - 1);
            while (s[j].key)
                j = (j + 1) & (cap - 1);
            s[j] = m->slots[i];
        }
    }
    free(m->slots);
    m->slots = s;
    m->mask = cap - 1;
    return TIDE_OK;
}

int tok_map_put(struct tok_map *m, const char *key, size_t len, int32_t val)
{
    if ((!m->slots || (m->n + 1) * 2 > m->mask + 1) && tok_map_grow(m) != TIDE_OK)
        return TIDE_E_NOMEM;
    uint32_t h = tok_hash(key, len);
    size_t j = h & m->mask;
    for (; m->slots[j].key; j = (j + 1) & m->mask) {
        struct tok_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len)) {
            s->val = val;
            return TIDE_OK;
        }
    }
    m->slots[j] = (struct tok_slot){key, (uint32_t)len, h, val};
    m->n++;
    return TIDE_OK;
}

int32_t tok_map_get(const struct tok_map *m, const char *key, size_t len)
{
    if (!m->slots)
        return -1;
    uint32_t h = tok_hash(key, len);
    for (size_t j = h & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
        const struct tok_slot *s = &m->slots[j];
        if (s->hash == h && s->len == len && !memcmp(s->key, key, len))
            return s->val;
    }
    return -1;
}

void tok_map_free(struct tok_map *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes stand for themselves, the
 * other 68 (0-32, 127-160, 173) for U+0100.. in byte order. */
static unsigned tok_byte_cp(uint8_t b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    if (b <= 32)
        return 256u + b;
    if (b <= 160)
        return 256u + 33u + (b - 127u);
    return 256u + 33u + 34u; /* 173 */
}

/* Inverse of tok_byte_cp; -1 for a code point outside the alphabet. */
static int tok_cp_byte(unsigned cp)
{
    if (cp < 256)
        return tok_byte_cp((uint8_t)cp) == cp ? (int)cp : -1;
    if (cp < 256 + 33)
        return (int)(cp - 256);
    if (cp < 256 + 33 + 34)
        return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 33 + 34)
        return 173;
    return -1;
}

int tok_byte_utf8(uint8_t b, char out[2])
{
    unsigned cp = tok_byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

size_t tok_utf8_char(const unsigned char *p, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return 0;
    size_t need = c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    if (need == 0 || n < need)
        return 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F; /* no surrogates */
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F; /* <= U+10FFFF */
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return need;
}

static unsigned tok_utf8_cp(const unsigned char *p, size_t len)
{
    if (len == 1)
        return p[0];
    unsigned cp = p[0] & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++)
        cp = (cp << 6) | (p[i] & 0x3Fu);
    return cp;
}

/* Unicode White_Space (what Rust's char::is_whitespace tests, for lstrip and
 * rstrip of added tokens). */
static bool tok_is_space(unsigned cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Length of the whitespace character ending at p[end] (exclusive), not before
 * p[lo]; 0 if none. */
static size_t tok_space_before(const unsigned char *p, size_t lo, size_t end)
{
    for (size_t k = 1; k <= 3 && k <= end - lo; k++) {
        if (tok_utf8_char(p + end - k, k) == k && tok_is_space(tok_utf8_cp(p + end - k, k)))
            return k;
    }
    return 0;
}

static size_t tok_space_at(const unsigned char *p, size_t n)
{
    size_t k = tok_utf8_char(p, n);
    return k && tok_is_space(tok_utf8_cp(p, k)) ? k : 0;
}

/* ---- regex -------------------------------------------------------------- */

int tok_compile(const char *pattern, size_t len, bool literal, const char *where, pcre2_code **out)
{
    int err;
    PCRE2_SIZE off;
    uint32_t flags = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, flags, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        tide_error("%s: cannot compile the pattern at offset %zu: %s", where, (size_t)off,
                   (const char *)msg);
        return TIDE_E_FORMAT;
    }
    /* Without JIT (e.g. not built in), PCRE2 interprets: slower, same results. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return TIDE_OK;
}

/* ---- splitting: added tokens, UTF-8 runs, pre-tokenizer steps ------------ */

struct split_ctx {
    const struct tide_tokenizer *t;
    tok_piece_fn fn;
    void *user;
    pcre2_match_data *md;
    pcre2_match_context *mctx; /* with a large JIT stack, made on first need */
    pcre2_jit_stack *jstack;
};

static int split_match(struct split_ctx *c, const pcre2_code *re, const char *p, size_t n,
                       size_t off, size_t *ms, size_t *me)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK, c->md, c->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !c->mctx) {
        /* Long runs can outgrow the default 32 KiB JIT stack: retry with 8 MiB. */
        c->mctx = pcre2_match_context_create(NULL);
        c->jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (!c->mctx || !c->jstack) {
            tide_error("tokenizer: out of memory for the regex stack");
            return TIDE_E_NOMEM;
        }
        pcre2_jit_stack_assign(c->mctx, NULL, c->jstack);
        rc = pcre2_match(re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK, c->md, c->mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH)
        return 1;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        tide_error("%s: pre-tokenizer regex failed on a %zu-byte piece: %s", c->t->path, n,
                   (const char *)msg);
        return TIDE_E_FORMAT;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0];
    *me = ov[1];
    return TIDE_OK;
}

static int split_steps(struct split_ctx *c, int k, const char *p, size_t n, bool prefixed)
{
    if (n == 0)
        return TIDE_OK;
    if (k == c->t->n_steps)
        return c->fn(c->user, p, n, -1);
    const struct tok_step *s = &c->t->steps[k];
    if (s->prefix_space && !prefixed && p[0] != ' ') {
        char *buf = malloc(n + 1);
        if (!buf)
            return TIDE_E_NOMEM;
        buf[0] = ' ';
        memcpy(buf + 1, p, n);
        int rc = split_steps(c, k, buf, n + 1, true);
        free(buf);
        return rc;
    }
    if (!s->re)
        return split_steps(c, k + 1, p, n, false);
    size_t prev = 0, off = 0;
    int rc;
    while (off < n) {
        size_t ms, me;
        if ((rc = split_match(c, s->re, p, n, off, &ms, &me)) == 1)
            break;
        if (rc != TIDE_OK)
            return rc;
        if (ms > prev && (rc = split_steps(c, k + 1, p + prev, ms - prev, false)) != TIDE_OK)
            return rc;
        if (me == ms) {
            /* An empty match cuts the text there and moves on one character. */
            size_t cl = tok_utf8_char((const unsigned char *)p + ms, n - ms);
            prev = ms;
            off = ms + (cl ? cl : 1);
            continue;
        }
        if ((rc = split_steps(c, k + 1, p + ms, me - ms, false)) != TIDE_OK)
            return rc;
        prev = off = me;
    }
    return split_steps(c, k + 1, p + prev, n - prev, false);
}

/* Valid UTF-8 runs go through the steps; each maximal run of bytes that are
 * not valid UTF-8 is one piece that skips them. */
static int split_utf8(struct split_ctx *c, const char *p, size_t n)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    int rc;
    while (i < n) {
        size_t v = i, cl;
        while (v < n && (cl = tok_utf8_char(u + v, n - v)) > 0)
            v += cl;
        if (v > i && (rc = split_steps(c, 0, p + i, v - i, false)) != TIDE_OK)
            return rc;
        size_t bad = v;
        while (bad < n && tok_utf8_char(u + bad, n - bad) == 0)
            bad++;
        if (bad > v && (rc = c->fn(c->user, p + v, bad - v, -1)) != TIDE_OK)
            return rc;
        i = bad;
    }
    return TIDE_OK;
}

/* Pass 0 cuts out added tokens with normalized == false, pass 1 those with
 * normalized == true from what is left (HuggingFace's order). */
static int split_added(struct split_ctx *c, int pass, const char *p, size_t n)
{
    if (pass == 2)
        return split_utf8(c, p, n);
    const struct tide_tokenizer *t = c->t;
    const unsigned char *u = (const unsigned char *)p;
    size_t start = 0, i = 0;
    int rc;
    while (i < n) {
        const int32_t *cand = t->first[pass][u[i]];
        const struct tok_added *hit = NULL;
        for (; cand && *cand >= 0; cand++) {
            const struct tok_added *a = &t->added[*cand];
            if (a->len <= n - i && !memcmp(p + i, a->content, a->len)) {
                hit = a;
                break;
            }
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t s = i, e = i + hit->len, k;
        if (hit->lstrip)
            while ((k = tok_space_before(u, start, s)) > 0)
                s -= k;
        if (hit->rstrip)
            while ((k = tok_space_at(u + e, n - e)) > 0)
                e += k;
        if ((rc = split_added(c, pass + 1, p + start, s - start)) != TIDE_OK ||
            (rc = c->fn(c->user, p + s, e - s, hit->id)) != TIDE_OK)
            return rc;
        start = i = e;
    }
    return split_added(c, pass + 1, p + start, n - start);
}

int tok_split(const struct tide_tokenizer *t, const char *text, size_t len, tok_piece_fn fn,
              void *user)
{
    struct split_ctx c = {t, fn, user, pcre2_match_data_create(1, NULL), NULL, NULL};
    if (!c.md) {
        tide_error("tokenizer: out of memory");
        return TIDE_E_NOMEM;
    }
    int rc = split_added(&c, 0, text, len);
    pcre2_match_data_free(c.md);
    pcre2_match_context_free(c.mctx);
    pcre2_jit_stack_free(c.jstack);
    return rc;
}

/* ---- added tokens ------------------------------------------------------- */

int tok_added_push(struct tide_tokenizer *t, const char *content, size_t len, int32_t id,
                   bool special, bool lstrip, bool rstrip, bool normalized)
{
    struct tok_added *a = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *a);
    if (!a)
        return TIDE_E_NOMEM;
    t->added = a;
    char *s = tok_strndup(content, len);
    if (!s)
        return TIDE_E_NOMEM;
    t->added[t->n_added++] = (struct tok_added){s, len, id, special, lstrip, rstrip, normalized};
    return TIDE_OK;
}

struct added_order {
    size_t len;
    int32_t idx;
};

static int added_cmp_len(const void *a, const void *b)
{
    const struct added_order *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->idx - y->idx;
}

int tok_added_index(struct tide_tokenizer *t)
{
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 256; b++) {
            free(t->first[p][b]);
            t->first[p][b] = NULL;
        }
    tok_map_free(&t->added_map);
    struct added_order *ord = malloc((size_t)(t->n_added + 1) * sizeof *ord);
    if (!ord)
        return TIDE_E_NOMEM;
    int counts[2][256] = {{0}};
    for (int i = 0; i < t->n_added; i++) {
        const struct tok_added *a = &t->added[i];
        ord[i] = (struct added_order){a->len, i};
        counts[a->normalized][(unsigned char)a->content[0]]++;
        if (tok_map_put(&t->added_map, a->content, a->len, a->id) != TIDE_OK) {
            free(ord);
            return TIDE_E_NOMEM;
        }
    }
    /* Longest first: the first candidate that matches is the longest. */
    qsort(ord, (size_t)t->n_added, sizeof *ord, added_cmp_len);
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 256; b++) {
            if (!counts[p][b])
                continue;
            int32_t *l = malloc((size_t)(counts[p][b] + 1) * sizeof *l);
            if (!l) {
                free(ord);
                return TIDE_E_NOMEM;
            }
            int k = 0;
            for (int i = 0; i < t->n_added; i++) {
                const struct tok_added *a = &t->added[ord[i].idx];
                if (a->normalized == p && (unsigned char)a->content[0] == b)
                    l[k++] = ord[i].idx;
            }
            l[k] = -1;
            t->first[p][b] = l;
        }
    free(ord);
    return TIDE_OK;
}

/* ---- free / lookups ----------------------------------------------------- */

void tide_tokenizer_free(struct tide_tokenizer *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_steps; i++)
        pcre2_code_free(t->steps[i].re);
    free(t->steps);
    for (int i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    for (int p = 0; p < 2; p++)
        for (int b = 0; b < 256; b++)
            free(t->first[p][b]);
    tok_map_free(&t->added_map);
    tok_map_free(&t->vocab);
    free(t->blob);
    free(t->piece_off);
    free(t->added_of);
    free(t->dec);
    free(t->dec_off);
    free(t->merges);
    free(t->path);
    free(t);
}

int32_t tide_tokenizer_size(const struct tide_tokenizer *t)
{
    return t->size;
}

int32_t tide_tokenizer_id(const struct tide_tokenizer *t, const char *token)
{
    if (!token)
        return -1;
    size_t n = strlen(token);
    int32_t id = tok_map_get(&t->added_map, token, n);
    return id >= 0 ? id : tok_map_get(&t->vocab, token, n);
}

const char *tide_tokenizer_piece(const struct tide_tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->size)
        return NULL;
    if (t->added_of[id] >= 0)
        return t->added[t->added_of[id]].content;
    return t->piece_off[id] == UINT32_MAX ? NULL : t->blob + t->piece_off[id];
}

bool tide_tokenizer_is_special(const struct tide_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->size && t->added_of[id] >= 0 && t->added[t->added_of[id]].special;
}

/* ---- merges table ------------------------------------------------------- */

static uint64_t tok_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static size_t merge_slot(const struct tide_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t j = tok_mix64(key) & t->merges_mask;
    while (t->merges[j].rank >= 0 && t->merges[j].key != key)
        j = (j + 1) & t->merges_mask;
    return j;
}

/* ---- encode ------------------------------------------------------------- */

struct bpe_item {
    int32_t rank;
    int32_t pos;
};

struct cache_ent {
    uint32_t hash;
    uint32_t key_len;
    size_t key_off;   /* into keys */
    size_t out_start; /* into ids */
    uint32_t out_count;
};

#define CACHE_MAX_KEY     256
#define CACHE_MAX_ENTRIES (1u << 20)

struct enc_ctx {
    const struct tide_tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    /* BPE scratch */
    int32_t *sym, *prv, *nxt; /* [sym_cap] */
    size_t sym_cap;
    struct bpe_item *heap;
    size_t heap_n, heap_cap;
    char *mapped; /* byte-level form of a piece, for ignore_merges */
    size_t mapped_cap;
    /* pieces seen in this call -> their ids in `ids` */
    struct cache_ent *ents;
    size_t n_ents, ents_cap;
    uint32_t *slots; /* [slot_mask + 1], entry index + 1, 0 when empty */
    size_t slot_mask;
    char *keys;
    size_t keys_n, keys_cap;
};

/* p grown (doubling) to hold need elements of elem bytes: the new pointer, or
 * NULL (logged) with p untouched. */
static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) {
        tide_error("tokenizer: out of memory (%zu bytes)", c * elem);
        return NULL;
    }
    *cap = c;
    return q;
}

/* Room for need ids. */
static int enc_reserve(struct enc_ctx *e, size_t need)
{
    int32_t *q = grow(e->ids, &e->cap, need, sizeof *q);
    if (!q)
        return TIDE_E_NOMEM;
    e->ids = q;
    return TIDE_OK;
}

static int enc_push(struct enc_ctx *e, int32_t id)
{
    if (e->n == e->cap && enc_reserve(e, e->n + 1) != TIDE_OK)
        return TIDE_E_NOMEM;
    e->ids[e->n++] = id;
    return TIDE_OK;
}

static bool item_less(struct bpe_item a, struct bpe_item b)
{
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static int heap_push(struct enc_ctx *e, int32_t rank, int32_t pos)
{
    struct bpe_item *q = grow(e->heap, &e->heap_cap, e->heap_n + 1, sizeof *q);
    if (!q)
        return TIDE_E_NOMEM;
    e->heap = q;
    size_t i = e->heap_n++;
    struct bpe_item it = {rank, pos};
    while (i > 0 && item_less(it, e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = it;
    return TIDE_OK;
}

static struct bpe_item heap_pop(struct enc_ctx *e)
{
    struct bpe_item top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && item_less(e->heap[c + 1], e->heap[c]))
            c++;
        if (!item_less(e->heap[c], last))
            break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n)
        e->heap[i] = last;
    return top;
}

/* Queue the pair starting at symbol pos when it has a merge. */
static int bpe_queue(struct enc_ctx *e, int32_t pos)
{
    const struct tide_tokenizer *t = e->t;
    int32_t nx = pos < 0 ? -1 : e->nxt[pos];
    if (nx < 0)
        return TIDE_OK;
    size_t j = merge_slot(t, e->sym[pos], e->sym[nx]);
    return t->merges[j].rank < 0 ? TIDE_OK : heap_push(e, t->merges[j].rank, pos);
}

/* Byte-level BPE of one piece: lowest merge rank first, leftmost among equals
 * (HuggingFace's order), with a heap so long pieces stay O(n log n). */
static int bpe_piece(struct enc_ctx *e, const unsigned char *p, size_t n)
{
    const struct tide_tokenizer *t = e->t;
    if (n > INT32_MAX / 4) {
        tide_error("tokenizer: a %zu-byte piece is too long", n);
        return TIDE_E_RANGE;
    }
    if (t->ignore_merges) {
        char *q = grow(e->mapped, &e->mapped_cap, 2 * n, 1);
        if (!q)
            return TIDE_E_NOMEM;
        e->mapped = q;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += (size_t)tok_byte_utf8(p[i], e->mapped + m);
        int32_t id = tok_map_get(&t->vocab, e->mapped, m);
        if (id >= 0)
            return enc_push(e, id);
    }
    if (n > e->sym_cap) {
        size_t c = e->sym_cap ? e->sym_cap : 64;
        while (c < n)
            c *= 2;
        int32_t **arr[3] = {&e->sym, &e->prv, &e->nxt};
        for (int k = 0; k < 3; k++) {
            int32_t *q = realloc(*arr[k], c * sizeof *q);
            if (!q) {
                tide_error("tokenizer: out of memory");
                return TIDE_E_NOMEM;
            }
            *arr[k] = q;
        }
        e->sym_cap = c;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[p[i]];
        if (id < 0)
            id = t->unk_id;
        if (id < 0) {
            tide_error("%s: the vocabulary has no token for byte 0x%02x, and no unk_token", t->path,
                       p[i]);
            return TIDE_E_FORMAT;
        }
        e->sym[i] = id;
        e->prv[i] = (int32_t)i - 1;
        e->nxt[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    e->heap_n = 0;
    int rc;
    for (size_t i = 0; i + 1 < n; i++)
        if ((rc = bpe_queue(e, (int32_t)i)) != TIDE_OK)
            return rc;
    while (e->heap_n) {
        struct bpe_item it = heap_pop(e);
        int32_t pos = it.pos, nx = e->nxt[pos];
        if (e->sym[pos] < 0 || nx < 0)
            continue;
        size_t j = merge_slot(t, e->sym[pos], e->sym[nx]);
        if (t->merges[j].rank != it.rank)
            continue; /* stale: a neighbour changed since it was queued */
        e->sym[pos] = t->merges[j].id;
        e->sym[nx] = -1;
        e->nxt[pos] = e->nxt[nx];
        if (e->nxt[nx] >= 0)
            e->prv[e->nxt[nx]] = pos;
        if ((rc = bpe_queue(e, e->prv[pos])) != TIDE_OK || (rc = bpe_queue(e, pos)) != TIDE_OK)
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = e->nxt[i])
        if ((rc = enc_push(e, e->sym[i])) != TIDE_OK)
            return rc;
    return TIDE_OK;
}

static int cache_grow(struct enc_ctx *e)
{
    size_t cap = e->slots ? (e->slot_mask + 1) * 2 : 1024;
    uint32_t *s = calloc(cap, sizeof *s);
    if (!s) {
        tide_error("tokenizer: out of memory");
        return TIDE_E_NOMEM;
    }
    for (size_t i = 0; i < e->n_ents; i++) {
        size_t j = e->ents[i].hash & (cap - 1);
        while (s[j])
            j = (j + 1) & (cap - 1);
        s[j] = (uint32_t)i + 1;
    }
    free(e->slots);
    e->slots = s;
    e->slot_mask = cap - 1;
    return TIDE_OK;
}

static int enc_piece(void *user, const char *p, size_t n, int32_t added_id)
{
    struct enc_ctx *e = user;
    if (added_id >= 0)
        return enc_push(e, added_id);
    if (n > CACHE_MAX_KEY)
        return bpe_piece(e, (const unsigned char *)p, n);
    if (!e->slots && cache_grow(e) != TIDE_OK)
        return TIDE_E_NOMEM;
    uint32_t h = tok_hash(p, n);
    size_t j = h & e->slot_mask;
    for (; e->slots[j]; j = (j + 1) & e->slot_mask) {
        const struct cache_ent *c = &e->ents[e->slots[j] - 1];
        if (c->hash == h && c->key_len == n && !memcmp(e->keys + c->key_off, p, n)) {
            if (enc_reserve(e, e->n + c->out_count) != TIDE_OK)
                return TIDE_E_NOMEM;
            memcpy(e->ids + e->n, e->ids + c->out_start, c->out_count * sizeof *e->ids);
            e->n += c->out_count;
            return TIDE_OK;
        }
    }
    size_t start = e->n;
    int rc = bpe_piece(e, (const unsigned char *)p, n);
    if (rc != TIDE_OK || e->n_ents >= CACHE_MAX_ENTRIES)
        return rc;
    struct cache_ent *ents = grow(e->ents, &e->ents_cap, e->n_ents + 1, sizeof *ents);
    if (ents)
        e->ents = ents;
    char *keys = ents ? grow(e->keys, &e->keys_cap, e->keys_n + n, 1) : NULL;
    if (!keys)
        return TIDE_E_NOMEM;
    e->keys = keys;
    memcpy(e->keys + e->keys_n, p, n);
    e->ents[e->n_ents] =
        (struct cache_ent){h, (uint32_t)n, e->keys_n, start, (uint32_t)(e->n - start)};
    e->keys_n += n;
    e->slots[j] = (uint32_t)++e->n_ents;
    if (e->n_ents * 2 > e->slot_mask + 1)
        return cache_grow(e);
    return TIDE_OK;
}

int tide_tokenizer_encode(const struct tide_tokenizer *t, const char *text, size_t len,
                          int32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    struct enc_ctx e = {.t = t};
    int rc = enc_reserve(&e, len / 3 + 16);
    if (rc == TIDE_OK)
        rc = tok_split(t, text, len, enc_piece, &e);
    free(e.sym);
    free(e.prv);
    free(e.nxt);
    free(e.heap);
    free(e.mapped);
    free(e.ents);
    free(e.slots);
    free(e.keys);
    if (rc != TIDE_OK) {
        free(e.ids);
        return rc;
    }
    *ids = e.ids;
    *n = e.n;
    return TIDE_OK;
}

/* ---- decode ------------------------------------------------------------- */

int tide_tokenizer_decode(const struct tide_tokenizer *t, const int32_t *ids, size_t n, char **text,
                          size_t *len)
{
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->size || (t->added_of[id] < 0 && t->piece_off[id] == UINT32_MAX)) {
            tide_error("%s: token id %d at position %zu has no token (vocabulary size %d)", t->path,
                       id, i, t->size);
            return TIDE_E_RANGE;
        }
        total += t->dec_off[id + 1] - t->dec_off[id];
    }
    char *s = malloc(total + 1);
    if (!s) {
        tide_error("tokenizer: out of memory (%zu bytes)", total + 1);
        return TIDE_E_NOMEM;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = t->dec_off[ids[i]], b = t->dec_off[ids[i] + 1];
        memcpy(s + o, t->dec + a, b - a);
        o += b - a;
    }
    s[o] = 0;
    *text = s;
    *len = o;
    return TIDE_OK;
}

/* ---- load --------------------------------------------------------------- */

struct load_ctx {
    const char *path;
    struct tide_tokenizer *t;
    bool byte_level; /* a ByteLevel pre-tokenizer was seen */
};

static int bad_type(const struct load_ctx *L, const char *where, const char *want, const json_t *v)
{
    tide_error("%s: %s: expected %s, got %s", L->path, where, want, tide_json_kind(v));
    return TIDE_E_FORMAT;
}

/* A boolean member: absent or null gives def. */
static int get_bool(const struct load_ctx *L, const json_t *obj, const char *key, const char *where,
                    bool def, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return TIDE_OK;
    }
    if (!json_is_boolean(v)) {
        char w[256];
        snprintf(w, sizeof w, "%s.%s", where, key);
        return bad_type(L, w, "true or false", v);
    }
    *out = json_is_true(v);
    return TIDE_OK;
}

/* The "type" string of a component object. */
static int get_type(const struct load_ctx *L, const json_t *v, const char *where, const char **type)
{
    if (!json_is_object(v))
        return bad_type(L, where, "an object", v);
    json_t *ty = json_object_get(v, "type");
    if (!json_is_string(ty)) {
        char w[256];
        snprintf(w, sizeof w, "%s.type", where);
        return bad_type(L, w, "a string", ty);
    }
    *type = json_string_value(ty);
    return TIDE_OK;
}

static int push_step(struct load_ctx *L, pcre2_code *re, bool prefix_space)
{
    struct tide_tokenizer *t = L->t;
    struct tok_step *s = realloc(t->steps, (size_t)(t->n_steps + 1) * sizeof *s);
    if (!s) {
        pcre2_code_free(re);
        tide_error("%s: out of memory", L->path);
        return TIDE_E_NOMEM;
    }
    t->steps = s;
    t->steps[t->n_steps++] = (struct tok_step){re, prefix_space};
    return TIDE_OK;
}

static int load_split(struct load_ctx *L, const json_t *v, const char *where)
{
    char w[320];
    snprintf(w, sizeof w, "%s.pattern", where);
    json_t *pat = json_object_get(v, "pattern");
    if (!json_is_object(pat))
        return bad_type(L, w, "an object {\"Regex\": ...} or {\"String\": ...}", pat);
    json_t *rx = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
    json_t *src = rx ? rx : str;
    if (!src || (rx && str) || json_object_size(pat) != 1) {
        tide_error("%s: %s: expected exactly one of \"Regex\" or \"String\"", L->path, w);
        return TIDE_E_FORMAT;
    }
    snprintf(w, sizeof w, "%s.pattern.%s", where, rx ? "Regex" : "String");
    if (!json_is_string(src))
        return bad_type(L, w, "a string", src);
    json_t *beh = json_object_get(v, "behavior");
    if (!json_is_string(beh) || strcmp(json_string_value(beh), "Isolated")) {
        char w2[320];
        snprintf(w2, sizeof w2, "%s.behavior", where);
        if (!json_is_string(beh))
            return bad_type(L, w2, "a string", beh);
        tide_error("%s: %s \"%s\" is not supported (only \"Isolated\")", L->path, w2,
                   json_string_value(beh));
        return TIDE_E_FORMAT;
    }
    bool invert;
    int rc = get_bool(L, v, "invert", where, false, &invert);
    if (rc != TIDE_OK)
        return rc;
    if (invert) {
        tide_error("%s: %s.invert true is not supported", L->path, where);
        return TIDE_E_FORMAT;
    }
    char w2[400];
    snprintf(w2, sizeof w2, "%s: %s", L->path, w);
    pcre2_code *re;
    if ((rc = tok_compile(json_string_value(src), json_string_length(src), !rx, w2, &re)) !=
        TIDE_OK)
        return rc;
    return push_step(L, re, false);
}

static int load_pretok(struct load_ctx *L, const json_t *v, const char *where, int depth)
{
    const char *type;
    int rc = get_type(L, v, where, &type);
    if (rc != TIDE_OK)
        return rc;
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(v, "pretokenizers");
        char w[320];
        snprintf(w, sizeof w, "%s.pretokenizers", where);
        if (!json_is_array(list))
            return bad_type(L, w, "an array", list);
        if (depth > 8) {
            tide_error("%s: %s: Sequence nested too deeply", L->path, w);
            return TIDE_E_FORMAT;
        }
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(w, sizeof w, "%s.pretokenizers[%zu]", where, i);
            if ((rc = load_pretok(L, json_array_get(list, i), w, depth + 1)) != TIDE_OK)
                return rc;
        }
        return TIDE_OK;
    }
    if (!strcmp(type, "Split"))
        return load_split(L, v, where);
    if (!strcmp(type, "ByteLevel")) {
        bool prefix, use_regex;
        /* HuggingFace's defaults when the keys are missing. */
        if ((rc = get_bool(L, v, "add_prefix_space", where, true, &prefix)) != TIDE_OK ||
            (rc = get_bool(L, v, "use_regex", where, true, &use_regex)) != TIDE_OK)
            return rc;
        L->byte_level = true;
        pcre2_code *re = NULL;
        if (use_regex && (rc = tok_compile(tok_gpt2_regex, sizeof tok_gpt2_regex - 1, false,
                                           "GPT-2 regex", &re)) != TIDE_OK)
            return rc;
        return re || prefix ? push_step(L, re, prefix) : TIDE_OK;
    }
    tide_error("%s: %s.type \"%s\" is not supported (supported: Sequence, Split, ByteLevel)",
               L->path, where, type);
    return TIDE_E_FORMAT;
}

/* normalizer, decoder and post_processor: only what does not change ids. */
static int load_others(struct load_ctx *L, const json_t *root)
{
    const char *type;
    int rc;
    json_t *v = json_object_get(root, "normalizer");
    if (v && !json_is_null(v)) {
        if ((rc = get_type(L, v, "normalizer", &type)) != TIDE_OK)
            return rc;
        json_t *list = json_object_get(v, "normalizers");
        if (strcmp(type, "Sequence") || !json_is_array(list) || json_array_size(list)) {
            tide_error("%s: normalizer.type \"%s\" is not supported (only null)", L->path, type);
            return TIDE_E_FORMAT;
        }
    }
    v = json_object_get(root, "decoder");
    if (v && !json_is_null(v)) {
        if ((rc = get_type(L, v, "decoder", &type)) != TIDE_OK)
            return rc;
        if (strcmp(type, "ByteLevel")) {
            tide_error("%s: decoder.type \"%s\" is not supported (only ByteLevel or null)", L->path,
                       type);
            return TIDE_E_FORMAT;
        }
    }
    v = json_object_get(root, "post_processor");
    if (v && !json_is_null(v)) {
        if ((rc = get_type(L, v, "post_processor", &type)) != TIDE_OK)
            return rc;
        if (strcmp(type, "ByteLevel"))
            tide_info("%s: post_processor \"%s\" is not applied: encoding adds no special "
                      "tokens",
                      L->path, type);
    }
    return TIDE_OK;
}

static int load_added(struct load_ctx *L, const json_t *root)
{
    json_t *list = json_object_get(root, "added_tokens");
    if (!list || json_is_null(list))
        return TIDE_OK;
    if (!json_is_array(list))
        return bad_type(L, "added_tokens", "an array", list);
    struct tide_tokenizer *t = L->t;
    int32_t max_added = -1;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *a = json_array_get(list, i);
        char w[64], w2[96];
        snprintf(w, sizeof w, "added_tokens[%zu]", i);
        if (!json_is_object(a))
            return bad_type(L, w, "an object", a);
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        snprintf(w2, sizeof w2, "%s.id", w);
        if (!json_is_integer(id))
            return bad_type(L, w2, "an integer", id);
        if (json_integer_value(id) < 0 || json_integer_value(id) > TOK_MAX_ID) {
            tide_error("%s: %s %lld is out of range [0, %d]", L->path, w2,
                       (long long)json_integer_value(id), TOK_MAX_ID);
            return TIDE_E_FORMAT;
        }
        snprintf(w2, sizeof w2, "%s.content", w);
        if (!json_is_string(content))
            return bad_type(L, w2, "a string", content);
        if (json_string_length(content) == 0) {
            tide_error("%s: %s is empty", L->path, w2);
            return TIDE_E_FORMAT;
        }
        bool special, lstrip, rstrip, single, normalized;
        int rc;
        if ((rc = get_bool(L, a, "special", w, false, &special)) != TIDE_OK ||
            (rc = get_bool(L, a, "lstrip", w, false, &lstrip)) != TIDE_OK ||
            (rc = get_bool(L, a, "rstrip", w, false, &rstrip)) != TIDE_OK ||
            (rc = get_bool(L, a, "single_word", w, false, &single)) != TIDE_OK ||
            (rc = get_bool(L, a, "normalized", w, !special, &normalized)) != TIDE_OK)
            return rc;
        if (single) {
            tide_error("%s: %s.single_word true is not supported", L->path, w);
            return TIDE_E_FORMAT;
        }
        const char *c = json_string_value(content);
        size_t clen = json_string_length(content);
        for (int k = 0; k < t->n_added; k++) {
            const struct tok_added *o = &t->added[k];
            if (o->len == clen && !memcmp(o->content, c, clen)) {
                tide_error("%s: %s repeats the content \"%s\" of an earlier added token", L->path,
                           w, c);
                return TIDE_E_FORMAT;
            }
        }
        /* The id HuggingFace tokenizers gives it (AddedVocabulary::add_tokens):
         * the vocab's id when the vocab has the content, else the next id after
         * the vocab's entry count or the largest added id so far. The file's id
         * is only checked against that; models were run with HF's ids. */
        int32_t file_id = (int32_t)json_integer_value(id), n_vocab = (int32_t)t->vocab.n;
        int32_t vid = tok_map_get(&t->vocab, c, clen), idv = vid;
        if (vid < 0)
            idv = t->n_added == 0 || (max_added < n_vocab && n_vocab > 0) ? n_vocab : max_added + 1;
        if (idv != file_id)
            tide_warn("%s: %s \"%s\" has id %d in the file, but HuggingFace tokenizers "
                      "gives it %d (%s); using %d",
                      L->path, w, c, file_id, idv,
                      vid >= 0 ? "its id in model.vocab" : "the next id after the vocab", idv);
        if (idv > max_added)
            max_added = idv;
        if (tok_added_push(t, c, clen, idv, special, lstrip, rstrip, normalized) != TIDE_OK) {
            tide_error("%s: out of memory", L->path);
            return TIDE_E_NOMEM;
        }
    }
    if (tok_added_index(t) != TIDE_OK) {
        tide_error("%s: out of memory", L->path);
        return TIDE_E_NOMEM;
    }
    return TIDE_OK;
}

/* model.vocab into the blob and the vocab map. */
static int load_vocab(struct load_ctx *L, const json_t *vocab, int32_t *max_id)
{
    struct tide_tokenizer *t = L->t;
    if (!json_is_object(vocab))
        return bad_type(L, "model.vocab", "an object {piece: id}", vocab);
    size_t total = 0;
    const char *key;
    json_t *val;
    *max_id = -1;
    json_object_foreach((json_t *)vocab, key, val)
    {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) > TOK_MAX_ID) {
            char w[160];
            snprintf(w, sizeof w, "model.vocab[\"%.100s\"]", key);
            if (!json_is_integer(val))
                return bad_type(L, w, "an integer id", val);
            tide_error("%s: %s: id %lld is out of range [0, %d]", L->path, w,
                       (long long)json_integer_value(val), TOK_MAX_ID);
            return TIDE_E_FORMAT;
        }
        if (json_integer_value(val) > *max_id)
            *max_id = (int32_t)json_integer_value(val);
        total += strlen(key) + 1;
    }
    if (total > UINT32_MAX) {
        tide_error("%s: model.vocab is too large", L->path);
        return TIDE_E_FORMAT;
    }
    t->blob = malloc(total ? total : 1);
    if (!t->blob) {
        tide_error("%s: out of memory", L->path);
        return TIDE_E_NOMEM;
    }
    size_t o = 0;
    json_object_foreach((json_t *)vocab, key, val)
    {
        size_t kl = strlen(key);
        memcpy(t->blob + o, key, kl + 1);
        if (tok_map_put(&t->vocab, t->blob + o, kl, (int32_t)json_integer_value(val)) != TIDE_OK) {
            tide_error("%s: out of memory", L->path);
            return TIDE_E_NOMEM;
        }
        o += kl + 1;
    }
    return TIDE_OK;
}

/* One merge: "a b" or ["a", "b"] -> the two pieces. */
static int merge_parts(const struct load_ctx *L, const json_t *m, const char *where, const char **a,
                       size_t *al, const char **b, size_t *bl)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1]) {
            tide_error("%s: %s \"%s\": expected two pieces separated by one space", L->path, where,
                       s);
            return TIDE_E_FORMAT;
        }
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = strlen(sp + 1);
        return TIDE_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *al = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bl = json_string_length(json_array_get(m, 1));
        return TIDE_OK;
    }
    return bad_type(L, where, "\"a b\" or [\"a\", \"b\"]", m);
}

static int load_merges(struct load_ctx *L, const json_t *merges)
{
    struct tide_tokenizer *t = L->t;
    if (!merges || json_is_null(merges))
        merges = NULL;
    else if (!json_is_array(merges))
        return bad_type(L, "model.merges", "an array", merges);
    size_t n = merges ? json_array_size(merges) : 0;
    if (n > (size_t)INT32_MAX / 4) {
        tide_error("%s: model.merges has too many entries (%zu)", L->path, n);
        return TIDE_E_FORMAT;
    }
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    t->merges = malloc(cap * sizeof *t->merges);
    char *buf = NULL;
    size_t buf_cap = 0;
    if (!t->merges) {
        tide_error("%s: out of memory", L->path);
        return TIDE_E_NOMEM;
    }
    t->merges_mask = cap - 1;
    for (size_t i = 0; i < cap; i++)
        t->merges[i].rank = -1;
    int rc = TIDE_OK;
    for (size_t i = 0; i < n && rc == TIDE_OK; i++) {
        char w[64];
        snprintf(w, sizeof w, "model.merges[%zu]", i);
        const char *a = NULL, *b = NULL;
        size_t al = 0, bl = 0;
        if ((rc = merge_parts(L, json_array_get(merges, i), w, &a, &al, &b, &bl)) != TIDE_OK)
            break;
        int32_t ia = tok_map_get(&t->vocab, a, al), ib = tok_map_get(&t->vocab, b, bl);
        if (ia < 0 || ib < 0) {
            tide_error("%s: %s: piece \"%.*s\" is not in model.vocab", L->path, w,
                       (int)(ia < 0 ? al : bl), ia < 0 ? a : b);
            rc = TIDE_E_FORMAT;
            break;
        }
        if (buf_cap < al + bl) {
            free(buf);
            buf_cap = 2 * (al + bl);
            if (!(buf = malloc(buf_cap))) {
                tide_error("%s: out of memory", L->path);
                rc = TIDE_E_NOMEM;
                break;
            }
        }
        memcpy(buf, a, al);
        memcpy(buf + al, b, bl);
        int32_t id = tok_map_get(&t->vocab, buf, al + bl);
        if (id < 0) {
            tide_error("%s: %s: the merged piece \"%.*s\" is not in model.vocab", L->path, w,
                       (int)(al + bl), buf);
            rc = TIDE_E_FORMAT;
            break;
        }
        /* A repeated pair keeps its last rank, as HuggingFace does. */
        size_t j = merge_slot(t, ia, ib);
        t->merges[j].key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        t->merges[j].rank = (int32_t)i;
        t->merges[j].id = id;
    }
    free(buf);
    return rc;
}

static int load_model(struct load_ctx *L, const json_t *model, int32_t *max_id)
{
    struct tide_tokenizer *t = L->t;
    const char *type = NULL;
    if (!json_is_object(model))
        return bad_type(L, "model", "an object", model);
    json_t *ty = json_object_get(model, "type");
    if (ty && !json_is_string(ty))
        return bad_type(L, "model.type", "a string", ty);
    type = ty ? json_string_value(ty) : "BPE"; /* old files leave it out */
    if (strcmp(type, "BPE")) {
        tide_error("%s: model.type \"%s\" is not supported (only BPE)", L->path, type);
        return TIDE_E_FORMAT;
    }
    bool byte_fallback;
    int rc;
    if ((rc = get_bool(L, model, "byte_fallback", "model", false, &byte_fallback)) != TIDE_OK ||
        (rc = get_bool(L, model, "ignore_merges", "model", false, &t->ignore_merges)) != TIDE_OK)
        return rc;
    if (byte_fallback) {
        tide_error("%s: model.byte_fallback true is not supported (only byte-level BPE)", L->path);
        return TIDE_E_FORMAT;
    }
    json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0)) {
        tide_error("%s: model.dropout must be null (BPE dropout is not supported)", L->path);
        return TIDE_E_FORMAT;
    }
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0)) {
            tide_error("%s: model.%s must be null for byte-level BPE", L->path, affixes[i]);
            return TIDE_E_FORMAT;
        }
    }
    if ((rc = load_vocab(L, json_object_get(model, "vocab"), max_id)) != TIDE_OK ||
        (rc = load_merges(L, json_object_get(model, "merges"))) != TIDE_OK)
        return rc;
    t->unk_id = -1;
    v = json_object_get(model, "unk_token");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad_type(L, "model.unk_token", "a string or null", v);
        t->unk_id = tok_map_get(&t->vocab, json_string_value(v), json_string_length(v));
        if (t->unk_id < 0) {
            tide_error("%s: model.unk_token \"%s\" is not in model.vocab", L->path,
                       json_string_value(v));
            return TIDE_E_FORMAT;
        }
    }
    for (int b = 0; b < 256; b++) {
        char u[2];
        int k = tok_byte_utf8((uint8_t)b, u);
        t->byte_id[b] = tok_map_get(&t->vocab, u, (size_t)k);
    }
    return TIDE_OK;
}

/* Bytes of a vocab piece: each character back through the byte alphabet, or
 * the piece's own UTF-8 when a character is outside it (as HuggingFace). */
static size_t decode_piece(const char *piece, char *out)
{
    const unsigned char *u = (const unsigned char *)piece;
    size_t n = strlen(piece), o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = tok_utf8_char(u + i, n - i);
        int b = k ? tok_cp_byte(tok_utf8_cp(u + i, k)) : -1;
        if (b < 0) {
            memcpy(out, piece, n);
            return n;
        }
        out[o++] = (char)b;
        i += k;
    }
    return o;
}

/* Per-id tables once vocab and added tokens are known. */
static int load_index(struct load_ctx *L, int32_t max_id)
{
    struct tide_tokenizer *t = L->t;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id > max_id)
            max_id = t->added[i].id;
    t->size = max_id + 1;
    size_t sz = (size_t)t->size;
    t->piece_off = malloc((sz ? sz : 1) * sizeof *t->piece_off);
    t->added_of = malloc((sz ? sz : 1) * sizeof *t->added_of);
    t->dec_off = malloc((sz + 1) * sizeof *t->dec_off);
    size_t total = 0;
    for (size_t i = 0; t->vocab.slots && i <= t->vocab.mask; i++)
        total += t->vocab.slots[i].key ? t->vocab.slots[i].len : 0;
    for (int i = 0; i < t->n_added; i++)
        total += t->added[i].len;
    t->dec = malloc(total ? total : 1);
    if (!t->piece_off || !t->added_of || !t->dec_off || !t->dec || total > UINT32_MAX) {
        tide_error("%s: out of memory", L->path);
        return TIDE_E_NOMEM;
    }
    for (size_t i = 0; i < sz; i++) {
        t->piece_off[i] = UINT32_MAX;
        t->added_of[i] = -1;
    }
    for (size_t i = 0; t->vocab.slots && i <= t->vocab.mask; i++) {
        const struct tok_slot *s = &t->vocab.slots[i];
        if (!s->key)
            continue;
        if (t->piece_off[s->val] != UINT32_MAX) {
            tide_error("%s: model.vocab: pieces \"%s\" and \"%s\" share id %d", L->path,
                       t->blob + t->piece_off[s->val], s->key, s->val);
            return TIDE_E_FORMAT;
        }
        t->piece_off[s->val] = (uint32_t)(s->key - t->blob);
    }
    for (int i = 0; i < t->n_added; i++)
        t->added_of[t->added[i].id] = i;
    size_t o = 0;
    for (size_t id = 0; id < sz; id++) {
        t->dec_off[id] = (uint32_t)o;
        if (t->added_of[id] >= 0) {
            const struct tok_added *a = &t->added[t->added_of[id]];
            memcpy(t->dec + o, a->content, a->len);
            o += a->len;
        } else if (t->piece_off[id] != UINT32_MAX) {
            o += decode_piece(t->blob + t->piece_off[id], t->dec + o);
        }
    }
    t->dec_off[sz] = (uint32_t)o;
    return TIDE_OK;
}

int tide_tokenizer_load(const char *path, struct tide_tokenizer **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        /* A FIFO would block the read below; a folder reads as bad JSON. */
        tide_error("%s: not a regular file", path);
        return TIDE_E_FORMAT;
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_cannot_open_file) {
            int err = errno;
            tide_error("%s: cannot open: %s", path, strerror(err));
            return err == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_IO;
        }
        tide_error("%s:%d:%d: not valid JSON: %s", path, je.line, je.column, je.text);
        return TIDE_E_FORMAT;
    }
    struct tide_tokenizer *t = calloc(1, sizeof *t);
    int rc = TIDE_E_NOMEM;
    if (!t || !(t->path = tok_strndup(path, strlen(path)))) {
        tide_error("%s: out of memory", path);
        goto done;
    }
    struct load_ctx L = {path, t, false};
    int32_t max_id = -1;
    if (!json_is_object(root)) {
        rc = bad_type(&L, "top level", "an object", root);
        goto done;
    }
    if ((rc = load_model(&L, json_object_get(root, "model"), &max_id)) != TIDE_OK ||
        (rc = load_added(&L, root)) != TIDE_OK || (rc = load_others(&L, root)) != TIDE_OK)
        goto done;
    json_t *pt = json_object_get(root, "pre_tokenizer");
    if (pt && !json_is_null(pt) && (rc = load_pretok(&L, pt, "pre_tokenizer", 0)) != TIDE_OK)
        goto done;
    if (!L.byte_level) {
        tide_error("%s: pre_tokenizer has no ByteLevel step: only byte-level BPE is supported",
                   path);
        rc = TIDE_E_FORMAT;
        goto done;
    }
    if ((rc = load_index(&L, max_id)) != TIDE_OK)
        goto done;
    if (t->size == 0) {
        tide_error("%s: the vocabulary is empty", path);
        rc = TIDE_E_FORMAT;
        goto done;
    }
    tide_debug("%s: %d ids, %zu vocab pieces, %d added tokens, %d pre-tokenizer steps", path,
               t->size, t->vocab.n, t->n_added, t->n_steps);
    *out = t;
    t = NULL;
    rc = TIDE_OK;
done:
    tide_tokenizer_free(t);
    json_decref(root);
    return rc;
}
