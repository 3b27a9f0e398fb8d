// A binary max-heap of ids whose priorities can change in place (each id knows its
// slot), so it never holds more entries than cached items.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lcr::sim {

class IndexedMaxHeap {
public:
    explicit IndexedMaxHeap(int64_t n_ids) : slot_of_(n_ids, kAbsent), prio_(n_ids, 0) {}

    bool contains(int32_t id) const { return slot_of_[id] != kAbsent; }
    int64_t size() const { return static_cast<int64_t>(heap_.size()); }

    void push(int32_t id, int64_t prio) {
        prio_[id] = prio;
        heap_.push_back(id);
        slot_of_[id] = static_cast<int32_t>(heap_.size() - 1);
        sift_up(heap_.size() - 1);
    }

    void update(int32_t id, int64_t prio) {
        const int64_t before = prio_[id];
        prio_[id] = prio;
        if (prio > before) sift_up(slot_of_[id]);
        else sift_down(slot_of_[id]);
    }

    int32_t pop_max() {
        const int32_t top = heap_[0];
        slot_of_[top] = kAbsent;
        const int32_t last = heap_.back();
        heap_.pop_back();
        if (!heap_.empty()) {
            heap_[0] = last;
            slot_of_[last] = 0;
            sift_down(0);
        }
        return top;
    }

private:
    static constexpr int32_t kAbsent = -1;

    void place(std::size_t slot, int32_t id) {
        heap_[slot] = id;
        slot_of_[id] = static_cast<int32_t>(slot);
    }

    void sift_up(std::size_t slot) {
        const int32_t id = heap_[slot];
        const int64_t p = prio_[id];
        while (slot > 0) {
            const std::size_t parent = (slot - 1) / 2;
            if (prio_[heap_[parent]] >= p) break;
            place(slot, heap_[parent]);
            slot = parent;
        }
        place(slot, id);
    }

    void sift_down(std::size_t slot) {
        const int32_t id = heap_[slot];
        const int64_t p = prio_[id];
        const std::size_t n = heap_.size();
        for (;;) {
            std::size_t child = 2 * slot + 1;
            if (child >= n) break;
            if (child + 1 < n && prio_[heap_[child + 1]] > prio_[heap_[child]]) ++child;
            if (prio_[heap_[child]] <= p) break;
            place(slot, heap_[child]);
            slot = child;
        }
        place(slot, id);
    }

    std::vector<int32_t> heap_;
    std::vector<int32_t> slot_of_;
    std::vector<int64_t> prio_;
};

}  // namespace lcr::sim
