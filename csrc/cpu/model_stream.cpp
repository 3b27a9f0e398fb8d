// The online LightGBM model's per-access bookkeeping, over a batch of accesses at a time:
// feature rows (lcr.predict.features) and the sampled training history (lcr.predict.labels).
//
// Each access depends on the key's previous one, so the work is a sequential loop; in
// Python it cost ~15 us per access (numpy calls on 26-float rows, three histories),
// here well under one. The rules are the Python modules' (their docstrings say why); the
// arithmetic is the same IEEE operations in the same order, so the rows and samples are
// bit-identical. The EDC decay factors (decay ** delta) come in precomputed by numpy:
// its power differs from libm's in the last bit for ~5% of arguments on AVX-512 machines.
// Separate multiply and add: baseline x86-64 has no FMA to fuse them (-march unset).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "cpu/model_stream.h"
#include "cpu/registry.h"

namespace py = pybind11;

namespace lcr {
namespace {

using Doubles = py::array_t<double, py::array::c_style>;
using Int64s = py::array_t<int64_t, py::array::c_style>;
using Flags = py::array_t<uint8_t, py::array::c_style>;

void require(bool ok, const std::string& what) {
    if (!ok) raise_value_error(what);
}

// A full-layout row's columns: deltas, EDCs, count, age, static fields.
struct Layout {
    int64_t deltas, edcs, count, age, statics, width;
};

// Record accesses in order into the feature matrix; out[i] = access i's row right after it.
// first[i]: the key's first access ever (its slot was just made: NaN deltas, zero EDCs and
// count). factors: n x edcs decay factors (unused rows for first accesses); statics: n x
// fields or empty. compact: time, key, count, latest interval (no EDCs, age or statics).
void update_rows(Doubles rows, Doubles last_time, Doubles first_time, Int64s slots, Doubles times, Flags first,
                 Doubles factors, Doubles statics, bool compact, int64_t n_deltas, int64_t n_edcs, Doubles out) {
    const int64_t n = slots.size(), width = rows.ndim() == 2 ? rows.shape(1) : -1;
    const int64_t capacity = rows.ndim() == 2 ? rows.shape(0) : 0;
    const Layout lay{0, n_deltas, n_deltas + n_edcs, n_deltas + n_edcs + 1, n_deltas + n_edcs + 2, width};
    const int64_t fields = statics.size() ? statics.shape(1) : 0;
    require(times.size() == n && first.size() == n && out.ndim() == 2 && out.shape(0) == n && out.shape(1) == width,
            "update_rows: slots, times, first and out must describe the same accesses");
    require(last_time.size() >= capacity && first_time.size() >= capacity, "update_rows: per-slot arrays too short");
    require(compact ? width >= 4 : (factors.ndim() == 2 && factors.shape(0) == n && factors.shape(1) == n_edcs &&
                                    lay.statics + fields <= width && (!fields || statics.shape(0) == n)),
            "update_rows: factors or statics do not match the layout");
    double* matrix = rows.mutable_data();
    double* last = last_time.mutable_data();
    double* first_at = first_time.mutable_data();
    const int64_t* slot = slots.data();
    const double* t = times.data();
    const uint8_t* is_first = first.data();
    const double* factor = compact ? nullptr : factors.data();
    const double* fixed = fields ? statics.data() : nullptr;
    double* written = out.mutable_data();
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = slot[i];
        require(s >= 0 && s < capacity, "update_rows: slot out of range");
        double* row = matrix + s * width;
        const double delta = t[i] - last[s];
        if (is_first[i]) first_at[s] = t[i];
        last[s] = t[i];
        if (compact) {
            row[0] = t[i];
            row[2] += 1;
            if (!is_first[i]) row[3] = delta;
        } else {
            double* edc = row + lay.edcs;
            if (!is_first[i]) {
                std::memmove(row + 1, row, (n_deltas - 1) * sizeof(double));
                row[0] = delta;
                const double* f = factor + i * n_edcs;
                for (int64_t e = 0; e < n_edcs; ++e) edc[e] *= f[e];
            }
            for (int64_t e = 0; e < n_edcs; ++e) edc[e] += 1.0;
            row[lay.count] += 1;
            row[lay.age] = t[i] - first_at[s];
            if (fixed) std::memcpy(row + lay.statics, fixed + i * fields, fields * sizeof(double));
        }
        std::memcpy(written + i * width, row, width * sizeof(double));
    }
}

// Each key's unlabelled sample (its serial number), for lcr.predict.labels.SampledHistory,
// which owns the ring (keys, times, rows, intervals) as numpy arrays.
class PendingSamples {
public:
    // Accesses in order: label the key's pending sample (if still in the ring), then take
    // the access as a sample where sampled[i]. Returns the new total of samples ever added.
    int64_t record(Int64s ring_keys, Doubles ring_times, Doubles ring_rows, Doubles ring_interval, int64_t total,
                   Int64s keys, Doubles times, Doubles rows, Flags sampled) {
        const int64_t capacity = ring_keys.size(), n = keys.size();
        const int64_t width = ring_rows.ndim() == 2 ? ring_rows.shape(1) : -1;
        require(capacity > 0 && ring_times.size() == capacity && ring_interval.size() == capacity &&
                    ring_rows.ndim() == 2 && ring_rows.shape(0) == capacity,
                "PendingSamples.record: ring arrays of different lengths");
        require(times.size() == n && sampled.size() == n && rows.ndim() == 2 && rows.shape(0) == n &&
                    rows.shape(1) == width,
                "PendingSamples.record: keys, times, rows and sampled must describe the same accesses");
        int64_t* ring_key = ring_keys.mutable_data();
        double* ring_time = ring_times.mutable_data();
        double* ring_row = ring_rows.mutable_data();
        double* interval = ring_interval.mutable_data();
        const int64_t* key = keys.data();
        const double* t = times.data();
        const double* row = rows.data();
        const uint8_t* take = sampled.data();
        for (int64_t i = 0; i < n; ++i) {
            const auto pending = serial_.find(key[i]);
            if (pending != serial_.end()) {
                const int64_t serial = pending->second;
                serial_.erase(pending);
                if (serial > total - capacity) {  // still in the ring
                    const int64_t at = serial % capacity;
                    interval[at] = t[i] - ring_time[at];
                }
            }
            if (!take[i]) continue;
            const int64_t at = total % capacity;
            if (total >= capacity) {  // overwriting the oldest sample: drop it from pending
                const auto old = serial_.find(ring_key[at]);
                if (old != serial_.end() && old->second == total - capacity) serial_.erase(old);
            }
            ring_key[at] = key[i];
            ring_time[at] = t[i];
            std::memcpy(ring_row + at * width, row + i * width, width * sizeof(double));
            interval[at] = std::numeric_limits<double>::quiet_NaN();
            serial_[key[i]] = total++;
        }
        return total;
    }

