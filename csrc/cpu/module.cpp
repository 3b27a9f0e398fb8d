// The lcr._native module: each engine file registers its own functions here; the
// simulator cores register themselves (sim_cores.h).
#include <pybind11/pybind11.h>

#include "cpu/registry.h"
#include "cpu/sim_cores.h"

PYBIND11_MODULE(_native, m) {
    m.doc() = "lcr's C++ engines (CPU)";
    lcr::register_next_use(m);
    lcr::register_checkpoints(m);
    lcr::register_slab_hash(m);
    lcr::register_slab_cache(m);
    lcr::register_slab_warp_model(m);
    lcr::register_dense_ids(m);
    for (const lcr::BindCore bind : lcr::sim_cores()) bind(m);  // every sim_<policy>.cpp
    lcr::register_forest(m);
    lcr::register_key_slots(m);
    lcr::register_stamp_order(m);
    lcr::register_leaf_window(m);
    lcr::register_prefix_keys(m);
}
