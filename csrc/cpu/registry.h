// One register_* function per engine file; module.cpp calls them all. The simulator cores
// (sim_*.cpp) register themselves instead (sim_cores.h).
#pragma once
#include <pybind11/pybind11.h>

#include <string>

namespace lcr {
// Raise ValueError through Python's error indicator. pybind11 restores an
// error_already_set before it consults any exception translator, whereas a thrown
// py::value_error reaches the translators, and one registered later by another
// extension (seen with the whole test suite imported) turns it into RuntimeError.
[[noreturn]] inline void raise_value_error(const std::string& what) {
    PyErr_SetString(PyExc_ValueError, what.c_str());
    throw pybind11::error_already_set();
}

void register_next_use(pybind11::module_& m);
void register_checkpoints(pybind11::module_& m);
void register_slab_hash(pybind11::module_& m);
void register_slab_cache(pybind11::module_& m);
void register_slab_warp_model(pybind11::module_& m);
// The key remapping the simulator cores run on.
void register_dense_ids(pybind11::module_& m);
void register_forest(pybind11::module_& m);
void register_key_slots(pybind11::module_& m);
// The radix-cache policies' recency order (lcr.kv.policies).
void register_stamp_order(pybind11::module_& m);
void register_leaf_window(pybind11::module_& m);
void register_prefix_keys(pybind11::module_& m);
}  // namespace lcr
