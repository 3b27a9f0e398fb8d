// LARU (learning-augmented LRU, Algorithm 1) core; the spec is lcr.policies.laru.LARU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/candidate_window.h"
#include "cpu/recency_list.h"
#include "cpu/recency_tree.h"
#include "cpu/registry.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

struct LaruParams {
    double b = 2.0;
    int64_t shrink_every = 1;
    bool credit = false;  // lambda grows back by b on hits LRU would have missed
    double guard = -1;    // >= 0: miss budget against LRU, (1 + guard) x its misses; < 0: off
};

void run_laru(const Requests& req, Recorder& rec, Counters& c, int64_t k, const Predictions& pred,
              const LaruParams& params) {
    RecencyTree cache(k, req.n_ids);
    struct KeyState {
        // The phase in which the key was last evicted by prediction (0: not since its
        // reload); bumping the phase number clears the whole record at once.
        int64_t predicted_out_in = 0;
        // In O: cached at the phase start and neither requested nor evicted since.
        bool old = false;
    };
    std::vector<KeyState> key(req.n_ids);  // one cache line per key touched
    int64_t old_count = 0;
    int64_t& phase = c.phases;
    double& lam = c.lambda;
    int64_t induced_in_phase = 0;
    // What plain LRU would hold, and its misses so far (credit and guard read them).
    const bool shadowed = params.credit || params.guard >= 0;
    LruCache lru_shadow(shadowed ? k : 0, shadowed ? req.n_ids : 0);
    int64_t lru_misses = 0;

    auto leave_old = [&](int32_t id) {
        if (key[id].old) {
            key[id].old = false;
            --old_count;
        }
    };

    for (int64_t t = 0; t < req.n; ++t) {
        const int32_t id = req.ids[t];
        const bool lru_hit = !shadowed || lru_shadow.access(id).hit;
        lru_misses += !lru_hit;
        if (cache.contains(id)) {
            leave_old(id);
            if (params.credit && !lru_hit) {  // the predictions kept a key LRU would have lost
                ++c.credited_hits;
                lam = std::min(1.0, lam * params.b);
            }
            cache.touch(id, pred.rank(t));
            rec.hit(t);
            continue;
        }
        if (cache.size() >= k) {
            if (old_count == 0) {  // a new phase: every cached item becomes old
                cache.for_each([&](int32_t item) { key[item].old = true; });
                old_count = cache.size();
                lam = 1.0;
                induced_in_phase = 0;
                ++phase;
            }
            int32_t victim;
            if (key[id].predicted_out_in == phase) {  // a prediction-induced miss
                victim = cache.oldest();
                ++c.lru_evictions;
                ++c.prediction_induced_misses;
                if (++induced_in_phase % params.shrink_every == 0) lam /= params.b;
            } else if (params.guard >= 0 &&  // over the miss budget (this miss included)
                       static_cast<double>(c.misses + 1) > (1 + params.guard) * static_cast<double>(lru_misses)) {
                victim = cache.oldest();
                ++c.lru_evictions;
                ++c.guarded_evictions;
            } else {
                const int64_t window = std::max<int64_t>(static_cast<int64_t>(std::floor(lam * static_cast<double>(k))), 1);
                const WindowChoice choice = choose_in_window(cache, pred, c, window);
                victim = choice.victim;
                if (choice.by_prediction) key[victim].predicted_out_in = phase;
            }
            leave_old(victim);
            cache.remove(victim);
            rec.miss(t, victim);
        } else {
            rec.miss(t);
        }
        key[id].predicted_out_in = 0;  // reloaded: its last eviction is no longer by prediction
        cache.push_newest(id, pred.rank(t));
    }
    c.predict_on_access(pred, req.n);
}

py::tuple replay_laru(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, const Array<double>& predictions,
                      bool async, double b, int64_t shrink_every, bool credit, double guard,
                      bool record_evictions) {
    checked_capacity(capacity);
    if (!(b > 1)) raise_value_error("laru needs b > 1");
    if (shrink_every < 1) raise_value_error("laru shrink_every must be at least 1");
    const Predictions pred{aligned_with(predictions, ids.size(), "predictions"), async};
    const LaruParams params{b, shrink_every, credit, guard};
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters& c) {
        run_laru(req, rec, c, capacity, pred, params);
    });
}

}  // namespace

void register_sim_laru(py::module_& m) {
    m.def("replay_laru", &replay_laru, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("predictions"),
          py::arg("async_mode"), py::arg("b"), py::arg("shrink_every"), py::arg("credit"), py::arg("guard"),
          py::arg("record_evictions"));
}

}  // namespace lcr
