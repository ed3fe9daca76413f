#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core_options.h"
#include "engine.h"
#include "decode.h"
#include "tide/log.h"
#include "tide/moe.h"
#include "tide/profile.h"
#include "tide/quant.h"
#include "tide/shipped.h"
#include "tide/status.h"
#include "tide/trace_write.h"

int cli_common_arg(struct cli_ctx *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    const char *val = NULL;
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
        /* As `tide --quiet COMMAND`: warnings and errors only, no progress line. */
        tide_log_set_level(TIDE_LOG_WARN);
        return 1;
    }
    bool is_cfg = !strcmp(a, "-c") || !strcmp(a, "--config");
    bool is_set = !strcmp(a, "--set");
    if (!strncmp(a, "--config=", 9)) {
        is_cfg = true;
        val = a + 9;
    } else if (!strncmp(a, "--set=", 6)) {
        is_set = true;
        val = a + 6;
    }
    if (!is_cfg && !is_set)
        return 0;
    if (!val) {
        if (*i + 1 >= argc) {
            tide_error("%s needs a value", a);
            return -1;
        }
        val = argv[++*i];
    }
    if (is_cfg) {
        if (c->n_configs == CLI_MAX_CONFIGS) {
            tide_error("too many -c files (at most %d)", CLI_MAX_CONFIGS);
            return -1;
        }
        c->configs[c->n_configs++] = val;
        return 1;
    }
    if (c->n_sets == CLI_MAX_SETS) {
        tide_error("too many --set options (at most %d)", CLI_MAX_SETS);
        return -1;
    }
    c->sets[c->n_sets++] = val;
    return 1;
}

int cli_setup(struct cli_ctx *c)
{
    int rc = tide_plugins_scan(&c->plugins);
    if (rc != TIDE_OK)
        return rc;
    c->cfg = tide_config_create();
    if (!c->cfg)
        return TIDE_E_NOMEM;
    if ((rc = tide_core_register_sections(c->cfg)) != TIDE_OK ||
        (rc = tide_config_add_plugins(c->cfg, c->plugins)) != TIDE_OK)
        return rc;
    for (int i = 0; i < c->n_configs; i++) {
        char path[PATH_MAX];
        /* A -c file that is not there is a configuration error (exit 2). */
        if (tide_shipped_path(c->configs[i], "-c", path, sizeof path) != TIDE_OK)
            return TIDE_E_CONFIG;
        if ((rc = tide_config_load_file(c->cfg, path)) != TIDE_OK)
            return rc == TIDE_E_IO || rc == TIDE_E_NOTFOUND ? TIDE_E_CONFIG : rc;
    }
    int bad = 0;
    for (int i = 0; i < c->n_sets; i++)
        if (tide_config_set(c->cfg, c->sets[i]) != TIDE_OK)
            bad++;
    return bad ? TIDE_E_CONFIG : TIDE_OK;
}

/* [policy] profile as the policies see it. */
struct cli_costs {
    struct tide_profile prof;
    struct tide_cost cost;
    struct tide_policy_costs abi;
};

/* The costs of [policy] profile bound to experts of sh (NULL: the
 * profile's own expert). With c->scale_profile a profile measured for
 * another expert is scaled by expert bytes (as tide sim --scale-profile);
 * without, such a profile is refused here, naming the flag. */
