/* policy-static: fixed resident sets, routing-count files and their errors. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "policy_fixture.h"
#include "tide/status.h"

static char tmp_dir[] = "/tmp/tide-policy-static-XXXXXX";
static char tmp_files[32][300]; /* written into tmp_dir, removed at the end */
static int n_tmp_files;

/* Write text to <tmp_dir>/name; returns the path (static storage). */
static const char *write_counts(const char *name, const char *text)
{
    char *path = tmp_files[n_tmp_files < 31 ? n_tmp_files++ : 31];
    snprintf(path, sizeof tmp_files[0], "%s/%s", tmp_dir, name);
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
    return path;
}

/* Create policy-static with initial = popular from `path` for `layers`
 * layers of 8 experts, B = 3. Returns the status; log messages are captured. */
static int open_popular(struct pf *f, const char *path, int layers)
{
    char opts[400];
    snprintf(opts, sizeof opts, "initial=popular counts_file=%s", path);
    pf_log_capture();
    int rc = pf_open(f, "policy-static", opts, layers, 8, 3);
    pf_log_release();
    return rc;
}

static void test_descriptor(void)
{
    struct pf f;
    CHECK_EQ_INT(pf_load(&f, "policy-static"), TIDE_OK);
    CHECK(pf_desc_ok(&f, "policy-static", "initial counts_file"));
    if (f.desc) {
        CHECK_STR(f.desc->options[0].choices, "first|popular");
        CHECK_CONTAINS(f.desc->options[1].help, "LAYER EXPERT COUNT");
    }
    pf_close(&f);
}

/* initial = first: experts 0..B-1, never anything promoted, misses on host. */
static void test_first(void)
{
    struct pf f;
    CHECK(PF_OPEN(&f, "policy-static", NULL, 2, 8, 3));
    CHECK_STR(pf_residents(&f, 0), "0 1 2");
    CHECK_STR(pf_residents(&f, 1), "0 1 2");
    for (int b = 0; b < 3; b++) {
        pf_block(&f, b, b == 0);
        for (int s = 0; s < 32; s++) {
            CHECK_STR(pf_plan(&f, 0, s, "0:1 5:3"), "P[] D[0] H[5]");
            CHECK_STR(pf_plan(&f, 1, s, "7:9 6:9 5:9 2:1"), "P[] D[2] H[5 6 7]");
        }
    }
    CHECK_STR(pf_residents(&f, 0), "0 1 2");
    pf_close(&f);
}

static void test_popular(void)
{
    const char *path = write_counts("ok.txt", "# layer expert count\n"
                                              "0 5 10\n"
                                              "\n"
                                              "0 2 10   # ties with 5: 2 ranks first\n"
                                              "  0\t7 3\r\n"
                                              "1 1 4\n"
                                              "0 7 1\n"
                                              "0 6 3\n");
    struct pf f;
    /* Layer 0: 2 and 5 (10), then 7 (3 + 1) before 6 (3). Layer 1: 1, then 0 and 2 (0). */
    CHECK_EQ_INT(open_popular(&f, path, 2), TIDE_OK);
    int32_t ids[3];
    CHECK_EQ_INT(f.ops->initial(f.p, 0, ids), 3);
    CHECK(ids[0] == 2 && ids[1] == 5 && ids[2] == 7);
    CHECK_EQ_INT(f.ops->initial(f.p, 1, ids), 3);
    CHECK(ids[0] == 1 && ids[1] == 0 && ids[2] == 2);
    CHECK_STR(pf_log_text(), "");
    pf_block(&f, 0, true);
    CHECK_STR(pf_plan(&f, 0, 0, "6:4 7:1 3:2"), "P[] D[7] H[3 6]");
    CHECK_STR(pf_plan(&f, 1, 0, "1:1 4:1"), "P[] D[1] H[4]");
    /* initial() for a layer that does not exist. */
    pf_log_capture();
    CHECK_EQ_INT(f.ops->initial(f.p, 2, ids), TIDE_E_INVAL);
    pf_log_release();
    CHECK_CONTAINS(pf_log_text(), "policy-static: initial() for MoE layer 2, but the model has 2");
    pf_close(&f);

    /* A layer without counts starts with 0..B-1, with a warning. */
    CHECK_EQ_INT(open_popular(&f, path, 3), TIDE_OK);
    CHECK_STR(pf_residents(&f, 2), "0 1 2");
    CHECK_CONTAINS(pf_log_text(), "has no counts for 1 MoE layer (the first is layer 2)");
    pf_close(&f);
}

