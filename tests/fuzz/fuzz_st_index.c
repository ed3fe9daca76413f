/* Fuzz target: a sharded checkpoint directory. The input is cut at the
 * separator "\n#SHARD#\n": the first part is model.safetensors.index.json,
 * the next ones (at most three) are the shards model-0000K-of-00003.safetensors.
 * An accepted directory must map every tensor to the shard that holds it. */
#include <sys/stat.h>

#include "fuzz_common.h"
#include "tide/safetensors.h"

#define SEP "\n#SHARD#\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[sizeof fz_dir_path + 16];
    static const char *const shard[3] = {"model-00001-of-00003.safetensors",
                                         "model-00002-of-00003.safetensors",
                                         "model-00003-of-00003.safetensors"};
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/ckpt", fz_dir());
        if (mkdir(dir, 0700) != 0)
            abort();
    }
    fz_begin();
    const uint8_t *parts[4];
    size_t lens[4];
    int n = fz_split(data, size, SEP, parts, lens, 4);
    char name[sizeof fz_dir_path + 64];
    for (int i = 0; i < 3; i++) {
        /* No file may survive from the previous input. */
        snprintf(name, sizeof name, "%s/%s", dir, shard[i]);
        unlink(name);
    }
    fz_write("ckpt/model.safetensors.index.json", parts[0], lens[0]);
    for (int i = 1; i < n; i++) {
        snprintf(name, sizeof name, "ckpt/%s", shard[i - 1]);
        fz_write(name, parts[i], lens[i]);
    }
    struct tide_st *st = NULL;
    int rc = tide_st_open(dir, &st);
    fz_check_status(rc);
    if (rc != TIDE_OK) {
        FZ_ASSERT(st == NULL);
        return 0;
    }
    for (int i = 0; i < tide_st_count(st); i++) {
        const struct tide_view *v = tide_st_at(st, i);
        FZ_ASSERT(tide_st_find(st, v->name) == v);
        const char *file = tide_st_file_of(st, v->name);
        FZ_ASSERT(file && strstr(file, "-of-00003.safetensors"));
        FZ_ASSERT(v->nbytes <= size);
    }
    tide_st_close(st);
    return 0;
}