static int cli_costs_for(struct cli_ctx *c, const struct tide_moe_shape *sh,
                         const struct tide_policy_costs **out)
{
    *out = NULL;
    const char *path = tide_opts_str(tide_config_section(c->cfg, "policy"), "profile");
    if (*path && !c->costs) {
        int rc;
        if (!(c->costs = calloc(1, sizeof *c->costs)))
            return TIDE_E_NOMEM;
        struct tide_profile *p = &c->costs->prof;
        if ((rc = tide_profile_load(path, p)) != TIDE_OK) {
            free(c->costs);
            c->costs = NULL;
            c->costs_failed = true;
            return rc;
        }
        /* Row counts of a step forward stay far below 1024; beyond,
         * policies extrapolate. Without a shape the tables are for the
         * profile's own expert: the dispatcher refuses them for a model
         * whose experts differ. */
        const int fmt = sh && sh->size > offsetof(struct tide_moe_shape, qfmt) ? sh->qfmt : 0;
        const bool fits = !sh || ((uint32_t)sh->hidden == p->hidden &&
                                  (uint32_t)sh->inter == p->inter && fmt == p->qfmt);
        if (!fits && !c->scale_profile) {
            tide_error("[policy] profile = %s was measured for experts of hidden %u x inter %u "
                       "(%s), the model's are hidden %d x inter %d (%s): pass --scale-profile "
                       "to scale its expert times by expert bytes, or measure this model with "
                       "`tide profile --model DIR`",
                       path, p->hidden, p->inter, tide_qfmt_name(p->qfmt), sh->hidden, sh->inter,
                       tide_qfmt_name(fmt));
            rc = TIDE_E_CONFIG;
        } else {
            rc = fits ? tide_cost_init(&c->costs->cost, p, p->hidden, p->inter, false, path, 1024)
                      : tide_cost_init_fmt(&c->costs->cost, p, (uint32_t)sh->hidden,
                                           (uint32_t)sh->inter, fmt, true, path, 1024);
        }
        if (rc != TIDE_OK) {
            free(c->costs);
            c->costs = NULL;
            c->costs_failed = true;
            return rc;
        }
        if (!fits)
            tide_warn("profile %s is for hidden %u x inter %u; its expert times are scaled by "
                      "%.3f for the model's hidden %d x inter %d (--scale-profile)",
                      p->name, p->hidden, p->inter, c->costs->cost.scale, sh->hidden, sh->inter);
        tide_cost_policy_costs(&c->costs->cost, &c->costs->abi);
    }
    if (c->costs)
        *out = &c->costs->abi;
    return TIDE_OK;
}

int cli_policy_costs(struct cli_ctx *c, const struct tide_policy_costs **out)
{
    return cli_costs_for(c, NULL, out);
}

int cli_engine_open(struct cli_ctx *c, struct tide_engine **e)
{
    const struct tide_policy_costs *costs = NULL;
    int rc = tide_engine_prepare(c->cfg, c->plugins, e);
    if (rc == TIDE_OK)
        rc = tide_engine_load_model(*e, c->plugins);
    /* The model's expert shape is known now: the costs fit it (or scale). */
    if (rc == TIDE_OK)
        rc = cli_costs_for(c, (*e)->moe ? tide_moe_get_shape((*e)->moe) : NULL, &costs);
    if (rc != TIDE_OK)
        return rc;
    if (costs)
        tide_engine_set_policy_costs(*e, costs);
    int budget;
    if ((rc = tide_engine_config_budget(*e, &budget)) != TIDE_OK)
        return rc;
    return tide_engine_place(
        *e, c->plugins, tide_opts_str(tide_config_section(c->cfg, "policy"), "plugin"), budget);
}

void cli_teardown(struct cli_ctx *c)
{
    if (c->costs)
        tide_cost_free(&c->costs->cost);
    free(c->costs);
    c->costs = NULL;
    tide_config_destroy(c->cfg);
    c->cfg = NULL;
    tide_plugins_free(c->plugins);
    c->plugins = NULL;
}

const struct tide_model_ops *cli_model_plugin(const char *name, const char *what,
                                              struct tide_plugin_set **set)
{
    *set = NULL;
    if (tide_plugins_scan(set) != TIDE_OK)
        return NULL;
    const struct tide_plugin *p = tide_plugins_get(*set, name, TIDE_PLUGIN_MODEL, what);
    return p ? p->desc->ops : NULL;
}

