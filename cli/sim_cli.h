/* `tide sim` (cli/cmd_sim.c) and its sharding (cli/sim_shard.c): the
 * command's state, shared by the two files. */
#ifndef TIDE_CLI_SIM_CLI_H
#define TIDE_CLI_SIM_CLI_H

#include <stdbool.h>

#include "cli.h"
#include "progress.h"
#include "shard.h"
#include "sim.h"
#include "sweep.h"

#define SIM_MAX_LIST 256
/* The default --interval list stops here (the longest block may be longer). */
#define SIM_DEFAULT_MAX_INTERVAL 64u

/* One configuration's result: a table and CSV row. */
struct sim_row {
    char policy[32];
    char interval[16];
    int budget;     /* -1: per-layer budgets */
    int interval_n; /* policy-tide's interval; 0 auto; -1 none */
    struct tide_sim_counters c;
    double *layer_us; /* [L], policy-tide rows */
    bool bound;       /* the oracle: us is a lower bound */
    bool no_counters; /* the oracle without a schedule: counters unknown */
    double seconds;
    long point; /* of the --sweep grid */
};

struct sim_out;

struct sim_cli {
    struct cli_ctx c;
    const char *trace_path, *profile_path, *csv, *plot, *metrics, *model_dir;
    const char *plot_series; /* --plot-series LIST: only these series in plots; NULL: all */
    char policies[512], budgets[512], intervals[512];
    bool hindsight, oracle, layer_budgets, scale, force;
    int batch; /* --batch N: the trace's prompts replayed as batches of N (0: as recorded) */
    int qfmt;  /* --experts FMT: replay with experts of this weight format; -1: the trace's */
    struct tide_sim_trace *t;
    struct tide_profile prof;
    bool have_prof;
    struct tide_cost cost;
    struct tide_policy_costs pcost; /* cost as the policies see it (with a profile) */
    int budget[SIM_MAX_LIST], n_budget;
    int interval[SIM_MAX_LIST], n_interval; /* 0 = auto */
    /* Without --interval: the list is 1..default_interval_top, the longest
     * block recorded (longest_block steps) capped at SIM_DEFAULT_MAX_INTERVAL;
     * 0 when --interval was given. */
    uint32_t default_interval_top, longest_block;
    const struct tide_plugin *pol[16];
    int n_pol;
    struct sim_row *rows;
    int n_rows, cap_rows;
    int L, E;
    /* Sharding (docs/cluster.md). */
    struct cli_shard shard; /* --shard K/N */
    const char *out;        /* --out DIR: a result folder, or NULL */
    long n_config;          /* configurations met so far, in the unsharded order */
    struct sim_out *o;      /* the result folder being written, and a merge's shards */
    struct cli_sweep sweep; /* --sweep keys */
    long point;             /* the sweep point being replayed or printed */
    /* The progress line: configuration cfg_i of n_cfg (those this process
     * replays; cfg_i counts from 1 once the first started) is pg_label. Its units are estimated
     * seconds: an oracle takes far longer than a replay, so each kind is weighed by its own mean.
     */
    struct cli_progress pg;
    long cfg_i, n_cfg;
    char pg_label[600];
    long pg_n[2], pg_done[2]; /* [replays, oracles]: to run, and finished */
    double pg_s[2];           /* [replays, oracles]: seconds of the finished ones */
    double pg_t;              /* when the current one started, monotonic seconds */
    int pg_kind;              /* the current one: 0 replay, 1 oracle, -1 none yet */
};

/* cmd_sim.c: a new zeroed row at the end of s->rows; the sweep (setup,
 * replays, table, choices, CSV, plots); and freeing everything s holds. */
int sim_add_row(struct sim_cli *s, struct sim_row **out);
int sim_main(struct sim_cli *s);
void sim_cli_free(struct sim_cli *s);

/* sim_shard.c. --shard K/N and --out DIR at argv[*i]: 1 consumed, 0 not
 * one of them, -1 usage error (logged). */
int sim_shard_arg(struct sim_cli *s, int argc, char **argv, int *i);

/* After setup, before the replays: check the flags go together, create the
 * --out folder (new or empty; its results.csv and plots/ replace --csv and
 * --plot) and record the inputs; in a merge, check the trace and profile are
 * the shards'. Returns TIDE_OK or a status (logged). */
int sim_out_begin(struct sim_cli *s);

/* The next configuration of the sweep (policy, budget, interval or -1):
 * true when this process replays it; false when it belongs to another
 * shard, or in a merge, where its row is appended from the shard that
 * replayed it (*rc says whether that worked). */
bool sim_take(struct sim_cli *s, const char *policy, int budget, int interval, int *rc);

/* After sim_main returned rc: with --out, write manifest.json and rows.json
 * (when rc is TIDE_OK) or remove what the folder holds. Returns rc, or the
 * status of writing. */
int sim_out_end(struct sim_cli *s, int rc);

void sim_out_free(struct sim_out *o); /* NULL is a no-op */

/* `tide sim merge DIR... --out DIR [--trace FILE] [--profile FILE]`:
 * returns an exit code. */
int cmd_sim_merge(int argc, char **argv);

#endif
