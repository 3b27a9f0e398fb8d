// Host-callable launchers of lcr's CUDA kernels (defined in *.cu, bound in module.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/slab_table.h"

namespace lcr {
namespace slab_fused {
struct FusedBatch;
}  // namespace slab_fused

cudaError_t launch_slabsets_of(const int64_t* keys, int64_t n, uint32_t num_slabsets, uint32_t* out,
                               cudaStream_t stream);

// SlabHashCache (slab_cache.cu); the logic and the meaning of each argument are in
// csrc/common/slab_kernels.h, the order of the calls in lcr/embedding/cache.py.
cudaError_t launch_slab_probe(const SlabTable& t, const int64_t* keys, int64_t n, int64_t* slot_of,
                              int64_t* readback, cudaStream_t stream);
cudaError_t launch_slab_refresh(const SlabTable& t, const int64_t* slot_of, int64_t n, int64_t clock,
                                int64_t* hit_count, cudaStream_t stream);
cudaError_t launch_slab_insert_groups(const SlabTable& t, const int64_t* keys, const int64_t* first,
                                      const int64_t* members, const int64_t* starts, int64_t groups, int64_t clock,
                                      int64_t stamp_base, int64_t* slots, int64_t* evicted, cudaStream_t stream);
cudaError_t launch_slab_set_predictions(const SlabTable& t, const int64_t* keys, const double* values, int64_t n,
                                        cudaStream_t stream);
cudaError_t launch_slab_gather(const void* rows, int64_t row_bytes, const int64_t* slot_of, int64_t n, void* out,
                               cudaStream_t stream);
// The fused SLS of one batch (csrc/common/slab_fused.h); the caller zeroes b.counters first.
cudaError_t launch_slab_fused_sls(const SlabTable& t, const slab_fused::FusedBatch& b, cudaStream_t stream);
cudaError_t launch_slabsets_of_device(const int64_t* keys, int64_t n, uint32_t num_slabsets, int32_t* out,
                                      cudaStream_t stream);
}  // namespace lcr
