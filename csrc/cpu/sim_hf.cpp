// HF (heuristic filtering) core; the spec is lcr.policies.hf.HF.
#include "cpu/candidate_window.h"
#include "cpu/recency_tree.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_hf(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, const Array<double>& predictions,
                    bool async, int64_t window, bool record_evictions) {
    checked_capacity(capacity);
    if (window < 1) raise_value_error("hf window must be at least 1");
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
                const int32_t victim = choose_in_window(cache, pred, c, window).victim;
                cache.remove(victim);
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

void register_sim_hf(py::module_& m) {
    m.def("replay_hf", &replay_hf, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("predictions"),
          py::arg("async_mode"), py::arg("window"), py::arg("record_evictions"));
}
static const SimCore registered(register_sim_hf);

}  // namespace lcr