static void test_malformed(void)
{
    static const struct {
        const char *name, *text;
        int status;
        const char *msg; /* after "policy-static: <path>" */
    } cases[] = {
        {"bad-number.txt", "0 1 5\n0 x1 3\n", TIDE_E_FORMAT, ":2: expert 'x1' is not an integer"},
        {"bad-count.txt", "0 1 5z\n", TIDE_E_FORMAT, ":1: count '5z' is not an integer"},
        {"float.txt", "# c\n0 1 1e3\n", TIDE_E_FORMAT, ":2: count '1e3' is not an integer"},
        {"negative.txt", "0 1 -5\n", TIDE_E_FORMAT, ":1: count -5 is negative"},
        {"layer.txt", "0 1 1\n2 1 5\n", TIDE_E_FORMAT,
         ":2: layer 2 is out of range: the model has 2 MoE layers (0..1)"},
        {"neg-layer.txt", "-1 1 5\n", TIDE_E_FORMAT,
         ":1: layer -1 is out of range: the model has 2 MoE layers (0..1)"},
        {"expert.txt", "\n\n0 8 5\n", TIDE_E_FORMAT,
         ":3: expert 8 is out of range: a layer has 8 experts (0..7)"},
        {"short.txt", "0 1\n", TIDE_E_FORMAT, ":1: 2 fields; expected 'LAYER EXPERT COUNT'"},
        {"long.txt", "0 1 2 3\n", TIDE_E_FORMAT,
         ":1: more than three fields; expected 'LAYER EXPERT COUNT'"},
        {"huge.txt", "0 1 99999999999999999999\n", TIDE_E_FORMAT,
         ":1: count '99999999999999999999' is not an integer"},
        {"overflow.txt",
         "1 3 9223372036854775807\n1 3 9223372036854775807\n1 3 9223372036854775807\n",
         TIDE_E_FORMAT, ":3: the counts of layer 1 expert 3 overflow"},
        {"empty.txt", "# nothing here\n\n", TIDE_E_FORMAT, " has no 'LAYER EXPERT COUNT' lines"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char want[512];
        const char *path = write_counts(cases[i].name, cases[i].text);
        snprintf(want, sizeof want, "error: policy-static: counts_file %s%s", path, cases[i].msg);
        struct pf f;
        CHECK_EQ_INT(open_popular(&f, path, 2), cases[i].status);
        CHECK_CONTAINS(pf_log_text(), want);
        pf_close(&f);
    }

    /* A missing file. */
    struct pf f;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/absent.txt", tmp_dir);
    CHECK_EQ_INT(open_popular(&f, missing, 2), TIDE_E_NOTFOUND);
    char want[512];
    snprintf(want, sizeof want,
             "error: policy-static: counts_file %s: cannot open: No such file or directory",
             missing);
    CHECK_CONTAINS(pf_log_text(), want);
    pf_close(&f);

    /* popular without a file. */
    CHECK_EQ_INT(open_popular(&f, "", 2), TIDE_E_CONFIG);
    CHECK_CONTAINS(pf_log_text(),
                   "error: policy-static: initial = popular needs counts_file (a routing-count "
                   "file)");
    pf_close(&f);
}

/* A file given with initial = first is ignored, with a warning. */
static void test_file_ignored(void)
{
    struct pf f;
    pf_log_capture();
    CHECK_EQ_INT(pf_open(&f, "policy-static", "counts_file=/nonexistent/counts.txt", 1, 8, 2),
                 TIDE_OK);
    pf_log_release();
    CHECK_CONTAINS(pf_log_text(), "warn: policy-static: counts_file = /nonexistent/counts.txt is "
                                  "ignored because initial = first");
    CHECK_STR(pf_residents(&f, 0), "0 1");
    pf_close(&f);
}

static void test_budget_edges(void)
{
    struct pf f;
    CHECK(PF_OPEN(&f, "policy-static", NULL, 1, 8, 0));
    CHECK_STR(pf_plan(&f, 0, 0, "0:1 7:2"), "P[] D[] H[0 7]");
    pf_close(&f);
    CHECK(PF_OPEN(&f, "policy-static", NULL, 1, 8, 8));
    CHECK_STR(pf_plan(&f, 0, 0, "0:1 7:2"), "P[] D[0 7] H[]");
    pf_close(&f);
    /* No option section at all. */
    CHECK_EQ_INT(pf_load(&f, "policy-static"), TIDE_OK);
    struct tide_policy_shape s = {.size = sizeof s, .n_moe_layers = 1, .n_experts = 8, .budget = 2};
    struct tide_policy *p = NULL;
    pf_log_capture();
    CHECK_EQ_INT(f.ops->create(&s, NULL, &p), TIDE_E_INVAL);
    pf_log_release();
    CHECK(p == NULL);
    CHECK_CONTAINS(pf_log_text(), "policy-static: create() needs the [policy-static] option");
    pf_close(&f);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    TEST_RUN(test_descriptor);
    TEST_RUN(test_first);
    TEST_RUN(test_popular);
    TEST_RUN(test_malformed);
    TEST_RUN(test_file_ignored);
    TEST_RUN(test_budget_edges);
    for (int i = 0; i < n_tmp_files; i++)
        unlink(tmp_files[i]);
    if (rmdir(tmp_dir) != 0)
        perror(tmp_dir);
    TEST_DONE();
}
