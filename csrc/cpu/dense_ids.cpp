// Remap arbitrary int64 keys to dense ids 0..d-1 in order of first appearance, so the
// simulator cores can keep per-key state in flat arrays. One pass through an
// open-addressing (linear probing) table that doubles at half load.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

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

constexpr int64_t kMaxIds = int64_t{1} << 30;  // positions in the recency tree stay int32

py::tuple dense_ids(py::array_t<int64_t, py::array::c_style | py::array::forcecast> keys) {
    const auto n = static_cast<int64_t>(keys.size());
    py::array_t<int32_t> ids(n);
    const int64_t* in = keys.data();
    int32_t* out = ids.mutable_data();
    std::vector<int64_t> distinct;
    bool too_many = false;
    {
        py::gil_scoped_release release;
        constexpr int64_t kAhead = 16;
        KeyIndex index(std::min<int64_t>(n, 1 << 16));  // grows as keys appear
        for (int64_t t = 0; t < n && !too_many; ++t) {
            if (t + kAhead < n) index.prefetch(in[t + kAhead]);
            out[t] = index.id_of(in[t]);
            too_many = static_cast<int64_t>(index.keys().size()) > kMaxIds;
        }
        distinct = index.keys();
    }
    if (too_many) throw py::value_error("more than 2^30 distinct keys");
    py::array_t<int64_t> uniq(static_cast<py::ssize_t>(distinct.size()));
    std::copy(distinct.begin(), distinct.end(), uniq.mutable_data());
    return py::make_tuple(std::move(ids), std::move(uniq));
}

}  // namespace

void register_dense_ids(py::module_& m) {
    m.def("dense_ids", &dense_ids, py::arg("keys"),
          "(ids, keys): ids[t] in [0, d) numbers keys[t] by first appearance; keys[id] maps back.");
}

}  // namespace lcr
