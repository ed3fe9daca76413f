/* Safetensors writer: the header is built as tensors are declared, written on
 * the first data write, and the data then streams through a small buffer into
 * PATH.tmp, which tide_st_writer_finish renames onto PATH. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tide/log.h"
#include "tide/safetensors.h"
#include "tide/safetensors_write.h"
#include "tide/status.h"

#define WR_BUF (1u << 20) /* bytes buffered before a write(2) */
/* Files from this size on leave the page cache once written (see finish). */
#define WR_DROP_CACHE_MIN ((uint64_t)64 << 20)

struct tide_st_writer {
    char *path;         /* destination */
    char *tmp;          /* PATH.tmp, written then renamed */
    int fd;             /* open on tmp, -1 once closed */
    bool overwrite;     /* may replace an existing PATH */
    json_t *header;     /* declarations, in order; "__metadata__" first */
    uint64_t total;     /* bytes declared */
    uint64_t written;   /* data bytes received */
    bool started;       /* header written: no more declarations */
    unsigned char *buf; /* [WR_BUF] pending bytes */
    size_t buf_len;
};

static void wr_free(struct tide_st_writer *w)
{
    if (w->fd >= 0)
        close(w->fd);
    json_decref(w->header);
    free(w->buf);
    free(w->path);
    free(w->tmp);
    free(w);
}

void tide_st_writer_abort(struct tide_st_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (w->tmp)
        unlink(w->tmp);
    wr_free(w);
}

int tide_st_writer_create(const char *path, bool overwrite, struct tide_st_writer **out)
{
    *out = NULL;
    struct stat sb;
    if (!overwrite && lstat(path, &sb) == 0) {
        tide_error("%s: exists; refusing to replace it", path);
        return TIDE_E_INVAL;
    }
    struct tide_st_writer *w = calloc(1, sizeof *w);
    if (!w)
        return TIDE_E_NOMEM;
    w->fd = -1;
    w->overwrite = overwrite;
    size_t n = strlen(path);
    w->path = malloc(n + 1);
    w->tmp = malloc(n + 5);
    w->buf = malloc(WR_BUF);
    w->header = json_object();
    json_t *meta = json_pack("{s:s}", "format", "pt");
    if (!w->path || !w->tmp || !w->buf || !w->header || !meta ||
        json_object_set_new(w->header, "__metadata__", meta) != 0) {
        free(w->tmp);
        w->tmp = NULL; /* nothing created yet */
        wr_free(w);
        return TIDE_E_NOMEM;
    }
    memcpy(w->path, path, n + 1);
    snprintf(w->tmp, n + 5, "%s.tmp", path);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        tide_error("%s: cannot create: %s", w->tmp, strerror(errno));
        free(w->tmp);
        w->tmp = NULL;
        wr_free(w);
        return TIDE_E_IO;
    }
    *out = w;
    return TIDE_OK;
}

int tide_st_writer_add(struct tide_st_writer *w, const char *name, enum tide_dtype dtype, int ndim,
                       const int64_t *shape)
{
    if (w->started) {
        tide_error("%s: tensor '%s' declared after data was written; declare every tensor first",
                   w->path, name);
        return TIDE_E_INVAL;
    }
    size_t esize = tide_dtype_size(dtype);
    if (!esize) {
        tide_error("%s: tensor '%s': invalid dtype %d", w->path, name, (int)dtype);
        return TIDE_E_INVAL;
    }
    if (ndim < 0 || ndim > TIDE_MAX_DIMS || (ndim > 0 && !shape)) {
        tide_error("%s: tensor '%s': %d dimensions, TIDE supports 0 to %d", w->path, name, ndim,
                   TIDE_MAX_DIMS);
        return TIDE_E_INVAL;
    }
    if (!strcmp(name, "__metadata__") || json_object_get(w->header, name)) {
        tide_error("%s: tensor '%s' declared twice", w->path, name);
        return TIDE_E_INVAL;
    }
    uint64_t bytes = esize, end;
    bool overflow = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            tide_error("%s: tensor '%s': dimension %d is %lld", w->path, name, i,
                       (long long)shape[i]);
            return TIDE_E_INVAL;
        }
        overflow |= __builtin_mul_overflow(bytes, (uint64_t)shape[i], &bytes);
    }
    if (overflow || __builtin_add_overflow(w->total, bytes, &end) || end > (uint64_t)INT64_MAX) {
        tide_error("%s: tensor '%s' makes the file too large to address", w->path, name);
        return TIDE_E_INVAL;
    }
    /* Data is contiguous, as the format wants (no gaps), so a tensor's
     * alignment depends on what precedes it. */
    if (w->total % esize) {
        tide_error("%s: tensor '%s' (%s) would start at data offset %llu, not a multiple of its "
                   "element size %zu; declare tensors with larger element types first",
                   w->path, name, tide_dtype_name(dtype), (unsigned long long)w->total, esize);
        return TIDE_E_INVAL;
    }
    json_t *dims = json_array();
    for (int i = 0; dims && i < ndim; i++)
        if (json_array_append_new(dims, json_integer((json_int_t)shape[i])) != 0) {
            json_decref(dims);
            dims = NULL;
        }
    json_t *ent = dims ? json_pack("{s:s,s:o,s:[I,I]}", "dtype", tide_dtype_name(dtype), "shape",
                                   dims, "data_offsets", (json_int_t)w->total, (json_int_t)end)
                       : NULL;
    if (!ent)
        return TIDE_E_NOMEM;
    if (json_object_set_new(w->header, name, ent) != 0) {
        tide_error("%s: tensor name '%s' is not valid UTF-8", w->path, name);
        return TIDE_E_INVAL;
    }
    w->total = end;
    return TIDE_OK;
}

