// CUDA engine of SlabHashCache: the batch semantics of lcr.embedding.reference.
//
// A warp owns one slabset at a time: lane l holds slot l of slab 0 and slot l of slab 1,
// so probing is two coalesced loads and a ballot, and every choice of victim is a warp
// reduction. Misses arrive grouped by slabset (sorted stably on the host side of the
// launch), and one warp inserts a group's misses in batch order: decisions are the CPU
// engine's, with no locks and no atomics on slots.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/slab_table.h"
#include "cuda/kernels.h"

namespace lcr {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ int warp_lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int64_t global_warp() {
    return (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
}

// The slot holding `key` in its slabset, or -1 (the same answer on every lane).
__device__ int64_t warp_probe(const SlabTable& t, int64_t key) {
    const int64_t base = int64_t(slabset_of(key, t.num_slabsets)) * kSlabsetSlots;
    const int lane = warp_lane();
    const unsigned in_slab0 = __ballot_sync(kFullMask, t.keys[base + lane] == key);
    const unsigned in_slab1 = __ballot_sync(kFullMask, t.keys[base + kSlabSlots + lane] == key);
    if (in_slab0) return base + __ffs(in_slab0) - 1;
    if (in_slab1) return base + kSlabSlots + __ffs(in_slab1) - 1;
    return -1;
}

__global__ void find_kernel(SlabTable t, const int64_t* keys, int64_t n, int64_t* slots) {
    const int64_t i = global_warp();
    if (i >= n) return;
    const int64_t slot = warp_probe(t, keys[i]);
    if (warp_lane() == 0) slots[i] = slot;
}

__global__ void set_predictions_kernel(SlabTable t, const int64_t* keys, const double* values, int64_t n) {
    const int64_t i = global_warp();
    if (i >= n) return;
    const int64_t slot = warp_probe(t, keys[i]);
    if (slot >= 0 && warp_lane() == 0) t.predictions[slot] = isnan(values[i]) ? INFINITY : values[i];
}

// Hits of the batch: new stamp, and LARU's "requested since the phase start".
__global__ void refresh_hits_kernel(SlabTable t, const int64_t* found, int64_t n, int64_t clock) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n || found[i] < 0) return;
    const int64_t slot = found[i];
    t.stamps[slot] = clock + i;
    if (t.old[slot]) {
        t.old[slot] = 0;
        atomicSub(&t.old_count[slot / kSlabsetSlots], 1);  // several hits may share a slabset
    }
}

// One candidate slot during a victim search, compared lexicographically: a larger
// prediction wins, then the older slot (smaller recency rank).
struct Candidate {
    double prediction;
    int rank;
    int64_t slot;
    bool valid;
};

__device__ __forceinline__ bool better(const Candidate& a, const Candidate& b) {
    if (a.valid != b.valid) return a.valid;
    if (a.prediction != b.prediction) return a.prediction > b.prediction;
    return a.rank < b.rank;
}

__device__ Candidate warp_best(Candidate c) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        Candidate other;
        other.prediction = __shfl_xor_sync(kFullMask, c.prediction, offset);
        other.rank = __shfl_xor_sync(kFullMask, c.rank, offset);
        other.slot = __shfl_xor_sync(kFullMask, c.slot, offset);
        other.valid = __shfl_xor_sync(kFullMask, int(c.valid), offset);
        if (better(other, c)) c = other;
    }
    return c;
}

// A full slabset seen by one warp: per lane its two slots, their evictability and
// their rank among the evictable slots by stamp (0 = least recently used).
struct WarpSlabset {
    int64_t base;
    int64_t slot[2];
    bool evictable[2];
    int rank[2];
    int evictable_count;

    __device__ WarpSlabset(const SlabTable& t, uint32_t index, int64_t clock) {
        const int lane = warp_lane();
        base = int64_t(index) * kSlabsetSlots;
        slot[0] = base + lane;
        slot[1] = base + kSlabSlots + lane;
        const int64_t stamp0 = t.stamps[slot[0]], stamp1 = t.stamps[slot[1]];
        evictable[0] = stamp0 < clock;  // touched by this batch otherwise: pinned
        evictable[1] = stamp1 < clock;
        evictable_count = __popc(__ballot_sync(kFullMask, evictable[0])) +
                          __popc(__ballot_sync(kFullMask, evictable[1]));
        rank[0] = rank[1] = 0;
        for (int src = 0; src < 32; ++src) {
            const int64_t other0 = __shfl_sync(kFullMask, stamp0, src);
            const int64_t other1 = __shfl_sync(kFullMask, stamp1, src);
            const bool live0 = __shfl_sync(kFullMask, int(evictable[0]), src);
            const bool live1 = __shfl_sync(kFullMask, int(evictable[1]), src);
            rank[0] += (live0 && other0 < stamp0) + (live1 && other1 < stamp0);
            rank[1] += (live0 && other0 < stamp1) + (live1 && other1 < stamp1);
        }
    }

    // Among the `count` oldest evictable slots, the one with the largest prediction.
    __device__ int64_t predicted_victim(const SlabTable& t, int count) const {
        Candidate best{0.0, 0, -1, false};
        for (int s = 0; s < 2; ++s) {
            Candidate c{t.predictions[slot[s]], rank[s], slot[s], evictable[s] && rank[s] < count};
            if (better(c, best)) best = c;
        }
        return warp_best(best).slot;
    }

