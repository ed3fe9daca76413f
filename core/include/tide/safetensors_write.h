/* Safetensors writer (the reader is tide/safetensors.h).
 *
 * Declare every tensor with tide_st_writer_add, then stream the data in
 * declaration order with tide_st_writer_write (any chunking). The file is
 * written as PATH.tmp and renamed onto PATH by tide_st_writer_finish, so PATH
 * never holds a half-written checkpoint. The format is exactly Hugging Face's:
 * an 8-byte little-endian header length, a JSON header padded with spaces to a
 * multiple of 8 bytes whose first entry is "__metadata__": {"format": "pt"},
 * then the tensor data, contiguous, in declaration order. The writer holds no
 * more than a small fixed buffer of data in memory. A writer is used by one
 * thread at a time. */
#ifndef TIDE_SAFETENSORS_WRITE_H
#define TIDE_SAFETENSORS_WRITE_H

#include "tide/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tide_st_writer; /* a safetensors file being written */

/* Start writing PATH (through PATH.tmp, which is truncated if a stale one is
 * there). Refuses, with TIDE_E_INVAL, when PATH exists and OVERWRITE is false.
 * On success *out is owned by the caller until tide_st_writer_finish or
 * tide_st_writer_abort. Returns TIDE_OK, TIDE_E_INVAL, TIDE_E_IO, TIDE_E_NOMEM. */
TIDE_API int tide_st_writer_create(const char *path, bool overwrite, struct tide_st_writer **out);

/* Declare the next tensor: NDIM in 0..TIDE_MAX_DIMS, every dimension >= 0,
 * a name not yet declared (and not "__metadata__"). Only before the first
 * tide_st_writer_write. Returns TIDE_OK, TIDE_E_INVAL, TIDE_E_NOMEM. */
TIDE_API int tide_st_writer_add(struct tide_st_writer *w, const char *name, enum tide_dtype dtype,
                                int ndim, const int64_t *shape);

/* Append BYTES bytes of tensor data, in declaration order, in chunks of any
 * size. The first call writes the header, after which no tensor may be added.
 * Writing more than was declared is refused. Returns TIDE_OK, TIDE_E_INVAL,
 * TIDE_E_IO, TIDE_E_NOMEM. After an error, w must still be aborted. */
TIDE_API int tide_st_writer_write(struct tide_st_writer *w, const void *data, size_t bytes);

/* Check that every declared byte was written, flush, fsync, and rename
 * PATH.tmp onto PATH. Always frees w; on failure the temporary file is removed
 * and PATH is untouched. Returns TIDE_OK, TIDE_E_INVAL (data missing, or PATH
 * appeared meanwhile and overwrite is false), TIDE_E_IO. */
TIDE_API int tide_st_writer_finish(struct tide_st_writer *w);

/* Give up: close and remove PATH.tmp, free w. PATH is untouched. NULL is a no-op. */
TIDE_API void tide_st_writer_abort(struct tide_st_writer *w);

#ifdef __cplusplus
}
#endif
#endif
