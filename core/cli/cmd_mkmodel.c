/* PLACEHOLDER: replaced by the real implementation before this lands. */
#include <stdio.h>

#include "cli.h"

int cmd_mkmodel(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "tide mkmodel: not implemented yet\n");
    return CLI_EXIT_RUNTIME;
}
