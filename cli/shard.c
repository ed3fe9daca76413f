/* Shards of a sweep: --shard K/N, manifests and the checks of `merge`
 * (cli/shard.h, docs/cluster.md). */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "shard.h"
#include "tide/log.h"
#include "tide/status.h"

#ifndef TIDE_GIT_REVISION
#define TIDE_GIT_REVISION "unknown"
#endif
#ifndef TIDE_VERSION_STRING
#define TIDE_VERSION_STRING "0.0.0"
#endif

int cli_shard_parse(const char *text, const char *what, struct cli_shard *out)
{
    char *end;
    errno = 0;
    long k = strtol(text, &end, 10);
    long n = -1;
    if (end != text && *end == '/') {
        const char *q = end + 1;
        n = strtol(q, &end, 10);
        if (end == q)
            n = -1;
    }
    if (errno || *end || n < 1 || n > CLI_SHARD_MAX || k < 0 || k >= n) {
        tide_error("%s %s: expected K/N, shard K of N with 0 <= K < N <= %d (e.g. 0/4)", what, text,
                   CLI_SHARD_MAX);
        return TIDE_E_CONFIG;
    }
    out->index = (int)k;
    out->count = (int)n;
    return TIDE_OK;
}

bool cli_shard_mine(const struct cli_shard *s, long config)
{
    return s->count <= 0 || config % s->count == s->index;
}

long cli_shard_size(const struct cli_shard *s, long configs)
{
    if (s->count <= 0)
        return configs;
    return configs / s->count + (s->index < configs % s->count);
}

uint64_t cli_fnv1a64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

json_t *cli_json_hex64(uint64_t v)
{
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)v);
    return json_string(hex);
}

int cli_file_fingerprint(const char *path, bool required, json_t **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT && !required) {
            *out = json_null();
            return TIDE_OK;
        }
        tide_error("cannot open %s: %s", path, strerror(errno));
        return errno == ENOENT ? TIDE_E_NOTFOUND : TIDE_E_IO;
    }
    uint64_t h = CLI_FNV1A64_INIT, size = 0;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        h = cli_fnv1a64(h, buf, got);
        size += got;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (bad) {
        tide_error("cannot read %s", path);
        return TIDE_E_IO;
    }
    *out = json_object();
    if (!*out)
        return TIDE_E_NOMEM;
    json_object_set_new(*out, "size", json_integer((json_int_t)size));
    json_object_set_new(*out, "fnv1a64", cli_json_hex64(h));
    return TIDE_OK;
}

json_t *cli_manifest_new(const char *command)
{
    char cpu[256], date[64];
    cli_cpu_model(cpu, sizeof cpu);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct utsname un;
    if (uname(&un) != 0)
        memset(&un, 0, sizeof un);
    json_t *m = json_object();
    if (!m)
        return NULL;
    json_object_set_new(m, "command", json_string(command));
    json_object_set_new(m, "tide_version", json_string(TIDE_VERSION_STRING));
    json_object_set_new(m, "git_revision", json_string(TIDE_GIT_REVISION));
    json_object_set_new(m, "date", json_string(date));
    json_object_set_new(m, "host", json_string(un.nodename));
    json_object_set_new(m, "kernel", json_string(un.release));
    json_object_set_new(m, "cpu", json_string(cpu));
    json_object_set_new(m, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    return m;
}

static bool cli_skipped(const char *section, const char *key, const char *const *skip)
{
    const size_t ls = strlen(section);
    for (; skip && *skip; skip++)
        if (!strncmp(*skip, section, ls) && (*skip)[ls] == '.' && !strcmp(*skip + ls + 1, key))
            return true;
    return false;
}

/* The config has no iterator: read back what tide_config_print writes,
 * "[section]" and "key = value  ; origin" lines. */
json_t *cli_config_values(const struct tide_config *cfg, const char *const *skip)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    tide_config_print(cfg, f, NULL);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    json_t *all = json_object(), *sec = NULL;
    char section[256] = "";
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); all && l; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] == '[') {
            snprintf(section, sizeof section, "%.*s", (int)strcspn(l + 1, "]"), l + 1);
            sec = json_object();
            json_object_set_new(all, section, sec);
            continue;
        }
        char *eq = strstr(l, " = ");
        if (!sec || !eq)
            continue;
        *eq = 0;
        char *val = eq + 3, *c = NULL;
        for (char *p = strstr(val, "  ; "); p; p = strstr(p + 1, "  ; "))
            c = p; /* the origin follows the last one */
        if (c)
            *c = 0;
        for (size_t n = strlen(val); n && val[n - 1] == ' '; n--)
            val[n - 1] = 0;
        if (!cli_skipped(section, l, skip))
            json_object_set_new(sec, l, json_string(val));
    }
    free(text);
    return all;
}

