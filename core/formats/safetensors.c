/* Safetensors reader: map each file read-only, validate the whole header,
 * and hand out views into the mapping. A directory is either one
 * model.safetensors or the shards named by model.safetensors.index.json.
 *
 * All size arithmetic is done in uint64_t with overflow checks, since every
 * number in a header is untrusted: a header may claim 2^60 bytes. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tide/log.h"
#include "tide/safetensors.h"
#include "tide/status.h"

#define ST_INDEX_NAME  "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"
#define ST_DIMS_TEXT   (TIDE_MAX_DIMS * 24 + 8) /* "[d0, d1, ...]" */

struct st_file {
    char *path;     /* as shown in messages */
    void *map;      /* the whole file, PROT_READ, MAP_PRIVATE */
    size_t map_len; /* bytes */
};

struct st_ent {
    struct tide_view view; /* view.name is owned */
    int file;              /* index into tide_st.files */
    uint64_t begin, end;   /* data_offsets: bytes from the start of the data section */
};

struct tide_st {
    char *path;            /* as given to tide_st_open */
    struct st_file *files; /* [n_files] */
    int n_files;
    struct st_ent *ents; /* [n_ents], file by file, by data offset within a file */
    int n_ents;
    struct st_ent **by_name; /* [n_ents], sorted by name, for tide_st_find */
    uint64_t data_bytes;     /* sum of every tensor's bytes */
    unsigned flags;          /* enum tide_st_flags */
};

/* DIR/NAME without a doubled slash; NULL when out of memory. */
static char *st_join(const char *dir, const char *name)
{
    size_t nd = strlen(dir), nn = strlen(name);
    bool slash = nd > 0 && dir[nd - 1] == '/';
    char *p = malloc(nd + nn + 2);
    if (p)
        snprintf(p, nd + nn + 2, "%s%s%s", dir, slash ? "" : "/", name);
    return p;
}

/* "[64, 64]"; a negative extent (a wildcard in tide_st_expect) prints as "*". */
static void st_dims_text(const int64_t *shape, int ndim, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n < len; i++) {
        if (shape[i] < 0)
            n += (size_t)snprintf(buf + n, len - n, "%s*", i ? ", " : "");
        else
            n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* A short rendering of a JSON value for messages: 3, -1, 2.5, "x", or its type. */
static void st_json_text(const json_t *v, char *buf, size_t len)
{
    if (json_is_integer(v))
        snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, len, "%g", json_real_value(v));
    else if (json_is_string(v))
        snprintf(buf, len, "\"%.40s\"", json_string_value(v));
    else if (json_is_array(v))
        snprintf(buf, len, "an array");
    else if (json_is_object(v))
        snprintf(buf, len, "an object");
    else if (json_is_null(v))
        snprintf(buf, len, "null");
    else
        snprintf(buf, len, "a boolean");
}

static enum tide_dtype st_dtype_parse(const char *s)
{
    static const enum tide_dtype all[] = {TIDE_DTYPE_F32, TIDE_DTYPE_F16,    TIDE_DTYPE_BF16,
                                          TIDE_DTYPE_I64, TIDE_DTYPE_I32,    TIDE_DTYPE_I8,
                                          TIDE_DTYPE_U8,  TIDE_DTYPE_F8_E4M3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, tide_dtype_name(all[i])))
            return all[i];
    return TIDE_DTYPE_INVALID;
}

/* Read "dtype", "shape" and "data_offsets" of tensor NAME into e (not its
 * data pointer: the range is checked later, against the whole file). */
