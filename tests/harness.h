/* A test harness in a few macros. A test file defines test functions and a
 * main() that calls TEST_RUN for each; the process exits non-zero when any
 * check failed, or 77 when a test calls TEST_SKIP. */
#ifndef TIDE_TEST_HARNESS_H
#define TIDE_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures;
static int test_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        test_checks++;                                                                             \
        if (va_ != vb_) {                                                                          \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK_EQ_INT failed: %s = %lld, %s = %lld\n", __FILE__,        \
                    __LINE__, #a, va_, #b, vb_);                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        test_checks++;                                                                             \
        if (!(fabs(va_ - vb_) <= (tol))) {                                                         \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %g, %s = %g, tol %g\n", __FILE__,      \
                    __LINE__, #a, va_, #b, vb_, (double)(tol));                                    \
        }                                                                                          \
    } while (0)

/* True when haystack contains needle; prints both when it does not. */
#define CHECK_CONTAINS(haystack, needle)                                                           \
    do {                                                                                           \
        const char *h_ = (haystack), *n_ = (needle);                                               \
        test_checks++;                                                                             \
        if (!h_ || !strstr(h_, n_)) {                                                              \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: expected to find \"%s\" in:\n%s\n", __FILE__, __LINE__, n_,    \
                    h_ ? h_ : "(null)");                                                           \
        }                                                                                          \
    } while (0)

#define TEST_RUN(fn)                                                                               \
    do {                                                                                           \
        int before_ = test_failures;                                                               \
        fn();                                                                                      \
        fprintf(stderr, "%s %s\n", test_failures == before_ ? "ok  " : "FAIL", #fn);               \
    } while (0)

#define TEST_SKIP(why)                                                                             \
    do {                                                                                           \
        fprintf(stderr, "skipped: %s\n", why);                                                     \
        exit(77);                                                                                  \
    } while (0)

#define TEST_DONE()                                                                                \
    do {                                                                                           \
        fprintf(stderr, "%d checks, %d failed\n", test_checks, test_failures);                     \
        return test_failures ? 1 : 0;                                                              \
    } while (0)

#endif
