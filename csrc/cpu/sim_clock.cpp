// CLOCK core (FIFO with a reference bit, second chance by reinsertion at the head);
// the spec is lcr.policies.clock.Clock.
#include <vector>

#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_clock(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        RecencyList queue(req.n_ids);  // insertion order, the oldest is looked at first
        std::vector<uint8_t> referenced(req.n_ids, 0);
        for (int64_t t = 0; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (queue.contains(id)) {
                referenced[id] = 1;
                rec.hit(t);
                continue;
            }
            if (queue.size() >= capacity) {
                int32_t victim = queue.oldest();
                while (referenced[victim]) {
                    referenced[victim] = 0;
                    queue.move_to_newest(victim);
                    victim = queue.oldest();
                }
                queue.remove(victim);
                rec.miss(t, victim);
            } else {
                rec.miss(t);
            }
            referenced[id] = 0;
            queue.push_newest(id);
        }
    });
}

}  // namespace

void register_sim_clock(py::module_& m) {
    m.def("replay_clock", &replay_clock, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_clock);

}  // namespace lcr
