/* DIP, the Dynamic In-Context Planner (dip.h, docs/dip.md). */
#include "dip.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/status.h"

/* One example of the pool. */
struct dip_example {
    int32_t *ids; /* the rendered example (template), tokenized alone */
    size_t n;
    int32_t *qids; /* its question, tokenized alone: its vector ranks it */
    size_t n_q;
};

struct tide_dip {
    char pool[1024];
    bool dynamic; /* mode = dynamic; false: upfront */
    int shots, first, per_block;
    double lambda;
    int64_t budget;
    int n, dim;
    struct dip_example *ex; /* [n] */
    float *vec;             /* [n][dim] the questions' vectors */
    int32_t *head;          /* the chat template's head, tokenized (NULL: none) */
    size_t n_head;
};

struct tide_dip_run {
    const struct tide_dip *dp;
    int n_sel;
    int *sel;      /* [n_sel] pool indices, in rank order */
    double *score; /* [n_sel] their MMR scores */
    int *block_of; /* [n_sel] the block each enters before; -1: never */
    int64_t at0;   /* the prompt offset of the first example (after the chat head) */
    int64_t at;    /* where the next example goes */
    int next;      /* the next ranked example to enter */
    double rel0;   /* cosine similarity of the query to the first pick */
    const int32_t *query;
    int64_t n_query;
    int32_t *ids; /* the prompt now: head, examples in, query (composed) */
    int64_t n;    /* its tokens */
    int64_t n_initial;
    int64_t room;       /* tokens still to come */
    int32_t *grow;      /* the tokens of the last insertion */
    int64_t n_inserted; /* tokens inserted during generation so far */
    int insertions;
    int blocks; /* the generation's blocks, as scheduled */
};

/* "\n" and "\t" escapes of an INI value (which holds no newline). */
static void dip_unescape(const char *in, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; in[i] && j + 1 < cap; i++) {
        if (in[i] == '\\' && (in[i + 1] == 'n' || in[i + 1] == 't' || in[i + 1] == '\\')) {
            i++;
            out[j++] = in[i] == 'n' ? '\n' : in[i] == 't' ? '\t' : '\\';
        } else {
            out[j++] = in[i];
        }
    }
    out[j] = 0;
}

/* tmpl with {question} and {answer} replaced; malloc'd. */
static char *dip_render(const char *tmpl, const char *q, const char *a)
{
    size_t cap = strlen(tmpl) + 1, len = 0;
    for (const char *p = tmpl; (p = strchr(p, '{')); p++)
        cap += strlen(q) + strlen(a);
    char *out = malloc(cap);
    if (!out)
        return NULL;
    for (const char *p = tmpl; *p;) {
        if (!strncmp(p, "{question}", 10)) {
            memcpy(out + len, q, strlen(q));
            len += strlen(q);
            p += 10;
        } else if (!strncmp(p, "{answer}", 8)) {
            memcpy(out + len, a, strlen(a));
            len += strlen(a);
            p += 8;
        } else {
            out[len++] = *p++;
        }
    }
    out[len] = 0;
    return out;
}

/* The string field key of a pool line, or NULL (logged). */
static const char *dip_field(const struct tide_dip *dp, json_t *o, int line, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (json_is_string(v))
        return json_string_value(v);
    tide_error("[dip] pool %s, line %d: %s \"%s\" (each line is {\"question\": \"...\", "
               "\"answer\": \"...\"})",
               dp->pool, line, v ? "a non-string" : "no", key);
    return NULL;
}

