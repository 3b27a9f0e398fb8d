// The candidate window shared by the HF and LARU cores (Algorithm 1, lines 18-25);
// the spec is lcr.policies.window.choose_in_window.
#pragma once
#include <algorithm>
#include <cstdint>

#include "cpu/recency_tree.h"
#include "cpu/sim_replay.h"

namespace lcr::sim {

struct WindowChoice {
    int32_t victim;
    bool by_prediction;
};

// Among the `window` least recently used keys, the one predicted to return last.
// A window of one is a plain LRU eviction and asks the predictor nothing.
inline WindowChoice choose_in_window(const RecencyTree& cache, const Predictions& pred, Counters& c,
                                     int64_t window) {
    const int64_t candidates = std::min(window, cache.size());
    if (candidates == 1) {
        ++c.lru_evictions;
        return {cache.oldest(), false};
    }
    c.predict_at_eviction(pred, candidates);
    ++c.prediction_evictions;
    return {cache.largest_among_oldest(candidates), true};
}

}  // namespace lcr::sim
