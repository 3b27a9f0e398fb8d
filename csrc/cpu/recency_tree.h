// Cached items in recency order, each with an eviction rank, answering "the item
// with the largest rank among the l least recently used" in O(log capacity).
//
// Every touch gives an item the next free position (a logical timestamp), so
// positions sort items oldest first. A segment tree over positions keeps, per
// subtree, the number of items and the largest rank with its leftmost (oldest)
// position. One descent finds the l-th oldest item by counts while folding in the
// left subtrees it passes, which are exactly the items older than it. When the
// positions run out, the live items are compacted to the front: with room for
// twice the capacity this costs O(1) amortized per touch.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace lcr::sim {

class RecencyTree {
public:
    // `capacity`: the most items held at once; `n_ids`: ids lie in [0, n_ids).
    RecencyTree(int64_t capacity, int64_t n_ids) : pos_of_(n_ids, kAbsent) {
        const int64_t most = std::max<int64_t>(1, std::min(capacity, n_ids));
        while (leaves_ < 2 * most) leaves_ *= 2;
        node_.assign(2 * leaves_, Node{});
        item_at_.assign(leaves_, kAbsent);
    }

    bool contains(int32_t id) const { return pos_of_[id] != kAbsent; }
    int64_t size() const { return node_[1].count; }

    // Insert `id` (absent) as the most recently used item.
    void push_newest(int32_t id, double rank) {
        if (next_pos_ == leaves_) compact();
        const int32_t pos = next_pos_++;
        pos_of_[id] = pos;
        item_at_[pos] = id;
        set_leaf(pos, Node{rank, 1, pos});
    }

    void remove(int32_t id) {
        const int32_t pos = pos_of_[id];
        pos_of_[id] = kAbsent;
        item_at_[pos] = kAbsent;
        set_leaf(pos, Node{});
    }

    // Make `id` (present) the most recently used, with a new rank.
    void touch(int32_t id, double rank) {
        remove(id);
        push_newest(id, rank);
    }

    int32_t oldest() const { return largest_among_oldest(1); }

    // Among the `l` least recently used items (1 <= l <= size()), the one with the
    // largest rank; on ties the least recently used of them.
    int32_t largest_among_oldest(int64_t l) const {
        Node acc{};
        int64_t i = 1;
        while (i < leaves_) {
            const Node& left = node_[2 * i];
            if (left.count >= l) {
                i = 2 * i;
            } else {
                acc = join(acc, left);
                l -= left.count;
                i = 2 * i + 1;
            }
        }
        return item_at_[join(acc, node_[i]).pos];
    }

    // The largest rank over all items (oldest on ties).
    int32_t largest() const { return item_at_[node_[1].pos]; }

    // Calls f(id) for every item, oldest first.
    template <class F>
    void for_each(F&& f) const {
        for (int32_t pos = 0; pos < next_pos_; ++pos)
            if (item_at_[pos] != kAbsent) f(item_at_[pos]);
    }

private:
    static constexpr int32_t kAbsent = -1;

    struct Node {
        double best = -std::numeric_limits<double>::infinity();  // meaningless when count == 0
        int32_t count = 0;
        int32_t pos = kAbsent;  // position of `best`, the oldest one on ties
    };

    // `a` covers older positions than `b`, so it wins ties.
    static Node join(const Node& a, const Node& b) {
        const bool take_b = a.count == 0 || (b.count != 0 && b.best > a.best);
        const Node& w = take_b ? b : a;
        return Node{w.best, a.count + b.count, w.pos};
    }

    void set_leaf(int32_t pos, Node leaf) {
        int64_t i = leaves_ + pos;
        node_[i] = leaf;
        for (i >>= 1; i >= 1; i >>= 1) node_[i] = join(node_[2 * i], node_[2 * i + 1]);
    }

    // Slide the live items to positions 0..size-1, keeping their order.
    void compact() {
        int32_t next = 0;
        for (int32_t pos = 0; pos < next_pos_; ++pos) {
            const int32_t id = item_at_[pos];
            if (id == kAbsent) continue;
            Node leaf = node_[leaves_ + pos];
            leaf.pos = next;
            item_at_[pos] = kAbsent;
            node_[leaves_ + pos] = Node{};
            item_at_[next] = id;
            node_[leaves_ + next] = leaf;
            pos_of_[id] = next++;
        }
        next_pos_ = next;
        for (int64_t i = leaves_ - 1; i >= 1; --i) node_[i] = join(node_[2 * i], node_[2 * i + 1]);
    }

    int64_t leaves_ = 1;
    int32_t next_pos_ = 0;
    std::vector<Node> node_;        // node_[1] is the root; leaves at [leaves_, 2 * leaves_)
    std::vector<int32_t> pos_of_;   // id -> position, or kAbsent
    std::vector<int32_t> item_at_;  // position -> id, or kAbsent
};

}  // namespace lcr::sim
