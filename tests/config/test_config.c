/* Configuration: INI files (fixtures/), --set overrides, origins, every value
 * type, the error messages (file:line, the key, what was expected, "did you
 * mean"), and the size parser. Uses the core's sections plus a test section
 * with one option of each type. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "core_options.h"
#include "harness.h"
#include "tide/log.h"
#include "tide/status.h"

static const struct tide_option test_options[] = {
    {"count", TIDE_OPT_INT, "0", "an integer", NULL, "[-100,100]"},
    {"ratio", TIDE_OPT_FLOAT, "0.5", "a fraction", NULL, "(0,1]"},
    {"flag", TIDE_OPT_BOOL, "true", "a switch", NULL, NULL},
    {"name", TIDE_OPT_STRING, "", "free text", NULL, NULL},
    {"mode", TIDE_OPT_ENUM, "fast", "a choice", "fast|slow|auto", NULL},
    {"bytes", TIDE_OPT_SIZE, "4KiB", "a size", NULL, "[1,]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

/* ---- log capture -------------------------------------------------------- */

static char log_buf[16384];
static int log_count;

static void log_capture(void *user, enum tide_log_level level, const char *msg)
{
    size_t used = strlen(log_buf);
    snprintf(log_buf + used, sizeof log_buf - used, "%s\n", msg);
    log_count++;
}

static void log_clear(void)
{
    log_buf[0] = 0;
    log_count = 0;
}

/* ---- helpers ------------------------------------------------------------ */

static struct tide_config *make_cfg(void)
{
    struct tide_config *cfg = tide_config_create();
    CHECK(cfg != NULL);
    if (!cfg)
        return NULL;
    CHECK_EQ_INT(tide_core_register_sections(cfg), TIDE_OK);
    CHECK_EQ_INT(tide_config_add_section(cfg, "test", test_options, "test-plugin", "Test options."),
                 TIDE_OK);
    return cfg;
}

static const char *fixture(const char *name)
{
    static char path[4400];
    const char *dir = getenv("TIDE_TEST_DATA");
    if (*name == '/') /* a file the test wrote */
        snprintf(path, sizeof path, "%s", name);
    else
        snprintf(path, sizeof path, "%s/fixtures/%s", dir ? dir : ".", name);
    return path;
}

/* Load a fixture into a fresh config and expect status `want`; every phrase
 * that follows (NULL-terminated) must be in the logged messages. Returns the
 * config for more checks; the caller destroys it. */
static struct tide_config *load_expect(const char *name, int want, ...)
{
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return NULL;
    log_clear();
    int rc = tide_config_load_file(cfg, fixture(name));
    CHECK_EQ_INT(rc, want);
    va_list ap;
    va_start(ap, want);
    for (const char *phrase; (phrase = va_arg(ap, const char *));)
        CHECK_CONTAINS(log_buf, phrase);
    va_end(ap);
    if (rc != want)
        fprintf(stderr, "  (loading %s; log:\n%s)\n", name, log_buf);
    return cfg;
}

/* Write text to a temporary file; returns its path (static storage). */
static const char *write_temp(const char *text, size_t len)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/tide-config-XXXXXX");
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return path;
    CHECK_EQ_INT(write(fd, text, len), (long long)len);
    close(fd);
    return path;
}

/* The line of `text` that starts with `prefix`, copied into buf. */
static const char *line_of(const char *text, const char *prefix, char *buf, size_t len)
{
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, prefix, pl)) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p);
            return buf;
        }
    }
    snprintf(buf, len, "(no line starting with \"%s\")", prefix);
    return buf;
}

/* ---- tests -------------------------------------------------------------- */

