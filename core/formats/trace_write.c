/* Routing-trace writer (format: docs/trace-format.md). Records go through a
 * stdio buffer into PATH.tmp, renamed to PATH on a successful close. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tide/log.h"
#include "tide/status.h"
#include "tide/trace_write.h"

struct tide_trace_writer {
    FILE *f;
    char *path;
    char *tmp;
    uint32_t n_experts, top_k;
    int id_bytes;     /* 1 when n_experts <= 256, else 2 */
    uint32_t version; /* of the file: TIDE_TRACE_VERSION, or an appended file's own */
    int err;          /* first write error */
    uint8_t *buf;     /* route payload scratch */
    size_t cap;
};

static void tw_put(struct tide_trace_writer *w, const void *p, size_t n)
{
    if (!w->err && fwrite(p, 1, n, w->f) != n)
        w->err = errno ? errno : EIO;
}

static void tw_u8(struct tide_trace_writer *w, uint8_t v)
{
    tw_put(w, &v, 1);
}

static void tw_u32(struct tide_trace_writer *w, uint32_t v)
{
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    tw_put(w, b, 4);
}

static char *tw_header_json(const struct tide_trace_header *h)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "n_layers", json_integer(h->n_layers));
    json_object_set_new(o, "n_experts", json_integer(h->n_experts));
    json_object_set_new(o, "top_k", json_integer(h->top_k));
    json_object_set_new(o, "hidden", json_integer(h->hidden));
    json_object_set_new(o, "inter", json_integer(h->inter));
    json_object_set_new(o, "expert_bytes", json_integer((json_int_t)h->expert_bytes));
    json_object_set_new(o, "block_length", json_integer(h->block_length));
    json_object_set_new(o, "steps", json_integer(h->steps));
    json_object_set_new(o, "threshold", json_real(h->threshold));
    json_object_set_new(o, "model", json_string(h->model ? h->model : ""));
    if (h->decoder && *h->decoder) {
        json_object_set_new(o, "decoder", json_string(h->decoder));
        json_object_set_new(o, "decoder_settings",
                            json_string(h->decoder_settings ? h->decoder_settings : ""));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return s;
}

static int tw_copy(const char *from, FILE *to)
{
    FILE *in = fopen(from, "rb");
    if (!in)
        return TIDE_E_IO;
    char buf[1 << 16];
    size_t n;
    int rc = TIDE_OK;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, to) != n) {
            rc = TIDE_E_IO;
            break;
        }
    if (ferror(in))
        rc = TIDE_E_IO;
    fclose(in);
    return rc;
}

int tide_trace_writer_open(const char *path, bool append, bool overwrite,
                           const struct tide_trace_header *h, struct tide_trace_writer **out)
{
    bool exists = access(path, F_OK) == 0;
    if (exists && !append && !overwrite) {
        tide_error("trace %s exists; refusing to replace it (append to it, set [output] "
                   "overwrite = true, or choose another name)",
                   path);
        return TIDE_E_CONFIG;
    }
    if (h->n_experts < 1 || h->n_experts > 65536 || h->top_k < 1 || h->n_layers < 1) {
        tide_error("trace %s: shape out of range (%u layers, %u experts, top-%u)", path,
                   h->n_layers, h->n_experts, h->top_k);
        return TIDE_E_INVAL;
    }
    struct tide_trace_writer *w = calloc(1, sizeof *w);
    if (!w)
        return TIDE_E_NOMEM;
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 5);
    if (!w->path || !w->tmp) {
        free(w->path);
        free(w->tmp);
        free(w);
        return TIDE_E_NOMEM;
    }
    sprintf(w->tmp, "%s.tmp", path);
    w->n_experts = h->n_experts;
    w->top_k = h->top_k;
    w->id_bytes = h->n_experts <= 256 ? 1 : 2;
    w->version = TIDE_TRACE_VERSION;
    int rc = TIDE_OK;
    if (exists && append) {
        struct tide_trace_header old;
        struct tide_trace_reader *r;
        if ((rc = tide_trace_reader_open(path, &r)) == TIDE_OK) {
            old = *tide_trace_reader_header(r);
            w->version = old.version;
            if (old.n_layers != h->n_layers || old.n_experts != h->n_experts ||
                old.top_k != h->top_k || old.hidden != h->hidden || old.inter != h->inter) {
                tide_error("trace %s records a model of %u MoE layers x %u experts (top-%u, "
                           "hidden %u), not this one (%u x %u, top-%u, hidden %u); write a new "
                           "trace",
                           path, old.n_layers, old.n_experts, old.top_k, old.hidden, h->n_layers,
                           h->n_experts, h->top_k, h->hidden);
                rc = TIDE_E_FORMAT;
            }
            tide_trace_reader_close(r);
        }
    }
    if (rc == TIDE_OK && !(w->f = fopen(w->tmp, "wb"))) {
        tide_error("trace: cannot create %s: %s", w->tmp, strerror(errno));
        rc = TIDE_E_IO;
    }
    if (rc == TIDE_OK && exists && append) {
        if ((rc = tw_copy(path, w->f)) != TIDE_OK)
            tide_error("trace: cannot copy %s to %s", path, w->tmp);
    } else if (rc == TIDE_OK) {
        char *json = tw_header_json(h);
        if (!json) {
            rc = TIDE_E_NOMEM;
        } else {
            uint32_t len = (uint32_t)strlen(json);
            tw_put(w, TIDE_TRACE_MAGIC, 8);
            tw_u32(w, TIDE_TRACE_VERSION);
            tw_u32(w, len);
            tw_put(w, json, len);
            static const char pad[8] = {0};
            tw_put(w, pad, (8 - (16 + len) % 8) % 8);
            free(json);
        }
    }
    if (rc != TIDE_OK) {
        if (w->f) {
            fclose(w->f);
            remove(w->tmp);
        }
        free(w->path);
        free(w->tmp);
        free(w);
        return rc;
    }
    *out = w;
    return TIDE_OK;
}

