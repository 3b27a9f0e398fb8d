// LRU core; the spec is lcr.policies.lru.LRU.
#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_lru(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters& c) {
        RecencyList order(req.n_ids);
        for (int64_t t = 0; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (order.contains(id)) {
                order.move_to_newest(id);
                rec.hit(t);
                continue;
            }
            if (order.size() >= capacity) {
                const int32_t victim = order.oldest();
                order.remove(victim);
                ++c.lru_evictions;
                rec.miss(t, victim);
            } else {
                rec.miss(t);
            }
            order.push_newest(id);
        }
    });
}

}  // namespace

void register_sim_lru(py::module_& m) {
    m.def("replay_lru", &replay_lru, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"),
          py::arg("record_evictions"));
}

}  // namespace lcr
