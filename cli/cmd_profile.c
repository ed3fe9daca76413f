/* `tide profile`: measure this machine's expert times and copy bandwidth
 * and write a hardware profile INI (docs/profiles.md).
 *
 * Host experts run on the host backend (backend-cpu-onednn) exactly as the
 * dispatcher runs them: expert_create from views into a file mapping (as
 * the mmapped checkpoint), then expert_ffn over `rows` gathered rows, cycling
 * through enough distinct experts that the weights come from DRAM. With a
 * CUDA device, the device curve is expert_ffn on backend-cuda, host to device
 * is slot_load + copy_sync (the promotion path, from the registered
 * mapping), device to host is a large read, the latency a one-row write.
 * Without one, the host backend also plays the device, as in the engine:
 * the device curve is the host curve, promotions are its slot_load (a memory
 * copy), and copies do not overlap compute. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "engine.h"
#include "tide/backend.h"
#include "tide/log.h"
#include "tide/plugin.h"
#include "tide/profile.h"
#include "tide/quant.h"
#include "tide/status.h"

static double prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void prof_usage(FILE *f)
{
    fprintf(f,
            "usage: tide profile OUT.ini [--force] [--hidden N] [--inter N] [--rows LIST]\n"
            "                    [--experts N] [--format bf16|q8_0|q4_0|fp8] [--device auto|none]\n"
            "                    [--name NAME]\n"
            "                    [--model DIR [--prompts FILE]] [-c CONFIG] [--set "
            "section.key=value]\n\n"
            "Measures this machine and writes a hardware profile for `tide sim` and\n"
            "policy-tide's interval = auto: host expert time against rows (the host\n"
            "backend, e.g. backend-cpu-onednn with its [backend-cpu-onednn] threads), memory\n"
            "copy bandwidth and, when a CUDA device is usable (--device auto), device\n"
            "expert time, promotion (slot_load) bandwidth, device-to-host bandwidth and the\n"
            "latency of a small copy. Without a device the host backend plays the device,\n"
            "as in the engine. Defaults: LLaDA2.0-mini experts (hidden 2048, inter 512),\n"
            "rows 1,2,4,8,16,32,64,128,256, and enough distinct experts (>= 256 MiB, >= 24)\n"
            "that their weights come from DRAM, not from a cache.\n"
            "With --model DIR, also the placement-independent part of a forward of that\n"
            "checkpoint (attention, router, shared expert, dense layers, head, sampling):\n"
            "a short generation with every expert on the device, less the expert time,\n"
            "per token of each MoE layer's forwards (dense_us_per_token); the expert shape\n"
            "then defaults to the model's. It depends on the prompts (their lengths, the\n"
            "steps they need): --prompts FILE (one per line, '#' comments, the first 8)\n"
            "measures on the workload the profile is for (default: one built-in prompt).\n"
            "--format measures experts block-quantized in that format (docs/quantization.md);\n"
            "the profile then says so ([expert] format) and binds to such experts only.\n"
            "An existing OUT.ini is kept unless --force.\n");
}

struct prof_ctx {
    struct cli_ctx c;
    const char *out, *name, *device, *model, *prompts;
    bool shape_given; /* --hidden or --inter */
    bool force;
    int hidden, inter, n_experts;
    double rows[TIDE_PROFILE_MAX_POINTS];
    int n_rows;
    /* weights: a file mapping holding n_experts experts */
    void *map;
    size_t map_bytes;
    struct tide_view (*views)[3];  /* [n_experts][gate, up, down] */
    struct tide_view (*scales)[3]; /* their scales when quantized (--format) */
    int qfmt, qblock[2];           /* --format: the experts' weight format */
    bool format_given;
};