int cli_exit_code(int status)
{
    switch (status) {
    case TIDE_OK:
        return CLI_EXIT_OK;
    case TIDE_E_CONFIG:
        return CLI_EXIT_USAGE;
    case TIDE_E_INTERRUPTED:
        return CLI_EXIT_INTERRUPTED;
    }
    return CLI_EXIT_RUNTIME;
}

int cli_parse_ids(const char *text, const char *what, int32_t **ids, size_t *n)
{
    size_t cap = 16, len = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v)
        return TIDE_E_NOMEM;
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            tide_error("%s: '%s' is not a comma-separated list of token ids", what, text);
            free(v);
            return TIDE_E_CONFIG;
        }
        if (len == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                free(v);
                return TIDE_E_NOMEM;
            }
            v = nv;
            cap *= 2;
        }
        v[len++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (!len) {
        tide_error("%s: no token ids given", what);
        free(v);
        return TIDE_E_CONFIG;
    }
    *ids = v;
    *n = len;
    return TIDE_OK;
}

int cli_read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tide_error("cannot open %s: %s", path, strerror(errno));
        return TIDE_E_IO;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf)
        return TIDE_E_NOMEM;
    if (err) {
        tide_error("cannot read %s", path);
        free(buf);
        return TIDE_E_IO;
    }
    buf[n] = 0;
    /* Callers use the text as a C string: a NUL would silently cut it. */
    size_t nul = strlen(buf);
    if (nul < n) {
        tide_error("%s: holds a NUL byte at offset %zu (not a text file?)", path, nul);
        free(buf);
        return TIDE_E_FORMAT;
    }
    *out = buf;
    *len = n;
    return TIDE_OK;
}

static void cli_on_sigint(int sig)
{
    (void)sig;
    tide_request_stop();
}

