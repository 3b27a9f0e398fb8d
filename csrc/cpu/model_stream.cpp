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

// The feature matrix and its layout, for one batch of accesses.
struct FeatureMatrix {
    double* rows;
    double* last;
    double* first_at;
    int64_t capacity, width, n_deltas, n_edcs;
    bool compact;

    // One access to slot s at t (first: the key's first access ever, its slot just made:
    // NaN deltas, zero EDCs and count); factor: the EDCs' decay factors; fixed: static
    // fields or nullptr. Full layout: deltas, EDCs, count, age, static fields; compact:
    // time, key, count, latest interval.
    void update(int64_t s, double t, bool first, const double* factor, const double* fixed, int64_t fields) {
        require(s >= 0 && s < capacity, "update_feature_rows: slot out of range");
        double* row = rows + s * width;
        const double delta = t - last[s];
        if (first) first_at[s] = t;
        last[s] = t;
        if (compact) {
            row[0] = t;
            row[2] += 1;
            if (!first) row[3] = delta;
            return;
        }
        double* edc = row + n_deltas;
        if (!first) {
            std::memmove(row + 1, row, (n_deltas - 1) * sizeof(double));
            row[0] = delta;
            for (int64_t e = 0; e < n_edcs; ++e) edc[e] *= factor[e];
        }
        for (int64_t e = 0; e < n_edcs; ++e) edc[e] += 1.0;
        row[n_deltas + n_edcs] += 1;                   // count
        row[n_deltas + n_edcs + 1] = t - first_at[s];  // age
        if (fixed) std::memcpy(row + n_deltas + n_edcs + 2, fixed, fields * sizeof(double));
    }
};

FeatureMatrix feature_matrix(Doubles& rows, Doubles& last_time, Doubles& first_time, bool compact, int64_t n_deltas,
                             int64_t n_edcs, int64_t fields) {
    require(rows.ndim() == 2, "update_feature_rows: rows must be a matrix");
    const int64_t capacity = rows.shape(0), width = rows.shape(1);
    require(last_time.size() >= capacity && first_time.size() >= capacity, "update_feature_rows: per-slot arrays too short");
    require(compact ? width >= 4 : n_deltas >= 1 && n_deltas + n_edcs + 2 + fields <= width,
            "update_feature_rows: the layout does not fit the rows");
    return {rows.mutable_data(), last_time.mutable_data(), first_time.mutable_data(), capacity, width, n_deltas,
            n_edcs, compact};
}

// Record accesses in order; out[i] = access i's row right after it. factors: n x edcs decay
// factors (rows of first accesses unused); statics: n x fields, or empty.
void update_rows(Doubles rows, Doubles last_time, Doubles first_time, Int64s slots, Doubles times, Flags first,
                 Doubles factors, Doubles statics, bool compact, int64_t n_deltas, int64_t n_edcs, Doubles out) {
    const int64_t n = slots.size(), fields = statics.size() ? statics.shape(1) : 0;
    FeatureMatrix matrix = feature_matrix(rows, last_time, first_time, compact, n_deltas, n_edcs, fields);
    require(times.size() == n && first.size() == n && out.ndim() == 2 && out.shape(0) == n &&
                out.shape(1) == matrix.width,
            "update_feature_rows: slots, times, first and out must describe the same accesses");
    require(compact || (factors.ndim() == 2 && factors.shape(0) == n && factors.shape(1) == n_edcs &&
                        (!fields || statics.shape(0) == n)),
            "update_feature_rows: factors or statics do not match the accesses");
    const int64_t* slot = slots.data();
    const double* t = times.data();
    const uint8_t* is_first = first.data();
    double* written = out.mutable_data();
    for (int64_t i = 0; i < n; ++i) {
        matrix.update(slot[i], t[i], is_first[i], compact ? nullptr : factors.data() + i * n_edcs,
                      fields ? statics.data() + i * fields : nullptr, fields);
        std::memcpy(written + i * matrix.width, matrix.rows + slot[i] * matrix.width, matrix.width * sizeof(double));
    }
}

// One access (the per-access path: no arrays to build for it).
void update_row(Doubles rows, Doubles last_time, Doubles first_time, int64_t slot, double t, bool first,
                Doubles factor, Doubles statics, bool compact, int64_t n_deltas, int64_t n_edcs) {
    const int64_t fields = statics.size();
    FeatureMatrix matrix = feature_matrix(rows, last_time, first_time, compact, n_deltas, n_edcs, fields);
    require(compact || factor.size() == n_edcs, "update_feature_row: factors do not match the layout");
    matrix.update(slot, t, first, compact ? nullptr : factor.data(), fields ? statics.data() : nullptr, fields);
}

