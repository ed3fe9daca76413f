/* `tide sim`: replay a routing trace through placement policies, budgets and
 * intervals under a hardware profile; hindsight baselines, the oracle
 * bound, the interval and budget solver, a table, CSV and SVG plots
 * (docs/sim.md). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "engine.h"
#include "sim.h"
#include "sim_cli.h"
#include "svgplot.h"
#include "tide/log.h"
#include "tide/quant.h"
#include "tide/status.h"

static void sim_usage(FILE *f)
{
    fprintf(
        f, "usage: tide sim --trace FILE [--profile FILE] [--policy LIST] [--budget LIST]\n"
           "                [--interval LIST] [--csv FILE] [--plot DIR [--plot-series LIST]]\n"
           "                [--metrics FILE]\n"
           "                [--layer-budgets] [--no-hindsight] [--no-oracle] [--scale-profile]\n"
           "                [--model DIR] [--batch N] [--experts FMT] [--force] [-c CONFIG]\n"
           "                [--set section.key=value] [--sweep SECTION.KEY=v1,v2,...]\n"
           "                [--out DIR [--shard K/N]] [-q]\n"
           "       tide sim merge DIR... --out DIR [--trace FILE] [--profile FILE]\n\n"
           "Replays a routing trace (tide run --set output.trace=FILE, or tide trace synth)\n"
           "through the same policy plugins the engine uses, for every policy, budget and\n"
           "(policy-tide) interval, and prints per configuration: promotions, GB moved\n"
           "(weights and activations), host rows, hit rate and, with a hardware profile\n"
           "(config/profiles/), the modelled ms per denoising step and tokens/s.\n\n"
           "  --policy tide,lru,static   policies (plugin names; x means policy-x); --policy,\n"
           "                             --budget and --interval also take tide bench's\n"
           "                             plural spellings (--policies, ...)\n"
           "  --budget 32,64,128         experts per MoE layer on the device (default: 1/4)\n"
           "  --interval 1-32,auto       policy-tide intervals; auto = the policy's online\n"
           "                             solver with this profile (default: 1 to the longest\n"
           "                             block recorded, in steps, at most 64)\n"
           "  --csv FILE                 also write the table as CSV\n"
           "  --plot DIR                 write SVG plots: time against interval per budget,\n"
           "                             hit rate against budget, expert heat maps (log2\n"
           "                             axes for powers of two; the hindsight rows drawn\n"
           "                             as grey dashed bounds; docs/sim.md)\n"
           "  --plot-series tide,lru     draw only these policies (x means policy-x) and\n"
           "                             hindsight rows (belady, best-static, oracle)\n"
           "  --metrics FILE             one configuration only: the engine's per-layer JSON\n"
           "                             Lines, for comparison with a live run\n"
           "  --layer-budgets            also share each budget's memory (budget x layers)\n"
           "                             unequally by greedy marginal gain, and replay it\n"
           "  --no-hindsight             skip belady, best-static and the oracle\n"
           "  --no-oracle                skip the oracle (a min-cost flow; the slowest row)\n"
           "  --experts FMT              replay with experts in weight format FMT (bf16, q8_0,\n"
           "                             q4_0, fp8): the same routing, that format's bytes\n"
           "                             per promotion (docs/quantization.md); the profile\n"
           "                             must be for FMT, or pass --scale-profile\n"
           "  --scale-profile            accept a profile measured for another expert shape,\n"
           "                             scaling its expert times by expert bytes\n"
           "  --model DIR                check that the trace was recorded for this checkpoint\n"
           "  --sweep SECTION.KEY=v1,v2  any key of any section (repeatable; e.g.\n"
           "                             policy-lfu.decay=0.5,0.9): every point replays the\n"
           "                             whole grid, a table and a CSV column per key; with\n"
           "                             --out and --shard too (not with --layer-budgets or\n"
           "                             --plot: python -m tide.plot draws the CSV)\n"
           "  --batch N                  replay the trace's prompts as the engine decodes them\n"
           "                             in batches of up to N (continuous batching: each\n"
           "                             forward holds every running prompt's next forward;\n"
           "                             the policy sees the oldest one's blocks and steps;\n"
           "                             docs/batching.md). Default 1: as recorded\n"
           "  --force                    replace existing --csv, --metrics and plot files\n"
           "  -q, --quiet                no progress line and no info messages; the line\n"
           "                             (configuration i/n, the oracle's layer, ETA) shows\n"
           "                             only when stderr is a terminal\n"
           "  --out DIR                  write a result folder (new or empty): results.csv,\n"
           "                             plots/, rows.json (exact rows) and manifest.json\n"
           "                             (trace and profile hashes, grid, configuration)\n"
           "  --shard K/N                with --out: replay only configurations i with\n"
           "                             i mod N = K, numbered in the order of the table\n"
           "                             (budget, then policy, then interval; then belady,\n"
           "                             best-static and the oracle of that budget); the\n"
           "                             interval choices, --layer-budgets and plots are\n"
           "                             left to the merge\n"
           "  merge DIR... --out DIR     join the shards (result folders or folders of them)\n"
           "                             into what one --out run writes; refuses shards of\n"
           "                             another trace, profile, grid, configuration or\n"
           "                             revision, naming the field (docs/cluster.md)\n"
           "Several traces, batch sizes or profiles (--trace A,B or --trace A --trace B; the\n"
           "same for --batch and --profile) run once per combination, and --csv FILE holds\n"
           "all their rows with the columns trace, batch and profile in front (not with\n"
           "--out, --plot, --shard or --metrics; draw it with python -m tide.plot --facet).\n"
           "Policy options come from -c CONFIG and --set (e.g. --set policy-tide.prefetch=true).\n"
           "The profile's costs go to every policy (policy-cost, policy-hybrid and policy-warm\n"
           "need them). After the table: per budget, the best policy and its ratio to the oracle.\n"
           "Hindsight rows: belady (full swap, evicting the farthest next use), best-static\n"
           "(the top-B experts over the whole trace), oracle (a lower bound on every\n"
           "policy's modelled time; its hit rate and moves are those of its schedule).\n");
}

int sim_add_row(struct sim_cli *s, struct sim_row **out)
{
    if (s->n_rows == s->cap_rows) {
        int n = s->cap_rows ? 2 * s->cap_rows : 64;
        struct sim_row *r = realloc(s->rows, sizeof *r * (size_t)n);
        if (!r)
            return TIDE_E_NOMEM;
        s->rows = r;
        s->cap_rows = n;
    }
    *out = &s->rows[s->n_rows++];
    memset(*out, 0, sizeof **out);
    (*out)->interval_n = -1;
    (*out)->point = s->point;
    snprintf((*out)->interval, sizeof(*out)->interval, "-");
    return TIDE_OK;
}

/* "1-8,16,auto" into values (auto = 0). */
static int sim_parse_list(const char *text, const char *what, bool allow_auto, int lo, int hi,
                          int *out, int *n)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    *n = 0;
    for (char *tok = buf, *next; tok; tok = next) {
        long a, b;
        char *end;
        if ((next = strchr(tok, ',')))
            *next++ = 0;
        if (!*tok) {
            tide_error("--%s %s: an empty item (a stray comma?); expected numbers or ranges "
                       "within [%d, %d]%s",
                       what, text, lo, hi, allow_auto ? " or auto" : "");
            return TIDE_E_CONFIG;
        }
        if (allow_auto && !strcmp(tok, "auto")) {
            a = b = 0;
        } else {
            errno = 0;
            a = strtol(tok, &end, 10);
            b = a;
            if (end != tok && *end == '-')
                b = strtol(end + 1, &end, 10);
            if (end == tok || *end || errno || a < lo || b > hi || b < a) {
                tide_error("--%s %s: '%s' is not a number or range within [%d, %d]%s", what, text,
                           tok, lo, hi, allow_auto ? " or auto" : "");
                return TIDE_E_CONFIG;
            }
        }
        for (long v = a; v <= b; v++) {
            if (*n == SIM_MAX_LIST) {
                tide_error("--%s: at most %d values", what, SIM_MAX_LIST);
                return TIDE_E_CONFIG;
            }
            out[(*n)++] = (int)v;
        }
    }
    if (!*n) {
        tide_error("--%s is empty", what);
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

/* Create PATH.tmp unless PATH exists (and !force). */
static FILE *sim_create(const char *path, bool force, char **tmp)
{
    if (!force && access(path, F_OK) == 0) {
        tide_error("%s exists; refusing to replace it (use --force)", path);
        return NULL;
    }
    *tmp = malloc(strlen(path) + 5);
    if (!*tmp)
        return NULL;
    sprintf(*tmp, "%s.tmp", path);
    FILE *f = fopen(*tmp, "w");
    if (!f) {
        tide_error("cannot create %s: %s", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
    }
    return f;
}

static int sim_finish(FILE *f, char *tmp, const char *path, bool keep)
{
    int rc = ferror(f) ? TIDE_E_IO : TIDE_OK;
    if (fclose(f) != 0)
        rc = TIDE_E_IO;
    if (keep && rc == TIDE_OK && rename(tmp, path) != 0)
        rc = TIDE_E_IO;
    if (keep && rc != TIDE_OK)
        tide_error("cannot write %s: %s", path, strerror(errno));
    if (!keep || rc != TIDE_OK)
        remove(tmp);
    free(tmp);
    return rc;
}

static int sim_args(struct sim_cli *s, int argc, char **argv)
{
    s->hindsight = s->oracle = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_common_arg(&s->c, argc, argv, &i);
        if (r == 0)
            r = sim_shard_arg(s, argc, argv, &i);
        if (r < 0)
            return TIDE_E_CONFIG;
        if (r == 0 && !strcmp(a, "--sweep") && i + 1 < argc &&
            (r = cli_sweep_add(&s->sweep, argv[++i]) == TIDE_OK ? 1 : -1) < 0)
            return TIDE_E_CONFIG;
        if (r > 0)
            continue;
        static const char *const flags[] = {"--no-hindsight", "--no-oracle", "--layer-budgets",
                                            "--scale-profile", "--force"};
        bool *flag_dst[] = {&s->hindsight, &s->oracle, &s->layer_budgets, &s->scale, &s->force};
        const bool flag_val[] = {false, false, true, true, true};
        bool done = false;
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
            if (!strcmp(a, flags[k])) {
                *flag_dst[k] = flag_val[k];
                done = true;
            }
        if (done)
            continue;
        if (!strcmp(a, "--experts")) {
            if (i + 1 >= argc || tide_qfmt_parse(argv[i + 1], &s->qfmt)) {
                tide_error("--experts needs a weight format: bf16, q8_0, q4_0 or fp8");
                return TIDE_E_CONFIG;
            }
            i++;
            continue;
        }
        if (!strcmp(a, "--plot-series")) {
            if (i + 1 >= argc || !argv[i + 1][0]) {
                tide_error("--plot-series needs a list of policies, e.g. tide,lru,oracle");
                return TIDE_E_CONFIG;
            }
            s->plot_series = argv[++i];
            continue;
        }
        if (!strcmp(a, "--batch")) {
            char *end;
            const long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || end == argv[i + 1] || *end || v < 1 || v > 4096) {
                tide_error("--batch needs a number of sequences from 1 to 4096");
                return TIDE_E_CONFIG;
            }
            s->batch = (int)v;
            i++;
            continue;
        }
        /* tide bench's plural spellings too: the two take the same flags. */
        static const char *const vals[] = {
            "--trace",   "--profile",   "--csv",    "--plot",     "--metrics",
            "--model",   "--policy",    "--budget", "--interval", "--policies",
            "--budgets", "--intervals", NULL,
        };
        const char **val_dst[] = {&s->trace_path, &s->profile_path, &s->csv,
                                  &s->plot,       &s->metrics,      &s->model_dir};
        char *list_dst[] = {s->policies, s->budgets, s->intervals};
        const size_t n_vals = sizeof vals / sizeof vals[0] - 1;
        size_t k = 0;
        while (k < n_vals && strcmp(a, vals[k]))
            k++;
        if (k == n_vals) {
            const char *names[32];
            size_t n = 0;
            for (size_t j = 0; j < n_vals; j++)
                names[n++] = vals[j];
            for (size_t j = 0; j < sizeof flags / sizeof flags[0]; j++)
                names[n++] = flags[j];
            names[n++] = "--out";
            names[n++] = "--shard";
            names[n++] = "--batch";
            names[n++] = "--experts";
            names[n++] = "--sweep";
            names[n++] = "--plot-series";
            names[n] = NULL;
            char hint[128];
            cli_suggest_flag(a, names, hint, sizeof hint);
            tide_error("sim: unknown argument '%s'%s (see tide sim --help)", a, hint);
            return TIDE_E_CONFIG;
        }
        if (i + 1 >= argc) {
            tide_error("%s needs a value", a);
            return TIDE_E_CONFIG;
        }
        if (k < 6)
            *val_dst[k] = argv[++i];
        else
            snprintf(list_dst[(k - 6) % 3], 512, "%s", argv[++i]);
    }
    if (!s->trace_path) {
        tide_error("sim: name the routing trace with --trace FILE");
        return TIDE_E_CONFIG;
    }
    if (s->plot_series && !s->plot && !s->out) {
        tide_error("--plot-series chooses what --plot DIR (or --out DIR) draws; give one");
        return TIDE_E_CONFIG;
    }
    if (!s->hindsight)
        s->oracle = false;
    return TIDE_OK;
}

