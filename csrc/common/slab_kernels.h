// The SlabHashCache kernels' logic, written once against a Warp (csrc/common/warp.h).
// nvcc compiles it into the GPU kernels (csrc/cuda/slab_cache.cu, with CudaWarp); the CPU
// build compiles the very same functions against the host warp model (HostWarp,
// csrc/cpu/warp_model.h) so that CI replays the GPU's decisions lane by lane.
//
// A lookup is one thread's (find_slot: tags first, then the matching keys). An insertion
// is a warp's, which owns one slabset at a time: lane l holds slot l of slab 0 and slot l
// of slab 1, so a free slot is two coalesced loads and two ballots, and a victim is a
// warp reduction.
// LFU keeps each slot's request count in its prediction, negated (count_request), and FIFO
// its insertion stamp, negated, so that the victim search of FPB (largest prediction, then
// least recently used) over every evictable slot is their rule: LFU's fewest requests, then
// the key that reached its count first; FIFO's oldest insertion.
// Semantics (the spec is lcr.embedding.reference): docs/embedding.md. A batch of N
// lookups at clock c: a hit's stamp is c + (position of the key's first lookup), an
// inserted miss's is c + N + (its first position); the clock then moves to c + 2N.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/slab_table.h"
#include "common/warp.h"

namespace lcr {
namespace slab_kernels {

// Layout of the probe's read-back buffer, the one thing the host reads per batch.
constexpr int64_t kMissCount = 0;    // number of lookups that missed
constexpr int64_t kBadKey = 1;       // set when a key is negative
constexpr int64_t kMissEntries = 2;  // then (position, key) per missed lookup, unordered

// Eight tags as one little-endian word (tags of a slabset start 64-byte aligned).
LCR_WARP_FN uint64_t tag_word(const uint8_t* tags) {
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const uint64_t*>(tags);
#else
    uint64_t word;
    std::memcpy(&word, tags, sizeof word);  // no aliasing of the uint8 array
    return word;
#endif
}

// The slot holding `key`, or -1: one thread's probe. It compares the slabset's 64 tags
// (one 64-byte line, read as eight words at once) and reads only the keys whose tag
// matches, about 1.25 keys per probe. A thread per lookup keeps 32 times more lookups in
// flight than a warp per lookup, and a probe is a chain of dependent loads, so it is
// the number in flight that sets the pace (measured in docs/embedding.md).
LCR_WARP_FN int64_t find_slot(const SlabTable& t, int64_t key) {
    constexpr uint64_t kOnes = 0x0101010101010101ULL, kHighs = 0x8080808080808080ULL;
    constexpr int kWords = kSlabsetSlots / 8;
    const int64_t base = int64_t(slabset_of(key, t.num_slabsets)) * kSlabsetSlots;
    const uint64_t wanted = uint64_t(tag_of(key)) * kOnes;
    uint64_t differ[kWords];
    for (int i = 0; i < kWords; ++i) differ[i] = tag_word(t.tags + base + 8 * i) ^ wanted;  // loads first
    for (int i = 0; i < kWords; ++i) {
        // The high bit of every zero byte (a matching tag), and perhaps of a few others:
        // the key comparison weeds those out.
        for (uint64_t m = (differ[i] - kOnes) & ~differ[i] & kHighs; m; m &= m - 1) {
            const int64_t slot = base + 8 * i + lowest_bit64(m) / 8;
            if (t.keys[slot] == key) return slot;
        }
    }
    return -1;
}

// probe: one thread per lookup p (the last warp's spare lanes, p >= n, join only the
// collectives). Reads the table only. slot_of[p] = the slot serving lookup p, or -1 with
// (p, key) appended to the read-back list of misses; a warp reserves room for all its
// misses with one atomic, so a batch of misses does not queue on one counter.
template <class W>
LCR_WARP_FN void probe_lookup(W& w, const SlabTable& t, const int64_t* keys, int64_t n, int64_t p,
                              int64_t* slot_of, int64_t* readback) {
    bool missed = false;
    if (p < n) {
        const int64_t key = keys[p];
        const int64_t slot = key < 0 ? -1 : find_slot(t, key);
        slot_of[p] = slot;
        if (key < 0) readback[kBadKey] = 1;  // the host raises before anything changes
        missed = key >= 0 && slot < 0;
    }
    const unsigned misses = w.ballot(missed);
    if (misses == 0) return;  // warp-uniform
    const int leader = lowest_lane(misses);
    int64_t first = 0;
    if (w.lane() == leader) first = w.atomic_add(&readback[kMissCount], int64_t(lane_count(misses)));
    first = w.shfl(first, leader);
    if (missed) {
        const int64_t entry = first + lane_count(misses & ((1u << w.lane()) - 1u));
        readback[kMissEntries + 2 * entry] = p;
        readback[kMissEntries + 2 * entry + 1] = keys[p];
    }
}

// LFU and FIFO keep their own order in the predictions, which set_prediction then leaves
// alone. LFU: -count (one request per distinct key per batch): a slot starts at -1 and each
// batch's first touch of a hit subtracts 1. FIFO: -(stamp at insertion), which hits leave
// as it is; insertion stamps are distinct, so the largest is the slot inserted first.
// Other policies start unknown (+inf) and take the values set_prediction writes.
LCR_WARP_FN double fresh_prediction(const SlabTable& t, int64_t stamp) {
    if (t.policy == kLfu) return -1.0;
    if (t.policy == kFifo) return -double(stamp);  // exact below 2^53
    return INFINITY;
}

LCR_WARP_FN void count_request(const SlabTable& t, int64_t slot) {
    if (t.policy == kLfu) t.predictions[slot] -= 1.0;  // the one first-touching thread: no race
}

LCR_WARP_FN bool takes_predictions(const SlabTable& t) { return t.policy != kLfu && t.policy != kFifo; }

// refresh: one thread per lookup. The first lookup of a hit key (smallest position p)
// leaves stamp clock + p. Stamps only go down once they are >= clock, so exactly one
// thread lifts a slot's stamp over the clock: it alone does the LARU bookkeeping and
// counts the distinct hit. refresh_slot applies the rule to lookup p of `slot` and
// returns whether this lookup was that first touch (the fused SLS counts them per warp).
template <class W>
LCR_WARP_FN bool refresh_slot(W& w, const SlabTable& t, int64_t slot, int64_t p, int64_t clock) {
    const int64_t wanted = clock + p;
    int64_t seen = t.stamps[slot];
    while (seen < clock || seen > wanted) {
        const int64_t before = w.atomic_cas(&t.stamps[slot], seen, wanted);
        if (before == seen) {
            if (seen >= clock) return false;
            count_request(t, slot);  // this batch's first touch of the slot
            if (t.old[slot]) {
                t.old[slot] = 0;
                w.atomic_add(&t.old_count[slot / kSlabsetSlots], int32_t(-1));  // slabset shared
            }
            return true;
        }
        seen = before;
    }
    return false;
}

template <class W>
LCR_WARP_FN void refresh_lookup(W& w, const SlabTable& t, const int64_t* slot_of, int64_t p, int64_t clock,
                                int64_t* hit_count) {
    const int64_t slot = slot_of[p];
    if (slot >= 0 && refresh_slot(w, t, slot, p, clock)) w.atomic_add(hit_count, int64_t(1));
}

// set_prediction: one thread per key; keys must be distinct (the caller keeps the last
// value of a repeated key), since threads run in no particular order.
LCR_WARP_FN void set_prediction(const SlabTable& t, const int64_t* keys, const double* values, int64_t i) {
    if (!takes_predictions(t)) return;
    const int64_t slot = find_slot(t, keys[i]);
    const double value = values[i];
    if (slot >= 0) t.predictions[slot] = value != value ? INFINITY : value;  // NaN: unknown
}

// One candidate slot during a victim search, compared lexicographically: a larger
// prediction wins, then the older slot (smaller recency rank).
struct Candidate {
    double prediction;
    int rank;
    int64_t slot;
    bool valid;
};

LCR_WARP_FN bool better(const Candidate& a, const Candidate& b) {
    if (a.valid != b.valid) return a.valid;
    if (a.prediction != b.prediction) return a.prediction > b.prediction;
    return a.rank < b.rank;
}

template <class W>
LCR_WARP_FN Candidate warp_best(W& w, Candidate c) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        Candidate other;
        other.prediction = w.shfl_xor(c.prediction, offset);
        other.rank = w.shfl_xor(c.rank, offset);
        other.slot = w.shfl_xor(c.slot, offset);
        other.valid = w.shfl_xor(int(c.valid), offset) != 0;
        if (better(other, c)) c = other;
    }
    return c;
}

