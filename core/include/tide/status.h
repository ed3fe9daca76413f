/* Status codes shared by the core and every plugin.
 *
 * Functions that act return enum tide_status: TIDE_OK (0) or a negative code.
 * The failing function logs once, with the file, key or tensor at fault;
 * callers only propagate the code. */
#ifndef TIDE_STATUS_H
#define TIDE_STATUS_H

#include "tide/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Codes are only appended; a code's value never changes. */
enum tide_status {
    TIDE_OK = 0,
    TIDE_E_INVAL = -1,        /* bad argument or value */
    TIDE_E_NOMEM = -2,        /* host allocation failed */
    TIDE_E_IO = -3,           /* open/read/write/mmap failed (errno logged) */
    TIDE_E_FORMAT = -4,       /* malformed file: safetensors, json, ini, trace */
    TIDE_E_NOTFOUND = -5,     /* missing file, tensor, plugin or key */
    TIDE_E_ABI = -6,          /* plugin ABI or ops-table mismatch */
    TIDE_E_UNSUPPORTED = -7,  /* valid request this build or device cannot serve */
    TIDE_E_DEVICE = -8,       /* device runtime error (CUDA, oneDNN) */
    TIDE_E_BUDGET = -9,       /* memory budget cannot be met */
    TIDE_E_INTERRUPTED = -10, /* stopped by a signal */
    TIDE_E_CONFIG = -11,      /* configuration error (usage) */
    TIDE_E_RANGE = -12,       /* value out of range: too-long prompt, id beyond vocab */
    TIDE_E_CANCELLED = -13,   /* stopped by the caller (tide_engine_cancel, a callback) */
};

/* Short English text for a status code; never NULL, static storage. */
TIDE_API const char *tide_status_str(int status);

#ifdef __cplusplus
}
#endif
#endif
