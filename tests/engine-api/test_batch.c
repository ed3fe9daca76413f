/* Batched decoding through the public API (tide_engine_generate_batch,
 * tide_engine_run_batch) on a generated tiny checkpoint, CPU backend:
 *  - batch invariance: every request's ids and the hash of every logit row
 *    its decoder read are bit-identical to running it alone, for batch sizes
 *    1 to 8, with mixed prompt lengths and mixed settings (steps, threshold,
 *    gen_length, sampling with seeds), requests joining as others leave;
 *  - placement under batching: with experts offloaded (LRU and TIDE policies,
 *    both roles on the CPU backend) every request still gets the ids of the
 *    no-offload engine alone;
 *  - a bad request in a batch fails alone, naming its key; a callback's
 *    cancel stops only its own request; bad arguments are refused.
 * Usage: test_batch PLUGIN_DIR. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tide/engine.h"
#include "tide/log.h"
#include "tide/status.h"

#define NREQ 8

static const char *plugin_dir;
static char work[] = "/tmp/tide-batch-XXXXXX";
static char config_text[1024];

static int32_t prompts[NREQ][48];
static const int prompt_len[NREQ] = {5, 17, 40, 3, 29, 11, 33, 8};

/* What a request produced: its ids and a hash of every row it read. */
struct outcome {
    uint64_t hash;
    int64_t rows;
    int32_t ids[256];
    int64_t n;
    int status;
};

static void hash_bytes(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ b[i]) * 1099511628211ull;
}

static void on_rows(void *user, const struct tide_rows_event *ev)
{
    struct outcome *o = user;
    hash_bytes(&o->hash, &ev->block, sizeof ev->block);
    hash_bytes(&o->hash, &ev->step, sizeof ev->step);
    for (int i = 0; i < ev->n; i++) {
        hash_bytes(&o->hash, &ev->pos[i], sizeof ev->pos[i]);
        hash_bytes(&o->hash, ev->rows[i], sizeof(float) * (size_t)ev->vocab);
    }
    o->rows += ev->n;
}

/* Request i: its prompt and its own settings. */
static void make_request(int i, struct tide_request *r, struct outcome *o)
{
    tide_request_init(r);
    r->prompt_ids = prompts[i];
    r->n_prompt_ids = (size_t)prompt_len[i];
    r->chat = 0;
    r->gen_length = i % 3 == 0 ? 32 : 64;
    r->steps = i % 2 ? 16 : 32;
    r->threshold = i % 4 == 1 ? 0.7 : 0.95;
    if (i % 4 == 3) {
        r->temperature = 0.8;
        r->top_k = 20;
        r->seed = 100 + i;
    }
    r->user = o;
    r->on_rows = on_rows;
    memset(o, 0, sizeof *o);
    o->hash = 1469598103934665603ull;
}

static void keep(struct outcome *o, int status, struct tide_result *res)
{
    o->status = status;
    if (res) {
        o->n = res->n_ids < 256 ? res->n_ids : 256;
        memcpy(o->ids, res->ids, sizeof *o->ids * (size_t)o->n);
    }
    tide_result_free(res);
}

static int open_engine(const char *const *sets, int n_sets, struct tide_engine **e)
{
    const struct tide_engine_args a = {
        .size = sizeof a,
        .config_text = config_text,
        .sets = sets,
        .n_sets = n_sets,
        .plugin_path = plugin_dir,
    };
    int rc = tide_engine_open(&a, e);
    if (rc != TIDE_OK)
        fprintf(stderr, "%s\n", tide_engine_error(NULL));
    return rc;
}

static struct outcome alone[NREQ];

/* Compare a batch's outcomes with the requests alone; ids_only for runs
 * whose placement differs (their logits may differ in the last bits). */
static int compare(const struct outcome *got, bool ids_only, const char *what)
{
    int bad = 0;
    for (int i = 0; i < NREQ; i++) {
        const bool ok =
            got[i].status == TIDE_OK && got[i].n == alone[i].n &&
            !memcmp(got[i].ids, alone[i].ids, sizeof *got[i].ids * (size_t)got[i].n) &&
            (ids_only || (got[i].hash == alone[i].hash && got[i].rows == alone[i].rows));
        if (!ok) {
            fprintf(stderr,
                    "%s: request %d differs from alone (status %d, %lld ids vs %lld, rows %lld vs "
                    "%lld, hash %016llx vs %016llx)\n",
                    what, i, got[i].status, (long long)got[i].n, (long long)alone[i].n,
                    (long long)got[i].rows, (long long)alone[i].rows,
                    (unsigned long long)got[i].hash, (unsigned long long)alone[i].hash);
            bad++;
        }
    }
    return bad;
}

static int run_batch(struct tide_engine *e, int max_batch, struct outcome *got)
{
    struct tide_request req[NREQ];
    const struct tide_request *reqs[NREQ];
    struct tide_result *res[NREQ];
    int status[NREQ];
    for (int i = 0; i < NREQ; i++) {
        make_request(i, &req[i], &got[i]);
        reqs[i] = &req[i];
    }
    int rc = tide_engine_generate_batch(e, reqs, NREQ, max_batch, res, status);
    for (int i = 0; i < NREQ; i++)
        keep(&got[i], status[i], res[i]);
    return rc;
}

