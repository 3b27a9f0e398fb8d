// What every simulator core shares: the request arrays it reads, the per-request
// outcome it writes, its counters, and the binding glue that releases the GIL.
//
// Keys arrive as dense ids 0..n_ids-1 (lcr.sim.native remaps them once per trace),
// so per-key state lives in flat arrays indexed by id instead of a hash map.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "cpu/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace lcr::sim {

namespace py = pybind11;

template <class T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

struct Requests {
    const int32_t* ids = nullptr;  // dense id of request t
    int64_t n = 0;                 // number of requests
    int64_t n_ids = 0;             // distinct keys
};

// Predicted next-request times aligned with requests. A cached key's rank is the
// prediction made at its latest access; NaN means "unknown" and ranks as +inf.
struct Predictions {
    const double* at = nullptr;
    bool async = false;  // only changes how predictor calls are counted

    double rank(int64_t t) const {
        const double v = at[t];
        return std::isnan(v) ? std::numeric_limits<double>::infinity() : v;
    }
};

struct Counters {
    int64_t hits = 0, misses = 0, evictions = 0;
    int64_t prediction_evictions = 0, lru_evictions = 0;
    int64_t predictor_calls = 0, predicted_keys = 0;
    int64_t phases = 0, prediction_induced_misses = 0, credited_hits = 0, guarded_evictions = 0;
    int64_t expert_evictions = 0;  // LARU: evictions its experts chose
    int64_t expert_tie_breaks = 0;  // LARU: the first-seen expert broke the predictions' tie
    double lambda = 1.0;

    // One sync-mode call that asks about `keys` candidates at an eviction.
    void predict_at_eviction(const Predictions& p, int64_t keys) {
        if (!p.async) {
            ++predictor_calls;
            predicted_keys += keys;
        }
    }
    // Async mode asks about every requested key once, at its access.
    void predict_on_access(const Predictions& p, int64_t requests) {
        if (p.async) {
            predictor_calls += requests;
            predicted_keys += requests;
        }
    }

    py::dict as_dict() const {
        return py::dict(py::arg("hits") = hits, py::arg("misses") = misses, py::arg("evictions") = evictions,
                        py::arg("prediction_evictions") = prediction_evictions,
                        py::arg("lru_evictions") = lru_evictions, py::arg("predictor_calls") = predictor_calls,
                        py::arg("predicted_keys") = predicted_keys, py::arg("phases") = phases,
                        py::arg("prediction_induced_misses") = prediction_induced_misses,
                        py::arg("credited_hits") = credited_hits,
                        py::arg("guarded_evictions") = guarded_evictions,
                        py::arg("expert_evictions") = expert_evictions,
                        py::arg("expert_tie_breaks") = expert_tie_breaks, py::arg("lambda") = lambda);
    }
};

// Writes the hit mask, the evicted id per request (optional) and the basic counters.
class Recorder {
public:
    Recorder(uint8_t* hit, int32_t* evicted, Counters& c) : hit_(hit), evicted_(evicted), c_(c) {}

    void hit(int64_t t) {
        hit_[t] = 1;
        ++c_.hits;
    }
    void miss(int64_t) { ++c_.misses; }
    void miss(int64_t t, int32_t victim) {
        ++c_.misses;
        ++c_.evictions;
        if (evicted_) evicted_[t] = victim;
    }
    // An eviction on its own, for policies that may evict on a hit or more than once per
    // request (LIRS, W-TinyLFU): every one is counted, the last is recorded.
    void evicted(int64_t t, int32_t victim) {
        ++c_.evictions;
        if (evicted_) evicted_[t] = victim;
    }

private:
    uint8_t* hit_;
    int32_t* evicted_;
    Counters& c_;
};

inline int64_t checked_capacity(int64_t capacity) {
    if (capacity < 1) raise_value_error("cache capacity must be at least 1 item, got " + std::to_string(capacity));
    return capacity;
}

// LIRS's resident HIR share, 1% of the cache (lcr.policies.lirs.resident_hir_slots): LIRS's
// own HIR queue and the probation of LARU's first-seen expert.
inline int64_t resident_hir_slots(int64_t capacity) {
    return std::max<int64_t>(1, static_cast<int64_t>(0.01 * static_cast<double>(capacity)));
}

template <class T>
const T* aligned_with(const Array<T>& a, int64_t n, const char* what) {
    if (a.ndim() != 1 || a.size() != n)
        raise_value_error(std::string(what) + " must be a 1-d array with one entry per request");
    return a.data();
}

// Runs `core(requests, recorder, counters)` without the GIL and returns
// (hits: bool[n], evicted: int32[n] of dense ids or -1 / None, counters: dict).
template <class Core>
py::tuple run_core(const Array<int32_t>& ids, int64_t n_ids, bool record_evictions, Core&& core) {
    if (ids.ndim() != 1) raise_value_error("ids must be a 1-d array");
    Requests req{ids.data(), static_cast<int64_t>(ids.size()), n_ids};
    for (int64_t t = 0; t < req.n; ++t)  // a bad id would index out of bounds below
        if (req.ids[t] < 0 || req.ids[t] >= n_ids) raise_value_error("ids must lie in [0, n_ids)");
    py::array_t<bool> hits(req.n);
    py::object evicted = py::none();
    int32_t* evicted_at = nullptr;
    if (record_evictions) {
        py::array_t<int32_t> ev(req.n);
        evicted_at = ev.mutable_data();
        std::fill(evicted_at, evicted_at + req.n, -1);
        evicted = std::move(ev);
    }
    uint8_t* hit_at = reinterpret_cast<uint8_t*>(hits.mutable_data());
    std::fill(hit_at, hit_at + req.n, uint8_t{0});
    Counters counters;
    {
        py::gil_scoped_release release;
        Recorder rec(hit_at, evicted_at, counters);
        core(req, rec, counters);
    }
    return py::make_tuple(std::move(hits), std::move(evicted), counters.as_dict());
}

}  // namespace lcr::sim
