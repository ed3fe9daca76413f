/* Fuzz target: an INI configuration file plus --set overrides. The input is
 * cut at "\n#SET#\n": the first part is the file, each later part one
 * "section.key=value" (up to its first NUL, as on a command line). The core
 * sections and a section with every option type are registered. Whatever is
 * accepted must print and read back through the typed getters. */
#include "config.h"
#include "core_options.h"
#include "fuzz_common.h"

#define SEP "\n#SET#\n"

static const struct tide_option ini_test_options[] = {
    {"count", TIDE_OPT_INT, "0", "an integer", NULL, "[-100,100]"},
    {"ratio", TIDE_OPT_FLOAT, "0.5", "a number", NULL, "(0,1]"},
    {"flag", TIDE_OPT_BOOL, "false", "a boolean", NULL, NULL},
    {"name", TIDE_OPT_STRING, "", "a string", NULL, NULL},
    {"mode", TIDE_OPT_ENUM, "fast", "an enum", "fast|slow|auto", NULL},
    {"bytes", TIDE_OPT_SIZE, "0", "a size", NULL, "[0,1099511627776]"},
    {"any", TIDE_OPT_INT, "0", "an integer in no range", NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull && !(devnull = fopen("/dev/null", "w")))
        abort();
    fz_begin();
    const uint8_t *parts[9];
    size_t lens[9];
    int n = fz_split(data, size, SEP, parts, lens, 9);
    struct tide_config *cfg = tide_config_create();
    FZ_ASSERT(cfg);
    FZ_ASSERT(tide_core_register_sections(cfg) == TIDE_OK);
    FZ_ASSERT(tide_config_add_section(cfg, "test", ini_test_options, "fuzz", "every type") ==
              TIDE_OK);
    const char *path = fz_write("config.ini", parts[0], lens[0]);
    int rc = tide_config_load_file(cfg, path);
    fz_check_status(rc);
    for (int i = 1; i < n; i++) {
        char *set = fz_strndup(parts[i], lens[i]);
        fz_errors = 0;
        fz_check_status(tide_config_set(cfg, set));
        free(set);
    }
    tide_config_print(cfg, devnull, NULL);
    const struct tide_opts *o = tide_config_section(cfg, "test");
    FZ_ASSERT(o);
    fz_errors = 0;
    int64_t count = tide_opts_int(o, "count");
    double ratio = tide_opts_float(o, "ratio");
    uint64_t bytes = tide_opts_size(o, "bytes");
    const char *mode = tide_opts_str(o, "mode");
    FZ_ASSERT(fz_errors == 0);
    FZ_ASSERT(count >= -100 && count <= 100);
    FZ_ASSERT(ratio > 0 && ratio <= 1);
    FZ_ASSERT(bytes <= 1099511627776ull);
    FZ_ASSERT(!strcmp(mode, "fast") || !strcmp(mode, "slow") || !strcmp(mode, "auto"));
    (void)tide_opts_bool(o, "flag");
    (void)tide_opts_str(o, "name");
    const struct tide_opts *g = tide_config_section(cfg, "generation");
    FZ_ASSERT(g && tide_opts_int(g, "block_length") >= 1);
    FZ_ASSERT(tide_opts_float(g, "threshold") > 0 && tide_opts_float(g, "threshold") <= 1);
    tide_config_destroy(cfg);
    return 0;
}
