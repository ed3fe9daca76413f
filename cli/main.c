/* The `tide` command line: a table of subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "crash.h"
#include "loader.h"
#include "tide/log.h"
#include "tide/plugin.h"

#ifndef TIDE_VERSION_STRING
#define TIDE_VERSION_STRING "0.0.0"
#endif

struct cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct cli_command commands[] = {
    {"run", cmd_run, "generate text from a prompt (block diffusion)"},
    {"serve", cmd_serve, "answer OpenAI-style HTTP requests (completions, chat, streaming)"},
    {"bench", cmd_bench, "compare placement policies, budgets and intervals on a prompt set"},
    {"sim", cmd_sim, "replay a routing trace through policies, budgets and hardware profiles"},
    {"trace", cmd_trace, "summarise (trace info) or synthesise (trace synth) routing traces"},
    {"profile", cmd_profile, "measure this machine's expert times and copy bandwidth"},
    {"inspect", cmd_inspect, "describe a checkpoint: shapes, parameters, memory per budget"},
    {"mkmodel", cmd_mkmodel,
     "write a synthetic checkpoint (tiny, small, llada2-mini, llada2-flash)"},
    {"quantize", cmd_quantize,
     "write a copy of a checkpoint with q8_0, q4_0 or fp8 routed experts"},
    {"tokenize", cmd_tokenize, "show how a tokenizer.json splits text (debugging)"},
    {"forward", cmd_forward, "write the logits of one forward pass (verification)"},
    {"policy-check", cmd_policy_check,
     "check a placement policy plugin: plan rules, determinism, lossless output"},
    {"decoder-check", cmd_decoder_check,
     "check a decoder plugin: plan bounds, determinism, batch invariance, lossless"},
    {"plugins", cmd_plugins, "list the plugins found, and why any file was refused"},
    {"config", cmd_config,
     "check a config file (config check FILE) or print the reference "
     "(config doc)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tide [--quiet|--verbose] COMMAND [ARGS]\n\n"
               "TIDE runs mixture-of-experts diffusion language models (LLaDA2.0, LLaDA2.1,\n"
               "LLaDA-MoE) on one GPU plus the CPU, with pluggable expert-placement policies\n"
               "and decoding loops.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-13s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`tide COMMAND --help` (or `tide help COMMAND`) describes each command.\n\n"
               "common options:\n"
               "  -c, --config FILE           INI configuration (see docs/config.md); repeat\n"
               "                              it to layer files, the later winning\n"
               "  --set section.key=value     override one option; may repeat; wins over FILE\n"
               "  -q, --quiet / -v, --verbose log level warn / debug (or TIDE_LOG_LEVEL);\n"
               "                              --quiet also after the command, and it turns\n"
               "                              off the progress line long commands draw on\n"
               "                              stderr when it is a terminal\n\n"
               "environment:\n"
               "  TIDE_PLUGIN_PATH   extra plugin folders, ':'-separated, searched last\n"
               "  TIDE_LOG_LEVEL     error, warn, info (default) or debug\n"
               "  TIDE_PROGRESS      0: no progress line; 1: on a terminal even under\n"
               "                     --quiet; always: wherever stderr goes\n\n"
               "exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error,\n"
               "            130 interrupted (Ctrl-C)\n");
}

int main(int argc, char **argv)
{
    tide_openmp_env_defaults(); /* before any plugin brings its OpenMP runtime in */
    tide_crash_install();       /* a crash inside a plugin names the plugin */
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_EXIT_OK;
        }
        if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
            printf("tide %s (plugin ABI %u)\n", TIDE_VERSION_STRING, TIDE_ABI_VERSION);
            return CLI_EXIT_OK;
        }
        if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) {
            tide_log_set_level(TIDE_LOG_WARN);
            continue;
        }
        if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
            tide_log_set_level(TIDE_LOG_DEBUG);
            continue;
        }
        fprintf(stderr, "tide: unknown option '%s'\n\n", argv[i]);
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (i >= argc) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    /* `tide help CMD` is `tide CMD --help`. */
    char *help_argv[] = {i + 1 < argc ? argv[i + 1] : NULL, "--help", NULL};
    const bool help = !strcmp(argv[i], "help");
    if (help && i + 1 >= argc) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    const char *name = help ? argv[i + 1] : argv[i];
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++)
        if (!strcmp(name, commands[c].name))
            return help ? commands[c].run(2, help_argv) : commands[c].run(argc - i, argv + i);
    const char *best = NULL;
    int bd = 99;
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
        const int d = tide_edit_distance(name, commands[c].name);
        if (d < bd) {
            bd = d;
            best = commands[c].name;
        }
    }
    if (best && bd <= 1 + (int)strlen(best) / 3)
        fprintf(stderr, "tide: unknown command '%s'; did you mean '%s'? (see tide --help)\n", name,
                best);
    else
        fprintf(stderr, "tide: unknown command '%s' (see tide --help)\n", name);
    return CLI_EXIT_USAGE;
}
