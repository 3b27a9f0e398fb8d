// LFU core (optionally with aging); the spec is lcr.policies.lfu.LFU.
//
// Keys with the same count form a FIFO (the order they reached it), threaded through
// flat arrays; buckets are indexed by count and grow as counts do.
#include <vector>

#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

constexpr int32_t kNone = -1;

class CountBuckets {
public:
    explicit CountBuckets(int64_t n_ids) : count_(n_ids, 0), next_(n_ids, kNone), prev_(n_ids, kNone) {}

    bool contains(int32_t id) const { return count_[id] != 0; }
    int64_t count(int32_t id) const { return count_[id]; }

    void append(int32_t id, int64_t count) {
        if (count >= int64_t(first_.size())) {
            first_.resize(count + 1, kNone);
            last_.resize(count + 1, kNone);
        }
        count_[id] = count;
        prev_[id] = last_[count];
        next_[id] = kNone;
        (last_[count] != kNone ? next_[last_[count]] : first_[count]) = id;
        last_[count] = id;
        if (count < min_ || min_ == 0) min_ = count;
    }

    void unlink(int32_t id) {
        const int64_t c = count_[id];
        (prev_[id] != kNone ? next_[prev_[id]] : first_[c]) = next_[id];
        (next_[id] != kNone ? prev_[next_[id]] : last_[c]) = prev_[id];
        count_[id] = 0;
    }

    // The key with the smallest count that reached it first.
    int32_t victim() {
        while (first_[min_] == kNone) ++min_;
        return first_[min_];
    }

    void bump(int32_t id) {
        const int64_t c = count_[id];
        unlink(id);
        append(id, c + 1);
        if (first_[min_] == kNone && min_ == c) min_ = c + 1;
    }

    // Every count c becomes ceil(c / 2); merged counts keep ascending-count order.
    void halve() {
        std::vector<int32_t> first(first_.size(), kNone), last(first_.size(), kNone);
        for (size_t c = 1; c < first_.size(); ++c) {
            if (first_[c] == kNone) continue;
            const size_t h = (c + 1) / 2;
            for (int32_t id = first_[c]; id != kNone; id = next_[id]) count_[id] = int64_t(h);
            if (last[h] == kNone) {
                first[h] = first_[c];
            } else {
                next_[last[h]] = first_[c];
                prev_[first_[c]] = last[h];
            }
            last[h] = last_[c];
        }
        first_.swap(first);
        last_.swap(last);
        min_ = 1;
    }

private:
    std::vector<int64_t> count_;  // 0: not cached
    std::vector<int32_t> next_, prev_;
    std::vector<int32_t> first_{kNone}, last_{kNone};
    int64_t min_ = 0;
};

py::tuple replay_lfu(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, int64_t aging,
                     bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        CountBuckets buckets(req.n_ids);
        int64_t cached = 0;
        for (int64_t t = 0; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (buckets.contains(id)) {
                buckets.bump(id);
                rec.hit(t);
            } else {
                if (cached >= capacity) {
                    const int32_t victim = buckets.victim();
                    buckets.unlink(victim);
                    rec.miss(t, victim);
                } else {
                    rec.miss(t);
                    ++cached;
                }
                buckets.append(id, 1);
            }
            if (aging > 0 && (t + 1) % aging == 0) buckets.halve();
        }
    });
}

}  // namespace

void register_sim_lfu(py::module_& m) {
    m.def("replay_lfu", &replay_lfu, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"), py::arg("aging"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_lfu);

}  // namespace lcr
