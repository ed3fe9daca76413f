/* The kind of a JSON value as error messages name it ("an array", "null"),
 * shared by the readers of JSON input (tokenizer.json, serve's request
 * bodies). Private to libtide and the CLI. */
#ifndef TIDE_JSON_KIND_H
#define TIDE_JSON_KIND_H

#include <jansson.h>

/* "nothing" for NULL (a missing value). */
static inline const char *tide_json_kind(const json_t *v)
{
    if (!v)
        return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

#endif