static int prof_args(struct prof_ctx *p, int argc, char **argv)
{
    p->hidden = 2048;
    p->inter = 512;
    p->n_experts = 0; /* auto: prof_experts() */
    p->device = "auto";
    const double def_rows[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    p->n_rows = 9;
    memcpy(p->rows, def_rows, sizeof def_rows);
    for (int i = 1; i < argc; i++) {
        int r = cli_common_arg(&p->c, argc, argv, &i);
        if (r < 0)
            return TIDE_E_CONFIG;
        if (r > 0)
            continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--force")) {
            p->force = true;
            continue;
        }
        if (a[0] != '-') {
            if (p->out) {
                tide_error("profile: one output file, not '%s' and '%s'", p->out, a);
                return TIDE_E_CONFIG;
            }
            p->out = a;
            continue;
        }
        if (!v) {
            tide_error("%s needs a value", a);
            return TIDE_E_CONFIG;
        }
        i++;
        char *end;
        long x = strtol(v, &end, 10);
        if (!strcmp(a, "--hidden") || !strcmp(a, "--inter") || !strcmp(a, "--experts")) {
            if (*end || x < 1 || x > (1 << 20)) {
                tide_error("%s %s: expected a positive integer", a, v);
                return TIDE_E_CONFIG;
            }
            *(!strcmp(a, "--hidden")  ? &p->hidden
              : !strcmp(a, "--inter") ? &p->inter
                                      : &p->n_experts) = (int)x;
            p->shape_given |= strcmp(a, "--experts") != 0;
        } else if (!strcmp(a, "--rows")) {
            p->n_rows = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                long rr = strtol(t, &end, 10);
                if (*end || rr < 1 || rr > 65536 || p->n_rows == TIDE_PROFILE_MAX_POINTS ||
                    (p->n_rows && rr <= p->rows[p->n_rows - 1])) {
                    tide_error("--rows %s: expected ascending integers in [1, 65536], at most %d",
                               v, TIDE_PROFILE_MAX_POINTS);
                    return TIDE_E_CONFIG;
                }
                p->rows[p->n_rows++] = (double)rr;
            }
            if (!p->n_rows) {
                tide_error("--rows is empty");
                return TIDE_E_CONFIG;
            }
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "none")) {
                tide_error("--device %s: expected auto or none", v);
                return TIDE_E_CONFIG;
            }
            p->device = v;
        } else if (!strcmp(a, "--name")) {
            p->name = v;
        } else if (!strcmp(a, "--format")) {
            if (tide_qfmt_parse(v, &p->qfmt)) {
                tide_error("--format %s: expected bf16, q8_0, q4_0 or fp8", v);
                return TIDE_E_CONFIG;
            }
            tide_qfmt_default_block(p->qfmt, p->qblock);
            p->format_given = true;
        } else if (!strcmp(a, "--model")) {
            p->model = v;
        } else if (!strcmp(a, "--prompts")) {
            p->prompts = v;
        } else {
            char hint[160];
            cli_flag_hint(a, prof_usage, hint, sizeof hint);
            tide_error("profile: unknown option '%s'%s (see tide profile --help)", a, hint);
            return TIDE_E_CONFIG;
        }
    }
    if (!p->out) {
        tide_error("profile: name the output file (e.g. config/profiles/this-machine.ini)");
        return TIDE_E_CONFIG;
    }
    if (!p->force && access(p->out, F_OK) == 0) {
        tide_error("profile %s exists; refusing to replace it (use --force)", p->out);
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

/* Distinct experts to cycle through: enough that their weights (at least
 * 256 MiB, at least 24 experts) cannot stay in a CPU's last-level cache, as
 * a model's experts do not; 24 experts of a small shape fit in a 32 MiB L3,
 * which made experts look several times faster than the engine runs them. */
static void prof_experts(struct prof_ctx *p)
{
    if (p->n_experts > 0)
        return;
    const uint64_t per = tide_qexpert_bytes(p->qfmt, p->qblock, p->hidden, p->inter);
    const uint64_t n = ((256ull << 20) + per - 1) / per;
    p->n_experts = n < 24 ? 24 : n > 4096 ? 4096 : (int)n;
}

/* Random bf16 experts in an unlinked temporary file, mapped read-only
 * (quantized with --format: each matrix's values, then its scales). */
static int prof_weights(struct prof_ctx *p)
{
    prof_experts(p);
    const size_t per = tide_qexpert_bytes(p->qfmt, p->qblock, p->hidden, p->inter);
    const size_t bf_per = tide_qexpert_bytes(TIDE_QFMT_NONE, p->qblock, p->hidden, p->inter);
    p->map_bytes = per * (size_t)p->n_experts;
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/tide-profile-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        tide_error("profile: cannot create a weight file in %s: %s", dir, strerror(errno));
        return TIDE_E_IO;
    }
    unlink(path);
    uint16_t *buf = malloc(bf_per);
    char *qbuf = p->qfmt ? malloc(per) : NULL;
    int rc = buf && (qbuf || !p->qfmt) ? TIDE_OK : TIDE_E_NOMEM;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    const int64_t I = p->inter, H = p->hidden;
    for (int e = 0; e < p->n_experts && rc == TIDE_OK; e++) {
        for (size_t i = 0; i < bf_per / 2; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[i] = tide_f32_to_bf16((float)((int)(s % 2001) - 1000) * 2e-5f);
        }
        const void *src = buf;
        if (p->qfmt) {
            char *at = qbuf;
            for (int j = 0; j < 3; j++) {
                const int64_t r = j < 2 ? I : H, c = j < 2 ? H : I;
                int64_t vs[2];
                tide_qmat_value_shape(p->qfmt, r, c, vs);
                const size_t vb =
                    (size_t)(vs[0] * vs[1]) * tide_dtype_size(tide_qfmt_value_dtype(p->qfmt));
                tide_quantize_bf16(p->qfmt, p->qblock, buf + (size_t)j * (size_t)(I * H), r, c, at,
                                   at + vb);
                at += tide_qmat_bytes(p->qfmt, p->qblock, r, c);
            }
            src = qbuf;
        }
        if (write(fd, src, per) != (ssize_t)per) {
            tide_error("profile: cannot write the weight file: %s", strerror(errno));
            rc = TIDE_E_IO;
        }
    }
    free(buf);
    free(qbuf);
    if (rc == TIDE_OK) {
        p->map = mmap(NULL, p->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p->map == MAP_FAILED) {
            p->map = NULL;
            tide_error("profile: cannot map the weight file: %s", strerror(errno));
            rc = TIDE_E_IO;
        }
    }
    close(fd);
    p->views = calloc((size_t)p->n_experts, sizeof *p->views);
    p->scales = calloc((size_t)p->n_experts, sizeof *p->scales);
    if (rc == TIDE_OK && (!p->views || !p->scales))
        rc = TIDE_E_NOMEM;
    for (int e = 0; rc == TIDE_OK && e < p->n_experts; e++) {
        const char *at = (const char *)p->map + per * (size_t)e;
        for (int j = 0; j < 3; j++) {
            const int64_t r = j < 2 ? I : H, c = j < 2 ? H : I;
            int64_t vs[2], ss[2];
            tide_qmat_value_shape(p->qfmt, r, c, vs);
            tide_qmat_scale_shape(p->qblock, r, c, ss);
            struct tide_view *v = &p->views[e][j], *sc = &p->scales[e][j];
            v->data = at;
            v->dtype = tide_qfmt_value_dtype(p->qfmt);
            v->ndim = 2;
            v->shape[0] = r;
            v->shape[1] = c;
            v->nbytes = (size_t)(vs[0] * vs[1]) * tide_dtype_size(v->dtype);
            v->name = "profile expert";
            if (p->qfmt) {
                sc->data = at + v->nbytes;
                sc->dtype = tide_qfmt_scale_dtype(p->qfmt);
                sc->ndim = 2;
                sc->shape[0] = ss[0];
                sc->shape[1] = ss[1];
                sc->nbytes = (size_t)(ss[0] * ss[1]) * tide_dtype_size(sc->dtype);
                sc->name = "profile expert scale";
                v->qfmt = p->qfmt;
                v->qblock[0] = p->qblock[0];
                v->qblock[1] = p->qblock[1];
                v->scale = sc;
            }
            at += tide_qmat_bytes(p->qfmt, p->qblock, r, c);
        }
    }
    return rc;
}