int cli_config_apply(struct tide_config *cfg, const json_t *values, const char *origin)
{
    const char *section, *key;
    const json_t *sec, *v;
    int bad = 0;
    json_object_foreach((json_t *)values, section, sec)
    {
        json_object_foreach((json_t *)sec, key, v)
        {
            if (!json_is_string(v) ||
                tide_config_set_value(cfg, section, key, json_string_value(v), origin) != TIDE_OK)
                bad++;
        }
    }
    return bad ? TIDE_E_CONFIG : TIDE_OK;
}

int cli_json_write(const char *path, const json_t *j)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(j, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
        rename(tmp, path) != 0) {
        tide_error("cannot write %s: %s", path, strerror(errno));
        remove(tmp);
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

void cli_mkdir_parents(const char *path)
{
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", path);
    for (char *p = strchr(parent + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = 0;
        mkdir(parent, 0777); /* a missing parent; failures show at the caller's mkdir */
        *p = '/';
    }
}

int cli_out_dir_create(const char *what, const char *path, bool *created)
{
    cli_mkdir_parents(path);
    *created = mkdir(path, 0777) == 0;
    if (*created)
        return TIDE_OK;
    if (errno != EEXIST) {
        tide_error("%s %s: cannot create it: %s", what, path, strerror(errno));
        return TIDE_E_IO;
    }
    DIR *d = opendir(path);
    if (!d) {
        tide_error("%s %s: exists and is not a readable folder", what, path);
        return TIDE_E_CONFIG;
    }
    const struct dirent *de;
    bool empty = true;
    while (empty && (de = readdir(d)))
        empty = !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
    closedir(d);
    if (!empty) {
        tide_error("%s %s: the folder exists and is not empty; refusing to write into it "
                   "(choose a new folder)",
                   what, path);
        return TIDE_E_CONFIG;
    }
    return TIDE_OK;
}

static int cli_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level > 0)
        remove(path);
    return 0;
}

void cli_out_dir_discard(const char *path, bool created)
{
    nftw(path, cli_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    if (created)
        rmdir(path);
}

int cli_copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in) {
        tide_error("cannot open %s: %s", src, strerror(errno));
        return TIDE_E_IO;
    }
    FILE *out = fopen(dst, "wb");
    if (!out) {
        tide_error("cannot create %s: %s", dst, strerror(errno));
        fclose(in);
        return TIDE_E_IO;
    }
    char buf[65536];
    size_t got;
    bool ok = true;
    while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, got, out) == got;
    ok = ok && !ferror(in);
    fclose(in);
    if (fclose(out) != 0)
        ok = false;
    if (!ok) {
        tide_error("cannot copy %s to %s", src, dst);
        remove(dst);
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

/* ---- Merging ---- */

static bool cli_is_result(const char *dir)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    return access(path, F_OK) == 0;
}

static int cli_part_add(const char *command, struct cli_parts *ps, const char *dir)
{
    struct cli_part *np = realloc(ps->part, sizeof *np * (size_t)(ps->n + 1));
    if (!np)
        return TIDE_E_NOMEM;
    ps->part = np;
    struct cli_part *p = &ps->part[ps->n];
    memset(p, 0, sizeof *p);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (!(p->dir = strndup(dir, len)))
        return TIDE_E_NOMEM;
    ps->n++;
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", p->dir);
    json_error_t err;
    p->m = json_load_file(path, 0, &err);
    if (!p->m || !json_is_object(p->m)) {
        tide_error("%s: not a JSON manifest (line %d: %s)", path, err.line,
                   p->m ? "not an object" : err.text);
        return TIDE_E_FORMAT;
    }
    const char *cmd = json_string_value(json_object_get(p->m, "command"));
    if (!cmd || strcmp(cmd, command)) {
        tide_error("%s: not a result of `tide %s`%s%s%s", p->dir, command,
                   cmd ? " (it is from `tide " : "", cmd ? cmd : "",
                   cmd ? "`)" : " (no \"command\" in its manifest.json)");
        return TIDE_E_CONFIG;
    }
    const json_t *sh = json_object_get(p->m, "shard");
    p->shard = (struct cli_shard){0, 1};
    if (sh) {
        json_int_t k = json_integer_value(json_object_get(sh, "index"));
        json_int_t n = json_integer_value(json_object_get(sh, "count"));
        if (n < 1 || n > CLI_SHARD_MAX || k < 0 || k >= n) {
            tide_error("%s: \"shard\" in manifest.json is not {\"index\": K, \"count\": N}", path);
            return TIDE_E_FORMAT;
        }
        p->shard = (struct cli_shard){(int)k, (int)n};
    }
    return TIDE_OK;
}

