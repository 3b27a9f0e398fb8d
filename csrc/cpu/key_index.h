// Arbitrary int64 keys numbered 0..d-1 in order of first appearance: an open-addressing
// (linear probing) table that doubles at half load. Used by dense_ids (the simulator's
// key remapping) and key_slots (the predictor's batch lookups of feature rows).
// Not thread-safe: owners serialise access.
#pragma once
#include <cstdint>
#include <vector>

namespace lcr {

class KeyIndex {
public:
    explicit KeyIndex(int64_t expected) {
        while (capacity_ < static_cast<uint64_t>(2 * expected)) capacity_ *= 2;
        slots_.assign(capacity_, Slot{});
    }

    // Start loading `key`'s home slot; lookups are bound by cache misses, and a few
    // requests ahead of time the load overlaps the work on earlier ones.
    void prefetch(int64_t key) const { __builtin_prefetch(&slots_[home(key)]); }

    // The id of `key`, giving it the next free id if new.
    int32_t id_of(int64_t key) {
        if (2 * (keys_.size() + 1) > capacity_) grow();
        uint64_t i = home(key);
        for (;; i = (i + 1) & (capacity_ - 1)) {
            Slot& s = slots_[i];
            if (s.id < 0) {
                s = Slot{key, static_cast<int32_t>(keys_.size())};
                keys_.push_back(key);
                return s.id;
            }
            if (s.key == key) return s.id;
        }
    }

    // The id of `key`, or -1 if it never appeared.
    int32_t find(int64_t key) const {
        for (uint64_t i = home(key);; i = (i + 1) & (capacity_ - 1)) {
            const Slot& s = slots_[i];
            if (s.id < 0 || s.key == key) return s.id;
        }
    }

    const std::vector<int64_t>& keys() const { return keys_; }

private:
    struct Slot {
        int64_t key = 0;
        int32_t id = -1;
    };

    uint64_t home(int64_t key) const {  // Fibonacci hashing: the top bits of key * 2^64/phi
        return (static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ULL) >> (64 - bits());
    }
    int bits() const { return __builtin_ctzll(capacity_); }

    void grow() {
        std::vector<Slot> old;
        old.swap(slots_);
        capacity_ *= 2;
        slots_.assign(capacity_, Slot{});
        for (const Slot& s : old) {
            if (s.id < 0) continue;
            uint64_t i = home(s.key);
            while (slots_[i].id >= 0) i = (i + 1) & (capacity_ - 1);
            slots_[i] = s;
        }
    }

    uint64_t capacity_ = 16;
    std::vector<Slot> slots_;
    std::vector<int64_t> keys_;
};

}  // namespace lcr