/* One backend instance of a plugin in a role. */
static int prof_backend(struct prof_ctx *p, const struct tide_plugin *pl,
                        enum tide_backend_role role, struct tide_backend_ref *out)
{
    const struct tide_backend_args a = {
        .size = sizeof a,
        .opts = tide_config_section(p->c.cfg, pl->desc->name),
        .role = role,
    };
    out->ops = pl->desc->ops;
    out->name = pl->desc->name;
    int rc = out->ops->create(&a, &out->bk);
    if (rc != TIDE_OK) {
        tide_error("profile: backend %s could not start (%s)", out->name, tide_status_str(rc));
        out->bk = NULL;
    }
    return rc;
}

/* Expert time against rows on backend b: mean microseconds per expert_ffn
 * over three passes through the experts after a warm-up pass. */
static int prof_curve(struct prof_ctx *p, const struct tide_backend_ref *b,
                      struct tide_profile_curve *out)
{
    const struct tide_backend_ops *o = b->ops;
    const int N = p->n_experts, R = (int)p->rows[p->n_rows - 1];
    struct tide_expert **ex = calloc((size_t)N, sizeof *ex);
    int32_t *idx = malloc(sizeof *idx * (size_t)R);
    struct tide_buffer *xb = NULL, *yb = NULL;
    int rc = ex && idx ? TIDE_OK : TIDE_E_NOMEM;
    for (int i = 0; i < R && idx; i++)
        idx[i] = i;
    for (int e = 0; e < N && rc == TIDE_OK; e++)
        rc = o->expert_create(b->bk, &p->views[e][0], &p->views[e][1], &p->views[e][2], &ex[e]);
    if (rc == TIDE_OK)
        rc = o->buffer_alloc(b->bk, (size_t)R * (size_t)p->hidden * 2, &xb);
    if (rc == TIDE_OK)
        rc = o->buffer_alloc(b->bk, (size_t)R * (size_t)p->hidden * 4, &yb);
    uint16_t *xh = malloc((size_t)R * (size_t)p->hidden * 2);
    if (rc == TIDE_OK && !xh)
        rc = TIDE_E_NOMEM;
    struct tide_tensor x = tide_tensor_2d(xb, TIDE_DTYPE_BF16, R, p->hidden);
    struct tide_tensor y = tide_tensor_2d(yb, TIDE_DTYPE_F32, R, p->hidden);
    if (rc == TIDE_OK) {
        for (size_t i = 0; i < (size_t)R * (size_t)p->hidden; i++)
            xh[i] = tide_f32_to_bf16((float)((i * 37) % 200) * 0.005f - 0.5f);
        rc = o->write(b->bk, &x, xh);
    }
    /* Rounds over every row count, keeping each count's fastest pass: load
     * from other processes only ever slows a pass down, and interleaving the
     * counts spreads a burst of it over all of them. Round 0 warms up; then
     * at least 5 rounds and 0.3 s, at most 50 rounds. */
    out->n = p->n_rows;
    double spent = 0;
    for (int round = 0; rc == TIDE_OK && round <= 50 && (round <= 5 || spent < 0.3); round++) {
        for (int k = 0; k < p->n_rows && rc == TIDE_OK; k++) {
            const int64_t rows = (int64_t)p->rows[k];
            double t0 = prof_now();
            for (int e = 0; e < N && rc == TIDE_OK; e++)
                rc = o->expert_ffn(b->bk, ex[e], &x, idx, idx, rows, &y);
            if (rc == TIDE_OK)
                rc = o->sync(b->bk);
            double dt = prof_now() - t0, us = dt * 1e6 / N;
            out->rows[k] = (double)rows;
            if (round == 1 || (round > 1 && us < out->us[k]))
                out->us[k] = us;
            spent += round ? dt : 0;
        }
    }
    for (int k = 0; k < p->n_rows && rc == TIDE_OK; k++)
        tide_info("profile: %s: %g rows: %.2f us per expert", b->name, out->rows[k], out->us[k]);
    for (int e = 0; e < N && ex; e++)
        if (ex[e])
            o->expert_destroy(b->bk, ex[e]);
    if (xb)
        o->buffer_free(b->bk, xb);
    if (yb)
        o->buffer_free(b->bk, yb);
    free(xh);
    free(ex);
    free(idx);
    return rc;
}

