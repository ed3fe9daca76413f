/* `tide trace`: summarise (info), synthesise (synth) or count (counts)
 * routing traces (docs/trace-format.md). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "sim.h"
#include "tide/log.h"
#include "tide/status.h"

static void trace_usage(FILE *f)
{
    fprintf(f,
            "usage: tide trace info FILE [--max-distance N]\n"
            "       tide trace synth OUT [--layers N] [--experts N] [--top-k N] [--hidden N]\n"
            "                  [--inter N] [--block N] [--steps N] [--min-steps N] [--blocks N]\n"
            "                  [--prompts N] [--prompt-len N] [--skew X] [--similarity X]\n"
            "                  [--drift X] [--seed N] [--preset tiny|llada2-mini] [--force]\n"
            "       tide trace counts FILE OUT [--phase all|step] [--force]\n\n"
            "info    summarises a routing trace: shape, prompts, blocks, steps, forwards,\n"
            "        expert activity, the decoder and its settings, the distribution of\n"
            "        steps per block (from the step records: blocks may differ in length),\n"
            "        and the similarity of expert activations between steps of the same\n"
            "        block (step phase only) at distances 1..N (default 8): mean cosine of\n"
            "        the count vectors and Jaccard of the expert sets, per layer.\n"
            "synth   writes a synthetic trace whose popularity skew (Zipf exponent, default 1)\n"
            "        and adjacent-step cosine (--similarity, default 0.985) are what you ask;\n"
            "        --drift is the share of changes that persist (default 0.5; the rest\n"
            "        flicker for one step). --preset llada2-mini: 19 layers x 256 experts,\n"
            "        top-8, hidden 2048, inter 512 (the default); tiny: 3 x 32, top-4, 64, 32.\n"
            "        Defaults: 8 blocks of 32 steps, one prompt of 40 tokens, seed 1.\n"
            "counts  writes the routing-count file of a trace ('LAYER EXPERT COUNT' lines), as\n"
            "        read by counts_file of policy-static and policy-tide (initial = popular).\n");
}

/* The histogram of steps per block on one line: "steps:blocks" for every
 * length seen, or ranges "lo-hi:blocks" of equal width when more than 24
 * lengths occur. */
static void trace_histogram(const uint64_t *hist, uint32_t max)
{
    uint32_t distinct = 0, lo = UINT32_MAX;
    for (uint32_t s = 0; s <= max; s++)
        if (hist[s]) {
            distinct++;
            if (lo == UINT32_MAX)
                lo = s;
        }
    if (!distinct)
        return;
    const uint32_t width = distinct <= 24 ? 1 : (max - lo + 16) / 16;
    printf("  histogram (steps:blocks):");
    for (uint32_t a = lo; a <= max; a += width) {
        const uint32_t b = max - a < width - 1 ? max : a + width - 1;
        uint64_t n = 0;
        for (uint32_t s = a; s <= b; s++)
            n += hist[s];
        if (!n)
            continue;
        if (a == b)
            printf(" %u:%llu", a, (unsigned long long)n);
        else
            printf(" %u-%u:%llu", a, b, (unsigned long long)n);
    }
    printf("\n");
}

/* The decoder of the header, and the steps per block measured from the
 * step records: all blocks, then the first generated block of each prompt
 * and the others when both occur. */
static int trace_steps(const struct tide_sim_trace *t)
{
    const struct tide_trace_header *h = &t->h;
    if (h->decoder && *h->decoder)
        printf("decoder: %s (%s)\n", h->decoder,
               h->decoder_settings && *h->decoder_settings ? h->decoder_settings
                                                           : "no settings recorded");
    else
        printf("decoder: not recorded\n");
    uint64_t *hist = malloc(sizeof *hist * ((size_t)t->max_block_steps + 1));
    if (!hist)
        return TIDE_E_NOMEM;
    struct tide_sim_steps d[3];
    char line[160];
    int rc = TIDE_OK;
    for (int k = 2; k >= 0 && rc == TIDE_OK; k--) /* all last: hist keeps its counts */
        rc = tide_sim_steps_dist(t, (enum tide_sim_blocks)k, &d[k], hist);
    if (rc == TIDE_OK) {
        tide_sim_steps_str(&d[TIDE_SIM_BLOCKS_ALL], line, sizeof line);
        printf("steps per block (step records): %s\n", line);
        trace_histogram(hist, t->max_block_steps);
        if (d[TIDE_SIM_BLOCKS_FIRST].blocks && d[TIDE_SIM_BLOCKS_OTHER].blocks) {
            tide_sim_steps_str(&d[TIDE_SIM_BLOCKS_FIRST], line, sizeof line);
            printf("  first generated block of each prompt: %s\n", line);
            tide_sim_steps_str(&d[TIDE_SIM_BLOCKS_OTHER], line, sizeof line);
            printf("  later blocks: %s\n", line);
        }
    }
    free(hist);
    return rc;
}