/* --model DIR: open the checkpoint (experts stay where they are) and compare. */
static int sim_check_model(struct sim_cli *s)
{
    int rc = tide_config_set_value(s->c.cfg, "model", "path", s->model_dir, "--model");
    if (rc == TIDE_OK)
        rc = tide_config_set_value(s->c.cfg, "policy", "budget", "-1", "--model");
    struct tide_engine *e = NULL;
    if (rc == TIDE_OK && (rc = tide_engine_prepare(s->c.cfg, s->c.plugins, &e)) == TIDE_OK)
        rc = tide_engine_load(e, s->c.plugins);
    if (rc == TIDE_OK) {
        const struct tide_model_info *m = e->mops->info(e->model);
        const struct tide_trace_header *h = &s->t->h;
        if ((uint32_t)m->n_moe_layers != h->n_layers || (uint32_t)m->n_experts != h->n_experts ||
            (uint32_t)m->top_k != h->top_k || (uint32_t)m->hidden != h->hidden ||
            m->expert_bytes != h->expert_bytes) {
            tide_error("trace %s was recorded for %u MoE layers x %u experts (top-%u, hidden %u, "
                       "%llu bytes per expert), but the model %s has %d x %d (top-%d, hidden %d, "
                       "%llu bytes per expert)",
                       s->trace_path, h->n_layers, h->n_experts, h->top_k, h->hidden,
                       (unsigned long long)h->expert_bytes, s->model_dir, m->n_moe_layers,
                       m->n_experts, m->top_k, m->hidden, (unsigned long long)m->expert_bytes);
            rc = TIDE_E_CONFIG;
        }
    }
    tide_engine_close(e);
    return rc;
}

