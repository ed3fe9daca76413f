/* plugins/backend-cuda/kernels.cu compiled as host C++ for the emulation
 * (emu_cuda.h): the same source, launched on emulated streams. */
#include "emu_cuda.h"

#include "kernels.cu"
