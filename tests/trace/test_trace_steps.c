/* Open-ended steps per block: traces whose blocks run different numbers of
 * steps, some longer than 32 (as decoder-llada21 writes them), written with
 * the trace writer. Checks the simulator's tape (steps of every block, the
 * distribution), `tide trace info` (the decoder and its settings, min /
 * median / mean / max, the histogram, first blocks against the others) and
 * `tide sim` (the default intervals reach the longest block recorded, capped
 * at 64 with a note; interval = auto considers intervals up to the decoder's
 * bound). argv[1] is the tide binary. */
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sim.h"
#include "tide/profile.h"
#include "tide/status.h"
#include "tide/trace_write.h"

static const char *tide_bin;
static char dir[] = "/tmp/tide-trace-steps-XXXXXX";

/* A path in the scratch folder (eight rotating buffers). */
static const char *tpath(const char *name)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A trace of 2 MoE layers x 8 experts, top-2, blocks of 32 tokens (4 routed
 * per step), header steps `steps`. prompts[p] lists the steps of each
 * block of prompt p, ending with 0. */
static int write_trace(const char *path, const char *decoder, const char *settings, uint32_t steps,
                       const int *const *prompts, int n_prompts)
{
    const struct tide_trace_header h = {
        .n_layers = 2,
        .n_experts = 8,
        .top_k = 2,
        .hidden = 64,
        .inter = 32,
        .expert_bytes = tide_expert_bytes(64, 32),
        .block_length = 32,
        .steps = steps,
        .threshold = 0.7,
        .model = "unit-test",
        .decoder = decoder,
        .decoder_settings = settings,
    };
    struct tide_trace_writer *w;
    int rc = tide_trace_writer_open(path, false, true, &h, &w);
    if (rc != TIDE_OK)
        return rc;
    int32_t ids[8];
    for (int p = 0; p < n_prompts && rc == TIDE_OK; p++) {
        rc = tide_trace_prompt(w, (uint32_t)p, 5);
        for (int b = 0; prompts[p][b] && rc == TIDE_OK; b++) {
            rc = tide_trace_block(w, b, b == 0);
            for (int s = 0; s < prompts[p][b] && rc == TIDE_OK; s++) {
                rc = tide_trace_step(w, s);
                for (uint32_t l = 0; l < 2 && rc == TIDE_OK; l++) {
                    for (int i = 0; i < 8; i++)
                        ids[i] = (i % 2) * 4 + (s + b + (int)l + i / 2) % 4;
                    rc = tide_trace_route(w, TIDE_TRACE_STEP, l, 4, ids);
                }
            }
            for (uint32_t l = 0; l < 2 && rc == TIDE_OK; l++)
                rc = tide_trace_route(w, TIDE_TRACE_KV, l, 4, ids);
        }
    }
    int rc2 = tide_trace_writer_close(w, rc == TIDE_OK);
    return rc != TIDE_OK ? rc : rc2;
}

/* A file's contents (NUL-terminated, caller frees), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *b = realloc(buf, cap = 2 * cap + 4096 + 1);
            if (!b)
                break;
            buf = b;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (!k)
            break;
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    return buf;
}

/* Run `tide ARGS`; *out and *err receive stdout and stderr (free them).
 * Returns the exit status, or -1. */
static int run(const char *args, char **out, char **err)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", tide_bin, args, tpath("out.txt"),
             tpath("err.txt"));
    int st = system(cmd);
    *out = slurp(tpath("out.txt"));
    *err = slurp(tpath("err.txt"));
    if (!*out || !*err || !WIFEXITED(st) || WEXITSTATUS(st))
        fprintf(stderr, "tide %s: status %d\n%s%s", args, st, *out ? *out : "", *err ? *err : "");
    return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Blocks of 40, 12, 45 steps (prompt 0) and 25, 33, 12 (prompt 1): sorted
 * 12 12 25 33 40 45, so min 12, median 29, mean 27.83, max 45; the first
 * blocks 40 and 25; the others 12 12 33 45. */
static const int p0[] = {40, 12, 45, 0}, p1[] = {25, 33, 12, 0};
static const int *const llada21_like[] = {p0, p1};

