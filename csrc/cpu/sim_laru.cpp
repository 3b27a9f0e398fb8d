// LARU (learning-augmented LRU, Algorithm 1) core; the spec is lcr.policies.laru.LARU.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
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
    // The experts (lcr.policies.laru_experts: intervals, decay, first, model, frequency).
    bool intervals = false;

    int64_t n_experts() const { return intervals ? 5 : 0; }
    bool needs_twin() const { return credit || guard >= 0; }
    LaruParams without_experts() const {
        LaruParams p = *this;
        p.intervals = false;
        return p;
    }
    // An expert's shadow (lcr.policies.laru.LARU.experts): its window stays the whole
    // cache (lcr.policies.laru.WHOLE_CACHE), and it runs without a guard (and without
    // credit, which a window that never shrinks cannot use).
    LaruParams for_expert_shadow() const {
        LaruParams p = without_experts();
        p.shrink_every = int64_t{1} << 62;
        p.credit = false;
        p.guard = -1;
        return p;
    }
};

// What `leader()` answers at an eviction the predictions would make: an expert's index
// (follow it), or one of these.
constexpr int64_t kPredictions = -1;           // the predictions; recency breaks their ties
constexpr int64_t kPredictionsFirstTies = -2;  // the predictions; the first-seen expert breaks ties
constexpr int64_t kFirstExpert = 2;            // its index (EXPERTS: intervals, decay, first, model, frequency)
// FirstSeenRanks.ONCE_FLOOR, 2^51: its ranks of keys seen once are at least this.
constexpr double kOnceFloor = 2251799813685248.0;

// What an LRU cache of LARU's size does with each request, for credit and the guard: one
// per replay, read by the cache and every shadow (LRU caches of one size fed the same
// requests hold the same keys), advanced once per request before any of them.
class LruTwin {
public:
    LruTwin(int64_t k, int64_t n_ids) : lru_(k, n_ids) {}
    void access(int32_t id) {
        hit_ = lru_.access(id).hit;
        misses_ += !hit_;
    }
    bool hit() const { return hit_; }
    int64_t misses() const { return misses_; }

private:
    LruCache lru_;
    bool hit_ = true;
    int64_t misses_ = 0;
};

// One LARU cache of k ids. Each access brings the key's rank (the prediction, or an
// expert's answer for that expert's shadow); `pred` only counts the predictor's calls.
// With `n_expert_trees`, one more tree per expert holds the same ids under that expert's
// ranks, so that eviction can follow it, and the cache's own tree keeps the first-seen
// expert's rank as its second rank, to break the predictions' ties.
class LaruCache {
public:
    struct Step {
        bool hit;
        int32_t victim;  // -1: nothing evicted
    };

    // `twin`: the replay's LRU twin, which credit and the guard need (params.needs_twin()).
    LaruCache(int64_t k, int64_t n_ids, const LaruParams& params, const Predictions& pred, Counters& c,
              int64_t n_expert_trees, const LruTwin* twin)
        : k_(k), params_(params), pred_(pred), c_(c), twin_(twin),
          cache_(k, n_ids, n_expert_trees > 0), key_(n_ids) {
        for (int64_t e = 0; e < n_expert_trees; ++e) by_expert_.emplace_back(k, n_ids);
    }

    int64_t misses() const { return misses_; }

    // With experts: `shadow` (the predictions' or an expert's) widens the guard's budget
    // by what it has saved against LRU (guard_budget).
    void watch_shadow(const LaruCache& shadow) { shadows_.push_back(&shadow); }

    // The rank this cache's own tree holds for `id` changed (an expert's shadow: its expert re-ranked it).
    void rerank_own(int32_t id, double rank) {
        if (cache_.contains(id)) cache_.rerank(id, rank);
    }

    // Expert `e` re-ranked `id` (lcr.policies.laru_experts.ExpertRanks.on_shadow_eviction).
    void rerank(int64_t e, int32_t id, double rank) {
        if (!by_expert_[e].contains(id)) return;
        by_expert_[e].rerank(id, rank);
        if (e == kFirstExpert) cache_.rerank_tie(id, rank);
    }

