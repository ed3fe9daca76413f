/* Host emulation of the CUDA C++ that plugins/backend-cuda/kernels.cu uses,
 * so the kernels run on a CPU-only machine (tests/gpu/emu/README.md).
 *
 * Included first by kernels_emu.cpp, before kernels.cu. A launch
 * CUDA_K_LAUNCH(kernel, blocks, threads, stream)(args...) enqueues the grid
 * on the emulated stream; at execution, blocks run one after the other and
 * the threads of a block run as fibers that switch at __syncthreads(). Shared
 * memory is a function-local static, which is correct because one block runs
 * at a time. */
#ifndef TIDE_EMU_CUDA_H
#define TIDE_EMU_CUDA_H

/* Before the CUDA headers, which keep a definition made first. */
#define __shared__ static
#define __launch_bounds__(...)

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>

#define CUDA_K_EMULATED 1

namespace emu
{

struct idx3 {
    unsigned x, y, z;
};

/* Enqueue a grid of `blocks` x `threads` running `body` on stream s (sets
 * the last error for an invalid configuration). */
void launch(cudaStream_t s, unsigned blocks, unsigned threads, std::function<void()> body);

/* Barrier of the threads of the running block. */
void syncthreads();

template <class K> struct launcher {
    K kernel;
    unsigned blocks, threads;
    cudaStream_t stream;
    template <class... A> void operator()(A... args) const
    {
        K k = kernel;
        launch(stream, blocks, threads, [k, args...]() { k(args...); });
    }
};

template <class K> launcher<K> make_launcher(K k, unsigned blocks, unsigned threads, cudaStream_t s)
{
    return launcher<K>{k, blocks, threads, s};
}

} // namespace emu

extern emu::idx3 threadIdx, blockIdx, blockDim, gridDim;

#define CUDA_K_LAUNCH(kernel, blocks, threads, stream)                                             \
    ::emu::make_launcher(kernel, (unsigned)(blocks), (unsigned)(threads), (stream))

inline void __syncthreads()
{
    emu::syncthreads();
}

inline float __uint_as_float(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

#endif
