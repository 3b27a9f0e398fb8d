// FPB (follow the predicted Belady) core; the spec is lcr.policies.fpb.FPB.
#include "cpu/recency_tree.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_fpb(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, const Array<double>& predictions,
                     bool async, bool record_evictions) {
    checked_capacity(capacity);
    const Predictions pred{aligned_with(predictions, ids.size(), "predictions"), async};
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters& c) {
        RecencyTree cache(capacity, req.n_ids);
        for (int64_t t = 0; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (cache.contains(id)) {
                cache.touch(id, pred.rank(t));
                rec.hit(t);
                continue;
            }
            if (cache.size() >= capacity) {
                c.predict_at_eviction(pred, cache.size());  // every cached key is a candidate
                const int32_t victim = cache.largest();
                cache.remove(victim);
                ++c.prediction_evictions;
                rec.miss(t, victim);
            } else {
                rec.miss(t);
            }
            cache.push_newest(id, pred.rank(t));
        }
        c.predict_on_access(pred, req.n);
    });
}

}  // namespace

void register_sim_fpb(py::module_& m) {
    m.def("replay_fpb", &replay_fpb, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("predictions"),
          py::arg("async_mode"), py::arg("record_evictions"));
}
static const SimCore registered(register_sim_fpb);

}  // namespace lcr