/* Promotion bandwidth: slot_load of every expert into 4 slots, then copy_sync. */
static int prof_promote(struct prof_ctx *p, const struct tide_backend_ref *b, double *gbps)
{
    const struct tide_backend_ops *o = b->ops;
    if (!TIDE_OPS_HAS(o, slot_create) || !TIDE_OPS_HAS(o, slot_load) ||
        !TIDE_OPS_HAS(o, copy_sync) || (p->qfmt && !TIDE_OPS_HAS(o, slot_create_q))) {
        tide_error("profile: backend %s has no slot ops", b->name);
        return TIDE_E_UNSUPPORTED;
    }
    struct tide_expert *slot[4] = {0};
    int rc = TIDE_OK;
    for (int s = 0; s < 4 && rc == TIDE_OK; s++)
        rc = p->qfmt ? o->slot_create_q(b->bk, p->hidden, p->inter, p->qfmt, p->qblock, &slot[s])
                     : o->slot_create(b->bk, p->hidden, p->inter, &slot[s]);
    double best = 0;
    for (int pass = 0; pass < 4 && rc == TIDE_OK; pass++) {
        double t0 = prof_now();
        for (int e = 0; e < p->n_experts && rc == TIDE_OK; e++)
            rc =
                o->slot_load(b->bk, slot[e % 4], &p->views[e][0], &p->views[e][1], &p->views[e][2]);
        if (rc == TIDE_OK)
            rc = o->copy_sync(b->bk);
        double g = (double)p->map_bytes / (prof_now() - t0) / 1e9;
        if (pass > 0 && g > best) /* pass 0 registers and warms */
            best = g;
    }
    for (int s = 0; s < 4; s++)
        if (slot[s])
            o->expert_destroy(b->bk, slot[s]);
    *gbps = best;
    return rc;
}

