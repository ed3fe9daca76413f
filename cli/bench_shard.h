/* `tide bench` over several processes or machines (docs/cluster.md):
 * --shard K/N runs configurations i with i mod N = K, --baseline DIR reuses
 * an earlier run's no-offload baseline, --emit-slurm N writes a Slurm job
 * array and its merge job, and `tide bench merge` joins the shards into the
 * folder one unsharded run would have written. */
#ifndef TIDE_CLI_BENCH_SHARD_H
#define TIDE_CLI_BENCH_SHARD_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "shard.h"
#include "sweep.h"

struct tide_engine;

/* The flags, as given. */
struct bench_shard_args {
    struct cli_shard shard; /* --shard K/N (count 0: all configurations) */
    const char *baseline;   /* --baseline DIR, or NULL */
    int emit_slurm;         /* --emit-slurm N; 0: run the sweep */
    const char *partition;  /* --partition P (sbatch), or NULL */
    const char *gres;       /* --gres G, or NULL */
    const char *time;       /* --time T, or NULL */
};

/* Handle one of these flags at argv[*i] (advancing *i past its value).
 * Returns 1 when consumed, 0 when argv[*i] is not one of them, -1 on a usage
 * error (logged). */
int bench_shard_arg(struct bench_shard_args *a, int argc, char **argv, int *i);

/* The sweep as resolved by cmd_bench, in the order of an unsharded run: for
 * each --sweep point, its baseline (if any), then policy x budget x interval
 * (interval only for policy-tide) x batch. Configuration i counts from 0
 * over all points, skipping the baselines. */
struct bench_grid {
    const char (*policy)[64]; /* [n_policies] plugin names */
    int n_policies;
    const int *budget; /* [n_budgets] */
    int n_budgets;
    const int *interval; /* [n_intervals] */
    int n_intervals;
    const int *batch; /* [n_batches] batch sizes, the innermost axis */
    int n_batches;
    bool baseline;
    char *const *prompt; /* [n_prompts] */
    int n_prompts;
    int repeats;
    const struct cli_sweep *sweep; /* --sweep keys (may be NULL: none) */
};

/* What one bench run records for `merge`. */
struct bench_shard_run {
    const struct bench_shard_args *args;
    json_t *m;           /* members added to manifest.json, owned */
    json_t *rows;        /* [{"configuration": i or -1, "metrics": FILE}], in results.csv order */
    char *baseline_line; /* --baseline: the (no offload) line of DIR's results.csv, owned */
    char *baseline_file; /* --baseline: DIR's metrics file of the baseline, owned */
};

/* Before the sweep: fingerprint the checkpoint, the prompts and the grid,
 * snapshot the effective configuration (before the sweep changes it) and,
 * with --baseline DIR, check DIR is a compatible run and fill
 * want[n_prompts] with its reference tokens' hashes. Returns TIDE_OK or a
 * status (logged). Release with bench_shard_run_free. */
int bench_shard_begin(struct bench_shard_run *r, const struct bench_shard_args *a,
                      const struct tide_config *cfg, const struct tide_engine *e,
                      const struct bench_grid *g, uint64_t *want);

/* After a configuration's row: configuration index (-1: the baseline) and its
 * metrics file tag. TIDE_OK or TIDE_E_NOMEM. */
int bench_shard_row(struct bench_shard_run *r, long config, const char *tag);

/* After the sweep: the members to add to manifest.json (borrowed; valid
 * until bench_shard_run_free): shard, grid, checkpoint, config,
 * reference_tokens (want[n]), strict_tokens, rows, interrupted; and with
 * --baseline, DIR's baseline metrics copied into dir. */
json_t *bench_shard_end(struct bench_shard_run *r, const char *dir, const uint64_t *want, int n,
                        bool strict, bool interrupted);

void bench_shard_run_free(struct bench_shard_run *r);

/* The folder-name suffix of a shard's results ("-shard-K-of-N", or ""). */
void bench_shard_suffix(const struct bench_shard_args *a, char *buf, size_t len);

/* --emit-slurm N: write submit.sh, shards.sbatch and merge.sbatch into a new
 * folder under [bench] out; the shard jobs run this command line (argv) with
 * --shard $SLURM_ARRAY_TASK_ID/N. Does not load the model. Returns TIDE_OK
 * or a status (logged). */
int bench_emit_slurm(const struct cli_ctx *c, const struct bench_shard_args *a, int argc,
                     char **argv);

/* `tide bench merge DIR... --out DIR`. Returns an exit code. */
int cmd_bench_merge(int argc, char **argv);

#endif
