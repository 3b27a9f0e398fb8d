// CUDA side of the SlabHash key -> slabset mapping (one thread per key).
#include <cuda_runtime.h>

#include <cstdint>

#include "common/slab_hash.h"
#include "cuda/kernels.h"

namespace lcr {
namespace {

template <typename Out>
__global__ void slabsets_of_kernel(const int64_t* keys, int64_t n, uint32_t num_slabsets, Out* out) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = static_cast<Out>(slabset_of(keys[i], num_slabsets));
}

template <typename Out>
cudaError_t launch(const int64_t* keys, int64_t n, uint32_t num_slabsets, Out* out, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    slabsets_of_kernel<Out><<<blocks, kThreads, 0, stream>>>(keys, n, num_slabsets, out);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_slabsets_of(const int64_t* keys, int64_t n, uint32_t num_slabsets, uint32_t* out,
                               cudaStream_t stream) {
    return launch(keys, n, num_slabsets, out, stream);
}

// int32 output for torch tensors (which lack a full uint32 type); num_slabsets < 2^31.
cudaError_t launch_slabsets_of_device(const int64_t* keys, int64_t n, uint32_t num_slabsets, int32_t* out,
                                      cudaStream_t stream) {
    return launch(keys, n, num_slabsets, out, stream);
}

}  // namespace lcr
