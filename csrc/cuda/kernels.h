// Host-callable launchers of lcr's CUDA kernels (defined in *.cu, bound in module.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace lcr {
cudaError_t launch_slabsets_of(const int64_t* keys, int64_t n, uint32_t num_slabsets, uint32_t* out,
                               cudaStream_t stream);
}  // namespace lcr
