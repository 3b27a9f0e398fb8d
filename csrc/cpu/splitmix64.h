// SplitMix64 with a multiply-shift below(n): the C++ twin of lcr.policies.rng.SplitMix64,
// so randomized policies draw the same numbers in every engine.
#pragma once
#include <cstdint>

namespace lcr::sim {

class SplitMix64 {
public:
    explicit SplitMix64(uint64_t seed) : state_(seed) {}

    uint64_t next_u64() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }

    // Uniform in [0, n): the high 64 bits of draw * n.
    uint64_t below(uint64_t n) {
        return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
    }

private:
    uint64_t state_;
};

}  // namespace lcr::sim
