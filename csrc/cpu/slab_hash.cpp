// CPU twin of the SlabHash key -> slabset mapping.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "common/slab_hash.h"
#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

py::array_t<uint32_t> slabsets_of(py::array_t<int64_t, py::array::c_style | py::array::forcecast> keys,
                                  uint32_t num_slabsets) {
    if (num_slabsets == 0) throw std::invalid_argument("num_slabsets must be at least 1");
    const auto n = keys.size();
    py::array_t<uint32_t> out(n);
    const int64_t* in = keys.data();
    uint32_t* dst = out.mutable_data();
    py::gil_scoped_release release;
    for (py::ssize_t i = 0; i < n; ++i) dst[i] = slabset_of(in[i], num_slabsets);
    return out;
}

}  // namespace

void register_slab_hash(py::module_& m) {
    m.def("slabsets_of", &slabsets_of, py::arg("keys"), py::arg("num_slabsets"),
          "The slabset of each key (MurmurHash3 finalizer modulo num_slabsets).");
}

}  // namespace lcr
