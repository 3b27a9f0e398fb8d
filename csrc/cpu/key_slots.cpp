// The predictor's key -> feature-row lookup for large batches (lcr.predict.features).
//
// FeatureStore numbers keys 0..n-1 in order of first appearance, as KeyIndex does, so a
// KeyIndex fed the same keys in the same order answers a batch of 25k keys in one call,
// where numpy's sorted-index search cost ~2.7 ms. Not thread-safe: the owner locks.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu/key_index.h"
#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

using Keys = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

class KeySlots {
public:
    // Number `keys` (all new, in order) len(self), len(self) + 1, ...
    void extend(const Keys& keys) {
        const int64_t* in = keys.data();
        for (py::ssize_t i = 0; i < keys.size(); ++i) {
            const auto expected = static_cast<int64_t>(index_.keys().size());
            if (expected >= kMaxSlots) throw std::length_error("key slots: more than 2^31 - 1 keys");
            if (index_.id_of(in[i]) != expected) {
                throw std::invalid_argument("key slots: key " + std::to_string(in[i]) + " was already added");
            }
        }
    }

    // Slot of each key, -1 for keys never added.
    py::array_t<int64_t> find(const Keys& keys) const {
        const auto n = keys.size();
        py::array_t<int64_t> slots(n);
        const int64_t* in = keys.data();
        int64_t* out = slots.mutable_data();
        constexpr py::ssize_t kAhead = 16;  // probes in flight: their cache misses overlap
        for (py::ssize_t i = 0; i < n; ++i) {
            if (i + kAhead < n) index_.prefetch(in[i + kAhead]);
            out[i] = index_.find(in[i]);
        }
        return slots;
    }

    size_t size() const { return index_.keys().size(); }

private:
    static constexpr int64_t kMaxSlots = INT32_MAX;
    KeyIndex index_{1024};
};

}  // namespace

void register_key_slots(py::module_& m) {
    py::class_<KeySlots>(m, "KeySlots",
                         "Keys numbered 0, 1, ... in the order added; batch lookup. Not thread-safe.")
        .def(py::init<>())
        .def("extend", &KeySlots::extend, py::arg("keys"), "Number new keys in order (ValueError if one is known).")
        .def("find", &KeySlots::find, py::arg("keys"), "Slot of each key, -1 for keys never added.")
        .def("__len__", &KeySlots::size);
}

}  // namespace lcr
