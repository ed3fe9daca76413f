/* Safetensors reader and writer: round trips through the writer, sharded
 * directories, and every refusal of a malformed file, with its message. */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "harness.h"
#include "tide/log.h"
#include "tide/safetensors.h"
#include "tide/safetensors_write.h"
#include "tide/status.h"

/* A realistic tensor name, so messages are checked against a long one. */
#define T "model.layers.3.mlp.experts.7.up_proj.weight"

static char tmpdir[64];
static char logbuf[16384];
static int n_errors;

static void sink(void *user, enum tide_log_level level, const char *msg)
{
    (void)user;
    if (level == TIDE_LOG_ERROR)
        n_errors++;
    size_t n = strlen(logbuf);
    snprintf(logbuf + n, sizeof logbuf - n, "%s\n", msg);
}

static void log_reset(void)
{
    logbuf[0] = 0;
    n_errors = 0;
}

static void path_of(char *buf, const char *name)
{
    snprintf(buf, PATH_MAX, "%s/%s", tmpdir, name);
}

static bool exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    fputs(text, f);
    fclose(f);
}

/* The byte at data offset OFF of a file written with SEED. */
static uint8_t pattern(unsigned seed, uint64_t off)
{
    return (uint8_t)(seed + off * 7u + (off >> 9));
}

/* A crafted file: the 8-byte length HLEN, HEADER, then DATA_LEN pattern bytes. */
static void craft_raw(const char *path, uint64_t hlen, const char *header, size_t pad,
                      size_t data_len)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    for (int i = 0; i < 8; i++)
        fputc((int)(hlen >> (8 * i)) & 0xff, f);
    fputs(header, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    for (size_t i = 0; i < data_len; i++)
        fputc(pattern(0, i), f);
    fclose(f);
}

/* A well-formed file layout: HEADER padded with spaces to a multiple of 8
 * bytes, as Hugging Face writes it. Returns the padded header length. */
static size_t craft(const char *path, const char *header, size_t data_len)
{
    size_t len = strlen(header), pad = (8 - len % 8) % 8;
    craft_raw(path, len + pad, header, pad, data_len);
    return len + pad;
}

struct tspec {
    const char *name;
    enum tide_dtype dtype;
    int ndim;
    int64_t shape[TIDE_MAX_DIMS];
};

static uint64_t spec_bytes(const struct tspec *t)
{
    uint64_t n = tide_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++)
        n *= (uint64_t)t->shape[i];
    return n;
}

/* Write tensors T[0..n) with pattern data, CHUNK bytes per write call. */
static int write_st(const char *path, const struct tspec *t, int n, unsigned seed, size_t chunk)
{
    struct tide_st_writer *w;
    int rc = tide_st_writer_create(path, false, &w);
    if (rc)
        return rc;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        rc = tide_st_writer_add(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape);
        if (rc) {
            tide_st_writer_abort(w);
            return rc;
        }
        total += spec_bytes(&t[i]);
    }
    uint8_t *buf = malloc(chunk);
    for (uint64_t off = 0; off < total && !rc; off += chunk) {
        size_t k = total - off < chunk ? (size_t)(total - off) : chunk;
        for (size_t j = 0; j < k; j++)
            buf[j] = pattern(seed, off + j);
        rc = tide_st_writer_write(w, buf, k);
    }
    free(buf);
    if (rc) {
        tide_st_writer_abort(w);
        return rc;
    }
    return tide_st_writer_finish(w);
}

/* Check that st holds exactly T[0..n), in order from view index FIRST, with
 * pattern data starting at data offset 0 of its file. */
static void check_tensors(const struct tide_st *st, int first, const struct tspec *t, int n,
                          unsigned seed)
{
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const struct tide_view *v = tide_st_at(st, first + i);
        CHECK(v != NULL);
        if (!v)
            return;
        CHECK(v->name && !strcmp(v->name, t[i].name));
        CHECK(tide_st_find(st, t[i].name) == v);
        CHECK_EQ_INT(v->dtype, t[i].dtype);
        CHECK_EQ_INT(v->ndim, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++)
            CHECK_EQ_INT(v->shape[d], t[i].shape[d]);
        CHECK_EQ_INT(v->nbytes, spec_bytes(&t[i]));
        CHECK_EQ_INT((uintptr_t)v->data % tide_dtype_size(v->dtype), 0);
        size_t bad = 0;
        for (size_t j = 0; j < v->nbytes; j++)
            bad += ((const uint8_t *)v->data)[j] != pattern(seed, off + j);
        CHECK_EQ_INT(bad, 0);
        off += v->nbytes;
    }
}

