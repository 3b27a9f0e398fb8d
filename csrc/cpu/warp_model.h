// A host model of CUDA warps, to run device code (csrc/common/slab_kernels.h) in CI.
//
// Each lane is a coroutine (ucontext) on its own stack, and the scheduler resumes one
// lane at a time, picked at random among the lanes of a few resident warps. A lane runs
// until it reaches a meeting point: a collective (ballot, shfl, shfl_xor, sync), where
// it waits for the 31 others, or an atomic, where it merely lets others run first. So
// plain reads and writes of different lanes and warps interleave in random order
// between meeting points, the way independent thread scheduling allows.
//
// The model aborts (std::logic_error) where CUDA's behaviour is undefined: lanes of a
// warp waiting at different collectives (different source lines or kinds), or some lanes
// waiting at a collective while others have left the kernel (a partial mask).
// Memory is sequentially consistent here, so it checks the warp protocol and the
// ordering of reads and writes around meeting points, not the GPU's weaker memory model.
#pragma once
#include <ucontext.h>

#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "common/warp.h"

namespace lcr {

class WarpModel;
struct ModelWarpRun;

enum class WarpOp : uint8_t { kBallot, kShfl, kShflXor, kSync };

class HostWarp {
public:
    int lane() const { return lane_; }

    unsigned ballot(bool pred, int line = __builtin_LINE()) {
        return static_cast<unsigned>(meet(WarpOp::kBallot, pred ? 1 : 0, 0, line));
    }
    template <class T>
    T shfl(T v, int src, int line = __builtin_LINE()) {
        return from_bits<T>(meet(WarpOp::kShfl, to_bits(v), src, line));
    }
    template <class T>
    T shfl_xor(T v, int mask, int line = __builtin_LINE()) {
        return from_bits<T>(meet(WarpOp::kShflXor, to_bits(v), mask, line));
    }
    void sync(int line = __builtin_LINE()) { meet(WarpOp::kSync, 0, 0, line); }

    template <class T>
    T atomic_add(T* p, T v) {
        pause();
        const T old = *p;
        *p = old + v;
        return old;
    }
    template <class T>
    T atomic_cas(T* p, T expected, T desired) {
        pause();
        const T old = *p;
        if (old == expected) *p = desired;
        return old;
    }

private:
    friend class WarpModel;
    template <class T>
    static uint64_t to_bits(T v) {
        static_assert(sizeof(T) <= 8, "warp model shuffles at most 64 bits");
        uint64_t bits = 0;
        std::memcpy(&bits, &v, sizeof(T));
        return bits;
    }
    template <class T>
    static T from_bits(uint64_t bits) {
        T v;
        std::memcpy(&v, &bits, sizeof(T));
        return v;
    }
    uint64_t meet(WarpOp op, uint64_t value, int arg, int line);
    void pause();

    WarpModel* model_ = nullptr;
    ModelWarpRun* run_ = nullptr;
    int lane_ = 0;
};

using WarpBody = std::function<void(HostWarp&, int64_t)>;

class WarpModel {
public:
    // resident: warps in flight at once (their lanes interleave); seed: the schedule.
    explicit WarpModel(uint64_t seed, int resident = 4);
    ~WarpModel();

    // body(warp, index) for every index in [0, warps), each as one warp of 32 lanes,
    // warps started in random order. Throws std::logic_error on a protocol violation.
    void launch(int64_t warps, const WarpBody& body);

private:
    friend class HostWarp;
    void start(ModelWarpRun& run, int64_t index);
    void resume(ModelWarpRun& run, int lane);
    void settle(ModelWarpRun& run);
    static void lane_entry();

    std::mt19937_64 rng_;
    int resident_;
    ucontext_t scheduler_{};
    jmp_buf back_to_scheduler_;
    std::vector<std::unique_ptr<ModelWarpRun>> runs_;
    std::vector<std::pair<ModelWarpRun*, int>> runnable_;
    const WarpBody* body_ = nullptr;
};

// Run a thread-per-item kernel body in the model: item = warp * 32 + lane.
inline void launch_threads(WarpModel& model, int64_t items, const std::function<void(HostWarp&, int64_t)>& body) {
    model.launch((items + kWarpLanes - 1) / kWarpLanes, [&](HostWarp& w, int64_t warp) {
        const int64_t item = warp * kWarpLanes + w.lane();
        if (item < items) body(w, item);
    });
}

}  // namespace lcr
