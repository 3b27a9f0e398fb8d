// Cached items in recency order, each with an eviction rank, answering "the item
// with the largest rank among the l least recently used" in O(log capacity).
//
// Every touch gives an item the next free position (a logical timestamp), so
// positions sort items oldest first. A segment tree over positions keeps, per
// subtree, the number of items and the largest rank. A query descends once to the
// l-th oldest item by counts, passing by left subtrees that together hold exactly
// the items older than it; a second descent finds the oldest item with the largest
// rank among them. When the positions run out, the live items are compacted to the
// front: with room for twice the capacity this costs O(1) amortized per touch.
//
// Ranks are stored as order-preserving unsigned integers (0 marks an empty slot),
// so that updates are branch-free max/add passes up the tree.
//
// A tree made `with_ties` also keeps a second rank per item and, per subtree, the
// largest second rank among the items holding the subtree's largest rank (the
// lexicographic maximum of the pairs), so that ties on the rank can be broken by it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace lcr::sim {

class RecencyTree {
public:
    // `capacity`: the most items held at once; `n_ids`: ids lie in [0, n_ids).
    RecencyTree(int64_t capacity, int64_t n_ids, bool with_ties = false)
        : with_ties_(with_ties), pos_of_(n_ids, kAbsent) {
        const int64_t most = std::max<int64_t>(1, std::min(capacity, n_ids));
        while (leaves_ < 2 * most) leaves_ *= 2;
        best_.assign(2 * leaves_, kEmpty);
        count_.assign(2 * leaves_, 0);
        if (with_ties_) tie_.assign(2 * leaves_, kEmpty);
        item_at_.assign(leaves_, kAbsent);
    }

    bool contains(int32_t id) const { return pos_of_[id] != kAbsent; }
    int64_t size() const { return count_[1]; }

    // Insert `id` (absent) as the most recently used item. `rank` (and `tie`, the second
    // rank of a tree made with ties) must not be NaN.
    void push_newest(int32_t id, double rank, double tie = 0.0) {
        if (next_pos_ == leaves_) compact();
        const auto pos = static_cast<int32_t>(next_pos_++);  // < leaves_ <= 2^31
        pos_of_[id] = pos;
        item_at_[pos] = id;
        set_leaf(pos, order_key(rank), 1, order_key(tie));
    }

    void remove(int32_t id) {
        const int32_t pos = pos_of_[id];
        pos_of_[id] = kAbsent;
        item_at_[pos] = kAbsent;
        set_leaf(pos, kEmpty, 0);
    }

    // Make `id` (present) the most recently used, with new ranks.
    void touch(int32_t id, double rank, double tie = 0.0) {
        remove(id);
        push_newest(id, rank, tie);
    }

    // Give `id` (present) a new rank, keeping its place in the recency order (and its
    // second rank).
    void rerank(int32_t id, double rank) {
        const int32_t pos = pos_of_[id];
        set_leaf(pos, order_key(rank), 1, with_ties_ ? tie_[leaves_ + pos] : kEmpty);
    }

    // Give `id` (present) a new second rank (a tree made with ties), keeping the rest.
    void rerank_tie(int32_t id, double tie) {
        const int32_t pos = pos_of_[id];
        set_leaf(pos, best_[leaves_ + pos], 1, order_key(tie));
    }

    int32_t oldest() const {
        int64_t i = 1;
        while (i < leaves_) i = count_[2 * i] ? 2 * i : 2 * i + 1;
        return item_at_[i - leaves_];
    }

    // Among the `l` least recently used items (1 <= l <= size()), the one with the
    // largest rank; on ties the least recently used of them.
    int32_t largest_among_oldest(int64_t l) const {
        if (l >= size()) return largest();
        int64_t passed[64];
        const int n_passed = subtrees_of_oldest(l, passed);
        uint64_t top = 0;
        for (int j = 0; j < n_passed; ++j) top = std::max(top, best_[passed[j]]);
        int j = 0;
        while (best_[passed[j]] != top) ++j;
        return item_at_[leftmost_with(passed[j], top) - leaves_];
    }

    // Among the `l` least recently used items (1 <= l <= size()) of a tree made with ties,
    // the one with the largest rank; on ties the largest second rank, then the least
    // recently used.
    int32_t largest_by_tie_among_oldest(int64_t l) const {
        int64_t passed[64];
        const int n_passed = l >= size() ? (passed[0] = 1, 1) : subtrees_of_oldest(l, passed);
        uint64_t top = 0, top_tie = 0;
        for (int j = 0; j < n_passed; ++j) {
            const int64_t n = passed[j];
            if (best_[n] > top || (best_[n] == top && tie_[n] > top_tie)) top = best_[n], top_tie = tie_[n];
        }
        int j = 0;
        while (best_[passed[j]] != top || tie_[passed[j]] != top_tie) ++j;
        int64_t i = passed[j];
        while (i < leaves_) i = best_[2 * i] == top && tie_[2 * i] == top_tie ? 2 * i : 2 * i + 1;
        return item_at_[i - leaves_];
    }

