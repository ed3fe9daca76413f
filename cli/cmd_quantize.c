/* `tide quantize IN OUT --experts FMT`: a checkpoint with block-quantized
 * routed experts (tide/quant.h, docs/quantization.md).
 *
 * Every file of IN is copied to OUT: safetensors shards keep their names and
 * their tensors, the routed experts' matrices
 * (*.mlp.experts.<e>.{gate,up,down}_proj.weight) become values plus scales,
 * model.safetensors.index.json gains the scales, and config.json gains the
 * quantization_config that says how to read them (for fp8, exactly as
 * published FP8 checkpoints write it, so that Hugging Face's loader reads
 * the result too). Everything is written into a hidden folder beside OUT
 * that is renamed onto OUT at the end; a failure or Ctrl-C removes it, so
 * OUT either does not exist or is complete. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"
#include "decode.h"
#include "tide/log.h"
#include "tide/quant.h"
#include "tide/safetensors.h"
#include "tide/safetensors_write.h"
#include "tide/status.h"

#define QZ_INDEX "model.safetensors.index.json"

static void quantize_usage(FILE *f)
{
    fprintf(f, "usage: tide quantize IN_DIR OUT_DIR --experts q8_0|q4_0|fp8 [--block R,C]\n"
               "                     [--dense bf16] [-q]\n\n"
               "Writes a copy of checkpoint IN_DIR into OUT_DIR (which must not exist) with its\n"
               "routed experts block-quantized; every other tensor and file is copied as is.\n"
               "Layouts and accuracy: docs/quantization.md.\n\n"
               "  --experts FMT   q8_0  int8 values, one f16 scale per 32 (~1.06 bytes/weight)\n"
               "                  q4_0  4-bit values, one f16 scale per 32 (~0.56 bytes/weight);\n"
               "                        q4 is the same\n"
               "                  fp8   e4m3 values with f32 scales per block (weight_scale_inv),\n"
               "                        as published FP8 checkpoints (~1 byte/weight)\n"
               "  --block R,C     fp8 block of R rows by C columns per scale (default 128,128;\n"
               "                  C a multiple of 32, as backend-cpu-onednn needs)\n"
               "  --dense bf16    dense weights stay bf16 (the only choice for now)\n\n"
               "OUT_DIR is written through a hidden folder beside it and renamed at the end:\n"
               "an error or Ctrl-C leaves no partial output. Progress goes to stderr: a line\n"
               "with an ETA on a terminal, a line per tenth elsewhere.\n\n"
               "  -q, --quiet     no progress and no info messages\n");
}

struct qz {
    int fmt, block[2];
    const struct tide_st *st;
    regex_t expert_re;
    uint64_t done_bytes, total_bytes; /* bytes of IN's tensors read so far, and in all */
    double t0;
    int last_decile;        /* without a progress line: the last tenth logged */
    struct cli_progress pg; /* on a terminal */
};

static double qz_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether tensor v lives in shard file `file` (a base name). */
static bool qz_in_file(const struct qz *q, const struct tide_view *v, const char *file)
{
    const char *f = tide_st_file_of(q->st, v->name);
    const char *base = f ? strrchr(f, '/') : NULL;
    return f && !strcmp(base ? base + 1 : f, file);
}

static bool qz_is_expert(const struct qz *q, const struct tide_view *v)
{
    return v->ndim == 2 && regexec(&q->expert_re, v->name, 0, NULL, 0) == 0;
}

/* The unit in which total bytes read well: GB from 1 GB, else MiB or KiB
 * (a tiny model's 3 MiB is not "0.00 GB"); *div is its size in bytes. */
static const char *qz_unit(uint64_t total, double *div)
{
    if (total >= 1000000000u) {
        *div = 1e9;
        return "GB";
    }
    if (total >= 1u << 20) {
        *div = 1 << 20;
        return "MiB";
    }
    *div = 1 << 10;
    return "KiB";
}

