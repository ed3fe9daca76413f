/* The smallest program embedding libtide: open an engine from a config file
 * and overrides, stream a generation block by block, print the counters.
 *
 *   embed CONFIG PROMPT [section.key=value ...]
 *
 * Exit status: 0 ok, 1 the engine failed (its messages on stderr). */
#include <stdio.h>
#include <string.h>

#include "tide/engine.h"

static int on_block(void *user, const struct tide_block_event *ev)
{
    size_t *printed = user;
    fwrite(ev->delta, 1, ev->delta_len, stdout);
    fflush(stdout);
    *printed += ev->delta_len;
    return 0; /* nonzero would cancel the generation */
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s CONFIG PROMPT [section.key=value ...]\n", argv[0]);
        return 2;
    }
    const struct tide_engine_args args = {
        .size = sizeof args,
        .config_path = argv[1],
        .sets = (const char *const *)argv + 3,
        .n_sets = argc - 3,
    };
    struct tide_engine *e;
    if (tide_engine_open(&args, &e) != TIDE_OK) {
        fprintf(stderr, "embed: cannot open the engine:\n%s\n", tide_engine_error(NULL));
        return 1;
    }
    struct tide_request req;
    tide_request_init(&req);
    size_t printed = 0;
    req.prompt = argv[2];
    req.user = &printed;
    req.on_block = on_block;
    struct tide_result *res;
    int rc = tide_engine_generate(e, &req, &res);
    if (rc != TIDE_OK) {
        fprintf(stderr, "embed: %s: %s\n", tide_status_str(rc), tide_engine_error(e));
    } else {
        /* The events hold back an unfinished UTF-8 sequence at the very end. */
        fwrite(res->text + printed, 1, res->text_len - printed, stdout);
        printf("\n--\nprompt %lld tokens, generated %lld in %d blocks, %lld steps, %lld forwards, "
               "%.2f s%s\n",
               (long long)res->prompt_tokens, (long long)res->n_ids, res->blocks,
               (long long)res->steps, (long long)res->forwards, res->seconds,
               res->stopped ? ", stopped at end-of-text" : "");
        printf("offload: hit rate %.4f, %llu promotions, %.6f GB moved\n", res->offload.hit_rate,
               (unsigned long long)res->offload.promotions,
               (double)(res->offload.weight_bytes + res->offload.act_bytes) / 1e9);
        for (int64_t i = 0; i < res->n_ids; i++)
            printf("%s%d", i ? "," : "ids: ", res->ids[i]);
        printf("\n");
    }
    tide_result_free(res);
    tide_engine_close(e);
    return rc == TIDE_OK ? 0 : 1;
}