// A full slabset seen by one warp: per lane its two slots, their evictability and
// their rank among the evictable slots by stamp (0 = least recently used).
struct WarpSlabset {
    int64_t base;
    int64_t slot[2];
    bool evictable[2];
    int rank[2];
    int evictable_count;

    template <class W>
    LCR_WARP_FN WarpSlabset(W& w, const SlabTable& t, uint32_t index, int64_t clock) {
        const int lane = w.lane();
        base = int64_t(index) * kSlabsetSlots;
        slot[0] = base + lane;
        slot[1] = base + kSlabSlots + lane;
        const int64_t stamp0 = t.stamps[slot[0]], stamp1 = t.stamps[slot[1]];
        evictable[0] = stamp0 < clock;  // touched by this batch otherwise: pinned
        evictable[1] = stamp1 < clock;
        evictable_count = lane_count(w.ballot(evictable[0])) + lane_count(w.ballot(evictable[1]));
        rank[0] = rank[1] = 0;
        for (int src = 0; src < kWarpLanes; ++src) {
            const int64_t other0 = w.shfl(stamp0, src);
            const int64_t other1 = w.shfl(stamp1, src);
            const bool live0 = w.shfl(int(evictable[0]), src) != 0;
            const bool live1 = w.shfl(int(evictable[1]), src) != 0;
            rank[0] += (live0 && other0 < stamp0) + (live1 && other1 < stamp0);
            rank[1] += (live0 && other0 < stamp1) + (live1 && other1 < stamp1);
        }
    }

