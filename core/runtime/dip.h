/* DIP, the Dynamic In-Context Planner (arXiv 2601.03199; docs/dip.md).
 *
 * A pool of question/answer examples ([dip] pool, JSONL) is ranked for each
 * prompt by Maximal Marginal Relevance over the model's own pooled input
 * embeddings (the prompt_vector slot: the mean of the tokens' embedding
 * rows), cut by the shot count and the token budget, and scheduled: the
 * first examples are in the prompt from the start, the rest enter before
 * later blocks (mode = dynamic) through the decoder's context_grow, or all
 * are in the prompt from the start (mode = upfront, the paper's baseline).
 * Examples sit between the chat template's head (when the prompt begins
 * with it) and the query, in rank order, each new one after those already
 * in. Core-internal. */
#ifndef TIDE_DIP_H
#define TIDE_DIP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "tide/model.h"
#include "tide/option.h"
#include "tide/tokenizer.h"

struct tide_dip;     /* the planner: settings and the pool */
struct tide_dip_run; /* one generation's plan */

/* The planner of [dip] o, or *out NULL when [dip] pool is empty (DIP off).
 * Reads the pool (errors name the file, line and key), tokenizes every
 * example and takes each question's vector from the model. chat_template
 * is the model's (NULL: none). Returns TIDE_OK, TIDE_E_CONFIG,
 * TIDE_E_NOTFOUND, TIDE_E_FORMAT, TIDE_E_UNSUPPORTED (a model without
 * prompt_vector) or TIDE_E_NOMEM. */
int tide_dip_open(const struct tide_opts *o, const struct tide_tokenizer *tok,
                  const char *chat_template, const struct tide_model_ops *mops,
                  struct tide_model *m, struct tide_dip **out);
void tide_dip_close(struct tide_dip *dp); /* NULL is a no-op */

/* Greedy MMR (paper section 3.1): pick up to k of n candidates, each time
 * the one of highest lambda * sim(q, i) - (1 - lambda) * max_{j chosen}
 * sim(i, j) (cosine similarity, in double; the max over no choice is 0;
 * the lowest index on ties), among those whose cost[i] still fits the
 * budget (budget <= 0: no limit). vecs is [n][dim]. Writes the picks in
 * order to order[] and their scores to score[] (may be NULL); returns how
 * many. */
int tide_dip_mmr(const float *q, const float *vecs, int n, int dim, double lambda, int k,
                 const int64_t *cost, int64_t budget, int *order, double *score);

/* The block each of n ranked examples enters before (0: in the prompt from
 * the start): the first `first`, then per_block before each later block
 * (per_block 0: the rest spread evenly so that the last enters before block
 * blocks - 1). An example scheduled at or past `blocks` gets -1 (never). */
void tide_dip_schedule(int n, int first, int per_block, int blocks, int *block_of);

/* Rank the pool for prompt[n] (the query is what follows the chat head).
 * On TIDE_OK *out holds the selection; call tide_dip_compose next. */
int tide_dip_start(const struct tide_dip *dp, const struct tide_model_ops *mops,
                   struct tide_model *m, const int32_t *prompt, int64_t n,
                   struct tide_dip_run **out);
/* Tokens the selected examples add to the prompt in all. */
int64_t tide_dip_tokens(const struct tide_dip_run *r);
/* Schedule for a generation of `blocks` blocks and build the initial
 * prompt. Returns TIDE_OK or TIDE_E_NOMEM. */
int tide_dip_compose(struct tide_dip_run *r, int blocks);
/* The initial prompt, and the tokens the prompt grows by later. */
const int32_t *tide_dip_prompt(const struct tide_dip_run *r, int64_t *n);
int64_t tide_dip_room(const struct tide_dip_run *r);
/* The tokens that enter before generated block `block` (the decoder's
 * context_grow): returns their count (0: none) with *ids and *at. */
int64_t tide_dip_grow(struct tide_dip_run *r, int block, const int32_t **ids, int64_t *at);
/* The plan as JSON (a new reference): the pool's size, the query, each
 * selected example's pool index, score, tokens and block, and the
 * insertions. NULL when out of memory. */
json_t *tide_dip_json(const struct tide_dip *dp, const struct tide_dip_run *r);
/* A one-line summary for the log. */
void tide_dip_summary(const struct tide_dip_run *r, char *buf, size_t len);
/* How many insertions were made so far. */
int tide_dip_insertions(const struct tide_dip_run *r);
void tide_dip_run_free(struct tide_dip_run *r); /* NULL is a no-op */

#endif