static void test_defaults(void)
{
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    const struct tide_opts *gen = tide_config_section(cfg, "generation");
    const struct tide_opts *t = tide_config_section(cfg, "test");
    CHECK(gen != NULL && t != NULL);
    CHECK(tide_config_section(cfg, "nope") == NULL);
    CHECK(!strcmp(tide_opts_section(gen), "generation"));
    CHECK_EQ_INT(tide_opts_int(gen, "steps"), 32);
    CHECK_EQ_INT(tide_opts_int(gen, "block_length"), 32);
    CHECK_NEAR(tide_opts_float(gen, "threshold"), 0.95, 1e-12);
    CHECK_EQ_INT(tide_opts_bool(gen, "chat"), 0);
    CHECK_EQ_INT(tide_opts_int(tide_config_section(cfg, "policy"), "budget"), -1);
    CHECK(!strcmp(tide_opts_str(tide_config_section(cfg, "policy"), "plugin"), "policy-tide"));
    CHECK_EQ_INT(tide_opts_int(t, "count"), 0);
    CHECK_NEAR(tide_opts_float(t, "ratio"), 0.5, 0);
    CHECK_EQ_INT(tide_opts_bool(t, "flag"), 1);
    CHECK(!strcmp(tide_opts_str(t, "name"), ""));
    CHECK(!strcmp(tide_opts_str(t, "mode"), "fast"));
    CHECK_EQ_INT(tide_opts_size(t, "bytes"), 4096);
    CHECK(!strcmp(tide_opts_origin(gen, "steps"), "default"));
    CHECK(!strcmp(tide_opts_origin(t, "bytes"), "default"));
    CHECK(!strcmp(tide_opts_origin(t, "no_such_key"), "?"));
    CHECK(tide_config_path(cfg) == NULL);
    tide_config_destroy(cfg);
    tide_config_destroy(NULL);
}

static void test_good_file(void)
{
    struct tide_config *cfg = load_expect("good.ini", TIDE_OK, NULL);
    if (!cfg)
        return;
    CHECK_EQ_INT(log_count, 0);
    const struct tide_opts *gen = tide_config_section(cfg, "generation");
    const struct tide_opts *pol = tide_config_section(cfg, "policy");
    const struct tide_opts *t = tide_config_section(cfg, "test");
    CHECK(!strcmp(tide_opts_str(tide_config_section(cfg, "model"), "path"), "models/test-tiny"));
    CHECK_EQ_INT(tide_opts_int(gen, "steps"), 16);
    CHECK_NEAR(tide_opts_float(gen, "threshold"), 0.9, 1e-12);
    CHECK_EQ_INT(tide_opts_bool(gen, "chat"), 1);
    CHECK(!strcmp(tide_opts_str(pol, "plugin"), "policy-lru"));
    CHECK_EQ_INT(tide_opts_size(pol, "expert_memory"), 512ull << 20);
    CHECK_EQ_INT(tide_opts_int(t, "count"), -3);
    CHECK_NEAR(tide_opts_float(t, "ratio"), 0.25, 0);
    CHECK_EQ_INT(tide_opts_bool(t, "flag"), 0);
    CHECK(!strcmp(tide_opts_str(t, "name"), "hello world")); /* inline comment dropped */
    CHECK(!strcmp(tide_opts_str(t, "mode"), "slow"));
    CHECK_EQ_INT(tide_opts_size(t, "bytes"), 1500000000ull);
    /* Origins: the file's base name and the line. */
    CHECK(!strcmp(tide_opts_origin(gen, "steps"), "good.ini:6"));
    CHECK(!strcmp(tide_opts_origin(gen, "threshold"), "good.ini:7"));
    CHECK(!strcmp(tide_opts_origin(pol, "expert_memory"), "good.ini:12"));
    CHECK(!strcmp(tide_opts_origin(t, "bytes"), "good.ini:20"));
    CHECK(!strcmp(tide_opts_origin(gen, "block_length"), "default"));
    CHECK(tide_config_path(cfg) && !strcmp(tide_config_path(cfg), fixture("good.ini")));

    /* --set wins over the file, and says so. */
    log_clear();
    CHECK_EQ_INT(tide_config_set(cfg, "generation.steps=24"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "test.mode=auto"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "generation.threshold=0.5"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "generation.threshold=0.75"), TIDE_OK); /* last one wins */
    CHECK_EQ_INT(log_count, 0);
    CHECK_EQ_INT(tide_opts_int(gen, "steps"), 24);
    CHECK(!strcmp(tide_opts_origin(gen, "steps"), "--set"));
    CHECK(!strcmp(tide_opts_str(t, "mode"), "auto"));
    CHECK_NEAR(tide_opts_float(gen, "threshold"), 0.75, 0);
    CHECK(!strcmp(tide_opts_origin(gen, "threshold"), "--set"));
    CHECK(!strcmp(tide_opts_origin(gen, "chat"), "good.ini:8"));
    /* A programmatic value carries its own origin. */
    CHECK_EQ_INT(tide_config_set_value(cfg, "policy", "budget", "64", "bench"), TIDE_OK);
    CHECK_EQ_INT(tide_opts_int(pol, "budget"), 64);
    CHECK(!strcmp(tide_opts_origin(pol, "budget"), "bench"));

    /* The effective configuration, each value with its origin. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    if (f) {
        tide_config_print(cfg, f, NULL);
        fclose(f);
        char line[256];
        CHECK_CONTAINS(text, "[generation]\n");
        CHECK_CONTAINS(line_of(text, "steps = ", line, sizeof line), "steps = 24");
        CHECK_CONTAINS(line_of(text, "steps = ", line, sizeof line), "; --set");
        CHECK_CONTAINS(line_of(text, "chat = ", line, sizeof line), "chat = yes");
        CHECK_CONTAINS(line_of(text, "chat = ", line, sizeof line), "; good.ini:8");
        CHECK_CONTAINS(line_of(text, "block_length = ", line, sizeof line), "; default");
        CHECK_CONTAINS(line_of(text, "bytes = ", line, sizeof line), "bytes = 1.5GB");
        CHECK_CONTAINS(line_of(text, "budget = ", line, sizeof line), "; bench");
        free(text);
    }
    /* Restricted to some sections. */
    text = NULL;
    f = open_memstream(&text, &len);
    if (f) {
        const char *only[] = {"test", NULL};
        tide_config_print(cfg, f, only);
        fclose(f);
        CHECK(!strncmp(text, "[test]\n", 7));
        CHECK(strstr(text, "[generation]") == NULL);
        free(text);
    }
    tide_config_destroy(cfg);
}

