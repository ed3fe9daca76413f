/* Routing-trace reader: the file is mapped and parsed record by record. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tide/log.h"
#include "tide/status.h"
#include "tide/trace.h"

struct tide_trace_reader {
    char *path;
    const uint8_t *map;
    size_t size;
    size_t data; /* offset of the first record */
    size_t pos;
    struct tide_trace_header h;
    char *model;
    char *decoder, *decoder_settings; /* header strings, owned */
    int id_bytes;
    int32_t *ids; /* [cap] */
    size_t cap;
    float *vec; /* [cap_vec] */
    size_t cap_vec;
    uint32_t *seq; /* [cap_seq] a batch record's prompt ids */
    size_t cap_seq;
};

static uint32_t tr_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int tr_fail(struct tide_trace_reader *r, const char *what)
{
    tide_error("trace %s: %s", r->path, what);
    return TIDE_E_FORMAT;
}

static int tr_get_u32(struct tide_trace_reader *r, json_t *o, const char *key, uint32_t lo,
                      uint32_t hi, uint32_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        tide_error("trace %s: header field \"%s\" is missing or out of range", r->path, key);
        return TIDE_E_FORMAT;
    }
    *out = (uint32_t)json_integer_value(v);
    return TIDE_OK;
}

static int tr_header(struct tide_trace_reader *r)
{
    if (r->size < 16 || memcmp(r->map, TIDE_TRACE_MAGIC, 8))
        return tr_fail(r, "not a TIDE routing trace (bad magic)");
    uint32_t version = tr_u32(r->map + 8), len = tr_u32(r->map + 12);
    if (version < TIDE_TRACE_VERSION_MIN || version > TIDE_TRACE_VERSION) {
        tide_error("trace %s: format version %u, this tide reads versions %u to %u", r->path,
                   version, TIDE_TRACE_VERSION_MIN, TIDE_TRACE_VERSION);
        return TIDE_E_FORMAT;
    }
    r->h.version = version;
    if (len > r->size - 16)
        return tr_fail(r, "truncated header");
    json_error_t jerr;
    json_t *o = json_loadb((const char *)r->map + 16, len, 0, &jerr);
    if (!json_is_object(o)) {
        json_decref(o);
        return tr_fail(r, "header metadata is not a JSON object");
    }
    int rc = TIDE_OK;
    if ((rc = tr_get_u32(r, o, "n_layers", 1, 1u << 16, &r->h.n_layers)) ||
        (rc = tr_get_u32(r, o, "n_experts", 1, 65536, &r->h.n_experts)) ||
        (rc = tr_get_u32(r, o, "top_k", 1, 65536, &r->h.top_k)) ||
        (rc = tr_get_u32(r, o, "hidden", 1, 1u << 24, &r->h.hidden)) ||
        (rc = tr_get_u32(r, o, "inter", 1, 1u << 24, &r->h.inter)) ||
        (rc = tr_get_u32(r, o, "block_length", 1, 1u << 20, &r->h.block_length)) ||
        (rc = tr_get_u32(r, o, "steps", 1, 1u << 20, &r->h.steps))) {
        json_decref(o);
        return rc;
    }
    json_t *eb = json_object_get(o, "expert_bytes");
    json_t *th = json_object_get(o, "threshold");
    json_t *model = json_object_get(o, "model");
    json_t *dec = json_object_get(o, "decoder"), *decs = json_object_get(o, "decoder_settings");
    if (!json_is_integer(eb) || json_integer_value(eb) < 1 || !json_is_number(th) ||
        (model && !json_is_string(model)) || (dec && !json_is_string(dec)) ||
        (decs && !json_is_string(decs))) {
        json_decref(o);
        return tr_fail(r, "header fields expert_bytes, threshold, model or decoder are malformed");
    }
    if (r->h.top_k > r->h.n_experts) {
        json_decref(o);
        return tr_fail(r, "header says top_k > n_experts");
    }
    r->h.expert_bytes = (uint64_t)json_integer_value(eb);
    r->h.threshold = json_number_value(th);
    r->model = strdup(model ? json_string_value(model) : "");
    r->h.model = r->model;
    r->decoder = strdup(dec ? json_string_value(dec) : "");
    r->decoder_settings = strdup(decs ? json_string_value(decs) : "");
    r->h.decoder = r->decoder;
    r->h.decoder_settings = r->decoder_settings;
    json_decref(o);
    if (!r->decoder || !r->decoder_settings)
        return TIDE_E_NOMEM;
    r->id_bytes = r->h.n_experts <= 256 ? 1 : 2;
    r->data = 16 + len + (8 - (16 + len) % 8) % 8;
    if (r->data > r->size)
        return tr_fail(r, "truncated header padding");
    r->pos = r->data;
    return r->model ? TIDE_OK : TIDE_E_NOMEM;
}

