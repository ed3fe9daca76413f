/* Fuzz target: a routing trace (docs/trace-format.md), read with
 * tide_trace_reader_open and _next to the end, twice (rewind). Every record
 * handed out must be within the header's shape, and the second pass must
 * see the same records as the first. */
#include "fuzz_common.h"
#include "tide/trace.h"

/* Read every record; returns how many, or the negative status that stopped it. */
static long trace_pass(struct tide_trace_reader *r, uint64_t *digest)
{
    const struct tide_trace_header *h = tide_trace_reader_header(r);
    struct tide_trace_record rec;
    long count = 0;
    uint64_t d = 1469598103934665603ull;
    int rc;
    fz_errors = 0;
    while ((rc = tide_trace_reader_next(r, &rec)) == 1) {
        count++;
        d = (d ^ (uint64_t)rec.type) * 1099511628211ull;
        if (rec.type == TIDE_TREC_ROUTE) {
            FZ_ASSERT(rec.layer < h->n_layers && (int)rec.phase <= TIDE_TRACE_KV);
            for (size_t i = 0; i < (size_t)rec.n * h->top_k; i++) {
                FZ_ASSERT(rec.ids[i] >= 0 && (uint32_t)rec.ids[i] < h->n_experts);
                d = (d ^ (uint64_t)rec.ids[i]) * 1099511628211ull;
            }
        }
    }
    FZ_ASSERT(rc <= 0);
    fz_check_status(rc);
    *digest = d;
    return rc < 0 ? rc : count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_begin();
    const char *path = fz_write("routing.tidetrace", data, size);
    struct tide_trace_reader *r = NULL;
    int rc = tide_trace_reader_open(path, &r);
    fz_check_status(rc);
    if (rc != TIDE_OK)
        return 0;
    const struct tide_trace_header *h = tide_trace_reader_header(r);
    FZ_ASSERT(h->n_layers >= 1 && h->n_experts >= 1 && h->top_k >= 1 && h->top_k <= h->n_experts &&
              h->model);
    uint64_t d1, d2;
    long first = trace_pass(r, &d1);
    tide_trace_reader_rewind(r);
    long second = trace_pass(r, &d2);
    FZ_ASSERT(first == second && d1 == d2);
    tide_trace_reader_close(r);
    return 0;
}