static void test_tape(void)
{
    const char *path = tpath("l21.trc");
    CHECK_EQ_INT(write_trace(path, "llada21", "mode=quality max_post_steps=16 max_block_steps=80",
                             80, llada21_like, 2),
                 TIDE_OK);
    struct tide_sim_trace *t;
    CHECK_EQ_INT(tide_sim_trace_load(path, &t), TIDE_OK);
    if (!t)
        return;
    CHECK_EQ_INT(t->blocks, 6);
    CHECK_EQ_INT(t->steps, 167);
    CHECK_EQ_INT(t->max_block_steps, 45);
    CHECK(!strcmp(t->h.decoder, "llada21"));
    CHECK(!strcmp(t->h.decoder_settings, "mode=quality max_post_steps=16 max_block_steps=80"));
    const uint32_t want[6] = {40, 12, 45, 25, 33, 12};
    for (int b = 0; b < 6 && t->blocks == 6; b++) {
        CHECK_EQ_INT(t->block_steps[b], want[b]);
        CHECK_EQ_INT(t->block_first[b], b % 3 == 0);
    }
    uint64_t hist[46];
    struct tide_sim_steps d;
    CHECK_EQ_INT(tide_sim_steps_dist(t, TIDE_SIM_BLOCKS_ALL, &d, hist), TIDE_OK);
    CHECK_EQ_INT(d.blocks, 6);
    CHECK_EQ_INT(d.min, 12);
    CHECK_EQ_INT(d.max, 45);
    CHECK_NEAR(d.median, 29.0, 0);
    CHECK_NEAR(d.mean, 167.0 / 6, 1e-12);
    CHECK_EQ_INT(hist[12], 2);
    CHECK_EQ_INT(hist[45], 1);
    CHECK_EQ_INT(hist[44], 0);
    CHECK_EQ_INT(tide_sim_steps_dist(t, TIDE_SIM_BLOCKS_FIRST, &d, NULL), TIDE_OK);
    CHECK_EQ_INT(d.blocks, 2);
    CHECK_NEAR(d.median, 32.5, 0);
    CHECK_EQ_INT(tide_sim_steps_dist(t, TIDE_SIM_BLOCKS_OTHER, &d, NULL), TIDE_OK);
    CHECK_EQ_INT(d.blocks, 4);
    CHECK_EQ_INT(d.min, 12);
    CHECK_NEAR(d.median, 22.5, 0);
    CHECK_NEAR(d.mean, 25.5, 1e-12);
    char line[160];
    tide_sim_steps_str(&d, line, sizeof line);
    CHECK_CONTAINS(line, "4 blocks, min 12, median 22.5, mean 25.50, max 45");
    tide_sim_trace_free(t);
}

static void test_info(void)
{
    char *out, *err, args[512];
    snprintf(args, sizeof args, "trace info '%s'", tpath("l21.trc"));
    CHECK_EQ_INT(run(args, &out, &err), 0);
    if (out) {
        CHECK_CONTAINS(out, "generation: block 32, at most 80 steps, threshold 0.7\n");
        CHECK_CONTAINS(out, "prompts 2, blocks 6, denoising steps 167 (27.83 per block)");
        CHECK_CONTAINS(out,
                       "decoder: llada21 (mode=quality max_post_steps=16 max_block_steps=80)\n");
        CHECK_CONTAINS(out, "steps per block (step records): 6 blocks, min 12, median 29, mean "
                            "27.83, max 45\n");
        CHECK_CONTAINS(out, "  histogram (steps:blocks): 12:2 25:1 33:1 40:1 45:1\n");
        CHECK_CONTAINS(out, "  first generated block of each prompt: 2 blocks, min 25, median "
                            "32.5, mean 32.50, max 40\n");
        CHECK_CONTAINS(out, "  later blocks: 4 blocks, min 12, median 22.5, mean 25.50, max 45\n");
    }
    free(out);
    free(err);

    /* No decoder recorded (synthetic traces, older files); 30 lengths are
     * binned in ranges of 2 steps. */
    int lens[31];
    for (int i = 0; i < 30; i++)
        lens[i] = i + 1;
    lens[30] = 0;
    const int *const one[] = {lens};
    CHECK_EQ_INT(write_trace(tpath("many.trc"), NULL, NULL, 32, one, 1), TIDE_OK);
    snprintf(args, sizeof args, "trace info '%s'", tpath("many.trc"));
    CHECK_EQ_INT(run(args, &out, &err), 0);
    if (out) {
        CHECK_CONTAINS(out, "decoder: not recorded\n");
        CHECK_CONTAINS(out, "steps per block (step records): 30 blocks, min 1, median 15.5, mean "
                            "15.50, max 30\n");
        CHECK_CONTAINS(out, "  histogram (steps:blocks): 1-2:2 3-4:2 5-6:2 7-8:2 9-10:2 11-12:2 "
                            "13-14:2 15-16:2 17-18:2 19-20:2 21-22:2 23-24:2 25-26:2 27-28:2 "
                            "29-30:2\n");
        /* One prompt: its first block against the others. */
        CHECK_CONTAINS(out, "  first generated block of each prompt: 1 block, min 1, median 1, "
                            "mean 1.00, max 1\n");
    }
    free(out);
    free(err);
}

