/* `tide run`: generate from a prompt, streaming committed text block by
 * block, with progress on stderr and a summary at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "engine.h"
#include "tide/log.h"
#include "tide/status.h"
#include "tide/trace_write.h"

static void run_usage(FILE *f)
{
    fprintf(f, "usage: tide run [-c FILE] [--set section.key=value ...]\n"
               "                (-p TEXT | -f FILE | --ids 1,2,3) [--chat] [--print-ids]\n\n"
               "Generates text with block diffusion and prints it block by block as blocks are\n"
               "committed. Progress (block, step, tokens/s) goes to stderr, then a summary:\n"
               "tokens, steps, tokens per forward, time.\n\n"
               "  -p, --prompt TEXT   the prompt\n"
               "  -f, --prompt-file F read the prompt from a file\n"
               "      --ids LIST      give the prompt as token ids (no tokenizer)\n"
               "      --chat          wrap the prompt in the model's chat template\n"
               "                      (same as --set generation.chat=true)\n"
               "      --print-ids     print the generated token ids instead of text\n"
               "      --logits-hash   also print an FNV-1a hash of every logit the decoding\n"
               "                      saw (bit-exactness checks across policies)\n"
               "      --dump-logits F write each step's block logits to F (verification:\n"
               "                      per step int32 {block, step, rows, vocab}, then\n"
               "                      float32 [rows, vocab]); refuses to replace F\n"
               "  -c, --config FILE   configuration (default: built-in defaults; see\n"
               "                      `tide config doc`); --set overrides one value\n\n"
               "Sampling, lengths and the KV-cache debug switch live in [generation];\n"
               "[model] path names the checkpoint, and [model] create = tiny generates a\n"
               "synthetic one there on first use.\n\n"
               "examples:\n"
               "  tide run -c config/llada2-tiny.ini -p \"Write a haiku about tides\"\n"
               "  tide run -c config/llada2-tiny.ini --chat -p \"Hello\" --set "
               "generation.gen_length=64\n");
}

struct run_state {
    const struct tide_engine *e;
    bool stream;   /* print text as blocks complete */
    bool progress; /* progress line on stderr */
    bool tty;
    size_t printed;    /* bytes of decoded text already printed */
    int64_t committed; /* tokens committed so far */
    double t0;
    int n_blocks;  /* blocks to decode */
    bool hashing;  /* --logits-hash */
    uint64_t hash; /* FNV-1a over the bytes of every step's logits */
    FILE *dump;    /* --dump-logits, or NULL */
    bool dump_failed;
};

static void run_step_logits(void *user, int64_t block, int step, const float *logits, int rows,
                            int vocab)
{
    struct run_state *s = user;
    if (s->hashing) {
        const unsigned char *p = (const unsigned char *)logits;
        const size_t bytes = (size_t)rows * (size_t)vocab * sizeof *logits;
        uint64_t h = s->hash;
        for (size_t i = 0; i < bytes; i++)
            h = (h ^ p[i]) * 0x100000001b3ull;
        s->hash = h;
    }
    if (s->dump) {
        const int32_t head[4] = {(int32_t)block, step, rows, vocab};
        if (fwrite(head, sizeof head, 1, s->dump) != 1 ||
            fwrite(logits, sizeof *logits, (size_t)rows * vocab, s->dump) != (size_t)rows * vocab)
            s->dump_failed = true;
    }
}

static double run_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Decode ids that the tokenizer knows; synthetic checkpoints may have a
 * vocabulary larger than their tokenizer, and such ids have no text. */
static int run_decode(const struct tide_engine *e, const int32_t *ids, int64_t n, char **text,
                      size_t *len, int64_t *unknown)
{
    int32_t *known = malloc(sizeof *known * (size_t)(n ? n : 1));
    if (!known)
        return TIDE_E_NOMEM;
    int64_t k = 0, u = 0;
    const int32_t size = tide_tokenizer_size(e->tok);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < size && tide_tokenizer_piece(e->tok, ids[i]))
            known[k++] = ids[i];
        else
            u++;
    }
    int rc = tide_tokenizer_decode(e->tok, known, (size_t)k, text, len);
    free(known);
    if (unknown)
        *unknown = u;
    return rc;
}

static void run_step_end(void *user, int block, int step, int committed, int remaining)
{
    struct run_state *s = user;
    s->committed += committed;
    if (!s->progress || !s->tty)
        return;
    double dt = run_now() - s->t0;
    fprintf(stderr, "\r\033[K[block %d/%d step %d] %lld tokens, %.1f tok/s, %d masks left",
            block + 1, s->n_blocks, step + 1, (long long)s->committed,
            dt > 0 ? (double)s->committed / dt : 0.0, remaining);
    fflush(stderr);
}

