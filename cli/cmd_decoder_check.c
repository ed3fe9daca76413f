/* `tide decoder-check PLUGIN`: the checks every decoder plugin must pass,
 * what policy-check is for policies (docs/writing-a-decoder.md, "Checking
 * your decoder"). On a tiny synthetic checkpoint, both backend roles on the
 * CPU, through the public engine API:
 *  - plan bounds: each case's run stays inside the plan the decoder gave
 *    for its prompt (forwards, steps per block, blocks, output; the engine
 *    itself refuses a span beyond max_tokens or n_ctx, and that refusal is
 *    reported as this check's failure);
 *  - determinism: a second run gives the same ids and logits;
 *  - batch invariance: every case run together in one batch gives the ids
 *    and logits it gives alone;
 *  - lossless: under every installed policy at small budgets, the ids and
 *    logits of no offload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plugin_check.h"
#include "shard.h"
#include "tide/engine.h"
#include "tide/log.h"
#include "tide/status.h"

#define DK_MAX_BUDGETS 8
#define DK_MAX_CASES   8

static void dk_usage(FILE *f)
{
    fprintf(f, "usage: tide decoder-check PLUGIN [-c FILE]... [--set SECTION.KEY=VALUE]...\n"
               "                          [--model PLUGIN] [--budgets B,B,...]\n\n"
               "Checks a decoder plugin against what the engine relies on, and prints one\n"
               "PASS/FAIL line per check. PLUGIN is a decoder's name (short or whole), found\n"
               "like [generation] decoder (next to tide, the install prefix,\n"
               "TIDE_PLUGIN_PATH), or the path of its .so file.\n\n"
               "A tiny synthetic checkpoint (model-llada2 preset tiny, or --model's: preset\n"
               "tiny-moe of model-llada-moe; in a temporary folder), both backend roles on\n"
               "backend-cpu-onednn, gen_length 64, block_length 32, runs six cases: prompts of\n"
               "5, 31, 40 and 70 tokens, greedy, and the 31 and 40 token ones sampled\n"
               "(temperature 0.8, seed 5) when the decoder accepts sampling.\n\n"
               "plan bounds: each run stays inside the decoder's plan for its prompt: model\n"
               "  forwards <= max_forwards, steps in a block <= max_steps (when > 0), blocks\n"
               "  <= blocks, tokens <= max_output; a span beyond max_tokens or n_ctx is\n"
               "  refused by the engine, and reported here with its block and step.\n"
               "deterministic: a second run of each case gives the same ids and logits.\n"
               "batch invariant: the cases run together in one batch give the ids and\n"
               "  logits each gives alone.\n"
               "lossless: under every installed policy at each budget, every case gives the\n"
               "  ids and logits of no offload (a test profile for the tiny experts is set as\n"
               "  [policy] profile unless FILE sets one).\n\n"
               "options:\n"
               "  -c, --config FILE   [generation] and the decoder's section to check with;\n"
               "                      repeatable, the later file wins\n"
               "  --set S.K=V         override one option (e.g. --set generation.steps=8)\n"
               "  --model PLUGIN      the model plugin of the tiny checkpoint (model-llada2\n"
               "                      or model-llada-moe)\n"
               "  --budgets LIST      budgets of the lossless comparison (default 1,4)\n\n"
               "exit status: 0 every check passed, 1 a check failed, 2 usage or configuration\n"
               "error (unknown plugin, not a decoder, bad option, settings it refuses).\n");
}

/* One case: a prompt and the request's own settings. */
struct dk_case {
    char label[48];
    int32_t ids[80];
    int n;
    const char *sets[2];
    int n_sets;
    struct tide_request_plan plan;
};

/* What one generation gave, and how it kept to its plan. */
struct dk_gen {
    const struct dk_case *cs;
    int rc;
    char error[400];
    int32_t *ids;
    int64_t n_ids, forwards, steps;
    int blocks;
    uint64_t hash;              /* FNV-1a over the logits rows the decoder read */
    int block, step;            /* the last step event */
    int bad_block, bad_step;    /* the first step beyond max_steps, -1 when none */
    int most_steps, most_block; /* the longest block: its steps, its number */
    int most_blocks;            /* the highest block + 1 seen */
};