static void test_unknown_key(void)
{
    struct tide_config *cfg =
        load_expect("unknown-key.ini", TIDE_E_CONFIG,
                    "unknown-key.ini:3: unknown key 'step' in [generation]; did you mean 'steps'?",
                    "unknown-key.ini:6: unknown key 'gen_length' in [policy]; did you mean "
                    "[generation] gen_length?",
                    NULL);
    CHECK_EQ_INT(log_count, 2);
    tide_config_destroy(cfg);
    /* Nothing close: list the known keys. */
    cfg = make_cfg();
    log_clear();
    CHECK_EQ_INT(tide_config_set(cfg, "model.zzzzzzzzzz=1"), TIDE_E_CONFIG);
    CHECK_CONTAINS(log_buf, "unknown key 'zzzzzzzzzz' in [model]; known keys: plugin path create");
    tide_config_destroy(cfg);
}

static void test_unknown_section(void)
{
    struct tide_config *cfg =
        load_expect("unknown-section.ini", TIDE_E_CONFIG,
                    "unknown-section.ini:1: unknown section [genration]; did you mean "
                    "[generation]?",
                    "unknown-section.ini:4: unknown section [frobnicate] (sections are [model]",
                    "see `tide config doc`", NULL);
    CHECK_EQ_INT(log_count, 2);
    tide_config_destroy(cfg);
}

static void test_bad_values(void)
{
    struct tide_config *cfg = load_expect(
        "bad-values.ini", TIDE_E_CONFIG,
        "bad-values.ini:3: [test] count = '12abc': expected an integer in [-100,100]",
        "bad-values.ini:4: [test] ratio = 'fast': expected a number in (0,1]",
        "bad-values.ini:5: [test] flag = 'maybe': expected a boolean: true/false, yes/no, on/off "
        "or 1/0",
        "bad-values.ini:6: [test] mode = 'medium': expected one of fast|slow|auto",
        "bad-values.ini:7: [test] bytes = '12 parsecs': expected a size such as 4096, 512MiB",
        NULL);
    /* Every bad line is reported, the good one is not. */
    CHECK_EQ_INT(log_count, 5);
    CHECK(strstr(log_buf, ":8:") == NULL);
    /* Bad values leave the previous value in place. */
    const struct tide_opts *t = tide_config_section(cfg, "test");
    CHECK_EQ_INT(tide_opts_int(t, "count"), 0);
    CHECK(!strcmp(tide_opts_origin(t, "count"), "default"));
    tide_config_destroy(cfg);
}

