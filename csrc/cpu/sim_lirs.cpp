// LIRS core; the spec is lcr.policies.lirs.LIRS (libCacheSim's LIRS step by step, unit sizes).
#include <stdexcept>
#include <vector>

#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

enum : uint8_t { kLir = 0, kHir = 1, kNonresident = 2 };

class Lirs {
public:
    Lirs(int64_t n_ids, int64_t capacity, Recorder& rec)
        : stack_(n_ids), queue_(n_ids), nonresident_(n_ids), state_(n_ids, kLir), capacity_(capacity),
          hir_limit_(resident_hir_slots(capacity)), lir_limit_(capacity - hir_limit_),
          rec_(rec) {}

    void access(int64_t t, int32_t id) {
        t_ = t;
        if (find(id)) {
            rec_.hit(t);
        } else {
            rec_.miss(t);
            load(id);
        }
        while (stack_.size() > 2 * capacity_ && nonresident_.size() > 0) {
            const int32_t old = nonresident_.oldest();
            nonresident_.remove(old);
            stack_.remove(old);
        }
    }

private:
    bool in_stack_as(int32_t id, uint8_t state) const { return stack_.contains(id) && state_[id] == state; }

    bool find(int32_t id) {
        const bool in_stack = stack_.contains(id), in_queue = queue_.contains(id);
        if (in_stack) stack_.move_to_newest(id);
        if (in_queue) queue_.move_to_newest(id);
        if (in_stack) {
            if (state_[id] == kLir) {
                prune();
                return true;
            }
            if (state_[id] == kNonresident) return false;
            if (in_queue) {  // resident HIR in S: becomes LIR
                queue_.remove(id);
                --hir_count_;
                --occupied_;
            }
            while (lir_count_ + 1 > lir_limit_) demote_lir();
            if (stack_.contains(id)) state_[id] = kLir;
            ++lir_count_;
            ++occupied_;
            return true;
        }
        if (in_queue) {  // resident HIR in Q only
            // No demotion when it would evict the hit key itself (h = 1), as in the spec.
            const bool evicts_itself = hir_count_ >= hir_limit_ && queue_.oldest() == id;
            while (lir_count_ + 1 > lir_limit_ && !evicts_itself) demote_lir();
            stack_.push_newest(id);
            state_[id] = kHir;
            return true;
        }
        return false;
    }

    void load(int32_t id) {
        if (in_stack_as(id, kNonresident)) {
            while (lir_count_ + 1 > lir_limit_) demote_lir();
            if (nonresident_.contains(id)) nonresident_.remove(id);
        } else if (lir_count_ + 1 > lir_limit_ && hir_count_ + 1 > hir_limit_) {
            while (hir_count_ + 1 > hir_limit_) evict_hir();
        }
        while (occupied_ + 1 > capacity_) {
            if (in_stack_as(id, kNonresident)) {
                while (hir_count_ >= hir_limit_) evict_hir();
                demote_lir();
            } else if (lir_count_ + 1 > lir_limit_ && hir_count_ + 1 > hir_limit_) {
                evict_hir();
            } else {
                throw std::runtime_error("LIRS could not free a slot");
            }
        }
        if (in_stack_as(id, kNonresident)) {
            state_[id] = kLir;
            ++lir_count_;
        } else if (!stack_.contains(id) && !queue_.contains(id)) {
            stack_.push_newest(id);
            if (lir_count_ + 1 <= lir_limit_) {
                state_[id] = kLir;
                ++lir_count_;
            } else {
                state_[id] = kHir;
                queue_.push_newest(id);
                ++hir_count_;
            }
        }
        ++occupied_;
    }

    void prune() {
        while (stack_.size() > 1) {
            const int32_t bottom = stack_.oldest();
            if (state_[bottom] == kLir) return;
            if (state_[bottom] == kNonresident && nonresident_.contains(bottom)) nonresident_.remove(bottom);
            stack_.remove(bottom);
        }
    }

    void demote_lir() {
        const int32_t bottom = stack_.oldest();
        stack_.remove(bottom);
        --lir_count_;
        while (hir_count_ + 1 > hir_limit_) evict_hir();
        if (!queue_.contains(bottom)) queue_.push_newest(bottom);  // as the spec's dict: no move
        ++hir_count_;
        prune();
    }

    void evict_hir() {
        const int32_t id = queue_.oldest();
        queue_.remove(id);
        --hir_count_;
        --occupied_;
        if (stack_.contains(id)) {
            state_[id] = kNonresident;
            if (!nonresident_.contains(id)) nonresident_.push_newest(id);
        }
        rec_.evicted(t_, id);
    }

    RecencyList stack_, queue_, nonresident_;  // oldest() is S's bottom, Q's and NH's front
    std::vector<uint8_t> state_;               // meaningful while the id is in S
    const int64_t capacity_, hir_limit_, lir_limit_;
    int64_t lir_count_ = 0, hir_count_ = 0, occupied_ = 0;
    Recorder& rec_;
    int64_t t_ = 0;
};

py::tuple replay_lirs(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, bool record_evictions) {
    if (checked_capacity(capacity) < 2) raise_value_error("lirs needs a cache of at least 2 items");
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        Lirs lirs(req.n_ids, capacity, rec);
        for (int64_t t = 0; t < req.n; ++t) lirs.access(t, req.ids[t]);
    });
}

}  // namespace

void register_sim_lirs(py::module_& m) {
    m.def("replay_lirs", &replay_lirs, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"),
          py::arg("record_evictions"));
}
static const SimCore registered(register_sim_lirs);

}  // namespace lcr