// The sampled history's ring (keys, times, rows, intervals: numpy arrays that
// lcr.predict.labels.SampledHistory owns and reads) and each key's unlabelled sample (its
// serial number), recorded into access by access.
class PendingSamples {
public:
    PendingSamples(Int64s ring_keys, Doubles ring_times, Doubles ring_rows, Doubles ring_interval)
        : keys_(ring_keys), times_(ring_times), rows_(ring_rows), interval_(ring_interval) {
        capacity_ = keys_.size();
        width_ = rows_.ndim() == 2 ? rows_.shape(1) : -1;
        require(capacity_ > 0 && times_.size() == capacity_ && interval_.size() == capacity_ && rows_.ndim() == 2 &&
                    rows_.shape(0) == capacity_,
                "PendingSamples: ring arrays of different lengths");
    }

    // Accesses in order: label the key's pending sample (if still in the ring), then take
    // the access as a sample where sampled[i]. Returns the new total of samples ever added.
    int64_t record(int64_t total, Int64s keys, Doubles times, Doubles rows, Flags sampled) {
        const int64_t n = keys.size();
        require(times.size() == n && sampled.size() == n && rows.ndim() == 2 && rows.shape(0) == n &&
                    rows.shape(1) == width_,
                "PendingSamples.record: keys, times, rows and sampled must describe the same accesses");
        const int64_t* key = keys.data();
        const double* t = times.data();
        const double* row = rows.data();
        const uint8_t* take = sampled.data();
        for (int64_t i = 0; i < n; ++i) total = record_one(total, key[i], t[i], row + i * width_, take[i]);
        return total;
    }

    // One access (the per-access path: no arrays to build for it but its row).
    int64_t record_scalar(int64_t total, int64_t key, double t, Doubles row, bool sampled) {
        require(row.size() == width_, "PendingSamples.record_one: row of the wrong width");
        return record_one(total, key, t, row.data(), sampled);
    }

    size_t size() const { return serial_.size(); }

private:
    int64_t record_one(int64_t total, int64_t key, double t, const double* row, bool sampled) {
        double* interval = interval_.mutable_data();
        double* ring_time = times_.mutable_data();
        int64_t* ring_key = keys_.mutable_data();
        const auto pending = serial_.find(key);
        if (pending != serial_.end()) {
            const int64_t serial = pending->second;
            serial_.erase(pending);
            if (serial > total - capacity_) {  // still in the ring
                const int64_t at = serial % capacity_;
                interval[at] = t - ring_time[at];
            }
        }
        if (!sampled) return total;
        const int64_t at = total % capacity_;
        if (total >= capacity_) {  // overwriting the oldest sample: drop it from pending
            const auto old = serial_.find(ring_key[at]);
            if (old != serial_.end() && old->second == total - capacity_) serial_.erase(old);
        }
        ring_key[at] = key;
        ring_time[at] = t;
        std::memcpy(rows_.mutable_data() + at * width_, row, width_ * sizeof(double));
        interval[at] = std::numeric_limits<double>::quiet_NaN();
        serial_[key] = total;
        return total + 1;
    }

    Int64s keys_;
    Doubles times_, rows_, interval_;
    int64_t capacity_, width_;
    std::unordered_map<int64_t, int64_t> serial_;
};

}  // namespace

void register_model_stream(py::module_& m) {
    m.def("update_feature_rows", &update_rows, py::arg("rows").noconvert(), py::arg("last_time").noconvert(),
          py::arg("first_time").noconvert(), py::arg("slots"), py::arg("times"), py::arg("first"), py::arg("factors"),
          py::arg("statics"), py::arg("compact"), py::arg("n_deltas"), py::arg("n_edcs"), py::arg("out").noconvert(),
          "Record accesses into lcr.predict.features' matrix in order; out[i] is access i's row after it.");
    m.def("update_feature_row", &update_row, py::arg("rows").noconvert(), py::arg("last_time").noconvert(),
          py::arg("first_time").noconvert(), py::arg("slot"), py::arg("t"), py::arg("first"), py::arg("factor"),
          py::arg("statics"), py::arg("compact"), py::arg("n_deltas"), py::arg("n_edcs"),
          "update_feature_rows for one access.");
    py::class_<PendingSamples>(m, "PendingSamples", "A sampled history's ring and each key's unlabelled sample (lcr.predict.labels).")
        .def(py::init<Int64s, Doubles, Doubles, Doubles>(), py::arg("ring_keys").noconvert(),
             py::arg("ring_times").noconvert(), py::arg("ring_rows").noconvert(), py::arg("ring_interval").noconvert())
        .def("record", &PendingSamples::record, py::arg("total"), py::arg("keys"), py::arg("times"), py::arg("rows"),
             py::arg("sampled"), "Label pending samples and take the sampled accesses, in order; returns the new total.")
        .def("record_one", &PendingSamples::record_scalar, py::arg("total"), py::arg("key"), py::arg("t"),
             py::arg("row"), py::arg("sampled"), "record for one access.")
        .def("__len__", &PendingSamples::size);
}

}  // namespace lcr