    size_t size() const { return serial_.size(); }

private:
    std::unordered_map<int64_t, int64_t> serial_;
};

}  // namespace

void register_model_stream(py::module_& m) {
    m.def("update_feature_rows", &update_rows, py::arg("rows").noconvert(), py::arg("last_time").noconvert(),
          py::arg("first_time").noconvert(), py::arg("slots"), py::arg("times"), py::arg("first"), py::arg("factors"),
          py::arg("statics"), py::arg("compact"), py::arg("n_deltas"), py::arg("n_edcs"), py::arg("out").noconvert(),
          "Record accesses into lcr.predict.features' matrix in order; out[i] is access i's row after it.");
    py::class_<PendingSamples>(m, "PendingSamples", "Each key's unlabelled sample (lcr.predict.labels).")
        .def(py::init<>())
        .def("record", &PendingSamples::record, py::arg("ring_keys").noconvert(), py::arg("ring_times").noconvert(),
             py::arg("ring_rows").noconvert(), py::arg("ring_interval").noconvert(), py::arg("total"),
             py::arg("keys"), py::arg("times"), py::arg("rows"), py::arg("sampled"),
             "Label pending samples and take the sampled accesses, in order; returns the new total.")
        .def("__len__", &PendingSamples::size);
}

}  // namespace lcr
