// OPT (Belady) core; the spec is lcr.policies.opt.OPT.
#include <cstdint>
#include <limits>

#include "cpu/indexed_heap.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr int64_t kNeverBase = int64_t{1} << 62;  // above any request index

// Evict the largest next use first. Keys never requested again all rank above the
// rest, the oldest access first (kNeverBase - t), as the spec's (next, last) order.
int64_t priority(int64_t next, int64_t t) { return next == kNever ? kNeverBase - t : next; }

py::tuple replay_opt(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, const Array<int64_t>& next_use,
                     bool record_evictions) {
    checked_capacity(capacity);
    const int64_t* next = aligned_with(next_use, ids.size(), "next_use");
    if (ids.size() >= kNeverBase / 2) raise_value_error("trace too long for OPT");
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        IndexedMaxHeap furthest(req.n_ids);
        for (int64_t t = 0; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            const int64_t prio = priority(next[t], t);
            if (furthest.contains(id)) {
                furthest.update(id, prio);
                rec.hit(t);
                continue;
            }
            if (furthest.size() >= capacity) rec.miss(t, furthest.pop_max());
            else rec.miss(t);
            furthest.push(id, prio);
        }
    });
}

}  // namespace

void register_sim_opt(py::module_& m) {
    m.def("replay_opt", &replay_opt, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("next_use"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_opt);

}  // namespace lcr
