/* What the backend's kernel files take from plugin.c, which the kernel
 * tests do not link: the scratch area of an instance (the attention entries
 * use it), the same contract as plugin.c's. */
#include <stdlib.h>

#include "dnnl_bk.h"

int dnnl_bk_scratch(struct tide_backend *bk, size_t bytes)
{
    if (bytes <= bk->scratch_bytes)
        return TIDE_OK;
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p)
        return TIDE_E_NOMEM;
    free(bk->scratch);
    bk->scratch = p;
    bk->scratch_bytes = bytes;
    return TIDE_OK;
}
