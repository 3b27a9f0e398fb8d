// S3-FIFO core; the spec is lcr.policies.s3fifo.S3FIFO (libCacheSim's S3FIFO, unit sizes).
#include <algorithm>
#include <vector>

#include "cpu/recency_list.h"
#include "cpu/registry.h"
#include "cpu/sim_cores.h"
#include "cpu/sim_replay.h"

namespace lcr {
namespace {

using namespace sim;

py::tuple replay_s3fifo(const Array<int32_t>& ids, int64_t n_ids, int64_t capacity, int64_t small_size,
                        int64_t ghost_size, int64_t move_to_main, bool record_evictions) {
    checked_capacity(capacity);
    return run_core(ids, n_ids, record_evictions, [&](const Requests& req, Recorder& rec, Counters&) {
        RecencyList small(req.n_ids), main(req.n_ids), ghost(req.n_ids);  // FIFOs: oldest() leaves first
        std::vector<int32_t> freq(req.n_ids, 0);
        const int64_t main_size = capacity - small_size;
        bool warm = false;  // whether anything was evicted yet
        int64_t t = 0;
        auto evict_small = [&] {
            while (small.size() > 0) {
                const int32_t id = small.oldest();
                small.remove(id);
                if (freq[id] >= move_to_main) {
                    freq[id] = 0;
                    main.push_newest(id);
                    continue;
                }
                if (ghost_size > 0) {
                    if (ghost.size() >= ghost_size) ghost.remove(ghost.oldest());
                    ghost.push_newest(id);
                }
                rec.evicted(t, id);
                return;
            }
        };
        auto evict_main = [&] {
            while (main.size() > 0) {
                const int32_t id = main.oldest();
                main.remove(id);
                if (freq[id] >= 1) {
                    freq[id] = std::min(freq[id], 3) - 1;
                    main.push_newest(id);
                    continue;
                }
                rec.evicted(t, id);
                return;
            }
        };
        for (; t < req.n; ++t) {
            const int32_t id = req.ids[t];
            if (small.contains(id) || main.contains(id)) {
                ++freq[id];
                rec.hit(t);
                continue;
            }
            bool to_main = ghost.contains(id);
            if (to_main) ghost.remove(id);
            rec.miss(t);
            if (small.size() + main.size() >= capacity) {
                warm = true;
                while (small.size() + main.size() >= capacity) {  // S may only have moved its keys to M
                    if (main.size() > main_size || small.size() == 0)
                        evict_main();
                    else
                        evict_small();
                }
            } else if (!warm && small.size() >= small_size) {
                to_main = true;
            }
            freq[id] = 0;
            (to_main ? main : small).push_newest(id);
        }
    });
}

}  // namespace

void register_sim_s3fifo(py::module_& m) {
    m.def("replay_s3fifo", &replay_s3fifo, py::arg("ids"), py::arg("n_ids"), py::arg("capacity"),
          py::arg("small_size"), py::arg("ghost_size"), py::arg("move_to_main"), py::arg("record_evictions"));
}
static const SimCore registered(register_sim_s3fifo);

}  // namespace lcr