static const struct tspec mixed[] = {
    {"scalar", TIDE_DTYPE_I64, 0, {0}}, {"model.embed", TIDE_DTYPE_F32, 2, {2, 3}},
    {"ids", TIDE_DTYPE_I32, 1, {3}},    {"cube", TIDE_DTYPE_BF16, 3, {2, 3, 4}},
    {"half", TIDE_DTYPE_F16, 1, {5}},   {"empty", TIDE_DTYPE_BF16, 2, {0, 7}},
};
#define N_MIXED     ((int)(sizeof mixed / sizeof mixed[0]))
#define MIXED_BYTES 102

static void test_round_trip(void)
{
    char path[PATH_MAX], want[PATH_MAX + 128];
    path_of(path, "mixed.safetensors");
    log_reset();
    CHECK_EQ_INT(write_st(path, mixed, N_MIXED, 11, 7), TIDE_OK);
    CHECK_EQ_INT(n_errors, 0);
    snprintf(want, sizeof want, "%s.tmp", path);
    CHECK(exists(path));
    CHECK(!exists(want));

    /* The bytes on disk, as the Hugging Face format has them. */
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    uint8_t le[8];
    CHECK_EQ_INT(fread(le, 1, 8, f), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | le[i];
    CHECK_EQ_INT(hlen % 8, 0);
    CHECK(hlen < 4096);
    char header[4096] = {0};
    CHECK_EQ_INT(fread(header, 1, (size_t)hlen, f), hlen);
    fseek(f, 0, SEEK_END);
    CHECK_EQ_INT(ftell(f), 8 + (long)hlen + MIXED_BYTES);
    fclose(f);
    CHECK(!strncmp(header, "{\"__metadata__\":{\"format\":\"pt\"},", 32));
    CHECK_CONTAINS(header,
                   "\"cube\":{\"dtype\":\"BF16\",\"shape\":[2,3,4],\"data_offsets\":[44,92]}");
    CHECK_CONTAINS(header, "\"scalar\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}");
    char *close_brace = strrchr(header, '}');
    for (char *p = close_brace ? close_brace + 1 : header; p < header + hlen; p++)
        CHECK_EQ_INT(*p, ' ');

    struct tide_st *st = NULL;
    CHECK_EQ_INT(tide_st_open(path, &st), TIDE_OK);
    CHECK(st != NULL);
    if (!st)
        return;
    CHECK_EQ_INT(tide_st_count(st), N_MIXED);
    check_tensors(st, 0, mixed, N_MIXED, 11);
    CHECK(tide_st_at(st, N_MIXED) == NULL);
    CHECK(tide_st_at(st, -1) == NULL);
    CHECK_EQ_INT(tide_st_data_bytes(st), MIXED_BYTES);
    CHECK(tide_st_file_of(st, "cube") && !strcmp(tide_st_file_of(st, "cube"), path));
    CHECK(!strcmp(tide_st_path(st), path));
    CHECK(tide_st_find(st, "nope") == NULL);
    CHECK(tide_st_file_of(st, "nope") == NULL);
    CHECK_EQ_INT(n_errors, 0);

    const struct tide_view *v = NULL;
    const int64_t cube[] = {2, 3, 4}, any[] = {2, -1, 4}, wrong[] = {2, 3, 5};
    CHECK_EQ_INT(tide_st_expect(st, "cube", TIDE_DTYPE_BF16, 3, cube, &v), TIDE_OK);
    CHECK(v == tide_st_find(st, "cube"));
    CHECK_EQ_INT(tide_st_expect(st, "cube", TIDE_DTYPE_INVALID, 3, any, NULL), TIDE_OK);
    CHECK_EQ_INT(tide_st_expect(st, "scalar", TIDE_DTYPE_I64, 0, NULL, NULL), TIDE_OK);
    CHECK_EQ_INT(n_errors, 0);

    CHECK_EQ_INT(tide_st_expect(st, "cube", TIDE_DTYPE_F32, 3, cube, &v), TIDE_E_FORMAT);
    CHECK(v == NULL);
    snprintf(want, sizeof want, "%s: tensor 'cube': expected F32 [2, 3, 4], found BF16 [2, 3, 4]",
             path);
    CHECK_CONTAINS(logbuf, want);
    log_reset();
    CHECK_EQ_INT(tide_st_expect(st, "cube", TIDE_DTYPE_BF16, 3, wrong, NULL), TIDE_E_FORMAT);
    CHECK_CONTAINS(logbuf, "expected BF16 [2, 3, 5], found BF16 [2, 3, 4]");
    log_reset();
    CHECK_EQ_INT(tide_st_expect(st, "cube", TIDE_DTYPE_BF16, 2, cube, NULL), TIDE_E_FORMAT);
    CHECK_CONTAINS(logbuf, "expected BF16 [2, 3], found BF16 [2, 3, 4]");
    log_reset();
    CHECK_EQ_INT(tide_st_expect(st, "lm_head.weight", TIDE_DTYPE_BF16, 2, cube, NULL),
                 TIDE_E_NOTFOUND);
    snprintf(want, sizeof want, "%s: missing tensor 'lm_head.weight'", path);
    CHECK_CONTAINS(logbuf, want);
    CHECK_EQ_INT(n_errors, 1);
    tide_st_close(st);
    tide_st_close(NULL);
}

/* More than the writer's buffer, in chunks that cross it and one that skips it. */
static void test_large_stream(void)
{
    char path[PATH_MAX];
    path_of(path, "large.safetensors");
    const struct tspec t[] = {{"big", TIDE_DTYPE_F32, 2, {640, 1024}}, /* 2.5 MiB */
                              {"tail", TIDE_DTYPE_BF16, 1, {3}}};
    struct tide_st_writer *w = NULL;
    CHECK_EQ_INT(tide_st_writer_create(path, false, &w), TIDE_OK);
    if (!w)
        return;
    CHECK_EQ_INT(tide_st_writer_add(w, t[0].name, t[0].dtype, t[0].ndim, t[0].shape), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_add(w, t[1].name, t[1].dtype, t[1].ndim, t[1].shape), TIDE_OK);
    size_t total = (size_t)(spec_bytes(&t[0]) + spec_bytes(&t[1]));
    uint8_t *buf = malloc(total);
    for (size_t i = 0; i < total; i++)
        buf[i] = pattern(5, i);
    size_t cuts[] = {0, 100, 100 + (18u << 17), total};
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(tide_st_writer_write(w, buf + cuts[i], cuts[i + 1] - cuts[i]), TIDE_OK);
    free(buf);
    CHECK_EQ_INT(tide_st_writer_finish(w), TIDE_OK);
    struct tide_st *st = NULL;
    CHECK_EQ_INT(tide_st_open(path, &st), TIDE_OK);
    if (!st)
        return;
    CHECK_EQ_INT(tide_st_count(st), 2);
    check_tensors(st, 0, t, 2, 5);
    tide_st_close(st);
    unlink(path);
}

/* Fraction of PATH's pages in the page cache (mincore); -1 when unknown. */
static double resident_fraction(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0 || sb.st_size == 0) {
        if (f)
            fclose(f);
        return -1;
    }
    const size_t len = (size_t)sb.st_size, page = (size_t)sysconf(_SC_PAGESIZE);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fileno(f), 0);
    fclose(f);
    if (map == MAP_FAILED)
        return -1;
    const size_t pages = (len + page - 1) / page;
    unsigned char *vec = malloc(pages);
    double frac = -1;
    if (vec && mincore(map, len, vec) == 0) {
        size_t in = 0;
        for (size_t i = 0; i < pages; i++)
            in += vec[i] & 1;
        frac = (double)in / (double)pages;
    }
    free(vec);
    munmap(map, len);
    return frac;
}

