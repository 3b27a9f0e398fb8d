// CPU engine of SlabHashCache: the batch semantics of lcr.embedding.reference, one
// slabset at a time. Tensors come in as raw data pointers (see lcr/embedding/cache.py).
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/slab_engine_py.h"
#include "common/slab_kernels.h"
#include "common/slab_table.h"
#include "common/slab_table_py.h"
#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

using slab_kernels::count_request;     // LFU's counts, kept as the GPU's kernels keep them
using slab_kernels::find_slot;         // the lookup rule of every engine
using slab_kernels::fresh_prediction;  // a new slot's: unknown, LFU's count 1, FIFO's order

// One slabset's view during an insertion: its evictable slots, oldest first.
struct Slabset {
    const SlabTable& t;
    uint32_t index;
    int64_t base;
    int64_t order[kSlabsetSlots];
    int evictable = 0;

    Slabset(const SlabTable& table, uint32_t j) : t(table), index(j), base(int64_t(j) * kSlabsetSlots) {}

    int64_t free_slot() const {
        for (int s = 0; s < kSlabsetSlots; ++s) {
            if (t.keys[base + s] == kEmptyKey) return base + s;
        }
        return -1;
    }

    // Slots not touched by the current batch (stamp < clock), by stamp (stamps are unique).
    void sort_evictable(int64_t clock) {
        evictable = 0;
        for (int s = 0; s < kSlabsetSlots; ++s) {
            if (t.stamps[base + s] < clock) order[evictable++] = base + s;
        }
        std::sort(order, order + evictable, [&](int64_t a, int64_t b) { return t.stamps[a] < t.stamps[b]; });
    }

    // The largest prediction among the `count` oldest evictable slots; the oldest on ties.
    int64_t predicted_victim(int count) const {
        int64_t best = order[0];
        for (int i = 1; i < count; ++i) {
            if (t.predictions[order[i]] > t.predictions[best]) best = order[i];
        }
        return best;
    }

    uint64_t* record() const { return t.record + int64_t(index) * kRecordWords; }

    void start_phase() {
        for (int s = 0; s < kSlabsetSlots; ++s) t.old[base + s] = 1;
        t.old_count[index] = kSlabsetSlots;
        t.lambda_shift[index] = 0;
        std::fill(record(), record() + kRecordWords, 0);
    }

    int64_t laru_victim(int64_t key) {
        if (t.old_count[index] == 0) start_phase();
        const uint32_t bit = record_bit_of(key);
        if (record()[bit / 64] >> (bit % 64) & 1) {  // a miss this phase's predictions caused
            t.lambda_shift[index] = std::min(t.lambda_shift[index] + 1, kMaxLambdaShift);
            return order[0];
        }
        const int window = std::max(kSlabsetSlots >> t.lambda_shift[index], 1);
        const int count = std::min(window, evictable);
        if (count == 1) return order[0];
        const int64_t victim = predicted_victim(count);
        const uint32_t victim_bit = record_bit_of(t.keys[victim]);
        record()[victim_bit / 64] |= uint64_t(1) << (victim_bit % 64);
        return victim;
    }

    // The slot to evict for `key`, or -1 when every slot is pinned by the batch.
    int64_t victim_for(int64_t key, int64_t clock) {
        sort_evictable(clock);
        if (evictable == 0) return -1;
        switch (t.policy) {
            case kLru: return order[0];
            case kFpb:
            case kLfu:   // -count: fewest requests, then LRU
            case kFifo:  // -(insertion stamp): the oldest insertion
                return predicted_victim(evictable);
            case kHf: return predicted_victim(std::min(t.hf_window, evictable));
            default: return laru_victim(key);
        }
    }
};

// The engine functions below have the signatures of lcr._cuda's (csrc/cuda/slab_cache_py.cpp;
// the meaning of each argument is in csrc/common/slab_kernels.h), so lcr.embedding.cache
// drives every engine the same way; stream and device are ignored here.

