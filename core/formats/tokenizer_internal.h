/* Tokenizer internals shared by tokenizer.c (load, encode, decode) and
 * tokenizer_train.c (BPE trainer). Core-internal. */
#ifndef TIDE_TOKENIZER_INTERNAL_H
#define TIDE_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/tokenizer.h"

/* Ids above this are refused at load (LLaDA2 uses 157184). */
#define TOK_MAX_ID ((1 << 24) - 1)

/* The LLaDA2.0 pre-tokenizer regex (HuggingFace form, possessive quantifiers). */
extern const char tok_llada2_regex[];

/* String -> int32 map over keys stored elsewhere (open addressing). */
struct tok_slot {
    const char *key; /* not owned; NULL when the slot is empty */
    uint32_t len;    /* bytes */
    uint32_t hash;
    int32_t val;
};

struct tok_map {
    struct tok_slot *slots; /* [mask + 1] */
    size_t mask;
    size_t n;
};

uint32_t tok_hash(const void *p, size_t n);
/* Insert or overwrite key -> val. The key bytes must outlive the map. */
int tok_map_put(struct tok_map *m, const char *key, size_t len, int32_t val);
/* The value of key, or -1. */
int32_t tok_map_get(const struct tok_map *m, const char *key, size_t len);
void tok_map_free(struct tok_map *m);

/* One pre-tokenizer step. A step with a regex splits each piece (behaviour
 * Isolated); prefix_space prepends ' ' to each piece that lacks one first. */
struct tok_step {
    pcre2_code *re; /* NULL: no split */
    bool prefix_space;
};

struct tok_added {
    char *content;
    size_t len; /* bytes */
    int32_t id;
    bool special;
    bool lstrip, rstrip;
    bool normalized; /* matched in the second pass, after normalized == false */
};

struct tide_tokenizer {
    char *path;

    /* pre-tokenizer */
    struct tok_step *steps; /* [n_steps] */
    int n_steps;

    /* added tokens, and per first byte the indices of those starting with it,
     * longest first, per pass (0: normalized false, 1: normalized true) */
    struct tok_added *added; /* [n_added] */
    int n_added;
    int32_t *first[2][256];   /* [count] indices into added, -1 terminated; NULL when none */
    struct tok_map added_map; /* content -> id */

    /* vocab: pieces (byte-level form, NUL-terminated) in one blob */
    char *blob;
    uint32_t *piece_off;  /* [size] offset into blob, UINT32_MAX when no vocab piece */
    struct tok_map vocab; /* piece -> id */
    int32_t size;         /* max id + 1 */
    int32_t *added_of;    /* [size] index into added, -1 if none */

    /* decoded bytes per id */
    char *dec;
    uint32_t *dec_off; /* [size + 1]; id's bytes are dec[dec_off[id]..dec_off[id + 1]) */

    /* BPE */
    int32_t byte_id[256]; /* id of the byte-level symbol of each byte, -1 if absent */
    int32_t unk_id;       /* -1 if none */
    bool ignore_merges;
    struct {
        uint64_t key; /* left << 32 | right; 0 with rank < 0 when empty */
        int32_t rank; /* -1: empty slot */
        int32_t id;   /* merged token */
    } * merges;
    size_t merges_mask;
};

/* Receives each piece of text: an added token (added_id >= 0, p/n its text) or
 * a piece for BPE (added_id == -1). Returns TIDE_OK or a status to stop. */
typedef int (*tok_piece_fn)(void *user, const char *p, size_t n, int32_t added_id);

/* Cut text into added tokens and pre-tokenized pieces, in order. Uses only
 * t->steps and the added-token tables. Returns TIDE_OK or the first status
 * fn returned (or a PCRE2 failure, logged). */
int tok_split(const struct tide_tokenizer *t, const char *text, size_t len, tok_piece_fn fn,
              void *user);

/* Compile a pattern (UTF, UCP, JIT when available). `literal` for a plain
 * string. `where` names the file and key for the error message. */
int tok_compile(const char *pattern, size_t len, bool literal, const char *where, pcre2_code **out);

/* Add an added token to t (content copied). Rebuild the tables with
 * tok_added_index() after the last one. */
int tok_added_push(struct tide_tokenizer *t, const char *content, size_t len, int32_t id,
                   bool special, bool lstrip, bool rstrip, bool normalized);
int tok_added_index(struct tide_tokenizer *t);

/* The GPT-2 byte alphabet: the code point standing for byte b, and the UTF-8
 * of that code point (1 or 2 bytes) written to out; returns its length. */
int tok_byte_utf8(uint8_t b, char out[2]);

/* Length of the valid UTF-8 character at p (n bytes available), 0 if none. */
size_t tok_utf8_char(const unsigned char *p, size_t n);

#endif