/* On a terminal, the progress line; elsewhere (a log) a line per tenth;
 * and the final line in both. */
static void qz_progress(struct qz *q, bool final)
{
    double div;
    const char *unit = qz_unit(q->total_bytes, &div);
    if (q->pg.on && !final) {
        cli_progress_update(&q->pg, (double)q->done_bytes, "%.2f of %.2f %s read",
                            (double)q->done_bytes / div, (double)q->total_bytes / div, unit);
        return;
    }
    if (tide_log_get_level() < TIDE_LOG_INFO) /* --quiet */
        return;
    const double el = qz_now() - q->t0;
    const double frac = q->total_bytes ? (double)q->done_bytes / (double)q->total_bytes : 1.0;
    const int decile = (int)(frac * 10);
    if (!final && decile == q->last_decile)
        return;
    q->last_decile = decile;
    char eta[32] = "";
    if (!final && frac > 0.02)
        snprintf(eta, sizeof eta, ", %.0f s left", el / frac - el);
    fprintf(stderr, "tide quantize: %5.1f%%  %.2f of %.2f %s read, %.1f s%s\n", 100.0 * frac,
            (double)q->done_bytes / div, (double)q->total_bytes / div, unit, el, eta);
    fflush(stderr);
}

/* Remove the files of folder dir (not recursive: it only holds ours) and dir. */
static void qz_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        const struct dirent *de;
        char p[4608];
        while ((de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(dir);
}

static int qz_copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb");
    if (!in) {
        tide_error("%s: cannot read: %s", from, strerror(errno));
        return TIDE_E_IO;
    }
    FILE *out = fopen(to, "wb");
    if (!out) {
        tide_error("%s: cannot create: %s", to, strerror(errno));
        fclose(in);
        return TIDE_E_IO;
    }
    char buf[1 << 16];
    size_t n;
    int rc = TIDE_OK;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) {
            rc = TIDE_E_IO;
            break;
        }
    if (ferror(in))
        rc = TIDE_E_IO;
    if (fclose(out))
        rc = TIDE_E_IO;
    fclose(in);
    if (rc)
        tide_error("copying %s to %s failed: %s", from, to, strerror(errno));
    return rc;
}

/* Name of the scale tensor of weight tensor name ("...weight"). */
static void qz_scale_name(const struct qz *q, const char *name, char *out, size_t len)
{
    size_t n = strlen(name) - strlen("weight");
    snprintf(out, len, "%.*s%s", (int)n, name, tide_qfmt_scale_name(q->fmt));
}

/* Write every tensor of IN that lives in shard file `file` into out/file;
 * add each name to map (tensor -> file) when map is not NULL. */