struct dcheck {
    struct cli_ctx c;
    const char *plugin_arg, *model;
    const struct tide_plugin *pl;
    int budgets[DK_MAX_BUDGETS];
    int n_budgets;
    struct cli_check_tmp tmp;
    struct tide_engine *e;
    struct dk_case cases[DK_MAX_CASES];
    int n_cases;
    struct dk_gen ref[DK_MAX_CASES]; /* each case alone, no offload */
    int failed;
    char failed_names[512];
};

static void dk_failed(struct dcheck *k, const char *name)
{
    if (strstr(k->failed_names, name))
        return;
    size_t len = strlen(k->failed_names);
    snprintf(k->failed_names + len, sizeof k->failed_names - len, "%s%s", k->failed ? "; " : "",
             name);
    k->failed++;
}

/* ---- one generation ------------------------------------------------------- */

static int dk_on_step(void *user, const struct tide_step_event *ev)
{
    struct dk_gen *g = user;
    const int max_steps = g->cs->plan.max_steps;
    g->block = ev->block;
    g->step = ev->step;
    if (ev->step + 1 > g->most_steps)
        g->most_steps = ev->step + 1, g->most_block = ev->block;
    if (ev->block + 1 > g->most_blocks)
        g->most_blocks = ev->block + 1;
    if (max_steps > 0 && ev->step + 1 > max_steps && g->bad_block < 0)
        g->bad_block = ev->block, g->bad_step = ev->step;
    return 0;
}

static void dk_on_rows(void *user, const struct tide_rows_event *ev)
{
    struct dk_gen *g = user;
    for (int r = 0; r < ev->n; r++)
        g->hash = cli_fnv1a64(g->hash, ev->rows[r], (size_t)ev->vocab * sizeof *ev->rows[r]);
}

static void dk_request(const struct dk_case *cs, struct dk_gen *g, struct tide_request *req)
{
    *g = (struct dk_gen){.cs = cs,
                         .hash = CLI_FNV1A64_INIT,
                         .block = -1,
                         .step = -1,
                         .bad_block = -1,
                         .bad_step = -1};
    tide_request_init(req);
    req->prompt_ids = cs->ids;
    req->n_prompt_ids = (size_t)cs->n;
    req->chat = 0;
    req->sets = cs->sets;
    req->n_sets = cs->n_sets;
    req->user = g;
    req->on_step = dk_on_step;
    req->on_rows = dk_on_rows;
}

/* Keep what a finished generation gave in g. */
static void dk_result(struct dk_gen *g, int rc, struct tide_result *res, const char *error)
{
    g->rc = rc;
    if (rc != TIDE_OK) {
        snprintf(g->error, sizeof g->error, "%s", error && *error ? error : tide_status_str(rc));
        for (char *p = g->error; *p; p++)
            if (*p == '\n')
                *p = ' ';
        return;
    }
    g->n_ids = res->n_ids;
    g->forwards = res->model_forwards;
    g->steps = res->steps;
    g->blocks = res->blocks;
    g->ids = malloc(sizeof *g->ids * (size_t)(res->n_ids ? res->n_ids : 1));
    if (!g->ids) {
        g->rc = TIDE_E_NOMEM;
        snprintf(g->error, sizeof g->error, "out of memory");
        return;
    }
    memcpy(g->ids, res->ids, sizeof *g->ids * (size_t)res->n_ids);
}

static void dk_generate(struct dcheck *k, const struct dk_case *cs, struct dk_gen *g)
{
    struct tide_request req;
    dk_request(cs, g, &req);
    struct tide_result *res = NULL;
    int rc = tide_engine_generate(k->e, &req, &res);
    dk_result(g, rc, res, tide_engine_error(k->e));
    tide_result_free(res);
}

/* A failed generation in words, with its last step, into buf. */
static void dk_failure(const struct dk_gen *g, char *buf, size_t len)
{
    if (g->block < 0)
        snprintf(buf, len, "the run failed before its first step ended: %s", g->error);
    else
        snprintf(buf, len, "the run failed after block %d step %d: %s", g->block, g->step,
                 g->error);
}

/* Where two generations of a case first differ, in words, into buf; false
 * when they are the same. */
