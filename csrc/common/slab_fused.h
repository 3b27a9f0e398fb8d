// The fused SparseLengthsSum of SlabHashCache over a backing table the device can read
// (a HostStore's table in pinned host memory, read through unified addressing on a GPU),
// written once against a Warp (csrc/common/warp.h) like slab_kernels.h: nvcc compiles it
// into csrc/cuda/slab_cache.cu, the host build runs it on the warp model
// (csrc/cpu/slab_warp_model.cpp). Two kernels per batch, no host round trip:
//
// 1. pool_bag, a warp per bag. Its lanes probe the bag's lookups 32 at a time (find_slot),
//    refresh each hit with the first-touch rule (refresh_slot: the stamp, LFU's count) and
//    list each miss (position, key) on its slabset's list; then the warp sums the bag's
//    rows, a hit's from the cache's rows, a miss's straight from the backing table, in wide
//    pieces (several lookups at once when a row is narrower than 32 pieces). A missed row is
//    also kept in a staging row on the device (while they last), so that host memory is
//    read once per missed lookup.
// 2. insert_misses, a warp per slabset with misses (grid-stride over the device-side count
//    of such slabsets, so the launch is sized without reading it). The warp gathers its
//    slabset's list, sorts it by (key, position), keeps each key's first lookup, sorts
//    those by position and inserts them one by one with insert_key, exactly the two-step
//    path's insert_group, copying each inserted key's row into its slot (from its staging
//    row, or from the table when the staging rows ran out).
//
// Every step's work is proportional to the lookups or to the misses; nothing has a size
// that only the device knows, so the host queues the batch and returns. The lists live in
// per-cache arrays (head/count per slabset) that the insert leaves empty for the next batch.
// Semantics (the spec is lcr.embedding.reference): docs/embedding.md.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/slab_kernels.h"

