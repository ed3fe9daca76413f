/* bench-sim: replay speed of the trace simulator (docs/sim.md), in routing
 * assignments (token x top-k slots) per second on one core, per policy, on
 * a LLaDA2.0-mini-shaped synthetic trace, plus the decoding speed of the
 * trace and the oracle's time. The target is 20 million assignments per
 * second per configuration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "loader.h"
#include "sim.h"
#include "tide/log.h"
#include "tide/status.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *trace = NULL;
    int budget = 64, repeat = 3;
    bool oracle = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--trace") && i + 1 < argc)
            trace = argv[++i];
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc)
            budget = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-oracle"))
            oracle = false;
        else {
            fprintf(stderr, "usage: bench-sim [--trace FILE] [--budget N] [--repeat N] "
                            "[--no-oracle]\n");
            return 2;
        }
    }
    char tmp[] = "/tmp/tide-bench-sim-XXXXXX", path[256];
    if (!trace) {
        if (!mkdtemp(tmp))
            return 1;
        snprintf(path, sizeof path, "%s/mini.trc", tmp);
        struct tide_synth_params p = {.n_layers = 19,
                                      .n_experts = 256,
                                      .top_k = 8,
                                      .hidden = 2048,
                                      .inter = 512,
                                      .block_length = 32,
                                      .steps = 32,
                                      .min_steps = 32,
                                      .blocks = 8,
                                      .prompts = 1,
                                      .prompt_len = 40,
                                      .skew = 1.0,
                                      .similarity = 0.985,
                                      .drift = 0.5,
                                      .seed = 1};
        double rate;
        if (tide_synth_calibrate(&p, &rate) != TIDE_OK ||
            tide_synth_write(path, true, &p, rate) != TIDE_OK)
            return 1;
        trace = path;
    }
    double t0 = now();
    struct tide_sim_trace *t;
    if (tide_sim_trace_load(trace, &t) != TIDE_OK)
        return 1;
    double load_s = now() - t0;
    printf("trace %s: %u layers x %u experts, top-%u, %llu assignments; decoded in %.3f s "
           "(%.1f M assignments/s)\n",
           trace, t->h.n_layers, t->h.n_experts, t->h.top_k, (unsigned long long)t->assignments,
           load_s, (double)t->assignments / load_s / 1e6);
    struct tide_profile prof;
    char ppath[4200];
    snprintf(ppath, sizeof ppath, "%s/config/profiles/h100-pcie5.ini", TIDE_SOURCE_DIR);
    struct tide_cost cost;
    if (tide_profile_load(ppath, &prof) != TIDE_OK ||
        tide_cost_init(&cost, &prof, t->h.hidden, t->h.inter, true, "the trace", t->max_tokens) !=
            TIDE_OK)
        return 1;
    struct tide_plugin_set *set;
    struct tide_config *cfg = tide_config_create();
    if (tide_plugins_scan(&set) != TIDE_OK || !cfg)
        return 1;
    for (int i = 0; i < set->n; i++)
        tide_config_add_section(cfg, set->items[i].desc->name, set->items[i].desc->options,
                                set->items[i].desc->name, NULL);
    static const struct {
        const char *plugin, *interval, *label;
        enum tide_sim_hindsight kind;
    } cfgs[] = {
        {"policy-tide", "1", "policy-tide interval 1", SIM_PLUGIN},
        {"policy-tide", "4", "policy-tide interval 4", SIM_PLUGIN},
        {"policy-tide", "32", "policy-tide interval 32", SIM_PLUGIN},
        {"policy-lru", NULL, "policy-lru", SIM_PLUGIN},
        {"policy-static", NULL, "policy-static", SIM_PLUGIN},
        {NULL, NULL, "belady", SIM_BELADY},
        {NULL, NULL, "best-static", SIM_BEST_STATIC},
    };
    printf("%-26s %10s %14s\n", "configuration (budget)", "seconds", "M assign/s");
    int rc = 0;
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        struct tide_sim_config c = {.label = cfgs[k].label, .kind = cfgs[k].kind, .budget = budget};
        if (cfgs[k].plugin) {
            const struct tide_plugin *pl = tide_plugins_find(set, cfgs[k].plugin);
            if (!pl) {
                fprintf(stderr, "plugin %s not found\n", cfgs[k].plugin);
                return 1;
            }
            if (cfgs[k].interval)
                tide_config_set_value(cfg, "policy-tide", "interval", cfgs[k].interval, "bench");
            c.ops = pl->desc->ops;
            c.opts = tide_config_section(cfg, cfgs[k].plugin);
        }
        double best = 1e30;
        for (int r = 0; r < repeat; r++) {
            struct tide_sim_result res;
            if (tide_sim_run(t, &c, &cost, NULL, &res) != TIDE_OK)
                return 1;
            if (res.seconds < best)
                best = res.seconds;
            tide_sim_result_free(&res);
        }
        double rate = (double)t->assignments / best / 1e6;
        printf("%-26s %10.4f %14.1f%s\n", cfgs[k].label, best, rate,
               rate < 20 ? "   (below the 20 M/s target)" : "");
        rc |= rate < 20;
    }
    if (oracle) {
        struct tide_sim_oracle o;
        t0 = now();
        if (tide_sim_oracle(t, budget, NULL, &cost, NULL, &o) != TIDE_OK)
            return 1;
        printf("%-26s %10.4f %14.1f   (min-cost flow, not a replay)\n", "oracle", now() - t0,
               (double)t->assignments / (now() - t0) / 1e6);
        tide_sim_oracle_free(&o);
    }
    tide_cost_free(&cost);
    tide_sim_trace_free(t);
    tide_config_destroy(cfg);
    tide_plugins_free(set);
    if (trace == path) {
        unlink(path);
        rmdir(tmp);
    }
    return rc;
}