static void test_invariance(void)
{
    struct tide_engine *e = NULL;
    CHECK_EQ_INT(open_engine(NULL, 0, &e), TIDE_OK);
    if (!e)
        return;
    for (int i = 0; i < NREQ; i++) {
        struct tide_request r;
        struct tide_result *res = NULL;
        make_request(i, &r, &alone[i]);
        const int rc = tide_engine_generate(e, &r, &res);
        keep(&alone[i], rc, res);
        CHECK_EQ_INT(alone[i].status, TIDE_OK);
        CHECK(alone[i].n > 0 && alone[i].rows > 0);
    }
    static const int sizes[] = {1, 2, 3, 5, 8};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        struct outcome got[NREQ];
        char what[32];
        snprintf(what, sizeof what, "batch of %d", sizes[k]);
        CHECK_EQ_INT(run_batch(e, sizes[k], got), TIDE_OK);
        CHECK_EQ_INT(compare(got, false, what), 0);
    }
    /* The engine's counters saw the batches' routing. */
    struct tide_offload_stats st = {.size = sizeof st};
    CHECK_EQ_INT(tide_engine_stats(e, &st), TIDE_OK);
    CHECK(st.tokens > 0);
    tide_engine_close(e);
}

static void test_placement(void)
{
    static const char *const policies[][3] = {
        {"policy.plugin=policy-lru", "policy.budget=4", "backend.host=backend-cpu-onednn"},
        {"policy.plugin=policy-tide", "policy.budget=6", "backend.host=backend-cpu-onednn"},
    };
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
        struct tide_engine *e = NULL;
        CHECK_EQ_INT(open_engine(policies[p], 3, &e), TIDE_OK);
        if (!e)
            continue;
        struct outcome got[NREQ];
        CHECK_EQ_INT(run_batch(e, 4, got), TIDE_OK);
        CHECK_EQ_INT(compare(got, true, policies[p][0]), 0);
        struct tide_offload_stats st = {.size = sizeof st};
        CHECK_EQ_INT(tide_engine_stats(e, &st), TIDE_OK);
        CHECK(st.miss_rows > 0); /* the host really computed experts */
        tide_engine_close(e);
    }
}

static int cancel_on_step(void *user, const struct tide_step_event *ev)
{
    (void)user;
    return ev->steps >= 2;
}

static void test_refusals(void)
{
    struct tide_engine *e = NULL;
    CHECK_EQ_INT(open_engine(NULL, 0, &e), TIDE_OK);
    if (!e)
        return;
    struct tide_request req[3];
    struct outcome got[3];
    const struct tide_request *reqs[3];
    struct tide_result *res[3];
    int status[3];
    static const char *const bad_set[] = {"generation.stepz=3"};
    for (int i = 0; i < 3; i++) {
        make_request(i, &req[i], &got[i]);
        reqs[i] = &req[i];
    }
    req[1].sets = bad_set; /* refused alone, naming the key */
    req[1].n_sets = 1;
    req[2].on_step = cancel_on_step; /* cancels itself only */
    CHECK_EQ_INT(tide_engine_generate_batch(e, reqs, 3, 3, res, status), TIDE_OK);
    for (int i = 0; i < 3; i++)
        keep(&got[i], status[i], res[i]);
    CHECK_EQ_INT(got[0].status, TIDE_OK);
    CHECK(got[0].n == alone[0].n && !memcmp(got[0].ids, alone[0].ids, sizeof(int32_t) * got[0].n));
    CHECK_EQ_INT(got[1].status, TIDE_E_CONFIG);
    CHECK_EQ_INT(got[2].status, TIDE_E_CANCELLED);
    /* Bad arguments. */
    CHECK_EQ_INT(tide_engine_generate_batch(e, reqs, 3, 0, res, status), TIDE_E_INVAL);
    CHECK_CONTAINS(tide_engine_error(e), "max_batch");
    CHECK_EQ_INT(tide_engine_run_batch(e, 2, NULL), TIDE_E_INVAL);
    tide_engine_close(e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    plugin_dir = argv[1];
    if (!mkdtemp(work)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(config_text, sizeof config_text,
             "[model]\npath = %s/tiny\ncreate = tiny\ncreate_seed = 5\n"
             "[backend]\ndevice = backend-cpu-onednn\n[backend-cpu-onednn]\nthreads = 2\n"
             "[generation]\ngen_length = 64\nblock_length = 32\n",
             work);
    for (int i = 0; i < NREQ; i++)
        for (int j = 0; j < 48; j++)
            prompts[i][j] = 7 + (j * 37 + i * 101) % 400;
    tide_log_set_level(TIDE_LOG_WARN);
    TEST_RUN(test_invariance);
    TEST_RUN(test_placement);
    TEST_RUN(test_refusals);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", work);
    TEST_DONE();
}