static int sim_setup(struct sim_cli *s)
{
    int rc = tide_sim_trace_load(s->trace_path, &s->t);
    if (rc != TIDE_OK)
        return rc;
    if (s->batch > 1) {
        struct tide_sim_trace *b;
        if ((rc = tide_sim_trace_batch(s->t, s->batch, &b)) != TIDE_OK)
            return rc;
        tide_sim_trace_free(s->t);
        s->t = b;
    }
    const struct tide_trace_header *h = &s->t->h;
    s->L = (int)h->n_layers;
    s->E = (int)h->n_experts;
    if (s->model_dir && (rc = sim_check_model(s)) != TIDE_OK)
        return rc;
    if (s->profile_path) {
        if ((rc = tide_profile_load(s->profile_path, &s->prof)) != TIDE_OK)
            return rc;
        s->have_prof = true;
    } else {
        /* No profile: a model in which everything is free (counters only). */
        memset(&s->prof, 0, sizeof s->prof);
        snprintf(s->prof.name, sizeof s->prof.name, "none");
        s->prof.h2d_gbps = s->prof.d2h_gbps = 1e300;
        s->prof.hidden = h->hidden;
        s->prof.inter = h->inter;
    }
    /* The trace's expert format, from its expert bytes; --experts replays
     * the same routing with experts of another format (their bytes). */
    int fmt = TIDE_QFMT_NONE, blk[2];
    for (int f = 0; f < TIDE_QFMT_COUNT; f++) {
        tide_qfmt_default_block(f, blk);
        if (tide_qexpert_bytes(f, blk, h->hidden, h->inter) == h->expert_bytes)
            fmt = f;
    }
    if (s->qfmt >= 0 && s->qfmt != fmt) {
        tide_qfmt_default_block(s->qfmt, blk);
        tide_info("tide sim: replaying %s experts (%.2f MiB) where the trace recorded %s ones "
                  "(%.2f MiB)",
                  tide_qfmt_name(s->qfmt),
                  (double)tide_qexpert_bytes(s->qfmt, blk, h->hidden, h->inter) / 1048576.0,
                  tide_qfmt_name(fmt), (double)h->expert_bytes / 1048576.0);
        fmt = s->qfmt;
        s->t->h.expert_bytes = tide_qexpert_bytes(fmt, blk, h->hidden, h->inter);
    }
    if (!s->have_prof)
        s->prof.qfmt = fmt;
    char what[600];
    snprintf(what, sizeof what, "the trace %s", s->trace_path);
    rc = tide_cost_init_fmt(&s->cost, &s->prof, h->hidden, h->inter, fmt, s->scale, what,
                            s->t->max_tokens > 1 ? s->t->max_tokens : 1);
    if (rc == TIDE_E_CONFIG && !s->scale)
        tide_error("tide sim: pass --scale-profile to scale the profile's expert times by expert "
                   "bytes for the trace's shape");
    if (rc != TIDE_OK)
        return rc;
    tide_cost_policy_costs(&s->cost, &s->pcost);
    if (s->have_prof &&
        (h->hidden != s->prof.hidden || h->inter != s->prof.inter || fmt != s->prof.qfmt))
        tide_warn("profile %s is for hidden %u x inter %u; its expert times are scaled by %.3f "
                  "for the trace's hidden %u x inter %u (--scale-profile)",
                  s->prof.name, s->prof.hidden, s->prof.inter, s->cost.scale, h->hidden, h->inter);
    /* Lists. */
    if (!s->policies[0])
        snprintf(s->policies, sizeof s->policies, "tide,lru,static");
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s->policies);
    for (char *tok = buf, *next; tok; tok = next) {
        if ((next = strchr(tok, ',')))
            *next++ = 0;
        if (!*tok) {
            tide_error("--policy %s: an empty item (a stray comma?)", s->policies);
            return TIDE_E_CONFIG;
        }
        if (s->n_pol == (int)(sizeof s->pol / sizeof s->pol[0])) {
            tide_error("--policy: at most %d policies", s->n_pol);
            return TIDE_E_CONFIG;
        }
        s->pol[s->n_pol] = tide_plugins_get(s->c.plugins, tok, TIDE_PLUGIN_POLICY, "--policy");
        if (!s->pol[s->n_pol++])
            return TIDE_E_CONFIG;
    }
    if (!s->budgets[0])
        snprintf(s->budgets, sizeof s->budgets, "%d", s->E / 4);
    if ((rc = sim_parse_list(s->budgets, "budget", false, 0, s->E, s->budget, &s->n_budget)) !=
        TIDE_OK)
        return rc;
    if (!s->intervals[0]) {
        /* Every distinct schedule of the blocks replayed: intervals from the
         * longest block on refresh at step 0 only. Open-ended decoders make
         * blocks differ in length, so the longest one recorded counts, not
         * the header's steps (the decoder's bound). */
        const uint32_t longest = s->t->max_block_steps ? s->t->max_block_steps
                                 : h->steps            ? h->steps
                                                       : 1;
        s->default_interval_top =
            longest < SIM_DEFAULT_MAX_INTERVAL ? longest : SIM_DEFAULT_MAX_INTERVAL;
        s->longest_block = longest;
        snprintf(s->intervals, sizeof s->intervals, "1-%u", s->default_interval_top);
    }
    return sim_parse_list(s->intervals, "interval", true, 1, 1 << 20, s->interval, &s->n_interval);
}

/* Replay one configuration into a new row. */
static int sim_replay(struct sim_cli *s, const char *label, enum tide_sim_hindsight kind,
                      const struct tide_plugin *pl, int budget, const int *layer_budget,
                      int interval, FILE *metrics)
{
    const struct tide_sim_config cfg = {
        .label = label,
        .kind = kind,
        .ops = pl ? pl->desc->ops : NULL,
        .opts = pl ? tide_config_section(s->c.cfg, pl->desc->name) : NULL,
        .budget = budget,
        .layer_budget = layer_budget,
        .costs = s->have_prof ? &s->pcost : NULL,
    };
    struct tide_sim_result res;
    int rc = tide_sim_run(s->t, &cfg, &s->cost, metrics, &res);
    if (rc != TIDE_OK)
        return rc;
    struct sim_row *r;
    if ((rc = sim_add_row(s, &r)) != TIDE_OK) {
        tide_sim_result_free(&res);
        return rc;
    }
    snprintf(r->policy, sizeof r->policy, "%s", label);
    r->budget = layer_budget ? -1 : budget;
    r->interval_n = interval;
    if (interval >= 0)
        snprintf(r->interval, sizeof r->interval, interval ? "%d" : "auto", interval);
    r->c = res.total;
    r->seconds = res.seconds;
    r->layer_us = malloc(sizeof *r->layer_us * (size_t)s->L);
    if (!r->layer_us) {
        tide_sim_result_free(&res);
        return TIDE_E_NOMEM;
    }
    for (int l = 0; l < s->L; l++)
        r->layer_us[l] = res.layer[l].us;
    tide_sim_result_free(&res);
    return TIDE_OK;
}

static int sim_set_interval(struct sim_cli *s, int interval)
{
    char v[32];
    snprintf(v, sizeof v, interval ? "%d" : "auto", interval);
    int rc = tide_config_set_value(s->c.cfg, "policy-tide", "interval", v, "--interval");
    const struct tide_opts *o = tide_config_section(s->c.cfg, "policy-tide");
    if (rc == TIDE_OK && !interval && o && !*tide_opts_str(o, "profile")) {
        if (!s->profile_path) {
            tide_error("--interval auto needs --profile (or [policy-tide] profile)");
            return TIDE_E_CONFIG;
        }
        rc =
            tide_config_set_value(s->c.cfg, "policy-tide", "profile", s->profile_path, "--profile");
    }
    return rc;
}

/* Preflight: every policy of the grid is created (and destroyed) at every
 * budget, policy-tide interval and sweep point before anything is replayed,
 * with the shape and costs its replay gets. Every problem is listed; then
 * nothing runs. */
static int sim_preflight(struct sim_cli *s)
{
    int problems = 0;
    const long points = cli_sweep_points(&s->sweep);
    for (int p = 0; p < s->n_pol; p++) {
        const struct tide_plugin *pl = s->pol[p];
        const struct tide_policy_ops *ops = pl->desc->ops;
        const bool is_tide = !strcmp(pl->desc->name, "policy-tide");
        bool failed = false;
        for (long pt = 0; pt < points && !failed; pt++) {
            if (cli_sweep_apply(&s->sweep, s->c.cfg, pt) != TIDE_OK) {
                failed = true;
                break;
            }
            for (int bi = 0; bi < s->n_budget && !failed; bi++) {
                if (s->budget[bi] >= s->E)
                    continue; /* no offload: no policy */
                for (int k = 0; k < (is_tide ? s->n_interval : 1) && !failed; k++) {
                    if (is_tide && sim_set_interval(s, s->interval[k]) != TIDE_OK) {
                        failed = true;
                        break;
                    }
                    struct tide_policy_shape shape;
                    tide_sim_shape(s->t, s->budget[bi], s->have_prof ? &s->pcost : NULL, &shape);
                    struct tide_policy *pol = NULL;
                    const int rc =
                        ops->create(&shape, tide_config_section(s->c.cfg, pl->desc->name), &pol);
                    if (rc != TIDE_OK) {
                        char label[512] = "", iv[24] = "";
                        cli_sweep_label(&s->sweep, pt, label, sizeof label);
                        if (is_tide && s->interval[k])
                            snprintf(iv, sizeof iv, ", interval %d", s->interval[k]);
                        else if (is_tide)
                            snprintf(iv, sizeof iv, ", interval auto");
                        tide_error("preflight: %s cannot start at budget %d%s%s%s (%s)",
                                   pl->desc->name, s->budget[bi], iv, *label ? ", " : "", label,
                                   tide_status_str(rc));
                        failed = true;
                    }
                    if (pol)
                        ops->destroy(pol);
                }
            }
        }
        problems += failed;
    }
    if (cli_sweep_apply(&s->sweep, s->c.cfg, 0) != TIDE_OK)
        problems++;
    if (problems)
        tide_error("tide sim: preflight found %d problem%s (above) in the grid; nothing was "
                   "replayed",
                   problems, problems == 1 ? "" : "s");
    return problems ? TIDE_E_CONFIG : TIDE_OK;
}