/* Tokenize one pool line's example and its question's vector. */
static int dip_add(struct tide_dip *dp, const struct tide_tokenizer *tok, const char *tmpl,
                   const struct tide_model_ops *mops, struct tide_model *m, const char *q,
                   const char *a, int line)
{
    struct dip_example *e = &dp->ex[dp->n];
    int32_t *qids = NULL;
    size_t nq = 0;
    char *text = dip_render(tmpl, q, a);
    if (!text)
        return TIDE_E_NOMEM;
    int rc = tide_tokenizer_encode(tok, text, strlen(text), &e->ids, &e->n);
    free(text);
    if (rc == TIDE_OK)
        rc = tide_tokenizer_encode(tok, q, strlen(q), &qids, &nq);
    if (rc == TIDE_OK && (!nq || !e->n)) {
        tide_error("[dip] pool %s, line %d: an empty %s", dp->pool, line,
                   nq ? "example" : "question");
        rc = TIDE_E_FORMAT;
    }
    if (rc == TIDE_OK)
        rc = mops->prompt_vector(m, qids, (int64_t)nq, dp->vec + (size_t)dp->n * (size_t)dp->dim);
    if (rc != TIDE_OK) {
        free(qids);
        free(e->ids);
        e->ids = NULL;
        return rc;
    }
    e->qids = qids;
    e->n_q = nq;
    dp->n++;
    return TIDE_OK;
}

static int dip_load(struct tide_dip *dp, const struct tide_tokenizer *tok, const char *tmpl,
                    const struct tide_model_ops *mops, struct tide_model *m)
{
    FILE *f = fopen(dp->pool, "r");
    if (!f) {
        tide_error("[dip] pool %s: %s", dp->pool, strerror(errno));
        return errno == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_IO;
    }
    char *buf = NULL;
    size_t cap = 0, ex_cap = 0;
    ssize_t len;
    int rc = TIDE_OK, line = 0;
    while (rc == TIDE_OK && (len = getline(&buf, &cap, f)) >= 0) {
        line++;
        size_t i = 0;
        while (i < (size_t)len &&
               (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
            i++;
        if (i == (size_t)len)
            continue; /* a blank line */
        json_error_t err;
        json_t *o = json_loadb(buf, (size_t)len, 0, &err);
        if (!json_is_object(o)) {
            tide_error("[dip] pool %s, line %d: %s", dp->pool, line,
                       o ? "not a JSON object" : err.text);
            json_decref(o);
            rc = TIDE_E_FORMAT;
            break;
        }
        const char *q = dip_field(dp, o, line, "question");
        const char *a = q ? dip_field(dp, o, line, "answer") : NULL;
        if (!a) {
            rc = TIDE_E_FORMAT;
        } else if ((size_t)dp->n == ex_cap) {
            ex_cap = ex_cap ? 2 * ex_cap : 64;
            struct dip_example *ne = realloc(dp->ex, sizeof *ne * ex_cap);
            float *nv = ne ? realloc(dp->vec, sizeof *nv * ex_cap * (size_t)dp->dim) : NULL;
            if (ne)
                dp->ex = ne;
            if (nv)
                dp->vec = nv;
            rc = ne && nv ? TIDE_OK : TIDE_E_NOMEM;
        }
        if (rc == TIDE_OK)
            rc = dip_add(dp, tok, tmpl, mops, m, q, a, line);
        json_decref(o);
    }
    free(buf);
    fclose(f);
    if (rc == TIDE_OK && dp->n == 0) {
        tide_error("[dip] pool %s holds no example", dp->pool);
        rc = TIDE_E_FORMAT;
    }
    return rc;
}

int tide_dip_open(const struct tide_opts *o, const struct tide_tokenizer *tok,
                  const char *chat_template, const struct tide_model_ops *mops,
                  struct tide_model *m, struct tide_dip **out)
{
    *out = NULL;
    const char *pool = tide_opts_str(o, "pool");
    if (!pool || !pool[0])
        return TIDE_OK;
    if (!TIDE_OPS_HAS(mops, prompt_vector) || !mops->prompt_vector) {
        tide_error("[dip] pool: the model plugin has no prompt_vector, which DIP ranks the "
                   "examples with");
        return TIDE_E_UNSUPPORTED;
    }
    struct tide_dip *dp = calloc(1, sizeof *dp);
    if (!dp)
        return TIDE_E_NOMEM;
    snprintf(dp->pool, sizeof dp->pool, "%s", pool);
    dp->dynamic = !strcmp(tide_opts_str(o, "mode"), "dynamic");
    dp->shots = (int)tide_opts_int(o, "shots");
    dp->first = (int)tide_opts_int(o, "first");
    dp->per_block = (int)tide_opts_int(o, "per_block");
    dp->lambda = tide_opts_float(o, "lambda");
    dp->budget = tide_opts_int(o, "budget");
    dp->dim = mops->info(m)->hidden;
    char tmpl[4096];
    dip_unescape(tide_opts_str(o, "template"), tmpl, sizeof tmpl);
    int rc = TIDE_OK;
    if (!strstr(tmpl, "{question}")) {
        tide_error("[dip] template must hold {question} (and usually {answer}): \"%s\"",
                   tide_opts_str(o, "template"));
        rc = TIDE_E_CONFIG;
    }
    if (rc == TIDE_OK)
        rc = dip_load(dp, tok, tmpl, mops, m);
    const char *ph = chat_template ? strstr(chat_template, "{prompt}") : NULL;
    if (rc == TIDE_OK && ph && ph > chat_template)
        rc = tide_tokenizer_encode(tok, chat_template, (size_t)(ph - chat_template), &dp->head,
                                   &dp->n_head);
    if (rc != TIDE_OK) {
        tide_dip_close(dp);
        return rc;
    }
    *out = dp;
    return TIDE_OK;
}

void tide_dip_close(struct tide_dip *dp)
{
    if (!dp)
        return;
    for (int i = 0; i < dp->n; i++) {
        free(dp->ex[i].ids);
        free(dp->ex[i].qids);
    }
    free(dp->ex);
    free(dp->vec);
    free(dp->head);
    free(dp);
}

static double dip_cos(const float *a, const float *b, int dim)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < dim; i++) {
        ab += (double)a[i] * (double)b[i];
        aa += (double)a[i] * (double)a[i];
        bb += (double)b[i] * (double)b[i];
    }
    return aa > 0 && bb > 0 ? ab / (sqrt(aa) * sqrt(bb)) : 0.0;
}

