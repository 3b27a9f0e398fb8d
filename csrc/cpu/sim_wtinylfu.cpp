// W-TinyLFU core; the spec is lcr.policies.wtinylfu.WTinyLFU (libCacheSim's WTinyLFU with
// its SLRU main cache and counting Bloom filter, unit sizes). The sketch hashes the
// original keys, so the caller passes them alongside the dense ids.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"
#include "cpu/xxh64.h"

namespace lcr {
namespace {

using namespace sim;

// lcr.policies.sketch.CountingBloomSketch over dense ids, each id's two hashes precomputed.
class Sketch {
public:
    Sketch(const int64_t* keys, int64_t n_ids, int64_t entries) : a_(n_ids), b_(n_ids) {
        const double per_key = -std::log(0.001) / 0.480453013918201;
        hashes_ = int(std::ceil(0.693147180559945 * per_key));
        const int64_t size = std::min<int64_t>(int64_t(std::ceil(per_key * double(entries))), 2147483647);
        size_ = uint32_t(size >= hashes_ ? size : 2 * hashes_);
        counters_.assign(size_, 0);
        for (int64_t id = 0; id < n_ids; ++id) {
            a_[id] = uint32_t(xxh64_u64(uint64_t(keys[id]), 0x12345678));
            b_[id] = uint32_t(xxh64_u64(uint64_t(keys[id]), 0x12344321));
        }
    }
    uint64_t estimate(int32_t id) const {
        uint64_t low = UINT64_MAX;
        for (int i = 0; i < hashes_; ++i) low = std::min<uint64_t>(low, counters_[slot(id, i)]);
        return low;
    }
    void add(int32_t id) {
        for (int i = 0; i < hashes_; ++i) ++counters_[slot(id, i)];
    }
    void halve() {
        for (auto& c : counters_) c >>= 1;
    }

private:
    uint32_t slot(int32_t id, int i) const { return uint32_t(a_[id] + uint32_t(i) * b_[id]) % size_; }
    std::vector<uint32_t> a_, b_;
    std::vector<uint64_t> counters_;
    int hashes_ = 0;
    uint32_t size_ = 0;
};

py::tuple replay_wtinylfu(const Array<int32_t>& ids, const Array<int64_t>& keys, int64_t capacity,
                          int64_t window_size, bool record_evictions) {
    checked_capacity(capacity);
    const int64_t n_ids = keys.size();
    const int64_t main_size = capacity - window_size;
    if (window_size < 1 || main_size < 0) raise_value_error("wtinylfu: the window needs a slot");
    const int64_t* key_at = keys.data();
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        RecencyList window(req.n_ids), probation(req.n_ids), protect(req.n_ids);  // oldest() = LRU end
        const int64_t seg1 = int64_t(4.0 / 5 * double(main_size));
        int64_t seg0 = int64_t(1.0 / 5 * double(main_size));
        if (main_size > 0 && seg0 + seg1 == 0) seg0 = 1;  // k = 2: WTinyLFU.segment_size
        Sketch sketch(key_at, req.n_ids, std::max<int64_t>(1, main_size));
        const int64_t halve_every = 32 * main_size;
        int64_t main_hits = 0;
        int64_t t = 0;
        auto main_insert = [&](int32_t id) {
            if (probation.size() + 1 <= seg0 || protect.size() + 1 > seg1)
                probation.push_newest(id);
            else
                protect.push_newest(id);
        };
        auto main_victim = [&] { return probation.size() > 0 ? probation.oldest() : protect.oldest(); };
        auto main_evict = [&] {
            RecencyList& segment = probation.size() > 0 ? probation : protect;
            const int32_t victim = segment.oldest();
            segment.remove(victim);
            rec.evicted(t, victim);
        };
        auto free_slot = [&] {
            while (window.size() > 0) {
                const int32_t candidate = window.oldest();
                window.remove(candidate);
                if (probation.size() + protect.size() + 1 <= main_size) {
                    main_insert(candidate);
                    sketch.add(candidate);
                    continue;
                }
                if (main_size > 0 && sketch.estimate(candidate) > sketch.estimate(main_victim())) {
                    main_evict();
                    main_insert(candidate);
                } else {
                    rec.evicted(t, candidate);
                }
                sketch.add(candidate);
                return;
            }
            main_evict();
        };
        for (; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (window.contains(id)) {
                window.move_to_newest(id);
                rec.hit(t);
                continue;
            }
            if (probation.contains(id) || protect.contains(id)) {
                if (protect.contains(id)) {
                    protect.move_to_newest(id);
                } else {
                    probation.remove(id);
                    protect.push_newest(id);
                    if (protect.size() > seg1) {
                        const int32_t cooled = protect.oldest();
                        protect.remove(cooled);
                        probation.push_newest(cooled);
                        while (probation.size() > seg0) {  // only after an overfull insert
                            const int32_t victim = probation.oldest();
                            probation.remove(victim);
                            rec.evicted(t, victim);
                        }
                    }
                }
                sketch.add(id);
                if (++main_hits >= halve_every) {
                    main_hits = 0;
                    sketch.halve();
                }
                rec.hit(t);
                continue;
            }
            rec.miss(t);
            if (window.size() + probation.size() + protect.size() >= capacity) free_slot();
            window.push_newest(id);
            sketch.add(id);
        }
    });
}

}  // namespace

void register_sim_wtinylfu(py::module_& m) {
    m.def("replay_wtinylfu", &replay_wtinylfu, py::arg("ids"), py::arg("keys"), py::arg("capacity"),
          py::arg("window_size"), py::arg("record_evictions"));
}
static const SimCore registered(register_sim_wtinylfu);

}  // namespace lcr
