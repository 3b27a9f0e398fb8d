// SIEVE core; the spec is lcr.policies.sieve.Sieve.
#include <vector>

#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_sieve(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        RecencyList queue(req.n_ids);  // insertion order: the hand walks oldest -> newest
        std::vector<uint8_t> visited(req.n_ids, 0);
        int32_t hand = RecencyList::kNone;
        for (int64_t t = 0; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (queue.contains(id)) {
                visited[id] = 1;
                rec.hit(t);
                continue;
            }
            if (queue.size() >= capacity) {
                int32_t victim = hand != RecencyList::kNone ? hand : queue.oldest();
                while (visited[victim]) {
                    visited[victim] = 0;
                    const int32_t newer = queue.newer(victim);
                    victim = newer != RecencyList::kNone ? newer : queue.oldest();
                }
                hand = queue.newer(victim);
                queue.remove(victim);
                rec.miss(t, victim);
            } else {
                rec.miss(t);
            }
            visited[id] = 0;
            queue.push_newest(id);
        }
    });
}

}  // namespace

void register_sim_sieve(py::module_& m) {
    m.def("replay_sieve", &replay_sieve, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_sieve);

}  // namespace lcr
