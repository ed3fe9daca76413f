/* bench-wakeups: what a forward costs in thread wake-ups, single and batched.
 *
 * Opens an engine from a configuration (the public embedding API only, so
 * the same source builds against an older tide: bench/wakeups/run.sh builds
 * it against a baseline build and runs the two alternately), decodes a set
 * of prompts one request at a time (tide_engine_generate) and then as
 * batches (tide_engine_generate_batch), and reports for each mode the
 * process's voluntary and involuntary context switches (getrusage: every
 * thread of the process, ended ones included), the requests' passes (their
 * `forwards`), the model's forward calls (one per round of the engine loop;
 * API version 4, else "-") and the switches per forward call (per pass when
 * the calls are not known), with the wall time.
 *
 * usage: bench-wakeups [-c CONFIG] [--set S.K=V ...] [--prompts N]
 *                      [--batch 4] [--repeats R] [--label NAME]
 * One line per mode and repeat, tab-separated, after a header (run.sh
 * turns them into a table). Nothing is asserted: a benchmark, not a test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tide/engine.h"

static const char *const bw_prompts[] = {
    "Write a haiku about the tide.", "The tide comes in", "Once upon a time", "Name three rivers.",
    "Why is the sky blue?",          "def f(x):",         "1 2 3 4",          "Hello",
};
#define BW_N_PROMPTS ((int)(sizeof bw_prompts / sizeof bw_prompts[0]))

static double bw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct bw_sample {
    long vol, invol;
    double t;
};

static void bw_take(struct bw_sample *s)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    s->vol = ru.ru_nvcsw;
    s->invol = ru.ru_nivcsw;
    s->t = bw_now();
}

static void bw_usage(FILE *f)
{
    fprintf(f, "usage: bench-wakeups [-c CONFIG] [--set S.K=V ...] [--prompts N] [--batch B]\n"
               "                     [--repeats R] [--label NAME]\n");
}

/* One mode: the prompts one at a time (batch 0) or batch at a time. */
static int bw_mode(struct tide_engine *e, const char *label, int n, int batch, int rep)
{
    struct tide_request req[BW_N_PROMPTS];
    const struct tide_request *rp[BW_N_PROMPTS];
    struct tide_result *res[BW_N_PROMPTS] = {0};
    int status[BW_N_PROMPTS];
    for (int i = 0; i < n; i++) {
        tide_request_init(&req[i]);
        req[i].prompt = bw_prompts[i];
        rp[i] = &req[i];
    }
    struct bw_sample a, b;
#if TIDE_ENGINE_API_VERSION >= 4
    const uint64_t f0 = tide_engine_forwards(e);
#endif
    bw_take(&a);
    int rc = TIDE_OK;
    if (batch > 0) {
        rc = tide_engine_generate_batch(e, rp, n, batch, res, status);
    } else {
        for (int i = 0; i < n && rc == TIDE_OK; i++)
            status[i] = rc = tide_engine_generate(e, rp[i], &res[i]);
    }
    bw_take(&b);
    long long passes = 0, tokens = 0, calls = -1;
#if TIDE_ENGINE_API_VERSION >= 4
    calls = (long long)(tide_engine_forwards(e) - f0);
#endif
    for (int i = 0; i < n; i++) {
        if (rc == TIDE_OK && status[i] != TIDE_OK)
            rc = status[i];
        if (res[i]) {
            passes += res[i]->forwards;
            tokens += res[i]->n_ids;
        }
        tide_result_free(res[i]);
    }
    if (rc != TIDE_OK) {
        fprintf(stderr, "bench-wakeups: %s\n", tide_engine_error(e));
        return rc;
    }
    const long vol = b.vol - a.vol, invol = b.invol - a.invol;
    const double per = (double)vol / (double)(calls > 0 ? calls : passes);
    char mode[32];
    snprintf(mode, sizeof mode, batch > 0 ? "batch %d" : "single", batch);
    char calls_s[32] = "-";
    if (calls >= 0)
        snprintf(calls_s, sizeof calls_s, "%lld", calls);
    printf("%s\t%s\t%d\t%d\t%lld\t%s\t%lld\t%ld\t%ld\t%.2f%s\t%.3f\n", label, mode, rep, n, passes,
           calls_s, tokens, vol, invol, per, calls >= 0 ? "" : " (per pass)", b.t - a.t);
    fflush(stdout);
    return TIDE_OK;
}

int main(int argc, char **argv)
{
    const char *config = "config/llada2-tiny.ini", *label = "tide";
    const char *sets[64];
    int n_sets = 0, n = BW_N_PROMPTS, batch = 4, repeats = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool more = i + 1 < argc;
        if (!strcmp(a, "-c") && more)
            config = argv[++i];
        else if (!strcmp(a, "--set") && more && n_sets < 64)
            sets[n_sets++] = argv[++i];
        else if (!strcmp(a, "--prompts") && more)
            n = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && more)
            batch = atoi(argv[++i]);
        else if (!strcmp(a, "--repeats") && more)
            repeats = atoi(argv[++i]);
        else if (!strcmp(a, "--label") && more)
            label = argv[++i];
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bw_usage(stdout);
            return 0;
        } else {
            bw_usage(stderr);
            return 2;
        }
    }
    if (n < 1 || n > BW_N_PROMPTS || batch < 1 || repeats < 1) {
        fprintf(stderr, "bench-wakeups: --prompts 1..%d, --batch and --repeats >= 1\n",
                BW_N_PROMPTS);
        return 2;
    }
    const struct tide_engine_args args = {
        .size = sizeof args, .config_path = config, .sets = sets, .n_sets = n_sets};
    struct tide_engine *e;
    if (tide_engine_open(&args, &e) != TIDE_OK) {
        fprintf(stderr, "bench-wakeups: %s\n", tide_engine_error(NULL));
        return 1;
    }
    printf("build\tmode\trepeat\trequests\tpasses\tforwards\ttokens\tvoluntary\tinvoluntary\t"
           "per forward\tseconds\n");
    int rc = bw_mode(e, label, n, 0, -1); /* warm-up: pages in, threads up */
    for (int r = 0; rc == TIDE_OK && r < repeats; r++) {
        rc = bw_mode(e, label, n, 0, r);
        if (rc == TIDE_OK)
            rc = bw_mode(e, label, n, batch, r);
    }
    tide_engine_close(e);
    return rc == TIDE_OK ? 0 : 1;
}
