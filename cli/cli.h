/* Shared pieces of the `tide` subcommands. */
#ifndef TIDE_CLI_H
#define TIDE_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "output_file.h"
#include "loader.h"
#include "tide/model.h"

/* Exit codes, documented in `tide --help` and README. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_RUNTIME = 1,
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_INTERRUPTED = 130,
};

#define CLI_MAX_SETS    128
#define CLI_MAX_CONFIGS 16

/* What most subcommands need: the plugins found and the effective config. */
struct cli_ctx {
    const char *configs[CLI_MAX_CONFIGS]; /* -c FILE, in order: a later file wins */
    int n_configs;
    const char *sets[CLI_MAX_SETS]; /* --set section.key=value, in order */
    int n_sets;
    struct tide_plugin_set *plugins;
    struct tide_config *cfg;
    struct cli_costs *costs; /* [policy] profile, loaded by cli_engine_open; owned */
    bool scale_profile;      /* --scale-profile: fit [policy] profile to the model's experts */
    bool costs_failed;       /* [policy] profile could not be loaded or fitted (logged) */
};

/* Handle -c/--config, --set and -q/--quiet (log level warn: no info
 * messages, no progress line) at argv[*i] (advancing *i). Returns 1 when the
 * argument was consumed, 0 when it is not one of these, -1 on a usage error. */
int cli_common_arg(struct cli_ctx *c, int argc, char **argv, int *i);

/* Scan plugins, register every section, load the files in order (a later
 * one overrides an earlier one), apply --set. Returns TIDE_OK or a status
 * (logged). */
int cli_setup(struct cli_ctx *c);
void cli_teardown(struct cli_ctx *c);

/* Scan the plugins and resolve model plugin `name` (named by `what` in
 * messages). Returns its ops, or NULL (logged); *set is always to be freed
 * with tide_plugins_free after the last use of the ops. */
const struct tide_model_ops *cli_model_plugin(const char *name, const char *what,
                                              struct tide_plugin_set **set);

/* Parse "1,2,3" into a malloc'd array. Returns TIDE_OK or TIDE_E_CONFIG (logged). */
int cli_parse_ids(const char *text, const char *what, int32_t **ids, size_t *n);

/* Read a whole text file into a NUL-terminated malloc'd buffer. A file
 * holding a NUL byte is refused (TIDE_E_FORMAT, logged). */
int cli_read_file(const char *path, char **out, size_t *len);

/* Install a SIGINT handler that asks long work to stop (tide_request_stop). */
void cli_catch_interrupt(void);

/* Open the output file named by option `key` of [output] (empty: *f = NULL)
 * as PATH.tmp; refuses an existing PATH unless [output] overwrite is true
 * (output_file.h). */
int cli_output_open(const struct tide_opts *output, const char *key, FILE **f, const char **path);

struct tide_engine;
struct tide_moe_counters;
/* Open the engine the config names (tide_engine_prepare, then
 * tide_engine_load) with the costs of [policy] profile, when set, bound to
 * the model's experts (scaled when c->scale_profile), handed to its policies (they live in c until
 * cli_teardown, which must come after tide_engine_close). Returns TIDE_OK or a status (logged). */
int cli_engine_open(struct cli_ctx *c, struct tide_engine **e);
struct tide_policy_costs;
/* The costs of [policy] profile (after cli_setup), loaded once into c; *out
 * is NULL when no profile is set. They live until cli_teardown. Returns
 * TIDE_OK or a status (logged, naming the file). */
int cli_policy_costs(struct cli_ctx *c, const struct tide_policy_costs **out);
struct tide_trace_writer;
struct tide_trace_sink;
/* Open a routing trace at path for e's model under its decoder: *w is the
 * writer (close it with tide_trace_writer_close) and *sink its events. */
int cli_trace_open(const struct tide_engine *e, const char *path, bool overwrite,
                   struct tide_trace_writer **w, struct tide_trace_sink *sink);
struct tide_engine_info;
struct tide_offload_stats;
/* The end-of-run table: hit rate, GB moved, host rows, tokens/s (stderr). */
void cli_print_offload_summary(const struct tide_engine_info *info,
                               const struct tide_offload_stats *t, double seconds, int64_t tokens);

/* Create root if needed, then a new folder root/YYYYmmdd-HHMMSS<suffix>
 * (with -1, -2, ... when taken) whose path goes into dir. `what` names the
 * setting in messages. Returns TIDE_OK or TIDE_E_IO (logged). */
/* Create the missing folders above path (not path itself); errors show
 * when the caller creates path. */
void cli_mkdir_parents(const char *path);
int cli_mkdir_stamped(const char *root, const char *suffix, const char *what, char *dir,
                      size_t len);

/* The CPU's model name from /proc/cpuinfo into buf ("unknown" when absent). */
void cli_cpu_model(char *buf, size_t len);

/* Map a status to an exit code: config and usage problems exit 2. */
int cli_exit_code(int status);

/* "; did you mean '--X'?" into buf when one of flags (NULL-terminated) is
 * close to arg by edit distance, else "". The common -c, --config, --set and
 * --quiet are always candidates. */
void cli_suggest_flag(const char *arg, const char *const *flags, char *buf, size_t len);

/* "; did you mean '--x'?" into buf, x among the flags that usage's text
 * names (and the common ones), or "". */
void cli_flag_hint(const char *arg, void (*usage)(FILE *), char *buf, size_t len);

/* An argument cmd does not take: "tide CMD: unexpected argument 'arg'", a
 * did-you-mean (cli_flag_hint), then the usage, on stderr. Returns
 * CLI_EXIT_USAGE. */
int cli_unexpected(const char *cmd, const char *arg, void (*usage)(FILE *));

/* "; did you mean 'w'?" into buf, w the closest of the NULL-ended words
 * when close enough, or "". */
void cli_suggest_word(const char *word, const char *const *words, char *buf, size_t len);

/* True when any of argv[from..argc) is -h or --help (commands with
 * subcommands answer it wherever it appears). */
bool cli_wants_help(int argc, char **argv, int from);

int cmd_plugins(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_bench(int argc, char **argv);
/* `tide bench plot DIR [--out PLOTDIR]` (bench_plot.c). Returns an exit code. */
int cmd_bench_plot(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_policy_check(int argc, char **argv);
int cmd_decoder_check(int argc, char **argv);

#endif
