// Next-use index of every request in one backward pass: O(n) expected time.
// The Python spec is lcr.traces.next_use.next_use_reference.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <unordered_map>

#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

py::array_t<int64_t> next_use(py::array_t<int64_t, py::array::c_style | py::array::forcecast> keys) {
    const auto n = static_cast<int64_t>(keys.size());
    py::array_t<int64_t> out(n);
    const int64_t* in = keys.data();
    int64_t* next = out.mutable_data();
    {
        py::gil_scoped_release release;
        std::unordered_map<int64_t, int64_t> seen;
        seen.reserve(static_cast<size_t>(n / 2 + 16));
        for (int64_t i = n - 1; i >= 0; --i) {
            auto [it, inserted] = seen.try_emplace(in[i], i);
            next[i] = inserted ? kNever : it->second;
            it->second = i;
        }
    }
    return out;
}

}  // namespace

void register_next_use(py::module_& m) {
    m.def("next_use", &next_use, py::arg("keys"),
          "Index of the next request to the same key, or INT64_MAX if none.");
}

}  // namespace lcr