static int trace_info(const char *path, int max_d)
{
    struct tide_sim_trace *t;
    int rc = tide_sim_trace_load(path, &t);
    if (rc != TIDE_OK)
        return rc;
    const struct tide_trace_header *h = &t->h;
    const int L = (int)h->n_layers, E = (int)h->n_experts;
    struct stat st;
    long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    uint64_t fw[3] = {0, 0, 0}, step_active = 0, *tot = calloc((size_t)E, sizeof *tot);
    double top_share = 0;
    if (!tot) {
        tide_sim_trace_free(t);
        return TIDE_E_NOMEM;
    }
    for (int l = 0; l < L; l++) {
        memset(tot, 0, sizeof *tot * (size_t)E);
        uint64_t sum = 0;
        for (size_t j = 0; j < t->n_fwd[l]; j++) {
            const struct tide_solver_fwd *f = &t->fwd[l][j];
            fw[f->phase]++;
            if (f->phase == TIDE_TRACE_STEP)
                step_active += f->n_active;
            for (uint32_t a = 0; a < f->n_active; a++) {
                tot[f->ids[a]] += f->cnt[a];
                sum += f->cnt[a];
            }
        }
        /* Share of the layer's assignments taken by its busiest 10% of experts. */
        int top = E / 10 > 0 ? E / 10 : 1;
        uint64_t s = 0;
        for (int i = 0; i < top; i++) {
            int best = 0;
            for (int e = 1; e < E; e++)
                if (tot[e] > tot[best])
                    best = e;
            s += tot[best];
            tot[best] = 0;
        }
        top_share += sum ? (double)s / (double)sum / L : 0;
    }
    free(tot);
    printf("trace %s: format version %u, %lld bytes (%.2f bytes per assignment)\n", path,
           h->version, size, t->assignments ? (double)size / (double)t->assignments : 0);
    printf("model: %s\n", h->model[0] ? h->model : "(not recorded)");
    printf("shape: %u MoE layers x %u experts, top-%u, hidden %u, inter %u (%.2f MiB per "
           "expert)\n",
           h->n_layers, h->n_experts, h->top_k, h->hidden, h->inter,
           (double)h->expert_bytes / 1048576.0);
    /* A decoder that gives no bound on steps (an open-ended loop) leaves
     * block_length in the header; a longer block shows it was no bound. */
    if (t->max_block_steps > h->steps)
        printf("generation: block %u, open-ended steps (the header's %u is no bound: a block "
               "ran %u), threshold %g\n",
               h->block_length, h->steps, t->max_block_steps, h->threshold);
    else
        printf("generation: block %u, at most %u steps, threshold %g\n", h->block_length, h->steps,
               h->threshold);
    printf("prompts %llu, blocks %llu, denoising steps %llu (%.2f per block), tokens generated "
           "%llu (up to gen_length per prompt, as tide run counts them)\n",
           (unsigned long long)t->prompts, (unsigned long long)t->blocks,
           (unsigned long long)t->steps, t->blocks ? (double)t->steps / (double)t->blocks : 0,
           (unsigned long long)t->tokens_generated);
    if (t->contexts)
        printf("context growth (DIP): %llu insertions, %llu tokens joined prompts\n",
               (unsigned long long)t->contexts, (unsigned long long)t->context_tokens);
    if (t->n_vecs)
        printf("prompt vectors: %zu of %llu prompts (%u entries each)\n", t->n_vecs,
               (unsigned long long)t->prompts, t->vec_dim);
    printf("layer forwards: prefill %llu, step %llu, kv %llu; assignments %llu\n",
           (unsigned long long)fw[0], (unsigned long long)fw[1], (unsigned long long)fw[2],
           (unsigned long long)t->assignments);
    printf("experts active per step forward: %.1f of %u on average; the busiest 10%% of "
           "experts take %.1f%% of assignments\n",
           fw[1] ? (double)step_active / (double)fw[1] : 0, h->n_experts, 100.0 * top_share);
    if ((rc = trace_steps(t)) != TIDE_OK) {
        tide_sim_trace_free(t);
        return rc;
    }
    const size_t cells = (size_t)(L + 1) * (size_t)max_d;
    double *cos = malloc(sizeof *cos * cells), *jac = malloc(sizeof *jac * cells);
    uint64_t *pairs = malloc(sizeof *pairs * cells);
    if (!cos || !jac || !pairs) {
        rc = TIDE_E_NOMEM;
    } else {
        tide_sim_similarity((const struct tide_solver_fwd *const *)t->fwd, t->n_fwd, L, max_d, cos,
                            jac, pairs);
        printf("\nsimilarity of expert activations between steps d apart (same block, step "
               "phase)\n");
        for (int kind = 0; kind < 2; kind++) {
            const double *v = kind ? jac : cos;
            printf("%-8s", kind ? "jaccard" : "cosine");
            for (int d = 1; d <= max_d; d++)
                printf(" %7s%-2d", "d=", d);
            printf("\n");
            for (int r = 0; r <= L; r++) {
                const int l = r ? r - 1 : L; /* "all" first */
                if (!r)
                    printf("%-8s", "all");
                else
                    printf("layer %-2d", l);
                for (int d = 0; d < max_d; d++) {
                    size_t at = (size_t)l * max_d + (size_t)d;
                    if (pairs[at])
                        printf(" %9.4f", v[at]);
                    else
                        printf(" %9s", "-");
                }
                printf("\n");
            }
            printf("\n");
        }
        printf("%-8s", "pairs");
        for (int d = 0; d < max_d; d++)
            printf(" %9llu", (unsigned long long)pairs[(size_t)L * max_d + (size_t)d]);
        printf("\n");
    }
    free(cos);
    free(jac);
    free(pairs);
    tide_sim_trace_free(t);
    return rc;
}

