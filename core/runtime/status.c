#include "tide/status.h"

const char *tide_status_str(int status)
{
    switch (status) {
    case TIDE_OK:
        return "ok";
    case TIDE_E_INVAL:
        return "invalid argument";
    case TIDE_E_NOMEM:
        return "out of memory";
    case TIDE_E_IO:
        return "i/o error";
    case TIDE_E_FORMAT:
        return "malformed input";
    case TIDE_E_NOTFOUND:
        return "not found";
    case TIDE_E_ABI:
        return "plugin ABI mismatch";
    case TIDE_E_UNSUPPORTED:
        return "unsupported";
    case TIDE_E_DEVICE:
        return "device error";
    case TIDE_E_BUDGET:
        return "memory budget exceeded";
    case TIDE_E_INTERRUPTED:
        return "interrupted";
    case TIDE_E_CONFIG:
        return "configuration error";
    case TIDE_E_RANGE:
        return "value out of range";
    case TIDE_E_CANCELLED:
        return "cancelled";
    }
    return "unknown status";
}
