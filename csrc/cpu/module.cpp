// The lcr._native module: each engine file registers its own functions here.
#include <pybind11/pybind11.h>

#include "cpu/registry.h"

PYBIND11_MODULE(_native, m) {
    m.doc() = "lcr's C++ engines (CPU)";
    lcr::register_next_use(m);
    lcr::register_checkpoints(m);
    lcr::register_slab_hash(m);
    lcr::register_slab_cache(m);
    lcr::register_slab_warp_model(m);
    lcr::register_dense_ids(m);
    lcr::register_sim_lru(m);
    lcr::register_sim_opt(m);
    lcr::register_sim_fpb(m);
    lcr::register_sim_hf(m);
    lcr::register_sim_laru(m);
    lcr::register_sim_marker(m);
    lcr::register_sim_sieve(m);
    lcr::register_sim_arc(m);
    lcr::register_sim_lirs(m);
    lcr::register_sim_s3fifo(m);
    lcr::register_sim_wtinylfu(m);
    lcr::register_sim_lfu(m);
    lcr::register_forest(m);
    lcr::register_key_slots(m);
    lcr::register_stamp_order(m);
    lcr::register_leaf_window(m);
    lcr::register_prefix_keys(m);
}
