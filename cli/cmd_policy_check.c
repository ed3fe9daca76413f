/* `tide policy-check PLUGIN`: the checks every placement policy must pass,
 * on any installed policy (docs/writing-a-policy.md, "Checking your
 * policy"):
 *  - properties: random routing sequences through the policy at several
 *    expert counts, budgets, seeds, costs and (for a policy with an
 *    `interval` option) intervals, every answer checked against the
 *    dispatcher's rules (core/sim/polcheck.c, shared with
 *    tests/policy/test_policy_props.c);
 *  - lossless: generations on a tiny synthetic checkpoint, both backend
 *    roles on the CPU, give the same token ids and logits under the policy
 *    at several budgets as with no offload. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plugin_check.h"
#include "shard.h"
#include "polcheck.h"
#include "tide/engine.h"
#include "tide/log.h"
#include "tide/status.h"

#define PC_MAX_BUDGETS 16

static void pcheck_usage(FILE *f)
{
    fprintf(f, "usage: tide policy-check PLUGIN [-c FILE]... [--set SECTION.KEY=VALUE]...\n"
               "                         [--budgets B,B,...] [--seeds N] [--only props|lossless]\n"
               "                         [--keep DIR]\n\n"
               "Checks a placement policy plugin against what the engine relies on, and prints\n"
               "one PASS/FAIL line per check. PLUGIN is a policy's name, found like\n"
               "[policy] plugin (next to tide, the install prefix, TIDE_PLUGIN_PATH), or the\n"
               "path of its .so file.\n\n"
               "properties (no model): random routing sequences over 3 MoE layers and 4\n"
               "  blocks, at 5, 16 and 33 experts, budgets 0, 1, n/3, n/2, n-1 and n, N seeds,\n"
               "  with no costs, overlapped and serial test costs in the shape, and, for a\n"
               "  policy with an `interval` option you did not set, its default and 1, 2, 4, 32.\n"
               "  Each is run twice. Checked: create() accepts every budget; initial() gives\n"
               "  at most B distinct experts; plan() and step_begin() succeed; the routing and\n"
               "  residency they are shown stay unaltered; nothing is written past the plan\n"
               "  arrays; never more than B residents; the dispatcher's plan rules (promote\n"
               "  non-residents, evict residents, every active expert placed, on the device\n"
               "  only when resident); the prefetch rules; the same calls give the same plans.\n"
               "lossless: a tiny synthetic checkpoint (model-llada2 preset tiny, 32 experts,\n"
               "  in a temporary folder) generates 64 tokens with no offload and with the\n"
               "  policy at each budget, both backend roles on backend-cpu-onednn; token ids\n"
               "  and the logits the decoder read must be identical. A test profile for the\n"
               "  tiny experts is set as [policy] profile unless FILE sets one.\n\n"
               "options:\n"
               "  -c, --config FILE   the policy's options ([PLUGIN] section) and [policy]\n"
               "                      profile; repeatable, the later file wins\n"
               "  --set S.K=V         override one option (e.g. --set policy-tide.interval=4)\n"
               "  --budgets LIST      budgets of the lossless comparison (default 0,1,4,16)\n"
               "  --seeds N           random sequences per property case (default 4)\n"
               "  --only WHAT         run only the property checks or only the lossless ones\n"
               "  --keep DIR          generate the checkpoint into DIR and keep it (or reuse\n"
               "                      the checkpoint already there)\n\n"
               "exit status: 0 every check passed, 1 a check failed, 2 usage or configuration\n"
               "error (unknown plugin, not a policy, bad option).\n");
}

/* The prompt of the offload tests (tests/offload): 40 ids under the tiny
 * vocabulary. */
static void pcheck_prompt(int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = 7 + (i * 37) % 400;
}

/* What the command line asked for. */
struct pcheck {
    struct cli_ctx c;
    const char *plugin_arg;
    const struct tide_plugin *pl;
    int budgets[PC_MAX_BUDGETS];
    int n_budgets;
    int seeds;
    bool props, lossless;
    const char *keep;
    struct cli_check_tmp tmp; /* the model and profile of the lossless check */
    int failed;               /* checks that failed */
    char failed_names[512];   /* their names, for the last line */
};

/* Count a failed check and keep its name for the verdict. */
static void pcheck_failed(struct pcheck *k, const char *name)
{
    size_t len = strlen(k->failed_names);
    snprintf(k->failed_names + len, sizeof k->failed_names - len, "%s%s", k->failed ? "; " : "",
             name);
    k->failed++;
}

