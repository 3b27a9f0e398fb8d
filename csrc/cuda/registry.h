// Binding files of lcr._cuda besides module.cpp; module.cpp calls each register_*.
#pragma once
#include <pybind11/pybind11.h>

namespace lcr {
void register_slab_cache(pybind11::module_& m);
}  // namespace lcr