static void test_ranges(void)
{
    struct tide_config *cfg =
        load_expect("range.ini", TIDE_E_CONFIG,
                    "range.ini:2: [generation] threshold = '1.5': expected a number in (0,1]",
                    "range.ini:3: [generation] block_length = '0': expected an integer in [1,4096]",
                    "range.ini:6: [test] count = '101': expected an integer in [-100,100]",
                    "range.ini:7: [test] ratio = '0': expected a number in (0,1]",
                    "range.ini:8: [test] bytes = '0': expected a size in [1,] bytes", NULL);
    CHECK_EQ_INT(log_count, 5);
    tide_config_destroy(cfg);
    /* Bounds themselves: inclusive ends accepted, exclusive ones refused. */
    cfg = make_cfg();
    log_clear();
    CHECK_EQ_INT(tide_config_set(cfg, "generation.threshold=1"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "generation.block_length=4096"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "generation.block_length=4097"), TIDE_E_CONFIG);
    CHECK_EQ_INT(tide_config_set(cfg, "test.count=-100"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "test.count=-101"), TIDE_E_CONFIG);
    CHECK_EQ_INT(tide_config_set(cfg, "policy.budget=-1"), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "policy.budget=-2"), TIDE_E_CONFIG);
    CHECK_EQ_INT(tide_config_set(cfg, "test.ratio=nan"), TIDE_E_CONFIG);
    CHECK_EQ_INT(tide_config_set(cfg, "test.ratio=inf"), TIDE_E_CONFIG);
    CHECK_EQ_INT(tide_config_set(cfg, "test.count=99999999999999999999"), TIDE_E_CONFIG);
    CHECK_EQ_INT(log_count, 6);
    tide_config_destroy(cfg);
}

static void test_outside_section(void)
{
    struct tide_config *cfg =
        load_expect("no-section.ini", TIDE_E_CONFIG,
                    "no-section.ini:2: 'steps' is outside any section; put it under [model]", NULL);
    CHECK_EQ_INT(log_count, 1);
    /* The keyed line after the header is still read, with its own line. */
    const struct tide_opts *gen = tide_config_section(cfg, "generation");
    CHECK_EQ_INT(tide_opts_int(gen, "steps"), 5);
    CHECK(!strcmp(tide_opts_origin(gen, "steps"), "no-section.ini:4"));
    tide_config_destroy(cfg);
}

static void test_syntax_error(void)
{
    struct tide_config *cfg =
        load_expect("syntax.ini", TIDE_E_CONFIG,
                    "syntax.ini:3: syntax error: expected '[section]', 'key = value' or a ';' "
                    "comment",
                    NULL);
    CHECK_EQ_INT(log_count, 1);
    CHECK(tide_config_path(cfg) == NULL); /* a failed load is not recorded */
    tide_config_destroy(cfg);
}

static void test_duplicate_key(void)
{
    struct tide_config *cfg =
        load_expect("dup-key.ini", TIDE_E_CONFIG,
                    "dup-key.ini:4: [generation] steps is set twice (first at line 2", NULL);
    CHECK_EQ_INT(log_count, 1);
    tide_config_destroy(cfg);
}

/* An indented line continues the previous value in INI: here that would be
 * "steps = 8\n9", so it must be an error, not a silent "steps = 9". */
static void test_continuation_line(void)
{
    struct tide_config *cfg = load_expect("continuation.ini", TIDE_E_CONFIG,
                                          "continuation.ini:2: [generation] steps is set twice",
                                          "indented lines continue the previous value", NULL);
    if (cfg)
        CHECK_EQ_INT(tide_opts_int(tide_config_section(cfg, "generation"), "steps"), 8);
    tide_config_destroy(cfg);
}

static void test_long_and_nul_lines(void)
{
    /* 198 bytes is the longest line inih reads whole: accepted. */
    char text[512];
    char value[256];
    memset(value, 'x', sizeof value);
    int n = snprintf(text, sizeof text, "[test]\nname = %.*s\n", 198 - 7, value);
    const char *path = write_temp(text, (size_t)n);
    struct tide_config *cfg = make_cfg();
    log_clear();
    CHECK_EQ_INT(tide_config_load_file(cfg, path), TIDE_OK);
    CHECK_EQ_INT(strlen(tide_opts_str(tide_config_section(cfg, "test"), "name")), 198 - 7);
    tide_config_destroy(cfg);
    unlink(path);

    /* 199 bytes would be cut by inih: refused with file:line and the lengths. */
    n = snprintf(text, sizeof text, "[test]\nname = %.*s\r\n", 199 - 7, value);
    path = write_temp(text, (size_t)n);
    cfg = make_cfg();
    log_clear();
    CHECK_EQ_INT(tide_config_load_file(cfg, path), TIDE_E_CONFIG);
    char want[160];
    snprintf(want, sizeof want, "%s:2: line is 199 bytes long; the INI reader takes at most 198",
             path);
    CHECK_CONTAINS(log_buf, want);
    CHECK(!strcmp(tide_opts_str(tide_config_section(cfg, "test"), "name"), ""));
    tide_config_destroy(cfg);
    unlink(path);

    /* A NUL byte inside a line. */
    static const char nul[] = "[test]\nname = a\0b\n";
    path = write_temp(nul, sizeof nul - 1);
    cfg = make_cfg();
    log_clear();
    CHECK_EQ_INT(tide_config_load_file(cfg, path), TIDE_E_CONFIG);
    snprintf(want, sizeof want, "%s:2: line contains a NUL byte", path);
    CHECK_CONTAINS(log_buf, want);
    tide_config_destroy(cfg);
    unlink(path);
}