namespace lcr {
namespace slab_fused {

using slab_kernels::find_slot;
using slab_kernels::insert_key;
using slab_kernels::Inserted;
using slab_kernels::refresh_slot;

enum RowDtype : int32_t { kFloat32 = 0, kFloat16 = 1 };

// where[p] of lookup p: its slot (>= 0) on a hit, ~e on a miss listed as entry e (below
// the lookups), kBadLookup when the key is outside [0, table_rows) (summed as zeros, never
// cached; the caller refuses the batch).
constexpr int64_t kBadLookup = INT64_MIN;

// The batch's counters, zeroed by the host before pool_bag.
constexpr int kEntryCount = 0;    // misses listed
constexpr int kTouchedCount = 1;  // slabsets with a miss
constexpr int kRegionCursor = 2;  // list entries gathered into sort regions
// Then the facts lcr.embedding.sls's argument rules read (kFacts of them, in this order),
// gathered while the batch is served so that checking a batch on a GPU launches nothing
// of its own; 0 where nothing was seen.
constexpr int kLowestBadKey = 3;   // the most negative lookup
constexpr int kHighestBadKey = 4;  // the largest lookup at or past table_rows
constexpr int kOffsetFalls = 5;    // bags whose next offset lies below their own
constexpr int kFirstOffset = 6;    // offsets[0]
constexpr int kLastOffset = 7;     // offsets[num_offsets - 1]
constexpr int kFacts = 5;
constexpr int kCounters = 8;

struct MissEntry {
    int64_t pos;
    int64_t key;
};

// One batch: pointers are device-readable (host pointers on the warp model).
struct FusedBatch {
    const int64_t* lookups;  // [n] keys, in batch order
    int64_t n;
    const int64_t* offsets;  // [num_offsets] bag starts; bag b ends at offsets[b + 1], the last at n
    int64_t num_offsets;     // bags, or bags + 1 (include_last_offset: the last ends at offsets[bags])
    int64_t bags;
    int64_t clock;           // the cache's clock at the start of the batch
    void* rows;              // the cache's rows, by slot: hits read here, inserted rows written here
    const void* table;       // [table_rows] rows of the backing table, same dtype and width
    int64_t table_rows;
    int64_t row_bytes;
    int32_t dtype;           // RowDtype of rows, table and out
    void* out;               // [bags] pooled rows
    int64_t* hits;           // [1] distinct hits, summed over batches
    int64_t* misses;         // [1] distinct missing keys, summed
    int64_t* bypassed;       // [1] distinct missing keys not cached, summed
    int64_t* counters;       // [kCounters]
    int64_t* where;          // [n]
    MissEntry* entries;      // [n] the misses, in no order
    int64_t* next;           // [n] next entry of the same slabset's list, -1 at its end
    int64_t* touched;        // [min(n, slabsets)] slabsets with a miss, in no order
    int64_t* head;           // [slabsets] first entry of each slabset's list; -1 between batches
    int64_t* count;          // [slabsets] entries on each list; 0 between batches
    MissEntry* region;       // [n] where each slabset's entries are sorted
    MissEntry* spare;        // [n] the sort's second buffer
    void* staged;            // [staged_rows] the row of miss entry e, for e < staged_rows
    int64_t staged_rows;
};

LCR_WARP_FN int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
LCR_WARP_FN int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- rows as pieces of 2, 4, 8 or 16 bytes ----------------------------------------------

template <int Bytes>
struct alignas(Bytes) Piece {
    uint32_t w[Bytes / 4];
};
template <>
struct alignas(2) Piece<2> {
    uint16_t h;
};

template <int Bytes>
LCR_WARP_FN Piece<Bytes> load_piece(const void* base, int64_t index) {
#if defined(__CUDA_ARCH__)
    if constexpr (Bytes == 16) {  // one 128-bit load
        const uint4 v = static_cast<const uint4*>(base)[index];
        return Piece<16>{{v.x, v.y, v.z, v.w}};
    } else if constexpr (Bytes == 8) {
        const uint2 v = static_cast<const uint2*>(base)[index];
        return Piece<8>{{v.x, v.y}};
    } else {
        return static_cast<const Piece<Bytes>*>(base)[index];
    }
#else
    Piece<Bytes> piece;
    std::memcpy(&piece, static_cast<const char*>(base) + index * Bytes, Bytes);
    return piece;
#endif
}

template <int Bytes>
LCR_WARP_FN void store_piece(void* base, int64_t index, const Piece<Bytes>& piece) {
#if defined(__CUDA_ARCH__)
    if constexpr (Bytes == 16) {
        static_cast<uint4*>(base)[index] = make_uint4(piece.w[0], piece.w[1], piece.w[2], piece.w[3]);
    } else if constexpr (Bytes == 8) {
        static_cast<uint2*>(base)[index] = make_uint2(piece.w[0], piece.w[1]);
    } else {
        static_cast<Piece<Bytes>*>(base)[index] = piece;
    }
#else
    std::memcpy(static_cast<char*>(base) + index * Bytes, &piece, Bytes);
#endif
}

LCR_WARP_FN float float_of_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
#endif
}

LCR_WARP_FN uint32_t bits_of_float(float value) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(value);
#else
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
#endif
}

// IEEE half <-> float: the GPU's conversion instructions, and the same functions in
// software on the host (round to nearest even, as torch converts).
LCR_WARP_FN float float_of_half(uint16_t half) {
#if defined(__CUDA_ARCH__)
    float value;
    asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(half));
    return value;
#else
    const uint32_t sign = uint32_t(half & 0x8000u) << 16, exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
        const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 0x1f) return float_of_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, nan
    return float_of_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
#endif
}

LCR_WARP_FN uint16_t half_of_float(float value) {
#if defined(__CUDA_ARCH__)
    uint16_t half;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(half) : "f"(value));
    return half;
#else
    const uint32_t bits = bits_of_float(value);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // nan
    if (magnitude >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to 65520 or more: inf
    if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, mantissa = value * 2^24 rounded
        return uint16_t(sign | uint16_t(std::nearbyint(std::fabs(value) * 16777216.0f)));
    }
    // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to 10, ties to even.
    const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
#endif
}

struct F32 {
    static constexpr int kBytes = 4;
};
struct F16 {
    static constexpr int kBytes = 2;
};

// Elements of a piece as floats: add a piece into float accumulators, pack them back.
template <class E, int Bytes>
struct RowFormat;

template <int Bytes>
struct RowFormat<F32, Bytes> {
    static constexpr int kElems = Bytes / 4;
    static LCR_WARP_FN void add(float* acc, const Piece<Bytes>& piece) {
        for (int i = 0; i < kElems; ++i) acc[i] += float_of_bits(piece.w[i]);
    }
    static LCR_WARP_FN Piece<Bytes> pack(const float* acc) {
        Piece<Bytes> piece;
        for (int i = 0; i < kElems; ++i) piece.w[i] = bits_of_float(acc[i]);
        return piece;
    }
};