static int pcheck_resolve(struct pcheck *k)
{
    return cli_check_resolve(&k->c, k->plugin_arg, TIDE_PLUGIN_POLICY, "policy-check", &k->pl);
}

/* ---- properties ---------------------------------------------------------- */

/* What the policy logs during the property runs: thousands of instances
 * would repeat the same lines, so the first few are kept for the report. */
struct pcheck_log {
    uint64_t n;   /* messages */
    int distinct; /* kept in first[] */
    char first[3][320];
};

static void pcheck_log_sink(void *user, enum tide_log_level level, const char *msg)
{
    struct pcheck_log *lg = user;
    if (level > TIDE_LOG_WARN)
        return;
    lg->n++;
    for (int i = 0; i < lg->distinct; i++)
        if (!strncmp(lg->first[i], msg, sizeof lg->first[0] - 1))
            return;
    if (lg->distinct < 3)
        snprintf(lg->first[lg->distinct++], sizeof lg->first[0], "%s", msg);
}

static void pcheck_props_print(struct pcheck *k, const struct tide_polcheck_report *r,
                               const char *intervals, const struct pcheck_log *lg)
{
    printf("properties: %llu cases (experts 5, 16, 33; budgets 0, 1, n/3, n/2, n-1, n; "
           "%d seeds;\n  costs none, overlapped, serial%s%s), 3 MoE layers, 4 blocks, each "
           "run twice;\n  %llu plans, %llu promotions (%llu prefetched)",
           (unsigned long long)r->cases, k->seeds, *intervals ? ";\n  " : "", intervals,
           (unsigned long long)r->plans, (unsigned long long)r->promotions,
           (unsigned long long)r->prefetches);
    if (r->skipped)
        printf(";\n  %llu cases without costs skipped: create() asks for a profile",
               (unsigned long long)r->skipped);
    printf("\n\n  %-44s %10s  %s\n", "check", "checked", "result");
    for (int i = 0; i < TIDE_POLCHECK_N_INV; i++) {
        if (i == TIDE_POLCHECK_HOOK)
            continue;
        const char *res = r->failed[i] ? "FAIL" : r->checked[i] ? "PASS" : "n/a";
        if (i == TIDE_POLCHECK_PREFETCH && !r->checked[i])
            res = TIDE_OPS_HAS((const struct tide_policy_ops *)k->pl->desc->ops, step_begin)
                      ? "PASS (no prefetch asked)"
                      : "n/a (no step_begin)";
        printf("  %-44s %10llu  %s\n", tide_polcheck_inv_name(i), (unsigned long long)r->checked[i],
               res);
    }
    for (int i = 0; i < TIDE_POLCHECK_N_INV; i++)
        if (r->failed[i]) {
            printf("\n  FAIL %s (%llu of %llu), first at\n    %s\n", tide_polcheck_inv_name(i),
                   (unsigned long long)r->failed[i], (unsigned long long)r->checked[i],
                   r->first[i]);
            pcheck_failed(k, tide_polcheck_inv_name(i));
        }
    if (lg->n) {
        printf("\n  the policy logged %llu warnings or errors; the first distinct ones:\n",
               (unsigned long long)lg->n);
        for (int i = 0; i < lg->distinct; i++)
            printf("    %s\n", lg->first[i]);
    }
    printf("\n");
}

/* The values of the plugin's `interval` option to sweep, when it has one
 * that the configuration leaves at its default: the default first, then 1,
 * 2, 4 and 32. Returns how many (0: no sweep) into vals[5]. */
static int pcheck_intervals(const struct pcheck *k, const char **vals)
{
    static const char *const more[] = {"1", "2", "4", "32"};
    const struct tide_option *o = k->pl->desc->options;
    for (int i = 0; o && o[i].name; i++) {
        if (strcmp(o[i].name, "interval") ||
            (o[i].type != TIDE_OPT_INT && o[i].type != TIDE_OPT_STRING) ||
            tide_config_source(k->c.cfg, k->pl->desc->name, "interval") != TIDE_CONFIG_SRC_DEFAULT)
            continue;
        int n = 0;
        vals[n++] = o[i].def;
        for (int j = 0; j < 4; j++)
            if (strcmp(more[j], o[i].def))
                vals[n++] = more[j];
        return n;
    }
    return 0;
}

