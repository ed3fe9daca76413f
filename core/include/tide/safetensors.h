/* Safetensors checkpoints: a zero-copy reader (the streaming writer is
 * tide/safetensors_write.h).
 *
 * Reader. tide_st_open maps one .safetensors file, or a checkpoint directory
 * (DIR/model.safetensors.index.json with its shards, else DIR/model.safetensors),
 * read-only, and validates every header completely: tensors are handed out as
 * struct tide_view pointing INTO the mapping, so the weights are used in place.
 * Supported dtypes: BF16, F16, F32, I64, I32; any other is refused at open.
 * Every refusal is logged once, naming the file and, where relevant, the tensor.
 * After open, a struct tide_st is immutable: any number of threads may call the
 * query functions concurrently. Views and names stay valid until tide_st_close. */
#ifndef TIDE_SAFETENSORS_H
#define TIDE_SAFETENSORS_H

#include "tide/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest JSON header accepted, bytes (as in the Hugging Face library). */
#define TIDE_ST_MAX_HEADER (100u * 1024u * 1024u)

struct tide_st; /* an opened checkpoint: one file, or a directory of shards */

/* Open PATH: a .safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json (then every shard it names is opened once, and
 * every tensor it maps must be in that shard and in no other). On success *out
 * owns the mappings; free it with tide_st_close.
 * Returns TIDE_OK, TIDE_E_NOTFOUND (no such file, directory or shard),
 * TIDE_E_IO (open/mmap failed), TIDE_E_FORMAT (malformed header, truncated
 * file, unsupported dtype, overlapping tensors, ...), TIDE_E_NOMEM. */
TIDE_API int tide_st_open(const char *path, struct tide_st **out);

/* How tide_st_open_flags holds the files (llama.cpp's --no-mmap and --mlock). */
enum tide_st_flags {
    /* Read each file into anonymous memory (transparent huge pages where the
     * kernel allows) instead of mapping it: the load reads every byte, and
     * nothing is paged in later or evicted back to the file. */
    TIDE_ST_READ = 1u << 0,
    /* Lock the memory (mlock) so it is never paged out. When the memlock
     * limit (RLIMIT_MEMLOCK) is too small, a warning says so and the files
     * stay unlocked. With a mapping, locking reads the whole file at open. */
    TIDE_ST_MLOCK = 1u << 1,
};

/* tide_st_open with flags (enum tide_st_flags, or 0: map the files). Same
 * return codes; TIDE_E_IO also when reading a file fails. */
TIDE_API int tide_st_open_flags(const char *path, unsigned flags, struct tide_st **out);

/* Unmap and free everything; every view from st becomes invalid. NULL is a no-op. */
TIDE_API void tide_st_close(struct tide_st *st);

/* Number of tensors, over all shards. */
TIDE_API int tide_st_count(const struct tide_st *st);

/* The i-th tensor, 0 <= i < tide_st_count, or NULL when i is out of range.
 * Order: shard by shard (shards sorted by file name), within a shard by data
 * offset, which is the order that reads the files sequentially. view->name is
 * set. The view is owned by st. */
TIDE_API const struct tide_view *tide_st_at(const struct tide_st *st, int i);

/* The tensor called NAME, or NULL when there is none (nothing is logged).
 * O(log n). The view is owned by st. */
TIDE_API const struct tide_view *tide_st_find(const struct tide_st *st, const char *name);

/* Path of the file that holds tensor NAME (for messages), or NULL when there is
 * none. Owned by st. */
TIDE_API const char *tide_st_file_of(const struct tide_st *st, const char *name);

/* Path that st was opened with (file or directory). Owned by st. */
TIDE_API const char *tide_st_path(const struct tide_st *st);

/* Get tensor NAME and check its dtype and shape. DTYPE TIDE_DTYPE_INVALID
 * accepts any dtype; a dimension of -1 in SHAPE accepts any extent (SHAPE may
 * be NULL when NDIM is 0). On a mismatch, logs e.g.
 *   "DIR/model.safetensors: tensor 'x': expected BF16 [64, 64], found F32 [64, 64]"
 * and on absence "DIR: missing tensor 'x'".
 * Returns TIDE_OK and sets *out (owned by st; OUT may be NULL), TIDE_E_NOTFOUND,
 * TIDE_E_FORMAT (wrong dtype or shape) or TIDE_E_INVAL (NDIM outside
 * 0..TIDE_MAX_DIMS). */
TIDE_API int tide_st_expect(const struct tide_st *st, const char *name, enum tide_dtype dtype,
                            int ndim, const int64_t *shape, const struct tide_view **out);

/* Sum of the byte sizes of every tensor. */
TIDE_API uint64_t tide_st_data_bytes(const struct tide_st *st);

#ifdef __cplusplus
}
#endif
#endif
