/* The plugin loader against the test-only plugins of tests/plugins-bad:
 * every bad file is refused with the file and the cause, the good ones load,
 * and tide_plugins_get explains each way a configured name can be wrong.
 * argv[1] is the folder of the test plugins. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "loader.h"
#include "tide/log.h"
#include "tide/policy.h"
#include "tide/status.h"

static const char *plugin_dir;

/* ---- log capture -------------------------------------------------------- */

static char log_buf[16384];

static void log_capture(void *user, enum tide_log_level level, const char *msg)
{
    size_t used = strlen(log_buf);
    snprintf(log_buf + used, sizeof log_buf - used, "%s\n", msg);
}

static void log_clear(void)
{
    log_buf[0] = 0;
}

/* ---- helpers ------------------------------------------------------------ */

/* The refusal of the file named `file` (a base name), or NULL. */
static const struct tide_refusal *refusal_of(const struct tide_plugin_set *set, const char *file)
{
    size_t fl = strlen(file);
    for (int i = 0; i < set->n_refused; i++) {
        const char *p = set->refused[i].path;
        size_t pl = strlen(p);
        if (pl > fl && p[pl - fl - 1] == '/' && !strcmp(p + pl - fl, file))
            return &set->refused[i];
    }
    return NULL;
}

static struct tide_plugin_set *scan_one(const char *dir)
{
    const char *dirs[] = {dir};
    struct tide_plugin_set *set = NULL;
    CHECK_EQ_INT(tide_plugins_scan_dirs(dirs, 1, &set), TIDE_OK);
    return set;
}

/* Check that `file` was refused, that the record names the file in the
 * scanned folder, and that the reason holds each of the given phrases. */
static void check_refused(const struct tide_plugin_set *set, const char *file, ...)
{
    const struct tide_refusal *r = refusal_of(set, file);
    if (!r) {
        CHECK(r != NULL);
        fprintf(stderr, "  %s was not refused\n", file);
        return;
    }
    CHECK_CONTAINS(r->path, file);
    va_list ap;
    va_start(ap, file);
    for (const char *phrase; (phrase = va_arg(ap, const char *));)
        CHECK_CONTAINS(r->reason, phrase);
    va_end(ap);
}

/* ---- tests -------------------------------------------------------------- */

static void test_refusals(void)
{
    struct tide_plugin_set *set = scan_one(plugin_dir);
    if (!set)
        return;
    CHECK_EQ_INT(set->n_dirs, 1);
    /* Nine bad files; the loaded ones are checked in test_loaded. */
    CHECK_EQ_INT(set->n_refused, 9);
    check_refused(set, "test-bad-abi.so", "ABI mismatch", "plugin test-bad-abi",
                  "built for plugin ABI 3", "this tide speaks ABI 2", NULL);
    check_refused(set, "test-bad-null-entry.so", "entry returned no descriptor for ABI 2",
                  "ABI mismatch", NULL);
    /* A plugin of ABI version 1 (its entry answers only 1): named, both
     * versions said. */
    check_refused(set, "test-old-abi.so", "plugin test-old-abi was built for plugin ABI 1",
                  "this tide speaks ABI 2", "rebuild it", NULL);
    check_refused(set, "test-bad-desc-size.so", "descriptor is 16 bytes", "built for another ABI",
                  NULL);
    check_refused(set, "test-bad-no-entry.so", "no entry symbol 'tide_plugin_entry'", NULL);
    check_refused(set, "test-bad-kind.so", "unknown plugin kind 42", NULL);
    check_refused(set, "test-bad-slash.so", "'test/bad-slash'", "path separator", NULL);
    check_refused(set, "test-bad-small-ops.so", "policy ops table is", "at least", "ABI mismatch",
                  NULL);
    /* Files are loaded in sorted order, so test-dup-a wins and b is refused. */
    check_refused(set, "test-dup-b.so", "duplicate name 'test-dup'", "already loaded from",
                  "/test-dup-a.so", NULL);
    CHECK(refusal_of(set, "test-dup-a.so") == NULL);

    /* The ops-table refusal gives both sizes. */
    const struct tide_refusal *r = refusal_of(set, "test-bad-small-ops.so");
    char want[128];
    snprintf(want, sizeof want, "is %zu bytes, at least %zu expected",
             TIDE_POLICY_OPS_MIN_SIZE - sizeof(void (*)(void)), TIDE_POLICY_OPS_MIN_SIZE);
    if (r)
        CHECK_CONTAINS(r->reason, want);
    tide_plugins_free(set);
}

