/* `tide bench`: a prompt set under several policies, budgets and intervals in
 * one process, loading the model once. Prints a comparison table and writes
 * results.csv, the effective config, a manifest and per-configuration
 * metrics into a new timestamped folder. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_shard.h"
#include "cli.h"
#include "decode.h"
#include "engine.h"
#include "progress.h"
#include "sweep.h"
#include "tide/log.h"
#include "tide/policy.h"
#include "tide/quant.h"
#include "tide/shipped.h"
#include "tide/status.h"
#include "tide/trace_write.h"

#define BENCH_MAX_LIST 64

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: tide bench [-c FILE] [--set section.key=value ...] [--policies LIST]\n"
            "                  [--budgets LIST] [--intervals LIST] [--prompts FILE]\n"
            "                  [--max-prompts N] [--repeats N] [--batch LIST] [--out DIR]\n"
            "                  [--sweep SECTION.KEY=v1,v2,... ...] [--shard K/N]\n"
            "                  [--baseline DIR] [--scale-profile] [--warmup N]\n"
            "                  [-o text|md|json|csv] [-q]\n"
            "       tide bench ... --emit-slurm N [--partition P] [--gres G] [--time T]\n"
            "       tide bench merge DIR... --out DIR\n"
            "       tide bench plot DIR [--out PLOTDIR]\n\n"
            "Runs the prompt set under every combination of policy, budget and (for\n"
            "policy-tide) interval, loading the model once. Prints a table and writes, into\n"
            "a new folder DIR/YYYYmmdd-HHMMSS: results.csv (one row per configuration),\n"
            "config.ini (the effective configuration), manifest.json (git revision, CPU,\n"
            "devices, library versions, date) and metrics-*.jsonl (per step and layer).\n"
            "Every configuration must generate the same tokens as the no-offload baseline\n"
            "(placement is lossless); the 'same' column says so. When one backend plugin\n"
            "computes both device and host experts a mismatch fails the run; across two\n"
            "backends (GPU and CPU) their float summation orders differ, so it is reported.\n\n"
            "The sweep comes from the [bench] section; the flags override it (each also\n"
            "in tide sim's singular spelling: --policy, --budget, --interval):\n"
            "  --policies tide,lru,static   plugin names (x means policy-x)\n"
            "  --budgets 8,16,all           experts per MoE layer on the device\n"
            "  --intervals 1,4,32,auto      policy-tide refresh intervals; auto = its online\n"
            "                               solver, with [policy-tide] profile (else [policy]\n"
            "                               profile)\n"
            "  --batch 1,2,4,8              batch sizes: decode the prompts (x repeats) up to N\n"
            "                               at a time, each forward serving every running\n"
            "                               prompt (continuous batching; docs/batching.md);\n"
            "                               time is then the wall time of the whole set; the\n"
            "                               no-offload baseline runs at every batch size\n"
            "  --sweep SECTION.KEY=v1,v2    any other key of any section (repeatable): the grid\n"
            "                               is the product, each key a results.csv column;\n"
            "                               the model is reloaded between points unless only\n"
            "                               [policy-*] keys are swept; each point has its own\n"
            "                               baseline for the token check\n"
            "  --prompts FILE               one prompt per line, '#' comments\n"
            "  --repeats N                  run the prompt set N times per configuration: a\n"
            "                               results.csv row per repeat ('repeat' column) and\n"
            "                               summary.csv with the median, min and max of time\n"
            "                               and tok/s per configuration\n"
            "  --max-prompts N, --out DIR\n"
            "  --scale-profile              accept a [policy] profile measured for another\n"
            "                               expert shape, scaling its expert times by expert\n"
            "                               bytes (as tide sim --scale-profile); every policy,\n"
            "                               policy-tide's interval = auto included, gets it\n"
            "  --warmup N                   per configuration, N untimed generations of the\n"
            "                               first prompt before the timed repeats\n"
            "  -o text|md|json|csv          stdout: the table (a row per repeat, with its sweep\n"
            "                               point), then a summary (tok/s median [min, max])\n"
            "                               and the winner per budget, batch and sweep point:\n"
            "                               its margin over the runner-up, or a tie when their\n"
            "                               [min, max] ranges overlap (one repeat: within 1%%)\n"
            "  -q, --quiet                  no progress line and no info messages; the\n"
            "                               line (configuration i/n, prompt j/m, ETA)\n"
            "                               shows only when stderr is a terminal\n\n"
            "Before the first run every grid point is checked (policies start against the\n"
            "model's shape and costs, profiles and files exist, lists parse); all problems\n"
            "are listed and nothing runs (exit 2).\n\n"
            "Splitting the sweep over processes or machines (docs/cluster.md):\n"
            "  --shard K/N        run only configurations i with i mod N = K, numbering them\n"
            "                     from 0 in the order above (sweep point, then policy,\n"
            "                     budget, interval, batch; the baselines are not numbered:\n"
            "                     every shard runs them for its token check). Writes "
            "DIR/YYYYmmdd-HHMMSS-shard-\n"
            "                     K-of-N; only shard 0 records [output] trace.\n"
            "  --baseline DIR     take the baseline (its row, metrics and tokens) from an\n"
            "                     earlier result folder of the same code, checkpoint,\n"
            "                     prompts and settings instead of running it\n"
            "  --emit-slurm N     do not run: write a folder under DIR with submit.sh, a\n"
            "                     job array running this command as N shards\n"
            "                     (shards.sbatch) and a merge job that runs after them\n"
            "                     (merge.sbatch); --partition, --gres (e.g. gpu:1) and\n"
            "                     --time (e.g. 2:00:00) go into the shard jobs' #SBATCH\n"
            "                     lines\n"
            "  merge DIR... --out DIR\n"
            "                     join shards (result folders, or folders holding them)\n"
            "                     into DIR exactly as one run would have written it; refuses\n"
            "                     shards of another grid, configuration, checkpoint or\n"
            "                     revision (naming the field), and reports missing shards\n"
            "  plot DIR [--out PLOTDIR]\n"
            "                     SVG charts of a result folder: time, tok/s and hit rate\n"
            "                     against budget and interval, error bars from repeats\n"
            "                     (tide bench plot --help; PDF/PNG: python -m tide.plot)\n\n"
            "examples:\n"
            "  tide bench -c config/llada2-tiny.ini --policies tide,lru,static --budgets 4,8\n"
            "  tide bench -c my.ini --shard 1/4 --out runs/shards   # one of 4 processes\n"
            "  tide bench merge runs/shards --out runs/merged\n"
            "  tide bench -c my.ini --emit-slurm 8 --gres gpu:1 --time 4:00:00 --out runs\n");
}

/* Split "a,b,c" into at most max trimmed items (pointers into buf). An
 * empty list is 0 items; an empty item ("4,,8", "4,") or too many items is
 * an error (-1, logged naming [bench] what). */
static int bench_split(char *buf, char **items, int max, const char *what)
{
    int n = 0;
    const char *given = buf;
    while (*given == ' ')
        given++;
    if (!*given)
        return 0;
    for (char *t = buf, *next; t; t = next) {
        next = strchr(t, ',');
        if (next)
            *next++ = 0;
        while (*t == ' ')
            t++;
        char *end = t + strlen(t);
        while (end > t && end[-1] == ' ')
            *--end = 0;
        if (!*t) {
            tide_error("[bench] %s: item %d of the list is empty (a stray comma?)", what, n + 1);
            return -1;
        }
        if (n == max) {
            tide_error("[bench] %s: more than %d items", what, max);
            return -1;
        }
        items[n++] = t;
    }
    return n;
}

struct bench_prompts {
    char *text; /* the file, lines cut in place */
    char **line;
    int n;
};

