/* `tide run`: generate from a prompt, streaming committed text block by
 * block, with progress on stderr and a summary at the end.
 *
 * Written on the public embedding API (tide/engine.h), so that API is
 * exercised by every run. What it takes from the internals is narrow and
 * CLI-only: the [output] section of the engine's config (which files this
 * command writes) and tide_engine_set_outputs, which hands the metrics file
 * and the trace writer's sink to the dispatcher. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "shard.h"
#include "progress.h"
#include "engine.h"
#include "tide/engine.h"
#include "tide/log.h"
#include "tide/status.h"
#include "tide/trace_write.h"

static void run_usage(FILE *f)
{
    fprintf(f, "usage: tide run [-c FILE] [--set section.key=value ...]\n"
               "                (-p TEXT | -f FILE | --ids 1,2,3) [--chat] [--print-ids]\n\n"
               "Generates text with the model's diffusion decoding loop (a decoder plugin:\n"
               "[generation] decoder, auto = the one the checkpoint asks for; `tide inspect`\n"
               "says which) and prints it block by block as blocks are final. Progress goes\n"
               "to stderr: per block, the canvas positions decoded so far (the tail past\n"
               "gen_length is decoded too, and never returned) and their rate; then a\n"
               "summary: tokens returned, steps, tokens per forward, forwards, edits (editing\n"
               "decoders such as llada21), time.\n\n"
               "  -p, --prompt TEXT   the prompt\n"
               "  -f, --prompt-file F read the prompt from a file\n"
               "      --ids LIST      give the prompt as token ids (no tokenizer)\n"
               "      --chat          wrap the prompt in the model's chat template\n"
               "                      (same as --set generation.chat=true)\n"
               "      --print-ids     print the generated token ids instead of text\n"
               "      --logits-hash   also print an FNV-1a hash of every logit the decoding\n"
               "                      read (the still-masked rows of each step, in order;\n"
               "                      bit-exactness checks across policies)\n"
               "      --dump-logits F write each step's logits for the whole block to F\n"
               "                      (verification: per step int32 {block, step, rows,\n"
               "                      vocab}, then float32 [rows, vocab]; the output layer\n"
               "                      then runs for every row); refuses to replace F\n"
               "  -q, --quiet         no progress and no info messages (the progress line\n"
               "                      shows on a terminal; elsewhere a line per block)\n"
               "  -c, --config FILE   configuration (default: built-in defaults; see\n"
               "                      `tide config doc`); repeat it to layer files, the\n"
               "                      later winning; --set overrides one value\n\n"
               "Sampling, lengths, the decoder and its mode, and the KV-cache debug switch\n"
               "live in [generation]; a decoder's own keys in [decoder-NAME] (`tide config\n"
               "doc`, docs/decoding.md). [model] path names the checkpoint, and [model]\n"
               "create = tiny generates a synthetic one there on first use: at the path\n"
               "its own file names, or where --set model.create=tiny asks; any other\n"
               "missing path is an error.\n\n"
               "examples:\n"
               "  tide run -c config/llada2-tiny.ini -p \"Write a haiku about tides\"\n"
               "  tide run -c config/llada2-tiny.ini --chat -p \"Hello\" --set "
               "generation.gen_length=64\n"
               "  tide run -c config/llada21-tiny.ini -p \"Hello\"     # LLaDA2.1, quality mode\n"
               "  tide run -c config/llada2-tiny.ini --set generation.decoder=llada21 --set "
               "generation.mode=speed -p \"Hi\"\n");
}

struct run_state {
    bool stream;            /* print text as blocks complete */
    bool progress;          /* [output] progress: the line, or a line per block */
    struct cli_progress pg; /* the line (a terminal); units: blocks */
    int block_length;       /* positions per block, for the part of a block done */
    size_t printed;         /* bytes of text already printed */
    int64_t committed;      /* tokens committed so far */
    uint64_t hash;          /* --logits-hash: FNV-1a over every logits row the decoding read */
    FILE *dump;             /* --dump-logits, or NULL */
    bool dump_failed;
};

/* --logits-hash: the rows the decoder read, in step and position order
 * (the same values whether the model computed the whole block or not). */