/* The per-layer cost of policy-tide at every grid budget (evaluator), the
 * greedy allocation of budget * L experts, and a replay of it. */
static int sim_layer_budgets(struct sim_cli *s, int budget, int interval, FILE *out)
{
    const struct tide_opts *o = tide_config_section(s->c.cfg, "policy-tide");
    const struct tide_plugin *pl = tide_plugins_find(s->c.plugins, "policy-tide");
    if (!o || !pl) {
        tide_error("--layer-budgets needs the policy-tide plugin");
        return TIDE_E_CONFIG;
    }
    const struct tide_tide_rule rule = {
        .interval = interval,
        .first_block_every_step = tide_opts_bool(o, "first_block_every_step"),
        .prefetch = tide_opts_bool(o, "prefetch"),
    };
    const int L = s->L, E = s->E, step = E >= 32 ? E / 32 : 1;
    int grid[SIM_MAX_LIST], n_grid = 0;
    for (int b = 0; b <= E && n_grid < SIM_MAX_LIST; b += step)
        grid[n_grid++] = b;
    if (grid[n_grid - 1] != E && n_grid < SIM_MAX_LIST)
        grid[n_grid++] = E;
    double *cost = malloc(sizeof *cost * (size_t)L * n_grid);
    uint8_t *res = malloc((size_t)E);
    int *idx = malloc(sizeof *idx * (size_t)L), *lb = malloc(sizeof *lb * (size_t)L);
    struct tide_solver_ws ws = {0};
    int rc = cost && res && idx && lb ? TIDE_OK : TIDE_E_NOMEM;
    for (int l = 0; l < L && rc == TIDE_OK; l++)
        for (int j = 0; j < n_grid && rc == TIDE_OK; j++) {
            memset(res, 0, (size_t)E);
            memset(res, 1, (size_t)grid[j]); /* initial = first: experts 0..B-1 */
            struct tide_eval ev = {0};
            rc = tide_solver_eval_tide(s->t->fwd[l], s->t->n_fwd[l], E, grid[j], res, &rule,
                                       &s->cost, &ev, &ws);
            cost[(size_t)l * n_grid + j] = ev.us;
        }
    double total_us = 0;
    if (rc == TIDE_OK)
        rc = tide_solver_budgets(cost, L, n_grid, grid, (int64_t)budget * L, idx, &total_us);
    if (rc == TIDE_OK) {
        fprintf(out,
                "budget %d x %d layers shared unequally (interval %d, greedy marginal "
                "gain, grid step %d): ",
                budget, L, interval, step);
        for (int l = 0; l < L; l++) {
            lb[l] = grid[idx[l]];
            fprintf(out, "%s%d", l ? "," : "", lb[l]);
        }
        fprintf(out, "\n");
        rc = sim_replay(s, "policy-tide", SIM_PLUGIN, pl, budget, lb, interval, NULL);
    }
    tide_solver_ws_free(&ws);
    free(cost);
    free(res);
    free(idx);
    free(lb);
    return rc;
}

static double sim_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Draw the line, frac of the current configuration done (the oracle's
 * layers). Work is counted in estimated seconds: each kind (replay, oracle)
 * at the mean of its finished ones, an oracle not yet measured as a replay;
 * before anything is measured, in configurations. */
static void sim_progress_draw(struct sim_cli *s, double frac, const char *extra)
{
    double done[2] = {(double)s->pg_done[0], (double)s->pg_done[1]};
    double sec[2] = {s->pg_s[0], s->pg_s[1]};
    if (s->pg_kind == 1 && frac > 0) {
        done[1] += frac;
        sec[1] += sim_now() - s->pg_t;
    }
    const double r = done[0] > 0 ? sec[0] / done[0] : 0.0;
    const double o = done[1] > 0 ? sec[1] / done[1] : r;
    if (r > 0 || o > 0) {
        s->pg.total = (double)s->pg_n[0] * r + (double)s->pg_n[1] * o;
        cli_progress_update(&s->pg, done[0] * r + done[1] * o, "configuration %ld/%ld%s: %s",
                            s->cfg_i, s->n_cfg, extra, s->pg_label);
    } else {
        s->pg.total = (double)s->n_cfg;
        cli_progress_update(&s->pg, (double)s->cfg_i - 1 + frac, "configuration %ld/%ld%s: %s",
                            s->cfg_i, s->n_cfg, extra, s->pg_label);
    }
}

/* The next configuration this process replays starts: the progress line. */
static void sim_progress(struct sim_cli *s, const char *what, int budget, int interval)
{
    const double now = sim_now();
    if (s->pg_kind >= 0) {
        s->pg_s[s->pg_kind] += now - s->pg_t;
        s->pg_done[s->pg_kind]++;
    }
    s->pg_kind = !strcmp(what, "oracle");
    s->pg_t = now;
    char more[520] = "";
    if (interval >= 0)
        snprintf(more, sizeof more, interval ? " i%d" : " i auto", interval);
    if (s->sweep.n) {
        strcat(more, " ");
        cli_sweep_label(&s->sweep, s->point, more + strlen(more), sizeof more - strlen(more));
    }
    snprintf(s->pg_label, sizeof s->pg_label, "%s b%d%s", what, budget, more);
    s->cfg_i++;
    /* The oracle is slow: say so now, whenever the line was last drawn
     * (the clear lets the update draw at once). */
    if (s->pg_kind == 1)
        cli_progress_clear(&s->pg);
    sim_progress_draw(s, 0.0, "");
}

/* The oracle's layers, on the progress line; Ctrl-C stops it between them. */
static int sim_oracle_progress(void *user, uint64_t done, uint64_t total)
{
    struct sim_cli *s = user;
    const uint64_t passes = total / (uint64_t)s->L; /* two per layer with overlap */
    char layer[48];
    snprintf(layer, sizeof layer, ", layer %llu/%d", (unsigned long long)((done - 1) / passes + 1),
             s->L);
    sim_progress_draw(s, (double)done / (double)total, layer);
    return tide_stop_requested() ? TIDE_E_INTERRUPTED : TIDE_OK;
}

static int sim_oracle_row(struct sim_cli *s, int budget)
{
    struct tide_sim_oracle o;
    clock_t t0 = clock();
    const struct tide_progress pg = {.fn = sim_oracle_progress, .user = s};
    int rc = tide_sim_oracle(s->t, budget, NULL, &s->cost, &pg, &o);
    if (rc != TIDE_OK)
        return rc;
    struct sim_row *r;
    if ((rc = sim_add_row(s, &r)) == TIDE_OK) {
        snprintf(r->policy, sizeof r->policy, "oracle");
        r->budget = budget;
        r->c = o.sched;
        r->c.us = o.bound_us;
        r->c.step_us = o.step_bound_us;
        r->c.weight_bytes = r->c.promotions * s->t->h.expert_bytes;
        r->c.act_bytes = r->c.miss_rows * s->t->h.hidden * 6u;
        r->bound = true;
        r->no_counters = !o.schedule;
        r->seconds = (double)(clock() - t0) / CLOCKS_PER_SEC;
        r->layer_us = malloc(sizeof *r->layer_us * (size_t)s->L);
        if (r->layer_us)
            memcpy(r->layer_us, o.layer_bound_us, sizeof *r->layer_us * (size_t)s->L);
        else
            rc = TIDE_E_NOMEM;
    }
    tide_sim_oracle_free(&o);
    return rc;
}

static const struct sim_row *sim_find(const struct sim_cli *s, const char *policy, int budget)
{
    for (int i = 0; i < s->n_rows; i++)
        if (!strcmp(s->rows[i].policy, policy) && s->rows[i].budget == budget &&
            s->rows[i].point == s->point)
            return &s->rows[i];
    return NULL;
}

static double sim_hit(const struct tide_sim_counters *c)
{
    uint64_t r = c->hit_rows + c->miss_rows;
    return r ? (double)c->hit_rows / (double)r : 0;
}