static int trace_counts(const char *path, const char *out, bool step_only, bool force)
{
    if (!force && access(out, F_OK) == 0) {
        tide_error("%s exists; refusing to replace it (use --force)", out);
        return TIDE_E_CONFIG;
    }
    struct tide_sim_trace *t;
    int rc = tide_sim_trace_load(path, &t);
    if (rc != TIDE_OK)
        return rc;
    const uint32_t E = t->h.n_experts;
    uint64_t *tot = calloc(E, sizeof *tot);
    char *tmp = malloc(strlen(out) + 5);
    FILE *f = NULL;
    if (!tot || !tmp) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    sprintf(tmp, "%s.tmp", out);
    if (!(f = fopen(tmp, "w"))) {
        tide_error("cannot create %s: %s", tmp, strerror(errno));
        rc = TIDE_E_IO;
        goto done;
    }
    fprintf(f, "# routing counts of %s (%s phases)\n# LAYER EXPERT COUNT\n", path,
            step_only ? "step" : "all");
    for (uint32_t l = 0; l < t->h.n_layers; l++) {
        memset(tot, 0, sizeof *tot * E);
        for (size_t j = 0; j < t->n_fwd[l]; j++) {
            const struct tide_solver_fwd *fw = &t->fwd[l][j];
            if (step_only && fw->phase != TIDE_TRACE_STEP)
                continue;
            for (uint32_t a = 0; a < fw->n_active; a++)
                tot[fw->ids[a]] += fw->cnt[a];
        }
        for (uint32_t e = 0; e < E; e++)
            if (tot[e])
                fprintf(f, "%u %u %llu\n", l, e, (unsigned long long)tot[e]);
    }
    if (ferror(f) || fclose(f) != 0 || rename(tmp, out) != 0) {
        tide_error("cannot write %s", out);
        remove(tmp);
        rc = TIDE_E_IO;
    }
    f = NULL;
done:
    if (f) {
        fclose(f);
        remove(tmp);
    }
    free(tot);
    free(tmp);
    tide_sim_trace_free(t);
    return rc;
}