    // Among the `count` oldest evictable slots, the one with the largest prediction.
    template <class W>
    LCR_WARP_FN int64_t predicted_victim(W& w, const SlabTable& t, int count) const {
        Candidate best{0.0, 0, -1, false};
        for (int s = 0; s < 2; ++s) {
            const Candidate c{t.predictions[slot[s]], rank[s], slot[s], evictable[s] && rank[s] < count};
            if (better(c, best)) best = c;
        }
        return warp_best(w, best).slot;
    }

    template <class W>
    LCR_WARP_FN int64_t oldest(W& w) const {
        const unsigned at0 = w.ballot(evictable[0] && rank[0] == 0);
        const unsigned at1 = w.ballot(evictable[1] && rank[1] == 0);
        return at0 ? base + lowest_lane(at0) : base + kSlabSlots + lowest_lane(at1);
    }
};

LCR_WARP_FN bool record_has(const uint64_t* record, int64_t key) {
    const uint32_t bit = record_bit_of(key);
    return (record[bit / 64] >> (bit % 64)) & 1;
}

// LARU (Algorithm 1) inside one slabset; every lane returns the same victim.
template <class W>
LCR_WARP_FN int64_t laru_victim(W& w, const SlabTable& t, const WarpSlabset& set, uint32_t index, int64_t key) {
    const int lane = w.lane();
    uint64_t* record = t.record + int64_t(index) * kRecordWords;
    const bool new_phase = t.old_count[index] == 0;
    w.sync();  // every lane has read old_count before lane 0 rewrites it
    if (new_phase) {  // everything cached becomes old
        t.old[set.slot[0]] = 1;
        t.old[set.slot[1]] = 1;
        for (int word = lane; word < kRecordWords; word += kWarpLanes) record[word] = 0;
        if (lane == 0) {
            t.old_count[index] = kSlabsetSlots;
            t.lambda_shift[index] = 0;
        }
        w.sync();
    }
    const int shift = t.lambda_shift[index];
    if (record_has(record, key)) {  // a miss this phase's predictions caused: follow LRU
        w.sync();  // every lane has read lambda_shift before lane 0 raises it
        if (lane == 0) t.lambda_shift[index] = imin(shift + 1, kMaxLambdaShift);
        return set.oldest(w);
    }
    const int count = imin(imax(kSlabsetSlots >> shift, 1), set.evictable_count);
    if (count == 1) return set.oldest(w);
    const int64_t victim = set.predicted_victim(w, t, count);
    if (lane == 0) {
        const uint32_t bit = record_bit_of(t.keys[victim]);
        record[bit / 64] |= uint64_t(1) << (bit % 64);
    }
    return victim;
}