static void run_block_end(void *user, int block, const int32_t *gen, int64_t n)
{
    struct run_state *s = user;
    if (s->progress) {
        double dt = run_now() - s->t0;
        if (s->tty)
            fprintf(stderr, "\r\033[K");
        else
            fprintf(stderr, "[block %d/%d] %lld tokens, %.1f tok/s\n", block + 1, s->n_blocks,
                    (long long)s->committed, dt > 0 ? (double)s->committed / dt : 0.0);
    }
    if (!s->stream)
        return;
    char *text;
    size_t len;
    if (run_decode(s->e, gen, n, &text, &len, NULL) != TIDE_OK)
        return;
    if (len > s->printed) {
        fwrite(text + s->printed, 1, len - s->printed, stdout);
        fflush(stdout);
        s->printed = len;
    }
    free(text);
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
            fprintf(stderr, "tide run: unexpected argument '%s'\n\n", a);
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
    struct tide_gen_result res = {0};
    FILE *metrics = NULL;
    const char *metrics_path = NULL;
    struct tide_trace_writer *trace = NULL;
    struct tide_trace_sink trace_sink;
    int rc = cli_setup(&c);
    if (rc != TIDE_OK)
        goto done;
    if (prompt_file) {
        size_t len;
        if ((rc = cli_read_file(prompt_file, &file_text, &len)) != TIDE_OK)
            goto done;
        prompt = file_text;
    }
    struct tide_gen_params gp;
    tide_engine_gen_params(c.cfg, &gp);
    const struct tide_opts *go = tide_config_section(c.cfg, "generation");
    const struct tide_opts *oo = tide_config_section(c.cfg, "output");
    chat = chat || tide_opts_bool(go, "chat");
    if ((rc = cli_engine_open(&c, &e)) != TIDE_OK)
        goto done;
    if (ids_text)
        rc = cli_parse_ids(ids_text, "--ids", &ids, &n_ids);
    else
        rc = tide_engine_encode(e, prompt, chat, &ids, &n_ids);
    if (rc != TIDE_OK || (rc = tide_engine_reserve(e, (int64_t)n_ids, &gp)) != TIDE_OK)
        goto done;
    cli_catch_interrupt();
    if ((rc = cli_output_open(oo, "metrics", &metrics, &metrics_path)) != TIDE_OK)
        goto done;
    if (*tide_opts_str(oo, "trace") &&
        (rc = cli_trace_open(e, &gp, tide_opts_str(oo, "trace"), tide_opts_bool(oo, "overwrite"),
                             &trace, &trace_sink)) != TIDE_OK)
        goto done;
    FILE *dump = NULL;
    char dump_tmp[4200];
    if (dump_path) {
        if (access(dump_path, F_OK) == 0) {
            tide_error("--dump-logits %s: the file exists; refusing to replace it", dump_path);
            rc = TIDE_E_CONFIG;
            goto done;
        }
        snprintf(dump_tmp, sizeof dump_tmp, "%s.tmp", dump_path);
        if (!(dump = fopen(dump_tmp, "wb"))) {
            tide_error("--dump-logits: cannot create %s", dump_tmp);
            rc = TIDE_E_IO;
            goto done;
        }
    }
    struct run_state st = {
        .hashing = logits_hash,
        .hash = 0xcbf29ce484222325ull,
        .dump = dump,
        .e = e,
        .stream = tide_opts_bool(oo, "stream") && !print_ids,
        .progress = tide_opts_bool(oo, "progress") && tide_log_get_level() >= TIDE_LOG_INFO,
        .tty = isatty(STDERR_FILENO),
        .t0 = run_now(),
        .n_blocks = (int)(tide_gen_ctx((int64_t)n_ids, &gp) / gp.block - (int64_t)n_ids / gp.block),
    };
    const struct tide_gen_hooks hooks = {
        .user = &st,
        .step_end = run_step_end,
        .step_logits = run_step_logits,
        .block_end = run_block_end,
    };
    tide_info("prompt: %zu tokens; generating up to %lld tokens in blocks of %d (%d steps, "
              "threshold %g%s)",
              n_ids, (long long)gp.gen_length, gp.block, gp.steps, gp.threshold,
              gp.recompute ? ", full recompute" : "");
    struct tide_engine_outputs outs = {.metrics = metrics, .trace = trace ? &trace_sink : NULL};
    rc = tide_engine_generate(e, &gp, ids, (int64_t)n_ids, &hooks, &outs, &res);
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
    if (st.stream && st.printed)
        printf("\n");
    if (rc != TIDE_OK)
        goto done;
    if (print_ids) {
        for (int64_t i = 0; i < res.n; i++)
            printf("%s%d", i ? "," : "", res.ids[i]);
        printf("\n");
    } else if (!st.stream) {
        char *text;
        size_t len;
        if (run_decode(e, res.ids, res.n, &text, &len, NULL) == TIDE_OK) {
            fwrite(text, 1, len, stdout);
            printf("\n");
            free(text);
        }
    }
    if (logits_hash)
        printf("logits-fnv1a64 %016llx\n", (unsigned long long)st.hash);
    int64_t unknown = 0;
    char *text = NULL;
    size_t len;
    if (run_decode(e, res.ids, res.n, &text, &len, &unknown) == TIDE_OK)
        free(text);
    struct tide_moe_counters tot;
    tide_moe_totals(e->moe, &tot);
    tide_info("done: %lld tokens in %d blocks, %lld steps (%.2f tokens per step), %lld "
              "forwards, %.2f s (prefill %.2f s), %.2f tok/s%s",
              (long long)res.n, res.blocks, (long long)res.steps,
              res.steps ? (double)res.n / (double)res.steps : 0.0, (long long)res.forwards,
              res.seconds, res.prefill_seconds, res.seconds > 0 ? (double)res.n / res.seconds : 0.0,
              res.stopped ? ", stopped at end-of-text" : "");
    if (tide_log_get_level() >= TIDE_LOG_INFO)
        cli_print_offload_summary(e, &tot, res.seconds, res.n);
    if (unknown)
        tide_warn("%lld generated ids have no text in %s/tokenizer.json (a synthetic checkpoint's "
                  "vocabulary is larger than its tokenizer)",
                  (long long)unknown, e->model_dir);
done:
    if (metrics)
        cli_output_close(metrics, metrics_path, false);
    tide_trace_writer_close(trace, false);
    if (rc == TIDE_E_INTERRUPTED)
        tide_warn("interrupted");
    free(res.ids);
    free(ids);
    free(file_text);
    tide_engine_close(e);
    cli_teardown(&c);
    return cli_exit_code(rc);
}