static int pcheck_props(struct pcheck *k)
{
    static const int sizes[] = {5, 16, 33};
    const struct tide_plugin_desc *d = k->pl->desc;
    const struct tide_policy_ops *ops = d->ops;
    const char *intervals[5];
    const int n_sweep = pcheck_intervals(k, intervals), n_int = n_sweep ? n_sweep : 1;
    const bool sweep = n_sweep > 0;
    struct tide_polcheck_costs tc[2];
    tide_polcheck_costs_init(&tc[0], true, 10, 40, 2, 120);
    tide_polcheck_costs_init(&tc[1], false, 10, 40, 2, 120);
    struct tide_polcheck_report *r = calloc(1, sizeof *r);
    if (!r)
        return TIDE_E_NOMEM;
    char done[64] = "";
    struct pcheck_log lg = {0};
    tide_log_set_sink(pcheck_log_sink, &lg);
    for (int ii = 0; ii < n_int; ii++) {
        char label[96] = "";
        if (sweep) {
            const char *v = intervals[ii];
            /* A value the option's range refuses is reported and left out. */
            int rc = tide_config_set_value(k->c.cfg, d->name, "interval", v, "policy-check");
            if (rc != TIDE_OK)
                continue;
            snprintf(done + strlen(done), sizeof done - strlen(done), "%s%s", *done ? ", " : "", v);
        }
        const struct tide_opts *opts = d->options ? tide_config_section(k->c.cfg, d->name) : NULL;
        for (int ci = 0; ci < 3; ci++) {
            if (sweep)
                snprintf(label, sizeof label, "interval=%s costs=%s", intervals[ii],
                         ci == 0   ? "none"
                         : ci == 1 ? "overlapped"
                                   : "serial");
            else
                snprintf(label, sizeof label, "costs=%s",
                         ci == 0   ? "none"
                         : ci == 1 ? "overlapped"
                                   : "serial");
            for (int si = 0; si < 3; si++) {
                const int n = sizes[si];
                const int budgets[] = {0, 1, n / 3, n / 2, n - 1, n};
                for (int bi = 0; bi < 6; bi++)
                    for (int seed = 1; seed <= k->seeds; seed++) {
                        const struct tide_polcheck_case c = {
                            .label = label,
                            .n_layers = 3,
                            .n_experts = n,
                            .budget = budgets[bi],
                            .blocks = 4,
                            .second_prompt = 2,
                            .seed = (uint64_t)seed,
                            .max_steps = ci ? 32 : 0,
                            .costs = ci ? &tc[ci - 1].c : NULL,
                        };
                        tide_polcheck_case_twice(ops, opts, &c, r);
                    }
            }
        }
    }
    tide_log_set_sink(NULL, NULL);
    char what[80] = "";
    if (sweep)
        snprintf(what, sizeof what, "intervals %s", done);
    pcheck_props_print(k, r, what, &lg);
    free(r);
    return TIDE_OK;
}

/* ---- lossless ------------------------------------------------------------ */

struct pcheck_gen {
    int32_t *ids;
    int64_t n_ids;
    uint64_t hash; /* FNV-1a over the logits rows the decoder read (tide run --logits-hash) */
    struct tide_offload_stats off;
};

static void pcheck_on_rows(void *user, const struct tide_rows_event *ev)
{
    struct pcheck_gen *g = user;
    for (int r = 0; r < ev->n; r++)
        g->hash = cli_fnv1a64(g->hash, ev->rows[r], (size_t)ev->vocab * sizeof *ev->rows[r]);
}

static int pcheck_generate(struct tide_engine *e, struct pcheck_gen *g)
{
    int32_t prompt[40];
    pcheck_prompt(prompt, 40);
    struct tide_request req;
    tide_request_init(&req);
    req.prompt_ids = prompt;
    req.n_prompt_ids = 40;
    req.chat = 0;
    req.user = g;
    req.on_rows = pcheck_on_rows;
    g->hash = 0xcbf29ce484222325ull;
    struct tide_result *res = NULL;
    int rc = tide_engine_generate(e, &req, &res);
    if (rc == TIDE_OK) {
        g->n_ids = res->n_ids;
        g->ids = malloc(sizeof *g->ids * (size_t)(res->n_ids ? res->n_ids : 1));
        if (!g->ids)
            rc = TIDE_E_NOMEM;
        else
            memcpy(g->ids, res->ids, sizeof *g->ids * (size_t)res->n_ids);
        g->off = res->offload;
    }
    tide_result_free(res);
    return rc;
}

