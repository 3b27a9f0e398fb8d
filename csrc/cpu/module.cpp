// The lcr._native module: each engine file registers its own functions here.
#include <pybind11/pybind11.h>

#include "cpu/registry.h"

PYBIND11_MODULE(_native, m) {
    m.doc() = "lcr's C++ engines (CPU)";
    lcr::register_next_use(m);
    lcr::register_checkpoints(m);
    lcr::register_slab_hash(m);
    lcr::register_slab_cache(m);
}
