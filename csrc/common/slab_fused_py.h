// The fused SLS's Python binding, shared by the warp model and lcr._cuda: a FusedBatch
// (csrc/common/slab_fused.h) from a tuple of raw addresses and sizes, in the order of
// lcr.embedding.fused._batch_view(), and the one signature both engines bind.
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/slab_fused.h"
#include "common/slab_table_py.h"

namespace lcr {

constexpr size_t kFusedBatchFields = 27;

inline slab_fused::FusedBatch fused_batch_from(const pybind11::tuple& view) {
    namespace f = slab_fused;
    if (view.size() != kFusedBatchFields)
        throw std::invalid_argument("fused batch view needs " + std::to_string(kFusedBatchFields) + " fields");
    auto address = [&](size_t i) { return view[i].cast<uintptr_t>(); };
    auto number = [&](size_t i) { return view[i].cast<int64_t>(); };
    f::FusedBatch b;
    b.lookups = data_at<const int64_t>(address(0));
    b.n = number(1);
    b.offsets = data_at<const int64_t>(address(2));
    b.num_offsets = number(3);
    b.bags = number(4);
    b.clock = number(5);
    b.rows = data_at<void>(address(6));
    b.table = data_at<const void>(address(7));
    b.table_rows = number(8);
    b.row_bytes = number(9);
    b.dtype = view[10].cast<int32_t>();
    b.out = data_at<void>(address(11));
    b.hits = data_at<int64_t>(address(12));
    b.misses = data_at<int64_t>(address(13));
    b.bypassed = data_at<int64_t>(address(14));
    b.counters = data_at<int64_t>(address(15));
    b.where = data_at<int64_t>(address(16));
    b.entries = data_at<f::MissEntry>(address(17));
    b.next = data_at<int64_t>(address(18));
    b.touched = data_at<int64_t>(address(19));
    b.head = data_at<int64_t>(address(20));
    b.count = data_at<int64_t>(address(21));
    b.region = data_at<f::MissEntry>(address(22));
    b.spare = data_at<f::MissEntry>(address(23));
    b.staged = data_at<void>(address(24));
    b.staged_rows = number(25);
    const int64_t capacity = number(26);  // lookups the scratch arrays hold
    if (b.n < 0 || b.n > capacity) throw std::invalid_argument("fused batch: n outside the scratch capacity");
    if (b.bags < 0 || b.num_offsets < b.bags || b.num_offsets > b.bags + 1)
        throw std::invalid_argument("fused batch: num_offsets must be bags or bags + 1");
    if (b.dtype != f::kFloat32 && b.dtype != f::kFloat16) throw std::invalid_argument("fused batch: unknown dtype");
    if (b.row_bytes < 1 || b.row_bytes % (b.dtype == f::kFloat16 ? 2 : 4) != 0)
        throw std::invalid_argument("fused batch: row_bytes must be a positive multiple of the element size");
    if (b.table_rows < 0) throw std::invalid_argument("fused batch: table_rows must be non-negative");
    if (b.staged_rows < 0 || b.staged_rows > capacity)
        throw std::invalid_argument("fused batch: staged_rows outside the scratch capacity");
    return b;
}

using SlabFusedFn = void (*)(const pybind11::tuple&, const pybind11::tuple&, uintptr_t, int);

inline void def_slab_fused(pybind11::module_& m, SlabFusedFn fused_sls) {
    namespace py = pybind11;
    m.def("slab_fused_sls", fused_sls, py::arg("table"), py::arg("batch"), py::arg("stream"), py::arg("device"),
          "The fused SparseLengthsSum of one batch (csrc/common/slab_fused.h): probe, refresh, pool "
          "from the cache or the backing table, then insert the misses; queued, nothing read back.");
    // The counters' layout, which lcr.embedding.fused allocates and reads the facts from.
    m.attr("FUSED_COUNTERS") = slab_fused::kCounters;
    m.attr("FUSED_FACTS") = py::make_tuple(slab_fused::kLowestBadKey, slab_fused::kFacts);
}

}  // namespace lcr