/* A written file of 64 MiB or more leaves the page cache (so that its first
 * load reads it back in the large folios readahead makes, which map as
 * 2 MiB pages); a small one stays. Not checkable where the files live in
 * memory (tmpfs): their pages are the file. */
static void test_writer_drops_cache(void)
{
    struct statfs fs;
    if (statfs(tmpdir, &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */) {
        printf("  (skipped: %s is on tmpfs)\n", tmpdir);
        return;
    }
    char big[PATH_MAX], small[PATH_MAX];
    path_of(big, "big.safetensors");
    path_of(small, "small.safetensors");
    const struct tspec tb = {"w", TIDE_DTYPE_BF16, 2, {4096, 8192}}; /* 64 MiB */
    const struct tspec ts = {"w", TIDE_DTYPE_BF16, 2, {512, 1024}};  /* 1 MiB */
    CHECK_EQ_INT(write_st(big, &tb, 1, 9, (size_t)1 << 20), TIDE_OK);
    CHECK_EQ_INT(write_st(small, &ts, 1, 9, (size_t)1 << 16), TIDE_OK);
    const double fb = resident_fraction(big), fsm = resident_fraction(small);
    printf("  resident after writing: 64 MiB file %.3f, 1 MiB file %.3f\n", fb, fsm);
    CHECK(fb >= 0 && fb < 0.05);
    CHECK(fsm > 0.95);
    unlink(big);
    unlink(small);
}

static void test_writer_refusals(void)
{
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    path_of(path, "w.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    const int64_t s4[] = {4}, s1[] = {1}, neg[] = {2, -3}, huge[] = {INT64_MAX, 4};

    /* Refuses to replace an existing file, unless asked. */
    write_text(path, "precious");
    struct tide_st_writer *w = NULL;
    log_reset();
    CHECK_EQ_INT(tide_st_writer_create(path, false, &w), TIDE_E_INVAL);
    CHECK(w == NULL);
    CHECK_CONTAINS(logbuf, path);
    CHECK_CONTAINS(logbuf, "refusing to replace");
    CHECK(!exists(tmp));
    CHECK_EQ_INT(tide_st_writer_create(path, true, &w), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_add(w, "x", TIDE_DTYPE_F32, 1, s4), TIDE_OK);
    float x[4] = {1, 2, 3, 4};
    CHECK_EQ_INT(tide_st_writer_write(w, x, sizeof x), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_finish(w), TIDE_OK);
    struct tide_st *st = NULL;
    CHECK_EQ_INT(tide_st_open(path, &st), TIDE_OK);
    const struct tide_view *v = tide_st_find(st, "x");
    CHECK(v && ((const float *)v->data)[3] == 4.0f);
    tide_st_close(st);
    unlink(path);

    /* Abort leaves nothing behind. */
    CHECK_EQ_INT(tide_st_writer_create(path, false, &w), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_add(w, "x", TIDE_DTYPE_F32, 1, s4), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_write(w, x, 8), TIDE_OK);
    CHECK(exists(tmp));
    tide_st_writer_abort(w);
    tide_st_writer_abort(NULL);
    CHECK(!exists(path));
    CHECK(!exists(tmp));

    /* Declaration errors, then data errors, on one writer. */
    log_reset();
    CHECK_EQ_INT(tide_st_writer_create(path, false, &w), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_add(w, "b", TIDE_DTYPE_BF16, 1, s1), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_add(w, "f", TIDE_DTYPE_F32, 1, s1), TIDE_E_INVAL);
    CHECK_CONTAINS(logbuf, "tensor 'f' (F32) would start at data offset 2");
    CHECK_EQ_INT(tide_st_writer_add(w, "b", TIDE_DTYPE_BF16, 1, s1), TIDE_E_INVAL);
    CHECK_CONTAINS(logbuf, "tensor 'b' declared twice");
    CHECK_EQ_INT(tide_st_writer_add(w, "__metadata__", TIDE_DTYPE_BF16, 1, s1), TIDE_E_INVAL);
    CHECK_EQ_INT(tide_st_writer_add(w, "n", TIDE_DTYPE_BF16, 2, neg), TIDE_E_INVAL);
    CHECK_CONTAINS(logbuf, "tensor 'n': dimension 1 is -3");
    CHECK_EQ_INT(tide_st_writer_add(w, "h", TIDE_DTYPE_BF16, 2, huge), TIDE_E_INVAL);
    CHECK_CONTAINS(logbuf, "tensor 'h' makes the file too large");
    CHECK_EQ_INT(tide_st_writer_add(w, "d", TIDE_DTYPE_BF16, 5, neg), TIDE_E_INVAL);
    CHECK_EQ_INT(tide_st_writer_add(w, "i", TIDE_DTYPE_INVALID, 1, s1), TIDE_E_INVAL);
    CHECK_EQ_INT(tide_st_writer_add(w, "b2", TIDE_DTYPE_BF16, 1, s1), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_write(w, x, 2), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_add(w, "late", TIDE_DTYPE_BF16, 1, s1), TIDE_E_INVAL);
    CHECK_CONTAINS(logbuf, "tensor 'late' declared after data was written");
    CHECK_EQ_INT(tide_st_writer_write(w, x, 4), TIDE_E_INVAL);
    CHECK_CONTAINS(logbuf, "4 more bytes would exceed the 4 declared (2 written so far)");
    CHECK_CONTAINS(logbuf, path);
    /* Finishing with data missing names the incomplete tensor and leaves no file. */
    log_reset();
    CHECK_EQ_INT(tide_st_writer_finish(w), TIDE_E_INVAL);
    CHECK_CONTAINS(logbuf, "only 2 of the 4 declared data bytes were written; tensor 'b2'");
    CHECK_EQ_INT(n_errors, 1);
    CHECK(!exists(path));
    CHECK(!exists(tmp));

    /* An empty checkpoint is valid. */
    CHECK_EQ_INT(tide_st_writer_create(path, false, &w), TIDE_OK);
    CHECK_EQ_INT(tide_st_writer_finish(w), TIDE_OK);
    CHECK_EQ_INT(tide_st_open(path, &st), TIDE_OK);
    CHECK_EQ_INT(tide_st_count(st), 0);
    CHECK_EQ_INT(tide_st_data_bytes(st), 0);
    tide_st_close(st);
    unlink(path);

    /* A missing directory is an I/O error naming the temporary file. */
    char nodir[PATH_MAX];
    path_of(nodir, "no/such/dir/x.safetensors");
    log_reset();
    CHECK_EQ_INT(tide_st_writer_create(nodir, false, &w), TIDE_E_IO);
    CHECK_CONTAINS(logbuf, "no/such/dir/x.safetensors.tmp");
}

/* Open PATH, expect refusal RC logged once, naming the file and N1, N2. */
static void expect_refused(const char *path, int rc, const char *n1, const char *n2)
{
    struct tide_st *st = (struct tide_st *)1;
    log_reset();
    int got = tide_st_open(path, &st);
    CHECK_EQ_INT(got, rc);
    CHECK(st == NULL);
    CHECK_EQ_INT(n_errors, 1);
    CHECK_CONTAINS(logbuf, path);
    if (n1)
        CHECK_CONTAINS(logbuf, n1);
    if (n2)
        CHECK_CONTAINS(logbuf, n2);
    if (got != rc || n_errors != 1)
        fprintf(stderr, "  (while opening %s)\n", path);
}

#define ENT(dt, shape, offs) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs "}"
/* A header holding tensor T alone, and T quoted as messages show it. */
#define ONE(dt, shape, offs) "{\"" T "\": " ENT(dt, shape, offs) "}"
#define QT                   "'" T "'"
/* A long tensor name with escaped quotes, as written in JSON. */
#define ESC "an \\\"escaped\\\" long name"

static void test_reader_refusals(void)
{
    static const struct {
        const char *file, *header;
        size_t data;
        const char *n1, *n2;
    } cases[] = {
        {"notobj", "{\"" T "\": [1, 2]}", 0, QT, "is an array, not an object"},
        {"nodtype", "{\"" T "\": {\"shape\":[1],\"data_offsets\":[0,4]}}", 4, QT, "no \"dtype\""},
        {"noshape", "{\"" T "\": {\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, QT,
         "no \"shape\""},
        {"nooffsets", "{\"" T "\": {\"dtype\":\"F32\",\"shape\":[1]}}", 4, QT,
         "no \"data_offsets\""},
        {"f8", ONE("F8_E5M2", "[4]", "[0,4]"), 4, QT, "dtype F8_E5M2 is not supported"},
        {"u16", ONE("U16", "[2]", "[0,4]"), 4, QT, "dtype U16"},
        {"dtypenum",
         "{\"" T "\": "
         "{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}",
         4, QT, "\"dtype\" is 3, not a string"},
        {"negdim", ONE("F32", "[2,-1]", "[0,4]"), 4, QT,
         "shape[1] is -1, not a non-negative integer"},
        {"fracdim", ONE("F32", "[2.5]", "[0,4]"), 4, QT, "shape[0] is 2.5"},
        {"strdim", ONE("F32", "[\"4\"]", "[0,16]"), 16, QT, "shape[0] is \"4\""},
        {"shapeobj", ONE("F32", "{}", "[0,16]"), 16, QT, "\"shape\" is an object, not an array"},
        {"fivedims", ONE("F32", "[1,1,1,1,1]", "[0,4]"), 4, QT, "shape has 5 dimensions"},
        {"mismatch", ONE("F32", "[2,2]", "[0,12]"), 16, QT,
         "shape [2, 2] of F32 is 16 bytes, but data_offsets [0, 12] span 12 bytes"},
        {"reversed", ONE("F32", "[1]", "[8,4]"), 8, QT, "\"data_offsets\" must be [begin, end]"},
        {"offsets3", ONE("F32", "[1]", "[0,4,8]"), 8, QT, "\"data_offsets\" must be"},
        {"negoffset", ONE("F32", "[1]", "[-4,0]"), 8, QT, "\"data_offsets\" must be"},
        {"outside",
         "{\"a\": " ENT("F32", "[1]", "[0,4]") ",\"" T "\": " ENT("F32", "[1]", "[64,68]") "}", 8,
         "'" T "': data_offsets [64, 68] lie outside the data section", "(8 bytes)"},
        {"overlap",
         "{\"a\": " ENT("F32", "[2]", "[0,8]") ",\"" T "\": " ENT("F32", "[2]", "[4,12]") "}", 12,
         "tensors 'a' [0, 8) and '" T "' [4, 12) overlap", NULL},
        {"misaligned",
         "{\"a\": " ENT("BF16", "[1]", "[0,2]") ",\"" T "\": " ENT("F32", "[1]", "[2,6]") "}", 8,
         "'" T "': data is misaligned", "not a multiple of its element size 4"},
        /* 2^60 bytes: a clean truncation error, no overflow. */
        {"huge", ONE("BF16", "[576460752303423488]", "[0,1152921504606846976]"), 16,
         "looks truncated", "1152921504606846976 data bytes"},
        {"overflow", ONE("F32", "[1099511627776,1099511627776]", "[0,4]"), 4, QT,
         "too large to address"},
        {"bigint", ONE("F32", "[1]", "[0,99999999999999999999]"), 4, "not valid JSON", "line 1"},
        {"duplicate",
         "{\"" T "\": " ENT("F32", "[1]", "[0,4]") ",\n\"" T "\": " ENT("F32", "[1]", "[4,8]") "}",
         8, "header has '" T "' twice", "line 2"},
        {"dupescaped",
         "{\"" ESC "\": " ENT("F32", "[1]", "[0,4]") ",\"" ESC
                                                     "\": " ENT("F32", "[1]", "[4,8]") "}",
         8, "header has 'an \"escaped\" long name' twice", NULL},
        {"notjson", "{\"a\": [1,", 0, "header is not valid JSON", "line 1, column"},
        {"array", "[1, 2]", 0, "header is not a JSON object", NULL},
    };
    char path[PATH_MAX], want[PATH_MAX + 256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.safetensors", cases[i].file);
        path_of(path, name);
        craft(path, cases[i].header, cases[i].data);
        expect_refused(path, TIDE_E_FORMAT, cases[i].n1, cases[i].n2);
        unlink(path);
    }

    /* Truncated: the message gives the expected and the actual size. */
    const char *hdr =
        "{\"a\": " ENT("F32", "[4]", "[0,16]") ",\"b\": " ENT("F32", "[4]", "[16,32]") "}";
    path_of(path, "truncated.safetensors");
    size_t hlen = craft(path, hdr, 20);
    snprintf(want, sizeof want,
             "header describes 32 data bytes, so the file should be %zu bytes, but it is %zu "
             "bytes",
             8 + hlen + 32, 8 + hlen + 20);
    expect_refused(path, TIDE_E_FORMAT, "looks truncated", want);

    /* The same header over its full data opens. */
    craft(path, hdr, 32);
    struct tide_st *st = NULL;
    CHECK_EQ_INT(tide_st_open(path, &st), TIDE_OK);
    CHECK_EQ_INT(tide_st_count(st), 2);
    CHECK_EQ_INT(tide_st_data_bytes(st), 32);
    tide_st_close(st);

    path_of(path, "short.safetensors");
    write_text(path, "abcd");
    expect_refused(path, TIDE_E_FORMAT, "file is 4 bytes, too short", NULL);
    write_text(path, "");
    expect_refused(path, TIDE_E_FORMAT, "file is 0 bytes", NULL);

    path_of(path, "pastend.safetensors");
    craft_raw(path, 1000, "{}", 0, 0);
    expect_refused(path, TIDE_E_FORMAT,
                   "header length 1000 runs past the end of the file (10 bytes)", NULL);

    path_of(path, "oversized.safetensors");
    craft_raw(path, 200u << 20, "{}", 0, 0);
    expect_refused(path, TIDE_E_FORMAT, "header length is 209715200 bytes", "100 MiB");
    craft_raw(path, UINT64_MAX, "{}", 0, 0);
    expect_refused(path, TIDE_E_FORMAT, "header length is 18446744073709551615 bytes", NULL);

    path_of(path, "absent.safetensors");
    expect_refused(path, TIDE_E_NOTFOUND, NULL, NULL);
}

static const struct tspec shard_a[] = {{"a.w", TIDE_DTYPE_F32, 1, {4}},
                                       {"a.b", TIDE_DTYPE_BF16, 2, {2, 3}}};
static const struct tspec shard_b[] = {{"b.w", TIDE_DTYPE_I64, 1, {2}}};
#define SA "model-00001-of-00002.safetensors"
#define SB "model-00002-of-00002.safetensors"

static void test_sharded(void)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], idx[PATH_MAX + 64], slash[PATH_MAX + 2];
    path_of(dir, "sharded");
    CHECK_EQ_INT(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/" SA, dir);
    CHECK_EQ_INT(write_st(path, shard_a, 2, 1, 5), TIDE_OK);
    snprintf(path, sizeof path, "%s/" SB, dir);
    CHECK_EQ_INT(write_st(path, shard_b, 1, 2, 5), TIDE_OK);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    write_text(idx, "{\"metadata\": {\"total_size\": 44}, \"weight_map\": {\"b.w\": \"" SB
                    "\", \"a.w\": \"" SA "\", \"a.b\": \"" SA "\"}}");

    struct tide_st *st = NULL;
    log_reset();
    CHECK_EQ_INT(tide_st_open(dir, &st), TIDE_OK);
    CHECK_EQ_INT(n_errors, 0);
    if (st) {
        CHECK_EQ_INT(tide_st_count(st), 3);
        check_tensors(st, 0, shard_a, 2, 1);
        check_tensors(st, 2, shard_b, 1, 2);
        CHECK_EQ_INT(tide_st_data_bytes(st), 16 + 12 + 16);
        CHECK(tide_st_file_of(st, "b.w") && !strcmp(tide_st_file_of(st, "b.w"), path));
        const int64_t s[] = {2, 2};
        log_reset();
        CHECK_EQ_INT(tide_st_expect(st, "b.w", TIDE_DTYPE_I64, 2, s, NULL), TIDE_E_FORMAT);
        char want[PATH_MAX + 128];
        snprintf(want, sizeof want, "%s: tensor 'b.w': expected I64 [2, 2], found I64 [2]", path);
        CHECK_CONTAINS(logbuf, want);
        tide_st_close(st);
    }
    /* A trailing slash gives the same paths, without a doubled slash. */
    snprintf(slash, sizeof slash, "%s/", dir);
    CHECK_EQ_INT(tide_st_open(slash, &st), TIDE_OK);
    if (st) {
        CHECK(tide_st_file_of(st, "b.w") && !strcmp(tide_st_file_of(st, "b.w"), path));
        tide_st_close(st);
    }

    write_text(idx, "{\"weight_map\": {\"b.w\": \"" SA "\", \"a.w\": \"" SB "\"}}");
    expect_refused(dir, TIDE_E_FORMAT, "tensor 'b.w' is mapped to shard " SA, "(it is in");
    CHECK_CONTAINS(logbuf, idx);

    write_text(idx, "{\"weight_map\": {\"c.w\": \"" SB "\", \"a.w\": \"" SA "\"}}");
    expect_refused(dir, TIDE_E_FORMAT, "tensor 'c.w' is mapped to shard " SB, idx);

    write_text(idx, "{\"weight_map\": {\"c.w\": \"model-00003-of-00003.safetensors\"}}");
    expect_refused(dir, TIDE_E_NOTFOUND, "shard model-00003-of-00003.safetensors is missing", idx);

    write_text(idx, "{\"weight_map\": {\"c.w\": \"../" SA "\"}}");
    expect_refused(dir, TIDE_E_FORMAT, "tensor 'c.w' maps to \"../" SA "\", which is not a file",
                   idx);

    write_text(idx, "{\"weight_map\": {\"c.w\": 3}}");
    expect_refused(dir, TIDE_E_FORMAT, "tensor 'c.w' maps to 3", idx);

    write_text(idx, "{\"weight_map\": {\"" T "\": \"" SA "\",\n \"" T "\": \"" SB "\"}}");
    expect_refused(dir, TIDE_E_FORMAT, "index has '" T "' twice", "line 2");

    write_text(idx, "{\"weight_map\": {\"a.w\": \"" SA "\", }");
    expect_refused(dir, TIDE_E_FORMAT, "index is not valid JSON", "line 1");

    write_text(idx, "[]");
    expect_refused(dir, TIDE_E_FORMAT, "index is not a JSON object", idx);

    write_text(idx, "{\"metadata\": {}}");
    expect_refused(dir, TIDE_E_FORMAT, "no \"weight_map\"", idx);

    /* A tensor in two shards. */
    snprintf(path, sizeof path, "%s/extra.safetensors", dir);
    CHECK_EQ_INT(write_st(path, shard_a, 1, 3, 5), TIDE_OK);
    write_text(idx, "{\"weight_map\": {\"a.w\": \"" SA "\", \"x\": \"extra.safetensors\"}}");
    expect_refused(dir, TIDE_E_FORMAT, "tensor 'a.w' is in two shards", "extra.safetensors");

    /* A bad shard is named by its own path. */
    snprintf(path, sizeof path, "%s/" SB, dir);
    craft_raw(path, 2, "{]", 0, 0);
    write_text(idx, "{\"weight_map\": {\"b.w\": \"" SB "\"}}");
    expect_refused(dir, TIDE_E_FORMAT, path, "header is not valid JSON");
}

static void test_directories(void)
{
    char dir[PATH_MAX], path[PATH_MAX + 64], want[PATH_MAX + 128];
    path_of(dir, "single");
    CHECK_EQ_INT(mkdir(dir, 0755), 0);
    snprintf(want, sizeof want, "no model.safetensors or model.safetensors.index.json in %s", dir);
    expect_refused(dir, TIDE_E_NOTFOUND, want, NULL);

    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_EQ_INT(write_st(path, shard_b, 1, 4, 3), TIDE_OK);
    struct tide_st *st = NULL;
    CHECK_EQ_INT(tide_st_open(dir, &st), TIDE_OK);
    if (st) {
        check_tensors(st, 0, shard_b, 1, 4);
        CHECK(!strcmp(tide_st_file_of(st, "b.w"), path));
        log_reset();
        CHECK_EQ_INT(tide_st_expect(st, "lm_head.weight", TIDE_DTYPE_BF16, 0, NULL, NULL),
                     TIDE_E_NOTFOUND);
        snprintf(want, sizeof want, "%s: missing tensor 'lm_head.weight'", dir);
        CHECK_CONTAINS(logbuf, want);
        tide_st_close(st);
    }
}

struct reader_arg {
    const struct tide_st *st;
    int bad;
};

static void *reader_main(void *p)
{
    struct reader_arg *a = p;
    for (int r = 0; r < 2000; r++) {
        for (int i = 0; i < N_MIXED; i++) {
            const struct tide_view *v = tide_st_find(a->st, mixed[i].name);
            a->bad += !v || v != tide_st_at(a->st, i) || strcmp(v->name, mixed[i].name) ||
                      v->nbytes != spec_bytes(&mixed[i]);
        }
        a->bad += tide_st_find(a->st, "absent") != NULL;
    }
    return NULL;
}

static void test_concurrent_readers(void)
{
    char path[PATH_MAX];
    path_of(path, "mixed.safetensors");
    struct tide_st *st = NULL;
    CHECK_EQ_INT(tide_st_open(path, &st), TIDE_OK);
    if (!st)
        return;
    pthread_t th[4];
    struct reader_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct reader_arg){st, 0};
        CHECK_EQ_INT(pthread_create(&th[i], NULL, reader_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
    }
    tide_st_close(st);
}

/* tide_st_open_flags: read into memory and/or locked, the same tensors and
 * bytes as the mapping; a refused lock is a warning, not a failure. */
static void test_open_flags(void)
{
    char path[PATH_MAX];
    path_of(path, "mixed.safetensors");
    const unsigned flags[] = {TIDE_ST_READ, TIDE_ST_MLOCK, TIDE_ST_READ | TIDE_ST_MLOCK};
    struct tide_st *ref = NULL;
    CHECK_EQ_INT(tide_st_open(path, &ref), TIDE_OK);
    if (!ref)
        return;
    for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
        struct tide_st *st = NULL;
        log_reset();
        CHECK_EQ_INT(tide_st_open_flags(path, flags[f], &st), TIDE_OK);
        CHECK_EQ_INT(n_errors, 0);
        if (!st)
            continue;
        CHECK_EQ_INT(tide_st_count(st), tide_st_count(ref));
        check_tensors(st, 0, mixed, N_MIXED, 11);
        for (int i = 0; i < tide_st_count(st); i++) {
            const struct tide_view *a = tide_st_at(st, i), *b = tide_st_at(ref, i);
            CHECK(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes));
            /* Read into memory: the views point there, not into a file mapping. */
            if (flags[f] & TIDE_ST_READ)
                CHECK(a->data != b->data);
        }
        tide_st_close(st);
    }
    /* A bad file is refused the same way when read. */
    char bad[PATH_MAX];
    path_of(bad, "short-read.safetensors");
    write_text(bad, "1234");
    struct tide_st *st = NULL;
    log_reset();
    CHECK_EQ_INT(tide_st_open_flags(bad, TIDE_ST_READ, &st), TIDE_E_FORMAT);
    CHECK(st == NULL);
    CHECK_CONTAINS(logbuf, "too short");
    tide_st_close(ref);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tide-st-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    tide_log_set_sink(sink, NULL);
    TEST_RUN(test_round_trip);
    TEST_RUN(test_large_stream);
    TEST_RUN(test_writer_drops_cache);
    TEST_RUN(test_writer_refusals);
    TEST_RUN(test_reader_refusals);
    TEST_RUN(test_sharded);
    TEST_RUN(test_directories);
    TEST_RUN(test_concurrent_readers);
    TEST_RUN(test_open_flags);
    tide_log_set_sink(NULL, NULL);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_DONE();
}
