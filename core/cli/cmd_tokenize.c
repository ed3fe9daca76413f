/* PLACEHOLDER: replaced by the real implementation before this lands. */
#include <stdio.h>

#include "cli.h"

int cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tide tokenize: not implemented yet\n");
    return CLI_EXIT_RUNTIME;
}
