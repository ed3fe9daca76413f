/* Output files written in full or not at all (output_file.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "output_file.h"
#include "tide/log.h"
#include "tide/status.h"

int cli_output_open_path(const char *key, const char *path, const char *origin, bool overwrite,
                         FILE **f)
{
    *f = NULL;
    if (!*path)
        return TIDE_OK;
    if (access(path, F_OK) == 0 && !overwrite) {
        tide_error("[output] %s = %s (%s): the file exists; refusing to replace it (set [output] "
                   "overwrite = true, or choose another name)",
                   key, path, origin);
        return TIDE_E_CONFIG;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(*f = fopen(tmp, "w"))) {
        tide_error("[output] %s: cannot create %s: %s", key, tmp, strerror(errno));
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

int cli_output_close(FILE *f, const char *path, bool keep)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    bool ok = fclose(f) == 0;
    if (keep && ok && rename(tmp, path) == 0)
        return TIDE_OK;
    remove(tmp);
    if (keep) {
        tide_error("cannot write %s", path);
        return TIDE_E_IO;
    }
    return TIDE_OK;
}
