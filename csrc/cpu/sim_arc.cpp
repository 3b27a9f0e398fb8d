// ARC core; the spec is lcr.policies.arc.ARC (libCacheSim's ARC with unit sizes).
#include <algorithm>

#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_arc(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        // T1/T2 resident, B1/B2 ghosts; oldest() is each list's LRU end.
        RecencyList t1(req.n_ids), t2(req.n_ids), b1(req.n_ids), b2(req.n_ids);
        const int64_t k = capacity;
        double p = 0.0;
        int64_t t = 0;
        auto replace = [&](bool hit_in_b2) {
            const int64_t n1 = t1.size();
            int32_t victim;
            if ((n1 > 0 && (n1 > p || (n1 == p && hit_in_b2))) || t2.size() == 0) {
                victim = t1.oldest();
                t1.remove(victim);
                b1.push_newest(victim);
            } else {
                victim = t2.oldest();
                t2.remove(victim);
                b2.push_newest(victim);
            }
            rec.evicted(t, victim);
        };
        for (; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (t1.contains(id)) {
                t1.remove(id);
                t2.push_newest(id);
                rec.hit(t);
                continue;
            }
            if (t2.contains(id)) {
                t2.move_to_newest(id);
                rec.hit(t);
                continue;
            }
            const int ghost = b1.contains(id) ? 1 : b2.contains(id) ? 2 : 0;
            if (ghost == 1) {
                p = std::min(p + std::max(double(b2.size()) / double(b1.size()), 1.0), double(k));
                b1.remove(id);
            } else if (ghost == 2) {
                p = std::max(p - std::max(double(b1.size()) / double(b2.size()), 1.0), 0.0);
                b2.remove(id);
            }
            rec.miss(t);
            if (t1.size() + t2.size() >= k) {
                if (ghost) {
                    replace(ghost == 2);
                } else if (t1.size() + b1.size() + 1 > k) {  // case IV, T1 + B1 full
                    if (b1.size() > 0) {
                        b1.remove(b1.oldest());
                        replace(false);
                    } else {
                        const int32_t victim = t1.oldest();
                        t1.remove(victim);
                        rec.evicted(t, victim);
                    }
                } else {
                    if (t1.size() + b1.size() + t2.size() + b2.size() >= 2 * k && b2.size() > 0)
                        b2.remove(b2.oldest());
                    replace(false);
                }
            }
            (ghost ? t2 : t1).push_newest(id);
        }
    });
}

}  // namespace

void register_sim_arc(py::module_& m) {
    m.def("replay_arc", &replay_arc, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_arc);

}  // namespace lcr
