/* model-common: a model's expected tensor list, as the shared helpers see it. */
#ifndef MODEL_COMMON_SPEC_H
#define MODEL_COMMON_SPEC_H

#include "tide/safetensors.h"

#define MC_NAME_MAX 128

/* The i-th expected tensor (0 <= i < count): its name, dtype and shape;
 * returns the number of dims. ctx is the model's validated config. */
typedef int (*mc_spec_fn)(const void *ctx, int i, char name[MC_NAME_MAX], enum tide_dtype *dtype,
                          int64_t shape[TIDE_MAX_DIMS]);

#endif