void slab_probe(const py::tuple& view, uintptr_t keys_ptr, int64_t n, uintptr_t slot_of_ptr, uintptr_t readback_ptr,
                uintptr_t, int) {
    namespace k = slab_kernels;
    const SlabTable t = slab_table_from(view);
    const int64_t* keys = data_at<int64_t>(keys_ptr);
    int64_t* slot_of = data_at<int64_t>(slot_of_ptr);
    int64_t* readback = data_at<int64_t>(readback_ptr);
    py::gil_scoped_release release;
    readback[k::kMissCount] = readback[k::kBadKey] = 0;
    for (int64_t p = 0; p < n; ++p) {
        if (keys[p] < 0) {
            slot_of[p] = -1;
            readback[k::kBadKey] = 1;
            continue;
        }
        slot_of[p] = find_slot(t, keys[p]);
        if (slot_of[p] >= 0) continue;
        const int64_t entry = readback[k::kMissCount]++;
        readback[k::kMissEntries + 2 * entry] = p;
        readback[k::kMissEntries + 2 * entry + 1] = keys[p];
    }
}

// Lookups in batch order: the first lookup of each hit key stamps it clock + position.
void slab_refresh(const py::tuple& view, uintptr_t slot_of_ptr, int64_t n, int64_t clock, uintptr_t hit_count_ptr,
                  uintptr_t, int) {
    const SlabTable t = slab_table_from(view);
    const int64_t* slot_of = data_at<int64_t>(slot_of_ptr);
    int64_t* hit_count = data_at<int64_t>(hit_count_ptr);
    py::gil_scoped_release release;
    for (int64_t p = 0; p < n; ++p) {
        const int64_t slot = slot_of[p];
        if (slot < 0 || t.stamps[slot] >= clock) continue;
        t.stamps[slot] = clock + p;
        *hit_count += 1;
        count_request(t, slot);
        if (t.old[slot]) {
            t.old[slot] = 0;
            t.old_count[slot / kSlabsetSlots] -= 1;
        }
    }
}

// The batch's distinct missing keys, slabset group by slabset group, each in batch order.
void slab_insert_groups(const py::tuple& view, uintptr_t keys_ptr, uintptr_t first_ptr, uintptr_t members_ptr,
                        uintptr_t starts_ptr, int64_t groups, int64_t clock, int64_t stamp_base, uintptr_t slots_ptr,
                        uintptr_t evicted_ptr, uintptr_t, int) {
    const SlabTable t = slab_table_from(view);
    const int64_t* keys = data_at<int64_t>(keys_ptr);
    const int64_t* first = data_at<int64_t>(first_ptr);
    const int64_t* members = data_at<int64_t>(members_ptr);
    const int64_t* starts = data_at<int64_t>(starts_ptr);
    int64_t* slots = data_at<int64_t>(slots_ptr);
    int64_t* evicted = data_at<int64_t>(evicted_ptr);
    py::gil_scoped_release release;
    for (int64_t m = 0; m < (groups ? starts[groups] : 0); ++m) {
        const int64_t i = members[m];
        evicted[i] = kEmptyKey;
        Slabset set(t, slabset_of(keys[i], t.num_slabsets));
        int64_t slot = set.free_slot();
        if (slot < 0) {
            slot = set.victim_for(keys[i], clock);
            slots[i] = slot;
            if (slot < 0) continue;  // bypassed: served from the store only
            evicted[i] = t.keys[slot];
            if (t.old[slot]) {
                t.old[slot] = 0;
                t.old_count[set.index] -= 1;
            }
        }
        t.keys[slot] = keys[i];
        t.tags[slot] = tag_of(keys[i]);
        t.stamps[slot] = stamp_base + first[i];
        t.predictions[slot] = fresh_prediction(t, t.stamps[slot]);
        slots[i] = slot;
    }
}

void slab_set_predictions(const py::tuple& view, uintptr_t keys_ptr, uintptr_t values_ptr, int64_t n, uintptr_t,
                          int) {
    const SlabTable t = slab_table_from(view);
    const int64_t* keys = data_at<int64_t>(keys_ptr);
    const double* values = data_at<double>(values_ptr);
    py::gil_scoped_release release;
    if (!slab_kernels::takes_predictions(t)) return;  // LFU, FIFO: the slots hold their own order
    for (int64_t i = 0; i < n; ++i) {
        const int64_t slot = find_slot(t, keys[i]);
        if (slot >= 0) t.predictions[slot] = std::isnan(values[i]) ? kUnknown : values[i];
    }
}

}  // namespace

void register_slab_cache(py::module_& m) {
    def_slab_engine(m, &slab_probe, &slab_refresh, &slab_insert_groups, &slab_set_predictions);
}

}  // namespace lcr
