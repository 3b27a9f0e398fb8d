// Remap arbitrary int64 keys to dense ids 0..d-1 in order of first appearance, so the
// simulator cores can keep per-key state in flat arrays (one pass through a KeyIndex).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "cpu/key_index.h"
#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

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
    if (too_many) raise_value_error("more than 2^30 distinct keys");
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
