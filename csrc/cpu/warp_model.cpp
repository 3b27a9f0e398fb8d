// The host warp model's scheduler (see warp_model.h).
//
// A lane is entered once with swapcontext (onto its own stack); after that lanes and the
// scheduler switch with _setjmp/_longjmp, which skip the signal-mask system calls of
// swapcontext and make a switch ~50x cheaper. Fortified longjmp rejects jumps between
// stacks, hence the #undef before any system header.
#undef _FORTIFY_SOURCE
#include <csetjmp>

#include "cpu/warp_model.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace lcr {

namespace {
constexpr size_t kLaneStack = 128 * 1024;
const char* op_name(WarpOp op) {
    switch (op) {
        case WarpOp::kBallot: return "ballot";
        case WarpOp::kShfl: return "shfl";
        case WarpOp::kShflXor: return "shfl_xor";
        default: return "syncwarp";
    }
}
}  // namespace

enum class LaneStatus : uint8_t { kRunnable, kWaiting, kDone };

struct ModelLane {
    ucontext_t context{};  // entry only
    jmp_buf resume_at;
    bool started = false;
    LaneStatus status = LaneStatus::kDone;
    WarpOp op = WarpOp::kSync;
    int line = 0;
    int arg = 0;
    uint64_t value = 0;
    uint64_t result = 0;
};

struct ModelWarpRun {
    int64_t index = -1;  // -1: slot free
    ModelLane lanes[kWarpLanes];
    HostWarp handles[kWarpLanes];
    std::vector<char> stacks = std::vector<char>(kWarpLanes * kLaneStack);
    int waiting = 0;
    int done = 0;
    std::exception_ptr error;
};

namespace {
thread_local HostWarp* g_starting = nullptr;  // the lane lane_entry() is about to run
}

uint64_t HostWarp::meet(WarpOp op, uint64_t value, int arg, int line) {
    ModelLane& me = run_->lanes[lane_];
    me.op = op;
    me.value = value;
    me.arg = arg;
    me.line = line;
    me.status = LaneStatus::kWaiting;
    run_->waiting += 1;
    if (!_setjmp(me.resume_at)) _longjmp(model_->back_to_scheduler_, 1);
    return me.result;
}

void HostWarp::pause() {
    if (!_setjmp(run_->lanes[lane_].resume_at)) _longjmp(model_->back_to_scheduler_, 1);
}

WarpModel::WarpModel(uint64_t seed, int resident) : rng_(seed), resident_(std::max(resident, 1)) {}
WarpModel::~WarpModel() = default;

void WarpModel::lane_entry() {
    HostWarp* warp = g_starting;
    ModelWarpRun* run = warp->run_;
    try {
        (*warp->model_->body_)(*warp, run->index);
    } catch (...) {
        if (!run->error) run->error = std::current_exception();
    }
    run->lanes[warp->lane_].status = LaneStatus::kDone;
    run->done += 1;
    _longjmp(warp->model_->back_to_scheduler_, 1);
}

void WarpModel::start(ModelWarpRun& run, int64_t index) {
    run.index = index;
    run.waiting = run.done = 0;
    run.error = nullptr;
    for (int lane = 0; lane < kWarpLanes; ++lane) {
        ModelLane& l = run.lanes[lane];
        getcontext(&l.context);
        l.context.uc_stack.ss_sp = run.stacks.data() + lane * kLaneStack;
        l.context.uc_stack.ss_size = kLaneStack;
        l.context.uc_link = nullptr;
        makecontext(&l.context, &WarpModel::lane_entry, 0);
        l.status = LaneStatus::kRunnable;
        l.started = false;
        l.result = 0;
        run.handles[lane].model_ = this;
        run.handles[lane].run_ = &run;
        run.handles[lane].lane_ = lane;
        runnable_.emplace_back(&run, -1 - lane);  // negative: not started yet
    }
}

void WarpModel::resume(ModelWarpRun& run, int lane) {
    if (lane < 0) lane = -1 - lane;
    ModelLane& l = run.lanes[lane];
    if (!_setjmp(back_to_scheduler_)) {
        if (l.started) _longjmp(l.resume_at, 1);
        l.started = true;  // first resume: enter lane_entry on the lane's own stack
        g_starting = &run.handles[lane];
        swapcontext(&scheduler_, &l.context);
    }
    if (run.error) std::rethrow_exception(run.error);
    if (run.lanes[lane].status == LaneStatus::kRunnable) runnable_.emplace_back(&run, lane);  // paused
    settle(run);
}

// Once no lane of `run` can move on its own: finish it, or meet at its collective.
void WarpModel::settle(ModelWarpRun& run) {
    if (run.waiting + run.done < kWarpLanes) return;
    if (run.done == kWarpLanes) {
        run.index = -1;
        return;
    }
    const ModelLane* lanes = run.lanes;
    int first = 0;
    while (lanes[first].status != LaneStatus::kWaiting) ++first;
    const ModelLane& a = lanes[first];
    if (run.done > 0) {
        throw std::logic_error("warp model: warp " + std::to_string(run.index) + ": " + std::to_string(run.done) +
                               " lanes left while the others wait at " + op_name(a.op) + " (line " +
                               std::to_string(a.line) + "): partial mask");
    }
    for (int lane = 0; lane < kWarpLanes; ++lane) {
        const ModelLane& b = lanes[lane];
        if (b.op != a.op || b.line != a.line) {
            throw std::logic_error("warp model: warp " + std::to_string(run.index) + ": divergent collectives: lane " +
                                   std::to_string(first) + " at " + op_name(a.op) + " (line " +
                                   std::to_string(a.line) + "), lane " + std::to_string(lane) + " at " +
                                   op_name(b.op) + " (line " + std::to_string(b.line) + ")");
        }
    }
    uint64_t ballot = 0;
    for (int lane = 0; lane < kWarpLanes; ++lane) ballot |= (lanes[lane].value & 1) << lane;
    for (int lane = 0; lane < kWarpLanes; ++lane) {
        ModelLane& l = run.lanes[lane];
        switch (l.op) {
            case WarpOp::kBallot: l.result = ballot; break;
            case WarpOp::kShfl: l.result = lanes[l.arg & 31].value; break;
            case WarpOp::kShflXor: l.result = lanes[(lane ^ l.arg) & 31].value; break;
            case WarpOp::kSync: l.result = 0; break;
        }
    }
    run.waiting = 0;
    for (int lane = 0; lane < kWarpLanes; ++lane) {
        run.lanes[lane].status = LaneStatus::kRunnable;
        runnable_.emplace_back(&run, lane);
    }
}

void WarpModel::launch(int64_t warps, const WarpBody& body) {
    if (warps <= 0) return;
    body_ = &body;
    std::vector<int64_t> order(static_cast<size_t>(warps));
    std::iota(order.begin(), order.end(), int64_t(0));
    std::shuffle(order.begin(), order.end(), rng_);
    while (static_cast<int>(runs_.size()) < resident_) runs_.push_back(std::make_unique<ModelWarpRun>());
    for (auto& run : runs_) run->index = -1;
    runnable_.clear();
    size_t next = 0;
    while (true) {
        for (auto& run : runs_) {
            if (run->index < 0 && next < order.size()) start(*run, order[next++]);
        }
        if (runnable_.empty()) break;
        std::uniform_int_distribution<size_t> pick(0, runnable_.size() - 1);
        const size_t at = pick(rng_);
        const auto [run, lane] = runnable_[at];
        runnable_[at] = runnable_.back();
        runnable_.pop_back();
        resume(*run, lane);
    }
    body_ = nullptr;
}

}  // namespace lcr
