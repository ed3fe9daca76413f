/* Fuzz target: a tokenizer.json, loaded with tide_tokenizer_load. An
 * accepted tokenizer must encode a fixed text and the input's own bytes into
 * ids it can decode, and answer piece/id queries for every id it has. */
#include "fuzz_common.h"
#include "tide/tokenizer.h"

static void tokjson_encode(const struct tide_tokenizer *t, const char *text, size_t len)
{
    int32_t *ids = NULL;
    size_t n = 0;
    fz_errors = 0;
    int rc = tide_tokenizer_encode(t, text, len, &ids, &n);
    fz_check_status(rc);
    if (rc != TIDE_OK)
        return;
    FZ_ASSERT(ids != NULL);
    const int32_t size = tide_tokenizer_size(t);
    for (size_t i = 0; i < n; i++)
        FZ_ASSERT(ids[i] >= 0 && ids[i] < size && tide_tokenizer_piece(t, ids[i]));
    char *out = NULL;
    size_t out_len = 0;
    fz_errors = 0;
    rc = tide_tokenizer_decode(t, ids, n, &out, &out_len);
    fz_check_status(rc);
    FZ_ASSERT(rc == TIDE_OK && out && strlen(out) <= out_len);
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_begin();
    const char *path = fz_write("tokenizer.json", data, size);
    struct tide_tokenizer *t = NULL;
    int rc = tide_tokenizer_load(path, &t);
    fz_check_status(rc);
    if (rc != TIDE_OK) {
        FZ_ASSERT(t == NULL);
        return 0;
    }
    const int32_t n = tide_tokenizer_size(t);
    FZ_ASSERT(n >= 0);
    for (int32_t id = 0; id < n && id < 4096; id++) {
        const char *piece = tide_tokenizer_piece(t, id);
        if (piece)
            FZ_ASSERT(tide_tokenizer_id(t, piece) >= 0);
        (void)tide_tokenizer_is_special(t, id);
    }
    FZ_ASSERT(tide_tokenizer_piece(t, -1) == NULL && tide_tokenizer_piece(t, n) == NULL);
    static const char text[] = "Hello, world! It's 2024: <|mask|> caf\xc3\xa9 \xff\xfe\n\t end";
    tokjson_encode(t, text, sizeof text - 1);
    tokjson_encode(t, (const char *)data, size < 512 ? size : 512);
    int32_t bad = n;
    char *out = NULL;
    size_t out_len;
    fz_errors = 0;
    FZ_ASSERT(tide_tokenizer_decode(t, &bad, 1, &out, &out_len) == TIDE_E_RANGE);
    FZ_ASSERT(fz_errors > 0);
    tide_tokenizer_free(t);
    return 0;
}