static int st_parse_entry(const char *path, const char *name, const json_t *obj, struct st_ent *e)
{
    char txt[64];
    if (!json_is_object(obj)) {
        st_json_text(obj, txt, sizeof txt);
        tide_error("%s: tensor '%s': header entry is %s, not an object", path, name, txt);
        return TIDE_E_FORMAT;
    }
    const json_t *jd = json_object_get(obj, "dtype");
    const json_t *js = json_object_get(obj, "shape");
    const json_t *jo = json_object_get(obj, "data_offsets");
    const char *missing = !jd ? "dtype" : !js ? "shape" : !jo ? "data_offsets" : NULL;
    if (missing) {
        tide_error("%s: tensor '%s': header entry has no \"%s\"", path, name, missing);
        return TIDE_E_FORMAT;
    }
    if (!json_is_string(jd)) {
        st_json_text(jd, txt, sizeof txt);
        tide_error("%s: tensor '%s': \"dtype\" is %s, not a string", path, name, txt);
        return TIDE_E_FORMAT;
    }
    e->view.dtype = st_dtype_parse(json_string_value(jd));
    if (e->view.dtype == TIDE_DTYPE_INVALID) {
        tide_error("%s: tensor '%s': dtype %s is not supported (TIDE reads BF16, F16, F32, I32, "
                   "I64, and I8, U8 and F8_E4M3 for quantized experts)",
                   path, name, json_string_value(jd));
        return TIDE_E_FORMAT;
    }
    if (!json_is_array(js)) {
        st_json_text(js, txt, sizeof txt);
        tide_error("%s: tensor '%s': \"shape\" is %s, not an array", path, name, txt);
        return TIDE_E_FORMAT;
    }
    if (json_array_size(js) > TIDE_MAX_DIMS) {
        tide_error("%s: tensor '%s': shape has %zu dimensions, TIDE supports at most %d", path,
                   name, json_array_size(js), TIDE_MAX_DIMS);
        return TIDE_E_FORMAT;
    }
    e->view.ndim = (int)json_array_size(js);
    uint64_t bytes = tide_dtype_size(e->view.dtype);
    bool overflow = false;
    for (int i = 0; i < e->view.ndim; i++) {
        const json_t *d = json_array_get(js, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            st_json_text(d, txt, sizeof txt);
            tide_error("%s: tensor '%s': shape[%d] is %s, not a non-negative integer", path, name,
                       i, txt);
            return TIDE_E_FORMAT;
        }
        e->view.shape[i] = (int64_t)json_integer_value(d);
        overflow |= __builtin_mul_overflow(bytes, (uint64_t)e->view.shape[i], &bytes);
    }
    char dims[ST_DIMS_TEXT];
    st_dims_text(e->view.shape, e->view.ndim, dims, sizeof dims);
    if (overflow || bytes > (uint64_t)INT64_MAX || bytes > SIZE_MAX) {
        tide_error("%s: tensor '%s': shape %s of %s is too large to address", path, name, dims,
                   tide_dtype_name(e->view.dtype));
        return TIDE_E_FORMAT;
    }
    const json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(jb) ||
        !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < json_integer_value(jb)) {
        tide_error("%s: tensor '%s': \"data_offsets\" must be [begin, end] with integers 0 <= "
                   "begin <= end",
                   path, name);
        return TIDE_E_FORMAT;
    }
    e->begin = (uint64_t)json_integer_value(jb);
    e->end = (uint64_t)json_integer_value(je);
    if (e->end - e->begin != bytes) {
        tide_error("%s: tensor '%s': shape %s of %s is %llu bytes, but data_offsets [%llu, %llu] "
                   "span %llu bytes",
                   path, name, dims, tide_dtype_name(e->view.dtype), (unsigned long long)bytes,
                   (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)(e->end - e->begin));
        return TIDE_E_FORMAT;
    }
    e->view.nbytes = (size_t)bytes;
    return TIDE_OK;
}

