/* tide_shipped_path (tide/shipped.h). */
#include "tide/shipped.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tide/log.h"
#include "tide/status.h"

/* <parent of file's folder>/share/tide into buf; false if unknown. */
static bool sh_share_of(const char *file, char *buf)
{
    char real[PATH_MAX], up[PATH_MAX + 8];
    if (!file || !realpath(file, real))
        return false;
    char *slash = strrchr(real, '/');
    if (!slash)
        return false;
    *slash = 0;
    snprintf(up, sizeof up, "%s/..", real);
    if (!realpath(up, real))
        return false;
    snprintf(buf, PATH_MAX, "%.*s/share/tide", PATH_MAX - 16, strcmp(real, "/") ? real : "");
    return true;
}

static const char sh_anchor;

#define SH_MAX_ROOTS 4

static void sh_add(char roots[SH_MAX_ROOTS][PATH_MAX], int *n, const char *dir)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(roots[i], dir))
            return;
    snprintf(roots[(*n)++], PATH_MAX, "%s", dir);
}

/* The folders to search, in order; returns how many. */
static int sh_roots(char roots[SH_MAX_ROOTS][PATH_MAX])
{
    int n = 0;
    char dir[PATH_MAX];
    Dl_info info;
    /* An install, wherever its prefix moved: <libdir>/../share/tide. */
    if (dladdr(&sh_anchor, &info) && sh_share_of(info.dli_fname, dir))
        sh_add(roots, &n, dir);
    if (sh_share_of("/proc/self/exe", dir))
        sh_add(roots, &n, dir);
    /* A binary in its build tree (CMakeCache.txt beside it or one up, for
     * tests and benchmarks): the source tree. */
    char exe[PATH_MAX], cache[PATH_MAX + 32];
    struct stat st;
    if (realpath("/proc/self/exe", exe) && strrchr(exe, '/')) {
        *strrchr(exe, '/') = 0;
        snprintf(cache, sizeof cache, "%s/CMakeCache.txt", exe);
        bool tree = stat(cache, &st) == 0;
        snprintf(cache, sizeof cache, "%s/../CMakeCache.txt", exe);
        if (tree || stat(cache, &st) == 0)
            sh_add(roots, &n, TIDE_SOURCE_DIR);
    }
    sh_add(roots, &n, TIDE_INSTALL_DATA_DIR);
    return n;
}

int tide_shipped_path(const char *path, const char *what, char *buf, size_t len)
{
    struct stat st;
    snprintf(buf, len, "%s", path);
    if (!*path || path[0] == '/' || stat(path, &st) == 0)
        return TIDE_OK;
    char roots[SH_MAX_ROOTS][PATH_MAX], searched[SH_MAX_ROOTS * PATH_MAX] = "";
    const int n = sh_roots(roots);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        char cand[PATH_MAX * 2], real[PATH_MAX];
        const int k = snprintf(cand, sizeof cand, "%s/%s", roots[i], path);
        if (k > 0 && (size_t)k < sizeof cand && stat(cand, &st) == 0 && realpath(cand, real)) {
            snprintf(buf, len, "%s", real);
            tide_debug("%s = %s: found in %s", what, path, roots[i]);
            return TIDE_OK;
        }
        if (used < sizeof searched)
            used += (size_t)snprintf(searched + used, sizeof searched - used, "%s%s",
                                     used ? ", " : "", roots[i]);
    }
    char cwd[PATH_MAX];
    tide_error("%s = %s: no such file from the working directory (%s) nor in the folders of "
               "shipped files (%s)",
               what, path, getcwd(cwd, sizeof cwd) ? cwd : "?", searched);
    return TIDE_E_NOTFOUND;
}