    // Whether `id`'s second rank is at least `tie`.
    bool tie_at_least(int32_t id, double tie) const { return tie_[leaves_ + pos_of_[id]] >= order_key(tie); }

    // The largest rank over all items (oldest on ties).
    int32_t largest() const { return item_at_[leftmost_with(1, best_[1]) - leaves_]; }

    // Calls f(id) for every item, oldest first.
    template <class F>
    void for_each(F&& f) const {
        for (int64_t pos = 0; pos < next_pos_; ++pos)
            if (item_at_[pos] != kAbsent) f(item_at_[pos]);
    }

private:
    static constexpr int32_t kAbsent = -1;
    static constexpr uint64_t kEmpty = 0;  // below the key of every double, -inf included

    // Maps doubles to integers in the same order (-0.0 and 0.0 to one key, as they
    // compare equal), all above kEmpty.
    static uint64_t order_key(double rank) {
        rank += 0.0;  // -0.0 -> 0.0
        uint64_t bits;
        std::memcpy(&bits, &rank, sizeof bits);
        return (bits >> 63) ? ~bits : bits | (uint64_t{1} << 63);
    }

    // The subtrees that hold exactly the `l` (< size()) least recently used items, oldest
    // first: a descent to the l-th oldest leaf, noting the left subtrees it passes.
    int subtrees_of_oldest(int64_t l, int64_t* passed) const {
        int n_passed = 0;
        int64_t i = 1;
        while (i < leaves_) {
            const int64_t left = 2 * i;
            if (count_[left] >= l) {
                i = left;
            } else {
                passed[n_passed++] = left;
                l -= count_[left];
                i = left + 1;
            }
        }
        passed[n_passed++] = i;
        return n_passed;
    }

    // The leftmost leaf under node `i` whose key is `key` (the subtree's largest).
    int64_t leftmost_with(int64_t i, uint64_t key) const {
        while (i < leaves_) i = best_[2 * i] == key ? 2 * i : 2 * i + 1;
        return i;
    }

    // Carries the node's new values up in registers: each level reads only the
    // sibling, which the previous store did not touch, so the loads pipeline.
    void set_leaf(int32_t pos, uint64_t key, int32_t count, uint64_t tie = kEmpty) {
        int64_t i = leaves_ + pos;
        best_[i] = key;
        count_[i] = count;
        if (with_ties_) {
            tie_[i] = tie;
            for (; i > 1; i >>= 1) {  // the lexicographic maximum of (rank, second rank)
                const uint64_t other = best_[i ^ 1], other_tie = tie_[i ^ 1];
                if (other > key || (other == key && other_tie > tie)) key = other, tie = other_tie;
                count += count_[i ^ 1];
                best_[i >> 1] = key;
                tie_[i >> 1] = tie;
                count_[i >> 1] = count;
            }
            return;
        }
        for (; i > 1; i >>= 1) {
            key = std::max(key, best_[i ^ 1]);
            count += count_[i ^ 1];
            best_[i >> 1] = key;
            count_[i >> 1] = count;
        }
    }

    // Slide the live items to positions 0..size-1, keeping their order.
    void compact() {
        int32_t next = 0;
        for (int64_t pos = 0; pos < next_pos_; ++pos) {
            const int32_t id = item_at_[pos];
            if (id == kAbsent) continue;
            const uint64_t key = best_[leaves_ + pos];
            item_at_[pos] = kAbsent;
            best_[leaves_ + pos] = kEmpty;
            count_[leaves_ + pos] = 0;
            item_at_[next] = id;
            best_[leaves_ + next] = key;
            count_[leaves_ + next] = 1;
            if (with_ties_) {
                const uint64_t tie = tie_[leaves_ + pos];
                tie_[leaves_ + pos] = kEmpty;
                tie_[leaves_ + next] = tie;
            }
            pos_of_[id] = next++;
        }
        next_pos_ = next;
        for (int64_t i = leaves_ - 1; i >= 1; --i) {
            const int64_t left = 2 * i, right = 2 * i + 1;
            const bool right_wins = best_[right] > best_[left] ||
                                    (with_ties_ && best_[right] == best_[left] && tie_[right] > tie_[left]);
            best_[i] = right_wins ? best_[right] : best_[left];
            if (with_ties_) tie_[i] = right_wins ? tie_[right] : tie_[left];
            count_[i] = count_[left] + count_[right];
        }
    }

    bool with_ties_;
    int64_t leaves_ = 1;
    int64_t next_pos_ = 0;
    std::vector<uint64_t> best_;    // largest rank key per node; node 1 is the root
    std::vector<uint64_t> tie_;     // with ties: the largest second rank among best_'s items
    std::vector<int32_t> count_;    // items per node; leaves at [leaves_, 2 * leaves_)
    std::vector<int32_t> pos_of_;   // id -> position, or kAbsent
    std::vector<int32_t> item_at_;  // position -> id, or kAbsent
};

}  // namespace lcr::sim