int tide_trace_prompt(struct tide_trace_writer *w, uint32_t prompt_id, uint32_t prompt_len)
{
    tw_u8(w, TIDE_TREC_PROMPT);
    tw_u32(w, prompt_id);
    tw_u32(w, prompt_len);
    return w->err ? TIDE_E_IO : TIDE_OK;
}

int tide_trace_prompt_vector(struct tide_trace_writer *w, const float *vec, uint32_t dim)
{
    if (w->version < 2)
        return TIDE_OK;
    tw_u8(w, TIDE_TREC_PROMPT_VEC);
    tw_u32(w, dim);
    for (uint32_t i = 0; i < dim; i++) {
        uint32_t u;
        memcpy(&u, &vec[i], sizeof u);
        tw_u32(w, u);
    }
    return w->err ? TIDE_E_IO : TIDE_OK;
}

/* Version 3 records refused on an older file (appending). */
static int tw_v3(const struct tide_trace_writer *w, const char *what)
{
    if (w->version >= 3)
        return TIDE_OK;
    tide_error("trace %s: a %s record needs format version 3; the file is version %u (write "
               "batched runs to a new trace)",
               w->path, what, w->version);
    return TIDE_E_UNSUPPORTED;
}

int tide_trace_join(struct tide_trace_writer *w, uint32_t prompt_id, uint32_t prompt_len)
{
    int rc = tw_v3(w, "join");
    if (rc != TIDE_OK)
        return rc;
    tw_u8(w, TIDE_TREC_JOIN);
    tw_u32(w, prompt_id);
    tw_u32(w, prompt_len);
    return w->err ? TIDE_E_IO : TIDE_OK;
}

int tide_trace_batch(struct tide_trace_writer *w, uint32_t n, const uint32_t *prompt_ids)
{
    int rc = tw_v3(w, "batch");
    if (rc != TIDE_OK)
        return rc;
    tw_u8(w, TIDE_TREC_BATCH);
    tw_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        tw_u32(w, prompt_ids[i]);
    return w->err ? TIDE_E_IO : TIDE_OK;
}

int tide_trace_context(struct tide_trace_writer *w, uint32_t prompt_id, uint32_t at,
                       uint32_t inserted, uint32_t prompt_len)
{
    if (w->version < 4) {
        tide_error("trace %s: a context record (DIP) needs format version 4; the file is version "
                   "%u (write runs with [dip] to a new trace)",
                   w->path, w->version);
        return TIDE_E_UNSUPPORTED;
    }
    tw_u8(w, TIDE_TREC_CONTEXT);
    tw_u32(w, prompt_id);
    tw_u32(w, at);
    tw_u32(w, inserted);
    tw_u32(w, prompt_len);
    return w->err ? TIDE_E_IO : TIDE_OK;
}