/* Parse an unsigned option value into *v within [lo, hi]. */
static bool trace_uint(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *v)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi || *s == '-') {
        tide_error("%s %s: expected an integer in [%u, %u]", opt, s, lo, hi);
        return false;
    }
    *v = (uint32_t)x;
    return true;
}

static bool trace_real(const char *opt, const char *s, double lo, double hi, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s || *end || errno || !(*v >= lo && *v <= hi)) {
        tide_error("%s %s: expected a number in [%g, %g]", opt, s, lo, hi);
        return false;
    }
    return true;
}

static int trace_synth(int argc, char **argv)
{
    struct tide_synth_params p = {
        .n_layers = 19,
        .n_experts = 256,
        .top_k = 8,
        .hidden = 2048,
        .inter = 512,
        .block_length = 32,
        .steps = 32,
        .min_steps = 0,
        .blocks = 8,
        .prompts = 1,
        .prompt_len = 40,
        .skew = 1.0,
        .similarity = 0.985,
        .drift = 0.5,
        .seed = 1,
    };
    const char *out = NULL;
    bool force = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        uint32_t seed32;
        if (!strcmp(a, "--force")) {
            force = true;
            takes = false;
        } else if (!strcmp(a, "--preset")) {
            if (v && !strcmp(v, "tiny")) {
                p.n_layers = 3;
                p.n_experts = 32;
                p.top_k = 4;
                p.hidden = 64;
                p.inter = 32;
            } else if (!v || strcmp(v, "llada2-mini")) {
                tide_error("--preset %s: expected tiny or llada2-mini", v ? v : "(none)");
                ok = false;
            }
        } else if (a[0] != '-') {
            if (out) {
                tide_error("trace synth: one output file, not '%s' and '%s'", out, a);
                return TIDE_E_CONFIG;
            }
            out = a;
            takes = false;
        } else if (!v) {
            tide_error("%s needs a value", a);
            return TIDE_E_CONFIG;
        } else if (!strcmp(a, "--layers")) {
            ok = trace_uint(a, v, 1, 4096, &p.n_layers);
        } else if (!strcmp(a, "--experts")) {
            ok = trace_uint(a, v, 2, 65536, &p.n_experts);
        } else if (!strcmp(a, "--top-k")) {
            ok = trace_uint(a, v, 1, 256, &p.top_k);
        } else if (!strcmp(a, "--hidden")) {
            ok = trace_uint(a, v, 1, 1u << 20, &p.hidden);
        } else if (!strcmp(a, "--inter")) {
            ok = trace_uint(a, v, 1, 1u << 20, &p.inter);
        } else if (!strcmp(a, "--block")) {
            ok = trace_uint(a, v, 1, 4096, &p.block_length);
        } else if (!strcmp(a, "--steps")) {
            ok = trace_uint(a, v, 1, 4096, &p.steps);
        } else if (!strcmp(a, "--min-steps")) {
            ok = trace_uint(a, v, 1, 4096, &p.min_steps);
        } else if (!strcmp(a, "--blocks")) {
            ok = trace_uint(a, v, 1, 1u << 20, &p.blocks);
        } else if (!strcmp(a, "--prompts")) {
            ok = trace_uint(a, v, 1, 1u << 20, &p.prompts);
        } else if (!strcmp(a, "--prompt-len")) {
            ok = trace_uint(a, v, 1, 1u << 24, &p.prompt_len);
        } else if (!strcmp(a, "--skew")) {
            ok = trace_real(a, v, 0, 8, &p.skew);
        } else if (!strcmp(a, "--similarity")) {
            ok = trace_real(a, v, 0, 1, &p.similarity);
        } else if (!strcmp(a, "--drift")) {
            ok = trace_real(a, v, 0, 1, &p.drift);
        } else if (!strcmp(a, "--seed")) {
            ok = trace_uint(a, v, 0, UINT32_MAX, &seed32);
            p.seed = seed32;
        } else {
            char hint[160];
            cli_flag_hint(a, trace_usage, hint, sizeof hint);
            tide_error("trace synth: unknown option '%s'%s", a, hint);
            return TIDE_E_CONFIG;
        }
        if (!ok)
            return TIDE_E_CONFIG;
        i += takes;
    }
    if (!out) {
        tide_error("trace synth: name the output file");
        return TIDE_E_CONFIG;
    }
    if (!p.min_steps || p.min_steps > p.steps)
        p.min_steps = p.steps;
    if (p.top_k >= p.n_experts) {
        tide_error("trace synth: top-k %u needs more than %u experts", p.top_k, p.n_experts);
        return TIDE_E_CONFIG;
    }
    if (!force && access(out, F_OK) == 0) {
        tide_error("trace %s exists; refusing to replace it (use --force)", out);
        return TIDE_E_CONFIG;
    }
    double rate;
    int rc = tide_synth_calibrate(&p, &rate);
    if (rc != TIDE_OK)
        return rc == TIDE_E_RANGE ? TIDE_E_CONFIG : rc;
    tide_info("trace synth: adjacent-step cosine %.4f needs a per-slot change rate of %.5f per "
              "step (drift share %.2f)",
              p.similarity, rate, p.drift);
    cli_catch_interrupt();
    if ((rc = tide_synth_write(out, force, &p, rate)) == TIDE_OK)
        printf("wrote %s: %u MoE layers x %u experts, top-%u; %u prompt%s x %u blocks of %u-%u "
               "steps\n",
               out, p.n_layers, p.n_experts, p.top_k, p.prompts, p.prompts == 1 ? "" : "s",
               p.blocks, p.min_steps, p.steps);
    return rc;
}