int tide_dip_mmr(const float *q, const float *vecs, int n, int dim, double lambda, int k,
                 const int64_t *cost, int64_t budget, int *order, double *score)
{
    bool *taken = calloc((size_t)(n > 0 ? n : 1), sizeof *taken);
    double *red = calloc((size_t)(n > 0 ? n : 1), sizeof *red); /* max sim to the chosen */
    int got = 0;
    int64_t used = 0;
    while (taken && red && got < k) {
        int best = -1;
        double bs = 0;
        for (int i = 0; i < n; i++) {
            if (taken[i] || (budget > 0 && used + cost[i] > budget))
                continue;
            const double rel = dip_cos(q, vecs + (size_t)i * (size_t)dim, dim);
            const double s = lambda * rel - (1.0 - lambda) * (got ? red[i] : 0.0);
            if (best < 0 || s > bs) {
                best = i;
                bs = s;
            }
        }
        if (best < 0)
            break;
        taken[best] = true;
        used += cost[best];
        order[got] = best;
        if (score)
            score[got] = bs;
        for (int i = 0; i < n; i++) {
            const double sj =
                dip_cos(vecs + (size_t)i * (size_t)dim, vecs + (size_t)best * (size_t)dim, dim);
            if (!got || sj > red[i])
                red[i] = sj;
        }
        got++;
    }
    free(taken);
    free(red);
    return got;
}

void tide_dip_schedule(int n, int first, int per_block, int blocks, int *block_of)
{
    if (first > n)
        first = n;
    int per = per_block;
    if (per <= 0) {
        const int rest = n - first, later = blocks > 1 ? blocks - 1 : 1;
        per = rest > 0 ? (rest + later - 1) / later : 1;
    }
    for (int i = 0; i < n; i++) {
        const int b = i < first ? 0 : 1 + (i - first) / per;
        block_of[i] = b < (blocks > 1 ? blocks : 1) ? b : -1;
    }
}