static bool dk_differ(const struct dk_gen *want, const struct dk_gen *got, char *buf, size_t len)
{
    if (got->rc != TIDE_OK) {
        dk_failure(got, buf, len);
        return true;
    }
    int64_t first = 0;
    while (first < got->n_ids && first < want->n_ids && got->ids[first] == want->ids[first])
        first++;
    if (first < got->n_ids || first < want->n_ids)
        snprintf(buf, len, "ids differ from token %lld on (%lld vs %lld tokens)", (long long)first,
                 (long long)got->n_ids, (long long)want->n_ids);
    else if (got->hash != want->hash)
        snprintf(buf, len,
                 "same ids, but the logits the decoder read differ (hash %016llx vs "
                 "%016llx)",
                 (unsigned long long)got->hash, (unsigned long long)want->hash);
    else
        return false;
    return true;
}

/* ---- the cases and the engine ------------------------------------------- */

static void dk_prompt(struct dk_case *cs, int n, int salt)
{
    cs->n = n;
    for (int i = 0; i < n; i++)
        cs->ids[i] = 7 + (i * 37 + salt * 11) % 400;
}

/* Messages of a probe that may fail are not the user's concern. */
static void dk_quiet_sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user, (void)level, (void)msg;
}

static int dk_cases(struct dcheck *k)
{
    static const int lens[] = {5, 31, 40, 70};
    static const char *const sampled[] = {"generation.temperature=0.8", "generation.seed=5"};
    for (int i = 0; i < 4; i++) {
        struct dk_case *cs = &k->cases[k->n_cases++];
        dk_prompt(cs, lens[i], i);
        snprintf(cs->label, sizeof cs->label, "%d tokens, greedy", lens[i]);
    }
    /* Sampling, where the decoder takes it: its RNG must be seeded. */
    struct dk_case probe = {0};
    dk_prompt(&probe, 31, 1);
    probe.sets[0] = sampled[0], probe.sets[1] = sampled[1], probe.n_sets = 2;
    probe.plan.size = sizeof probe.plan;
    struct dk_gen g;
    struct tide_request req;
    dk_request(&probe, &g, &req);
    tide_log_set_sink(dk_quiet_sink, NULL);
    int rc = tide_engine_plan(k->e, &req, &probe.plan);
    tide_log_set_sink(NULL, NULL);
    bool sampling = rc == TIDE_OK;
    for (int i = 1; sampling && i < 3; i++) {
        struct dk_case *cs = &k->cases[k->n_cases++];
        *cs = probe;
        dk_prompt(cs, lens[i], i);
        snprintf(cs->label, sizeof cs->label, "%d tokens, sampled", lens[i]);
    }
    printf("cases: prompts of 5, 31, 40 and 70 tokens, greedy%s\n",
           sampling ? "; 31 and 40 tokens sampled (temperature 0.8, seed 5)"
                    : " (the decoder refuses temperature 0.8: no sampled cases)");
    for (int i = 0; i < k->n_cases; i++) {
        struct dk_case *cs = &k->cases[i];
        cs->plan = (struct tide_request_plan){.size = sizeof cs->plan};
        dk_request(cs, &g, &req);
        if ((rc = tide_engine_plan(k->e, &req, &cs->plan)) != TIDE_OK) {
            tide_error("decoder-check: the decoder's plan for the case %s failed: %s", cs->label,
                       tide_engine_error(k->e));
            return rc;
        }
    }
    return TIDE_OK;
}

