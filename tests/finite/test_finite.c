/* tide_st_check_finite on generated safetensors files: BF16, F16 and F32
 * tensors, one larger than a scan chunk (4 MiB) and lengths that are not a
 * multiple of the vector width, with a NaN or an Inf planted at the first
 * element, at the last, on each side of a chunk boundary, in a vector tail,
 * or nowhere. Each planted value is found, its tensor named with the right
 * counts and first index, and clean tensors pass. Integer tensors are never
 * scanned (their bit patterns may look like NaN). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "finite.h"
#include "harness.h"
#include "tide/log.h"
#include "tide/safetensors.h"
#include "tide/safetensors_write.h"
#include "tide/status.h"

static char logbuf[8192];

static void sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR) {
        size_t n = strlen(logbuf);
        snprintf(logbuf + n, sizeof logbuf - n, "%s\n", msg);
    }
}

struct planted {
    enum tide_dtype dt;
    int64_t n;  /* elements */
    int64_t at; /* index of the bad value, -1: none */
    bool nan;   /* NaN, else -Inf */
};

/* Fill n elements of dt with finite values (bit patterns up to just below
 * infinity), and the planted one. */
static void *fill(const struct planted *p)
{
    const size_t es = tide_dtype_size(p->dt);
    uint8_t *b = malloc(es * (size_t)p->n + 1);
    for (int64_t i = 0; i < p->n; i++) {
        uint32_t v = (uint32_t)(i * 2654435761u);
        if (p->dt == TIDE_DTYPE_F32) {
            v &= 0xff7fffffu; /* exponent below all-ones: finite */
            memcpy(b + 4 * i, &v, 4);
        } else {
            uint16_t h = (uint16_t)v & (p->dt == TIDE_DTYPE_BF16 ? 0xff7f : 0xfbff);
            if (i == 7) /* the largest finite magnitude */
                h = p->dt == TIDE_DTYPE_BF16 ? 0x7f7f : 0x7bff;
            memcpy(b + 2 * i, &h, 2);
        }
    }
    if (p->at >= 0) {
        uint32_t f = p->nan ? 0x7fc00001u : 0xff800000u;
        uint16_t bf = p->nan ? 0x7fc1 : 0xff80, hf = p->nan ? 0x7e01 : 0xfc00;
        if (p->dt == TIDE_DTYPE_F32)
            memcpy(b + 4 * p->at, &f, 4);
        else
            memcpy(b + 2 * p->at, p->dt == TIDE_DTYPE_BF16 ? &bf : &hf, 2);
    }
    return b;
}

static void check_case(const char *dir, const struct planted *p, int k)
{
    char path[512], name[64];
    snprintf(path, sizeof path, "%s/c%d.safetensors", dir, k);
    snprintf(name, sizeof name, "t.%d", k);
    struct tide_st_writer *w = NULL;
    const int64_t shape[1] = {p->n}, ishape[1] = {8};
    CHECK_EQ_INT(tide_st_writer_create(path, true, &w), TIDE_OK);
    if (!w)
        return;
    /* An I32 tensor of all-ones bits, which is not scanned. */
    CHECK_EQ_INT(tide_st_writer_add(w, "ints", TIDE_DTYPE_I32, 1, ishape), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_add(w, name, p->dt, 1, shape), TIDE_OK);
    const int32_t ints[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    void *data = fill(p);
    CHECK_EQ_INT(tide_st_writer_write(w, ints, sizeof ints), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_write(w, data, tide_dtype_size(p->dt) * (size_t)p->n), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_finish(w), TIDE_OK);
    free(data);
    struct tide_st *st = NULL;
    CHECK_EQ_INT(tide_st_open(path, &st), TIDE_OK);
    if (!st)
        return;
    logbuf[0] = 0;
    uint64_t bytes = 0;
    const int rc = tide_st_check_finite(st, &bytes);
    CHECK_EQ_INT(bytes, tide_dtype_size(p->dt) * (uint64_t)p->n);
    if (p->at < 0) {
        CHECK_EQ_INT(rc, TIDE_OK);
        CHECK(logbuf[0] == 0);
    } else {
        char want[160];
        CHECK_EQ_INT(rc, TIDE_E_FORMAT);
        snprintf(want, sizeof want,
                 "tensor '%s' (%s) holds %d NaN and %d Inf values out of %lld "
                 "(first at [%lld])",
                 name, tide_dtype_name(p->dt), p->nan ? 1 : 0, p->nan ? 0 : 1, (long long)p->n,
                 (long long)p->at);
        CHECK_CONTAINS(logbuf, want);
    }
    tide_st_close(st);
    remove(path);
}

static void test_scan(void)
{
    char dir[] = "/tmp/tide-finite-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    const int64_t chunk16 = (4 << 20) / 2, chunk32 = (4 << 20) / 4;
    const struct planted cases[] = {
        {TIDE_DTYPE_BF16, 1000, -1, true},
        {TIDE_DTYPE_BF16, 1000, 0, true},
        {TIDE_DTYPE_BF16, 1000, 999, false},
        {TIDE_DTYPE_BF16, 77, 70, true}, /* in the tail after the vector steps */
        {TIDE_DTYPE_BF16, 3, 1, false},
        {TIDE_DTYPE_BF16, chunk16 + 1000, chunk16 - 1, true}, /* last of the first chunk */
        {TIDE_DTYPE_BF16, chunk16 + 1000, chunk16, false},    /* first of the second */
        {TIDE_DTYPE_BF16, chunk16 + 1000, -1, false},
        {TIDE_DTYPE_F16, 1000, -1, true},
        {TIDE_DTYPE_F16, 1000, 500, true},
        {TIDE_DTYPE_F16, 130, 129, false},
        {TIDE_DTYPE_F32, 1000, -1, true},
        {TIDE_DTYPE_F32, 1000, 333, true},
        {TIDE_DTYPE_F32, 35, 34, false},
        {TIDE_DTYPE_F32, chunk32 + 5, chunk32 + 4, true},
    };
    tide_log_set_sink(sink, NULL);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        check_case(dir, &cases[k], (int)k);
    tide_log_set_sink(NULL, NULL);
    rmdir(dir);
}

int main(void)
{
    TEST_RUN(test_scan);
    TEST_DONE();
}