static void test_loaded(void)
{
    struct tide_plugin_set *set = scan_one(plugin_dir);
    if (!set)
        return;
    CHECK_EQ_INT(set->n, 4);
    const struct tide_plugin *good = tide_plugins_find(set, "test-good-policy");
    CHECK(good != NULL);
    if (good) {
        CHECK_EQ_INT(good->usable, 1);
        CHECK_EQ_INT(good->desc->kind, TIDE_PLUGIN_POLICY);
        CHECK_EQ_INT(good->desc->abi_version, TIDE_ABI_VERSION);
        CHECK(!strcmp(good->desc->version, "0.0.1"));
        CHECK_CONTAINS(good->path, "/test-good-policy.so");
        CHECK(good->desc->options && !strcmp(good->desc->options[0].name, "mode"));
    }
    const struct tide_plugin *bk = tide_plugins_find(set, "test-good-backend");
    CHECK(bk != NULL && bk->desc->kind == TIDE_PLUGIN_BACKEND && bk->usable);
    const struct tide_plugin *dup = tide_plugins_find(set, "test-dup");
    CHECK(dup != NULL && strstr(dup->path, "/test-dup-a.so"));
    /* Refused names are not findable. */
    CHECK(tide_plugins_find(set, "test-bad-abi") == NULL);
    CHECK(tide_plugins_find(set, "test/bad-slash") == NULL);
    tide_plugins_free(set);
}

/* The good policy works through its ops table: it is a usable minimal policy. */
static void test_good_policy_runs(void)
{
    struct tide_plugin_set *set = scan_one(plugin_dir);
    if (!set)
        return;
    log_clear();
    const struct tide_plugin *p =
        tide_plugins_get(set, "test-good-policy", TIDE_PLUGIN_POLICY, "[policy] plugin");
    CHECK(p != NULL);
    CHECK_EQ_INT(log_buf[0], 0);
    if (p) {
        const struct tide_policy_ops *ops = p->desc->ops;
        CHECK_EQ_INT(ops->size, sizeof *ops);
        struct tide_policy_shape shape = {.size = sizeof shape,
                                          .n_layers = 2,
                                          .n_moe_layers = 1,
                                          .n_experts = 4,
                                          .top_k = 2,
                                          .expert_bytes = 64,
                                          .budget = 2};
        struct tide_policy *pol = NULL;
        CHECK_EQ_INT(ops->create(&shape, NULL, &pol), TIDE_OK);
        int32_t init[2] = {-1, -1};
        CHECK_EQ_INT(ops->initial(pol, 0, init), 2);
        CHECK(init[0] == 0 && init[1] == 1);
        uint32_t counts[4] = {3, 0, 1, 0};
        uint8_t resident[4] = {1, 1, 0, 0}, place[4] = {9, 9, 9, 9};
        int32_t promote[4], evict[4];
        struct tide_policy_view v = {.counts = counts, .resident = resident};
        struct tide_plan plan = {
            .n_promote = -1, .promote = promote, .evict = evict, .place = place};
        ops->block_begin(pol, 0, true);
        CHECK_EQ_INT(ops->plan(pol, &v, &plan), TIDE_OK);
        CHECK_EQ_INT(plan.n_promote, 0);
        CHECK_EQ_INT(place[0], TIDE_PLACE_DEVICE);
        CHECK_EQ_INT(place[2], TIDE_PLACE_HOST);
        CHECK_EQ_INT(place[1], 9); /* inactive experts are left alone */
        ops->destroy(pol);
    }
    tide_plugins_free(set);
}