static void sim_print_row(const struct sim_cli *s, const struct sim_row *r, double oracle_us)
{
    char ms[32] = "-", tps[32] = "-", vs[32] = "-", b[16];
    if (s->have_prof) {
        snprintf(ms, sizeof ms, "%s%.3f", r->bound ? ">=" : "", tide_sim_ms_per_step(s->t, &r->c));
        snprintf(tps, sizeof tps, "%s%.1f", r->bound ? "<=" : "", tide_sim_tok_per_s(s->t, &r->c));
        if (oracle_us > 0)
            snprintf(vs, sizeof vs, "%.3fx", r->c.us / oracle_us);
    }
    snprintf(b, sizeof b, r->budget < 0 ? "layer" : "%d", r->budget);
    if (r->no_counters) {
        printf("%-14s %8s %6s %11s %9s %11s %9s %10s %10s %9s\n", r->policy, r->interval, b, "-",
               "-", "-", "-", ms, tps, vs);
        return;
    }
    printf("%-14s %8s %6s %11llu %9.3f %11llu %8.3f%% %10s %10s %9s\n", r->policy, r->interval, b,
           (unsigned long long)r->c.promotions, (double)(r->c.weight_bytes + r->c.act_bytes) / 1e9,
           (unsigned long long)r->c.miss_rows, 100.0 * sim_hit(&r->c), ms, tps, vs);
}

static void sim_csv_row(FILE *f, const struct sim_cli *s, const struct sim_row *r)
{
    if (r->no_counters)
        fprintf(f, "%s,%s,%d,,,,,,,", r->policy, r->interval, r->budget);
    else
        fprintf(f, "%s,%s,%s%d,%llu,%llu,%llu,%llu,%llu,%.6f,", r->policy, r->interval,
                r->budget < 0 ? "layer" : "", r->budget < 0 ? 0 : r->budget,
                (unsigned long long)r->c.promotions, (unsigned long long)r->c.weight_bytes,
                (unsigned long long)r->c.act_bytes, (unsigned long long)r->c.hit_rows,
                (unsigned long long)r->c.miss_rows, sim_hit(&r->c));
    if (s->have_prof)
        fprintf(f, "%.6f,%.3f,%.3f,%d,%.6f", tide_sim_ms_per_step(s->t, &r->c),
                tide_sim_tok_per_s(s->t, &r->c), r->c.us, r->bound, r->seconds);
    else
        fprintf(f, ",,,%d,%.6f", r->bound, r->seconds);
    cli_sweep_csv_row(&s->sweep, r->point, f);
    fputc('\n', f);
}

/* The best policy-tide interval per budget (global and per layer). */
static void sim_choose(struct sim_cli *s, int budget)
{
    int idx[SIM_MAX_LIST], n = 0, iv[SIM_MAX_LIST];
    for (int i = 0; i < s->n_rows && n < SIM_MAX_LIST; i++) {
        const struct sim_row *r = &s->rows[i];
        if (!strcmp(r->policy, "policy-tide") && r->budget == budget && r->interval_n > 0 &&
            r->point == s->point) {
            iv[n] = r->interval_n;
            idx[n++] = i;
        }
    }
    if (!n || !s->have_prof)
        return;
    double *cost = malloc(sizeof *cost * (size_t)s->L * (size_t)n);
    int *li = malloc(sizeof *li * (size_t)s->L);
    if (!cost || !li) {
        free(cost);
        free(li);
        return;
    }
    for (int l = 0; l < s->L; l++)
        for (int k = 0; k < n; k++)
            cost[(size_t)l * n + k] = s->rows[idx[k]].layer_us[l];
    int g;
    double g_us, l_us;
    if (tide_solver_intervals(cost, s->L, n, iv, &g, &g_us, li, &l_us) == TIDE_OK) {
        const struct sim_row *best = &s->rows[idx[g]];
        printf("budget %d: interval %d minimises modelled time for policy-tide: %.3f ms per step, "
               "%.1f tokens/s",
               budget, iv[g], tide_sim_ms_per_step(s->t, &best->c),
               tide_sim_tok_per_s(s->t, &best->c));
        const struct sim_row *o = sim_find(s, "oracle", budget);
        if (o)
            printf(" (%.3fx the oracle bound)", best->c.us / o->c.us);
        printf("\n          per-layer intervals ");
        for (int l = 0; l < s->L; l++)
            printf("%s%d", l ? "," : "", iv[li[l]]);
        printf(" would give %.3f ms per step (%.2f%% less)\n",
               tide_sim_ms_per_step(s->t, &best->c) * (g_us > 0 ? l_us / g_us : 1),
               100.0 * (1 - l_us / g_us));
    }
    free(cost);
    free(li);
}

/* Per budget, the policy (a plugin, at its best interval) of least modelled
 * time and its ratio to the oracle bound. */
static void sim_print_best(const struct sim_cli *s, int budget)
{
    const struct sim_row *best = NULL;
    for (int i = 0; i < s->n_rows; i++) {
        const struct sim_row *r = &s->rows[i];
        if (r->budget == budget && strncmp(r->policy, "policy-", 7) == 0 && r->point == s->point &&
            (!best || r->c.us < best->c.us))
            best = r;
    }
    if (!best || !s->have_prof)
        return;
    printf("budget %d: best policy %s%s%s: %.3f ms per step", budget, best->policy,
           best->interval_n > 0 ? " at interval " : "", best->interval_n > 0 ? best->interval : "",
           tide_sim_ms_per_step(s->t, &best->c));
    const struct sim_row *o = sim_find(s, "oracle", budget);
    if (o && o->c.us > 0)
        printf(", %.3fx the oracle bound", best->c.us / o->c.us);
    printf("\n");
}

/* Whether item (one of --plot-series, "x" meaning policy-x) names series
 * `name`. */
static bool sim_series_is(const char *item, size_t len, const char *name)
{
    if (strlen(name) == len && !strncmp(name, item, len))
        return true;
    return !strncmp(name, "policy-", 7) && strlen(name + 7) == len && !strncmp(name + 7, item, len);
}