static int cli_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int cli_parts_load(const char *command, char *const *dirs, int n_dirs, struct cli_parts *out)
{
    memset(out, 0, sizeof *out);
    int rc = TIDE_OK;
    for (int i = 0; i < n_dirs && rc == TIDE_OK; i++) {
        if (cli_is_result(dirs[i])) {
            rc = cli_part_add(command, out, dirs[i]);
            continue;
        }
        DIR *d = opendir(dirs[i]);
        if (!d) {
            tide_error("%s: %s (not a `tide %s` result folder)", dirs[i], strerror(errno), command);
            return TIDE_E_CONFIG;
        }
        char **names = NULL;
        int n = 0;
        const struct dirent *de;
        while (rc == TIDE_OK && (de = readdir(d))) {
            char sub[4200];
            snprintf(sub, sizeof sub, "%s/%s", dirs[i], de->d_name);
            if (de->d_name[0] == '.' || !cli_is_result(sub))
                continue;
            char **nn = realloc(names, sizeof *nn * (size_t)(n + 1));
            if (!nn || !(nn[n] = strdup(sub)))
                rc = TIDE_E_NOMEM;
            if (nn)
                names = nn;
            n += rc == TIDE_OK;
        }
        closedir(d);
        qsort(names, (size_t)n, sizeof *names, cli_name_cmp);
        if (rc == TIDE_OK && !n) {
            tide_error("%s: no manifest.json in it or in its subfolders: not a `tide %s` result",
                       dirs[i], command);
            rc = TIDE_E_CONFIG;
        }
        for (int k = 0; k < n && rc == TIDE_OK; k++)
            rc = cli_part_add(command, out, names[k]);
        for (int k = 0; k < n; k++)
            free(names[k]);
        free(names);
    }
    return rc;
}

bool cli_json_diff(const json_t *a, const json_t *b, char *path, size_t len)
{
    if (!a || !b)
        return a != b;
    if (json_is_object(a) && json_is_object(b)) {
        const char *key;
        const json_t *v;
        const size_t at = strlen(path);
        for (int pass = 0; pass < 2; pass++) {
            const json_t *x = pass ? b : a, *y = pass ? a : b;
            json_object_foreach((json_t *)x, key, v)
            {
                snprintf(path + at, len - at, "%s%s", at ? "." : "", key);
                const json_t *w = json_object_get(y, key);
                if (!w || (!pass && cli_json_diff(v, w, path, len)))
                    return true;
            }
        }
        path[at] = 0;
        return false;
    }
    if (json_is_array(a) && json_is_array(b) && json_array_size(a) == json_array_size(b)) {
        const size_t at = strlen(path);
        for (size_t i = 0; i < json_array_size(a); i++) {
            snprintf(path + at, len - at, "[%zu]", i);
            if (cli_json_diff(json_array_get(a, i), json_array_get(b, i), path, len))
                return true;
        }
        path[at] = 0;
        return false;
    }
    return !json_equal((json_t *)a, (json_t *)b);
}

char *cli_json_at(const json_t *j, const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf; j && *p;) {
        if (*p == '.') {
            p++;
            continue;
        }
        if (*p == '[') {
            j = json_array_get(j, strtoul(p + 1, &p, 10));
            p += *p == ']';
            continue;
        }
        size_t n = strcspn(p, ".[");
        char c = p[n];
        p[n] = 0;
        j = json_object_get(j, p);
        p[n] = c;
        p += n;
    }
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    return s ? s : strdup("(absent)");
}

