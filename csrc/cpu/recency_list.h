// A doubly linked list of ids threaded through flat arrays, newest at the head:
// LRU's recency order and SIEVE's FIFO queue, O(1) per operation.
#pragma once
#include <cstdint>
#include <vector>

namespace lcr::sim {

class RecencyList {
public:
    static constexpr int32_t kNone = -1;

    explicit RecencyList(int64_t n_ids) : newer_(n_ids, kNone), older_(n_ids, kNone), present_(n_ids, 0) {}

    bool contains(int32_t id) const { return present_[id] != 0; }
    int64_t size() const { return size_; }
    int32_t newest() const { return newest_; }
    int32_t oldest() const { return oldest_; }
    // The neighbour towards the head (inserted later), or kNone.
    int32_t newer(int32_t id) const { return newer_[id]; }

    void push_newest(int32_t id) {
        present_[id] = 1;
        older_[id] = newest_;
        newer_[id] = kNone;
        if (newest_ != kNone) newer_[newest_] = id;
        newest_ = id;
        if (oldest_ == kNone) oldest_ = id;
        ++size_;
    }

    void remove(int32_t id) {
        const int32_t older = older_[id], newer = newer_[id];
        (older != kNone ? newer_[older] : oldest_) = newer;
        (newer != kNone ? older_[newer] : newest_) = older;
        present_[id] = 0;
        --size_;
    }

    void move_to_newest(int32_t id) {
        if (id == newest_) return;
        remove(id);
        push_newest(id);
    }

private:
    std::vector<int32_t> newer_, older_;
    std::vector<uint8_t> present_;
    int32_t newest_ = kNone, oldest_ = kNone;
    int64_t size_ = 0;
};

// An LRU cache of ids: the LRU core, and the LRU that LARU's credit rule runs alongside.
// The spec is lcr.policies.lru.LRU.
class LruCache {
public:
    struct Step {
        bool hit;
        int32_t victim;  // RecencyList::kNone when nothing was evicted
    };

    LruCache(int64_t capacity, int64_t n_ids) : order_(n_ids), capacity_(capacity) {}

    Step access(int32_t id) {
        if (order_.contains(id)) {
            order_.move_to_newest(id);
            return {true, RecencyList::kNone};
        }
        int32_t victim = RecencyList::kNone;
        if (order_.size() >= capacity_) {
            victim = order_.oldest();
            order_.remove(victim);
        }
        order_.push_newest(id);
        return {false, victim};
    }

private:
    RecencyList order_;
    int64_t capacity_;
};

}  // namespace lcr::sim
