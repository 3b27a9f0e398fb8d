// Marker (randomized marking) core; the spec is lcr.policies.marker.Marker with
// lcr.policies.marking.MarkedCache: slots, and the unmarked keys in a list kept in
// slot order at the phase start and then edited by swap-remove.
#include <vector>

#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"
#include "cpu/splitmix64.h"

namespace lcr {
namespace {

using namespace sim;

class MarkedCache {
public:
    explicit MarkedCache(int64_t n_ids) : slot_of_(n_ids, kAbsent), unmarked_pos_(n_ids, kAbsent) {}

    bool contains(int32_t id) const { return slot_of_[id] != kAbsent; }
    int64_t size() const { return static_cast<int64_t>(slots_.size()); }
    const std::vector<int32_t>& unmarked() const { return unmarked_; }

    void mark(int32_t id) {
        const int32_t pos = unmarked_pos_[id];
        if (pos == kAbsent) return;
        unmarked_pos_[id] = kAbsent;
        const int32_t last = unmarked_.back();
        unmarked_.pop_back();
        if (last != id) {
            unmarked_[pos] = last;
            unmarked_pos_[last] = pos;
        }
    }

    bool start_phase_if_all_marked() {
        if (!unmarked_.empty()) return false;
        unmarked_ = slots_;
        for (std::size_t i = 0; i < unmarked_.size(); ++i) unmarked_pos_[unmarked_[i]] = static_cast<int32_t>(i);
        return true;
    }

    // Put `id` (marked) in the unmarked `victim`'s slot.
    void replace(int32_t victim, int32_t id) {
        mark(victim);
        const int32_t slot = slot_of_[victim];
        slot_of_[victim] = kAbsent;
        slots_[slot] = id;
        slot_of_[id] = slot;
    }

    void add(int32_t id) {
        slot_of_[id] = static_cast<int32_t>(slots_.size());
        slots_.push_back(id);
    }

private:
    static constexpr int32_t kAbsent = -1;
    std::vector<int32_t> slots_, slot_of_, unmarked_, unmarked_pos_;
};

py::tuple replay_marker(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, uint64_t seed,
                        bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters& c) {
        MarkedCache cache(req.n_ids);
        SplitMix64 rng(seed);
        for (int64_t t = 0; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (cache.contains(id)) {
                cache.mark(id);
                rec.hit(t);
                continue;
            }
            if (cache.size() >= capacity) {
                if (cache.start_phase_if_all_marked()) ++c.phases;
                const auto& unmarked = cache.unmarked();
                const int32_t victim = unmarked[rng.below(unmarked.size())];
                cache.replace(victim, id);
                rec.miss(t, victim);
            } else {
                cache.add(id);
                rec.miss(t);
            }
        }
    });
}

}  // namespace

void register_sim_marker(py::module_& m) {
    m.def("replay_marker", &replay_marker, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("seed"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_marker);

}  // namespace lcr