/* The policy-tide intervals of a `tide sim` CSV: the number of rows and the
 * largest interval. */
static void csv_intervals(const char *csv, int *rows, int *top)
{
    *rows = *top = 0;
    char *text = slurp(csv);
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (!strncmp(line, "policy-tide,", 12)) {
            int iv = atoi(line + 12);
            (*rows)++;
            *top = iv > *top ? iv : *top;
        }
    free(text);
}

static void test_sim_intervals(void)
{
    char *out, *err, args[1024];
    int rows, top;
    /* Header steps 80 (the decoder's bound), longest block 45: 1..45. */
    snprintf(args, sizeof args,
             "sim --trace '%s' --policy tide --budget 2 --no-hindsight --csv '%s' --force",
             tpath("l21.trc"), tpath("a.csv"));
    CHECK_EQ_INT(run(args, &out, &err), 0);
    csv_intervals(tpath("a.csv"), &rows, &top);
    CHECK_EQ_INT(rows, 45);
    CHECK_EQ_INT(top, 45);
    if (out) {
        CHECK_CONTAINS(out, "steps per block replayed: 6 blocks, min 12, median 29, mean 27.83, "
                            "max 45 (decoder llada21)\n");
        CHECK_CONTAINS(out, "policy-tide intervals: 1-45 by default (1 to the longest block, 45 "
                            "steps)\n");
    }
    free(out);
    free(err);

    /* Header steps 32, but a block of 70 steps: 1..64, and the cap is said. */
    static const int q[] = {20, 70, 0};
    const int *const long_one[] = {q};
    CHECK_EQ_INT(write_trace(tpath("long.trc"), NULL, NULL, 32, long_one, 1), TIDE_OK);
    snprintf(args, sizeof args,
             "sim --trace '%s' --policy tide --budget 2 --no-hindsight --csv '%s' --force",
             tpath("long.trc"), tpath("b.csv"));
    CHECK_EQ_INT(run(args, &out, &err), 0);
    csv_intervals(tpath("b.csv"), &rows, &top);
    CHECK_EQ_INT(rows, 64);
    CHECK_EQ_INT(top, 64);
    if (out) {
        CHECK_CONTAINS(out, "steps per block replayed: 2 blocks, min 20, median 45, mean 45.00, "
                            "max 70 (decoder not recorded)\n");
        CHECK_CONTAINS(out, "policy-tide intervals: 1-64 by default (1 to the longest block, 70 "
                            "steps; capped: name longer intervals with --interval)\n");
    }
    free(out);
    free(err);

    /* interval = auto through tide sim: the policy replays the recorded
     * blocks, and the intervals it weighs reach the decoder's bound. */
    FILE *f = fopen(tpath("p.ini"), "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs("[profile]\nname = tiny\n[transfer]\nh2d_gbps = 1\nd2h_gbps = 4\nlatency_us = 2\n"
          "overlap = false\n[expert]\nhidden = 64\ninter = 32\n[device]\nrows = 1, 32\n"
          "us = 1, 2\n[host]\nrows = 1, 32\nus = 10, 40\n",
          f);
    fclose(f);
    snprintf(args, sizeof args,
             "sim --trace '%s' --profile '%s' --policy tide --budget 2 --interval auto,45 "
             "--no-hindsight",
             tpath("l21.trc"), tpath("p.ini"));
    CHECK_EQ_INT(run(args, &out, &err), 0);
    if (err) {
        CHECK_CONTAINS(err, "(block 1, 1 block of history, of 40 steps; intervals 1..80)");
        CHECK_CONTAINS(err, "of 40,12,45,25 steps; intervals 1..80)");
    }
    free(out);
    free(err);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_trace_steps PATH_TO_TIDE\n");
        return 2;
    }
    tide_bin = argv[1];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_tape);
    TEST_RUN(test_info);
    TEST_RUN(test_sim_intervals);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    TEST_DONE();
}
