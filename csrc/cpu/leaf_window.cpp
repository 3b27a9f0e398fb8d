// LARU's window decision over a radix cache's evictable leaves, in one call.
//
// lcr.kv.laru.LARU asks, at every pick of an eviction pass: which are the `count` least
// recently used evictable leaves (the window), which of them has no prediction yet this
// round, and which one is predicted to return last? Inside SGLang's scheduler a pass
// evicts a few leaves out of a few dozen, so the Python version's per-leaf bookkeeping
// (a sorted window, a heap, a set, several layers of calls) cost more than the choice
// itself; here it is a scan of the leaves and a partial sort. The rule is the one of
// lcr.kv.spec.LARUSpec: order by (last access, key), a leaf never accessed counting as
// -1; the largest rank wins, the older leaf on ties. tests/test_kv_leaf_window.py holds
// it to a pure-Python transcription. Reads Python objects: call with the GIL held.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

struct Leaf {
    int64_t stamp;
    int64_t key;
    PyObject* obj;  // borrowed from `leaves`, alive for the call
    bool operator<(const Leaf& o) const {
        return stamp != o.stamp ? stamp < o.stamp : key < o.key;
    }
};

int64_t as_int64(PyObject* obj) {
    const long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return static_cast<int64_t>(v);
}

// `mapping.get(key, fallback)` for a dict, as a number.
template <typename T>
T lookup(PyObject* dict, PyObject* key, T fallback) {
    PyObject* value = PyDict_GetItemWithError(dict, key);
    if (value == nullptr) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return fallback;
    }
    if constexpr (std::is_floating_point_v<T>) {
        const double v = PyFloat_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
        return v;
    } else {
        return as_int64(value);
    }
}

// (victim or None, oldest or None, keys of the window not yet in `predicted`).
// The victim is None when the window holds one leaf or some of it is unpredicted
// (predict those, then ask again).
py::tuple leaf_window(const py::object& leaves, const py::dict& stamps, int64_t count,
                      const py::object& predicted, const py::dict& ranks) {
    std::vector<Leaf> all;
    auto add = [&](PyObject* key) { all.push_back({lookup<int64_t>(stamps.ptr(), key, -1), as_int64(key), key}); };
    if (PyDict_Check(leaves.ptr())) {
        all.reserve(PyDict_GET_SIZE(leaves.ptr()));
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(leaves.ptr(), &pos, &key, &value)) add(key);
    } else {
        for (const py::handle key : leaves) add(key.ptr());  // sets: borrowed for the call
    }
    py::list fresh;
    if (all.empty()) return py::make_tuple(py::none(), py::none(), fresh);
    const size_t n = static_cast<size_t>(std::clamp<int64_t>(count, 1, static_cast<int64_t>(all.size())));
    std::partial_sort(all.begin(), all.begin() + n, all.end());
    py::object oldest = py::reinterpret_borrow<py::object>(all[0].obj);
    if (n == 1) return py::make_tuple(py::none(), oldest, fresh);
    for (size_t i = 0; i < n; ++i) {
        const int found = PySequence_Contains(predicted.ptr(), all[i].obj);
        if (found < 0) throw py::error_already_set();
        if (!found) fresh.append(py::reinterpret_borrow<py::object>(all[i].obj));
    }
    if (!fresh.empty()) return py::make_tuple(py::none(), oldest, fresh);
    const double inf = std::numeric_limits<double>::infinity();
    size_t best = 0;
    double best_rank = lookup<double>(ranks.ptr(), all[0].obj, inf);
    for (size_t i = 1; i < n; ++i) {
        const double rank = lookup<double>(ranks.ptr(), all[i].obj, inf);
        if (rank > best_rank) best = i, best_rank = rank;  // strict: the older leaf keeps a tie
    }
    return py::make_tuple(py::reinterpret_borrow<py::object>(all[best].obj), oldest, fresh);
}

}  // namespace

void register_leaf_window(py::module_& m) {
    m.def("leaf_window", &leaf_window, py::arg("leaves"), py::arg("stamps"), py::arg("count"),
          py::arg("predicted"), py::arg("ranks"),
          "LARU's window over `leaves` (keys; a dict's keys): the `count` smallest "
          "(stamps.get(key, -1), key). Returns (victim, oldest, unpredicted): the "
          "window's largest ranks.get(key, inf), oldest first on ties, or None when the "
          "window holds one leaf or `unpredicted` (window keys not in `predicted`) is not "
          "empty; oldest is None only without leaves.");
}

}  // namespace lcr