/* Write text to dir/name (a test's own folder); returns the path (static). */
static const char *write_in(const char *dir, const char *name, const char *text)
{
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

/* Files layer in order, the later winning; a key may be set once per file
 * but again by a later one. Each file's values share a source id. */
static void test_layers(void)
{
    char dir[] = "/tmp/tide-layers-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char base[4200], over[4200];
    snprintf(base, sizeof base, "%s",
             write_in(dir, "base.ini", "[generation]\nsteps = 16\nthreshold = 0.9\n"));
    snprintf(over, sizeof over, "%s", write_in(dir, "over.ini", "[generation]\nsteps = 24\n"));
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    log_clear();
    CHECK_EQ_INT(tide_config_load_file(cfg, base), TIDE_OK);
    CHECK_EQ_INT(tide_config_load_file(cfg, over), TIDE_OK);
    CHECK_EQ_INT(tide_config_set(cfg, "generation.block_length=8"), TIDE_OK);
    CHECK_EQ_INT(log_count, 0);
    const struct tide_opts *gen = tide_config_section(cfg, "generation");
    CHECK_EQ_INT(tide_opts_int(gen, "steps"), 24);
    CHECK_NEAR(tide_opts_float(gen, "threshold"), 0.9, 1e-12);
    CHECK(!strcmp(tide_opts_origin(gen, "steps"), "over.ini:2"));
    CHECK(!strcmp(tide_opts_origin(gen, "threshold"), "base.ini:3"));
    const int s_steps = tide_config_source(cfg, "generation", "steps"),
              s_thr = tide_config_source(cfg, "generation", "threshold");
    CHECK(s_steps > 0 && s_thr > 0 && s_steps != s_thr);
    CHECK_EQ_INT(tide_config_source(cfg, "generation", "seed"), TIDE_CONFIG_SRC_DEFAULT);
    CHECK_EQ_INT(tide_config_source(cfg, "generation", "block_length"), TIDE_CONFIG_SRC_CMDLINE);
    /* A clone keeps the sources. */
    struct tide_config *c2 = tide_config_clone(cfg);
    CHECK(c2 != NULL);
    if (c2)
        CHECK_EQ_INT(tide_config_source(c2, "generation", "steps"), s_steps);
    tide_config_destroy(c2);
    tide_config_destroy(cfg);
    remove(base);
    remove(over);
    rmdir(dir);
}

/* include = FILE: at the top or in a section, relative to the including
 * file; later lines win; missing files and cycles name both files. */
static void test_include(void)
{
    char dir[] = "/tmp/tide-include-XXXXXX", sub[4200];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(sub, sizeof sub, "%s/parts", dir);
    CHECK_EQ_INT(mkdir(sub, 0777), 0);
    char paths[8][4200];
    snprintf(paths[0], sizeof paths[0], "%s",
             write_in(sub, "gen.ini", "[generation]\nsteps = 20\nthreshold = 0.8\n"));
    snprintf(paths[1], sizeof paths[1], "%s", write_in(sub, "pol.ini", "[policy]\nbudget = 3\n"));
    snprintf(paths[2], sizeof paths[2], "%s",
             write_in(dir, "main.ini",
                      "include = parts/gen.ini\n[generation]\nthreshold = 0.7\n[policy]\n"
                      "include = parts/pol.ini\nplugin = policy-lru\n"));
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    log_clear();
    CHECK_EQ_INT(tide_config_load_file(cfg, paths[2]), TIDE_OK);
    CHECK_EQ_INT(log_count, 0);
    const struct tide_opts *gen = tide_config_section(cfg, "generation"),
                           *pol = tide_config_section(cfg, "policy");
    CHECK_EQ_INT(tide_opts_int(gen, "steps"), 20);
    CHECK(!strcmp(tide_opts_origin(gen, "steps"), "gen.ini:2"));
    CHECK_NEAR(tide_opts_float(gen, "threshold"), 0.7, 1e-12); /* the includer's later line */
    CHECK(!strcmp(tide_opts_origin(gen, "threshold"), "main.ini:3"));
    CHECK_EQ_INT(tide_opts_int(pol, "budget"), 3);
    CHECK(!strcmp(tide_opts_origin(pol, "budget"), "pol.ini:2"));
    CHECK(!strcmp(tide_opts_str(pol, "plugin"), "policy-lru"));
    CHECK(tide_config_source(cfg, "generation", "steps") !=
          tide_config_source(cfg, "generation", "threshold"));
    CHECK(tide_config_path(cfg) && !strcmp(tide_config_path(cfg), paths[2]));
    tide_config_destroy(cfg);

    /* A missing file names the includer (and its line) and the file. */
    snprintf(paths[3], sizeof paths[3], "%s",
             write_in(dir, "missing.ini", "[model]\ninclude = nope.ini\n"));
    tide_config_destroy(load_expect(paths[3], TIDE_E_CONFIG, "missing.ini:2: include = nope.ini",
                                    "cannot open", "/nope.ini", NULL));
    /* A cycle: a.ini -> b.ini -> a.ini, and a file including itself. */
    snprintf(paths[4], sizeof paths[4], "%s", write_in(dir, "a.ini", "include = b.ini\n"));
    snprintf(paths[5], sizeof paths[5], "%s",
             write_in(dir, "b.ini", "[generation]\nsteps = 3\ninclude = a.ini\n"));
    tide_config_destroy(load_expect(paths[4], TIDE_E_CONFIG, "b.ini:3: include = a.ini",
                                    "a.ini is already being read", "include cycles are refused",
                                    NULL));
    snprintf(paths[6], sizeof paths[6], "%s", write_in(dir, "self.ini", "include = self.ini\n"));
    tide_config_destroy(load_expect(paths[6], TIDE_E_CONFIG, "self.ini:1: include = self.ini",
                                    "include cycles are refused", NULL));
    /* An error inside the included file names that file's line. */
    snprintf(paths[7], sizeof paths[7], "%s",
             write_in(dir, "bad.ini", "[generation]\ninclude = b2.ini\n"));
    char b2[4200];
    snprintf(b2, sizeof b2, "%s", write_in(dir, "b2.ini", "[generation]\nsteps = 0\n"));
    tide_config_destroy(load_expect(paths[7], TIDE_E_CONFIG, "b2.ini:2: [generation] steps = '0'",
                                    "bad.ini:2: included", NULL));
    for (int i = 0; i < 8; i++)
        remove(paths[i]);
    remove(b2);
    rmdir(sub);
    rmdir(dir);
}

/* A plugin's section whose plugin is not found says so, and where it looked. */
static void test_plugin_section_not_found(void)
{
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    CHECK_EQ_INT(tide_config_set_plugin_dirs(cfg, "/a/plugins, /b/plugins"), TIDE_OK);
    log_clear();
    CHECK_EQ_INT(tide_config_load_text(cfg, "t.ini", "[policy-window]\nsize = 3\n"), TIDE_E_CONFIG);
    CHECK_CONTAINS(log_buf, "t.ini:1: [policy-window]: plugin not found");
    CHECK_CONTAINS(log_buf, "no plugin named 'policy-window'");
    CHECK_CONTAINS(log_buf, "/a/plugins, /b/plugins");
    CHECK_CONTAINS(log_buf, "TIDE_PLUGIN_PATH");
    log_clear();
    CHECK_EQ_INT(tide_config_set(cfg, "policy-window.size=3"), TIDE_E_CONFIG);
    CHECK_CONTAINS(log_buf, "[policy-window]: plugin not found");
    tide_config_destroy(cfg);
}

static void test_missing_file(void)
{
    struct tide_config *cfg = load_expect("no-such-file.ini", TIDE_E_CONFIG, "config: cannot open",
                                          "no-such-file.ini: No such file or directory", NULL);
    tide_config_destroy(cfg);
}

static void test_set_errors(void)
{
    static const struct {
        const char *arg, *msg;
    } cases[] = {
        {"generation.steps", "--set generation.steps: expected section.key=value"},
        {"steps=3", "--set steps=3: expected section.key=value"},
        {".steps=3", "--set .steps=3: expected section.key=value"},
        {"generation.=3", "--set generation.=3: expected section.key=value"},
        {"threshold=0.5", "--set threshold=0.5: expected section.key=value"},
        {"generation.steps=abc",
         "--set generation.steps=abc: [generation] steps = 'abc': expected an integer in [1,4096]"},
        {"generation.steps=", "--set generation.steps=: [generation] steps = '': expected an "
                              "integer"},
        {"generaton.steps=3", "--set generaton.steps=3: unknown section [generaton]; did you mean "
                              "[generation]?"},
        {"generation.stepz=3", "--set generation.stepz=3: unknown key 'stepz' in [generation]; did "
                               "you mean 'steps'?"},
        {"test.mode=medium", "[test] mode = 'medium': expected one of fast|slow|auto"},
    };
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        log_clear();
        CHECK_EQ_INT(tide_config_set(cfg, cases[i].arg), TIDE_E_CONFIG);
        CHECK_CONTAINS(log_buf, cases[i].msg);
        CHECK_EQ_INT(log_count, 1);
    }
    /* None of them changed anything. */
    const struct tide_opts *gen = tide_config_section(cfg, "generation");
    CHECK_EQ_INT(tide_opts_int(gen, "steps"), 32);
    CHECK(!strcmp(tide_opts_origin(gen, "steps"), "default"));
    /* A value may hold '=' and '.'. */
    CHECK_EQ_INT(tide_config_set(cfg, "test.name=a.b=c"), TIDE_OK);
    CHECK(!strcmp(tide_opts_str(tide_config_section(cfg, "test"), "name"), "a.b=c"));
    tide_config_destroy(cfg);
}

