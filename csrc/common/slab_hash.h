// Key -> slabset hashing shared by the CPU twin and the CUDA kernels of SlabHashCache.
// The Python spec is lcr.embedding.hashing.slabset_of.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define LCR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LCR_HOST_DEVICE inline
#endif

namespace lcr {

// The 64-bit finalizer of MurmurHash3: consecutive ids (embedding rows are dense)
// land in unrelated slabsets, so no slabset sees a run of neighbours.
LCR_HOST_DEVICE uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

LCR_HOST_DEVICE uint32_t slabset_of(int64_t key, uint32_t num_slabsets) {
    return static_cast<uint32_t>(mix64(static_cast<uint64_t>(key)) % num_slabsets);
}

// A key's bit in a slabset's 8192-bit record of prediction-driven evictions: the top 13
// bits of the hash, because a slabset's keys share the low bits that chose the slabset.
constexpr uint32_t kRecordBits = 8192;
LCR_HOST_DEVICE uint32_t record_bit_of(int64_t key) {
    return static_cast<uint32_t>(mix64(static_cast<uint64_t>(key)) >> 51);
}

// A key's tag: 8 more bits of its hash, stored beside its slot so that a probe compares
// one byte per slot (64 B per slabset) and reads a key only where the tag matches.
// Never 0, which marks a free slot.
LCR_HOST_DEVICE uint8_t tag_of(int64_t key) {
    const uint32_t tag = static_cast<uint32_t>(mix64(static_cast<uint64_t>(key)) >> 40) & 0xffu;
    return static_cast<uint8_t>(tag ? tag : 1u);
}

}  // namespace lcr