template <int Bytes>
struct RowFormat<F16, Bytes> {  // two halves per word, the lower one first (little-endian)
    static constexpr int kElems = Bytes / 2;
    static LCR_WARP_FN void add(float* acc, const Piece<Bytes>& piece) {
        for (int i = 0; i < kElems / 2; ++i) {
            acc[2 * i] += float_of_half(uint16_t(piece.w[i] & 0xffffu));
            acc[2 * i + 1] += float_of_half(uint16_t(piece.w[i] >> 16));
        }
    }
    static LCR_WARP_FN Piece<Bytes> pack(const float* acc) {
        Piece<Bytes> piece;
        for (int i = 0; i < kElems / 2; ++i)
            piece.w[i] = uint32_t(half_of_float(acc[2 * i])) | (uint32_t(half_of_float(acc[2 * i + 1])) << 16);
        return piece;
    }
};

template <>
struct RowFormat<F16, 2> {
    static constexpr int kElems = 1;
    static LCR_WARP_FN void add(float* acc, const Piece<2>& piece) { acc[0] += float_of_half(piece.h); }
    static LCR_WARP_FN Piece<2> pack(const float* acc) { return Piece<2>{half_of_float(acc[0])}; }
};

LCR_WARP_FN const void* row_at(const void* base, int64_t index, int64_t row_bytes) {
    return static_cast<const char*>(base) + index * row_bytes;
}

LCR_WARP_FN void* row_at(void* base, int64_t index, int64_t row_bytes) {
    return static_cast<char*>(base) + index * row_bytes;
}

// Lanes that read one row together: its pieces up to 32, rounded up to a power of two, so
// that a warp sums 32 / group lookups at once when rows are narrow.
LCR_WARP_FN int lanes_per_row(int64_t pieces) {
    int group = 1;
    while (group < kWarpLanes && group < pieces) group *= 2;
    return group;
}

// ---- kernel 1: probe, refresh, list the misses, pool ------------------------------------

// *p = max(*p, v), or min with kMin, by compare-and-swap (both engines have it).
template <class W, bool kMin>
LCR_WARP_FN void atomic_extreme(W& w, int64_t* p, int64_t v) {
    int64_t seen = *p;  // a stale read only costs a retry: the swap decides
    while (kMin ? v < seen : v > seen) {
        const int64_t before = w.atomic_cas(p, seen, v);
        if (before == seen) return;
        seen = before;
    }
}

// A lookup outside [0, table_rows): served as zeros, and one of the batch's facts.
template <class W>
LCR_WARP_FN void note_bad_key(W& w, const FusedBatch& b, int64_t key) {
    if (key < 0) atomic_extreme<W, true>(w, &b.counters[kLowestBadKey], key);
    else atomic_extreme<W, false>(w, &b.counters[kHighestBadKey], key);
}

// The offsets' facts, by the lane 0 of each bag's warp.
LCR_WARP_FN bool offsets_fall_after(const FusedBatch& b, int64_t bag) {
    return bag + 1 < b.num_offsets && b.offsets[bag + 1] < b.offsets[bag];
}

// Bag `bag` covers lookups [start, end), clamped into [0, n] and never reversed, so that
// offsets nobody checked yet cannot send a warp outside the batch. Such offsets can make
// bags overlap (0, 3, 2: [0, 3) and [2, 3)); probe_chunk then lists no more than n misses.
LCR_WARP_FN void bag_bounds(const FusedBatch& b, int64_t bag, int64_t* start, int64_t* end) {
    const int64_t first = b.offsets[bag];
    const int64_t last = bag + 1 < b.num_offsets ? b.offsets[bag + 1] : b.n;
    *start = min64(max64(first, 0), b.n);
    *end = min64(max64(last, *start), b.n);
}