static int dk_open(struct dcheck *k)
{
    const bool moe = !strcmp(k->model, "model-llada-moe");
    int rc = cli_check_model(&k->tmp, k->model, moe ? "tiny-moe" : "tiny", NULL, "decoder-check");
    if (rc != TIDE_OK)
        return rc;
    char prof[PATH_MAX + 32] = "";
    const struct tide_opts *pol = tide_config_section(k->c.cfg, "policy");
    if (!*tide_opts_str(pol, "profile")) {
        if ((rc = cli_check_profile(&k->tmp, prof, sizeof prof, "decoder-check")) != TIDE_OK ||
            (rc = tide_config_set_value(k->c.cfg, "policy", "profile", prof, "decoder-check")) !=
                TIDE_OK)
            return rc;
    }
    const struct tide_policy_costs *costs = NULL;
    if ((rc = cli_policy_costs(&k->c, &costs)) != TIDE_OK)
        return rc;
    /* The check's settings, then the user's files and --set, then what the
     * check fixes. */
    const char *sets[CLI_MAX_SETS + 16];
    int n = 0;
    sets[n++] = "generation.gen_length=64";
    sets[n++] = "generation.block_length=32";
    for (int i = 0; i < k->c.n_sets; i++)
        sets[n++] = k->c.sets[i];
    char mplug[160], mpath[PATH_MAX + 32], dec[160], ppath[PATH_MAX + 64];
    snprintf(mplug, sizeof mplug, "model.plugin=%s", k->model);
    snprintf(mpath, sizeof mpath, "model.path=%s", k->tmp.model);
    snprintf(dec, sizeof dec, "generation.decoder=%s", k->pl->desc->name);
    sets[n++] = mplug;
    sets[n++] = mpath;
    sets[n++] = dec;
    sets[n++] = "backend.device=backend-cpu-onednn";
    sets[n++] = "backend.host=backend-cpu-onednn";
    sets[n++] = "policy.budget=-1";
    if (*prof) {
        snprintf(ppath, sizeof ppath, "policy.profile=%s", prof);
        sets[n++] = ppath;
    }
    const struct tide_engine_args args = {
        .size = sizeof args,
        .config_paths = k->c.configs,
        .n_config_paths = k->c.n_configs,
        .sets = sets,
        .n_sets = n,
        .policy_costs = costs,
    };
    if ((rc = tide_engine_open(&args, &k->e)) != TIDE_OK)
        return rc;
    struct tide_engine_info info = {.size = sizeof info};
    tide_engine_get_info(k->e, &info);
    printf("model: %s %s (%d experts a layer, generated), both backend roles on\n"
           "  backend-cpu-onednn, gen_length 64, block_length %d\n",
           k->model, moe ? "tiny-moe" : "tiny", info.n_experts, info.block_length);
    return dk_cases(k);
}

/* ---- the checks ---------------------------------------------------------- */

/* One case's run against its plan: a sentence into why when it broke it. */
static bool dk_bounds_ok(const struct dk_gen *g, char *why, size_t len)
{
    const struct tide_request_plan *p = &g->cs->plan;
    if (g->rc != TIDE_OK)
        dk_failure(g, why, len);
    else if (p->max_forwards > 0 && g->forwards > p->max_forwards)
        snprintf(why, len, "%lld model forwards, more than the plan's max_forwards %lld",
                 (long long)g->forwards, (long long)p->max_forwards);
    else if (g->bad_block >= 0)
        snprintf(why, len, "block %d ran step %d, more than the plan's max_steps %d", g->bad_block,
                 g->bad_step, p->max_steps);
    else if (g->most_blocks > p->blocks || g->blocks > p->blocks)
        snprintf(why, len, "%d blocks decoded, more than the plan's %d",
                 g->most_blocks > g->blocks ? g->most_blocks : g->blocks, p->blocks);
    else if (g->n_ids > p->max_output)
        snprintf(why, len, "%lld tokens, more than the plan's max_output %lld", (long long)g->n_ids,
                 (long long)p->max_output);
    else
        return true;
    return false;
}

static void dk_bounds(struct dcheck *k)
{
    printf("\nplan bounds (each case alone, no offload):\n\n  %-20s %6s %7s %6s %5s %7s | %7s "
           "%9s %6s  %s\n",
           "case", "n_ctx", "max_out", "blocks", "steps", "max_fwd", "fwds", "steps/blk", "tokens",
           "result");
    char why[600];
    for (int i = 0; i < k->n_cases; i++) {
        const struct dk_case *cs = &k->cases[i];
        struct dk_gen *g = &k->ref[i];
        dk_generate(k, cs, g);
        const bool ok = dk_bounds_ok(g, why, sizeof why);
        printf("  %-20s %6lld %7lld %6d %5d %7lld | %7lld %9d %6lld  %s\n", cs->label,
               (long long)cs->plan.n_ctx, (long long)cs->plan.max_output, cs->plan.blocks,
               cs->plan.max_steps, (long long)cs->plan.max_forwards, (long long)g->forwards,
               g->most_steps, (long long)g->n_ids, ok ? "PASS" : "FAIL");
        if (!ok) {
            printf("    FAIL plan bounds: prompt %s: %s\n", cs->label, why);
            dk_failed(k, "plan bounds");
        }
    }
}