static int st_cmp_offset(const void *a, const void *b)
{
    const struct st_ent *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Check the tensors of one file, ents[0..n) sorted by offset, against its data
 * section of DATA_LEN bytes starting at file offset DATA_POS, and point their
 * views into it. */
static int st_place(const char *path, struct st_ent *ents, int n, const uint8_t *data,
                    uint64_t data_pos, uint64_t data_len)
{
    uint64_t total = 0, max_end = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && ents[i].begin < ents[i - 1].end) {
            tide_error("%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", path,
                       ents[i - 1].view.name, (unsigned long long)ents[i - 1].begin,
                       (unsigned long long)ents[i - 1].end, ents[i].view.name,
                       (unsigned long long)ents[i].begin, (unsigned long long)ents[i].end);
            return TIDE_E_FORMAT;
        }
        total += ents[i].end - ents[i].begin; /* no overflow: the ranges are disjoint */
        if (ents[i].end > max_end)
            max_end = ents[i].end;
    }
    if (max_end > data_len) {
        if (total == max_end) {
            /* The header describes a well-formed, gapless buffer that the
             * file does not hold: the usual half-downloaded checkpoint. */
            uint64_t want = data_pos + max_end; /* both < 2^63 */
            tide_error("%s: file looks truncated (incomplete download?): its header describes "
                       "%llu data bytes, so the file should be %llu bytes, but it is %llu bytes",
                       path, (unsigned long long)max_end, (unsigned long long)want,
                       (unsigned long long)(data_pos + data_len));
            return TIDE_E_FORMAT;
        }
        for (int i = 0; i < n; i++) {
            if (ents[i].end > data_len) {
                tide_error("%s: tensor '%s': data_offsets [%llu, %llu] lie outside the data "
                           "section (%llu bytes)",
                           path, ents[i].view.name, (unsigned long long)ents[i].begin,
                           (unsigned long long)ents[i].end, (unsigned long long)data_len);
                return TIDE_E_FORMAT;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        size_t esize = tide_dtype_size(ents[i].view.dtype);
        uint64_t at = data_pos + ents[i].begin;
        if (at % esize) {
            tide_error("%s: tensor '%s': data is misaligned: it starts at file offset %llu, not "
                       "a multiple of its element size %zu (%s)",
                       path, ents[i].view.name, (unsigned long long)at, esize,
                       tide_dtype_name(ents[i].view.dtype));
            return TIDE_E_FORMAT;
        }
        ents[i].view.data = data + ents[i].begin;
    }
    return TIDE_OK;
}

/* The key that jansson refused as a duplicate: it ends just before byte POS
 * of BUF, where the lexer stopped. (jansson quotes the offending token in its
 * message only when it is at most 20 characters; tensor names are longer.)
 * Returns false when the key cannot be recovered. */
static bool st_dup_key(const char *buf, size_t len, int pos, char *out, size_t out_len)
{
    if (pos < 2 || (size_t)pos > len || buf[pos - 1] != '"')
        return false;
    for (int i = pos - 2; i >= 0; i--) {
        int bs = 0;
        while (i - 1 - bs >= 0 && buf[i - 1 - bs] == '\\')
            bs++;
        if (buf[i] != '"' || bs % 2)
            continue;
        json_t *key = json_loadb(buf + i, (size_t)(pos - i), JSON_DECODE_ANY, NULL);
        bool ok = json_is_string(key);
        if (ok)
            snprintf(out, out_len, "%s", json_string_value(key));
        json_decref(key);
        return ok;
    }
    return false;
}

/* Parse LEN bytes of JSON, the WHAT ("header", "index") of file PATH, which
 * must be an object whose keys are unique. NULL after logging on failure. */
static json_t *st_json_parse(const char *path, const char *what, const char *buf, size_t len)
{
    json_error_t err;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        char key[512];
        if (json_error_code(&err) == json_error_duplicate_key &&
            st_dup_key(buf, len, err.position, key, sizeof key))
            tide_error("%s: %s has '%s' twice (line %d, column %d)", path, what, key, err.line,
                       err.column);
        else
            tide_error("%s: %s is not valid JSON: %s (line %d, column %d)", path, what, err.text,
                       err.line, err.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        tide_error("%s: %s is not a JSON object", path, what);
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Parse the JSON header of a mapped file and append its tensors to st. */
static int st_parse_header(struct tide_st *st, int fi, const uint8_t *map, uint64_t hlen,
                           uint64_t size)
{
    const char *path = st->files[fi].path;
    json_t *root = st_json_parse(path, "header", (const char *)map + 8, (size_t)hlen);
    if (!root)
        return TIDE_E_FORMAT;
    int rc = TIDE_OK;
    size_t n = json_object_size(root);
    if (n > (size_t)(INT_MAX - st->n_ents)) {
        tide_error("%s: header lists %zu tensors, too many", path, n);
        rc = TIDE_E_FORMAT;
        goto out;
    }
    struct st_ent *ents = realloc(st->ents, sizeof *ents * ((size_t)st->n_ents + n + 1));
    if (!ents) {
        rc = TIDE_E_NOMEM;
        goto out;
    }
    st->ents = ents;
    int first = st->n_ents;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (!strcmp(key, "__metadata__"))
            continue;
        struct st_ent *e = &st->ents[st->n_ents];
        memset(e, 0, sizeof *e);
        e->file = fi;
        rc = st_parse_entry(path, key, val, e);
        if (rc)
            goto out;
        e->view.name = strdup(key);
        if (!e->view.name) {
            rc = TIDE_E_NOMEM;
            goto out;
        }
        st->n_ents++;
    }
    qsort(st->ents + first, (size_t)(st->n_ents - first), sizeof *st->ents, st_cmp_offset);
    rc = st_place(path, st->ents + first, st->n_ents - first, map + 8 + hlen, 8 + hlen,
                  size - 8 - hlen);
out:
    json_decref(root);
    return rc;
}

/* Open PATH for reading; it must be a regular file. On success the caller
 * closes *fd. A missing file is TIDE_E_NOTFOUND. */
static int st_open_regular(const char *path, int *fd, uint64_t *size)
{
    /* O_NONBLOCK: a FIFO in place of a file must not block the open. */
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) {
        int e = errno;
        tide_error("%s: cannot open: %s", path, strerror(e));
        return e == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_IO;
    }
    struct stat sb;
    if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        tide_error("%s: not a regular file", path);
        close(*fd);
        *fd = -1;
        return TIDE_E_FORMAT;
    }
    *size = (uint64_t)sb.st_size;
    return TIDE_OK;
}