static int pcheck_lossless(struct pcheck *k)
{
    char prof[PATH_MAX + 32] = "";
    const char *model = k->tmp.model;
    int rc = cli_check_model(&k->tmp, "model-llada2", "tiny", k->keep, "policy-check");
    if (rc != TIDE_OK)
        return rc;
    /* Cost-aware policies need [policy] profile: a test one for the tiny
     * experts unless the configuration names one. */
    const struct tide_opts *pol = tide_config_section(k->c.cfg, "policy");
    if (!*tide_opts_str(pol, "profile")) {
        if ((rc = cli_check_profile(&k->tmp, prof, sizeof prof, "policy-check")) != TIDE_OK ||
            (rc = tide_config_set_value(k->c.cfg, "policy", "profile", prof, "policy-check")) !=
                TIDE_OK)
            return rc;
    }
    const struct tide_policy_costs *costs = NULL;
    if ((rc = cli_policy_costs(&k->c, &costs)) != TIDE_OK)
        return rc;
    /* The user's files and --set first, then what this check fixes. */
    const char *sets[CLI_MAX_SETS + 16];
    int n = 0;
    for (int i = 0; i < k->c.n_sets; i++)
        sets[n++] = k->c.sets[i];
    char mpath[PATH_MAX + 32], ppath[PATH_MAX + 64];
    snprintf(mpath, sizeof mpath, "model.path=%s", model);
    sets[n++] = "model.plugin=model-llada2";
    sets[n++] = mpath;
    sets[n++] = "backend.device=backend-cpu-onednn";
    sets[n++] = "backend.host=backend-cpu-onednn";
    sets[n++] = "generation.gen_length=64";
    sets[n++] = "generation.block_length=32";
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
    struct tide_engine *e = NULL;
    if ((rc = tide_engine_open(&args, &e)) != TIDE_OK)
        return rc;
    struct tide_engine_info info = {.size = sizeof info};
    tide_engine_get_info(e, &info);
    printf("lossless: model-llada2 tiny (%d experts a layer, %s), both backend roles on\n"
           "  backend-cpu-onednn; a 40-token prompt, 64 tokens; ids and logits vs no offload\n\n",
           info.n_experts, k->keep ? model : "generated");
    struct pcheck_gen want = {0};
    if ((rc = pcheck_generate(e, &want)) != TIDE_OK) {
        tide_engine_close(e);
        return rc;
    }
    printf("  %-8s %-6s %-6s %9s  %-10s %-10s %s\n", "budget", "ids", "logits", "hit rate",
           "host rows", "promotions", "result");
    printf("  %-8s %d ids, logits hash %016llx (the reference)\n", "none", (int)want.n_ids,
           (unsigned long long)want.hash);
    for (int b = 0; b < k->n_budgets; b++) {
        char s1[160], s2[32];
        snprintf(s1, sizeof s1, "policy.plugin=%s", k->pl->desc->name);
        snprintf(s2, sizeof s2, "policy.budget=%d", k->budgets[b]);
        const char *const bs[] = {s1, s2};
        struct pcheck_gen got = {0};
        char bud[16];
        snprintf(bud, sizeof bud, "%d", k->budgets[b]);
        if (k->budgets[b] >= info.n_experts) {
            printf("  %-8s skipped: not below the %d experts of a layer (no offload)\n", bud,
                   info.n_experts);
            continue;
        }
        int grc = tide_engine_set_options(e, bs, 2);
        if (grc == TIDE_OK)
            grc = pcheck_generate(e, &got);
        if (grc != TIDE_OK) {
            printf("  %-8s FAIL: %s\n", bud, tide_engine_error(e));
            char what[48];
            snprintf(what, sizeof what, "lossless at budget %s", bud);
            pcheck_failed(k, what);
            free(got.ids);
            continue;
        }
        bool same_ids = got.n_ids == want.n_ids &&
                        !memcmp(got.ids, want.ids, sizeof *got.ids * (size_t)got.n_ids);
        bool same_logits = got.hash == want.hash;
        int first = 0;
        while (first < got.n_ids && first < want.n_ids && got.ids[first] == want.ids[first])
            first++;
        printf("  %-8s %-6s %-6s %8.1f%%  %-10llu %-10llu %s", bud, same_ids ? "same" : "DIFFER",
               same_logits ? "same" : "DIFFER", 100.0 * got.off.hit_rate,
               (unsigned long long)got.off.miss_rows, (unsigned long long)got.off.promotions,
               same_ids && same_logits ? "PASS" : "FAIL");
        if (!same_ids)
            printf(": first differing token at %d", first);
        else if (!same_logits)
            printf(": the logits hash is %016llx", (unsigned long long)got.hash);
        printf("\n");
        if (!(same_ids && same_logits)) {
            char what[48];
            snprintf(what, sizeof what, "lossless at budget %s", bud);
            pcheck_failed(k, what);
        }
        free(got.ids);
    }
    printf("\n");
    free(want.ids);
    tide_engine_close(e);
    return TIDE_OK;
}

