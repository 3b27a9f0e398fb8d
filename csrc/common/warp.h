// What the SlabHashCache kernels need from a warp, for code compiled both by nvcc (the GPU
// kernels, csrc/cuda/cuda_warp.cuh) and by the host compiler against the warp model
// (csrc/cpu/warp_model.h), which replays the same source with 32 cooperative lanes.
//
// A Warp type W provides: lane(); ballot(bool); shfl(v, src); shfl_xor(v, mask); sync()
// (each a meeting point of all 32 lanes); atomic_add(p, v) and atomic_cas(p, expected,
// desired) on int64_t / int32_t, returning the old value.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define LCR_WARP_FN __device__ __forceinline__
#else
#define LCR_WARP_FN inline
#endif

namespace lcr {

constexpr int kWarpLanes = 32;

// Index of the lowest set bit of a non-zero lane mask.
LCR_WARP_FN int lowest_lane(unsigned mask) {
#if defined(__CUDA_ARCH__)
    return __ffs(mask) - 1;
#else
    return __builtin_ctz(mask);
#endif
}

// Index of the lowest set bit of a non-zero 64-bit word.
LCR_WARP_FN int lowest_bit64(uint64_t word) {
#if defined(__CUDA_ARCH__)
    return __ffsll(static_cast<long long>(word)) - 1;
#else
    return __builtin_ctzll(word);
#endif
}

LCR_WARP_FN int lane_count(unsigned mask) {
#if defined(__CUDA_ARCH__)
    return __popc(mask);
#else
    return __builtin_popcount(mask);
#endif
}

LCR_WARP_FN int imin(int a, int b) { return a < b ? a : b; }
LCR_WARP_FN int imax(int a, int b) { return a > b ? a : b; }

}  // namespace lcr
