/* Helper for hf_compare.py (not a test by itself):
 *   tok_tool train OUT.json        train on the built-in corpus with the LLaDA2 specials
 *   tok_tool encode TOKENIZER.json read records (uint32 little-endian length, bytes) from
 *                                  stdin; print one line of space-separated ids per record,
 *                                  or "ERROR" when encoding fails */
#include <stdint.h>

#include "tide/status.h"
#include "tide/tokenizer.h"
#include "tide/tokenizer_train.h"
#include "tok_test.h"

static int encode_records(const char *path)
{
    struct tide_tokenizer *t;
    if (tide_tokenizer_load(path, &t) != TIDE_OK)
        return 1;
    unsigned char hdr[4];
    while (fread(hdr, 1, 4, stdin) == 4) {
        size_t len =
            (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
        char *buf = malloc(len + 1);
        if (!buf || fread(buf, 1, len, stdin) != len) {
            fprintf(stderr, "tok_tool: short record\n");
            free(buf);
            tide_tokenizer_free(t);
            return 1;
        }
        int32_t *ids;
        size_t n;
        if (tide_tokenizer_encode(t, buf, len, &ids, &n) != TIDE_OK) {
            printf("ERROR\n");
        } else {
            for (size_t i = 0; i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
            free(ids);
        }
        free(buf);
    }
    tide_tokenizer_free(t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "train"))
        return tide_tokenizer_train(test_corpus, sizeof test_corpus - 1, TEST_VOCAB, test_specials,
                                    TEST_N_SPECIALS, argv[2], true) == TIDE_OK
                   ? 0
                   : 1;
    if (argc == 3 && !strcmp(argv[1], "encode"))
        return encode_records(argv[2]);
    fprintf(stderr, "usage: tok_tool train OUT.json | tok_tool encode TOKENIZER.json < records\n");
    return 2;
}