static void test_get_errors(void)
{
    struct tide_plugin_set *set = scan_one(plugin_dir);
    if (!set)
        return;

    /* Loaded, but the probe refused: the reason is logged. */
    const struct tide_plugin *pr = tide_plugins_find(set, "test-probe-refuses");
    CHECK(pr != NULL && !pr->usable);
    if (pr)
        CHECK_CONTAINS(pr->why, "no frobnicator on this machine");
    log_clear();
    CHECK(tide_plugins_get(set, "test-probe-refuses", TIDE_PLUGIN_POLICY, "[policy] plugin") ==
          NULL);
    CHECK_CONTAINS(log_buf, "[policy] plugin = test-probe-refuses: the plugin cannot run here: "
                            "no frobnicator on this machine (test plugin always refuses)");

    /* Right name, wrong slot: says which kind it is and where it came from. */
    log_clear();
    CHECK(tide_plugins_get(set, "test-good-backend", TIDE_PLUGIN_POLICY, "[policy] plugin") ==
          NULL);
    CHECK_CONTAINS(log_buf, "[policy] plugin = test-good-backend");
    CHECK_CONTAINS(log_buf, "test-good-backend.so is a backend plugin, not a policy plugin");
    log_clear();
    CHECK(tide_plugins_get(set, "test-good-policy", TIDE_PLUGIN_BACKEND, "[backend] host") == NULL);
    CHECK_CONTAINS(log_buf, "is a policy plugin, not a backend plugin");

    /* A typo: "did you mean", among plugins of the wanted kind. */
    log_clear();
    CHECK(tide_plugins_get(set, "test-good-polcy", TIDE_PLUGIN_POLICY, "[policy] plugin") == NULL);
    CHECK_CONTAINS(log_buf, "[policy] plugin = test-good-polcy: no policy plugin of that name");
    CHECK_CONTAINS(log_buf, "did you mean 'test-good-policy'?");
    log_clear();
    CHECK(tide_plugins_get(set, "test-good-backnd", TIDE_PLUGIN_BACKEND, "[backend] host") == NULL);
    CHECK_CONTAINS(log_buf, "did you mean 'test-good-backend'?");
    /* Nothing close: no suggestion. */
    log_clear();
    CHECK(tide_plugins_get(set, "zzzzzzzzzzzzzzzz", TIDE_PLUGIN_POLICY, "[policy] plugin") == NULL);
    CHECK_CONTAINS(log_buf, "no policy plugin of that name was found");
    CHECK(strstr(log_buf, "did you mean") == NULL);
    /* And where it looked: a wrong TIDE_PLUGIN_PATH shows. */
    CHECK_CONTAINS(log_buf, "plugin not found in the folders searched: ");
    CHECK_CONTAINS(log_buf, set->n_dirs ? set->dirs[0] : "none");
    CHECK_CONTAINS(log_buf, "TIDE_PLUGIN_PATH");

    /* A name whose file was refused: the refusal explains it. */
    log_clear();
    CHECK(tide_plugins_get(set, "test-bad-abi", TIDE_PLUGIN_POLICY, "[policy] plugin") == NULL);
    CHECK_CONTAINS(log_buf, "no policy plugin of that name");
    CHECK_CONTAINS(log_buf, "test-bad-abi.so was refused: ABI mismatch");

    /* Paths are refused as paths, before any lookup. */
    char path[4096];
    snprintf(path, sizeof path, "%s/test-good-policy.so", plugin_dir);
    log_clear();
    CHECK(tide_plugins_get(set, path, TIDE_PLUGIN_POLICY, "[policy] plugin") == NULL);
    CHECK_CONTAINS(log_buf, "config names plugins, not paths");
    CHECK_CONTAINS(log_buf, "TIDE_PLUGIN_PATH");
    log_clear();
    CHECK(tide_plugins_get(set, "sub\\test-good-policy", TIDE_PLUGIN_POLICY, "[policy] plugin") ==
          NULL);
    CHECK_CONTAINS(log_buf, "config names plugins, not paths");
    tide_plugins_free(set);
}

/* A folder with a file that is not a shared object, a file that is not *.so,
 * and a missing folder. */
static void test_junk_and_missing(void)
{
    char dir[] = "/tmp/tide-loader-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char junk[128], txt[128], missing[128];
    snprintf(junk, sizeof junk, "%s/junk.so", dir);
    snprintf(txt, sizeof txt, "%s/readme.txt", dir);
    snprintf(missing, sizeof missing, "%s/no-such-folder", dir);
    FILE *f = fopen(junk, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("this is not an ELF file\n", f);
        fclose(f);
    }
    f = fopen(txt, "w");
    if (f)
        fclose(f);
    const char *dirs[] = {missing, dir};
    struct tide_plugin_set *set = NULL;
    CHECK_EQ_INT(tide_plugins_scan_dirs(dirs, 2, &set), TIDE_OK);
    if (set) {
        CHECK_EQ_INT(set->n, 0);
        CHECK_EQ_INT(set->n_dirs, 2);
        CHECK_EQ_INT(set->n_refused, 1);
        check_refused(set, "junk.so", "dlopen failed", "junk.so", NULL);
        tide_plugins_free(set);
    }
    unlink(junk);
    unlink(txt);
    rmdir(dir);
}