/* --plot-series: whether series `name` (a plugin or a hindsight row) is drawn. */
static bool sim_plot_wants(const struct sim_cli *s, const char *name)
{
    if (!s->plot_series)
        return true;
    for (const char *p = s->plot_series; *p;) {
        const size_t n = strcspn(p, ",");
        if (sim_series_is(p, n, name))
            return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* Every --plot-series item must name a row of this replay. */
static int sim_plot_series_check(const struct sim_cli *s)
{
    for (const char *p = s->plot_series; p && *p;) {
        const size_t n = strcspn(p, ",");
        bool found = false;
        for (int i = 0; i < s->n_rows && !found; i++)
            found = sim_series_is(p, n, s->rows[i].policy);
        if (!found) {
            char have[1024] = "";
            size_t len = 0;
            for (int i = 0; i < s->n_rows; i++) {
                bool dup = false;
                for (int j = 0; j < i && !dup; j++)
                    dup = !strcmp(s->rows[j].policy, s->rows[i].policy);
                if (!dup && len < sizeof have)
                    len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", len ? ", " : "",
                                            s->rows[i].policy);
            }
            tide_error("--plot-series: '%.*s' is none of this replay's policies and hindsight "
                       "rows (%s)",
                       (int)n, p, have);
            return TIDE_E_CONFIG;
        }
        p += n + (p[n] == ',');
    }
    return TIDE_OK;
}

/* The legend text of a hindsight row, drawn as a bound. */
static const char *sim_bound_name(const char *row)
{
    return !strcmp(row, "oracle")   ? "oracle (bound)"
           : !strcmp(row, "belady") ? "belady (hindsight)"
                                    : "best-static (hindsight)";
}

static int sim_plots(struct sim_cli *s)
{
    int rc = sim_plot_series_check(s);
    if (rc != TIDE_OK)
        return rc;
    if (mkdir(s->plot, 0777) != 0 && errno != EEXIST) {
        tide_error("--plot %s: cannot create the folder: %s", s->plot, strerror(errno));
        return TIDE_E_IO;
    }
    char path[4200], title[256];
    /* Every other policy replayed, then the hindsight rows. */
    const char *refs[24];
    size_t n_refs = 0;
    for (int i = 0; i < s->n_rows && n_refs < 19; i++) {
        bool seen = !strcmp(s->rows[i].policy, "policy-tide");
        for (size_t k = 0; k < n_refs && !seen; k++)
            seen = !strcmp(refs[k], s->rows[i].policy);
        if (!seen && !strncmp(s->rows[i].policy, "policy-", 7))
            refs[n_refs++] = s->rows[i].policy;
    }
    const size_t n_plugins = n_refs;
    static const char *const hindsight[] = {"belady", "best-static", "oracle"};
    for (size_t k = 0; k < 3; k++)
        refs[n_refs++] = hindsight[k];
    double xs[SIM_MAX_LIST], ys[SIM_MAX_LIST], ref_y[24][2], ref_x[2];
    /* Modelled time against interval, one chart per budget: policy-tide's
     * curve, the other policies and the bounds as horizontal lines. */
    for (int bi = 0; s->have_prof && bi < s->n_budget && rc == TIDE_OK; bi++) {
        const int b = s->budget[bi];
        int n = 0;
        for (int i = 0; i < s->n_rows && n < SIM_MAX_LIST; i++)
            if (!strcmp(s->rows[i].policy, "policy-tide") && s->rows[i].budget == b &&
                s->rows[i].interval_n > 0) {
                xs[n] = s->rows[i].interval_n;
                ys[n++] = tide_sim_ms_per_step(s->t, &s->rows[i].c);
            }
        if (!n)
            continue;
        struct svg_series ser[24];
        int ns = 0;
        if (sim_plot_wants(s, "policy-tide"))
            ser[ns++] = (struct svg_series){
                .name = "policy-tide", .x = xs, .y = ys, .n = n, .markers = true};
        double lo = xs[0], hi = xs[0];
        for (int k = 1; k < n; k++) {
            lo = fmin(lo, xs[k]);
            hi = fmax(hi, xs[k]);
        }
        ref_x[0] = lo;
        ref_x[1] = hi;
        for (size_t k = 0; k < n_refs; k++) {
            const struct sim_row *r = sim_find(s, refs[k], b);
            if (!r || !sim_plot_wants(s, refs[k]))
                continue;
            ref_y[ns][0] = ref_y[ns][1] = tide_sim_ms_per_step(s->t, &r->c);
            const bool bound = k >= n_plugins;
            ser[ns] = (struct svg_series){.name = bound ? sim_bound_name(refs[k]) : refs[k],
                                          .x = ref_x,
                                          .y = ref_y[ns],
                                          .n = 2,
                                          .dashed = true,
                                          .markers = !bound,
                                          .bound = bound};
            ns++;
        }
        if (!ns)
            continue;
        snprintf(path, sizeof path, "%s/interval-b%d.svg", s->plot, b);
        snprintf(title, sizeof title, "Modelled time against interval, budget %d (%s)", b,
                 s->prof.name);
        rc = svg_line_chart(path, title, "refresh interval (steps)", "modelled ms per step", ser,
                            ns, SVG_SCALE_AUTO, SVG_SCALE_LINEAR);
    }
    /* Hit rate against budget. */
    if (rc == TIDE_OK && s->n_budget > 0) {
        const char *pols[25] = {"policy-tide"};
        for (size_t k = 0; k < n_refs; k++)
            pols[k + 1] = refs[k];
        double hx[25][SIM_MAX_LIST], hy[25][SIM_MAX_LIST];
        struct svg_series ser[25];
        int ns = 0;
        for (size_t k = 0; k < n_refs + 1; k++) {
            if (!sim_plot_wants(s, pols[k]))
                continue;
            int n = 0;
            for (int bi = 0; bi < s->n_budget; bi++) {
                /* policy-tide: its best interval by modelled time (or the first). */
                const struct sim_row *best = NULL;
                for (int i = 0; i < s->n_rows; i++) {
                    const struct sim_row *r = &s->rows[i];
                    if (strcmp(r->policy, pols[k]) || r->budget != s->budget[bi] || r->no_counters)
                        continue;
                    if (!best || (s->have_prof && r->c.us < best->c.us))
                        best = r;
                }
                if (best) {
                    hx[ns][n] = s->budget[bi];
                    hy[ns][n++] = 100.0 * sim_hit(&best->c);
                }
            }
            const bool bound = k > n_plugins;
            if (n)
                ser[ns] = (struct svg_series){.name = bound ? sim_bound_name(pols[k]) : pols[k],
                                              .x = hx[ns],
                                              .y = hy[ns],
                                              .n = n,
                                              .markers = true,
                                              .bound = bound},
                ns++;
        }
        snprintf(path, sizeof path, "%s/hitrate-budget.svg", s->plot);
        if (ns)
            rc = svg_line_chart(path, "Hit rate against budget (policy-tide at its best interval)",
                                "experts per MoE layer on the device", "hit rate (%)", ser, ns,
                                SVG_SCALE_AUTO, SVG_SCALE_LINEAR);
    }
    /* Heat maps of expert activity over the step forwards: first, middle, last layer. */
    const int layers[3] = {0, s->L / 2, s->L - 1};
    for (int q = 0; q < 3 && rc == TIDE_OK; q++) {
        const int l = layers[q];
        if (q && l == layers[q - 1])
            continue;
        const struct tide_solver_fwd *fw = s->t->fwd[l];
        int cols = 0, marks[4096], n_marks = 0;
        for (size_t j = 0; j < s->t->n_fwd[l] && cols < 1200; j++)
            if (fw[j].phase == TIDE_TRACE_STEP) {
                if (fw[j].step == 0 && cols && n_marks < 4096)
                    marks[n_marks++] = cols;
                cols++;
            }
        if (!cols)
            continue; /* no denoising step in this trace */
        const int E = s->E, rows = E < 256 ? E : 256;
        double *v = calloc((size_t)E * (cols ? cols : 1), sizeof *v);
        uint64_t *tot = calloc((size_t)E, sizeof *tot);
        int32_t *order = malloc(sizeof *order * (size_t)E);
        struct tide_solver_ws ws = {0};
        uint32_t *t32 = malloc(sizeof *t32 * (size_t)E);
        if (!v || !tot || !order || !t32) {
            rc = TIDE_E_NOMEM;
        } else {
            int c = 0;
            for (size_t j = 0; j < s->t->n_fwd[l] && c < cols; j++) {
                if (fw[j].phase != TIDE_TRACE_STEP)
                    continue;
                for (uint32_t a = 0; a < fw[j].n_active; a++)
                    tot[fw[j].ids[a]] += fw[j].cnt[a];
                c++;
            }
            for (int e = 0; e < E; e++)
                t32[e] = tot[e] > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)tot[e] + 1;
            int n = tide_rank_top(t32, E, E, order, &ws); /* busiest first */
            int *row_of = (int *)tot;                     /* reuse: expert -> row */
            for (int e = 0; e < E; e++)
                row_of[e] = -1;
            for (int i = 0; i < n && i < rows; i++)
                row_of[order[i]] = i;
            c = 0;
            for (size_t j = 0; j < s->t->n_fwd[l] && c < cols; j++) {
                if (fw[j].phase != TIDE_TRACE_STEP)
                    continue;
                for (uint32_t a = 0; a < fw[j].n_active; a++)
                    if (row_of[fw[j].ids[a]] >= 0)
                        v[(size_t)row_of[fw[j].ids[a]] * cols + c] = fw[j].cnt[a];
                c++;
            }
            snprintf(path, sizeof path, "%s/heatmap-layer%02d.svg", s->plot, l);
            snprintf(title, sizeof title, "MoE layer %d: tokens per expert per denoising step", l);
            rc = svg_heatmap(path, title, "denoising steps in trace order (red: a new block)",
                             rows < E ? "busiest 256 experts" : "experts, busiest first", v, rows,
                             cols, marks, n_marks);
        }
        tide_solver_ws_free(&ws);
        free(v);
        free(tot);
        free(order);
        free(t32);
    }
    if (rc == TIDE_OK)
        printf("plots in %s/\n", s->plot);
    return rc;
}

