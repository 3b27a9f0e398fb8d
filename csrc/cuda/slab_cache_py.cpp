// Python bindings of the SlabHashCache kernels. Tensors arrive as raw device pointers and
// the caller's CUDA stream as an integer handle, so the module never links libtorch.
#include <cuda_runtime.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "common/slab_table_py.h"
#include "cuda/kernels.h"
#include "cuda/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

cudaStream_t stream_of(uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }

void slab_find(const py::tuple& view, uintptr_t keys, int64_t n, uintptr_t slots, uintptr_t stream) {
    check(launch_slab_find(slab_table_from(view), data_at<int64_t>(keys), n, data_at<int64_t>(slots),
                           stream_of(stream)),
          "slab_find kernel");
}

void slab_refresh_hits(const py::tuple& view, uintptr_t found, int64_t n, int64_t clock, uintptr_t stream) {
    check(launch_slab_refresh_hits(slab_table_from(view), data_at<int64_t>(found), n, clock, stream_of(stream)),
          "slab_refresh_hits kernel");
}

void slab_insert_groups(const py::tuple& view, uintptr_t keys, int64_t n, uintptr_t members, uintptr_t starts,
                        int64_t groups, int64_t clock, uintptr_t slots, uintptr_t evicted, uintptr_t stream) {
    check(launch_slab_insert_groups(slab_table_from(view), data_at<int64_t>(keys), n, data_at<int64_t>(members),
                                    data_at<int64_t>(starts), groups, clock, data_at<int64_t>(slots),
                                    data_at<int64_t>(evicted), stream_of(stream)),
          "slab_insert_groups kernel");
}

void slab_set_predictions(const py::tuple& view, uintptr_t keys, uintptr_t values, int64_t n, uintptr_t stream) {
    check(launch_slab_set_predictions(slab_table_from(view), data_at<int64_t>(keys), data_at<double>(values), n,
                                      stream_of(stream)),
          "slab_set_predictions kernel");
}

void slabsets_of_device(uintptr_t keys, int64_t n, uint32_t num_slabsets, uintptr_t out, uintptr_t stream) {
    if (num_slabsets == 0) throw std::invalid_argument("num_slabsets must be at least 1");
    check(launch_slabsets_of_device(data_at<int64_t>(keys), n, num_slabsets, data_at<int32_t>(out),
                                    stream_of(stream)),
          "slabsets_of kernel");
}

}  // namespace

void register_slab_cache(py::module_& m) {
    m.def("slab_find", &slab_find, py::arg("table"), py::arg("keys"), py::arg("n"), py::arg("slots"),
          py::arg("stream"), "One warp per key: slot of each key (-1: absent). Reads only.");
    m.def("slab_refresh_hits", &slab_refresh_hits, py::arg("table"), py::arg("found"), py::arg("n"),
          py::arg("clock"), py::arg("stream"), "Stamp the batch's hits (found >= 0).");
    m.def("slab_insert_groups", &slab_insert_groups, py::arg("table"), py::arg("keys"), py::arg("n"),
          py::arg("members"), py::arg("starts"), py::arg("groups"), py::arg("clock"), py::arg("slots"),
          py::arg("evicted"), py::arg("stream"),
          "One warp per slabset group: insert its misses in batch order.");
    m.def("slab_set_predictions", &slab_set_predictions, py::arg("table"), py::arg("keys"), py::arg("values"),
          py::arg("n"), py::arg("stream"), "Store predicted next-access times of cached keys.");
    m.def("slabsets_of_device", &slabsets_of_device, py::arg("keys"), py::arg("n"), py::arg("num_slabsets"),
          py::arg("out"), py::arg("stream"), "int32 slabset of each key, device pointers.");
}

}  // namespace lcr
