// One register_* function per engine file; module.cpp calls them all.
#pragma once
#include <pybind11/pybind11.h>

namespace lcr {
void register_next_use(pybind11::module_& m);
void register_checkpoints(pybind11::module_& m);
void register_slab_hash(pybind11::module_& m);
void register_slab_cache(pybind11::module_& m);
}  // namespace lcr