/* Read size bytes of the open file fd into buf (TIDE_ST_READ): anonymous
 * memory, in huge pages where the kernel allows (far fewer page faults than
 * 4 KiB pages for a multi-GB checkpoint). */
static int st_read_all(const char *path, int fd, void *buf, size_t size)
{
#ifdef MADV_HUGEPAGE
    madvise(buf, size, MADV_HUGEPAGE);
#endif
    if (size >= ((size_t)1 << 30))
        tide_info("%s: reading %.2f GiB into memory ([model] mmap = false)", path,
                  (double)size / 1073741824.0);
    size_t done = 0;
    while (done < size) {
        const size_t want = size - done < ((size_t)64 << 20) ? size - done : (size_t)64 << 20;
        ssize_t k = pread(fd, (char *)buf + done, want, (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            tide_error("%s: read failed at byte %zu of %zu: %s", path, done, size,
                       k < 0 ? strerror(errno) : "the file shrank");
            return TIDE_E_IO;
        }
        done += (size_t)k;
    }
    return TIDE_OK;
}

/* Lock a file's memory in RAM (TIDE_ST_MLOCK); a refusal is a warning, as
 * in llama.cpp: the model still runs, its pages just may be evicted. */
static void st_lock(const char *path, void *map, size_t len)
{
    if (mlock(map, len) == 0)
        return;
    const int e = errno;
    struct rlimit rl;
    char lim[96] = "";
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        snprintf(lim, sizeof lim, " (the memlock limit is %.2f GiB)",
                 (double)rl.rlim_cur / 1073741824.0);
    tide_warn("%s: cannot lock %.2f GiB in RAM: %s%s; raise it (ulimit -l, or LimitMEMLOCK= for "
              "a systemd service) or set [model] mlock = false; continuing unlocked",
              path, (double)len / 1073741824.0, strerror(e), lim);
}

/* Map PATH and append its tensors to st. A missing file is TIDE_E_NOTFOUND. */
static int st_load_file(struct tide_st *st, const char *path)
{
    struct st_file *files = realloc(st->files, sizeof *files * (size_t)(st->n_files + 1));
    if (!files)
        return TIDE_E_NOMEM;
    st->files = files;
    struct st_file *f = &st->files[st->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return TIDE_E_NOMEM;
    int fi = st->n_files++;

    int fd;
    uint64_t size;
    int rc = st_open_regular(path, &fd, &size);
    if (rc)
        return rc;
    if (size < 8) {
        tide_error("%s: file is %llu bytes, too short for a safetensors file (it starts with an "
                   "8-byte header length)",
                   path, (unsigned long long)size);
        close(fd);
        return TIDE_E_FORMAT;
    }
    void *map = MAP_FAILED;
    int map_errno = ENOMEM;
    if (size <= SIZE_MAX && (st->flags & TIDE_ST_READ)) {
        map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        map_errno = errno;
        if (map != MAP_FAILED && (rc = st_read_all(path, fd, map, (size_t)size)) != TIDE_OK) {
            munmap(map, (size_t)size);
            close(fd);
            return rc;
        }
        if (map != MAP_FAILED)
            mprotect(map, (size_t)size, PROT_READ);
    } else if (size <= SIZE_MAX) {
        map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        map_errno = errno;
    }
    close(fd);
    if (map == MAP_FAILED) {
        char why[160] = "";
        struct rlimit rl;
        if (map_errno == ENOMEM && getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(why, sizeof why,
                     "; this process's address space is limited to %.2f GiB (ulimit -v), and "
                     "the whole file must fit in it",
                     (double)rl.rlim_cur / 1073741824.0);
        else if (map_errno == ENOMEM)
            snprintf(why, sizeof why, "; the host cannot reserve that much address space");
        tide_error("%s: cannot map %llu bytes (%.2f GiB): %s%s", path, (unsigned long long)size,
                   (double)size / 1073741824.0, strerror(map_errno), why);
        return TIDE_E_IO;
    }
    f->map = map;
    f->map_len = (size_t)size;
    /* Weights can be many GB: keep them out of core dumps. */
    madvise(map, f->map_len, MADV_DONTDUMP);
#ifdef MADV_HUGEPAGE
    /* Pages faulted in through this mapping come into the page cache as
     * 2 MiB folios, mapped by one TLB entry each. A cold sequential read
     * gets them anyway (Linux 6.18, ext4: 99%), but parts evicted under
     * memory pressure and faulted back in the experts' random order came
     * back in small folios without this (1 GiB of a 6.3 GB checkpoint:
     * 83% of the mapping in 2 MiB pages against 99.6%); the routed experts
     * of a 4-layer LLaDA2-mini step took 44.7 ms with 27% of the file in
     * small pages against 42 with none (2 threads, Xeon VM). */
    madvise(map, f->map_len, MADV_HUGEPAGE);
#endif
    if (st->flags & TIDE_ST_MLOCK)
        st_lock(path, map, f->map_len);

    const uint8_t *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > TIDE_ST_MAX_HEADER) {
        tide_error("%s: header length is %llu bytes, over the %u MiB limit (not a safetensors "
                   "file?)",
                   path, (unsigned long long)hlen, TIDE_ST_MAX_HEADER >> 20);
        return TIDE_E_FORMAT;
    }
    if (hlen > size - 8) {
        tide_error("%s: header length %llu runs past the end of the file (%llu bytes): the file "
                   "looks truncated, or is not a safetensors file",
                   path, (unsigned long long)hlen, (unsigned long long)size);
        return TIDE_E_FORMAT;
    }
    /* The header is read at once; the data only as the model touches it. */
    madvise(map, (size_t)(8 + hlen), MADV_WILLNEED);
    return st_parse_header(st, fi, p, hlen, size);
}

static int st_cmp_name(const void *a, const void *b)
{
    const struct st_ent *const *x = a, *const *y = b;
    return strcmp((*x)->view.name, (*y)->view.name);
}

static int st_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sort the name index; refuse a tensor that two files both hold. */
static int st_index_names(struct tide_st *st)
{
    st->by_name = malloc(sizeof *st->by_name * ((size_t)st->n_ents + 1));
    if (!st->by_name)
        return TIDE_E_NOMEM;
    for (int i = 0; i < st->n_ents; i++) {
        st->by_name[i] = &st->ents[i];
        st->data_bytes += st->ents[i].view.nbytes;
    }
    qsort(st->by_name, (size_t)st->n_ents, sizeof *st->by_name, st_cmp_name);
    for (int i = 1; i < st->n_ents; i++) {
        const struct st_ent *a = st->by_name[i - 1], *b = st->by_name[i];
        if (!strcmp(a->view.name, b->view.name)) {
            tide_error("%s: tensor '%s' is in two shards: %s and %s", st->path, a->view.name,
                       st->files[a->file].path, st->files[b->file].path);
            return TIDE_E_FORMAT;
        }
    }
    return TIDE_OK;
}

static const struct st_ent *st_lookup(const struct tide_st *st, const char *name)
{
    if (!st || !name || !st->by_name)
        return NULL;
    size_t lo = 0, hi = (size_t)st->n_ents;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->by_name[mid]->view.name);
        if (!c)
            return st->by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* Read a whole small file (at most TIDE_ST_MAX_HEADER bytes) into *buf,
 * owned by the caller. */
static int st_read_small(const char *path, char **buf, size_t *len)
{
    int fd;
    uint64_t size;
    int rc = st_open_regular(path, &fd, &size);
    if (rc)
        return rc;
    char *b = NULL;
    size_t n = 0;
    if (size > TIDE_ST_MAX_HEADER) {
        tide_error("%s: %llu bytes, larger than the %u MiB limit", path, (unsigned long long)size,
                   TIDE_ST_MAX_HEADER >> 20);
        rc = TIDE_E_FORMAT;
    } else if (!(b = malloc((size_t)size + 1))) {
        rc = TIDE_E_NOMEM;
    }
    while (!rc && n < (size_t)size) {
        ssize_t k = read(fd, b + n, (size_t)size - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            tide_error("%s: read failed: %s", path, k < 0 ? strerror(errno) : "file shrank");
            rc = TIDE_E_IO;
        } else {
            n += (size_t)k;
        }
    }
    close(fd);
    if (rc) {
        free(b);
        return rc;
    }
    *buf = b;
    *len = n;
    return TIDE_OK;
}

/* A shard named in an index must be a plain file name inside the directory. */
static bool st_shard_name_ok(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Open every shard named by the index at IDX (in directory DIR), each once,
 * then check that each mapped tensor is in the shard the index names. */
static int st_open_index(struct tide_st *st, const char *dir, const char *idx)
{
    char *text = NULL;
    size_t len = 0;
    int rc = st_read_small(idx, &text, &len);
    if (rc)
        return rc;
    json_t *root = st_json_parse(idx, "index", text, len);
    free(text);
    if (!root)
        return TIDE_E_FORMAT;
    const char **shards = NULL;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        tide_error("%s: no \"weight_map\" object listing the tensors", idx);
        rc = TIDE_E_FORMAT;
        goto out;
    }
    size_t n = json_object_size(map), n_shards = 0;
    shards = malloc(sizeof *shards * n);
    if (!shards) {
        rc = TIDE_E_NOMEM;
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val)
    {
        const char *s = json_string_value(val);
        if (!s || !st_shard_name_ok(s)) {
            char txt[64];
            st_json_text(val, txt, sizeof txt);
            tide_error("%s: tensor '%s' maps to %s, which is not a file name in %s", idx, key, txt,
                       dir);
            rc = TIDE_E_FORMAT;
            goto out;
        }
        shards[n_shards++] = s;
    }
    qsort(shards, n_shards, sizeof *shards, st_cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n_shards; i++)
        if (!u || strcmp(shards[u - 1], shards[i]))
            shards[u++] = shards[i];
    for (size_t i = 0; i < u; i++) {
        char *path = st_join(dir, shards[i]);
        if (!path) {
            rc = TIDE_E_NOMEM;
            goto out;
        }
        if (access(path, F_OK) != 0) {
            tide_error("%s: shard %s is missing: %s: %s", idx, shards[i], path, strerror(errno));
            free(path);
            rc = TIDE_E_NOTFOUND;
            goto out;
        }
        rc = st_load_file(st, path);
        free(path);
        if (rc)
            goto out;
    }
    rc = st_index_names(st);
    if (rc)
        goto out;
    json_object_foreach(map, key, val)
    {
        const struct st_ent *e = st_lookup(st, key);
        const char *shard = json_string_value(val);
        if (!e) {
            tide_error("%s: tensor '%s' is mapped to shard %s, which does not contain it", idx, key,
                       shard);
            rc = TIDE_E_FORMAT;
            goto out;
        }
        /* Shard i of the sorted, deduplicated list was loaded as file i. */
        const char **at = bsearch(&shard, shards, u, sizeof *shards, st_cmp_str);
        if (e->file != (int)(at - shards)) {
            tide_error("%s: tensor '%s' is mapped to shard %s, which does not contain it (it is "
                       "in %s)",
                       idx, key, shard, st->files[e->file].path);
            rc = TIDE_E_FORMAT;
            goto out;
        }
    }
    if ((size_t)st->n_ents > n)
        tide_debug("%s: %zu tensors in the shards are not in the index", idx,
                   (size_t)st->n_ents - n);
out:
    free(shards);
    json_decref(root);
    return rc;
}

int tide_st_open(const char *path, struct tide_st **out)
{
    return tide_st_open_flags(path, 0, out);
}

int tide_st_open_flags(const char *path, unsigned flags, struct tide_st **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int e = errno;
        tide_error("%s: %s", path, strerror(e));
        return e == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_IO;
    }
    struct tide_st *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return TIDE_E_NOMEM;
    }
    st->flags = flags;
    int rc;
    if (S_ISDIR(sb.st_mode)) {
        char *idx = st_join(path, ST_INDEX_NAME), *single = st_join(path, ST_SINGLE_NAME);
        if (!idx || !single)
            rc = TIDE_E_NOMEM;
        else if (access(idx, F_OK) == 0)
            rc = st_open_index(st, path, idx);
        else if (access(single, F_OK) == 0)
            rc = st_load_file(st, single);
        else {
            tide_error("no " ST_SINGLE_NAME " or " ST_INDEX_NAME " in %s", path);
            rc = TIDE_E_NOTFOUND;
        }
        free(idx);
        free(single);
    } else {
        rc = st_load_file(st, path);
    }
    if (!rc && !st->by_name)
        rc = st_index_names(st);
    if (rc) {
        tide_st_close(st);
        return rc;
    }
    *out = st;
    return TIDE_OK;
}