static void run_on_rows(void *user, const struct tide_rows_event *ev)
{
    struct run_state *s = user;
    for (int r = 0; r < ev->n; r++)
        s->hash = cli_fnv1a64(s->hash, ev->rows[r], (size_t)ev->vocab * sizeof *ev->rows[r]);
}

/* --dump-logits: the whole block at every step. */
static void run_on_logits(void *user, const struct tide_logits_event *ev)
{
    struct run_state *s = user;
    const size_t cells = (size_t)ev->rows * (size_t)ev->vocab;
    const int32_t head[4] = {(int32_t)ev->block, ev->step, ev->rows, ev->vocab};
    if (fwrite(head, sizeof head, 1, s->dump) != 1 ||
        fwrite(ev->logits, sizeof *ev->logits, cells, s->dump) != cells)
        s->dump_failed = true;
}

static int run_on_start(void *user, const struct tide_start_event *ev)
{
    struct run_state *s = user;
    s->block_length = ev->block_length;
    const bool v2 = ev->size >= offsetof(struct tide_start_event, max_steps) + sizeof ev->max_steps;
    const char *dec =
        ev->size >= offsetof(struct tide_start_event, decoder) + sizeof ev->decoder && ev->decoder
            ? ev->decoder
            : "?";
    char steps[96];
    if (ev->steps > 0)
        snprintf(steps, sizeof steps, "%d steps", ev->steps);
    else if (v2 && ev->max_steps > 0)
        snprintf(steps, sizeof steps, "open-ended steps, at most %d", ev->max_steps);
    else
        snprintf(steps, sizeof steps, "open-ended steps");
    tide_info("prompt: %lld tokens; generating up to %lld tokens in blocks of %d (decoder %s, "
              "%s%s)",
              (long long)ev->prompt_tokens, (long long)ev->gen_length, ev->block_length, dec, steps,
              ev->recompute ? ", full recompute" : "");
    /* The decoder's own account of its settings (a mode may set thresholds). */
    if (v2 && ev->decoder_settings && *ev->decoder_settings)
        tide_info("decoder %s: %s", dec, ev->decoder_settings);
    else
        tide_info("threshold %g", ev->threshold);
    return 0;
}

static int run_on_step(void *user, const struct tide_step_event *ev)
{
    struct run_state *s = user;
    s->committed = ev->tokens;
    if (!s->pg.on)
        return 0;
    s->pg.total = ev->n_blocks;
    const double in_block =
        s->block_length > 0 ? 1.0 - (double)ev->remaining / (double)s->block_length : 0.0;
    cli_progress_update(&s->pg, ev->block + (in_block > 0 ? in_block : 0.0),
                        "block %d/%d step %d, %lld positions decoded, %.1f/s, %d masks left",
                        ev->block + 1, ev->n_blocks, ev->step + 1, (long long)s->committed,
                        ev->seconds > 0 ? (double)s->committed / ev->seconds : 0.0, ev->remaining);
    return 0;
}

static int run_on_block(void *user, const struct tide_block_event *ev)
{
    struct run_state *s = user;
    /* Without the line, a line per block; but not where stdout's streamed
     * text goes too (2>&1, or a terminal under TIDE_PROGRESS=0): it would
     * cut the text, which shows the progress there itself. */
    if (!s->pg.on && s->progress && !(s->stream && s->pg.shared))
        fprintf(stderr, "[block %d/%d] %lld positions decoded, %.1f/s\n", ev->block + 1,
                ev->n_blocks, (long long)s->committed,
                ev->seconds > 0 ? (double)s->committed / ev->seconds : 0.0);
    if (s->stream && ev->delta_len) {
        /* Never erased by the line, which goes below unfinished text. */
        cli_progress_text(&s->pg, ev->delta, ev->delta_len);
        s->printed += ev->delta_len;
    }
    return 0;
}

