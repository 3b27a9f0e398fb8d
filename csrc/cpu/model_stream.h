// The online model's per-access bookkeeping (model_stream.cpp); registered by
// register_forest (forest.cpp), with the rest of the model's native parts.
#pragma once
#include <pybind11/pybind11.h>

namespace lcr {
void register_model_stream(pybind11::module_& m);
}  // namespace lcr