// Put miss entry e (lookup p of `key`) on its slabset's list; the batch's first miss of a
// slabset also lists the slabset as touched.
template <class W>
LCR_WARP_FN void list_miss(W& w, const SlabTable& t, const FusedBatch& b, int64_t e, int64_t p, int64_t key) {
    b.entries[e] = MissEntry{p, key};
    const uint32_t index = slabset_of(key, t.num_slabsets);
    if (w.atomic_add(&b.count[index], int64_t(1)) == 0)
        b.touched[w.atomic_add(&b.counters[kTouchedCount], int64_t(1))] = index;
    int64_t head = b.head[index];
    while (true) {  // push e: its link is written before the CAS publishes it
        b.next[e] = head;
        const int64_t before = w.atomic_cas(&b.head[index], head, e);
        if (before == head) return;
        head = before;
    }
}

// Lookups [c, c + 32) of a bag ending at `end`, one per lane (lanes past the end join the
// collectives only). Distinct hits are counted with one atomic per warp, and a warp
// reserves room for all its misses with one atomic, as probe_lookup does.
template <class W>
LCR_WARP_FN void probe_chunk(W& w, const SlabTable& t, const FusedBatch& b, int64_t c, int64_t end) {
    const int lane = w.lane();
    const int64_t p = c + lane;
    int64_t key = -1, where = kBadLookup;
    bool missed = false, first_touch = false;
    if (p < end) {
        key = b.lookups[p];
        if (key >= 0 && key < b.table_rows) {
            where = find_slot(t, key);
            if (where >= 0) first_touch = refresh_slot(w, t, where, p, b.clock);
            missed = where < 0;
        } else {
            note_bad_key(w, b, key);
        }
    }
    const unsigned touches = w.ballot(first_touch);
    const unsigned misses = w.ballot(missed);
    if (lane == 0 && touches) w.atomic_add(b.hits, int64_t(lane_count(touches)));
    if (misses) {  // warp-uniform
        const int leader = lowest_lane(misses);
        int64_t first = 0;
        if (lane == leader) first = w.atomic_add(&b.counters[kEntryCount], int64_t(lane_count(misses)));
        first = w.shfl(first, leader);
        const int64_t e = first + lane_count(misses & ((1u << lane) - 1u));
        if (missed && e < b.n) {  // more misses than lookups: bags overlap (offsets not yet
            list_miss(w, t, b, e, p, key);  // checked), and the scratch holds n entries
            where = ~e;
        }
    }
    if (p < end) b.where[p] = where;  // after the collectives: the caller's sync publishes it
}

// The bag's sum, piece by piece: lane l reads piece (window + l % group) of lookups
// start + l / group, start + l / group + 32 / group, ..., then the groups add up by
// shuffles and the first group writes the window. Hits first, in a loop of loads only
// (several in flight), then misses, whose pieces also go to their staging rows.
template <class W, class E, int Bytes>
LCR_WARP_FN void pool_rows(W& w, const FusedBatch& b, int64_t bag, int64_t start, int64_t end) {
    using Format = RowFormat<E, Bytes>;
    const int lane = w.lane();
    const int64_t pieces = b.row_bytes / Bytes;
    const int group = lanes_per_row(pieces);
    const int64_t stride = kWarpLanes / group;
    for (int64_t window = 0; window < pieces; window += group) {
        const int64_t piece = window + lane % group;
        float acc[Format::kElems] = {};
        if (piece < pieces) {
#if defined(__CUDA_ARCH__)
#pragma unroll 4
#endif
            for (int64_t q = start + lane / group; q < end; q += stride) {
                const int64_t where = b.where[q];
                if (where >= 0) Format::add(acc, load_piece<Bytes>(row_at(b.rows, where, b.row_bytes), piece));
            }
            for (int64_t q = start + lane / group; q < end; q += stride) {
                const int64_t where = b.where[q];
                if (where >= 0 || where == kBadLookup) continue;
                const int64_t e = ~where;
                const Piece<Bytes> value = load_piece<Bytes>(row_at(b.table, b.entries[e].key, b.row_bytes), piece);
                Format::add(acc, value);
                if (e < b.staged_rows) store_piece<Bytes>(row_at(b.staged, e, b.row_bytes), piece, value);
            }
        }
        for (int offset = group; offset < kWarpLanes; offset *= 2)
            for (int i = 0; i < Format::kElems; ++i) acc[i] += w.shfl_xor(acc[i], offset);
        if (lane < group && piece < pieces) store_piece<Bytes>(b.out, bag * pieces + piece, Format::pack(acc));
    }
}