    __device__ int64_t oldest() const {
        const unsigned at0 = __ballot_sync(kFullMask, evictable[0] && rank[0] == 0);
        const unsigned at1 = __ballot_sync(kFullMask, evictable[1] && rank[1] == 0);
        return at0 ? base + __ffs(at0) - 1 : base + kSlabSlots + __ffs(at1) - 1;
    }
};

__device__ bool record_has(const uint64_t* record, int64_t key) {
    const uint32_t bit = record_bit_of(key);
    return (record[bit / 64] >> (bit % 64)) & 1;
}

// LARU (Algorithm 1) inside one slabset; every lane returns the same victim.
__device__ int64_t laru_victim(const SlabTable& t, const WarpSlabset& set, uint32_t index, int64_t key) {
    const int lane = warp_lane();
    uint64_t* record = t.record + int64_t(index) * kRecordWords;
    if (t.old_count[index] == 0) {  // new phase: everything cached becomes old
        t.old[set.slot[0]] = 1;
        t.old[set.slot[1]] = 1;
        for (int w = lane; w < kRecordWords; w += 32) record[w] = 0;
        if (lane == 0) {
            t.old_count[index] = kSlabsetSlots;
            t.lambda_shift[index] = 0;
        }
        __syncwarp();
    }
    const int shift = t.lambda_shift[index];
    if (record_has(record, key)) {  // a miss this phase's predictions caused: follow LRU
        __syncwarp();
        if (lane == 0) t.lambda_shift[index] = min(shift + 1, kMaxLambdaShift);
        return set.oldest();
    }
    const int count = min(max(kSlabsetSlots >> shift, 1), set.evictable_count);
    if (count == 1) return set.oldest();
    const int64_t victim = set.predicted_victim(t, count);
    if (lane == 0) {
        const uint32_t bit = record_bit_of(t.keys[victim]);
        record[bit / 64] |= uint64_t(1) << (bit % 64);
    }
    return victim;
}

// One warp per slabset group: members[starts[g] .. starts[g + 1]) are positions in
// `keys` of misses of one slabset, in batch order.
__global__ void insert_groups_kernel(SlabTable t, const int64_t* keys, int64_t n, const int64_t* members,
                                     const int64_t* starts, int64_t groups, int64_t clock, int64_t* slots,
                                     int64_t* evicted) {
    const int64_t g = global_warp();
    if (g >= groups) return;
    const int lane = warp_lane();
    for (int64_t m = starts[g]; m < starts[g + 1]; ++m) {
        const int64_t i = members[m];
        const int64_t key = keys[i];
        const uint32_t index = slabset_of(key, t.num_slabsets);
        const int64_t base = int64_t(index) * kSlabsetSlots;
        const unsigned free0 = __ballot_sync(kFullMask, t.keys[base + lane] == kEmptyKey);
        const unsigned free1 = __ballot_sync(kFullMask, t.keys[base + kSlabSlots + lane] == kEmptyKey);
        int64_t slot = -1, victim_key = kEmptyKey;
        if (free0 || free1) {
            slot = free0 ? base + __ffs(free0) - 1 : base + kSlabSlots + __ffs(free1) - 1;
        } else {
            const WarpSlabset set(t, index, clock);
            if (set.evictable_count > 0) {
                switch (t.policy) {
                    case kLru: slot = set.oldest(); break;
                    case kFpb: slot = set.predicted_victim(t, set.evictable_count); break;
                    case kHf: slot = set.predicted_victim(t, min(t.hf_window, set.evictable_count)); break;
                    default: slot = laru_victim(t, set, index, key); break;
                }
                victim_key = t.keys[slot];
            }
        }
        __syncwarp();
        if (lane == 0) {
            if (slot >= 0) {
                if (t.old[slot]) {
                    t.old[slot] = 0;
                    t.old_count[index] -= 1;
                }
                t.keys[slot] = key;
                t.stamps[slot] = clock + n + i;
                t.predictions[slot] = INFINITY;
            }
            slots[i] = slot;  // -1: bypassed, served from the store only
            evicted[i] = victim_key;
        }
        __syncwarp();  // the next miss of this slabset must see this one's writes
    }
}

unsigned blocks_for_warps(int64_t warps) {
    return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

cudaError_t launch_slab_find(const SlabTable& t, const int64_t* keys, int64_t n, int64_t* slots,
                             cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    find_kernel<<<blocks_for_warps(n), kWarpsPerBlock * 32, 0, stream>>>(t, keys, n, slots);
    return cudaGetLastError();
}

cudaError_t launch_slab_set_predictions(const SlabTable& t, const int64_t* keys, const double* values,
                                        int64_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    set_predictions_kernel<<<blocks_for_warps(n), kWarpsPerBlock * 32, 0, stream>>>(t, keys, values, n);
    return cudaGetLastError();
}

cudaError_t launch_slab_refresh_hits(const SlabTable& t, const int64_t* found, int64_t n, int64_t clock,
                                     cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    constexpr int kThreads = 256;
    const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    refresh_hits_kernel<<<blocks, kThreads, 0, stream>>>(t, found, n, clock);
    return cudaGetLastError();
}

cudaError_t launch_slab_insert_groups(const SlabTable& t, const int64_t* keys, int64_t n, const int64_t* members,
                                      const int64_t* starts, int64_t groups, int64_t clock, int64_t* slots,
                                      int64_t* evicted, cudaStream_t stream) {
    if (groups == 0) return cudaSuccess;
    insert_groups_kernel<<<blocks_for_warps(groups), kWarpsPerBlock * 32, 0, stream>>>(
        t, keys, n, members, starts, groups, clock, slots, evicted);
    return cudaGetLastError();
}

}  // namespace lcr
