// CUDA engine of SlabHashCache: csrc/common/slab_kernels.h run by GPU warps.
//
// The logic lives in slab_kernels.h, shared with the host warp model that CI runs
// (csrc/cpu/slab_warp_model.cpp); this file only maps items to warps or threads.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/slab_fused.h"
#include "common/slab_kernels.h"
#include "cuda/cuda_warp.cuh"
#include "cuda/kernels.h"

namespace lcr {
namespace {

namespace k = slab_kernels;
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarpLanes;

__global__ void probe_kernel(SlabTable t, const int64_t* keys, int64_t n, int64_t* slot_of, int64_t* readback) {
    const int64_t p = global_thread();
    if (global_warp() * kWarpLanes >= n) return;  // warp-uniform: spare lanes of the last warp stay
    CudaWarp w;
    k::probe_lookup(w, t, keys, n, p, slot_of, readback);
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
    const int64_t i = global_thread();
    if (i < n) k::set_prediction(t, keys, values, i);
}

// gather: out row p = rows[slot_of[p]], zeros where slot_of[p] < 0; one thread per
// Chunk of a row (16 bytes where the row size allows), so narrow rows still move in
// wide loads.
template <typename Chunk>
__global__ void gather_kernel(const Chunk* rows, int64_t chunks_per_row, const int64_t* slot_of, int64_t n,
                              Chunk* out) {
    const int64_t i = global_thread();
    if (i >= n * chunks_per_row) return;
    const int64_t p = i / chunks_per_row;
    const int64_t slot = slot_of[p];
    out[i] = slot >= 0 ? rows[slot * chunks_per_row + (i - p * chunks_per_row)] : Chunk{};
}

// The fused SLS (csrc/common/slab_fused.h): a warp per bag, then a warp per slabset with
// misses, grid-stride over the device's count of them.
template <class E, int Bytes>
__global__ void fused_pool_kernel(SlabTable t, slab_fused::FusedBatch b) {
    const int64_t bag = global_warp();
    if (bag >= b.bags) return;  // warp-uniform
    CudaWarp w;
    slab_fused::pool_bag<CudaWarp, E, Bytes>(w, t, b, bag);
}

template <int Bytes>
__global__ void fused_insert_kernel(SlabTable t, slab_fused::FusedBatch b) {
    CudaWarp w;
    slab_fused::insert_misses<CudaWarp, Bytes>(w, t, b, global_warp(), int64_t(gridDim.x) * kWarpsPerBlock);
}

// Enough insert warps to fill a large GPU; an all-hit batch's insert exits at once.
constexpr int64_t kFusedInsertWarps = 8192;

unsigned blocks_for_warps(int64_t warps) {
    return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

unsigned blocks_for_threads(int64_t threads) {
    return static_cast<unsigned>((threads + kThreads - 1) / kThreads);
}

}  // namespace

cudaError_t launch_slab_probe(const SlabTable& t, const int64_t* keys, int64_t n, int64_t* slot_of,
                              int64_t* readback, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    probe_kernel<<<blocks_for_threads(n), kThreads, 0, stream>>>(t, keys, n, slot_of, readback);
    return cudaGetLastError();
}

cudaError_t launch_slab_refresh(const SlabTable& t, const int64_t* slot_of, int64_t n, int64_t clock,
                                int64_t* hit_count, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    refresh_kernel<<<blocks_for_threads(n), kThreads, 0, stream>>>(t, slot_of, n, clock, hit_count);
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

template <typename Chunk>
cudaError_t launch_gather(const void* rows, int64_t row_bytes, const int64_t* slot_of, int64_t n, void* out,
                          cudaStream_t stream) {
    const int64_t per_row = row_bytes / int64_t(sizeof(Chunk));
    gather_kernel<Chunk><<<blocks_for_threads(n * per_row), kThreads, 0, stream>>>(
        static_cast<const Chunk*>(rows), per_row, slot_of, n, static_cast<Chunk*>(out));
    return cudaGetLastError();
}

cudaError_t launch_slab_gather(const void* rows, int64_t row_bytes, const int64_t* slot_of, int64_t n, void* out,
                               cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const auto aligned = [&](uintptr_t size) {
        return row_bytes % size == 0 && reinterpret_cast<uintptr_t>(rows) % size == 0 &&
               reinterpret_cast<uintptr_t>(out) % size == 0;
    };
    if (aligned(16)) return launch_gather<uint4>(rows, row_bytes, slot_of, n, out, stream);
    if (aligned(8)) return launch_gather<uint2>(rows, row_bytes, slot_of, n, out, stream);
    if (aligned(4)) return launch_gather<uint32_t>(rows, row_bytes, slot_of, n, out, stream);
    if (aligned(2)) return launch_gather<uint16_t>(rows, row_bytes, slot_of, n, out, stream);
    return launch_gather<uint8_t>(rows, row_bytes, slot_of, n, out, stream);
}

cudaError_t launch_slab_fused_sls(const SlabTable& t, const slab_fused::FusedBatch& b, cudaStream_t stream) {
    return slab_fused::with_row_format(b, slab_fused::piece_bytes(b), [&](auto element, auto piece) {
        using E = decltype(element);
        constexpr int kBytes = decltype(piece)::value;
        if (b.bags > 0) fused_pool_kernel<E, kBytes><<<blocks_for_warps(b.bags), kThreads, 0, stream>>>(t, b);
        const int64_t warps = std::min(slab_fused::touched_capacity(b.n, t.num_slabsets), kFusedInsertWarps);
        if (warps > 0) fused_insert_kernel<kBytes><<<blocks_for_warps(warps), kThreads, 0, stream>>>(t, b);
        return cudaGetLastError();
    });
}

cudaError_t launch_slab_set_predictions(const SlabTable& t, const int64_t* keys, const double* values, int64_t n,
                                        cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    set_predictions_kernel<<<blocks_for_threads(n), kThreads, 0, stream>>>(t, keys, values, n);
    return cudaGetLastError();
}

}  // namespace lcr