template <class W, class E, int Bytes>
LCR_WARP_FN void pool_bag(W& w, const SlabTable& t, const FusedBatch& b, int64_t bag) {
    int64_t start, end;
    bag_bounds(b, bag, &start, &end);
    if (w.lane() == 0) {
        if (offsets_fall_after(b, bag)) w.atomic_add(&b.counters[kOffsetFalls], int64_t(1));
        if (bag == 0) {
            b.counters[kFirstOffset] = b.offsets[0];
            b.counters[kLastOffset] = b.offsets[b.num_offsets - 1];
        }
    }
    for (int64_t c = start; c < end; c += kWarpLanes) probe_chunk(w, t, b, c, end);
    w.sync();  // every lane's where[] of the bag is written before any lane reads it
    pool_rows<W, E, Bytes>(w, b, bag, start, end);
}

// ---- kernel 2: the misses of one slabset, deduplicated, in batch order, inserted -------

struct ByKeyThenPosition {
    LCR_WARP_FN bool operator()(const MissEntry& a, const MissEntry& c) const {
        return a.key != c.key ? a.key < c.key : a.pos < c.pos;
    }
};
struct ByPosition {
    LCR_WARP_FN bool operator()(const MissEntry& a, const MissEntry& c) const { return a.pos < c.pos; }
};

// Sort a[0, m) with one warp (bottom-up merge sort, a and b swapping roles each pass);
// returns the buffer holding the result. Each pass, lane l writes the l-th 32nd of the
// output: it finds where its share starts in each merge by a binary search on the merge
// path, then merges sequentially. Entries never compare equal (positions are distinct).
template <class W, class Less>
LCR_WARP_FN MissEntry* warp_sort(W& w, MissEntry* a, MissEntry* b, int64_t m, Less less) {
    const int64_t share = (m + kWarpLanes - 1) / kWarpLanes;
    for (int64_t width = 1; width < m; width *= 2) {
        int64_t o = min64(w.lane() * share, m);
        const int64_t stop = min64(o + share, m);
        while (o < stop) {
            const int64_t lo = o / (2 * width) * (2 * width);
            const int64_t mid = min64(lo + width, m), hi = min64(lo + 2 * width, m);
            const int64_t k = o - lo;  // outputs of this merge before o: i from [lo, mid), k - i from [mid, hi)
            int64_t i_lo = max64(0, k - (hi - mid)), i_hi = min64(k, mid - lo);
            while (i_lo < i_hi) {
                const int64_t i = (i_lo + i_hi) / 2;
                if (less(a[mid + k - i - 1], a[lo + i])) i_hi = i;
                else i_lo = i + 1;
            }
            int64_t x = lo + i_lo, y = mid + (k - i_lo);
            for (const int64_t until = min64(stop, hi); o < until; ++o)
                b[o] = y >= hi || (x < mid && less(a[x], a[y])) ? a[x++] : a[y++];
        }
        w.sync();  // the pass is written before the next one reads it
        MissEntry* swap = a;
        a = b;
        b = swap;
    }
    return a;
}

// From entries sorted by (key, position): each key's first lookup, in that order, into
// out; returns how many distinct keys.
template <class W>
LCR_WARP_FN int64_t first_lookups(W& w, const MissEntry* sorted, MissEntry* out, int64_t m) {
    const int lane = w.lane();
    int64_t distinct = 0;
    for (int64_t c = 0; c < m; c += kWarpLanes) {
        const int64_t i = c + lane;
        const bool first = i < m && (i == 0 || sorted[i - 1].key != sorted[i].key);
        const unsigned firsts = w.ballot(first);
        if (first) out[distinct + lane_count(firsts & ((1u << lane) - 1u))] = sorted[i];
        distinct += lane_count(firsts);
    }
    w.sync();  // out is written before the caller reads it
    return distinct;
}

// The row of `miss` (a key's first lookup) into `slot`: from the staging row pool_rows
// left for its entry, or from the table past the staging rows.
template <class W, int Bytes>
LCR_WARP_FN void copy_row(W& w, const FusedBatch& b, const MissEntry& miss, int64_t slot) {
    const int64_t pieces = b.row_bytes / Bytes;
    const int64_t e = ~b.where[miss.pos];
    const void* from = e < b.staged_rows ? row_at(b.staged, e, b.row_bytes) : row_at(b.table, miss.key, b.row_bytes);
    void* to = row_at(b.rows, slot, b.row_bytes);
    for (int64_t piece = w.lane(); piece < pieces; piece += kWarpLanes)
        store_piece<Bytes>(to, piece, load_piece<Bytes>(from, piece));
}