/* ---- command line -------------------------------------------------------- */

int cmd_policy_check(int argc, char **argv)
{
    static struct pcheck k; /* large; one per process */
    memset(&k, 0, sizeof k);
    k.budgets[0] = 0, k.budgets[1] = 1, k.budgets[2] = 4, k.budgets[3] = 16;
    k.n_budgets = 4;
    k.seeds = 4;
    k.props = k.lossless = true;
    static const char *const flags[] = {"--budgets", "--seeds", "--only", "--keep", "--help", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int used = cli_common_arg(&k.c, argc, argv, &i);
        if (used < 0)
            return CLI_EXIT_USAGE;
        if (used)
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            pcheck_usage(stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(a, "--budgets") && i + 1 < argc) {
            if ((k.n_budgets =
                     cli_check_budgets(argv[++i], k.budgets, PC_MAX_BUDGETS, "policy-check")) < 0)
                return CLI_EXIT_USAGE;
        } else if (!strcmp(a, "--seeds") && i + 1 < argc) {
            char *end;
            long s = strtol(argv[++i], &end, 10);
            if (*end || s < 1 || s > 1000) {
                fprintf(stderr, "tide policy-check: --seeds takes a number from 1 to 1000\n");
                return CLI_EXIT_USAGE;
            }
            k.seeds = (int)s;
        } else if (!strcmp(a, "--only") && i + 1 < argc) {
            const char *w = argv[++i];
            if (strcmp(w, "props") && strcmp(w, "lossless")) {
                fprintf(stderr, "tide policy-check: --only takes props or lossless, not '%s'\n", w);
                return CLI_EXIT_USAGE;
            }
            k.props = !strcmp(w, "props");
            k.lossless = !k.props;
        } else if (!strcmp(a, "--keep") && i + 1 < argc) {
            k.keep = argv[++i];
        } else if (a[0] != '-' && !k.plugin_arg) {
            k.plugin_arg = a;
        } else {
            char hint[96];
            cli_suggest_flag(a, flags, hint, sizeof hint);
            fprintf(stderr,
                    "tide policy-check: unexpected argument '%s'%s (see tide policy-check "
                    "--help)\n",
                    a, hint);
            return CLI_EXIT_USAGE;
        }
    }
    if (!k.plugin_arg) {
        pcheck_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    int rc = pcheck_resolve(&k);
    if (rc == TIDE_OK) {
        const struct tide_plugin_desc *d = k.pl->desc;
        printf("tide policy-check %s %s (%s)\n\n", d->name, d->version ? d->version : "?",
               k.pl->path);
        fflush(stdout);
        if (k.props)
            rc = pcheck_props(&k);
        fflush(stdout);
        /* An installation without the CPU backend or the tiny model's
         * plugin cannot run the comparison: said, not failed. */
        const char *missing = !tide_plugins_find(k.c.plugins, "backend-cpu-onednn")
                                  ? "backend-cpu-onednn"
                              : !tide_plugins_find(k.c.plugins, "model-llada2") ? "model-llada2"
                                                                                : NULL;
        char note[96] = "";
        if (rc == TIDE_OK && k.lossless && missing) {
            printf("lossless: not run: this installation has no %s plugin\n\n", missing);
            snprintf(note, sizeof note, " (lossless not run: no %s)", missing);
        } else if (rc == TIDE_OK && k.lossless) {
            rc = pcheck_lossless(&k);
            if (rc != TIDE_OK) {
                printf("lossless: FAIL: could not run (%s)\n\n", tide_status_str(rc));
                pcheck_failed(&k, "lossless (could not run)");
                rc = TIDE_OK;
            }
        }
        if (rc == TIDE_OK)
            printf("policy-check: %s: %s%s%s\n", d->name,
                   k.failed ? "FAIL: "
                   : *note  ? "PASS"
                            : "PASS (every check held)",
                   k.failed_names, note);
    }
    cli_check_rm_tmp(&k.tmp);
    cli_teardown(&k.c);
    if (rc != TIDE_OK)
        return cli_exit_code(rc) == CLI_EXIT_OK ? CLI_EXIT_RUNTIME : cli_exit_code(rc);
    return k.failed ? CLI_EXIT_RUNTIME : CLI_EXIT_OK;
}