/* Host memcpy bandwidth over 64 MiB buffers, best of five. */
static double prof_memcpy(void)
{
    const size_t n = 64u << 20;
    char *a = malloc(n), *b = malloc(n);
    double best = 0;
    if (a && b) {
        memset(a, 1, n);
        memset(b, 2, n);
        for (int i = 0; i < 6; i++) {
            double t0 = prof_now();
            memcpy(i & 1 ? a : b, i & 1 ? b : a, n);
            double g = (double)n / (prof_now() - t0) / 1e9;
            if (i > 0 && g > best)
                best = g;
        }
    }
    free(a);
    free(b);
    return best;
}

/* Device to host GB/s (a 64 MiB read) and the latency of a one-row write. */
static int prof_d2h(struct prof_ctx *p, const struct tide_backend_ref *b, double *gbps,
                    double *lat_us)
{
    const struct tide_backend_ops *o = b->ops;
    const size_t n = 64u << 20;
    struct tide_buffer *buf = NULL;
    void *host = malloc(n);
    int rc = host ? o->buffer_alloc(b->bk, n, &buf) : TIDE_E_NOMEM;
    struct tide_tensor t = tide_tensor_2d(buf, TIDE_DTYPE_F32, (int64_t)(n / 4 / 1024), 1024);
    double best = 0;
    for (int i = 0; i < 4 && rc == TIDE_OK; i++) {
        double t0 = prof_now();
        rc = o->read(b->bk, &t, host);
        double g = (double)n / (prof_now() - t0) / 1e9;
        if (i > 0 && g > best)
            best = g;
    }
    *gbps = best;
    struct tide_tensor row = tide_tensor_2d(buf, TIDE_DTYPE_BF16, 1, p->hidden);
    double t0 = prof_now();
    for (int i = 0; i < 200 && rc == TIDE_OK; i++)
        rc = o->write(b->bk, &row, host);
    if (rc == TIDE_OK)
        rc = o->sync(b->bk);
    *lat_us = (prof_now() - t0) * 1e6 / 200;
    if (buf)
        o->buffer_free(b->bk, buf);
    free(host);
    return rc;
}

