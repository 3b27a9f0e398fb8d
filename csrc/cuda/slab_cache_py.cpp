// Python bindings of the SlabHashCache kernels. Tensors arrive as raw device pointers,
// the caller's CUDA stream as an integer handle and the cache's device as an index, so
// the module never links libtorch. Every call selects the cache's device for its launches
// and gives the caller's current device back afterwards (DeviceGuard).
// The CPU engine (csrc/cpu/slab_cache.cpp) and the warp model bind the same signatures.
#include <cuda_runtime.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "common/slab_engine_py.h"
#include "common/slab_fused_py.h"
#include "common/slab_kernels.h"
#include "common/slab_table_py.h"
#include "cuda/kernels.h"
#include "cuda/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// The current device belongs to the calling thread and is shared with torch: switch only
// for the call, and only when it differs (cudaSetDevice is not free).
class DeviceGuard {
public:
    explicit DeviceGuard(int device) {
        check(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
        else previous_ = -1;
    }
    ~DeviceGuard() {
        if (previous_ >= 0) cudaSetDevice(previous_);  // no throwing from a destructor
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = -1;
};

cudaStream_t as_stream(uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

void slab_probe(const py::tuple& view, uintptr_t keys, int64_t n, uintptr_t slot_of, uintptr_t readback,
                uintptr_t stream, int device) {
    const DeviceGuard guard(device);
    const SlabTable t = slab_table_from(view);
    const cudaStream_t s = as_stream(stream);
    check(cudaMemsetAsync(data_at<int64_t>(readback), 0, slab_kernels::kMissEntries * sizeof(int64_t), s),
          "slab_probe read-back reset");
    check(launch_slab_probe(t, data_at<int64_t>(keys), n, data_at<int64_t>(slot_of), data_at<int64_t>(readback), s),
          "slab_probe kernel");
}

void slab_refresh(const py::tuple& view, uintptr_t slot_of, int64_t n, int64_t clock, uintptr_t hit_count,
                  uintptr_t stream, int device) {
    const DeviceGuard guard(device);
    const SlabTable t = slab_table_from(view);
    check(launch_slab_refresh(t, data_at<int64_t>(slot_of), n, clock, data_at<int64_t>(hit_count),
                              as_stream(stream)),
          "slab_refresh kernel");
}

void slab_insert_groups(const py::tuple& view, uintptr_t keys, uintptr_t first, uintptr_t members, uintptr_t starts,
                        int64_t groups, int64_t clock, int64_t stamp_base, uintptr_t slots, uintptr_t evicted,
                        uintptr_t stream, int device) {
    const DeviceGuard guard(device);
    const SlabTable t = slab_table_from(view);
    check(launch_slab_insert_groups(t, data_at<int64_t>(keys), data_at<int64_t>(first), data_at<int64_t>(members),
                                    data_at<int64_t>(starts), groups, clock, stamp_base, data_at<int64_t>(slots),
                                    data_at<int64_t>(evicted), as_stream(stream)),
          "slab_insert_groups kernel");
}

void slab_set_predictions(const py::tuple& view, uintptr_t keys, uintptr_t values, int64_t n, uintptr_t stream,
                          int device) {
    const DeviceGuard guard(device);
    const SlabTable t = slab_table_from(view);
    check(launch_slab_set_predictions(t, data_at<int64_t>(keys), data_at<double>(values), n,
                                      as_stream(stream)),
          "slab_set_predictions kernel");
}

void slab_gather(uintptr_t rows, int64_t row_bytes, uintptr_t slot_of, int64_t n, uintptr_t out, uintptr_t stream,
                 int device) {
    const DeviceGuard guard(device);
    if (row_bytes < 1) throw std::invalid_argument("row_bytes must be at least 1");
    check(launch_slab_gather(data_at<const void>(rows), row_bytes, data_at<int64_t>(slot_of), n, data_at<void>(out),
                             as_stream(stream)),
          "slab_gather kernel");
}

void slabsets_of_device(uintptr_t keys, int64_t n, uint32_t num_slabsets, uintptr_t out, uintptr_t stream,
                        int device) {
    const DeviceGuard guard(device);
    if (num_slabsets == 0) throw std::invalid_argument("num_slabsets must be at least 1");
    check(launch_slabsets_of_device(data_at<int64_t>(keys), n, num_slabsets, data_at<int32_t>(out),
                                    as_stream(stream)),
          "slabsets_of kernel");
}

// The device's address of a table in pinned host memory (the same address under unified
// addressing); a pageable table cannot be read by the GPU.
const void* device_address_of_host(const void* host) {
    void* device = nullptr;
    if (cudaHostGetDevicePointer(&device, const_cast<void*>(host), 0) != cudaSuccess) {
        cudaGetLastError();  // not sticky: clear it
        throw std::invalid_argument("the store's table is not in pinned host memory (HostStore(table, pin=True))");
    }
    return device;
}

void slab_fused_sls(const py::tuple& view, const py::tuple& batch, uintptr_t stream, int device) {
    const DeviceGuard guard(device);
    const SlabTable t = slab_table_from(view);
    slab_fused::FusedBatch b = fused_batch_from(batch);
    if (b.table_rows > 0) b.table = device_address_of_host(b.table);
    const cudaStream_t s = as_stream(stream);
    check(cudaMemsetAsync(b.counters, 0, slab_fused::kCounters * sizeof(int64_t), s), "slab_fused_sls counters reset");
    check(launch_slab_fused_sls(t, b, s), "slab_fused_sls kernels");
}

}  // namespace

void register_slab_cache(py::module_& m) {
    def_slab_engine(m, &slab_probe, &slab_refresh, &slab_insert_groups, &slab_set_predictions);
    def_slab_fused(m, &slab_fused_sls);
    m.def("slab_gather", &slab_gather, py::arg("rows"), py::arg("row_bytes"), py::arg("slot_of"), py::arg("n"),
          py::arg("out"), py::arg("stream"), py::arg("device"),
          "out row p = rows[slot_of[p]] (row_bytes each), zeros where slot_of[p] < 0; device pointers.");
    m.def("slabsets_of_device", &slabsets_of_device, py::arg("keys"), py::arg("n"), py::arg("num_slabsets"),
          py::arg("out"), py::arg("stream"), py::arg("device"), "int32 slabset of each key, device pointers.");
}

}  // namespace lcr
