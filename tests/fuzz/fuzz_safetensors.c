/* Fuzz target: one .safetensors file (8-byte header length, JSON header,
 * data), opened with tide_st_open. An accepted file must hand out views that
 * lie inside it, be found by name, and pass tide_st_expect with its own
 * dtype and shape. */
#include "fuzz_common.h"
#include "tide/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_begin();
    const char *path = fz_write("model.safetensors", data, size);
    struct tide_st *st = NULL;
    int rc = tide_st_open(path, &st);
    fz_check_status(rc);
    if (rc != TIDE_OK) {
        FZ_ASSERT(st == NULL);
        return 0;
    }
    uint64_t total = 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < tide_st_count(st); i++) {
        const struct tide_view *v = tide_st_at(st, i);
        FZ_ASSERT(v && v->name);
        FZ_ASSERT(tide_st_find(st, v->name) == v);
        FZ_ASSERT(tide_st_file_of(st, v->name) != NULL);
        FZ_ASSERT(tide_st_expect(st, v->name, v->dtype, v->ndim, v->shape, NULL) == TIDE_OK);
        FZ_ASSERT(v->nbytes <= size);
        if (v->nbytes) {
            const uint8_t *p = v->data;
            sink ^= p[0];
            sink ^= p[v->nbytes - 1];
        }
        total += v->nbytes;
    }
    (void)sink;
    FZ_ASSERT(total == tide_st_data_bytes(st));
    FZ_ASSERT(total <= size);
    FZ_ASSERT(tide_st_at(st, -1) == NULL && tide_st_at(st, tide_st_count(st)) == NULL);
    tide_st_close(st);
    return 0;
}
