// The CUDA engine's kernels (csrc/common/slab_kernels.h) compiled for the host and run on
// the warp model (warp_model.h): lcr._native.warp_model, with the signatures of lcr._cuda's
// slab_* functions so that lcr.embedding.cache drives both the same way (stream and
// device are accepted and ignored). Each launch draws its schedule from the module's
// seed (set_seed), so a failure replays exactly. slab_fused_sls runs the fused SLS
// (csrc/common/slab_fused.h) the same way.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>

#include "common/slab_engine_py.h"
#include "common/slab_fused_py.h"
#include "common/slab_kernels.h"
#include "common/slab_table_py.h"
#include "cpu/registry.h"
#include "cpu/warp_model.h"

namespace py = pybind11;

namespace lcr {
namespace {

namespace k = slab_kernels;

std::mt19937_64& schedules() {
    static std::mt19937_64 rng(0);
    return rng;
}

WarpModel next_model() { return WarpModel(schedules()()); }

void slab_probe(const py::tuple& view, uintptr_t keys_ptr, int64_t n, uintptr_t slot_of_ptr, uintptr_t readback_ptr,
                uintptr_t, int) {
    const SlabTable t = slab_table_from(view);
    const int64_t* keys = data_at<int64_t>(keys_ptr);
    int64_t* slot_of = data_at<int64_t>(slot_of_ptr);
    int64_t* readback = data_at<int64_t>(readback_ptr);
    readback[k::kMissCount] = readback[k::kBadKey] = 0;
    WarpModel model = next_model();
    model.launch((n + kWarpLanes - 1) / kWarpLanes, [&](HostWarp& w, int64_t warp) {
        k::probe_lookup(w, t, keys, n, warp * kWarpLanes + w.lane(), slot_of, readback);
    });
}

void slab_refresh(const py::tuple& view, uintptr_t slot_of_ptr, int64_t n, int64_t clock, uintptr_t hit_count_ptr,
                  uintptr_t, int) {
    const SlabTable t = slab_table_from(view);
    const int64_t* slot_of = data_at<int64_t>(slot_of_ptr);
    int64_t* hit_count = data_at<int64_t>(hit_count_ptr);
    WarpModel model = next_model();
    launch_threads(model, n, [&](HostWarp& w, int64_t p) { k::refresh_lookup(w, t, slot_of, p, clock, hit_count); });
}

void slab_insert_groups(const py::tuple& view, uintptr_t keys, uintptr_t first, uintptr_t members, uintptr_t starts,
                        int64_t groups, int64_t clock, int64_t stamp_base, uintptr_t slots, uintptr_t evicted,
                        uintptr_t, int) {
    const SlabTable t = slab_table_from(view);
    WarpModel model = next_model();
    model.launch(groups, [&](HostWarp& w, int64_t g) {
        k::insert_group(w, t, data_at<int64_t>(keys), data_at<int64_t>(first), data_at<int64_t>(members),
                        data_at<int64_t>(starts), g, clock, stamp_base, data_at<int64_t>(slots),
                        data_at<int64_t>(evicted));
    });
}

void slab_set_predictions(const py::tuple& view, uintptr_t keys, uintptr_t values, int64_t n, uintptr_t, int) {
    const SlabTable t = slab_table_from(view);
    WarpModel model = next_model();
    launch_threads(model, n, [&](HostWarp&, int64_t i) {
        k::set_prediction(t, data_at<int64_t>(keys), data_at<double>(values), i);
    });
}

// A few warps for the insert, so that each one walks the grid-stride loop over slabsets.
constexpr int64_t kModelInsertWarps = 6;

void slab_fused_sls(const py::tuple& view, const py::tuple& batch, uintptr_t, int) {
    namespace f = slab_fused;
    const SlabTable t = slab_table_from(view);
    const f::FusedBatch b = fused_batch_from(batch);
    std::fill(b.counters, b.counters + f::kCounters, int64_t(0));
    f::with_row_format(b, f::piece_bytes(b), [&](auto element, auto piece) {
        using E = decltype(element);
        constexpr int kBytes = decltype(piece)::value;
        WarpModel pool = next_model();
        pool.launch(b.bags, [&](HostWarp& w, int64_t bag) { f::pool_bag<HostWarp, E, kBytes>(w, t, b, bag); });
        const int64_t warps = std::min(f::touched_capacity(b.n, t.num_slabsets), kModelInsertWarps);
        WarpModel insert = next_model();
        insert.launch(warps, [&](HostWarp& w, int64_t warp) { f::insert_misses<HostWarp, kBytes>(w, t, b, warp, warps); });
    });
}

// Deliberately broken warp code, to show the model stops at each kind of undefined
// behaviour it claims to detect ("ok" runs a correct collective).
void selftest(const std::string& kind) {
    WarpModel model(schedules()());
    if (kind == "ok") {
        model.launch(3, [](HostWarp& w, int64_t) {
            if (w.ballot(w.lane() % 2 == 0) != 0x55555555u) throw std::runtime_error("wrong ballot");
            if (w.shfl_xor(w.lane(), 1) != (w.lane() ^ 1)) throw std::runtime_error("wrong shfl_xor");
        });
    } else if (kind == "divergent") {
        model.launch(1, [](HostWarp& w, int64_t) {
            if (w.lane() == 0) w.ballot(true);
            else w.sync();
        });
    } else if (kind == "partial") {
        model.launch(1, [](HostWarp& w, int64_t) {
            if (w.lane() == 7) return;
            w.sync();
        });
    } else {
        throw std::invalid_argument("selftest kind: ok, divergent or partial");
    }
}

}  // namespace

void register_slab_warp_model(py::module_& m) {
    py::module_ sub = m.def_submodule("warp_model", "lcr._cuda's SlabHashCache kernels run on the host warp model");
    sub.def("set_seed", [](uint64_t seed) { schedules().seed(seed); }, py::arg("seed"),
            "Seed the random warp and lane schedules of the following launches.");
    def_slab_engine(sub, &slab_probe, &slab_refresh, &slab_insert_groups, &slab_set_predictions);
    def_slab_fused(sub, &slab_fused_sls);
    sub.def("selftest", &selftest, py::arg("kind"), "Run deliberately broken warp code (the model must abort).");
}

}  // namespace lcr