int tide_dip_start(const struct tide_dip *dp, const struct tide_model_ops *mops,
                   struct tide_model *m, const int32_t *prompt, int64_t n,
                   struct tide_dip_run **out)
{
    *out = NULL;
    struct tide_dip_run *r = calloc(1, sizeof *r);
    const int k = dp->shots < dp->n ? dp->shots : dp->n;
    float *qv = malloc(sizeof *qv * (size_t)dp->dim);
    int64_t *cost = malloc(sizeof *cost * (size_t)dp->n);
    if (!r || !qv || !cost || !(r->sel = malloc(sizeof *r->sel * (size_t)(k ? k : 1))) ||
        !(r->score = malloc(sizeof *r->score * (size_t)(k ? k : 1))) ||
        !(r->block_of = malloc(sizeof *r->block_of * (size_t)(k ? k : 1)))) {
        free(qv);
        free(cost);
        tide_dip_run_free(r);
        return TIDE_E_NOMEM;
    }
    r->dp = dp;
    /* The examples go after the chat template's head when the prompt
     * begins with it; the query is the rest. */
    r->at0 = dp->head && (int64_t)dp->n_head < n &&
                     !memcmp(prompt, dp->head, sizeof *prompt * dp->n_head)
                 ? (int64_t)dp->n_head
                 : 0;
    r->query = prompt;
    r->n_query = n;
    int rc = mops->prompt_vector(m, prompt + r->at0, n - r->at0, qv);
    if (rc == TIDE_OK) {
        for (int i = 0; i < dp->n; i++)
            cost[i] = (int64_t)dp->ex[i].n;
        r->n_sel = tide_dip_mmr(qv, dp->vec, dp->n, dp->dim, dp->lambda, k, cost, dp->budget,
                                r->sel, r->score);
        r->rel0 =
            r->n_sel ? dip_cos(qv, dp->vec + (size_t)r->sel[0] * (size_t)dp->dim, dp->dim) : 0.0;
    }
    free(qv);
    free(cost);
    if (rc != TIDE_OK) {
        tide_dip_run_free(r);
        return rc;
    }
    *out = r;
    return TIDE_OK;
}

int64_t tide_dip_tokens(const struct tide_dip_run *r)
{
    int64_t t = 0;
    for (int i = 0; i < r->n_sel; i++)
        t += (int64_t)r->dp->ex[r->sel[i]].n;
    return t;
}

int tide_dip_compose(struct tide_dip_run *r, int blocks)
{
    const struct tide_dip *dp = r->dp;
    r->blocks = blocks;
    if (dp->dynamic)
        tide_dip_schedule(r->n_sel, dp->first, dp->per_block, blocks, r->block_of);
    else
        for (int i = 0; i < r->n_sel; i++)
            r->block_of[i] = 0;
    const int64_t total = r->n_query + tide_dip_tokens(r);
    free(r->ids);
    free(r->grow);
    if (!(r->ids = malloc(sizeof *r->ids * (size_t)total)) ||
        !(r->grow = malloc(sizeof *r->grow * (size_t)(total ? total : 1))))
        return TIDE_E_NOMEM;
    memcpy(r->ids, r->query, sizeof *r->ids * (size_t)r->at0);
    r->n = r->at0;
    r->room = 0;
    r->next = 0;
    for (int i = 0; i < r->n_sel; i++) {
        const struct dip_example *e = &dp->ex[r->sel[i]];
        if (r->block_of[i] == 0) {
            memcpy(r->ids + r->n, e->ids, sizeof *r->ids * e->n);
            r->n += (int64_t)e->n;
            r->next = i + 1;
        } else if (r->block_of[i] > 0) {
            r->room += (int64_t)e->n;
        }
    }
    r->at = r->n;
    memcpy(r->ids + r->n, r->query + r->at0, sizeof *r->ids * (size_t)(r->n_query - r->at0));
    r->n += r->n_query - r->at0;
    r->n_initial = r->n;
    return TIDE_OK;
}

const int32_t *tide_dip_prompt(const struct tide_dip_run *r, int64_t *n)
{
    *n = r->n_initial;
    return r->ids;
}

int64_t tide_dip_room(const struct tide_dip_run *r)
{
    return r->room;
}