void cli_catch_interrupt(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cli_on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

int cli_output_open(const struct tide_opts *output, const char *key, FILE **f, const char **path)
{
    *path = tide_opts_str(output, key);
    return cli_output_open_path(key, *path, tide_opts_origin(output, key),
                                tide_opts_bool(output, "overwrite"), f);
}

void cli_print_offload_summary(const struct tide_engine_info *info,
                               const struct tide_offload_stats *t, double seconds, int64_t tokens)
{
    if (!info->n_moe_layers)
        return;
    fprintf(stderr,
            "\n%-14s %8s %9s %10s %10s %12s %12s %10s %9s\n"
            "%-14s %8d %8.2f%% %10llu %10llu %12.4f %12.4f %10.3f %9.2f\n",
            "policy", "budget", "hit rate", "host rows", "promoted", "weights GB", "acts GB",
            "host s", "tok/s", info->budget >= info->n_experts ? "(no offload)" : info->policy,
            info->budget, 100.0 * t->hit_rate, (unsigned long long)t->miss_rows,
            (unsigned long long)t->promotions, (double)t->weight_bytes / 1e9,
            (double)t->act_bytes / 1e9, t->host_seconds,
            seconds > 0 ? (double)tokens / seconds : 0.0);
}

void cli_cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 1 + (c[1] == ' ');
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, len, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

int cli_trace_open(const struct tide_engine *e, const char *path, bool overwrite,
                   struct tide_trace_writer **w, struct tide_trace_sink *sink)
{
    struct tide_trace_header h;
    int rc = tide_engine_trace_header(e, NULL, &h);
    if (rc == TIDE_OK)
        rc = tide_trace_writer_open(path, false, overwrite, &h, w);
    if (rc == TIDE_OK)
        *sink = tide_trace_writer_sink(*w);
    return rc;
}

int cli_mkdir_stamped(const char *root, const char *suffix, const char *what, char *dir, size_t len)
{
    cli_mkdir_parents(root);
    if (mkdir(root, 0777) != 0 && errno != EEXIST) {
        tide_error("%s = %s: cannot create it: %s", what, root, strerror(errno));
        return TIDE_E_IO;
    }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    for (int i = 0; i < 100; i++) {
        if (i)
            snprintf(dir, len, "%s/%s%s-%d", root, stamp, suffix, i);
        else
            snprintf(dir, len, "%s/%s%s", root, stamp, suffix);
        if (mkdir(dir, 0777) == 0)
            return TIDE_OK;
        if (errno != EEXIST)
            break;
    }
    tide_error("%s: cannot create a results folder under %s: %s", what, root, strerror(errno));
    return TIDE_E_IO;
}

bool cli_wants_help(int argc, char **argv, int from)
{
    for (int i = from; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return true;
    return false;
}

void cli_flag_hint(const char *arg, void (*usage)(FILE *), char *buf, size_t len)
{
    /* The candidates: every --flag that the command's own usage names. */
    char *text = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&text, &n);
    if (m) {
        usage(m);
        fclose(m);
    }
    enum { MAX_FLAGS = 64 };
    char *flags[MAX_FLAGS + 1];
    int nf = 0;
    for (char *p = text; p && (p = strstr(p, "--")) && nf < MAX_FLAGS;) {
        const size_t k = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
        if (k > 3 && (p == text || strchr(" [(`,|\n", p[-1])))
            flags[nf++] = strndup(p, k);
        p += k;
    }
    flags[nf] = NULL;
    cli_suggest_flag(arg, (const char *const *)flags, buf, len);
    for (int i = 0; i < nf; i++)
        free(flags[i]);
    free(text);
}

int cli_unexpected(const char *cmd, const char *arg, void (*usage)(FILE *))
{
    char hint[160];
    cli_flag_hint(arg, usage, hint, sizeof hint);
    fprintf(stderr, "tide %s: unexpected argument '%s'%s\n\n", cmd, arg, hint);
    usage(stderr);
    return CLI_EXIT_USAGE;
}

void cli_suggest_word(const char *word, const char *const *words, char *buf, size_t len)
{
    const char *best = NULL;
    int bd = 99;
    for (const char *const *w = words; *w; w++) {
        const int d = tide_edit_distance(word, *w);
        if (d < bd) {
            bd = d;
            best = *w;
        }
    }
    if (best && bd <= 1 + (int)strlen(best) / 4)
        snprintf(buf, len, "; did you mean '%s'?", best);
    else
        snprintf(buf, len, "%s", "");
}

void cli_suggest_flag(const char *arg, const char *const *flags, char *buf, size_t len)
{
    static const char *const common[] = {"--config", "--set", "--quiet", NULL};
    const char *best = NULL;
    int bd = 99;
    if (*arg != '-') {
        snprintf(buf, len, "%s", "");
        return;
    }
    for (const char *const *list = flags; list; list = list == common ? NULL : common)
        for (const char *const *f = list; *f; f++) {
            int d = tide_edit_distance(arg, *f);
            if (d < bd) {
                bd = d;
                best = *f;
            }
        }
    if (best && bd <= 1 + (int)strlen(best) / 4) {
        snprintf(buf, len, "; did you mean '%s'?", best);
        return;
    }
    snprintf(buf, len, "%s", "");
    /* --budget 8: a core option's key given as a flag. */
    char key[64];
    const char *k = arg + strspn(arg, "-");
    const char *eq = strchr(k, '=');
    const size_t n = eq ? (size_t)(eq - k) : strlen(k);
    struct tide_config *cfg = n && n < sizeof key ? tide_config_create() : NULL;
    if (!cfg)
        return;
    for (size_t i = 0; i < n; i++)
        key[i] = k[i] == '-' ? '_' : k[i];
    key[n] = 0;
    const char *sec =
        tide_core_register_sections(cfg) == TIDE_OK ? tide_config_key_section(cfg, key) : NULL;
    if (sec)
        snprintf(buf, len, "; did you mean '--set %s.%s=%s'?", sec, key, eq ? eq + 1 : "VALUE");
    tide_config_destroy(cfg);
}
