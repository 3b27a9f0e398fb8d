// lcr.kv's recency order: (stamp, key) pairs kept sorted, oldest first.
//
// The radix-cache leaf policies (lcr/kv/policies.py) keep every cached node's last
// access here and walk it from the old end for the oldest evictable leaves. An
// eviction pass inside SGLang's scheduler touches it a few times per victim, where
// sortedcontainers' pure-Python bookkeeping cost about a microsecond per call; this is
// a red-black tree behind a thin binding, and the walk with its membership test (any
// Python container of keys) runs here instead of in a Python loop. Ties order by key,
// as Python's tuple order does. Not thread-safe: one engine thread drives a policy.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

using Entry = std::pair<int64_t, int64_t>;  // (stamp, key)

class StampOrder {
public:
    void add(int64_t stamp, int64_t key) { order_.emplace(stamp, key); }

    bool discard(int64_t stamp, int64_t key) { return order_.erase(Entry{stamp, key}) > 0; }

    size_t size() const { return order_.size(); }

    std::optional<Entry> first() const {
        if (order_.empty()) return std::nullopt;
        return *order_.begin();
    }

    // Up to `count` entries whose key is in `container`, oldest first, starting just
    // after `after` when given (the entry itself excluded).
    std::vector<Entry> oldest_in(const py::object& container, int64_t count,
                                 std::optional<Entry> after) const {
        std::vector<Entry> out;
        if (count <= 0) return out;
        auto it = after ? order_.upper_bound(*after) : order_.begin();
        for (; it != order_.end(); ++it) {
            py::int_ key(it->second);
            const int found = PySequence_Contains(container.ptr(), key.ptr());
            if (found < 0) throw py::error_already_set();
            if (found) {
                out.push_back(*it);
                if (static_cast<int64_t>(out.size()) == count) break;
            }
        }
        return out;
    }

    std::vector<Entry> entries() const { return {order_.begin(), order_.end()}; }

private:
    std::set<Entry> order_;
};

}  // namespace

void register_stamp_order(py::module_& m) {
    py::class_<StampOrder>(m, "StampOrder",
                           "(stamp, key) pairs sorted oldest first; not thread-safe")
        .def(py::init<>())
        .def("add", &StampOrder::add, py::arg("stamp"), py::arg("key"))
        .def("discard", &StampOrder::discard, py::arg("stamp"), py::arg("key"))
        .def("first", &StampOrder::first, "the oldest (stamp, key), or None when empty")
        .def("oldest_in", &StampOrder::oldest_in, py::arg("container"), py::arg("count"),
             py::arg("after") = py::none())
        .def("entries", &StampOrder::entries, "every (stamp, key), oldest first")
        .def("__len__", &StampOrder::size);
}

}  // namespace lcr
