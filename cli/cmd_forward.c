/* `tide forward`: the logits of a forward pass over given ids, for checking
 * the engine against an independent reference (tests/reference). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "engine.h"
#include "tide/log.h"
#include "tide/status.h"
#include "tide/trace_write.h"

static void forward_usage(FILE *f)
{
    fprintf(f, "usage: tide forward [-c FILE] [--set ...] --ids 1,2,3 --out FILE [--chunk N]\n"
               "                    [--force]\n\n"
               "Runs the model over the ids at positions 0..n-1 and writes the logits as raw\n"
               "little-endian float32 [n, vocab_size] to FILE.\n"
               "  --chunk 0   one forward over all ids (the full-recompute path; default)\n"
               "  --chunk N   forwards of N positions each, attending to the KV cache written\n"
               "              by the earlier ones (the cached path; use the block length)\n"
               "  --trace T   also record the routing of every MoE layer to the trace T\n"
               "  --force     replace FILE (and T) if they exist\n");
}

int cmd_forward(int argc, char **argv)
{
    struct cli_ctx c = {0};
    const char *ids_text = NULL, *out_path = NULL, *trace_path = NULL;
    long chunk = 0;
    bool force = false;
    for (int i = 1; i < argc; i++) {
        int r = cli_common_arg(&c, argc, argv, &i);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            forward_usage(stdout);
            return CLI_EXIT_OK;
        } else if (!strcmp(argv[i], "--ids") && i + 1 < argc) {
            ids_text = argv[++i];
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out_path = argv[++i];
        } else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) {
            char *end;
            chunk = strtol(argv[++i], &end, 10);
            if (*end || chunk < 0) {
                fprintf(stderr, "tide forward: --chunk takes a number >= 0\n");
                return CLI_EXIT_USAGE;
            }
        } else if (!strcmp(argv[i], "--trace") && i + 1 < argc) {
            trace_path = argv[++i];
        } else if (!strcmp(argv[i], "--force")) {
            force = true;
        } else {
            return cli_unexpected("forward", argv[i], forward_usage);
        }
    }
    if (!ids_text || !out_path) {
        forward_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    struct stat st;
    if (!force && stat(out_path, &st) == 0) {
        tide_error("tide forward: %s exists; pass --force to replace it", out_path);
        return CLI_EXIT_USAGE;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    float *logits = NULL;
    struct tide_engine *e = NULL;
    struct tide_trace_writer *trace = NULL;
    struct tide_trace_sink sink;
    int rc = cli_setup(&c);
    if (rc == TIDE_OK)
        rc = cli_parse_ids(ids_text, "--ids", &ids, &n);
    if (rc == TIDE_OK)
        rc = cli_engine_open(&c, &e);
    if (rc != TIDE_OK)
        goto done;
    const int64_t step = chunk ? chunk : (int64_t)n;
    if ((rc = e->mops->reserve_slots(e->model, 1, (int64_t)n,
                                     step < (int64_t)n ? step : (int64_t)n)))
        goto done;
    if (trace_path) {
        if ((rc = cli_trace_open(e, trace_path, force, &trace, &sink)) != TIDE_OK ||
            (rc = tide_trace_prompt(trace, 0, (uint32_t)n)) != TIDE_OK)
            goto done;
        tide_moe_set_trace(e->moe, &sink);
    }
    const int V = e->mops->info(e->model)->vocab_size;
    logits = malloc(sizeof *logits * n * (size_t)V);
    if (!logits) {
        rc = TIDE_E_NOMEM;
        goto done;
    }
    for (int64_t p = 0; p < (int64_t)n && rc == TIDE_OK; p += step) {
        int64_t len = (int64_t)n - p < step ? (int64_t)n - p : step;
        rc = tide_model_forward1(e->mops, e->model, ids + p, len, p, NULL, len,
                                 logits + (size_t)p * V);
    }
    if (trace) {
        tide_moe_set_trace(e->moe, NULL);
        int trc = tide_trace_writer_close(trace, rc == TIDE_OK);
        trace = NULL;
        if (rc == TIDE_OK)
            rc = trc;
    }
    if (rc != TIDE_OK)
        goto done;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(logits, sizeof *logits, n * (size_t)V, f) != n * (size_t)V || fclose(f) != 0 ||
        rename(tmp, out_path) != 0) {
        tide_error("tide forward: cannot write %s", out_path);
        remove(tmp);
        rc = TIDE_E_IO;
    }
done:
    if (trace) {
        tide_moe_set_trace(e->moe, NULL);
        tide_trace_writer_close(trace, false);
    }
    free(logits);
    free(ids);
    tide_engine_close(e);
    cli_teardown(&c);
    return cli_exit_code(rc);
}