int64_t tide_dip_grow(struct tide_dip_run *r, int block, const int32_t **ids, int64_t *at)
{
    int64_t m = 0;
    while (r->next < r->n_sel && r->block_of[r->next] >= 0 && r->block_of[r->next] <= block) {
        const struct dip_example *e = &r->dp->ex[r->sel[r->next++]];
        memcpy(r->grow + m, e->ids, sizeof *r->grow * e->n);
        m += (int64_t)e->n;
    }
    *ids = r->grow;
    *at = r->at;
    if (m) {
        r->at += m;
        r->n_inserted += m;
        r->insertions++;
    }
    return m;
}

json_t *tide_dip_json(const struct tide_dip *dp, const struct tide_dip_run *r)
{
    json_t *o = json_object(), *sel = json_array(), *q = json_array();
    if (!o || !sel || !q) {
        json_decref(o);
        json_decref(sel);
        json_decref(q);
        return NULL;
    }
    json_object_set_new(o, "pool", json_string(dp->pool));
    json_object_set_new(o, "pool_size", json_integer(dp->n));
    json_object_set_new(o, "mode", json_string(dp->dynamic ? "dynamic" : "upfront"));
    json_object_set_new(o, "lambda", json_real(dp->lambda));
    json_object_set_new(o, "shots", json_integer(dp->shots));
    json_object_set_new(o, "budget", json_integer(dp->budget));
    json_object_set_new(o, "first", json_integer(dp->first));
    json_object_set_new(o, "per_block", json_integer(dp->per_block));
    json_object_set_new(o, "query_offset", json_integer(r->at0));
    for (int64_t i = r->at0; i < r->n_query; i++)
        json_array_append_new(q, json_integer(r->query[i]));
    json_object_set_new(o, "query_ids", q);
    json_t *qs = json_array();
    for (int i = 0; qs && i < dp->n; i++) {
        json_t *e = json_object(), *ids = json_array();
        for (size_t t = 0; t < dp->ex[i].n; t++)
            json_array_append_new(ids, json_integer(dp->ex[i].ids[t]));
        json_t *qi = json_array();
        for (size_t t = 0; t < dp->ex[i].n_q; t++)
            json_array_append_new(qi, json_integer(dp->ex[i].qids[t]));
        json_object_set_new(e, "tokens", json_integer((json_int_t)dp->ex[i].n));
        json_object_set_new(e, "ids", ids);
        json_object_set_new(e, "question_ids", qi);
        json_array_append_new(qs, e);
    }
    json_object_set_new(o, "examples", qs);
    for (int i = 0; i < r->n_sel; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "index", json_integer(r->sel[i]));
        json_object_set_new(e, "score", json_real(r->score[i]));
        json_object_set_new(e, "tokens", json_integer((json_int_t)dp->ex[r->sel[i]].n));
        json_object_set_new(e, "block", json_integer(r->block_of[i]));
        json_array_append_new(sel, e);
    }
    json_object_set_new(o, "selected", sel);
    json_object_set_new(o, "initial_prompt_tokens", json_integer(r->n_initial));
    json_object_set_new(o, "room", json_integer(r->room));
    json_object_set_new(o, "blocks", json_integer(r->blocks));
    return o;
}

void tide_dip_summary(const struct tide_dip_run *r, char *buf, size_t len)
{
    int up = 0, later = 0, never = 0;
    for (int i = 0; i < r->n_sel; i++) {
        up += r->block_of[i] == 0;
        later += r->block_of[i] > 0;
        never += r->block_of[i] < 0;
    }
    snprintf(
        buf, len,
        "dip: %d of %d examples (%lld tokens, lambda %g): %d up front (prompt of %lld tokens), "
        "%d to enter during generation (%lld tokens)%s",
        r->n_sel, r->dp->n, (long long)tide_dip_tokens(r), r->dp->lambda, up,
        (long long)r->n_initial, later, (long long)r->room,
        never ? ", some past the last block never enter" : "");
}

int tide_dip_insertions(const struct tide_dip_run *r)
{
    return r->insertions;
}

void tide_dip_run_free(struct tide_dip_run *r)
{
    if (!r)
        return;
    free(r->sel);
    free(r->score);
    free(r->block_of);
    free(r->ids);
    free(r->grow);
    free(r);
}