// What one insertion did: the slot taken (-1: bypassed, the slabset holds only pinned
// keys) and the key it evicted (kEmptyKey: none).
struct Inserted {
    int64_t slot;
    int64_t evicted;
};

// insert_key: one warp inserts one missing key into its slabset with recency `stamp`;
// every lane returns the same outcome. Keys of one slabset must be inserted in batch
// order, one after the other (the warp's second sync makes each see the last one's writes).
template <class W>
LCR_WARP_FN Inserted insert_key(W& w, const SlabTable& t, int64_t key, int64_t stamp, int64_t clock) {
    const int lane = w.lane();
    const uint32_t index = slabset_of(key, t.num_slabsets);
    const int64_t base = int64_t(index) * kSlabsetSlots;
    const unsigned free0 = w.ballot(t.keys[base + lane] == kEmptyKey);
    const unsigned free1 = w.ballot(t.keys[base + kSlabSlots + lane] == kEmptyKey);
    int64_t slot = -1, victim_key = kEmptyKey;
    if (free0 || free1) {
        slot = free0 ? base + lowest_lane(free0) : base + kSlabSlots + lowest_lane(free1);
    } else {
        const WarpSlabset set(w, t, index, clock);
        if (set.evictable_count > 0) {
            switch (t.policy) {
                case kLru: slot = set.oldest(w); break;
                case kFpb:
                case kLfu:
                case kFifo: slot = set.predicted_victim(w, t, set.evictable_count); break;
                case kHf: slot = set.predicted_victim(w, t, imin(t.hf_window, set.evictable_count)); break;
                default: slot = laru_victim(w, t, set, index, key); break;
            }
            victim_key = t.keys[slot];
        }
    }
    w.sync();  // every lane has read the slabset before lane 0 changes it
    if (lane == 0 && slot >= 0) {
        if (t.old[slot]) {
            t.old[slot] = 0;
            t.old_count[index] -= 1;
        }
        t.keys[slot] = key;
        t.tags[slot] = tag_of(key);
        t.stamps[slot] = stamp;
        t.predictions[slot] = fresh_prediction(t, stamp);
    }
    w.sync();  // the next miss of this slabset must see this one's writes
    return Inserted{slot, victim_key};
}

// insert_group: one warp per slabset group. members[starts[g] .. starts[g + 1]) index
// the batch's distinct missing keys of one slabset, in batch order; `first` holds each
// key's first position, so its stamp is stamp_base + first (stamp_base = clock + N).
template <class W>
LCR_WARP_FN void insert_group(W& w, const SlabTable& t, const int64_t* keys, const int64_t* first,
                              const int64_t* members, const int64_t* starts, int64_t g, int64_t clock,
                              int64_t stamp_base, int64_t* slots, int64_t* evicted) {
    for (int64_t m = starts[g]; m < starts[g + 1]; ++m) {
        const int64_t i = members[m];
        const Inserted done = insert_key(w, t, keys[i], stamp_base + first[i], clock);
        if (w.lane() == 0) {
            slots[i] = done.slot;  // -1: bypassed, served from the store only
            evicted[i] = done.evicted;
        }
    }
}

}  // namespace slab_kernels
}  // namespace lcr