int sim_main(struct sim_cli *s)
{
    int rc = sim_setup(s);
    if (rc == TIDE_OK)
        rc = sim_out_begin(s);
    if (rc == TIDE_OK && s->sweep.n && (s->layer_budgets || s->plot)) {
        tide_error("tide sim --sweep: not with --layer-budgets or --plot (run them per point "
                   "with --set; python -m tide.plot draws a swept results.csv)");
        rc = TIDE_E_CONFIG;
    }
    if (rc == TIDE_OK)
        rc = cli_sweep_check(&s->sweep, s->c.cfg, NULL);
    if (rc != TIDE_OK)
        return rc;
    const long points = cli_sweep_points(&s->sweep);
    const struct tide_trace_header *h = &s->t->h;
    int n_cfg = 0, n_tide = 0;
    for (int p = 0; p < s->n_pol; p++) {
        const bool is_tide = !strcmp(s->pol[p]->desc->name, "policy-tide");
        n_tide += is_tide;
        n_cfg += is_tide ? s->n_interval : 1;
    }
    n_cfg *= s->n_budget;
    if (s->metrics && (n_cfg != 1 || s->layer_budgets)) {
        tide_error("--metrics needs exactly one configuration (one policy, budget and interval) "
                   "and no --layer-budgets; this run has %d",
                   n_cfg);
        return TIDE_E_CONFIG;
    }
    if ((rc = sim_preflight(s)) != TIDE_OK)
        return rc;
    FILE *mf = NULL;
    char *mtmp = NULL;
    if (s->metrics && !(mf = sim_create(s->metrics, s->force, &mtmp)))
        return TIDE_E_CONFIG;
    printf("trace %s: %u MoE layers x %u experts, top-%u; %llu blocks, %llu steps, %llu "
           "assignments\n",
           s->trace_path, h->n_layers, h->n_experts, h->top_k, (unsigned long long)s->t->blocks,
           (unsigned long long)s->t->steps, (unsigned long long)s->t->assignments);
    if (s->batch > 1)
        printf("replayed as batches of up to %d prompts: %zu forwards per layer (largest %u "
               "tokens)\n",
               s->batch, s->t->n_fwd[0], s->t->max_tokens);
    if (s->t->contexts)
        printf("context growth (DIP): %llu insertions, %llu tokens joined prompts (each reaches "
               "the policy's prompt_grow, and its prefill forwards are replayed)\n",
               (unsigned long long)s->t->contexts, (unsigned long long)s->t->context_tokens);
    struct tide_sim_steps dist;
    char line[160];
    if (tide_sim_steps_dist(s->t, TIDE_SIM_BLOCKS_ALL, &dist, NULL) == TIDE_OK) {
        tide_sim_steps_str(&dist, line, sizeof line);
        printf("steps per block replayed: %s (decoder %s)\n", line,
               h->decoder && *h->decoder ? h->decoder : "not recorded");
    }
    if (s->default_interval_top && n_tide)
        printf("policy-tide intervals: 1-%u by default (1 to the longest block, %u steps%s)\n",
               s->default_interval_top, s->longest_block,
               s->longest_block > s->default_interval_top
                   ? "; capped: name longer intervals with --interval"
                   : "");
    printf("profile: %s%s\n\n", s->prof.name,
           s->have_prof ? (s->prof.overlap ? " (copies overlap compute)" : " (serial)")
                        : " (no profile: counters only)");
    cli_catch_interrupt();
    double replay_s = 0;
    uint64_t replays = 0;
    /* The configurations this process replays, in the loop's order below
     * (per budget, the oracle comes last). */
    s->cfg_i = 0;
    s->pg_kind = -1;
    for (long pt = 0, idx = 0; pt < points; pt++)
        for (int bi = 0; bi < s->n_budget; bi++) {
            const bool past = s->budget[bi] >= s->E;
            const int n_rep = n_cfg / s->n_budget + (past || !s->hindsight ? 0 : 2);
            for (int k = 0; k < n_rep + (past ? 0 : s->oracle); k++)
                if (cli_shard_mine(&s->shard, idx++))
                    s->pg_n[k >= n_rep]++;
        }
    s->n_cfg = s->pg_n[0] + s->pg_n[1];
    cli_progress_begin(&s->pg, "tide sim", (double)s->n_cfg);
    for (s->point = 0; s->point < points && rc == TIDE_OK; s->point++) {
        if (s->point > 0 && (rc = cli_sweep_apply(&s->sweep, s->c.cfg, s->point)) != TIDE_OK)
            break;
        for (int bi = 0; bi < s->n_budget && rc == TIDE_OK; bi++) {
            const int b = s->budget[bi];
            for (int p = 0; p < s->n_pol && rc == TIDE_OK; p++) {
                const struct tide_plugin *pl = s->pol[p];
                const bool is_tide = !strcmp(pl->desc->name, "policy-tide");
                for (int k = 0; k < (is_tide ? s->n_interval : 1) && rc == TIDE_OK; k++) {
                    if (tide_stop_requested()) {
                        rc = TIDE_E_INTERRUPTED;
                        break;
                    }
                    if (!sim_take(s, pl->desc->name, b, is_tide ? s->interval[k] : -1, &rc))
                        continue;
                    if (is_tide && (rc = sim_set_interval(s, s->interval[k])) != TIDE_OK)
                        break;
                    sim_progress(s, pl->desc->name, b, is_tide ? s->interval[k] : -1);
                    rc = sim_replay(s, pl->desc->name, SIM_PLUGIN, pl, b, NULL,
                                    is_tide ? s->interval[k] : -1, mf);
                    if (rc == TIDE_OK) {
                        replay_s += s->rows[s->n_rows - 1].seconds;
                        replays++;
                    }
                }
            }
            if (rc == TIDE_OK && s->hindsight && b < s->E) {
                if (sim_take(s, "belady", b, -1, &rc)) {
                    sim_progress(s, "belady", b, -1);
                    rc = sim_replay(s, "belady", SIM_BELADY, NULL, b, NULL, -1, NULL);
                }
                if (rc == TIDE_OK && sim_take(s, "best-static", b, -1, &rc)) {
                    sim_progress(s, "best-static", b, -1);
                    rc = sim_replay(s, "best-static", SIM_BEST_STATIC, NULL, b, NULL, -1, NULL);
                }
            }
            if (rc == TIDE_OK && s->oracle && b < s->E && sim_take(s, "oracle", b, -1, &rc)) {
                sim_progress(s, "oracle", b, -1);
                rc = sim_oracle_row(s, b);
            }
        }
    }
    cli_progress_end(&s->pg);
    if (mf && sim_finish(mf, mtmp, s->metrics, rc == TIDE_OK) != TIDE_OK && rc == TIDE_OK)
        rc = TIDE_E_IO;
    if (rc != TIDE_OK)
        return rc;
    printf("%-14s %8s %6s %11s %9s %11s %9s %10s %10s %9s\n", "policy", "interval", "budget",
           "promotions", "moved GB", "host rows", "hit rate", "ms/step", "tok/s", "vs oracle");
    for (s->point = 0; s->point < points; s->point++) {
        if (s->sweep.n) {
            char label[512];
            cli_sweep_label(&s->sweep, s->point, label, sizeof label);
            printf("sweep point %ld of %ld: %s\n", s->point + 1, points, label);
        }
        for (int bi = 0; bi < s->n_budget; bi++) {
            const struct sim_row *o = sim_find(s, "oracle", s->budget[bi]);
            for (int i = 0; i < s->n_rows; i++)
                if (s->rows[i].budget == s->budget[bi] && s->rows[i].point == s->point)
                    sim_print_row(s, &s->rows[i], o ? o->c.us : 0);
        }
        printf("\n");
        /* A shard lacks the other shards' rows: choices wait for the merge. */
        for (int bi = 0; bi < s->n_budget && !s->shard.count; bi++)
            sim_choose(s, s->budget[bi]);
        for (int bi = 0; bi < s->n_budget && !s->shard.count; bi++)
            sim_print_best(s, s->budget[bi]);
    }
    s->point = 0;
    if (s->layer_budgets && s->have_prof && !s->shard.count) {
        for (int bi = 0; bi < s->n_budget && rc == TIDE_OK; bi++) {
            /* At the best global interval found for this budget (else the first). */
            const struct sim_row *best = NULL;
            for (int i = 0; i < s->n_rows; i++)
                if (!strcmp(s->rows[i].policy, "policy-tide") &&
                    s->rows[i].budget == s->budget[bi] && s->rows[i].interval_n > 0 &&
                    (!best || s->rows[i].c.us < best->c.us))
                    best = &s->rows[i];
            int iv = best ? best->interval_n : 4;
            if ((rc = sim_set_interval(s, iv)) == TIDE_OK &&
                (rc = sim_layer_budgets(s, s->budget[bi], iv, stdout)) == TIDE_OK) {
                const struct sim_row *o = sim_find(s, "oracle", s->budget[bi]);
                sim_print_row(s, &s->rows[s->n_rows - 1], o ? o->c.us : 0);
                if (best) {
                    const double uni = tide_sim_ms_per_step(s->t, &best->c),
                                 un = tide_sim_ms_per_step(s->t, &s->rows[s->n_rows - 1].c);
                    printf("  uniform budget %d at interval %d: %.3f ms per step; unequal: %.3f\n",
                           s->budget[bi], iv, uni, un);
                    /* The greedy allocation optimises the evaluator's model of each layer
                     * alone; the replay can disagree. Never present it as a gain then. */
                    if (un >= uni)
                        tide_warn("--layer-budgets: the unequal allocation for budget %d "
                                  "(%.3f ms per step) is not faster than the uniform one "
                                  "(%.3f ms per step, interval %d); keep the uniform budget",
                                  s->budget[bi], un, uni, iv);
                }
            }
        }
    }
    if (rc != TIDE_OK)
        return rc;
    if (replays)
        printf("\nreplayed %llu configurations of %llu assignments in %.3f s: %.1f million "
               "assignments per second\n",
               (unsigned long long)replays, (unsigned long long)s->t->assignments, replay_s,
               replay_s > 0 ? (double)replays * (double)s->t->assignments / replay_s / 1e6 : 0);
    if (s->csv) {
        char *tmp = NULL;
        FILE *f = sim_create(s->csv, s->force, &tmp);
        if (!f)
            return TIDE_E_CONFIG;
        fprintf(f, "policy,interval,budget,promotions,weight_bytes,act_bytes,hit_rows,miss_rows,"
                   "hit_rate,model_ms_per_step,model_tok_per_s,model_us,bound,replay_seconds");
        cli_sweep_csv_header(&s->sweep, f);
        fputc('\n', f);
        for (int i = 0; i < s->n_rows; i++)
            sim_csv_row(f, s, &s->rows[i]);
        if ((rc = sim_finish(f, tmp, s->csv, true)) != TIDE_OK)
            return rc;
    }
    if (s->plot)
        rc = sim_plots(s);
    return rc;
}

