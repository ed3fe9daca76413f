/* TIDE_API marks what libtide exports: the functions of these public
 * headers, and nothing else. libtide is built with hidden visibility (as
 * SQLite's SQLITE_API and ggml's GGML_API do), so its internals are not part
 * of any ABI; the `tide` command, the tests and the benchmarks link the
 * core's objects directly and export the same TIDE_API set to the plugins
 * they load. */
#ifndef TIDE_API_H
#define TIDE_API_H

#if defined(__GNUC__)
#define TIDE_API __attribute__((visibility("default")))
#else
#define TIDE_API
#endif

#endif