void tide_st_close(struct tide_st *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n_ents; i++)
        free((char *)st->ents[i].view.name);
    for (int i = 0; i < st->n_files; i++) {
        if (st->files[i].map)
            munmap(st->files[i].map, st->files[i].map_len);
        free(st->files[i].path);
    }
    free(st->ents);
    free(st->by_name);
    free(st->files);
    free(st->path);
    free(st);
}

int tide_st_count(const struct tide_st *st)
{
    return st ? st->n_ents : 0;
}

const struct tide_view *tide_st_at(const struct tide_st *st, int i)
{
    if (!st || i < 0 || i >= st->n_ents)
        return NULL;
    return &st->ents[i].view;
}

const struct tide_view *tide_st_find(const struct tide_st *st, const char *name)
{
    const struct st_ent *e = st_lookup(st, name);
    return e ? &e->view : NULL;
}

const char *tide_st_file_of(const struct tide_st *st, const char *name)
{
    const struct st_ent *e = st_lookup(st, name);
    return e ? st->files[e->file].path : NULL;
}

const char *tide_st_path(const struct tide_st *st)
{
    return st ? st->path : NULL;
}

int tide_st_expect(const struct tide_st *st, const char *name, enum tide_dtype dtype, int ndim,
                   const int64_t *shape, const struct tide_view **out)
{
    if (out)
        *out = NULL;
    if (ndim < 0 || ndim > TIDE_MAX_DIMS || (ndim > 0 && !shape)) {
        tide_error("%s: tensor '%s': asked for %d dimensions, TIDE supports 0 to %d",
                   st ? st->path : "?", name, ndim, TIDE_MAX_DIMS);
        return TIDE_E_INVAL;
    }
    const struct st_ent *e = st_lookup(st, name);
    if (!e) {
        tide_error("%s: missing tensor '%s'", st ? st->path : "?", name);
        return TIDE_E_NOTFOUND;
    }
    const struct tide_view *v = &e->view;
    bool ok = (dtype == TIDE_DTYPE_INVALID || v->dtype == dtype) && v->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = shape[i] < 0 || shape[i] == v->shape[i];
    if (!ok) {
        char want[ST_DIMS_TEXT], have[ST_DIMS_TEXT];
        st_dims_text(shape, ndim, want, sizeof want);
        st_dims_text(v->shape, v->ndim, have, sizeof have);
        tide_error("%s: tensor '%s': expected %s %s, found %s %s", st->files[e->file].path, name,
                   dtype == TIDE_DTYPE_INVALID ? "any dtype" : tide_dtype_name(dtype), want,
                   tide_dtype_name(v->dtype), have);
        return TIDE_E_FORMAT;
    }
    if (out)
        *out = v;
    return TIDE_OK;
}

uint64_t tide_st_data_bytes(const struct tide_st *st)
{
    return st ? st->data_bytes : 0;
}