static int bench_load_prompts(const char *given, int max, struct bench_prompts *p, char *path,
                              size_t path_len)
{
    size_t len;
    int rc = tide_shipped_path(given, "[bench] prompts", path, path_len);
    if (rc == TIDE_OK)
        rc = cli_read_file(path, &p->text, &len);
    if (rc != TIDE_OK)
        return rc;
    int cap = 0;
    char *save = NULL;
    for (char *l = strtok_r(p->text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        size_t ll = strlen(l);
        while (ll && (l[ll - 1] == '\r' || l[ll - 1] == ' '))
            l[--ll] = 0;
        if (!ll || l[0] == '#')
            continue;
        if (max && p->n == max)
            break;
        if (p->n == cap) {
            cap = cap ? 2 * cap : 32;
            char **nl = realloc(p->line, sizeof *nl * (size_t)cap);
            if (!nl)
                return TIDE_E_NOMEM;
            p->line = nl;
        }
        p->line[p->n++] = l;
    }
    if (!p->n) {
        tide_error("[bench] prompts = %s: no prompts in the file", path);
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

/* One configuration's results. */
struct bench_row {
    char policy[64];
    int interval; /* -1: not applicable */
    int budget;
    int64_t tokens, steps;
    double seconds;
    struct tide_moe_counters c;
    bool same;  /* generated the baseline's tokens */
    int batch;  /* sequences decoded at once */
    long point; /* of the --sweep grid */
    int repeat; /* 0 .. repeats-1: each repeat is its own row */
    /* Attention cost, for the DIP comparison (docs/dip.md; with batches,
     * time is the whole set's wall time, as in the main table):
     * requests, their passes, the key positions those attended, the prompt
     * tokens at the start and the tokens that joined during generation. */
    bool dip;
    int64_t requests, forwards, attended, computed, prompt_tokens, inserted;
};

static uint64_t bench_hash(const int32_t *ids, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)ids;
    for (size_t i = 0; i < (size_t)n * sizeof *ids; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* manifest.json: provenance, then what the sweep recorded for merging
 * (cli/bench_shard.h). */
static int bench_manifest(const char *dir, const struct tide_engine *e, const char *prompts,
                          const json_t *sweep)
{
    char path[4400], pcre[64] = "?";
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    pcre2_config(PCRE2_CONFIG_VERSION, pcre);
    json_t *m = cli_manifest_new("bench");
    if (!m)
        return TIDE_E_NOMEM;
    json_object_set_new(
        m, "device_backend",
        json_string(e->dev.ops->describe ? e->dev.ops->describe(e->dev.bk) : e->dev.name));
    json_object_set_new(
        m, "host_backend",
        json_string(e->host.ops->describe ? e->host.ops->describe(e->host.bk) : e->host.name));
    json_object_set_new(m, "model", json_string(e->model_dir));
    json_object_set_new(m, "prompts", json_string(prompts));
    json_t *lib = json_object();
    json_object_set_new(lib, "jansson", json_string(JANSSON_VERSION));
    json_object_set_new(lib, "pcre2", json_string(pcre));
    json_object_set_new(m, "libraries", lib);
    if (sweep)
        json_object_update(m, (json_t *)sweep);
    int rc = json_dump_file(m, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(m);
    if (rc) {
        tide_error("cannot write %s", path);
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

static void bench_print_row(FILE *f, const struct bench_row *r, const struct cli_sweep *sw)
{
    const bool csv = sw != NULL;
    const uint64_t rows = r->c.hit_rows + r->c.miss_rows;
    const double hit = rows ? (double)r->c.hit_rows / (double)rows : 0.0;
    char iv[16];
    snprintf(iv, sizeof iv, r->interval < 0 ? "-" : r->interval ? "%d" : "auto", r->interval);
    if (csv)
        fprintf(
            f, "%s,%s,%d,%lld,%lld,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu,%llu,%.6f,%.6f,%.6f,%s,%d,%d",
            r->policy, iv, r->budget, (long long)r->tokens, (long long)r->steps, r->seconds, hit,
            (unsigned long long)r->c.hit_rows, (unsigned long long)r->c.miss_rows,
            (unsigned long long)r->c.promotions, (unsigned long long)r->c.evictions,
            (unsigned long long)r->c.weight_bytes, (unsigned long long)r->c.act_bytes,
            r->c.host_seconds, r->c.device_seconds,
            r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0, r->same ? "yes" : "NO", r->batch,
            r->repeat);
    if (csv) {
        cli_sweep_csv_row(sw, r->point, f);
        fputc('\n', f);
    }
}

/* -o: what stdout shows the table and summary as. */
enum bench_fmt { BENCH_TEXT, BENCH_MD, BENCH_JSON, BENCH_CSV };

static double bench_tps(const struct bench_row *r)
{
    return r->seconds > 0 ? (double)r->tokens / r->seconds : 0.0;
}

static void bench_interval_str(int interval, char *buf, size_t len)
{
    snprintf(buf, len, interval < 0 ? "-" : interval ? "%d" : "auto", interval);
}

static const char bench_cols[] = "policy,interval,budget,batch,repeat,hit_rate,host_rows,promoted,"
                                 "weights_gb,acts_gb,tokens,seconds,tokens_per_second,same";

/* The stdout table's header in format fmt. */
static void bench_out_header(FILE *f, enum bench_fmt fmt, const struct cli_sweep *sw)
{
    if (fmt == BENCH_TEXT) {
        fprintf(f, "%-16s %8s %6s %5s %3s %9s %9s %9s %10s %9s %8s %8s %8s %5s%s\n", "policy",
                "interval", "budget", "batch", "rep", "hit rate", "host rows", "promoted",
                "weights GB", "acts GB", "tokens", "time s", "tok/s", "same",
                sw->n ? "  sweep point" : "");
    } else if (fmt == BENCH_CSV) {
        fputs(bench_cols, f);
        cli_sweep_csv_header(sw, f);
        fputc('\n', f);
    } else if (fmt == BENCH_MD) {
        fputs("| policy | interval | budget | batch | repeat | hit rate | host rows | promoted | "
              "weights GB | acts GB | tokens | time s | tok/s | same |",
              f);
        for (int a = 0; a < sw->n; a++)
            fprintf(f, " %s |", sw->axis[a].name);
        fputs("\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|", f);
        for (int a = 0; a < sw->n; a++)
            fputs("---|", f);
        fputc('\n', f);
    }
}

/* One row of the stdout table (JSON: one object, returned). Every format
 * names the row's repeat (from 1) and sweep point. */
static json_t *bench_out_row(FILE *f, enum bench_fmt fmt, const struct bench_row *r,
                             const struct cli_sweep *sw)
{
    const uint64_t rows = r->c.hit_rows + r->c.miss_rows;
    const double hit = rows ? (double)r->c.hit_rows / (double)rows : 0.0;
    char iv[16], label[512] = "";
    bench_interval_str(r->interval, iv, sizeof iv);
    cli_sweep_label(sw, r->point, label, sizeof label);
    const char *sep = fmt == BENCH_MD ? " | " : fmt == BENCH_CSV ? "," : " ";
    if (fmt == BENCH_JSON) {
        json_t *o = json_pack(
            "{s:s,s:s,s:i,s:i,s:i,s:f,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:b}", "policy", r->policy,
            "interval", iv, "budget", r->budget, "batch", r->batch, "repeat", r->repeat + 1,
            "hit_rate", hit, "host_rows", (json_int_t)r->c.miss_rows, "promoted",
            (json_int_t)r->c.promotions, "weight_bytes", (json_int_t)r->c.weight_bytes, "act_bytes",
            (json_int_t)r->c.act_bytes, "tokens", (json_int_t)r->tokens, "seconds", r->seconds,
            "tokens_per_second", bench_tps(r), "same", r->same);
        json_t *pt = json_object();
        for (int a = 0; o && pt && a < sw->n; a++)
            json_object_set_new(pt, sw->axis[a].name,
                                json_string(cli_sweep_value(sw, r->point, a)));
        if (o)
            json_object_set_new(o, "sweep_point", pt);
        return o;
    }
    if (fmt == BENCH_TEXT) {
        fprintf(
            f, "%-16s %8s %6d %5d %3d %8.2f%% %9llu %9llu %10.4f %9.4f %8lld %8.2f %8.1f %5s%s%s\n",
            r->policy, iv, r->budget, r->batch, r->repeat + 1, 100.0 * hit,
            (unsigned long long)r->c.miss_rows, (unsigned long long)r->c.promotions,
            (double)r->c.weight_bytes / 1e9, (double)r->c.act_bytes / 1e9, (long long)r->tokens,
            r->seconds, bench_tps(r), r->same ? "yes" : "NO", sw->n ? "  " : "", label);
        return NULL;
    }
    fprintf(f, "%s%s%s%s%s%d%s%d%s%d%s%.4f%s%llu%s%llu%s%.4f%s%.4f%s%lld%s%.4f%s%.1f%s%s",
            fmt == BENCH_MD ? "| " : "", r->policy, sep, iv, sep, r->budget, sep, r->batch, sep,
            r->repeat + 1, sep, hit, sep, (unsigned long long)r->c.miss_rows, sep,
            (unsigned long long)r->c.promotions, sep, (double)r->c.weight_bytes / 1e9, sep,
            (double)r->c.act_bytes / 1e9, sep, (long long)r->tokens, sep, r->seconds, sep,
            bench_tps(r), sep, r->same ? "yes" : "NO");
    for (int a = 0; a < sw->n; a++)
        fprintf(f, "%s%s", sep, cli_sweep_value(sw, r->point, a));
    fputs(fmt == BENCH_MD ? " |\n" : "\n", f);
    return NULL;
}

/* With [dip] on: what the paper compares (all examples up front, with and
 * without the KV cache, and DIP), per row: forwards and key positions
 * attended per forward, the prompt at the start and what joined later, and
 * time, per request. */
static void bench_dip_table(FILE *f, enum bench_fmt fmt, const struct bench_row *rows, int n,
                            const struct cli_sweep *sw)
{
    bool any = false;
    for (int i = 0; i < n; i++)
        any |= rows[i].dip && rows[i].requests > 0;
    if (!any)
        return;
    const bool md = fmt == BENCH_MD;
    fprintf(f,
            "\n%sDIP (docs/dip.md), per request: forwards; per forward, the key positions "
            "attended (context) and the positions computed; prompt tokens at the start and "
            "joined during generation; time%s\n",
            md ? "**" : "", md ? "**" : "");
    if (md)
        fputs("| policy | budget | batch | repeat | requests | forwards | ctx tokens / forward | "
              "computed / forward | prompt tokens | joined later | ms / request | sweep point |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
              f);
    else
        fprintf(f, "%-16s %6s %5s %3s %8s %9s %11s %11s %9s %9s %12s  %s\n", "policy", "budget",
                "batch", "rep", "requests", "forwards", "ctx/forward", "computed/fw", "prompt",
                "joined", "ms/request", "sweep point");
    for (int i = 0; i < n; i++) {
        const struct bench_row *r = &rows[i];
        if (!r->dip || !r->requests)
            continue;
        char label[512] = "";
        cli_sweep_label(sw, r->point, label, sizeof label);
        const double q = (double)r->requests;
        const double fw = r->forwards ? (double)r->forwards : 1.0;
        const double ctx = (double)r->attended / fw, comp = (double)r->computed / fw;
        if (md)
            fprintf(f,
                    "| %s | %d | %d | %d | %lld | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
                    r->policy, r->budget, r->batch, r->repeat + 1, (long long)r->requests,
                    (double)r->forwards / q, ctx, comp, (double)r->prompt_tokens / q,
                    (double)r->inserted / q, 1e3 * r->seconds / q, label);
        else
            fprintf(f, "%-16s %6d %5d %3d %8lld %9.1f %11.1f %11.1f %9.1f %9.1f %12.1f  %s\n",
                    r->policy, r->budget, r->batch, r->repeat + 1, (long long)r->requests,
                    (double)r->forwards / q, ctx, comp, (double)r->prompt_tokens / q,
                    (double)r->inserted / q, 1e3 * r->seconds / q, label);
    }
}

struct bench {
    struct cli_ctx *c;
    struct tide_engine *e;
    struct bench_prompts prompts;
    char prompts_path[PATH_MAX]; /* the file read (cli_shipped_path) */
    int repeats;
    int warmup; /* --warmup: untimed generations per configuration */
    bool chat;
    uint64_t *want;     /* [n prompts] baseline hash of the generated ids, 0 = none yet (of the
                         * current sweep point: a slice of want_all) */
    uint64_t *want_all; /* [sweep points][n prompts] */
    struct tide_trace_writer *trace; /* records the first configuration, then NULL */
    struct tide_trace_sink trace_sink;
    char dir[4200];
    /* The progress line: configuration cfg_i + 1 of n_cfg (this process's,
     * baselines included), named cfg_label (last: a narrow terminal cuts
     * it first); its units are prompts. */
    struct cli_progress pg;
    long cfg_i, n_cfg;
    char cfg_label[600];
};

/* Prompt i (0-based) of repeat rep of the current configuration starts. */
static void bench_progress(struct bench *b, int rep, int i)
{
    const int P = b->prompts.n;
    char reps[48] = "";
    if (b->repeats > 1)
        snprintf(reps, sizeof reps, " repeat %d/%d,", rep + 1, b->repeats);
    cli_progress_update(&b->pg, (double)((b->cfg_i * b->repeats + rep) * P + i),
                        "configuration %ld/%ld,%s prompt %d/%d: %s", b->cfg_i + 1, b->n_cfg, reps,
                        i < P ? i + 1 : P, P, b->cfg_label);
}

/* Compare a generation's ids with the baseline's (the first run sets it). */
static void bench_check(struct bench *b, struct bench_row *r, int prompt, const int32_t *ids,
                        int64_t n)
{
    const uint64_t h = bench_hash(ids, n);
    if (!b->want[prompt])
        b->want[prompt] = h;
    else if (b->want[prompt] != h)
        r->same = false;
}

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A batched configuration: every prompt x repeat as one request of a queue. */
struct bench_queue {
    struct bench *b;
    struct bench_row *r;
    struct tide_request *req; /* [n] */
    int32_t **ids;            /* [prompts] encoded prompts */
    size_t *n_ids;            /* [prompts] */
    int n, next;
    int rc;   /* the first request's failure */
    int rep;  /* the repeat, for the progress line */
    int done; /* requests finished */
};

static const struct tide_request *bq_next(void *user, bool idle)
{
    (void)idle;
    struct bench_queue *q = user;
    return q->next < q->n && q->rc == TIDE_OK && !tide_stop_requested() ? &q->req[q->next++] : NULL;
}

static void bq_done(void *user, const struct tide_request *req, int status, struct tide_result *res,
                    const char *error)
{
    (void)error; /* logged where it happened */
    struct bench_queue *q = user;
    const int i = (int)(req - q->req);
    if (status != TIDE_OK && q->rc == TIDE_OK)
        q->rc = status;
    if (status == TIDE_OK && res) {
        q->r->tokens += res->n_ids;
        q->r->steps += res->steps;
        q->r->dip = q->b->e->dip != NULL;
        q->r->requests++;
        q->r->forwards += res->forwards;
        q->r->attended += res->attended;
        q->r->computed += res->computed;
        q->r->prompt_tokens += res->context_tokens;
        q->r->inserted += res->inserted_tokens;
        bench_check(q->b, q->r, i, res->ids, res->n_ids);
    }
    tide_result_free(res);
    bench_progress(q->b, q->rep, ++q->done);
}

/* Every prompt decoded up to batch at a time (one repeat): one wall time for
 * the whole set. */
static int bench_run_batched(struct bench *b, struct bench_row *r, FILE *metrics, int batch,
                             int rep)
{
    const int P = b->prompts.n;
    struct bench_queue q = {.b = b, .r = r, .n = P, .rep = rep};
    q.req = calloc((size_t)q.n, sizeof *q.req);
    q.ids = calloc((size_t)P, sizeof *q.ids);
    q.n_ids = calloc((size_t)P, sizeof *q.n_ids);
    int rc = q.req && q.ids && q.n_ids ? TIDE_OK : TIDE_E_NOMEM;
    for (int i = 0; rc == TIDE_OK && i < P; i++)
        rc = tide_engine_encode(b->e, b->prompts.line[i], b->chat, &q.ids[i], &q.n_ids[i]);
    for (int k = 0; rc == TIDE_OK && k < q.n; k++) {
        tide_request_init(&q.req[k]);
        q.req[k].prompt_ids = q.ids[k];
        q.req[k].n_prompt_ids = q.n_ids[k];
        q.req[k].chat = 0;
    }
    if (rc == TIDE_OK) {
        /* The first configuration records the routing (a batched trace). */
        const struct tide_engine_outputs outs = {.metrics = metrics,
                                                 .trace = b->trace ? &b->trace_sink : NULL};
        const struct tide_batch_queue bq = {
            .size = sizeof bq, .user = &q, .next = bq_next, .done = bq_done};
        tide_engine_set_outputs(b->e, &outs);
        const double t0 = bench_now();
        rc = tide_engine_run_batch(b->e, batch, &bq);
        r->seconds = bench_now() - t0;
        tide_engine_set_outputs(b->e, NULL);
        if (rc == TIDE_OK)
            rc = q.rc;
        if (rc == TIDE_OK && tide_stop_requested())
            rc = TIDE_E_INTERRUPTED;
    }
    for (int i = 0; q.ids && i < P; i++)
        free(q.ids[i]);
    free(q.ids);
    free(q.n_ids);
    free(q.req);
    return rc;
}

/* Run the prompt set repeats times under the engine's current placement,
 * batch at a time, each repeat measured on its own: rr[repeats], whose
 * first row names the configuration. */
static int bench_run_config(struct bench *b, struct bench_row *rr, const char *tag, int batch)
{
    char path[4600];
    snprintf(path, sizeof path, "%s/metrics-%s.jsonl", b->dir, tag);
    FILE *metrics = fopen(path, "w");
    if (!metrics) {
        tide_error("cannot create %s: %s", path, strerror(errno));
        return TIDE_E_IO;
    }
    int rc = TIDE_OK;
    /* Untimed: caches, allocators and the policy's history warm up; the
     * counters restart with each repeat. */
    for (int w = 0; w < b->warmup && rc == TIDE_OK; w++) {
        int32_t *ids = NULL;
        size_t n = 0;
        struct tide_gen_result res = {0};
        if ((rc = tide_engine_encode(b->e, b->prompts.line[0], b->chat, &ids, &n)) == TIDE_OK)
            rc = tide_engine_generate_ids(b->e, NULL, ids, (int64_t)n, NULL, NULL, &res);
        free(res.ids);
        free(ids);
    }
    for (int rep = 0; rep < b->repeats && rc == TIDE_OK; rep++) {
        struct bench_row *r = &rr[rep];
        if (rep) {
            *r = (struct bench_row){
                .interval = rr->interval, .budget = rr->budget, .point = rr->point};
            memcpy(r->policy, rr->policy, sizeof r->policy);
        }
        r->repeat = rep;
        tide_moe_reset_totals(b->e->moe);
        r->same = true;
        r->batch = batch;
        if (batch > 1) {
            bench_progress(b, rep, 0);
            rc = bench_run_batched(b, r, metrics, batch, rep);
        }
        for (int i = 0; batch == 1 && i < b->prompts.n && rc == TIDE_OK; i++) {
            int32_t *ids = NULL;
            size_t n = 0;
            bench_progress(b, rep, i);
            rc = tide_engine_encode(b->e, b->prompts.line[i], b->chat, &ids, &n);
            if (rc == TIDE_OK) {
                struct tide_gen_result res;
                fprintf(metrics, "{\"type\":\"prompt\",\"prompt\":%d,\"repeat\":%d}\n", i, rep);
                const struct tide_engine_outputs outs = {
                    .metrics = metrics,
                    .trace = rep == 0 && b->trace ? &b->trace_sink : NULL,
                    .prompt_id = (uint32_t)i};
                rc = tide_engine_generate_ids(b->e, NULL, ids, (int64_t)n, NULL, &outs, &res);
                if (rc == TIDE_OK) {
                    r->tokens += res.n;
                    r->steps += res.steps;
                    r->seconds += res.seconds;
                    r->dip = b->e->dip != NULL;
                    r->requests++;
                    r->forwards += res.forwards;
                    r->attended += res.attended;
                    r->computed += res.computed;
                    r->prompt_tokens += res.prompt_tokens;
                    r->inserted += res.inserted;
                    bench_check(b, r, i, res.ids, res.n);
                }
                free(res.ids);
            }
            free(ids);
        }
        tide_moe_totals(b->e->moe, &r->c);
    }
    if (fclose(metrics) != 0 && rc == TIDE_OK)
        rc = TIDE_E_IO;
    return rc;
}

static int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, least and greatest of a configuration's repeats. */
struct bench_stat {
    double med, min, max;
};

/* The spread of v[n] (sorted in place). */
static struct bench_stat bench_stat_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return (struct bench_stat){
        .med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), .min = v[0], .max = v[n - 1]};
}

/* Time and tok/s over the repeats of the configuration starting at r. */
static void bench_stats(const struct bench_row *r, int repeats, struct bench_stat *sec,
                        struct bench_stat *tps)
{
    double a[1000], b[1000];
    for (int k = 0; k < repeats; k++) {
        a[k] = r[k].seconds;
        b[k] = bench_tps(&r[k]);
    }
    *sec = bench_stat_of(a, repeats);
    *tps = bench_stat_of(b, repeats);
}

/* summary.csv: one line per configuration (its repeats consecutive rows),
 * with median, min and max of the time and tok/s over the repeats. With
 * --baseline DIR the baseline's line comes first, as DIR wrote it. */
static int bench_summary(const char *dir, const struct bench_row *rows, int n_rows, int repeats,
                         const struct cli_sweep *sw, bool copy_baseline)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/summary.csv", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        tide_error("cannot create %s: %s", path, strerror(errno));
        return TIDE_E_IO;
    }
    fprintf(f, "policy,interval,budget,batch,repeats,seconds_median,seconds_min,seconds_max,"
               "tokens_per_second_median,tokens_per_second_min,tokens_per_second_max");
    cli_sweep_csv_header(sw, f);
    fputc('\n', f);
    if (copy_baseline)
        fprintf(f, "(no offload),-,,1,0,,,,,,\n");
    for (int i = 0; i + repeats <= n_rows; i += repeats) {
        const struct bench_row *r = &rows[i];
        struct bench_stat sec, tps;
        bench_stats(r, repeats, &sec, &tps);
        char iv[16];
        bench_interval_str(r->interval, iv, sizeof iv);
        fprintf(f, "%s,%s,%d,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f", r->policy, iv, r->budget,
                r->batch, repeats, sec.med, sec.min, sec.max, tps.med, tps.min, tps.max);
        cli_sweep_csv_row(sw, r->point, f);
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        tide_error("cannot write %s", path);
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

/* One repeat: a tie below this margin (percent), there being no spread. */
#define BENCH_TIE_PERCENT 1.0

/* The summary on stdout: per configuration tok/s median [min, max], then
 * per budget, batch size and sweep point the policy of highest median tok/s,
 * its margin over the runner-up, or a tie (bench_usage states the rule).
 * JSON adds "summary" and "winners" to doc instead of printing. */
static void bench_report(FILE *f, enum bench_fmt fmt, const struct bench_row *rows, int n_rows,
                         int repeats, const struct cli_sweep *sw, json_t *doc)
{
    const int n = n_rows / repeats;
    struct bench_stat *tps = calloc((size_t)(n ? n : 1), sizeof *tps);
    bool *done = calloc((size_t)(n ? n : 1), sizeof *done);
    json_t *js = json_array(), *jw = json_array();
    if (!tps || !done || !js || !jw)
        goto out;
    if (fmt == BENCH_TEXT)
        fprintf(f,
                "\nsummary: tok/s median [min, max] over %d repeat%s\n%-16s %8s %6s %5s %10s "
                "%22s%s\n",
                repeats, repeats == 1 ? "" : "s", "policy", "interval", "budget", "batch", "tok/s",
                "[min, max]", sw->n ? "  sweep point" : "");
    else if (fmt == BENCH_MD)
        fprintf(f, "\n| policy | interval | budget | batch | sweep point | tok/s median | tok/s "
                   "min | tok/s max |\n|---|---:|---:|---:|---|---:|---:|---:|\n");
    else if (fmt == BENCH_CSV)
        fprintf(f, "\npolicy,interval,budget,batch,sweep_point,tokens_per_second_median,"
                   "tokens_per_second_min,tokens_per_second_max\n");
    for (int i = 0; i < n; i++) {
        const struct bench_row *r = &rows[i * repeats];
        struct bench_stat sec;
        bench_stats(r, repeats, &sec, &tps[i]);
        char iv[16], label[512] = "";
        bench_interval_str(r->interval, iv, sizeof iv);
        cli_sweep_label(sw, r->point, label, sizeof label);
        if (fmt == BENCH_TEXT)
            fprintf(f, "%-16s %8s %6d %5d %10.1f [%9.1f, %9.1f]%s%s\n", r->policy, iv, r->budget,
                    r->batch, tps[i].med, tps[i].min, tps[i].max, sw->n ? "  " : "", label);
        else if (fmt == BENCH_MD)
            fprintf(f, "| %s | %s | %d | %d | %s | %.1f | %.1f | %.1f |\n", r->policy, iv,
                    r->budget, r->batch, label, tps[i].med, tps[i].min, tps[i].max);
        else if (fmt == BENCH_CSV)
            fprintf(f, "%s,%s,%d,%d,%s,%.4f,%.4f,%.4f\n", r->policy, iv, r->budget, r->batch, label,
                    tps[i].med, tps[i].min, tps[i].max);
        else
            json_array_append_new(js, json_pack("{s:s,s:s,s:i,s:i,s:s,s:i,s:f,s:f,s:f}", "policy",
                                                r->policy, "interval", iv, "budget", r->budget,
                                                "batch", r->batch, "sweep_point", label, "repeats",
                                                repeats, "tokens_per_second_median", tps[i].med,
                                                "tokens_per_second_min", tps[i].min,
                                                "tokens_per_second_max", tps[i].max));
    }
    bool head = false;
    for (int i = 0; i < n; i++) {
        const struct bench_row *g = &rows[i * repeats];
        if (done[i] || !strcmp(g->policy, "(no offload)"))
            continue;
        /* The group: the same budget, batch and sweep point; the baseline
         * is the reference, not a contestant. */
        int w = -1, ru = -1;
        for (int j = i; j < n; j++) {
            const struct bench_row *r = &rows[j * repeats];
            if (r->budget != g->budget || r->batch != g->batch || r->point != g->point ||
                !strcmp(r->policy, "(no offload)"))
                continue;
            done[j] = true;
            if (w < 0 || tps[j].med > tps[w].med) {
                ru = w;
                w = j;
            } else if (ru < 0 || tps[j].med > tps[ru].med) {
                ru = j;
            }
        }
        if (ru < 0)
            continue; /* one contestant: nothing to win */
        const struct bench_row *W = &rows[w * repeats], *R = &rows[ru * repeats];
        const double margin = tps[ru].med > 0 ? 100.0 * (tps[w].med / tps[ru].med - 1.0) : 0.0;
        const bool tie = repeats > 1 ? tps[w].min <= tps[ru].max : margin < BENCH_TIE_PERCENT;
        char wn[96], rn[96], label[512] = "";
        snprintf(wn, sizeof wn,
                 W->interval < 0 ? "%s"
                 : W->interval   ? "%s i%d"
                                 : "%s i auto",
                 W->policy, W->interval);
        snprintf(rn, sizeof rn,
                 R->interval < 0 ? "%s"
                 : R->interval   ? "%s i%d"
                                 : "%s i auto",
                 R->policy, R->interval);
        cli_sweep_label(sw, g->point, label, sizeof label);
        if (fmt == BENCH_JSON) {
            json_array_append_new(jw,
                                  json_pack("{s:i,s:i,s:s,s:s,s:s,s:f,s:b}", "budget", g->budget,
                                            "batch", g->batch, "sweep_point", label, "winner", wn,
                                            "runner_up", rn, "margin_percent", margin, "tie", tie));
            continue;
        }
        if (!head) {
            fprintf(f,
                    "\n%swinner per budget, batch and sweep point: highest median tok/s; a tie "
                    "when %s\n",
                    fmt == BENCH_MD    ? ""
                    : fmt == BENCH_CSV ? "# "
                                       : "",
                    repeats > 1 ? "its [min, max] over the repeats overlaps the runner-up's"
                                : "within 1% of the runner-up (one repeat: no spread)");
            head = true;
        }
        fprintf(f, "%sbudget %d, batch %d%s%s: ",
                fmt == BENCH_MD    ? "- "
                : fmt == BENCH_CSV ? "# "
                                   : "",
                g->budget, g->batch, sw->n ? ", " : "", label);
        if (tie)
            fprintf(f, "a tie between %s and %s (%.1f vs %.1f tok/s, %+.1f%%%s)\n", wn, rn,
                    tps[w].med, tps[ru].med, margin,
                    repeats > 1 ? ", [min, max] ranges overlap" : "");
        else
            fprintf(f, "%s wins, %.1f%% faster than %s (%.1f vs %.1f tok/s)\n", wn, margin, rn,
                    tps[w].med, tps[ru].med);
    }
    if (fmt == BENCH_JSON) {
        json_object_set(doc, "summary", js);
        json_object_set(doc, "winners", jw);
    }
out:
    json_decref(js);
    json_decref(jw);
    free(tps);
    free(done);
}

static int bench_parse_ints(char **items, int n, int n_experts, const char *what, int *out)
{
    for (int i = 0; i < n; i++) {
        char *end;
        if (!strcmp(items[i], "all")) {
            out[i] = n_experts;
            continue;
        }
        if (!strcmp(what, "intervals") && !strcmp(items[i], "auto")) {
            out[i] = 0; /* policy-tide's online solver */
            continue;
        }
        const bool budgets = !strcmp(what, "budgets");
        long v = strtol(items[i], &end, 10);
        if (*end || v < (budgets ? 0 : 1) || v > 1000000) {
            char range[128];
            snprintf(range, sizeof range,
                     "expected experts per MoE layer: a number from 0 to %d (the model's experts "
                     "per layer), or 'all' for no offload",
                     n_experts);
            tide_error("[bench] %s: '%s' is not a valid value (%s)", what, items[i],
                       budgets ? range
                       : strcmp(what, "batch")
                           ? "expected a refresh interval in steps: a number >= 1, or auto"
                           : "expected a batch size: a number from 1 to 256");
            return TIDE_E_CONFIG;
        }
        if (budgets && v > n_experts) {
            tide_error("[bench] budgets: %ld is more than the model's %d experts per MoE layer; "
                       "a budget is at most %d; for no offload use 'all'",
                       v, n_experts, n_experts);
            return TIDE_E_CONFIG;
        }
        out[i] = (int)v;
    }
    return TIDE_OK;
}

/* [policy-tide] interval for the next placement (0: auto, whose solver
 * takes [policy] profile when [policy-tide] names none, as in tide sim). */
static int bench_set_interval(struct tide_config *cfg, int interval)
{
    char v[16];
    snprintf(v, sizeof v, interval ? "%d" : "auto", interval);
    int rc = tide_config_set_value(cfg, "policy-tide", "interval", v, "bench");
    const char *prof = tide_opts_str(tide_config_section(cfg, "policy"), "profile");
    if (rc == TIDE_OK && !interval && *prof &&
        !*tide_opts_str(tide_config_section(cfg, "policy-tide"), "profile"))
        rc = tide_config_set_value(cfg, "policy-tide", "profile", prof, "[policy] profile");
    return rc;
}

/* Start every policy of the grid once per sweep point, budget and (for
 * policy-tide) interval against the model's shape and costs, without
 * running: a policy that cannot start (no profile, a profile that does not
 * fit, a bad option) is reported once, with its plugin's own error. Returns
 * the number of problems found. */
static int bench_preflight(struct bench *b, const struct cli_sweep *sw, const char (*names)[64],
                           const bool *usable, int np, const int *budgets, int nb,
                           const int *intervals, int ni)
{
    struct tide_config *cfg = b->c->cfg;
    const struct tide_moe_shape *sh = tide_moe_get_shape(b->e->moe);
    struct tide_decoder_plan plan = {.size = sizeof plan};
    if (!b->e->dec.dec || b->e->dec.ops->plan(b->e->dec.dec, 0, &plan) != TIDE_OK)
        plan =
            (struct tide_decoder_plan){.block_length = (int)tide_opts_int(
                                           tide_config_section(cfg, "generation"), "block_length")};
    const int fmt = sh->size > offsetof(struct tide_moe_shape, qblock) ? sh->qfmt : 0;
    int blk[2] = {0, 0};
    if (fmt)
        memcpy(blk, sh->qblock, sizeof blk);
    struct tide_policy_shape shape = {
        .size = sizeof shape,
        .n_layers = sh->n_layers,
        .n_moe_layers = sh->n_layers,
        .n_experts = sh->n_experts,
        .top_k = sh->top_k,
        .expert_bytes = tide_qexpert_bytes(fmt, blk, (uint32_t)sh->hidden, (uint32_t)sh->inter),
        .block_length = plan.block_length,
        .max_steps = plan.max_steps,
        .costs = b->e->costs,
    };
    int problems = 0;
    bool failed[BENCH_MAX_LIST] = {false};
    for (long pt = 0; pt < cli_sweep_points(sw); pt++) {
        if (cli_sweep_apply(sw, cfg, pt) != TIDE_OK) {
            problems++;
            continue;
        }
        for (int p = 0; p < np; p++) {
            const bool tide = !strcmp(names[p], "policy-tide");
            const struct tide_plugin *pl = tide_plugins_find(b->c->plugins, names[p]);
            for (int k = 0; usable[p] && pl && k < nb * (tide ? ni : 1) && !failed[p]; k++) {
                shape.budget = budgets[k % nb];
                if (shape.budget >= sh->n_experts)
                    continue; /* no offload: no policy */
                if (tide && bench_set_interval(cfg, intervals[k / nb]) != TIDE_OK) {
                    failed[p] = true;
                    problems++;
                    continue;
                }
                const struct tide_policy_ops *ops = pl->desc->ops;
                struct tide_policy *pol = NULL;
                int rc = ops->create(&shape, tide_config_section(cfg, names[p]), &pol);
                if (rc != TIDE_OK) {
                    char label[512] = "";
                    cli_sweep_label(sw, pt, label, sizeof label);
                    tide_error("preflight: %s cannot start at budget %d%s%s (%s)", names[p],
                               shape.budget, sw->n ? ", " : "", label, tide_status_str(rc));
                    failed[p] = true;
                    problems++;
                }
                if (pol)
                    ops->destroy(pol);
            }
        }
    }
    return cli_sweep_apply(sw, cfg, 0) == TIDE_OK ? problems : problems + 1;
}

int cmd_bench(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "merge"))
        return cmd_bench_merge(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "plot"))
        return cmd_bench_plot(argc - 1, argv + 1);
    struct cli_ctx c = {0};
    struct bench_shard_args sa = {0};
    /* tide sim's spellings too: the two commands take the same flags. */
    static const char *flags[][2] = {
        {"--policies", "bench.policies="},
        {"--policy", "bench.policies="},
        {"--budgets", "bench.budgets="},
        {"--budget", "bench.budgets="},
        {"--intervals", "bench.intervals="},
        {"--interval", "bench.intervals="},
        {"--batch", "bench.batch="},
        {"--prompts", "bench.prompts="},
        {"--max-prompts", "bench.max_prompts="},
        {"--repeats", "bench.repeats="},
        {"--out", "bench.out="},
    };
    char *owned[16];
    int n_owned = 0, warmup = 0;
    enum bench_fmt fmt = BENCH_TEXT;
    struct cli_sweep sw = {0};
    for (int i = 1; i < argc; i++) {
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r == 0 && !strcmp(argv[i], "--sweep") && i + 1 < argc)
            r = cli_sweep_add(&sw, argv[++i]) == TIDE_OK ? 1 : -1;
        if (r == 0 && !strcmp(argv[i], "--scale-profile")) {
            c.scale_profile = true;
            r = 1;
        }
        if (r == 0 && !strcmp(argv[i], "--warmup") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            r = *end || v < 0 || v > 1000 ? -1 : 1;
            warmup = (int)v;
            if (r < 0)
                tide_error("--warmup %s: expected a number of generations from 0 to 1000", argv[i]);
        }
        if (r == 0 && (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output-format")) &&
            i + 1 < argc) {
            static const char *const fmts[] = {"text", "md", "json", "csv"};
            r = -1;
            for (int k = 0; k < 4 && r < 0; k++)
                if (!strcmp(argv[i + 1], fmts[k])) {
                    fmt = (enum bench_fmt)k;
                    r = 1;
                }
            if (r < 0)
                tide_error("-o %s: expected text, md, json or csv", argv[i + 1]);
            i++;
        }
        if (r == 0)
            r = bench_shard_arg(&sa, argc, argv, &i);
        if (r < 0) {
            for (int k = 0; k < n_owned; k++)
                free(owned[k]);
            cli_sweep_free(&sw);
            return CLI_EXIT_USAGE;
        }
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            bench_usage(stdout);
            return CLI_EXIT_OK;
        }
        bool known = false;
        for (size_t f = 0; f < sizeof flags / sizeof flags[0] && !known; f++) {
            if (strcmp(argv[i], flags[f][0]) || i + 1 >= argc || n_owned == 16 ||
                c.n_sets == CLI_MAX_SETS)
                continue;
            size_t len = strlen(flags[f][1]) + strlen(argv[i + 1]) + 1;
            char *set = malloc(len);
            if (!set)
                return CLI_EXIT_RUNTIME;
            snprintf(set, len, "%s%s", flags[f][1], argv[++i]);
            owned[n_owned++] = set;
            c.sets[c.n_sets++] = set;
            known = true;
        }
        if (!known) {
            const char *names[sizeof flags / sizeof flags[0] + 10];
            size_t n = 0;
            for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++)
                names[n++] = flags[f][0];
            static const char *const more[] = {"--shard",     "--baseline", "--emit-slurm",
                                               "--partition", "--gres",     "--time",
                                               "--sweep",     "--warmup",   "--scale-profile"};
            for (size_t f = 0; f < sizeof more / sizeof more[0]; f++)
                names[n++] = more[f];
            names[n] = NULL;
            char hint[128];
            cli_suggest_flag(argv[i], names, hint, sizeof hint);
            fprintf(stderr, "tide bench: unexpected argument '%s'%s\n\n", argv[i], hint);
            bench_usage(stderr);
            for (int k = 0; k < n_owned; k++)
                free(owned[k]);
            cli_sweep_free(&sw);
            return CLI_EXIT_USAGE;
        }
    }
    struct bench b = {.c = &c};
    struct bench_shard_run run = {0};
    struct bench_row *rows = NULL;
    char *lists[4] = {NULL, NULL, NULL, NULL};
    int n_rows = 0;
    int rc = cli_setup(&c);
    if (rc == TIDE_OK && sa.emit_slurm)
        rc = bench_emit_slurm(&c, &sa, argc, argv);
    if (rc != TIDE_OK || sa.emit_slurm)
        goto done;
    static const char *const own[] = {"bench", NULL};
    if (sw.n && sa.baseline) {
        tide_error("--baseline DIR and --sweep: each sweep point needs its own baseline; run "
                   "without --baseline");
        rc = TIDE_E_CONFIG;
    }
    if (rc != TIDE_OK || (rc = cli_sweep_check(&sw, c.cfg, own)) != TIDE_OK)
        goto done;
    const long points = cli_sweep_points(&sw);
    const struct tide_opts *bo = tide_config_section(c.cfg, "bench");
    b.chat = tide_opts_bool(tide_config_section(c.cfg, "generation"), "chat");
    b.repeats = (int)tide_opts_int(bo, "repeats");
    b.warmup = warmup;
    /* Preflight: every problem is counted (each logged where found) and
     * checking goes on, so that one run lists them all before any work. */
    int problems = 0;
    problems +=
        bench_load_prompts(tide_opts_str(bo, "prompts"), (int)tide_opts_int(bo, "max_prompts"),
                           &b.prompts, b.prompts_path, sizeof b.prompts_path) != TIDE_OK;
    if ((rc = cli_engine_open(&c, &b.e)) != TIDE_OK && c.costs_failed) {
        /* [policy] profile is missing or does not fit: the rest can still
         * be checked without it (cost-aware policies then report it too). */
        problems++;
        tide_engine_close(b.e);
        b.e = NULL;
        if ((rc = tide_config_set_value(c.cfg, "policy", "profile", "", "bench")) == TIDE_OK)
            rc = cli_engine_open(&c, &b.e);
    }
    if (rc != TIDE_OK)
        goto done;
    const struct tide_moe_shape *sh = tide_moe_get_shape(b.e->moe);
    if (!sh) {
        tide_error("tide bench: the model has no MoE layers to place");
        rc = TIDE_E_CONFIG;
        goto done;
    }
    char *pol[BENCH_MAX_LIST], *bud[BENCH_MAX_LIST], *itv[BENCH_MAX_LIST], *bat[BENCH_MAX_LIST];
    lists[0] = strdup(tide_opts_str(bo, "policies"));
    lists[1] = strdup(tide_opts_str(bo, "budgets"));
    lists[2] = strdup(tide_opts_str(bo, "intervals"));
    lists[3] = strdup(tide_opts_str(bo, "batch"));
    if (!lists[0] || !lists[1] || !lists[2] || !lists[3]) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    int np = bench_split(lists[0], pol, BENCH_MAX_LIST, "policies");
    int nb = bench_split(lists[1], bud, BENCH_MAX_LIST, "budgets");
    int ni = bench_split(lists[2], itv, BENCH_MAX_LIST, "intervals");
    int nt = bench_split(lists[3], bat, BENCH_MAX_LIST, "batch");
    problems += (np < 0) + (nb < 0) + (ni < 0) + (nt < 0);
    int budgets[BENCH_MAX_LIST], intervals[BENCH_MAX_LIST], batches[BENCH_MAX_LIST];
    if (nt <= 0) {
        batches[0] = 1;
        nt = 1;
    } else if (bench_parse_ints(bat, nt, sh->n_experts, "batch", batches) != TIDE_OK) {
        problems++;
        nt = 0;
    }
    for (int t = 0; t < nt; t++) {
        if (batches[t] < 1 || batches[t] > 256) {
            tide_error("[bench] batch: %d is not a batch size from 1 to 256", batches[t]);
            problems++;
        }
    }
    if (nb <= 0) {
        problems += tide_engine_config_budget(b.e, &budgets[0]) != TIDE_OK;
        nb = 1;
    } else if (bench_parse_ints(bud, nb, sh->n_experts, "budgets", budgets) != TIDE_OK) {
        problems++;
        nb = 0;
    }
    if (ni <= 0) {
        intervals[0] = 4;
        ni = 1;
    } else if (bench_parse_ints(itv, ni, sh->n_experts, "intervals", intervals) != TIDE_OK) {
        problems++;
        ni = 0;
    }
    char names[BENCH_MAX_LIST][64];
    bool usable[BENCH_MAX_LIST];
    np = np < 0 ? 0 : np;
    for (int p = 0; p < np; p++) {
        /* "tide" or "policy-tide", resolved as everywhere (loader.h). */
        const struct tide_plugin *pl =
            tide_plugins_get(c.plugins, pol[p], TIDE_PLUGIN_POLICY, "[bench] policies");
        usable[p] = pl != NULL;
        snprintf(names[p], sizeof names[p], "%s", pl ? pl->desc->name : pol[p]);
        problems += !usable[p];
    }
    problems += bench_preflight(&b, &sw, names, usable, np, budgets, nb, intervals, ni);
    if (problems) {
        tide_error("tide bench: preflight found %d problem%s (above) in the grid; nothing was run",
                   problems, problems == 1 ? "" : "s");
        rc = TIDE_E_CONFIG;
        goto done;
    }
    b.want = b.want_all = calloc((size_t)(b.prompts.n * points), sizeof *b.want);
    rows = calloc((size_t)((np * nb * ni * nt + nt) * points * b.repeats), sizeof *rows);
    if (!b.want || !rows) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    const bool baseline = tide_opts_bool(bo, "baseline");
    const struct bench_grid grid = {
        .policy = names,
        .n_policies = np,
        .budget = budgets,
        .n_budgets = nb,
        .interval = intervals,
        .n_intervals = ni,
        .batch = batches,
        .n_batches = nt,
        .baseline = baseline,
        .prompt = b.prompts.line,
        .n_prompts = b.prompts.n,
        .repeats = b.repeats,
        .sweep = &sw,
    };
    char suffix[64];
    bench_shard_suffix(&sa, suffix, sizeof suffix);
    if ((rc = bench_shard_begin(&run, &sa, c.cfg, b.e, &grid, b.want)) != TIDE_OK ||
        (rc = cli_mkdir_stamped(tide_opts_str(bo, "out"), suffix, "[bench] out", b.dir,
                                sizeof b.dir)) != TIDE_OK)
        goto done;
    char path[4400];
    /* The configuration the sweep starts from (it sets policy-tide's interval). */
    snprintf(path, sizeof path, "%s/config.ini", b.dir);
    FILE *ini = fopen(path, "w");
    if (ini) {
        tide_config_print(c.cfg, ini, NULL);
        fclose(ini);
    }
    const struct tide_opts *oo = tide_config_section(c.cfg, "output");
    /* Routing does not depend on placement: shard 0 records it for all. */
    if (*tide_opts_str(oo, "trace") && sa.shard.index == 0 &&
        (rc = cli_trace_open(b.e, tide_opts_str(oo, "trace"), tide_opts_bool(oo, "overwrite"),
                             &b.trace, &b.trace_sink)) != TIDE_OK)
        goto done;
    cli_catch_interrupt();
    tide_info("bench: %d prompts x %d repeats, %ld sweep points x %d policies x %d budgets (x %d "
              "intervals for policy-tide) x %d batch sizes; results in %s",
              b.prompts.n, b.repeats, points, np, nb, ni, nt, b.dir);
    /* Policies read their sections when placed; any other key is read when
     * the engine opens. */
    bool reopen = false;
    for (int a = 0; a < sw.n; a++)
        reopen |= strncmp(sw.axis[a].section, "policy-", 7) != 0;
    bench_out_header(stdout, fmt, &sw);
    fflush(stdout);
    json_t *jdoc = fmt == BENCH_JSON ? json_object() : NULL, *jrows = json_array();
    if ((fmt == BENCH_JSON && !jdoc) || !jrows) {
        json_decref(jrows);
        rc = TIDE_E_NOMEM;
        goto done;
    }
    /* The configurations this process runs, in the loop's order below. */
    for (long pt = 0, idx = 0; pt < points; pt++) {
        b.n_cfg += (baseline && !run.baseline_line) * nt;
        for (int p = 0; p < np; p++)
            for (int k = 0; k < nb * (strcmp(names[p], "policy-tide") ? 1 : ni) * nt; k++)
                b.n_cfg += cli_shard_mine(&sa.shard, idx++);
    }
    cli_progress_begin(&b.pg, "tide bench", (double)(b.n_cfg * b.repeats * b.prompts.n));
    long config = 0; /* index in the grid, for --shard */
    for (long pt = 0; pt < points && rc == TIDE_OK; pt++) {
        if (sw.n) {
            char label[512];
            cli_sweep_label(&sw, pt, label, sizeof label);
            tide_info("bench: sweep point %ld of %ld: %s", pt + 1, points, label);
            b.want = b.want_all + pt * b.prompts.n;
            if (pt > 0 && (rc = cli_sweep_apply(&sw, c.cfg, pt)) == TIDE_OK && reopen) {
                tide_engine_close(b.e);
                b.e = NULL;
                if ((rc = cli_engine_open(&c, &b.e)) == TIDE_OK &&
                    !(sh = tide_moe_get_shape(b.e->moe))) {
                    tide_error("tide bench: the model has no MoE layers to place");
                    rc = TIDE_E_CONFIG;
                }
            }
            if (rc != TIDE_OK)
                break;
        }
        for (int p = -1; p < np && rc == TIDE_OK; p++) {
            if (p < 0 && (!baseline || run.baseline_line))
                continue;
            bool tide_pol = p >= 0 && !strcmp(names[p], "policy-tide");
            for (int bi = 0; bi < (p < 0 ? 1 : nb) && rc == TIDE_OK; bi++) {
                /* The no-offload baseline runs at every batch size too. */
                for (int k = 0; k < (tide_pol ? ni : 1) * nt && rc == TIDE_OK; k++) {
                    const int ii = k / nt, batch = batches[k % nt];
                    if (p >= 0 && !cli_shard_mine(&sa.shard, config++))
                        continue;
                    struct bench_row *r = &rows[n_rows];
                    int budget = p < 0 ? sh->n_experts : budgets[bi];
                    snprintf(r->policy, sizeof r->policy, "%s",
                             p < 0 || budget >= sh->n_experts ? "(no offload)" : names[p]);
                    r->budget = budget;
                    r->point = pt;
                    r->interval = tide_pol ? intervals[ii] : -1;
                    if (tide_pol && (rc = bench_set_interval(c.cfg, intervals[ii])) != TIDE_OK)
                        break;
                    if ((rc = tide_engine_place(b.e, c.plugins, p < 0 ? names[0] : names[p],
                                                budget)) != TIDE_OK)
                        break;
                    char tag[160], pts[48] = "";
                    if (batch > 1)
                        snprintf(pts + strlen(pts), sizeof pts - strlen(pts), "-n%d", batch);
                    if (sw.n)
                        snprintf(pts + strlen(pts), sizeof pts - strlen(pts), "-s%ld", pt);
                    snprintf(tag, sizeof tag, "%s-b%d-i%d%s", p < 0 ? "baseline" : names[p], budget,
                             r->interval, pts);
                    /* "policy-tide b8 i2 n4 generation.threshold=0.5" */
                    char more[512] = "";
                    if (r->interval >= 0)
                        snprintf(more, sizeof more, " i%d", r->interval);
                    if (batch > 1)
                        snprintf(more + strlen(more), sizeof more - strlen(more), " n%d", batch);
                    if (sw.n) {
                        strcat(more, " ");
                        cli_sweep_label(&sw, pt, more + strlen(more), sizeof more - strlen(more));
                    }
                    snprintf(b.cfg_label, sizeof b.cfg_label, "%s b%d%s",
                             p < 0 ? "baseline" : names[p], budget, more);
                    rc = bench_run_config(&b, r, tag, batch);
                    b.cfg_i++;
                    if (b.trace) {
                        /* Routing does not depend on placement: one configuration suffices. */
                        int trc = tide_trace_writer_close(b.trace, rc == TIDE_OK);
                        b.trace = NULL;
                        if (rc == TIDE_OK)
                            rc = trc;
                    }
                    if (rc != TIDE_OK ||
                        (rc = bench_shard_row(&run, p < 0 ? -1 : config - 1, tag)) != TIDE_OK)
                        break;
                    cli_progress_clear(&b.pg);
                    for (int q = 0; q < b.repeats; q++) {
                        json_t *o = bench_out_row(stdout, fmt, &r[q], &sw);
                        if (o)
                            json_array_append_new(jrows, o);
                    }
                    fflush(stdout);
                    n_rows += b.repeats;
                }
            }
        }
    }
    cli_progress_end(&b.pg);
    snprintf(path, sizeof path, "%s/results.csv", b.dir);
    FILE *csv = fopen(path, "w");
    if (!csv) {
        tide_error("cannot create %s", path);
        if (rc == TIDE_OK)
            rc = TIDE_E_IO;
    } else {
        fprintf(csv, "policy,interval,budget,tokens,steps,seconds,hit_rate,hit_rows,miss_rows,"
                     "promotions,evictions,weight_bytes,act_bytes,host_seconds,device_seconds,"
                     "tokens_per_second,same_tokens,batch,repeat");
        cli_sweep_csv_header(&sw, csv);
        fputc('\n', csv);
        if (run.baseline_line)
            fputs(run.baseline_line, csv);
        for (int i = 0; i < n_rows; i++)
            bench_print_row(csv, &rows[i], &sw);
        fclose(csv);
    }
    int src = bench_summary(b.dir, rows, n_rows, b.repeats, &sw, run.baseline_line != NULL);
    if (rc == TIDE_OK)
        rc = src;
    if (n_rows) {
        if (jdoc)
            json_object_set(jdoc, "rows", jrows);
        bench_report(stdout, fmt, rows, n_rows, b.repeats, &sw, jdoc);
        if (fmt == BENCH_TEXT || fmt == BENCH_MD)
            bench_dip_table(stdout, fmt, rows, n_rows, &sw);
        if (jdoc) {
            json_object_set_new(jdoc, "results", json_string(b.dir));
            json_dumpf(jdoc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            fputc('\n', stdout);
        }
        fflush(stdout);
    }
    json_decref(jdoc);
    json_decref(jrows);
    /* Bit-identical tokens are guaranteed when one plugin computes both the
     * device and the host experts; across two backends (cuBLAS and oneDNN)
     * float summation orders differ, so a mismatch is reported, not fatal. */
    const bool strict = !strcmp(b.e->dev.name, b.e->host.name);
    int mrc = bench_manifest(b.dir, b.e, b.prompts_path,
                             bench_shard_end(&run, b.dir, b.want_all, b.prompts.n * (int)points,
                                             strict, rc == TIDE_E_INTERRUPTED));
    if (rc == TIDE_OK)
        rc = mrc;
    bool all_same = true;
    for (int i = 0; i < n_rows; i++)
        all_same &= rows[i].same;
    if (rc == TIDE_OK && !all_same && strict) {
        tide_error("bench: some configurations generated different tokens than the baseline "
                   "(column 'same'); placement must be lossless");
        rc = TIDE_E_INVAL;
    } else if (rc == TIDE_OK && !all_same) {
        tide_warn("bench: some configurations generated different tokens than the baseline; "
                  "device (%s) and host (%s) experts round differently, so this is expected",
                  b.e->dev.name, b.e->host.name);
    }
    if (n_rows)
        tide_info("bench: %d configurations written to %s/results.csv", n_rows, b.dir);
done:
    cli_progress_end(&b.pg);
    bench_shard_run_free(&run);
    tide_trace_writer_close(b.trace, false);
    for (int k = 0; k < n_owned; k++)
        free(owned[k]);
    for (int k = 0; k < 4; k++)
        free(lists[k]);
    free(rows);
    free(b.want_all);
    cli_sweep_free(&sw);
    free(b.prompts.text);
    free(b.prompts.line);
    tide_engine_close(b.e);
    cli_teardown(&c);
    return cli_exit_code(rc);
}
