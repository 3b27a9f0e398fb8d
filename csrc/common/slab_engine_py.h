// The Python signatures every SlabHashCache engine binds (CPU engine, warp model, CUDA),
// so that lcr.embedding.cache drives them alike. Pointers are raw data addresses; stream
// and device are ignored off the GPU. Argument meanings: csrc/common/slab_kernels.h.
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>

#include "common/slab_table.h"

namespace lcr {

using SlabProbeFn = void (*)(const pybind11::tuple&, uintptr_t, int64_t, uintptr_t, uintptr_t, uintptr_t, int);
using SlabRefreshFn = void (*)(const pybind11::tuple&, uintptr_t, int64_t, int64_t, uintptr_t, uintptr_t, int);
using SlabInsertFn = void (*)(const pybind11::tuple&, uintptr_t, uintptr_t, uintptr_t, uintptr_t, int64_t, int64_t,
                              int64_t, uintptr_t, uintptr_t, uintptr_t, int);
using SlabPredictFn = void (*)(const pybind11::tuple&, uintptr_t, uintptr_t, int64_t, uintptr_t, int);

// {name: id} of every slab policy this module was built with (LCR_SLAB_POLICIES).
inline pybind11::dict slab_policy_ids() {
    pybind11::dict ids;
#define LCR_SLAB_POLICY_ENTRY(id, name) ids[name] = static_cast<int>(id);
    LCR_SLAB_POLICIES(LCR_SLAB_POLICY_ENTRY)
#undef LCR_SLAB_POLICY_ENTRY
    return ids;
}

inline void def_slab_engine(pybind11::module_& m, SlabProbeFn probe, SlabRefreshFn refresh, SlabInsertFn insert,
                            SlabPredictFn set_predictions) {
    namespace py = pybind11;
    m.def("slab_policy_ids", &slab_policy_ids,
          "{name: id} of the slab policies this module was built with (csrc/common/slab_table.h).");
    m.def("slab_probe", probe, py::arg("table"), py::arg("keys"), py::arg("n"), py::arg("slot_of"),
          py::arg("readback"), py::arg("stream"), py::arg("device"),
          "Slot of each lookup (-1: miss, listed in the read-back buffer, whose count it "
          "resets first). Reads the table only.");
    m.def("slab_refresh", refresh, py::arg("table"), py::arg("slot_of"), py::arg("n"), py::arg("clock"),
          py::arg("hit_count"), py::arg("stream"), py::arg("device"),
          "Stamp each hit key at its first lookup; count the distinct hits.");
    m.def("slab_insert_groups", insert, py::arg("table"), py::arg("keys"), py::arg("first"), py::arg("members"),
          py::arg("starts"), py::arg("groups"), py::arg("clock"), py::arg("stamp_base"), py::arg("slots"),
          py::arg("evicted"), py::arg("stream"), py::arg("device"),
          "Insert the batch's distinct missing keys, slabset group by group, in batch order.");
    m.def("slab_set_predictions", set_predictions, py::arg("table"), py::arg("keys"), py::arg("values"),
          py::arg("n"), py::arg("stream"), py::arg("device"),
          "Store predicted next-access times of cached keys (distinct keys; NaN: unknown).");
}

}  // namespace lcr