static void test_getter_misuse(void)
{
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    const struct tide_opts *gen = tide_config_section(cfg, "generation");
    log_clear();
    CHECK_EQ_INT(tide_opts_int(gen, "threshold"), 0); /* a float read as int */
    CHECK_CONTAINS(log_buf, "[generation] threshold is not a declared int option (a bug)");
    log_clear();
    CHECK_EQ_INT(tide_opts_bool(gen, "no_such_key"), 0);
    CHECK_CONTAINS(log_buf, "[generation] no_such_key is not a declared bool option");
    log_clear();
    CHECK(!strcmp(tide_opts_str(NULL, "x"), ""));
    CHECK_CONTAINS(log_buf, "option 'x' read from a missing section");
    tide_config_destroy(cfg);
}

static void test_schema_errors(void)
{
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    log_clear();
    CHECK_EQ_INT(tide_config_add_section(cfg, "generation", test_options, "some-plugin", NULL),
                 TIDE_E_INVAL);
    CHECK_CONTAINS(log_buf, "section [generation] is declared twice (by some-plugin)");
    static const struct tide_option bad_default[] = {
        {"n", TIDE_OPT_INT, "many", "bad default", NULL, NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    log_clear();
    CHECK_EQ_INT(tide_config_add_section(cfg, "bad", bad_default, "bad-plugin", NULL),
                 TIDE_E_INVAL);
    CHECK_CONTAINS(log_buf, "default of [bad] n = 'many' does not parse (expected an integer)");
    CHECK_CONTAINS(log_buf, "a bug in bad-plugin");
    /* A section without options is fine, and says so in "did you mean". */
    CHECK_EQ_INT(tide_config_add_section(cfg, "empty", NULL, "empty-plugin", NULL), TIDE_OK);
    log_clear();
    CHECK_EQ_INT(tide_config_set(cfg, "empty.x=1"), TIDE_E_CONFIG);
    CHECK_CONTAINS(log_buf, "unknown key 'x' in [empty]; this section has no options");
    tide_config_destroy(cfg);
}

static void test_doc(void)
{
    struct tide_config *cfg = make_cfg();
    if (!cfg)
        return;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    if (!f) {
        tide_config_destroy(cfg);
        return;
    }
    tide_config_doc(cfg, f);
    fclose(f);
    CHECK(!strncmp(text, "# TIDE configuration reference\n", 31));
    CHECK_CONTAINS(text, "\n## [generation]\n\nBlock-diffusion decoding.\n\n"
                         "| key | type | default | description |\n|---|---|---|---|\n");
    CHECK_CONTAINS(text,
                   "| `steps` | int in [1,4096] | `32` | denoising steps per block, capped at "
                   "gen_length / minimal_topk as in the official generate() |\n");
    CHECK_CONTAINS(text, "\n## [test]\n\nOptions of the plugin `test-plugin`. Test options.\n");
    CHECK_CONTAINS(text, "| `count` | int in [-100,100] | `0` | an integer |\n");
    CHECK_CONTAINS(text, "| `ratio` | float in (0,1] | `0.5` | a fraction |\n");
    CHECK_CONTAINS(text, "| `flag` | bool | `true` | a switch |\n");
    CHECK_CONTAINS(text, "| `name` | string | `` | free text |\n");
    CHECK_CONTAINS(text, "| `mode` | enum: fast/slow/auto | `fast` | a choice |\n");
    CHECK_CONTAINS(text, "| `bytes` | size in [1,] | `4KiB` | a size |\n");
    /* Core sections first, in their order, then the others. */
    const char *m = strstr(text, "## [model]"), *b = strstr(text, "## [backend]"),
               *p = strstr(text, "## [policy]"), *g = strstr(text, "## [generation]"),
               *o = strstr(text, "## [output]"), *t = strstr(text, "## [test]");
    CHECK(m && b && p && g && o && t && m < b && b < p && p < g && g < o && o < t);
    free(text);
    tide_config_destroy(cfg);
}

static void test_parse_size(void)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        {"4096", 4096},
        {"0", 0},
        {"10B", 10},
        {" 7 ", 7},
        {"1k", 1024},
        {"1K", 1024},
        {"1KiB", 1024},
        {"1.5KiB", 1536},
        {"1kb", 1000},
        {"2KB", 2000},
        {"512MiB", 512ull << 20},
        {"512 MiB", 512ull << 20},
        {"512m", 512ull << 20},
        {"12GiB", 12ull << 30},
        {"12g", 12ull << 30},
        {"1.5GB", 1500000000ull},
        {"3MB", 3000000ull},
        {"1TiB", 1ull << 40},
        {"2TB", 2000000000000ull},
    };
    static const char *bad[] = {
        "",
        "junk",
        "-1",
        "-1KiB",
        "1.5",
        "12XB",
        "12 parsecs",
        "KiB",
        "1.5.3",
        "nan",
        "inf",
        "15EiB",
        "1 2",
        "99999999999999999999",
        "17179869184GiB", /* 2^64 bytes */
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 12345;
        int rc = tide_parse_size(good[i].text, &v);
        CHECK_EQ_INT(rc, TIDE_OK);
        CHECK_EQ_INT(v, good[i].bytes);
        if (rc != TIDE_OK || v != good[i].bytes)
            fprintf(stderr, "  tide_parse_size(\"%s\")\n", good[i].text);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 12345;
        int rc = tide_parse_size(bad[i], &v);
        CHECK_EQ_INT(rc, TIDE_E_INVAL);
        CHECK_EQ_INT(v, 12345); /* untouched on failure */
        if (rc != TIDE_E_INVAL)
            fprintf(stderr, "  tide_parse_size(\"%s\") accepted it as %llu\n", bad[i],
                    (unsigned long long)v);
    }
    uint64_t v;
    CHECK_EQ_INT(tide_parse_size(NULL, &v), TIDE_E_INVAL);
    /* The largest sizes below 2^64 still parse. */
    CHECK_EQ_INT(tide_parse_size("15TiB", &v), TIDE_OK);
    CHECK_EQ_INT(v, 15ull << 40);
}

int main(void)
{
    if (!getenv("TIDE_TEST_DATA"))
        TEST_SKIP("TIDE_TEST_DATA is not set (run through ctest)");
    tide_log_set_level(TIDE_LOG_INFO);
    tide_log_set_sink(log_capture, NULL);
    TEST_RUN(test_defaults);
    TEST_RUN(test_good_file);
    TEST_RUN(test_unknown_key);
    TEST_RUN(test_unknown_section);
    TEST_RUN(test_bad_values);
    TEST_RUN(test_ranges);
    TEST_RUN(test_outside_section);
    TEST_RUN(test_syntax_error);
    TEST_RUN(test_duplicate_key);
    TEST_RUN(test_continuation_line);
    TEST_RUN(test_long_and_nul_lines);
    TEST_RUN(test_missing_file);
    TEST_RUN(test_layers);
    TEST_RUN(test_include);
    TEST_RUN(test_plugin_section_not_found);
    TEST_RUN(test_set_errors);
    TEST_RUN(test_getter_misuse);
    TEST_RUN(test_schema_errors);
    TEST_RUN(test_doc);
    TEST_RUN(test_parse_size);
    tide_log_set_sink(NULL, NULL);
    TEST_DONE();
}