    // A request of `id`: `rank` is its new rank, `expert_ranks[e]` the one in expert e's
    // tree; `leader()` (an expert's index, or kPredictions / kPredictionsFirstTies) is
    // asked at a window eviction the predictions would make.
    template <class Leader>
    Step access(int32_t id, double rank, const double* expert_ranks, Leader&& leader) {
        const bool lru_hit = twin_ == nullptr || twin_->hit();
        if (cache_.contains(id)) {
            leave_old(id);
            if (params_.credit && !lru_hit) {  // the predictions kept a key LRU would have lost
                ++c_.credited_hits;
                c_.lambda = std::min(1.0, c_.lambda * params_.b);
            }
            cache_.touch(id, rank, tie_rank(expert_ranks));
            for (size_t e = 0; e < by_expert_.size(); ++e) by_expert_[e].touch(id, expert_ranks[e]);
            return {true, -1};
        }
        int32_t victim = -1;
        if (cache_.size() >= k_) {
            victim = choose_victim(id, leader);
            leave_old(victim);
            cache_.remove(victim);
            for (RecencyTree& tree : by_expert_) tree.remove(victim);
        }
        ++misses_;
        key_[id].predicted_out_in = 0;  // reloaded: its last eviction is no longer by prediction
        cache_.push_newest(id, rank, tie_rank(expert_ranks));
        for (size_t e = 0; e < by_expert_.size(); ++e) by_expert_[e].push_newest(id, expert_ranks[e]);
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

    template <class Leader>
    int32_t choose_victim(int32_t id, Leader&& leader) {
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
        if (params_.guard >= 0 && static_cast<double>(misses_ + 1) > guard_budget()) {  // this miss included
            ++c_.lru_evictions;
            ++c_.guarded_evictions;
            return cache_.oldest();
        }
        const int64_t window =
            std::max<int64_t>(static_cast<int64_t>(std::floor(c_.lambda * static_cast<double>(k_))), 1);
        const WindowChoice choice = choose_in_window(cache_, pred_, c_, window);
        int32_t victim = choice.victim;
        if (choice.by_prediction) {
            const int64_t e = by_expert_.empty() ? kPredictions : leader();
            if (e >= 0) {
                victim = by_expert_[e].largest();  // over the whole cache
                ++c_.expert_evictions;
            } else if (e == kPredictionsFirstTies) {
                // LARU._break_tie: the first-seen expert's pick, if it is a key seen once.
                victim = cache_.largest_by_tie_among_oldest(std::min(window, cache_.size()));
                if (!cache_.tie_at_least(victim, kOnceFloor)) victim = choice.victim;
                c_.expert_tie_breaks += victim != choice.victim;
            }
            key_[victim].predicted_out_in = phase;
        }
        return victim;
    }

    // LARU._guard_budget: (1 + guard) x LRU's misses, plus what the best watched shadow
    // has saved against LRU so far, up to guard x LRU's misses.
    double guard_budget() const {
        const int64_t lru_misses = twin_->misses();
        const auto lru = static_cast<double>(lru_misses);
        double saved = 0.0;
        if (!shadows_.empty()) {
            int64_t best = shadows_.front()->misses();
            for (const LaruCache* shadow : shadows_) best = std::min(best, shadow->misses());
            saved = std::min(static_cast<double>(std::max<int64_t>(0, lru_misses - best)), params_.guard * lru);
        }
        return (1 + params_.guard) * lru + saved;
    }

    // The second rank of the cache's tree: the first-seen expert's (0 without experts).
    double tie_rank(const double* expert_ranks) const {
        return by_expert_.empty() ? 0.0 : expert_ranks[kFirstExpert];
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
    std::vector<const LaruCache*> shadows_;  // with experts: their best savings widen the guard's budget
    RecencyTree cache_;
    std::vector<RecencyTree> by_expert_;
    std::vector<KeyState> key_;  // one cache line per key touched
    int64_t old_count_ = 0;
    int64_t induced_in_phase_ = 0;
    int64_t misses_ = 0;
    const LruTwin* twin_;  // what plain LRU would hold (credit and the guard read it)
};

// One expert (lcr.policies.laru_experts) and its shadow LARU.
class Expert {
public:
    enum Kind { kIntervals, kDecay, kFirst, kModel, kFrequency };

    Expert(Kind kind, int64_t k, int64_t n_ids, const LaruParams& params, Counters& counters, const LruTwin* twin)
        : kind_(kind), tau_(10 * static_cast<double>(k) / std::log(2.0)),  // halves every 10 k requests
          probation_limit_(resident_hir_slots(k)),
          shadow_(k, n_ids, params.for_expert_shadow(), counted_nowhere_, counters, 0, twin) {
        last_.assign(n_ids, -1);
        value_.assign(n_ids, 0.0);
        if (kind == kFirst) in_probation_.assign(n_ids, 0);
    }

    // Ranks an access changed besides its own key's: a key leaving the first-seen
    // expert's probation, and a key seen once that the shadow dropped (+inf).
    struct Reranked {
        int32_t id[2] = {-1, -1};
        double rank[2] = {0, 0};
        int n = 0;
        void add(int32_t i, double r) { id[n] = i; rank[n++] = r; }
    };

    // The expert's rank of request t (the model expert's: `answer`, the model's rank of
    // it), then the shadow serves it with that rank; `reranked` gets the keys whose rank
    // this changed (FirstSeenRanks: one leaving the probation, one seen once that the
    // shadow dropped).
    template <class Never>
    double access(int32_t id, int64_t t, double answer, Never&& never, Reranked& reranked) {
        reranked.n = 0;
        const double r = kind_ == kModel ? answer : rank(id, t, reranked);
        const int32_t victim = shadow_.access(id, r, nullptr, never).victim;
        if (kind_ == kFirst && victim >= 0 && value_[victim] == 0) {
            leave_probation(victim);
            reranked.add(victim, kInf);
        }
        return r;
    }
    int64_t misses() const { return shadow_.misses(); }
    const LaruCache& shadow() const { return shadow_; }

private:
    double rank(int32_t id, int64_t t, Reranked& reranked) {
        switch (kind_) {
            case kIntervals:  // last access + the smoothed interval, +inf after one access
            case kFirst: {    // the same, but seen once: the probation, then SEEN_ONCE + t
                const int64_t previous = last_[id];
                last_[id] = t;
                if (previous < 0) {
                    if (kind_ != kFirst) return kInf;
                    probation_.push_back(id);
                    in_probation_[id] = 1;
                    if (++probation_size_ > probation_limit_) {  // the oldest member leaves
                        int32_t out = probation_.front();
                        for (; !in_probation_[out]; out = probation_.front()) probation_.pop_front();
                        leave_probation(out);
                        const double seen_once = kSeenOnce + static_cast<double>(last_[out]);
                        shadow_.rerank_own(out, seen_once);
                        reranked.add(out, seen_once);
                    }
                    return kProbationTop - static_cast<double>(t);
                }
                leave_probation(id);  // no-op but for the first-seen expert's members
                const auto interval = static_cast<double>(t - previous);  // >= 1: 0 marks "none yet"
                double& smoothed = value_[id];
                smoothed = smoothed == 0 ? interval : (1 - kWeight) * smoothed + kWeight * interval;
                return static_cast<double>(t) + smoothed;
            }
            case kModel:  // ranked by `access`
                break;
            case kFrequency:  // -(accesses so far)
                value_[id] += 1.0;
                return -value_[id];
            case kDecay: {  // -(log decayed count + t / tau)
                const int64_t last = last_[id] < 0 ? t : last_[id];
                value_[id] = value_[id] * std::exp(-static_cast<double>(t - last) / tau_) + 1.0;
                last_[id] = t;
                return -(std::log(value_[id]) + static_cast<double>(t) / tau_);
            }
        }
        return kInf;
    }

    void leave_probation(int32_t id) {
        if (kind_ == kFirst && in_probation_[id]) {
            in_probation_[id] = 0;
            --probation_size_;
        }
    }

    static constexpr double kInf = std::numeric_limits<double>::infinity();
    static constexpr double kProbationTop = 4503599627370495.0;  // 2^52 - 1
    static constexpr double kWeight = 0.25;  // IntervalRanks.weight: the newest interval's weight
    static constexpr double kSeenOnce = 4503599627370496.0;  // FirstSeenRanks.SEEN_ONCE, 2^52
    const Predictions counted_nowhere_{nullptr, false};  // the ranks come with each access
    Kind kind_;
    double tau_;
    std::vector<int64_t> last_;
    std::vector<double> value_;  // per key: the smoothed interval, the decayed count, or the count
    // FirstSeenRanks' probation: its members by first access (members that left stay
    // behind in the queue until they reach its front), and which keys are members.
    int64_t probation_limit_;
    int64_t probation_size_ = 0;
    std::deque<int32_t> probation_;
    std::vector<char> in_probation_;
    LaruCache shadow_;
};

void run_laru(const Requests& req, Recorder& rec, Counters& c, int64_t k, const Predictions& pred,
              const LaruParams& params) {
    auto never = [] { return kPredictions; };
    auto record = [&](int64_t t, const LaruCache::Step& step) {
        step.hit ? rec.hit(t) : step.victim >= 0 ? rec.miss(t, step.victim) : rec.miss(t);
    };
    const int64_t n_experts = params.n_experts();
    LruTwin lru_twin(params.needs_twin() ? k : 0, params.needs_twin() ? req.n_ids : 0);
    const LruTwin* twin = params.needs_twin() ? &lru_twin : nullptr;
    if (n_experts == 0) {
        LaruCache cache(k, req.n_ids, params, pred, c, 0, twin);
        for (int64_t t = 0; t < req.n; ++t) {
            if (twin != nullptr) lru_twin.access(req.ids[t]);
            record(t, cache.access(req.ids[t], pred.rank(t), nullptr, never));
        }
        c.predict_on_access(pred, req.n);
        return;
    }
    // Shadows (keys only, same parameters) beside the cache: LARU over the predictions and
    // one LARU per expert; the cache follows the expert whose shadow misses least.
    std::vector<Counters> shadow_counters(n_experts + 1);
    LaruCache predicted(k, req.n_ids, params.without_experts(), pred, shadow_counters[0], 0, twin);
    LaruCache cache(k, req.n_ids, params, pred, c, n_experts, twin);
    std::vector<Expert> experts;
    experts.reserve(n_experts);  // shadows keep their counters, and the cache watches them, by address
    for (const Expert::Kind kind : {Expert::kIntervals, Expert::kDecay, Expert::kFirst, Expert::kModel, Expert::kFrequency})
        experts.emplace_back(kind, k, req.n_ids, params, shadow_counters[experts.size() + 1], twin);
    cache.watch_shadow(predicted);
    for (const Expert& expert : experts) cache.watch_shadow(expert.shadow());
    auto leader = [&]() -> int64_t {  // lcr.policies.laru.LARU._leading_expert
        int64_t best = 0;
        for (int64_t e = 1; e < n_experts; ++e)
            if (experts[e].misses() < experts[best].misses()) best = e;
        if (experts[best].misses() < predicted.misses()) return best;
        // LARU._first_breaks_ties: no more misses than the predictions' shadow so far plus
        // the guard's slack (the spec's float operations, in its order).
        const double slack = params.guard < 0 ? 0.0 : params.guard * static_cast<double>(lru_twin.misses());
        return static_cast<double>(experts[kFirstExpert].misses()) <= static_cast<double>(predicted.misses()) + slack
                   ? kPredictionsFirstTies
                   : kPredictions;
    };
    std::vector<double> expert_ranks(n_experts);
    for (int64_t t = 0; t < req.n; ++t) {
        const int32_t id = req.ids[t];
        const double answer = pred.rank(t);
        if (twin != nullptr) lru_twin.access(id);  // before the cache and every shadow read it
        for (int64_t e = 0; e < n_experts; ++e) {
            Expert::Reranked reranked;
            expert_ranks[e] = experts[e].access(id, t, answer, never, reranked);
            for (int i = 0; i < reranked.n; ++i) cache.rerank(e, reranked.id[i], reranked.rank[i]);
        }
        predicted.access(id, answer, nullptr, never);  // the shadows count this request first
        record(t, cache.access(id, answer, expert_ranks.data(), leader));
    }
    c.predict_on_access(pred, req.n);
}

py::tuple replay_laru(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, const Array<double>& predictions,
                      bool async, double b, int64_t shrink_every, bool credit, double guard, bool intervals,
                      bool record_evictions) {
    checked_capacity(capacity);
    if (!(b > 1)) raise_value_error("laru needs b > 1");
    if (shrink_every < 1) raise_value_error("laru shrink_every must be at least 1");
    const Predictions pred{aligned_with(predictions, ids.size(), "predictions"), async};
    const LaruParams params{b, shrink_every, credit, guard, intervals};
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters& c) {
        run_laru(req, rec, c, capacity, pred, params);
    });
}

}  // namespace

void register_sim_laru(py::module_& m) {
    m.def("replay_laru", &replay_laru, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("predictions"),
          py::arg("async_mode"), py::arg("b"), py::arg("shrink_every"), py::arg("credit"), py::arg("guard"),
          py::arg("intervals"), py::arg("record_evictions"));
}
static const SimCore registered(register_sim_laru);

}  // namespace lcr
