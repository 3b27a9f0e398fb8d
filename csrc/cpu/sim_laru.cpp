// LARU (learning-augmented LRU, Algorithm 1) core; the spec is lcr.policies.laru.LARU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "cpu/candidate_window.h"
#include "cpu/recency_list.h"
#include "cpu/recency_tree.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

struct LaruParams {
    double b = 2.0;
    int64_t shrink_every = 1;
    bool credit = false;  // lambda grows back by b on hits LRU would have missed
    double guard = -1;    // >= 0: miss budget against LRU, (1 + guard) x its misses; < 0: off
    bool intervals = false;  // follow the interval expert while its shadow misses less
    double margin = 0.03;    // ... by this share of the predictions' shadow's misses (or by k)
};

// One LARU cache of k ids. Each access brings the key's rank (the prediction, or the
// interval expert's answer for that shadow); `pred` only counts the predictor's calls.
// A second tree, when asked for, holds the same ids under the interval expert's ranks so
// that the window can follow that expert.
class LaruCache {
public:
    struct Step {
        bool hit;
        int32_t victim;  // -1: nothing evicted
    };

    LaruCache(int64_t k, int64_t n_ids, const LaruParams& params, const Predictions& pred, Counters& c,
              bool with_interval_tree)
        : k_(k), params_(params), pred_(pred), c_(c), cache_(k, n_ids), key_(n_ids),
          shadowed_(params.credit || params.guard >= 0),
          lru_shadow_(shadowed_ ? k : 0, shadowed_ ? n_ids : 0) {
        if (with_interval_tree) by_interval_.emplace(k, n_ids);
    }

    int64_t misses() const { return misses_; }

    // A request of `id`: `rank` and `interval_rank` are its new ranks in the two trees;
    // `intervals_lead()` is asked at a window eviction the predictions would make.
    template <class Lead>
    Step access(int32_t id, double rank, double interval_rank, Lead&& intervals_lead) {
        const bool lru_hit = !shadowed_ || lru_shadow_.access(id).hit;
        lru_misses_ += !lru_hit;
        if (cache_.contains(id)) {
            leave_old(id);
            if (params_.credit && !lru_hit) {  // the predictions kept a key LRU would have lost
                ++c_.credited_hits;
                c_.lambda = std::min(1.0, c_.lambda * params_.b);
            }
            cache_.touch(id, rank);
            if (by_interval_) by_interval_->touch(id, interval_rank);
            return {true, -1};
        }
        int32_t victim = -1;
        if (cache_.size() >= k_) {
            victim = choose_victim(id, intervals_lead);
            leave_old(victim);
            cache_.remove(victim);
            if (by_interval_) by_interval_->remove(victim);
        }
        ++misses_;
        key_[id].predicted_out_in = 0;  // reloaded: its last eviction is no longer by prediction
        cache_.push_newest(id, rank);
        if (by_interval_) by_interval_->push_newest(id, interval_rank);
        return {false, victim};
    }

private:
    struct KeyState {
        // The phase in which the key was last evicted by prediction (0: not since its
        // reload); bumping the phase number clears the whole record at once.
        int64_t predicted_out_in = 0;
        // In O: cached at the phase start and neither requested nor evicted since.
        bool old = false;
    };

    template <class Lead>
    int32_t choose_victim(int32_t id, Lead&& intervals_lead) {
        int64_t& phase = c_.phases;
        if (old_count_ == 0) {  // a new phase: every cached item becomes old
            cache_.for_each([&](int32_t item) { key_[item].old = true; });
            old_count_ = cache_.size();
            c_.lambda = 1.0;
            induced_in_phase_ = 0;
            ++phase;
        }
        if (key_[id].predicted_out_in == phase) {  // a prediction-induced miss
            ++c_.lru_evictions;
            ++c_.prediction_induced_misses;
            if (++induced_in_phase_ % params_.shrink_every == 0) c_.lambda /= params_.b;
            return cache_.oldest();
        }
        if (params_.guard >= 0 &&  // over the miss budget (this miss included)
            static_cast<double>(misses_ + 1) > (1 + params_.guard) * static_cast<double>(lru_misses_)) {
            ++c_.lru_evictions;
            ++c_.guarded_evictions;
            return cache_.oldest();
        }
        const int64_t window =
            std::max<int64_t>(static_cast<int64_t>(std::floor(c_.lambda * static_cast<double>(k_))), 1);
        const WindowChoice choice = choose_in_window(cache_, pred_, c_, window);
        int32_t victim = choice.victim;
        if (choice.by_prediction) {
            if (by_interval_ && intervals_lead()) {
                victim = by_interval_->largest_among_oldest(std::min(window, cache_.size()));
                ++c_.interval_evictions;
            }
            key_[victim].predicted_out_in = phase;
        }
        return victim;
    }