/* Run case i again: false (the FAIL line printed, naming the check and
 * where) when it differs from its first run alone. */
static bool dk_again(struct dcheck *k, int i, const char *check, const char *where)
{
    char why[600];
    struct dk_gen g;
    dk_generate(k, &k->cases[i], &g);
    const bool differ = dk_differ(&k->ref[i], &g, why, sizeof why);
    if (differ)
        printf("  FAIL %s: %sprompt %s: %s\n", check, where, k->cases[i].label, why);
    free(g.ids);
    return !differ;
}

static void dk_determinism(struct dcheck *k)
{
    printf("\ndeterministic (each case run again):\n");
    for (int i = 0; i < k->n_cases; i++) {
        if (k->ref[i].rc != TIDE_OK)
            continue;
        if (dk_again(k, i, "deterministic", ""))
            printf("  %-20s same ids and logits  PASS\n", k->cases[i].label);
        else
            dk_failed(k, "deterministic");
    }
}

static void dk_batch(struct dcheck *k)
{
    printf("\nbatch invariant (the cases in one batch, longest prompt first):\n");
    const struct tide_request *reqs[DK_MAX_CASES];
    struct dk_gen g[DK_MAX_CASES];
    struct tide_request req[DK_MAX_CASES];
    struct tide_result *res[DK_MAX_CASES] = {0};
    int status[DK_MAX_CASES];
    int order[DK_MAX_CASES], n = 0;
    /* The longest first: it reserves the most, so none is held back. */
    for (int i = 0; i < k->n_cases; i++)
        order[n++] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && k->cases[order[j]].n > k->cases[order[j - 1]].n; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int j = 0; j < n; j++) {
        dk_request(&k->cases[order[j]], &g[j], &req[j]);
        reqs[j] = &req[j];
    }
    tide_engine_reset_stats(k->e);
    int rc = tide_engine_generate_batch(k->e, reqs, n, n, res, status);
    if (rc == TIDE_E_UNSUPPORTED) {
        printf("  not run: model %s has no batches\n", k->model);
        return;
    }
    if (rc != TIDE_OK) {
        printf("  FAIL batch invariant: the batch failed: %s\n", tide_engine_error(k->e));
        dk_failed(k, "batch invariant");
        return;
    }
    int64_t alone = 0;
    char why[600];
    for (int j = 0; j < n; j++) {
        const int i = order[j];
        dk_result(&g[j], status[j], res[j], status[j] == TIDE_OK ? "" : tide_status_str(status[j]));
        tide_result_free(res[j]);
        alone += k->ref[i].forwards;
        if (k->ref[i].rc != TIDE_OK) {
            free(g[j].ids);
            continue;
        }
        if (dk_differ(&k->ref[i], &g[j], why, sizeof why)) {
            printf("  FAIL batch invariant: prompt %s: %s\n", k->cases[i].label, why);
            dk_failed(k, "batch invariant");
        } else {
            printf("  %-20s same ids and logits as alone  PASS\n", k->cases[i].label);
        }
        free(g[j].ids);
    }
    printf("  (%llu model forwards for the batch, %lld for the cases alone)\n",
           (unsigned long long)tide_engine_forwards(k->e), (long long)alone);
}

