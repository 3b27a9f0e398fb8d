// CUDA engine of SlabHashCache: csrc/common/slab_kernels.h run by GPU warps.
//
// The logic lives in slab_kernels.h, shared with the host warp model that CI runs
// (csrc/cpu/slab_warp_model.cpp); this file only maps items to warps or threads.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/slab_kernels.h"
#include "cuda/cuda_warp.cuh"
#include "cuda/kernels.h"

namespace lcr {
namespace {

namespace k = slab_kernels;
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpLanes;

__global__ void probe_kernel(SlabTable t, const int64_t* keys, int64_t n, int64_t* slot_of, int64_t* readback) {
    const int64_t p = global_warp();
    if (p >= n) return;  // warp-uniform
    CudaWarp w;
    k::probe_lookup(w, t, keys, p, slot_of, readback);
}

__global__ void refresh_kernel(SlabTable t, const int64_t* slot_of, int64_t n, int64_t clock, int64_t* hit_count) {
    const int64_t p = global_thread();
    if (p >= n) return;
    CudaWarp w;
    k::refresh_lookup(w, t, slot_of, p, clock, hit_count);
}

__global__ void insert_groups_kernel(SlabTable t, const int64_t* keys, const int64_t* first, const int64_t* members,
                                     const int64_t* starts, int64_t groups, int64_t clock, int64_t stamp_base,
                                     int64_t* slots, int64_t* evicted) {
    const int64_t g = global_warp();
    if (g >= groups) return;
    CudaWarp w;
    k::insert_group(w, t, keys, first, members, starts, g, clock, stamp_base, slots, evicted);
}

__global__ void set_predictions_kernel(SlabTable t, const int64_t* keys, const double* values, int64_t n) {
    const int64_t i = global_warp();
    if (i >= n) return;
    CudaWarp w;
    k::set_prediction(w, t, keys, values, i);
}

unsigned blocks_for_warps(int64_t warps) {
    return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

cudaError_t launch_slab_probe(const SlabTable& t, const int64_t* keys, int64_t n, int64_t* slot_of,
                              int64_t* readback, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    probe_kernel<<<blocks_for_warps(n), kThreads, 0, stream>>>(t, keys, n, slot_of, readback);
    return cudaGetLastError();
}

cudaError_t launch_slab_refresh(const SlabTable& t, const int64_t* slot_of, int64_t n, int64_t clock,
                                int64_t* hit_count, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    refresh_kernel<<<blocks, kThreads, 0, stream>>>(t, slot_of, n, clock, hit_count);
    return cudaGetLastError();
}

cudaError_t launch_slab_insert_groups(const SlabTable& t, const int64_t* keys, const int64_t* first,
                                      const int64_t* members, const int64_t* starts, int64_t groups, int64_t clock,
                                      int64_t stamp_base, int64_t* slots, int64_t* evicted, cudaStream_t stream) {
    if (groups == 0) return cudaSuccess;
    insert_groups_kernel<<<blocks_for_warps(groups), kThreads, 0, stream>>>(t, keys, first, members, starts, groups,
                                                                             clock, stamp_base, slots, evicted);
    return cudaGetLastError();
}

cudaError_t launch_slab_set_predictions(const SlabTable& t, const int64_t* keys, const double* values, int64_t n,
                                        cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    set_predictions_kernel<<<blocks_for_warps(n), kThreads, 0, stream>>>(t, keys, values, n);
    return cudaGetLastError();
}

}  // namespace lcr