    void leave_old(int32_t id) {
        if (key_[id].old) {
            key_[id].old = false;
            --old_count_;
        }
    }

    int64_t k_;
    LaruParams params_;
    const Predictions& pred_;
    Counters& c_;
    RecencyTree cache_;
    std::optional<RecencyTree> by_interval_;
    std::vector<KeyState> key_;  // one cache line per key touched
    int64_t old_count_ = 0;
    int64_t induced_in_phase_ = 0;
    int64_t misses_ = 0;
    // What plain LRU would hold, and its misses so far (credit and guard read them).
    bool shadowed_;
    LruCache lru_shadow_;
    int64_t lru_misses_ = 0;
};

// The interval expert (lcr.policies.interval_expert.IntervalRanks): per id, its last
// access + the interval before it, +inf after one access.
class IntervalRanks {
public:
    explicit IntervalRanks(int64_t n_ids) : last_(n_ids, -1) {}

    double on_access(int32_t id, int64_t t) {
        const int64_t previous = last_[id];
        last_[id] = t;
        return previous < 0 ? std::numeric_limits<double>::infinity() : static_cast<double>(2 * t - previous);
    }

private:
    std::vector<int64_t> last_;
};

void run_laru(const Requests& req, Recorder& rec, Counters& c, int64_t k, const Predictions& pred,
              const LaruParams& params) {
    auto never = [] { return false; };
    auto record = [&](int64_t t, const LaruCache::Step& step) {
        step.hit ? rec.hit(t) : step.victim >= 0 ? rec.miss(t, step.victim) : rec.miss(t);
    };
    if (!params.intervals) {
        LaruCache cache(k, req.n_ids, params, pred, c, false);
        for (int64_t t = 0; t < req.n; ++t) record(t, cache.access(req.ids[t], pred.rank(t), 0.0, never));
        c.predict_on_access(pred, req.n);
        return;
    }
    // Two shadows (keys only, same parameters) beside the cache: LARU over the predictions
    // and LARU over the interval expert; the cache follows the expert whose shadow misses less.
    const Predictions counted_nowhere{nullptr, false};  // the interval shadow's ranks come with each access
    Counters shadow_counters[2];
    LaruCache cache(k, req.n_ids, params, pred, c, true);
    LaruCache predicted(k, req.n_ids, params, pred, shadow_counters[0], false);
    IntervalRanks intervals(req.n_ids);
    LaruCache by_interval(k, req.n_ids, params, counted_nowhere, shadow_counters[1], false);
    auto intervals_lead = [&] {  // lcr.policies.laru.LARU._intervals_lead
        const int64_t saved = predicted.misses() - by_interval.misses();
        return saved > k || static_cast<double>(saved) > params.margin * static_cast<double>(predicted.misses());
    };
    for (int64_t t = 0; t < req.n; ++t) {
        const int32_t id = req.ids[t];
        const double interval_rank = intervals.on_access(id, t);
        predicted.access(id, pred.rank(t), 0.0, never);  // the shadows count this request first
        by_interval.access(id, interval_rank, 0.0, never);
        record(t, cache.access(id, pred.rank(t), interval_rank, intervals_lead));
    }
    c.predict_on_access(pred, req.n);
}

py::tuple replay_laru(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, const Array<double>& predictions,
                      bool async, double b, int64_t shrink_every, bool credit, double guard, bool intervals,
                      double margin, bool record_evictions) {
    checked_capacity(capacity);
    if (!(b > 1)) raise_value_error("laru needs b > 1");
    if (shrink_every < 1) raise_value_error("laru shrink_every must be at least 1");
    if (!(margin >= 0 && margin < 1)) raise_value_error("laru margin must lie in [0, 1)");
    const Predictions pred{aligned_with(predictions, ids.size(), "predictions"), async};
    const LaruParams params{b, shrink_every, credit, guard, intervals, margin};
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters& c) {
        run_laru(req, rec, c, capacity, pred, params);
    });
}

}  // namespace

void register_sim_laru(py::module_& m) {
    m.def("replay_laru", &replay_laru, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("predictions"),
          py::arg("async_mode"), py::arg("b"), py::arg("shrink_every"), py::arg("credit"), py::arg("guard"),
          py::arg("intervals"), py::arg("margin"), py::arg("record_evictions"));
}
static const SimCore registered(register_sim_laru);

}  // namespace lcr