/* The same folder twice (e.g. TIDE_PLUGIN_PATH naming build/plugins): each
 * plugin is loaded once, not refused as its own duplicate. */
static void test_same_folder_twice(void)
{
    const char *dirs[] = {plugin_dir, plugin_dir};
    struct tide_plugin_set *set = NULL;
    CHECK_EQ_INT(tide_plugins_scan_dirs(dirs, 2, &set), TIDE_OK);
    if (!set)
        return;
    CHECK_EQ_INT(set->n, 4);
    for (int i = 0; i < set->n_refused; i++)
        CHECK(strstr(set->refused[i].reason, "already loaded from") == NULL ||
              strstr(set->refused[i].path, "test-dup-b.so"));
    tide_plugins_free(set);
}

static void test_default_dirs(void)
{
    char ww[] = "/tmp/tide-loader-ww-XXXXXX";
    CHECK(mkdtemp(ww) != NULL);
    CHECK_EQ_INT(chmod(ww, 0777), 0);
    char env[256];
    snprintf(env, sizeof env, "/opt/a:%s", ww);
    setenv("TIDE_PLUGIN_PATH", env, 1);
    char *dirs[8];
    log_clear();
    int n = tide_plugin_default_dirs(dirs, 8);
    /* Next to this executable, the install folder, the environment's two:
     * no <dir>/tide/plugins beside the loader's code, which is this
     * executable itself (it carries the core's objects, as tide does). */
    CHECK_EQ_INT(n, 4);
    if (n == 4) {
        CHECK_CONTAINS(dirs[0], "/plugins");
        CHECK(!strstr(dirs[0], "/tide/plugins"));
        CHECK(!strcmp(dirs[2], "/opt/a"));
        CHECK(!strcmp(dirs[3], ww));
    }
    CHECK_CONTAINS(log_buf, "world-writable");
    CHECK_CONTAINS(log_buf, ww);
    /* A folder named twice (here the executable's, through the environment)
     * is searched once. */
    if (n >= 1) {
        char again[4200];
        snprintf(again, sizeof again, "%s:/opt/a:/opt/a", dirs[0]);
        setenv("TIDE_PLUGIN_PATH", again, 1);
        char *d2[8];
        int n2 = tide_plugin_default_dirs(d2, 8);
        CHECK_EQ_INT(n2, 3);
        for (int i = 0; i < n2; i++)
            free(d2[i]);
        setenv("TIDE_PLUGIN_PATH", env, 1);
    }
    for (int i = 0; i < n; i++)
        free(dirs[i]);
    /* max is respected. */
    n = tide_plugin_default_dirs(dirs, 2);
    CHECK_EQ_INT(n, 2);
    for (int i = 0; i < n; i++)
        free(dirs[i]);
    unsetenv("TIDE_PLUGIN_PATH");
    rmdir(ww);
}

static void test_kind_str(void)
{
    CHECK(!strcmp(tide_plugin_kind_str(TIDE_PLUGIN_MODEL), "model"));
    CHECK(!strcmp(tide_plugin_kind_str(TIDE_PLUGIN_BACKEND), "backend"));
    CHECK(!strcmp(tide_plugin_kind_str(TIDE_PLUGIN_POLICY), "policy"));
    CHECK(!strcmp(tide_plugin_kind_str(42), "unknown"));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TEST_PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    plugin_dir = argv[1];
    tide_log_set_level(TIDE_LOG_INFO);
    tide_log_set_sink(log_capture, NULL);
    TEST_RUN(test_refusals);
    TEST_RUN(test_loaded);
    TEST_RUN(test_good_policy_runs);
    TEST_RUN(test_get_errors);
    TEST_RUN(test_junk_and_missing);
    TEST_RUN(test_same_folder_twice);
    TEST_RUN(test_default_dirs);
    TEST_RUN(test_kind_str);
    tide_log_set_sink(NULL, NULL);
    TEST_DONE();
}
