#include <math.h>

#include "tide/tensor.h"

size_t tide_dtype_size(enum tide_dtype t)
{
    switch (t) {
    case TIDE_DTYPE_F32:
        return 4;
    case TIDE_DTYPE_F16:
        return 2;
    case TIDE_DTYPE_BF16:
        return 2;
    case TIDE_DTYPE_I64:
        return 8;
    case TIDE_DTYPE_I32:
        return 4;
    case TIDE_DTYPE_I8:
    case TIDE_DTYPE_U8:
    case TIDE_DTYPE_F8_E4M3:
        return 1;
    case TIDE_DTYPE_INVALID:
        break;
    }
    return 0;
}

const char *tide_dtype_name(enum tide_dtype t)
{
    switch (t) {
    case TIDE_DTYPE_F32:
        return "F32";
    case TIDE_DTYPE_F16:
        return "F16";
    case TIDE_DTYPE_BF16:
        return "BF16";
    case TIDE_DTYPE_I64:
        return "I64";
    case TIDE_DTYPE_I32:
        return "I32";
    case TIDE_DTYPE_I8:
        return "I8";
    case TIDE_DTYPE_U8:
        return "U8";
    case TIDE_DTYPE_F8_E4M3:
        return "F8_E4M3";
    case TIDE_DTYPE_INVALID:
        break;
    }
    return "?";
}

float tide_f16_to_f32(uint16_t h)
{
    int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0)
        v = ldexpf((float)man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexpf((float)(man | 0x400), exp - 25);
    return sign ? -v : v;
}