static int qz_write_shard(struct qz *q, const char *file, const char *out_dir, json_t *map)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", out_dir, file);
    struct tide_st_writer *w = NULL;
    int rc = tide_st_writer_create(path, false, &w);
    if (rc)
        return rc;
    const int n = tide_st_count(q->st);
    char sname[512];
    /* Declare, in IN's order: each expert matrix as values then scales. */
    for (int i = 0; i < n && !rc; i++) {
        const struct tide_view *v = tide_st_at(q->st, i);
        if (!qz_in_file(q, v, file))
            continue;
        if (!qz_is_expert(q, v)) {
            rc = tide_st_writer_add(w, v->name, v->dtype, v->ndim, v->shape);
            if (!rc && map)
                json_object_set_new(map, v->name, json_string(file));
            continue;
        }
        int64_t vs[2], ss[2];
        tide_qmat_value_shape(q->fmt, v->shape[0], v->shape[1], vs);
        tide_qmat_scale_shape(q->block, v->shape[0], v->shape[1], ss);
        qz_scale_name(q, v->name, sname, sizeof sname);
        rc = tide_st_writer_add(w, v->name, tide_qfmt_value_dtype(q->fmt), 2, vs);
        if (!rc)
            rc = tide_st_writer_add(w, sname, tide_qfmt_scale_dtype(q->fmt), 2, ss);
        if (!rc && map) {
            json_object_set_new(map, v->name, json_string(file));
            json_object_set_new(map, sname, json_string(file));
        }
    }
    void *vals = NULL, *scales = NULL;
    for (int i = 0; i < n && !rc; i++) {
        const struct tide_view *v = tide_st_at(q->st, i);
        if (!qz_in_file(q, v, file))
            continue;
        if (tide_stop_requested()) {
            rc = TIDE_E_INTERRUPTED;
            break;
        }
        if (!qz_is_expert(q, v)) {
            rc = tide_st_writer_write(w, v->data, v->nbytes);
        } else {
            int64_t vs[2], ss[2];
            tide_qmat_value_shape(q->fmt, v->shape[0], v->shape[1], vs);
            tide_qmat_scale_shape(q->block, v->shape[0], v->shape[1], ss);
            const size_t vb =
                (size_t)(vs[0] * vs[1]) * tide_dtype_size(tide_qfmt_value_dtype(q->fmt));
            const size_t sb =
                (size_t)(ss[0] * ss[1]) * tide_dtype_size(tide_qfmt_scale_dtype(q->fmt));
            free(vals);
            free(scales);
            vals = malloc(vb ? vb : 1);
            scales = malloc(sb ? sb : 1);
            if (!vals || !scales) {
                rc = TIDE_E_NOMEM;
                break;
            }
            if (tide_quantize_bf16(q->fmt, q->block, v->data, v->shape[0], v->shape[1], vals,
                                   scales)) {
                /* qz_check made sure the format fits: the data is not finite */
                tide_error("%s: tensor '%s' holds NaN or Inf values: it cannot be quantized "
                           "(the checkpoint is damaged)",
                           tide_st_file_of(q->st, v->name), v->name);
                rc = TIDE_E_FORMAT;
                break;
            }
            rc = tide_st_writer_write(w, vals, vb);
            if (!rc)
                rc = tide_st_writer_write(w, scales, sb);
        }
        q->done_bytes += v->nbytes;
        qz_progress(q, false);
    }
    free(vals);
    free(scales);
    if (rc) {
        tide_st_writer_abort(w);
        return rc;
    }
    return tide_st_writer_finish(w);
}

