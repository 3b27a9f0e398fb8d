// XXH64 of one 64-bit integer's 8 little-endian bytes (the short-input path), as
// lcr.policies.sketch.xxh64_u64 computes it: the hash libCacheSim's counting Bloom
// filter uses, so W-TinyLFU's admission decisions match it.
#pragma once
#include <cstdint>

namespace lcr::sim {

inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t xxh64_u64(uint64_t value, uint64_t seed) {
    constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL, P3 = 0x165667B19E3779F9ULL,
                       P4 = 0x85EBCA77C2B2AE63ULL, P5 = 0x27D4EB2F165667C5ULL;
    uint64_t h = seed + P5 + 8;
    h ^= rotl64(value * P2, 31) * P1;
    h = rotl64(h, 27) * P1 + P4;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    return h ^ (h >> 32);
}

}  // namespace lcr::sim