void sim_cli_free(struct sim_cli *s)
{
    for (int i = 0; i < s->n_rows; i++)
        free(s->rows[i].layer_us);
    free(s->rows);
    tide_cost_free(&s->cost);
    tide_sim_trace_free(s->t);
    cli_sweep_free(&s->sweep);
    cli_teardown(&s->c);
    sim_out_free(s->o);
}

/* One `tide sim` run of argv (one trace, batch and profile). */
static int sim_run_one(int argc, char **argv)
{
    struct sim_cli s;
    memset(&s, 0, sizeof s);
    s.qfmt = -1;
    int rc = sim_args(&s, argc, argv);
    if (rc == TIDE_OK)
        rc = cli_setup(&s.c);
    if (rc == TIDE_OK)
        rc = sim_main(&s);
    rc = sim_out_end(&s, rc);
    sim_cli_free(&s);
    return rc;
}

#define SIM_MAX_AXIS 32

/* The values of a compared flag (--trace, --batch, --profile): repeated,
 * comma-separated, or both. */
struct sim_axis {
    const char *flag, *col;
    char *v[SIM_MAX_AXIS];
    int n;
};

static int sim_axis_add(struct sim_axis *a, const char *list)
{
    char *dup = strdup(list);
    if (!dup)
        return TIDE_E_NOMEM;
    for (char *tok = dup, *next; tok; tok = next) {
        if ((next = strchr(tok, ',')))
            *next++ = 0;
        if (!*tok || a->n == SIM_MAX_AXIS) {
            tide_error("%s %s: %s", a->flag, list,
                       *tok ? "more values than tide sim compares (32)" : "an empty item");
            free(dup);
            return TIDE_E_CONFIG;
        }
        if (!(a->v[a->n++] = strdup(tok))) {
            free(dup);
            return TIDE_E_NOMEM;
        }
    }
    free(dup);
    return TIDE_OK;
}

/* Append the CSV at part to out, each row led by the combination's values
 * (the header only once). */
static int sim_multi_append(FILE *out, const char *part, const char *lead, bool header)
{
    FILE *f = fopen(part, "r");
    if (!f) {
        tide_error("cannot read %s: %s", part, strerror(errno));
        return TIDE_E_IO;
    }
    char *line = NULL;
    size_t cap = 0;
    for (int no = 0; getline(&line, &cap, f) >= 0; no++) {
        if (no == 0 && header)
            fprintf(out, "trace,batch,profile,%s", line);
        else if (no > 0)
            fprintf(out, "%s,%s", lead, line);
    }
    free(line);
    fclose(f);
    return TIDE_OK;
}

/* Several traces, batch sizes or profiles: one run per combination (trace
 * slowest, then batch, then profile), their CSV rows joined in --csv with
 * the columns trace, batch and profile in front. */
static int sim_multi(int argc, char **argv, struct sim_axis *ax, const char *csv, bool force)
{
    if (!csv) {
        tide_error("tide sim: comparing several --trace, --batch or --profile values writes "
                   "one table; name it with --csv FILE");
        return TIDE_E_CONFIG;
    }
    for (int i = 1; i < argc; i++) {
        static const char *const alone[] = {"--out", "--plot", "--shard", "--metrics"};
        for (size_t k = 0; k < sizeof alone / sizeof alone[0]; k++)
            if (!strcmp(argv[i], alone[k])) {
                tide_error("tide sim: %s replays one trace, batch size and profile; compare "
                           "several with --csv FILE (python -m tide.plot draws it)",
                           alone[k]);
                return TIDE_E_CONFIG;
            }
    }
    char *tmp = NULL;
    FILE *out = sim_create(csv, force, &tmp);
    if (!out)
        return TIDE_E_CONFIG;
    char part[4200];
    snprintf(part, sizeof part, "%s.part", csv);
    /* The argv of one run: the compared flags dropped, then given once. */
    char **av = calloc((size_t)argc + 8, sizeof *av);
    int rc = av ? TIDE_OK : TIDE_E_NOMEM;
    int n0 = 0;
    for (int i = 0; rc == TIDE_OK && i < argc; i++) {
        bool skip = false;
        for (int a = 0; a < 3; a++)
            skip |= !strcmp(argv[i], ax[a].flag);
        if (!strcmp(argv[i], "--csv"))
            skip = true;
        if (skip)
            i++;
        else
            av[n0++] = argv[i];
    }
    const int n[3] = {ax[0].n, ax[1].n ? ax[1].n : 1, ax[2].n ? ax[2].n : 1};
    bool header = true;
    for (int t = 0; rc == TIDE_OK && t < n[0]; t++)
        for (int b = 0; rc == TIDE_OK && b < n[1]; b++)
            for (int p = 0; rc == TIDE_OK && p < n[2]; p++) {
                int k = n0;
                av[k++] = "--trace";
                av[k++] = ax[0].v[t];
                if (ax[1].n) {
                    av[k++] = "--batch";
                    av[k++] = ax[1].v[b];
                }
                if (ax[2].n) {
                    av[k++] = "--profile";
                    av[k++] = ax[2].v[p];
                }
                av[k++] = "--csv";
                av[k++] = part;
                av[k++] = "--force";
                av[k] = NULL;
                printf("== trace %s, batch %s, profile %s ==\n", ax[0].v[t],
                       ax[1].n ? ax[1].v[b] : "1", ax[2].n ? ax[2].v[p] : "none");
                fflush(stdout);
                char lead[1200];
                snprintf(lead, sizeof lead, "%s,%s,%s", ax[0].v[t], ax[1].n ? ax[1].v[b] : "1",
                         ax[2].n ? ax[2].v[p] : "none");
                if ((rc = sim_run_one(k, av)) == TIDE_OK)
                    rc = sim_multi_append(out, part, lead, header);
                header = false;
                remove(part);
                printf("\n");
            }
    free(av);
    rc = sim_finish(out, tmp, csv, rc == TIDE_OK) != TIDE_OK && rc == TIDE_OK ? TIDE_E_IO : rc;
    if (rc == TIDE_OK)
        printf("%d runs compared in %s\n", n[0] * n[1] * n[2], csv);
    return rc;
}

int cmd_sim(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "merge"))
        return cmd_sim_merge(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            sim_usage(stdout);
            return CLI_EXIT_OK;
        }
    /* Several --trace, --batch or --profile values (repeated or listed):
     * one run per combination, compared in one CSV. */
    struct sim_axis ax[3] = {{.flag = "--trace"}, {.flag = "--batch"}, {.flag = "--profile"}};
    const char *csv = NULL;
    bool force = false;
    int rc = TIDE_OK, combos = 1;
    for (int i = 1; i < argc && rc == TIDE_OK; i++) {
        force |= !strcmp(argv[i], "--force");
        if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[i + 1];
        for (int a = 0; a < 3 && rc == TIDE_OK; a++)
            if (!strcmp(argv[i], ax[a].flag) && i + 1 < argc)
                rc = sim_axis_add(&ax[a], argv[++i]);
    }
    for (int a = 0; a < 3; a++)
        combos *= ax[a].n ? ax[a].n : 1;
    if (rc == TIDE_OK)
        rc =
            combos > 1 && ax[0].n ? sim_multi(argc, argv, ax, csv, force) : sim_run_one(argc, argv);
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < ax[a].n; k++)
            free(ax[a].v[k]);
    return cli_exit_code(rc);
}
