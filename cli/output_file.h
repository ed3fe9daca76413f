/* Output files written in full or not at all: PATH.tmp while being
 * written, renamed to PATH when complete. Shared by the CLI and `tide serve`
 * (which sees only the public API, so this header includes nothing of the
 * runtime). */
#ifndef TIDE_CLI_OUTPUT_FILE_H
#define TIDE_CLI_OUTPUT_FILE_H

#include <stdbool.h>
#include <stdio.h>

/* Open PATH.tmp for [output] `key` = path (empty: *f = NULL, TIDE_OK).
 * An existing PATH is refused unless overwrite; origin says where the value
 * came from, for the message. Returns TIDE_OK, TIDE_E_CONFIG or TIDE_E_IO
 * (logged). */
int cli_output_open_path(const char *key, const char *path, const char *origin, bool overwrite,
                         FILE **f);
/* Close it; when keep, rename PATH.tmp to PATH, else remove it. */
int cli_output_close(FILE *f, const char *path, bool keep);

#endif
