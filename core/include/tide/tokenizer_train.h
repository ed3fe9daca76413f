/* Tokenizer trainer: writes a HuggingFace tokenizer.json for synthetic
 * checkpoints (`tide mkmodel`). The reader and encoder are tide/tokenizer.h. */
#ifndef TIDE_TOKENIZER_TRAIN_H
#define TIDE_TOKENIZER_TRAIN_H

#include "tide/api.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Train a byte-level BPE over corpus[0..len) and write a complete HuggingFace
 * tokenizer.json to path. The vocabulary is the 256 byte tokens (id = byte
 * value) plus one token per merge until vocab_target non-special tokens (or
 * until no pair repeats: the log says so), then the n_specials special tokens
 * with the next ids, each in "added_tokens" with "special": true and in the
 * vocab. Specials found in the corpus are cut out before counting, like
 * encoding does. Pre-tokenizer: Sequence[Split(LLaDA2 regex, Isolated),
 * ByteLevel(add_prefix_space false, use_regex false)], decoder ByteLevel,
 * normalizer null, as in the LLaDA2.0 file. Deterministic: the same inputs
 * give the same file. Ties between equally frequent pairs go to the smaller
 * (left id, right id). The file is written to a temporary name and renamed;
 * an existing path is refused unless overwrite. Returns TIDE_OK,
 * TIDE_E_INVAL (bad argument, existing file), TIDE_E_IO, TIDE_E_NOMEM. */
TIDE_API int tide_tokenizer_train(const char *corpus, size_t len, int vocab_target,
                                  const char *const *specials, int n_specials, const char *path,
                                  bool overwrite);

#ifdef __cplusplus
}
#endif
#endif
