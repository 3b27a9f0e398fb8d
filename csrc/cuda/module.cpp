// The lcr._cuda module. Importing it needs no GPU (the CUDA runtime is linked
// statically); calls without a device raise RuntimeError naming the CUDA error.
#include <cuda_runtime.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "cuda/kernels.h"
#include "cuda/registry.h"

namespace py = pybind11;

namespace {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
    }
}

int device_count() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// Why device_count() is 0: "" when the runtime found devices, else the CUDA error (an
// old driver for this runtime reads "CUDA driver version is insufficient ...").
std::string device_error() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) return cudaGetErrorString(status);
    return count > 0 ? "" : "no CUDA device";
}

// A device buffer freed on scope exit, so an error path cannot leak it.
template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    explicit DeviceBuffer(size_t n) { check(cudaMalloc(&ptr, sizeof(T) * (n ? n : 1)), "cudaMalloc"); }
    ~DeviceBuffer() { cudaFree(ptr); }
};

py::array_t<uint32_t> slabsets_of(py::array_t<int64_t, py::array::c_style | py::array::forcecast> keys,
                                  uint32_t num_slabsets) {
    if (num_slabsets == 0) throw std::invalid_argument("num_slabsets must be at least 1");
    const auto n = static_cast<size_t>(keys.size());
    py::array_t<uint32_t> out(n);
    {
        py::gil_scoped_release release;
        DeviceBuffer<int64_t> d_keys(n);
        DeviceBuffer<uint32_t> d_out(n);
        check(cudaMemcpy(d_keys.ptr, keys.data(), sizeof(int64_t) * n, cudaMemcpyHostToDevice), "copy keys");
        check(lcr::launch_slabsets_of(d_keys.ptr, static_cast<int64_t>(n), num_slabsets, d_out.ptr, 0),
              "slabsets_of kernel");
        check(cudaMemcpy(out.mutable_data(), d_out.ptr, sizeof(uint32_t) * n, cudaMemcpyDeviceToHost),
              "copy result");
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_cuda, m) {
    m.doc() = "lcr's CUDA engines";
    m.def("device_count", &device_count, "CUDA devices visible (0 without a GPU or driver).");
    m.def("device_error", &device_error, "Empty when CUDA devices are usable, else the reason why not.");
    m.def("slabsets_of", &slabsets_of, py::arg("keys"), py::arg("num_slabsets"),
          "The slabset of each key, computed on the GPU.");
    lcr::register_slab_cache(m);
}