/* --model DIR: open the checkpoint with every expert on the device (the
 * engine, as tide run does) and take its expert shape unless one was given. */
static int prof_open_model(struct prof_ctx *p, struct tide_engine **e)
{
    int rc = tide_config_set_value(p->c.cfg, "model", "path", p->model, "--model");
    if (rc == TIDE_OK)
        rc = tide_config_set_value(p->c.cfg, "policy", "budget", "-1", "--model");
    if (rc == TIDE_OK)
        rc = tide_config_set_value(p->c.cfg, "policy", "expert_memory", "0", "--model");
    if (rc == TIDE_OK)
        rc = cli_engine_open(&p->c, e);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_moe_shape *sh = tide_moe_get_shape((*e)->moe);
    if (!sh) {
        tide_error("profile: --model %s has no MoE layers", p->model);
        return TIDE_E_CONFIG;
    }
    if (!p->format_given) {
        p->qfmt = sh->qfmt;
        p->qblock[0] = sh->qblock[0];
        p->qblock[1] = sh->qblock[1];
    } else if (sh->qfmt != p->qfmt) {
        tide_error("profile: --model %s has %s experts, not the --format %s asked for", p->model,
                   tide_qfmt_name(sh->qfmt), tide_qfmt_name(p->qfmt));
        return TIDE_E_CONFIG;
    }
    if (!p->shape_given) {
        p->hidden = sh->hidden;
        p->inter = sh->inter;
    } else if (sh->hidden != p->hidden || sh->inter != p->inter) {
        tide_error("profile: --model %s has experts of hidden %d x inter %d, not the --hidden %d "
                   "x --inter %d asked for",
                   p->model, sh->hidden, sh->inter, p->hidden, p->inter);
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

/* The placement-independent time of the model's forwards, per token of each
 * MoE layer's forwards: the generations' wall time less the expert time the
 * dispatcher measured, over the tokens of every MoE layer-forward, for the
 * prompts of --prompts (the first 8) or one built-in prompt; the fastest of
 * three passes after a warm-up. */
static int prof_dense(struct prof_ctx *p, struct tide_engine *e, double *us_per_token,
                      int64_t *steps)
{
    static const char builtin[] = "The tide comes in and the tide goes out. Write a haiku about "
                                  "the sea.";
    char *text = NULL, *line[8] = {(char *)builtin};
    int n_prompts = 1, rc = TIDE_OK;
    if (p->prompts) {
        size_t len;
        if ((rc = cli_read_file(p->prompts, &text, &len)) != TIDE_OK)
            return rc;
        n_prompts = 0;
        char *save = NULL;
        for (char *l = strtok_r(text, "\n", &save); l && n_prompts < 8;
             l = strtok_r(NULL, "\n", &save))
            if (*l && *l != '#' && *l != '\r')
                line[n_prompts++] = l;
        if (!n_prompts) {
            tide_error("profile: --prompts %s holds no prompt", p->prompts);
            free(text);
            return TIDE_E_CONFIG;
        }
    }
    double best = -1;
    for (int run = 0; run < 4 && rc == TIDE_OK; run++) {
        double seconds = 0, experts = 0;
        uint64_t tokens = 0;
        int64_t n_steps = 0;
        for (int k = 0; k < n_prompts && rc == TIDE_OK; k++) {
            int32_t *ids = NULL;
            size_t n = 0;
            struct tide_gen_result res = {0};
            rc = tide_engine_encode(e, line[k], false, &ids, &n);
            tide_moe_reset_totals(e->moe);
            if (rc == TIDE_OK)
                rc = tide_engine_generate_ids(e, NULL, ids, (int64_t)n, NULL, NULL, &res);
            struct tide_moe_counters c;
            tide_moe_totals(e->moe, &c);
            seconds += res.seconds;
            experts += c.device_seconds + c.host_seconds;
            tokens += c.tokens;
            n_steps += res.steps;
            free(res.ids);
            free(ids);
        }
        if (rc != TIDE_OK || !tokens)
            break;
        const double us = (seconds - experts) * 1e6 / (double)tokens;
        tide_info("profile: %s: pass %d over %d prompt%s: %.3f s, experts %.3f s, %lld steps: "
                  "%.3f us per token and MoE layer outside the experts",
                  p->model, run, n_prompts, n_prompts == 1 ? "" : "s", seconds, experts,
                  (long long)n_steps, us);
        if (run > 0 && (best < 0 || us < best)) { /* pass 0 warms up */
            best = us;
            *steps = n_steps;
        }
    }
    free(text);
    *us_per_token = best > 0 ? best : 0;
    return rc;
}

static int prof_main(struct prof_ctx *p)
{
    struct tide_engine *model = NULL;
    int rc = p->model ? prof_open_model(p, &model) : TIDE_OK;
    double dense_tok = 0;
    int64_t dense_steps = 0;
    if (rc == TIDE_OK && model)
        rc = prof_dense(p, model, &dense_tok, &dense_steps);
    tide_engine_close(model);
    if (rc != TIDE_OK)
        return rc;
    rc = prof_weights(p);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_opts *bo = tide_config_section(p->c.cfg, "backend");
    const struct tide_plugin *hpl = tide_plugins_get(p->c.plugins, tide_opts_str(bo, "host"),
                                                     TIDE_PLUGIN_BACKEND, "[backend] host");
    if (!hpl)
        return TIDE_E_CONFIG;
    const struct tide_plugin *cuda =
        strcmp(p->device, "none") ? tide_plugins_find(p->c.plugins, "backend-cuda") : NULL;
    if (cuda && (!cuda->usable || cuda->desc->kind != TIDE_PLUGIN_BACKEND)) {
        tide_info("profile: no usable CUDA device (%s): the host backend plays the device",
                  cuda->why);
        cuda = NULL;
    }
    struct tide_profile prof;
    memset(&prof, 0, sizeof prof);
    snprintf(prof.name, sizeof prof.name, "%s", p->name ? p->name : "measured");
    prof.hidden = (uint32_t)p->hidden;
    prof.inter = (uint32_t)p->inter;
    prof.qfmt = p->qfmt;
    prof.qblock[0] = p->qblock[0];
    prof.qblock[1] = p->qblock[1];
    struct tide_backend_ref host = {0}, dev = {0};
    char cpu[160], host_desc[256], dev_desc[256] = "", notes_buf[11][512];
    cli_cpu_model(cpu, sizeof cpu);
    if ((rc = prof_backend(p, hpl, TIDE_ROLE_HOST, &host)) != TIDE_OK)
        goto done;
    snprintf(host_desc, sizeof host_desc, "%s",
             host.ops->describe ? host.ops->describe(host.bk) : host.name);
    tide_info("profile: host experts on %s (%s)", host_desc, cpu);
    if ((rc = prof_curve(p, &host, &prof.host)) != TIDE_OK)
        goto done;
    const double mc = prof_memcpy();
    if (cuda) {
        if ((rc = prof_backend(p, cuda, TIDE_ROLE_DEVICE, &dev)) != TIDE_OK)
            goto done;
        snprintf(dev_desc, sizeof dev_desc, "%s",
                 dev.ops->describe ? dev.ops->describe(dev.bk) : dev.name);
        tide_info("profile: device %s", dev_desc);
        if ((rc = prof_curve(p, &dev, &prof.device)) != TIDE_OK ||
            (rc = prof_promote(p, &dev, &prof.h2d_gbps)) != TIDE_OK ||
            (rc = prof_d2h(p, &dev, &prof.d2h_gbps, &prof.latency_us)) != TIDE_OK)
            goto done;
        prof.overlap = true;
    } else {
        /* The host backend as the device, as the engine runs without a GPU. */
        if ((rc = prof_backend(p, hpl, TIDE_ROLE_DEVICE, &dev)) != TIDE_OK ||
            (rc = prof_promote(p, &dev, &prof.h2d_gbps)) != TIDE_OK)
            goto done;
        prof.device = prof.host;
        prof.d2h_gbps = mc;
        prof.latency_us = 0;
        prof.overlap = false;
    }
    snprintf(notes_buf[0], 512, "written by `tide profile` on %s", cpu);
    snprintf(notes_buf[1], 512,
             "[M] %s: slot_load of %d distinct experts from a file mapping, then copy_sync "
             "(the promotion path), best of 3 passes",
             cuda ? dev_desc : host_desc, p->n_experts);
    snprintf(notes_buf[2], 512,
             cuda ? "[M] a 64 MiB read from the device, best of 3"
                  : "[M] host memcpy of 64 MiB, best of 5 (no device: activations stay in "
                    "host memory)");
    snprintf(notes_buf[3], 512,
             cuda ? "[M] mean of 200 one-row writes to the device"
                  : "[M] none: the host backend plays the device (no transfer)");
    snprintf(notes_buf[4], 512,
             cuda ? "the CUDA backend overlaps copies, host and device experts"
                  : "the CPU backend runs its queues inline: nothing overlaps");
    snprintf(notes_buf[5], 512, "the expert shape measured (--hidden, --inter)");
    notes_buf[6][0] = 0;
    if (p->model) {
        prof.dense_us_per_token = dense_tok;
        snprintf(notes_buf[7], 512,
                 "[M] --model %s: everything but the routed experts (attention, router, shared "
                 "expert, dense layers, head, sampling), per token of each MoE layer's forwards: "
                 "generation time less expert time, every expert on the device, fastest of 3 "
                 "passes of %lld steps over %s",
                 p->model, (long long)dense_steps, p->prompts ? p->prompts : "a built-in prompt");
    } else {
        snprintf(notes_buf[7], 512,
                 "[E] not measured (tide profile --model DIR measures it): attention, router and "
                 "shared expert per MoE layer per forward; 0 leaves them out of modelled times "
                 "(they do not depend on placement)");
    }
    notes_buf[8][0] = 0;
    snprintf(
        notes_buf[9], 512,
        "[M] %s: expert_ffn per expert, cycling %d distinct experts (weights from DRAM), "
        "fastest of >= 5 interleaved rounds after a warm-up; host memcpy measured at %.1f GB/s",
        cuda ? dev_desc : host_desc, p->n_experts, mc);
    snprintf(notes_buf[10], 512,
             "[M] %s: expert_ffn per expert, cycling %d distinct experts, fastest of >= 5 "
             "interleaved rounds",
             host_desc, p->n_experts);
    const char *notes[11];
    for (int i = 0; i < 11; i++)
        notes[i] = notes_buf[i];
    char header[600];
    snprintf(header, sizeof header,
             "Hardware profile measured by `tide profile` (docs/profiles.md).\n"
             "[M] = measured here, [E] = estimate. Host: %s. Device: %s.",
             cpu, cuda ? dev_desc : "none (the host backend plays the device)");
    if ((rc = tide_profile_save(&prof, p->out, p->force, header, notes)) == TIDE_OK)
        printf("wrote %s: host %.1f us per expert at 1 row, %.1f at %g rows; promotions %.2f "
               "GB/s; device %s\n",
               p->out, prof.host.us[0], prof.host.us[prof.host.n - 1],
               prof.host.rows[prof.host.n - 1], prof.h2d_gbps, cuda ? dev_desc : "= host");
done:
    if (dev.bk)
        dev.ops->destroy(dev.bk);
    if (host.bk)
        host.ops->destroy(host.bk);
    return rc;
}

int cmd_profile(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            prof_usage(stdout);
            return CLI_EXIT_OK;
        }
    struct prof_ctx p;
    memset(&p, 0, sizeof p);
    int rc = prof_args(&p, argc, argv);
    if (rc == TIDE_OK)
        rc = cli_setup(&p.c);
    if (rc == TIDE_OK)
        rc = prof_main(&p);
    if (p.map)
        munmap(p.map, p.map_bytes);
    free(p.views);
    free(p.scales);
    cli_teardown(&p.c);
    return cli_exit_code(rc);
}