/* Every expert matrix must be a bf16 [rows, cols] the format fits. */
static int qz_check(struct qz *q, int *n_expert)
{
    const int n = tide_st_count(q->st);
    *n_expert = 0;
    char why[256];
    for (int i = 0; i < n; i++) {
        const struct tide_view *v = tide_st_at(q->st, i);
        q->total_bytes += v->nbytes;
        if (strstr(v->name, ".weight_scale")) {
            tide_error("%s: tensor '%s' is a quantization scale: the checkpoint is already "
                       "quantized",
                       tide_st_file_of(q->st, v->name), v->name);
            return TIDE_E_CONFIG;
        }
        if (!qz_is_expert(q, v))
            continue;
        if (v->dtype != TIDE_DTYPE_BF16) {
            const bool quantized = v->dtype == TIDE_DTYPE_I8 || v->dtype == TIDE_DTYPE_U8 ||
                                   v->dtype == TIDE_DTYPE_F8_E4M3;
            tide_error("%s: routed-expert tensor '%s' is %s, not BF16: %s",
                       tide_st_file_of(q->st, v->name), v->name, tide_dtype_name(v->dtype),
                       quantized ? "the checkpoint is already quantized"
                                 : "tide quantize reads bf16 experts");
            return TIDE_E_FORMAT;
        }
        if (tide_qfmt_fits(q->fmt, q->block, v->shape[0], v->shape[1], why, sizeof why)) {
            tide_error("%s: tensor '%s' [%lld, %lld]: %s", tide_st_file_of(q->st, v->name), v->name,
                       (long long)v->shape[0], (long long)v->shape[1], why);
            return TIDE_E_CONFIG;
        }
        (*n_expert)++;
    }
    if (!*n_expert) {
        tide_error("%s: no routed-expert tensors (*.mlp.experts.<e>.{gate,up,down}_proj.weight) "
                   "to quantize",
                   tide_st_path(q->st));
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

static int qz_strcmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The modules (weight names less ".weight") of every 2-D weight that stays
 * bf16, sorted: a new JSON array (empty when out of memory). */
static json_t *qz_dense_modules(const struct qz *q)
{
    const int n = tide_st_count(q->st);
    const char **names = malloc(sizeof *names * (size_t)(n + 1));
    json_t *a = json_array();
    int k = 0;
    for (int i = 0; names && i < n; i++) {
        const struct tide_view *v = tide_st_at(q->st, i);
        const size_t len = strlen(v->name);
        if (v->ndim == 2 && len > 7 && !strcmp(v->name + len - 7, ".weight") && !qz_is_expert(q, v))
            names[k++] = v->name;
    }
    if (names)
        qsort(names, (size_t)k, sizeof *names, qz_strcmp);
    for (int i = 0; i < k; i++)
        json_array_append_new(a, json_stringn(names[i], strlen(names[i]) - 7));
    free(names);
    return a;
}

/* config.json with quantization_config added. */
static int qz_config(const struct qz *q, const char *in, const char *out)
{
    json_error_t jerr;
    json_t *root = json_load_file(in, JSON_PRESERVE_ORDER, &jerr);
    if (!root || !json_is_object(root)) {
        tide_error("%s: not a JSON object: %s", in, root ? "" : jerr.text);
        json_decref(root);
        return TIDE_E_FORMAT;
    }
    const json_t *old = json_object_get(root, "quantization_config");
    if (old && !json_is_null(old)) {
        tide_error("%s: already has a quantization_config: the checkpoint is already quantized",
                   in);
        json_decref(root);
        return TIDE_E_CONFIG;
    }
    json_t *qc;
    if (q->fmt == TIDE_QFMT_FP8) {
        /* Hugging Face's FineGrainedFP8Config. modules_to_not_convert holds
         * the full name of every other module with a 2-D weight, as
         * published FP8 checkpoints write it: transformers 4 matches the
         * entries as substrings of module names, transformers 5 as whole
         * names, prefixes or suffixes, and full names mean the same to
         * both (fragments such as "attention" only to the first). */
        qc = json_pack("{s:s, s:s, s:s, s:[i,i], s:o}", "quant_method", "fp8", "fmt", "e4m3",
                       "activation_scheme", "dynamic", "weight_block_size", q->block[0],
                       q->block[1], "modules_to_not_convert", qz_dense_modules(q));
    } else {
        qc = json_pack("{s:s, s:s, s:[i,i], s:s}", "quant_method", "tide", "format",
                       tide_qfmt_name(q->fmt), "block_size", q->block[0], q->block[1], "modules",
                       "routed experts");
    }
    json_object_set_new(root, "quantization_config", qc);
    int rc = json_dump_file(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (rc) {
        tide_error("%s: cannot write: %s", out, strerror(errno));
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

/* Copy or convert every file of in_dir into tmp. */
static int qz_run(struct qz *q, const char *in_dir, const char *tmp)
{
    char from[4608], to[4608];
    snprintf(from, sizeof from, "%s/" QZ_INDEX, in_dir);
    const bool sharded = access(from, F_OK) == 0;
    json_t *map = sharded ? json_object() : NULL;
    DIR *d = opendir(in_dir);
    if (!d) {
        tide_error("%s: cannot read the folder: %s", in_dir, strerror(errno));
        json_decref(map);
        return TIDE_E_IO;
    }
    int rc = TIDE_OK;
    const struct dirent *de;
    while (!rc && (de = readdir(d))) {
        const char *f = de->d_name;
        if (f[0] == '.' || !strcmp(f, QZ_INDEX))
            continue;
        snprintf(from, sizeof from, "%s/%s", in_dir, f);
        snprintf(to, sizeof to, "%s/%s", tmp, f);
        struct stat sb;
        if (stat(from, &sb) || !S_ISREG(sb.st_mode)) {
            tide_warn("%s: not a regular file: not copied", from);
            continue;
        }
        size_t len = strlen(f);
        if (len > 12 && !strcmp(f + len - 12, ".safetensors"))
            rc = qz_write_shard(q, f, tmp, map);
        else if (!strcmp(f, "config.json"))
            rc = qz_config(q, from, to);
        else
            rc = qz_copy_file(from, to);
    }
    closedir(d);
    if (!rc && map) {
        json_t *idx =
            json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)0, "weight_map", map);
        uint64_t total = 0;
        const int n = tide_st_count(q->st);
        for (int i = 0; i < n; i++) {
            const struct tide_view *v = tide_st_at(q->st, i);
            total += qz_is_expert(q, v)
                         ? tide_qmat_bytes(q->fmt, q->block, v->shape[0], v->shape[1])
                         : v->nbytes;
        }
        json_object_set_new(json_object_get(idx, "metadata"), "total_size",
                            json_integer((json_int_t)total));
        snprintf(to, sizeof to, "%s/" QZ_INDEX, tmp);
        if (json_dump_file(idx, to, JSON_INDENT(2) | JSON_SORT_KEYS)) {
            tide_error("%s: cannot write: %s", to, strerror(errno));
            rc = TIDE_E_IO;
        }
        json_decref(idx);
    }
    json_decref(map);
    return rc;
}

static int qz_parse_block(const char *s, int block[2])
{
    char *end;
    long r = strtol(s, &end, 10);
    if (*end != ',' || r < 1 || r > 65536)
        return -1;
    long c = strtol(end + 1, &end, 10);
    if (*end || c < 1 || c > 65536)
        return -1;
    block[0] = (int)r;
    block[1] = (int)c;
    return 0;
}

int cmd_quantize(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *experts = NULL, *block_s = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            quantize_usage(stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--experts") && i + 1 < argc) {
            experts = argv[++i];
        } else if (!strcmp(a, "--block") && i + 1 < argc) {
            block_s = argv[++i];
        } else if (!strcmp(a, "--dense") && i + 1 < argc) {
            if (strcmp(argv[++i], "bf16")) {
                fprintf(stderr,
                        "tide quantize: --dense %s: only bf16 dense weights are "
                        "supported (the backends' dense matmuls read bf16)\n",
                        argv[i]);
                return CLI_EXIT_USAGE;
            }
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            tide_log_set_level(TIDE_LOG_WARN);
        } else if (a[0] != '-' && !in) {
            in = a;
        } else if (a[0] != '-' && !out) {
            out = a;
        } else {
            return cli_unexpected("quantize", a, quantize_usage);
        }
    }
    struct qz q = {0};
    if (!in || !out || !experts) {
        quantize_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (tide_qfmt_parse(experts, &q.fmt) || q.fmt == TIDE_QFMT_NONE) {
        fprintf(stderr, "tide quantize: --experts %s: expected q8_0, q4_0 (or q4) or fp8\n",
                experts);
        return CLI_EXIT_USAGE;
    }
    tide_qfmt_default_block(q.fmt, q.block);
    if (block_s && (q.fmt != TIDE_QFMT_FP8 || qz_parse_block(block_s, q.block))) {
        fprintf(stderr,
                "tide quantize: --block %s: takes R,C (positive) and only with fp8 "
                "(q8_0 and q4_0 have blocks of 32 values of a row)\n",
                block_s);
        return CLI_EXIT_USAGE;
    }
    /* Blocks every shipped backend runs: backend-cpu-onednn decodes fp8 in
     * 32-value chunks with one scale each, so a block spans a multiple of 32
     * columns there (dnnl_bk_qfits); backend-cuda takes any block. */
    if (q.fmt == TIDE_QFMT_FP8 && q.block[1] % TIDE_QK) {
        fprintf(stderr,
                "tide quantize: --block %s: backend-cpu-onednn runs fp8 blocks of a multiple of "
                "%d columns only, not %d (backend-cuda takes any); choose R,C with C a multiple "
                "of %d, such as the published %d,%d\n",
                block_s, TIDE_QK, q.block[1], TIDE_QK, TIDE_FP8_BLOCK, TIDE_FP8_BLOCK);
        return CLI_EXIT_USAGE;
    }
    struct stat sb;
    if (lstat(out, &sb) == 0) {
        tide_error("tide quantize: %s exists; it is not overwritten (remove it or choose another "
                   "OUT_DIR)",
                   out);
        return CLI_EXIT_USAGE;
    }
    struct tide_st *st = NULL;
    int rc = tide_st_open(in, &st);
    if (rc)
        return cli_exit_code(rc);
    q.st = st;
    if (regcomp(&q.expert_re, "\\.mlp\\.experts\\.[0-9]+\\.(gate|up|down)_proj\\.weight$",
                REG_EXTENDED | REG_NOSUB)) {
        tide_st_close(st);
        return CLI_EXIT_RUNTIME;
    }
    int n_expert = 0;
    rc = qz_check(&q, &n_expert);
    char tmp[4200];
    bool made = false;
    if (!rc) {
        const char *slash = strrchr(out, '/');
        snprintf(tmp, sizeof tmp, "%.*s.%s.partial-%ld", slash ? (int)(slash - out + 1) : 0, out,
                 slash ? slash + 1 : out, (long)getpid());
        cli_mkdir_parents(tmp);
        if (mkdir(tmp, 0777)) {
            tide_error("%s: cannot create: %s", tmp, strerror(errno));
            rc = TIDE_E_IO;
        } else {
            made = true;
        }
    }
    if (!rc) {
        tide_info("quantizing %d routed-expert matrices of %s to %s", n_expert, in,
                  tide_qfmt_name(q.fmt));
        cli_catch_interrupt();
        q.t0 = qz_now();
        q.last_decile = -1;
        cli_progress_begin(&q.pg, "tide quantize", (double)q.total_bytes);
        rc = qz_run(&q, in, tmp);
        cli_progress_end(&q.pg);
        if (!rc)
            qz_progress(&q, true);
    }
    if (!rc && rename(tmp, out)) {
        tide_error("renaming %s to %s failed: %s", tmp, out, strerror(errno));
        rc = TIDE_E_IO;
    }
    if (rc && made) {
        qz_remove_dir(tmp);
        if (rc == TIDE_E_INTERRUPTED)
            tide_warn("tide quantize: interrupted: nothing was written to %s", out);
    }
    if (!rc) {
        const uint64_t was = tide_st_data_bytes(st);
        struct tide_st *o = NULL;
        uint64_t now = was;
        if (tide_st_open(out, &o) == TIDE_OK) {
            now = tide_st_data_bytes(o);
            tide_st_close(o);
        }
        double div;
        const char *unit = qz_unit(was, &div);
        printf("%s: %d expert matrices in %s; tensors %.3f %s -> %.3f %s (%.2fx smaller)\n", out,
               n_expert, tide_qfmt_name(q.fmt), (double)was / div, unit, (double)now / div, unit,
               now ? (double)was / (double)now : 0.0);
    }
    regfree(&q.expert_re);
    tide_st_close(st);
    return rc == TIDE_E_INTERRUPTED ? CLI_EXIT_INTERRUPTED : cli_exit_code(rc);
}