static void dk_lossless(struct dcheck *k)
{
    struct tide_engine_info info = {.size = sizeof info};
    tide_engine_get_info(k->e, &info);
    printf("\nlossless (every case under each policy and budget vs no offload):\n\n"
           "  %-16s %6s  %s\n",
           "policy", "budget", "result");
    const struct tide_plugin_set *set = k->c.plugins;
    int policies = 0;
    for (int p = 0; p < set->n; p++) {
        const struct tide_plugin_desc *d = set->items[p].desc;
        if (d->kind != TIDE_PLUGIN_POLICY)
            continue;
        policies++;
        for (int b = 0; b < k->n_budgets; b++) {
            if (k->budgets[b] >= info.n_experts) {
                printf("  %-16s %6d  skipped: not below the %d experts of a layer\n", d->name,
                       k->budgets[b], info.n_experts);
                continue;
            }
            char s1[160], s2[32];
            snprintf(s1, sizeof s1, "policy.plugin=%s", d->name);
            snprintf(s2, sizeof s2, "policy.budget=%d", k->budgets[b]);
            const char *const bs[] = {s1, s2};
            if (tide_engine_set_options(k->e, bs, 2) != TIDE_OK) {
                printf("  FAIL lossless: %s at budget %d: placing failed: %s\n", d->name,
                       k->budgets[b], tide_engine_error(k->e));
                dk_failed(k, "lossless");
                continue;
            }
            int bad = 0;
            for (int i = 0; i < k->n_cases; i++) {
                if (k->ref[i].rc != TIDE_OK)
                    continue;
                char where[200];
                snprintf(where, sizeof where, "%s at budget %d, ", d->name, k->budgets[b]);
                bad += !dk_again(k, i, "lossless", where);
            }
            if (bad)
                dk_failed(k, "lossless");
            else
                printf("  %-16s %6d  PASS (%d cases)\n", d->name, k->budgets[b], k->n_cases);
        }
    }
    if (!policies)
        printf("  not run: no policy plugin is installed\n");
}

/* ---- command line -------------------------------------------------------- */

static int dk_run(struct dcheck *k)
{
    const struct tide_plugin_desc *d = k->pl->desc;
    printf("tide decoder-check %s %s (%s)\n\n", d->name, d->version ? d->version : "?",
           k->pl->path);
    /* The core names no decoder: a decoder made for another model family
     * is checked on it with --model. */
    if (!k->model)
        k->model = "model-llada2";
    const char *missing = !tide_plugins_find(k->c.plugins, "backend-cpu-onednn")
                              ? "backend-cpu-onednn"
                          : !tide_plugins_find(k->c.plugins, k->model) ? k->model
                                                                       : NULL;
    if (missing) {
        tide_error("decoder-check: this installation has no %s plugin to run the checks on",
                   missing);
        return TIDE_E_CONFIG;
    }
    int rc = dk_open(k);
    if (rc != TIDE_OK)
        return rc;
    fflush(stdout);
    dk_bounds(k);
    fflush(stdout);
    dk_determinism(k);
    fflush(stdout);
    dk_batch(k);
    fflush(stdout);
    dk_lossless(k);
    printf("\ndecoder-check: %s: %s%s\n", d->name, k->failed ? "FAIL: " : "PASS (every check held)",
           k->failed_names);
    return TIDE_OK;
}

int cmd_decoder_check(int argc, char **argv)
{
    static struct dcheck k; /* large; one per process */
    memset(&k, 0, sizeof k);
    k.budgets[0] = 1, k.budgets[1] = 4;
    k.n_budgets = 2;
    static const char *const flags[] = {"--model", "--budgets", "--help", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int used = cli_common_arg(&k.c, argc, argv, &i);
        if (used < 0)
            return CLI_EXIT_USAGE;
        if (used)
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            dk_usage(stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--budgets") && i + 1 < argc) {
            if ((k.n_budgets =
                     cli_check_budgets(argv[++i], k.budgets, DK_MAX_BUDGETS, "decoder-check")) < 0)
                return CLI_EXIT_USAGE;
        } else if (!strcmp(a, "--model") && i + 1 < argc) {
            k.model = argv[++i];
        } else if (a[0] != '-' && !k.plugin_arg) {
            k.plugin_arg = a;
        } else {
            char hint[96];
            cli_suggest_flag(a, flags, hint, sizeof hint);
            fprintf(stderr,
                    "tide decoder-check: unexpected argument '%s'%s (see tide decoder-check "
                    "--help)\n",
                    a, hint);
            return CLI_EXIT_USAGE;
        }
    }
    if (!k.plugin_arg) {
        dk_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int rc = cli_check_resolve(&k.c, k.plugin_arg, TIDE_PLUGIN_DECODER, "decoder-check", &k.pl);
    if (rc == TIDE_OK)
        rc = dk_run(&k);
    for (int i = 0; i < k.n_cases; i++)
        free(k.ref[i].ids);
    tide_engine_close(k.e);
    cli_check_rm_tmp(&k.tmp);
    cli_teardown(&k.c);
    if (rc != TIDE_OK)
        return cli_exit_code(rc) == CLI_EXIT_OK ? CLI_EXIT_RUNTIME : cli_exit_code(rc);
    return k.failed ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
}