int tide_trace_reader_open(const char *path, struct tide_trace_reader **out)
{
    struct tide_trace_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return TIDE_E_NOMEM;
    }
    /* O_NONBLOCK: a FIFO given as a trace must not block the open. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    int rc = TIDE_OK;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        tide_error("trace %s: cannot open: %s", path, strerror(err));
        rc = err == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_IO;
    } else if (!S_ISREG(st.st_mode)) {
        rc = tr_fail(r, "not a regular file");
    } else if (st.st_size == 0) {
        rc = tr_fail(r, "the file is empty");
    } else {
        r->size = (size_t)st.st_size;
        void *m = mmap(NULL, r->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            tide_error("trace %s: cannot map: %s", path, strerror(errno));
            rc = TIDE_E_IO;
        } else {
            r->map = m;
            madvise(m, r->size, MADV_SEQUENTIAL);
            rc = tr_header(r);
        }
    }
    if (fd >= 0)
        close(fd);
    if (rc != TIDE_OK) {
        tide_trace_reader_close(r);
        return rc;
    }
    *out = r;
    return TIDE_OK;
}

const struct tide_trace_header *tide_trace_reader_header(const struct tide_trace_reader *r)
{
    return &r->h;
}

void tide_trace_reader_rewind(struct tide_trace_reader *r)
{
    r->pos = r->data;
}

static int tr_truncated(struct tide_trace_reader *r, size_t at, const char *what)
{
    tide_error("trace %s: truncated %s record at byte %zu (file is %zu bytes)", r->path, what, at,
               r->size);
    return TIDE_E_FORMAT;
}

int tide_trace_reader_next(struct tide_trace_reader *r, struct tide_trace_record *rec)
{
    if (r->pos >= r->size)
        return 0;
    const size_t at = r->pos;
    const uint8_t *p = r->map + at;
    const size_t left = r->size - at;
    memset(rec, 0, sizeof *rec);
    rec->type = (enum tide_trace_rec)p[0];
    switch (p[0]) {
    case TIDE_TREC_PROMPT:
        if (left < 9)
            return tr_truncated(r, at, "prompt");
        rec->prompt_id = tr_u32(p + 1);
        rec->prompt_len = tr_u32(p + 5);
        r->pos += 9;
        return 1;
    case TIDE_TREC_BLOCK:
        if (left < 6)
            return tr_truncated(r, at, "block");
        rec->block = (int32_t)tr_u32(p + 1);
        rec->first_generated = p[5] != 0;
        r->pos += 6;
        return 1;
    case TIDE_TREC_STEP:
        if (left < 5)
            return tr_truncated(r, at, "step");
        rec->step = (int32_t)tr_u32(p + 1);
        r->pos += 5;
        return 1;
    case TIDE_TREC_ROUTE: {
        if (left < 10)
            return tr_truncated(r, at, "routing");
        rec->phase = (enum tide_trace_phase)p[1];
        rec->layer = tr_u32(p + 2);
        rec->n = tr_u32(p + 6);
        if (rec->phase > TIDE_TRACE_KV || rec->layer >= r->h.n_layers) {
            tide_error("trace %s: routing record at byte %zu has phase %d, layer %u (the trace "
                       "has %u MoE layers)",
                       r->path, at, (int)rec->phase, rec->layer, r->h.n_layers);
            return TIDE_E_FORMAT;
        }
        const size_t cnt = (size_t)rec->n * r->h.top_k;
        if (cnt > (left - 10) / (size_t)r->id_bytes)
            return tr_truncated(r, at, "routing");
        if (cnt > r->cap) {
            int32_t *ids = realloc(r->ids, cnt * sizeof *ids);
            if (!ids)
                return TIDE_E_NOMEM;
            r->ids = ids;
            r->cap = cnt;
        }
        const uint8_t *q = p + 10;
        for (size_t i = 0; i < cnt; i++) {
            uint32_t id =
                r->id_bytes == 1 ? q[i] : (uint32_t)q[2 * i] | (uint32_t)q[2 * i + 1] << 8;
            if (id >= r->h.n_experts) {
                tide_error("trace %s: routing record at byte %zu names expert %u (only %u)",
                           r->path, at, id, r->h.n_experts);
                return TIDE_E_FORMAT;
            }
            r->ids[i] = (int32_t)id;
        }
        rec->ids = r->ids;
        r->pos += 10 + cnt * (size_t)r->id_bytes;
        return 1;
    }
    case TIDE_TREC_PROMPT_VEC: {
        if (r->h.version < 2)
            break; /* not a record of version 1 */
        if (left < 5)
            return tr_truncated(r, at, "prompt-vector");
        rec->dim = tr_u32(p + 1);
        if (rec->dim < 1 || rec->dim > (1u << 24)) {
            tide_error("trace %s: prompt-vector record at byte %zu has %u entries (1..%u)", r->path,
                       at, rec->dim, 1u << 24);
            return TIDE_E_FORMAT;
        }
        if (rec->dim > (left - 5) / 4)
            return tr_truncated(r, at, "prompt-vector");
        if (rec->dim > r->cap_vec) {
            float *v = realloc(r->vec, rec->dim * sizeof *v);
            if (!v)
                return TIDE_E_NOMEM;
            r->vec = v;
            r->cap_vec = rec->dim;
        }
        for (uint32_t i = 0; i < rec->dim; i++) {
            uint32_t u = tr_u32(p + 5 + 4 * (size_t)i);
            memcpy(&r->vec[i], &u, sizeof u);
        }
        rec->vec = r->vec;
        r->pos += 5 + 4 * (size_t)rec->dim;
        return 1;
    }
    case TIDE_TREC_JOIN:
        if (r->h.version < 3)
            break; /* not a record of versions 1 and 2 */
        if (left < 9)
            return tr_truncated(r, at, "join");
        rec->prompt_id = tr_u32(p + 1);
        rec->prompt_len = tr_u32(p + 5);
        r->pos += 9;
        return 1;
    case TIDE_TREC_BATCH: {
        if (r->h.version < 3)
            break;
        if (left < 5)
            return tr_truncated(r, at, "batch");
        rec->n_seq = tr_u32(p + 1);
        if (rec->n_seq < 2 || rec->n_seq > (1u << 20)) {
            tide_error("trace %s: batch record at byte %zu holds %u prompts (2..%u)", r->path, at,
                       rec->n_seq, 1u << 20);
            return TIDE_E_FORMAT;
        }
        if (rec->n_seq > (left - 5) / 4)
            return tr_truncated(r, at, "batch");
        if (rec->n_seq > r->cap_seq) {
            uint32_t *q = realloc(r->seq, rec->n_seq * sizeof *q);
            if (!q)
                return TIDE_E_NOMEM;
            r->seq = q;
            r->cap_seq = rec->n_seq;
        }
        for (uint32_t i = 0; i < rec->n_seq; i++)
            r->seq[i] = tr_u32(p + 5 + 4 * (size_t)i);
        rec->seq_id = r->seq;
        r->pos += 5 + 4 * (size_t)rec->n_seq;
        return 1;
    }
    case TIDE_TREC_CONTEXT:
        if (r->h.version < 4)
            break; /* not a record of versions 1 to 3 */
        if (left < 17)
            return tr_truncated(r, at, "context");
        rec->prompt_id = tr_u32(p + 1);
        rec->at = tr_u32(p + 5);
        rec->inserted = tr_u32(p + 9);
        rec->prompt_len = tr_u32(p + 13);
        if (rec->inserted == 0 || rec->at > rec->prompt_len - rec->inserted ||
            rec->inserted > rec->prompt_len) {
            tide_error("trace %s: context record at byte %zu: %u tokens at offset %u make a "
                       "prompt of %u",
                       r->path, at, rec->inserted, rec->at, rec->prompt_len);
            return TIDE_E_FORMAT;
        }
        r->pos += 17;
        return 1;
    }
    tide_error("trace %s: unknown record type %u at byte %zu", r->path, p[0], at);
    return TIDE_E_FORMAT;
}

void tide_trace_reader_close(struct tide_trace_reader *r)
{
    if (!r)
        return;
    if (r->map)
        munmap((void *)r->map, r->size);
    free(r->ids);
    free(r->vec);
    free(r->seq);
    free(r->model);
    free(r->decoder);
    free(r->decoder_settings);
    free(r->path);
    free(r);
}
