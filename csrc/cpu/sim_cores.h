// The simulator cores register themselves: each sim_<policy>.cpp defines its binding and
//     static const SimCore registered(register_sim_<policy>);
// and module.cpp binds every registered core, so adding a core touches only its own file.
// (lcr.sim.native calls each core with named arguments, from the spec's native_args.)
#pragma once
#include <pybind11/pybind11.h>

#include <vector>

namespace lcr {

using BindCore = void (*)(pybind11::module_&);

// Function-local, so it exists before any file registers (static initialization order
// across files is unspecified; all of them run when the module is loaded).
inline std::vector<BindCore>& sim_cores() {
    static std::vector<BindCore> cores;
    return cores;
}

struct SimCore {
    explicit SimCore(BindCore bind) { sim_cores().push_back(bind); }
};

}  // namespace lcr
