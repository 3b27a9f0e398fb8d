// LRU core; the spec is lcr.policies.lru.LRU.
#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_lru(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters& c) {
        LruCache cache(capacity, req.n_ids);
        for (int64_t t = 0; t < req.n; ++t) {
            const LruCache::Step step = cache.access(req.ids[t]);
            if (step.hit) {
                rec.hit(t);
            } else if (step.victim != RecencyList::kNone) {
                ++c.lru_evictions;
                rec.miss(t, step.victim);
            } else {
                rec.miss(t);
            }
        }
    });
}

}  // namespace

void register_sim_lru(py::module_& m) {
    m.def("replay_lru", &replay_lru, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_lru);

}  // namespace lcr
