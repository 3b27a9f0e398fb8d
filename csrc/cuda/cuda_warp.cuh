// The Warp of csrc/common/warp.h on a GPU: the warp-synchronous intrinsics, full mask.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/warp.h"

namespace lcr {

struct CudaWarp {
    static constexpr unsigned kFullMask = 0xffffffffu;

    __device__ __forceinline__ int lane() const { return threadIdx.x & 31; }
    __device__ __forceinline__ unsigned ballot(bool pred) const { return __ballot_sync(kFullMask, pred); }
    template <class T>
    __device__ __forceinline__ T shfl(T v, int src) const { return __shfl_sync(kFullMask, v, src); }
    template <class T>
    __device__ __forceinline__ T shfl_xor(T v, int mask) const { return __shfl_xor_sync(kFullMask, v, mask); }
    __device__ __forceinline__ void sync() const { __syncwarp(); }

    __device__ __forceinline__ int64_t atomic_add(int64_t* p, int64_t v) const {
        return static_cast<int64_t>(atomicAdd(reinterpret_cast<unsigned long long*>(p),
                                              static_cast<unsigned long long>(v)));
    }
    __device__ __forceinline__ int32_t atomic_add(int32_t* p, int32_t v) const { return atomicAdd(p, v); }
    __device__ __forceinline__ int64_t atomic_cas(int64_t* p, int64_t expected, int64_t desired) const {
        return static_cast<int64_t>(atomicCAS(reinterpret_cast<unsigned long long*>(p),
                                              static_cast<unsigned long long>(expected),
                                              static_cast<unsigned long long>(desired)));
    }
};

// Grid-wide indices for kernels that map one warp, or one thread, to one item.
__device__ __forceinline__ int64_t global_warp() {
    return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}
__device__ __forceinline__ int64_t global_thread() {
    return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}

}  // namespace lcr