int cmd_trace(int argc, char **argv)
{
    if (argc < 2 || cli_wants_help(argc, argv, 1)) {
        trace_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    int rc;
    if (!strcmp(argv[1], "info")) {
        uint32_t max_d = 8;
        const char *path = NULL;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--max-distance") && i + 1 < argc) {
                if (!trace_uint(argv[i], argv[i + 1], 1, 64, &max_d))
                    return CLI_EXIT_USAGE;
                i++;
            } else if (argv[i][0] != '-' && !path) {
                path = argv[i];
            } else {
                char hint[160];
                cli_flag_hint(argv[i], trace_usage, hint, sizeof hint);
                tide_error("trace info: unexpected argument '%s'%s", argv[i], hint);
                return CLI_EXIT_USAGE;
            }
        }
        if (!path) {
            trace_usage(stderr);
            return CLI_EXIT_USAGE;
        }
        rc = trace_info(path, (int)max_d);
    } else if (!strcmp(argv[1], "synth")) {
        rc = trace_synth(argc - 1, argv + 1);
    } else if (!strcmp(argv[1], "counts")) {
        const char *in = NULL, *out = NULL;
        bool force = false, step_only = false;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--force")) {
                force = true;
            } else if (!strcmp(argv[i], "--phase") && i + 1 < argc) {
                step_only = !strcmp(argv[++i], "step");
                if (!step_only && strcmp(argv[i], "all")) {
                    tide_error("--phase %s: expected all or step", argv[i]);
                    return CLI_EXIT_USAGE;
                }
            } else if (argv[i][0] != '-' && (!in || !out)) {
                *(in ? &out : &in) = argv[i];
            } else {
                char hint[160];
                cli_flag_hint(argv[i], trace_usage, hint, sizeof hint);
                tide_error("trace counts: unexpected argument '%s'%s", argv[i], hint);
                return CLI_EXIT_USAGE;
            }
        }
        if (!in || !out) {
            trace_usage(stderr);
            return CLI_EXIT_USAGE;
        }
        rc = trace_counts(in, out, step_only, force);
    } else {
        static const char *const subs[] = {"info", "synth", "counts", NULL};
        char hint[64];
        cli_suggest_word(argv[1], subs, hint, sizeof hint);
        tide_error("trace: unknown subcommand '%s'%s (info, synth or counts)", argv[1], hint);
        return CLI_EXIT_USAGE;
    }
    return cli_exit_code(rc);
}
