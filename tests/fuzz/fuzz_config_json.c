/* Fuzz target: a checkpoint's config.json, read by model-llada2
 * (llada2_cfg_load). An accepted config must describe a model whose tensor
 * list and byte counts can be computed quickly (no hang on huge values) and
 * satisfy the relations the forward pass relies on. */
#include <sys/stat.h>

#include "fuzz_common.h"
#include "llada2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[sizeof fz_dir_path + 16];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/model", fz_dir());
        if (mkdir(dir, 0700) != 0)
            abort();
    }
    fz_begin();
    fz_write("model/config.json", data, size);
    struct llada2_cfg c;
    int rc = llada2_cfg_load(dir, &c);
    fz_check_status(rc);
    if (rc != TIDE_OK)
        return 0;
    FZ_ASSERT(c.hidden >= 1 && c.n_layers >= 1 && c.n_heads >= 1 && c.n_kv_heads >= 1);
    FZ_ASSERT(c.n_heads % c.n_kv_heads == 0);
    FZ_ASSERT(c.rot_dim >= 0 && c.rot_dim % 2 == 0 && c.rot_dim <= c.head_dim);
    FZ_ASSERT(c.n_experts >= 1 && c.top_k >= 1 && c.top_k <= c.n_experts);
    FZ_ASSERT(c.n_group >= 1 && c.n_experts % c.n_group == 0 && c.topk_group <= c.n_group);
    FZ_ASSERT(c.first_dense >= 0 && c.first_dense <= c.n_layers);
    FZ_ASSERT(c.vocab >= 1 && c.max_pos >= 1 && c.eps > 0 && c.rope_theta > 0);
    const int n = llada2_tensor_count(&c);
    FZ_ASSERT(n >= 3);
    char name[LLADA2_NAME_MAX];
    enum tide_dtype dt;
    int64_t shape[TIDE_MAX_DIMS];
    const int probe[] = {0, 1, n / 3, n / 2, n - 2, n - 1};
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++) {
        int nd = llada2_tensor_spec(&c, probe[i], name, &dt, shape);
        FZ_ASSERT(nd >= 1 && nd <= 2 && name[0]);
        for (int d = 0; d < nd; d++)
            FZ_ASSERT(shape[d] >= 0);
    }
    uint64_t eb = llada2_expert_bytes(&c), dense = llada2_dense_bytes(&c);
    FZ_ASSERT(eb > 0 && dense > 0);
    FZ_ASSERT(llada2_n_moe_layers(&c) >= 0);
    if (n > 20000)
        return 0;
    /* Small models: walk every tensor. Names are unique and well formed, and
     * the byte counts add up. */
    char(*names)[LLADA2_NAME_MAX] = malloc(sizeof *names * (size_t)n);
    FZ_ASSERT(names);
    uint64_t all = 0;
    for (int i = 0; i < n; i++) {
        int nd = llada2_tensor_spec(&c, i, names[i], &dt, shape);
        FZ_ASSERT(!strstr(names[i], "(null)") && !strstr(names[i], ".."));
        uint64_t b = tide_dtype_size(dt);
        for (int d = 0; d < nd; d++)
            b *= (uint64_t)shape[d];
        all += b;
    }
    qsort(names, (size_t)n, sizeof *names, (int (*)(const void *, const void *))strcmp);
    for (int i = 1; i < n; i++)
        FZ_ASSERT(strcmp(names[i - 1], names[i]) != 0);
    free(names);
    FZ_ASSERT(all == dense + eb * (uint64_t)llada2_n_moe_layers(&c) * (uint64_t)c.n_experts);
    return 0;
}