int cli_parts_check(const char *command, struct cli_parts *ps, const char *const *same)
{
    if (!ps->n) {
        tide_error("tide %s merge: no result folders given", command);
        return TIDE_E_CONFIG;
    }
    const struct cli_part *p0 = &ps->part[0];
    for (int i = 1; i < ps->n; i++) {
        const struct cli_part *p = &ps->part[i];
        char path[1024] = "";
        const char *field = NULL;
        if (p->shard.count != p0->shard.count)
            field = "shard.count";
        for (const char *const *k = same; !field && *k; k++) {
            snprintf(path, sizeof path, "%s", *k);
            if (cli_json_diff(json_object_get(p0->m, *k), json_object_get(p->m, *k), path,
                              sizeof path))
                field = path;
        }
        if (field) {
            char *va = cli_json_at(p0->m, field), *vb = cli_json_at(p->m, field);
            tide_error("tide %s merge: %s and %s are not shards of one sweep: %s differs (%s in "
                       "the first, %s in the second)",
                       command, p0->dir, p->dir, field, va ? va : "?", vb ? vb : "?");
            free(va);
            free(vb);
            return TIDE_E_CONFIG;
        }
    }
    ps->count = p0->shard.count;
    ps->by_index = calloc((size_t)ps->count, sizeof *ps->by_index);
    if (!ps->by_index)
        return TIDE_E_NOMEM;
    for (int i = 0; i < ps->n; i++) {
        struct cli_part *p = &ps->part[i];
        struct cli_part **slot = &ps->by_index[p->shard.index];
        if (*slot) {
            tide_error("tide %s merge: shard %d of %d is given twice: %s and %s (remove the one "
                       "you do not want)",
                       command, p->shard.index, ps->count, (*slot)->dir, p->dir);
            return TIDE_E_CONFIG;
        }
        *slot = p;
    }
    int rc = TIDE_OK;
    for (int k = 0; k < ps->count; k++)
        if (ps->by_index[k] && json_is_true(json_object_get(ps->by_index[k]->m, "interrupted"))) {
            tide_error("tide %s merge: shard %d of %d (%s) was interrupted; run it again", command,
                       k, ps->count, ps->by_index[k]->dir);
            rc = TIDE_E_INVAL;
        }
    int missing = 0;
    char list[512] = "";
    for (int k = 0; k < ps->count; k++)
        if (!ps->by_index[k]) {
            size_t at = strlen(list);
            if (at < sizeof list - 16)
                snprintf(list + at, sizeof list - at, "%s%d", missing ? ", " : "", k);
            else if (!strstr(list, "..."))
                snprintf(list + at, sizeof list - at, ", ...");
            missing++;
        }
    if (missing) {
        tide_error("tide %s merge: %d of %d shards missing: %s %s (run them with --shard K/%d, "
                   "then merge again)",
                   command, missing, ps->count, missing > 1 ? "shards" : "shard", list, ps->count);
        rc = TIDE_E_INVAL;
    }
    return rc;
}

void cli_parts_free(struct cli_parts *ps)
{
    for (int i = 0; i < ps->n; i++) {
        free(ps->part[i].dir);
        json_decref(ps->part[i].m);
    }
    free(ps->part);
    free(ps->by_index);
    memset(ps, 0, sizeof *ps);
}

void cli_utc_now(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

json_t *cli_parts_manifest(const struct cli_parts *ps)
{
    json_t *m = json_deep_copy(ps->by_index[0]->m);
    json_t *shards = json_array(), *hosts = json_array();
    if (!m || !shards || !hosts) {
        json_decref(m);
        json_decref(shards);
        json_decref(hosts);
        return NULL;
    }
    json_object_del(m, "shard");
    static const char *const keep[] = {"host",  "date",           "cpu",
                                       "cores", "device_backend", "host_backend"};
    for (int k = 0; k < ps->count; k++) {
        const json_t *pm = ps->by_index[k]->m;
        json_t *s = json_object();
        json_object_set_new(s, "index", json_integer(k));
        json_object_set_new(s, "dir", json_string(ps->by_index[k]->dir));
        for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
            if (json_object_get(pm, keep[i]))
                json_object_set(s, keep[i], json_object_get(pm, keep[i]));
        json_array_append_new(shards, s);
        const json_t *h = json_object_get(pm, "host"), *v;
        size_t i;
        bool seen = false;
        json_array_foreach(hosts, i, v) seen |= json_equal(v, (json_t *)h);
        if (h && !seen)
            json_array_append(hosts, (json_t *)h);
    }
    char date[64];
    cli_utc_now(date, sizeof date);
    json_object_set_new(m, "merged", json_string(date));
    json_object_set_new(m, "shards", shards);
    json_object_set_new(m, "hosts", hosts);
    return m;
}