/* Open --dump-logits F as F.tmp; refuses an existing F. */
static int run_dump_open(const char *path, char *tmp, size_t len, FILE **f)
{
    if (access(path, F_OK) == 0) {
        tide_error("--dump-logits %s: the file exists; refusing to replace it", path);
        return TIDE_E_CONFIG;
    }
    snprintf(tmp, len, "%s.tmp", path);
    if (!(*f = fopen(tmp, "wb"))) {
        tide_error("--dump-logits: cannot create %s", tmp);
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

int cmd_run(int argc, char **argv)
{
    struct cli_ctx c = {0};
    const char *prompt = NULL, *prompt_file = NULL, *ids_text = NULL;
    bool chat = false, print_ids = false, logits_hash = false;
    const char *dump_path = NULL;
    for (int i = 1; i < argc; i++) {
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            return CLI_EXIT_OK;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_val) {
            prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--prompt-file")) && has_val) {
            prompt_file = argv[++i];
        } else if (!strcmp(a, "--ids") && has_val) {
            ids_text = argv[++i];
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--print-ids")) {
            print_ids = true;
        } else if (!strcmp(a, "--logits-hash")) {
            logits_hash = true;
        } else if (!strcmp(a, "--dump-logits") && has_val) {
            dump_path = argv[++i];
        } else {
            static const char *const flags[] = {"--prompt",      "--prompt-file", "--ids",
                                                "--chat",        "--help",        "--print-ids",
                                                "--logits-hash", "--dump-logits", NULL};
            char hint[128];
            cli_suggest_flag(a, flags, hint, sizeof hint);
            fprintf(stderr, "tide run: unexpected argument '%s'%s\n\n", a, hint);
            run_usage(stderr);
            return CLI_EXIT_USAGE;
        }
    }
    if (!!prompt + !!prompt_file + !!ids_text != 1) {
        fprintf(stderr, "tide run: give exactly one of -p TEXT, -f FILE or --ids LIST\n\n");
        run_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    char *file_text = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    struct tide_engine *e = NULL;
    struct tide_result *res = NULL;
    FILE *metrics = NULL, *dump = NULL;
    const char *metrics_path = NULL;
    char dump_tmp[4200];
    struct tide_trace_writer *trace = NULL;
    struct tide_trace_sink trace_sink;
    struct run_state st = {.hash = 0xcbf29ce484222325ull};
    int rc = TIDE_OK;
    /* What the command line holds is checked before the model loads. */
    if (prompt_file) {
        size_t len;
        if ((rc = cli_read_file(prompt_file, &file_text, &len)) != TIDE_OK)
            goto done;
        prompt = file_text;
    }
    if (ids_text && (rc = cli_parse_ids(ids_text, "--ids", &ids, &n_ids)) != TIDE_OK)
        goto done;
    /* The costs of [policy] profile: the runtime does not read profiles. */
    const struct tide_policy_costs *costs = NULL;
    if ((rc = cli_setup(&c)) != TIDE_OK || (rc = cli_policy_costs(&c, &costs)) != TIDE_OK)
        goto done;
    const struct tide_engine_args args = {
        .size = sizeof args,
        .config_paths = c.configs,
        .n_config_paths = c.n_configs,
        .sets = c.sets,
        .n_sets = c.n_sets,
        .policy_costs = costs,
    };
    if ((rc = tide_engine_open(&args, &e)) != TIDE_OK)
        goto done;
    /* The CLI's own outputs (files it writes) come from [output]; the engine
     * only hands their sinks to the dispatcher. */
    const struct tide_opts *oo = tide_config_section(e->cfg, "output");
    if ((rc = cli_output_open(oo, "metrics", &metrics, &metrics_path)) != TIDE_OK)
        goto done;
    if (*tide_opts_str(oo, "trace")) {
        if ((rc = cli_trace_open(e, tide_opts_str(oo, "trace"), tide_opts_bool(oo, "overwrite"),
                                 &trace, &trace_sink)) != TIDE_OK)
            goto done;
    }
    if (dump_path && (rc = run_dump_open(dump_path, dump_tmp, sizeof dump_tmp, &dump)) != TIDE_OK)
        goto done;
    st.dump = dump;
    st.stream = tide_opts_bool(oo, "stream") && !print_ids;
    st.progress = tide_opts_bool(oo, "progress") && tide_log_get_level() >= TIDE_LOG_INFO;
    /* The line decides for itself (terminal, --quiet, TIDE_PROGRESS); begun
     * either way, it keeps log messages off the end of the streamed text. */
    cli_progress_begin(&st.pg, "tide run", 1);
    if (!tide_opts_bool(oo, "progress"))
        cli_progress_off(&st.pg);
    struct tide_request req;
    tide_request_init(&req);
    req.prompt = prompt;
    req.prompt_ids = ids;
    req.n_prompt_ids = n_ids;
    req.chat = chat ? 1 : -1;
    req.user = &st;
    req.on_start = run_on_start;
    req.on_step = run_on_step;
    req.on_block = run_on_block;
    req.on_logits = dump ? run_on_logits : NULL;
    req.on_rows = logits_hash ? run_on_rows : NULL;
    const struct tide_engine_outputs outs = {.metrics = metrics,
                                             .trace = trace ? &trace_sink : NULL};
    tide_engine_set_outputs(e, &outs);
    cli_catch_interrupt();
    rc = tide_engine_generate(e, &req, &res);
    cli_progress_end(&st.pg);
    tide_engine_set_outputs(e, NULL);
    if (trace) {
        int trc = tide_trace_writer_close(trace, rc == TIDE_OK);
        trace = NULL;
        if (rc == TIDE_OK)
            rc = trc;
    }
    if (metrics && cli_output_close(metrics, metrics_path, rc == TIDE_OK) != TIDE_OK &&
        rc == TIDE_OK)
        rc = TIDE_E_IO;
    metrics = NULL;
    if (dump) {
        bool ok = fclose(dump) == 0 && !st.dump_failed && rc == TIDE_OK;
        dump = NULL;
        if (ok && rename(dump_tmp, dump_path) != 0)
            ok = false;
        if (!ok) {
            remove(dump_tmp);
            if (rc == TIDE_OK) {
                tide_error("--dump-logits: cannot write %s", dump_path);
                rc = TIDE_E_IO;
            }
        }
    }
    /* The block events hold back an unfinished UTF-8 sequence at the end. */
    if (st.stream && rc == TIDE_OK && res->text_len > st.printed) {
        fwrite(res->text + st.printed, 1, res->text_len - st.printed, stdout);
        st.printed = res->text_len;
    }
    if (st.stream && st.printed)
        printf("\n");
    if (rc != TIDE_OK)
        goto done;
    if (print_ids) {
        for (int64_t i = 0; i < res->n_ids; i++)
            printf("%s%d", i ? "," : "", res->ids[i]);
        printf("\n");
    } else if (!st.stream) {
        fwrite(res->text, 1, res->text_len, stdout);
        printf("\n");
    }
    if (logits_hash)
        printf("logits-fnv1a64 %016llx\n", (unsigned long long)st.hash);
    /* The text and its newline reach a file or pipe that stderr shares
     * before the summary below does (stdout is buffered there, stderr not). */
    fflush(stdout);
    struct tide_engine_info info = {.size = sizeof info};
    tide_engine_get_info(e, &info);
    char edits[48] = "";
    if (res->edits)
        snprintf(edits, sizeof edits, ", %lld edits", (long long)res->edits);
    tide_info("done: %lld tokens in %d blocks, %lld steps (%.2f tokens per step), %lld "
              "forwards%s, %.2f s (prefill %.2f s), %.2f tok/s%s",
              (long long)res->n_ids, res->blocks, (long long)res->steps,
              res->steps ? (double)res->n_ids / (double)res->steps : 0.0, (long long)res->forwards,
              edits, res->seconds, res->prefill_seconds,
              res->seconds > 0 ? (double)res->n_ids / res->seconds : 0.0,
              res->stopped ? ", stopped at end-of-text" : "");
    if (tide_log_get_level() >= TIDE_LOG_INFO)
        cli_print_offload_summary(&info, &res->offload, res->seconds, res->n_ids);
    if (res->unknown_ids)
        tide_warn("%lld generated ids have no text in %s/tokenizer.json (a synthetic checkpoint's "
                  "vocabulary is larger than its tokenizer)",
                  (long long)res->unknown_ids, info.model);
done:
    cli_progress_end(&st.pg);
    if (metrics)
        cli_output_close(metrics, metrics_path, false);
    tide_trace_writer_close(trace, false);
    if (dump) {
        fclose(dump);
        remove(dump_tmp);
    }
    if (rc == TIDE_E_INTERRUPTED)
        tide_warn("interrupted");
    tide_result_free(res);
    free(ids);
    free(file_text);
    tide_engine_close(e);
    cli_teardown(&c);
    return cli_exit_code(rc);
}
