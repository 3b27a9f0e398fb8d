// Building a SlabTable view from Python: a tuple of tensor data pointers and settings,
// in the order of lcr.embedding.cache.SlabMetadata.engine_view().
#pragma once
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "common/slab_table.h"

namespace lcr {

inline SlabTable slab_table_from(const pybind11::tuple& view) {
    if (view.size() != 11) throw std::invalid_argument("slab table view needs 11 fields");
    auto ptr = [&](int i) { return reinterpret_cast<void*>(view[i].cast<uintptr_t>()); };
    SlabTable t;
    t.keys = static_cast<int64_t*>(ptr(0));
    t.tags = static_cast<uint8_t*>(ptr(1));
    t.stamps = static_cast<int64_t*>(ptr(2));
    t.predictions = static_cast<double*>(ptr(3));
    t.old = static_cast<uint8_t*>(ptr(4));
    t.lambda_shift = static_cast<int32_t*>(ptr(5));
    t.old_count = static_cast<int32_t*>(ptr(6));
    t.record = static_cast<uint64_t*>(ptr(7));
    t.num_slabsets = view[8].cast<uint32_t>();
    t.policy = view[9].cast<int32_t>();
    t.hf_window = view[10].cast<int32_t>();
    if (t.num_slabsets == 0) throw std::invalid_argument("num_slabsets must be at least 1");
    if (t.policy < 0 || t.policy >= kSlabPolicyCount) throw std::invalid_argument("unknown slab policy id");
    if (t.hf_window < 1) throw std::invalid_argument("hf window must be at least 1");
    return t;
}

template <typename T>
T* data_at(uintptr_t address) {
    return reinterpret_cast<T*>(address);
}

}  // namespace lcr