int tide_trace_block(struct tide_trace_writer *w, int32_t block, bool first_generated)
{
    tw_u8(w, TIDE_TREC_BLOCK);
    tw_u32(w, (uint32_t)block);
    tw_u8(w, first_generated ? 1 : 0);
    return w->err ? TIDE_E_IO : TIDE_OK;
}

int tide_trace_step(struct tide_trace_writer *w, int32_t step)
{
    tw_u8(w, TIDE_TREC_STEP);
    tw_u32(w, (uint32_t)step);
    return w->err ? TIDE_E_IO : TIDE_OK;
}

int tide_trace_route(struct tide_trace_writer *w, enum tide_trace_phase phase, uint32_t layer,
                     uint32_t n, const int32_t *ids)
{
    size_t need = (size_t)n * w->top_k * (size_t)w->id_bytes;
    if (need > w->cap) {
        uint8_t *b = realloc(w->buf, need);
        if (!b)
            return TIDE_E_NOMEM;
        w->buf = b;
        w->cap = need;
    }
    for (size_t i = 0; i < (size_t)n * w->top_k; i++) {
        uint32_t id = (uint32_t)ids[i];
        if (id >= w->n_experts) {
            tide_error("trace: expert id %u out of range", id);
            return TIDE_E_RANGE;
        }
        if (w->id_bytes == 1) {
            w->buf[i] = (uint8_t)id;
        } else {
            w->buf[2 * i] = (uint8_t)id;
            w->buf[2 * i + 1] = (uint8_t)(id >> 8);
        }
    }
    tw_u8(w, TIDE_TREC_ROUTE);
    tw_u8(w, (uint8_t)phase);
    tw_u32(w, layer);
    tw_u32(w, n);
    tw_put(w, w->buf, need);
    return w->err ? TIDE_E_IO : TIDE_OK;
}

int tide_trace_writer_close(struct tide_trace_writer *w, bool keep)
{
    if (!w)
        return TIDE_OK;
    int rc = w->err ? TIDE_E_IO : TIDE_OK;
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        rc = TIDE_E_IO;
    if (fclose(w->f) != 0)
        rc = TIDE_E_IO;
    if (keep && rc == TIDE_OK && rename(w->tmp, w->path) != 0)
        rc = TIDE_E_IO;
    if (!keep || rc != TIDE_OK)
        remove(w->tmp);
    if (keep && rc != TIDE_OK)
        tide_error("trace: cannot write %s", w->path);
    free(w->buf);
    free(w->path);
    free(w->tmp);
    free(w);
    return rc;
}

static int tw_sink_prompt(void *u, uint32_t id, uint32_t len)
{
    return tide_trace_prompt(u, id, len);
}

static int tw_sink_prompt_vector(void *u, const float *vec, uint32_t dim)
{
    return tide_trace_prompt_vector(u, vec, dim);
}

static int tw_sink_join(void *u, uint32_t id, uint32_t len)
{
    return tide_trace_join(u, id, len);
}

static int tw_sink_batch(void *u, uint32_t n, const uint32_t *ids)
{
    return tide_trace_batch(u, n, ids);
}

static int tw_sink_context(void *u, uint32_t id, uint32_t at, uint32_t n, uint32_t len)
{
    return tide_trace_context(u, id, at, n, len);
}

static int tw_sink_block(void *u, int32_t block, bool first)
{
    return tide_trace_block(u, block, first);
}

static int tw_sink_step(void *u, int32_t step)
{
    return tide_trace_step(u, step);
}

static int tw_sink_route(void *u, enum tide_trace_phase ph, uint32_t layer, uint32_t n,
                         const int32_t *ids)
{
    return tide_trace_route(u, ph, layer, n, ids);
}

struct tide_trace_sink tide_trace_writer_sink(struct tide_trace_writer *w)
{
    return (struct tide_trace_sink){.user = w,
                                    .prompt = tw_sink_prompt,
                                    .block = tw_sink_block,
                                    .step = tw_sink_step,
                                    .route = tw_sink_route,
                                    .prompt_vector = tw_sink_prompt_vector,
                                    .join = tw_sink_join,
                                    .batch = tw_sink_batch,
                                    .context = tw_sink_context};
}
