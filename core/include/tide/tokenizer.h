/* Tokenizer: a HuggingFace tokenizer.json holding a byte-level BPE (the
 * LLaDA2.0 / Ling 2.0 family, also GPT-2, Qwen2, Llama 3).
 *
 * Encoding runs, in this order:
 *  1. added tokens (tokenizer.json "added_tokens") are cut out first, leftmost
 *     match first and the longest of those; tokens with "normalized": false are
 *     matched before those with "normalized": true, as HuggingFace does;
 *  2. the rest is cut into runs of valid UTF-8 and runs of bytes that are not
 *     valid UTF-8. Each maximal invalid run becomes one piece of its own and
 *     skips the pre-tokenizer (PCRE2 cannot match over invalid UTF-8);
 *  3. each valid run goes through the pre-tokenizer steps (Split regexes,
 *     ByteLevel), and each resulting piece through byte-level BPE: bytes mapped
 *     to the GPT-2 byte<->unicode alphabet, pairs merged by merge rank.
 * Decoding concatenates each id's bytes: added tokens as their text, vocab
 * pieces mapped back through the byte alphabet. For any input bytes,
 * decode(encode(x)) == x, except where a tokenizer.json asks for a prefix space
 * (ByteLevel add_prefix_space) or lstrip/rstrip on an added token.
 *
 * Post-processors (BOS/EOS templates), truncation and padding are not
 * applied: encode returns only the ids of the text given.
 *
 * Threading: a loaded tokenizer is immutable; any number of threads may encode
 * and decode with it at once. */
#ifndef TIDE_TOKENIZER_H
#define TIDE_TOKENIZER_H

#include "tide/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct tide_tokenizer;

/* Load a tokenizer.json. Accepts model.type "BPE" with vocab {piece: id} and
 * merges as "a b" strings or ["a", "b"] pairs (ignore_merges honoured;
 * unk_token stands in for bytes the vocab lacks); added_tokens (lstrip and
 * rstrip honoured, single_word refused); a pre_tokenizer made of Sequence,
 * Split (Regex or String pattern, behavior Isolated) and ByteLevel; normalizer
 * null; decoder ByteLevel or null; any post_processor (not applied, see
 * above). Anything else is refused, and the log names the file and the key at
 * fault (with line:column for JSON syntax errors). Added tokens get the ids
 * HuggingFace tokenizers gives them: the vocab's id when model.vocab has the
 * content, else the next id after the vocab; a file id that disagrees is
 * logged as a warning. On success *out owns the tokenizer (free it with
 * tide_tokenizer_free). Returns TIDE_OK, TIDE_E_NOTFOUND (no such file),
 * TIDE_E_IO, TIDE_E_FORMAT (malformed or unsupported), TIDE_E_NOMEM. */
TIDE_API int tide_tokenizer_load(const char *path, struct tide_tokenizer **out);

/* Release a tokenizer. NULL is a no-op. */
TIDE_API void tide_tokenizer_free(struct tide_tokenizer *t);

/* Encode len bytes of text (any bytes; NUL allowed). On success *ids is a
 * malloc'd array of *n ids (never NULL, even when *n is 0) that the caller
 * frees. Returns TIDE_OK, TIDE_E_NOMEM, or TIDE_E_FORMAT when the vocabulary
 * lacks the token for a byte the text holds (logged). */
TIDE_API int tide_tokenizer_encode(const struct tide_tokenizer *t, const char *text, size_t len,
                                   int32_t **ids, size_t *n);

/* Decode n ids into bytes. Special and other added tokens are rendered as
 * their text. On success *text is malloc'd, NUL-terminated, *len bytes long
 * (not counting the NUL), and the caller frees it. Returns TIDE_OK,
 * TIDE_E_NOMEM, or TIDE_E_RANGE for an id with no token (logged). */
TIDE_API int tide_tokenizer_decode(const struct tide_tokenizer *t, const int32_t *ids, size_t n,
                                   char **text, size_t *len);

/* The id of an exact token string: an added token's content, or else a vocab
 * piece as written in tokenizer.json (byte-level form, e.g. "Ġthe").
 * Returns -1 when there is none (or token is NULL). */
TIDE_API int32_t tide_tokenizer_id(const struct tide_tokenizer *t, const char *token);

/* The token string of an id: an added token's content, or else the vocab
 * piece in byte-level form. NULL when the id has no token. The string belongs
 * to the tokenizer. */
TIDE_API const char *tide_tokenizer_piece(const struct tide_tokenizer *t, int32_t id);

/* Largest id + 1 (ids below it may be unused). */
TIDE_API int32_t tide_tokenizer_size(const struct tide_tokenizer *t);

/* True when id is an added token marked "special": true. */
TIDE_API bool tide_tokenizer_is_special(const struct tide_tokenizer *t, int32_t id);

#ifdef __cplusplus
}
#endif
#endif