static int wr_write_all(struct tide_st_writer *w, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            tide_error("%s: write failed: %s", w->tmp, k < 0 ? strerror(errno) : "wrote nothing");
            return TIDE_E_IO;
        }
        p += k;
        n -= (size_t)k;
    }
    return TIDE_OK;
}

static int wr_flush(struct tide_st_writer *w)
{
    int rc = wr_write_all(w, w->buf, w->buf_len);
    w->buf_len = 0;
    return rc;
}

/* Append through the buffer; large chunks skip it. */
static int wr_put(struct tide_st_writer *w, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n) {
        if (!w->buf_len && n >= WR_BUF)
            return wr_write_all(w, p, n);
        size_t k = WR_BUF - w->buf_len < n ? WR_BUF - w->buf_len : n;
        memcpy(w->buf + w->buf_len, p, k);
        w->buf_len += k;
        p += k;
        n -= k;
        if (w->buf_len == WR_BUF) {
            int rc = wr_flush(w);
            if (rc)
                return rc;
        }
    }
    return TIDE_OK;
}

/* 8-byte little-endian length, then the JSON padded with spaces so that the
 * data section starts at a multiple of 8 bytes, as Hugging Face writes it. */
static int wr_header(struct tide_st_writer *w)
{
    w->started = true;
    char *text = json_dumps(w->header, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        return TIDE_E_NOMEM;
    size_t len = strlen(text), pad = (8 - len % 8) % 8;
    uint64_t hlen = len + pad;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hlen >> (8 * i));
    static const char spaces[8] = "        ";
    int rc = wr_put(w, le, sizeof le);
    if (!rc)
        rc = wr_put(w, text, len);
    if (!rc)
        rc = wr_put(w, spaces, pad);
    free(text);
    return rc;
}

int tide_st_writer_write(struct tide_st_writer *w, const void *data, size_t bytes)
{
    if (!w->started) {
        int rc = wr_header(w);
        if (rc)
            return rc;
    }
    if (bytes > w->total - w->written) {
        tide_error("%s: %zu more bytes would exceed the %llu declared (%llu written so far)",
                   w->path, bytes, (unsigned long long)w->total, (unsigned long long)w->written);
        return TIDE_E_INVAL;
    }
    int rc = wr_put(w, data, bytes);
    if (!rc)
        w->written += bytes;
    return rc;
}

/* Name of the declared tensor whose data holds byte OFF, for messages. */
static const char *wr_tensor_at(const struct tide_st_writer *w, uint64_t off)
{
    const char *key;
    json_t *val;
    json_object_foreach(w->header, key, val)
    {
        json_int_t end =
            json_integer_value(json_array_get(json_object_get(val, "data_offsets"), 1));
        if (strcmp(key, "__metadata__") && (uint64_t)end > off)
            return key;
    }
    return "?";
}

/* Make the rename durable too: fsync the directory that holds PATH. */
static void wr_sync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd) != 0)
            tide_debug("%s: fsync of its directory failed: %s", path, strerror(errno));
        close(fd);
    }
    free(copy);
}

/* Rename tmp onto path, never replacing an existing file unless allowed. */
static int wr_rename(struct tide_st_writer *w)
{
    int r;
    if (w->overwrite) {
        r = rename(w->tmp, w->path);
    } else {
        r = renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->path, RENAME_NOREPLACE);
        if (r != 0 && (errno == EINVAL || errno == ENOSYS)) {
            /* The filesystem cannot do it atomically: check, then rename. */
            struct stat sb;
            if (lstat(w->path, &sb) == 0)
                errno = EEXIST;
            else
                r = rename(w->tmp, w->path);
        }
        if (r != 0 && errno == EEXIST) {
            tide_error("%s: appeared while it was being written; refusing to replace it", w->path);
            return TIDE_E_INVAL;
        }
    }
    if (r != 0) {
        tide_error("%s: cannot rename %s onto it: %s", w->path, w->tmp, strerror(errno));
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

int tide_st_writer_finish(struct tide_st_writer *w)
{
    int rc = w->started ? TIDE_OK : wr_header(w);
    if (!rc && w->written != w->total) {
        tide_error("%s: only %llu of the %llu declared data bytes were written; tensor '%s' is "
                   "incomplete",
                   w->path, (unsigned long long)w->written, (unsigned long long)w->total,
                   wr_tensor_at(w, w->written));
        rc = TIDE_E_INVAL;
    }
    if (!rc)
        rc = wr_flush(w);
    if (!rc && fsync(w->fd) != 0) {
        tide_error("%s: fsync failed: %s", w->tmp, strerror(errno));
        rc = TIDE_E_IO;
    }
    /* A written file sits in the page cache in the small folios its writes
     * made, and a mapping of it then gets 4 KiB pages, from which the weights
     * stream up to ~10% slower (docs/cpu-performance.md, sessions 9-10). Dropping the
     * (now clean) pages of a big file lets the first load read it back cold,
     * in the 2 MiB folios readahead makes, which map as huge pages. */
    if (!rc && w->total >= WR_DROP_CACHE_MIN)
        posix_fadvise(w->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (!rc) {
        int fd = w->fd;
        w->fd = -1;
        if (close(fd) != 0) {
            tide_error("%s: close failed: %s", w->tmp, strerror(errno));
            rc = TIDE_E_IO;
        }
    }
    if (!rc)
        rc = wr_rename(w);
    if (rc) {
        tide_st_writer_abort(w);
        return rc;
    }
    wr_sync_dir(w->path);
    wr_free(w);
    return TIDE_OK;
}
