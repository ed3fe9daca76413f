/* Files the project ships (prompts, hardware profiles, example
 * configurations), found wherever tide runs from. */
#ifndef TIDE_SHIPPED_H
#define TIDE_SHIPPED_H

#include "tide/api.h"

#include <stddef.h>

/* path names a file relative to the source tree ("bench/prompts/prompts.txt",
 * "config/profiles/h100-pcie5.ini"). It is used as given when it is absolute
 * or exists from the working directory; else it is looked up in the
 * installed share folder beside libtide (<libdir>/../share/tide), then
 * beside the binary (<bindir>/../share/tide), then, for a binary run from
 * its build tree, in the source tree, then at the configured prefix. Writes the path to use into
 * buf and returns TIDE_OK, or TIDE_E_NOTFOUND, logged as "WHAT = PATH: ..." with every place
 * searched (what: the key or flag that named it). */
TIDE_API int tide_shipped_path(const char *path, const char *what, char *buf, size_t len);

#endif