// Slabset `index`'s misses: gather its list into a region of its own, keep each key's
// first lookup, insert those in batch order (stamp clock + n + first position), copy the
// inserted rows, count, and leave the slabset's list empty for the next batch.
template <class W, int Bytes>
LCR_WARP_FN void insert_slabset(W& w, const SlabTable& t, const FusedBatch& b, int64_t index) {
    const int lane = w.lane();
    const int64_t m = b.count[index];
    int64_t base = 0;
    if (lane == 0) base = w.atomic_add(&b.counters[kRegionCursor], m);
    base = w.shfl(base, 0);
    MissEntry* region = b.region + base;
    MissEntry* spare = b.spare + base;
    if (lane == 0) {
        int64_t e = b.head[index];
        for (int64_t k = 0; k < m; ++k, e = b.next[e]) region[k] = b.entries[e];
    }
    w.sync();  // the region is written before the sort reads it
    MissEntry* by_key = warp_sort(w, region, spare, m, ByKeyThenPosition{});
    MissEntry* firsts = by_key == region ? spare : region;
    const int64_t distinct = first_lookups(w, by_key, firsts, m);
    const MissEntry* ordered = warp_sort(w, firsts, by_key, distinct, ByPosition{});
    int64_t bypassed = 0;
    for (int64_t k = 0; k < distinct; ++k) {
        const MissEntry miss = ordered[k];
        const Inserted done = insert_key(w, t, miss.key, b.clock + b.n + miss.pos, b.clock);
        if (done.slot >= 0) copy_row<W, Bytes>(w, b, miss, done.slot);
        else ++bypassed;
    }
    if (lane == 0) {
        w.atomic_add(b.misses, distinct);
        if (bypassed) w.atomic_add(b.bypassed, bypassed);
        b.head[index] = -1;
        b.count[index] = 0;
    }
}

// Warp `warp` of `warps`: every warps-th slabset with a miss (the count is the device's).
template <class W, int Bytes>
LCR_WARP_FN void insert_misses(W& w, const SlabTable& t, const FusedBatch& b, int64_t warp, int64_t warps) {
    const int64_t touched = b.counters[kTouchedCount];
    for (int64_t g = warp; g < touched; g += warps) insert_slabset<W, Bytes>(w, t, b, b.touched[g]);
}

// ---- host side: the launch shape ---------------------------------------------------------

// The widest piece (16, 8, 4 or 2 bytes, not below an element) that divides the row and
// keeps every row of rows, table, out and the staging rows aligned.
inline int piece_bytes(const FusedBatch& b) {
    const int element = b.dtype == kFloat16 ? 2 : 4;
    for (int size = 16; size > element; size /= 2) {
        const bool aligned = reinterpret_cast<uintptr_t>(b.rows) % size == 0 &&
                             reinterpret_cast<uintptr_t>(b.table) % size == 0 &&
                             reinterpret_cast<uintptr_t>(b.out) % size == 0 &&
                             reinterpret_cast<uintptr_t>(b.staged) % size == 0;
        if (b.row_bytes % size == 0 && aligned) return size;
    }
    return element;
}

template <int N>
struct PieceBytes {
    static constexpr int value = N;
};

// Calls run(E{}, PieceBytes<piece>{}) for the batch's dtype and piece width; returns its result.
template <class Run>
auto with_row_format(const FusedBatch& b, int piece, Run&& run) {
    if (b.dtype == kFloat32) {
        if (piece == 16) return run(F32{}, PieceBytes<16>{});
        if (piece == 8) return run(F32{}, PieceBytes<8>{});
        return run(F32{}, PieceBytes<4>{});
    }
    if (piece == 16) return run(F16{}, PieceBytes<16>{});
    if (piece == 8) return run(F16{}, PieceBytes<8>{});
    if (piece == 4) return run(F16{}, PieceBytes<4>{});
    return run(F16{}, PieceBytes<2>{});
}

// Warps the insert needs at most: one per slabset that can have a miss.
inline int64_t touched_capacity(int64_t n, uint32_t num_slabsets) { return n < num_slabsets ? n : int64_t(num_slabsets); }

}  // namespace slab_fused
}  // namespace lcr
